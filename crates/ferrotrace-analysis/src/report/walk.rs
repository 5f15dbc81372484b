//! The per-thread counting loop of `report`: one thread's events, in ticks, to one accumulator per
//! function. It is the command's whole cost, so it keeps its own shadow stack instead of going through
//! [`crate::callstack::CallStack`]'s events: an open frame holds its function's slot (no second lookup
//! at its exit), and no event is built per frame. The frames it closes, and how, are those of
//! `CallStack::single_pass` (the test below compares the two on unwinding, tail calls, frames running
//! before the trace began and frames still open at its end).
//!
//! Not for analyses that need the frames themselves (graph, replay): they use `CallStack`.

use std::collections::HashMap;
use std::path::Path;

use crate::names::Representatives;
use ferrotrace_core::codec::{EventDecoder, EventFields};

use crate::reader::stream::{visit_events_payload, VisitEvents};
use crate::reader::{Batch, ChunkRef, EventKind, ReadError, ThreadEvents};

/// Per-function counts in ticks, the result of the walk ([`ThreadCounts::acc`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Acc {
    pub(super) calls: u64,
    /// Inclusive time, recursion counted once.
    pub(super) total: u64,
    pub(super) self_t: u64,
    /// The shortest frame; `u64::MAX` until one closed.
    pub(super) min: u64,
    pub(super) max: u64,
    /// Sum of all frame durations, recursion counted every time.
    pub(super) sum: u64,
    pub(super) unwound: u64,
    /// Frames still open at the end.
    pub(super) open: u64,
    /// Frames already running when tracing began.
    pub(super) before: u64,
    /// CPU time of the cpu-clock samples taken while it was the innermost frame (ns).
    pub(super) sampled: u64,
}

/// A function's counts that every frame's close updates, by slot: 56 bytes, so that the
/// accumulators of a program's hot functions share fewer cache lines; [`Rare`] holds the others.
#[derive(Clone, Copy)]
struct Hot {
    calls: u64,
    total: u64,
    self_t: u64,
    /// `u64::MAX` until a frame closed, so that a close needs no first-call test.
    min: u64,
    max: u64,
    sum: u64,
    /// Frames of this function currently on the stack (recursion).
    active: u32,
}

/// A function's counts of frames that did not simply return, and its samples, by slot.
#[derive(Clone, Copy, Default)]
struct Rare {
    unwound: u64,
    open: u64,
    before: u64,
    sampled: u64,
}

/// An open frame on the shadow stack.
#[derive(Clone, Copy)]
struct Open {
    /// The event id (a frame's exit matches its entry's id, not just its function).
    id: u32,
    /// Its function's slot.
    slot: u32,
    start: u64,
    /// Time in closed children.
    child: u64,
}

/// How a frame ended.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Close {
    Return,
    Unwound,
    OpenAtEnd,
}

/// What a closed frame was.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Frame {
    /// Entered, and on the stack until its close (its entry counted it in [`Hot::active`]).
    Stacked,
    /// Entered, and its exit the next event: never on the stack, not counted in `active`.
    Leaf,
    /// Running since before the thread's first event (no entry in the trace).
    Before,
}

/// The part of a thread's counts that every entry and exit reads and writes. A run of events moves
/// it out of [`ThreadCounts`] into a local ([`ThreadCounts::walk_run`]): through `&mut self`, LLVM
/// loaded and stored the stack's length and the latest tick at every event (a store into an
/// accumulator might have changed them); in a local whose address is not taken they stay in
/// registers. Only what finds a new function's slot or handles a rare exit needs the rest, and it
/// takes this part back by value.
#[derive(Default)]
struct Walk {
    /// By event id below 2^20: its function's slot, or u32::MAX until resolved.
    dense: Vec<u32>,
    /// By slot.
    hot: Vec<Hot>,
    /// By slot.
    rare: Vec<Rare>,
    frames: Vec<Open>,
    /// The thread's last event tick.
    last: u64,
    /// Time covered by frames closed at the outermost level: the children of a frame that was
    /// running before tracing began, if one's exit comes.
    root_closed: u64,
}

/// One thread's counts: one accumulator per function, found by event id (the ids of one function, see
/// [`Representatives`], share their function's slot, resolved once per id: the per-event lookup stays
/// one indexed load).
pub(super) struct ThreadCounts<'a> {
    function: &'a Representatives,
    /// By function (representative) id: its slot.
    index: HashMap<u32, u32>,
    /// By slot: the function's (representative) id.
    pub(super) ids: Vec<u32>,
    walk: Walk,
    started: bool,
    /// The thread's first event tick.
    first: u64,
}

impl<'a> ThreadCounts<'a> {
    pub(super) fn new(function: &'a Representatives) -> ThreadCounts<'a> {
        ThreadCounts {
            function,
            index: HashMap::new(),
            ids: Vec::new(),
            walk: Walk::default(),
            started: false,
            first: 0,
        }
    }

    /// The memory its tables and shadow stack hold, in bytes (the index of function ids aside: a slot
    /// per function it called, so bounded by the trace's functions).
    pub(super) fn held_bytes(&self) -> usize {
        let w = &self.walk;
        w.dense.capacity() * size_of::<u32>()
            + w.hot.capacity() * size_of::<Hot>()
            + w.rare.capacity() * size_of::<Rare>()
            + w.frames.capacity() * size_of::<Open>()
    }

    /// By slot: the function's counts.
    pub(super) fn acc(&self) -> Vec<Acc> {
        let w = &self.walk;
        let both = w.hot.iter().zip(&w.rare);
        both.map(|(h, r)| Acc {
            calls: h.calls,
            total: h.total,
            self_t: h.self_t,
            min: h.min,
            max: h.max,
            sum: h.sum,
            unwound: r.unwound,
            open: r.open,
            before: r.before,
            sampled: r.sampled,
        })
        .collect()
    }

    /// The slot of event `id`'s function in `walk` (taken out of `self` for a run).
    #[inline(always)]
    fn slot(&mut self, walk: &mut Walk, id: u32) -> u32 {
        match walk.dense.get(id as usize) {
            Some(&s) if s != u32::MAX => s,
            _ => {
                let (s, back) = self.slot_slow(std::mem::take(walk), id);
                *walk = back;
                s
            }
        }
    }

    /// The slot of an id not resolved yet (or above the dense range). `walk` goes by value and comes
    /// back, so that its address never escapes the run that holds it in a local.
    #[cold]
    #[inline(never)]
    fn slot_slow(&mut self, mut walk: Walk, id: u32) -> (u32, Walk) {
        let next = self.ids.len() as u32;
        let function = self.function.of(id);
        let s = *self.index.entry(function).or_insert(next);
        if s == next {
            self.ids.push(function);
            // The shortest duration starts above any, so that a close needs no first-call test.
            walk.hot.push(Hot {
                calls: 0,
                total: 0,
                self_t: 0,
                min: u64::MAX,
                max: 0,
                sum: 0,
                active: 0,
            });
            walk.rare.push(Rare::default());
        }
        if (id as usize) < (1 << 20) {
            if walk.dense.len() <= id as usize {
                walk.dense.resize(id as usize + 1, u32::MAX);
            }
            walk.dense[id as usize] = s;
        }
        (s, walk)
    }

    /// Counts the events of `batch` (the thread's next ones), its tracepoints into `tracepoints`, and
    /// its samples of the samplers that `timed` marks (cpu-clock, by index) into the innermost frame.
    pub(super) fn add(
        &mut self,
        batch: &Batch,
        tracepoints: &mut HashMap<u32, u64>,
        timed: &[bool],
    ) {
        let Some(first) = batch.events.first() else {
            return;
        };
        self.begin(first.tsc);
        let mut walk = std::mem::take(&mut self.walk);
        let mut others = Others { tracepoints, timed };
        // The side-table entry of the next event that has one.
        let mut extra = 0;
        for e in &batch.events {
            let fields = match e.extra {
                true => batch.extras.get(extra).map_or([0; 2], |x| x.fields),
                false => [0; 2],
            };
            self.event(&mut walk, e.tsc, e.kind, e.id, fields, &mut others);
            extra += e.extra as usize;
        }
        self.walk = walk;
    }

    /// Any event at `t`: an entry or exit, or another kind counted by [`Walk::other`].
    #[inline(always)]
    fn event(
        &mut self,
        walk: &mut Walk,
        t: u64,
        kind: EventKind,
        id: u32,
        fields: EventFields,
        others: &mut Others,
    ) {
        match kind {
            EventKind::Entry | EventKind::Exit | EventKind::TailExit => {
                self.function_event(walk, t, kind, id)
            }
            kind => {
                walk.last = walk.last.max(t);
                walk.other(kind, id, fields, others);
            }
        }
    }

    /// Counts the run of function entries and exits that `decoder` decodes next; their number.
    ///
    /// An entry waits for the next event before it is pushed: if that is its exit, the call was a
    /// leaf (about half of all calls), closed without going through the stack.
    #[inline(always)]
    fn walk_run(&mut self, decoder: &mut EventDecoder<'_>) -> u64 {
        let mut walk = std::mem::take(&mut self.walk);
        let mut n = 0u64;
        // Out of `walk`, whose address the slow paths take: a register.
        let mut last = walk.last;
        // The entry not pushed yet: its id and tick.
        let mut pending: Option<(u32, u64)> = None;
        decoder.function_run(|t, kind, id, exit| {
            if let Some(end) = exit {
                // A leaf call: its entry and exit in one event.
                n += 2;
                last = last.max(end);
                if let Some((entered, start)) = pending.take() {
                    self.enter(&mut walk, entered, start);
                }
                self.leaf(&mut walk, id, t, end);
                return;
            }
            n += 1;
            last = last.max(t);
            if kind == EventKind::Entry {
                if let Some((entered, start)) = pending.replace((id, t)) {
                    self.enter(&mut walk, entered, start);
                }
                return;
            }
            match pending.take() {
                Some((entered, start)) if entered == id => self.leaf(&mut walk, id, start, t),
                Some((entered, start)) => {
                    self.enter(&mut walk, entered, start);
                    self.exit(&mut walk, id, t);
                }
                None => self.exit(&mut walk, id, t),
            }
        });
        if let Some((entered, start)) = pending {
            self.enter(&mut walk, entered, start);
        }
        walk.last = last;
        self.walk = walk;
        n
    }

    /// The thread's first event is at `t` if none came before.
    fn begin(&mut self, t: u64) {
        if !self.started {
            self.started = true;
            self.first = t;
        }
    }

    /// An entry, exit or tail exit (both exits close the frame the same way) of `id` at `t`.
    #[inline(always)]
    fn function_event(&mut self, walk: &mut Walk, t: u64, kind: EventKind, id: u32) {
        walk.last = walk.last.max(t);
        match kind {
            EventKind::Entry => self.enter(walk, id, t),
            _ => self.exit(walk, id, t),
        }
    }

    /// An entry of `id` at `t`.
    #[inline(always)]
    fn enter(&mut self, walk: &mut Walk, id: u32, t: u64) {
        let slot = self.slot(walk, id);
        walk.hot[slot as usize].active += 1;
        walk.frames.push(Open {
            id,
            slot,
            start: t,
            child: 0,
        });
    }

    /// A call of `id` from `start` to `end` with no event between its entry and its exit: what
    /// [`ThreadCounts::enter`] then [`ThreadCounts::exit`] would count, without the stack.
    #[inline(always)]
    fn leaf(&mut self, walk: &mut Walk, id: u32, start: u64, end: u64) {
        let slot = self.slot(walk, id);
        let frame = Open {
            id,
            slot,
            start,
            child: 0,
        };
        walk.closed(frame, end, Close::Return, Frame::Leaf);
    }

    /// An exit or tail exit of `id` at `t`.
    #[inline(always)]
    fn exit(&mut self, walk: &mut Walk, id: u32, t: u64) {
        if let Some(top) = walk.frames.last() {
            if top.id == id {
                walk.pop(t, Close::Return);
                return;
            }
        }
        *walk = self.exit_below_top(std::mem::take(walk), id, t);
    }

    /// An exit of `id` at `t` that does not close the innermost frame: rare (unwinding, frames
    /// running before the trace), so kept out of the inlined loop.
    #[inline(never)]
    fn exit_below_top(&mut self, mut walk: Walk, id: u32, t: u64) -> Walk {
        match walk.frames.iter().rposition(|f| f.id == id) {
            Some(pos) => {
                // The frames above it were left without an exit: unwound by a panic.
                while walk.frames.len() > pos + 1 {
                    walk.pop(t, Close::Unwound);
                }
                walk.pop(t, Close::Return);
            }
            None => {
                while !walk.frames.is_empty() {
                    walk.pop(t, Close::Unwound);
                }
                // Running since before the thread's first event: it covers everything so far, and
                // its children are the frames closed at the outermost level.
                let slot = self.slot(&mut walk, id);
                let frame = Open {
                    id,
                    slot,
                    start: self.first,
                    child: walk.root_closed,
                };
                walk.root_closed = t.saturating_sub(self.first);
                walk.close(frame, t, Close::Return, Frame::Before);
            }
        }
        walk
    }

    /// Counts thread `events`' events straight from the decoder (see
    /// [`ThreadEvents::visit_next_chunk`]: its stream must have no Samples chunks), calling
    /// `chunk_done` with each chunk's number of events; the counts are those of [`ThreadCounts::add`]
    /// on the same events. Returns the read error that ended the thread's events early, if any.
    pub(super) fn add_decoded(
        &mut self,
        events: &mut ThreadEvents,
        tracepoints: &mut HashMap<u32, u64>,
        timed: &[bool],
        mut chunk_done: impl FnMut(u64),
    ) -> Option<ReadError> {
        let mut visit = Direct {
            counts: self,
            others: Others { tracepoints, timed },
        };
        loop {
            match events.visit_next_chunk(&mut visit) {
                Ok(Some(n)) => chunk_done(n),
                Ok(None) => return None,
                Err(e) => return Some(e),
            }
        }
    }

    /// Counts the events of Events chunk `c`, whose payload the index pass read, as
    /// [`ThreadCounts::add_decoded`] counts a chunk it reads: the chunk's number of events, or the read
    /// error that ends the thread's events.
    pub(super) fn add_payload(
        &mut self,
        path: &Path,
        c: ChunkRef,
        payload: &[u8],
        tracepoints: &mut HashMap<u32, u64>,
        timed: &[bool],
    ) -> Result<u64, ReadError> {
        let mut visit = Direct {
            counts: self,
            others: Others { tracepoints, timed },
        };
        visit_events_payload(path, c, payload, &mut visit)
    }

    /// Closes the frames still open at the thread's last event.
    pub(super) fn finish(&mut self) {
        let w = &mut self.walk;
        while !w.frames.is_empty() {
            w.pop(w.last, Close::OpenAtEnd);
        }
    }
}

impl Walk {
    /// An event other than a function entry or exit, with its fields, counted as [`Others`] says.
    fn other(&mut self, kind: EventKind, id: u32, fields: EventFields, others: &mut Others) {
        match kind {
            EventKind::Tracepoint => *others.tracepoints.entry(id).or_insert(0) += 1,
            EventKind::Sample => {
                let [sampler, weight] = fields;
                let timed = others.timed.get(sampler as usize);
                if let (Some(true), Some(f)) = (timed, self.frames.last()) {
                    self.rare[f.slot as usize].sampled += weight;
                }
            }
            _ => {}
        }
    }

    #[inline(always)]
    fn pop(&mut self, end: u64, how: Close) {
        let Some(frame) = self.frames.pop() else {
            return;
        };
        self.closed(frame, end, how, Frame::Stacked);
    }

    /// Counts `frame`, which is not on the stack, as closed at `end`: into its parent's (the
    /// innermost open frame's) time in children, and into its function's counts.
    #[inline(always)]
    fn closed(&mut self, frame: Open, end: u64, how: Close, kind: Frame) {
        let dur = end.saturating_sub(frame.start);
        match self.frames.last_mut() {
            Some(parent) => parent.child = parent.child.saturating_add(dur),
            None => self.root_closed = self.root_closed.saturating_add(dur),
        }
        self.close(frame, end, how, kind);
    }

    #[inline(always)]
    fn close(&mut self, frame: Open, end: u64, how: Close, kind: Frame) {
        let a = &mut self.hot[frame.slot as usize];
        let dur = end.saturating_sub(frame.start);
        a.min = a.min.min(dur);
        a.max = a.max.max(dur);
        a.calls += 1;
        a.sum += dur;
        a.self_t += dur.saturating_sub(frame.child);
        if kind == Frame::Stacked {
            // Its entry counted it: at least 1.
            a.active -= 1;
        }
        if a.active == 0 {
            a.total += dur;
        }
        if how == Close::Return && kind != Frame::Before {
            return;
        }
        let r = &mut self.rare[frame.slot as usize];
        match how {
            Close::Return => {}
            Close::Unwound => r.unwound += 1,
            Close::OpenAtEnd => r.open += 1,
        }
        if kind == Frame::Before {
            r.before += 1;
            // Running since before the thread's first event, so every frame of this function
            // counted so far ran inside it: its duration is the total so far. (It never entered, so
            // `active` did not count it.)
            a.total = dur;
        }
    }
}

/// The walk as the decoder's visitor: [`ThreadCounts::add`] without the batch between them.
struct Direct<'c, 'a> {
    counts: &'c mut ThreadCounts<'a>,
    others: Others<'c>,
}

/// Where the events other than entries and exits are counted: tracepoints by id into `tracepoints`,
/// samples of the samplers that `timed` marks (cpu-clock, by index) into the innermost frame.
struct Others<'c> {
    tracepoints: &'c mut HashMap<u32, u64>,
    timed: &'c [bool],
}

impl VisitEvents for Direct<'_, '_> {
    fn chunk_start(&mut self, first_tsc: u64) {
        self.counts.begin(first_tsc);
    }

    #[inline(always)]
    fn function_run(&mut self, decoder: &mut EventDecoder<'_>) -> u64 {
        self.counts.walk_run(decoder)
    }

    /// Any event the fast loop left, which includes the entries and exits among a chunk's last bytes.
    fn other(&mut self, tsc: u64, kind: EventKind, id: u32, _payload: &[u8], fields: EventFields) {
        let c = &mut *self.counts;
        let mut walk = std::mem::take(&mut c.walk);
        c.event(&mut walk, tsc, kind, id, fields, &mut self.others);
        c.walk = walk;
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::callstack::{CallStack, EndKind, StackEvent};
    use crate::reader::stream::RawEvent;

    /// Pseudo-random events over a few functions (one id above the dense range), with exits that
    /// unwind, exits of functions never entered (running before the trace began), tail exits,
    /// tracepoints, and frames left open at the end.
    pub(in crate::report) fn events(seed: u64, n: usize) -> Vec<RawEvent> {
        let ids = [1u32, 2, 3, 7, 1 << 21];
        let mut x = seed;
        let mut open: Vec<u32> = Vec::new();
        let mut t = 1_000u64;
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let r = (x >> 33) as usize;
            t += (r % 50) as u64;
            let (kind, id) = match r % 16 {
                0..=6 => {
                    let id = ids[(r >> 8) % ids.len()];
                    open.push(id);
                    (EventKind::Entry, id)
                }
                7..=11 if !open.is_empty() => (EventKind::Exit, open.pop().unwrap_or(0)),
                12 if !open.is_empty() => (EventKind::TailExit, open.pop().unwrap_or(0)),
                13 => (EventKind::Tracepoint, (r >> 8) as u32 % 3),
                // Any function: one further down the stack (unwinding) or one not open at all.
                _ => {
                    let id = ids[(r >> 8) % ids.len()];
                    if let Some(p) = open.iter().rposition(|&o| o == id) {
                        open.truncate(p);
                    }
                    (EventKind::Exit, id)
                }
            };
            out.push(RawEvent::new(t, kind, id));
        }
        out
    }

    /// The counts through `CallStack::single_pass`, by function id.
    fn reference(evs: &[RawEvent]) -> HashMap<u32, Acc> {
        let mut acc: HashMap<u32, Acc> = HashMap::new();
        let mut open: HashMap<u32, u32> = HashMap::new();
        let mut on = |e: StackEvent| match e {
            StackEvent::Enter { id, .. } => *open.entry(id).or_default() += 1,
            StackEvent::Leave {
                frame, end, how, ..
            } => {
                let a = acc.entry(frame.id).or_default();
                let dur = end - frame.start;
                a.min = if a.calls == 0 { dur } else { a.min.min(dur) };
                a.max = a.max.max(dur);
                a.calls += 1;
                a.sum += dur;
                a.self_t += frame.self_time(end);
                a.unwound += (how == EndKind::Unwound) as u64;
                a.open += (how == EndKind::OpenAtEnd) as u64;
                if frame.entered {
                    let o = open.entry(frame.id).or_default();
                    *o -= 1;
                    if *o == 0 {
                        a.total += dur;
                    }
                } else {
                    a.before += 1;
                    a.total = dur;
                }
            }
            StackEvent::OrphanExit { .. } => unreachable!("a single-pass stack has no orphans"),
        };
        let mut stack = CallStack::single_pass();
        for e in evs {
            stack.process(e.kind, e.id, e.tsc, &mut on);
        }
        stack.finish(&mut on);
        acc
    }

    #[test]
    fn counts_equal_those_of_the_shared_call_stack_whatever_the_batches() {
        let function = Representatives::default();
        let mut cases = [0u64; 3];
        for seed in 0..40u64 {
            let evs = events(seed, 3_000);
            let want = reference(&evs);
            let mut counts = ThreadCounts::new(&function);
            let mut tracepoints = HashMap::new();
            let mut rest = &evs[..];
            let mut size = 1 + seed as usize % 7;
            while !rest.is_empty() {
                let (batch, more) = rest.split_at(size.min(rest.len()));
                let batch = Batch {
                    events: batch.to_vec(),
                    extras: Vec::new(),
                };
                counts.add(&batch, &mut tracepoints, &[]);
                rest = more;
                size = size * 3 % 500 + 1;
            }
            counts.finish();
            let got: HashMap<u32, Acc> = counts
                .ids
                .iter()
                .zip(counts.acc())
                .filter(|(_, a)| a.calls > 0)
                .map(|(&id, a)| (id, a))
                .collect();
            assert_eq!(got, want, "seed {seed}");
            let tp: u64 = tracepoints.values().sum();
            let expect = evs
                .iter()
                .filter(|e| e.kind == EventKind::Tracepoint)
                .count();
            assert_eq!(tp, expect as u64, "seed {seed}");
            for a in want.values() {
                cases[0] += a.before;
                cases[1] += a.unwound;
                cases[2] += a.open;
            }
        }
        // The sequences reach every case the walk handles: frames running before the trace began,
        // unwound, and open at the end.
        assert!(cases.iter().all(|&n| n > 0), "{cases:?}");
    }

    /// The trace file of `evs` on thread 7 (chunks of 4,096 events), with functions 1, 2, 3, 7 and
    /// 2^21; `damage` edits the bytes of its last Events chunk's events in place (the chunk's CRC is
    /// made again: the damage is the writer's, not the disk's).
    fn trace_of(
        name: &str,
        evs: &[RawEvent],
        damage: impl FnOnce(&mut [u8]),
    ) -> crate::reader::Trace {
        use ferrotrace_core::builder::TraceBuilder;
        use ferrotrace_core::codec::FieldReader;
        use ferrotrace_core::format::{ChunkHeader, ChunkKind, CHUNK_HEADER_LEN, FILE_HEADER_LEN};
        use ferrotrace_core::schema::{source, EventsHeader, Mode, Payload};

        let mut b = TraceBuilder::new(Vec::new(), "/bin/t", source::XRAY, Mode::Lossless).unwrap();
        for (i, id) in [1u32, 2, 3, 7, 1 << 21].into_iter().enumerate() {
            b.function(id, 0x1000 + 0x100 * i as u64, 16, &format!("t::f{id}"))
                .unwrap();
        }
        b.thread(7, "main").unwrap();
        for e in evs {
            match e.kind {
                EventKind::Tracepoint => b.tracepoint_hit(7, e.tsc, e.id, b"x").unwrap(),
                kind => b.event(7, e.tsc, kind, e.id).unwrap(),
            }
        }
        let mut bytes = b.finish().unwrap();
        let (mut at, mut last) = (FILE_HEADER_LEN, None);
        while at < bytes.len() {
            let h = ChunkHeader::decode(bytes[at..at + CHUNK_HEADER_LEN].try_into().unwrap());
            if h.kind == ChunkKind::Events as u32 {
                last = Some((at, h));
            }
            at += CHUNK_HEADER_LEN + h.len as usize;
        }
        let (at, h) = last.expect("an Events chunk");
        let payload = &mut bytes[at + CHUNK_HEADER_LEN..at + CHUNK_HEADER_LEN + h.len as usize];
        let mut f = FieldReader::new(payload);
        EventsHeader::decode(&mut f).unwrap();
        let body_at = payload.len() - f.rest().len();
        damage(&mut payload[body_at..]);
        let header = ChunkHeader::for_payload(ChunkKind::Events, h.seq, payload).encode();
        bytes[at..at + CHUNK_HEADER_LEN].copy_from_slice(&header);
        let path =
            std::env::temp_dir().join(format!("ft-report-walk-{}-{name}.data", std::process::id()));
        std::fs::write(&path, &bytes).unwrap();
        let t = crate::reader::Trace::open(&path).unwrap();
        let _ = std::fs::remove_file(&path);
        t
    }

    /// A thread's counts by function id, its tracepoints, its last tick and the read error that ended
    /// it.
    type Walked = (Vec<(u32, Acc)>, u64, u64, Option<String>);

    /// Thread 7's counts through the batches and through the decoder.
    fn both_ways(t: &crate::reader::Trace) -> [Walked; 2] {
        let function = Representatives::default();
        let result = |counts: &mut ThreadCounts, tracepoints: HashMap<u32, u64>, err| {
            counts.finish();
            let acc = counts.ids.iter().copied().zip(counts.acc());
            let tp = tracepoints.values().sum();
            (acc.collect(), tp, counts.walk.last, err)
        };
        let mut batches = ThreadCounts::new(&function);
        let mut tracepoints = HashMap::new();
        let mut n = 0;
        let err = crate::reader::for_each_batch(t, 7, false, |batch| {
            batches.add(batch, &mut tracepoints, &[]);
            n += batch.events.len() as u64;
        })
        .unwrap();
        let from_batches = result(&mut batches, tracepoints, err.map(|e| e.to_string()));
        let mut decoded = ThreadCounts::new(&function);
        let mut tracepoints = HashMap::new();
        let mut events = t.thread_events(7).unwrap();
        assert!(!events.has_samples());
        let mut m = 0;
        let err = decoded.add_decoded(&mut events, &mut tracepoints, &[], |chunk| m += chunk);
        let from_decoder = result(&mut decoded, tracepoints, err.map(|e| e.to_string()));
        if from_batches.3.is_none() {
            assert_eq!(n, m, "events counted");
        }
        [from_batches, from_decoder]
    }

    #[test]
    fn counts_straight_from_the_decoder_equal_those_through_the_batches() {
        for seed in 0..6u64 {
            let evs = events(seed, 10_000);
            let t = trace_of(&format!("same-{seed}"), &evs, |_| {});
            let [batches, decoded] = both_ways(&t);
            assert_eq!(batches.3, None);
            assert!(batches.0.iter().any(|(_, a)| a.calls > 0));
            assert_eq!(batches, decoded, "seed {seed}");
        }
    }

    #[test]
    fn malformed_events_end_the_decoders_walk_with_the_batches_error() {
        // Calls of function 1 five ticks apart: every event is two bytes (tag, delta).
        let calls: Vec<RawEvent> = (0..6_000u64)
            .map(|i| {
                let kind = [EventKind::Entry, EventKind::Exit][i as usize % 2];
                RawEvent::new(1_000 + 5 * i, kind, 1)
            })
            .collect();
        type Damage = fn(&mut [u8]);
        let cases: [(&str, Damage, &str); 3] = [
            // Event 100 of the chunk, in the middle of a run the fast loop decodes.
            ("bad-tag", |b| b[200] = 0x0f, "bad"),
            ("overlong-varint", |b| b[200..212].fill(0xff), "varint"),
            ("truncated", |b| *b.last_mut().unwrap() = 0x80, "truncated"),
        ];
        for (name, damage, says) in cases {
            let t = trace_of(name, &calls, damage);
            let [batches, decoded] = both_ways(&t);
            let err = decoded.3.clone().unwrap_or_default();
            assert!(err.to_lowercase().contains(says), "{name}: {err}");
            assert_eq!(batches.3, decoded.3, "{name}");
        }
    }
}
