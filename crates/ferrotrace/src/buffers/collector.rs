//! The collector thread: turns full chunks into `Events` chunks on disk, off the traced threads.

use std::collections::{HashMap, VecDeque};
use std::fs::File;
use std::io::BufWriter;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use ferrotrace_core::format::ChunkKind;
use ferrotrace_core::record::Record;
use ferrotrace_core::running::RunningAtStart;
use ferrotrace_core::schema::{self, Payload, LOST_ONLY_SEQ};
use ferrotrace_core::writer::{encode_events, encode_events_following, Counts, TraceWriter};

use crate::buffers::clock::calibration_payload;
use crate::buffers::pool::FullChunk;
use crate::lifecycle::config::Mode;
use crate::lifecycle::runtime::{Meta, Runtime};

/// The trace file's writer.
pub type Writer = TraceWriter<BufWriter<File>>;

/// What the collector keeps between chunks: the file, what it wrote, what it counts. Behind a mutex
/// in the runtime ([`Runtime::collector_state`]): the collector thread holds it for each round, and a
/// traced thread that finds no free chunk takes it to write one chunk itself ([`help`]).
pub struct State {
    writer: Writer,
    path: PathBuf,
    scratch: Vec<u8>,
    /// Chunks encoded into the writer and not freed yet.
    encoded: Vec<u32>,
    /// Flight mode: encoded `Events` payloads and their event counts, oldest first, and their total
    /// size.
    ring: VecDeque<(Vec<u8>, u64)>,
    ring_bytes: usize,
    /// Set when writing failed (a full disk, an I/O error): the collector drops from then on (frees
    /// every chunk, counts its events as lost in `dropped`), so that threads waiting for a free chunk
    /// in lossless mode go on, and tries once more at the end to say so in the file (`End`'s
    /// `write_errno`).
    failed: Option<std::io::Error>,
    /// While failed: the final attempt at the lost events and the End chunk is on.
    retrying: bool,
    /// Chunks handed to the writer since its last successful flush, and those of the last
    /// [`CLOSING_ROOM`] bytes before it, in order: where each ends in the file, the chunk number
    /// after it, and the thread and counts of an Events chunk. A failed write cuts the file back to
    /// the last of them the disk holds whole.
    unflushed: Vec<Written>,
    /// Per thread, the events dropped since writing failed (and those cut off with the torn tail).
    dropped: HashMap<u32, u64>,
    /// Totals of what went to the file (or the flight ring), for the End chunk.
    totals: Counts,
    /// Flight mode: chunks and events the ring dropped to keep the newest.
    dropped_chunks: u64,
    dropped_events: u64,
    /// `ferrotrace live`: the printer.
    live: Option<crate::buffers::live::Printer>,
    /// Per thread, the functions that were running when its tracing began, found as its chunks go by:
    /// written before End, so that a replay needs no pre-scan of the whole trace.
    running: HashMap<u32, RunningAtStart>,
    /// `record -F`/`-N`/`-D`: what they keep of each thread's records, and the functions' flags.
    filter: Option<crate::buffers::filter::Filter>,
    filter_flags: Vec<u8>,
    /// Per thread, the number after its last chunk taken from the queue or dumped: a thread's current
    /// chunk is dumped only when that is its number, that is when none of its earlier chunks waits in
    /// the queue, so that its records reach the filter and `running` in the order it wrote them.
    next_seq: HashMap<u32, u32>,
}

/// What the end of a trace (Lost markers, RunningAtStart, Clock and End) is given room in, when a full
/// disk left none: the last chunks of events that far back are cut off.
const CLOSING_ROOM: u64 = 64 << 10;

/// A chunk the writer took: see `State::unflushed`.
#[derive(Clone, Copy)]
struct Written {
    end: u64,
    next_seq: u32,
    /// The thread and the chunk's counts.
    events: Option<(u32, Counts)>,
}

impl State {
    fn write(&mut self, kind: ChunkKind, payload: &[u8]) {
        self.write_chunk(kind, payload, None);
    }

    /// Writes one thread's Events chunk and adds its counts to the totals, or counts its events as
    /// dropped when writing failed.
    fn write_events(&mut self, tid: u32, counts: Counts, payload: &[u8]) {
        self.write_chunk(ChunkKind::Events, payload, Some((tid, counts)));
    }

    fn write_chunk(&mut self, kind: ChunkKind, payload: &[u8], events: Option<(u32, Counts)>) {
        if self.failed.is_some() && !self.retrying {
            if let Some((tid, counts)) = events {
                self.drop_events(tid, counts);
            }
            return;
        }
        match self.writer.chunk(kind, payload) {
            Ok(()) => {
                if let Some((_, counts)) = events {
                    self.totals.events += counts.events;
                    self.totals.lost += counts.lost;
                    self.totals.markers += counts.markers;
                }
                self.unflushed.push(Written {
                    end: self.writer.bytes_written(),
                    next_seq: self.writer.next_seq(),
                    events,
                });
            }
            Err(e) => {
                if let Some((tid, counts)) = events {
                    self.drop_events(tid, counts);
                }
                self.fail(e);
            }
        }
    }

    /// Counts a chunk's events as lost: its recorded events but its markers (Lost and Wait: not the
    /// program's), and the losses its Lost markers counted.
    fn drop_events(&mut self, tid: u32, counts: Counts) {
        *self.dropped.entry(tid).or_default() +=
            counts.events.saturating_sub(counts.markers) + counts.lost;
    }

    /// Writing failed: says so once (ignoring stderr's own errors: it may be the full disk too), cuts
    /// the file back to the last chunk it holds whole, and drops from then on. In the final attempt
    /// (`retrying`) a second failure only cuts the file back again.
    fn fail(&mut self, e: std::io::Error) {
        if self.failed.is_none() {
            say!(
                "ferrotrace: writing {} failed ({e}); dropping the rest of the trace, its events \
                 counted as lost",
                self.path.display()
            );
            self.failed = Some(e);
        }
        self.retrying = false;
        self.cut_back(0);
    }

    /// Truncates the file after the last chunk the disk holds whole, `room` bytes or more before its
    /// end when the chunks still known allow it, and continues the writer there, its buffered bytes
    /// discarded; the Events chunks cut off are counted as dropped.
    fn cut_back(&mut self, room: u64) {
        let on_disk = self
            .writer
            .get_mut()
            .get_ref()
            .metadata()
            .map(|m| m.len())
            .unwrap_or(0);
        let limit = on_disk.saturating_sub(room);
        let whole = self.unflushed.iter().take_while(|w| w.end <= on_disk);
        let keep = whole.clone().take_while(|w| w.end <= limit).last();
        let kept = keep.or(whole.clone().next()).map_or(0, |k| k.end);
        let keep = keep.or(whole.clone().next()).copied();
        let cut: Vec<Written> = self
            .unflushed
            .drain(..)
            .skip_while(|w| w.end <= kept)
            .collect();
        for w in cut {
            if let Some((tid, counts)) = w.events {
                self.totals.events -= counts.events;
                self.totals.lost -= counts.lost;
                self.totals.markers -= counts.markers;
                self.drop_events(tid, counts);
            }
        }
        let (Some(keep), Ok(mut clone)) = (keep, self.writer.get_mut().get_ref().try_clone())
        else {
            // Not even the file header is whole, or no second descriptor: nothing more can go in.
            self.unflushed.clear();
            return;
        };
        use std::io::{Seek, SeekFrom};
        if clone.set_len(keep.end).is_err() || clone.seek(SeekFrom::Start(keep.end)).is_err() {
            return;
        }
        let resumed = TraceWriter::resume(BufWriter::new(clone), keep.end, keep.next_seq);
        let old = std::mem::replace(&mut self.writer, resumed);
        // Discards the bytes the old writer still buffers (dropping it would try to write them).
        let (file, _unwritten) = old.into_inner().into_parts();
        drop(file);
        self.unflushed.push(keep);
    }

    fn meta(&mut self, rt: &Runtime) {
        for m in rt.take_meta() {
            let mut p = Vec::new();
            match m {
                Meta::Thread {
                    tid,
                    name,
                    registered_ticks,
                } => {
                    let _ = schema::Thread {
                        tid,
                        name: &name,
                        pid: 0,
                        registered_ticks,
                    }
                    .encode(&mut p);
                    self.write(ChunkKind::Thread, &p);
                }
                Meta::Chunks(chunks) => {
                    for (kind, payload) in chunks {
                        self.write(kind, &payload);
                    }
                }
                Meta::Lost { tid, count, tsc } => self.lost(tid, count, tsc),
            }
        }
    }

    /// Writes a thread's `count` lost events as an `Events` chunk of `Lost` records (sequence
    /// `LOST_ONLY_SEQ`: the thread had no chunk of its own left to say it in).
    fn lost(&mut self, tid: u32, count: u64, tsc: u64) {
        if let Some(live) = &mut self.live {
            live.lost(count);
        }
        let recs: Vec<Record> = Record::lost(tsc, count).collect();
        let mut p = Vec::new();
        let (counts, range) = encode_events(tid, LOST_ONLY_SEQ, &recs, &mut p);
        self.write_events(tid, counts, &p[range]);
    }

    /// The recorders' metadata chunks made since the last call (stack nodes, callsites), into the
    /// file, and shown to the live printer, which names what it prints by them.
    fn recorder_metadata(&mut self, rt: &Runtime) {
        for r in rt.upcalls.recorders {
            for (kind, payload) in (r.metadata)() {
                if let Some(live) = &mut self.live {
                    live.describe(kind, &payload);
                }
                self.write(kind, &payload);
            }
        }
    }

    fn chunk(&mut self, rt: &Runtime, c: FullChunk) {
        // Stack nodes interned, callsites registered before the chunk's events were written: into the
        // file ahead of them.
        self.recorder_metadata(rt);
        // SAFETY: the chunk came out of the full queue: the collector owns it until it is freed below.
        let records = unsafe { rt.pool.records(c.index, c.len as usize) };
        if let Some(live) = &mut self.live {
            live.on_chunk(c.tid, c.seq, records);
        }
        let records = &records[(c.skip as usize).min(records.len())..];
        self.next_seq.insert(c.tid, c.seq.wrapping_add(1));
        let mut filter = self.filter.take();
        let records = match &mut filter {
            Some(f) => {
                if c.seq == 0 {
                    // A thread's first chunk: its tid may be an ended thread's, whose frames are not
                    // this thread's.
                    f.thread_started(c.tid);
                }
                self.select(rt, f, c.tid, records)
            }
            None => records,
        };
        let mut scratch = std::mem::take(&mut self.scratch);
        let (counts, range) = self.encode(c.tid, c.seq, records, &mut scratch);
        // Freed once what was encoded from it is written (`release`).
        self.encoded.push(c.index);
        // A chunk that a dump or the filters emptied is written too: its number keeps the thread's
        // sequence without a gap (readers report a gap as chunks missing).
        if rt.config.mode == Mode::Flight {
            self.totals.events += counts.events;
            self.totals.lost += counts.lost;
            self.totals.markers += counts.markers;
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
        } else if self.failed.is_some() {
            self.drop_events(c.tid, counts);
        } else {
            self.write_events(c.tid, counts, &scratch[range]);
        }
        self.scratch = scratch;
        self.filter = filter;
    }

    /// What `filter` keeps of thread `tid`'s `records`.
    fn select<'f>(
        &mut self,
        rt: &Runtime,
        filter: &'f mut crate::buffers::filter::Filter,
        tid: u32,
        records: &[Record],
    ) -> &'f [Record] {
        let flags = &mut self.filter_flags;
        filter.apply(tid, records, |id| {
            if id as usize >= flags.len() {
                // A function discovered since the last look (dlopen).
                *flags = rt.function_filter_flags();
            }
            flags.get(id as usize).copied().unwrap_or(0)
        })
    }

    /// Encodes one thread's records (see [`encode_events_following`]), following its calls on the way.
    fn encode(
        &mut self,
        tid: u32,
        seq: u32,
        records: &[Record],
        out: &mut Vec<u8>,
    ) -> (Counts, std::ops::Range<usize>) {
        let running = self.running.entry(tid).or_default();
        encode_events_following(tid, seq, records, out, running)
    }

    /// The RunningAtStart chunk: the threads whose first events include exits without entries.
    fn write_running_at_start(&mut self) {
        let mut threads: Vec<(u32, Vec<u32>)> = self
            .running
            .iter()
            .filter(|(_, r)| !r.is_empty())
            .map(|(&tid, r)| (tid, r.outermost_first().collect()))
            .collect();
        threads.sort_unstable_by_key(|t| t.0);
        let mut p = Vec::new();
        let _ = schema::Count(threads.len() as u64).encode(&mut p);
        for (tid, ids) in &threads {
            let _ = schema::RunningAtStart {
                tid: *tid,
                functions: schema::FunctionIds::Slice(ids),
            }
            .encode(&mut p);
        }
        self.write(ChunkKind::RunningAtStart, &p);
    }

    /// Writes each thread's events dropped since writing failed as a chunk of Lost records.
    fn write_dropped(&mut self, tsc: u64) {
        let mut dropped: Vec<(u32, u64)> = std::mem::take(&mut self.dropped).into_iter().collect();
        dropped.sort_unstable();
        for (tid, count) in dropped {
            self.lost(tid, count, tsc);
        }
    }

    /// The end of the trace: what was dropped since the last attempt, the functions running at each
    /// thread's start, a last calibration and End (with `reason` and `signal`), written out.
    fn close(&mut self, reason: schema::EndReason, signal: u32, tsc: u64) {
        self.write_dropped(tsc);
        self.write_running_at_start();
        self.write(ChunkKind::Clock, &calibration_payload());
        let mut p = Vec::new();
        let _ = schema::End {
            reason,
            signal,
            events: self.totals.events,
            lost: self.totals.lost,
            chunks: self.writer.next_seq(),
            dropped_chunks: self.dropped_chunks,
            dropped_events: self.dropped_events,
            exit_code: None,
            unwind_errors: 0,
            write_errno: self
                .failed
                .as_ref()
                .map_or(0, |e| e.raw_os_error().unwrap_or(libc::EIO) as u32),
            markers: self.totals.markers,
            // The launcher adds it once it has waited for the program.
            usage: None,
        }
        .encode(&mut p);
        self.write(ChunkKind::End, &p);
        self.flush();
    }

    /// Writes out the flight ring, oldest first.
    fn write_ring(&mut self) {
        while let Some((p, _)) = self.ring.pop_front() {
            self.write(ChunkKind::Events, &p);
        }
        self.ring_bytes = 0;
    }

    /// A flight-mode dump: the ring, then what each thread has written into its current chunk since
    /// the last dump (newer than anything in the ring). Every chunk in the queue goes into the ring
    /// first: a thread with one there would have its current records left out of the dump.
    fn dump(&mut self, rt: &Runtime) {
        while let Some(c) = rt.pool.full.pop() {
            self.chunk(rt, c);
        }
        self.release(rt);
        self.write_ring();
        self.write_current_chunks(rt);
    }

    /// What each thread has written into its current chunk since the last dump, written now, as its
    /// own numbered Events chunk (the rest of the chunk goes later without it). A thread with an
    /// earlier chunk still in the queue is left for the next time. (Its order is told by the thread's
    /// tid: a tid the kernel reuses while the last chunk of the thread that had it waits in the queue
    /// could put the new thread's records first, and a thread with a reused tid is written this way
    /// only once it filled a chunk; the kernel hands out every other pid before it reuses one.)
    fn write_current_chunks(&mut self, rt: &Runtime) {
        // The spans and callsites those records name, described ahead of them as for a whole chunk.
        self.recorder_metadata(rt);
        let mut scratch = std::mem::take(&mut self.scratch);
        let mut filter = self.filter.take();
        crate::buffers::thread::dump_current_chunks(rt, |tid, seq, records| {
            if self.next_seq.get(&tid).copied().unwrap_or(0) != seq {
                return false;
            }
            self.next_seq.insert(tid, seq.wrapping_add(1));
            let records = match &mut filter {
                Some(f) => {
                    if seq == 0 {
                        f.thread_started(tid);
                    }
                    self.select(rt, f, tid, records)
                }
                None => records,
            };
            let (counts, range) = self.encode(tid, seq, records, &mut scratch);
            self.write_events(tid, counts, &scratch[range]);
            true
        });
        self.filter = filter;
        self.scratch = scratch;
    }

    /// Writes out what was encoded, then gives the chunks it came from back to the threads. In this
    /// order so that a chunk described as free in the pool shared with `ferrotrace record` has its
    /// events in the file: if the process is killed, record recovers the others from the pool, and
    /// nothing is lost in the writer's buffer.
    fn release(&mut self, rt: &Runtime) {
        if self.encoded.is_empty() {
            return;
        }
        self.flush();
        for index in self.encoded.drain(..) {
            if let Some(d) = rt.pool.descriptor(index) {
                d.free();
            }
            rt.pool.free.push(index);
        }
    }

    fn flush(&mut self) {
        if self.failed.is_some() && !self.retrying {
            return;
        }
        match self.writer.flush() {
            Ok(()) => {
                // Everything is in the file: the last chunk is where a later failure cuts back to,
                // or, when the closing chunks find no room, the last chunk at least CLOSING_ROOM
                // bytes before the end (`cut_back`): the chunks after it are kept known.
                let end = self.unflushed.last().map_or(0, |w| w.end);
                let first = self
                    .unflushed
                    .iter()
                    .rposition(|w| w.end + CLOSING_ROOM <= end)
                    .unwrap_or(self.unflushed.len().saturating_sub(1));
                self.unflushed.drain(..first);
            }
            Err(e) => self.fail(e),
        }
    }
}

/// How often the collector of an attached runtime looks at its control channel.
const CONTROL_POLL: Duration = Duration::from_millis(20);

/// The host of an attached recording closed the control channel: every patched site is put back (and
/// the tracepoints it enabled are disabled), the recording stops (End reason `Stopped`) and every
/// thread's chunk is handed over; the loop then writes the rest and the End chunk as for any finish. Nothing happens if a finish (the process exiting) was
/// claimed first.
fn stop_attached(rt: &Runtime) {
    crate::patch::sites::unpatch_all();
    if let Some(c) = rt.control.get() {
        c.undo();
    }
    if rt.lifecycle.claim_finish(schema::EndReason::Stopped, 0) {
        crate::buffers::thread::flush_all(rt, false);
        rt.lifecycle.threads_stopped();
    }
}

/// The collector's loop; returns after writing the End chunk.
pub fn run(rt: &'static Runtime, writer: Writer, path: PathBuf) {
    crate::buffers::thread::ignore_current_thread();
    for r in rt.upcalls.recorders {
        (r.ignore_thread)();
    }
    rt.lifecycle.collector_running();
    let mut prefault = rt.pool.prefault();
    let head = (writer.bytes_written(), writer.next_seq());
    let st = State {
        writer,
        path,
        scratch: Vec::with_capacity(1 << 16),
        encoded: Vec::with_capacity(rt.pool.count()),
        ring: VecDeque::new(),
        ring_bytes: 0,
        failed: None,
        retrying: false,
        // The file header, then the head start-up wrote: where a failure cuts back to at first.
        unflushed: vec![
            Written {
                end: ferrotrace_core::format::FILE_HEADER_LEN as u64,
                next_seq: 0,
                events: None,
            },
            Written {
                end: head.0,
                next_seq: head.1,
                events: None,
            },
        ],
        dropped: HashMap::new(),
        totals: Counts::default(),
        dropped_chunks: 0,
        dropped_events: 0,
        live: rt.live.as_ref().map(crate::buffers::live::Printer::new),
        running: HashMap::new(),
        filter: rt
            .config
            .filters_events()
            .then(|| crate::buffers::filter::Filter::of_config(&rt.config)),
        filter_flags: rt.function_filter_flags(),
        next_seq: HashMap::new(),
    };
    let _ = rt.collector_state.set(std::sync::Mutex::new(Some(st)));
    let Some(state) = rt.collector_state.get() else {
        return;
    };
    let mut last_clock = Instant::now();
    let mut last_control = Instant::now();
    // Without `ferrotrace record`'s shared pool (a recording the program starts itself, a runtime
    // started by hand) nobody recovers the chunks after a SIGKILL: what the threads have written is
    // put into the file every second, or a thread that writes little would lose everything. Not in
    // flight mode (the file gets the ring alone) nor live (the trace is thrown away).
    let write_by_time = !rt.pool.is_shared() && rt.config.mode != Mode::Flight && rt.live.is_none();
    loop {
        if last_control.elapsed() > CONTROL_POLL {
            last_control = Instant::now();
            if rt.control.get().is_some_and(|c| c.closed()) {
                stop_attached(rt);
            }
        }
        let finishing = rt.lifecycle.is_finishing();
        let mut guard = state.lock().unwrap_or_else(|e| e.into_inner());
        let Some(st) = guard.as_mut() else {
            return;
        };
        st.meta(rt);
        if st.live.is_some() {
            // Names of what the threads' current chunks may refer to, before the printer peeks in.
            st.recorder_metadata(rt);
        }
        if let Some(live) = &mut st.live {
            live.tick(&rt.pool, crate::buffers::thread::current_chunks(rt));
        }
        let mut did = false;
        // In batches, each written out before its chunks go back to the threads (`release`): a
        // quarter of the pool at most, so that threads waiting for a chunk get one soon.
        for _ in 0..(rt.pool.count() / 4).max(1) {
            let Some(c) = rt.pool.full.pop() else { break };
            st.chunk(rt, c);
            did = true;
        }
        st.release(rt);
        if rt.lifecycle.take_dump_request() {
            st.dump(rt);
            st.flush();
        }
        if finishing {
            // After a failure, one more attempt at the end of the trace: its threads, what they lost
            // (everything since the failure) and End with the error (chunks of events stay dropped).
            st.retrying = st.failed.is_some();
            st.meta(rt);
            while let Some(c) = rt.pool.full.pop() {
                st.chunk(rt, c);
            }
            let tsc = crate::buffers::clock::rdtsc();
            for (tid, count) in crate::buffers::thread::take_unreported_losses(rt) {
                st.lost(tid, count, tsc);
            }
            st.write_dropped(tsc);
            // The final flush handed every chunk over: the ring is all there is to write.
            st.write_ring();
            if let Some(live) = &mut st.live {
                live.finish();
            }
            let (reason, signal) = rt.lifecycle.end();
            st.close(reason, signal, tsc);
            if st.failed.is_some() && !st.retrying {
                // The disk had no room for the closing chunks: the last chunks of events make way
                // for them (counted as lost), so that the trace still ends with End saying why.
                st.cut_back(CLOSING_ROOM);
                st.retrying = true;
                st.close(reason, signal, tsc);
            }
            // The state goes with the collector (the file closed): a retired runtime keeps none of it,
            // and its pool may be given back.
            *guard = None;
            drop(guard);
            rt.lifecycle.end_written();
            if let Some(c) = rt.control.get() {
                if reason == schema::EndReason::Stopped {
                    // This collector was the finisher: back to no runtime, for a later attach.
                    rt.lifecycle.finish_over();
                    crate::lifecycle::runtime::retire(rt);
                }
                let _ = std::fs::File::create(&c.done);
            }
            return;
        }
        if last_clock.elapsed() > Duration::from_secs(1) {
            st.write(ChunkKind::Clock, &calibration_payload());
            last_clock = Instant::now();
            // Objects dlopened since the last look (the preload library also rescans on dlopen itself).
            crate::lifecycle::runtime::rescan();
            if write_by_time {
                st.write_current_chunks(rt);
                st.flush();
            }
        }
        if !did && !prefault.step(&rt.pool) {
            st.flush();
            drop(guard);
            rt.lifecycle.collector_nap(|| !rt.pool.full.is_empty());
        }
    }
}

/// A traced thread found no free chunk in lossless mode: the collector does not keep up, most often
/// because its core is busy with other work and it waits to be scheduled while the program waits for
/// it. The thread then writes the oldest full chunk itself, on its own core, freeing it, rather than
/// sleep. True when it did; false when the collector is at work (it holds the state) or has nothing
/// waiting, in live mode (the printer reads the threads' slots) and flight mode, and with `--alloc`
/// (the chunk's stacks are taken under the interner's lock, which the thread may hold here).
pub fn help(rt: &Runtime) -> bool {
    if rt.live.is_some() || rt.config.mode != Mode::Lossless || rt.program.alloc.is_some() {
        return false;
    }
    let Some(Ok(mut guard)) = rt.collector_state.get().map(|s| s.try_lock()) else {
        return false;
    };
    let Some(st) = guard.as_mut() else {
        return false;
    };
    // Metadata queued before the chunk was handed over goes in ahead of it, as the collector does.
    st.meta(rt);
    let Some(c) = rt.pool.full.pop() else {
        return false;
    };
    st.chunk(rt, c);
    st.release(rt);
    true
}
