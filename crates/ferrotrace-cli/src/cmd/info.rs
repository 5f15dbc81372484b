//! `ferrotrace info`.

use crate::Error;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use ferrotrace_analysis::info::samples::info_text;
use ferrotrace_analysis::info::Summary;
use ferrotrace_analysis::report::samples;

/// Arguments of `ferrotrace info`.
#[derive(Args)]
pub struct InfoArgs {
    #[command(flatten)]
    trace: super::TraceInput,
    /// Name functions from this ELF file when the trace carries addresses, not names (a trace of
    /// ferrotrace-embedded without the embedder's symbols)
    #[arg(long, value_name = "BINARY")]
    symbols: Option<PathBuf>,
    /// Print one JSON object instead of text
    #[arg(long)]
    json: bool,
}

/// Prints the summary. Exits 0 for a complete trace, 1 (after printing the prefix) for a truncated one.
pub fn run(args: InfoArgs, traces: &mut super::Traces) -> Result<ExitCode, Error> {
    let trace = traces.open_named(&args.trace.input, args.symbols.as_deref())?;
    let mut out = super::Output::stdout();
    let summary = Summary::of(&trace).map_err(Error::analysis)?;
    let set = super::samples(&trace)?;
    if args.json {
        let mut j = summary.to_json();
        if let Some(set) = &set {
            let rep = samples::report(set, samples::ReportOptions::default());
            j["samples"] = samples::report_json(set, &rep);
        }
        out.print(&format!("{j}\n"))?;
    } else {
        out.print(&summary.to_text())?;
        if let Some(set) = &set {
            out.print(&info_text(set))?;
        }
    }
    out.finish()?;
    Ok(traces.finish(&trace, &[]))
}
