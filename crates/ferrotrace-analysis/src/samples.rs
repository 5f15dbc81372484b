//! Samples (timer samples, probe hits, time off the CPU): the loader every command's view starts from.
//!
//! A trace's Sample events carry a stack id into its interned stack table (return addresses, relative
//! to their modules) and a weight. [`SampleSet::load`] reads them through the same reader as every other
//! event, names each distinct address once with the one [`Symbolizer`](crate::symbolize::Symbolizer) (inlined frames included), and
//! turns address stacks into frame stacks. The views live with their commands:
//! [`crate::report::samples`] (self and total weight per function), [`crate::flame::samples`] (folded
//! stacks, flame graphs), [`crate::dump::firefox`], [`crate::dump::perfetto::write_samples`],
//! [`crate::replay::samples`], [`crate::graph::samples`] and [`crate::info::samples`].

use std::collections::HashMap;
use std::fmt;

use crate::reader::{EventKind, EventRef, ReadError, SamplerKind, Trace};
use crate::stacks::FrameTree;
pub use crate::stacks::{Frame, StackNode};

pub use ferrotrace_core::schema::CallGraph;

/// A sampler of the trace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventInfo {
    /// What it samples on.
    pub kind: SamplerKind,
    /// Its spelling (`cpu-clock`, `uprobe:/lib/...:malloc`, `sched:sched_switch`, `off-cpu`).
    pub name: String,
}

/// A thread seen in the samples.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ThreadInfo {
    /// OS thread id.
    pub tid: u32,
    /// Its process.
    pub pid: u32,
    /// Its name.
    pub name: String,
}

/// One sample.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sample {
    /// CLOCK_MONOTONIC nanoseconds.
    pub time_ns: u64,
    /// Thread id.
    pub tid: u32,
    /// Index into [`SampleSet::events`].
    pub event: u32,
    /// Leaf node of its frame-level stack, `None` without a stack.
    pub stack: Option<u32>,
    /// What it stands for: ns of CPU (cpu-clock), ns off the CPU (off-cpu), 1 (a probe hit).
    pub weight: u64,
}

/// The samples of a trace, symbolized.
#[derive(Clone, Debug, Default)]
pub struct SampleSet {
    /// Process id of the profiled program.
    pub pid: u32,
    /// How stacks were taken.
    pub call_graph: CallGraph,
    /// The stacks were unwound and the samples counted in the kernel (`profile --bpf`), not read
    /// one by one from perf_event rings.
    pub in_kernel: bool,
    /// Timer frequency, Hz.
    pub frequency: u32,
    /// CLOCK_MONOTONIC of the first calibration, ns.
    pub start_monotonic_ns: u64,
    /// Wall clock at the start, ns since the epoch.
    pub start_realtime_ns: u64,
    /// CLOCK_MONOTONIC of the last calibration, ns.
    pub end_monotonic_ns: u64,
    /// The samplers; samples refer to them by index.
    pub events: Vec<EventInfo>,
    /// Threads.
    pub threads: Vec<ThreadInfo>,
    /// Frame table.
    pub frames: Vec<Frame>,
    /// Frame-level stack tree.
    pub stacks: Vec<StackNode>,
    /// Samples in time order per thread.
    pub samples: Vec<Sample>,
    /// Samples the kernel dropped.
    pub lost: u64,
    /// Stacks whose unwinding stopped early.
    pub unwind_errors: u64,
    /// Of them, per reason, when the trace says (`profile --bpf`'s UnwindStops chunk).
    pub unwind_stops: Option<ferrotrace_core::schema::UnwindStops>,
    /// Exit code of the program, when the profiler started it and saw it exit.
    pub exit_code: Option<i32>,
    /// The trace has its End chunk.
    pub complete: bool,
    /// Modules that could not be used to name addresses, and why.
    pub unreadable_modules: Vec<String>,
}

impl SampleSet {
    /// The samples of `trace`, or `None` when it holds none (and no sampler).
    pub fn load(trace: &Trace) -> Result<Option<SampleSet>, ReadError> {
        let mut samples = Vec::new();
        let set = SampleSet::load_each(trace, |s| samples.push(s))?;
        Ok(set.map(|set| SampleSet { samples, ..set }))
    }

    /// What [`SampleSet::load`] loads, with the samples summed per stack and sampler instead of kept
    /// one by one ([`SampleSet::samples`] is empty): what folded stacks and flame graphs need, in
    /// memory bounded by the number of distinct stacks.
    pub fn load_totals(trace: &Trace) -> Result<Option<(SampleSet, StackTotals)>, ReadError> {
        let mut totals = StackTotals::new();
        let set = SampleSet::load_each(trace, |s| add_sample(&mut totals, &s))?;
        Ok(set.map(|set| (set, totals)))
    }

    /// Reads the trace's samples, handing each to `on_sample`; the set has no samples.
    fn load_each(
        trace: &Trace,
        mut on_sample: impl FnMut(Sample),
    ) -> Result<Option<SampleSet>, ReadError> {
        if !has_samples(trace) {
            return Ok(None);
        }
        let mut tree = FrameTree::new(trace);
        each_sample(trace, |e, stack| {
            on_sample(Sample {
                time_ns: e.ts_ns,
                tid: e.tid,
                event: e.fields[0] as u32,
                stack: stack.and_then(|s| tree.leaf(s)),
                weight: e.fields[1],
            })
        })?;
        let end = trace.end();
        Ok(Some(SampleSet {
            pid: trace.session().pid,
            call_graph: trace.call_graph(),
            in_kernel: trace.session().sources & ferrotrace_core::schema::source::BPF != 0,
            frequency: trace.sample_frequency(),
            start_monotonic_ns: trace.start_ns(),
            start_realtime_ns: trace.session().start_realtime_ns,
            end_monotonic_ns: trace.clocks().last().map_or(0, |c| c.mono_ns),
            events: trace
                .samplers()
                .iter()
                .map(|s| EventInfo {
                    kind: s.kind,
                    name: s.spelling.clone(),
                })
                .collect(),
            threads: trace
                .threads()
                .values()
                .map(|t| ThreadInfo {
                    tid: t.tid,
                    pid: t.pid,
                    name: t.name.clone(),
                })
                .collect(),
            unreadable_modules: tree.sym.unreadable.clone(),
            frames: tree.table.frames,
            stacks: tree.table.nodes,
            samples: Vec::new(),
            // Merged into a function trace, the sampler's own counts; else the End chunk's.
            lost: trace
                .sampler_losses()
                .map_or(end.map_or(0, |e| e.lost), |l| l.lost),
            unwind_errors: trace
                .sampler_losses()
                .map_or(end.map_or(0, |e| e.unwind_errors), |l| l.unwind_errors),
            unwind_stops: trace.unwind_stops(),
            exit_code: end.and_then(|e| e.exit_code),
            complete: end.is_some(),
        }))
    }

    /// Frames of `stack`, leaf first.
    pub fn stack_frames(&self, stack: Option<u32>) -> Vec<&Frame> {
        crate::stacks::frames_of(&self.frames, &self.stacks, stack)
    }

    /// Index of the sampler whose spelling is or ends with `name` (`cpu-clock`, `sched:sched_switch`,
    /// `malloc`).
    pub fn event_index(&self, name: &str) -> Option<u32> {
        self.events
            .iter()
            .position(|e| e.name == name || e.name.ends_with(&format!(":{name}")))
            .map(|i| i as u32)
    }

    /// A copy holding only the samples of sampler `event`.
    pub fn only_event(&self, event: u32) -> SampleSet {
        let mut s = self.clone();
        s.samples.retain(|x| x.event == event);
        s
    }

    /// The threads that have samples, by tid.
    pub fn thread_ids(&self) -> Vec<u32> {
        let mut tids: Vec<u32> = self.samples.iter().map(|s| s.tid).collect();
        tids.sort_unstable();
        tids.dedup();
        tids
    }

    /// A copy holding only the samples of thread `tid`.
    pub fn only_thread(&self, tid: u32) -> SampleSet {
        let mut s = self.clone();
        s.samples.retain(|x| x.tid == tid);
        s
    }

    /// Name of thread `tid`, or empty.
    pub fn thread_name(&self, tid: u32) -> &str {
        self.threads
            .iter()
            .find(|t| t.tid == tid)
            .map_or("", |t| t.name.as_str())
    }

    /// True when every sampler weighs time (cpu-clock, off-cpu): weights are then nanoseconds.
    pub fn weighs_time(&self) -> bool {
        !self.events.is_empty() && self.events.iter().all(|e| e.kind.weighs_time())
    }
}

/// True when `trace` holds samples (or is a profile that took none): a profile says so even
/// without a Samplers chunk (cut short); a function trace whose samples were to be merged after the
/// run (`record --sample`) has them only if they were.
pub fn has_samples(trace: &Trace) -> bool {
    !trace.samplers().is_empty()
        || (trace.session().sources & ferrotrace_core::schema::source::SAMPLES != 0
            && !trace.has_function_events())
}

/// Calls `f` with each Sample event of `trace` (sampler in `fields[0]`, weight in `fields[1]`), thread
/// by thread, and its address stack (an index into `trace.stacks`) when it has one: the one reading of
/// samples, shared by [`SampleSet`] (which names the stacks' frames) and the exporters that keep
/// addresses ([`crate::dump::pprof`]).
pub fn each_sample(
    trace: &Trace,
    mut f: impl FnMut(&EventRef<'_>, Option<u32>),
) -> Result<(), ReadError> {
    for th in trace.threads().values() {
        let mut events = trace.thread_events(th.tid)?;
        while let Some(e) = events.next_ref() {
            let e = e?;
            if e.kind == EventKind::Sample {
                f(&e, e.id.checked_sub(1));
            }
        }
    }
    Ok(())
}

/// Samples and their summed weight per (stack, sampler).
pub type StackTotals = HashMap<(Option<u32>, u32), (u64, u64)>;

pub(crate) fn add_sample(totals: &mut StackTotals, s: &Sample) {
    let e = totals.entry((s.stack, s.event)).or_default();
    e.0 += 1;
    e.1 += s.weight;
}

/// Samples and weight per (stack, sampler).
pub(crate) fn per_stack(set: &SampleSet) -> StackTotals {
    let mut m = StackTotals::new();
    for s in &set.samples {
        add_sample(&mut m, s);
    }
    m
}

/// Why a view could not be rendered.
#[derive(Debug)]
pub struct RenderError(pub String);

impl fmt::Display for RenderError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for RenderError {}

/// The name a thread is shown with: its own, or `thread TID` when it had none.
pub fn thread_label(name: &str, tid: u32) -> String {
    if name.is_empty() {
        format!("thread {tid}")
    } else {
        name.to_string()
    }
}
