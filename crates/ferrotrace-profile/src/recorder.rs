//! A recording session, in four steps ([`run`]):
//! 1. **validation** ([`validate`]): what the configuration asks is possible, before anything is
//!    created;
//! 2. **set-up**: the samplers and their probes (`events`), the [`SampleSource`] loaded (the eBPF
//!    programs checked by the verifier, the likeliest failure, before the program starts), the trace
//!    file and its head, the target taken (held before its `execve` by the caller that started it),
//!    found (`-p`) or every process (`-a`), its perf events opened and enabled ([`start_target`],
//!    [`begin`]);
//! 3. **the loop** ([`record`]): the rings drained, their records handled by [`State`] (side-band
//!    records, and the samples the perf_event backend unwinds here), the source polled, until the
//!    target ends, the duration passes or a signal stops it;
//! 4. **the summary** ([`summarize`]): the rest drained, the program ended if it is ours, the
//!    trace's threads and End written, the warnings said.
//!
//! Where the samples come from is the session's [`SampleSource`] (`source`): the perf rings or the
//! eBPF backend's maps ([`bpf_session`]); the steps do not depend on which.

#[cfg(feature = "bpf")]
mod bpf_session;
mod child;
mod events;
#[cfg(feature = "bpf")]
mod mapped_file;
pub(crate) mod signals;
mod source;
mod state;
#[cfg(feature = "bpf")]
mod table_builder;

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use ferrotrace_core::schema::{self, ClockSample, Sampler, SamplersHeader};

use crate::cli_args::{CallGraph, EventSpec};
use crate::file::{self, SampleWriter};
use crate::modules;
use crate::perf::{self, PerfEvent, Ring};
use crate::{Backend, Periods, ProfileConfig, ProfileError, ProfileSummary, Target};
use child::Child;
use events::{Opened, Opening, Samplers, EVERY_TASK};
use signals::SignalGuard;
use signals::STOP;
use source::SampleSource;
pub(crate) use state::State;

/// A process the caller started and holds before its `execve` (`Target::Command` still names the
/// program and its arguments): its events are opened with enable-on-exec, then `release` lets it go
/// (an error: it could not run).
pub(crate) struct Held<'r> {
    pub pid: u32,
    pub release: Box<dyn FnOnce() -> std::io::Result<()> + 'r>,
    /// The session waits for it, ends it when the recording stops and says its exit (`profile`); else
    /// the caller does (`record --sample`, whose program's End is the runtime's).
    pub waited_here: bool,
}

/// What [`validate`] found: how the session unwinds, and what it knows of the program.
struct Checked {
    /// Stacks are unwound here with DWARF rows (registers and a stack copy per sample).
    dwarf: bool,
    /// The program, when there is one (for the frame-pointer check and the trace's Session).
    exe: Option<PathBuf>,
    /// The program has no frame pointers, and the events are probes whose hits are worth recording
    /// anyway (their stacks stop early: said at the end).
    no_frame_pointers: Option<PathBuf>,
}

/// Step 1: the configuration checked against itself, the target and the program.
fn validate(cfg: &ProfileConfig) -> Result<Checked, ProfileError> {
    if cfg.events.is_empty() {
        return Err(ProfileError::BadArgument("no events to record".into()));
    }
    if cfg.frequency == 0 {
        return Err(ProfileError::BadArgument(
            "the sampling frequency must be at least 1 Hz".into(),
        ));
    }
    if cfg.stack_size == 0 || cfg.stack_size > 65528 || !cfg.stack_size.is_multiple_of(8) {
        return Err(ProfileError::BadArgument(
            "the DWARF stack copy size must be a multiple of 8 up to 65528".into(),
        ));
    }
    if cfg
        .buffer_pages
        .is_some_and(|p| !p.is_power_of_two() || p > 1 << 20)
    {
        return Err(ProfileError::BadArgument(
            "the ring buffer size must be a power of two of pages, at most 4 GiB".into(),
        ));
    }
    let bpf_mode = cfg.backend == Backend::Bpf;
    // The eBPF backend unwinds in the kernel: nothing is unwound here.
    let dwarf = cfg.call_graph == CallGraph::Dwarf && !bpf_mode;
    let exe: Option<PathBuf> = match &cfg.target {
        Target::Command { program, argv } => {
            if argv.is_empty() {
                return Err(ProfileError::BadArgument("no program given".into()));
            }
            if !program.exists() {
                return Err(ProfileError::Spawn {
                    program: program.display().to_string(),
                    source: std::io::Error::from(std::io::ErrorKind::NotFound),
                });
            }
            Some(program.clone())
        }
        Target::Pid(pid) => {
            if !Path::new(&format!("/proc/{pid}")).exists() {
                return Err(ProfileError::NoSuchProcess(*pid));
            }
            if !process_runs(*pid) {
                return Err(ProfileError::Exited(*pid));
            }
            refuse_others_process(*pid)?;
            std::fs::read_link(format!("/proc/{pid}/exe")).ok()
        }
        Target::SystemWide if !bpf_mode => {
            return Err(ProfileError::BadArgument(
                "-a (every process) needs --bpf: the perf_event backend follows one program".into(),
            ))
        }
        Target::SystemWide => None,
    };
    // Timer samples are only worth their stacks: refuse. Probe hits and tracepoints are also
    // counted, which needs no stack: record them, and say that the stacks stop early.
    let mut no_frame_pointers = None;
    if !dwarf && !bpf_mode && !cfg.allow_missing_frame_pointers {
        if let Some(exe) = &exe {
            if modules::main_has_frame_pointer(exe) == Some(false) {
                if cfg
                    .events
                    .iter()
                    .any(|e| matches!(e, EventSpec::CpuClock(_)))
                {
                    return Err(ProfileError::NoFramePointers(exe.clone()));
                }
                no_frame_pointers = Some(exe.clone());
            }
        }
    }
    Ok(Checked {
        dwarf,
        exe,
        no_frame_pointers,
    })
}

/// The target as the set-up found or started it.
struct Started<'r> {
    /// The process recorded (0 for every process).
    root_pid: u32,
    /// The threads whose events are opened ([`EVERY_TASK`] for every process).
    tids: Vec<u32>,
    /// The program this session waits for and ends, once released.
    child: Option<Child>,
    /// The caller's hold on the program it started ([`Held`]).
    release: Option<Box<dyn FnOnce() -> std::io::Result<()> + 'r>>,
    /// The released program is [`Self::child`] ([`Held::waited_here`]).
    waited_here: bool,
    /// Events start at the program's `execve`.
    enable_on_exec: bool,
}

/// Step 2: the caller's started program taken, or the running one found.
fn start_target<'r>(
    cfg: &ProfileConfig,
    held: Option<Held<'r>>,
) -> Result<Started<'r>, ProfileError> {
    let enable_on_exec = held.is_some();
    let waited_here = held.as_ref().is_some_and(|h| h.waited_here);
    let (root_pid, tids, release) = match (&cfg.target, held) {
        (Target::Command { .. }, Some(h)) => (h.pid, vec![h.pid], Some(h.release)),
        (Target::Command { .. }, None) => {
            return Err(ProfileError::BadArgument(
                "a program to profile is started and held by the caller \
                 (ferrotrace_launch::profile): this crate follows running processes"
                    .into(),
            ))
        }
        (Target::Pid(pid), _) => {
            let mut tids: Vec<u32> = std::fs::read_dir(format!("/proc/{pid}/task"))
                .map_err(|_| ProfileError::NoSuchProcess(*pid))?
                .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                .collect();
            tids.sort_unstable();
            (*pid, tids, None)
        }
        // One event per CPU for every task (perf_event_open's pid -1), under no root process.
        (Target::SystemWide, _) => (0, vec![EVERY_TASK], None),
    };
    Ok(Started {
        root_pid,
        tids,
        child: None,
        release,
        waited_here,
        enable_on_exec,
    })
}

/// Step 2: the trace's head (Session and Samplers), written through the sample writer, the trace
/// beginning at `clock` (a period's, in a continuous recording, where the last one ended).
#[allow(clippy::too_many_arguments)]
fn start_trace(
    cfg: &ProfileConfig,
    output: &Path,
    file: std::fs::File,
    clock: &ClockSample,
    checked: &Checked,
    root_pid: u32,
    samplers: &Samplers,
    source: &dyn SampleSource,
) -> Result<SampleWriter, ProfileError> {
    let cmdline: Vec<u8> = match &cfg.target {
        Target::Command { argv, .. } => {
            use std::os::unix::ffi::OsStrExt;
            argv.iter()
                .map(|a| a.as_bytes())
                .collect::<Vec<_>>()
                .join(&0u8)
        }
        Target::Pid(pid) => std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default(),
        Target::SystemWide => Vec::new(),
    };
    let exe_path = checked
        .exe
        .as_ref()
        .map(|e| e.display().to_string())
        .unwrap_or_default();
    let in_kernel = source.counts_in_kernel();
    let machine = ferrotrace_core::machine::Machine::this();
    let session = schema::Session {
        pid: root_pid,
        ppid: std::process::id(),
        exe: &exe_path,
        cmdline: cmdline.strip_suffix(&[0]).unwrap_or(&cmdline),
        start_realtime_ns: clock.realtime_ns,
        version: env!("CARGO_PKG_VERSION"),
        // The kernel drops samples when a ring is full; they are counted.
        mode: schema::Mode::Drop,
        // Events are stamped in CLOCK_MONOTONIC nanoseconds.
        tick_hz: 1_000_000_000,
        sources: schema::source::SAMPLES | if in_kernel { schema::source::BPF } else { 0 },
        alloc_sample: 0,
        min_call_ns: 0,
        host: &machine.host,
        boot_id: &machine.boot_id,
    };
    let header = SamplersHeader {
        // The eBPF unwinder follows DWARF rows (frame pointers where a module has none).
        call_graph: if in_kernel {
            CallGraph::Dwarf
        } else {
            cfg.call_graph
        },
        // The timer's (`profile:hz:N` overrides -F): what the views show and take its period from.
        frequency: cfg
            .events
            .iter()
            .find_map(|e| match e {
                EventSpec::CpuClock(hz) => Some(events::cpu_clock_hz(*hz, cfg)),
                _ => None,
            })
            .unwrap_or(cfg.frequency),
        count: samplers.samplers.len() as u32,
    };
    let list: Vec<Sampler<'_>> = samplers
        .samplers
        .iter()
        .map(|(kind, spelling)| Sampler {
            kind: *kind,
            spelling,
        })
        .collect();
    SampleWriter::start(file, &session, clock, &header, &list)
        .map_err(|e| ProfileError::io(output, e))
}

/// How long `-a` waits for the running processes' unwind tables before recording.
const SYSTEM_WIDE_START_WAIT: Duration = Duration::from_secs(5);

/// What the loop leaves for the summary.
struct Recorded {
    /// The program's exit code, when it ended and was ours to wait for.
    exit_code: Option<i32>,
    /// The source failed mid-way, or a period's trace could not be ended or begun (what was
    /// recorded is kept; the error is the session's).
    failure: Option<ProfileError>,
}

/// Drains every ring into `ordered`.
fn drain_rings(rings: &mut [Ring], ordered: &mut perf::Ordered, bytes: &mut u64) {
    for r in rings.iter_mut() {
        r.drain(|rec| {
            *bytes += rec.len() as u64;
            ordered.push(rec)
        });
    }
}

/// A recording cut into periods ([`crate::profile_periods`]): when the current one ends, and who
/// names each period's trace and takes it once whole.
pub(crate) struct Periodic<'p> {
    every: Duration,
    sink: &'p mut dyn Periods,
    /// When the current period ends (the first counted from when recording begins:
    /// `Session::record` sets it).
    end: Instant,
}

impl<'p> Periodic<'p> {
    pub(crate) fn new(every: Duration, sink: &'p mut dyn Periods) -> Periodic<'p> {
        Periodic {
            every,
            sink,
            end: Instant::now() + every,
        }
    }
}

/// The session's running counts when the current trace began: a trace's End and summary count
/// what came after.
#[derive(Default)]
struct Since {
    /// The kernel's counts of samples and of bookkeeping records lost.
    lost: (u64, u64),
    /// Bytes read from the kernel (rings and source).
    kernel_bytes: u64,
}

/// A session once set up: what the loop and the summary work on.
struct Session<'r, 'p> {
    /// What validation found.
    checked: Checked,
    /// The samplers (their probes removed when the session ends).
    samplers: Samplers,
    /// The target.
    target: Started<'r>,
    /// Its perf events and rings.
    opened: Opened,
    /// What the session builds as it goes.
    st: State,
    /// The trace being written.
    out: SampleWriter,
    /// Its path (`cfg.output`, or the current period's).
    output: PathBuf,
    /// When recording began (in a continuous recording, the current period).
    started: Instant,
    /// The periods, when the recording is cut into them.
    periods: Option<Periodic<'p>>,
    /// Bytes drained from the rings, in all.
    ring_bytes_read: u64,
    /// The size of each CPU's ring (for a warning).
    ring_bytes: usize,
    /// The running counts when the current trace began.
    since: Since,
}

impl Session<'_, '_> {
    /// Step 2's last: sampling begins. A held program is released (and, when the source holds it at its
    /// entry, its mappings loaded there); a running one's or every process's mappings are read and the
    /// events enabled (perf only reports later changes).
    fn begin(
        &mut self,
        cfg: &ProfileConfig,
        source: &mut dyn SampleSource,
    ) -> Result<(), ProfileError> {
        let Session {
            target, opened, st, ..
        } = self;
        let enable_all = || -> Result<(), ProfileError> {
            for ev in &opened.events {
                perf::enable(ev)?;
            }
            Ok(())
        };
        if let Some(release) = target.release.take() {
            let pid = target.root_pid;
            // Only a session that waits for the program may take its ptrace stops.
            let hold = target.waited_here && source.holds_at_entry();
            if hold {
                crate::hold::seize(pid)?;
            }
            // Attaching may enable the events (libbpf does): the program is still held before exec.
            source.attach(&opened.events, &st.id_to_event, &cfg.events)?;
            release().map_err(|source| match &cfg.target {
                Target::Command { program, .. } => ProfileError::Spawn {
                    program: program.display().to_string(),
                    source,
                },
                Target::Pid(_) | Target::SystemWide => ProfileError::Sys {
                    what: "releasing the program".into(),
                    source,
                },
            })?;
            if !target.waited_here {
                return Ok(());
            }
            let child = target.child.insert(Child::new(pid));
            if hold {
                // Held at its exec, then at its entry point, while its mappings and their tables are
                // loaded: read from its maps, which the side-band records repeat later.
                let ended = crate::hold::hold_until_entry(child.pid, |pid| {
                    for (start, len, off, path, file) in modules::proc_maps(pid) {
                        st.add_mapping(pid, start, len, off, &path, file);
                    }
                    // Stopped by us: not the program's off-CPU time.
                    source.forget_off_cpu(pid);
                    source.sync_complete(st);
                })?;
                if ended.is_some() {
                    child.reaped = ended;
                }
            }
        } else if matches!(cfg.target, Target::SystemWide) {
            // Every process running now: its maps; the threads are named as their samples arrive.
            for pid in running_processes() {
                st.space(pid);
            }
            // Most tables are in within the wait; the rest are built while recording (100 processes
            // took 13-14.5 s here, where the wait had no bound).
            source.sync_until(st, Some(Instant::now() + SYSTEM_WIDE_START_WAIT));
            source.attach(&opened.events, &st.id_to_event, &cfg.events)?;
            enable_all()?;
            if let Some(started) = cfg.on_system_wide_start {
                started(st.spaces.len());
            }
        } else {
            // Attached: the maps and thread names now, then enable.
            let root = target.root_pid;
            st.space(root);
            for &tid in &target.tids {
                st.threads
                    .insert(tid, (root, state::thread_comm(root, tid)));
            }
            // Its mappings first: attaching may enable the events (libbpf does).
            source.sync_complete(st);
            source.attach(&opened.events, &st.id_to_event, &cfg.events)?;
            enable_all()?;
        }
        Ok(())
    }

    /// The kernel's counts of samples and of bookkeeping records lost so far (PERF_RECORD_LOST
    /// records miss the losses after which nothing was written, a full ring at the end of the run);
    /// `None` where the kernel does not count them.
    fn kernel_lost(&self) -> Option<(u64, u64)> {
        let lost_of = |bookkeeping: bool| -> Option<u64> {
            self.opened
                .events
                .iter()
                .filter(|e| e.bookkeeping == bookkeeping)
                .map(PerfEvent::lost)
                .sum()
        };
        Some((lost_of(false)?, lost_of(true)?))
    }

    /// Step 3: records until the target ends, the duration passes or a signal stops it, each period
    /// of a continuous recording ended and the next begun as it goes; then drains the rest of the
    /// rings and of the source.
    fn record(&mut self, cfg: &ProfileConfig, source: &mut dyn SampleSource) -> Recorded {
        let deadline = cfg.duration.map(|d| Instant::now() + d);
        if let Some(p) = &mut self.periods {
            p.end = Instant::now() + p.every;
        }
        let mut stop_requested_at: Option<Instant> = None;
        let mut exit_code = None;
        let mut pollfds: Vec<libc::pollfd> = Vec::new();
        let mut ordered = perf::Ordered::default();
        // DWARF: the rings fill fast. In-kernel counts: a library's table must reach the kernel soon
        // after it maps.
        let poll_ms = if self.st.dwarf || source.counts_in_kernel() {
            10
        } else {
            50
        };
        let mut failure = None;
        loop {
            pollfds.clear();
            // Poll the ring leaders (the event each ring was mapped from).
            for r in &self.opened.rings {
                pollfds.push(libc::pollfd {
                    fd: r.fd,
                    events: libc::POLLIN,
                    revents: 0,
                });
            }
            // SAFETY: pollfds is a valid array of pollfd.
            unsafe { libc::poll(pollfds.as_mut_ptr(), pollfds.len() as libc::nfds_t, poll_ms) };
            // Every ring is drained up to now: no sample older than this can still arrive. (With
            // the wall-clock time: a period ending here ends at this clock.)
            let clock = file::clock_now();
            let watermark = clock.monotonic_ns;
            drain_rings(
                &mut self.opened.rings,
                &mut ordered,
                &mut self.ring_bytes_read,
            );
            // Handling (unwinding above all) takes longer than draining: the rings are drained again
            // every 256 records handled, so that they do not fill meanwhile (what is drained waits in
            // `ordered` for the next round).
            for (i, rec) in ordered.take(Some(watermark)).iter().enumerate() {
                self.st.handle(rec, &mut self.out);
                if i % 256 == 255 {
                    drain_rings(
                        &mut self.opened.rings,
                        &mut ordered,
                        &mut self.ring_bytes_read,
                    );
                }
            }
            if let Err(e) = source.poll(
                &mut self.st,
                &mut self.out,
                ferrotrace_core::clock::monotonic_ns(),
            ) {
                failure = Some(e);
                break;
            }
            if let Err(e) = self.out.flush(watermark) {
                self.st.write_error.get_or_insert(e);
            }
            let now = Instant::now();
            if let Some(c) = &mut self.target.child {
                if let Some(code) = c.wait(false) {
                    exit_code = Some(code);
                    break;
                }
            } else if cfg.target != Target::SystemWide && !process_runs(self.target.root_pid) {
                break;
            }
            if deadline.is_some_and(|d| now >= d) {
                break;
            }
            if STOP.load(Ordering::SeqCst) {
                match (&mut self.target.child, stop_requested_at) {
                    (Some(c), None) => {
                        // The terminal sent SIGINT to the program too; make sure, and give it time to exit.
                        c.kill(libc::SIGINT);
                        stop_requested_at = Some(now);
                    }
                    (Some(_), Some(t)) if now.duration_since(t) < Duration::from_secs(2) => {}
                    _ => break,
                }
            }
            if let Some(mut periods) = self.periods.take_if(|p| now >= p.end) {
                let next = self.next_period(cfg, source, &clock, &mut periods);
                self.periods = Some(periods);
                match next {
                    Ok(true) => {}
                    Ok(false) => break,
                    Err(e) => {
                        failure = Some(e);
                        break;
                    }
                }
            }
        }
        for ev in &self.opened.events {
            perf::disable(ev);
        }
        drain_rings(
            &mut self.opened.rings,
            &mut ordered,
            &mut self.ring_bytes_read,
        );
        ordered.flush(None, |rec| self.st.handle(rec, &mut self.out));
        if let Err(e) = source.finish(
            &mut self.st,
            &mut self.out,
            ferrotrace_core::clock::monotonic_ns(),
        ) {
            failure.get_or_insert(e);
        }
        Recorded { exit_code, failure }
    }

    /// A period ends at `clock` (every record up to it handled): its samples taken from the
    /// source, its trace ended there, the next period's begun at the same clock, with the
    /// processes, their unwind tables and the events kept (stacks are interned afresh: ids are a
    /// trace's), and the ended one handed over. False when the taker of the periods asks to stop.
    fn next_period(
        &mut self,
        cfg: &ProfileConfig,
        source: &mut dyn SampleSource,
        clock: &ClockSample,
        periods: &mut Periodic<'_>,
    ) -> Result<bool, ProfileError> {
        let boundary = clock.monotonic_ns;
        source.cut(&mut self.st, &mut self.out, boundary)?;
        let carried = self.st.cut_off_cpu(boundary, &mut self.out);
        let kernel_lost = self.kernel_lost();
        let ended = self.end_trace(cfg, source, None, clock, kernel_lost, true)?;
        // The next period's end: a period late to end (its part's writer slow) does not move the
        // ones after.
        let now = Instant::now();
        while periods.end <= now {
            periods.end += periods.every;
        }
        let output = periods.sink.trace_for(clock.realtime_ns);
        let next = create_trace_file(&output).and_then(|file| {
            start_trace(
                cfg,
                &output,
                file,
                clock,
                &self.checked,
                self.target.root_pid,
                &self.samplers,
                source,
            )
        });
        // The period that ended is whole: handed over even when the next trace cannot begin.
        let go_on = periods.sink.finished(ended);
        self.out = next?;
        self.output = output;
        self.started = Instant::now();
        self.since = Since {
            lost: kernel_lost.unwrap_or_default(),
            kernel_bytes: self.ring_bytes_read + source.kernel_bytes(),
        };
        self.st.new_period();
        source.new_period();
        source.sync(&mut self.st);
        self.st.resume_off_cpu(carried, boundary, &mut self.out);
        Ok(go_on)
    }

    /// Ends the current trace at `clock`: its threads (with `period`, those sampled in it), its End
    /// (the program's `exit_code`; what was lost, from the kernel's counts `kernel_lost` where it
    /// keeps them, and the unwind errors since the trace began), and says what it holds, with the
    /// warnings.
    fn end_trace(
        &mut self,
        cfg: &ProfileConfig,
        source: &dyn SampleSource,
        exit_code: Option<i32>,
        clock: &ClockSample,
        kernel_lost: Option<(u64, u64)>,
        period: bool,
    ) -> Result<ProfileSummary, ProfileError> {
        let output = self.output.clone();
        let io_err = |e: std::io::Error| ProfileError::io(&output, e);
        let st = &mut self.st;
        if let Some((samples, bookkeeping)) = kernel_lost {
            st.lost = samples.saturating_sub(self.since.lost.0);
            st.lost_bookkeeping = bookkeeping.saturating_sub(self.since.lost.1);
        }
        st.lost += st.unreadable;
        st.unwind_errors += source.truncated();
        if let Some(e) = st.write_error.take() {
            return Err(io_err(e));
        }
        let recording_time = self.started.elapsed();
        let finish_start = Instant::now();
        let out = &mut self.out;
        out.threads(&st.threads, period).map_err(io_err)?;
        let (reason, signal) = match exit_code {
            Some(c) if c > 128 => (schema::EndReason::Signal, (c - 128) as u32),
            // Attached, and the process is still there: the recording ended, not the program.
            None if matches!(cfg.target, Target::Pid(_)) && process_runs(self.target.root_pid) => {
                (schema::EndReason::Stopped, 0)
            }
            None if cfg.target == Target::SystemWide => (schema::EndReason::Stopped, 0),
            _ => (schema::EndReason::Exit, 0),
        };
        if let Some(stops) = source
            .unwind_stops()
            .filter(|s| s.samples.iter().any(|&n| n > 0))
        {
            out.unwind_stops(&stops).map_err(io_err)?;
        }
        out.finish(
            schema::End {
                reason,
                signal,
                events: 0,
                lost: st.lost,
                chunks: 0,
                dropped_chunks: 0,
                dropped_events: 0,
                exit_code,
                unwind_errors: st.unwind_errors,
                write_errno: 0,
                markers: 0,
                usage: None,
            },
            clock,
        )
        .map_err(io_err)?;
        let mut warnings = Vec::new();
        if st.lost > 0 {
            let ring_kib = self.ring_bytes / 1024;
            warnings.push(format!(
                "{} samples lost (the kernel found the ring buffers full): give larger buffers with \
                 --mmap-pages (now {} KiB per CPU), lower the frequency with -F, or use --call-graph fp",
                st.lost,
                ring_kib
            ));
        }
        if let Some(exe) = &self.checked.no_frame_pointers {
            warnings.push(format!(
                "{} has no frame pointers: the hits are all counted, but their stacks stop at its first \
                 frame without one; --call-graph dwarf gives whole stacks",
                exe.display()
            ));
        }
        if st.lost_bookkeeping > 0 {
            warnings.push(format!(
                "{} records of mappings and threads lost (the ring buffers were full): some frames may \
                 be unnamed; give larger buffers with --mmap-pages",
                st.lost_bookkeeping
            ));
        }
        source.warnings(st.samples, &mut warnings);
        if self.opened.exclude_kernel {
            warnings.push(
                "kernel frames not recorded (not permitted): run as root for kernel stacks".into(),
            );
        }
        let unwinds_here = !source.counts_in_kernel();
        if !self.checked.dwarf && st.junk_stacks > 0 {
            warnings.push(format!(
                "{} of {} stacks walked into code without frame pointers and were cut there (their \
                 next 'return address' was in no mapped object); --call-graph dwarf unwinds such code",
                st.junk_stacks, st.samples
            ));
        }
        if !self.checked.dwarf
            && unwinds_here
            && st.samples > 20
            && st.unwind_errors * 2 > st.samples
        {
            warnings.push(format!(
                "{} of {} stacks ended after one user frame: the program may lack frame pointers; try --call-graph dwarf",
                st.unwind_errors, st.samples
            ));
        }
        Ok(ProfileSummary {
            output: self.output.clone(),
            pid: self.target.root_pid,
            samples: st.samples,
            lost: st.lost,
            unwind_errors: st.unwind_errors,
            threads: st.threads.len(),
            bytes_written: out.w.bytes_written(),
            exit_code,
            recording_time,
            finishing_time: finish_start.elapsed(),
            kernel_bytes: (self.ring_bytes_read + source.kernel_bytes())
                .saturating_sub(self.since.kernel_bytes),
            bpf_unwinder: source.unwinder_work(),
            unwind_tables: source.unwind_tables(),
            warnings,
        })
    }

    /// Step 4: the probes removed, the program ended if it is ours, the trace ended (in a
    /// continuous recording, the last period's, handed over too).
    fn summarize(
        mut self,
        cfg: &ProfileConfig,
        source: &dyn SampleSource,
        recorded: Recorded,
    ) -> Result<ProfileSummary, ProfileError> {
        let kernel_lost = self.kernel_lost();
        // Probes can only be removed once no event uses them.
        self.opened.rings.clear();
        self.opened.events.clear();
        self.samplers._uprobes = None;
        let mut exit_code = recorded.exit_code;
        if let Some(mut c) = self.target.child.take() {
            if c.reaped.is_none() {
                // Duration over or Ctrl-C: the program is ours, end it.
                c.kill(libc::SIGTERM);
                let t = Instant::now();
                while c.wait(false).is_none() && t.elapsed() < Duration::from_secs(2) {
                    std::thread::sleep(Duration::from_millis(10));
                }
                c.kill(libc::SIGKILL);
            }
            if exit_code.is_none() {
                exit_code = c.wait(true);
            }
        }
        let clock = file::clock_now();
        self.st.end_off_cpu(clock.monotonic_ns, &mut self.out);
        if let Some(e) = recorded.failure {
            return Err(e);
        }
        let period = self.periods.is_some();
        let summary = self.end_trace(cfg, source, exit_code, &clock, kernel_lost, period)?;
        if let Some(periods) = &mut self.periods {
            // The last period: nothing follows, whatever the taker says.
            periods.sink.finished(summary.clone());
        }
        Ok(summary)
    }
}

/// Runs a whole profiling session (of `held`, when the caller started the program; cut into
/// `periods` when given).
pub(crate) fn run(
    cfg: &ProfileConfig,
    held: Option<Held<'_>>,
    mut periods: Option<Periodic<'_>>,
) -> Result<ProfileSummary, ProfileError> {
    let checked = validate(cfg)?;
    let started = Instant::now();
    let samplers = events::samplers(cfg)?;
    let mut storage = source::storage();
    let mut source = source::load(cfg.backend, &mut storage, cfg.target == Target::SystemWide)?;
    let _signals = cfg.handle_signals.then(SignalGuard::install);
    let clock = file::clock_now();
    let output = match &mut periods {
        Some(p) => p.sink.trace_for(clock.realtime_ns),
        None => cfg.output.clone(),
    };
    let file = create_trace_file(&output)?;
    // Until the trace has its first chunks, a failure leaves no empty file behind.
    let unmade = |e: ProfileError| {
        let _ = std::fs::remove_file(&output);
        e
    };
    let target = start_target(cfg, held).map_err(unmade)?;
    let how = Opening {
        dwarf: checked.dwarf,
        enable_on_exec: target.enable_on_exec,
        counts_in_kernel: source.counts_in_kernel(),
    };
    let mut opened = events::open(cfg, &samplers, &target.tids, how).map_err(unmade)?;
    let out = start_trace(
        cfg,
        &output,
        file,
        &clock,
        &checked,
        target.root_pid,
        &samplers,
        source.as_ref(),
    )
    .map_err(unmade)?;
    let st = State::new(
        checked.dwarf,
        std::mem::take(&mut opened.id_to_event),
        events::event_weights(cfg),
        cfg.events
            .iter()
            .position(EventSpec::is_off_cpu)
            .map(|i| i as u32),
        events::event_regs(cfg, how, opened.exclude_kernel),
    );
    let ring_bytes = opened.rings.first().map_or(0, Ring::data_bytes);
    let mut session = Session {
        checked,
        samplers,
        target,
        opened,
        st,
        out,
        output: output.clone(),
        started,
        periods,
        ring_bytes_read: 0,
        ring_bytes,
        since: Since::default(),
    };
    // Nothing sampled yet, and a program that could not start leaves no trace behind.
    session.begin(cfg, source.as_mut()).map_err(unmade)?;
    let recorded = session.record(cfg, source.as_mut());
    session.summarize(cfg, source.as_ref(), recorded)
}

/// Refuses, for a caller that is not root, a process the kernel would not let it profile, with
/// the reason (perf_event_open's EACCES would blame kernel.perf_event_paranoid): one that runs with
/// privileges its user does not have (setuid), or as another user.
fn refuse_others_process(pid: u32) -> Result<(), ProfileError> {
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    if me == 0 {
        return Ok(());
    }
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let uids: Vec<u32> = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|u| u.parse().ok())
        .collect();
    if uids.windows(2).any(|w| w[0] != w[1]) {
        return Err(ProfileError::BadArgument(format!(
            "process {pid} runs with privileges its user does not have (setuid, setgid or file \
             capabilities): only root may profile it"
        )));
    }
    match uids.first() {
        Some(&uid) if uid != me => Err(ProfileError::BadArgument(format!(
            "process {pid} runs as user {uid} and ferrotrace as {me}: profile it as that user or \
             as root"
        ))),
        _ => Ok(()),
    }
}

/// True while process `pid` exists and has not exited (a zombie waiting for its parent has).
fn process_runs(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        // `pid (comm) S ...`: the state follows the last ')'.
        stat.rsplit_once(')')
            .and_then(|(_, rest)| rest.trim_start().chars().next())
            .is_some_and(|state| !matches!(state, 'Z' | 'X' | 'x'))
    })
}

/// The processes running now (`/proc`'s numeric entries).
fn running_processes() -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect()
}

/// Creates the trace file, private to its owner (it holds the program's addresses and names).
/// Private, new, never through a link nor over a file that is not a trace (an old trace is kept as
/// FILE.old), like the runtime's traces: `ferrotrace_core::output`.
fn create_trace_file(path: &Path) -> Result<std::fs::File, ProfileError> {
    match ferrotrace_core::output::create(path) {
        Ok((file, _)) => Ok(file),
        Err(ferrotrace_core::output::OutputError::Io(p, e)) => Err(ProfileError::io(p, e)),
        // Something in the way of -o: an argument to change.
        Err(other) => Err(ProfileError::BadArgument(other.to_string())),
    }
}
