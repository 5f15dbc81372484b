//! `ft-tracing-bench VARIANT OUT_DIR`: the cost of `tracing` events and spans through one subscriber
//! set-up (VARIANT), in ns per event (with a message and a field; with two fields and no message),
//! per span enter+exit, and per span lifetime (new, enter, exit, close), each the best of 5 timed
//! loops after a warm-up. Every loop runs twice and the second pass is the one timed: the first touches
//! memory the subscriber has not touched before (ferrotrace's trace buffers, 16 MiB of pages faulted
//! in and zeroed by the kernel once per process, which the 50,000-event rounds would otherwise pay for
//! in every round; the peers' buffers and files), a one-time cost, not a cost per event. Prints one line:
//! `VARIANT event=NS fields=NS enter_exit=NS span=NS`. bench/tracing-layers.sh runs every variant, alternating.

use std::hint::black_box;
use std::time::Instant;

use tracing::span;
use tracing::subscriber::Interest;
use tracing::{Event, Metadata, Subscriber};
use tracing_subscriber::filter::LevelFilter;
use tracing_subscriber::prelude::*;

const EVENTS: u64 = 50_000;
const ROUNDS: usize = 5;

/// Enables everything and does nothing: what `tracing` itself costs with a subscriber installed.
struct Noop;

impl Subscriber for Noop {
    fn register_callsite(&self, _: &'static Metadata<'static>) -> Interest {
        Interest::always()
    }
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &span::Attributes<'_>) -> span::Id {
        span::Id::from_u64(1)
    }
    fn record(&self, _: &span::Id, _: &span::Record<'_>) {}
    fn record_follows_from(&self, _: &span::Id, _: &span::Id) {}
    fn event(&self, _: &Event<'_>) {}
    fn enter(&self, _: &span::Id) {}
    fn exit(&self, _: &span::Id) {}
}

/// Reads the timestamp counter at every event, enter and exit, and keeps nothing: the floor of a layer
/// that stamps its records with `rdtsc` (as ferrotrace's does), above the registry it stands on.
struct RdtscFloor;

impl<S: Subscriber> tracing_subscriber::Layer<S> for RdtscFloor {
    fn on_event(&self, _: &Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        rdtsc();
    }
    fn on_enter(&self, _: &span::Id, _: tracing_subscriber::layer::Context<'_, S>) {
        rdtsc();
    }
    fn on_exit(&self, _: &span::Id, _: tracing_subscriber::layer::Context<'_, S>) {
        rdtsc();
    }
}

#[inline(always)]
fn rdtsc() {
    // SAFETY: `rdtsc` has no preconditions on x86-64.
    black_box(unsafe { core::arch::x86_64::_rdtsc() });
}

/// The best of [`ROUNDS`] runs of `f` over `n` iterations, in ns per iteration.
fn best(n: u64, mut f: impl FnMut(u64)) -> f64 {
    for i in 0..n / 10 {
        f(i);
    }
    (0..ROUNDS)
        .map(|_| {
            let t = Instant::now();
            for i in 0..n {
                f(i);
            }
            t.elapsed().as_nanos() as f64 / n as f64
        })
        .fold(f64::INFINITY, f64::min)
}

fn measure(variant: &str) {
    let _first_pass = pass();
    let (event, fields, enter_exit, life) = pass();
    println!(
        "{variant} event={event:.1} fields={fields:.1} enter_exit={enter_exit:.1} span={life:.1}"
    );
}

/// One pass of the four loops: ns per event with a message, per event without, per span enter+exit,
/// per span life.
fn pass() -> (f64, f64, f64, f64) {
    let event = best(EVENTS, |i| tracing::info!(i, "event"));
    // Without a message: no `core::fmt` on the way (a message is `format_args!`, visited as `Debug`).
    let fields = best(EVENTS, |i| tracing::info!(i, ok = true));
    let span = tracing::info_span!("held", n = 1u64);
    let enter_exit = best(EVENTS, |_| {
        let _g = black_box(span.enter());
    });
    drop(span);
    let life = best(EVENTS, |i| {
        let s = tracing::info_span!("request", i);
        let _g = s.enter();
    });
    (event, fields, enter_exit, life)
}

fn main() {
    let mut args = std::env::args().skip(1);
    let variant = args
        .next()
        .expect("usage: ft-tracing-bench VARIANT OUT_DIR");
    let out = std::path::PathBuf::from(
        args.next()
            .expect("usage: ft-tracing-bench VARIANT OUT_DIR"),
    );
    std::fs::create_dir_all(&out).expect("output directory");
    let registry = tracing_subscriber::registry();
    match variant.as_str() {
        // A callsite its level filter rejects.
        "disabled" => registry.with(LevelFilter::WARN).init(),
        "noop" => tracing::subscriber::set_global_default(Noop).expect("subscriber"),
        // The registry every layer stands on, without a layer.
        "registry" => registry.init(),
        "rdtsc-floor" => registry.with(RdtscFloor).init(),
        // The ferrotrace layer while nothing records: its callsites answer `never`.
        "ferrotrace-off" => registry
            .with(ferrotrace_tracing::FerrotraceLayer::new())
            .init(),
        "ferrotrace" => {
            registry
                .with(ferrotrace_tracing::FerrotraceLayer::new())
                .init();
            let path = out.join("bench.ferrotrace");
            let _ = std::fs::remove_file(&path);
            let guard = ferrotrace_tracing::record_to_file(&path).expect("record_to_file");
            measure(&variant);
            drop(guard);
            return;
        }
        "chrome" => {
            let (layer, guard) = tracing_chrome::ChromeLayerBuilder::new()
                .file(out.join("bench.json"))
                .build();
            registry.with(layer).init();
            measure(&variant);
            drop(guard);
            return;
        }
        "perfetto" => {
            let file = std::fs::File::create(out.join("bench.perfetto-trace")).expect("file");
            let writer = std::sync::Mutex::new(std::io::BufWriter::new(file));
            registry
                .with(tracing_perfetto::PerfettoLayer::new(writer))
                .init();
        }
        "tracy" => registry.with(tracing_tracy::TracyLayer::default()).init(),
        other => panic!("unknown variant {other}"),
    }
    measure(&variant);
}
