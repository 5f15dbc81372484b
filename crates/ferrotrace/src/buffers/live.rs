//! Live printing (`ferrotrace live`): events as text, while the program runs.
//!
//! Active when `FERROTRACE_LIVE_FD` names a file descriptor (the write end of a pipe that `ferrotrace
//! live` reads and copies to its standard output). Everything happens on the collector thread:
//!
//! * every collector round (≤ 5 ms apart) it reads, without taking them, the records each thread has
//!   written so far into its current chunk (a chunk is only ever freed by the collector, and records
//!   below a thread's cursor are final, so this needs no cooperation from the traced thread); full chunks
//!   handed over later are printed from where the peek stopped;
//! * a line is `TID THREAD-NAME CPU SECONDS` then the event, as OSv's strace prints them: a tracepoint
//!   as `crate::name(arg=value, …)` or its format, a function entry as `name() {` and exit as
//!   `} /* name */`, indented by call depth. The CPU is the one the event happened on, recorded with it
//!   (`?` where the C library does not say: see `hot::init_cpu_offset`);
//! * the descriptor is non-blocking and the text waits in a bounded buffer: when the reader is slow and
//!   the buffer full, events are counted instead of printed. The traced threads never wait for the
//!   terminal. Every event is printed or counted: what the reader could not take, what the program's
//!   trace buffers could not hold (drop mode), and what was still waiting when the program ended are
//!   said on standard error (a copy of the descriptor the program started with), never in the output.

use std::collections::HashMap;
use std::fmt::Write as _;

use ferrotrace_core::clock::TscConverter;
use ferrotrace_core::codec::FieldReader;
use ferrotrace_core::env;
use ferrotrace_core::format::ChunkKind;
use ferrotrace_core::record::{EventKind, Record};
use ferrotrace_core::schema::{self, CallsiteKind, Count, Payload};

use crate::buffers::hot::UNKNOWN_CPU;
use crate::buffers::pool::Pool;

/// Text waiting for the reader, at most.
const MAX_PENDING: usize = 256 << 10;

/// Where and what to print: set up at start (`runtime::Runtime::live`), read by the collector.
pub struct Output {
    /// The descriptor to print to (non-blocking).
    fd: i32,
    /// Where losses are said: the program's standard error as it was at start (the program may
    /// redirect its own later).
    err_fd: i32,
    /// Function names by id (index = id - 1), demangled.
    functions: Vec<String>,
    /// Tracepoints by id.
    tracepoints: HashMap<u32, Tp>,
}

/// A tracepoint's name, argument list and format, to print its events.
pub struct Tp {
    /// `crate::name`.
    pub name: &'static str,
    /// `name:type,…`.
    pub args: &'static str,
    /// Display format, empty if none.
    pub format: &'static str,
}

struct ThreadView {
    /// Records already printed of the chunk peeked at (at most one: the thread's current chunk) but not
    /// handed to the collector yet, by sequence.
    printed: HashMap<u32, usize>,
    /// Sequence number of the thread's next chunk to print: one before it may still wait in the full
    /// queue, and is printed first.
    next_seq: u32,
    depth: usize,
    name: String,
}

/// The printer, on the collector thread: what it printed of each thread, and the text waiting for the
/// reader.
pub struct Printer {
    out: &'static Output,
    clock: TscConverter,
    start_ns: u64,
    threads: HashMap<u32, ThreadView>,
    pending: Vec<u8>,
    /// Events not printed because the reader did not keep up, not said yet.
    not_printed: u64,
    /// Events the program's trace buffers could not hold (drop mode), not said yet.
    lost: u64,
    line: String,
    /// Callsites described while the program runs (`tracing` spans by function id, their fields and
    /// events by tracepoint id), from the Callsites chunks the collector writes ([`Printer::describe`]).
    spans: HashMap<u32, String>,
    events: HashMap<u32, Callsite>,
}

/// What prints a `tracing` event or span's fields: the callsite's level, name and field list, and
/// its message when recorded once (a CallsiteMessages chunk: its field's place and text).
struct Callsite {
    level: &'static str,
    name: String,
    args: String,
    message: Option<(u32, String)>,
}

impl Output {
    /// Reads `FERROTRACE_LIVE_FD` at start-up (from the runtime's constructor, before `main`): `None`
    /// unless it names an open descriptor. Marks the descriptor close-on-exec and non-blocking, forgets
    /// the variable and sets `FERROTRACE_RUNTIME=off`, so that programs this one starts neither write
    /// into the same pipe nor trace at all. `functions` (names by id) and `tracepoints` (by id) are
    /// asked for only then.
    pub fn from_env(
        functions: impl FnOnce() -> Vec<String>,
        tracepoints: impl FnOnce() -> HashMap<u32, Tp>,
    ) -> Option<Output> {
        let fd = std::env::var(env::LIVE_FD).ok()?.parse::<i32>().ok()?;
        let mut err_fd = 2;
        // SAFETY: fcntl on a descriptor number; failure means it is not open, and live mode stays off.
        unsafe {
            if libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) != 0 {
                return None;
            }
            let err = libc::fcntl(2, libc::F_DUPFD_CLOEXEC, 3);
            if err >= 0 {
                err_fd = err;
            }
            let fl = libc::fcntl(fd, libc::F_GETFL);
            libc::fcntl(fd, libc::F_SETFL, fl | libc::O_NONBLOCK);
        }
        crate::lifecycle::config::set_env(env::LIVE_FD, None);
        // Only this process prints: the programs it starts run untraced, rather than tracing into
        // files nobody reads.
        crate::lifecycle::config::set_env(env::RUNTIME, Some(env::RUNTIME_OFF));
        Some(Output::to_fd(fd, err_fd, functions(), tracepoints()))
    }

    /// Closes the descriptor, once nothing prints any more (an attached runtime, retired: the process
    /// keeps no descriptor of ours).
    pub fn close(&self) {
        // SAFETY: our descriptor; the printer, on the collector thread that calls this, is done.
        unsafe { libc::close(self.fd) };
    }

    /// Prints to `fd` (non-blocking), saying losses on `err_fd` (-1: nowhere): for an attached runtime
    /// (`live -p`), whose descriptor is a FIFO it opened itself.
    pub fn to_fd(
        fd: i32,
        err_fd: i32,
        functions: Vec<String>,
        tracepoints: HashMap<u32, Tp>,
    ) -> Output {
        Output {
            fd,
            err_fd,
            functions,
            tracepoints,
        }
    }
}

/// The thread's name, one line of printable text.
fn thread_name(tid: u32) -> String {
    std::fs::read_to_string(format!("/proc/self/task/{tid}/comm"))
        .map(|s| {
            s.trim_end_matches('\n')
                .chars()
                .map(|c| if c.is_control() { '?' } else { c })
                .collect()
        })
        .unwrap_or_else(|_| "?".into())
}

impl Printer {
    /// A printer to `out` (on the collector thread, where it calibrates its clock: 2 ms).
    pub fn new(out: &'static Output) -> Printer {
        let (a, clock) = crate::buffers::clock::calibrate_now();
        Printer {
            out,
            clock,
            start_ns: a.mono_ns,
            threads: HashMap::new(),
            pending: Vec::new(),
            not_printed: 0,
            lost: 0,
            line: String::new(),
            spans: HashMap::new(),
            events: HashMap::new(),
        }
    }

    /// Collector hook: a chunk the collector writes, which describes what later events refer to; the
    /// printer learns the names of Callsites chunks from it, and the messages of CallsiteMessages
    /// chunks.
    pub fn describe(&mut self, kind: ChunkKind, payload: &[u8]) {
        let mut f = FieldReader::new(payload);
        let Ok(Count(n)) = Count::decode(&mut f) else {
            return;
        };
        if kind == ChunkKind::CallsiteMessages {
            for _ in 0..n {
                let Ok(m) = schema::CallsiteMessage::decode(&mut f) else {
                    return;
                };
                if let Some(c) = self.events.get_mut(&m.tracepoint_id) {
                    c.message = Some((m.field, m.text.to_string()));
                }
            }
            return;
        }
        if kind != ChunkKind::Callsites {
            return;
        }
        for _ in 0..n {
            let Ok(c) = schema::Callsite::decode(&mut f) else {
                return;
            };
            if c.site.kind == CallsiteKind::Span {
                self.spans.insert(c.function_id, c.site.name.to_string());
            }
            let args: Vec<String> = c
                .site
                .fields
                .split(',')
                .filter(|f| !f.is_empty())
                .map(|f| format!("{f}:value"))
                .collect();
            let callsite = Callsite {
                level: schema::LEVELS
                    .get(c.site.level as usize)
                    .copied()
                    .unwrap_or("?"),
                name: c.site.name.to_string(),
                args: args.join(","),
                message: None,
            };
            self.events.insert(c.tracepoint_id, callsite);
        }
    }

    fn view(&mut self, tid: u32) -> &mut ThreadView {
        self.threads.entry(tid).or_insert_with(|| ThreadView {
            printed: HashMap::new(),
            next_seq: 0,
            depth: 0,
            name: thread_name(tid),
        })
    }

    fn print(&mut self, tid: u32, records: &[Record]) {
        let mut i = 0;
        while i < records.len() {
            let r = records[i];
            let slots = r.payload_slots();
            let end = (i + 1 + slots).min(records.len());
            // SAFETY: Record is 16 bytes of plain data.
            let payload = unsafe {
                core::slice::from_raw_parts(
                    records[i + 1..end].as_ptr() as *const u8,
                    (end - i - 1) * 16,
                )
            };
            self.event(tid, r, payload);
            i = end;
        }
    }

    fn event(&mut self, tid: u32, r: Record, payload: &[u8]) {
        let Some(kind) = r.kind() else { return };
        match kind {
            EventKind::Lost => {
                self.lost += r.id() as u64;
                return;
            }
            EventKind::Entry | EventKind::Exit | EventKind::TailExit | EventKind::Tracepoint => {}
            _ => return,
        }
        if self.pending.len() >= MAX_PENDING {
            self.not_printed += 1;
            return;
        }
        let secs = self.clock.to_ns(r.tsc).saturating_sub(self.start_ns) as f64 / 1e9;
        self.view(tid);
        let Some(th) = self.threads.get_mut(&tid) else {
            return;
        };
        let functions = &self.out.functions;
        let spans = &self.spans;
        let fname = |id: u32| {
            functions
                .get(id.wrapping_sub(1) as usize)
                .or_else(|| spans.get(&id))
                .map_or_else(|| format!("fn#{id}"), |s| s.clone())
        };
        let line = &mut self.line;
        line.clear();
        let depth = match kind {
            EventKind::Exit | EventKind::TailExit => {
                th.depth = th.depth.saturating_sub(1);
                th.depth
            }
            _ => th.depth,
        };
        let _ = write!(line, "{tid:>7} {:<15} ", th.name);
        match r.cpu() {
            cpu if cpu >= UNKNOWN_CPU => line.push_str("  ?"),
            cpu => {
                let _ = write!(line, "{cpu:>3}");
            }
        }
        let _ = write!(line, " {secs:12.6} {:indent$}", "", indent = depth * 2);
        match kind {
            EventKind::Entry => {
                th.depth += 1;
                let _ = write!(line, "{}() {{", fname(r.id()));
            }
            EventKind::Exit | EventKind::TailExit => {
                let _ = write!(line, "}} /* {} */", fname(r.id()));
            }
            _ => match (self.out.tracepoints.get(&r.id()), self.events.get(&r.id())) {
                (Some(tp), _) => {
                    let _ = ferrotrace_core::tracepoint::write_event(
                        line, tp.name, tp.args, tp.format, payload,
                    );
                }
                (None, Some(c)) => {
                    let _ = write!(line, "{} ", c.level);
                    let message = c.message.as_ref().map(|(i, t)| (*i, t.as_str()));
                    let _ = ferrotrace_core::tracepoint::write_call_with_message(
                        line, &c.name, &c.args, message, payload,
                    );
                }
                (None, None) => {
                    let _ = write!(line, "tracepoint#{}", r.id());
                }
            },
        }
        line.push('\n');
        self.pending.extend_from_slice(line.as_bytes());
    }

    /// Says on standard error how many events were not printed since the last time, once the reader
    /// takes events again (or at the end: `ending`).
    fn say_losses(&mut self, ending: bool) {
        let err_fd = self.out.err_fd;
        let say = |n: u64, why: &str| {
            let text = format!("ferrotrace: {n} events {why}\n");
            // SAFETY: writing our own buffer to a descriptor.
            unsafe { libc::write(err_fd, text.as_ptr() as *const libc::c_void, text.len()) };
        };
        if self.lost > 0 {
            say(
                std::mem::take(&mut self.lost),
                "lost: the program's trace buffers were full",
            );
        }
        if self.not_printed > 0 && (ending || self.pending.len() < MAX_PENDING) {
            say(
                std::mem::take(&mut self.not_printed),
                "not printed: the output did not keep up",
            );
        }
    }

    /// Writes what the descriptor takes without blocking.
    fn drain(&mut self) {
        let fd = self.out.fd;
        while !self.pending.is_empty() {
            // SAFETY: writing our own buffer to a descriptor.
            let n = unsafe {
                libc::write(
                    fd,
                    self.pending.as_ptr() as *const libc::c_void,
                    self.pending.len(),
                )
            };
            if n <= 0 {
                return;
            }
            self.pending.drain(..n as usize);
        }
    }

    /// Collector hook, every round: prints what each thread has written since the last round, from
    /// `current` (`(tid, seq, chunk index, records written)` of each thread's current chunk, which only
    /// the collector frees).
    pub fn tick(&mut self, pool: &Pool, current: Vec<(u32, u32, u32, usize)>) {
        for (tid, seq, index, len) in current {
            let view = self.view(tid);
            // An earlier chunk of this thread is still on its way to the collector: print that one first
            // (on_chunk), this one in a later round, so that lines stay in order.
            if seq != view.next_seq {
                continue;
            }
            let from = view.printed.get(&seq).copied().unwrap_or(0);
            if len > from {
                // SAFETY: only the collector (this thread) frees chunks, and records below a thread's
                // cursor are never rewritten: the range stays valid and final while we read it.
                let records = unsafe { pool.records(index, len) };
                self.print(tid, &records[from..]);
                self.view(tid).printed.insert(seq, len);
            }
        }
        self.drain();
        self.say_losses(false);
    }

    /// Collector hook: a thread handed over a full chunk; prints the part not printed yet.
    pub fn on_chunk(&mut self, tid: u32, seq: u32, records: &[Record]) {
        let view = self.view(tid);
        let from = view.printed.remove(&seq).unwrap_or(0);
        view.next_seq = seq.wrapping_add(1);
        self.print(tid, &records[from.min(records.len())..]);
    }

    /// Collector hook: a thread lost `count` events and never got a chunk to say so in.
    pub fn lost(&mut self, count: u64) {
        self.lost += count;
    }

    /// Collector hook at the end: writes everything still pending, waiting for the reader (at most 2 s),
    /// and says what could not be printed.
    pub fn finish(&mut self) {
        let start = std::time::Instant::now();
        while !self.pending.is_empty() && start.elapsed() < std::time::Duration::from_secs(2) {
            self.drain();
            if !self.pending.is_empty() {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
        }
        // One line per event: what the reader did not take in time is counted, not dropped silently.
        let unsent = self.pending.iter().filter(|&&b| b == b'\n').count() as u64;
        self.not_printed += unsent;
        self.pending.clear();
        self.say_losses(true);
    }
}
