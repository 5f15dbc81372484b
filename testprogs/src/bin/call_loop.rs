//! For bench/attach.sh: reads a number N per line from stdin, calls the traced `work` N times, and
//! prints `ns=…` (the loop's thread CPU time) per line; runs until stdin ends. Tracers attach to it
//! between lines.
use std::io::{BufRead, Write};

#[inline(never)]
fn work(x: u64) -> u64 {
    std::hint::black_box(x.wrapping_mul(0x9e3779b97f4a7c15).rotate_left(7))
}

fn cpu_ns() -> u64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) };
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

fn main() {
    let stdin = std::io::stdin();
    let mut out = std::io::stdout();
    for line in stdin.lock().lines() {
        let Ok(n) = line.unwrap_or_default().trim().parse::<u64>() else {
            continue;
        };
        let start = cpu_ns();
        let mut acc = 0u64;
        for i in 0..n {
            acc = acc.wrapping_add(work(i));
        }
        let ns = cpu_ns() - start;
        let _ = writeln!(out, "ns={ns} calls={n} acc={acc}");
        let _ = out.flush();
    }
}
