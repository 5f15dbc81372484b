//! `ferrotrace record -p PID`: recording a process that is already running, from the host side. The
//! orchestration: [`super::check`] the process, load the preload library into it (dormant when
//! dlopened) on one borrowed thread, call its `ferrotrace_attach` there with the
//! [`RuntimeSpec`] (its output, `-F`/`-N`, and the control FIFO), which starts the runtime on a thread
//! of its own, let the thread go, wait for the start's outcome (and write the entry jumps it
//! prepared, every thread stopped), then wait for Ctrl-C (SIGINT, SIGTERM, SIGHUP), the duration, or
//! the process's end (a pidfd). To stop, the FIFO is closed: the runtime's collector sees its end of file (as it would if `record` died), puts every
//! patched site back, writes the trace with End reason `Stopped` and creates `done` beside the FIFO.
//! The library stays loaded and dormant: attaching again later starts a new runtime. The runtime's
//! chunk pool is in a memfd made in the process and opened here ([`super::memfd_in`]): when the
//! process is killed while recorded, [`Attached::recover_unwritten`] salvages what it had not written.

use ferrotrace_core::output::PrivateDir;
use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use ferrotrace_core::env::{RuntimeSpec, ATTACH_ENTRY_JUMPS_FILE, ATTACH_OUTCOME_FILE};
use ferrotrace_core::schema::source::HOW_TO_BUILD;

use super::entries;
use super::{check, dlopen_in, loader_symbol, memfd_in, symbol_in, Arg, Borrowed};
use crate::salvage::{Death, SalvageError, Salvaged};
use crate::LaunchError;

/// Why `--alloc` is refused with `-p`, in one line.
pub const ALLOC_REFUSAL: &str =
    "--alloc cannot be used on a running process: allocations are recorded by interposing the malloc \
     family from the program's start, and redirecting the calls of every loaded object afterwards would \
     hand the hooks blocks they never saw allocated; record it from its start (ferrotrace record --alloc \
     -- PROGRAM)";

/// Why `--sample` is refused with `-p`, in one line.
pub const SAMPLE_REFUSAL: &str =
    "--sample cannot be used on a running process: record --sample opens its samplers on the program \
     it starts, before its first instruction, and merges them into that trace; to sample a running \
     process, use ferrotrace profile -p PID (samples alone)";

/// How long, after the control channel is closed, the runtime may take to write the rest of the trace.
pub const STOP_LIMIT: Duration = Duration::from_secs(30);

/// How an attached recording ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ending {
    /// We stopped it: a signal to us (the number), or the duration ran out (`None`).
    Stopped(Option<i32>),
    /// The process ended while it was recorded (its runtime finished the trace as at any exit).
    ProcessEnded,
    /// We closed the control channel, but the runtime did not say it was done within [`STOP_LIMIT`].
    NoAnswer,
    /// The process replaced its program (`exec`) while it was recorded: the runtime went with the
    /// old program, without finishing its trace.
    Replaced,
}

/// What the host is told once an attached recording runs.
#[derive(Debug)]
pub struct Started<'a> {
    /// How long the borrowed thread was held (the dlopen, and the start of the thread that starts
    /// the runtime).
    pub pause: Duration,
    /// The runtime's warnings (a `-F`/`-P` pattern that selects nothing, said as a launched recording
    /// says it), and the functions whose entries were left unpatched and why.
    pub warnings: &'a [String],
    /// Function entries of uninstrumented code patched ([`entries::write()`]).
    pub entries_patched: usize,
    /// How long every thread was stopped while they were (the borrowed one is held longer).
    pub threads_held: Duration,
}

/// What an attached recording did.
#[derive(Debug)]
pub struct Attached {
    /// The process.
    pub pid: u32,
    /// How long its borrowed thread was held (from the ptrace seize to the release): the dlopen and
    /// the start of the thread that starts the runtime (which runs on, with the other threads).
    pub pause: Duration,
    /// How it ended.
    pub ending: Ending,
    /// The memfd holding the runtime's chunk pool (made in the process, opened here), for the salvage.
    pool: Option<OwnedFd>,
    /// How the process ended, read as soon as it had ([`Death::of_zombie`]), when it ended.
    death: Option<Death>,
    /// The entries of objects it loaded while recorded.
    pub later: LaterEntries,
}

impl Attached {
    /// After the process ended while recorded without finishing its trace at `output` (no End chunk:
    /// SIGKILL, the OOM killer, `_exit` — not interposed when attached), appends the events its
    /// runtime had recorded but not written, from the chunk pool it shared with us, and how it died
    /// (from its zombie's `/proc/PID/stat`; [`Death::Unknown`] when its parent collected it first).
    /// `None` when no pool was shared (a C library without `memfd_create`).
    pub fn recover_unwritten(
        &self,
        output: &Path,
    ) -> Option<(Death, Result<Option<Salvaged>, SalvageError>)> {
        let death = match self.ending {
            Ending::Replaced => Death::Exec,
            _ => self.death.unwrap_or(Death::Unknown),
        };
        crate::salvage::from_pool(self.pool.as_ref()?, output, death).map(|r| (death, r))
    }
}

fn error(pid: u32, why: impl Into<String>) -> LaunchError {
    LaunchError::CannotAttach {
        pid,
        why: why.into(),
    }
}

/// A private directory (0700, [`PrivateDir`]: removed when dropped) holding the control FIFO (and
/// `live -p`'s), with a descriptor of it opened while only we could use it. Root attaching to another
/// user's process gives the directory to that user (the runtime runs as them), who can then rename,
/// replace and plant anything in it: so the FIFOs are made, opened and given before the directory
/// is, and everything read there afterwards is opened through the descriptor without following a
/// link, and must be a regular file of the user who could write it.
struct ControlDir {
    dir: PrivateDir,
    fd: OwnedFd,
    /// Who may have written its files: the target's user when the directory was given to them, else us.
    writer: u32,
}

/// The control directory's name in the temporary directory: `PREFIX<our pid>-XXXXXX`.
const STALE_PREFIX: &str = "ferrotrace-attach-";

/// Removes the control directories of attaches that were killed before they could (SIGKILL): those
/// whose name says their `record -p` or `live -p` process, and no such process runs. Only our own
/// (root's: any, as root may have given one to the target's user); `remove_dir_all` follows no
/// links.
fn sweep_stale_dirs() {
    use std::os::unix::fs::MetadataExt;
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(host) = name
            .to_str()
            .and_then(|n| n.strip_prefix(STALE_PREFIX))
            .and_then(|rest| rest.split_once('-'))
            .and_then(|(pid, _)| pid.parse::<u32>().ok())
        else {
            continue;
        };
        if Path::new(&format!("/proc/{host}")).exists() {
            continue;
        }
        let path = entry.path();
        match std::fs::symlink_metadata(&path) {
            Ok(m) if m.is_dir() && (m.uid() == me || me == 0) => {
                let _ = std::fs::remove_dir_all(&path);
            }
            _ => {}
        }
    }
}

/// What a file the runtime leaves in the control directory may hold at most.
const MOST_READ: u64 = 64 << 20;

fn cstring(name: &str) -> std::ffi::CString {
    std::ffi::CString::new(name).unwrap_or_default()
}

/// The control FIFO (held for writing until the recording is to stop) and `live -p`'s (read).
struct Fifos {
    control: File,
    live: Option<File>,
}

impl ControlDir {
    /// Makes the directory, the control FIFO and, with `live`, the live FIFO, and gives them to the
    /// target's user when root attaches to another user's process (the FIFOs first, each through its
    /// open descriptor; the directory last).
    fn new(pid: u32, live: bool) -> Result<(ControlDir, Fifos), LaunchError> {
        sweep_stale_dirs();
        let dir = PrivateDir::new(&format!("{STALE_PREFIX}{}", std::process::id()))
            .map_err(|e| error(pid, format!("cannot create a private directory: {e}")))?;
        let c = std::ffi::CString::new(dir.path().as_os_str().as_bytes()).unwrap_or_default();
        // SAFETY: a NUL-terminated path.
        let fd = unsafe {
            libc::open(
                c.as_ptr(),
                libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC,
            )
        };
        if fd < 0 {
            return Err(error(
                pid,
                format!(
                    "{}: {}",
                    dir.path().display(),
                    std::io::Error::last_os_error()
                ),
            ));
        }
        // SAFETY: a descriptor just opened, ours alone.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: geteuid has no preconditions.
        let me = unsafe { libc::geteuid() };
        let given = owner(pid).filter(|&(uid, _)| me == 0 && uid != 0);
        let made = ControlDir {
            dir,
            fd,
            writer: given.map_or(me, |(uid, _)| uid),
        };
        // O_RDWR so that opening does not wait for the runtime's end.
        let control = made.fifo(pid, "control", libc::O_RDWR)?;
        let live = if live {
            Some(made.fifo(pid, "live", libc::O_RDONLY | libc::O_NONBLOCK)?)
        } else {
            None
        };
        if let Some((uid, gid)) = given {
            for fd in [Some(&control), live.as_ref()].into_iter().flatten() {
                made.give(pid, fd.as_raw_fd(), uid, gid)?;
            }
            made.give(pid, made.fd.as_raw_fd(), uid, gid)?;
        }
        Ok((made, Fifos { control, live }))
    }

    /// Makes the FIFO `name` (mode 0600) and opens it with `flags`.
    fn fifo(&self, pid: u32, name: &str, flags: libc::c_int) -> Result<File, LaunchError> {
        let c = cstring(name);
        // SAFETY: our directory's descriptor and a NUL-terminated name.
        if unsafe { libc::mkfifoat(self.fd.as_raw_fd(), c.as_ptr(), 0o600) } != 0 {
            return Err(error(
                pid,
                format!("mkfifo: {}", std::io::Error::last_os_error()),
            ));
        }
        // SAFETY: as above.
        let fd = unsafe {
            libc::openat(
                self.fd.as_raw_fd(),
                c.as_ptr(),
                flags | libc::O_NOFOLLOW | libc::O_CLOEXEC,
            )
        };
        if fd < 0 {
            return Err(error(
                pid,
                format!(
                    "{}: {}",
                    self.path().join(name).display(),
                    std::io::Error::last_os_error()
                ),
            ));
        }
        // SAFETY: a descriptor just opened, ours alone.
        Ok(File::from(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    /// Gives the open file `fd` to the target's user.
    fn give(&self, pid: u32, fd: i32, uid: u32, gid: u32) -> Result<(), LaunchError> {
        // SAFETY: an open descriptor.
        if unsafe { libc::fchown(fd, uid, gid) } != 0 {
            return Err(error(
                pid,
                format!(
                    "cannot give {} to user {uid}: {}",
                    self.path().display(),
                    std::io::Error::last_os_error()
                ),
            ));
        }
        Ok(())
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// The file `name` the runtime left here: `None` unless it is a regular file of [`Self::writer`]
    /// with one link (a link planted to another file, a FIFO or a hard link to someone else's file is
    /// never read).
    fn read(&self, name: &str) -> Option<String> {
        use std::io::Read;
        use std::os::unix::fs::MetadataExt;
        let c = cstring(name);
        // SAFETY: our directory's descriptor and a NUL-terminated name.
        let fd = unsafe {
            libc::openat(
                self.fd.as_raw_fd(),
                c.as_ptr(),
                libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC,
            )
        };
        if fd < 0 {
            return None;
        }
        // SAFETY: a descriptor just opened, ours alone.
        let file = File::from(unsafe { OwnedFd::from_raw_fd(fd) });
        let meta = file.metadata().ok()?;
        if !meta.is_file() || meta.uid() != self.writer || meta.nlink() != 1 {
            return None;
        }
        let mut text = String::new();
        file.take(MOST_READ).read_to_string(&mut text).ok()?;
        Some(text)
    }

    /// Whether `name` exists here (a link is not followed).
    fn has(&self, name: &str) -> bool {
        let c = cstring(name);
        // SAFETY: plain data the kernel fills.
        let mut st: libc::stat = unsafe { core::mem::zeroed() };
        // SAFETY: our directory's descriptor, a NUL-terminated name and a stat buffer.
        unsafe {
            libc::fstatat(
                self.fd.as_raw_fd(),
                c.as_ptr(),
                &mut st,
                libc::AT_SYMLINK_NOFOLLOW,
            ) == 0
        }
    }
}

/// The real uid and gid of process `pid`.
fn owner(pid: u32) -> Option<(u32, u32)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))?
            .split_whitespace()
            .next()?
            .parse()
            .ok()
    };
    Some((field("Uid:")?, field("Gid:")?))
}

/// The signals that stop an attached recording, blocked on this thread and read from a signalfd.
const STOP_SIGNALS: [libc::c_int; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];

/// Blocks [`STOP_SIGNALS`] on the calling thread until dropped; a signalfd reads them.
struct StopSignals {
    old: libc::sigset_t,
    fd: OwnedFd,
}

impl StopSignals {
    fn new() -> std::io::Result<StopSignals> {
        // SAFETY: sigset operations on local sets; signalfd on a valid set.
        unsafe {
            let mut set: libc::sigset_t = core::mem::zeroed();
            libc::sigemptyset(&mut set);
            for s in STOP_SIGNALS {
                libc::sigaddset(&mut set, s);
            }
            let mut old: libc::sigset_t = core::mem::zeroed();
            libc::pthread_sigmask(libc::SIG_BLOCK, &set, &mut old);
            let fd = libc::signalfd(-1, &set, libc::SFD_CLOEXEC | libc::SFD_NONBLOCK);
            if fd < 0 {
                let e = std::io::Error::last_os_error();
                libc::pthread_sigmask(libc::SIG_SETMASK, &old, core::ptr::null_mut());
                return Err(e);
            }
            Ok(StopSignals {
                old,
                fd: OwnedFd::from_raw_fd(fd),
            })
        }
    }

    /// The signal that arrived, if any.
    fn take(&self) -> Option<i32> {
        // SAFETY: plain data the kernel fills.
        let mut info: libc::signalfd_siginfo = unsafe { core::mem::zeroed() };
        let size = core::mem::size_of::<libc::signalfd_siginfo>();
        // SAFETY: reading one siginfo into a buffer of its size.
        let n = unsafe {
            libc::read(
                self.fd.as_raw_fd(),
                (&mut info as *mut libc::signalfd_siginfo).cast(),
                size,
            )
        };
        (n == size as isize).then_some(info.ssi_signo as i32)
    }
}

impl Drop for StopSignals {
    fn drop(&mut self) {
        // SAFETY: restoring the mask saved by `new`.
        unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &self.old, core::ptr::null_mut()) };
    }
}

/// Waits (at most `limit`, `None`: forever) until one of `fds` is readable: its index.
fn poll(fds: &[i32], limit: Option<Duration>) -> Option<usize> {
    let mut p: Vec<libc::pollfd> = fds
        .iter()
        .map(|&fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    let timeout = limit.map_or(-1, |d| d.as_millis().min(i32::MAX as u128) as i32);
    // SAFETY: a valid array of pollfds.
    let n = unsafe { libc::poll(p.as_mut_ptr(), p.len() as libc::nfds_t, timeout) };
    if n <= 0 {
        return None;
    }
    p.iter().position(|f| f.revents != 0)
}

/// How long the runtime's start may take, on its thread of its own, before we give up (and close the
/// control channel, which stops it if it starts after all): on two CPUs among 256 busy threads it
/// took seconds.
const START_LIMIT: Duration = Duration::from_secs(30);

/// Waits for the runtime's start (`ferrotrace_attach` returned once the thread that runs it was
/// made) to say how it went, in [`ATTACH_OUTCOME_FILE`]: its code, 0 when it records. Fails when the
/// process ends first, replaces its program (its `library`, when one was loaded, gone from its
/// mappings), or after [`START_LIMIT`].
fn start_outcome(
    dir: &ControlDir,
    pid: u32,
    pidfd: i32,
    library: Option<&PathBuf>,
) -> Result<i32, LaunchError> {
    let asked = Instant::now();
    let mut looked = Instant::now();
    loop {
        // Whole once it ends with its newline. Whether it is there is asked first: made between a
        // `read` that missed it and the question, it would pass for something else in its place.
        let there = dir.has(ATTACH_OUTCOME_FILE);
        match dir.read(ATTACH_OUTCOME_FILE) {
            Some(t) => {
                if let Some(code) = t.strip_suffix('\n').and_then(|c| c.parse().ok()) {
                    return Ok(code);
                }
            }
            // Something else in its place (a link, a FIFO, another user's file): never read.
            None if there => {
                return Err(error(
                    pid,
                    format!("its runtime's {ATTACH_OUTCOME_FILE} is not a file of its own"),
                ))
            }
            None => {}
        }
        if poll(&[pidfd], Some(Duration::from_millis(2))) == Some(0) {
            return Err(error(pid, "it ended while its runtime was starting"));
        }
        if looked.elapsed() > Duration::from_millis(250) {
            looked = Instant::now();
            let mark = library.map(|l| l.display().to_string());
            if mark.is_some_and(|m| !maps_hold(pid, &m)) && !crate::attach::process_ended(pid) {
                return Err(error(
                    pid,
                    "it replaced its program (exec) while its runtime was starting",
                ));
            }
        }
        if asked.elapsed() > START_LIMIT {
            return Err(error(
                pid,
                format!("its runtime did not say it had started within {START_LIMIT:?}"),
            ));
        }
    }
}

/// `live -p`: the runtime's printed events, read from a FIFO beside the control FIFO and copied to a
/// writer line by line.
pub struct LiveCopy<'a> {
    fifo: File,
    out: &'a mut dyn std::io::Write,
    partial: Vec<u8>,
}

impl LiveCopy<'_> {
    /// Copies the whole lines waiting in the FIFO; a last partial line waits for its end.
    fn copy(&mut self) {
        use std::io::Read;
        let mut buf = [0u8; 64 << 10];
        loop {
            match self.fifo.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => self.partial.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(_) => break,
            }
        }
        if let Some(end) = self.partial.iter().rposition(|&b| b == b'\n') {
            let _ = self.out.write_all(&self.partial[..=end]);
            let _ = self.out.flush();
            self.partial.drain(..=end);
        }
    }
}

/// Records process `pid` with the runtime `library` (the preload library) as `spec` says (its output
/// an absolute path the process can write) until a signal to us, `duration` or the process's end.
/// `started` is called once the recording runs ([`Started`]). With `live`, the
/// runtime also prints the events as they happen, copied there (and its trace goes to a private
/// directory, removed at the end).
pub fn record(
    pid: u32,
    library: &Path,
    mut spec: RuntimeSpec,
    duration: Option<Duration>,
    live: Option<&mut dyn std::io::Write>,
    started: impl FnOnce(&Started),
) -> Result<Attached, LaunchError> {
    check(pid)?;
    let exe = PathBuf::from(format!("/proc/{pid}/exe"));
    let facts = crate::program::inspect(&exe)?;
    let name = std::fs::read_link(&exe).unwrap_or_else(|_| exe.clone());
    // A program that links the runtime is recorded by its own copy: no library to load.
    let linked = if facts.links_runtime {
        Some(linked_entry(pid, &name)?)
    } else {
        None
    };
    if spec.alloc.is_some() {
        return Err(error(pid, ALLOC_REFUSAL));
    }
    if spec.sampled {
        return Err(error(pid, SAMPLE_REFUSAL));
    }
    let tracepoints = !spec.trace.is_empty();
    if tracepoints && !(facts.links_runtime && facts.has_tracepoints) {
        return Err(error(
            pid,
            format!(
                "--trace: {} has no tracepoints (they are declared with the ferrotrace crate's \
                 tracepoint! in programs that link it; the preload library brings none)",
                name.display()
            ),
        ));
    }
    let uninstrumented = facts.instrumentation == 0 && !facts.links_runtime;
    if uninstrumented && crate::checks::dynamic_line(&exe, !spec.patch.is_empty()).is_none() {
        return Err(error(
            pid,
            format!(
                "this binary ({}) has no patchable sites: none of its functions can have its entry \
                 patched (`ferrotrace list --dynamic` says why) and no -P names library functions; \
                 {HOW_TO_BUILD}",
                name.display()
            ),
        ));
    }
    let library = library
        .canonicalize()
        .unwrap_or_else(|_| library.to_path_buf());
    let signals = StopSignals::new().map_err(|e| error(pid, format!("signalfd: {e}")))?;
    let (dir, fifos) = ControlDir::new(pid, live.is_some())?;
    let fifo = fifos.control;
    spec.control = Some(dir.path().join("control"));
    let mut live = match (live, fifos.live) {
        (Some(out), Some(fifo)) => {
            spec.live_fifo = Some(dir.path().join("live"));
            spec.output = Some(dir.path().join("trace.data"));
            Some(LiveCopy {
                fifo,
                out,
                partial: Vec::new(),
            })
        }
        _ => None,
    };
    let pidfd =
        crate::relay::pidfd_open(pid).map_err(|e| error(pid, format!("pidfd_open: {e}")))?;
    let dlopen = match linked {
        Some(_) => 0,
        None => loader_symbol(pid)?,
    };
    let seized = Instant::now();
    let mut thread = Borrowed::stop(pid)?;
    let mut pool = None;
    let called = match linked {
        Some(entry) => Ok(entry),
        None => dlopen_in(&mut thread, dlopen, &library)
            .map_err(|e| static_tls_hint(pid, e))
            .and_then(|()| symbol_in(pid, |p| Path::new(p) == library, &["ferrotrace_attach"])),
    }
    .and_then(|entry| {
        // The chunk pool in a memfd we can read after a SIGKILL; the runtime closes its descriptor
        // (whether it starts or not) once the pool maps it.
        if let Some((theirs, ours)) = memfd_in(&mut thread) {
            spec.shared_fd = Some(theirs);
            pool = ours;
        }
        spec.start_nice = Some(thread.own_nice());
        thread.call(entry, &[Arg::Str(&spec.to_lines())])
    });
    // The runtime starts on a thread of its own: the borrowed one goes back to the program now.
    let released = thread.release();
    let pause = seized.elapsed();
    let rc = called? as u32 as i32;
    released?;
    let rc = match rc {
        0 => start_outcome(
            &dir,
            pid,
            pidfd.as_raw_fd(),
            linked.is_none().then_some(&library),
        )?,
        refused => refused,
    };
    if rc != 0 {
        let why = dir
            .read("error")
            .map(|m| m.trim_end().to_string())
            .unwrap_or_else(|| format!("its runtime refused to start (code {rc})"));
        return Err(error(pid, why));
    }
    // The runtime records: the entries it prepared are patched now, every thread stopped. Failed
    // (the process ended, or its code could not be written), returning closes the control channel,
    // which stops the runtime.
    let mut patched = entries::write(
        pid,
        entries::listed(&dir.read(ATTACH_ENTRY_JUMPS_FILE).unwrap_or_default()),
    )?;
    let mut warnings: Vec<String> = dir
        .read(ferrotrace_core::env::ATTACH_WARNINGS_FILE)
        .unwrap_or_default()
        .lines()
        .map(String::from)
        .collect();
    warnings.extend(patched.left_out());
    started(&Started {
        pause,
        warnings: &warnings,
        entries_patched: patched.written.len(),
        threads_held: patched.threads_held,
    });
    let mut fds = vec![pidfd.as_raw_fd(), signals.fd.as_raw_fd()];
    if let Some(l) = &live {
        fds.push(l.fifo.as_raw_fd());
    }
    // What the runtime keeps mapped while it lives: an `exec` takes it away with the old program
    // (no file descriptor of ours tells: the process goes on).
    let runtime_mark = match (&pool, linked) {
        (Some(_), _) => Some(format!("/memfd:{}", ferrotrace_core::shared::MEMFD_NAME)),
        (None, None) => Some(library.display().to_string()),
        (None, Some(_)) => None,
    };
    let begun = Instant::now();
    let mut later = LaterEntries::default();
    let stop = loop {
        let left = duration.map(|d| d.saturating_sub(begun.elapsed()));
        if left == Some(Duration::ZERO) {
            break None;
        }
        later.patch(&dir, pid, &mut patched);
        if runtime_mark
            .as_deref()
            .is_some_and(|mark| !maps_hold(pid, mark))
            && !crate::attach::process_ended(pid)
        {
            if let Some(l) = &mut live {
                l.copy();
            }
            return Ok(Attached {
                pid,
                pause,
                ending: Ending::Replaced,
                pool,
                death: None,
                later,
            });
        }
        let look = Duration::from_millis(250);
        match poll(&fds, Some(left.map_or(look, |l| l.min(look)))) {
            Some(0) => {
                // Before its parent collects it.
                let death = Death::of_zombie(pid);
                if let Some(l) = &mut live {
                    l.copy();
                }
                return Ok(Attached {
                    pid,
                    pause,
                    ending: Ending::ProcessEnded,
                    pool,
                    death,
                    later,
                });
            }
            Some(2) => {
                if let Some(l) = &mut live {
                    l.copy();
                }
            }
            Some(_) => {
                if let Some(sig) = signals.take() {
                    break Some(sig);
                }
            }
            None => {}
        }
    };
    // The entries back first, every thread stopped again; the runtime, told to stop, then finds
    // them as they were.
    if let Err(e) = entries::restore(pid, &patched) {
        if crate::attach::process_ended(pid) {
            return Ok(Attached {
                pid,
                pause,
                ending: Ending::ProcessEnded,
                pool,
                death: Death::of_zombie(pid),
                later,
            });
        }
        return Err(e);
    }
    drop(fifo);
    let asked = Instant::now();
    let mut death = None;
    let ending = loop {
        if let Some(l) = &mut live {
            l.copy();
        }
        if dir.has("done") {
            if let Some(l) = &mut live {
                l.copy();
            }
            break Ending::Stopped(stop);
        }
        if asked.elapsed() > STOP_LIMIT {
            break Ending::NoAnswer;
        }
        if poll(&fds[..1], Some(Duration::from_millis(10))) == Some(0) {
            death = Death::of_zombie(pid);
            break Ending::ProcessEnded;
        }
    };
    Ok(Attached {
        pid,
        pause,
        ending,
        pool,
        death,
        later,
    })
}

/// The entries of objects the process loaded while recorded (`dlopen`), patched by the host as at
/// the start: the attached runtime's rescan (every second) finds them and builds their trampolines,
/// and lists their jumps in the next numbered file beside the control FIFO
/// ([`ferrotrace_core::env::later_entry_jumps_file`]), which the host looks for each time it wakes
/// (at least every 250 ms) and writes with every thread stopped, leaving out any function a thread
/// might resume inside of. They are put back at the stop with the first ones.
#[derive(Debug, Default)]
pub struct LaterEntries {
    /// The numbered lists written so far.
    lists: u32,
    /// The entries patched.
    pub patched: usize,
    /// What was left out and why, one line each (as [`Started::warnings`]).
    pub warnings: Vec<String>,
}

impl LaterEntries {
    /// Writes every list the runtime handed over since the last look, in order; what is written
    /// joins `patched`. A list that cannot be written (the process ended meanwhile) leaves its
    /// functions untraced and is said; the recording goes on.
    fn patch(&mut self, dir: &ControlDir, pid: u32, patched: &mut entries::Patched) {
        while let Some(listing) = dir.read(&ferrotrace_core::env::later_entry_jumps_file(
            self.lists + 1,
        )) {
            self.lists += 1;
            let jumps = entries::listed(&listing);
            let listed = jumps.len();
            match entries::write(pid, jumps) {
                Ok(more) => {
                    self.patched += more.written.len();
                    self.warnings.extend(more.left_out());
                    patched.join(more);
                }
                Err(e) => self.warnings.push(format!(
                    "{listed} function entries of an object loaded while recorded left untraced: {e}"
                )),
            }
        }
    }
}

/// Whether process `pid`'s mappings name `mark` (a path, or a memfd's name); true when they cannot be
/// read (nothing to conclude).
fn maps_hold(pid: u32, mark: &str) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/maps")).map_or(true, |m| m.contains(mark))
}

/// Where the runtime that `exe` (process `pid`'s executable) links has its attach entry point,
/// `ferrotrace_attach_linked`: found in the file's symbol table (executables export nothing
/// dynamically), relocated by where the file is loaded.
fn linked_entry(pid: u32, exe: &Path) -> Result<u64, LaunchError> {
    use object::{Object, ObjectSymbol};
    let data = std::fs::read(format!("/proc/{pid}/exe"))
        .map_err(|e| error(pid, format!("{}: {e}", exe.display())))?;
    let elf =
        object::File::parse(&*data).map_err(|e| error(pid, format!("{}: {e}", exe.display())))?;
    let symbol = elf
        .symbols()
        .find(|s| s.is_definition() && s.name() == Ok("ferrotrace_attach_linked"))
        .ok_or_else(|| {
            error(
                pid,
                format!(
                    "{} links the ferrotrace runtime, but not one that can be attached to (no \
                     ferrotrace_attach_linked in its symbol table: stripped, or an older ferrotrace)",
                    exe.display()
                ),
            )
        })?;
    let linked_base = super::linked_base(&elf);
    let base = if elf.kind() == object::ObjectKind::Dynamic {
        super::load_address(pid, |p| Path::new(p) == exe)
            .map(|(b, _)| b)
            .ok_or_else(|| error(pid, format!("{} is not mapped in it", exe.display())))?
    } else {
        linked_base
    };
    Ok(base + symbol.address() - linked_base)
}

/// The loader's refusal for want of static TLS, as one line naming the tunable that makes room.
fn static_tls_hint(pid: u32, e: LaunchError) -> LaunchError {
    match e {
        LaunchError::CannotAttach { why, .. } if why.contains("static TLS") => error(
            pid,
            format!(
                "{why} (the runtime needs its thread-local block in static TLS; restart the program with \
                 GLIBC_TUNABLES=glibc.rtld.optional_static_tls=4096 to leave room for it)"
            ),
        ),
        e => e,
    }
}
