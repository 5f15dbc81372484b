//! Runtime configuration, read once from the environment.
//!
//! `ferrotrace record` sets these variables for the program it runs; they can also be set by hand.
//!
//! | variable | meaning | default |
//! |---|---|---|
//! | `FERROTRACE_OUTPUT` | trace file to write | `ferrotrace.data` |
//! | `FERROTRACE_RUNTIME` | which runtime may start: `preload` (the LD_PRELOADed library), `linked` (the copy linked into the program) or `off` (none: set by live mode for the processes its program starts) | `linked` if the program links one, else `preload` |
//! | `FERROTRACE_FILTER` | newline-separated regexes: trace only functions whose demangled name matches one (`-F`) | all functions |
//! | `FERROTRACE_NOTRACE` | newline-separated regexes: never trace these (`-N`) | none |
//! | `FERROTRACE_MODE` | `lossless`, `drop` or `flight` | `lossless` |
//! | `FERROTRACE_BUFFER_SIZE` | bytes of chunk memory (lossless, drop) or of the flight ring (flight); `K`/`M`/`G` suffixes | 16M |
//! | `FERROTRACE_CHUNK_SIZE` | bytes per chunk (a power of two ≥ 256) | 64K |

use std::ffi::OsString;
use std::path::PathBuf;

use ferrotrace_core::size::{check_buffer, check_chunk, parse_size, physical_memory};

pub use ferrotrace_core::schema::Mode;

/// The runtime's settings.
#[derive(Clone, Debug)]
pub struct Config {
    /// The trace file.
    pub output: PathBuf,
    /// Regexes of functions to trace; empty means all.
    pub include: Vec<regex_lite::Regex>,
    /// Regexes of functions never to trace.
    pub exclude: Vec<regex_lite::Regex>,
    /// What to do when buffers run out.
    pub mode: Mode,
    /// Chunk memory in bytes (or flight ring size in flight mode).
    pub buffer_size: usize,
    /// Bytes per chunk.
    pub chunk_size: usize,
}

fn regexes(var: &str) -> Result<Vec<regex_lite::Regex>, String> {
    let Some(v) = std::env::var_os(var) else {
        return Ok(Vec::new());
    };
    v.to_string_lossy()
        .split('\n')
        .filter(|p| !p.is_empty())
        .map(|p| regex_lite::Regex::new(p).map_err(|e| format!("{var}: invalid regex '{p}': {e}")))
        .collect()
}

impl Config {
    /// Reads the configuration from the environment.
    pub fn from_env() -> Result<Config, String> {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
        let mode = match var("FERROTRACE_MODE").as_deref() {
            None | Some("lossless") => Mode::Lossless,
            Some("drop") => Mode::Drop,
            Some("flight") => Mode::Flight,
            Some(other) => {
                return Err(format!(
                    "FERROTRACE_MODE: unknown mode '{other}' (lossless, drop or flight)"
                ))
            }
        };
        let size = |name: &str, default: usize| {
            var(name)
                .map_or(Ok(default), |s| parse_size(&s))
                .map_err(|e| format!("{name}: {e}"))
        };
        let chunk_size = size("FERROTRACE_CHUNK_SIZE", 64 << 10)?;
        check_chunk(chunk_size).map_err(|e| format!("FERROTRACE_CHUNK_SIZE: {e}"))?;
        let buffer_size = size("FERROTRACE_BUFFER_SIZE", 16 << 20)?;
        check_buffer(buffer_size, chunk_size, physical_memory())
            .map_err(|e| format!("FERROTRACE_BUFFER_SIZE: {e}"))?;
        Ok(Config {
            output: std::env::var_os("FERROTRACE_OUTPUT")
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
                .unwrap_or_else(|| PathBuf::from("ferrotrace.data")),
            include: regexes("FERROTRACE_FILTER")?,
            exclude: regexes("FERROTRACE_NOTRACE")?,
            mode,
            buffer_size,
            chunk_size,
        })
    }

    /// True when a function with this demangled name passes the `-F`/`-N` filters.
    pub fn selects(&self, demangled: &str) -> bool {
        (self.include.is_empty() || self.include.iter().any(|r| r.is_match(demangled)))
            && !self.exclude.iter().any(|r| r.is_match(demangled))
    }
}

/// The name of the environment variable that marks processes started by a traced process.
pub const TRACED_PARENT_VAR: &str = "FERROTRACE_TRACED_PARENT";

/// The variable that says which runtime may start.
pub const RUNTIME_VAR: &str = "FERROTRACE_RUNTIME";

/// Which runtime the environment asks to start, if any.
pub fn requested_runtime() -> Option<OsString> {
    std::env::var_os(RUNTIME_VAR)
}

/// The memfd through which `ferrotrace record` shares the chunk pool (`FERROTRACE_SHARED_FD`), taken
/// once, at start: the variable is removed and the descriptor closed on `exec`, so that the programs this
/// one starts never see it. `None` when absent, or when the number does not name record's memfd (a
/// descriptor the program opened under that number is never touched).
pub fn take_shared_fd() -> Option<i32> {
    let value = std::env::var(ferrotrace_core::shared::FD_VAR).ok();
    let name = std::ffi::CString::new(ferrotrace_core::shared::FD_VAR).unwrap_or_default();
    // SAFETY: called from the ELF constructor, before the program starts threads of its own.
    unsafe { libc::unsetenv(name.as_ptr()) };
    let fd: i32 = value?.parse().ok()?;
    let target = std::fs::read_link(format!("/proc/self/fd/{fd}")).ok()?;
    if !target
        .to_string_lossy()
        .starts_with(&format!("/memfd:{}", ferrotrace_core::shared::MEMFD_NAME))
    {
        return None;
    }
    // SAFETY: fcntl on a descriptor that is open (read_link found it).
    unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
    Some(fd)
}
