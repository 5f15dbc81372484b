//! Writing a whole trace from events in hand (feature `std`): tests, converters, and recorders that
//! do not need the runtime's lock-free chunks.
//!
//! [`TraceBuilder`] takes metadata and events in any order of threads (each thread's events in time
//! order), keeps one buffer per thread, and writes standard chunks through [`TraceWriter`]: the same
//! file the runtime and the profiler write, read by the same reader. Timestamps are nanoseconds of
//! CLOCK_MONOTONIC (the Clock chunks pair each with itself).
//!
//! ```
//! use ferrotrace_core::builder::TraceBuilder;
//! use ferrotrace_core::record::EventKind;
//! use ferrotrace_core::schema::{source, Mode};
//!
//! let mut b = TraceBuilder::new(Vec::new(), "/bin/demo", source::XRAY, Mode::Lossless).unwrap();
//! b.function(1, 0x1000, 64, "demo::main").unwrap();
//! b.thread(7, "main").unwrap();
//! b.event(7, 1_000, EventKind::Entry, 1).unwrap();
//! b.event(7, 1_500, EventKind::Exit, 1).unwrap();
//! let bytes = b.finish().unwrap();
//! assert_eq!(&bytes[..8], b"FERROTRC");
//! ```

use std::collections::BTreeMap;
use std::io::{self, Write};

use crate::codec::{EventEncoder, EventFields};
use crate::format::ChunkKind;
use crate::record::EventKind;
use crate::schema::{self, ClockSample, Mode, Payload, Sampler, SamplerKind, StackNode};
use crate::writer::TraceWriter;

/// Events per Events chunk.
const EVENTS_PER_CHUNK: usize = 4096;

/// One event of a thread, as [`encode_events`] takes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    /// Its time, in the trace's ticks.
    pub ticks: u64,
    /// What happened.
    pub kind: EventKind,
    /// Function id, tracepoint id, stack id + 1, or count (see [`EventKind`]).
    pub id: u32,
    /// A tracepoint's argument bytes (empty for other kinds).
    pub payload: Vec<u8>,
    /// The fields of allocation and sample events.
    pub fields: EventFields,
}

/// Appends the payload of an Events chunk of thread `tid` (its `seq`-th) holding `events`, in order, to
/// `out`: the one encoding every writer that has its events in hand uses.
pub fn encode_events(tid: u32, seq: u32, events: &[Event], out: &mut Vec<u8>) {
    let base = events.first().map_or(0, |e| e.ticks);
    let _ = schema::EventsHeader {
        tid,
        seq,
        base_ticks: base,
        count: events.len() as u64,
    }
    .encode(out);
    let mut enc = EventEncoder::new(base);
    for e in events {
        let _ = enc.encode(e.ticks, e.kind, e.id, &e.payload, &e.fields, out);
    }
}

#[derive(Default)]
struct ThreadBuf {
    events: Vec<Event>,
    seq: u32,
}

/// Builds a trace file from events in hand; see the [module docs](self).
pub struct TraceBuilder<W: Write> {
    w: TraceWriter<W>,
    threads: BTreeMap<u32, ThreadBuf>,
    samplers: Vec<(SamplerKind, String)>,
    samplers_written: bool,
    stacks: Vec<StackNode>,
    stacks_written: usize,
    events: u64,
    lost: u64,
    first_ticks: Option<u64>,
    last_ticks: u64,
}

impl<W: Write> TraceBuilder<W> {
    /// Starts a trace of the program `exe` (process id 1) whose events come from `sources` (bits of
    /// [`schema::source`]).
    pub fn new(out: W, exe: &str, sources: u64, mode: Mode) -> io::Result<Self> {
        Self::with_alloc_sample(out, exe, sources, mode, 0)
    }

    /// [`TraceBuilder::new`] for a trace whose allocation events were sampled, one per `alloc_sample`
    /// bytes on average (the Session chunk says so; 0: every allocation).
    pub fn with_alloc_sample(
        out: W,
        exe: &str,
        sources: u64,
        mode: Mode,
        alloc_sample: u64,
    ) -> io::Result<Self> {
        let mut w = TraceWriter::new(out)?;
        w.write(&schema::Session {
            pid: 1,
            ppid: 0,
            exe,
            cmdline: exe.as_bytes(),
            start_realtime_ns: 0,
            version: env!("CARGO_PKG_VERSION"),
            mode,
            tick_hz: 1_000_000_000,
            sources,
            alloc_sample,
            min_call_ns: 0,
            // A trace built here says nothing of a machine (tests, converters).
            host: "",
            boot_id: "",
        })?;
        Ok(TraceBuilder {
            w,
            threads: BTreeMap::new(),
            samplers: Vec::new(),
            samplers_written: false,
            stacks: Vec::new(),
            stacks_written: 0,
            events: 0,
            lost: 0,
            first_ticks: None,
            last_ticks: 0,
        })
    }

    /// Declares a module (for stacks and functions): its id, path and build-id.
    pub fn module(&mut self, id: u32, path: &str, build_id: &[u8]) -> io::Result<()> {
        self.w.write(&schema::Module {
            id,
            bias: 0,
            size: 0,
            path,
            build_id,
        })
    }

    /// Declares a traced function of module 1 (the program).
    pub fn function(&mut self, id: u32, address: u64, size: u64, name: &str) -> io::Result<()> {
        self.w.write_list(
            &schema::Count(1),
            &[schema::Function {
                id,
                module: 1,
                address,
                size,
                name,
            }],
        )
    }

    /// Declares a tracepoint (`args` as `name:type,...`).
    pub fn tracepoint(&mut self, id: u32, name: &str, args: &str, format: &str) -> io::Result<()> {
        self.w.write_list(
            &schema::Count(1),
            &[schema::TracepointDesc {
                id,
                name,
                args,
                format,
                file: "",
                line: 0,
            }],
        )
    }

    /// Names a thread.
    pub fn thread(&mut self, tid: u32, name: &str) -> io::Result<()> {
        self.threads.entry(tid).or_default();
        self.w.write(&schema::Thread {
            tid,
            name,
            pid: 0,
            registered_ticks: 0,
        })
    }

    /// Adds a sampler; returns its index for [`TraceBuilder::sample`].
    pub fn sampler(&mut self, kind: SamplerKind, spelling: &str) -> u32 {
        self.samplers.push((kind, spelling.to_string()));
        self.samplers.len() as u32 - 1
    }

    /// Interns a stack node; returns its id.
    pub fn stack(&mut self, parent: Option<u32>, module: u32, address: u64) -> u32 {
        self.stacks.push(StackNode {
            parent,
            module,
            address,
        });
        self.stacks.len() as u32 - 1
    }

    fn push(&mut self, tid: u32, ev: Event) -> io::Result<()> {
        self.first_ticks.get_or_insert(ev.ticks);
        self.last_ticks = self.last_ticks.max(ev.ticks);
        let t = self.threads.entry(tid).or_default();
        t.events.push(ev);
        if t.events.len() >= EVENTS_PER_CHUNK {
            self.flush_thread(tid)?;
        }
        Ok(())
    }

    /// A function entry or exit, a Lost count or a Wait (id as [`EventKind`] says).
    pub fn event(&mut self, tid: u32, ticks: u64, kind: EventKind, id: u32) -> io::Result<()> {
        if kind == EventKind::Lost {
            self.lost += id as u64;
        }
        self.push(
            tid,
            Event {
                ticks,
                kind,
                id,
                payload: Vec::new(),
                fields: [0; 2],
            },
        )
    }

    /// A tracepoint hit with its argument bytes.
    pub fn tracepoint_hit(&mut self, tid: u32, ticks: u64, id: u32, args: &[u8]) -> io::Result<()> {
        self.push(
            tid,
            Event {
                ticks,
                kind: EventKind::Tracepoint,
                id,
                payload: args.to_vec(),
                fields: [0; 2],
            },
        )
    }

    /// A sample of `sampler` with the stack whose leaf is `stack`.
    pub fn sample(
        &mut self,
        tid: u32,
        ticks: u64,
        stack: Option<u32>,
        sampler: u32,
        weight: u64,
    ) -> io::Result<()> {
        self.push(
            tid,
            Event {
                ticks,
                kind: EventKind::Sample,
                id: stack.map_or(0, |s| s + 1),
                payload: Vec::new(),
                fields: [sampler as u64, weight],
            },
        )
    }

    /// An allocation of `size` bytes at `address` with the stack whose leaf is `stack`.
    pub fn alloc(
        &mut self,
        tid: u32,
        ticks: u64,
        stack: Option<u32>,
        size: u64,
        address: u64,
    ) -> io::Result<()> {
        self.push(
            tid,
            Event {
                ticks,
                kind: EventKind::Alloc,
                id: stack.map_or(0, |s| s + 1),
                payload: Vec::new(),
                fields: [size, address],
            },
        )
    }

    /// A free of the block at `address`.
    pub fn free(&mut self, tid: u32, ticks: u64, address: u64) -> io::Result<()> {
        self.push(
            tid,
            Event {
                ticks,
                kind: EventKind::Free,
                id: 0,
                payload: Vec::new(),
                fields: [address, 0],
            },
        )
    }

    /// Writes what events refer to (samplers, new stack nodes) before the events themselves.
    fn write_tables(&mut self) -> io::Result<()> {
        if !self.samplers_written && !self.samplers.is_empty() {
            let list: Vec<Sampler<'_>> = self
                .samplers
                .iter()
                .map(|(kind, s)| Sampler {
                    kind: *kind,
                    spelling: s,
                })
                .collect();
            self.w.write_list(
                &schema::SamplersHeader {
                    call_graph: schema::CallGraph::FramePointers,
                    frequency: 1000,
                    count: list.len() as u32,
                },
                &list,
            )?;
            self.samplers_written = true;
        }
        if self.stacks_written < self.stacks.len() {
            let new = &self.stacks[self.stacks_written..];
            self.w.write_list(
                &schema::StacksHeader {
                    first_id: self.stacks_written as u32,
                    count: new.len() as u32,
                },
                new,
            )?;
            self.stacks_written = self.stacks.len();
        }
        Ok(())
    }

    fn flush_thread(&mut self, tid: u32) -> io::Result<()> {
        self.write_tables()?;
        let Some(t) = self.threads.get_mut(&tid) else {
            return Ok(());
        };
        if t.events.is_empty() {
            return Ok(());
        }
        let events = std::mem::take(&mut t.events);
        let seq = t.seq;
        t.seq += 1;
        let mut p = Vec::new();
        encode_events(tid, seq, &events, &mut p);
        self.events += events.len() as u64;
        self.w.chunk(ChunkKind::Events, &p)
    }

    /// Writes everything left, the calibration and the End chunk; returns the output.
    pub fn finish(mut self) -> io::Result<W> {
        let first = self.first_ticks.unwrap_or(0);
        self.w.write(&ClockSample {
            ticks: first,
            monotonic_ns: first,
            realtime_ns: first,
        })?;
        let tids: Vec<u32> = self.threads.keys().copied().collect();
        for tid in tids {
            self.flush_thread(tid)?;
        }
        self.write_tables()?;
        let last = self.last_ticks.max(first + 1);
        self.w.write(&ClockSample {
            ticks: last,
            monotonic_ns: last,
            realtime_ns: last,
        })?;
        let end = schema::End {
            reason: schema::EndReason::Exit,
            signal: 0,
            events: self.events,
            lost: self.lost,
            chunks: self.w.next_seq(),
            dropped_chunks: 0,
            dropped_events: 0,
            exit_code: Some(0),
            unwind_errors: 0,
            write_errno: 0,
            markers: 0,
            usage: None,
        };
        self.w.write(&end)?;
        self.w.flush()?;
        Ok(self.w.into_inner())
    }
}
