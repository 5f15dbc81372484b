//! Flame graphs and folded stacks of samples.

use std::collections::HashMap;

use crate::reader::{SamplerKind, Trace};
use crate::samples::{per_stack, RenderError, SampleSet, StackTotals};

/// Folded stacks (`root;…;leaf WEIGHT`, one line per distinct stack, sorted), the input of flame graph
/// tools. Weights are samples, or ns for time samplers when `by_time`. With more than one sampler, each
/// stack starts with the sampler's name.
pub fn folded(set: &SampleSet, by_time: bool) -> String {
    folded_totals(set, &per_stack(set), by_time)
}

/// [`folded`] of samples summed per stack ([`SampleSet::load_totals`]).
pub fn folded_totals(set: &SampleSet, totals: &StackTotals, by_time: bool) -> String {
    crate::flame::fold_paths(totals.iter().map(|(&(stack, event), &(n, w))| {
        (stack_path(set, stack, event), if by_time { w } else { n })
    }))
}

/// The frame names of a stack, outermost first: the sampler's name when the set has several, then
/// the functions, or `[no stack]`.
fn stack_path(set: &SampleSet, stack: Option<u32>, event: u32) -> impl Iterator<Item = &str> {
    let multi = set.events.len() > 1;
    let sampler = multi.then(|| {
        set.events
            .get(event as usize)
            .map_or("?", |e| e.name.as_str())
    });
    let frames = set.stack_frames(stack);
    let none = frames.is_empty().then_some("[no stack]");
    sampler
        .into_iter()
        .chain(none)
        .chain(frames.into_iter().rev().map(|f| &*f.function))
}

/// A flame graph (SVG, rendered by inferno) of the samples.
pub fn flame_svg(set: &SampleSet, title: &str) -> Result<Vec<u8>, RenderError> {
    flame_svg_totals(set, &per_stack(set), title)
}

/// [`flame_svg`] of samples summed per stack ([`SampleSet::load_totals`]). Memory: the distinct
/// stacks' frames once, and what inferno draws (see [`crate::flame`]).
pub fn flame_svg_totals(
    set: &SampleSet,
    totals: &StackTotals,
    title: &str,
) -> Result<Vec<u8>, RenderError> {
    let by_time = set.weighs_time() && set.events.iter().any(|e| e.kind == SamplerKind::OffCpu);
    let opts = crate::flame::svg_options(title, if by_time { "ns" } else { "samples" });
    let folded: HashMap<&str, Box<str>> = totals
        .keys()
        .flat_map(|&(stack, event)| stack_path(set, stack, event))
        .map(|name| {
            (
                name,
                crate::flame::fold_chars(name).collect::<String>().into(),
            )
        })
        .collect();
    let labels = crate::flame::shorten::Labels::new(folded.values().map(|n| &**n));
    let mut tree = crate::flame::StackFrames::default();
    for (&(stack, event), &(n, w)) in totals {
        let path = stack_path(set, stack, event).map(|name| labels.get(&folded[name]));
        tree.add(path, if by_time { w } else { n });
    }
    let lines = crate::flame::drawable_lines(&tree, opts.min_width);
    if lines.is_empty() {
        return Err(RenderError(
            "no samples to draw: the trace holds a sampler but no sample".into(),
        ));
    }
    let mut out = Vec::new();
    crate::flame::render(lines, opts, &mut out).map_err(|e| RenderError(e.to_string()))?;
    Ok(out)
}

/// What `flame` draws of samples (summed per stack, [`SampleSet::load_totals`]) of `trace`: an SVG
/// titled with the program's command line, or the folded stacks (`folded`).
pub fn draw(
    trace: &Trace,
    set: &SampleSet,
    totals: &StackTotals,
    folded: bool,
) -> Result<Vec<u8>, RenderError> {
    // Weighted by sample count (off-CPU: by time off the CPU).
    if folded {
        return Ok(folded_totals(set, totals, false).into_bytes());
    }
    let title = format!("ferrotrace profile: {}", trace.session().args.join(" "));
    flame_svg_totals(set, totals, &title)
}
