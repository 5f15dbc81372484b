//! Chunk framing: [`ChunkWriter`] numbers and frames chunks and hands the bytes to a closure, without an
//! allocator or an operating system (a kernel's recorder uses it as it is); [`TraceWriter`] (feature
//! `std`) is the same framing over `std::io::Write`.
//!
//! A payload is built in memory (from a [`crate::schema`] type, or by the caller) and written behind
//! its header, so a reader never sees half a chunk unless the writer dies inside the write.
//! `encode_events` (feature `std`) turns a thread's in-memory records into an Events payload: the
//! runtime's collector and `ferrotrace record`'s salvage of a killed process share it.

#[cfg(feature = "std")]
use std::io::{self, Write};

#[cfg(feature = "std")]
use crate::codec::{EventEncoder, SliceSink, MAX_EVENT_LEN};
use crate::format::{file_header, ChunkHeader, ChunkKind};
#[cfg(feature = "std")]
use crate::grouped;
#[cfg(feature = "std")]
use crate::record::{prefetch_ahead, EventKind, Record, EXIT_IN_WORD, WORD_WITHOUT_CPU};
#[cfg(feature = "std")]
use crate::running::RunningAtStart;
#[cfg(feature = "std")]
use crate::schema::{EventsHeader, Payload};

/// Frames the chunks of one trace file and hands their bytes to a closure, in order: the file header
/// first, then each chunk's header and payload. Allocation-free; the closure decides where bytes go
/// (a file, a serial port, a buffer) and may fail, which the writer passes on.
///
/// ```
/// use ferrotrace_core::codec::SliceSink;
/// use ferrotrace_core::format::ChunkKind;
/// use ferrotrace_core::schema::{Payload, Thread};
/// use ferrotrace_core::writer::ChunkWriter;
///
/// let mut file = [0u8; 64];
/// let mut len = 0;
/// let mut out = |bytes: &[u8]| -> Result<(), ()> {
///     file[len..len + bytes.len()].copy_from_slice(bytes);
///     len += bytes.len();
///     Ok(())
/// };
/// let mut w = ChunkWriter::new(&mut out).unwrap();
/// let mut payload = [0u8; 16];
/// let mut sink = SliceSink::new(&mut payload);
/// Thread { tid: 42, name: "main", pid: 0, registered_ticks: 0 }.encode(&mut sink).unwrap();
/// let n = sink.len();
/// w.chunk(&mut out, ChunkKind::Thread, &[&payload[..n]]).unwrap();
/// assert_eq!(w.next_seq(), 1);
/// assert_eq!(len, 16 + 16 + 7); // header, chunk header, 42 "main" 0
/// ```
#[derive(Clone, Copy, Debug)]
pub struct ChunkWriter {
    written: u64,
    seq: u32,
}

impl ChunkWriter {
    /// Hands the file header to `out`.
    pub fn new<E>(out: &mut impl FnMut(&[u8]) -> Result<(), E>) -> Result<Self, E> {
        let h = file_header();
        out(&h)?;
        Ok(ChunkWriter {
            written: h.len() as u64,
            seq: 0,
        })
    }

    /// Continues a file whose header and first `next_seq` chunks were written, `written` bytes in all.
    pub fn resume(written: u64, next_seq: u32) -> Self {
        ChunkWriter {
            written,
            seq: next_seq,
        }
    }

    /// Hands one chunk of `kind` to `out`: its header, then its payload, which is `parts` one after
    /// the other.
    pub fn chunk<E>(
        &mut self,
        out: &mut impl FnMut(&[u8]) -> Result<(), E>,
        kind: ChunkKind,
        parts: &[&[u8]],
    ) -> Result<(), E> {
        let header = ChunkHeader::for_parts(kind, self.seq, parts);
        out(&header.encode())?;
        for p in parts {
            out(p)?;
        }
        self.written += 16 + header.len as u64;
        self.seq += 1;
        Ok(())
    }

    /// The number the next chunk gets (= chunks written so far).
    pub fn next_seq(&self) -> u32 {
        self.seq
    }

    /// Bytes written so far, header included.
    pub fn bytes_written(&self) -> u64 {
        self.written
    }
}

/// Appends chunks to a trace file: [`ChunkWriter`] over `std::io::Write`.
///
/// ```
/// use ferrotrace_core::format::ChunkKind;
/// use ferrotrace_core::schema::Thread;
/// use ferrotrace_core::writer::TraceWriter;
///
/// let mut w = TraceWriter::new(Vec::new()).unwrap();
/// w.write(&Thread { tid: 42, name: "main", pid: 0, registered_ticks: 0 }).unwrap();
/// assert_eq!(w.next_seq(), 1);
/// assert_eq!(w.bytes_written(), 16 + 16 + 7); // header, chunk header, 42 "main" 0
/// ```
#[cfg(feature = "std")]
pub struct TraceWriter<W: Write> {
    out: W,
    frame: ChunkWriter,
    scratch: Vec<u8>,
}

#[cfg(feature = "std")]
impl<W: Write> TraceWriter<W> {
    /// Writes the file header to `out`.
    pub fn new(mut out: W) -> io::Result<Self> {
        let frame = ChunkWriter::new(&mut |b: &[u8]| out.write_all(b))?;
        Ok(TraceWriter {
            out,
            frame,
            scratch: Vec::new(),
        })
    }

    /// Continues a file whose header and first `next_seq` chunks `out` already holds, `written` bytes
    /// in all.
    pub fn resume(out: W, written: u64, next_seq: u32) -> Self {
        TraceWriter {
            out,
            frame: ChunkWriter::resume(written, next_seq),
            scratch: Vec::new(),
        }
    }

    /// Appends one chunk whose payload the caller encoded.
    pub fn chunk(&mut self, kind: ChunkKind, payload: &[u8]) -> io::Result<()> {
        let out = &mut self.out;
        self.frame
            .chunk(&mut |b: &[u8]| out.write_all(b), kind, &[payload])
    }

    /// Appends a chunk holding `payload`.
    pub fn write<'a, P: Payload<'a>>(&mut self, payload: &P) -> io::Result<()> {
        let mut buf = std::mem::take(&mut self.scratch);
        buf.clear();
        let _ = payload.encode(&mut buf);
        let r = self.chunk(P::KIND, &buf);
        self.scratch = buf;
        r
    }

    /// Appends a chunk of `kind` holding a list: `head` (which counts the entries), then each entry.
    pub fn write_list<'a, H: Payload<'a>, E: Payload<'a> + 'a>(
        &mut self,
        head: &H,
        entries: impl IntoIterator<Item = &'a E>,
    ) -> io::Result<()> {
        let mut buf = std::mem::take(&mut self.scratch);
        buf.clear();
        let _ = head.encode(&mut buf);
        for e in entries {
            let _ = e.encode(&mut buf);
        }
        let r = self.chunk(E::KIND, &buf);
        self.scratch = buf;
        r
    }

    /// The number the next chunk gets (= chunks written so far).
    pub fn next_seq(&self) -> u32 {
        self.frame.next_seq()
    }

    /// Bytes written so far, header included.
    pub fn bytes_written(&self) -> u64 {
        self.frame.bytes_written()
    }

    /// Flushes the underlying writer.
    pub fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }

    /// The underlying writer.
    pub fn get_mut(&mut self) -> &mut W {
        &mut self.out
    }

    /// Gives back the underlying writer.
    pub fn into_inner(self) -> W {
        self.out
    }
}

/// Events and lost events in an encoded chunk.
#[cfg(feature = "std")]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// Events encoded, Lost and Wait markers included: the chunk header's count.
    pub events: u64,
    /// Sum of the Lost markers.
    pub lost: u64,
    /// Lost and Wait markers among the events: the events that are not the program's.
    pub markers: u64,
}

/// Encodes `records` (one thread's chunk) as an `Events` chunk payload into `out[range]` and returns the
/// counts and that range. A function entry followed by the exit of the same function (a leaf call, not
/// stamped before its entry) is written as one leaf-call event ([`crate::codec::CALL_KIND`]) and
/// counted as two events. The events are written first, after room for the longest possible header,
/// and the header (which holds their number) just in front of them: one pass over the records.
/// `out` keeps its length at the largest chunk seen (it only grows, zero-filled once), so encoding a
/// chunk never clears or zero-fills memory. A chunk made of runs of leaf calls is written in the
/// grouped layout instead ([`crate::grouped`], format 2.6), when that encoder takes it.
#[cfg(feature = "std")]
pub fn encode_events(
    tid: u32,
    seq: u32,
    records: &[Record],
    out: &mut Vec<u8>,
) -> (Counts, std::ops::Range<usize>) {
    encode(tid, seq, records, out, None)
}

/// [`encode_events`], following the thread's calls in `running` on the way (the collector's
/// [`RunningAtStart`]) in the same pass: a second pass over the records cost more than the encoding,
/// its loads waiting one after the other on a chunk that the traced thread's core had just written.
#[cfg(feature = "std")]
pub fn encode_events_following(
    tid: u32,
    seq: u32,
    records: &[Record],
    out: &mut Vec<u8>,
    running: &mut RunningAtStart,
) -> (Counts, std::ops::Range<usize>) {
    encode(tid, seq, records, out, Some(running))
}

#[cfg(feature = "std")]
#[inline(always)]
fn encode(
    tid: u32,
    seq: u32,
    records: &[Record],
    out: &mut Vec<u8>,
    mut running: Option<&mut RunningAtStart>,
) -> (Counts, std::ops::Range<usize>) {
    let base = records.first().map_or(0, |r| r.tsc);
    // Worst case per record: one event of MAX_EVENT_LEN, or 16 payload bytes and a 10-byte length.
    let worst = HEAD + records.len() * (MAX_EVENT_LEN + 10) + 16;
    if out.len() < worst {
        out.resize(worst, 0);
    }
    let mut counts = Counts::default();
    let mut followed = Vec::new();
    let grouped = match records {
        [] => None,
        _ => grouped::encode(records, base, out, HEAD, &mut followed),
    };
    if let Some((end, events)) = grouped {
        if let Some(running) = running {
            for (kind, id) in followed {
                running.observe_function(kind, id);
            }
        }
        counts.events = events;
        return (counts, put_header(tid, seq, base, events, out)..end);
    }
    let mut pos = HEAD;
    let mut events = 0u64;
    let mut enc = EventEncoder::new(base);
    let mut i = 0;
    while i < records.len() {
        // Function entries and exits without payload are nearly every record: encode them without the
        // general path's kind decoding and payload slicing. Bits 32-47 are the kind and the payload
        // slots (0 for these); the CPU some records carry above them (live mode) stays in memory.
        prefetch_ahead(records, i);
        let word = records[i].word;
        let kind = word >> 32 & 0xffff;
        if kind <= EventKind::TailExit as u64 {
            let r = Record {
                tsc: records[i].tsc,
                word: word & WORD_WITHOUT_CPU,
            };
            if let Some(exit) = records.get(i + 1).filter(|next| {
                kind == EventKind::Entry as u64
                    && next.word & WORD_WITHOUT_CPU == r.word | EXIT_IN_WORD
                    && next.tsc >= r.tsc
            }) {
                // A leaf call: its entry and exit as one event. Following the calls is left out: an
                // entry and the exit that follows it leave the thread's stack as it was.
                match enc.encode_call(word as u32, r.tsc, exit.tsc, out, pos) {
                    Some(p) => pos = p,
                    None => break,
                }
                events += 2;
                i += 2;
                continue;
            }
            match enc.encode_function(&r, out, pos) {
                Some(p) => pos = p,
                None => break,
            }
            if let Some(running) = running.as_deref_mut() {
                running.observe_function(kind, word as u32);
            }
            events += 1;
            i += 1;
            continue;
        }
        let r = &records[i].without_cpu();
        events += 1;
        match r.kind() {
            Some(EventKind::Lost) => {
                counts.lost += r.id() as u64;
                counts.markers += 1;
            }
            Some(EventKind::Wait) => counts.markers += 1,
            Some(kind) => {
                if let Some(running) = running.as_deref_mut() {
                    running.observe(kind, r.id());
                }
            }
            None => {}
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
    counts.events = events;
    (counts, put_header(tid, seq, base, events, out)..pos)
}

/// Room for the longest Events header: four varints of at most 10 bytes.
#[cfg(feature = "std")]
const HEAD: usize = 40;

/// Writes an Events header just in front of `out[HEAD..]` (where the events were encoded) and returns
/// where it starts.
#[cfg(feature = "std")]
fn put_header(tid: u32, seq: u32, base: u64, events: u64, out: &mut [u8]) -> usize {
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
    HEAD - h
}

#[cfg(all(test, feature = "std"))]
mod tests {
    use super::*;
    use crate::codec::{EventDecoder, FieldReader};

    /// `r` with a CPU number in its word's high bits, as live mode stores it.
    fn on_cpu(r: Record) -> Record {
        Record {
            word: r.word | 7 << 48,
            ..r
        }
    }

    #[test]
    fn following_the_calls_while_encoding_changes_no_byte_and_sees_what_a_replay_sees() {
        use crate::running::RunningAtStart;
        // Exits of functions entered before the chunk (3, then 1 after an unwind of 4), a CPU in
        // the high bits of some words (live mode), a tracepoint with a payload slot whose bytes look
        // like an Exit of 9, a Wait and a Lost marker.
        let records = [
            Record::new(10, EventKind::Entry, 2),
            on_cpu(Record::new(20, EventKind::Exit, 2)),
            Record::new(30, EventKind::Exit, 3),
            Record::with_payload(35, EventKind::Tracepoint, 1, 1),
            Record::new(9, EventKind::Exit, 9),
            Record::new(40, EventKind::Wait, 500),
            on_cpu(Record::new(50, EventKind::Entry, 4)),
            Record::new(60, EventKind::Entry, 5),
            Record::new(70, EventKind::Lost, 3),
            Record::new(80, EventKind::TailExit, 1),
            Record::new(90, EventKind::Entry, 6),
        ];
        let (mut plain, mut followed) = (Vec::new(), Vec::new());
        let (counts, range) = encode_events(7, 1, &records, &mut plain);
        let mut running = RunningAtStart::default();
        let (counts2, range2) =
            encode_events_following(7, 1, &records, &mut followed, &mut running);
        assert_eq!(counts, counts2);
        assert_eq!(&plain[range], &followed[range2]);
        assert_eq!(
            counts,
            Counts {
                events: 10,
                lost: 3,
                markers: 2
            },
            "the payload slot is not an event; Wait and Lost are the markers"
        );
        // What a replay of the events one by one finds.
        let mut replay = RunningAtStart::default();
        for (i, r) in records.iter().enumerate() {
            if i != 4 {
                replay.observe(r.kind().unwrap(), r.id());
            }
        }
        assert_eq!(
            running.outermost_first().collect::<Vec<_>>(),
            replay.outermost_first().collect::<Vec<_>>()
        );
        assert_eq!(running.outermost_first().collect::<Vec<_>>(), [1, 3]);
    }

    #[test]
    fn a_leaf_call_is_one_event_that_decodes_as_its_entry_and_its_exit() {
        use crate::builder::{self, Event};
        let records = [
            Record::new(100, EventKind::Entry, 1),
            Record::new(110, EventKind::Entry, 2),
            on_cpu(Record::new(130, EventKind::Exit, 2)), // leaf: fused (the CPU is not kept)
            Record::new(140, EventKind::Entry, 3),
            Record::new(150, EventKind::Exit, 4), // another function's exit: not a leaf call
            Record::new(200, EventKind::Entry, 5),
            Record::new(190, EventKind::Exit, 5), // time went back: kept as two events
            Record::new(210, EventKind::Entry, 6),
            Record::new(210, EventKind::TailExit, 6), // a tail exit is not fused
            Record::new(400, EventKind::Entry, 1 << 20),
            Record::new(400 + (1 << 30), EventKind::Exit, 1 << 20), // leaf, long varints
            Record::new(2_000_000_000, EventKind::Exit, 1),
            Record::new(2_000_000_010, EventKind::Entry, 7), // the chunk's last record
        ];
        let mut out = Vec::new();
        let (counts, range) = encode_events(9, 0, &records, &mut out);
        assert_eq!(
            counts.events,
            records.len() as u64,
            "a leaf call counts as two"
        );
        let mut f = FieldReader::new(&out[range.clone()]);
        let head = EventsHeader::decode(&mut f).unwrap();
        assert_eq!(head.count, records.len() as u64);
        let want: Vec<_> = records
            .iter()
            .map(|r| (r.tsc, r.kind().unwrap(), r.id()))
            .collect();
        let decoded: Vec<_> = EventDecoder::new(f.rest(), head.base_ticks)
            .map(|e| e.map(|e| (e.tsc, e.kind, e.id)))
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(decoded, want, "the checked decoder");
        assert_eq!(
            crate::grouped::tests::decoded_in_runs(&out[range.clone()]),
            want,
            "the fast loop"
        );
        // The same events one by one, as every other writer encodes them: the two fused leaf calls
        // are one tag shorter each (1 byte for id 2, 4 for id 2^20).
        let events: Vec<_> = want
            .iter()
            .map(|&(ticks, kind, id)| Event {
                ticks,
                kind,
                id,
                payload: Vec::new(),
                fields: [0; 2],
            })
            .collect();
        let mut unfused = Vec::new();
        builder::encode_events(9, 0, &events, &mut unfused);
        assert_eq!(unfused.len() - range.len(), 1 + 4);
        // The chunk up to the second leaf call, cut inside its duration: a clear error, after the
        // events before it.
        let (_, range) = encode_events(9, 0, &records[..11], &mut out);
        let mut f = FieldReader::new(&out[range.start..range.end - 1]);
        let head = EventsHeader::decode(&mut f).unwrap();
        let mut dec = EventDecoder::new(f.rest(), head.base_ticks);
        let got: Vec<_> = dec.by_ref().collect();
        assert_eq!(got.last(), Some(&Err(crate::codec::DecodeError::Truncated)));
        assert_eq!(
            got.len(),
            10,
            "the nine events before the cut call, then the error"
        );
    }

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
        assert_eq!(
            counts,
            Counts {
                events: 4,
                lost: 7,
                markers: 1
            }
        );
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
