//! x86-64: the trampolines that trace functions of uninstrumented code ([`entry_patch`]).

pub mod entry_patch;
