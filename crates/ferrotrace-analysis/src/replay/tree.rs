//! One thread's call tree, as `replay` shows it (frames in time order, nested, with durations), held
//! as a tree for a viewer that expands and collapses it (`ferrotrace tui`). Built from the thread's
//! own chunks when asked for, not for the whole trace: memory is one [`TreeNode`] per frame, up to
//! the cap the caller gives; past it the thread's events are not read and [`CallTree::capped`] says
//! so.

use std::collections::HashMap;

use crate::callstack::{CallStack, EndKind, StackEvent};
use crate::reader::{ReadError, Trace};

/// The root node's index.
pub const ROOT: usize = 0;

/// One frame.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TreeNode {
    /// Function id (meaningless for the root).
    pub func: u32,
    /// When it was entered, ns since the trace began (for a frame already running when tracing
    /// began: the thread's first event).
    pub start_ns: u64,
    /// Its duration; `None` while open: the tree was capped before its exit was read.
    pub duration_ns: Option<u64>,
    /// How it ended, when it did.
    pub end: Option<EndKind>,
    /// False for a function already running when tracing began.
    pub entered: bool,
    /// Its callees' frames in time order.
    pub children: Vec<usize>,
    /// Its arguments as replay shows them (`record -A`).
    pub args: Option<Box<str>>,
    /// Its return value as replay shows it (`record -R`).
    pub retval: Option<Box<str>>,
}

/// One thread's frames ([`CallTree::of_thread`]).
#[derive(Clone, Debug)]
pub struct CallTree {
    /// The thread.
    pub tid: u32,
    /// Frames; `nodes[ROOT]` is the root, whose children are the thread's outermost frames.
    pub nodes: Vec<TreeNode>,
    /// True when the thread has frames after the first `max_frames` (not read).
    pub capped: bool,
    /// The read error that ended the thread's events early, if one did.
    pub error: Option<String>,
}

/// A thread a [`CallTree`] can be built for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ThreadSummary {
    /// OS thread id.
    pub tid: u32,
    /// Its name.
    pub name: String,
    /// Events in its chunks.
    pub events: u64,
}

impl CallTree {
    /// The threads of `trace`, by tid.
    pub fn threads(trace: &Trace) -> Vec<ThreadSummary> {
        trace
            .threads()
            .values()
            .map(|t| ThreadSummary {
                tid: t.tid,
                name: t.name.clone(),
                events: t.events,
            })
            .collect()
    }

    /// The first `max_frames` frames of thread `tid`, read from its chunks in order and no further.
    /// `initial` is the thread's functions running when tracing began, outermost first
    /// ([`crate::callstack::initial_stacks`]).
    pub fn of_thread(
        trace: &Trace,
        tid: u32,
        initial: &HashMap<u32, Vec<u32>>,
        max_frames: usize,
    ) -> Result<CallTree, ReadError> {
        let mut tree = CallTree {
            tid,
            nodes: vec![TreeNode::default()],
            capped: false,
            error: None,
        };
        let mut stack = CallStack::with_initial(initial.get(&tid).cloned().unwrap_or_default());
        // Parallel to the call stack: each open frame's node.
        let mut open: Vec<usize> = Vec::new();
        let start = trace.start_ns();
        // The shown values of the event being processed, for the stack event it makes.
        let mut values = crate::dump::PendingValues::default();
        let mut on =
            |tree: &mut CallTree, se: StackEvent, values: &mut crate::dump::PendingValues| {
                let shown = values.take_for(&se);
                match se {
                    StackEvent::Enter {
                        id, time, entered, ..
                    } => {
                        let n = tree.nodes.len();
                        let parent = open.last().copied().unwrap_or(ROOT);
                        tree.nodes.push(TreeNode {
                            func: id,
                            start_ns: time.saturating_sub(start),
                            entered,
                            args: shown,
                            ..TreeNode::default()
                        });
                        tree.nodes[parent].children.push(n);
                        open.push(n);
                    }
                    StackEvent::Leave {
                        frame, end, how, ..
                    } => {
                        if let Some(n) = open.pop() {
                            let node = &mut tree.nodes[n];
                            node.duration_ns = Some(end.saturating_sub(frame.start));
                            node.end = Some(how);
                            node.retval = shown;
                        }
                    }
                    StackEvent::OrphanExit { .. } => {}
                }
            };
        let with_values = trace.has_arg_specs();
        let mut events = trace.thread_events(tid)?;
        loop {
            let next = match with_values {
                // The values are in the events' payloads: read whole events.
                true => events.next_ref().map(|e| {
                    e.map(|e| {
                        if !e.payload.is_empty() && e.kind.is_function() {
                            values.set(trace, &e);
                        }
                        (e.tsc, e.kind, e.id)
                    })
                }),
                false => events.next_raw(),
            };
            match next {
                None => break,
                Some(Ok((tsc, kind, id))) => {
                    // An entry past the cap: the frames open now stay open (no duration shown).
                    if kind == crate::reader::EventKind::Entry && tree.nodes.len() > max_frames {
                        tree.capped = true;
                        return Ok(tree);
                    }
                    // In nanoseconds, as replay's stack: a duration is the difference of the two
                    // times replay prints, to the nanosecond (ticks converted once would round
                    // apart from it).
                    let ns = trace.tsc_to_ns(tsc);
                    stack.process(kind, id, ns, &mut |se| on(&mut tree, se, &mut values));
                }
                Some(Err(e)) => {
                    tree.error = Some(e.to_string());
                    break;
                }
            }
        }
        stack.finish(&mut |se| on(&mut tree, se, &mut values));
        Ok(tree)
    }
}
