//! Waves of 8 short-lived threads that allocate while they work and exit while others record; thread
//! `w-W-I` calls `tagged` 50 times. Links the ferrotrace runtime, so that the runtime's own allocations
//! go through this program's (traced) allocator shims.
use std::hint::black_box;

#[inline(never)]
fn tagged(i: u64) -> u64 {
    black_box(i)
}

fn main() {
    let n: u64 = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(20);
    for w in 0..n {
        let handles: Vec<_> = (0..8u64)
            .map(|i| {
                std::thread::Builder::new()
                    .name(format!("w-{w}-{i}"))
                    .spawn(move || {
                        let mut v = Vec::new();
                        for k in 0..50 {
                            v.push(format!("{k}"));
                            tagged(k);
                        }
                        black_box(v);
                    })
                    .expect("spawn")
            })
            .collect();
        for h in handles {
            h.join().expect("join");
        }
    }
    println!("recording={}", ferrotrace::is_recording());
}
