//! Static tracepoints on real programs (`testprogs/tracepoints`): record, list, environment, concurrency,
//! live printing and USDT interop.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};

use common::*;
use ferrotrace_analysis::reader::{EventKind, Trace};
use ferrotrace_analysis::tracepoints::{decode, format_tracepoint, Value};

/// The text of every Tracepoint event, thread by thread, in order.
fn tracepoint_lines(t: &Trace) -> Vec<String> {
    let mut out = Vec::new();
    for &tid in t.threads.keys() {
        for e in t.thread_events(tid).expect("thread events") {
            let e = e.expect("event");
            if e.kind == EventKind::Tracepoint {
                out.push(format_tracepoint(t, &e));
            }
        }
    }
    out
}

fn expected_basic(n: u64, with_all_types: bool) -> Vec<String> {
    let mut v = Vec::new();
    for i in 0..n {
        v.push(format!(
            r#"tp_basic::vfs_open(path="/tmp/file{i}", flags={i})"#
        ));
        v.push(format!("tp_basic::net_recv conn={i} bytes={}", i * 100));
        if with_all_types {
            v.push(format!(
                r#"tp_basic::all_types(a={i}, b={}, c={}, d={}, e={}, f=b"\x{i:02x}\xffx", g=0.25, h={})"#,
                -(i as i16),
                -1_000_000_000_000 * i as i64,
                i as f64 + 0.5,
                i % 2 == 0,
                -(i as isize)
            ));
        }
    }
    v
}

#[test]
fn record_has_exactly_the_fired_tracepoints_with_their_arguments_in_order() {
    let dir = scratch("tp_record");
    let prog = testprog("tp_basic");
    let (out, trace) = record(
        &dir,
        &[
            "--trace",
            "vfs_*",
            "--trace",
            "net_*",
            "--trace",
            "tp_basic::all_*",
        ],
        &prog,
        &["6"],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let t = Trace::open(&trace).expect("open trace");
    assert!(t.end.is_some() && t.truncation.is_none());
    assert_eq!(t.tracepoints.len(), 4, "descriptors: {:?}", t.tracepoints);
    assert_eq!(tracepoint_lines(&t), expected_basic(6, true));
    // Function events are recorded alongside: tracepoints sit between the calls of `work`.
    let main_tid = *t.threads.keys().next().expect("a thread");
    let mut seq = Vec::new();
    for e in t.thread_events(main_tid).unwrap() {
        let e = e.unwrap();
        match e.kind {
            EventKind::Entry if t.function_name(e.id) == "tp_basic::work" => seq.push('w'),
            EventKind::Tracepoint => seq.push('t'),
            _ => {}
        }
    }
    assert_eq!(seq.iter().collect::<String>(), "tttw".repeat(6));
    // Typed values for exporters.
    let first = t
        .events()
        .unwrap()
        .map(|e| e.unwrap())
        .find(|e| e.kind == EventKind::Tracepoint)
        .unwrap();
    let (d, vals) = decode(&t, &first).unwrap();
    assert_eq!(d.name, "tp_basic::vfs_open");
    assert_eq!(
        vals.unwrap(),
        vec![
            ("path".into(), Value::Str("/tmp/file0".into())),
            ("flags".into(), Value::Unsigned(0))
        ]
    );
}

#[test]
fn disabled_tracepoints_record_nothing() {
    let dir = scratch("tp_disabled");
    let prog = testprog("tp_basic");
    let (out, trace) = record(&dir, &[], &prog, &["4"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let t = Trace::open(&trace).unwrap();
    assert!(tracepoint_lines(&t).is_empty());
    assert!(t.event_count() > 0, "function events are still recorded");
    // Only the selected ones fire.
    let (out, trace) = record(&dir, &["--trace", "net_recv"], &prog, &["3"]);
    assert!(out.status.success());
    let t = Trace::open(&trace).unwrap();
    let lines = tracepoint_lines(&t);
    assert_eq!(lines.len(), 3);
    assert!(lines.iter().all(|l| l.starts_with("tp_basic::net_recv ")));
}

#[test]
fn the_environment_alone_enables_tracepoints() {
    let dir = scratch("tp_env");
    let trace = dir.join("env.data");
    let out = Command::new(testprog("tp_basic"))
        .arg("2")
        .env("FERROTRACE_TRACE", "vfs_open,tp_basic::net_*")
        .env("FERROTRACE_OUTPUT", &trace)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let t = Trace::open(&trace).expect("the program wrote a trace by itself");
    assert_eq!(tracepoint_lines(&t), expected_basic(2, false));
}

#[test]
fn list_finds_every_tracepoint_and_function() {
    let prog = testprog("tp_basic");
    let out = ferrotrace()
        .arg("list")
        .arg("--json")
        .arg(&prog)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let tps = j["tracepoints"].as_array().unwrap();
    let mut names: Vec<&str> = tps.iter().map(|t| t["name"].as_str().unwrap()).collect();
    names.sort();
    assert_eq!(
        names,
        [
            "tp_basic::all_types",
            "tp_basic::net_recv",
            "tp_basic::quiet",
            "tp_basic::vfs_open"
        ]
    );
    let src =
        std::fs::read_to_string(repo().join("testprogs/tracepoints/src/bin/tp_basic.rs")).unwrap();
    for t in tps {
        let short = t["name"].as_str().unwrap().rsplit("::").next().unwrap();
        let line = src
            .lines()
            .position(|l| {
                l.contains(&format!("tracepoint!({short},"))
                    || l.contains(&format!("tracepoint!(pub(crate) {short},"))
            })
            .unwrap()
            + 1;
        assert_eq!(t["line"].as_u64(), Some(line as u64), "{short}");
        assert!(t["file"].as_str().unwrap().ends_with("tp_basic.rs"));
        assert!(
            !t["sites"].as_array().unwrap().is_empty(),
            "{short} has a site"
        );
    }
    let vfs = tps
        .iter()
        .find(|t| t["name"] == "tp_basic::vfs_open")
        .unwrap();
    assert_eq!(
        vfs["args"],
        serde_json::json!([{"name": "path", "type": "str"}, {"name": "flags", "type": "u32"}])
    );
    let net = tps
        .iter()
        .find(|t| t["name"] == "tp_basic::net_recv")
        .unwrap();
    assert_eq!(net["format"], "conn={conn} bytes={bytes}");
    let fns: Vec<&str> = j["functions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["name"].as_str().unwrap())
        .collect();
    assert!(
        fns.contains(&"tp_basic::work") && fns.contains(&"tp_basic::main"),
        "{fns:?}"
    );
    assert!(
        !fns.iter().any(|f| f.contains("ferrotrace")),
        "the tracer's own functions are not listed"
    );
    // Text form.
    let out = ferrotrace().arg("list").arg(&prog).output().unwrap();
    let s = text(&out.stdout);
    assert!(
        s.contains("tp_basic::vfs_open(path: &str, flags: u32)"),
        "{s}"
    );
}

#[test]
fn toggling_a_site_while_four_threads_run_through_it_is_safe() {
    let dir = scratch("tp_stress");
    let prog = testprog("tp_stress");
    let (out, trace) = record(&dir, &["--trace", "stress"], &prog, &["3000"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("toggles=3000"));
    let t = Trace::open(&trace).unwrap();
    assert!(t.end.is_some() && t.truncation.is_none());
    let stress_id = t
        .tracepoints
        .values()
        .find(|d| d.name == "tp_stress::stress")
        .unwrap()
        .id;
    let mut total = 0;
    for &tid in t.threads.keys() {
        let mut last: Option<(u64, u64)> = None;
        for e in t.thread_events(tid).unwrap() {
            let e = e.unwrap();
            if e.kind != EventKind::Tracepoint {
                continue;
            }
            assert_eq!(e.id, stress_id);
            let (_, vals) = decode(&t, &e).unwrap();
            let vals = vals.expect("well-formed payload");
            let [(_, Value::Unsigned(th)), (_, Value::Unsigned(seq)), (_, Value::Unsigned(check))] =
                vals.as_slice()
            else {
                panic!("unexpected values {vals:?}")
            };
            assert_eq!(*check, seq * 7 + th, "payload intact");
            if let Some((lt, ls)) = last {
                assert_eq!(lt, *th, "one worker per OS thread");
                assert!(*seq > ls, "in order");
            }
            last = Some((*th, *seq));
            total += 1;
        }
    }
    assert!(total > 0, "some events were recorded");
}

#[test]
fn bpftrace_attaches_to_the_usdt_probe_and_reads_arguments() {
    let bpftrace = std::path::Path::new("/usr/bin/bpftrace");
    // SAFETY: geteuid has no preconditions.
    if !bpftrace.exists() || unsafe { libc_geteuid() } != 0 {
        eprintln!("skipped: needs /usr/bin/bpftrace and root");
        return;
    }
    let dir = scratch("tp_usdt");
    let prog = testprog("tp_basic");
    let p = prog.display().to_string();
    let script = format!(
        "usdt:{p}:tp_basic:vfs_open {{ printf(\"open %s %d\\n\", str(arg0), arg1); }} \
         usdt:{p}:tp_basic:net_recv {{ printf(\"recv %d %d\\n\", arg0, arg1); }}"
    );
    let out = Command::new(bpftrace)
        .arg("-e")
        .arg(&script)
        .arg("-c")
        .arg(format!("{p} 3"))
        .env("FERROTRACE_TRACE", "vfs_open,net_recv")
        .env("FERROTRACE_OUTPUT", dir.join("usdt.data"))
        .current_dir(&dir)
        .output()
        .unwrap();
    let s = text(&out.stdout);
    for i in 0..3 {
        assert!(
            s.contains(&format!("open /tmp/file{i} {i}\n")),
            "{s}\n{}",
            text(&out.stderr)
        );
        assert!(s.contains(&format!("recv {i} {}\n", i * 100)), "{s}");
    }
}

extern "C" {
    #[link_name = "geteuid"]
    fn libc_geteuid() -> u32;
}

#[test]
fn live_prints_events_while_the_program_runs() {
    let prog = testprog("tp_live");
    let mut child = ferrotrace()
        .args([
            "live", "--trace", "hello", "--trace", "bye", "-F", "greet", "--",
        ])
        .arg(&prog)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut seen = Vec::new();
    // The program waits for its stdin to close: everything up to here was printed while it ran.
    while seen
        .iter()
        .filter(|l: &&String| l.contains("tp_live::hello "))
        .count()
        < 3
    {
        match lines.next() {
            Some(Ok(l)) => seen.push(l),
            _ => panic!("live ended early; got {seen:?}"),
        }
    }
    assert!(
        child.try_wait().unwrap().is_none(),
        "the program is still running"
    );
    let hello: Vec<&String> = seen
        .iter()
        .filter(|l| l.contains("tp_live::hello"))
        .collect();
    for (n, l) in hello.iter().enumerate() {
        assert!(
            l.ends_with(&format!("tp_live::hello hello number {}", n + 1)),
            "{l}"
        );
        assert!(l.contains(" tp_live "), "thread name in {l}");
    }
    assert!(
        seen.iter().any(|l| l.contains("tp_live::greet")),
        "function entries with -F: {seen:?}"
    );
    let _ = stdin.write_all(b"go\n");
    drop(stdin);
    let rest: Vec<String> = lines.map(|l| l.unwrap()).collect();
    assert!(
        rest.iter().any(|l| l.ends_with("tp_live::bye(n=99)")),
        "{rest:?}"
    );
    assert!(child.wait().unwrap().success());
}

#[test]
fn a_slow_reader_never_stalls_the_program_and_live_counts_what_it_lost() {
    let prog = testprog("tp_basic");
    let ft = env!("CARGO_BIN_EXE_ferrotrace");
    // Nobody reads for a second while the program fires 200000 events: the pipe fills up.
    let out = Command::new("bash")
        .arg("-c")
        .arg(format!(
            "'{ft}' live --trace net_recv -- '{}' 200000 | (sleep 1; cat)",
            prog.display()
        ))
        .env("FERROTRACE_PRELOAD", preload())
        .output()
        .unwrap();
    let s = text(&out.stdout);
    assert!(s.contains("fired=800000"), "the program ran to the end");
    let printed = s
        .lines()
        .filter(|l| l.contains("tp_basic::net_recv conn="))
        .count() as u64;
    let lost: u64 = s
        .lines()
        .filter_map(|l| l.split("lost ").nth(1))
        .filter_map(|r| r.split_whitespace().next()?.parse::<u64>().ok())
        .sum();
    assert!(
        lost > 0,
        "a slow reader loses events: {}",
        &s[s.len().saturating_sub(500)..]
    );
    assert_eq!(
        printed + lost,
        200000,
        "every event is printed or counted as lost"
    );
}

#[test]
fn tracepoints_appear_in_replay_report_and_exports_with_their_arguments() {
    let dir = scratch("tp_analysis");
    let (out, trace) = record(
        &dir,
        &["--trace", "vfs_*", "--trace", "net_*"],
        &testprog("tp_basic"),
        &["3"],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let run = |args: &[&str]| ok(ft(&[args, &["-i", trace.to_str().unwrap()]].concat()));
    let replay = run(&["replay"]);
    for i in 0..3 {
        let call = format!(r#"/* tp_basic::vfs_open(path="/tmp/file{i}", flags={i}) */"#);
        assert!(
            replay.contains(&call),
            "replay shows {call} in place:\n{replay}"
        );
    }
    let report = run(&["report"]);
    let counted = |name: &str| {
        report
            .lines()
            .any(|l| l.split_whitespace().collect::<Vec<_>>() == ["3", name])
    };
    assert!(
        counted("tp_basic::vfs_open") && counted("tp_basic::net_recv"),
        "{report}"
    );
    let json: serde_json::Value = serde_json::from_str(&run(&["report", "--json"])).unwrap();
    assert!(json["tracepoints"]
        .as_array()
        .unwrap()
        .contains(&serde_json::json!({"name": "tp_basic::vfs_open", "count": 3})));

    let chrome = dir.join("t.json");
    run(&["dump", "--format", "chrome", "-o", chrome.to_str().unwrap()]);
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&chrome).unwrap()).unwrap();
    let instants: Vec<&serde_json::Value> = doc["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["ph"] == "i" && e["name"] == "tp_basic::vfs_open")
        .collect();
    assert_eq!(instants.len(), 3);
    assert_eq!(
        instants[2]["args"],
        serde_json::json!({"path": "/tmp/file2", "flags": 2})
    );

    let perfetto = dir.join("t.pb");
    run(&[
        "dump",
        "--format",
        "perfetto",
        "--uncompressed",
        "-o",
        perfetto.to_str().unwrap(),
    ]);
    let decoded = protoc_decode(&std::fs::read(&perfetto).unwrap(), &dir);
    assert_eq!(
        decoded.matches("name: \"tp_basic::net_recv\"").count(),
        3,
        "{decoded}"
    );
    assert!(
        decoded.contains("string_value: \"/tmp/file1\""),
        "arguments as debug annotations"
    );
    assert!(decoded.contains("name: \"bytes\"") && decoded.contains("uint_value: 200"));
}

#[test]
fn tracepoints_toggled_while_libraries_are_loaded_and_patched() {
    // Two threads patch code at once: one toggles a tracepoint, the other dlopens libraries whose sleds
    // the runtime patches. Both go through the one text patcher, so neither restores a page's
    // protection in the middle of the other's writes (a fault), and both sets of patches hold.
    let dir = scratch("tp_dlopen");
    let (out, trace) = record(
        &dir,
        &["--trace", "tick"],
        &testprog("tp_dlopen"),
        &["300", dir.to_str().unwrap(), "8"],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).starts_with("toggles=300 libraries=8 "));
    let t = Trace::open(&trace).expect("trace");
    assert!(t.end.is_some());
    assert_eq!(nested_counts(&t, "ft_xlib::xlib_step"), (80, 80));
    let libs = t
        .modules
        .iter()
        .filter(|m| m.path.contains("libxlib"))
        .count();
    assert_eq!(libs, 8, "every copy found by a rescan");
    // The final `tick` fires after the toggler has left it enabled.
    let ticks = t
        .thread_events(t.session.pid)
        .unwrap()
        .filter(|e| e.as_ref().unwrap().kind == EventKind::Tracepoint)
        .count();
    assert!(ticks >= 1, "{ticks}");
}
