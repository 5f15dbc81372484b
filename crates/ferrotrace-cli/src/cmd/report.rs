//! `ferrotrace report`.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use ferrotrace_analysis::progress::Progress;
use ferrotrace_analysis::report::{diff, diff_json, diff_text, Report, SortKey};
use ferrotrace_analysis::samples;

/// Arguments of `ferrotrace report`.
#[derive(Args)]
pub struct ReportArgs {
    /// Trace file to read
    #[arg(short = 'i', long = "input", default_value = "ferrotrace.data")]
    input: PathBuf,
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
    /// Samples: charge self time to the innermost inlined function, not to the function containing it
    #[arg(long)]
    inline: bool,
}

/// The report of a trace's samples: sort keys, `--threads`, `--diff` and `--json` as for functions.
/// Returns the exit status that the other trace of `--diff` calls for (its warnings said), unless the
/// function report that follows reads it too.
fn report_samples(
    a: &ReportArgs,
    trace: &ferrotrace_analysis::reader::Trace,
    set: &samples::SampleSet,
) -> Result<ExitCode, String> {
    let by_total = match a.sort {
        Some(SortKey::Total) => true,
        None | Some(SortKey::SelfTime) => false,
        Some(other) => {
            return Err(format!(
                "{}: samples have no {}: sort them by self or total",
                trace.path().display(),
                other.name()
            ))
        }
    };
    let opts = samples::ReportOptions {
        inline: a.inline,
        by_total,
    };
    let mut text = String::new();
    let mut code = ExitCode::SUCCESS;
    if let Some(other_path) = &a.diff {
        let other = super::open_named(other_path, a.symbols.as_deref())?;
        let Some(other_set) = super::samples(&other)? else {
            return Err(format!(
                "{}: holds no samples to compare with {}",
                other_path.display(),
                trace.path().display()
            ));
        };
        let rows = samples::diff(
            &samples::report(set, opts),
            &samples::report(&other_set, opts),
        );
        text = if a.json {
            format!("{}\n", samples::diff_json(&rows))
        } else {
            samples::diff_text(&rows)
        };
        if !trace.has_function_events() {
            code = super::finish(&other, &[]);
        }
    } else if a.threads {
        let mut tids: Vec<u32> = set.samples.iter().map(|s| s.tid).collect();
        tids.sort_unstable();
        tids.dedup();
        let mut json = Vec::new();
        for tid in tids {
            let sub = set.only_thread(tid);
            let rep = samples::report(&sub, opts);
            if a.json {
                let mut j = samples::report_json(&sub, &rep);
                j["tid"] = tid.into();
                j["name"] = samples::thread_label(set.thread_name(tid), tid).into();
                json.push(j);
            } else {
                text.push_str(&format!(
                    "# thread {tid} ({})\n{rep}\n",
                    samples::thread_label(set.thread_name(tid), tid)
                ));
            }
        }
        if a.json {
            text = format!("{}\n", serde_json::json!({ "threads": json }));
        }
    } else {
        let rep = samples::report(set, opts);
        text = if a.json {
            format!("{}\n", samples::report_json(set, &rep))
        } else {
            rep.to_string()
        };
    }
    super::emit(None, text.as_bytes())?;
    Ok(code)
}

fn parse_key(s: &str) -> Result<SortKey, String> {
    SortKey::parse(s)
        .ok_or_else(|| format!("unknown sort key {s:?}: use total, self, calls, avg, min or max"))
}

/// Runs the report.
pub fn run(a: ReportArgs) -> Result<ExitCode, String> {
    let trace = super::open_named(&a.input, a.symbols.as_deref())?;
    let set = super::samples(&trace)?;
    if let Some(set) = &set {
        if a.srcline {
            eprintln!(
                "ferrotrace: warning: --srcline: not shown for samples: a sampled function's time \
                 comes from many addresses, each with a line of its own; `dump --format firefox` \
                 gives every frame its file:line{}",
                if trace.has_function_events() {
                    "; the function calls' report below shows it"
                } else {
                    ""
                }
            );
        }
        let other = report_samples(&a, &trace, set)?;
        if !trace.has_function_events() {
            let code = super::finish(&trace, &[]);
            return Ok(if code == ExitCode::SUCCESS {
                other
            } else {
                code
            });
        }
        super::emit(None, b"\n")?;
    }
    let sort = a.sort.unwrap_or(SortKey::Total);
    let mut progress = Progress::new("report", trace.event_count());
    let report = Report::with_progress(&trace, &mut progress).map_err(|e| e.to_string())?;
    drop(progress);
    let mut out = super::Output::stdout();
    if let Some(other_path) = &a.diff {
        let other = super::open_named(other_path, a.symbols.as_deref())?;
        let mut progress = Progress::new("report", other.event_count());
        let other_report =
            Report::with_progress(&other, &mut progress).map_err(|e| e.to_string())?;
        drop(progress);
        let rows = diff(&report, &other_report, sort);
        if a.json {
            out.print(&format!("{}\n", diff_json(&trace, &other, sort, &rows)))?;
        } else {
            out.print(&diff_text(&rows))?;
        }
        out.finish()?;
        let c1 = super::finish(&trace, &report.errors);
        let c2 = super::finish(&other, &other_report.errors);
        return Ok(if c1 == ExitCode::SUCCESS { c2 } else { c1 });
    }
    let lines: HashMap<u32, String> = if a.srcline {
        super::srclines(&trace)?
    } else {
        HashMap::new()
    };
    if a.json {
        out.print(&format!(
            "{}\n",
            report.to_json(&trace, sort, a.threads, &lines)
        ))?;
    } else {
        out.print(&report.to_text(sort, a.threads, &lines))?;
    }
    out.finish()?;
    Ok(super::finish(&trace, &report.errors))
}
