//! Why a program could not be started, attached to or built: one enum for the whole crate, each
//! variant saying what went wrong and what to do about it.

use std::fmt;
use std::path::PathBuf;

use ferrotrace_core::schema::source::HOW_TO_BUILD;

/// Why launching failed. `Display` gives the one line a user reads.
#[derive(Debug)]
pub enum LaunchError {
    /// The name is not a file and no directory of `$PATH` holds an executable of that name.
    NotFound(PathBuf),
    /// The file exists but cannot be executed (`execvp` would fail with this error).
    NotExecutable {
        /// The file.
        path: PathBuf,
        /// What the system says.
        source: std::io::Error,
    },
    /// The program's file could not be read as an ELF executable.
    Inspect {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// The program is statically linked and does not link the runtime: nothing can inject it.
    StaticallyLinked(PathBuf),
    /// `libferrotrace_preload.so` was not found.
    NoPreloadLibrary {
        /// The ferrotrace executable it was looked for beside.
        beside: PathBuf,
    },
    /// [`ferrotrace_core::env::PRELOAD`] names a library that someone other than root could change,
    /// for a privileged process ([`crate::start::untrusted`]).
    UntrustedPreload {
        /// The library as given.
        library: PathBuf,
        /// Which file or directory lets someone else change it, and how.
        why: String,
    },
    /// `libferrotrace_alloc.so` (the malloc family `--alloc` preloads) is not beside the preload
    /// library.
    NoAllocLibrary {
        /// The preload library it was looked for beside.
        beside: PathBuf,
    },
    /// The program has no instrumentation, and nothing else was asked for.
    NotInstrumented(PathBuf),
    /// `--trace` was given for a program without tracepoints.
    NoTracepoints(PathBuf),
    /// An option's value is wrong (`--depth 0`, a bad size, a bad regex): the message says which.
    BadOption(String),
    /// A system call needed before the program starts failed.
    Setup {
        /// What was being set up (`memfd_create`, `pipe`, ...).
        what: &'static str,
        /// What the system said.
        source: std::io::Error,
    },
    /// The program could not be started.
    Spawn {
        /// The program.
        program: PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
    /// Waiting for the program failed.
    Wait {
        /// The program.
        program: PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
    /// A cargo build (`cargo ferrotrace`) failed or gave nothing to run: the message says which.
    Build(String),
    /// `record --sample`'s sampler could not start (perf_event_open refused, no frame pointers, ...):
    /// its message.
    Sampler(String),
    /// A running process cannot be attached to, or attaching failed: why.
    CannotAttach {
        /// The process.
        pid: u32,
        /// Why, in words.
        why: String,
    },
}

impl fmt::Display for LaunchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LaunchError::NotFound(p) => write!(f, "{}: command not found", p.display()),
            LaunchError::NotExecutable { path, source } => {
                write!(f, "cannot run {}: {source}", path.display())
            }
            LaunchError::Inspect { path, reason } => {
                write!(f, "{} is not an ELF executable ({reason})", path.display())
            }
            LaunchError::StaticallyLinked(p) => write!(
                f,
                "{} is statically linked: LD_PRELOAD cannot inject the runtime. Link it dynamically, \
                 or make it depend on the ferrotrace crate",
                p.display()
            ),
            LaunchError::NoPreloadLibrary { beside } => write!(
                f,
                "cannot find libferrotrace_preload.so next to {}: build the whole ferrotrace workspace \
                 (cargo build --release) or point {} at it",
                beside.display(),
                ferrotrace_core::env::PRELOAD
            ),
            LaunchError::UntrustedPreload { library, why } => write!(
                f,
                "{}={} is refused: {why}, and the library would run in a privileged process (root's, \
                 or another user's); only a library that nobody but root can change is loaded there",
                ferrotrace_core::env::PRELOAD,
                library.display()
            ),
            LaunchError::NoAllocLibrary { beside } => write!(
                f,
                "--alloc needs libferrotrace_alloc.so beside {}: build the whole ferrotrace \
                 workspace (cargo build --release)",
                beside.display()
            ),
            LaunchError::NotInstrumented(p) => write!(
                f,
                "{} is not instrumented (no XRay sleds, no mcount or __fentry__ calls, no patchable \
                 NOPs) and none of its functions can have its entry patched (`ferrotrace list \
                 --dynamic` says why; -P REGEX selects library functions), so there is nothing to \
                 trace (record its allocations alone with --alloc): {HOW_TO_BUILD}",
                p.display()
            ),
            LaunchError::NoTracepoints(p) => write!(
                f,
                "{} has no ferrotrace tracepoints (declare them with ferrotrace::tracepoint!), so \
                 --trace selects nothing",
                p.display()
            ),
            LaunchError::BadOption(m) | LaunchError::Build(m) => f.write_str(m),
            LaunchError::Sampler(m) => write!(f, "--sample: {m}"),
            LaunchError::Setup { what, source } => write!(f, "{what}: {source}"),
            LaunchError::Spawn { program, source } => {
                write!(f, "cannot run {}: {source}", program.display())
            }
            LaunchError::CannotAttach { pid, why } => {
                write!(f, "cannot attach to process {pid}: {why}")
            }
            LaunchError::Wait { program, source } => {
                write!(f, "waiting for {}: {source}", program.display())
            }
        }
    }
}

impl std::error::Error for LaunchError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            LaunchError::NotExecutable { source, .. }
            | LaunchError::Setup { source, .. }
            | LaunchError::Spawn { source, .. }
            | LaunchError::Wait { source, .. } => Some(source),
            _ => None,
        }
    }
}

impl LaunchError {
    /// A failed system call during set-up, with `errno` as it is now.
    pub(crate) fn setup(what: &'static str) -> LaunchError {
        LaunchError::Setup {
            what,
            source: std::io::Error::last_os_error(),
        }
    }
}
