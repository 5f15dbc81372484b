//! Spins on the CPU in one traced function for 200 ms, then in another for 201 ms, then sleeps 100 ms
//! in a third: `record --sample` must put each sample inside the function that was running (its
//! stack shows it), and none inside the sleeping one (cpu-clock samples a thread on the CPU only).
use std::hint::black_box;
use std::time::{Duration, Instant};

/// Busy until `d` has passed, counting loop turns (so the loop is not optimized away).
#[inline(always)]
fn spin_for(d: Duration) -> u64 {
    let start = Instant::now();
    let mut turns = 0u64;
    while start.elapsed() < d {
        for _ in 0..1000 {
            turns = black_box(turns + 1);
        }
    }
    turns
}

#[inline(never)]
fn spin_first() -> u64 {
    spin_for(Duration::from_millis(200))
}

#[inline(never)]
fn spin_second() -> u64 {
    // A different duration: identical bodies would be folded into one function.
    spin_for(Duration::from_millis(201))
}

#[inline(never)]
fn sleep_third() -> u64 {
    std::thread::sleep(Duration::from_millis(100));
    // Not a tail call: the function's exit is recorded after the sleep.
    black_box(1)
}

fn main() {
    let a = spin_first();
    let b = spin_second();
    let c = sleep_third();
    println!("{}", black_box(a + b + c) > 0);
}
