//! Trampolines for functions of uninstrumented code whose entry is replaced by a jump (the safety
//! analysis that chose them is `ferrotrace_core::entry_patch`, shared with `ferrotrace list --dynamic`).
//!
//! A trampoline, in a page within ±2 GiB of its function, is
//!
//! ```text
//! call qword ptr [rip + hook slot]   ; the fentry hook; its return address is the site table's key
//! <the replaced instructions, re-encoded at this address by iced-x86's BlockEncoder>
//! jmp  <the first byte after them>
//! ```
//!
//! Reached by the function's `jmp`, it is in exactly the situation of a `-mfentry` call: `[rsp]` is the
//! function's return address, no prologue has run, every argument register is live. The hook keeps
//! every register but the flags (which no function's caller expects kept), pushes below `rsp` (nothing
//! of the function lives there yet: its red zone is empty on entry), and hooks the return address as
//! it does for `__fentry__`; so exits, unwinding and `longjmp` are the mcount path's.

use ferrotrace_core::entry_patch::{Refusal, Window};
use iced_x86::{
    BlockEncoder, BlockEncoderOptions, Code, Decoder, DecoderOptions, Instruction, InstructionBlock,
};

/// Bytes reserved for one trampoline: the call (6), the replaced instructions re-encoded (a window is
/// at most 5 + 14 bytes; a short branch grows to at most 6 bytes) and the jump back (5).
pub const SLOT: usize = 64;

/// Bytes of the hook call that starts a trampoline: the key of the site table is its address plus this.
pub const CALL_LEN: u64 = 6;

/// The code of the trampoline at `at` for the function whose window is `window` with bytes `replaced`;
/// the hook's address is read from the 8-byte slot at `hook_slot`. Fails when a RIP-relative operand
/// or branch of the window cannot reach from `at`, or the code would not fit in [`SLOT`] bytes.
pub fn trampoline(
    window: Window,
    replaced: &[u8],
    at: u64,
    hook_slot: u64,
) -> Result<Vec<u8>, Refusal> {
    let call_rel = i32::try_from(hook_slot as i64 - (at + CALL_LEN) as i64)
        .map_err(|_| Refusal::OutOfReach)?;
    let mut code = vec![0xff, 0x15];
    code.extend_from_slice(&call_rel.to_le_bytes());
    let mut decoder = Decoder::with_ip(64, replaced, window.at, DecoderOptions::NONE);
    let mut moved: Vec<Instruction> = decoder.iter().collect();
    let back = window.at + u64::from(window.len);
    moved
        .push(Instruction::with_branch(Code::Jmp_rel32_64, back).map_err(|_| Refusal::OutOfReach)?);
    let encoded = BlockEncoder::encode(
        64,
        InstructionBlock::new(&moved, at + CALL_LEN),
        BlockEncoderOptions::NONE,
    )
    .map_err(|_| Refusal::OutOfReach)?;
    code.extend_from_slice(&encoded.code_buffer);
    if code.len() > SLOT {
        return Err(Refusal::OutOfReach);
    }
    Ok(code)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The moved instructions keep what they address: a RIP-relative load reads the same address, a
    /// short conditional branch still goes where it went, and the last jump returns after the window.
    #[test]
    fn moved_instructions_keep_their_targets() {
        // mov rax, [rip + 0x100]; je +0x10 (short); nop — at 0x40_1000, 7 + 2 + 1 = 10 bytes.
        let replaced = [0x48, 0x8b, 0x05, 0x00, 0x01, 0, 0, 0x74, 0x10, 0x90];
        let window = Window {
            at: 0x40_1000,
            len: replaced.len() as u8,
        };
        let at = 0x50_0010;
        let code = trampoline(window, &replaced, at, 0x50_0000).unwrap();
        assert_eq!(&code[..2], &[0xff, 0x15]);
        assert_eq!(
            i32::from_le_bytes(code[2..6].try_into().unwrap()) as i64,
            0x50_0000 - (at as i64 + 6)
        );
        let insns: Vec<Instruction> =
            Decoder::with_ip(64, &code[6..], at + 6, DecoderOptions::NONE)
                .iter()
                .collect();
        assert_eq!(insns[0].ip_rel_memory_address(), 0x40_1007 + 0x100);
        assert_eq!(insns[1].near_branch_target(), 0x40_1009 + 0x10);
        assert_eq!(insns[2].code(), Code::Nopd);
        assert_eq!(insns[3].near_branch_target(), 0x40_100a);
    }

    /// A RIP-relative load whose target is more than 2 GiB from the trampoline (and above 4 GiB, where
    /// an EIP-relative form cannot reach either) is refused, not encoded wrong.
    #[test]
    fn out_of_reach_is_refused() {
        // mov rax, [rip + 0x100]; nop
        let replaced = [0x48, 0x8b, 0x05, 0x00, 0x01, 0, 0, 0x90];
        let window = Window {
            at: 0x1_0000_1000,
            len: 8,
        };
        assert_eq!(
            trampoline(window, &replaced, 0x7f00_0000_0000, 0x7f00_0000_0000 - 16),
            Err(Refusal::OutOfReach)
        );
    }
}
