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
#[cfg(feature = "tui")]
pub mod tui;

use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use ferrotrace_analysis::reader::Trace;

use crate::Error;
use ferrotrace_analysis::samples::SampleSet;

/// The trace a reading command reads: `-i FILE`, or uftrace's `-d`/`--data`.
#[derive(clap::Args)]
pub struct TraceInput {
    /// Trace file to read (uftrace's -d/--data too)
    #[arg(
        short = 'i',
        long = "input",
        short_alias = 'd',
        alias = "data",
        default_value = "ferrotrace.data"
    )]
    pub input: PathBuf,
}

/// The traces a command reads, and what is wrong with them, said once: after the command's results
/// ([`Traces::finish`]) or, when the command ends with an error before that (`mem` on a trace whose
/// Session chunk is missing: "holds no allocation events"), before that error, which may well come
/// from the damage ([`Traces::say_unfinished`], by `main`). `main` owns it and hands it to the
/// command; nothing about it is process-wide.
#[derive(Default)]
pub struct Traces {
    /// The warnings of the traces opened and not yet finished.
    unfinished: Vec<(PathBuf, Vec<String>)>,
}

impl Traces {
    /// Opens a trace; errors become the one-line message `main` prints.
    pub fn open(&mut self, path: &Path) -> Result<Trace, Error> {
        Ok(self.opened(Trace::open(path)?))
    }

    /// A trace just opened (by [`Traces::open`], or by a command's own way of opening it), its
    /// warnings kept for [`Traces::finish`].
    pub fn opened(&mut self, trace: Trace) -> Trace {
        let warnings = trace.warnings();
        if !warnings.is_empty() {
            self.unfinished.push((trace.path().to_path_buf(), warnings));
        }
        trace
    }

    /// Opens a trace and names the functions of one that carries addresses instead of names (an
    /// embedded recorder's) from `symbols` (`--symbols BINARY`), or from the binary the trace names.
    pub fn open_named(&mut self, path: &Path, symbols: Option<&Path>) -> Result<Trace, Error> {
        named(self.open(path)?, symbols)
    }

    /// Warns about a truncated trace or read errors after the results were printed; returns the exit
    /// code (1 when the results cover only part of the trace).
    pub fn finish(&mut self, trace: &Trace, errors: &[String]) -> ExitCode {
        let mut code = ExitCode::SUCCESS;
        self.unfinished.retain(|(p, _)| p != trace.path());
        for w in trace.warnings() {
            say!("{w}");
            code = ExitCode::from(1);
        }
        for e in errors {
            say!("ferrotrace: warning: {e}; that thread's results stop there");
            code = ExitCode::from(1);
        }
        code
    }

    /// Says what is wrong with the traces the command opened and did not finish: `main` calls it
    /// before the error that ended the command.
    pub fn say_unfinished(self) {
        for (_, warnings) in self.unfinished {
            for w in warnings {
                say!("{w}");
            }
        }
    }
}

/// [`Traces::open_named`] of a trace already [`Traces::opened`].
pub fn named(mut trace: Trace, symbols: Option<&Path>) -> Result<Trace, Error> {
    let warnings = ferrotrace_analysis::symbolize::name_address_ids(&mut trace, symbols)
        .map_err(Error::analysis)?;
    for w in warnings {
        say!("ferrotrace: warning: {w}");
    }
    Ok(trace)
}

/// `--srcline`: `file:line` by function id, with one warning for each module whose lines cannot be
/// read (a column that stays empty must say why).
pub fn srclines(trace: &Trace) -> Result<std::collections::HashMap<u32, String>, Error> {
    let found = ferrotrace_analysis::srcline::lookup(trace).map_err(Error::analysis)?;
    for why in &found.unavailable {
        say!("ferrotrace: warning: --srcline: {why}");
    }
    Ok(found.lines)
}

/// Where a command writes its results: standard output or a file, buffered. Every command writes
/// through one, so every write error becomes one [`Error::Write`] ([`Output::error`]): a reader that
/// went away (`| head`: EPIPE) ends the command quietly with exit 0 (decided once, in `main`),
/// anything else (ENOSPC, EIO) becomes one line saying what could not be written.
pub struct Output {
    out: BufWriter<Box<dyn Write>>,
    /// What the output is, for messages: `standard output` or the file's path.
    name: String,
    /// Standard output: [`Write::flush`] also notices a reader that went away without a write failing.
    is_stdout: bool,
    /// A regular file we opened: removed when a write fails, so that no result cut short (a full
    /// disk) is left looking whole.
    file: Option<PathBuf>,
}

impl Output {
    /// Standard output.
    pub fn stdout() -> Output {
        Output {
            out: BufWriter::with_capacity(1 << 16, Box::new(std::io::stdout().lock())),
            name: "standard output".into(),
            is_stdout: true,
            file: None,
        }
    }

    /// A file at `path` for results (its directory must exist): never through a link, never over a
    /// trace or another user's file ([`ferrotrace_core::output::create_result`]).
    pub fn create(path: &Path) -> Result<Output, Error> {
        let file = ferrotrace_core::output::create_result(path)?;
        let regular = file.metadata().is_ok_and(|m| m.file_type().is_file());
        Ok(Output {
            out: BufWriter::with_capacity(1 << 16, Box::new(file)),
            name: path.display().to_string(),
            is_stdout: false,
            file: regular.then(|| path.to_path_buf()),
        })
    }

    /// The file at `path`, or standard output (no path, or `-`).
    pub fn to(path: Option<&Path>) -> Result<Output, Error> {
        match path {
            Some(p) if !is_stdout(p) => Output::create(p),
            _ => Ok(Output::stdout()),
        }
    }

    /// The error for a failed write: [`Error::Write`], which `main` turns into a quiet exit when the
    /// reader went away (EPIPE) and into one line saying what could not be written otherwise. A
    /// regular file of ours is removed.
    pub fn error(&self, source: std::io::Error) -> Error {
        let removed = self
            .file
            .as_ref()
            .is_some_and(|path| std::fs::remove_file(path).is_ok());
        Error::Write {
            what: self.name.clone(),
            source,
            removed,
        }
    }

    /// Flushes what is buffered; write errors become [`Output::error`]'s message.
    pub fn finish(mut self) -> Result<(), Error> {
        self.flush().map_err(|e| self.error(e))
    }

    /// Writes `s` whole.
    pub fn print(&mut self, s: &str) -> Result<(), Error> {
        self.write_all(s.as_bytes()).map_err(|e| self.error(e))
    }
}

impl Write for Output {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.out.write(buf)
    }

    fn write_all(&mut self, buf: &[u8]) -> std::io::Result<()> {
        self.out.write_all(buf)
    }

    /// Flushes, then (on standard output) asks whether the reader is still there: a command whose
    /// output is rare (`replay -D 3 | head`) would otherwise read the whole trace before a write
    /// failed. The analyses flush every 65,536 events (replay with filters every 16,384).
    fn flush(&mut self) -> std::io::Result<()> {
        self.out.flush()?;
        if self.is_stdout && reader_gone(libc::STDOUT_FILENO) {
            return Err(std::io::ErrorKind::BrokenPipe.into());
        }
        Ok(())
    }
}

/// True when `fd` is a pipe or socket whose reading end is closed (poll reports POLLERR on the writing
/// end of a widowed pipe, POLLHUP on a socket).
fn reader_gone(fd: libc::c_int) -> bool {
    let mut p = libc::pollfd {
        fd,
        events: 0,
        revents: 0,
    };
    // SAFETY: one valid pollfd, no waiting.
    let n = unsafe { libc::poll(&mut p, 1, 0) };
    n == 1 && p.revents & (libc::POLLERR | libc::POLLHUP) != 0
}

/// The samples of `trace`, `None` when it holds none.
pub fn samples(trace: &Trace) -> Result<Option<SampleSet>, Error> {
    SampleSet::load(trace).map_err(Error::analysis)
}

/// Writes `bytes` to `output`, or to stdout.
pub fn emit(output: Option<&Path>, bytes: &[u8]) -> Result<(), Error> {
    let mut out = Output::to(output)?;
    out.write_all(bytes).map_err(|e| out.error(e))?;
    out.finish()?;
    if let Some(p) = output.filter(|p| !is_stdout(p)) {
        say!("ferrotrace: wrote {}", p.display());
    }
    Ok(())
}

/// `-o -`: standard output, as every Unix tool takes it.
pub fn is_stdout(path: &Path) -> bool {
    path == Path::new("-")
}
