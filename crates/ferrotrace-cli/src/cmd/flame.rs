//! `ferrotrace flame`.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use ferrotrace_analysis::cct::Cct;
use ferrotrace_analysis::flame::memory::Weight;
use ferrotrace_analysis::flame::samples;
use ferrotrace_analysis::flame::{write_folded, write_svg};
use ferrotrace_analysis::progress::Progress;
use ferrotrace_analysis::samples::SampleSet;

/// Arguments of `ferrotrace flame`.
#[derive(Args)]
pub struct FlameArgs {
    /// Trace file to read
    #[arg(short = 'i', long = "input", default_value = "ferrotrace.data")]
    input: PathBuf,
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
fn memory(a: &FlameArgs, weight: MemWeight) -> Result<ExitCode, String> {
    let trace = super::open(&a.input)?;
    if !trace.has_allocations() {
        return Err(format!(
            "{}: --weight: the trace holds no allocations (record with --alloc)",
            a.input.display()
        ));
    }
    let weight = match weight {
        MemWeight::Bytes => Weight::Bytes,
        MemWeight::Allocations => Weight::Allocations,
        MemWeight::Leaked => Weight::Leaked,
    };
    let rep = ferrotrace_analysis::mem::analyse_totals(&trace).map_err(|e| e.to_string())?;
    let folded = rep.folded(weight);
    let bytes = if a.folded {
        folded.into_bytes()
    } else if folded.is_empty() {
        return Err(format!(
            "{}: no allocation has {} to draw",
            a.input.display(),
            weight.unit()
        ));
    } else {
        let title = format!(
            "ferrotrace memory ({}): {}",
            weight.unit(),
            trace.session.args.join(" ")
        );
        let mut svg = Vec::new();
        ferrotrace_analysis::flame::render(
            folded,
            ferrotrace_analysis::flame::svg_options(&title, weight.unit()),
            &mut svg,
        )
        .map_err(|e| e.to_string())?;
        svg
    };
    let output = a
        .output
        .clone()
        .or_else(|| (!a.folded).then(|| PathBuf::from("flame.svg")));
    super::emit(output.as_deref(), &bytes)?;
    Ok(super::finish(&trace, &[]))
}

/// Writes the flame graph.
pub fn run(a: FlameArgs) -> Result<ExitCode, String> {
    if let Some(w) = a.weight {
        return memory(&a, w);
    }
    let trace = super::open_named(&a.input, a.symbols.as_deref())?;
    let use_samples = a.samples || !trace.has_function_events();
    let totals = if use_samples {
        SampleSet::load_totals(&trace).map_err(|e| e.to_string())?
    } else {
        None
    };
    if let Some((set, totals)) = totals {
        // Samples: weighted by sample count (off-CPU: by time off the CPU), summed per stack as they
        // are read.
        let title = format!("ferrotrace profile: {}", trace.session.args.join(" "));
        let bytes = if a.folded {
            samples::folded_totals(&set, &totals, false).into_bytes()
        } else {
            samples::flame_svg_totals(&set, &totals, &title).map_err(|e| e.to_string())?
        };
        let output = a
            .output
            .clone()
            .or_else(|| (!a.folded).then(|| PathBuf::from("flame.svg")));
        super::emit(output.as_deref(), &bytes)?;
        return Ok(super::finish(&trace, &[]));
    }
    if a.samples {
        return Err(format!(
            "{}: --samples: the trace holds no samples",
            a.input.display()
        ));
    }
    let mut progress = Progress::new("flame", trace.event_count());
    let cct = Cct::build(&trace, None, &mut progress).map_err(|e| e.to_string())?;
    drop(progress);
    let output = match (&a.output, a.folded) {
        (Some(p), _) => Some(p.clone()),
        (None, true) => None,
        (None, false) => Some(PathBuf::from("flame.svg")),
    };
    let mut out = super::Output::to(output.as_deref())?;
    let title = format!("ferrotrace: {}", trace.session.args.join(" "));
    if a.folded {
        write_folded(&cct, &mut out).map_err(|e| out.error(e))?;
    } else {
        write_svg(&cct, &title, &mut out).map_err(|e| out.error(e))?;
    }
    out.finish()?;
    if let Some(p) = output {
        eprintln!("ferrotrace: wrote {}", p.display());
    }
    Ok(super::finish(&trace, &cct.errors))
}
