//! Everything on one timeline (issue 24): testprogs/tracing-service — a tokio TCP service whose
//! requests are `tracing` spans with events, built with XRay sleds and ferrotrace's allocator —
//! recorded by one `ferrotrace record --sample --alloc --trace` into one trace holding its functions,
//! its spans and events, perf_event samples and its allocations, and answered by every command. The
//! Perfetto export is decoded with Perfetto's own protos. Counts are the program's own: N requests,
//! N `handle_request` spans, N `handled` events, N `checksum` calls.

mod common;

use std::collections::HashMap;

use common::*;
use ferrotrace_analysis::reader::{EventKind, Trace};
use ferrotrace_core::schema::source;

const REQUESTS: u64 = 1000;

#[test]
fn functions_samples_spans_events_and_allocations_in_one_trace_answered_by_every_command() {
    let dir = scratch("one_timeline");
    let (out, path) = record(
        &dir,
        &[
            "--sample",
            "--call-graph",
            "dwarf",
            "--alloc",
            "--trace",
            "ft_tracing_service",
        ],
        &tracing_service(),
        &[&REQUESTS.to_string()],
    );
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(
        text(&out.stdout).trim(),
        format!("requests={REQUESTS} served={REQUESTS}")
    );
    assert!(stderr.contains("samples merged into the trace"), "{stderr}");

    // The trace: one file, every source, every check of the reader passed.
    let trace = Trace::open(&path).unwrap();
    assert!(trace.warnings().is_empty(), "{:?}", trace.warnings());
    let s = trace.session().sources;
    for (bit, what) in [
        (source::XRAY, "xray"),
        (source::ALLOCATIONS, "allocations"),
        (source::TRACING, "tracing"),
    ] {
        assert!(
            s & bit != 0,
            "{what} missing from the session's sources {s:#x}"
        );
    }
    assert_eq!(trace.samplers().len(), 1);
    let mut kinds: HashMap<EventKind, u64> = HashMap::new();
    let mut entries: HashMap<String, u64> = HashMap::new();
    let mut handled = 0;
    for e in trace.events().unwrap() {
        let e = e.unwrap();
        *kinds.entry(e.kind).or_default() += 1;
        if e.kind == EventKind::Entry {
            *entries.entry(trace.function_name(e.id)).or_default() += 1;
        }
        if e.kind == EventKind::Tracepoint
            && ferrotrace_analysis::tracepoints::format_payload(&trace, e.id, &e.payload)
                .contains("message=\"handled\"")
        {
            handled += 1;
        }
    }
    // Spans and functions, exactly one per request each; the events of the handler too.
    assert_eq!(entries["handle_request"], REQUESTS, "{entries:?}");
    assert_eq!(entries["ft_tracing_service::checksum"], REQUESTS);
    assert_eq!(handled, REQUESTS);
    // Samples and allocations in the same trace (how many samples: the CPU time it got).
    assert!(kinds.get(&EventKind::Sample) > Some(&0), "{kinds:?}");
    assert!(
        kinds.get(&EventKind::Alloc) > Some(&(REQUESTS)),
        "{kinds:?}"
    );
    assert!(kinds.get(&EventKind::Free) > Some(&0), "{kinds:?}");
    // On one clock: every thread's events, samples among them, in time order.
    for &tid in trace.threads().keys() {
        let mut last = 0;
        for e in trace.thread_events(tid).unwrap() {
            let e = e.unwrap();
            assert!(e.ts_ns >= last, "thread {tid}: {} after {last}", e.ts_ns);
            last = e.ts_ns;
        }
    }

    let p = path.to_str().unwrap();
    // report: the samples' table, then the functions' and spans' with a Sampled column.
    let report = ok(ft(&["report", "-i", p]));
    let table = report.split("Total time").nth(1).expect("function table");
    assert!(table.contains("Sampled"), "{report}");
    assert!(
        table.lines().any(|l| l.ends_with("  handle_request")),
        "{report}"
    );
    // replay: a span inside the function that entered it, its event inside it; samples and
    // allocations in place.
    let replay = ok(ft(&["replay", "-i", p, "-f", "none"]));
    assert!(replay.contains("handle_request() {"), "{replay}");
    assert!(replay.contains(r#"ft_tracing_service(message="handled", id=7,"#));
    assert!(
        replay.contains("/* sample cpu-clock:"),
        "no sample in the replay"
    );
    assert!(replay.contains("malloc("), "no allocation in the replay");
    // graph, flame by traced time and by samples, mem, info.
    let graph = ok(ft(&["graph", "-i", p, "handle_request"]));
    assert!(graph.contains("ft_tracing_service::checksum"), "{graph}");
    let by_time = ok(ft(&["flame", "-i", p, "--folded"]));
    assert!(
        by_time.contains("ft_tracing_service::handle_request;handle_request;"),
        "{by_time}"
    );
    let by_samples = ok(ft(&["flame", "-i", p, "--folded", "--samples"]));
    assert!(!by_samples.trim().is_empty());
    let mem = ok(ft(&["mem", "-i", p]));
    assert!(mem.starts_with("allocations: "), "{mem}");
    let info = ok(ft(&["info", "-i", p]));
    assert!(
        info.contains("recorded by  : xray, samples, allocations, tracing")
            && info.contains("samplers"),
        "{info}"
    );

    // One Perfetto view, decoded with Perfetto's protos: per-thread slices of functions and spans,
    // the `tracing` events as instants with their fields, callstack samples, the heap as a counter.
    let view = perfetto_view(&path, &dir);
    let kind = |v: &serde_json::Value, k: &str| v["kind"] == k;
    let span_slices = view
        .iter()
        .filter(|v| kind(v, "begin") && v["name"] == "handle_request")
        .count();
    assert_eq!(span_slices as u64, REQUESTS);
    let checksum_slices = view
        .iter()
        .filter(|v| kind(v, "begin") && v["name"] == "ft_tracing_service::checksum")
        .count();
    assert_eq!(checksum_slices as u64, REQUESTS);
    let handled: Vec<&serde_json::Value> = view
        .iter()
        .filter(|v| kind(v, "instant") && v["args"]["message"] == "handled")
        .collect();
    assert_eq!(handled.len() as u64, REQUESTS);
    assert!(handled.iter().all(|h| h["args"]["status"] == 200));
    assert!(view.iter().any(|v| kind(v, "sample")));
    assert!(view
        .iter()
        .any(|v| kind(v, "instant") && v["name"] == "malloc"));
    assert!(view
        .iter()
        .any(|v| kind(v, "counter") && v["counter"] == true && v["value"].as_f64() > Some(0.0)));
    // One time axis: the handler's instants fall inside its spans' slices on the same thread.
    let worker_tid = handled[0]["tid"].clone();
    let first_span = view
        .iter()
        .find(|v| kind(v, "begin") && v["name"] == "handle_request" && v["tid"] == worker_tid)
        .expect("a span slice on the handler's thread");
    assert!(first_span["ts"].as_u64() <= handled[0]["ts"].as_u64());
}
