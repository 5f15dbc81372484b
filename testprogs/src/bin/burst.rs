//! 16 threads released together by a barrier, so that they register with the tracer at the same moment;
//! thread `b-I` calls `tagged` I + 1 times.
use std::hint::black_box;
use std::sync::{Arc, Barrier};

#[inline(never)]
fn tagged(i: u64) -> u64 {
    black_box(i)
}

fn main() {
    let barrier = Arc::new(Barrier::new(16));
    let handles: Vec<_> = (0..16u64)
        .map(|i| {
            let barrier = barrier.clone();
            std::thread::Builder::new()
                .name(format!("b-{i}"))
                .spawn(move || {
                    barrier.wait();
                    for k in 0..=i {
                        tagged(k);
                    }
                })
                .expect("spawn")
        })
        .collect();
    for h in handles {
        h.join().expect("join");
    }
}
