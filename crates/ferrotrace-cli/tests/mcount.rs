//! `ferrotrace record` on programs built with mcount and `__fentry__` calls or patchable NOPs: Rust
//! `-Zinstrument-mcount`, `gcc -pg`, `gcc -pg -mfentry`, `gcc -pg -mnop-mcount -mrecord-mcount`, `clang -pg`,
//! `clang -fpatchable-function-entry=5`.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;
use ferrotrace_analysis::reader::Trace;
use ferrotrace_core::env;

/// `testprogs/c/mcwork.c` built with gcc and `flags` (plus -O2, no sibling calls: every call is a call).
fn mcwork(dir: &Path, out: &str, flags: &[&str]) -> PathBuf {
    let mut all = vec!["-O2", "-fno-optimize-sibling-calls", "-pthread"];
    all.extend_from_slice(flags);
    build_c(dir, "gcc", "mcwork.c", out, &all)
}

fn info_json(trace: &Path) -> serde_json::Value {
    serde_json::from_str(&ok(ft(&["info", "--json", "-i", trace.to_str().unwrap()]))).unwrap()
}

fn clean(w: &Walk) -> bool {
    w.unwound.is_empty() && w.preexisting.is_empty() && w.open_at_end.is_empty()
}

#[test]
fn rust_mcount_program_has_exactly_its_calls_in_every_run() {
    let dir = scratch("mcount_rust_fib");
    let fib = testprog_mcount("fib");
    assert_fib_exact_in_every_run(&dir, &fib);
    let (_, trace) = record(&dir, &[], &fib, &["5"]);
    let info = info_json(&trace);
    assert_eq!(info["recorded_by"], serde_json::json!(["mcount"]));
    let text = ok(ft(&["info", "-i", trace.to_str().unwrap()]));
    assert!(text.contains("recorded by  : mcount\n"), "{text}");
}

#[test]
fn c_programs_with_every_kind_of_hook_have_exactly_their_calls() {
    let dir = scratch("mcount_c_fib");
    let variants: [(&str, &str, &[&str], &str); 6] = [
        ("gcc", "pg", &["-pg"], "mcount"),
        ("gcc", "fentry", &["-pg", "-mfentry"], "fentry"),
        (
            "gcc",
            "nop",
            &[
                "-pg",
                "-mnop-mcount",
                "-mrecord-mcount",
                "-fno-pie",
                "-no-pie",
            ],
            "patchable-nop",
        ),
        (
            "gcc",
            "nop_fentry",
            &[
                "-pg",
                "-mfentry",
                "-mnop-mcount",
                "-mrecord-mcount",
                "-fno-pie",
                "-no-pie",
            ],
            "patchable-nop",
        ),
        ("clang-16", "clang_pg", &["-pg"], "mcount"),
        (
            "clang-16",
            "clang_pfe",
            &["-fpatchable-function-entry=5"],
            "patchable-nop",
        ),
    ];
    for (compiler, name, flags, kind) in variants {
        let mut all = vec!["-O2", "-fno-optimize-sibling-calls", "-pthread"];
        all.extend_from_slice(flags);
        let exe = build_c(&dir, compiler, "mcwork.c", name, &all);
        for run in 0..2 {
            let (out, trace) = record(&dir, &[], &exe, &["fib", "18"]);
            assert!(
                out.status.success(),
                "{name} run {run}: {}",
                text(&out.stderr)
            );
            let calls = program_calls(&out.stdout);
            let t = Trace::open(&trace).expect("open trace");
            assert!(t.end().is_some(), "{name}");
            assert_eq!(nested_counts(&t, "fib"), (calls, calls), "{name} run {run}");
            assert_eq!(nested_counts(&t, "main"), (1, 1), "{name} run {run}");
            assert_eq!(
                info_json(&trace)["recorded_by"],
                serde_json::json!([kind]),
                "{name}"
            );
        }
    }
}

#[test]
fn threads_are_recorded_with_their_real_tids_and_names() {
    let dir = scratch("mcount_threads");
    // Rust: eight named workers.
    let (out, trace) = record(&dir, &[], &testprog_mcount("threads"), &[]);
    assert_threads_program(&out, &trace);
    // C: four pthreads named with pthread_setname_np.
    let exe = mcwork(&dir, "mcwork", &["-pg"]);
    let (out, trace) = record(&dir, &[], &exe, &["threads"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let t = Trace::open(&trace).expect("open");
    for i in 0..4u64 {
        let name = format!("worker-{i}");
        let w = walk(&t, tid_named(&t, &name));
        assert!(clean(&w), "{name}: {w:?}");
        assert_eq!(w.entries.get("walk"), Some(&(100 * (i + 1))), "{name}");
    }
}

#[test]
fn uftrace_reads_the_dump_of_an_mcount_trace_with_the_same_calls() {
    let dir = scratch("mcount_uftrace");
    let (out, trace) = record(&dir, &[], &testprog_mcount("fib"), &["15"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let calls = program_calls(&out.stdout);
    let ud = dir.join("fib.uftrace");
    ok(ft(&[
        "dump",
        "-i",
        trace.to_str().unwrap(),
        "--format",
        "uftrace",
        "-o",
        ud.to_str().unwrap(),
    ]));
    let replay = Command::new("uftrace")
        .args(["replay", "-d"])
        .arg(&ud)
        .output()
        .expect("uftrace");
    assert!(replay.status.success(), "{}", text(&replay.stderr));
    assert_eq!(
        text(&replay.stdout).matches("fib::fib").count() as u64,
        calls * 2 - calls.div_ceil(2),
        "a line per leaf call (fib(0), fib(1)), two per other call"
    );
    let report = Command::new("uftrace")
        .args(["report", "-d"])
        .arg(&ud)
        .output()
        .expect("uftrace");
    assert!(report.status.success(), "{}", text(&report.stderr));
    let line = text(&report.stdout)
        .lines()
        .find(|l| l.ends_with("fib::fib"))
        .map(str::to_string)
        .expect("fib in uftrace's report");
    let cols: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(cols[4].parse::<u64>().unwrap(), calls, "{line}");
}

#[test]
fn filters_select_exactly_what_they_name() {
    let dir = scratch("mcount_filters");
    let fib = testprog_mcount("fib");
    let (out, trace) = record(&dir, &["-F", "^fib::fib$"], &fib, &["16"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let calls = program_calls(&out.stdout);
    let t = Trace::open(&trace).unwrap();
    // fib's subtree (-F keeps what it calls too) is fib alone: nothing else has events.
    let w = walk(&t, t.session().pid);
    assert!(
        w.entries.len() == 1 && w.entries.contains_key("fib::fib"),
        "{w:?}"
    );
    assert_eq!(nested_counts(&t, "fib::fib"), (calls, calls));
    let (out, trace) = record(&dir, &["-N", "^fib::fib$"], &fib, &["16"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let t = Trace::open(&trace).unwrap();
    let w = walk(&t, t.session().pid);
    assert!(clean(&w), "{w:?}");
    assert_eq!(w.entries.get("fib::main"), Some(&1));
    assert!(!w.entries.contains_key("fib::fib"));
}

#[test]
fn caught_panic_unwinds_through_hooked_frames_and_later_calls_stay_traced() {
    let dir = scratch("mcount_catch");
    let (out, trace) = record(&dir, &[], &testprog_mcount("ending"), &["catch"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("middle(3) -> panicked"));
    assert!(text(&out.stdout).contains("middle(5) -> ok"));
    let t = Trace::open(&trace).unwrap();
    let w = walk(&t, t.session().pid);
    // The panicking call's frames end as unwound, once; every other frame has its exit, main's too.
    assert_eq!(w.entries.get("ending::middle"), Some(&6));
    assert_eq!(
        w.unwound.iter().filter(|f| *f == "ending::thrower").count(),
        1,
        "{w:?}"
    );
    assert_eq!(
        w.unwound.iter().filter(|f| *f == "ending::middle").count(),
        1,
        "{w:?}"
    );
    assert!(
        w.open_at_end.is_empty() && w.preexisting.is_empty(),
        "{w:?}"
    );
}

#[test]
fn uncaught_panic_prints_its_backtrace_through_hooked_frames() {
    let dir = scratch("mcount_panic");
    let prog = testprog_mcount("ending");
    // The frames of a panic backtrace, by name.
    let frames = |stderr: &[u8]| -> Vec<String> {
        text(stderr)
            .lines()
            .filter_map(|l| {
                let (n, name) = l.trim().split_once(": ")?;
                n.parse::<u32>().ok().map(|_| name.to_string())
            })
            .collect()
    };
    let plain = Command::new(&prog)
        .arg("panic")
        .env("RUST_BACKTRACE", "1")
        .current_dir(&dir)
        .output()
        .unwrap();
    let trace = dir.join("trace.data");
    let out = ferrotrace()
        .current_dir(&dir)
        .args(["record", "-o"])
        .arg(&trace)
        .arg("--")
        .arg(&prog)
        .arg("panic")
        .env("RUST_BACKTRACE", "1")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(101), "{}", text(&out.stderr));
    // The same backtrace as without the tracer: the unwinder went through every hooked frame, and the
    // return stubs' frames are left out.
    let traced = frames(&out.stderr);
    assert_eq!(traced, frames(&plain.stderr), "{}", text(&out.stderr));
    let at = |f: &str| {
        traced
            .iter()
            .position(|n| n == f)
            .unwrap_or_else(|| panic!("{f} in {traced:?}"))
    };
    assert!(
        at("ending::thrower") + 1 == at("ending::middle")
            && at("ending::middle") + 1 == at("ending::main")
    );
    let t = Trace::open(&trace).unwrap();
    assert!(t.end().is_some());
}

#[test]
fn cxx_exceptions_thrown_through_hooked_frames_are_caught() {
    let dir = scratch("mcount_cxx");
    let exe = build_c(&dir, "g++", "mcexcept.cpp", "mcexcept", &["-O2", "-pg"]);
    let (out, trace) = record(&dir, &[], &exe, &["10"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout).trim(), "caught=10 leaf_calls=20");
    let t = Trace::open(&trace).unwrap();
    let w = walk(&t, t.session().pid);
    // C++ names demangled as c++filt and perf show them (issue 20 item 6: they were `_Z4leafl`).
    assert_eq!(w.entries.get("leaf(long)"), Some(&20), "{w:?}");
    assert_eq!(w.entries.get("catcher(int)"), Some(&10), "{w:?}");
    // Each throw leaves three thrower frames unwound; catcher catches and returns.
    assert_eq!(
        w.unwound.iter().filter(|f| *f == "thrower(int)").count(),
        30,
        "{w:?}"
    );
    assert!(w.open_at_end.is_empty(), "{w:?}");
    // What report prints and what -F matches is the same name.
    let report = ok(ft(&["report", "-i", trace.to_str().unwrap()]));
    assert!(report.contains("catcher(int)"), "{report}");
    let (out, trace) = record(&dir, &["-P", r"^leaf\(long\)$"], &exe, &["10"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let t = Trace::open(&trace).unwrap();
    let names: Vec<String> = t
        .functions()
        .values()
        .map(|f| f.name().to_string())
        .collect();
    assert_eq!(names, ["leaf(long)"]);
}

#[test]
fn longjmp_out_of_hooked_frames() {
    let dir = scratch("mcount_longjmp");
    let exe = mcwork(&dir, "mcwork", &["-pg"]);
    let (out, trace) = record(&dir, &[], &exe, &["longjmp"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout).trim(), "jumps=200 calls=177");
    let t = Trace::open(&trace).unwrap();
    let w = walk(&t, t.session().pid);
    assert_eq!(w.entries.get("jumper"), Some(&200));
    assert_eq!(w.entries.get("thrower"), Some(&600));
    assert_eq!(w.entries.get("fib"), Some(&177));
    assert_eq!(
        w.unwound.iter().filter(|f| *f == "thrower").count(),
        600,
        "{w:?}"
    );
    assert!(w.open_at_end.is_empty(), "{w:?}");
}

#[test]
fn signal_handlers_running_hooked_code() {
    let dir = scratch("mcount_signal");
    let exe = mcwork(&dir, "mcwork", &["-pg"]);
    let (out, trace) = record(&dir, &[], &exe, &["signal"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout).trim(), "handled=100 handler_calls=6700");
    let t = Trace::open(&trace).unwrap();
    assert_eq!(nested_counts(&t, "fib"), (6700, 6700));
    assert_eq!(nested_counts(&t, "outer"), (100, 100));
}

#[test]
fn calls_deeper_than_the_shadow_stack_are_counted_and_reported() {
    let dir = scratch("mcount_deep");
    let exe = mcwork(&dir, "mcwork", &["-pg"]);
    let trace = dir.join("trace.data");
    let out = ferrotrace()
        .current_dir(&dir)
        .args(["record", "-o"])
        .arg(&trace)
        .args(["--", exe.to_str().unwrap(), "deep", "1000"])
        .env(env::SHADOW_DEPTH, "100")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout).trim(), "depth=1000");
    let t = Trace::open(&trace).unwrap();
    let (entries, exits) = nested_counts(&t, "dive");
    assert_eq!(entries, exits);
    let info = info_json(&trace);
    let lost = info["lost"].as_u64().unwrap();
    // dive runs 1001 times (n = 1000 down to 0); main holds one frame: 99 traced, 902 not.
    assert_eq!((entries, lost), (99, 902 * 2));
    assert!(
        text(&out.stderr)
            .contains("902 calls nested deeper than the shadow stack (100 frames) were not traced"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn depth_limit_leaves_deeper_calls_out_without_counting_them_lost() {
    let dir = scratch("mcount_depth");
    let exe = mcwork(&dir, "mcwork", &["-pg"]);
    let (out, trace) = record(&dir, &["-D", "10"], &exe, &["deep", "1000"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout).trim(), "depth=1000");
    assert!(
        !text(&out.stderr).contains("deeper"),
        "{}",
        text(&out.stderr)
    );
    let t = Trace::open(&trace).unwrap();
    // main is depth 1, then 9 levels of dive.
    assert_eq!(nested_counts(&t, "dive"), (9, 9));
    assert_eq!(info_json(&trace)["lost"], 0);
    // An XRay program has no shadow stack to limit: the collector keeps the calls -D selects.
    let (out, trace) = record(
        &dir,
        &["-F", "^fib::main$", "-D", "3"],
        &testprog("fib"),
        &["5"],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let t = Trace::open(&trace).unwrap();
    // main, fib (the outermost), its two calls: three levels.
    assert_eq!(nested_counts(&t, "fib::fib"), (3, 3));
    // A depth the runtime would refuse is refused before the program runs (it ran untraced).
    for depth in ["0", "16777217"] {
        let (out, _) = record(&dir, &["-D", depth], &exe, &["deep", "10"]);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "-D {depth}: {err}");
        assert!(out.stdout.is_empty(), "-D {depth}: the program ran");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains(&format!("--depth {depth}: ")), "{err}");
    }
}

#[test]
fn backtrace_sees_every_hooked_frame() {
    let dir = scratch("mcount_backtrace");
    let exe = mcwork(&dir, "mcwork", &["-pg"]);
    // The same program untraced (its gmon.out goes to the scratch directory).
    let plain = Command::new(&exe)
        .arg("backtrace")
        .current_dir(&dir)
        .output()
        .unwrap();
    assert!(plain.status.success());
    let (out, _) = record(&dir, &[], &exe, &["backtrace"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    // Frames in the program and libc, by offset: the same; the traced run has one unnamed frame (the
    // return stub) after each hooked one.
    let frames = |s: &str| -> Vec<String> {
        s.lines()
            .filter_map(|l| l.strip_prefix("frame "))
            .filter(|f| f.contains('('))
            .map(|f| f.split(" [").next().unwrap().to_string())
            .collect()
    };
    let traced = text(&out.stdout);
    assert_eq!(frames(&traced), frames(&text(&plain.stdout)), "{traced}");
    assert_eq!(frames(&traced).len(), 7, "{traced}");
}

#[test]
fn a_function_calling_mcount_without_a_frame_pointer_is_left_untraced_and_said() {
    let dir = scratch("mcount_nofp");
    let exe = build_c(&dir, "gcc", "mcnofp.c", "mcnofp", &["-O2", "-pg"]);
    let (out, trace) = record(&dir, &[], &exe, &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "done\n");
    assert!(
        text(&out.stderr).contains(
            "ferrotrace: 1 functions call mcount without setting up a frame pointer and are not traced"
        ),
        "{}",
        text(&out.stderr)
    );
    let t = Trace::open(&trace).unwrap();
    assert_eq!(nested_counts(&t, "with_frame_pointer"), (10, 10));
    assert_eq!(nested_counts(&t, "no_frame_pointer"), (0, 0));
}

#[test]
fn stack_switching_is_refused_with_a_clear_message() {
    let dir = scratch("mcount_switch");
    let exe = mcwork(&dir, "mcwork", &["-pg"]);
    let plain = Command::new(&exe)
        .arg("switch")
        .current_dir(&dir)
        .output()
        .unwrap();
    assert_eq!(
        text(&plain.stdout),
        "coroutine done\n",
        "the program works untraced"
    );
    let (out, trace) = record(&dir, &[], &exe, &["switch"]);
    assert_eq!(out.status.code(), Some(128 + 6), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    assert!(
        err.contains("did the program switch stacks")
            && err.contains("mcount tracing cannot follow it"),
        "{err}"
    );
    let t = Trace::open(&trace).unwrap();
    assert!(t.end().is_some(), "the abort still leaves a complete trace");
}

#[test]
fn programs_started_with_exec_by_an_mcount_program_write_their_own_traces() {
    assert_spawned_child_writes_its_own_trace(
        &scratch("mcount_spawn"),
        &testprog_mcount("spawner"),
    );
}

#[test]
fn forked_children_of_an_mcount_program_write_their_own_traces() {
    // The children keep returning through their parent's shadow stacks and stubs (the same memory).
    assert_forked_children_write_their_own_traces(
        &scratch("mcount_fork"),
        &testprog_mcount("forker"),
    );
}

#[test]
fn shared_libraries_with_mcount_calls_are_traced_linked_or_dlopened() {
    // libft_xlib.so is built with the same flags (-Zinstrument-mcount): its calls go through the PLT to
    // the preloaded hooks; a dlopened one is found by the rescan of the preload library's dlopen.
    assert_linked_library_traced(&scratch("mcount_uselib"), &testprog_mcount("uselib"));
    assert_dlopened_library_traced(&scratch("mcount_dlopen"), &testprog_mcount("dlopener"));
}

#[test]
fn program_linking_the_runtime_gets_its_hooks_from_it() {
    // Its calls to mcount bind to the runtime's own hooks at link time.
    assert_linked_program_records_itself(&scratch("mcount_linked"), &testprog_mcount("linked"));
}

#[test]
fn gprof_does_not_run_beside_the_tracing() {
    // A -pg program starts glibc's gprof (a SIGPROF timer) and writes gmon.out at exit; traced, its
    // mcount is the runtime's, so that file would hold no call arcs and overwrite the user's.
    let dir = scratch("mcount_no_gmon");
    let prog = mcwork(&dir, "pg", &["-pg"]);
    let gmon = dir.join("gmon.out");
    let plain = Command::new(&prog)
        .args(["fib", "10"])
        .current_dir(&dir)
        .output()
        .unwrap();
    assert!(plain.status.success());
    assert!(gmon.exists(), "untraced, the -pg program writes gmon.out");
    std::fs::remove_file(&gmon).unwrap();
    let (out, trace) = record(&dir, &[], &prog, &["fib", "10"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(!gmon.exists(), "traced, gprof stays out of the way");
    let t = Trace::open(&trace).unwrap();
    assert!(t.event_count() > 0);
}
