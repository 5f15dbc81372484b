//! Callsites registered while the program runs (the spans and events of the `tracing` crate, through
//! `ferrotrace-tracing`): their ids, their description for the trace, and their hot path.
//!
//! A span is recorded like a function: it gets a function id from the same allocator as discovery's
//! (`discovery::Known`, so that a rescan after `dlopen` never reuses it), and entering and leaving it
//! are Entry and Exit records of that id, so that every analysis treats it as a function and the
//! collector's `-F`/`-N`/`-D` selection applies to it as to one. Its fields, and an event's, are a
//! Tracepoint record with a payload of tagged values (`ferrotrace_core::tracepoint`, type `value`)
//! under a tracepoint id given after the program's static tracepoints
//! (`tracepoint::control::new_id`). Every record goes through `buffers::hot` like a tracepoint's.
//!
//! Each callsite is described once, in a Callsites chunk (`ferrotrace_core::schema::Callsite`) that
//! the collector writes before the next chunk of events ([`RECORDER`]'s metadata hook), and in the
//! runtime's header, which a forked child's trace starts with; so is an event's literal message, which
//! its events then leave out ([`message`], a CallsiteMessages chunk).
//!
//! Selection, decided at registration: a span is registered unless `-F`/`-N` leave it out (by its
//! name, as they would a function; in `record`'s subtree mode it is always registered and the collector
//! selects), an event when `--trace` globs select its name (as a tracepoint's), or always when the
//! program started the recording itself (`crate::callsites::record_to_file`).
//!
//! Not here: anything about the `tracing` crate's types (that is `ferrotrace-tracing`), or callsites
//! that exist before the program runs (static tracepoints: [`super::tracepoint`]).

use std::mem::MaybeUninit;
use std::sync::atomic::Ordering;

use ferrotrace_core::format::ChunkKind;
use ferrotrace_core::record::{EventKind, Record};
use ferrotrace_core::schema::{self, Payload};

use crate::arch::thread::cpu_bits;
use crate::buffers::hot::Hot;
use crate::callsites::{Description, FieldsOut, Ids, Kind};
use crate::lifecycle::runtime::{self, Recorder};
use crate::recorders::tracepoint::control;
use crate::state::PROCESS;

/// The callsite recorder's hooks (`recorders::ALL`): the `--trace` globs read at start, and the
/// Callsites chunks for the collector.
pub const RECORDER: Recorder = Recorder {
    start: |_| {
        *PROCESS
            .callsites
            .trace_globs
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = control::requested();
        true
    },
    metadata: take_described,
    ..Recorder::NONE
};

/// The chunk kinds of the pending descriptions' two lists (`state::Callsites::pending`), in that
/// order in the trace: a message follows its callsite.
const PENDING_KINDS: [ChunkKind; 2] = [ChunkKind::Callsites, ChunkKind::CallsiteMessages];

/// Registers a callsite (`crate::callsites::register`).
pub fn register(d: &Description<'_>) -> Option<Ids> {
    let rt = runtime::get().filter(|rt| records(rt))?;
    let config = &rt.config;
    let function = match d.kind {
        Kind::Span => {
            if !config.subtrees && !config.selects(d.name, 0) {
                return None;
            }
            rt.new_function_id(config.filter_flags(d.name, 0))
        }
        Kind::Event => {
            let globs = PROCESS
                .callsites
                .trace_globs
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            let selected = PROCESS.callsites.all_events.load(Ordering::Relaxed)
                || globs
                    .as_deref()
                    .is_some_and(|g| control::split_globs(g).any(|g| control::selects(g, d.name)));
            if !selected {
                return None;
            }
            0
        }
    };
    let ids = Ids {
        function,
        tracepoint: control::new_id(),
    };
    let mut entry = Vec::new();
    let _ = schema::Callsite {
        function_id: ids.function,
        tracepoint_id: ids.tracepoint,
        site: *d,
    }
    .encode(&mut entry);
    describe(rt, 0, &entry);
    Some(ids)
}

/// Registers the literal message of the event callsite recorded under `tracepoint`: the text of its
/// field `field`, which its events leave out from now on (`crate::callsites::message`). Takes a lock
/// and allocates: once per callsite.
pub fn message(tracepoint: u32, field: u32, text: &str) -> bool {
    let Some(rt) = runtime::get().filter(|rt| records(rt)) else {
        return false;
    };
    let mut entry = Vec::new();
    let _ = schema::CallsiteMessage {
        tracepoint_id: tracepoint,
        field,
        text,
    }
    .encode(&mut entry);
    describe(rt, 1, &entry);
    true
}

/// Adds one encoded `entry` to the pending descriptions' list `list` to the runtime's header (a forked child's
/// trace starts with it) and to what the collector writes next.
fn describe(rt: &runtime::Runtime, list: usize, entry: &[u8]) {
    let mut alone = Vec::new();
    let _ = schema::Count(1).encode(&mut alone);
    alone.extend_from_slice(entry);
    rt.describe(vec![(PENDING_KINDS[list], alone)]);
    let mut pending = PROCESS
        .callsites
        .pending
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    pending[list].0 += 1;
    pending[list].1.extend_from_slice(entry);
    PROCESS.callsites.has_pending.store(true, Ordering::Release);
}

/// The collector's hook: one Callsites chunk with the callsites registered since the last call, then
/// one CallsiteMessages chunk with the messages.
fn take_described() -> Vec<(ChunkKind, Vec<u8>)> {
    if !PROCESS.callsites.has_pending.load(Ordering::Acquire) {
        return Vec::new();
    }
    let mut pending = PROCESS
        .callsites
        .pending
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    PROCESS
        .callsites
        .has_pending
        .store(false, Ordering::Relaxed);
    let mut chunks = Vec::new();
    for (kind, (count, entries)) in PENDING_KINDS.into_iter().zip(std::mem::take(&mut *pending)) {
        if count == 0 {
            continue;
        }
        let mut p = Vec::with_capacity(entries.len() + 10);
        let _ = schema::Count(count).encode(&mut p);
        p.extend_from_slice(&entries);
        chunks.push((kind, p));
    }
    chunks
}

/// Whether this process records now (`crate::callsites::recording`).
pub fn recording() -> bool {
    runtime::get().is_some_and(records)
}

/// Whether `rt` records this process now: its recording runs, and this is not a forked child that
/// has not started one of its own.
fn records(rt: &runtime::Runtime) -> bool {
    rt.lifecycle.is_recording() && rt.records_this_process()
}

/// Sets the layer's hook (`crate::callsites::set_recording_hook`).
pub fn set_recording_hook(hook: fn(bool)) {
    PROCESS
        .callsites
        .recording_hook
        .store(hook as usize, Ordering::Release);
}

/// True when the program has a `tracing` layer of ferrotrace's (it registered a callsite).
pub fn has_layer() -> bool {
    PROCESS.callsites.recording_hook.load(Ordering::Acquire) != 0
}

/// An attach started recording, with `--trace` globs `globs` (comma-separated, empty for none): the
/// layer asks its callsites' interest again, on the attaching thread; the host's stop calls
/// [`detached`].
pub fn attached(globs: &str) {
    *PROCESS
        .callsites
        .trace_globs
        .lock()
        .unwrap_or_else(|e| e.into_inner()) = (!globs.is_empty()).then(|| globs.to_string());
    call_hook(true);
}

/// The host detached: the layer forgets its callsites' ids (they stay enabled in `tracing`'s cache,
/// each span or event then costing the layer one lookup, until a recording asks again).
pub fn detached() {
    call_hook(false);
}

fn call_hook(recording: bool) {
    let hook = PROCESS.callsites.recording_hook.load(Ordering::Acquire);
    if hook != 0 {
        // SAFETY: only `set_recording_hook` stores here, the address of a `fn(bool)`.
        let hook = unsafe { core::mem::transmute::<usize, fn(bool)>(hook) };
        hook(recording);
    }
}

/// Selects every event callsite registered from now on (a recording the program started itself).
pub fn select_all_events() {
    PROCESS.callsites.all_events.store(true, Ordering::Relaxed);
}

/// The calling thread's block, at the offset the trampolines use (two loads, where `Hot::current` is
/// a call into the runtime's thread-local accessor).
#[inline(always)]
fn hot() -> &'static Hot {
    // SAFETY: a callsite has ids, and so records, only once `register` found the runtime recording:
    // every start-up (`start`, `attach`, `in_program`) fixed the TLS offset before that.
    unsafe { Hot::current_static() }
}

/// Appends one payload-less record of `kind` for `id`, at `tsc`, to the calling thread's chunk.
#[inline(always)]
fn append(kind: EventKind, id: u32, tsc: u64) {
    let mut rec = Record::new(tsc, kind, id);
    rec.word |= cpu_bits();
    if hot().append(rec, 0, |_| {}).is_err() {
        crate::buffers::thread::record_slow(rec, &[]);
    }
}

/// The calling thread entered, at `tsc`, the span whose function id is `function`.
#[inline(always)]
pub fn enter(function: u32, tsc: u64) {
    append(EventKind::Entry, function, tsc);
}

/// The calling thread left, at `tsc`, the span whose function id is `function`.
#[inline(always)]
pub fn exit(function: u32, tsc: u64) {
    append(EventKind::Exit, function, tsc);
}

/// Records the fields of a callsite (an event, or a span's fields) under its tracepoint id, at `tsc`
/// (read by the caller before anything else, so that the counter's latency overlaps this work):
/// `write` puts them into the [`FieldsOut`] it is given (at most `max` bytes) and hands it back.
///
/// They are written straight into the thread's chunk, after the slot the record will take, with room
/// for the most a record holds checked first: no copy. The cursor does not move until the record is
/// appended, so `write` must not let anything else append meanwhile: before it runs the program's
/// code (a field's `Debug` implementation, which may be instrumented — mini-redis's `debug!(?cmd)` —
/// and whose records go into the same chunk, at its cursor) it calls [`FieldsOut::leave_chunk`], which
/// moves what it wrote to a buffer on the stack, and the rest of the fields go there, to be copied
/// into the chunk after. The record is then stamped with the time after `write`, not `tsc`, so that
/// records of those calls come before the event in time as in the chunk.
///
/// Not reentrant for signals, as no hot path is: an instrumented signal handler that records on this
/// thread while `write` writes into the chunk appends where the fields are (the fields written after
/// it returns land on its records); the event is then left out, not appended over them, and counted
/// as lost, so that the trace says one is missing.
#[inline(always)]
pub fn fields(
    tracepoint: u32,
    tsc: u64,
    max: usize,
    write: impl for<'b> FnOnce(FieldsOut<'b>) -> FieldsOut<'b>,
) {
    let max = max.min(MAX_SLOTS * 16);
    let mut buf = MaybeUninit::<[Record; MAX_SLOTS]>::uninit();
    // SAFETY: `MaybeUninit<[Record; N]>` is `16 * N` bytes that may be uninitialized, which is what
    // a `[MaybeUninit<u8>]` of that length is.
    let stack = unsafe {
        core::slice::from_raw_parts_mut(buf.as_mut_ptr() as *mut MaybeUninit<u8>, MAX_SLOTS * 16)
    };
    let hot = hot();
    let on_stack = stack.as_ptr();
    let out = match hot.reserve(MAX_SLOTS) {
        Some(cur) => {
            // SAFETY: `reserve` found room for a record and `MAX_SLOTS` payload records at `cur`,
            // which this thread alone writes until it moves its cursor (`write` leaves the chunk
            // before running code that could append).
            let out =
                write(unsafe { FieldsOut::in_chunk(cur.add(1) as *mut _, &mut stack[..max]) });
            if out.is_in_chunk() {
                let len = out.len();
                if hot.cursor.load(Ordering::Relaxed) == cur {
                    let rec = tracepoint_record(tsc, tracepoint, len);
                    // SAFETY: `cur` is `reserve`'s answer for `MAX_SLOTS`, nothing appended since.
                    unsafe { commit_in_chunk(hot, cur, rec, len) };
                } else {
                    crate::buffers::thread::count_lost(1);
                }
                return;
            }
            out
        }
        None => write(FieldsOut::new(&mut stack[..max])),
    };
    // `write` may hand back a `FieldsOut` of its own making rather than the one it was given: only
    // the stack buffer's bytes are copied into the trace.
    if !out.starts_at(on_stack) {
        crate::buffers::thread::count_lost(1);
        return;
    }
    let len = out.len();
    let slots = payload_slots(len);
    zero_tail(stack, len);
    // SAFETY: the first `slots` records of `buf` were written (`write`, then the zeros above).
    let payload = unsafe { core::slice::from_raw_parts(buf.as_ptr() as *const Record, slots) };
    let rec = tracepoint_record(crate::buffers::clock::rdtsc(), tracepoint, len);
    let copy = |p: *mut Record| {
        // Record by record: a few of them, where a `memcpy` call costs more.
        for (i, r) in payload.iter().enumerate() {
            // SAFETY: there is room for `slots` records at `p` (`append` reserved them).
            unsafe { p.add(i).write(*r) };
        }
    };
    if hot.append(rec, slots, copy).is_err() {
        crate::buffers::thread::record_slow(rec, payload);
    }
}

/// Appends `rec` (a [`tracepoint_record`]) at `cur`, the `len` bytes of fields it was made for
/// written after it.
///
/// # Safety
/// `cur` is what `hot.reserve(MAX_SLOTS)` answered on this thread, nothing was appended since, and
/// `len <= MAX_SLOTS * 16` bytes of fields were written from `cur + 1` on.
#[inline(always)]
unsafe fn commit_in_chunk(hot: &Hot, cur: *mut Record, rec: Record, len: usize) {
    // SAFETY: `MAX_SLOTS` records after `cur` were reserved (the caller's contract).
    let payload = unsafe {
        core::slice::from_raw_parts_mut(cur.add(1) as *mut MaybeUninit<u8>, MAX_SLOTS * 16)
    };
    zero_tail(payload, len);
    // SAFETY: the record's payload records were written (the fields, then the zeros).
    unsafe { hot.commit(cur, rec, rec.payload_slots()) };
}

/// Zeroes the rest of the last 16-byte slot of the `len` bytes written at the start of `payload`:
/// the zero that ends a list of tagged values (and no stale bytes in the trace). One 16-byte store
/// when `payload` allows (what it writes past the last slot is not part of the record), rather
/// than a `memset` call for a few bytes.
#[inline(always)]
fn zero_tail(payload: &mut [MaybeUninit<u8>], len: usize) {
    if let Some(tail) = payload.get_mut(len..len + 16) {
        // SAFETY: `tail` is 16 bytes long; `MaybeUninit<u8>` has the layout of `u8`.
        unsafe { (tail.as_mut_ptr() as *mut [u8; 16]).write_unaligned([0; 16]) };
    } else {
        for b in &mut payload[len..len.div_ceil(16) * 16] {
            b.write(0);
        }
    }
}

/// The Tracepoint record of `tracepoint` at `tsc`, for `len` bytes of fields.
#[inline(always)]
fn tracepoint_record(tsc: u64, tracepoint: u32, len: usize) -> Record {
    let mut rec = Record::new(tsc, EventKind::Tracepoint, tracepoint);
    rec.word |= cpu_bits() | (payload_slots(len) as u64) << 40;
    rec
}

/// The 16-byte slots `len` bytes of fields take: `len` is at most `MAX_SLOTS * 16`, so the sum does
/// not overflow (`div_ceil` would guard against that, with three instructions more per event).
#[inline(always)]
#[allow(clippy::manual_div_ceil)] // On purpose: see above.
fn payload_slots(len: usize) -> usize {
    (len + 15) / 16
}

/// The most payload slots of a callsite's record: 1 KiB of fields (a record could hold 255 slots,
/// its count being a byte; the buffer is on the stack of every event, and a frame above a page would
/// add a stack probe).
const MAX_SLOTS: usize = 64;
