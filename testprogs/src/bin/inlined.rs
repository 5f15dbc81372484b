//! A selected function the compiler inlines away: `json_phase` is `#[inline(always)]`, so it has no code
//! of its own and no XRay sled; `kept_phase` stays a function. Prints `sum=N`.

#[inline(always)]
fn json_phase(n: u64) -> u64 {
    (0..n).map(|i| std::hint::black_box(i) * 3).sum()
}

#[inline(never)]
fn kept_phase(n: u64) -> u64 {
    json_phase(n) + 1
}

fn main() {
    let n = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(10);
    println!("sum={}", json_phase(n) + kept_phase(n));
}
