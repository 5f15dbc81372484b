//! x86-64 assembly shared by the runtime and the embedded recorder (see [the parent](super)).
//!
//! ```
//! // The clock read every recorder's fast path starts with, ready for `global_asm!`'s `concat!`.
//! assert_eq!(ferrotrace_core::arch::x86_64::rdtsc_asm!(), "  rdtsc\n  shl rdx, 32\n  or rax, rdx\n");
//! ```

/// Reads the TSC into `rax` whole (`rdtsc` leaves its halves in `edx:eax`). Clobbers `rdx`.
#[doc(hidden)]
#[macro_export]
macro_rules! __x86_64_rdtsc_asm {
    () => {
        "  rdtsc\n  shl rdx, 32\n  or rax, rdx\n"
    };
}
pub use crate::__x86_64_rdtsc_asm as rdtsc_asm;

/// Stores `xmm0`–`xmm15` into the 256 bytes at `[rsp]` (16-byte aligned, reserved by the caller):
/// what a slow path that calls compiled code keeps of the vector state where it cannot use XSAVE
/// (the runtime on a CPU without it, the embedded recorder's calls of the embedder's functions).
#[doc(hidden)]
#[macro_export]
macro_rules! __x86_64_save_xmm_asm {
    () => {
        concat!(
            "  movaps [rsp + 0], xmm0\n",
            "  movaps [rsp + 16], xmm1\n",
            "  movaps [rsp + 32], xmm2\n",
            "  movaps [rsp + 48], xmm3\n",
            "  movaps [rsp + 64], xmm4\n",
            "  movaps [rsp + 80], xmm5\n",
            "  movaps [rsp + 96], xmm6\n",
            "  movaps [rsp + 112], xmm7\n",
            "  movaps [rsp + 128], xmm8\n",
            "  movaps [rsp + 144], xmm9\n",
            "  movaps [rsp + 160], xmm10\n",
            "  movaps [rsp + 176], xmm11\n",
            "  movaps [rsp + 192], xmm12\n",
            "  movaps [rsp + 208], xmm13\n",
            "  movaps [rsp + 224], xmm14\n",
            "  movaps [rsp + 240], xmm15\n",
        )
    };
}
pub use crate::__x86_64_save_xmm_asm as save_xmm_asm;

/// Loads `xmm0`–`xmm15` back from the 256 bytes at `[rsp]` that [`save_xmm_asm!`] stored.
#[doc(hidden)]
#[macro_export]
macro_rules! __x86_64_restore_xmm_asm {
    () => {
        concat!(
            "  movaps xmm0, [rsp + 0]\n",
            "  movaps xmm1, [rsp + 16]\n",
            "  movaps xmm2, [rsp + 32]\n",
            "  movaps xmm3, [rsp + 48]\n",
            "  movaps xmm4, [rsp + 64]\n",
            "  movaps xmm5, [rsp + 80]\n",
            "  movaps xmm6, [rsp + 96]\n",
            "  movaps xmm7, [rsp + 112]\n",
            "  movaps xmm8, [rsp + 128]\n",
            "  movaps xmm9, [rsp + 144]\n",
            "  movaps xmm10, [rsp + 160]\n",
            "  movaps xmm11, [rsp + 176]\n",
            "  movaps xmm12, [rsp + 192]\n",
            "  movaps xmm13, [rsp + 208]\n",
            "  movaps xmm14, [rsp + 224]\n",
            "  movaps xmm15, [rsp + 240]\n",
        )
    };
}
pub use crate::__x86_64_restore_xmm_asm as restore_xmm_asm;

/// Where an mcount hook finds the traced function's return-address slot: `mcount` is called after
/// the function's `push rbp; mov rbp, rsp`, so the slot is just above the saved `rbp`, whatever the
/// hook pushed. (An `__fentry__` hook is called before the prologue: its slot is just above the hook's
/// own return address, at an offset that depends on what the hook pushed.)
#[doc(hidden)]
#[macro_export]
macro_rules! __x86_64_mcount_parent_slot {
    () => {
        "[rbp+8]"
    };
}
pub use crate::__x86_64_mcount_parent_slot as mcount_parent_slot;
