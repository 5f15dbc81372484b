//! Threads that meet a span's callsite for the first time at the same moment all record it.
//!
//! While one thread registers a callsite, `tracing` asks every other thread that reaches it whether
//! it is enabled (its interest is not cached yet). The layer's table does not hold the callsite
//! until its registration ends; answering "no" then would leave that span out of the trace for
//! every layer filtered by [`Recorded`] (once, in mini-redis's test, a connection's `run` span).
//! Here a second layer that is slow to register callsites (as one building filters may be) holds the
//! window open, so that the other threads reach each callsite while it registers.

use std::collections::HashMap;
use std::sync::{Arc, Barrier};
use std::time::Duration;

use ferrotrace_reader::reader::{EventKind, Trace};
use ferrotrace_tracing::{FerrotraceLayer, Recorded};
use tracing_core::subscriber::Interest;
use tracing_core::{Metadata, Subscriber};
use tracing_subscriber::layer::Layer;
use tracing_subscriber::prelude::*;

const THREADS: usize = 4;

/// How long [`SlowToRegister`] takes per callsite: the time the other threads have to meet it.
const REGISTERING: Duration = Duration::from_millis(40);

/// A layer that records nothing and takes [`REGISTERING`] to answer for a callsite.
struct SlowToRegister;

impl<S: Subscriber> Layer<S> for SlowToRegister {
    fn register_callsite(&self, _: &'static Metadata<'static>) -> Interest {
        std::thread::sleep(REGISTERING);
        Interest::always()
    }
}

/// One closure per name, each with a callsite of its own: a span of that name around an event.
macro_rules! first_uses {
    ($($name:ident)*) => {
        [$(|| tracing::info_span!(stringify!($name)).in_scope(|| tracing::info!("inside")),)*]
    };
}

#[test]
fn every_thread_records_a_span_met_by_all_at_once() {
    let dir = std::env::temp_dir().join(format!("ferrotrace-tracing-race-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("race.ferrotrace");
    let _ = std::fs::remove_file(&path);
    tracing_subscriber::registry()
        .with(FerrotraceLayer::new().with_filter(Recorded))
        .with(SlowToRegister)
        .init();
    let guard = ferrotrace_tracing::record_to_file(&path).unwrap();

    let spans: Arc<[fn()]> = Arc::new(first_uses!(
        s00 s01 s02 s03 s04 s05 s06 s07
    ));
    let start = Arc::new(Barrier::new(THREADS));
    let threads: Vec<_> = (0..THREADS)
        .map(|thread| {
            let (spans, start) = (spans.clone(), start.clone());
            std::thread::spawn(move || {
                for span in spans.iter() {
                    start.wait();
                    // Thread 0 registers; the others come while it does.
                    if thread > 0 {
                        std::thread::sleep(REGISTERING / 4);
                    }
                    span();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    drop(guard);

    let trace = Trace::open(&path).unwrap();
    assert!(trace.warnings().is_empty(), "{:?}", trace.warnings());
    let mut entries: HashMap<&str, usize> = HashMap::new();
    let mut events = 0;
    for e in trace.events().unwrap() {
        let e = e.unwrap();
        match e.kind {
            EventKind::Entry => {
                *entries
                    .entry(&trace.functions()[&e.id].mangled)
                    .or_default() += 1
            }
            EventKind::Tracepoint => events += 1,
            _ => {}
        }
    }
    let missed: Vec<_> = (0..spans.len())
        .map(|i| format!("s{i:02}"))
        .filter(|name| entries.get(name.as_str()) != Some(&THREADS))
        .map(|name| format!("{name}: {:?}", entries.get(name.as_str())))
        .collect();
    assert!(
        missed.is_empty(),
        "spans not entered on every thread: {missed:?}"
    );
    assert_eq!(events, spans.len() * THREADS);
    std::fs::remove_dir_all(&dir).unwrap();
}
