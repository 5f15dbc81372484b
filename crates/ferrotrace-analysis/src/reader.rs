//! The streaming trace reader.

use std::collections::{BTreeMap, BinaryHeap, HashMap};
use std::fmt;
use std::fs::File;
use std::io::{self, BufReader, Read};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use ferrotrace_core::clock::{ClockPair, TscConverter};
use ferrotrace_core::codec::{DecodeError, EventDecoder, EventFields, FieldReader};
use ferrotrace_core::format::{
    parse_file_header, ChunkHeader, ChunkKind, HeaderError, CHUNK_HEADER_LEN, FILE_HEADER_LEN,
    MAX_CHUNK_PAYLOAD, VERSION_MAJOR,
};
pub use ferrotrace_core::record::EventKind;
use ferrotrace_core::schema::{self, Payload};
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

/// A traced function from the embedded symbol table.
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
    /// Its event chunks, in order.
    pub chunks: Vec<ChunkRef>,
    /// Events in all its chunks.
    pub events: u64,
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

/// An opened trace: metadata and the index of event chunks.
#[derive(Debug)]
pub struct Trace {
    path: PathBuf,
    /// One descriptor for every event stream (positional reads), however many threads there are.
    file: File,
    /// File size in bytes.
    pub file_len: u64,
    /// Bytes that were read and verified.
    pub valid_len: u64,
    /// `(major, minor)` format version.
    pub version: (u16, u16),
    /// Process metadata.
    pub session: Session,
    /// Calibration pairs in file order.
    pub clocks: Vec<ClockPair>,
    /// Loaded objects.
    pub modules: Vec<Module>,
    /// Traced functions by id.
    pub functions: HashMap<u32, Function>,
    /// Threads by tid.
    pub threads: BTreeMap<u32, Thread>,
    /// Tracepoint descriptors by id (from the Tracepoints chunk); see [`crate::tracepoints`].
    pub tracepoints: HashMap<u32, crate::tracepoints::TracepointDesc>,
    /// Present when the trace was ended properly.
    pub end: Option<End>,
    /// Present when the process died without an End chunk and `ferrotrace record` appended what it had
    /// not written (recovered from the chunk pool it shared with record).
    pub salvage: Option<schema::Salvage>,
    /// The RunningAtStart chunk: per thread, the functions already running when its tracing began.
    running: Option<HashMap<u32, Vec<u32>>>,
    /// The number the next chunk appended to the readable prefix must carry (chunks are numbered).
    pub next_chunk_seq: u32,
    /// Set when reading stopped early.
    pub truncation: Option<Truncation>,
    /// Chunks of kinds this reader does not know (skipped).
    pub unknown_chunks: u64,
    /// What is wrong with the trace besides a cut-short tail: chunks missing, duplicated, out of
    /// place, after the end, or an End chunk that disagrees with what was read. Commands print these
    /// as warnings: the results are not what was recorded.
    pub problems: Vec<String>,
    /// How the stacks of samples were taken (from the Samplers chunk).
    pub call_graph: CallGraph,
    /// Timer frequency of the samplers, Hz (0 without a timer).
    pub sample_frequency: u32,
    /// The samplers; Sample events refer to them by index.
    pub samplers: Vec<Sampler>,
    /// The interned stacks of samples and allocations, by id.
    pub stacks: Vec<StackNode>,
    /// Events chunks that belong to no thread's sequence (a duplicated per-thread number): skipped.
    skipped_chunks: u64,
    converter: TscConverter,
}

fn decode_err(path: &Path, offset: u64, e: DecodeError) -> ReadError {
    ReadError::Corrupt(path.to_path_buf(), offset, e.to_string())
}

/// The name users see: demangled (Rust v0 and legacy), without the hash.
pub fn demangle(mangled: &str) -> String {
    ferrotrace_core::symbols::display_name(mangled)
}

impl Trace {
    /// Opens and indexes a trace. A truncated or corrupt tail is not an error: reading stops there and
    /// [`Trace::truncation`] says where and why.
    pub fn open(path: impl AsRef<Path>) -> Result<Trace, ReadError> {
        let path = path.as_ref().to_path_buf();
        let io_err = |e| ReadError::Io(path.clone(), e);
        let file = File::open(&path).map_err(io_err)?;
        let file_len = file.metadata().map_err(io_err)?.len();
        let mut r = BufReader::with_capacity(1 << 20, file.try_clone().map_err(io_err)?);
        let mut header = [0u8; FILE_HEADER_LEN];
        let got = read_up_to(&mut r, &mut header).map_err(io_err)?;
        let version = parse_file_header(&header[..got]).map_err(|e| {
            ReadError::Format(
                path.clone(),
                match e {
                    HeaderError::Short => format!("only {got} bytes: too short to be a ferrotrace trace"),
                    HeaderError::NotATrace => "not a ferrotrace trace (bad magic)".into(),
                    HeaderError::UnsupportedVersion(a, b) => format!(
                        "trace format version {a}.{b} is not supported by this ferrotrace (it reads \
                         {VERSION_MAJOR}.x){}",
                        if a < VERSION_MAJOR {
                            ": it was written by an older ferrotrace; read it with that version, or \
                             record it again"
                        } else {
                            ": upgrade ferrotrace to read it"
                        }
                    ),
                },
            )
        })?;
        let mut t = Trace {
            path: path.clone(),
            file,
            file_len,
            valid_len: FILE_HEADER_LEN as u64,
            version,
            session: Session::default(),
            clocks: Vec::new(),
            modules: Vec::new(),
            functions: HashMap::new(),
            threads: BTreeMap::new(),
            tracepoints: HashMap::new(),
            end: None,
            salvage: None,
            running: None,
            next_chunk_seq: 0,
            truncation: None,
            unknown_chunks: 0,
            problems: Vec::new(),
            call_graph: CallGraph::None,
            sample_frequency: 0,
            samplers: Vec::new(),
            stacks: Vec::new(),
            skipped_chunks: 0,
            converter: TscConverter::new(ClockPair::default(), ClockPair::default()),
        };
        t.session.mode = None;
        let mut offset = FILE_HEADER_LEN as u64;
        let mut payload = Vec::new();
        let mut next_seq = 0u32;
        let mut after_end = 0u64;
        loop {
            if offset == file_len {
                break;
            }
            let mut hb = [0u8; CHUNK_HEADER_LEN];
            let got = read_up_to(&mut r, &mut hb).map_err(io_err)?;
            if got < CHUNK_HEADER_LEN {
                t.truncation = Some(Truncation {
                    offset,
                    reason: format!("chunk header cut short ({got} of 12 bytes)"),
                });
                break;
            }
            let h = ChunkHeader::decode(&hb);
            if h.len > MAX_CHUNK_PAYLOAD {
                t.truncation = Some(Truncation {
                    offset,
                    reason: format!("implausible chunk length {}", h.len),
                });
                break;
            }
            payload.resize(h.len as usize, 0);
            let got = read_up_to(&mut r, &mut payload).map_err(io_err)?;
            if got < h.len as usize {
                t.truncation = Some(Truncation {
                    offset,
                    reason: format!("chunk of {} bytes cut short after {got}", h.len),
                });
                break;
            }
            if !h.verify(&payload) {
                t.truncation = Some(Truncation {
                    offset,
                    reason: "checksum mismatch".into(),
                });
                break;
            }
            let payload_offset = offset + CHUNK_HEADER_LEN as u64;
            offset = payload_offset + h.len as u64;
            t.valid_len = offset;
            // Every chunk is numbered: a gap is a chunk that was lost, a repeat or a step back one
            // that was copied or moved. Either way the results would not be what was recorded.
            if h.seq != next_seq {
                if h.seq > next_seq {
                    t.problems.push(format!(
                        "chunks {next_seq}..{} are missing (before byte {})",
                        h.seq - 1,
                        payload_offset - CHUNK_HEADER_LEN as u64
                    ));
                } else {
                    t.problems.push(format!(
                        "chunk {} at byte {} repeats or is out of place (expected chunk {next_seq}): skipped",
                        h.seq,
                        payload_offset - CHUNK_HEADER_LEN as u64
                    ));
                    continue;
                }
            }
            next_seq = h.seq.wrapping_add(1);
            if t.end.is_some() {
                after_end += 1;
                continue;
            }
            if let Err(e) = t.index_chunk(h.kind, h.seq, &payload, payload_offset) {
                t.truncation = Some(Truncation {
                    offset: payload_offset - CHUNK_HEADER_LEN as u64,
                    reason: format!("malformed chunk: {e}"),
                });
                t.valid_len = payload_offset - CHUNK_HEADER_LEN as u64;
                next_seq = h.seq;
                break;
            }
        }
        t.next_chunk_seq = next_seq;
        if after_end > 0 {
            t.problems.push(format!(
                "{after_end} chunks follow the End chunk (appended later?): ignored"
            ));
        }
        t.check_threads();
        t.converter = match (t.clocks.first(), t.clocks.last()) {
            (Some(&a), Some(&b)) if b.tsc > a.tsc && b.mono_ns > a.mono_ns + 1_000_000 => {
                TscConverter::new(a, b)
            }
            (Some(&a), _) => TscConverter::from_hz(a, t.session.tsc_hz),
            _ => TscConverter::from_hz(ClockPair::default(), t.session.tsc_hz),
        };
        if t.clocks.is_empty() && t.truncation.is_none() {
            return Err(ReadError::Format(
                path,
                "no clock calibration in the trace".into(),
            ));
        }
        Ok(t)
    }

    fn index_chunk(
        &mut self,
        kind: u32,
        seq: u32,
        p: &[u8],
        offset: u64,
    ) -> Result<(), DecodeError> {
        let mut f = FieldReader::new(p);
        match ChunkKind::from_u32(kind) {
            Some(ChunkKind::Session) => {
                let s = schema::Session::decode(&mut f)?;
                self.session = Session {
                    pid: s.pid,
                    ppid: s.ppid,
                    exe: s.exe.to_string(),
                    args: s
                        .cmdline
                        .split(|&b| b == 0)
                        .map(|a| String::from_utf8_lossy(a).into_owned())
                        .collect(),
                    start_realtime_ns: s.start_realtime_ns,
                    version: s.version.to_string(),
                    mode: Some(s.mode),
                    tsc_hz: s.tick_hz,
                    sources: s.sources,
                    alloc_sample: s.alloc_sample,
                };
            }
            Some(ChunkKind::Clock) => {
                let c = schema::ClockSample::decode(&mut f)?;
                self.clocks.push(ClockPair {
                    tsc: c.ticks,
                    mono_ns: c.monotonic_ns,
                });
            }
            Some(ChunkKind::Module) => {
                let m = schema::Module::decode(&mut f)?;
                self.modules.push(Module {
                    id: m.id,
                    bias: m.bias,
                    size: m.size,
                    path: m.path.to_string(),
                    build_id: m.build_id.to_vec(),
                });
            }
            Some(ChunkKind::Functions) => {
                let n = schema::Count::decode(&mut f)?.0;
                for _ in 0..n {
                    let fun = schema::Function::decode(&mut f)?;
                    self.functions.insert(
                        fun.id,
                        Function::new(
                            fun.id,
                            fun.module,
                            fun.address,
                            fun.size,
                            fun.name.to_string(),
                        ),
                    );
                }
            }
            Some(ChunkKind::Thread) => {
                let th = schema::Thread::decode(&mut f)?;
                let t = self.threads.entry(th.tid).or_default();
                t.tid = th.tid;
                t.name = th.name.to_string();
                if th.pid != 0 {
                    t.pid = th.pid;
                }
            }
            Some(ChunkKind::Events) => {
                let h = schema::EventsHeader::decode(&mut f)?;
                let th = self.threads.entry(h.tid).or_default();
                th.tid = h.tid;
                th.events = th.events.saturating_add(h.count);
                th.chunks.push(ChunkRef {
                    offset,
                    len: p.len() as u32,
                    seq: h.seq,
                    count: h.count,
                });
            }
            Some(ChunkKind::Tracepoints) => {
                for d in crate::tracepoints::parse_chunk(&mut f)? {
                    self.tracepoints.insert(d.id, d);
                }
            }
            Some(ChunkKind::End) => {
                let end = schema::End::decode(&mut f)?;
                if end.chunks != seq {
                    self.problems.push(format!(
                        "the End chunk counts {} chunks before it, the file holds {seq}",
                        end.chunks
                    ));
                }
                self.end = Some(end);
            }
            Some(ChunkKind::Samplers) => {
                let h = schema::SamplersHeader::decode(&mut f)?;
                self.call_graph = h.call_graph;
                self.sample_frequency = h.frequency;
                for _ in 0..h.count {
                    let s = schema::Sampler::decode(&mut f)?;
                    self.samplers.push(Sampler {
                        kind: s.kind,
                        spelling: s.spelling.to_string(),
                    });
                }
            }
            Some(ChunkKind::Stacks) => {
                let h = schema::StacksHeader::decode(&mut f)?;
                if h.first_id as usize != self.stacks.len() {
                    return Err(DecodeError::BadValue);
                }
                for _ in 0..h.count {
                    let node = schema::StackNode::decode(&mut f)?;
                    // A parent always precedes its children: no cycles, and a reader that meets a
                    // node knows its whole stack.
                    if node.parent.is_some_and(|p| p as usize >= self.stacks.len()) {
                        return Err(DecodeError::BadValue);
                    }
                    self.stacks.push(node);
                }
            }
            Some(ChunkKind::Salvage) => self.salvage = Some(schema::Salvage::decode(&mut f)?),
            Some(ChunkKind::RunningAtStart) => {
                let n = schema::Count::decode(&mut f)?.0;
                let mut running = HashMap::new();
                for _ in 0..n {
                    let r = schema::RunningAtStart::decode(&mut f)?;
                    running.insert(r.tid, r.functions.iter().collect());
                }
                self.running = Some(running);
            }
            None => self.unknown_chunks += 1,
        }
        Ok(())
    }

    /// Checks each thread's chunk numbers (0, 1, 2, ... without gaps or repeats) and the End chunk's
    /// count of events against what was read; repeats are dropped from the index.
    fn check_threads(&mut self) {
        let mut read_events = 0u64;
        for th in self.threads.values_mut() {
            if th.pid == 0 {
                th.pid = self.session.pid;
            }
            th.chunks.sort_by_key(|c| c.seq);
            let before = th.chunks.len();
            th.chunks.dedup_by_key(|c| c.seq);
            let repeats = before - th.chunks.len();
            if repeats > 0 {
                self.skipped_chunks += repeats as u64;
                self.problems.push(format!(
                    "thread {}: {repeats} events chunks repeat a chunk number: skipped",
                    th.tid
                ));
                th.events = th.chunks.iter().map(|c| c.count).sum();
            }
            let numbered: Vec<u32> = th
                .chunks
                .iter()
                .map(|c| c.seq)
                .filter(|&s| s != schema::LOST_ONLY_SEQ)
                .collect();
            let flight = self.session.mode == Some(schema::Mode::Flight);
            // A flight ring keeps the newest chunks: its numbers may start anywhere, but not skip.
            let first = if flight {
                numbered.first().copied().unwrap_or(0)
            } else {
                0
            };
            let missing: u64 = numbered
                .iter()
                .zip(first..)
                .map(|(&got, want)| got != want)
                .filter(|&d| d)
                .count() as u64;
            if missing > 0 {
                self.problems.push(format!(
                    "thread {}: its events chunks are numbered {}..={} but {} of them are missing",
                    th.tid,
                    first,
                    numbered.last().copied().unwrap_or(0),
                    numbered.last().copied().unwrap_or(0) as u64 + 1
                        - first as u64
                        - numbered.len() as u64
                ));
            }
            read_events = read_events.saturating_add(th.events);
        }
        if let Some(end) = &self.end {
            let expected = end.events.saturating_sub(end.dropped_events);
            if read_events != expected {
                self.problems.push(format!(
                    "the End chunk counts {expected} events, the file holds {read_events}"
                ));
            }
        }
    }

    /// Per thread, the functions already running when its tracing began, outermost first, as the writer
    /// saw them: only when that is what the file holds too (complete, nothing missing or dropped);
    /// otherwise `None`, and a reader that needs them replays the threads to find them
    /// ([`crate::callstack::initial_stacks`]).
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

    /// The display name of function `id`, or `fn#id` when the table lacks it.
    pub fn function_name(&self, id: u32) -> String {
        self.functions
            .get(&id)
            .map_or_else(|| format!("fn#{id}"), |f| f.name().to_string())
    }

    /// Streams the events of one thread in order.
    pub fn thread_events(&self, tid: u32) -> Result<ThreadEvents<'_>, ReadError> {
        let chunks = self
            .threads
            .get(&tid)
            .map(|t| t.chunks.clone())
            .unwrap_or_default();
        Ok(ThreadEvents {
            trace: self,
            tid,
            chunks,
            next_chunk: 0,
            buf: Vec::new(),
            events: Vec::new(),
            pos: 0,
        })
    }

    /// Streams the events of all threads merged in time order.
    pub fn events(&self) -> Result<MergedEvents<'_>, ReadError> {
        self.events_of(&self.threads.keys().copied().collect::<Vec<_>>())
    }

    /// Streams the events of the given threads merged in time order.
    pub fn events_of(&self, tids: &[u32]) -> Result<MergedEvents<'_>, ReadError> {
        let mut m = MergedEvents {
            streams: Vec::new(),
            heap: BinaryHeap::new(),
            advance: None,
            error: None,
        };
        for &tid in tids {
            m.streams.push(self.thread_events(tid)?);
        }
        for s in 0..m.streams.len() {
            m.push_current(s);
        }
        Ok(m)
    }
}

fn read_up_to(r: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

/// One event, borrowed from the reader's chunk buffer: the allocation-free form that the analyses use
/// ([`ThreadEvents::next_ref`], [`MergedEvents::next_ref`]).
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

/// A decoded event whose payload is a range of the chunk buffer.
#[derive(Clone, Copy, Debug)]
struct RawEvent {
    tsc: u64,
    id: u32,
    kind: EventKind,
    payload_start: u32,
    payload_len: u32,
    fields: EventFields,
}

/// Events of one thread, chunk by chunk (one decoded chunk in memory at a time).
///
/// Use it as an [`Iterator`] of owned [`Event`]s, or call [`ThreadEvents::next_ref`] for borrowed
/// [`EventRef`]s without any per-event allocation.
pub struct ThreadEvents<'a> {
    trace: &'a Trace,
    tid: u32,
    chunks: Vec<ChunkRef>,
    next_chunk: usize,
    buf: Vec<u8>,
    /// Offset of the event body in `buf`.
    events: Vec<RawEvent>,
    pos: usize,
}

impl ThreadEvents<'_> {
    fn load_next_chunk(&mut self) -> Result<bool, ReadError> {
        let Some(c) = self.chunks.get(self.next_chunk).copied() else {
            return Ok(false);
        };
        self.next_chunk += 1;
        let path = &self.trace.path;
        self.buf.resize(c.len as usize, 0);
        self.trace
            .file
            .read_exact_at(&mut self.buf, c.offset)
            .map_err(|e| ReadError::Io(path.clone(), e))?;
        let mut f = FieldReader::new(&self.buf);
        let head =
            schema::EventsHeader::decode(&mut f).map_err(|e| decode_err(path, c.offset, e))?;
        let (base, count) = (head.base_ticks, head.count);
        self.events.clear();
        self.pos = 0;
        let body = f.rest();
        let body_off = self.buf.len() - body.len();
        let buf_start = self.buf.as_ptr() as usize;
        // Every event takes at least two bytes: a corrupt count cannot make this reserve much.
        self.events
            .reserve((count.min(body.len() as u64 / 2 + 1)) as usize);
        for e in EventDecoder::new(body, base) {
            let e = e.map_err(|e| decode_err(path, c.offset, e))?;
            let start = if e.payload.is_empty() {
                body_off
            } else {
                e.payload.as_ptr() as usize - buf_start
            };
            self.events.push(RawEvent {
                tsc: e.tsc,
                id: e.id,
                kind: e.kind,
                payload_start: start as u32,
                payload_len: e.payload.len() as u32,
                fields: e.fields,
            });
        }
        if self.events.len() as u64 != count {
            return Err(ReadError::Corrupt(
                path.clone(),
                c.offset,
                format!(
                    "chunk announces {count} events but holds {}",
                    self.events.len()
                ),
            ));
        }
        Ok(true)
    }

    /// Makes sure an event is available at `pos`; `Ok(false)` at the end.
    fn fill(&mut self) -> Result<bool, ReadError> {
        while self.pos >= self.events.len() {
            match self.load_next_chunk() {
                Ok(true) => {}
                Ok(false) => return Ok(false),
                Err(e) => {
                    self.next_chunk = self.chunks.len();
                    self.events.clear();
                    self.pos = 0;
                    return Err(e);
                }
            }
        }
        Ok(true)
    }

    fn event_at(&self, pos: usize) -> EventRef<'_> {
        let r = self.events[pos];
        let start = r.payload_start as usize;
        EventRef {
            tid: self.tid,
            ts_ns: self.trace.converter.to_ns(r.tsc),
            tsc: r.tsc,
            kind: r.kind,
            id: r.id,
            payload: &self.buf[start..start + r.payload_len as usize],
            fields: r.fields,
        }
    }

    /// The next event, borrowed (no allocation). After an error the stream ends.
    #[allow(clippy::should_implement_trait)]
    pub fn next_ref(&mut self) -> Option<Result<EventRef<'_>, ReadError>> {
        match self.fill() {
            Ok(true) => {}
            Ok(false) => return None,
            Err(e) => return Some(Err(e)),
        }
        self.pos += 1;
        Some(Ok(self.event_at(self.pos - 1)))
    }

    /// The next event as `(tsc, kind, id)` only: the cheapest form, for aggregations that work in
    /// TSC ticks and ignore payloads.
    #[inline]
    pub fn next_raw(&mut self) -> Option<Result<(u64, EventKind, u32), ReadError>> {
        if self.pos >= self.events.len() {
            match self.fill() {
                Ok(true) => {}
                Ok(false) => return None,
                Err(e) => return Some(Err(e)),
            }
        }
        let r = self.events[self.pos];
        self.pos += 1;
        Some(Ok((r.tsc, r.kind, r.id)))
    }

    /// The next event as `(tsc, kind, id)` without consuming it; `Ok(None)` at the end. A read error
    /// is returned once, then the stream ends.
    #[inline]
    pub(crate) fn peek_raw(&mut self) -> Result<Option<(u64, EventKind, u32)>, ReadError> {
        if self.pos >= self.events.len() && !self.fill()? {
            return Ok(None);
        }
        let r = self.events[self.pos];
        Ok(Some((r.tsc, r.kind, r.id)))
    }

    /// The event [`ThreadEvents::peek_raw`] returned, with its payload; call only after it returned
    /// `Ok(Some(_))`.
    pub(crate) fn peeked_ref(&self) -> EventRef<'_> {
        self.event_at(self.pos)
    }

    /// Consumes the event [`ThreadEvents::peek_raw`] returned.
    #[inline]
    pub(crate) fn bump(&mut self) {
        self.pos += 1;
    }

    /// The thread this stream reads.
    pub fn tid(&self) -> u32 {
        self.tid
    }
}

impl Iterator for ThreadEvents<'_> {
    type Item = Result<Event, ReadError>;

    fn next(&mut self) -> Option<Self::Item> {
        self.next_ref().map(|r| r.map(|e| e.to_event()))
    }
}

/// Events of all threads in time order (a k-way merge of per-thread streams).
///
/// Iterate for owned [`Event`]s or call [`MergedEvents::next_ref`] for borrowed ones.
pub struct MergedEvents<'a> {
    streams: Vec<ThreadEvents<'a>>,
    /// `(Reverse(tsc), Reverse(stream))` of each stream's current event.
    heap: BinaryHeap<(std::cmp::Reverse<u64>, std::cmp::Reverse<usize>)>,
    /// The stream whose current event was handed out last: advance it before the next pop.
    advance: Option<usize>,
    /// An error met while advancing, handed out next.
    error: Option<ReadError>,
}

impl MergedEvents<'_> {
    fn push_current(&mut self, s: usize) {
        match self.streams[s].fill() {
            Ok(true) => {
                let st = &self.streams[s];
                let tsc = st.events[st.pos].tsc;
                self.heap
                    .push((std::cmp::Reverse(tsc), std::cmp::Reverse(s)));
            }
            Ok(false) => {}
            Err(e) => self.error = Some(e),
        }
    }

    /// The next event in time order, borrowed (no allocation). Events with equal timestamps come in
    /// thread-id order. A read error of one thread is returned once; the other threads go on.
    #[allow(clippy::should_implement_trait)]
    pub fn next_ref(&mut self) -> Option<Result<EventRef<'_>, ReadError>> {
        if let Some(s) = self.advance.take() {
            self.streams[s].pos += 1;
            self.push_current(s);
        }
        if let Some(e) = self.error.take() {
            return Some(Err(e));
        }
        let (_, std::cmp::Reverse(s)) = self.heap.pop()?;
        self.advance = Some(s);
        let st = &self.streams[s];
        Some(Ok(st.event_at(st.pos)))
    }
}

impl Iterator for MergedEvents<'_> {
    type Item = Result<Event, ReadError>;

    fn next(&mut self) -> Option<Self::Item> {
        self.next_ref().map(|r| r.map(|e| e.to_event()))
    }
}
