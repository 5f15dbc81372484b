//! Allocation events: what the malloc hooks of the preload library and [`Allocator`] record.
//!
//! Each allocation becomes an `Alloc` event (size, address, call stack) and each free a `Free` event
//! (address), written into the calling thread's chunk through the same `HOT` cursor as the XRay
//! trampolines, so they sit on the same timeline as the function events around them.
//!
//! The hot path (per event): one load of [`TLS_OFFSET`] (0 while nothing is recorded: the dormant
//! cost), the thread's [`AllocThread`] block at a constant offset from `%fs` (never `__tls_get_addr`,
//! which the preloaded copy would otherwise call), a re-entry flag, the stack walk, `rdtsc`, and two
//! 16-byte stores (the record and one payload slot `{size, address}` or `{address, 0}`).
//!
//! Stacks are walked by unwind rules (`crate::arch::unwind`: one per return address, from the
//! objects' `.eh_frame`, remembered in a lock-free table), so that they go on through code built
//! without frame pointers; code without unwind information is stepped along frame pointers. The walk
//! is bounded by depth and by the thread's stack (every word read must lie above the current stack
//! pointer and below the stack's top, 8-byte aligned, and each frame above the last: junk in a register
//! or a saved slot ends the walk, never a fault). `FERROTRACE_ALLOC_UNWIND=fp` walks frame pointers
//! only (the cost comparison of bench/alloc.sh). They are interned as heaptrack does with its
//! trace tree: a per-thread direct-mapped cache maps a 64-bit hash of the return addresses to the
//! leaf id of the trace-wide prefix tree, so a stack seen before costs the walk, the hash and one probe;
//! only a miss takes the global [`Interner`] lock, which adds the new nodes (module-relative addresses,
//! with `Module` chunks for every object the stacks walk into) and queues them for the collector. The
//! collector writes queued nodes before it writes any chunk of events ([`take_stacks`]), so a node is
//! always in the file before the first event that refers to it.
//!
//! Sampling (`FERROTRACE_ALLOC_SAMPLE=N`): each thread counts down a number of bytes drawn from an
//! exponential distribution of mean N; the allocation that crosses zero is recorded, and its address
//! is remembered in a lock-free set so that only its free is recorded too. This is Poisson sampling of
//! the allocated bytes (jemalloc's `lg_prof_sample`, heapprofd): an allocation of `s` bytes is sampled
//! with probability `1 - exp(-s/N)`, and the analysis weighs it by the inverse (see
//! `ferrotrace_analysis::mem`).
//!
//! Never breaking the program: the hooks do nothing on a thread that is inside the runtime or the hooks
//! already (the `busy` flag: the runtime's own allocations, allocations from a signal handler that
//! interrupted the hooks), on the runtime's threads, and after the thread's exit hook ran. The global
//! lock is held across `fork` by `pthread_atfork` handlers, and a forked child's collector writes the
//! whole stack table again into its own file.

use std::alloc::{GlobalAlloc, Layout};
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::mem::MaybeUninit;
use std::sync::atomic::{
    AtomicBool, AtomicI64, AtomicIsize, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize,
    Ordering::Relaxed,
};

use ferrotrace_core::format::ChunkKind;
use ferrotrace_core::record::{EventKind, Record};
use ferrotrace_core::schema::{self, Payload, StackNode, StacksHeader};
use ferrotrace_core::shadow::ShadowFrame;

use crate::arch::thread::thread_pointer;
use crate::arch::unwind;
use crate::buffers::hot::Hot;
use crate::lifecycle::config::{AllocSettings, ALLOC_MAX_DEPTH};
use crate::lifecycle::runtime::{ForkHandlers, Recorder};
use crate::state::PROCESS;

/// Module ids of the objects stacks walk into start here, above the XRay discovery's ids: those modules
/// carry a load bias for absolute function addresses, stack modules carry bias 0 (their addresses are
/// module-relative already), so they are distinct entries even for the same file.
pub const STACK_MODULE_BASE: u32 = 1 << 20;

/// `&ALLOC_THREAD - thread pointer`, the same in every thread (static TLS); 0 while allocations are not
/// recorded, which is all the dormant hooks look at. (Outside `crate::state`, with the hooks: the one
/// load of their dormant path. The recorder's settings are `PROCESS.alloc`.)
static TLS_OFFSET: AtomicIsize = AtomicIsize::new(0);

/// `fp`: allocation stacks along frame pointers only, as before unwind rules (for cost comparisons).
const ALLOC_UNWIND: &str = "FERROTRACE_ALLOC_UNWIND";
/// Set: the unwinder's counts on standard error at exit (`ferrotrace: alloc unwind: ...`).
const ALLOC_UNWIND_STATS: &str = "FERROTRACE_ALLOC_UNWIND_STATS";

extern "C" fn print_unwind_stats() {
    let c = &unwind::COUNTS;
    unrecorded(|| {
        say!(
            "ferrotrace: alloc unwind: {} rules looked up ({} without unwind information, {} of \
             unsupported form), {} walks ended at an unsupported rule, {} rules not kept (table full)",
            c.lookups.load(Relaxed),
            c.no_info.load(Relaxed),
            c.unsupported_rules.load(Relaxed),
            c.unsupported.load(Relaxed),
            c.table_full.load(Relaxed),
        )
    });
}

const FRESH: u32 = 0;
const READY: u32 = 1;
const NEVER: u32 = 2;

/// The per-thread state of the hooks. `#[repr(C)]`, const-initialised and without `Drop`: static TLS at
/// a fixed offset from the thread pointer. Atomics (relaxed: plain moves) because a signal handler on
/// the same thread may look at it between any two instructions.
#[repr(C)]
pub struct AllocThread {
    state: AtomicU32,
    /// Nonzero while the hooks or the runtime run on this thread: their allocations are not recorded.
    busy: AtomicU32,
    /// Sampling: bytes still to allocate before the next sampled allocation.
    countdown: AtomicI64,
    rng: AtomicU64,
    stack_lo: AtomicUsize,
    stack_hi: AtomicUsize,
    cache: AtomicPtr<CacheEntry>,
}

// Per thread, not the process's: outside `crate::state`.
thread_local! {
    static ALLOC_THREAD: AllocThread = const {
        AllocThread {
            state: AtomicU32::new(FRESH),
            busy: AtomicU32::new(0),
            countdown: AtomicI64::new(0),
            rng: AtomicU64::new(0),
            stack_lo: AtomicUsize::new(0),
            stack_hi: AtomicUsize::new(0),
            cache: AtomicPtr::new(core::ptr::null_mut()),
        }
    };
}

/// The calling thread's block, or `None` while allocations are not recorded.
#[inline(always)]
fn this_thread() -> Option<&'static AllocThread> {
    let off = TLS_OFFSET.load(Relaxed);
    if off == 0 {
        return None;
    }
    // SAFETY: a nonzero offset was computed from ALLOC_THREAD in static TLS, the same offset in every
    // thread; the block has no destructor, so it lives as long as the thread.
    Some(unsafe { &*((thread_pointer() as isize + off) as *const AllocThread) })
}

/// The allocation recorder's hooks (`recorders::ALL`): started when `record --alloc` asked for it,
/// the interner's lock held across `fork`, the thread's stack cache freed at its exit, the interned
/// stacks handed to the collector.
pub const RECORDER: Recorder = Recorder {
    start: |program| match program.alloc {
        Some(settings) => {
            start(settings);
            true
        }
        None => false,
    },
    fork: Some(ForkHandlers {
        prepare: lock_for_fork,
        parent: unlock_after_fork,
        child: unlock_after_fork,
    }),
    thread_exit,
    ignore_thread: ignore_current_thread,
    metadata: take_stacks,
};

/// Starts recording allocations with `settings`. Called once the runtime records; start-up then
/// registers the fork handlers ([`RECORDER`]), which only take and release the interner's lock.
pub fn start(settings: AllocSettings) {
    PROCESS
        .alloc
        .sample_interval
        .store(settings.sample, Relaxed);
    PROCESS
        .alloc
        .depth
        .store(settings.depth.min(ALLOC_MAX_DEPTH), Relaxed);
    if settings.sample > 0 && !SAMPLED.init() {
        say!("ferrotrace: no memory for the sampled-address set: every free is recorded");
    }
    if std::env::var(ALLOC_UNWIND).is_ok_and(|v| v == "fp") {
        PROCESS.alloc.fp_only.store(true, Relaxed);
    } else if settings.depth > 0 {
        if !unwind::init() {
            say!("ferrotrace: no memory for the unwind rule table: rules looked up every time");
        }
        unwind::set_discover(discover_objects);
        if std::env::var_os(ALLOC_UNWIND_STATS).is_some() {
            // SAFETY: registers a plain function with no arguments.
            unsafe { libc::atexit(print_unwind_stats) };
        }
    }
    let off = ALLOC_THREAD.with(|t| t as *const AllocThread as isize) - thread_pointer() as isize;
    TLS_OFFSET.store(off, Relaxed);
}

/// Marks the calling thread as one whose allocations are never recorded (the runtime's own threads, which
/// also call `thread::ignore_current_thread`).
pub fn ignore_current_thread() {
    let _ = ALLOC_THREAD.try_with(|t| t.state.store(NEVER, Relaxed));
}

/// At thread exit: frees the thread's stack cache; nothing the thread does afterwards is recorded (its
/// chunk is gone).
pub fn thread_exit() {
    let _ = ALLOC_THREAD.try_with(|t| {
        t.state.store(NEVER, Relaxed);
        let cache = t.cache.swap(core::ptr::null_mut(), Relaxed);
        if !cache.is_null() {
            // SAFETY: the cache was mapped by `init_thread` with this size and nothing else refers to it.
            unsafe { libc::munmap(cache.cast(), CACHE_BYTES) };
        }
    });
}

/// Runs `f` with the calling thread's allocations unrecorded: runtime work on a program thread (a
/// rescan from the `dlopen` hook), and every call into the C library's allocator from the hooks. The
/// latter matters for signal handlers that allocate: glibc serves a small block from its thread cache
/// without the arena lock, so a handler that interrupts `malloc` may well allocate; recording it might
/// intern a new stack, which allocates and would wait for the lock the interrupted `malloc` holds.
/// A plain load and store, not an atomic increment: only this thread and its signal handlers touch the
/// flag, and a handler leaves it as it found it.
#[inline(always)]
pub fn unrecorded<R>(f: impl FnOnce() -> R) -> R {
    match this_thread() {
        Some(t) => {
            let was = t.busy.load(Relaxed);
            t.busy.store(was + 1, Relaxed);
            // The runtime's own allocation on a program thread (it was busy already: interning a
            // stack, registering the thread): asynchronous signals wait until the C library's
            // allocator is left. A handler that allocates (programs do, though the C library does not
            // promise it works) would otherwise wait for the arena lock its own thread holds: the
            // signals test hung on it. The program's own allocations (not busy) are left alone: no
            // system call on their path.
            let r = if was != 0 { with_signals_held(f) } else { f() };
            t.busy.store(was, Relaxed);
            r
        }
        None => f(),
    }
}

/// Runs `f` with the asynchronous signals blocked (faults stay deliverable: a blocked SIGSEGV raised
/// by the thread itself would kill the process).
#[cold]
fn with_signals_held<R>(f: impl FnOnce() -> R) -> R {
    // SAFETY: sigset operations on local sets, and pthread_sigmask on the calling thread.
    let old = unsafe {
        let mut block: libc::sigset_t = core::mem::zeroed();
        libc::sigfillset(&mut block);
        for sig in [
            libc::SIGSEGV,
            libc::SIGBUS,
            libc::SIGFPE,
            libc::SIGILL,
            libc::SIGTRAP,
        ] {
            libc::sigdelset(&mut block, sig);
        }
        let mut old: libc::sigset_t = core::mem::zeroed();
        libc::pthread_sigmask(libc::SIG_BLOCK, &block, &mut old);
        old
    };
    let r = f();
    // SAFETY: restores the mask saved above.
    unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &old, core::ptr::null_mut()) };
    r
}

// ---- the events ------------------------------------------------------------------------------------

/// Where the hooks were called from: the address of the caller's return address (`rsp` at the hook's
/// entry) and the caller's frame pointer.
#[derive(Clone, Copy)]
#[repr(C)]
pub struct Caller {
    /// Points to the return address into the code that called the hook.
    pub ret_slot: *const usize,
    /// `rbp` at the hook's entry.
    pub rbp: usize,
}

/// A timestamp taken before memory is handed back, so that a free is never later than the allocation
/// that reuses the address on another thread. `None` when nothing is recorded.
#[inline(always)]
pub fn before_free(addr: usize) -> Option<u64> {
    if addr == 0 {
        return None;
    }
    let t = this_thread()?;
    if t.busy.load(Relaxed) != 0 || t.state.load(Relaxed) == NEVER {
        return None;
    }
    // Sampling: only the frees of sampled allocations are recorded. The address leaves the set before
    // the memory is handed back, when no other thread can have it yet.
    if PROCESS.alloc.sample_interval.load(Relaxed) != 0 && !SAMPLED.remove(addr as u64) {
        return None;
    }
    Some(crate::buffers::clock::rdtsc())
}

/// Records the free of `addr`, now (before the memory is handed back).
#[inline(always)]
pub fn free_now(addr: usize) {
    if let Some(tsc) = before_free(addr) {
        free_event(addr, tsc);
    }
}

/// After [`before_free`] said `Some`, the memory was not handed back after all (a failed `realloc`).
pub fn free_cancelled(addr: usize) {
    if PROCESS.alloc.sample_interval.load(Relaxed) != 0 {
        SAMPLED.insert(addr as u64);
    }
}

/// Records the free of `addr` stamped `tsc` (from [`before_free`]).
#[inline(always)]
pub fn free_event(addr: usize, tsc: u64) {
    let Some(t) = this_thread() else { return };
    t.busy.store(1, Relaxed);
    write_one(Record::free(tsc, addr as u64));
    t.busy.store(0, Relaxed);
}

/// Records the allocation of `size` bytes at `addr` made by `caller`.
///
/// # Safety
/// `caller.ret_slot` points to a readable word of the calling thread's stack: the return address the
/// call to the hook pushed (`rsp` at the hook's entry). `caller.rbp` may be anything: the frame
/// pointers the stack walk follows from it are checked against the thread's stack bounds.
#[inline(always)]
pub unsafe fn alloc_event(size: usize, addr: usize, caller: Caller) {
    if addr == 0 {
        return;
    }
    let Some(t) = this_thread() else { return };
    if t.busy.load(Relaxed) != 0 {
        return;
    }
    let state = t.state.load(Relaxed);
    if state != READY {
        if state == NEVER {
            return;
        }
        t.busy.store(1, Relaxed);
        init_thread(t);
        t.busy.store(0, Relaxed);
    }
    if PROCESS.alloc.sample_interval.load(Relaxed) != 0 && !sample(t, size, addr) {
        return;
    }
    t.busy.store(1, Relaxed);
    let depth = PROCESS.alloc.depth.load(Relaxed);
    let stack = if depth == 0 {
        0
    } else {
        stack_id(t, caller, depth)
    };
    write(
        Record::with_payload(crate::buffers::clock::rdtsc(), EventKind::Alloc, stack, 1),
        Record {
            tsc: size as u64,
            word: addr as u64,
        },
    );
    t.busy.store(0, Relaxed);
}

/// Stores the record and its payload slot at the thread's cursor, or hands them to the slow path.
#[inline(always)]
fn write(rec: Record, payload: Record) {
    let fill = |p: *mut Record| {
        // SAFETY: `p` is the one payload slot `append` has room for.
        unsafe { p.write(payload) }
    };
    // SAFETY: allocations are recorded once `start` ran (`this_thread` is `Some` only then), which
    // start-up calls after `init_tls_offset`.
    if unsafe { Hot::current_static() }
        .append(rec, 1, fill)
        .is_err()
    {
        crate::buffers::thread::record_slow(rec, &[payload]);
    }
}

/// Stores one record without payload at the thread's cursor, or hands it to the slow path.
#[inline(always)]
fn write_one(rec: Record) {
    // SAFETY: as in `write`: only after `start`, so after `init_tls_offset`.
    if unsafe { Hot::current_static() }
        .append(rec, 0, |_| {})
        .is_err()
    {
        crate::buffers::thread::record_slow(rec, &[]);
    }
}

#[cold]
#[inline(never)]
fn init_thread(t: &AllocThread) {
    // pthread_getattr_np may allocate (the main thread's reads /proc): `busy` is set.
    if let Some((lo, hi)) = crate::buffers::thread::stack_bounds() {
        t.stack_lo.store(lo, Relaxed);
        t.stack_hi.store(hi, Relaxed);
    }
    // SAFETY: an anonymous private mapping, checked.
    unsafe {
        if PROCESS.alloc.depth.load(Relaxed) > 0 {
            let map = libc::mmap(
                core::ptr::null_mut(),
                CACHE_BYTES,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            if map != libc::MAP_FAILED {
                t.cache.store(map.cast(), Relaxed);
            }
        }
    }
    let seed = crate::buffers::clock::rdtsc() ^ (t as *const AllocThread as u64).rotate_left(32);
    t.rng.store(seed | 1, Relaxed);
    let interval = PROCESS.alloc.sample_interval.load(Relaxed);
    if interval != 0 {
        t.countdown.store(next_countdown(t, interval), Relaxed);
    }
    t.state.store(READY, Relaxed);
}

// ---- sampling --------------------------------------------------------------------------------------

/// True when this allocation is sampled: the thread's byte countdown crossed zero.
#[inline(always)]
fn sample(t: &AllocThread, size: usize, addr: usize) -> bool {
    let left = t.countdown.load(Relaxed) - size as i64;
    if left > 0 {
        t.countdown.store(left, Relaxed);
        return false;
    }
    sampled(t, addr);
    true
}

#[cold]
#[inline(never)]
fn sampled(t: &AllocThread, addr: usize) {
    // One allocation that spans several sampling points is still one sample: its weight says how many
    // bytes it stands for. The distance from its end to the next point is a fresh draw (memoryless).
    t.countdown.store(
        next_countdown(t, PROCESS.alloc.sample_interval.load(Relaxed)),
        Relaxed,
    );
    SAMPLED.insert(addr as u64);
}

/// An exponentially distributed number of bytes of mean `interval` (at least 1).
fn next_countdown(t: &AllocThread, interval: u64) -> i64 {
    // xorshift64*: enough for sampling, no allocation, no lock.
    let mut x = t.rng.load(Relaxed);
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    t.rng.store(x, Relaxed);
    let r = x.wrapping_mul(0x2545_f491_4f6c_dd1d);
    // Uniform in (0, 1]: 53 random bits.
    let u = ((r >> 11) + 1) as f64 / (1u64 << 53) as f64;
    ((-u.ln() * interval as f64) as i64).max(1)
}

/// The addresses of live sampled allocations: an open-addressing table of atomic slots (0 empty,
/// 1 deleted), probed at most [`PROBES`] slots from the address's hash. Lock-free; a full
/// neighbourhood makes the set give up exactness: from then on every free is recorded (the analysis
/// ignores frees of addresses it never saw allocated).
struct SampledSet {
    slots: AtomicPtr<AtomicU64>,
    overflowed: AtomicBool,
}

const SAMPLED_SLOTS: usize = 1 << 18;
const PROBES: usize = 32;
const DELETED: u64 = 1;

// Outside `crate::state`: its type is this recorder's; set at its start, never reset (a recording of
// allocations is never retired, and a forked child frees what its parent sampled).
static SAMPLED: SampledSet = SampledSet {
    slots: AtomicPtr::new(core::ptr::null_mut()),
    overflowed: AtomicBool::new(false),
};

impl SampledSet {
    fn init(&self) -> bool {
        // SAFETY: anonymous private mapping, checked; zero pages are empty slots.
        let map = unsafe {
            libc::mmap(
                core::ptr::null_mut(),
                SAMPLED_SLOTS * 8,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if map == libc::MAP_FAILED {
            self.overflowed.store(true, Relaxed);
            return false;
        }
        self.slots.store(map.cast(), Relaxed);
        true
    }

    fn slot(&self, addr: u64, probe: usize) -> Option<&AtomicU64> {
        let slots = self.slots.load(Relaxed);
        if slots.is_null() {
            return None;
        }
        let h = (addr >> 4).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (64 - 18);
        let i = (h as usize + probe) & (SAMPLED_SLOTS - 1);
        // SAFETY: i < SAMPLED_SLOTS, inside the mapping, which is never unmapped.
        Some(unsafe { &*slots.add(i) })
    }

    fn insert(&self, addr: u64) {
        for probe in 0..PROBES {
            let Some(slot) = self.slot(addr, probe) else {
                break;
            };
            let cur = slot.load(Relaxed);
            if (cur == 0 || cur == DELETED)
                && slot.compare_exchange(cur, addr, Relaxed, Relaxed).is_ok()
            {
                return;
            }
        }
        self.overflowed.store(true, Relaxed);
    }

    /// True when `addr` was sampled (and forgets it), or when the set is no longer exact.
    #[inline(always)]
    fn remove(&self, addr: u64) -> bool {
        for probe in 0..PROBES {
            let Some(slot) = self.slot(addr, probe) else {
                break;
            };
            match slot.load(Relaxed) {
                0 => break,
                a if a == addr => {
                    return slot.compare_exchange(a, DELETED, Relaxed, Relaxed).is_ok()
                }
                _ => {}
            }
        }
        self.overflowed.load(Relaxed)
    }
}

// ---- stacks ----------------------------------------------------------------------------------------

/// One entry of a thread's stack cache: a stack's hash and its leaf id + 1 (0: empty).
#[repr(C)]
pub struct CacheEntry {
    hash: AtomicU64,
    id: AtomicU32,
}

const CACHE_ENTRIES: usize = 4096;
const CACHE_BYTES: usize = CACHE_ENTRIES * core::mem::size_of::<CacheEntry>();

/// The return addresses of the caller's stack, innermost first, into `out`; returns how many.
#[inline(always)]
fn walk(
    t: &AllocThread,
    caller: Caller,
    depth: usize,
    out: &mut [MaybeUninit<usize>; ALLOC_MAX_DEPTH],
) -> usize {
    // SAFETY: stacks are walked for allocation events, recorded only after `start`, so after
    // `init_tls_offset`.
    let mut hooks = HookedReturns::of(unsafe { Hot::current_static() });
    // SAFETY: `ret_slot` is the hook's entry stack pointer, holding the return address the call pushed
    // (`alloc_event`'s contract, which reaches here through `stack_id`).
    let first = unsafe { *caller.ret_slot };
    let mut pc = hooks.real(first, caller.ret_slot as usize);
    out[0].write(pc);
    let mut n = 1;
    let here = caller.ret_slot as usize;
    let (lo, hi) = (t.stack_lo.load(Relaxed), t.stack_hi.load(Relaxed));
    // Only words between the current stack pointer and the top of the thread's stack are read: all of
    // that is mapped. On another stack (a signal handler's alternate stack), only the caller is known.
    if here < lo || here >= hi {
        return n;
    }
    let max = depth.min(ALLOC_MAX_DEPTH);
    if PROCESS.alloc.fp_only.load(Relaxed) {
        return walk_frame_pointers(here, caller.rbp, hi, max, n, out, &mut hooks);
    }
    // The caller's registers when the hook returns: rsp above the return address, rbp as it was.
    let (mut sp, mut fp) = (here + 8, caller.rbp);
    let rules = unwind::Rules::now();
    while n < max {
        let mut rule = rules.get(pc);
        if rule.kind() == 0 {
            rule = rules.again(pc);
        }
        let cfa = match rule.kind() {
            unwind::CFA_RSP => sp.wrapping_add_signed(rule.cfa_offset()),
            unwind::CFA_RBP => fp.wrapping_add_signed(rule.cfa_offset()),
            kind => {
                if kind == unwind::UNSUPPORTED {
                    unwind::COUNTS.unsupported.fetch_add(1, Relaxed);
                }
                break; // the outermost frame, or a rule of another form
            }
        };
        // The return address at CFA - 8: sp <= CFA - 8 and CFA <= hi (x86-64 reads any alignment).
        if cfa < sp + 8 || cfa > hi {
            break;
        }
        if let Some(at) = rule.rbp_at() {
            // The caller's rbp, saved in this frame: sp <= at <= hi - 8.
            let at = cfa.wrapping_add_signed(at);
            if at < sp || at > hi - 8 {
                break;
            }
            // SAFETY: inside the live part of this thread's stack (checked just above).
            fp = unsafe { *(at as *const usize) };
        }
        // SAFETY: sp <= cfa - 8 < hi, checked above.
        let ret = unsafe { *((cfa - 8) as *const usize) };
        if ret < 4096 {
            break;
        }
        pc = hooks.real(ret, cfa - 8);
        out[n].write(pc);
        n += 1;
        sp = cfa;
    }
    n
}

/// The frame-pointer walk from `fp` (frames `{saved rbp, return address}`), after the `n` frames
/// already in `out`.
#[inline(always)]
fn walk_frame_pointers(
    here: usize,
    mut fp: usize,
    hi: usize,
    max: usize,
    mut n: usize,
    out: &mut [MaybeUninit<usize>; ALLOC_MAX_DEPTH],
    hooks: &mut HookedReturns,
) -> usize {
    let mut floor = here;
    while n < max {
        if fp < floor || fp & 7 != 0 || fp.saturating_add(16) > hi {
            break;
        }
        // SAFETY: floor <= fp and fp + 16 <= hi: inside the live part of this thread's stack.
        let (next, ret) = unsafe { (*(fp as *const usize), *(fp as *const usize).add(1)) };
        if ret < 4096 {
            break;
        }
        out[n].write(hooks.real(ret, fp + 8));
        n += 1;
        floor = fp + 16;
        fp = next;
    }
    n
}

/// The mcount hooks replace a traced function's return address with the thread's return stub and keep
/// the real one in a shadow frame `{return address, address of its stack slot, record word}` (see
/// `mcount`). A stack walk outward meets the hooked slots in the order the shadow stack holds them,
/// top down, so one cursor finds them all.
struct HookedReturns {
    stub: usize,
    base: usize,
    cursor: usize,
}

impl HookedReturns {
    #[inline(always)]
    fn of(h: &Hot) -> HookedReturns {
        HookedReturns {
            stub: h.shadow_stub.load(Relaxed) as usize,
            base: h.shadow_base.load(Relaxed) as usize,
            cursor: h.shadow_top.load(Relaxed) as usize,
        }
    }

    /// The real return address of the one found in `slot` (itself, unless it is the return stub).
    #[inline(always)]
    fn real(&mut self, ret: usize, slot: usize) -> usize {
        if self.stub == 0 || ret != self.stub {
            return ret;
        }
        while self.cursor >= self.base + ShadowFrame::SIZE {
            self.cursor -= ShadowFrame::SIZE;
            // SAFETY: base .. top is this thread's shadow stack, written by its own hooks.
            let f = unsafe { *(self.cursor as *const ShadowFrame) };
            if f.slot as usize == slot {
                return f.ret as usize;
            }
        }
        ret
    }
}

#[inline(always)]
fn hash(frames: &[usize]) -> u64 {
    let mut h = frames.len() as u64 ^ 0x51_7cc1_b727_220a;
    for &f in frames {
        h = (h ^ f as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        h ^= h >> 29;
    }
    h | 1
}

/// The stack id + 1 of the caller's stack (0 when none could be taken).
#[inline(always)]
fn stack_id(t: &AllocThread, caller: Caller, depth: usize) -> u32 {
    // Not zeroed: the walk writes the first `n` entries, and only those are read.
    let mut buf = [MaybeUninit::<usize>::uninit(); ALLOC_MAX_DEPTH];
    let n = walk(t, caller, depth, &mut buf);
    // SAFETY: `walk` initialised buf[..n].
    let frames: &[usize] = unsafe { core::slice::from_raw_parts(buf.as_ptr().cast(), n) };
    let h = hash(frames);
    let cache = t.cache.load(Relaxed);
    if cache.is_null() {
        return intern(frames).map_or(0, |id| id + 1);
    }
    // SAFETY: the index is below CACHE_ENTRIES, inside this thread's cache mapping.
    let entry = unsafe { &*cache.add((h >> 52) as usize & (CACHE_ENTRIES - 1)) };
    if entry.hash.load(Relaxed) == h {
        return entry.id.load(Relaxed);
    }
    let Some(id) = intern(frames) else { return 0 };
    // A signal handler that interrupts these stores sees hash 0 (no match) in between.
    entry.hash.store(0, Relaxed);
    entry.id.store(id + 1, Relaxed);
    entry.hash.store(h, Relaxed);
    id + 1
}

/// An object that stack addresses fall into.
struct ModuleRange {
    id: u32,
    start: u64,
    end: u64,
    bias: u64,
}

#[derive(Default)]
struct AddrHasher(u64);

impl Hasher for AddrHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ b as u64).wrapping_mul(0x100_0000_01b3);
        }
    }
    fn write_u32(&mut self, v: u32) {
        self.write_u64(v as u64);
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = (self.0.rotate_left(26) ^ v).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

/// The trace-wide stack table: a prefix tree of `(parent, return address)` nodes, with the modules the
/// addresses are in.
#[derive(Default)]
struct Interner {
    ids: HashMap<(u32, u64), u32, BuildHasherDefault<AddrHasher>>,
    nodes: Vec<StackNode>,
    modules: Vec<ModuleRange>,
    module_chunks: Vec<Vec<u8>>,
    /// Nodes and module chunks already handed to the collector of process `pid`.
    nodes_taken: usize,
    modules_taken: usize,
    pid: u32,
    /// The loader's count of objects added and removed at the last walk of them: an address in none
    /// (JIT code, an anonymous mapping) walks them again only if that changed.
    loaded: Option<(u64, u64)>,
}

/// A spin lock around the interner: no allocation to create, and a fork handler can hold it.
struct Locked {
    lock: AtomicBool,
    interner: core::cell::UnsafeCell<Option<Interner>>,
}

// SAFETY: `interner` is only touched with `lock` held.
unsafe impl Sync for Locked {}

// Outside `crate::state`: its type is this recorder's; kept for the process's life (a forked child's
// collector writes the whole table again), held across `fork` by the fork handlers.
static INTERNER: Locked = Locked {
    lock: AtomicBool::new(false),
    interner: core::cell::UnsafeCell::new(None),
};

fn lock() {
    while INTERNER
        .lock
        .compare_exchange_weak(false, true, core::sync::atomic::Ordering::Acquire, Relaxed)
        .is_err()
    {
        std::thread::yield_now();
    }
}

fn unlock() {
    INTERNER
        .lock
        .store(false, core::sync::atomic::Ordering::Release);
}

extern "C" fn lock_for_fork() {
    lock();
}

extern "C" fn unlock_after_fork() {
    unlock();
}

fn with_interner<R>(f: impl FnOnce(&mut Interner) -> R) -> R {
    lock();
    // SAFETY: the lock is held.
    let r = f(unsafe { &mut *INTERNER.interner.get() }.get_or_insert_with(Interner::default));
    unlock();
    r
}

/// Interns a stack (innermost first) and returns its leaf id; `None` for an empty stack.
#[cold]
#[inline(never)]
fn intern(frames: &[usize]) -> Option<u32> {
    with_interner(|i| {
        let mut parent: Option<u32> = None;
        for &ret in frames.iter().rev() {
            let key = (parent.map_or(0, |p| p + 1), ret as u64);
            let id = match i.ids.get(&key) {
                Some(&id) => id,
                None => {
                    let id = i.nodes.len() as u32;
                    // Return addresses minus one: inside the call instruction, so that they resolve to
                    // the calling line.
                    let (module, address) = i.locate(ret as u64 - 1);
                    i.nodes.push(StackNode {
                        parent,
                        module,
                        address,
                    });
                    i.ids.insert(key, id);
                    id
                }
            };
            parent = Some(id);
        }
        parent
    })
}

impl Interner {
    /// The module of `addr` and the address relative to it (module 0 and the address itself when no
    /// loaded object has it).
    fn locate(&mut self, addr: u64) -> (u32, u64) {
        if let Some(m) = self.find(addr) {
            return m;
        }
        self.discover();
        self.find(addr).unwrap_or((0, addr))
    }

    fn find(&self, addr: u64) -> Option<(u32, u64)> {
        self.modules
            .iter()
            .find(|m| (m.start..m.end).contains(&addr))
            .map(|m| (m.id, addr - m.bias))
    }

    /// Adds every loaded object not known yet, with its `Module` chunk (nothing to do, and no object
    /// looked at, when none was loaded or unloaded since the last time).
    fn discover(&mut self) {
        let mut walk = Walk {
            objects: Vec::new(),
            known: self.loaded,
            loaded: None,
        };
        // SAFETY: the callback only reads the info it is given and writes into `walk`.
        unsafe {
            libc::dl_iterate_phdr(
                Some(collect_object),
                &mut walk as *mut Walk as *mut libc::c_void,
            )
        };
        if walk.loaded.is_none() {
            return; // unchanged
        }
        self.loaded = walk.loaded;
        // The unwinder's objects follow the loader's: unloaded ones forgotten, new ones registered
        // (whether or not the stack modules below know their address range already).
        unwind::forget_unloaded(|start, end| {
            walk.objects
                .iter()
                .any(|o| o.start == start && o.end == end)
        });
        for o in &walk.objects {
            if o.end > o.start && !unwind::registered(o.start, o.end) {
                unwind::register(o.start, o.end, o.eh_frame_hdr, &o.loads);
            }
        }
        for o in walk.objects {
            if o.end <= o.start
                || self
                    .modules
                    .iter()
                    .any(|m| m.start == o.start && m.bias == o.bias)
            {
                continue;
            }
            let id = STACK_MODULE_BASE + self.modules.len() as u32;
            let mut p = Vec::new();
            let _ = schema::Module {
                id,
                bias: 0,
                size: o.end - o.start,
                path: &o.path,
                build_id: &o.build_id,
            }
            .encode(&mut p);
            self.module_chunks.push(p);
            self.modules.push(ModuleRange {
                id,
                start: o.start,
                end: o.end,
                bias: o.bias,
            });
        }
    }
}

/// A loaded object as `dl_iterate_phdr` shows it.
struct Object {
    path: String,
    bias: u64,
    start: u64,
    end: u64,
    build_id: Vec<u8>,
    /// Its `PT_GNU_EH_FRAME` segment (address, size).
    eh_frame_hdr: Option<(u64, u64)>,
    /// Its loaded segments (start, end).
    loads: Vec<(u64, u64)>,
}

/// For the unwinder, when a return address is in no object it knows: registers the objects loaded
/// since the last walk of them (under the interner's lock, like any discovery).
fn discover_objects() {
    with_interner(|i| i.discover());
}

/// What [`Interner::discover`] asks `dl_iterate_phdr` for.
struct Walk {
    objects: Vec<Object>,
    /// The loader's (adds, subs) at the last walk.
    known: Option<(u64, u64)>,
    /// Now, if they changed (else the walk stopped at the first object).
    loaded: Option<(u64, u64)>,
}

unsafe extern "C" fn collect_object(
    info: *mut libc::dl_phdr_info,
    _size: libc::size_t,
    data: *mut libc::c_void,
) -> libc::c_int {
    // SAFETY: dl_iterate_phdr passes a valid info and our Walk as data.
    let (info, walk) = unsafe { (&*info, &mut *(data as *mut Walk)) };
    if walk.loaded.is_none() {
        let now = (info.dlpi_adds, info.dlpi_subs);
        if walk.known == Some(now) {
            return 1; // the same objects as last time: stop
        }
        walk.loaded = Some(now);
    }
    let out = &mut walk.objects;
    let bias = info.dlpi_addr;
    let name = if info.dlpi_name.is_null() {
        String::new()
    } else {
        // SAFETY: dlpi_name is a NUL-terminated string owned by the loader.
        unsafe { std::ffi::CStr::from_ptr(info.dlpi_name) }
            .to_string_lossy()
            .into_owned()
    };
    let path = if name.is_empty() {
        std::fs::read_link("/proc/self/exe")
            .map(|p| p.display().to_string())
            .unwrap_or_default()
    } else {
        name
    };
    let (mut start, mut end) = (u64::MAX, 0u64);
    let mut build_id = Vec::new();
    let (mut eh_frame_hdr, mut loads) = (None, Vec::new());
    for i in 0..info.dlpi_phnum as usize {
        // SAFETY: dlpi_phdr has dlpi_phnum entries.
        let ph = unsafe { &*info.dlpi_phdr.add(i) };
        if ph.p_type == libc::PT_LOAD {
            loads.push((bias + ph.p_vaddr, bias + ph.p_vaddr + ph.p_memsz));
        }
        if ph.p_type == libc::PT_GNU_EH_FRAME {
            eh_frame_hdr = Some((bias + ph.p_vaddr, ph.p_memsz));
        }
        if ph.p_type == libc::PT_LOAD && ph.p_flags & libc::PF_X != 0 {
            start = start.min(bias + ph.p_vaddr);
            end = end.max(bias + ph.p_vaddr + ph.p_memsz);
        }
        if ph.p_type == libc::PT_NOTE && build_id.is_empty() {
            // SAFETY: a PT_NOTE segment is mapped (it lies inside a loaded segment) for p_memsz bytes.
            let notes = unsafe {
                core::slice::from_raw_parts((bias + ph.p_vaddr) as *const u8, ph.p_memsz as usize)
            };
            build_id = ferrotrace_core::build_id::gnu_build_id(notes)
                .map(<[u8]>::to_vec)
                .unwrap_or_default();
        }
    }
    if start < end {
        out.push(Object {
            path,
            bias,
            start,
            end,
            build_id,
            eh_frame_hdr,
            loads,
        });
    }
    0
}

/// For the collector, before it writes a chunk of events: `Module` chunks for the objects stacks met
/// since the last call, then one `Stacks` chunk with the nodes interned since. In a forked child's
/// collector, the first call hands over the whole table (its file starts empty).
pub fn take_stacks() -> Vec<(ChunkKind, Vec<u8>)> {
    if TLS_OFFSET.load(Relaxed) == 0 {
        return Vec::new();
    }
    with_interner(|i| {
        let pid = std::process::id();
        if i.pid != pid {
            i.pid = pid;
            i.nodes_taken = 0;
            i.modules_taken = 0;
        }
        let mut out: Vec<(ChunkKind, Vec<u8>)> = i.module_chunks[i.modules_taken..]
            .iter()
            .map(|p| (ChunkKind::Module, p.clone()))
            .collect();
        i.modules_taken = i.module_chunks.len();
        let new = &i.nodes[i.nodes_taken..];
        if !new.is_empty() {
            let mut p = Vec::new();
            let _ = StacksHeader {
                first_id: i.nodes_taken as u32,
                count: new.len() as u32,
            }
            .encode(&mut p);
            for n in new {
                let _ = n.encode(&mut p);
            }
            out.push((ChunkKind::Stacks, p));
            i.nodes_taken = i.nodes.len();
        }
        out
    })
}

// ---- ferrotrace::Allocator --------------------------------------------------------------------------

/// A [`GlobalAlloc`] that records every allocation and free of the allocator it wraps while the program
/// is recorded (`ferrotrace record --alloc`), and otherwise only forwards (one load and a branch more
/// per call).
///
/// For programs that link ferrotrace: the preload library's malloc hooks are not in them.
///
/// ```no_run
/// #[global_allocator]
/// static ALLOC: ferrotrace::Allocator<std::alloc::System> = ferrotrace::Allocator::new(std::alloc::System);
/// ```
pub struct Allocator<A> {
    inner: A,
}

impl<A> Allocator<A> {
    /// Wraps `inner`.
    pub const fn new(inner: A) -> Self {
        Allocator { inner }
    }
}

use crate::arch::unwind::alloc_here;

/// Where `alloc_here` goes on, with its entry's stack and frame pointers.
pub(crate) extern "C" fn alloc_from(size: usize, addr: usize, ret_slot: *const usize, rbp: usize) {
    // SAFETY: reached only from `alloc_here`, which passes its entry `rsp` (the return address its
    // call pushed) as `ret_slot`.
    unsafe { alloc_event(size, addr, Caller { ret_slot, rbp }) };
}

/// Whether allocations are recorded at all: checked before the out-of-line `alloc_here` (the free
/// paths check it inline, in `this_thread`).
#[inline(always)]
fn active() -> bool {
    TLS_OFFSET.load(Relaxed) != 0
}

// SAFETY: every call is forwarded to `inner` with the same arguments; recording only reads the result.
unsafe impl<A: GlobalAlloc> GlobalAlloc for Allocator<A> {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract is forwarded.
        let p = unsafe { self.inner.alloc(layout) };
        if active() {
            // SAFETY: alloc_here only reads its own stack and frame pointer.
            unsafe { alloc_here(layout.size(), p as usize) };
        }
        p
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract is forwarded.
        let p = unsafe { self.inner.alloc_zeroed(layout) };
        if active() {
            // SAFETY: as in `alloc`.
            unsafe { alloc_here(layout.size(), p as usize) };
        }
        p
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        free_now(ptr as usize);
        // SAFETY: the caller's contract is forwarded.
        unsafe { self.inner.dealloc(ptr, layout) }
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let tsc = before_free(ptr as usize);
        // SAFETY: the caller's contract is forwarded.
        let p = unsafe { self.inner.realloc(ptr, layout, new_size) };
        if p.is_null() {
            if tsc.is_some() {
                free_cancelled(ptr as usize);
            }
        } else {
            if let Some(tsc) = tsc {
                free_event(ptr as usize, tsc);
            }
            if active() {
                // SAFETY: as in `alloc`.
                unsafe { alloc_here(new_size, p as usize) };
            }
        }
        p
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn countdowns_average_the_interval() {
        let t = AllocThread {
            state: AtomicU32::new(READY),
            busy: AtomicU32::new(0),
            countdown: AtomicI64::new(0),
            rng: AtomicU64::new(0x1234_5678_9abc_def1),
            stack_lo: AtomicUsize::new(0),
            stack_hi: AtomicUsize::new(0),
            cache: AtomicPtr::new(core::ptr::null_mut()),
        };
        let n = 200_000;
        let sum: i64 = (0..n).map(|_| next_countdown(&t, 4096)).sum();
        let mean = sum as f64 / n as f64;
        // Exponential with mean 4096: the sample mean's standard error is 4096 / sqrt(n) ≈ 9.2.
        assert!((mean - 4096.0).abs() < 6.0 * 9.2, "{mean}");
    }

    #[test]
    fn the_sampled_set_forgets_what_it_removes() {
        let set = SampledSet {
            slots: AtomicPtr::new(core::ptr::null_mut()),
            overflowed: AtomicBool::new(false),
        };
        assert!(set.init());
        for a in (0x10_0000u64..0x10_0000 + 64 * 1000).step_by(64) {
            set.insert(a);
        }
        assert!(set.remove(0x10_0000 + 64 * 5));
        assert!(!set.remove(0x10_0000 + 64 * 5), "removed once");
        assert!(!set.remove(0x20_0000), "never inserted");
        assert!(set.remove(0x10_0000 + 64 * 999));
        assert!(!set.overflowed.load(Relaxed));
    }
}
