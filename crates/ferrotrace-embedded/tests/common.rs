//! Shared by the integration tests (each is its own process: the tracer is global, one per process).
#![allow(dead_code)]

use std::path::PathBuf;

use ferrotrace_embedded::{Program, Tracer};
use ferrotrace_reader::reader::{Event, Trace};

/// Memory for `slots` slots of about `records` records each with a shadow stack `depth` deep.
pub fn memory(slots: usize, records: usize, depth: usize) -> &'static mut [u8] {
    let slot = (128 + depth * 24 + 16 + records * 16).next_multiple_of(64);
    vec![0u8; 64 + ferrotrace_embedded::SCRATCH_LEN + slots * slot].leak()
}

/// Writes the trace to a file of the test's own and opens it.
pub fn write_and_open(tracer: &Tracer, program: &Program<'_>, name: &str) -> (Trace, Vec<Event>) {
    let path = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("{name}.data"));
    let mut bytes = Vec::new();
    tracer
        .write_trace_with(program, |b| {
            bytes.extend_from_slice(b);
            Ok::<(), ()>(())
        })
        .expect("written");
    std::fs::write(&path, &bytes).unwrap();
    let trace = Trace::open(&path).expect("a trace");
    assert!(trace.truncation().is_none(), "{:?}", trace.truncation());
    assert!(trace.problems().is_empty(), "{:?}", trace.problems());
    let events = trace.events().unwrap().map(|e| e.unwrap()).collect();
    (trace, events)
}
