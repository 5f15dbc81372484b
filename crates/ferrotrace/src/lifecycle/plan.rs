//! The one start plan: every way a runtime starts — start-up in the ELF constructor under `record`
//! ([`Occasion::StartUp`]), `record -p`'s attach on a thread the host borrowed ([`Occasion::Attach`]),
//! a recording the program starts into a file of its own ([`Occasion::InProgram`]) — goes through the
//! same steps in the same order, here, with what differs between them said once, as data:
//!
//! 1. [`prepare`]: the first clock pair, the `membarrier` registration, the thread-pointer offsets the
//!    assembly reads (checked to be static TLS when the library was `dlopen`ed), the XSAVE area;
//! 2. discovery and the selection by `-F`/`-N`/`-P`, judged by [`check_selection`], whose
//!    [`Problem`]s are worded once for every occasion (refusals end the plan, warnings are said);
//! 3. the pool, the trace head, the [`Program`] and the trace file ([`open_trace`]);
//! 4. the [`Runtime`] published and its collector launched ([`launch`]), the exit hooks;
//! 5. the code patched — before the collector's thread exists when the process has one thread
//!    ([`Occasion::one_thread`]: every text page copied on write with another thread running costs a
//!    TLB shootdown), after recording is on otherwise — and recording on;
//! 6. the recorders started.
//!
//! A forked child's restart (`start::restart_in_forked_child`) takes steps 3 and 4 with its parent's
//! description (the child has the parent's code, patched already).
//!
//! Not here: reading the configuration (each occasion has its own source: the environment, the host's
//! spec, the program's call), what an attached runtime does when it is stopped (`attach`), the end of
//! the trace (`exit`).

use std::io::BufWriter;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::Duration;

use ferrotrace_core::clock::ClockPair;
use ferrotrace_core::format::ChunkKind;
use ferrotrace_core::schema::{self, EndReason, Payload};
use ferrotrace_core::writer::TraceWriter;

use crate::arch::xray as trampoline;
use crate::buffers::collector::Writer;
use crate::buffers::pool::Pool;
use crate::buffers::{clock, collector, hot, live};
use crate::lifecycle::config::{AllocSettings, Config, Mode};
use crate::lifecycle::exit;
use crate::lifecycle::runtime::{Control, Program, Recorder, Role, Runtime, Upcalls};
use crate::patch::{discovery, sites};

/// How a runtime comes to start, and so what its start does differently.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Occasion {
    /// In the ELF constructor of the program `record` or `live` started: the process has one thread.
    StartUp,
    /// In a running process, on the thread the host borrowed (`record -p`, `live -p`): the others run.
    Attach,
    /// The program starts recording itself into a file of its own (`ferrotrace-tracing`'s guard).
    InProgram,
}

impl Occasion {
    /// The process has one thread while the plan runs: code is patched before the collector exists.
    pub fn one_thread(self) -> bool {
        self == Occasion::StartUp
    }

    /// Who writes the jumps at the entries of uninstrumented functions, if any are patched: no thread
    /// may be inside the bytes a jump replaces. At start-up the process has one thread and the runtime
    /// writes them; in an attach the host does, with every thread of the process stopped (it holds
    /// them with ptrace; see `ferrotrace_launch::attach::entries`); an in-program recording has
    /// neither, and patches no entry.
    pub fn entry_jumps(self) -> Option<sites::EntryJumps> {
        match self {
            Occasion::StartUp => Some(sites::EntryJumps::Here),
            Occasion::Attach => Some(sites::EntryJumps::Host),
            Occasion::InProgram => None,
        }
    }

    /// The recorders' start hooks run: they read the environment (`FERROTRACE_TRACE`, the allocation
    /// settings), which is not safe while other threads may change it, and an attach records neither
    /// allocations nor the environment's tracepoints (its own are enabled by its last step).
    fn starts_recorders(self) -> bool {
        self != Occasion::Attach
    }
}

/// What a start found wrong, in the one wording every occasion uses. Some end the plan
/// ([`Problem::code`] says which code an attach returns for them); the others are warnings.
#[derive(Debug)]
pub enum Problem {
    /// The settings cannot be used (an attach's spec, the environment).
    BadSettings(String),
    /// A runtime records in this process already.
    Already,
    /// The runtime's thread-local block is not in static TLS (a `dlopen`ed library): the trampolines
    /// cannot find it.
    NotStaticTls {
        /// The offset from the thread pointer on this thread.
        here: i64,
        /// The offset on a thread started now.
        there: i64,
    },
    /// No loaded object has instrumented functions.
    NoInstrumentedFunction {
        /// The executable, for the message.
        exe: String,
    },
    /// A `-P`/`-F` pattern, or the patterns together, selected none of the instrumented functions
    /// (`discovery::Discovery::unmatched_patterns` and `none_selected` word it).
    NoneSelected(String),
    /// Functions that call mcount without setting up a frame pointer, not traced.
    NoFramePointer(usize),
    /// Functions `-P` selects in uninstrumented code whose entries cannot be patched safely, by
    /// reason (`discovery::Discovery::refused`), not traced.
    Unpatchable(Vec<(ferrotrace_core::entry_patch::Refusal, usize)>),
    /// `--trace` names tracepoints the program does not have (the message says which).
    Tracepoints(String),
    /// Anything else (the message says what).
    Failed(String),
}

/// Codes of [`Problem::code`]: what `ferrotrace_attach` returns for each refusal.
pub mod code {
    /// The spec could not be read, or its settings are invalid.
    pub const BAD_SPEC: i32 = -1;
    /// A runtime records in this process already.
    pub const ALREADY: i32 = -2;
    /// The library's thread-local block is not in static TLS: the trampolines cannot find it.
    pub const NOT_STATIC_TLS: i32 = -3;
    /// No loaded object has instrumented functions.
    pub const NO_SITES: i32 = -4;
    /// `-P`/`-F`/`-N` selected none of the instrumented functions.
    pub const NONE_SELECTED: i32 = -5;
    /// Something else failed (the message says what).
    pub const FAILED: i32 = -6;
}

impl Problem {
    /// The code an attach returns for it.
    pub fn code(&self) -> i32 {
        match self {
            Problem::BadSettings(_) => code::BAD_SPEC,
            Problem::Already => code::ALREADY,
            Problem::NotStaticTls { .. } => code::NOT_STATIC_TLS,
            Problem::NoInstrumentedFunction { .. } => code::NO_SITES,
            Problem::NoneSelected(_) | Problem::Tracepoints(_) => code::NONE_SELECTED,
            Problem::NoFramePointer(_) | Problem::Unpatchable(_) | Problem::Failed(_) => {
                code::FAILED
            }
        }
    }
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Problem::BadSettings(m) | Problem::Tracepoints(m) | Problem::Failed(m) => {
                f.write_str(m)
            }
            Problem::Already => f.write_str("a ferrotrace runtime is recording in it already"),
            Problem::NotStaticTls { here, there } => write!(
                f,
                "the runtime's thread-local block is not in static TLS (offset {here:#x} here, \
                 {there:#x} in a new thread)"
            ),
            Problem::NoInstrumentedFunction { exe } => write!(
                f,
                "{exe} has no instrumented function: {}",
                schema::source::HOW_TO_BUILD
            ),
            Problem::NoneSelected(why) => f.write_str(why),
            Problem::Unpatchable(refused) => {
                let reasons: Vec<String> = refused
                    .iter()
                    .map(|(reason, n)| format!("{n} ({reason})"))
                    .collect();
                write!(
                    f,
                    "functions -P selects whose entries cannot be patched safely, left untraced: {} \
                     (`ferrotrace list --dynamic` names them)",
                    reasons.join(", ")
                )
            }
            Problem::NoFramePointer(n) => write!(
                f,
                "{n} functions call mcount without setting up a frame pointer and are not traced: \
                 build with -Cforce-frame-pointers=yes (Rust) or without -fomit-frame-pointer (C)"
            ),
        }
    }
}

impl From<String> for Problem {
    fn from(message: String) -> Problem {
        Problem::Failed(message)
    }
}

/// What a start is given: the occasion, and what its source of settings said.
pub struct Plan {
    /// How the runtime comes to start.
    pub occasion: Occasion,
    /// Which copy of the runtime this is.
    pub role: Role,
    /// The recording's settings.
    pub config: Config,
    /// The trace file.
    pub output: PathBuf,
    /// The memfd the host made for the chunk pool, for salvage after a SIGKILL.
    pub shared_fd: Option<i32>,
    /// Allocations to record, with these settings.
    pub alloc: Option<AllocSettings>,
    /// A process a traced process started (a child, not the program `record` ran): it says nothing
    /// about the selection and records nothing unless it has something to trace.
    pub started_by_traced: bool,
    /// `--trace` globs were given.
    pub tracepoints_requested: bool,
    /// Where live printing goes, if anywhere: chosen from the names of the functions found.
    pub live: LiveTo,
    /// The host's control channel (an attach).
    pub control: Option<Control>,
    /// Where the host's control FIFO is (an attach): its directory holds the warnings for the host.
    pub control_path: Option<PathBuf>,
    /// What to do once recording is on and the code is patched (an occasion's own last steps:
    /// enabling an attach's tracepoints, selecting every `tracing` event of an in-program recording).
    pub after_start: Option<Box<dyn FnOnce(&'static Runtime)>>,
}

impl Plan {
    /// Says what the plan found and goes on with (a warning: the recording goes on), in the one sink
    /// of its occasion: the program's standard error at start-up, and in an attach the `warnings`
    /// file beside the host's control FIFO, which the host prints (the process's standard error is
    /// not the user's). What ends the plan is its error instead, which an attach hands to the host.
    fn say(&self, problem: &Problem) {
        let Some(dir) = self
            .control_path
            .as_deref()
            .and_then(Path::parent)
            .filter(|_| self.occasion == Occasion::Attach)
        else {
            // A pattern that selects nothing is a warning (the recording goes on without it); the
            // other lines say what the program is.
            let label = match problem {
                Problem::NoneSelected(_) => "warning: ",
                _ => "",
            };
            say!("ferrotrace: {label}{problem}");
            return;
        };
        warn_host(dir, problem);
    }
}

/// An attach: lists the entry jumps left to the host in `name` beside its control FIFO (in `dir`:
/// [`ferrotrace_core::env::ATTACH_ENTRY_JUMPS_FILE`] at the start, a numbered list for objects loaded
/// later); the host writes them with every thread of the process stopped. The list is written whole
/// under another name and then renamed, so the host, which may look at any moment, never reads half
/// of it.
pub(crate) fn hand_to_host(dir: &Path, name: &str, jumps: &[ferrotrace_core::env::EntryJump]) {
    if jumps.is_empty() {
        return;
    }
    let lines: String = jumps.iter().map(|j| j.to_line() + "\n").collect();
    let partial = dir.join(format!(".{name}.partial"));
    if let Err(e) =
        std::fs::write(&partial, lines).and_then(|()| std::fs::rename(&partial, dir.join(name)))
    {
        let _ = std::fs::remove_file(&partial);
        warn_host(
            dir,
            &Problem::Failed(format!(
                "the function entries to patch could not be handed to ferrotrace ({e}): left untraced"
            )),
        );
    }
}

/// Appends `problem` to the warnings the host prints (in `dir`, the control FIFO's directory).
fn warn_host(dir: &Path, problem: &Problem) {
    use std::io::Write;
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(dir.join(ferrotrace_core::env::ATTACH_WARNINGS_FILE))
    {
        let _ = writeln!(f, "{problem}");
    }
}

/// Where a live printer writes, if the occasion has one.
pub enum LiveTo {
    /// No live printing.
    Nowhere,
    /// As the environment says (`live`'s descriptor).
    Environment,
    /// Into the host's FIFO (`live -p`).
    Fifo(PathBuf),
}

/// What [`prepare`] leaves for the rest of the plan: the clock pair taken when the start began.
pub struct Prepared {
    /// The first calibration pair (the TSC frequency estimate spans from it).
    pub first_clock: ClockPair,
}

/// Step 1: what the assembly and the code patcher need before anything runs through them.
pub fn prepare(occasion: Occasion) -> Result<Prepared, Problem> {
    let first_clock = clock::calibration_pair().0;
    // While the process has one thread, registering costs nothing; later the kernel waits for a
    // grace period (~10 ms).
    crate::patch::text::register_membarrier();
    hot::init_tls_offset();
    if occasion == Occasion::Attach {
        // The trampolines find `HOT` at one offset from %fs in every thread: true only if this
        // library's TLS is static (its initial-exec reference makes glibc place it in the static TLS
        // surplus, or refuse the dlopen). A thread started now must see the same offset as this one.
        let here = crate::arch::thread::tls_offset();
        let there = std::thread::spawn(hot::hot_offset_here)
            .join()
            .map_err(|_| Problem::Failed("cannot start a thread".into()))?;
        if here != there {
            return Err(Problem::NotStaticTls { here, there });
        }
    }
    trampoline::init_xsave_area();
    hot::init_cpu_offset();
    Ok(Prepared { first_clock })
}

/// Step 2's judgement: what the selection found wrong. `Err` ends the plan; the warnings go to the
/// occasion's sink ([`Plan::say`]).
pub fn check_selection(plan: &Plan, found: &discovery::Discovery) -> Result<(), Problem> {
    let exe = found.exe_name();
    // A program that records `tracing` spans has something to record without sleds, and its -F may
    // name spans, which are met only later.
    let records_spans = found.records_spans();
    let nothing_selected = found.functions.is_empty()
        && !plan.tracepoints_requested
        && plan.alloc.is_none()
        && !records_spans;
    match plan.occasion {
        // The program chose to record itself: whatever it has (maybe only `tracing` spans) is what
        // it asked for.
        Occasion::InProgram => Ok(()),
        Occasion::Attach => {
            // When nothing at all can be recorded, the process is left as it was (the host is told
            // why) rather than patched for nothing. A program with ferrotrace's `tracing` layer has
            // spans to record.
            let selects_nothing =
                !plan.tracepoints_requested && !crate::recorders::callsites::has_layer();
            if found.total_functions == 0 && selects_nothing {
                return Err(Problem::NoInstrumentedFunction { exe });
            }
            if let Some(why) = found
                .none_selected(&plan.config)
                .filter(|_| selects_nothing)
            {
                return Err(Problem::NoneSelected(why));
            }
            for line in found.unmatched_patterns(&plan.config) {
                plan.say(&Problem::NoneSelected(line));
            }
            if !found.refused.is_empty() && !plan.config.patch.is_empty() {
                plan.say(&Problem::Unpatchable(found.refused.clone()));
            }
            Ok(())
        }
        // A process the traced one started says nothing: it records what it has, if anything.
        Occasion::StartUp if plan.started_by_traced => Ok(()),
        Occasion::StartUp => {
            if !records_spans {
                for line in found.unmatched_patterns(&plan.config) {
                    plan.say(&Problem::NoneSelected(line));
                }
            }
            if nothing_selected {
                if found.total_functions == 0 {
                    plan.say(&Problem::NoInstrumentedFunction { exe });
                } else if found.unmatched_patterns(&plan.config).is_empty() {
                    // The build is fine, and every pattern matched something (one that matched
                    // nothing was named above): the patterns together selected nothing.
                    if let Some(why) = found.none_selected(&plan.config) {
                        plan.say(&Problem::NoneSelected(why));
                    }
                }
            }
            if found.no_frame_pointer > 0 && plan.config.functions {
                plan.say(&Problem::NoFramePointer(found.no_frame_pointer));
            }
            if !found.refused.is_empty() && !plan.config.patch.is_empty() {
                plan.say(&Problem::Unpatchable(found.refused.clone()));
            }
            Ok(())
        }
    }
}

/// Runs the plan: the runtime started, recording, its code patched and its recorders started.
/// `Ok(None)` when there is nothing to record in a process a traced one started.
pub fn run(plan: Plan) -> Result<Option<&'static Runtime>, Problem> {
    let prepared = prepare(plan.occasion)?;
    let mut known = discovery::Known {
        // Only when someone can write the jumps with no thread inside a window
        // ([`Occasion::entry_jumps`]). Nor for allocations alone: functions are patched when `-P`
        // names them.
        entry_patching_off: plan.occasion.entry_jumps().is_none()
            || (plan.alloc.is_some() && plan.config.patch.is_empty()),
        ..discovery::Known::default()
    };
    let found = discovery::discover(&plan.config, plan.role == Role::Preload, &mut known)?;
    // Ids first: the live printer names tracepoints by them.
    let tracepoints = crate::tracepoints::assign_ids();
    check_selection(&plan, &found)?;
    if plan.started_by_traced
        && found.functions.is_empty()
        && !plan.tracepoints_requested
        && plan.alloc.is_none()
        && !found.records_spans()
    {
        // A program the traced one runs (a shell, a compiler...) without instrumentation: nothing to
        // record, and no reason to say so or leave an empty file.
        return Ok(None);
    }
    let names = || {
        found
            .functions
            .iter()
            .map(|f| crate::lifecycle::config::display_name(&f.name))
            .collect()
    };
    let live = match &plan.live {
        LiveTo::Nowhere => None,
        LiveTo::Environment => live::Output::from_env(names, live_tracepoints),
        LiveTo::Fifo(path) => Some(open_live_fifo(path, names())?),
    };
    let start_realtime = clock::realtime_ns();
    let pool = new_pool(&plan.config, plan.shared_fd, start_realtime)?;
    let header = found.head(tracepoints);
    let mut sources = sources(&found);
    if plan.alloc.is_some() {
        sources |= schema::source::ALLOCATIONS;
    }
    if plan.occasion == Occasion::InProgram {
        // The program records itself through ferrotrace-tracing's guard.
        sources |= schema::source::TRACING;
    }
    let program = Program {
        role: plan.role,
        sources,
        rust_std: found.rust_std,
        targets: targets(live.is_some()),
        alloc: plan.alloc,
    };
    let writer = open_trace(
        &plan.config,
        &plan.output,
        &header,
        &program,
        start_realtime,
        prepared.first_clock,
    )?;
    // With one thread, before the collector's: patching copies each text page on write, and with
    // another thread of the process running on the other CPU every copy also costs a TLB-shootdown
    // interrupt there (~17 ms on ripgrep's 7,249 functions in this VM). Nothing runs the patched code
    // before start-up returns, by when recording is on. A failure is reported once the runtime runs:
    // what was patched is recorded and the trace is finished.
    let patched_early = plan
        .occasion
        .one_thread()
        // SAFETY: `found` is discover's answer, unchanged.
        .then(|| unsafe { sites::patch(&found, &program.targets, sites::EntryJumps::Here) });
    // The collector waits for something to write, unless it has work of its own from the start
    // (live printing, the flight ring's dumps) or its thread's early allocations would be recorded
    // (--alloc). Only in the preload library at start-up, whose `dlopen` rescans itself: the linked
    // runtime's collector also looks for objects loaded since, every second.
    let defer = plan.occasion == Occasion::StartUp
        && plan.role == Role::Preload
        && live.is_none()
        && plan.config.mode != Mode::Flight
        && program.alloc.is_none();
    let rt = Runtime::new(plan.config, pool, program, UPCALLS, known, header, live);
    if let Some(c) = plan.control {
        let _ = rt.control.set(c);
    }
    let rt = launch(rt, writer, plan.output, None, defer)?;
    match plan.occasion {
        Occasion::StartUp => exit::install(),
        Occasion::Attach | Occasion::InProgram => exit::install_once(),
    }
    // Fails only if a signal finished the trace already: then nothing records.
    rt.lifecycle.start_recording();
    match patched_early {
        Some(patched) => {
            patched?;
        }
        None => {
            let who = plan
                .occasion
                .entry_jumps()
                .unwrap_or(sites::EntryJumps::Here);
            // SAFETY: as above; with other threads running, entries are patched only by the host.
            match unsafe { sites::patch(&found, &rt.program.targets, who) } {
                Ok(jumps) => {
                    if let Some(dir) = plan.control_path.as_deref().and_then(Path::parent) {
                        hand_to_host(dir, ferrotrace_core::env::ATTACH_ENTRY_JUMPS_FILE, &jumps);
                    }
                }
                // What was patched records; the host (or the program) stops it as usual.
                Err(e) => say!("ferrotrace: patching failed: {e}"),
            }
        }
    }
    if plan.occasion == Occasion::Attach {
        // Calls of mcount/__fentry__ (-pg without -mnop-mcount) are bound to the C library's:
        // pointed at the hooks now that their sites are in the table, put back by the stop
        // (unpatch_all). At start-up the preload library's hooks interpose them instead.
        // SAFETY: `found` is discover's answer, unchanged.
        if let Err(e) = unsafe { sites::redirect_hook_slots(&found, &rt.program.targets) } {
            say!("ferrotrace: some mcount calls stay untraced: {e}");
        }
    }
    if let Some(after) = plan.after_start {
        after(rt);
    }
    // Last: the start-up's own allocations (and their frees) are not the program's (the allocation
    // recorder is the last of `recorders::ALL`).
    drop(found);
    if plan.occasion.starts_recorders() {
        start_recorders(&rt.program, rt.upcalls.recorders);
    }
    Ok(Some(rt))
}

/// `live -p`: the printer, writing to the host's FIFO (which it holds open for reading); losses go
/// unsaid (the program's standard error is not the user's).
fn open_live_fifo(path: &Path, names: Vec<String>) -> Result<live::Output, Problem> {
    use std::os::fd::IntoRawFd;
    use std::os::unix::fs::OpenOptionsExt;
    let fifo = std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| Problem::Failed(format!("{}: {e}", path.display())))?;
    Ok(live::Output::to_fd(
        fifo.into_raw_fd(),
        -1,
        names,
        live_tracepoints(),
    ))
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
    let machine = ferrotrace_core::machine::Machine::this();
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
        min_call_ns: config.min_call_ns,
        host: &machine.host,
        boot_id: &machine.boot_id,
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

/// The chunk pool, in the memfd `shared` when the host gave one (the trace started at
/// `start_realtime`).
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
    fork_restart: crate::lifecycle::start::restart_in_forked_child,
    ensure_collector,
    recorders: &crate::recorders::ALL,
};

/// Where patched code goes: the XRay trampolines (those that record the CPU too, `with_cpu`) and the
/// mcount hooks.
pub(crate) fn targets(with_cpu: bool) -> sites::Targets {
    let (mcount, fentry) = crate::arch::mcount::hook_addresses();
    sites::Targets {
        xray: trampoline::trampolines(with_cpu),
        xray_values: trampoline::value_trampolines(),
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
/// the trace ends (reached from below through [`Upcalls::ensure_collector`]). Not from a signal
/// handler (it starts a thread); `exit::finish` has its own way there. If the thread cannot be
/// started, the recording stops (the trace keeps its head, as after a SIGKILL: `record` recovers the
/// events from the shared pool) rather than leave threads waiting for chunks nobody frees.
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
