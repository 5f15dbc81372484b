//! Views of a [`SampleSet`]: self/total report, folded stacks, flame graph SVG, Firefox Profiler JSON.

use std::collections::{HashMap, HashSet};
use std::fmt;

use fxprof_processed_profile as fx;

use crate::file::{EventType, SampleSet};
use crate::ProfileError;

/// Self and total sample counts of one function.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FunctionCounts {
    /// Demangled function name.
    pub function: String,
    /// Samples whose leaf frame is this function.
    pub self_samples: u64,
    /// Samples with this function anywhere on the stack (counted once per sample, even when recursive).
    pub total_samples: u64,
}

/// The `report` view: functions by self samples.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Report {
    /// Samples counted.
    pub samples: u64,
    /// Rows, by self samples (then total) descending.
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
            if self.samples == 0 {
                0.0
            } else {
                n as f64 * 100.0 / self.samples as f64
            }
        };
        writeln!(
            f,
            "{:>8} {:>7} {:>8} {:>7}  function   ({} samples)",
            "self", "self%", "total", "total%", self.samples
        )?;
        for r in &self.rows {
            writeln!(
                f,
                "{:>8} {:>6.2}% {:>8} {:>6.2}%  {}",
                r.self_samples,
                pct(r.self_samples),
                r.total_samples,
                pct(r.total_samples),
                r.function
            )?;
        }
        Ok(())
    }
}

/// Counts samples per stack id (`u32::MAX` for samples without a stack).
fn stack_counts(set: &SampleSet) -> HashMap<u32, u64> {
    let mut m = HashMap::new();
    for s in &set.samples {
        *m.entry(s.stack.unwrap_or(u32::MAX)).or_insert(0) += 1;
    }
    m
}

/// Self and total samples per function, over all samples of `set` (use [`SampleSet::only_event`] to look at
/// one event).
pub fn report(set: &SampleSet) -> Report {
    let mut rows: HashMap<&str, (u64, u64)> = HashMap::new();
    let mut seen = HashSet::new();
    let mut samples = 0;
    for (stack, n) in stack_counts(set) {
        samples += n;
        let frames = set.stack_frames((stack != u32::MAX).then_some(stack));
        if let Some(leaf) = frames.first() {
            rows.entry(leaf.function.as_str()).or_default().0 += n;
        }
        seen.clear();
        for f in frames {
            if seen.insert(f.function.as_str()) {
                rows.entry(f.function.as_str()).or_default().1 += n;
            }
        }
    }
    let mut rows: Vec<FunctionCounts> = rows
        .into_iter()
        .map(|(f, (s, t))| FunctionCounts {
            function: f.to_string(),
            self_samples: s,
            total_samples: t,
        })
        .collect();
    rows.sort_by(|a, b| {
        b.self_samples
            .cmp(&a.self_samples)
            .then(b.total_samples.cmp(&a.total_samples))
            .then(a.function.cmp(&b.function))
    });
    Report { samples, rows }
}

/// A frame name safe for the folded format (no `;`, no newline).
fn fold_name(s: &str) -> String {
    s.replace(';', ",").replace('\n', " ")
}

/// Folded stacks (`root;…;leaf COUNT`, one line per distinct stack, sorted), the input of flame graph tools.
/// With more than one event, each stack starts with the event's name.
pub fn folded(set: &SampleSet) -> String {
    let multi = set.events.len() > 1;
    let mut lines: HashMap<String, u64> = HashMap::new();
    let mut per_event: HashMap<(u32, u32), u64> = HashMap::new();
    for s in &set.samples {
        *per_event
            .entry((s.event, s.stack.unwrap_or(u32::MAX)))
            .or_insert(0) += 1;
    }
    for ((event, stack), n) in per_event {
        let frames = set.stack_frames((stack != u32::MAX).then_some(stack));
        let mut parts: Vec<String> = Vec::with_capacity(frames.len() + 1);
        if multi {
            let name = set
                .events
                .get(event as usize)
                .map(|e| e.name.as_str())
                .unwrap_or("?");
            parts.push(fold_name(name));
        }
        if frames.is_empty() {
            parts.push("[no stack]".to_string());
        }
        for f in frames.iter().rev() {
            parts.push(fold_name(&f.function));
        }
        *lines.entry(parts.join(";")).or_insert(0) += n;
    }
    let mut v: Vec<(String, u64)> = lines.into_iter().collect();
    v.sort();
    let mut out = String::new();
    for (k, n) in v {
        out.push_str(&k);
        out.push(' ');
        out.push_str(&n.to_string());
        out.push('\n');
    }
    out
}

/// A flame graph (SVG, rendered by inferno) of the folded stacks.
pub fn flame_svg(set: &SampleSet) -> Result<Vec<u8>, ProfileError> {
    let text = folded(set);
    if text.is_empty() {
        return Err(ProfileError::Render("no samples to draw".into()));
    }
    let mut opts = inferno::flamegraph::Options::default();
    opts.title = "ferrotrace profile".to_string();
    opts.count_name = "samples".to_string();
    let mut out = Vec::new();
    inferno::flamegraph::from_lines(&mut opts, text.lines(), &mut out)
        .map_err(|e| ProfileError::Render(e.to_string()))?;
    Ok(out)
}

/// A Firefox Profiler "processed profile" (load it at profiler.firefox.com), symbolized: every frame is
/// a label with its function name. One process per pid, one thread per tid.
pub fn firefox_json(set: &SampleSet) -> Result<String, ProfileError> {
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
        .map(|s| s.time_ns)
        .unwrap_or(set.start_monotonic_ns);

    let pid_of = |tid: u32| {
        set.threads
            .iter()
            .find(|t| t.tid == tid)
            .map(|t| t.pid)
            .unwrap_or(set.pid)
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
                .map(|t| t.name.clone())
                .unwrap_or_else(|| format!("pid {pid}"));
            p.add_process(&name, pid, ts(first_time))
        });
        let thread = *threads.entry(s.tid).or_insert_with(|| {
            let t = p.add_thread(process, s.tid, ts(first_time), s.tid == pid);
            let name = set.thread_name(s.tid);
            p.set_thread_name(t, if name.is_empty() { "thread" } else { name });
            t
        });
        let key = (s.tid, s.stack, s.event);
        let stack = match stacks.get(&key) {
            Some(h) => *h,
            None => {
                let mut frames: Vec<fx::FrameInfo> = Vec::new();
                if multi {
                    let name = set
                        .events
                        .get(s.event as usize)
                        .map(|e| e.name.as_str())
                        .unwrap_or("?");
                    let h = p.intern_string(name);
                    frames.push(fx::FrameInfo {
                        frame: fx::Frame::Label(h),
                        category_pair: user.into(),
                        flags: fx::FrameFlags::empty(),
                    });
                }
                for f in set.stack_frames(s.stack).iter().rev() {
                    let h = p.intern_string(&f.function);
                    let cat = if f.kernel { kernel } else { user };
                    frames.push(fx::FrameInfo {
                        frame: fx::Frame::Label(h),
                        category_pair: cat.into(),
                        flags: fx::FrameFlags::empty(),
                    });
                }
                let h = p.intern_stack_frames(thread, frames.into_iter());
                stacks.insert(key, h);
                h
            }
        };
        let is_clock = set
            .events
            .get(s.event as usize)
            .is_some_and(|e| e.kind == EventType::CpuClock);
        let cpu = if is_clock {
            fx::CpuDelta::from_nanos(interval.nanos())
        } else {
            fx::CpuDelta::ZERO
        };
        p.add_sample(thread, ts(s.time_ns), stack, cpu, 1);
    }
    serde_json::to_string(&p).map_err(|e| ProfileError::Render(e.to_string()))
}
