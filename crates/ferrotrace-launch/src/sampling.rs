//! `record --sample`: perf_event sampling of the program `record` starts, in the trace its runtime
//! writes, on the runtime's clock.
//!
//! How: [`start_sampled`] forks the program through [`crate::start::start`] with a hold before its
//! `execve` ([`HoldFds`]: the child writes its pid to a pipe and waits on another). A sampler thread
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

use std::collections::{HashMap, HashSet};
use std::io::{BufWriter, Read, Seek, SeekFrom, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::thread::JoinHandle;

use ferrotrace_analysis::reader::{EventKind, ReadError, Trace};
use ferrotrace_core::builder::{encode_events, Event};
use ferrotrace_core::env::RuntimeSpec;
use ferrotrace_core::format::{ChunkHeader, ChunkKind, CHUNK_HEADER_LEN, FILE_HEADER_LEN};
use ferrotrace_core::output::PrivateDir;
use ferrotrace_core::schema::{self, Sampler, SamplersHeader, StackNode, StacksHeader};
use ferrotrace_core::writer::TraceWriter;
use ferrotrace_profile::{ProfileConfig, ProfileError, ProfileSummary, Target};

use crate::start::{start, Options, Program, Running};
use crate::LaunchError;

/// Sample events per Samples chunk, and stack nodes per Stacks chunk.
const PER_CHUNK: usize = 4096;

/// The child's ends of the hold (raw descriptors: [`Options`] is `Copy`); see [`start_sampled`].
#[derive(Clone, Copy, Debug)]
pub struct HoldFds {
    /// Where the child writes its pid.
    pid_w: RawFd,
    /// Where it waits for the release (one byte; end of file: do not run).
    go_r: RawFd,
    /// The sampler's ends, which the child closes first (its copy of the release end would keep it
    /// waiting forever when the sampler gives up).
    sampler_ends: [RawFd; 2],
}

impl HoldFds {
    /// Makes `cmd`'s child announce its pid and wait for the release before `execve`.
    pub(crate) fn install(self, cmd: &mut Command) {
        use std::os::unix::process::CommandExt;
        // SAFETY: the closure runs in the forked child before exec and only calls close, getpid,
        // write and read (async-signal-safe) on descriptors made before the fork.
        unsafe {
            cmd.pre_exec(move || {
                for fd in self.sampler_ends {
                    libc::close(fd);
                }
                let pid = libc::getpid().to_le_bytes();
                libc::write(self.pid_w, pid.as_ptr().cast(), pid.len());
                let mut go = 0u8;
                loop {
                    let n = libc::read(self.go_r, (&mut go as *mut u8).cast(), 1);
                    if n == 1 {
                        return Ok(());
                    }
                    if n < 0 && *libc::__errno_location() == libc::EINTR {
                        continue;
                    }
                    // The sampler could not start: the program must not run unsampled.
                    return Err(std::io::Error::from_raw_os_error(libc::ECANCELED));
                }
            })
        };
    }
}

fn pipe() -> Result<(OwnedFd, OwnedFd), LaunchError> {
    let mut fds = [0; 2];
    // SAFETY: fds is a valid 2-element array.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(LaunchError::setup("pipe2"));
    }
    // SAFETY: both were just created and belong to nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

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
    let (pid_r, pid_w) = pipe()?;
    let (go_r, go_w) = pipe()?;
    options.hold = Some(HoldFds {
        pid_w: pid_w.as_raw_fd(),
        go_r: go_r.as_raw_fd(),
        sampler_ends: [pid_r.as_raw_fd(), go_w.as_raw_fd()],
    });
    let thread = std::thread::Builder::new()
        .name("ferrotrace-sample".into())
        .spawn(move || sampler(cfg, pid_r, go_w))
        .map_err(|source| LaunchError::Setup {
            what: "starting the sampler thread",
            source,
        })?;
    let started = start(program, spec, options);
    // Our copies of the child's ends: the sampler sees end of file if the program never forked.
    drop((pid_w, go_r));
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
fn sampler(
    cfg: ProfileConfig,
    pid_r: OwnedFd,
    go_w: OwnedFd,
) -> Result<ProfileSummary, ProfileError> {
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
    let mut pid = [0u8; 4];
    std::fs::File::from(pid_r)
        .read_exact(&mut pid)
        .map_err(|_| ProfileError::BadArgument("the program was not started".into()))?;
    let pid = u32::from_le_bytes(pid);
    let mut go = std::fs::File::from(go_w);
    ferrotrace_profile::profile_started(&cfg, pid, move || go.write_all(&[1]))
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

/// Offset and header of the last chunk of the trace's readable prefix (`valid_len` bytes).
fn last_chunk(file: &std::fs::File, valid_len: u64) -> std::io::Result<Option<(u64, ChunkHeader)>> {
    let mut at = FILE_HEADER_LEN as u64;
    let mut last = None;
    let mut h = [0u8; CHUNK_HEADER_LEN];
    while at < valid_len {
        file.read_exact_at(&mut h, at)?;
        let header = ChunkHeader::decode(&h);
        last = Some((at, header));
        at += (CHUNK_HEADER_LEN as u64) + u64::from(header.len);
    }
    Ok(last)
}

/// Merges the samples of the profile at `samples` that belong to the process of the function trace at
/// `trace` into it (see the module docs); returns how many.
pub fn merge(trace: &Path, samples: &Path) -> Result<u64, SampleError> {
    let t = Trace::open(trace).map_err(SampleError::Read)?;
    let p = Trace::open(samples).map_err(SampleError::Read)?;
    let Some(end) = t.end else {
        return Err(SampleError::NotMergeable(
            "the trace has no End chunk (the program did not finish it): samples not merged".into(),
        ));
    };
    if !t.samplers.is_empty() || !t.problems.is_empty() || t.truncation.is_some() {
        return Err(SampleError::NotMergeable(
            "the trace holds samples already or is damaged: samples not merged".into(),
        ));
    }
    let io = |e| SampleError::Io(trace.to_path_buf(), e);
    // The file the program's runtime created: never through a link, never someone else's.
    let Some(file) = crate::outcome::open_own_trace(trace).map_err(io)? else {
        return Err(SampleError::NotMergeable(
            "the trace file is not ours to append to".into(),
        ));
    };
    let Some((end_at, end_header)) = last_chunk(&file, t.valid_len).map_err(io)? else {
        return Err(SampleError::NotMergeable("the trace is empty".into()));
    };
    if ChunkKind::from_u32(end_header.kind) != Some(ChunkKind::End) {
        return Err(SampleError::NotMergeable(
            "the trace does not end with its End chunk".into(),
        ));
    }

    // The profile's modules and stack nodes get ids past the trace's own.
    let first_module = t.modules.iter().map(|m| m.id).max().unwrap_or(0) + 1;
    let module_ids: HashMap<u32, u32> = p
        .modules
        .iter()
        .enumerate()
        .map(|(i, m)| (m.id, first_module + i as u32))
        .collect();
    let first_node = t.stacks.len() as u32;

    file.set_len(end_at).map_err(io)?;
    let mut file = file;
    file.seek(SeekFrom::End(0)).map_err(io)?;
    let mut w = TraceWriter::resume(BufWriter::new(file), end_at, end_header.seq);
    let head = SamplersHeader {
        call_graph: p.call_graph,
        frequency: p.sample_frequency,
        count: p.samplers.len() as u32,
    };
    let list: Vec<Sampler<'_>> = p
        .samplers
        .iter()
        .map(|s| Sampler {
            kind: s.kind,
            spelling: &s.spelling,
        })
        .collect();
    w.write_list(&head, &list).map_err(io)?;
    for m in &p.modules {
        w.write(&schema::Module {
            id: module_ids[&m.id],
            bias: m.bias,
            size: m.size,
            path: &m.path,
            build_id: &m.build_id,
        })
        .map_err(io)?;
    }
    let nodes: Vec<StackNode> = p
        .stacks
        .iter()
        .map(|n| StackNode {
            parent: n.parent.map(|q| q + first_node),
            module: module_ids.get(&n.module).copied().unwrap_or(0),
            address: n.address,
        })
        .collect();
    for (i, part) in nodes.chunks(PER_CHUNK).enumerate() {
        let head = StacksHeader {
            first_id: first_node + (i * PER_CHUNK) as u32,
            count: part.len() as u32,
        };
        w.write_list(&head, part).map_err(io)?;
    }
    let named: HashSet<u32> = t
        .threads
        .values()
        .filter(|th| !th.name.is_empty())
        .map(|th| th.tid)
        .collect();
    let mut merged = 0u64;
    let mut buf = Vec::new();
    for th in p.threads.values() {
        if th.pid != t.session.pid {
            // Another process's: its own trace takes them.
            continue;
        }
        if !named.contains(&th.tid) {
            w.write(&schema::Thread {
                tid: th.tid,
                name: &th.name,
                pid: 0,
            })
            .map_err(io)?;
        }
        let mut events = Vec::with_capacity(PER_CHUNK);
        let mut seq = 0u32;
        let mut stream = p.thread_events(th.tid).map_err(SampleError::Read)?;
        while let Some(e) = stream.next_ref() {
            let e = e.map_err(SampleError::Read)?;
            if e.kind != EventKind::Sample {
                continue;
            }
            events.push(Event {
                // The inverse of the conversion readers apply to this trace's ticks.
                ticks: t.ns_to_tsc(e.ts_ns),
                kind: EventKind::Sample,
                id: if e.id == 0 { 0 } else { e.id + first_node },
                payload: Vec::new(),
                fields: e.fields,
            });
            if events.len() == PER_CHUNK {
                write_samples(&mut w, th.tid, seq, &events, &mut buf).map_err(io)?;
                merged += events.len() as u64;
                seq += 1;
                events.clear();
            }
        }
        if !events.is_empty() {
            write_samples(&mut w, th.tid, seq, &events, &mut buf).map_err(io)?;
            merged += events.len() as u64;
        }
    }
    let end = schema::End {
        chunks: w.next_seq(),
        ..end
    };
    w.write(&end).map_err(io)?;
    w.flush().map_err(io)?;
    Ok(merged)
}

fn write_samples(
    w: &mut TraceWriter<BufWriter<std::fs::File>>,
    tid: u32,
    seq: u32,
    events: &[Event],
    buf: &mut Vec<u8>,
) -> std::io::Result<()> {
    buf.clear();
    encode_events(tid, seq, events, buf);
    w.chunk(ChunkKind::Samples, buf)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferrotrace_core::builder::TraceBuilder;
    use ferrotrace_core::schema::{source, Mode, SamplerKind};

    fn write(name: &str, bytes: Vec<u8>) -> PathBuf {
        let path = std::env::temp_dir().join(format!("ft-merge-{}-{name}", std::process::id()));
        std::fs::write(&path, bytes).unwrap();
        path
    }

    /// A function trace with an allocation stack of its own, and a profile of the same thread: the
    /// merge keeps both tables apart, puts each sample at its time among the function events, and
    /// leaves a trace every check of the reader accepts.
    #[test]
    fn merged_samples_take_their_place_and_ids_after_the_trace_s_own() {
        let mut t = TraceBuilder::new(
            Vec::new(),
            "/bin/t",
            source::XRAY | source::ALLOCATIONS,
            Mode::Lossless,
        )
        .unwrap();
        t.module(5, "/bin/t", b"").unwrap();
        t.function(1, 0x1000, 16, "t::f").unwrap();
        t.thread(7, "main").unwrap();
        let alloc_stack = t.stack(None, 5, 0x10);
        t.event(7, 1_000, EventKind::Entry, 1).unwrap();
        t.alloc(7, 2_000, Some(alloc_stack), 64, 0x5000).unwrap();
        t.event(7, 5_000, EventKind::Exit, 1).unwrap();
        let trace = write("trace", t.finish().unwrap());

        let mut p = TraceBuilder::new(Vec::new(), "/bin/t", source::SAMPLES, Mode::Drop).unwrap();
        p.module(1, "/bin/t", b"").unwrap();
        let cpu = p.sampler(SamplerKind::CpuClock, "cpu-clock");
        let outer = p.stack(None, 1, 0x20);
        let inner = p.stack(Some(outer), 1, 0x30);
        p.thread(7, "main").unwrap();
        p.thread(8, "worker").unwrap();
        p.sample(7, 500, Some(inner), cpu, 1_000).unwrap();
        p.sample(7, 3_000, Some(outer), cpu, 1_000).unwrap();
        p.sample(8, 3_500, None, cpu, 1_000).unwrap();
        p.sample(7, 6_000, Some(inner), cpu, 1_000).unwrap();
        let profile = write("profile", p.finish().unwrap());

        assert_eq!(merge(&trace, &profile).unwrap(), 4);
        let m = Trace::open(&trace).unwrap();
        assert!(m.problems.is_empty(), "{:?}", m.problems);
        assert!(m.truncation.is_none() && m.end.is_some());
        assert_eq!(m.samplers.len(), 1);
        let main: Vec<(u64, EventKind, u32)> = m
            .thread_events(7)
            .unwrap()
            .map(|e| e.map(|e| (e.ts_ns, e.kind, e.id)).unwrap())
            .collect();
        // The profile's nodes follow the trace's one (the allocation's): ids 1 and 2.
        assert_eq!(
            main,
            [
                (500, EventKind::Sample, 3),
                (1_000, EventKind::Entry, 1),
                (2_000, EventKind::Alloc, alloc_stack + 1),
                (3_000, EventKind::Sample, 2),
                (5_000, EventKind::Exit, 1),
                (6_000, EventKind::Sample, 3),
            ]
        );
        let profile_module = m.stacks[1].module;
        assert_ne!(profile_module, 5);
        assert_eq!(m.stacks[0].module, 5);
        assert_eq!(m.stacks[2].parent, Some(1));
        assert!(m
            .modules
            .iter()
            .any(|x| x.id == profile_module && x.path == "/bin/t"));
        assert_eq!(m.threads[&8].events, 1);
        // Once is all: a trace that holds samples takes no more.
        assert!(matches!(
            merge(&trace, &profile),
            Err(SampleError::NotMergeable(_))
        ));
        let _ = std::fs::remove_file(&trace);
        let _ = std::fs::remove_file(&profile);
    }
}
