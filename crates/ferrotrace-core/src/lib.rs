//! The `no_std`, allocation-free heart of ferrotrace.
//!
//! This crate provides what every other part of ferrotrace agrees on:
//!
//! * [`record`]: the fixed 16-byte record that the traced thread's hot path writes into its chunk, and the
//!   [`record::EventKind`]s it can carry;
//! * [`format`](mod@format): the trace file, byte by byte: file header, typed, numbered and checksummed chunks,
//!   chunk kinds (documented for users in `docs/format.md`);
//! * [`schema`]: every chunk's payload, with its one encoder and its one decoder;
//! * [`codec`]: LEB128 varints, length-prefixed fields, and the delta encoding that turns 16-byte in-memory
//!   records into 2–4 bytes on disk;
//! * [`clock`]: conversion of raw TSC ticks to nanoseconds from calibration pairs (and, with feature
//!   `std`, the CLOCK_MONOTONIC and CLOCK_REALTIME readings the runtime and the profiler both take);
//! * [`symbols`]: which symbols belong to the tracer itself (never traced, never listed), and (feature
//!   `std`) `display_name`, the one rule for the name users see and `-F`/`-N` match;
//! * [`arch`]: assembly text that the runtime's and the embedded recorder's hooks share (the clock read,
//!   the vector registers' save area, where an mcount hook finds the return address);
//! * [`argspec`]: function arguments and return values (`record -A`, `-R`): uftrace's spelling, and
//!   the bytes one call's values take in an event;
//! * [`build_id`]: the GNU build-id among an object's ELF notes;
//! * `entry_patch` (feature `entry-patch`): which functions of uninstrumented x86-64 code can have
//!   their entry replaced by a jump, and why the others cannot (the runtime's and `list --dynamic`'s);
//! * [`mcount`]: finding mcount/`__fentry__` calls and patchable NOPs in machine code;
//! * [`xray`]: decoding of the XRay instrumentation map and the symbol lookup for its functions;
//! * [`shadow`]: the shadow frame every return hook keeps (the runtime's mcount hooks, the embedded
//!   recorder's), with the offsets its assembly uses;
//! * [`units`]: the one grammar of sizes (`16M`), durations (`1.5ms`, `1h`) and frequencies (`4kHz`)
//!   that every option and environment variable is written in;
//! * [`size`]: buffer and chunk sizes and their limits;
//! * [`shared`]: the chunk pool shared with `ferrotrace record`, which recovers what a killed process had
//!   not written;
//! * [`env`](mod@env): the environment protocol between `ferrotrace record`/`live` and the runtime (every
//!   `FERROTRACE_*` variable, and the symbol of a program that links its own runtime);
//! * [`writer`]: whole-chunk framing, handed to a closure without an allocator ([`writer::ChunkWriter`],
//!   what a `no_std` recorder writes with) and, with feature `std`, over `std::io::Write`
//!   (`TraceWriter`, shared by the runtime and the profiler), and the Events encoding of in-memory
//!   records (`encode_events`);
//! * `builder` (feature `std`): a whole trace from events in hand, for tests and converters;
//! * `vdso` (feature `std`): the vDSO's mapping name and this process's image of it;
//! * `output` (feature `std`): creating trace files safely (new, private, never through a link, never
//!   over a file that is not a trace);
//! * `pattern` (feature `pattern`): the `-F`/`-N` name filters, plain names compared as text, other
//!   regexes through regex-lite.
//!
//! Who should use it: the in-process runtime (`ferrotrace`), the analysis tools (`ferrotrace-analysis`),
//! and anyone writing a backend that must run where there is no allocator or operating system (a kernel,
//! firmware): everything here works on caller-provided buffers.
//!
//! Who should not: programs that want to *trace themselves* should depend on the `ferrotrace` crate, and
//! programs that want to *read traces* on `ferrotrace-analysis`, which has a streaming reader on top of
//! this codec. Without feature `std` nothing here opens files, reads clocks or makes system calls;
//! `std` adds the few parts that do (`output` creates trace files, `clock::{monotonic_ns, realtime_ns}`
//! read the clocks, `size::physical_memory` asks `sysinfo`, `vdso` reads this process's vDSO).
//!
//! ```
//! use ferrotrace_core::codec::{EventDecoder, EventEncoder, SliceSink};
//! use ferrotrace_core::record::{EventKind, Record};
//!
//! let records = [Record::new(1000, EventKind::Entry, 7), Record::new(1060, EventKind::Exit, 7)];
//! let mut buf = [0u8; 64];
//! let mut sink = SliceSink::new(&mut buf);
//! let mut enc = EventEncoder::new(1000);
//! for r in &records {
//!     enc.encode(r.tsc, r.kind().unwrap(), r.id(), &[], &[0; 2], &mut sink).unwrap();
//! }
//! let len = sink.len();
//! assert!(len <= 8, "two events fit in {len} bytes");
//! let decoded: Vec<_> = EventDecoder::new(&buf[..len], 1000).map(|e| e.unwrap()).collect();
//! assert_eq!(decoded[1].tsc, 1060);
//! assert_eq!(decoded[1].kind, EventKind::Exit);
//! ```
#![cfg_attr(not(feature = "std"), no_std)]
#![warn(missing_docs)]

pub mod arch;
pub mod argspec;
pub mod build_id;
#[cfg(feature = "std")]
pub mod builder;
pub mod clock;
pub mod codec;
#[cfg(feature = "entry-patch")]
pub mod entry_patch;
pub mod env;
pub mod format;
pub mod grouped;
#[cfg(feature = "std")]
pub mod jit;
#[cfg(feature = "std")]
pub mod machine;
pub mod mcount;
#[cfg(feature = "std")]
pub mod output;
#[cfg(feature = "pattern")]
pub mod pattern;
pub mod record;
#[cfg(feature = "std")]
pub mod running;
pub mod schema;
pub mod shadow;
pub mod shared;
pub mod size;
pub mod symbols;
pub mod tracepoint;
#[cfg(feature = "std")]
pub mod trigger;
pub mod units;
#[cfg(feature = "std")]
pub mod vdso;
pub mod writer;
pub mod xray;
