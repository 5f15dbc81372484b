//! `ferrotrace info`: what a trace holds.

pub mod samples;

use serde_json::{json, Value};

use crate::reader::{EventKind, ReadError, Trace};

/// Per-thread counts.
#[derive(Clone, Debug, Default)]
pub struct ThreadSummary {
    /// OS thread id.
    pub tid: u32,
    /// Thread name.
    pub name: String,
    /// The program's events in the file (entries, exits, tracepoints, allocations, samples): the
    /// markers of lost events and waits are not among them.
    pub events: u64,
    /// Markers in the file: `Lost` (how many events were lost there) and `Wait` events.
    pub markers: u64,
    /// Function entries.
    pub entries: u64,
    /// Function exits (tail exits included).
    pub exits: u64,
    /// Events lost (drop mode).
    pub lost: u64,
    /// Nanoseconds spent waiting for buffers (lossless mode).
    pub waited_ns: u64,
}

/// Everything `info` prints.
#[derive(Clone, Debug, Default)]
pub struct Summary {
    /// Command line.
    pub cmdline: Vec<String>,
    /// Executable.
    pub exe: String,
    /// Process id.
    pub pid: u32,
    /// The host it was recorded on, and its boot id (empty: not said).
    pub host: String,
    /// The kernel's boot id at the recording (empty: not said).
    pub boot_id: String,
    /// Recording mode.
    pub mode: String,
    /// `record -t`: calls shorter than this many nanoseconds were left out (0: none was).
    pub min_call_ns: u64,
    /// What recorded the events (`xray`, `mcount`, `tracepoints`, `samples`, ...).
    pub recorded_by: Vec<&'static str>,
    /// The trace holds function entries and exits.
    pub has_functions: bool,
    /// What is wrong with the trace besides a cut-short tail (see [`Trace::problems`]).
    pub problems: Vec<String>,
    /// Duration in ns.
    pub duration_ns: u64,
    /// Threads.
    pub threads: Vec<ThreadSummary>,
    /// Processes the threads belong to (one but for system-wide profiles and followed children).
    pub processes: usize,
    /// Functions in the embedded symbol table.
    pub functions: usize,
    /// The program's events in the file: entries, exits, tracepoints, allocations and samples, not
    /// the markers of lost events and waits (`events + markers` is [`Trace::event_count`], what the
    /// chunks' headers and `record`'s summary count).
    pub events: u64,
    /// `Lost` and `Wait` markers in the file.
    pub markers: u64,
    /// Events lost: the End chunk's count when the trace has one (the writer's: the `Lost` markers,
    /// those of chunks a flight ring dropped too, and what the recorder counted without a marker,
    /// such as samples the kernel dropped or calls deeper than an embedded shadow stack), else the
    /// `Lost` markers' counts.
    pub lost: u64,
    /// Events a flight ring (or a wrapping embedded buffer) overwrote to keep the newest: recorded,
    /// then dropped before the trace was written (the End chunk's `dropped_events`).
    pub dropped_events: u64,
    /// Events chunks the flight ring dropped (0 for an embedded buffer, which wraps by events).
    pub dropped_chunks: u64,
    /// File size.
    pub file_bytes: u64,
    /// Whether the trace has its End chunk.
    pub complete: bool,
    /// How the traced process ended ("exit" or "signal N").
    pub ended_by: String,
    /// The error that stopped the recorder's writer (End's `write_errno`): what it recorded after it
    /// was dropped and counted as lost.
    pub write_error: Option<String>,
    /// Truncation: offset and reason.
    pub truncated: Option<(u64, String)>,
    /// Error met while decoding events (reading stopped there for that thread).
    pub decode_error: Option<String>,
}

impl Summary {
    /// Bytes per recorded event.
    pub fn bytes_per_event(&self) -> f64 {
        if self.events == 0 {
            0.0
        } else {
            self.file_bytes as f64 / self.events as f64
        }
    }

    /// Reads the whole trace (streaming) and counts.
    pub fn of(trace: &Trace) -> Result<Summary, ReadError> {
        let mut s = Summary {
            cmdline: trace.session().args.clone(),
            exe: trace.session().exe.clone(),
            pid: trace.session().pid,
            host: trace.session().host.clone(),
            boot_id: trace.session().boot_id.clone(),
            mode: trace.session().mode_name().to_string(),
            min_call_ns: trace.session().min_call_ns,
            recorded_by: ferrotrace_core::schema::source::names(trace.session().sources).collect(),
            has_functions: trace.has_function_events(),
            problems: trace.problems().iter().map(ToString::to_string).collect(),
            duration_ns: trace.duration_ns(),
            functions: trace.functions().len(),
            file_bytes: trace.file_len(),
            complete: trace.end().is_some(),
            ended_by: match (trace.end(), trace.salvage()) {
                (Some(e), _) if e.reason == ferrotrace_core::schema::EndReason::Signal => {
                    format!("signal {}", e.signal)
                }
                (Some(e), _) if e.reason == ferrotrace_core::schema::EndReason::Stopped => {
                    "end of recording (the program went on)".into()
                }
                (Some(_), _) => "exit".into(),
                (None, Some(s)) => format!(
                    "{}: {} unfinished chunks recovered ({} events)",
                    match (s.exit_code, s.signal) {
                        (Some(c), _) => format!("exit {c} without finishing the trace"),
                        // record -p, which is not the process's parent, could not learn how.
                        (None, 0) => "an end without finishing the trace (how is not known)".into(),
                        (None, signal) => format!("killed by {}", signal_name(signal)),
                    },
                    s.chunks,
                    s.events
                ),
                (None, None) => "unknown (no end record)".into(),
            },
            write_error: trace
                .end()
                .filter(|e| e.write_errno != 0)
                .map(|e| std::io::Error::from_raw_os_error(e.write_errno as i32).to_string()),
            truncated: trace
                .truncation()
                .as_ref()
                .map(|t| (t.offset, t.reason.clone())),
            processes: {
                let mut pids: Vec<u32> = trace.threads().values().map(|t| t.pid).collect();
                pids.sort_unstable();
                pids.dedup();
                pids.len()
            },
            ..Summary::default()
        };
        for th in trace.threads().values() {
            let mut ts = ThreadSummary {
                tid: th.tid,
                name: th.name.clone(),
                ..Default::default()
            };
            // Kinds and ids only: no payloads, no times.
            let mut stream = trace.thread_events(th.tid)?;
            while let Some(e) = stream.next_raw() {
                let (_, kind, id) = match e {
                    Ok(e) => e,
                    Err(err) => {
                        s.decode_error = Some(err.to_string());
                        break;
                    }
                };
                // The markers of lost events and waits are the recorder's notes, not the program's
                // events: counted apart (`record`'s summary and the chunks' headers count both).
                match kind {
                    EventKind::Lost => {
                        ts.lost += id as u64;
                        ts.markers += 1;
                    }
                    EventKind::Wait => {
                        ts.waited_ns += id as u64;
                        ts.markers += 1;
                    }
                    EventKind::Entry => ts.entries += 1,
                    EventKind::Exit | EventKind::TailExit => ts.exits += 1,
                    _ => {}
                }
                if !matches!(kind, EventKind::Lost | EventKind::Wait) {
                    ts.events += 1;
                }
            }
            s.events += ts.events;
            s.markers += ts.markers;
            s.lost += ts.lost;
            s.threads.push(ts);
        }
        if let Some(end) = trace.end() {
            // The writer counted every loss, those whose markers a flight ring dropped too.
            s.lost = s.lost.max(end.lost);
            s.dropped_events = end.dropped_events;
            s.dropped_chunks = end.dropped_chunks;
        }
        Ok(s)
    }

    /// The summary as one JSON object.
    pub fn to_json(&self) -> Value {
        json!({
            "cmdline": self.cmdline,
            "exe": self.exe,
            "pid": self.pid,
            "host": self.host,
            "boot_id": self.boot_id,
            "mode": self.mode,
            "min_call_ns": self.min_call_ns,
            "recorded_by": self.recorded_by,
            "problems": self.problems,
            "duration_ns": self.duration_ns,
            "processes": self.processes,
            "threads": self.threads.iter().map(|t| json!({
                "tid": t.tid, "name": t.name, "events": t.events, "entries": t.entries,
                "exits": t.exits, "markers": t.markers, "lost": t.lost, "waited_ns": t.waited_ns,
            })).collect::<Vec<_>>(),
            "functions": self.functions,
            "events": self.events,
            "markers": self.markers,
            "lost": self.lost,
            "dropped_events": self.dropped_events,
            "dropped_chunks": self.dropped_chunks,
            "file_bytes": self.file_bytes,
            "bytes_per_event": self.bytes_per_event(),
            "complete": self.complete,
            "ended_by": self.ended_by,
            "write_error": self.write_error,
            "truncated": self.truncated.as_ref().map(|(o, r)| json!({"offset": o, "reason": r})),
            "decode_error": self.decode_error,
        })
    }

    /// The human-readable form.
    pub fn to_text(&self) -> String {
        use std::fmt::Write;
        let mut o = String::new();
        let profile = self.recorded_by.contains(&"samples") && !self.has_functions;
        if self.pid == 0 && self.exe.is_empty() {
            // `profile -a`: no one program (its command line and executable were blank).
            let _ = writeln!(
                o,
                "recorded     : every process of the machine (profile -a)"
            );
            let _ = writeln!(o, "processes    : {} sampled", self.processes);
        } else {
            let _ = writeln!(o, "command line : {}", self.cmdline.join(" "));
            let _ = writeln!(o, "executable   : {} (pid {})", self.exe, self.pid);
        }
        if !self.host.is_empty() {
            let _ = writeln!(o, "host         : {} (boot {})", self.host, self.boot_id);
        }
        if profile {
            // What "drop" means for samples, said rather than a function recording's mode name.
            let _ = writeln!(
                o,
                "mode         : samples (the kernel drops what its buffers cannot hold: counted as lost)"
            );
        } else {
            let _ = writeln!(o, "mode         : {}", self.mode);
        }
        if self.min_call_ns > 0 {
            let _ = writeln!(
                o,
                "time filter  : calls shorter than {} left out (record -t)",
                fmt_ns(self.min_call_ns)
            );
        }
        let by = if self.recorded_by == ["samples"] {
            "samples (ferrotrace profile)".to_string()
        } else if self.recorded_by.is_empty() {
            "unknown".to_string()
        } else {
            self.recorded_by.join(", ")
        };
        let _ = writeln!(o, "recorded by  : {by}");
        let _ = writeln!(o, "duration     : {}", fmt_ns(self.duration_ns));
        let _ = writeln!(o, "ended by     : {}", self.ended_by);
        if let Some(e) = &self.write_error {
            let _ = writeln!(
                o,
                "write error  : {e} (what was recorded after it is counted as lost)"
            );
        }
        if self.has_functions {
            let _ = writeln!(o, "functions    : {} traced", self.functions);
        }
        let _ = write!(
            o,
            "events       : {} recorded, {} lost",
            self.events, self.lost
        );
        if self.dropped_events > 0 || self.dropped_chunks > 0 {
            let _ = write!(
                o,
                ", {} overwritten to keep the newest ({} mode{})",
                self.dropped_events,
                self.mode,
                match self.dropped_chunks {
                    0 => String::new(),
                    n => format!(": {n} chunks dropped"),
                }
            );
        }
        let _ = writeln!(o);
        let _ = writeln!(
            o,
            "file size    : {} bytes ({:.2} bytes per event)",
            self.file_bytes,
            self.bytes_per_event()
        );
        let _ = writeln!(o, "threads      : {}", self.threads.len());
        // Kernel threads' names run past 16 characters (kworker/u8:4-ext4-rsv-conversion).
        let w = self
            .threads
            .iter()
            .map(|t| t.name.chars().count())
            .max()
            .unwrap_or(0)
            .clamp(16, 40);
        let _ = writeln!(
            o,
            "  {:>8}  {:<w$} {:>12} {:>10} {:>10}",
            "TID", "NAME", "EVENTS", "LOST", "WAITED"
        );
        for t in &self.threads {
            let _ = writeln!(
                o,
                "  {:>8}  {:<w$} {:>12} {:>10} {:>10}",
                t.tid,
                t.name,
                t.events,
                t.lost,
                fmt_ns(t.waited_ns)
            );
        }
        if let Some((off, why)) = &self.truncated {
            let _ = writeln!(
                o,
                "truncated    : at byte {off} of {}: {why}; the summary covers the readable prefix",
                self.file_bytes
            );
        }
        for p in &self.problems {
            let _ = writeln!(o, "problem      : {p}");
        }
        if let Some(e) = &self.decode_error {
            let _ = writeln!(o, "decode error : {e}");
        }
        o
    }
}

/// `SIGKILL` for 9: the usual name of a signal, or its number.
pub fn signal_name(sig: u32) -> String {
    const NAMES: [&str; 32] = [
        "",
        "SIGHUP",
        "SIGINT",
        "SIGQUIT",
        "SIGILL",
        "SIGTRAP",
        "SIGABRT",
        "SIGBUS",
        "SIGFPE",
        "SIGKILL",
        "SIGUSR1",
        "SIGSEGV",
        "SIGUSR2",
        "SIGPIPE",
        "SIGALRM",
        "SIGTERM",
        "SIGSTKFLT",
        "SIGCHLD",
        "SIGCONT",
        "SIGSTOP",
        "SIGTSTP",
        "SIGTTIN",
        "SIGTTOU",
        "SIGURG",
        "SIGXCPU",
        "SIGXFSZ",
        "SIGVTALRM",
        "SIGPROF",
        "SIGWINCH",
        "SIGIO",
        "SIGPWR",
        "SIGSYS",
    ];
    match NAMES.get(sig as usize) {
        Some(n) if !n.is_empty() => n.to_string(),
        _ => format!("signal {sig}"),
    }
}

/// Formats nanoseconds like uftrace: `1.234 ms`.
pub fn fmt_ns(ns: u64) -> String {
    if ns < 1_000 {
        format!("{ns} ns")
    } else if ns < 1_000_000 {
        format!("{:.3} us", ns as f64 / 1e3)
    } else if ns < 1_000_000_000 {
        format!("{:.3} ms", ns as f64 / 1e6)
    } else {
        format!("{:.3} s", ns as f64 / 1e9)
    }
}
