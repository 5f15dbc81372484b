//! `cargo ferrotrace` on a real cargo project.

mod common;

use std::path::Path;
use std::process::Command;

use common::*;
use ferrotrace_analysis::reader::Trace;
use ferrotrace_core::env;

fn cargo_ferrotrace(dir: &Path, path_prefix: Option<&Path>) -> Command {
    let bin = Path::new(env!("CARGO_BIN_EXE_cargo-ferrotrace"));
    let mut path = std::env::var_os("PATH").unwrap_or_default();
    if let Some(p) = path_prefix {
        let mut new = p.as_os_str().to_os_string();
        new.push(":");
        new.push(path);
        path = new;
    }
    let mut c = Command::new(bin);
    c.current_dir(dir)
        .env("PATH", path)
        .env(env::PRELOAD, preload())
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_TARGET_DIR")
        .arg("ferrotrace");
    c
}

fn new_project(dir: &Path) {
    std::fs::create_dir_all(dir.join("src")).unwrap();
    std::fs::write(
        dir.join("Cargo.toml"),
        "[package]\nname = \"demo\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[workspace]\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("src/main.rs"),
        "#[inline(never)]\nfn step(i: u32) -> u32 { std::hint::black_box(i) * 2 }\n\
         fn main() { let n: u32 = std::env::args().nth(1).unwrap().parse().unwrap();\n\
         let s: u32 = (0..n).map(step).sum(); println!(\"sum={s}\"); std::process::exit(4) }\n",
    )
    .unwrap();
}

#[test]
fn record_builds_with_sleds_in_its_own_target_dir_and_traces() {
    let dir = scratch("cargo_record");
    new_project(&dir);
    let out = cargo_ferrotrace(&dir, None)
        .args([
            "record",
            "--release",
            "-F",
            "demo::",
            "-o",
            "t.data",
            "--",
            "12",
        ])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(4),
        "exit status passes through: {}",
        text(&out.stderr)
    );
    assert!(text(&out.stdout).contains("sum=132"));
    assert!(
        dir.join("target/ferrotrace/release/demo").is_file(),
        "instrumented build in target/ferrotrace"
    );
    assert!(
        !dir.join("target/release").exists(),
        "normal builds untouched"
    );
    let t = Trace::open(dir.join("t.data")).expect("trace");
    let names: std::collections::BTreeSet<_> = t.functions().values().map(|f| f.name()).collect();
    assert!(
        names.contains("demo::step") && names.contains("demo::main"),
        "{names:?}"
    );
    let steps = t
        .thread_events(t.session().pid)
        .unwrap()
        .filter(|e| {
            let e = e.as_ref().unwrap();
            e.kind == ferrotrace_analysis::reader::EventKind::Entry
                && t.function_name(e.id) == "demo::step"
        })
        .count();
    assert_eq!(steps, 12);
}

#[test]
fn record_with_mcount_builds_with_mcount_calls_and_traces() {
    let dir = scratch("cargo_record_mcount");
    new_project(&dir);
    let out = cargo_ferrotrace(&dir, None)
        .args(["record", "--mcount", "--release", "-o", "t.data", "--", "9"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(4), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("sum=72"));
    assert!(
        dir.join("target/ferrotrace-mcount/release/demo").is_file(),
        "mcount build in target/ferrotrace-mcount"
    );
    let t = Trace::open(dir.join("t.data")).expect("trace");
    assert_eq!(
        t.session().sources,
        ferrotrace_core::schema::source::MCOUNT,
        "recorded by mcount hooks"
    );
    let w = walk(&t, t.session().pid);
    assert_eq!(w.entries.get("demo::step"), Some(&9), "{w:?}");
}

#[test]
fn missing_nightly_is_said_plainly() {
    let dir = scratch("cargo_no_nightly");
    new_project(&dir);
    let fake = dir.join("fakebin");
    std::fs::create_dir_all(&fake).unwrap();
    let rustup = fake.join("rustup");
    std::fs::write(
        &rustup,
        "#!/bin/sh\necho 'error: toolchain nightly is not installed' >&2\nexit 1\n",
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&rustup, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = cargo_ferrotrace(&dir, Some(&fake))
        .args(["build"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert!(
        err.contains("nightly") && err.contains("rustup toolchain install nightly"),
        "{err}"
    );
}

#[test]
fn profile_builds_with_frame_pointers_and_samples_the_hot_function() {
    let dir = scratch("cargo_profile");
    new_project(&dir);
    let out = cargo_ferrotrace(&dir, None)
        .args([
            "profile",
            "--release",
            "-F",
            "499",
            "-o",
            "p.data",
            "--",
            "300000000",
        ])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(4),
        "exit status passes through: {}",
        text(&out.stderr)
    );
    assert!(
        dir.join("target/ferrotrace-profile/release/demo").is_file(),
        "own target dir"
    );
    let trace = ferrotrace_analysis::reader::Trace::open(dir.join("p.data")).unwrap();
    let set = ferrotrace_analysis::samples::SampleSet::load(&trace)
        .unwrap()
        .expect("a trace of samples");
    let report = ferrotrace_analysis::report::samples::report(&set, Default::default());
    let step = report
        .get("demo::step")
        .expect("the hot function, with its module path");
    assert!(
        step.self_samples * 2 > report.samples,
        "most samples in the hot function: {report}"
    );
    // Symbols mangled as the traced build's are (v0), so that both name functions alike.
    let bin = std::fs::read(dir.join("target/ferrotrace-profile/release/demo")).unwrap();
    let v0_step = bin.windows(b"4step".len()).any(|w| w == b"4step")
        && bin.windows(b"_RNv".len()).any(|w| w == b"_RNv");
    assert!(v0_step, "the profiled build's symbols are v0-mangled");
}

/// A value for each option of `ferrotrace record` and `profile` that takes one.
fn value_for(action: &str, long: &str) -> &'static str {
    match (action, long) {
        (_, "output") => "opts.data",
        ("record", "filter") => "demo::",
        ("record", "notrace") => "demo::main",
        ("record", "patch") => "demo::",
        ("record", "trace") => "nothing_*",
        ("record", "mode") => "drop",
        ("record", "buffer-size") => "8M",
        ("record", "chunk-size") => "64K",
        ("record", "depth") => "4",
        ("record", "time-filter") => "1us",
        ("record", "trigger") => "demo::step@depth=2",
        ("record", "argument") => "demo::step@arg1",
        ("record", "retval") => "demo::step@retval",
        ("record", "alloc-sample") => "512K",
        ("record", "alloc-stack-depth") => "16",
        ("record", "sample-freq") => "499",
        ("record", "call-graph") => "dwarf",
        ("record", "event") => "cpu-clock",
        ("profile", "freq") => "99",
        ("profile", "event") => "cpu-clock",
        ("profile", "call-graph") => "fp",
        ("profile", "duration") => "20s",
        ("profile", "mmap-pages") => "64",
        _ => panic!("no test value for `ferrotrace {action} --{long}`: add one"),
    }
}

#[test]
fn every_record_and_profile_option_is_accepted_and_handed_on() {
    use clap::Args;
    let dir = scratch("cargo_every_option");
    new_project(&dir);
    for (action, cmd) in [
        (
            "record",
            ferrotrace_cli::cmd::record::RecordArgs::augment_args(clap::Command::new("r")),
        ),
        (
            "profile",
            ferrotrace_cli::cmd::profile::ProfileArgs::augment_args(clap::Command::new("p")),
        ),
    ] {
        let mut given: Vec<String> = Vec::new();
        let mut short_f = None;
        for arg in cmd.get_arguments().filter(|a| !a.is_positional()) {
            let long = arg.get_long().expect("every option has a long name");
            if long == "pid"
                || long == "all-cpus"
                || (action == "record" && long == "duration")
                || (action == "profile" && (long == "every" || long == "parquet" || long == "bpf"))
            {
                // cargo ferrotrace runs the program it built (not -p, not every process); -p is
                // cargo's --package (and record's --duration goes with -p, profile's --every and
                // --parquet with -a or -p; --bpf refuses --call-graph and -m, given here)
                continue;
            }
            if arg.get_short() == Some('F') {
                // Given as -F (ferrotrace's, not cargo's --features), after cargo options.
                short_f = Some(long);
                continue;
            }
            given.push(format!("--{long}"));
            if arg.get_action().takes_values() {
                given.push(value_for(action, long).to_string());
            }
        }
        let short_f = short_f.expect("record and profile have -F");
        let out = cargo_ferrotrace(&dir, None)
            .arg(action)
            .args(&given[..2])
            .arg("--release")
            .args(&given[2..])
            .args(["-F", value_for(action, short_f), "--", "7"])
            .output()
            .unwrap();
        let expected = format!(
            "{action} {} --{short_f} {} --",
            given.join(" "),
            value_for(action, short_f)
        );
        let err = text(&out.stderr);
        let running = err
            .lines()
            .find(|l| l.starts_with("cargo ferrotrace: running "))
            .unwrap_or_else(|| panic!("{action}: the build did not get through: {err}"));
        assert!(
            running.contains(&expected),
            "{action}: {running}\nexpected {expected}"
        );
        if action == "record" {
            // --trace reached `ferrotrace record`, which refused it for a program without tracepoints.
            assert_eq!(out.status.code(), Some(2), "{err}");
            assert!(err.contains("has no ferrotrace tracepoints"), "{err}");
        } else {
            assert_eq!(out.status.code(), Some(4), "{err}");
            assert!(dir.join("opts.data").is_file());
        }
    }
}
