//! Callsites registered while the program runs: the public face of the runtime for instrumentation
//! libraries whose spans and events are known only when the program reaches them (`tracing`, through
//! the `ferrotrace-tracing` crate, which is what programs should use rather than this).
//!
//! A callsite is registered once ([`register`]) and gets small ids; a span's entering and leaving are
//! then recorded like a function's ([`enter`], [`exit`]: Entry and Exit records, named by the span's
//! name in every analysis), and the fields of an event or a span as one tracepoint record of tagged
//! values, written straight into the chunk ([`fields`]; the encoding is
//! `ferrotrace_core::tracepoint::put_tagged`'s). Each call is a
//! `rdtsc` and a few stores into the calling thread's chunk, the path tracepoints take.
//!
//! Registration answers `None` when nothing records (or the selection leaves the callsite out): a
//! library then stops asking, at no further cost. A recording is either `ferrotrace record`'s (the
//! linked runtime, started by the environment) or one the program starts itself into a file of its
//! own ([`record_to_file`], ended by [`stop_recording`]).
//!
//! On targets without the runtime (see the crate's documentation), nothing records: [`register`]
//! answers `None` and [`record_to_file`] fails.

use std::mem::MaybeUninit;
use std::path::Path;

/// What a callsite is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Entered and left (recorded like a function), with fields when created and recorded later.
    Span,
    /// A point in time with fields and a level (recorded like a tracepoint).
    Event,
}

/// A callsite to register. Its strings are copied into the trace.
#[derive(Clone, Copy, Debug)]
pub struct Description<'a> {
    /// Span or event.
    pub kind: Kind,
    /// A span's name (what it is shown and selected by, as a function by its name); an event's
    /// `target::name`, or its target alone when it has no name of its own. `record -F`/`-N` select
    /// spans by it, `--trace` events.
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

/// The ids a registered callsite records under.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ids {
    /// A span's function id, for [`enter`] and [`exit`]; 0 for an event.
    pub function: u32,
    /// The id [`fields`] records its fields under.
    pub tracepoint: u32,
}

/// Registers a callsite: its ids, or `None` when nothing records this process or the recording's
/// selection leaves it out (`-F`/`-N` for spans, `--trace` for events). Allocates and takes a lock:
/// once per callsite.
pub fn register(d: &Description<'_>) -> Option<Ids> {
    #[cfg(ferrotrace_runtime)]
    return crate::recorders::callsites::register(d);
    #[cfg(not(ferrotrace_runtime))]
    {
        let _ = d;
        None
    }
}

/// What the layer does when a recording starts or stops from outside the program (`record -p`
/// attaching to it, or detaching): `true`, ask every callsite's interest again (they answered
/// `never` while nothing recorded); `false`, forget every callsite's ids (nothing records them any
/// more). Set by the layer when it first registers a callsite; called on the thread that attaches
/// (borrowed by the host) and on the runtime's collector when the host detaches.
pub fn set_recording_hook(hook: fn(bool)) {
    #[cfg(ferrotrace_runtime)]
    crate::recorders::callsites::set_recording_hook(hook);
    #[cfg(not(ferrotrace_runtime))]
    let _ = hook;
}

/// The calling thread enters the span registered with function id `function`.
#[inline(always)]
pub fn enter(function: u32) {
    #[cfg(ferrotrace_runtime)]
    crate::recorders::callsites::enter(function);
    #[cfg(not(ferrotrace_runtime))]
    let _ = function;
}

/// The calling thread leaves the span registered with function id `function`.
#[inline(always)]
pub fn exit(function: u32) {
    #[cfg(ferrotrace_runtime)]
    crate::recorders::callsites::exit(function);
    #[cfg(not(ferrotrace_runtime))]
    let _ = function;
}

/// Records the fields of a registered callsite under its tracepoint id: `write` is given at most `max`
/// bytes of uninitialized memory (a buffer on the stack, copied into the calling thread's chunk after:
/// `write` may run instrumented code, whose records go into that chunk), writes tagged values into it
/// (`ferrotrace_core::tracepoint::put_tagged`) and returns how many bytes it wrote. At most 1024
/// bytes are kept.
#[inline(always)]
pub fn fields(tracepoint: u32, max: usize, write: impl FnOnce(&mut [MaybeUninit<u8>]) -> usize) {
    #[cfg(ferrotrace_runtime)]
    crate::recorders::callsites::fields(tracepoint, max, write);
    #[cfg(not(ferrotrace_runtime))]
    let _ = (tracepoint, max, write);
}

/// Starts recording this process into `output` (a new file, mode 0600; an older trace of that name is
/// kept as `FILE.old`, any other file there is refused), with every event callsite selected, until
/// [`stop_recording`]. Its instrumented functions, if it was built with XRay or mcount, are traced
/// too. Fails with one line saying why: a recording runs already (`ferrotrace record`), the file
/// cannot be made, or this target has no runtime.
pub fn record_to_file(output: &Path) -> Result<(), String> {
    #[cfg(ferrotrace_runtime)]
    return crate::lifecycle::in_program::start_recording(output);
    #[cfg(not(ferrotrace_runtime))]
    {
        let _ = output;
        Err("ferrotrace records only on x86_64 Linux".into())
    }
}

/// Ends the recording [`record_to_file`] started: every thread's events and the End chunk are written
/// when it returns, and the program goes on untraced. Does nothing when nothing records; ends
/// `ferrotrace record`'s recording too when called under it.
pub fn stop_recording() {
    #[cfg(ferrotrace_runtime)]
    crate::lifecycle::in_program::stop();
}
