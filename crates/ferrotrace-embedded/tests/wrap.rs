//! A slot that wraps keeps the newest events and says how many it dropped; the TSC clock; `%gs` mode.

mod common;

use ferrotrace_embedded::{enter, exit, init_with, Clock, OnFull, Options, Program, Threads};
use ferrotrace_reader::reader::EventKind;

#[test]
fn a_wrapping_slot_keeps_the_newest_events() {
    // %gs is free in a Linux user program: point it at a block whose word at 8 holds the slot.
    let block: &'static mut [u64; 4] = Box::leak(Box::new([0; 4]));
    // SAFETY: arch_prctl(ARCH_SET_GS) of this thread to memory that lives for good.
    let r = unsafe { libc::syscall(libc::SYS_arch_prctl, 0x1001, block.as_mut_ptr()) };
    assert_eq!(r, 0, "arch_prctl(ARCH_SET_GS)");
    let options = Options {
        on_full: OnFull::Wrap,
        shadow_depth: 4,
    };
    let tracer = init_with(
        common::memory(1, 64, 4),
        Clock::tsc(2_000_000_000),
        // SAFETY: the test set %gs to `block`, whose word at 8 is the tracer's alone and 0.
        unsafe { Threads::gs(8, 1) },
        options,
    )
    .expect("set up");
    assert_eq!(tracer.register_thread(0, 7, "cpu0"), Ok(()));
    assert_ne!(block[1], 0, "register_thread bound the slot at %gs:8");
    tracer.enable();
    let total = 1000u64;
    for i in 0..total / 2 {
        enter(0x1000 + i as usize);
        exit(0x1000 + i as usize);
    }
    tracer.disable();
    let stats = tracer.stats();
    assert_eq!(stats.events, total);
    assert!(stats.overwritten > 0 && stats.lost == 0, "{stats:?}");
    let kept = total - stats.overwritten;

    let (trace, events) = common::write_and_open(&tracer, &Program::default(), "wrap");
    assert_eq!(trace.session().mode_name(), "flight");
    assert_eq!(trace.end().unwrap().dropped_events, stats.overwritten);
    assert_eq!(events.len() as u64, kept);
    // The newest: the last pair's exit is last, and ids run on without a gap.
    let last = events.last().unwrap();
    assert_eq!(
        (last.kind, last.id as u64),
        (EventKind::Exit, 0x1000 + total / 2 - 1)
    );
    for pair in events.windows(2) {
        assert!(pair[1].id == pair[0].id || pair[1].id == pair[0].id + 1);
        assert!(pair[1].ts_ns >= pair[0].ts_ns);
    }
}
