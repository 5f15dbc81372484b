//! `ferrotrace replay`.

use crate::Error;
use std::collections::HashMap;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use ferrotrace_analysis::progress::Progress;
use ferrotrace_analysis::replay::samples::{SampleFilter, SampledStacks};
use ferrotrace_analysis::replay::{parse_time_range, replay, Fields, Options};
use ferrotrace_analysis::sections::Sections;
use ferrotrace_core::units;
use regex_lite::Regex;

/// Arguments of `ferrotrace replay`.
#[derive(Args)]
#[command(after_help = ferrotrace_core::units::GRAMMAR)]
pub struct ReplayArgs {
    #[command(flatten)]
    trace: super::TraceInput,
    /// Name functions from this ELF file when the trace carries addresses, not names (a trace of
    /// ferrotrace-embedded without the embedder's symbols)
    #[arg(long, value_name = "BINARY")]
    symbols: Option<PathBuf>,
    /// Show only functions matching REGEX (their demangled name, or NAME@0xADDR) and what they call
    #[arg(short = 'F', long = "filter", value_name = "REGEX")]
    filter: Option<String>,
    /// Hide functions matching REGEX (their demangled name, or NAME@0xADDR) and what they call
    #[arg(short = 'N', long = "notrace", value_name = "REGEX")]
    notrace: Option<String>,
    /// Show at most DEPTH levels (counted from the -F match, if any)
    #[arg(short = 'D', long = "depth", value_name = "DEPTH")]
    depth: Option<usize>,
    /// Hide functions that ran shorter than DURATION (e.g. 10us, 1.5ms; plain numbers are ns)
    #[arg(short = 't', long = "time-filter", value_name = "DURATION", value_parser = parse_duration)]
    time_filter: Option<u64>,
    /// Show only these threads (comma-separated)
    #[arg(long = "tid", value_delimiter = ',')]
    tid: Option<Vec<u32>>,
    /// Show only what happens in A~B (elapsed times with a unit like 2ms~5ms, or timestamps)
    #[arg(long = "time-range", value_name = "A~B")]
    time_range: Option<String>,
    /// Columns: duration,tid,time,delta,elapsed (a leading + adds to the default duration,tid)
    #[arg(short = 'f', long = "output-fields", value_name = "FIELDS")]
    fields: Option<String>,
    /// Show each function's file:line from the binary's debug info (when the binary is still there)
    #[arg(long)]
    srcline: bool,
}

/// Parses `-t` into nanoseconds: `10us`, `1.5ms`, `2s`, `300ns` or a number of nanoseconds (the
/// units grammar); not a negative one, NaN or infinity.
pub fn parse_duration(s: &str) -> Result<u64, String> {
    units::parse_duration(s, Some(units::TimeUnit::Nanos))
        .map_err(|e| format!("bad duration {s:?}: {e}"))
}

fn regex(s: &Option<String>, what: &str) -> Result<Option<Regex>, String> {
    s.as_deref()
        .map(|r| Regex::new(r).map_err(|e| format!("bad {what} regex {r:?}: {e}")))
        .transpose()
}

/// Runs the replay.
pub fn run(a: ReplayArgs, traces: &mut super::Traces) -> Result<ExitCode, Error> {
    let trace = traces.open_named(&a.trace.input, a.symbols.as_deref())?;
    let start = trace.start_ns();
    let sections = Sections::of(&trace).map_err(Error::analysis)?;
    let mut out = super::Output::stdout();
    let samples = match sections.samples {
        // Samples alone (a profile): listed in time order, those the options select.
        Some(set) if !sections.functions => {
            let refused = [
                (a.time_filter.is_some(), "-t"),
                (a.fields.is_some(), "-f"),
                (a.srcline, "--srcline"),
            ];
            if let Some((_, option)) = refused.iter().find(|(given, _)| *given) {
                return Err(Error::Usage(format!(
                    "{}: {option} is for function calls, and this trace holds samples alone (a \
                     profile: no durations, fixed columns); --tid, --time-range, -F, -N and -D \
                     select among its samples",
                    a.trace.input.display()
                )));
            }
            let (filter, hide) = (regex(&a.filter, "-F")?, regex(&a.notrace, "-N")?);
            let time_range = a
                .time_range
                .as_deref()
                .map(|r| parse_time_range(r, start))
                .transpose()
                .map_err(Error::analysis)?;
            let selected = SampleFilter {
                tids: a.tid.as_deref(),
                time_range,
                filter: filter.as_ref(),
                hide: hide.as_ref(),
            };
            ferrotrace_analysis::replay::samples::replay_text(
                &set,
                &selected,
                a.depth.unwrap_or(0),
                &mut out,
            )
            .map_err(|e| out.error(e))?;
            out.finish()?;
            return Ok(traces.finish(&trace, &[]));
        }
        // Beside function events (`record --sample`): each in place, inside the running function.
        Some(set) => Some(SampledStacks::new(set, &trace)),
        None => None,
    };
    let opts = Options {
        filter: regex(&a.filter, "-F")?,
        hide: regex(&a.notrace, "-N")?,
        max_depth: a.depth,
        min_duration_ns: a.time_filter.unwrap_or(0),
        tids: a.tid,
        time_range: a
            .time_range
            .as_deref()
            .map(|r| parse_time_range(r, start))
            .transpose()
            .map_err(Error::analysis)?,
        fields: a
            .fields
            .as_deref()
            .map(Fields::parse)
            .transpose()
            .map_err(Error::analysis)?
            .unwrap_or_default(),
        srclines: if a.srcline {
            super::srclines(&trace)?
        } else {
            HashMap::new()
        },
        samples,
    };
    let mut progress = Progress::new("replay", trace.event_count());
    let errors = replay(&trace, &opts, &mut out, &mut progress).map_err(|e| out.error(e))?;
    out.finish()?;
    drop(progress);
    Ok(traces.finish(&trace, &errors))
}
