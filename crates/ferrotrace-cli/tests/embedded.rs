//! ferrotrace-embedded end to end: a freestanding program (no std, no libc, raw clone) and an ordinary
//! program through the hosted front end trace themselves; every command reads their traces.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use common::{ft, ok, repo, scratch, text};

const INSTRUMENT: &str = "-Zinstrument-mcount -Cforce-frame-pointers=yes";

fn build(cmd: &mut Command, what: &str) {
    for var in [
        "RUSTC",
        "RUSTC_WRAPPER",
        "CARGO_TARGET_DIR",
        "RUSTUP_TOOLCHAIN",
        "CARGO",
    ] {
        cmd.env_remove(var);
    }
    let out = cmd.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(
        out.status.success(),
        "{what} failed:\n{}",
        text(&out.stderr)
    );
}

/// testprogs/freestanding built with nightly and mcount instrumentation.
fn freestanding() -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let dir = repo().join("testprogs/freestanding");
            build(
                Command::new("rustup")
                    .args(["run", "nightly", "cargo", "build", "--release", "--quiet"])
                    .current_dir(&dir)
                    .env(
                        "RUSTFLAGS",
                        format!("{INSTRUMENT} -Cpanic=abort -Crelocation-model=static -Ctarget-feature=+crt-static"),
                    ),
                "building testprogs/freestanding with nightly",
            );
            dir.join("target/release/ft-freestanding")
        })
        .clone()
}

/// `calls=A,B elapsed_ns=A,B tsc_hz=HZ lost=L` of the freestanding program.
fn counts(stdout: &str, key: &str) -> Vec<u64> {
    let field = stdout
        .split_whitespace()
        .find_map(|w| w.strip_prefix(&format!("{key}=")))
        .unwrap_or_else(|| panic!("no {key}= in {stdout:?}"));
    field.split(',').map(|v| v.parse().unwrap()).collect()
}

/// The report row of `name`: (total ns, calls).
fn report_row(report: &str, name: &str) -> (f64, u64) {
    let line = report
        .lines()
        .find(|l| {
            // The name ends the row, or comes before a note like `(6 still running at end)`.
            let row = l.split("  (").next().unwrap_or(l);
            row.split_whitespace().last() == Some(name)
        })
        .unwrap_or_else(|| panic!("no row for {name} in\n{report}"));
    let cols: Vec<&str> = line.split_whitespace().collect();
    let ns = |v: &str, unit: &str| {
        v.parse::<f64>().unwrap()
            * match unit {
                "ns" => 1.0,
                "us" => 1e3,
                "ms" => 1e6,
                "s" => 1e9,
                u => panic!("unit {u}"),
            }
    };
    (ns(cols[0], cols[1]), cols[4].parse().unwrap())
}

fn run_freestanding(dir: &Path, args: &[&str]) -> (PathBuf, String) {
    let trace = dir.join("trace.data");
    let out = Command::new(freestanding())
        .arg(&trace)
        .args(args)
        .output()
        .expect("run the freestanding program");
    assert!(out.status.success(), "{}", text(&out.stderr));
    (trace, text(&out.stdout))
}

#[test]
fn freestanding_program_report_and_replay_name_its_calls_from_the_binary() {
    let dir = scratch("embedded_freestanding");
    let (trace, stdout) = run_freestanding(&dir, &["14", "2"]);
    let calls = counts(&stdout, "calls");
    let elapsed = counts(&stdout, "elapsed_ns");
    let bin = freestanding();
    let bin = bin.to_str().unwrap();
    let t = trace.to_str().unwrap();

    let info = ok(ft(&["info", "-i", t]));
    assert!(info.contains("mcount, fentry, embedded"), "{info}");
    assert!(
        info.contains(" main ") && info.contains(" worker "),
        "{info}"
    );
    assert!(info.contains(", 0 lost"), "{info}");

    let report = ok(ft(&["report", "-i", t, "--symbols", bin]));
    let (_, fib_calls) = report_row(&report, "ft_freestanding::fib");
    assert_eq!(fib_calls, calls[0] + calls[1], "{report}");
    // The C part, built with gcc -pg -mfentry: its calls go through __fentry__.
    let (_, cfib_calls) = report_row(&report, "cfib");
    assert_eq!(cfib_calls, counts(&stdout, "cfib")[0], "{report}");
    // Durations in ns: `run` holds each thread's timed loop.
    let (run_ns, run_calls) = report_row(&report, "ft_freestanding::run");
    assert_eq!(run_calls, 2);
    let measured = (elapsed[0] + elapsed[1]) as f64;
    assert!(
        run_ns >= measured * 0.9 && run_ns <= measured * 1.5,
        "traced {run_ns} ns against {measured} ns measured by the program\n{report}"
    );

    // The nesting: run, then fib 14 levels deep under it (fib(14) recurses to fib(1)), per thread.
    let replay = ok(ft(&["replay", "-i", t, "--symbols", bin]));
    let depth = |l: &str| {
        l.split('|')
            .nth(1)
            .map_or(0, |f| f.len() - f.trim_start().len())
    };
    let run_depth = replay
        .lines()
        .find(|l| l.contains("ft_freestanding::run() {"))
        .map(depth)
        .expect("run in the replay");
    let deepest = replay
        .lines()
        .filter(|l| l.contains("ft_freestanding::fib()"))
        .map(depth)
        .max()
        .unwrap();
    assert_eq!(
        deepest,
        run_depth + 2 * 14,
        "fib(14) to fib(1): 14 levels below run\n{}",
        &replay[..2000]
    );

    // Without the binary the functions are addresses, and the user is told what to do.
    let bare = ft(&["report", "-i", t]);
    assert!(
        text(&bare.stderr).contains("--symbols BINARY"),
        "{}",
        text(&bare.stderr)
    );
    assert!(text(&bare.stdout).contains("0x"), "{}", text(&bare.stdout));
}

#[test]
fn callbacks_of_the_embedder_find_threads_and_time_without_being_traced() {
    // Threads::from_fn and Clock::ns with the program's own functions, instrumented like the rest:
    // tracing them would recurse; the counts stay exact and neither they nor the tracer's inlined
    // register_thread show up.
    let dir = scratch("embedded_callbacks");
    let (trace, stdout) = run_freestanding(&dir, &["12", "2", "callbacks"]);
    let calls = counts(&stdout, "calls");
    let bin = freestanding();
    let report = ok(ft(&[
        "report",
        "-i",
        trace.to_str().unwrap(),
        "--symbols",
        bin.to_str().unwrap(),
    ]));
    assert_eq!(
        report_row(&report, "ft_freestanding::fib").1,
        calls[0] + calls[1],
        "{report}"
    );
    assert_eq!(report_row(&report, "ft_freestanding::run").1, 2, "{report}");
    for untraced in ["current_index", "now_ns", "register_thread"] {
        assert!(!report.contains(untraced), "{untraced} traced:\n{report}");
    }
}

#[test]
fn freestanding_trace_works_in_every_command_and_export() {
    let dir = scratch("embedded_every_command");
    let (trace, stdout) = run_freestanding(&dir, &["10", "1"]);
    let calls = counts(&stdout, "calls");
    let bin = freestanding();
    let (t, b) = (trace.to_str().unwrap(), bin.to_str().unwrap());
    let graph = ok(ft(&[
        "graph",
        "-i",
        t,
        "--symbols",
        b,
        "ft_freestanding::run",
    ]));
    assert!(graph.contains("ft_freestanding::fib"), "{graph}");
    let svg = dir.join("flame.svg");
    ok(ft(&[
        "flame",
        "-i",
        t,
        "--symbols",
        b,
        "-o",
        svg.to_str().unwrap(),
    ]));
    assert!(std::fs::read_to_string(&svg)
        .unwrap()
        .contains("ft_freestanding::fib"));
    let folded = ok(ft(&["dump", "-i", t, "--symbols", b, "--format", "folded"]));
    assert!(
        folded.contains("ft_freestanding::run;ft_freestanding::fib"),
        "{folded}"
    );
    let chrome = ok(ft(&["dump", "-i", t, "--symbols", b, "--format", "chrome"]));
    assert_eq!(
        chrome.matches("\"ft_freestanding::fib\"").count() as u64,
        2 * (calls[0] + calls[1]),
        "a B and an E event per call"
    );
    let pf = dir.join("t.perfetto");
    ok(ft(&[
        "dump",
        "-i",
        t,
        "--symbols",
        b,
        "--format",
        "perfetto",
        "-o",
        pf.to_str().unwrap(),
    ]));
    assert!(std::fs::metadata(&pf).unwrap().len() > 0);
    let ud = dir.join("uftrace.data");
    ok(ft(&[
        "dump",
        "-i",
        t,
        "--symbols",
        b,
        "--format",
        "uftrace",
        "-o",
        ud.to_str().unwrap(),
    ]));
    let calls_of = common::uftrace_report_calls(&ud);
    let fib = calls_of
        .iter()
        .find(|(name, _)| name == "ft_freestanding::fib")
        .unwrap_or_else(|| panic!("{calls_of:?}"));
    assert_eq!(fib.1, calls[0] + calls[1], "{calls_of:?}");
}

#[test]
fn hosted_front_end_traces_an_ordinary_program_and_uftrace_reads_it() {
    let dir = scratch("embedded_hosted");
    let target = Path::new(env!("CARGO_TARGET_TMPDIR")).join("embedded-hosted-target");
    build(
        Command::new("rustup")
            .args(["run", "nightly", "cargo", "build", "--release", "--quiet"])
            .args([
                "-p",
                "ferrotrace-embedded",
                "--features",
                "hosted",
                "--example",
                "hosted",
            ])
            .arg("--target-dir")
            .arg(&target)
            .current_dir(repo())
            .env("RUSTFLAGS", INSTRUMENT),
        "building the hosted example with nightly",
    );
    let trace = dir.join("hosted.data");
    let out = Command::new(target.join("release/examples/hosted"))
        .arg(&trace)
        .output()
        .expect("run the example");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let fib_calls: u64 = stdout
        .split_whitespace()
        .find_map(|w| w.strip_prefix("fib_calls="))
        .unwrap()
        .parse()
        .unwrap();
    assert!(stdout.contains("caught=true"), "{stdout}");
    let t = trace.to_str().unwrap();
    // The trace names the executable, its load bias and build-id: no --symbols needed.
    let report = ok(ft(&["report", "-i", t]));
    assert_eq!(report_row(&report, "hosted::fib").1, fib_calls, "{report}");
    assert_eq!(report_row(&report, "hosted::worker").1, 4, "{report}");
    // Frames a caught panic unwound show their entries (their exits are not recorded).
    assert_eq!(report_row(&report, "hosted::fall").1, 6, "{report}");
    let info = ok(ft(&["info", "-i", t]));
    assert!(
        info.contains("worker0") && info.contains("worker1"),
        "{info}"
    );

    let ud = dir.join("uftrace.data");
    ok(ft(&[
        "dump",
        "-i",
        t,
        "--format",
        "uftrace",
        "-o",
        ud.to_str().unwrap(),
    ]));
    let out = Command::new("uftrace")
        .args(["replay", "-d", ud.to_str().unwrap()])
        .output()
        .expect("uftrace (scripts/setup.sh installs it)");
    let replay = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        replay.matches("hosted::fib()").count() as u64,
        fib_calls,
        "each call once: `fib();` for a leaf, `fib() {{` for the others\n{}",
        &replay[..replay.len().min(3000)]
    );
}
