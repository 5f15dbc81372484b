//! The XRay recorder: sleds that the patcher (`crate::patch::sites`) points at the trampolines of the
//! architecture (`crate::arch::xray`), which keep nothing per thread.

use crate::lifecycle::runtime::Recorder;

/// The XRay recorder's hooks (`recorders::ALL`): none; its trampolines keep nothing per thread.
pub const RECORDER: Recorder = Recorder { ..Recorder::NONE };
