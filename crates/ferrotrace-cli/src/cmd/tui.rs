//! `ferrotrace tui`: the terminal around [`crate::tui::App`].

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use ferrotrace_analysis::progress::Progress;
use ferrotrace_analysis::sections::Sections;
use ratatui::crossterm::event::{self, Event, KeyEventKind};

use crate::tui::{App, MAX_FRAMES};
use crate::Error;

/// Arguments of `ferrotrace tui`.
#[derive(Args)]
#[command(
    after_help = "Views: 1 report (s sorts), 2 call graph of a function (callers, callees), 3 call tree of a thread, 4 samples. Enter jumps from a function to its graph, c to its callers, / searches, ? lists the keys, q quits."
)]
pub struct TuiArgs {
    #[command(flatten)]
    trace: super::TraceInput,
    /// Name functions from this ELF file when the trace carries addresses, not names (a trace of
    /// ferrotrace-embedded without the embedder's symbols)
    #[arg(long, value_name = "BINARY")]
    symbols: Option<PathBuf>,
    /// Draw the first screen and exit (bench/tui.sh times it)
    #[arg(long, hide = true)]
    first_screen_and_exit: bool,
}

/// The TUI's state for the trace at `path`: opened and reported in one pass (as `report` does),
/// its samples loaded; the call graph and call trees (of at most `max_frames` frames) follow on
/// worker threads. What is wrong with the trace is kept in `traces` (said at the end, or before an
/// error).
pub fn app(
    path: &Path,
    symbols: Option<&Path>,
    max_frames: usize,
    traces: &mut super::Traces,
) -> Result<App, Error> {
    let (trace, counted) = super::report::open_for_report(path, symbols, 1, traces)?;
    let sections = Sections::of(&trace).map_err(Error::analysis)?;
    let mut progress = Progress::new("report", trace.event_count());
    let report = super::report::report_of(&trace, &mut progress, 1, counted)?;
    drop(progress);
    Ok(App::new(trace, report, sections.samples, max_frames))
}

/// Runs the TUI until q.
pub fn run(a: TuiArgs, traces: &mut super::Traces) -> Result<ExitCode, Error> {
    if !std::io::stdout().is_terminal() || !std::io::stdin().is_terminal() {
        return Err(Error::Usage(
            "tui needs a terminal; use report/graph/replay for text".into(),
        ));
    }
    let mut app = app(&a.trace.input, a.symbols.as_deref(), MAX_FRAMES, traces)?;
    // try_init restores the terminal from its panic hook too.
    let mut terminal = ratatui::try_init().map_err(|e| {
        ratatui::restore();
        Error::Usage(format!("cannot set up the terminal: {e}"))
    })?;
    let ended = (|| -> std::io::Result<()> {
        loop {
            app.poll();
            terminal.draw(|f| app.draw(f))?;
            if a.first_screen_and_exit {
                return Ok(());
            }
            // Wakes up to show what the workers finish.
            if event::poll(Duration::from_millis(100))? {
                if let Event::Key(k) = event::read()? {
                    if k.kind == KeyEventKind::Press && app.key(k) {
                        return Ok(());
                    }
                }
            }
        }
    })();
    // The terminal shows its cursor again when dropped; raw mode and the alternate screen end here.
    drop(terminal);
    ratatui::restore();
    ended.map_err(|e| Error::Usage(format!("terminal: {e}")))?;
    Ok(traces.finish(app.trace(), &app.errors()))
}
