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

/// A function's flag: a `-F` pattern matches it.
pub const INCLUDE: u8 = 1;
/// A function's flag: a `-N` pattern matches it.
pub const EXCLUDE: u8 = 2;

/// The selection of all threads.
pub struct Filter {
    include: bool,
    max_depth: Option<usize>,
    /// `-t`: calls shorter than this many ticks are left out (0: none is).
    min_ticks: u64,
    threads: HashMap<u32, ThreadFilter>,
    kept: Vec<Record>,
}

/// What became of a frame's entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Entry {
    /// Left out by `-F`/`-N`/`-D` (so is its exit).
    Dropped,
    /// Written (so will its exit be).
    Kept,
    /// Selected, but younger than `-t`'s time so far: its records wait in `ThreadFilter::held` from
    /// this index, until the call has lasted that long (written then) or returns sooner (dropped).
    Held(usize),
}

#[derive(Default)]
struct ThreadFilter {
    /// Open frames: function id and what became of its entry. The selected frames are consecutive
    /// (from the `-F` match down to `-D`'s limit or a `-N` match), and the held ones end them: a
    /// frame's entry is written before any of its callees' records, so an older frame is never held
    /// below a written one.
    stack: Vec<(u32, Entry)>,
    /// The held entries' records (each with its payload slots), outermost first.
    held: Vec<Record>,
    /// The stack index of the outermost held frame, while `held` is not empty.
    held_from: usize,
    /// Stack depth of the outermost `-F` match in progress.
    base: Option<usize>,
    /// Stack depth of the outermost `-N` match in progress.
    hide: Option<usize>,
}

impl Filter {
    /// A selection by `-F` (`include`: there is one), `-D` and `-t` (`min_ticks`, 0 for none).
    pub fn new(include: bool, max_depth: Option<usize>, min_ticks: u64) -> Filter {
        Filter {
            include,
            max_depth,
            min_ticks,
            threads: HashMap::new(),
            kept: Vec::new(),
        }
    }

    /// A thread starts with its chunk number 0: forgets what an ended thread of the same tid left
    /// (entries it held were of calls shorter than `-t` up to its last event: left out).
    pub fn thread_started(&mut self, tid: u32) {
        self.threads.remove(&tid);
    }

    /// The records of thread `tid`'s next chunk that the filters keep, payload slots with their
    /// record: with `-t`, entries held from earlier chunks come out here once their calls are long
    /// enough. `flags(id)` gives a function's `INCLUDE`/`EXCLUDE` flags.
    pub fn apply(
        &mut self,
        tid: u32,
        records: &[Record],
        mut flags: impl FnMut(u32) -> u8,
    ) -> &[Record] {
        self.kept.clear();
        let th = self.threads.entry(tid).or_default();
        let mut i = 0;
        while let Some(r) = records.get(i) {
            let n = (1 + r.payload_slots()).min(records.len() - i);
            let these = &records[i..i + n];
            if self.min_ticks > 0 {
                // Calls open for `-t`'s time are long enough whenever they return: out with them.
                th.release_aged(r.tsc, self.min_ticks, &mut self.kept);
            }
            let keep = match r.kind() {
                Some(EventKind::Entry) => {
                    let selected = th.enter(r.id(), flags(r.id()), self.include, self.max_depth);
                    if selected && self.min_ticks > 0 {
                        th.hold(these);
                        false
                    } else {
                        selected
                    }
                }
                Some(EventKind::Exit | EventKind::TailExit) => th.exit(r.id(), self.include),
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
    /// Pushes a frame; true when its entry is selected.
    fn enter(&mut self, id: u32, flags: u8, include: bool, max_depth: Option<usize>) -> bool {
        let depth = self.stack.len();
        let keep = if self.hide.is_some() {
            false
        } else if flags & EXCLUDE != 0 {
            self.hide = Some(depth);
            false
        } else {
            if include && self.base.is_none() && flags & INCLUDE != 0 {
                self.base = Some(depth);
            }
            (!include || self.base.is_some())
                && max_depth.is_none_or(|m| depth - self.base.unwrap_or(0) < m)
        };
        let entry = if keep { Entry::Kept } else { Entry::Dropped };
        self.stack.push((id, entry));
        keep
    }

    /// Holds the entry just pushed (`records`: it and its payload) until its call is long enough.
    fn hold(&mut self, records: &[Record]) {
        if self.held.is_empty() {
            self.held_from = self.stack.len() - 1;
        }
        if let Some(top) = self.stack.last_mut() {
            top.1 = Entry::Held(self.held.len());
            self.held.extend_from_slice(records);
        }
    }

    /// Writes the held entries of calls open since at least `min_ticks` before `now`: the outermost
    /// held ones, which are the oldest. (Per record: one comparison when none is due.)
    fn release_aged(&mut self, now: u64, min_ticks: u64, out: &mut Vec<Record>) {
        if self
            .held
            .first()
            .is_none_or(|oldest| now.wrapping_sub(oldest.tsc) < min_ticks)
        {
            return;
        }
        let mut end = self.held.len();
        let mut released = 0;
        for frame in &mut self.stack[self.held_from..] {
            let Entry::Held(at) = frame.1 else { break };
            if now.wrapping_sub(self.held[at].tsc) < min_ticks {
                end = at;
                break;
            }
            frame.1 = Entry::Kept;
            released += 1;
        }
        out.extend(self.held.drain(..end));
        self.held_from += released;
        for frame in &mut self.stack[self.held_from..] {
            if let Entry::Held(at) = &mut frame.1 {
                *at -= end;
            }
        }
    }

    /// Writes every held entry.
    fn release_all(&mut self, out: &mut Vec<Record>) {
        if self.held.is_empty() {
            return;
        }
        for frame in &mut self.stack[self.held_from..] {
            if matches!(frame.1, Entry::Held(_)) {
                frame.1 = Entry::Kept;
            }
        }
        out.append(&mut self.held);
    }

    /// Pops a frame; true when its exit is kept (its entry was written).
    fn exit(&mut self, id: u32, include: bool) -> bool {
        let Some(at) = self.stack.iter().rposition(|f| f.0 == id) else {
            // Running when the thread's tracing began.
            return !include && self.hide.is_none();
        };
        let keep = self.stack[at].1 == Entry::Kept;
        // The call returned sooner than `-t` (or frames above it were unwound): what it held, and
        // what the frames above it held, is left out.
        if let Some(held) = self.stack[at..].iter().find_map(|f| match f.1 {
            Entry::Held(h) => Some(h),
            _ => None,
        }) {
            self.held.truncate(held);
        }
        self.stack.truncate(at);
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

    /// `(tsc, kind, id)` events through a `-t` filter of `min` ticks (and `-F X` with `include`), in
    /// the chunks given; what each chunk lets out.
    fn timed(
        include: bool,
        min: u64,
        chunks: &[&[(u64, EventKind, u32)]],
    ) -> Vec<Vec<(u64, EventKind, u32)>> {
        let mut f = Filter::new(include, None, min);
        chunks
            .iter()
            .map(|events| {
                let records: Vec<Record> = events
                    .iter()
                    .map(|&(t, k, id)| Record::new(t, k, id))
                    .collect();
                f.apply(7, &records, |id| if id == X { INCLUDE } else { 0 })
                    .iter()
                    .map(|r| (r.tsc, r.kind().unwrap(), r.id()))
                    .collect()
            })
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
        let first: &[(u64, EventKind, u32)] = &[(0, E, X), (5, E, Y)];
        let second: &[(u64, EventKind, u32)] = &[
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
}
