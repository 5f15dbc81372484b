//! Every chunk's payload, with its one encoder and its one decoder.
//!
//! Each type here is the content of one chunk kind (or of one entry of a chunk that lists several):
//! [`Payload::encode`] writes it to any [`Sink`] and [`Payload::decode`] reads it back, borrowing strings
//! from the payload, so both sides work without an allocator. Writers (the runtime's collector, the
//! profiler, a `no_std` recorder, test builders) and the reader all go through these: a field is added
//! in one place. Fields marked *trailing* were added after the chunk's first layout; a decoder reads them
//! when the payload has bytes left and uses the stated default otherwise, so older writers stay readable.
//!
//! ```
//! use ferrotrace_core::codec::{FieldReader, SliceSink};
//! use ferrotrace_core::schema::{Payload, Thread};
//!
//! let mut buf = [0u8; 32];
//! let mut sink = SliceSink::new(&mut buf);
//! Thread { tid: 42, name: "worker", pid: 7, registered_ticks: 0 }.encode(&mut sink).unwrap();
//! let len = sink.len();
//! let back = Thread::decode(&mut FieldReader::new(&buf[..len])).unwrap();
//! assert_eq!((back.tid, back.name, back.pid), (42, "worker", 7));
//! ```

use crate::codec::{put_bytes, put_str, put_varint, DecodeError, FieldReader, Full, Sink};
use crate::format::ChunkKind;

/// A chunk payload (or one entry of a list chunk) with its encoding.
pub trait Payload<'a>: Sized {
    /// The chunk kind this payload is written as.
    const KIND: ChunkKind;
    /// Appends the encoded fields to `sink`.
    fn encode<S: Sink + ?Sized>(&self, sink: &mut S) -> Result<(), Full>;
    /// Reads the fields from `f`.
    fn decode(f: &mut FieldReader<'a>) -> Result<Self, DecodeError>;
}

/// Reads a trailing varint, or `default` when the payload ended before it.
fn trailing(f: &mut FieldReader<'_>, default: u64) -> Result<u64, DecodeError> {
    if f.remaining() == 0 {
        Ok(default)
    } else {
        f.varint()
    }
}

/// How the runtime behaves when trace memory runs out, as recorded in the Session chunk.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mode {
    /// A traced thread waits for a free chunk; nothing is lost; the wait is recorded.
    Lossless = 0,
    /// A traced thread never waits; events that find no chunk are counted as lost where they happened
    /// (also: a profiler whose kernel ring overflowed).
    Drop = 1,
    /// Only the newest events are kept (a ring of encoded chunks written at exit or on request).
    Flight = 2,
}

impl Mode {
    /// The mode with this number.
    pub const fn from_u64(v: u64) -> Option<Mode> {
        Some(match v {
            0 => Mode::Lossless,
            1 => Mode::Drop,
            2 => Mode::Flight,
            _ => return None,
        })
    }

    /// The mode `--mode` calls `name`.
    pub fn from_name(name: &str) -> Option<Mode> {
        [Mode::Lossless, Mode::Drop, Mode::Flight]
            .into_iter()
            .find(|m| m.name() == name)
    }

    /// The mode's name, as `--mode` spells it.
    pub const fn name(self) -> &'static str {
        match self {
            Mode::Lossless => "lossless",
            Mode::Drop => "drop",
            Mode::Flight => "flight",
        }
    }
}

/// Bits of [`Session::sources`]: what recorded the events of this trace.
pub mod source {
    /// Function entries and exits from patched XRay sleds.
    pub const XRAY: u64 = 1;
    /// Function entries and exits from calls to `mcount` (`-Zinstrument-mcount`, `gcc -pg`).
    pub const MCOUNT: u64 = 2;
    /// Function entries and exits from calls to `__fentry__` (`gcc -pg -mfentry`).
    pub const FENTRY: u64 = 4;
    /// Function entries and exits from patched NOPs (`-mnop-mcount`, `-fpatchable-function-entry`).
    pub const PATCHABLE_NOP: u64 = 8;
    /// Static tracepoints (`ferrotrace::tracepoint!`).
    pub const TRACEPOINTS: u64 = 16;
    /// Samples: timer, probes, off-CPU (a Samplers chunk says which).
    pub const SAMPLES: u64 = 32;
    /// Allocations and frees.
    pub const ALLOCATIONS: u64 = 64;
    /// A recorder without an operating system (`no_std`), given its clock and threads by its embedder.
    pub const EMBEDDED: u64 = 128;
    /// With [`SAMPLES`]: the stacks were unwound and the samples counted in the kernel by eBPF
    /// programs (`profile --bpf`); the samples of one stack read together share a timestamp: that
    /// of the read, every [`BPF_DRAIN_MS`] milliseconds.
    pub const BPF: u64 = 256;
    /// How often the eBPF recorder reads (and clears) the in-kernel counts: the resolution of the
    /// timestamps of a [`BPF`] trace's samples. The recorder's period, which `info` repeats.
    pub const BPF_DRAIN_MS: u64 = 250;
    /// `tracing` spans and events (`ferrotrace-tracing`): the program links the layer (format 2.2, bit 512).
    pub const TRACING: u64 = 512;
    /// Function entries and exits from entries of uninstrumented functions patched at run time with a
    /// jump to a trampoline (bit 1024).
    pub const DYNAMIC: u64 = 1024;

    /// Every way to build a program whose functions ferrotrace can trace, for messages.
    pub const HOW_TO_BUILD: &str = "build Rust with RUSTFLAGS='-Zinstrument-xray=always -Cforce-frame-pointers=yes' \
        or RUSTFLAGS='-Zinstrument-mcount -Cforce-frame-pointers=yes' (nightly; `cargo ferrotrace build [--mcount]`), \
        C/C++ with clang -fxray-instrument, gcc -pg or clang -pg, gcc -pg -mfentry, or gcc -pg -mnop-mcount \
        -mrecord-mcount -fno-pie -no-pie (gcc refuses -mnop-mcount in its default position-independent code)";

    /// The names of the bits set in `sources`, in bit order.
    pub fn names(sources: u64) -> impl Iterator<Item = &'static str> {
        const NAMES: [&str; 11] = [
            "xray",
            "mcount",
            "fentry",
            "patchable-nop",
            "tracepoints",
            "samples",
            "allocations",
            "embedded",
            "bpf",
            "tracing",
            "dynamic",
        ];
        NAMES
            .into_iter()
            .enumerate()
            .filter(move |(i, _)| sources & (1 << i) != 0)
            .map(|(_, n)| n)
    }
}

/// The head of a chunk that is a plain list (Functions, Tracepoints): `v count`, then the entries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Count(pub u64);

impl<'a> Payload<'a> for Count {
    /// As a head only; the chunk's kind is its entries'.
    const KIND: ChunkKind = ChunkKind::Functions;

    fn encode<S: Sink + ?Sized>(&self, s: &mut S) -> Result<(), Full> {
        put_varint(s, self.0)
    }

    fn decode(f: &mut FieldReader<'a>) -> Result<Self, DecodeError> {
        Ok(Count(f.varint()?))
    }
}

/// Process metadata: the first chunk of every trace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Session<'a> {
    /// Process id.
    pub pid: u32,
    /// Parent process id.
    pub ppid: u32,
    /// Executable path.
    pub exe: &'a str,
    /// Command line, arguments separated by NUL bytes.
    pub cmdline: &'a [u8],
    /// Wall-clock time at the start, ns since the Unix epoch.
    pub start_realtime_ns: u64,
    /// Version of the ferrotrace that wrote the trace.
    pub version: &'a str,
    /// What happens when buffers run out.
    pub mode: Mode,
    /// Ticks per second of the event clock, an estimate (the Clock chunks are exact); 0 if unknown.
    pub tick_hz: u64,
    /// What recorded the events: bits of [`source`].
    pub sources: u64,
    /// *Trailing*: allocation events are sampled, one per this many bytes on average (Poisson sampling
    /// of the allocated bytes); 0 (the default): every allocation is recorded.
    pub alloc_sample: u64,
    /// *Trailing* (after `alloc_sample`, written only when not 0 or when `host` follows): `record
    /// -t`, calls shorter than this many nanoseconds were left out when recording; 0 (the default):
    /// none was.
    pub min_call_ns: u64,
    /// *Trailing* (after `min_call_ns`, written with `boot_id` when either is not empty): the host
    /// the trace was recorded on ([`crate::machine`]); empty (the default): not said.
    pub host: &'a str,
    /// *Trailing*, after `host`: the kernel's boot id at the recording; empty: not said.
    pub boot_id: &'a str,
}

impl<'a> Payload<'a> for Session<'a> {
    const KIND: ChunkKind = ChunkKind::Session;

    fn encode<S: Sink + ?Sized>(&self, s: &mut S) -> Result<(), Full> {
        put_varint(s, self.pid as u64)?;
        put_varint(s, self.ppid as u64)?;
        put_str(s, self.exe)?;
        put_bytes(s, self.cmdline)?;
        put_varint(s, self.start_realtime_ns)?;
        put_str(s, self.version)?;
        put_varint(s, self.mode as u64)?;
        put_varint(s, self.tick_hz)?;
        put_varint(s, self.sources)?;
        put_varint(s, self.alloc_sample)?;
        let machine = !self.host.is_empty() || !self.boot_id.is_empty();
        if self.min_call_ns != 0 || machine {
            put_varint(s, self.min_call_ns)?;
        }
        if machine {
            put_str(s, self.host)?;
            put_str(s, self.boot_id)?;
        }
        Ok(())
    }

    fn decode(f: &mut FieldReader<'a>) -> Result<Self, DecodeError> {
        Ok(Session {
            pid: f.varint_u32()?,
            ppid: f.varint_u32()?,
            exe: f.str()?,
            cmdline: f.bytes()?,
            start_realtime_ns: f.varint()?,
            version: f.str()?,
            mode: Mode::from_u64(f.varint()?).ok_or(DecodeError::BadValue)?,
            tick_hz: f.varint()?,
            sources: f.varint()?,
            alloc_sample: trailing(f, 0)?,
            min_call_ns: trailing(f, 0)?,
            host: if f.remaining() > 0 { f.str()? } else { "" },
            boot_id: if f.remaining() > 0 { f.str()? } else { "" },
        })
    }
}

/// A clock calibration: an event-clock reading and the system clocks read right next to it. Readers
/// convert event timestamps to CLOCK_MONOTONIC by interpolating between the first and the last of these
/// (see [`crate::clock::TscConverter`]); a writer whose events are stamped in nanoseconds already writes
/// `ticks == monotonic_ns`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct ClockSample {
    /// The event clock (TSC ticks, or whatever unit the events use).
    pub ticks: u64,
    /// CLOCK_MONOTONIC, ns.
    pub monotonic_ns: u64,
    /// CLOCK_REALTIME, ns since the Unix epoch.
    pub realtime_ns: u64,
}

impl<'a> Payload<'a> for ClockSample {
    const KIND: ChunkKind = ChunkKind::Clock;

    fn encode<S: Sink + ?Sized>(&self, s: &mut S) -> Result<(), Full> {
        put_varint(s, self.ticks)?;
        put_varint(s, self.monotonic_ns)?;
        put_varint(s, self.realtime_ns)
    }

    fn decode(f: &mut FieldReader<'a>) -> Result<Self, DecodeError> {
        Ok(ClockSample {
            ticks: f.varint()?,
            monotonic_ns: f.varint()?,
            realtime_ns: f.varint()?,
        })
    }
}

/// A loaded object (executable, shared library, the kernel): where its code is, so that addresses can
/// be named.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Module<'a> {
    /// Id that functions and stack nodes refer to; ids start at 1 (0 means "no module").
    pub id: u32,
    /// Load bias: runtime address − ELF virtual address (0 for stack addresses, which are stored
    /// relative to their module already).
    pub bias: u64,
    /// Span of its mapped code, bytes (0 if unknown).
    pub size: u64,
    /// File path, or `[kernel.kallsyms]`.
    pub path: &'a str,
    /// GNU build-id, raw bytes (empty if none).
    pub build_id: &'a [u8],
}

impl<'a> Payload<'a> for Module<'a> {
    const KIND: ChunkKind = ChunkKind::Module;

    fn encode<S: Sink + ?Sized>(&self, s: &mut S) -> Result<(), Full> {
        put_varint(s, self.id as u64)?;
        put_varint(s, self.bias)?;
        put_varint(s, self.size)?;
        put_str(s, self.path)?;
        put_bytes(s, self.build_id)
    }

    fn decode(f: &mut FieldReader<'a>) -> Result<Self, DecodeError> {
        Ok(Module {
            id: f.varint_u32()?,
            bias: f.varint()?,
            size: f.varint()?,
            path: f.str()?,
            build_id: f.bytes()?,
        })
    }
}

/// One traced function of the embedded symbol table. A Functions chunk is `v count` and that many.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Function<'a> {
    /// Id as recorded in function events (1-based).
    pub id: u32,
    /// Module id.
    pub module: u32,
    /// Runtime address of its first instruction.
    pub address: u64,
    /// Symbol size in bytes (0 if unknown).
    pub size: u64,
    /// Symbol name as in the binary (mangled).
    pub name: &'a str,
}

impl<'a> Payload<'a> for Function<'a> {
    const KIND: ChunkKind = ChunkKind::Functions;

    fn encode<S: Sink + ?Sized>(&self, s: &mut S) -> Result<(), Full> {
        put_varint(s, self.id as u64)?;
        put_varint(s, self.module as u64)?;
        put_varint(s, self.address)?;
        put_varint(s, self.size)?;
        put_str(s, self.name)
    }

    fn decode(f: &mut FieldReader<'a>) -> Result<Self, DecodeError> {
        Ok(Function {
            id: f.varint_u32()?,
            module: f.varint_u32()?,
            address: f.varint()?,
            size: f.varint()?,
            name: f.str()?,
        })
    }
}

/// A thread, and the name it had when this chunk was written (the last one of a tid wins).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Thread<'a> {
    /// OS thread id.
    pub tid: u32,
    /// Its name.
    pub name: &'a str,
    /// *Trailing*: its process, when a trace holds several (a profile of a program and its children);
    /// 0 (the default) means the Session's.
    pub pid: u32,
    /// *Trailing*: the clock (ticks) when the runtime had registered the thread and given it its
    /// first chunk: its first function entry is timed from no earlier, so that the tracer's set-up is
    /// charged to no function. 0 (the default): not said (later Thread chunks of the thread, other
    /// writers).
    pub registered_ticks: u64,
}

impl<'a> Payload<'a> for Thread<'a> {
    const KIND: ChunkKind = ChunkKind::Thread;

    fn encode<S: Sink + ?Sized>(&self, s: &mut S) -> Result<(), Full> {
        put_varint(s, self.tid as u64)?;
        put_str(s, self.name)?;
        put_varint(s, self.pid as u64)?;
        if self.registered_ticks != 0 {
            put_varint(s, self.registered_ticks)?;
        }
        Ok(())
    }

    fn decode(f: &mut FieldReader<'a>) -> Result<Self, DecodeError> {
        Ok(Thread {
            tid: f.varint_u32()?,
            name: f.str()?,
            pid: u32::try_from(trailing(f, 0)?).map_err(|_| DecodeError::BadValue)?,
            registered_ticks: trailing(f, 0)?,
        })
    }
}

/// The chunk number of a chunk that carries only a Lost count of a thread that never got another
/// buffer to record it in.
pub const LOST_ONLY_SEQ: u32 = u32::MAX;

/// The head of an Events chunk: the events follow it (see [`crate::codec::EventDecoder`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EventsHeader {
    /// The thread.
    pub tid: u32,
    /// The thread's chunk number: 0, 1, 2, ... in the order it filled them ([`LOST_ONLY_SEQ`]: a Lost
    /// count only).
    pub seq: u32,
    /// The time the first event's delta is taken against.
    pub base_ticks: u64,
    /// Events that follow.
    pub count: u64,
}

impl<'a> Payload<'a> for EventsHeader {
    const KIND: ChunkKind = ChunkKind::Events;

    fn encode<S: Sink + ?Sized>(&self, s: &mut S) -> Result<(), Full> {
        put_varint(s, self.tid as u64)?;
        put_varint(s, self.seq as u64)?;
        put_varint(s, self.base_ticks)?;
        put_varint(s, self.count)
    }

    fn decode(f: &mut FieldReader<'a>) -> Result<Self, DecodeError> {
        Ok(EventsHeader {
            tid: f.varint_u32()?,
            seq: f.varint_u32()?,
            base_ticks: f.varint()?,
            count: f.varint()?,
        })
    }
}

/// Why a trace ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EndReason {
    /// The program exited (or the recording was finished on request).
    Exit = 0,
    /// The program was ended by a signal.
    Signal = 1,
    /// The recording stopped while the program went on (`ferrotrace profile -p PID` at the end of
    /// `--duration` or on Ctrl-C).
    Stopped = 2,
}

/// The last chunk of a complete trace: what the writer wrote, so a reader can tell a complete trace from
/// one that lost chunks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct End {
    /// Why it ended.
    pub reason: EndReason,
    /// The signal, with [`EndReason::Signal`].
    pub signal: u32,
    /// Events the writer received (in flight mode, more than the file keeps: see `dropped_chunks`).
    pub events: u64,
    /// Events lost (no buffer in drop mode; samples the kernel dropped).
    pub lost: u64,
    /// Chunks before this one: the End chunk's own `seq`.
    pub chunks: u32,
    /// Events chunks a flight ring dropped to keep the newest (their events are in `events`).
    pub dropped_chunks: u64,
    /// Events in the chunks that were dropped.
    pub dropped_events: u64,
    /// The program's exit code, when the writer saw it.
    pub exit_code: Option<i32>,
    /// Stacks whose unwinding stopped early (samples, allocations).
    pub unwind_errors: u64,
    /// The OS error (errno) that stopped the writer, 0 for none: after it the recorder dropped what
    /// it recorded, counted in `lost`, and this chunk is its final attempt at the file (trailing,
    /// default 0).
    pub write_errno: u32,
    /// *Trailing* (after `write_errno`): of `events`, the recorder's markers (Lost and Wait events:
    /// not the program's); 0 when not said (older writers).
    pub markers: u64,
    /// *Trailing* (after `markers`): what the program used, as the kernel counted it for the
    /// launcher that waited for it (`wait4`); `None` (the default) when not known (attached
    /// recordings, other writers).
    pub usage: Option<Usage>,
}

/// A program's resource usage (`struct rusage` of the process and its waited-for children), in the
/// End chunk when the launcher saw it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    /// CPU time in user mode, microseconds.
    pub user_us: u64,
    /// CPU time in the kernel, microseconds.
    pub system_us: u64,
    /// Voluntary context switches.
    pub voluntary_switches: u64,
    /// Involuntary context switches.
    pub involuntary_switches: u64,
    /// Largest resident set, KiB.
    pub max_rss_kib: u64,
    /// Page faults that read from disk.
    pub major_faults: u64,
    /// Page faults served from memory.
    pub minor_faults: u64,
    /// Blocks read from file systems.
    pub blocks_in: u64,
    /// Blocks written to file systems.
    pub blocks_out: u64,
}

impl Usage {
    fn fields(&self) -> [u64; 9] {
        [
            self.user_us,
            self.system_us,
            self.voluntary_switches,
            self.involuntary_switches,
            self.max_rss_kib,
            self.major_faults,
            self.minor_faults,
            self.blocks_in,
            self.blocks_out,
        ]
    }

    fn from_fields(v: [u64; 9]) -> Usage {
        let [user_us, system_us, voluntary_switches, involuntary_switches, max_rss_kib, major_faults, minor_faults, blocks_in, blocks_out] =
            v;
        Usage {
            user_us,
            system_us,
            voluntary_switches,
            involuntary_switches,
            max_rss_kib,
            major_faults,
            minor_faults,
            blocks_in,
            blocks_out,
        }
    }
}

impl<'a> Payload<'a> for End {
    const KIND: ChunkKind = ChunkKind::End;

    fn encode<S: Sink + ?Sized>(&self, s: &mut S) -> Result<(), Full> {
        put_varint(s, self.reason as u64)?;
        put_varint(s, self.signal as u64)?;
        put_varint(s, self.events)?;
        put_varint(s, self.lost)?;
        put_varint(s, self.chunks as u64)?;
        put_varint(s, self.dropped_chunks)?;
        put_varint(s, self.dropped_events)?;
        put_varint(s, self.exit_code.map_or(0, |c| c as u32 as u64 + 1))?;
        put_varint(s, self.unwind_errors)?;
        if self.write_errno != 0 || self.markers != 0 || self.usage.is_some() {
            put_varint(s, self.write_errno as u64)?;
        }
        if self.markers != 0 || self.usage.is_some() {
            put_varint(s, self.markers)?;
        }
        if let Some(u) = &self.usage {
            for v in u.fields() {
                put_varint(s, v)?;
            }
        }
        Ok(())
    }

    fn decode(f: &mut FieldReader<'a>) -> Result<Self, DecodeError> {
        let reason = match f.varint()? {
            0 => EndReason::Exit,
            1 => EndReason::Signal,
            2 => EndReason::Stopped,
            _ => return Err(DecodeError::BadValue),
        };
        Ok(End {
            reason,
            signal: f.varint_u32()?,
            events: f.varint()?,
            lost: f.varint()?,
            chunks: f.varint_u32()?,
            dropped_chunks: f.varint()?,
            dropped_events: f.varint()?,
            exit_code: match f.varint()? {
                0 => None,
                c => Some(u32::try_from(c - 1).map_err(|_| DecodeError::BadValue)? as i32),
            },
            unwind_errors: f.varint()?,
            write_errno: u32::try_from(trailing(f, 0)?).map_err(|_| DecodeError::BadValue)?,
            markers: trailing(f, 0)?,
            usage: match f.remaining() {
                0 => None,
                _ => {
                    let mut v = [0u64; 9];
                    for x in &mut v {
                        *x = f.varint()?;
                    }
                    Some(Usage::from_fields(v))
                }
            },
        })
    }
}

/// How a process without an End chunk died, and what `ferrotrace record` recovered of the events it had
/// not written (see [`crate::shared`]): the last chunk of a salvaged trace, after the recovered Events
/// chunks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Salvage {
    /// The signal that killed the process, 0 if it exited (without finishing its trace).
    pub signal: u32,
    /// Its exit code, when it exited. `None` with signal 0: how it ended is not known (`record -p`
    /// is not the process's parent, which collected its status first).
    pub exit_code: Option<i32>,
    /// Events chunks recovered from the shared chunk pool (appended before this chunk).
    pub chunks: u64,
    /// Events in them.
    pub events: u64,
}

impl<'a> Payload<'a> for Salvage {
    const KIND: ChunkKind = ChunkKind::Salvage;

    fn encode<S: Sink + ?Sized>(&self, s: &mut S) -> Result<(), Full> {
        put_varint(s, self.signal as u64)?;
        put_varint(s, self.exit_code.map_or(0, |c| c as u32 as u64 + 1))?;
        put_varint(s, self.chunks)?;
        put_varint(s, self.events)
    }

    fn decode(f: &mut FieldReader<'a>) -> Result<Self, DecodeError> {
        Ok(Salvage {
            signal: f.varint_u32()?,
            exit_code: match f.varint()? {
                0 => None,
                c => Some(u32::try_from(c - 1).map_err(|_| DecodeError::BadValue)? as i32),
            },
            chunks: f.varint()?,
            events: f.varint()?,
        })
    }
}

/// A tracepoint descriptor. A Tracepoints chunk is `v count` and that many.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TracepointDesc<'a> {
    /// Id in the tag of Tracepoint events (1-based).
    pub id: u32,
    /// `crate::name`.
    pub name: &'a str,
    /// Arguments, `name:type,name:type` (see [`crate::tracepoint::arg_specs`]).
    pub args: &'a str,
    /// Display format, empty when none.
    pub format: &'a str,
    /// Source file of the declaration.
    pub file: &'a str,
    /// Its line.
    pub line: u32,
}

impl<'a> Payload<'a> for TracepointDesc<'a> {
    const KIND: ChunkKind = ChunkKind::Tracepoints;

    fn encode<S: Sink + ?Sized>(&self, s: &mut S) -> Result<(), Full> {
        put_varint(s, self.id as u64)?;
        put_str(s, self.name)?;
        put_str(s, self.args)?;
        put_str(s, self.format)?;
        put_str(s, self.file)?;
        put_varint(s, self.line as u64)
    }

    fn decode(f: &mut FieldReader<'a>) -> Result<Self, DecodeError> {
        Ok(TracepointDesc {
            id: f.varint_u32()?,
            name: f.str()?,
            args: f.str()?,
            format: f.str()?,
            file: f.str()?,
            line: f.varint_u32()?,
        })
    }
}

/// How the stacks of samples were taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum CallGraph {
    /// No stacks.
    None = 0,
    /// Frame pointers, walked by the kernel.
    #[default]
    FramePointers = 1,
    /// DWARF CFI, unwound from a copy of the user stack while recording.
    Dwarf = 2,
}

/// What a sampler samples on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SamplerKind {
    /// A timer (cpu-clock): weight = nanoseconds of CPU time the sample stands for.
    CpuClock = 0,
    /// A uprobe hit: weight = 1.
    Uprobe = 1,
    /// A kernel tracepoint hit: weight = 1.
    Tracepoint = 2,
    /// Time off the CPU, ending at a context switch back in: weight = nanoseconds off the CPU.
    OffCpu = 3,
}

impl SamplerKind {
    /// The kind with this number.
    pub const fn from_u64(v: u64) -> Option<SamplerKind> {
        Some(match v {
            0 => SamplerKind::CpuClock,
            1 => SamplerKind::Uprobe,
            2 => SamplerKind::Tracepoint,
            3 => SamplerKind::OffCpu,
            _ => return None,
        })
    }

    /// True when the weight of its samples is nanoseconds (else: a count of hits).
    pub const fn weighs_time(self) -> bool {
        matches!(self, SamplerKind::CpuClock | SamplerKind::OffCpu)
    }
}

/// The head of a Samplers chunk: `v call_graph, v frequency, v count`, then `count` [`Sampler`]s, whose
/// position is the `sampler` field of Sample events.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SamplersHeader {
    /// How stacks were taken.
    pub call_graph: CallGraph,
    /// Timer frequency in Hz (0 if no timer).
    pub frequency: u32,
    /// Samplers that follow.
    pub count: u32,
}

impl<'a> Payload<'a> for SamplersHeader {
    const KIND: ChunkKind = ChunkKind::Samplers;

    fn encode<S: Sink + ?Sized>(&self, s: &mut S) -> Result<(), Full> {
        put_varint(s, self.call_graph as u64)?;
        put_varint(s, self.frequency as u64)?;
        put_varint(s, self.count as u64)
    }

    fn decode(f: &mut FieldReader<'a>) -> Result<Self, DecodeError> {
        Ok(SamplersHeader {
            call_graph: match f.varint()? {
                0 => CallGraph::None,
                1 => CallGraph::FramePointers,
                2 => CallGraph::Dwarf,
                _ => return Err(DecodeError::BadValue),
            },
            frequency: f.varint_u32()?,
            count: f.varint_u32()?,
        })
    }
}

/// One sampler.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sampler<'a> {
    /// What it samples on.
    pub kind: SamplerKind,
    /// How the user spelled it: `cpu-clock`, `uprobe:/lib/x86_64-linux-gnu/libc.so.6:malloc`,
    /// `sched:sched_switch`, `off-cpu`.
    pub spelling: &'a str,
}

impl<'a> Payload<'a> for Sampler<'a> {
    const KIND: ChunkKind = ChunkKind::Samplers;

    fn encode<S: Sink + ?Sized>(&self, s: &mut S) -> Result<(), Full> {
        put_varint(s, self.kind as u64)?;
        put_str(s, self.spelling)
    }

    fn decode(f: &mut FieldReader<'a>) -> Result<Self, DecodeError> {
        Ok(Sampler {
            kind: SamplerKind::from_u64(f.varint()?).ok_or(DecodeError::BadValue)?,
            spelling: f.str()?,
        })
    }
}

/// *Trailing* in a Samplers chunk, after its samplers: what the sampler lost, when its samples were
/// merged into a function trace (`record --sample`), whose End chunk counts the runtime's losses
/// alone. A profile's own traces leave it out: their End chunk counts the sampler's.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SamplerLosses {
    /// Samples the kernel dropped (its ring buffers were full).
    pub lost: u64,
    /// Samples whose stacks stopped early.
    pub unwind_errors: u64,
}

impl<'a> Payload<'a> for SamplerLosses {
    const KIND: ChunkKind = ChunkKind::Samplers;

    fn encode<S: Sink + ?Sized>(&self, s: &mut S) -> Result<(), Full> {
        put_varint(s, self.lost)?;
        put_varint(s, self.unwind_errors)
    }

    fn decode(f: &mut FieldReader<'a>) -> Result<Self, DecodeError> {
        Ok(SamplerLosses {
            lost: f.varint()?,
            unwind_errors: f.varint()?,
        })
    }
}

/// Why the in-kernel unwinder (`profile --bpf`) stopped stacks early: the reasons of an
/// [`UnwindStops`] chunk, each a bit of the unwinder's flags (`ferrotrace_bpf::trunc` re-exports
/// them; the BPF program's `TRUNC_*` defines equal them, checked by `ferrotrace-bpf`'s
/// `tests/defines.rs`), and the sentence that names it.
pub mod unwind_stop {
    /// The process's mappings were not loaded yet.
    pub const NO_PROCESS: u32 = 1 << 0;
    /// An address in no known executable mapping (JIT code, a library mapped moments ago).
    pub const NO_MAPPING: u32 = 1 << 1;
    /// The stack could not be read.
    pub const READ: u32 = 1 << 2;
    /// Deeper than the unwinder's frame limit.
    pub const DEPTH: u32 = 1 << 3;
    /// A CFI rule the unwinder does not follow (signal frames, DWARF expressions).
    pub const UNSUPPORTED: u32 = 1 << 4;
    /// A frame-pointer chain that does not go up the stack.
    pub const BAD_FP: u32 = 1 << 5;
    /// The unwinder's flags that say it stopped early.
    pub const ANY: u32 = 0xff;
    /// The reasons in the order of [`super::UnwindStops::samples`]: a flag, and what it says. The
    /// last, flag 0, is a stack the kernel's stack map had no room for (only its leaf is known).
    pub const REASONS: [(u32, &str); 7] = [
        (NO_PROCESS, "before the process's mappings were loaded"),
        (
            NO_MAPPING,
            "in code of no known mapping (JIT, or mapped moments before)",
        ),
        (READ, "stack unreadable"),
        (DEPTH, "deeper than the frame limit"),
        (
            UNSUPPORTED,
            "an unwind rule not followed (signal frame, expression)",
        ),
        (BAD_FP, "a broken frame-pointer chain"),
        (0, "the stack map was full"),
    ];
}

/// An UnwindStops chunk (`profile --bpf`, before End): per reason of [`unwind_stop::REASONS`], the
/// samples whose stacks the in-kernel unwinder stopped early for it (a stack stopped for two reasons
/// counts under both). `v count`, then `count` counts; a reader takes the reasons it knows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UnwindStops {
    /// Samples per reason, in the order of [`unwind_stop::REASONS`].
    pub samples: [u64; 7],
}

impl UnwindStops {
    /// Counts `samples` stopped with the unwinder's `flags`.
    pub fn add(&mut self, flags: u32, samples: u64) {
        for (n, (bit, _)) in self.samples.iter_mut().zip(unwind_stop::REASONS) {
            let stopped_for_it = match bit {
                0 => flags & unwind_stop::ANY == 0,
                _ => flags & bit != 0,
            };
            if stopped_for_it {
                *n += samples;
            }
        }
    }

    /// The reasons with samples, most samples first: "N reason, M reason".
    pub fn reasons(&self) -> impl Iterator<Item = (u64, &'static str)> {
        let mut v: [(u64, &'static str); 7] = [(0, ""); 7];
        for (slot, (n, (_, why))) in v
            .iter_mut()
            .zip(self.samples.iter().zip(unwind_stop::REASONS))
        {
            *slot = (*n, why);
        }
        // Stable: equal counts keep the table's order.
        let mut i = 1;
        while i < v.len() {
            let mut j = i;
            while j > 0 && v[j - 1].0 < v[j].0 {
                v.swap(j - 1, j);
                j -= 1;
            }
            i += 1;
        }
        v.into_iter().filter(|r| r.0 > 0)
    }
}

impl<'a> Payload<'a> for UnwindStops {
    const KIND: ChunkKind = ChunkKind::UnwindStops;

    fn encode<S: Sink + ?Sized>(&self, s: &mut S) -> Result<(), Full> {
        put_varint(s, self.samples.len() as u64)?;
        for n in self.samples {
            put_varint(s, n)?;
        }
        Ok(())
    }

    fn decode(f: &mut FieldReader<'a>) -> Result<Self, DecodeError> {
        let count = f.varint()?;
        let mut stops = UnwindStops::default();
        for i in 0..count {
            let n = f.varint()?;
            // A later writer's reasons this reader does not know are left out.
            if let Some(slot) = stops.samples.get_mut(i as usize) {
                *slot = n;
            }
        }
        Ok(stops)
    }
}

/// The head of a Stacks chunk: `v first_id, v count`, then `count` [`StackNode`]s with ids
/// `first_id, first_id + 1, ...`. Ids are dense from 0 across all Stacks chunks of a trace; a node's
/// parent always has a smaller id, so a reader that meets a node knows its whole stack.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StacksHeader {
    /// Id of the first node that follows.
    pub first_id: u32,
    /// Nodes that follow.
    pub count: u32,
}

impl<'a> Payload<'a> for StacksHeader {
    const KIND: ChunkKind = ChunkKind::Stacks;

    fn encode<S: Sink + ?Sized>(&self, s: &mut S) -> Result<(), Full> {
        put_varint(s, self.first_id as u64)?;
        put_varint(s, self.count as u64)
    }

    fn decode(f: &mut FieldReader<'a>) -> Result<Self, DecodeError> {
        Ok(StacksHeader {
            first_id: f.varint_u32()?,
            count: f.varint_u32()?,
        })
    }
}

/// One frame of an interned stack: an address, called from the stack `parent`. A sample's or an
/// allocation's stack is its node and the chain of parents, innermost first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct StackNode {
    /// The caller's node, `None` for an outermost frame.
    pub parent: Option<u32>,
    /// Module the address is in (0: unknown, the address is absolute).
    pub module: u32,
    /// The address, relative to its module (an ELF virtual address, comparable with its symbol
    /// table). The innermost node holds the sampled instruction; the others hold return addresses.
    pub address: u64,
}

impl<'a> Payload<'a> for StackNode {
    const KIND: ChunkKind = ChunkKind::Stacks;

    fn encode<S: Sink + ?Sized>(&self, s: &mut S) -> Result<(), Full> {
        put_varint(s, self.parent.map_or(0, |p| p as u64 + 1))?;
        put_varint(s, self.module as u64)?;
        put_varint(s, self.address)
    }

    fn decode(f: &mut FieldReader<'a>) -> Result<Self, DecodeError> {
        Ok(StackNode {
            parent: match f.varint_u32()? {
                0 => None,
                p => Some(p - 1),
            },
            module: f.varint_u32()?,
            address: f.varint()?,
        })
    }
}

/// Function ids as [`RunningAtStart`] holds them: a slice to write, or encoded varints read back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FunctionIds<'a> {
    /// Ids to encode.
    Slice(&'a [u32]),
    /// `count` varints as read from a payload.
    Encoded {
        /// How many.
        count: u32,
        /// Their bytes.
        bytes: &'a [u8],
    },
}

impl FunctionIds<'_> {
    /// The ids, in order (an encoded list that turns out malformed ends early).
    pub fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        let (slice, count, bytes): (&[u32], u32, &[u8]) = match *self {
            FunctionIds::Slice(s) => (s, 0, &[]),
            FunctionIds::Encoded { count, bytes } => (&[], count, bytes),
        };
        let mut f = FieldReader::new(bytes);
        slice
            .iter()
            .copied()
            .chain((0..count).map_while(move |_| f.varint_u32().ok()))
    }
}

/// One thread's functions already running when its tracing began (their exits come without entries),
/// outermost first. A RunningAtStart chunk is `v count` and that many; threads without such functions
/// are left out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RunningAtStart<'a> {
    /// The thread.
    pub tid: u32,
    /// Function ids, outermost first.
    pub functions: FunctionIds<'a>,
}

impl<'a> Payload<'a> for RunningAtStart<'a> {
    const KIND: ChunkKind = ChunkKind::RunningAtStart;

    fn encode<S: Sink + ?Sized>(&self, s: &mut S) -> Result<(), Full> {
        put_varint(s, self.tid as u64)?;
        put_varint(s, self.functions.iter().count() as u64)?;
        for id in self.functions.iter() {
            put_varint(s, id as u64)?;
        }
        Ok(())
    }

    fn decode(f: &mut FieldReader<'a>) -> Result<Self, DecodeError> {
        let tid = f.varint_u32()?;
        let count = f.varint_u32()?;
        let start = f.clone();
        for _ in 0..count {
            f.varint_u32()?;
        }
        let used = start.remaining() - f.remaining();
        Ok(RunningAtStart {
            tid,
            functions: FunctionIds::Encoded {
                count,
                bytes: &start.rest()[..used],
            },
        })
    }
}

/// What a [`Callsite`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CallsiteKind {
    /// A span: entered and exited like a function (Entry and Exit events with its `function_id`); its
    /// fields, when it is created and when they are recorded later, are Tracepoint events with its
    /// `tracepoint_id`.
    Span = 0,
    /// An event: a Tracepoint event with its `tracepoint_id`.
    Event = 1,
}

/// What a `tracing` callsite is, as the program registers it: the runtime's
/// `ferrotrace::callsites::Description` (what `ferrotrace-tracing` hands it) and, with the ids it
/// was given, a [`Callsite`] entry of the trace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CallsiteDescription<'a> {
    /// Span or event.
    pub kind: CallsiteKind,
    /// The name: a span's name (what it is shown and selected by, as a function by its name); for an
    /// event, `target::name`, or the target alone when the name is `tracing`'s default (`event
    /// FILE:LINE`). `record -F`/`-N` select spans by it, `--trace` events.
    pub name: &'a str,
    /// `tracing`'s target (by default the module path).
    pub target: &'a str,
    /// 0 TRACE, 1 DEBUG, 2 INFO, 3 WARN, 4 ERROR.
    pub level: u8,
    /// The field names, separated by commas: a tagged value's index is its name's place here.
    pub fields: &'a str,
    /// Source file, empty if unknown.
    pub file: &'a str,
    /// Source line, 0 if unknown.
    pub line: u32,
}

/// One callsite of the `tracing` crate (a span or an event, registered once while the program runs).
/// A Callsites chunk is `v count` and that many; `tracing` events and span fields are Tracepoint events
/// whose argument list is the callsite's field names, each of type `value` (tagged values,
/// [`crate::tracepoint`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Callsite<'a> {
    /// A span's function id (its Entry and Exit events); 0 for an event.
    pub function_id: u32,
    /// The tracepoint id of the Tracepoint events that carry the fields (an event's, or a span's at
    /// its creation and later `record`s); in the same id space as the Tracepoints chunk's ids.
    pub tracepoint_id: u32,
    /// What it is, as registered.
    pub site: CallsiteDescription<'a>,
}

/// The names of [`CallsiteDescription::level`], by value.
pub const LEVELS: [&str; 5] = ["TRACE", "DEBUG", "INFO", "WARN", "ERROR"];

impl<'a> Payload<'a> for Callsite<'a> {
    const KIND: ChunkKind = ChunkKind::Callsites;

    fn encode<S: Sink + ?Sized>(&self, s: &mut S) -> Result<(), Full> {
        let site = &self.site;
        put_varint(s, site.kind as u64)?;
        put_varint(s, self.function_id as u64)?;
        put_varint(s, self.tracepoint_id as u64)?;
        put_str(s, site.name)?;
        put_str(s, site.target)?;
        put_varint(s, site.level as u64)?;
        put_str(s, site.fields)?;
        put_str(s, site.file)?;
        put_varint(s, site.line as u64)
    }

    fn decode(f: &mut FieldReader<'a>) -> Result<Self, DecodeError> {
        let kind = match f.varint()? {
            0 => CallsiteKind::Span,
            1 => CallsiteKind::Event,
            _ => return Err(DecodeError::BadValue),
        };
        let function_id = f.varint_u32()?;
        let tracepoint_id = f.varint_u32()?;
        let name = f.str()?;
        let target = f.str()?;
        let level = u8::try_from(f.varint()?)
            .ok()
            .filter(|&l| (l as usize) < LEVELS.len())
            .ok_or(DecodeError::BadValue)?;
        Ok(Callsite {
            function_id,
            tracepoint_id,
            site: CallsiteDescription {
                kind,
                name,
                target,
                level,
                fields: f.str()?,
                file: f.str()?,
                line: f.varint_u32()?,
            },
        })
    }
}

/// The message of a `tracing` event callsite when it is a literal (`info!("done")`, whose text is the
/// same at every event): recorded once here, by the callsite's `tracepoint_id`, and left out of its
/// Tracepoint events. A CallsiteMessages chunk is `v count` and that many. Readers read an event of
/// that callsite whose tagged values hold none for field `field` as if its values began with it, a
/// string: what the event would have held ([`crate::tracepoint::values_with_message`]). An event
/// that holds a value for it (another text) shows its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CallsiteMessage<'a> {
    /// The callsite's, as in its [`Callsite`] entry.
    pub tracepoint_id: u32,
    /// The message's place in the callsite's `fields`, from 0.
    pub field: u32,
    /// The text, at most 256 bytes (cut at a character boundary, as a recorded string is).
    pub text: &'a str,
}

impl<'a> Payload<'a> for CallsiteMessage<'a> {
    const KIND: ChunkKind = ChunkKind::CallsiteMessages;

    fn encode<S: Sink + ?Sized>(&self, s: &mut S) -> Result<(), Full> {
        put_varint(s, self.tracepoint_id as u64)?;
        put_varint(s, self.field as u64)?;
        put_str(s, self.text)
    }

    fn decode(f: &mut FieldReader<'a>) -> Result<Self, DecodeError> {
        Ok(CallsiteMessage {
            tracepoint_id: f.varint_u32()?,
            field: f.varint_u32()?,
            text: f.str()?,
        })
    }
}

/// One function's entry in an ArgSpecs chunk (format 2.8, `v count` then the entries): what its
/// entries (`args`) and exits (`retval`) carry, in [`crate::argspec`]'s canonical spelling
/// (`arg1/s,arg2`, `retval/x`; empty: nothing). An entry that carries values is an Entry event of
/// kind [`crate::codec::ARGS_KIND`], an exit a [`crate::codec::RETURN_KIND`] (docs/format.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FunctionArgs<'a> {
    /// The function.
    pub function_id: u32,
    /// Its arguments' items.
    pub args: &'a str,
    /// Its return value's item.
    pub retval: &'a str,
}

impl<'a> Payload<'a> for FunctionArgs<'a> {
    const KIND: ChunkKind = ChunkKind::ArgSpecs;

    fn encode<S: Sink + ?Sized>(&self, s: &mut S) -> Result<(), Full> {
        put_varint(s, self.function_id as u64)?;
        put_str(s, self.args)?;
        put_str(s, self.retval)
    }

    fn decode(f: &mut FieldReader<'a>) -> Result<Self, DecodeError> {
        Ok(FunctionArgs {
            function_id: f.varint_u32()?,
            args: f.str()?,
            retval: f.str()?,
        })
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use std::vec::Vec;

    fn round_trip<'a, P: Payload<'a> + PartialEq + core::fmt::Debug>(p: &P, buf: &'a mut Vec<u8>) {
        p.encode(buf).unwrap();
        let mut f = FieldReader::new(buf);
        assert_eq!(&P::decode(&mut f).unwrap(), p);
        assert_eq!(f.remaining(), 0);
    }

    #[test]
    fn every_payload_round_trips() {
        round_trip(
            &FunctionArgs {
                function_id: 9,
                args: "arg1/s,arg2",
                retval: "retval/x",
            },
            &mut Vec::new(),
        );
        round_trip(
            &Callsite {
                function_id: 70_000,
                tracepoint_id: 12,
                site: CallsiteDescription {
                    kind: CallsiteKind::Span,
                    name: "handle",
                    target: "server::conn",
                    level: 2,
                    fields: "peer,id",
                    file: "src/main.rs",
                    line: 40,
                },
            },
            &mut Vec::new(),
        );
        round_trip(
            &CallsiteMessage {
                tracepoint_id: 12,
                field: 0,
                text: "handled é",
            },
            &mut Vec::new(),
        );
        round_trip(
            &Session {
                pid: 1,
                ppid: 2,
                exe: "/bin/x",
                cmdline: b"x\0-v",
                start_realtime_ns: 3,
                version: "0.1",
                mode: Mode::Flight,
                tick_hz: 2_445_000_000,
                sources: source::MCOUNT | source::SAMPLES,
                alloc_sample: 512 << 10,
                min_call_ns: 10_000,
                host: "sim-a",
                boot_id: "6e1f2c0a-4d1b-4c8e-9a52-0d7c3b2f9e11",
            },
            &mut Vec::new(),
        );
        round_trip(
            &ClockSample {
                ticks: 9,
                monotonic_ns: 8,
                realtime_ns: 7,
            },
            &mut Vec::new(),
        );
        round_trip(
            &Module {
                id: 1,
                bias: 0x5555_0000_0000,
                size: 4096,
                path: "/bin/x",
                build_id: &[1, 2, 3],
            },
            &mut Vec::new(),
        );
        round_trip(
            &Function {
                id: 3,
                module: 1,
                address: 0x1000,
                size: 64,
                name: "_RNv",
            },
            &mut Vec::new(),
        );
        round_trip(
            &Thread {
                tid: 5,
                name: "main",
                pid: 0,
                registered_ticks: 0,
            },
            &mut Vec::new(),
        );
        round_trip(
            &Thread {
                tid: 5,
                name: "worker",
                pid: 0,
                registered_ticks: 123_456_789,
            },
            &mut Vec::new(),
        );
        round_trip(
            &EventsHeader {
                tid: 5,
                seq: LOST_ONLY_SEQ,
                base_ticks: 1 << 40,
                count: 4096,
            },
            &mut Vec::new(),
        );
        round_trip(
            &End {
                reason: EndReason::Signal,
                signal: 15,
                events: 100,
                lost: 2,
                chunks: 17,
                dropped_chunks: 3,
                dropped_events: 40,
                exit_code: Some(-1),
                unwind_errors: 1,
                write_errno: 28,
                markers: 0,
                usage: None,
            },
            &mut Vec::new(),
        );
        round_trip(
            &End {
                reason: EndReason::Exit,
                signal: 0,
                events: 100,
                lost: 0,
                chunks: 17,
                dropped_chunks: 0,
                dropped_events: 0,
                exit_code: Some(3),
                unwind_errors: 0,
                write_errno: 0,
                markers: 354,
                usage: Some(Usage {
                    user_us: 1_234_567,
                    system_us: 89,
                    voluntary_switches: 3,
                    involuntary_switches: 4,
                    max_rss_kib: 5_000,
                    major_faults: 1,
                    minor_faults: 700,
                    blocks_in: 8,
                    blocks_out: 16,
                }),
            },
            &mut Vec::new(),
        );
        round_trip(
            &TracepointDesc {
                id: 1,
                name: "app::open",
                args: "path:str",
                format: "{path}",
                file: "src/main.rs",
                line: 10,
            },
            &mut Vec::new(),
        );
        round_trip(
            &SamplersHeader {
                call_graph: CallGraph::Dwarf,
                frequency: 999,
                count: 2,
            },
            &mut Vec::new(),
        );
        round_trip(
            &Sampler {
                kind: SamplerKind::OffCpu,
                spelling: "off-cpu",
            },
            &mut Vec::new(),
        );
        round_trip(
            &StacksHeader {
                first_id: 100,
                count: 2,
            },
            &mut Vec::new(),
        );
        round_trip(
            &StackNode {
                parent: Some(0),
                module: 2,
                address: 0x4321,
            },
            &mut Vec::new(),
        );
    }

    #[test]
    fn running_at_start_round_trips() {
        let mut p = Vec::new();
        RunningAtStart {
            tid: 7,
            functions: FunctionIds::Slice(&[3, 300, 2]),
        }
        .encode(&mut p)
        .unwrap();
        let back = RunningAtStart::decode(&mut FieldReader::new(&p)).unwrap();
        assert_eq!(back.tid, 7);
        assert_eq!(back.functions.iter().collect::<Vec<_>>(), [3, 300, 2]);
    }

    #[test]
    fn a_thread_without_its_trailing_pid_reads_as_the_sessions() {
        let mut p = Vec::new();
        put_varint(&mut p, 9).unwrap();
        put_str(&mut p, "old").unwrap();
        let t = Thread::decode(&mut FieldReader::new(&p)).unwrap();
        assert_eq!((t.tid, t.name, t.pid), (9, "old", 0));
    }

    #[test]
    fn source_names_follow_the_bits() {
        let v: Vec<_> = source::names(source::XRAY | source::ALLOCATIONS).collect();
        assert_eq!(v, ["xray", "allocations"]);
        let v: Vec<_> = source::names(source::SAMPLES | source::BPF).collect();
        assert_eq!(v, ["samples", "bpf"]);
    }
}
