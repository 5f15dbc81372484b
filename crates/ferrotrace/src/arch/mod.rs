//! Everything the runtime does that depends on the instruction set, behind one seam: trampolines and
//! hooks, the registers they save, the shadow frames' assembly, the thread pointer, and the bytes that
//! patching writes. The rest of the runtime (buffers, lifecycle, recorders, patch) calls what the
//! selected architecture's module exports and never writes an instruction itself. A port adds
//! `arch/<name>/` with the same items and one line here (docs/architecture.md, "Adding a new
//! architecture").

#[cfg(target_arch = "x86_64")]
mod x86_64;
#[cfg(target_arch = "x86_64")]
pub(crate) use x86_64::*;
