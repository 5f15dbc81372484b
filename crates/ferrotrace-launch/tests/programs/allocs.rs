// Makes exactly N (argv[1], default 500) heap allocations of 777 bytes from `allocate_many`.
use std::hint::black_box;

#[inline(never)]
fn allocate_many(n: usize) -> usize {
    let mut total = 0;
    for i in 0..n {
        let v: Vec<u8> = Vec::with_capacity(black_box(777));
        total += black_box(v.capacity()) + i;
        drop(black_box(v));
    }
    total
}

fn main() {
    let n: usize = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(500);
    println!("{}", allocate_many(n));
}
