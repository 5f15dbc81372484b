//! Shared by the integration tests: builds the instrumented test programs (nightly, XRay) and the
//! preload library once, and runs `ferrotrace` on them.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use ferrotrace_analysis::reader::{EventKind, Trace};
use std::process::{Command, Output};
use std::sync::OnceLock;

/// The repository root.
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("repo root")
}

fn clean_cargo_env(cmd: &mut Command) -> &mut Command {
    for var in [
        "RUSTC",
        "RUSTDOC",
        "RUSTC_WRAPPER",
        "RUSTC_WORKSPACE_WRAPPER",
        "RUSTFLAGS",
        "CARGO_ENCODED_RUSTFLAGS",
        "CARGO_TARGET_DIR",
        "CARGO_BUILD_TARGET_DIR",
        "RUSTUP_TOOLCHAIN",
        "CARGO",
    ] {
        cmd.env_remove(var);
    }
    cmd
}

fn run_ok(cmd: &mut Command, what: &str) {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("{what}: cannot run: {e}"));
    assert!(
        out.status.success(),
        "{what} failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Path of a test program from `testprogs/`, built once per test binary with nightly and XRay sleds.
pub fn testprog(name: &str) -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    let dir = BUILT.get_or_init(|| {
        let root = repo().join("testprogs");
        run_ok(
            clean_cargo_env(&mut Command::new("rustup"))
                .args(["run", "nightly", "cargo", "build", "--release", "--quiet"])
                .current_dir(&root)
                .env("RUSTFLAGS", "-Zinstrument-xray=always -Cforce-frame-pointers=yes"),
            "building testprogs with nightly (is the nightly toolchain installed? rustup toolchain install nightly)",
        );
        root.join("target/release")
    });
    dir.join(name)
}

/// Path of a test program from `testprogs/`, built once per test binary with nightly and mcount calls
/// (`-Zinstrument-mcount -Cforce-frame-pointers=yes`) into `testprogs/target/mcount`.
pub fn testprog_mcount(name: &str) -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    let dir = BUILT.get_or_init(|| {
        let root = repo().join("testprogs");
        run_ok(
            clean_cargo_env(&mut Command::new("rustup"))
                .args(["run", "nightly", "cargo", "build", "--release", "--quiet"])
                .current_dir(&root)
                .env("CARGO_TARGET_DIR", root.join("target/mcount"))
                .env(
                    "RUSTFLAGS",
                    "-Zinstrument-mcount -Cforce-frame-pointers=yes",
                ),
            "building testprogs with nightly and -Zinstrument-mcount",
        );
        root.join("target/mcount/release")
    });
    dir.join(name)
}

/// Builds `testprogs/c/SOURCE` into `dir/OUT` with `compiler` (gcc, g++, clang-16) and `flags`.
pub fn build_c(dir: &Path, compiler: &str, source: &str, out: &str, flags: &[&str]) -> PathBuf {
    let exe = dir.join(out);
    run_ok(
        Command::new(compiler)
            .args(flags)
            .arg("-o")
            .arg(&exe)
            .arg(repo().join("testprogs/c").join(source)),
        &format!("{compiler} {flags:?} {source}"),
    );
    exe
}

/// Path of the preload library, built once per test binary in the test profile.
pub fn preload() -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
            run_ok(
                clean_cargo_env(&mut Command::new(cargo))
                    .args(["build", "--quiet", "-p", "ferrotrace-preload"])
                    .current_dir(repo()),
                "building ferrotrace-preload",
            );
            let exe = PathBuf::from(env!("CARGO_BIN_EXE_ferrotrace"));
            exe.parent()
                .expect("target dir")
                .join("libferrotrace_preload.so")
        })
        .clone()
}

/// A fresh directory for one test's files.
pub fn scratch(test: &str) -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join(test);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("scratch dir");
    d
}

/// `ferrotrace` with the preload library configured.
pub fn ferrotrace() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_ferrotrace"));
    c.env("FERROTRACE_PRELOAD", preload());
    c
}

/// Runs `ferrotrace record OPTS -o DIR/trace.data -- PROGRAM ARGS` and returns its output and the trace.
pub fn record(dir: &Path, opts: &[&str], program: &Path, args: &[&str]) -> (Output, PathBuf) {
    let trace = dir.join("trace.data");
    let out = ferrotrace()
        .arg("record")
        .args(opts)
        .arg("-o")
        .arg(&trace)
        .arg("--")
        .arg(program)
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run ferrotrace record");
    (out, trace)
}

/// Runs `ferrotrace ARGS`.
pub fn ft(args: &[&str]) -> Output {
    ferrotrace().args(args).output().expect("run ferrotrace")
}

/// The standard output of a run that must have succeeded.
pub fn ok(out: Output) -> String {
    assert!(
        out.status.success(),
        "ferrotrace failed ({}): {}",
        out.status,
        text(&out.stderr)
    );
    text(&out.stdout)
}

/// `String` of a byte slice, for assertions.
pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Decodes a Perfetto protobuf trace with `protoc` against the repository's subset of Perfetto's
/// published .proto files: an independent decoder.
pub fn protoc_decode(bytes: &[u8], dir: &Path) -> String {
    let proto_dir = repo().join("crates/ferrotrace-analysis/proto");
    let input = dir.join("in.pb");
    std::fs::write(&input, bytes).unwrap();
    let out = std::process::Command::new("protoc")
        .arg(format!("-I{}", proto_dir.display()))
        .args(["--decode=perfetto.protos.Trace", "perfetto_trace.proto"])
        .stdin(std::fs::File::open(&input).unwrap())
        .output()
        .expect("protoc installed");
    assert!(out.status.success(), "protoc: {}", text(&out.stderr));
    text(&out.stdout)
}

/// Per-thread check that entries and exits nest properly; returns (entries, exits) of `func`.
pub fn nested_counts(trace: &Trace, func: &str) -> (u64, u64) {
    let mut entries = 0;
    let mut exits = 0;
    for &tid in trace.threads.keys() {
        let mut stack: Vec<u32> = Vec::new();
        for e in trace.thread_events(tid).expect("thread events") {
            let e = e.expect("event");
            let is_func = trace.function_name(e.id) == func;
            match e.kind {
                EventKind::Entry => {
                    stack.push(e.id);
                    entries += is_func as u64;
                }
                EventKind::Exit | EventKind::TailExit => {
                    assert_eq!(
                        stack.pop(),
                        Some(e.id),
                        "exit of {} does not match the open frame",
                        trace.function_name(e.id)
                    );
                    exits += is_func as u64;
                }
                _ => {}
            }
        }
        assert!(
            stack.is_empty(),
            "thread {tid} ends with open frames {stack:?}"
        );
    }
    (entries, exits)
}

pub fn program_calls(stdout: &[u8]) -> u64 {
    let s = text(stdout);
    s.split_whitespace()
        .find_map(|w| w.strip_prefix("calls="))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no calls= in output: {s}"))
}

/// What walking a thread's events with unwinding semantics found.
#[derive(Default, Debug)]
pub struct Walk {
    /// Frames popped without their own exit, because an exit further down arrived (panic unwinding).
    pub unwound: Vec<String>,
    /// Exits with no matching entry (functions running before tracing started).
    pub preexisting: Vec<String>,
    /// Frames still open at the end of the thread's events.
    pub open_at_end: Vec<String>,
    pub entries: std::collections::HashMap<String, u64>,
}

pub fn walk(trace: &Trace, tid: u32) -> Walk {
    let mut w = Walk::default();
    let mut stack: Vec<u32> = Vec::new();
    for e in trace.thread_events(tid).expect("events") {
        let e = e.expect("event decodes");
        let name = trace.function_name(e.id);
        match e.kind {
            EventKind::Entry => {
                stack.push(e.id);
                *w.entries.entry(name).or_default() += 1;
            }
            EventKind::Exit | EventKind::TailExit => match stack.iter().rposition(|&f| f == e.id) {
                Some(pos) => {
                    for f in stack.drain(pos + 1..) {
                        w.unwound.push(trace.function_name(f));
                    }
                    stack.pop();
                }
                None => w.preexisting.push(name),
            },
            _ => {}
        }
    }
    w.open_at_end = stack.iter().map(|&f| trace.function_name(f)).collect();
    w
}

pub fn tid_named(trace: &Trace, name: &str) -> u32 {
    trace
        .threads
        .values()
        .find(|t| t.name == name)
        .unwrap_or_else(|| panic!("no thread named {name}"))
        .tid
}
