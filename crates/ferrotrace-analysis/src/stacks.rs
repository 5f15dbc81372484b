//! Call stacks as every view sees them: the trace's interned address stacks (samples, allocations)
//! turned into stacks of named frames, each distinct address named once by the one [`Symbolizer`],
//! inlined frames included.

use std::collections::HashMap;

use crate::reader::Trace;
use crate::symbolize::{SymFrame, Symbolizer};

/// A named frame: one function, or one inlined function at a call site (the symbolizer's).
pub type Frame = SymFrame;

/// A node of the frame-level stack tree: `frame` called from the stack `parent`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StackNode {
    /// Caller's stack, `None` for an outermost frame.
    pub parent: Option<u32>,
    /// Frame id.
    pub frame: u32,
}

/// Frames and frame-level stack nodes, each kept once: the tables of a [`FrameTree`], and of the
/// stacks read back from a Parquet dataset ([`crate::dataset`]).
#[derive(Default)]
pub struct FrameTable {
    frame_ids: HashMap<Frame, u32>,
    /// Frame table.
    pub frames: Vec<Frame>,
    node_ids: HashMap<(Option<u32>, u32), u32>,
    /// Frame-level stack tree.
    pub nodes: Vec<StackNode>,
}

impl FrameTable {
    /// The id of frame `f`.
    pub fn frame(&mut self, f: Frame) -> u32 {
        let next = self.frames.len() as u32;
        *self.frame_ids.entry(f.clone()).or_insert_with(|| {
            self.frames.push(f);
            next
        })
    }

    /// The id of the stack node `frame` called from the stack `parent`.
    pub fn node(&mut self, parent: Option<u32>, frame: u32) -> u32 {
        let next = self.nodes.len() as u32;
        *self.node_ids.entry((parent, frame)).or_insert_with(|| {
            self.nodes.push(StackNode { parent, frame });
            next
        })
    }
}

/// Turns the trace's address stacks into frame stacks, naming each address once.
pub struct FrameTree<'t> {
    trace: &'t Trace,
    /// The symbolizer (its `unreadable` list says which modules could not be used).
    pub sym: Symbolizer,
    /// The frames and frame-level stacks made so far.
    pub table: FrameTable,
    /// Address-stack id → frame-stack leaf.
    leaf_of: HashMap<u32, Option<u32>>,
}

impl<'t> FrameTree<'t> {
    /// An empty tree over `trace`'s stack table.
    pub fn new(trace: &'t Trace) -> FrameTree<'t> {
        FrameTree {
            trace,
            sym: Symbolizer::new(trace),
            table: FrameTable::default(),
            leaf_of: HashMap::new(),
        }
    }

    /// The frame-stack leaf of address stack `id`.
    pub fn leaf(&mut self, id: u32) -> Option<u32> {
        if let Some(&l) = self.leaf_of.get(&id) {
            return l;
        }
        // Collect the address chain (innermost first), then build from the outermost end.
        let mut chain = Vec::new();
        let mut cur = Some(id);
        let mut start = None;
        while let Some(c) = cur {
            if let Some(&l) = self.leaf_of.get(&c) {
                start = l;
                break;
            }
            let Some(node) = self.trace.stacks().get(c as usize) else {
                break;
            };
            chain.push((c, *node));
            cur = node.parent;
        }
        let mut parent = start;
        for (c, node) in chain.into_iter().rev() {
            let frames = self.sym.frames(node.module, node.address);
            // Outermost (the containing function) first, then what was inlined into it.
            for f in frames.iter().rev() {
                let id = self.table.frame(f.clone());
                parent = Some(self.table.node(parent, id));
            }
            self.leaf_of.insert(c, parent);
        }
        parent
    }
}

/// Frames of the frame-level `stack` in `nodes`, leaf first.
pub fn frames_of<'f>(
    frames: &'f [Frame],
    nodes: &[StackNode],
    stack: Option<u32>,
) -> Vec<&'f Frame> {
    let mut out = Vec::new();
    let mut cur = stack;
    while let Some(node) = cur.and_then(|s| nodes.get(s as usize)) {
        if let Some(f) = frames.get(node.frame as usize) {
            out.push(f);
        }
        // Parents always have smaller ids: the walk ends.
        cur = node.parent.filter(|&p| Some(p) < cur);
    }
    out
}
