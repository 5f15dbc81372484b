//! Starting the runtime late, in a process that is already running (`ferrotrace record -p`): the preload
//! library was `dlopen`ed into it by the host (which borrowed one of its threads with ptrace) and stayed
//! dormant; [`attach_on_own_thread`], called on that borrowed thread, starts a thread that runs
//! [`attach`], which starts a runtime as start-up would, while the program's threads run on. Its
//! collector watches the control channel ([`Control`]); when the host closes it, the collector puts back every patched site, stops every thread, writes the End chunk
//! (reason `Stopped`) and retires the runtime: the process is back to none, and a later attach starts
//! a new one. Threads register at their first event (the slow path finds their `HOT` block empty, or
//! registered with an earlier runtime).
//!
//! What differs from start-up: the membarrier registration waits for a grace period (the process has
//! threads); sites are patched with other threads running through them (each page copied on write
//! costs the other CPUs a TLB shootdown); nothing is set in the environment (not thread-safe here);
//! nothing is interposed (the library was loaded `RTLD_LOCAL`, after the program's symbols were bound):
//! objects the program `dlopen`s are found by the collector's rescan every second, programs' calls of
//! the C library's `mcount`/`__fentry__` (rather than patchable NOPs) reach the hooks through their GOT
//! slots, redirected while attached (`sites::redirect_hook_slots`), and allocations are not recorded. Tracepoints (`--trace`) are, in a program that links the runtime: enabled once recording,
//! disabled again when the host stops it; so are the spans and events of ferrotrace's `tracing` layer
//! (`recorders::callsites::attached`: the layer asks its callsites' interest again). The chunk pool goes into the memfd the host made in the
//! process (`FERROTRACE_SHARED_FD`), so that the host can salvage it after a SIGKILL.

use std::io::Write;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};

use ferrotrace_core::env::RuntimeSpec;

use crate::lifecycle::config::Config;
use crate::lifecycle::plan::{self, LiveTo, Occasion, Plan, Problem};
use crate::lifecycle::runtime::{get, Control, Role};
use crate::recorders::callsites;
use crate::state::PROCESS;
use std::sync::atomic::Ordering;

/// Why [`attach`] failed: a negative return code of `ferrotrace_attach`, and the line that says why
/// (also written to `error` in the control directory, for the host).
#[derive(Debug)]
pub struct AttachError {
    /// The return code ([`plan::code`]).
    pub code: i32,
    /// What went wrong, in one line.
    pub message: String,
}

impl From<Problem> for AttachError {
    fn from(problem: Problem) -> AttachError {
        AttachError {
            code: problem.code(),
            message: problem.to_string(),
        }
    }
}

/// Starts recording in this running process as `spec` says (`NAME=value` lines of the
/// `FERROTRACE_*` variables, [`RuntimeSpec::to_lines`]). On failure the process is left as it was,
/// and the reason is also written to `error` beside the control FIFO, when the spec names one.
pub fn attach(spec: &str, role: Role) -> Result<(), AttachError> {
    let vars = RuntimeSpec::lines_to_vars(spec);
    let lookup = |name: &str| vars.iter().find(|(n, _)| n == name).map(|(_, v)| v.clone());
    let parsed = RuntimeSpec::from_env(|n| lookup(n).map(Into::into));
    let control = parsed.as_ref().ok().and_then(|s| s.control.clone());
    // The memfd the host made in this process for the chunk pool is ours from here on, whatever
    // happens: closed on return (a pool maps it first, and the mapping keeps it alive), so that no
    // attach leaves a descriptor behind.
    let shared = lookup(ferrotrace_core::env::SHARED_FD)
        .and_then(|v| v.parse().ok())
        .filter(|&fd| crate::lifecycle::config::is_shared_memfd(fd))
        // SAFETY: an open descriptor (is_shared_memfd found it) that the host made for this call and
        // nothing else in the process uses.
        .map(|fd| unsafe { OwnedFd::from_raw_fd(fd) });
    let result = parsed
        .map_err(|e| Problem::BadSettings(e.to_string()))
        .and_then(|spec| start_attached(&spec, &lookup, shared.as_ref(), role))
        .map_err(AttachError::from);
    if let Err(e) = &result {
        tell_host(control.as_deref(), "error", &e.message);
    }
    result
}

/// `ferrotrace_attach`: [`attach`] on a thread of its own, which says how it went beside the control
/// FIFO ([`ferrotrace_core::env::ATTACH_OUTCOME_FILE`]); the borrowed thread only makes that thread
/// and goes back to the program. Among busy threads, each time the borrowed thread waits (for a
/// grace period, the collector's start, the host) it then waits for a CPU behind them: the program's
/// thread is held for the runtime's start no longer. 0 once the thread runs; a negative code when it
/// could not be made, or an attach is starting already (the reason in `error`).
pub fn attach_on_own_thread(spec: &str, role: Role) -> i32 {
    let vars = RuntimeSpec::lines_to_vars(spec);
    let var = |name: &str| vars.iter().find(|(n, _)| n == name).map(|(_, v)| v.clone());
    let control = var(ferrotrace_core::env::CONTROL).map(PathBuf::from);
    let nice: Option<libc::c_int> =
        var(ferrotrace_core::env::START_NICE).and_then(|v| v.parse().ok());
    if PROCESS.attach_starting.swap(true, Ordering::AcqRel) {
        tell_host(control.as_deref(), "error", &Problem::Already.to_string());
        return Problem::Already.code();
    }
    let spec = spec.to_string();
    let told = control.clone();
    let start = move || {
        if let Some(nice) = nice {
            // This thread inherited the priority `record -p` lent the borrowed thread for the call;
            // it and the threads it starts (the collector) run at the borrowed thread's own.
            // SAFETY: setpriority of this thread (PRIO_PROCESS with 0 on Linux), no memory passed.
            unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, nice) };
        }
        crate::buffers::thread::ignore_current_thread();
        let starting = Starting;
        let code = match attach(&spec, role) {
            Ok(()) => 0,
            Err(e) => e.code,
        };
        drop(starting);
        tell_host(
            told.as_deref(),
            ferrotrace_core::env::ATTACH_OUTCOME_FILE,
            &code.to_string(),
        );
    };
    match crate::lifecycle::exit::spawn_without_signals("ferrotrace-start", None, start) {
        Ok(_) => 0,
        Err(e) => {
            // No thread: the start is over.
            drop(Starting);
            let why = Problem::Failed(format!("cannot start a thread: {e}"));
            tell_host(control.as_deref(), "error", &why.to_string());
            why.code()
        }
    }
}

/// An attach's start is over when dropped (a panic included, which ends the thread without an
/// outcome: the host gives up waiting, and a later attach may try).
struct Starting;

impl Drop for Starting {
    fn drop(&mut self) {
        PROCESS.attach_starting.store(false, Ordering::Release);
    }
}

/// Leaves `line` in the file `name` beside the host's control FIFO `control`, for the host to read
/// (written whole with its newline, which tells the host it is complete).
fn tell_host(control: Option<&Path>, name: &str, line: &str) {
    if let Some(dir) = control.and_then(Path::parent) {
        if let Ok(mut f) = std::fs::File::create(dir.join(name)) {
            let _ = f.write_all(format!("{line}\n").as_bytes());
        }
    }
}

fn start_attached(
    spec: &RuntimeSpec,
    lookup: &dyn Fn(&str) -> Option<String>,
    shared: Option<&OwnedFd>,
    role: Role,
) -> Result<(), Problem> {
    if get().is_some() {
        return Err(Problem::Already);
    }
    if spec.alloc.is_some() || spec.live_fd.is_some() {
        return Err(Problem::BadSettings(
            "an attached recording records no allocations (--alloc)".into(),
        ));
    }
    // Tracepoints are the program's own (declared with the ferrotrace crate): only a program that links
    // the runtime has them, and each glob must select one of them.
    let tracepoints = spec.trace.join(",");
    if !tracepoints.is_empty() {
        if role == Role::Preload {
            return Err(Problem::BadSettings(
                "--trace: the program does not link the ferrotrace crate, so it has no tracepoints"
                    .into(),
            ));
        }
        // A program with ferrotrace's `tracing` layer: a glob may select its events, named only
        // when they register.
        if let Some(unmatched) = crate::tracepoints::unmatched(&tracepoints)
            .into_iter()
            .next()
            .filter(|_| !callsites::has_layer())
        {
            return Err(Problem::Tracepoints(unmatched));
        }
    }
    let config = Config::from_lookup(lookup).map_err(Problem::BadSettings)?;
    let control = match &spec.control {
        Some(path) => Some(open_control(path)?),
        None => None,
    };
    let output = config.output.clone();
    plan::run(Plan {
        occasion: Occasion::Attach,
        role,
        config,
        output,
        // In the host's memfd when it made one: it salvages what was not written if the process is
        // killed while attached.
        shared_fd: shared.map(AsRawFd::as_raw_fd),
        alloc: None,
        started_by_traced: false,
        tracepoints_requested: !tracepoints.is_empty(),
        live: spec.live_fifo.clone().map_or(LiveTo::Nowhere, LiveTo::Fifo),
        control,
        control_path: spec.control.clone(),
        after_start: Some(Box::new(move |rt| {
            // The tracepoints asked for, but not those the program enabled itself, which it keeps on.
            let enabled = if tracepoints.is_empty() {
                Vec::new()
            } else {
                crate::tracepoints::enable_attached(&tracepoints)
            };
            // The `tracing` layer's callsites answered `never` while nothing recorded: asked again.
            callsites::attached(&tracepoints);
            if let Some(c) = rt.control.get() {
                c.on_stop(Box::new(move || {
                    crate::tracepoints::disable_attached(&enabled);
                    callsites::detached();
                }));
            }
        })),
    })?;
    // No recorder to start: function tracing and tracepoints need none (allocations are refused
    // above).
    Ok(())
}

/// Opens the host's control FIFO for reading without blocking (the host holds it open for writing).
fn open_control(path: &Path) -> Result<Control, Problem> {
    use std::os::unix::fs::OpenOptionsExt;
    let fifo = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| Problem::Failed(format!("{}: {e}", path.display())))?;
    let done = path
        .parent()
        .map_or_else(|| PathBuf::from("done"), |d| d.join("done"));
    Ok(Control::new(fifo, done))
}
