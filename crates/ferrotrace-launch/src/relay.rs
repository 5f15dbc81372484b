//! Passing signals sent to `ferrotrace record` on to the program it runs, once.
//!
//! The program runs in `record`'s process group, as a shell runs a pipeline: the terminal's Ctrl-C, a
//! `timeout`, a closed terminal's SIGHUP or a service manager that signals a whole group reach both. A
//! signal sent to `record` alone must reach the program; one the program gets anyway must not reach it
//! twice: a program that shuts down gracefully on its first SIGTERM and at once on the second would
//! behave differently under the tracer. A signal is not passed on when the kernel sent it (a terminal
//! signals its whole foreground process group), when the program itself did, or when the program's
//! runtime says it arrived there too: the runtime notes each arrival of these signals in the memory it
//! shares with `record` (`ferrotrace_core::shared::Signals`), through its own handlers and, in programs
//! it is preloaded into, through the one it puts in front of a handler the program installs. The relay
//! waits up to [`WAIT`] for that note, so a signal sent to `record` alone reaches the program that much
//! later. Where the runtime cannot see the arrivals (a program that links the runtime and installs its
//! own handler), the signal is passed on.
//!
//! How: the [`RELAYED`] signals are blocked in `record` before the program starts, so none can end
//! `record` (which must outlive the program to finish its trace), and unblocked again in the forked child
//! right before `exec` (`unblock_in_child`: a blocked signal stays blocked across `exec`); one thread
//! takes them with `sigwaitinfo` and passes them on through a pidfd, which names the program for as long
//! as it is not reaped (a pid could be reused after).

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::{Duration, Instant};

use crate::LaunchError;

pub use ferrotrace_core::shared::RELAYED;

/// How long the relay waits for the program's runtime to note that a signal arrived there too.
pub const WAIT: Duration = Duration::from_millis(100);

fn relayed_set() -> libc::sigset_t {
    // SAFETY: sigemptyset/sigaddset on a local set.
    unsafe {
        let mut set: libc::sigset_t = core::mem::zeroed();
        libc::sigemptyset(&mut set);
        for sig in RELAYED {
            libc::sigaddset(&mut set, sig);
        }
        set
    }
}

/// Blocks the [`RELAYED`] signals in the calling thread (and every thread it creates after). Call before
/// starting the program and the relay.
pub(crate) fn block() {
    let set = relayed_set();
    // SAFETY: pthread_sigmask with a valid set.
    unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, core::ptr::null_mut()) };
}

/// Makes the program start with the [`RELAYED`] signals unblocked (a mask is inherited across `fork`
/// and `exec`).
pub(crate) fn unblock_in_child(cmd: &mut std::process::Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: the closure runs in the forked child before exec and only calls pthread_sigmask, which is
    // async-signal-safe.
    unsafe {
        cmd.pre_exec(|| {
            let set = relayed_set();
            libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, core::ptr::null_mut());
            Ok(())
        })
    };
}

/// Whether a signal with this origin reached the program without us: sent by the kernel (a terminal
/// signals its foreground process group) or by the program.
fn reached_the_program_anyway(info: &libc::siginfo_t, child: libc::pid_t) -> bool {
    let user_sent = matches!(
        info.si_code,
        libc::SI_USER | libc::SI_QUEUE | libc::SI_TKILL
    );
    // SAFETY: si_pid is valid for user-sent signals.
    !user_sent || unsafe { info.si_pid() } == child
}

/// Whether the program's runtime noted the arrival of `sig` close to `received` (CLOCK_MONOTONIC ns,
/// when it reached us), waiting up to [`WAIT`] for it. False when the runtime does not see this
/// signal's arrivals (then it is passed on).
fn arrived_there_too(pool: Option<&OwnedFd>, sig: i32, received: u64) -> bool {
    let Some(map) = pool.and_then(crate::pool::Mapped::new) else {
        return false;
    };
    let Ok(area) = map.area() else {
        return false;
    };
    let signals = area.signals();
    if !signals.is_observed(sig) {
        return false;
    }
    // A signal to the whole group reaches both within microseconds; one the program got half a second
    // ago is another signal.
    let since = received.saturating_sub(50_000_000);
    let start = Instant::now();
    loop {
        if signals.last_arrival(sig) >= since {
            return true;
        }
        if start.elapsed() > WAIT {
            return false;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// A pidfd naming process `pid` for as long as it exists (or, for our child, is not reaped): a pid
/// could be reused after.
pub(crate) fn pidfd_open(pid: u32) -> std::io::Result<OwnedFd> {
    // SAFETY: pidfd_open with no flags; the result is checked.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::c_int, 0) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a fresh descriptor that we own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// Starts the relay thread for the program `child` (a child of ours, not reaped yet), whose runtime
/// shares `pool` with us (if it does).
pub(crate) fn start(child: libc::pid_t, pool: Option<&OwnedFd>) -> Result<(), LaunchError> {
    let pidfd = pidfd_open(child as u32).map_err(|source| LaunchError::Setup {
        what: "pidfd_open",
        source,
    })?;
    let pool = pool
        .map(|p| p.try_clone())
        .transpose()
        .map_err(|source| LaunchError::Setup {
            what: "dup",
            source,
        })?;
    std::thread::Builder::new()
        .name("signal relay".into())
        .spawn(move || {
            let set = relayed_set();
            loop {
                // SAFETY: siginfo_t is plain data; all zeroes is a valid value.
                let mut info: libc::siginfo_t = unsafe { core::mem::zeroed() };
                // SAFETY: sigwaitinfo fills `info` for the signal it returns.
                let sig = unsafe { libc::sigwaitinfo(&set, &mut info) };
                if sig < 0 {
                    continue; // EINTR
                }
                let received = ferrotrace_core::clock::monotonic_ns();
                if reached_the_program_anyway(&info, child)
                    || arrived_there_too(pool.as_ref(), sig, received)
                {
                    continue;
                }
                // SAFETY: pidfd_send_signal with our pidfd; it fails (ESRCH) once the program is gone.
                unsafe {
                    libc::syscall(
                        libc::SYS_pidfd_send_signal,
                        pidfd.as_raw_fd(),
                        sig,
                        core::ptr::null::<libc::siginfo_t>(),
                        0,
                    )
                };
            }
        })
        .map_err(|source| LaunchError::Setup {
            what: "cannot start the signal relay",
            source,
        })?;
    Ok(())
}
