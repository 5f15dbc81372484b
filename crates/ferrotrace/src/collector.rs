//! The collector thread: turns full chunks into `Events` chunks on disk, off the traced threads.

use std::collections::VecDeque;
use std::fs::File;
use std::io::BufWriter;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use ferrotrace_core::codec::{put_str, put_varint, EventEncoder};
use ferrotrace_core::format::ChunkKind;
use ferrotrace_core::record::{EventKind, Record};
use ferrotrace_core::writer::TraceWriter;

use crate::config::Mode;
use crate::pool::FullChunk;
use crate::runtime::{clock_payload, Meta, Runtime};

type Writer = TraceWriter<BufWriter<File>>;

/// Encodes `records` (one thread's chunk) as an `Events` chunk payload into `out`.
pub fn encode_events(tid: u32, seq: u32, records: &[Record], out: &mut Vec<u8>) {
    out.clear();
    let base = records.first().map_or(0, |r| r.tsc);
    let mut count = 0u64;
    let mut i = 0;
    while i < records.len() {
        count += 1;
        i += 1 + records[i].payload_slots();
    }
    let _ = put_varint(out, tid as u64);
    let _ = put_varint(out, seq as u64);
    let _ = put_varint(out, base);
    let _ = put_varint(out, count);
    out.reserve(records.len() * 4);
    let mut enc = EventEncoder::new(base);
    let mut i = 0;
    while i < records.len() {
        let r = &records[i];
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
        let _ = enc.encode(r, payload, out);
        i = end;
    }
}

struct State {
    writer: Writer,
    path: PathBuf,
    scratch: Vec<u8>,
    /// Flight mode: encoded `Events` payloads, oldest first, and their total size.
    ring: VecDeque<Vec<u8>>,
    ring_bytes: usize,
    failed: bool,
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
                    let _ = put_varint(&mut p, tid as u64);
                    let _ = put_str(&mut p, &name);
                    self.write(ChunkKind::Thread, &p);
                }
                Meta::Lost { tid, count, tsc } => {
                    let mut remaining = count;
                    let mut recs = Vec::new();
                    while remaining > 0 {
                        let c = remaining.min(u32::MAX as u64);
                        recs.push(Record::new(tsc, EventKind::Lost, c as u32));
                        remaining -= c;
                    }
                    encode_events(tid, u32::MAX, &recs, &mut p);
                    self.write(ChunkKind::Events, &p);
                }
            }
        }
    }

    fn chunk(&mut self, rt: &Runtime, c: FullChunk) {
        // SAFETY: the chunk came out of the full queue: the collector owns it until it is freed below.
        let records = unsafe { rt.pool.records(c.index, c.len as usize) };
        if crate::live::active() {
            crate::live::on_chunk(c.tid, c.seq, records);
        }
        let mut scratch = std::mem::take(&mut self.scratch);
        encode_events(c.tid, c.seq, records, &mut scratch);
        let _ = rt.pool.free.push(c.index);
        if rt.config.mode == Mode::Flight {
            self.ring_bytes += scratch.len();
            self.ring.push_back(scratch.clone());
            while self.ring_bytes > rt.config.buffer_size {
                match self.ring.pop_front() {
                    Some(old) => self.ring_bytes -= old.len(),
                    None => break,
                }
            }
        } else if !records.is_empty() {
            self.write(ChunkKind::Events, &scratch);
        }
        self.scratch = scratch;
    }

    fn dump_ring(&mut self) {
        while let Some(p) = self.ring.pop_front() {
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
    let mut st = State {
        writer,
        path,
        scratch: Vec::with_capacity(1 << 16),
        ring: VecDeque::new(),
        ring_bytes: 0,
        failed: false,
    };
    let mut last_clock = Instant::now();
    let mut written = 0u64;
    loop {
        let finishing = rt.finishing.load(Ordering::Acquire);
        st.meta(rt);
        if crate::live::active() {
            crate::live::tick(rt);
        }
        let mut did = false;
        while let Some(c) = rt.pool.full.pop() {
            written += c.len as u64;
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
                written += c.len as u64;
                st.chunk(rt, c);
            }
            st.dump_ring();
            crate::live::finish();
            st.write(ChunkKind::Clock, &clock_payload());
            let mut p = Vec::new();
            let _ = put_varint(&mut p, rt.end_reason.load(Ordering::Relaxed) as u64);
            let _ = put_varint(&mut p, rt.end_signal.load(Ordering::Relaxed) as u64);
            let _ = put_varint(&mut p, written);
            let _ = put_varint(&mut p, 0);
            let _ = put_varint(&mut p, 0);
            st.write(ChunkKind::End, &p);
            st.flush();
            rt.collector_done.store(true, Ordering::Release);
            return;
        }
        if last_clock.elapsed() > Duration::from_secs(1) {
            st.write(ChunkKind::Clock, &clock_payload());
            last_clock = Instant::now();
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
