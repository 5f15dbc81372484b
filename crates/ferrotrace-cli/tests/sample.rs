//! `record --sample`: perf_event samples and traced functions in one trace, on one clock.
//!
//! The proof of the clock mapping: `spinner` spins in `spin_first` for 200 ms, in `spin_second` for
//! 201 ms, then sleeps in `sleep_third`. Every sample of its main thread must fall, by its merged
//! timestamp, inside the traced function that its own stack (unwound from the sampled registers, not
//! from the trace) says was running, and the other way round.

mod common;

use std::path::Path;

use common::*;
use ferrotrace_analysis::reader::{EventKind, Trace};
use ferrotrace_analysis::samples::SampleSet;

/// `[start, end)` in CLOCK_MONOTONIC ns of the one call of `name` on thread `tid`.
fn window(trace: &Trace, tid: u32, name: &str) -> (u64, u64) {
    let (mut start, mut end) = (None, None);
    for e in trace.thread_events(tid).unwrap() {
        let e = e.unwrap();
        let is = |k| e.kind == k && trace.function_name(e.id).ends_with(name);
        if is(EventKind::Entry) {
            start = Some(e.ts_ns);
        } else if is(EventKind::Exit) {
            end = Some(e.ts_ns);
        }
    }
    (start.expect(name), end.expect(name))
}

fn record_spinner(dir: &Path, call_graph: &str) -> (String, std::path::PathBuf) {
    let (out, trace) = record(
        dir,
        &["--sample", "--call-graph", call_graph],
        &testprog("spinner"),
        &[],
    );
    let err = text(&out.stderr);
    assert!(out.status.success(), "{err}");
    (err, trace)
}

#[test]
fn sample_times_fall_inside_the_traced_function_their_stack_names() {
    let dir = scratch("sample_times");
    let (err, path) = record_spinner(&dir, "dwarf");
    assert!(err.contains("samples merged into the trace"), "{err}");
    // One trace: nothing beside it (no FILE.PID, no FILE.old).
    assert!(traces_beside(&path).is_empty());
    let trace = Trace::open(&path).unwrap();
    assert!(trace.problems().is_empty(), "{:?}", trace.problems());
    assert!(trace.end().is_some());
    // The runtime's Session chunk, written before any event, already says that samples follow.
    assert_ne!(
        trace.session().sources & ferrotrace_core::schema::source::SAMPLES,
        0
    );
    let main = trace.session().pid;
    let set = SampleSet::load(&trace).unwrap().expect("samples");
    let windows: Vec<(&str, (u64, u64))> = ["spin_first", "spin_second", "sleep_third"]
        .into_iter()
        .map(|f| (f, window(&trace, main, f)))
        .collect();
    let (mut inside, mut whole) = ([0usize; 3], 0usize);
    for s in set.samples.iter().filter(|s| s.tid == main) {
        let frames = set.stack_frames(s.stack);
        let names: Vec<&str> = frames.iter().map(|f| &*f.function).collect();
        // A stack the unwinder could not follow to `main` (through the vDSO, say), or that passes
        // through code nothing names (a PLT stub, where the unwinder may skip the caller), says
        // nothing.
        if !names.contains(&"spinner::main") || frames.iter().any(|f| f.unknown) {
            continue;
        }
        // Inside the runtime's entry or exit hook the function is on the stack while its event's
        // timestamp is a few nanoseconds away: the one place where the two may disagree.
        if names
            .iter()
            .any(|n| n.contains("ferrotrace") || n.contains("xray"))
        {
            continue;
        }
        whole += 1;
        for (i, (f, (a, b))) in windows.iter().enumerate() {
            let by_time = (*a..*b).contains(&s.time_ns);
            let by_stack = names.iter().any(|n| n.ends_with(f));
            assert_eq!(
                by_time,
                by_stack,
                "sample at {} ns ({} ns after {f} began, {} ns before it ended): stack {names:?}",
                s.time_ns,
                s.time_ns as i64 - *a as i64,
                *b as i64 - s.time_ns as i64
            );
            inside[i] += by_time as usize;
        }
    }
    // Both spinning functions were sampled (each ran 200 ms on the CPU).
    assert!(inside[0] >= 5 && inside[1] >= 5, "{inside:?} of {whole}");
}

#[test]
fn sample_report_replay_and_flame_show_samples_beside_and_inside_functions() {
    let dir = scratch("sample_views");
    let (_, path) = record_spinner(&dir, "dwarf");
    let p = path.to_str().unwrap();
    // report: the traced table has a Sampled column; the spinning functions have sampled time, the
    // sleeping one none.
    let report = ok(ft(&["report", "-i", p]));
    let table = report.split("Total time").nth(1).expect("function table");
    assert!(table.contains("Sampled"), "{report}");
    let row = |f: &str| {
        table
            .lines()
            .find(|l| l.ends_with(f))
            .unwrap_or_else(|| panic!("{f}: {table}"))
            .to_string()
    };
    let sampled = |f: &str| -> String {
        // Total, Self, Calls, Avg, Min, Max, Sampled: the 7th value (2 words each but Calls).
        let r = row(f);
        let words: Vec<&str> = r.split_whitespace().collect();
        words[11..13].join(" ")
    };
    assert_ne!(sampled("spinner::spin_first"), "0 ns", "{table}");
    assert_ne!(sampled("spinner::spin_second"), "0 ns", "{table}");
    // report --json: one document (json.load reads it), the function rows and the samples' report
    // in it; with --threads and with --diff too.
    let doc = |opts: &[&str]| -> serde_json::Value {
        let out = ok(ft(&[&["report", "-i", p, "--json"][..], opts].concat()));
        serde_json::from_str(&out)
            .unwrap_or_else(|e| panic!("{opts:?}: not one document ({e}): {out}"))
    };
    let one = doc(&[]);
    let rows = one["functions"].as_array().expect("function rows");
    let spin = rows
        .iter()
        .find(|f| f["name"] == "spinner::spin_first")
        .expect("spin_first");
    assert_eq!(spin["calls"], 1, "{one}");
    assert!(spin["sampled_ns"].as_u64().unwrap() > 0, "{one}");
    let sampled = &one["samples"];
    assert!(sampled["samples"].as_u64().unwrap() > 0, "{one}");
    assert!(
        sampled["functions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f["function"] == "spinner::spin_first" && f["self"].as_u64() > Some(0)),
        "{one}"
    );
    let threads = doc(&["--threads"]);
    assert!(threads["threads"].as_array().is_some(), "{threads}");
    assert!(
        threads["samples"]["threads"].as_array().is_some(),
        "{threads}"
    );
    let diff = doc(&["--diff", p]);
    assert!(diff["functions"].as_array().is_some(), "{diff}");
    assert!(diff["samples"]["diff"].as_array().is_some(), "{diff}");
    // replay: samples between the entry and the exit of the function that was running, their stacks
    // up to it.
    let replay = ok(ft(&["replay", "-i", p]));
    let lines: Vec<&str> = replay.lines().collect();
    let at = |needle: &str| {
        lines
            .iter()
            .position(|l| l.contains(needle))
            .unwrap_or_else(|| panic!("{needle}: {replay}"))
    };
    let main_tid = Trace::open(&path).unwrap().session().pid.to_string();
    for f in ["spin_first", "spin_second"] {
        let (enter, leave) = (
            at(&format!("spinner::{f}() {{")),
            at(&format!("}} /* spinner::{f} */")),
        );
        let inside: Vec<&&str> = lines[enter..leave]
            .iter()
            .filter(|l| l.contains(&main_tid) && l.contains("/* sample cpu-clock:"))
            .collect();
        assert!(!inside.is_empty(), "{f}: {replay}");
        // Each names the function it is shown in, where its stack was unwound that far.
        let named = inside
            .iter()
            .filter(|l| l.ends_with(&format!("spinner::{f} */")))
            .count();
        let elsewhere = inside
            .iter()
            .filter(|l| l.contains("spinner::spin_") && !l.ends_with(&format!("spinner::{f} */")))
            .count();
        assert!(named > 0 && elsewhere == 0, "{f}: {inside:?}");
    }
    // flame: by traced time (default) or by samples.
    let by_time = ok(ft(&["flame", "-i", p, "--folded"]));
    let by_samples = ok(ft(&["flame", "-i", p, "--folded", "--samples"]));
    assert!(
        by_time.contains("spinner::main;spinner::spin_second "),
        "{by_time}"
    );
    assert!(
        by_samples.contains("spinner::main;spinner::spin_second;"),
        "{by_samples}"
    );
}

#[test]
fn sample_perfetto_view_has_slices_callstack_samples_instants_and_the_heap_on_one_axis() {
    let dir = scratch("sample_perfetto");
    let (out, path) = record(
        &dir,
        &["--sample", "--call-graph", "dwarf", "--alloc"],
        &testprog("spinner"),
        &[],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let main = Trace::open(&path).unwrap().session().pid as u64;
    let view = perfetto_view(&path, &dir);
    let kind = |v: &serde_json::Value, k: &str| v["kind"] == k;
    // Function slices of the main thread, with the window of spin_first.
    let mut depth_of_first = None;
    let (mut first_begin, mut first_end) = (None, None);
    let mut depth = 0usize;
    for v in view.iter().filter(|v| v["tid"] == main) {
        if kind(v, "begin") {
            if v["name"] == "spinner::spin_first" {
                first_begin = v["ts"].as_u64();
                depth_of_first = Some(depth);
            }
            depth += 1;
        } else if kind(v, "end") {
            depth -= 1;
            if Some(depth) == depth_of_first && first_end.is_none() {
                first_end = v["ts"].as_u64();
            }
        }
    }
    let (a, b) = (
        first_begin.expect("spin_first slice"),
        first_end.expect("its end"),
    );
    // Callstack samples (PerfSample with interned frames), not slices: those of the main thread whose
    // stack names spin_first are inside its slice on the same time axis.
    let samples: Vec<&serde_json::Value> = view.iter().filter(|v| kind(v, "sample")).collect();
    assert!(!samples.is_empty());
    let in_first: Vec<u64> = samples
        .iter()
        .filter(|s| s["tid"] == main)
        .filter(|s| {
            s["stack"]
                .as_array()
                .is_some_and(|f| f.iter().any(|n| n == "spinner::spin_first"))
        })
        .map(|s| s["ts"].as_u64().unwrap())
        .collect();
    assert!(
        in_first.len() >= 5,
        "{} samples in spin_first",
        in_first.len()
    );
    assert!(
        in_first.iter().all(|t| (a..b).contains(t)),
        "spin_first ran {a}..{b}: {in_first:?}"
    );
    assert!(samples.iter().all(|s| s["weight"].as_u64() > Some(0)));
    // Allocations: instants with their arguments as debug annotations, and the heap as a counter.
    let mallocs: Vec<&serde_json::Value> = view
        .iter()
        .filter(|v| kind(v, "instant") && v["name"] == "malloc")
        .collect();
    assert!(!mallocs.is_empty());
    assert!(mallocs.iter().all(|m| m["args"]["size"].as_u64().is_some()));
    assert!(view
        .iter()
        .any(|v| kind(v, "counter") && v["counter"] == true && v["value"].as_f64() > Some(0.0)));
}

#[test]
fn sample_refusals_are_one_line_and_the_program_does_not_run() {
    let dir = scratch("sample_refusals");
    // A C program without frame pointers: fp stacks would stop at its first frame.
    let nofp = build_c(
        &dir,
        "clang-16",
        "cwork.c",
        "cwork-nofp",
        &[
            "-O2",
            "-fxray-instrument",
            "-fxray-instruction-threshold=1",
            "-fomit-frame-pointer",
        ],
    );
    // Asked for frame-pointer stacks: refused before it runs.
    let (out, trace) = record(&dir, &["--sample", "--call-graph", "fp"], &nofp, &["5"]);
    let err = text(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("--sample:") && err.contains("dwarf"), "{err}");
    assert!(
        !text(&out.stdout).contains("calls="),
        "the program ran unsampled"
    );
    assert!(!trace.exists());
    // DWARF stacks need no frame pointers: the same program is recorded and sampled, asked for or by
    // default (issue 36 item 9: the README's `record --sample --alloc -- ./prog` on an -O2 binary),
    // which says in one line what it chose.
    for opts in [
        &["--sample", "--call-graph", "dwarf"][..],
        &["--sample"][..],
    ] {
        let (out, trace) = record(&dir, opts, &nofp, &["5"]);
        let err = text(&out.stderr);
        assert!(out.status.success(), "{opts:?}: {err}");
        assert_eq!(
            err.contains("keeps no frame pointers (or has no symbols to tell): its stacks are unwound with DWARF"),
            opts.len() == 1,
            "{opts:?}: {err}"
        );
        let t = Trace::open(&trace).unwrap();
        assert!(t.samplers().len() == 1);
        assert_eq!(
            t.call_graph(),
            ferrotrace_analysis::reader::CallGraph::Dwarf,
            "{opts:?}"
        );
    }
    // Bad values: one line each, nothing run.
    for opts in [
        &["--sample", "--sample-freq", "0"][..],
        &["--sample", "--call-graph", "lbr"][..],
        &["--sample", "-e", "nosuch:event:here"][..],
        &["--sample-freq", "99"][..],
    ] {
        let (out, _) = record(&dir, opts, &nofp, &["5"]);
        let err = text(&out.stderr);
        assert!(!out.status.success(), "{opts:?}");
        assert!(!text(&out.stdout).contains("calls="), "{opts:?}: ran");
        assert!(!err.contains("panicked"), "{opts:?}: {err}");
    }
}

/// Issue 41 item 11: XRay's entry sled and `-pg -mfentry`'s call (or NOP) come before `main`'s
/// `push rbp`; a program built with frame pointers is sampled with them, not refused.
#[test]
fn sample_with_frame_pointers_behind_entry_instrumentation_is_not_refused() {
    let dir = scratch("sample_fp_behind_sleds");
    let fp = "-fno-omit-frame-pointer";
    let xray = [
        "-O2",
        "-fxray-instrument",
        "-fxray-instruction-threshold=1",
        fp,
    ];
    let builds = [
        build_c(&dir, "clang-16", "cwork.c", "cwork-xray", &xray),
        build_c(
            &dir,
            "gcc",
            "cwork.c",
            "cwork-fentry",
            &["-O2", "-pg", "-mfentry", fp],
        ),
        build_c(
            &dir,
            "gcc",
            "cwork.c",
            "cwork-nop-mcount",
            &[
                "-O2",
                "-pg",
                "-mfentry",
                "-mnop-mcount",
                "-mrecord-mcount",
                "-fno-pie",
                "-no-pie",
                fp,
            ],
        ),
    ];
    for prog in &builds {
        let (out, trace) = record(&dir, &["--sample"], prog, &["5"]);
        let err = text(&out.stderr);
        assert!(out.status.success(), "{}: {err}", prog.display());
        assert!(
            !err.contains("keeps no frame pointers"),
            "{}: {err}",
            prog.display()
        );
        let t = Trace::open(&trace).unwrap();
        assert_eq!(
            t.call_graph(),
            ferrotrace_analysis::reader::CallGraph::FramePointers,
            "{}",
            prog.display()
        );
        let profile = dir.join("p.data");
        let out = ferrotrace()
            .args(["profile", "--call-graph", "fp", "-o"])
            .arg(&profile)
            .arg("--")
            .arg(prog)
            .arg("5")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}: {}",
            prog.display(),
            text(&out.stderr)
        );
    }
}

/// Issue 41 item 8: a uprobe on a function whose XRay sled ferrotrace patches goes past the sled
/// (its `int3` on the sled was overwritten by the patch, or the kernel stepped its copy of the
/// unpatched `jmp` over the patched call: every entry of the function went unrecorded).
#[test]
fn sample_a_uprobe_on_a_traced_function_counts_every_call_and_leaves_the_trace_whole() {
    let dir = scratch("sample_uprobe_on_sled");
    let flags = ["-O2", "-fxray-instrument", "-fxray-instruction-threshold=1"];
    let prog = build_c(&dir, "clang-16", "cwork.c", "cwork-xray", &flags);
    let event = format!("uprobe:{}:fib", prog.display());
    let (out, path) = record(&dir, &["--sample", "-e", &event], &prog, &["15"]);
    let err = text(&out.stderr);
    assert!(out.status.success(), "{err}");
    let calls: u64 = text(&out.stdout)
        .split_whitespace()
        .find_map(|w| w.strip_prefix("calls="))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no calls= in {:?}", text(&out.stdout)));
    assert_eq!(calls, 1973);
    let trace = Trace::open(&path).unwrap();
    assert!(trace.problems().is_empty(), "{:?}", trace.problems());
    let (mut entries, mut exits, mut depth, mut deepest) = (0u64, 0u64, 0i64, 0i64);
    for e in trace.thread_events(trace.session().pid).unwrap() {
        let e = e.unwrap();
        if trace.function_name(e.id) != "fib" {
            continue;
        }
        match e.kind {
            EventKind::Entry => (entries, depth) = (entries + 1, depth + 1),
            EventKind::Exit => (exits, depth) = (exits + 1, depth - 1),
            _ => continue,
        }
        deepest = deepest.max(depth);
    }
    assert_eq!((entries, exits), (calls, calls), "{err}");
    // fib(15) nests 15 deep.
    assert_eq!(deepest, 15);
    let set = SampleSet::load(&trace).unwrap().expect("samples");
    let probe = set.event_index("fib").expect("the uprobe's sampler");
    let hits = set.samples.iter().filter(|s| s.event == probe).count() as u64;
    assert_eq!(hits, calls, "{err}");
}

#[test]
fn sample_a_child_s_samples_go_into_its_own_trace() {
    let dir = scratch("sample_child");
    let (out, trace) = record(&dir, &["--sample"], &testprog("spawner"), &[]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    let children = traces_beside(&trace);
    assert_eq!(children.len(), 1, "{children:?}");
    let parent = Trace::open(&trace).unwrap();
    let child = Trace::open(&children[0]).unwrap();
    for (t, other) in [(&parent, &child), (&child, &parent)] {
        // Each trace took its own process's samples, and the merge left it whole.
        assert!(t.problems().is_empty(), "{:?}", t.problems());
        assert_eq!(t.samplers().len(), 1);
        let set = SampleSet::load(t).unwrap().unwrap();
        // The other process's main thread (tid = its pid) has no sample here.
        assert!(
            set.samples.iter().all(|s| s.tid != other.session().pid),
            "samples of process {} in the trace of {}",
            other.session().pid,
            t.session().pid
        );
    }
    assert!(!err.contains("not kept"), "{err}");
}
