//! `ferrotrace report`.

use crate::Error;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Args;
use ferrotrace_analysis::progress::Progress;
use ferrotrace_analysis::reader::Trace;
use ferrotrace_analysis::report::samples;
use ferrotrace_analysis::report::{diff, diff_json, diff_text, OnePass, Report, SortKey};
use ferrotrace_analysis::samples::SampleSet;
use ferrotrace_analysis::sections::Sections;

/// Arguments of `ferrotrace report`.
#[derive(Args)]
#[command(
    after_help = "-i DIR: the samples of every `dump --format parquet` directory below DIR, reported as one trace's"
)]
pub struct ReportArgs {
    #[command(flatten)]
    trace: super::TraceInput,
    /// Name functions from this ELF file when the trace carries addresses, not names (a trace of
    /// ferrotrace-embedded without the embedder's symbols)
    #[arg(long, value_name = "BINARY")]
    symbols: Option<PathBuf>,
    /// Sort by: total, self, calls, avg, min, max (default: total for function calls, self for
    /// samples, as uftrace and perf do)
    #[arg(short = 's', long = "sort", value_parser = parse_key)]
    sort: Option<SortKey>,
    /// One table per thread
    #[arg(long)]
    threads: bool,
    /// Print JSON (schema: docs/report-json.md)
    #[arg(long)]
    json: bool,
    /// Compare with another trace, function by function
    #[arg(long = "diff", value_name = "OTHER_FILE")]
    diff: Option<PathBuf>,
    /// Show each function's file:line from the binary's debug info (when the binary is still there)
    #[arg(long)]
    srcline: bool,
    /// Threads to read the trace with: 2 decodes each thread's chunks on a second core while the
    /// first aggregates (up to 1.7x faster when that core is free; one is used when no core is, as
    /// the machine's runnable tasks say); default 1
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..))]
    jobs: Option<u16>,
    /// Samples: charge self time to the innermost inlined function, not to the function containing it
    #[arg(long)]
    inline: bool,
    /// The table's columns, as uftrace's -f: total, self, call, total-avg, total-min, total-max
    /// (comma-separated; default: all)
    #[arg(short = 'f', long = "output-fields", value_name = "FIELDS")]
    fields: Option<String>,
    /// Only each call's total time averaged, least and most (uftrace's --avg-total: -f
    /// total-avg,total-min,total-max)
    #[arg(long, conflicts_with = "fields")]
    avg_total: bool,
    /// Refused: ferrotrace keeps no self time per call (uftrace's --avg-self); says what to use
    #[arg(long)]
    avg_self: bool,
}

/// The table's columns that `-f` or `--avg-total` select (every one without).
fn columns(a: &ReportArgs) -> Result<Vec<SortKey>, Error> {
    if a.avg_self {
        return Err(Error::Usage(
            "--avg-self: ferrotrace keeps no self time per call, only its sum (the self column); \
             --avg-total gives each call's total time averaged, least and most"
                .into(),
        ));
    }
    if (a.fields.is_some() || a.avg_total) && (a.json || a.diff.is_some()) {
        return Err(Error::Usage(
            "-f and --avg-total choose the text table's columns: --json has every field, --diff \
             its own"
                .into(),
        ));
    }
    match (&a.fields, a.avg_total) {
        (Some(list), _) => SortKey::parse_list(list).map_err(Error::Usage),
        (None, true) => Ok(SortKey::AVG_TOTAL.to_vec()),
        (None, false) => Ok(SortKey::ALL.to_vec()),
    }
}

/// The report of a trace's samples: sort keys, `--threads`, `--diff` and `--json` as for functions.
/// Printed, unless the function report follows as JSON: then returned, for the one JSON document
/// that holds both (its `samples`). Also returns the exit status that the other trace of `--diff`
/// calls for (its warnings said), unless the function report that follows reads it too.
fn report_samples(
    a: &ReportArgs,
    trace: &Trace,
    set: &SampleSet,
    functions_follow: bool,
    traces: &mut super::Traces,
) -> Result<(ExitCode, Option<serde_json::Value>), Error> {
    let opts = samples::options(a.sort, a.inline).map_err(|other| {
        format!(
            "{}: samples have no {}: sort them by self or total",
            trace.path().display(),
            other.name()
        )
    })?;
    let mut code = ExitCode::SUCCESS;
    let one_document = a.json && functions_follow;
    let (text, json) = if let Some(other_path) = &a.diff {
        let other = traces.open_named(other_path, a.symbols.as_deref())?;
        let Some(other_set) = super::samples(&other)? else {
            return Err(Error::Usage(format!(
                "{}: holds no samples to compare with {}",
                other_path.display(),
                trace.path().display()
            )));
        };
        if !functions_follow {
            code = traces.finish(&other, &[]);
        }
        if one_document {
            (None, Some(samples::diff_to_json(set, &other_set, opts)))
        } else {
            (
                Some(samples::render_diff(set, &other_set, opts, a.json)),
                None,
            )
        }
    } else if one_document {
        (None, Some(samples::to_json(set, opts, a.threads)))
    } else {
        (Some(samples::render(set, opts, a.threads, a.json)), None)
    };
    if let Some(text) = text {
        super::emit(None, text.as_bytes())?;
    }
    Ok((code, json))
}

/// `report -i DIR`: the samples of every part of the Parquet dataset below DIR
/// ([`ferrotrace_analysis::dataset`]), reported as a trace's are.
fn report_dataset(a: &ReportArgs) -> Result<ExitCode, Error> {
    let dir = &a.trace.input;
    if a.diff.is_some() || a.srcline || a.symbols.is_some() || a.fields.is_some() || a.avg_total {
        return Err(Error::Usage(format!(
            "{}: a Parquet dataset is reported with --sort, --threads, --json and --inline alone",
            dir.display()
        )));
    }
    let opts = samples::options(a.sort, a.inline).map_err(|other| {
        format!(
            "{}: samples have no {}: sort them by self or total",
            dir.display(),
            other.name()
        )
    })?;
    let (set, parts) =
        ferrotrace_analysis::dataset::load_samples(dir).map_err(|e| e.to_string())?;
    if set.samples.is_empty() {
        return Err(format!(
            "{}: no samples in the {} Parquet parts below it (directories of `dump --format \
             parquet`, of traces with samples)",
            dir.display(),
            parts.len()
        )
        .into());
    }
    say!(
        "ferrotrace: {} samples from {} parts below {}",
        set.samples.len(),
        parts.len(),
        dir.display()
    );
    super::emit(
        None,
        samples::render(&set, opts, a.threads, a.json).as_bytes(),
    )?;
    Ok(ExitCode::SUCCESS)
}

fn parse_key(s: &str) -> Result<SortKey, String> {
    SortKey::parse(s).ok_or_else(|| {
        format!("unknown sort key {s:?}: use total, self, calls (or call), avg, min or max")
    })
}

/// Opens the trace at `path` for a report on `jobs` threads (named as [`super::Traces::open_named`] does): on
/// one, its events are counted as it is opened, so that the file is read once ([`OnePass`]).
pub(super) fn open_for_report(
    path: &Path,
    symbols: Option<&Path>,
    jobs: usize,
    traces: &mut super::Traces,
) -> Result<(Trace, Option<OnePass>), Error> {
    let (trace, counted) = match jobs {
        1 => {
            let (trace, pass) = Report::open_counting(path)?;
            (traces.opened(trace), Some(pass))
        }
        _ => (traces.open(path)?, None),
    };
    Ok((super::named(trace, symbols)?, counted))
}

/// The function report of `trace` on `jobs` threads, from the counts of the pass that opened it if
/// it was counted ([`open_for_report`]).
pub(super) fn report_of(
    trace: &Trace,
    progress: &mut Progress,
    jobs: usize,
    counted: Option<OnePass>,
) -> Result<Report, Error> {
    match counted {
        Some(pass) => Report::after_pass(trace, progress, pass),
        None => Report::with_jobs(trace, progress, jobs),
    }
    .map_err(Error::analysis)
}

/// Runs the report.
pub fn run(a: ReportArgs, traces: &mut super::Traces) -> Result<ExitCode, Error> {
    if a.trace.input.is_dir() {
        return report_dataset(&a);
    }
    let columns = columns(&a)?;
    let (jobs, fewer) = Report::jobs_for_load(a.jobs.map_or(1, usize::from));
    if let Some(why) = fewer {
        say!("ferrotrace: {why}");
    }
    let (trace, counted) = open_for_report(&a.trace.input, a.symbols.as_deref(), jobs, traces)?;
    let sections = Sections::of(&trace).map_err(Error::analysis)?;
    // With --json on a trace with samples and functions: the samples' report, the `samples` of the
    // one document.
    let mut samples_json = None;
    if let Some(set) = &sections.samples {
        if a.srcline {
            say!(
                "ferrotrace: warning: --srcline: not shown for samples: a sampled function's time \
                 comes from many addresses, each with a line of its own; `dump --format firefox` \
                 gives every frame its file:line{}",
                if sections.functions {
                    "; the function calls' report below shows it"
                } else {
                    ""
                }
            );
        }
        let (other, json) = report_samples(&a, &trace, set, sections.functions, traces)?;
        if !sections.functions {
            let code = traces.finish(&trace, &[]);
            return Ok(if code == ExitCode::SUCCESS {
                other
            } else {
                code
            });
        }
        samples_json = json;
        if samples_json.is_none() {
            super::emit(None, b"\n")?;
        }
    }
    let sort = a.sort.unwrap_or(SortKey::Total);
    let mut progress = Progress::new("report", trace.event_count());
    let report = report_of(&trace, &mut progress, jobs, counted)?;
    drop(progress);
    let mut out = super::Output::stdout();
    if let Some(other_path) = &a.diff {
        let (other, counted) = open_for_report(other_path, a.symbols.as_deref(), jobs, traces)?;
        let mut progress = Progress::new("report", other.event_count());
        let other_report = report_of(&other, &mut progress, jobs, counted)?;
        drop(progress);
        let rows = diff(&report, &other_report, sort);
        if a.json {
            let mut doc = diff_json(&trace, &other, sort, &rows);
            if let Some(samples) = samples_json {
                doc["samples"] = samples;
            }
            out.print(&format!("{doc}\n"))?;
        } else {
            out.print(&diff_text(&rows))?;
        }
        out.finish()?;
        let c1 = traces.finish(&trace, &report.errors);
        let c2 = traces.finish(&other, &other_report.errors);
        return Ok(if c1 == ExitCode::SUCCESS { c2 } else { c1 });
    }
    let lines: HashMap<u32, String> = if a.srcline {
        super::srclines(&trace)?
    } else {
        HashMap::new()
    };
    if a.json {
        let mut doc = report.to_json(&trace, sort, a.threads, &lines);
        if let Some(samples) = samples_json {
            doc["samples"] = samples;
        }
        out.print(&format!("{doc}\n"))?;
    } else {
        out.print(&report.to_text_columns(sort, a.threads, &lines, &columns))?;
    }
    out.finish()?;
    Ok(traces.finish(&trace, &report.errors))
}
