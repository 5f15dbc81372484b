//! Tracepoint sites as static keys: a disabled site is the 5-byte NOP `0f 1f 44 00 00`, an enabled one
//! `e9 rel32` (`jmp` to the site's out-of-line block). Patched through [`crate::patch::text`], the runtime's
//! one code patcher.

use crate::arch::patch::{rel32, JMP_REL32, NOP5};
use crate::patch::text::Patcher;

/// Sets each site `(address, target)` to enabled (`jmp target`) or disabled (NOP). Returns how many
/// sites now have the requested form.
///
/// # Safety
/// Every pair is a site and its target from this program's site table ([`crate::recorders::tracepoint::sites`]):
/// anything else would be overwritten with a jump.
pub unsafe fn set_sites(sites: &[(usize, usize)], enable: bool) -> Result<usize, String> {
    if sites.is_empty() {
        return Ok(0);
    }
    let mut patcher = Patcher::new();
    let mut done = 0;
    for &(site, target) in sites {
        let Some(jmp) = rel32(JMP_REL32, site, target) else {
            continue;
        };
        let (old, new) = if enable { (NOP5, jmp) } else { (jmp, NOP5) };
        patcher.make_writable(site, 5)?;
        // SAFETY: `site` is a tracepoint site of this program (the caller's contract), made writable by
        // this batch.
        if unsafe { patcher.poke5(site, old, new) } {
            done += 1;
        }
    }
    Ok(done)
}
