//! `ferrotrace dump`.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, ValueEnum};
use ferrotrace_analysis::dump;
use ferrotrace_analysis::progress::Progress;
use ferrotrace_analysis::samples;

/// Output formats.
#[derive(Clone, Copy, ValueEnum)]
enum Format {
    /// A uftrace data directory (uftrace replay/report -d DIR)
    Uftrace,
    /// Chrome trace-event JSON
    Chrome,
    /// Perfetto protobuf (ui.perfetto.dev)
    Perfetto,
    /// Folded stacks weighted by self time in ns (samples: by sample count)
    Folded,
    /// Firefox Profiler processed-profile JSON with symbols (profiler.firefox.com; samples only)
    Firefox,
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
    #[arg(long = "format", value_enum)]
    format: Format,
    /// Output file (a directory for uftrace; default: uftrace.data, or stdout for the others)
    #[arg(short = 'o', long = "output")]
    output: Option<PathBuf>,
    /// Perfetto: write plain packets instead of zlib-compressed batches
    #[arg(long)]
    uncompressed: bool,
}

/// Writes the dump.
pub fn run(a: DumpArgs) -> Result<ExitCode, String> {
    let trace = super::open_named(&a.input, a.symbols.as_deref())?;
    let only_samples = !trace.has_function_events();
    if let Some(set) =
        super::samples(&trace)?.filter(|_| only_samples || matches!(a.format, Format::Firefox))
    {
        let bytes = match a.format {
            Format::Folded => samples::folded(&set, false).into_bytes(),
            Format::Firefox => {
                let named = samples::firefox_json(&set).map_err(|e| e.to_string())?;
                ferrotrace_analysis::firefox_libs::add_native_frames(&trace, &named)
                    .map_err(|e| e.to_string())?
                    .into_bytes()
            }
            Format::Perfetto => {
                let mut buf = Vec::new();
                samples::perfetto(&set, !a.uncompressed, &mut buf)
                    .map_err(|e| format!("cannot encode the samples: {e}"))?;
                buf
            }
            Format::Uftrace | Format::Chrome => {
                return Err(format!(
                    "{}: a trace of samples has no function calls to dump as {}; use --format \
                     firefox, perfetto or folded",
                    a.input.display(),
                    if matches!(a.format, Format::Uftrace) {
                        "uftrace"
                    } else {
                        "chrome"
                    }
                ))
            }
        };
        super::emit(a.output.as_deref(), &bytes)?;
        return Ok(super::finish(&trace, &[]));
    }
    if let Format::Firefox = a.format {
        return Err(format!(
            "{}: --format firefox is for traces with samples (ferrotrace profile); use perfetto or chrome for function traces",
            a.input.display()
        ));
    }
    let mut progress = Progress::new("dump", trace.event_count());
    let errors = if let Format::Uftrace = a.format {
        let dir = a
            .output
            .clone()
            .unwrap_or_else(|| PathBuf::from("uftrace.data"));
        let errs = dump::uftrace::write(&trace, &dir, &mut progress)
            .map_err(|e| format!("{}: {e}", dir.display()))?;
        drop(progress);
        eprintln!("ferrotrace: wrote uftrace data to {}", dir.display());
        errs
    } else {
        if let Format::Chrome = a.format {
            // ~60 bytes per event: say so before writing gigabytes, and where a smaller form is.
            eprintln!(
                "ferrotrace: Chrome JSON of {} events will take about {}; --format perfetto writes \
                 them in about 1 byte each",
                trace.event_count(),
                human_bytes(dump::chrome::estimated_bytes(&trace))
            );
        }
        let mut out = super::Output::to(a.output.as_deref())?;
        let r = match a.format {
            Format::Chrome => dump::chrome::write(&trace, &mut out, &mut progress),
            Format::Perfetto => dump::perfetto::write(
                &trace,
                dump::perfetto::Options {
                    compress: !a.uncompressed,
                },
                &mut out,
                &mut progress,
            ),
            Format::Folded => dump::folded::write(&trace, &mut out, &mut progress),
            Format::Uftrace | Format::Firefox => unreachable!("handled above"),
        };
        let errs = r.map_err(|e| out.error(e))?;
        out.finish()?;
        errs
    };
    Ok(super::finish(&trace, &errors))
}

/// `1.5 GB`, `320 MB`, `12 kB`: decimal units, as `ls -h --si` and disk sizes.
fn human_bytes(n: u64) -> String {
    let mut v = n as f64;
    for unit in ["bytes", "kB", "MB", "GB"] {
        if v < 1000.0 {
            return if unit == "bytes" {
                format!("{n} bytes")
            } else {
                format!("{v:.1} {unit}")
            };
        }
        v /= 1000.0;
    }
    format!("{v:.1} TB")
}
