//! replay, report, graph, flame and dump on traces of real XRay-instrumented programs.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use common::*;
use serde_json::Value;

/// (trace, program stdout) of `calltree`, recorded once per test binary.
fn calltree() -> &'static (PathBuf, String) {
    static T: OnceLock<(PathBuf, String)> = OnceLock::new();
    T.get_or_init(|| {
        let dir = scratch("calltree");
        let (out, trace) = record(&dir, &[], &testprog("calltree"), &[]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        (trace, text(&out.stdout))
    })
}

fn fib() -> &'static (PathBuf, String) {
    static T: OnceLock<(PathBuf, String)> = OnceLock::new();
    T.get_or_init(|| {
        let dir = scratch("fib_analysis");
        let (out, trace) = record(&dir, &[], &testprog("fib"), &["15"]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        (trace, text(&out.stdout))
    })
}

fn count(stdout: &str, key: &str) -> u64 {
    stdout
        .split_whitespace()
        .find_map(|w| w.strip_prefix(&format!("{key}=")))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no {key}= in {stdout}"))
}

fn p(path: &Path) -> &str {
    path.to_str().expect("utf-8 path")
}

#[test]
fn replay_shows_the_known_call_tree_exactly() {
    let (trace, _) = calltree();
    let out = ok(ft(&[
        "replay",
        "-i",
        p(trace),
        "-F",
        "^calltree::(run|after_panic)$",
        "-f",
        "none",
    ]));
    assert_eq!(
        out,
        "# FUNCTION
| calltree::run() {
|   calltree::a() {
|     calltree::b();
|   } /* calltree::a */
|   calltree::b();
|   calltree::c();
| } /* calltree::run */
| calltree::after_panic();
"
    );
}

#[test]
fn replay_marks_frames_unwound_by_a_caught_panic() {
    let (trace, _) = calltree();
    let out = ok(ft(&[
        "replay",
        "-i",
        p(trace),
        "-F",
        "^calltree::catcher$",
        "-N",
        "^(__rustc|alloc)::",
        "-f",
        "none",
    ]));
    assert_eq!(
        out,
        "# FUNCTION
| calltree::catcher() {
|   calltree::boom() {
|     calltree::deeper() {
|     } /* calltree::deeper: unwound */
|   } /* calltree::boom: unwound */
| } /* calltree::catcher */
"
    );
}

#[test]
fn replay_closes_frames_left_open_by_process_exit() {
    let dir = scratch("calltree_exit");
    let (out, trace) = record(&dir, &[], &testprog("calltree"), &["exit"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = ok(ft(&[
        "replay",
        "-i",
        p(&trace),
        "-F",
        "run_and_exit",
        "-f",
        "none",
    ]));
    assert_eq!(
        out,
        "# FUNCTION
| calltree::run_and_exit() {
|   calltree::a() {
|     calltree::b();
|   } /* calltree::a */
|   calltree::exit_now() {
|   } /* calltree::exit_now: still running at end of trace */
| } /* calltree::run_and_exit: still running at end of trace */
"
    );
}

#[test]
fn replay_filters_depth_duration_thread_and_fields() {
    let (trace, _) = calltree();
    // Depth 1 below run: its children only, folded to one line each.
    let out = ok(ft(&[
        "replay",
        "-i",
        p(trace),
        "-F",
        "^calltree::run$",
        "-D",
        "2",
        "-f",
        "none",
    ]));
    assert_eq!(
        out,
        "# FUNCTION\n| calltree::run() {\n|   calltree::a();\n|   calltree::b();\n|   calltree::c();\n| } /* calltree::run */\n"
    );
    // -N hides a function and its subtree.
    let out = ok(ft(&[
        "replay",
        "-i",
        p(trace),
        "-F",
        "^calltree::run$",
        "-N",
        "^calltree::a$",
        "-f",
        "none",
    ]));
    assert!(!out.contains("calltree::a"), "{out}");
    assert_eq!(out.matches("calltree::b();").count(), 1, "{out}");
    // A huge -t hides everything; the header stays.
    let out = ok(ft(&["replay", "-i", p(trace), "-t", "100s"]));
    assert_eq!(out.lines().count(), 1, "{out}");
    // --tid: only the worker thread, which holds all 1000 steps.
    let t = ferrotrace_analysis::reader::Trace::open(trace).unwrap();
    let worker = t
        .threads()
        .values()
        .find(|t| t.name == "worker")
        .expect("worker thread")
        .tid;
    let out = ok(ft(&[
        "replay",
        "-i",
        p(trace),
        "--tid",
        &worker.to_string(),
    ]));
    assert_eq!(out.matches("calltree::worker_step();").count(), 1000);
    assert!(out
        .lines()
        .skip(1)
        .all(|l| l.contains(&format!("[{worker:>6}]"))));
    // Fields: time, elapsed and delta columns come first, in that order.
    let out = ok(ft(&[
        "replay",
        "-i",
        p(trace),
        "-f",
        "time,elapsed,delta,duration,tid",
        "-D",
        "1",
    ]));
    let first = out.lines().nth(1).expect("a line");
    let cols: Vec<&str> = first.split_whitespace().collect();
    // The first event's elapsed time and delta are 0: blank, as uftrace prints a zero duration.
    let time_end = first.find(cols[0]).unwrap() + cols[0].len();
    assert!(
        cols[0].contains('.') && first[time_end..].starts_with(&" ".repeat(22)),
        "{first}"
    );
    // A time range in the future shows nothing but the header.
    let out = ok(ft(&["replay", "-i", p(trace), "--time-range", "1000s~"]));
    assert_eq!(out.lines().count(), 1, "{out}");
}

#[test]
fn unfiltered_replay_equals_the_general_replayer() {
    // Without filters replay takes a fast path that decides leaf calls by peeking at the thread's next
    // event; it must print exactly what the general (look-ahead queue) replayer prints.
    use ferrotrace_analysis::replay::{replay_reference, replay_to_string, Fields, Options};
    let dir = scratch("calltree_exit_plain");
    let (out, exiting) = record(&dir, &[], &testprog("calltree"), &["exit"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    for trace in [&calltree().0, &fib().0, &exiting] {
        let t = ferrotrace_analysis::reader::Trace::open(trace).unwrap();
        for fields in [
            "duration,tid",
            "none",
            "time,elapsed,delta,duration,tid",
            "delta",
        ] {
            let opts = Options {
                fields: Fields::parse(fields).unwrap(),
                ..Options::default()
            };
            let mut reference = Vec::new();
            replay_reference(&t, &opts, &mut reference).unwrap();
            let fast = replay_to_string(&t, &opts).unwrap();
            assert!(fast.lines().count() > 10, "{fast}");
            assert_eq!(fast, text(&reference), "{} with -f {fields}", p(trace));
        }
    }
}

#[test]
fn report_counts_match_the_programs_own_counts() {
    let (trace, stdout) = calltree();
    let by_calls = |jobs: &str| -> Value {
        let args = [
            "report",
            "-i",
            p(trace),
            "--json",
            "-s",
            "calls",
            "--jobs",
            jobs,
        ];
        serde_json::from_str(&ok(ft(&args))).unwrap()
    };
    let j = by_calls("1");
    // Decoding on a second thread gives the same report, to the nanosecond.
    assert_eq!(by_calls("2"), j);
    let calls = |name: &str| {
        j["functions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["name"] == name)
            .map_or(0, |f| f["calls"].as_u64().unwrap())
    };
    assert_eq!(calls("calltree::b"), count(stdout, "b"));
    assert_eq!(calls("calltree::c"), count(stdout, "c"));
    assert_eq!(calls("calltree::worker_step"), count(stdout, "steps"));
    assert_eq!(
        j["functions"][0]["name"], "calltree::worker_step",
        "sorted by calls"
    );
    let deeper = j["functions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["name"] == "calltree::deeper")
        .unwrap();
    assert_eq!(deeper["unwound"], 1);
    // Self time never exceeds total, min <= avg <= max.
    for f in j["functions"].as_array().unwrap() {
        let g = |k: &str| f[k].as_u64().unwrap();
        assert!(
            g("min_ns") <= g("avg_ns") && g("avg_ns") <= g("max_ns"),
            "{f}"
        );
        assert!(g("self_ns") <= g("total_ns"), "{f}");
    }
    // Per thread: worker_step only on the worker thread.
    let j: Value =
        serde_json::from_str(&ok(ft(&["report", "-i", p(trace), "--json", "--threads"]))).unwrap();
    let threads = j["threads"].as_array().unwrap();
    assert_eq!(threads.len(), 2);
    let with_steps: Vec<_> = threads
        .iter()
        .filter(|t| {
            t["functions"]
                .as_array()
                .unwrap()
                .iter()
                .any(|f| f["name"] == "calltree::worker_step")
        })
        .collect();
    assert_eq!(with_steps.len(), 1);
    assert_eq!(with_steps[0]["name"], "worker");
    // Recursion is counted once in total time: fib's total is at most its caller's.
    let (ftrace, fout) = fib();
    let j: Value = serde_json::from_str(&ok(ft(&["report", "-i", p(ftrace), "--json"]))).unwrap();
    let fns = j["functions"].as_array().unwrap();
    for f in fns {
        // Recursive frames too: self time is counted in every frame, total once per outermost call.
        assert!(f["self_ns"].as_u64() <= f["total_ns"].as_u64(), "{f}");
    }
    let get = |n: &str| fns.iter().find(|f| f["name"] == n).unwrap().clone();
    assert_eq!(
        get("fib::fib")["calls"].as_u64(),
        Some(count(fout, "calls"))
    );
    assert!(get("fib::fib")["total_ns"].as_u64() <= get("fib::main")["total_ns"].as_u64());
}

#[test]
fn report_text_diff_and_srcline() {
    let (trace, _) = calltree();
    let (ftrace, _) = fib();
    let out = ok(ft(&["report", "-i", p(trace), "--srcline"]));
    assert!(out.lines().next().unwrap().contains("Total time"));
    let line = out
        .lines()
        .find(|l| l.ends_with("calltree::b") || l.contains("calltree::b ["))
        .unwrap();
    assert!(line.contains("calltree.rs:"), "srcline from DWARF: {line}");
    let d: Value = serde_json::from_str(&ok(ft(&[
        "report",
        "-i",
        p(trace),
        "--diff",
        p(ftrace),
        "--json",
    ])))
    .unwrap();
    let rows = d["functions"].as_array().unwrap();
    let fib_row = rows.iter().find(|r| r["name"] == "fib::fib").unwrap();
    assert!(fib_row["base"].is_null() && fib_row["other"]["calls"].as_u64() > Some(0));
    assert_eq!(fib_row["diff"]["calls"], fib_row["other"]["calls"]);
    let b = rows.iter().find(|r| r["name"] == "calltree::b").unwrap();
    assert!(b["other"].is_null());
    let text_diff = ok(ft(&["report", "-i", p(trace), "--diff", p(trace)]));
    assert!(
        text_diff.contains("calltree::b") && text_diff.contains("+0"),
        "{text_diff}"
    );
}

#[test]
fn graph_aggregates_paths_with_counts() {
    let (trace, _) = calltree();
    let out = ok(ft(&["graph", "-i", p(trace), "^calltree::run$"]));
    let lines: Vec<&str> = out.lines().skip(2).collect();
    let shape: Vec<String> = lines
        .iter()
        .map(|l| l.split_once(" : ").unwrap().1.to_string())
        .collect();
    assert_eq!(
        shape,
        [
            "(1) calltree::run",
            " +-(1) calltree::a",
            " | +-(1) calltree::b",
            " +-(1) calltree::b",
            " +-(1) calltree::c"
        ]
    );
    let whole = ok(ft(&["graph", "-i", p(trace)]));
    assert!(whole.contains("(1000) calltree::worker_step"), "{whole}");
}

#[test]
fn flame_svg_has_the_hot_functions_and_folded_is_weighted_by_time() {
    let (trace, _) = fib();
    let dir = scratch("flame");
    let svg = dir.join("f.svg");
    ok(ft(&["flame", "-i", p(trace), "-o", p(&svg)]));
    let s = std::fs::read_to_string(&svg).unwrap();
    assert!(s.starts_with("<?xml") && s.contains("fib::fib") && s.contains("fib::main"));
    let folded = ok(ft(&["flame", "-i", p(trace), "--folded"]));
    let dump = ok(ft(&["dump", "-i", p(trace), "--format", "folded"]));
    assert_eq!(folded, dump);
    let total: u64 = folded
        .lines()
        .map(|l| l.rsplit_once(' ').unwrap().1.parse::<u64>().unwrap())
        .sum();
    let rep: Value = serde_json::from_str(&ok(ft(&["report", "-i", p(trace), "--json"]))).unwrap();
    let self_sum: u64 = rep["functions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["self_ns"].as_u64().unwrap())
        .sum();
    // Same self times, modulo per-path rounding of tick→ns conversion.
    assert!(total.abs_diff(self_sum) <= 1000, "{total} vs {self_sum}");
}

#[test]
fn uftrace_reads_the_dumped_directory() {
    // Single thread: uftrace's replay is byte-identical to ours.
    let (trace, _) = fib();
    let dir = scratch("uftrace_dump");
    let ud = dir.join("fib.uftrace");
    ok(ft(&[
        "dump",
        "-i",
        p(trace),
        "--format",
        "uftrace",
        "-o",
        p(&ud),
    ]));
    let theirs = Command::new("uftrace")
        .args(["replay", "-d"])
        .arg(&ud)
        .output()
        .unwrap();
    assert!(theirs.status.success(), "{}", text(&theirs.stderr));
    assert_eq!(text(&theirs.stdout), ok(ft(&["replay", "-i", p(trace)])));
    // Two threads, a panic and tail-free calls: same functions and call counts.
    let (trace, _) = calltree();
    let ud = dir.join("calltree.uftrace");
    ok(ft(&[
        "dump",
        "-i",
        p(trace),
        "--format",
        "uftrace",
        "-o",
        p(&ud),
    ]));
    let j: Value = serde_json::from_str(&ok(ft(&["report", "-i", p(trace), "--json"]))).unwrap();
    let mut ours: Vec<(String, u64)> = j["functions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["name"].as_str().unwrap().to_string(),
                f["calls"].as_u64().unwrap(),
            )
        })
        .collect();
    ours.sort();
    assert_eq!(uftrace_report_calls(&ud), ours);
}

#[test]
fn chrome_json_parses_with_balanced_begin_end() {
    let (trace, _) = calltree();
    let out = ok(ft(&["dump", "-i", p(trace), "--format", "chrome"]));
    let j: Value = serde_json::from_str(&out).expect("valid JSON");
    let mut depth: std::collections::HashMap<u64, i64> = Default::default();
    let mut begins = 0;
    for e in j["traceEvents"].as_array().unwrap() {
        let d = depth.entry(e["tid"].as_u64().unwrap()).or_default();
        match e["ph"].as_str().unwrap() {
            "B" => {
                *d += 1;
                begins += 1;
            }
            "E" => {
                *d -= 1;
                assert!(*d >= 0, "E without B: {e}");
            }
            _ => {}
        }
    }
    assert!(depth.values().all(|&d| d == 0), "{depth:?}");
    let t = ferrotrace_analysis::reader::Trace::open(trace).unwrap();
    let entries: u64 = ferrotrace_analysis::info::Summary::of(&t)
        .unwrap()
        .threads
        .iter()
        .map(|t| t.entries)
        .sum();
    assert_eq!(begins, entries);
    assert!(out.contains("\"name\":\"calltree::worker_step\""));
}

fn varint(b: &[u8], pos: &mut usize) -> u64 {
    let mut v = 0;
    let mut shift = 0;
    loop {
        let x = b[*pos];
        *pos += 1;
        v |= ((x & 0x7f) as u64) << shift;
        if x & 0x80 == 0 {
            return v;
        }
        shift += 7;
    }
}

/// The inflated `compressed_packets` of a Perfetto file, concatenated (itself a serialized Trace).
fn inflate_batches(file: &[u8]) -> Vec<u8> {
    use std::io::Read;
    let mut all = Vec::new();
    let mut pos = 0;
    while pos < file.len() {
        assert_eq!(varint(file, &mut pos), 1 << 3 | 2, "Trace.packet");
        let len = varint(file, &mut pos) as usize;
        let pkt = &file[pos..pos + len];
        pos += len;
        let mut q = 0;
        assert_eq!(varint(pkt, &mut q), 50 << 3 | 2, "compressed_packets");
        let n = varint(pkt, &mut q) as usize;
        let mut z = flate2::read::ZlibDecoder::new(&pkt[q..q + n]);
        z.read_to_end(&mut all).unwrap();
    }
    all
}

#[test]
fn perfetto_decodes_with_protoc_and_is_balanced() {
    let (trace, _) = calltree();
    let dir = scratch("perfetto");
    let plain = dir.join("plain.pftrace");
    let packed = dir.join("packed.pftrace");
    ok(ft(&[
        "dump",
        "-i",
        p(trace),
        "--format",
        "perfetto",
        "--uncompressed",
        "-o",
        p(&plain),
    ]));
    ok(ft(&[
        "dump",
        "-i",
        p(trace),
        "--format",
        "perfetto",
        "-o",
        p(&packed),
    ]));
    let plain_bytes = std::fs::read(&plain).unwrap();
    let packed_bytes = std::fs::read(&packed).unwrap();
    assert!(
        packed_bytes.len() * 3 < plain_bytes.len(),
        "compression pays"
    );
    // The outer file of the compressed form decodes too, and inflates to the plain form.
    let outer = protoc_decode(&packed_bytes, &dir);
    assert!(outer.contains("compressed_packets:"));
    assert_eq!(inflate_batches(&packed_bytes), plain_bytes);
    let decoded = protoc_decode(&plain_bytes, &dir);
    let begins = decoded.matches("type: TYPE_SLICE_BEGIN").count();
    let ends = decoded.matches("type: TYPE_SLICE_END").count();
    let t = ferrotrace_analysis::reader::Trace::open(trace).unwrap();
    let entries: u64 = ferrotrace_analysis::info::Summary::of(&t)
        .unwrap()
        .threads
        .iter()
        .map(|t| t.entries)
        .sum();
    assert_eq!((begins as u64, ends as u64), (entries, entries));
    assert_eq!(decoded.matches("thread_name: \"worker\"").count(), 1);
    assert_eq!(
        decoded.matches("name: \"calltree::worker_step\"").count(),
        1,
        "interned once"
    );
    assert!(decoded.contains("is_incremental: true") && decoded.contains("timestamp_clock_id: 64"));
}

/// `record --mode flight --buffer-size 128K -- fib 27`, once per test binary: the ring keeps the
/// newest events, so the trace begins inside fib's recursion.
fn flight_fib() -> &'static PathBuf {
    static T: OnceLock<PathBuf> = OnceLock::new();
    T.get_or_init(|| {
        let dir = scratch("flight_fib");
        let (out, trace) = record(
            &dir,
            &["--mode", "flight", "--buffer-size", "128K"],
            &testprog("fib"),
            &["27"],
        );
        assert!(out.status.success(), "{}", text(&out.stderr));
        trace
    })
}

/// A flight trace begins inside fib's recursion: the frames already running when the ring begins
/// (`main` and a chain of `fib`s) contain everything after them. Each function's total counts its
/// recursion once, so `fib`'s never exceeds `main`'s, in `report` (one pass, the running frames found
/// at their exits) as in `graph` and `flame` (pre-scanned stacks). Issue 20.1: fib 10.3 ms under a
/// `main` of 3.4 ms.
#[test]
fn a_trace_that_begins_inside_a_recursion_counts_it_once() {
    let trace = flight_fib();
    let t = ferrotrace_analysis::reader::Trace::open(trace).unwrap();
    assert!(t.end().unwrap().dropped_events > 0, "the ring wrapped");
    let j: Value = serde_json::from_str(&ok(ft(&["report", "-i", p(trace), "--json"]))).unwrap();
    let fns = j["functions"].as_array().unwrap();
    let get = |n: &str| fns.iter().find(|f| f["name"] == n).unwrap().clone();
    let (fib, main) = (get("fib::fib"), get("fib::main"));
    assert!(
        fib["entered_before_trace"].as_u64().unwrap() > 1,
        "a chain of running fibs: {fib}"
    );
    let total = |f: &Value| f["total_ns"].as_u64().unwrap();
    assert!(total(&fib) <= total(&main), "fib {fib} under main {main}");
    // The longest fib frame is the outermost one, running from the first event: the total is that.
    assert_eq!(total(&fib), fib["max_ns"].as_u64().unwrap(), "{fib}");

    // graph: main's path, then the outermost fib below it, each no longer than its caller.
    let g = ok(ft(&["graph", "-i", p(trace), "fib::main"]));
    let ns = |l: &str| {
        let (v, unit) = l
            .split(" : ")
            .next()
            .unwrap()
            .trim()
            .split_once(' ')
            .unwrap();
        let mul = match unit {
            "ns" => 1.0,
            "us" => 1e3,
            "ms" => 1e6,
            _ => 1e9,
        };
        (v.parse::<f64>().unwrap() * mul) as u64
    };
    let lines: Vec<&str> = g.lines().filter(|l| l.contains(" : ")).collect();
    assert!(lines[0].ends_with("(1) fib::main"), "{g}");
    let outer_fib = lines
        .iter()
        .find(|l| l.ends_with(") fib::fib"))
        .expect("fib");
    assert!(ns(outer_fib) <= ns(lines[0]), "{g}");
    assert!(
        ns(lines[0]).abs_diff(total(&main)) <= total(&main) / 100,
        "{g}"
    );
    // flame: fib's paths weigh no more than main's.
    let folded = ok(ft(&["flame", "-i", p(trace), "--folded"]));
    let (mut under_main, mut under_fib) = (0u64, 0u64);
    for l in folded.lines() {
        let (path, w) = l.rsplit_once(' ').unwrap();
        let w: u64 = w.parse().unwrap();
        if path.contains("fib::main") {
            under_main += w;
        }
        if path.contains("fib::main;fib::fib") {
            under_fib += w;
        }
    }
    assert!(under_fib <= under_main && under_main > 0, "{folded}");
    assert!(
        under_main.abs_diff(total(&main)) <= total(&main) / 100,
        "flame's main {under_main} ns, report's {main}"
    );
}

/// `info` says what a flight ring overwrote (the End chunk's `dropped_events`), apart from what was
/// lost and what the file holds (issue 20.2: "0 lost" for a ring that overwrote millions).
#[test]
fn info_says_what_the_flight_ring_overwrote() {
    let trace = flight_fib();
    let t = ferrotrace_analysis::reader::Trace::open(trace).unwrap();
    let end = t.end().unwrap();
    assert!(end.dropped_events > 0 && end.dropped_chunks > 0);
    let j: Value = serde_json::from_str(&ok(ft(&["info", "--json", "-i", p(trace)]))).unwrap();
    assert_eq!(
        j["dropped_events"].as_u64(),
        Some(end.dropped_events),
        "{j}"
    );
    assert_eq!(
        j["dropped_chunks"].as_u64(),
        Some(end.dropped_chunks),
        "{j}"
    );
    assert_eq!(j["lost"].as_u64(), Some(0), "{j}");
    assert_eq!(
        j["events"].as_u64().unwrap() + j["markers"].as_u64().unwrap(),
        t.event_count()
    );
    let out = ok(ft(&["info", "-i", p(trace)]));
    let line = out.lines().find(|l| l.starts_with("events")).unwrap();
    assert_eq!(
        line,
        format!(
            "events       : {} recorded, 0 lost, {} overwritten to keep the newest (flight mode: {} chunks dropped)",
            j["events"],
            end.dropped_events,
            end.dropped_chunks
        )
    );
}

/// `uftrace info -d` of the uftrace export describes the run, as it does a run uftrace recorded: when
/// it was recorded (not when it was exported: the export is made a second later), its command line,
/// its exit status, how long it ran and its CPU time (which `record` got from `wait4`).
#[test]
fn uftrace_info_of_the_export_describes_the_run() {
    let dir = scratch("uftrace_info");
    let (out, trace) = record(&dir, &[], &testprog("fib"), &["25"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    std::thread::sleep(std::time::Duration::from_millis(1100));
    let ud = dir.join("fib.uftrace");
    ok(ft(&[
        "dump",
        "-i",
        p(&trace),
        "--format",
        "uftrace",
        "-o",
        p(&ud),
    ]));
    let info = Command::new("uftrace")
        .args(["info", "-d"])
        .arg(&ud)
        .output()
        .expect("uftrace (scripts/setup.sh installs it)");
    assert!(info.status.success(), "{}", text(&info.stderr));
    let info = text(&info.stdout);
    let field = |name: &str| {
        info.lines()
            .find_map(|l| l.strip_prefix(&format!("# {name:<20}: ")))
            .unwrap_or_else(|| panic!("no '{name}' in:\n{info}"))
            .to_string()
    };
    let t = ferrotrace_analysis::reader::Trace::open(&trace).unwrap();
    let start = t.session().start_realtime_ns / 1_000_000_000;
    let date = Command::new("date")
        .arg("-d")
        .arg(format!("@{start}"))
        .arg("+%a %b %e %H:%M:%S %Y")
        .output()
        .unwrap();
    assert_eq!(field("recorded on"), text(&date.stdout).trim(), "{info}");
    assert_eq!(
        field("cmdline"),
        format!("{} 25", testprog("fib").display()),
        "{info}"
    );
    assert_eq!(field("exit status"), "exited with code: 0", "{info}");
    let elapsed: f64 = field("elapsed time")
        .strip_suffix(" sec")
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        (elapsed * 1e9 - t.duration_ns() as f64).abs() < 1.0,
        "{elapsed} s against the trace's {} ns",
        t.duration_ns()
    );
    let cpu = field("cpu time");
    let (sys, user) = cpu
        .strip_suffix(" sec (sys / user)")
        .and_then(|c| c.split_once(" / "))
        .unwrap_or_else(|| panic!("{cpu}"));
    let user: f64 = user.parse().unwrap();
    let sys: f64 = sys.parse().unwrap();
    // fib(25) spins: it ran on the CPU, on at most two threads at once (the program's and the
    // collector's) while the trace ran, with the start-up before its first event besides.
    assert!(user > 0.0 && user + sys <= elapsed * 2.0 + 0.05, "{info}");
    assert!(
        field("program version").starts_with("ferrotrace "),
        "{info}"
    );
}
