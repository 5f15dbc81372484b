//! A small program with a known call tree, for exact replay/report tests.
//!
//! `calltree` runs, on the main thread:
//! ```text
//! run() { a() { b(); } b(); c(); }
//! catcher() { boom() { deeper() } }  <- deeper panics, caught by catch_unwind in catcher
//! after_panic();
//! ```
//! Every call is followed by a `black_box` so that LLVM makes no tail calls, and the leaf functions
//! do different work so that identical-code folding cannot merge them.
//! then a worker thread that calls `worker_step()` WORKER_STEPS times, and prints the counts.
//! `calltree exit` instead calls `std::process::exit(0)` from inside `run() { a() { exit_now() } }`,
//! leaving frames open at the end of the trace.
use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};

static B: AtomicU64 = AtomicU64::new(0);
static C: AtomicU64 = AtomicU64::new(0);
static STEPS: AtomicU64 = AtomicU64::new(0);
const WORKER_STEPS: u64 = 1000;

#[inline(never)]
fn b() {
    B.fetch_add(1, Ordering::Relaxed);
}

#[inline(never)]
fn c() {
    C.fetch_add(3, Ordering::Relaxed);
}

#[inline(never)]
fn a() {
    b();
    black_box(());
}

#[inline(never)]
fn run() {
    a();
    b();
    c();
    black_box(());
}

#[inline(never)]
fn deeper(x: u64) -> u64 {
    if black_box(x) > 0 {
        std::panic::resume_unwind(Box::new("boom"));
    }
    x
}

#[inline(never)]
fn boom() -> u64 {
    deeper(black_box(1)) + 1
}

#[inline(never)]
fn after_panic() {
    STEPS.fetch_add(5, Ordering::Relaxed);
}

#[inline(never)]
fn catcher() {
    let r = std::panic::catch_unwind(|| black_box(boom()));
    black_box(r.is_err());
}

#[inline(never)]
fn worker_step(i: u64) -> u64 {
    STEPS.fetch_add(1, Ordering::Relaxed);
    i * 2
}

#[inline(never)]
fn worker() {
    let mut s = 0;
    for i in 0..WORKER_STEPS {
        s += worker_step(black_box(i));
    }
    black_box(s);
}

#[inline(never)]
fn exit_now() {
    std::process::exit(0);
}

#[inline(never)]
fn run_and_exit() {
    a();
    exit_now();
    black_box(());
}

fn main() {
    if std::env::args().nth(1).as_deref() == Some("exit") {
        run_and_exit();
        return;
    }
    run();
    catcher();
    after_panic();
    std::thread::Builder::new()
        .name("worker".into())
        .spawn(worker)
        .expect("spawn")
        .join()
        .expect("join");
    println!(
        "b={} c={} steps={}",
        B.load(Ordering::Relaxed),
        C.load(Ordering::Relaxed) / 3,
        STEPS.load(Ordering::Relaxed) - 5
    );
}
