//! Call-stack reconstruction shared by every analysis: turns one thread's entry/exit events into opened
//! and closed frames, and copes with everything a real trace throws at it.
//!
//! - **Functions already running when tracing began** show an exit without an entry. A pre-scan
//!   ([`initial_stacks`]) finds them, and a [`CallStack`] built [`with_initial`](CallStack::with_initial)
//!   opens them at the thread's first event, marked `entered: false`.
//! - **Frames unwound by a panic** (caught by `catch_unwind`) get no exit event: when an exit arrives for a
//!   frame further down the stack, the frames above it are closed as [`EndKind::Unwound`] at that time.
//! - **Tail calls**: a `TailExit` closes the frame like an exit ([`EndKind::TailCall`]).
//! - **Frames still open at the end** (process::exit from a thread, abort) are closed by
//!   [`CallStack::finish`] as [`EndKind::OpenAtEnd`] at the thread's last event.
//! - An exit that matches nothing even after the pre-scan (only possible without one) closes every open
//!   frame as unwound and is reported as [`StackEvent::OrphanExit`].
//!
//! Times are plain `u64`s in whatever unit the caller feeds (TSC ticks or nanoseconds): the stack only
//! subtracts them. Memory is the call depth.
//!
//! ```
//! use ferrotrace_analysis::callstack::{CallStack, EndKind, StackEvent};
//! use ferrotrace_analysis::reader::EventKind;
//!
//! let mut st = CallStack::new();
//! let mut closed = Vec::new();
//! for (kind, id, t) in [(EventKind::Entry, 1, 0), (EventKind::Entry, 2, 10), (EventKind::Exit, 2, 30),
//!                       (EventKind::Exit, 1, 50)] {
//!     st.process(kind, id, t, &mut |e| {
//!         if let StackEvent::Leave { frame, end, how, .. } = e {
//!             closed.push((frame.id, end - frame.start, frame.self_time(end), how));
//!         }
//!     });
//! }
//! assert_eq!(closed, [(2, 20, 20, EndKind::Return), (1, 50, 30, EndKind::Return)]);
//! ```

use std::collections::HashMap;

use ferrotrace_core::running::RunningAtStart;

use crate::reader::{EventKind, ReadError, Trace};

/// How a frame was closed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EndKind {
    /// Its exit event.
    Return,
    /// Its tail-exit event (it left by a tail call).
    TailCall,
    /// An exit of a frame further down the stack arrived first: unwound by a panic.
    Unwound,
    /// Still open at the end of the thread's events.
    OpenAtEnd,
}

impl EndKind {
    /// A short word for displays: `""` for a normal return.
    pub fn note(self) -> &'static str {
        match self {
            EndKind::Return | EndKind::TailCall => "",
            EndKind::Unwound => "unwound",
            EndKind::OpenAtEnd => "still running at end of trace",
        }
    }
}

/// An open frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Frame {
    /// Function id.
    pub id: u32,
    /// When it was entered (for `entered == false`: the thread's first event).
    pub start: u64,
    /// False for a function already running when tracing began.
    pub entered: bool,
    /// Time spent in closed children.
    pub child: u64,
}

impl Frame {
    /// Time in this frame minus time in its children, if it ends at `end`.
    pub fn self_time(&self, end: u64) -> u64 {
        end.saturating_sub(self.start).saturating_sub(self.child)
    }
}

/// What a [`CallStack`] reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StackEvent {
    /// A frame was opened at `depth` (0 = outermost).
    Enter {
        /// Function id.
        id: u32,
        /// Entry time.
        time: u64,
        /// Depth of the new frame.
        depth: usize,
        /// False when the function was already running when tracing began.
        entered: bool,
    },
    /// A frame was closed.
    Leave {
        /// The frame (its `child` is final).
        frame: Frame,
        /// When it closed.
        end: u64,
        /// Its depth.
        depth: usize,
        /// Why.
        how: EndKind,
    },
    /// An exit that matches no open frame (only without a pre-scan).
    OrphanExit {
        /// Function id.
        id: u32,
        /// Time of the exit.
        time: u64,
    },
}

/// One thread's call stack.
#[derive(Clone, Debug, Default)]
pub struct CallStack {
    frames: Vec<Frame>,
    initial: Vec<u32>,
    started: bool,
    last: u64,
    /// Single-pass mode: orphan exits become frames entered before tracing began.
    single_pass: bool,
    first: u64,
    /// Time covered by frames closed at depth 0 (the children of a not-yet-seen outer frame).
    root_closed: u64,
}

impl CallStack {
    /// An empty stack.
    pub fn new() -> CallStack {
        CallStack::default()
    }

    /// A stack that opens `initial` (outermost first, from [`initial_stacks`]) at the first event.
    pub fn with_initial(initial: Vec<u32>) -> CallStack {
        CallStack {
            initial,
            ..CallStack::default()
        }
    }

    /// A stack for analyses that only need closed frames (report): no pre-scan; an exit that
    /// matches no open frame closes a frame that was already running when tracing began
    /// (`entered: false`, started at the thread's first event, its children being everything closed
    /// at the outermost level before it) instead of reporting [`StackEvent::OrphanExit`]. The
    /// closed frames equal those of a pre-scanned stack; only their order differs.
    pub fn single_pass() -> CallStack {
        CallStack {
            single_pass: true,
            ..CallStack::default()
        }
    }

    /// The open frames, outermost first.
    pub fn frames(&self) -> &[Frame] {
        &self.frames
    }

    /// Current depth (number of open frames).
    pub fn depth(&self) -> usize {
        self.frames.len()
    }

    /// Time of the last event seen.
    pub fn last_time(&self) -> u64 {
        self.last
    }

    fn start(&mut self, t: u64, out: &mut impl FnMut(StackEvent)) {
        self.started = true;
        self.first = t;
        for id in std::mem::take(&mut self.initial) {
            out(StackEvent::Enter {
                id,
                time: t,
                depth: self.frames.len(),
                entered: false,
            });
            self.frames.push(Frame {
                id,
                start: t,
                entered: false,
                child: 0,
            });
        }
    }

    /// Opens the initial frames now if no event came yet (call before reporting a non-function event so
    /// it lands at the right depth).
    pub fn touch(&mut self, t: u64, out: &mut impl FnMut(StackEvent)) {
        if !self.started {
            self.start(t, out);
        }
        self.last = self.last.max(t);
    }

    #[inline]
    fn pop(&mut self, end: u64, how: EndKind, out: &mut impl FnMut(StackEvent)) {
        if let Some(frame) = self.frames.pop() {
            let dur = end.saturating_sub(frame.start);
            match self.frames.last_mut() {
                Some(parent) => parent.child = parent.child.saturating_add(dur),
                None => self.root_closed = self.root_closed.saturating_add(dur),
            }
            out(StackEvent::Leave {
                frame,
                end,
                depth: self.frames.len(),
                how,
            });
        }
    }

    /// Feeds one event at time `t`. Non-function kinds are ignored (returns false); the caller handles
    /// them at [`CallStack::depth`].
    #[inline]
    pub fn process(
        &mut self,
        kind: EventKind,
        id: u32,
        t: u64,
        out: &mut impl FnMut(StackEvent),
    ) -> bool {
        if !self.started {
            self.start(t, out);
        }
        self.last = self.last.max(t);
        match kind {
            EventKind::Entry => {
                out(StackEvent::Enter {
                    id,
                    time: t,
                    depth: self.frames.len(),
                    entered: true,
                });
                self.frames.push(Frame {
                    id,
                    start: t,
                    entered: true,
                    child: 0,
                });
                true
            }
            EventKind::Exit | EventKind::TailExit => {
                let how = if kind == EventKind::Exit {
                    EndKind::Return
                } else {
                    EndKind::TailCall
                };
                match self.frames.iter().rposition(|f| f.id == id) {
                    Some(pos) => {
                        while self.frames.len() > pos + 1 {
                            self.pop(t, EndKind::Unwound, out);
                        }
                        self.pop(t, how, out);
                    }
                    None => {
                        while !self.frames.is_empty() {
                            self.pop(t, EndKind::Unwound, out);
                        }
                        if self.single_pass {
                            let frame = Frame {
                                id,
                                start: self.first,
                                entered: false,
                                child: self.root_closed,
                            };
                            self.root_closed = t.saturating_sub(self.first);
                            out(StackEvent::Leave {
                                frame,
                                end: t,
                                depth: 0,
                                how,
                            });
                        } else {
                            out(StackEvent::OrphanExit { id, time: t });
                        }
                    }
                }
                true
            }
            _ => false,
        }
    }

    /// Closes every open frame as [`EndKind::OpenAtEnd`] at the last time seen.
    pub fn finish(&mut self, out: &mut impl FnMut(StackEvent)) {
        let t = self.last;
        while !self.frames.is_empty() {
            self.pop(t, EndKind::OpenAtEnd, out);
        }
    }
}

/// The functions running when tracing began, per thread, outermost first: from the trace's
/// RunningAtStart chunk when it can be trusted (see [`Trace::running_at_start`]), else one streaming
/// pass over the events that replays each thread's stack and collects the exits that match nothing. A
/// read error ends that thread's scan (the analysis that follows meets the same error and reports it).
pub fn initial_stacks(trace: &Trace) -> Result<HashMap<u32, Vec<u32>>, ReadError> {
    match trace.running_at_start() {
        // The writer saw every event and wrote what the scan would find: no need to read them twice.
        Some(known) => Ok(known.clone()),
        None => scan_initial_stacks(trace),
    }
}

/// [`initial_stacks`] by reading every event of every thread, whatever the trace holds.
pub fn scan_initial_stacks(trace: &Trace) -> Result<HashMap<u32, Vec<u32>>, ReadError> {
    let mut out = HashMap::new();
    for &tid in trace.threads().keys() {
        let mut running = RunningAtStart::default();
        let mut ev = trace.thread_events(tid)?;
        while let Some(Ok((_, kind, id))) = ev.next_raw() {
            running.observe(kind, id);
        }
        if !running.is_empty() {
            out.insert(tid, running.outermost_first().collect());
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use EventKind::*;

    fn run(
        initial: Vec<u32>,
        evs: &[(EventKind, u32, u64)],
    ) -> Vec<(u32, u64, u64, usize, EndKind, bool)> {
        let mut st = CallStack::with_initial(initial);
        let mut v = Vec::new();
        let mut f = |e| {
            if let StackEvent::Leave {
                frame,
                end,
                depth,
                how,
            } = e
            {
                v.push((frame.id, frame.start, end, depth, how, frame.entered));
            }
        };
        for &(k, id, t) in evs {
            st.process(k, id, t, &mut f);
        }
        st.finish(&mut f);
        v
    }

    #[test]
    fn unwound_frames_are_closed_when_an_outer_exit_arrives() {
        // main -> catcher -> a -> b; b panics; catcher returns.
        let v = run(
            vec![],
            &[
                (Entry, 1, 0),
                (Entry, 2, 1),
                (Entry, 3, 2),
                (Entry, 4, 3),
                (Exit, 2, 10),
                (Exit, 1, 11),
            ],
        );
        assert_eq!(
            v,
            [
                (4, 3, 10, 3, EndKind::Unwound, true),
                (3, 2, 10, 2, EndKind::Unwound, true),
                (2, 1, 10, 1, EndKind::Return, true),
                (1, 0, 11, 0, EndKind::Return, true),
            ]
        );
    }

    #[test]
    fn initial_frames_open_at_first_event_and_open_frames_close_at_end() {
        let v = run(
            vec![9],
            &[(Entry, 1, 5), (Exit, 1, 6), (Exit, 9, 8), (Entry, 2, 9)],
        );
        assert_eq!(
            v,
            [
                (1, 5, 6, 1, EndKind::Return, true),
                (9, 5, 8, 0, EndKind::Return, false),
                (2, 9, 9, 0, EndKind::OpenAtEnd, true),
            ]
        );
    }

    #[test]
    fn single_pass_closes_the_same_frames_as_a_pre_scan() {
        let evs = [
            (Entry, 1, 5),
            (Exit, 1, 6),
            (Exit, 9, 8),
            (Entry, 2, 9),
            (Exit, 2, 10),
            (Exit, 7, 12),
        ];
        let collect = |mut st: CallStack| {
            let mut v = Vec::new();
            let mut f = |e| {
                if let StackEvent::Leave { frame, end, .. } = e {
                    v.push((
                        frame.id,
                        frame.start,
                        end,
                        frame.self_time(end),
                        frame.entered,
                    ));
                }
            };
            for &(k, id, t) in &evs {
                st.process(k, id, t, &mut f);
            }
            st.finish(&mut f);
            v.sort();
            v
        };
        assert_eq!(
            collect(CallStack::single_pass()),
            collect(CallStack::with_initial(vec![7, 9]))
        );
    }

    #[test]
    fn tail_exit_closes_like_exit_and_orphans_are_reported() {
        let mut st = CallStack::new();
        let mut evs = Vec::new();
        for (k, id, t) in [(Entry, 1, 0), (TailExit, 1, 2), (Exit, 7, 3)] {
            st.process(k, id, t, &mut |e| evs.push(e));
        }
        assert!(matches!(
            evs[1],
            StackEvent::Leave {
                how: EndKind::TailCall,
                ..
            }
        ));
        assert_eq!(evs[2], StackEvent::OrphanExit { id: 7, time: 3 });
    }

    #[test]
    fn self_time_excludes_children() {
        let mut st = CallStack::new();
        let mut selfs = Vec::new();
        for (k, id, t) in [
            (Entry, 1, 0),
            (Entry, 2, 10),
            (Exit, 2, 20),
            (Entry, 3, 30),
            (Exit, 3, 35),
            (Exit, 1, 100),
        ] {
            st.process(k, id, t, &mut |e| {
                if let StackEvent::Leave { frame, end, .. } = e {
                    selfs.push((frame.id, frame.self_time(end)));
                }
            });
        }
        assert_eq!(selfs, [(2, 10), (3, 5), (1, 85)]);
    }
}
