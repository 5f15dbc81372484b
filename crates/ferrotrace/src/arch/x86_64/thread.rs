//! Reaching the thread's `HOT` block and storing a record through it, on x86-64: the thread pointer
//! (`%fs` base), the rip-relative loads of the TLS and CPU offsets that the assembly also makes, the
//! prefetch ahead of the cursor, and the record store of the recorders written in assembly
//! ([`append_record_asm!`]).

use crate::buffers::hot::{FERROTRACE_CPU_OFFSET, FERROTRACE_TLS_OFFSET};

/// The page size of x86_64 Linux, for the runtime's mappings and code patching.
pub const PAGE: usize = 4096;

/// The thread pointer (`%fs` base): glibc stores it at `%fs:0`.
pub fn thread_pointer() -> usize {
    let tp: usize;
    // SAFETY: on x86_64 Linux with glibc or musl, %fs:0 holds the thread control block's own address.
    unsafe {
        core::arch::asm!("mov {}, qword ptr fs:[0]", out(reg) tp, options(nostack, readonly, preserves_flags))
    };
    tp
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

/// The calling thread's CPU, in place in a record's second word (bits 48–63), read from the 16-bit
/// word at [`FERROTRACE_CPU_OFFSET`] from the thread pointer. Garbage before
/// `buffers::hot::init_cpu_offset` ran, which only matters where nothing is recorded.
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

/// Owns the cache line at `p` before the stores reach it (`prefetchw`): a recycled chunk's lines are
/// shared with the collector that read them.
#[inline(always)]
pub fn prefetch_for_write<T>(p: *const T) {
    // SAFETY: prefetchw never faults, whatever the address.
    unsafe {
        core::arch::asm!("prefetchw [{}]", in(reg) p, options(nostack, preserves_flags, readonly));
    }
}

/// The assembly that appends one record without payload through the thread's `HOT` block, as one
/// template string for `global_asm!`: the record-store order of `Hot::append` for the recorders
/// written in assembly (the XRay trampolines, the mcount hooks and their return trampoline).
///
/// `tls`: the register holding `HOT`'s offset from `%fs`; `cursor`: a free register, left holding the
/// new cursor; `word`, `tsc`: the registers holding the record's word and timestamp; `full`: the label
/// to jump to, the registers untouched but `cursor`, when the chunk is full or the thread has none.
/// The caller's `global_asm!` gives the operands `h_cursor`, `h_end` (the fields of `buffers::hot::Hot`),
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
