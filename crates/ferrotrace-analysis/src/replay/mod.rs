//! `ferrotrace replay`: the call tree in time order, like `uftrace replay`.
//!
//! ```text
//! # DURATION     TID     FUNCTION
//!             [  4242] | calltree::main() {
//!             [  4242] |   calltree::a() {
//!    0.130 us [  4242] |     calltree::b();
//!    1.020 us [  4242] |   } /* calltree::a */
//! ```
//!
//! Threads are merged in time order; indentation is each thread's own call depth. A function whose
//! exit is the next event of its thread is printed on one line with its duration. Frames unwound by a
//! panic close with `/* NAME: unwound */`, functions already running when tracing began open with
//! `/* already running when tracing began */`, frames still open at the end close with
//! `/* NAME: still running at end of trace */`; lost events, waits for buffers, tracepoints and
//! allocation events appear in place as comments.
//!
//! Filters: `-F` shows only the subtrees of matching functions (depth counted from the match), `-N`
//! hides matching functions and their subtrees, `-D` limits depth, `-t` hides frames shorter than a
//! duration, `--tid` selects threads and `--time-range` selects frames entered (and other events
//! happening) in a window.
//!
//! Without `-F`, `-N`, `-D`, `-t` or `--time-range` every event is shown and a fast path (`plain`)
//! decides leaf calls by peeking at each thread's next event: no look-ahead window at all.
//!
//! Memory: the call stacks, plus, only for leaf-call folding and `-t`, a look-ahead window of events:
//! for `-t T` the events of at most `T` nanoseconds of trace (capped at [`MAX_LOOKAHEAD`] events, past
//! which a pending frame is shown without knowing its duration).

use std::collections::{HashMap, VecDeque};
use std::io::{self, Write};

use ferrotrace_core::units;
use regex_lite::Regex;

use crate::callstack::{initial_stacks, CallStack, EndKind, StackEvent};
use crate::decimal::push_u64;
use crate::names::Names;
use crate::progress::Progress;
use crate::reader::{EventKind, EventRef, ReadError, Trace};

mod plain;
pub mod samples;
pub mod tree;

/// Most events held back to fold leaf calls or apply `-t`.
pub const MAX_LOOKAHEAD: usize = 1 << 20;

/// Which columns to print, in this order: time, elapsed, delta, duration, tid.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fields {
    /// Absolute CLOCK_MONOTONIC timestamp (`SECONDS.NANOSECONDS`).
    pub time: bool,
    /// Time since the trace's first event.
    pub elapsed: bool,
    /// Time since the previous line of the same thread.
    pub delta: bool,
    /// Duration of the function.
    pub duration: bool,
    /// Thread id.
    pub tid: bool,
}

impl Default for Fields {
    fn default() -> Fields {
        Fields {
            time: false,
            elapsed: false,
            delta: false,
            duration: true,
            tid: true,
        }
    }
}

impl Fields {
    /// Parses a comma-separated list of `duration,tid,time,delta,elapsed`; a leading `+` adds to the
    /// defaults; `none` clears all.
    pub fn parse(s: &str) -> Result<Fields, OptionError> {
        let (mut f, list) = match s.strip_prefix('+') {
            Some(rest) => (Fields::default(), rest),
            None => (
                Fields {
                    time: false,
                    elapsed: false,
                    delta: false,
                    duration: false,
                    tid: false,
                },
                s,
            ),
        };
        for name in list.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            match name {
                "duration" | "dur" => f.duration = true,
                "tid" => f.tid = true,
                "time" => f.time = true,
                "delta" => f.delta = true,
                "elapsed" => f.elapsed = true,
                "none" => {}
                other => return Err(OptionError::UnknownField(other.to_string())),
            }
        }
        Ok(f)
    }
}

/// What to show.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// `-F`: only subtrees of functions whose name matches.
    pub filter: Option<Regex>,
    /// `-N`: hide functions whose name matches, with their subtrees.
    pub hide: Option<Regex>,
    /// `-D`: show frames up to this depth (1 = only the outermost).
    pub max_depth: Option<usize>,
    /// `-t`: hide frames shorter than this (ns).
    pub min_duration_ns: u64,
    /// `--tid`: only these threads.
    pub tids: Option<Vec<u32>>,
    /// `--time-range`: `[start, end]` in CLOCK_MONOTONIC ns.
    pub time_range: Option<(u64, u64)>,
    /// Columns.
    pub fields: Fields,
    /// `file:line` per function id (`--srcline`).
    pub srclines: HashMap<u32, String>,
    /// The trace's samples, shown in place (`record --sample`); without them a Sample event shows
    /// nothing.
    pub samples: Option<samples::SampledStacks>,
}

/// A replay option that could not be parsed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OptionError {
    /// `-f` named a field that does not exist.
    UnknownField(String),
    /// `--time-range` is not `START~END`.
    NoTilde(String),
    /// One side of `--time-range` is not a time.
    BadTime {
        /// The whole range.
        range: String,
        /// The side that is wrong.
        side: String,
    },
    /// `--time-range` ends before it starts.
    Reversed(String),
}

impl std::fmt::Display for OptionError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OptionError::UnknownField(x) => {
                write!(
                    f,
                    "unknown field {x:?}: use duration, tid, time, delta, elapsed"
                )
            }
            OptionError::NoTilde(r) => write!(f, "time range {r:?} needs the form START~END"),
            OptionError::BadTime { range, side } => write!(
                f,
                "bad time {side:?} in range {range:?} (an elapsed time with a unit: ns, us, ms, s, m, h; \
                 or a SECONDS.NANOSECONDS timestamp)"
            ),
            // Nothing can lie in a reversed range: an empty replay with exit 0 would say "nothing
            // happened".
            OptionError::Reversed(r) => write!(
                f,
                "time range {r:?} ends before it starts: give START~END with START <= END"
            ),
        }
    }
}

impl std::error::Error for OptionError {}

/// Parses a `--time-range` of `A~B` (either side may be empty). Each side is an elapsed time since
/// the trace's first event with a unit (`1.5ms`, `200us`, `3s`, `10ns`), or an absolute timestamp
/// as printed by `-f time` (`SECONDS.NANOSECONDS`), or absolute nanoseconds (an integer).
pub fn parse_time_range(s: &str, trace_start_ns: u64) -> Result<(u64, u64), OptionError> {
    let (a, b) = s
        .split_once('~')
        .ok_or_else(|| OptionError::NoTilde(s.to_string()))?;
    let one = |x: &str, default: u64| -> Result<u64, OptionError> {
        let x = x.trim();
        if x.is_empty() {
            return Ok(default);
        }
        let bad = || OptionError::BadTime {
            range: s.to_string(),
            side: x.to_string(),
        };
        if x.ends_with(char::is_alphabetic) {
            return units::parse_duration(x, None)
                .map(|ns| trace_start_ns.saturating_add(ns))
                .map_err(|_| bad());
        }
        if let Some((sec, frac)) = x.split_once('.') {
            let sec: u64 = sec.parse().map_err(|_| bad())?;
            let mut frac = frac.to_string();
            frac.truncate(9);
            while frac.len() < 9 {
                frac.push('0');
            }
            let ns: u64 = frac.parse().map_err(|_| bad())?;
            return Ok(sec.saturating_mul(1_000_000_000).saturating_add(ns));
        }
        x.parse().map_err(|_| bad())
    };
    let (start, end) = (one(a, 0)?, one(b, u64::MAX)?);
    if start > end {
        return Err(OptionError::Reversed(s.to_string()));
    }
    Ok((start, end))
}

/// Formats a duration in uftrace's 10-character style (`   1.234 us`).
pub fn push_duration(out: &mut Vec<u8>, ns: u64) {
    if ns == 0 {
        // uftrace prints no number for a zero duration (`%7s %2s`): a leaf call shorter than the
        // clock's resolution, common on CPUs where two TSC reads can land in one nanosecond.
        out.extend_from_slice(b"          ");
        return;
    }
    let (div, unit) = if ns < 1_000_000 {
        (1_000u64, b" us")
    } else if ns < 1_000_000_000 {
        (1_000_000, b" ms")
    } else {
        (1_000_000_000, b"  s")
    };
    let whole = ns / div;
    let frac = (ns % div) * 1000 / div;
    let mut tmp = [0u8; 24];
    let mut n = tmp.len();
    for (i, d) in [frac % 10, frac / 10 % 10, frac / 100].iter().enumerate() {
        n -= 1;
        tmp[n] = b'0' + *d as u8;
        if i == 2 {
            n -= 1;
            tmp[n] = b'.';
        }
    }
    let mut w = whole;
    loop {
        n -= 1;
        tmp[n] = b'0' + (w % 10) as u8;
        w /= 10;
        if w == 0 {
            break;
        }
    }
    let digits = &tmp[n..];
    for _ in digits.len()..7 {
        out.push(b' ');
    }
    out.extend_from_slice(digits);
    if unit == b"  s" {
        out.extend_from_slice(b"  s");
    } else {
        out.extend_from_slice(unit);
    }
}

#[derive(Clone, Debug)]
enum Body {
    Enter {
        id: u32,
        entered: bool,
        /// Known once the frame closed while this item was still pending.
        dur: Option<u64>,
        /// Its Leave is the next item of the thread: print on one line.
        leaf: bool,
        /// Its arguments, shown (`record -A`).
        args: Option<Box<str>>,
        /// Its return value, shown, once its Leave was folded into it (`record -R`).
        retval: Option<Box<str>>,
    },
    Leave {
        id: u32,
        dur: u64,
        how: EndKind,
        /// Folded into its Enter line.
        folded: bool,
        /// Its return value, shown (`record -R`).
        retval: Option<Box<str>>,
    },
    Orphan {
        id: u32,
    },
    Note(String),
}

#[derive(Clone, Debug)]
struct Item {
    tid: u32,
    ts: u64,
    depth: usize,
    body: Body,
}

/// Per-thread filter state.
#[derive(Default)]
struct ThreadState {
    stack: CallStack,
    /// Parallel to the call stack: deque position and display depth of each frame's Enter item, if
    /// shown.
    shown: Vec<Option<(u64, usize)>>,
    /// Depth of the outermost `-F` match in progress.
    filter_base: Option<usize>,
    /// Depth of the outermost `-N` match in progress.
    hide_depth: Option<usize>,
    /// Deque position of this thread's last item.
    last_pos: Option<u64>,
    /// Timestamp of the last printed line (for `delta`).
    last_printed: Option<u64>,
}

/// Match results of `-F`/`-N` per function id, computed once.
struct FnFlags {
    cache: HashMap<u32, (bool, bool)>,
}

impl Options {
    /// True when no option hides anything (`-F`, `-N`, `-D`, `-t`, `--time-range`): every event shows.
    fn shows_everything(&self) -> bool {
        self.filter.is_none()
            && self.hide.is_none()
            && self.max_depth.is_none()
            && self.min_duration_ns == 0
            && self.time_range.is_none()
    }
}

/// The values a function event carries (`record -A`, `-R`) as replay shows them (`"/etc/passwd",
/// 0`), or `None` when it carries none. A `/p` value is shown as `&NAME` when it is the address of a
/// traced function.
pub(crate) fn shown_values(trace: &Trace, e: &EventRef<'_>) -> Option<Box<str>> {
    if e.payload.is_empty() {
        return None;
    }
    let specs = trace.arg_specs(e.id)?;
    let spec = match e.kind {
        EventKind::Entry => &specs.args,
        _ => &specs.retval,
    };
    let mut text = String::new();
    let mut symbol = |address: u64, out: &mut dyn std::fmt::Write| {
        let f = trace.functions().values().find(|f| f.addr == address);
        f.is_some_and(|f| out.write_str(f.name()).is_ok())
    };
    spec.show(e.payload, &mut text, &mut symbol).ok()?;
    Some(text.into_boxed_str())
}

/// Writes the replay of `trace` to `out`. Returns the read errors met (each ended one thread's events
/// early); I/O errors on `out` are returned as `Err`. `out` is flushed every 65,536 events, so output
/// shows as it is made and a writer can stop the replay by failing a flush.
pub fn replay(
    trace: &Trace,
    opts: &Options,
    out: &mut dyn Write,
    progress: &mut Progress,
) -> Result<Vec<String>, io::Error> {
    replay_with(trace, opts, out, progress, opts.shows_everything())
}

/// [`replay`] through the general replayer (with its look-ahead queue) even without filters: the
/// reference the unfiltered fast path is tested against. Not for other uses.
#[doc(hidden)]
pub fn replay_reference(
    trace: &Trace,
    opts: &Options,
    out: &mut dyn Write,
) -> Result<Vec<String>, io::Error> {
    replay_with(
        trace,
        opts,
        out,
        &mut Progress::with_enabled("replay", 0, false),
        false,
    )
}

fn header_line(f: Fields) -> String {
    let mut h = String::from("#");
    if f.time {
        h.push_str("     TIMESTAMP      ");
    }
    if f.elapsed {
        h.push_str("  ELAPSED  ");
    }
    if f.delta {
        h.push_str("   DELTA   ");
    }
    if f.duration {
        h.push_str(" DURATION  ");
    }
    if f.tid {
        h.push_str("   TID    ");
    }
    h.push_str(" FUNCTION\n");
    h
}

fn replay_with(
    trace: &Trace,
    opts: &Options,
    out: &mut dyn Write,
    progress: &mut Progress,
    plain: bool,
) -> Result<Vec<String>, io::Error> {
    let names = Names::of(trace);
    let mut errors = Vec::new();
    let initial = match initial_stacks(trace) {
        Ok(i) => i,
        Err(e) => {
            errors.push(e.to_string());
            HashMap::new()
        }
    };
    let tids: Vec<u32> = trace
        .threads()
        .keys()
        .copied()
        .filter(|t| opts.tids.as_ref().is_none_or(|v| v.contains(t)))
        .collect();
    if plain {
        out.write_all(header_line(opts.fields).as_bytes())?;
        let mut more = plain::replay_plain(trace, opts, &names, &initial, &tids, out, progress)?;
        errors.append(&mut more);
        return Ok(errors);
    }
    let mut merged = match trace.events_of(&tids) {
        Ok(m) => m,
        Err(e) => {
            errors.push(e.to_string());
            return Ok(errors);
        }
    };
    let mut r = Replayer {
        trace,
        opts,
        names: &names,
        threads: Vec::new(),
        index: HashMap::new(),
        pending: Vec::new(),
        flags: FnFlags {
            cache: HashMap::new(),
        },
        queue: VecDeque::new(),
        base: 0,
        last_ts: 0,
        start_ts: None,
        line: Vec::with_capacity(256),
        out,
        values: crate::dump::PendingValues::default(),
    };
    for (&tid, init) in &initial {
        if tids.contains(&tid) {
            r.thread(tid).stack = CallStack::with_initial(init.clone());
        }
    }
    r.header()?;
    let mut n = 0u64;
    while let Some(e) = merged.next_ref() {
        match e {
            Ok(e) => {
                n += 1;
                if n & 0x3fff == 0 {
                    progress.add(0x4000);
                    // Filters can hold output back for long: show what is ready, and let a writer
                    // whose reader went away (`| head`) end the work by failing the flush (every
                    // 16,384 events, a few chunks: a poll each, where 65,536 let a loaded machine
                    // read half the trace before `head`'s exit was seen).
                    r.out.flush()?;
                }
                r.event(&e)?;
            }
            Err(err) => errors.push(err.to_string()),
        }
    }
    progress.add(n & 0x3fff);
    r.finish()?;
    Ok(errors)
}

struct Replayer<'a, 'w> {
    trace: &'a Trace,
    opts: &'a Options,
    names: &'a Names,
    threads: Vec<ThreadState>,
    index: HashMap<u32, usize>,
    pending: Vec<StackEvent>,
    flags: FnFlags,
    queue: VecDeque<Item>,
    /// Deque position of `queue[0]`.
    base: u64,
    last_ts: u64,
    start_ts: Option<u64>,
    line: Vec<u8>,
    out: &'w mut dyn Write,
    /// The shown values of the function event being processed (`record -A`, `-R`), for the stack
    /// event it makes.
    values: crate::dump::PendingValues,
}

impl Replayer<'_, '_> {
    fn slot(&mut self, tid: u32) -> usize {
        let n = self.threads.len();
        let i = *self.index.entry(tid).or_insert(n);
        if i == n {
            self.threads.push(ThreadState::default());
        }
        i
    }

    fn thread(&mut self, tid: u32) -> &mut ThreadState {
        let i = self.slot(tid);
        &mut self.threads[i]
    }

    fn header(&mut self) -> io::Result<()> {
        self.out.write_all(header_line(self.opts.fields).as_bytes())
    }

    fn fn_flags(&mut self, id: u32) -> (bool, bool) {
        if let Some(&f) = self.flags.cache.get(&id) {
            return f;
        }
        // As `record` matches: the name, or `name@0xADDR` for a pattern with an `@` (one of several
        // functions of one name, shown `name [@0xADDR]`).
        let shown = self.names.get(id);
        let (name, addr) = self.trace.filter_name(id).unwrap_or((&shown, 0));
        let matches = |r: &Regex| {
            r.is_match(name)
                || (r.as_str().contains('@')
                    && r.is_match(&ferrotrace_core::pattern::selector(name, addr)))
        };
        let f = (
            self.opts.filter.as_ref().is_some_and(matches),
            self.opts.hide.as_ref().is_some_and(matches),
        );
        self.flags.cache.insert(id, f);
        f
    }

    fn in_range(&self, ts: u64) -> bool {
        self.opts.time_range.is_none_or(|(a, b)| ts >= a && ts <= b)
    }

    fn event(&mut self, e: &EventRef<'_>) -> io::Result<()> {
        self.start_ts.get_or_insert(e.ts_ns);
        self.last_ts = self.last_ts.max(e.ts_ns);
        let tid = e.tid;
        let i = self.slot(tid);
        let mut th = std::mem::take(&mut self.threads[i]);
        let mut pending = std::mem::take(&mut self.pending);
        if self.trace.has_arg_specs() && e.kind.is_function() {
            self.values.set(self.trace, e);
        }
        let is_fn = {
            let mut sink = |se| pending.push(se);
            th.stack.touch(e.ts_ns, &mut sink);
            th.stack.process(e.kind, e.id, e.ts_ns, &mut sink)
        };
        for se in pending.drain(..) {
            self.stack_event(tid, &mut th, se);
        }
        self.pending = pending;
        self.values = crate::dump::PendingValues::default();
        if !is_fn {
            self.other(tid, &mut th, e);
        }
        self.threads[i] = th;
        self.drain(false)
    }

    fn push(&mut self, th: &mut ThreadState, item: Item) -> u64 {
        let pos = self.base + self.queue.len() as u64;
        th.last_pos = Some(pos);
        self.queue.push_back(item);
        pos
    }

    fn stack_event(&mut self, tid: u32, th: &mut ThreadState, se: StackEvent) {
        match se {
            StackEvent::Enter {
                id,
                time,
                depth,
                entered,
            } => {
                let shown = self.decide_enter(th, id, time, depth);
                let args = self.values.take_for(&se);
                let pos = shown.map(|dd| {
                    let pos = self.push(
                        th,
                        Item {
                            tid,
                            ts: time,
                            depth: dd,
                            body: Body::Enter {
                                id,
                                entered,
                                dur: None,
                                leaf: false,
                                args,
                                retval: None,
                            },
                        },
                    );
                    (pos, dd)
                });
                th.shown.push(pos);
            }
            StackEvent::Leave {
                frame,
                end,
                depth,
                how,
            } => {
                let shown = th.shown.pop().flatten();
                let retval = self.values.take_for(&se);
                if th.hide_depth == Some(depth) {
                    th.hide_depth = None;
                }
                if th.filter_base == Some(depth) {
                    th.filter_base = None;
                }
                if let Some((pos, dd)) = shown {
                    let dur = end.saturating_sub(frame.start);
                    let leaf = th.last_pos == Some(pos);
                    if pos >= self.base {
                        if let Some(item) = self.queue.get_mut((pos - self.base) as usize) {
                            if let Body::Enter {
                                dur: d,
                                leaf: l,
                                retval: r,
                                ..
                            } = &mut item.body
                            {
                                *d = Some(dur);
                                *l = leaf && matches!(how, EndKind::Return | EndKind::TailCall);
                                if *l {
                                    r.clone_from(&retval);
                                }
                            }
                        }
                    }
                    let folded = leaf
                        && pos >= self.base
                        && matches!(how, EndKind::Return | EndKind::TailCall);
                    self.push(
                        th,
                        Item {
                            tid,
                            ts: end,
                            depth: dd,
                            body: Body::Leave {
                                id: frame.id,
                                dur,
                                how,
                                folded,
                                retval,
                            },
                        },
                    );
                }
            }
            StackEvent::OrphanExit { id, time } => {
                if self.in_range(time) {
                    self.push(
                        th,
                        Item {
                            tid,
                            ts: time,
                            depth: 0,
                            body: Body::Orphan { id },
                        },
                    );
                }
            }
        }
    }

    fn display_depth(&self, th: &ThreadState, depth: usize) -> usize {
        depth.saturating_sub(th.filter_base.unwrap_or(0))
    }

    /// Filter state update for an entry; `Some(display depth)` when it is shown.
    fn decide_enter(
        &mut self,
        th: &mut ThreadState,
        id: u32,
        time: u64,
        depth: usize,
    ) -> Option<usize> {
        if th.hide_depth.is_some() {
            return None;
        }
        let (fmatch, hmatch) = if self.opts.filter.is_some() || self.opts.hide.is_some() {
            self.fn_flags(id)
        } else {
            (false, false)
        };
        if hmatch {
            th.hide_depth = Some(depth);
            return None;
        }
        if self.opts.filter.is_some() {
            if th.filter_base.is_none() && fmatch {
                th.filter_base = Some(depth);
            }
            th.filter_base?;
        }
        let dd = self.display_depth(th, depth);
        if self.opts.max_depth.is_some_and(|m| dd >= m) {
            return None;
        }
        if !self.in_range(time) {
            return None;
        }
        Some(dd)
    }

    fn other(&mut self, tid: u32, th: &mut ThreadState, e: &EventRef<'_>) {
        if !self.in_range(e.ts_ns) {
            return;
        }
        // Lost events show whatever the filters; the others only where their thread's frames show.
        if e.kind != EventKind::Lost {
            let visible =
                th.hide_depth.is_none() && (self.opts.filter.is_none() || th.filter_base.is_some());
            if !visible {
                return;
            }
        }
        let Some(text) = plain::note(self.trace, e, self.opts.samples.as_ref()) else {
            return;
        };
        let depth = self.display_depth(th, th.stack.depth());
        if self.opts.max_depth.is_some_and(|m| depth > m) {
            return;
        }
        self.push(
            th,
            Item {
                tid,
                ts: e.ts_ns,
                depth,
                body: Body::Note(text),
            },
        );
    }

    /// Prints the items at the front of the queue that can be decided.
    fn drain(&mut self, end: bool) -> io::Result<()> {
        let tmin = self.opts.min_duration_ns;
        while let Some(head) = self.queue.front() {
            if let Body::Enter { dur: None, .. } = head.body {
                if !end && self.queue.len() < MAX_LOOKAHEAD {
                    let head_pos = self.base;
                    let later_same_thread = self
                        .index
                        .get(&head.tid)
                        .and_then(|&i| self.threads[i].last_pos)
                        .is_some_and(|p| p > head_pos);
                    let long_enough = tmin == 0 || self.last_ts.saturating_sub(head.ts) >= tmin;
                    if !(later_same_thread && long_enough) {
                        return Ok(());
                    }
                }
            }
            let item = self.queue.pop_front().expect("front exists");
            self.base += 1;
            self.print(item)?;
        }
        Ok(())
    }

    fn print(&mut self, item: Item) -> io::Result<()> {
        let tmin = self.opts.min_duration_ns;
        let dur = match &item.body {
            Body::Enter { dur, leaf, .. } => {
                if dur.is_some_and(|d| d < tmin) {
                    return Ok(());
                }
                if *leaf {
                    *dur
                } else {
                    None
                }
            }
            Body::Leave { dur, folded, .. } => {
                if *folded || *dur < tmin {
                    return Ok(());
                }
                Some(*dur)
            }
            _ => None,
        };
        let f = self.opts.fields;
        let start = self.start_ts.unwrap_or(0);
        let mut line = std::mem::take(&mut self.line);
        line.clear();
        if f.time {
            push_u64(&mut line, item.ts / 1_000_000_000, 10);
            line.push(b'.');
            let ns = item.ts % 1_000_000_000;
            let s = format!("{ns:09}");
            line.extend_from_slice(s.as_bytes());
            line.push(b' ');
        }
        if f.elapsed {
            push_duration(&mut line, item.ts.saturating_sub(start));
            line.push(b' ');
        }
        if f.delta {
            let th = self.thread(item.tid);
            match th.last_printed {
                Some(p) => push_duration(&mut line, item.ts.saturating_sub(p)),
                None => line.extend_from_slice(b"          "),
            }
            th.last_printed = Some(item.ts);
            line.push(b' ');
        }
        if f.duration {
            line.push(b' ');
            match dur {
                Some(d) => push_duration(&mut line, d),
                None => line.extend_from_slice(b"          "),
            }
            line.push(b' ');
        }
        if f.tid {
            line.push(b'[');
            push_u64(&mut line, item.tid as u64, 6);
            line.extend_from_slice(b"] ");
        }
        line.extend_from_slice(b"| ");
        for _ in 0..item.depth {
            line.extend_from_slice(b"  ");
        }
        let names = self.names;
        let name = |id: u32| names.get(id);
        match &item.body {
            Body::Enter {
                id,
                entered,
                leaf,
                args,
                retval,
                ..
            } => {
                line.extend_from_slice(name(*id).as_bytes());
                line.push(b'(');
                line.extend_from_slice(args.as_deref().unwrap_or("").as_bytes());
                line.push(b')');
                if let Some(r) = retval.as_deref().filter(|_| *leaf) {
                    line.extend_from_slice(b" = ");
                    line.extend_from_slice(r.as_bytes());
                }
                line.extend_from_slice(if *leaf { b";" } else { b" {" });
                if !entered {
                    line.extend_from_slice(b" /* already running when tracing began */");
                }
                if let Some(s) = self.opts.srclines.get(id) {
                    line.extend_from_slice(b" /* ");
                    line.extend_from_slice(s.as_bytes());
                    line.extend_from_slice(b" */");
                }
            }
            Body::Leave {
                id, how, retval, ..
            } => {
                line.push(b'}');
                if let Some(r) = retval {
                    line.extend_from_slice(b" = ");
                    line.extend_from_slice(r.as_bytes());
                    line.push(b';');
                }
                line.extend_from_slice(b" /* ");
                line.extend_from_slice(name(*id).as_bytes());
                let note = how.note();
                if !note.is_empty() {
                    line.extend_from_slice(b": ");
                    line.extend_from_slice(note.as_bytes());
                }
                line.extend_from_slice(b" */");
            }
            Body::Orphan { id } => {
                line.extend_from_slice(b"} /* ");
                line.extend_from_slice(name(*id).as_bytes());
                line.extend_from_slice(b": exit without entry */");
            }
            Body::Note(t) => line.extend_from_slice(t.as_bytes()),
        }
        line.push(b'\n');
        let r = self.out.write_all(&line);
        self.line = line;
        r
    }

    fn finish(&mut self) -> io::Result<()> {
        let mut tids: Vec<(u32, usize)> = self.index.iter().map(|(&t, &i)| (t, i)).collect();
        tids.sort_unstable();
        for (tid, i) in tids {
            let mut th = std::mem::take(&mut self.threads[i]);
            let mut pending = Vec::new();
            th.stack.finish(&mut |se| pending.push(se));
            for se in pending {
                self.stack_event(tid, &mut th, se);
            }
            self.threads[i] = th;
        }
        self.drain(true)?;
        self.out.flush()
    }
}

/// Convenience for tests and library users: the replay as a `String`.
pub fn replay_to_string(trace: &Trace, opts: &Options) -> Result<String, ReadError> {
    let mut v = Vec::new();
    replay(
        trace,
        opts,
        &mut v,
        &mut Progress::with_enabled("replay", 0, false),
    )
    .map_err(|e| ReadError::Io(trace.path().to_path_buf(), e))?;
    Ok(String::from_utf8_lossy(&v).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_format_like_uftrace() {
        let f = |ns| {
            let mut v = Vec::new();
            push_duration(&mut v, ns);
            String::from_utf8(v).unwrap()
        };
        assert_eq!(f(0), "          ");
        assert_eq!(f(1), "  0.001 us");
        assert_eq!(f(1234), "  1.234 us");
        assert_eq!(f(999_999), "999.999 us");
        assert_eq!(f(12_345_678), " 12.345 ms");
        assert_eq!(f(3_000_000_000), "  3.000  s");
    }

    #[test]
    fn fields_and_time_ranges_parse() {
        let f = Fields::parse("+time").unwrap();
        assert!(f.time && f.duration && f.tid);
        let f = Fields::parse("elapsed,tid").unwrap();
        assert!(f.elapsed && f.tid && !f.duration);
        assert!(Fields::parse("bogus").is_err());
        assert_eq!(
            parse_time_range("1ms~2ms", 100).unwrap(),
            (1_000_100, 2_000_100)
        );
        assert_eq!(parse_time_range("~", 0).unwrap(), (0, u64::MAX));
        assert_eq!(
            parse_time_range("12.5~13000000000", 0).unwrap(),
            (12_500_000_000, 13_000_000_000)
        );
        assert!(parse_time_range("5", 0).is_err());
        assert!(parse_time_range("5ms~1ms", 0).is_err());
        assert!(parse_time_range("12.5~13", 0).is_err()); // 13 ns is before 12.5 s
    }
}
