// CPU-bound: almost all time in `hot_loop`, a little in `cold_setup`.
// `cpu_hot MS` runs for MS milliseconds of wall time; `cpu_hot calls N` runs a fixed amount of work (N calls
// of hot_loop) and prints its own run time to stderr (bench/profile.sh uses it to measure overhead).
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
    let start = Instant::now();
    let args: Vec<String> = std::env::args().collect();
    let mut acc = cold_setup();
    if args.get(1).map(String::as_str) == Some("calls") {
        let n: u64 = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(1000);
        for _ in 0..n {
            acc = acc.wrapping_add(hot_loop(200_000));
        }
        let end = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        eprintln!("elapsed_ms={:.3} end_unix_s={:.6}", start.elapsed().as_secs_f64() * 1000.0, end.as_secs_f64());
    } else {
        let ms: u64 = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(600);
        let end = start + Duration::from_millis(ms);
        while Instant::now() < end {
            acc = acc.wrapping_add(hot_loop(200_000));
        }
    }
    println!("{acc}");
}
