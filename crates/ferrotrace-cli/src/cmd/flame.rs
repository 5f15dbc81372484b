//! `ferrotrace flame`.

use crate::Error;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use ferrotrace_analysis::cct::Cct;
use ferrotrace_analysis::flame::memory::{self, Weight};
use ferrotrace_analysis::flame::{self, Input};
use ferrotrace_analysis::progress::Progress;

/// Arguments of `ferrotrace flame`.
#[derive(Args)]
pub struct FlameArgs {
    #[command(flatten)]
    trace: super::TraceInput,
    /// Name functions from this ELF file when the trace carries addresses, not names (a trace of
    /// ferrotrace-embedded without the embedder's symbols)
    #[arg(long, value_name = "BINARY")]
    symbols: Option<PathBuf>,
    /// Where to write (default: flame.svg, or stdout with --folded)
    #[arg(short = 'o', long = "output")]
    output: Option<PathBuf>,
    /// Write folded stacks (`a;b;c NANOSECONDS`) instead of an SVG
    #[arg(long)]
    folded: bool,
    /// Draw the samples of a trace that holds function events too (default: the function calls)
    #[arg(long, conflicts_with = "weight")]
    samples: bool,
    /// Draw the allocations (record --alloc) by their stacks, weighted by bytes allocated, number of
    /// allocations, or bytes still live at exit
    #[arg(long, value_enum)]
    weight: Option<MemWeight>,
}

/// What a memory flame graph's widths count.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum MemWeight {
    /// Bytes allocated
    Bytes,
    /// Number of allocations
    Allocations,
    /// Bytes still allocated when the trace ended
    Leaked,
}

/// The allocation flame graph.
fn memory(a: &FlameArgs, weight: MemWeight, traces: &mut super::Traces) -> Result<ExitCode, Error> {
    let trace = traces.open(&a.trace.input)?;
    let weight = match weight {
        MemWeight::Bytes => Weight::Bytes,
        MemWeight::Allocations => Weight::Allocations,
        MemWeight::Leaked => Weight::Leaked,
    };
    let bytes = memory::draw(&trace, weight, a.folded).map_err(Error::analysis)?;
    super::emit(default_output(a).as_deref(), &bytes)?;
    Ok(traces.finish(&trace, &[]))
}

/// `-o`, or `flame.svg` for an SVG (folded stacks go to standard output).
fn default_output(a: &FlameArgs) -> Option<PathBuf> {
    a.output
        .clone()
        .or_else(|| (!a.folded).then(|| PathBuf::from("flame.svg")))
}

/// Writes the flame graph.
pub fn run(a: FlameArgs, traces: &mut super::Traces) -> Result<ExitCode, Error> {
    if let Some(w) = a.weight {
        return memory(&a, w, traces);
    }
    let trace = traces.open_named(&a.trace.input, a.symbols.as_deref())?;
    if let Input::Samples(set, totals) = Input::of(&trace, a.samples).map_err(Error::analysis)? {
        let bytes =
            flame::samples::draw(&trace, &set, &totals, a.folded).map_err(Error::analysis)?;
        super::emit(default_output(&a).as_deref(), &bytes)?;
        return Ok(traces.finish(&trace, &[]));
    }
    let mut progress = Progress::new("flame", trace.event_count());
    let cct = Cct::build(&trace, None, &mut progress).map_err(Error::analysis)?;
    drop(progress);
    let output = default_output(&a);
    let mut out = super::Output::to(output.as_deref())?;
    flame::write_functions(&trace, &cct, a.folded, &mut out).map_err(|e| out.error(e))?;
    out.finish()?;
    if let Some(p) = output {
        say!("ferrotrace: wrote {}", p.display());
    }
    Ok(traces.finish(&trace, &cct.errors))
}
