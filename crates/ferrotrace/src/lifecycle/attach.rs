//! Starting the runtime late, in a process that is already running (`ferrotrace record -p`): the preload
//! library was `dlopen`ed into it by the host (which borrowed one of its threads with ptrace) and stayed
//! dormant; [`attach`], called on that borrowed thread, starts a runtime as start-up would, while the
//! program's other threads run on. Its collector watches the control channel ([`Control`]); when the
//! host closes it, the collector puts back every patched site, stops every thread, writes the End chunk
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
use ferrotrace_core::schema;

use crate::buffers::{clock, hot, live};
use crate::lifecycle::config::Config;
use crate::lifecycle::exit;
use crate::lifecycle::runtime::{get, Control, Program, Role, Runtime};
use crate::lifecycle::start;
use crate::patch::{discovery, sites};
use crate::recorders::callsites;
use crate::recorders::xray as trampoline;

/// Why [`attach`] failed: a negative return code of `ferrotrace_attach`, and the line that says why
/// (also written to `error` in the control directory, for the host).
#[derive(Debug)]
pub struct AttachError {
    /// The return code.
    pub code: i32,
    /// What went wrong, in one line.
    pub message: String,
}

/// The spec could not be read, or its settings are invalid.
pub const BAD_SPEC: i32 = -1;
/// A runtime records in this process already.
pub const ALREADY: i32 = -2;
/// The library's thread-local block is not in static TLS: the trampolines cannot find it.
pub const NOT_STATIC_TLS: i32 = -3;
/// No loaded object has instrumented functions.
pub const NO_SITES: i32 = -4;
/// `-F`/`-N` selected none of the instrumented functions.
pub const NONE_SELECTED: i32 = -5;
/// Something else failed (the message says what).
pub const FAILED: i32 = -6;

fn fail(code: i32, message: impl Into<String>) -> AttachError {
    AttachError {
        code,
        message: message.into(),
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
        .map_err(|e| fail(BAD_SPEC, e.to_string()))
        .and_then(|spec| start_attached(&spec, &lookup, shared.as_ref(), role));
    if let (Err(e), Some(c)) = (&result, &control) {
        if let Some(dir) = c.parent() {
            if let Ok(mut f) = std::fs::File::create(dir.join("error")) {
                let _ = writeln!(f, "{}", e.message);
            }
        }
    }
    result
}

fn start_attached(
    spec: &RuntimeSpec,
    lookup: &dyn Fn(&str) -> Option<String>,
    shared: Option<&OwnedFd>,
    role: Role,
) -> Result<(), AttachError> {
    if get().is_some() {
        return Err(fail(
            ALREADY,
            "a ferrotrace runtime is recording in it already",
        ));
    }
    if spec.alloc.is_some() || spec.live_fd.is_some() {
        return Err(fail(
            BAD_SPEC,
            "an attached recording records no allocations (--alloc)",
        ));
    }
    // Tracepoints are the program's own (declared with the ferrotrace crate): only a program that links
    // the runtime has them, and each glob must select one of them.
    let tracepoints = spec.trace.join(",");
    if !tracepoints.is_empty() {
        if role == Role::Preload {
            return Err(fail(
                BAD_SPEC,
                "--trace: the program does not link the ferrotrace crate, so it has no tracepoints",
            ));
        }
        // A program with ferrotrace's `tracing` layer: a glob may select its events, named only
        // when they register.
        if let Some(unmatched) = crate::tracepoints::unmatched(&tracepoints)
            .into_iter()
            .next()
            .filter(|_| !callsites::has_layer())
        {
            return Err(fail(NONE_SELECTED, unmatched));
        }
    }
    let first_clock = clock::calibration_pair().0;
    let config = Config::from_lookup(lookup).map_err(|e| fail(BAD_SPEC, e))?;
    let control = match &spec.control {
        Some(path) => Some(open_control(path)?),
        None => None,
    };
    // The trampolines find `HOT` at one offset from %fs in every thread: true only if this library's
    // TLS is static (its initial-exec reference makes glibc place it in the static TLS surplus, or
    // refuse the dlopen). A thread started now must see the same offset as this one.
    hot::init_tls_offset();
    let here = hot::tls_offset();
    let there = std::thread::spawn(hot::hot_offset_here)
        .join()
        .map_err(|_| fail(FAILED, "cannot start a thread"))?;
    if here != there {
        return Err(fail(
            NOT_STATIC_TLS,
            format!(
                "the runtime's thread-local block is not in static TLS (offset {here:#x} here, {there:#x} \
                 in a new thread)"
            ),
        ));
    }
    // With other threads running, the kernel waits for a grace period here (~10 ms).
    crate::patch::text::register_membarrier();
    trampoline::init_xsave_area();
    hot::init_cpu_offset();
    let mut known = discovery::Known {
        threads_running: true,
        ..discovery::Known::default()
    };
    let found = discovery::discover(&config, role == Role::Preload, &mut known)
        .map_err(|e| fail(FAILED, e))?;
    if found.functions.is_empty() && tracepoints.is_empty() && !callsites::has_layer() {
        return Err(if found.total_functions == 0 {
            fail(
                NO_SITES,
                format!(
                    "{} has no patchable sites: uninstrumented functions are traced by patching their \
                     entries only when `record -- PROGRAM` starts the program, not while attached; {}",
                    found.exe_name(),
                    schema::source::HOW_TO_BUILD
                ),
            )
        } else {
            fail(
                NONE_SELECTED,
                format!(
                    "-F/-N select none of the {} instrumented functions of {}",
                    found.total_functions,
                    found.exe_name()
                ),
            )
        });
    }
    let start_realtime = clock::realtime_ns();
    // In the host's memfd when it made one: it salvages what was not written if the process is
    // killed while attached.
    let pool = start::new_pool(&config, shared.map(AsRawFd::as_raw_fd), start_realtime)
        .map_err(|e| fail(FAILED, e))?;
    let header = found.head(crate::tracepoints::assign_ids());
    let live = match &spec.live_fifo {
        Some(path) => Some(open_live(path, &found)?),
        None => None,
    };
    let program = Program {
        role,
        sources: start::sources(&found),
        rust_std: found.rust_std,
        targets: start::targets(live.is_some()),
        alloc: None,
    };
    let path = config.output.clone();
    let writer = start::open_trace(
        &config,
        &path,
        &header,
        &program,
        start_realtime,
        first_clock,
    )
    .map_err(|e| fail(FAILED, e))?;
    let rt = Runtime::new(config, pool, program, start::UPCALLS, known, header, live);
    if let Some(c) = control {
        let _ = rt.control.set(c);
    }
    let rt = start::launch(rt, writer, path, None, false).map_err(|e| fail(FAILED, e))?;
    exit::install_once();
    rt.lifecycle.start_recording();
    // SAFETY: `found` is discover's answer, unchanged.
    if let Err(e) = unsafe { sites::patch(&found, &rt.program.targets) } {
        // What was patched records; the host stops it as usual.
        say!("ferrotrace: patching failed: {e}");
    }
    // Calls of mcount/__fentry__ (-pg without -mnop-mcount) are bound to the C library's: pointed at
    // the hooks now that their sites are in the table, put back by the stop (unpatch_all).
    // SAFETY: as above.
    if let Err(e) = unsafe { sites::redirect_hook_slots(&found, &rt.program.targets) } {
        say!("ferrotrace: some mcount calls stay untraced: {e}");
    }
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
    // No recorder to start: function tracing and tracepoints need none (allocations are refused
    // above).
    Ok(())
}

/// `live -p`: the printer, writing to the host's FIFO (which it holds open for reading); losses go
/// unsaid (the program's standard error is not the user's).
fn open_live(path: &Path, found: &discovery::Discovery) -> Result<live::Output, AttachError> {
    use std::os::fd::IntoRawFd;
    use std::os::unix::fs::OpenOptionsExt;
    let fifo = std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| fail(FAILED, format!("{}: {e}", path.display())))?;
    let names = found
        .functions
        .iter()
        .map(|f| crate::lifecycle::config::display_name(&f.name))
        .collect();
    Ok(live::Output::to_fd(
        fifo.into_raw_fd(),
        -1,
        names,
        start::live_tracepoints(),
    ))
}

/// Opens the host's control FIFO for reading without blocking (the host holds it open for writing).
fn open_control(path: &Path) -> Result<Control, AttachError> {
    use std::os::unix::fs::OpenOptionsExt;
    let fifo = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| fail(FAILED, format!("{}: {e}", path.display())))?;
    let done = path
        .parent()
        .map_or_else(|| PathBuf::from("done"), |d| d.join("done"));
    Ok(Control::new(fifo, done))
}
