//! Shared by the integration tests: builds the instrumented test programs (nightly, XRay) and the
//! preload library once, and runs `ferrotrace` on them.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use ferrotrace_analysis::reader::{EventKind, Trace};
use ferrotrace_core::env;
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

/// Builds `testprogs/` with nightly and `rustflags` into `testprogs/target/SUBDIR` (the default
/// `testprogs/target` for none) and returns the directory of the release binaries.
fn build_testprogs(subdir: Option<&str>, rustflags: &str) -> PathBuf {
    let root = repo().join("testprogs");
    let mut cmd = Command::new("rustup");
    clean_cargo_env(&mut cmd)
        .args(["run", "nightly", "cargo", "build", "--release", "--quiet"])
        .current_dir(&root)
        .env("RUSTFLAGS", rustflags);
    let target = match subdir {
        Some(d) => {
            cmd.env("CARGO_TARGET_DIR", root.join("target").join(d));
            root.join("target").join(d)
        }
        None => root.join("target"),
    };
    run_ok(
        &mut cmd,
        &format!("building testprogs with nightly and {rustflags} (is the nightly toolchain installed? rustup toolchain install nightly)"),
    );
    target.join("release")
}

/// Path of a test program from `testprogs/`, built once per test binary with nightly and XRay sleds.
pub fn testprog(name: &str) -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            build_testprogs(None, "-Zinstrument-xray=always -Cforce-frame-pointers=yes")
        })
        .join(name)
}

/// Path of a test program from `testprogs/`, built once per test binary with nightly and mcount calls
/// (`-Zinstrument-mcount -Cforce-frame-pointers=yes`) into `testprogs/target/mcount`.
pub fn testprog_mcount(name: &str) -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            build_testprogs(
                Some("mcount"),
                "-Zinstrument-mcount -Cforce-frame-pointers=yes",
            )
        })
        .join(name)
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
                    .args([
                        "build",
                        "--quiet",
                        "-p",
                        "ferrotrace-preload",
                        "-p",
                        "ferrotrace-preload-alloc",
                    ])
                    .current_dir(repo()),
                "building ferrotrace-preload and ferrotrace-preload-alloc",
            );
            let exe = PathBuf::from(env!("CARGO_BIN_EXE_ferrotrace"));
            exe.parent()
                .expect("target dir")
                .join("libferrotrace_preload.so")
        })
        .clone()
}

/// A small tmpfs mounted (as root) at `dir`, created if needed: a disk that fills. Unmounted when
/// dropped.
pub struct SmallDisk(PathBuf);

impl SmallDisk {
    /// Mounts a tmpfs of `size` (`64K`, `1M`) at `dir`.
    pub fn mount(dir: &Path, size: &str) -> SmallDisk {
        std::fs::create_dir_all(dir).unwrap();
        let mounted = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "none"])
            .arg(dir)
            .status()
            .expect("run mount");
        assert!(
            mounted.success(),
            "this test mounts a {size} tmpfs (as root)"
        );
        SmallDisk(dir.to_path_buf())
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
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
    c.env(env::PRELOAD, preload());
    // The tests send signals and count them: whatever the test runner inherited (nohup, a shell in
    // the background) must not decide what they do.
    default_signals(&mut c);
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

/// `ferrotrace dump --format perfetto --uncompressed` of `trace`, decoded by [`protoc_decode`].
pub fn perfetto_decoded(trace: &Path, dir: &Path) -> String {
    let pb = dir.join("t.pftrace");
    let dump = ft(&[
        "dump",
        "-i",
        trace.to_str().unwrap(),
        "--format",
        "perfetto",
        "--uncompressed",
        "-o",
        pb.to_str().unwrap(),
    ]);
    ok(dump);
    protoc_decode(&std::fs::read(&pb).unwrap(), dir)
}

/// Entries and exits (`Exit` or `TailExit`) of the function named `func`, per thread name.
pub fn calls_by_thread(
    trace: &ferrotrace_analysis::reader::Trace,
    func: &str,
) -> std::collections::HashMap<String, (u64, u64)> {
    use ferrotrace_analysis::reader::EventKind;
    let mut out = std::collections::HashMap::new();
    for th in trace.threads().values() {
        let mut n = (0, 0);
        for e in trace.thread_events(th.tid).expect("thread events") {
            let e = e.expect("event");
            if trace.function_name(e.id) != func {
                continue;
            }
            match e.kind {
                EventKind::Entry => n.0 += 1,
                EventKind::Exit | EventKind::TailExit => n.1 += 1,
                _ => {}
            }
        }
        out.insert(th.name.clone(), n);
    }
    out
}

/// kill(2): a negative pid signals the process group.
pub fn kill(pid: i32, sig: i32) {
    extern "C" {
        fn kill(pid: i32, sig: i32) -> i32;
    }
    // SAFETY: plain system call.
    assert_eq!(unsafe { kill(pid, sig) }, 0, "kill({pid}, {sig})");
}

/// Gives the command's process the default action for every signal the tests send, unblocked: a
/// shell running tests in the background hands SIGINT down as ignored, `nohup` SIGHUP, and an ignored
/// signal stays ignored across exec (an interactive shell would give the default).
pub fn default_signals(cmd: &mut Command) -> &mut Command {
    use std::os::unix::process::CommandExt;
    extern "C" {
        fn signal(sig: i32, handler: usize) -> usize;
        fn sigprocmask(how: i32, set: *const [u64; 16], old: *mut [u64; 16]) -> i32;
    }
    // SAFETY: the closure only calls signal(2) and sigprocmask(2), which are async-signal-safe, in the
    // child before exec; the empty set is a valid sigset_t (128 bytes).
    unsafe {
        cmd.pre_exec(|| {
            // SIGHUP, SIGINT, SIGQUIT, SIGUSR1, SIGUSR2, SIGPIPE, SIGALRM, SIGTERM.
            for sig in [1, 2, 3, 10, 12, 13, 14, 15] {
                signal(sig, 0);
            }
            let empty = [0u64; 16];
            sigprocmask(2 /* SIG_SETMASK */, &empty, std::ptr::null_mut());
            Ok(())
        })
    }
}

/// Per-thread check that entries and exits nest properly; returns (entries, exits) of `func`.
pub fn nested_counts(trace: &Trace, func: &str) -> (u64, u64) {
    let mut entries = 0;
    let mut exits = 0;
    for &tid in trace.threads().keys() {
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
        .threads()
        .values()
        .find(|t| t.name == name)
        .unwrap_or_else(|| panic!("no thread named {name}"))
        .tid
}

/// Checks a run of `testprogs` `threads` (eight named workers, each doing its own share of work) and
/// its trace: every worker under its own real OS tid and name, balanced, with exactly its calls.
pub fn assert_threads_program(out: &Output, trace: &Path) {
    assert!(out.status.success(), "{}", text(&out.stderr));
    let t = Trace::open(trace).expect("open");
    let expected_fn = [
        "threads::sum_squares",
        "threads::collatz_len",
        "threads::string_work",
    ];
    for i in 0..8u64 {
        let name = format!("worker-{i}");
        let tid = tid_named(&t, &name);
        assert_ne!(tid, t.session().pid, "{name} has its own OS tid");
        let w = walk(&t, tid);
        assert!(
            w.unwound.is_empty() && w.preexisting.is_empty() && w.open_at_end.is_empty(),
            "{name}: {w:?}"
        );
        let calls = 200 + i * 50;
        assert_eq!(w.entries.get("threads::worker"), Some(&1), "{name}");
        assert_eq!(
            w.entries.get(expected_fn[(i % 3) as usize]),
            Some(&calls),
            "{name} did its own work"
        );
        let printed = format!("{name} calls={calls}");
        assert!(
            text(&out.stdout).contains(&printed),
            "program says {printed}"
        );
    }
    assert!(
        t.threads().contains_key(&t.session().pid),
        "main thread recorded under the process id"
    );
    // Real OS tids, not self-assigned numbers: nine distinct ids, none of them small indices.
    assert_eq!(t.threads().len(), 9);
    assert!(
        t.threads().keys().all(|&tid| tid > 16),
        "{:?}",
        t.threads().keys()
    );
}

/// Records `fib 22` three times: every run's trace has exactly the calls the program counted, each
/// entry matched by its exit.
pub fn assert_fib_exact_in_every_run(dir: &Path, fib: &Path) {
    for run in 0..3 {
        let (out, trace) = record(dir, &[], fib, &["22"]);
        assert!(out.status.success(), "run {run}: {}", text(&out.stderr));
        let calls = program_calls(&out.stdout);
        let t = Trace::open(&trace).expect("open trace");
        assert!(t.end().is_some() && t.truncation().is_none());
        assert_eq!(nested_counts(&t, "fib::fib"), (calls, calls), "run {run}");
    }
}

/// Records `testprogs` `linked` (which links the runtime): its own copy records (the collector thread
/// never traced, nor the runtime's own functions), and stays dormant without `record`.
pub fn assert_linked_program_records_itself(dir: &Path, prog: &Path) {
    let (out, trace) = record(dir, &[], prog, &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("recording=true"),
        "the linked runtime is the one recording"
    );
    let t = Trace::open(&trace).expect("open");
    assert_eq!(nested_counts(&t, "linked::work"), (40, 40));
    assert_eq!(t.threads().len(), 1, "the collector thread is never traced");
    assert!(
        t.functions()
            .values()
            .all(|f| !f.name().starts_with("ferrotrace")),
        "the runtime never traces itself"
    );
    let plain = Command::new(prog).current_dir(dir).output().expect("run");
    assert!(text(&plain.stdout).contains("recording=false"));
}

/// Records `testprogs` `spawner`, which runs a copy of itself (fork and exec) and exits with status 3:
/// the status passes through, the parent's trace has the parent's calls, the child writes its own
/// trace named after its pid, and `record` says so.
pub fn assert_spawned_child_writes_its_own_trace(dir: &Path, prog: &Path) {
    let (out, trace) = record(dir, &[], prog, &[]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("child done"));
    let parent = Trace::open(&trace).expect("parent trace");
    let w = walk(&parent, parent.session().pid);
    assert_eq!(w.entries.get("spawner::parent_work"), Some(&50));
    assert_eq!(w.entries.get("spawner::child_work"), None);
    assert!(w.unwound.is_empty() && w.preexisting.is_empty());
    assert_eq!(
        w.open_at_end.last().map(String::as_str),
        Some("spawner::main"),
        "main calls exit(3)"
    );
    let child_files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("trace.data.")
        })
        .collect();
    assert_eq!(child_files.len(), 1, "{child_files:?}");
    let child = Trace::open(&child_files[0]).expect("child trace");
    assert_eq!(child.session().ppid, parent.session().pid);
    assert!(child_files[0]
        .to_string_lossy()
        .ends_with(&format!(".{}", child.session().pid)));
    assert_eq!(nested_counts(&child, "spawner::child_work"), (100, 100));
    assert!(text(&out.stderr).contains("a child process wrote"));
}

/// Records `testprogs` `forker`, which forks twice without exec: the parent's trace has the parent's
/// calls only; each child writes its own complete trace, named after its pid, although the first
/// leaves with `_exit`.
pub fn assert_forked_children_write_their_own_traces(dir: &Path, prog: &Path) {
    let (out, trace) = record(dir, &[], prog, &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let t = Trace::open(&trace).expect("parent trace");
    assert!(t.end().is_some() && t.truncation().is_none());
    let w = walk(&t, t.session().pid);
    assert_eq!(
        w.entries.get("forker::work"),
        Some(&30),
        "the parent's calls only"
    );
    assert!(
        w.unwound.is_empty() && w.preexisting.is_empty() && w.open_at_end.is_empty(),
        "{w:?}"
    );
    assert_eq!(t.threads().len(), 1);
    // Each child: its own file, named after its pid, complete although the first left with `_exit`.
    for (status, calls) in [(0, 1000), (3, 500)] {
        let line = stdout
            .lines()
            .find(|l| l.starts_with(&format!("child={status} ")))
            .unwrap_or_else(|| panic!("child exiting {status} in {stdout}"));
        let pid: u32 = line.rsplit('=').next().unwrap().parse().unwrap();
        let mut name = trace.clone().into_os_string();
        name.push(format!(".{pid}"));
        let c = Trace::open(std::path::Path::new(&name)).expect("child trace");
        assert_eq!(c.session().pid, pid);
        assert_eq!(c.session().ppid, t.session().pid);
        assert!(
            c.end().is_some() && c.truncation().is_none(),
            "child {pid}: complete"
        );
        // The child starts recording inside the closure it runs, and ends inside it: that frame is
        // open at the end, every `work` call is closed.
        let w = walk(&c, pid);
        assert_eq!(w.entries.get("forker::work"), Some(&calls), "child {pid}");
        assert!(
            w.unwound.is_empty()
                && w.preexisting.is_empty()
                && !w.open_at_end.iter().any(|f| f == "forker::work"),
            "child {pid}: {w:?}"
        );
        assert_eq!(c.threads().len(), 1, "child {pid}: the thread that forked");
    }
}

/// `ferrotrace record --mode drop -F '^fib::fib$' -o TRACE -- fib 24` with two 4 KiB chunks, program and
/// collector on one CPU: the program outruns the collector, so events are lost (and counted).
pub fn record_losing_events(trace: &Path) -> Output {
    Command::new("taskset")
        .args(["-c", "0"])
        .arg(env!("CARGO_BIN_EXE_ferrotrace"))
        .env(env::PRELOAD, preload())
        .args([
            "record",
            "--mode",
            "drop",
            "--buffer-size",
            "8K",
            "--chunk-size",
            "4K",
        ])
        .arg("-o")
        .arg(trace)
        .arg("--")
        .arg(testprog("fib"))
        .arg("24")
        .output()
        .expect("run ferrotrace record under taskset")
}

/// Builds the package in `testprogs/DIR`, a workspace of its own (with its own lock file and target
/// directory, which keeps the build for the next run), with nightly and XRay sleds; the path of its
/// release binary `BIN`.
fn build_own_workspace(dir: &str, bin: &str) -> PathBuf {
    build_own_workspace_with(
        dir,
        bin,
        "-Zinstrument-xray=always -Cforce-frame-pointers=yes",
        None,
    )
}

/// Builds `testprogs/DIR` (a workspace of its own) with nightly and `rustflags` into its
/// `target/SUBDIR` (`target` for none); the path of its release binary `bin`.
fn build_own_workspace_with(
    dir: &str,
    bin: &str,
    rustflags: &str,
    subdir: Option<&str>,
) -> PathBuf {
    let root = repo().join("testprogs").join(dir);
    let target = match subdir {
        Some(d) => root.join("target").join(d),
        None => root.join("target"),
    };
    run_ok(
        clean_cargo_env(&mut Command::new("rustup"))
            .args([
                "run",
                "nightly",
                "cargo",
                "build",
                "--release",
                "--quiet",
                "--locked",
            ])
            .current_dir(&root)
            .env("CARGO_TARGET_DIR", &target)
            .env("RUSTFLAGS", rustflags),
        &format!("building testprogs/{dir} with nightly and {rustflags:?}"),
    );
    target.join("release").join(bin)
}

/// Path of `testprogs/workload` (serde_json, regex and rayon from crates.io), built once per test
/// binary with nightly and XRay sleds.
pub fn workload() -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT
        .get_or_init(|| build_own_workspace("workload", "ft-workload"))
        .clone()
}

/// Path of `testprogs/tracing-service` (a tokio service with `tracing` spans and the ferrotrace
/// layer), built once per test binary with nightly and XRay sleds.
pub fn tracing_service() -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT
        .get_or_init(|| build_own_workspace("tracing-service", "ft-tracing-service"))
        .clone()
}

/// Path of `testprogs/tracing-service` built without sleds (no instrumentation flag, into
/// `target/plain`): a program whose only recorded events are its `tracing` spans and events.
pub fn tracing_service_without_sleds() -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            build_own_workspace_with(
                "tracing-service",
                "ft-tracing-service",
                "-Cforce-frame-pointers=yes",
                Some("plain"),
            )
        })
        .clone()
}

/// The directory of mini-redis 0.4.1's `mini-redis-server` (with the ferrotrace layer in its
/// subscriber) and `mini-redis-cli`, built once per test binary by testprogs/mini-redis/build.sh
/// (the published crate, patched; nightly, XRay sleds) into testprogs/target, which keeps the build.
pub fn mini_redis() -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let out = clean_cargo_env(&mut Command::new(
                repo().join("testprogs/mini-redis/build.sh"),
            ))
            .output()
            .expect("run testprogs/mini-redis/build.sh");
            assert!(
                out.status.success(),
                "building mini-redis failed ({}):\n{}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
            let stdout = String::from_utf8_lossy(&out.stdout);
            PathBuf::from(
                stdout
                    .lines()
                    .last()
                    .expect("build.sh prints the binaries' directory"),
            )
        })
        .clone()
}

/// A trace of `ft-workload 100` (about 235,000 events from three threads, 8,000 call paths),
/// recorded once per test binary.
pub fn workload_trace() -> PathBuf {
    static RECORDED: OnceLock<PathBuf> = OnceLock::new();
    RECORDED
        .get_or_init(|| {
            let dir = scratch("workload_trace");
            let (out, trace) = record(&dir, &[], &workload(), &["100"]);
            assert!(out.status.success(), "{}", text(&out.stderr));
            assert!(
                text(&out.stdout).starts_with("records=100 "),
                "{}",
                text(&out.stdout)
            );
            trace
        })
        .clone()
}

/// Records `testprogs` `uselib`, linked against the instrumented `libft_xlib.so`: the library's
/// functions are traced and attributed to its module.
pub fn assert_linked_library_traced(dir: &Path, prog: &Path) {
    let (out, trace) = record(dir, &[], prog, &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let t = Trace::open(&trace).expect("open");
    let lib = t
        .functions()
        .values()
        .find(|f| f.name() == "xlib_work")
        .expect("xlib_work traced");
    let module = t
        .modules()
        .iter()
        .find(|m| m.id == lib.module)
        .expect("module");
    assert!(module.path.ends_with("libft_xlib.so"), "{}", module.path);
    assert_eq!(nested_counts(&t, "ft_xlib::xlib_step"), (25, 25));
    assert_eq!(nested_counts(&t, "uselib::call_lib"), (1, 1));
}

/// Records `testprogs` `dlopener`, which loads the instrumented `libft_xlib.so` with `dlopen` after
/// start-up: the library is found by a rescan and its calls are traced.
pub fn assert_dlopened_library_traced(dir: &Path, prog: &Path) {
    let (out, trace) = record(dir, &[], prog, &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let t = Trace::open(&trace).expect("open");
    assert!(
        t.modules()
            .iter()
            .any(|m| m.path.ends_with("libft_xlib.so")),
        "the dlopened module is in the map"
    );
    assert_eq!(nested_counts(&t, "ft_xlib::xlib_step"), (30, 30));
    assert_eq!(nested_counts(&t, "dlopener::load_and_call"), (1, 1));
}

/// `uftrace report -d DIR`: (function, calls) of every row, sorted.
pub fn uftrace_report_calls(dir: &Path) -> Vec<(String, u64)> {
    let out = Command::new("uftrace")
        .args(["report", "-d"])
        .arg(dir)
        .output()
        .expect("uftrace installed");
    assert!(
        out.status.success(),
        "uftrace report: {}",
        text(&out.stderr)
    );
    let stdout = text(&out.stdout);
    // Columns by position, from the header: a function whose calls all took 0 ns has blank time
    // columns (uftrace prints no number for a zero duration).
    let header = stdout.lines().next().unwrap_or_default();
    let calls_end = header.find("Calls").map_or(0, |i| i + "Calls".len());
    let name_at = header.find("Function").unwrap_or(0);
    let mut v: Vec<(String, u64)> = stdout
        .lines()
        .skip(2)
        .filter_map(|l| {
            let calls = l
                .get(..calls_end)?
                .split_whitespace()
                .last()?
                .parse()
                .ok()?;
            Some((l.get(name_at..)?.trim().to_string(), calls))
        })
        // uftrace's own events (`linux:schedule (pre-empted)` when the machine is busy) are not
        // the program's calls.
        .filter(|(name, _)| !name.starts_with("linux:"))
        .collect();
    v.sort();
    v
}

/// The text of every Tracepoint event, thread by thread, in order.
pub fn tracepoint_lines(t: &Trace) -> Vec<String> {
    let mut out = Vec::new();
    for &tid in t.threads().keys() {
        for e in t.thread_events(tid).expect("thread events") {
            let e = e.expect("event");
            if e.kind == EventKind::Tracepoint {
                out.push(ferrotrace_analysis::tracepoints::format_tracepoint(t, &e));
            }
        }
    }
    out
}

/// `dump --format perfetto` of `trace`, decoded with Perfetto's own protos (the `perfetto` package
/// from PyPI; scripts/setup.sh installs it) by tests/perfetto/decode.py: one JSON value per packet
/// a viewer shows.
pub fn perfetto_view(trace: &Path, dir: &Path) -> Vec<serde_json::Value> {
    let pb = dir.join("t.pftrace");
    ok(ft(&[
        "dump",
        "-i",
        trace.to_str().unwrap(),
        "--format",
        "perfetto",
        "-o",
        pb.to_str().unwrap(),
    ]));
    let have = std::process::Command::new("python3")
        .args([
            "-c",
            "import perfetto.protos.perfetto.trace.perfetto_trace_pb2",
        ])
        .output()
        .expect("python3");
    assert!(
        have.status.success(),
        "this test decodes with Perfetto's own protos from Python's perfetto package, which is not \
         installed: run scripts/setup.sh (pip install --break-system-packages perfetto)"
    );
    let out = std::process::Command::new("python3")
        .arg(repo().join("crates/ferrotrace-cli/tests/perfetto/decode.py"))
        .arg(&pb)
        .output()
        .expect("python3");
    assert!(out.status.success(), "decode.py: {}", text(&out.stderr));
    text(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("one JSON value per line"))
        .collect()
}

/// Runs `script` with Python's duckdb module (scripts/setup.sh installs it); its stdout.
pub fn duckdb(script: &str) -> String {
    let have = Command::new("python3")
        .args(["-c", "import duckdb"])
        .output()
        .expect("python3");
    assert!(
        have.status.success(),
        "these tests query the Parquet dataset with DuckDB from Python, which is not installed: \
         run scripts/setup.sh (pip install --break-system-packages duckdb)"
    );
    let out = Command::new("python3")
        .args(["-c", script])
        .output()
        .expect("python3");
    assert!(out.status.success(), "python: {}", text(&out.stderr));
    text(&out.stdout)
}

/// The chunks of a trace file's bytes, in file order: (header offset, payload offset, payload
/// length); stops at a chunk cut short (header or payload past the end).
pub fn trace_chunks(b: &[u8]) -> Vec<(usize, usize, usize)> {
    use ferrotrace_core::format::{ChunkHeader, CHUNK_HEADER_LEN, FILE_HEADER_LEN};
    let mut v = Vec::new();
    let mut at = FILE_HEADER_LEN;
    while at + CHUNK_HEADER_LEN <= b.len() {
        let h = ChunkHeader::decode(b[at..at + CHUNK_HEADER_LEN].try_into().unwrap());
        let p = at + CHUNK_HEADER_LEN;
        if p + h.len as usize > b.len() {
            break;
        }
        v.push((at, p, h.len as usize));
        at = p + h.len as usize;
    }
    v
}

/// The code of executable `exe` as process `pid` has it (`/proc/PID/mem`) and as its file has it, over
/// the executable's code mapping: `(link-time address of the first byte, memory, file)`, of one length.
pub fn exe_code_in_memory_and_file(pid: u32, exe: &Path) -> (u64, Vec<u8>, Vec<u8>) {
    use object::{Object, ObjectSegment};
    use std::os::unix::fs::FileExt;
    let file = std::fs::read(exe).unwrap();
    let elf = object::File::parse(&*file).unwrap();
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    let exe_path = exe.canonicalize().unwrap();
    let line = maps
        .lines()
        .find(|l| l.contains(" r-xp ") && l.ends_with(exe_path.to_str().unwrap()))
        .expect("the executable's code mapping");
    let mut f = line.split_whitespace();
    let (range, offset) = (f.next().unwrap(), f.nth(1).unwrap());
    let (lo, hi) = range.split_once('-').unwrap();
    let (lo, hi) = (
        u64::from_str_radix(lo, 16).unwrap(),
        u64::from_str_radix(hi, 16).unwrap(),
    );
    let offset = u64::from_str_radix(offset, 16).unwrap();
    // The code segment (the mapping starts at the page holding its first byte, which may belong to
    // the segment before it in the file).
    let segment = elf
        .segments()
        .find(|s| matches!(s.flags(), object::SegmentFlags::Elf { p_flags } if p_flags & object::elf::PF_X != 0))
        .unwrap();
    let vaddr_of_start = (segment.address() + offset).wrapping_sub(segment.file_range().0);
    let len = (hi - lo).min(file.len() as u64 - offset) as usize;
    let mut memory = vec![0u8; len];
    std::fs::File::open(format!("/proc/{pid}/mem"))
        .unwrap()
        .read_exact_at(&mut memory, lo)
        .unwrap();
    let on_disk = file[offset as usize..offset as usize + len].to_vec();
    (vaddr_of_start, memory, on_disk)
}
