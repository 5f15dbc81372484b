//! `ferrotrace info`.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use ferrotrace_analysis::info::Summary;
use ferrotrace_analysis::reader::Trace;

/// Arguments of `ferrotrace info`.
#[derive(Args)]
pub struct InfoArgs {
    /// Trace file to read
    #[arg(short = 'i', long = "input", default_value = "ferrotrace.data")]
    input: PathBuf,
    /// Print one JSON object instead of text
    #[arg(long)]
    json: bool,
}

/// Prints the summary. Exits 0 for a complete trace, 1 (after printing the prefix) for a truncated one.
pub fn run(args: InfoArgs) -> Result<ExitCode, String> {
    let trace = Trace::open(&args.input).map_err(|e| e.to_string())?;
    let mut out = super::Output::stdout();
    if let Some(set) = super::samples::load(&trace)? {
        if args.json {
            let mut j = super::samples::report_json(&set);
            j["pid"] = set.pid.into();
            j["file_bytes"] = trace.file_len.into();
            j["threads"] = set
                .threads
                .iter()
                .map(|t| serde_json::json!({"tid": t.tid, "name": t.name}))
                .collect();
            out.print(&format!("{j}\n"))?;
        } else {
            out.print(&super::samples::info_text(&set, trace.file_len))?;
        }
        out.finish()?;
        return Ok(super::finish(&trace, &[]));
    }
    let summary = Summary::of(&trace).map_err(|e| e.to_string())?;
    if args.json {
        out.print(&format!("{}\n", summary.to_json()))?;
    } else {
        out.print(&summary.to_text())?;
    }
    out.finish()?;
    if let Some((off, why)) = &summary.truncated {
        eprintln!(
            "ferrotrace: {}: truncated at byte {off} ({why}); showed the readable prefix",
            args.input.display()
        );
        return Ok(ExitCode::from(1));
    }
    Ok(ExitCode::SUCCESS)
}
