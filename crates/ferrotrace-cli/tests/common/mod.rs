//! Shared by the integration tests: builds the instrumented test programs (nightly, XRay) and the
//! preload library once, and runs `ferrotrace` on them.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
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

/// Builds `testprogs/c/NAME.c` into `dir/NAME` with `compiler` (clang-16, gcc) and `flags`.
pub fn build_c(dir: &Path, name: &str, compiler: &str, flags: &[&str]) -> PathBuf {
    let exe = dir.join(name);
    let status = Command::new(compiler)
        .args(flags)
        .arg("-o")
        .arg(&exe)
        .arg(repo().join(format!("testprogs/c/{name}.c")))
        .status()
        .unwrap_or_else(|e| {
            panic!("{compiler} is needed for this test (scripts/setup.sh installs it): {e}")
        });
    assert!(status.success(), "{compiler} failed on {name}.c");
    exe
}

/// The files beside `trace` named `<its name>.<suffix>`: the traces of the processes the traced one
/// started or forked.
pub fn traces_beside(trace: &Path) -> Vec<PathBuf> {
    let prefix = format!("{}.", trace.file_name().unwrap().to_string_lossy());
    std::fs::read_dir(trace.parent().unwrap())
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
        .map(|e| e.path())
        .collect()
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

/// `ferrotrace record --mode drop -F '^fib::fib$' -o TRACE -- fib 24` with two 4 KiB chunks, program and
/// collector on one CPU: the program outruns the collector, so events are lost (and counted).
pub fn record_losing_events(trace: &Path) -> Output {
    Command::new("taskset")
        .args(["-c", "0"])
        .arg(env!("CARGO_BIN_EXE_ferrotrace"))
        .env("FERROTRACE_PRELOAD", preload())
        .args([
            "record",
            "--mode",
            "drop",
            "--buffer-size",
            "8K",
            "--chunk-size",
            "4K",
        ])
        .args(["-F", "^fib::fib$", "-o"])
        .arg(trace)
        .arg("--")
        .arg(testprog("fib"))
        .arg("24")
        .output()
        .expect("run ferrotrace record under taskset")
}
