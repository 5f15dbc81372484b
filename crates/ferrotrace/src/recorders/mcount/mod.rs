//! Tracing programs built with mcount or `__fentry__` calls (`-Zinstrument-mcount`, `gcc -pg`,
//! `gcc -pg -mfentry`), and patching the NOPs of `gcc -pg -mnop-mcount -mrecord-mcount` and
//! `-fpatchable-function-entry=5` into calls, with the same records and chunks as the XRay trampolines.
//!
//! **Entry.** The runtime exports `mcount`, `_mcount` and `__fentry__` (the preload library's override
//! the C library's; a program that links the runtime binds its calls to them). A hook looks its own
//! return address up in the site table ([`crate::recorders::mcount::sites`]: a hash table from return address to
//! record word, built at discovery; word 0 = not traced: filtered out, the runtime's own code, or no
//! frame pointer), and for a
//! traced function pushes `{real return address, its stack slot, word}` on the thread's shadow stack,
//! replaces the return address in the stack with the thread's return stub, and appends an entry record
//! through the same `HOT` cursor as the XRay trampolines. A filtered-out function costs the call, the
//! lookup and a `ret`.
//!
//! **Exit.** The function returns into the stub, which jumps to [`ferrotrace_mcount_return`]: it pops
//! the frame (the one whose slot is the one just returned through), appends the exit record, and `jmp`s
//! to the real return address (a `ret` there would unbalance the return stack buffer for the callers
//! above). Frames above it that never returned (left by `longjmp` or unwinding) are dropped first: the
//! trace shows them as unwound.
//!
//! **Unwinding.** Each thread's return stub has its own DWARF CFI, registered with the unwinder
//! (`__register_frame`): the caller's return address is the shadow frame whose slot is the stub frame's
//! CFA − 8, found by a loop in a DWARF expression. So `_Unwind_RaiseException` (Rust panics, C++
//! exceptions), `_Unwind_Backtrace` (panic backtraces, `backtrace()`) and forced unwinding walk through
//! hooked frames without any change to the stack; a landing pad in a hooked frame keeps its hook and its
//! exit is recorded. To an unwinder the stub is one more frame after each hooked function; the preload
//! library's `_Unwind_Backtrace` leaves those out.
//!
//! **Depth.** Calls nested deeper than the shadow stack (`FERROTRACE_SHADOW_DEPTH`, 16384 frames by
//! default) are not traced: neither entry nor exit is recorded, each is counted as two lost events, and
//! the runtime says how many at the end. `record -D N` makes the shadow stack N frames deep and leaves
//! deeper calls out on purpose (not counted).
//!
//! **Registers.** Hooks preserve every register but the flags; the assembly, with what it saves and
//! why, is the architecture's (`crate::arch::mcount`).

pub mod sites;

use std::sync::atomic::{AtomicU64, Ordering};

use ferrotrace_core::shadow::ShadowFrame;

use crate::arch::mcount::{write_return_stub, EH_FRAME_AT, STUB_AT};
use crate::arch::thread::{tls_offset, PAGE};
use crate::buffers::hot::Hot;
use crate::lifecycle::runtime::Recorder;

/// The mcount recorder's hooks (`recorders::ALL`): a thread's shadow stack and return stub are freed
/// at its exit.
pub const RECORDER: Recorder = Recorder {
    thread_exit: release_thread,
    ..Recorder::NONE
};

/// Bytes of one shadow frame ([`ShadowFrame`]: `{real return address, address of its stack slot,
/// record word}`).
const FRAME: u64 = ShadowFrame::SIZE as u64;

/// The calling thread's return stub (what hooked frames return into), 0 if it has none. Unwinders see it
/// as one frame after each hooked function; a backtrace can leave those out.
#[cfg(feature = "preload")]
pub fn thread_stub() -> u64 {
    Hot::current().shadow_stub.load(Ordering::Relaxed)
}

// ---------------------------------------------------------------------------------------------------
// Per-thread shadow stacks and return stubs.

extern "C" {
    fn __register_frame(begin: *const u8);
    fn __deregister_frame(begin: *const u8);
}

/// Called (all registers saved) when a traced call finds no shadow stack or a full one: returns 0 to
/// retry the hook, 1 to leave the call untraced.
pub(crate) extern "C" fn shadow_slow(_word: u64, _r10: u64) -> u64 {
    let h = Hot::current();
    // A thread has a shadow stack only once a runtime records.
    let Some(rt) = crate::lifecycle::runtime::get() else {
        return 1;
    };
    if h.shadow_base.load(Ordering::Relaxed) != 0 {
        // Full: neither the entry nor the exit of this call is recorded. A thread whose shadow stack
        // was released (it is exiting: code in later thread-local destructors) is not counted, nor a
        // call below the depth the user asked for.
        if rt.config.shadow_limit().is_some() || h.shadow_stub.load(Ordering::Relaxed) == 0 {
            return 1;
        }
        rt.too_deep.fetch_add(1, Ordering::Relaxed);
        crate::buffers::thread::count_lost(2);
        return 1;
    }
    let prepared = crate::buffers::thread::as_runtime(|| {
        rt.lifecycle.is_recording() && prepare(h, rt.config.shadow_frames())
    });
    if prepared == Some(true) {
        0
    } else {
        1
    }
}

/// Gives the calling thread a shadow stack of `depth` frames and its return stub with the stub's unwind
/// information.
fn prepare(h: &Hot, depth: usize) -> bool {
    if tls_offset() != crate::buffers::hot::hot_offset_here() {
        return false;
    }
    let frames = depth as u64 + 1; // + the sentinel
    let shadow_len = ((frames * FRAME) as usize).next_multiple_of(PAGE);
    // SAFETY: fresh anonymous mappings, checked; the stub page is filled then made R-X.
    unsafe {
        let shadow = libc::mmap(
            core::ptr::null_mut(),
            shadow_len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        );
        if shadow == libc::MAP_FAILED {
            return false;
        }
        let page = libc::mmap(
            core::ptr::null_mut(),
            PAGE,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        );
        if page == libc::MAP_FAILED {
            libc::munmap(shadow, shadow_len);
            return false;
        }
        let base = shadow as u64;
        let bytes = core::slice::from_raw_parts_mut(page as *mut u8, PAGE);
        let top_addr = &h.shadow_top as *const AtomicU64 as u64;
        let stub = write_return_stub(bytes, page as u64, top_addr, base);
        let Some(stub) =
            stub.filter(|_| libc::mprotect(page, PAGE, libc::PROT_READ | libc::PROT_EXEC) == 0)
        else {
            libc::munmap(page, PAGE);
            libc::munmap(shadow, shadow_len);
            return false;
        };
        __register_frame(bytes.as_ptr().add(EH_FRAME_AT));
        h.shadow_base.store(base, Ordering::Relaxed);
        h.shadow_stub.store(stub, Ordering::Relaxed);
        h.shadow_limit
            .store(base + frames * FRAME, Ordering::Relaxed);
        h.shadow_top.store(base + FRAME, Ordering::Relaxed);
    }
    true
}

/// At thread exit (no hooked frame of the thread is left): unregisters and unmaps the thread's return
/// stub and shadow stack; later calls go to the slow path, which leaves them untraced.
pub fn release_thread() {
    let h = Hot::current();
    let base = h.shadow_base.load(Ordering::Relaxed);
    if base == 0 {
        return;
    }
    let frames = (h.shadow_limit.load(Ordering::Relaxed) - base) / FRAME;
    let page = h.shadow_stub.load(Ordering::Relaxed) - STUB_AT as u64;
    h.shadow_top.store(0, Ordering::Relaxed);
    h.shadow_limit.store(0, Ordering::Relaxed);
    h.shadow_stub.store(0, Ordering::Relaxed);
    // SAFETY: the page and the shadow stack are this thread's own mappings made by `prepare`, whose
    // frame information was registered there; nothing refers to them any more.
    unsafe {
        __deregister_frame((page as usize + EH_FRAME_AT) as *const u8);
        libc::munmap(page as *mut libc::c_void, PAGE);
        libc::munmap(
            base as *mut libc::c_void,
            ((frames * FRAME) as usize).next_multiple_of(PAGE),
        );
    }
    // Left set so that the thread's later calls find "full" and stay untraced, without a new stack.
    h.shadow_base.store(base, Ordering::Relaxed);
}

/// Called (all registers saved) by the return trampoline when the top frame's slot is not `slot`:
/// frames above the returning one were left without returning (`longjmp`, unwinding). Pops them and
/// returns 0; aborts with a message if the returning frame is not on the shadow stack at all.
pub(crate) extern "C" fn resync(slot: u64, _r10: u64) -> u64 {
    let h = Hot::current();
    let base = h.shadow_base.load(Ordering::Relaxed);
    let mut frame = h.shadow_top.load(Ordering::Relaxed);
    while frame > base + FRAME {
        frame -= FRAME;
        // SAFETY: between the sentinel and the top: frames of this thread's shadow stack.
        if unsafe { (*(frame as *const ShadowFrame)).slot } == slot {
            h.shadow_top.store(frame + FRAME, Ordering::Relaxed);
            return 0;
        }
    }
    let msg = b"ferrotrace: a traced function returned through a stack slot the shadow stack does not know \
(did the program switch stacks: swapcontext, coroutines?); mcount tracing cannot follow it, aborting\n";
    // SAFETY: write(2) and abort(3) are async-signal-safe; the real return address is lost.
    unsafe {
        libc::write(2, msg.as_ptr().cast(), msg.len());
        libc::abort();
    }
}
