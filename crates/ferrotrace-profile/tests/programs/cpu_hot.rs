// CPU-bound: almost all time in `hot_loop`, a little in `cold_setup`.
use std::hint::black_box;
use std::time::{Duration, Instant};

#[inline(never)]
fn hot_loop(iters: u64) -> u64 {
    let mut x = 0x1234_5678u64;
    for i in 0..iters {
        x = black_box(x.wrapping_mul(6364136223846793005).wrapping_add(i) ^ (x >> 17));
    }
    x
}

#[inline(never)]
fn cold_setup() -> u64 {
    black_box((0..1000u64).sum())
}

fn main() {
    let ms: u64 = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(600);
    let mut acc = cold_setup();
    let end = Instant::now() + Duration::from_millis(ms);
    while Instant::now() < end {
        acc = acc.wrapping_add(hot_loop(200_000));
    }
    println!("{acc}");
}
