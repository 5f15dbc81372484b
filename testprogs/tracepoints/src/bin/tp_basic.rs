//! `tp_basic N`: fires a known sequence of tracepoints N times and prints `fired=COUNT`.
//!
//! Per iteration i: `vfs_open(path="/tmp/file{i}", flags=i)`, `net_recv(conn=i, bytes=i*100)`,
//! `kinds::all_types(...)` with values derived from i, and `quiet(x=i)` (which tests never enable).
use std::hint::black_box;

ferrotrace::tracepoint!(vfs_open, path: &str, flags: u32);
ferrotrace::tracepoint!(net_recv, conn: u64, bytes: usize, "conn={conn} bytes={bytes}");
ferrotrace::tracepoint!(quiet, x: u32);

mod kinds {
    ferrotrace::tracepoint!(pub(crate) all_types, a: u8, b: i16, c: i64, d: f64, e: bool, f: &[u8], g: f32, h: isize);
}

#[inline(never)]
fn work(i: u64) -> u64 {
    black_box(i * 3)
}

fn main() {
    let n: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(5);
    let mut fired = 0;
    for i in 0..n {
        let path = format!("/tmp/file{i}");
        vfs_open(&path, i as u32);
        ferrotrace::trace!(net_recv(i, (i * 100) as usize));
        let bytes = [i as u8, 0xff, b'x'];
        kinds::all_types(
            i as u8,
            -(i as i16),
            -1_000_000_000_000 * i as i64,
            i as f64 + 0.5,
            i % 2 == 0,
            &bytes,
            0.25,
            -(i as isize),
        );
        quiet(i as u32);
        work(i);
        fired += 4;
    }
    println!("fired={fired}");
}
