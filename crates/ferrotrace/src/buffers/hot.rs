//! The block every hot path writes through, and the offsets from the thread pointer that the assembly
//! reads: `HOT` (the cursor into the thread's chunk and the mcount shadow stack, at one constant offset
//! from `%fs` in every thread: static TLS), and the word that holds the CPU the thread runs on.
//!
//! Written by the XRay trampolines ([`crate::recorders::xray`]), the mcount hooks, tracepoints and
//! allocation events; set up by the slow path ([`crate::buffers::thread`]).

use std::sync::atomic::{AtomicI64, AtomicPtr, AtomicU64, Ordering};

use ferrotrace_core::record::{Record, RECORD_SIZE};

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
        // SAFETY: prefetchw never faults, whatever the address.
        unsafe {
            core::arch::asm!("prefetchw [{}]", in(reg) cur.wrapping_add(16),
                options(nostack, preserves_flags, readonly));
        }
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

/// The assembly that appends one record without payload through the thread's `HOT` block, as one
/// template string for `global_asm!`: the record-store order of [`Hot::append`] for the recorders
/// written in assembly (the XRay trampolines, the mcount hooks and their return trampoline).
///
/// `tls`: the register holding `HOT`'s offset from `%fs`; `cursor`: a free register, left holding the
/// new cursor; `word`, `tsc`: the registers holding the record's word and timestamp; `full`: the label
/// to jump to, the registers untouched but `cursor`, when the chunk is full or the thread has none.
/// The caller's `global_asm!` gives the operands `h_cursor`, `h_end` (the fields of [`Hot`]),
/// `r_word` and `r_tsc` (those of `Record`) and `r_size`.
///
/// The order: own the chunk's line four lines ahead before the stores reach it (a recycled chunk's
/// lines are shared with the collector that read them, and a program that fences waits for the
/// upgrade); the word before the timestamp, so that a record cut in half by a SIGKILL keeps the slot's
/// old time and `record`'s salvage of the shared chunk pool stops there (`ferrotrace_core::shared`);
/// then the cursor.
macro_rules! append_record_asm {
    (tls = $tls:literal, cursor = $cur:literal, word = $word:literal, tsc = $tsc:literal, full = $full:literal) => {
        concat!(
            "  mov ",
            $cur,
            ", qword ptr fs:[",
            $tls,
            " + {h_cursor}]\n",
            "  cmp ",
            $cur,
            ", qword ptr fs:[",
            $tls,
            " + {h_end}]\n",
            "  jae ",
            $full,
            "\n",
            "  prefetchw [",
            $cur,
            " + 256]\n",
            "  mov qword ptr [",
            $cur,
            " + {r_word}], ",
            $word,
            "\n",
            "  mov qword ptr [",
            $cur,
            " + {r_tsc}], ",
            $tsc,
            "\n",
            "  add ",
            $cur,
            ", {r_size}\n",
            "  mov qword ptr fs:[",
            $tls,
            " + {h_cursor}], ",
            $cur,
        )
    };
}
pub(crate) use append_record_asm;

/// The page size of x86_64 Linux, for the runtime's mappings and code patching.
pub const PAGE: usize = 4096;

/// `&HOT - %fs:0`, computed once at start; the assembly reads it from here.
pub static FERROTRACE_TLS_OFFSET: AtomicI64 = AtomicI64::new(0);

/// The thread pointer (`%fs` base): glibc stores it at `%fs:0`.
pub fn thread_pointer() -> usize {
    let tp: usize;
    // SAFETY: on x86_64 Linux with glibc or musl, %fs:0 holds the thread control block's own address.
    unsafe {
        core::arch::asm!("mov {}, qword ptr fs:[0]", out(reg) tp, options(nostack, readonly, preserves_flags))
    };
    tp
}

/// `&HOT - thread pointer` in the calling thread.
pub fn hot_offset_here() -> i64 {
    HOT.with(|h| h as *const Hot as i64) - thread_pointer() as i64
}

/// Fixes the TLS offset from the calling thread. Must run before any sled is patched.
pub fn init_tls_offset() {
    FERROTRACE_TLS_OFFSET.store(hot_offset_here(), Ordering::Relaxed);
}

/// The TLS offset the trampolines use, read by its address relative to `rip`, as they read it: Rust
/// code in a crate that inlines this (the `tracing` layer's) would reach the static through the GOT
/// (rustc does not have the linker relax those loads), one more dependent load before the cursor's
/// address is known.
#[inline(always)]
pub fn tls_offset() -> i64 {
    let offset: i64;
    // SAFETY: an aligned 8-byte load of a static of this crate (a relaxed load, on x86_64).
    unsafe {
        core::arch::asm!(
            "mov {offset}, qword ptr [rip + {tls}]",
            offset = out(reg) offset,
            tls = sym FERROTRACE_TLS_OFFSET,
            options(nostack, readonly, preserves_flags),
        )
    };
    offset
}

/// Offset from the thread pointer of a 16-bit word that holds the CPU the thread runs on: the low half
/// of `cpu_id` in the thread's rseq area, which the kernel updates before the thread returns to user
/// space on another CPU (glibc 2.35 and later register that area for every thread and export its offset
/// as `__rseq_offset`); else [`NO_CPU`]'s. Read by `cpu_bits` and the live trampolines: one load, where
/// `rdtscp` (which also returns the CPU) costs a second `rdtsc` (docs/performance.md).
pub static FERROTRACE_CPU_OFFSET: AtomicI64 = AtomicI64::new(0);

/// The CPU of a record, where none is known: rseq's `cpu_id` is -1 before registration and -2 when it
/// failed, whose low halves are 0xffff and 0xfffe.
pub const UNKNOWN_CPU: u16 = 0xfffe;

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

/// The calling thread's CPU, in place in a record's second word (bits 48–63). Garbage before
/// [`init_cpu_offset`] ran, which only matters where nothing is recorded.
#[inline(always)]
pub fn cpu_bits() -> u64 {
    let cpu: u64;
    // SAFETY: reads a 16-bit word at a constant offset from the thread pointer, inside the thread's own
    // static TLS or TCB (the rseq area), which lives as long as the thread.
    unsafe {
        core::arch::asm!(
            "mov {cpu}, qword ptr [rip + {off}]",
            "movzx {cpu:e}, word ptr fs:[{cpu}]",
            cpu = out(reg) cpu,
            off = sym FERROTRACE_CPU_OFFSET,
            options(nostack, readonly, preserves_flags),
        )
    };
    cpu << 48
}
