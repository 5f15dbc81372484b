//! The runtime's global state: start-up, the metadata channel, and the end of the trace.

use std::io::BufWriter;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use ferrotrace_core::env;
use ferrotrace_core::format::ChunkKind;
use ferrotrace_core::schema::{self, Payload};
use ferrotrace_core::writer::TraceWriter;

use crate::collector::Writer;
use crate::config::{Config, Mode};
use crate::pool::Pool;
use crate::registry::Registry;
use crate::{clock, collector, exit, live, trampoline, xray};

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
pub use ferrotrace_core::schema::EndReason;

/// Where a runtime is in its life. One [`Lifecycle`] word holds it; every change is one of the named
/// transitions of [`Lifecycle`], and the phases of the end only ever move forward.
///
/// ```text
///  Starting ──collector_running──> Ready ──start_recording──> Recording
///     │                              │                            │
///     └──────────────────────────────┴──────claim_finish──────────┤ (any thread, a signal handler)
///                                                                 v
///  Stopping ──threads_stopped──> Finishing ──end_written──> Written ──finish_over──> Over
///  (the finisher flushes          (the collector writes     (End chunk    (the finisher returned;
///   every thread's chunk)          what is queued, then End)  on disk)      other finishers may go)
///
///  in a child forked without exec, its copy of the parent's runtime:
///  any phase ──forked──> ForkPending ──take_fork_restart──> Forked (the child's own runtime takes over)
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
#[repr(u8)]
pub enum Phase {
    /// Made and published; its collector thread is starting.
    Starting = 0,
    /// The collector runs (and never records itself); recording has not started.
    Ready = 1,
    /// Events are recorded.
    Recording = 2,
    /// This is a forked child's copy of its parent's runtime: it records nothing, and the child's first
    /// traced event starts a runtime of the child's own.
    ForkPending = 3,
    /// As [`Phase::ForkPending`], with the child's own runtime started (or refused) already.
    Forked = 4,
    /// A finish was claimed: recording stopped, the finisher hands every thread's chunk over.
    Stopping = 5,
    /// Every thread's chunk is queued: the collector writes what is left and the End chunk.
    Finishing = 6,
    /// The End chunk is written.
    Written = 7,
    /// The finish that was claimed has returned.
    Over = 8,
}

impl Phase {
    fn from_word(word: u64) -> Phase {
        match word & PHASE_MASK {
            0 => Phase::Starting,
            1 => Phase::Ready,
            2 => Phase::Recording,
            3 => Phase::ForkPending,
            4 => Phase::Forked,
            5 => Phase::Stopping,
            6 => Phase::Finishing,
            7 => Phase::Written,
            _ => Phase::Over,
        }
    }
}

/// The lifecycle word: the phase in the low byte; from [`Phase::Stopping`] on, why the trace ended
/// ([`END_BY_SIGNAL`]) and the signal (the high 32 bits), set by the transition that claims the finish.
const PHASE_MASK: u64 = 0xff;
const END_BY_SIGNAL: u64 = 1 << 8;
const SIGNAL_SHIFT: u32 = 32;

/// The one owner of a runtime's lifecycle: its [`Phase`] and why it ended, in one atomic word, and the
/// two requests that are not phases (wake the collector; write the flight ring). Every method is
/// lock-free and allocation-free, so a fatal-signal handler may use any of them.
///
/// Memory ordering: a transition that hands work to another thread is a release (the collector's
/// `Ready` publishes that it runs unrecorded; `Finishing` publishes the chunks the finisher queued;
/// `Written` the End chunk; `Over` the end of the finish), and every reader of the phase acquires.
/// `claim_finish` is a compare-exchange, so exactly one caller finishes; the others read why the trace
/// ended from the same word.
pub struct Lifecycle {
    word: AtomicU64,
    /// The collector thread (set once it is spawned), to wake.
    collector: OnceLock<std::thread::Thread>,
    /// Set by the collector while it naps. Traced threads wake it only then; the flag is a hint (a wake
    /// it misses costs at most the collector's nap, [`COLLECTOR_NAP`]).
    collector_sleeping: AtomicBool,
    /// Flight mode: write the ring now (SIGUSR2).
    dump_requested: AtomicBool,
}

/// The longest the collector sleeps between two looks at the full queue.
pub const COLLECTOR_NAP: Duration = Duration::from_millis(5);

impl Lifecycle {
    fn new() -> Lifecycle {
        Lifecycle {
            word: AtomicU64::new(Phase::Starting as u64),
            collector: OnceLock::new(),
            collector_sleeping: AtomicBool::new(false),
            dump_requested: AtomicBool::new(false),
        }
    }

    /// The current phase.
    pub fn phase(&self) -> Phase {
        Phase::from_word(self.word.load(Ordering::Acquire))
    }

    /// True while events are recorded ([`Phase::Recording`]).
    pub fn is_recording(&self) -> bool {
        self.phase() == Phase::Recording
    }

    /// True once every thread's chunk is queued for the collector's last round.
    pub fn is_finishing(&self) -> bool {
        self.phase() >= Phase::Finishing
    }

    /// Moves from `from` to `to`, if the phase is `from`.
    fn transition(&self, from: Phase, to: Phase) -> bool {
        self.word
            .compare_exchange(from as u64, to as u64, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// Moves forward to `to` (a phase of the end), keeping why the trace ended; never back.
    fn advance(&self, to: Phase) {
        let _ = self
            .word
            .fetch_update(Ordering::Release, Ordering::Acquire, |w| {
                (Phase::from_word(w) < to).then_some(w & !PHASE_MASK | to as u64)
            });
    }

    /// Starting → Ready: the collector runs, and has marked its thread as one that never records.
    /// (Nothing happens if a finish was claimed meanwhile: the collector just goes on to finish.)
    pub fn collector_running(&self) {
        self.transition(Phase::Starting, Phase::Ready);
    }

    /// Notes the collector's thread, which [`Lifecycle::wake_collector`] wakes.
    pub fn set_collector(&self, thread: std::thread::Thread) {
        let _ = self.collector.set(thread);
    }

    /// Waits (at most `limit`) until the collector runs; false if it did not start in time.
    pub fn wait_collector_running(&self, limit: Duration) -> bool {
        let started = Instant::now();
        while self.phase() == Phase::Starting {
            if started.elapsed() > limit {
                return false;
            }
            std::thread::sleep(Duration::from_micros(50));
        }
        true
    }

    /// Ready → Recording. False when a finish was claimed first: then nothing is ever recorded.
    pub fn start_recording(&self) -> bool {
        self.transition(Phase::Ready, Phase::Recording)
    }

    /// Any phase → ForkPending, in a child right after `fork` (the child's only thread), on its copy
    /// of the parent's runtime: nothing records into it any more (no collector would ever take the
    /// chunks), and the child's first traced event starts a runtime of its own.
    pub fn forked(&self) {
        self.word
            .store(Phase::ForkPending as u64, Ordering::Release);
    }

    /// ForkPending → Forked: true, once, for the first traced event of a forked child, which then
    /// starts the child's own runtime.
    pub fn take_fork_restart(&self) -> bool {
        self.phase() == Phase::ForkPending && self.transition(Phase::ForkPending, Phase::Forked)
    }

    /// Starting, Ready, Recording (or a fork's phase) → Stopping, noting why the trace ends: true for the
    /// one caller that claims the finish, false if another one did (whatever the phase now).
    pub fn claim_finish(&self, reason: EndReason, signal: i32) -> bool {
        let why = match reason {
            EndReason::Exit => 0,
            EndReason::Signal => END_BY_SIGNAL,
        } | (signal as u32 as u64) << SIGNAL_SHIFT;
        self.word
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |w| {
                (Phase::from_word(w) < Phase::Stopping).then_some(why | Phase::Stopping as u64)
            })
            .is_ok()
    }

    /// Why the trace ended and by which signal (0 if none), once a finish was claimed.
    pub fn end(&self) -> (EndReason, u32) {
        let w = self.word.load(Ordering::Acquire);
        let reason = if w & END_BY_SIGNAL != 0 {
            EndReason::Signal
        } else {
            EndReason::Exit
        };
        (reason, (w >> SIGNAL_SHIFT) as u32)
    }

    /// Stopping → Finishing (the finisher, once every thread's chunk is queued), and wakes the collector
    /// for its last round.
    pub fn threads_stopped(&self) {
        self.advance(Phase::Finishing);
        self.unpark_collector();
    }

    /// Finishing → Written: the collector wrote the End chunk.
    pub fn end_written(&self) {
        self.advance(Phase::Written);
    }

    /// Waits (at most `limit`, waking the collector every 200 µs) until the End chunk is written.
    pub fn wait_end_written(&self, limit: Duration) {
        let start = Instant::now();
        while self.phase() < Phase::Written && start.elapsed() < limit {
            self.unpark_collector();
            std::thread::sleep(Duration::from_micros(200));
        }
    }

    /// → Over: the finish that was claimed returns (whether or not the End chunk made it in time).
    pub fn finish_over(&self) {
        self.advance(Phase::Over);
    }

    /// For a finish that found another one claimed: waits (at most `limit`) until that one is over.
    pub fn wait_finish_over(&self, limit: Duration) {
        let start = Instant::now();
        while self.phase() < Phase::Over && start.elapsed() < limit {
            std::thread::sleep(Duration::from_micros(200));
        }
    }

    /// Wakes the collector if it naps (a thread handed over chunks, or found none free).
    pub fn wake_collector(&self) {
        if self.collector_sleeping.load(Ordering::Relaxed) {
            self.unpark_collector();
        }
    }

    fn unpark_collector(&self) {
        if let Some(t) = self.collector.get() {
            t.unpark();
        }
    }

    /// The collector, with nothing to do: naps ([`COLLECTOR_NAP`] at most) unless `work_waiting` says
    /// otherwise once it is marked as sleeping (a thread queuing a chunk after that wakes it), or the
    /// finish has started.
    pub fn collector_nap(&self, work_waiting: impl FnOnce() -> bool) {
        self.collector_sleeping.store(true, Ordering::SeqCst);
        if !work_waiting() && !self.is_finishing() {
            std::thread::park_timeout(COLLECTOR_NAP);
        }
        self.collector_sleeping.store(false, Ordering::SeqCst);
    }

    /// Flight mode, SIGUSR2: asks the collector to write the ring now.
    pub fn request_dump(&self) {
        self.dump_requested.store(true, Ordering::Release);
        self.wake_collector();
    }

    /// The collector: true once for each [`Lifecycle::request_dump`].
    pub fn take_dump_request(&self) -> bool {
        self.dump_requested.swap(false, Ordering::AcqRel)
    }
}

/// The one runtime of this process.
pub struct Runtime {
    /// Settings from the environment.
    pub config: Config,
    /// Chunk memory and queues.
    pub pool: Pool,
    /// Where it is in its life, and the requests to its collector.
    pub lifecycle: Lifecycle,
    /// Every thread that ever recorded (slots are reused).
    pub registry: Registry,
    /// What start-up found out about the program.
    pub program: Program,
    /// Objects already scanned for sleds, and the next function id.
    known: Mutex<xray::Known>,
    meta: Mutex<Vec<Meta>>,
    /// The process this runtime records: a forked child has a copy of its parent's runtime, which it
    /// must neither finish nor write through.
    pid: u32,
    /// The chunks that describe the program (modules, functions, tracepoints), as written at the head of
    /// the file and by rescans since: a forked child's trace starts with them.
    header: Mutex<Vec<(ChunkKind, Vec<u8>)>>,
    /// `ferrotrace live`: where the collector prints events as they happen.
    pub live: Option<live::Output>,
    /// mcount/fentry calls not traced because they were nested deeper than the shadow stack, in every
    /// thread (said at the end).
    pub too_deep: AtomicU64,
}

/// What start-up found out about the program, which a forked child's runtime keeps.
#[derive(Clone, Copy, Debug)]
pub struct Program {
    /// Which copy of the runtime this is.
    pub role: Role,
    /// What the trace records: how the functions are instrumented (XRay, mcount, fentry, NOPs) and
    /// whether the program has tracepoints (the Session chunk's field, bits of `schema::source`).
    pub sources: u64,
    /// The program links Rust's std, whose own stack-overflow handler the runtime's displaces: on a stack
    /// overflow the runtime then does what std would (message, abort).
    pub rust_std: bool,
    /// Where patched sleds and NOPs go (in live mode, the trampolines that record the CPU).
    pub targets: xray::Targets,
    /// Allocations are recorded, with these settings.
    pub alloc: Option<crate::alloc::Settings>,
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
        if !self.lifecycle.claim_finish(reason, signal) {
            self.lifecycle
                .wait_finish_over(FINISH_LIMIT + Duration::from_secs(5));
            return Finished::ByOther;
        }
        crate::thread::flush_all(self, from_signal);
        self.lifecycle.threads_stopped();
        self.lifecycle.wait_end_written(if from_signal {
            Duration::from_secs(3)
        } else {
            FINISH_LIMIT
        });
        let too_deep = self.too_deep.load(Ordering::Relaxed);
        if too_deep > 0 && !from_signal {
            eprintln!(
                "ferrotrace: {too_deep} calls nested deeper than the shadow stack ({} frames) were not traced \
                 (counted as lost events); {} sets its depth",
                self.config.shadow_frames(),
                env::SHADOW_DEPTH
            );
        }
        self.lifecycle.finish_over();
        Finished::Here
    }

    /// False in a forked child that has not started recording on its own.
    pub fn records_this_process(&self) -> bool {
        self.pid == std::process::id()
    }
}

/// Looks for objects loaded since the last scan (`dlopen`) and patches their selected functions; their
/// modules and symbol table go into the trace. Called by the preload library's `dlopen` wrapper, by the
/// collector every second, and by programs through [`crate::rescan`].
pub fn rescan() {
    let Some(rt) = get() else { return };
    if !rt.lifecycle.is_recording() {
        return;
    }
    let mut known = rt.known.lock().unwrap_or_else(|e| e.into_inner());
    let found = match xray::discover(&rt.config, rt.program.role == Role::Preload, &mut known) {
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
    if let Err(e) = unsafe { xray::patch(&found, &rt.program.targets) } {
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
        sources: program.sources,
        alloc_sample: program.alloc.map_or(0, |a| a.sample),
    }
    .encode(&mut p);
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
    let alloc = crate::alloc::requested()?;
    let (path, started_by_traced) = output_path(&config);
    crate::hot::init_tls_offset();
    trampoline::init_xsave_area();
    crate::hot::init_cpu_offset();
    let mut known = xray::Known::default();
    let found = xray::discover(&config, role == Role::Preload, &mut known)?;
    // Ids first: the live printer names tracepoints by them.
    let tracepoints = crate::tracepoints::assign_ids();
    let live = live::Output::from_env(
        || {
            found
                .functions
                .iter()
                .map(|f| crate::config::display_name(&f.name))
                .collect()
        },
        || {
            crate::tracepoint::all()
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
        },
    );
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
    if found.functions.is_empty() && crate::tracepoints::requested().is_none() && alloc.is_none() {
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
    header.push((ChunkKind::Tracepoints, tracepoints));
    // How the functions are instrumented (XRay, mcount, fentry, NOPs: bits of the same values), and
    // whether there are tracepoints and allocations.
    let mut sources = found.instrumentation;
    if !crate::tracepoint::all().is_empty() {
        sources |= schema::source::TRACEPOINTS;
    }
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
    let writer = open_trace(&config, &path, &header, &program, start_realtime)?;
    let rt = launch(
        Runtime::new(config, pool, program, known, header, live),
        writer,
        path,
        None,
    )?;
    exit::install();
    // Fails only if a signal finished the trace already: then nothing records.
    rt.lifecycle.start_recording();
    // SAFETY: `found` is discover's answer, unchanged.
    unsafe { xray::patch(&found, &rt.program.targets) }?;
    crate::tracepoints::enable_requested();
    // Last: the start-up's own allocations (and their frees) are not the program's.
    drop(found);
    if let Some(a) = alloc {
        crate::alloc::start(a);
    }
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
    program: &Program,
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

/// Where patched code goes: the XRay trampolines (those that record the CPU too, `with_cpu`) and the
/// mcount hooks.
fn targets(with_cpu: bool) -> xray::Targets {
    let (mcount, fentry) = crate::mcount::hook_addresses();
    xray::Targets {
        xray: trampoline::trampolines(with_cpu),
        mcount,
        fentry,
    }
}

impl Runtime {
    fn new(
        config: Config,
        pool: Pool,
        program: Program,
        known: xray::Known,
        header: Vec<(ChunkKind, Vec<u8>)>,
        live: Option<live::Output>,
    ) -> Runtime {
        Runtime {
            config,
            pool,
            lifecycle: Lifecycle::new(),
            registry: Registry::new(),
            program,
            known: Mutex::new(known),
            meta: Mutex::new(Vec::new()),
            pid: std::process::id(),
            header: Mutex::new(header),
            live,
            too_deep: AtomicU64::new(0),
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
    rt.lifecycle.set_collector(handle.thread().clone());
    if !rt.lifecycle.wait_collector_running(Duration::from_secs(5)) {
        return Err("the collector thread did not start within 5 s".into());
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
    let Some(parent) = get().filter(|rt| !rt.records_this_process() && rt.live.is_none()) else {
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
        let writer = open_trace(&config, &path, &header, &parent.program, start_realtime)?;
        launch(
            Runtime::new(config, pool, parent.program, known, header, None),
            writer,
            path,
            Some(parent),
        )
    });
    match started {
        Ok(rt) => {
            rt.lifecycle.start_recording();
        }
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
    crate::hot::init_tls_offset();
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
    let writer = open_trace(&config, &path, &[], &program, start_realtime).expect("trace file");
    let rt = launch(
        Runtime::new(
            config,
            pool,
            program,
            xray::Known::default(),
            Vec::new(),
            None,
        ),
        writer,
        path,
        None,
    )
    .expect("launch");
    rt.lifecycle.start_recording();
    rt
}
