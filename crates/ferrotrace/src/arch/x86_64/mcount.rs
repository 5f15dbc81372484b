//! The mcount and `__fentry__` hooks on x86-64, their return trampoline, and each thread's return stub
//! with its unwind rules (see `crate::recorders::mcount` for what they do and why).
//!
//! Registers: hooks preserve every register but the flags (gcc's `-fipa-ra` lets callers keep values
//! in registers a callee is known not to touch, and the mcount call in the prologue is invisible to
//! it); the fast paths touch `rax`, `rcx`, `rdx`, `rsi` and restore them, and the slow paths save
//! everything, vector state included (`ferrotrace_slow_call`, [`super::xray`]). A shadow frame's
//! fields are at the offsets `ShadowFrame` gives them (`f_*`), the `HOT` block's at those `Hot` gives
//! them (`h_*`).

use ferrotrace_core::arch::x86_64::{mcount_parent_slot, rdtsc_asm};
use ferrotrace_core::shadow::ShadowFrame;

use super::thread::append_record_asm;
use super::xray::float_args_to_block_asm;
use crate::buffers::hot::{Hot, FERROTRACE_TLS_OFFSET};

extern "C" {
    /// The mcount hook: reached by `call` after the traced function's prologue.
    fn ferrotrace_mcount_hook();
    /// The fentry hook: reached by `call` before the traced function's prologue.
    fn ferrotrace_fentry_hook();
    /// The shared return trampoline, reached from every thread's return stub.
    fn ferrotrace_mcount_return();
}

/// The C library's mcount interface, overridden: see the module documentation.
///
/// # Safety
/// Called only by compiler-generated instrumentation, after a prologue that set up `rbp`.
#[unsafe(naked)]
#[no_mangle]
pub unsafe extern "C" fn mcount() {
    core::arch::naked_asm!("jmp {}", sym ferrotrace_mcount_hook)
}

/// glibc's other name for [`mcount`].
///
/// # Safety
/// As [`mcount`].
#[unsafe(naked)]
#[no_mangle]
pub unsafe extern "C" fn _mcount() {
    core::arch::naked_asm!("jmp {}", sym ferrotrace_mcount_hook)
}

/// The `-mfentry` hook, called as a function's first instruction.
///
/// # Safety
/// Called only by compiler-generated instrumentation.
#[unsafe(naked)]
#[no_mangle]
pub unsafe extern "C" fn __fentry__() {
    core::arch::naked_asm!("jmp {}", sym ferrotrace_fentry_hook)
}

/// Addresses of the two hooks, for patched NOP sites: `(mcount, fentry)`.
pub fn hook_addresses() -> (u64, u64) {
    (
        ferrotrace_mcount_hook as *const () as u64,
        ferrotrace_fentry_hook as *const () as u64,
    )
}

// The HOT block's fields are at the offsets `hot::Hot` gives them (`h_*`, from offset_of!), a shadow
// frame's at those `ShadowFrame` gives them (`f_*`; `frame` bytes in all).
core::arch::global_asm!(
    ".pushsection .text.ferrotrace_mcount,\"ax\",@progbits",
    // Appends the record {rdtsc, rsi} through the HOT cursor (rcx = the HOT block's TLS offset); goes to
    // the caller's label 7 when the chunk is full or the thread has none. Clobbers rax, rdx.
    ".macro ferrotrace_mcount_append",
    rdtsc_asm!(),
    // The record store, in the order every writer keeps (hot::append_record_asm).
    append_record_asm!(tls = "rcx", cursor = "rdx", word = "rsi", tsc = "rax", full = "7f"),
    ".endm",
    ".macro ferrotrace_call_hook name, parent_slot",
    ".p2align 4",
    ".globl \\name",
    ".hidden \\name",
    ".type \\name,@function",
    "\\name:",
    // Four registers: the parent's return-address slot is addressed from rsp or rbp, not held in one.
    "  push rax",
    "  push rcx",
    "  push rdx",
    "  push rsi",
    // Look the hook's own return address up: multiplicative hash, linear probing, 0 = empty.
    "  mov rcx, qword ptr [rsp + 32]",
    "  mov rdx, qword ptr [rip + {sites}]",
    "  movabs rax, {hash_mul}",
    "  imul rax, rcx",
    "  shr rax, 28",
    "1:",
    "  and rax, qword ptr [rdx]",
    "  cmp rcx, qword ptr [rdx + rax + 16]",
    "  je 2f",
    "  cmp qword ptr [rdx + rax + 16], 0",
    "  je 9f",
    "  add rax, 16",
    "  jmp 1b",
    // The record word goes straight where the append macro wants it.
    "2:",
    "  mov rsi, qword ptr [rdx + rax + 24]",
    "  test rsi, rsi",
    "  jz 9f",
    "3:",
    "  mov rcx, qword ptr [rip + {off}]",
    "  mov rdx, qword ptr fs:[rcx + {h_top}]",
    "  cmp rdx, qword ptr fs:[rcx + {h_limit}]",
    "  jae 8f",
    // Claim the frame before filling it: a signal handler's hooks push above it.
    "  lea rax, [rdx + {frame}]",
    "  mov qword ptr fs:[rcx + {h_top}], rax",
    "  mov rax, qword ptr \\parent_slot",
    "  mov qword ptr [rdx + {f_ret}], rax",
    "  lea rax, \\parent_slot",
    "  mov qword ptr [rdx + {f_slot}], rax",
    "  mov qword ptr [rdx + {f_word}], rsi",
    "  mov rax, qword ptr fs:[rcx + {h_stub}]",
    "  mov qword ptr \\parent_slot, rax",
    // A function whose values are recorded (-A, -R): label 12. The flags stay in the shadow frame's
    // word for the return, never in a record (they are payload bits).
    "  movabs rax, {value_flags}",
    "  test rsi, rax",
    "  jnz 12f",
    "13:",
    "  ferrotrace_mcount_append",
    "9:",
    "  pop rsi",
    "  pop rdx",
    "  pop rcx",
    "  pop rax",
    "  ret",
    // No chunk, or a full one.
    "7:",
    "  push r10",
    "  mov r10, rsi",
    "  call ferrotrace_slow_record",
    "  pop r10",
    "  jmp 9b",
    // No shadow stack yet, or a full one: the slow path says retry (0) or leave untraced.
    "8:",
    "  push r11",
    "  lea r11, [rip + {shadow_slow}]",
    "  call ferrotrace_slow_call",
    "  test r11, r11",
    "  pop r11",
    "  jz 3b",
    "  jmp 9b",
    // Values: the exit's flags cleared; arguments in registers stored after the Entry record (K
    // pairs: rdi and rsi, rdx and rcx, r8 and r9; rsi, rdx and rcx as pushed), others (or a full
    // chunk) through recorders::args (label 10); no arguments: the plain Entry (13).
    "12:",
    "  btr rsi, {retval_regs}",
    "  btr rsi, {retval_here}",
    "  btr rsi, {args_here}",
    "  jc 10f",
    "  push r11",
    "  mov r11, rsi",
    "  shr r11, {arg_pairs}",
    "  and r11d, 3",
    "  jz 15f",
    "  btr rsi, {arg_pairs}",
    "  btr rsi, {arg_pairs} + 1",
    "  push r10",
    rdtsc_asm!(),
    "  mov rdx, qword ptr fs:[rcx + {h_cursor}]",
    // Room for the record and K slots: cursor + 16 K < end.
    "  mov r10, r11",
    "  shl r10, 4",
    "  add r10, rdx",
    "  cmp r10, qword ptr fs:[rcx + {h_end}]",
    "  jae 14f",
    "  prefetchw [rdx + 256]",
    // The stack: r10, r11, then rsi, rdx, rcx, rax as pushed.
    "  mov qword ptr [rdx + {r_size}], rdi",
    "  mov r10, qword ptr [rsp + 16]",
    "  mov qword ptr [rdx + {r_size} + 8], r10",
    "  cmp r11d, 2",
    "  jb 16f",
    "  mov r10, qword ptr [rsp + 24]",
    "  mov qword ptr [rdx + {r_size} + 16], r10",
    "  mov r10, qword ptr [rsp + 32]",
    "  mov qword ptr [rdx + {r_size} + 24], r10",
    "  cmp r11d, 3",
    "  jb 16f",
    "  mov qword ptr [rdx + {r_size} + 32], r8",
    "  mov qword ptr [rdx + {r_size} + 40], r9",
    "16:",
    "  mov r10, r11",
    "  shl r10, 40",
    "  or rsi, r10",
    "  mov qword ptr [rdx + {r_word}], rsi",
    "  mov qword ptr [rdx + {r_tsc}], rax",
    "  shl r11, 4",
    "  lea rdx, [rdx + r11 + {r_size}]",
    "  mov qword ptr fs:[rcx + {h_cursor}], rdx",
    "  pop r10",
    "  pop r11",
    "  jmp 9b",
    // No entry values (a return value only): the plain Entry.
    "15:",
    "  pop r11",
    "  jmp 13b",
    // A full chunk (or none): recorders::args records through the slow path.
    "14:",
    "  pop r10",
    "  pop r11",
    // The arguments through recorders::args: a recorders::args::Registers block (`g_*` offsets)
    // below the four registers pushed (rsi, rdx, rcx, rax from the top: rsi, rdx and rcx as the
    // function got them), the stack arguments above the function's return address.
    "10:",
    "  lea rax, \\parent_slot",
    "  add rax, 8",
    "  sub rsp, {g_bytes}",
    "  mov qword ptr [rsp + {g_stack}], rax",
    "  mov qword ptr [rsp + {g_int}], rdi",
    "  mov rax, qword ptr [rsp + {g_bytes}]",
    "  mov qword ptr [rsp + {g_int} + 8], rax",
    "  mov rax, qword ptr [rsp + {g_bytes} + 8]",
    "  mov qword ptr [rsp + {g_int} + 16], rax",
    "  mov rax, qword ptr [rsp + {g_bytes} + 16]",
    "  mov qword ptr [rsp + {g_int} + 24], rax",
    "  mov qword ptr [rsp + {g_int} + 32], r8",
    "  mov qword ptr [rsp + {g_int} + 40], r9",
    float_args_to_block_asm!(),
    rdtsc_asm!(),
    "  mov qword ptr [rsp + {g_tsc}], rax",
    "  mov rax, rsp",
    "  push r10",
    "  mov r10, rsi",
    "  push r11",
    "  lea r11, [rip + {record_entry}]",
    "  call ferrotrace_slow_call",
    "  pop r11",
    "  pop r10",
    "  add rsp, {g_bytes}",
    "  jmp 9b",
    ".size \\name, . - \\name",
    ".endm",
    // mcount: after `push rbp; mov rbp, rsp`, the function's return address is at rbp + 8.
    concat!("ferrotrace_call_hook ferrotrace_mcount_hook, ", mcount_parent_slot!()),
    // __fentry__: before the prologue, just above the hook's own return address (4 pushes in).
    "ferrotrace_call_hook ferrotrace_fentry_hook, [rsp+40]",
    ".purgem ferrotrace_call_hook",
    "",
    // Reached from a thread's return stub (the hooked function's `ret` popped it): rsp is the function's
    // return-address slot + 8, where the real return address goes back before the final `jmp`. Only the
    // return registers are live by the ABI, but callers may rely on more (-fipa-ra): all are kept.
    ".p2align 4",
    ".globl ferrotrace_mcount_return",
    ".hidden ferrotrace_mcount_return",
    ".type ferrotrace_mcount_return,@function",
    "ferrotrace_mcount_return:",
    "  lea rsp, [rsp - 8]",
    "  push rax",
    "  push rcx",
    "  push rdx",
    "  push rsi",
    "1:",
    "  mov rcx, qword ptr [rip + {off}]",
    "  mov rdx, qword ptr fs:[rcx + {h_top}]",
    "  lea rax, [rsp + 32]",
    "  cmp rax, qword ptr [rdx - {frame} + {f_slot}]",
    "  jne 5f",
    // Read the frame before popping it: a signal handler's hooks may push over it once popped.
    "  mov rsi, qword ptr [rdx - {frame} + {f_word}]",
    "  mov rax, qword ptr [rdx - {frame} + {f_ret}]",
    "  mov qword ptr [rsp + 32], rax",
    "  sub rdx, {frame}",
    "  mov qword ptr fs:[rcx + {h_top}], rdx",
    "  bts rsi, 32",
    // A function whose values are recorded (-A, -R): label 12.
    "  movabs rax, {value_flags}",
    "  test rsi, rax",
    "  jnz 12f",
    "13:",
    "  ferrotrace_mcount_append",
    "6:",
    "  pop rsi",
    "  pop rdx",
    "  pop rcx",
    "  pop rax",
    // The real return address stays in the slot just below rsp: the red zone, which signal delivery
    // skips.
    "  lea rsp, [rsp + 8]",
    "  jmp qword ptr [rsp - 8]",
    "7:",
    "  push r10",
    "  mov r10, rsi",
    "  call ferrotrace_slow_record",
    "  pop r10",
    "  jmp 6b",
    // The top frame is not this one: frames above it were left without returning. Drop them (or abort
    // with a message if this frame is not on the shadow stack at all).
    "5:",
    "  push r11",
    "  lea r11, [rip + {resync}]",
    "  call ferrotrace_slow_call",
    "  pop r11",
    "  jmp 1b",
    // Values: the entry's flags cleared; a return value in registers stored after the Exit record
    // (one payload slot: rax as pushed, xmm0), another (or a full chunk) through recorders::args
    // (label 11); none: the plain Exit (13).
    "12:",
    "  btr rsi, {arg_pairs}",
    "  btr rsi, {arg_pairs} + 1",
    "  btr rsi, {args_here}",
    "  btr rsi, {retval_here}",
    "  jc 11f",
    "  btr rsi, {retval_regs}",
    "  jnc 13b",
    rdtsc_asm!(),
    "  mov rdx, qword ptr fs:[rcx + {h_cursor}]",
    "  push r11",
    "  lea r11, [rdx + {r_size}]",
    "  cmp r11, qword ptr fs:[rcx + {h_end}]",
    "  jae 14f",
    "  prefetchw [rdx + 256]",
    "  mov r11, qword ptr [rsp + 32]",
    "  mov qword ptr [rdx + {r_size}], r11",
    "  movq qword ptr [rdx + {r_size} + 8], xmm0",
    "  bts rsi, 40",
    "  mov qword ptr [rdx + {r_word}], rsi",
    "  mov qword ptr [rdx + {r_tsc}], rax",
    "  add rdx, 2 * {r_size}",
    "  mov qword ptr fs:[rcx + {h_cursor}], rdx",
    "  pop r11",
    "  jmp 6b",
    "14:",
    "  pop r11",
    // The return value through recorders::args: rax and rdx as the function returned them
    // (pushed), xmm0 and xmm1 live.
    "11:",
    "  sub rsp, {g_bytes}",
    "  mov rax, qword ptr [rsp + {g_bytes} + 24]",
    "  mov qword ptr [rsp + {g_int}], rax",
    "  mov rax, qword ptr [rsp + {g_bytes} + 8]",
    "  mov qword ptr [rsp + {g_int} + 8], rax",
    "  movq qword ptr [rsp + {g_float}], xmm0",
    "  movq qword ptr [rsp + {g_float} + 8], xmm1",
    "  mov qword ptr [rsp + {g_stack}], 0",
    rdtsc_asm!(),
    "  mov qword ptr [rsp + {g_tsc}], rax",
    "  mov rax, rsp",
    "  push r10",
    "  mov r10, rsi",
    "  push r11",
    "  lea r11, [rip + {record_exit}]",
    "  call ferrotrace_slow_call",
    "  pop r11",
    "  pop r10",
    "  add rsp, {g_bytes}",
    "  jmp 6b",
    ".size ferrotrace_mcount_return, . - ferrotrace_mcount_return",
    ".purgem ferrotrace_mcount_append",
    ".popsection",
    sites = sym crate::recorders::mcount::sites::FERROTRACE_SITES,
    off = sym FERROTRACE_TLS_OFFSET,
    hash_mul = const crate::recorders::mcount::sites::HASH_MUL,
    h_cursor = const core::mem::offset_of!(Hot, cursor),
    h_end = const core::mem::offset_of!(Hot, end),
    r_word = const core::mem::offset_of!(ferrotrace_core::record::Record, word),
    r_tsc = const core::mem::offset_of!(ferrotrace_core::record::Record, tsc),
    r_size = const ferrotrace_core::record::RECORD_SIZE,
    h_top = const core::mem::offset_of!(Hot, shadow_top),
    h_limit = const core::mem::offset_of!(Hot, shadow_limit),
    h_stub = const core::mem::offset_of!(Hot, shadow_stub),
    frame = const ShadowFrame::SIZE,
    f_ret = const ShadowFrame::RET,
    f_slot = const ShadowFrame::SLOT,
    f_word = const ShadowFrame::WORD,
    shadow_slow = sym crate::recorders::mcount::shadow_slow,
    resync = sym crate::recorders::mcount::resync,
    value_flags = const crate::recorders::args::VALUE_FLAGS,
    arg_pairs = const crate::recorders::args::ARG_PAIRS,
    retval_regs = const crate::recorders::args::RETVAL_IN_REGISTERS,
    args_here = const crate::recorders::args::ARGS_AT_ENTRY,
    retval_here = const crate::recorders::args::RETVAL_AT_EXIT,
    record_entry = sym crate::recorders::args::record_entry,
    record_exit = sym crate::recorders::args::record_exit,
    g_bytes = const crate::recorders::args::REGISTERS_BYTES,
    g_tsc = const core::mem::offset_of!(crate::recorders::args::Registers, tsc),
    g_int = const core::mem::offset_of!(crate::recorders::args::Registers, int),
    g_float = const core::mem::offset_of!(crate::recorders::args::Registers, float),
    g_stack = const core::mem::offset_of!(crate::recorders::args::Registers, stack),
);

/// Offset of the return stub in its page (preceded by a NOP that the CFI covers: unwinders look up
/// `return address - 1`).
pub const STUB_AT: usize = 16;
/// Offset of the stub's `.eh_frame` data in the page (what `__register_frame` is given).
pub const EH_FRAME_AT: usize = 64;

/// What the CFI of a stub makes the return address when its frame is not on the shadow stack: 0, the
/// end of the stack for an unwinder.
// Outside `crate::state`: a constant the stubs' CFI points at.
static NO_RETURN_ADDRESS: u64 = 0;

/// Fills `page` (a thread's stub page, to be mapped at `page_addr` R-X) with the thread's return stub
/// at [`STUB_AT`] — `jmp [rip]` to the shared return trampoline — and its unwind information at
/// [`EH_FRAME_AT`]: the caller's return address is the shadow frame whose slot is the stub frame's
/// CFA − 8, found by walking down from the thread's shadow top (read at `top_addr`) to `base`. Returns
/// the stub's address, or `None` if the unwind information does not fit.
pub fn write_return_stub(page: &mut [u8], page_addr: u64, top_addr: u64, base: u64) -> Option<u64> {
    let stub = page_addr + STUB_AT as u64;
    page[..EH_FRAME_AT].fill(0xcc);
    page[STUB_AT - 1] = 0x90;
    page[STUB_AT..STUB_AT + 14].copy_from_slice(&super::patch::jmp_rip_abs64(
        ferrotrace_mcount_return as *const () as u64,
    ));
    let len = eh_frame(&mut page[EH_FRAME_AT..], stub - 1, 15, top_addr, base);
    (len != 0).then_some(stub)
}

/// Writes a CIE and one FDE for the return stub (`pc_begin`, `pc_range` bytes, starting with the NOP
/// before the stub) and the zero terminator into `out`; returns the bytes written, 0 if `out` is short.
/// The rules: CFA = rsp + 8, rsp = CFA - 8; the return address is saved in the shadow frame whose slot
/// is rsp − 8, found by
/// walking down from the thread's shadow top (read at `top_addr`) to `base` (not found: 0, the end of the
/// stack).
fn eh_frame(out: &mut [u8], pc_begin: u64, pc_range: u64, top_addr: u64, base: u64) -> usize {
    const LIT0: u8 = 0x30;
    const LIT16: u8 = LIT0 + 16;
    // One shadow frame down; the slot within it (the address of `ret`, offset 0, is the rule's result).
    const LIT_FRAME: u8 = LIT0 + ShadowFrame::SIZE as u8;
    const AT_SLOT: u8 = ShadowFrame::SLOT as u8;
    const MINUS: u8 = 0x1c;
    const CONST8U: u8 = 0x0e;
    const DEREF: u8 = 0x06;
    const DUP: u8 = 0x12;
    const DROP: u8 = 0x13;
    const SWAP: u8 = 0x16;
    const PICK: u8 = 0x15;
    const LT: u8 = 0x2d;
    const EQ: u8 = 0x29;
    const BRA: u8 = 0x28;
    const SKIP: u8 = 0x2f;
    const PLUS_UCONST: u8 = 0x23;
    // The expression (the CFA is on the stack when it starts, and stays at the bottom: libgcc's
    // DW_OP_pick refuses to pick the bottom element). The slot: CFA - 16.
    let mut e: Vec<u8> = vec![DUP, LIT16, MINUS, CONST8U];
    e.extend_from_slice(&top_addr.to_le_bytes());
    e.push(DEREF);
    let looping = e.len();
    e.extend_from_slice(&[LIT_FRAME, MINUS, DUP, CONST8U]);
    e.extend_from_slice(&base.to_le_bytes());
    e.push(LT);
    let to_not_found = e.len();
    e.extend_from_slice(&[BRA, 0, 0]);
    e.extend_from_slice(&[DUP, PLUS_UCONST, AT_SLOT, DEREF, PICK, 2, EQ]);
    let to_found = e.len();
    e.extend_from_slice(&[BRA, 0, 0]);
    let to_loop = e.len();
    e.extend_from_slice(&[SKIP, 0, 0]);
    let not_found = e.len();
    e.extend_from_slice(&[DROP, DROP, DROP, CONST8U]);
    e.extend_from_slice(&(&NO_RETURN_ADDRESS as *const u64 as u64).to_le_bytes());
    let to_end = e.len();
    e.extend_from_slice(&[SKIP, 0, 0]);
    let found = e.len();
    e.extend_from_slice(&[SWAP, DROP, SWAP, DROP]);
    let end = e.len();
    let mut branch = |at: usize, to: usize| {
        let rel = (to as i64 - (at as i64 + 3)) as i16;
        e[at + 1..at + 3].copy_from_slice(&rel.to_le_bytes());
    };
    branch(to_not_found, not_found);
    branch(to_found, found);
    branch(to_loop, looping);
    branch(to_end, end);

    let mut cie: Vec<u8> = vec![0, 0, 0, 0, 0, 0, 0, 0, 1];
    cie.extend_from_slice(b"zR\0");
    cie.extend_from_slice(&[1, 0x78, 16, 1, 0x00]); // code align 1, data align -8, RA column 16, 'R': absptr
                                                    // CFA = rsp + 8 and rsp = CFA - 8 (DW_CFA_val_offset, factored by -8): the caller's stack pointer is
                                                    // the stub frame's rsp, as for any return, but the CFA differs from the hooked frame's. Unwinders
                                                    // identify a frame by its callee's CFA; with CFA = rsp, the stub frame above a handler frame
                                                    // would share the handler's identity and libgcc's phase 2 would stop at the stub (an abort).
    cie.extend_from_slice(&[0x0c, 7, 8]); // DW_CFA_def_cfa rsp, 8
    cie.extend_from_slice(&[0x14, 7, 1]); // DW_CFA_val_offset rsp, -8
    cie.extend_from_slice(&[0x10, 16]); // DW_CFA_expression RA
    cie.push(e.len() as u8); // uleb128: the expression is shorter than 128 bytes
    cie.extend_from_slice(&e);
    while !cie.len().is_multiple_of(8) {
        cie.push(0); // DW_CFA_nop
    }
    let cie_len = (cie.len() - 4) as u32;
    cie[..4].copy_from_slice(&cie_len.to_le_bytes());

    let mut fde: Vec<u8> = vec![0; 8];
    fde.extend_from_slice(&pc_begin.to_le_bytes());
    fde.extend_from_slice(&pc_range.to_le_bytes());
    fde.push(0); // augmentation data length
    while !fde.len().is_multiple_of(8) {
        fde.push(0);
    }
    let fde_len = (fde.len() - 4) as u32;
    fde[..4].copy_from_slice(&fde_len.to_le_bytes());
    let cie_pointer = (cie.len() + 4) as u32; // from the FDE's CIE-pointer field back to the CIE
    fde[4..8].copy_from_slice(&cie_pointer.to_le_bytes());

    let total = cie.len() + fde.len() + 4;
    if out.len() < total {
        return 0;
    }
    out[..cie.len()].copy_from_slice(&cie);
    out[cie.len()..cie.len() + fde.len()].copy_from_slice(&fde);
    out[cie.len() + fde.len()..total].fill(0);
    total
}
