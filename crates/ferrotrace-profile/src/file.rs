//! The `Samples` chunk (kind 9) of the trace file: writing and reading back.
//!
//! Every `Samples` chunk payload starts with `v section`; the sections are (see `docs/profile.md`):
//!
//! | section | layout |
//! |---|---|
//! | 0 header | `v version(1), v pid, v call_graph (0 fp, 1 dwarf), v frequency, v start_monotonic_ns, v start_realtime_ns, v event_count`, per event `v kind (0 cpu-clock, 1 uprobe, 2 tracepoint), s spelling` |
//! | 1 samples | `v base_ns, v count`, per sample `v zigzag(time - prev_time), v zigzag(tid - prev_tid), v event, v stack + 1 (0: none)`; prev starts at (base_ns, 0) |
//! | 2 threads | `v count`, per thread `v tid, v pid, s name` |
//! | 3 frames | `v first_id, v count`, per frame `s function, s file, v line, v module_id (0: none), v flags (1 inlined, 2 kernel)` |
//! | 4 addresses | `v first_id, v count`, per address `v module_id, v relative_address, v n, v frame_id × n` (innermost first) |
//! | 5 stacks | `v first_id, v count`, per node `v parent + 1 (0: root), v address_id` |
//! | 6 summary | `v samples, v lost, v unwind_errors, v exit_code + 1 (0: none), v end_monotonic_ns` |
//!
//! Modules referenced by `module_id` are ordinary `Module` chunks (kind 3).

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufWriter, Read};
use std::path::Path;

use ferrotrace_core::codec::{put_str, put_varint, unzigzag, zigzag, DecodeError, FieldReader};
use ferrotrace_core::format::{
    parse_file_header, ChunkHeader, ChunkKind, CHUNK_HEADER_LEN, FILE_HEADER_LEN, MAX_CHUNK_PAYLOAD,
};
use ferrotrace_core::writer::TraceWriter;

use crate::cli_args::CallGraph;
use crate::ProfileError;

pub(crate) const SEC_HEADER: u64 = 0;
pub(crate) const SEC_SAMPLES: u64 = 1;
pub(crate) const SEC_THREADS: u64 = 2;
pub(crate) const SEC_FRAMES: u64 = 3;
pub(crate) const SEC_ADDRESSES: u64 = 4;
pub(crate) const SEC_STACKS: u64 = 5;
pub(crate) const SEC_SUMMARY: u64 = 6;
/// Entries per table chunk, keeping chunks far below the 64 MiB limit.
pub(crate) const TABLE_CHUNK: usize = 16384;

/// Kind of an event as recorded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventType {
    /// Timer sampling.
    CpuClock = 0,
    /// A uprobe.
    Uprobe = 1,
    /// A kernel tracepoint.
    Tracepoint = 2,
}

/// A recorded event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventInfo {
    /// Its kind.
    pub kind: EventType,
    /// Its spelling, e.g. `cpu-clock`, `uprobe:/lib/libc.so.6:malloc`.
    pub name: String,
}

/// A thread seen while profiling.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ThreadInfo {
    /// OS thread id.
    pub tid: u32,
    /// Process id.
    pub pid: u32,
    /// Thread name (comm).
    pub name: String,
}

/// A symbolized frame (one function, or one inlined function at a call site).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Frame {
    /// Demangled function name (Rust names without hash).
    pub function: String,
    /// Source file, empty when unknown.
    pub file: String,
    /// Source line, 0 when unknown.
    pub line: u32,
    /// Module id (see [`SampleSet::modules`]), 0 when unknown.
    pub module: u32,
    /// The function was inlined into its caller at this address.
    pub inlined: bool,
    /// A kernel frame.
    pub kernel: bool,
}

/// A node of the stack tree: `frame` called from the stack `parent`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StackNode {
    /// Caller's stack, `None` for an outermost frame.
    pub parent: Option<u32>,
    /// Frame id.
    pub frame: u32,
}

/// One sample or probe hit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sample {
    /// CLOCK_MONOTONIC nanoseconds.
    pub time_ns: u64,
    /// Thread id.
    pub tid: u32,
    /// Index into [`SampleSet::events`].
    pub event: u32,
    /// Leaf stack node, `None` when no stack could be taken.
    pub stack: Option<u32>,
}

/// A loaded object that frames point into.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModuleInfo {
    /// Module id used by frames.
    pub id: u32,
    /// Path (or `[kernel.kallsyms]`).
    pub path: String,
    /// Build id bytes, empty when unknown.
    pub build_id: Vec<u8>,
}

/// Everything `ferrotrace profile` recorded, symbolized, as read back from a trace file.
#[derive(Clone, Debug, Default)]
pub struct SampleSet {
    /// Process id of the profiled program (the root process).
    pub pid: u32,
    /// How stacks were taken.
    pub call_graph: CallGraph,
    /// Sampling frequency of cpu-clock, Hz.
    pub frequency: u32,
    /// CLOCK_MONOTONIC at the start, ns.
    pub start_monotonic_ns: u64,
    /// Wall clock at the start, ns since the Unix epoch.
    pub start_realtime_ns: u64,
    /// CLOCK_MONOTONIC at the end, ns (0 if the trace was cut short).
    pub end_monotonic_ns: u64,
    /// The events; samples refer to them by index.
    pub events: Vec<EventInfo>,
    /// Threads seen.
    pub threads: Vec<ThreadInfo>,
    /// Modules.
    pub modules: Vec<ModuleInfo>,
    /// Frame table.
    pub frames: Vec<Frame>,
    /// Stack tree (frame-level: an address with inlined calls gives several nodes).
    pub stacks: Vec<StackNode>,
    /// Samples in file order (per ring; not globally time-sorted).
    pub samples: Vec<Sample>,
    /// Samples the kernel reported lost.
    pub lost: u64,
    /// Stacks whose unwinding stopped early.
    pub unwind_errors: u64,
    /// Exit code of the program, when it was started by the profiler and exited.
    pub exit_code: Option<i32>,
    /// The summary section was present (the recording finished cleanly).
    pub complete: bool,
}

impl SampleSet {
    /// Frames of `stack`, leaf first.
    pub fn stack_frames(&self, stack: Option<u32>) -> Vec<&Frame> {
        let mut out = Vec::new();
        let mut cur = stack;
        let mut guard = 0;
        while let Some(s) = cur {
            let Some(node) = self.stacks.get(s as usize) else {
                break;
            };
            if let Some(f) = self.frames.get(node.frame as usize) {
                out.push(f);
            }
            cur = node.parent;
            guard += 1;
            if guard > 100_000 {
                break;
            }
        }
        out
    }

    /// Index of the event whose spelling is or ends with `name` (`cpu-clock`, `sched:sched_switch`,
    /// `malloc`).
    pub fn event_index(&self, name: &str) -> Option<u32> {
        self.events
            .iter()
            .position(|e| e.name == name || e.name.ends_with(&format!(":{name}")))
            .map(|i| i as u32)
    }

    /// A copy holding only the samples of event `event`.
    pub fn only_event(&self, event: u32) -> SampleSet {
        let mut s = self.clone();
        s.samples.retain(|x| x.event == event);
        s
    }

    /// Name of thread `tid`, or empty.
    pub fn thread_name(&self, tid: u32) -> &str {
        self.threads
            .iter()
            .find(|t| t.tid == tid)
            .map(|t| t.name.as_str())
            .unwrap_or("")
    }
}

/// Streams Samples sections into a trace file.
pub(crate) struct SampleWriter {
    pub w: TraceWriter<BufWriter<File>>,
    buf: Vec<u8>,
    count: u64,
    base: u64,
    prev_time: u64,
    prev_tid: u32,
    pending: Vec<u8>,
}

/// Samples per streamed chunk.
const SAMPLES_PER_CHUNK: u64 = 8192;

impl SampleWriter {
    pub fn create(path: &Path) -> Result<SampleWriter, ProfileError> {
        // Private, new, never through a link nor over a file that is not a trace (an old one is kept
        // as FILE.old), like the runtime's traces.
        let (f, _) = ferrotrace_core::output::create(path).map_err(|e| match e {
            ferrotrace_core::output::OutputError::Io(p, e) => ProfileError::io(&p, e),
            // Something in the way of -o: an argument to change.
            other => ProfileError::BadArgument(other.to_string()),
        })?;
        let w = TraceWriter::new(BufWriter::with_capacity(256 * 1024, f))
            .map_err(|e| ProfileError::io(path, e))?;
        Ok(SampleWriter {
            w,
            buf: Vec::new(),
            count: 0,
            base: 0,
            prev_time: 0,
            prev_tid: 0,
            pending: Vec::new(),
        })
    }

    pub fn chunk(&mut self, kind: ChunkKind, payload: &[u8]) -> std::io::Result<()> {
        self.w.chunk(kind, payload)
    }

    pub fn sample(
        &mut self,
        time: u64,
        tid: u32,
        event: u32,
        stack: Option<u32>,
    ) -> std::io::Result<()> {
        if self.count == 0 {
            self.base = time;
            self.prev_time = time;
            self.prev_tid = 0;
            self.pending.clear();
        }
        let p = &mut self.pending;
        let _ = put_varint(p, zigzag(time.wrapping_sub(self.prev_time) as i64));
        let _ = put_varint(p, zigzag(tid as i64 - self.prev_tid as i64));
        let _ = put_varint(p, event as u64);
        let _ = put_varint(p, stack.map(|s| s as u64 + 1).unwrap_or(0));
        self.prev_time = time;
        self.prev_tid = tid;
        self.count += 1;
        if self.count >= SAMPLES_PER_CHUNK {
            self.flush_samples()?;
        }
        Ok(())
    }

    pub fn flush_samples(&mut self) -> std::io::Result<()> {
        if self.count == 0 {
            return Ok(());
        }
        self.buf.clear();
        let _ = put_varint(&mut self.buf, SEC_SAMPLES);
        let _ = put_varint(&mut self.buf, self.base);
        let _ = put_varint(&mut self.buf, self.count);
        self.buf.extend_from_slice(&self.pending);
        self.count = 0;
        let buf = std::mem::take(&mut self.buf);
        let r = self.w.chunk(ChunkKind::Samples, &buf);
        self.buf = buf;
        r
    }
}

/// Encodes the header section.
pub(crate) fn header_section(
    pid: u32,
    call_graph: CallGraph,
    frequency: u32,
    start_mono: u64,
    start_real: u64,
    events: &[EventInfo],
) -> Vec<u8> {
    let mut p = Vec::new();
    let _ = put_varint(&mut p, SEC_HEADER);
    let _ = put_varint(&mut p, 1);
    let _ = put_varint(&mut p, pid as u64);
    let _ = put_varint(&mut p, matches!(call_graph, CallGraph::Dwarf) as u64);
    let _ = put_varint(&mut p, frequency as u64);
    let _ = put_varint(&mut p, start_mono);
    let _ = put_varint(&mut p, start_real);
    let _ = put_varint(&mut p, events.len() as u64);
    for e in events {
        let _ = put_varint(&mut p, e.kind as u64);
        let _ = put_str(&mut p, &e.name);
    }
    p
}

fn dec(e: DecodeError) -> String {
    e.to_string()
}

/// Reads a trace file written by [`crate::profile`] and symbolized at the end of recording.
///
/// A file cut short (killed profiler) is read up to the last whole chunk; samples whose stacks were never
/// defined keep `stack: None`.
pub fn read_samples(path: impl AsRef<Path>) -> Result<SampleSet, ProfileError> {
    let path = path.as_ref();
    let mut data = Vec::new();
    File::open(path)
        .and_then(|mut f| f.read_to_end(&mut data))
        .map_err(|e| ProfileError::io(path, e))?;
    let bad = |reason: String| ProfileError::BadTrace {
        path: path.to_path_buf(),
        reason,
    };
    parse_file_header(&data).map_err(|e| bad(format!("not a ferrotrace trace file ({e:?})")))?;
    let mut set = SampleSet::default();
    let mut header_seen = false;
    // Address table: module, rel, frames (innermost first). Stack nodes on addresses.
    let mut addresses: Vec<Vec<u32>> = Vec::new();
    let mut addr_stacks: Vec<(Option<u32>, u32)> = Vec::new();
    let mut raw_samples: Vec<Sample> = Vec::new();
    let mut pos = FILE_HEADER_LEN;
    while pos + CHUNK_HEADER_LEN <= data.len() {
        let mut h = [0u8; CHUNK_HEADER_LEN];
        h.copy_from_slice(&data[pos..pos + CHUNK_HEADER_LEN]);
        let h = ChunkHeader::decode(&h);
        if h.len > MAX_CHUNK_PAYLOAD {
            break;
        }
        let start = pos + CHUNK_HEADER_LEN;
        let end = start + h.len as usize;
        if end > data.len() || !h.verify(&data[start..end]) {
            break;
        }
        pos = end;
        let payload = &data[start..end];
        match ChunkKind::from_u32(h.kind) {
            Some(ChunkKind::Module) => {
                let mut r = FieldReader::new(payload);
                let m = (|| -> Result<ModuleInfo, DecodeError> {
                    let id = r.varint_u32()?;
                    let _base = r.varint()?;
                    let _size = r.varint()?;
                    let path = r.str()?.to_string();
                    let build_id = r.bytes()?.to_vec();
                    Ok(ModuleInfo { id, path, build_id })
                })()
                .map_err(|e| bad(format!("bad Module chunk: {}", dec(e))))?;
                set.modules.push(m);
            }
            Some(ChunkKind::Samples) => {
                let mut r = FieldReader::new(payload);
                let sec = r.varint().map_err(|e| bad(dec(e)))?;
                read_section(
                    sec,
                    &mut r,
                    &mut set,
                    &mut header_seen,
                    &mut addresses,
                    &mut addr_stacks,
                    &mut raw_samples,
                )
                .map_err(|e| bad(format!("bad Samples chunk (section {sec}): {}", dec(e))))?;
            }
            _ => {}
        }
    }
    if !header_seen {
        return Err(bad("no profile in this trace (no Samples header chunk): record one with `ferrotrace profile`".into()));
    }
    // Expand address-level stacks into frame-level stacks.
    let mut node_map: Vec<Option<u32>> = Vec::with_capacity(addr_stacks.len());
    let mut intern: HashMap<(Option<u32>, u32), u32> = HashMap::new();
    for &(parent, addr) in &addr_stacks {
        let mut cur = parent.and_then(|p| node_map.get(p as usize).copied().flatten());
        if let Some(frames) = addresses.get(addr as usize) {
            for &f in frames.iter().rev() {
                let key = (cur, f);
                let id = *intern.entry(key).or_insert_with(|| {
                    set.stacks.push(StackNode {
                        parent: cur,
                        frame: f,
                    });
                    (set.stacks.len() - 1) as u32
                });
                cur = Some(id);
            }
        }
        node_map.push(cur);
    }
    for mut s in raw_samples {
        s.stack = s
            .stack
            .and_then(|a| node_map.get(a as usize).copied().flatten());
        set.samples.push(s);
    }
    Ok(set)
}

fn read_section(
    sec: u64,
    r: &mut FieldReader<'_>,
    set: &mut SampleSet,
    header_seen: &mut bool,
    addresses: &mut Vec<Vec<u32>>,
    addr_stacks: &mut Vec<(Option<u32>, u32)>,
    raw_samples: &mut Vec<Sample>,
) -> Result<(), DecodeError> {
    match sec {
        SEC_HEADER => {
            let _version = r.varint()?;
            set.pid = r.varint_u32()?;
            set.call_graph = if r.varint()? == 1 {
                CallGraph::Dwarf
            } else {
                CallGraph::Fp
            };
            set.frequency = r.varint_u32()?;
            set.start_monotonic_ns = r.varint()?;
            set.start_realtime_ns = r.varint()?;
            let n = r.varint()?;
            set.events.clear();
            for _ in 0..n {
                let kind = match r.varint()? {
                    0 => EventType::CpuClock,
                    1 => EventType::Uprobe,
                    2 => EventType::Tracepoint,
                    _ => return Err(DecodeError::BadValue),
                };
                set.events.push(EventInfo {
                    kind,
                    name: r.str()?.to_string(),
                });
            }
            *header_seen = true;
        }
        SEC_SAMPLES => {
            let mut time = r.varint()?;
            let n = r.varint()?;
            let mut tid: i64 = 0;
            for _ in 0..n {
                time = time.wrapping_add(unzigzag(r.varint()?) as u64);
                tid += unzigzag(r.varint()?);
                let event = r.varint_u32()?;
                let stack = r.varint()?;
                let tid32 = u32::try_from(tid).map_err(|_| DecodeError::BadValue)?;
                let stack = if stack == 0 {
                    None
                } else {
                    Some(u32::try_from(stack - 1).map_err(|_| DecodeError::BadValue)?)
                };
                raw_samples.push(Sample {
                    time_ns: time,
                    tid: tid32,
                    event,
                    stack,
                });
            }
        }
        SEC_THREADS => {
            let n = r.varint()?;
            for _ in 0..n {
                let tid = r.varint_u32()?;
                let pid = r.varint_u32()?;
                let name = r.str()?.to_string();
                set.threads.push(ThreadInfo { tid, pid, name });
            }
        }
        SEC_FRAMES => {
            let first = r.varint()? as usize;
            let n = r.varint()?;
            if first != set.frames.len() {
                return Err(DecodeError::BadValue);
            }
            for _ in 0..n {
                let function = r.str()?.to_string();
                let file = r.str()?.to_string();
                let line = r.varint_u32()?;
                let module = r.varint_u32()?;
                let flags = r.varint()?;
                set.frames.push(Frame {
                    function,
                    file,
                    line,
                    module,
                    inlined: flags & 1 != 0,
                    kernel: flags & 2 != 0,
                });
            }
        }
        SEC_ADDRESSES => {
            let first = r.varint()? as usize;
            let n = r.varint()?;
            if first != addresses.len() {
                return Err(DecodeError::BadValue);
            }
            for _ in 0..n {
                let _module = r.varint()?;
                let _rel = r.varint()?;
                let k = r.varint()?;
                let mut v = Vec::new();
                for _ in 0..k {
                    let f = r.varint_u32()?;
                    if f as usize >= set.frames.len() {
                        return Err(DecodeError::BadValue);
                    }
                    v.push(f);
                }
                addresses.push(v);
            }
        }
        SEC_STACKS => {
            let first = r.varint()? as usize;
            let n = r.varint()?;
            if first != addr_stacks.len() {
                return Err(DecodeError::BadValue);
            }
            for _ in 0..n {
                let parent = r.varint()?;
                let addr = r.varint_u32()?;
                let parent = if parent == 0 {
                    None
                } else {
                    Some((parent - 1) as u32)
                };
                if parent.is_some_and(|p| p as usize >= addr_stacks.len())
                    || addr as usize >= addresses.len()
                {
                    return Err(DecodeError::BadValue);
                }
                addr_stacks.push((parent, addr));
            }
        }
        SEC_SUMMARY => {
            let _samples = r.varint()?;
            set.lost = r.varint()?;
            set.unwind_errors = r.varint()?;
            let ec = r.varint()?;
            set.exit_code = if ec == 0 {
                None
            } else {
                Some((ec - 1) as i64 as i32)
            };
            set.end_monotonic_ns = r.varint()?;
            set.complete = true;
        }
        _ => {} // unknown sections: skip (added in a later minor version)
    }
    Ok(())
}
