//! Recursive fib that counts its own calls: `fib N` prints `calls=C result=R elapsed_ns=T`, where T times
//! the computation alone (benchmarks use it to leave process start-up out of the per-call cost).
//!
//! The count is a relaxed load and store, not `fetch_add`: the program is single-threaded, so it stays
//! exact, and the call costs 1–2 ns like the fib of `../shared/anchors.md`. Two variants for benchmarks:
//! - `fib N rdtsc` reads the timestamp counter at the entry and the exit of every call and does nothing
//!   else with it: the floor of any tracer that timestamps both events, measured in the same context.
//! - `fib N locked` counts with `fetch_add`, a locked instruction and so a full barrier in every call: it
//!   shows what a tracer's stores cost a program that waits for them to drain.
use std::sync::atomic::{AtomicU64, Ordering};

static CALLS: AtomicU64 = AtomicU64::new(0);

#[inline(always)]
fn count_call() {
    CALLS.store(CALLS.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
}

#[inline(never)]
fn fib(n: u64) -> u64 {
    count_call();
    if n < 2 {
        n
    } else {
        // black_box keeps LLVM from turning the second call into a loop: every call must be a call.
        std::hint::black_box(fib(n - 1)) + std::hint::black_box(fib(n - 2))
    }
}

#[inline(never)]
fn fib_locked(n: u64) -> u64 {
    CALLS.fetch_add(1, Ordering::Relaxed);
    if n < 2 {
        n
    } else {
        std::hint::black_box(fib_locked(n - 1)) + std::hint::black_box(fib_locked(n - 2))
    }
}

static TSC_SINK: AtomicU64 = AtomicU64::new(0);

#[inline(never)]
fn fib_rdtsc(n: u64) -> u64 {
    // SAFETY: rdtsc has no preconditions on x86_64.
    let t0 = unsafe { core::arch::x86_64::_rdtsc() };
    count_call();
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
    let variant: fn(u64) -> u64 = match std::env::args().nth(2).as_deref() {
        Some("rdtsc") => fib_rdtsc,
        Some("locked") => fib_locked,
        _ => fib,
    };
    let start = std::time::Instant::now();
    let r = variant(std::hint::black_box(n));
    let elapsed = start.elapsed().as_nanos();
    println!(
        "calls={} result={r} elapsed_ns={elapsed}",
        CALLS.load(Ordering::Relaxed)
    );
}
