//! `ferrotrace graph`.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use ferrotrace_analysis::cct::Cct;
use ferrotrace_analysis::graph::to_text;
use ferrotrace_analysis::progress::Progress;
use regex_lite::Regex;

/// Arguments of `ferrotrace graph`.
#[derive(Args)]
pub struct GraphArgs {
    /// Trace file to read
    #[arg(short = 'i', long = "input", default_value = "ferrotrace.data")]
    input: PathBuf,
    /// Show the graph below the functions matching this regex (default: the whole program)
    #[arg(value_name = "FUNCTION_REGEX")]
    function: Option<String>,
}

/// Prints the call graph.
pub fn run(a: GraphArgs) -> Result<ExitCode, String> {
    let trace = super::open(&a.input)?;
    let focus = a
        .function
        .as_deref()
        .map(|r| Regex::new(r).map_err(|e| format!("bad function regex {r:?}: {e}")))
        .transpose()?;
    if let Some(set) = super::samples(&trace)? {
        std::io::stdout()
            .lock()
            .write_all(ferrotrace_analysis::samples::graph_text(&set, focus.as_ref()).as_bytes())
            .map_err(super::write_err)?;
        if !trace.has_function_events() {
            return Ok(super::finish(&trace, &[]));
        }
        println!();
    }
    let mut progress = Progress::new("graph", trace.event_count());
    let cct = Cct::build(&trace, focus.as_ref(), &mut progress).map_err(|e| e.to_string())?;
    drop(progress);
    let what = match &a.function {
        Some(f) => format!("/{f}/"),
        None => "the whole program".to_string(),
    };
    std::io::stdout()
        .lock()
        .write_all(to_text(&cct, &what).as_bytes())
        .map_err(super::write_err)?;
    Ok(super::finish(&trace, &cct.errors))
}
