//! `replay` of samples: alone (a profile), or in place inside a function replay ([`SampledStacks`]).

use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;

use crate::reader::Trace;
use crate::samples::{Sample, SampleSet};

/// Which samples `replay` of a profile shows, with the meaning replay's options have for calls:
/// `--tid` (these threads), `--time-range` (taken within it: CLOCK_MONOTONIC ns, as
/// [`super::parse_time_range`] gives), `-F` (a frame of its stack matches: inside a matching
/// function) and `-N` (none does). Nothing set: every sample.
#[derive(Default)]
pub struct SampleFilter<'a> {
    /// `--tid`.
    pub tids: Option<&'a [u32]>,
    /// `--time-range`.
    pub time_range: Option<(u64, u64)>,
    /// `-F`.
    pub filter: Option<&'a regex_lite::Regex>,
    /// `-N`.
    pub hide: Option<&'a regex_lite::Regex>,
}

impl SampleFilter<'_> {
    fn shows(&self, set: &SampleSet, s: &Sample) -> bool {
        if self.tids.is_some_and(|t| !t.contains(&s.tid))
            || self
                .time_range
                .is_some_and(|(a, b)| s.time_ns < a || s.time_ns > b)
        {
            return false;
        }
        if self.filter.is_none() && self.hide.is_none() {
            return true;
        }
        let frames = set.stack_frames(s.stack);
        let any = |re: &regex_lite::Regex| frames.iter().any(|f| re.is_match(&f.function));
        self.filter.is_none_or(any) && !self.hide.is_some_and(any)
    }
}

/// `replay` of samples: each sample `filter` shows, in time order, with its thread, sampler and
/// stack (leaf first), written to `out` as it goes; `max_depth` limits the frames shown per sample
/// (0: all).
pub fn replay_text(
    set: &SampleSet,
    filter: &SampleFilter<'_>,
    max_depth: usize,
    out: &mut dyn std::io::Write,
) -> std::io::Result<()> {
    let mut order: Vec<&Sample> = set
        .samples
        .iter()
        .filter(|s| filter.shows(set, s))
        .collect();
    order.sort_by_key(|s| (s.time_ns, s.tid));
    writeln!(
        out,
        "#  ELAPSED     TID  SAMPLER      WEIGHT  STACK (leaf first)"
    )?;
    for s in order {
        let sampler = set.events.get(s.event as usize).map_or("?", |e| &e.name);
        let weight = if set
            .events
            .get(s.event as usize)
            .is_some_and(|e| e.kind.weighs_time())
        {
            crate::info::fmt_ns(s.weight)
        } else {
            s.weight.to_string()
        };
        writeln!(
            out,
            "{:>10} {:>7}  {:<12} {:>7}  {}",
            crate::info::fmt_ns(s.time_ns.saturating_sub(set.start_monotonic_ns)),
            s.tid,
            sampler,
            weight,
            stack_line(set, s.stack, max_depth)
        )?;
    }
    Ok(())
}

fn stack_line(set: &SampleSet, stack: Option<u32>, max_depth: usize) -> String {
    let frames = set.stack_frames(stack);
    if frames.is_empty() {
        return "[no stack]".into();
    }
    let n = if max_depth == 0 {
        frames.len()
    } else {
        max_depth.min(frames.len())
    };
    let mut s = frames[..n]
        .iter()
        .map(|f| {
            if f.inlined {
                format!("{} (inlined)", f.function)
            } else {
                f.function.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join(" <- ");
    if n < frames.len() {
        let _ = write!(s, " <- ... ({} more)", frames.len() - n);
    }
    s
}

/// The samples of a trace that holds function events too (`record --sample`), for the function replay
/// to show each one in place, inside the function that was running: its stack from the sampled
/// instruction up to the innermost traced function on it.
#[derive(Clone, Debug, Default)]
pub struct SampledStacks {
    set: SampleSet,
    /// `(tid, time)` of each sample: its index in `set.samples`.
    at: HashMap<(u32, u64), usize>,
    /// The display names of the traced functions (where a sample's stack stops).
    traced: HashSet<String>,
}

impl SampledStacks {
    /// The samples of `set`, read from `trace`.
    pub fn new(set: SampleSet, trace: &Trace) -> SampledStacks {
        let at = set
            .samples
            .iter()
            .enumerate()
            .map(|(i, s)| ((s.tid, s.time_ns), i))
            .collect();
        let traced = trace
            .functions()
            .values()
            .map(|f| f.name().to_string())
            .collect();
        SampledStacks { set, at, traced }
    }

    /// The replay's comment for the sample of thread `tid` at `ts_ns`:
    /// `/* sample cpu-clock: leaf <- ... <- traced_function */`.
    pub(super) fn note(&self, tid: u32, ts_ns: u64) -> Option<String> {
        let s = self.set.samples.get(*self.at.get(&(tid, ts_ns))?)?;
        let sampler = self
            .set
            .events
            .get(s.event as usize)
            .map_or("?", |e| &e.name);
        let mut text = format!("/* sample {sampler}:");
        for (i, f) in self.set.stack_frames(s.stack).iter().enumerate() {
            let _ = write!(text, "{}{}", if i == 0 { " " } else { " <- " }, f.function);
            if self.traced.contains(&*f.function) {
                break;
            }
        }
        text.push_str(" */");
        Some(text)
    }
}
