//! An event whose field's `Debug` implementation records into the same thread's chunk (here by
//! entering a span; in mini-redis, an XRay-instrumented `Debug`): the layer writes an event's fields
//! straight into the chunk, and must move them out of it before running such code, or the nested
//! records land on the fields written so far. Read back, the nested span's entry and exit come
//! before the event, and the event's fields — those written before the `Debug` call and the text it
//! formatted — are whole.

use ferrotrace_reader::reader::{EventKind, Trace};
use ferrotrace_reader::tracepoints;
use tracing_subscriber::prelude::*;

/// Enters a span while it is formatted.
struct Noisy;

impl std::fmt::Debug for Noisy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let _inside = tracing::info_span!("inside_debug").entered();
        f.write_str("Noisy")
    }
}

#[test]
fn records_made_while_a_field_is_formatted_come_before_the_event_and_leave_its_fields_whole() {
    let dir =
        std::env::temp_dir().join(format!("ferrotrace-tracing-nested-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("nested.ferrotrace");
    let _ = std::fs::remove_file(&path);
    // The global default: `tracing` dispatches the span entered inside the event's dispatch to it.
    tracing::subscriber::set_global_default(
        tracing_subscriber::registry().with(ferrotrace_tracing::FerrotraceLayer::new()),
    )
    .unwrap();
    let guard = ferrotrace_tracing::record_to_file(&path).unwrap();
    for i in 0..3u64 {
        tracing::info!(n = i, value = ?Noisy, who = "after", "static message");
    }
    drop(guard);

    let trace = Trace::open(&path).unwrap();
    assert!(trace.warnings().is_empty(), "{:?}", trace.warnings());
    let inside = trace
        .functions()
        .values()
        .find(|f| f.mangled == "inside_debug")
        .expect("the span entered inside Debug")
        .id;
    let lines: Vec<String> = trace
        .events()
        .unwrap()
        .map(Result::unwrap)
        .map(|e| match e.kind {
            EventKind::Entry => format!("> {}", e.id),
            EventKind::Exit => format!("< {}", e.id),
            EventKind::Tracepoint => tracepoints::format_tracepoint(&trace, &e),
            other => panic!("unexpected {other:?}"),
        })
        .collect();
    let expected: Vec<String> = (0..3)
        .flat_map(|i| {
            [
                format!("> {inside}"),
                format!("< {inside}"),
                format!(
                    r#"INFO {}(message="static message", n={i}, value="Noisy", who="after")"#,
                    module_path!()
                ),
            ]
        })
        .collect();
    assert_eq!(lines, expected);
    std::fs::remove_dir_all(&dir).unwrap();
}
