//! `ferrotrace graph`.

use crate::Error;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use ferrotrace_analysis::cct::Cct;
use ferrotrace_analysis::graph::to_text;
use ferrotrace_analysis::progress::Progress;
use ferrotrace_analysis::sections::Sections;
use regex_lite::Regex;

/// Arguments of `ferrotrace graph`.
#[derive(Args)]
pub struct GraphArgs {
    #[command(flatten)]
    trace: super::TraceInput,
    /// Name functions from this ELF file when the trace carries addresses, not names (a trace of
    /// ferrotrace-embedded without the embedder's symbols)
    #[arg(long, value_name = "BINARY")]
    symbols: Option<PathBuf>,
    /// Show the graph below the functions matching this regex (default: the whole program)
    #[arg(value_name = "FUNCTION_REGEX")]
    function: Option<String>,
}

/// Prints the call graph.
pub fn run(a: GraphArgs, traces: &mut super::Traces) -> Result<ExitCode, Error> {
    let trace = traces.open_named(&a.trace.input, a.symbols.as_deref())?;
    let focus = a
        .function
        .as_deref()
        .map(|r| Regex::new(r).map_err(|e| format!("bad function regex {r:?}: {e}")))
        .transpose()?;
    let mut out = super::Output::stdout();
    let sections = Sections::of(&trace).map_err(Error::analysis)?;
    if let Some(set) = &sections.samples {
        out.print(&ferrotrace_analysis::graph::samples::graph_text(
            set,
            focus.as_ref(),
        ))?;
        if !sections.functions {
            out.finish()?;
            return Ok(traces.finish(&trace, &[]));
        }
        out.print("\n")?;
    }
    let mut progress = Progress::new("graph", trace.event_count());
    let cct = Cct::build(&trace, focus.as_ref(), &mut progress).map_err(Error::analysis)?;
    drop(progress);
    let what = match &a.function {
        Some(f) => format!("/{f}/"),
        None => "the whole program".to_string(),
    };
    out.print(&to_text(&cct, &what))?;
    out.finish()?;
    Ok(traces.finish(&trace, &cct.errors))
}
