//! `ferrotrace dump`: the trace in other tools' formats, each written while streaming the events
//! (memory: call stacks and per-function tables, never the trace).
//!
//! One [`Exporter`] per format, one module each, listed in [`FORMATS`]: `dump` finds the format by
//! its name there, [`plan`] decides what of the trace it writes (function calls or samples, or why it
//! cannot), and the exporter writes it. Adding a format is one new module and one line in
//! [`FORMATS`] (see `docs/architecture.md`, "Adding an export format").
//!
//! The exporters of function calls share [`walk`]: time-ordered, balanced begin/end events per
//! thread. Functions already running when tracing began get a begin at their thread's first event;
//! frames unwound by a panic or still open at the end get an end where the call stack learns it, so
//! every output is properly nested.

pub mod chrome;
pub mod firefox;
mod firefox_libs;
pub mod folded;
pub mod parquet;
pub mod perfetto;
pub mod pprof;
mod proto;
pub mod uftrace;
pub mod window;

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use crate::callstack::{initial_stacks, CallStack, EndKind, StackEvent};
use crate::progress::Progress;
use crate::reader::{EventKind, EventRef, ReadError, Trace};
use crate::samples::{RenderError, SampleSet};
use crate::tracepoints::Args;
pub use ferrotrace_core::codec::EventFields;

/// Every format `dump` writes, in the order `--format`'s help lists them. A new format is a module
/// with an [`Exporter`] and one line here.
pub static FORMATS: &[&dyn Exporter] = &[
    &uftrace::Uftrace,
    &chrome::Chrome,
    &perfetto::Perfetto,
    &folded::Folded,
    &firefox::Firefox,
    &parquet::Parquet,
    &pprof::Pprof,
];

/// The format named `name` (as `--format` spells it).
pub fn format(name: &str) -> Option<&'static dyn Exporter> {
    FORMATS.iter().copied().find(|f| f.name() == name)
}

/// What a format can do beyond writing the whole trace to its target ([`Exporter::supports`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Supports {
    /// [`Options::window`]: only the events between two points (`--from`, `--to`).
    pub window: bool,
    /// [`Target::Pieces`]: pieces each smaller than [`Options::max_size`], each a trace of its own
    /// (`--max-size`).
    pub pieces: bool,
}

/// What [`Exporter::write_functions`] wrote.
#[derive(Debug, Default)]
pub struct Written {
    /// The read errors met (each ended one thread early).
    pub errors: Vec<String>,
    /// With [`Target::Pieces`], the files written, in order.
    pub pieces: Vec<PathBuf>,
}

impl From<Vec<String>> for Written {
    /// What a format that writes one file or directory wrote: only the errors to say.
    fn from(errors: Vec<String>) -> Written {
        Written {
            errors,
            pieces: Vec::new(),
        }
    }
}

/// Options of `dump` that formats may use.
#[derive(Clone, Copy, Debug)]
pub struct Options {
    /// Compress what the format can compress (Perfetto: zlib-compressed packet batches).
    pub compress: bool,
    /// The part of the trace to write (formats whose [`Supports::window`] is set).
    pub window: window::Window,
    /// Pieces of at most this many bytes ([`Target::Pieces`]; formats whose [`Supports::pieces`] is
    /// set).
    pub max_size: Option<u64>,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            compress: true,
            window: window::Window::default(),
            max_size: None,
        }
    }
}

/// When a format writes a trace's samples rather than its function calls.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Samples {
    /// Never: it has no form for samples.
    Never,
    /// When the trace holds no function events (a trace of `ferrotrace profile`).
    WithoutFunctions,
    /// Whenever the trace holds samples: the format is for samples.
    Always,
    /// By [`Exporter::write_functions`], which reads the samples itself: Parquet (a dataset of all
    /// the trace holds), pprof (samples by address, or else allocations or function calls).
    Streamed,
}

/// Where a format writes function calls.
pub enum Target<'a> {
    /// A stream: standard output or a file.
    Stream(&'a mut dyn Write),
    /// A directory (created if needed, in a parent that must exist).
    Directory(&'a Path),
    /// Files `PREFIX.1.EXT`, `PREFIX.2.EXT`, … each under [`Options::max_size`] (Perfetto).
    Pieces(&'a Path),
}

/// One output format of `dump`.
pub trait Exporter: Sync {
    /// Its name, as `--format` takes it.
    fn name(&self) -> &'static str;

    /// One line for `--format`'s help.
    fn about(&self) -> &'static str;

    /// What it can do beyond writing the whole trace (windows, pieces): none unless it says.
    fn supports(&self) -> Supports {
        Supports::default()
    }

    /// True when it writes function calls ([`Exporter::write_functions`]).
    fn writes_functions(&self) -> bool {
        true
    }

    /// When it writes samples ([`Exporter::write_samples`]) instead of function calls.
    fn writes_samples(&self) -> Samples {
        Samples::Never
    }

    /// `Some(default name)` when it writes function calls to a directory, not to a stream.
    fn directory(&self) -> Option<&'static str> {
        None
    }

    /// What to tell the user before writing `trace`'s function calls (how large the output will be).
    fn notice(&self, _trace: &Trace, _opts: Options) -> Option<String> {
        None
    }

    /// Writes the function calls of `trace` to `target`; returns what it wrote (the pieces) and the
    /// read errors met.
    fn write_functions(
        &self,
        trace: &Trace,
        opts: Options,
        target: Target<'_>,
        progress: &mut Progress,
    ) -> io::Result<Written> {
        let _ = (trace, opts, target, progress);
        Err(io::Error::other(format!(
            "{} does not write function calls",
            self.name()
        )))
    }

    /// The samples of a trace in this format.
    fn write_samples(
        &self,
        trace: &Trace,
        set: &SampleSet,
        opts: Options,
    ) -> Result<Vec<u8>, RenderError> {
        let _ = (trace, set, opts);
        Err(RenderError(format!(
            "{} does not write samples",
            self.name()
        )))
    }
}

/// A [`Target::Stream`], or the error of a format that writes directories.
pub(crate) fn stream<'a>(target: Target<'a>) -> io::Result<&'a mut dyn Write> {
    match target {
        Target::Stream(out) => Ok(out),
        Target::Directory(dir) => Err(io::Error::other(format!(
            "{}: this format writes a file, not a directory",
            dir.display()
        ))),
        Target::Pieces(prefix) => Err(io::Error::other(format!(
            "{}: this format writes one file, not pieces",
            prefix.display()
        ))),
    }
}

/// What `dump` writes of a trace in a format ([`plan`]).
#[derive(Debug)]
pub enum Plan {
    /// Its function calls ([`Exporter::write_functions`]).
    Functions,
    /// Its samples ([`Exporter::write_samples`]).
    Samples(Box<SampleSet>),
}

/// Why a trace cannot be dumped in a format.
#[derive(Debug)]
pub enum DumpError {
    /// The trace's samples could not be read.
    Read(ReadError),
    /// A trace of samples alone, and a format without samples.
    NoFunctionCalls {
        /// The trace.
        path: PathBuf,
        /// The format's name.
        format: &'static str,
    },
    /// A format of samples alone, and a trace without samples.
    NeedsSamples {
        /// The trace.
        path: PathBuf,
        /// The format's name.
        format: &'static str,
    },
}

impl fmt::Display for DumpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DumpError::Read(e) => write!(f, "{e}"),
            DumpError::NoFunctionCalls { path, format } => {
                // The formats that write samples, those made for samples first.
                let mut names: Vec<&str> = [Samples::Always, Samples::WithoutFunctions]
                    .iter()
                    .flat_map(|&when| {
                        FORMATS
                            .iter()
                            .filter(move |x| x.writes_samples() == when)
                            .map(|x| x.name())
                    })
                    .collect();
                let last = names.pop().unwrap_or_default();
                write!(
                    f,
                    "{}: a trace of samples has no function calls to dump as {format}; use --format {}{}{last}",
                    path.display(),
                    names.join(", "),
                    if names.is_empty() { "" } else { " or " },
                )
            }
            DumpError::NeedsSamples { path, format } => write!(
                f,
                "{}: --format {format} is for traces with samples (ferrotrace profile); use perfetto or chrome for function traces",
                path.display()
            ),
        }
    }
}

impl std::error::Error for DumpError {}

/// What `dump` writes of `trace` in `format`: its samples when the format is for samples, or when the
/// trace holds samples and no function calls (a profile); otherwise its function calls. An error when
/// the format has no form for what the trace holds.
pub fn plan(trace: &Trace, format: &dyn Exporter) -> Result<Plan, DumpError> {
    if format.writes_samples() == Samples::Streamed {
        return Ok(Plan::Functions);
    }
    let only_samples = !trace.has_function_events();
    let samples = format.writes_samples();
    let set = SampleSet::load(trace)
        .map_err(DumpError::Read)?
        .filter(|_| only_samples || samples == Samples::Always);
    match set {
        Some(_) if samples == Samples::Never => Err(DumpError::NoFunctionCalls {
            path: trace.path().to_path_buf(),
            format: format.name(),
        }),
        Some(set) => Ok(Plan::Samples(Box::new(set))),
        None if !format.writes_functions() => Err(DumpError::NeedsSamples {
            path: trace.path().to_path_buf(),
            format: format.name(),
        }),
        None => Ok(Plan::Functions),
    }
}

/// A balanced event for exporters.
#[derive(Clone, Copy, Debug)]
pub enum Ev<'a> {
    /// A frame opened.
    Begin {
        /// Thread.
        tid: u32,
        /// Function id.
        id: u32,
        /// CLOCK_MONOTONIC ns.
        ts: u64,
        /// Depth of the frame (0 = outermost).
        depth: usize,
        /// Its arguments as replay shows them (`record -A`), or "".
        args: &'a str,
    },
    /// A frame closed.
    End {
        /// Thread.
        tid: u32,
        /// Function id.
        id: u32,
        /// CLOCK_MONOTONIC ns.
        ts: u64,
        /// Depth of the frame.
        depth: usize,
        /// Why.
        how: EndKind,
        /// Its return value as replay shows it (`record -R`), or "".
        retval: &'a str,
    },
    /// Anything else: lost events, waits, tracepoints, allocations.
    Instant {
        /// Thread.
        tid: u32,
        /// CLOCK_MONOTONIC ns.
        ts: u64,
        /// Kind.
        kind: EventKind,
        /// Id or count.
        id: u32,
        /// Payload.
        payload: &'a [u8],
        /// Fields (allocation size and address).
        fields: EventFields,
        /// Current depth.
        depth: usize,
    },
}

/// Streams `trace` as balanced events in time order. Returns the read errors met (each ended one
/// thread's events early); errors of `f` stop the walk.
pub fn walk(
    trace: &Trace,
    progress: &mut Progress,
    mut f: impl FnMut(Ev<'_>) -> io::Result<()>,
) -> io::Result<Vec<String>> {
    let mut values = PendingValues::default();
    walk_stacks(trace, progress, |tid, step| match step {
        Step::Values(e) => {
            values.set(trace, &e);
            Ok(())
        }
        Step::Stack(se) => {
            let taken = values.take_for(&se);
            f(convert(trace, tid, se, taken.as_deref().unwrap_or("")))
        }
        Step::Other(e, depth) => f(Ev::Instant {
            tid,
            ts: e.ts_ns,
            kind: e.kind,
            id: e.id,
            payload: e.payload,
            fields: e.fields,
            depth,
        }),
    })
}

/// The shown values of the function event [`walk_stacks`] is at ([`Step::Values`]), until the stack
/// event it makes takes them.
#[derive(Default)]
pub(crate) struct PendingValues(Option<(u32, EventKind, Box<str>)>);

impl PendingValues {
    /// Keeps the values of `e` as replay shows them.
    pub(crate) fn set(&mut self, trace: &Trace, e: &EventRef<'_>) {
        self.0 = crate::replay::shown_values(trace, e).map(|v| (e.id, e.kind, v));
    }

    /// The values for `se`: an entry's arguments for the frame it opens, an exit's return value for
    /// the frame it closes by returning.
    pub(crate) fn take_for(&mut self, se: &StackEvent) -> Option<Box<str>> {
        match (&self.0, se) {
            (Some((id, EventKind::Entry, _)), StackEvent::Enter { id: of, .. })
            | (
                Some((id, EventKind::Exit, _)),
                StackEvent::Leave {
                    frame: crate::callstack::Frame { id: of, .. },
                    how: EndKind::Return,
                    ..
                },
            ) if id == of => self.0.take().map(|v| v.2),
            _ => None,
        }
    }
}

/// What `walk_stacks` puts in the second field of a Free event (unused by the format: 0) when the
/// trace never saw its block allocated (allocated before recording started): exporters mark such a
/// free ([`instant`]: `free (allocated before recording)`, argument `allocated_before_recording`),
/// and the heap counters ignore it.
pub const FREE_OF_UNSEEN_BLOCK: u64 = 1;

/// One step of [`walk_stacks`] on a thread.
pub(crate) enum Step<'a> {
    /// A function's entry or exit that carries values (`record -A`, `-R`), just before the stack
    /// events it makes.
    Values(EventRef<'a>),
    /// The thread's call stack opened or closed a frame (times in TSC ticks).
    Stack(StackEvent),
    /// An event that is not a function's entry or exit, and the depth of its thread's stack.
    Other(EventRef<'a>, usize),
}

/// The one walk of the exporters of function calls: the events of `trace` in time order through a
/// call stack per thread (in TSC ticks, opened with the functions running when tracing began), then
/// the frames still open at the end, thread by thread. `f` gets each step with its thread. Returns
/// the read errors met (each ended one thread's events early); errors of `f` stop the walk.
pub(crate) fn walk_stacks(
    trace: &Trace,
    progress: &mut Progress,
    mut f: impl FnMut(u32, Step<'_>) -> io::Result<()>,
) -> io::Result<Vec<String>> {
    let mut errors = Vec::new();
    let initial = initial_stacks(trace).unwrap_or_else(|e| {
        errors.push(e.to_string());
        HashMap::new()
    });
    // The stacks by thread, and the index of each thread's: events come in runs of one thread, so
    // the last thread's index is kept and the map is consulted only when the thread changes.
    let mut stacks: Vec<(u32, CallStack)> = trace
        .threads()
        .keys()
        .map(|&t| {
            (
                t,
                CallStack::with_initial(initial.get(&t).cloned().unwrap_or_default()),
            )
        })
        .collect();
    let mut index: HashMap<u32, usize> = stacks
        .iter()
        .enumerate()
        .map(|(i, (t, _))| (*t, i))
        .collect();
    let mut last: Option<(u32, usize)> = None;
    let mut merged = match trace.events() {
        Ok(m) => m,
        Err(e) => {
            errors.push(e.to_string());
            return Ok(errors);
        }
    };
    let mut n = 0u64;
    let mut pending: Vec<StackEvent> = Vec::new();
    // The blocks allocated and not yet freed, so that a free of one never seen allocated is marked.
    let mut live_blocks: HashSet<u64> = HashSet::new();
    while let Some(e) = merged.next_ref() {
        let mut e = match e {
            Ok(e) => e,
            Err(err) => {
                errors.push(err.to_string());
                continue;
            }
        };
        n += 1;
        if n & 0xffff == 0 {
            progress.add(0x10000);
        }
        let tid = e.tid;
        let at = match last {
            Some((t, i)) if t == tid => i,
            _ => {
                let i = *index.entry(tid).or_insert_with(|| {
                    stacks.push((tid, CallStack::default()));
                    stacks.len() - 1
                });
                last = Some((tid, i));
                i
            }
        };
        let st = &mut stacks[at].1;
        // The stack's events go straight to `f` (not through a buffer: a push and a pop per event);
        // after an error of `f` the rest of this event's are dropped and the walk stops.
        if !e.payload.is_empty() && e.kind.is_function() {
            f(tid, Step::Values(e))?;
        }
        let mut written = Ok(());
        let mut emit = |se| {
            if written.is_ok() {
                written = f(tid, Step::Stack(se));
            }
        };
        st.touch(e.tsc, &mut emit);
        let is_fn = st.process(e.kind, e.id, e.tsc, &mut emit);
        written?;
        let depth = st.depth();
        if !is_fn {
            match e.kind {
                EventKind::Alloc => {
                    live_blocks.insert(e.fields[1]);
                }
                EventKind::Free if !live_blocks.remove(&e.fields[0]) => {
                    e.fields[1] = FREE_OF_UNSEEN_BLOCK;
                }
                _ => {}
            }
            f(tid, Step::Other(e, depth))?;
        }
    }
    progress.add(n & 0xffff);
    drop(merged);
    stacks.sort_unstable_by_key(|(t, _)| *t);
    for (tid, st) in &mut stacks {
        st.finish(&mut |se| pending.push(se));
        for se in pending.drain(..) {
            f(*tid, Step::Stack(se))?;
        }
    }
    Ok(errors)
}

/// A stack event (in TSC ticks) as an exporter's event (in nanoseconds), with the shown `values`
/// of its entry or exit.
fn convert<'v>(trace: &Trace, tid: u32, se: StackEvent, values: &'v str) -> Ev<'v> {
    match se {
        StackEvent::Enter {
            id, time, depth, ..
        } => Ev::Begin {
            tid,
            id,
            ts: trace.tsc_to_ns(time),
            depth,
            args: values,
        },
        StackEvent::Leave {
            frame,
            end,
            depth,
            how,
        } => Ev::End {
            tid,
            id: frame.id,
            ts: trace.tsc_to_ns(end),
            depth,
            how,
            retval: values,
        },
        // Never produced after a pre-scan; an instant with no payload keeps the stream valid.
        StackEvent::OrphanExit { id, time } => Ev::Instant {
            tid,
            ts: trace.tsc_to_ns(time),
            kind: EventKind::Exit,
            id,
            payload: &[],
            fields: EventFields::default(),
            depth: 0,
        },
    }
}

/// How the exporters show an instant event: its name and, for tracepoints, its named arguments.
/// `trace` gives tracepoint descriptors (`None`: tracepoint events are named by id), `name_of` the name
/// of a function id (an exit without entry names its function).
pub fn instant(
    trace: Option<&Trace>,
    name_of: &dyn Fn(u32) -> String,
    kind: EventKind,
    id: u32,
    payload: &[u8],
    fields: &EventFields,
) -> (String, Args) {
    use crate::tracepoints::Value;
    let name = match kind {
        EventKind::Lost => format!("LOST {id} events"),
        EventKind::Wait => format!("ferrotrace waited {id} ns for a buffer"),
        EventKind::Tracepoint => match trace {
            Some(trace) => return crate::tracepoints::name_and_args(trace, id, payload),
            None => format!("tracepoint #{id}"),
        },
        EventKind::Alloc => {
            return (
                "malloc".into(),
                vec![
                    ("size".into(), Value::Unsigned(fields[0])),
                    ("address".into(), Value::Unsigned(fields[1])),
                ],
            )
        }
        EventKind::Free if fields[1] == FREE_OF_UNSEEN_BLOCK => {
            return (
                "free (allocated before recording)".into(),
                vec![
                    ("address".into(), Value::Unsigned(fields[0])),
                    ("allocated_before_recording".into(), Value::Bool(true)),
                ],
            )
        }
        EventKind::Free => {
            return (
                "free".into(),
                vec![("address".into(), Value::Unsigned(fields[0]))],
            )
        }
        EventKind::Sample => {
            let sampler = trace
                .and_then(|t| t.samplers().get(fields[0] as usize))
                .map_or_else(|| format!("sampler {}", fields[0]), |s| s.spelling.clone());
            return (
                "sample".into(),
                vec![
                    ("sampler".into(), Value::Str(sampler)),
                    ("weight".into(), Value::Unsigned(fields[1])),
                ],
            );
        }
        _ => format!("exit of {} without entry", name_of(id)),
    };
    (name, Args::default())
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferrotrace_core::builder::TraceBuilder;
    use ferrotrace_core::schema::{source, Mode, SamplerKind};

    /// A trace of function calls (`functions`), samples (`samples`), or both.
    fn trace(name: &str, functions: bool, samples: bool) -> Trace {
        let sources =
            if functions { source::XRAY } else { 0 } | if samples { source::SAMPLES } else { 0 };
        let mut b = TraceBuilder::new(Vec::new(), "/bin/d", sources, Mode::Lossless).unwrap();
        b.thread(1, "main").unwrap();
        if functions {
            b.function(1, 0x1000, 16, "d::f").unwrap();
            b.event(1, 1_000, EventKind::Entry, 1).unwrap();
            b.event(1, 2_000, EventKind::Exit, 1).unwrap();
        }
        if samples {
            let cpu = b.sampler(SamplerKind::CpuClock, "cpu-clock");
            b.sample(1, 1_500, None, cpu, 1_000).unwrap();
        }
        let path = std::env::temp_dir().join(format!("ft-dump-{}-{name}.data", std::process::id()));
        std::fs::write(&path, b.finish().unwrap()).unwrap();
        let t = Trace::open(&path).unwrap();
        let _ = std::fs::remove_file(&path);
        t
    }

    fn planned(t: &Trace, name: &str) -> Result<&'static str, String> {
        match plan(t, format(name).unwrap()) {
            Ok(Plan::Functions) => Ok("functions"),
            Ok(Plan::Samples(_)) => Ok("samples"),
            Err(e) => Err(e.to_string()),
        }
    }

    #[test]
    fn formats_are_found_by_their_distinct_names() {
        for f in FORMATS {
            assert!(std::ptr::addr_eq(format(f.name()).unwrap(), *f));
        }
        let mut names: Vec<&str> = FORMATS.iter().map(|f| f.name()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), FORMATS.len());
        assert!(format("svg").is_none());
    }

    #[test]
    fn each_format_writes_what_the_trace_holds_or_says_why_not() {
        let functions = trace("functions", true, false);
        let samples = trace("samples", false, true);
        let both = trace("both", true, true);
        for name in ["uftrace", "chrome", "perfetto", "folded"] {
            assert_eq!(planned(&functions, name), Ok("functions"), "{name}");
            assert_eq!(planned(&both, name), Ok("functions"), "{name}");
        }
        for name in ["perfetto", "folded", "firefox"] {
            assert_eq!(planned(&samples, name), Ok("samples"), "{name}");
        }
        assert_eq!(planned(&both, "firefox"), Ok("samples"));
        // Parquet streams whatever the trace holds, samples with the rest; pprof reads the samples
        // itself (by address), or else the allocations or function calls.
        for t in [&functions, &samples, &both] {
            assert_eq!(planned(t, "parquet"), Ok("functions"));
            assert_eq!(planned(t, "pprof"), Ok("functions"));
        }
        let path = samples.path().display();
        assert_eq!(
            planned(&samples, "chrome"),
            Err(format!(
                "{path}: a trace of samples has no function calls to dump as chrome; use --format \
                 firefox, perfetto or folded"
            ))
        );
        let path = functions.path().display();
        assert_eq!(
            planned(&functions, "firefox"),
            Err(format!(
                "{path}: --format firefox is for traces with samples (ferrotrace profile); use \
                 perfetto or chrome for function traces"
            ))
        );
    }
}
