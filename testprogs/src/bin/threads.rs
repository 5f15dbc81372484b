//! Eight named threads doing different work. Prints `worker-I calls=C` per thread.
use std::hint::black_box;

#[inline(never)]
fn sum_squares(n: u64) -> u64 {
    (0..n).map(|i| black_box(i * i)).sum()
}

#[inline(never)]
fn collatz_len(mut n: u64) -> u64 {
    let mut len = 0;
    while n != 1 {
        n = if n % 2 == 0 { n / 2 } else { 3 * n + 1 };
        len += 1;
    }
    len
}

#[inline(never)]
fn string_work(i: u64) -> usize {
    black_box(format!("item-{i}")).len()
}

#[inline(never)]
fn worker(index: u64) -> u64 {
    let mut calls = 0;
    for i in 1..=200 + index * 50 {
        match index % 3 {
            0 => black_box(sum_squares(black_box(i))),
            1 => black_box(collatz_len(black_box(i))),
            _ => black_box(string_work(black_box(i)) as u64),
        };
        calls += 1;
    }
    calls
}

fn main() {
    let handles: Vec<_> = (0..8u64)
        .map(|i| {
            std::thread::Builder::new()
                .name(format!("worker-{i}"))
                .spawn(move || worker(i))
                .expect("spawn")
        })
        .collect();
    for (i, h) in handles.into_iter().enumerate() {
        println!("worker-{i} calls={}", h.join().expect("join"));
    }
}
