//! The subcommands of the `ferrotrace` binary, as a library so that `cargo-ferrotrace` builds its
//! options from the same clap definitions as `ferrotrace record` and `ferrotrace profile` (a second,
//! hand-written list drifts) and runs them in its own process. Not an API for other programs: the
//! binaries are the interface. Each command parses, calls the libraries (`ferrotrace-launch` starts
//! programs, `ferrotrace-profile` samples them, `ferrotrace-analysis` reads traces) and prints.

/// `eprintln!` that never fails: a standard error that is closed or full (`2>&1 | head -c1`,
/// `2>/dev/full`) is no reason to end a command with a panic (exit 101); the line is dropped.
#[macro_export]
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

pub mod cmd;
mod error;
#[cfg(feature = "tui")]
pub mod tui;

pub use error::Error;
