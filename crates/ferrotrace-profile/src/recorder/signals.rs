//! Ctrl-C and SIGTERM while recording: a flag the loop reads, the previous handlers put back after.

use std::sync::atomic::{AtomicBool, Ordering};

pub(crate) static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

/// Installs SIGINT/SIGTERM handlers that only set a flag; restores the old ones on drop.
pub struct SignalGuard {
    old: Vec<(libc::c_int, libc::sigaction)>,
}

impl SignalGuard {
    pub(crate) fn install() -> SignalGuard {
        STOP.store(false, Ordering::SeqCst);
        let mut old = Vec::new();
        for sig in [libc::SIGINT, libc::SIGTERM] {
            // SAFETY: plain sigaction with a handler that only stores to an atomic.
            unsafe {
                let mut sa: libc::sigaction = std::mem::zeroed();
                sa.sa_sigaction = on_signal as *const () as usize;
                libc::sigemptyset(&mut sa.sa_mask);
                let mut prev: libc::sigaction = std::mem::zeroed();
                if libc::sigaction(sig, &sa, &mut prev) == 0 {
                    old.push((sig, prev));
                }
            }
        }
        SignalGuard { old }
    }
}

impl Drop for SignalGuard {
    fn drop(&mut self) {
        for (sig, prev) in &self.old {
            // SAFETY: restoring the previous disposition.
            unsafe { libc::sigaction(*sig, prev, std::ptr::null_mut()) };
        }
    }
}
