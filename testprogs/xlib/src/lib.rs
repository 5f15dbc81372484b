//! An XRay-instrumented shared library: `xlib_work(n)` calls `xlib_step` n times.
use std::hint::black_box;

#[inline(never)]
fn xlib_step(i: u64) -> u64 {
    black_box(i.wrapping_mul(2654435761))
}

/// Calls `xlib_step` `n` times.
#[no_mangle]
pub extern "C" fn xlib_work(n: u64) -> u64 {
    (0..n).map(|i| xlib_step(black_box(i))).fold(0, u64::wrapping_add)
}
