//! Tracing programs built with mcount or `__fentry__` calls (`-Zinstrument-mcount`, `gcc -pg`,
//! `gcc -pg -mfentry`), and patching the NOPs of `gcc -pg -mnop-mcount -mrecord-mcount` and
//! `-fpatchable-function-entry=5` into calls, with the same records and chunks as the XRay trampolines.
//!
//! **Entry.** The runtime exports `mcount`, `_mcount` and `__fentry__` (the preload library's override
//! the C library's; a program that links the runtime binds its calls to them). A hook looks its own
//! return address up in the site table ([`crate::recorders::mcount::sites`]: a hash table from return address to
//! record word, built at discovery; word 0 = not traced: filtered out, the runtime's own code, or no
//! frame pointer), and for a
//! traced function pushes `{real return address, its stack slot, word}` on the thread's shadow stack,
//! replaces the return address in the stack with the thread's return stub, and appends an entry record
//! through the same `HOT` cursor as the XRay trampolines. A filtered-out function costs the call, the
//! lookup and a `ret`.
//!
//! **Exit.** The function returns into the stub, which jumps to [`ferrotrace_mcount_return`]: it pops
//! the frame (the one whose slot is the one just returned through), appends the exit record, and `jmp`s
//! to the real return address (a `ret` there would unbalance the return stack buffer for the callers
//! above). Frames above it that never returned (left by `longjmp` or unwinding) are dropped first: the
//! trace shows them as unwound.
//!
//! **Unwinding.** Each thread's return stub has its own DWARF CFI, registered with the unwinder
//! (`__register_frame`): the caller's return address is the shadow frame whose slot is the stub frame's
//! CFA − 8, found by a loop in a DWARF expression. So `_Unwind_RaiseException` (Rust panics, C++
//! exceptions), `_Unwind_Backtrace` (panic backtraces, `backtrace()`) and forced unwinding walk through
//! hooked frames without any change to the stack; a landing pad in a hooked frame keeps its hook and its
//! exit is recorded. To an unwinder the stub is one more frame after each hooked function; the preload
//! library's `_Unwind_Backtrace` leaves those out.
//!
//! **Depth.** Calls nested deeper than the shadow stack (`FERROTRACE_SHADOW_DEPTH`, 16384 frames by
//! default) are not traced: neither entry nor exit is recorded, each is counted as two lost events, and
//! the runtime says how many at the end. `record -D N` makes the shadow stack N frames deep and leaves
//! deeper calls out on purpose (not counted).
//!
//! **Registers.** Hooks preserve every register but the flags (gcc's `-fipa-ra` lets callers keep values
//! in registers a callee is known not to touch, and the mcount call in the prologue is invisible to
//! it); the fast paths touch `rax`, `rcx`, `rdx`, `rsi` and restore them, and the slow paths save
//! everything, vector state included (see [`crate::recorders::xray`]).

pub mod sites;

use std::sync::atomic::{AtomicU64, Ordering};

use ferrotrace_core::shadow::ShadowFrame;

use crate::buffers::hot::{append_record_asm, tls_offset, Hot, FERROTRACE_TLS_OFFSET, PAGE};
use crate::lifecycle::runtime::Recorder;
use crate::recorders::mcount::sites::{FERROTRACE_SITES, HASH_MUL};

/// The mcount recorder's hooks (`recorders::ALL`): a thread's shadow stack and return stub are freed
/// at its exit.
pub const RECORDER: Recorder = Recorder {
    thread_exit: release_thread,
    ..Recorder::NONE
};

/// Bytes of one shadow frame ([`ShadowFrame`]: `{real return address, address of its stack slot,
/// record word}`).
const FRAME: u64 = ShadowFrame::SIZE as u64;

// ---------------------------------------------------------------------------------------------------
// The hooks.

extern "C" {
    /// The mcount hook: reached by `call` after the traced function's prologue.
    fn ferrotrace_mcount_hook();
    /// The fentry hook: reached by `call` before the traced function's prologue.
    fn ferrotrace_fentry_hook();
    /// The shared return trampoline, reached from every thread's return stub.
    pub fn ferrotrace_mcount_return();
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

/// The calling thread's return stub (what hooked frames return into), 0 if it has none. Unwinders see it
/// as one frame after each hooked function; a backtrace can leave those out.
#[cfg(feature = "preload")]
pub fn thread_stub() -> u64 {
    Hot::current().shadow_stub.load(Ordering::Relaxed)
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
    "  rdtsc",
    "  shl rdx, 32",
    "  or rax, rdx",
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
    ".size \\name, . - \\name",
    ".endm",
    // mcount: after `push rbp; mov rbp, rsp`, the function's return address is at rbp + 8.
    "ferrotrace_call_hook ferrotrace_mcount_hook, [rbp+8]",
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
    ".size ferrotrace_mcount_return, . - ferrotrace_mcount_return",
    ".purgem ferrotrace_mcount_append",
    ".popsection",
    sites = sym FERROTRACE_SITES,
    off = sym FERROTRACE_TLS_OFFSET,
    hash_mul = const HASH_MUL,
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
    shadow_slow = sym shadow_slow,
    resync = sym resync,
);

// ---------------------------------------------------------------------------------------------------
// Per-thread shadow stacks and return stubs.

extern "C" {
    fn __register_frame(begin: *const u8);
    fn __deregister_frame(begin: *const u8);
}

/// Offset of the return stub in its page (preceded by a NOP that the CFI covers: unwinders look up
/// `return address - 1`).
const STUB_AT: usize = 16;
/// Offset of the stub's `.eh_frame` data in the page.
const EH_FRAME_AT: usize = 64;

/// What the CFI of a stub makes the return address when its frame is not on the shadow stack: 0, the
/// end of the stack for an unwinder.
static NO_RETURN_ADDRESS: u64 = 0;

/// Called (all registers saved) when a traced call finds no shadow stack or a full one: returns 0 to
/// retry the hook, 1 to leave the call untraced.
extern "C" fn shadow_slow(_word: u64, _r10: u64) -> u64 {
    let h = Hot::current();
    // A thread has a shadow stack only once a runtime records.
    let Some(rt) = crate::lifecycle::runtime::get() else {
        return 1;
    };
    if h.shadow_base.load(Ordering::Relaxed) != 0 {
        // Full: neither the entry nor the exit of this call is recorded. A thread whose shadow stack
        // was released (it is exiting: code in later thread-local destructors) is not counted, nor a
        // call below the depth the user asked for.
        if rt.config.shadow_limit().is_some() || h.shadow_stub.load(Ordering::Relaxed) == 0 {
            return 1;
        }
        rt.too_deep.fetch_add(1, Ordering::Relaxed);
        crate::buffers::thread::count_lost(2);
        return 1;
    }
    let prepared = crate::buffers::thread::as_runtime(|| {
        rt.lifecycle.is_recording() && prepare(h, rt.config.shadow_frames())
    });
    if prepared == Some(true) {
        0
    } else {
        1
    }
}

/// Gives the calling thread a shadow stack of `depth` frames and its return stub with the stub's unwind
/// information.
fn prepare(h: &Hot, depth: usize) -> bool {
    if tls_offset() != crate::buffers::hot::hot_offset_here() {
        return false;
    }
    let frames = depth as u64 + 1; // + the sentinel
    let shadow_len = ((frames * FRAME) as usize).next_multiple_of(PAGE);
    // SAFETY: fresh anonymous mappings, checked; the stub page is filled then made R-X.
    unsafe {
        let shadow = libc::mmap(
            core::ptr::null_mut(),
            shadow_len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        );
        if shadow == libc::MAP_FAILED {
            return false;
        }
        let page = libc::mmap(
            core::ptr::null_mut(),
            PAGE,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        );
        if page == libc::MAP_FAILED {
            libc::munmap(shadow, shadow_len);
            return false;
        }
        let base = shadow as u64;
        let stub = page as u64 + STUB_AT as u64;
        let bytes = core::slice::from_raw_parts_mut(page as *mut u8, PAGE);
        bytes[..EH_FRAME_AT].fill(0xcc);
        bytes[STUB_AT - 1] = 0x90;
        bytes[STUB_AT..STUB_AT + 6].copy_from_slice(&[0xff, 0x25, 0, 0, 0, 0]);
        bytes[STUB_AT + 6..STUB_AT + 14]
            .copy_from_slice(&(ferrotrace_mcount_return as *const () as u64).to_le_bytes());
        let top_addr = &h.shadow_top as *const AtomicU64 as u64;
        let len = eh_frame(&mut bytes[EH_FRAME_AT..], stub - 1, 15, top_addr, base);
        if len == 0 || libc::mprotect(page, PAGE, libc::PROT_READ | libc::PROT_EXEC) != 0 {
            libc::munmap(page, PAGE);
            libc::munmap(shadow, shadow_len);
            return false;
        }
        __register_frame(bytes.as_ptr().add(EH_FRAME_AT));
        h.shadow_base.store(base, Ordering::Relaxed);
        h.shadow_stub.store(stub, Ordering::Relaxed);
        h.shadow_limit
            .store(base + frames * FRAME, Ordering::Relaxed);
        h.shadow_top.store(base + FRAME, Ordering::Relaxed);
    }
    true
}

/// At thread exit (no hooked frame of the thread is left): unregisters and unmaps the thread's return
/// stub and shadow stack; later calls go to the slow path, which leaves them untraced.
pub fn release_thread() {
    let h = Hot::current();
    let base = h.shadow_base.load(Ordering::Relaxed);
    if base == 0 {
        return;
    }
    let frames = (h.shadow_limit.load(Ordering::Relaxed) - base) / FRAME;
    let page = h.shadow_stub.load(Ordering::Relaxed) - STUB_AT as u64;
    h.shadow_top.store(0, Ordering::Relaxed);
    h.shadow_limit.store(0, Ordering::Relaxed);
    h.shadow_stub.store(0, Ordering::Relaxed);
    // SAFETY: the page and the shadow stack are this thread's own mappings made by `prepare`, whose
    // frame information was registered there; nothing refers to them any more.
    unsafe {
        __deregister_frame((page as usize + EH_FRAME_AT) as *const u8);
        libc::munmap(page as *mut libc::c_void, PAGE);
        libc::munmap(
            base as *mut libc::c_void,
            ((frames * FRAME) as usize).next_multiple_of(PAGE),
        );
    }
    // Left set so that the thread's later calls find "full" and stay untraced, without a new stack.
    h.shadow_base.store(base, Ordering::Relaxed);
}

/// Called (all registers saved) by the return trampoline when the top frame's slot is not `slot`:
/// frames above the returning one were left without returning (`longjmp`, unwinding). Pops them and
/// returns 0; aborts with a message if the returning frame is not on the shadow stack at all.
extern "C" fn resync(slot: u64, _r10: u64) -> u64 {
    let h = Hot::current();
    let base = h.shadow_base.load(Ordering::Relaxed);
    let mut frame = h.shadow_top.load(Ordering::Relaxed);
    while frame > base + FRAME {
        frame -= FRAME;
        // SAFETY: between the sentinel and the top: frames of this thread's shadow stack.
        if unsafe { (*(frame as *const ShadowFrame)).slot } == slot {
            h.shadow_top.store(frame + FRAME, Ordering::Relaxed);
            return 0;
        }
    }
    let msg = b"ferrotrace: a traced function returned through a stack slot the shadow stack does not know \
(did the program switch stacks: swapcontext, coroutines?); mcount tracing cannot follow it, aborting\n";
    // SAFETY: write(2) and abort(3) are async-signal-safe; the real return address is lost.
    unsafe {
        libc::write(2, msg.as_ptr().cast(), msg.len());
        libc::abort();
    }
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
