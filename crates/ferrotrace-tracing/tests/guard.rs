//! The guard-to-file mode end to end: a program (this test) records its own `tracing` spans and
//! events into a file with `record_to_file`, drops the guard, and the trace read back by
//! `ferrotrace-reader` holds exactly what it did: every span entry and exit nested per thread (an
//! async-like span entered on two threads), span fields, events with their fields and level; and
//! nothing is recorded before the guard or after it.

use std::collections::HashMap;

use ferrotrace_reader::reader::{EventKind, Trace, NO_MODULE};
use ferrotrace_reader::tracepoints::{self, Value};
use tracing::level_filters::LevelFilter;
use tracing_subscriber::prelude::*;

#[test]
fn spans_and_events_recorded_to_a_file_of_its_own() {
    let dir = std::env::temp_dir().join(format!("ferrotrace-tracing-guard-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("guard.ferrotrace");
    let _ = std::fs::remove_file(&path);
    let subscriber =
        tracing_subscriber::registry().with(ferrotrace_tracing::FerrotraceLayer::new());
    tracing::subscriber::set_global_default(subscriber).unwrap();

    // Before the recording: no level is wanted, so a callsite met now is turned away by `tracing`'s
    // first check, as a level filter turns it away, and is never recorded.
    assert_eq!(LevelFilter::current(), LevelFilter::OFF);
    tracing::info!(when = "before", "not recorded");

    let guard = ferrotrace_tracing::record_to_file(&path).unwrap();
    assert_eq!(LevelFilter::current(), LevelFilter::TRACE);
    // A second recording at the same time is refused, with a reason.
    let again = ferrotrace_tracing::record_to_file(dir.join("second")).unwrap_err();
    assert!(again.to_string().contains("recording"), "{again}");

    const REQUESTS: u64 = 25;
    let mut warn_line = 0;
    for id in 0..REQUESTS {
        let request = tracing::info_span!("request", id, peer = "10.0.0.1");
        let _r = request.enter();
        {
            let _p = tracing::debug_span!("parse").entered();
            warn_line = line!() + 1;
            tracing::warn!(bytes = id * 10, ok = id % 2 == 0, ratio = 0.5, "parsed");
        }
        request.record("peer", "10.0.0.2");
    }
    // One span entered on two threads in turn, as an async task polled by two workers: each thread
    // nests its own entries and exits.
    let task = tracing::info_span!("task");
    task.in_scope(|| tracing::error!(n = -1i64, "first poll"));
    let moved = task.clone();
    std::thread::Builder::new()
        .name("worker".into())
        .spawn(move || moved.in_scope(|| tracing::error!(n = -2i64, "second poll")))
        .unwrap()
        .join()
        .unwrap();
    drop(task);
    drop(guard);
    assert_eq!(LevelFilter::current(), LevelFilter::OFF);

    // After the guard: recording stopped; these are not in the file.
    tracing::info!(when = "after", "not recorded");
    let _late = tracing::info_span!("request", id = 99u64, peer = "x").entered();

    let trace = Trace::open(&path).unwrap();
    assert!(trace.warnings().is_empty(), "{:?}", trace.warnings());
    assert_eq!(
        trace.end().unwrap().reason,
        ferrotrace_core::schema::EndReason::Stopped
    );
    let span_id = |name: &str| {
        let f: Vec<_> = trace
            .functions()
            .values()
            .filter(|f| f.mangled == name)
            .collect();
        assert_eq!(f.len(), 1, "{name}: {f:?}");
        assert_eq!(f[0].module, NO_MODULE);
        f[0].id
    };
    let (request, parse, task) = (span_id("request"), span_id("parse"), span_id("task"));

    let mut per_thread: HashMap<u32, Vec<String>> = HashMap::new();
    let mut entries: HashMap<u32, u64> = HashMap::new();
    let mut texts = Vec::new();
    for e in trace.events().unwrap() {
        let e = e.unwrap();
        let line = match e.kind {
            EventKind::Entry => {
                *entries.entry(e.id).or_default() += 1;
                format!("> {}", e.id)
            }
            EventKind::Exit => format!("< {}", e.id),
            EventKind::Tracepoint => {
                let text = tracepoints::format_tracepoint(&trace, &e);
                texts.push(text.clone());
                text
            }
            other => panic!("unexpected {other:?}"),
        };
        per_thread.entry(e.tid).or_default().push(line);
    }
    assert_eq!(entries[&request], REQUESTS);
    assert_eq!(entries[&parse], REQUESTS);
    assert_eq!(entries[&task], 2);
    assert_eq!(per_thread.len(), 2, "{per_thread:?}");
    // Nesting per thread: request > parse > event < parse, fields recorded inside request < request.
    let main = per_thread
        .values()
        .find(|l| l.len() > 10)
        .expect("the main thread's events");
    let first: Vec<&str> = main.iter().take(7).map(String::as_str).collect();
    assert_eq!(
        first,
        [
            r#"INFO request(id=0, peer="10.0.0.1")"#.to_string(),
            format!("> {request}"),
            format!("> {parse}"),
            r#"WARN main(message="parsed", bytes=0, ok=true, ratio=0.5)"#
                .replace("main", module_path!()),
            format!("< {parse}"),
            r#"INFO request(peer="10.0.0.2")"#.to_string(),
            format!("< {request}"),
        ]
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>()
    );
    let worker = per_thread.values().find(|l| l.len() < 10).unwrap();
    assert_eq!(
        worker,
        &[
            format!("> {task}"),
            format!("ERROR {}(message=\"second poll\", n=-2)", module_path!()),
            format!("< {task}")
        ]
    );
    assert!(!texts.iter().any(|t| t.contains("not recorded")));
    // Typed values for the exports.
    let warn = trace
        .tracepoints()
        .values()
        .find(|d| d.level == Some("WARN"))
        .unwrap();
    assert_eq!(warn.line, warn_line);
    let e = trace
        .events()
        .unwrap()
        .map(Result::unwrap)
        .find(|e| e.kind == EventKind::Tracepoint && e.id == warn.id)
        .unwrap();
    let args = warn.decode(&e.payload).unwrap();
    assert_eq!(args[0], ("level".into(), Value::Str("WARN".into())));
    assert_eq!(args[2], ("bytes".into(), Value::Unsigned(0)));
    // The literal message is in the trace once (a CallsiteMessages chunk) and left out of the
    // callsite's events but the first (which registered it): their first tagged value is `bytes`
    // (index 1, written as 2), not the message (index 0, written as 1); every one of them reads
    // with it, as checked above.
    assert_eq!(warn.message, Some((0, "parsed".to_string())));
    let firsts: Vec<u8> = trace
        .events()
        .unwrap()
        .map(Result::unwrap)
        .filter(|e| e.kind == EventKind::Tracepoint && e.id == warn.id)
        .map(|e| e.payload[0])
        .collect();
    assert_eq!(firsts.len() as u64, REQUESTS);
    assert_eq!(firsts.iter().filter(|&&i| i == 1).count(), 1, "{firsts:?}");
    assert!(texts
        .iter()
        .filter(|t| t.starts_with("WARN"))
        .all(|t| t.contains(r#"(message="parsed", bytes="#)));
    std::fs::remove_dir_all(&dir).unwrap();
}
