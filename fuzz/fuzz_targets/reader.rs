//! Any bytes as a trace file: the reader opens it or refuses it with a message, and streams every
//! event it indexed (per thread and merged), never panicking, hanging or running out of memory.
//!
//! `cargo +nightly fuzz run reader fuzz/corpus/reader` (see docs/performance.md, Reliability).
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "memfile.rs"]
mod memfile;

fuzz_target!(|data: &[u8]| {
    let Some(trace) = memfile::open(data) else {
        return;
    };
    let _ = trace.problems.len();
    let mut n = 0u64;
    for th in trace.threads.values() {
        if let Ok(mut ev) = trace.thread_events(th.tid) {
            while let Some(e) = ev.next_ref() {
                match e {
                    Ok(e) => n = n.wrapping_add(e.tsc ^ e.fields[1]),
                    Err(_) => break,
                }
            }
        }
    }
    if let Ok(mut all) = trace.events() {
        while let Some(e) = all.next_ref() {
            if let Ok(e) = e {
                n = n.wrapping_add(e.ts_ns);
            }
        }
    }
    let _ = ferrotrace_analysis::info::Summary::of(&trace);
    std::hint::black_box(n);
});
