//! One module per subcommand, plus the few helpers the analysis commands share.

pub mod dump;
pub mod flame;
pub mod graph;
pub mod info;
pub mod list;
pub mod live;
pub mod profile;
pub mod record;
pub mod replay;
pub mod report;
pub mod samples;

use std::path::Path;
use std::process::ExitCode;

use ferrotrace_analysis::reader::Trace;

/// Opens a trace; errors become the one-line message `main` prints.
pub fn open(path: &Path) -> Result<Trace, String> {
    Trace::open(path).map_err(|e| e.to_string())
}

/// Warns about a truncated trace or read errors after the results were printed; returns the exit code
/// (1 when the results cover only part of the trace).
pub fn finish(trace: &Trace, errors: &[String]) -> ExitCode {
    let mut code = ExitCode::SUCCESS;
    if let Some(t) = &trace.truncation {
        eprintln!(
            "ferrotrace: warning: {}: truncated at byte {} of {} ({}); results cover the readable prefix",
            trace.path().display(),
            t.offset,
            trace.file_len,
            t.reason
        );
        code = ExitCode::from(1);
    }
    for e in errors {
        eprintln!("ferrotrace: warning: {e}; that thread's results stop there");
        code = ExitCode::from(1);
    }
    code
}

/// Maps a write error: a closed pipe (`| head`) ends quietly, anything else is reported.
pub fn write_err(e: std::io::Error) -> String {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        std::process::exit(0);
    }
    format!("cannot write output: {e}")
}
