//! The one error type of the crate: every variant prints as a single line that says what to do.

use std::fmt;
use std::io;
use std::path::PathBuf;

/// Why profiling, reading a profile or rendering it failed.
#[derive(Debug)]
pub enum ProfileError {
    /// A command-line argument or event spelling was not understood.
    BadArgument(String),
    /// `perf_event_open` was refused: not root and `kernel.perf_event_paranoid` too high.
    PerfParanoid {
        /// Current value of `/proc/sys/kernel/perf_event_paranoid`, if readable.
        level: Option<i32>,
    },
    /// tracefs is not mounted and could not be mounted.
    TracefsUnavailable(String),
    /// A uprobe's symbol was not found in the binary.
    UnknownSymbol {
        /// The binary searched.
        path: PathBuf,
        /// The symbol asked for.
        symbol: String,
    },
    /// A kernel tracepoint does not exist.
    UnknownTracepoint(String),
    /// The binary has no frame pointers but `--call-graph fp` was asked for.
    NoFramePointers(PathBuf),
    /// The program to profile could not be started.
    Spawn {
        /// The program.
        program: String,
        /// What went wrong.
        source: io::Error,
    },
    /// The process to attach to does not exist.
    NoSuchProcess(u32),
    /// The process to attach to has exited: a zombie its parent has not waited for.
    Exited(u32),
    /// A system call failed.
    Sys {
        /// What was being done.
        what: String,
        /// The OS error.
        source: io::Error,
    },
    /// The eBPF backend could not be loaded or driven (its message says what and why).
    Bpf(String),
    /// The eBPF backend was asked for, but this build has none (built without the `bpf` feature).
    BpfNotBuilt,
    /// Reading or writing a file failed.
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: io::Error,
    },
}

impl ProfileError {
    pub(crate) fn sys(what: impl Into<String>) -> ProfileError {
        ProfileError::Sys {
            what: what.into(),
            source: io::Error::last_os_error(),
        }
    }

    pub(crate) fn io(path: impl Into<PathBuf>, source: io::Error) -> ProfileError {
        ProfileError::Io {
            path: path.into(),
            source,
        }
    }
}

impl fmt::Display for ProfileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProfileError::BadArgument(s) => write!(f, "{s}"),
            ProfileError::PerfParanoid { level } => {
                let lvl = level.map(|l| l.to_string()).unwrap_or_else(|| "?".into());
                write!(
                    f,
                    "perf_event_open not permitted (kernel.perf_event_paranoid = {lvl}): run as root, or run \
                     `sudo sysctl kernel.perf_event_paranoid=1` (2 also works for user-only sampling with CAP_PERFMON)"
                )
            }
            ProfileError::TracefsUnavailable(s) => write!(
                f,
                "tracefs is not available ({s}): run `sudo mount -t tracefs nodev /sys/kernel/tracing` (needs root)"
            ),
            ProfileError::UnknownSymbol { path, symbol } => write!(
                f,
                "symbol `{symbol}` not found in {}: check the spelling (`nm -D {} | grep NAME`, Rust paths as \
                 `crate::module::function`), or that the binary is not stripped",
                path.display(),
                path.display()
            ),
            ProfileError::UnknownTracepoint(s) => write!(
                f,
                "unknown tracepoint `{s}`: list the available ones in /sys/kernel/tracing/available_events \
                 (spelling CATEGORY:NAME, e.g. sched:sched_switch)"
            ),
            ProfileError::NoFramePointers(p) => write!(
                f,
                "{} has no frame pointers, so `--call-graph fp` would give truncated stacks: use `--call-graph \
                 dwarf`, or rebuild with RUSTFLAGS=-Cforce-frame-pointers=yes (C: -fno-omit-frame-pointer)",
                p.display()
            ),
            ProfileError::Spawn { program, source } => {
                write!(f, "cannot run `{program}`: {source} (is it on PATH and executable?)")
            }
            ProfileError::NoSuchProcess(pid) => {
                write!(f, "no process with pid {pid}: check it with `ps -p {pid}`")
            }
            ProfileError::Exited(pid) => write!(
                f,
                "process {pid} has exited (a zombie its parent has not waited for): nothing of it \
             runs to profile"
            ),
            ProfileError::Sys { what, source } => write!(f, "{what} failed: {source}"),
            ProfileError::Bpf(s) => write!(f, "--bpf: {s}; without --bpf the perf_event backend records"),
            ProfileError::BpfNotBuilt => write!(
                f,
                "--bpf: this ferrotrace was built without its eBPF backend: rebuild it with the `bpf` \
                 feature (on by default; needs clang-16 and libelf-dev, see scripts/setup.sh), or \
                 profile without --bpf (perf_event)"
            ),
            ProfileError::Io { path, source } => write!(f, "{}: {source}", path.display()),
        }
    }
}

impl std::error::Error for ProfileError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ProfileError::Spawn { source, .. }
            | ProfileError::Sys { source, .. }
            | ProfileError::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}
