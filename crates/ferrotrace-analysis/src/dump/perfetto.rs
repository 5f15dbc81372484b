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

use std::collections::HashSet;
use std::io::{self, Write};

use super::{stream, walk, Ev, Exporter, Samples, Target};
use crate::names::Names;
use crate::progress::Progress;
use crate::reader::Trace;
use crate::samples::{thread_label, RenderError, SampleSet};

/// Output options.
#[derive(Clone, Copy, Debug)]
pub struct Options {
    /// Batch packets into zlib-compressed `compressed_packets`.
    pub compress: bool,
}

impl Default for Options {
    fn default() -> Options {
        Options { compress: true }
    }
}

/// The sequence-scoped incremental clock the event packets use.
const CLOCK_ID: u64 = 64;
const BOOTTIME: u64 = 6;
const MONOTONIC: u64 = 3;
/// Uncompressed bytes per `compressed_packets` batch (Perfetto wants each under 512 KiB).
const BATCH: usize = 256 << 10;

fn varint(b: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        b.push(v as u8 | 0x80);
        v >>= 7;
    }
    b.push(v as u8);
}

fn key(b: &mut Vec<u8>, field: u32, wire: u8) {
    varint(b, (field as u64) << 3 | wire as u64);
}

fn fv(b: &mut Vec<u8>, field: u32, v: u64) {
    key(b, field, 0);
    varint(b, v);
}

fn fbytes(b: &mut Vec<u8>, field: u32, bytes: &[u8]) {
    key(b, field, 2);
    varint(b, bytes.len() as u64);
    b.extend_from_slice(bytes);
}

fn msg(b: &mut Vec<u8>, field: u32, build: impl FnOnce(&mut Vec<u8>)) {
    let mut inner = Vec::new();
    build(&mut inner);
    fbytes(b, field, &inner);
}

struct Sink<'w> {
    out: &'w mut dyn Write,
    compress: bool,
    batch: Vec<u8>,
    written: u64,
}

impl Sink<'_> {
    /// Appends one TracePacket (its encoded body).
    fn packet(&mut self, body: &[u8]) -> io::Result<()> {
        fbytes(&mut self.batch, 1, body);
        if self.batch.len() >= BATCH {
            self.flush()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> io::Result<()> {
        if self.batch.is_empty() {
            return Ok(());
        }
        if self.compress {
            let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::new(6));
            z.write_all(&self.batch)?;
            let deflated = z.finish()?;
            let mut pkt = Vec::with_capacity(deflated.len() + 8);
            fbytes(&mut pkt, 50, &deflated);
            let mut outer = Vec::with_capacity(pkt.len() + 8);
            fbytes(&mut outer, 1, &pkt);
            self.out.write_all(&outer)?;
            self.written += outer.len() as u64;
        } else {
            self.out.write_all(&self.batch)?;
            self.written += self.batch.len() as u64;
        }
        self.batch.clear();
        Ok(())
    }
}

struct Seq {
    id: u64,
    last_ts: u64,
    interned: HashSet<u32>,
}

/// Writes the trace as Perfetto protobuf; returns the read errors met.
pub fn write(
    trace: &Trace,
    opts: Options,
    out: &mut dyn Write,
    progress: &mut Progress,
) -> io::Result<Vec<String>> {
    let names = Names::of(trace);
    let exe = trace.session.exe_name().to_string();
    let threads: Vec<(u32, String)> = trace
        .threads
        .values()
        .map(|t| (t.tid, t.name.clone()))
        .collect();
    let source = Source {
        pid: trace.session.pid,
        process_name: exe,
        threads,
        t0: trace.start_ns(),
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
pub fn write_events(
    source: &Source<'_>,
    opts: Options,
    out: &mut dyn Write,
    events: impl FnOnce(&mut dyn FnMut(Ev<'_>) -> io::Result<()>) -> io::Result<Vec<String>>,
) -> io::Result<Vec<String>> {
    let pid = source.pid;
    let process_uuid = 1u64 << 48 | pid as u64;
    let thread_uuid = |tid: u32| 2u64 << 48 | tid as u64;
    let mut sink = Sink {
        out,
        compress: opts.compress,
        batch: Vec::with_capacity(BATCH + 4096),
        written: 0,
    };
    let exe = &source.process_name;
    let mut p = Vec::new();
    msg(&mut p, 60, |d| {
        fv(d, 1, process_uuid);
        msg(d, 3, |pd| {
            fv(pd, 1, pid as u64);
            fbytes(pd, 6, exe.as_bytes());
        });
    });
    sink.packet(&p)?;
    // A trace with allocations: the heap's size as a counter track of the process (TrackDescriptor.counter
    // with unit UNIT_SIZE_BYTES; TrackEvent TYPE_COUNTER with counter_value).
    let heap_uuid = 3u64 << 48 | pid as u64;
    let mut heap = source
        .trace
        .filter(|t| t.has_allocations())
        .map(|t| crate::mem::HeapTracker::new(t.session.alloc_sample));
    if heap.is_some() {
        p.clear();
        msg(&mut p, 60, |d| {
            fv(d, 1, heap_uuid);
            fv(d, 5, process_uuid);
            fbytes(d, 2, b"heap bytes");
            msg(d, 8, |c| fv(c, 3, 3));
        });
        sink.packet(&p)?;
    }
    let t0 = source.t0;
    let mut seqs: std::collections::HashMap<u32, Seq> = std::collections::HashMap::new();
    for (i, (tid, thread_name)) in source.threads.iter().enumerate() {
        let seq = i as u64 + 1;
        p.clear();
        msg(&mut p, 60, |d| {
            fv(d, 1, thread_uuid(*tid));
            fv(d, 5, process_uuid);
            msg(d, 4, |td| {
                fv(td, 1, pid as u64);
                fv(td, 2, *tid as u64);
                fbytes(td, 5, thread_name.as_bytes());
            });
        });
        sink.packet(&p)?;
        // Clock snapshot: clock 64 (incremental) starts at t0, where BOOTTIME and MONOTONIC are t0.
        p.clear();
        fv(&mut p, 10, seq);
        fv(&mut p, 13, 1);
        msg(&mut p, 6, |cs| {
            for (id, inc) in [(BOOTTIME, false), (MONOTONIC, false), (CLOCK_ID, true)] {
                msg(cs, 1, |c| {
                    fv(c, 1, id);
                    fv(c, 2, t0);
                    if inc {
                        fv(c, 3, 1);
                    }
                });
            }
            fv(cs, 2, BOOTTIME);
        });
        sink.packet(&p)?;
        p.clear();
        fv(&mut p, 10, seq);
        fv(&mut p, 13, 2);
        msg(&mut p, 59, |d| {
            fv(d, 58, CLOCK_ID);
            msg(d, 11, |te| fv(te, 11, thread_uuid(*tid)));
        });
        sink.packet(&p)?;
        seqs.insert(
            *tid,
            Seq {
                id: seq,
                last_ts: t0,
                interned: HashSet::new(),
            },
        );
    }
    let mut next_seq = seqs.len() as u64 + 1;
    let mut te = Vec::with_capacity(64);
    let errors = events(&mut |ev| {
        let tid = match ev {
            Ev::Begin { tid, .. } | Ev::End { tid, .. } | Ev::Instant { tid, .. } => tid,
        };
        let seq = seqs.entry(tid).or_insert_with(|| {
            next_seq += 1;
            Seq {
                id: next_seq - 1,
                last_ts: t0,
                interned: HashSet::new(),
            }
        });
        let ts = match ev {
            Ev::Begin { ts, .. } | Ev::End { ts, .. } | Ev::Instant { ts, .. } => ts,
        };
        // The incremental clock cannot go backwards: a (rare) earlier timestamp is clamped.
        let delta = ts.saturating_sub(seq.last_ts);
        seq.last_ts += delta;
        p.clear();
        fv(&mut p, 8, delta);
        fv(&mut p, 10, seq.id);
        fv(&mut p, 13, 2);
        te.clear();
        match ev {
            Ev::Begin { id, .. } => {
                let iid = id as u64 + 1;
                if seq.interned.insert(id) {
                    msg(&mut p, 12, |d| {
                        msg(d, 2, |n| {
                            fv(n, 1, iid);
                            fbytes(n, 2, (source.name)(id).as_bytes());
                        })
                    });
                }
                fv(&mut te, 9, 1);
                fv(&mut te, 10, iid);
            }
            Ev::End { .. } => fv(&mut te, 9, 2),
            Ev::Instant {
                kind,
                id,
                payload,
                fields,
                ..
            } => {
                let (name, values) =
                    super::instant(source.trace, source.name, kind, id, payload, &fields);
                for (arg, value) in &values {
                    // TrackEvent.debug_annotations (4): DebugAnnotation with name (10) and a value.
                    msg(&mut te, 4, |a| {
                        fbytes(a, 10, arg.as_bytes());
                        debug_annotation_value(a, value);
                    });
                }
                fv(&mut te, 9, 3);
                fbytes(&mut te, 23, name.as_bytes());
            }
        }
        fbytes(&mut p, 11, &te);
        sink.packet(&p)?;
        // The heap counter moves with each allocation and free, at the same time (delta 0).
        if let (
            Some(heap),
            Ev::Instant {
                tid,
                ts,
                kind,
                id,
                payload,
                fields,
                ..
            },
        ) = (heap.as_mut(), ev)
        {
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
                p.clear();
                fv(&mut p, 8, 0);
                fv(&mut p, 10, seq.id);
                fv(&mut p, 13, 2);
                te.clear();
                fv(&mut te, 9, 4);
                fv(&mut te, 11, heap_uuid);
                fv(&mut te, 30, bytes);
                fbytes(&mut p, 11, &te);
                sink.packet(&p)?;
            }
        }
        Ok(())
    })?;
    sink.flush()?;
    Ok(errors)
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
    write_events(&source, Options { compress }, out, |emit| {
        let mut tids: Vec<u32> = set.samples.iter().map(|s| s.tid).collect();
        tids.sort_unstable();
        tids.dedup();
        for tid in tids {
            let mut open: Vec<u32> = Vec::new();
            let mut last = 0u64;
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
                        })?;
                    }
                    Ok::<(), std::io::Error>(())
                };
            for s in set.samples.iter().filter(|s| s.tid == tid) {
                let frames = frames_of(s.stack);
                if !open.is_empty() && s.time_ns > last + 2 * period {
                    close_to(&mut open, 0, last + period, emit)?;
                }
                let common = open.iter().zip(&frames).take_while(|(a, b)| a == b).count();
                close_to(&mut open, common, s.time_ns, emit)?;
                for &f in &frames[common..] {
                    emit(Ev::Begin {
                        tid,
                        id: f,
                        ts: s.time_ns,
                        depth: open.len(),
                    })?;
                    open.push(f);
                }
                last = s.time_ns;
            }
            close_to(&mut open, 0, last + period, emit)?;
        }
        Ok(Vec::new())
    })
    .map(|_| ())
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

    fn write_functions(
        &self,
        trace: &Trace,
        opts: super::Options,
        target: Target<'_>,
        progress: &mut Progress,
    ) -> io::Result<Vec<String>> {
        let opts = Options {
            compress: opts.compress,
        };
        write(trace, opts, stream(target)?, progress)
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
