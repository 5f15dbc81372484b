//! Making sure nothing recorded is lost at the end: `exit` from any thread, fatal signals, Ctrl-C, fork.
//!
//! * `atexit`: a normal exit (return from `main`, `std::process::exit` from any thread) finishes the
//!   trace with every thread's partly filled chunk.
//! * Fatal signals (SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT — a Rust panic with `panic=abort` ends in
//!   SIGABRT or SIGILL) and terminating ones (SIGINT, SIGTERM, SIGHUP): best effort — the handler stops
//!   all threads, waits a bounded time for the collector to write the End chunk, restores the default
//!   action and re-raises, so the process dies exactly as it would have. Handlers are installed only where
//!   the program left the default action; a program that installs its own later takes over.
//! * SIGUSR2 in flight mode writes the flight ring.
//! * `fork` without `exec`: the child's copy of the runtime is its parent's and has no collector thread.
//!   The child forgets it, and at its first traced event starts a runtime of its own writing
//!   `FILE.<pid>` ([`runtime::restart_in_forked_child`]); a child that calls `exec` before that is traced
//!   afresh by the runtime the new image loads, into the same file name.

use std::sync::atomic::{AtomicBool, Ordering};

use crate::config::Mode;
use crate::runtime::{self, EndReason, Runtime};

/// Set in a forked child until its first traced event starts the child's own runtime.
static RESTART_PENDING: AtomicBool = AtomicBool::new(false);

/// True, once, in a forked child that has not started its own runtime yet.
pub fn take_restart_pending() -> bool {
    RESTART_PENDING.load(Ordering::Relaxed) && RESTART_PENDING.swap(false, Ordering::Relaxed)
}

/// The program links Rust's std, whose own stack-overflow handler the runtime's displaces: on a stack
/// overflow the runtime then does what std would (message, abort).
pub static RUST_STD: AtomicBool = AtomicBool::new(false);

/// Writes std's stack-overflow message for the calling thread, without allocating.
fn write_overflow_message() {
    let mut buf = [0u8; 160];
    let mut n = 0;
    let mut put = |b: &[u8]| {
        let k = b.len().min(buf.len() - n);
        buf[n..n + k].copy_from_slice(&b[..k]);
        n += k;
    };
    // SAFETY: gettid, getpid and prctl(PR_GET_NAME) are async-signal-safe; the name buffer is 17 bytes.
    let (tid, pid, name) = unsafe {
        let mut name = [0u8; 17];
        libc::prctl(
            libc::PR_GET_NAME,
            name.as_mut_ptr() as libc::c_ulong,
            0,
            0,
            0,
        );
        (
            libc::syscall(libc::SYS_gettid) as u32,
            libc::getpid() as u32,
            name,
        )
    };
    put(b"\nthread '");
    if tid == pid {
        put(b"main");
    } else {
        put(&name[..name.iter().position(|&b| b == 0).unwrap_or(16)]);
    }
    put(b"' (");
    let mut digits = [0u8; 10];
    let mut d = digits.len();
    let mut t = tid;
    loop {
        d -= 1;
        digits[d] = b'0' + (t % 10) as u8;
        t /= 10;
        if t == 0 {
            break;
        }
    }
    put(&digits[d..]);
    put(b") has overflowed its stack\nfatal runtime error: stack overflow, aborting\n");
    // SAFETY: write(2) is async-signal-safe.
    unsafe { libc::write(2, buf.as_ptr().cast(), n) };
}

/// SIGSEGV/SIGBUS, on the thread's alternate stack: finish the trace, then end as the program would
/// have (a Rust stack overflow prints std's message and aborts; anything else dies by the signal).
extern "C" fn on_fault(sig: libc::c_int, info: *mut libc::siginfo_t, _ctx: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo for SA_SIGINFO handlers.
    let addr = unsafe { (*info).si_addr() } as usize;
    let overflow = crate::thread::is_stack_overflow(addr);
    if let Some(rt) = runtime::get() {
        rt.finish(EndReason::Signal, sig, true);
    }
    if overflow && RUST_STD.load(Ordering::Relaxed) {
        write_overflow_message();
        // SAFETY: what std does after its message.
        unsafe { libc::abort() };
    }
    // SAFETY: restoring the default action; returning re-executes the faulting instruction, which now
    // kills the process the default way.
    unsafe { libc::signal(sig, libc::SIG_DFL) };
}

extern "C" fn at_exit() {
    if let Some(rt) = runtime::get() {
        rt.finish(EndReason::Exit, 0, false);
    }
}

/// Runs in the child right after `fork`, on the thread that forked (the child's only thread): nothing
/// heavy here, the child may be about to `exec`.
extern "C" fn in_forked_child() {
    if let Some(parents) = runtime::get() {
        // The child's copy of the parent's runtime: nothing may record into it (no collector would
        // ever take the chunks).
        parents.recording.store(false, Ordering::Release);
        crate::thread::forget_current_thread();
        RESTART_PENDING.store(true, Ordering::Relaxed);
    }
}

extern "C" fn on_signal(sig: libc::c_int) {
    let Some(rt) = runtime::get() else { return };
    if sig == libc::SIGUSR2 {
        rt.dump_requested.store(true, Ordering::Release);
        rt.wake_collector();
        return;
    }
    rt.finish(EndReason::Signal, sig, true);
    // SAFETY: restoring the default action and re-raising are async-signal-safe. For a fault, returning
    // re-executes the faulting instruction, which now kills the process the default way.
    unsafe {
        libc::signal(sig, libc::SIG_DFL);
        if !matches!(sig, libc::SIGILL | libc::SIGFPE) {
            libc::raise(sig);
        }
    }
}

/// Installs `handler` (a `sa_sigaction` address) with `flags` for `sig`, only if the program left `sig` at
/// its default action: a handler the program installs itself stays in charge.
fn install_if_default(sig: libc::c_int, handler: usize, flags: libc::c_int) {
    // SAFETY: querying and setting signal dispositions with properly initialised sigaction structs.
    unsafe {
        let mut old: libc::sigaction = core::mem::zeroed();
        if libc::sigaction(sig, core::ptr::null(), &mut old) != 0
            || old.sa_sigaction != libc::SIG_DFL
        {
            return;
        }
        let mut sa: libc::sigaction = core::mem::zeroed();
        sa.sa_sigaction = handler;
        sa.sa_flags = flags;
        libc::sigemptyset(&mut sa.sa_mask);
        libc::sigaction(sig, &sa, core::ptr::null_mut());
    }
}

/// Registers the exit, signal and fork hooks.
pub fn install(rt: &Runtime) {
    // SAFETY: registering plain extern "C" callbacks.
    unsafe {
        libc::atexit(at_exit);
        libc::pthread_atfork(None, None, Some(in_forked_child));
    }
    // Faults run on the thread's alternate stack (SA_ONSTACK): the stack itself may be what overflowed.
    let on_fault =
        on_fault as extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) as usize;
    let on_signal = on_signal as extern "C" fn(libc::c_int) as usize;
    for sig in [libc::SIGSEGV, libc::SIGBUS] {
        install_if_default(sig, on_fault, libc::SA_SIGINFO | libc::SA_ONSTACK);
    }
    for sig in [
        libc::SIGILL,
        libc::SIGFPE,
        libc::SIGABRT,
        libc::SIGINT,
        libc::SIGTERM,
        libc::SIGHUP,
    ] {
        install_if_default(sig, on_signal, libc::SA_RESTART);
    }
    if rt.config.mode == Mode::Flight {
        install_if_default(libc::SIGUSR2, on_signal, libc::SA_RESTART);
    }
}
