//! The block every hot path writes through, and the offsets from the thread pointer that the assembly
//! reads: `HOT` (the cursor into the thread's chunk and the mcount shadow stack, at one constant offset
//! from `%fs` in every thread: static TLS), and the word that holds the CPU the thread runs on.
//!
//! Written by the XRay trampolines (`crate::arch::xray`), the mcount hooks, tracepoints and
//! allocation events; set up by the slow path ([`crate::buffers::thread`]).

use std::sync::atomic::{AtomicI64, AtomicPtr, AtomicU64, Ordering};

use ferrotrace_core::record::{Record, RECORD_SIZE};

use crate::arch::thread::{prefetch_for_write, thread_pointer, tls_offset};

/// The per-thread block the trampolines and the mcount hooks use. `#[repr(C)]`: the assembly reads
/// `cursor` at offset 0, `end` at 8, and the shadow stack's fields from 16 on. The cursor pair is null
/// until the thread registers; `cursor >= end` sends every event to the slow path, which is how a thread
/// is stopped from the outside (set `end` to null). The shadow stack (mcount return hooks, see
/// [`crate::recorders::mcount`]) is null until the thread's first hooked call; `shadow_top >= shadow_limit` sends a
/// call to the hook's slow path.
#[repr(C)]
pub struct Hot {
    /// Where the next record goes.
    pub cursor: AtomicPtr<Record>,
    /// One past the last record slot of the current chunk.
    pub end: AtomicPtr<Record>,
    /// The next free shadow frame.
    pub shadow_top: AtomicU64,
    /// One past the last shadow frame.
    pub shadow_limit: AtomicU64,
    /// This thread's return stub: what a hooked frame's return address is replaced with.
    pub shadow_stub: AtomicU64,
    /// The shadow stack's first frame (a sentinel that matches nothing).
    pub shadow_base: AtomicU64,
}

// Per thread, not the process's: outside `crate::state`.
thread_local! {
    /// Const-initialised and without `Drop`, so it lives in the static TLS block at a fixed offset from
    /// the thread pointer, the same offset in every thread.
    pub static HOT: Hot = const {
        Hot {
            cursor: AtomicPtr::new(core::ptr::null_mut()),
            end: AtomicPtr::new(core::ptr::null_mut()),
            shadow_top: AtomicU64::new(0),
            shadow_limit: AtomicU64::new(0),
            shadow_stub: AtomicU64::new(0),
            shadow_base: AtomicU64::new(0),
        }
    };
}

impl Hot {
    /// The calling thread's block, through `HOT` (in the preload library, a `__tls_get_addr` call: for
    /// the slow paths).
    pub fn current() -> &'static Hot {
        // SAFETY: HOT has no destructor, so it lives as long as the thread; the reference stays on it.
        HOT.with(|h| unsafe { &*(h as *const Hot) })
    }

    /// The calling thread's block, at the offset the trampolines use: two loads, no call, for recorders
    /// written in Rust whose every event comes here (the allocation hooks, the `tracing` layer's
    /// callsites).
    ///
    /// # Safety
    /// [`init_tls_offset`] ran in this process (start-up does it before any recorder is enabled):
    /// before, the offset is 0 and the reference would point at the thread control block.
    #[inline(always)]
    pub unsafe fn current_static() -> &'static Hot {
        // SAFETY: the offset is HOT's in static TLS (the caller's contract: it was computed), the same
        // in every thread; HOT has no destructor, so it lives as long as the thread.
        unsafe { &*((thread_pointer() as i64 + tls_offset()) as *const Hot) }
    }

    /// Appends `rec` followed by `slots` payload records (which `fill` writes, given where the first
    /// goes) to the thread's chunk; when the chunk has no room for them (or the thread none) writes
    /// nothing and hands `fill` back, for the caller's slow path. The one way recorders
    /// written in Rust store events, in the order `ferrotrace_core::record::Record` asks of every
    /// writer, as the trampolines do: the payload, then the record's word, then its timestamp, then
    /// the cursor, so that a process killed in the middle leaves no whole-looking record with a
    /// half-written payload for `record` to salvage.
    #[inline(always)]
    pub fn append<F: FnOnce(*mut Record)>(
        &self,
        rec: Record,
        slots: usize,
        fill: F,
    ) -> Result<(), F> {
        let Some(cur) = self.reserve(slots) else {
            return Err(fill);
        };
        // SAFETY: `reserve` found room for the record and `slots` payload records at `cur`.
        unsafe {
            fill(cur.add(1));
            self.commit(cur, rec, slots);
        }
        Ok(())
    }

    /// Where a record and `slots` payload records go in the thread's chunk, if it has room for them
    /// (and the thread a chunk), with the chunk's line four lines ahead owned before the stores reach
    /// it, as the trampolines do: a recycled chunk's lines are shared with the collector that read them.
    #[inline(always)]
    pub(crate) fn reserve(&self, slots: usize) -> Option<*mut Record> {
        let cur = self.cursor.load(Ordering::Relaxed);
        let end = self.end.load(Ordering::Relaxed);
        if cur.is_null() || (end as usize).saturating_sub(cur as usize) <= slots * RECORD_SIZE {
            return None;
        }
        prefetch_for_write(cur.wrapping_add(16));
        Some(cur)
    }

    /// Publishes `rec` at `cur`, its `slots` payload records written after it: the record's word,
    /// then its timestamp, then the cursor.
    ///
    /// # Safety
    /// `cur` is what [`Hot::reserve`] answered for at least `slots` on this thread, and nothing was
    /// appended since.
    #[inline(always)]
    pub(crate) unsafe fn commit(&self, cur: *mut Record, rec: Record, slots: usize) {
        core::sync::atomic::compiler_fence(Ordering::Release);
        // SAFETY: `cur .. cur + 1 + slots` lies inside the chunk this thread owns (the caller's
        // contract).
        unsafe {
            core::ptr::write_volatile(&raw mut (*cur).word, rec.word);
            core::ptr::write_volatile(&raw mut (*cur).tsc, rec.tsc);
            self.cursor.store(cur.add(1 + slots), Ordering::Release);
        }
    }
}

/// `&HOT - %fs:0`, computed once at start; the assembly reads it from here.
// Outside `crate::state`: read by the trampolines' assembly with one rip-relative load.
pub static FERROTRACE_TLS_OFFSET: AtomicI64 = AtomicI64::new(0);

/// `&HOT - thread pointer` in the calling thread.
pub fn hot_offset_here() -> i64 {
    HOT.with(|h| h as *const Hot as i64) - thread_pointer() as i64
}

/// Fixes the TLS offset from the calling thread. Must run before any sled is patched.
pub fn init_tls_offset() {
    FERROTRACE_TLS_OFFSET.store(hot_offset_here(), Ordering::Relaxed);
}

/// Offset from the thread pointer of a 16-bit word that holds the CPU the thread runs on: the low half
/// of `cpu_id` in the thread's rseq area, which the kernel updates before the thread returns to user
/// space on another CPU (glibc 2.35 and later register that area for every thread and export its offset
/// as `__rseq_offset`); else [`NO_CPU`]'s. Read by `arch::thread::cpu_bits` and the live trampolines: one load, where
/// `rdtscp` (which also returns the CPU) costs a second `rdtsc` (docs/performance.md).
// Outside `crate::state`: read by the trampolines' assembly with one rip-relative load.
pub static FERROTRACE_CPU_OFFSET: AtomicI64 = AtomicI64::new(0);

/// The CPU of a record, where none is known: rseq's `cpu_id` is -1 before registration and -2 when it
/// failed, whose low halves are 0xffff and 0xfffe.
pub const UNKNOWN_CPU: u16 = 0xfffe;

// Per thread, not the process's: outside `crate::state`.
thread_local! {
    /// What the CPU reads as without rseq: unknown.
    static NO_CPU: u16 = const { u16::MAX };
}

/// Finds where the thread's CPU is ([`FERROTRACE_CPU_OFFSET`]). Must run before any sled is patched.
pub fn init_cpu_offset() {
    // SAFETY: dlsym with a NUL-terminated name; the symbol, where glibc defines it, is a `ptrdiff_t`.
    let rseq_offset = unsafe {
        let sym = libc::dlsym(libc::RTLD_DEFAULT, c"__rseq_offset".as_ptr());
        (!sym.is_null()).then(|| (sym as *const isize).read())
    };
    let offset = match rseq_offset {
        // `cpu_id` is the second u32 of `struct rseq`.
        Some(off) => off as i64 + 4,
        None => NO_CPU.with(|c| c as *const u16 as i64) - thread_pointer() as i64,
    };
    FERROTRACE_CPU_OFFSET.store(offset, Ordering::Relaxed);
}
