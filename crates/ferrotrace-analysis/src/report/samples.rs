//! `report` of samples: self and total weight per function, `--diff` and `--json`.
//!
//! Self time goes to the function that contains the sampled instruction (its symbol), as perf's
//! report does; inlined functions appear in call paths, and [`ReportOptions::inline`] charges self
//! time to the innermost inlined function instead.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt::{self, Write as _};
use std::sync::Arc;

use super::SortKey;
use crate::samples::{per_stack, thread_label, SampleSet};

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

/// One distinct stack of samples: the TUI's hot stacks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HotStack {
    /// Samples taken with this stack.
    pub samples: u64,
    /// Their weight (ns for time samplers).
    pub weight: u64,
    /// Its functions, innermost (the sampled one) first.
    pub frames: Vec<Arc<str>>,
}

/// The distinct stacks of `set`, every thread and sampler together, heaviest first.
pub fn hot_stacks(set: &SampleSet) -> Vec<HotStack> {
    let mut by_stack: HashMap<Option<u32>, (u64, u64)> = HashMap::new();
    for ((stack, _), (n, w)) in per_stack(set) {
        let e = by_stack.entry(stack).or_default();
        e.0 += n;
        e.1 += w;
    }
    let mut stacks: Vec<HotStack> = by_stack
        .into_iter()
        .map(|(stack, (samples, weight))| HotStack {
            samples,
            weight,
            frames: set
                .stack_frames(stack)
                .into_iter()
                .map(|f| f.function.clone())
                .collect(),
        })
        .collect();
    stacks.sort_by(|a, b| {
        (b.weight, b.samples)
            .cmp(&(a.weight, a.samples))
            .then_with(|| a.frames.cmp(&b.frames))
    });
    stacks
}

/// The options of `report` on samples: sorted by self weight (the default) or by total weight with
/// `sort`; samples have no other column, so any other key is returned as the error.
pub fn options(sort: Option<SortKey>, inline: bool) -> Result<ReportOptions, SortKey> {
    let by_total = match sort {
        Some(SortKey::Total) => true,
        None | Some(SortKey::SelfTime) => false,
        Some(other) => return Err(other),
    };
    Ok(ReportOptions { inline, by_total })
}

/// What `report` prints of samples: the report of the whole set, or one per thread (`threads`), as
/// text or JSON ([`to_json`]).
pub fn render(set: &SampleSet, opts: ReportOptions, threads: bool, json: bool) -> String {
    if json {
        return format!("{}\n", to_json(set, opts, threads));
    }
    if !threads {
        return report(set, opts).to_string();
    }
    let mut text = String::new();
    for tid in set.thread_ids() {
        text.push_str(&format!(
            "# thread {tid} ({})\n{}\n",
            thread_label(set.thread_name(tid), tid),
            report(&set.only_thread(tid), opts)
        ));
    }
    text
}

/// `report --json` of samples: the report of the whole set ([`report_json`]), or with `threads`
/// `{"threads": [...]}`, one such object per thread with its `tid` and `name`.
pub fn to_json(set: &SampleSet, opts: ReportOptions, threads: bool) -> serde_json::Value {
    if !threads {
        return report_json(set, &report(set, opts));
    }
    let objects: Vec<serde_json::Value> = set
        .thread_ids()
        .into_iter()
        .map(|tid| {
            let sub = set.only_thread(tid);
            let mut j = report_json(&sub, &report(&sub, opts));
            j["tid"] = tid.into();
            j["name"] = thread_label(set.thread_name(tid), tid).into();
            j
        })
        .collect();
    serde_json::json!({ "threads": objects })
}

/// What `report --diff` prints of two sets of samples, as text or JSON.
pub fn render_diff(
    before: &SampleSet,
    after: &SampleSet,
    opts: ReportOptions,
    json: bool,
) -> String {
    if json {
        format!("{}\n", diff_to_json(before, after, opts))
    } else {
        diff_text(&diff(&report(before, opts), &report(after, opts)))
    }
}

/// `report --diff --json` of two sets of samples ([`diff_json`]).
pub fn diff_to_json(
    before: &SampleSet,
    after: &SampleSet,
    opts: ReportOptions,
) -> serde_json::Value {
    diff_json(&diff(&report(before, opts), &report(after, opts)))
}
