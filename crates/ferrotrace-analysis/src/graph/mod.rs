//! `ferrotrace graph`: the aggregated call graph below a function (or of the whole program), each
//! path with its total time and call count, like `uftrace graph`.
//!
//! ```text
//! # Function call graph for /fib::main/
//! # TOTAL TIME   FUNCTION
//!     1.110 ms : (1) fib::main
//!    96.000 ns :  +-(4) __rustc::__rust_alloc
//!     1.033 ms :  +-(1) fib::fib
//!     1.020 ms :    (2) fib::fib
//! ```

pub mod samples;

use std::fmt::Write as _;

use crate::cct::{Cct, ROOT};
use crate::info::fmt_ns;

/// The graph as text. `what` names the focus in the heading.
pub fn to_text(cct: &Cct, what: &str) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "# Function call graph for {what}");
    let _ = writeln!(o, "# {:>10}   FUNCTION", "TOTAL TIME");
    if cct.nodes[ROOT].children.is_empty() {
        let _ = writeln!(o, "# (no matching calls)");
        return o;
    }
    // Per depth: whether the ancestor at that depth has later siblings (draw a `|`).
    let mut more: Vec<bool> = Vec::new();
    let mut stack: Vec<(usize, usize, bool)> = Vec::new();
    let roots = &cct.nodes[ROOT].children;
    for (i, &c) in roots.iter().enumerate().rev() {
        stack.push((c, 0, i + 1 < roots.len()));
    }
    while let Some((n, depth, has_next)) = stack.pop() {
        let node = &cct.nodes[n];
        more.truncate(depth);
        let mut prefix = String::new();
        if depth > 0 {
            prefix.push(' ');
            for &m in &more[1..] {
                prefix.push_str(if m { "| " } else { "  " });
            }
            // A node with siblings after it gets a branch; the single or last child too, so every
            // child line is marked.
            prefix.push_str("+-");
        }
        let _ = writeln!(
            o,
            "{:>12} : {prefix}({}) {}",
            fmt_ns(node.total_ns),
            node.calls,
            cct.names.get(node.func)
        );
        more.push(has_next);
        let kids = &node.children;
        for (i, &c) in kids.iter().enumerate().rev() {
            stack.push((c, depth + 1, i + 1 < kids.len()));
        }
    }
    o
}
