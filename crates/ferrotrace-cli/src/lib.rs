//! The subcommands of the `ferrotrace` binary, as a library so that `cargo-ferrotrace` builds its
//! options from the same clap definitions as `ferrotrace record` and `ferrotrace profile` (a second,
//! hand-written list drifts). Not an API for other programs: the binaries are the interface.

pub mod cmd;
mod elf;
mod pool;
mod relay;
