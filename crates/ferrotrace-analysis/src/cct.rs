//! The calling-context tree: every distinct call path with its calls, total and self time. `graph`,
//! `flame` and the folded-stacks dump are views of it. Memory is one node per distinct path (call
//! depth × distinct functions at most, for ordinary programs far less), never per event: building it
//! allocates only when a path is seen for the first time.
//!
//! A node is a function, not a function id: the ids of one function (copies of a Rust function in
//! several codegen units, see [`Names::of`]) share one node.

use std::collections::HashMap;

use regex_lite::Regex;
use rustc_hash::FxHashMap;

use crate::callstack::{initial_stacks, CallStack, StackEvent};
use crate::names::Names;
use crate::progress::Progress;
use crate::reader::{ReadError, Trace};

/// The root node's index.
pub const ROOT: usize = 0;

/// One call path.
#[derive(Clone, Debug, Default)]
pub struct Node {
    /// Function id (meaningless for the root).
    pub func: u32,
    /// Parent node.
    pub parent: usize,
    /// Children in order of first call.
    pub children: Vec<usize>,
    /// Frames that took this path.
    pub calls: u64,
    /// Their summed durations (ns).
    pub total_ns: u64,
    /// Their summed self times (ns).
    pub self_ns: u64,
}

/// A calling-context tree.
#[derive(Clone, Debug)]
pub struct Cct {
    /// Nodes; `nodes[ROOT]` is the root.
    pub nodes: Vec<Node>,
    /// The child of (parent, function): Fx-hashed, looked up at every entry (SipHash was a fifth of
    /// `flame`'s instructions); only looked up, never iterated, so its order decides nothing.
    index: FxHashMap<(usize, u32), usize>,
    /// Function names.
    pub names: Names,
    /// Read errors that ended a thread's events early.
    pub errors: Vec<String>,
}

impl Cct {
    /// The tree of the whole program (`focus` = None) or of the subtrees below every outermost call of
    /// a function whose name matches `focus` (those calls become the root's children).
    pub fn build(
        trace: &Trace,
        focus: Option<&Regex>,
        progress: &mut Progress,
    ) -> Result<Cct, ReadError> {
        let names = Names::of(trace);
        let function = names.representatives();
        let mut cct = Cct {
            nodes: vec![Node::default()],
            index: FxHashMap::default(),
            names,
            errors: Vec::new(),
        };
        let initial = initial_stacks(trace)?;
        let mut matches: HashMap<u32, bool> = HashMap::new();
        for th in trace.threads().values() {
            let mut stack =
                CallStack::with_initial(initial.get(&th.tid).cloned().unwrap_or_default());
            // Parallel to the call stack: the node of each frame, if it is tracked.
            let mut nodes: Vec<Option<usize>> = Vec::new();
            let mut on = |cct: &mut Cct, se: StackEvent| match se {
                StackEvent::Enter { id, .. } => {
                    let id = function.of(id);
                    let parent = match nodes.last() {
                        Some(&Some(p)) => Some(p),
                        _ => match focus {
                            None => Some(ROOT),
                            Some(re) => {
                                let m = *matches
                                    .entry(id)
                                    .or_insert_with(|| re.is_match(&cct.names.get(id)));
                                m.then_some(ROOT)
                            }
                        },
                    };
                    nodes.push(parent.map(|p| cct.child(p, id)));
                }
                StackEvent::Leave { frame, end, .. } => {
                    if let Some(Some(n)) = nodes.pop() {
                        let node = &mut cct.nodes[n];
                        node.calls += 1;
                        node.total_ns += trace.ticks_to_ns(end.saturating_sub(frame.start));
                        node.self_ns += trace.ticks_to_ns(frame.self_time(end));
                    }
                }
                StackEvent::OrphanExit { .. } => {}
            };
            let mut ev = trace.thread_events(th.tid)?;
            let mut n = 0u64;
            loop {
                match ev.next_raw() {
                    None => break,
                    Some(Ok((tsc, kind, id))) => {
                        n += 1;
                        if n & 0xffff == 0 {
                            progress.add(0x10000);
                        }
                        stack.process(kind, id, tsc, &mut |se| on(&mut cct, se));
                    }
                    Some(Err(err)) => {
                        cct.errors.push(err.to_string());
                        break;
                    }
                }
            }
            progress.add(n & 0xffff);
            stack.finish(&mut |se| on(&mut cct, se));
        }
        Ok(cct)
    }

    fn child(&mut self, parent: usize, func: u32) -> usize {
        if let Some(&c) = self.index.get(&(parent, func)) {
            return c;
        }
        let c = self.nodes.len();
        self.nodes.push(Node {
            func,
            parent,
            ..Node::default()
        });
        self.nodes[parent].children.push(c);
        self.index.insert((parent, func), c);
        c
    }

    /// The calls of `func` and what they called: a tree whose root has one child, `func`, holding
    /// every outermost call of it (a recursive call is inside the outer one, as in `graph`'s
    /// focus), with the subtrees below them merged path by path. The TUI's callees pane; `func` is a
    /// node's function (a representative id, [`Names::representatives`]).
    pub fn callees(&self, func: u32) -> Cct {
        let mut out = self.empty();
        let top = out.child(ROOT, func);
        // (node of self, node of out it merges into), for the outermost calls of `func`.
        let mut merge: Vec<(usize, usize)> = Vec::new();
        let mut find: Vec<usize> = self.nodes[ROOT].children.clone();
        while let Some(n) = find.pop() {
            if self.nodes[n].func == func {
                merge.push((n, top));
            } else {
                find.extend(&self.nodes[n].children);
            }
        }
        while let Some((n, into)) = merge.pop() {
            let node = &self.nodes[n];
            let target = &mut out.nodes[into];
            target.calls += node.calls;
            target.total_ns += node.total_ns;
            target.self_ns += node.self_ns;
            for &c in &node.children {
                merge.push((c, out.child(into, self.nodes[c].func)));
            }
        }
        out
    }

    /// Who called `func`, inverted: a tree whose root has one child, `func`, whose children are its
    /// callers, theirs their callers, up to the outermost frames. Each path counts the calls of
    /// `func` made through it; its time is that of the outermost ones (recursion counted once, as
    /// `report`'s total), so a recursive function is its own caller with calls and no time.
    pub fn callers(&self, func: u32) -> Cct {
        let mut out = self.empty();
        let top = out.child(ROOT, func);
        // (node, whether a call of `func` is above it).
        let mut stack: Vec<(usize, bool)> = self.nodes[ROOT]
            .children
            .iter()
            .map(|&c| (c, false))
            .collect();
        while let Some((n, inside)) = stack.pop() {
            let node = &self.nodes[n];
            if node.func == func {
                let (calls, total) = (node.calls, if inside { 0 } else { node.total_ns });
                let mut at = top;
                let mut up = n;
                loop {
                    let target = &mut out.nodes[at];
                    target.calls += calls;
                    target.total_ns += total;
                    if at == top && !inside {
                        target.self_ns += node.self_ns;
                    }
                    up = self.nodes[up].parent;
                    if up == ROOT {
                        break;
                    }
                    at = out.child(at, self.nodes[up].func);
                }
            }
            let inside = inside || node.func == func;
            stack.extend(node.children.iter().map(|&c| (c, inside)));
        }
        out
    }

    /// A tree with the root alone and this one's names.
    fn empty(&self) -> Cct {
        Cct {
            nodes: vec![Node::default()],
            index: FxHashMap::default(),
            names: self.names.clone(),
            errors: Vec::new(),
        }
    }

    /// Visits every node below the root depth-first, children in first-call order, with the path
    /// of function ids from the root's child down to the node.
    pub fn walk(&self, mut f: impl FnMut(usize, &[u32])) {
        let mut path = Vec::new();
        let mut stack: Vec<(usize, usize)> = self.nodes[ROOT]
            .children
            .iter()
            .rev()
            .map(|&c| (c, 0))
            .collect();
        while let Some((n, depth)) = stack.pop() {
            path.truncate(depth);
            path.push(self.nodes[n].func);
            f(n, &path);
            for &c in self.nodes[n].children.iter().rev() {
                stack.push((c, depth + 1));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferrotrace_core::builder::TraceBuilder;
    use ferrotrace_core::record::EventKind::{Entry, Exit};
    use ferrotrace_core::schema::{source, Mode};

    /// `main { a { f { f {} g {} } } b { f {} } }`, ticks as written.
    fn tree() -> Cct {
        let mut b = TraceBuilder::new(Vec::new(), "/bin/t", source::XRAY, Mode::Lossless).unwrap();
        b.thread(1, "main").unwrap();
        for (id, name) in [(1, "main"), (2, "a"), (3, "b"), (4, "f"), (5, "g")] {
            b.function(id, 0x1000 * id as u64, 16, name).unwrap();
        }
        for (t, kind, id) in [
            (0, Entry, 1),
            (10, Entry, 2),
            (20, Entry, 4),
            (30, Entry, 4),
            (40, Exit, 4),
            (50, Entry, 5),
            (60, Exit, 5),
            (70, Exit, 4),
            (80, Exit, 2),
            (100, Entry, 3),
            (110, Entry, 4),
            (130, Exit, 4),
            (140, Exit, 3),
            (200, Exit, 1),
        ] {
            b.event(1, t, kind, id).unwrap();
        }
        let path = std::env::temp_dir().join(format!("ft-cct-{}.data", std::process::id()));
        std::fs::write(&path, b.finish().unwrap()).unwrap();
        let trace = Trace::open(&path).unwrap();
        let _ = std::fs::remove_file(&path);
        let mut progress = Progress::with_enabled("t", 0, false);
        Cct::build(&trace, None, &mut progress).unwrap()
    }

    /// Each node below the root as `depth name calls total`, depth first.
    fn lines(cct: &Cct) -> Vec<String> {
        let mut out = Vec::new();
        cct.walk(|n, path| {
            let node = &cct.nodes[n];
            out.push(format!(
                "{} {} {} {}",
                path.len(),
                cct.names.get(node.func),
                node.calls,
                node.total_ns
            ));
        });
        out
    }

    #[test]
    fn callees_merge_the_outermost_calls_and_callers_invert_every_path() {
        let cct = tree();
        let node = |name: &str| {
            cct.nodes
                .iter()
                .find(|n| cct.names.get(n.func) == name)
                .unwrap()
        };
        let f = node("f").func;
        // g's one call lasts 10 ticks: the unit of the times below.
        let t = |ticks: u64| ticks / 10 * node("g").total_ns;
        // f's outermost calls: under a (50 ticks) and under b (20); the inner f and g below the first.
        assert_eq!(
            lines(&cct.callees(f)),
            [
                format!("1 f 2 {}", t(70)),
                format!("2 f 1 {}", t(10)),
                format!("2 g 1 {}", t(10)),
            ]
        );
        // Callers: a (with main above), f itself (the inner call, with a and main above it: counted,
        // no time), b (with main above).
        let callers = lines(&cct.callers(f));
        assert_eq!(callers[0], format!("1 f 3 {}", t(70)), "{callers:?}");
        for want in [
            format!("2 a 1 {}", t(50)),
            format!("3 main 1 {}", t(50)),
            "2 f 1 0".to_string(),
            "3 a 1 0".to_string(),
            "4 main 1 0".to_string(),
            format!("2 b 1 {}", t(20)),
            format!("3 main 1 {}", t(20)),
        ] {
            assert!(callers.contains(&want), "{want}: {callers:?}");
        }
        assert_eq!(callers.len(), 8, "{callers:?}");
    }
}
