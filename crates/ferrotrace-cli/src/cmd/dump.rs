//! `ferrotrace dump`.

use crate::Error;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::builder::{PossibleValue, PossibleValuesParser, TypedValueParser};
use clap::Args;
use ferrotrace_analysis::dump::{self, Exporter, Plan, Target};
use ferrotrace_analysis::progress::Progress;
use ferrotrace_core::units;

/// `--format`: the formats the library registers ([`dump::FORMATS`]), by name.
fn formats() -> impl TypedValueParser<Value = &'static dyn Exporter> {
    PossibleValuesParser::new(
        dump::FORMATS
            .iter()
            .map(|f| PossibleValue::new(f.name()).help(f.about())),
    )
    .map(|name| dump::format(&name).expect("a registered format"))
}

/// `dump`'s line in `ferrotrace --help`: the registered formats ([`dump::FORMATS`]), by name.
pub fn about() -> String {
    format!("Convert the trace to another format: {}", names(|_| true))
}

/// The names of the registered formats that `keep` keeps, as `a, b, c`.
pub fn names(keep: impl Fn(&dyn Exporter) -> bool) -> String {
    let names: Vec<&str> = dump::FORMATS
        .iter()
        .filter(|f| keep(**f))
        .map(|f| f.name())
        .collect();
    names.join(", ")
}

/// Arguments of `ferrotrace dump`.
#[derive(Args)]
#[command(after_help = ferrotrace_core::units::GRAMMAR)]
pub struct DumpArgs {
    #[command(flatten)]
    trace: super::TraceInput,
    /// Name functions from this ELF file when the trace carries addresses, not names (a trace of
    /// ferrotrace-embedded without the embedder's symbols)
    #[arg(long, value_name = "BINARY")]
    symbols: Option<PathBuf>,
    /// Output format
    #[arg(long = "format", value_parser = formats())]
    format: &'static dyn Exporter,
    /// Output file (a directory for uftrace and parquet; default: uftrace.data, ferrotrace.parquet,
    /// or stdout for the others; the prefix of the pieces with --max-size)
    #[arg(short = 'o', long = "output")]
    output: Option<PathBuf>,
    /// Perfetto: write plain packets instead of zlib-compressed batches
    #[arg(long)]
    uncompressed: bool,
    /// Perfetto: start at this time since the trace's start (1.5s, 200ms, 10us) or at the entry of
    /// a call (parse#3: the third call of parse); frames open there begin there
    #[arg(long, value_name = "TIME|FUNCTION#N", value_parser = dump::window::parse_point)]
    from: Option<dump::window::Point>,
    /// Perfetto: stop at this time since the trace's start or at the exit of a call (parse#3);
    /// frames open there end there
    #[arg(long, value_name = "TIME|FUNCTION#N", value_parser = dump::window::parse_point)]
    to: Option<dump::window::Point>,
    /// Perfetto: write pieces -o PREFIX.1.perfetto-trace, PREFIX.2.perfetto-trace, … each smaller
    /// than SIZE (500M, 1G) and each a trace of its own
    #[arg(long, value_name = "SIZE", value_parser = parse_size, requires = "output")]
    max_size: Option<u64>,
}

/// Parses `--max-size` (the units grammar: `1G`, `500M`, `64K` or a number of bytes), at least 16K.
fn parse_size(s: &str) -> Result<u64, String> {
    let bytes = units::parse_size(s).map_err(|e| format!("bad size {s:?}: {e}"))?;
    if bytes < 16 << 10 {
        return Err(format!("--max-size {s}: at least 16K"));
    }
    Ok(bytes)
}

/// Writes the dump.
pub fn run(a: DumpArgs, traces: &mut super::Traces) -> Result<ExitCode, Error> {
    let trace = traces.open_named(&a.trace.input, a.symbols.as_deref())?;
    let format = a.format;
    let supports = format.supports();
    if !supports.window && (a.from.is_some() || a.to.is_some()) {
        return Err(format!(
            "--from and --to are for --format {}",
            names(|f| f.supports().window)
        )
        .into());
    }
    if !supports.pieces && a.max_size.is_some() {
        return Err(format!(
            "--max-size is for --format {}",
            names(|f| f.supports().pieces)
        )
        .into());
    }
    let window = dump::window::resolve(&trace, a.from.as_ref(), a.to.as_ref())?;
    let opts = dump::Options {
        compress: !a.uncompressed,
        window,
        max_size: a.max_size,
    };
    if let Plan::Samples(set) = dump::plan(&trace, format).map_err(Error::analysis)? {
        if !window.is_all() || a.max_size.is_some() {
            return Err(Error::Usage(format!(
                "{}: --from, --to and --max-size cut function traces; this trace's samples are \
                 written whole",
                a.trace.input.display()
            )));
        }
        let bytes = format
            .write_samples(&trace, &set, opts)
            .map_err(Error::analysis)?;
        super::emit(a.output.as_deref(), &bytes)?;
        return Ok(traces.finish(&trace, &[]));
    }
    let mut progress = Progress::new("dump", trace.event_count());
    let errors = if let Some(default) = format.directory() {
        let dir = a.output.clone().unwrap_or_else(|| PathBuf::from(default));
        if super::is_stdout(&dir) {
            return Err(format!(
                "--format {} writes a directory of files: -o - (standard output) cannot hold it; \
                 give -o DIR",
                format.name()
            )
            .into());
        }
        let written = format
            .write_functions(&trace, opts, Target::Directory(&dir), &mut progress)
            .map_err(|e| format!("{}: {e}", dir.display()))?;
        drop(progress);
        say!(
            "ferrotrace: wrote {} data to {}",
            format.name(),
            dir.display()
        );
        written.errors
    } else if let (Some(_), Some(prefix)) = (a.max_size, a.output.as_deref()) {
        let written = format
            .write_functions(&trace, opts, Target::Pieces(prefix), &mut progress)
            .map_err(|e| format!("{}: {e}", prefix.display()))?;
        drop(progress);
        if let (Some(first), Some(last)) = (written.pieces.first(), written.pieces.last()) {
            say!(
                "ferrotrace: wrote {} pieces, {} to {}",
                written.pieces.len(),
                first.display(),
                last.display()
            );
        }
        written.errors
    } else {
        if let Some(notice) = format.notice(&trace, opts) {
            say!("ferrotrace: {notice}");
        }
        let mut out = super::Output::to(a.output.as_deref())?;
        let written = format
            .write_functions(&trace, opts, Target::Stream(&mut out), &mut progress)
            .map_err(|e| out.error(e))?;
        out.finish()?;
        written.errors
    };
    Ok(traces.finish(&trace, &errors))
}
