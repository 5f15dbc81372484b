//! The entry points instrumented code calls, in assembly: `mcount`, `__fentry__`, the return
//! trampoline, and the explicit [`crate::enter`]/[`crate::exit`].
//!
//! Assembly, not Rust, for two reasons. The hooks run in the middle of another function's prologue
//! with its argument registers live, so they may change only what they save. And code in assembly is
//! never instrumented: an embedder that builds everything with `-Zinstrument-mcount` instruments this
//! crate's Rust functions too, but nothing on the recording path is one of them (rftrace has to build
//! its backend for another target to get the same).
//!
//! **Per event**: one load of the enabled word, the thread's slot (one `%fs`/`%gs` load, or a call of
//! the embedder's function), the clock (`rdtsc`, or a call), and a 16-byte record in the slot: no
//! shared cache line is written. A record (and a shadow frame) is claimed, by moving the slot's cursor,
//! before it is filled, so that an interrupt or signal handler that traces on the same CPU writes past
//! it; only one arriving between the load and the store of the claim (one instruction apart) would
//! write the same place. An unlocked `xadd` would close that window, but costs about 12 ns per event
//! on the machine measured (docs/performance.md), as much as the `rdtsc`.
//!
//! **Returns**: a traced call pushes `{real return address, its stack slot, record word}` on the
//! slot's shadow stack (claimed the same way) and writes [`ftemb_return`]'s address into the slot. The
//! function's `ret` lands there; it pops the frame, records the exit and `jmp`s through `r11` to the
//! real address (`r11` is dead at a return by the ABI, and a `jmp` keeps the return stack buffer of
//! the callers above balanced). Frames above the returning one that never returned (`longjmp`) are
//! dropped first.

use core::arch::global_asm;

use ferrotrace_core::arch::x86_64::{mcount_parent_slot, rdtsc_asm, restore_xmm_asm, save_xmm_asm};
use ferrotrace_core::shadow::ShadowFrame;

use crate::{slot, Hot, HOT};

/// Bit of a record word that makes it an exit (kind 1) rather than an entry (kind 0).
pub(crate) const EXIT_BIT: u32 = 48;

extern "C" {
    /// Records the entry of the function at `address` in the calling thread.
    pub fn ferrotrace_embedded_enter(address: usize);
    /// Records the exit of the function at `address` in the calling thread.
    pub fn ferrotrace_embedded_exit(address: usize);
}

global_asm!(
    ".pushsection .text.ferrotrace_embedded,\"ax\",@progbits",
    // ftemb_call: calls the function whose address is in rax and returns its result in rax, every
    // other caller-saved register kept (the vector registers too, where the target has SSE: code
    // built for soft-float kernels has none to keep, and may not touch them; saved as the runtime's
    // slow path saves them without XSAVE, ferrotrace_core::arch). Aligns the stack.
    ".p2align 4",
    ".type ftemb_call,@function",
    "ftemb_call:",
    "  push rbp",
    "  mov rbp, rsp",
    "  push rcx",
    "  push rdx",
    "  push rsi",
    "  push rdi",
    "  push r8",
    "  push r9",
    "  push r10",
    "  push r11",
    "  and rsp, -16",
    ".if {sse}",
    "  sub rsp, 256",
    save_xmm_asm!(),
    ".endif",
    "  call rax",
    "ftemb_call_returned:",
    ".if {sse}",
    restore_xmm_asm!(),
    ".endif",
    "  lea rsp, [rbp - 64]",
    "  pop r11",
    "  pop r10",
    "  pop r9",
    "  pop r8",
    "  pop rdi",
    "  pop rsi",
    "  pop rdx",
    "  pop rcx",
    "  pop rbp",
    "  ret",
    ".size ftemb_call, . - ftemb_call",
    // ftemb_slot NONE: the calling thread's slot into rcx, or a jump to NONE when it has none.
    // Clobbers rax and rdx. %fs/%gs modes read the slot's address at the embedder's offset (0: the
    // thread is not bound; 1: it is never traced, or is being bound right now). A hosted front end
    // binds threads lazily: with a bind function set, an unbound thread is marked 1 (so that the
    // instrumented bind function is not traced), bound, and marked with its slot.
    ".macro ftemb_slot none",
    "  mov rdx, qword ptr [rip + {hot} + {h_tls}]",
    "  mov rax, qword ptr [rip + {hot} + {h_threads}]",
    "  test rax, rax",
    "  jnz 21f",
    "  mov rcx, qword ptr fs:[rdx]",
    "  cmp rcx, 1",
    "  ja 24f",
    "  jz \\none",
    "  mov rax, qword ptr [rip + {hot} + {h_bind}]",
    "  test rax, rax",
    "  jz \\none",
    "  mov qword ptr fs:[rdx], 1",
    "  call ftemb_call",
    "  mov qword ptr fs:[rdx], rax",
    "  mov rcx, rax",
    "  cmp rcx, 1",
    "  jbe \\none",
    "  jmp 24f",
    "21:",
    "  cmp rax, 1",
    "  jne 23f",
    "  mov rcx, qword ptr gs:[rdx]",
    "  cmp rcx, 1",
    "  jbe \\none",
    "  jmp 24f",
    "23:",
    "  mov rax, qword ptr [rip + {hot} + {h_thread_fn}]",
    "  call ftemb_call",
    "  cmp rax, qword ptr [rip + {hot} + {h_count}]",
    "  jae \\none",
    "  imul rax, qword ptr [rip + {hot} + {h_stride}]",
    "  add rax, qword ptr [rip + {hot} + {h_slots}]",
    "  mov rcx, rax",
    "24:",
    ".endm",
    // ftemb_record: appends the record {clock, rsi} to the slot in rcx. Clobbers rax, rdx, rdi.
    // Full: in stop mode the event is counted lost; in wrap mode the cursor starts again at the
    // beginning.
    ".macro ftemb_record",
    "  mov rax, qword ptr [rip + {hot} + {h_clock_fn}]",
    "  test rax, rax",
    "  jnz 31f",
    rdtsc_asm!(),
    "  jmp 32f",
    "31:",
    "  call ftemb_call",
    "32:",
    "  mov rdx, qword ptr [rcx + {s_cursor}]",
    "  cmp rdx, qword ptr [rcx + {s_end}]",
    "  jae 33f",
    "  lea rdi, [rdx + 16]",
    "  mov qword ptr [rcx + {s_cursor}], rdi",
    "34:",
    "  mov qword ptr [rdx], rax",
    "  mov qword ptr [rdx + 8], rsi",
    "  jmp 35f",
    "33:",
    "  cmp qword ptr [rip + {hot} + {h_wrap}], 0",
    "  je 36f",
    "  mov rdx, qword ptr [rcx + {s_start}]",
    "  lea rdi, [rdx + 16]",
    "  mov qword ptr [rcx + {s_cursor}], rdi",
    "  inc qword ptr [rcx + {s_wraps}]",
    "  jmp 34b",
    "36:",
    "  inc qword ptr [rcx + {s_lost}]",
    "35:",
    ".endm",
    // The start of a hook (a global function NAME): return at once while tracing is off, else save
    // the registers the hook uses; ftemb_epilogue restores them and returns.
    ".macro ftemb_prologue name",
    ".p2align 4",
    ".globl \\name",
    ".type \\name,@function",
    "\\name:",
    "  cmp qword ptr [rip + {hot}], 0",
    "  jne 1f",
    "  ret",
    "1:",
    "  push rax",
    "  push rcx",
    "  push rdx",
    "  push rsi",
    "  push rdi",
    ".endm",
    ".macro ftemb_epilogue",
    "  pop rdi",
    "  pop rsi",
    "  pop rdx",
    "  pop rcx",
    "  pop rax",
    "  ret",
    ".endm",
    // The compiler hooks: `mcount` after the traced function's `push rbp; mov rbp, rsp` (its return
    // address at rbp + 8), `__fentry__` before its prologue (just above the hook's own return
    // address: rsp + 48 after the five pushes). The hook's own return address (rsp + 40) is the call
    // site, inside the traced function: what the record names it by. A function that returns into
    // ftemb_call is one of the embedder's callbacks (thread, clock, bind), called by a hook: it is
    // instrumented too, and tracing it would recurse.
    ".macro ftemb_hook name, slot_at, source",
    "ftemb_prologue \\name",
    "  lea rsi, \\slot_at",
    "  lea rax, [rip + ftemb_call_returned]",
    "  cmp rax, qword ptr [rsi]",
    "  je 9f",
    "  ftemb_slot 9f",
    "  mov rax, qword ptr [rcx + {s_top}]",
    "  cmp rax, qword ptr [rcx + {s_limit}]",
    "  jae 8f",
    "  lea rdx, [rax + {frame}]",
    "  mov qword ptr [rcx + {s_top}], rdx",
    "  mov rdx, qword ptr [rsi]",
    "  mov qword ptr [rax + {f_ret}], rdx",
    "  mov qword ptr [rax + {f_slot}], rsi",
    "  mov rdi, qword ptr [rsp + 40]",
    "  shl rdi, 16",
    "  shr rdi, 16",
    "  mov qword ptr [rax + {f_word}], rdi",
    "  lea rdx, [rip + ftemb_return]",
    "  mov qword ptr [rsi], rdx",
    "  or qword ptr [rcx + {s_sources}], \\source",
    "  mov rsi, rdi",
    "  ftemb_record",
    "9:",
    "ftemb_epilogue",
    // The shadow stack is full: neither the entry nor the exit is recorded; both count as lost.
    "8:",
    "  add qword ptr [rcx + {s_lost}], 2",
    "  jmp 9b",
    ".size \\name, . - \\name",
    ".endm",
    concat!("ftemb_hook mcount, ", mcount_parent_slot!(), ", {src_mcount}"),
    "ftemb_hook __fentry__, [rsp+48], {src_fentry}",
    ".purgem ftemb_hook",
    // Reached by a hooked function's `ret`: rsp is its return-address slot + 8, and after the five
    // pushes the slot is rsp + 32. Only rax and rdx (and xmm0/xmm1, untouched) hold results.
    ".p2align 4",
    ".type ftemb_return,@function",
    "ftemb_return:",
    "  push rax",
    "  push rcx",
    "  push rdx",
    "  push rsi",
    "  push rdi",
    "  ftemb_slot 7f",
    "1:",
    "  mov rsi, qword ptr [rcx + {s_top}]",
    "  lea rax, [rsp + 32]",
    "  cmp rax, qword ptr [rsi - {frame} + {f_slot}]",
    "  jne 5f",
    "  mov r11, qword ptr [rsi - {frame} + {f_ret}]",
    "  mov rdi, qword ptr [rsi - {frame} + {f_word}]",
    "  sub qword ptr [rcx + {s_top}], {frame}",
    "  bts rdi, {exit_bit}",
    "  mov rsi, rdi",
    "  ftemb_record",
    "  pop rdi",
    "  pop rsi",
    "  pop rdx",
    "  pop rcx",
    "  pop rax",
    "  jmp r11",
    // The top frame is not this one: the frames above it were left without returning (longjmp).
    // Drop them; a slot the shadow stack does not hold at all means the real return address is lost.
    "5:",
    "  mov rsi, qword ptr [rcx + {s_top}]",
    "51:",
    "  sub rsi, {frame}",
    "  cmp rsi, qword ptr [rcx + {s_base}]",
    "  jb 7f",
    "  cmp rax, qword ptr [rsi + {f_slot}]",
    "  jne 51b",
    "  add rsi, {frame}",
    "  mov qword ptr [rcx + {s_top}], rsi",
    "  jmp 1b",
    "7:",
    "  ud2",
    ".size ftemb_return, . - ftemb_return",
    // The explicit API: rdi = the function's address. Every register but the flags is kept, so
    // that hand-written assembly (interrupt entry) can call them without saving anything.
    ".macro ftemb_explicit name, exit",
    "ftemb_prologue \\name",
    "  mov rsi, rdi",
    "  shl rsi, 16",
    "  shr rsi, 16",
    ".if \\exit",
    "  bts rsi, {exit_bit}",
    ".endif",
    "  ftemb_slot 9f",
    "  ftemb_record",
    "9:",
    "ftemb_epilogue",
    ".size \\name, . - \\name",
    ".endm",
    "ftemb_explicit ferrotrace_embedded_enter, 0",
    "ftemb_explicit ferrotrace_embedded_exit, 1",
    ".purgem ftemb_explicit",
    ".purgem ftemb_prologue",
    ".purgem ftemb_epilogue",
    ".purgem ftemb_slot",
    ".purgem ftemb_record",
    ".popsection",
    hot = sym HOT,
    sse = const cfg!(target_feature = "sse2") as u8,
    frame = const ShadowFrame::SIZE,
    f_ret = const ShadowFrame::RET,
    f_slot = const ShadowFrame::SLOT,
    f_word = const ShadowFrame::WORD,
    exit_bit = const EXIT_BIT,
    src_mcount = const ferrotrace_core::schema::source::MCOUNT,
    src_fentry = const ferrotrace_core::schema::source::FENTRY,
    h_tls = const core::mem::offset_of!(Hot, tls_offset),
    h_threads = const core::mem::offset_of!(Hot, threads),
    h_thread_fn = const core::mem::offset_of!(Hot, thread_fn),
    h_bind = const core::mem::offset_of!(Hot, bind_fn),
    h_count = const core::mem::offset_of!(Hot, count),
    h_stride = const core::mem::offset_of!(Hot, stride),
    h_slots = const core::mem::offset_of!(Hot, slots),
    h_clock_fn = const core::mem::offset_of!(Hot, clock_fn),
    h_wrap = const core::mem::offset_of!(Hot, wrap),
    s_cursor = const core::mem::offset_of!(slot::Header, cursor),
    s_end = const core::mem::offset_of!(slot::Header, end),
    s_start = const core::mem::offset_of!(slot::Header, start),
    s_top = const core::mem::offset_of!(slot::Header, top),
    s_limit = const core::mem::offset_of!(slot::Header, limit),
    s_base = const core::mem::offset_of!(slot::Header, base),
    s_lost = const core::mem::offset_of!(slot::Header, lost),
    s_wraps = const core::mem::offset_of!(slot::Header, wraps),
    s_sources = const core::mem::offset_of!(slot::Header, sources),
);
