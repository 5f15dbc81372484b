//! Records `tracing` spans and events into ferrotrace traces: a `tracing_subscriber::Layer`.
//!
//! * A **span** is recorded like a function: entering it and leaving it are function entry and exit
//!   events named by the span's name, on the thread that enters it (an async span polled on several
//!   threads nests on each), so that `ferrotrace report`, `replay`, `flame`, `live` and every export
//!   show spans wherever they show functions, between the functions of an instrumented build. Its
//!   fields, when it is created and when `Span::record` adds some, are an event named after it.
//! * An **event** is recorded like a tracepoint, with its fields and its level. A literal message
//!   (`info!(id, "done")`) is written once per callsite, at its first event, and left out of the
//!   others; every reader shows it in each.
//!
//! Both go through the runtime's per-thread chunks, the path the XRay trampolines and tracepoints
//! take: a `rdtsc` (read first, so that its latency overlaps the rest) and a few stores, no lock, no
//! allocation. Each callsite is registered once (its
//! `&'static Metadata` gets small ids and its names go into the trace).
//!
//! Where they go: into the trace of `ferrotrace record` when the program runs under it (a program that
//! depends on this crate links the runtime, which `record` starts), or into a file of the program's
//! own with [`record_to_file`], until its [`FlushGuard`] is dropped. When nothing records, the layer
//! wants no level (`max_level_hint` is `OFF`), so that `tracing`'s global maximum level turns every
//! callsite away at its first check, exactly as a level filter does, and it answers
//! `Interest::never()` for any callsite registered meanwhile; beside other layers, through
//! [`Recorded`], that holds for this layer only. When a recording starts (`ferrotrace record -p`
//! attaching to the running program, or [`record_to_file`]) the interest cache is rebuilt and both
//! are asked again. `ferrotrace record` records every span (`-F`/`-N` select them by name,
//! as functions) and the events `--trace GLOB` selects (by `target` or `target::name`, as
//! tracepoints); a recording to a file records all.
//!
//! Adding it to a program is one line in the subscriber it builds, `.with(FerrotraceLayer::new())`;
//! a program that calls `tracing_subscriber::fmt::init()` builds the same subscriber as a registry
//! with `fmt::layer()` and adds it beside (testprogs/mini-redis/mini-redis.patch does that to
//! mini-redis's server).
//!
//! Alone in a subscriber (the cheapest):
//!
//! ```no_run
//! use tracing_subscriber::prelude::*;
//!
//! tracing_subscriber::registry()
//!     .with(ferrotrace_tracing::FerrotraceLayer::new())
//!     .init();
//! // Without `ferrotrace record`: into a file of its own, complete when the guard is dropped.
//! let _guard = ferrotrace_tracing::record_to_file("app.ferrotrace")?;
//! let span = tracing::info_span!("request", id = 7);
//! let _entered = span.enter();
//! tracing::info!(status = 200, "done");
//! # Ok::<(), ferrotrace_tracing::Error>(())
//! ```
//!
//! Beside other layers (`tracing_subscriber::fmt`, …), with its own filter, so that its answer for
//! callsites it does not record leaves the others theirs: `FerrotraceLayer::new().with_filter(Recorded)`
//! ([`Recorded`]). A layer without a filter of its own that answers `never` turns the callsite off
//! for the whole subscriber.
//!
//! Not for: reading traces (`ferrotrace-reader`), or programs without `tracing` (the `ferrotrace`
//! crate's tracepoints are cheaper still: one NOP while disabled).

mod fields;
mod sites;
mod span_ids;

use std::path::Path;

use tracing_core::span::{Attributes, Id, Record};
use tracing_core::subscriber::Interest;
use tracing_core::{Event, LevelFilter, Metadata, Subscriber};
use tracing_subscriber::layer::{Context, Filter, Layer};
use tracing_subscriber::registry::LookupSpan;

use crate::fields::Values;

/// The layer: spans as function entries and exits, events and span fields as tracepoint-like events.
#[derive(Clone, Copy, Debug, Default)]
pub struct FerrotraceLayer {
    _private: (),
}

impl FerrotraceLayer {
    /// The layer. It records while `ferrotrace record` records the program, or after
    /// [`record_to_file`].
    pub fn new() -> FerrotraceLayer {
        FerrotraceLayer::default()
    }
}

/// The interest in a callsite: registered with the runtime (once) and recorded, or never.
fn interest(meta: &'static Metadata<'static>) -> Interest {
    ferrotrace::callsites::set_recording_hook(recording_changed);
    match sites::register(meta) {
        Some(_) => Interest::always(),
        None => Interest::never(),
    }
}

/// The most verbose level the layer wants: none while nothing records, so that `tracing`'s global
/// maximum level turns every callsite away at its first check, as a level filter does (the callsites
/// are not even registered); any while something records. `tracing` asks when the subscriber is
/// set, and again whenever the interest cache is rebuilt: when a recording starts or ends
/// ([`record_to_file`], [`FlushGuard`], [`recording_changed`]). Asked first when the subscriber is
/// set, it also sets the hook through which an attach announces itself: no callsite may ever have
/// registered.
fn max_level() -> Option<LevelFilter> {
    ferrotrace::callsites::set_recording_hook(recording_changed);
    match ferrotrace::callsites::recording() {
        true => None,
        false => Some(LevelFilter::OFF),
    }
}

/// `ferrotrace record -p` attached to the program (`true`: the callsites that answered `never` are
/// asked again, and registered) or detached (`false`: their ids are forgotten).
fn recording_changed(recording: bool) {
    if recording {
        tracing_core::callsite::rebuild_interest_cache();
    } else {
        sites::forget_all();
    }
}

/// Records the fields `record` visits under `tracepoint`, at `tsc`, written straight into the thread's
/// chunk.
#[inline(always)]
fn record_fields(tracepoint: u32, tsc: u64, record: impl FnOnce(&mut Values<'_>)) {
    ferrotrace::callsites::fields(tracepoint, tsc, fields::MAX, |out| {
        let mut values = Values::new(out);
        record(&mut values);
        values.into_out()
    });
}

/// Records `event`, of the callsite in `slot` registered under `tracepoint`, at `tsc`.
#[inline(always)]
fn record_event(event: &Event<'_>, tracepoint: u32, slot: &'static sites::Slot, tsc: u64) {
    ferrotrace::callsites::fields(tracepoint, tsc, fields::MAX, |out| {
        let mut values = Values::for_event(out, slot, tracepoint);
        event.record(&mut values);
        values.into_out()
    });
}

/// Records `event` of a callsite not registered yet (while another thread registers it, or when
/// `tracing`'s interest cache is off), after registering it if it is its turn; stamped after the
/// registration, which allocates (the allocation hooks may record).
#[cold]
#[inline(never)]
fn register_and_record(event: &Event<'_>) {
    let meta = event.metadata();
    if sites::registering(meta).is_some() {
        if let Some((ids, slot)) = sites::lookup_slot(meta) {
            record_event(event, ids.tracepoint, slot, ferrotrace::callsites::now());
        }
    }
}

/// The function id of span `id`: from the table of live spans, else from its metadata in the registry.
#[inline(always)]
fn span_function<S>(id: &Id, ctx: &Context<'_, S>) -> Option<u32>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    span_ids::get(id.into_u64()).or_else(|| span_function_in_registry(id, ctx))
}

/// [`span_function`] of a span the table no longer holds: apart, so that `on_enter` and `on_exit`
/// keep their timestamp in a register on the way of the others.
#[cold]
#[inline(never)]
fn span_function_in_registry<S>(id: &Id, ctx: &Context<'_, S>) -> Option<u32>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    Some(ctx.metadata(id).and_then(sites::lookup)?.function)
}

impl<S> Layer<S> for FerrotraceLayer
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn register_callsite(&self, meta: &'static Metadata<'static>) -> Interest {
        interest(meta)
    }

    fn max_level_hint(&self) -> Option<LevelFilter> {
        max_level()
    }

    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, _ctx: Context<'_, S>) {
        if let Some(ids) = sites::lookup_or_register(attrs.metadata()) {
            span_ids::insert(id.into_u64(), ids.function);
            if !attrs.values().is_empty() {
                record_fields(ids.tracepoint, ferrotrace::callsites::now(), |v| {
                    attrs.record(v)
                });
            }
        }
    }

    fn on_record(&self, span: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        if let Some(ids) = ctx.metadata(span).and_then(sites::lookup) {
            if !values.is_empty() {
                record_fields(ids.tracepoint, ferrotrace::callsites::now(), |v| {
                    values.record(v)
                });
            }
        }
    }

    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        // The timestamp first: its latency overlaps the lookup and the visit (`callsites::now`).
        let tsc = ferrotrace::callsites::now();
        match sites::lookup_slot(event.metadata()) {
            Some((ids, slot)) => record_event(event, ids.tracepoint, slot, tsc),
            None => register_and_record(event),
        }
    }

    fn on_enter(&self, id: &Id, ctx: Context<'_, S>) {
        let tsc = ferrotrace::callsites::now();
        if let Some(function) = span_function(id, &ctx) {
            ferrotrace::callsites::enter(function, tsc);
        }
    }

    fn on_exit(&self, id: &Id, ctx: Context<'_, S>) {
        let tsc = ferrotrace::callsites::now();
        if let Some(function) = span_function(id, &ctx) {
            ferrotrace::callsites::exit(function, tsc);
        }
    }
}

/// The per-layer filter for [`FerrotraceLayer`] beside other layers: enables for it exactly the
/// callsites it records, leaving the other layers' interest alone.
///
/// ```no_run
/// use tracing_subscriber::prelude::*;
/// use ferrotrace_tracing::{FerrotraceLayer, Recorded};
///
/// tracing_subscriber::registry()
///     .with(FerrotraceLayer::new().with_filter(Recorded))
///     // .with(tracing_subscriber::fmt::layer())
///     .init();
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct Recorded;

impl<S> Filter<S> for Recorded {
    fn enabled(&self, meta: &Metadata<'_>, _cx: &Context<'_, S>) -> bool {
        // Asked for callsites that `callsite_enabled` found interesting (`always`), while a callsite
        // registers on another thread, or when the interest cache is off: the table says.
        sites::may_record(meta)
    }

    fn callsite_enabled(&self, meta: &'static Metadata<'static>) -> Interest {
        interest(meta)
    }

    fn max_level_hint(&self) -> Option<LevelFilter> {
        max_level()
    }
}

/// Why [`record_to_file`] could not start a recording.
#[derive(Debug)]
pub struct Error(String);

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Error {}

/// Starts recording this process into `path` (a new file, mode 0600; an older trace there is kept as
/// `PATH.old`; any other file there is refused), every span and event, until the returned guard is
/// dropped. The program's instrumented functions, if it was built with XRay or mcount, are traced
/// too. Fails when a recording runs already (`ferrotrace record` — whose trace the layer then writes
/// into), or the file cannot be made. One recording at a time. What the threads record reaches the
/// file within a second: a program killed without warning (SIGKILL) leaves a trace of all but its
/// last second, without its End chunk (the reader says it was not finished).
pub fn record_to_file(path: impl AsRef<Path>) -> Result<FlushGuard, Error> {
    ferrotrace::callsites::record_to_file(path.as_ref()).map_err(Error)?;
    // Callsites met before (answered `never`) are asked again.
    tracing_core::callsite::rebuild_interest_cache();
    Ok(FlushGuard { _private: () })
}

/// Ends the recording [`record_to_file`] started when dropped: every thread's spans and events are in
/// the file, and the file is complete, when `drop` returns. The program goes on untraced (callsites
/// cost what disabled ones do again).
#[must_use = "the recording ends when the guard is dropped"]
#[derive(Debug)]
pub struct FlushGuard {
    _private: (),
}

impl Drop for FlushGuard {
    fn drop(&mut self) {
        ferrotrace::callsites::stop_recording();
        sites::forget_all();
        tracing_core::callsite::rebuild_interest_cache();
    }
}
