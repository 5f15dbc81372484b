//! Live printing (`ferrotrace live`): events as text, while the program runs.
//!
//! Active when `FERROTRACE_LIVE_FD` names a file descriptor (the write end of a pipe that `ferrotrace
//! live` reads and copies to its standard output). Everything happens on the collector thread:
//!
//! * every collector round (≤ 5 ms apart) it reads, without taking them, the records each thread has
//!   written so far into its current chunk (a chunk is only ever freed by the collector, and records
//!   below a thread's cursor are final, so this needs no cooperation from the traced thread); full chunks
//!   handed over later are printed from where the peek stopped;
//! * lines are `SECONDS TID THREAD-NAME` then the event: a tracepoint as `crate::name(arg=value, …)` or its
//!   format, a function entry as `name() {` and exit as `} /* name */`, indented by call depth;
//! * the descriptor is non-blocking and the text waits in a bounded buffer: when the reader is slow and
//!   the buffer full, events are counted instead of printed and a `lost N events` line says so as soon as
//!   there is room again. The traced threads never wait for the terminal.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Mutex, OnceLock};

use ferrotrace_core::clock::TscConverter;
use ferrotrace_core::record::{EventKind, Record};

use crate::runtime::Runtime;

/// Environment variable with the descriptor to print to.
pub const LIVE_FD_VAR: &str = "FERROTRACE_LIVE_FD";
/// Text waiting for the reader, at most.
const MAX_PENDING: usize = 256 << 10;

static FD: AtomicI32 = AtomicI32::new(-1);
static FUNCTIONS: OnceLock<Vec<String>> = OnceLock::new();
static STATE: Mutex<Option<State>> = Mutex::new(None);

struct Tp {
    name: &'static str,
    args: &'static str,
    format: &'static str,
}

struct ThreadView {
    /// Records already printed of chunks peeked at but not handed to the collector yet, by sequence.
    printed: HashMap<u32, usize>,
    depth: usize,
    name: String,
}

struct State {
    clock: TscConverter,
    start_ns: u64,
    tracepoints: HashMap<u32, Tp>,
    threads: HashMap<u32, ThreadView>,
    pending: Vec<u8>,
    lost: u64,
    line: String,
}

/// Reads `FERROTRACE_LIVE_FD` at start-up (from the runtime's constructor, before `main`): marks the
/// descriptor close-on-exec and non-blocking, forgets the variable and sets `FERROTRACE_RUNTIME=off`, so
/// that programs this one starts neither write into the same pipe nor trace at all.
pub fn init_from_env() {
    let Some(fd) = std::env::var(LIVE_FD_VAR)
        .ok()
        .and_then(|v| v.parse::<i32>().ok())
    else {
        return;
    };
    // SAFETY: fcntl on a descriptor number; failure means it is not open, and live mode stays off.
    unsafe {
        if libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) != 0 {
            return;
        }
        let fl = libc::fcntl(fd, libc::F_GETFL);
        libc::fcntl(fd, libc::F_SETFL, fl | libc::O_NONBLOCK);
        let name = std::ffi::CString::new(LIVE_FD_VAR).unwrap_or_default();
        libc::unsetenv(name.as_ptr());
        // Only this process prints: the programs it starts run untraced, rather than tracing into
        // files nobody reads.
        let runtime = std::ffi::CString::new(crate::config::RUNTIME_VAR).unwrap_or_default();
        libc::setenv(runtime.as_ptr(), c"off".as_ptr(), 1);
    }
    FD.store(fd, Ordering::Relaxed);
}

/// True when events are printed live.
pub fn active() -> bool {
    FD.load(Ordering::Relaxed) >= 0
}

/// Function names by id (index = id - 1), demangled; set once at start-up.
pub fn set_functions(names: Vec<String>) {
    let _ = FUNCTIONS.set(names);
}

fn thread_name(tid: u32) -> String {
    std::fs::read_to_string(format!("/proc/self/task/{tid}/comm"))
        .map(|s| s.trim_end().to_string())
        .unwrap_or_else(|_| "?".into())
}

impl State {
    fn new() -> State {
        let (a, _) = crate::clock::calibration_pair();
        std::thread::sleep(std::time::Duration::from_millis(2));
        let (b, _) = crate::clock::calibration_pair();
        let tracepoints = crate::tracepoint::all()
            .into_iter()
            .map(|t| {
                (
                    t.header.id.load(Ordering::Relaxed),
                    Tp {
                        name: t.name,
                        args: t.args,
                        format: t.format,
                    },
                )
            })
            .collect();
        State {
            clock: TscConverter::new(a, b),
            start_ns: a.mono_ns,
            tracepoints,
            threads: HashMap::new(),
            pending: Vec::new(),
            lost: 0,
            line: String::new(),
        }
    }

    fn view(&mut self, tid: u32) -> &mut ThreadView {
        self.threads.entry(tid).or_insert_with(|| ThreadView {
            printed: HashMap::new(),
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
        if matches!(kind, EventKind::Wait | EventKind::Alloc | EventKind::Free) {
            return;
        }
        if self.pending.len() >= MAX_PENDING {
            self.lost += 1;
            return;
        }
        if self.lost > 0 {
            let n = std::mem::take(&mut self.lost);
            self.pending
                .extend_from_slice(format!("lost {n} events\n").as_bytes());
        }
        let secs = self.clock.to_ns(r.tsc).saturating_sub(self.start_ns) as f64 / 1e9;
        self.view(tid);
        let Some(th) = self.threads.get_mut(&tid) else {
            return;
        };
        let fname = |id: u32| {
            FUNCTIONS
                .get()
                .and_then(|f| f.get(id.wrapping_sub(1) as usize))
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
        let _ = write!(
            line,
            "{secs:12.6} {tid:>7} {:<15} {:indent$}",
            th.name,
            "",
            indent = depth * 2
        );
        match kind {
            EventKind::Entry => {
                th.depth += 1;
                let _ = write!(line, "{}() {{", fname(r.id()));
            }
            EventKind::Exit | EventKind::TailExit => {
                let _ = write!(line, "}} /* {} */", fname(r.id()));
            }
            EventKind::Tracepoint => match self.tracepoints.get(&r.id()) {
                Some(tp) => {
                    let _ = ferrotrace_core::tracepoint::write_event(
                        line, tp.name, tp.args, tp.format, payload,
                    );
                }
                None => {
                    let _ = write!(line, "tracepoint#{}", r.id());
                }
            },
            EventKind::Lost => {
                let _ = write!(line, "lost {} events (trace buffers full)", r.id());
            }
            _ => {}
        }
        line.push('\n');
        self.pending.extend_from_slice(line.as_bytes());
    }

    /// Writes what the descriptor takes without blocking.
    fn drain(&mut self, fd: i32) {
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
}

fn with_state(f: impl FnOnce(&mut State, i32)) {
    let fd = FD.load(Ordering::Relaxed);
    if fd < 0 {
        return;
    }
    let mut g = STATE.lock().unwrap_or_else(|e| e.into_inner());
    let st = g.get_or_insert_with(State::new);
    f(st, fd);
}

/// Collector hook, every round: prints what each thread has written since the last round.
pub fn tick(rt: &Runtime) {
    with_state(|st, fd| {
        for (tid, seq, index, len) in crate::thread::current_chunks(rt) {
            let view = st.view(tid);
            // An earlier chunk of this thread is still on its way to the collector: print that one first
            // (on_chunk), this one next round, so that lines stay in order.
            if view.printed.keys().any(|&s| s != seq) {
                continue;
            }
            let from = view.printed.get(&seq).copied().unwrap_or(0);
            if len > from {
                // SAFETY: only the collector (this thread) frees chunks, and records below a thread's
                // cursor are never rewritten: the range stays valid and final while we read it.
                let records = unsafe { rt.pool.records(index, len) };
                st.print(tid, &records[from..]);
                st.view(tid).printed.insert(seq, len);
            }
        }
        st.drain(fd);
    });
}

/// Collector hook: a thread handed over a full chunk; prints the part not printed yet.
pub fn on_chunk(tid: u32, seq: u32, records: &[Record]) {
    with_state(|st, _| {
        let from = st.view(tid).printed.remove(&seq).unwrap_or(0);
        st.print(tid, &records[from.min(records.len())..]);
    });
}

/// Collector hook at the end: writes everything still pending, waiting for the reader (at most 2 s).
pub fn finish() {
    with_state(|st, fd| {
        if st.lost > 0 {
            let n = std::mem::take(&mut st.lost);
            st.pending
                .extend_from_slice(format!("lost {n} events\n").as_bytes());
        }
        let start = std::time::Instant::now();
        while !st.pending.is_empty() && start.elapsed() < std::time::Duration::from_secs(2) {
            st.drain(fd);
            if !st.pending.is_empty() {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
        }
    });
}
