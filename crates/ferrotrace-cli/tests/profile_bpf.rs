//! `ferrotrace profile --bpf`: stacks unwound in the kernel by eBPF (root needed), on a Rust program
//! built without frame pointers (plain `rustc -O`: its stacks unwind only by DWARF CFI) and a C
//! library built without them, dlopened after start.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::*;

/// One `-a` recording at a time: each profiles the whole machine, the other's busy programs and
/// table building included, and on 2 CPUs two would starve each other's.
fn every_process_alone() -> std::sync::MutexGuard<'static, ()> {
    static ALONE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    ALONE.lock().unwrap_or_else(|e| e.into_inner())
}

/// `profile --bpf -a --duration DURATION -o trace`, once it says it records: the recorder (to wait
/// for), the rest of its stderr, and what it said so far.
fn recording_every_process(
    duration: &str,
    trace: &Path,
) -> (
    std::process::Child,
    std::io::BufReader<std::process::ChildStderr>,
    String,
) {
    let mut recorder = ferrotrace()
        .args([
            "profile",
            "--bpf",
            "-a",
            "-F",
            "999",
            "--duration",
            duration,
            "-o",
        ])
        .arg(trace)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = std::io::BufReader::new(recorder.stderr.take().unwrap());
    let mut said = String::new();
    while std::io::BufRead::read_line(&mut stderr, &mut said).unwrap() > 0
        && !said.contains("recording every process")
    {}
    (recorder, stderr, said)
}

/// `testprogs/bpf/recurse.rs` built with stable `rustc -O -g` and no other flag: no frame pointers.
fn recurse_program(dir: &Path) -> PathBuf {
    let exe = dir.join("recurse");
    let out = Command::new("rustc")
        .env_remove("RUSTFLAGS")
        .args(["--edition", "2021", "-O", "-g", "-o"])
        .arg(&exe)
        .arg(repo().join("testprogs/bpf/recurse.rs"))
        .output()
        .expect("rustc");
    assert!(out.status.success(), "rustc: {}", text(&out.stderr));
    exe
}

/// `testprogs/bpf/spinlib.c` as a shared library without frame pointers.
fn spin_library(dir: &Path) -> PathBuf {
    let lib = dir.join("libspin.so");
    let out = Command::new("gcc")
        .args([
            "-O2",
            "-g",
            "-fomit-frame-pointer",
            "-shared",
            "-fPIC",
            "-o",
        ])
        .arg(&lib)
        .arg(repo().join("testprogs/bpf/spinlib.c"))
        .output()
        .expect("gcc");
    assert!(out.status.success(), "gcc: {}", text(&out.stderr));
    lib
}

/// Runs `ferrotrace profile --bpf ARGS -o DIR/bpf.data` and returns the trace.
fn profile_bpf(dir: &Path, args: &[&str]) -> PathBuf {
    let trace = dir.join("bpf.data");
    let out = ferrotrace()
        .args(["profile", "--bpf", "-o"])
        .arg(&trace)
        .args(args)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("bytes read from the kernel"),
        "{}",
        text(&out.stderr)
    );
    trace
}

/// Starts `program`, lets it run `warm_up_ms`, profiles it with `-p` for a second at 999 Hz and
/// ends it; the trace.
fn profile_running(dir: &Path, program: &mut Command, warm_up_ms: u64) -> PathBuf {
    let mut child = program.spawn().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(warm_up_ms));
    let pid = child.id().to_string();
    let trace = profile_bpf(dir, &["-F", "999", "-p", &pid, "--duration", "1s"]);
    let _ = child.kill();
    let _ = child.wait();
    trace
}

/// The trace's stacks, outermost frame first, with their sample counts.
fn folded(trace: &Path) -> Vec<(Vec<String>, u64)> {
    ok(ft(&[
        "dump",
        "--format",
        "folded",
        "-i",
        trace.to_str().unwrap(),
    ]))
    .lines()
    .filter_map(|l| {
        let (stack, n) = l.rsplit_once(' ')?;
        Some((
            stack.split(';').map(str::to_string).collect(),
            n.parse().ok()?,
        ))
    })
    .collect()
}

/// Samples of the stacks that contain `function`, and of those that also start at `_start` and
/// satisfy `exact`.
fn complete_share(
    stacks: &[(Vec<String>, u64)],
    function: &str,
    exact: impl Fn(&[String]) -> bool,
) -> (u64, u64) {
    let with: Vec<_> = stacks
        .iter()
        .filter(|(s, _)| s.iter().any(|f| f == function))
        .collect();
    let total = with.iter().map(|(_, n)| n).sum();
    let good = with
        .iter()
        .filter(|(s, _)| s[0] == "_start" && exact(s))
        .map(|(_, n)| n)
        .sum();
    (good, total)
}

/// The frames from `main` down (the user frames under Rust's runtime start-up are not counted), and
/// how many times `down` recurses among them.
fn downs(stack: &[String]) -> usize {
    stack.iter().filter(|f| *f == "recurse::down").count()
}

#[test]
fn recursion_without_frame_pointers_is_unwound_exactly_in_the_kernel() {
    let dir = scratch("profile_bpf_recursion");
    let exe = recurse_program(&dir);
    // Without frame pointers indeed: the perf_event backend refuses to walk them when told to.
    let e = exe.to_str().unwrap();
    let fp = ft(&[
        "profile",
        "--call-graph",
        "fp",
        "--",
        e,
        "recurse",
        "1",
        "1",
    ]);
    assert!(
        !fp.status.success() && text(&fp.stderr).contains("no frame pointers"),
        "{}",
        text(&fp.stderr)
    );
    // Not told (issue 37 item 9): DWARF chosen before the run, said in one line, and the stacks
    // reach main through the recursion.
    let auto = dir.join("auto.data");
    let out = ft(&[
        "profile",
        "-o",
        auto.to_str().unwrap(),
        "--",
        e,
        "recurse",
        "20",
        "300",
    ]);
    let err = text(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("keeps no frame pointers (or has no symbols to tell): its stacks are unwound with DWARF"),
        "{err}"
    );
    let deep = folded(&auto)
        .iter()
        .filter(|(s, _)| downs(s) == 21)
        .map(|(_, n)| n)
        .sum::<u64>();
    assert!(deep > 0, "no stack through all 21 levels of the recursion");
    let trace = profile_bpf(
        &dir,
        &[
            "-F",
            "999",
            "--",
            exe.to_str().unwrap(),
            "recurse",
            "40",
            "500",
        ],
    );
    let stacks = folded(&trace);
    // main -> run -> down(40) ... down(0) -> spin: 41 frames of `down`, each return address found
    // through the CFI rows of a function that keeps no frame pointer.
    let (exact, total) = complete_share(&stacks, "recurse::spin", |s| {
        let run = s.iter().position(|f| f == "recurse::run");
        let spin = s.iter().position(|f| f == "recurse::spin");
        downs(s) == 41
            && s.iter().any(|f| f == "main")
            && matches!((run, spin), (Some(r), Some(p)) if p == r + 42)
    });
    // (Samples of a busy machine's time: fewer than the 500 at 999 Hz when others compete.)
    assert!(total >= 50, "{total} samples in spin");
    assert!(
        exact * 100 >= total * 95,
        "{exact} of {total} samples in spin have the whole stack: {stacks:?}"
    );
    let all: u64 = stacks.iter().map(|(_, n)| n).sum();
    let rooted: u64 = stacks
        .iter()
        .filter(|(s, _)| s[0] == "_start")
        .map(|(_, n)| n)
        .sum();
    assert!(rooted * 100 >= all * 95, "{rooted} of {all} reach _start");
    let info = ok(ft(&["info", "-i", trace.to_str().unwrap()]));
    assert!(
        info.contains("eBPF: unwound and counted in the kernel"),
        "{info}"
    );
    let report = ok(ft(&["report", "-i", trace.to_str().unwrap()]));
    assert!(report.contains("recurse::spin"), "{report}");
}

#[test]
fn library_dlopened_after_start_is_unwound_through_its_own_table() {
    let dir = scratch("profile_bpf_dlopen");
    let exe = recurse_program(&dir);
    let lib = spin_library(&dir);
    let trace = profile_bpf(
        &dir,
        &[
            "-F",
            "999",
            "--",
            exe.to_str().unwrap(),
            "dlopen",
            lib.to_str().unwrap(),
            "500",
        ],
    );
    let stacks = folded(&trace);
    let (good, total) = complete_share(&stacks, "lib_inner", |s| {
        let at = |f: &str| s.iter().position(|x| x == f);
        matches!(
            (at("recurse::call_lib"), at("lib_outer"), at("lib_inner")),
            (Some(c), Some(o), Some(i)) if o == c + 1 && i == o + 1
        )
    });
    assert!(total >= 50, "{total} samples in the library");
    // Its table is loaded when its mapping is reported, within a few milliseconds of dlopen.
    assert!(
        good * 100 >= total * 95,
        "{good} of {total} samples in lib_inner unwound through it: {stacks:?}"
    );
}

#[test]
fn spawned_program_is_followed_across_fork_and_exec() {
    let dir = scratch("profile_bpf_spawn");
    let exe = recurse_program(&dir);
    let trace = profile_bpf(
        &dir,
        &["-F", "999", "--", exe.to_str().unwrap(), "spawn", "1000"],
    );
    let stacks = folded(&trace);
    let (parent_good, parent) = complete_share(&stacks, "recurse::parent_spin", |_| true);
    let (child_good, child) = complete_share(&stacks, "recurse::down", |s| downs(s) == 9);
    assert!(parent >= 20 && child >= 20, "{parent} {child}: {stacks:?}");
    assert!(
        parent_good * 100 >= parent * 95,
        "{parent_good} of {parent}"
    );
    // The exec'd child's mappings arrive in the side-band records after its exec.
    assert!(
        child_good * 100 >= child * 90,
        "{child_good} of {child}: {stacks:?}"
    );
    let info = ok(ft(&["info", "-i", trace.to_str().unwrap()]));
    assert!(
        info.matches(" recurse ").count() >= 2,
        "two processes: {info}"
    );
}

#[test]
fn running_process_is_profiled_with_p() {
    let dir = scratch("profile_bpf_attach");
    let exe = recurse_program(&dir);
    let mut program = Command::new(&exe);
    program
        .args(["recurse", "30", "4000"])
        .stdout(std::process::Stdio::null());
    let trace = profile_running(&dir, &mut program, 300);
    let stacks = folded(&trace);
    let (exact, total) = complete_share(&stacks, "recurse::spin", |s| downs(s) == 31);
    assert!(total >= 50, "{total}: {stacks:?}");
    assert!(exact * 100 >= total * 95, "{exact} of {total}: {stacks:?}");
}

/// Off-CPU time measured in the kernel: `sleep 0.3` spends at least 300 ms in `clock_nanosleep`, one
/// stretch, whose stack (kernel and user) is taken when it leaves the CPU; the stops of the profiler's
/// own hold at the program's start are not counted.
#[test]
fn off_cpu_time_is_weighed_in_the_kernel() {
    let dir = scratch("profile_bpf_off_cpu");
    let trace = profile_bpf(&dir, &["-e", "off-cpu", "--", "/bin/sleep", "0.3"]);
    let report: serde_json::Value = serde_json::from_str(&ok(ft(&[
        "report",
        "--json",
        "-i",
        trace.to_str().unwrap(),
    ])))
    .unwrap();
    assert_eq!(report["weight_unit"], "ns", "{report}");
    let total = |name: &str| {
        report["functions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["function"] == name)
            .map_or(0, |f| f["total_weight"].as_u64().unwrap())
    };
    let asleep = total("clock_nanosleep");
    assert!(asleep >= 300_000_000, "{asleep} ns: {report}");
    // The sleep's user stack is whole. (Other stretches, such as a preemption of a loaded machine
    // in the dynamic loader, need not reach __libc_start_main.)
    let stacks = folded(&trace);
    let asleep_stacks: Vec<_> = stacks
        .iter()
        .filter(|(s, _)| s.iter().any(|f| f == "clock_nanosleep"))
        .collect();
    assert!(!asleep_stacks.is_empty(), "{stacks:?}");
    for (s, _) in asleep_stacks {
        assert!(
            s.iter().any(|f| f == "__libc_start_main"),
            "user frames: {s:?}"
        );
    }
    assert_eq!(total("ptrace_stop"), 0, "the hold is not counted: {report}");
}

/// This kernel has no kprobes: one line that says so, for --bpf as without it.
#[test]
fn kprobe_fails_in_one_line() {
    let out = ft(&[
        "profile",
        "--bpf",
        "-e",
        "kprobe:do_sys_openat2",
        "--",
        "true",
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("kprobes are not available"), "{err}");
}

/// `testprogs/bpf/probes.c` without frame pointers: `hit` called N times from `probe_loop`, and the
/// USDT probe `ftest:tick` behind a semaphore.
fn probes_program(dir: &Path) -> PathBuf {
    let exe = dir.join("probes");
    let out = Command::new("gcc")
        .args(["-O2", "-g", "-fomit-frame-pointer", "-o"])
        .arg(&exe)
        .arg(repo().join("testprogs/bpf/probes.c"))
        .output()
        .expect("gcc");
    assert!(out.status.success(), "gcc: {}", text(&out.stderr));
    exe
}

/// uretprobes and USDT probes, on both backends (the perf_event one unwinding by DWARF): every hit
/// is one sample with the whole stack, and the USDT probe's semaphore is raised while it is
/// attached (the program fires the probe only then, and says how often it did).
#[test]
fn uretprobe_and_usdt_count_every_hit_on_both_backends() {
    let dir = scratch("profile_bpf_probes");
    let exe = probes_program(&dir);
    let p = exe.to_str().unwrap();
    let n = 1000;
    let caller = "_start;__libc_start_main;__libc_start_call_main;main;probe_loop";
    for backend in [&["--call-graph", "dwarf"][..], &["--bpf"]] {
        for (event, fired, stack) in [
            (format!("uprobe:{p}:hit"), 0, format!("{caller};hit")),
            // At the return, in the caller.
            (format!("uretprobe:{p}:hit"), 0, caller.to_string()),
            (format!("usdt:{p}:ftest:tick"), n, caller.to_string()),
        ] {
            let trace = dir.join("probes.data");
            let out = ferrotrace()
                .args(["profile", "-o"])
                .arg(&trace)
                .args(backend)
                .args(["-e", &event, "--", p, &n.to_string()])
                .output()
                .unwrap();
            assert!(out.status.success(), "{event}: {}", text(&out.stderr));
            assert!(
                text(&out.stdout).contains(&format!("hits={n} fired={fired} ")),
                "{backend:?} {event}: {}",
                text(&out.stdout)
            );
            let stacks: Vec<(String, u64)> = folded(&trace)
                .into_iter()
                .map(|(s, count)| (s.join(";"), count))
                .collect();
            assert_eq!(stacks, vec![(stack, n)], "{backend:?} {event}");
        }
    }
}

/// A USDT probe the file does not have: one line that names those it has.
#[test]
fn unknown_usdt_probe_fails_in_one_line() {
    let dir = scratch("profile_bpf_usdt_unknown");
    let exe = probes_program(&dir);
    let out = ft(&[
        "profile",
        "--bpf",
        "-e",
        &format!("usdt:{}:ftest:nope", exe.display()),
        "--",
        "true",
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(
        err.contains("no USDT probe ftest:nope (it has ftest:tick)"),
        "{err}"
    );
}

/// `-a`: every process. A Rust program without frame pointers that runs before the recording starts
/// (its maps read from /proc) and a C program started during it (followed from its exec) are both
/// found, their stacks whole; the samples are those of many processes.
///
/// How many samples come before a program's tables are loaded depends on the machine's load (they
/// take seconds to build for every process in a debug build): such a sample is the lone leaf under
/// `[truncated]` (the unwinder found no mappings for its process). The test asks for enough whole
/// stacks, and for 95 % of the others to be whole (as the tests of one process do).
#[test]
fn system_wide_finds_a_running_and_a_new_busy_program() {
    let _alone = every_process_alone();
    let dir = scratch("profile_bpf_all");
    let recurse = recurse_program(&dir);
    let probes = probes_program(&dir);
    // (Both run until killed: loading every process's tables takes seconds in a debug build.)
    let mut before = Command::new(&recurse)
        .args(["recurse", "20", "600000"])
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(300));
    let trace = dir.join("all.data");
    // The second program starts once sampling has: it is followed from its exec.
    let (mut recorder, mut stderr, mut said) = recording_every_process("3s", &trace);
    std::thread::sleep(std::time::Duration::from_millis(200));
    let mut after = Command::new(&probes)
        .arg("100000000000")
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    std::io::Read::read_to_string(&mut stderr, &mut said).unwrap();
    let status = recorder.wait().unwrap();
    for c in [&mut before, &mut after] {
        let _ = c.kill();
        let _ = c.wait();
    }
    assert!(status.success(), "{said}");
    let stacks = folded(&trace);
    for (function, exact_depth) in [("recurse::spin", Some(21)), ("probe_loop", None)] {
        let (whole, total) = complete_share(&stacks, function, |s| {
            exact_depth.is_none_or(|d| downs(s) == d)
        });
        let before_tables: u64 = stacks
            .iter()
            // The leaf alone (with the frames inlined into it, and the kernel's above).
            .filter(|(s, _)| {
                s[0] == "[truncated]" && s.get(1).map(String::as_str) == Some(function)
            })
            .map(|(_, n)| n)
            .sum();
        let after_tables = total - before_tables;
        assert!(whole >= 100, "{function}: {whole} whole stacks: {stacks:?}");
        assert!(
            whole * 100 >= after_tables * 95,
            "{function}: {whole} of {after_tables} stacks whole: {stacks:?}"
        );
    }
    let info = ok(ft(&["info", "-i", trace.to_str().unwrap()]));
    assert!(
        info.contains(" recurse ") && info.contains(" probes "),
        "{info}"
    );
    // Issue 37 item 6: what was recorded said, not a blank command line, "(pid 0)" and "drop"; and
    // when the samples were taken, apart from the recorder's start-up.
    assert!(
        info.contains("recorded     : every process of the machine (profile -a)"),
        "{info}"
    );
    let processes: usize = info
        .lines()
        .find_map(|l| l.strip_prefix("processes    : "))
        .and_then(|l| l.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("{info}"));
    assert!(processes >= 2, "{info}");
    assert!(
        !info.contains("(pid 0)") && !info.contains("mode         : drop"),
        "{info}"
    );
    assert!(info.contains("sample span  : "), "{info}");
}

/// `-a` is the eBPF backend's: without --bpf, one line.
#[test]
fn system_wide_needs_bpf() {
    let out = ft(&["profile", "-a", "--duration", "1s"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("--bpf"), "{err}");
}

/// Issue 37 item 4: the Perfetto view of counts read from the kernel. Every count of one read carries
/// the read's time, so each sample was a zero-length slice and a thread's top-level time nothing like
/// `report --threads`'s (0.103 s for 2.24 s on ripgrep). Each now lasts its weight: per thread, the
/// top-level slices add up to the weight `report --threads` gives it, and none is empty.
#[test]
fn perfetto_view_of_kernel_counts_gives_each_thread_its_weight() {
    let dir = scratch("profile_bpf_perfetto");
    let exe = build_c(
        &dir,
        "gcc",
        "busy_threads.c",
        "busy_threads",
        &["-O1", "-fno-omit-frame-pointer", "-pthread"],
    );
    let mut program = Command::new(&exe);
    program.arg("2").stdin(std::process::Stdio::null());
    let trace = profile_running(&dir, &mut program, 200);
    let report: serde_json::Value = serde_json::from_str(&ok(ft(&[
        "report",
        "--threads",
        "--json",
        "-i",
        trace.to_str().unwrap(),
    ])))
    .unwrap();
    let mut top: std::collections::HashMap<u64, (u64, usize, u64)> = Default::default();
    let mut empty = 0;
    for e in perfetto_view(&trace, &dir) {
        let Some(tid) = e["tid"].as_u64() else {
            continue;
        };
        let ts = e["ts"].as_u64().unwrap_or_default();
        let (time, depth, began) = top.entry(tid).or_default();
        match e["kind"].as_str() {
            Some("begin") => {
                if *depth == 0 {
                    *began = ts;
                }
                *depth += 1;
            }
            Some("end") => {
                *depth -= 1;
                if *depth == 0 {
                    empty += usize::from(ts == *began);
                    *time += ts - *began;
                }
            }
            _ => {}
        }
    }
    let threads = report["threads"].as_array().expect("report --threads");
    let busy: Vec<_> = threads
        .iter()
        .filter(|t| t["weight"].as_u64().unwrap_or(0) > 100_000_000)
        .collect();
    assert_eq!(busy.len(), 2, "two spinning threads: {report}");
    for t in busy {
        let tid = t["tid"].as_u64().unwrap();
        let weight = t["weight"].as_u64().unwrap();
        let shown = top.get(&tid).map_or(0, |v| v.0);
        assert!(
            shown.abs_diff(weight) * 100 <= weight,
            "thread {tid}: {shown} ns of top-level slices in Perfetto, {weight} ns in report"
        );
    }
    assert_eq!(empty, 0, "top-level slices of no length");
}

/// Issue 37 item 2: probe and tracepoint hits after the program forked. The events were opened with
/// `inherit`, so the child got copies carrying the counting program, and the child's exit took the
/// program off the tracepoint for the parent too: 0 of 1,000 `write`s counted in 4 of 6 runs with
/// an exec in the child, 1 of 6 without. Every run, every hit of the parent now.
#[test]
fn probe_and_tracepoint_hits_after_a_fork_are_all_counted() {
    let dir = scratch("profile_bpf_forkexec");
    let exe = build_c(
        &dir,
        "gcc",
        "forkexec_hits.c",
        "forkexec_hits",
        &["-O1", "-fno-builtin"],
    );
    let libc = "/lib/x86_64-linux-gnu/libc.so.6";
    let malloc = format!("uprobe:{libc}:malloc");
    for (round, mode) in ["exec", "noexec", "exec", "noexec", "exec", "exec"]
        .iter()
        .enumerate()
    {
        let trace = dir.join(format!("hits{round}.data"));
        let out = ferrotrace()
            .args(["profile", "--bpf", "-o"])
            .arg(&trace)
            .args(["-e", &malloc, "-e", "syscalls:sys_enter_write", "--"])
            .arg(&exe)
            .args([mode, "1000"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", text(&out.stderr));
        let report: serde_json::Value = serde_json::from_str(&ok(ft(&[
            "report",
            "--json",
            "--inline",
            "-i",
            trace.to_str().unwrap(),
        ])))
        .unwrap();
        let self_of = |name: &str| {
            report["functions"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|f| f["function"].as_str().is_some_and(|f| f.contains(name)))
                .map(|f| f["self"].as_u64().unwrap_or(0))
                .sum::<u64>()
        };
        let writes = self_of("perf_syscall_enter");
        let mallocs = self_of("malloc");
        assert_eq!(writes, 1000, "run {round} ({mode}): write hits: {report}");
        assert!(
            mallocs >= 1000,
            "run {round} ({mode}): malloc hits {mallocs}: {report}"
        );
    }
}

/// Issue 37 item 1: the kernel's map of user stacks (32,768 entries) was never emptied, so past that
/// many distinct stacks every new one was lost whole (`[truncated]` with no frame under it): 32,115
/// of 65,406 samples of `manystacks.c` at 9,999 Hz. The stacks are taken out as they are read now:
/// well over 32,768 distinct stacks, none lost to a full map.
#[test]
fn more_distinct_stacks_than_the_stack_map_holds_are_all_kept() {
    let dir = scratch("profile_bpf_manystacks");
    let exe = build_c(
        &dir,
        "gcc",
        "manystacks.c",
        "manystacks",
        &["-O1", "-fno-omit-frame-pointer", "-pthread"],
    );
    let trace = dir.join("bpf.data");
    let out = ferrotrace()
        .args(["profile", "--bpf", "-F", "9999", "-o"])
        .arg(&trace)
        .arg("--")
        .arg(&exe)
        .arg("15")
        .output()
        .unwrap();
    let err = text(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(!err.contains("the stack map was full"), "{err}");
    let stacks = folded(&trace);
    let distinct = stacks
        .iter()
        .filter(|(s, _)| s.iter().filter(|f| f.starts_with('f')).count() == 9)
        .count();
    assert!(
        distinct > 32_768,
        "{distinct} distinct whole stacks of 9 steps, {} in all: the map never had to hold more",
        stacks.len()
    );
}

/// Issue 37 item 6: why stacks were cut short is kept in the trace (its UnwindStops chunk), so that
/// `info` says it, not only the recorder's stderr. A recursion 200 deep is past the unwinder's
/// 127-frame limit: every spinning sample stops there, and `info` gives the count the recorder said.
#[test]
fn why_stacks_stopped_early_is_in_the_trace_and_info_says_it() {
    let dir = scratch("profile_bpf_stops");
    let exe = recurse_program(&dir);
    let trace = profile_bpf(
        &dir,
        &[
            "-F",
            "999",
            "--",
            exe.to_str().unwrap(),
            "recurse",
            "200",
            "600",
        ],
    );
    let t = ferrotrace_analysis::reader::Trace::open(&trace).unwrap();
    let stops = t.unwind_stops().expect("an UnwindStops chunk");
    let depth = ferrotrace_core::schema::unwind_stop::REASONS
        .iter()
        .position(|r| r.0 == ferrotrace_core::schema::unwind_stop::DEPTH)
        .unwrap();
    let deep = stops.samples[depth];
    // 600 ms of spinning: about 600 samples on a quiet machine, far fewer on a loaded one.
    assert!(deep >= 50, "{stops:?}");
    let info = ok(ft(&["info", "-i", trace.to_str().unwrap()]));
    assert!(
        info.contains(&format!("{deep} deeper than the frame limit")),
        "{info}"
    );
}

/// The children of process `parent` that have not exec'd yet (their executable is still the
/// parent's): a program held before its `execve`.
fn held_children(parent: u32) -> Vec<u32> {
    let parent_exe = std::fs::read_link(format!("/proc/{parent}/exe")).ok();
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            // `pid (comm) S ppid ...`: the parent follows the state.
            let ppid = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse::<u32>().ok());
            ppid == Some(parent)
                && std::fs::read_link(format!("/proc/{pid}/exe")).ok() == parent_exe
        })
        .collect()
}

/// `profile` starts its program as `record` does (issue 34): held before its `execve` until the
/// events are open, and never run unsampled. Killed while the eBPF programs load (the program is
/// forked before, and held), `profile` leaves a program that gives up instead of running.
#[test]
fn a_program_held_for_profile_never_runs_when_profile_is_killed() {
    let dir = scratch("profile_bpf_killed_while_held");
    let ran = dir.join("ran");
    let script = format!("echo ran > {}", ran.display());
    let mut profiler = ferrotrace()
        .args(["profile", "--bpf", "-o"])
        .arg(dir.join("held.data"))
        .args(["--", "/bin/sh", "-c", &script])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let held = loop {
        let held = held_children(profiler.id());
        if !held.is_empty() {
            break held;
        }
        assert!(
            std::time::Instant::now() < deadline && profiler.try_wait().unwrap().is_none(),
            "no program held before its exec was seen"
        );
        std::thread::sleep(Duration::from_millis(1));
    };
    kill(profiler.id() as i32, libc::SIGKILL);
    profiler.wait().unwrap();
    // The held child sees the release pipe closed and exits without exec; it is reparented and
    // reaped by init.
    let gone = std::time::Instant::now() + Duration::from_secs(10);
    let running = |pid: &u32| {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
            stat.rsplit_once(')')
                .is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z'))
        })
    };
    while held.iter().any(running) && std::time::Instant::now() < gone {
        std::thread::sleep(Duration::from_millis(10));
    }
    std::thread::sleep(Duration::from_millis(200));
    assert!(
        !ran.exists(),
        "the program ran after profile was killed while it held it"
    );
}

/// `-a` keeps reading the counts while a process maps a library whose unwind table takes seconds to
/// build (issue 37 item 3: tables were built on the loop's thread, and with a cargo build starting
/// processes no count was read for 10 s and `--duration 10s` recorded 14 s). The table is built in
/// the background: a busy program's samples keep arriving every quarter of a second, and the
/// recording ends when its duration does.
#[test]
fn system_wide_keeps_reading_while_a_large_table_is_built() {
    let _alone = every_process_alone();
    let dir = scratch("profile_bpf_all_large_table");
    let recurse = recurse_program(&dir);
    let mut busy = Command::new(&recurse)
        .args(["recurse", "20", "600000"])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let trace = dir.join("all.data");
    let (mut recorder, mut stderr, mut said) = recording_every_process("4s", &trace);
    // libLLVM (123 MB, its table seconds to build in a debug build), mapped by dlopen.
    let llvm = "/usr/lib/llvm-16/lib/libLLVM-16.so.1";
    let mut mapper = Command::new("python3")
        .args([
            "-c",
            &format!("import ctypes, time; ctypes.CDLL('{llvm}'); time.sleep(10)"),
        ])
        .spawn()
        .unwrap();
    std::io::Read::read_to_string(&mut stderr, &mut said).unwrap();
    let status = recorder.wait().unwrap();
    for c in [&mut busy, &mut mapper] {
        let _ = c.kill();
        let _ = c.wait();
    }
    assert!(status.success(), "{said}");
    let t = ferrotrace_analysis::reader::Trace::open(&trace).unwrap();
    let set = ferrotrace_analysis::samples::SampleSet::load(&t)
        .unwrap()
        .expect("samples");
    // Every process's: a drain with any count in it (the busy program's own may wait for a CPU on
    // a loaded machine; something always runs).
    let mut times: Vec<u64> = set.samples.iter().map(|s| s.time_ns).collect();
    times.sort_unstable();
    times.dedup();
    assert!(
        times.len() >= 8,
        "{} reads of the counts: {said}",
        times.len()
    );
    let longest = times.windows(2).map(|w| w[1] - w[0]).max().unwrap_or(0);
    assert!(
        longest < 1_500_000_000,
        "no count read for {} ms: {said}",
        longest / 1_000_000
    );
    let span = times.last().unwrap() - times.first().unwrap();
    assert!(
        span < 5_000_000_000,
        "counts read over {} ms of a 4 s recording: {said}",
        span / 1_000_000
    );
}
