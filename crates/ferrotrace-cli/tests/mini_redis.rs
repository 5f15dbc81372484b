//! A third-party program that uses `tracing`, under `ferrotrace record`: mini-redis 0.4.1 (tokio's
//! example Redis server, as published) with the ferrotrace layer added to its server's subscriber
//! (testprogs/mini-redis: the patch and the build, with XRay sleds), driven by its own
//! `mini-redis-cli` for SETS `set` and as many `get` requests, one connection each, then stopped
//! with Ctrl-C (SIGINT to `record`, which passes it on). Its spans: `run` (`#[instrument]` on the
//! connection handler, entered at each poll of the connection's task) and `apply` (on `Set::apply`
//! and `Get::apply`, one per command); its events: `debug!(?cmd)` per request in `run`,
//! `debug!(?response)` in each `apply`. Counts are the program's: one `apply` span of each command
//! per request of its kind, and one event each.

mod common;

use std::collections::HashMap;
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

#[test]
fn mini_redis_spans_events_and_functions_in_one_trace() {
    let dir = scratch("mini_redis");
    let path = record_mini_redis(&dir);
    let input = path.to_str().unwrap();
    let trace = Trace::open(&path).unwrap();
    assert!(trace.warnings().is_empty(), "{:?}", trace.warnings());

    // Per thread, with the stack of open frames: which `apply` span (by function id: one per
    // callsite) each database call and each event ran in.
    let mut apply_entries = 0u64;
    let mut run_entries = 0u64;
    // (apply function id, what ran inside) → count.
    let mut inside: HashMap<(u32, String), u64> = HashMap::new();
    let mut cmds = Vec::new();
    for &tid in trace.threads.keys() {
        let w = walk(&trace, tid);
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
                    let (desc, args) = tracepoints::decode(&trace, &e).unwrap();
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

    // Two `apply` spans (two callsites of one name): one per SET, its database call and its
    // response inside, the other per GET.
    let sets = SETS as u64;
    let mut per_apply: HashMap<u32, Vec<(String, u64)>> = HashMap::new();
    for ((apply, what), n) in inside {
        per_apply.entry(apply).or_default().push((what, n));
    }
    let mut kinds: Vec<Vec<(String, u64)>> = per_apply
        .into_values()
        .map(|mut v| {
            v.sort();
            v
        })
        .collect();
    kinds.sort();
    let mut get_responses: Vec<(String, u64)> = (0..SETS)
        .map(|i| (format!(r#"mini_redis::cmd::get Bulk(b"value{i}")"#), 1))
        .collect();
    get_responses.sort();
    assert_eq!(kinds.len(), 2, "{kinds:?}");
    assert_eq!(kinds[0][0], ("<mini_redis::db::Db>::get".to_string(), sets));
    assert_eq!(kinds[0][1..], get_responses[..]);
    assert_eq!(
        kinds[1],
        [
            ("<mini_redis::db::Db>::set".to_string(), sets),
            (r#"mini_redis::cmd::set Simple("OK")"#.to_string(), sets)
        ]
    );
    // Each `apply` is entered when polled and when dropped (`Instrumented` drops its future
    // inside the span); each connection's `run` at every poll of its task.
    assert!(apply_entries >= 4 * sets, "{apply_entries}");
    assert!(run_entries >= 2 * sets, "{run_entries}");
    // One `debug!(?cmd)` per request, in `run`.
    assert_eq!(cmds.len(), 2 * SETS, "{cmds:?}");
    assert_eq!(cmds.iter().filter(|c| c.starts_with("Set(")).count(), SETS);
    assert_eq!(cmds.iter().filter(|c| c.starts_with("Get(")).count(), SETS);

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
