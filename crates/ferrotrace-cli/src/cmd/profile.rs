//! `ferrotrace profile`: sample any program (no instrumentation needed) with perf_event_open.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Args;
use ferrotrace_analysis::dump::{self, Exporter, Samples};
use ferrotrace_analysis::progress::Progress;
use ferrotrace_profile::cli_args::{parse_duration, parse_frequency};
use ferrotrace_profile::{profile, Backend, ProfileConfig, Target};

use crate::Error;

/// What `profile --help` says of events and of reading the result (before the units grammar).
const EVENTS_HELP: &str = "EVENT: cpu-clock (default), uprobe:PATH:SYMBOL (a C symbol such as malloc, or a Rust \
path such as myapp::parse), uretprobe:PATH:SYMBOL (at its returns, in the caller), \
usdt:PATH:PROVIDER:NAME (a SystemTap SDT probe of the file's .note.stapsdt, its semaphore raised), \
tracepoint:CATEGORY:NAME (e.g. sched:sched_wakeup), off-cpu (the \
stacks at which threads blocked, weighted by the time until they ran again: sched:sched_switch); cargo-trace's profile:hz:99 is accepted too.\n\nRead the result with `ferrotrace report`, `ferrotrace flame` or \
`ferrotrace dump --format FORMAT`, FORMAT one of";

/// Arguments of `ferrotrace profile`.
#[derive(Args)]
#[command(after_help = format!(
    "{EVENTS_HELP} {}.\n\n{}",
    super::dump::names(|f| f.writes_samples() != Samples::Never),
    ferrotrace_core::units::GRAMMAR
))]
pub struct ProfileArgs {
    /// Sampling frequency of cpu-clock (999, 999Hz, 4kHz)
    #[arg(short = 'F', long = "freq", value_name = "HZ", default_value = "999")]
    freq: String,
    /// What to sample (repeatable)
    #[arg(short = 'e', long = "event", value_name = "EVENT")]
    events: Vec<String>,
    /// How to take stacks: frame pointers (fp) or a copied user stack unwound with DWARF CFI (dwarf)
    #[arg(long = "call-graph", value_name = "fp|dwarf", default_value = "fp")]
    call_graph: String,
    /// Ring buffer per CPU: data pages (a power of two) or a size such as 8M; default sized for the events
    #[arg(
        short = 'm',
        long = "mmap-pages",
        visible_alias = "buffer-size",
        value_name = "PAGES"
    )]
    mmap_pages: Option<String>,
    /// Trace file to write; a name ending in .pb.gz writes the trace as NAME.data and its pprof
    /// profile (dump --format pprof) as NAME.pb.gz
    #[arg(short = 'o', long = "output", default_value = "ferrotrace.data")]
    output: PathBuf,
    /// Attach to a running process instead of starting one
    #[arg(
        short = 'p',
        long = "pid",
        value_name = "PID",
        conflicts_with = "command"
    )]
    pid: Option<u32>,
    /// Profile every process of the machine (with --bpf) until --duration ends or Ctrl-C
    #[arg(
        short = 'a',
        long = "all-cpus",
        conflicts_with_all = ["command", "pid"],

    )]
    all: bool,
    /// Stop after this long (10s, 500ms, 2m, 1h; a number is seconds)
    #[arg(long, value_name = "DURATION")]
    duration: Option<String>,
    /// Record with --call-graph fp even if the program has no frame pointers
    #[arg(long)]
    force_fp: bool,
    /// Unwind stacks and count samples in the kernel with eBPF (DWARF rows from .eh_frame, frame
    /// pointers where a module has none; --call-graph and --mmap-pages do not apply): no stack bytes
    /// are copied out per sample
    #[arg(long)]
    bpf: bool,
    /// The program to run and its arguments
    #[arg(trailing_var_arg = true, value_name = "PROGRAM")]
    command: Vec<OsString>,
}

/// Records, prints a summary, and returns the program's exit status.
pub fn run(args: ProfileArgs) -> Result<ExitCode, Error> {
    let target =
        match (args.pid, args.command.first()) {
            _ if args.all => Target::SystemWide,
            (Some(pid), _) => Target::Pid(pid),
            (None, Some(name)) => Target::Command {
                program: ferrotrace_launch::program::resolve(name)?,
                argv: args.command,
            },
            (None, None) => return Err(Error::Usage(
                "nothing to profile: give a program after --, a process with -p PID, or -a for all"
                    .into(),
            )),
        };
    // `-o NAME.pb.gz`: the trace is NAME.data, its pprof profile NAME.pb.gz.
    let pprof = args
        .output
        .to_str()
        .and_then(|s| s.strip_suffix(".pb.gz"))
        .map(|name| (args.output.clone(), PathBuf::from(format!("{name}.data"))));
    let cfg = ProfileConfig {
        events: ferrotrace_profile::cli_args::parse_events(&args.events)?,
        frequency: parse_frequency(&args.freq)?,
        call_graph: ferrotrace_profile::cli_args::parse_call_graph(&args.call_graph)?,
        output: pprof
            .as_ref()
            .map_or(args.output, |(_, trace)| trace.clone()),
        target,
        duration: args.duration.as_deref().map(parse_duration).transpose()?,
        allow_missing_frame_pointers: args.force_fp,
        buffer_pages: args
            .mmap_pages
            .as_deref()
            .map(ferrotrace_profile::cli_args::parse_buffer_size)
            .transpose()?,
        backend: if args.bpf {
            Backend::Bpf
        } else {
            Backend::PerfEvent
        },
        on_system_wide_start: Some(|processes| {
            say!(
                "ferrotrace: recording every process ({processes} running, and those that start) \
                 until --duration ends or Ctrl-C"
            )
        }),
        ..ProfileConfig::default()
    };
    let s = profile(&cfg)?;
    for w in &s.warnings {
        say!("ferrotrace: warning: {w}");
    }
    say!(
        "ferrotrace: wrote {}: {} samples from {} threads, {} lost, {} bytes (finished in {:.0?}); \
         {} bytes read from the kernel ({:.0} per sample)",
        s.output.display(),
        s.samples,
        s.threads,
        s.lost,
        s.bytes_written,
        s.finishing_time,
        s.kernel_bytes,
        s.kernel_bytes as f64 / s.samples.max(1) as f64
    );
    if let Some(work) = s.bpf_unwinder {
        let per_sample = |n: u64| n as f64 / s.samples.max(1) as f64;
        say!(
            "ferrotrace: the in-kernel unwinder went through {} user frames, {:.1} a sample, \
             with {:.1} reads of user memory a sample",
            work.frames,
            per_sample(work.frames),
            per_sample(work.user_reads)
        );
    }
    if let Some((profile, trace)) = &pprof {
        write_pprof(trace, profile)?;
    }
    Ok(match s.exit_code {
        Some(c) => ExitCode::from(c as u8),
        None => ExitCode::SUCCESS,
    })
}

/// Writes the pprof profile of the trace at `trace` to `profile`.
fn write_pprof(trace: &Path, profile: &Path) -> Result<(), Error> {
    let trace = super::open_named(trace, None)?;
    let mut bytes = Vec::new();
    let mut progress = Progress::new("pprof", trace.event_count());
    dump::pprof::Pprof
        .write_functions(
            &trace,
            dump::Options::default(),
            dump::Target::Stream(&mut bytes),
            &mut progress,
        )
        .map_err(|e| format!("{}: {e}", profile.display()))?;
    drop(progress);
    super::emit(Some(profile), &bytes)
}
