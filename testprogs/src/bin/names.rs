//! Functions whose names differ between mangling schemes and debug info: a closure, a generic function
//! and drop glue, each busy long enough to be sampled. Runs for about the number of ms given (300).
use std::hint::black_box;
use std::time::{Duration, Instant};

struct Guard(Vec<u64>);

impl Drop for Guard {
    #[inline(never)]
    fn drop(&mut self) {
        for v in &mut self.0 {
            *v = black_box(*v ^ 0x5a);
        }
    }
}

#[inline(never)]
fn apply<F: Fn(u64) -> u64>(f: F, n: u64) -> u64 {
    (0..n).map(&f).fold(0, |a, b| a ^ b)
}

fn main() {
    let ms: u64 = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(300);
    let end = Instant::now() + Duration::from_millis(ms);
    let mut acc = 0;
    while Instant::now() < end {
        acc ^= apply(|x| black_box(x.wrapping_mul(3)), 20_000);
        drop(black_box(Guard(vec![acc; 20_000])));
    }
    println!("{acc}");
}
