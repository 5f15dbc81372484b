//! A function tracer for kernels, unikernels, firmware and any program that cannot load a library:
//! `#![no_std]`, no allocator, no libc, no system call. It writes the standard ferrotrace trace file,
//! which every `ferrotrace` command reads.
//!
//! The embedder gives it three things:
//!
//! * **memory**: one `&'static mut [u8]`, split into one region (a *slot*) per thread or CPU: a
//!   header, a shadow stack for return hooking, and 16-byte records;
//! * **a clock**: the TSC and its frequency ([`Clock::tsc`]), or a function returning nanoseconds
//!   ([`Clock::ns`]);
//! * **the current thread or CPU**: the address of its slot at a fixed `%fs` or `%gs` offset
//!   ([`Threads::fs`], [`Threads::gs`]: thread-local or per-CPU storage, one load per event), or a
//!   function returning its index ([`Threads::from_fn`]).
//!
//! It provides `mcount` and `__fentry__` for code built with `-Zinstrument-mcount`, `gcc -pg` or
//! `gcc -pg -mfentry` (with frame pointers for `mcount`), and [`enter`]/[`exit`] for code the compiler
//! does not instrument (interrupt entry, assembly). Returns are hooked through the thread's shadow
//! stack (uftrace's and rftrace's mechanism). Each thread or CPU writes only its own slot: no lock and
//! no shared atomic on the per-event path, so it runs cleanly on many cores. When a slot is full it
//! stops or wraps ([`OnFull`]) and counts what it lost.
//!
//! [`Tracer::write_trace`] serializes everything into a trace file through a closure that takes bytes
//! (a file, a serial port, a debugger's memory window): timestamps in nanoseconds from the frequency
//! given, the embedder's thread ids and names, the image's load bias, and the names of functions when
//! the embedder has them ([`Program::symbols`]). Without names, `ferrotrace report --symbols
//! kernel.elf` names them from the ELF file on the host (docs/format.md, "Function ids of embedded
//! traces").
//!
//! **It never traces itself.** Everything on the recording path is assembly, which no compiler
//! instruments; the Rust functions of this crate that may run while tracing are inlined into their
//! caller ([`Tracer::enable`], [`Tracer::disable`], [`Tracer::register_thread`], [`enter`], [`exit`]),
//! and the others run only while tracing is off ([`Tracer::write_trace`] refuses otherwise). The
//! embedder's own callbacks (a thread or clock function) are instrumented too: a function whose return
//! address is the hooks' callback call site is not traced, so a callback must not call other
//! instrumented functions (or those are traced, and recurse).
//!
//! What the embedder must supply at link time:
//!
//! * a `#[panic_handler]` (or the crate's `panic-handler` feature, for C embedders of the `staticlib`,
//!   built with `panic = "abort"`: it also defines `rust_eh_personality`);
//! * `rust_eh_personality`, for a Rust embedder whose link pulls in parts of the precompiled `core`
//!   whose unwind tables name it (`core` is built with `panic = "unwind"`, whatever the embedder's
//!   `panic`): `#[no_mangle] extern "C" fn rust_eh_personality() {}`, never called. (testprogs/
//!   freestanding, built with `-Cpanic=abort`, links without it, in release and debug builds, with
//!   and without `--gc-sections`; a kernel's own link may not);
//! * the C functions `memcpy`, `memmove`, `memset`, `memcmp`, `bcmp` and `strlen` where the target's
//!   `compiler_builtins` does not define them (it defines the memory functions on `-none` targets; on
//!   `x86_64-unknown-linux-gnu` a freestanding program defines them, as testprogs/freestanding
//!   does). LLVM emits calls to them for copies, fills, comparisons and loops that look for a NUL byte,
//!   in this crate's code as in the embedder's, so the linker may report a missing `strlen` at this
//!   crate's `lib.rs:0`: a call LLVM made, not one in the source.
//!
//! Nothing else (tested with the `staticlib`'s symbol table, which may hold only these). At run time,
//! in `%fs`/`%gs` mode, every thread that runs instrumented code while tracing must have that register
//! pointing at memory whose word at the offset is 0 (not traced) or its own slot
//! ([`Tracer::register_thread`]): a thread made by `clone` with its parent's base writes into its
//! parent's slot until it sets its own ([`Threads::fs`]). Three more things an embedder meets:
//!
//! * in `%fs`/`%gs` mode the function that calls [`Tracer::register_thread`] (and those it runs in) is
//!   not traced: its entry came before the thread had a slot (with [`Threads::from_fn`] it is);
//! * per CPU ([`Threads::gs`]), a traced call that migrates to another CPU, or is switched out while
//!   another task makes traced calls on its CPU, returns through a shadow stack that does not hold its
//!   frame and ends in `ud2`: trace with preemption off, or per task;
//! * the [`Threads`] constructors take how to find the current slot first, then the number of slots:
//!   `fs(offset, n)`, `gs(offset, n)`, `from_fn(current, n)`.
//!
//! ```no_run
//! use ferrotrace_embedded::{init, Clock, Threads};
//!
//! static mut EVENTS: [u8; 8 << 20] = [0; 8 << 20];
//! /// The offset, in each CPU's `%gs` area (a kernel's per-CPU block), of a word the kernel reserves
//! /// for the tracer and zeroes at boot.
//! const PERCPU_TRACE_SLOT: isize = 0x40;
//! # fn run_workload() {}
//! # fn my_write(_: &[u8]) {}
//! # let tsc_hz = 2_445_000_000;
//! // SAFETY: every CPU's `%gs:PERCPU_TRACE_SLOT` is reserved for the tracer (nothing else reads or
//! // writes it) and is 0 until that CPU registers.
//! let threads = unsafe { Threads::gs(PERCPU_TRACE_SLOT, 4) };
//! // SAFETY: the only reference to EVENTS, handed over for good.
//! let tracer = init(unsafe { &mut *core::ptr::addr_of_mut!(EVENTS) }, Clock::tsc(tsc_hz), threads)
//!     .expect("memory for 4 CPUs");
//! tracer.register_thread(0, 0, "cpu0").expect("slot 0, once"); // on CPU 0: %gs:0x40 now holds its slot
//! tracer.enable();
//! run_workload();
//! tracer.disable();
//! tracer
//!     .write_trace(|bytes: &[u8]| {
//!         my_write(bytes);
//!         Ok::<(), ()>(())
//!     })
//!     .expect("written");
//! ```
//!
//! With feature `hosted`, the module `hosted` is the same recorder for ordinary programs, rftrace-style
//! (`init`, `enable`, `dump`): memory from the allocator, threads bound at their first call, the trace
//! written to a file.
#![cfg_attr(not(feature = "hosted"), no_std)]
#![warn(missing_docs)]

use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};

mod hook;
#[cfg(feature = "hosted")]
pub mod hosted;
mod slot;
mod trace;

pub use trace::{Program, Symbol, WriteError};

/// The hot configuration the hooks read (field offsets are used in [`hook`]'s assembly). Written by
/// [`init`] before tracing is enabled, and by [`Tracer::enable`]/[`Tracer::disable`].
#[repr(C)]
pub(crate) struct Hot {
    /// Non-zero while tracing (the first field: the hooks test it first).
    enabled: AtomicU64,
    /// 0: the slot's address at `%fs:tls_offset`; 1: at `%gs:tls_offset`; 2: `thread_fn`.
    threads: AtomicU64,
    /// The `%fs`/`%gs` offset.
    tls_offset: AtomicU64,
    /// `extern "C" fn() -> usize`, the current slot's index, or 0.
    thread_fn: AtomicU64,
    /// `extern "C" fn() -> usize` that binds an unbound thread (`%fs` mode): its slot's address, or 1.
    bind_fn: AtomicU64,
    /// Number of slots.
    count: AtomicU64,
    /// Bytes from one slot to the next.
    stride: AtomicU64,
    /// Address of slot 0.
    slots: AtomicU64,
    /// `extern "C" fn() -> u64` returning nanoseconds, or 0 for `rdtsc`.
    clock_fn: AtomicU64,
    /// Non-zero: a full slot starts again at its beginning ([`OnFull::Wrap`]).
    wrap: AtomicU64,
}

pub(crate) static HOT: Hot = Hot {
    enabled: AtomicU64::new(0),
    threads: AtomicU64::new(0),
    tls_offset: AtomicU64::new(0),
    thread_fn: AtomicU64::new(0),
    bind_fn: AtomicU64::new(0),
    count: AtomicU64::new(0),
    stride: AtomicU64::new(0),
    slots: AtomicU64::new(0),
    clock_fn: AtomicU64::new(0),
    wrap: AtomicU64::new(0),
};

/// What the rest of the crate keeps: set once by [`init`].
struct Setup {
    initialized: AtomicBool,
    writing: AtomicBool,
    tick_hz: AtomicU64,
    start_ticks: AtomicU64,
    scratch: AtomicU64,
}

static SETUP: Setup = Setup {
    initialized: AtomicBool::new(false),
    writing: AtomicBool::new(false),
    tick_hz: AtomicU64::new(0),
    start_ticks: AtomicU64::new(0),
    scratch: AtomicU64::new(0),
};

/// Bytes of memory kept for encoding chunks in [`Tracer::write_trace`].
pub const SCRATCH_LEN: usize = 16 << 10;

/// Records a slot must have room for at least.
const MIN_RECORDS: usize = 64;

/// The event clock.
#[derive(Clone, Copy, Debug)]
pub enum Clock {
    /// The timestamp counter (`rdtsc`), ticking at `hz` (invariant TSC). Timestamps are converted to
    /// nanoseconds with it when the trace is written.
    Tsc {
        /// Ticks per second.
        hz: u64,
    },
    /// A function returning nanoseconds (a kernel's monotonic clock). It is called on every event.
    Ns(extern "C" fn() -> u64),
}

impl Clock {
    /// The TSC, ticking `hz` times a second.
    pub const fn tsc(hz: u64) -> Clock {
        Clock::Tsc { hz }
    }

    /// The embedder's clock in nanoseconds.
    pub const fn ns(now: extern "C" fn() -> u64) -> Clock {
        Clock::Ns(now)
    }

    fn now(self) -> u64 {
        match self {
            // SAFETY: rdtsc has no preconditions on x86_64.
            Clock::Tsc { .. } => unsafe { core::arch::x86_64::_rdtsc() },
            Clock::Ns(f) => f(),
        }
    }
}

/// How the hooks find the current thread's (or CPU's) slot. Made by [`Threads::fs`], [`Threads::gs`]
/// or [`Threads::from_fn`], whose safety contracts the hooks rely on (the variants cannot be built
/// outside this crate).
#[derive(Clone, Copy, Debug)]
pub enum Threads {
    /// The slot's address is at `%fs:offset` (thread-local storage; 0 = not traced).
    #[non_exhaustive]
    Fs {
        /// Offset from the `%fs` base (negative for variables of the static TLS block).
        offset: isize,
        /// Number of slots.
        count: usize,
    },
    /// The slot's address is at `%gs:offset` (a kernel's per-CPU area; 0 = not traced).
    #[non_exhaustive]
    Gs {
        /// Offset from the `%gs` base.
        offset: isize,
        /// Number of slots.
        count: usize,
    },
    /// A function returns the current slot's index (a CPU number, a dense thread index); an index of
    /// `count` or more is not traced. Called on every event, every register saved around it.
    #[non_exhaustive]
    Fn {
        /// The current index.
        current: extern "C" fn() -> usize,
        /// Number of slots.
        count: usize,
    },
}

impl Threads {
    /// `count` slots, the current one's address at `%fs:offset`.
    ///
    /// # Safety
    /// From [`init`] on, for good: in every thread that runs instrumented code or calls
    /// [`Tracer::register_thread`], the 8 bytes at `%fs:offset` are mapped, writable, reserved for the
    /// tracer (nothing else reads or writes them) and hold 0 until the thread registers.
    /// [`Tracer::register_thread`] writes the calling thread's word; the hooks read it on every event
    /// and write through the address it holds. (In a glibc process `%fs:8` is the DTV pointer, not
    /// such a word: a Rust `thread_local!`'s offset from `%fs:0` is one, as `hosted` uses.)
    ///
    /// A thread made by `clone` without `CLONE_SETTLS` runs with its parent's `%fs` base: until it
    /// sets its own, its events go into its parent's slot, interleaved with the parent's (and its
    /// returns pop the parent's shadow stack). Give it its own base before it runs instrumented code,
    /// as testprogs/freestanding does (`clone` with `CLONE_SETTLS`, or `arch_prctl(ARCH_SET_FS)` first
    /// thing, from uninstrumented code). [`Tracer::register_thread`] refuses a thread whose word
    /// already holds a slot ([`RegisterError::Bound`]), which is what such a thread would find.
    pub const unsafe fn fs(offset: isize, count: usize) -> Threads {
        Threads::Fs { offset, count }
    }

    /// `count` slots, the current one's address at `%gs:offset`.
    ///
    /// # Safety
    /// As for [`Threads::fs`], for `%gs`: on every CPU (or thread) that runs instrumented code or calls
    /// [`Tracer::register_thread`], the 8 bytes at `%gs:offset` are mapped, writable, reserved for the
    /// tracer and 0 until it registers.
    ///
    /// Per CPU, a traced call must end on the CPU it began on, not interleaved with another task's
    /// calls on that CPU: its return goes through the shadow stack of the slot `%gs` finds *then*, and
    /// a return whose frame that stack does not hold ends in `ud2` (#UD), since the real return
    /// address is lost. So trace with preemption and migration off (interrupt handlers, which return
    /// before the task resumes, are fine), or use [`Threads::fs`] per task, or [`Threads::from_fn`]
    /// with a task index.
    pub const unsafe fn gs(offset: isize, count: usize) -> Threads {
        Threads::Gs { offset, count }
    }

    /// `count` slots, the current one's index from `current`. (The arguments in the order of
    /// [`Threads::fs`]'s: how to find the current slot, then how many there are.)
    ///
    /// # Safety
    /// `current` never gives two threads (or CPUs) that may run at the same time the same index below
    /// `count`: the slot at an index is written by whoever runs with it, without a lock. It must not
    /// panic or unwind (it is called from the hooks' assembly).
    pub const unsafe fn from_fn(current: extern "C" fn() -> usize, count: usize) -> Threads {
        Threads::Fn { current, count }
    }

    fn count(self) -> usize {
        match self {
            Threads::Fs { count, .. } | Threads::Gs { count, .. } | Threads::Fn { count, .. } => {
                count
            }
        }
    }
}

/// What a full slot does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum OnFull {
    /// Keep the oldest events: later ones are counted as lost (the trace shows a Lost event).
    #[default]
    Stop,
    /// Keep the newest: the slot starts again at its beginning (the trace says how many it dropped).
    Wrap,
}

/// Options of [`init_with`].
#[derive(Clone, Copy, Debug)]
pub struct Options {
    /// What a full slot does.
    pub on_full: OnFull,
    /// Frames of each slot's shadow stack: calls nested deeper are not traced (counted lost).
    pub shadow_depth: usize,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            on_full: OnFull::Stop,
            shadow_depth: 512,
        }
    }
}

/// Why [`init`] refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InitError {
    /// The tracer was set up already (it is global: `mcount` has no other way to find it).
    AlreadyInitialized,
    /// No slots were asked for.
    NoThreads,
    /// A TSC clock without its frequency.
    NoFrequency,
    /// The memory cannot hold the scratch area and every slot's header, shadow stack and at least 64
    /// records: at least this many bytes are needed.
    TooSmall(usize),
}

impl core::fmt::Display for InitError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            InitError::AlreadyInitialized => f.write_str("the tracer is initialized already"),
            InitError::NoThreads => f.write_str("no thread or CPU slots asked for"),
            InitError::NoFrequency => f.write_str("a TSC clock needs its frequency"),
            InitError::TooSmall(n) => write!(f, "trace memory too small: {n} bytes needed"),
        }
    }
}

/// Why [`Tracer::register_thread`] refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RegisterError {
    /// The index is not below the number of slots.
    OutOfRange,
    /// The slot was registered already: two threads registering one index would share its shadow
    /// stack and records.
    Taken,
    /// `%fs`/`%gs` mode: the calling thread's word already holds a slot. It registered already, or it
    /// runs with another thread's `%fs`/`%gs` base (a `clone` that kept its parent's), whose word this
    /// registration would overwrite ([`Threads::fs`]).
    Bound,
}

impl core::fmt::Display for RegisterError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            RegisterError::OutOfRange => f.write_str("no slot of that index"),
            RegisterError::Taken => f.write_str("the slot is registered already"),
            RegisterError::Bound => f.write_str(
                "this thread's %fs/%gs word holds a slot already (registered, or another thread's base)",
            ),
        }
    }
}

/// Sets the tracer up over `memory` with the default [`Options`] (stop when full, 512 frames deep).
pub fn init(
    memory: &'static mut [u8],
    clock: Clock,
    threads: Threads,
) -> Result<Tracer, InitError> {
    init_with(memory, clock, threads, Options::default())
}

/// Sets the tracer up over `memory`. Tracing starts off ([`Tracer::enable`]).
pub fn init_with(
    memory: &'static mut [u8],
    clock: Clock,
    threads: Threads,
    options: Options,
) -> Result<Tracer, InitError> {
    let count = threads.count();
    if count == 0 {
        return Err(InitError::NoThreads);
    }
    if let Clock::Tsc { hz: 0 } = clock {
        return Err(InitError::NoFrequency);
    }
    let depth = options.shadow_depth.max(1);
    let slot_min =
        (slot::HEADER + depth * ferrotrace_core::shadow::ShadowFrame::SIZE + 16 + MIN_RECORDS * 16)
            .next_multiple_of(64);
    let at = memory.as_mut_ptr() as usize;
    let skip = at.next_multiple_of(64) - at;
    let needed = skip + SCRATCH_LEN + count.saturating_mul(slot_min);
    if memory.len() < needed {
        return Err(InitError::TooSmall(needed));
    }
    if SETUP.initialized.swap(true, Ordering::AcqRel) {
        return Err(InitError::AlreadyInitialized);
    }
    let scratch = at + skip;
    let slots = scratch + SCRATCH_LEN;
    let stride = ((memory.len() - skip - SCRATCH_LEN) / count) & !63;
    for i in 0..count {
        // SAFETY: slot i is [slots + i*stride, + stride) inside `memory`, 64-byte aligned, which the
        // tracer owns from now on ('static, exclusive); headers are atomics, valid when zeroed and
        // reset before use.
        let h = unsafe { &*((slots + i * stride) as *const slot::Header) };
        h.reset(stride, depth);
        h.tid.store(i as u64, Ordering::Relaxed);
    }
    let (kind, offset, thread_fn) = match threads {
        Threads::Fs { offset, .. } => (0, offset as u64, 0),
        Threads::Gs { offset, .. } => (1, offset as u64, 0),
        Threads::Fn { current, .. } => (2, 0, current as usize as u64),
    };
    HOT.threads.store(kind, Ordering::Relaxed);
    HOT.tls_offset.store(offset, Ordering::Relaxed);
    HOT.thread_fn.store(thread_fn, Ordering::Relaxed);
    HOT.count.store(count as u64, Ordering::Relaxed);
    HOT.stride.store(stride as u64, Ordering::Relaxed);
    HOT.slots.store(slots as u64, Ordering::Relaxed);
    let (clock_fn, hz) = match clock {
        Clock::Tsc { hz } => (0, hz),
        Clock::Ns(f) => (f as usize as u64, 1_000_000_000),
    };
    HOT.clock_fn.store(clock_fn, Ordering::Relaxed);
    HOT.wrap
        .store((options.on_full == OnFull::Wrap) as u64, Ordering::Relaxed);
    SETUP.tick_hz.store(hz, Ordering::Relaxed);
    SETUP.scratch.store(scratch as u64, Ordering::Relaxed);
    SETUP.start_ticks.store(clock.now(), Ordering::Release);
    Ok(Tracer { _private: () })
}

/// The tracer, once set up: a handle to the global state (`mcount` has no other way to find it), to
/// copy wherever it is needed (a thread that registers itself, a shutdown path).
#[derive(Clone, Copy, Debug)]
pub struct Tracer {
    _private: (),
}

/// Counts of what was recorded.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Events recorded (those a wrap overwrote included).
    pub events: u64,
    /// Events lost: a full slot in stop mode, or calls deeper than the shadow stack.
    pub lost: u64,
    /// Events a wrap overwrote.
    pub overwritten: u64,
}

impl Tracer {
    /// Starts recording. Inlined, so that an instrumented build does not trace it.
    #[inline(always)]
    pub fn enable(&self) {
        HOT.enabled.store(1, Ordering::Release);
    }

    /// Stops recording. Calls that are under way still record their exits. Inlined, so that an
    /// instrumented build does not trace it.
    #[inline(always)]
    pub fn disable(&self) {
        HOT.enabled.store(0, Ordering::Release);
    }

    /// True while recording.
    #[inline(always)]
    pub fn is_enabled(&self) -> bool {
        HOT.enabled.load(Ordering::Relaxed) != 0
    }

    /// Number of slots.
    pub fn slots(&self) -> usize {
        HOT.count.load(Ordering::Relaxed) as usize
    }

    /// Names slot `index` in the trace: `tid` (the embedder's thread or CPU id; default: the index)
    /// and `name`. In `%fs`/`%gs` mode it also binds the calling thread (or CPU) to the slot: its
    /// `%fs:offset` (`%gs:offset`) gets the slot's address (the word [`Threads::fs`]'s contract
    /// reserves). Each index is registered once: a second registration is refused
    /// ([`RegisterError::Taken`]), as is an index out of range, and in `%fs`/`%gs` mode a thread
    /// whose word holds a slot already ([`RegisterError::Bound`]). Inlined, so that an instrumented
    /// build does not trace it.
    ///
    /// In `%fs`/`%gs` mode the function that calls it is not traced, nor are the functions it is
    /// running in: their entries came before the thread had a slot (with [`Threads::from_fn`], where
    /// the slot is the callback's answer, not a word this call writes, they are). Register from a
    /// thread's entry function and do the work in a function it calls.
    #[inline(always)]
    pub fn register_thread(&self, index: usize, tid: u32, name: &str) -> Result<(), RegisterError> {
        let Some(h) = slot_header(index) else {
            return Err(RegisterError::OutOfRange);
        };
        let offset = HOT.tls_offset.load(Ordering::Relaxed);
        let bound: u64;
        match HOT.threads.load(Ordering::Relaxed) {
            // SAFETY: the contract of `Threads::fs`: the word at the offset is mapped and the tracer's.
            0 => unsafe {
                core::arch::asm!("mov {v}, qword ptr fs:[{o}]", o = in(reg) offset, v = out(reg) bound)
            },
            // SAFETY: as above, for %gs (`Threads::gs`).
            1 => unsafe {
                core::arch::asm!("mov {v}, qword ptr gs:[{o}]", o = in(reg) offset, v = out(reg) bound)
            },
            _ => bound = 0,
        }
        // A slot's address; 0 is "not traced", and 1 "being bound" (the hosted front end's marker
        // while its hooks call the binding code that registers).
        if bound > 1 {
            return Err(RegisterError::Bound);
        }
        if !h.claim() {
            return Err(RegisterError::Taken);
        }
        h.tid.store(tid as u64, Ordering::Relaxed);
        h.set_name(name);
        let at = h as *const slot::Header as u64;
        match HOT.threads.load(Ordering::Relaxed) {
            // SAFETY: the contract of `Threads::fs`, the only way to this mode: the word at the offset
            // is the thread's own, mapped and reserved for the tracer.
            0 => unsafe {
                core::arch::asm!("mov qword ptr fs:[{o}], {v}", o = in(reg) offset, v = in(reg) at)
            },
            // SAFETY: as above, for %gs (`Threads::gs`).
            1 => unsafe {
                core::arch::asm!("mov qword ptr gs:[{o}], {v}", o = in(reg) offset, v = in(reg) at)
            },
            _ => {}
        }
        Ok(())
    }

    /// What was recorded so far.
    pub fn stats(&self) -> Stats {
        let mut s = Stats::default();
        for i in 0..self.slots() {
            let Some(h) = slot_header(i) else { continue };
            let written = h.written();
            s.events += written;
            s.lost += h.lost.load(Ordering::Relaxed);
            s.overwritten += written - written.min(h.capacity());
        }
        s
    }

    /// Writes the trace to `out` with nothing known about the program but what [`init`] was given
    /// (functions are named on the host: `ferrotrace report --symbols BINARY`). See
    /// [`Tracer::write_trace_with`].
    pub fn write_trace<E>(
        &self,
        out: impl FnMut(&[u8]) -> Result<(), E>,
    ) -> Result<(), WriteError<E>> {
        self.write_trace_with(&Program::default(), out)
    }

    /// Writes the trace: header, Session, Clock, Module, Functions (when `program` has symbols), per
    /// slot a Thread chunk and its Events chunks, Clock, End. Tracing must be off ([`WriteError::Enabled`])
    /// and no hooked function should be returning in another thread (its exit could be torn). Can be
    /// called again: it reads, it does not consume.
    pub fn write_trace_with<E>(
        &self,
        program: &Program<'_>,
        mut out: impl FnMut(&[u8]) -> Result<(), E>,
    ) -> Result<(), WriteError<E>> {
        if self.is_enabled() {
            return Err(WriteError::Enabled);
        }
        if SETUP.writing.swap(true, Ordering::Acquire) {
            return Err(WriteError::Busy);
        }
        // SAFETY: the scratch area is SCRATCH_LEN bytes of the tracer's memory, used only here, and
        // `writing` makes this the only user.
        let scratch = unsafe {
            core::slice::from_raw_parts_mut(
                SETUP.scratch.load(Ordering::Relaxed) as *mut u8,
                SCRATCH_LEN,
            )
        };
        let end_ticks = match HOT.clock_fn.load(Ordering::Relaxed) {
            // SAFETY: rdtsc has no preconditions.
            0 => unsafe { core::arch::x86_64::_rdtsc() },
            f => {
                // SAFETY: the value was stored from an `extern "C" fn() -> u64` by init.
                let f: extern "C" fn() -> u64 = unsafe { core::mem::transmute(f as usize) };
                f()
            }
        };
        let r = trace::write(
            program,
            trace::Clocks {
                hz: SETUP.tick_hz.load(Ordering::Relaxed),
                start: SETUP.start_ticks.load(Ordering::Relaxed),
                end: end_ticks,
            },
            HOT.wrap.load(Ordering::Relaxed) != 0,
            scratch,
            &mut out,
        );
        SETUP.writing.store(false, Ordering::Release);
        r
    }
}

/// Slot `index`'s header.
#[inline(always)]
pub(crate) fn slot_header(index: usize) -> Option<&'static slot::Header> {
    if index >= HOT.count.load(Ordering::Relaxed) as usize {
        return None;
    }
    let at =
        HOT.slots.load(Ordering::Relaxed) + (index as u64) * HOT.stride.load(Ordering::Relaxed);
    // SAFETY: set up by init: a header at the start of each of `count` slots, living for 'static.
    Some(unsafe { &*(at as *const slot::Header) })
}

/// Records the entry of the function at `address` in the calling thread: for code the compiler does
/// not instrument (interrupt entry, assembly, a function pointer's target). Assembly that calls
/// `ferrotrace_embedded_enter` directly (address in `rdi`) keeps every register but the flags.
#[inline(always)]
pub fn enter(address: usize) {
    // SAFETY: the hook reads only the tracer's own state and the caller's slot.
    unsafe { hook::ferrotrace_embedded_enter(address) }
}

/// Records the exit of the function at `address` (see [`enter`]).
#[inline(always)]
pub fn exit(address: usize) {
    // SAFETY: as for `enter`.
    unsafe { hook::ferrotrace_embedded_exit(address) }
}

/// Ends the program on a panic with an invalid instruction (feature `panic-handler`: for C embedders
/// of the `staticlib`, whose link has no Rust panic handler).
#[cfg(all(feature = "panic-handler", not(feature = "hosted"), not(test)))]
#[panic_handler]
fn panic(_: &core::panic::PanicInfo<'_>) -> ! {
    // SAFETY: ud2 raises #UD; it does not return.
    unsafe { core::arch::asm!("ud2", options(noreturn)) }
}

/// The personality routine the precompiled `core` refers to in its unwind tables (feature
/// `panic-handler`, built with `panic = "abort"`: never called).
#[cfg(all(feature = "panic-handler", not(feature = "hosted"), not(test)))]
#[no_mangle]
pub extern "C" fn rust_eh_personality() {}
