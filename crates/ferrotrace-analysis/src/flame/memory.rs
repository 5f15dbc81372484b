//! Memory flame graphs: the allocations of a trace by their stacks ([`crate::mem`]).

use super::FlameError;
use crate::mem::MemReport;
use crate::reader::Trace;

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

/// What `flame --weight` draws of `trace`'s allocations: an SVG titled with the program's command
/// line, or the folded stacks (`folded`).
pub fn draw(trace: &Trace, weight: Weight, folded: bool) -> Result<Vec<u8>, FlameError> {
    if !trace.has_allocations() {
        return Err(FlameError::NoAllocations(trace.path().to_path_buf()));
    }
    let rep = crate::mem::analyse_totals(trace).map_err(FlameError::Read)?;
    let lines = rep.folded(weight);
    if folded {
        return Ok(lines.into_bytes());
    }
    if lines.is_empty() {
        return Err(FlameError::NothingToDraw(
            trace.path().to_path_buf(),
            weight.unit(),
        ));
    }
    let title = format!(
        "ferrotrace memory ({}): {}",
        weight.unit(),
        trace.session().args.join(" ")
    );
    let mut svg = Vec::new();
    super::render(lines, super::svg_options(&title, weight.unit()), &mut svg)
        .map_err(|e| FlameError::Render(e.to_string()))?;
    Ok(svg)
}
