//! The bytes that patching writes on x86-64: the 5-byte NOP of tracepoint and `-mnop-mcount` sites,
//! `call`/`jmp rel32`, XRay sleds patched and unpatched, the `jmp [rip]` stubs within reach of the
//! code, and the one-instruction 2-byte store that patches whole instructions while threads run
//! through them. Which sites to patch and when is `crate::patch`'s business.

use ferrotrace_core::xray::SledKind;

/// The 5-byte NOP of tracepoint sites and of gcc's `-mnop-mcount`.
pub const NOP5: [u8; 5] = [0x0f, 0x1f, 0x44, 0x00, 0x00];

/// `call rel32`'s opcode.
pub const CALL_REL32: u8 = 0xe8;
/// `jmp rel32`'s opcode.
pub const JMP_REL32: u8 = 0xe9;
/// `jmp .` (a short jump to itself): a thread that arrives while an instruction is replaced spins
/// there until the rest is written.
pub const JMP_SELF: [u8; 2] = [0xeb, 0xfe];

/// `jmp rel32` ([`JMP_REL32`]) or `call rel32` ([`CALL_REL32`]) from the 5-byte instruction at `site`
/// to `target`, if in reach.
pub fn rel32(opcode: u8, site: usize, target: usize) -> Option<[u8; 5]> {
    let rel = (target as i64).wrapping_sub(site as i64 + 5);
    let r = i32::try_from(rel).ok()?.to_le_bytes();
    Some([opcode, r[0], r[1], r[2], r[3]])
}

/// `jmp qword ptr [rip + 0]` followed by the 8-byte absolute `target`: a jump from anywhere to
/// anywhere, 14 bytes (the stubs within rel32 reach of patched code, the mcount return stubs).
pub fn jmp_rip_abs64(target: u64) -> [u8; 14] {
    let mut b = [0u8; 14];
    b[..6].copy_from_slice(&[0xff, 0x25, 0, 0, 0, 0]);
    b[6..].copy_from_slice(&target.to_le_bytes());
    b
}

/// The first byte of an unpatched XRay sled of `kind` (what is checked before patching it): entry
/// and tail sleds start with `jmp +9` (`eb 09`) over their 9 bytes of NOPs, exit sleds with the
/// function's `ret` (`c3`).
pub fn xray_sled_first_byte(kind: SledKind) -> u8 {
    match kind {
        SledKind::Entry | SledKind::Tail => 0xeb,
        SledKind::Exit => 0xc3,
    }
}

/// The 11 bytes of the XRay sled at `sled` patched: `mov r10d, id`, then `call` (entry, tail) or
/// `jmp` (exit, which replaced the `ret`) to `target`; `None` if `target` is out of rel32 reach.
pub fn xray_sled_patched(kind: SledKind, sled: u64, id: u32, target: u64) -> Option<[u8; 11]> {
    let opcode = match kind {
        SledKind::Entry | SledKind::Tail => CALL_REL32,
        SledKind::Exit => JMP_REL32,
    };
    let jump = rel32(opcode, sled as usize + 6, target as usize)?;
    let mut bytes = [0u8; 11];
    bytes[0] = 0x41; // mov r10d, imm32
    bytes[1] = 0xba;
    bytes[2..6].copy_from_slice(&id.to_le_bytes());
    bytes[6..11].copy_from_slice(&jump);
    Some(bytes)
}

/// Stores 2 bytes with one instruction (atomic for a naturally aligned or in-cache-line store on x86).
///
/// # Safety
/// `p` must be valid for writing 2 bytes.
pub unsafe fn store2(p: usize, b: [u8; 2]) {
    let v = u16::from_le_bytes(b);
    // SAFETY: the caller guarantees `p..p + 2` is writable.
    unsafe {
        core::arch::asm!("mov word ptr [{p}], {v:x}", p = in(reg) p, v = in(reg) v, options(nostack, preserves_flags))
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rel32_encoding() {
        assert_eq!(rel32(0xe9, 0x1000, 0x1005), Some([0xe9, 0, 0, 0, 0]));
        assert_eq!(
            rel32(0xe8, 0x1000, 0x1000),
            Some([0xe8, 0xfb, 0xff, 0xff, 0xff])
        );
        assert_eq!(rel32(0xe9, 0, 1 << 40), None);
    }

    #[test]
    fn a_patched_sled_loads_the_id_and_calls_or_jumps() {
        let b = xray_sled_patched(SledKind::Entry, 0x1000, 7, 0x2000).unwrap();
        assert_eq!(b[..6], [0x41, 0xba, 7, 0, 0, 0]);
        assert_eq!(b[6..], rel32(CALL_REL32, 0x1006, 0x2000).unwrap());
        let b = xray_sled_patched(SledKind::Exit, 0x1000, 7, 0x2000).unwrap();
        assert_eq!(b[6], JMP_REL32);
        assert_eq!(
            jmp_rip_abs64(0x1122)[..8],
            [0xff, 0x25, 0, 0, 0, 0, 0x22, 0x11]
        );
    }
}
