// Sleeps 20 times for 10 ms, always from `nap_in_known_place` (which does work after the sleep, so the
// sleep is a real call and not a tail call).
use std::time::{Duration, Instant};

#[inline(never)]
fn nap_in_known_place(ms: u64) -> u64 {
    let t = Instant::now();
    std::thread::sleep(Duration::from_millis(ms));
    t.elapsed().as_nanos() as u64
}

fn main() {
    let mut slept = 0;
    for _ in 0..20 {
        slept += nap_in_known_place(std::hint::black_box(10));
    }
    println!("{slept}");
}
