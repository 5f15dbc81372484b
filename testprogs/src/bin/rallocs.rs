//! Known allocations of a Rust program (traced through the preload library's malloc hooks, with XRay
//! sleds): `leak_here` leaks 5 boxes of 4096 bytes, `grow_vec` grows a Vec<u64> by pushes (its
//! reallocations), `temporaries` makes 40 short-lived Strings, `hold_peak` holds 8 × 65536 bytes at once.
//! Prints `rallocs done`.
use std::hint::black_box;

#[inline(never)]
fn leak_here() {
    for _ in 0..5 {
        let b: Box<[u8; 4096]> = black_box(Box::new([7u8; 4096]));
        Box::leak(b);
    }
}

#[inline(never)]
fn grow_vec() -> usize {
    let mut v: Vec<u64> = Vec::new();
    for i in 0..1000 {
        v.push(black_box(i));
    }
    v.len()
}

#[inline(never)]
fn temporaries() -> usize {
    let mut n = 0;
    for i in 0..40 {
        n += black_box(format!("temporary-{i:04}")).len();
    }
    n
}

#[inline(never)]
fn hold_peak() -> usize {
    let blocks: Vec<Vec<u8>> = (0..8).map(|i| black_box(vec![i as u8; 65536])).collect();
    blocks.iter().map(|b| b.len()).sum()
}

fn main() {
    leak_here();
    black_box(grow_vec());
    black_box(temporaries());
    black_box(hold_peak());
    println!("rallocs done");
}
