//! Starting a program under the runtime: the one spawn sequence of `record` and `live`.
//!
//! [`Program::find`] resolves and inspects the program; [`start`] chooses the runtime (the program's
//! linked copy, else the preload library ahead of any `LD_PRELOAD`), hands it the [`RuntimeSpec`]
//! through the environment, shares the chunk pool (for salvage after a kill) and a descriptor (for
//! `live`), blocks the relayed signals here and unblocks them in the child, and starts the relay.
//! [`Running::wait`] gives the [`Ended`] program, which can recover what a killed program had not
//! written.

use std::ffi::OsString;
use std::os::fd::{OwnedFd, RawFd};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus};

use ferrotrace_core::env::{RuntimeSpec, Which};
use ferrotrace_core::schema::Usage;

use crate::program::{inspect, resolve, ProgramFacts};
use crate::salvage::{Death, SalvageError, Salvaged};
use crate::{pool, relay, LaunchError};

/// A program to run: the file `execvp` would run, its arguments, and what it holds.
pub struct Program {
    /// The file that runs (resolved as `execvp` does; always contains a `/`).
    pub path: PathBuf,
    /// Its `argv`: the name as given, then the arguments.
    pub argv: Vec<OsString>,
    /// What its file holds.
    pub facts: ProgramFacts,
}

impl Program {
    /// Resolves `command[0]` and inspects the file found.
    pub fn find(command: &[OsString]) -> Result<Program, LaunchError> {
        let name = command
            .first()
            .ok_or_else(|| LaunchError::BadOption("no program given".into()))?;
        let path = resolve(name)?;
        let facts = inspect(&path)?;
        Ok(Program {
            path,
            argv: command.to_vec(),
            facts,
        })
    }
}

/// What [`start`] sets up beside the runtime's settings.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// Share the chunk pool with us, so that [`Ended::recover_unwritten`] can salvage after a kill.
    pub share_pool: bool,
    /// A descriptor of ours the program inherits and the runtime prints live events to.
    pub live_fd: Option<RawFd>,
    /// Hold the forked child before its `execve` until released (`record --sample`'s sampler opens
    /// its events meanwhile): [`crate::hold`].
    pub hold: Option<crate::hold::HoldFds>,
    /// More `-A`/`-R` lines than the environment holds (`record --auto-args`: every function with
    /// debug info), handed to the runtime in a memfd ([`ferrotrace_core::env::ARGS_FD`]).
    pub more_args: Option<String>,
}

/// The runtime library to preload: [`ferrotrace_core::env::PRELOAD`], or next to this executable
/// (or one directory up, where cargo puts libraries beside `deps/`). Run as root (or setuid), the
/// library named by the variable must be one that only root can change ([`untrusted`]); it is
/// returned resolved, so that nobody can swap a link on the way afterwards.
pub fn preload_library() -> Result<PathBuf, LaunchError> {
    if let Some(p) = std::env::var_os(ferrotrace_core::env::PRELOAD) {
        let library = PathBuf::from(p);
        if !privileged() {
            return Ok(library);
        }
        return checked_preload(&library);
    }
    let exe = std::env::current_exe().map_err(|source| LaunchError::Setup {
        what: "cannot locate the ferrotrace executable",
        source,
    })?;
    let dir = exe.parent().unwrap_or(Path::new("."));
    [
        dir.join("libferrotrace_preload.so"),
        dir.join("../libferrotrace_preload.so"),
    ]
    .into_iter()
    .find(|c| c.is_file())
    .map(|c| c.canonicalize().unwrap_or(c))
    .ok_or(LaunchError::NoPreloadLibrary { beside: exe })
}

/// Whether we run as root or setuid: the processes we start, or attach to as root, are privileged or
/// another user's.
fn privileged() -> bool {
    // SAFETY: getuid and geteuid have no preconditions.
    unsafe { libc::geteuid() == 0 || libc::getuid() != libc::geteuid() }
}

/// `library` (named by [`ferrotrace_core::env::PRELOAD`]) resolved, for a privileged process: refused
/// when [`untrusted`].
pub fn checked_preload(library: &Path) -> Result<PathBuf, LaunchError> {
    let refuse = |why: String| LaunchError::UntrustedPreload {
        library: library.to_path_buf(),
        why,
    };
    let resolved = library
        .canonicalize()
        .map_err(|e| refuse(format!("cannot resolve it ({e})")))?;
    match untrusted(&resolved) {
        Some(why) => Err(refuse(why)),
        None => Ok(resolved),
    }
}

/// Why the file at the resolved path `file` could be changed by someone other than root, if it could:
/// it or a directory above it is owned by another user, or writable by its group or by others. A
/// sticky directory writable by all (`/tmp`) is no way in: only root can rename or remove root's
/// entries there, and the entry below it is root's.
pub fn untrusted(file: &Path) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    for (at, path) in file.ancestors().enumerate() {
        let meta = match std::fs::symlink_metadata(path) {
            Ok(m) => m,
            Err(e) => return Some(format!("{}: {e}", path.display())),
        };
        if meta.uid() != 0 {
            return Some(format!(
                "{} is owned by user {}",
                path.display(),
                meta.uid()
            ));
        }
        let sticky_dir = at > 0 && meta.mode() & libc::S_ISVTX != 0;
        let writable = match meta.mode() & 0o022 {
            0 => None,
            0o020 => Some("its group"),
            0o002 => Some("everyone"),
            _ => Some("its group and everyone"),
        };
        if let Some(who) = writable.filter(|_| !sticky_dir) {
            return Some(format!("{} is writable by {who}", path.display()));
        }
    }
    None
}

/// Makes `cmd` start a runtime in `program`: its own linked copy when it has one, else the preload
/// library (ahead of any `LD_PRELOAD` already set), with `libferrotrace_alloc.so` in front of it when
/// the spec records allocations. Sets `spec.runtime` to the copy chosen.
fn inject_runtime(
    cmd: &mut Command,
    program: &Program,
    spec: &mut RuntimeSpec,
) -> Result<(), LaunchError> {
    if program.facts.links_runtime {
        spec.runtime = Some(Which::Linked);
        return Ok(());
    }
    if !program.facts.dynamic {
        return Err(LaunchError::StaticallyLinked(program.path.clone()));
    }
    let runtime = preload_library()?;
    let mut preload = std::ffi::OsString::new();
    if spec.alloc.is_some() {
        // The malloc family is interposed only when asked for (without --alloc the program's
        // allocator is not touched at all), and first: the hooks look the C library's functions up
        // with dlsym(RTLD_NEXT) from the runtime's library, which must not find these again.
        let alloc = runtime.with_file_name("libferrotrace_alloc.so");
        if !alloc.is_file() {
            return Err(LaunchError::NoAllocLibrary { beside: runtime });
        }
        if let Some(why) = untrusted(&alloc).filter(|_| privileged()) {
            return Err(LaunchError::UntrustedPreload {
                library: runtime,
                why,
            });
        }
        preload.push(alloc);
        preload.push(":");
    }
    preload.push(runtime);
    if let Some(old) = std::env::var_os("LD_PRELOAD").filter(|o| !o.is_empty()) {
        preload.push(":");
        preload.push(old);
    }
    cmd.env("LD_PRELOAD", preload);
    spec.runtime = Some(Which::Preload);
    Ok(())
}

/// The command that runs the file `path` (found as `execvp` finds it) with `argv`, `argv[0]` as
/// the user wrote it.
pub(crate) fn command(path: &Path, argv: &[OsString]) -> Command {
    let mut cmd = Command::new(path);
    if let Some((name, args)) = argv.split_first() {
        cmd.arg0(name).args(args);
    }
    cmd
}

/// Starts `program` with the runtime configured by `spec`. Like a shell waiting for a job: the
/// terminal's Ctrl-C and Ctrl-\ go to the program (same process group), and signals sent to us alone
/// are passed on ([`crate::relay`]); we outlive the program to finish its trace.
pub fn start(
    program: &Program,
    mut spec: RuntimeSpec,
    options: Options,
) -> Result<Running, LaunchError> {
    let mut cmd = command(&program.path, &program.argv);
    inject_runtime(&mut cmd, program, &mut spec)?;
    let pool = if options.share_pool {
        let fd = pool::share(&mut cmd)?;
        spec.shared_fd = Some(std::os::fd::AsRawFd::as_raw_fd(&fd));
        Some(fd)
    } else {
        None
    };
    let _more_args = match &options.more_args {
        Some(lines) => {
            let fd = crate::pool::inherited_memfd(&mut cmd, ferrotrace_core::env::ARGS_MEMFD_NAME)?;
            let written = fd.try_clone().and_then(|f| {
                std::io::Write::write_all(&mut std::fs::File::from(f), lines.as_bytes())
            });
            written.map_err(|_| LaunchError::setup("writing the --auto-args memfd"))?;
            spec.args_fd = Some(std::os::fd::AsRawFd::as_raw_fd(&fd));
            Some(fd)
        }
        None => None,
    };
    if let Some(fd) = options.live_fd {
        spec.live_fd = Some(fd);
        // SAFETY: between fork and exec only async-signal-safe fcntl: keep the descriptor open in the
        // child.
        unsafe {
            cmd.pre_exec(move || {
                let fl = libc::fcntl(fd, libc::F_GETFD);
                libc::fcntl(fd, libc::F_SETFD, fl & !libc::FD_CLOEXEC);
                Ok(())
            });
        }
    }
    for (name, value) in spec.to_env() {
        match value {
            Some(v) => cmd.env(name, v),
            None => cmd.env_remove(name),
        };
    }
    relay::block();
    relay::unblock_in_child(&mut cmd);
    if let Some(hold) = options.hold {
        hold.install(&mut cmd);
    }
    let child = cmd.spawn().map_err(|source| LaunchError::Spawn {
        program: program.path.clone(),
        source,
    })?;
    let relay = relay::start(child.id() as i32, pool.as_ref()).err();
    Ok(Running {
        child,
        pool,
        program: program.path.clone(),
        relay,
    })
}

/// A program [`start`] started.
pub struct Running {
    child: Child,
    pool: Option<OwnedFd>,
    program: PathBuf,
    relay: Option<LaunchError>,
}

impl Running {
    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Why signals sent to us will not reach the program, if the relay could not start (the program
    /// runs all the same).
    pub fn relay_error(&self) -> Option<&LaunchError> {
        self.relay.as_ref()
    }

    /// Waits for the program to end (`wait4`, which also gives what it used).
    pub fn wait(self) -> Result<Ended, LaunchError> {
        let mut status = 0;
        // SAFETY: zeroed memory is a valid rusage, which wait4 fills.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        loop {
            // SAFETY: our own child, not yet waited for (Child::wait is never called on it); both
            // pointers are to live locals.
            let r = unsafe { libc::wait4(self.child.id() as i32, &mut status, 0, &mut usage) };
            if r >= 0 {
                break;
            }
            let source = std::io::Error::last_os_error();
            if source.kind() != std::io::ErrorKind::Interrupted {
                return Err(LaunchError::Wait {
                    program: self.program.clone(),
                    source,
                });
            }
        }
        let micros = |t: libc::timeval| t.tv_sec as u64 * 1_000_000 + t.tv_usec as u64;
        Ok(Ended {
            status: ExitStatus::from_raw(status),
            usage: Some(Usage {
                user_us: micros(usage.ru_utime),
                system_us: micros(usage.ru_stime),
                voluntary_switches: usage.ru_nvcsw as u64,
                involuntary_switches: usage.ru_nivcsw as u64,
                max_rss_kib: usage.ru_maxrss as u64,
                major_faults: usage.ru_majflt as u64,
                minor_faults: usage.ru_minflt as u64,
                blocks_in: usage.ru_inblock as u64,
                blocks_out: usage.ru_oublock as u64,
            }),
            pool: self.pool,
        })
    }
}

/// The exit code a program's end becomes, as a shell gives it: its own, or 128 + the signal that
/// killed it.
pub fn exit_code(status: ExitStatus) -> u8 {
    match (status.code(), status.signal()) {
        (Some(code), _) => code as u8,
        (None, sig) => (128 + sig.unwrap_or(0)) as u8,
    }
}

/// A program that ended.
pub struct Ended {
    /// How it ended.
    pub status: ExitStatus,
    /// What it used (CPU time, context switches, memory, faults, I/O), as `wait4` said.
    pub usage: Option<Usage>,
    pool: Option<OwnedFd>,
}

impl Ended {
    /// Our exit code for it ([`exit_code`]).
    pub fn exit_code(&self) -> u8 {
        exit_code(self.status)
    }

    /// How it died, as the trace's Salvage chunk says it.
    pub fn death(&self) -> Death {
        match (self.status.signal(), self.status.code()) {
            (Some(sig), _) => Death::Signal(sig as u32),
            (None, code) => Death::Exit(code.unwrap_or(0)),
        }
    }

    /// After the program died without finishing its trace at `output` (no End chunk: SIGKILL, the OOM
    /// killer, ...), appends the events it had recorded but not written, from the chunk pool it shared
    /// with us. `None` when it shared no pool (its runtime never started, or [`Options::share_pool`]
    /// was off).
    pub fn recover_unwritten(
        &self,
        output: &Path,
    ) -> Option<Result<Option<Salvaged>, SalvageError>> {
        crate::salvage::from_pool(self.pool.as_ref()?, output, self.death())
    }
}
