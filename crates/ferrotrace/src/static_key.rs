//! Patching tracepoint sites while other threads run through them.
//!
//! A disabled site is the 5-byte NOP `0f 1f 44 00 00`; an enabled one is `e9 rel32` (`jmp` to the
//! site's out-of-line block). The recipe (from the Linux kernel's static keys and `text_poke`):
//!
//! * one global text lock serialises all patching in the process;
//! * the page(s) are made writable in place with `mprotect` (RWX, since they may hold running code) and
//!   restored to R-X afterwards — never replaced by an anonymous copy (`mremap`), which would silently
//!   detach uprobes and USDT probes from the page;
//! * when the 5 bytes lie inside one aligned 8-byte word, one atomic 8-byte store replaces them, so a
//!   thread fetching the site sees either the whole old or the whole new instruction;
//! * otherwise three steps: the first two bytes become `eb fe` (a jump to itself: a thread arriving
//!   spins there), then bytes 2..5 are written, then the first two bytes; each step is followed by
//!   `membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED_SYNC_CORE)` so that every core serialises its
//!   instruction stream before it can see the next step;
//! * a final SYNC_CORE membarrier after every batch.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// The disabled form of a site.
pub const NOP5: [u8; 5] = [0x0f, 0x1f, 0x44, 0x00, 0x00];

/// Serialises every change to code made by this runtime.
pub static TEXT_LOCK: Mutex<()> = Mutex::new(());

const PAGE: usize = 4096;

/// The enabled form of the site at `site` jumping to `target`.
pub fn jmp5(site: usize, target: usize) -> Option<[u8; 5]> {
    let rel = (target as i64).wrapping_sub(site as i64 + 5);
    let rel = i32::try_from(rel).ok()?;
    let r = rel.to_le_bytes();
    Some([0xe9, r[0], r[1], r[2], r[3]])
}

fn membarrier_sync_core() {
    const REGISTER_SYNC_CORE: libc::c_long = 1 << 6;
    const SYNC_CORE: libc::c_long = 1 << 5;
    static REGISTERED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    // SAFETY: plain syscalls without pointers.
    let ok = *REGISTERED
        .get_or_init(|| unsafe { libc::syscall(libc::SYS_membarrier, REGISTER_SYNC_CORE, 0) } == 0);
    if ok {
        // SAFETY: as above.
        unsafe { libc::syscall(libc::SYS_membarrier, SYNC_CORE, 0) };
    } else {
        core::sync::atomic::fence(Ordering::SeqCst);
    }
}

/// Makes `[addr, addr+len)` writable (or executable-only again) in place.
fn protect(addr: usize, len: usize, writable: bool) -> Result<(), String> {
    let first = addr & !(PAGE - 1);
    let last = (addr + len + PAGE - 1) & !(PAGE - 1);
    let prot = if writable {
        libc::PROT_READ | libc::PROT_WRITE | libc::PROT_EXEC
    } else {
        libc::PROT_READ | libc::PROT_EXEC
    };
    // SAFETY: changes the protection of pages of our own text; they stay mapped.
    let rc = unsafe { libc::mprotect(first as *mut libc::c_void, last - first, prot) };
    if rc != 0 {
        return Err(format!(
            "mprotect of code at {addr:#x}: {}",
            std::io::Error::last_os_error()
        ));
    }
    Ok(())
}

/// Stores 2 bytes with one instruction (atomic for a naturally aligned or in-cache-line store on x86).
///
/// # Safety
/// `p` must be valid for writing 2 bytes.
unsafe fn store2(p: usize, b: [u8; 2]) {
    let v = u16::from_le_bytes(b);
    // SAFETY: the caller guarantees `p..p + 2` is writable.
    unsafe {
        core::arch::asm!("mov word ptr [{p}], {v:x}", p = in(reg) p, v = in(reg) v, options(nostack, preserves_flags));
    }
}

/// Writes `new` over the 5 bytes at `site`, which must currently hold `old` (else nothing is done and
/// `false` is returned).
///
/// # Safety
/// `site` is a tracepoint site of this program whose page is writable, and the caller holds
/// [`TEXT_LOCK`].
unsafe fn poke(site: usize, old: [u8; 5], new: [u8; 5]) -> bool {
    // SAFETY: the site's 5 bytes are mapped (the caller's contract).
    let cur = unsafe { core::ptr::read_volatile(site as *const [u8; 5]) };
    if cur == new {
        return true;
    }
    if cur != old {
        return false;
    }
    let word = site & !7;
    if site + 5 <= word + 8 {
        // SAFETY: the aligned 8-byte word holding the site lies in the same writable page (a page is a
        // multiple of 8 bytes); other code in it is rewritten with its own bytes by the exchange.
        let a = unsafe { &*(word as *const AtomicU64) };
        let mut w = a.load(Ordering::SeqCst);
        loop {
            let mut bytes = w.to_le_bytes();
            let off = site - word;
            bytes[off..off + 5].copy_from_slice(&new);
            match a.compare_exchange(
                w,
                u64::from_le_bytes(bytes),
                Ordering::SeqCst,
                Ordering::SeqCst,
            ) {
                Ok(_) => break,
                Err(x) => w = x,
            }
        }
    } else {
        // SAFETY: the site's bytes are writable (the caller's contract); `eb fe` parks a thread that
        // arrives meanwhile at the site until the last store.
        unsafe {
            store2(site, [0xeb, 0xfe]);
            membarrier_sync_core();
            for (i, b) in new.iter().enumerate().skip(2) {
                core::ptr::write_volatile((site + i) as *mut u8, *b);
            }
            membarrier_sync_core();
            store2(site, [new[0], new[1]]);
        }
    }
    true
}

/// Sets each site `(address, target)` to enabled (`jmp target`) or disabled (NOP). Returns how many
/// sites now have the requested form.
///
/// # Safety
/// Every pair is a site and its target from this program's site table ([`crate::tracepoint::sites`]):
/// anything else would be overwritten with a jump.
pub unsafe fn set_sites(sites: &[(usize, usize)], enable: bool) -> Result<usize, String> {
    if sites.is_empty() {
        return Ok(0);
    }
    let _guard = TEXT_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let mut done = 0;
    for &(site, target) in sites {
        let Some(jmp) = jmp5(site, target) else {
            continue;
        };
        let (old, new) = if enable { (NOP5, jmp) } else { (jmp, NOP5) };
        protect(site, 5, true)?;
        // SAFETY: `site` is a tracepoint site of this program (the caller's contract), its page was made
        // writable above, and TEXT_LOCK is held.
        if unsafe { poke(site, old, new) } {
            done += 1;
        }
        protect(site, 5, false)?;
    }
    membarrier_sync_core();
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jmp_encoding() {
        assert_eq!(jmp5(0x1000, 0x1005), Some([0xe9, 0, 0, 0, 0]));
        assert_eq!(jmp5(0x1000, 0x1000), Some([0xe9, 0xfb, 0xff, 0xff, 0xff]));
        assert_eq!(jmp5(0, 1 << 40), None);
    }
}
