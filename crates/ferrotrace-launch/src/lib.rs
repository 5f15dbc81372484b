//! The host side of ferrotrace: everything between a command line and a traced process.
//!
//! * [`program`]: the file `execvp` will run ([`program::resolve`]; one rule for `record`, `live`,
//!   `profile` and `cargo ferrotrace`, so the file inspected is the file run) and what it holds
//!   ([`program::inspect`]: instrumentation, a linked runtime, tracepoints);
//! * [`start`](mod@start): starting a program with the runtime, configured by one typed
//!   [`ferrotrace_core::env::RuntimeSpec`], the chunk pool shared for salvage, signals relayed
//!   ([`relay`]), and recovering what a killed program had not written ([`salvage`]);
//! * [`hold`]: every program started here waits before its `execve` until whoever opens its events
//!   releases it;
//! * [`sampling`]: `record --sample`, perf_event sampling of the program `record` starts, merged into
//!   the trace its runtime writes;
//! * [`profile()`]: `profile`'s program, started held and given to `ferrotrace_profile`;
//! * [`outcome`]: which file is this run's trace, its children's, and the summary line;
//! * [`checks`]: what `record` refuses before anything runs, as typed errors;
//! * [`attach`]: entering a running process with ptrace (one thread borrowed to call the loader's
//!   `dlopen` and the runtime's entry points, then restored exactly);
//! * [`cargo`]: building a cargo project with sleds, mcount calls or frame pointers.
//!
//! Who should use it: the `ferrotrace` and `cargo-ferrotrace` binaries, and recorders that start or
//! attach to programs. Who should not: code inside the traced process (the `ferrotrace` runtime) and
//! code that only reads traces (`ferrotrace-reader`, `ferrotrace-analysis`).
//!
//! ```no_run
//! use ferrotrace_core::env::RuntimeSpec;
//! use ferrotrace_launch::start::{start, Options, Program};
//!
//! let program = Program::find(&["./app".into(), "--fast".into()])?;
//! let spec = RuntimeSpec { filter: vec!["^parse".into()], ..RuntimeSpec::default() };
//! let ended = start(&program, spec, Options { share_pool: true, ..Options::default() })?.wait()?;
//! std::process::exit(ended.exit_code().into());
//! # Ok::<(), ferrotrace_launch::LaunchError>(())
//! ```
#![warn(missing_docs)]

pub mod attach;
pub mod cargo;
pub mod checks;
mod error;
pub mod hold;
pub mod outcome;
mod pool;
mod profile;
pub mod program;
pub mod relay;
pub mod salvage;
pub mod sampling;
pub mod start;

pub use error::LaunchError;
pub use profile::profile;
pub use start::Ended;
