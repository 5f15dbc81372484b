//! mcount, `__fentry__` and patchable-NOP instrumentation, read from machine code: shared by the runtime
//! (which hooks the calls and patches the NOPs) and by `ferrotrace record` (which says what a program
//! has before running it). One decoding of call sites, PLT stubs, prologues and NOPs.
//!
//! * `-Zinstrument-mcount`, `gcc -pg`, `clang -pg` put a call to `mcount` (or `_mcount`) in every function
//!   after its prologue: `e8 rel32` to the PLT stub or to a local definition, or `ff 15 disp32` through
//!   the GOT (`-fno-plt`, and Debian's PIE default). The hook finds the function's return address at
//!   `rbp + 8`, so the prologue must set up the frame pointer.
//! * `gcc -pg -mfentry` calls `__fentry__` as the function's first instruction: the return address is
//!   at `rsp + 8` inside the hook, no frame pointer needed.
//! * `gcc -pg -mnop-mcount -mrecord-mcount` leaves a 5-byte NOP where the call would be and lists it in
//!   `__mcount_loc`; `-fpatchable-function-entry=5` leaves one at the function's start, listed in
//!   `__patchable_function_entries`. The runtime patches the selected ones into calls.

/// Which hook a site calls: where the traced function's return address is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Flavor {
    /// `mcount`/`_mcount`, after the prologue: return address at `rbp + 8`.
    Mcount,
    /// `__fentry__`, before the prologue: return address just above the hook's own.
    Fentry,
}

/// The flavor of a hook symbol's name, if it is one.
///
/// ```
/// use ferrotrace_core::mcount::{hook_flavor, Flavor};
/// assert_eq!(hook_flavor("mcount"), Some(Flavor::Mcount));
/// assert_eq!(hook_flavor("__fentry__"), Some(Flavor::Fentry));
/// assert_eq!(hook_flavor("malloc"), None);
/// ```
pub fn hook_flavor(name: &str) -> Option<Flavor> {
    match name {
        "mcount" | "_mcount" => Some(Flavor::Mcount),
        "__fentry__" => Some(Flavor::Fentry),
        _ => None,
    }
}

/// The GOT slot a PLT stub at `addr` jumps through: `[endbr64] [bnd] jmp *disp32(%rip)`.
///
/// ```
/// use ferrotrace_core::mcount::plt_stub_slot;
/// // ff 25 disp32 at 0x1000: the slot is after the 6-byte jmp, plus 0x100.
/// assert_eq!(plt_stub_slot(&[0xff, 0x25, 0, 1, 0, 0, 0x90], 0x1000), Some(0x1106));
/// // .plt.sec with IBT and BND: f3 0f 1e fa f2 ff 25 disp32
/// assert_eq!(plt_stub_slot(&[0xf3, 0x0f, 0x1e, 0xfa, 0xf2, 0xff, 0x25, 8, 0, 0, 0], 0x2000), Some(0x2013));
/// assert_eq!(plt_stub_slot(&[0x90; 8], 0x1000), None);
/// ```
pub fn plt_stub_slot(code: &[u8], addr: u64) -> Option<u64> {
    let mut i = 0;
    if code.starts_with(&ENDBR64) {
        i += 4;
    }
    if code.get(i) == Some(&0xf2) {
        i += 1;
    }
    if code.get(i..i + 2)? != [0xff, 0x25] {
        return None;
    }
    let disp = i32::from_le_bytes(code.get(i + 2..i + 6)?.try_into().ok()?);
    Some((addr + i as u64 + 6).wrapping_add(disp as i64 as u64))
}

/// `endbr64`, which CET-enabled code puts first in functions and PLT stubs.
pub const ENDBR64: [u8; 4] = [0xf3, 0x0f, 0x1e, 0xfa];

/// True when the function whose code starts with `code` sets up its frame pointer first (`push rbp;
/// mov rbp, rsp`, after an optional `endbr64`): what an mcount hook needs to find the return address.
///
/// ```
/// use ferrotrace_core::mcount::has_frame_pointer_prologue;
/// assert!(has_frame_pointer_prologue(&[0x55, 0x48, 0x89, 0xe5, 0x41, 0x57]));
/// assert!(has_frame_pointer_prologue(&[0xf3, 0x0f, 0x1e, 0xfa, 0x55, 0x48, 0x89, 0xe5]));
/// assert!(!has_frame_pointer_prologue(&[0x41, 0x57, 0x55, 0x48, 0x89, 0xe5]));
/// ```
pub fn has_frame_pointer_prologue(code: &[u8]) -> bool {
    let code = code.strip_prefix(&ENDBR64).unwrap_or(code);
    code.starts_with(&[0x55, 0x48, 0x89, 0xe5])
}

/// True when `code` starts with a 5-byte NOP (`0f 1f 44 00 xx`, what gcc's `-mnop-mcount` and
/// `-fpatchable-function-entry=5` leave).
pub fn is_nop5(code: &[u8]) -> bool {
    code.len() >= 5 && code[..4] == [0x0f, 0x1f, 0x44, 0x00]
}

/// A call to a hook found in machine code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CallSite {
    /// Address of the call instruction.
    pub site: u64,
    /// Its length: the hook's return address is `site + len`.
    pub len: u8,
    /// Index of the target (in `targets`) or slot (in `slots`) it calls through.
    pub hook: usize,
}

/// Calls `found` for every `call rel32` in `code` (located at `addr`) whose target is in `targets`, and
/// every `call *disp32(%rip)` whose GOT slot is in `slots`. Every byte offset is tried: a match inside
/// another instruction is possible in principle, and harmless to the runtime (a key that never comes
/// up); `targets` and `slots` are a handful of addresses, so the scan is one pass over the text.
pub fn for_each_call(
    code: &[u8],
    addr: u64,
    targets: &[u64],
    slots: &[u64],
    mut found: impl FnMut(CallSite),
) {
    if targets.is_empty() && slots.is_empty() {
        return;
    }
    let rel =
        |i: usize| i32::from_le_bytes([code[i], code[i + 1], code[i + 2], code[i + 3]]) as i64;
    let mut i = 0;
    while i + 5 <= code.len() {
        let at = addr + i as u64;
        if code[i] == 0xe8 {
            let target = (at + 5).wrapping_add(rel(i + 1) as u64);
            if let Some(hook) = targets.iter().position(|&t| t == target) {
                found(CallSite {
                    site: at,
                    len: 5,
                    hook,
                });
            }
        } else if code[i] == 0xff && i + 6 <= code.len() && code[i + 1] == 0x15 {
            let slot = (at + 6).wrapping_add(rel(i + 2) as u64);
            if let Some(hook) = slots.iter().position(|&s| s == slot) {
                found(CallSite {
                    site: at,
                    len: 6,
                    hook,
                });
            }
        }
        i += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_direct_and_got_calls_of_the_hooks_only() {
        // At 0x1000: push rbp; mov rbp,rsp; call 0x2000 (the hook); call 0x3000 (another function);
        // call *[rip + d] through slot 0x5008; ret.
        let mut code = [0u8; 32];
        let mut len = 0;
        let mut put = |bytes: &[u8]| {
            code[len..len + bytes.len()].copy_from_slice(bytes);
            len += bytes.len();
            0x1000 + (len - bytes.len()) as u64
        };
        put(&[0x55, 0x48, 0x89, 0xe5]);
        let rel = |site: u64, len: u64, target: u64| {
            ((target as i64 - (site + len) as i64) as i32).to_le_bytes()
        };
        let site1 = 0x1000 + 4;
        let r1 = rel(site1, 5, 0x2000);
        put(&[0xe8, r1[0], r1[1], r1[2], r1[3]]);
        let site2 = site1 + 5;
        let r2 = rel(site2, 5, 0x3000);
        put(&[0xe8, r2[0], r2[1], r2[2], r2[3]]);
        let site3 = site2 + 5;
        let r3 = rel(site3, 6, 0x5008);
        put(&[0xff, 0x15, r3[0], r3[1], r3[2], r3[3]]);
        put(&[0xc3]);
        let mut got = [CallSite {
            site: 0,
            len: 0,
            hook: 9,
        }; 4];
        let mut n = 0;
        for_each_call(&code[..len], 0x1000, &[0x2000], &[0x5000, 0x5008], |c| {
            got[n] = c;
            n += 1;
        });
        assert_eq!(n, 2);
        assert_eq!(
            got[0],
            CallSite {
                site: site1,
                len: 5,
                hook: 0
            }
        );
        assert_eq!(
            got[1],
            CallSite {
                site: site3,
                len: 6,
                hook: 1
            }
        );
    }

    #[test]
    fn nops() {
        assert!(is_nop5(&[0x0f, 0x1f, 0x44, 0x00, 0x00]));
        assert!(is_nop5(&[0x0f, 0x1f, 0x44, 0x00, 0x08]));
        assert!(!is_nop5(&[0xe8, 0, 0, 0, 0]));
        assert!(!is_nop5(&[0x0f, 0x1f]));
    }
}
