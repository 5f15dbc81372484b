//! Raw timestamps for the hot path and calibration pairs for the file (shared with the tools that
//! write traces outside the traced process: `ferrotrace_core::clock`).

pub use ferrotrace_core::clock::{calibration_pair, monotonic_ns, rdtsc, realtime_ns};
