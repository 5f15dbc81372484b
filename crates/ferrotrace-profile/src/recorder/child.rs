//! The program a session ends and reaps: `profile`'s, which `ferrotrace_launch` started and held
//! before its `execve` and the session released ([`crate::profile_held`]). The session waits for it
//! to learn its exit code (the trace's End says it) and ends it when the duration passes or Ctrl-C
//! stops the recording.

/// A released program of ours, not yet reaped or reaped here.
pub(super) struct Child {
    /// Its process id.
    pub(super) pid: i32,
    /// Its exit code once reaped (`None`: not yet).
    pub(super) reaped: Option<i32>,
}

impl Child {
    pub(super) fn new(pid: u32) -> Child {
        Child {
            pid: pid as i32,
            reaped: None,
        }
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

impl Drop for Child {
    fn drop(&mut self) {
        // A session that failed after the release leaves no zombie: the program runs to its end.
        self.wait(true);
    }
}
