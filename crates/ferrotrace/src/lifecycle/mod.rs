//! The runtime's life: its one state and the phases it goes through ([`runtime`]), the configuration
//! read from the environment ([`config`]), start-up in the ELF constructor and in a forked child
//! ([`start`]), and the end of the trace whatever ends the process ([`exit`]: atexit, signals, fork).
//!
//! Not here: recording (`recorders`), chunk memory and the collector (`buffers`), or changing code
//! (`patch`). This room sits on top: it may name every other room; none of them names it except
//! `runtime` and `config`, which sit at the bottom of the layers (see docs/architecture.md).

pub mod config;
pub mod exit;
pub mod runtime;
pub mod start;
