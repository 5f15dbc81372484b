//! Changing the program's code so that it reaches a recorder: finding every kind of instrumentation in
//! the loaded objects ([`discovery`]: XRay sleds, mcount/`__fentry__` calls, patchable NOPs), patching
//! the selected sleds and NOPs through stub pages ([`sites`]), tracepoint sites as static keys
//! ([`static_key`]), and the one code patcher under all of them ([`text`]: text lock, `mprotect`,
//! atomic writes, `membarrier`); GOT slots of `mcount`/`__fentry__` calls pointed at the hooks while
//! attached ([`got`]).
//!
//! Not here: what the patched code calls (the trampolines and hooks are in `recorders`), and when
//! patching happens (`lifecycle::start`, rescans in `lifecycle::runtime`).

pub mod discovery;
pub mod got;
pub mod sites;
pub mod static_key;
pub mod text;
