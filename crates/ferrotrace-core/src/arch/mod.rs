//! Machine code shared by the recorders written in assembly: the runtime's trampolines and hooks
//! (`ferrotrace`, `arch/`) and the embedded recorder's (`ferrotrace-embedded`), which cannot share a
//! crate but for this one (the embedded recorder is `no_std` and links nothing else of ferrotrace).
//!
//! Assembly text, as macros that expand to string literals: `global_asm!` takes only literals (and
//! `concat!` of them) as its template, so a `const &str` could not be spliced in. Each macro is the one
//! spelling of a sequence that both recorders run identically; what differs between them (which
//! registers hold the thread's slot, how the shadow stack is reached) stays with each.

#[cfg(target_arch = "x86_64")]
pub mod x86_64;
