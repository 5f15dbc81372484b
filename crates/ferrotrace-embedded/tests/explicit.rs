//! The explicit API (`enter`/`exit`), threads found by the embedder's function, the embedder's clock in
//! nanoseconds, the embedder's symbols (a Functions chunk), and a full slot that stops and counts.

mod common;

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};

use ferrotrace_embedded::{
    enter, exit, init_with, Clock, OnFull, Options, Program, RegisterError, Symbol, Threads,
};
use ferrotrace_reader::reader::EventKind;

/// The embedder's clock: every reading 1 µs after the previous one.
static NOW: AtomicU64 = AtomicU64::new(0);
extern "C" fn clock() -> u64 {
    NOW.fetch_add(1000, Ordering::Relaxed) + 1000
}

thread_local! {
    static INDEX: Cell<usize> = const { Cell::new(usize::MAX) };
}
extern "C" fn current() -> usize {
    INDEX.with(|i| i.get())
}

const OUTER: usize = 0x40_1000;
const INNER: usize = 0x40_2000;

#[test]
fn explicit_events_with_the_embedders_clock_threads_and_names() {
    let options = Options {
        on_full: OnFull::Stop,
        shadow_depth: 8,
    };
    let tracer = init_with(
        common::memory(2, 100, 8),
        Clock::ns(clock),
        // SAFETY: `current` gives each of the test's threads its own index.
        unsafe { Threads::from_fn(current, 2) },
        options,
    )
    .expect("set up");
    assert_eq!(tracer.register_thread(0, 4242, "zero"), Ok(()));
    assert_eq!(tracer.register_thread(1, 4343, "one"), Ok(()));
    assert_eq!(
        tracer.register_thread(2, 1, "none"),
        Err(RegisterError::OutOfRange)
    );
    assert_eq!(
        tracer.register_thread(0, 1, "again"),
        Err(RegisterError::Taken),
        "a second registration of one index is refused"
    );
    tracer.enable();
    assert_eq!(
        tracer.write_trace(|_| Ok::<(), ()>(())),
        Err(ferrotrace_embedded::WriteError::Enabled)
    );

    // Slot 1: one nested pair, at addresses inside the functions.
    std::thread::spawn(|| {
        INDEX.with(|i| i.set(1));
        enter(OUTER + 4);
        enter(INNER + 9);
        exit(INNER + 9);
        exit(OUTER + 4);
    })
    .join()
    .unwrap();
    // A thread the function gives no slot: nothing recorded.
    std::thread::spawn(|| {
        enter(OUTER);
        exit(OUTER);
    })
    .join()
    .unwrap();
    // Slot 0: more pairs than it holds.
    INDEX.with(|i| i.set(0));
    let pairs = 150;
    for _ in 0..pairs {
        enter(OUTER);
        exit(OUTER);
    }
    tracer.disable();
    enter(INNER); // off: not recorded
    let stats = tracer.stats();
    assert_eq!(stats.events + stats.lost, 2 * pairs + 4, "{stats:?}");
    assert!(stats.lost > 0 && stats.overwritten == 0, "{stats:?}");
    let kept_in_slot0 = stats.events - 4;

    let symbols = [
        Symbol {
            address: OUTER as u64,
            size: 0x100,
            name: "outer",
        },
        Symbol {
            address: INNER as u64,
            size: 0,
            name: "inner",
        },
    ];
    let program = Program {
        path: "/firmware.elf",
        symbols: &symbols,
        ..Program::default()
    };
    let (trace, events) = common::write_and_open(&tracer, &program, "explicit");
    assert_eq!(trace.session().mode_name(), "drop");
    assert_eq!(trace.session().tsc_hz, 1_000_000_000);
    assert_eq!(trace.threads()[&4242].name, "zero");
    assert_eq!(trace.threads()[&4343].name, "one");
    assert_eq!(trace.threads().len(), 2);
    let end = trace.end().expect("End chunk");
    assert_eq!(end.lost, stats.lost);
    assert_eq!(trace.function_name(0x40_1000), "outer");
    assert_eq!(trace.function_name(0x40_2000), "inner");

    let one: Vec<_> = events.iter().filter(|e| e.tid == 4343).collect();
    let ids: Vec<_> = one.iter().map(|e| (e.kind, e.id)).collect();
    assert_eq!(
        ids,
        [
            (EventKind::Entry, 0x40_1000),
            (EventKind::Entry, 0x40_2000),
            (EventKind::Exit, 0x40_2000),
            (EventKind::Exit, 0x40_1000)
        ],
        "each event named by the symbol that holds its address"
    );
    // The clock ticks 1 µs per reading, and ticks are nanoseconds: exact durations.
    assert_eq!(one[3].ts_ns - one[0].ts_ns, 3000);

    let zero: Vec<_> = events.iter().filter(|e| e.tid == 4242).collect();
    assert_eq!(zero.len() as u64, kept_in_slot0 + 1);
    let last = zero.last().unwrap();
    assert_eq!((last.kind, last.id as u64), (EventKind::Lost, stats.lost));
    assert!(zero[..zero.len() - 1].iter().all(|e| e.id == 0x40_1000));

    // A program path longer than the scratch area: no trace without its Session, but an error.
    let long_path = format!("/{}", "p".repeat(ferrotrace_embedded::SCRATCH_LEN));
    let program = Program {
        path: &long_path,
        ..program
    };
    let mut written = 0usize;
    let r = tracer.write_trace_with(&program, |b| {
        written += b.len();
        Ok::<(), ()>(())
    });
    assert_eq!(
        r,
        Err(ferrotrace_embedded::WriteError::TooLarge(
            ferrotrace_core::format::ChunkKind::Session
        ))
    );
    assert!(
        written <= 64,
        "no more than the file header: {written} bytes"
    );
}
