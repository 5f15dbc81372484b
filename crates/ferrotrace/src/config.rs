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

/// Parses `16M`, `512K`, `1G` or a plain number of bytes.
pub fn parse_size(s: &str) -> Result<usize, String> {
    ferrotrace_core::format::parse_size(s).ok_or_else(|| {
        format!("invalid size '{s}': expected a number of bytes with an optional K, M or G suffix")
    })
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
        let buffer_size = var("FERROTRACE_BUFFER_SIZE")
            .map(|s| parse_size(&s))
            .transpose()?
            .unwrap_or(16 << 20);
        let chunk_size = var("FERROTRACE_CHUNK_SIZE")
            .map(|s| parse_size(&s))
            .transpose()?
            .unwrap_or(64 << 10);
        if !chunk_size.is_power_of_two() || chunk_size < 256 {
            return Err(format!(
                "FERROTRACE_CHUNK_SIZE: {chunk_size} is not a power of two of at least 256"
            ));
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("16M"), Ok(16 << 20));
        assert_eq!(parse_size("512k"), Ok(512 << 10));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert!(parse_size("0").is_err());
        assert!(parse_size("12Q").is_err());
        assert!(parse_size("").is_err());
    }
}
