//! `record --sample`: perf_event sampling of the program `record` starts, in the trace its runtime
//! writes, on the runtime's clock.
//!
//! How: [`start_sampled`] forks the program through [`crate::start::start`] with a hold before its
//! `execve` ([`crate::hold`]: the child writes its pid to a pipe and waits on another). A sampler thread
//! reads the pid and runs `ferrotrace_profile`'s recorder on it ([`ferrotrace_profile::profile_started`]:
//! per-CPU events with inherit and enable-on-exec, so every thread and child process is sampled from the
//! program's first instruction), which releases the child once its events are open, and records into a
//! trace of its own in a private directory until the program has ended. [`Sampling::finish`] then
//! merges that profile into the runtime's trace ([`merge`]): the End chunk is cut off, the Samplers,
//! Module, Stacks and Samples chunks are appended (module and stack ids moved past the trace's own,
//! sample times converted from CLOCK_MONOTONIC nanoseconds to the trace's TSC ticks by the inverse of
//! the very interpolation readers apply to the trace's Clock chunks), and the End chunk is written
//! again with the new chunk count. Samples chunks are numbered per thread apart from its Events
//! chunks, so the runtime's chunks and counts stay as they were; readers merge the two by time.
//!
//! The samples of each process the program started go into that process's own trace (`FILE.PID`),
//! merged the same way; those of a process without a finished trace are counted, not kept.
//!
//! What it is not for: sampling a process `record -p` attached to (not supported yet), or writing
//! samples while the program runs (the runtime owns the file until its End chunk).

use std::path::{Path, PathBuf};
use std::thread::JoinHandle;

use ferrotrace_core::env::RuntimeSpec;
use ferrotrace_core::output::PrivateDir;
use ferrotrace_profile::{ProfileConfig, ProfileError, ProfileSummary, Target};
use ferrotrace_reader::reader::ReadError;

use crate::hold::Hold;
use crate::start::{start, Options, Program, Running};
use crate::LaunchError;

mod merge;
pub use merge::merge;

/// What `record --sample` samples, as `profile` spells it.
#[derive(Clone, Debug)]
pub struct SampleOptions {
    /// Events (`cpu-clock`, `sched:sched_switch`, `uprobe:...`).
    pub events: Vec<ferrotrace_profile::EventSpec>,
    /// cpu-clock frequency, Hz.
    pub frequency: u32,
    /// How stacks are taken.
    pub call_graph: ferrotrace_profile::CallGraph,
}

/// The sampler of a started program; [`Sampling::finish`] after the program ended and its runtime
/// finished the trace.
pub struct Sampling {
    thread: JoinHandle<Result<ProfileSummary, ProfileError>>,
    /// Holds the profile until it is merged.
    dir: PrivateDir,
}

/// Starts `program` as [`start`] does, sampled as `sample` says from its first instruction.
pub fn start_sampled(
    program: &Program,
    spec: RuntimeSpec,
    mut options: Options,
    sample: &SampleOptions,
) -> Result<(Running, Sampling), LaunchError> {
    let dir = PrivateDir::new("ferrotrace-sample").map_err(|source| LaunchError::Setup {
        what: "creating a private directory for the samples",
        source,
    })?;
    let cfg = ProfileConfig {
        events: sample.events.clone(),
        frequency: sample.frequency,
        call_graph: sample.call_graph,
        output: dir.path().join("samples.data"),
        target: Target::Command {
            program: program.path.clone(),
            argv: program.argv.clone(),
        },
        // The program's signals are record's relay's business.
        handle_signals: false,
        ..ProfileConfig::default()
    };
    let (hold, child_ends) = Hold::new().map_err(|source| LaunchError::Setup {
        what: "pipe",
        source,
    })?;
    options.hold = Some(child_ends.fds(&hold));
    let thread = std::thread::Builder::new()
        .name("ferrotrace-sample".into())
        .spawn(move || sampler(cfg, hold))
        .map_err(|source| LaunchError::Setup {
            what: "starting the sampler thread",
            source,
        })?;
    let started = start(program, spec, options);
    drop(child_ends);
    match started {
        Ok(running) => Ok((running, Sampling { thread, dir })),
        Err(e) => match (&e, thread.join()) {
            // The child gave up because the sampler could not start: its reason is the one to say.
            (LaunchError::Spawn { source, .. }, Ok(Err(why)))
                if source.raw_os_error() == Some(libc::ECANCELED) =>
            {
                Err(LaunchError::Sampler(why.to_string()))
            }
            _ => Err(e),
        },
    }
}

/// The sampler thread: waits for the child's pid, opens the events, releases it, records.
fn sampler(cfg: ProfileConfig, hold: Hold) -> Result<ProfileSummary, ProfileError> {
    // Signals for the program are taken by record's relay, never by this thread.
    // SAFETY: a zeroed sigset_t is valid storage for sigemptyset; sigemptyset/sigaddset on a local
    // set, pthread_sigmask on this thread.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for sig in crate::relay::RELAYED {
            libc::sigaddset(&mut set, sig);
        }
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
    }
    let pid = hold
        .pid()
        .ok_or_else(|| ProfileError::BadArgument("the program was not started".into()))?;
    ferrotrace_profile::profile_started(&cfg, pid, move || hold.release())
}

/// What [`Sampling::finish`] merged.
#[derive(Clone, Debug)]
pub struct SampleOutcome {
    /// The sampler's summary (samples, lost ones, unwinding errors, warnings).
    pub summary: ProfileSummary,
    /// Samples merged into the program's trace.
    pub merged: u64,
    /// Samples merged into the traces of the processes it started (each its own).
    pub merged_into_children: u64,
    /// Samples of processes that wrote no trace to merge them into (children without a runtime,
    /// or whose trace was not finished): not kept.
    pub other_processes: u64,
}

/// Why the samples are not in the trace.
#[derive(Debug)]
pub enum SampleError {
    /// The sampler failed.
    Sampler(ProfileError),
    /// A trace could not be read.
    Read(ReadError),
    /// The trace has no End chunk (the program was killed) or holds samples already.
    NotMergeable(String),
    /// Writing the trace failed.
    Io(PathBuf, std::io::Error),
}

impl std::fmt::Display for SampleError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SampleError::Sampler(e) => e.fmt(f),
            SampleError::Read(e) => e.fmt(f),
            SampleError::NotMergeable(why) => f.write_str(why),
            SampleError::Io(p, e) => write!(f, "{}: {e}", p.display()),
        }
    }
}

impl std::error::Error for SampleError {}

impl Sampling {
    /// After the program ended: waits for the sampler to finish its profile, and merges it into the
    /// trace at `trace` and, each process's samples into its own, the traces `children` of the
    /// processes it started ([`crate::outcome::children_traces`]). A child's trace that cannot take
    /// them (unfinished) keeps none; the outcome counts them.
    pub fn finish(self, trace: &Path, children: &[PathBuf]) -> Result<SampleOutcome, SampleError> {
        let summary = match self.thread.join() {
            Ok(r) => r.map_err(SampleError::Sampler)?,
            Err(_) => {
                return Err(SampleError::NotMergeable(
                    "the sampler thread panicked".into(),
                ))
            }
        };
        let profile = self.dir.path().join("samples.data");
        let merged = merge(trace, &profile)?;
        let merged_into_children: u64 = children
            .iter()
            .filter_map(|child| merge(child, &profile).ok())
            .sum();
        Ok(SampleOutcome {
            other_processes: summary
                .samples
                .saturating_sub(merged + merged_into_children),
            summary,
            merged,
            merged_into_children,
        })
    }

    /// After the program ended without a trace to merge into: waits for the sampler to end (its
    /// profile is removed with its directory).
    pub fn abandon(self) {
        let _ = self.thread.join();
    }
}
