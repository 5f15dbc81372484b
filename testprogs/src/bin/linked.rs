//! Links the ferrotrace runtime itself: `ferrotrace record` must use this copy, not preload another.
use std::hint::black_box;

#[inline(never)]
fn work(n: u64) -> u64 {
    black_box(n + 1)
}

fn main() {
    for i in 0..40 {
        work(i);
    }
    println!("recording={}", ferrotrace::is_recording());
}
