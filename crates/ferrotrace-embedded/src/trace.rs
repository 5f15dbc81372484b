//! Serialization of what the slots hold into the standard trace file (docs/format.md), through
//! `ferrotrace_core`'s schema encoders and chunk framing, in the scratch area: no allocation.

use core::sync::atomic::Ordering;

use ferrotrace_core::codec::{EventEncoder, SliceSink, MAX_EVENT_LEN};
use ferrotrace_core::format::ChunkKind;
use ferrotrace_core::record::EventKind;
use ferrotrace_core::schema::{
    self, ClockSample, Count, End, EndReason, EventsHeader, Function, Mode, Module, Payload,
    Session, Thread,
};
use ferrotrace_core::writer::ChunkWriter;

use crate::slot;

/// A function the embedder can name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Symbol<'a> {
    /// Its runtime address.
    pub address: u64,
    /// Its size in bytes (0: up to the next symbol).
    pub size: u64,
    /// Its name as in the binary (mangled names are demangled by the tools).
    pub name: &'a str,
}

/// What the embedder knows about the traced program, all optional.
#[derive(Clone, Copy, Debug, Default)]
pub struct Program<'a> {
    /// Path of its ELF file on the host that will read the trace (the tools name functions from it
    /// when the trace has no names); empty when unknown (then `--symbols BINARY`).
    pub path: &'a str,
    /// Load bias: runtime address − link-time (ELF) address; 0 for an image run where it was linked.
    pub bias: u64,
    /// Bytes of its code (0 if unknown).
    pub size: u64,
    /// Its GNU build-id (empty if unknown): the tools refuse a file with another one.
    pub build_id: &'a [u8],
    /// Named functions, sorted by address: the trace then carries a Functions chunk, and each event
    /// names the symbol that contains its address.
    pub symbols: &'a [Symbol<'a>],
    /// Process id (0 if none).
    pub pid: u32,
    /// Command line, arguments separated by NUL bytes.
    pub cmdline: &'a [u8],
    /// Wall-clock time when tracing was set up, ns since the Unix epoch (0 if unknown).
    pub start_realtime_ns: u64,
    /// Exact `(ticks, CLOCK_MONOTONIC ns)` pairs at the start and the end, when the embedder has a
    /// monotonic clock beside the TSC (the hosted front end); otherwise times come from the frequency.
    pub clock_pairs: Option<[(u64, u64); 2]>,
}

/// Why [`crate::Tracer::write_trace`] failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteError<E> {
    /// Tracing is on: disable it first.
    Enabled,
    /// Another write is under way.
    Busy,
    /// The output closure failed.
    Output(E),
    /// A chunk describing the program (its Session or Module: the path, the command line) does not
    /// fit the scratch area; a trace without it could not be read.
    TooLarge(ChunkKind),
}

impl<E: core::fmt::Display> core::fmt::Display for WriteError<E> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            WriteError::Enabled => {
                f.write_str("tracing is on: disable it before writing the trace")
            }
            WriteError::Busy => f.write_str("the trace is being written already"),
            WriteError::Output(e) => write!(f, "writing the trace: {e}"),
            WriteError::TooLarge(kind) => write!(
                f,
                "the {kind:?} chunk does not fit the {}-byte scratch area (a path or command line that long?)",
                crate::SCRATCH_LEN
            ),
        }
    }
}

/// The clock at set-up and now, and its rate.
pub(crate) struct Clocks {
    pub hz: u64,
    pub start: u64,
    pub end: u64,
}

/// The function id of an address: its link-time address's low 32 bits (docs/format.md).
fn id_of(address: u64, bias: u64) -> u32 {
    address.wrapping_sub(bias) as u32
}

/// The id an event gets: that of the embedder's symbol containing `address`, else the address's own.
fn event_id(address: u64, program: &Program<'_>) -> u32 {
    let syms = program.symbols;
    let i = syms.partition_point(|s| s.address <= address);
    if let Some(s) = i.checked_sub(1).map(|i| &syms[i]) {
        let next = syms.get(i).map_or(u64::MAX, |n| n.address);
        if (s.size == 0 && address < next) || address - s.address < s.size {
            return id_of(s.address, program.bias);
        }
    }
    id_of(address, program.bias)
}

/// Writes `payload` as one chunk, encoded in `scratch`.
fn put<'a, E, P: Payload<'a>>(
    w: &mut ChunkWriter,
    out: &mut impl FnMut(&[u8]) -> Result<(), E>,
    scratch: &mut [u8],
    payload: &P,
) -> Result<(), WriteError<E>> {
    let mut sink = SliceSink::new(scratch);
    // The encoders fail only on a full sink: a Session or Module longer than the scratch area (a path
    // of 16 KiB). Never written half-encoded, nor left out.
    if payload.encode(&mut sink).is_err() {
        return Err(WriteError::TooLarge(P::KIND));
    }
    let n = sink.len();
    w.chunk(out, P::KIND, &[&scratch[..n]])
        .map_err(WriteError::Output)
}

/// Nanoseconds of the event clock: `ticks` at `hz` (u128: a TSC at GHz rates overflows u64 × 10⁹).
fn ticks_ns(ticks: u64, hz: u64) -> u64 {
    (ticks as u128 * 1_000_000_000 / hz.max(1) as u128) as u64
}

pub(crate) fn write<E>(
    program: &Program<'_>,
    clocks: Clocks,
    wrap: bool,
    scratch: &mut [u8],
    out: &mut impl FnMut(&[u8]) -> Result<(), E>,
) -> Result<(), WriteError<E>> {
    let slots = crate::HOT.count.load(Ordering::Relaxed) as usize;
    let mut sources = schema::source::EMBEDDED;
    for i in 0..slots {
        if let Some(h) = crate::slot_header(i) {
            sources |= h.sources.load(Ordering::Relaxed);
        }
    }
    let (start_pair, end_pair) = match program.clock_pairs {
        Some([a, b]) => (a, b),
        None => (
            (clocks.start, ticks_ns(clocks.start, clocks.hz)),
            (clocks.end, ticks_ns(clocks.end, clocks.hz)),
        ),
    };
    let realtime = |mono: u64| {
        if program.start_realtime_ns == 0 {
            0
        } else {
            program.start_realtime_ns + mono.saturating_sub(start_pair.1)
        }
    };
    let hz = match program.clock_pairs {
        Some([a, b]) if b.1 > a.1 => {
            ((b.0 - a.0) as u128 * 1_000_000_000 / (b.1 - a.1) as u128) as u64
        }
        _ => clocks.hz,
    };

    let mut w = ChunkWriter::new(out).map_err(WriteError::Output)?;
    put(
        &mut w,
        out,
        scratch,
        &Session {
            pid: program.pid,
            ppid: 0,
            exe: program.path,
            cmdline: program.cmdline,
            start_realtime_ns: program.start_realtime_ns,
            version: env!("CARGO_PKG_VERSION"),
            mode: if wrap { Mode::Flight } else { Mode::Drop },
            tick_hz: hz,
            sources,
            alloc_sample: 0,
            min_call_ns: 0,
            // No operating system to name the machine.
            host: "",
            boot_id: "",
        },
    )?;
    put(
        &mut w,
        out,
        scratch,
        &ClockSample {
            ticks: start_pair.0,
            monotonic_ns: start_pair.1,
            realtime_ns: realtime(start_pair.1),
        },
    )?;
    put(
        &mut w,
        out,
        scratch,
        &Module {
            id: 1,
            bias: program.bias,
            size: program.size,
            path: program.path,
            build_id: program.build_id,
        },
    )?;
    write_functions(&mut w, out, scratch, program)?;

    let mut events = 0u64;
    let mut lost = 0u64;
    let mut dropped = 0u64;
    for i in 0..slots {
        let Some(h) = crate::slot_header(i) else {
            continue;
        };
        let written = h.written();
        let slot_lost = h.lost.load(Ordering::Relaxed);
        if written == 0 && slot_lost == 0 {
            continue;
        }
        let tid = h.tid.load(Ordering::Relaxed) as u32;
        let mut name_buf = [0u8; slot::NAME_LEN];
        let name = h.name(&mut name_buf);
        let thread = Thread {
            tid,
            name,
            pid: 0,
            registered_ticks: 0,
        };
        put(&mut w, out, scratch, &thread)?;
        let kept = written.min(h.capacity());
        dropped += written - kept;
        lost += slot_lost;
        events += written - kept + write_events(&mut w, out, scratch, program, h, tid)?;
    }

    put(
        &mut w,
        out,
        scratch,
        &ClockSample {
            ticks: end_pair.0,
            monotonic_ns: end_pair.1,
            realtime_ns: realtime(end_pair.1),
        },
    )?;
    let chunks = w.next_seq();
    put(
        &mut w,
        out,
        scratch,
        &End {
            reason: EndReason::Exit,
            signal: 0,
            events,
            lost,
            chunks,
            dropped_chunks: 0,
            dropped_events: dropped,
            exit_code: None,
            unwind_errors: 0,
            write_errno: 0,
            markers: 0,
            usage: None,
        },
    )
}

/// The Functions chunks of `program.symbols`, as many as the scratch area needs.
fn write_functions<E>(
    w: &mut ChunkWriter,
    out: &mut impl FnMut(&[u8]) -> Result<(), E>,
    scratch: &mut [u8],
    program: &Program<'_>,
) -> Result<(), WriteError<E>> {
    let mut rest = program.symbols;
    while !rest.is_empty() {
        let (mut len, mut n, mut taken) = (0, 0u64, 0);
        for s in rest {
            let f = Function {
                id: id_of(s.address, program.bias),
                module: 1,
                address: s.address,
                size: s.size,
                name: s.name,
            };
            let mut sink = SliceSink::new(&mut scratch[len..]);
            if f.encode(&mut sink).is_ok() {
                len += sink.len();
                n += 1;
            } else if n > 0 {
                break;
            }
            // (A name longer than the whole scratch area is left out: the host can still name it.)
            taken += 1;
        }
        if n > 0 {
            let mut head = [0u8; 10];
            let mut sink = SliceSink::new(&mut head);
            let _ = Count(n).encode(&mut sink);
            let head_len = sink.len();
            w.chunk(
                out,
                ChunkKind::Functions,
                &[&head[..head_len], &scratch[..len]],
            )
            .map_err(WriteError::Output)?;
        }
        rest = &rest[taken..];
    }
    Ok(())
}

/// A slot's Events chunks; returns the events written (a Lost marker included).
fn write_events<E>(
    w: &mut ChunkWriter,
    out: &mut impl FnMut(&[u8]) -> Result<(), E>,
    scratch: &mut [u8],
    program: &Program<'_>,
    h: &slot::Header,
    tid: u32,
) -> Result<u64, WriteError<E>> {
    let mut chunk = Chunk {
        tid,
        seq: 0,
        base: 0,
        count: 0,
        len: 0,
        enc: EventEncoder::new(0),
    };
    let mut total = 0u64;
    let mut last_ticks = 0;
    for run in h.records() {
        for r in run {
            let kind = if r.is_exit() {
                EventKind::Exit
            } else {
                EventKind::Entry
            };
            chunk.push(
                w,
                out,
                scratch,
                r.ticks,
                kind,
                event_id(r.address(), program),
            )?;
            last_ticks = r.ticks;
            total += 1;
        }
    }
    // What a full slot lost, where recording stopped: one Lost event (ids are 32 bits: more if needed).
    for lost in ferrotrace_core::record::Record::lost(last_ticks, h.lost.load(Ordering::Relaxed)) {
        chunk.push(w, out, scratch, last_ticks, EventKind::Lost, lost.id())?;
        total += 1;
    }
    chunk.flush(w, out, scratch)?;
    Ok(total)
}

/// The Events chunk being filled in the scratch area.
struct Chunk {
    tid: u32,
    seq: u32,
    base: u64,
    count: u64,
    len: usize,
    enc: EventEncoder,
}

impl Chunk {
    fn push<E>(
        &mut self,
        w: &mut ChunkWriter,
        out: &mut impl FnMut(&[u8]) -> Result<(), E>,
        scratch: &mut [u8],
        ticks: u64,
        kind: EventKind,
        id: u32,
    ) -> Result<(), WriteError<E>> {
        if self.len + MAX_EVENT_LEN > scratch.len() {
            self.flush(w, out, scratch)?;
        }
        if self.count == 0 {
            self.base = ticks;
            self.enc = EventEncoder::new(ticks);
        }
        let mut sink = SliceSink::new(&mut scratch[self.len..]);
        // Cannot fail: MAX_EVENT_LEN bytes are free, and these kinds carry nothing more.
        let _ = self.enc.encode(ticks, kind, id, &[], &[0; 2], &mut sink);
        self.len += sink.len();
        self.count += 1;
        Ok(())
    }

    fn flush<E>(
        &mut self,
        w: &mut ChunkWriter,
        out: &mut impl FnMut(&[u8]) -> Result<(), E>,
        scratch: &mut [u8],
    ) -> Result<(), WriteError<E>> {
        if self.count == 0 {
            return Ok(());
        }
        let mut head = [0u8; 40];
        let mut sink = SliceSink::new(&mut head);
        let _ = EventsHeader {
            tid: self.tid,
            seq: self.seq,
            base_ticks: self.base,
            count: self.count,
        }
        .encode(&mut sink);
        let n = sink.len();
        w.chunk(out, ChunkKind::Events, &[&head[..n], &scratch[..self.len]])
            .map_err(WriteError::Output)?;
        self.seq += 1;
        self.count = 0;
        self.len = 0;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_are_named_by_the_symbol_that_holds_them() {
        let syms = [
            Symbol {
                address: 0x1000,
                size: 0x40,
                name: "a",
            },
            Symbol {
                address: 0x1100,
                size: 0,
                name: "b",
            },
        ];
        let p = Program {
            bias: 0x1000,
            symbols: &syms,
            ..Program::default()
        };
        assert_eq!(event_id(0x100d, &p), 0);
        assert_eq!(event_id(0x1050, &p), 0x50, "past a's size: its own address");
        assert_eq!(event_id(0x1234, &p), 0x100, "b has no size: up to the end");
        assert_eq!(event_id(0xff0, &p), (0xff0u64.wrapping_sub(0x1000)) as u32);
        let kernel = 0xffff_ffff_8100_1234u64;
        assert_eq!(id_of(kernel, 0), 0x8100_1234);
    }
}
