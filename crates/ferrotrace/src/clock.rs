//! Raw timestamps for the hot path and calibration pairs for the file.

use ferrotrace_core::clock::ClockPair;

/// Reads the timestamp counter. The assembly trampolines inline the same instruction.
#[inline(always)]
pub fn rdtsc() -> u64 {
    // SAFETY: rdtsc has no memory effects; it is available on every x86_64 CPU.
    unsafe { core::arch::x86_64::_rdtsc() }
}

fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid out-pointer; clock_gettime is async-signal-safe.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// CLOCK_MONOTONIC in nanoseconds.
pub fn monotonic_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

/// CLOCK_REALTIME in nanoseconds since the epoch.
pub fn realtime_ns() -> u64 {
    clock_ns(libc::CLOCK_REALTIME)
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
