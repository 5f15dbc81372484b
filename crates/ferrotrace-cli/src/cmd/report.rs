//! `ferrotrace report`.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use ferrotrace_analysis::progress::Progress;
use ferrotrace_analysis::report::{diff, diff_json, diff_text, Report, SortKey};

/// Arguments of `ferrotrace report`.
#[derive(Args)]
pub struct ReportArgs {
    /// Trace file to read
    #[arg(short = 'i', long = "input", default_value = "ferrotrace.data")]
    input: PathBuf,
    /// Sort by: total, self, calls, avg, min, max
    #[arg(short = 's', long = "sort", default_value = "total", value_parser = parse_key)]
    sort: SortKey,
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
}

fn parse_key(s: &str) -> Result<SortKey, String> {
    SortKey::parse(s)
        .ok_or_else(|| format!("unknown sort key {s:?}: use total, self, calls, avg, min or max"))
}

/// Runs the report.
pub fn run(a: ReportArgs) -> Result<ExitCode, String> {
    let trace = super::open(&a.input)?;
    if let Some(set) = super::samples::load(&trace)? {
        let text = if a.json {
            format!("{}\n", super::samples::report_json(&set))
        } else {
            ferrotrace_profile::report(&set).to_string()
        };
        super::samples::emit(None, text.as_bytes())?;
        return Ok(super::finish(&trace, &[]));
    }
    let mut progress = Progress::new("report", trace.event_count());
    let report = Report::with_progress(&trace, &mut progress).map_err(|e| e.to_string())?;
    drop(progress);
    let mut out = super::Output::stdout();
    if let Some(other_path) = &a.diff {
        let other = super::open(other_path)?;
        let mut progress = Progress::new("report", other.event_count());
        let other_report =
            Report::with_progress(&other, &mut progress).map_err(|e| e.to_string())?;
        drop(progress);
        let rows = diff(&report, &other_report, a.sort);
        if a.json {
            out.print(&format!("{}\n", diff_json(&trace, &other, a.sort, &rows)))?;
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
            report.to_json(&trace, a.sort, a.threads, &lines)
        ))?;
    } else {
        out.print(&report.to_text(a.sort, a.threads, &lines))?;
    }
    out.finish()?;
    Ok(super::finish(&trace, &report.errors))
}
