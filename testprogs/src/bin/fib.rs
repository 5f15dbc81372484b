//! Recursive fib that counts its own calls: `fib N` prints `calls=C result=R elapsed_ns=T`, where T times
//! the computation alone (benchmarks use it to leave process start-up out of the per-call cost).
use std::sync::atomic::{AtomicU64, Ordering};

static CALLS: AtomicU64 = AtomicU64::new(0);

#[inline(never)]
fn fib(n: u64) -> u64 {
    CALLS.fetch_add(1, Ordering::Relaxed);
    if n < 2 {
        n
    } else {
        // black_box keeps LLVM from turning the second call into a loop: every call must be a call.
        std::hint::black_box(fib(n - 1)) + std::hint::black_box(fib(n - 2))
    }
}

fn main() {
    let n: u64 = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(20);
    let start = std::time::Instant::now();
    let r = fib(std::hint::black_box(n));
    let elapsed = start.elapsed().as_nanos();
    println!("calls={} result={r} elapsed_ns={elapsed}", CALLS.load(Ordering::Relaxed));
}
