//! Starting the runtime: from the environment, in the ELF constructor of either copy (which one, its
//! configuration, discovery, the trace file's head, the collector, the exit hooks, patching), and again
//! in a forked child at its first traced event.

use std::io::BufWriter;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::Duration;

use ferrotrace_core::clock::ClockPair;
use ferrotrace_core::env;
use ferrotrace_core::format::ChunkKind;
use ferrotrace_core::schema::{self, Payload};
use ferrotrace_core::writer::TraceWriter;

use crate::buffers::collector::Writer;
use crate::buffers::pool::Pool;
use crate::buffers::{clock, collector, live};
use crate::lifecycle::config::{Config, Mode};
use crate::lifecycle::exit;
use crate::lifecycle::runtime::{get, EndReason, Program, Recorder, Role, Runtime, Upcalls};
use crate::patch::{discovery, sites};
use crate::recorders::xray as trampoline;

/// True in a process the kernel runs with privileges its invoker does not have (setuid, setgid, file
/// capabilities): `getauxval(AT_SECURE)`, the test glibc uses to ignore `LD_PRELOAD` and that makes
/// `secure_getenv` return nothing.
fn is_secure_execution() -> bool {
    // SAFETY: getauxval reads the auxiliary vector; it has no failure mode that matters here (0 when
    // the entry is missing, which means not secure).
    unsafe { libc::getauxval(libc::AT_SECURE) != 0 }
}

/// Starts the runtime if the environment asks this copy to, printing one line on failure. Called from
/// the ELF constructors of both copies; only one of them proceeds.
///
/// A privileged process (setuid, setgid, capabilities: `getauxval(AT_SECURE)`) stays dormant and reads
/// no `FERROTRACE_*` variable at all: its environment comes from a user it must not obey, who could
/// otherwise make it write a trace over any file (`FERROTRACE_OUTPUT`).
pub fn start_from_env(role: Role) {
    if is_secure_execution() {
        return;
    }
    let wanted = crate::lifecycle::config::requested_runtime();
    let go = match (role, wanted.as_ref().and_then(|w| w.to_str())) {
        (_, Some(env::RUNTIME_OFF)) => false,
        (Role::Preload, Some(env::RUNTIME_LINKED)) => false,
        (Role::Preload, _) => true,
        (Role::Linked, Some(env::RUNTIME_LINKED)) => true,
        // Tracepoints: FERROTRACE_TRACE alone starts the linked copy.
        (Role::Linked, None) => crate::tracepoints::requested().is_some(),
        (Role::Linked, _) => false,
    };
    if !go || get().is_some() {
        return;
    }
    if let Err(e) = start(role) {
        say!("ferrotrace: tracing disabled: {e}");
    }
}

/// The trace file of this process, and whether a traced process started it (rather than `ferrotrace
/// record`).
fn output_path(config: &Config) -> (PathBuf, bool) {
    // A process started by a traced process writes its own file, named after its pid, so that two
    // processes never interleave bytes in one file.
    let pid = std::process::id();
    // The marker holds the pid of the process that set it: equal to ours after an `exec` of the root
    // process (a wrapper script that execs the real program), which then takes over the main file.
    let started_by_traced = std::env::var(env::TRACED_PARENT).is_ok_and(|v| v != pid.to_string());
    let path = if started_by_traced {
        let mut p = config.output.clone().into_os_string();
        p.push(format!(".{pid}"));
        PathBuf::from(p)
    } else {
        config.output.clone()
    };
    crate::lifecycle::config::set_env(env::TRACED_PARENT, Some(&pid.to_string()));
    (path, started_by_traced)
}

fn session_payload(
    config: &Config,
    program: &Program,
    tsc_hz: u64,
    start_realtime: u64,
) -> Vec<u8> {
    let exe = std::fs::read_link("/proc/self/exe")
        .map(|p| p.display().to_string())
        .unwrap_or_default();
    let cmdline = std::fs::read("/proc/self/cmdline").unwrap_or_default();
    let cmdline = cmdline.strip_suffix(&[0]).unwrap_or(&cmdline);
    // SAFETY: getppid cannot fail.
    let ppid = unsafe { libc::getppid() } as u32;
    let mut p = Vec::new();
    let _ = schema::Session {
        pid: std::process::id(),
        ppid,
        exe: &exe,
        cmdline,
        start_realtime_ns: start_realtime,
        version: env!("CARGO_PKG_VERSION"),
        mode: config.mode,
        tick_hz: tsc_hz,
        // Samples come after the program ends (`record --sample` merges them); saying so now lets a
        // reader that counts as it reads know before the first event that it would count in vain.
        sources: program.sources
            | if config.sampled {
                schema::source::SAMPLES
            } else {
                0
            },
        alloc_sample: program.alloc.map_or(0, |a| a.sample),
    }
    .encode(&mut p);
    p
}

/// Rough TSC frequency (for the Session chunk; the reader uses the Clock chunks' pairs themselves)
/// from `first`, a pair taken when start-up began, and one taken now, at least 2 ms later. Start-up's
/// own work (discovery, the pool) usually spans that already: it sleeps only for what is left.
fn estimate_tsc_hz(first: ClockPair) -> u64 {
    const SPAN_NS: u64 = 2_000_000;
    let (mut now, _) = clock::calibration_pair();
    let elapsed = now.mono_ns.saturating_sub(first.mono_ns);
    if elapsed < SPAN_NS {
        std::thread::sleep(Duration::from_nanos(SPAN_NS - elapsed));
        now = clock::calibration_pair().0;
    }
    ferrotrace_core::clock::TscConverter::new(first, now).hz()
}

fn start(role: Role) -> Result<(), String> {
    let first_clock = clock::calibration_pair().0;
    // While the process has one thread: registering then costs nothing, and a grace period (~10 ms
    // here) once the collector runs.
    crate::patch::text::register_membarrier();
    let config = Config::from_env()?;
    let shared_fd = crate::lifecycle::config::take_shared_fd();
    let alloc = crate::lifecycle::config::alloc_requested()?;
    let (path, started_by_traced) = output_path(&config);
    crate::buffers::hot::init_tls_offset();
    trampoline::init_xsave_area();
    crate::buffers::hot::init_cpu_offset();
    let mut known = discovery::Known::default();
    let found = discovery::discover(&config, role == Role::Preload, &mut known)?;
    // Ids first: the live printer names tracepoints by them.
    let tracepoints = crate::tracepoints::assign_ids();
    let live = live::Output::from_env(
        || {
            found
                .functions
                .iter()
                .map(|f| crate::lifecycle::config::display_name(&f.name))
                .collect()
        },
        live_tracepoints,
    );
    // In a program that records `tracing` spans, -F may name spans, which are met only later.
    if !started_by_traced && found.instrumentation & schema::source::TRACING == 0 {
        for (re, _) in config
            .include
            .iter()
            .zip(&found.filter_hits)
            .filter(|(_, hit)| !**hit)
        {
            say!(
                "ferrotrace: -F '{}' selects none of the {} instrumented functions in {} and the libraries \
                 loaded with it",
                re.as_str(),
                found.total_functions,
                found.exe_name()
            );
        }
    }
    if found.functions.is_empty() && crate::tracepoints::requested().is_none() && alloc.is_none() {
        if started_by_traced {
            // A program the traced one runs (a shell, a compiler...) without instrumentation: nothing to
            // record, and no reason to say so or leave an empty file.
            return Ok(());
        }
        if found.total_functions == 0 {
            say!(
                "ferrotrace: {} has no instrumented function: {}",
                found.exe_name(),
                ferrotrace_core::schema::source::HOW_TO_BUILD
            );
        } else if found.filter_hits.iter().all(|&hit| hit) {
            // The build is fine, and every -F matched something (a pattern that matched nothing was
            // named above): -N excluded what -F selected.
            say!(
                "ferrotrace: warning: -F/-N selected none of the {} instrumented functions of {}",
                found.total_functions,
                found.exe_name()
            );
        }
    }
    if !found.refused.is_empty() && !started_by_traced && !config.patch.is_empty() {
        let reasons: Vec<String> = found
            .refused
            .iter()
            .map(|(reason, n)| format!("{n} ({reason})"))
            .collect();
        say!(
            "ferrotrace: functions -P selects whose entries cannot be patched safely, left untraced: {} \
             (`ferrotrace list --dynamic` names them)",
            reasons.join(", ")
        );
    }
    if found.no_frame_pointer > 0 && !started_by_traced && config.functions {
        say!(
            "ferrotrace: {} functions call mcount without setting up a frame pointer and are not traced: \
             build with -Cforce-frame-pointers=yes (Rust) or without -fomit-frame-pointer (C)",
            found.no_frame_pointer
        );
    }
    let start_realtime = clock::realtime_ns();
    // Only the process `record` started shares its pool: processes it starts write traces of their
    // own, which record does not watch.
    let pool = new_pool(
        &config,
        shared_fd.filter(|_| !started_by_traced),
        start_realtime,
    )?;
    let header = found.head(tracepoints);
    // How the functions are instrumented (XRay, mcount, fentry, NOPs: bits of the same values), and
    // whether there are tracepoints and allocations.
    let mut sources = sources(&found);
    if alloc.is_some() {
        sources |= schema::source::ALLOCATIONS;
    }
    let program = Program {
        role,
        sources,
        rust_std: found.rust_std,
        targets: targets(live.is_some()),
        alloc,
    };
    let writer = open_trace(
        &config,
        &path,
        &header,
        &program,
        start_realtime,
        first_clock,
    )?;
    // While the process has one thread, before the collector's: patching copies each text page on
    // write, and with another thread of the process running on the other CPU every copy also costs a
    // TLB-shootdown interrupt there (~17 ms on ripgrep's 7,249 functions in this VM). Nothing runs the
    // patched code before start-up returns, by when recording is on. A failure is reported once the
    // runtime runs, as before: what was patched is recorded and the trace is finished.
    // SAFETY: `found` is discover's answer, unchanged.
    let patched = unsafe { sites::patch(&found, &program.targets) };
    // The collector waits for something to write, unless it has work of its own from the start
    // (live printing, the flight ring's dumps) or its thread's early allocations would be recorded
    // (--alloc). Only in the preload library, whose `dlopen` rescans itself: the linked runtime's
    // collector also looks for objects loaded since, every second.
    let defer = role == Role::Preload
        && live.is_none()
        && config.mode != Mode::Flight
        && program.alloc.is_none();
    let rt = launch(
        Runtime::new(config, pool, program, UPCALLS, known, header, live),
        writer,
        path,
        None,
        defer,
    )?;
    exit::install();
    // Fails only if a signal finished the trace already: then nothing records.
    rt.lifecycle.start_recording();
    patched?;
    // Last: the start-up's own allocations (and their frees) are not the program's (the allocation
    // recorder is the last of `recorders::ALL`).
    drop(found);
    start_recorders(&rt.program, rt.upcalls.recorders);
    Ok(())
}

/// What the trace's Session says recorded it (bits of `schema::source`), as far as discovery tells:
/// how the functions are instrumented, whether the program links `ferrotrace-tracing`, and whether it
/// has tracepoints.
pub(crate) fn sources(found: &discovery::Discovery) -> u64 {
    let mut sources = found.instrumentation;
    if !crate::recorders::tracepoint::all().is_empty() {
        sources |= schema::source::TRACEPOINTS;
    }
    sources
}

/// Starts every recorder, in order, and registers the fork handlers of those that record.
pub(crate) fn start_recorders(program: &Program, recorders: &[Recorder]) {
    for r in recorders {
        if (r.start)(program) {
            if let Some(f) = r.fork {
                // SAFETY: registering handlers; each recorder's are safe to run around any fork.
                unsafe { libc::pthread_atfork(Some(f.prepare), Some(f.parent), Some(f.child)) };
            }
        }
    }
}

/// The chunk pool, in the memfd `shared` when record gave one (the trace started at `start_realtime`).
pub(crate) fn new_pool(
    config: &Config,
    shared: Option<i32>,
    start_realtime: u64,
) -> Result<Pool, String> {
    let count = match config.mode {
        // The flight ring holds encoded events; the pool only needs to keep up with the collector.
        Mode::Flight => (4 << 20) / config.chunk_size,
        _ => config.buffer_size / config.chunk_size,
    };
    match shared {
        Some(fd) => Pool::in_shared(fd, config.chunk_size, count, start_realtime),
        None => Pool::new(config.chunk_size, count),
    }
}

/// What the live printer needs to print each tracepoint, by id (given by `assign_ids`).
pub(crate) fn live_tracepoints() -> std::collections::HashMap<u32, live::Tp> {
    crate::recorders::tracepoint::all()
        .into_iter()
        .map(|t| {
            let tp = live::Tp {
                name: t.name,
                args: t.args,
                format: t.format,
            };
            (t.header.id.load(Ordering::Relaxed), tp)
        })
        .collect()
}

/// Creates the trace file and writes its head: Session, Clock and the chunks that describe the program.
pub(crate) fn open_trace(
    config: &Config,
    path: &Path,
    header: &[(ChunkKind, Vec<u8>)],
    program: &Program,
    start_realtime: u64,
    first_clock: ClockPair,
) -> Result<Writer, String> {
    let tsc_hz = estimate_tsc_hz(first_clock);
    // A new file, 0600, never through a link nor over a file that is not a trace (an old trace is
    // kept as FILE.old): see ferrotrace_core::output.
    let (file, _) = ferrotrace_core::output::create(path)
        .map_err(|e| format!("cannot create the trace: {e}"))?;
    let io = |e: std::io::Error| format!("{}: {e}", path.display());
    let mut writer = TraceWriter::new(BufWriter::with_capacity(1 << 20, file)).map_err(io)?;
    writer
        .chunk(
            ChunkKind::Session,
            &session_payload(config, program, tsc_hz, start_realtime),
        )
        .map_err(io)?;
    writer
        .chunk(ChunkKind::Clock, &clock::calibration_payload())
        .map_err(io)?;
    for (kind, payload) in header {
        writer.chunk(*kind, payload).map_err(io)?;
    }
    writer.flush().map_err(io)?;
    Ok(writer)
}

/// The layers above the slow path, for it to call ([`Upcalls`]).
pub(crate) const UPCALLS: Upcalls = Upcalls {
    fork_restart: restart_in_forked_child,
    recorders: &crate::recorders::ALL,
};

/// Where patched code goes: the XRay trampolines (those that record the CPU too, `with_cpu`) and the
/// mcount hooks.
pub(crate) fn targets(with_cpu: bool) -> sites::Targets {
    let (mcount, fentry) = crate::recorders::mcount::hook_addresses();
    sites::Targets {
        xray: trampoline::trampolines(with_cpu),
        mcount,
        fentry,
    }
}

/// Makes `rt` the process's runtime (in place of `replacing`, a forked child's copy of its parent's,
/// or of none) and starts its collector; returns once the collector runs. With `defer`, the collector
/// starts only when there is something to write ([`ensure_collector`]). Recording is still off.
pub(crate) fn launch(
    rt: Runtime,
    writer: Writer,
    path: PathBuf,
    replacing: Option<&'static Runtime>,
    defer: bool,
) -> Result<&'static Runtime, String> {
    let rt = crate::lifecycle::runtime::publish(rt, replacing)?;
    if defer {
        *rt.deferred_collector
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Some((writer, path));
        rt.lifecycle.collector_deferred();
        return Ok(rt);
    }
    spawn_collector(rt, writer, path)?;
    if !rt.lifecycle.wait_collector_running(Duration::from_secs(5)) {
        return Err("the collector thread did not start within 5 s".into());
    }
    Ok(rt)
}

fn spawn_collector(rt: &'static Runtime, writer: Writer, path: PathBuf) -> Result<(), String> {
    let handle =
        exit::spawn_without_signals("ferrotrace", None, move || collector::run(rt, writer, path))
            .map_err(|e| format!("cannot start the collector thread: {e}"))?;
    rt.lifecycle.set_collector(handle.thread().clone());
    Ok(())
}

/// Starts the deferred collector of `rt`, if it has not started: a thread handed over a chunk, or
/// the trace ends. Not from a signal handler (it starts a thread); `exit::finish` has its own way
/// there. If the thread cannot be started, the recording stops (the trace keeps its head, as after
/// a SIGKILL: `record` recovers the events from the shared pool) rather than leave threads waiting
/// for chunks nobody frees.
pub fn ensure_collector(rt: &'static Runtime) {
    if rt.lifecycle.has_collector() {
        return;
    }
    let taken = rt
        .deferred_collector
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .take();
    let Some((writer, path)) = taken else {
        // Started meanwhile by another thread, or never deferred.
        return;
    };
    if let Err(e) = spawn_collector(rt, writer, path) {
        say!("ferrotrace: {e}; recording stopped");
        if rt.lifecycle.claim_finish(EndReason::Stopped, 0) {
            rt.lifecycle.finish_over();
        }
    }
}

/// In a forked child, at its first traced event: starts a runtime of its own, writing `FILE.<pid>`,
/// with the parent's settings, module map and function table (the sleds are patched already: the child
/// has the parent's code). A child that calls `exec` first never gets here; the new image's runtime
/// traces it instead. Prints one line and leaves the child untraced if the parent's state cannot be
/// read (a lock held by a parent thread when it forked).
pub fn restart_in_forked_child() {
    // Live mode prints the root process's events; a child's would go to a file nobody reads.
    let Some(parent) = get().filter(|rt| !rt.records_this_process() && rt.live.is_none()) else {
        return;
    };
    let Some((header, known)) = parent.description() else {
        say!(
            "ferrotrace: forked child {} not traced: the parent was changing the function table when it forked",
            std::process::id()
        );
        return;
    };
    let config = parent.config.clone();
    let (path, _) = output_path(&config);
    let first_clock = clock::calibration_pair().0;
    let start_realtime = clock::realtime_ns();
    let started = new_pool(&config, None, start_realtime).and_then(|pool| {
        let writer = open_trace(
            &config,
            &path,
            &header,
            &parent.program,
            start_realtime,
            first_clock,
        )?;
        launch(
            Runtime::new(
                config,
                pool,
                parent.program,
                parent.upcalls,
                known,
                header,
                None,
            ),
            writer,
            path,
            Some(parent),
            false,
        )
    });
    match started {
        Ok(rt) => {
            rt.lifecycle.start_recording();
        }
        Err(e) => say!(
            "ferrotrace: forked child {} not traced: {e}",
            std::process::id()
        ),
    }
}

/// Starts a runtime for unit tests of this crate: `config`, no program description, no sled patched, no
/// exit or signal hooks; recording on. One per test binary (the process has one runtime).
#[cfg(test)]
pub(crate) fn start_for_test(config: Config) -> &'static Runtime {
    crate::buffers::hot::init_tls_offset();
    let first_clock = clock::calibration_pair().0;
    let start_realtime = clock::realtime_ns();
    let pool = new_pool(&config, None, start_realtime).expect("pool");
    let path = config.output.clone();
    let program = Program {
        role: Role::Linked,
        sources: 0,
        rust_std: false,
        targets: targets(false),
        alloc: None,
    };
    let writer =
        open_trace(&config, &path, &[], &program, start_realtime, first_clock).expect("trace file");
    let rt = launch(
        Runtime::new(
            config,
            pool,
            program,
            UPCALLS,
            discovery::Known::default(),
            Vec::new(),
            None,
        ),
        writer,
        path,
        None,
        false,
    )
    .expect("launch");
    rt.lifecycle.start_recording();
    rt
}
