//! `tp_stress TOGGLES`: 4 threads fire `stress(thread, seq, check = seq * 7 + thread)` in a loop while the
//! main thread disables and enables the tracepoint TOGGLES times through the API; prints
//! `toggles=T fired=F` (F counts the loop iterations, fired or not).
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

ferrotrace::tracepoint!(stress, thread: u32, seq: u64, check: u64);

fn main() {
    let toggles: u32 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(2000);
    let stop = Arc::new(AtomicBool::new(false));
    let iterations = Arc::new(AtomicU64::new(0));
    let workers: Vec<_> = (0..4u32)
        .map(|t| {
            let stop = stop.clone();
            let iterations = iterations.clone();
            std::thread::spawn(move || {
                let mut seq = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    ferrotrace::trace!(stress(t, seq, seq * 7 + t as u64));
                    seq += 1;
                    if seq % 64 == 0 {
                        std::thread::yield_now();
                    }
                }
                iterations.fetch_add(seq, Ordering::Relaxed);
            })
        })
        .collect();
    for _ in 0..toggles {
        ferrotrace::tracepoints::disable("stress");
        ferrotrace::tracepoints::enable("stress");
    }
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.join().expect("worker");
    }
    println!(
        "toggles={toggles} fired={}",
        iterations.load(Ordering::Relaxed)
    );
}
