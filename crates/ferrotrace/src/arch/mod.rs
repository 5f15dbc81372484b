//! What depends on the instruction set: today x86-64 only ([`x86_64`]).

pub mod x86_64;
