//! The runtime's life: its one state and the phases it goes through ([`runtime`]), the configuration
//! read from the environment ([`config`]), the one start plan every start follows ([`plan`]), and its
//! occasions: start-up in the ELF constructor and in a forked child ([`start`]), late in a running
//! process ([`attach`], `record -p`), by the program itself into a file of its own ([`in_program`],
//! `ferrotrace-tracing`'s guard); and the end of the trace whatever ends the process ([`exit`]:
//! atexit, signals, fork).
//!
//! Not here: recording (`recorders`), chunk memory and the collector (`buffers`), or changing code
//! (`patch`). `start` and `exit` sit on top and may name every other room; `config` sits at the
//! bottom, and `runtime` in the middle (below the slow path and the recorders, which ask it for the
//! runtime, above `patch`, whose discovery and patching it runs again after dlopen). The layers, and
//! the hooks that go up through them, are in docs/architecture.md.

// Reached through `ferrotrace_attach` (preload library) or `ferrotrace_attach_linked`.
pub mod attach;
pub mod config;
pub mod exit;
pub mod in_program;
pub mod plan;
pub mod runtime;
pub mod start;
