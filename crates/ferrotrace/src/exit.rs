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
//! * `fork` without `exec`: the child stops recording (its copy of the runtime has no collector thread); a
//!   child that calls `exec` is traced afresh by the runtime the new image loads, into its own file.

use std::sync::atomic::{AtomicBool, Ordering};

use crate::config::Mode;
use crate::runtime::{self, EndReason, Runtime};

static FORKED_CHILD: AtomicBool = AtomicBool::new(false);

extern "C" fn at_exit() {
    if FORKED_CHILD.load(Ordering::Relaxed) {
        return;
    }
    if let Some(rt) = runtime::get() {
        rt.finish(EndReason::Exit, 0, false);
    }
}

extern "C" fn in_forked_child() {
    FORKED_CHILD.store(true, Ordering::Relaxed);
    if let Some(rt) = runtime::get() {
        rt.recording.store(false, Ordering::Release);
    }
}

extern "C" fn on_signal(sig: libc::c_int) {
    let Some(rt) = runtime::get() else { return };
    if sig == libc::SIGUSR2 {
        rt.dump_requested.store(true, Ordering::Release);
        rt.wake_collector();
        return;
    }
    if !FORKED_CHILD.load(Ordering::Relaxed) {
        rt.finish(EndReason::Signal, sig, true);
    }
    // SAFETY: restoring the default action and re-raising are async-signal-safe. For a fault, returning
    // re-executes the faulting instruction, which now kills the process the default way.
    unsafe {
        libc::signal(sig, libc::SIG_DFL);
        if !matches!(
            sig,
            libc::SIGSEGV | libc::SIGBUS | libc::SIGILL | libc::SIGFPE
        ) {
            libc::raise(sig);
        }
    }
}

fn install_if_default(sig: libc::c_int) {
    // SAFETY: querying and setting signal dispositions with properly initialised sigaction structs.
    unsafe {
        let mut old: libc::sigaction = core::mem::zeroed();
        if libc::sigaction(sig, core::ptr::null(), &mut old) != 0
            || old.sa_sigaction != libc::SIG_DFL
        {
            return;
        }
        let mut sa: libc::sigaction = core::mem::zeroed();
        sa.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as usize;
        sa.sa_flags = libc::SA_RESTART;
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
    for sig in [
        libc::SIGSEGV,
        libc::SIGBUS,
        libc::SIGILL,
        libc::SIGFPE,
        libc::SIGABRT,
        libc::SIGINT,
        libc::SIGTERM,
        libc::SIGHUP,
    ] {
        install_if_default(sig);
    }
    if rt.config.mode == Mode::Flight {
        install_if_default(libc::SIGUSR2);
    }
}
