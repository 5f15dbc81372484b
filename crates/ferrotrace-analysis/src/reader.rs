//! The streaming trace reader.

use std::collections::{BTreeMap, BinaryHeap, HashMap};
use std::fmt;
use std::fs::File;
use std::io::{self, BufReader, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use ferrotrace_core::clock::{ClockPair, TscConverter};
use ferrotrace_core::codec::{DecodeError, EventDecoder, FieldReader};
use ferrotrace_core::format::{
    parse_file_header, ChunkHeader, ChunkKind, HeaderError, CHUNK_HEADER_LEN, FILE_HEADER_LEN,
    MAX_CHUNK_PAYLOAD,
};
pub use ferrotrace_core::record::EventKind;

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
    /// Recording mode: 0 lossless, 1 drop, 2 flight.
    pub mode: u32,
    /// TSC frequency estimate at start.
    pub tsc_hz: u64,
    /// How the program was instrumented: bits of `ferrotrace_core::format::instrumentation` (0 when
    /// the writer did not say).
    pub instrumentation: u64,
}

impl Session {
    /// The executable's file name (no directory).
    pub fn exe_name(&self) -> &str {
        self.exe.rsplit('/').next().unwrap_or("")
    }

    /// The instrumentation's names, `+`-separated (`mcount`, `xray+patchable-nop`), or `unknown`.
    pub fn instrumentation_names(&self) -> String {
        let names: Vec<&str> = ferrotrace_core::format::instrumentation::NAMES
            .iter()
            .filter(|(bit, _)| self.instrumentation & bit != 0)
            .map(|(_, name)| *name)
            .collect();
        if names.is_empty() {
            "unknown".into()
        } else {
            names.join("+")
        }
    }

    /// The recording mode's name.
    pub fn mode_name(&self) -> &'static str {
        match self.mode {
            0 => "lossless",
            1 => "drop",
            2 => "flight",
            _ => "unknown",
        }
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
    /// Demangled name without hash (`myapp::parse`).
    pub name: String,
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
    /// Last name recorded for it.
    pub name: String,
    /// Its event chunks, in order.
    pub chunks: Vec<ChunkRef>,
    /// Events in all its chunks.
    pub events: u64,
}

/// The End chunk: present only in complete traces.
#[derive(Clone, Copy, Debug)]
pub struct End {
    /// 0 exit, 1 signal.
    pub reason: u32,
    /// The signal, when `reason` is 1.
    pub signal: u32,
    /// Events the collector received (in flight mode, more than the file keeps).
    pub events: u64,
    /// Events lost in drop mode.
    pub lost: u64,
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
    /// Payload (tracepoint arguments, allocation details); empty for function events.
    pub payload: Vec<u8>,
}

/// An opened trace: metadata and the index of event chunks.
#[derive(Debug)]
pub struct Trace {
    path: PathBuf,
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
    /// Set when reading stopped early.
    pub truncation: Option<Truncation>,
    /// Chunks of kinds this reader does not know (skipped).
    pub unknown_chunks: u64,
    /// `Samples` chunks (written by `ferrotrace profile`; read them with `ferrotrace_profile`).
    pub sample_chunks: u64,
    converter: TscConverter,
}

fn decode_err(path: &Path, offset: u64, e: DecodeError) -> ReadError {
    ReadError::Corrupt(path.to_path_buf(), offset, e.to_string())
}

/// The name users see: demangled (Rust v0 and legacy), without the hash.
pub fn demangle(mangled: &str) -> String {
    format!("{:#}", rustc_demangle::demangle(mangled))
}

impl Trace {
    /// Opens and indexes a trace. A truncated or corrupt tail is not an error: reading stops there and
    /// [`Trace::truncation`] says where and why.
    pub fn open(path: impl AsRef<Path>) -> Result<Trace, ReadError> {
        let path = path.as_ref().to_path_buf();
        let io_err = |e| ReadError::Io(path.clone(), e);
        let file = File::open(&path).map_err(io_err)?;
        let file_len = file.metadata().map_err(io_err)?.len();
        let mut r = BufReader::with_capacity(1 << 20, file);
        let mut header = [0u8; FILE_HEADER_LEN];
        let got = read_up_to(&mut r, &mut header).map_err(io_err)?;
        let version = parse_file_header(&header[..got]).map_err(|e| {
            ReadError::Format(
                path.clone(),
                match e {
                    HeaderError::Short => format!("only {got} bytes: too short to be a ferrotrace trace"),
                    HeaderError::NotATrace => "not a ferrotrace trace (bad magic)".into(),
                    HeaderError::UnsupportedVersion(a, b) => {
                        format!("trace format version {a}.{b} is not supported by this ferrotrace (reads 1.x)")
                    }
                },
            )
        })?;
        let mut t = Trace {
            path: path.clone(),
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
            truncation: None,
            unknown_chunks: 0,
            sample_chunks: 0,
            converter: TscConverter::new(ClockPair::default(), ClockPair::default()),
        };
        let mut offset = FILE_HEADER_LEN as u64;
        let mut payload = Vec::new();
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
            if let Err(e) = t.index_chunk(h.kind, &payload, payload_offset) {
                t.truncation = Some(Truncation {
                    offset,
                    reason: format!("malformed chunk: {e}"),
                });
                break;
            }
            offset = payload_offset + h.len as u64;
            t.valid_len = offset;
        }
        for th in t.threads.values_mut() {
            th.chunks.sort_by_key(|c| c.seq);
        }
        t.converter = match (t.clocks.first(), t.clocks.last()) {
            (Some(&a), Some(&b)) if b.tsc > a.tsc && b.mono_ns > a.mono_ns + 1_000_000 => {
                TscConverter::new(a, b)
            }
            (Some(&a), _) => TscConverter::from_hz(a, t.session.tsc_hz),
            _ => TscConverter::from_hz(ClockPair::default(), t.session.tsc_hz),
        };
        if t.clocks.is_empty() && t.truncation.is_none() && t.sample_chunks == 0 {
            return Err(ReadError::Format(
                path,
                "no clock calibration in the trace".into(),
            ));
        }
        Ok(t)
    }

    fn index_chunk(&mut self, kind: u32, p: &[u8], offset: u64) -> Result<(), DecodeError> {
        let mut f = FieldReader::new(p);
        match ChunkKind::from_u32(kind) {
            Some(ChunkKind::Session) => {
                self.session = Session {
                    pid: f.varint_u32()?,
                    ppid: f.varint_u32()?,
                    exe: f.str()?.to_string(),
                    args: f
                        .bytes()?
                        .split(|&b| b == 0)
                        .map(|a| String::from_utf8_lossy(a).into_owned())
                        .collect(),
                    start_realtime_ns: f.varint()?,
                    version: f.str()?.to_string(),
                    mode: f.varint_u32()?,
                    tsc_hz: f.varint()?,
                    // A trailing field: absent in traces written before it existed.
                    instrumentation: if f.remaining() > 0 { f.varint()? } else { 0 },
                };
            }
            Some(ChunkKind::Clock) => {
                let tsc = f.varint()?;
                let mono_ns = f.varint()?;
                self.clocks.push(ClockPair { tsc, mono_ns });
            }
            Some(ChunkKind::Module) => {
                self.modules.push(Module {
                    id: f.varint_u32()?,
                    bias: f.varint()?,
                    size: f.varint()?,
                    path: f.str()?.to_string(),
                    build_id: f.bytes()?.to_vec(),
                });
            }
            Some(ChunkKind::Functions) => {
                let n = f.varint()?;
                for _ in 0..n {
                    let id = f.varint_u32()?;
                    let module = f.varint_u32()?;
                    let addr = f.varint()?;
                    let size = f.varint()?;
                    let mangled = f.str()?.to_string();
                    let name = demangle(&mangled);
                    self.functions.insert(
                        id,
                        Function {
                            id,
                            module,
                            addr,
                            size,
                            mangled,
                            name,
                        },
                    );
                }
            }
            Some(ChunkKind::Thread) => {
                let tid = f.varint_u32()?;
                let name = f.str()?.to_string();
                let th = self.threads.entry(tid).or_default();
                th.tid = tid;
                th.name = name;
            }
            Some(ChunkKind::Events) => {
                let tid = f.varint_u32()?;
                let seq = f.varint_u32()?;
                let _base = f.varint()?;
                let count = f.varint()?;
                let th = self.threads.entry(tid).or_default();
                th.tid = tid;
                th.events = th.events.saturating_add(count);
                th.chunks.push(ChunkRef {
                    offset,
                    len: p.len() as u32,
                    seq,
                    count,
                });
            }
            Some(ChunkKind::Tracepoints) => {
                for d in crate::tracepoints::parse_chunk(&mut f)? {
                    self.tracepoints.insert(d.id, d);
                }
            }
            Some(ChunkKind::End) => {
                self.end = Some(End {
                    reason: f.varint_u32()?,
                    signal: f.varint_u32()?,
                    events: f.varint()?,
                    lost: f.varint()?,
                });
            }
            Some(ChunkKind::Samples) => self.sample_chunks += 1,
            _ => self.unknown_chunks += 1,
        }
        Ok(())
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
            .map_or_else(|| format!("fn#{id}"), |f| f.name.clone())
    }

    /// Streams the events of one thread in order.
    pub fn thread_events(&self, tid: u32) -> Result<ThreadEvents<'_>, ReadError> {
        let chunks = self
            .threads
            .get(&tid)
            .map(|t| t.chunks.clone())
            .unwrap_or_default();
        let file = File::open(&self.path).map_err(|e| ReadError::Io(self.path.clone(), e))?;
        Ok(ThreadEvents {
            trace: self,
            tid,
            file,
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
    /// Payload (tracepoint arguments, allocation details); empty for function events.
    pub payload: &'b [u8],
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
}

/// Events of one thread, chunk by chunk (one decoded chunk in memory at a time).
///
/// Use it as an [`Iterator`] of owned [`Event`]s, or call [`ThreadEvents::next_ref`] for borrowed
/// [`EventRef`]s without any per-event allocation.
pub struct ThreadEvents<'a> {
    trace: &'a Trace,
    tid: u32,
    file: File,
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
        self.file
            .seek(SeekFrom::Start(c.offset))
            .map_err(|e| ReadError::Io(path.clone(), e))?;
        self.file
            .read_exact(&mut self.buf)
            .map_err(|e| ReadError::Io(path.clone(), e))?;
        let mut f = FieldReader::new(&self.buf);
        let fields = (|| -> Result<(u64, u64), DecodeError> {
            f.varint()?;
            f.varint()?;
            Ok((f.varint()?, f.varint()?))
        })();
        let (base, count) = fields.map_err(|e| decode_err(path, c.offset, e))?;
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
