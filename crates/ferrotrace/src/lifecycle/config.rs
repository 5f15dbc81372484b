//! Runtime configuration, read once from the environment.
//!
//! `ferrotrace record` sets these variables for the program it runs; they can also be set by hand. Their
//! names, who sets them and what they mean: [`ferrotrace_core::env`].

use std::collections::HashMap;
use std::ffi::OsString;
use std::path::PathBuf;

use ferrotrace_core::argspec::{ArgOption, ArgSpecs};
use ferrotrace_core::env::{self, RuntimeSpec};
use ferrotrace_core::pattern::NamePattern;
use ferrotrace_core::size::{check_sizes, depth_is_valid, parse_size, SizeOption, MAX_DEPTH};
use ferrotrace_core::trigger::{Actions, Trigger};

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
    /// Patterns of the functions to patch (`-P`); empty means all. The others are not touched.
    pub patch: Vec<NamePattern>,
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
    /// `-D`: calls nested this deep below the outermost `-F` match (below the thread's first frame
    /// without `-F`) are left out, if limited.
    pub max_depth: Option<usize>,
    /// `-F`/`-N`/`-D` select subtrees as uftrace and `replay` do (`-F X`: X and everything it calls,
    /// `-N X`: neither X nor anything it calls): every function is patched and the collector keeps
    /// what they select (`buffers::filter`). False in `ferrotrace live`, whose `-F`/`-N` name the
    /// functions it prints, each alone: only those are patched.
    pub subtrees: bool,
    /// `-t`: calls shorter than this many nanoseconds are left out by the collector (0: none is),
    /// their callers kept (`buffers::filter`).
    pub min_call_ns: u64,
    /// `-T`: function patterns and what they do while their functions run (`buffers::filter`); a
    /// function takes the first that matches it.
    pub triggers: Vec<(NamePattern, Actions)>,
    /// `-A`/`-R`: function patterns and the arguments or return value recorded for the functions
    /// they match (every matching option adds its items: `recorders::args`).
    pub args: Vec<(NamePattern, ArgSpecs)>,
    /// `-A`/`-R` options whose pattern is a whole name (`ferrotrace_core::pattern::whole_name`, as
    /// `--auto-args` writes one per function with debug info), by that name: looked up, not matched
    /// one by one.
    pub args_by_name: HashMap<String, ArgSpecs>,
    /// `record --sample` merges samples into the trace after the program ends: the Session chunk
    /// says [`ferrotrace_core::schema::source::SAMPLES`] from the start.
    pub sampled: bool,
}

impl Config {
    /// Frames of each thread's shadow stack: the depth limit the user asked for (`-D`, deeper calls left
    /// out on purpose), else `shadow_depth` (deeper calls counted as lost).
    pub fn shadow_frames(&self) -> usize {
        self.shadow_limit().unwrap_or(self.shadow_depth)
    }

    /// `-D` as a limit of the mcount shadow stack: calls deeper than it are not even hooked. Only
    /// without `-F`, whose depth counts from the match, not from the thread's first frame, and
    /// without a `depth=` trigger.
    pub fn shadow_limit(&self) -> Option<usize> {
        // A `depth=` trigger may record deeper than -D below its function.
        self.max_depth
            .filter(|_| !self.includes() && self.triggers.iter().all(|(_, a)| a.depth.is_none()))
    }

    /// True when the collector must select events (`buffers::filter`): `-F`, `-N`, `-D` or `-t` in
    /// subtree mode.
    pub fn filters_events(&self) -> bool {
        self.subtrees && (self.has_filters() || self.max_depth.is_some() || self.min_call_ns > 0)
    }

    /// True when `-F` or a `filter` trigger selects subtrees: what is outside them is left out.
    pub fn includes(&self) -> bool {
        !self.include.is_empty() || self.triggers.iter().any(|(_, a)| a.filter)
    }

    /// The filter flags of the function named `demangled` ([`display_name`]) at link-time address
    /// `addr`: whether a `-F` and a `-N` pattern (or a trigger's `filter`, `notrace`) match it, and
    /// which trigger is its own (`buffers::filter::trigger_of`).
    pub fn filter_flags(&self, demangled: &str, addr: u64) -> u8 {
        let mut flags = 0;
        if let Some(i) = self
            .triggers
            .iter()
            .position(|(p, _)| p.matches_function(demangled, addr))
        {
            let actions = self.triggers[i].1;
            flags |= crate::buffers::filter::trigger_flag(i);
            if actions.filter {
                flags |= crate::buffers::filter::INCLUDE;
            }
            if actions.notrace {
                flags |= crate::buffers::filter::EXCLUDE;
            }
        }
        if self
            .include
            .iter()
            .any(|r| r.matches_function(demangled, addr))
        {
            flags |= crate::buffers::filter::INCLUDE;
        }
        if self
            .exclude
            .iter()
            .any(|r| r.matches_function(demangled, addr))
        {
            flags |= crate::buffers::filter::EXCLUDE;
        }
        flags
    }
}

fn triggers(written: &[String]) -> Result<Vec<(NamePattern, Actions)>, String> {
    if written.len() > crate::buffers::filter::MAX_TRIGGERS {
        return Err(format!(
            "{}: at most {} triggers",
            env::TRIGGER,
            crate::buffers::filter::MAX_TRIGGERS
        ));
    }
    written
        .iter()
        .map(|w| {
            let t: Trigger = w.parse().map_err(|e| format!("{}: {e}", env::TRIGGER))?;
            let pattern = regexes(env::TRIGGER, std::slice::from_ref(&t.pattern))?.remove(0);
            Ok((pattern, t.actions))
        })
        .collect()
}

/// The `-A`/`-R` options: those whose pattern is a whole name
/// (`ferrotrace_core::pattern::whole_name`) by name, the others as patterns to match.
type ArgRules = (Vec<(NamePattern, ArgSpecs)>, HashMap<String, ArgSpecs>);

fn arg_options(written: &[String]) -> Result<ArgRules, String> {
    let mut patterns = Vec::new();
    let mut by_name: HashMap<String, ArgSpecs> = HashMap::new();
    for w in written {
        let bad = |e: &dyn std::fmt::Display| format!("{}: '{w}': {e}", env::ARGS);
        let o = ArgOption::parse(w).map_err(|e| bad(&e))?;
        let mut specs = ArgSpecs::default();
        specs.add(&o).map_err(|e| bad(&e))?;
        match ferrotrace_core::pattern::matched_whole_name(o.pattern) {
            Some(name) => {
                let e = by_name.entry(name).or_default();
                // Twelve items per function at most: what is past them is left out.
                let _ = e.args.merge(&specs.args);
                let _ = e.retval.merge(&specs.retval);
            }
            None => patterns.push((
                regexes(env::ARGS, &[o.pattern.to_string()])?.remove(0),
                specs,
            )),
        }
    }
    Ok((patterns, by_name))
}

fn regexes(var: &str, patterns: &[String]) -> Result<Vec<NamePattern>, String> {
    patterns
        .iter()
        .map(|p| NamePattern::new(p).map_err(|e| format!("{var}: invalid regex '{p}': {e}")))
        .collect()
}

/// The variables of the spec that `record` writes ([`RuntimeSpec`]), read from this process's
/// environment.
pub fn spec_from_env() -> Result<RuntimeSpec, String> {
    RuntimeSpec::from_env(|name| std::env::var_os(name)).map_err(|e| e.to_string())
}

impl Config {
    /// Reads the configuration from the environment: the spec `record` wrote
    /// ([`RuntimeSpec::from_env`]), and [`env::SHADOW_DEPTH`], which users set by hand.
    pub fn from_env() -> Result<Config, String> {
        let mut spec = spec_from_env()?;
        if let Some(fd) = spec.args_fd.take() {
            spec.args.extend(take_more_args(fd)?);
        }
        Config::from_spec(&spec)
    }

    /// Reads the configuration through `lookup` (the variables an attach was given, as
    /// [`RuntimeSpec::to_lines`] wrote them).
    pub fn from_lookup(lookup: &dyn Fn(&str) -> Option<String>) -> Result<Config, String> {
        let spec = RuntimeSpec::from_env(|name| lookup(name).map(std::ffi::OsString::from))
            .map_err(|e| e.to_string())?;
        Config::from_spec(&spec)
    }

    /// The configuration `spec` asks for.
    pub fn from_spec(spec: &RuntimeSpec) -> Result<Config, String> {
        let (buffer_size, chunk_size) =
            check_sizes(spec.buffer_size.as_deref(), spec.chunk_size.as_deref()).map_err(
                |(which, e)| {
                    let name = match which {
                        SizeOption::Buffer => env::BUFFER_SIZE,
                        SizeOption::Chunk => env::CHUNK_SIZE,
                    };
                    format!("{name}: {e}")
                },
            )?;
        let depth = |name: &str, what: &str, v: Option<String>| {
            v.map(|v| {
                v.parse::<usize>()
                    .ok()
                    .filter(|&d| depth_is_valid(d))
                    .ok_or_else(|| format!("{name}: '{v}' is not {what} from 1 to {MAX_DEPTH}"))
            })
            .transpose()
        };
        let shadow_depth = depth(
            env::SHADOW_DEPTH,
            "a number of frames",
            std::env::var(env::SHADOW_DEPTH)
                .ok()
                .filter(|v| !v.is_empty()),
        )?
        .unwrap_or(DEFAULT_SHADOW_DEPTH);
        let max_depth = depth(env::DEPTH, "a depth", spec.depth.map(|d| d.to_string()))?;
        let (args, args_by_name) = arg_options(&spec.args)?;
        Ok(Config {
            shadow_depth,
            max_depth,
            output: spec
                .output
                .clone()
                .unwrap_or_else(|| PathBuf::from("ferrotrace.data")),
            include: regexes(env::FILTER, &spec.filter)?,
            exclude: regexes(env::NOTRACE, &spec.notrace)?,
            patch: regexes(env::PATCH, &spec.patch)?,
            functions: !spec.no_functions,
            mode: spec.mode.unwrap_or(Mode::Lossless),
            buffer_size,
            chunk_size,
            // `live` (launched or attached) prints the functions -F names, each alone.
            subtrees: spec.live_fd.is_none() && spec.live_fifo.is_none(),
            sampled: spec.sampled,
            min_call_ns: spec.time_filter_ns.unwrap_or(0),
            triggers: triggers(&spec.trigger)?,
            args,
            args_by_name,
        })
    }

    /// True when there is a `-F` or `-N` filter: without one every function is traced.
    pub fn has_filters(&self) -> bool {
        !self.include.is_empty() || !self.exclude.is_empty() || !self.triggers.is_empty()
    }

    /// True when some `-A`/`-R` option may record values.
    pub fn records_values(&self) -> bool {
        !self.args.is_empty() || !self.args_by_name.is_empty()
    }

    /// What the `-A`/`-R` options record of the function named `demangled` at link-time address
    /// `addr`: every option that matches it adds its items.
    pub fn arg_specs(&self, demangled: &str, addr: u64) -> ArgSpecs {
        let mut specs = self
            .args_by_name
            .get(demangled)
            .copied()
            .unwrap_or_default();
        for (re, s) in &self.args {
            if re.matches_function(demangled, addr) {
                // Twelve items per function at most: what is past them is left out.
                let _ = specs.args.merge(&s.args);
                let _ = specs.retval.merge(&s.retval);
            }
        }
        specs
    }

    /// True when the function named `demangled` ([`display_name`]) at link-time address `addr` passes
    /// the `-F`/`-N` filters (`NamePattern::matches_function`).
    pub fn selects(&self, demangled: &str, addr: u64) -> bool {
        (self.include.is_empty()
            || self
                .include
                .iter()
                .any(|r| r.matches_function(demangled, addr)))
            && !self
                .exclude
                .iter()
                .any(|r| r.matches_function(demangled, addr))
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
    let fd = value?.parse().ok().filter(|&fd| is_shared_memfd(fd))?;
    // SAFETY: fcntl on a descriptor that is open (is_shared_memfd found it).
    unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
    Some(fd)
}

/// True when descriptor `fd` of this process is a memfd `record` made for sharing the chunk pool
/// ([`ferrotrace_core::shared::MEMFD_NAME`]): a number that names anything else is never touched.
pub fn is_shared_memfd(fd: i32) -> bool {
    is_memfd_named(fd, ferrotrace_core::shared::MEMFD_NAME)
}

fn is_memfd_named(fd: i32, name: &str) -> bool {
    std::fs::read_link(format!("/proc/self/fd/{fd}")).is_ok_and(|target| {
        target
            .to_string_lossy()
            .starts_with(&format!("/memfd:{name}"))
    })
}

/// The `-A`/`-R` lines `record --auto-args` handed over in the memfd `fd` ([`env::ARGS_FD`]), read
/// once: the descriptor is closed and the variable removed, so that the programs this one starts
/// neither inherit it nor read whatever their descriptor of that number is. A number that names
/// anything but that memfd is never touched.
fn take_more_args(fd: i32) -> Result<Vec<String>, String> {
    use std::io::{Read, Seek};
    use std::os::fd::FromRawFd;
    set_env(env::ARGS_FD, None);
    if !is_memfd_named(fd, env::ARGS_MEMFD_NAME) {
        return Err(format!("{}: {fd} is not record's descriptor", env::ARGS_FD));
    }
    // SAFETY: an open descriptor of the memfd record made for us (checked above), owned from here.
    let mut file = unsafe { std::fs::File::from_raw_fd(fd) };
    let mut text = String::new();
    file.rewind()
        .and_then(|_| file.read_to_string(&mut text))
        .map_err(|e| format!("{}: {e}", env::ARGS_FD))?;
    Ok(text.lines().map(str::to_string).collect())
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

/// The allocation settings of the environment's spec, `None` when allocations are not to be
/// recorded.
pub fn alloc_requested() -> Result<Option<AllocSettings>, String> {
    let Some(alloc) = spec_from_env()?.alloc else {
        return Ok(None);
    };
    let sample = match alloc.sample.as_deref() {
        None => 0,
        Some(s) => parse_size(s).map_err(|e| format!("{} {s}: {e}", env::ALLOC_SAMPLE))? as u64,
    };
    let depth = match alloc.stack_depth {
        None => ALLOC_DEFAULT_DEPTH,
        Some(d) if (d as usize) <= ALLOC_MAX_DEPTH => d as usize,
        Some(d) => {
            return Err(format!(
                "{}: '{d}' is not a depth from 0 to {ALLOC_MAX_DEPTH}",
                env::ALLOC_STACK_DEPTH
            ))
        }
    };
    Ok(Some(AllocSettings { sample, depth }))
}
