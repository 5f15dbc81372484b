//! Programs nobody rebuilt: `ferrotrace list --dynamic` and `ferrotrace record` on a plain `gcc -O2`
//! build, a stable-Rust release build, Debian's `sqlite3` with `libsqlite3.so.0` and Debian's
//! `python3`, whose function entries the runtime patches at start-up, and `record -p` on a running
//! plain `gcc -O2` program, whose entries the host patches with every thread stopped. The oracles: the
//! programs' own call counts, their unchanged output, their code compared with the file after a
//! detach, and a bpftrace uprobe counting the same functions.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;
use ferrotrace_analysis::reader::Trace;

/// `testprogs/c/mcwork.c` as a distribution would build it: `gcc -O2`, nothing else.
fn plain_gcc(dir: &Path) -> PathBuf {
    build_c(dir, "gcc", "mcwork.c", "mcwork", &["-O2", "-pthread"])
}

/// `testprogs/c/fibcount.c` (a fib that counts its own calls) built with plain `gcc -O2`.
fn plain_gcc_fib(dir: &Path) -> PathBuf {
    build_c(dir, "gcc", "fibcount.c", "fibcount", &["-O2"])
}

/// A stable-Rust release build (no special flags, symbols kept as rustc keeps them) of a fib that
/// counts its own calls. `black_box` keeps both recursive calls calls: without it LLVM turns the second
/// into a loop, and the program would count iterations that are not calls.
fn stable_rust(dir: &Path) -> PathBuf {
    let src = dir.join("fibcount.rs");
    std::fs::write(
        &src,
        r#"use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
static CALLS: AtomicU64 = AtomicU64::new(0);
#[inline(never)]
fn fib(n: u64) -> u64 {
    CALLS.fetch_add(1, Ordering::Relaxed);
    if n < 2 {
        return n;
    }
    black_box(fib(n - 1)) + black_box(fib(n - 2))
}
fn main() {
    let n: u64 = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(20);
    let r = fib(black_box(n));
    println!("calls={} result={}", CALLS.load(Ordering::Relaxed), r);
}
"#,
    )
    .unwrap();
    let exe = dir.join("fibcount");
    let out = Command::new("rustc")
        .args(["+stable", "-O", "-o"])
        .arg(&exe)
        .arg(&src)
        .output()
        .expect("rustc");
    assert!(out.status.success(), "rustc: {}", text(&out.stderr));
    exe
}

fn list_json(program: &Path) -> serde_json::Value {
    serde_json::from_str(&ok(ft(&[
        "list",
        "--dynamic",
        "--json",
        program.to_str().unwrap(),
    ])))
    .expect("list --json")
}

fn verdict<'a>(list: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    list["functions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["name"] == name)
        .unwrap_or_else(|| panic!("{name} not listed"))
}

fn recorded_by(trace: &Path) -> serde_json::Value {
    let info: serde_json::Value =
        serde_json::from_str(&ok(ft(&["info", "--json", "-i", trace.to_str().unwrap()]))).unwrap();
    info["recorded_by"].clone()
}

/// Counts of each uprobe of `probes` (`(binary, function)`) while `command` runs, from bpftrace; `None`
/// (the test says it skipped) when bpftrace cannot run here.
fn uprobe_counts(probes: &[(&str, &str)], command: &str) -> Option<Vec<u64>> {
    // The caller holds SHARED_CODE: bpftrace writes its breakpoints into every process that maps the
    // file, whatever its filter says.
    let mut program = String::new();
    // Only the command's own hits: a uprobe on a library counts every process that runs it (the
    // tests of this file run side by side, two of them through libsqlite3).
    for (i, (binary, function)) in probes.iter().enumerate() {
        program.push_str(&format!(
            "uprobe:{binary}:{function} /pid == cpid/ {{ @c{i} = count(); }}\n"
        ));
    }
    let out = Command::new("bpftrace")
        .args(["-e", &program, "-c", command])
        .output()
        .ok()?;
    let stdout = text(&out.stdout);
    let counts: Option<Vec<u64>> = (0..probes.len())
        .map(|i| {
            stdout
                .lines()
                .find_map(|l| l.strip_prefix(&format!("@c{i}: ")))
                .and_then(|n| n.trim().parse().ok())
        })
        .collect();
    if counts.is_none() {
        eprintln!(
            "skipped the uprobe comparison: bpftrace could not count here ({}{})",
            text(&out.stderr).trim(),
            stdout.trim()
        );
    }
    counts
}

/// Held by the tests that count calls with uprobes, for the whole test: a uprobe's breakpoint goes
/// into every process that maps its file (bpftrace's `/pid == cpid/` filters hits, not breakpoints),
/// and the kernel writes it over the first byte of an entry jump ferrotrace patched there, so that
/// the other test's recorded process dies (SIGTRAP, seen in CI: python3's libsqlite3 uprobes against
/// sqlite3's patched `sqlite3_prepare_v2`).
static SHARED_CODE: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Calls of `name` in the trace (entries, checked to nest with their exits).
fn calls(trace: &Path, name: &str) -> u64 {
    let t = Trace::open(trace).expect("open trace");
    let (entries, exits) = nested_counts(&t, name);
    assert_eq!(entries, exits, "{name}");
    entries
}

#[test]
fn list_dynamic_says_which_functions_can_be_traced_and_why_not_the_others() {
    let dir = scratch("dynamic_list");
    for exe in [plain_gcc(&dir), stable_rust(&dir)] {
        let list = list_json(&exe);
        let functions = list["functions"].as_array().unwrap();
        let refused: u64 = list["refused"]
            .as_object()
            .unwrap()
            .values()
            .map(|n| n.as_u64().unwrap())
            .sum();
        assert_eq!(
            list["traceable"].as_u64().unwrap() + refused,
            functions.len() as u64
        );
        // `_start` is jumped to with argc where a return address would be.
        assert_eq!(verdict(&list, "_start")["refused"], "entry-point");
        let fib = if exe.ends_with("mcwork") {
            "fib"
        } else {
            "fibcount::fib"
        };
        assert_eq!(verdict(&list, fib)["traceable"], true, "{}", exe.display());
    }
    let text = ok(ft(&[
        "list",
        "--dynamic",
        dir.join("mcwork").to_str().unwrap(),
    ]));
    assert!(
        text.contains("refused: the program's entry point, never called (entry-point)"),
        "{text}"
    );
}

#[test]
fn plain_gcc_build_is_traced_exactly_with_its_output_unchanged() {
    let dir = scratch("dynamic_gcc");
    let fib = plain_gcc_fib(&dir);
    let plain = Command::new(&fib).arg("18").output().unwrap();
    let (out, trace) = record(&dir, &[], &fib, &["18"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("has no instrumentation: tracing its functions by patching their entries"),
        "{stderr}"
    );
    assert_eq!(text(&out.stdout), text(&plain.stdout));
    let n = program_calls(&out.stdout);
    assert_eq!(calls(&trace, "fib"), n);
    assert_eq!(calls(&trace, "main"), 1);
    // uftrace's dynamic mode on the same binary counts the same calls.
    let udata = dir.join("uftrace.data");
    let u = Command::new("uftrace")
        .args(["record", "--force", "-P", "^fib$", "-d"])
        .arg(&udata)
        .arg(&fib)
        .arg("18")
        .output()
        .expect("uftrace installed (scripts/setup.sh)");
    assert!(u.status.success(), "uftrace: {}", text(&u.stderr));
    let by_uftrace = uftrace_report_calls(&udata);
    assert!(
        by_uftrace.contains(&("fib".to_string(), n)),
        "{by_uftrace:?}"
    );
    assert_eq!(recorded_by(&trace), serde_json::json!(["dynamic"]));
    let info = ok(ft(&["info", "-i", trace.to_str().unwrap()]));
    assert!(info.contains("recorded by  : dynamic\n"), "{info}");
    // Every command reads it as any other trace.
    let report = ok(ft(&["report", "-i", trace.to_str().unwrap()]));
    let line = report
        .lines()
        .find(|l| l.ends_with(" fib"))
        .expect("fib in the report");
    assert!(line.contains(&format!(" {n} ")), "{line}");
    let replay = ok(ft(&["replay", "-i", trace.to_str().unwrap()]));
    assert!(replay.contains("fib"), "{replay}");

    // Threads started after patching: each worker's own count.
    let exe = plain_gcc(&dir);
    let (out, trace) = record(&dir, &[], &exe, &["threads"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let t = Trace::open(&trace).expect("open");
    for i in 0..4u64 {
        let name = format!("worker-{i}");
        let w = walk(&t, tid_named(&t, &name));
        assert_eq!(w.entries.get("walk"), Some(&(100 * (i + 1))), "{name}");
    }
    // longjmp out of hooked frames, and signal handlers calling traced functions: the mcount path's
    // exits, whatever reached the hook.
    for mode in ["longjmp", "signal"] {
        let plain = Command::new(&exe).arg(mode).output().unwrap();
        let (out, trace) = record(&dir, &[], &exe, &[mode]);
        assert!(out.status.success(), "{mode}: {}", text(&out.stderr));
        assert_eq!(text(&out.stdout), text(&plain.stdout), "{mode}");
        let t = Trace::open(&trace).expect("open");
        let w = walk(&t, t.session().pid);
        assert!(w.open_at_end.is_empty(), "{mode}: {w:?}");
    }
}

/// `testprogs/c/workpool.c` (threads that run until told to stop) built with plain `gcc -O2`.
fn plain_gcc_workpool(dir: &Path) -> PathBuf {
    build_c(dir, "gcc", "workpool.c", "workpool", &["-O2", "-pthread"])
}

/// The work pool, running; killed when dropped.
struct Workpool {
    child: std::process::Child,
    stdin: std::process::ChildStdin,
    stdout: std::io::BufReader<std::process::ChildStdout>,
}

impl Workpool {
    fn start(exe: &Path) -> Workpool {
        let mut child = Command::new(exe)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("start the work pool");
        let stdin = child.stdin.take().unwrap();
        let stdout = std::io::BufReader::new(child.stdout.take().unwrap());
        let mut pool = Workpool {
            child,
            stdin,
            stdout,
        };
        assert_eq!(pool.line(), "ready");
        pool
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn line(&mut self) -> String {
        use std::io::BufRead;
        let mut line = String::new();
        self.stdout.read_line(&mut line).expect("a line");
        line.trim_end().to_string()
    }

    /// Sends one command; the one line it makes the program print.
    fn ask(&mut self, command: &str) -> String {
        use std::io::Write;
        writeln!(self.stdin, "{command}").expect("send");
        self.line()
    }

    /// Has every worker compute fib(n): the calls of fib the program counted.
    fn fib(&mut self, n: u64) -> u64 {
        let answer = self.ask(&n.to_string());
        let (mut expected, mut next) = (0u64, 1u64);
        for _ in 0..n {
            (expected, next) = (next, expected + next);
        }
        assert!(
            answer.ends_with(&format!(" result={expected}")),
            "fib({n}): {answer}"
        );
        program_calls(answer.as_bytes())
    }
}

impl Drop for Workpool {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `ferrotrace record -p PID -o TRACE OPTS...`, started; what it said until the recording ran.
fn attach(pid: u32, trace: &Path, opts: &[&str]) -> (std::process::Child, String) {
    let mut command = ferrotrace();
    command
        .args(["record", "-p", &pid.to_string(), "-o"])
        .arg(trace)
        .args(opts);
    started_attached(command, "recording process")
}

/// `command` (`record -p` or `live -p`) spawned with its standard error read until a line says
/// `running`: the child and what it said.
fn started_attached(mut command: Command, running: &str) -> (std::process::Child, String) {
    use std::io::BufRead;
    let mut child = command
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run ferrotrace -p");
    let mut stderr = std::io::BufReader::new(child.stderr.take().unwrap());
    let mut said = String::new();
    loop {
        let mut line = String::new();
        if stderr.read_line(&mut line).unwrap_or(0) == 0 {
            let status = child.wait().unwrap();
            panic!("ferrotrace -p ended ({status}) before {running:?}:\n{said}");
        }
        said.push_str(&line);
        if line.contains(running) {
            break;
        }
    }
    child.stderr = Some(stderr.into_inner());
    (child, said)
}

/// Stops an [`attach`]ed recording (or `live -p`) as Ctrl-C does; what it said (and printed) then.
fn detach(recording: std::process::Child) -> String {
    kill(recording.id() as i32, 2);
    let out = recording.wait_with_output().unwrap();
    assert!(out.status.success(), "ferrotrace -p: {}", text(&out.stderr));
    text(&out.stderr) + &text(&out.stdout)
}

/// Bytes of the executable's code that differ in process `pid` from its file.
fn code_bytes_changed(pid: u32, exe: &Path) -> usize {
    let (_, memory, on_disk) = exe_code_in_memory_and_file(pid, exe);
    memory.iter().zip(&on_disk).filter(|(m, d)| m != d).count()
}

/// `record -p -P` on a running plain `gcc -O2` program with nine threads: every thread is stopped while
/// the entries are patched and again while they are put back. The calls of fib made while attached are
/// exactly those the program counted; a function a thread would resume inside of (`faulter`: a thread
/// waits in a signal handler whose saved context is inside its first bytes) is left out and named;
/// every byte of the code is the file's again after the stop, and the program goes on computing right,
/// its interrupted system calls restarted (an `EINTR` would end it). A second attach after the first
/// traces exactly too.
#[test]
fn attached_to_a_running_plain_gcc_program_counts_exactly_and_puts_every_byte_back() {
    let dir = scratch("dynamic_attach");
    let exe = plain_gcc_workpool(&dir);
    let mut pool = Workpool::start(&exe);
    assert_eq!(pool.ask("fault"), "in handler");
    pool.fib(15);
    assert_eq!(code_bytes_changed(pool.pid(), &exe), 0);

    let trace = dir.join("first.data");
    let (recording, said) = attach(pool.pid(), &trace, &["-P", "^(fib|mix|faulter)$"]);
    assert!(
        said.contains("function entries patched, every thread stopped"),
        "{said}"
    );
    let skipped = said
        .lines()
        .find(|l| l.contains("a thread was inside the first instructions its jump replaces"))
        .unwrap_or_else(|| panic!("{said}"));
    assert!(skipped.contains("faulter"), "{skipped}");
    assert!(code_bytes_changed(pool.pid(), &exe) > 0);
    let counted: u64 = [18, 12, 20].into_iter().map(|n| pool.fib(n)).sum();
    let said = detach(recording);
    assert_eq!(code_bytes_changed(pool.pid(), &exe), 0, "{said}");
    assert_eq!(calls(&trace, "fib"), counted);
    let t = Trace::open(&trace).expect("open");
    assert_eq!(nested_counts(&t, "faulter"), (0, 0));
    if !skipped.contains("mix") {
        // The spinners' calls: entered before the stop, some left after it (their exits, the
        // mcount path's return hook, still recorded), or the other way round, one each at most.
        let (entries, exits) = nested_counts(&t, "mix");
        assert!(
            entries > 0 && entries.abs_diff(exits) <= 2,
            "{entries} {exits}"
        );
    }

    // Untraced again, unharmed: the handler returns into faulter's first bytes, fib is right.
    pool.fib(16);
    assert_eq!(pool.ask("resume"), "faulter=42");

    // Attached again: a new runtime in the same process, the same entries patched anew.
    let trace = dir.join("second.data");
    let (recording, said) = attach(pool.pid(), &trace, &["-P", "^(fib|faulter)$"]);
    assert!(!said.contains("left untraced"), "{said}");
    let counted = pool.fib(17);
    detach(recording);
    assert_eq!(calls(&trace, "fib"), counted);
    assert_eq!(code_bytes_changed(pool.pid(), &exe), 0);
    assert!(pool.ask("q").starts_with("spins="));
    assert!(pool.child.wait().unwrap().success());
}

/// `live -p` on the running plain `gcc -O2` work pool: its entries are patched as `record -p`'s are,
/// and every call made while it prints is printed, entry and exit.
#[test]
fn live_prints_the_calls_of_a_running_uninstrumented_program() {
    let dir = scratch("dynamic_live_attach");
    let exe = plain_gcc_workpool(&dir);
    let mut pool = Workpool::start(&exe);
    let mut command = ferrotrace();
    command.args(["live", "-p", &pool.pid().to_string(), "-F", "^fib$"]);
    let (live, said) = started_attached(command, "printing process");
    assert!(said.contains("function entries patched"), "{said}");
    let counted = pool.fib(5) + pool.fib(7);
    // The collector prints at most 5 ms after an event.
    std::thread::sleep(std::time::Duration::from_millis(200));
    let printed = detach(live);
    let printed = printed.lines().filter(|l| l.ends_with(" fib() {")).count() as u64;
    assert_eq!(printed, counted);
    assert_eq!(code_bytes_changed(pool.pid(), &exe), 0);
}

/// `record -p` killed (SIGKILL) while it records entry-patched functions: the process runs on, the
/// kernel lets go of any thread `record` held, and the runtime, seeing its control channel's end, puts
/// the entries back itself (no thread is ever inside a 5-byte jump): its code is the file's again and
/// fib stays right.
#[test]
fn record_killed_while_entries_are_patched_leaves_the_program_running_and_its_code_back() {
    let dir = scratch("dynamic_attach_record_killed");
    let exe = plain_gcc_workpool(&dir);
    let mut pool = Workpool::start(&exe);
    let (mut recording, _) = attach(pool.pid(), &dir.join("t.data"), &["-P", "^(fib|mix)$"]);
    pool.fib(14);
    assert!(code_bytes_changed(pool.pid(), &exe) > 0);
    kill(recording.id() as i32, 9);
    let _ = recording.wait();
    let started = std::time::Instant::now();
    while code_bytes_changed(pool.pid(), &exe) > 0 {
        assert!(
            started.elapsed() < std::time::Duration::from_secs(10),
            "the entries were not put back"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    pool.fib(18);
    assert!(pool.ask("q").starts_with("spins="));
    assert!(pool.child.wait().unwrap().success());
}

/// The target killed (SIGKILL) while `record -p` holds its threads to patch entries: `record` ends at
/// once with one line and a failure, never waits for threads that will not stop again. The kill is
/// sent as soon as a worker thread (never the borrowed one: the main thread waits in `read` and is
/// chosen first) has a tracer, which happens only while entries are patched.
#[test]
fn target_killed_while_its_threads_are_held_for_patching_ends_record_with_one_line() {
    let dir = scratch("dynamic_attach_kill");
    let exe = plain_gcc_workpool(&dir);
    for attempt in 0..20 {
        let pool = Workpool::start(&exe);
        let pid = pool.pid();
        let worker = *std::fs::read_dir(format!("/proc/{pid}/task"))
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
            .collect::<Vec<_>>()
            .iter()
            .max()
            .unwrap();
        let mut recording = ferrotrace()
            .args(["record", "-p", &pid.to_string(), "-P", "^(fib|mix)$", "-o"])
            .arg(dir.join(format!("t{attempt}.data")))
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let status = format!("/proc/{pid}/task/{worker}/status");
        let started = std::time::Instant::now();
        let mut killed = false;
        while started.elapsed() < std::time::Duration::from_secs(20) {
            let traced = std::fs::read_to_string(&status)
                .unwrap_or_default()
                .lines()
                .any(|l| l.starts_with("TracerPid:") && l.trim_end() != "TracerPid:\t0");
            if traced {
                kill(pid as i32, 9);
                killed = true;
                break;
            }
            if recording.try_wait().unwrap().is_some() {
                break;
            }
        }
        if !killed {
            // Missed the moment (the threads were held for less than a look takes): stop, again.
            kill(recording.id() as i32, 2);
            let _ = recording.wait();
            continue;
        }
        let waited = std::time::Instant::now();
        let out = recording.wait_with_output().unwrap();
        assert!(waited.elapsed() < std::time::Duration::from_secs(15));
        let err = text(&out.stderr);
        assert!(!out.status.success(), "{err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
        assert!(err.contains("ended"), "{err}");
        eprintln!("killed at attempt {attempt}: {}", err.trim_end());
        return;
    }
    panic!("20 attaches, and no worker was seen held by record");
}

#[test]
fn stable_rust_release_build_is_traced_exactly() {
    let dir = scratch("dynamic_rust");
    let exe = stable_rust(&dir);
    let (out, trace) = record(&dir, &[], &exe, &["20"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("result=6765"));
    assert_eq!(calls(&trace, "fibcount::fib"), program_calls(&out.stdout));
    assert_eq!(calls(&trace, "fibcount::main"), 1);
    assert_eq!(recorded_by(&trace), serde_json::json!(["dynamic"]));
}

/// A panic caught by `catch_unwind` unwinds through entry-patched frames (the return stub's CFI, as on
/// the mcount path) and the calls after it stay traced; the frames it left are seen as unwound when
/// `main`, traced too, returns below them.
#[test]
fn caught_panic_in_a_stable_rust_build_unwinds_through_patched_frames() {
    let dir = scratch("dynamic_panic");
    let src = dir.join("catcher.rs");
    std::fs::write(
        &src,
        r#"use std::hint::black_box;
#[inline(never)]
fn thrower(n: u64) -> u64 {
    if black_box(n) == 3 {
        panic!("three");
    }
    n
}
#[inline(never)]
fn middle(n: u64) -> u64 {
    black_box(thrower(n)) + 1
}
fn main() {
    std::panic::set_hook(Box::new(|_| {}));
    for i in 0..6 {
        match std::panic::catch_unwind(|| middle(i)) {
            Ok(v) => println!("middle({i}) -> {v}"),
            Err(_) => println!("middle({i}) -> panicked"),
        }
    }
}
"#,
    )
    .unwrap();
    let exe = dir.join("catcher");
    let out = Command::new("rustc")
        .args(["+stable", "-O", "-o"])
        .arg(&exe)
        .arg(&src)
        .output()
        .expect("rustc");
    assert!(out.status.success(), "rustc: {}", text(&out.stderr));
    let plain = Command::new(&exe).output().unwrap();
    let (out, trace) = record(&dir, &["-P", "^catcher::(main|middle|thrower)$"], &exe, &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), text(&plain.stdout));
    assert!(text(&out.stdout).contains("middle(3) -> panicked"));
    let t = Trace::open(&trace).expect("open");
    let w = walk(&t, t.session().pid);
    assert_eq!(w.entries.get("catcher::middle"), Some(&6), "{w:?}");
    assert_eq!(w.entries.get("catcher::thrower"), Some(&6), "{w:?}");
    assert_eq!(
        w.unwound.iter().filter(|f| *f == "catcher::middle").count(),
        1,
        "{w:?}"
    );
    assert!(
        w.open_at_end.is_empty() && w.preexisting.is_empty(),
        "{w:?}"
    );
}

#[test]
fn debian_sqlite3_library_functions_are_counted_as_uprobes_count_them() {
    let _alone = SHARED_CODE.lock().unwrap_or_else(|e| e.into_inner());
    let dir = scratch("dynamic_sqlite3");
    let lib = "/usr/lib/x86_64-linux-gnu/libsqlite3.so.0";
    if !Path::new("/usr/bin/sqlite3").exists() || !Path::new(lib).exists() {
        eprintln!("skipped: Debian's sqlite3 is not installed (scripts/setup.sh installs it)");
        return;
    }
    let sql = dir.join("q.sql");
    std::fs::write(
        &sql,
        "create table t(a); insert into t values(1),(2),(3);\n\
         select count(*) from t; select sum(a) from t where a > 1;\n",
    )
    .unwrap();
    let args = ["-init", sql.to_str().unwrap(), ":memory:", ".quit"];
    let plain = Command::new("/usr/bin/sqlite3")
        .args(args)
        .output()
        .unwrap();
    let (out, trace) = record(
        &dir,
        &["-P", "^sqlite3_(step|prepare_v2|open_v2)$"],
        Path::new("/usr/bin/sqlite3"),
        &args,
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), text(&plain.stdout));
    let ours: Vec<u64> = ["sqlite3_step", "sqlite3_prepare_v2", "sqlite3_open_v2"]
        .iter()
        .map(|f| calls(&trace, f))
        .collect();
    assert!(ours.iter().all(|&n| n > 0), "{ours:?}");
    let command = format!("/usr/bin/sqlite3 {}", args.join(" "));
    if let Some(uprobes) = uprobe_counts(
        &[
            (lib, "sqlite3_step"),
            (lib, "sqlite3_prepare_v2"),
            (lib, "sqlite3_open_v2"),
        ],
        &command,
    ) {
        assert_eq!(ours, uprobes);
    }
}

#[test]
fn debian_python3_and_a_library_it_dlopens_are_counted_as_uprobes_count_them() {
    let _alone = SHARED_CODE.lock().unwrap_or_else(|e| e.into_inner());
    let dir = scratch("dynamic_python3");
    let Ok(python) = std::fs::canonicalize("/usr/bin/python3") else {
        eprintln!("skipped: Debian's python3 is not installed");
        return;
    };
    let script = dir.join("attrs.py");
    std::fs::write(
        &script,
        "class C:\n    x = 1\nn = 0\nfor i in range(2000):\n    n += getattr(C, 'x')\nprint(n)\n",
    )
    .unwrap();
    let (out, trace) = record(
        &dir,
        &["-P", "^PyObject_GetAttr$"],
        &python,
        &[script.to_str().unwrap()],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "2000\n");
    let ours = calls(&trace, "PyObject_GetAttr");
    assert!(ours >= 2000, "{ours}");
    let command = format!("{} {}", python.display(), script.display());
    if let Some(uprobes) =
        uprobe_counts(&[(python.to_str().unwrap(), "PyObject_GetAttr")], &command)
    {
        assert_eq!(vec![ours], uprobes);
    }
    // A library loaded later (`import sqlite3` dlopens _sqlite3, which links libsqlite3.so.0) is
    // patched when it maps.
    let script = dir.join("sq.py");
    std::fs::write(
        &script,
        "import sqlite3\nc = sqlite3.connect(':memory:')\nc.execute('create table t(a)')\n\
         c.executemany('insert into t values(?)', [(i,) for i in range(10)])\n\
         print(c.execute('select sum(a) from t').fetchone()[0])\n",
    )
    .unwrap();
    let (out, trace) = record(
        &dir,
        &["-P", "^sqlite3_(step|prepare_v2)$"],
        &python,
        &[script.to_str().unwrap()],
    );
    if text(&out.stderr).contains("No module named") {
        eprintln!("skipped the dlopen case: python3's sqlite3 module is not installed");
    } else {
        assert!(out.status.success(), "{}", text(&out.stderr));
        assert_eq!(text(&out.stdout), "45\n");
        let ours = vec![
            calls(&trace, "sqlite3_step"),
            calls(&trace, "sqlite3_prepare_v2"),
        ];
        assert!(ours[0] >= 10, "{ours:?}");
        let lib = "/usr/lib/x86_64-linux-gnu/libsqlite3.so.0";
        let command = format!("{} {}", python.display(), script.display());
        if let Some(uprobes) = uprobe_counts(
            &[(lib, "sqlite3_step"), (lib, "sqlite3_prepare_v2")],
            &command,
        ) {
            assert_eq!(ours, uprobes);
        }
    }
    // A function -P selects that cannot be patched safely is named, not silently left out.
    let (out, _) = record(
        &dir,
        &["-P", "^_PyEval_EvalFrameDefault$"],
        &python,
        &[script.to_str().unwrap()],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("cannot be patched safely, left untraced: 1 (an indirect jump"),
        "{}",
        text(&out.stderr)
    );
}
