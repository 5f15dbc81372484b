//! Indexing and integrity: one pass over the file that checks every chunk (length, CRC, numbering,
//! nothing after End, End's counts), keeps the metadata and an index of the Events chunks, reads on
//! past a damaged chunk from the next whole one, and stops cleanly at a truncated tail.

use std::collections::{BTreeMap, HashMap};
use std::io::{self, BufRead, BufReader, Read, Seek, SeekFrom};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use ferrotrace_core::clock::{ClockPair, TscConverter};
use ferrotrace_core::codec::{DecodeError, EventDecoder, FieldReader};
use ferrotrace_core::format::{
    parse_file_header, ChunkHeader, ChunkKind, HeaderError, CHUNK_HEADER_LEN, FILE_HEADER_LEN,
    MAX_CHUNK_PAYLOAD, VERSION_MAJOR,
};
use ferrotrace_core::schema::{self, Payload};

use super::{
    ArgSpecs, CallGraph, ChunkRef, EventsChunk, Function, Module, Problem, ReadError, Sampler,
    Session, Trace, Truncation, NO_MODULE,
};

/// Opens and indexes the trace at `path` ([`Trace::open`]), handing each Events chunk that the pass
/// checked and indexed to `each_events_chunk` as it goes ([`Trace::open_with_events`]).
pub(super) fn open(
    path: &Path,
    each_events_chunk: &mut dyn FnMut(&Path, EventsChunk<'_>),
) -> Result<Trace, ReadError> {
    let path = path.to_path_buf();
    let io_err = |e| ReadError::Io(path.clone(), e);
    // Without O_NONBLOCK, opening a FIFO waits for a writer, forever if none comes.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(&path)
        .map_err(io_err)?;
    let meta = file.metadata().map_err(io_err)?;
    if !meta.is_file() {
        return Err(ReadError::Format(path, not_a_file(&meta)));
    }
    let file_len = meta.len();
    let mut r = BufReader::with_capacity(1 << 20, file.try_clone().map_err(io_err)?);
    let mut header = [0u8; FILE_HEADER_LEN];
    let got = read_up_to(&mut r, &mut header).map_err(io_err)?;
    let version = parse_file_header(&header[..got]).map_err(|e| {
        ReadError::Format(
            path.clone(),
            match e {
                HeaderError::Short => {
                    format!("only {got} bytes: too short to be a ferrotrace trace")
                }
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
    let flags = u32::from_le_bytes(header[12..16].try_into().expect("4 bytes"));
    if flags != 0 {
        return Err(ReadError::Format(
            path,
            format!(
                "the file header's flags are {flags:#x}: this ferrotrace knows none (format \
                 {}.{} has flags 0): written by a newer ferrotrace, or damaged",
                version.0, version.1
            ),
        ));
    }
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
        arg_specs: HashMap::new(),
        end: None,
        salvage: None,
        running: None,
        next_chunk_seq: 0,
        truncation: None,
        unknown_chunks: 0,
        problems: Vec::new(),
        unwind_stops: None,
        call_graph: CallGraph::None,
        sample_frequency: 0,
        sampler_losses: None,
        samplers: Vec::new(),
        stacks: Vec::new(),
        skipped_chunks: 0,
        spill: super::chunks::SpillFile::default(),
        converter: TscConverter::new(ClockPair::default(), ClockPair::default()),
    };
    t.session.mode = None;
    let mut offset = FILE_HEADER_LEN as u64;
    // A chunk cut by the end of the reader's buffer is copied here; the others are read in place.
    let mut straddling = Vec::new();
    // Bytes of the reader's buffer that the last chunk was read from in place.
    let mut read_in_place = 0;
    let mut next_seq = 0u32;
    let mut after_end = 0u64;
    // The pass reads the whole file: a big trace takes a while before any command can start.
    let mut progress = crate::progress::Progress::bytes("reading the trace", file_len);
    loop {
        r.consume(read_in_place);
        read_in_place = 0;
        if offset == file_len {
            break;
        }
        let mut hb = [0u8; CHUNK_HEADER_LEN];
        let got = read_up_to(&mut r, &mut hb).map_err(io_err)?;
        if got < CHUNK_HEADER_LEN {
            t.truncation = Some(Truncation {
                offset,
                reason: format!("chunk header cut short ({got} of {CHUNK_HEADER_LEN} bytes)"),
            });
            break;
        }
        let h = ChunkHeader::decode(&hb);
        // A damaged chunk: read on from the next whole chunk after it, if there is one (one flipped
        // bit must not lose the rest of the file), else stop there as at a cut-short tail.
        macro_rules! damaged {
            ($reason:expr) => {{
                let reason: String = $reason;
                match next_whole_chunk(r.get_ref(), offset + 1, file_len, next_seq)
                    .map_err(io_err)?
                {
                    Some((next, seq)) => {
                        t.problems.push(Problem::DamagedChunk {
                            offset,
                            reason,
                            first_skipped: next_seq,
                            resumed_at: seq,
                            resumed_offset: next,
                        });
                        next_seq = seq;
                        r.seek(SeekFrom::Start(next)).map_err(io_err)?;
                        read_in_place = 0;
                        offset = next;
                        continue;
                    }
                    None => {
                        t.truncation = Some(Truncation { offset, reason });
                        break;
                    }
                }
            }};
        }
        if h.len > MAX_CHUNK_PAYLOAD {
            damaged!(format!("implausible chunk length {}", h.len));
        }
        let len = h.len as usize;
        let in_place = r.buffer().len() >= len;
        let got = match in_place {
            true => len,
            false => {
                straddling.resize(len, 0);
                read_up_to(&mut r, &mut straddling).map_err(io_err)?
            }
        };
        if got < len {
            damaged!(format!("chunk of {} bytes cut short after {got}", h.len));
        }
        let payload = match in_place {
            true => {
                read_in_place = len;
                &r.buffer()[..len]
            }
            false => &straddling[..],
        };
        if !h.verify(payload) {
            damaged!("checksum mismatch".into());
        }
        let payload_offset = offset + CHUNK_HEADER_LEN as u64;
        offset = payload_offset + h.len as u64;
        progress.add(CHUNK_HEADER_LEN as u64 + h.len as u64);
        t.valid_len = offset;
        // Every chunk is numbered: a gap is a chunk that was lost, a repeat or a step back one
        // that was copied or moved. Either way the results would not be what was recorded.
        if h.seq != next_seq {
            if h.seq > next_seq {
                t.problems.push(Problem::MissingChunks {
                    first: next_seq,
                    last: h.seq - 1,
                    before: payload_offset - CHUNK_HEADER_LEN as u64,
                });
            } else {
                t.problems.push(Problem::ChunkOutOfPlace {
                    seq: h.seq,
                    offset: payload_offset - CHUNK_HEADER_LEN as u64,
                    expected: next_seq,
                });
                continue;
            }
        }
        next_seq = h.seq.wrapping_add(1);
        if t.end.is_some() {
            after_end += 1;
            continue;
        }
        match t.index_chunk(h.kind, h.seq, payload, payload_offset) {
            Ok(Some((tid, chunk))) => each_events_chunk(
                &path,
                EventsChunk {
                    tid,
                    chunk,
                    payload,
                    sources: t.session.sources,
                },
            ),
            Ok(None) => {}
            Err(e) => {
                t.truncation = Some(Truncation {
                    offset: payload_offset - CHUNK_HEADER_LEN as u64,
                    reason: format!("malformed chunk: {e}"),
                });
                t.valid_len = payload_offset - CHUNK_HEADER_LEN as u64;
                next_seq = h.seq;
                break;
            }
        }
    }
    t.next_chunk_seq = next_seq;
    if t.truncation.is_none() {
        // A cut-short tail says so itself; a file that ends cleanly must end with End (or with
        // record's Salvage, which says what the process left unwritten).
        if t.session.mode.is_none() {
            t.problems.push(Problem::NoSession);
        }
        if t.end.is_none() && t.salvage.is_none() {
            t.problems.push(Problem::NoEnd { after: t.valid_len });
        }
    }
    if after_end > 0 {
        t.problems.push(Problem::AfterEnd { chunks: after_end });
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

impl Trace {
    /// Indexes chunk `seq` of `kind`; for an Events chunk, its thread and its entry in the index.
    fn index_chunk(
        &mut self,
        kind: u32,
        seq: u32,
        p: &[u8],
        offset: u64,
    ) -> Result<Option<(u32, ChunkRef)>, DecodeError> {
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
                    min_call_ns: s.min_call_ns,
                    host: s.host.to_string(),
                    boot_id: s.boot_id.to_string(),
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
                if th.registered_ticks != 0 {
                    t.registered_tsc = Some(th.registered_ticks);
                }
            }
            Some(kind @ (ChunkKind::Events | ChunkKind::Samples)) => {
                // A thread's Events chunks, or the samples `record --sample` merged into it.
                let h = schema::EventsHeader::decode(&mut f)?;
                let th = self.threads.entry(h.tid).or_default();
                let samples = kind == ChunkKind::Samples;
                let first_of_its_kind = if samples {
                    th.sample_chunks.is_empty()
                } else {
                    th.chunks.is_empty()
                };
                if first_of_its_kind {
                    // The thread's first event: its first Events chunk's, or a sample before it.
                    let first = EventDecoder::new(f.rest(), h.base_ticks)
                        .next()
                        .and_then(Result::ok)
                        .map(|e| e.tsc);
                    th.first_tsc = match (th.first_tsc, first) {
                        (Some(a), Some(b)) => Some(a.min(b)),
                        (a, b) => a.or(b),
                    };
                }
                th.tid = h.tid;
                th.events = th.events.saturating_add(h.count);
                let chunk = ChunkRef {
                    offset,
                    len: p.len() as u32,
                    seq: h.seq,
                    count: h.count,
                };
                if samples {
                    th.sample_chunks.push(chunk);
                } else {
                    th.chunks.push(chunk, &mut self.spill);
                    return Ok(Some((h.tid, chunk)));
                }
            }
            Some(ChunkKind::Callsites) => {
                let n = schema::Count::decode(&mut f)?.0;
                for _ in 0..n {
                    let c = schema::Callsite::decode(&mut f)?;
                    if c.site.kind == schema::CallsiteKind::Span {
                        // A span is shown and selected as a function of its name, in no module.
                        self.functions.insert(
                            c.function_id,
                            Function::new(c.function_id, NO_MODULE, 0, 0, c.site.name.to_string()),
                        );
                    }
                    self.tracepoints
                        .insert(c.tracepoint_id, crate::tracepoints::from_callsite(&c));
                }
            }
            Some(ChunkKind::CallsiteMessages) => {
                let n = schema::Count::decode(&mut f)?.0;
                for _ in 0..n {
                    let m = schema::CallsiteMessage::decode(&mut f)?;
                    // Written after its callsite's entry (the first event that had it registers it).
                    if let Some(d) = self.tracepoints.get_mut(&m.tracepoint_id) {
                        d.message = Some((m.field, m.text.to_string()));
                    }
                }
            }
            Some(ChunkKind::ArgSpecs) => {
                let n = schema::Count::decode(&mut f)?.0;
                for _ in 0..n {
                    let a = schema::FunctionArgs::decode(&mut f)?;
                    let spec = |text: &str| text.parse().map_err(|_| DecodeError::BadValue);
                    self.arg_specs.insert(
                        a.function_id,
                        ArgSpecs {
                            args: spec(a.args)?,
                            retval: spec(a.retval)?,
                        },
                    );
                }
            }
            Some(ChunkKind::Tracepoints) => {
                for d in crate::tracepoints::parse_chunk(&mut f)? {
                    self.tracepoints.insert(d.id, d);
                }
            }
            Some(ChunkKind::End) => {
                let end = schema::End::decode(&mut f)?;
                if end.chunks != seq {
                    self.problems.push(Problem::EndCountsChunks {
                        counted: end.chunks,
                        held: seq,
                    });
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
                if f.remaining() > 0 {
                    self.sampler_losses = Some(schema::SamplerLosses::decode(&mut f)?);
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
            Some(ChunkKind::UnwindStops) => {
                self.unwind_stops = Some(schema::UnwindStops::decode(&mut f)?);
            }
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
        Ok(None)
    }

    /// Checks each thread's chunk numbers (0, 1, 2, ... without gaps or repeats) and the End chunk's
    /// count of events against what was read; repeats are dropped from the index.
    fn check_threads(&mut self) {
        let mut read_events = 0u64;
        for th in self.threads.values_mut() {
            if th.pid == 0 {
                th.pid = self.session.pid;
            }
            if th.chunks.disordered {
                // The first chunk in the file is not the thread's first, or a number repeats: its
                // list is sorted in memory (a damaged trace; a sound one never gets here).
                th.first_tsc = None;
                match th.chunks.sort_in_memory(&self.spill) {
                    Ok(0) => {}
                    Ok(repeats) => {
                        self.skipped_chunks += repeats as u64;
                        self.problems.push(Problem::ThreadChunksRepeat {
                            tid: th.tid,
                            repeats,
                        });
                    }
                    Err(e) => self.problems.push(Problem::ThreadIndexUnreadable {
                        tid: th.tid,
                        error: e.to_string(),
                    }),
                }
                th.events = th.chunks.events(&self.spill).unwrap_or(0)
                    + th.sample_chunks.iter().map(|c| c.count).sum::<u64>();
            }
            let (numbered, range) = th.chunks.numbers();
            if let Some((lowest, last)) = range {
                let flight = self.session.mode == Some(schema::Mode::Flight);
                // A flight ring keeps the newest chunks: its numbers may start anywhere, but not skip.
                let first = if flight { lowest } else { 0 };
                // Distinct numbers in order run without a gap exactly when the last is `first + n - 1`.
                let span = (last as u64 + 1).saturating_sub(first as u64);
                if span != numbered {
                    self.problems.push(Problem::ThreadChunksMissing {
                        tid: th.tid,
                        first,
                        last,
                        missing: span.saturating_sub(numbered),
                    });
                }
            }
            // Samples merged into a function trace are not the runtime's events (End counts those).
            th.sample_chunks.sort_by_key(|c| c.seq);
            let samples: u64 = th.sample_chunks.iter().map(|c| c.count).sum();
            if th
                .sample_chunks
                .iter()
                .zip(0..)
                .any(|(c, want)| c.seq != want)
            {
                self.problems.push(Problem::ThreadSamplesMisnumbered {
                    tid: th.tid,
                    count: th.sample_chunks.len(),
                });
            }
            read_events = read_events.saturating_add(th.events.saturating_sub(samples));
        }
        if let Some(end) = &self.end {
            let expected = end.events.saturating_sub(end.dropped_events);
            if read_events != expected {
                self.problems.push(Problem::EndCountsEvents {
                    counted: expected,
                    held: read_events,
                });
            }
        }
    }
}

/// Why a path that is not a regular file cannot be read as a trace.
fn not_a_file(meta: &std::fs::Metadata) -> String {
    use std::os::unix::fs::FileTypeExt;
    let ft = meta.file_type();
    let what = if ft.is_fifo() {
        "a pipe"
    } else if ft.is_dir() {
        "a directory"
    } else if ft.is_char_device() || ft.is_block_device() {
        "a device"
    } else if ft.is_socket() {
        "a socket"
    } else {
        "not a regular file"
    };
    if ft.is_fifo() || ft.is_socket() {
        format!(
            "{what}, not a trace file: traces are read by position (each thread's chunks in \
             turn); save it to a file first (`cat > trace.data`)"
        )
    } else {
        format!("{what}, not a trace file")
    }
}

/// The offset and number of the first whole chunk at or after `from`: a header whose kind and length are
/// plausible, whose payload fits in the file, numbered `next_seq` or later (within a bound that a
/// real file cannot pass), and whose checksum matches. `None` when there is none. Used to read on
/// past a damaged chunk; a chunk's checksum covers its header, so bytes inside damaged data are
/// taken for a chunk only by a 1-in-2^32 accident on top of the rest.
fn next_whole_chunk(
    file: &std::fs::File,
    from: u64,
    file_len: u64,
    next_seq: u32,
) -> io::Result<Option<(u64, u32)>> {
    use std::os::unix::fs::FileExt;
    const WINDOW: usize = 1 << 20;
    let mut window = vec![0u8; WINDOW + CHUNK_HEADER_LEN];
    let mut payload = Vec::new();
    let mut start = from;
    while start + CHUNK_HEADER_LEN as u64 <= file_len {
        let want = window.len().min((file_len - start) as usize);
        file.read_exact_at(&mut window[..want], start)?;
        for i in 0..=want - CHUNK_HEADER_LEN {
            let h = ChunkHeader::decode(window[i..i + CHUNK_HEADER_LEN].try_into().expect("16"));
            let at = start + i as u64;
            let fits = at + (CHUNK_HEADER_LEN as u64) + u64::from(h.len) <= file_len;
            let numbered = h.seq.wrapping_sub(next_seq) < 1 << 24;
            if h.kind == 0 || h.kind > 0xffff || h.len > MAX_CHUNK_PAYLOAD || !fits || !numbered {
                continue;
            }
            payload.resize(h.len as usize, 0);
            file.read_exact_at(&mut payload, at + CHUNK_HEADER_LEN as u64)?;
            if h.verify(&payload) {
                return Ok(Some((at, h.seq)));
            }
        }
        start += (want - CHUNK_HEADER_LEN + 1) as u64;
        if want < window.len() {
            break;
        }
    }
    Ok(None)
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

#[cfg(test)]
mod tests {
    use super::*;
    use ferrotrace_core::builder::TraceBuilder;
    use ferrotrace_core::format::file_header;
    use ferrotrace_core::record::EventKind;
    use ferrotrace_core::schema::{source, Mode};

    /// Events of the one thread: three full Events chunks (4,096 each) and one of 10.
    const EVENTS: u64 = 3 * 4096 + 10;
    const EVENTS_KIND: u32 = ChunkKind::Events as u32;

    /// The trace's problems as its warnings word them.
    fn problems_said(t: &Trace) -> Vec<String> {
        t.problems.iter().map(ToString::to_string).collect()
    }

    /// One chunk of a trace file as written.
    #[derive(Clone)]
    struct Chunk {
        kind: u32,
        seq: u32,
        payload: Vec<u8>,
    }

    /// A whole trace of thread 7 calling `t::f` over and over, through the builder.
    fn whole() -> Vec<u8> {
        let mut b = TraceBuilder::new(Vec::new(), "/bin/t", source::XRAY, Mode::Lossless).unwrap();
        b.function(1, 0x1000, 16, "t::f").unwrap();
        b.thread(7, "main").unwrap();
        for i in 0..EVENTS {
            let kind = if i % 2 == 0 {
                EventKind::Entry
            } else {
                EventKind::Exit
            };
            b.event(7, 1_000 + 10 * i, kind, 1).unwrap();
        }
        b.finish().unwrap()
    }

    fn split(bytes: &[u8]) -> Vec<Chunk> {
        let mut chunks = Vec::new();
        let mut at = FILE_HEADER_LEN;
        while at < bytes.len() {
            let h = ChunkHeader::decode(bytes[at..at + CHUNK_HEADER_LEN].try_into().unwrap());
            let start = at + CHUNK_HEADER_LEN;
            chunks.push(Chunk {
                kind: h.kind,
                seq: h.seq,
                payload: bytes[start..start + h.len as usize].to_vec(),
            });
            at = start + h.len as usize;
        }
        chunks
    }

    /// The file of `chunks`, each with a header (and CRC) for its number.
    fn join(chunks: &[Chunk]) -> Vec<u8> {
        let mut out = file_header().to_vec();
        for c in chunks {
            let kind = ChunkKind::from_u32(c.kind).unwrap();
            out.extend(ChunkHeader::for_payload(kind, c.seq, &c.payload).encode());
            out.extend(&c.payload);
        }
        out
    }

    /// Numbers `chunks` 0, 1, 2, ... again (what a writer that lost or copied one would have done).
    fn renumber(chunks: &mut [Chunk]) {
        for (i, c) in chunks.iter_mut().enumerate() {
            c.seq = i as u32;
        }
    }

    /// Byte offset of chunk `i` of the file `chunks` makes.
    fn offset_of(chunks: &[Chunk], i: usize) -> u64 {
        (FILE_HEADER_LEN
            + chunks[..i]
                .iter()
                .map(|c| CHUNK_HEADER_LEN + c.payload.len())
                .sum::<usize>()) as u64
    }

    /// Indices of the Events chunks.
    fn events_chunks(chunks: &[Chunk]) -> Vec<usize> {
        (0..chunks.len())
            .filter(|&i| chunks[i].kind == EVENTS_KIND)
            .collect()
    }

    fn open_bytes(name: &str, bytes: &[u8]) -> Trace {
        let path = std::env::temp_dir().join(format!(
            "ft-reader-index-{}-{name}.data",
            std::process::id()
        ));
        std::fs::write(&path, bytes).unwrap();
        let t = Trace::open(&path).unwrap();
        let _ = std::fs::remove_file(&path);
        t
    }

    /// A trace of the threads `tids` taking turns, `per_thread` Events chunks each of one call of
    /// `t::f` (2 events), with the metadata of [`whole`]; `edit` changes the Events chunks before the
    /// file is numbered (the End chunk counts the events from before).
    fn interleaved(tids: &[u32], per_thread: u32, edit: impl FnOnce(&mut Vec<Chunk>)) -> Vec<u8> {
        let call = |ticks: u64, kind| ferrotrace_core::builder::Event {
            ticks,
            kind,
            id: 1,
            payload: Vec::new(),
            fields: Default::default(),
        };
        let mut events = Vec::new();
        for i in 0..per_thread {
            for (t, &tid) in tids.iter().enumerate() {
                let at = 1_000 + 10 * (i as u64 * tids.len() as u64 + t as u64);
                let mut payload = Vec::new();
                ferrotrace_core::builder::encode_events(
                    tid,
                    i,
                    &[call(at, EventKind::Entry), call(at + 5, EventKind::Exit)],
                    &mut payload,
                );
                events.push(Chunk {
                    kind: EVENTS_KIND,
                    seq: 0,
                    payload,
                });
            }
        }
        // What the writer wrote; `edit` copies or moves chunks as damage would.
        let n_events = 2 * events.len() as u64;
        edit(&mut events);
        let mut chunks = Vec::new();
        for mut c in split(&whole()) {
            if c.kind == EVENTS_KIND {
                chunks.append(&mut events);
                continue;
            }
            if c.kind == ChunkKind::End as u32 {
                let mut end = schema::End::decode(&mut FieldReader::new(&c.payload)).unwrap();
                end.events = n_events;
                end.chunks = chunks.len() as u32;
                c.payload.clear();
                end.encode(&mut c.payload).unwrap();
            }
            chunks.push(c);
        }
        renumber(&mut chunks);
        join(&chunks)
    }

    /// Each thread's events as the stream gives them: `(tsc, kind)`.
    fn thread_ticks(t: &Trace, tid: u32) -> Vec<(u64, EventKind)> {
        t.thread_events(tid)
            .unwrap()
            .map(|e| e.map(|e| (e.tsc, e.kind)).unwrap())
            .collect()
    }

    #[test]
    fn the_index_in_memory_does_not_grow_with_the_trace() {
        let tids = [7, 8];
        let mut held = Vec::new();
        for per_thread in [300, 3_000] {
            let t = open_bytes(
                &format!("bounded-{per_thread}"),
                &interleaved(&tids, per_thread, |_| {}),
            );
            assert_eq!(problems_said(&t), Vec::<String>::new());
            assert_eq!(t.event_count(), 2 * 2 * per_thread as u64);
            // Older entries went to the temporary file; what stays is at most a block per thread.
            assert!(t.index_bytes_on_disk() > 0);
            assert!(
                t.index_entries_in_memory() <= tids.len() * super::super::chunks::BLOCK_ENTRIES
            );
            held.push(t.index_entries_in_memory());
            for (k, &tid) in tids.iter().enumerate() {
                let seqs: Vec<u32> = t.thread_chunks(tid).map(|c| c.unwrap().seq).collect();
                assert_eq!(seqs, (0..per_thread).collect::<Vec<_>>());
                let ticks = thread_ticks(&t, tid);
                assert_eq!(ticks.len(), 2 * per_thread as usize);
                for (i, pair) in ticks.chunks(2).enumerate() {
                    let at = 1_000 + 10 * (i * tids.len() + k) as u64;
                    assert_eq!(pair, [(at, EventKind::Entry), (at + 5, EventKind::Exit)]);
                }
            }
            let merged: Vec<u64> = t.events().unwrap().map(|e| e.unwrap().tsc).collect();
            assert_eq!(merged.len() as u64, t.event_count());
            assert!(merged.is_sorted());
        }
        // Ten times the chunks, the same entries in memory.
        assert_eq!(held[0], held[1]);
    }

    #[test]
    fn a_repeated_chunk_of_a_long_thread_is_skipped_after_its_index_is_read_back() {
        let tids = [7, 8];
        let per_thread = 1_000;
        // Thread 8's chunk 10 again, far after it (its first copy went to the temporary file).
        let bytes = interleaved(&tids, per_thread, |events| {
            let copy = events[2 * 10 + 1].clone();
            events.insert(2 * 900, copy);
        });
        let t = open_bytes("repeat-spilled", &bytes);
        assert_eq!(
            problems_said(&t),
            vec!["thread 8: 1 events chunks repeat a chunk number: skipped".to_string()]
        );
        assert_eq!(t.event_count(), 2 * 2 * per_thread as u64);
        let seqs: Vec<u32> = t.thread_chunks(8).map(|c| c.unwrap().seq).collect();
        assert_eq!(seqs, (0..per_thread).collect::<Vec<_>>());
        assert_eq!(thread_ticks(&t, 8).len(), 2 * per_thread as usize);
        assert_eq!(thread_ticks(&t, 7).len(), 2 * per_thread as usize);
    }

    #[test]
    fn a_whole_trace_has_no_problems() {
        let bytes = whole();
        let chunks = split(&bytes);
        assert_eq!(events_chunks(&chunks).len(), 4);
        let t = open_bytes("whole", &bytes);
        assert_eq!(problems_said(&t), Vec::<String>::new());
        assert_eq!(t.truncation, None);
        assert!(t.end.is_some());
        assert_eq!(t.event_count(), EVENTS);
        assert_eq!(t.valid_len, bytes.len() as u64);
        assert_eq!(t.next_chunk_seq, chunks.len() as u32);
    }

    #[test]
    fn a_missing_chunk_is_a_gap() {
        let mut chunks = split(&whole());
        let i = events_chunks(&chunks)[1];
        let seq = chunks[i].seq;
        chunks.remove(i);
        let t = open_bytes("missing", &join(&chunks));
        assert_eq!(
            problems_said(&t)[0],
            format!(
                "chunks {seq}..{seq} are missing (before byte {})",
                offset_of(&chunks, i)
            )
        );
        assert!(problems_said(&t).contains(&format!(
            "the End chunk counts {EVENTS} events, the file holds {}",
            EVENTS - 4096
        )));
        assert_eq!(t.truncation, None);
        assert_eq!(t.event_count(), EVENTS - 4096);
    }

    #[test]
    fn a_repeated_chunk_is_skipped() {
        let mut chunks = split(&whole());
        let i = events_chunks(&chunks)[1];
        chunks.insert(i + 1, chunks[i].clone());
        let seq = chunks[i].seq;
        let t = open_bytes("repeated", &join(&chunks));
        assert_eq!(
            problems_said(&t),
            vec![format!(
                "chunk {seq} at byte {} repeats or is out of place (expected chunk {}): skipped",
                offset_of(&chunks, i + 1),
                seq + 1
            )]
        );
        assert_eq!(t.event_count(), EVENTS);
        assert!(t.end.is_some());
    }

    #[test]
    fn chunks_out_of_order_are_a_gap_then_a_step_back() {
        let mut chunks = split(&whole());
        let e = events_chunks(&chunks);
        let (a, b) = (e[1], e[2]);
        assert_eq!(b, a + 1);
        chunks.swap(a, b);
        let seq = chunks[b].seq;
        let t = open_bytes("swapped", &join(&chunks));
        assert_eq!(
            problems_said(&t)[..2],
            [
                format!(
                    "chunks {seq}..{seq} are missing (before byte {})",
                    offset_of(&chunks, a)
                ),
                format!(
                    "chunk {seq} at byte {} repeats or is out of place (expected chunk {}): skipped",
                    offset_of(&chunks, b),
                    seq + 2
                ),
            ]
        );
        // The step back is skipped: its thread misses that chunk's events.
        assert_eq!(t.event_count(), EVENTS - 4096);
    }

    #[test]
    fn chunks_after_the_end_are_ignored() {
        let mut chunks = split(&whole());
        let i = events_chunks(&chunks)[0];
        let mut extra = chunks[i].clone();
        extra.seq = chunks.len() as u32;
        chunks.push(extra);
        let t = open_bytes("after-end", &join(&chunks));
        assert_eq!(
            problems_said(&t),
            vec!["1 chunks follow the End chunk (appended later?): ignored".to_string()]
        );
        assert_eq!(t.event_count(), EVENTS);
        assert_eq!(t.next_chunk_seq, chunks.len() as u32);
    }

    #[test]
    fn an_end_that_counts_otherwise_and_a_thread_gap_are_problems() {
        // A chunk lost and the rest numbered again: the file's numbering has no gap, but End's counts
        // and the thread's own numbering tell.
        let mut chunks = split(&whole());
        let i = events_chunks(&chunks)[1];
        chunks.remove(i);
        renumber(&mut chunks);
        let t = open_bytes("end-counts", &join(&chunks));
        let end_seq = chunks.len() as u32 - 1;
        assert_eq!(
            problems_said(&t),
            vec![
                format!(
                    "the End chunk counts {} chunks before it, the file holds {end_seq}",
                    end_seq + 1
                ),
                "thread 7: its events chunks are numbered 0..=3 but 1 of them are missing"
                    .to_string(),
                format!(
                    "the End chunk counts {EVENTS} events, the file holds {}",
                    EVENTS - 4096
                ),
            ]
        );
        assert!(t.running_at_start().is_none());
    }

    #[test]
    fn a_thread_chunk_number_repeated_is_skipped() {
        let mut chunks = split(&whole());
        let i = events_chunks(&chunks)[1];
        chunks.insert(i + 1, chunks[i].clone());
        renumber(&mut chunks);
        let t = open_bytes("thread-repeat", &join(&chunks));
        let end_seq = chunks.len() as u32 - 1;
        assert_eq!(
            problems_said(&t),
            vec![
                format!(
                    "the End chunk counts {} chunks before it, the file holds {end_seq}",
                    end_seq - 1
                ),
                "thread 7: 1 events chunks repeat a chunk number: skipped".to_string(),
            ]
        );
        assert_eq!(t.event_count(), EVENTS);
        assert_eq!(t.threads[&7].chunks.len(), 4);
    }

    #[test]
    fn a_chunk_across_the_read_buffers_end_is_copied_and_checked() {
        // The pass reads chunks in place in its 1 MiB buffer, and copies the one whose payload runs
        // past the buffer's end (the first end is at byte 2^20). Find a trace where a payload does.
        const BUFFER_END: usize = 1 << 20;
        let per_thread = 40_000;
        // Thread ids of other lengths (varints) make chunks of other lengths.
        let tid_pairs = [[7, 8], [7, 300], [300, 301], [7, 70_000], [300, 70_000]];
        let straddling = tid_pairs.into_iter().find_map(|tids| {
            let bytes = interleaved(&tids, per_thread, |_| {});
            let chunks = split(&bytes);
            let i = (0..chunks.len()).find(|&i| {
                let payload = offset_of(&chunks, i) as usize + CHUNK_HEADER_LEN;
                payload < BUFFER_END && BUFFER_END < payload + chunks[i].payload.len()
            })?;
            Some((tids, bytes, chunks, i))
        });
        let (tids, bytes, chunks, i) = straddling.expect("a payload across byte 2^20");
        let t = open_bytes("straddle", &bytes);
        assert_eq!(problems_said(&t), Vec::<String>::new());
        assert_eq!(t.truncation, None);
        assert_eq!(t.event_count(), 2 * 2 * per_thread as u64);
        assert_eq!(thread_ticks(&t, tids[1]).len(), 2 * per_thread as usize);
        // Its last byte, after the buffer's end, damaged: the copy is checked (and skipped).
        let at = offset_of(&chunks, i);
        let mut damaged = bytes.clone();
        damaged[at as usize + CHUNK_HEADER_LEN + chunks[i].payload.len() - 1] ^= 0x40;
        let t = open_bytes("straddle-crc", &damaged);
        assert!(
            problems_said(&t)[0].starts_with(&format!(
                "the chunk at byte {at} is damaged (checksum mismatch)"
            )),
            "{:?}",
            problems_said(&t)
        );
    }

    /// `t` was read up to the chunk at `at`, whose checksum did not match.
    fn assert_cut_by_checksum_at(t: &Trace, at: u64) {
        assert_eq!(
            t.truncation,
            Some(Truncation {
                offset: at,
                reason: "checksum mismatch".into()
            })
        );
        assert_eq!(t.valid_len, at);
    }

    #[test]
    fn a_damaged_chunk_is_skipped_and_the_chunks_after_it_are_read() {
        let bytes = whole();
        let chunks = split(&bytes);
        let i = events_chunks(&chunks)[1];
        let at = offset_of(&chunks, i);
        let next = offset_of(&chunks, i + 1);
        let whole_count = open_bytes("whole", &bytes).event_count();
        // One flipped bit in the payload, then in the header's length (which makes the chunk run
        // past the next ones, or the file), then in its number: the chunk is lost, nothing else.
        for (case, byte) in [
            ("crc", at as usize + CHUNK_HEADER_LEN + 5),
            ("len", at as usize + 6),
            ("seq", at as usize + 8),
        ] {
            let mut damaged = bytes.clone();
            damaged[byte] ^= 0x40;
            let t = open_bytes(case, &damaged);
            assert_eq!(t.truncation, None, "{case}");
            assert!(t.end.is_some(), "{case}");
            assert_eq!(t.event_count(), whole_count - 4096, "{case}");
            assert_eq!(t.next_chunk_seq, chunks.len() as u32, "{case}");
            let said = &problems_said(&t)[0];
            assert!(
                said.starts_with(&format!("the chunk at byte {at} is damaged ("))
                    && said.ends_with(&format!(
                        "): chunk {} (bytes {at}..{next}) skipped, read on from chunk {}",
                        chunks[i].seq,
                        chunks[i + 1].seq
                    )),
                "{case}: {:?}",
                problems_said(&t)
            );
        }
    }

    #[test]
    fn a_damaged_last_chunk_ends_the_readable_prefix() {
        let bytes = whole();
        let chunks = split(&bytes);
        let end = chunks.len() - 1;
        let at = offset_of(&chunks, end);
        let mut damaged = bytes.clone();
        damaged[at as usize + CHUNK_HEADER_LEN + 1] ^= 0x40;
        let t = open_bytes("crc-end", &damaged);
        assert_cut_by_checksum_at(&t, at);
        assert_eq!(t.next_chunk_seq, chunks[end].seq);
        assert!(t.end.is_none());
        assert_eq!(problems_said(&t), Vec::<String>::new());
    }

    #[test]
    fn a_trace_cut_at_a_chunk_boundary_is_a_clean_prefix() {
        let bytes = whole();
        let chunks = split(&bytes);
        let end = chunks.len() - 1;
        let at = offset_of(&chunks, end) as usize;
        let t = open_bytes("cut-boundary", &bytes[..at]);
        assert_eq!(t.truncation, None);
        assert!(t.end.is_none());
        // Clean, but not whole: every command warns (issue 20.12: read silently, exit 0).
        assert_eq!(
            problems_said(&t),
            vec![format!(
                "the trace has no End chunk after byte {at}: the process ended without finishing \
                 it (killed, or crashed), or it is still being written"
            )]
        );
        assert_eq!(t.valid_len, at as u64);
        assert_eq!(t.next_chunk_seq, end as u32);
        assert_eq!(t.event_count(), EVENTS);
        // No End chunk: the writer's list of running functions is not trusted.
        assert!(t.running_at_start().is_none());

        let t = open_bytes("cut-header", &bytes[..at + 5]);
        // The cut says it all: no second word about the End chunk it took away.
        assert_eq!(problems_said(&t), Vec::<String>::new());
        let cut = t.truncation.expect("cut inside a header");
        assert_eq!(cut.offset, at as u64);
        assert_eq!(cut.reason, "chunk header cut short (5 of 16 bytes)");
        assert_eq!(t.valid_len, at as u64);

        let len = chunks[end].payload.len();
        let t = open_bytes("cut-payload", &bytes[..at + CHUNK_HEADER_LEN + 3]);
        assert_eq!(
            t.truncation,
            Some(Truncation {
                offset: at as u64,
                reason: format!("chunk of {len} bytes cut short after 3")
            })
        );
    }

    #[test]
    fn a_trace_without_its_session_chunk_is_a_problem() {
        let mut chunks = split(&whole());
        assert_eq!(chunks[0].kind, ChunkKind::Session as u32);
        chunks.remove(0);
        renumber(&mut chunks);
        let t = open_bytes("no-session", &join(&chunks));
        assert!(
            problems_said(&t).contains(
                &"the trace has no Session chunk (its first chunk): what recorded it, and how, \
                  is unknown"
                    .to_string()
            ),
            "{:?}",
            problems_said(&t)
        );
    }

    #[test]
    fn header_flags_this_reader_does_not_know_are_refused() {
        let mut bytes = whole();
        bytes[12] = 4;
        let path = std::env::temp_dir().join(format!("ft-reader-flags-{}", std::process::id()));
        std::fs::write(&path, &bytes).unwrap();
        let err = Trace::open(&path).unwrap_err().to_string();
        let _ = std::fs::remove_file(&path);
        let (major, minor) = (
            ferrotrace_core::format::VERSION_MAJOR,
            ferrotrace_core::format::VERSION_MINOR,
        );
        assert!(
            err.ends_with(&format!(
                "the file header's flags are 0x4: this ferrotrace knows none (format {major}.{minor} \
                 has flags 0): written by a newer ferrotrace, or damaged"
            )),
            "{err}"
        );
    }

    #[test]
    fn a_pipe_is_refused_at_once_not_waited_on() {
        let dir = std::env::temp_dir().join(format!("ft-reader-fifo-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let fifo = dir.join("trace.data");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        // No writer: opening it the ordinary way would wait forever.
        let err = Trace::open(&fifo).unwrap_err().to_string();
        assert!(
            err.ends_with(
                "trace.data: a pipe, not a trace file: traces are read by position (each \
                 thread's chunks in turn); save it to a file first (`cat > trace.data`)"
            ),
            "{err}"
        );
        let err = Trace::open(&dir).unwrap_err().to_string();
        assert!(err.ends_with(": a directory, not a trace file"), "{err}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
