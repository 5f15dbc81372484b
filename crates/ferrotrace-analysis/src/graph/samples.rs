//! `graph` of samples.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Arc;

use crate::samples::{per_stack, SampleSet};

/// `graph` of samples: the calling-context tree below the functions matching `focus` (the whole
/// program when `None`), each node with the samples (and weight) of the stacks through it.
pub fn graph_text(set: &SampleSet, focus: Option<&regex_lite::Regex>) -> String {
    #[derive(Default)]
    struct Node {
        samples: u64,
        weight: u64,
        children: BTreeMap<Arc<str>, Node>,
    }
    let mut root = Node::default();
    for ((stack, _), (n, w)) in per_stack(set) {
        let mut frames = set.stack_frames(stack);
        frames.reverse();
        let start = match focus {
            None => 0,
            Some(re) => match frames.iter().position(|f| re.is_match(&f.function)) {
                Some(i) => i,
                None => continue,
            },
        };
        root.samples += n;
        root.weight += w;
        let mut node = &mut root;
        for f in &frames[start..] {
            node = node.children.entry(f.function.clone()).or_default();
            node.samples += n;
            node.weight += w;
        }
    }
    let time = set.weighs_time();
    let mut out = format!(
        "# samples{}  call graph of {} (by samples)\n",
        if time { " / time" } else { "" },
        focus.map_or("the whole program".to_string(), |r| format!(
            "/{}/",
            r.as_str()
        ))
    );
    if root.samples == 0 {
        out.push_str("# (no sample's stack passes through a matching function)\n");
        return out;
    }
    fn walk(node: &Node, name: &str, indent: usize, time: bool, out: &mut String) {
        let amount = if time {
            format!(
                "{:>8} {:>10}",
                node.samples,
                crate::info::fmt_ns(node.weight)
            )
        } else {
            format!("{:>8}", node.samples)
        };
        let _ = writeln!(out, "{amount}  {}{name}", "  ".repeat(indent));
        let mut kids: Vec<(&Arc<str>, &Node)> = node.children.iter().collect();
        kids.sort_by(|a, b| b.1.weight.cmp(&a.1.weight).then(a.0.cmp(b.0)));
        for (n, k) in kids {
            walk(k, n, indent + 1, time, out);
        }
    }
    walk(&root, "(all samples)", 0, time, &mut out);
    out
}
