//! The program `profile` starts itself: forked and blocked before its `execvp` until the events are
//! open, then released (and, for the eBPF backend, held again at its entry point: [`crate::hold`]).

use std::ffi::{CString, OsString};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use crate::ProfileError;

/// A child forked and blocked before `execvp` until released.
pub(super) struct BlockedChild {
    /// Its process id.
    pub(super) pid: i32,
    go: Option<OwnedFd>,
    exec_err: OwnedFd,
    /// Its exit code once reaped (`None`: not yet).
    pub(super) reaped: Option<i32>,
}

fn pipe_cloexec() -> Result<(OwnedFd, OwnedFd), ProfileError> {
    let mut fds = [0; 2];
    // SAFETY: fds is a valid 2-element array.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(ProfileError::sys("pipe2"));
    }
    // SAFETY: both fds were just created and are owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

impl BlockedChild {
    /// Forks the child; with `traced` it asks to be traced (`PTRACE_TRACEME`) so that it stops right
    /// after its exec ([`crate::hold`]).
    pub(super) fn spawn(
        file: &Path,
        argv: &[OsString],
        traced: bool,
    ) -> Result<BlockedChild, ProfileError> {
        let program = file.display().to_string();
        let file = CString::new(file.as_os_str().as_bytes()).map_err(|_| {
            ProfileError::BadArgument("the program's path contains a NUL byte".into())
        })?;
        let cargs: Vec<CString> = argv
            .iter()
            .map(|a| CString::new(a.as_bytes()))
            .collect::<Result<_, _>>()
            .map_err(|_| ProfileError::BadArgument("an argument contains a NUL byte".into()))?;
        if cargs.is_empty() {
            return Err(ProfileError::BadArgument("no program given".into()));
        }
        let mut ptrs: Vec<*const libc::c_char> = cargs.iter().map(|c| c.as_ptr()).collect();
        ptrs.push(std::ptr::null());
        let (go_r, go_w) = pipe_cloexec()?;
        let (err_r, err_w) = pipe_cloexec()?;
        // SAFETY: after fork the child only calls async-signal-safe functions (read, execv, write,
        // _exit) on memory prepared before the fork.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            return Err(ProfileError::Spawn {
                program,
                source: std::io::Error::last_os_error(),
            });
        }
        if pid == 0 {
            // SAFETY: the forked child, which only calls async-signal-safe functions (above) on
            // descriptors and strings prepared before the fork, and ends in exec or _exit.
            unsafe {
                let mut b = 0u8;
                libc::read(go_r.as_raw_fd(), &mut b as *mut u8 as *mut libc::c_void, 1);
                if traced {
                    libc::ptrace(libc::PTRACE_TRACEME, 0, 0, 0);
                }
                libc::execv(file.as_ptr(), ptrs.as_ptr());
                let e = *libc::__errno_location();
                let eb = e.to_le_bytes();
                libc::write(err_w.as_raw_fd(), eb.as_ptr() as *const libc::c_void, 4);
                libc::_exit(127);
            }
        }
        drop(go_r);
        drop(err_w);
        Ok(BlockedChild {
            pid,
            go: Some(go_w),
            exec_err: err_r,
            reaped: None,
        })
    }

    /// Lets the child exec; reports an exec failure.
    pub(super) fn release(&mut self, program: &str) -> Result<(), ProfileError> {
        if let Some(go) = self.go.take() {
            let b = 1u8;
            // SAFETY: writing one byte to our pipe.
            unsafe { libc::write(go.as_raw_fd(), &b as *const u8 as *const libc::c_void, 1) };
        }
        let mut eb = [0u8; 4];
        // SAFETY: reading up to 4 bytes into eb; EOF means exec succeeded (CLOEXEC closed the pipe).
        let n = unsafe {
            libc::read(
                self.exec_err.as_raw_fd(),
                eb.as_mut_ptr() as *mut libc::c_void,
                4,
            )
        };
        if n == 4 {
            let errno = i32::from_le_bytes(eb);
            self.wait(true);
            return Err(ProfileError::Spawn {
                program: program.into(),
                source: std::io::Error::from_raw_os_error(errno),
            });
        }
        Ok(())
    }

    /// Reaps the child; returns its exit code (128+signal for a signal) once it has exited.
    pub(super) fn wait(&mut self, block: bool) -> Option<i32> {
        if self.reaped.is_some() {
            return self.reaped;
        }
        let mut status = 0;
        // SAFETY: waiting for our own child.
        let r =
            unsafe { libc::waitpid(self.pid, &mut status, if block { 0 } else { libc::WNOHANG }) };
        if r == self.pid {
            let code = if libc::WIFEXITED(status) {
                libc::WEXITSTATUS(status)
            } else if libc::WIFSIGNALED(status) {
                128 + libc::WTERMSIG(status)
            } else {
                return None;
            };
            self.reaped = Some(code);
        } else if r < 0 {
            self.reaped = Some(-1);
        }
        self.reaped
    }

    pub(super) fn kill(&mut self, sig: i32) {
        if self.reaped.is_none() {
            // SAFETY: signalling our own, not yet reaped child.
            unsafe { libc::kill(self.pid, sig) };
        }
    }
}

impl Drop for BlockedChild {
    fn drop(&mut self) {
        if self.reaped.is_none() {
            if self.go.is_some() {
                self.kill(libc::SIGKILL);
            }
            self.wait(true);
        }
    }
}
