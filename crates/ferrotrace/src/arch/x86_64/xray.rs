//! The XRay trampolines on x86-64, and the slow path every recorder written in assembly falls back to.
//!
//! Patched sleds call (entry, tail) or jump to (exit) these assembly routines with the function id in
//! `r10d`. The fast path is `rdtsc`, a `prefetchw` ahead, one 16-byte store pair into the thread's chunk
//! and a cursor bump through the thread's `HOT` block (`crate::buffers::hot`), at a constant offset
//! from `%fs`: no call, no lock, no branch besides "chunk full?". Only the registers it touches are
//! saved (entry: `rax`, `rdx`; exit: the return registers are moved to dead ones). When the chunk is
//! full, or the thread has none yet, `ferrotrace_slow_record` saves every caller-saved register (the
//! register save layout: the general registers below `rbp`, the vector state in an XSAVE area, or
//! `xmm0`–`xmm15` where there is no XSAVE), aligns the stack, and calls
//! `crate::buffers::thread::slow_path`.

use std::sync::atomic::{AtomicU32, Ordering};

use ferrotrace_core::arch::x86_64::{
    pop_caller_saved_asm, push_caller_saved_asm, rdtsc_asm, restore_xmm_asm, save_xmm_asm,
};

use super::thread::append_record_asm;
use crate::buffers::hot::{FERROTRACE_CPU_OFFSET, FERROTRACE_TLS_OFFSET};

/// The assembly that stores the low halves of xmm0-7 (the floating-point argument registers) into a
/// `recorders::args::Registers` block at `rsp` (operand `g_float`: its field's offset), for the
/// entry paths of functions whose arguments are recorded (the XRay trampoline, the mcount hooks).
macro_rules! float_args_to_block_asm {
    () => {
        concat!(
            "  movq qword ptr [rsp + {g_float}], xmm0\n",
            "  movq qword ptr [rsp + {g_float} + 8], xmm1\n",
            "  movq qword ptr [rsp + {g_float} + 16], xmm2\n",
            "  movq qword ptr [rsp + {g_float} + 24], xmm3\n",
            "  movq qword ptr [rsp + {g_float} + 32], xmm4\n",
            "  movq qword ptr [rsp + {g_float} + 40], xmm5\n",
            "  movq qword ptr [rsp + {g_float} + 48], xmm6\n",
            "  movq qword ptr [rsp + {g_float} + 56], xmm7\n",
        )
    };
}
pub(crate) use float_args_to_block_asm;

/// XSAVE components the slow path saves: x87, SSE, AVX (upper ymm halves), and AVX-512's opmask, upper
/// zmm halves and zmm16–31. Not AMX tiles (8 KiB, and never live across a call) nor MPX or PKRU.
const XSAVE_MASK: u32 = 0b1110_0111;

/// Bytes of the standard-form XSAVE area for [`XSAVE_MASK`] on this CPU, or 0 where XSAVE is not enabled
/// (the slow path then saves xmm0–15 with `movaps`). Read by the assembly.
// Outside `crate::state`: read by the slow path's assembly with one rip-relative load.
static FERROTRACE_XSAVE_BYTES: AtomicU32 = AtomicU32::new(0);

/// Sizes the slow path's XSAVE area from CPUID leaf 0xD. Must run before any sled is patched.
///
/// Why not just xmm0–15: the slow path runs Rust and libc code, and glibc's AVX2 string functions end
/// in `vzeroupper`, which clears the upper halves of every ymm register. A traced function's `__m256`
/// argument or result (ymm0–7) would come back with zeroed lanes.
pub fn init_xsave_area() {
    FERROTRACE_XSAVE_BYTES.store(xsave_area_bytes(), Ordering::Relaxed);
}

fn xsave_area_bytes() -> u32 {
    use core::arch::x86_64::__cpuid_count;
    let leaf1 = __cpuid_count(1, 0);
    let osxsave = leaf1.ecx & (1 << 27) != 0;
    if !osxsave {
        return 0;
    }
    let (lo, hi): (u32, u32);
    // SAFETY: OSXSAVE set means the OS enabled XSAVE, so xgetbv(0) is allowed.
    unsafe {
        core::arch::asm!("xgetbv", in("ecx") 0, out("eax") lo, out("edx") hi,
            options(nomem, nostack, preserves_flags))
    };
    let xcr0 = (hi as u64) << 32 | lo as u64;
    // Legacy region (512) and XSAVE header (64), then each enabled component at its CPUID offset.
    let mut bytes = 576;
    for component in 2..32 {
        if XSAVE_MASK & (1 << component) != 0 && xcr0 & (1 << component) != 0 {
            // Leaf 0xD is present when XSAVE is: EAX = size, EBX = offset in the standard form.
            let c = __cpuid_count(0xD, component);
            bytes = bytes.max(c.ebx + c.eax);
        }
    }
    bytes
}

extern "C" {
    /// Entry trampoline: reached by `call` from an ENTRY sled, `r10d` = function id.
    pub fn ferrotrace_xray_entry();
    /// Exit trampoline: reached by `jmp` from an EXIT sled (it replaced the `ret`), `r10d` = function id.
    pub fn ferrotrace_xray_exit();
    /// Tail trampoline: reached by `call` from a TAIL sled before a tail jump, `r10d` = function id.
    pub fn ferrotrace_xray_tail();
    /// [`ferrotrace_xray_entry`] that also records the CPU (`ferrotrace live`).
    pub fn ferrotrace_xray_entry_cpu();
    /// [`ferrotrace_xray_exit`] that also records the CPU (`ferrotrace live`).
    pub fn ferrotrace_xray_exit_cpu();
    /// [`ferrotrace_xray_tail`] that also records the CPU (`ferrotrace live`).
    pub fn ferrotrace_xray_tail_cpu();
}

extern "C" {
    /// Entry trampoline of a function whose arguments are recorded (`-A`): as
    /// [`ferrotrace_xray_entry`], through `crate::recorders::args`.
    pub fn ferrotrace_xray_entry_args();
    /// Exit trampoline of a function whose return value is recorded (`-R`): as
    /// [`ferrotrace_xray_exit`], through `crate::recorders::args`.
    pub fn ferrotrace_xray_exit_retval();
    /// Entry trampolines of a function whose arguments are recorded as registers
    /// (`ferrotrace_core::argspec::Spec::in_registers`), one per number of register pairs: the Entry
    /// record and the pairs after it, in the thread's chunk, with no call.
    pub fn ferrotrace_xray_entry_registers1();
    /// See [`ferrotrace_xray_entry_registers1`].
    pub fn ferrotrace_xray_entry_registers2();
    /// See [`ferrotrace_xray_entry_registers1`].
    pub fn ferrotrace_xray_entry_registers3();
    /// Exit trampoline of a function whose return value is recorded as registers: the Exit record,
    /// rax and xmm0 after it.
    pub fn ferrotrace_xray_exit_registers();
}

/// The trampolines of functions whose values are recorded: `[entry with arguments, exit with return
/// value, exit with return registers, entry with 1, 2 and 3 pairs of argument registers]`.
pub fn value_trampolines() -> [u64; 6] {
    [
        ferrotrace_xray_entry_args as *const () as u64,
        ferrotrace_xray_exit_retval as *const () as u64,
        ferrotrace_xray_exit_registers as *const () as u64,
        ferrotrace_xray_entry_registers1 as *const () as u64,
        ferrotrace_xray_entry_registers2 as *const () as u64,
        ferrotrace_xray_entry_registers3 as *const () as u64,
    ]
}

/// The trampolines that sleds are patched to call: `[entry, exit, tail]`. Live mode prints the CPU of
/// each event, so its trampolines record it (4 more instructions: two loads, a shift, an or); recording
/// does without.
pub fn trampolines(with_cpu: bool) -> [u64; 3] {
    let f = |t: unsafe extern "C" fn()| t as *const () as u64;
    if with_cpu {
        [
            f(ferrotrace_xray_entry_cpu),
            f(ferrotrace_xray_exit_cpu),
            f(ferrotrace_xray_tail_cpu),
        ]
    } else {
        [
            f(ferrotrace_xray_entry),
            f(ferrotrace_xray_exit),
            f(ferrotrace_xray_tail),
        ]
    }
}

// The slow path receives the timestamp in rax and the record's second word in r10 and preserves every
// register (r11 included) (vector registers whole, through XSAVE where the OS enabled it): it is reached
// from the entry side (arguments live) and the exit side (return values live), with either stack
// alignment.
core::arch::global_asm!(
    ".pushsection .text.ferrotrace_trampolines,\"ax\",@progbits",
    // Entry and tail are reached by `call` with the argument registers live (see "Registers" in
    // docs/architecture.md). They differ in the kind bit set in the record word (entry: none, kind 0)
    // and in r11: dead at a function's entry, but at a TAIL sled it may hold the target of the indirect
    // tail jump that follows (`jmp r11`), so the tail trampolines keep it. With `cpu`, the CPU goes
    // into bits 48-63 of the record word, read through rdx once rdtsc's halves are combined (before the
    // cursor check, so the slow path records it too).
    ".macro ferrotrace_called_trampoline name, kind_bit, cpu, keep_r11",
    ".p2align 4",
    ".globl \\name",
    ".hidden \\name",
    ".type \\name,@function",
    "\\name:",
    "  push rax",
    "  push rdx",
    "  .ifnb \\keep_r11",
    "  push r11",
    "  .endif",
    "  .ifnb \\kind_bit",
    "  bts r10, \\kind_bit",
    "  .endif",
    "  mov r11, qword ptr [rip + {off}]",
    rdtsc_asm!(),
    "  .ifnb \\cpu",
    "  mov rdx, qword ptr [rip + {cpu_off}]",
    "  movzx edx, word ptr fs:[rdx]",
    "  shl rdx, 48",
    "  or r10, rdx",
    "  .endif",
    // The record store, in the order every writer keeps (hot::append_record_asm).
    append_record_asm!(tls = "r11", cursor = "rdx", word = "r10", tsc = "rax", full = "2f"),
    "  .ifnb \\keep_r11",
    "  pop r11",
    "  .endif",
    "  pop rdx",
    "  pop rax",
    "  ret",
    "2:",
    "  call ferrotrace_slow_record",
    "  .ifnb \\keep_r11",
    "  pop r11",
    "  .endif",
    "  pop rdx",
    "  pop rax",
    "  ret",
    ".size \\name, . - \\name",
    ".endm",
    "ferrotrace_called_trampoline ferrotrace_xray_entry",
    "ferrotrace_called_trampoline ferrotrace_xray_tail, 33, , keep_r11",
    "ferrotrace_called_trampoline ferrotrace_xray_entry_cpu, , 1",
    "ferrotrace_called_trampoline ferrotrace_xray_tail_cpu, 33, 1, keep_r11",
    ".purgem ferrotrace_called_trampoline",
    "",
    // Exit: only rax, rdx, xmm0, xmm1 are live (the sled replaced `ret`); rcx, rsi, rdi, r8-r11 are dead.
    ".macro ferrotrace_exit_trampoline name, cpu",
    ".p2align 4",
    ".globl \\name",
    ".hidden \\name",
    ".type \\name,@function",
    "\\name:",
    "  mov rcx, rax",
    "  mov rsi, rdx",
    "  bts r10, 32",
    "  mov r11, qword ptr [rip + {off}]",
    rdtsc_asm!(),
    "  .ifnb \\cpu",
    "  mov rdi, qword ptr [rip + {cpu_off}]",
    "  movzx edi, word ptr fs:[rdi]",
    "  shl rdi, 48",
    "  or r10, rdi",
    "  .endif",
    append_record_asm!(tls = "r11", cursor = "rdi", word = "r10", tsc = "rax", full = "2f"),
    "  mov rax, rcx",
    "  mov rdx, rsi",
    "  ret",
    "2:",
    "  call ferrotrace_slow_record",
    "  mov rax, rcx",
    "  mov rdx, rsi",
    "  ret",
    ".size \\name, . - \\name",
    ".endm",
    "ferrotrace_exit_trampoline ferrotrace_xray_exit",
    "ferrotrace_exit_trampoline ferrotrace_xray_exit_cpu, 1",
    ".purgem ferrotrace_exit_trampoline",
    "",
    // The value trampolines fill a `recorders::args::Registers` block on the stack (`g_*` offsets),
    // the clock read after the registers are stored, and call `recorders::args` through
    // ferrotrace_slow_call (which saves everything else) with the block's address (rax) and the
    // record word (r10). Entry: reached by `call` with the arguments live; r11 is dead at a function's
    // entry. The caller's stack arguments start above the function's return address, itself above
    // the trampoline's.
    // The register trampolines store the registers after the record, in the order every writer
    // keeps (the payload, the word, the timestamp, the cursor); a full chunk (or none) goes to the
    // trampolines through recorders::args, which read the registers anew.
    // One per number of register pairs stored (rdi and rsi; rdx and rcx; r8 and r9).
    ".macro ferrotrace_entry_registers name, pairs",
    ".p2align 4",
    ".globl \\name",
    ".hidden \\name",
    ".type \\name,@function",
    "\\name:",
    "  push rax",
    "  push rdx",
    "  push rcx",
    "  mov r11, qword ptr [rip + {off}]",
    rdtsc_asm!(),
    "  mov rdx, qword ptr fs:[r11 + {h_cursor}]",
    "  lea rcx, [rdx + \\pairs * {r_size}]",
    "  cmp rcx, qword ptr fs:[r11 + {h_end}]",
    "  jae 2f",
    "  prefetchw [rdx + 256]",
    "  mov qword ptr [rdx + {r_size}], rdi",
    "  mov qword ptr [rdx + {r_size} + 8], rsi",
    "  .if \\pairs >= 2",
    "  mov rcx, qword ptr [rsp + 8]",
    "  mov qword ptr [rdx + {r_size} + 16], rcx",
    "  mov rcx, qword ptr [rsp]",
    "  mov qword ptr [rdx + {r_size} + 24], rcx",
    "  .endif",
    "  .if \\pairs >= 3",
    "  mov qword ptr [rdx + {r_size} + 32], r8",
    "  mov qword ptr [rdx + {r_size} + 40], r9",
    "  .endif",
    "  mov rcx, \\pairs << 40",
    "  or rcx, r10",
    "  mov qword ptr [rdx + {r_word}], rcx",
    "  mov qword ptr [rdx + {r_tsc}], rax",
    "  add rdx, (\\pairs + 1) * {r_size}",
    "  mov qword ptr fs:[r11 + {h_cursor}], rdx",
    "  pop rcx",
    "  pop rdx",
    "  pop rax",
    "  ret",
    "2:",
    "  pop rcx",
    "  pop rdx",
    "  pop rax",
    "  jmp ferrotrace_xray_entry_args",
    ".size \\name, . - \\name",
    ".endm",
    "ferrotrace_entry_registers ferrotrace_xray_entry_registers1, 1",
    "ferrotrace_entry_registers ferrotrace_xray_entry_registers2, 2",
    "ferrotrace_entry_registers ferrotrace_xray_entry_registers3, 3",
    ".purgem ferrotrace_entry_registers",
    "",
    // Exit: rax, rdx, xmm0 and xmm1 live; rcx, rsi, rdi, r8-r11 dead.
    ".p2align 4",
    ".globl ferrotrace_xray_exit_registers",
    ".hidden ferrotrace_xray_exit_registers",
    ".type ferrotrace_xray_exit_registers,@function",
    "ferrotrace_xray_exit_registers:",
    "  mov rcx, rax",
    "  mov rsi, rdx",
    "  mov r11, qword ptr [rip + {off}]",
    rdtsc_asm!(),
    "  mov rdi, qword ptr fs:[r11 + {h_cursor}]",
    "  lea r8, [rdi + {r_size}]",
    "  cmp r8, qword ptr fs:[r11 + {h_end}]",
    "  jae 2f",
    "  prefetchw [rdi + 256]",
    "  mov qword ptr [rdi + {r_size}], rcx",
    "  movq qword ptr [rdi + {r_size} + 8], xmm0",
    "  bts r10, 32",
    "  bts r10, 40",
    "  mov qword ptr [rdi + {r_word}], r10",
    "  mov qword ptr [rdi + {r_tsc}], rax",
    "  add rdi, 2 * {r_size}",
    "  mov qword ptr fs:[r11 + {h_cursor}], rdi",
    "  mov rax, rcx",
    "  mov rdx, rsi",
    "  ret",
    "2:",
    "  mov rax, rcx",
    "  mov rdx, rsi",
    "  jmp ferrotrace_xray_exit_retval",
    ".size ferrotrace_xray_exit_registers, . - ferrotrace_xray_exit_registers",
    "",
    ".p2align 4",
    ".globl ferrotrace_xray_entry_args",
    ".hidden ferrotrace_xray_entry_args",
    ".type ferrotrace_xray_entry_args,@function",
    "ferrotrace_xray_entry_args:",
    "  sub rsp, {g_bytes}",
    "  mov qword ptr [rsp + {g_int}], rdi",
    "  mov qword ptr [rsp + {g_int} + 8], rsi",
    "  mov qword ptr [rsp + {g_int} + 16], rdx",
    "  mov qword ptr [rsp + {g_int} + 24], rcx",
    "  mov qword ptr [rsp + {g_int} + 32], r8",
    "  mov qword ptr [rsp + {g_int} + 40], r9",
    float_args_to_block_asm!(),
    "  lea r11, [rsp + {g_bytes} + 16]",
    "  mov qword ptr [rsp + {g_stack}], r11",
    "  push rax",
    "  push rdx",
    rdtsc_asm!(),
    "  mov qword ptr [rsp + 16 + {g_tsc}], rax",
    "  lea rax, [rsp + 16]",
    "  lea r11, [rip + {record_entry}]",
    "  call ferrotrace_slow_call",
    "  pop rdx",
    "  pop rax",
    "  add rsp, {g_bytes}",
    "  ret",
    ".size ferrotrace_xray_entry_args, . - ferrotrace_xray_entry_args",
    "",
    // Exit: reached by `jmp` from the sled that replaced `ret`; rax, rdx, xmm0 and xmm1 are live, r11
    // is dead.
    ".p2align 4",
    ".globl ferrotrace_xray_exit_retval",
    ".hidden ferrotrace_xray_exit_retval",
    ".type ferrotrace_xray_exit_retval,@function",
    "ferrotrace_xray_exit_retval:",
    "  bts r10, 32",
    "  sub rsp, {g_bytes}",
    "  mov qword ptr [rsp + {g_int}], rax",
    "  mov qword ptr [rsp + {g_int} + 8], rdx",
    "  movq qword ptr [rsp + {g_float}], xmm0",
    "  movq qword ptr [rsp + {g_float} + 8], xmm1",
    "  mov qword ptr [rsp + {g_stack}], 0",
    "  push rax",
    "  push rdx",
    rdtsc_asm!(),
    "  mov qword ptr [rsp + 16 + {g_tsc}], rax",
    "  lea rax, [rsp + 16]",
    "  lea r11, [rip + {record_exit}]",
    "  call ferrotrace_slow_call",
    "  pop rdx",
    "  pop rax",
    "  add rsp, {g_bytes}",
    "  ret",
    ".size ferrotrace_xray_exit_retval, . - ferrotrace_xray_exit_retval",
    "",
    ".p2align 4",
    ".globl ferrotrace_slow_record",
    ".hidden ferrotrace_slow_record",
    ".type ferrotrace_slow_record,@function",
    "ferrotrace_slow_record:",
    "  push r11",
    "  lea r11, [rip + {slow}]",
    "  call ferrotrace_slow_call",
    "  pop r11",
    "  ret",
    ".size ferrotrace_slow_record, . - ferrotrace_slow_record",
    "",
    // Calls the Rust function in r11 (`extern "C" fn(u64, u64) -> u64`) with the caller's rax and r10 as
    // arguments, preserving every register but r11, which returns the function's result.
    ".p2align 4",
    ".globl ferrotrace_slow_call",
    ".hidden ferrotrace_slow_call",
    ".type ferrotrace_slow_call,@function",
    "ferrotrace_slow_call:",
    "  push rbp",
    "  mov rbp, rsp",
    "  push rax",
    push_caller_saved_asm!(),
    "  mov ecx, dword ptr [rip + {xsave_bytes}]",
    "  test ecx, ecx",
    "  jz 3f",
    // Every vector register, whole (ymm/zmm), with XSAVE into a 64-byte aligned area on the stack whose
    // header XRSTOR requires to be zero but for what XSAVE writes.
    "  sub rsp, rcx",
    "  and rsp, -64",
    "  xor eax, eax",
    "  mov qword ptr [rsp + 512], rax",
    "  mov qword ptr [rsp + 520], rax",
    "  mov qword ptr [rsp + 528], rax",
    "  mov qword ptr [rsp + 536], rax",
    "  mov qword ptr [rsp + 544], rax",
    "  mov qword ptr [rsp + 552], rax",
    "  mov qword ptr [rsp + 560], rax",
    "  mov qword ptr [rsp + 568], rax",
    "  mov eax, {xsave_mask}",
    "  xor edx, edx",
    "  xsave64 [rsp]",
    "  mov rdi, qword ptr [rbp - 8]",
    "  mov rsi, qword ptr [rbp - 64]",
    "  call r11",
    "  mov qword ptr [rbp - 72], rax",
    "  mov eax, {xsave_mask}",
    "  xor edx, edx",
    "  xrstor64 [rsp]",
    "  jmp 4f",
    // Without XSAVE (no AVX either): the sixteen xmm registers.
    "3:",
    "  sub rsp, 256",
    "  and rsp, -16",
    save_xmm_asm!(),
    "  mov rdi, qword ptr [rbp - 8]",
    "  mov rsi, qword ptr [rbp - 64]",
    "  call r11",
    "  mov qword ptr [rbp - 72], rax",
    restore_xmm_asm!(),
    "4:",
    "  lea rsp, [rbp - 72]",
    pop_caller_saved_asm!(),
    "  pop rax",
    "  pop rbp",
    "  ret",
    ".size ferrotrace_slow_call, . - ferrotrace_slow_call",
    ".popsection",
    off = sym FERROTRACE_TLS_OFFSET,
    cpu_off = sym FERROTRACE_CPU_OFFSET,
    slow = sym crate::buffers::thread::slow_path,
    xsave_bytes = sym FERROTRACE_XSAVE_BYTES,
    xsave_mask = const XSAVE_MASK,
    h_cursor = const core::mem::offset_of!(crate::buffers::hot::Hot, cursor),
    h_end = const core::mem::offset_of!(crate::buffers::hot::Hot, end),
    r_word = const core::mem::offset_of!(ferrotrace_core::record::Record, word),
    r_tsc = const core::mem::offset_of!(ferrotrace_core::record::Record, tsc),
    r_size = const ferrotrace_core::record::RECORD_SIZE,
    record_entry = sym crate::recorders::args::record_entry,
    record_exit = sym crate::recorders::args::record_exit,
    g_bytes = const crate::recorders::args::REGISTERS_BYTES,
    g_tsc = const core::mem::offset_of!(crate::recorders::args::Registers, tsc),
    g_int = const core::mem::offset_of!(crate::recorders::args::Registers, int),
    g_float = const core::mem::offset_of!(crate::recorders::args::Registers, float),
    g_stack = const core::mem::offset_of!(crate::recorders::args::Registers, stack),
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xsave_area_covers_the_enabled_vector_state() {
        let bytes = xsave_area_bytes() as usize;
        if std::arch::is_x86_feature_detected!("avx") {
            // Legacy region, header, and the AVX component (256 bytes at offset 576) on every CPU.
            assert!(bytes >= 832, "{bytes}");
        }
        if bytes == 0 {
            return;
        }
        // The CPU's own answer: XSAVE of the slow path's components into an area of `bytes` bytes
        // writes nothing past it (the layout differs by vendor: AMD has no MPX components, so its
        // AVX-512 state ends at 2432 where Intel's ends at 2688).
        const GUARD: usize = 256;
        #[repr(C, align(64))]
        struct Area([u8; 16384]);
        let mut area = Box::new(Area([0xa5; 16384]));
        assert!(bytes + GUARD <= area.0.len(), "{bytes}");
        area.0[512..576].fill(0);
        // SAFETY: the area is 64-byte aligned, larger than `bytes + GUARD`, with a zeroed XSAVE header;
        // OSXSAVE is set (bytes != 0) so XSAVE is allowed.
        unsafe {
            core::arch::asm!("xsave64 [{}]", in(reg) area.0.as_mut_ptr(), in("eax") XSAVE_MASK,
                in("edx") 0, options(nostack))
        };
        assert!(
            area.0[bytes..bytes + GUARD].iter().all(|&b| b == 0xa5),
            "XSAVE wrote past the {bytes} bytes the slow path reserves"
        );
        // And the area is no larger than the CPU's size for everything the OS enabled.
        let all_enabled = core::arch::x86_64::__cpuid_count(0xD, 0).ebx as usize;
        assert!(bytes <= all_enabled, "{bytes} > {all_enabled}");
    }
}
