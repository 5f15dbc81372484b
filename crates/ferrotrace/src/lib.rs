//! The ferrotrace runtime: records what a running program does into a trace file.
//!
//! This crate is the part of ferrotrace that runs *inside* the traced process:
//!
//! * it finds the XRay sleds of the program and of every loaded library (`-Zinstrument-xray` on nightly
//!   Rust, `clang -fxray-instrument` for C/C++) and patches the selected ones to call its trampolines;
//! * the trampolines stamp each function entry and exit with the TSC and append a 16-byte record to the
//!   calling thread's own chunk — no lock, allocation or system call on that path;
//! * a collector thread encodes full chunks (2–3 bytes per event) into one self-contained trace file
//!   (`docs/format.md`) with clock calibration, module map, the symbol table of traced functions, threads
//!   and lost-event counts;
//! * exit, `exit()` from any thread, panics and fatal signals flush every thread's events;
//! * static tracepoints ([`tracepoint!`]): one NOP while disabled, enabled at run time by glob (from
//!   `ferrotrace record --trace`, `FERROTRACE_TRACE` or [`tracepoints::enable`]), written into the same
//!   chunks, printed live by `ferrotrace live`, and USDT probes that bpftrace and perf can attach to
//!   whether or not ferrotrace records;
//! * allocations (`ferrotrace record --alloc`): the preload library interposes the malloc family, and
//!   programs that link this crate wrap their global allocator in [`Allocator`]; each allocation and
//!   free goes into the same chunks with its frame-pointer call stack.
//!
//! Who should use it: programs that want tracepoints depend on this crate and declare them; nothing
//! else needs calling. The API is the two macros, [`tracepoints::enable`] and
//! [`tracepoints::disable`], [`is_recording`], [`finish`], [`rescan`] and [`Allocator`]. `ferrotrace record` starts the
//! runtime through the environment, either by LD_PRELOAD of `libferrotrace_preload.so` (programs that
//! do not depend on ferrotrace) or in the copy linked into a program that depends on this crate, which
//! stays dormant (a NOP per tracepoint) unless `FERROTRACE_RUNTIME=linked` or `FERROTRACE_TRACE` is set;
//! in a program with tracepoints, one thread reads their USDT semaphores every 200 ms
//! (`FERROTRACE_USDT=off` leaves it out). Never two runtimes at once.
//!
//! Who should not: code that *reads* traces wants `ferrotrace-analysis`; code without an operating
//! system wants `ferrotrace-core`.
//!
//! The runtime exists on x86_64 Linux. On every other target the crate still builds, so that a library
//! may declare tracepoints without losing its other platforms: tracepoints compile to nothing (their
//! arguments are type-checked, never evaluated), [`tracepoints::enable`] selects nothing, and
//! [`is_recording`] is false.
//!
//! ```no_run
//! ferrotrace::tracepoint!(request_done, id: u64, status: u16, "request {id} -> {status}");
//!
//! fn handle(id: u64) {
//!     request_done(id, 200); // one NOP unless enabled
//! }
//! # handle(1);
//! // A program linked with ferrotrace can ask whether it is being recorded:
//! if ferrotrace::is_recording() {
//!     eprintln!("ferrotrace is recording this run");
//! }
//! ```
#![warn(missing_docs)]
#![deny(clippy::print_stderr)]

// What users see is the macros ([`tracepoint!`], [`trace!`]), `tracepoints::{enable, disable}` (the
// public re-export of `recorders::tracepoint::control`), `is_recording`, `finish`, `rescan` and
// `Allocator`. The rooms below are private: items marked `pub` inside them are visible to the crate
// only. The plumbing that macro expansions and the preload library must reach is in the hidden modules
// at the end. `arg` (argument types) and `portable` (the crate on other targets) sit at the root
// because both builds use the first and the second replaces the rooms.

mod arg;
pub mod callsites;

/// The runtime's one way to tell the user something: a line on stderr whose write errors are ignored.
/// `eprintln!` panics when stderr cannot be written (`2>/dev/full`, a closed pipe), and a collector
/// thread that panics leaves the program waiting forever for the buffers it would have freed
/// (`clippy::print_stderr` is denied in this crate so that no other way comes back).
#[cfg(ferrotrace_runtime)]
macro_rules! say {
    ($($arg:tt)*) => {
        $crate::say_line(format_args!($($arg)*))
    };
}

/// [`say!`]'s line, written whole or not at all as far as we care.
#[cfg(ferrotrace_runtime)]
fn say_line(args: std::fmt::Arguments<'_>) {
    use std::io::Write;
    let _ = std::io::stderr().lock().write_fmt(format_args!("{args}\n"));
}

// The runtime's rooms exist only where the runtime does (`cfg(ferrotrace_runtime)`, set by build.rs).
#[cfg(ferrotrace_runtime)]
mod arch;
#[cfg(ferrotrace_runtime)]
mod buffers;
#[cfg(ferrotrace_runtime)]
mod lifecycle;
#[cfg(ferrotrace_runtime)]
mod patch;
#[cfg(ferrotrace_runtime)]
mod recorders;
#[cfg(ferrotrace_runtime)]
mod state;

// `ferrotrace::tracepoints::{enable, disable}`, the public face of the tracepoint recorder's control.
#[cfg(ferrotrace_runtime)]
pub use recorders::tracepoint::control as tracepoints;

// Everywhere else: tracepoints compile to nothing and the functions below do nothing.
#[cfg(not(ferrotrace_runtime))]
mod portable;
#[cfg(not(ferrotrace_runtime))]
pub use portable::{finish, is_recording, rescan, tracepoints, Allocator};

#[cfg(ferrotrace_runtime)]
pub use recorders::alloc::Allocator;

/// True while this process is being recorded.
#[cfg(ferrotrace_runtime)]
pub fn is_recording() -> bool {
    lifecycle::runtime::get().is_some_and(|rt| rt.lifecycle.is_recording())
}

/// Finishes the trace now, as at exit: every thread's events are written and recording stops. Useful
/// before a program ends in a way that skips `atexit` handlers (`_exit`, `exec`).
#[cfg(ferrotrace_runtime)]
pub fn finish() {
    lifecycle::exit::finish_at_exit(false);
}

/// Traces the XRay-instrumented functions of objects loaded since the runtime started (`dlopen`) right
/// away, instead of at the collector's next periodic look (every second). No-op when not recording.
#[cfg(ferrotrace_runtime)]
pub fn rescan() {
    lifecycle::runtime::rescan();
}

/// Marker that `ferrotrace record` looks for to know that a program links its own runtime
/// (`ferrotrace_core::env::LINKED_RUNTIME_MARKER`).
// Outside `crate::state`, as `START_LINKED` below: a symbol of the build, not state.
#[cfg(all(ferrotrace_runtime, not(feature = "preload")))]
#[export_name = ferrotrace_core::__linked_runtime_marker!()]
#[used]
static LINKED_RUNTIME_MARKER: u8 = 1;

/// Starts the linked copy when the environment asks for it ([`lifecycle::start::start_from_env`]), and makes the
/// tracepoints' SDT probes work for tracers that attach ([`recorders::tracepoint::usdt::watch`]).
#[cfg(all(ferrotrace_runtime, not(feature = "preload")))]
#[used]
#[link_section = ".init_array"]
static START_LINKED: extern "C" fn() = {
    extern "C" fn start_linked() {
        // Kept in the program by this use: `record -p` finds it in the symbol table.
        core::hint::black_box(ferrotrace_attach_linked as *const () as usize);
        lifecycle::start::start_from_env(lifecycle::runtime::Role::Linked);
        recorders::tracepoint::usdt::watch();
    }
    start_linked
};

/// `ferrotrace record -p` in a program that links the runtime: its own copy starts recording as
/// `spec` says (the `NAME=value` lines of `ferrotrace_core::env::RuntimeSpec::to_lines`), called on a
/// thread the host borrowed with ptrace, which only starts the thread that does it; no library is
/// loaded. 0 once that thread runs, which says how the start went beside the control FIFO the spec
/// names, or a negative code whose reason is written to `error` there. Not an API.
///
/// # Safety
/// `spec` is a NUL-terminated string.
#[cfg(all(ferrotrace_runtime, not(feature = "preload")))]
#[doc(hidden)]
#[no_mangle]
// Its unmangled name does not say it is the runtime's: placed in the tracer's own section, so that it
// is never traced or listed as the program's function.
#[link_section = "ferrotrace_text"]
pub unsafe extern "C" fn ferrotrace_attach_linked(spec: *const core::ffi::c_char) -> i32 {
    if spec.is_null() {
        return lifecycle::plan::code::BAD_SPEC;
    }
    // SAFETY: NUL-terminated (the caller's contract).
    let spec = unsafe { core::ffi::CStr::from_ptr(spec) }.to_string_lossy();
    let run = || lifecycle::attach::attach_on_own_thread(&spec, lifecycle::runtime::Role::Linked);
    buffers::thread::as_runtime(run).unwrap_or(lifecycle::plan::code::FAILED)
}

/// What the expansions of [`tracepoint!`] and [`trace!`] refer to. Not an API: it changes without notice.
#[doc(hidden)]
pub mod __macro_support {
    pub use crate::arg::{usdt_buf, Arg};
    #[cfg(ferrotrace_runtime)]
    pub use crate::recorders::tracepoint::{emit, encode, encoded_len, Descriptor, Semaphore};
}

/// The hooks of `libferrotrace_preload.so` (crate `ferrotrace-preload`). Not an API.
#[cfg(all(ferrotrace_runtime, feature = "preload"))]
#[doc(hidden)]
pub mod __preload {
    pub use crate::lifecycle::exit::program_sigaction;

    /// `ferrotrace_attach`: starts recording in this running process as `spec` says (the lines of
    /// `ferrotrace_core::env::RuntimeSpec::to_lines`), on a thread of its own; 0 once that thread
    /// runs, which says how the start went beside the control FIFO, or a negative code whose reason
    /// was written there (`lifecycle::attach::attach_on_own_thread`).
    pub fn attach(spec: &str) -> i32 {
        let run = || {
            crate::lifecycle::attach::attach_on_own_thread(
                spec,
                crate::lifecycle::runtime::Role::Preload,
            )
        };
        crate::buffers::thread::as_runtime(run).unwrap_or(crate::lifecycle::plan::code::FAILED)
    }

    /// The preload library's constructor: starts the runtime if the environment asks the preloaded copy to.
    pub fn start() {
        crate::lifecycle::start::start_from_env(crate::lifecycle::runtime::Role::Preload);
    }

    /// Before the process ends without `atexit` handlers (`_exit`, `_Exit`): finishes its trace, with
    /// the bounded waits of a signal handler (`_exit` is async-signal-safe and called from handlers).
    pub fn finish_before_exit() {
        crate::lifecycle::exit::finish_at_exit(true);
    }

    /// The calling thread is about to call `exit`: its TLS destructors, which `exit` runs first, do not
    /// end its recording (what the atexit handlers and ELF destructors free on it is recorded).
    pub fn exit_begins() {
        crate::buffers::thread::exit_begins();
    }

    /// The calling thread's mcount return stub (0 if none): the frames a backtrace leaves out.
    pub fn mcount_return_stub() -> u64 {
        crate::recorders::mcount::thread_stub()
    }

    /// What the malloc family reports to (see `alloc`).
    pub use crate::recorders::alloc::{
        alloc_event, before_free, free_cancelled, free_event, free_now, unrecorded, Caller,
    };
}
