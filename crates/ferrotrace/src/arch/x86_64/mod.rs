//! x86-64 (System V ABI, Linux): the runtime's machine code.

pub(crate) mod entry_patch;
pub(crate) mod mcount;
pub(crate) mod patch;
pub(crate) mod thread;
pub(crate) mod unwind;
pub(crate) mod xray;
