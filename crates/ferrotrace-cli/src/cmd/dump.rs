//! `ferrotrace dump`.

use crate::Error;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::builder::{PossibleValue, PossibleValuesParser, TypedValueParser};
use clap::Args;
use ferrotrace_analysis::dump::{self, Exporter, Plan, Target};
use ferrotrace_analysis::progress::Progress;

/// `--format`: the formats the library registers ([`dump::FORMATS`]), by name.
fn formats() -> impl TypedValueParser<Value = &'static dyn Exporter> {
    PossibleValuesParser::new(
        dump::FORMATS
            .iter()
            .map(|f| PossibleValue::new(f.name()).help(f.about())),
    )
    .map(|name| dump::format(&name).expect("a registered format"))
}

/// Arguments of `ferrotrace dump`.
#[derive(Args)]
pub struct DumpArgs {
    /// Trace file to read
    #[arg(short = 'i', long = "input", default_value = "ferrotrace.data")]
    input: PathBuf,
    /// Name functions from this ELF file when the trace carries addresses, not names (a trace of
    /// ferrotrace-embedded without the embedder's symbols)
    #[arg(long, value_name = "BINARY")]
    symbols: Option<PathBuf>,
    /// Output format
    #[arg(long = "format", value_parser = formats())]
    format: &'static dyn Exporter,
    /// Output file (a directory for uftrace; default: uftrace.data, or stdout for the others)
    #[arg(short = 'o', long = "output")]
    output: Option<PathBuf>,
    /// Perfetto: write plain packets instead of zlib-compressed batches
    #[arg(long)]
    uncompressed: bool,
}

/// Writes the dump.
pub fn run(a: DumpArgs) -> Result<ExitCode, Error> {
    let trace = super::open_named(&a.input, a.symbols.as_deref())?;
    let format = a.format;
    let opts = dump::Options {
        compress: !a.uncompressed,
    };
    if let Plan::Samples(set) = dump::plan(&trace, format).map_err(Error::analysis)? {
        let bytes = format
            .write_samples(&trace, &set, opts)
            .map_err(Error::analysis)?;
        super::emit(a.output.as_deref(), &bytes)?;
        return Ok(super::finish(&trace, &[]));
    }
    let mut progress = Progress::new("dump", trace.event_count());
    let errors = if let Some(default) = format.directory() {
        let dir = a.output.clone().unwrap_or_else(|| PathBuf::from(default));
        let errs = format
            .write_functions(&trace, opts, Target::Directory(&dir), &mut progress)
            .map_err(|e| format!("{}: {e}", dir.display()))?;
        drop(progress);
        say!(
            "ferrotrace: wrote {} data to {}",
            format.name(),
            dir.display()
        );
        errs
    } else {
        if let Some(notice) = format.notice(&trace) {
            say!("ferrotrace: {notice}");
        }
        let mut out = super::Output::to(a.output.as_deref())?;
        let errs = format
            .write_functions(&trace, opts, Target::Stream(&mut out), &mut progress)
            .map_err(|e| out.error(e))?;
        out.finish()?;
        errs
    };
    Ok(super::finish(&trace, &errors))
}
