//! The analyses of ferrotrace traces, built on the one streaming reader (`ferrotrace-reader`,
//! re-exported here as [`reader`], [`symbolize`], [`srcline`], [`binary`], [`names`],
//! [`tracepoints`] and [`progress`], so that a command names one crate).
//!
//! The analyses, one module per command, each holding that command's view of every kind of event
//! (function calls, samples, allocations) side by side, all streaming (memory bounded by call depth,
//! distinct functions or call paths, and threads): [`info`], [`replay`] (call tree in time order),
//! [`report`] (per-function statistics, `--diff`, the bytes columns of allocations), [`graph`]
//! (aggregated call graph), [`flame`] (SVG flame graph, folded stacks, memory flame graphs, the label
//! shortener), [`mem`] (allocations: the analysis, and its rendering) and [`dump`] (uftrace data
//! directory, Chrome JSON, Perfetto protobuf, folded stacks, Firefox Profiler: one
//! [`dump::Exporter`] per format, registered in [`dump::FORMATS`]); [`sections`] says which sections
//! a trace gets. They share [`reader`] (model, index and integrity checks, streaming), [`dataset`] (Parquet datasets read back), [`samples`]
//! (the loader of Sample events: timer samples, probe hits, time off the CPU), [`callstack`] (stack
//! reconstruction: unwound frames, functions running before tracing began, frames open at the end),
//! [`cct`] (calling-context tree), [`names`], [`symbolize`] (addresses to names: DWARF with inlined
//! frames, separate debug files, symbol tables), [`srcline`] (file:line from DWARF) and [`progress`].
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

pub use ferrotrace_reader::{
    binary, names, params, progress, reader, srcline, symbolize, tracepoints,
};

pub mod callstack;
pub mod cct;
pub mod dataset;
mod decimal;
pub mod dump;
pub mod flame;
pub mod graph;
pub mod info;
pub mod mem;
pub mod replay;
pub mod report;
pub mod samples;
pub mod sections;
pub mod stacks;
