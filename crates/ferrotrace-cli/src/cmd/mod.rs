//! One module per subcommand, plus the few helpers the analysis commands share.

pub mod dump;
pub mod flame;
pub mod graph;
pub mod info;
pub mod list;
pub mod live;
pub mod mem;
pub mod profile;
pub mod record;
pub mod replay;
pub mod report;

use std::path::Path;
use std::process::ExitCode;

use ferrotrace_analysis::reader::Trace;
use ferrotrace_analysis::samples::SampleSet;

/// Opens a trace; errors become the one-line message `main` prints.
pub fn open(path: &Path) -> Result<Trace, String> {
    Trace::open(path).map_err(|e| e.to_string())
}

/// Warns about a truncated trace or read errors after the results were printed; returns the exit code
/// (1 when the results cover only part of the trace).
pub fn finish(trace: &Trace, errors: &[String]) -> ExitCode {
    let mut code = ExitCode::SUCCESS;
    for p in &trace.problems {
        eprintln!(
            "ferrotrace: warning: {}: {p}; results may not be what was recorded",
            trace.path().display()
        );
        code = ExitCode::from(1);
    }
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

/// The samples of `trace`, `None` when it holds none.
pub fn samples(trace: &Trace) -> Result<Option<SampleSet>, String> {
    SampleSet::load(trace).map_err(|e| e.to_string())
}

/// Writes `bytes` to `output`, or to stdout.
pub fn emit(output: Option<&Path>, bytes: &[u8]) -> Result<(), String> {
    use std::io::Write;
    match output {
        Some(p) => {
            std::fs::write(p, bytes).map_err(|e| format!("{}: {e}", p.display()))?;
            eprintln!("ferrotrace: wrote {}", p.display());
            Ok(())
        }
        None => std::io::stdout().lock().write_all(bytes).map_err(write_err),
    }
}

/// Maps a write error: a closed pipe (`| head`) ends quietly, anything else is reported.
pub fn write_err(e: std::io::Error) -> String {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        std::process::exit(0);
    }
    format!("cannot write output: {e}")
}
