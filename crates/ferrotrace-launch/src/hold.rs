//! Holding a program launch starts before its `execve`, until whoever opens its events releases it.
//!
//! The forked child writes its pid to one pipe and waits for a byte on another ([`HoldFds`], installed
//! by [`crate::start::start`] for `record --sample` and by [`crate::profile()`] for `profile`). End of
//! file instead of the byte (the sampler gave up) makes the child give up too: a program is never run
//! unsampled. The holder reads the pid, opens the events, and releases it.

use std::io::{Read, Write};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::process::Command;

/// The child's ends of the hold (raw descriptors: [`crate::start::Options`] is `Copy`).
#[derive(Clone, Copy, Debug)]
pub struct HoldFds {
    /// Where the child writes its pid.
    pid_w: RawFd,
    /// Where it waits for the release (one byte; end of file: do not run).
    go_r: RawFd,
    /// The holder's ends, which the child closes first (its copy of the release end would keep it
    /// waiting forever when the holder gives up).
    holder_ends: [RawFd; 2],
}

impl HoldFds {
    /// Makes `cmd`'s child announce its pid and wait for the release before `execve`.
    pub(crate) fn install(self, cmd: &mut Command) {
        use std::os::unix::process::CommandExt;
        // SAFETY: the closure runs in the forked child before exec and only calls close, getpid,
        // write and read (async-signal-safe) on descriptors made before the fork.
        unsafe {
            cmd.pre_exec(move || {
                for fd in self.holder_ends {
                    libc::close(fd);
                }
                let pid = libc::getpid().to_le_bytes();
                libc::write(self.pid_w, pid.as_ptr().cast(), pid.len());
                let mut go = 0u8;
                loop {
                    let n = libc::read(self.go_r, (&mut go as *mut u8).cast(), 1);
                    if n == 1 {
                        return Ok(());
                    }
                    if n < 0 && *libc::__errno_location() == libc::EINTR {
                        continue;
                    }
                    // The holder could not start: the program must not run unsampled.
                    return Err(std::io::Error::from_raw_os_error(libc::ECANCELED));
                }
            })
        };
    }
}

/// The holder's side of a hold: reads the child's pid, writes its release.
pub(crate) struct Hold {
    pid_r: std::fs::File,
    go_w: std::fs::File,
}

/// The child's side of a hold, kept open by whoever spawns it until the spawn has returned (then
/// dropped: our copies would keep [`Hold::pid`] waiting when the program never forked).
pub(crate) struct ChildEnds {
    pid_w: OwnedFd,
    go_r: OwnedFd,
}

/// A pipe whose two ends close on exec (the program keeps none of them).
fn pipe() -> std::io::Result<(OwnedFd, OwnedFd)> {
    let (r, w) = std::io::pipe()?;
    Ok((r.into(), w.into()))
}

impl Hold {
    /// Makes the pipes.
    pub(crate) fn new() -> std::io::Result<(Hold, ChildEnds)> {
        let (pid_r, pid_w) = pipe()?;
        let (go_r, go_w) = pipe()?;
        Ok((
            Hold {
                pid_r: pid_r.into(),
                go_w: go_w.into(),
            },
            ChildEnds { pid_w, go_r },
        ))
    }

    /// Waits for the held child's pid; `None` when it was never forked (or gave up).
    pub(crate) fn pid(&self) -> Option<u32> {
        let mut pid = [0u8; 4];
        (&self.pid_r).read_exact(&mut pid).ok()?;
        Some(u32::from_le_bytes(pid))
    }

    /// Lets the held child `execve`.
    pub(crate) fn release(mut self) -> std::io::Result<()> {
        self.go_w.write_all(&[1])
    }
}

impl ChildEnds {
    /// What the spawn installs in the child ([`HoldFds::install`]), which closes `holder`'s ends.
    pub(crate) fn fds(&self, holder: &Hold) -> HoldFds {
        HoldFds {
            pid_w: self.pid_w.as_raw_fd(),
            go_r: self.go_r.as_raw_fd(),
            holder_ends: [holder.pid_r.as_raw_fd(), holder.go_w.as_raw_fd()],
        }
    }
}
