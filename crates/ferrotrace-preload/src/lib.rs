//! `libferrotrace_preload.so`: the ferrotrace runtime packaged for `LD_PRELOAD`.
//!
//! `ferrotrace record` preloads this library into programs that do not link the `ferrotrace` crate
//! themselves. Its ELF constructor starts the runtime (unless `FERROTRACE_RUNTIME=linked` says the
//! program's own copy should), and its `dlopen` wraps the C library's to trace newly loaded objects at
//! once, its `_exit` and `_Exit` finish the trace before the process ends without `atexit` handlers
//! (as forked children often do), its `exit` keeps the calling thread recording through the atexit
//! handlers and ELF destructors, its `sigaction` and `signal` let the runtime see which signals
//! reach the program, its `_Unwind_Backtrace` leaves the mcount return stub out of backtraces
//! (Rust's panic backtraces), its `__monstartup` and `_mcleanup` keep gprof's own profiling of `-pg`
//! programs (a timer, `gmon.out`) from running beside the tracing, and its hooks of the malloc family
//! (`malloc.rs`, reached through `libferrotrace_alloc.so`, which `record --alloc` alone preloads)
//! report allocations; everything else lives in the `ferrotrace` crate. Not for linking.
#![warn(missing_docs)]

mod malloc;

#[used]
#[link_section = ".init_array"]
static START_PRELOADED: extern "C" fn() = {
    extern "C" fn start_preloaded() {
        // The one initial-exec TLS reference, kept by this use: see `ferrotrace_static_tls_anchor`.
        // SAFETY: reads a GOT entry; no precondition.
        let _ = unsafe { ferrotrace_static_tls_offset() };
        if !named_in_ld_preload() {
            // dlopened into a running process (`record -p`): dormant until `ferrotrace_attach`.
            return;
        }
        ferrotrace::__preload::start();
    }
    start_preloaded
};

// Static TLS even when dlopened. The trampolines read the runtime's `HOT` block at one constant offset
// from %fs in every thread, which holds only for static TLS: the block of a library loaded at start-up,
// not of one dlopened later (dynamic TLS, allocated per thread on first use). One initial-exec
// reference (`@gottpoff`: an R_X86_64_TPOFF64 relocation, and the DF_STATIC_TLS flag) makes glibc place
// this library's whole TLS block in its static TLS surplus when it is dlopened, in every thread, or
// refuse the dlopen ("cannot allocate memory in static TLS block": the surplus is set by
// GLIBC_TUNABLES=glibc.rtld.optional_static_tls=BYTES).
core::arch::global_asm!(
    ".section .tbss,\"awT\",@nobits",
    ".p2align 3",
    "ferrotrace_static_tls_anchor:",
    ".zero 8",
    ".text",
    ".p2align 4",
    ".hidden ferrotrace_static_tls_offset",
    ".globl ferrotrace_static_tls_offset",
    ".type ferrotrace_static_tls_offset,@function",
    "ferrotrace_static_tls_offset:",
    "  mov rax, qword ptr [rip + ferrotrace_static_tls_anchor@gottpoff]",
    "  ret",
    ".size ferrotrace_static_tls_offset, . - ferrotrace_static_tls_offset",
);

extern "C" {
    /// The anchor's offset from the thread pointer (what the initial-exec GOT entry holds).
    fn ferrotrace_static_tls_offset() -> isize;
}

/// True when this library is named in `LD_PRELOAD` (loaded at start-up, which starts the runtime as
/// the environment says); false when it was `dlopen`ed into a running process by `record -p`.
fn named_in_ld_preload() -> bool {
    // SAFETY: dladdr on an address of this library into a zeroed out-struct; getenv reads the
    // environment (constructors run before the program's threads, or under the loader's lock).
    unsafe {
        let mut info: libc::Dl_info = core::mem::zeroed();
        if libc::dladdr(named_in_ld_preload as *const libc::c_void, &mut info) == 0
            || info.dli_fname.is_null()
        {
            return true;
        }
        let ours = core::ffi::CStr::from_ptr(info.dli_fname).to_bytes();
        let ours = ours.rsplit(|&b| b == b'/').next().unwrap_or(ours);
        let preload = libc::getenv(c"LD_PRELOAD".as_ptr());
        if preload.is_null() {
            return false;
        }
        core::ffi::CStr::from_ptr(preload)
            .to_bytes()
            .split(|&b| b == b':' || b == b' ')
            .any(|p| p.rsplit(|&b| b == b'/').next() == Some(ours))
    }
}

/// Starts recording in this running process (`ferrotrace record -p`, which loaded this library with
/// `dlopen` and calls this on a thread it borrowed): `spec` holds `NAME=value` lines of the
/// `FERROTRACE_*` variables. Returns 0, or a negative code whose reason is written to `error` in the
/// directory of the control FIFO the spec names.
///
/// # Safety
/// `spec` is a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn ferrotrace_attach(spec: *const libc::c_char) -> i32 {
    if spec.is_null() {
        return -1;
    }
    // SAFETY: NUL-terminated (the caller's contract).
    let spec = unsafe { core::ffi::CStr::from_ptr(spec) }.to_string_lossy();
    ferrotrace::__preload::attach(&spec)
}

/// Interposes the C library's `dlopen`: after a successful load, the new object's sleds are patched
/// before the caller can call into it.
///
/// # Safety
/// Same contract as `dlopen(3)`.
#[no_mangle]
pub unsafe extern "C" fn dlopen(
    filename: *const libc::c_char,
    flags: libc::c_int,
) -> *mut libc::c_void {
    type DlOpen = unsafe extern "C" fn(*const libc::c_char, libc::c_int) -> *mut libc::c_void;
    // SAFETY: a NUL-terminated name; dlsym has no other precondition.
    let real = unsafe { libc::dlsym(libc::RTLD_NEXT, c"dlopen".as_ptr()) };
    if real.is_null() {
        return core::ptr::null_mut();
    }
    // SAFETY: RTLD_NEXT's "dlopen" is the C library's dlopen, with this signature.
    let real: DlOpen = unsafe { core::mem::transmute::<*mut libc::c_void, DlOpen>(real) };
    // SAFETY: the caller's arguments, under dlopen's contract (ours).
    let handle = unsafe { real(filename, flags) };
    if !handle.is_null() {
        // Runtime work on the program's thread: its allocations are not the program's.
        ferrotrace::__preload::unrecorded(ferrotrace::rescan);
    }
    handle
}

/// Interposes the C library's `sigaction`: for the signals `ferrotrace record` passes on, the program's
/// handler runs behind one that notes each arrival, so that record does not deliver a signal the program
/// got anyway a second time (see the runtime's `exit::program_sigaction`).
///
/// # Safety
/// Same contract as `sigaction(2)`.
#[no_mangle]
pub unsafe extern "C" fn sigaction(
    sig: libc::c_int,
    act: *const libc::sigaction,
    old: *mut libc::sigaction,
) -> libc::c_int {
    // SAFETY: the caller's arguments, under sigaction's contract (ours).
    unsafe { ferrotrace::__preload::program_sigaction(sig, act, old) }
}

/// Interposes the C library's `signal` (BSD semantics, as glibc's: `SA_RESTART`), through
/// [`sigaction`].
///
/// # Safety
/// Same contract as `signal(3)`.
#[no_mangle]
pub unsafe extern "C" fn signal(
    sig: libc::c_int,
    handler: libc::sighandler_t,
) -> libc::sighandler_t {
    // SAFETY: all-zero is a valid `sigaction` (no handler, empty mask, no flags).
    let mut sa: libc::sigaction = unsafe { core::mem::zeroed() };
    sa.sa_sigaction = handler;
    sa.sa_flags = libc::SA_RESTART;
    // SAFETY: as above.
    let mut old: libc::sigaction = unsafe { core::mem::zeroed() };
    // SAFETY: `sa` and `old` are valid, live `sigaction`s; `handler` is the caller's, under signal's
    // contract.
    if unsafe { ferrotrace::__preload::program_sigaction(sig, &sa, &mut old) } != 0 {
        return libc::SIG_ERR;
    }
    old.sa_sigaction
}

/// Interposes glibc's gprof start-up, which `gcrt1.o` calls in every program linked with `-pg` (gcc's, and
/// rustc's `-Zinstrument-mcount`): with this library loaded, `mcount` is the runtime's, so gprof would
/// record no call arcs; its histogram would still cost a `SIGPROF` timer for the whole run and its exit
/// routine a `gmon.out` written over whatever the working directory held (a few MB for ripgrep, 7 % of
/// a traced `rg --version`). As uftrace's libmcount does, neither runs.
#[no_mangle]
pub extern "C" fn __monstartup(_low_pc: libc::c_ulong, _high_pc: libc::c_ulong) {}

/// Interposes glibc's gprof exit routine (registered with `atexit` by `gcrt1.o`, see [`__monstartup`]):
/// no `gmon.out`.
#[no_mangle]
pub extern "C" fn _mcleanup() {}

/// Finishes this process's trace, then ends the process through the C library's function `name`.
fn finish_then_exit(name: &core::ffi::CStr, status: libc::c_int) -> ! {
    // A no-op in a process whose runtime is a forked parent's copy, and in a vfork child (it shares
    // its parent's memory, runtime included, but has a pid of its own).
    ferrotrace::__preload::finish_before_exit();
    type Exit = unsafe extern "C" fn(libc::c_int) -> !;
    // SAFETY: RTLD_NEXT's `_exit`/`_Exit` is the C library's, with this signature; exit_group is the
    // system call both make, should the lookup fail.
    unsafe {
        let real = libc::dlsym(libc::RTLD_NEXT, name.as_ptr());
        if !real.is_null() {
            core::mem::transmute::<*mut libc::c_void, Exit>(real)(status);
        }
        libc::syscall(libc::SYS_exit_group, status);
    }
    unreachable!("exit_group returned")
}

/// Interposes the C library's `exit` (a return from `main` calls it inside the C library, unseen; the
/// main thread needs no telling): the calling thread keeps recording through the atexit handlers and
/// ELF destructors that `exit` runs on it after its TLS destructors.
///
/// # Safety
/// Same contract as `exit(3)`.
#[no_mangle]
pub unsafe extern "C" fn exit(status: libc::c_int) -> ! {
    ferrotrace::__preload::exit_begins();
    type Exit = unsafe extern "C" fn(libc::c_int) -> !;
    // SAFETY: RTLD_NEXT's `exit` is the C library's, with this signature.
    unsafe {
        let real = libc::dlsym(libc::RTLD_NEXT, c"exit".as_ptr());
        if !real.is_null() {
            core::mem::transmute::<*mut libc::c_void, Exit>(real)(status);
        }
        libc::syscall(libc::SYS_exit_group, status);
    }
    unreachable!("exit_group returned")
}

/// Interposes the C library's `_exit`, which skips `atexit` handlers: the trace is finished first.
///
/// # Safety
/// Same contract as `_exit(2)`.
#[no_mangle]
pub unsafe extern "C" fn _exit(status: libc::c_int) -> ! {
    finish_then_exit(c"_exit", status)
}

/// Interposes the C library's `_Exit` (C99's name for `_exit`): the trace is finished first.
///
/// # Safety
/// Same contract as `_Exit(3)`.
#[no_mangle]
pub unsafe extern "C" fn _Exit(status: libc::c_int) -> ! {
    finish_then_exit(c"_Exit", status)
}

/// A `_Unwind_Backtrace` callback and its argument, with the stub frames to leave out.
struct Backtrace {
    callback: UnwindTraceFn,
    arg: *mut libc::c_void,
    stub: usize,
}

type UnwindTraceFn = unsafe extern "C" fn(*mut libc::c_void, *mut libc::c_void) -> libc::c_int;

extern "C" {
    fn _Unwind_GetIP(context: *mut libc::c_void) -> usize;
}

/// Passes every frame but the thread's mcount return stub on to the caller's callback.
unsafe extern "C" fn skip_stub_frames(
    context: *mut libc::c_void,
    arg: *mut libc::c_void,
) -> libc::c_int {
    // SAFETY: `arg` is the `Backtrace` that `_Unwind_Backtrace` below passed, alive for the whole walk.
    let bt = unsafe { &*(arg as *const Backtrace) };
    // SAFETY: `context` is the unwinder's, for the frame this callback is called on.
    if unsafe { _Unwind_GetIP(context) } == bt.stub {
        return 0; // _URC_NO_REASON: go on to the next frame
    }
    // SAFETY: the caller's callback with the unwinder's context and the caller's argument, as the
    // real `_Unwind_Backtrace` would call it.
    unsafe { (bt.callback)(context, bt.arg) }
}

/// Interposes the unwinder's `_Unwind_Backtrace` (what Rust's backtraces use): while frames of this
/// thread are hooked by mcount tracing, each is followed by a frame in the thread's return stub
/// (unwinding through it is correct, see `ferrotrace::mcount`); those are left out, so the backtrace
/// reads as without the tracer.
///
/// # Safety
/// Same contract as the unwinder's `_Unwind_Backtrace`.
#[no_mangle]
pub unsafe extern "C" fn _Unwind_Backtrace(
    callback: UnwindTraceFn,
    arg: *mut libc::c_void,
) -> libc::c_int {
    type Real = unsafe extern "C" fn(UnwindTraceFn, *mut libc::c_void) -> libc::c_int;
    // SAFETY: a NUL-terminated name; dlsym has no other precondition.
    let real = unsafe { libc::dlsym(libc::RTLD_NEXT, c"_Unwind_Backtrace".as_ptr()) };
    if real.is_null() {
        return 9; // _URC_FATAL_PHASE1_ERROR: no unwinder to ask
    }
    // SAFETY: RTLD_NEXT's `_Unwind_Backtrace` is the unwinder's, with this signature.
    let real = unsafe { core::mem::transmute::<*mut libc::c_void, Real>(real) };
    let stub = ferrotrace::__preload::mcount_return_stub() as usize;
    if stub == 0 {
        // SAFETY: the caller's arguments, under the unwinder's contract (ours).
        return unsafe { real(callback, arg) };
    }
    let mut bt = Backtrace {
        callback,
        arg,
        stub,
    };
    // SAFETY: `skip_stub_frames` calls the caller's callback with its argument for every frame it
    // passes on; `bt` outlives the walk.
    unsafe {
        real(
            skip_stub_frames,
            &mut bt as *mut Backtrace as *mut libc::c_void,
        )
    }
}
