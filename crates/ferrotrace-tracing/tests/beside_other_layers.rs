//! Beside another layer, through its per-layer filter ([`Recorded`]): while nothing records, the layer
//! wants no level for itself only: the other layer still gets every event, and `tracing`'s global
//! maximum level is the other layer's; once a recording runs, both get the events.

use std::sync::atomic::{AtomicU64, Ordering};

use ferrotrace_tracing::{FerrotraceLayer, Recorded};
use tracing::level_filters::LevelFilter;
use tracing_subscriber::prelude::*;

/// Events the other layer saw.
static SEEN: AtomicU64 = AtomicU64::new(0);

/// A layer with no opinion on levels (as `fmt::layer()`), counting the events it gets.
struct Counting;

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Counting {
    fn on_event(&self, _: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        SEEN.fetch_add(1, Ordering::Relaxed);
    }
}

#[test]
fn the_other_layer_keeps_its_events_while_nothing_records() {
    let dir =
        std::env::temp_dir().join(format!("ferrotrace-tracing-beside-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("beside.ferrotrace");
    tracing_subscriber::registry()
        .with(Counting)
        .with(FerrotraceLayer::new().with_filter(Recorded))
        .init();
    assert_eq!(LevelFilter::current(), LevelFilter::TRACE);
    tracing::debug!(n = 1u64, "not recording");
    assert_eq!(SEEN.load(Ordering::Relaxed), 1);

    let guard = ferrotrace_tracing::record_to_file(&path).unwrap();
    tracing::debug!(n = 2u64, "recording");
    drop(guard);
    tracing::debug!(n = 3u64, "not recording again");
    assert_eq!(SEEN.load(Ordering::Relaxed), 3);
    assert_eq!(LevelFilter::current(), LevelFilter::TRACE);

    let trace = ferrotrace_reader::reader::Trace::open(&path).unwrap();
    let ns: Vec<String> = trace
        .events()
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.kind == ferrotrace_reader::reader::EventKind::Tracepoint)
        .map(|e| ferrotrace_reader::tracepoints::format_tracepoint(&trace, &e))
        .collect();
    assert_eq!(ns.len(), 1, "{ns:?}");
    assert!(ns[0].contains("n=2"), "{ns:?}");
    let _ = std::fs::remove_dir_all(&dir);
}
