//! `%fs` mode: a thread whose word already holds a slot cannot register again, with any index
//! (issue 20 item 15): what a thread made by `clone` with its parent's `%fs` base finds, and would
//! otherwise overwrite.

mod common;

use std::cell::Cell;

use ferrotrace_embedded::{init, Clock, RegisterError, Threads};

thread_local! {
    static WORD: Cell<u64> = const { Cell::new(0) };
}

/// The offset of this thread's `WORD` from its thread pointer (the same in every thread of an
/// executable's static TLS block).
fn offset() -> isize {
    let var = WORD.with(|w| w.as_ptr() as isize);
    let fs_base: isize;
    // SAFETY: on x86_64 Linux, %fs:0 holds the thread pointer itself.
    unsafe { core::arch::asm!("mov {}, qword ptr fs:[0]", out(reg) fs_base) };
    var - fs_base
}

extern "C" fn clock() -> u64 {
    1
}

#[test]
fn a_thread_whose_word_holds_a_slot_cannot_register_another() {
    let off = offset();
    // SAFETY: WORD is a word of every thread's static TLS, reserved for the tracer, 0 until bound.
    let threads = unsafe { Threads::fs(off, 3) };
    let tracer = init(common::memory(3, 64, 512), Clock::ns(clock), threads).expect("set up");
    assert_eq!(tracer.register_thread(0, 1, "main"), Ok(()));
    let slot = WORD.with(|w| w.get());
    assert_ne!(slot, 0, "registration bound the thread's word");
    assert_eq!(
        tracer.register_thread(1, 1, "again"),
        Err(RegisterError::Bound),
        "the word holds slot 0: registering would overwrite it"
    );
    assert_eq!(WORD.with(|w| w.get()), slot, "the word is unchanged");
    // A thread of its own (its own %fs base, word 0) registers.
    std::thread::scope(|s| {
        s.spawn(|| assert_eq!(tracer.register_thread(1, 2, "other"), Ok(())));
    });
}
