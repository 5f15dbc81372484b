//! `ferrotrace`: record what a program does, and answer questions about the recording.
//!
//! One file per subcommand under `cmd/` (in this package's library, which `cargo-ferrotrace` shares);
//! the logic lives in the library crates (`ferrotrace` runs in the
//! traced process, `ferrotrace-analysis` reads traces). This binary only parses arguments, starts
//! programs and prints.

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use ferrotrace_cli::{cmd, say};

#[derive(Parser)]
#[command(name = "ferrotrace", version, about = "Trace the functions (XRay sleds, mcount/fentry calls, patchable NOPs), tracepoints, `tracing` spans and allocations of Rust and C/C++ programs, and profile any program", long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// Accepted for uftrace's sake: ferrotrace never pages its output
    #[arg(long, global = true)]
    no_pager: bool,
}

#[derive(Subcommand)]
enum Command {
    /// Run a program and record every traced function entry and exit
    Record(cmd::record::RecordArgs),
    /// Show what a trace holds: command, duration, threads, events, lost events, size
    Info(cmd::info::InfoArgs),
    /// Show the call tree in time order, per thread, with durations
    Replay(cmd::replay::ReplayArgs),
    /// Per-function total time, self time, calls, average, min and max
    Report(cmd::report::ReportArgs),
    /// Walk the report, call graph, call trees and samples with the keyboard (needs a terminal)
    #[cfg(feature = "tui")]
    Tui(cmd::tui::TuiArgs),
    /// The aggregated call graph below a function (or of the whole program)
    Graph(cmd::graph::GraphArgs),
    /// Memory: allocations, the peak and who held it, leaks, top sites, temporaries (record --alloc)
    Mem(cmd::mem::MemArgs),
    /// A flame graph (SVG, weighted by time) or folded stacks
    Flame(cmd::flame::FlameArgs),
    #[command(about = cmd::dump::about())]
    Dump(cmd::dump::DumpArgs),
    /// List the tracepoints and XRay-instrumented functions of a program (without running it)
    List(cmd::list::ListArgs),
    /// Run a program and print its tracepoints (and -F functions) as they happen
    Live(cmd::live::LiveArgs),
    /// Sample any program (or a running process) with perf_event_open: CPU time, uprobes, tracepoints
    Profile(cmd::profile::ProfileArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let mut traces = cmd::Traces::default();
    let result = match cli.command {
        Command::Record(a) => cmd::record::run(a),
        Command::Info(a) => cmd::info::run(a, &mut traces),
        Command::Replay(a) => cmd::replay::run(a, &mut traces),
        Command::Report(a) => cmd::report::run(a, &mut traces),
        Command::Graph(a) => cmd::graph::run(a, &mut traces),
        #[cfg(feature = "tui")]
        Command::Tui(a) => cmd::tui::run(a, &mut traces),
        Command::Mem(a) => cmd::mem::run(a, &mut traces),
        Command::Flame(a) => cmd::flame::run(a, &mut traces),
        Command::Dump(a) => cmd::dump::run(a, &mut traces),
        Command::List(a) => cmd::list::run(a),
        Command::Live(a) => cmd::live::run(a),
        Command::Profile(a) => cmd::profile::run(a, &mut traces),
    };
    match result {
        Ok(code) => code,
        // Nothing is left to say to a reader that is gone; stderr stays quiet too (`cmd | head`).
        Err(e) if e.is_closed_pipe() => ExitCode::SUCCESS,
        Err(e) => {
            traces.say_unfinished();
            say!("ferrotrace: {e}");
            ExitCode::from(2)
        }
    }
}
