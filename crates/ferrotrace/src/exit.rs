//! Making sure nothing recorded is lost at the end: `exit` from any thread, fatal signals, Ctrl-C, fork.
//!
//! * `atexit`: a normal exit (return from `main`, `std::process::exit` from any thread) finishes the
//!   trace with every thread's partly filled chunk.
//! * Faults (SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT — a Rust panic with `panic=abort` ends in SIGABRT
//!   or SIGILL) and every other signal whose default action ends the process ([`TERMINATING`]: SIGINT,
//!   SIGTERM, SIGHUP, SIGPIPE, SIGALRM, …): the handler stops all threads, waits a bounded time for the
//!   collector to write the End chunk, restores the default action and ends the process by the same
//!   signal, so it dies exactly as it would have. Handlers are installed only where the program left the
//!   default action; a program that installs its own later takes over.
//! * Any number of signals, in any order, from anyone: the first one finishes the trace; while it does,
//!   every terminating signal is blocked on that thread (the handlers' mask), and one that reaches another
//!   thread waits for the finish to end, then lets the first signal end the process. The runtime's own
//!   thread (the collector) blocks every signal, so a signal never runs a handler there, where finishing
//!   would wait for itself.
//! * SIGUSR2 in flight mode writes the flight ring.
//! * `fork` without `exec`: the child's copy of the runtime is its parent's and has no collector thread.
//!   The child forgets it, and at its first traced event starts a runtime of its own writing
//!   `FILE.<pid>` ([`runtime::restart_in_forked_child`]); a child that calls `exec` before that is traced
//!   afresh by the runtime the new image loads, into the same file name.

use std::sync::atomic::{AtomicBool, Ordering};

use crate::config::Mode;
use crate::runtime::{self, EndReason, Finished, Runtime};

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
    // SAFETY: gettid and getpid are async-signal-safe, as is the name's prctl.
    let (tid, pid, name) = unsafe {
        (
            libc::syscall(libc::SYS_gettid) as u32,
            libc::getpid() as u32,
            crate::thread::thread_name_bytes(),
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

/// Signals whose default action ends the process, that may come from outside at any time (not faults of
/// the running code), and that the runtime handles where the program left the default: the trace is
/// finished before the process ends. While a handler runs, all of them are blocked on its thread.
pub const TERMINATING: [libc::c_int; 13] = [
    libc::SIGHUP,
    libc::SIGINT,
    libc::SIGQUIT,
    libc::SIGABRT,
    libc::SIGUSR1,
    libc::SIGUSR2,
    libc::SIGPIPE,
    libc::SIGALRM,
    libc::SIGTERM,
    libc::SIGXCPU,
    libc::SIGXFSZ,
    libc::SIGVTALRM,
    libc::SIGPROF,
];

/// The [`TERMINATING`] signals as a set.
fn terminating_set() -> libc::sigset_t {
    // SAFETY: sigemptyset/sigaddset on a local set.
    unsafe {
        let mut set: libc::sigset_t = core::mem::zeroed();
        libc::sigemptyset(&mut set);
        for sig in TERMINATING {
            libc::sigaddset(&mut set, sig);
        }
        set
    }
}

/// Blocks the [`TERMINATING`] signals on the calling thread until dropped (then restores its mask).
/// Async-signal-safe.
pub struct TerminatingBlocked(libc::sigset_t);

impl TerminatingBlocked {
    /// Blocks them now.
    pub fn now() -> TerminatingBlocked {
        let set = terminating_set();
        // SAFETY: pthread_sigmask with valid sets; the old mask is kept to restore.
        unsafe {
            let mut old: libc::sigset_t = core::mem::zeroed();
            libc::pthread_sigmask(libc::SIG_BLOCK, &set, &mut old);
            TerminatingBlocked(old)
        }
    }
}

impl Drop for TerminatingBlocked {
    fn drop(&mut self) {
        // SAFETY: restoring the mask saved by `now`.
        unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &self.0, core::ptr::null_mut()) };
    }
}

/// Runs `f` on a new thread that blocks every signal (it inherits the mask of the thread that creates
/// it, blocked here for the moment of the creation): the runtime's own threads must never run a
/// handler, and a process-directed signal then always goes to a thread of the program.
pub fn spawn_without_signals<F: FnOnce() + Send + 'static>(
    name: &str,
    f: F,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    // SAFETY: pthread_sigmask with a full set, restored right after the thread is created.
    unsafe {
        let mut all: libc::sigset_t = core::mem::zeroed();
        let mut old: libc::sigset_t = core::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
        let spawned = std::thread::Builder::new().name(name.into()).spawn(f);
        libc::pthread_sigmask(libc::SIG_SETMASK, &old, core::ptr::null_mut());
        spawned
    }
}

/// True for a signal the kernel raised because of the instruction being executed (a fault), rather than
/// one sent by `kill`, `raise` or `abort`: returning from the handler then executes the instruction
/// again, which faults again.
fn is_fault(info: *const libc::siginfo_t) -> bool {
    // SAFETY: the kernel passes a valid siginfo to SA_SIGINFO handlers.
    let code = unsafe { (*info).si_code };
    code > 0 && code != libc::SI_KERNEL
}

/// Ends the process by `sig`, its default action, from a handler of `sig`: the trace is finished. For a
/// fault, returning from the handler re-executes the faulting instruction (so a core dump shows the
/// fault where it happened); the terminating signals stay blocked then (`ctx`'s mask, which the kernel
/// restores on return), so that none that arrived meanwhile ends the process by another signal first.
/// Otherwise `sig` is raised again and unblocked alone.
fn die_by(sig: libc::c_int, info: *const libc::siginfo_t, ctx: *mut libc::c_void) {
    // SAFETY: restoring the default action, raising and unmasking are async-signal-safe; `ctx` is the
    // ucontext the kernel passed to this SA_SIGINFO handler.
    unsafe {
        libc::signal(sig, libc::SIG_DFL);
        if is_fault(info) {
            let uc = ctx as *mut libc::ucontext_t;
            for s in TERMINATING {
                libc::sigaddset(&mut (*uc).uc_sigmask, s);
            }
            return;
        }
        libc::raise(sig);
        let mut only: libc::sigset_t = core::mem::zeroed();
        libc::sigemptyset(&mut only);
        libc::sigaddset(&mut only, sig);
        libc::pthread_sigmask(libc::SIG_UNBLOCK, &only, core::ptr::null_mut());
    }
}

/// Finishes the trace from a handler of `sig` (which ends the process): `signal` is what the End chunk
/// says the process died of. When another thread is finishing already, this waits for it, and then, if
/// that was for a signal too, lets that signal end the process rather than this one (so that the End
/// chunk names the signal the process died of).
fn finish_for_signal(rt: &Runtime, signal: libc::c_int) {
    if rt.finish(EndReason::Signal, signal, true) == Finished::ByOther
        && rt.end_reason.load(Ordering::Relaxed) == EndReason::Signal as u32
    {
        // The finisher raises its signal as soon as it is done: give it a moment.
        std::thread::sleep(std::time::Duration::from_secs(1));
    }
}

/// SIGSEGV/SIGBUS, on the thread's alternate stack: finish the trace, then end as the program would
/// have (a Rust stack overflow prints std's message and aborts; anything else dies by the signal).
extern "C" fn on_fault(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo for SA_SIGINFO handlers.
    let addr = unsafe { (*info).si_addr() } as usize;
    let overflow = crate::thread::is_stack_overflow(addr) && RUST_STD.load(Ordering::Relaxed);
    if let Some(rt) = runtime::get() {
        // A Rust stack overflow ends by SIGABRT (std's own handler aborts): say so in the End chunk.
        finish_for_signal(rt, if overflow { libc::SIGABRT } else { sig });
    }
    if overflow {
        write_overflow_message();
        // SAFETY: what std does after its message.
        unsafe { libc::abort() };
    }
    die_by(sig, info, ctx);
}

extern "C" fn at_exit() {
    if let Some(rt) = runtime::get() {
        let _ = rt.finish(EndReason::Exit, 0, false);
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

extern "C" fn on_signal(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    if let Some(rt) = runtime::get() {
        if sig == libc::SIGUSR2 && rt.config.mode == Mode::Flight {
            rt.dump_requested.store(true, Ordering::Release);
            rt.wake_collector();
            return;
        }
        finish_for_signal(rt, sig);
    }
    die_by(sig, info, ctx);
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
        // A second terminating signal must not interrupt the finish on this thread.
        sa.sa_mask = terminating_set();
        libc::sigaction(sig, &sa, core::ptr::null_mut());
    }
}

/// Registers the exit, signal and fork hooks.
pub fn install() {
    // SAFETY: registering plain extern "C" callbacks.
    unsafe {
        libc::atexit(at_exit);
        libc::pthread_atfork(None, None, Some(in_forked_child));
    }
    // Faults run on the thread's alternate stack (SA_ONSTACK): the stack itself may be what overflowed.
    let on_fault =
        on_fault as extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) as usize;
    let on_signal =
        on_signal as extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) as usize;
    for sig in [libc::SIGSEGV, libc::SIGBUS] {
        install_if_default(sig, on_fault, libc::SA_SIGINFO | libc::SA_ONSTACK);
    }
    for sig in [libc::SIGILL, libc::SIGFPE].into_iter().chain(TERMINATING) {
        install_if_default(sig, on_signal, libc::SA_SIGINFO | libc::SA_RESTART);
    }
}
