//! The recorder for ordinary programs (feature `hosted`): rftrace's `init`/`enable`/`dump`, with what
//! an embedder would give taken from the operating system. A thin layer: memory from the allocator,
//! each thread bound to a slot at its first traced call (its `%fs`-relative thread-local word), the
//! TSC calibrated against CLOCK_MONOTONIC, the executable's path, load bias and build-id from the
//! dynamic loader, and the trace written to a new file (mode 0600, as every ferrotrace trace).
//!
//! ```no_run
//! // Built with RUSTFLAGS='-Zinstrument-mcount -Cforce-frame-pointers=yes' (nightly).
//! ferrotrace_embedded::hosted::init(64 << 20, 8).expect("tracer");
//! ferrotrace_embedded::hosted::enable();
//! // ... the work to trace ...
//! ferrotrace_embedded::hosted::disable();
//! ferrotrace_embedded::hosted::dump("trace.data").expect("trace written");
//! ```
//!
//! Then `ferrotrace report -i trace.data` names the functions from the executable. A panic that
//! unwinds through traced calls first puts their real return addresses back (unwinders cannot read
//! the shadow stack): those calls show no exit in the trace, and the panic's own hooks are not traced.

use std::cell::Cell;
use std::ffi::c_void;
use std::io::{self, BufWriter, Write};
use std::path::Path;
use std::sync::atomic::{AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::OnceLock;

use ferrotrace_core::clock::{monotonic_ns, rdtsc, realtime_ns};
use ferrotrace_core::shadow::ShadowFrame;

use crate::{Clock, Program, Threads, Tracer};

thread_local! {
    /// The thread's slot address (0: not bound yet, 1: never traced), read by the hooks at `%fs`.
    static SLOT: Cell<u64> = const { Cell::new(0) };
}

struct State {
    tracer: Tracer,
    tls_offset: isize,
    start: (u64, u64),
    start_realtime_ns: u64,
}

static STATE: OnceLock<State> = OnceLock::new();
static NEXT_SLOT: AtomicUsize = AtomicUsize::new(0);
/// Threads that found every slot taken.
static UNTRACED_THREADS: AtomicU64 = AtomicU64::new(0);

/// The offset of this thread's `SLOT` from its `%fs` base: the same in every thread for the static
/// TLS block of an executable (the hooks rely on it; a thread where it differs is not traced).
fn tls_offset() -> isize {
    let var = SLOT.with(|s| s.as_ptr() as isize);
    let fs_base: isize;
    // SAFETY: on x86_64 Linux, %fs:0 holds the thread pointer itself (the TCB's self pointer).
    unsafe { core::arch::asm!("mov {}, qword ptr fs:[0]", out(reg) fs_base) };
    var - fs_base
}

/// Called by the hooks (every register saved, the thread marked "being bound") at a thread's first
/// traced call: gives it the next free slot. Returns the slot's address, or 1: never trace it.
extern "C" fn bind_current_thread() -> usize {
    let Some(state) = STATE.get() else { return 1 };
    if tls_offset() != state.tls_offset {
        return 1;
    }
    let index = NEXT_SLOT.fetch_add(1, Ordering::Relaxed);
    let Some(header) = crate::slot_header(index) else {
        UNTRACED_THREADS.fetch_add(1, Ordering::Relaxed);
        return 1;
    };
    // SAFETY: gettid has no preconditions.
    let tid = unsafe { libc::syscall(libc::SYS_gettid) } as u32;
    let current = std::thread::current();
    // Indices come from one counter: each is registered once, so this cannot be refused.
    if state
        .tracer
        .register_thread(index, tid, current.name().unwrap_or(""))
        .is_err()
    {
        return 1;
    }
    header as *const crate::slot::Header as usize
}

/// Sets the tracer up with `bytes` of memory shared by at most `threads` threads (each thread's
/// slot gets an equal part), tracing off. Fails when called twice or when `bytes` is too small.
pub fn init(bytes: usize, threads: usize) -> io::Result<()> {
    let memory: &'static mut [u8] = vec![0u8; bytes].leak();
    // Touch every page now: a page fault on the traced path costs more than the tracing.
    for page in memory.chunks_mut(4096) {
        // SAFETY: a valid, exclusive byte of `memory`.
        unsafe { core::ptr::write_volatile(page.as_mut_ptr(), 0) };
    }
    let start = (rdtsc(), monotonic_ns());
    // A first frequency for the tracer (the trace gets exact pairs from `dump`): 2 ms of both clocks.
    while monotonic_ns() < start.1 + 2_000_000 {}
    let (t, n) = (rdtsc(), monotonic_ns());
    let hz = ((t - start.0) as u128 * 1_000_000_000 / (n - start.1).max(1) as u128) as u64;
    let offset = tls_offset();
    // SAFETY: `offset` is where this thread's `SLOT` lies from its thread pointer: a word of the
    // executable's static TLS block, the same offset in every thread, mapped for each thread's life,
    // 0 until bound and written by nobody but the tracer (the hooks, `register_thread`, `set_word`).
    let threads = unsafe { Threads::fs(offset, threads) };
    let tracer = crate::init(memory, Clock::tsc(hz.max(1)), threads)
        .map_err(|e| io::Error::other(e.to_string()))?;
    let state = State {
        tracer,
        tls_offset: offset,
        start,
        start_realtime_ns: realtime_ns(),
    };
    if STATE.set(state).is_err() {
        return Err(io::Error::other("the tracer is initialized already"));
    }
    crate::HOT.bind_fn.store(
        bind_current_thread as *const () as usize as u64,
        Ordering::Release,
    );
    TLS_OFFSET.store(offset as i64, Ordering::Relaxed);
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let slot = unhook_current_thread();
        previous(info);
        if slot > 1 {
            // SAFETY: this thread's own word, at the offset the hooks read.
            unsafe { set_word(slot) };
        }
    }));
    Ok(())
}

/// `SLOT`'s offset from the thread pointer, for code that must not call `SLOT.with` (a traced call).
static TLS_OFFSET: AtomicI64 = AtomicI64::new(0);

/// Sets this thread's slot word.
///
/// # Safety
/// Only the tracer's own values: 0, 1 or a slot's address.
#[inline(always)]
unsafe fn set_word(v: u64) {
    let offset = TLS_OFFSET.load(Ordering::Relaxed);
    // SAFETY: the word of SLOT in this thread's static TLS block (the hooks read the same place).
    unsafe { core::arch::asm!("mov qword ptr fs:[{o}], {v}", o = in(reg) offset, v = in(reg) v) };
}

/// At a panic (the hook runs before unwinding starts): stops tracing the thread (its word becomes 1,
/// so that the panic's message and hooks are not traced), takes back the panic hook's own entry (the
/// last record, whose frame is on top of the shadow stack), puts the real return address back into
/// every hooked frame, and empties the shadow stack, so that an unwinder walks the stack as if it were
/// not traced. Returns the thread's slot word, for the hook to restore when it is done. Inlined into
/// the hook: a call would be traced.
#[inline(always)]
fn unhook_current_thread() -> u64 {
    let offset = TLS_OFFSET.load(Ordering::Relaxed);
    let at: u64;
    // SAFETY: SLOT's word in this thread's static TLS block.
    unsafe { core::arch::asm!("mov {v}, qword ptr fs:[{o}]", o = in(reg) offset, v = out(reg) at) };
    if at <= 1 {
        return at;
    }
    // SAFETY: 1 is the tracer's "not traced" value.
    unsafe { set_word(1) };
    // SAFETY: a slot address the hooks stored for this thread: a live header in the tracer's memory.
    let h = unsafe { &*(at as *const crate::slot::Header) };
    let base = h.base.load(Ordering::Relaxed);
    let top = h.top.load(Ordering::Relaxed);
    let frame = ShadowFrame::SIZE as u64;
    let cursor = h.cursor.load(Ordering::Relaxed);
    if top > base && cursor > h.start.load(Ordering::Relaxed) {
        // SAFETY: the top frame and the last record were written by this thread's hooks.
        let (word, last) = unsafe {
            (
                (*((top - frame) as *const ShadowFrame)).word,
                *((cursor - 8) as *const u64),
            )
        };
        if word == last {
            h.cursor.store(cursor - 16, Ordering::Relaxed);
        }
    }
    let mut f = top;
    while f > base {
        f -= frame;
        // SAFETY: frames between base and top were pushed by this thread's hooks: {real return
        // address, its stack slot, word}; the slots are in frames of this thread that are still live
        // (the panic unwinds from above them).
        unsafe {
            let hooked = *(f as *const ShadowFrame);
            *(hooked.slot as *mut u64) = hooked.ret;
        }
    }
    h.top.store(base, Ordering::Relaxed);
    at
}

fn tracer() -> Option<&'static Tracer> {
    STATE.get().map(|s| &s.tracer)
}

/// Starts recording (after [`init`]).
pub fn enable() {
    if let Some(t) = tracer() {
        t.enable();
    }
}

/// Stops recording.
pub fn disable() {
    if let Some(t) = tracer() {
        t.disable();
    }
}

/// The executable's load bias and build-id, from the dynamic loader's first object.
fn main_object() -> (u64, Vec<u8>) {
    unsafe extern "C" fn first(
        info: *mut libc::dl_phdr_info,
        _size: usize,
        data: *mut c_void,
    ) -> libc::c_int {
        // SAFETY: the loader passes a valid info for the call; `data` is the (u64, Vec<u8>) below.
        let (info, out) = unsafe { (&*info, &mut *(data as *mut (u64, Vec<u8>))) };
        out.0 = info.dlpi_addr;
        for i in 0..info.dlpi_phnum as usize {
            // SAFETY: dlpi_phdr has dlpi_phnum entries.
            let ph = unsafe { &*info.dlpi_phdr.add(i) };
            if ph.p_type != libc::PT_NOTE {
                continue;
            }
            // SAFETY: a PT_NOTE segment of a loaded object is mapped at bias + p_vaddr.
            let notes = unsafe {
                std::slice::from_raw_parts(
                    (info.dlpi_addr + ph.p_vaddr) as *const u8,
                    ph.p_memsz as usize,
                )
            };
            if let Some(id) = ferrotrace_core::build_id::gnu_build_id(notes) {
                out.1 = id.to_vec();
            }
        }
        1 // the first object is the executable: stop
    }
    let mut out: (u64, Vec<u8>) = (0, Vec::new());
    // SAFETY: the callback matches the loader's signature and only reads what it is given.
    unsafe { libc::dl_iterate_phdr(Some(first), &mut out as *mut _ as *mut c_void) };
    out
}

/// Stops recording and writes the trace to `path`, a new file (mode 0600, never through a link; an
/// earlier trace there is kept as `FILE.old`, anything else in the way is refused: core's `output`).
/// Call it when the traced threads are done.
pub fn dump(path: impl AsRef<Path>) -> io::Result<()> {
    let state = STATE
        .get()
        .ok_or_else(|| io::Error::other("the tracer is not initialized"))?;
    state.tracer.disable();
    let (file, _previous) =
        ferrotrace_core::output::create(path.as_ref()).map_err(io::Error::other)?;
    let mut out = BufWriter::with_capacity(1 << 20, file);
    let exe = std::env::current_exe()?;
    let exe = exe.to_string_lossy();
    let (bias, build_id) = main_object();
    let mut cmdline = Vec::new();
    for (i, a) in std::env::args_os().enumerate() {
        if i > 0 {
            cmdline.push(0);
        }
        cmdline.extend_from_slice(a.as_encoded_bytes());
    }
    let program = Program {
        path: &exe,
        bias,
        size: 0,
        build_id: &build_id,
        symbols: &[],
        pid: std::process::id(),
        cmdline: &cmdline,
        start_realtime_ns: state.start_realtime_ns,
        clock_pairs: Some([state.start, (rdtsc(), monotonic_ns())]),
    };
    state
        .tracer
        .write_trace_with(&program, |b| out.write_all(b))
        .map_err(|e| match e {
            crate::WriteError::Output(e) => e,
            other => io::Error::other(other.to_string()),
        })?;
    out.flush()?;
    let untraced = UNTRACED_THREADS.load(Ordering::Relaxed);
    if untraced > 0 {
        eprintln!(
            "ferrotrace-embedded: {untraced} threads were not traced: every slot was taken (init's `threads`)"
        );
    }
    Ok(())
}
