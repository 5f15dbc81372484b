//! The XRay instrumentation map (`xray_instr_map`), shared by the runtime (which patches sleds) and
//! `ferrotrace list` (which reads the file): one decoding of the entries, one symbol lookup.
//!
//! Each entry is 32 bytes, unaligned: `u64 address, u64 function, u8 kind, u8 always_instrument,
//! u8 version, 13 bytes padding`. From version 2 on (what rustc and clang emit) `address` and `function`
//! are relative to the entry's own fields, so an entry decodes the same against the section's
//! link-time address (in the file) or its runtime address (in memory), each giving addresses of that
//! kind.

/// Bytes per map entry.
pub const ENTRY_LEN: usize = 32;

/// What a sled is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SledKind {
    /// Function entry (also LOG_ARGS_ENTER).
    Entry,
    /// Function return (the sled replaced `ret`).
    Exit,
    /// Before a tail call.
    Tail,
}

/// One decoded map entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SledEntry {
    /// Address of the sled.
    pub sled: u64,
    /// Address of the function it belongs to.
    pub function: u64,
    /// Its kind; `None` for custom and typed event sleds, which are not function sleds.
    pub kind: Option<SledKind>,
}

/// Decodes the entry `bytes` located at address `at`.
///
/// ```
/// use ferrotrace_core::xray::{decode_entry, SledKind};
/// let mut e = [0u8; 32];
/// e[0..8].copy_from_slice(&(-0x100i64).to_le_bytes()); // sled 0x100 before the entry
/// e[8..16].copy_from_slice(&(-0x108i64).to_le_bytes()); // function: same address, from field 2
/// e[16] = 1; // EXIT
/// e[18] = 2; // version 2: PC-relative
/// let d = decode_entry(&e, 0x5000);
/// assert_eq!((d.sled, d.function, d.kind), (0x4f00, 0x4f00, Some(SledKind::Exit)));
/// ```
pub fn decode_entry(bytes: &[u8; ENTRY_LEN], at: u64) -> SledEntry {
    let word = |i: usize| {
        let mut w = [0u8; 8];
        w.copy_from_slice(&bytes[i..i + 8]);
        u64::from_le_bytes(w)
    };
    let (address, function) = (word(0), word(8));
    let (sled, function) = if bytes[18] >= 2 {
        (at.wrapping_add(address), (at + 8).wrapping_add(function))
    } else {
        (address, function)
    };
    let kind = match bytes[16] {
        0 | 3 => Some(SledKind::Entry),
        1 => Some(SledKind::Exit),
        2 => Some(SledKind::Tail),
        _ => None,
    };
    SledEntry {
        sled,
        function,
        kind,
    }
}

/// The symbol containing `addr` in `symbols`, sorted by address without duplicates: `(address, size,
/// name)`. A symbol of size 0 covers only its own address.
pub fn symbol_at<'a>(symbols: &[(u64, u64, &'a str)], addr: u64) -> Option<(u64, u64, &'a str)> {
    match symbols.binary_search_by_key(&addr, |s| s.0) {
        Ok(i) => Some(symbols[i]),
        Err(0) => None,
        Err(i) => Some(symbols[i - 1]).filter(|s| addr < s.0 + s.1.max(1)),
    }
}
