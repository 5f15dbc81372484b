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
use ferrotrace_core::writer::{encode_events, Counts, TraceWriter};

use crate::buffers::clock::calibration_payload;
use crate::buffers::pool::FullChunk;
use crate::lifecycle::config::Mode;
use crate::lifecycle::runtime::{Meta, Runtime};

/// The trace file's writer.
pub type Writer = TraceWriter<BufWriter<File>>;

struct State {
    writer: Writer,
    path: PathBuf,
    scratch: Vec<u8>,
    /// Chunks encoded into the writer and not freed yet.
    encoded: Vec<u32>,
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
    /// `ferrotrace live`: the printer.
    live: Option<crate::buffers::live::Printer>,
    /// Per thread, the functions that were running when its tracing began, found as its chunks go by:
    /// written before End, so that a replay needs no pre-scan of the whole trace.
    running: HashMap<u32, RunningAtStart>,
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
        self.totals.events += counts.events;
        self.totals.lost += counts.lost;
        self.write(ChunkKind::Events, &p[range]);
    }

    fn chunk(&mut self, rt: &Runtime, c: FullChunk) {
        // Stack nodes interned before the chunk's events were written: into the file ahead of them.
        for r in rt.upcalls.recorders {
            for (kind, payload) in (r.metadata)() {
                self.write(kind, &payload);
            }
        }
        // SAFETY: the chunk came out of the full queue: the collector owns it until it is freed below.
        let records = unsafe { rt.pool.records(c.index, c.len as usize) };
        if let Some(live) = &mut self.live {
            live.on_chunk(c.tid, c.seq, records);
        }
        let records = &records[(c.skip as usize).min(records.len())..];
        let mut scratch = std::mem::take(&mut self.scratch);
        let (counts, range) = self.encode(c.tid, c.seq, records, &mut scratch);
        self.totals.events += counts.events;
        self.totals.lost += counts.lost;
        // Freed once what was encoded from it is written (`release`).
        self.encoded.push(c.index);
        if records.is_empty() {
            // Everything was written by a flight-mode dump already.
        } else if rt.config.mode == Mode::Flight {
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
        } else {
            self.write(ChunkKind::Events, &scratch[range]);
        }
        self.scratch = scratch;
    }

    /// Encodes one thread's records (see [`encode_events`]), following its calls on the way.
    fn encode(
        &mut self,
        tid: u32,
        seq: u32,
        records: &[Record],
        out: &mut Vec<u8>,
    ) -> (Counts, std::ops::Range<usize>) {
        let running = self.running.entry(tid).or_default();
        let mut i = 0;
        while let Some(r) = records.get(i) {
            if let Some(kind) = r.kind().filter(|k| k.is_function()) {
                running.observe(kind, r.id());
            }
            i += 1 + r.payload_slots();
        }
        encode_events(tid, seq, records, out)
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

    /// Writes out the flight ring, oldest first.
    fn write_ring(&mut self) {
        while let Some((p, _)) = self.ring.pop_front() {
            self.write(ChunkKind::Events, &p);
        }
        self.ring_bytes = 0;
    }

    /// A flight-mode dump: the ring, then what each thread has written into its current chunk since
    /// the last dump (newer than anything in the ring).
    fn dump(&mut self, rt: &Runtime) {
        self.write_ring();
        let mut scratch = std::mem::take(&mut self.scratch);
        crate::buffers::thread::dump_current_chunks(rt, |tid, seq, records| {
            let (counts, range) = self.encode(tid, seq, records, &mut scratch);
            self.totals.events += counts.events;
            self.totals.lost += counts.lost;
            self.write(ChunkKind::Events, &scratch[range]);
        });
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
        if !self.failed {
            if let Err(e) = self.writer.flush() {
                eprintln!("ferrotrace: writing {} failed: {e}", self.path.display());
                self.failed = true;
            }
        }
    }
}

/// How often the collector of an attached runtime looks at its control channel.
const CONTROL_POLL: Duration = Duration::from_millis(20);

/// The host of an attached recording closed the control channel: every patched site is put back, the
/// recording stops (End reason `Stopped`) and every thread's chunk is handed over; the loop then writes
/// the rest and the End chunk as for any finish. Nothing happens if a finish (the process exiting) was
/// claimed first.
fn stop_attached(rt: &Runtime) {
    crate::patch::sites::unpatch_all();
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
    let mut st = State {
        writer,
        path,
        scratch: Vec::with_capacity(1 << 16),
        encoded: Vec::with_capacity(rt.pool.count()),
        ring: VecDeque::new(),
        ring_bytes: 0,
        failed: false,
        totals: Counts::default(),
        dropped_chunks: 0,
        dropped_events: 0,
        live: rt.live.as_ref().map(crate::buffers::live::Printer::new),
        running: HashMap::new(),
    };
    let mut last_clock = Instant::now();
    let mut last_control = Instant::now();
    loop {
        if last_control.elapsed() > CONTROL_POLL {
            last_control = Instant::now();
            if rt.control.get().is_some_and(|c| c.closed()) {
                stop_attached(rt);
            }
        }
        let finishing = rt.lifecycle.is_finishing();
        st.meta(rt);
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
            st.meta(rt);
            while let Some(c) = rt.pool.full.pop() {
                st.chunk(rt, c);
            }
            let tsc = crate::buffers::clock::rdtsc();
            for (tid, count) in crate::buffers::thread::take_unreported_losses(rt) {
                st.lost(tid, count, tsc);
            }
            // The final flush handed every chunk over: the ring is all there is to write.
            st.write_ring();
            if let Some(live) = &mut st.live {
                live.finish();
            }
            st.write_running_at_start();
            st.write(ChunkKind::Clock, &calibration_payload());
            let mut p = Vec::new();
            let (reason, signal) = rt.lifecycle.end();
            let _ = schema::End {
                reason,
                signal,
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
            rt.lifecycle.end_written();
            if let Some(c) = rt.control.get() {
                if reason == schema::EndReason::Stopped {
                    // This collector was the finisher: back to no runtime, for a later attach.
                    rt.lifecycle.finish_over();
                    crate::lifecycle::runtime::retire(rt);
                    c.close();
                    if let Some(live) = &rt.live {
                        live.close();
                    }
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
        }
        if !did && !prefault.step() {
            st.flush();
            rt.lifecycle.collector_nap(|| !rt.pool.full.is_empty());
        }
    }
}
