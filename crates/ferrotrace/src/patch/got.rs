//! Rewriting one GOT slot of this process while other threads call through it: how an attached runtime
//! points the calls of `mcount`/`__fentry__` (`gcc -pg` without `-mnop-mcount`, `-Zinstrument-mcount`),
//! bound to the C library's before it came, at its own hooks, and puts them back when it stops.
//!
//! A slot is one aligned 8-byte word that threads only load (the PLT's `jmp *slot`, `call *slot(%rip)`),
//! so one atomic compare-and-exchange replaces it whole: a thread calls either the old target or the
//! new one. A slot in the RELRO segment (the `.got` of `GLOB_DAT` relocations, all of them with `-z
//! now`) is read-only once the loader is done: its page is made writable for the exchange and given its
//! protection back. Not for code (see [`crate::patch::text`]). A lazy `JUMP_SLOT` not bound yet is
//! exchanged like any other (its first call then goes to the hook, not to the loader); a thread already
//! inside the loader's binding of that very slot could still store the C library's address over the
//! hook, and those calls would then go untraced.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::arch::thread::PAGE;

/// The protection of the page holding `addr`, from `/proc/self/maps`.
fn protection(addr: u64) -> Option<libc::c_int> {
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    maps.lines().find_map(|line| {
        let (range, rest) = line.split_once(' ')?;
        let (lo, hi) = range.split_once('-')?;
        let (lo, hi) = (
            u64::from_str_radix(lo, 16).ok()?,
            u64::from_str_radix(hi, 16).ok()?,
        );
        if !(lo..hi).contains(&addr) {
            return None;
        }
        let perms = rest.as_bytes();
        let mut prot = libc::PROT_NONE;
        for (i, (flag, bit)) in [
            (b'r', libc::PROT_READ),
            (b'w', libc::PROT_WRITE),
            (b'x', libc::PROT_EXEC),
        ]
        .into_iter()
        .enumerate()
        {
            if perms.get(i) == Some(&flag) {
                prot |= bit;
            }
        }
        Some(prot)
    })
}

/// Replaces the 8-byte slot at `slot` with `new` if it holds `old`. Returns what it held.
///
/// # Safety
/// `slot` is an aligned GOT slot of a loaded object of this process (from its dynamic relocations),
/// which stays mapped.
pub unsafe fn exchange(slot: u64, old: u64, new: u64) -> Result<u64, String> {
    if !slot.is_multiple_of(8) {
        return Err(format!("the GOT slot at {slot:#x} is not aligned"));
    }
    let prot =
        protection(slot).ok_or_else(|| format!("no mapping holds the GOT slot at {slot:#x}"))?;
    let page = (slot & !(PAGE as u64 - 1)) as *mut libc::c_void;
    let read_only = prot & libc::PROT_WRITE == 0;
    // SAFETY: the page holding the slot (mapped: the caller's contract), made writable for the
    // exchange only, its protection restored right after.
    if read_only && unsafe { libc::mprotect(page, PAGE, prot | libc::PROT_WRITE) } != 0 {
        return Err(format!(
            "cannot make the GOT slot at {slot:#x} writable: {}",
            std::io::Error::last_os_error()
        ));
    }
    // SAFETY: an aligned, mapped, now writable word (the caller's contract and the mprotect above),
    // which other threads only load.
    let was = unsafe { &*(slot as *const AtomicU64) }
        .compare_exchange(old, new, Ordering::SeqCst, Ordering::SeqCst)
        .unwrap_or_else(|held| held);
    if read_only {
        // SAFETY: as above: the protection it had.
        unsafe { libc::mprotect(page, PAGE, prot) };
    }
    Ok(was)
}

/// What the slot at `slot` holds now.
///
/// # Safety
/// As for [`exchange`].
pub unsafe fn read(slot: u64) -> u64 {
    // SAFETY: an aligned, mapped word (the caller's contract).
    unsafe { &*(slot as *const AtomicU64) }.load(Ordering::SeqCst)
}
