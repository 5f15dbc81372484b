//! Writing a profile as a standard trace (docs/format.md): the same chunks every recorder writes.
//!
//! Samples are `Sample` events in each thread's `Events` chunks, stamped in CLOCK_MONOTONIC
//! nanoseconds (perf_event's clock; the `Clock` chunks say so by pairing each reading with itself);
//! their stacks are nodes of the trace's interned `Stacks` table, written before the first event that
//! refers to them, with addresses relative to the `Module` each lies in (written at first use). The
//! reader and every analysis are `ferrotrace-analysis`'s: nothing here reads a trace back.

use std::collections::HashMap;
use std::fs::File;
use std::io::BufWriter;

use ferrotrace_core::builder::{encode_events, Event};
use ferrotrace_core::clock::{monotonic_ns, realtime_ns};
use ferrotrace_core::record::EventKind;
use ferrotrace_core::schema::{
    self, ClockSample, Sampler, SamplersHeader, StackNode, StacksHeader,
};
use ferrotrace_core::writer::TraceWriter;

/// Samples per thread kept before its Events chunk is written (once they are older than every ring's
/// newest record, so that chunks stay in time order).
const SAMPLES_PER_CHUNK: usize = 4096;
/// Stack nodes per Stacks chunk.
const NODES_PER_CHUNK: usize = 16384;

/// A sample waiting for its thread's next chunk.
#[derive(Clone, Copy)]
struct Pending {
    time: u64,
    sampler: u32,
    stack: Option<u32>,
    weight: u64,
}

#[derive(Default)]
struct ThreadBuf {
    pending: Vec<Pending>,
    seq: u32,
}

/// Streams a profile into a trace file.
pub(crate) struct SampleWriter {
    pub w: TraceWriter<BufWriter<File>>,
    threads: HashMap<u32, ThreadBuf>,
    /// Stack nodes created since the last Stacks chunk, and the id of the first of them.
    new_nodes: Vec<StackNode>,
    first_new_node: u32,
    /// Modules whose Module chunk is written.
    modules_written: Vec<bool>,
    scratch: Vec<u8>,
    /// Sample events written (the End chunk's count).
    pub events: u64,
}

/// A module as the profiler knows it, for its Module chunk.
pub(crate) struct ModuleDesc<'a> {
    pub id: u32,
    pub path: &'a str,
    pub build_id: &'a [u8],
}

/// A clock calibration for events stamped in CLOCK_MONOTONIC ns.
pub(crate) fn clock_now() -> ClockSample {
    let mono = monotonic_ns();
    ClockSample {
        ticks: mono,
        monotonic_ns: mono,
        realtime_ns: realtime_ns(),
    }
}

impl SampleWriter {
    /// Starts the trace: Session, a first Clock (`clock`: the trace's start), and the Samplers.
    pub fn start(
        file: File,
        session: &schema::Session<'_>,
        clock: &ClockSample,
        samplers: &SamplersHeader,
        list: &[Sampler<'_>],
    ) -> std::io::Result<SampleWriter> {
        let mut w = TraceWriter::new(BufWriter::with_capacity(256 * 1024, file))?;
        w.write(session)?;
        w.write(clock)?;
        w.write_list(samplers, list)?;
        Ok(SampleWriter {
            w,
            threads: HashMap::new(),
            new_nodes: Vec::new(),
            first_new_node: 0,
            modules_written: Vec::new(),
            scratch: Vec::new(),
            events: 0,
        })
    }

    /// Writes `m`'s Module chunk unless written already.
    pub fn module(&mut self, m: &ModuleDesc<'_>) -> std::io::Result<()> {
        let i = m.id as usize;
        if self.modules_written.len() <= i {
            self.modules_written.resize(i + 1, false);
        }
        if self.modules_written[i] {
            return Ok(());
        }
        self.modules_written[i] = true;
        self.w.write(&schema::Module {
            id: m.id,
            bias: 0,
            size: 0,
            path: m.path,
            build_id: m.build_id,
        })
    }

    /// Records a new stack node (its id is the next one: the caller numbers them from 0).
    pub fn stack_node(&mut self, node: StackNode) -> std::io::Result<()> {
        self.new_nodes.push(node);
        if self.new_nodes.len() >= NODES_PER_CHUNK {
            self.flush_nodes()?;
        }
        Ok(())
    }

    fn flush_nodes(&mut self) -> std::io::Result<()> {
        if self.new_nodes.is_empty() {
            return Ok(());
        }
        let head = StacksHeader {
            first_id: self.first_new_node,
            count: self.new_nodes.len() as u32,
        };
        self.w.write_list(&head, &self.new_nodes)?;
        self.first_new_node += self.new_nodes.len() as u32;
        self.new_nodes.clear();
        Ok(())
    }

    /// Queues a sample of thread `tid`.
    pub fn sample(&mut self, time: u64, tid: u32, sampler: u32, stack: Option<u32>, weight: u64) {
        self.threads.entry(tid).or_default().pending.push(Pending {
            time,
            sampler,
            stack,
            weight,
        });
    }

    /// Writes the chunks of threads with a full chunk's worth of samples older than `watermark` (the
    /// recorder's records are handled in time order up to it, so no older sample can still come);
    /// everything with `watermark == u64::MAX`.
    pub fn flush(&mut self, watermark: u64) -> std::io::Result<()> {
        let all = watermark == u64::MAX;
        let mut ready: Vec<u32> = self
            .threads
            .iter()
            .filter(|(_, t)| {
                if all {
                    !t.pending.is_empty()
                } else {
                    t.pending.iter().filter(|p| p.time <= watermark).count() >= SAMPLES_PER_CHUNK
                }
            })
            .map(|(&tid, _)| tid)
            .collect();
        if ready.is_empty() {
            return Ok(());
        }
        ready.sort_unstable();
        // Stacks before the events that refer to them.
        self.flush_nodes()?;
        for tid in ready {
            let Some(t) = self.threads.get_mut(&tid) else {
                continue;
            };
            // Records arrive in time order (perf::Ordered), but an off-CPU sample is stamped when its
            // thread left the CPU and made when it came back, after the samples of other events.
            t.pending.sort_by_key(|p| p.time);
            let take = t.pending.partition_point(|p| p.time <= watermark);
            let batch: Vec<Pending> = t.pending.drain(..take).collect();
            let first_seq = t.seq;
            t.seq += batch.len().div_ceil(SAMPLES_PER_CHUNK) as u32;
            for (i, part) in batch.chunks(SAMPLES_PER_CHUNK).enumerate() {
                self.events_chunk(tid, first_seq + i as u32, part)?;
            }
        }
        Ok(())
    }

    fn events_chunk(&mut self, tid: u32, seq: u32, part: &[Pending]) -> std::io::Result<()> {
        let events: Vec<Event> = part
            .iter()
            .map(|p| Event {
                ticks: p.time,
                kind: EventKind::Sample,
                id: p.stack.map_or(0, |s| s + 1),
                payload: Vec::new(),
                fields: [p.sampler as u64, p.weight],
            })
            .collect();
        let mut buf = std::mem::take(&mut self.scratch);
        buf.clear();
        encode_events(tid, seq, &events, &mut buf);
        let r = self
            .w
            .chunk(ferrotrace_core::format::ChunkKind::Events, &buf);
        self.scratch = buf;
        self.events += part.len() as u64;
        r
    }

    /// Writes the thread table (the names known at the end): every thread of `threads`, or with
    /// `sampled_only` those with samples in this trace (a period of a continuous recording, whose
    /// table would otherwise list every thread seen since it began).
    pub fn threads(
        &mut self,
        threads: &HashMap<u32, (u32, String)>,
        sampled_only: bool,
    ) -> std::io::Result<()> {
        let mut v: Vec<_> = threads
            .iter()
            .filter(|(tid, _)| !sampled_only || self.threads.contains_key(tid))
            .collect();
        v.sort_by_key(|(t, _)| **t);
        for (&tid, (pid, name)) in v {
            self.w.write(&schema::Thread {
                tid,
                name,
                pid: *pid,
                registered_ticks: 0,
            })?;
        }
        Ok(())
    }

    /// Writes why the in-kernel unwinder stopped stacks early (an UnwindStops chunk).
    pub fn unwind_stops(&mut self, stops: &schema::UnwindStops) -> std::io::Result<()> {
        self.w.write(stops)
    }

    /// Ends the trace: the last samples and stacks, a last Clock (`clock`: the trace's end), the
    /// End chunk.
    pub fn finish(&mut self, mut end: schema::End, clock: &ClockSample) -> std::io::Result<()> {
        self.flush(u64::MAX)?;
        self.flush_nodes()?;
        self.w.write(clock)?;
        end.events = self.events;
        end.chunks = self.w.next_seq();
        self.w.write(&end)?;
        self.w.flush()
    }
}
