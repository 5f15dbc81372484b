//! A third-party program that uses `tracing`, under `ferrotrace record`: mini-redis 0.4.1 (tokio's
//! example Redis server, as published) with the ferrotrace layer added to its server's subscriber
//! (testprogs/mini-redis: the patch and the build, with XRay sleds), driven by its own
//! `mini-redis-cli` for SETS `set` and as many `get` requests, one connection each, then stopped
//! with Ctrl-C (SIGINT to `record`, which passes it on). Its spans: `run` (`#[instrument]` on the
//! connection handler, entered at each poll of the connection's task) and `apply` (on `Set::apply`
//! and `Get::apply`, one per command); its events: `debug!(?cmd)` per request in `run`,
//! `debug!(?response)` in each `apply`. Counts are the program's: one `apply` span of each command
//! per request of its kind, and one event each. The same server, running untraced, picks up
//! `ferrotrace record -p` and leaves it when it stops.

mod common;

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use ferrotrace_analysis::reader::{EventKind, Trace};
use ferrotrace_analysis::tracepoints::{self, Value};

const SETS: usize = 12;

/// A port nothing listens on now.
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Runs `mini-redis-cli --port PORT ARGS` and returns what it printed.
fn cli(bin: &Path, port: u16, args: &[&str]) -> String {
    let out = Command::new(bin.join("mini-redis-cli"))
        .args(["--port", &port.to_string()])
        .args(args)
        .output()
        .unwrap();
    assert!(out.status.success(), "{args:?}: {}", text(&out.stderr));
    text(&out.stdout)
}

/// Records the server while the client sends SETS sets then SETS gets; the trace.
fn record_mini_redis(dir: &Path) -> std::path::PathBuf {
    let bin = mini_redis();
    let port = free_port();
    let trace = dir.join("trace.data");
    let mut record = ferrotrace()
        .args(["record", "--trace", "mini_redis::*", "-o"])
        .arg(&trace)
        .arg("--")
        .arg(bin.join("mini-redis-server"))
        .args(["--port", &port.to_string()])
        .current_dir(dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the server does not listen"
        );
        assert!(record.try_wait().unwrap().is_none(), "the server ended");
        std::thread::sleep(Duration::from_millis(20));
    }
    for i in 0..SETS {
        assert_eq!(
            cli(
                &bin,
                port,
                &["set", &format!("key{i}"), &format!("value{i}")]
            ),
            "OK\n"
        );
    }
    for i in 0..SETS {
        assert_eq!(
            cli(&bin, port, &["get", &format!("key{i}")]),
            format!("\"value{i}\"\n")
        );
    }
    kill(record.id() as i32, 2);
    let out = record.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    trace
}

/// What a trace of mini-redis holds, request by request.
struct Requests {
    /// Per `apply` span (one per callsite), sorted: what ran inside it (the database call, the
    /// response event with its value) and how often.
    per_apply: Vec<Vec<(String, u64)>>,
    /// Entries of the `apply` spans, of the `run` spans.
    apply_entries: u64,
    run_entries: u64,
    /// The `cmd` field of every `debug!(?cmd)`, each checked to be inside a `run` span.
    cmds: Vec<String>,
}

/// Walks every thread of `trace` with its stack of open frames: which `apply` span (by function
/// id: one per callsite) each database call and each response event ran in.
fn requests(trace: &Trace) -> Requests {
    let mut apply_entries = 0u64;
    let mut run_entries = 0u64;
    // (apply function id, what ran inside) → count.
    let mut inside: HashMap<(u32, String), u64> = HashMap::new();
    let mut cmds = Vec::new();
    for &tid in trace.threads().keys() {
        let w = walk(trace, tid);
        assert!(w.unwound.is_empty(), "thread {tid} unwound {:?}", w.unwound);
        let mut stack: Vec<u32> = Vec::new();
        let innermost_apply = |stack: &[u32]| {
            stack
                .iter()
                .rev()
                .copied()
                .find(|&f| trace.function_name(f) == "apply")
        };
        for e in trace.thread_events(tid).unwrap() {
            let e = e.unwrap();
            match e.kind {
                EventKind::Entry => {
                    let name = trace.function_name(e.id);
                    match name.as_str() {
                        "apply" => apply_entries += 1,
                        "run" => run_entries += 1,
                        "<mini_redis::db::Db>::set" | "<mini_redis::db::Db>::get" => {
                            let apply = innermost_apply(&stack).expect("a database call in apply");
                            *inside.entry((apply, name)).or_default() += 1;
                        }
                        _ => {}
                    }
                    stack.push(e.id);
                }
                EventKind::Exit | EventKind::TailExit => {
                    if let Some(at) = stack.iter().rposition(|&f| f == e.id) {
                        stack.truncate(at);
                    }
                }
                EventKind::Tracepoint => {
                    let (desc, args) = tracepoints::decode(trace, &e).unwrap();
                    // Every event decodes (a `Debug` field runs instrumented code while visited).
                    let args = args.unwrap_or_else(|err| panic!("{desc:?}: {err:?}"));
                    let field = |name: &str| match args.iter().find(|(n, _)| n == name) {
                        Some((_, Value::Str(s))) => Some(s.clone()),
                        _ => None,
                    };
                    match desc.name.as_str() {
                        "mini_redis::server" => {
                            if let Some(cmd) = field("cmd") {
                                assert_eq!(
                                    stack.last().map(|&f| trace.function_name(f)).as_deref(),
                                    Some("run")
                                );
                                cmds.push(cmd);
                            }
                        }
                        "mini_redis::cmd::set" | "mini_redis::cmd::get" => {
                            let apply = innermost_apply(&stack).expect("a response in apply");
                            let response = field("response").unwrap();
                            *inside
                                .entry((apply, format!("{} {response}", desc.name)))
                                .or_default() += 1;
                        }
                        _ => {}
                    }
                }
                _ => {}
            }
        }
    }
    let mut per_apply: HashMap<u32, Vec<(String, u64)>> = HashMap::new();
    for ((apply, what), n) in inside {
        per_apply.entry(apply).or_default().push((what, n));
    }
    let mut per_apply: Vec<Vec<(String, u64)>> = per_apply
        .into_values()
        .map(|mut v| {
            v.sort();
            v
        })
        .collect();
    per_apply.sort();
    Requests {
        per_apply,
        apply_entries,
        run_entries,
        cmds,
    }
}

/// Checks that `r` holds `n` SETs (keys `key0`…) and `n` GETs of them, each in an `apply` span of
/// its command's callsite with its database call and its response inside, and one `debug!(?cmd)`
/// per request.
fn assert_requests(r: &Requests, n: usize) {
    let mut get_responses: Vec<(String, u64)> = (0..n)
        .map(|i| (format!(r#"mini_redis::cmd::get Bulk(b"value{i}")"#), 1))
        .collect();
    get_responses.sort();
    assert_eq!(r.per_apply.len(), 2, "{:?}", r.per_apply);
    assert_eq!(
        r.per_apply[0][0],
        ("<mini_redis::db::Db>::get".to_string(), n as u64)
    );
    assert_eq!(r.per_apply[0][1..], get_responses[..]);
    assert_eq!(
        r.per_apply[1],
        [
            ("<mini_redis::db::Db>::set".to_string(), n as u64),
            (r#"mini_redis::cmd::set Simple("OK")"#.to_string(), n as u64)
        ]
    );
    assert_eq!(r.cmds.len(), 2 * n, "{:?}", r.cmds);
    assert_eq!(r.cmds.iter().filter(|c| c.starts_with("Set(")).count(), n);
    assert_eq!(r.cmds.iter().filter(|c| c.starts_with("Get(")).count(), n);
}

#[test]
fn mini_redis_spans_events_and_functions_in_one_trace() {
    let dir = scratch("mini_redis");
    let path = record_mini_redis(&dir);
    let input = path.to_str().unwrap();
    let trace = Trace::open(&path).unwrap();
    assert!(trace.warnings().is_empty(), "{:?}", trace.warnings());

    // Two `apply` spans (two callsites of one name): one per SET, its database call and its
    // response inside, the other per GET; one `debug!(?cmd)` per request, in `run`.
    let r = requests(&trace);
    assert_requests(&r, SETS);
    let sets = SETS as u64;
    let apply_entries = r.apply_entries;
    // Each `apply` is entered when polled and when dropped (`Instrumented` drops its future
    // inside the span); each connection's `run` at every poll of its task.
    assert!(apply_entries >= 4 * sets, "{apply_entries}");
    assert!(r.run_entries >= 2 * sets, "{}", r.run_entries);

    // replay: the command's event in the connection's span, then the span of its `apply`, the
    // function that polls it, the database call inside, the response.
    let replay = ok(ft(&["replay", "-i", input, "-F", "^run$", "-f", "none"]));
    let lines: Vec<&str> = replay
        .lines()
        .map(|l| l.trim_start_matches(['|', ' ']))
        .collect();
    let at = lines
        .iter()
        .position(|l| *l == "<mini_redis::db::Db>::set() {")
        .unwrap_or_else(|| panic!("{replay}"));
    let cmd = lines[..at]
        .iter()
        .rposition(|l| l.starts_with("/* DEBUG mini_redis::server("))
        .unwrap_or_else(|| panic!("{replay}"));
    assert!(
        lines[cmd].starts_with(r#"/* DEBUG mini_redis::server(cmd="Set(Set { key: \"key"#),
        "{replay}"
    );
    assert_eq!(lines[at - 2], "apply() {", "{replay}");
    assert_eq!(
        lines[at - 1],
        "<mini_redis::cmd::set::Set>::apply::{closure#0}::{closure#0}() {",
        "{replay}"
    );
    let after = |line: &str| lines[at..].iter().position(|l| *l == line);
    let response = after(r#"/* DEBUG mini_redis::cmd::set(response="Simple(\"OK\")") */"#);
    let closed = after("} /* apply */");
    assert!(response.is_some() && response < closed, "{replay}");

    // report: the spans in the function table, the events in the tracepoint table.
    let report = ok(ft(&["report", "-i", input]));
    assert!(report.lines().any(|l| l.ends_with("  apply")), "{report}");
    assert!(
        report.contains(&format!("{sets:>12}  mini_redis::cmd::set\n")),
        "{report}"
    );
    // flame: the spans between the connection's task and the database.
    let folded = ok(ft(&["dump", "-i", input, "--format", "folded"]));
    assert!(
        folded
            .lines()
            .any(|l| l.contains(";run;apply;") && l.contains(";<mini_redis::db::Db>::set")),
        "{folded}"
    );
    let svg = dir.join("flame.svg");
    ok(ft(&["flame", "-i", input, "-o", svg.to_str().unwrap()]));
    assert!(std::fs::read_to_string(&svg).unwrap().contains("apply"));
    // Chrome: a slice per span entry, an instant per event.
    let chrome = ok(ft(&["dump", "-i", input, "--format", "chrome"]));
    let json: serde_json::Value = serde_json::from_str(&chrome).unwrap();
    let events = json["traceEvents"].as_array().unwrap();
    let count = |ph: &str, name: &str| {
        events
            .iter()
            .filter(|e| e["ph"] == ph && e["name"] == name)
            .count() as u64
    };
    assert_eq!(count("B", "apply"), apply_entries);
    assert_eq!(count("i", "mini_redis::cmd::set"), sets);
    // Perfetto, decoded with its own protos: the spans' slices and the events' annotations.
    let decoded = perfetto_decoded(&path, &dir);
    assert!(decoded.contains(r#"name: "apply""#), "apply");
    assert!(decoded.contains("mini_redis::cmd::set"), "set event");
}

#[test]
fn record_p_picks_up_the_spans_of_a_running_mini_redis() {
    // The server runs before anything records: its callsites answered `never`; attaching asks them
    // again, detaching leaves the server serving, and Ctrl-C still stops it gracefully.
    const N: usize = 3;
    let dir = scratch("mini_redis_attach");
    let bin = mini_redis();
    let port = free_port();
    let mut server = default_signals(&mut Command::new(bin.join("mini-redis-server")))
        .args(["--port", &port.to_string()])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(start.elapsed() < Duration::from_secs(60), "no server");
        std::thread::sleep(Duration::from_millis(20));
    }
    // Before the attach: not in the trace.
    assert_eq!(cli(&bin, port, &["set", "before", "x"]), "OK\n");

    let trace = dir.join("trace.data");
    let mut record = ferrotrace()
        .args([
            "record",
            "-p",
            &server.id().to_string(),
            "--trace",
            "mini_redis::*",
            "-o",
        ])
        .arg(&trace)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut said = String::new();
    let mut stderr = BufReader::new(record.stderr.take().unwrap());
    while !said.contains("recording process") {
        assert!(
            stderr.read_line(&mut said).unwrap() > 0,
            "record -p ended before recording:\n{said}"
        );
    }
    for i in 0..N {
        let set = ["set", &format!("key{i}"), &format!("value{i}")];
        assert_eq!(cli(&bin, port, &set), "OK\n");
    }
    for i in 0..N {
        let got = cli(&bin, port, &["get", &format!("key{i}")]);
        assert_eq!(got, format!("\"value{i}\"\n"));
    }
    kill(record.id() as i32, 2);
    let status = record.wait().unwrap();
    let _ = stderr.read_to_string(&mut said);
    assert!(status.success(), "{said}");

    // Detached, the server serves on, and stops on Ctrl-C as it would untraced.
    assert_eq!(cli(&bin, port, &["get", "key0"]), "\"value0\"\n");
    kill(server.id() as i32, 2);
    assert!(server.wait().unwrap().success());

    let t = Trace::open(&trace).unwrap();
    assert!(t.warnings().is_empty(), "{:?}", t.warnings());
    let r = requests(&t);
    assert_requests(&r, N);
    assert!(!r.cmds.iter().any(|c| c.contains("before")), "{:?}", r.cmds);
}
