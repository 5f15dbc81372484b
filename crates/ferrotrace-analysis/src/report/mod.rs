//! `ferrotrace report`: per-function total time, self time, calls, average, minimum and maximum.
//!
//! One streaming pass per thread (no time merge needed), in TSC ticks converted to nanoseconds at the
//! end; memory is one entry per distinct function plus the call depth.
//!
//! Definitions:
//! - **calls**: frames of the function, including frames unwound by a panic, frames still running at the
//!   end of the trace and frames already running when tracing began (those three are also counted
//!   separately).
//! - **total**: time inside the function, *recursion counted once*: only the outermost active frame of a
//!   function adds its duration, so `total` never exceeds the thread's run time. A frame already
//!   running when tracing began (a flight or wrapped trace that starts inside a recursion) is active
//!   from the thread's first event: the frames of its function before its exit are inside it.
//! - **self**: total minus time in callees, summed over all frames.
//! - **avg / min / max**: over the durations of individual frames (recursive frames included).
//! - A frame already running when tracing began is timed from the thread's first event, a frame still
//!   running at the end to the thread's last event, an unwound frame to the exit that unwound it.
//!
//! # JSON schema (`ferrotrace report --json`)
//!
//! ```text
//! {
//!   "trace": "PATH",                 // the trace file
//!   "events": N,                     // events read
//!   "sort": "total|self|calls|avg|min|max",
//!   "truncated": null | {"offset": N, "reason": "…"},
//!   "errors": ["…"],                 // read errors that ended a thread's events early
//!   "functions": [FUNCTION…],        // all threads together, sorted
//!   "threads": [                     // only with --threads
//!     {"tid": N, "name": "…", "functions": [FUNCTION…]}
//!   ]
//! }
//! FUNCTION = {
//!   "name": "crate::module::function",   // demangled, hash stripped
//!   "id": N,                              // the trace's function id (not list's xray_id)
//!   "calls": N, "total_ns": N, "self_ns": N, "avg_ns": N, "min_ns": N, "max_ns": N,
//!   "unwound": N,                 // frames closed by a panic unwinding
//!   "still_running": N,           // frames open at the end of the trace
//!   "entered_before_trace": N,    // frames already running when tracing began
//!   "srcline": "file:line"        // only with --srcline, when known
//! }
//! ```
//!
//! `ferrotrace report --diff OTHER --json` prints
//! `{"base": "PATH", "other": "PATH", "sort": "…", "functions": [{"name": "…", "base": FUNCTION|null,
//! "other": FUNCTION|null, "diff": {"total_ns": N, "self_ns": N, "calls": N}}]}` where `diff` is
//! other − base (signed) and functions are matched by name.

pub mod bytes;
mod one_pass;
pub mod samples;
mod walk;

pub use one_pass::OnePass;

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::Path;

use serde_json::{json, Value};

use crate::info::fmt_ns;
use crate::names::Names;
use crate::progress::Progress;
use crate::reader::{for_each_batch, ReadError, Trace};
use one_pass::Counted;
use walk::ThreadCounts;

/// Statistics of one function.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FuncStats {
    /// Function id.
    pub id: u32,
    /// Display name.
    pub name: String,
    /// Frames.
    pub calls: u64,
    /// Inclusive time, recursion counted once (ns).
    pub total_ns: u64,
    /// Exclusive time (ns).
    pub self_ns: u64,
    /// Shortest frame (ns).
    pub min_ns: u64,
    /// Longest frame (ns).
    pub max_ns: u64,
    /// Sum of all frame durations, recursion counted every time (ns); for the average.
    pub sum_ns: u64,
    /// Frames unwound by a panic.
    pub unwound: u64,
    /// Frames still open at the end.
    pub still_running: u64,
    /// Frames already running when tracing began.
    pub entered_before: u64,
    /// CPU time of the cpu-clock samples taken while this function was the innermost traced frame of
    /// its thread (`record --sample`), ns: its self time as sampling sees it.
    pub sampled_ns: u64,
}

impl FuncStats {
    /// Mean frame duration (ns). The sum is converted from ticks once, min and max frame by frame: the
    /// rounding can put their quotient 1 ns outside `[min, max]`, where the true mean never is.
    pub fn avg_ns(&self) -> u64 {
        self.sum_ns.checked_div(self.calls).map_or(0, |avg| {
            avg.clamp(self.min_ns, self.max_ns.max(self.min_ns))
        })
    }

    fn merge(&mut self, o: &FuncStats) {
        if self.calls == 0 {
            self.min_ns = o.min_ns;
        } else if o.calls > 0 {
            self.min_ns = self.min_ns.min(o.min_ns);
        }
        self.calls += o.calls;
        self.total_ns += o.total_ns;
        self.self_ns += o.self_ns;
        self.max_ns = self.max_ns.max(o.max_ns);
        self.sum_ns += o.sum_ns;
        self.unwound += o.unwound;
        self.still_running += o.still_running;
        self.entered_before += o.entered_before;
        self.sampled_ns += o.sampled_ns;
    }

    /// The JSON form (see the module doc).
    pub fn to_json(&self) -> Value {
        json!({
            "name": self.name, "id": self.id, "calls": self.calls, "total_ns": self.total_ns,
            "self_ns": self.self_ns, "avg_ns": self.avg_ns(), "min_ns": self.min_ns, "max_ns": self.max_ns,
            "unwound": self.unwound, "still_running": self.still_running,
            "entered_before_trace": self.entered_before, "sampled_ns": self.sampled_ns,
        })
    }
}

/// A column of the report: what `report -s` sorts by and `report -f` shows (uftrace's field names
/// too: `total-avg`, `total-min`, `total-max`); the function's name always ends the row, the Sampled and
/// bytes columns follow the data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SortKey {
    /// Inclusive time.
    Total,
    /// Exclusive time.
    SelfTime,
    /// Number of calls.
    Calls,
    /// Mean duration.
    Avg,
    /// Shortest call.
    Min,
    /// Longest call.
    Max,
}

impl SortKey {
    /// Parses `total|self|calls|avg|min|max` (and uftrace's `call`).
    pub fn parse(s: &str) -> Option<SortKey> {
        Some(match s {
            "total" => SortKey::Total,
            "self" => SortKey::SelfTime,
            "calls" | "call" => SortKey::Calls,
            "avg" => SortKey::Avg,
            "min" => SortKey::Min,
            "max" => SortKey::Max,
            _ => return None,
        })
    }

    /// A statistic of each call (avg, min, max), which uftrace spells `total-avg` and so on.
    fn per_call(self) -> bool {
        matches!(self, SortKey::Avg | SortKey::Min | SortKey::Max)
    }

    /// The key's name.
    pub fn name(self) -> &'static str {
        match self {
            SortKey::Total => "total",
            SortKey::SelfTime => "self",
            SortKey::Calls => "calls",
            SortKey::Avg => "avg",
            SortKey::Min => "min",
            SortKey::Max => "max",
        }
    }

    /// The value sorted on.
    pub fn value(self, s: &FuncStats) -> u64 {
        match self {
            SortKey::Total => s.total_ns,
            SortKey::SelfTime => s.self_ns,
            SortKey::Calls => s.calls,
            SortKey::Avg => s.avg_ns(),
            SortKey::Min => s.min_ns,
            SortKey::Max => s.max_ns,
        }
    }
}

/// Tasks running or ready to run on the machine now, this one included (`procs_running` of
/// `/proc/stat`).
fn runnable_tasks() -> Option<usize> {
    std::fs::read_to_string("/proc/stat")
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("procs_running "))?
        .trim()
        .parse()
        .ok()
}

impl SortKey {
    /// Every column, in the table's order: the default.
    pub const ALL: [SortKey; 6] = [
        SortKey::Total,
        SortKey::SelfTime,
        SortKey::Calls,
        SortKey::Avg,
        SortKey::Min,
        SortKey::Max,
    ];

    /// What `report --avg-total` shows, as uftrace's does: each call's total time, averaged, least and
    /// most.
    pub const AVG_TOTAL: [SortKey; 3] = [SortKey::Avg, SortKey::Min, SortKey::Max];

    /// Parses a comma-separated list of fields in uftrace's spelling (`total,self,call,total-avg,
    /// total-min,total-max`) or ferrotrace's (`calls`, `avg`, `min`, `max`). A field that cannot mean
    /// what it means to uftrace is refused with the line that says why and what to use.
    pub fn parse_list(list: &str) -> Result<Vec<SortKey>, String> {
        list.split(',')
            .map(|field| {
                let field = field.trim();
                // uftrace names the per-call columns after the total time they describe.
                let name = field.strip_prefix("total-").unwrap_or(field);
                if let Some(key) = SortKey::parse(name).filter(|k| name == field || k.per_call()) {
                    return Ok(key);
                }
                Err(match field {
                    f @ ("self-avg" | "self-min" | "self-max") => format!(
                        "-f {f}: ferrotrace keeps no self time per call, only its sum (self): \
                         avg, min and max are of each call's total time (total-avg, total-min, \
                         total-max)"
                    ),
                    f => format!(
                        "-f {f}: not a report field; they are total, self, call, total-avg, \
                         total-min and total-max"
                    ),
                })
            })
            .collect()
    }

    fn header(self) -> (&'static str, usize) {
        match self {
            SortKey::Total => ("Total time", 11),
            SortKey::SelfTime => ("Self time", 11),
            SortKey::Calls => ("Calls", 10),
            SortKey::Avg => ("Avg", 11),
            SortKey::Min => ("Min", 11),
            SortKey::Max => ("Max", 11),
        }
    }

    /// [`SortKey::value`] as the text table shows it: a count, or a time.
    fn shown(self, f: &FuncStats) -> String {
        match self {
            SortKey::Calls => f.calls.to_string(),
            time => fmt_ns(time.value(f)),
        }
    }
}

/// Sorts descending by `key`, then by name.
pub fn sort(v: &mut [FuncStats], key: SortKey) {
    v.sort_by(|a, b| {
        key.value(b)
            .cmp(&key.value(a))
            .then_with(|| a.name.cmp(&b.name))
    });
}

/// One thread's functions.
#[derive(Clone, Debug, Default)]
pub struct ThreadReport {
    /// OS thread id.
    pub tid: u32,
    /// Thread name.
    pub name: String,
    /// Its functions, unsorted.
    pub functions: Vec<FuncStats>,
}

/// The whole report.
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// All threads together, unsorted.
    pub functions: Vec<FuncStats>,
    /// Per thread.
    pub threads: Vec<ThreadReport>,
    /// Events read.
    pub events: u64,
    /// Read errors that ended a thread's events early.
    pub errors: Vec<String>,
    /// Tracepoint events: `(crate::name, count)`, most frequent first.
    pub tracepoints: Vec<(String, u64)>,
    /// Bytes allocated per function id, `(self, total)`, when the trace holds allocations as well as
    /// function events (see [`bytes::bytes_by_function`]); empty otherwise.
    pub alloc_bytes: HashMap<u32, (u64, u64)>,
    /// The trace holds cpu-clock samples beside its function events (`record --sample`): the tables
    /// show [`FuncStats::sampled_ns`].
    pub sampled: bool,
}

impl Report {
    /// Reads the whole trace, one thread at a time.
    pub fn of(trace: &Trace) -> Result<Report, ReadError> {
        Report::with_progress(trace, &mut Progress::with_enabled("report", 0, false))
    }

    /// Like [`Report::of`], counting events on `progress`, on one thread: a second one
    /// ([`Report::with_jobs`]) pays only when a core is free, and was 1.4× slower than one on an
    /// 11.9 G-event trace with the other core partly busy.
    pub fn with_progress(trace: &Trace, progress: &mut Progress) -> Result<Report, ReadError> {
        Report::with_jobs(trace, progress, 1)
    }

    /// Like [`Report::with_progress`] on `jobs` threads: with 2 or more, each thread's chunks are
    /// decoded on a second thread while this one aggregates (the result is the same): 1.4–1.7× the
    /// events per second of one thread when the second core is free, and slower when it is not
    /// (docs/performance.md).
    pub fn with_jobs(
        trace: &Trace,
        progress: &mut Progress,
        jobs: usize,
    ) -> Result<Report, ReadError> {
        Report::counting(trace, progress, jobs, None)
    }

    /// How many of `requested` jobs are worth running now: the second job only overlaps decoding
    /// with aggregation when a core is free for it. On a machine whose cores are all taken, its
    /// per-chunk hand-overs each wait for a time slice (`--jobs 2` took 48 s instead of 1.9 s on a
    /// busy 2-vCPU machine, with 63,000 context switches): then one job, and the reason.
    pub fn jobs_for_load(requested: usize) -> (usize, Option<String>) {
        if requested < 2 {
            return (requested.max(1), None);
        }
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        // Runnable tasks besides this one, at their fewest over three looks 5 ms apart (the count
        // is of one instant).
        let others = (0..3)
            .filter_map(|i| {
                if i > 0 {
                    std::thread::sleep(std::time::Duration::from_millis(5));
                }
                runnable_tasks()
            })
            .min()
            .map(|n| n.saturating_sub(1));
        match others {
            Some(busy) if busy + 2 > cpus => (
                1,
                Some(format!(
                    "--jobs {requested}: {busy} other runnable tasks on {cpus} CPUs leave no core \
                     free for a second job: reading on one"
                )),
            ),
            _ => (requested.min(2), None),
        }
    }

    /// Opens the trace at `path` and counts its threads' events as the index pass reads them: the file
    /// is read once ([`OnePass`]). Give both to [`Report::after_pass`].
    pub fn open_counting(path: &Path) -> Result<(Trace, OnePass), ReadError> {
        OnePass::open(path)
    }

    /// The report of `trace` from what [`Report::open_counting`] counted, the same as
    /// [`Report::with_progress`]'s: when the counts cannot be sure to be (see [`OnePass`]), the threads
    /// are read again, counting on `progress`.
    pub fn after_pass(
        trace: &Trace,
        progress: &mut Progress,
        pass: OnePass,
    ) -> Result<Report, ReadError> {
        Report::counting(trace, progress, 1, Some(pass))
    }

    /// [`Report::with_jobs`], with the counts of `pass` where they are usable.
    fn counting(
        trace: &Trace,
        progress: &mut Progress,
        jobs: usize,
        pass: Option<OnePass>,
    ) -> Result<Report, ReadError> {
        let decode_ahead = jobs >= 2;
        let names = Names::of(trace);
        // The ids of one function (same module and address, one name: see `Names::of`) are counted as
        // that function's, in one row: a copy calling another is a recursion, whose total counts once.
        let function = names.representatives();
        let mut pass = pass.filter(|p| !decode_ahead && p.usable(trace, &function));
        let mut report = Report::default();
        let mut all: HashMap<u32, FuncStats> = HashMap::new();
        let mut tracepoint_counts: HashMap<u32, u64> = match pass.as_mut() {
            Some(p) => std::mem::take(&mut p.tracepoints),
            None => HashMap::new(),
        };
        // Samplers whose samples weigh CPU time (cpu-clock), by index.
        let timed: Vec<bool> = trace
            .samplers()
            .iter()
            .map(|s| s.kind == crate::reader::SamplerKind::CpuClock)
            .collect();
        report.sampled = timed.contains(&true);
        for th in trace.threads().values() {
            if let Some(p) = pass.as_mut() {
                let counted = p.take(th.tid);
                progress.add(counted.events);
                report.add_thread(trace, &names, th, counted, &mut all);
                continue;
            }
            let mut counts = ThreadCounts::new(&function);
            let mut n = 0u64;
            let mut events = trace.thread_events(th.tid)?;
            let error = if decode_ahead || events.has_samples() {
                for_each_batch(trace, th.tid, decode_ahead, |batch| {
                    counts.add(batch, &mut tracepoint_counts, &timed);
                    n += batch.events.len() as u64;
                    progress.add(batch.events.len() as u64);
                })?
            } else {
                // One thread: the walk is the decoder's visitor, no batch between them.
                counts.add_decoded(&mut events, &mut tracepoint_counts, &timed, |chunk| {
                    n += chunk;
                    progress.add(chunk);
                })
            };
            let counted = Counted {
                counts,
                events: n,
                error,
            };
            report.add_thread(trace, &names, th, counted, &mut all);
        }
        report.functions = all.into_values().collect();
        report.tracepoints = tracepoint_counts
            .into_iter()
            .map(|(id, n)| (crate::tracepoints::name_and_args(trace, id, &[]).0, n))
            .collect();
        report
            .tracepoints
            .sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        if trace.has_allocations() {
            report.alloc_bytes = bytes::bytes_by_function(trace, &function)?;
        }
        Ok(report)
    }

    /// Adds thread `th`'s counts to the report: its table, and into `all`.
    fn add_thread(
        &mut self,
        trace: &Trace,
        names: &Names,
        th: &crate::reader::Thread,
        counted: Counted<'_>,
        all: &mut HashMap<u32, FuncStats>,
    ) {
        let Counted {
            mut counts,
            events,
            error,
        } = counted;
        if let Some(err) = error {
            self.errors.push(err.to_string());
        }
        counts.finish();
        self.events += events;
        let mut funcs: Vec<FuncStats> = Vec::with_capacity(counts.ids.len());
        for (&id, a) in counts.ids.iter().zip(counts.acc()) {
            if a.calls == 0 {
                continue;
            }
            let t = |x| trace.ticks_to_ns(x);
            let fs = FuncStats {
                id,
                name: names.get(id).into_owned(),
                calls: a.calls,
                total_ns: t(a.total),
                self_ns: t(a.self_t),
                min_ns: t(a.min),
                max_ns: t(a.max),
                sum_ns: t(a.sum),
                unwound: a.unwound,
                still_running: a.open,
                entered_before: a.before,
                sampled_ns: a.sampled,
            };
            all.entry(id)
                .or_insert_with(|| FuncStats {
                    id,
                    name: fs.name.clone(),
                    ..FuncStats::default()
                })
                .merge(&fs);
            funcs.push(fs);
        }
        self.threads.push(ThreadReport {
            tid: th.tid,
            name: th.name.clone(),
            functions: funcs,
        });
    }

    /// The report as text: one table, or one per thread.
    pub fn to_text(&self, key: SortKey, threads: bool, srclines: &HashMap<u32, String>) -> String {
        self.to_text_columns(key, threads, srclines, &SortKey::ALL)
    }

    /// [`Report::to_text`] with only `columns` of time and calls (`-f`, `--avg-total`).
    pub fn to_text_columns(
        &self,
        key: SortKey,
        threads: bool,
        srclines: &HashMap<u32, String>,
        columns: &[SortKey],
    ) -> String {
        let mut o = String::new();
        if threads {
            for t in &self.threads {
                let _ = writeln!(o, "# thread {} ({})", t.tid, t.name);
                table(
                    &mut o,
                    &t.functions,
                    key,
                    srclines,
                    &HashMap::new(),
                    self.sampled,
                    columns,
                );
                o.push('\n');
            }
        } else {
            table(
                &mut o,
                &self.functions,
                key,
                srclines,
                &self.alloc_bytes,
                self.sampled,
                columns,
            );
        }
        if !self.tracepoints.is_empty() {
            let _ = writeln!(o, "\n  {:>10}  Tracepoint", "Count");
            let _ = writeln!(o, "  {0:=>10}  {0:=>20}", "");
            for (name, n) in &self.tracepoints {
                let _ = writeln!(o, "  {n:>10}  {name}");
            }
        }
        o
    }

    /// The report as JSON (schema in the module doc).
    pub fn to_json(
        &self,
        trace: &Trace,
        key: SortKey,
        threads: bool,
        srclines: &HashMap<u32, String>,
    ) -> Value {
        let funcs = |v: &[FuncStats]| {
            let mut v = v.to_vec();
            sort(&mut v, key);
            v.iter()
                .map(|f| {
                    let mut j = f.to_json();
                    if let Some(s) = srclines.get(&f.id) {
                        j["srcline"] = json!(s);
                    }
                    if !self.alloc_bytes.is_empty() {
                        let (s, t) = self.alloc_bytes.get(&f.id).copied().unwrap_or_default();
                        j["alloc_self_bytes"] = json!(s);
                        j["alloc_total_bytes"] = json!(t);
                    }
                    j
                })
                .collect::<Vec<_>>()
        };
        let mut j = json!({
            "trace": trace.path().display().to_string(),
            "events": self.events,
            "sort": key.name(),
            "truncated": trace.truncation().as_ref().map(|t| json!({"offset": t.offset, "reason": t.reason})),
            "errors": self.errors,
            "functions": funcs(&self.functions),
            "tracepoints": self.tracepoints.iter().map(|(name, n)| json!({"name": name, "count": n})).collect::<Vec<_>>(),
        });
        if threads {
            j["threads"] = self
                .threads
                .iter()
                .map(|t| json!({"tid": t.tid, "name": t.name, "functions": funcs(&t.functions)}))
                .collect();
        }
        j
    }
}

fn table(
    o: &mut String,
    v: &[FuncStats],
    key: SortKey,
    srclines: &HashMap<u32, String>,
    alloc_bytes: &HashMap<u32, (u64, u64)>,
    sampled: bool,
    columns: &[SortKey],
) {
    let mut v = v.to_vec();
    sort(&mut v, key);
    let bytes = !alloc_bytes.is_empty();
    for c in columns {
        let (name, width) = c.header();
        let _ = write!(o, "  {name:>width$}");
    }
    let _ = write!(o, "  ");
    if sampled {
        let _ = write!(o, "{:>11}  ", "Sampled");
    }
    if bytes {
        let _ = write!(o, "{:>12}  {:>12}  ", "Self bytes", "Total bytes");
    }
    let _ = writeln!(o, "Function");
    for c in columns {
        let width = c.header().1;
        let _ = write!(o, "  {:=>width$}", "");
    }
    let _ = write!(o, "  ");
    if sampled {
        let _ = write!(o, "{0:=>11}  ", "");
    }
    if bytes {
        let _ = write!(o, "{0:=>12}  {0:=>12}  ", "");
    }
    let _ = writeln!(o, "{0:=>20}", "");
    for f in &v {
        let mut notes = Vec::new();
        if f.unwound > 0 {
            notes.push(format!("{} unwound", f.unwound));
        }
        if f.still_running > 0 {
            notes.push(format!("{} still running at end", f.still_running));
        }
        if f.entered_before > 0 {
            notes.push(format!("{} entered before tracing began", f.entered_before));
        }
        for c in columns {
            let width = c.header().1;
            let _ = write!(o, "  {:>width$}", c.shown(f));
        }
        let _ = write!(o, "  ");
        if sampled {
            let _ = write!(o, "{:>11}  ", fmt_ns(f.sampled_ns));
        }
        if bytes {
            let (s, t) = alloc_bytes.get(&f.id).copied().unwrap_or_default();
            let _ = write!(o, "{s:>12}  {t:>12}  ");
        }
        let _ = write!(o, "{}", f.name);
        if let Some(s) = srclines.get(&f.id) {
            let _ = write!(o, " [{s}]");
        }
        if !notes.is_empty() {
            let _ = write!(o, "  ({})", notes.join(", "));
        }
        o.push('\n');
    }
}

/// One function in a comparison of two traces.
#[derive(Clone, Debug)]
pub struct DiffRow {
    /// Function name (the join key).
    pub name: String,
    /// In the base trace.
    pub base: Option<FuncStats>,
    /// In the other trace.
    pub other: Option<FuncStats>,
}

impl DiffRow {
    fn get(&self, key: SortKey) -> (i128, i128) {
        (
            self.base.as_ref().map_or(0, |f| key.value(f) as i128),
            self.other.as_ref().map_or(0, |f| key.value(f) as i128),
        )
    }

    /// other − base for `key`.
    pub fn delta(&self, key: SortKey) -> i128 {
        let (a, b) = self.get(key);
        b - a
    }
}

/// Compares two reports function by function (matched by name: ids differ between builds), sorted by
/// the absolute change of `key`, largest first.
pub fn diff(base: &Report, other: &Report, key: SortKey) -> Vec<DiffRow> {
    let mut rows: HashMap<&str, DiffRow> = HashMap::new();
    for f in &base.functions {
        let r = rows.entry(&f.name).or_insert_with(|| DiffRow {
            name: f.name.clone(),
            base: None,
            other: None,
        });
        match &mut r.base {
            Some(b) => b.merge(f),
            None => r.base = Some(f.clone()),
        }
    }
    for f in &other.functions {
        let r = rows.entry(&f.name).or_insert_with(|| DiffRow {
            name: f.name.clone(),
            base: None,
            other: None,
        });
        match &mut r.other {
            Some(b) => b.merge(f),
            None => r.other = Some(f.clone()),
        }
    }
    let mut v: Vec<DiffRow> = rows.into_values().collect();
    v.sort_by(|a, b| {
        b.delta(key)
            .abs()
            .cmp(&a.delta(key).abs())
            .then_with(|| a.name.cmp(&b.name))
    });
    v
}

fn signed_ns(d: i128) -> String {
    let s = fmt_ns(d.unsigned_abs().min(u64::MAX as u128) as u64);
    if d < 0 {
        format!("-{s}")
    } else {
        format!("+{s}")
    }
}

fn pct(a: i128, b: i128) -> String {
    if a == 0 {
        if b == 0 {
            "0.00%".into()
        } else {
            "new".into()
        }
    } else {
        format!("{:+.2}%", (b - a) as f64 * 100.0 / a as f64)
    }
}

/// The comparison as text.
pub fn diff_text(rows: &[DiffRow]) -> String {
    let mut o = String::new();
    let _ =
        writeln!(
        o,
        "  {:>11}  {:>11}  {:>12}  {:>8}  {:>11}  {:>11}  {:>12}  {:>10}  {:>10}  {:>8}  Function",
        "Total base", "Total other", "Total diff", "%", "Self base", "Self other", "Self diff",
        "Calls base", "Calls oth", "diff"
    );
    for r in rows {
        let (tb, to) = r.get(SortKey::Total);
        let (sb, so) = r.get(SortKey::SelfTime);
        let (cb, co) = r.get(SortKey::Calls);
        let _ = writeln!(
            o,
            "  {:>11}  {:>11}  {:>12}  {:>8}  {:>11}  {:>11}  {:>12}  {:>10}  {:>10}  {:>+8}  {}",
            fmt_ns(tb as u64),
            fmt_ns(to as u64),
            signed_ns(to - tb),
            pct(tb, to),
            fmt_ns(sb as u64),
            fmt_ns(so as u64),
            signed_ns(so - sb),
            cb,
            co,
            co - cb,
            r.name
        );
    }
    o
}

/// The comparison as JSON (schema in the module doc).
pub fn diff_json(base: &Trace, other: &Trace, key: SortKey, rows: &[DiffRow]) -> Value {
    json!({
        "base": base.path().display().to_string(),
        "other": other.path().display().to_string(),
        "sort": key.name(),
        "functions": rows.iter().map(|r| json!({
            "name": r.name,
            "base": r.base.as_ref().map(FuncStats::to_json),
            "other": r.other.as_ref().map(FuncStats::to_json),
            "diff": {
                "total_ns": r.delta(SortKey::Total) as i64,
                "self_ns": r.delta(SortKey::SelfTime) as i64,
                "calls": r.delta(SortKey::Calls) as i64,
            },
        })).collect::<Vec<_>>(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reader::EventKind;

    #[test]
    fn average_stays_between_min_and_max_despite_rounding() {
        // Three frames of 10.6 ns each: 11 ns apiece once rounded, 31 ns (not 33) summed.
        let f = FuncStats {
            calls: 3,
            min_ns: 11,
            max_ns: 11,
            sum_ns: 31,
            ..FuncStats::default()
        };
        assert_eq!(f.avg_ns(), 11);
        assert_eq!(FuncStats::default().avg_ns(), 0);
    }

    /// Two copies of one function (ids 1 and 2: same module, address and name, as a rescan that sees an
    /// object again makes them) are one function to every column: copy 1 calling copy 2 is a
    /// recursion, whose total counts once, and the bytes allocated in either copy are its bytes.
    #[test]
    fn copies_of_a_function_are_one_row_in_every_column() {
        use ferrotrace_core::builder::TraceBuilder;
        use ferrotrace_core::schema::{source, Mode};
        let mut b = TraceBuilder::new(
            Vec::new(),
            "/bin/r",
            source::XRAY | source::ALLOCATIONS,
            Mode::Lossless,
        )
        .unwrap();
        b.function(1, 0x1000, 16, "finish_grow").unwrap();
        b.function(2, 0x1000, 16, "finish_grow").unwrap();
        b.function(3, 0x2000, 16, "main").unwrap();
        b.thread(7, "t").unwrap();
        b.event(7, 0, EventKind::Entry, 3).unwrap();
        b.event(7, 10, EventKind::Entry, 1).unwrap();
        b.event(7, 20, EventKind::Entry, 2).unwrap();
        b.alloc(7, 25, None, 1000, 0xa0).unwrap();
        b.event(7, 30, EventKind::Exit, 2).unwrap();
        b.alloc(7, 35, None, 100, 0xb0).unwrap();
        b.event(7, 40, EventKind::Exit, 1).unwrap();
        b.event(7, 50, EventKind::Exit, 3).unwrap();
        // Another thread, traced from inside `main`: its allocation is main's too.
        b.thread(8, "u").unwrap();
        b.alloc(8, 5, None, 10, 0xc0).unwrap();
        b.event(8, 6, EventKind::Exit, 3).unwrap();
        let path =
            std::env::temp_dir().join(format!("ft-report-copies-{}.data", std::process::id()));
        std::fs::write(&path, b.finish().unwrap()).unwrap();
        let t = Trace::open(&path).unwrap();
        let _ = std::fs::remove_file(&path);
        let r = Report::of(&t).unwrap();
        let rows: Vec<_> = r
            .functions
            .iter()
            .filter(|f| f.name == "finish_grow")
            .collect();
        assert_eq!(rows.len(), 1, "{:?}", r.functions);
        let f = rows[0];
        assert_eq!((f.calls, f.total_ns, f.self_ns), (2, 30, 30));
        assert_eq!(r.alloc_bytes.get(&f.id), Some(&(1100, 1100)));
        let main = r.functions.iter().find(|f| f.name == "main").unwrap();
        assert_eq!(r.alloc_bytes.get(&main.id), Some(&(10, 1110)));
        // Decoding on a second thread gives the same report (the CLI runs it only when a core is
        // free: `jobs_for_load`).
        let key = |r: &Report| {
            let mut v: Vec<_> = r
                .functions
                .iter()
                .map(|f| (f.name.clone(), f.calls, f.total_ns, f.self_ns, f.max_ns))
                .collect();
            v.sort();
            v
        };
        let two = Report::with_jobs(&t, &mut Progress::new("report", 0), 2).unwrap();
        assert_eq!(key(&two), key(&r));
    }
}
