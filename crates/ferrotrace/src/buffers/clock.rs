//! Raw timestamps for the hot path and calibration pairs for the file (shared with the tools that
//! write traces outside the traced process: `ferrotrace_core::clock`).

pub use ferrotrace_core::clock::{calibration_pair, monotonic_ns, rdtsc, realtime_ns};

use ferrotrace_core::schema::Payload;

/// A Clock chunk's payload: a calibration pair read now.
pub fn calibration_payload() -> Vec<u8> {
    let mut p = Vec::new();
    let _ = ferrotrace_core::clock::tsc_clock_sample().encode(&mut p);
    p
}
