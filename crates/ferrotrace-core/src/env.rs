//! The environment protocol: every variable through which `ferrotrace record` and `ferrotrace live`
//! configure the runtime inside the program they run, and the symbol by which a program says that it
//! links a runtime of its own. Both sides name them through these constants, never by a string of
//! their own.
//!
//! | constant | variable | set by | read by | meaning |
//! |---|---|---|---|---|
//! | [`RUNTIME`] | `FERROTRACE_RUNTIME` | `record`, `live`; the runtime of `live`'s program, for the programs it starts | the constructors of both runtime copies | which copy may start: [`RUNTIME_PRELOAD`] (the LD_PRELOADed library), [`RUNTIME_LINKED`] (the copy linked into the program, which [`LINKED_RUNTIME_MARKER`] names), [`RUNTIME_OFF`] (none); unset: the preload library starts, the linked copy only if [`TRACE`] is set |
//! | [`OUTPUT`] | `FERROTRACE_OUTPUT` | `record` (`-o`), `live` (a private directory) | runtime | the trace file; default `ferrotrace.data`; processes started by a traced one add `.PID` |
//! | [`FILTER`] | `FERROTRACE_FILTER` | `record`, `live` (`-F`) | runtime | newline-separated regexes: trace only functions whose demangled name matches one; unset or empty: all |
//! | [`NOTRACE`] | `FERROTRACE_NOTRACE` | `record`, `live` (`-N`) | runtime | newline-separated regexes: never trace these |
//! | [`PATCH`] | `FERROTRACE_PATCH` | `record` (`-P`) | runtime | newline-separated regexes: patch only the functions whose demangled name (or `NAME@0xADDR`) matches one; the others keep their NOPs and cost nothing; unset or empty: all |
//! | [`FUNCTIONS`] | `FERROTRACE_FUNCTIONS` | `record` (`--no-functions`: [`FUNCTIONS_NONE`]; removed without it) | runtime | [`FUNCTIONS_NONE`]: trace no function (allocations or tracepoints alone) |
//! | [`TRACE`] | `FERROTRACE_TRACE` | `record`, `live` (`--trace`), or by hand | runtime | tracepoint globs, separated by commas or newlines; set alone, it starts the linked runtime |
//! | [`MODE`] | `FERROTRACE_MODE` | `record` (`--mode`), `live` (`drop`) | runtime | `lossless` (default), `drop` or `flight` ([`crate::schema::Mode::name`]) |
//! | [`BUFFER_SIZE`] | `FERROTRACE_BUFFER_SIZE` | `record` (`--buffer-size`) | runtime | bytes of chunk memory, or of the flight ring; `K`/`M`/`G` suffixes ([`crate::size`]); default 16M |
//! | [`CHUNK_SIZE`] | `FERROTRACE_CHUNK_SIZE` | `record` (`--chunk-size`) | runtime | bytes per chunk, a power of two ≥ 256; default 64K |
//! | [`DEPTH`] | `FERROTRACE_DEPTH` | `record` (`-D`) | runtime | trace mcount/fentry calls only down to this nesting depth; deeper ones are left out, not counted as lost |
//! | [`TIME_FILTER`] | `FERROTRACE_TIME_FILTER` | `record` (`-t`) | runtime | leave out calls shorter than this many nanoseconds (their callers stay, and so does every event inside a call that is kept) |
//! | [`TRIGGER`] | `FERROTRACE_TRIGGER` | `record` (`-T`) | runtime | triggers, `REGEX@ACTIONS` (`crate::trigger`), one per line |
//! | [`ARGS`] | `FERROTRACE_ARGS` | `record` (`-A`, `-R`) | runtime | arguments and return values to record, `REGEX@ITEMS` (`crate::argspec`), one per line |
//! | [`ARGS_FD`] | `FERROTRACE_ARGS_FD` | `record` (`--auto-args`) | runtime | a descriptor (a memfd) holding more such lines, too many for the environment; the runtime of the program's own process reads and closes it, and removes the variable |
//! | [`SHADOW_DEPTH`] | `FERROTRACE_SHADOW_DEPTH` | by hand | runtime | frames of each thread's shadow stack (mcount return hooks), default 16384; deeper calls are not traced and are counted as lost |
//! | [`ALLOC`] | `FERROTRACE_ALLOC` | `record` (`--alloc`: `1`; removed without it) | runtime | record allocations (the malloc family of `libferrotrace_alloc.so`, which `record` preloads with it, or `ferrotrace::Allocator`) |
//! | [`ALLOC_SAMPLE`] | `FERROTRACE_ALLOC_SAMPLE` | `record` (`--alloc-sample`) | runtime | sample allocations: one per this many bytes on average (`512K`); unset or 0: every one |
//! | [`SAMPLED`] | `FERROTRACE_SAMPLED` | `record --sample` (`1`; removed without it) | runtime | the samples of this run are merged into the trace after the program ends: the Session chunk says so from the start ([`crate::schema::source::SAMPLES`]), for readers that count as they read |
//! | [`ALLOC_STACK_DEPTH`] | `FERROTRACE_ALLOC_STACK_DEPTH` | `record` (`--alloc-stack-depth`) | runtime | deepest allocation stack to record (0: none); default 64 |
//! | [`USDT`] | `FERROTRACE_USDT` | by hand | linked runtime | [`USDT_OFF`]: no thread watching the tracepoints' SDT semaphores (tracers attaching to a running program see nothing) |
//! | [`LIVE_FD`] | `FERROTRACE_LIVE_FD` | `live` | runtime (removes it) | the descriptor to print events to, live |
//! | [`SHARED_FD`] | `FERROTRACE_SHARED_FD` | `record` (`record -p`: in the spec, naming the memfd it made in the process) | runtime (removes it; an attached runtime closes it) | the memfd holding the chunk pool that `record` salvages after a SIGKILL ([`crate::shared`]) |
//! | [`TRACED_PARENT`] | `FERROTRACE_TRACED_PARENT` | runtime (its pid, for the processes it starts); `record` and `live` remove it | runtime | a process started by a traced one writes `FILE.PID`; equal to the reader's own pid after an `exec` of the root process, which keeps `FILE` |
//! | [`CONTROL`] | `FERROTRACE_CONTROL` | `record -p` (in the spec it hands `ferrotrace_attach`, never in an environment) | runtime started by `ferrotrace_attach` | the FIFO, in a private directory, that holds an attached recording: its end of file stops it (see [`RuntimeSpec::to_lines`]) |
//! | [`LIVE_FIFO`] | `FERROTRACE_LIVE_FIFO` | `live -p` (in the spec it hands `ferrotrace_attach`) | runtime started by `ferrotrace_attach` | the FIFO, beside [`CONTROL`], to print events to, live |
//! | [`PRELOAD`] | `FERROTRACE_PRELOAD` | users, tests, benchmarks | `record`, `live` | the `libferrotrace_preload.so` to inject, instead of the one next to the `ferrotrace` executable (`--alloc` also injects the `libferrotrace_alloc.so` beside it); run as root, refused unless nobody but root can change it or a directory above it |
//!
//! A privileged process (setuid, setgid, file capabilities) reads none of them: its environment comes
//! from a user it must not obey.

/// Which runtime copy may start: [`RUNTIME_PRELOAD`], [`RUNTIME_LINKED`] or [`RUNTIME_OFF`].
pub const RUNTIME: &str = "FERROTRACE_RUNTIME";
/// [`RUNTIME`]: the LD_PRELOADed library starts.
pub const RUNTIME_PRELOAD: &str = "preload";
/// [`RUNTIME`]: the copy linked into the program starts.
pub const RUNTIME_LINKED: &str = "linked";
/// [`RUNTIME`]: no runtime starts (`live` sets it for the programs its program starts).
pub const RUNTIME_OFF: &str = "off";
/// The trace file.
pub const OUTPUT: &str = "FERROTRACE_OUTPUT";
/// Functions to trace (`-F`): newline-separated regexes.
pub const FILTER: &str = "FERROTRACE_FILTER";
/// Functions never to trace (`-N`): newline-separated regexes.
pub const NOTRACE: &str = "FERROTRACE_NOTRACE";
/// Functions to patch (`-P`): newline-separated regexes; the others are left untouched.
pub const PATCH: &str = "FERROTRACE_PATCH";
/// [`FUNCTIONS_NONE`]: no function is traced (`record --no-functions`).
pub const FUNCTIONS: &str = "FERROTRACE_FUNCTIONS";
/// [`FUNCTIONS`]: no function.
pub const FUNCTIONS_NONE: &str = "none";
/// Tracepoints to record: globs separated by commas or newlines.
pub const TRACE: &str = "FERROTRACE_TRACE";
/// What to do when buffers run out: `lossless`, `drop` or `flight`.
pub const MODE: &str = "FERROTRACE_MODE";
/// Bytes of chunk memory (or of the flight ring).
pub const BUFFER_SIZE: &str = "FERROTRACE_BUFFER_SIZE";
/// Bytes per chunk.
pub const CHUNK_SIZE: &str = "FERROTRACE_CHUNK_SIZE";
/// Nesting depth below which mcount/fentry calls are left out (`-D`).
pub const DEPTH: &str = "FERROTRACE_DEPTH";
/// Calls shorter than this many nanoseconds are left out (`-t`).
pub const TIME_FILTER: &str = "FERROTRACE_TIME_FILTER";
/// `-T` triggers, one `REGEX@ACTIONS` per line.
pub const TRIGGER: &str = "FERROTRACE_TRIGGER";
/// `-A` and `-R` options, one `REGEX@ITEMS` per line (`crate::argspec`).
pub const ARGS: &str = "FERROTRACE_ARGS";
/// A descriptor holding more `REGEX@ITEMS` lines (`record --auto-args`).
pub const ARGS_FD: &str = "FERROTRACE_ARGS_FD";
/// The name of the memfd behind [`ARGS_FD`]: the runtime reads a descriptor of that name only.
pub const ARGS_MEMFD_NAME: &str = "ferrotrace-args";
/// Frames of each thread's shadow stack.
pub const SHADOW_DEPTH: &str = "FERROTRACE_SHADOW_DEPTH";
/// Record allocations: `1`.
pub const ALLOC: &str = "FERROTRACE_ALLOC";
/// Mean bytes between sampled allocations.
pub const ALLOC_SAMPLE: &str = "FERROTRACE_ALLOC_SAMPLE";
/// The run is sampled (`record --sample`): `1`.
pub const SAMPLED: &str = "FERROTRACE_SAMPLED";
/// Deepest allocation stack to record.
pub const ALLOC_STACK_DEPTH: &str = "FERROTRACE_ALLOC_STACK_DEPTH";
/// [`USDT_OFF`] leaves out the thread that watches the SDT semaphores.
pub const USDT: &str = "FERROTRACE_USDT";
/// [`USDT`]: no watcher thread.
pub const USDT_OFF: &str = "off";
/// The descriptor `ferrotrace live` reads printed events from.
pub const LIVE_FD: &str = "FERROTRACE_LIVE_FD";
/// The descriptor number of the memfd shared with `ferrotrace record`.
pub const SHARED_FD: &str = "FERROTRACE_SHARED_FD";
/// The pid of the traced process that started this one.
pub const TRACED_PARENT: &str = "FERROTRACE_TRACED_PARENT";
/// The control FIFO of a recording started by `ferrotrace_attach` (`record -p`).
pub const CONTROL: &str = "FERROTRACE_CONTROL";
/// The nice value the attached runtime's start thread (and so every thread it starts) runs at: the
/// borrowed thread's own, which `record -p` raised while it runs the call that starts the thread
/// (a new thread inherits its creator's priority).
pub const START_NICE: &str = "FERROTRACE_START_NICE";
/// The file beside the control FIFO where an attached runtime leaves its warnings (one a line) for
/// the host to print: the process's standard error is not the user's.
pub const ATTACH_WARNINGS_FILE: &str = "warnings";
/// The file beside the control FIFO where an attached runtime lists the function entries it prepared
/// to patch (trampolines built, jumps not written), one [`EntryJump`] a line: the host writes the jumps
/// with every thread of the process stopped, and puts the original bytes back the same way.
pub const ATTACH_ENTRY_JUMPS_FILE: &str = "entry-jumps";
/// The file beside the control FIFO where an attached runtime lists, as in
/// [`ATTACH_ENTRY_JUMPS_FILE`], the entries of the objects the program loaded after the attach
/// (`dlopen`): its `n`th list since the start, `entry-jumps.N` (from 1). Each appears whole (renamed
/// into place); the host looks for the next one while it records.
#[cfg(feature = "std")]
pub fn later_entry_jumps_file(n: u32) -> String {
    format!("{ATTACH_ENTRY_JUMPS_FILE}.{n}")
}
/// The file beside the control FIFO where an attached runtime's start, which runs on a thread of its
/// own, leaves its outcome once it is over: `0` and a newline when it records, else the negative code
/// of its refusal and a newline (the refusal's line is in `error`, as before).
pub const ATTACH_OUTCOME_FILE: &str = "started";
/// The FIFO an attached runtime prints live events to (`live -p`).
pub const LIVE_FIFO: &str = "FERROTRACE_LIVE_FIFO";
/// The preload library `ferrotrace record` and `live` inject.
pub const PRELOAD: &str = "FERROTRACE_PRELOAD";

/// The name of the linked-runtime marker, as a literal: what `#[export_name]` needs, which takes no
/// constant (see [`LINKED_RUNTIME_MARKER`]).
#[doc(hidden)]
#[macro_export]
macro_rules! __linked_runtime_marker {
    () => {
        "FERROTRACE_LINKED_RUNTIME_V1"
    };
}

/// The symbol a program that links the `ferrotrace` runtime defines: `ferrotrace record` looks for it
/// in the program's symbol tables and then sets [`RUNTIME`] to [`RUNTIME_LINKED`] instead of injecting
/// the preload library. The version suffix changes when the protocol does.
pub const LINKED_RUNTIME_MARKER: &str = crate::__linked_runtime_marker!();

#[cfg(feature = "std")]
pub use spec::{AllocSpec, RuntimeSpec, SpecError, Which};
/// A function entry an attached runtime prepared to patch ([`ATTACH_ENTRY_JUMPS_FILE`]): its trampoline
/// is in place, the jump is not written. No thread may be inside `site + 1 .. site + window` when the
/// jump replaces `original`.
#[cfg(feature = "std")]
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EntryJump {
    /// Where the jump goes (after an `endbr64`, which stays).
    pub site: u64,
    /// Bytes of whole instructions from `site` that the trampoline runs in their place: the jump
    /// covers the first 5, the rest are never run while it is there.
    pub window: u8,
    /// The 5 bytes at `site` before.
    pub original: [u8; 5],
    /// The jump to the trampoline.
    pub jump: [u8; 5],
    /// The function's name, for what is said about it.
    pub function: String,
}

#[cfg(feature = "std")]
impl EntryJump {
    /// One line: `SITE WINDOW ORIGINAL JUMP FUNCTION` (hexadecimal address and bytes; the name last,
    /// as it may hold spaces).
    pub fn to_line(&self) -> String {
        let hex = |b: &[u8; 5]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
        format!(
            "{:x} {} {} {} {}",
            self.site,
            self.window,
            hex(&self.original),
            hex(&self.jump),
            self.function
        )
    }

    /// The entry a [`EntryJump::to_line`] line describes; `None` for anything else.
    pub fn parse(line: &str) -> Option<EntryJump> {
        let mut f = line.splitn(5, ' ');
        let site = u64::from_str_radix(f.next()?, 16).ok()?;
        let window = f.next()?.parse().ok()?;
        let bytes = |s: &str| -> Option<[u8; 5]> {
            let mut out = [0u8; 5];
            if s.len() != 10 {
                return None;
            }
            for (i, b) in out.iter_mut().enumerate() {
                *b = u8::from_str_radix(s.get(2 * i..2 * i + 2)?, 16).ok()?;
            }
            Some(out)
        };
        let original = bytes(f.next()?)?;
        let jump = bytes(f.next()?)?;
        let function = f.next().unwrap_or_default().to_string();
        Some(EntryJump {
            site,
            window,
            original,
            jump,
            function,
        })
    }
}

/// The variables above as one typed value (feature `std`): `record` and `live` build a
/// [`RuntimeSpec`] and hand it to the program with [`RuntimeSpec::to_env`]; the runtime reads it back
/// with [`RuntimeSpec::from_env`]. One value on both sides, so a variable cannot be spelled, split or
/// defaulted two ways.
///
/// ```
/// use ferrotrace_core::env::{RuntimeSpec, Which};
///
/// let spec = RuntimeSpec {
///     runtime: Some(Which::Preload),
///     filter: vec!["^parse".into()],
///     depth: Some(8),
///     ..RuntimeSpec::default()
/// };
/// let vars = spec.to_env();
/// let back = RuntimeSpec::from_env(|name| {
///     vars.iter().find(|(n, _)| *n == name).and_then(|(_, v)| v.clone())
/// })
/// .unwrap();
/// assert_eq!(back, spec);
/// ```
#[cfg(feature = "std")]
mod spec {
    use std::ffi::OsString;
    use std::fmt;
    use std::path::PathBuf;

    use super::*;
    use crate::schema::Mode;

    /// Which runtime copy may start ([`RUNTIME`]).
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum Which {
        /// The LD_PRELOADed library ([`RUNTIME_PRELOAD`]).
        Preload,
        /// The copy linked into the program ([`RUNTIME_LINKED`]).
        Linked,
        /// None ([`RUNTIME_OFF`]).
        Off,
    }

    impl Which {
        /// The value of [`RUNTIME`] that asks for this copy.
        pub const fn name(self) -> &'static str {
            match self {
                Which::Preload => RUNTIME_PRELOAD,
                Which::Linked => RUNTIME_LINKED,
                Which::Off => RUNTIME_OFF,
            }
        }

        /// The copy a value of [`RUNTIME`] asks for.
        pub fn from_name(name: &str) -> Option<Which> {
            [Which::Preload, Which::Linked, Which::Off]
                .into_iter()
                .find(|w| w.name() == name)
        }
    }

    /// Allocation recording ([`ALLOC`], [`ALLOC_SAMPLE`], [`ALLOC_STACK_DEPTH`]).
    #[derive(Clone, Debug, PartialEq, Eq)]
    pub struct AllocSpec {
        /// Mean bytes between sampled allocations as written (`512K`); `None`: every allocation.
        pub sample: Option<String>,
        /// Deepest stack to record; `None`: the runtime's default.
        pub stack_depth: Option<u32>,
    }

    /// What `record` or `live` asks of the runtime in the program it starts: every variable of this
    /// module that they set. Sizes stay as the user wrote them (`16M`), checked by
    /// [`crate::size::check_sizes`] on both sides.
    #[derive(Clone, Debug, Default, PartialEq, Eq)]
    pub struct RuntimeSpec {
        /// [`RUNTIME`]: which copy may start.
        pub runtime: Option<Which>,
        /// [`OUTPUT`]: the trace file (`None`: `ferrotrace.data`).
        pub output: Option<PathBuf>,
        /// [`FILTER`]: `-F` regexes.
        pub filter: Vec<String>,
        /// [`NOTRACE`]: `-N` regexes.
        pub notrace: Vec<String>,
        /// [`PATCH`]: `-P` regexes (empty: patch every function).
        pub patch: Vec<String>,
        /// [`FUNCTIONS`] = [`FUNCTIONS_NONE`]: trace no function (`--no-functions`).
        pub no_functions: bool,
        /// [`TRACE`]: tracepoint globs.
        pub trace: Vec<String>,
        /// [`MODE`] (`None`: lossless).
        pub mode: Option<Mode>,
        /// [`BUFFER_SIZE`], as written.
        pub buffer_size: Option<String>,
        /// [`CHUNK_SIZE`], as written.
        pub chunk_size: Option<String>,
        /// [`DEPTH`]: the mcount/fentry depth limit.
        pub depth: Option<u32>,
        /// [`TIME_FILTER`]: calls shorter than this many nanoseconds are left out.
        pub time_filter_ns: Option<u64>,
        /// [`TRIGGER`]: `-T` triggers as written.
        pub trigger: Vec<String>,
        /// [`ARGS`]: `-A` and `-R` options as written.
        pub args: Vec<String>,
        /// [`ARGS_FD`]: the descriptor holding more of them (`--auto-args`).
        pub args_fd: Option<i32>,
        /// [`ALLOC`] and its settings: `None` records no allocations.
        pub alloc: Option<AllocSpec>,
        /// [`SAMPLED`]: `record --sample` merges samples into the trace after the program ends.
        pub sampled: bool,
        /// [`LIVE_FD`]: the descriptor `live` reads printed events from.
        pub live_fd: Option<i32>,
        /// [`SHARED_FD`]: the memfd `record` salvages from.
        pub shared_fd: Option<i32>,
        /// [`CONTROL`]: the FIFO whose end of file stops an attached recording.
        pub control: Option<PathBuf>,
        /// [`LIVE_FIFO`]: the FIFO an attached runtime prints live events to.
        pub live_fifo: Option<PathBuf>,
        /// [`START_NICE`]: the nice value an attached runtime's threads run at.
        pub start_nice: Option<i32>,
    }

    /// A variable that does not say what [`RuntimeSpec::from_env`] expects.
    #[derive(Clone, Debug, PartialEq, Eq)]
    pub struct SpecError {
        /// The variable.
        pub variable: &'static str,
        /// Its value.
        pub value: String,
        /// What it should be.
        pub expected: &'static str,
    }

    impl fmt::Display for SpecError {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            write!(
                f,
                "{}: '{}' is not {}",
                self.variable, self.value, self.expected
            )
        }
    }

    impl std::error::Error for SpecError {}

    fn lines(v: &[String]) -> Option<OsString> {
        Some(v.join("\n").into())
    }

    impl RuntimeSpec {
        /// Every variable this spec covers, with its value, or `None` for a variable the program must
        /// not inherit (an unset option: the runtime's default applies). [`TRACED_PARENT`] is always
        /// removed: a program `record` starts is a root, not a traced process's child.
        pub fn to_env(&self) -> Vec<(&'static str, Option<OsString>)> {
            let string = |s: &Option<String>| s.as_ref().map(OsString::from);
            let number = |n: Option<i64>| n.map(|n| OsString::from(n.to_string()));
            let alloc = self.alloc.as_ref();
            vec![
                (RUNTIME, self.runtime.map(|w| w.name().into())),
                (OUTPUT, self.output.as_ref().map(|p| p.clone().into())),
                (FILTER, lines(&self.filter)),
                (NOTRACE, lines(&self.notrace)),
                (PATCH, lines(&self.patch)),
                (TRIGGER, lines(&self.trigger)),
                (ARGS, lines(&self.args)),
                (ARGS_FD, number(self.args_fd.map(i64::from))),
                (FUNCTIONS, self.no_functions.then(|| FUNCTIONS_NONE.into())),
                (TRACE, lines(&self.trace)),
                (MODE, self.mode.map(|m| m.name().into())),
                (BUFFER_SIZE, string(&self.buffer_size)),
                (CHUNK_SIZE, string(&self.chunk_size)),
                (DEPTH, number(self.depth.map(i64::from))),
                (
                    TIME_FILTER,
                    self.time_filter_ns.map(|n| n.to_string().into()),
                ),
                (ALLOC, alloc.map(|_| "1".into())),
                (ALLOC_SAMPLE, alloc.and_then(|a| string(&a.sample))),
                (
                    ALLOC_STACK_DEPTH,
                    number(alloc.and_then(|a| a.stack_depth).map(i64::from)),
                ),
                (SAMPLED, self.sampled.then(|| "1".into())),
                (LIVE_FD, number(self.live_fd.map(i64::from))),
                (SHARED_FD, number(self.shared_fd.map(i64::from))),
                (CONTROL, self.control.as_ref().map(|p| p.clone().into())),
                (LIVE_FIFO, self.live_fifo.as_ref().map(|p| p.clone().into())),
                (START_NICE, number(self.start_nice.map(i64::from))),
                (TRACED_PARENT, None),
            ]
        }

        /// The spec as the text `ferrotrace_attach` takes: one `NAME=value` line per variable set, a
        /// list variable (newline-separated values) as one line per value under the same name.
        pub fn to_lines(&self) -> String {
            let mut out = String::new();
            for (name, value) in self.to_env() {
                let Some(value) = value else { continue };
                for v in value.to_string_lossy().split('\n') {
                    out.push_str(name);
                    out.push('=');
                    out.push_str(v);
                    out.push('\n');
                }
            }
            out
        }

        /// Reads the text of [`RuntimeSpec::to_lines`] as variables: `(name, value)` with the values
        /// of a repeated name joined by newlines, as in the environment. Lines without `=` are skipped.
        pub fn lines_to_vars(text: &str) -> Vec<(String, String)> {
            let mut vars: Vec<(String, String)> = Vec::new();
            for (name, value) in text.lines().filter_map(|l| l.split_once('=')) {
                match vars.iter_mut().find(|(n, _)| n == name) {
                    Some((_, v)) => {
                        v.push('\n');
                        v.push_str(value);
                    }
                    None => vars.push((name.to_string(), value.to_string())),
                }
            }
            vars
        }

        /// Reads the spec through `var` (the process's environment in the runtime: `|n|
        /// std::env::var_os(n)`). An empty variable counts as unset.
        pub fn from_env(var: impl Fn(&str) -> Option<OsString>) -> Result<RuntimeSpec, SpecError> {
            let text = |name: &str| {
                var(name)
                    .map(|v| v.to_string_lossy().into_owned())
                    .filter(|v| !v.is_empty())
            };
            let list = |name: &str| {
                text(name).map_or_else(Vec::new, |v| {
                    v.split('\n')
                        .filter(|p| !p.is_empty())
                        .map(str::to_string)
                        .collect()
                })
            };
            fn parsed<T: std::str::FromStr>(
                variable: &'static str,
                value: Option<String>,
                expected: &'static str,
            ) -> Result<Option<T>, SpecError> {
                value
                    .map(|v| {
                        v.parse().map_err(|_| SpecError {
                            variable,
                            value: v,
                            expected,
                        })
                    })
                    .transpose()
            }
            let runtime = match text(RUNTIME) {
                None => None,
                Some(v) => Some(Which::from_name(&v).ok_or(SpecError {
                    variable: RUNTIME,
                    value: v,
                    expected: "preload, linked or off",
                })?),
            };
            let mode = match text(MODE) {
                None => None,
                Some(v) => Some(Mode::from_name(&v).ok_or(SpecError {
                    variable: MODE,
                    value: v,
                    expected: "a mode (lossless, drop or flight)",
                })?),
            };
            let alloc = match text(ALLOC).filter(|v| v != "0") {
                None => None,
                Some(_) => Some(AllocSpec {
                    sample: text(ALLOC_SAMPLE).filter(|s| s != "0"),
                    stack_depth: parsed(
                        ALLOC_STACK_DEPTH,
                        text(ALLOC_STACK_DEPTH),
                        "a number of frames",
                    )?,
                }),
            };
            Ok(RuntimeSpec {
                runtime,
                output: var(OUTPUT).filter(|v| !v.is_empty()).map(PathBuf::from),
                filter: list(FILTER),
                notrace: list(NOTRACE),
                patch: list(PATCH),
                trigger: list(TRIGGER),
                args: list(ARGS),
                args_fd: parsed(ARGS_FD, text(ARGS_FD), "a descriptor number")?,
                no_functions: text(FUNCTIONS).is_some_and(|v| v == FUNCTIONS_NONE),
                trace: list(TRACE),
                mode,
                buffer_size: text(BUFFER_SIZE),
                chunk_size: text(CHUNK_SIZE),
                depth: parsed(DEPTH, text(DEPTH), "a depth")?,
                time_filter_ns: parsed(TIME_FILTER, text(TIME_FILTER), "a number of nanoseconds")?,
                alloc,
                sampled: text(SAMPLED).is_some_and(|v| v != "0"),
                live_fd: parsed(LIVE_FD, text(LIVE_FD), "a descriptor number")?,
                shared_fd: parsed(SHARED_FD, text(SHARED_FD), "a descriptor number")?,
                control: var(CONTROL).filter(|v| !v.is_empty()).map(PathBuf::from),
                live_fifo: var(LIVE_FIFO).filter(|v| !v.is_empty()).map(PathBuf::from),
                start_nice: parsed(START_NICE, text(START_NICE), "a nice value")?,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    /// Every variable is spelled `FERROTRACE_` + its constant's name, and no two are the same.
    #[test]
    fn names_are_distinct_and_prefixed() {
        use super::*;
        let vars = [
            ("RUNTIME", RUNTIME),
            ("OUTPUT", OUTPUT),
            ("FILTER", FILTER),
            ("NOTRACE", NOTRACE),
            ("PATCH", PATCH),
            ("FUNCTIONS", FUNCTIONS),
            ("TRACE", TRACE),
            ("MODE", MODE),
            ("BUFFER_SIZE", BUFFER_SIZE),
            ("CHUNK_SIZE", CHUNK_SIZE),
            ("DEPTH", DEPTH),
            ("TIME_FILTER", TIME_FILTER),
            ("TRIGGER", TRIGGER),
            ("ARGS", ARGS),
            ("ARGS_FD", ARGS_FD),
            ("SHADOW_DEPTH", SHADOW_DEPTH),
            ("ALLOC", ALLOC),
            ("ALLOC_SAMPLE", ALLOC_SAMPLE),
            ("ALLOC_STACK_DEPTH", ALLOC_STACK_DEPTH),
            ("SAMPLED", SAMPLED),
            ("USDT", USDT),
            ("LIVE_FD", LIVE_FD),
            ("SHARED_FD", SHARED_FD),
            ("TRACED_PARENT", TRACED_PARENT),
            ("CONTROL", CONTROL),
            ("LIVE_FIFO", LIVE_FIFO),
            ("PRELOAD", PRELOAD),
        ];
        for (i, (constant, var)) in vars.iter().enumerate() {
            assert_eq!(var.strip_prefix("FERROTRACE_"), Some(*constant));
            assert!(vars[..i].iter().all(|(_, other)| other != var));
        }
    }

    /// An entry jump's line reads back as the same entry, its function's spaces included.
    #[test]
    #[cfg(feature = "std")]
    fn entry_jump_round_trips_through_its_line() {
        use super::EntryJump;
        let jump = EntryJump {
            site: 0x5555_5555_1130,
            window: 7,
            original: [0x48, 0x83, 0xec, 0x08, 0x8b],
            jump: [0xe9, 0x01, 0x02, 0x03, 0x04],
            function: "<T as core::fmt::Debug>::fmt".into(),
        };
        assert_eq!(EntryJump::parse(&jump.to_line()), Some(jump));
        assert_eq!(EntryJump::parse("1000 5 4883ec08 e901020304 f"), None);
    }

    /// Every field survives the trip through the environment, and what a spec leaves unset is
    /// removed, not inherited.
    #[cfg(feature = "std")]
    #[test]
    fn spec_round_trips_through_the_environment() {
        use super::*;
        use crate::schema::Mode;
        let full = RuntimeSpec {
            runtime: Some(Which::Linked),
            output: Some("/tmp/x y.data".into()),
            filter: vec!["^a".into(), "b$".into()],
            notrace: vec!["c".into()],
            patch: vec!["^main$".into()],
            no_functions: true,
            trace: vec!["vfs_*".into()],
            mode: Some(Mode::Flight),
            buffer_size: Some("8M".into()),
            chunk_size: Some("4K".into()),
            depth: Some(3),
            time_filter_ns: Some(10_000),
            trigger: vec!["^a@depth=2".into(), "b@0x10@time=1us".into()],
            args: vec!["^open$@arg1/s,arg2".into(), "open@retval".into()],
            args_fd: Some(9),
            alloc: Some(AllocSpec {
                sample: Some("512K".into()),
                stack_depth: Some(17),
            }),
            sampled: true,
            live_fd: Some(5),
            shared_fd: Some(6),
            control: Some("/tmp/d/control".into()),
            live_fifo: Some("/tmp/d/live".into()),
            start_nice: Some(-3),
        };
        for spec in [full, RuntimeSpec::default()] {
            let vars = spec.to_env();
            let get = |n: &str| {
                vars.iter()
                    .find(|(v, _)| *v == n)
                    .and_then(|(_, v)| v.clone())
            };
            assert_eq!(RuntimeSpec::from_env(get).unwrap(), spec);
            let vars = RuntimeSpec::lines_to_vars(&spec.to_lines());
            let get = |n: &str| {
                vars.iter()
                    .find(|(v, _)| v == n)
                    .map(|(_, v)| v.clone().into())
            };
            assert_eq!(RuntimeSpec::from_env(get).unwrap(), spec);
        }
        let unset = RuntimeSpec::default().to_env();
        assert!(unset
            .iter()
            .all(|(n, v)| v.is_none()
                || matches!(*n, FILTER | NOTRACE | PATCH | TRACE | TRIGGER | ARGS)));
        let bad = RuntimeSpec::from_env(|n| (n == MODE).then(|| "fast".into()));
        assert_eq!(bad.unwrap_err().variable, MODE);
    }
}
