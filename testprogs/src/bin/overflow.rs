//! Overflows its stack by unbounded recursion, in `main` or (argument `thread`) in a spawned thread.
use std::hint::black_box;

#[inline(never)]
fn deep(n: u64) -> u64 {
    let frame = [n; 64];
    black_box(&frame);
    deep(n + 1) + frame[3]
}

fn main() {
    if std::env::args().nth(1).as_deref() == Some("thread") {
        let t = std::thread::Builder::new().name("deep".into()).spawn(|| deep(0)).expect("spawn");
        println!("{:?}", t.join().is_ok());
    } else {
        println!("{}", deep(0));
    }
}
