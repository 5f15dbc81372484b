//! The sampling and probe profiler of ferrotrace (`ferrotrace profile`): it records; analysis is
//! `ferrotrace-analysis`'s, as for every other trace.
//!
//! What it is for: finding where a Linux x86_64 program spends its time, or from where it reaches a
//! function, without rebuilding it with instrumentation. It samples every thread of a program (including
//! threads and child processes created later) or of a running process with `perf_event_open`
//! (`cpu-clock`), and records hits of uprobes (`uprobe:PATH:SYMBOL`, `uretprobe:PATH:SYMBOL` and USDT probes
//! `usdt:PATH:PROVIDER:NAME`, created through tracefs) and kernel
//! tracepoints (`sched:sched_switch` gives off-CPU stacks), each with its stack — by frame pointers
//! (walked by the kernel) or by DWARF CFI (a copy of the user stack unwound with framehop *while
//! recording*; raw stacks are never written). Everything goes into a standard ferrotrace trace
//! (`docs/format.md`): Sample events in each thread's Events chunks, their stacks in the interned
//! Stacks table with addresses relative to the Module each lies in, the samplers in a Samplers chunk.
//! Names are given at analysis time by `ferrotrace_reader::symbolize` (inlined frames, separate debug
//! files, kernel symbols), which checks every module's build-id.
//!
//! With [`Backend::Bpf`] (`--bpf`) the stacks are instead unwound and the samples counted in the
//! kernel by the BPF programs of `ferrotrace-bpf` (no stack bytes leave the kernel per sample); this
//! crate still opens the events, follows the processes and writes the same trace. That backend also
//! profiles every process of the machine ([`Target::SystemWide`], `-a`).
//!
//! What it is not for: exact call counts or durations of every call (that is function tracing: the
//! `ferrotrace` runtime), hardware counters (not available here), kprobes, the BPF programs
//! themselves (`ferrotrace-bpf`), or other operating systems; nor reading traces (`ferrotrace-analysis`). The command-line parser lives in the
//! `ferrotrace` CLI; this crate gives it [`cli_args`] so that the CLI stays thin.
//!
//! It does not start programs: `ferrotrace_launch` starts every program ferrotrace runs, holds it
//! before its `execve` and hands it to [`profile_held`] (`ferrotrace_launch::profile` does both for
//! a [`Target::Command`]). [`profile`] follows what runs already:
//!
//! ```no_run
//! use ferrotrace_profile::{profile, ProfileConfig, Target};
//!
//! let cfg = ProfileConfig {
//!     target: Target::Pid(4242),
//!     output: "ferrotrace.data".into(),
//!     duration: Some(std::time::Duration::from_secs(5)),
//!     ..ProfileConfig::default()
//! };
//! let summary = profile(&cfg)?;
//! eprintln!("{} samples, {} lost", summary.samples, summary.lost);
//! # Ok::<(), ferrotrace_profile::ProfileError>(())
//! ```
#![warn(missing_docs)]

pub mod cli_args;
mod error;
mod file;
mod hold;
mod modules;
mod perf;
pub mod probes;
mod recorder;
pub mod usdt;

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

pub use cli_args::{CallGraph, EventSpec};
pub use error::ProfileError;

/// What to profile.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// A program started and held by the caller ([`profile_held`], [`profile_started`]), profiled
    /// until it exits.
    Command {
        /// The file to run, found by the caller as `execvp` finds it
        /// (`ferrotrace_launch::program::resolve`): it is run as it is, not looked up again.
        program: std::path::PathBuf,
        /// Its `argv`, from `argv[0]` as the user wrote it.
        argv: Vec<OsString>,
    },
    /// Attach to a running process (all its threads) until it exits, the duration ends, or Ctrl-C.
    Pid(u32),
    /// Every process of the machine (`-a`, eBPF backend only), until the duration ends or Ctrl-C.
    SystemWide,
}

/// Where stacks are unwound and samples counted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Backend {
    /// perf_event rings: every sample (with its frame-pointer callchain, or a copy of the user stack
    /// for DWARF unwinding here) is read by the recorder.
    #[default]
    PerfEvent,
    /// eBPF (`--bpf`): a BPF program unwinds each sample's user stack in the kernel (DWARF rows from
    /// `.eh_frame`, frame pointers where a module has none) and counts samples per stack in a map;
    /// the recorder reads the counts and each distinct stack once (`ferrotrace-bpf`).
    Bpf,
}

/// A profiling session's settings. `Default` gives cpu-clock at 999 Hz with frame pointers into
/// `ferrotrace.data`, with an empty command (set [`ProfileConfig::target`]).
#[derive(Clone, Debug)]
pub struct ProfileConfig {
    /// Events to record; the first one also carries the process bookkeeping (maps, comm, fork).
    pub events: Vec<EventSpec>,
    /// cpu-clock sampling frequency in Hz.
    pub frequency: u32,
    /// How stacks are taken.
    pub call_graph: CallGraph,
    /// Bytes of user stack copied per sample in DWARF mode (multiple of 8, at most 65528).
    pub stack_size: u32,
    /// The trace file to write.
    pub output: PathBuf,
    /// What to profile.
    pub target: Target,
    /// Stop after this long (a started program is then sent SIGTERM).
    pub duration: Option<Duration>,
    /// Catch SIGINT/SIGTERM while recording so that probes are removed and the file is completed.
    pub handle_signals: bool,
    /// Record with `--call-graph fp` even when the program's `main` has no frame pointer.
    pub allow_missing_frame_pointers: bool,
    /// Data pages of each CPU's ring buffer (a power of two; perf's `--mmap-pages`). `None`: sized for
    /// the events (larger for probes and DWARF stacks, whose rate or records are large), smaller
    /// sizes tried when the kernel refuses the memory.
    pub buffer_pages: Option<usize>,
    /// Where stacks are unwound and samples counted.
    pub backend: Backend,
    /// Called once sampling has started with [`Target::SystemWide`], with the number of processes
    /// found running (their unwind tables are built in the background meanwhile: a process's stacks
    /// unwind once its own are in).
    pub on_system_wide_start: Option<fn(usize)>,
}

impl Default for ProfileConfig {
    fn default() -> Self {
        ProfileConfig {
            events: vec![EventSpec::CpuClock(None)],
            frequency: 999,
            call_graph: CallGraph::FramePointers,
            stack_size: 8192,
            output: PathBuf::from("ferrotrace.data"),
            target: Target::Command {
                program: std::path::PathBuf::new(),
                argv: Vec::new(),
            },
            duration: None,
            handle_signals: true,
            allow_missing_frame_pointers: false,
            buffer_pages: None,
            backend: Backend::PerfEvent,
            on_system_wide_start: None,
        }
    }
}

/// What a session recorded.
#[derive(Clone, Debug)]
pub struct ProfileSummary {
    /// The trace file.
    pub output: PathBuf,
    /// Process id of the profiled program.
    pub pid: u32,
    /// Samples and probe hits recorded.
    pub samples: u64,
    /// Samples and probe hits the kernel dropped because a ring was full (every one counted: the
    /// kernel's count of each event is read at the end).
    pub lost: u64,
    /// Stacks whose unwinding stopped early.
    pub unwind_errors: u64,
    /// Threads seen.
    pub threads: usize,
    /// Size of the trace file.
    pub bytes_written: u64,
    /// Exit code of a started program (128 + signal when killed by one).
    pub exit_code: Option<i32>,
    /// From start to the end of recording.
    pub recording_time: Duration,
    /// Time spent writing the last samples, the thread table and the end after the program ended.
    pub finishing_time: Duration,
    /// Bytes the recorder read from the kernel: ring records (perf_event), or counts, distinct stacks
    /// and the mapping records (eBPF).
    pub kernel_bytes: u64,
    /// eBPF: what the in-kernel unwinder did, in all.
    pub bpf_unwinder: Option<BpfUnwinderWork>,
    /// eBPF: unwind tables built and freed during this recording, or this period of a continuous
    /// one ([`profile_periods`]: the tables stay from one period to the next).
    pub unwind_tables: Option<UnwindTables>,
    /// One-line warnings for the user (lost samples, missing frame pointers, no kernel frames).
    pub warnings: Vec<String>,
}

/// The eBPF backend's unwind tables (one per mapped file) in a recording or a period.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UnwindTables {
    /// Tables built (from a file's `.eh_frame`; a file without one counts too).
    pub built: u64,
    /// Tables whose rows were freed to make room, their files mapped by no process followed (one
    /// mapped again later is built again).
    pub freed: u64,
}

/// What the eBPF backend's in-kernel unwinder did in a recording, in all.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BpfUnwinderWork {
    /// User frames it went through (with the BPF programs' run time, from
    /// `kernel.bpf_stats_enabled`, it gives their cost per frame).
    pub frames: u64,
    /// Its reads of user memory: a window of the stack per sample, a word per saved register or
    /// return address beyond it.
    pub user_reads: u64,
}

/// How to take the stacks of `program` when the user did not say: frame pointers where its `main`
/// keeps one (cheap, whole stacks); DWARF unwinding of a copied user stack where it does not (an
/// `-O2` C program) or where no symbol table tells (a stripped binary: Debian's builds keep no frame
/// pointers), whose frame-pointer stacks would stop at their first frame.
pub fn call_graph_for(program: &std::path::Path) -> CallGraph {
    match modules::main_has_frame_pointer(program) {
        Some(true) => CallGraph::FramePointers,
        Some(false) | None => CallGraph::Dwarf,
    }
}

/// [`call_graph_for`], and the line to say before the run when it chose DWARF (`record --sample`
/// and `profile` say the same): that frame pointers would have stopped the stacks at their first
/// frame.
pub fn call_graph_said(program: &std::path::Path) -> (CallGraph, Option<String>) {
    let chosen = call_graph_for(program);
    let said = (chosen == CallGraph::Dwarf).then(|| {
        // A /proc/PID/exe link names the file it stands for.
        let shown = std::fs::read_link(program).unwrap_or_else(|_| program.to_path_buf());
        format!(
            "{} keeps no frame pointers (or has no symbols to tell): its stacks are unwound with \
             DWARF (--call-graph dwarf; --call-graph fp would stop them at its first frame)",
            shown.display()
        )
    });
    (chosen, said)
}

/// Records a profile of a running process or of every process ([`Target::Pid`],
/// [`Target::SystemWide`]) as `cfg` says and writes it to `cfg.output`. A program to start is the
/// caller's to start and hold: [`profile_held`].
pub fn profile(cfg: &ProfileConfig) -> Result<ProfileSummary, ProfileError> {
    recorder::run(cfg, None, None)
}

/// Who names and takes the traces of a recording cut into periods ([`profile_periods`]).
pub trait Periods {
    /// The trace file of the period that begins at `start_realtime_ns` (ns since 1970, UTC: the
    /// trace's Session and first Clock say the same).
    fn trace_for(&mut self, start_realtime_ns: u64) -> PathBuf;
    /// A period's trace is whole (`period.output`), and the next one has begun (unless it was the
    /// last, or could not begin); false ends the recording (the caller knows why: a part it could
    /// not write).
    fn finished(&mut self, period: ProfileSummary) -> bool;
}

/// The shortest period of [`profile_periods`]: the eBPF backend reads its counts every 250 ms, and
/// a thread that exited is forgotten a period later, once no sample of its can still come.
const MIN_PERIOD: Duration = Duration::from_secs(1);

/// Records a running process or every process as [`profile`] does, in one session cut into periods
/// of `every` (`cfg.output` is not used: `periods` names each period's trace), until the process
/// ends, `cfg.duration` passes or Ctrl-C/SIGTERM (the period then being recorded is ended and
/// handed over too). Each period's trace is whole (Session to End, with the modules, stacks and
/// threads its samples use), and begins at the clock reading at which the one before ended, so no
/// sample falls between two; the events, the followed processes and the eBPF backend's programs
/// and unwind tables are kept from one period to the next, the stacks interned afresh in each.
/// Returns the last period's summary.
pub fn profile_periods(
    cfg: &ProfileConfig,
    every: Duration,
    periods: &mut dyn Periods,
) -> Result<ProfileSummary, ProfileError> {
    if every < MIN_PERIOD {
        return Err(ProfileError::BadArgument(format!(
            "a period of {every:?} is too short: at least {MIN_PERIOD:?} (the counts are read every \
             250 ms)"
        )));
    }
    recorder::run(cfg, None, Some(recorder::Periodic::new(every, periods)))
}

/// Records a profile of process `pid`, which the caller started from `cfg.target` (a
/// [`Target::Command`]: its program and arguments, for the trace's Session) and holds before its
/// `execve`: the events are opened on it with enable-on-exec (the eBPF backend also makes this
/// thread its tracer, to hold it again at its entry point while its unwind tables load), then
/// `release` lets it `execve` and says whether it could (an error: it could not run). From then on
/// the program is the session's: it waits for it (the trace's End has its exit code), and ends it
/// when `cfg.duration` passes or a signal stops the recording. This is `ferrotrace profile`'s
/// recorder, with `ferrotrace_launch::profile` starting the program.
pub fn profile_held(
    cfg: &ProfileConfig,
    pid: u32,
    release: impl FnOnce() -> std::io::Result<()>,
) -> Result<ProfileSummary, ProfileError> {
    run_held(cfg, pid, Box::new(release), true)
}

/// A session of a started program held by the caller; `waited_here`: see [`recorder::Held`].
fn run_held<'r>(
    cfg: &ProfileConfig,
    pid: u32,
    release: Box<dyn FnOnce() -> std::io::Result<()> + 'r>,
    waited_here: bool,
) -> Result<ProfileSummary, ProfileError> {
    if !matches!(cfg.target, Target::Command { .. }) {
        return Err(ProfileError::BadArgument(
            "a started program is profiled from its command".into(),
        ));
    }
    recorder::run(
        cfg,
        Some(recorder::Held {
            pid,
            release,
            waited_here,
        }),
        None,
    )
}

/// Records a profile of process `pid`, which the caller started from `cfg.target` (a
/// [`Target::Command`]: its program and arguments, for the trace's Session) and holds before its
/// `execve`: the events are opened on it with enable-on-exec (its threads and children are followed
/// from the first instruction of the program), then `release` lets it `execve`. Records until the
/// process has ended (a zombie has); the caller waits for it, and `cfg.duration` and
/// `cfg.handle_signals` are the caller's business. This is `ferrotrace record --sample`'s sampler.
pub fn profile_started(
    cfg: &ProfileConfig,
    pid: u32,
    release: impl FnOnce() -> std::io::Result<()>,
) -> Result<ProfileSummary, ProfileError> {
    if cfg.backend == Backend::Bpf {
        // The eBPF backend holds the program again at its entry point with ptrace, whose stops
        // only the thread that waits for the program may take: the caller's, here (profile_held).
        return Err(ProfileError::BadArgument(
            "a started program is sampled with perf_event; the eBPF backend is `profile --bpf`"
                .into(),
        ));
    }
    run_held(cfg, pid, Box::new(release), false)
}
