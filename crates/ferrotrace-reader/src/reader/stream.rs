//! Streaming events: one decoded chunk per thread in memory at a time, per thread
//! ([`ThreadEvents`]) or merged across threads in time order ([`MergedEvents`]).

use std::collections::BinaryHeap;
use std::os::unix::fs::FileExt;
use std::path::Path;

use ferrotrace_core::codec::{DecodeError, EventDecoder, EventFields, FieldReader};
use ferrotrace_core::schema::{self, Payload};

use super::chunks::ChunkCursor;
use super::{ChunkRef, Event, EventKind, EventRef, ReadError, Trace};

fn decode_err(path: &Path, offset: u64, e: DecodeError) -> ReadError {
    ReadError::Corrupt(path.to_path_buf(), offset, e.to_string())
}

/// The error of a chunk that announces `count` events but holds `decoded`.
fn check_count(path: &Path, c: ChunkRef, count: u64, decoded: u64) -> Result<(), ReadError> {
    if count == decoded {
        return Ok(());
    }
    Err(ReadError::Corrupt(
        path.to_path_buf(),
        c.offset,
        format!("chunk announces {count} events but holds {decoded}"),
    ))
}

/// What [`ThreadEvents::visit_next_chunk`] hands a chunk's events to, as they are decoded.
pub trait VisitEvents {
    /// Before the chunk's events: the tick of its first one.
    fn chunk_start(&mut self, first_tsc: u64);
    /// The run of function entries, exits and tail exits that `decoder` decodes next (through
    /// [`EventDecoder::function_run`]); how many there were.
    fn function_run(&mut self, decoder: &mut EventDecoder<'_>) -> u64;
    /// Any other event, with its payload (a slice of the chunk) and fields.
    fn other(&mut self, tsc: u64, kind: EventKind, id: u32, payload: &[u8], fields: EventFields);
}

/// The batch of [`ThreadEvents::load_next_chunk`] as a visitor: a chunk's events stored as
/// [`RawEvent`]s, with payloads and fields in the side table.
struct BatchSink<'b> {
    events: &'b mut Vec<RawEvent>,
    extras: &'b mut Vec<Extra>,
    /// The address of the chunk buffer's first byte: payloads are stored as offsets into it.
    buf_start: usize,
}

impl VisitEvents for BatchSink<'_> {
    fn chunk_start(&mut self, _first_tsc: u64) {}

    #[inline(always)]
    fn function_run(&mut self, decoder: &mut EventDecoder<'_>) -> u64 {
        let before = self.events.len();
        decoder.function_run(|tsc, kind, id, exit| {
            self.events.push(RawEvent {
                tsc,
                id,
                kind,
                extra: false,
            });
            if let Some(tsc) = exit {
                self.events.push(RawEvent {
                    tsc,
                    id,
                    kind: EventKind::Exit,
                    extra: false,
                });
            }
        });
        (self.events.len() - before) as u64
    }

    fn other(&mut self, tsc: u64, kind: EventKind, id: u32, payload: &[u8], fields: EventFields) {
        let extra = !payload.is_empty() || fields != EventFields::default();
        if extra {
            // An empty payload's pointer need not point into the buffer.
            let start = match payload.is_empty() {
                true => 0,
                false => payload.as_ptr() as usize - self.buf_start,
            };
            self.extras.push(Extra {
                payload_start: start as u32,
                payload_len: payload.len() as u32,
                fields,
            });
        }
        self.events.push(RawEvent {
            tsc,
            id,
            kind,
            extra,
        });
    }
}

/// Decodes the events of chunk `c` (its header `head`, its events in `body`) into `visit`: function
/// entries and exits through the fast loop, the rest (and a chunk's last bytes) through the checked
/// decoder. Every event is visited as decoded, so a malformed one ends the chunk after the events
/// before it were visited; so does a count that differs from the header's. Returns the count.
fn visit_chunk(
    path: &Path,
    c: ChunkRef,
    head: &schema::EventsHeader,
    body: &[u8],
    visit: &mut impl VisitEvents,
) -> Result<u64, ReadError> {
    let mut decoder = EventDecoder::new(body, head.base_ticks);
    if let Some(Ok(first)) = decoder.clone().next() {
        visit.chunk_start(first.tsc);
    }
    let mut n = 0u64;
    loop {
        n += visit.function_run(&mut decoder);
        let Some(e) = decoder.next() else {
            break;
        };
        let e = e.map_err(|e| decode_err(path, c.offset, e))?;
        n += 1;
        visit.other(e.tsc, e.kind, e.id, e.payload, e.fields);
    }
    check_count(path, c, head.count, n)?;
    Ok(n)
}

/// The header of Events (or Samples) chunk `c`, whose payload is `payload`, and where in `payload` its
/// events start.
fn events_header(
    path: &Path,
    c: ChunkRef,
    payload: &[u8],
) -> Result<(schema::EventsHeader, usize), ReadError> {
    let mut f = FieldReader::new(payload);
    let head = schema::EventsHeader::decode(&mut f).map_err(|e| decode_err(path, c.offset, e))?;
    Ok((head, payload.len() - f.rest().len()))
}

/// Reads the Events (or Samples) chunk `c` into `buf`: its header, and where in `buf` its events start.
fn read_events_chunk(
    trace: &Trace,
    c: ChunkRef,
    buf: &mut Vec<u8>,
) -> Result<(schema::EventsHeader, usize), ReadError> {
    buf.resize(c.len as usize, 0);
    trace
        .file
        .read_exact_at(buf, c.offset)
        .map_err(|e| ReadError::Io(trace.path.clone(), e))?;
    events_header(&trace.path, c, buf)
}

/// Decodes the Events chunk `c`, whose payload the index pass read ([`Trace::open_with_events`]),
/// into `visit`, as [`ThreadEvents::visit_next_chunk`] decodes a chunk it reads: the chunk's number of
/// events, or the same error.
pub fn visit_events_payload(
    path: &Path,
    c: ChunkRef,
    payload: &[u8],
    visit: &mut impl VisitEvents,
) -> Result<u64, ReadError> {
    let (head, events_at) = events_header(path, c, payload)?;
    visit_chunk(path, c, &head, &payload[events_at..], visit)
}

impl Trace {
    /// Streams the events of one thread in order.
    pub fn thread_events(&self, tid: u32) -> Result<ThreadEvents<'_>, ReadError> {
        let (chunks, sample_chunks, first_tsc) = match self.threads.get(&tid) {
            Some(t) => (
                Some(t.chunks.iter(&self.spill)),
                &t.sample_chunks[..],
                t.first_tsc,
            ),
            None => (None, &[][..], None),
        };
        Ok(ThreadEvents {
            trace: self,
            tid,
            chunks,
            sample_chunks,
            first_tsc,
            started: false,
            next_sample_chunk: 0,
            samples: std::collections::VecDeque::new(),
            sample_buf: Vec::new(),
            buf: Vec::new(),
            events: Vec::new(),
            extras: Vec::new(),
            pos: 0,
            extra_pos: 0,
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
            // Placed by their first event's time from the index: a thread's chunk is decoded when
            // the merge reaches it.
            match m.streams[s].peek_tsc() {
                Ok(Some(tsc)) => m.heap.push((std::cmp::Reverse(tsc), std::cmp::Reverse(s))),
                Ok(None) => {}
                Err(e) => m.error = Some(e),
            }
        }
        Ok(m)
    }
}

/// A decoded event, 16 bytes: what the analyses that read every event need. Its payload and fields,
/// which only some kinds have, are in the stream's side table ([`Extra`]).
#[derive(Clone, Copy, Debug)]
pub struct RawEvent {
    /// Its raw timestamp (ticks of the trace's clock).
    pub tsc: u64,
    /// Its function, tracepoint or sampler id.
    pub id: u32,
    /// What happened.
    pub kind: EventKind,
    /// It has an entry in the side table.
    pub extra: bool,
}

impl RawEvent {
    /// An event without payload or fields (what tests of the consumers of batches build).
    pub fn new(tsc: u64, kind: EventKind, id: u32) -> RawEvent {
        RawEvent {
            tsc,
            id,
            kind,
            extra: false,
        }
    }
}

/// The payload (a range of the chunk buffer) and fields of an event that has either.
#[derive(Clone, Copy, Debug)]
pub struct Extra {
    payload_start: u32,
    payload_len: u32,
    /// Its fields (CPU, stack, ...: `ferrotrace_core::codec::EventFields`).
    pub fields: EventFields,
}

/// Events of one thread, chunk by chunk (one decoded chunk in memory at a time).
///
/// Use it as an [`Iterator`] of owned [`Event`]s, or call [`ThreadEvents::next_ref`] for borrowed
/// [`EventRef`]s without any per-event allocation.
pub struct ThreadEvents<'a> {
    trace: &'a Trace,
    tid: u32,
    /// The thread's chunks in the index (a cursor: a stream holds at most one block of it); `None`
    /// once the stream ended.
    chunks: Option<ChunkCursor<'a>>,
    /// Its Samples chunks (`record --sample`): merged into the events of `chunks` in time order.
    sample_chunks: &'a [ChunkRef],
    next_sample_chunk: usize,
    /// Samples decoded and not merged yet, in time order, with their fields (sampler and weight;
    /// samples have no payload).
    samples: std::collections::VecDeque<(RawEvent, EventFields)>,
    /// The last Samples chunk read.
    sample_buf: Vec<u8>,
    /// The tick of the thread's first event, from the index ([`super::Thread::first_tsc`]).
    first_tsc: Option<u64>,
    /// A chunk was read.
    started: bool,
    buf: Vec<u8>,
    /// The decoded events of the chunk in `buf`.
    events: Vec<RawEvent>,
    /// The payloads and fields of those events that have them, in order.
    extras: Vec<Extra>,
    pos: usize,
    /// The entry of `extras` of the first event with one at or after `pos`.
    extra_pos: usize,
}

impl ThreadEvents<'_> {
    /// The thread's next Events chunk in the index; `None` (and the cursor dropped) after the last.
    fn next_events_chunk(&mut self) -> Result<Option<ChunkRef>, ReadError> {
        self.started = true;
        let next = match self.chunks.as_mut() {
            Some(cursor) => cursor.next_chunk().map_err(|e| self.trace.index_error(e))?,
            None => None,
        };
        if next.is_none() {
            self.chunks = None;
        }
        Ok(next)
    }

    fn load_next_chunk(&mut self) -> Result<bool, ReadError> {
        let Some(c) = self.next_events_chunk()? else {
            // After the last Events chunk: the samples that remain.
            self.events.clear();
            self.extras.clear();
            self.pos = 0;
            self.extra_pos = 0;
            self.merge_samples(None)?;
            return Ok(!self.events.is_empty());
        };
        let (head, events_at) = read_events_chunk(self.trace, c, &mut self.buf)?;
        self.events.clear();
        self.extras.clear();
        self.pos = 0;
        self.extra_pos = 0;
        let body = &self.buf[events_at..];
        // Every event takes at least two bytes: a corrupt count cannot make this reserve much.
        self.events
            .reserve((head.count.min(body.len() as u64 / 2 + 1)) as usize);
        let mut sink = BatchSink {
            events: &mut self.events,
            extras: &mut self.extras,
            buf_start: self.buf.as_ptr() as usize,
        };
        visit_chunk(&self.trace.path, c, &head, body, &mut sink)?;
        if self.next_sample_chunk < self.sample_chunks.len() || !self.samples.is_empty() {
            // Samples up to this chunk's last event go in; later ones wait for the next chunk (after
            // the last one, the rest come alone).
            let bound = self.events.last().map_or(0, |e| e.tsc);
            self.merge_samples(Some(bound))?;
        }
        Ok(true)
    }

    /// Decodes the thread's next Events chunk straight into `visit`, never materialising its events
    /// (what `report` spends its time on: no 16-byte event is stored and loaded again per entry or
    /// exit); the chunk's number of events, or `None` after the last chunk. The checks are those of
    /// the batches: malformed events and a count that differs from the chunk's end the stream with
    /// the same error, but the events of that chunk before the error were visited. Only for a
    /// thread without Samples chunks ([`ThreadEvents::has_samples`]): those are merged into the
    /// batches in time order, which this does not do.
    pub fn visit_next_chunk(
        &mut self,
        visit: &mut impl VisitEvents,
    ) -> Result<Option<u64>, ReadError> {
        debug_assert!(!self.has_samples());
        let Some(c) = self.next_events_chunk()? else {
            return Ok(None);
        };
        let (head, events_at) = read_events_chunk(self.trace, c, &mut self.buf)?;
        let n = visit_chunk(&self.trace.path, c, &head, &self.buf[events_at..], visit)?;
        Ok(Some(n))
    }

    /// The thread has Samples chunks (`record --sample`).
    pub fn has_samples(&self) -> bool {
        !self.sample_chunks.is_empty()
    }

    /// Merges the thread's samples stamped up to `bound` (all of them: `None`) into `events` and
    /// `extras`, in time order (a sample after a function event of the same tick), decoding Samples
    /// chunks as far as needed.
    fn merge_samples(&mut self, bound: Option<u64>) -> Result<(), ReadError> {
        let within = |t: u64| bound.is_none_or(|b| t <= b);
        while self.samples.back().is_none_or(|(s, _)| within(s.tsc)) {
            let Some(c) = self.sample_chunks.get(self.next_sample_chunk).copied() else {
                break;
            };
            self.next_sample_chunk += 1;
            let path = &self.trace.path;
            let (head, events_at) = read_events_chunk(self.trace, c, &mut self.sample_buf)?;
            for e in EventDecoder::new(&self.sample_buf[events_at..], head.base_ticks) {
                let e = e.map_err(|e| decode_err(path, c.offset, e))?;
                let raw = RawEvent {
                    tsc: e.tsc,
                    id: e.id,
                    kind: e.kind,
                    extra: e.fields != EventFields::default(),
                };
                self.samples.push_back((raw, e.fields));
            }
        }
        let take = self.samples.partition_point(|(s, _)| within(s.tsc));
        if take == 0 {
            return Ok(());
        }
        let functions = std::mem::take(&mut self.events);
        let function_extras = std::mem::take(&mut self.extras);
        let mut merged = Vec::with_capacity(functions.len() + take);
        let mut extras = Vec::with_capacity(function_extras.len() + take);
        let mut function_extras = function_extras.into_iter();
        let mut samples = self.samples.drain(..take).peekable();
        let push_sample = |(s, fields): (RawEvent, EventFields),
                           merged: &mut Vec<RawEvent>,
                           extras: &mut Vec<Extra>| {
            if s.extra {
                extras.push(Extra {
                    payload_start: 0,
                    payload_len: 0,
                    fields,
                });
            }
            merged.push(s);
        };
        for e in functions {
            while let Some(s) = samples.next_if(|(s, _)| s.tsc < e.tsc) {
                push_sample(s, &mut merged, &mut extras);
            }
            if e.extra {
                // Taken in order: the function events' own side-table entries.
                extras.extend(function_extras.next());
            }
            merged.push(e);
        }
        for s in samples {
            push_sample(s, &mut merged, &mut extras);
        }
        self.events = merged;
        self.extras = extras;
        Ok(())
    }

    /// Makes sure an event is available at `pos`; `Ok(false)` at the end.
    fn fill(&mut self) -> Result<bool, ReadError> {
        while self.pos >= self.events.len() {
            match self.load_next_chunk() {
                Ok(true) => {}
                Ok(false) => {
                    // Done: a merge of many threads keeps only those still going in memory.
                    if self.events.capacity() > 0 {
                        self.events = Vec::new();
                        self.extras = Vec::new();
                        self.buf = Vec::new();
                        self.pos = 0;
                        self.extra_pos = 0;
                    }
                    return Ok(false);
                }
                Err(e) => {
                    self.chunks = None;
                    self.next_sample_chunk = self.sample_chunks.len();
                    self.samples.clear();
                    self.events.clear();
                    self.extras.clear();
                    self.pos = 0;
                    self.extra_pos = 0;
                    return Err(e);
                }
            }
        }
        Ok(true)
    }

    /// The event at `pos`, whose side-table entry (if it has one) is at `extra_pos`.
    fn event_at(&self, pos: usize, extra_pos: usize) -> EventRef<'_> {
        let r = self.events[pos];
        let (payload, fields) = match r.extra {
            true => {
                let x = self.extras[extra_pos];
                let start = x.payload_start as usize;
                (&self.buf[start..start + x.payload_len as usize], x.fields)
            }
            false => (&[][..], EventFields::default()),
        };
        EventRef {
            tid: self.tid,
            ts_ns: self.trace.converter.to_ns(r.tsc),
            tsc: r.tsc,
            kind: r.kind,
            id: r.id,
            payload,
            fields,
        }
    }

    /// Moves past the event at `pos`.
    #[inline]
    fn advance(&mut self) {
        self.extra_pos += self.events[self.pos].extra as usize;
        self.pos += 1;
    }

    /// The next event, borrowed (no allocation). After an error the stream ends.
    #[allow(clippy::should_implement_trait)]
    pub fn next_ref(&mut self) -> Option<Result<EventRef<'_>, ReadError>> {
        match self.fill() {
            Ok(true) => {}
            Ok(false) => return None,
            Err(e) => return Some(Err(e)),
        }
        let (pos, extra_pos) = (self.pos, self.extra_pos);
        self.advance();
        Some(Ok(self.event_at(pos, extra_pos)))
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
        self.extra_pos += r.extra as usize;
        Some(Ok((r.tsc, r.kind, r.id)))
    }

    /// Hands out the rest of the current decoded chunk (the next one when it is used up) by swapping
    /// it with `events` and `extras`, whose buffers the stream reuses: for aggregations that read
    /// every event as `(tsc, kind, id)`, and the fields of those with [`RawEvent::extra`] (in order,
    /// one entry each: a sample's sampler and weight), and want a slice, not a call per event. The
    /// payloads stay behind. `Ok(false)` at the end; after an error the stream ends.
    pub fn swap_batch(
        &mut self,
        events: &mut Vec<RawEvent>,
        extras: &mut Vec<Extra>,
    ) -> Result<bool, ReadError> {
        events.clear();
        extras.clear();
        if self.pos >= self.events.len() && !self.fill()? {
            return Ok(false);
        }
        self.events.drain(..self.pos);
        self.extras.drain(..self.extra_pos);
        std::mem::swap(&mut self.events, events);
        std::mem::swap(&mut self.extras, extras);
        self.pos = 0;
        self.extra_pos = 0;
        Ok(true)
    }

    /// The tick of the next event, without decoding a chunk when nothing was read yet and the index
    /// knows the thread's first event: what a time-ordered merge needs to place a thread that has not
    /// started, so that it holds no decoded chunk before then.
    pub fn peek_tsc(&mut self) -> Result<Option<u64>, ReadError> {
        if !self.started {
            if let Some(t) = self.first_tsc {
                return Ok(Some(t));
            }
        }
        Ok(self.peek_raw()?.map(|(t, _, _)| t))
    }

    /// The next event as `(tsc, kind, id)` without consuming it; `Ok(None)` at the end. A read error
    /// is returned once, then the stream ends.
    #[inline]
    pub fn peek_raw(&mut self) -> Result<Option<(u64, EventKind, u32)>, ReadError> {
        if self.pos >= self.events.len() && !self.fill()? {
            return Ok(None);
        }
        let r = self.events[self.pos];
        Ok(Some((r.tsc, r.kind, r.id)))
    }

    /// The event [`ThreadEvents::peek_raw`] returned, with its payload; call only after it returned
    /// `Ok(Some(_))`.
    pub fn peeked_ref(&self) -> EventRef<'_> {
        self.event_at(self.pos, self.extra_pos)
    }

    /// Consumes the event [`ThreadEvents::peek_raw`] returned.
    #[inline]
    pub fn bump(&mut self) {
        self.advance();
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
    /// The next event in time order, borrowed (no allocation). Events with equal timestamps come in
    /// thread-id order. A read error of one thread is returned once; the other threads go on.
    #[allow(clippy::should_implement_trait)]
    pub fn next_ref(&mut self) -> Option<Result<EventRef<'_>, ReadError>> {
        if let Some(s) = self.advance.take() {
            self.streams[s].advance();
            match self.streams[s].fill() {
                Ok(true) => {
                    let st = &self.streams[s];
                    let key = (
                        std::cmp::Reverse(st.events[st.pos].tsc),
                        std::cmp::Reverse(s),
                    );
                    // Still the earliest (keys are unique: one per stream): a push then a pop
                    // would give this stream back, so it goes on without either. A thread's events
                    // come in runs, one thread's trace in one run.
                    if self.heap.peek().is_some_and(|top| key < *top) {
                        self.heap.push(key);
                    } else {
                        self.advance = Some(s);
                        let st = &self.streams[s];
                        return Some(Ok(st.event_at(st.pos, st.extra_pos)));
                    }
                }
                Ok(false) => {}
                Err(e) => self.error = Some(e),
            }
        }
        if let Some(e) = self.error.take() {
            return Some(Err(e));
        }
        let s = loop {
            let (_, std::cmp::Reverse(s)) = self.heap.pop()?;
            if self.streams[s].pos < self.streams[s].events.len() {
                break s;
            }
            // Placed by the index's first tick: decode its first chunk now.
            match self.streams[s].fill() {
                Ok(true) => break s,
                Ok(false) => {}
                Err(e) => return Some(Err(e)),
            }
        };
        self.advance = Some(s);
        let st = &self.streams[s];
        Some(Ok(st.event_at(st.pos, st.extra_pos)))
    }
}

impl Iterator for MergedEvents<'_> {
    type Item = Result<Event, ReadError>;

    fn next(&mut self) -> Option<Self::Item> {
        self.next_ref().map(|r| r.map(|e| e.to_event()))
    }
}
