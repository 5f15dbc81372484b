//! Samples (timer samples, probe hits, time off the CPU) as every command sees them.
//!
//! A trace's Sample events carry a stack id into its interned stack table (return addresses, relative
//! to their modules) and a weight. [`SampleSet::load`] reads them through the same reader as every other
//! event, names each distinct address once with the one [`Symbolizer`](crate::symbolize::Symbolizer) (inlined frames included), and
//! turns address stacks into frame stacks; the views below work on that:
//! [`report`] (self and total weight per function), [`folded`] stacks, [`flame_svg`], [`firefox_json`],
//! [`perfetto`], [`replay_text`] and [`graph_text`].
//!
//! Self time goes to the function that contains the sampled instruction (its symbol), as perf's
//! report does; inlined functions appear in call paths, and [`ReportOptions::inline`] charges self
//! time to the innermost inlined function instead.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt::{self, Write as _};
use std::sync::Arc;

use fxprof_processed_profile as fx;

use crate::reader::{EventKind, ReadError, SamplerKind, Trace};
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
        let has_samples = !trace.samplers.is_empty()
            || trace.session.sources & ferrotrace_core::schema::source::SAMPLES != 0;
        if !has_samples {
            return Ok(None);
        }
        let mut tree = FrameTree::new(trace);
        for th in trace.threads.values() {
            let mut events = trace.thread_events(th.tid)?;
            while let Some(e) = events.next_ref() {
                let e = e?;
                if e.kind != EventKind::Sample {
                    continue;
                }
                let stack = e.id.checked_sub(1).and_then(|s| tree.leaf(s));
                on_sample(Sample {
                    time_ns: e.ts_ns,
                    tid: e.tid,
                    event: e.fields[0] as u32,
                    stack,
                    weight: e.fields[1],
                });
            }
        }
        let end = trace.end;
        Ok(Some(SampleSet {
            pid: trace.session.pid,
            call_graph: trace.call_graph,
            frequency: trace.sample_frequency,
            start_monotonic_ns: trace.start_ns(),
            start_realtime_ns: trace.session.start_realtime_ns,
            end_monotonic_ns: trace.clocks.last().map_or(0, |c| c.mono_ns),
            events: trace
                .samplers
                .iter()
                .map(|s| EventInfo {
                    kind: s.kind,
                    name: s.spelling.clone(),
                })
                .collect(),
            threads: trace
                .threads
                .values()
                .map(|t| ThreadInfo {
                    tid: t.tid,
                    pid: t.pid,
                    name: t.name.clone(),
                })
                .collect(),
            unreadable_modules: tree.sym.unreadable.clone(),
            frames: tree.frames,
            stacks: tree.nodes,
            samples: Vec::new(),
            lost: end.map_or(0, |e| e.lost),
            unwind_errors: end.map_or(0, |e| e.unwind_errors),
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

/// Self and total weight of one function.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FunctionCounts {
    /// Demangled function name.
    pub function: String,
    /// Samples whose own code (not a callee's) is this function.
    pub self_samples: u64,
    /// Samples with this function anywhere on the stack (counted once per sample, even when recursive).
    pub total_samples: u64,
    /// Weight of the self samples (ns for time samplers).
    pub self_weight: u64,
    /// Weight of the total samples.
    pub total_weight: u64,
}

/// How [`report`] counts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReportOptions {
    /// Charge self time to the innermost inlined function rather than to the function (symbol) that
    /// contains the sampled instruction.
    pub inline: bool,
    /// Sort by: total instead of self.
    pub by_total: bool,
}

/// The `report` view: functions by self samples.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Report {
    /// Samples counted.
    pub samples: u64,
    /// Their weight.
    pub weight: u64,
    /// Weights are nanoseconds.
    pub weighs_time: bool,
    /// Rows, by self (or total) weight descending.
    pub rows: Vec<FunctionCounts>,
}

impl Report {
    /// The row of `function` (exact name, or a name ending with `::function`).
    pub fn get(&self, function: &str) -> Option<&FunctionCounts> {
        self.rows
            .iter()
            .find(|r| r.function == function)
            .or_else(|| {
                self.rows
                    .iter()
                    .find(|r| r.function.ends_with(&format!("::{function}")))
            })
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let pct = |n: u64| {
            if self.weight == 0 {
                0.0
            } else {
                n as f64 * 100.0 / self.weight as f64
            }
        };
        if self.weighs_time {
            writeln!(
                f,
                "{:>8} {:>10} {:>7} {:>10} {:>7}  function   ({} samples, {})",
                "samples",
                "self",
                "self%",
                "total",
                "total%",
                self.samples,
                crate::info::fmt_ns(self.weight)
            )?;
        } else {
            writeln!(
                f,
                "{:>8} {:>7} {:>8} {:>7}  function   ({} samples)",
                "self", "self%", "total", "total%", self.samples
            )?;
        }
        for r in &self.rows {
            if self.weighs_time {
                writeln!(
                    f,
                    "{:>8} {:>10} {:>6.2}% {:>10} {:>6.2}%  {}",
                    r.self_samples,
                    crate::info::fmt_ns(r.self_weight),
                    pct(r.self_weight),
                    crate::info::fmt_ns(r.total_weight),
                    pct(r.total_weight),
                    r.function
                )?;
            } else {
                writeln!(
                    f,
                    "{:>8} {:>6.2}% {:>8} {:>6.2}%  {}",
                    r.self_samples,
                    pct(r.self_weight),
                    r.total_samples,
                    pct(r.total_weight),
                    r.function
                )?;
            }
        }
        Ok(())
    }
}

/// Samples and their summed weight per (stack, sampler).
pub type StackTotals = HashMap<(Option<u32>, u32), (u64, u64)>;

fn add_sample(totals: &mut StackTotals, s: &Sample) {
    let e = totals.entry((s.stack, s.event)).or_default();
    e.0 += 1;
    e.1 += s.weight;
}

/// Samples and weight per (stack, sampler).
fn per_stack(set: &SampleSet) -> StackTotals {
    let mut m = StackTotals::new();
    for s in &set.samples {
        add_sample(&mut m, s);
    }
    m
}

/// Self and total samples per function.
pub fn report(set: &SampleSet, opts: ReportOptions) -> Report {
    let mut rows: HashMap<&str, [u64; 4]> = HashMap::new();
    let mut seen = HashSet::new();
    let (mut samples, mut weight) = (0, 0);
    for ((stack, _), (n, w)) in per_stack(set) {
        samples += n;
        weight += w;
        let frames = set.stack_frames(stack);
        // The function whose own code ran: the leaf, or (by default) the function the leaf's inlined
        // frames were inlined into.
        let own = if opts.inline {
            frames.first()
        } else {
            frames.iter().find(|f| !f.inlined).or(frames.first())
        };
        let own = own.map_or("[no stack]", |f| &*f.function);
        let r = rows.entry(own).or_default();
        r[0] += n;
        r[2] += w;
        seen.clear();
        if frames.is_empty() {
            rows.entry("[no stack]").or_default()[1] += n;
            rows.entry("[no stack]").or_default()[3] += w;
        }
        for f in frames {
            if seen.insert(&*f.function) {
                let r = rows.entry(&f.function).or_default();
                r[1] += n;
                r[3] += w;
            }
        }
    }
    let mut rows: Vec<FunctionCounts> = rows
        .into_iter()
        .map(|(f, [s, t, sw, tw])| FunctionCounts {
            function: f.to_string(),
            self_samples: s,
            total_samples: t,
            self_weight: sw,
            total_weight: tw,
        })
        .collect();
    rows.sort_by(|a, b| {
        let (ka, kb) = if opts.by_total {
            (
                (a.total_weight, a.self_weight),
                (b.total_weight, b.self_weight),
            )
        } else {
            (
                (a.self_weight, a.total_weight),
                (b.self_weight, b.total_weight),
            )
        };
        kb.cmp(&ka).then(a.function.cmp(&b.function))
    });
    Report {
        samples,
        weight,
        weighs_time: set.weighs_time(),
        rows,
    }
}

/// One row of [`diff`]: a function's self weight in two profiles.
#[derive(Clone, Debug, PartialEq)]
pub struct DiffRow {
    /// The function.
    pub function: String,
    /// Share of the first profile's weight, percent.
    pub before_pct: f64,
    /// Share of the second profile's weight, percent.
    pub after_pct: f64,
}

/// Function by function, the self share of `before` and `after`, largest change first.
pub fn diff(before: &Report, after: &Report) -> Vec<DiffRow> {
    let pct = |r: &Report, w: u64| {
        if r.weight == 0 {
            0.0
        } else {
            w as f64 * 100.0 / r.weight as f64
        }
    };
    let mut rows: BTreeMap<&str, DiffRow> = BTreeMap::new();
    for (r, after_side) in [(before, false), (after, true)] {
        for f in &r.rows {
            let row = rows.entry(&f.function).or_insert_with(|| DiffRow {
                function: f.function.clone(),
                before_pct: 0.0,
                after_pct: 0.0,
            });
            if after_side {
                row.after_pct = pct(r, f.self_weight);
            } else {
                row.before_pct = pct(r, f.self_weight);
            }
        }
    }
    let mut v: Vec<DiffRow> = rows.into_values().collect();
    v.sort_by(|a, b| {
        (b.after_pct - b.before_pct)
            .abs()
            .total_cmp(&(a.after_pct - a.before_pct).abs())
            .then(a.function.cmp(&b.function))
    });
    v
}

/// [`diff`] as text.
pub fn diff_text(rows: &[DiffRow]) -> String {
    let mut o = format!("{:>8} {:>8} {:>8}  function\n", "before", "after", "change");
    for r in rows {
        let _ = writeln!(
            o,
            "{:>7.2}% {:>7.2}% {:>+7.2}%  {}",
            r.before_pct,
            r.after_pct,
            r.after_pct - r.before_pct,
            r.function
        );
    }
    o
}

/// [`diff`] as JSON: `{"diff": [{"function", "before_pct", "after_pct"}, …]}`.
pub fn diff_json(rows: &[DiffRow]) -> serde_json::Value {
    serde_json::json!({"diff": rows.iter().map(|r| serde_json::json!({
        "function": r.function, "before_pct": r.before_pct, "after_pct": r.after_pct,
    })).collect::<Vec<_>>()})
}

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

/// Why a view could not be rendered.
#[derive(Debug)]
pub struct RenderError(pub String);

impl fmt::Display for RenderError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for RenderError {}

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
    let labels = crate::flame::Labels::new(folded.values().map(|n| &**n));
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

/// A Firefox Profiler "processed profile" (load it at profiler.firefox.com), symbolized: every frame is
/// a label with its function name. One process per pid, one thread per tid.
pub fn firefox_json(set: &SampleSet) -> Result<String, RenderError> {
    let interval = fx::SamplingInterval::from_hz(set.frequency.max(1) as f32);
    let reference =
        fx::ReferenceTimestamp::from_millis_since_unix_epoch(set.start_realtime_ns as f64 / 1e6);
    let mut p = fx::Profile::new("ferrotrace", reference, interval);
    p.set_symbolicated(true);
    p.set_os_name("Linux");
    let user = p.add_category("User", fx::CategoryColor::Yellow);
    let kernel = p.add_category("Kernel", fx::CategoryColor::Orange);
    let ts = |t: u64| {
        fx::Timestamp::from_nanos_since_reference(t.saturating_sub(set.start_monotonic_ns))
    };
    let mut samples = set.samples.clone();
    samples.sort_by_key(|s| s.time_ns);
    let first_time = samples
        .first()
        .map_or(set.start_monotonic_ns, |s| s.time_ns);
    let pid_of = |tid: u32| {
        set.threads
            .iter()
            .find(|t| t.tid == tid)
            .map_or(set.pid, |t| t.pid)
    };
    let mut processes: HashMap<u32, fx::ProcessHandle> = HashMap::new();
    let mut threads: HashMap<u32, fx::ThreadHandle> = HashMap::new();
    let mut stacks: HashMap<(u32, Option<u32>, u32), Option<fx::StackHandle>> = HashMap::new();
    let multi = set.events.len() > 1;
    for s in &samples {
        let pid = pid_of(s.tid);
        let process = *processes.entry(pid).or_insert_with(|| {
            let name = set
                .threads
                .iter()
                .find(|t| t.tid == pid)
                .map_or_else(|| format!("pid {pid}"), |t| t.name.clone());
            p.add_process(&name, pid, ts(first_time))
        });
        let thread = *threads.entry(s.tid).or_insert_with(|| {
            let t = p.add_thread(process, s.tid, ts(first_time), s.tid == pid);
            p.set_thread_name(t, &thread_label(set.thread_name(s.tid), s.tid));
            t
        });
        let key = (s.tid, s.stack, s.event);
        let stack = match stacks.get(&key) {
            Some(h) => *h,
            None => {
                let mut frames: Vec<fx::FrameInfo> = Vec::new();
                if multi {
                    let name = set.events.get(s.event as usize).map_or("?", |e| &e.name);
                    let h = p.intern_string(name);
                    frames.push(fx::FrameInfo {
                        frame: fx::Frame::Label(h),
                        category_pair: user.into(),
                        flags: fx::FrameFlags::empty(),
                    });
                }
                for f in set.stack_frames(s.stack).iter().rev() {
                    let h = p.intern_string(&f.function);
                    frames.push(fx::FrameInfo {
                        frame: fx::Frame::Label(h),
                        category_pair: if f.kernel { kernel } else { user }.into(),
                        flags: fx::FrameFlags::empty(),
                    });
                }
                let h = p.intern_stack_frames(thread, frames.into_iter());
                stacks.insert(key, h);
                h
            }
        };
        let on_cpu = set
            .events
            .get(s.event as usize)
            .is_some_and(|e| e.kind == SamplerKind::CpuClock);
        let cpu = if on_cpu {
            fx::CpuDelta::from_nanos(s.weight)
        } else {
            fx::CpuDelta::ZERO
        };
        p.add_sample(thread, ts(s.time_ns), stack, cpu, 1);
    }
    serde_json::to_string(&p).map_err(|e| RenderError(e.to_string()))
}

/// The name a thread is shown with: its own, or `thread TID` when it had none.
pub fn thread_label(name: &str, tid: u32) -> String {
    if name.is_empty() {
        format!("thread {tid}")
    } else {
        name.to_string()
    }
}

/// Writes samples as Perfetto slices: per thread, each sample's stack is a pile of nested slices lasting
/// one sampling period; frames shared with the previous sample continue (a "stack chart", as profilers
/// draw it), and everything closes when the thread goes quiet for more than two periods.
pub fn perfetto(
    set: &SampleSet,
    compress: bool,
    out: &mut dyn std::io::Write,
) -> std::io::Result<()> {
    use crate::callstack::EndKind;
    use crate::dump::perfetto::{write_events, Options, Source};
    use crate::dump::Ev;

    let period = 1_000_000_000 / u64::from(set.frequency.max(1));
    let name = |id: u32| {
        set.frames
            .get(id as usize)
            .map_or_else(|| format!("frame#{id}"), |f| f.function.to_string())
    };
    let source = Source {
        pid: set.pid,
        process_name: set
            .threads
            .iter()
            .find(|t| t.tid == set.pid)
            .map_or_else(String::new, |t| t.name.clone()),
        threads: set
            .threads
            .iter()
            .map(|t| (t.tid, thread_label(&t.name, t.tid)))
            .collect(),
        t0: set.start_monotonic_ns,
        name: &name,
        trace: None,
    };
    let frames_of = |leaf: Option<u32>| {
        let mut v: Vec<u32> = Vec::new();
        let mut node = leaf;
        while let Some(n) = node.and_then(|n| set.stacks.get(n as usize)) {
            v.push(n.frame);
            node = n.parent;
        }
        v.reverse();
        v
    };
    write_events(&source, Options { compress }, out, |emit| {
        let mut tids: Vec<u32> = set.samples.iter().map(|s| s.tid).collect();
        tids.sort_unstable();
        tids.dedup();
        for tid in tids {
            let mut open: Vec<u32> = Vec::new();
            let mut last = 0u64;
            let close_to =
                |open: &mut Vec<u32>,
                 keep: usize,
                 ts: u64,
                 emit: &mut dyn FnMut(Ev<'_>) -> std::io::Result<()>| {
                    while open.len() > keep {
                        let id = open.pop().unwrap_or_default();
                        emit(Ev::End {
                            tid,
                            id,
                            ts,
                            depth: open.len(),
                            how: EndKind::Return,
                        })?;
                    }
                    Ok::<(), std::io::Error>(())
                };
            for s in set.samples.iter().filter(|s| s.tid == tid) {
                let frames = frames_of(s.stack);
                if !open.is_empty() && s.time_ns > last + 2 * period {
                    close_to(&mut open, 0, last + period, emit)?;
                }
                let common = open.iter().zip(&frames).take_while(|(a, b)| a == b).count();
                close_to(&mut open, common, s.time_ns, emit)?;
                for &f in &frames[common..] {
                    emit(Ev::Begin {
                        tid,
                        id: f,
                        ts: s.time_ns,
                        depth: open.len(),
                    })?;
                    open.push(f);
                }
                last = s.time_ns;
            }
            close_to(&mut open, 0, last + period, emit)?;
        }
        Ok(Vec::new())
    })
    .map(|_| ())
}

/// `replay` of samples: each sample in time order with its thread, sampler and stack (leaf first),
/// written to `out` as it goes; `max_depth` limits the frames shown per sample (0: all).
pub fn replay_text(
    set: &SampleSet,
    max_depth: usize,
    out: &mut dyn std::io::Write,
) -> std::io::Result<()> {
    let mut order: Vec<&Sample> = set.samples.iter().collect();
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

/// The `info` lines of a trace's samples.
pub fn info_text(set: &SampleSet) -> String {
    let mut o = String::new();
    let call_graph = match set.call_graph {
        CallGraph::None => "no",
        CallGraph::FramePointers => "frame-pointer",
        CallGraph::Dwarf => "DWARF",
    };
    let timer = if set.events.iter().any(|e| e.kind == SamplerKind::CpuClock) {
        format!(" at {} Hz", set.frequency)
    } else {
        String::new()
    };
    let _ = writeln!(o, "samples      : {call_graph} stacks{timer}");
    let _ = writeln!(
        o,
        "samplers     : {}",
        set.events
            .iter()
            .map(|e| e.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    );
    let _ = writeln!(
        o,
        "sampled      : {} samples, {} lost, {} unwind errors",
        set.samples.len(),
        set.lost,
        set.unwind_errors
    );
    for t in &set.threads {
        let n = set.samples.iter().filter(|s| s.tid == t.tid).count();
        if n > 0 {
            let _ = writeln!(
                o,
                "  {:>8}  {:<16} {:>10} samples",
                t.tid,
                thread_label(&t.name, t.tid),
                n
            );
        }
    }
    for m in &set.unreadable_modules {
        let _ = writeln!(o, "not named    : {m}");
    }
    o
}

/// One JSON object for `report --json` on samples.
pub fn report_json(set: &SampleSet, rep: &Report) -> serde_json::Value {
    serde_json::json!({
        "samples": rep.samples,
        "weight": rep.weight,
        "weight_unit": if rep.weighs_time { "ns" } else { "samples" },
        "lost": set.lost,
        "functions": rep.rows.iter().map(|f| serde_json::json!({
            "function": f.function, "self": f.self_samples, "total": f.total_samples,
            "self_weight": f.self_weight, "total_weight": f.total_weight,
        })).collect::<Vec<_>>(),
    })
}
