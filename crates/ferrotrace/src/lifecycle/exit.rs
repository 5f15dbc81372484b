//! The end of the trace ([`finish`]), and making sure it happens whatever ends the process: `exit` from
//! any thread, fatal signals, Ctrl-C, fork.
//!
//! * `atexit`: a normal exit (return from `main`, `std::process::exit` from any thread) finishes the
//!   trace with every thread's partly filled chunk; in the preload library after the program's atexit
//!   handlers and every ELF destructor, whose frees are recorded ([`install`]).
//! * Faults (SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT — a Rust panic with `panic=abort` ends in SIGABRT
//!   or SIGILL) and every other signal whose default action ends the process ([`TERMINATING`]: SIGINT,
//!   SIGTERM, SIGHUP, SIGPIPE, SIGALRM, …): the handler stops all threads, waits a bounded time for the
//!   collector to write the End chunk, restores the default action and ends the process by the same
//!   signal, so it dies exactly as it would have. Handlers are installed only where the program left the
//!   default action; a program that installs its own later takes over, also when its handler calls the
//!   runtime's after its own (signal-hook-registry's chaining, under tokio's `ctrl_c`): the runtime's
//!   then ends nothing ([`taken_over`]).
//! * Any number of signals, in any order, from anyone: the first one finishes the trace; while it does,
//!   every terminating signal is blocked on that thread (the handlers' mask), and one that reaches another
//!   thread waits for the finish to end, then lets the first signal end the process. The runtime's own
//!   thread (the collector) blocks every signal, so a signal never runs a handler there, where finishing
//!   would wait for itself.
//! * SIGUSR2 in flight mode writes the flight ring.
//! * `fork` without `exec`: the child's copy of the runtime is its parent's and has no collector thread.
//!   The child forgets it, and at its first traced event starts a runtime of its own writing
//!   `FILE.<pid>` ([`start::restart_in_forked_child`](crate::lifecycle::start::restart_in_forked_child)); a child that calls `exec` before that is traced
//!   afresh by the runtime the new image loads, into the same file name.

use std::sync::atomic::Ordering;
use std::time::Duration;

use ferrotrace_core::env;

use crate::lifecycle::config::Mode;
use crate::lifecycle::runtime::{self, EndReason, Runtime};

/// The longest a finish waits for the collector to write everything (from a signal handler: 3 s).
const FINISH_LIMIT: Duration = Duration::from_secs(30);

/// What a call of [`finish`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Finished {
    /// This call finished the trace.
    Here,
    /// Another call (on another thread, or earlier) finished it; this one waited until it was over.
    ByOther,
    /// The runtime is a forked parent's copy, which records nothing in this process.
    NotHere,
}

/// Ends the trace: stops every thread, hands their chunks to the collector, waits (bounded) until the
/// End chunk is written. Idempotent; usable from a signal handler with `from_signal`: it neither
/// allocates nor waits without bound. A call while another thread is finishing waits until that
/// finish is over (the process must not end before it), and says so.
/// A forked child's copy of its parent's runtime does nothing here (the parent finishes its own).
pub fn finish(rt: &'static Runtime, reason: EndReason, signal: i32, from_signal: bool) -> Finished {
    if !rt.records_this_process() {
        return Finished::NotHere;
    }
    // A terminating signal arriving on this thread now would run its handler in the middle of
    // this finish and wait for it forever: it waits until the finish is over instead. (In a signal
    // handler they are blocked already, by the handler's mask.)
    let _blocked = crate::lifecycle::exit::TerminatingBlocked::now();
    if !rt.lifecycle.claim_finish(reason, signal) {
        rt.lifecycle
            .wait_finish_over(FINISH_LIMIT + Duration::from_secs(5));
        return Finished::ByOther;
    }
    crate::buffers::thread::flush_all(rt, from_signal);
    rt.lifecycle.threads_stopped();
    let limit = if from_signal {
        Duration::from_secs(3)
    } else {
        FINISH_LIMIT
    };
    // A deferred collector (nothing had filled a chunk) starts now; in a signal handler, where no
    // thread may be started, a copy of the process does its work.
    let written_by_copy =
        from_signal && !rt.lifecycle.has_collector() && write_end_in_child(rt, limit);
    if !written_by_copy {
        if !from_signal {
            (rt.upcalls.ensure_collector)(rt);
        }
        rt.lifecycle.wait_end_written(limit);
    }
    let too_deep = rt.too_deep.load(Ordering::Relaxed);
    if too_deep > 0 && !from_signal {
        say!(
            "ferrotrace: {too_deep} calls nested deeper than the shadow stack ({} frames) were not traced \
             (counted as lost events); {} sets its depth",
            rt.config.shadow_frames(),
            env::SHADOW_DEPTH
        );
    }
    rt.lifecycle.finish_over();
    Finished::Here
}

/// For a finish in a signal handler when the collector was deferred and never started: starting a
/// thread here could deadlock (it allocates, and the signal may have interrupted the allocator), so a
/// copy of the process, made by the `fork` system call itself, runs the collector's last round (every
/// queued chunk, then End) and exits, while this thread waits for it, at most `limit` (then kills it).
/// Not through the C library's `fork`: its handlers would run in the signal handler (the allocator's
/// take every arena lock; the runtime's mark the copy as a forked child that records nothing).
/// Whatever happens in the copy, this process goes on to die as it would have. False when there was
/// nothing to write with (a thread is starting the collector this very moment: wait for it).
/// Allocation-free in this process.
fn write_end_in_child(rt: &'static Runtime, limit: Duration) -> bool {
    let Ok(mut deferred) = rt.deferred_collector.try_lock() else {
        return false;
    };
    let Some(writer_and_path) = deferred.take() else {
        return false;
    };
    drop(deferred);
    rt.pool.inherit_on_fork();
    // SAFETY: the raw system call, which copies the process and returns twice; the child runs the
    // collector's loop on its copy and leaves by `_exit`, running no handler of the program's.
    let pid = unsafe { libc::syscall(libc::SYS_fork) } as libc::pid_t;
    if pid == 0 {
        let (writer, path) = writer_and_path;
        crate::buffers::collector::run(rt, writer, path);
        // SAFETY: ends the copy without exit handlers (they are the program's, run by this process).
        unsafe { libc::_exit(0) };
    }
    // Freeing them here could re-enter an allocator the signal interrupted; the process is ending.
    std::mem::forget(writer_and_path);
    if pid < 0 {
        return true;
    }
    let start = std::time::Instant::now();
    loop {
        let mut status = 0;
        // SAFETY: waiting for our own child, without blocking.
        let r = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        // Done, or reaped by someone else (the program's SIGCHLD handler, or SIGCHLD ignored).
        if r != 0 {
            return true;
        }
        if start.elapsed() > limit {
            // SAFETY: our child, killed and reaped.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, &mut status, 0);
            }
            return true;
        }
        std::thread::sleep(Duration::from_micros(200));
    }
}

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
            crate::buffers::thread::thread_name_bytes(),
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
    stack_size: Option<usize>,
    f: F,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    // SAFETY: pthread_sigmask with a full set, restored right after the thread is created.
    unsafe {
        let mut all: libc::sigset_t = core::mem::zeroed();
        let mut old: libc::sigset_t = core::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
        let mut builder = std::thread::Builder::new().name(name.into());
        if let Some(bytes) = stack_size {
            builder = builder.stack_size(bytes);
        }
        let spawned = builder.spawn(f);
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
        let mut default: libc::sigaction = core::mem::zeroed();
        default.sa_sigaction = libc::SIG_DFL;
        real_sigaction(sig, &default, core::ptr::null_mut());
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
fn finish_for_signal(rt: &'static Runtime, signal: libc::c_int) {
    if finish(rt, EndReason::Signal, signal, true) == Finished::ByOther
        && rt.lifecycle.end().0 == EndReason::Signal
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
    let rt = runtime::get();
    let overflow =
        crate::buffers::thread::is_stack_overflow(addr) && rt.is_some_and(|rt| rt.program.rust_std);
    if let Some(rt) = rt {
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

extern "C" fn at_exit(_: *mut libc::c_void) {
    finish_at_exit(false);
}

extern "C" {
    /// glibc's registration behind `atexit`, which the C library's `atexit` calls with the caller's
    /// `__dso_handle`: a handler registered that way runs when that object's destructors run, inside
    /// `_dl_fini`. Registered with no object, it runs only from `exit`'s own list.
    fn __cxa_atexit(
        f: extern "C" fn(*mut libc::c_void),
        arg: *mut libc::c_void,
        dso: *mut libc::c_void,
    ) -> libc::c_int;
}

/// Finishes the running runtime's trace, if any, because the process exits (`from_signal`: with the
/// bounded waits of a signal handler, for `_exit` and `_Exit`, which handlers may call).
pub fn finish_at_exit(from_signal: bool) {
    if let Some(rt) = runtime::get() {
        let _ = finish(rt, EndReason::Exit, 0, from_signal);
    }
}

/// Runs in the child right after `fork`, on the thread that forked (the child's only thread): nothing
/// heavy here, the child may be about to `exec`.
extern "C" fn in_forked_child() {
    if let Some(parents) = runtime::get() {
        // The child's copy of the parent's runtime: nothing may record into it (no collector would
        // ever take the chunks); the child's first traced event starts the child's own.
        parents.lifecycle.forked();
        crate::buffers::thread::forget_current_thread();
    }
}

extern "C" fn on_signal(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    note_arrival(sig);
    if let Some(rt) = runtime::get() {
        if sig == libc::SIGUSR2 && rt.config.mode == Mode::Flight {
            rt.lifecycle.request_dump();
            return;
        }
        if taken_over(sig) {
            return;
        }
        finish_for_signal(rt, sig);
    }
    die_by(sig, info, ctx);
}

/// True when the handler installed for `sig` is no longer [`on_signal`]: the program installed its own
/// after the runtime's, and that one called this one, as the handler it replaced (tokio's
/// `signal::ctrl_c` and everything else built on signal-hook-registry run the previous handler after
/// theirs). The program's handler is in charge then, as when it replaces the default action: the
/// signal ends nothing here (mini-redis shuts down gracefully on Ctrl-C, and must under `record`).
fn taken_over(sig: libc::c_int) -> bool {
    // SAFETY: `sigaction` only reads into a zeroed struct; it is async-signal-safe, and `real_sigaction`
    // resolved the C library's at installation, before any handler of the runtime's could run.
    unsafe {
        let mut now: libc::sigaction = core::mem::zeroed();
        real_sigaction(sig, core::ptr::null(), &mut now) == 0
            && now.sa_sigaction != on_signal as SigAction as usize
    }
}

/// Installs `handler` (a `sa_sigaction` address) with `flags` for `sig`, only if the program left `sig` at
/// its default action: a handler the program installs itself stays in charge.
fn install_if_default(sig: libc::c_int, handler: usize, flags: libc::c_int) {
    // SAFETY: querying and setting signal dispositions with properly initialised sigaction structs.
    unsafe {
        let mut old: libc::sigaction = core::mem::zeroed();
        if real_sigaction(sig, core::ptr::null(), &mut old) != 0
            || old.sa_sigaction != libc::SIG_DFL
        {
            return;
        }
        real_sigaction(sig, &runtime_action(handler, flags), core::ptr::null_mut());
    }
    if handler == on_signal as SigAction as usize {
        DEFAULT_AT_START.fetch_or(1 << sig, Ordering::Relaxed);
        set_observed(sig, true);
    }
}

/// A sigaction of the runtime's: `handler` with `flags`, every terminating signal blocked while it runs
/// (a second one must not interrupt the finish on this thread).
fn runtime_action(handler: usize, flags: libc::c_int) -> libc::sigaction {
    // SAFETY: an all-zero sigaction is valid; the mask is set below.
    let mut sa: libc::sigaction = unsafe { core::mem::zeroed() };
    sa.sa_sigaction = handler;
    sa.sa_flags = flags;
    sa.sa_mask = terminating_set();
    sa
}

type SigAction = extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void);
type SigactionFn =
    unsafe extern "C" fn(libc::c_int, *const libc::sigaction, *mut libc::sigaction) -> libc::c_int;

/// The C library's `sigaction`, never an interposed one: the preload library defines `sigaction`
/// itself ([`program_sigaction`]), and calls from inside it would come back to it.
///
/// # Safety
/// Same contract as `sigaction(2)`.
unsafe fn real_sigaction(
    sig: libc::c_int,
    act: *const libc::sigaction,
    old: *mut libc::sigaction,
) -> libc::c_int {
    // Outside `crate::state`: the C library's function, the same for the process's life.
    static REAL: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let mut f = REAL.load(Ordering::Acquire);
    if f == 0 {
        // SAFETY: looking a symbol up by a NUL-terminated name.
        f = unsafe { libc::dlsym(libc::RTLD_NEXT, c"sigaction".as_ptr()) } as usize;
        if f == 0 {
            return -1;
        }
        REAL.store(f, Ordering::Release);
    }
    // SAFETY: RTLD_NEXT's "sigaction" is the C library's, with this signature; the caller keeps
    // sigaction's contract.
    unsafe {
        let f: SigactionFn = core::mem::transmute::<usize, SigactionFn>(f);
        f(sig, act, old)
    }
}

/// Signals (bits) the program had at their default action when the runtime started, and that the
/// runtime's handler therefore handles: the program's own SIG_DFL for one of them reinstates that
/// handler (the default action, with the trace finished first).
// Outside `crate::state`, as `CHAINED` and `install_once`'s `ONCE`: the signal handlers' own, installed
// once per process and read in signal handlers; no recording resets them.
static DEFAULT_AT_START: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// The signal table shared with `ferrotrace record`, in the process that maps it (a forked child
/// has a copy of its parent's runtime, but not the mapping). Async-signal-safe.
fn shared_signals() -> Option<&'static ferrotrace_core::shared::Signals> {
    runtime::get()
        .filter(|rt| rt.records_this_process())
        .and_then(|rt| rt.pool.signals())
}

fn set_observed(sig: libc::c_int, observed: bool) {
    if let Some(s) = shared_signals() {
        if ferrotrace_core::shared::RELAYED.contains(&sig) {
            s.set_observed(sig, observed);
        }
    }
}

/// Notes the arrival of `sig` where `ferrotrace record` reads it (async-signal-safe).
fn note_arrival(sig: libc::c_int) {
    if let Some(s) = shared_signals() {
        s.arrived(sig, crate::buffers::clock::monotonic_ns());
    }
}

/// A handler the program installed for a signal `record` passes on, called through [`observe`].
#[cfg(feature = "preload")]
struct Chained {
    handler: std::sync::atomic::AtomicUsize,
    siginfo: std::sync::atomic::AtomicBool,
}

#[cfg(feature = "preload")]
static CHAINED: [Chained; 65] = [const {
    Chained {
        handler: std::sync::atomic::AtomicUsize::new(0),
        siginfo: std::sync::atomic::AtomicBool::new(false),
    }
}; 65];

/// Installed in place of a program's handler for a signal `record` passes on: notes the arrival (so
/// that record does not deliver the same signal a second time) and calls the program's handler.
#[cfg(feature = "preload")]
extern "C" fn observe(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    note_arrival(sig);
    let Some(c) = CHAINED.get(sig as usize) else {
        return;
    };
    let h = c.handler.load(Ordering::Acquire);
    if h == 0 {
        return;
    }
    // SAFETY: `h` is the handler the program gave, of the form its SA_SIGINFO flag says.
    unsafe {
        if c.siginfo.load(Ordering::Acquire) {
            core::mem::transmute::<usize, SigAction>(h)(sig, info, ctx)
        } else {
            core::mem::transmute::<usize, extern "C" fn(libc::c_int)>(h)(sig)
        }
    }
}

/// What the program's `sigaction` does when the preload library interposes it. For the signals
/// `ferrotrace record` passes on, while the pool is shared with record: a handler the program
/// installs runs behind `observe`, which notes each arrival; SIG_DFL for a signal the runtime
/// handles keeps the runtime's handler (the default action, the trace finished first); the program
/// reads back what it set (its own handler, or SIG_DFL), never the runtime's. Everything else goes
/// to the C library unchanged.
///
/// # Safety
/// Same contract as `sigaction(2)`.
#[cfg(feature = "preload")]
pub unsafe fn program_sigaction(
    sig: libc::c_int,
    act: *const libc::sigaction,
    old: *mut libc::sigaction,
) -> libc::c_int {
    if shared_signals().is_none() || !ferrotrace_core::shared::RELAYED.contains(&sig) {
        // SAFETY: the caller keeps sigaction's contract.
        return unsafe { real_sigaction(sig, act, old) };
    }
    // SAFETY: an all-zero sigaction is valid; the query writes into it.
    let mut current: libc::sigaction = unsafe { core::mem::zeroed() };
    // SAFETY: a query into a valid out-struct.
    if unsafe { real_sigaction(sig, core::ptr::null(), &mut current) } != 0 {
        return -1;
    }
    // What the program set, as it should read it back.
    let mut view = current;
    if current.sa_sigaction == observe as SigAction as usize {
        let c = &CHAINED[sig as usize];
        view.sa_sigaction = c.handler.load(Ordering::Acquire);
        if !c.siginfo.load(Ordering::Acquire) {
            view.sa_flags &= !libc::SA_SIGINFO;
        }
    } else if current.sa_sigaction == on_signal as SigAction as usize {
        view.sa_sigaction = libc::SIG_DFL;
        view.sa_flags = 0;
    }
    // SAFETY: the caller passes a valid sigaction or null.
    let result = match unsafe { act.as_ref() } {
        None => 0,
        Some(a)
            if a.sa_sigaction == libc::SIG_DFL
                && DEFAULT_AT_START.load(Ordering::Relaxed) & (1 << sig) != 0 =>
        {
            set_observed(sig, true);
            let ours = runtime_action(
                on_signal as SigAction as usize,
                libc::SA_SIGINFO | libc::SA_RESTART,
            );
            // SAFETY: installing a valid sigaction.
            unsafe { real_sigaction(sig, &ours, core::ptr::null_mut()) }
        }
        Some(a) if a.sa_sigaction == libc::SIG_DFL || a.sa_sigaction == libc::SIG_IGN => {
            set_observed(sig, false);
            // SAFETY: the program's own sigaction, as it gave it.
            unsafe { real_sigaction(sig, act, core::ptr::null_mut()) }
        }
        Some(a) => {
            let c = &CHAINED[sig as usize];
            c.siginfo
                .store(a.sa_flags & libc::SA_SIGINFO != 0, Ordering::Release);
            c.handler.store(a.sa_sigaction, Ordering::Release);
            let mut ours = *a;
            ours.sa_sigaction = observe as SigAction as usize;
            ours.sa_flags |= libc::SA_SIGINFO;
            set_observed(sig, true);
            // SAFETY: the program's sigaction with our handler in front of its own.
            unsafe { real_sigaction(sig, &ours, core::ptr::null_mut()) }
        }
    };
    // SAFETY: the caller passes a valid out-pointer or null.
    if let Some(o) = unsafe { old.as_mut() } {
        *o = view;
    }
    result
}

/// [`install`], once per process however often a runtime starts late in it (attached, or started by
/// the program): the hooks find whichever runtime runs (or none) when they fire.
pub fn install_once() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(install);
}

/// Registers the exit, signal and fork hooks.
pub fn install() {
    // SAFETY: registering plain extern "C" callbacks.
    unsafe {
        // Not tied to this object: the preload library's constructor runs before the program's
        // `__libc_start_main` registers `_dl_fini`, so the finish comes after every ELF destructor
        // (the program's and every library's) and every atexit handler, whose frees are recorded.
        // (The linked copy starts after that registration: its finish runs before `_dl_fini`.)
        __cxa_atexit(at_exit, core::ptr::null_mut(), core::ptr::null_mut());
        libc::pthread_atfork(None, None, Some(in_forked_child));
    }
    // Faults run on the thread's alternate stack (SA_ONSTACK): the stack itself may be what overflowed.
    let on_fault = on_fault as SigAction as usize;
    let on_signal = on_signal as SigAction as usize;
    for sig in [libc::SIGSEGV, libc::SIGBUS] {
        install_if_default(sig, on_fault, libc::SA_SIGINFO | libc::SA_ONSTACK);
    }
    for sig in [libc::SIGILL, libc::SIGFPE].into_iter().chain(TERMINATING) {
        install_if_default(sig, on_signal, libc::SA_SIGINFO | libc::SA_RESTART);
    }
}
