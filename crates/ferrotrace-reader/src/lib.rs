//! Reading ferrotrace traces: the one streaming reader every command, exporter and host-side tool
//! uses, and the naming of what a trace holds.
//!
//! [`reader::Trace`] opens a trace file, checks every chunk (length and CRC) in one pass that keeps only
//! metadata and an index of event chunks, and stops cleanly at a truncated or corrupt chunk, saying how
//! much it read. Events are then streamed per thread ([`reader::Trace::thread_events`]) or merged across
//! threads in time order ([`reader::Trace::events`]), with timestamps in nanoseconds and function names
//! demangled. Memory is bounded by the number of threads and functions, never by the size of the
//! trace: each thread keeps at most 256 entries of the chunk index in memory, the older ones in an
//! unnamed temporary file. Beside it: [`symbolize`] (addresses to names: DWARF with inlined frames,
//! separate debug files, symbol tables, kallsyms), [`srcline`] (file:line from DWARF), [`binary`]
//! (what a program's file holds without running it), [`params`] (its functions' parameters from
//! DWARF, for `record --auto-args`), [`names`], [`tracepoints`] (argument decoding) and
//! [`progress`].
//!
//! Who should use it: whatever reads a trace or names an address — the analyses and exporters
//! (`ferrotrace-analysis`), the host side that salvages and summarizes a recording
//! (`ferrotrace-launch`), tests. It depends on no exporter's format library (Parquet, Arrow, inferno,
//! the Firefox profile), so those stay out of the tools that only read. Who should not: code inside
//! the traced process (that is the `ferrotrace` runtime); anything that computes an answer from the
//! events (that is `ferrotrace-analysis`).
//!
//! ```no_run
//! use ferrotrace_reader::reader::Trace;
//!
//! let trace = Trace::open("ferrotrace.data")?;
//! for event in trace.events()? {
//!     let e = event?;
//!     println!("{} {} {:?} {}", e.ts_ns, e.tid, e.kind, trace.function_name(e.id));
//! }
//! # Ok::<(), ferrotrace_reader::reader::ReadError>(())
//! ```
#![warn(missing_docs)]

pub mod binary;
pub mod names;
pub mod params;
pub mod progress;
pub mod reader;
pub mod srcline;
pub mod symbolize;
pub mod tracepoints;
