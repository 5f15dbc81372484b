//! The subcommands of the `ferrotrace` binary, as a library so that `cargo-ferrotrace` builds its
//! options from the same clap definitions as `ferrotrace record` and `ferrotrace profile` (a second,
//! hand-written list drifts) and runs them in its own process. Not an API for other programs: the
//! binaries are the interface. Each command parses, calls the libraries (`ferrotrace-launch` starts
//! programs, `ferrotrace-profile` samples them, `ferrotrace-analysis` reads traces) and prints.

pub mod cmd;
mod error;

pub use error::Error;
