//! What `record -F`/`-N`/`-D` keep, decided on the collector thread as each thread's chunks go by: the
//! same meaning as `replay`'s and uftrace's options. `-F X` keeps X and everything it calls (while
//! inside an X frame), `-N X` drops X and everything it calls, `-D N` keeps the calls less than N
//! frames below the outermost `-F` match (below the thread's first frame without `-F`); `-N` wins.
//!
//! Deciding "everything X calls" needs every call, so in this mode every function is patched and
//! records as without filters: the filters make the file smaller, not the program faster (the cost is
//! that of tracing everything; docs/architecture.md, "Filters"). Events that are not function entries and exits
//! (tracepoints, allocations, lost events, waits) are all kept: their own options select them.
//!
//! Per thread, a stack of the function ids open in it, each with whether its entry was kept: an exit
//! pops up to the frame it belongs to (frames above it were left by unwinding or `longjmp`, without
//! their exit), and is kept exactly when its entry was. An exit of a function that was already running
//! when the thread's tracing began is kept when nothing selects subtrees out of its thread (no `-F`,
//! no `-N` match in progress).

use std::collections::HashMap;

use ferrotrace_core::record::{EventKind, Record};

use crate::lifecycle::config::Config;

/// A function's flag: a `-F` pattern matches it.
pub const INCLUDE: u8 = 1;
/// A function's flag: a `-N` pattern matches it.
pub const EXCLUDE: u8 = 2;
/// A function's flags above these two: the number of its trigger (`-T`), from 1; 0 for none.
const TRIGGER_SHIFT: u32 = 2;
/// Triggers a recording can have: as many as the flags can number.
pub const MAX_TRIGGERS: usize = ferrotrace_core::trigger::MAX_TRIGGERS;
const _: () = assert!(MAX_TRIGGERS <= (u8::MAX >> TRIGGER_SHIFT) as usize);

/// The flags that make trigger `index` (of [`MAX_TRIGGERS`]) a function's own.
pub fn trigger_flag(index: usize) -> u8 {
    ((index + 1) as u8) << TRIGGER_SHIFT
}

/// The trigger a function's flags name.
fn trigger_of(flags: u8) -> Option<usize> {
    match flags >> TRIGGER_SHIFT {
        0 => None,
        n => Some(n as usize - 1),
    }
}

/// What a `-T` trigger does while its function runs, in ticks (`ferrotrace_core::trigger::Actions`).
#[derive(Clone, Copy, Debug, Default)]
pub struct Trigger {
    /// `depth=N`: the function and N − 1 levels below it are kept, in place of `-D`.
    pub depth: Option<usize>,
    /// `time=T`: `-t` for the function and what it calls (where longer than `-t`).
    pub min_ticks: Option<u64>,
    /// `trace`: the function is kept whatever the time filter says.
    pub always: bool,
}

/// The selection of all threads.
pub struct Filter {
    options: Options,
    threads: HashMap<u32, ThreadFilter>,
    kept: Vec<Record>,
}

/// What the options ask for, the same for every thread.
struct Options {
    include: bool,
    max_depth: Option<usize>,
    /// `-t`: calls shorter than this many ticks are left out (0: none is).
    min_ticks: u64,
    triggers: Vec<Trigger>,
    /// Every held call waits for the same time (no `time=` trigger): the oldest is the first due.
    uniform: bool,
}

/// What became of a frame's entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Entry {
    /// Left out by `-F`/`-N`/`-D` (so is its exit).
    Dropped,
    /// Written (so will its exit be).
    Kept,
    /// Selected, but younger than its time filter so far: its records wait in `ThreadFilter::held`
    /// from this index, until the call has lasted that long (written then) or returns sooner
    /// (dropped).
    Held(usize),
}

/// An open frame.
struct Frame {
    id: u32,
    entry: Entry,
    /// Ticks the call must last to be kept (0: any).
    min_ticks: u64,
}

/// A trigger's settings, in force while its frame is open.
struct Scope {
    /// The trigger's frame (stack index).
    frame: usize,
    /// Frames at this stack depth and deeper are left out (`depth=`); `None`: `-D`'s rule.
    depth_end: Option<usize>,
    /// The time filter inside.
    min_ticks: u64,
}

#[derive(Default)]
struct ThreadFilter {
    /// Open frames. The selected frames are consecutive (from the `-F` match down to the depth limit
    /// or a `-N` match), and the held ones end them: a frame's entry is written before any of its
    /// callees' records, so an older frame is never held below a written one.
    stack: Vec<Frame>,
    /// The held entries' records (each with its payload slots), outermost first.
    held: Vec<Record>,
    /// The stack index of the outermost held frame, while `held` is not empty.
    held_from: usize,
    /// The first tick at which a held call will have lasted long enough (`u64::MAX`: none held).
    due: u64,
    /// The triggers of open frames, outermost first.
    scopes: Vec<Scope>,
    /// Stack depth of the outermost `-F` match in progress.
    base: Option<usize>,
    /// Stack depth of the outermost `-N` match in progress.
    hide: Option<usize>,
}

/// What `ThreadFilter::enter` decided of an entry.
enum Decision {
    Drop,
    Keep,
    Hold(u64),
}

impl Filter {
    /// A selection by `-F` (`include`: there is one), `-D` and `-t` (`min_ticks`, 0 for none).
    pub fn new(include: bool, max_depth: Option<usize>, min_ticks: u64) -> Filter {
        Filter {
            options: Options {
                include,
                max_depth,
                min_ticks,
                triggers: Vec::new(),
                uniform: true,
            },
            threads: HashMap::new(),
            kept: Vec::new(),
        }
    }

    /// The selection with `-T` triggers, numbered as [`trigger_flag`] numbers them.
    pub fn with_triggers(mut self, triggers: Vec<Trigger>) -> Filter {
        self.options.uniform = triggers.iter().all(|t| t.min_ticks.is_none());
        self.options.triggers = triggers;
        self
    }

    /// The selection `config` asks for. Times become ticks by a 2 ms calibration, taken only when a
    /// time filter is asked for.
    pub fn of_config(config: &Config) -> Filter {
        let timed =
            config.min_call_ns > 0 || config.triggers.iter().any(|(_, a)| a.time_ns.is_some());
        let converter = timed.then(|| crate::buffers::clock::calibrate_now().1);
        let ticks = |ns: u64| match (&converter, ns) {
            (Some(c), 1..) => c.ns_to_ticks(ns).max(1),
            _ => 0,
        };
        Filter::new(
            config.includes(),
            config.max_depth,
            ticks(config.min_call_ns),
        )
        .with_triggers(
            config
                .triggers
                .iter()
                .map(|(_, a)| Trigger {
                    depth: a.depth,
                    min_ticks: a.time_ns.map(ticks),
                    always: a.trace,
                })
                .collect(),
        )
    }

    /// A thread starts with its chunk number 0: forgets what an ended thread of the same tid left
    /// (entries it held were of calls shorter than their time filter up to its last event: left out).
    pub fn thread_started(&mut self, tid: u32) {
        self.threads.remove(&tid);
    }

    /// The records of thread `tid`'s next chunk that the filters keep, payload slots with their
    /// record: with a time filter, entries held from earlier chunks come out here once their calls
    /// are long enough. `flags(id)` gives a function's flags (`INCLUDE`, `EXCLUDE`, its trigger).
    pub fn apply(
        &mut self,
        tid: u32,
        records: &[Record],
        mut flags: impl FnMut(u32) -> u8,
    ) -> &[Record] {
        self.kept.clear();
        let th = self.threads.entry(tid).or_insert_with(|| ThreadFilter {
            due: u64::MAX,
            ..ThreadFilter::default()
        });
        let o = &self.options;
        let mut i = 0;
        while let Some(r) = records.get(i) {
            let n = (1 + r.payload_slots()).min(records.len() - i);
            let these = &records[i..i + n];
            if r.tsc >= th.due {
                // Calls open for their time filter's time are long enough whenever they return.
                th.release_due(r.tsc, o.uniform, &mut self.kept);
            }
            let keep = match r.kind() {
                Some(EventKind::Entry) => match th.enter(r.id(), flags(r.id()), o) {
                    Decision::Drop => false,
                    Decision::Keep => {
                        // Written now: so are the calls it is in.
                        th.release_all(&mut self.kept);
                        true
                    }
                    Decision::Hold(min_ticks) => {
                        th.hold(these, min_ticks, o.uniform);
                        false
                    }
                },
                Some(EventKind::Exit | EventKind::TailExit) => {
                    th.exit(r.id(), o.include, o.uniform)
                }
                // The recorder's own notes say nothing of the program's calls.
                Some(EventKind::Lost | EventKind::Wait) => true,
                _ => {
                    // A tracepoint, an allocation...: inside the calls open now, which are written
                    // first so that it stays inside them.
                    th.release_all(&mut self.kept);
                    true
                }
            };
            if keep {
                self.kept.extend_from_slice(these);
            }
            i += n;
        }
        &self.kept
    }
}

impl ThreadFilter {
    /// Pushes a frame and decides its entry.
    fn enter(&mut self, id: u32, flags: u8, f: &Options) -> Decision {
        let depth = self.stack.len();
        let outer = self.scopes.last();
        let (outer_end, outer_min) =
            outer.map_or((None, f.min_ticks), |s| (s.depth_end, s.min_ticks));
        let trigger = trigger_of(flags).and_then(|i| f.triggers.get(i));
        if let Some(t) = trigger {
            self.scopes.push(Scope {
                frame: depth,
                depth_end: t.depth.map(|n| depth + n).or(outer_end),
                // uftrace's: a trigger's time= applies where it is longer than -t (measured with
                // uftrace 0.13: `-t 100us -T main@time=1us` keeps no call under 100 µs).
                min_ticks: t.min_ticks.map_or(outer_min, |m| m.max(f.min_ticks)),
            });
        }
        let (depth_end, min_ticks) = self
            .scopes
            .last()
            .map_or((None, f.min_ticks), |s| (s.depth_end, s.min_ticks));
        let selected = if self.hide.is_some() {
            false
        } else if flags & EXCLUDE != 0 {
            self.hide = Some(depth);
            false
        } else {
            if f.include && self.base.is_none() && flags & INCLUDE != 0 {
                self.base = Some(depth);
            }
            (!f.include || self.base.is_some())
                && match depth_end {
                    Some(end) => depth < end,
                    None => f
                        .max_depth
                        .is_none_or(|m| depth - self.base.unwrap_or(0) < m),
                }
        };
        let (entry, decision) = match selected {
            false => (Entry::Dropped, Decision::Drop),
            true if min_ticks == 0 || trigger.is_some_and(|t| t.always) => {
                (Entry::Kept, Decision::Keep)
            }
            true => (Entry::Kept, Decision::Hold(min_ticks)),
        };
        self.stack.push(Frame {
            id,
            entry,
            min_ticks,
        });
        decision
    }

    /// Holds the entry just pushed (`records`: it and its payload) until its call has lasted
    /// `min_ticks`.
    fn hold(&mut self, records: &[Record], min_ticks: u64, uniform: bool) {
        if self.held.is_empty() {
            self.held_from = self.stack.len() - 1;
        }
        let due = records[0].tsc.saturating_add(min_ticks);
        if let Some(top) = self.stack.last_mut() {
            top.entry = Entry::Held(self.held.len());
            self.held.extend_from_slice(records);
        }
        // With one time for all, the outermost held call is the first due.
        if !uniform || self.due == u64::MAX {
            self.due = self.due.min(due);
        }
    }

    /// Writes the held entries of calls that have lasted their time by `now`, and those of the held
    /// calls they are in.
    fn release_due(&mut self, now: u64, uniform: bool, out: &mut Vec<Record>) {
        // The innermost held frame that is due: it and every held frame outside it come out.
        let mut last_due = None;
        for (i, frame) in self.stack.iter().enumerate().skip(self.held_from) {
            // (A frame left out can sit between held ones: below a `depth=` trigger's frame that
            // `-D` left out.)
            let Entry::Held(at) = frame.entry else {
                continue;
            };
            if now >= self.held[at].tsc.saturating_add(frame.min_ticks) {
                last_due = Some(i);
            } else if uniform {
                break;
            }
        }
        let Some(last) = last_due else {
            self.due = self.next_due(uniform);
            return;
        };
        let end = self.stack[last + 1..]
            .iter()
            .find_map(|f| match f.entry {
                Entry::Held(at) => Some(at),
                _ => None,
            })
            .unwrap_or(self.held.len());
        out.extend(self.held.drain(..end));
        for frame in &mut self.stack[self.held_from..=last] {
            if matches!(frame.entry, Entry::Held(_)) {
                frame.entry = Entry::Kept;
            }
        }
        self.held_from = last + 1;
        for frame in &mut self.stack[self.held_from..] {
            if let Entry::Held(at) = &mut frame.entry {
                *at -= end;
            }
        }
        self.due = self.next_due(uniform);
    }

    /// When the next held call will be due.
    fn next_due(&self, uniform: bool) -> u64 {
        let deadline = |f: &Frame| match f.entry {
            Entry::Held(at) => Some(self.held[at].tsc.saturating_add(f.min_ticks)),
            _ => None,
        };
        if self.held.is_empty() {
            return u64::MAX;
        }
        let held = self.stack[self.held_from..].iter().filter_map(deadline);
        if uniform {
            held.take(1).min()
        } else {
            held.min()
        }
        .unwrap_or(u64::MAX)
    }

    /// Writes every held entry.
    fn release_all(&mut self, out: &mut Vec<Record>) {
        if self.held.is_empty() {
            return;
        }
        for frame in &mut self.stack[self.held_from..] {
            if matches!(frame.entry, Entry::Held(_)) {
                frame.entry = Entry::Kept;
            }
        }
        out.append(&mut self.held);
        self.due = u64::MAX;
    }

    /// Pops a frame; true when its exit is kept (its entry was written).
    fn exit(&mut self, id: u32, include: bool, uniform: bool) -> bool {
        let Some(at) = self.stack.iter().rposition(|f| f.id == id) else {
            // Running when the thread's tracing began.
            return !include && self.hide.is_none();
        };
        let keep = self.stack[at].entry == Entry::Kept;
        // The call returned sooner than its time filter (or frames above it were unwound): what it
        // held, and what the frames above it held, is left out.
        if let Some(held) = self.stack[at..].iter().find_map(|f| match f.entry {
            Entry::Held(h) => Some(h),
            _ => None,
        }) {
            self.held.truncate(held);
            self.stack.truncate(at);
            self.due = self.next_due(uniform);
        } else {
            self.stack.truncate(at);
        }
        while self.scopes.last().is_some_and(|s| s.frame >= at) {
            self.scopes.pop();
        }
        if self.hide.is_some_and(|h| h >= at) {
            self.hide = None;
        }
        if self.base.is_some_and(|b| b >= at) {
            self.base = None;
        }
        keep
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const X: u32 = 1;
    const Y: u32 = 2;
    const Z: u32 = 3;
    const MAIN: u32 = 4;

    fn run(
        include: bool,
        depth: Option<usize>,
        flags: &[(u32, u8)],
        events: &[(EventKind, u32)],
    ) -> Vec<(EventKind, u32)> {
        let records: Vec<Record> = events
            .iter()
            .map(|&(k, id)| Record::new(1, k, id))
            .collect();
        let mut f = Filter::new(include, depth, 0);
        f.apply(7, &records, |id| {
            flags.iter().find(|f| f.0 == id).map_or(0, |f| f.1)
        })
        .iter()
        .map(|r| (r.kind().unwrap(), r.id()))
        .collect()
    }

    use EventKind::{Entry as E, Exit as R};

    // main { X { Y { Z } } Y }
    const CALLS: &[(EventKind, u32)] = &[
        (E, MAIN),
        (E, X),
        (E, Y),
        (E, Z),
        (R, Z),
        (R, Y),
        (R, X),
        (E, Y),
        (R, Y),
        (R, MAIN),
    ];

    #[test]
    fn include_keeps_the_subtree_and_depth_counts_from_the_match() {
        let x = &[(X, INCLUDE)];
        assert_eq!(run(true, None, x, CALLS), CALLS[1..7].to_vec());
        assert_eq!(
            run(true, Some(2), x, CALLS),
            vec![(E, X), (E, Y), (R, Y), (R, X)]
        );
        assert_eq!(
            run(false, Some(2), &[], CALLS),
            vec![(E, MAIN), (E, X), (R, X), (E, Y), (R, Y), (R, MAIN)]
        );
    }

    #[test]
    fn exclude_drops_the_subtree_and_wins() {
        assert_eq!(
            run(false, None, &[(X, EXCLUDE)], CALLS),
            vec![(E, MAIN), (E, Y), (R, Y), (R, MAIN)]
        );
        assert_eq!(
            run(true, None, &[(X, INCLUDE), (Y, EXCLUDE)], CALLS),
            vec![(E, X), (R, X)]
        );
    }

    #[test]
    fn a_new_thread_of_an_old_tid_starts_outside_the_filter() {
        let mut f = Filter::new(true, None, 0);
        let flags = |id| if id == X { INCLUDE } else { 0 };
        // The old thread ends inside X (its exit never recorded).
        let old = [Record::new(1, E, X)];
        assert_eq!(f.apply(7, &old, flags).len(), 1);
        f.thread_started(7);
        let new = [Record::new(2, E, Y), Record::new(3, R, Y)];
        assert!(f.apply(7, &new, flags).is_empty(), "Y is not inside X");
    }

    #[test]
    fn unwound_frames_and_calls_running_at_start() {
        // Y unwound inside X (no exit), then X returns; an exit of a function running at start.
        let events = &[(R, Z), (E, X), (E, Y), (R, X), (E, Y), (R, Y)];
        assert_eq!(
            run(true, None, &[(X, INCLUDE)], events),
            vec![(E, X), (E, Y), (R, X)]
        );
        assert_eq!(run(false, None, &[], events), events.to_vec());
    }

    /// A timed event: `(tsc, kind, function id)`.
    type Timed = (u64, EventKind, u32);

    /// What `f` lets out of thread 7's `events` (one chunk), X's flags being `x_flags`.
    fn through(f: &mut Filter, x_flags: u8, events: &[Timed]) -> Vec<Timed> {
        let records: Vec<Record> = events
            .iter()
            .map(|&(t, k, id)| Record::new(t, k, id))
            .collect();
        f.apply(7, &records, |id| if id == X { x_flags } else { 0 })
            .iter()
            .map(|r| (r.tsc, r.kind().unwrap(), r.id()))
            .collect()
    }

    /// Events through a `-t` filter of `min` ticks (and `-F X` with `include`), in the chunks given;
    /// what each chunk lets out.
    fn timed(include: bool, min: u64, chunks: &[&[Timed]]) -> Vec<Vec<Timed>> {
        let mut f = Filter::new(include, None, min);
        chunks
            .iter()
            .map(|events| through(&mut f, INCLUDE, events))
            .collect()
    }

    #[test]
    fn time_filter_keeps_the_long_calls_and_their_callers() {
        // main 0..100 { X 10..60 { Y 20..25, Z 30..50 }, Y 70..72 }: with -t 20, main, X and Z.
        let events = [
            (0, E, MAIN),
            (10, E, X),
            (20, E, Y),
            (25, R, Y),
            (30, E, Z),
            (50, R, Z),
            (60, R, X),
            (70, E, Y),
            (72, R, Y),
            (100, R, MAIN),
        ];
        let kept = timed(false, 20, &[&events]).concat();
        assert_eq!(
            kept,
            vec![
                (0, E, MAIN),
                (10, E, X),
                (30, E, Z),
                (50, R, Z),
                (60, R, X),
                (100, R, MAIN),
            ]
        );
        // Only inside -F X: main is not selected, so never written however long.
        let kept = timed(true, 20, &[&events]).concat();
        assert_eq!(kept, vec![(10, E, X), (30, E, Z), (50, R, Z), (60, R, X)]);
    }

    #[test]
    fn time_filter_holds_entries_across_chunks_and_lets_events_out_in_order() {
        // The entry of X comes out with the chunk in which X has lasted long enough; a tracepoint
        // inside a young call writes the calls it is in first.
        let first: &[Timed] = &[(0, E, X), (5, E, Y)];
        let second: &[Timed] = &[
            (6, EventKind::Tracepoint, 9),
            (8, R, Y),
            (12, E, Z),
            (13, R, Z),
            (40, R, X),
        ];
        let out = timed(false, 30, &[first, second]);
        assert!(out[0].is_empty(), "{out:?}");
        assert_eq!(
            out[1],
            vec![
                (0, E, X),
                (5, E, Y),
                (6, EventKind::Tracepoint, 9),
                (8, R, Y),
                (40, R, X),
            ]
        );
        // A call unwound (no exit) inside a held one goes with it.
        let out = timed(false, 30, &[&[(0, E, X), (1, E, Y), (2, R, X)]]);
        assert!(out[0].is_empty(), "{out:?}");
    }

    /// Events through a filter of `-t min` with trigger 0 (`trigger`) on X.
    fn triggered(min: u64, trigger: Trigger, events: &[Timed]) -> Vec<Timed> {
        let mut f = Filter::new(false, None, min).with_triggers(vec![trigger]);
        through(&mut f, trigger_flag(0), events)
    }

    #[test]
    fn triggers_change_depth_and_time_inside_their_function() {
        // main 0..100 { X 10..60 { Y 20..25 { Z 21..22 }, Z 30..50 }, Y 70..72 }
        let events = [
            (0, E, MAIN),
            (10, E, X),
            (20, E, Y),
            (21, E, Z),
            (22, R, Z),
            (25, R, Y),
            (30, E, Z),
            (50, R, Z),
            (60, R, X),
            (70, E, Y),
            (72, R, Y),
            (100, R, MAIN),
        ];
        let depth = |n| Trigger {
            depth: Some(n),
            ..Trigger::default()
        };
        // X@depth=1: X alone below it; outside X everything.
        assert_eq!(
            triggered(0, depth(1), &events),
            vec![
                (0, E, MAIN),
                (10, E, X),
                (60, R, X),
                (70, E, Y),
                (72, R, Y),
                (100, R, MAIN)
            ]
        );
        // X@time=10: inside X only calls of 10 ticks or more; outside, every call.
        let time = Trigger {
            min_ticks: Some(10),
            ..Trigger::default()
        };
        assert_eq!(
            triggered(0, time, &events),
            vec![
                (0, E, MAIN),
                (10, E, X),
                (30, E, Z),
                (50, R, Z),
                (60, R, X),
                (70, E, Y),
                (72, R, Y),
                (100, R, MAIN)
            ]
        );
        // -t 1000 with X@trace: X kept however short, and so main, whose exit then is too.
        let always = Trigger {
            always: true,
            ..Trigger::default()
        };
        assert_eq!(
            triggered(1000, always, &events),
            vec![(0, E, MAIN), (10, E, X), (60, R, X), (100, R, MAIN)]
        );
        // -t 3 with X@time=30: inside X, calls of 30 ticks or more (X itself); outside, of 3. A
        // time= shorter than -t changes nothing (uftrace's rule).
        let time = |min| Trigger {
            min_ticks: Some(min),
            ..Trigger::default()
        };
        assert_eq!(
            triggered(3, time(30), &events),
            vec![(0, E, MAIN), (10, E, X), (60, R, X), (100, R, MAIN)]
        );
        assert_eq!(
            triggered(3, time(1), &events),
            triggered(3, time(3), &events)
        );
    }
}
