//! `ferrotrace record`: run a program under the tracer.

use std::ffi::OsString;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, ValueEnum};
use ferrotrace_analysis::reader::Trace;
use ferrotrace_core::env::{AllocSpec, RuntimeSpec};
use ferrotrace_core::{schema, units};
use ferrotrace_launch::outcome::{self, file_identity, Recovery, Written};
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
#[command(after_help = ferrotrace_core::units::GRAMMAR)]
pub struct RecordArgs {
    /// Trace file to write (processes the program starts write FILE.PID; uftrace's -d/--data too)
    #[arg(
        short = 'o',
        long = "output",
        short_alias = 'd',
        alias = "data",
        default_value = "ferrotrace.data"
    )]
    pub output: PathBuf,
    /// Accepted for uftrace's sake: ferrotrace never traces calls into shared libraries' PLT stubs
    #[arg(long)]
    pub no_libcall: bool,
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
    /// Leave out calls that took less than DURATION (e.g. 10us, 1.5ms; plain numbers are ns), as
    /// uftrace record -t does: their callers stay, and so does a call with a tracepoint or an allocation
    /// inside (decided as the trace is written: the program runs as without it)
    #[arg(short = 't', long = "time-filter", value_name = "DURATION",
          value_parser = super::replay::parse_duration)]
    pub time_filter: Option<u64>,
    /// While functions matching REGEX run, record by ACTIONS (comma-separated), as uftrace record -T:
    /// depth=N (N levels from here, in place of -D), time=DURATION (-t from here down), trace (kept
    /// whatever -t says), filter (as -F), notrace (as -N); e.g. 'parse@depth=2' (repeatable)
    #[arg(short = 'T', long = "trigger", value_name = "REGEX@ACTIONS")]
    pub trigger: Vec<String>,
    /// Record the arguments of functions matching REGEX, as uftrace record -A: argN (integer or
    /// pointer, N from 1; 7 and up from the stack), fpargN (floating point), each with an optional
    /// /FORMAT: d (default), i, u, x, o, s (a string, read safely), c, f, p, and a size (i32, x16,
    /// f32); e.g. 'open@arg1/s,arg2' (repeatable; replay shows open("/etc/passwd", 0))
    #[arg(short = 'A', long = "argument", value_name = "REGEX@ARGS")]
    pub argument: Vec<String>,
    /// Record the return value of functions matching REGEX, as uftrace record -R: retval with an
    /// optional /FORMAT as -A takes (retval/f: a floating-point result); e.g. 'open@retval'
    /// (repeatable)
    #[arg(short = 'R', long = "retval", value_name = "REGEX@retval")]
    pub retval: Vec<String>,
    /// Record the arguments and return values of every function the program's debug info
    /// describes (parameters passed in registers: integers, pointers, strings, floats), and of common
    /// C library functions, as uftrace record --auto-args; -A and -R add to it
    #[arg(long)]
    pub auto_args: bool,
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
    /// Record the process PID, which is already running, instead of running a program: until Ctrl-C,
    /// --duration or its end. Its patched sites are put back (and the tracepoints --trace enabled are
    /// disabled) when the recording stops. Not with --alloc
    #[arg(
        short = 'p',
        long = "pid",
        value_name = "PID",
        conflicts_with = "command"
    )]
    pub pid: Option<u32>,
    /// With -p: stop recording after this long (`10s`, `500ms`, `2m`, `1h`; a number is seconds)
    #[arg(long, value_name = "DURATION", requires = "pid", value_parser = parse_seconds)]
    pub duration: Option<std::time::Duration>,
    /// Sample the program's threads and child processes with perf_event_open while tracing (cpu-clock,
    /// or the --event list), into the same trace on the same clock: report, replay and flame show the
    /// samples beside and inside the traced functions. Not with -p
    #[arg(long)]
    pub sample: bool,
    /// --sample's cpu-clock frequency in Hz (`profile -F`; record's -F is --filter)
    #[arg(
        long = "sample-freq",
        value_name = "HZ",
        default_value = "999",
        requires = "sample"
    )]
    pub sample_freq: String,
    /// --sample's stacks: frame pointers (fp), a copied user stack unwound with DWARF CFI (dwarf), or
    /// auto: fp where the program's main keeps a frame pointer, dwarf where it does not
    #[arg(
        long = "call-graph",
        value_name = "auto|fp|dwarf",
        default_value = "auto",
        requires = "sample"
    )]
    pub call_graph: String,
    /// --sample's events, as `profile -e` takes them (repeatable; default cpu-clock)
    #[arg(short = 'e', long = "event", value_name = "EVENT", requires = "sample")]
    pub events: Vec<String>,
    /// The program to run and its arguments
    #[arg(
        required_unless_present = "pid",
        trailing_var_arg = true,
        value_name = "PROGRAM"
    )]
    pub command: Vec<OsString>,
}

/// `10s`, `500ms`, `2m`, or a number of seconds.
fn parse_seconds(s: &str) -> Result<std::time::Duration, String> {
    units::parse_duration(s, Some(units::TimeUnit::Seconds))
        .map(std::time::Duration::from_nanos)
        .map_err(|e| format!("bad duration {s:?}: {e}"))
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
            time_filter_ns: self.time_filter.filter(|&ns| ns > 0),
            trigger: self.trigger.clone(),
            args: self.argument.iter().chain(&self.retval).cloned().collect(),
            alloc: self.alloc.then(|| AllocSpec {
                sample: self.alloc_sample.clone(),
                stack_depth: Some(self.alloc_stack_depth),
            }),
            sampled: self.sample,
            ..RuntimeSpec::default()
        }
    }
}

/// `--auto-args`: one `-A` and one `-R` line per function of `program` whose debug info describes
/// values to record ([`ferrotrace_analysis::params`]), and per function of the C library's table
/// ([`ferrotrace_core::argspec::LIBC`]); says so when the program has no debug info.
fn auto_args(program: &Path) -> String {
    use ferrotrace_core::pattern::whole_name;
    let mut lines = String::new();
    let mut add = |name: &str, args: &str, retval: &str| {
        for items in [args, retval].into_iter().filter(|i| !i.is_empty()) {
            lines.push_str(&format!("{}@{items}\n", whole_name(name)));
        }
    };
    match ferrotrace_analysis::params::auto_args(program) {
        Ok(found) => {
            for (name, specs) in &found {
                add(name, &specs.args.to_string(), &specs.retval.to_string());
            }
        }
        Err(e) => say!(
            "ferrotrace: --auto-args: {e}: only the C library's functions (with -P) get their values"
        ),
    }
    for (name, args, retval) in ferrotrace_core::argspec::LIBC {
        add(name, args, retval);
    }
    lines
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
    if let Some(pid) = args.pid {
        return record_running(pid, &args, spec, &output);
    }
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
        more_args: args.auto_args.then(|| auto_args(&program.path)),
        ..Options::default()
    };
    let sample = args
        .sample
        .then(|| sample_options(&args, &program.path))
        .transpose()?;
    let (running, sampling) = match &sample {
        Some(sample) => {
            let (running, sampling) =
                launch::sampling::start_sampled(&program, spec, options, sample)?;
            (running, Some(sampling))
        }
        None => (launch::start::start(&program, spec, options)?, None),
    };
    if let Some(e) = running.relay_error() {
        say!("ferrotrace: signals sent to ferrotrace will not reach the program: {e}");
    }
    let pid = running.pid();
    let ended = running.wait()?;
    let recorded = outcome::conclude(&output, pid, previous, start, &ended, sampling);
    match recorded.written {
        Written::Ours(ours) => {
            if ours.path != output {
                say!(
                    "ferrotrace: another run wrote {} while this one ran; this run's trace is {}",
                    output.display(),
                    ours.path.display()
                );
            }
            if let Some(r) = ours.recovered {
                say_recovered(r, "the program");
            }
            if let Some(sampled) = ours.sampled {
                say_sampled(sampled);
            }
            if let Some(why) = ours.ending_failed {
                say!("ferrotrace: warning: {why}");
            }
            report(&ours.path, ours.read, &args.filter, &program.path);
        }
        Written::PreviousKept => say!(
            "ferrotrace: no trace was written; {} is still the previous one",
            output.display()
        ),
        Written::Replaced => say!(
            "ferrotrace: {} is another run's trace (two runs were given one -o); this run's trace \
             was replaced",
            output.display()
        ),
        Written::Nothing => say!("ferrotrace: no trace was written"),
    }
    for child in recorded.children {
        say!("ferrotrace: a child process wrote {}", child.display());
    }
    Ok(exit_code_of(&ended, &program.path))
}

/// What `record -p` and `live -p` say once the runtime runs in process `pid` (`doing` it).
pub(crate) fn say_started(pid: u32, doing: &str, started: &launch::attach::record::Started) {
    for w in started.warnings {
        say!("ferrotrace: warning: {w}");
    }
    if started.entries_patched > 0 {
        say!(
            "ferrotrace: process {pid} has no instrumentation: {} function entries patched, every \
             thread stopped for {:.1} ms meanwhile (put back when the recording stops)",
            started.entries_patched,
            started.threads_held.as_secs_f64() * 1e3
        );
    }
    say!(
        "ferrotrace: {doing} process {pid} (held for {:.1} ms while attaching); Ctrl-C stops",
        started.pause.as_secs_f64() * 1e3
    )
}

/// What `record -p` and `live -p` say at the end about the objects process `pid` loaded while
/// recorded: their entries patched, and those left out and why.
pub(crate) fn say_later_entries(pid: u32, later: &launch::attach::record::LaterEntries) {
    for w in &later.warnings {
        say!("ferrotrace: warning: {w}");
    }
    if later.patched > 0 {
        say!(
            "ferrotrace: process {pid} loaded objects while recorded: {} more function entries \
             patched (put back when the recording stopped)",
            later.patched
        );
    }
}

/// `record -p PID`: records the running process until Ctrl-C, `--duration` or its end.
fn record_running(
    pid: u32,
    args: &RecordArgs,
    spec: RuntimeSpec,
    output: &Path,
) -> Result<ExitCode, Error> {
    use launch::attach::record::Ending;
    // The process first: a refusal names what is wrong with it, not a missing library.
    launch::attach::check(pid)?;
    // The program recorded (before any exec while it is).
    let exe = std::fs::read_link(format!("/proc/{pid}/exe")).unwrap_or_default();
    let library = launch::start::preload_library()?;
    let attached =
        launch::attach::record::record(pid, &library, spec, args.duration, None, |started| {
            super::record::say_started(pid, "recording", started)
        })?;
    say_later_entries(pid, &attached.later);
    match attached.ending {
        Ending::Stopped(_) => {}
        Ending::ProcessEnded => say!("ferrotrace: process {pid} ended while it was recorded"),
        Ending::Replaced => say!(
            "ferrotrace: process {pid} replaced its program (exec) while it was recorded: the \
             recording ends there (record the new program with another record -p)"
        ),
        Ending::NoAnswer => say!(
            "ferrotrace: process {pid} did not finish its trace within {} s of being told to stop",
            launch::attach::record::STOP_LIMIT.as_secs()
        ),
    }
    let (recovered, trace) = outcome::conclude_attached(output, &attached);
    if let Some(r) = recovered {
        say_recovered(r, &format!("process {pid}"));
    }
    report(output, trace, &args.filter, &exe);
    Ok(ExitCode::SUCCESS)
}

/// `--sample`'s settings from the command line.
/// `--sample`'s settings from the command line; `--call-graph auto` chooses for `program`.
fn sample_options(
    args: &RecordArgs,
    program: &std::path::Path,
) -> Result<launch::sampling::SampleOptions, Error> {
    use ferrotrace_profile::cli_args::{parse_call_graph, parse_events, parse_frequency};
    let call_graph = match args.call_graph.as_str() {
        "auto" => {
            let (chosen, said) = ferrotrace_profile::call_graph_said(program);
            if let Some(line) = said {
                say!("ferrotrace: --sample: {line}");
            }
            chosen
        }
        other => parse_call_graph(other)?,
    };
    Ok(launch::sampling::SampleOptions {
        events: parse_events(&args.events)?,
        frequency: parse_frequency(&args.sample_freq)?,
        call_graph,
    })
}

/// Says what `--sample` added to the trace.
fn say_sampled(outcome: Result<launch::sampling::SampleOutcome, launch::sampling::SampleError>) {
    match outcome {
        Ok(o) => {
            for w in &o.summary.warnings {
                say!("ferrotrace: warning: {w}");
            }
            say!(
                "ferrotrace: {} samples merged into the trace ({} lost)",
                o.merged,
                o.summary.lost
            );
            if o.merged_into_children > 0 {
                say!(
                    "ferrotrace: {} samples of child processes merged into their own traces",
                    o.merged_into_children
                );
            }
            if o.other_processes > 0 {
                say!(
                    "ferrotrace: {} samples of child processes that wrote no finished trace are \
                     not kept",
                    o.other_processes
                );
            }
        }
        Err(e) => say!("ferrotrace: error: --sample: {e}"),
    }
}

/// After `who` (the program, or the process recorded) died without finishing its trace (no End
/// chunk: SIGKILL, the OOM killer, ...), says how (`recovery`), and what was recovered of the events it
/// had recorded but not written.
fn say_recovered(recovery: Recovery, who: &str) {
    let how = match recovery.death {
        Death::Signal(s) => format!(
            "was killed by {}",
            ferrotrace_analysis::info::signal_name(s)
        ),
        Death::Exit(c) => format!("exited ({c})"),
        Death::Unknown => "ended (how is not known: its parent collected it first)".into(),
        Death::Exec => "replaced its program".into(),
    };
    match recovery.got {
        Some(Ok(Some(got))) => say!(
            "ferrotrace: {who} {how} before finishing its trace: {} unfinished chunks \
             ({} events) recovered from its buffers",
            got.chunks,
            got.events
        ),
        Some(Err(e)) => say!(
            "ferrotrace: {who} {how} before finishing its trace; its unwritten events \
             are lost: {e}"
        ),
        // The runtime never set up the pool (it did not start), or nothing was missing.
        None | Some(Ok(None)) => {}
    }
}

/// The summary line of the run, for its trace at `output`.
fn report(
    output: &Path,
    trace: Result<Trace, ferrotrace_analysis::reader::ReadError>,
    filters: &[String],
    program: &Path,
) {
    match trace.as_ref().map(|t| (t, outcome::summary(output, t))) {
        Ok((_, Err(error))) => say!("ferrotrace: error: {error}"),
        Ok((t, Ok(line))) => {
            for warning in checks::unmatched_filters(t, filters, program) {
                say!("ferrotrace: warning: {warning}");
            }
            say!("ferrotrace: {line}");
        }
        Err(e) => say!("ferrotrace: no trace was written ({e})"),
    }
}
