//! Conversion of raw TSC ticks to nanoseconds.
//!
//! The runtime stamps events with the raw timestamp counter (cheapest clock there is) and writes
//! calibration pairs `(tsc, CLOCK_MONOTONIC ns)` at the start, periodically, and at the end. Readers convert
//! with [`TscConverter`], which interpolates linearly between the first and last pair: on CPUs with an
//! invariant TSC (constant_tsc, nonstop_tsc) this is exact to the precision of the pairs.

/// Reads `clock` in nanoseconds.
#[cfg(feature = "std")]
fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid out-pointer; clock_gettime is async-signal-safe.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// CLOCK_MONOTONIC in nanoseconds: the time base of calibration pairs (and of perf_event samples).
#[cfg(feature = "std")]
pub fn monotonic_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

/// CLOCK_REALTIME in nanoseconds since the epoch.
#[cfg(feature = "std")]
pub fn realtime_ns() -> u64 {
    clock_ns(libc::CLOCK_REALTIME)
}

/// Reads the timestamp counter (the runtime's trampolines inline the same instruction).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub fn rdtsc() -> u64 {
    // SAFETY: rdtsc has no memory effects; it is available on every x86_64 CPU.
    unsafe { core::arch::x86_64::_rdtsc() }
}

/// A calibration pair plus the wall clock, taken so that the TSC reading sits in the middle of the
/// CLOCK_MONOTONIC reading (best of a few tries, to dodge an interrupt between the two).
#[cfg(all(feature = "std", target_arch = "x86_64"))]
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

/// A Clock chunk's content for the TSC, now ([`calibration_pair`]).
#[cfg(all(feature = "std", target_arch = "x86_64"))]
pub fn tsc_clock_sample() -> crate::schema::ClockSample {
    let (pair, real) = calibration_pair();
    crate::schema::ClockSample {
        ticks: pair.tsc,
        monotonic_ns: pair.mono_ns,
        realtime_ns: real,
    }
}

/// One calibration pair: a TSC reading and the CLOCK_MONOTONIC time taken right next to it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct ClockPair {
    /// Raw TSC value.
    pub tsc: u64,
    /// CLOCK_MONOTONIC in nanoseconds.
    pub mono_ns: u64,
}

/// Converts TSC ticks to CLOCK_MONOTONIC nanoseconds.
#[derive(Clone, Copy, Debug)]
pub struct TscConverter {
    base: ClockPair,
    /// Nanoseconds per tick, as a 32.32 fixed-point number.
    ns_per_tick_q32: u64,
}

impl TscConverter {
    /// A converter from two pairs taken some time apart. Falls back to 1 tick = 1 ns when the pairs are
    /// equal or reversed (a trace that ran for no measurable time).
    pub fn new(first: ClockPair, last: ClockPair) -> TscConverter {
        let dt = last.tsc.saturating_sub(first.tsc);
        let dn = last.mono_ns.saturating_sub(first.mono_ns);
        let ns_per_tick_q32 = if dt == 0 || dn == 0 {
            1u64 << 32
        } else {
            ((((dn as u128) << 32) + dt as u128 / 2) / dt as u128).min(u64::MAX as u128) as u64
        };
        TscConverter {
            base: first,
            ns_per_tick_q32,
        }
    }

    /// A converter with a known tick rate in Hz anchored at `base`.
    pub fn from_hz(base: ClockPair, hz: u64) -> TscConverter {
        let ns_per_tick_q32 = if hz == 0 {
            1u64 << 32
        } else {
            ((1_000_000_000u128 << 32) / hz as u128) as u64
        };
        TscConverter {
            base,
            ns_per_tick_q32,
        }
    }

    /// CLOCK_MONOTONIC nanoseconds at `tsc`.
    pub fn to_ns(&self, tsc: u64) -> u64 {
        let (delta, neg) = if tsc >= self.base.tsc {
            (tsc - self.base.tsc, false)
        } else {
            (self.base.tsc - tsc, true)
        };
        let scaled = self.ticks_to_ns(delta);
        if neg {
            self.base.mono_ns.saturating_sub(scaled)
        } else {
            self.base.mono_ns.saturating_add(scaled)
        }
    }

    /// The tick at CLOCK_MONOTONIC `ns`: the inverse of [`TscConverter::to_ns`] (to the nearest tick),
    /// for events stamped in nanoseconds (perf_event's samples) put into a trace of TSC ticks.
    pub fn to_ticks(&self, ns: u64) -> u64 {
        let (delta, neg) = if ns >= self.base.mono_ns {
            (ns - self.base.mono_ns, false)
        } else {
            (self.base.mono_ns - ns, true)
        };
        let q = self.ns_per_tick_q32.max(1) as u128;
        let ticks = (((delta as u128) << 32) + q / 2) / q;
        let ticks = ticks.min(u64::MAX as u128) as u64;
        if neg {
            self.base.tsc.saturating_sub(ticks)
        } else {
            self.base.tsc.saturating_add(ticks)
        }
    }

    /// Length of `ticks` TSC ticks in nanoseconds.
    pub fn ticks_to_ns(&self, ticks: u64) -> u64 {
        ((ticks as u128 * self.ns_per_tick_q32 as u128 + (1 << 31)) >> 32) as u64
    }

    /// Ticks in `ns` nanoseconds (to the nearest tick): the inverse of [`TscConverter::ticks_to_ns`].
    pub fn ns_to_ticks(&self, ns: u64) -> u64 {
        let q = self.ns_per_tick_q32.max(1) as u128;
        ((((ns as u128) << 32) + q / 2) / q).min(u64::MAX as u128) as u64
    }

    /// Ticks per second implied by the calibration.
    pub fn hz(&self) -> u64 {
        ((1_000_000_000u128 << 32) / self.ns_per_tick_q32.max(1) as u128) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_of_a_time_convert_back_to_it() {
        let c = TscConverter::new(
            ClockPair {
                tsc: 10_000_000_000,
                mono_ns: 5_000_000_000,
            },
            ClockPair {
                tsc: 13_000_000_000,
                mono_ns: 6_000_000_000,
            },
        );
        for ns in [
            4_000_000_000u64,
            5_000_000_000,
            5_123_456_789,
            6_500_000_000,
        ] {
            // A tick is a third of a nanosecond: the round trip is exact to the nanosecond.
            assert!(c.to_ns(c.to_ticks(ns)).abs_diff(ns) <= 1, "{ns}");
        }
        assert_eq!(c.to_ticks(5_000_000_000), 10_000_000_000);
    }

    #[test]
    fn interpolates_between_pairs() {
        let c = TscConverter::new(
            ClockPair {
                tsc: 1000,
                mono_ns: 500,
            },
            ClockPair {
                tsc: 3_001_000,
                mono_ns: 1_000_500,
            },
        );
        // 3 ticks per ns.
        assert_eq!(c.to_ns(1000), 500);
        assert_eq!(c.to_ns(1000 + 3_000), 1_500);
        assert_eq!(c.ticks_to_ns(300), 100);
        assert_eq!(c.to_ns(700), 400);
        assert_eq!(c.hz(), 3_000_000_000);
    }

    #[test]
    fn degenerate_pairs_do_not_divide_by_zero() {
        let p = ClockPair { tsc: 5, mono_ns: 5 };
        assert_eq!(TscConverter::new(p, p).to_ns(10), 10);
    }
}
