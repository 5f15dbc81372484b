//! Runtime configuration, read once from the environment.
//!
//! `ferrotrace record` sets these variables for the program it runs; they can also be set by hand. Their
//! names, who sets them and what they mean: [`ferrotrace_core::env`].

use std::ffi::OsString;
use std::path::PathBuf;

use ferrotrace_core::env;
use ferrotrace_core::pattern::NamePattern;
use ferrotrace_core::size::{check_sizes, depth_is_valid, parse_size, SizeOption, MAX_DEPTH};

pub use ferrotrace_core::schema::Mode;

/// Default shadow stack depth in frames (mcount/fentry return hooks).
pub const DEFAULT_SHADOW_DEPTH: usize = 16384;

/// The name users see and filters match: core's one rule, shared with the analysis.
pub use ferrotrace_core::symbols::display_name;

/// The runtime's settings.
#[derive(Clone, Debug)]
pub struct Config {
    /// The trace file.
    pub output: PathBuf,
    /// Patterns of functions to trace (`-F`); empty means all.
    pub include: Vec<NamePattern>,
    /// Patterns of functions never to trace (`-N`).
    pub exclude: Vec<NamePattern>,
    /// False when no function is traced at all (`record --no-functions`): allocations or tracepoints
    /// alone.
    pub functions: bool,
    /// What to do when buffers run out.
    pub mode: Mode,
    /// Chunk memory in bytes (or flight ring size in flight mode).
    pub buffer_size: usize,
    /// Bytes per chunk.
    pub chunk_size: usize,
    /// Frames of each thread's shadow stack (mcount/fentry return hooks).
    pub shadow_depth: usize,
    /// Nesting depth below which mcount/fentry calls are not traced (`-D`), if limited.
    pub max_depth: Option<usize>,
}

impl Config {
    /// Frames of each thread's shadow stack: the depth limit the user asked for (`-D`, deeper calls left
    /// out on purpose), else `shadow_depth` (deeper calls counted as lost).
    pub fn shadow_frames(&self) -> usize {
        self.max_depth.unwrap_or(self.shadow_depth)
    }
}

fn regexes(lookup: &dyn Fn(&str) -> Option<String>, var: &str) -> Result<Vec<NamePattern>, String> {
    let Some(v) = lookup(var) else {
        return Ok(Vec::new());
    };
    v.split('\n')
        .filter(|p| !p.is_empty())
        .map(|p| NamePattern::new(p).map_err(|e| format!("{var}: invalid regex '{p}': {e}")))
        .collect()
}

impl Config {
    /// Reads the configuration from the environment.
    pub fn from_env() -> Result<Config, String> {
        Config::from_lookup(&|name| {
            std::env::var_os(name).map(|v| v.to_string_lossy().into_owned())
        })
    }

    /// Reads the configuration through `lookup` (the environment, or the variables an attach was
    /// given).
    pub fn from_lookup(lookup: &dyn Fn(&str) -> Option<String>) -> Result<Config, String> {
        let var = |name: &str| lookup(name).filter(|v| !v.is_empty());
        let mode = match var(env::MODE) {
            None => Mode::Lossless,
            Some(name) => Mode::from_name(&name).ok_or_else(|| {
                format!(
                    "{}: unknown mode '{name}' (lossless, drop or flight)",
                    env::MODE
                )
            })?,
        };
        let (buffer_size, chunk_size) = check_sizes(
            var(env::BUFFER_SIZE).as_deref(),
            var(env::CHUNK_SIZE).as_deref(),
        )
        .map_err(|(which, e)| {
            let name = match which {
                SizeOption::Buffer => env::BUFFER_SIZE,
                SizeOption::Chunk => env::CHUNK_SIZE,
            };
            format!("{name}: {e}")
        })?;
        let depth = |name: &str, what: &str| {
            var(name)
                .map(|v| {
                    v.parse::<usize>()
                        .ok()
                        .filter(|&d| depth_is_valid(d))
                        .ok_or_else(|| format!("{name}: '{v}' is not {what} from 1 to {MAX_DEPTH}"))
                })
                .transpose()
        };
        let shadow_depth =
            depth(env::SHADOW_DEPTH, "a number of frames")?.unwrap_or(DEFAULT_SHADOW_DEPTH);
        let max_depth = depth(env::DEPTH, "a depth")?;
        Ok(Config {
            shadow_depth,
            max_depth,
            output: var(env::OUTPUT)
                .map(PathBuf::from)
                .unwrap_or_else(|| PathBuf::from("ferrotrace.data")),
            include: regexes(lookup, env::FILTER)?,
            exclude: regexes(lookup, env::NOTRACE)?,
            functions: var(env::FUNCTIONS).as_deref() != Some(env::FUNCTIONS_NONE),
            mode,
            buffer_size,
            chunk_size,
        })
    }

    /// True when there is a `-F` or `-N` filter: without one every function is traced.
    pub fn has_filters(&self) -> bool {
        !self.include.is_empty() || !self.exclude.is_empty()
    }

    /// True when the function named `demangled` ([`display_name`]) passes the `-F`/`-N` filters.
    pub fn selects(&self, demangled: &str) -> bool {
        (self.include.is_empty() || self.include.iter().any(|r| r.is_match(demangled)))
            && !self.exclude.iter().any(|r| r.is_match(demangled))
    }
}

/// Which runtime the environment asks to start, if any.
pub fn requested_runtime() -> Option<OsString> {
    std::env::var_os(env::RUNTIME)
}

/// Sets (or with `None` removes) the environment variable `name` of this process, for the programs it
/// starts. Only at start-up, from the ELF constructor or the collector's set-up, before the program
/// starts threads of its own: the C library's environment is not thread-safe.
pub fn set_env(name: &str, value: Option<&str>) {
    let c = |s: &str| std::ffi::CString::new(s).unwrap_or_default();
    let name = c(name);
    // SAFETY: NUL-terminated strings; called where no other thread reads the environment (above).
    unsafe {
        match value {
            Some(v) => libc::setenv(name.as_ptr(), c(v).as_ptr(), 1),
            None => libc::unsetenv(name.as_ptr()),
        };
    }
}

/// The memfd through which `ferrotrace record` shares the chunk pool ([`env::SHARED_FD`]), taken
/// once, at start: the variable is removed and the descriptor closed on `exec`, so that the programs this
/// one starts never see it. `None` when absent, or when the number does not name record's memfd (a
/// descriptor the program opened under that number is never touched).
pub fn take_shared_fd() -> Option<i32> {
    let value = std::env::var(env::SHARED_FD).ok();
    set_env(env::SHARED_FD, None);
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

/// Deepest allocation stack the hooks walk (checked alike by `record`).
pub const ALLOC_MAX_DEPTH: usize = ferrotrace_core::size::ALLOC_MAX_STACK_DEPTH;
/// Allocation stack depth when none is asked for.
pub const ALLOC_DEFAULT_DEPTH: usize = ferrotrace_core::size::ALLOC_DEFAULT_STACK_DEPTH;

/// What `ferrotrace record --alloc` asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AllocSettings {
    /// Mean bytes between sampled allocations; 0 records every allocation.
    pub sample: u64,
    /// Deepest stack to record; 0 records none.
    pub depth: usize,
}

/// The allocation settings of the environment, `None` when allocations are not to be recorded.
pub fn alloc_requested() -> Result<Option<AllocSettings>, String> {
    let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    if var(env::ALLOC).is_none_or(|v| v == "0") {
        return Ok(None);
    }
    let sample = match var(env::ALLOC_SAMPLE).as_deref() {
        None | Some("0") => 0,
        Some(s) => parse_size(s).map_err(|e| format!("{} {s}: {e}", env::ALLOC_SAMPLE))? as u64,
    };
    let depth = match var(env::ALLOC_STACK_DEPTH) {
        None => ALLOC_DEFAULT_DEPTH,
        Some(s) => s
            .trim()
            .parse::<usize>()
            .ok()
            .filter(|&d| d <= ALLOC_MAX_DEPTH)
            .ok_or_else(|| {
                format!(
                    "{}: '{s}' is not a depth from 0 to {ALLOC_MAX_DEPTH}",
                    env::ALLOC_STACK_DEPTH
                )
            })?,
    };
    Ok(Some(AllocSettings { sample, depth }))
}
