//! `ferrotrace mem`: totals, the peak and who held it, leaks, top sites, temporary allocations.

use crate::Error;
use std::process::ExitCode;

use clap::Args;
use ferrotrace_analysis::mem::{self, View};

/// Arguments of `ferrotrace mem`.
#[derive(Args)]
pub struct MemArgs {
    #[command(flatten)]
    trace: super::TraceInput,
    /// Every leak (block live at exit), by stack
    #[arg(long, conflicts_with = "temporary")]
    leaks: bool,
    /// Temporary allocations (freed before their thread's next allocation), by stack
    #[arg(long)]
    temporary: bool,
    /// Print one JSON object with every list in full
    #[arg(long, conflicts_with_all = ["leaks", "temporary"])]
    json: bool,
    /// Rows or stacks per list
    #[arg(short = 'n', long, default_value_t = 10)]
    limit: usize,
}

/// Prints the memory report of a trace recorded with `record --alloc`.
pub fn run(args: MemArgs, traces: &mut super::Traces) -> Result<ExitCode, Error> {
    let trace = traces.open(&args.trace.input)?;
    if !trace.has_allocations() {
        return Err(Error::Usage(format!(
            "{} holds no allocation events: record with `ferrotrace record --alloc`",
            args.trace.input.display()
        )));
    }
    let rep = mem::analyse(&trace).map_err(Error::analysis)?;
    let text = if args.json {
        format!("{}\n", rep.json())
    } else {
        let view = if args.leaks {
            View::Leaks
        } else if args.temporary {
            View::Temporary
        } else {
            View::Summary
        };
        rep.text(view, args.limit)
    };
    super::emit(None, text.as_bytes())?;
    for m in &rep.unreadable_modules {
        say!("ferrotrace: warning: cannot name addresses in {m}");
    }
    Ok(traces.finish(&trace, &[]))
}
