//! The hosted front end on an ordinary program: three threads compute Fibonacci numbers recursively
//! and count their own calls (the trace must show the same counts); the main thread also catches a
//! panic thrown through traced calls and goes on.
//!
//! ```sh
//! RUSTFLAGS='-Zinstrument-mcount -Cforce-frame-pointers=yes' \
//!     cargo +nightly run --release -p ferrotrace-embedded --features hosted --example hosted -- trace.data
//! ferrotrace report -i trace.data
//! ferrotrace dump -i trace.data --format uftrace -o uftrace.data && uftrace replay -d uftrace.data
//! ```
use std::sync::atomic::{AtomicU64, Ordering};

static FIB_CALLS: AtomicU64 = AtomicU64::new(0);

#[inline(never)]
fn fib(n: u32) -> u64 {
    FIB_CALLS.fetch_add(1, Ordering::Relaxed);
    if n < 2 {
        return n as u64;
    }
    let a = fib(n - 1);
    let b = fib(n - 2);
    // Not a tail call: LLVM would turn `fib(n - 1) + fib(n - 2)` into a loop, with fewer calls than
    // the count says.
    std::hint::black_box(a + b)
}

#[inline(never)]
fn worker(n: u32) -> u64 {
    fib(n)
}

/// Panics `depth` traced calls down: the unwinder must walk through hooked frames.
#[inline(never)]
fn fall(depth: u32) -> u32 {
    if depth == 0 {
        panic!("deep down");
    }
    std::hint::black_box(fall(depth - 1)) + 1
}

fn main() {
    let path = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "trace.data".to_string());
    ferrotrace_embedded::hosted::init(64 << 20, 8).expect("tracer set up");
    ferrotrace_embedded::hosted::enable();
    let threads: Vec<_> = (0..2)
        .map(|i| {
            std::thread::Builder::new()
                .name(format!("worker{i}"))
                .spawn(move || worker(12 + i))
                .expect("thread")
        })
        .collect();
    let mut sum = worker(14);
    // A panic through traced calls, caught: the program goes on, traced.
    let caught = std::panic::catch_unwind(|| fall(5)).is_err();
    sum += worker(3);
    for t in threads {
        sum += t.join().expect("worker");
    }
    ferrotrace_embedded::hosted::disable();
    ferrotrace_embedded::hosted::dump(&path).expect("trace written");
    println!(
        "sum={sum} fib_calls={} caught={caught}",
        FIB_CALLS.load(Ordering::Relaxed)
    );
}
