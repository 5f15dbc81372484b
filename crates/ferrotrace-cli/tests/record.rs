//! `ferrotrace record` and `info` on real XRay-instrumented programs.

mod common;

use common::*;
use ferrotrace_analysis::reader::{EventKind, Trace};

/// Per-thread check that entries and exits nest properly; returns (entries, exits) of `func`.
fn nested_counts(trace: &Trace, func: &str) -> (u64, u64) {
    let mut entries = 0;
    let mut exits = 0;
    for &tid in trace.threads.keys() {
        let mut stack: Vec<u32> = Vec::new();
        for e in trace.thread_events(tid).expect("thread events") {
            let e = e.expect("event");
            let is_func = trace.function_name(e.id) == func;
            match e.kind {
                EventKind::Entry => {
                    stack.push(e.id);
                    entries += is_func as u64;
                }
                EventKind::Exit | EventKind::TailExit => {
                    assert_eq!(
                        stack.pop(),
                        Some(e.id),
                        "exit of {} does not match the open frame",
                        trace.function_name(e.id)
                    );
                    exits += is_func as u64;
                }
                _ => {}
            }
        }
        assert!(
            stack.is_empty(),
            "thread {tid} ends with open frames {stack:?}"
        );
    }
    (entries, exits)
}

fn program_calls(stdout: &[u8]) -> u64 {
    let s = text(stdout);
    s.split_whitespace()
        .find_map(|w| w.strip_prefix("calls="))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no calls= in output: {s}"))
}

#[test]
fn recursive_program_has_exactly_its_calls_in_every_run() {
    let dir = scratch("fib_exact");
    let fib = testprog("fib");
    for run in 0..3 {
        let (out, trace) = record(&dir, &[], &fib, &["22"]);
        assert!(out.status.success(), "run {run}: {}", text(&out.stderr));
        let calls = program_calls(&out.stdout);
        let t = Trace::open(&trace).expect("open trace");
        assert!(t.end.is_some() && t.truncation.is_none());
        let (entries, exits) = nested_counts(&t, "fib::fib");
        assert_eq!((entries, exits), (calls, calls), "run {run}");
    }
}
