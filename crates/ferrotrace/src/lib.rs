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
//!   chunks, printed live by `ferrotrace live`, and visible to bpftrace as USDT probes.
//!
//! Who should use it: programs that want tracepoints depend on this crate and declare them; nothing
//! else needs calling. `ferrotrace record` starts the runtime through the environment, either by
//! LD_PRELOAD of `libferrotrace_preload.so` (programs that do not depend on ferrotrace) or in the copy
//! linked into a program that depends on this crate, which stays dormant and costs nothing (a NOP per
//! tracepoint) unless `FERROTRACE_RUNTIME=linked` or `FERROTRACE_TRACE` is set. Never two runtimes at
//! once.
//!
//! Who should not: code that *reads* traces wants `ferrotrace-analysis`; code without an operating
//! system wants `ferrotrace-core`. x86_64 Linux only.
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

#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
compile_error!("the ferrotrace runtime supports x86_64 Linux only");

#[doc(hidden)]
pub mod alloc;
pub mod clock;
pub mod collector;
pub mod config;
pub mod exit;
pub mod live;
pub mod pool;
pub mod runtime;
pub mod static_key;
pub mod thread;
pub mod tracepoint;
pub mod tracepoints;
pub mod trampoline;
pub mod xray;

pub use alloc::Allocator;
pub use runtime::Role;

/// True while this process is being recorded.
pub fn is_recording() -> bool {
    runtime::get().is_some_and(|rt| rt.recording.load(std::sync::atomic::Ordering::Relaxed))
}

/// Finishes the trace now, as at exit: every thread's events are written and recording stops. Useful
/// before a program ends in a way that skips `atexit` handlers (`_exit`, `exec`).
pub fn finish() {
    if let Some(rt) = runtime::get() {
        rt.finish(runtime::EndReason::Exit, 0, false);
    }
}

/// Traces the XRay-instrumented functions of objects loaded since the runtime started (`dlopen`) right
/// away, instead of at the collector's next periodic look (every second). No-op when not recording.
pub fn rescan() {
    runtime::rescan();
}

/// Marker that `ferrotrace record` looks for to know that a program links its own runtime.
#[no_mangle]
#[used]
pub static FERROTRACE_LINKED_RUNTIME_V1: u8 = 1;

/// Starts the linked copy when the environment asks for it; see [`runtime::start_from_env`].
#[cfg(not(feature = "preload"))]
#[used]
#[link_section = ".init_array"]
static START_LINKED: extern "C" fn() = {
    extern "C" fn start_linked() {
        runtime::start_from_env(Role::Linked);
    }
    start_linked
};
