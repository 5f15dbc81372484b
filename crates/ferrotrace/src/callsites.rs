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

/// What a callsite is (span or event), as the trace's Callsites chunk says it.
pub use ferrotrace_core::schema::CallsiteKind as Kind;

/// A callsite to register (its strings are copied into the trace): the description the trace's
/// Callsites chunk holds, so that the two never drift apart.
pub use ferrotrace_core::schema::CallsiteDescription as Description;

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

/// Whether a recording of this process runs now (`ferrotrace record`, an attach, or
/// [`record_to_file`]): while it does not, [`register`] registers nothing, and the layer tells
/// `tracing` that no level is wanted, so that its callsites cost what a level-filtered callsite costs.
pub fn recording() -> bool {
    #[cfg(ferrotrace_runtime)]
    return crate::recorders::callsites::recording();
    #[cfg(not(ferrotrace_runtime))]
    false
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

/// Registers the literal message of the event callsite registered with tracepoint id `tracepoint`
/// (`info!("done")`: the same text at every event): the text of its field number `field` (its place
/// in the description's `fields`, from 0), written once into the trace, so that [`fields`] need not
/// write it in every event: readers show it in each event of the callsite that holds no value of
/// that field. `false` when nothing records this process (the events then keep it). Allocates and
/// takes a lock: once per callsite and recording.
pub fn message(tracepoint: u32, field: u32, text: &str) -> bool {
    #[cfg(ferrotrace_runtime)]
    return crate::recorders::callsites::message(tracepoint, field, text);
    #[cfg(not(ferrotrace_runtime))]
    {
        let _ = (tracepoint, field, text);
        false
    }
}

/// The timestamp [`enter`], [`exit`] and [`fields`] stamp their record with: the timestamp counter,
/// read by the caller first thing, so that the counter's latency (tens of cycles) overlaps the work
/// that follows (finding the callsite's ids, writing its fields) instead of being waited for at the
/// end, when the record is stored.
#[inline(always)]
pub fn now() -> u64 {
    #[cfg(ferrotrace_runtime)]
    return crate::buffers::clock::rdtsc();
    #[cfg(not(ferrotrace_runtime))]
    0
}

/// The calling thread entered, at `tsc` ([`now`]), the span registered with function id `function`.
#[inline(always)]
pub fn enter(function: u32, tsc: u64) {
    #[cfg(ferrotrace_runtime)]
    crate::recorders::callsites::enter(function, tsc);
    #[cfg(not(ferrotrace_runtime))]
    let _ = (function, tsc);
}

/// The calling thread left, at `tsc` ([`now`]), the span registered with function id `function`.
#[inline(always)]
pub fn exit(function: u32, tsc: u64) {
    #[cfg(ferrotrace_runtime)]
    crate::recorders::callsites::exit(function, tsc);
    #[cfg(not(ferrotrace_runtime))]
    let _ = (function, tsc);
}

/// Records the fields of a registered callsite under its tracepoint id: `write` writes tagged values
/// (`ferrotrace_core::tracepoint::put_tagged`) into the [`FieldsOut`] it is given, at most `max`
/// bytes (at most 1024 are kept), and hands it back. They go straight into the calling thread's
/// chunk; before `write` runs code of the program (a field's `Debug` implementation, which may be
/// instrumented and record into that chunk) it calls [`FieldsOut::leave_chunk`]. The record is
/// stamped `tsc` ([`now`], read before `write`), or, when the fields left the chunk (the program's
/// code ran in `write`, and may have recorded), the time after `write`, so that the event follows
/// those records in time as in the chunk.
///
/// `write` takes the [`FieldsOut`] by value so that a field visitor can hold it in itself rather
/// than behind a reference: each value written is then one load of the write position and one store,
/// not a load of the reference first.
#[inline(always)]
pub fn fields(
    tracepoint: u32,
    tsc: u64,
    max: usize,
    write: impl for<'b> FnOnce(FieldsOut<'b>) -> FieldsOut<'b>,
) {
    #[cfg(ferrotrace_runtime)]
    crate::recorders::callsites::fields(tracepoint, tsc, max, write);
    #[cfg(not(ferrotrace_runtime))]
    let _ = (tracepoint, tsc, max, write);
}

/// Where [`fields`] has a record's fields written: at first the calling thread's chunk, just after
/// the slot the record will take (not appended yet, so that nothing else may append meanwhile), then,
/// after [`FieldsOut::leave_chunk`], a buffer on the stack that is copied into the chunk at the end.
/// Or a buffer of the caller's own ([`FieldsOut::new`]).
///
/// A base and a length counted from 0, not a moving pointer: the length each value written adds to
/// does not depend on where the chunk's cursor is, so that the cursor the next record is appended at
/// depends on the one before only through the length, not through every value's write.
pub struct FieldsOut<'a> {
    /// The first byte of the memory written into (`cap` bytes, the first `len` written).
    out: *mut MaybeUninit<u8>,
    cap: usize,
    len: usize,
    /// While `out` is in the chunk: the buffer to move to (at least `cap` bytes).
    spare: Option<&'a mut [MaybeUninit<u8>]>,
    _out: core::marker::PhantomData<&'a mut [MaybeUninit<u8>]>,
}

impl<'a> FieldsOut<'a> {
    /// Fields written into `buf`, which [`FieldsOut::leave_chunk`] leaves where it is.
    #[inline(always)]
    pub fn new(buf: &'a mut [MaybeUninit<u8>]) -> FieldsOut<'a> {
        FieldsOut {
            out: buf.as_mut_ptr(),
            cap: buf.len(),
            len: 0,
            spare: None,
            _out: core::marker::PhantomData,
        }
    }

    /// Fields written at `out` (`spare.len()` bytes there that this thread alone writes until the
    /// record is appended), moved to `spare` by [`FieldsOut::leave_chunk`].
    ///
    /// # Safety
    /// `out` is valid for writes of `spare.len()` bytes while the result lives, and nothing else
    /// reads or writes them before [`FieldsOut::leave_chunk`] (or the result's end).
    #[cfg(ferrotrace_runtime)]
    #[inline(always)]
    pub(crate) unsafe fn in_chunk(
        out: *mut MaybeUninit<u8>,
        spare: &'a mut [MaybeUninit<u8>],
    ) -> FieldsOut<'a> {
        FieldsOut {
            out,
            cap: spare.len(),
            len: 0,
            spare: Some(spare),
            _out: core::marker::PhantomData,
        }
    }

    /// The memory after what was written, to write the next value into (then [`FieldsOut::wrote`]).
    #[inline(always)]
    pub fn room(&mut self) -> &mut [MaybeUninit<u8>] {
        // SAFETY: `out .. out + cap` is ours to write (`new`'s borrow, or `in_chunk`'s contract) and
        // `len <= cap`; the slice borrows `self`, so it is gone before `out` can move.
        unsafe { core::slice::from_raw_parts_mut(self.out.add(self.len), self.cap - self.len) }
    }

    /// The first `n` bytes of [`FieldsOut::room`] were written.
    ///
    /// # Safety
    /// They were: the runtime copies them into the trace as they are (as `Record`s, which
    /// uninitialized bytes are not), and `n` is at most `room().len()`.
    #[inline(always)]
    pub unsafe fn wrote(&mut self, n: usize) {
        debug_assert!(n <= self.cap - self.len);
        self.len += n;
    }

    /// How many bytes were written.
    #[inline(always)]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing was written.
    #[inline(always)]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// What was written, if still in the chunk, moves to the stack: to call before code that may
    /// record into the calling thread's chunk (whose records would land on these fields).
    #[inline]
    pub fn leave_chunk(&mut self) {
        if let Some(spare) = self.spare.take() {
            // SAFETY: `len` bytes at `out` were written; `spare` holds `cap >= len` bytes and is
            // not the chunk.
            unsafe { core::ptr::copy_nonoverlapping(self.out, spare.as_mut_ptr(), self.len) };
            self.out = spare.as_mut_ptr();
        }
    }

    /// Whether what was written starts at `buf` (the fields' buffer on the stack, after
    /// [`FieldsOut::leave_chunk`]).
    #[cfg(ferrotrace_runtime)]
    #[inline(always)]
    pub(crate) fn starts_at(&self, buf: *const MaybeUninit<u8>) -> bool {
        core::ptr::eq(self.out, buf)
    }

    /// Whether the fields are still in the chunk ([`FieldsOut::leave_chunk`] was not called).
    #[cfg(ferrotrace_runtime)]
    #[inline(always)]
    pub(crate) fn is_in_chunk(&self) -> bool {
        self.spare.is_some()
    }
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
