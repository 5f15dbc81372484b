//! `ferrotrace record`: run a program under the tracer.

use std::ffi::OsString;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicI32, Ordering};

use clap::{Args, ValueEnum};
use ferrotrace_analysis::reader::Trace;
use ferrotrace_core::schema::source as instrumentation;

use crate::elf;

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
    /// Trace only functions whose demangled name matches REGEX (repeatable)
    #[arg(short = 'F', long = "filter", value_name = "REGEX")]
    pub filter: Vec<String>,
    /// Never trace functions whose demangled name matches REGEX (repeatable)
    #[arg(short = 'N', long = "notrace", value_name = "REGEX")]
    pub notrace: Vec<String>,
    /// Enable the tracepoints that GLOB selects (`vfs_*`, `mycrate::*`; repeatable)
    #[arg(long = "trace", value_name = "GLOB")]
    pub trace: Vec<String>,
    /// What to do when buffers run out
    #[arg(long, value_enum, default_value = "lossless")]
    pub mode: Mode,
    /// Buffer memory (lossless, drop) or flight-ring size, e.g. 64M
    #[arg(long, value_name = "SIZE")]
    pub buffer_size: Option<String>,
    /// Trace mcount/fentry calls only down to this nesting depth (deeper calls are left out)
    #[arg(short = 'D', long = "depth", value_name = "DEPTH")]
    pub depth: Option<u32>,
    /// Bytes per thread chunk (power of two, at least 4K)
    #[arg(long, value_name = "SIZE", hide = true)]
    pub chunk_size: Option<String>,
    /// The program to run and its arguments
    #[arg(required = true, trailing_var_arg = true, value_name = "PROGRAM")]
    pub command: Vec<OsString>,
}

static CHILD_PID: AtomicI32 = AtomicI32::new(0);

extern "C" fn forward_signal(sig: libc::c_int) {
    let pid = CHILD_PID.load(Ordering::Relaxed);
    if pid > 0 {
        // SAFETY: kill is async-signal-safe.
        unsafe { libc::kill(pid, sig) };
    }
}

/// The runtime library to preload: `FERROTRACE_PRELOAD`, or next to this executable.
pub fn preload_library() -> Result<PathBuf, String> {
    if let Some(p) = std::env::var_os("FERROTRACE_PRELOAD") {
        return Ok(PathBuf::from(p));
    }
    let exe = std::env::current_exe()
        .map_err(|e| format!("cannot locate the ferrotrace executable: {e}"))?;
    let dir = exe.parent().unwrap_or(Path::new("."));
    for candidate in [
        dir.join("libferrotrace_preload.so"),
        dir.join("../libferrotrace_preload.so"),
    ] {
        if candidate.is_file() {
            return candidate
                .canonicalize()
                .map_err(|e| format!("{}: {e}", candidate.display()));
        }
    }
    Err(format!(
        "cannot find libferrotrace_preload.so next to {}: build the whole ferrotrace workspace \
         (cargo build --release) or point FERROTRACE_PRELOAD at it",
        exe.display()
    ))
}

/// Checks `-F`/`-N` patterns before anything runs (the runtime would only warn from inside the program).
pub fn check_regexes<'a>(patterns: impl IntoIterator<Item = &'a String>) -> Result<(), String> {
    for re in patterns {
        regex_lite::Regex::new(re).map_err(|e| format!("invalid regex '{re}': {e}"))?;
    }
    Ok(())
}

/// Makes the program start a runtime: its own linked copy when it has one, else the preload library
/// (ahead of any LD_PRELOAD already set). Shared by `record` and `live`.
pub fn inject_runtime(
    cmd: &mut std::process::Command,
    program: &Path,
    facts: &elf::ProgramFacts,
) -> Result<(), String> {
    if facts.links_runtime {
        cmd.env("FERROTRACE_RUNTIME", "linked");
        return Ok(());
    }
    if !facts.dynamic {
        return Err(format!(
            "{} is statically linked: LD_PRELOAD cannot inject the runtime. Link it dynamically, or make it \
             depend on the ferrotrace crate",
            program.display()
        ));
    }
    let mut preload = preload_library()?.into_os_string();
    if let Some(old) = std::env::var_os("LD_PRELOAD").filter(|o| !o.is_empty()) {
        preload.push(":");
        preload.push(old);
    }
    cmd.env("LD_PRELOAD", preload)
        .env("FERROTRACE_RUNTIME", "preload");
    Ok(())
}

/// The traced program's exit status as ours: its code, or 128 + the signal that killed it (said once).
pub fn exit_code_of(status: std::process::ExitStatus, program: &Path) -> ExitCode {
    if let Some(code) = status.code() {
        return ExitCode::from(code as u8);
    }
    let sig = status.signal().unwrap_or(0);
    eprintln!(
        "ferrotrace: {} was killed by signal {sig}",
        program.display()
    );
    ExitCode::from((128 + sig) as u8)
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
pub fn run(args: RecordArgs) -> Result<ExitCode, String> {
    check_regexes(args.filter.iter().chain(&args.notrace))?;
    let program = elf::resolve_program(&args.command[0])?;
    let facts = elf::inspect(&program)?;
    if !args.trace.is_empty() && !facts.has_tracepoints {
        return Err(format!(
            "{} has no ferrotrace tracepoints (declare them with ferrotrace::tracepoint!), so --trace selects nothing",
            program.display()
        ));
    }
    let records_tracepoints = facts.has_tracepoints && !args.trace.is_empty();
    if facts.instrumentation == 0 && !records_tracepoints {
        return Err(format!(
            "{} is not instrumented (no XRay sleds, no mcount or __fentry__ calls, no patchable NOPs), so \
             there is nothing to trace: {}",
            program.display(),
            instrumentation::HOW_TO_BUILD
        ));
    }
    let hooked = instrumentation::MCOUNT | instrumentation::FENTRY | instrumentation::PATCHABLE_NOP;
    if args.depth.is_some() && facts.instrumentation & hooked == 0 {
        return Err(format!(
            "--depth limits the nesting depth of mcount and fentry tracing (its shadow stack), and {} has \
             no mcount or __fentry__ calls: select XRay functions with -F/-N, or limit the depth shown \
             with `ferrotrace replay -D`",
            program.display()
        ));
    }
    if args.depth == Some(0) {
        return Err("--depth must be at least 1".into());
    }
    let output = absolute(&args.output);
    let mut cmd = std::process::Command::new(&program);
    cmd.arg0(&args.command[0]).args(&args.command[1..]);
    inject_runtime(&mut cmd, &program, &facts)?;
    cmd.env("FERROTRACE_OUTPUT", &output)
        .env("FERROTRACE_FILTER", args.filter.join("\n"))
        .env("FERROTRACE_NOTRACE", args.notrace.join("\n"))
        .env("FERROTRACE_TRACE", args.trace.join("\n"))
        .env(
            "FERROTRACE_MODE",
            match args.mode {
                Mode::Lossless => "lossless",
                Mode::Drop => "drop",
                Mode::Flight => "flight",
            },
        )
        .env_remove("FERROTRACE_TRACED_PARENT");
    if let Some(s) = &args.buffer_size {
        cmd.env("FERROTRACE_BUFFER_SIZE", s);
    }
    if let Some(s) = &args.chunk_size {
        cmd.env("FERROTRACE_CHUNK_SIZE", s);
    }
    if let Some(d) = args.depth {
        cmd.env("FERROTRACE_DEPTH", d.to_string());
    }
    let _ = std::fs::remove_file(&output);
    let start = std::time::SystemTime::now();
    use std::os::unix::process::CommandExt;
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("cannot run {}: {e}", program.display()))?;
    CHILD_PID.store(child.id() as i32, Ordering::Relaxed);
    // Like a shell waiting for a job: the terminal's Ctrl-C and Ctrl-\ go to the program (same process
    // group); we outlive it to report. Signals sent to us alone are passed on.
    // SAFETY: installing handlers/dispositions for our own process.
    unsafe {
        libc::signal(libc::SIGINT, libc::SIG_IGN);
        libc::signal(libc::SIGQUIT, libc::SIG_IGN);
        for sig in [libc::SIGTERM, libc::SIGHUP, libc::SIGUSR1, libc::SIGUSR2] {
            libc::signal(
                sig,
                forward_signal as extern "C" fn(libc::c_int) as libc::sighandler_t,
            );
        }
    }
    let status = child
        .wait()
        .map_err(|e| format!("waiting for {}: {e}", program.display()))?;
    report(&output, start, &args.filter, &program);
    Ok(exit_code_of(status, &program))
}

/// Says which `-F` patterns matched no function of the trace, and why when the program's debug info
/// tells: a function inlined into its callers has no sled.
fn warn_unmatched_filters(trace: &Trace, filters: &[String], program: &Path) {
    for pattern in filters {
        let Ok(re) = regex_lite::Regex::new(pattern) else {
            continue; // checked before the run
        };
        if trace.functions.values().any(|f| re.is_match(&f.name)) {
            continue;
        }
        let why = match ferrotrace_analysis::srcline::inlined_functions(program, |n| re.is_match(n))
        {
            Ok(mut inlined) if !inlined.is_empty() => {
                let count = inlined.len();
                format!(
                ": {} {} inlined into {} callers (no sled): mark {} #[inline(never)], or build with \
                 -Cllvm-args=-inline-threshold=0",
                {
                    // The shortest names first: the function itself before the generic code that
                    // mentions it in its arguments.
                    inlined.sort_by_key(|n| (n.len(), n.clone()));
                    let more = inlined.len().saturating_sub(2);
                    inlined.truncate(2);
                    let mut names = inlined.join(", ");
                    if more > 0 {
                        names.push_str(&format!(" (and {more} more)"));
                    }
                    names
                },
                if count == 1 { "was" } else { "were" },
                if count == 1 { "its" } else { "their" },
                if count == 1 { "it" } else { "them" },
            )
            }
            // The runtime said already that the pattern selects nothing; only the reason is new.
            Ok(_) => continue,
            Err(e) => format!(" ({e}: cannot tell whether it was inlined)"),
        };
        eprintln!("ferrotrace: warning: -F '{pattern}' matched no traced function{why}");
    }
}

fn report(output: &Path, start: std::time::SystemTime, filters: &[String], program: &Path) {
    match Trace::open(output) {
        Ok(t) => {
            warn_unmatched_filters(&t, filters, program);
            let events = t.event_count();
            let per = if events > 0 {
                t.file_len as f64 / events as f64
            } else {
                0.0
            };
            eprintln!(
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
        Err(e) => eprintln!("ferrotrace: no trace was written ({e})"),
    }
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
            eprintln!("ferrotrace: a child process wrote {}", c.display());
        }
    }
}
