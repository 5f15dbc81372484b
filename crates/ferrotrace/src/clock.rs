//! Raw timestamps for the hot path and calibration pairs for the file.

use ferrotrace_core::clock::ClockPair;
pub use ferrotrace_core::clock::{monotonic_ns, realtime_ns};

/// Reads the timestamp counter. The assembly trampolines inline the same instruction.
#[inline(always)]
pub fn rdtsc() -> u64 {
    // SAFETY: rdtsc has no memory effects; it is available on every x86_64 CPU.
    unsafe { core::arch::x86_64::_rdtsc() }
}

/// A calibration pair plus the wall clock, taken so that the TSC reading sits in the middle of the
/// CLOCK_MONOTONIC reading (best of a few tries, to dodge an interrupt between the two).
pub fn calibration_pair() -> (ClockPair, u64) {
    let mut best = (u64::MAX, ClockPair::default());
    for _ in 0..5 {
        let t0 = rdtsc();
        let mono = monotonic_ns();
        let t1 = rdtsc();
        if t1.wrapping_sub(t0) < best.0 {
            best = (
                t1.wrapping_sub(t0),
                ClockPair {
                    tsc: t0 + (t1 - t0) / 2,
                    mono_ns: mono,
                },
            );
        }
    }
    (best.1, realtime_ns())
}
