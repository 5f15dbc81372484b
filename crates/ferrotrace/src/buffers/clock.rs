//! Raw timestamps for the hot path and calibration pairs for the file (shared with the tools that
//! write traces outside the traced process: `ferrotrace_core::clock`).

pub use ferrotrace_core::clock::{calibration_pair, monotonic_ns, rdtsc, realtime_ns};

use ferrotrace_core::clock::{ClockPair, TscConverter};
use ferrotrace_core::schema::Payload;

/// A converter calibrated now, over 2 ms, with the pair it starts from: for the collector's own uses
/// of the clock (the live printer's times, `-t`'s threshold), not the file's (a reader calibrates on
/// the Clock chunks).
pub fn calibrate_now() -> (ClockPair, TscConverter) {
    let (a, _) = calibration_pair();
    std::thread::sleep(std::time::Duration::from_millis(2));
    let (b, _) = calibration_pair();
    (a, TscConverter::new(a, b))
}

/// A Clock chunk's payload: a calibration pair read now.
pub fn calibration_payload() -> Vec<u8> {
    let mut p = Vec::new();
    let _ = ferrotrace_core::clock::tsc_clock_sample().encode(&mut p);
    p
}
