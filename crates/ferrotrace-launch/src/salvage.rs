//! Recovering what a killed process recorded but had not written: [`crate::Ended::recover_unwritten`] calls
//! [`salvage`] after the program died without its End chunk (SIGKILL, the OOM killer, a crash no
//! handler could finish), with the chunk pool the program shared with it
//! (`ferrotrace_core::shared`). The events the file lacks are appended, then a `Salvage` chunk that
//! says how the process died and what was recovered.

use std::collections::HashSet;
use std::fmt;
use std::io::{BufWriter, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use ferrotrace_core::format::ChunkKind;
use ferrotrace_core::schema;
use ferrotrace_core::shared::Area;
use ferrotrace_core::writer::{encode_events, TraceWriter};

use ferrotrace_reader::reader::{ReadError, Trace};

/// How the process ended, as its parent saw it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Death {
    /// Killed by this signal.
    Signal(u32),
    /// Exited with this code (without finishing its trace).
    Exit(i32),
    /// Not known: `record -p` is not the process's parent, and the parent collected its status before
    /// record could read it.
    Unknown,
    /// It did not end: it replaced its program (`exec`), and the runtime went with the old one. The
    /// trace says "not known" (its Salvage chunk has a signal or an exit code, and neither is).
    Exec,
}

impl Death {
    /// How process `pid` ended, read from its `/proc/PID/stat` while it is a zombie (its parent has
    /// not collected it yet): `None` while it runs, or once it is gone.
    pub fn of_zombie(pid: u32) -> Option<Death> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // The fields after the command name (which may hold spaces and parentheses): the state is the
        // 3rd field of the line, the exit status (as waitpid reports it) the 52nd.
        let fields: Vec<&str> = stat[stat.rfind(')')? + 1..].split_whitespace().collect();
        if !matches!(fields.first(), Some(&"Z") | Some(&"X")) {
            return None;
        }
        let status: i32 = fields.get(52 - 3)?.parse().ok()?;
        Some(if libc::WIFSIGNALED(status) {
            Death::Signal(libc::WTERMSIG(status) as u32)
        } else {
            Death::Exit(libc::WEXITSTATUS(status))
        })
    }
}

/// [`salvage`] from the memfd `pool` that the process's runtime shared with us, into the trace at
/// `output`. `None` when the pool was never set up (its runtime did not start).
pub(crate) fn from_pool(
    pool: &std::os::fd::OwnedFd,
    output: &Path,
    death: Death,
) -> Option<Result<Option<Salvaged>, SalvageError>> {
    // Nothing the program recorded is newer than this.
    let now_tsc = ferrotrace_core::clock::rdtsc();
    let map = crate::pool::Mapped::new(pool)?;
    Some(salvage(output, map.area().ok().as_ref(), death, now_tsc))
}

/// What [`salvage`] appended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Salvaged {
    /// Events chunks recovered.
    pub chunks: u64,
    /// Events in them.
    pub events: u64,
}

/// Why nothing could be recovered.
#[derive(Debug)]
pub enum SalvageError {
    /// The trace cannot be read.
    Read(ReadError),
    /// The program never set up the shared pool (its runtime did not start), or the pool belongs to
    /// another trace (the program replaced itself with `exec`).
    NoPool(&'static str),
    /// Appending failed.
    Io(PathBuf, std::io::Error),
}

impl fmt::Display for SalvageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SalvageError::Read(e) => e.fmt(f),
            SalvageError::NoPool(why) => f.write_str(why),
            SalvageError::Io(p, e) => write!(f, "{}: {e}", p.display()),
        }
    }
}

impl std::error::Error for SalvageError {}

/// Appends to the trace at `path` the events of `pool` (the program's shared chunk pool, mapped after
/// it died; `None` when its header says it was never set up) that the file does not hold, each thread's in its order, with the names of threads the file
/// does not name, a Clock chunk (the last calibration) and a `Salvage` chunk. A torn chunk at the end
/// of the file is cut off first. `now_tsc` is a timestamp read after the death: nothing recorded is
/// newer. Returns `Ok(None)` for a trace that needs nothing (it has its End or was salvaged already).
pub fn salvage(
    path: &Path,
    pool: Option<&Area<'_>>,
    death: Death,
    now_tsc: u64,
) -> Result<Option<Salvaged>, SalvageError> {
    let trace = Trace::open(path).map_err(SalvageError::Read)?;
    if trace.end().is_some() || trace.salvage().is_some() {
        return Ok(None);
    }
    let area = pool.ok_or({
        SalvageError::NoPool(
            "the program did not share its trace buffers (its runtime never started)",
        )
    })?;
    let h = area.header();
    use std::sync::atomic::Ordering::Relaxed;
    if h.pid.load(Relaxed) != trace.session().pid
        || h.session_start_ns.load(Relaxed) != trace.session().start_realtime_ns
    {
        return Err(SalvageError::NoPool(
            "the shared trace buffers belong to another trace (the program replaced itself with exec)",
        ));
    }
    let mut in_file: HashSet<(u32, u32)> = HashSet::new();
    for &tid in trace.threads().keys() {
        for c in trace.thread_chunks(tid) {
            in_file.insert((tid, c.map_err(SalvageError::Read)?.seq));
        }
    }
    let named: HashSet<u32> = trace
        .threads()
        .values()
        .filter(|t| !t.name.is_empty())
        .map(|t| t.tid)
        .collect();
    let mut recovered: Vec<_> = area
        .unwritten(now_tsc)
        .filter(|(d, _)| !in_file.contains(&(d.tid.load(Relaxed), d.seq.load(Relaxed))))
        .collect();
    recovered.sort_by_key(|(d, _)| (d.tid.load(Relaxed), d.seq.load(Relaxed)));

    let io = |e| SalvageError::Io(path.to_path_buf(), e);
    // The file record's runtime created; never through a link, never someone else's.
    let Some(mut file) = crate::outcome::open_own_trace(path).map_err(io)? else {
        return Err(SalvageError::NoPool(
            "the trace file is not ours to append to",
        ));
    };
    file.set_len(trace.valid_len()).map_err(io)?;
    file.seek(SeekFrom::End(0)).map_err(io)?;
    let mut w = TraceWriter::resume(
        BufWriter::new(file),
        trace.valid_len(),
        trace.next_chunk_seq(),
    );
    let mut out = Salvaged {
        chunks: 0,
        events: 0,
    };
    let mut scratch = Vec::new();
    let mut named_now = named;
    for (d, records) in recovered {
        let (tid, seq) = (d.tid.load(Relaxed), d.seq.load(Relaxed));
        if named_now.insert(tid) {
            let raw = d.name();
            let name =
                String::from_utf8_lossy(&raw[..raw.iter().position(|&b| b == 0).unwrap_or(16)])
                    .into_owned();
            w.write(&schema::Thread {
                tid,
                name: &name,
                pid: 0,
                registered_ticks: 0,
            })
            .map_err(io)?;
        }
        let (counts, range) = encode_events(tid, seq, &records.to_vec(), &mut scratch);
        w.chunk(ChunkKind::Events, &scratch[range]).map_err(io)?;
        out.chunks += 1;
        out.events += counts.events;
    }
    w.write(&ferrotrace_core::clock::tsc_clock_sample())
        .map_err(io)?;
    let (signal, exit_code) = match death {
        Death::Signal(s) => (s, None),
        Death::Exit(c) => (0, Some(c)),
        Death::Unknown | Death::Exec => (0, None),
    };
    w.write(&schema::Salvage {
        signal,
        exit_code,
        chunks: out.chunks,
        events: out.events,
    })
    .map_err(io)?;
    w.flush().map_err(io)?;
    Ok(Some(out))
}
