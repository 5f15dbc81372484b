//! `ferrotrace record`: run a program under the tracer.

use std::ffi::OsString;
use std::os::fd::OwnedFd;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, ValueEnum};
use ferrotrace_analysis::reader::Trace;
use ferrotrace_core::env;
use ferrotrace_core::pattern::NamePattern;
use ferrotrace_core::schema::{self, source as instrumentation};

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

/// The runtime library to preload: [`env::PRELOAD`], or next to this executable.
pub fn preload_library() -> Result<PathBuf, String> {
    if let Some(p) = std::env::var_os(env::PRELOAD) {
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
         (cargo build --release) or point {} at it",
        exe.display(),
        env::PRELOAD
    ))
}

/// Checks `-F`/`-N` patterns before anything runs (the runtime would only warn from inside the program).
pub fn check_regexes<'a>(patterns: impl IntoIterator<Item = &'a String>) -> Result<(), String> {
    for re in patterns {
        NamePattern::new(re).map_err(|e| format!("invalid regex '{re}': {e}"))?;
    }
    Ok(())
}

/// `libferrotrace_alloc.so`, the malloc family that only `--alloc` preloads: beside the preload library.
fn alloc_library(preload: &Path) -> Result<PathBuf, String> {
    let lib = preload.with_file_name("libferrotrace_alloc.so");
    if lib.is_file() {
        Ok(lib)
    } else {
        Err(format!(
            "--alloc needs libferrotrace_alloc.so beside {}: build the whole ferrotrace workspace \
             (cargo build --release)",
            preload.display()
        ))
    }
}

/// Makes the program start a runtime: its own linked copy when it has one, else the preload library
/// (ahead of any LD_PRELOAD already set), and with `alloc` the malloc family's library before it
/// (without, the program's allocator is not interposed at all). Shared by `record` and `live`.
pub fn inject_runtime(
    cmd: &mut std::process::Command,
    program: &Path,
    facts: &elf::ProgramFacts,
    alloc: bool,
) -> Result<(), String> {
    if facts.links_runtime {
        cmd.env(env::RUNTIME, env::RUNTIME_LINKED);
        return Ok(());
    }
    if !facts.dynamic {
        return Err(format!(
            "{} is statically linked: LD_PRELOAD cannot inject the runtime. Link it dynamically, or make it \
             depend on the ferrotrace crate",
            program.display()
        ));
    }
    let runtime = preload_library()?;
    let mut preload = OsString::new();
    if alloc {
        // First: the hooks look the C library's functions up with dlsym(RTLD_NEXT) from the runtime's
        // library, which must not find these again.
        preload.push(alloc_library(&runtime)?);
        preload.push(":");
    }
    preload.push(runtime);
    if let Some(old) = std::env::var_os("LD_PRELOAD").filter(|o| !o.is_empty()) {
        preload.push(":");
        preload.push(old);
    }
    cmd.env("LD_PRELOAD", preload)
        .env(env::RUNTIME, env::RUNTIME_PRELOAD);
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

/// Checks `--buffer-size` and `--chunk-size` as the runtime will (ferrotrace_core::size), so that a
/// bad size is an error before the program starts rather than a program run untraced.
fn check_sizes(buffer: Option<&str>, chunk: Option<&str>) -> Result<(), String> {
    use ferrotrace_core::size::SizeOption;
    ferrotrace_core::size::check_sizes(buffer, chunk)
        .map(|_| ())
        .map_err(|(which, e)| match which {
            SizeOption::Chunk => format!("--chunk-size {}: {e}", chunk.unwrap_or_default()),
            SizeOption::Buffer => format!("--buffer-size {}: {e}", buffer.unwrap_or_default()),
        })
}

/// Runs the program under the tracer and returns its exit status as ours.
pub fn run(args: RecordArgs) -> Result<ExitCode, String> {
    check_regexes(args.filter.iter().chain(&args.notrace))?;
    check_sizes(args.buffer_size.as_deref(), args.chunk_size.as_deref())?;
    let output = absolute(&args.output);
    ferrotrace_core::output::check(&output).map_err(|e| e.to_string())?;
    let program = elf::resolve_program(&args.command[0])?;
    let facts = elf::inspect(&program)?;
    if !args.trace.is_empty() && !facts.has_tracepoints {
        return Err(format!(
            "{} has no ferrotrace tracepoints (declare them with ferrotrace::tracepoint!), so --trace selects nothing",
            program.display()
        ));
    }
    let records_tracepoints = facts.has_tracepoints && !args.trace.is_empty();
    if let Some(s) = args.alloc_sample.as_deref() {
        ferrotrace_core::size::parse_size(s).map_err(|e| format!("--alloc-sample {s}: {e}"))?;
    }
    if args.alloc && facts.links_runtime && !facts.has_allocator {
        eprintln!(
            "ferrotrace: {} links the ferrotrace runtime, which records allocations only through ferrotrace::Allocator (#[global_allocator]); its malloc calls are not interposed",
            program.display()
        );
    }
    if args.no_functions
        && (!args.filter.is_empty() || !args.notrace.is_empty() || args.depth.is_some())
    {
        return Err(
            "--no-functions traces no function, and -F, -N and --depth select functions"
                .to_string(),
        );
    }
    if args.no_functions && !records_tracepoints && !args.alloc {
        return Err(
            "--no-functions leaves nothing to record: add --alloc (allocations) or --trace (tracepoints)"
                .to_string(),
        );
    }
    if facts.instrumentation == 0 && !records_tracepoints && !args.alloc {
        return Err(format!(
            "{} is not instrumented (no XRay sleds, no mcount or __fentry__ calls, no patchable NOPs), so \
             there is nothing to trace (record its allocations alone with --alloc): {}",
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
    if let Some(d) = args
        .depth
        .filter(|&d| !ferrotrace_core::size::depth_is_valid(d as usize))
    {
        return Err(format!(
            "--depth {d}: the depth is a number of frames from 1 to {}",
            ferrotrace_core::size::MAX_DEPTH
        ));
    }
    let mut cmd = std::process::Command::new(&program);
    cmd.arg0(&args.command[0]).args(&args.command[1..]);
    inject_runtime(&mut cmd, &program, &facts, args.alloc)?;
    cmd.env(env::OUTPUT, &output)
        .env(env::FILTER, args.filter.join("\n"))
        .env(env::NOTRACE, args.notrace.join("\n"))
        .env(env::TRACE, args.trace.join("\n"))
        .env(
            env::MODE,
            match args.mode {
                Mode::Lossless => schema::Mode::Lossless,
                Mode::Drop => schema::Mode::Drop,
                Mode::Flight => schema::Mode::Flight,
            }
            .name(),
        )
        .env_remove(env::TRACED_PARENT);
    if let Some(s) = &args.buffer_size {
        cmd.env(env::BUFFER_SIZE, s);
    }
    if let Some(s) = &args.chunk_size {
        cmd.env(env::CHUNK_SIZE, s);
    }
    if args.alloc {
        cmd.env(env::ALLOC, "1")
            .env(
                env::ALLOC_SAMPLE,
                args.alloc_sample.as_deref().unwrap_or("0"),
            )
            .env(env::ALLOC_STACK_DEPTH, args.alloc_stack_depth.to_string());
    } else {
        cmd.env_remove(env::ALLOC);
    }
    if let Some(d) = args.depth {
        cmd.env(env::DEPTH, d.to_string());
    }
    if args.no_functions {
        cmd.env(env::FUNCTIONS, env::FUNCTIONS_NONE);
    } else {
        cmd.env_remove(env::FUNCTIONS);
    }
    let pool = crate::pool::share(&mut cmd)?;
    // The previous trace, if any, stays until the runtime creates the new one (and is then kept as
    // FILE.old): a run that writes nothing leaves it as it was, and says so.
    let previous = file_identity(&output);
    let start = std::time::SystemTime::now();
    use std::os::unix::process::CommandExt;
    // Like a shell waiting for a job: the terminal's Ctrl-C and Ctrl-\ go to the program (same process
    // group); we outlive it to report. Signals sent to us alone are passed on (crate::relay).
    crate::relay::block();
    crate::relay::unblock_in_child(&mut cmd);
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("cannot run {}: {e}", program.display()))?;
    if let Err(e) = crate::relay::start(child.id() as i32, Some(&pool)) {
        eprintln!("ferrotrace: signals sent to ferrotrace will not reach the program: {e}");
    }
    let status = child
        .wait()
        .map_err(|e| format!("waiting for {}: {e}", program.display()))?;
    // The trace is read once for the summary, again only if events had to be recovered into it.
    let mut written = None;
    if file_identity(&output) != previous {
        let trace = Trace::open(&output);
        if trace.as_ref().is_ok_and(|t| t.end.is_some()) {
            written = Some(trace);
        } else {
            recover_unwritten(&output, &pool, status);
        }
    }
    report(&output, written, start, previous, &args.filter, &program);
    Ok(exit_code_of(status, &program))
}

/// After the program died without finishing its trace (no End chunk: SIGKILL, the OOM killer, ...),
/// appends the events it had recorded but not written, from the chunk pool it shared with us.
fn recover_unwritten(output: &Path, pool: &OwnedFd, status: std::process::ExitStatus) {
    use ferrotrace_analysis::salvage::{salvage, Death};
    let death = match (status.signal(), status.code()) {
        (Some(sig), _) => Death::Signal(sig as u32),
        (None, code) => Death::Exit(code.unwrap_or(0)),
    };
    // Nothing the program recorded is newer than this.
    let now_tsc = ferrotrace_core::clock::rdtsc();
    let Some(map) = crate::pool::Mapped::new(pool) else {
        return; // the runtime never set up the pool (it did not start)
    };
    let how = match death {
        Death::Signal(s) => format!(
            "was killed by {}",
            ferrotrace_analysis::info::signal_name(s)
        ),
        Death::Exit(c) => format!("exited ({c})"),
    };
    match salvage(output, map.bytes(), death, now_tsc) {
        Ok(Some(got)) => eprintln!(
            "ferrotrace: the program {how} before finishing its trace: {} unfinished chunks \
             ({} events) recovered from its buffers",
            got.chunks, got.events
        ),
        Ok(None) => {}
        Err(e) => eprintln!(
            "ferrotrace: the program {how} before finishing its trace; its unwritten events \
             are lost: {e}"
        ),
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

/// Says which `-F` patterns matched no function of the trace, and why when the program's debug info
/// tells: a function inlined into its callers has no sled.
fn warn_unmatched_filters(trace: &Trace, filters: &[String], program: &Path) {
    for pattern in filters {
        let Ok(re) = NamePattern::new(pattern) else {
            continue; // checked before the run
        };
        if trace.functions.values().any(|f| re.is_match(f.name())) {
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

/// The summary line of the run (`written`: the trace, if already read), and the traces of children.
fn report(
    output: &Path,
    written: Option<Result<Trace, ferrotrace_analysis::reader::ReadError>>,
    start: std::time::SystemTime,
    previous: Option<(u64, u64)>,
    filters: &[String],
    program: &Path,
) {
    if previous.is_some() && file_identity(output) == previous {
        eprintln!(
            "ferrotrace: no trace was written; {} is still the previous one",
            output.display()
        );
        return;
    }
    match written.unwrap_or_else(|| Trace::open(output)) {
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
