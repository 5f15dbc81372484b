//! The streaming trace reader: [`Trace`] and its public API.
//!
//! Four rooms: [`model`] (what a trace holds and its events), `index` (the one pass that indexes
//! the chunks and checks the file's integrity), `chunks` (each thread's list of chunks, in memory
//! bounded per thread: older entries go to a temporary file) and [`stream`] (events per thread or
//! merged in time order, one decoded chunk per thread in memory), with `ahead` (a thread's chunks
//! decoded on a second core while the caller aggregates the previous ones).

mod ahead;
mod chunks;
mod index;
pub mod model;
pub mod problem;
pub mod stream;

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::path::{Path, PathBuf};

use ferrotrace_core::clock::{ClockPair, TscConverter};
use ferrotrace_core::schema;

pub use ahead::{for_each_batch, Batch};
pub use model::{
    demangle, ArgSpecs, CallGraph, ChunkRef, End, Event, EventKind, EventRef, Function, Module,
    ReadError, Sampler, SamplerKind, Session, StackNode, Thread, Truncation, NO_MODULE,
};
pub use problem::Problem;
pub use stream::{MergedEvents, ThreadEvents};

/// An Events chunk as the index pass reads it ([`Trace::open_with_events`]).
pub struct EventsChunk<'p> {
    /// Its thread.
    pub tid: u32,
    /// Its entry in the thread's index.
    pub chunk: ChunkRef,
    /// Its payload: the Events header, then the events.
    pub payload: &'p [u8],
    /// The Session chunk's sources ([`schema::source`]), as read before this chunk (0 without it).
    pub sources: u64,
}

/// An opened trace: metadata and the index of event chunks.
#[derive(Debug)]
pub struct Trace {
    path: PathBuf,
    /// One descriptor for every event stream (positional reads), however many threads there are.
    file: File,
    /// File size in bytes.
    file_len: u64,
    /// Bytes that were read and verified.
    valid_len: u64,
    /// `(major, minor)` format version.
    version: (u16, u16),
    /// Process metadata.
    session: Session,
    /// Calibration pairs in file order.
    clocks: Vec<ClockPair>,
    /// Loaded objects.
    pub(crate) modules: Vec<Module>,
    /// Traced functions by id.
    pub(crate) functions: HashMap<u32, Function>,
    /// Threads by tid.
    threads: BTreeMap<u32, Thread>,
    /// Tracepoint descriptors by id (from the Tracepoints chunk); see [`crate::tracepoints`].
    tracepoints: HashMap<u32, crate::tracepoints::TracepointDesc>,
    /// What the entries and exits of functions with recorded values carry (ArgSpecs chunks).
    arg_specs: HashMap<u32, ArgSpecs>,
    /// Present when the trace was ended properly.
    end: Option<End>,
    /// Present when the process died without an End chunk and `ferrotrace record` appended what it had
    /// not written (recovered from the chunk pool it shared with record).
    salvage: Option<schema::Salvage>,
    /// The RunningAtStart chunk: per thread, the functions already running when its tracing began.
    running: Option<HashMap<u32, Vec<u32>>>,
    /// The number the next chunk appended to the readable prefix must carry (chunks are numbered).
    next_chunk_seq: u32,
    /// Set when reading stopped early.
    truncation: Option<Truncation>,
    /// Chunks of kinds this reader does not know (skipped).
    unknown_chunks: u64,
    /// What is wrong with the trace besides a cut-short tail: chunks missing, duplicated, out of
    /// place, after the end, or an End chunk that disagrees with what was read. Commands print these
    /// as warnings: the results are not what was recorded.
    problems: Vec<Problem>,
    /// How the stacks of samples were taken (from the Samplers chunk).
    call_graph: CallGraph,
    /// Timer frequency of the samplers, Hz (0 without a timer).
    sample_frequency: u32,
    /// The samplers; Sample events refer to them by index.
    samplers: Vec<Sampler>,
    /// What the sampler lost, when its samples were merged into a function trace (`record
    /// --sample`); `None` in a profile's own trace, whose End chunk counts it.
    sampler_losses: Option<schema::SamplerLosses>,
    /// The interned stacks of samples and allocations, by id.
    stacks: Vec<StackNode>,
    /// The UnwindStops chunk: why the in-kernel unwinder stopped stacks early.
    unwind_stops: Option<schema::UnwindStops>,
    /// Events chunks that belong to no thread's sequence (a duplicated per-thread number): skipped.
    skipped_chunks: u64,
    /// Where the threads' chunk lists keep their older entries.
    spill: chunks::SpillFile,
    converter: TscConverter,
}

impl Trace {
    /// File size in bytes.
    pub fn file_len(&self) -> u64 {
        self.file_len
    }

    /// Bytes that were read and verified: the readable prefix.
    pub fn valid_len(&self) -> u64 {
        self.valid_len
    }

    /// The `(major, minor)` format version.
    pub fn version(&self) -> (u16, u16) {
        self.version
    }

    /// Process metadata (the Session chunk).
    pub fn session(&self) -> &Session {
        &self.session
    }

    /// Calibration pairs in file order.
    pub fn clocks(&self) -> &[ClockPair] {
        &self.clocks
    }

    /// Loaded objects.
    pub fn modules(&self) -> &[Module] {
        &self.modules
    }

    /// Traced functions by id.
    pub fn functions(&self) -> &HashMap<u32, Function> {
        &self.functions
    }

    /// Threads by tid.
    pub fn threads(&self) -> &BTreeMap<u32, Thread> {
        &self.threads
    }

    /// Tracepoint descriptors by id (from the Tracepoints chunk); see [`crate::tracepoints`].
    pub fn tracepoints(&self) -> &HashMap<u32, crate::tracepoints::TracepointDesc> {
        &self.tracepoints
    }

    /// What function `id`'s entries (arguments) and exits (return value) carry, when the recording
    /// kept its values (`record -A`, `-R`).
    pub fn arg_specs(&self, id: u32) -> Option<&ArgSpecs> {
        self.arg_specs.get(&id)
    }

    /// True when some function's arguments or return values were recorded.
    pub fn has_arg_specs(&self) -> bool {
        !self.arg_specs.is_empty()
    }

    /// The End chunk: present when the trace was ended properly.
    pub fn end(&self) -> Option<End> {
        self.end
    }

    /// Present when the process died without an End chunk and `ferrotrace record` appended what it
    /// had not written (recovered from the chunk pool it shared with record).
    pub fn salvage(&self) -> Option<&schema::Salvage> {
        self.salvage.as_ref()
    }

    /// The number the next chunk appended to the readable prefix must carry (chunks are numbered).
    pub fn next_chunk_seq(&self) -> u32 {
        self.next_chunk_seq
    }

    /// Where and why reading stopped early; `None` for a trace read to its end.
    pub fn truncation(&self) -> Option<&Truncation> {
        self.truncation.as_ref()
    }

    /// Chunks of kinds this reader does not know (skipped).
    pub fn unknown_chunks(&self) -> u64 {
        self.unknown_chunks
    }

    /// What is wrong with the trace besides a cut-short tail: chunks missing, duplicated, out of
    /// place, after the end, or an End chunk that disagrees with what was read. Commands print these
    /// as warnings ([`Trace::warnings`]): the results are not what was recorded.
    pub fn problems(&self) -> &[Problem] {
        &self.problems
    }

    /// How the stacks of samples were taken (from the Samplers chunk).
    pub fn call_graph(&self) -> CallGraph {
        self.call_graph
    }

    /// Timer frequency of the samplers, Hz (0 without a timer).
    pub fn sample_frequency(&self) -> u32 {
        self.sample_frequency
    }

    /// The samplers; Sample events refer to them by index.
    pub fn samplers(&self) -> &[Sampler] {
        &self.samplers
    }

    /// What the sampler lost, when its samples were merged into a function trace (`record
    /// --sample`); `None` in a profile's own trace, whose End chunk counts it.
    pub fn sampler_losses(&self) -> Option<schema::SamplerLosses> {
        self.sampler_losses
    }

    /// The interned stacks of samples and allocations, by id.
    pub fn stacks(&self) -> &[StackNode] {
        &self.stacks
    }

    /// Why the in-kernel unwinder stopped stacks early, per reason (`profile --bpf`); `None` when
    /// the trace does not say (other recorders, or none stopped early).
    pub fn unwind_stops(&self) -> Option<schema::UnwindStops> {
        self.unwind_stops
    }

    /// What a command must say after its results (one `ferrotrace: warning:` line each): the
    /// trace's problems and a truncated tail. Empty for a trace read whole and sound.
    pub fn warnings(&self) -> Vec<String> {
        let path = self.path().display();
        let mut v: Vec<String> = self
            .problems
            .iter()
            .map(|p| {
                format!("ferrotrace: warning: {path}: {p}; results may not be what was recorded")
            })
            .collect();
        if let Some(t) = &self.truncation {
            v.push(format!(
                "ferrotrace: warning: {path}: truncated at byte {} of {} ({}); results cover the \
                 readable prefix",
                t.offset, self.file_len, t.reason
            ));
        }
        v
    }

    /// Opens and indexes a trace. A truncated or corrupt tail is not an error: reading stops there and
    /// [`Trace::truncation`] says where and why.
    pub fn open(path: impl AsRef<Path>) -> Result<Trace, ReadError> {
        index::open(path.as_ref(), &mut |_, _| {})
    }

    /// Like [`Trace::open`], and hands every Events chunk to `each` as the index pass reads it: after
    /// its checksum and header were checked and it was indexed, in file order, so that a command that
    /// can work chunk by chunk reads the file once. The chunks handed over are those of the readable
    /// prefix, but not yet judged as a whole: the trace's [`Trace::problems`] (chunks missing,
    /// repeated, out of order) are known only when it returns.
    pub fn open_with_events(
        path: impl AsRef<Path>,
        mut each: impl FnMut(&Path, EventsChunk<'_>),
    ) -> Result<Trace, ReadError> {
        index::open(path.as_ref(), &mut each)
    }

    /// Per thread, the functions already running when its tracing began, outermost first, as the writer
    /// saw them: only when that is what the file holds too (complete, nothing missing or dropped);
    /// otherwise `None`, and a reader that needs them replays the threads to find them
    /// (`ferrotrace_analysis::callstack::initial_stacks`).
    pub fn running_at_start(&self) -> Option<&HashMap<u32, Vec<u32>>> {
        let whole = self.end.is_some_and(|e| e.dropped_chunks == 0)
            && self.truncation.is_none()
            && self.problems.is_empty();
        self.running.as_ref().filter(|_| whole)
    }

    /// True when the trace holds function entries and exits (from any instrumentation).
    pub fn has_function_events(&self) -> bool {
        const FUNCTION_SOURCES: u64 = schema::source::XRAY
            | schema::source::MCOUNT
            | schema::source::FENTRY
            | schema::source::PATCHABLE_NOP
            | schema::source::EMBEDDED;
        !self.functions.is_empty() || self.session.sources & FUNCTION_SOURCES != 0
    }

    /// True when the trace's recorder says it recorded allocations (Alloc and Free events).
    pub fn has_allocations(&self) -> bool {
        self.session.sources & schema::source::ALLOCATIONS != 0
    }

    /// CLOCK_MONOTONIC at the trace's first Clock chunk (its start, for times shown relative to it);
    /// 0 without one.
    pub fn start_ns(&self) -> u64 {
        self.clocks.first().map_or(0, |c| c.mono_ns)
    }

    /// The trace file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Converts a raw TSC value to CLOCK_MONOTONIC nanoseconds.
    pub fn tsc_to_ns(&self, tsc: u64) -> u64 {
        self.converter.to_ns(tsc)
    }

    /// The raw TSC value at CLOCK_MONOTONIC `ns`: the inverse of [`Trace::tsc_to_ns`], for events
    /// stamped in nanoseconds put into this trace (`record --sample`'s samples).
    pub fn ns_to_tsc(&self, ns: u64) -> u64 {
        self.converter.to_ticks(ns)
    }

    /// Length of `ticks` TSC ticks in nanoseconds.
    pub fn ticks_to_ns(&self, ticks: u64) -> u64 {
        self.converter.ticks_to_ns(ticks)
    }

    /// Recording duration in nanoseconds (first to last calibration).
    pub fn duration_ns(&self) -> u64 {
        match (self.clocks.first(), self.clocks.last()) {
            (Some(a), Some(b)) => b.mono_ns.saturating_sub(a.mono_ns),
            _ => 0,
        }
    }

    /// Events in all threads.
    pub fn event_count(&self) -> u64 {
        self.threads
            .values()
            .fold(0u64, |a, t| a.saturating_add(t.events))
    }

    /// Function `id`'s name (demangled, without what [`crate::names::Names`] adds to tell functions of
    /// one name apart) and its link-time address (as `nm` shows it): what `-F`/`-N` match, as the
    /// runtime matches them at record time (`ferrotrace_core::pattern::NamePattern::matches_function`).
    pub fn filter_name(&self, id: u32) -> Option<(&str, u64)> {
        let f = self.functions.get(&id)?;
        let bias = self
            .modules
            .iter()
            .find(|m| m.id == f.module)
            .map_or(0, |m| m.bias);
        Some((f.name(), f.addr.wrapping_sub(bias)))
    }

    /// The Events chunks of thread `tid` in order (none for a tid the trace does not hold).
    pub fn thread_chunks(
        &self,
        tid: u32,
    ) -> impl Iterator<Item = Result<ChunkRef, ReadError>> + '_ {
        let mut cursor = self.threads.get(&tid).map(|t| t.chunks.iter(&self.spill));
        std::iter::from_fn(move || {
            let c = cursor.as_mut()?;
            let next = c.next_chunk().map_err(|e| self.index_error(e)).transpose();
            if matches!(next, Some(Err(_))) {
                cursor = None;
            }
            next
        })
    }

    /// What the chunk index holds in memory, in entries, over all threads: bounded by the number of
    /// threads (at most 256 each, unless a damaged trace holds a thread's chunks
    /// out of order), not by the size of the trace.
    pub fn index_entries_in_memory(&self) -> usize {
        self.threads.values().map(|t| t.chunks.in_memory()).sum()
    }

    /// Bytes of the chunk index kept in the temporary file.
    pub fn index_bytes_on_disk(&self) -> u64 {
        self.spill.len()
    }

    /// A failure to read the chunk index back from its temporary file.
    fn index_error(&self, e: std::io::Error) -> ReadError {
        ReadError::Io(
            self.path.clone(),
            std::io::Error::new(
                e.kind(),
                format!("reading the chunk index back from its temporary file: {e}"),
            ),
        )
    }

    /// The display name of function `id`, or `fn#id` when the table lacks it.
    pub fn function_name(&self, id: u32) -> String {
        self.functions
            .get(&id)
            .map_or_else(|| format!("fn#{id}"), |f| f.name().to_string())
    }
}
