//! `ferrotrace live`: run a program and print its tracepoints (and, with `-F`, function entries and
//! exits) as they happen.
//!
//! The runtime in the program formats events on its collector thread and writes them into a pipe
//! without ever blocking (what a full pipe cannot take is counted and said on standard error); this
//! command copies the pipe to standard output line by line, flushing whenever the pipe has nothing more
//! for now, so `| grep` sees each event at once.

use std::ffi::OsString;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::{FromRawFd, OwnedFd};
use std::process::ExitCode;

use clap::Args;
use ferrotrace_core::env;
use ferrotrace_core::schema::Mode;

use crate::cmd::record::{check_regexes, exit_code_of, inject_runtime};
use crate::elf;

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
    /// The program to run and its arguments
    #[arg(required = true, trailing_var_arg = true, value_name = "PROGRAM")]
    pub command: Vec<OsString>,
}

/// Runs the program and prints its events; returns its exit status as ours.
pub fn run(args: LiveArgs) -> Result<ExitCode, String> {
    check_regexes(args.filter.iter().chain(&args.notrace))?;
    if args.trace.is_empty() && args.filter.is_empty() {
        return Err(
            "nothing to print: select tracepoints with --trace GLOB and/or functions with -F REGEX"
                .into(),
        );
    }
    let program = elf::resolve_program(&args.command[0])?;
    let facts = elf::inspect(&program)?;
    if !args.trace.is_empty() && !facts.has_tracepoints {
        return Err(format!(
            "{} has no ferrotrace tracepoints (declare them with ferrotrace::tracepoint!)",
            program.display()
        ));
    }
    if !args.filter.is_empty() && facts.instrumentation == 0 {
        return Err(format!(
            "{} is not instrumented, so -F selects nothing: {}",
            program.display(),
            ferrotrace_core::schema::source::HOW_TO_BUILD
        ));
    }
    let mut fds = [0i32; 2];
    // SAFETY: pipe2 fills the two descriptors.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(format!("pipe: {}", std::io::Error::last_os_error()));
    }
    // SAFETY: fresh descriptors that we own.
    let (read_end, write_end) =
        unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    let child_fd = fds[1];
    // The trace file is of no use here (the events are printed) but the runtime writes one: in a
    // directory of our own, where nobody can plant a link or read it.
    let private = ferrotrace_core::output::PrivateDir::new("ferrotrace-live")
        .map_err(|e| format!("cannot create a temporary directory: {e}"))?;
    let trace_file = private.path().join("trace.data");

    let mut cmd = std::process::Command::new(&program);
    use std::os::unix::process::CommandExt;
    cmd.arg0(&args.command[0]).args(&args.command[1..]);
    inject_runtime(&mut cmd, &program, &facts, false)?;
    // Without -F no function is traced: every one is excluded (a filter that matches nothing would be
    // warned about as a mistake).
    let notrace = if args.filter.is_empty() {
        ".".to_string()
    } else {
        args.notrace.join("\n")
    };
    cmd.env(env::OUTPUT, &trace_file)
        .env(env::FILTER, args.filter.join("\n"))
        .env(env::NOTRACE, notrace)
        .env(env::TRACE, args.trace.join("\n"))
        .env(env::MODE, Mode::Drop.name())
        .env(env::LIVE_FD, child_fd.to_string())
        .env_remove(env::TRACED_PARENT);
    // SAFETY: between fork and exec only async-signal-safe fcntl: keep the write end open in the child.
    unsafe {
        cmd.pre_exec(move || {
            let fl = libc::fcntl(child_fd, libc::F_GETFD);
            libc::fcntl(child_fd, libc::F_SETFD, fl & !libc::FD_CLOEXEC);
            Ok(())
        });
    }
    // As in `record`: the terminal's Ctrl-C goes to the program; we outlive it and pass on what is
    // sent to us alone.
    crate::relay::block();
    crate::relay::unblock_in_child(&mut cmd);
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("cannot run {}: {e}", program.display()))?;
    drop(write_end);
    if let Err(e) = crate::relay::start(child.id() as i32, None) {
        eprintln!("ferrotrace: signals sent to ferrotrace will not reach the program: {e}");
    }
    copy_lines(
        BufReader::new(std::fs::File::from(read_end)),
        std::io::stdout().lock(),
    );
    let status = child
        .wait()
        .map_err(|e| format!("waiting for {}: {e}", program.display()))?;
    drop(private);
    Ok(exit_code_of(status, &program))
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
