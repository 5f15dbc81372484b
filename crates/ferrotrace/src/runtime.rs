//! The runtime's global state: start-up, the metadata channel, and the end of the trace.

use std::io::BufWriter;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use ferrotrace_core::env;
use ferrotrace_core::format::ChunkKind;
use ferrotrace_core::schema::{self, Payload};
use ferrotrace_core::writer::TraceWriter;

use crate::collector::Writer;
use crate::config::{Config, Mode};
use crate::pool::Pool;
use crate::thread::Registry;
use crate::{clock, collector, exit, trampoline, xray};

/// Metadata that traced threads hand to the collector (rare: once per thread and at the end).
#[derive(Debug)]
pub enum Meta {
    /// A thread registered or was renamed.
    Thread {
        /// OS thread id.
        tid: u32,
        /// Thread name.
        name: String,
    },
    /// Chunks to write as they are (modules and functions found by a rescan).
    Chunks(Vec<(ChunkKind, Vec<u8>)>),
    /// Events lost by a thread that never got another chunk to say so in.
    Lost {
        /// OS thread id.
        tid: u32,
        /// Number of events lost.
        count: u64,
        /// When the loss was noticed.
        tsc: u64,
    },
}

/// The longest a finish waits for the collector to write everything (from a signal handler: 3 s).
const FINISH_LIMIT: Duration = Duration::from_secs(30);

/// What a call of [`Runtime::finish`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Finished {
    /// This call finished the trace.
    Here,
    /// Another call (on another thread, or earlier) finished it; this one waited until it was over.
    ByOther,
    /// The runtime is a forked parent's copy, which records nothing in this process.
    NotHere,
}

/// Why the trace ended, as written in the End chunk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum EndReason {
    /// The process exited (`exit`, return from `main`).
    Exit = 0,
    /// A signal ended it.
    Signal = 1,
}

/// The one runtime of this process.
pub struct Runtime {
    /// Settings from the environment.
    pub config: Config,
    /// Chunk memory and queues.
    pub pool: Pool,
    /// True while events are recorded.
    pub recording: AtomicBool,
    /// Every thread that ever recorded (slots are reused).
    pub registry: Registry,
    /// Objects already scanned for sleds, and the next function id.
    known: Mutex<xray::Known>,
    role: Role,
    meta: Mutex<Vec<Meta>>,
    collector: OnceLock<std::thread::Thread>,
    /// Set by the collector when it sleeps; traced threads wake it only then.
    pub collector_sleeping: AtomicBool,
    /// Set by `finish`: the collector writes what is queued, the End chunk, and stops.
    pub finishing: AtomicBool,
    /// Set by the collector once the End chunk is on disk.
    pub collector_done: AtomicBool,
    /// Set by the collector once it runs and is marked as never recorded: recording starts only then,
    /// so that the thread start-up code of the collector is never traced.
    pub collector_ready: AtomicBool,
    /// Flight mode: write the ring now (SIGUSR2).
    pub dump_requested: AtomicBool,
    /// Why the trace ended.
    pub end_reason: AtomicU32,
    /// The signal that ended it, if any.
    pub end_signal: AtomicU32,
    finished: AtomicBool,
    /// Set once the finish that `finished` let through is over.
    finish_over: AtomicBool,
    /// The process this runtime records: a forked child has a copy of its parent's runtime, which it
    /// must neither finish nor write through.
    pid: u32,
    /// The chunks that describe the program (modules, functions, tracepoints), as written at the head of
    /// the file and by rescans since: a forked child's trace starts with them.
    header: Mutex<Vec<(ChunkKind, Vec<u8>)>>,
    /// How the program is instrumented (the Session chunk's field), for a forked child's trace.
    instrumentation: u64,
}

/// The running runtime: set once at start, replaced in a forked child that records (the old one is
/// its parent's copy and stays allocated: references to it may still be held).
static RUNTIME: AtomicPtr<Runtime> = AtomicPtr::new(core::ptr::null_mut());

/// The running runtime, if one started in this process.
pub fn get() -> Option<&'static Runtime> {
    // SAFETY: RUNTIME is null or a leaked Box that is never freed.
    unsafe { RUNTIME.load(Ordering::Acquire).as_ref() }
}

impl Runtime {
    /// Queues metadata for the collector (never from a signal handler: it allocates).
    pub fn push_meta(&self, m: Meta) {
        self.meta.lock().unwrap_or_else(|e| e.into_inner()).push(m);
    }

    /// Takes the queued metadata.
    pub fn take_meta(&self) -> Vec<Meta> {
        std::mem::take(&mut *self.meta.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Wakes the collector if it sleeps.
    pub fn wake_collector(&self) {
        if self.collector_sleeping.load(Ordering::Relaxed) {
            if let Some(t) = self.collector.get() {
                t.unpark();
            }
        }
    }

    /// Ends the trace: stops every thread, hands their chunks to the collector, waits (bounded) until the
    /// End chunk is written. Idempotent; usable from a signal handler with `from_signal`: it neither
    /// allocates nor waits without bound. A call while another thread is finishing waits until that
    /// finish is over (the process must not end before it), and says so.
    /// A forked child's copy of its parent's runtime does nothing here (the parent finishes its own).
    pub fn finish(&self, reason: EndReason, signal: i32, from_signal: bool) -> Finished {
        if !self.records_this_process() {
            return Finished::NotHere;
        }
        // A terminating signal arriving on this thread now would run its handler in the middle of
        // this finish and wait for it forever: it waits until the finish is over instead. (In a signal
        // handler they are blocked already, by the handler's mask.)
        let _blocked = crate::exit::TerminatingBlocked::now();
        if self.finished.swap(true, Ordering::AcqRel) {
            let start = Instant::now();
            while !self.finish_over.load(Ordering::Acquire)
                && start.elapsed() < FINISH_LIMIT + Duration::from_secs(5)
            {
                std::thread::sleep(Duration::from_micros(200));
            }
            return Finished::ByOther;
        }
        self.end_reason.store(reason as u32, Ordering::Relaxed);
        self.end_signal.store(signal as u32, Ordering::Relaxed);
        self.recording.store(false, Ordering::Release);
        crate::thread::flush_all(self, from_signal);
        self.finishing.store(true, Ordering::Release);
        if let Some(t) = self.collector.get() {
            t.unpark();
        }
        self.wait_collector(if from_signal {
            Duration::from_secs(3)
        } else {
            FINISH_LIMIT
        });
        let too_deep = crate::mcount::depth_lost();
        if too_deep > 0 && !from_signal {
            eprintln!(
                "ferrotrace: {too_deep} calls nested deeper than the shadow stack ({} frames) were not traced \
                 (counted as lost events); FERROTRACE_SHADOW_DEPTH sets its depth",
                crate::mcount::depth()
            );
        }
        self.finish_over.store(true, Ordering::Release);
        Finished::Here
    }

    /// False in a forked child that has not started recording on its own.
    pub fn records_this_process(&self) -> bool {
        self.pid == std::process::id()
    }

    fn wait_collector(&self, limit: Duration) {
        let start = Instant::now();
        while !self.collector_done.load(Ordering::Acquire) && start.elapsed() < limit {
            if let Some(t) = self.collector.get() {
                t.unpark();
            }
            std::thread::sleep(Duration::from_micros(200));
        }
    }
}

/// Looks for objects loaded since the last scan (`dlopen`) and patches their selected functions; their
/// modules and symbol table go into the trace. Called by the preload library's `dlopen` wrapper, by the
/// collector every second, and by programs through [`crate::rescan`].
pub fn rescan() {
    let Some(rt) = get() else { return };
    if !rt.recording.load(Ordering::Acquire) {
        return;
    }
    let mut known = rt.known.lock().unwrap_or_else(|e| e.into_inner());
    let found = match xray::discover(&rt.config, rt.role, &mut known) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("ferrotrace: rescanning loaded objects failed: {e}");
            return;
        }
    };
    if found.modules.is_empty() {
        return;
    }
    let mut chunks: Vec<(ChunkKind, Vec<u8>)> = found
        .module_payloads()
        .into_iter()
        .map(|p| (ChunkKind::Module, p))
        .collect();
    if !found.functions.is_empty() {
        chunks.push((ChunkKind::Functions, found.functions_payload()));
    }
    rt.header
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .extend(chunks.iter().cloned());
    // Queued before patching: the collector writes metadata before the chunks it takes after it.
    rt.push_meta(Meta::Chunks(chunks));
    // SAFETY: `found` is discover's answer, unchanged.
    if let Err(e) = unsafe { xray::patch(&found) } {
        eprintln!("ferrotrace: patching newly loaded objects failed: {e}");
    }
}

/// Which copy of the runtime this is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Linked into the program (the `ferrotrace` rlib). Never made in the preload library's build.
    #[cfg_attr(feature = "preload", allow(dead_code))]
    Linked,
    /// Injected with LD_PRELOAD (`libferrotrace_preload.so`).
    Preload,
}

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
    let wanted = crate::config::requested_runtime();
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
        eprintln!("ferrotrace: tracing disabled: {e}");
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
    let value = std::ffi::CString::new(pid.to_string()).unwrap_or_default();
    let name = std::ffi::CString::new(env::TRACED_PARENT).unwrap_or_default();
    // SAFETY: called from the ELF constructor, before the program starts threads of its own.
    unsafe { libc::setenv(name.as_ptr(), value.as_ptr(), 1) };
    (path, started_by_traced)
}

fn session_payload(
    config: &Config,
    tsc_hz: u64,
    start_realtime: u64,
    instrumentation: u64,
) -> Vec<u8> {
    let exe = std::fs::read_link("/proc/self/exe")
        .map(|p| p.display().to_string())
        .unwrap_or_default();
    let cmdline = std::fs::read("/proc/self/cmdline").unwrap_or_default();
    let cmdline = cmdline.strip_suffix(&[0]).unwrap_or(&cmdline);
    // SAFETY: getppid cannot fail.
    let ppid = unsafe { libc::getppid() } as u32;
    // How the functions were instrumented (XRay, mcount, fentry, NOPs: bits of the same values).
    let mut sources = instrumentation;
    if !crate::tracepoint::all().is_empty() {
        sources |= schema::source::TRACEPOINTS;
    }
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
        sources,
    }
    .encode(&mut p);
    p
}

/// A calibration chunk payload.
pub fn clock_payload() -> Vec<u8> {
    let mut p = Vec::new();
    let _ = ferrotrace_core::clock::tsc_clock_sample().encode(&mut p);
    p
}

/// Rough TSC frequency from two pairs 2 ms apart; the reader uses the pairs themselves.
fn estimate_tsc_hz() -> u64 {
    let (a, _) = clock::calibration_pair();
    std::thread::sleep(Duration::from_millis(2));
    let (b, _) = clock::calibration_pair();
    ferrotrace_core::clock::TscConverter::new(a, b).hz()
}

fn start(role: Role) -> Result<(), String> {
    let config = Config::from_env()?;
    let shared_fd = crate::config::take_shared_fd();
    let (path, started_by_traced) = output_path(&config);
    trampoline::init_tls_offset();
    trampoline::init_xsave_area();
    trampoline::init_cpu_offset();
    let mut known = xray::Known::default();
    let found = xray::discover(&config, role, &mut known)?;
    crate::live::init_from_env();
    if crate::live::active() {
        crate::live::set_functions(
            found
                .functions
                .iter()
                .map(|f| xray::display_name(&f.name))
                .collect(),
        );
    }
    if !started_by_traced {
        for (re, _) in config
            .include
            .iter()
            .zip(&found.filter_hits)
            .filter(|(_, hit)| !**hit)
        {
            eprintln!(
                "ferrotrace: -F '{}' selects none of the {} instrumented functions in {} and the libraries \
                 loaded with it",
                re.as_str(),
                found.total_functions,
                found.exe_name()
            );
        }
    }
    if found.functions.is_empty() && crate::tracepoints::requested().is_none() {
        if started_by_traced {
            // A program the traced one runs (a shell, a compiler...) without instrumentation: nothing to
            // record, and no reason to say so or leave an empty file.
            return Ok(());
        }
        if found.total_functions == 0 {
            eprintln!(
                "ferrotrace: {} has no instrumented function: {}",
                found.exe_name(),
                ferrotrace_core::schema::source::HOW_TO_BUILD
            );
        } else if found.filter_hits.iter().all(|&hit| hit) {
            // The build is fine, and every -F matched something (a pattern that matched nothing was
            // named above): -N excluded what -F selected.
            eprintln!(
                "ferrotrace: warning: -F/-N selected none of the {} instrumented functions of {}",
                found.total_functions,
                found.exe_name()
            );
        }
    }
    if found.no_frame_pointer > 0 && !started_by_traced {
        eprintln!(
            "ferrotrace: {} functions call mcount without setting up a frame pointer and are not traced: \
             build with -Cforce-frame-pointers=yes (Rust) or without -fomit-frame-pointer (C)",
            found.no_frame_pointer
        );
    }
    match config.max_depth {
        Some(limit) => crate::mcount::set_depth(limit, true),
        None => crate::mcount::set_depth(config.shadow_depth, false),
    }
    let start_realtime = clock::realtime_ns();
    // Only the process `record` started shares its pool: processes it starts write traces of their
    // own, which record does not watch.
    let pool = new_pool(
        &config,
        shared_fd.filter(|_| !started_by_traced),
        start_realtime,
    )?;
    let mut header: Vec<(ChunkKind, Vec<u8>)> = found
        .module_payloads()
        .into_iter()
        .map(|p| (ChunkKind::Module, p))
        .collect();
    header.push((ChunkKind::Functions, found.functions_payload()));
    header.push((ChunkKind::Tracepoints, crate::tracepoints::assign_ids()));
    let writer = open_trace(
        &config,
        &path,
        &header,
        found.instrumentation,
        start_realtime,
    )?;
    let rt = launch(
        Runtime::new(config, pool, known, role, header, found.instrumentation),
        writer,
        path,
        None,
    )?;
    exit::install();
    rt.recording.store(true, Ordering::Release);
    // SAFETY: `found` is discover's answer, unchanged.
    unsafe { xray::patch(&found) }?;
    crate::tracepoints::enable_requested();
    Ok(())
}

/// The chunk pool, in the memfd `shared` when record gave one (the trace started at `start_realtime`).
fn new_pool(config: &Config, shared: Option<i32>, start_realtime: u64) -> Result<Pool, String> {
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

/// Creates the trace file and writes its head: Session, Clock and the chunks that describe the program.
fn open_trace(
    config: &Config,
    path: &Path,
    header: &[(ChunkKind, Vec<u8>)],
    instrumentation: u64,
    start_realtime: u64,
) -> Result<Writer, String> {
    let tsc_hz = estimate_tsc_hz();
    // A new file, 0600, never through a link nor over a file that is not a trace (an old trace is
    // kept as FILE.old): see ferrotrace_core::output.
    let (file, _) = ferrotrace_core::output::create(path)
        .map_err(|e| format!("cannot create the trace: {e}"))?;
    let io = |e: std::io::Error| format!("{}: {e}", path.display());
    let mut writer = TraceWriter::new(BufWriter::with_capacity(1 << 20, file)).map_err(io)?;
    writer
        .chunk(
            ChunkKind::Session,
            &session_payload(config, tsc_hz, start_realtime, instrumentation),
        )
        .map_err(io)?;
    writer
        .chunk(ChunkKind::Clock, &clock_payload())
        .map_err(io)?;
    for (kind, payload) in header {
        writer.chunk(*kind, payload).map_err(io)?;
    }
    writer.flush().map_err(io)?;
    Ok(writer)
}

impl Runtime {
    fn new(
        config: Config,
        pool: Pool,
        known: xray::Known,
        role: Role,
        header: Vec<(ChunkKind, Vec<u8>)>,
        instrumentation: u64,
    ) -> Runtime {
        Runtime {
            config,
            pool,
            recording: AtomicBool::new(false),
            registry: Registry::new(),
            known: Mutex::new(known),
            role,
            meta: Mutex::new(Vec::new()),
            collector: OnceLock::new(),
            collector_sleeping: AtomicBool::new(false),
            finishing: AtomicBool::new(false),
            collector_done: AtomicBool::new(false),
            collector_ready: AtomicBool::new(false),
            dump_requested: AtomicBool::new(false),
            end_reason: AtomicU32::new(0),
            end_signal: AtomicU32::new(0),
            finished: AtomicBool::new(false),
            finish_over: AtomicBool::new(false),
            pid: std::process::id(),
            header: Mutex::new(header),
            instrumentation,
        }
    }
}

/// Makes `rt` the process's runtime (in place of `replacing`, a forked child's copy of its parent's,
/// or of none) and starts its collector; returns once the collector runs. Recording is still off.
fn launch(
    rt: Runtime,
    writer: Writer,
    path: PathBuf,
    replacing: Option<&'static Runtime>,
) -> Result<&'static Runtime, String> {
    let rt: &'static Runtime = Box::leak(Box::new(rt));
    let expected = replacing.map_or(core::ptr::null_mut(), |r| {
        r as *const Runtime as *mut Runtime
    });
    if RUNTIME
        .compare_exchange(
            expected,
            rt as *const Runtime as *mut Runtime,
            Ordering::AcqRel,
            Ordering::Acquire,
        )
        .is_err()
    {
        return Err("a ferrotrace runtime is already running in this process".into());
    }
    let handle =
        exit::spawn_without_signals("ferrotrace", move || collector::run(rt, writer, path))
            .map_err(|e| format!("cannot start the collector thread: {e}"))?;
    let _ = rt.collector.set(handle.thread().clone());
    let started = Instant::now();
    while !rt.collector_ready.load(Ordering::Acquire) {
        if started.elapsed() > Duration::from_secs(5) {
            return Err("the collector thread did not start within 5 s".into());
        }
        std::thread::sleep(Duration::from_micros(50));
    }
    Ok(rt)
}

/// In a forked child, at its first traced event: starts a runtime of its own, writing `FILE.<pid>`,
/// with the parent's settings, module map and function table (the sleds are patched already: the child
/// has the parent's code). A child that calls `exec` first never gets here; the new image's runtime
/// traces it instead. Prints one line and leaves the child untraced if the parent's state cannot be
/// read (a lock held by a parent thread when it forked).
pub fn restart_in_forked_child() {
    // Live mode prints the root process's events; a child's would go to a file nobody reads.
    let Some(parent) = get().filter(|rt| !rt.records_this_process() && !crate::live::active())
    else {
        return;
    };
    let (Ok(header), Ok(known)) = (parent.header.try_lock(), parent.known.try_lock()) else {
        eprintln!(
            "ferrotrace: forked child {} not traced: the parent was changing the function table when it forked",
            std::process::id()
        );
        return;
    };
    let (header, known) = (header.clone(), known.clone());
    let config = parent.config.clone();
    let (path, _) = output_path(&config);
    let start_realtime = clock::realtime_ns();
    let started = new_pool(&config, None, start_realtime).and_then(|pool| {
        let writer = open_trace(
            &config,
            &path,
            &header,
            parent.instrumentation,
            start_realtime,
        )?;
        launch(
            Runtime::new(
                config,
                pool,
                known,
                parent.role,
                header,
                parent.instrumentation,
            ),
            writer,
            path,
            Some(parent),
        )
    });
    match started {
        Ok(rt) => rt.recording.store(true, Ordering::Release),
        Err(e) => eprintln!(
            "ferrotrace: forked child {} not traced: {e}",
            std::process::id()
        ),
    }
}

/// Starts a runtime for unit tests of this crate: `config`, no program description, no sled patched, no
/// exit or signal hooks; recording on. One per test binary (the process has one runtime).
#[cfg(test)]
pub(crate) fn start_for_test(config: Config) -> &'static Runtime {
    trampoline::init_tls_offset();
    let start_realtime = clock::realtime_ns();
    let pool = new_pool(&config, None, start_realtime).expect("pool");
    let path = config.output.clone();
    let writer = open_trace(&config, &path, &[], 0, start_realtime).expect("trace file");
    let rt = launch(
        Runtime::new(
            config,
            pool,
            xray::Known::default(),
            Role::Linked,
            Vec::new(),
            0,
        ),
        writer,
        path,
        None,
    )
    .expect("launch");
    rt.recording.store(true, Ordering::Release);
    rt
}
