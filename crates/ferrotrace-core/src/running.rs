//! Which functions were already running when a thread's tracing began (feature `std`).
//!
//! A function entered before tracing began shows its exit without an entry. [`RunningAtStart`] replays a
//! thread's entries and exits and collects those exits, outermost first: the collector does it as it
//! writes each chunk (so that a reader can replay from the first chunk on, see
//! [`crate::schema::RunningAtStart`]), and the reader does it in a pre-scan when a trace lacks that chunk.
//! Memory is the call depth.
//!
//! ```
//! use ferrotrace_core::record::EventKind;
//! use ferrotrace_core::running::RunningAtStart;
//!
//! let mut r = RunningAtStart::default();
//! // `b` returns, then `a`: both were running before the first event.
//! for (kind, id) in [(EventKind::Entry, 3), (EventKind::Exit, 3), (EventKind::Exit, 2), (EventKind::Exit, 1)] {
//!     r.observe(kind, id);
//! }
//! assert_eq!(r.outermost_first().collect::<Vec<_>>(), [1, 2]);
//! ```

use crate::record::EventKind;

/// One thread's stack as replayed, and the exits that matched nothing.
#[derive(Clone, Debug, Default)]
pub struct RunningAtStart {
    stack: Vec<u32>,
    orphans: Vec<u32>,
}

impl RunningAtStart {
    /// Takes the thread's next event (other kinds than entries and exits are ignored).
    #[inline]
    pub fn observe(&mut self, kind: EventKind, id: u32) {
        match kind {
            EventKind::Entry => self.stack.push(id),
            EventKind::Exit | EventKind::TailExit => {
                match self.stack.iter().rposition(|&f| f == id) {
                    Some(pos) => self.stack.truncate(pos),
                    None => {
                        // Everything open returned with it (unwound), and it was running before.
                        self.stack.clear();
                        self.orphans.push(id);
                    }
                }
            }
            _ => {}
        }
    }

    /// [`RunningAtStart::observe`] for a function event as the hot path stores it: `kind` is 0
    /// (Entry), 1 (Exit) or 2 (TailExit). The encoder calls it for every such record, so the usual
    /// exit, of the innermost open function, is one comparison.
    #[inline(always)]
    pub fn observe_function(&mut self, kind: u64, id: u32) {
        if kind == EventKind::Entry as u64 {
            self.stack.push(id);
        } else if self.stack.last() == Some(&id) {
            self.stack.pop();
        } else {
            self.unmatched_exit(id);
        }
    }

    /// An exit that is not of the innermost open function: see [`RunningAtStart::observe`].
    #[cold]
    fn unmatched_exit(&mut self, id: u32) {
        self.observe(EventKind::Exit, id);
    }

    /// The functions running when tracing began, outermost first.
    pub fn outermost_first(&self) -> impl Iterator<Item = u32> + '_ {
        self.orphans.iter().rev().copied()
    }

    /// True when every exit so far matched an entry.
    pub fn is_empty(&self) -> bool {
        self.orphans.is_empty()
    }
}
