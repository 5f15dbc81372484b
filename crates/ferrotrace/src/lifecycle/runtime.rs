//! The one runtime of the process: its state, the lifecycle that every part of it goes through (start,
//! recording, the end, a fork), and the metadata channel to the collector. Everything one recording's
//! runtime keeps is reachable from [`Runtime`], through [`get`]; what the process keeps besides it, and
//! what [`retire`] resets of that, is `crate::state`. What acts on the runtime lives above (`thread`,
//! `collector`, `exit`, `start`).

use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use ferrotrace_core::format::ChunkKind;

use crate::buffers::collector::Writer;
use crate::buffers::live;
use crate::buffers::pool::Pool;
use crate::buffers::registry::Registry;
use crate::lifecycle::config::Config;
use crate::patch::{discovery, sites};
use crate::state::PROCESS;

/// Chunks to write as they are: `(kind, payload)`.
pub type Chunks = Vec<(ChunkKind, Vec<u8>)>;

/// Metadata that traced threads hand to the collector (rare: once per thread and at the end).
#[derive(Debug)]
pub enum Meta {
    /// A thread registered or was renamed.
    Thread {
        /// OS thread id.
        tid: u32,
        /// Thread name.
        name: String,
        /// When it was registered (ticks; 0 for a rename): `schema::Thread::registered_ticks`.
        registered_ticks: u64,
    },
    /// Chunks to write as they are (modules and functions found by a rescan).
    Chunks(Chunks),
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
    /// The collector runs (and never records itself), or is deferred until there is something to
    /// write ([`Runtime::deferred_collector`]); recording has not started.
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
const END_STOPPED: u64 = 1 << 9;
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

    /// Starting → Ready without a collector: it starts when there is something to write
    /// ([`Runtime::deferred_collector`]).
    pub fn collector_deferred(&self) {
        self.transition(Phase::Starting, Phase::Ready);
    }

    /// Notes the collector's thread, which [`Lifecycle::wake_collector`] wakes.
    pub fn set_collector(&self, thread: std::thread::Thread) {
        let _ = self.collector.set(thread);
    }

    /// True once a collector thread was started.
    pub fn has_collector(&self) -> bool {
        self.collector.get().is_some()
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
            EndReason::Stopped => END_STOPPED,
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
        } else if w & END_STOPPED != 0 {
            EndReason::Stopped
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
    /// What the recording core calls above itself.
    pub upcalls: Upcalls,
    /// Objects already scanned for sleds, and the next function id.
    known: Mutex<discovery::Known>,
    meta: Mutex<Vec<Meta>>,
    /// The process this runtime records: a forked child has a copy of its parent's runtime, which it
    /// must neither finish nor write through.
    pid: u32,
    /// The chunks that describe the program (modules, functions, tracepoints), as written at the head of
    /// the file and by rescans since: a forked child's trace starts with them.
    header: Mutex<Chunks>,
    /// `ferrotrace live`: where the collector prints events as they happen.
    pub live: Option<live::Output>,
    /// mcount/fentry calls not traced because they were nested deeper than the shadow stack, in every
    /// thread (said at the end).
    pub too_deep: AtomicU64,
    /// A runtime started by `ferrotrace_attach` in a running process: the control channel whose end
    /// stops it (set before its collector starts).
    pub control: OnceLock<Control>,
    /// The trace's writer and path, while the collector is deferred: held until a chunk is handed
    /// over or the trace ends, when the collector (or, in a signal handler, a copy of the process)
    /// takes them. A second thread makes the C library lock its allocator and stdio for the rest
    /// of the process's life: a program that records little must not pay that
    /// (`lifecycle::plan::ensure_collector`).
    pub deferred_collector: Mutex<Option<(Writer, std::path::PathBuf)>>,
    /// The collector's state while it runs (`None` once the End chunk is written), which a traced
    /// thread waiting for a chunk may take to write one itself (`buffers::collector::help`).
    pub collector_state: OnceLock<Mutex<Option<crate::buffers::collector::State>>>,
}

/// The control channel of an attached recording (`record -p`): a FIFO in a private directory that the
/// host holds open; its end of file (the host closed it, or died) stops the recording, and the
/// collector then creates `done` beside it once the trace is written. The host stays there while it
/// records, so the entry jumps of objects loaded later are handed to it too
/// ([`Control::hand_later_entry_jumps`]).
pub struct Control {
    /// The FIFO, opened for reading without blocking (-1 once closed).
    fifo: std::sync::atomic::AtomicI32,
    /// Created once the End chunk is written.
    pub done: std::path::PathBuf,
    /// What the attachment turned on besides patched functions (tracepoints), turned off when the host
    /// stops it.
    undo: Mutex<Option<Box<dyn FnOnce() + Send>>>,
    /// Lists of entry jumps handed to the host after the start.
    later_jump_lists: std::sync::atomic::AtomicU32,
}

impl std::fmt::Debug for Control {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Control")
            .field("fifo", &self.fifo)
            .field("done", &self.done)
            .finish_non_exhaustive()
    }
}

impl Control {
    /// The channel through `fifo` (a descriptor opened for reading without blocking, now ours).
    pub fn new(fifo: std::fs::File, done: std::path::PathBuf) -> Control {
        use std::os::fd::IntoRawFd;
        Control {
            fifo: std::sync::atomic::AtomicI32::new(fifo.into_raw_fd()),
            done,
            undo: Mutex::new(None),
            later_jump_lists: std::sync::atomic::AtomicU32::new(0),
        }
    }

    /// Hands the host the entry jumps a rescan prepared (objects the program loaded after the
    /// attach): the next of [`ferrotrace_core::env::later_entry_jumps_file`]'s numbered lists, which
    /// the host looks for while it waits and writes with every thread stopped, as at the start.
    pub fn hand_later_entry_jumps(&self, jumps: &[ferrotrace_core::env::EntryJump]) {
        if jumps.is_empty() {
            return;
        }
        let Some(dir) = self.done.parent() else {
            return;
        };
        let n = self.later_jump_lists.fetch_add(1, Ordering::Relaxed) + 1;
        crate::lifecycle::plan::hand_to_host(
            dir,
            &ferrotrace_core::env::later_entry_jumps_file(n),
            jumps,
        );
    }

    /// Sets what [`Control::undo`] does when the host stops the recording.
    pub fn on_stop(&self, undo: Box<dyn FnOnce() + Send>) {
        *self.undo.lock().unwrap_or_else(|e| e.into_inner()) = Some(undo);
    }

    /// The host stopped the recording: turns off what [`Control::on_stop`] was given (once).
    pub fn undo(&self) {
        let undo = self.undo.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(undo) = undo {
            undo();
        }
    }

    /// True once the host closed its end (or died); never blocks.
    pub fn closed(&self) -> bool {
        let fd = self.fifo.load(Ordering::Acquire);
        if fd < 0 {
            return true;
        }
        let mut buf = [0u8; 64];
        loop {
            // SAFETY: reading into a local buffer from our descriptor.
            let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
            match n {
                0 => return true,
                n if n > 0 => continue,
                _ => {
                    let e = std::io::Error::last_os_error();
                    if e.kind() == std::io::ErrorKind::Interrupted {
                        continue;
                    }
                    return e.kind() != std::io::ErrorKind::WouldBlock;
                }
            }
        }
    }

    /// Closes the FIFO (the runtime is retired: the process keeps no descriptor of ours).
    pub fn close(&self) {
        let fd = self.fifo.swap(-1, Ordering::AcqRel);
        if fd >= 0 {
            // SAFETY: our descriptor, closed once (the swap).
            unsafe { libc::close(fd) };
        }
    }
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
    pub targets: sites::Targets,
    /// Allocations are recorded, with these settings.
    pub alloc: Option<crate::lifecycle::config::AllocSettings>,
}

/// What the recording core calls in the layers above it. The slow path (`thread`) and the collector are
/// below every recorder, which call them, and below start-up, which needs the recorders' addresses to
/// patch code; yet some moments they are the first to see belong to those layers: a forked child's
/// first traced event starts the child's own runtime (start-up's work), a traced thread's exit frees
/// what the recorders keep for the thread, and the collector writes what the recorders describe (the
/// allocation stacks). Start-up hands down the functions that do it, with the runtime.
#[derive(Clone, Copy, Debug)]
pub struct Upcalls {
    /// In a forked child, at its first traced event (called on the parent's copy of the runtime):
    /// starts the child's own runtime.
    pub fork_restart: fn(),
    /// A thread handed over a chunk, or the trace ends: starts the collector if start-up deferred it
    /// (`lifecycle::plan::ensure_collector`).
    pub ensure_collector: fn(&'static Runtime),
    /// Every recorder's hooks (`recorders::ALL`), in the order they start.
    pub recorders: &'static [Recorder],
}

/// One recorder's hooks: what the rooms that must not name a recorder call (the slow path at a
/// thread's exit, the collector, start-up). Each recorder defines one (`RECORDER`, beside its code)
/// and `recorders::ALL` lists them: adding a recorder is its module and one line there.
#[derive(Clone, Copy, Debug)]
pub struct Recorder {
    /// At the end of start-up, once recording is on (not in a forked child, which inherits its
    /// parent's recorders as they are): starts the recorder with what start-up found. True when it
    /// records in this run.
    pub start: fn(&Program) -> bool,
    /// `pthread_atfork` handlers, registered when `start` said it records.
    pub fork: Option<ForkHandlers>,
    /// A traced thread exits, its last chunk handed over: frees what the recorder keeps for it.
    pub thread_exit: fn(),
    /// One of the runtime's own threads starts (the collector, the USDT watcher): never record it.
    pub ignore_thread: fn(),
    /// For the collector, before it writes a chunk of events: the chunks describing what those events
    /// may refer to that the recorder made since the last call (written ahead of the events).
    pub metadata: fn() -> Vec<(ChunkKind, Vec<u8>)>,
}

impl Recorder {
    /// A recorder that needs none of the hooks: fill in those it needs (`..Recorder::NONE`).
    pub const NONE: Recorder = Recorder {
        start: |_| true,
        fork: None,
        thread_exit: || {},
        ignore_thread: || {},
        metadata: Vec::new,
    };
}

/// A recorder's fork handlers: before the fork, then in the parent, and in the child.
#[derive(Clone, Copy, Debug)]
pub struct ForkHandlers {
    /// Before `fork`, in the forking thread.
    pub prepare: extern "C" fn(),
    /// After `fork`, in the parent.
    pub parent: extern "C" fn(),
    /// After `fork`, in the child.
    pub child: extern "C" fn(),
}

/// The running runtime: set once at start, replaced in a forked child that records (the old one is
/// its parent's copy and stays allocated: references to it may still be held). The rest of the
/// process's state is `crate::state::PROCESS`; this pointer stays beside its type, which that module,
/// below every room, does not name.
static RUNTIME: AtomicPtr<Runtime> = AtomicPtr::new(core::ptr::null_mut());

/// The running runtime, if one started in this process.
pub fn get() -> Option<&'static Runtime> {
    // SAFETY: RUNTIME is null or a leaked Box that is never freed.
    unsafe { RUNTIME.load(Ordering::Acquire).as_ref() }
}

/// Makes `rt` the process's runtime, in place of `replacing` (a forked child's copy of its parent's) or
/// of none. Fails if another runtime got there first.
pub fn publish(
    rt: Runtime,
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
    Ok(rt)
}

/// A runtime that stopped while the program runs on (an attach's host stopped it, or the program its
/// own recording), its sites put back and its trace finished, goes: the process is back to having
/// none, and a later start publishes a new one. The one retirement, whichever stopped it: its control
/// channel and live output closed, its pool given back if the collector is done with it (it wrote
/// the End chunk; a finish that gave up waiting leaves the pool to it), what only a recording reads
/// freed ([`Runtime::release_retired`]), and the recording's part of the process's state reset
/// (`state::Process::recording_retired`). (`rt` stays allocated: threads may still hold references
/// to it.)
pub fn retire(rt: &'static Runtime) {
    let _ = RUNTIME.compare_exchange(
        rt as *const Runtime as *mut Runtime,
        core::ptr::null_mut(),
        Ordering::AcqRel,
        Ordering::Acquire,
    );
    if let Some(c) = rt.control.get() {
        c.close();
    }
    if let Some(live) = &rt.live {
        live.close();
    }
    // The collector drops its state once the End chunk is written, and reads the pool until then.
    let collector_done = rt
        .collector_state
        .get()
        .is_some_and(|s| s.lock().unwrap_or_else(|e| e.into_inner()).is_none());
    if collector_done {
        rt.pool.give_back();
    }
    rt.release_retired();
    PROCESS.recording_retired();
}

impl Runtime {
    /// A runtime in its first phase (`Starting`), with nothing recorded yet.
    pub fn new(
        config: Config,
        pool: Pool,
        program: Program,
        upcalls: Upcalls,
        known: discovery::Known,
        header: Chunks,
        live: Option<live::Output>,
    ) -> Runtime {
        Runtime {
            config,
            pool,
            lifecycle: Lifecycle::new(),
            registry: Registry::new(),
            program,
            upcalls,
            known: Mutex::new(known),
            meta: Mutex::new(Vec::new()),
            pid: std::process::id(),
            header: Mutex::new(header),
            live,
            too_deep: AtomicU64::new(0),
            control: OnceLock::new(),
            deferred_collector: Mutex::new(None),
            collector_state: OnceLock::new(),
        }
    }

    /// Queues metadata for the collector (never from a signal handler: it allocates).
    pub fn push_meta(&self, m: Meta) {
        self.meta.lock().unwrap_or_else(|e| e.into_inner()).push(m);
    }

    /// Takes the queued metadata.
    pub fn take_meta(&self) -> Vec<Meta> {
        std::mem::take(&mut *self.meta.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// False in a forked child that has not started recording on its own.
    pub fn records_this_process(&self) -> bool {
        self.pid == std::process::id()
    }

    /// A new function id for a function that is in no loaded object (a `tracing` span), never given
    /// before nor by a later rescan, with its `-F`/`-N` matches (`buffers::filter`'s flags) when the
    /// collector selects.
    pub fn new_function_id(&self, filter_flags: u8) -> u32 {
        let mut known = self.known.lock().unwrap_or_else(|e| e.into_inner());
        let id = known.next_function_id.max(1);
        known.next_function_id = id + 1;
        if self.config.filters_events() {
            let at = id as usize;
            if known.filter_flags.len() <= at {
                known.filter_flags.resize(at + 1, 0);
            }
            known.filter_flags[at] = filter_flags;
        }
        id
    }

    /// Adds to the program's description what a recorder described since start-up, for the trace of
    /// a forked child (the collector writes it into this trace through the recorder's metadata hook).
    pub fn describe(&self, chunks: Chunks) {
        self.header
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend(chunks);
    }

    /// Per function id, its `-F`/`-N` matches (`buffers::filter`), as discovered so far.
    pub fn function_filter_flags(&self) -> Vec<u8> {
        self.known
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .filter_flags
            .clone()
    }

    /// The runtime retired ([`retire`]): frees what only a recording reads (the description and what
    /// discovery saw, which can be large for a program of many functions). The rest stays allocated,
    /// small: threads may still hold references to the runtime.
    pub fn release_retired(&self) {
        *self.header.lock().unwrap_or_else(|e| e.into_inner()) = Chunks::new();
        *self.known.lock().unwrap_or_else(|e| e.into_inner()) = discovery::Known::default();
    }

    /// The program's description as written at the head of the trace and by rescans since (modules,
    /// functions, tracepoints), and what discovery has seen: what a forked child's trace starts with.
    /// `None` if a thread of the parent was changing them when it forked.
    pub fn description(&self) -> Option<(Chunks, discovery::Known)> {
        let (Ok(header), Ok(known)) = (self.header.try_lock(), self.known.try_lock()) else {
            return None;
        };
        Some((header.clone(), known.clone()))
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
    let found = match discovery::discover(&rt.config, rt.program.role == Role::Preload, &mut known)
    {
        Ok(f) => f,
        Err(e) => {
            say!("ferrotrace: rescanning loaded objects failed: {e}");
            return;
        }
    };
    if found.modules.is_empty() {
        return;
    }
    let mut chunks: Chunks = found
        .module_payloads()
        .into_iter()
        .map(|p| (ChunkKind::Module, p))
        .collect();
    if !found.functions.is_empty() {
        chunks.push((ChunkKind::Functions, found.functions_payload()));
        if let Some(p) = found.arg_specs_payload() {
            chunks.push((ChunkKind::ArgSpecs, p));
        }
    }
    rt.header
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .extend(chunks.iter().cloned());
    // Queued before patching: the collector writes metadata before the chunks it takes after it.
    rt.push_meta(Meta::Chunks(chunks));
    // An attached runtime's host writes the entry jumps, every thread stopped (the program's
    // threads run on while the new object's functions are found and their trampolines built).
    let control = rt.control.get();
    let who = match control {
        Some(_) => sites::EntryJumps::Host,
        None => sites::EntryJumps::Here,
    };
    // SAFETY: `found` is discover's answer, unchanged.
    match unsafe { sites::patch(&found, &rt.program.targets, who) } {
        Ok(jumps) => {
            if let Some(c) = control {
                c.hand_later_entry_jumps(&jumps);
            }
        }
        Err(e) => say!("ferrotrace: patching newly loaded objects failed: {e}"),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_finish_is_claimed_and_says_why() {
        let life = Lifecycle::new();
        life.collector_running();
        assert!(life.start_recording());
        assert!(life.is_recording());
        let winners: Vec<(usize, bool)> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..8)
                .map(|i| {
                    let life = &life;
                    s.spawn(move || (i, life.claim_finish(EndReason::Signal, 1 + i as i32)))
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let won: Vec<usize> = winners.iter().filter(|w| w.1).map(|w| w.0).collect();
        assert_eq!(won.len(), 1, "{winners:?}");
        assert_eq!(life.end(), (EndReason::Signal, 1 + won[0] as u32));
        assert_eq!(life.phase(), Phase::Stopping);
        assert!(!life.is_recording());
        assert!(!life.claim_finish(EndReason::Exit, 0));
        assert_eq!(life.end(), (EndReason::Signal, 1 + won[0] as u32));
    }

    #[test]
    fn the_end_only_moves_forward_and_recording_never_starts_after_it() {
        let life = Lifecycle::new();
        // A finish claimed before the collector ran: the collector's start changes nothing, and
        // recording cannot start.
        assert!(life.claim_finish(EndReason::Exit, 0));
        life.collector_running();
        assert_eq!(life.phase(), Phase::Stopping);
        assert!(!life.start_recording());
        life.threads_stopped();
        assert!(life.is_finishing());
        // The finisher gave up waiting and returned before the collector wrote the End chunk.
        life.finish_over();
        life.end_written();
        assert_eq!(life.phase(), Phase::Over);
        assert_eq!(life.end(), (EndReason::Exit, 0));
    }

    #[test]
    fn a_forked_copy_restarts_once() {
        let life = Lifecycle::new();
        life.collector_running();
        assert!(life.start_recording());
        life.forked();
        assert!(!life.is_recording());
        assert!(life.take_fork_restart());
        assert!(!life.take_fork_restart());
        assert_eq!(life.phase(), Phase::Forked);
    }
}
