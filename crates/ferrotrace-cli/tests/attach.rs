//! `ferrotrace record -p PID`: recording servers that are already running (an XRay Rust server and a
//! `-pg -mnop-mcount` C server), answering requests before, during and after the recording; the trace
//! holds exactly the requests made while attached; attach, stop, attach again; the server ending
//! while recorded; a server with 50 threads.
mod common;

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use ferrotrace_analysis::reader::{EventKind, Trace};
use ferrotrace_core::schema::EndReason;

/// A server under test: its process and port; killed when dropped.
struct Server {
    child: Child,
    port: u16,
}

impl Server {
    fn start(program: &Path, args: &[&str]) -> Server {
        let mut child = Command::new(program)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start the server");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .expect("port line");
        let port = line
            .trim()
            .strip_prefix("port=")
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("no port in {line:?}"));
        Server { child, port }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One connection to a server.
struct Client {
    out: TcpStream,
    input: BufReader<TcpStream>,
}

impl Client {
    fn connect(port: u16) -> Client {
        let out = TcpStream::connect(("127.0.0.1", port)).expect("connect");
        let input = BufReader::new(out.try_clone().unwrap());
        Client { out, input }
    }

    fn ask(&mut self, line: &str) -> String {
        writeln!(self.out, "{line}").expect("send");
        let mut answer = String::new();
        self.input.read_line(&mut answer).expect("answer");
        answer
    }

    /// Asks `n` numbered questions tagged `tag`; the answers.
    fn ask_many(&mut self, tag: &str, n: usize) -> Vec<String> {
        (0..n).map(|i| self.ask(&format!("{tag} {i}"))).collect()
    }
}

/// `ferrotrace record -p PID`, running until stopped.
struct Recording {
    child: Child,
    stderr: BufReader<std::process::ChildStderr>,
    said: String,
}

impl Recording {
    /// Starts recording `pid` into `trace` and waits until the recording runs.
    fn start(pid: u32, trace: &Path, opts: &[&str]) -> Recording {
        Recording::start_with(pid, trace, opts, ferrotrace())
    }

    /// [`Recording::start`] by `ferrotrace`, a command with its environment set.
    fn start_with(pid: u32, trace: &Path, opts: &[&str], mut ferrotrace: Command) -> Recording {
        let mut child = ferrotrace
            .args(["record", "-p", &pid.to_string(), "-o"])
            .arg(trace)
            .args(opts)
            .stderr(Stdio::piped())
            .spawn()
            .expect("run ferrotrace record -p");
        let mut stderr = BufReader::new(child.stderr.take().unwrap());
        let mut said = String::new();
        loop {
            let mut line = String::new();
            if stderr.read_line(&mut line).unwrap_or(0) == 0 {
                let status = child.wait().unwrap();
                panic!("record -p ended ({status}) before recording:\n{said}");
            }
            said.push_str(&line);
            if line.contains("recording process") {
                break;
            }
        }
        Recording {
            child,
            stderr,
            said,
        }
    }

    /// Stops it as Ctrl-C would; what it said.
    fn stop(self) -> String {
        kill(self.child.id() as i32, libc_sigint());
        self.wait()
    }

    /// Waits for it to end by itself; what it said.
    fn wait(mut self) -> String {
        let mut rest = String::new();
        let _ = std::io::Read::read_to_string(&mut self.stderr, &mut rest);
        let status = self.child.wait().unwrap();
        let said = self.said + &rest;
        assert!(status.success(), "record -p failed ({status}):\n{said}");
        said
    }
}

fn libc_sigint() -> i32 {
    2
}

/// Entries and exits of the function whose display name is `name` or ends in `::name`, over every
/// thread.
fn calls(trace: &Trace, name: &str) -> (u64, u64) {
    let mut n = (0, 0);
    for th in trace.threads().values() {
        for e in trace.thread_events(th.tid).expect("thread events") {
            let e = e.expect("event");
            let f = trace.function_name(e.id);
            if f != name && !f.ends_with(&format!("::{name}")) {
                continue;
            }
            match e.kind {
                EventKind::Entry => n.0 += 1,
                EventKind::Exit | EventKind::TailExit => n.1 += 1,
                _ => {}
            }
        }
    }
    n
}

fn stopped_trace(path: &Path) -> Trace {
    let trace = Trace::open(path).expect("trace");
    let end = trace.end().expect("an End chunk");
    assert_eq!(end.reason, EndReason::Stopped, "End reason");
    assert!(trace.truncation().is_none(), "{:?}", trace.truncation());
    trace
}

/// Before, during (`during` requests) and after one recording: every answer the same as unrecorded,
/// and exactly the requests made while attached in the trace.
fn one_recording(server: &Server, dir: &Path, name: &str, during: usize) {
    one_recording_with(server, dir, name, during, &["-F", "handle"]);
}

/// The nice value of each thread of process `pid` (`/proc/PID/task/TID/stat`'s 19th field).
fn thread_nices(pid: u32) -> std::collections::BTreeMap<u32, i64> {
    let mut nices = std::collections::BTreeMap::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task"))
        .into_iter()
        .flatten()
    {
        let task = task.unwrap();
        let Ok(stat) = std::fs::read_to_string(task.path().join("stat")) else {
            continue;
        };
        let Some((_, rest)) = stat.rsplit_once(')') else {
            continue;
        };
        // Fields from the 3rd (state) on: the nice value is the 19th.
        if let Some(nice) = rest.split_whitespace().nth(16).and_then(|n| n.parse().ok()) {
            nices.insert(task.file_name().to_str().unwrap().parse().unwrap(), nice);
        }
    }
    nices
}

/// Every thread of process `pid` at nice `nice`: `record -p` raises the borrowed thread's priority
/// only while it runs a call for us, and the threads the runtime starts run at the thread's own
/// (issue 41 item 7). What differs, when something does.
fn threads_not_at(pid: u32, nice: i64) -> Vec<(u32, i64)> {
    thread_nices(pid)
        .into_iter()
        .filter(|&(_, n)| n != nice)
        .collect()
}

/// [`one_recording`] with `record -p`'s options `opts`.
fn one_recording_with(server: &Server, dir: &Path, name: &str, during: usize, opts: &[&str]) {
    let mut client = Client::connect(server.port);
    let before = client.ask_many("q", 20);
    let nice = thread_nices(server.pid())[&server.pid()];
    let trace = dir.join(format!("{name}.data"));
    let rec = Recording::start(server.pid(), &trace, opts);
    let while_recorded = client.ask_many("q", during);
    assert_eq!(
        threads_not_at(server.pid(), nice),
        [],
        "threads not at the process's nice value {nice} while recorded"
    );
    let said = rec.stop();
    let after = client.ask_many("q", 20);
    let k = 20.min(during);
    assert_eq!(before[..k], while_recorded[..k], "{said}");
    assert_eq!(before, after);
    let trace = stopped_trace(&trace);
    assert_eq!(
        calls(&trace, "handle"),
        (during as u64, during as u64),
        "{said}"
    );
    assert!(said.contains("wrote"), "{said}");
}

#[test]
fn xray_server_recorded_while_it_runs_then_again() {
    let dir = scratch("attach_xray");
    let server = Server::start(&testprog("line_server"), &[]);
    let fds = || {
        std::fs::read_dir(format!("/proc/{}/fd", server.pid()))
            .unwrap()
            .count()
    };
    // The server serves one connection at a time: this one is closed before the next opens.
    Client::connect(server.port).ask("warm-up");
    std::thread::sleep(Duration::from_millis(100));
    let open_before = fds();
    one_recording(&server, &dir, "first", 100);
    // Attached, stopped: a second recording starts a new runtime in the same process.
    one_recording(&server, &dir, "second", 37);
    one_recording(&server, &dir, "third", 5);
    // Each recording's connection is closed; the runtimes left no descriptor open either.
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(fds(), open_before);
}

/// The C line server built with patchable NOPs (`-pg -mnop-mcount -mrecord-mcount`), not PIE.
fn nop_mcount_line_server(dir: &Path) -> PathBuf {
    build_c(
        dir,
        "gcc",
        "line_server.c",
        "line_server_c",
        &[
            "-O1",
            "-pg",
            "-mnop-mcount",
            "-mrecord-mcount",
            "-fno-pie",
            "-no-pie",
        ],
    )
}

/// Issue 35: a server nobody rebuilt (plain `gcc -O2`), its `handle` entry patched while it serves:
/// every answer the same before, during and after, exact counts, its code equal to the file after
/// each detach, and attached again.
#[test]
fn plain_c_server_entry_patched_while_it_runs_then_again() {
    let dir = scratch("attach_plain_c");
    let exe = build_c(&dir, "gcc", "line_server.c", "line_server_plain", &["-O2"]);
    let server = Server::start(&exe, &[]);
    for (name, during) in [("first", 60), ("second", 15)] {
        one_recording_with(&server, &dir, name, during, &["-P", "^handle$"]);
        let (_, memory, file) = exe_code_in_memory_and_file(server.pid(), &exe);
        assert!(
            memory == file,
            "{name}: the code differs from the file after the detach"
        );
    }
}

#[test]
fn c_server_with_patchable_nops_recorded_while_it_runs() {
    let dir = scratch("attach_c");
    let exe = nop_mcount_line_server(&dir);
    let server = Server::start(&exe, &[]);
    one_recording(&server, &dir, "first", 50);
    one_recording(&server, &dir, "second", 10);
}

/// The line server, recorded while `requests` requests are made, then sent `signal`: the trace, what
/// `record` said, and the trace's path.
fn ended_by_signal_while_recorded(
    test: &str,
    requests: usize,
    signal: i32,
) -> (Trace, String, PathBuf) {
    let dir = scratch(test);
    let server = Server::start(&testprog("line_server"), &[]);
    let mut client = Client::connect(server.port);
    let trace = dir.join("t.data");
    let rec = Recording::start(server.pid(), &trace, &["-F", "handle"]);
    client.ask_many("q", requests);
    // Not collected until the Server is dropped: record can read how it died from the zombie.
    kill(server.pid() as i32, signal);
    let said = rec.wait();
    assert!(said.contains("ended while it was recorded"), "{said}");
    (Trace::open(&trace).expect("trace"), said, trace)
}

#[test]
fn server_ending_while_recorded_leaves_a_complete_trace() {
    // SIGTERM, left at its default by the server: the runtime's handler finishes the trace first.
    let (t, _, _) = ended_by_signal_while_recorded("attach_ends", 25, 15);
    let end = t.end().expect("an End chunk");
    assert_eq!(end.reason, EndReason::Signal);
    assert_eq!(calls(&t, "handle"), (25, 25));
}

#[test]
fn fifty_threads_each_register_at_their_first_event() {
    let dir = scratch("attach_threads");
    let server = Server::start(&testprog("line_server"), &["50"]);
    let mut client = Client::connect(server.port);
    let trace = dir.join("t.data");
    let rec = Recording::start(server.pid(), &trace, &["-F", "handle|tick"]);
    client.ask_many("q", 10);
    std::thread::sleep(Duration::from_millis(300));
    let said = rec.stop();
    let after = client.ask_many("q", 3);
    assert_eq!(after.len(), 3);
    let t = stopped_trace(&trace);
    let idle = t
        .threads()
        .values()
        .filter(|th| th.name.starts_with("idle-"))
        .count();
    assert_eq!(idle, 50, "threads seen: {:?}\n{said}", t.threads().len());
    assert_eq!(calls(&t, "handle"), (10, 10));
    let (entries, exits) = calls(&t, "tick");
    // Each idle thread ticks every 10 ms: over 300 ms, every one of them several times.
    assert!(entries >= 50 * 5, "{entries} ticks");
    // A tick running when the sites were patched or put back is missing its entry or its exit.
    assert!(
        entries.abs_diff(exits) <= 50,
        "{entries} entries, {exits} exits"
    );
}

/// The first traced call of each thread after an attach is not charged with the tracer's set-up (its
/// registration and first chunk: 13-310 us against calls of a few in memcached): on each of the 51
/// threads of a server, the first function entry is stamped after the time the runtime recorded once
/// it had registered the thread.
#[test]
fn each_thread_s_first_entry_is_timed_after_its_registration() {
    let dir = scratch("attach_first_call");
    let server = Server::start(&testprog("line_server"), &["50"]);
    let mut client = Client::connect(server.port);
    let trace = dir.join("t.data");
    let rec = Recording::start(server.pid(), &trace, &["-F", "handle|tick"]);
    client.ask_many("q", 10);
    std::thread::sleep(Duration::from_millis(100));
    rec.stop();
    let t = stopped_trace(&trace);
    let mut checked = 0;
    for th in t.threads().values() {
        let first_entry = t
            .thread_events(th.tid)
            .unwrap()
            .map(|e| e.unwrap())
            .find(|e| e.kind == EventKind::Entry);
        let Some(first) = first_entry else { continue };
        let registered = th
            .registered_tsc
            .unwrap_or_else(|| panic!("thread {} ({}): no registration time", th.tid, th.name));
        assert!(
            first.ts_ns >= t.tsc_to_ns(registered),
            "thread {} ({}): its first entry ({}) is {} ns before its registration ended",
            th.tid,
            th.name,
            t.function_name(first.id),
            t.tsc_to_ns(registered) - first.ts_ns
        );
        checked += 1;
    }
    assert!(checked >= 51, "{checked} threads with an entry");
}

#[test]
fn refusals_say_why_in_one_line() {
    let dir = scratch("attach_refusals");
    // No instrumentation: `sleep`.
    let mut sleeper = Command::new("sleep").arg("30").spawn().unwrap();
    let out = ferrotrace()
        .args(["record", "-p", &sleeper.id().to_string(), "-o"])
        .arg(dir.join("t.data"))
        .output()
        .unwrap();
    let _ = sleeper.kill();
    let _ = sleeper.wait();
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(err.contains("has no patchable sites: "), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    // -p and a command.
    let out = ferrotrace()
        .args(["record", "-p", "1", "--", "true"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    // Duration: stops by itself.
    let server = Server::start(&testprog("line_server"), &[]);
    let started = Instant::now();
    let rec = Recording::start(
        server.pid(),
        &dir.join("d.data"),
        &["-F", "handle", "--duration", "300ms"],
    );
    let said = rec.wait();
    assert!(started.elapsed() < Duration::from_secs(20), "{said}");
    stopped_trace(&dir.join("d.data"));
    // --alloc, and --trace for a program without tracepoints (the preload library has none): one
    // line each, before anything is touched.
    let maps = || std::fs::read_to_string(format!("/proc/{}/maps", server.pid())).unwrap();
    let maps_before = maps();
    for (opts, why) in [
        (
            &["--alloc"][..],
            "--alloc cannot be used on a running process",
        ),
        (&["--trace", "request"][..], "has no tracepoints"),
        (
            &["--sample"][..],
            "--sample cannot be used on a running process",
        ),
    ] {
        let out = ferrotrace()
            .args(["record", "-p", &server.pid().to_string(), "-o"])
            .arg(dir.join("r.data"))
            .args(opts)
            .output()
            .unwrap();
        let err = text(&out.stderr);
        assert!(!out.status.success(), "{err}");
        assert!(err.contains(why), "{err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    }
    assert_eq!(maps(), maps_before);
}

/// A `-P` or `-F` pattern that selects nothing is named, with its own option, in the same line whether
/// the program was launched or attached to; an attach that could record nothing leaves the process
/// alone (as `live -p` does), and one that records something goes on with the warning.
#[test]
fn patterns_that_select_nothing_are_named_alike_launched_and_attached() {
    let dir = scratch("attach_selects_nothing");
    // Launched: the program runs, and the warning names -P.
    let (out, _) = record(&dir, &["-P", "no_such_fn"], &testprog("fib"), &["10"]);
    let err = text(&out.stderr);
    assert!(err.contains("-P 'no_such_fn' selects none of the"), "{err}");
    assert!(!err.contains("-F"), "{err}");
    let server = Server::start(&testprog("line_server"), &[]);
    let output = dir.join("r.data");
    let attach = |command: &str, opts: &[&str]| {
        ferrotrace()
            .args([command, "-p", &server.pid().to_string()])
            .args(if command == "record" {
                vec!["-o", output.to_str().unwrap()]
            } else {
                vec![]
            })
            .args(opts)
            .output()
            .unwrap()
    };
    for (command, opts, why) in [
        (
            "record",
            &["-P", "no_such_fn"][..],
            "-P 'no_such_fn' selects none of the",
        ),
        (
            "record",
            &["-F", "no_such_fn"][..],
            "-F 'no_such_fn' selects none of the",
        ),
        (
            "live",
            &["-F", "no_such_fn"][..],
            "-F 'no_such_fn' selects none of the",
        ),
    ] {
        let out = attach(command, opts);
        let err = text(&out.stderr);
        assert!(!out.status.success(), "{command} {opts:?}: {err}");
        assert!(err.contains(why), "{command} {opts:?}: {err}");
        assert!(!err.contains("-F/-N"), "{err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    }
    // One pattern selects, the other not: recorded, with the warning before the recording starts.
    let rec = Recording::start(
        server.pid(),
        &dir.join("w.data"),
        &["-F", "handle", "-F", "no_such_fn"],
    );
    assert!(
        rec.said
            .contains("warning: -F 'no_such_fn' selects none of the"),
        "{}",
        rec.said
    );
    Client::connect(server.port).ask_many("q", 3);
    rec.stop();
    assert_eq!(calls(&stopped_trace(&dir.join("w.data")), "handle").0, 3);
}

/// The preload library's TLS is static even when dlopened (DF_STATIC_TLS); when a process has no
/// static TLS left for it, the attach fails in one line naming the tunable that makes room, and
/// succeeds with it.
#[test]
fn static_tls_flag_and_the_tunable_when_none_is_left() {
    let dir = scratch("attach_static_tls");
    let dynamic = Command::new("readelf")
        .arg("-d")
        .arg(preload())
        .output()
        .expect("readelf");
    assert!(
        text(&dynamic.stdout).contains("STATIC_TLS"),
        "{}",
        text(&dynamic.stdout)
    );
    let server = nop_mcount_line_server(&dir);
    // 1600 of the 1664 bytes glibc keeps for dlopened libraries' static TLS by default.
    let hog = build_c(
        &dir,
        "gcc",
        "tls_hog.c",
        "libtls_hog.so",
        &["-shared", "-fPIC", "-DHOG_BYTES=1600"],
    );
    let start = |tunables: Option<&str>| {
        let mut cmd = Command::new(&server);
        cmd.env("LINE_SERVER_DLOPEN", &hog);
        match tunables {
            Some(t) => cmd.env("GLIBC_TUNABLES", t),
            None => cmd.env_remove("GLIBC_TUNABLES"),
        };
        let mut child = cmd.stdout(Stdio::piped()).spawn().unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert!(line.starts_with("port="), "the hog did not load: {line:?}");
        child
    };
    let mut full = start(None);
    let out = ferrotrace()
        .args(["record", "-p", &full.id().to_string(), "-o"])
        .arg(dir.join("t.data"))
        .output()
        .unwrap();
    let _ = full.kill();
    let _ = full.wait();
    let err = text(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("GLIBC_TUNABLES=glibc.rtld.optional_static_tls="),
        "{err}"
    );
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    let mut roomy = start(Some("glibc.rtld.optional_static_tls=4096"));
    let out = ferrotrace()
        .args([
            "record",
            "-p",
            &roomy.id().to_string(),
            "--duration",
            "200ms",
            "-o",
        ])
        .arg(dir.join("t.data"))
        .output()
        .unwrap();
    let _ = roomy.kill();
    let _ = roomy.wait();
    assert!(out.status.success(), "{}", text(&out.stderr));
    stopped_trace(&dir.join("t.data"));
}

/// `ferrotrace live -p PID OPTS`, once it prints.
fn live_printing(pid: u32, opts: &[&str]) -> Child {
    let mut live = ferrotrace()
        .args(["live", "-p", &pid.to_string()])
        .args(opts)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run ferrotrace live -p");
    let mut line = String::new();
    BufReader::new(live.stderr.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert!(line.contains("printing process"), "{line}");
    live
}

/// Stops `live` as Ctrl-C would, once what happened was printed; what it printed.
fn stop_live(live: Child) -> String {
    // The collector prints at most 5 ms after an event.
    std::thread::sleep(Duration::from_millis(200));
    kill(live.id() as i32, libc_sigint());
    let out = live.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    text(&out.stdout)
}

/// `live -p`: the events of the requests made while attached, printed as they happen; the server
/// answers the same before and after.
#[test]
fn live_prints_a_running_server_until_stopped() {
    let server = Server::start(&testprog("line_server"), &[]);
    let mut client = Client::connect(server.port);
    let before = client.ask_many("q", 5);
    let live = live_printing(server.pid(), &["-F", "::handle$"]);
    let during = client.ask_many("q", 7);
    let printed = stop_live(live);
    assert_eq!(
        printed
            .lines()
            .filter(|l| l.ends_with("line_protocol::handle() {"))
            .count(),
        7,
        "{printed}"
    );
    assert_eq!(before[..5], during[..5]);
    assert_eq!(client.ask_many("q", 5), before);
}

/// A program that links the ferrotrace runtime is recorded by its own copy (no library loaded), twice.
#[test]
fn linked_runtime_recorded_by_its_own_copy() {
    let dir = scratch("attach_linked");
    let server = Server::start(&testprog("linked_server"), &[]);
    one_recording(&server, &dir, "first", 30);
    one_recording(&server, &dir, "second", 12);
    let maps = std::fs::read_to_string(format!("/proc/{}/maps", server.pid())).unwrap();
    assert!(!maps.contains("libferrotrace_preload"), "{maps}");
}

/// `record -p` killed (SIGKILL, no chance to say stop): the control FIFO's end of file stops the
/// recording all the same; the trace ends `Stopped` with the requests made until then. The control
/// directory it left in `$TMPDIR` is removed by the next attach (issue 41 item 9).
#[test]
fn record_killed_still_stops_the_recording() {
    let dir = scratch("attach_record_killed");
    let tmp = dir.join("tmp");
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(&tmp).unwrap();
    let with_tmp = || {
        let mut c = ferrotrace();
        c.env("TMPDIR", &tmp);
        c
    };
    let left = || -> Vec<String> {
        std::fs::read_dir(&tmp)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect()
    };
    let server = Server::start(&testprog("line_server"), &[]);
    let mut client = Client::connect(server.port);
    let trace = dir.join("t.data");
    let mut rec = Recording::start_with(server.pid(), &trace, &["-F", "handle"], with_tmp());
    client.ask_many("q", 9);
    rec.child.kill().unwrap();
    rec.child.wait().unwrap();
    let stale = left();
    assert_eq!(stale.len(), 1, "{stale:?}");
    assert!(stale[0].starts_with("ferrotrace-attach-"), "{stale:?}");
    let started = Instant::now();
    while !Trace::open(&trace).is_ok_and(|t| t.end().is_some()) {
        assert!(started.elapsed() < Duration::from_secs(10), "no End chunk");
        std::thread::sleep(Duration::from_millis(20));
    }
    let t = stopped_trace(&trace);
    assert_eq!(calls(&t, "handle"), (9, 9));
    // Put back: nothing more is recorded, and the server answers as before.
    client.ask_many("q", 3);
    assert_eq!(calls(&Trace::open(&trace).unwrap(), "handle"), (9, 9));
    // The next attach sweeps the killed one's directory away, and its own when it ends.
    let again = dir.join("again.data");
    let rec = Recording::start_with(server.pid(), &again, &["-F", "handle"], with_tmp());
    client.ask_many("r", 2);
    rec.stop();
    assert_eq!(calls(&stopped_trace(&again), "handle"), (2, 2));
    assert_eq!(left(), Vec::<String>::new());
}

/// The server killed by SIGKILL while recorded (no handler runs, nothing is finished): `record`
/// appends what its runtime had recorded but not written, from the chunk pool in the memfd it made
/// in the process, and the trace says how it died. The requests fit in one chunk that no thread had
/// handed over: without the salvage, none of them would be in the file.
#[test]
fn server_killed_while_recorded_is_salvaged() {
    let (t, said, path) = ended_by_signal_while_recorded("attach_sigkill", 40, 9);
    assert!(
        said.contains("was killed by SIGKILL before finishing its trace"),
        "{said}"
    );
    assert!(t.end().is_none(), "{said}");
    let salvage = t.salvage().expect("a Salvage chunk");
    assert_eq!((salvage.signal, salvage.exit_code), (9, None), "{said}");
    assert!(salvage.chunks >= 1 && salvage.events >= 80, "{salvage:?}");
    assert!(
        t.truncation().is_none() && t.problems().is_empty(),
        "{:?} {:?}",
        t.truncation(),
        t.problems()
    );
    assert_eq!(calls(&t, "handle"), (40, 40), "{said}");
    let info = ft(&["info", "-i", path.to_str().unwrap()]);
    assert!(
        text(&info.stdout).contains("killed by SIGKILL: "),
        "{}",
        text(&info.stdout)
    );
}

/// `record -p --trace` on a server that links the runtime: its tracepoint, enabled while attached,
/// records each request made then (with the line's length), beside the traced function; stopping
/// disables it again, so that the next recording, without --trace, holds no tracepoint event. A glob
/// that selects nothing is refused in one line.
#[test]
fn tracepoints_of_a_linked_server_enabled_while_attached() {
    let dir = scratch("attach_tracepoints");
    let server = Server::start(&testprog("linked_server"), &[]);
    let mut client = Client::connect(server.port);
    client.ask_many("q", 5);
    let trace = dir.join("t.data");
    let rec = Recording::start(
        server.pid(),
        &trace,
        &["--trace", "request", "-F", "handle"],
    );
    client.ask_many("q", 20);
    let said = rec.stop();
    let t = stopped_trace(&trace);
    let expected: Vec<String> = (0..20)
        .map(|i| format!("linked_server::request(len={})", format!("q {i}").len()))
        .collect();
    assert_eq!(tracepoint_lines(&t), expected, "{said}");
    assert_eq!(calls(&t, "handle"), (20, 20), "{said}");
    // Disabled when the recording stopped.
    let again = dir.join("again.data");
    let rec = Recording::start(server.pid(), &again, &["-F", "handle"]);
    client.ask_many("q", 7);
    rec.stop();
    let t = stopped_trace(&again);
    assert_eq!(calls(&t, "handle"), (7, 7));
    assert_eq!(tracepoint_lines(&t), Vec::<String>::new());
    let out = ferrotrace()
        .args(["record", "-p", &server.pid().to_string(), "-o"])
        .arg(dir.join("none.data"))
        .args(["--trace", "no_such_*"])
        .output()
        .unwrap();
    let err = text(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("--trace 'no_such_*' selects none of the program's tracepoints (linked_server::request)"),
        "{err}"
    );
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
}

/// `live -p --trace` (no -F: tracepoints alone) on a server that links the runtime: each request made
/// while attached printed as it happens.
#[test]
fn live_prints_the_tracepoints_of_a_running_linked_server() {
    let server = Server::start(&testprog("linked_server"), &[]);
    let mut client = Client::connect(server.port);
    client.ask_many("q", 3);
    let live = live_printing(server.pid(), &["--trace", "request"]);
    client.ask_many("longer question", 6);
    let printed = stop_live(live);
    let requests: Vec<&str> = printed.lines().filter(|l| l.contains("request")).collect();
    assert_eq!(requests.len(), 6, "{printed}");
    assert!(requests.iter().all(|l| l.contains("len=17")), "{printed}");
}

/// Where process `pid` maps the GOT slot through which `exe` calls `symbol` (its `GLOB_DAT` or
/// `JUMP_SLOT` relocation), and the slot's value now.
fn got_slot(exe: &Path, symbol: &str, pid: u32) -> (u64, impl Fn() -> u64) {
    use object::{Object, ObjectSymbol, ObjectSymbolTable};
    let data = std::fs::read(exe).unwrap();
    let elf = object::File::parse(&*data).unwrap();
    let dynsyms = elf.dynamic_symbol_table().unwrap();
    let offset = elf
        .dynamic_relocations()
        .unwrap()
        .find_map(|(offset, r)| match r.target() {
            object::RelocationTarget::Symbol(i) => dynsyms
                .symbol_by_index(i)
                .ok()
                .filter(|s| s.name() == Ok(symbol))
                .map(|_| offset),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no relocation against {symbol} in {}", exe.display()));
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    let exe = exe.canonicalize().unwrap();
    let base = maps
        .lines()
        .find(|l| l.ends_with(exe.to_str().unwrap()))
        .and_then(|l| u64::from_str_radix(l.split('-').next()?, 16).ok())
        .unwrap();
    let slot = base + offset;
    let mem = std::fs::File::open(format!("/proc/{pid}/mem")).unwrap();
    (slot, move || {
        let mut word = [0u8; 8];
        std::os::unix::fs::FileExt::read_exact_at(&mem, &mut word, slot).unwrap();
        u64::from_ne_bytes(word)
    })
}

/// The path of the mapping of process `pid` that holds `addr`.
fn mapped_at(pid: u32, addr: u64) -> String {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    maps.lines()
        .find(|l| {
            let mut r = l.split_whitespace().next().unwrap().split('-');
            let lo = u64::from_str_radix(r.next().unwrap(), 16).unwrap();
            let hi = u64::from_str_radix(r.next().unwrap(), 16).unwrap();
            (lo..hi).contains(&addr)
        })
        .and_then(|l| l.split_whitespace().nth(5))
        .unwrap_or("")
        .to_string()
}

/// C servers built with `gcc -pg` and `gcc -pg -mfentry` (PIE, without -mnop-mcount), and the Rust line
/// server built with `-Zinstrument-mcount`: every function calls the C library's `mcount` or
/// `__fentry__` through a GOT slot in the read-only RELRO segment. While attached that slot holds the
/// runtime's hook (so the calls are traced, exactly the requests made); after the stop it holds the C
/// library's function again, and the answers never change. Recorded twice each.
#[test]
fn glibc_mcount_servers_recorded_through_their_got_slot() {
    let dir = scratch("attach_glibc_mcount");
    let c = |name: &str, flags: &[&str]| build_c(&dir, "gcc", "line_server.c", name, flags);
    for (exe, symbol) in [
        (c("line_server_pg", &["-O1", "-pg"]), "mcount"),
        (
            c("line_server_fentry", &["-O1", "-pg", "-mfentry"]),
            "__fentry__",
        ),
        (testprog_mcount("line_server"), "mcount"),
    ] {
        let name = exe.file_name().unwrap().to_string_lossy().into_owned();
        let name = format!("{name}_{symbol}");
        let server = Server::start(&exe, &[]);
        let (slot, read_slot) = got_slot(&exe, symbol, server.pid());
        let libc_hook = read_slot();
        assert!(
            mapped_at(server.pid(), libc_hook).contains("libc.so"),
            "{name}: {symbol} at {libc_hook:#x}, slot {slot:#x}"
        );
        let mut client = Client::connect(server.port);
        let before = client.ask_many("q", 10);
        for (run, during) in [(0, 30), (1, 12)] {
            let trace = dir.join(format!("{name}.{run}.data"));
            let rec = Recording::start(server.pid(), &trace, &["-F", "handle$"]);
            let hook = read_slot();
            assert!(
                mapped_at(server.pid(), hook).contains("libferrotrace_preload"),
                "{name}: the slot holds {hook:#x} while attached"
            );
            let answers = client.ask_many("q", during);
            let said = rec.stop();
            assert_eq!(read_slot(), libc_hook, "{name}: the slot was not put back");
            assert_eq!(answers[..10], before[..], "{name}");
            assert_eq!(
                calls(&stopped_trace(&trace), "handle"),
                (during as u64, during as u64),
                "{name}: {said}"
            );
        }
        assert_eq!(client.ask_many("q", 10), before, "{name}");
    }
}

/// Resident memory (KiB), mappings and descriptors of process `pid`.
fn footprint(pid: u32) -> (u64, usize, usize) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let rss = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap();
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps"))
        .unwrap()
        .lines()
        .count();
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count();
    (rss, maps, fds)
}

/// 20 attach/record/detach cycles leave the process as the second left it: the same mappings and
/// descriptors, and no more than a few KiB of memory per cycle (each retired runtime gives its chunk
/// pool back and the next reuses its address range, queues and stub pages; before, every cycle kept
/// its 16 MiB pool, faulted in, and two more mappings).
#[test]
fn twenty_attachments_leave_no_pool_mapping_or_descriptor_behind() {
    let dir = scratch("attach_leak");
    let server = Server::start(&testprog("line_server"), &[]);
    let mut client = Client::connect(server.port);
    let mut after_second = None;
    for cycle in 1..=20 {
        let trace = dir.join("t.data");
        let rec = Recording::start(server.pid(), &trace, &["-F", "handle"]);
        client.ask_many("q", 3);
        rec.stop();
        assert_eq!(calls(&stopped_trace(&trace), "handle"), (3, 3));
        if cycle == 2 {
            after_second = Some(footprint(server.pid()));
        }
    }
    let (rss_2, maps_2, fds_2) = after_second.unwrap();
    let (rss_20, maps_20, fds_20) = footprint(server.pid());
    assert_eq!((maps_20, fds_20), (maps_2, fds_2));
    assert!(
        rss_20 < rss_2 + 1024,
        "resident memory grew from {rss_2} KiB to {rss_20} KiB over 18 attachments"
    );
}

/// What a detach leaves in the code of an XRay program, compared byte by byte (`/proc/PID/mem`
/// against the file): exactly what the README and `patch::sites::unpatch_all` say. Every sled patched
/// has its first two bytes back (its short jump or `ret`, so no thread enters the rest); only bytes
/// 2-10 of sleds differ (the `mov r10d, id; call` no thread runs any more, left because a thread
/// stopped between the two instructions would resume inside the NOP); every other byte of the
/// executable's code is the file's.
#[test]
fn after_a_detach_only_the_skipped_bytes_of_sleds_differ_from_the_file() {
    use object::{Object, ObjectSection};
    let dir = scratch("attach_code_back");
    let exe = testprog("line_server");
    let server = Server::start(&exe, &[]);
    let mut client = Client::connect(server.port);
    let rec = Recording::start(server.pid(), &dir.join("t.data"), &[]);
    client.ask_many("q", 3);
    rec.stop();
    client.ask_many("q", 3);
    let file = std::fs::read(&exe).unwrap();
    let elf = object::File::parse(&*file).unwrap();
    let map = elf.section_by_name("xray_instr_map").expect("sleds");
    let entries = map.data().unwrap();
    let mut sleds = Vec::new();
    for (i, e) in entries
        .chunks_exact(ferrotrace_core::xray::ENTRY_LEN)
        .enumerate()
    {
        let at = map.address() + (i * ferrotrace_core::xray::ENTRY_LEN) as u64;
        let entry = ferrotrace_core::xray::decode_entry(e.try_into().unwrap(), at);
        if entry.kind.is_some() {
            sleds.push(entry.sled);
        }
    }
    sleds.sort_unstable();
    let (vaddr_of_start, memory, on_disk) = exe_code_in_memory_and_file(server.pid(), &exe);
    let (mut in_sleds, mut patched_sleds) = (0usize, std::collections::BTreeSet::new());
    for (i, (m, d)) in memory.iter().zip(&on_disk).enumerate() {
        if m == d {
            continue;
        }
        let vaddr = vaddr_of_start + i as u64;
        let sled = sleds[..sleds.partition_point(|&s| s <= vaddr)]
            .last()
            .copied();
        let inside = sled.is_some_and(|s| (s + 2..s + 11).contains(&vaddr));
        assert!(
            inside,
            "byte at {vaddr:#x} differs from the file ({m:#04x}, file {d:#04x}) outside the skipped \
             bytes of a sled (nearest sled before it: {sled:#x?})"
        );
        in_sleds += 1;
        patched_sleds.insert(sled.unwrap());
    }
    // It was patched (the bytes that stay say so), and at most 9 bytes of each sled differ.
    assert!(!patched_sleds.is_empty(), "no sled was patched?");
    assert!(in_sleds <= 9 * patched_sleds.len());
}

/// A program whose only thread waits 3 s in one system call, attached to while it waits (the borrowed
/// thread) and recorded past the wait's end: the wait lasts its 3 s and returns what it would have
/// (`nanosleep`, `clock_nanosleep`, `poll` and `epoll_wait` 0, `sigtimedwait` EAGAIN). They used to fail
/// with EINTR as soon as the thread was let go: `epoll_wait` and `sigtimedwait` return EINTR for a
/// mere stop, and the others went on through a restart block the calls on the thread had reused.
///
/// A plain `gcc -O1` build, its `wait_in` entry-patched. Built with `-pg` (as it was), one wait
/// failed with EINTR a moment into the recording: gprof's start-up (`gcrt1.o`'s `__monstartup`, run
/// before any attach) arms a `SIGPROF` timer on the process's CPU time, and the CPU the runtime
/// spends in the process makes it fire; the runtime's threads block every signal, so glibc's
/// `SIGPROF` handler runs on a program thread, whose wait it cuts short. Any CPU use would; a
/// launched `record` interposes `__monstartup` (as uftrace does), an attach cannot undo it.
#[test]
fn a_borrowed_thread_s_long_wait_is_not_cut_short() {
    let dir = scratch("attach_long_waits");
    let exe = build_c(&dir, "gcc", "long_waits.c", "long_waits", &["-O1"]);
    let calls = [
        ("nanosleep", "rc=0 errno=0"),
        ("clock_nanosleep", "rc=0 errno=0"),
        ("poll", "rc=0 errno=0"),
        ("epoll_wait", "rc=0 errno=0"),
        ("sigtimedwait", "rc=-1 errno=11"),
    ];
    let waiting: Vec<(Child, BufReader<std::process::ChildStdout>, Child)> = calls
        .iter()
        .map(|(call, _)| {
            let mut program = Command::new(&exe)
                .arg(call)
                .stdout(Stdio::piped())
                .spawn()
                .unwrap();
            let mut out = BufReader::new(program.stdout.take().unwrap());
            let mut line = String::new();
            out.read_line(&mut line).unwrap();
            assert_eq!(line, "ready\n");
            // Inside its wait by then.
            std::thread::sleep(Duration::from_millis(200));
            let record = ferrotrace()
                .args(["record", "-p", &program.id().to_string(), "--duration", "5"])
                .args(["-P", "^wait_in$"])
                .arg("-o")
                .arg(dir.join(format!("{call}.data")))
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            (program, out, record)
        })
        .collect();
    for ((call, returned), (mut program, mut out, record)) in calls.iter().zip(waiting) {
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        let said = record.wait_with_output().unwrap();
        let _ = program.wait();
        let ms: u64 = line
            .trim_end()
            .rsplit_once("ms=")
            .and_then(|(_, ms)| ms.parse().ok())
            .unwrap_or_else(|| panic!("{line:?}"));
        assert!(
            line.starts_with(&format!("{call} {returned} ")) && ms >= 3000,
            "{line}{}",
            text(&said.stderr)
        );
    }
}

/// Issue 41 items 9 and 11: a zombie (its parent never waits) is refused for what it is by
/// `record -p`, `live -p` and `profile -p`, where record named a statically linked program and
/// profile "no process" after leaving a 0-byte trace file.
#[test]
fn a_zombie_is_refused_as_one_and_leaves_no_file() {
    let dir = scratch("attach_zombie");
    // `sleep 0` exits at once; its parent, exec'd into `sleep 30`, never waits for it.
    let mut parent = Command::new("sh")
        .args(["-c", "sleep 0 & exec sleep 30"])
        .spawn()
        .unwrap();
    let children = format!("/proc/{0}/task/{0}/children", parent.id());
    let deadline = Instant::now() + Duration::from_secs(10);
    let zombie = loop {
        let state = std::fs::read_to_string(&children)
            .ok()
            .and_then(|c| c.split_whitespace().next().map(str::to_string))
            .and_then(|pid| {
                let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
                let state = stat.rsplit_once(')')?.1.trim_start().chars().next()?;
                (state == 'Z').then_some(pid)
            });
        if let Some(pid) = state {
            break pid;
        }
        assert!(
            Instant::now() < deadline,
            "no zombie child of {}",
            parent.id()
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let trace = dir.join("z.data");
    let t = trace.to_str().unwrap();
    for (args, says) in [
        (
            vec!["record", "-o", t, "-p", &zombie],
            "cannot attach to process",
        ),
        (
            vec!["live", "-F", ".", "-p", &zombie],
            "cannot attach to process",
        ),
        (vec!["profile", "-o", t, "-p", &zombie], "process"),
    ] {
        let out = ferrotrace().args(&args).output().unwrap();
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
        assert!(
            err.contains("has exited (a zombie its parent"),
            "{args:?}: {err}"
        );
        assert!(!trace.exists(), "{args:?} left {}", trace.display());
    }
    let _ = parent.kill();
    let _ = parent.wait();
}

/// Issue 41 items 3 and 4: `record -p` killed (SIGKILL) at any moment of an attach. A call made on
/// the borrowed thread returned to address 0, where a tracer killed during it (the loader's
/// `dlopen`, the runtime's start) left the thread to die: 4 of 64 random kills. Calls now return
/// through a signal frame of the thread's own state, so it puts itself back. 100 kills spread over
/// the first 250 ms after `record -p` starts (before the seize, in each call, while entries are
/// written, recording) on a plain `gcc -O2` server whose `handle` is entry-patched, and 40 on its
/// non-PIE build: it lives and answers as before after each.
#[test]
fn record_killed_at_any_moment_of_an_attach_leaves_the_process_serving() {
    let dir = scratch("attach_kill_trials");
    // A PIE, and a non-PIE, whose stub page goes below 0x400000 (`/proc/PID/maps` pads its address
    // to 8 digits: it was not recognised, and calls returned to address 0 after all).
    let builds: [(&str, &[&str], u64); 2] = [
        ("line_server_kill", &["-O2"], 100),
        (
            "line_server_kill_no_pie",
            &["-O2", "-fno-pie", "-no-pie"],
            40,
        ),
    ];
    for (name, flags, trials) in builds {
        let exe = build_c(&dir, "gcc", "line_server.c", name, flags);
        let server = Server::start(&exe, &[]);
        let pid = server.pid().to_string();
        let mut client = Client::connect(server.port);
        let before = client.ask_many("k", 3);
        let nice = thread_nices(server.pid())[&server.pid()];
        let state = || {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            stat.rsplit_once(')')
                .and_then(|(_, rest)| rest.trim_start().chars().next())
                .unwrap_or('?')
        };
        for trial in 0..trials {
            let trace = dir.join("killed.data");
            let mut rec = ferrotrace()
                .args(["record", "-p", &pid, "-P", "^handle$", "-o"])
                .arg(&trace)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap();
            // Spread over the first 250 ms.
            std::thread::sleep(Duration::from_micros(trial * 250_000 / trials));
            rec.kill().unwrap();
            rec.wait().unwrap();
            // Alive (sleeping, running, or in a moment of uninterruptible wait) and not stopped.
            assert!(
                !matches!(state(), 'Z' | 'X' | 'x' | 'T' | '?'),
                "{name} trial {trial}: the server is {}",
                state()
            );
            assert_eq!(client.ask_many("k", 3), before, "{name} trial {trial}");
            let _ = std::fs::remove_file(&trace);
        }
        // Whenever the kill came, the borrowed thread's priority is its own again: put back by
        // the call's stub (after its wait of a second) where `record` was killed during a call.
        let waited = Instant::now();
        while !threads_not_at(server.pid(), nice).is_empty()
            && waited.elapsed() < Duration::from_secs(5)
        {
            std::thread::sleep(Duration::from_millis(100));
        }
        assert_eq!(threads_not_at(server.pid(), nice), [], "{name}");
    }
}

/// Issue 41 item 6: a process that replaces its program (`exec`) while it is recorded. The runtime
/// goes with the old program without finishing its trace: `record -p` waited for the new program
/// to end (or, stopped, 30 s for an answer), then said "ended by unknown". It now sees the exec,
/// says so, and recovers what the runtime had not written, at once.
#[test]
fn an_exec_while_recorded_ends_the_recording_there_and_says_so() {
    let dir = scratch("attach_exec");
    let exe = build_c(&dir, "gcc", "execer.c", "execer", &["-O2"]);
    // 600 rounds of 2 ms, then `sleep 30`.
    let mut target = Command::new(&exe)
        .args(["600", "sleep", "30"])
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let trace = dir.join("exec.data");
    let started = Instant::now();
    let out = ferrotrace()
        .args([
            "record",
            "-p",
            &target.id().to_string(),
            "-P",
            "^work$",
            "-o",
        ])
        .arg(&trace)
        .output()
        .unwrap();
    let took = started.elapsed();
    let err = text(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("replaced its program (exec) while it was recorded"),
        "{err}"
    );
    // Ended at the exec (about a second in), not with `sleep 30`.
    assert!(took < Duration::from_secs(15), "{took:?}: {err}");
    let state = std::fs::read_to_string(format!("/proc/{}/comm", target.id())).unwrap();
    assert_eq!(state.trim(), "sleep");
    let t = Trace::open(&trace).unwrap();
    let (entries, exits) = calls(&t, "work");
    assert!(
        entries > 100 && entries == exits,
        "{entries} {exits}: {err}"
    );
    let _ = target.kill();
    let _ = target.wait();
}

/// Whether every executable mapping of `object` in process `pid` holds the bytes of the file (a
/// page written through `/proc/PID/mem` may split a mapping in two).
fn code_as_in_file(pid: u32, object: &Path) -> bool {
    use std::os::unix::fs::FileExt;
    let path = object.canonicalize().unwrap();
    let file = std::fs::read(&path).unwrap();
    let mem = std::fs::File::open(format!("/proc/{pid}/mem")).unwrap();
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    let code: Vec<&str> = maps
        .lines()
        .filter(|l| l.contains(" r-xp ") && l.ends_with(path.to_str().unwrap()))
        .collect();
    assert!(!code.is_empty(), "{} is not mapped", path.display());
    code.iter().all(|line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        let (lo, hi) = f[0].split_once('-').unwrap();
        let lo = u64::from_str_radix(lo, 16).unwrap();
        let len = u64::from_str_radix(hi, 16).unwrap() - lo;
        let offset = usize::from_str_radix(f[2], 16).unwrap();
        let mut memory = vec![0u8; len as usize];
        mem.read_exact_at(&mut memory, lo).unwrap();
        memory[..] == file[offset..offset + len as usize]
    })
}

/// Issue 35: a library the process loads while recorded (`dlopen`) has its selected entries patched
/// too. Debian's own python3, attached with `-P` naming `PyObject_GetAttr` (in the executable) and
/// `sqlite3_get_autocommit` (in libsqlite3.so.0, which is not loaded yet), then told to `import
/// sqlite3` (which dlopens `_sqlite3` and with it libsqlite3.so.0): the attached runtime's rescan
/// finds the library and builds its trampoline, `record -p` writes the jump with every thread
/// stopped, and the calls made after it are counted exactly (a connection's `in_transaction` calls
/// `sqlite3_get_autocommit` once). The library's code equals its file again after the detach, and
/// the program answers alike during and after.
#[test]
fn a_library_dlopened_while_attached_is_patched_and_put_back() {
    let Ok(python) = std::fs::canonicalize("/usr/bin/python3") else {
        eprintln!("skipped: Debian's python3 is not installed");
        return;
    };
    let lib = Path::new("/usr/lib/x86_64-linux-gnu/libsqlite3.so.0");
    if !lib.exists() {
        eprintln!("skipped: libsqlite3.so.0 is not installed (scripts/setup.sh installs sqlite3)");
        return;
    }
    let dir = scratch("attach_dlopen");
    let script = "import sys\n\
                  for line in sys.stdin:\n\
                  \x20   cmd, *arg = line.split()\n\
                  \x20   if cmd == 'load':\n\
                  \x20       import sqlite3\n\
                  \x20       c = sqlite3.connect(':memory:')\n\
                  \x20       print('loaded', flush=True)\n\
                  \x20   elif cmd == 'run':\n\
                  \x20       print(sum(1 for _ in range(int(arg[0])) if not c.in_transaction), flush=True)\n";
    let mut py = Command::new(&python)
        .args(["-u", "-c", script])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3");
    let pid = py.id();
    let mut input = py.stdin.take().unwrap();
    let mut output = BufReader::new(py.stdout.take().unwrap());
    let mut ask = |command: &str| {
        writeln!(input, "{command}").unwrap();
        let mut line = String::new();
        output.read_line(&mut line).unwrap();
        line.trim().to_string()
    };
    let trace = dir.join("dlopen.data");
    let rec = Recording::start(
        pid,
        &trace,
        &["-P", "^PyObject_GetAttr$|^sqlite3_get_autocommit$"],
    );
    assert_eq!(ask("load"), "loaded");
    // The rescan runs every second, the host looks every 250 ms: the jump is in the library's code
    // once they have.
    let waited = Instant::now();
    while code_as_in_file(pid, lib) {
        assert!(
            waited.elapsed() < Duration::from_secs(20),
            "libsqlite3.so.0's code unchanged 20 s after it was loaded:\n{}",
            rec.said
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(ask("run 300"), "300");
    let said = rec.stop();
    assert_eq!(ask("run 7"), "7", "after the detach");
    assert!(
        code_as_in_file(pid, lib),
        "libsqlite3.so.0's code differs from its file after the detach"
    );
    assert!(
        said.contains("loaded objects while recorded: 1 more function entries patched"),
        "{said}"
    );
    let _ = py.kill();
    let _ = py.wait();
    let trace = stopped_trace(&trace);
    assert_eq!(
        calls(&trace, "sqlite3_get_autocommit"),
        (300, 300),
        "{said}"
    );
    assert!(calls(&trace, "PyObject_GetAttr").0 > 0, "{said}");
}
