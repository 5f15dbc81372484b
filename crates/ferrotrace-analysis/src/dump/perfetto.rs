//! `dump --format perfetto`: Perfetto protobuf (open it in ui.perfetto.dev or trace_processor),
//! encoded by hand (a handful of messages; no code generation).
//!
//! Layout, per Perfetto's TrackEvent conventions:
//! - one process track and one thread track per thread (`TrackDescriptor` with
//!   `ProcessDescriptor`/`ThreadDescriptor`);
//! - one packet sequence per thread (`trusted_packet_sequence_id`), which starts with a
//!   `ClockSnapshot` defining sequence-scoped clock 64 as an *incremental* nanosecond clock next to
//!   BOOTTIME and MONOTONIC (ferrotrace's CLOCK_MONOTONIC timestamps are written as both), and
//!   `TracePacketDefaults` pointing at that clock and at the thread's track: each event packet then
//!   carries only a small timestamp delta, its type and, for slice begins, an interned name id;
//! - function frames are `TYPE_SLICE_BEGIN`/`TYPE_SLICE_END`, names interned per sequence
//!   (`InternedData.event_names`, sent in the packet that first uses them); lost events, waits,
//!   tracepoints and allocations are `TYPE_INSTANT` with a plain name.
//!
//! By default the packets are batched into `compressed_packets` (zlib deflate, as Perfetto's own
//! service writes them; trace_processor and the UI inflate them), which makes the file several times
//! smaller; [`Options::compress`] false writes them plain. The field numbers are those of Perfetto's
//! published protos; `proto/perfetto_trace.proto` in this crate is the subset used, and the tests
//! decode the output with `protoc` against it.

use std::io::{self, Write};
use std::sync::mpsc::{channel, Receiver, Sender, TryRecvError};

use super::proto::{fbytes, fv, msg, varint};
pub use super::window::Window;
use super::{stream, walk, Ev, Exporter, Samples, Supports, Target, Written};
use crate::names::Names;
use crate::progress::Progress;
use crate::reader::Trace;
use crate::samples::{thread_label, RenderError, SampleSet};

/// Output options.
#[derive(Clone, Copy, Debug)]
pub struct Options {
    /// Batch packets into zlib-compressed `compressed_packets`.
    pub compress: bool,
    /// The part of the trace to write.
    pub window: Window,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            compress: true,
            window: Window::default(),
        }
    }
}

/// The sequence-scoped incremental clock the event packets use.
const CLOCK_ID: u64 = 64;
const BOOTTIME: u64 = 6;
const MONOTONIC: u64 = 3;
/// Uncompressed bytes per `compressed_packets` batch (Perfetto wants each under 512 KiB).
const BATCH: usize = 256 << 10;

/// The zlib level: zlib-rs at level 3 compresses fib 31's 113 MB of packets to 6.1 MB in about
/// a third of the time the encoder takes to make them (level 1: 12.5 MB, level 6: 2.6 MB at
/// about the encoder's time).
const LEVEL: u32 = 3;

/// Compressed batches in flight per compressing thread before the encoder waits for one.
const DEPTH: u64 = 4;

/// A thread that compresses batches: raw batches in, framed `compressed_packets` out, in order.
struct Compressor {
    raw: Sender<Vec<u8>>,
    framed: Receiver<io::Result<Vec<u8>>>,
}

/// The threads that compress: one fewer than the cores (the encoder keeps one), at least one, at
/// most three.
fn compressors() -> usize {
    std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .saturating_sub(1)
        .clamp(1, 3)
}

/// One batch of encoded packets as a TracePacket whose `compressed_packets` (50) holds them
/// zlib-deflated at the fastest level.
fn deflate(batch: &[u8]) -> io::Result<Vec<u8>> {
    let mut z = flate2::write::ZlibEncoder::new(
        Vec::with_capacity(batch.len() / 4 + 64),
        flate2::Compression::new(LEVEL),
    );
    z.write_all(batch)?;
    let deflated = z.finish()?;
    let mut pkt = Vec::with_capacity(deflated.len() + 8);
    fbytes(&mut pkt, 50, &deflated);
    let mut outer = Vec::with_capacity(pkt.len() + 8);
    fbytes(&mut outer, 1, &pkt);
    Ok(outer)
}

struct Sink<'w> {
    out: Box<dyn Write + 'w>,
    compress: bool,
    batch: Vec<u8>,
    /// Uncompressed bytes per batch.
    limit: usize,
    /// Bytes written to `out`.
    written: u64,
    /// Compressing threads (empty: compress here); batch `i` goes to `workers[i % len]`.
    workers: Vec<Compressor>,
    sent: u64,
    received: u64,
    /// Uncompressed sizes of the batches sent and not yet written, oldest first.
    in_flight: std::collections::VecDeque<u64>,
    in_flight_bytes: u64,
}

impl<'w> Sink<'w> {
    /// A sink that compresses on threads of `scope` when `compress`.
    fn new<'scope>(
        out: Box<dyn Write + 'w>,
        compress: bool,
        scope: &'scope std::thread::Scope<'scope, '_>,
    ) -> Sink<'w> {
        let workers = if compress {
            (0..compressors())
                .map(|_| {
                    let (raw, raw_rx) = channel::<Vec<u8>>();
                    let (framed_tx, framed) = channel();
                    scope.spawn(move || {
                        for batch in raw_rx {
                            if framed_tx.send(deflate(&batch)).is_err() {
                                break;
                            }
                        }
                    });
                    Compressor { raw, framed }
                })
                .collect()
        } else {
            Vec::new()
        };
        Sink {
            out,
            compress,
            batch: Vec::with_capacity(BATCH + 4096),
            limit: BATCH,
            written: 0,
            workers,
            sent: 0,
            received: 0,
            in_flight: std::collections::VecDeque::new(),
            in_flight_bytes: 0,
        }
    }

    /// Appends one TracePacket (its encoded body).
    #[inline]
    fn packet(&mut self, body: &[u8]) -> io::Result<()> {
        fbytes(&mut self.batch, 1, body);
        if self.batch.len() >= self.limit {
            self.flush()?;
        }
        Ok(())
    }

    /// Appends one TracePacket that `body` encodes in place (no copy for packets under 128 bytes).
    #[inline]
    fn packet_with(&mut self, body: impl FnOnce(&mut Vec<u8>)) -> io::Result<()> {
        self.batch.push(1 << 3 | 2);
        let at = self.batch.len();
        self.batch.push(0);
        body(&mut self.batch);
        let len = self.batch.len() - at - 1;
        if len < 0x80 {
            self.batch[at] = len as u8;
        } else {
            let mut v = Vec::with_capacity(10);
            varint(&mut v, len as u64);
            self.batch.splice(at..at + 1, v);
        }
        if self.batch.len() >= self.limit {
            self.flush()?;
        }
        Ok(())
    }

    /// At most the bytes `out` will hold once everything given so far is written (batches not
    /// yet compressed count whole). Past `max`, it waits for the compressing threads to know.
    #[inline]
    fn bound(&mut self, max: u64) -> io::Result<u64> {
        let pending = self.batch.len() as u64 + 16;
        let b = self.written + self.in_flight_bytes + pending;
        if b <= max || self.received == self.sent {
            return Ok(b);
        }
        self.drain()?;
        Ok(self.written + pending)
    }

    /// Hands the batch on: written as it is, compressed here, or sent to a compressing thread.
    fn flush(&mut self) -> io::Result<()> {
        if self.batch.is_empty() {
            return Ok(());
        }
        if !self.compress {
            self.out.write_all(&self.batch)?;
            self.written += self.batch.len() as u64;
        } else if self.workers.is_empty() {
            let framed = deflate(&self.batch)?;
            self.out.write_all(&framed)?;
            self.written += framed.len() as u64;
        } else {
            let n = self.workers.len() as u64;
            let raw = self.batch.len() as u64 + 16;
            let batch = std::mem::replace(&mut self.batch, Vec::with_capacity(self.limit + 4096));
            self.workers[(self.sent % n) as usize]
                .raw
                .send(batch)
                .map_err(|_| io::Error::other("a compressing thread stopped"))?;
            self.sent += 1;
            self.in_flight.push_back(raw);
            self.in_flight_bytes += raw;
            // Write what is done, in order; wait when too many batches are in flight.
            while self.received < self.sent {
                let worker = &self.workers[(self.received % n) as usize];
                let framed = if self.sent - self.received > DEPTH * n {
                    worker.framed.recv().ok()
                } else {
                    match worker.framed.try_recv() {
                        Ok(f) => Some(f),
                        Err(TryRecvError::Empty) => break,
                        Err(TryRecvError::Disconnected) => None,
                    }
                };
                self.take(framed)?;
            }
        }
        self.batch.clear();
        Ok(())
    }

    /// Writes one batch a compressing thread returned (`None`: the thread is gone).
    fn take(&mut self, framed: Option<io::Result<Vec<u8>>>) -> io::Result<()> {
        let framed = framed.ok_or_else(|| io::Error::other("a compressing thread stopped"))??;
        self.out.write_all(&framed)?;
        self.written += framed.len() as u64;
        self.received += 1;
        self.in_flight_bytes -= self.in_flight.pop_front().unwrap_or_default();
        Ok(())
    }

    /// Waits for every batch sent to be compressed and written.
    fn drain(&mut self) -> io::Result<()> {
        let n = self.workers.len() as u64;
        while self.received < self.sent {
            let framed = self.workers[(self.received % n) as usize]
                .framed
                .recv()
                .ok();
            self.take(framed)?;
        }
        Ok(())
    }

    /// Flushes the batch, waits for every compressed batch to be written, and flushes `out`.
    fn finish(&mut self) -> io::Result<()> {
        self.flush()?;
        self.drain()?;
        self.out.flush()
    }

    /// Goes on in `out` (after [`Sink::finish`]).
    fn restart(&mut self, out: Box<dyn Write + 'w>) {
        self.out = out;
        self.written = 0;
    }
}

/// One thread's packet sequence in the current output.
struct Seq {
    tid: u32,
    name: String,
    /// `trusted_packet_sequence_id`.
    id: u64,
    last_ts: u64,
    /// Function ids whose names this sequence has interned in the current output, by id (below
    /// [`DENSE`]; larger ids in `interned_sparse`).
    interned: Vec<bool>,
    interned_sparse: std::collections::HashSet<u32>,
    /// The open frames (function ids), outermost first: closed at the end of a piece or window and
    /// opened again at the start of the next.
    open: Vec<u32>,
    /// Whether the current output has this sequence's descriptors.
    described: bool,
    /// Sampled stacks: the frames and callstacks (frame-tree ids) this sequence has interned in the
    /// current output, and whether it has the one mapping they name.
    sampled_frames: std::collections::HashSet<u32>,
    sampled_stacks: std::collections::HashSet<u32>,
    sampled_mapping: bool,
    /// A buffer wait (its start and length, ns) met before the event it preceded in the chunk, drawn
    /// after that event ([`Encoder::event`]).
    pending_wait: Option<(u64, u64)>,
}

impl Seq {
    /// True the first time `id` is seen in this output (its name must be interned now).
    fn intern(&mut self, id: u32) -> bool {
        let i = id as usize;
        if i >= DENSE {
            return self.interned_sparse.insert(id);
        }
        if i >= self.interned.len() {
            self.interned.resize(i + 1, false);
        }
        !std::mem::replace(&mut self.interned[i], true)
    }
}

/// Where the protobuf goes.
pub enum Output<'a> {
    /// One stream.
    Stream(&'a mut dyn Write),
    /// Pieces each smaller than `max` bytes, each a trace of its own, opened by `open(n)` for
    /// n = 1, 2, …
    Pieces {
        /// Bytes per piece, at most.
        max: u64,
        /// Opens piece `n`.
        open: &'a mut dyn FnMut(u32) -> io::Result<Box<dyn Write>>,
    },
}

/// Function ids below this are interned by index.
const DENSE: usize = 1 << 20;

/// Bytes a piece keeps free for closing its open frames, per open frame.
const CLOSE_BYTES: u64 = 16;

/// The encoder's state across pieces.
struct Encoder<'s, 'a> {
    source: &'s Source<'a>,
    pid: u32,
    seqs: Vec<Seq>,
    /// `seqs` index by thread, and the last thread's (events come in runs of one thread).
    index: std::collections::HashMap<u32, usize>,
    last: Option<(u32, usize)>,
    heap: Option<crate::mem::HeapTracker>,
    heap_bytes: Option<u64>,
    /// The trace's sample stacks, named (`record --sample`): samples become `PerfSample` packets.
    sampled: Option<crate::stacks::FrameTree<'a>>,
    /// Frames open over all threads.
    open_frames: u64,
    /// Events shown in the current piece.
    in_piece: u64,
    /// Whether the current output has its descriptors (the window has begun).
    started: bool,
    from: u64,
    to: u64,
    /// Pieces: the size limit and the next piece's number.
    max: Option<u64>,
    piece: u32,
    p: Vec<u8>,
    te: Vec<u8>,
}

impl Encoder<'_, '_> {
    fn process_uuid(&self) -> u64 {
        1u64 << 48 | self.pid as u64
    }

    fn heap_uuid(&self) -> u64 {
        3u64 << 48 | self.pid as u64
    }

    /// The index of `tid`'s sequence (a new one for a thread not seen yet).
    fn seq(&mut self, tid: u32) -> usize {
        if let Some((t, i)) = self.last {
            if t == tid {
                return i;
            }
        }
        let n = self.seqs.len();
        let i = *self.index.entry(tid).or_insert(n);
        if i == n {
            self.seqs.push(Seq {
                tid,
                name: String::new(),
                id: n as u64 + 1,
                last_ts: self.from,
                interned: Vec::new(),
                interned_sparse: Default::default(),
                open: Vec::new(),
                described: false,
                sampled_frames: Default::default(),
                sampled_stacks: Default::default(),
                sampled_mapping: false,
                pending_wait: None,
            });
        }
        self.last = Some((tid, i));
        i
    }

    /// The descriptors of an output starting at `t`: process, heap counter, and each sequence's
    /// thread track, clock snapshot (the incremental clock starts at `t`) and defaults.
    fn preamble(&mut self, sink: &mut Sink<'_>, t: u64) -> io::Result<()> {
        let pid = self.pid;
        let process_uuid = self.process_uuid();
        let heap_uuid = self.heap_uuid();
        let p = &mut self.p;
        p.clear();
        msg(p, 60, |d| {
            fv(d, 1, process_uuid);
            msg(d, 3, |pd| {
                fv(pd, 1, pid as u64);
                fbytes(pd, 6, self.source.process_name.as_bytes());
            });
        });
        sink.packet(p)?;
        // A trace with allocations: the heap's size as a counter track of the process
        // (TrackDescriptor.counter with unit UNIT_SIZE_BYTES; TrackEvent TYPE_COUNTER with
        // counter_value).
        if self.heap.is_some() {
            p.clear();
            msg(p, 60, |d| {
                fv(d, 1, heap_uuid);
                fv(d, 5, process_uuid);
                fbytes(d, 2, b"heap bytes");
                msg(d, 8, |c| fv(c, 3, 3));
            });
            sink.packet(p)?;
        }
        for i in 0..self.seqs.len() {
            self.seq_preamble(sink, i, t)?;
        }
        Ok(())
    }

    fn seq_preamble(&mut self, sink: &mut Sink<'_>, i: usize, t: u64) -> io::Result<()> {
        let (pid, process_uuid) = (self.pid, self.process_uuid());
        let seq = &mut self.seqs[i];
        let thread_uuid = 2u64 << 48 | seq.tid as u64;
        let p = &mut self.p;
        p.clear();
        msg(p, 60, |d| {
            fv(d, 1, thread_uuid);
            fv(d, 5, process_uuid);
            msg(d, 4, |td| {
                fv(td, 1, pid as u64);
                fv(td, 2, seq.tid as u64);
                if !seq.name.is_empty() {
                    fbytes(td, 5, seq.name.as_bytes());
                }
            });
        });
        sink.packet(p)?;
        // Clock snapshot: clock 64 (incremental) starts at t, where BOOTTIME and MONOTONIC are t.
        p.clear();
        fv(p, 10, seq.id);
        fv(p, 13, 1);
        msg(p, 6, |cs| {
            for (id, inc) in [(BOOTTIME, false), (MONOTONIC, false), (CLOCK_ID, true)] {
                msg(cs, 1, |c| {
                    fv(c, 1, id);
                    fv(c, 2, t);
                    if inc {
                        fv(c, 3, 1);
                    }
                });
            }
            fv(cs, 2, BOOTTIME);
        });
        sink.packet(p)?;
        p.clear();
        fv(p, 10, seq.id);
        fv(p, 13, 2);
        msg(p, 59, |d| {
            fv(d, 58, CLOCK_ID);
            msg(d, 11, |te| fv(te, 11, thread_uuid));
        });
        sink.packet(p)?;
        seq.last_ts = t;
        seq.interned.clear();
        seq.interned_sparse.clear();
        seq.sampled_frames.clear();
        seq.sampled_stacks.clear();
        seq.sampled_mapping = false;
        seq.described = true;
        Ok(())
    }

    /// Starts an output at `t`: its descriptors, the heap's size, and the frames open at `t`.
    fn start(&mut self, sink: &mut Sink<'_>, t: u64) -> io::Result<()> {
        self.started = true;
        for seq in &mut self.seqs {
            seq.described = false;
        }
        self.preamble(sink, t)?;
        if let (Some(bytes), false) = (self.heap_bytes, self.seqs.is_empty()) {
            self.counter(sink, 0, bytes)?;
        }
        for i in 0..self.seqs.len() {
            for d in 0..self.seqs[i].open.len() {
                let id = self.seqs[i].open[d];
                self.slice(sink, i, t, Some(id), "")?;
            }
        }
        Ok(())
    }

    /// Closes every open frame at `t` (they stay open in `Seq::open` for the next output).
    fn close(&mut self, sink: &mut Sink<'_>, t: u64) -> io::Result<()> {
        for i in 0..self.seqs.len() {
            for _ in 0..self.seqs[i].open.len() {
                self.slice(sink, i, t, None, "")?;
            }
        }
        Ok(())
    }

    /// The packet header of an event of sequence `i` at `ts` (delta-encoded) in `self.p`.
    fn header(&mut self, i: usize, ts: u64) {
        let seq = &mut self.seqs[i];
        // The incremental clock cannot go backwards: a (rare) earlier timestamp is clamped.
        let delta = ts.saturating_sub(seq.last_ts);
        seq.last_ts += delta;
        self.p.clear();
        fv(&mut self.p, 8, delta);
        fv(&mut self.p, 10, seq.id);
        fv(&mut self.p, 13, 2);
        self.te.clear();
    }

    /// A slice begin (`Some(function)`) or end (`None`) on sequence `i` at `ts`, encoded straight
    /// into the batch (the hot path: one packet per function entry and exit). `values` ("" for none)
    /// are its arguments (a begin) or return value (an end), as replay shows them: a debug
    /// annotation `args` or `retval`, which the trace processor adds to the slice's arguments.
    #[inline]
    fn slice(
        &mut self,
        sink: &mut Sink<'_>,
        i: usize,
        ts: u64,
        begin: Option<u32>,
        values: &str,
    ) -> io::Result<()> {
        let seq = &mut self.seqs[i];
        // The incremental clock cannot go backwards: a (rare) earlier timestamp is clamped.
        let delta = ts.saturating_sub(seq.last_ts);
        seq.last_ts += delta;
        let name = begin
            .filter(|&id| seq.intern(id))
            .map(|id| (self.source.name)(id));
        let seq_id = seq.id;
        sink.packet_with(|b| {
            fv(b, 8, delta);
            fv(b, 10, seq_id);
            fv(b, 13, 2);
            if let (Some(name), Some(id)) = (name, begin) {
                msg(b, 12, |d| {
                    msg(d, 2, |n| {
                        fv(n, 1, id as u64 + 1);
                        fbytes(n, 2, name.as_bytes());
                    })
                });
            }
            // TrackEvent (11): type (9) and, for a begin, name_iid (10); under 128 bytes but for
            // its values' debug annotation (4: name 10, string_value 6).
            let track_event = |t: &mut Vec<u8>| {
                match begin {
                    Some(id) => {
                        fv(t, 9, 1);
                        fv(t, 10, id as u64 + 1);
                    }
                    None => fv(t, 9, 2),
                }
                if !values.is_empty() {
                    msg(t, 4, |a| {
                        let name: &[u8] = if begin.is_some() { b"args" } else { b"retval" };
                        fbytes(a, 10, name);
                        fbytes(a, 6, values.as_bytes());
                    });
                }
            };
            if values.is_empty() {
                b.push(11 << 3 | 2);
                let at = b.len();
                b.push(0);
                track_event(b);
                b[at] = (b.len() - at - 1) as u8;
            } else {
                msg(b, 11, track_event);
            }
        })
    }

    /// The heap counter's value on sequence `i`, at that sequence's last time.
    fn counter(&mut self, sink: &mut Sink<'_>, i: usize, bytes: u64) -> io::Result<()> {
        let ts = self.seqs[i].last_ts;
        self.header(i, ts);
        fv(&mut self.te, 9, 4);
        let heap_uuid = self.heap_uuid();
        fv(&mut self.te, 11, heap_uuid);
        fv(&mut self.te, 30, bytes);
        fbytes(&mut self.p, 11, &self.te);
        sink.packet(&self.p)
    }

    /// A sample of sequence `i` at `ts` whose address stack is `stack` (`None`: none) as a
    /// `PerfSample` (TracePacket 66: pid 2, tid 3, callstack_iid 4, timebase_count 6), its stack
    /// interned on the sequence as Perfetto's profilers intern theirs (InternedData: function_names
    /// 5, frames 6, callstacks 7, mapping_paths 17, mappings 19; a callstack lists its frames
    /// outermost first). Frame and callstack ids are the frame tree's, + 1; every frame lies in one
    /// mapping (the names are ferrotrace's, already symbolized) at a `rel_pc` of its own.
    fn sample(
        &mut self,
        tree: &mut crate::stacks::FrameTree<'_>,
        sink: &mut Sink<'_>,
        i: usize,
        ts: u64,
        stack: Option<u32>,
        weight: u64,
    ) -> io::Result<()> {
        let leaf = stack.and_then(|s| tree.leaf(s));
        let mut chain = Vec::new();
        let mut node = leaf;
        while let Some(n) = node {
            chain.push(n);
            node = tree.table.nodes.get(n as usize).and_then(|x| x.parent);
        }
        chain.reverse();
        let (pid, tid) = (self.pid, self.seqs[i].tid);
        self.header(i, ts);
        let seq = &mut self.seqs[i];
        let mut interned = Vec::new();
        if leaf.is_some_and(|l| seq.sampled_stacks.insert(l)) {
            if !std::mem::replace(&mut seq.sampled_mapping, true) {
                msg(&mut interned, 17, |s| {
                    fv(s, 1, 1);
                    fbytes(s, 2, b"[symbolized by ferrotrace]");
                });
                msg(&mut interned, 19, |m| {
                    fv(m, 1, 1);
                    fv(m, 7, 1);
                });
            }
            for &n in &chain {
                let frame = tree.table.nodes[n as usize].frame;
                if seq.sampled_frames.insert(frame) {
                    let name = tree
                        .table
                        .frames
                        .get(frame as usize)
                        .map_or("?", |f| &f.function);
                    msg(&mut interned, 5, |s| {
                        fv(s, 1, frame as u64 + 1);
                        fbytes(s, 2, name.as_bytes());
                    });
                    msg(&mut interned, 6, |f| {
                        fv(f, 1, frame as u64 + 1);
                        fv(f, 2, frame as u64 + 1);
                        fv(f, 3, 1);
                        fv(f, 4, frame as u64 + 1);
                    });
                }
            }
            msg(&mut interned, 7, |c| {
                fv(c, 1, leaf.unwrap_or_default() as u64 + 1);
                for &n in &chain {
                    fv(c, 2, tree.table.nodes[n as usize].frame as u64 + 1);
                }
            });
        }
        if !interned.is_empty() {
            fbytes(&mut self.p, 12, &interned);
        }
        msg(&mut self.p, 66, |ps| {
            fv(ps, 1, 0);
            fv(ps, 2, pid as u64);
            fv(ps, 3, tid as u64);
            if let Some(l) = leaf {
                fv(ps, 4, l as u64 + 1);
            }
            fv(ps, 6, weight);
        });
        sink.packet(&self.p)
    }

    /// Encodes one event: before the window only the open frames and the heap follow it; at its
    /// first event the output starts, past its end the walk stops; a piece that would grow past its
    /// limit is closed and the next one started. A buffer wait (lossless mode) becomes a slice
    /// `ferrotrace waited N ns for a buffer` on its thread's track, nested where the thread was: its
    /// marker comes before the event whose slow path waited (both carry that event's time), so it
    /// is drawn after that event, from its time for the length waited.
    fn event(
        &mut self,
        sink: &mut Sink<'_>,
        open: &mut dyn FnMut(u32) -> io::Result<Box<dyn Write>>,
        ev: Ev<'_>,
    ) -> io::Result<()> {
        let tid = match ev {
            Ev::Instant {
                kind: crate::reader::EventKind::Wait,
                tid,
                ts,
                id,
                ..
            } => {
                let i = self.seq(tid);
                self.seqs[i].pending_wait = Some((ts, id as u64));
                return Ok(());
            }
            Ev::Begin { tid, .. } | Ev::End { tid, .. } | Ev::Instant { tid, .. } => tid,
        };
        self.event_drawn(sink, open, ev)?;
        let i = self.seq(tid);
        match self.seqs[i].pending_wait.take() {
            Some((ts, ns)) if ts >= self.from && ts <= self.to => self.wait_slice(sink, i, ts, ns),
            _ => Ok(()),
        }
    }

    /// A buffer wait of `ns` from `ts` on sequence `i`: a slice with its own name (not interned).
    fn wait_slice(&mut self, sink: &mut Sink<'_>, i: usize, ts: u64, ns: u64) -> io::Result<()> {
        let name = format!("ferrotrace waited {ns} ns for a buffer");
        for (at, kind) in [(ts, 1), (ts + ns, 2)] {
            self.header(i, at);
            fv(&mut self.te, 9, kind);
            if kind == 1 {
                fbytes(&mut self.te, 23, name.as_bytes());
            }
            fbytes(&mut self.p, 11, &self.te);
            sink.packet(&self.p)?;
        }
        Ok(())
    }

    /// [`Encoder::event`] for every event but buffer waits.
    fn event_drawn(
        &mut self,
        sink: &mut Sink<'_>,
        open: &mut dyn FnMut(u32) -> io::Result<Box<dyn Write>>,
        ev: Ev<'_>,
    ) -> io::Result<()> {
        let (tid, ts) = match ev {
            Ev::Begin { tid, ts, .. } | Ev::End { tid, ts, .. } | Ev::Instant { tid, ts, .. } => {
                (tid, ts)
            }
        };
        if ts > self.to {
            if !self.started {
                self.start(sink, self.from)?;
            }
            self.close(sink, self.to)?;
            return Err(super::window::stop());
        }
        let i = self.seq(tid);
        let shown = ts >= self.from;
        if shown && !self.started {
            self.start(sink, self.from)?;
        } else if shown && !self.seqs[i].described {
            // A thread that appeared after the output started: its descriptors now.
            self.seq_preamble(sink, i, ts)?;
        }
        if let Some(max) = self.max {
            // A piece holds at least one event: a stack too deep for `max` makes pieces larger
            // than it rather than no end of empty ones.
            let size = match shown && self.in_piece > 0 {
                true => sink.bound(max)? + CLOSE_BYTES * self.open_frames + 64,
                false => 0,
            };
            if size > max && self.in_piece == 1 {
                // One event and what a piece repeats for it (its thread's descriptors, the stack
                // it reopens, the names it uses) do not fit: every piece would hold one event,
                // and a trace of N events would become N pieces.
                return Err(io::Error::other(format!(
                    "--max-size {max} is too small for this trace: piece {} holds one event in \
                     {size} bytes (the names and open frames each piece repeats); give \
                     --max-size {} or more",
                    self.piece - 1,
                    match (size * 16).next_power_of_two() {
                        n if n >= 1 << 20 => format!("{}M", n >> 20),
                        n => format!("{}K", (n >> 10).max(1)),
                    }
                )));
            }
            if size > max {
                self.in_piece = 0;
                self.close(sink, ts)?;
                sink.finish()?;
                let out = open(self.piece)?;
                self.piece += 1;
                sink.restart(out);
                self.start(sink, ts)?;
            }
        }
        self.in_piece += shown as u64;
        match ev {
            Ev::Begin {
                id, depth, args, ..
            } => {
                let seq = &mut self.seqs[i];
                let before = seq.open.len() as u64;
                seq.open.truncate(depth);
                seq.open.push(id);
                self.open_frames = self.open_frames + seq.open.len() as u64 - before;
                if shown {
                    self.slice(sink, i, ts, Some(id), args)?;
                }
            }
            Ev::End { depth, retval, .. } => {
                let seq = &mut self.seqs[i];
                let before = seq.open.len() as u64;
                seq.open.truncate(depth);
                self.open_frames = self.open_frames + seq.open.len() as u64 - before;
                if shown {
                    self.slice(sink, i, ts, None, retval)?;
                }
            }
            Ev::Instant {
                kind: crate::reader::EventKind::Sample,
                id,
                fields,
                ..
            } if self.sampled.is_some() => {
                if let (true, Some(mut tree)) = (shown, self.sampled.take()) {
                    // The tree is the encoder's: lent to `sample`, which also writes the packet.
                    let r = self.sample(&mut tree, sink, i, ts, id.checked_sub(1), fields[1]);
                    self.sampled = Some(tree);
                    r?;
                }
            }
            Ev::Instant {
                kind,
                id,
                payload,
                fields,
                ..
            } => {
                if shown {
                    self.header(i, ts);
                    let (name, values) = super::instant(
                        self.source.trace,
                        self.source.name,
                        kind,
                        id,
                        payload,
                        &fields,
                    );
                    for (arg, value) in &values {
                        // TrackEvent.debug_annotations (4): DebugAnnotation with name (10) and a
                        // value.
                        msg(&mut self.te, 4, |a| {
                            fbytes(a, 10, arg.as_bytes());
                            debug_annotation_value(a, value);
                        });
                    }
                    fv(&mut self.te, 9, 3);
                    fbytes(&mut self.te, 23, name.as_bytes());
                    fbytes(&mut self.p, 11, &self.te);
                    sink.packet(&self.p)?;
                }
                // The heap counter moves with each allocation and free, at the same time.
                if let Some(heap) = self.heap.as_mut() {
                    let e = crate::reader::EventRef {
                        tid,
                        ts_ns: ts,
                        tsc: 0,
                        kind,
                        id,
                        payload,
                        fields,
                    };
                    if let Some(bytes) = heap.on_event(&e) {
                        self.heap_bytes = Some(bytes);
                        if shown {
                            self.counter(sink, i, bytes)?;
                        }
                    }
                }
            }
        }
        Ok(())
    }
}

/// Writes the trace as Perfetto protobuf; returns the read errors met.
pub fn write(
    trace: &Trace,
    opts: Options,
    out: &mut dyn Write,
    progress: &mut Progress,
) -> io::Result<Vec<String>> {
    write_to(trace, opts, Output::Stream(out), progress)
}

/// Writes the trace as Perfetto protobuf to `out` (one stream or pieces); returns the read errors
/// met.
pub fn write_to(
    trace: &Trace,
    opts: Options,
    out: Output<'_>,
    progress: &mut Progress,
) -> io::Result<Vec<String>> {
    let names = Names::of(trace);
    let threads: Vec<(u32, String)> = trace
        .threads()
        .values()
        .map(|t| (t.tid, t.name.clone()))
        .collect();
    let source = Source {
        pid: trace.session().pid,
        process_name: trace.session().exe_name().to_string(),
        threads,
        // Samples (`record --sample`) may precede the runtime's first Clock chunk: from the program's
        // first instruction, not the runtime's start.
        t0: trace
            .threads()
            .values()
            .filter_map(|t| t.first_tsc)
            .map(|tsc| trace.tsc_to_ns(tsc))
            .fold(trace.start_ns(), u64::min),
        name: &|id| names.get(id).into_owned(),
        trace: Some(trace),
    };
    write_events(&source, opts, out, |f| walk(trace, progress, f))
}

/// What [`write_events`] needs to know about where its events come from.
pub struct Source<'a> {
    /// Process id.
    pub pid: u32,
    /// Process name shown on its track.
    pub process_name: String,
    /// Threads (tid, name), one track each.
    pub threads: Vec<(u32, String)>,
    /// CLOCK_MONOTONIC ns of the earliest event (or earlier).
    pub t0: u64,
    /// The name of a slice, by the id its `Begin` carries.
    pub name: &'a dyn Fn(u32) -> String,
    /// The trace, for tracepoint descriptors of `Instant` events (`None`: no tracepoints).
    pub trace: Option<&'a Trace>,
}

/// Writes events from any source (a function trace, or samples turned into slices) as Perfetto
/// protobuf: `events` is called once with the function that encodes each [`Ev`]; returns its errors.
/// Only the events of `window` are written: frames open at its start begin there, frames open at its
/// end end there. With [`Output::Pieces`], each piece is a trace of its own (descriptors and interned
/// names repeated; frames open across a cut end in one piece and begin again in the next).
pub fn write_events(
    source: &Source<'_>,
    opts: Options,
    out: Output<'_>,
    events: impl FnOnce(&mut dyn FnMut(Ev<'_>) -> io::Result<()>) -> io::Result<Vec<String>>,
) -> io::Result<Vec<String>> {
    let window = opts.window;
    let from = window.from.max(source.t0);
    let mut no_pieces =
        |_: u32| -> io::Result<Box<dyn Write>> { Err(io::Error::other("one output only")) };
    let (first, max, open): (Box<dyn Write + '_>, Option<u64>, &mut dyn FnMut(u32) -> _) = match out
    {
        Output::Stream(w) => (Box::new(w), None, &mut no_pieces),
        Output::Pieces { max, open } => (open(1)?, Some(max), open),
    };
    std::thread::scope(|scope| {
        let mut sink = Sink::new(first, opts.compress, scope);
        if let Some(max) = max {
            // Batches small enough that a piece of `max` bytes holds several.
            sink.limit = (max / 8).clamp(4 << 10, BATCH as u64) as usize;
        }
        let mut enc = Encoder {
            source,
            pid: source.pid,
            seqs: Vec::new(),
            index: std::collections::HashMap::new(),
            last: None,
            heap: source
                .trace
                .filter(|t| t.has_allocations())
                .map(|t| crate::mem::HeapTracker::new(t.session().alloc_sample)),
            heap_bytes: None,
            sampled: source
                .trace
                .filter(|t| !t.samplers().is_empty())
                .map(crate::stacks::FrameTree::new),
            open_frames: 0,
            in_piece: 0,
            started: false,
            from,
            to: window.to,
            max,
            piece: 2,
            p: Vec::with_capacity(256),
            te: Vec::with_capacity(64),
        };
        for (tid, name) in &source.threads {
            let i = enc.seq(*tid);
            enc.seqs[i].name = name.clone();
        }
        enc.last = None;
        let result = events(&mut |ev| enc.event(&mut sink, open, ev));
        let errors = match result {
            Err(e) if super::window::is_stop(&e) => Vec::new(),
            r => r?,
        };
        if !enc.started {
            enc.start(&mut sink, from)?;
        }
        sink.finish()?;
        Ok(errors)
    })
}

/// Writes a DebugAnnotation value: bool_value (2), uint_value (3), int_value (4), double_value (5) or
/// string_value (6); byte strings as hex text.
fn debug_annotation_value(a: &mut Vec<u8>, v: &crate::tracepoints::Value) {
    use crate::tracepoints::Value;
    match v {
        Value::Bool(b) => fv(a, 2, *b as u64),
        Value::Unsigned(u) => fv(a, 3, *u),
        Value::Signed(i) => fv(a, 4, *i as u64),
        Value::Float(f) => {
            a.push((5 << 3) | 1); // fixed64
            a.extend_from_slice(&f.to_le_bytes());
        }
        Value::Str(s) => fbytes(a, 6, s.as_bytes()),
        Value::Bytes(b) => fbytes(
            a,
            6,
            b.iter()
                .map(|x| format!("{x:02x}"))
                .collect::<String>()
                .as_bytes(),
        ),
    }
}

/// Writes samples as Perfetto slices: per thread, each sample's stack is a pile of nested slices lasting
/// one sampling period; frames shared with the previous sample continue (a "stack chart", as profilers
/// draw it), and everything closes when the thread goes quiet for more than two periods.
///
/// Samples counted in the kernel (`profile --bpf`) have no time of their own: the counts a read
/// found all carry the time of that read. Each lasts what it weighs instead (cpu-clock and off-cpu
/// weigh nanoseconds; a probe hit one period), laid end to end per thread so that the last ends at
/// the read (or after the previous read's, if they would overlap), those of one stack side by side:
/// a thread's top-level time is then its samples' weight, what `report --threads` says.
pub fn write_samples(
    set: &SampleSet,
    compress: bool,
    out: &mut dyn std::io::Write,
) -> std::io::Result<()> {
    use crate::callstack::EndKind;

    let period = 1_000_000_000 / u64::from(set.frequency.max(1));
    let name = |id: u32| {
        set.frames
            .get(id as usize)
            .map_or_else(|| format!("frame#{id}"), |f| f.function.to_string())
    };
    let source = Source {
        pid: set.pid,
        process_name: set
            .threads
            .iter()
            .find(|t| t.tid == set.pid)
            .map_or_else(String::new, |t| t.name.clone()),
        threads: set
            .threads
            .iter()
            .map(|t| (t.tid, thread_label(&t.name, t.tid)))
            .collect(),
        t0: set.start_monotonic_ns,
        name: &name,
        trace: None,
    };
    let frames_of = |leaf: Option<u32>| {
        let mut v: Vec<u32> = Vec::new();
        let mut node = leaf;
        while let Some(n) = node.and_then(|n| set.stacks.get(n as usize)) {
            v.push(n.frame);
            node = n.parent;
        }
        v.reverse();
        v
    };
    let opts = Options {
        compress,
        ..Options::default()
    };
    write_events(&source, opts, Output::Stream(out), |emit| {
        for tid in set.thread_ids() {
            let mut open: Vec<u32> = Vec::new();
            let mut end = 0u64;
            let close_to =
                |open: &mut Vec<u32>,
                 keep: usize,
                 ts: u64,
                 emit: &mut dyn FnMut(Ev<'_>) -> std::io::Result<()>| {
                    while open.len() > keep {
                        let id = open.pop().unwrap_or_default();
                        emit(Ev::End {
                            tid,
                            id,
                            ts,
                            depth: open.len(),
                            how: EndKind::Return,
                            retval: "",
                        })?;
                    }
                    Ok::<(), std::io::Error>(())
                };
            for (start, length, stack) in laid_out(set, tid, period) {
                let frames = frames_of(stack);
                if !open.is_empty() && start > end + 2 * period {
                    close_to(&mut open, 0, end, emit)?;
                }
                let common = open.iter().zip(&frames).take_while(|(a, b)| a == b).count();
                close_to(&mut open, common, start, emit)?;
                for &f in &frames[common..] {
                    emit(Ev::Begin {
                        tid,
                        id: f,
                        ts: start,
                        depth: open.len(),
                        args: "",
                    })?;
                    open.push(f);
                }
                end = start + length;
            }
            close_to(&mut open, 0, end, emit)?;
        }
        Ok(Vec::new())
    })
    .map(|_| ())
}

/// Thread `tid`'s samples as `(start, length, stack)` in time order ([`write_samples`]): each at its
/// time for one period, or, counted in the kernel, laid end to end by weight up to its read's time.
fn laid_out(set: &SampleSet, tid: u32, period: u64) -> Vec<(u64, u64, Option<u32>)> {
    let samples = set.samples.iter().filter(|s| s.tid == tid);
    if !set.in_kernel {
        return samples.map(|s| (s.time_ns, period, s.stack)).collect();
    }
    let length = |s: &crate::samples::Sample| {
        let weighs_time = set
            .events
            .get(s.event as usize)
            .is_some_and(|e| e.kind.weighs_time());
        if weighs_time {
            s.weight.max(1)
        } else {
            period
        }
    };
    let mut read: Vec<&crate::samples::Sample> = samples.collect();
    // One read's counts side by side, those of one stack together.
    read.sort_by_key(|s| (s.time_ns, s.stack));
    let mut out = Vec::with_capacity(read.len());
    let mut free_from = 0u64;
    for group in read.chunk_by(|a, b| a.time_ns == b.time_ns) {
        let total: u64 = group.iter().map(|s| length(s)).sum();
        let mut at = group[0].time_ns.saturating_sub(total).max(free_from);
        for s in group {
            out.push((at, length(s), s.stack));
            at += length(s);
        }
        free_from = at;
    }
    out
}

/// The largest file the Perfetto UI opens (it reads the file into one 2 GiB buffer in the browser).
pub const UI_LIMIT: u64 = 2 << 30;

/// The path of piece `n` of `prefix`: `PREFIX.N.perfetto-trace`.
pub fn piece_path(prefix: &std::path::Path, n: u32) -> std::path::PathBuf {
    let mut s = prefix.as_os_str().to_owned();
    s.push(format!(".{n}.perfetto-trace"));
    s.into()
}

/// `--format perfetto`.
pub struct Perfetto;

impl Exporter for Perfetto {
    fn name(&self) -> &'static str {
        "perfetto"
    }

    fn about(&self) -> &'static str {
        "Perfetto protobuf (ui.perfetto.dev)"
    }

    fn writes_samples(&self) -> Samples {
        Samples::WithoutFunctions
    }

    fn supports(&self) -> Supports {
        Supports {
            window: true,
            pieces: true,
        }
    }

    fn write_functions(
        &self,
        trace: &Trace,
        opts: super::Options,
        target: Target<'_>,
        progress: &mut Progress,
    ) -> io::Result<Written> {
        let popts = Options {
            compress: opts.compress,
            window: opts.window,
        };
        match (target, opts.max_size) {
            (Target::Pieces(prefix), Some(max)) => {
                let mut pieces = Vec::new();
                let mut open = |n: u32| -> io::Result<Box<dyn Write>> {
                    let path = piece_path(prefix, n);
                    let file = ferrotrace_core::output::create_result(&path)
                        .map_err(|e| io::Error::other(e.to_string()))?;
                    pieces.push(path);
                    Ok(Box::new(io::BufWriter::with_capacity(1 << 16, file)))
                };
                let written = write_to(
                    trace,
                    popts,
                    Output::Pieces {
                        max,
                        open: &mut open,
                    },
                    progress,
                );
                match written {
                    Ok(errors) => Ok(Written { errors, pieces }),
                    Err(e) => {
                        // No pieces that look like the whole trace's when they are not.
                        for piece in &pieces {
                            let _ = std::fs::remove_file(piece);
                        }
                        Err(e)
                    }
                }
            }
            (target, _) => {
                write_to(trace, popts, Output::Stream(stream(target)?), progress).map(Written::from)
            }
        }
    }

    fn notice(&self, trace: &Trace, opts: super::Options) -> Option<String> {
        // Measured on fib 31: 13 bytes per event plain, 0.70 compressed at LEVEL.
        let per_event = if opts.compress { 0.70 } else { 13.0 };
        let bytes = trace.event_count() as f64 * per_event;
        (opts.max_size.is_none() && opts.window.is_all() && bytes > UI_LIMIT as f64).then(|| {
            format!(
                "this trace makes about {:.1} GB of Perfetto protobuf, more than the {} GB the \
                 Perfetto UI opens in one file: write pieces with --max-size 1G -o PREFIX, a \
                 window with --from/--to, or open it with trace_processor",
                bytes / 1e9,
                UI_LIMIT >> 30
            )
        })
    }

    fn write_samples(
        &self,
        _trace: &crate::reader::Trace,
        set: &SampleSet,
        opts: super::Options,
    ) -> Result<Vec<u8>, RenderError> {
        let mut buf = Vec::new();
        write_samples(set, opts.compress, &mut buf)
            .map_err(|e| RenderError(format!("cannot encode the samples: {e}")))?;
        Ok(buf)
    }
}
