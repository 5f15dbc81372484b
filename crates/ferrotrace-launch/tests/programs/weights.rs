// Three hot functions whose loop bodies are inlined std helpers (black_box, wrapping arithmetic), taking
// about 60, 30 and 10 percent of the time: a profiler must charge the time to them, not to the helpers.
use std::hint::black_box;

#[inline(never)]
fn work_a(n: u64) -> u64 {
    let mut acc = 0u64;
    for i in 0..n {
        acc = black_box(acc.wrapping_add(i.wrapping_mul(3)));
    }
    acc
}

#[inline(never)]
fn work_b(n: u64) -> u64 {
    let mut acc = 1u64;
    for i in 0..n {
        acc = black_box(acc ^ i.rotate_left(7));
    }
    acc
}

#[inline(never)]
fn work_c(n: u64) -> u64 {
    let mut acc = 2u64;
    for i in 0..n {
        acc = black_box(acc.wrapping_sub(i) | 1);
    }
    acc
}

fn main() {
    let rounds: u64 = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(40);
    let mut s = 0;
    for _ in 0..rounds {
        s ^= work_a(6_000_000) ^ work_b(3_000_000) ^ work_c(1_000_000);
    }
    println!("{s}");
}
