//! Holding a started program with ptrace until the eBPF backend has loaded its unwind tables: the
//! session's thread takes the program as its tracee while its caller still holds it before `execve`
//! ([`seize`], with `PTRACE_O_TRACEEXEC`), so it stops right after the exec; a breakpoint on its entry point (`AT_ENTRY`) stops it again once the dynamic loader has mapped every
//! library it needs; then it is let go (`PTRACE_DETACH`). What runs before the entry point (the
//! loader) runs with the tables of the executable, the loader and the vDSO, loaded at the first stop.
//!
//! What it is not for: attaching to running processes (`-p` reads their maps while they run) or
//! libraries loaded later (`dlopen`: the side-band MMAP2 records).

use crate::ProfileError;

/// `AT_ENTRY` in the auxiliary vector: the program's entry point.
const AT_ENTRY: u64 = 9;

fn sys_err(what: &str) -> ProfileError {
    ProfileError::sys(what.to_string())
}

/// Makes this thread the tracer of `pid`, held before its `execve` by whoever started it, so that
/// its exec stops it ([`hold_until_entry`] takes it from there). The thread that seizes must be the
/// one that waits: ptrace stops are reported to the tracer.
pub(crate) fn seize(pid: u32) -> Result<(), ProfileError> {
    // SAFETY: PTRACE_SEIZE of our own child, with an option word; no memory is passed.
    let r = unsafe {
        libc::ptrace(
            libc::PTRACE_SEIZE,
            pid as libc::pid_t,
            0,
            libc::PTRACE_O_TRACEEXEC as libc::c_long,
        )
    };
    if r != 0 {
        return Err(sys_err(
            "ptrace(PTRACE_SEIZE) of the program held before its exec",
        ));
    }
    Ok(())
}

/// What a traced child did.
enum Stop {
    /// It stopped with this signal.
    Signal(i32),
    /// It ended: its exit code (128 + signal when killed by one).
    Ended(i32),
}

/// Waits for traced child `pid` to stop or end.
fn wait_stop(pid: i32) -> Result<Stop, ProfileError> {
    let mut status = 0;
    // SAFETY: waiting for our own child.
    if unsafe { libc::waitpid(pid, &mut status, 0) } != pid {
        return Err(sys_err("waitpid on the program held at its start"));
    }
    Ok(if libc::WIFSTOPPED(status) {
        Stop::Signal(libc::WSTOPSIG(status))
    } else if libc::WIFSIGNALED(status) {
        Stop::Ended(128 + libc::WTERMSIG(status))
    } else {
        Stop::Ended(libc::WEXITSTATUS(status))
    })
}

/// The entry point of process `pid`, from its auxiliary vector.
fn entry_point(pid: i32) -> Option<u64> {
    let auxv = std::fs::read(format!("/proc/{pid}/auxv")).ok()?;
    auxv.chunks_exact(16).find_map(|pair| {
        let key = u64::from_ne_bytes(pair[..8].try_into().ok()?);
        let value = u64::from_ne_bytes(pair[8..].try_into().ok()?);
        (key == AT_ENTRY).then_some(value)
    })
}

/// Holds child `pid`, [`seize`]d and then released, at its entry point: calls `loaded(pid)` at the exec
/// stop and again at the entry point, then lets the program go. Returns the program's exit code
/// when it ended meanwhile (it was reaped here).
pub(crate) fn hold_until_entry(
    pid: i32,
    mut loaded: impl FnMut(u32),
) -> Result<Option<i32>, ProfileError> {
    match wait_stop(pid)? {
        // The exec's event stop (`SIGTRAP | PTRACE_EVENT_EXEC << 8`).
        Stop::Signal(libc::SIGTRAP) => {}
        Stop::Signal(_) => {
            // Not the exec's stop: let it go untouched.
            // SAFETY: detaching our stopped tracee.
            unsafe { libc::ptrace(libc::PTRACE_DETACH, pid, 0, 0) };
            return Ok(None);
        }
        Stop::Ended(code) => return Ok(Some(code)),
    }
    loaded(pid as u32);
    let detach = |sig: i32| {
        // SAFETY: detaching our stopped tracee.
        unsafe { libc::ptrace(libc::PTRACE_DETACH, pid, 0, sig as libc::c_long) };
    };
    let Some(entry) = entry_point(pid) else {
        detach(0);
        return Ok(None);
    };
    // SAFETY: reading a word of the stopped tracee's memory; errors are reported through errno.
    let original = unsafe {
        *libc::__errno_location() = 0;
        libc::ptrace(libc::PTRACE_PEEKTEXT, pid, entry, 0)
    };
    // SAFETY: reading errno.
    if unsafe { *libc::__errno_location() } != 0 {
        detach(0);
        return Ok(None);
    }
    let trap = (original & !0xff) | 0xcc; // int3
                                          // SAFETY: writing a word of the stopped tracee's text (ptrace may write read-only pages).
    if unsafe { libc::ptrace(libc::PTRACE_POKETEXT, pid, entry, trap) } != 0 {
        detach(0);
        return Ok(None);
    }
    let mut sig = 0;
    loop {
        // SAFETY: resuming our stopped tracee, delivering the signal it stopped with.
        unsafe { libc::ptrace(libc::PTRACE_CONT, pid, 0, sig as libc::c_long) };
        match wait_stop(pid)? {
            Stop::Signal(libc::SIGTRAP) => break,
            // A signal for the program (from the loader, or the user): pass it on.
            Stop::Signal(other) => sig = other,
            Stop::Ended(code) => return Ok(Some(code)),
        }
    }
    // SAFETY: the tracee is stopped after the int3: restore the word and step back onto it.
    unsafe {
        libc::ptrace(libc::PTRACE_POKETEXT, pid, entry, original);
        let mut regs: libc::user_regs_struct = std::mem::zeroed();
        if libc::ptrace(libc::PTRACE_GETREGS, pid, 0, &mut regs) == 0 && regs.rip == entry + 1 {
            regs.rip = entry;
            libc::ptrace(libc::PTRACE_SETREGS, pid, 0, &regs);
        }
    }
    loaded(pid as u32);
    detach(0);
    Ok(None)
}
