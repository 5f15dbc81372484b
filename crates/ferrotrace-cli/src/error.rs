//! The one error type of the commands: what the libraries said, typed, and the few failures of the
//! command line itself. `main` prints it as one line and exits 2; a reader that went away is not an
//! error ([`Error::is_closed_pipe`]).

use std::fmt;

use ferrotrace_analysis::reader::ReadError;
use ferrotrace_core::output::OutputError;
use ferrotrace_launch::LaunchError;
use ferrotrace_profile::ProfileError;

/// Why a command failed.
#[derive(Debug)]
pub enum Error {
    /// Finding, checking or starting the program.
    Launch(LaunchError),
    /// Recording a profile.
    Profile(ProfileError),
    /// Reading a trace.
    Read(ReadError),
    /// An analysis failed (its own typed error, kept whole).
    Analysis(Box<dyn std::error::Error + Send + Sync + 'static>),
    /// The trace file to write is not one we may replace.
    Output(OutputError),
    /// Writing results.
    Write {
        /// What was being written: `standard output` or a path.
        what: String,
        /// What the system said.
        source: std::io::Error,
        /// The file was ours and is removed: what it held was cut short.
        removed: bool,
    },
    /// Anything else the command found wrong: the message says what and why.
    Usage(String),
}

impl Error {
    /// An analysis library's error, kept whole.
    pub fn analysis(e: impl std::error::Error + Send + Sync + 'static) -> Error {
        Error::Analysis(Box::new(e))
    }

    /// True when the reader of our output went away (`| head`): the command ends quietly, exit 0.
    pub fn is_closed_pipe(&self) -> bool {
        matches!(self, Error::Write { source, .. } if source.kind() == std::io::ErrorKind::BrokenPipe)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Launch(e) => e.fmt(f),
            Error::Profile(e) => e.fmt(f),
            Error::Read(e) => e.fmt(f),
            Error::Analysis(e) => e.fmt(f),
            Error::Output(e) => e.fmt(f),
            Error::Write {
                what,
                source,
                removed,
            } => {
                write!(f, "cannot write {what}: {source}")?;
                if *removed {
                    f.write_str(" (removed: what it held was cut short)")?;
                }
                Ok(())
            }
            Error::Usage(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for Error {}

impl From<LaunchError> for Error {
    fn from(e: LaunchError) -> Error {
        Error::Launch(e)
    }
}

impl From<ProfileError> for Error {
    fn from(e: ProfileError) -> Error {
        Error::Profile(e)
    }
}

impl From<ReadError> for Error {
    fn from(e: ReadError) -> Error {
        Error::Read(e)
    }
}

impl From<OutputError> for Error {
    fn from(e: OutputError) -> Error {
        Error::Output(e)
    }
}

impl From<String> for Error {
    fn from(m: String) -> Error {
        Error::Usage(m)
    }
}

impl From<&str> for Error {
    fn from(m: &str) -> Error {
        Error::Usage(m.to_string())
    }
}
