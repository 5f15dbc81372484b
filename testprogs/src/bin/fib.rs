//! Recursive fib that counts its own calls: `fib N` prints `calls=C result=R elapsed_ns=T`, where T times
//! the computation alone (benchmarks use it to leave process start-up out of the per-call cost).
//! `fib N rdtsc` reads the timestamp counter at the entry and the exit of every call and does nothing
//! else with it: the floor of any tracer that timestamps both events, measured in the same context.
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

static TSC_SINK: AtomicU64 = AtomicU64::new(0);

#[inline(never)]
fn fib_rdtsc(n: u64) -> u64 {
    // SAFETY: rdtsc has no preconditions on x86_64.
    let t0 = unsafe { core::arch::x86_64::_rdtsc() };
    CALLS.fetch_add(1, Ordering::Relaxed);
    let r = if n < 2 {
        n
    } else {
        std::hint::black_box(fib_rdtsc(n - 1)) + std::hint::black_box(fib_rdtsc(n - 2))
    };
    // SAFETY: as above.
    let t1 = unsafe { core::arch::x86_64::_rdtsc() };
    TSC_SINK.store(t0 ^ t1, Ordering::Relaxed);
    r
}

fn main() {
    let n: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(20);
    let with_rdtsc = std::env::args().nth(2).as_deref() == Some("rdtsc");
    let start = std::time::Instant::now();
    let r = if with_rdtsc {
        fib_rdtsc(std::hint::black_box(n))
    } else {
        fib(std::hint::black_box(n))
    };
    let elapsed = start.elapsed().as_nanos();
    println!(
        "calls={} result={r} elapsed_ns={elapsed}",
        CALLS.load(Ordering::Relaxed)
    );
}
