//! `tracing` spans and events under `ferrotrace record`: testprogs/tracing-service (a tokio TCP service
//! whose synchronous `handle_request` span, with a `parse` span inside, is entered once per request,
//! and whose async `connection` span is entered at each poll on whichever worker polls it), built with
//! XRay sleds so that its functions and its spans interleave, recorded through the ferrotrace layer
//! into the trace of `record`, and answered by report, replay, flame and the exports. Counts are the
//! program's own: N requests, N spans, N events.

mod common;

use std::collections::HashMap;

use common::*;
use ferrotrace_analysis::reader::{EventKind, Trace, NO_MODULE};
use ferrotrace_analysis::tracepoints::{self, Value};

const REQUESTS: u64 = 40;

/// Records the service serving `REQUESTS` requests with `opts`; the trace, opened.
fn record_service(test: &str, opts: &[&str]) -> (std::path::PathBuf, Trace) {
    let dir = scratch(test);
    let (out, path) = record(&dir, opts, &tracing_service(), &[&REQUESTS.to_string()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout).trim(),
        format!("requests={REQUESTS} served={REQUESTS}")
    );
    // The layer's events are tracing's, not static tracepoints: --trace does not warn about them.
    assert!(
        !text(&out.stderr).contains("selects none"),
        "{}",
        text(&out.stderr)
    );
    let trace = Trace::open(&path).unwrap();
    assert!(trace.warnings().is_empty(), "{:?}", trace.warnings());
    (path, trace)
}

/// Per name, the entries of every thread, after checking that on each thread every span's exit
/// closes the frame its entry opened (no span is unwound by a function's exit, nor a function by a
/// span's).
fn entries_nested(trace: &Trace) -> HashMap<String, u64> {
    let mut all: HashMap<String, u64> = HashMap::new();
    for &tid in trace.threads().keys() {
        let w = walk(trace, tid);
        assert!(w.unwound.is_empty(), "thread {tid} unwound {:?}", w.unwound);
        assert!(
            w.preexisting.is_empty(),
            "thread {tid}: exits without entries {:?}",
            w.preexisting
        );
        for (name, n) in w.entries {
            *all.entry(name).or_default() += n;
        }
    }
    all
}

#[test]
fn spans_are_functions_and_events_are_tracepoints_in_records_trace() {
    let (path, trace) = record_service("tracing_record", &["--trace", "ft_tracing_service"]);
    let input = path.to_str().unwrap();
    assert!(trace.session().sources & ferrotrace_core::schema::source::TRACING != 0);
    for span in ["handle_request", "parse", "connection"] {
        let f: Vec<_> = trace
            .functions()
            .values()
            .filter(|f| f.mangled == span)
            .collect();
        assert_eq!(f.len(), 1, "{span}");
        assert_eq!(f[0].module, NO_MODULE);
    }
    let entries = entries_nested(&trace);
    assert_eq!(entries["handle_request"], REQUESTS);
    assert_eq!(entries["parse"], REQUESTS);
    assert_eq!(entries["ft_tracing_service::handle_request"], REQUESTS);
    assert_eq!(entries["ft_tracing_service::checksum"], REQUESTS);
    // The async span: entered at each poll of the connection task (at least once per request).
    assert!(
        entries["connection"] > REQUESTS,
        "{}",
        entries["connection"]
    );
    // tracing's own functions are not traced in a program that records spans.
    assert!(
        !trace
            .functions()
            .values()
            .any(|f| f.name().starts_with("<tracing::span::Span>::enter")),
        "Span::enter traced"
    );

    // Events: one `handled` per request, with its fields and level; span fields.
    let mut handled = Vec::new();
    let mut holding_message = 0;
    let mut span_fields = 0;
    for e in trace.events().unwrap() {
        let e = e.unwrap();
        if e.kind != EventKind::Tracepoint {
            continue;
        }
        let (desc, args) = tracepoints::decode(&trace, &e).unwrap();
        let args = args.unwrap();
        match desc.name.as_str() {
            "ft_tracing_service" => {
                handled.push(args);
                // Its first tagged value: the message's (index 0, written 1) or `id`'s.
                holding_message += (e.payload.first() == Some(&1)) as u64;
            }
            "handle_request" => span_fields += 1,
            _ => {}
        }
    }
    assert_eq!(handled.len() as u64, REQUESTS);
    // The literal message is in the trace once (CallsiteMessages), left out of every event but the
    // one that registered it; every command below shows it in each.
    let desc = trace
        .tracepoints()
        .values()
        .find(|d| d.name == "ft_tracing_service" && d.level == Some("INFO"))
        .unwrap();
    assert_eq!(desc.message, Some((0, "handled".to_string())));
    assert_eq!(holding_message, 1);
    for (i, args) in handled.iter().enumerate() {
        assert_eq!(args[0], ("level".into(), Value::Str("INFO".into())));
        assert_eq!(args[1], ("message".into(), Value::Str("handled".into())));
        assert_eq!(args[2], ("id".into(), Value::Unsigned(i as u64)));
        assert_eq!(args[3], ("status".into(), Value::Unsigned(200)));
    }
    // At creation (conn) and when `id` is recorded.
    assert_eq!(span_fields, 2 * REQUESTS);

    // report: spans in the function table, events in the tracepoint table.
    let report = ok(ft(&["report", "-i", input]));
    let row = |name: &str| {
        report
            .lines()
            .find(|l| l.ends_with(&format!("  {name}")))
            .unwrap_or_else(|| panic!("no row {name} in\n{report}"))
            .to_string()
    };
    let calls = |row: String| row.split_whitespace().nth(4).unwrap().to_string();
    assert_eq!(calls(row("handle_request")), REQUESTS.to_string());
    assert_eq!(calls(row("parse")), REQUESTS.to_string());
    assert!(
        report.contains(&format!("{REQUESTS:>12}  ft_tracing_service\n")),
        "{report}"
    );

    // replay: one request (the sixth: the first ones also set up thread-local state), in order,
    // the span inside the function that entered it.
    let replay = ok(ft(&[
        "replay",
        "-i",
        input,
        "-F",
        "^ft_tracing_service::handle_request$",
        "-N",
        "^__rustc::|^<str>::",
        "-f",
        "none",
    ]));
    let lines: Vec<&str> = replay.lines().map(|l| l.trim_start_matches("| ")).collect();
    let at = lines
        .iter()
        .position(|l| l.contains("handle_request(id=5)"))
        .unwrap_or_else(|| panic!("{replay}"));
    assert_eq!(
        lines[at - 4..at + 5],
        [
            "ft_tracing_service::handle_request() {",
            "  /* INFO handle_request(conn=1) */",
            "  handle_request() {",
            "    parse();",
            "    /* INFO handle_request(id=5) */",
            "    ft_tracing_service::checksum();",
            r#"    /* INFO ft_tracing_service(message="handled", id=5, status=200, bytes=13) */"#,
            "  } /* handle_request */",
            "} /* ft_tracing_service::handle_request */",
        ],
        "{replay}"
    );

    // flame: the span between the function and its callees.
    let folded = ok(ft(&["dump", "-i", input, "--format", "folded"]));
    let through_span = folded
        .lines()
        .filter(|l| l.contains("ft_tracing_service::handle_request;handle_request;parse"))
        .count();
    assert!(through_span > 0, "{folded}");
    let dir = path.parent().unwrap();
    let svg = dir.join("flame.svg");
    ok(ft(&["flame", "-i", input, "-o", svg.to_str().unwrap()]));
    assert!(std::fs::read_to_string(&svg)
        .unwrap()
        .contains("handle_request"));

    // Chrome trace events: a slice per span entry, an instant per event with its fields.
    let chrome = ok(ft(&["dump", "-i", input, "--format", "chrome"]));
    let json: serde_json::Value = serde_json::from_str(&chrome).unwrap();
    let events = json["traceEvents"].as_array().unwrap();
    let begins = events
        .iter()
        .filter(|e| e["ph"] == "B" && e["name"] == "handle_request")
        .count();
    assert_eq!(begins as u64, REQUESTS);
    let instant = events
        .iter()
        .find(|e| e["ph"] == "i" && e["name"] == "ft_tracing_service")
        .unwrap();
    assert_eq!(instant["args"]["level"], "INFO");
    assert_eq!(instant["args"]["status"], 200);
    let with_message = events
        .iter()
        .filter(|e| e["ph"] == "i" && e["args"]["message"] == "handled")
        .count();
    assert_eq!(with_message as u64, REQUESTS);

    // Perfetto and Parquet are written (their content: tests/exports.rs, tests/viewers.rs).
    for (format, out) in [("perfetto", "t.perfetto-trace"), ("parquet", "t.parquet")] {
        let out = dir.join(out);
        ok(ft(&[
            "dump",
            "-i",
            input,
            "--format",
            format,
            "-o",
            out.to_str().unwrap(),
        ]));
        assert!(out.exists());
    }
    // Parquet: every `handled` event's fields hold the message.
    let events = dir.join("t.parquet").join("events.parquet");
    let count = duckdb(&format!(
        "import duckdb\nprint(duckdb.sql(\"select count(*) from read_parquet('{}') \
         where name = 'ft_tracing_service' and json_extract_string(fields, '$.message') = 'handled'\").fetchall()[0][0])",
        events.to_str().unwrap()
    ));
    assert_eq!(count.trim(), REQUESTS.to_string());
}

#[test]
fn record_filters_select_spans_by_name_and_events_by_glob() {
    // -F: the span's subtree only (its own name, not the function's); no --trace: no events.
    let (_, trace) = record_service("tracing_filter", &["-F", "^handle_request$"]);
    let entries = entries_nested(&trace);
    assert_eq!(entries["handle_request"], REQUESTS);
    assert_eq!(entries["parse"], REQUESTS);
    assert_eq!(entries["ft_tracing_service::checksum"], REQUESTS);
    // What encloses the span, and the connection's polls, are left out.
    assert!(!entries.contains_key("ft_tracing_service::handle_request"));
    assert!(!entries.contains_key("connection"));
    let handled = trace
        .tracepoints()
        .values()
        .any(|d| d.name == "ft_tracing_service");
    assert!(!handled, "an event recorded without --trace");
}

#[test]
fn live_prints_spans_and_events_by_name_as_they_happen() {
    let out = ferrotrace()
        .args([
            "live",
            "--trace",
            "ft_tracing_service",
            "-F",
            "^handle_request$",
            "--",
        ])
        .arg(tracing_service())
        .arg(REQUESTS.to_string())
        .output()
        .unwrap();
    let printed = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let count = |what: &str| printed.lines().filter(|l| l.ends_with(what)).count() as u64;
    assert_eq!(count(" handle_request() {"), REQUESTS, "{printed}");
    assert_eq!(count("} /* handle_request */"), REQUESTS, "{printed}");
    let handled = printed
        .lines()
        .filter(|l| l.contains(r#"  INFO ft_tracing_service(message="handled", id="#))
        .count() as u64;
    assert_eq!(handled, REQUESTS, "{printed}");
    // Only what -F names (each alone): not the parse span inside.
    assert!(!printed.contains("parse"), "{printed}");
}

/// A program that records its `tracing` spans through ferrotrace-tracing but has no sleds is
/// recordable: `record -- ./prog` was refused ("not instrumented"), although `record --trace` of the
/// same program worked. Its spans are its functions.
#[test]
fn a_program_with_the_layer_and_no_sleds_is_recorded() {
    let dir = scratch("tracing_no_sleds");
    let prog = tracing_service_without_sleds();
    let (out, path) = record(&dir, &[], &prog, &[&REQUESTS.to_string()]);
    let err = text(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert_eq!(
        text(&out.stdout).trim(),
        format!("requests={REQUESTS} served={REQUESTS}")
    );
    assert!(!err.contains("instrumented"), "{err}");
    let trace = Trace::open(&path).unwrap();
    let entries = entries_nested(&trace);
    assert_eq!(entries["handle_request"], REQUESTS, "{entries:?}");
    assert_eq!(entries["parse"], REQUESTS, "{entries:?}");
    // No sled: no function of the program's own.
    assert!(
        !entries
            .keys()
            .any(|k| k.starts_with("ft_tracing_service::")),
        "{entries:?}"
    );
}
