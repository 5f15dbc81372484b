//! `ferrotrace record`: run a program under the tracer.

use std::ffi::OsString;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, ValueEnum};
use ferrotrace_analysis::reader::Trace;
use ferrotrace_core::env::{AllocSpec, RuntimeSpec};
use ferrotrace_core::schema;
use ferrotrace_launch::salvage::Death;
use ferrotrace_launch::start::{Options, Program};
use ferrotrace_launch::{self as launch, checks, Ended};

use crate::Error;

/// What happens when trace buffers run out.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum Mode {
    /// Traced threads wait for the collector; nothing is lost
    Lossless,
    /// Traced threads never wait; events that find no buffer are counted as lost
    Drop,
    /// Keep only the newest events (--buffer-size of them), written at exit or on SIGUSR2
    Flight,
}

/// Arguments of `ferrotrace record`.
#[derive(Args)]
pub struct RecordArgs {
    /// Trace file to write (processes the program starts write FILE.PID)
    #[arg(short = 'o', long = "output", default_value = "ferrotrace.data")]
    pub output: PathBuf,
    /// Record only functions whose demangled name (or NAME@0xADDR, to pick one of several functions
    /// of one name) matches REGEX and what they call, as replay -F and uftrace do (repeatable; every
    /// function is still hooked: the trace is smaller, the program not faster)
    #[arg(short = 'F', long = "filter", value_name = "REGEX")]
    pub filter: Vec<String>,
    /// Leave out functions whose demangled name (or NAME@0xADDR) matches REGEX and what they call, as
    /// replay -N and uftrace do (repeatable)
    #[arg(short = 'N', long = "notrace", value_name = "REGEX")]
    pub notrace: Vec<String>,
    /// Patch only functions whose demangled name (or NAME@0xADDR) matches REGEX, as uftrace -P does:
    /// the others keep their NOPs and cost nothing (repeatable; default: every function)
    #[arg(short = 'P', long = "patch", value_name = "REGEX")]
    pub patch: Vec<String>,
    /// Enable the tracepoints that GLOB selects (`vfs_*`, `mycrate::*`; repeatable)
    #[arg(long = "trace", value_name = "GLOB")]
    pub trace: Vec<String>,
    /// What to do when buffers run out
    #[arg(long, value_enum, default_value = "lossless")]
    pub mode: Mode,
    /// Buffer memory (lossless, drop) or flight-ring size, e.g. 64M
    #[arg(long, value_name = "SIZE")]
    pub buffer_size: Option<String>,
    /// Record at most DEPTH levels of calls, counted from the -F match (from the thread's first traced
    /// frame without -F), as replay -D and uftrace do
    #[arg(short = 'D', long = "depth", value_name = "DEPTH")]
    pub depth: Option<u32>,
    /// Bytes per thread chunk (power of two, at least 256)
    #[arg(long, value_name = "SIZE", hide = true)]
    pub chunk_size: Option<String>,
    /// Record allocations too: malloc, free and the rest of their family (any dynamically linked
    /// program, with or without sleds), or `ferrotrace::Allocator` in programs that link ferrotrace.
    /// An instrumented program's functions are traced as well: add --no-functions for allocations alone
    #[arg(long)]
    pub alloc: bool,
    /// Trace no function, even in an instrumented program: record the allocations (--alloc) or the
    /// tracepoints (--trace) alone, at their cost alone (as heaptrack records a heap profile)
    #[arg(long)]
    pub no_functions: bool,
    /// Sample allocations: one per SIZE allocated bytes on average (e.g. 512K), weighted so that totals
    /// stay unbiased
    #[arg(long, value_name = "SIZE", requires = "alloc")]
    pub alloc_sample: Option<String>,
    /// Deepest allocation stack to record (0: none)
    #[arg(long, value_name = "N", requires = "alloc", default_value_t = 64,
          value_parser = clap::value_parser!(u32).range(0..=256))]
    pub alloc_stack_depth: u32,
    /// The program to run and its arguments
    #[arg(required = true, trailing_var_arg = true, value_name = "PROGRAM")]
    pub command: Vec<OsString>,
}

impl RecordArgs {
    /// What the runtime in the program is asked to do, writing to `output`.
    fn spec(&self, output: &Path) -> RuntimeSpec {
        RuntimeSpec {
            output: Some(output.to_path_buf()),
            filter: self.filter.clone(),
            notrace: self.notrace.clone(),
            patch: self.patch.clone(),
            no_functions: self.no_functions,
            trace: self.trace.clone(),
            mode: Some(match self.mode {
                Mode::Lossless => schema::Mode::Lossless,
                Mode::Drop => schema::Mode::Drop,
                Mode::Flight => schema::Mode::Flight,
            }),
            buffer_size: self.buffer_size.clone(),
            chunk_size: self.chunk_size.clone(),
            depth: self.depth,
            alloc: self.alloc.then(|| AllocSpec {
                sample: self.alloc_sample.clone(),
                stack_depth: Some(self.alloc_stack_depth),
            }),
            ..RuntimeSpec::default()
        }
    }
}

/// The program's end as our exit code, saying once when a signal killed it.
pub fn exit_code_of(ended: &Ended, program: &Path) -> ExitCode {
    if let Some(sig) = ended.status.signal() {
        say!(
            "ferrotrace: {} was killed by signal {sig}",
            program.display()
        );
    }
    ExitCode::from(ended.exit_code())
}

fn absolute(p: &Path) -> PathBuf {
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        std::env::current_dir()
            .map(|d| d.join(p))
            .unwrap_or_else(|_| p.to_path_buf())
    }
}

/// Runs the program under the tracer and returns its exit status as ours.
pub fn run(args: RecordArgs) -> Result<ExitCode, Error> {
    let output = absolute(&args.output);
    let spec = args.spec(&output);
    checks::check_record_options(&spec)?;
    ferrotrace_core::output::check(&output)?;
    let program = Program::find(&args.command)?;
    for warning in checks::check_record(&program, &spec)? {
        say!("ferrotrace: {warning}");
    }
    // The previous trace, if any, stays until the runtime creates the new one (and is then kept as
    // FILE.old): a run that writes nothing leaves it as it was, and says so.
    let previous = file_identity(&output);
    let start = std::time::SystemTime::now();
    let options = Options {
        share_pool: true,
        ..Options::default()
    };
    let running = launch::start::start(&program, spec, options)?;
    if let Some(e) = running.relay_error() {
        say!("ferrotrace: signals sent to ferrotrace will not reach the program: {e}");
    }
    let pid = running.pid();
    let ended = running.wait()?;
    match trace_of(&output, pid) {
        Some(ours) => {
            if ours != output {
                say!(
                    "ferrotrace: another run wrote {} while this one ran; this run's trace is {}",
                    output.display(),
                    ours.display()
                );
            }
            // The trace is read once for the summary, again only if events had to be recovered.
            let mut trace = Trace::open(&ours);
            if !trace.as_ref().is_ok_and(|t| t.end.is_some()) {
                say_recovered(&ended, &ours);
                trace = Trace::open(&ours);
            }
            report(&ours, trace, &args.filter, &program.path);
        }
        None if file_identity(&output) == previous && previous.is_some() => say!(
            "ferrotrace: no trace was written; {} is still the previous one",
            output.display()
        ),
        None if file_identity(&output).is_some() && file_identity(&output) != previous => {
            say!(
            "ferrotrace: {} is another run's trace (two runs were given one -o); this run's trace \
             was replaced",
            output.display()
        )
        }
        None => say!("ferrotrace: no trace was written"),
    }
    report_children(&output, start);
    Ok(exit_code_of(&ended, &program.path))
}

/// The trace this run wrote: `output` when its Session names the program's process `pid`, else
/// `output.old` when another run started at `output` after ours (and kept ours as `.old`). `None`
/// when neither is this run's (none was written, or a third run replaced it).
fn trace_of(output: &Path, pid: u32) -> Option<PathBuf> {
    let mut old = output.as_os_str().to_owned();
    old.push(".old");
    [output.to_path_buf(), PathBuf::from(old)]
        .into_iter()
        .find(|p| Trace::open(p).is_ok_and(|t| t.session.pid == pid))
}

/// After the program died without finishing its trace (no End chunk: SIGKILL, the OOM killer, ...),
/// recovers the events it had recorded but not written, and says what happened.
fn say_recovered(ended: &Ended, output: &Path) {
    let how = match ended.death() {
        Death::Signal(s) => format!(
            "was killed by {}",
            ferrotrace_analysis::info::signal_name(s)
        ),
        Death::Exit(c) => format!("exited ({c})"),
    };
    match ended.recover_unwritten(output) {
        Some(Ok(Some(got))) => say!(
            "ferrotrace: the program {how} before finishing its trace: {} unfinished chunks \
             ({} events) recovered from its buffers",
            got.chunks,
            got.events
        ),
        Some(Err(e)) => say!(
            "ferrotrace: the program {how} before finishing its trace; its unwritten events \
             are lost: {e}"
        ),
        // The runtime never set up the pool (it did not start), or nothing was missing.
        None | Some(Ok(None)) => {}
    }
}

/// Device and inode of the file at `path`, if any: tells a trace written by this run from the one
/// that was there before.
fn file_identity(path: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::symlink_metadata(path)
        .ok()
        .map(|m| (m.dev(), m.ino()))
}

/// The summary line of the run, for its trace at `output`.
fn report(
    output: &Path,
    trace: Result<Trace, ferrotrace_analysis::reader::ReadError>,
    filters: &[String],
    program: &Path,
) {
    match trace {
        Ok(t) if t.end.is_some_and(|e| e.write_errno != 0) => {
            // The runtime could not write the trace (a full disk): it dropped the rest, counted it
            // as lost, and ended the file with the error. One line, the program's status unchanged.
            let (errno, lost) = t.end.map_or((0, 0), |e| (e.write_errno, e.lost));
            say!(
                "ferrotrace: error: writing {} failed ({}): {} events written, {lost} lost",
                output.display(),
                std::io::Error::from_raw_os_error(errno as i32),
                t.event_count(),
            );
        }
        Ok(t) => {
            for warning in checks::unmatched_filters(&t, filters, program) {
                say!("ferrotrace: warning: {warning}");
            }
            let events = t.event_count();
            let per = if events > 0 {
                t.file_len as f64 / events as f64
            } else {
                0.0
            };
            say!(
                "ferrotrace: wrote {}: {} events from {} threads, {} functions, {} bytes ({per:.2} bytes/event){}",
                output.display(),
                events,
                t.threads.len(),
                t.functions.len(),
                t.file_len,
                match &t.truncation {
                    Some(tr) => format!(", truncated at byte {}: {}", tr.offset, tr.reason),
                    None if t.end.is_none() => ", incomplete (the program ended without letting ferrotrace finish)".into(),
                    None => String::new(),
                }
            );
        }
        Err(e) => say!("ferrotrace: no trace was written ({e})"),
    }
}

/// Names the traces that processes the program started wrote beside `output` since `start`.
fn report_children(output: &Path, start: std::time::SystemTime) {
    let name = output
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let dir = output.parent().unwrap_or(Path::new("."));
    if let Ok(entries) = std::fs::read_dir(dir) {
        let mut children: Vec<PathBuf> = entries
            .flatten()
            .filter(|e| {
                let n = e.file_name().to_string_lossy().into_owned();
                n.strip_prefix(&name)
                    .and_then(|rest| rest.strip_prefix('.'))
                    .is_some_and(|pid| !pid.is_empty() && pid.bytes().all(|b| b.is_ascii_digit()))
                    && e.metadata()
                        .and_then(|m| m.modified())
                        .is_ok_and(|m| m >= start)
            })
            .map(|e| e.path())
            .collect();
        children.sort();
        for c in children {
            say!("ferrotrace: a child process wrote {}", c.display());
        }
    }
}
