//! The collector thread: turns full chunks into `Events` chunks on disk, off the traced threads.

use std::collections::VecDeque;
use std::fs::File;
use std::io::BufWriter;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use ferrotrace_core::codec::{EventEncoder, SliceSink, MAX_EVENT_LEN};
use ferrotrace_core::format::ChunkKind;
use ferrotrace_core::record::{EventKind, Record};
use ferrotrace_core::schema::{self, EventsHeader, Payload, LOST_ONLY_SEQ};
use ferrotrace_core::writer::TraceWriter;

use crate::config::Mode;
use crate::pool::FullChunk;
use crate::runtime::{clock_payload, Meta, Runtime};

/// The trace file's writer.
pub type Writer = TraceWriter<BufWriter<File>>;

/// Events and lost events in an encoded chunk.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// Events encoded, Lost and Wait markers included: the chunk header's count.
    pub events: u64,
    /// Sum of the Lost markers.
    pub lost: u64,
}

/// Encodes `records` (one thread's chunk) as an `Events` chunk payload into `out[range]` and returns the
/// counts and that range. The events are written first, after room for the longest possible header,
/// and the header (which holds their number) just in front of them: one pass over the records.
/// `out` keeps its length at the largest chunk seen (it only grows, zero-filled once), so encoding a
/// chunk never clears or zero-fills memory.
pub fn encode_events(
    tid: u32,
    seq: u32,
    records: &[Record],
    out: &mut Vec<u8>,
) -> (Counts, std::ops::Range<usize>) {
    /// Four varints of at most 10 bytes.
    const HEAD: usize = 40;
    let base = records.first().map_or(0, |r| r.tsc);
    // Worst case per record: one event of MAX_EVENT_LEN, or 16 payload bytes and a 10-byte length.
    let worst = HEAD + records.len() * (MAX_EVENT_LEN + 10) + 16;
    if out.len() < worst {
        out.resize(worst, 0);
    }
    let mut pos = HEAD;
    let mut events = 0u64;
    let mut enc = EventEncoder::new(base);
    let mut counts = Counts::default();
    let mut i = 0;
    while i < records.len() {
        // The CPU some records carry (live mode) stays in memory.
        let r = &records[i].without_cpu();
        // Function entries and exits without payload are nearly every record: encode them without the
        // general path's kind decoding and payload slicing.
        if r.word >> 34 == 0 && r.word >> 32 != 3 {
            match enc.encode_function(r, out, pos) {
                Some(p) => pos = p,
                None => break,
            }
            events += 1;
            i += 1;
            continue;
        }
        events += 1;
        if r.kind() == Some(EventKind::Lost) {
            counts.lost += r.id() as u64;
        }
        let slots = r.payload_slots();
        let end = (i + 1 + slots).min(records.len());
        let payload_records = &records[i + 1..end];
        // SAFETY: Record is plain old data of 16 bytes without padding.
        let payload = unsafe {
            core::slice::from_raw_parts(
                payload_records.as_ptr() as *const u8,
                payload_records.len() * 16,
            )
        };
        match enc.encode_into(r, payload, out, pos) {
            Some(p) => pos = p,
            None => break, // cannot happen: the buffer was sized for the worst case
        }
        i = end;
    }
    let mut head = [0u8; HEAD];
    let mut sink = SliceSink::new(&mut head);
    let _ = EventsHeader {
        tid,
        seq,
        base_ticks: base,
        count: events,
    }
    .encode(&mut sink);
    let h = sink.len();
    out[HEAD - h..HEAD].copy_from_slice(&head[..h]);
    counts.events = events;
    (counts, HEAD - h..pos)
}

struct State {
    writer: Writer,
    path: PathBuf,
    scratch: Vec<u8>,
    /// Flight mode: encoded `Events` payloads and their event counts, oldest first, and their total
    /// size.
    ring: VecDeque<(Vec<u8>, u64)>,
    ring_bytes: usize,
    failed: bool,
    /// Totals of what went to the file (or the flight ring), for the End chunk.
    totals: Counts,
    /// Flight mode: chunks and events the ring dropped to keep the newest.
    dropped_chunks: u64,
    dropped_events: u64,
}

impl State {
    fn write(&mut self, kind: ChunkKind, payload: &[u8]) {
        if self.failed {
            return;
        }
        if let Err(e) = self.writer.chunk(kind, payload) {
            eprintln!(
                "ferrotrace: writing {} failed, trace ends here: {e}",
                self.path.display()
            );
            self.failed = true;
        }
    }

    fn meta(&mut self, rt: &Runtime) {
        for m in rt.take_meta() {
            let mut p = Vec::new();
            match m {
                Meta::Thread { tid, name } => {
                    let _ = schema::Thread {
                        tid,
                        name: &name,
                        pid: 0,
                    }
                    .encode(&mut p);
                    self.write(ChunkKind::Thread, &p);
                }
                Meta::Chunks(chunks) => {
                    for (kind, payload) in chunks {
                        self.write(kind, &payload);
                    }
                }
                Meta::Lost { tid, count, tsc } => {
                    let mut remaining = count;
                    let mut recs = Vec::new();
                    while remaining > 0 {
                        let c = remaining.min(u32::MAX as u64);
                        recs.push(Record::new(tsc, EventKind::Lost, c as u32));
                        remaining -= c;
                    }
                    if crate::live::active() {
                        crate::live::lost(count);
                    }
                    let (counts, range) = encode_events(tid, LOST_ONLY_SEQ, &recs, &mut p);
                    self.totals.events += counts.events;
                    self.totals.lost += counts.lost;
                    self.write(ChunkKind::Events, &p[range]);
                }
            }
        }
    }

    fn chunk(&mut self, rt: &Runtime, c: FullChunk) {
        // Stack nodes interned before the chunk's events were written: into the file ahead of them.
        for (kind, payload) in crate::alloc::take_stacks() {
            self.write(kind, &payload);
        }
        // SAFETY: the chunk came out of the full queue: the collector owns it until it is freed below.
        let records = unsafe { rt.pool.records(c.index, c.len as usize) };
        if crate::live::active() {
            crate::live::on_chunk(c.tid, c.seq, records);
        }
        let mut scratch = std::mem::take(&mut self.scratch);
        let (counts, range) = encode_events(c.tid, c.seq, records, &mut scratch);
        self.totals.events += counts.events;
        self.totals.lost += counts.lost;
        rt.pool.free.push(c.index);
        if rt.config.mode == Mode::Flight {
            self.ring_bytes += range.len();
            self.ring
                .push_back((scratch[range].to_vec(), counts.events));
            while self.ring_bytes > rt.config.buffer_size {
                match self.ring.pop_front() {
                    Some((old, events)) => {
                        self.ring_bytes -= old.len();
                        self.dropped_chunks += 1;
                        self.dropped_events += events;
                    }
                    None => break,
                }
            }
        } else if !records.is_empty() {
            self.write(ChunkKind::Events, &scratch[range]);
        }
        self.scratch = scratch;
    }

    fn dump_ring(&mut self) {
        while let Some((p, _)) = self.ring.pop_front() {
            self.write(ChunkKind::Events, &p);
        }
        self.ring_bytes = 0;
    }

    fn flush(&mut self) {
        if !self.failed {
            if let Err(e) = self.writer.flush() {
                eprintln!("ferrotrace: writing {} failed: {e}", self.path.display());
                self.failed = true;
            }
        }
    }
}

/// The collector's loop; returns after writing the End chunk.
pub fn run(rt: &'static Runtime, writer: Writer, path: PathBuf) {
    crate::thread::ignore_current_thread();
    rt.collector_ready.store(true, Ordering::Release);
    let mut st = State {
        writer,
        path,
        scratch: Vec::with_capacity(1 << 16),
        ring: VecDeque::new(),
        ring_bytes: 0,
        failed: false,
        totals: Counts::default(),
        dropped_chunks: 0,
        dropped_events: 0,
    };
    let mut last_clock = Instant::now();
    loop {
        let finishing = rt.finishing.load(Ordering::Acquire);
        st.meta(rt);
        if crate::live::active() {
            crate::live::tick(rt);
        }
        let mut did = false;
        while let Some(c) = rt.pool.full.pop() {
            st.chunk(rt, c);
            did = true;
        }
        if rt.dump_requested.swap(false, Ordering::AcqRel) {
            st.dump_ring();
            st.flush();
        }
        if finishing {
            st.meta(rt);
            while let Some(c) = rt.pool.full.pop() {
                st.chunk(rt, c);
            }
            st.dump_ring();
            crate::live::finish();
            st.write(ChunkKind::Clock, &clock_payload());
            let mut p = Vec::new();
            let _ = schema::End {
                reason: if rt.end_reason.load(Ordering::Relaxed) == 0 {
                    schema::EndReason::Exit
                } else {
                    schema::EndReason::Signal
                },
                signal: rt.end_signal.load(Ordering::Relaxed),
                events: st.totals.events,
                lost: st.totals.lost,
                chunks: st.writer.next_seq(),
                dropped_chunks: st.dropped_chunks,
                dropped_events: st.dropped_events,
                exit_code: None,
                unwind_errors: 0,
            }
            .encode(&mut p);
            st.write(ChunkKind::End, &p);
            st.flush();
            rt.collector_done.store(true, Ordering::Release);
            return;
        }
        if last_clock.elapsed() > Duration::from_secs(1) {
            st.write(ChunkKind::Clock, &clock_payload());
            last_clock = Instant::now();
            // Objects dlopened since the last look (the preload library also rescans on dlopen itself).
            crate::runtime::rescan();
        }
        if !did {
            st.flush();
            rt.collector_sleeping.store(true, Ordering::SeqCst);
            if rt.pool.full.is_empty() && !rt.finishing.load(Ordering::Acquire) {
                std::thread::park_timeout(Duration::from_millis(5));
            }
            rt.collector_sleeping.store(false, Ordering::SeqCst);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferrotrace_core::codec::{EventDecoder, FieldReader};

    #[test]
    fn encoded_chunk_decodes_to_the_same_events_with_the_right_header() {
        let payload = Record {
            tsc: 0x0706_0504_0302_0100,
            word: 0,
        };
        let records = [
            Record::new(1_000, EventKind::Entry, 5),
            Record::with_payload(1_050, EventKind::Tracepoint, 2, 1),
            payload,
            Record::new(90_000, EventKind::Lost, 7),
            Record::new(90_010, EventKind::Exit, 5),
        ];
        let mut out = vec![0xaa; 3]; // garbage from an earlier chunk must not matter
        let (counts, range) = encode_events(42, 3, &records, &mut out);
        assert_eq!(counts, Counts { events: 4, lost: 7 });
        let mut f = FieldReader::new(&out[range]);
        let head = EventsHeader::decode(&mut f).unwrap();
        assert_eq!(
            head,
            EventsHeader {
                tid: 42,
                seq: 3,
                base_ticks: 1_000,
                count: 4
            },
            "tid, seq, base tsc, events (payload slots are not events)"
        );
        let events: Vec<_> = EventDecoder::new(f.rest(), 1_000)
            .map(Result::unwrap)
            .collect();
        let kinds: Vec<_> = events.iter().map(|e| (e.kind, e.id, e.tsc)).collect();
        assert_eq!(
            kinds,
            [
                (EventKind::Entry, 5, 1_000),
                (EventKind::Tracepoint, 2, 1_050),
                (EventKind::Lost, 7, 90_000),
                (EventKind::Exit, 5, 90_010)
            ]
        );
        assert_eq!(
            events[1].payload,
            &[0, 1, 2, 3, 4, 5, 6, 7, 0, 0, 0, 0, 0, 0, 0, 0]
        );
    }
}
