// Four worker threads, each named and busy in its own function for a while (300 ms, or the
// number of ms given).
use std::hint::black_box;
use std::time::{Duration, Instant};

#[inline(never)]
fn spin_worker(seed: u64, ms: u64) -> u64 {
    let end = Instant::now() + Duration::from_millis(ms);
    let mut x = seed;
    while Instant::now() < end {
        for _ in 0..10_000 {
            x = black_box(x.wrapping_mul(2862933555777941757).wrapping_add(3037000493));
        }
    }
    x
}

fn main() {
    let ms: u64 = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(300);
    let handles: Vec<_> = (0..4u64)
        .map(|i| {
            std::thread::Builder::new()
                .name(format!("worker-{i}"))
                .spawn(move || spin_worker(i, ms))
                .unwrap()
        })
        .collect();
    let mut acc = 0u64;
    for h in handles {
        acc ^= h.join().unwrap();
    }
    println!("{acc}");
}
