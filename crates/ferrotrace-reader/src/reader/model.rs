//! The trace model: what a trace holds (session, modules, functions, threads, samplers) and its
//! events, owned ([`Event`]) and borrowed ([`EventRef`]), and why reading failed ([`ReadError`]).

use std::fmt;
use std::io;
use std::path::PathBuf;
use std::sync::OnceLock;

use ferrotrace_core::codec::EventFields;
pub use ferrotrace_core::record::EventKind;
use ferrotrace_core::schema;
pub use ferrotrace_core::schema::{CallGraph, SamplerKind, StackNode};

/// Why a trace could not be read.
#[derive(Debug)]
pub enum ReadError {
    /// The file could not be opened or read.
    Io(PathBuf, io::Error),
    /// The file is not a ferrotrace trace, or of a version this reader does not know.
    Format(PathBuf, String),
    /// A chunk that passed its checksum holds a malformed field (written by a buggy writer).
    Corrupt(PathBuf, u64, String),
}

impl fmt::Display for ReadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReadError::Io(p, e) => write!(f, "{}: {e}", p.display()),
            ReadError::Format(p, m) => write!(f, "{}: {m}", p.display()),
            ReadError::Corrupt(p, off, m) => {
                write!(f, "{}: corrupt chunk at byte {off}: {m}", p.display())
            }
        }
    }
}

impl std::error::Error for ReadError {}

/// Where and why reading stopped before the end of the file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Truncation {
    /// Byte offset of the first chunk that could not be read.
    pub offset: u64,
    /// What was wrong with it.
    pub reason: String,
}

/// Process metadata from the Session chunk.
#[derive(Clone, Debug, Default)]
pub struct Session {
    /// Process id.
    pub pid: u32,
    /// Parent process id.
    pub ppid: u32,
    /// Executable path.
    pub exe: String,
    /// Command line arguments.
    pub args: Vec<String>,
    /// Wall-clock start, ns since the epoch.
    pub start_realtime_ns: u64,
    /// ferrotrace version that wrote the trace.
    pub version: String,
    /// Recording mode; `None` when the Session chunk is missing (a trace cut inside it).
    pub mode: Option<schema::Mode>,
    /// Event-clock frequency estimate at start.
    pub tsc_hz: u64,
    /// What recorded the events: bits of [`schema::source`].
    pub sources: u64,
    /// Allocation events sampled one per this many bytes on average; 0: every allocation.
    pub alloc_sample: u64,
    /// `record -t`: calls shorter than this many nanoseconds were left out; 0: none was.
    pub min_call_ns: u64,
    /// The host it was recorded on; empty when the trace does not say.
    pub host: String,
    /// The kernel's boot id at the recording; empty when the trace does not say.
    pub boot_id: String,
}

impl Session {
    /// The executable's file name (no directory).
    pub fn exe_name(&self) -> &str {
        self.exe.rsplit('/').next().unwrap_or("")
    }

    /// The recording mode's name, `unknown` without a Session chunk.
    pub fn mode_name(&self) -> &'static str {
        self.mode.map_or("unknown", schema::Mode::name)
    }
}

/// A loaded object.
#[derive(Clone, Debug)]
pub struct Module {
    /// Module id.
    pub id: u32,
    /// Load bias.
    pub bias: u64,
    /// Size of its text.
    pub size: u64,
    /// File path.
    pub path: String,
    /// GNU build-id bytes.
    pub build_id: Vec<u8>,
}

/// The module of a function that is in no loaded object: a `tracing` span (from a Callsites chunk).
pub const NO_MODULE: u32 = u32::MAX;

pub use ferrotrace_core::argspec::ArgSpecs;

/// A traced function from the embedded symbol table, or a `tracing` span (module [`NO_MODULE`],
/// address 0, named by the span's name).
#[derive(Clone, Debug)]
pub struct Function {
    /// Function id as recorded in events.
    pub id: u32,
    /// Module id.
    pub module: u32,
    /// Runtime address.
    pub addr: u64,
    /// Symbol size (0 if unknown).
    pub size: u64,
    /// Symbol name as in the binary (mangled).
    pub mangled: String,
    /// Demangled name without hash, made when first asked for ([`Function::name`]): a trace names
    /// thousands of functions, and commands such as `record`'s summary or `info` need none of them.
    demangled: OnceLock<String>,
}

impl Function {
    /// The function `mangled` (as in the binary) at `addr`, size `size`, in module `module`.
    pub fn new(id: u32, module: u32, addr: u64, size: u64, mangled: String) -> Function {
        Function {
            id,
            module,
            addr,
            size,
            mangled,
            demangled: OnceLock::new(),
        }
    }

    /// Demangled name without hash (`myapp::parse`).
    pub fn name(&self) -> &str {
        self.demangled.get_or_init(|| demangle(&self.mangled))
    }
}

/// A reference to one Events chunk in the file.
#[derive(Clone, Copy, Debug)]
pub struct ChunkRef {
    /// Offset of the chunk payload.
    pub offset: u64,
    /// Payload length.
    pub len: u32,
    /// Per-thread sequence number.
    pub seq: u32,
    /// Events in the chunk.
    pub count: u64,
}

/// A thread seen in the trace.
#[derive(Clone, Debug, Default)]
pub struct Thread {
    /// OS thread id.
    pub tid: u32,
    /// Its process (the Session's pid unless the trace holds several processes).
    pub pid: u32,
    /// Last name recorded for it.
    pub name: String,
    /// Its event chunks, in order ([`super::Trace::thread_chunks`]).
    pub chunks: super::chunks::ChunkList,
    /// Its Samples chunks (`record --sample`), in order: sample events merged in time order with
    /// those of `chunks` when the thread is read. Few (a chunk holds thousands of samples): kept in
    /// memory.
    pub sample_chunks: Vec<ChunkRef>,
    /// Events in all its chunks (Events and Samples).
    pub events: u64,
    /// The tick of its first event (decoded by the index pass): a time-ordered merge places a thread
    /// by it without decoding a chunk, so that only the threads it has reached hold one in memory.
    /// `None` when not known (its chunks were out of order in the file, or the first is damaged).
    pub first_tsc: Option<u64>,
    /// The clock (ticks: [`super::Trace::tsc_to_ns`]) when the runtime had registered it, as its
    /// Thread chunk says (format 2.6's trailing `registered_ticks`): its first function entry is no
    /// earlier. `None` when not said (older traces, other writers).
    pub registered_tsc: Option<u64>,
}

impl Thread {
    /// Its Events chunks came in the file in the order of their numbers (a sound trace's always do):
    /// reading them in file order reads them in order.
    pub fn chunks_in_file_order(&self) -> bool {
        !self.chunks.disordered
    }

    /// Number of its Events chunks.
    pub fn chunk_count(&self) -> u64 {
        self.chunks.len()
    }
}

/// The End chunk: present only in complete traces.
pub type End = schema::End;

/// A sampler of the trace (see the Samplers chunk): what its Sample events stand for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sampler {
    /// What it samples on.
    pub kind: SamplerKind,
    /// How the user spelled it (`cpu-clock`, `uprobe:/lib/...:malloc`, `sched:sched_switch`).
    pub spelling: String,
}

/// One event, decoded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    /// Thread id.
    pub tid: u32,
    /// CLOCK_MONOTONIC nanoseconds.
    pub ts_ns: u64,
    /// Raw TSC.
    pub tsc: u64,
    /// What happened.
    pub kind: EventKind,
    /// Function id, tracepoint id, or count.
    pub id: u32,
    /// Payload (tracepoint arguments); empty for other events.
    pub payload: Vec<u8>,
    /// Fields of allocation and sample events (see [`ferrotrace_core::codec::EventFields`]).
    pub fields: EventFields,
}

/// The name users see: demangled (Rust v0 and legacy), without the hash.
pub fn demangle(mangled: &str) -> String {
    ferrotrace_core::symbols::display_name(mangled)
}

/// One event, borrowed from the reader's chunk buffer: the allocation-free form that the analyses use
/// ([`ThreadEvents::next_ref`], [`MergedEvents::next_ref`]).
///
/// [`ThreadEvents::next_ref`]: super::ThreadEvents::next_ref
/// [`MergedEvents::next_ref`]: super::MergedEvents::next_ref
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EventRef<'b> {
    /// Thread id.
    pub tid: u32,
    /// CLOCK_MONOTONIC nanoseconds.
    pub ts_ns: u64,
    /// Raw TSC.
    pub tsc: u64,
    /// What happened.
    pub kind: EventKind,
    /// Function id, tracepoint id, or count.
    pub id: u32,
    /// Payload (tracepoint arguments); empty for other events.
    pub payload: &'b [u8],
    /// Fields of allocation and sample events (see [`ferrotrace_core::codec::EventFields`]).
    pub fields: EventFields,
}

impl EventRef<'_> {
    /// An owned copy.
    pub fn to_event(&self) -> Event {
        Event {
            tid: self.tid,
            ts_ns: self.ts_ns,
            tsc: self.tsc,
            kind: self.kind,
            id: self.id,
            payload: self.payload.to_vec(),
            fields: self.fields,
        }
    }
}
