//! Memory flame graphs: the allocations of a trace by their stacks ([`crate::mem`]).

use crate::mem::MemReport;

/// What a memory flame graph's widths count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Weight {
    /// Bytes allocated.
    Bytes,
    /// Allocations.
    Allocations,
    /// Bytes still live at the end.
    Leaked,
}

impl Weight {
    /// The unit inferno prints.
    pub fn unit(self) -> &'static str {
        match self {
            Weight::Bytes | Weight::Leaked => "bytes",
            Weight::Allocations => "allocations",
        }
    }
}

impl MemReport {
    /// Folded stacks (`root;…;leaf N`) weighted by `weight`, sorted, for flame graphs.
    pub fn folded(&self, weight: Weight) -> String {
        let groups = match weight {
            Weight::Bytes | Weight::Allocations => &self.by_stack,
            Weight::Leaked => &self.leaks,
        };
        crate::flame::fold_paths(groups.iter().filter_map(|g| {
            let n = if weight == Weight::Allocations {
                g.blocks
            } else {
                g.bytes
            };
            let frames = self.stack_frames(g.stack);
            let none = frames.is_empty().then_some("[no stack]");
            let path: Vec<&str> = none
                .into_iter()
                .chain(frames.into_iter().rev().map(|f| &*f.function))
                .collect();
            (n > 0).then_some((path, n))
        }))
    }
}
