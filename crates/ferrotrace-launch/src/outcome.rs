//! What a run left behind, decided here so that `record` only prints it ([`conclude`], [`Recorded`]):
//! which file is this run's trace (another run given the same `-o` may have replaced it meanwhile),
//! what was recovered or merged into it, the traces of the processes it started, and the summary
//! line `record` prints.

use std::path::{Path, PathBuf};

use ferrotrace_reader::reader::Trace;

/// Device and inode of the file at `path`, if any: tells a trace written by this run from the one
/// that was there before.
pub fn file_identity(path: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::symlink_metadata(path)
        .ok()
        .map(|m| (m.dev(), m.ino()))
}

/// The trace this run wrote, opened: `output` when its Session names the program's process `pid`,
/// else `output.old` when another run started at `output` after ours (and kept ours as `.old`).
/// `None` when neither is this run's (none was written, or a third run replaced it).
pub fn trace_of(output: &Path, pid: u32) -> Option<(PathBuf, Trace)> {
    [
        output.to_path_buf(),
        ferrotrace_core::output::old_path(output),
    ]
    .into_iter()
    .find_map(|p| {
        let t = Trace::open(&p).ok().filter(|t| t.session().pid == pid)?;
        Some((p, t))
    })
}

/// The traces that processes the program started wrote beside `output` (`FILE.PID`) since `start`.
pub fn children_traces(output: &Path, start: std::time::SystemTime) -> Vec<PathBuf> {
    let name = output
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let dir = output.parent().unwrap_or(Path::new("."));
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut children: Vec<PathBuf> = entries
        .flatten()
        .filter(|e| {
            let n = e.file_name().to_string_lossy().into_owned();
            n.strip_prefix(&name)
                .and_then(|rest| rest.strip_prefix('.'))
                .is_some_and(|pid| !pid.is_empty() && pid.bytes().all(|b| b.is_ascii_digit()))
                && e.metadata()
                    .and_then(|m| m.modified())
                    .is_ok_and(|m| m >= start)
        })
        .map(|e| e.path())
        .collect();
    children.sort();
    children
}

/// The line that sums up the trace at `output`: what it holds, or the write error that cut it short
/// (a full disk: the runtime dropped the rest, counted it as lost, and ended the file with the error).
/// `Err` for that error's line, which `record` prints as an error.
pub fn summary(output: &Path, t: &Trace) -> Result<String, String> {
    if let Some(e) = t.end().filter(|e| e.write_errno != 0) {
        return Err(format!(
            "writing {} failed ({}): {} events written, {} lost",
            output.display(),
            std::io::Error::from_raw_os_error(e.write_errno as i32),
            t.event_count(),
            e.lost
        ));
    }
    // The program's events: not the recorder's markers (of losses and waits) among the chunks'.
    let events = t
        .event_count()
        .saturating_sub(t.end().map_or(0, |e| e.markers));
    let per = if events > 0 {
        t.file_len() as f64 / events as f64
    } else {
        0.0
    };
    Ok(format!(
        "wrote {}: {} events from {} threads, {} functions, {} bytes ({per:.2} bytes/event){}",
        output.display(),
        events,
        t.threads().len(),
        t.functions().len(),
        t.file_len(),
        match &t.truncation() {
            Some(tr) => format!(", truncated at byte {}: {}", tr.offset, tr.reason),
            None if t.end().is_none() => {
                ", incomplete (the program ended without letting ferrotrace finish)".into()
            }
            None => String::new(),
        }
    ))
}

/// Opens this run's trace at `path` to read and append to it (the runtime has finished it: record
/// salvages into it, `--sample` merges into it): never through a link, and only a regular file of
/// ours. `Ok(None)` when it is not ours.
pub(crate) fn open_own_trace(path: &Path) -> std::io::Result<Option<std::fs::File>> {
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)?;
    let meta = file.metadata()?;
    // SAFETY: geteuid cannot fail.
    let ours = meta.is_file() && meta.uid() == unsafe { libc::geteuid() };
    Ok(ours.then_some(file))
}

/// Writes how the program ended into its finished trace at `path` (`trace`, that file opened): the
/// exit code and what it used, as `wait4` gave them ([`crate::start::Ended`]), into the End chunk,
/// which the runtime wrote without them (it is the last chunk: rewritten in place, with its number).
/// Returns the trace, opened again when it was rewritten, and why it could not be when it could not.
pub fn record_ending(
    path: &Path,
    trace: Trace,
    ended: &crate::start::Ended,
) -> (
    Result<Trace, ferrotrace_reader::reader::ReadError>,
    Option<String>,
) {
    // A trace whose writer met an error (a full disk) is left as it is.
    let Some(end) = trace
        .end()
        .filter(|e| e.usage.is_none() && e.write_errno == 0 && ended.usage.is_some())
    else {
        return (Ok(trace), None);
    };
    drop(trace);
    let known = ferrotrace_core::schema::End {
        exit_code: end.exit_code.or(ended.status.code()),
        usage: ended.usage,
        ..end
    };
    let reopened = |why: Option<String>| (Trace::open(path), why);
    match rewrite_end(path, &end, &known) {
        Ok(()) => reopened(None),
        Err(e) => reopened(Some(format!(
            "{}: how the program ended is not in the trace: {e}",
            path.display()
        ))),
    }
}

/// Replaces the End chunk `old` at the end of the trace file `path` by `new`.
fn rewrite_end(
    path: &Path,
    old: &ferrotrace_core::schema::End,
    new: &ferrotrace_core::schema::End,
) -> std::io::Result<()> {
    use ferrotrace_core::format::{ChunkHeader, ChunkKind, CHUNK_HEADER_LEN};
    use ferrotrace_core::schema::Payload;
    use std::io::{Read, Seek, SeekFrom};
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::OpenOptionsExt;
    let mut payload = Vec::new();
    let _ = old.encode(&mut payload);
    // A trace this run wrote: never through a link someone else put in its place.
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)?;
    let at = file
        .metadata()?
        .len()
        .checked_sub((CHUNK_HEADER_LEN + payload.len()) as u64)
        .ok_or_else(|| std::io::Error::other("shorter than its End chunk"))?;
    let mut header = [0u8; CHUNK_HEADER_LEN];
    file.seek(SeekFrom::Start(at))?;
    file.read_exact(&mut header)?;
    let h = ChunkHeader::decode(&header);
    if h.kind != ChunkKind::End as u32 || h.seq != old.chunks || h.len as usize != payload.len() {
        return Err(std::io::Error::other(
            "its last chunk is not the End chunk read",
        ));
    }
    // The room the longer chunk needs, taken before anything changes: a full disk leaves the
    // trace as it was.
    let mut grown = Vec::new();
    let _ = new.encode(&mut grown);
    let extra = grown.len().saturating_sub(payload.len()) as libc::off_t;
    if extra > 0 {
        let end = (at as usize + CHUNK_HEADER_LEN + payload.len()) as libc::off_t;
        // SAFETY: an open descriptor of ours; posix_fallocate only reserves blocks.
        let r = unsafe { libc::posix_fallocate(file.as_raw_fd(), end, extra) };
        if r != 0 {
            return Err(std::io::Error::from_raw_os_error(r));
        }
    }
    // Written over the old chunk and into the room taken (never truncated first: that would give
    // the room back), then cut to its length.
    file.seek(SeekFrom::Start(at))?;
    let mut w = ferrotrace_core::writer::TraceWriter::resume(file, at, old.chunks);
    w.write(new)?;
    w.flush()?;
    let file = w.into_inner();
    file.set_len(at + (CHUNK_HEADER_LEN + grown.len()) as u64)?;
    file.sync_all()
}

/// What was recovered of the events a process recorded and had not written when it died without
/// finishing its trace (no End chunk: SIGKILL, the OOM killer, ...).
pub struct Recovery {
    /// How it died.
    pub death: crate::salvage::Death,
    /// What was appended to its trace; `None` when it shared no chunk pool (its runtime never
    /// started, or nothing was missing) — nothing to say then.
    pub got: Option<Result<Option<crate::salvage::Salvaged>, crate::salvage::SalvageError>>,
}

/// What `record` of a program came to: every decision taken, for the CLI only to print, in the order
/// of the fields.
pub struct Recorded {
    /// This run's trace, or why there is none.
    pub written: Written,
    /// The traces the processes the program started wrote beside it (`FILE.PID`).
    pub children: Vec<PathBuf>,
}

/// This run's trace, or why there is none.
pub enum Written {
    /// This run wrote a trace.
    Ours(Box<OurTrace>),
    /// No trace was written; the file at `-o` is still the previous one.
    PreviousKept,
    /// The file at `-o` is another run's (two runs were given one `-o`): this run's was replaced.
    Replaced,
    /// No trace was written.
    Nothing,
}

/// This run's trace, finished: recovered, sampled and its End completed as needed.
pub struct OurTrace {
    /// Where it is: `-o`, or `-o.old` when another run started at `-o` after this one.
    pub path: PathBuf,
    /// The program died before finishing it: how, and what was recovered.
    pub recovered: Option<Recovery>,
    /// What `--sample` merged into it (or why not).
    pub sampled: Option<Result<crate::sampling::SampleOutcome, crate::sampling::SampleError>>,
    /// Why how the program ended could not be written into its End chunk.
    pub ending_failed: Option<String>,
    /// The trace as it now is, read again.
    pub read: Result<Trace, ferrotrace_reader::reader::ReadError>,
}

/// Concludes `record` of the program whose process `pid` `ended`: finds this run's trace at `output`
/// (`previous`, the identity of the file there before the run; `start`, when it began), recovers
/// what the program had not written if it died first, merges `sampling`'s samples into it and its
/// children's traces, and writes how the program ended into its End chunk. The trace is read once,
/// and again only when events had to be recovered or samples merged into it.
pub fn conclude(
    output: &Path,
    pid: u32,
    previous: Option<(u64, u64)>,
    start: std::time::SystemTime,
    ended: &crate::start::Ended,
    mut sampling: Option<crate::sampling::Sampling>,
) -> Recorded {
    let written = match trace_of(output, pid) {
        Some((path, trace)) => {
            let mut recovered = None;
            let mut sampled = None;
            let read = if trace.end().is_none() {
                recovered = Some(Recovery {
                    death: ended.death(),
                    got: ended.recover_unwritten(&path),
                });
                // Says why the samples cannot go into an unfinished trace.
                sampled = sampling.take().map(|s| s.finish(&path, &[]));
                Trace::open(&path)
            } else if let Some(s) = sampling.take() {
                drop(trace);
                sampled = Some(s.finish(&path, &children_traces(output, start)));
                Trace::open(&path)
            } else {
                Ok(trace)
            };
            let (read, ending_failed) = match read {
                Ok(t) => record_ending(&path, t, ended),
                Err(e) => (Err(e), None),
            };
            Written::Ours(Box::new(OurTrace {
                path,
                recovered,
                sampled,
                ending_failed,
                read,
            }))
        }
        None if previous.is_some() && file_identity(output) == previous => Written::PreviousKept,
        None if file_identity(output).is_some() => Written::Replaced,
        None => Written::Nothing,
    };
    if let Some(s) = sampling {
        // No trace of this run to merge into: the sampler only has to end.
        s.abandon();
    }
    Recorded {
        written,
        children: children_traces(output, start),
    }
}

/// Concludes `record -p` of a process `attached`, whose trace is at `output`: when it ended (or
/// replaced its program) while recorded without finishing its trace, what its runtime had not
/// written is recovered from the pool it shared. Returns what was recovered and the trace as it now
/// is.
pub fn conclude_attached(
    output: &Path,
    attached: &crate::attach::record::Attached,
) -> (
    Option<Recovery>,
    Result<Trace, ferrotrace_reader::reader::ReadError>,
) {
    use crate::attach::record::Ending;
    match Trace::open(output) {
        Ok(t)
            if t.end().is_none()
                && matches!(attached.ending, Ending::ProcessEnded | Ending::Replaced) =>
        {
            drop(t);
            let recovered = attached
                .recover_unwritten(output)
                .map(|(death, got)| Recovery {
                    death,
                    got: Some(got),
                });
            (recovered, Trace::open(output))
        }
        read => (None, read),
    }
}
