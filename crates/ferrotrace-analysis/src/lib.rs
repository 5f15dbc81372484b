//! Reading ferrotrace traces: a streaming reader and the analyses built on it.
//!
//! [`reader::Trace`] opens a trace file, checks every chunk (length and CRC) in one pass that keeps only
//! metadata and an index of event chunks, and stops cleanly at a truncated or corrupt chunk, saying how
//! much it read. Events are then streamed per thread ([`reader::Trace::thread_events`]) or merged across
//! threads in time order ([`reader::Trace::events`]), with timestamps in nanoseconds and function names
//! demangled. Memory is bounded by the number of threads, functions and chunks, never by the number of
//! events.
//!
//! The analyses, one module per command, all streaming (memory bounded by call depth, distinct
//! functions or call paths, and threads): [`replay`] (call tree in time order), [`report`]
//! (per-function statistics, `--diff`), [`graph`] (aggregated call graph), [`flame`] (SVG flame
//! graph, folded stacks) and [`dump`] (uftrace data directory, Chrome JSON, Perfetto protobuf,
//! folded stacks). They share [`callstack`] (stack reconstruction: unwound frames, functions running
//! before tracing began, frames open at the end), [`cct`] (calling-context tree), [`names`],
//! [`symbolize`] (addresses to names: DWARF with inlined frames, separate debug files, symbol tables),
//! [`srcline`] (file:line from DWARF) and [`progress`]. [`samples`] gives every command its view of
//! Sample events (timer samples, probe hits, time off the CPU): report, folded stacks, flame graphs,
//! Firefox Profiler and Perfetto output, replay and graph. [`salvage`] appends to the trace of a killed
//! process what it recorded and never wrote (for `ferrotrace record`).
//!
//! Who should use it: the `ferrotrace` command-line tool, and programs that want to analyse traces
//! themselves. Who should not: code inside the traced process (that is the `ferrotrace` runtime).
//!
//! ```no_run
//! use ferrotrace_analysis::reader::Trace;
//!
//! let trace = Trace::open("ferrotrace.data")?;
//! for event in trace.events()? {
//!     let e = event?;
//!     println!("{} {} {:?} {}", e.ts_ns, e.tid, e.kind, trace.function_name(e.id));
//! }
//! # Ok::<(), ferrotrace_analysis::reader::ReadError>(())
//! ```
#![warn(missing_docs)]

pub mod binary;
pub mod callstack;
pub mod cct;
pub mod dump;
pub mod firefox_libs;
pub mod flame;
pub mod graph;
pub mod info;
pub mod mem;
pub mod names;
pub mod progress;
pub mod reader;
pub mod replay;
pub mod report;
pub mod salvage;
pub mod samples;
pub mod srcline;
pub mod stacks;
pub mod symbolize;
pub mod tracepoints;
