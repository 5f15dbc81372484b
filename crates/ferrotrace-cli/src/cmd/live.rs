//! `ferrotrace live`: run a program and print its tracepoints (and, with `-F`, function entries and
//! exits) as they happen.
//!
//! The runtime in the program formats events on its collector thread and writes them into a pipe
//! without ever blocking (what a full pipe cannot take is counted and said on standard error); this
//! command copies the pipe to standard output line by line, flushing whenever the pipe has nothing more
//! for now, so `| grep` sees each event at once.

use std::ffi::OsString;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::process::ExitCode;

use clap::Args;
use ferrotrace_core::env::RuntimeSpec;
use ferrotrace_core::schema::Mode;
use ferrotrace_launch::checks;
use ferrotrace_launch::start::{start, Options, Program};

use crate::cmd::record::exit_code_of;
use crate::Error;

/// Arguments of `ferrotrace live`.
#[derive(Args)]
pub struct LiveArgs {
    /// Print the tracepoints that GLOB selects (`vfs_*`, `mycrate::*`; repeatable)
    #[arg(long = "trace", value_name = "GLOB")]
    pub trace: Vec<String>,
    /// Also print entries and exits of functions whose demangled name matches REGEX (repeatable)
    #[arg(short = 'F', long = "filter", value_name = "REGEX")]
    pub filter: Vec<String>,
    /// Never print functions whose demangled name matches REGEX (repeatable)
    #[arg(short = 'N', long = "notrace", value_name = "REGEX")]
    pub notrace: Vec<String>,
    /// Print the events of the process PID, which is already running, instead of running a program:
    /// the functions -F selects and the tracepoints --trace selects (a program that links the
    /// ferrotrace crate), until Ctrl-C or its end (its patched sites are put back then)
    #[arg(
        short = 'p',
        long = "pid",
        value_name = "PID",
        conflicts_with = "command"
    )]
    pub pid: Option<u32>,
    /// The program to run and its arguments
    #[arg(
        required_unless_present = "pid",
        trailing_var_arg = true,
        value_name = "PROGRAM"
    )]
    pub command: Vec<OsString>,
}

/// `live -p PID`: prints the running process's events until Ctrl-C or its end.
fn live_running(pid: u32, spec: RuntimeSpec) -> Result<ExitCode, Error> {
    use ferrotrace_launch::attach::record::{record, Ending};
    // The process first: a refusal names what is wrong with it, not a missing library.
    ferrotrace_launch::attach::check(pid)?;
    let library = ferrotrace_launch::start::preload_library()?;
    let mut out = std::io::stdout().lock();
    let attached = record(pid, &library, spec, None, Some(&mut out), |started| {
        super::record::say_started(pid, "printing", started)
    })?;
    super::record::say_later_entries(pid, &attached.later);
    match attached.ending {
        Ending::ProcessEnded => say!("ferrotrace: process {pid} ended"),
        Ending::Replaced => say!("ferrotrace: process {pid} replaced its program (exec)"),
        _ => {}
    }
    Ok(ExitCode::SUCCESS)
}

/// Runs the program and prints its events; returns its exit status as ours.
pub fn run(args: LiveArgs) -> Result<ExitCode, Error> {
    // Without -F no function is traced: every one is excluded (a filter that matches nothing would be
    // warned about as a mistake).
    let notrace = if args.filter.is_empty() {
        vec![".".to_string()]
    } else {
        args.notrace.clone()
    };
    let mut spec = RuntimeSpec {
        filter: args.filter.clone(),
        notrace,
        trace: args.trace.clone(),
        mode: Some(Mode::Drop),
        ..RuntimeSpec::default()
    };
    checks::check_regexes(args.filter.iter().chain(&args.notrace))?;
    if let Some(pid) = args.pid {
        if args.filter.is_empty() && args.trace.is_empty() {
            return Err(Error::Usage(
                "live -p prints what -F REGEX (functions) or --trace GLOB (tracepoints) selects: give \
                 one of them"
                    .into(),
            ));
        }
        return live_running(pid, spec);
    }
    let program = Program::find(&args.command)?;
    checks::check_live(&program, &spec)?;
    let mut fds = [0i32; 2];
    // SAFETY: pipe2 fills the two descriptors.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(Error::Usage(format!(
            "pipe: {}",
            std::io::Error::last_os_error()
        )));
    }
    // SAFETY: fresh descriptors that we own.
    let (read_end, write_end) =
        unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    // The trace file is of no use here (the events are printed) but the runtime writes one: in a
    // directory of our own, where nobody can plant a link or read it.
    let private = ferrotrace_core::output::PrivateDir::new("ferrotrace-live")
        .map_err(|e| Error::Usage(format!("cannot create a temporary directory: {e}")))?;
    spec.output = Some(private.path().join("trace.data"));
    let options = Options {
        live_fd: Some(write_end.as_raw_fd()),
        ..Options::default()
    };
    let running = start(&program, spec, options)?;
    drop(write_end);
    if let Some(e) = running.relay_error() {
        say!("ferrotrace: signals sent to ferrotrace will not reach the program: {e}");
    }
    copy_lines(
        BufReader::new(std::fs::File::from(read_end)),
        std::io::stdout().lock(),
    );
    let ended = running.wait()?;
    drop(private);
    Ok(exit_code_of(&ended, &program.path))
}

/// Copies whole lines from the pipe to `out`, flushing whenever the pipe has nothing more for now (a
/// flush per line costs a system call per event). A last line without its newline was cut when the
/// program ended: the runtime counted it as not printed, so it is not printed. Stops quietly when our
/// own reader goes away (`| head`), letting the program finish.
fn copy_lines(mut pipe: BufReader<impl Read>, mut out: impl Write) {
    let mut line = Vec::new();
    loop {
        line.clear();
        match pipe.read_until(b'\n', &mut line) {
            Ok(0) | Err(_) => break,
            Ok(_) if line.last() != Some(&b'\n') => break,
            Ok(_) => {}
        }
        if out.write_all(&line).is_err() {
            return;
        }
        if pipe.buffer().is_empty() && out.flush().is_err() {
            return;
        }
    }
    let _ = out.flush();
}
