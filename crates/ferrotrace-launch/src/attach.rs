//! Entering a running process as debuggers do: one of its threads is stopped with ptrace, made to call
//! a function of the process (the loader's `dlopen`, then an entry point of what it loaded) and
//! restored exactly as it was, registers and vector state included; the other threads run on.
//!
//! Why only one thread: a thread stopped while it holds a lock (the allocator's, the loader's) would
//! deadlock the call if the call needs that lock, so every other thread keeps running and releases
//! what it holds. The thread chosen is one blocked in a system call that holds no user-space lock
//! (`read`, `accept`, `epoll_wait`, `poll`, a sleep ...) when there is one; its interrupted system call
//! is restarted when it resumes, as after a debugger's call. [`check`] refuses, with one line each,
//! what cannot be entered: a process that does not exist or has exited (a zombie), a stopped one,
//! another user's, a setuid one, one another tracer holds, one with no loader to call.
//!
//! A call returns through a signal frame of the thread's own state, written below it on its stack:
//! the kernel's `rt_sigreturn` puts the thread back, so a tracer killed during the call (or a
//! process stopped meanwhile) leaves it as it was, not returning to an address that faults.
//!
//! Limits: the call runs on the thread's stack, 1 KiB below its red zone; a thread chosen while it
//! holds a lock the call needs would wait forever (the call is given [`CALL_TIMEOUT`], then the
//! attach fails and says which thread, which puts itself back once the call returns).

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use object::{Object, ObjectSegment, ObjectSymbol};

use crate::LaunchError;

#[cfg(target_arch = "x86_64")]
#[path = "attach/x86_64.rs"]
mod arch;
pub mod entries;
pub mod record;

/// How long a call in the process may take before the attach gives up on it.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// Room for the largest XSAVE area (AVX-512 with AMX fits in 8 KiB... and then some).
const XSTATE_BYTES: usize = 16 << 10;

/// System calls in which a thread waits for the outside world without holding a user-space lock:
/// the best threads to borrow. (`futex` is left out: it is how a thread waits for a lock.)
const QUIET_SYSCALLS: &[i64] = &[
    libc::SYS_read,
    libc::SYS_readv,
    libc::SYS_pread64,
    libc::SYS_recvfrom,
    libc::SYS_recvmsg,
    libc::SYS_accept,
    libc::SYS_accept4,
    libc::SYS_poll,
    libc::SYS_ppoll,
    libc::SYS_select,
    libc::SYS_pselect6,
    libc::SYS_epoll_wait,
    libc::SYS_epoll_pwait,
    libc::SYS_nanosleep,
    libc::SYS_clock_nanosleep,
    libc::SYS_wait4,
    libc::SYS_pause,
    libc::SYS_rt_sigsuspend,
    libc::SYS_rt_sigtimedwait,
];

fn status_field(pid: u32, field: &str) -> Option<String> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .map(|v| v.trim().to_string())
}

/// Refuses, before anything is touched, a process that cannot or must not be entered.
pub fn check(pid: u32) -> Result<(), LaunchError> {
    let refuse = |why: String| Err(LaunchError::CannotAttach { pid, why });
    if status_field(pid, "Name").is_none() {
        return refuse("no such process".into());
    }
    // `Z (zombie)`, `X (dead)`: its memory is gone, and everything below would name a wrong cause.
    if status_field(pid, "State").is_some_and(|s| s.starts_with(['Z', 'X'])) {
        return refuse(format!(
            "it has exited (a zombie its parent, process {}, has not waited for): nothing of it \
             runs to attach to",
            status_field(pid, "PPid").unwrap_or_else(|| "?".into())
        ));
    }
    // `T (stopped)`: its threads would not run the calls an attach makes until it is continued.
    if status_field(pid, "State").is_some_and(|s| s.starts_with('T')) {
        return refuse(format!(
            "it is stopped (SIGSTOP, or Ctrl-Z in its shell): continue it first (`kill -CONT {pid}`)"
        ));
    }
    if let Some(tracer) = status_field(pid, "TracerPid").filter(|t| t != "0") {
        return refuse(format!(
            "another tracer (process {tracer}) is attached to it: a process has one tracer at a time"
        ));
    }
    // SAFETY: geteuid cannot fail.
    let me = unsafe { libc::geteuid() };
    let uids = status_field(pid, "Uid").unwrap_or_default();
    let uids: Vec<u32> = uids
        .split_whitespace()
        .filter_map(|u| u.parse().ok())
        .collect();
    // Before whose it is: a setuid program started by this very user runs as another user too,
    // and "attach as that user" would be the wrong advice.
    if uids.windows(2).any(|w| w[0] != w[1]) || secure_exec(pid) {
        return refuse(
            "it runs with privileges its user does not have (setuid, setgid or file capabilities), \
             and the tracer stays out of such processes"
                .into(),
        );
    }
    if me != 0 && uids.iter().any(|&u| u != me) {
        return refuse(format!(
            "it runs as user {} and ferrotrace as {me}: attach as that user or as root",
            uids.first().copied().unwrap_or_default()
        ));
    }
    if let Ok(scope) = std::fs::read_to_string("/proc/sys/kernel/yama/ptrace_scope") {
        match scope.trim() {
            "3" => {
                return refuse(
                    "ptrace is disabled on this system (kernel.yama.ptrace_scope = 3)".into(),
                )
            }
            "1" | "2" if me != 0 => {
                return refuse(format!(
                    "kernel.yama.ptrace_scope is {} here, which lets only root (or the process's \
                     parent) attach: run as root, or `sysctl kernel.yama.ptrace_scope=0`",
                    scope.trim()
                ))
            }
            _ => {}
        }
    }
    if loader_symbol(pid).is_err() {
        return refuse(
            "it has no dynamic loader to load the tracer with (a statically linked program): \
             link it dynamically, or make it depend on the ferrotrace crate"
                .into(),
        );
    }
    Ok(())
}

/// AT_SECURE of the process (set for setuid, setgid and capability-raised programs).
fn secure_exec(pid: u32) -> bool {
    let Ok(auxv) = std::fs::read(format!("/proc/{pid}/auxv")) else {
        return false;
    };
    auxv.chunks_exact(16).any(|e| {
        let key = u64::from_ne_bytes(e[..8].try_into().unwrap_or_default());
        let value = u64::from_ne_bytes(e[8..].try_into().unwrap_or_default());
        key == libc::AT_SECURE && value != 0
    })
}

/// Where `path` (an object mapped into the process) is loaded: the start of its mapping at file offset
/// 0, as `/proc/PID/maps` shows it.
fn load_address(pid: u32, matches: impl Fn(&str) -> bool) -> Option<(u64, PathBuf)> {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).ok()?;
    maps.lines().find_map(|line| {
        let mut f = line.split_whitespace();
        let range = f.next()?;
        let (_perms, offset) = (f.next()?, f.next()?);
        let (_dev, _inode) = (f.next()?, f.next()?);
        let path = f.next()?;
        if offset.trim_start_matches('0').is_empty() && matches(path) {
            let start = u64::from_str_radix(range.split('-').next()?, 16).ok()?;
            Some((start, PathBuf::from(path)))
        } else {
            None
        }
    })
}

/// The address in process `pid` of the dynamic symbol `name` of the object `object` (matched by its
/// path in `/proc/PID/maps`). The file is read through `/proc/PID/root` so that a process in another
/// mount namespace is read as it sees its files.
pub fn symbol_in(
    pid: u32,
    object: impl Fn(&str) -> bool,
    names: &[&str],
) -> Result<u64, LaunchError> {
    let missing = |why: String| LaunchError::CannotAttach { pid, why };
    let (base, path) = load_address(pid, object)
        .ok_or_else(|| missing(format!("none of {names:?} is loaded in it")))?;
    let data = read_as_seen(pid, &path).map_err(|e| missing(format!("{}: {e}", path.display())))?;
    let elf =
        object::File::parse(&*data).map_err(|e| missing(format!("{}: {e}", path.display())))?;
    let linked_base = linked_base(&elf);
    for name in names {
        if let Some(s) = elf
            .dynamic_symbols()
            .find(|s| s.is_definition() && s.name() == Ok(name))
        {
            return Ok(base + s.address() - linked_base);
        }
    }
    Err(missing(format!(
        "{} defines none of {names:?}",
        path.display()
    )))
}

/// The file at `path` as process `pid` sees it: read through `/proc/PID/root`, so that a process in
/// another mount namespace is read as it sees its files.
fn read_as_seen(pid: u32, path: &Path) -> std::io::Result<Vec<u8>> {
    std::fs::read(
        Path::new(&format!("/proc/{pid}/root")).join(path.strip_prefix("/").unwrap_or(path)),
    )
}

/// The address an object was linked at for its first byte: the lowest loaded segment's address
/// less its file offset (0 for shared libraries).
pub(crate) fn linked_base(elf: &object::File<'_>) -> u64 {
    elf.segments()
        .map(|s| s.address() - s.file_range().0)
        .min()
        .unwrap_or(0)
}

/// True for the path of the C library (`libc.so.6`, or `libc-2.NN.so` before glibc 2.34), as
/// `/proc/PID/maps` names it.
fn is_libc(path: &str) -> bool {
    Path::new(path)
        .file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.starts_with("libc.so") || n.starts_with("libc-"))
}

/// The loader's `dlopen` in the process: libc's own since glibc 2.34, `__libc_dlopen_mode` before.
fn loader_symbol(pid: u32) -> Result<u64, LaunchError> {
    symbol_in(pid, is_libc, &["dlopen", "__libc_dlopen_mode"])
}

/// The thread of `pid` to borrow: one waiting in a [`QUIET_SYSCALLS`] call if there is one, else the
/// main thread.
fn quiet_thread(pid: u32) -> u32 {
    let Some(tids) = threads_of(pid) else {
        return pid;
    };
    tids.into_iter()
        .find(|tid| {
            std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/syscall"))
                .ok()
                .and_then(|s| s.split_whitespace().next()?.parse::<i64>().ok())
                .is_some_and(|nr| QUIET_SYSCALLS.contains(&nr))
        })
        .unwrap_or(pid)
}

/// One thread of a process held in a ptrace stop (seized, then interrupted), the first step of
/// every way into a process: a thread borrowed for calls ([`Borrowed`]), every thread while function
/// entries are patched ([`stop_all`]). Let go by [`Stopped::release`] or when dropped: a system call it
/// was stopped in is restarted (or fails with `EINTR`) as after any signal that has no handler, and a
/// signal that arrived meanwhile is delivered then.
pub struct Stopped {
    pid: u32,
    tid: u32,
    /// A signal that arrived while the thread was held, delivered when it is let go.
    pending_signal: i32,
    /// Calls were made on the thread ([`Borrowed::call`]): its restart block may have been reused.
    call_made: bool,
    released: bool,
    /// ptrace answers only the thread that attached: a `Stopped` stays on it.
    _not_send: std::marker::PhantomData<*const ()>,
}

/// The stop of `tid` (a thread of `pid`) that a `PTRACE_INTERRUPT` asked for: `Ok(signal)`, a signal
/// that was being delivered meanwhile (0 if none), which the thread is resumed without for now. Waits
/// at most [`CALL_TIMEOUT`], and gives up as soon as the process is gone (a thread of a killed process
/// may never be reported while its siblings are zombies we hold).
fn wait_for_interrupt(pid: u32, tid: u32) -> Result<i32, LaunchError> {
    let ended = || LaunchError::CannotAttach {
        pid,
        why: "it ended while ferrotrace was attaching".into(),
    };
    let started = Instant::now();
    let mut pending = 0;
    loop {
        let status = match wait_nohang(tid) {
            Ok(Some(status)) => status,
            Ok(None) if process_ended(pid) => return Err(ended()),
            Ok(None) if started.elapsed() > CALL_TIMEOUT => {
                return Err(LaunchError::CannotAttach {
                    pid,
                    why: format!("its thread {tid} did not stop within {CALL_TIMEOUT:?}"),
                })
            }
            Ok(None) => {
                std::thread::sleep(Duration::from_micros(100));
                continue;
            }
            Err(e) => {
                return Err(LaunchError::CannotAttach {
                    pid,
                    why: format!("waiting for thread {tid} to stop: {e}"),
                })
            }
        };
        if !libc::WIFSTOPPED(status) {
            return Err(ended());
        }
        if status >> 16 == libc::PTRACE_EVENT_STOP {
            return Ok(pending);
        }
        pending = libc::WSTOPSIG(status);
        // SAFETY: resuming our tracee without the signal; the interrupt is still pending.
        unsafe { libc::ptrace(libc::PTRACE_CONT, tid, 0, 0) };
    }
}

/// The process is gone, or dying (a zombie, or being reaped): its threads will not stop again.
fn process_ended(pid: u32) -> bool {
    state_in(&format!("/proc/{pid}/stat")).is_none_or(|state| matches!(state, 'Z' | 'X' | 'x'))
}

/// The state letter of the `stat` file at `path` (`/proc/PID/stat` or a thread's): what follows the
/// last `)`, the command name before it holding any character. `None` when it cannot be read.
fn state_in(path: &str) -> Option<char> {
    let stat = std::fs::read_to_string(path).ok()?;
    stat.get(stat.rfind(')')? + 2..)?.chars().next()
}

impl Stopped {
    /// Stops thread `tid` of `pid`. `Ok(None)` when the thread no longer exists (it ended before it
    /// could be seized).
    fn seize(pid: u32, tid: u32) -> Result<Option<Stopped>, LaunchError> {
        match Stopped::interrupt(pid, tid)? {
            Some(asked) => asked.wait_stopped().map(Some),
            None => Ok(None),
        }
    }

    /// Seizes thread `tid` of `pid` and asks it to stop, without waiting for the stop
    /// ([`Stopped::wait_stopped`]). `Ok(None)` when the thread no longer exists.
    fn interrupt(pid: u32, tid: u32) -> Result<Option<Stopped>, LaunchError> {
        // SAFETY: ptrace requests on a thread id with no memory passed.
        unsafe {
            if libc::ptrace(libc::PTRACE_SEIZE, tid, 0, 0) != 0 {
                if std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH) {
                    return Ok(None);
                }
                return Err(ptrace_error(pid, "ptrace(PTRACE_SEIZE)"));
            }
            if libc::ptrace(libc::PTRACE_INTERRUPT, tid, 0, 0) != 0 {
                let e = ptrace_error(pid, "ptrace(PTRACE_INTERRUPT)");
                libc::ptrace(libc::PTRACE_DETACH, tid, 0, 0);
                return Err(e);
            }
        }
        Ok(Some(Stopped {
            pid,
            tid,
            pending_signal: 0,
            call_made: false,
            released: false,
            _not_send: std::marker::PhantomData,
        }))
    }

    /// Waits for the stop [`Stopped::interrupt`] asked for.
    fn wait_stopped(mut self) -> Result<Stopped, LaunchError> {
        match wait_for_interrupt(self.pid, self.tid) {
            Ok(signal) => {
                self.pending_signal = signal;
                Ok(self)
            }
            Err(e) => {
                self.released = true; // ended, or never stopped: nothing to let go
                                      // SAFETY: detaching our tracee (fails harmlessly if it is gone).
                unsafe { libc::ptrace(libc::PTRACE_DETACH, self.tid, 0, 0) };
                Err(e)
            }
        }
    }

    /// The thread.
    pub fn tid(&self) -> u32 {
        self.tid
    }

    /// Whether the thread is in a ptrace stop now (`t` in its stat), not running a call we gave up
    /// waiting for.
    fn held(&self) -> bool {
        state_in(&format!("/proc/{}/task/{}/stat", self.pid, self.tid)) == Some('t')
    }

    fn get_regs(&self) -> Result<arch::Regs, LaunchError> {
        // SAFETY: plain data the kernel fills.
        let mut regs: arch::Regs = unsafe { core::mem::zeroed() };
        // SAFETY: PTRACE_GETREGS writes one user_regs_struct.
        if unsafe { libc::ptrace(libc::PTRACE_GETREGS, self.tid, 0, &mut regs) } != 0 {
            return Err(ptrace_error(self.pid, "ptrace(PTRACE_GETREGS)"));
        }
        Ok(regs)
    }

    fn set_regs(&self, regs: &arch::Regs) -> Result<(), LaunchError> {
        // SAFETY: PTRACE_SETREGS reads one user_regs_struct.
        if unsafe { libc::ptrace(libc::PTRACE_SETREGS, self.tid, 0, regs) } != 0 {
            return Err(ptrace_error(self.pid, "ptrace(PTRACE_SETREGS)"));
        }
        Ok(())
    }

    /// Lets the thread go on where it was, with any signal that arrived meanwhile.
    pub fn release(mut self) -> Result<(), LaunchError> {
        self.let_go()
    }

    fn let_go(&mut self) -> Result<(), LaunchError> {
        if std::mem::replace(&mut self.released, true) {
            return Ok(());
        }
        // A system call that would fail with EINTR for our stop alone runs again (with a signal
        // to deliver, EINTR is what the program would have seen anyway).
        if self.pending_signal == 0 {
            if let Ok(mut regs) = self.get_regs() {
                if arch::restart_interrupted(&mut regs, self.call_made) {
                    self.set_regs(&regs)?;
                }
            }
        }
        // SAFETY: detaching our tracee, delivering the signal it had pending.
        if unsafe { libc::ptrace(libc::PTRACE_DETACH, self.tid, 0, self.pending_signal) } != 0 {
            return Err(ptrace_error(self.pid, "ptrace(PTRACE_DETACH)"));
        }
        Ok(())
    }
}

impl Drop for Stopped {
    fn drop(&mut self) {
        let _ = self.let_go();
    }
}

/// The threads of `pid`, from `/proc/PID/task`; `None` when the process is gone.
fn threads_of(pid: u32) -> Option<Vec<u32>> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
    let mut tids: Vec<u32> = tasks
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .collect();
    tids.sort_unstable();
    Some(tids)
}

/// Stops every thread of `pid` but `held` (one stopped already), until none is left running: a thread
/// started meanwhile by one not yet stopped is found by the next look at `/proc/PID/task`, and a
/// stopped thread starts none. The stopped threads, in the order they were stopped.
pub fn stop_all(pid: u32, held: Option<u32>) -> Result<Vec<Stopped>, LaunchError> {
    let mut stopped: Vec<Stopped> = Vec::new();
    loop {
        let tids =
            threads_of(pid)
                .filter(|t| !t.is_empty())
                .ok_or_else(|| LaunchError::CannotAttach {
                    pid,
                    why: "it ended while ferrotrace was stopping its threads".into(),
                })?;
        // Every thread asked to stop first, then each stop waited for: the stops overlap (one at a
        // time, each of a busy process's threads waited for a CPU in turn: 1.9 s for 64 spinning
        // threads on two loaded CPUs).
        let mut asked = Vec::new();
        for tid in tids {
            if Some(tid) == held || stopped.iter().any(|s| s.tid == tid) {
                continue;
            }
            asked.extend(Stopped::interrupt(pid, tid)?);
        }
        if asked.is_empty() {
            return Ok(stopped);
        }
        for a in asked {
            let tid = a.tid;
            match a.wait_stopped() {
                Ok(s) => stopped.push(s),
                // A thread that ended meanwhile, the process going on: nothing to stop.
                Err(_)
                    if !process_ended(pid)
                        && !Path::new(&format!("/proc/{pid}/task/{tid}")).exists() => {}
                Err(e) => return Err(e),
            }
        }
    }
}

/// One thread of a process, stopped under ptrace and borrowed for calls. Dropping it restores the
/// thread (registers, vector state) and lets it go.
pub struct Borrowed {
    thread: Stopped,
    regs: arch::Regs,
    xstate: Vec<u8>,
    mem: Memory,
    /// The C library's signal restorer, which a call returns through with a signal frame of the
    /// thread's own state above it: should we be killed during the call, the thread puts itself
    /// back (`rt_sigreturn`) instead of returning to address 0 and dying there. `None` when it was
    /// not found: calls return to address 0.
    restorer: Option<u64>,
    /// The page of the call stub ([`arch::call_stub`]) in the process, which keeps what a call
    /// returned before returning through the frame (the restorer overwrites `rax`).
    stub: Option<u64>,
    /// The registers the thread resumes with after a call that returned through its signal frame
    /// (its system call made to run again: [`arch::resume_regs`]).
    resumed: Option<arch::Regs>,
    /// The borrowed thread's priority, raised while it is borrowed.
    lent: LentPriority,
    /// Our thread's priority raised while the thread is borrowed (last: put back after the drop
    /// lets the thread go).
    urgent: Urgent,
}

/// The borrowed thread at the fair scheduler's highest priority (nice -20) from just before it is
/// stopped until it is let go, where we may raise it (root, CAP_SYS_NICE; elsewhere nothing
/// changes). With busy threads on every CPU, a thread at its default priority waits behind them for
/// a CPU each time it is resumed or asked to stop (the seize, each call, each stop): with 64 threads
/// spinning on 2 CPUs, most of a 450 ms pause was the borrowed thread waiting so
/// (docs/performance.md, issue 41 item 7).
///
/// Kill-safe, twice over. A guard process ([`PriorityGuard`]) puts the thread's priority back should
/// we die before we do. And a call through the stub that we are no longer there to end puts it back
/// itself ([`arch::call_stub`]). Threads a call starts inherit the raised priority: the runtime's
/// start thread takes the borrowed thread's own (`ferrotrace_core::env::START_NICE`).
struct LentPriority {
    tid: libc::id_t,
    /// The thread's own nice value (`None`: unknown, never raised).
    own: Option<libc::c_int>,
    /// Raised now.
    raised: bool,
    /// Puts it back if we die while it is raised.
    guard: Option<PriorityGuard>,
}

impl LentPriority {
    /// Thread `tid` of the process at -20, if we may (nothing changes otherwise).
    fn raise(tid: u32) -> LentPriority {
        let tid = tid as libc::id_t;
        // SAFETY: getpriority of a thread, no memory passed; -1 is a priority or an error: errno says.
        let own = unsafe {
            *libc::__errno_location() = 0;
            let nice = libc::getpriority(libc::PRIO_PROCESS, tid);
            (nice != -1 || *libc::__errno_location() == 0).then_some(nice)
        };
        let mut lent = LentPriority {
            tid,
            own,
            raised: false,
            guard: None,
        };
        let Some(own) = own.filter(|&n| n > -20) else {
            return lent;
        };
        // The guard first: no raise that nothing would put back.
        lent.guard = PriorityGuard::watch(tid, own);
        if lent.guard.is_some() {
            // SAFETY: setpriority of a thread, no memory passed.
            lent.raised = unsafe { libc::setpriority(libc::PRIO_PROCESS, tid, -20) } == 0;
        }
        lent
    }

    /// The thread at its own priority again (before it is let go).
    fn lower(&mut self) {
        if let (true, Some(own)) = (self.raised, self.own) {
            // SAFETY: as in `raise`; lowering a priority needs no right.
            unsafe { libc::setpriority(libc::PRIO_PROCESS, self.tid, own) };
            self.raised = false;
        }
    }
}

impl Drop for LentPriority {
    fn drop(&mut self) {
        self.lower();
        if let Some(guard) = self.guard.take() {
            guard.dismiss();
        }
    }
}

/// A process of our own that puts a borrowed thread's priority back should we die first (SIGKILL
/// included): forked with one end of a pipe, it waits for that pipe's end of file, which comes when
/// we close our end or die; a byte before it says we put the priority back ourselves. Between the
/// fork and its `_exit` it makes only system calls (the fork copied one thread of a process that may
/// have others). It closes every other descriptor it inherited, so that none of ours (the control
/// FIFO, whose end of file stops the runtime; a test's pipe) outlives us in it, and it is a session
/// of its own, so that a Ctrl-C to our terminal does not end it before it has looked.
struct PriorityGuard {
    /// Our end of the pipe.
    pipe: std::os::fd::OwnedFd,
    child: libc::pid_t,
}

impl PriorityGuard {
    /// A guard for thread `tid`, whose own nice value is `own`; `None` when it cannot be made.
    fn watch(tid: libc::id_t, own: libc::c_int) -> Option<PriorityGuard> {
        use std::os::fd::{AsRawFd, FromRawFd};
        let mut fds = [0i32; 2];
        // SAFETY: pipe2 fills the two descriptors.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return None;
        }
        // SAFETY: both descriptors were just made and are ours alone.
        let (read, write) = unsafe {
            (
                std::os::fd::OwnedFd::from_raw_fd(fds[0]),
                std::os::fd::OwnedFd::from_raw_fd(fds[1]),
            )
        };
        // SAFETY: the child makes system calls only (async-signal-safe) and ends with `_exit`.
        match unsafe { libc::fork() } {
            -1 => None,
            0 => {
                // SAFETY: system calls on descriptors and a thread id; `_exit` ends the child.
                unsafe {
                    libc::setsid();
                    libc::dup2(read.as_raw_fd(), 0);
                    libc::syscall(libc::SYS_close_range, 1, u32::MAX, 0);
                    let mut byte = 0u8;
                    let told = loop {
                        match libc::read(0, (&mut byte as *mut u8).cast(), 1) {
                            n if n >= 0 => break n == 1,
                            _ if *libc::__errno_location() == libc::EINTR => continue,
                            _ => break false,
                        }
                    };
                    if !told {
                        libc::setpriority(libc::PRIO_PROCESS, tid, own);
                    }
                    libc::_exit(0)
                }
            }
            child => Some(PriorityGuard { pipe: write, child }),
        }
    }

    /// We put the priority back: the guard ends without touching it.
    fn dismiss(self) {
        use std::io::Write;
        let mut pipe = File::from(self.pipe);
        let _ = pipe.write_all(&[1]);
        drop(pipe);
        // SAFETY: waiting for our own child, no memory passed but the status.
        unsafe {
            let mut status = 0;
            libc::waitpid(self.child, &mut status, 0);
        }
    }
}

/// The calling thread at the fair scheduler's highest priority (nice -20) while this lives, where it
/// may raise it (root, CAP_SYS_NICE; elsewhere nothing changes), and at its own again when dropped.
/// A borrowed thread waits for ours at every step of an attach (each call, each stop, the entries'
/// writing), and with busy threads on every CPU a thread at the default priority waits behind them
/// after each of its own waits: with 64 threads spinning on 2 CPUs the pause was 4.4 s with `record`
/// at nice 0, 0.5 s at -20 (docs/performance.md, issue 41 item 7). Ours alone: the target's threads
/// keep theirs (and a thread we started meanwhile would inherit it: none is).
struct Urgent {
    tid: libc::id_t,
    /// Our thread's priority before, when we raised it.
    before: Option<libc::c_int>,
    /// Our thread runs at -20 (raised, or there already).
    top: bool,
}

impl Urgent {
    fn raise() -> Urgent {
        // SAFETY: gettid has no arguments and cannot fail.
        let tid = unsafe { libc::syscall(libc::SYS_gettid) } as libc::id_t;
        // SAFETY: getpriority and setpriority on our own thread (PRIO_PROCESS with a tid is that
        // thread on Linux), no memory passed. getpriority's -1 is a priority or an error: errno says.
        let (before, top) = unsafe {
            *libc::__errno_location() = 0;
            let nice = libc::getpriority(libc::PRIO_PROCESS, tid);
            let known = nice != -1 || *libc::__errno_location() == 0;
            if known && nice == -20 {
                (None, true)
            } else if known && libc::setpriority(libc::PRIO_PROCESS, tid, -20) == 0 {
                (Some(nice), true)
            } else {
                (None, false)
            }
        };
        Urgent { tid, before, top }
    }
}

impl Drop for Urgent {
    fn drop(&mut self) {
        if let Some(nice) = self.before {
            // SAFETY: as in `raise`; lowering a priority needs no right.
            unsafe { libc::setpriority(libc::PRIO_PROCESS, self.tid, nice) };
        }
    }
}

/// A process's memory, through `/proc/PID/mem` (ptrace rights over the process include writing its
/// code, whatever the pages' protection).
pub struct Memory {
    pid: u32,
    file: File,
}

impl Memory {
    /// Opens the memory of `pid`.
    pub fn open(pid: u32) -> Result<Memory, LaunchError> {
        let file = File::options()
            .read(true)
            .write(true)
            .open(format!("/proc/{pid}/mem"))
            .map_err(|e| LaunchError::CannotAttach {
                pid,
                why: format!("/proc/{pid}/mem: {e}"),
            })?;
        Ok(Memory { pid, file })
    }

    /// Writes `bytes` into the process at `addr`.
    pub fn write(&self, addr: u64, bytes: &[u8]) -> Result<(), LaunchError> {
        self.file
            .write_all_at(bytes, addr)
            .map_err(|e| LaunchError::CannotAttach {
                pid: self.pid,
                why: format!("writing its memory at {addr:#x}: {e}"),
            })
    }

    /// Reads `buf.len()` bytes of the process at `addr`, or fewer where its mapping ends: how many.
    pub fn read(&self, addr: u64, buf: &mut [u8]) -> usize {
        let mut done = 0;
        while done < buf.len() {
            match self.file.read_at(&mut buf[done..], addr + done as u64) {
                Ok(0) | Err(_) => break,
                Ok(n) => done += n,
            }
        }
        done
    }
}

fn ptrace_error(pid: u32, what: &str) -> LaunchError {
    LaunchError::CannotAttach {
        pid,
        why: format!("{what}: {}", std::io::Error::last_os_error()),
    }
}

impl Borrowed {
    /// Stops one thread of `pid` (one blocked in a quiet system call if there is one, else the main
    /// thread) and takes its state. Call [`check`] first.
    pub fn stop(pid: u32) -> Result<Borrowed, LaunchError> {
        let urgent = Urgent::raise();
        let tid = quiet_thread(pid);
        // Before the seize: the thread must run to stop.
        let lent = LentPriority::raise(tid);
        let thread = Stopped::seize(pid, tid)?.ok_or_else(|| LaunchError::CannotAttach {
            pid,
            why: "it ended while ferrotrace was attaching".into(),
        })?;
        let mem = Memory::open(pid)?;
        let regs = thread.get_regs()?;
        let mut borrowed = Borrowed {
            lent,
            thread,
            regs,
            xstate: vec![0; XSTATE_BYTES],
            mem,
            restorer: None,
            stub: None,
            resumed: None,
            urgent,
        };
        borrowed.take_xstate()?;
        // Syscall stops told from SIGTRAP (`SIGTRAP | 0x80`): how a call's end is seen.
        // SAFETY: a ptrace request on our tracee, no memory passed.
        let traced =
            unsafe { libc::ptrace(libc::PTRACE_SETOPTIONS, tid, 0, libc::PTRACE_O_TRACESYSGOOD) }
                == 0;
        if traced {
            borrowed.restorer = restorer_in(pid);
            borrowed.stub = borrowed.make_stub();
        }
        Ok(borrowed)
    }

    /// Maps a page for the call stub at a free address (`mmap` with `MAP_FIXED_NOREPLACE`, called
    /// through the restorer, which leaves no result: the page is ours when the maps show it there)
    /// and writes the stub into it.
    fn make_stub(&mut self) -> Option<u64> {
        let pid = self.thread.pid;
        let mmap = symbol_in(pid, is_libc, &["mmap", "mmap64"]).ok()?;
        let page = free_page(pid)?;
        let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED_NOREPLACE;
        let args = [
            Arg::Int(page),
            Arg::Int(PAGE),
            Arg::Int((libc::PROT_READ | libc::PROT_EXEC) as u64),
            Arg::Int(flags as u64),
            Arg::Int(u64::MAX),
            Arg::Int(0),
        ];
        self.call_framed(None, mmap, &args).ok()?;
        if !anonymous_code_at(pid, page) {
            return None;
        }
        self.write(page, &arch::call_stub(0, self.own_nice()))
            .ok()?;
        Some(page)
    }

    /// Unmaps the call stub's page (through the restorer: the stub cannot return into a page it
    /// unmaps).
    fn unmap_stub(&mut self) {
        // Not while a call left running (it gave up waiting) uses the stack the call would use,
        // nor the stub it will return through.
        if !self.thread.held() {
            return;
        }
        let Some(page) = self.stub.take() else {
            return;
        };
        if let Ok(munmap) = symbol_in(self.thread.pid, is_libc, &["munmap"]) {
            let _ = self.call_framed(None, munmap, &[Arg::Int(page), Arg::Int(PAGE)]);
        }
    }

    /// The borrowed thread.
    pub fn tid(&self) -> u32 {
        self.thread.tid
    }

    /// The borrowed thread's own nice value (0 when it could not be read): what the threads a call
    /// starts are to run at, though they inherit the priority the call ran at.
    pub fn own_nice(&self) -> i32 {
        self.lent.own.unwrap_or(0)
    }

    /// Writes `bytes` into the process at `addr`.
    pub fn write(&self, addr: u64, bytes: &[u8]) -> Result<(), LaunchError> {
        self.mem.write(addr, bytes)
    }

    /// Reads a NUL-terminated string of the process at `addr` (at most 4 KiB).
    pub fn read_c_string(&self, addr: u64) -> String {
        let mut buf = vec![0u8; 4096];
        let n = self.mem.read(addr, &mut buf);
        buf.truncate(n);
        let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
        String::from_utf8_lossy(&buf[..end]).into_owned()
    }

    /// Calls `function(args...)` (at most 6 integer arguments; `strings` are written into the stack
    /// below the call and passed by address in their place where `args` holds `None`) on the borrowed
    /// thread, and returns what it returned (`rax`). The thread's own state is put back afterwards.
    pub fn call(&mut self, function: u64, args: &[Arg<'_>]) -> Result<u64, LaunchError> {
        match self.stub {
            Some(stub) => self
                .call_framed(Some(stub), function, args)
                .map(|r| r.unwrap_or_default()),
            None => self.call_returning_to_zero(function, args),
        }
    }

    /// Writes the string arguments below `sp` (moved down past them); the arguments' values.
    fn place_arguments(&self, sp: &mut u64, args: &[Arg<'_>]) -> Result<[u64; 6], LaunchError> {
        let mut values = [0u64; 6];
        for (i, a) in args.iter().take(6).enumerate() {
            values[i] = match a {
                Arg::Int(v) => *v,
                Arg::Str(s) => {
                    let mut bytes = s.as_bytes().to_vec();
                    bytes.push(0);
                    *sp = (*sp - bytes.len() as u64) & !0xf;
                    self.write(*sp, &bytes)?;
                    *sp
                }
            };
        }
        Ok(values)
    }

    /// Calls `function(args...)` so that it returns through a signal frame of the thread's own
    /// state, written below the arguments: through the call stub at `stub`, which keeps what it
    /// returned (`Some`), or straight into the restorer (`None`: what it returned is lost). The
    /// thread resumes from that frame whether or not we are still there to see the call end.
    fn call_framed(
        &mut self,
        stub: Option<u64>,
        function: u64,
        args: &[Arg<'_>],
    ) -> Result<Option<u64>, LaunchError> {
        let restorer = self.restorer.ok_or_else(|| LaunchError::CannotAttach {
            pid: self.thread.pid,
            why: "no signal restorer found in its C library".into(),
        })?;
        let saved = self.regs;
        let resume = arch::resume_regs(&saved);
        let mut sp = (arch::stack_pointer(&saved) - arch::RED_ZONE - 1024) & !0xf;
        let values = self.place_arguments(&mut sp, args)?;
        // The vector state, an XSAVE area as ptrace gave it (its software bytes say its size),
        // followed by the magic number that says it is whole.
        let xsave_size = self
            .xstate
            .get(480..484)
            .map_or(0, |b| {
                u32::from_ne_bytes(b.try_into().unwrap_or_default()) as usize
            })
            .max(self.xstate.len());
        let fpstate = (sp - xsave_size as u64 - 4) & !63;
        self.write(fpstate, &self.xstate)?;
        self.write(
            fpstate + xsave_size as u64,
            &arch::FP_XSTATE_MAGIC2.to_ne_bytes(),
        )?;
        let frame = (fpstate - arch::SIGNAL_FRAME as u64) & !0xf;
        let sigmask = blocked_signals(self.thread.pid, self.thread.tid);
        self.write(frame, &arch::signal_frame(&resume, sigmask, fpstate))?;
        let mut regs = saved;
        self.thread.call_made = true;
        let Some(stub) = stub else {
            // Straight into the restorer, with the system call stops watched for its rt_sigreturn
            // (the stub's page is mapped and unmapped this way: two system calls).
            let slot = arch::return_slot(frame);
            self.write(slot, &restorer.to_ne_bytes())?;
            arch::set_up_call(&mut regs, function, slot, values);
            self.thread.set_regs(&regs)?;
            let ended = self.run_until_sigreturn(frame, restorer + arch::RESTORER.len() as u64);
            // Put back exactly, whatever happened (a call that crashed has not returned through
            // the frame; one that did was put back by the kernel, the vector state included).
            let restored = self
                .thread
                .set_regs(&resume)
                .and_then(|()| self.restore_xstate());
            ended?;
            restored?;
            self.resumed = Some(resume);
            return Ok(None);
        };
        // Through the stub, which says the call has ended by writing a word of this call's own at
        // `done_slot`: the thread runs the call without a stop at each of its system calls (on a
        // busy machine each stop waits for a CPU), is seen to have ended by that word, and is
        // stopped again in its own code.
        let done = call_nonce(frame);
        self.write(arch::done_slot(frame), &0u64.to_ne_bytes())?;
        self.write(stub, &arch::call_stub(done, self.own_nice()))?;
        arch::set_up_stub_call(&mut regs, stub, function, frame, values);
        self.thread.set_regs(&regs)?;
        // Looked at while `run_call` holds the thread (a handle of its own).
        let mem = Memory::open(self.thread.pid)?;
        let ended = self.run_call(
            libc::PTRACE_CONT,
            |_, _| Ok(None),
            || {
                let mut word = [0u8; 8];
                Ok((mem.read(arch::done_slot(frame), &mut word) == 8
                    && u64::from_ne_bytes(word) == done)
                    .then_some(0))
            },
        );
        if let Err(e) = ended {
            // A crash: put back exactly. A timeout: the thread runs on inside the call (the
            // frame puts it back when the call returns), at its own priority.
            self.lent.lower();
            let _ = self
                .thread
                .set_regs(&resume)
                .and_then(|()| self.restore_xstate());
            return Err(e);
        }
        let mut value = [0u8; 8];
        let read = self.mem.read(arch::return_slot(frame), &mut value);
        self.stop_again_in_its_own_code(stub, &resume)?;
        if read != 8 {
            return Err(LaunchError::CannotAttach {
                pid: self.thread.pid,
                why: "cannot read what the call returned".into(),
            });
        }
        Ok(Some(u64::from_ne_bytes(value)))
    }

    /// Stops the thread again once a call through the stub at `stub` has ended (its `done` word
    /// written: it is waiting in the stub, or past it in its own code when the stub's wait ran out),
    /// at its own priority again, and puts it in its own state: in the stub, with `resume`, what the
    /// stub's `rt_sigreturn` would have restored (its vector state ours to put back); past it, as
    /// it is (taken afresh). The next call and the release start from there.
    fn stop_again_in_its_own_code(
        &mut self,
        stub: u64,
        resume: &arch::Regs,
    ) -> Result<(), LaunchError> {
        let (pid, tid) = (self.thread.pid, self.thread.tid);
        // SAFETY: a ptrace request on our tracee, no memory passed.
        if unsafe { libc::ptrace(libc::PTRACE_INTERRUPT, tid, 0, 0) } != 0 {
            return Err(ptrace_error(pid, "ptrace(PTRACE_INTERRUPT)"));
        }
        let signal = wait_for_interrupt(pid, tid)?;
        if signal != 0 {
            self.thread.pending_signal = signal;
        }
        let regs = self.thread.get_regs()?;
        if (stub..stub + PAGE).contains(&arch::instruction_pointer(&regs)) {
            // In the stub's wait (or the few instructions after it): the call's frame by hand.
            self.thread.set_regs(resume)?;
            self.restore_xstate()?;
            self.resumed = Some(*resume);
            return Ok(());
        }
        self.regs = regs;
        self.resumed = None;
        self.take_xstate()
    }

    /// Resumes the thread from one system call stop to the next until it has entered and left the
    /// `rt_sigreturn` of the call's frame at `frame` (the instruction before `after`); signals that
    /// arrive meanwhile are kept for when it is let go.
    fn run_until_sigreturn(&mut self, frame: u64, after: u64) -> Result<(), LaunchError> {
        let mut entered = false;
        self.run_call(
            libc::PTRACE_SYSCALL,
            |thread, status| {
                if libc::WSTOPSIG(status) != libc::SIGTRAP | 0x80 {
                    return Ok(None);
                }
                if entered {
                    return Ok(Some(0)); // the exit of rt_sigreturn: the thread's own state again
                }
                entered = arch::returning(&thread.get_regs()?, frame, after);
                Ok(None)
            },
            || Ok(None),
        )
        .map(|_| ())
    }

    /// The call the old way: it returns to address 0, where its fault ends it under us (killed
    /// meanwhile, we would leave the thread to die there: only where no signal restorer was found).
    fn call_returning_to_zero(
        &mut self,
        function: u64,
        args: &[Arg<'_>],
    ) -> Result<u64, LaunchError> {
        let saved = self.regs;
        // Below the red zone, 16-byte aligned; strings first, then the return address 0: returning
        // there faults, and that fault is how the end of the call is seen.
        let mut sp = (arch::stack_pointer(&saved) - arch::RED_ZONE - 1024) & !0xf;
        let values = self.place_arguments(&mut sp, args)?;
        sp -= 8;
        self.write(sp, &0u64.to_ne_bytes())?;
        let mut regs = saved;
        arch::set_up_call(&mut regs, function, sp, values);
        self.thread.call_made = true;
        self.thread.set_regs(&regs)?;
        let result = self.run_until_return();
        // Restore whatever happened: the thread must go on as if nothing had.
        let restored = self
            .thread
            .set_regs(&saved)
            .and_then(|()| self.restore_xstate());
        let rax = result?;
        restored?;
        Ok(rax)
    }

    /// Takes the thread's vector state (`PTRACE_GETREGSET`), to be put back after calls.
    fn take_xstate(&mut self) -> Result<(), LaunchError> {
        self.xstate.clear();
        self.xstate.resize(XSTATE_BYTES, 0);
        let mut iov = libc::iovec {
            iov_base: self.xstate.as_mut_ptr().cast(),
            iov_len: self.xstate.len(),
        };
        // SAFETY: the kernel writes at most iov_len bytes into our buffer and shortens iov_len.
        if unsafe {
            libc::ptrace(
                libc::PTRACE_GETREGSET,
                self.thread.tid,
                arch::VECTOR_REGSET,
                &mut iov,
            )
        } != 0
        {
            return Err(ptrace_error(self.thread.pid, "ptrace(PTRACE_GETREGSET)"));
        }
        self.xstate.truncate(iov.iov_len);
        Ok(())
    }

    fn restore_xstate(&mut self) -> Result<(), LaunchError> {
        let mut iov = libc::iovec {
            iov_base: self.xstate.as_mut_ptr().cast(),
            iov_len: self.xstate.len(),
        };
        // SAFETY: the kernel reads iov_len bytes of the state it gave us.
        if unsafe {
            libc::ptrace(
                libc::PTRACE_SETREGSET,
                self.thread.tid,
                arch::VECTOR_REGSET,
                &mut iov,
            )
        } != 0
        {
            return Err(ptrace_error(self.thread.pid, "ptrace(PTRACE_SETREGSET)"));
        }
        Ok(())
    }

    /// Resumes the thread until it returns to address 0; signals that arrive meanwhile are kept for
    /// when it is let go.
    fn run_until_return(&mut self) -> Result<u64, LaunchError> {
        self.run_call(
            libc::PTRACE_CONT,
            |thread, status| {
                if libc::WSTOPSIG(status) != libc::SIGSEGV {
                    return Ok(None);
                }
                Ok(arch::returned(&thread.get_regs()?))
            },
            || Ok(None),
        )
    }

    /// Resumes the thread with `request` (`PTRACE_CONT`, or `PTRACE_SYSCALL` to stop at system
    /// calls too) from stop to stop until `ended` says at a stop, or `ended_running` while it runs,
    /// that the call has (`Some`: what it returned). A fault is the call's crash; other signals are
    /// the program's, kept for when the thread is let go.
    fn run_call(
        &mut self,
        request: libc::c_uint,
        mut ended: impl FnMut(&Stopped, i32) -> Result<Option<u64>, LaunchError>,
        mut ended_running: impl FnMut() -> Result<Option<u64>, LaunchError>,
    ) -> Result<u64, LaunchError> {
        let started = Instant::now();
        let mut signal = 0;
        loop {
            // SAFETY: resuming our tracee.
            if unsafe { libc::ptrace(request, self.thread.tid, 0, signal) } != 0 {
                return Err(ptrace_error(self.thread.pid, "ptrace(PTRACE_CONT)"));
            }
            signal = 0;
            // A system call stop comes within microseconds: looked for at once at first (a sleep
            // is 50 µs or more, and the loader and the runtime's start make hundreds of calls).
            // Not when our thread runs at -20: yielding then leaves the CPU to us rather than to the
            // thread we wait for, when both are on one (a quiet attach took 3 times as long).
            let spins = if self.urgent.top { 0 } else { 1_000 };
            let mut looks = 0u32;
            let status = loop {
                match wait_nohang(self.thread.tid) {
                    Ok(Some(s)) => break s,
                    Ok(None) if ended_running()?.is_some() => return Ok(0),
                    Ok(None) if looks < spins => {
                        looks += 1;
                        std::thread::yield_now();
                    }
                    Ok(None) if started.elapsed() > CALL_TIMEOUT => {
                        return Err(LaunchError::CannotAttach {
                            pid: self.thread.pid,
                            why: format!(
                                "its thread {} did not come back from the loader within {:?} \
                                 (it may hold a lock the loader needs); the process is left as it \
                                 is, and the thread puts itself back when the call returns",
                                self.thread.tid, CALL_TIMEOUT
                            ),
                        });
                    }
                    Ok(None) => std::thread::sleep(Duration::from_micros(200)),
                    Err(e) => {
                        return Err(LaunchError::CannotAttach {
                            pid: self.thread.pid,
                            why: format!("waiting for its thread {}: {e}", self.thread.tid),
                        })
                    }
                }
            };
            if !libc::WIFSTOPPED(status) {
                self.thread.released = true; // nothing left to let go
                return Err(LaunchError::CannotAttach {
                    pid: self.thread.pid,
                    why: "it ended during the call".into(),
                });
            }
            if status >> 16 != 0 {
                continue; // an event stop (an interrupt): just resume
            }
            if let Some(value) = ended(&self.thread, status)? {
                return Ok(value);
            }
            match libc::WSTOPSIG(status) {
                s if s == libc::SIGTRAP | 0x80 => {} // a system call of the call's
                libc::SIGSEGV => {
                    let regs = self.thread.get_regs()?;
                    return Err(LaunchError::CannotAttach {
                        pid: self.thread.pid,
                        why: format!(
                            "the call crashed at {:#x} (SIGSEGV); its state was restored",
                            arch::instruction_pointer(&regs)
                        ),
                    });
                }
                // Any other signal is the program's: delivered when the thread is let go.
                sig => self.thread.pending_signal = sig,
            }
        }
    }

    /// Lets the thread go on where it was, with any signal that arrived meanwhile.
    pub fn release(mut self) -> Result<(), LaunchError> {
        self.unmap_stub();
        self.lent.lower();
        self.thread.let_go()
    }
}

impl Drop for Borrowed {
    fn drop(&mut self) {
        if !self.thread.released && self.thread.held() {
            self.unmap_stub();
            let _ = self.thread.set_regs(&self.resumed.unwrap_or(self.regs));
        }
        self.lent.lower();
        let _ = self.thread.let_go();
    }
}

/// The page size the call stub's page has.
const PAGE: u64 = 4096;

/// A word no call's stack is likely to hold by chance: what the stub writes when the call at
/// `frame` has ended (the frame's address and the clock, mixed).
fn call_nonce(frame: u64) -> u64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    (frame ^ now.rotate_left(29) ^ 0x9e37_79b9_7f4a_7c15).wrapping_mul(0xbf58_476d_1ce4_e5b9) | 1
}

/// The address in process `pid` of its C library's signal restorer (`__restore_rt`, a local
/// symbol: found by its bytes in the library's code).
fn restorer_in(pid: u32) -> Option<u64> {
    let (base, path) = load_address(pid, is_libc)?;
    let data = read_as_seen(pid, &path).ok()?;
    let elf = object::File::parse(&*data).ok()?;
    let linked_base = linked_base(&elf);
    elf.segments()
        .filter(|s| matches!(s.flags(), object::SegmentFlags::Elf { p_flags } if p_flags & object::elf::PF_X != 0))
        .find_map(|s| {
            let code = s.data().ok()?;
            let at = code.windows(arch::RESTORER.len()).position(|w| w == arch::RESTORER)?;
            Some(base + s.address() + at as u64 - linked_base)
        })
}

/// A free page-aligned address in process `pid` with a free page on either side: below its lowest
/// mapping (the executable, or the heap's neighbour), as `/proc/PID/maps` shows them.
fn free_page(pid: u32) -> Option<u64> {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).ok()?;
    let lowest = maps
        .lines()
        .filter_map(|l| u64::from_str_radix(l.split('-').next()?, 16).ok())
        .min()?;
    // Above the lowest address a process may map (vm.mmap_min_addr is 64 KiB by default).
    (lowest > (1 << 20)).then(|| lowest - 2 * PAGE)
}

/// Whether process `pid` has anonymous read-execute memory at `page` (the call stub's page, just
/// mapped).
fn anonymous_code_at(pid: u32, page: u64) -> bool {
    let Ok(maps) = std::fs::read_to_string(format!("/proc/{pid}/maps")) else {
        return false;
    };
    // (Addresses are printed with at least 8 digits: 003fe000 below a non-PIE's 0x400000.)
    maps.lines().any(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        let start = f
            .first()
            .and_then(|r| u64::from_str_radix(r.split('-').next()?, 16).ok());
        start == Some(page) && f.get(1) == Some(&"r-xp") && f.get(4) == Some(&"0") && f.len() == 5
    })
}

/// The signals thread `tid` of `pid` blocks (`SigBlk` in its status), which the signal frame of a
/// call restores.
fn blocked_signals(pid: u32, tid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("SigBlk:"))
                .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        })
        .unwrap_or(0)
}

/// An argument of [`Borrowed::call`].
pub enum Arg<'a> {
    /// An integer or address.
    Int(u64),
    /// A string, copied into the process and passed by address.
    Str(&'a str),
}

fn wait_nohang(tid: u32) -> std::io::Result<Option<i32>> {
    let mut status = 0;
    // SAFETY: waiting for our tracee, without blocking.
    match unsafe { libc::waitpid(tid as i32, &mut status, libc::__WALL | libc::WNOHANG) } {
        0 => Ok(None),
        r if r < 0 => Err(std::io::Error::last_os_error()),
        _ => Ok(Some(status)),
    }
}

/// Loads `library` into process `pid` (`dlopen(library, RTLD_NOW)` on one of its threads) and returns
/// the borrowed thread for further calls. The library is never unloaded: a thread may be inside it.
pub fn load_library(pid: u32, library: &Path) -> Result<Borrowed, LaunchError> {
    check(pid)?;
    let dlopen = loader_symbol(pid)?;
    let mut thread = Borrowed::stop(pid)?;
    dlopen_in(&mut thread, dlopen, library)?;
    Ok(thread)
}

/// Calls `dlopen(library, RTLD_NOW)` (the loader's, at `dlopen`) on the borrowed thread; the loader's
/// own message when it fails.
fn dlopen_in(thread: &mut Borrowed, dlopen: u64, library: &Path) -> Result<(), LaunchError> {
    let pid = thread.thread.pid;
    let path = library.to_string_lossy();
    let handle = thread.call(dlopen, &[Arg::Str(&path), Arg::Int(libc::RTLD_NOW as u64)])?;
    if handle == 0 {
        let why = symbol_in(pid, is_libc, &["dlerror"])
            .and_then(|dlerror| thread.call(dlerror, &[]))
            .map(|msg| thread.read_c_string(msg))
            .unwrap_or_default();
        return Err(LaunchError::CannotAttach {
            pid,
            why: format!("its loader could not load {}: {why}", library.display()),
        });
    }
    Ok(())
}

/// Makes, in the process, the memfd its runtime will put its chunk pool in
/// ([`ferrotrace_core::shared::MEMFD_NAME`], close-on-exec: `memfd_create` called on the borrowed
/// thread), and opens it here through `/proc/PID/fd` (ptrace rights over the process include that).
/// Its number in the process, and ours. `None` when the C library has no `memfd_create` (before glibc
/// 2.27) or the call fails: the recording then runs without a salvage; a descriptor made that we could
/// not open is still handed to the runtime, which closes it.
pub fn memfd_in(thread: &mut Borrowed) -> Option<(i32, Option<std::os::fd::OwnedFd>)> {
    let pid = thread.thread.pid;
    let create = symbol_in(pid, is_libc, &["memfd_create"]).ok()?;
    let name = ferrotrace_core::shared::MEMFD_NAME;
    let fd = thread
        .call(
            create,
            &[Arg::Str(name), Arg::Int(libc::MFD_CLOEXEC as u64)],
        )
        .ok()? as u32 as i32;
    if fd < 0 {
        return None;
    }
    let ours = File::options()
        .read(true)
        .write(true)
        .open(format!("/proc/{pid}/fd/{fd}"))
        .ok()
        .filter(|_| {
            std::fs::read_link(format!("/proc/{pid}/fd/{fd}"))
                .is_ok_and(|t| t.to_string_lossy().starts_with(&format!("/memfd:{name}")))
        });
    Some((fd, ours.map(Into::into)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The calling thread's nice value.
    fn nice() -> libc::c_int {
        // SAFETY: as in `Urgent::raise`.
        unsafe {
            let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
            libc::getpriority(libc::PRIO_PROCESS, tid)
        }
    }

    /// A borrowed thread's priority is put back by the guard when we are gone without putting it
    /// back (our end of the guard's pipe closed without a word, as when we are killed), and left
    /// alone when we dismiss the guard. Run on this test's own thread, as the borrowed one.
    #[test]
    fn the_guard_puts_a_lent_priority_back_when_we_die_first() {
        // SAFETY: gettid has no arguments and cannot fail.
        let tid = unsafe { libc::syscall(libc::SYS_gettid) } as u32;
        let own = nice();
        let mut lent = LentPriority::raise(tid);
        if !lent.raised {
            eprintln!("skipped: raising a priority is not allowed here");
            return;
        }
        assert_eq!(nice(), -20);
        // As if we died: the pipe closed, nothing said, nothing put back by us.
        let guard = lent.guard.take().unwrap();
        lent.raised = false;
        drop(lent);
        assert_eq!(nice(), -20);
        drop(guard.pipe);
        // SAFETY: waiting for our own child.
        unsafe { libc::waitpid(guard.child, &mut 0, 0) };
        assert_eq!(nice(), own, "put back by the guard");
        // Dismissed: the guard leaves the priority as we set it.
        let lent = LentPriority::raise(tid);
        assert!(lent.raised);
        drop(lent);
        assert_eq!(nice(), own, "put back by us");
    }

    #[test]
    fn urgent_raises_our_thread_s_priority_while_it_lives() {
        let before = nice();
        let (ask, asked) = std::sync::mpsc::channel::<()>();
        let other = std::thread::spawn(move || {
            asked.recv().unwrap();
            nice()
        });
        let urgent = Urgent::raise();
        match urgent.before {
            Some(n) => assert_eq!(n, before),
            // Not allowed here, or at -20 already: unchanged.
            None => assert_eq!(nice(), before),
        }
        assert_eq!(urgent.top, nice() == -20);
        ask.send(()).unwrap();
        assert_eq!(
            other.join().unwrap(),
            before,
            "only the calling thread is raised"
        );
        drop(urgent);
        assert_eq!(nice(), before);
    }
}
