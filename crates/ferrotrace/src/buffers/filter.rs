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
    threads: HashMap<u32, ThreadFilter>,
    kept: Vec<Record>,
}

#[derive(Default)]
struct ThreadFilter {
    /// Open frames: function id and whether its entry was kept.
    stack: Vec<(u32, bool)>,
    /// Stack depth of the outermost `-F` match in progress.
    base: Option<usize>,
    /// Stack depth of the outermost `-N` match in progress.
    hide: Option<usize>,
}

impl Filter {
    /// A selection by `-F` (`include`: there is one) and `-D`.
    pub fn new(include: bool, max_depth: Option<usize>) -> Filter {
        Filter {
            include,
            max_depth,
            threads: HashMap::new(),
            kept: Vec::new(),
        }
    }

    /// A thread starts with its chunk number 0: forgets what an ended thread of the same tid left.
    pub fn thread_started(&mut self, tid: u32) {
        self.threads.remove(&tid);
    }

    /// The records of thread `tid`'s next chunk that the filters keep, payload slots with their
    /// record. `flags(id)` gives a function's `INCLUDE`/`EXCLUDE` flags.
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
            let n = 1 + r.payload_slots();
            let keep = match r.kind() {
                Some(EventKind::Entry) => {
                    th.enter(r.id(), flags(r.id()), self.include, self.max_depth)
                }
                Some(EventKind::Exit | EventKind::TailExit) => th.exit(r.id(), self.include),
                _ => true,
            };
            if keep {
                self.kept
                    .extend_from_slice(&records[i..(i + n).min(records.len())]);
            }
            i += n;
        }
        &self.kept
    }
}

impl ThreadFilter {
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
        self.stack.push((id, keep));
        keep
    }

    fn exit(&mut self, id: u32, include: bool) -> bool {
        let Some(at) = self.stack.iter().rposition(|f| f.0 == id) else {
            // Running when the thread's tracing began.
            return !include && self.hide.is_none();
        };
        let keep = self.stack[at].1;
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
        let mut f = Filter::new(include, depth);
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
        let mut f = Filter::new(true, None);
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
}
