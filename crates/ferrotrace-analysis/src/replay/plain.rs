//! The replay without `-F`, `-N`, `-D`, `-t` or `--time-range`: every event is shown, so each line can
//! be written as soon as its event is read.
//!
//! The general replayer holds lines in a look-ahead queue until it knows whether an entry is a leaf
//! call (its exit is the thread's next line). Here that is decided by peeking at the thread's next
//! event: every event of an unfiltered replay yields at least one line, so the entry is a leaf exactly
//! when that event is the exit of the same function (which then closes the innermost frame with a
//! return or tail exit). The output is byte for byte the general replayer's (see the tests in
//! `ferrotrace-cli/tests/analysis.rs`), written straight into one output buffer with cached name
//! fragments and precomputed line prefixes.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::io::{self, Write};

use super::{push_duration, Fields, Options};
use crate::callstack::{CallStack, EndKind, StackEvent};
use crate::decimal::push_u64;
use crate::names::Names;
use crate::progress::Progress;
use crate::reader::{EventKind, EventRef, ThreadEvents, Trace};

/// Output is handed to the writer in pieces of about this size.
const FLUSH_AT: usize = 1 << 16;

/// Ids below this get their name fragments in a dense table.
const DENSE_IDS: u32 = 1 << 20;

const SPACES: [u8; 256] = [b' '; 256];

/// The line endings of one function, each ending in a newline.
struct Fragments {
    /// `NAME() {` (+ srcline)
    open: Box<[u8]>,
    /// `NAME();` (+ srcline)
    leaf: Box<[u8]>,
    /// `} /* NAME */`
    close: Box<[u8]>,
}

struct FragmentCache<'a> {
    names: &'a Names,
    srclines: &'a HashMap<u32, String>,
    dense: Vec<Option<Box<Fragments>>>,
    sparse: HashMap<u32, Box<Fragments>>,
}

impl FragmentCache<'_> {
    fn build(&self, id: u32) -> Box<Fragments> {
        let name = self.names.get(id);
        let mut src = Vec::new();
        if let Some(s) = self.srclines.get(&id) {
            src.extend_from_slice(b" /* ");
            src.extend_from_slice(s.as_bytes());
            src.extend_from_slice(b" */");
        }
        let line = |parts: &[&[u8]]| -> Box<[u8]> {
            let mut v = Vec::new();
            for p in parts {
                v.extend_from_slice(p);
            }
            v.push(b'\n');
            v.into_boxed_slice()
        };
        Box::new(Fragments {
            open: line(&[name.as_bytes(), b"() {", &src]),
            leaf: line(&[name.as_bytes(), b"();", &src]),
            close: line(&[b"} /* ", name.as_bytes(), b" */"]),
        })
    }

    #[inline]
    fn get(&mut self, id: u32) -> &Fragments {
        if id < DENSE_IDS {
            let i = id as usize;
            if self.dense.get(i).is_none_or(Option::is_none) {
                let f = self.build(id);
                if self.dense.len() <= i {
                    self.dense.resize_with(i + 1, || None);
                }
                self.dense[i] = Some(f);
            }
            self.dense[i].as_deref().expect("filled above")
        } else {
            if !self.sparse.contains_key(&id) {
                let f = self.build(id);
                self.sparse.insert(id, f);
            }
            &self.sparse[&id]
        }
    }
}

/// An entry whose line waits for the thread's next line (to know whether it is a leaf).
struct Pending {
    id: u32,
    ts: u64,
    depth: usize,
    entered: bool,
    /// Its arguments, shown (`record -A`).
    args: Option<Box<str>>,
}

struct ThreadState {
    stack: CallStack,
    /// Apart from the stack, so that the stack's events go straight to the printer.
    out: ThreadOut,
}

/// What the printer keeps of a thread.
struct ThreadOut {
    pending: Option<Pending>,
    /// The shown values of the function event being processed (`record -A`, `-R`), for the stack
    /// event it makes.
    values: Option<Box<str>>,
    /// `[   TID] | ` (or `| `), then [`SPACES`]: a line's prefix and indentation are one copy.
    prefix: Vec<u8>,
    /// The length of `prefix` without the spaces.
    prefix_len: usize,
    last_printed: Option<u64>,
}

/// Writes lines into one buffer.
struct Printer<'a, 'w> {
    /// The trace holds arguments or return values (`record -A`, `-R`).
    values: bool,
    fields: Fields,
    start: u64,
    buf: Vec<u8>,
    frags: FragmentCache<'a>,
    out: &'w mut dyn Write,
}

/// Which line of a function with shown values.
enum Shape {
    Open,
    Leaf,
    Close,
}

/// What follows the indentation of a line.
enum Tail<'t> {
    Open(u32),
    Leaf(u32),
    Close(u32, EndKind),
    Enter(u32, bool, bool),
    Orphan(u32),
    Text(&'t [u8]),
}

/// Writes `ns` like [`push_duration`]; the common sub-second case without a division loop.
#[inline]
fn put_duration(out: &mut Vec<u8>, ns: u64) {
    if ns == 0 || ns >= 1_000_000_000 {
        return push_duration(out, ns);
    }
    // Divisions by constants (multiplications), in each branch: by a divisor chosen at run time
    // they were `div` instructions, tens of cycles each on every line.
    let (whole, frac, unit) = if ns < 1_000_000 {
        (ns / 1_000, ns % 1_000, b" us")
    } else {
        (ns / 1_000_000, ns % 1_000_000 / 1_000, b" ms")
    };
    let mut t = [b' '; 10];
    t[0] = if whole >= 100 {
        b'0' + (whole / 100) as u8
    } else {
        b' '
    };
    t[1] = if whole >= 10 {
        b'0' + (whole / 10 % 10) as u8
    } else {
        b' '
    };
    t[2] = b'0' + (whole % 10) as u8;
    t[3] = b'.';
    t[4] = b'0' + (frac / 100) as u8;
    t[5] = b'0' + (frac / 10 % 10) as u8;
    t[6] = b'0' + (frac % 10) as u8;
    t[7..].copy_from_slice(unit);
    out.extend_from_slice(&t);
}

impl Printer<'_, '_> {
    #[inline]
    fn line(&mut self, th: &mut ThreadOut, ts: u64, dur: Option<u64>, depth: usize, tail: Tail) {
        let f = self.fields;
        let line = &mut self.buf;
        if f.time {
            push_u64(line, ts / 1_000_000_000, 10);
            line.push(b'.');
            let ns = ts % 1_000_000_000;
            let mut d = [b'0'; 9];
            let mut v = ns;
            for c in d.iter_mut().rev() {
                *c = b'0' + (v % 10) as u8;
                v /= 10;
            }
            line.extend_from_slice(&d);
            line.push(b' ');
        }
        if f.elapsed {
            put_duration(line, ts.saturating_sub(self.start));
            line.push(b' ');
        }
        if f.delta {
            match th.last_printed {
                Some(p) => put_duration(line, ts.saturating_sub(p)),
                None => line.extend_from_slice(b"          "),
            }
            th.last_printed = Some(ts);
            line.push(b' ');
        }
        if f.duration {
            line.push(b' ');
            match dur {
                Some(d) => put_duration(line, d),
                None => line.extend_from_slice(b"          "),
            }
            line.push(b' ');
        }
        let mut indent = depth * 2;
        let indented = th.prefix_len + indent.min(SPACES.len());
        line.extend_from_slice(&th.prefix[..indented]);
        indent -= indented - th.prefix_len;
        while indent > 0 {
            let n = indent.min(SPACES.len());
            line.extend_from_slice(&SPACES[..n]);
            indent -= n;
        }
        match tail {
            Tail::Open(id) => line.extend_from_slice(&self.frags.get(id).open),
            Tail::Leaf(id) => line.extend_from_slice(&self.frags.get(id).leaf),
            Tail::Close(id, EndKind::Return | EndKind::TailCall) => {
                line.extend_from_slice(&self.frags.get(id).close)
            }
            Tail::Close(id, how) => {
                line.extend_from_slice(b"} /* ");
                line.extend_from_slice(self.frags.names.get(id).as_bytes());
                line.extend_from_slice(b": ");
                line.extend_from_slice(how.note().as_bytes());
                line.extend_from_slice(b" */\n");
            }
            Tail::Enter(id, leaf, entered) => {
                line.extend_from_slice(self.frags.names.get(id).as_bytes());
                line.extend_from_slice(if leaf { b"();" } else { b"() {" });
                if !entered {
                    line.extend_from_slice(b" /* already running when tracing began */");
                }
                if let Some(s) = self.frags.srclines.get(&id) {
                    line.extend_from_slice(b" /* ");
                    line.extend_from_slice(s.as_bytes());
                    line.extend_from_slice(b" */");
                }
                line.push(b'\n');
            }
            Tail::Orphan(id) => {
                line.extend_from_slice(b"} /* ");
                line.extend_from_slice(self.frags.names.get(id).as_bytes());
                line.extend_from_slice(b": exit without entry */\n");
            }
            Tail::Text(t) => {
                line.extend_from_slice(t);
                line.push(b'\n');
            }
        }
    }

    /// Writes the pending entry of `th` as an opening line.
    #[inline]
    fn flush_pending(&mut self, th: &mut ThreadOut) {
        if let Some(p) = th.pending.take() {
            if let Some(args) = &p.args {
                let text = self.with_values(p.id, args, None, Shape::Open);
                return self.line(th, p.ts, None, p.depth, Tail::Text(text.as_bytes()));
            }
            let tail = if p.entered {
                Tail::Open(p.id)
            } else {
                Tail::Enter(p.id, false, false)
            };
            self.line(th, p.ts, None, p.depth, tail);
        }
    }

    #[inline]
    fn stack_event(&mut self, th: &mut ThreadOut, se: StackEvent) {
        match se {
            StackEvent::Enter {
                id,
                time,
                depth,
                entered,
            } => {
                self.flush_pending(th);
                th.pending = Some(Pending {
                    id,
                    ts: time,
                    depth,
                    entered,
                    args: th.values.take(),
                });
            }
            StackEvent::Leave {
                frame,
                end,
                depth,
                how,
            } => {
                let dur = end.saturating_sub(frame.start);
                let retval = th.values.take();
                match th.pending.take() {
                    // The frame entered last closes by a return as the thread's next line: a leaf.
                    Some(p)
                        if matches!(how, EndKind::Return | EndKind::TailCall)
                            && (p.args.is_some() || retval.is_some()) =>
                    {
                        let args = p.args.as_deref().unwrap_or("");
                        let text = self.with_values(p.id, args, retval.as_deref(), Shape::Leaf);
                        self.line(th, p.ts, Some(dur), p.depth, Tail::Text(text.as_bytes()));
                    }
                    Some(p) if matches!(how, EndKind::Return | EndKind::TailCall) => {
                        let tail = if p.entered {
                            Tail::Leaf(p.id)
                        } else {
                            Tail::Enter(p.id, true, false)
                        };
                        self.line(th, p.ts, Some(dur), p.depth, tail);
                    }
                    p => {
                        th.pending = p;
                        self.flush_pending(th);
                        match retval {
                            Some(r) if matches!(how, EndKind::Return) => {
                                let text = self.with_values(frame.id, "", Some(&r), Shape::Close);
                                self.line(th, end, Some(dur), depth, Tail::Text(text.as_bytes()));
                            }
                            _ => self.line(th, end, Some(dur), depth, Tail::Close(frame.id, how)),
                        }
                    }
                }
            }
            StackEvent::OrphanExit { id, time } => {
                self.flush_pending(th);
                self.line(th, time, None, 0, Tail::Orphan(id));
            }
        }
    }

    /// The line of a function with shown values, as uftrace writes it: `NAME(ARGS) {`, `NAME(ARGS)
    /// = RET;` or `} = RET; /* NAME */`.
    fn with_values(&self, id: u32, args: &str, retval: Option<&str>, shape: Shape) -> String {
        let name = self.frags.names.get(id);
        let ret = retval.map(|r| format!(" = {r}")).unwrap_or_default();
        let src = self
            .frags
            .srclines
            .get(&id)
            .map(|s| format!(" /* {s} */"))
            .unwrap_or_default();
        match shape {
            Shape::Open => format!("{name}({args}) {{{src}"),
            Shape::Leaf => format!("{name}({args}){ret};{src}"),
            Shape::Close => format!("}}{ret}; /* {name} */"),
        }
    }

    fn maybe_flush(&mut self) -> io::Result<()> {
        if self.buf.len() >= FLUSH_AT {
            self.out.write_all(&self.buf)?;
            self.buf.clear();
        }
        Ok(())
    }
}

/// The text of a non-function event (shared by both replayers).
pub(super) fn note(
    trace: &Trace,
    e: &EventRef<'_>,
    samples: Option<&super::samples::SampledStacks>,
) -> Option<String> {
    let (id, payload, fields) = (e.id, e.payload, &e.fields);
    Some(match e.kind {
        EventKind::Sample => return samples?.note(e.tid, e.ts_ns),
        EventKind::Lost => format!("/* LOST {id} events!! */"),
        EventKind::Wait => format!("/* ferrotrace waited {id} ns for a free buffer */"),
        EventKind::Tracepoint => format!(
            "/* {} */",
            crate::tracepoints::format_payload(trace, id, payload)
        ),
        EventKind::Alloc => format!("malloc({}) = {:#x}", fields[0], fields[1]),
        EventKind::Free => format!("free({:#x})", fields[0]),
        _ => return None,
    })
}

/// Processes the event at the head of `ev` (which `peek_raw` returned as `(tsc, kind, id)`).
#[inline]
fn one_event(
    trace: &Trace,
    p: &mut Printer,
    th: &mut ThreadState,
    ev: &mut ThreadEvents<'_>,
    (tsc, kind, id): (u64, EventKind, u32),
    samples: Option<&super::samples::SampledStacks>,
) {
    let ts = trace.tsc_to_ns(tsc);
    let ThreadState { stack, out } = th;
    if kind.is_function() {
        if p.values {
            out.values = super::shown_values(trace, &ev.peeked_ref());
        }
        ev.bump();
        let mut print = |se| p.stack_event(out, se);
        stack.touch(ts, &mut print);
        stack.process(kind, id, ts, &mut print);
    } else {
        stack.touch(ts, &mut |se| p.stack_event(out, se));
        let text = note(trace, &ev.peeked_ref(), samples);
        ev.bump();
        if let Some(text) = text {
            p.flush_pending(out);
            p.line(out, ts, None, stack.depth(), Tail::Text(text.as_bytes()));
        }
    }
}

/// The unfiltered replay (see the module doc). Returns the read errors met.
pub(super) fn replay_plain(
    trace: &Trace,
    opts: &Options,
    names: &Names,
    initial: &HashMap<u32, Vec<u32>>,
    tids: &[u32],
    out: &mut dyn Write,
    progress: &mut Progress,
) -> io::Result<Vec<String>> {
    let mut errors = Vec::new();
    let mut streams = Vec::with_capacity(tids.len());
    let mut threads = Vec::with_capacity(tids.len());
    for &tid in tids {
        match trace.thread_events(tid) {
            Ok(s) => streams.push(s),
            Err(e) => {
                errors.push(e.to_string());
                return Ok(errors);
            }
        }
        let mut prefix = Vec::new();
        if opts.fields.tid {
            prefix.push(b'[');
            push_u64(&mut prefix, tid as u64, 6);
            prefix.extend_from_slice(b"] ");
        }
        prefix.extend_from_slice(b"| ");
        let prefix_len = prefix.len();
        prefix.extend_from_slice(&SPACES);
        threads.push(ThreadState {
            stack: match initial.get(&tid) {
                Some(init) => CallStack::with_initial(init.clone()),
                None => CallStack::new(),
            },
            out: ThreadOut {
                pending: None,
                values: None,
                prefix,
                prefix_len,
                last_printed: None,
            },
        });
    }
    let mut p = Printer {
        values: trace.has_arg_specs(),
        fields: opts.fields,
        start: 0,
        buf: Vec::with_capacity(FLUSH_AT + 4096),
        frags: FragmentCache {
            names,
            srclines: &opts.srclines,
            dense: Vec::new(),
            sparse: HashMap::new(),
        },
        out,
    };
    // The k-way merge: `(tsc, stream)` of each stream's next event but the one being read.
    let mut heap = BinaryHeap::new();
    for (s, ev) in streams.iter_mut().enumerate() {
        // By the first event's tick from the index: a thread's chunk is decoded when the merge
        // reaches it, so a trace of 5,000 short-lived threads holds those alive at a time.
        match ev.peek_tsc() {
            Ok(Some(tsc)) => heap.push(Reverse((tsc, s))),
            Ok(None) => {}
            Err(e) => errors.push(e.to_string()),
        }
    }
    if let Some(&Reverse((tsc, _))) = heap.peek() {
        p.start = trace.tsc_to_ns(tsc);
    }
    let mut n = 0u64;
    let mut since_progress = 0u64;
    while let Some(Reverse((_, s))) = heap.pop() {
        let ev = &mut streams[s];
        let th = &mut threads[s];
        loop {
            let head = match ev.peek_raw() {
                Ok(Some(h)) => h,
                Ok(None) => break,
                Err(e) => {
                    errors.push(e.to_string());
                    break;
                }
            };
            if let Some(&Reverse(other)) = heap.peek() {
                if (head.0, s) > other {
                    heap.push(Reverse((head.0, s)));
                    break;
                }
            }
            one_event(trace, &mut p, th, ev, head, opts.samples.as_ref());
            n += 1;
            // An entry waits for the thread's next event: its exit (a leaf, read now) or anything
            // else (an opening line).
            while let Some(pend) = th.out.pending.as_ref().map(|p| p.id) {
                match ev.peek_raw() {
                    Ok(Some(h @ (_, EventKind::Exit | EventKind::TailExit, id))) if id == pend => {
                        one_event(trace, &mut p, th, ev, h, opts.samples.as_ref());
                        n += 1;
                    }
                    Ok(_) => p.flush_pending(&mut th.out),
                    Err(e) => {
                        errors.push(e.to_string());
                        p.flush_pending(&mut th.out);
                    }
                }
            }
            p.maybe_flush()?;
            if n - since_progress >= 0x10000 {
                progress.add(n - since_progress);
                since_progress = n;
            }
        }
    }
    progress.add(n - since_progress);
    for th in &mut threads {
        let ThreadState { stack, out } = th;
        stack.finish(&mut |se| p.stack_event(out, se));
        p.flush_pending(out);
    }
    p.out.write_all(&p.buf)?;
    p.buf.clear();
    p.out.flush()?;
    Ok(errors)
}
