//! The one place that changes code: XRay sleds, tracepoint sites and patchable mcount NOPs are all
//! patched through a [`Patcher`], while other threads run through them.
//!
//! The recipe (from the Linux kernel's `text_poke` and compiler-rt's XRay patching):
//!
//! * one global text lock serialises every change to code made by this runtime: a rescan patching a
//!   library's sleds and `tracepoints::enable` poking a site on the same page must not interleave (one
//!   restoring R-X in the middle of the other's write would fault it);
//! * pages are made writable in place with `mprotect` (RWX, since they may hold running code) and
//!   restored to R-X when the batch is done — never replaced by an anonymous copy (`mremap`), which would
//!   silently detach uprobes and USDT probes from the page;
//! * each instruction changes in a way a thread fetching it concurrently sees whole: see
//!   [`Patcher::poke5`] and [`Patcher::write_then_flip2`];
//! * `membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED_SYNC_CORE)` after the batch, so that every core
//!   serialises its instruction stream before it runs the new code (cross-modifying code).

use std::sync::atomic::{AtomicU16, AtomicU64, Ordering};
use std::sync::MutexGuard;

use crate::arch::patch::{store2, JMP_SELF};
use crate::arch::thread::PAGE;
use crate::state::PROCESS;

const MEMBARRIER_REGISTER_SYNC_CORE: libc::c_long = 1 << 6;
const MEMBARRIER_SYNC_CORE: libc::c_long = 1 << 5;

/// Registers the process for [`membarrier_sync_core`]. The kernel waits for a grace period (~10 ms in
/// this VM) when the process already has more than one thread, and not otherwise: start-up calls this
/// first, before it starts the collector thread.
pub fn register_membarrier() -> bool {
    // Outside `crate::state`: the kernel's registration lasts the process, whatever recordings come.
    static REGISTERED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *REGISTERED.get_or_init(|| membarrier(MEMBARRIER_REGISTER_SYNC_CORE))
}

fn membarrier(command: libc::c_long) -> bool {
    // SAFETY: a plain system call without pointers.
    unsafe { libc::syscall(libc::SYS_membarrier, command, 0) == 0 }
}

/// Makes every core serialise its instruction stream (or, where the kernel lacks the command, a full
/// fence: the kernel's own serialisation on return from the system calls made is then what is left).
pub fn membarrier_sync_core() {
    // (A forked child keeps its parent's registration with the address space it copies.)
    if !(register_membarrier() && membarrier(MEMBARRIER_SYNC_CORE)) {
        core::sync::atomic::fence(Ordering::SeqCst);
    }
}

/// A batch of code changes: holds the text lock; on drop, restores R-X on every page it made writable
/// and runs the SYNC_CORE membarrier.
pub struct Patcher {
    _lock: MutexGuard<'static, ()>,
    writable: Vec<(usize, usize)>,
}

impl Patcher {
    /// Takes the text lock (waiting for any other batch to finish).
    pub fn new() -> Patcher {
        Patcher {
            _lock: PROCESS.text_lock.lock().unwrap_or_else(|e| e.into_inner()),
            writable: Vec::new(),
        }
    }

    /// Makes the pages holding `[addr, addr + len)` writable until the batch ends.
    pub fn make_writable(&mut self, addr: usize, len: usize) -> Result<(), String> {
        let first = addr & !(PAGE - 1);
        let last = (addr + len + PAGE - 1) & !(PAGE - 1);
        if self.writable.iter().any(|&(a, b)| a <= first && last <= b) {
            return Ok(());
        }
        // SAFETY: changes the protection of pages of code of this process; they stay mapped.
        let rc = unsafe {
            libc::mprotect(
                first as *mut libc::c_void,
                last - first,
                libc::PROT_READ | libc::PROT_WRITE | libc::PROT_EXEC,
            )
        };
        if rc != 0 {
            return Err(format!(
                "cannot make the code at {addr:#x} writable: {}",
                std::io::Error::last_os_error()
            ));
        }
        self.writable.push((first, last));
        Ok(())
    }

    /// Writes `new` over the 5 bytes at `site`, which must hold `old` (else nothing is done and `false`
    /// is returned; `true` if it already holds `new`). When the 5 bytes lie in one aligned 8-byte word,
    /// one atomic 8-byte store replaces them; otherwise three steps: the first two bytes become `eb fe`
    /// (a jump to itself: a thread arriving spins there), bytes 2..5 are written, then the first two
    /// bytes, with a SYNC_CORE membarrier after each step.
    ///
    /// # Safety
    /// `site` is an instruction boundary of this process's code whose page was made writable by this
    /// batch, and nothing else but a [`Patcher`] changes those bytes.
    pub unsafe fn poke5(&self, site: usize, old: [u8; 5], new: [u8; 5]) -> bool {
        // SAFETY: the site's 5 bytes are mapped code (the caller's contract).
        let cur = unsafe { core::ptr::read_volatile(site as *const [u8; 5]) };
        if cur == new {
            return true;
        }
        if cur != old {
            return false;
        }
        let word = site & !7;
        if site + 5 <= word + 8 {
            // SAFETY: the aligned 8-byte word holding the site lies in the same writable page (a page is
            // a multiple of 8 bytes); other code in it is rewritten with its own bytes by the exchange.
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
            // SAFETY: the site's bytes are writable (the caller's contract); a thread arriving between
            // the steps spins on `eb fe` until the last one.
            unsafe { store2(site, JMP_SELF) };
            membarrier_sync_core();
            for (i, b) in new.iter().enumerate().skip(2) {
                // SAFETY: as above.
                unsafe { core::ptr::write_volatile((site + i) as *mut u8, *b) };
            }
            membarrier_sync_core();
            // SAFETY: as above.
            unsafe { store2(site, [new[0], new[1]]) };
        }
        true
    }

    /// Writes `bytes` at the 2-byte aligned `site` so that a thread running through sees either the old
    /// first instruction (a short jump over the rest, as in an unpatched XRay sled) or all of `bytes`:
    /// bytes 2.. first, then the first two with one atomic 16-bit store.
    ///
    /// # Safety
    /// `site` is 2-byte aligned code of this process whose page was made writable by this batch, whose
    /// first two bytes jump over the others until this store.
    pub unsafe fn write_then_flip2(&self, site: usize, bytes: &[u8]) {
        let p = site as *mut u8;
        for (i, b) in bytes.iter().enumerate().skip(2) {
            // SAFETY: writable code (the caller's contract); threads still jump over these bytes.
            unsafe { core::ptr::write_volatile(p.add(i), *b) };
        }
        core::sync::atomic::fence(Ordering::SeqCst);
        // SAFETY: 2-byte aligned and writable (the caller's contract).
        unsafe { &*(p as *const AtomicU16) }
            .store(u16::from_le_bytes([bytes[0], bytes[1]]), Ordering::SeqCst);
    }
}

impl Default for Patcher {
    fn default() -> Self {
        Patcher::new()
    }
}

impl Drop for Patcher {
    fn drop(&mut self) {
        for &(first, last) in &self.writable {
            // SAFETY: restoring the protection of pages this batch made writable.
            unsafe {
                libc::mprotect(
                    first as *mut libc::c_void,
                    last - first,
                    libc::PROT_READ | libc::PROT_EXEC,
                )
            };
        }
        if !self.writable.is_empty() {
            membarrier_sync_core();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arch::patch::{rel32, NOP5};

    /// One page of code patched from two threads at once the two ways the runtime patches: 5-byte
    /// sites (tracepoints, NOP-mcount) and XRay-style sleds, each thread in its own batches, while a
    /// third thread runs the code. Without the shared text lock one batch's R-X restore lands in the
    /// middle of the other's writes and the writer faults (SIGSEGV fails the test binary).
    #[test]
    fn sleds_and_sites_on_one_page_patched_concurrently() {
        // SAFETY: a fresh anonymous page we own.
        let page = unsafe {
            libc::mmap(
                core::ptr::null_mut(),
                PAGE,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        } as usize;
        assert_ne!(page as *mut libc::c_void, libc::MAP_FAILED);
        // Function A at 0: `jmp +9; 9-byte NOP` (an unpatched entry sled) then `ret`. Function B at 64:
        // the 5-byte NOP site then `ret`; enabled it jumps to 96: `ret`.
        let mut code = [0xccu8; 128];
        code[0..2].copy_from_slice(&[0xeb, 0x09]);
        code[2..11].copy_from_slice(&[0x66, 0x0f, 0x1f, 0x84, 0, 0, 0, 0, 0]);
        code[11] = 0xc3;
        code[64..69].copy_from_slice(&NOP5);
        code[69] = 0xc3;
        code[96] = 0xc3;
        // SAFETY: our page, then made R-X.
        unsafe {
            core::ptr::copy_nonoverlapping(code.as_ptr(), page as *mut u8, code.len());
            libc::mprotect(
                page as *mut libc::c_void,
                PAGE,
                libc::PROT_READ | libc::PROT_EXEC,
            );
        }
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let runner = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                // SAFETY: both functions are valid code in every state the patchers leave them in.
                let (a, b): (extern "C" fn(), extern "C" fn()) = unsafe {
                    (
                        core::mem::transmute::<usize, extern "C" fn()>(page),
                        core::mem::transmute::<usize, extern "C" fn()>(page + 64),
                    )
                };
                while !stop.load(Ordering::Relaxed) {
                    a();
                    b();
                }
            })
        };
        let sites = std::thread::spawn(move || {
            let jmp = rel32(0xe9, page + 64, page + 96).unwrap();
            for i in 0..2000 {
                let (old, new) = if i % 2 == 0 { (NOP5, jmp) } else { (jmp, NOP5) };
                let mut p = Patcher::new();
                p.make_writable(page + 64, 5).unwrap();
                // SAFETY: the site of function B, made writable by this batch.
                assert!(unsafe { p.poke5(page + 64, old, new) });
            }
        });
        for i in 0..2000 {
            let mut p = Patcher::new();
            p.make_writable(page, 11).unwrap();
            // An "unpatched" and a "patched" sled that both fall through to the `ret`: the second is a
            // 2-byte NOP then the rest of the 11 bytes as NOPs.
            let bytes: [u8; 11] = if i % 2 == 0 {
                [0x66, 0x90, 0x66, 0x0f, 0x1f, 0x84, 0, 0, 0, 0, 0]
            } else {
                [0xeb, 0x09, 0x66, 0x0f, 0x1f, 0x84, 0, 0, 0, 0, 0]
            };
            // SAFETY: function A's sled, 2-byte aligned, made writable by this batch.
            unsafe { p.write_then_flip2(page, &bytes) };
        }
        sites.join().expect("site patcher");
        stop.store(true, Ordering::Relaxed);
        runner.join().expect("runner");
    }
}
