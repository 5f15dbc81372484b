//! `ferrotrace profile`: sample any program (no instrumentation needed) with perf_event_open.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use ferrotrace_analysis::dump::{self, Exporter, Samples};
use ferrotrace_analysis::progress::Progress;
use ferrotrace_launch::profile;
use ferrotrace_profile::cli_args::{parse_duration, parse_frequency};
use ferrotrace_profile::{Backend, ProfileConfig, Target};

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
    /// How to take stacks: frame pointers (fp) or a copied user stack unwound with DWARF CFI (dwarf);
    /// by default fp where the program's main keeps a frame pointer, dwarf otherwise; not with
    /// --bpf, which walks them in the kernel
    #[arg(long = "call-graph", value_name = "fp|dwarf")]
    call_graph: Option<String>,
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
    /// Record in periods of this length (60s, 5m; at least 1s) until Ctrl-C or SIGTERM, one
    /// recording whose periods are each one part of the Parquet dataset --parquet names
    #[arg(
        long,
        value_name = "DURATION",
        requires = "parquet",
        conflicts_with = "duration"
    )]
    every: Option<String>,
    /// With --every: the dataset's directory; each period's part is DIR/host=HOST/date=YYYY-MM-DD/
    /// hour=HH/part-START (a `dump --format parquet` directory; START in ns since 1970, UTC),
    /// written whole under DIR/.staging and renamed into place
    #[arg(long, value_name = "DIR", requires = "every")]
    parquet: Option<PathBuf>,
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

/// The unwinder when `--call-graph` is not given, chosen for the program before it runs (issue 37
/// item 9: frame pointers refused ripgrep, and gave stripped python3 one-frame stacks, said only
/// after the run): frame pointers where its `main` keeps one, DWARF otherwise or when no symbol
/// tells, said in one line. `--bpf` and `-a` walk stacks in the kernel, by rows and frame pointers
/// alike: frame pointers is what the option says for them.
fn default_call_graph(target: &Target, bpf: bool) -> ferrotrace_profile::CallGraph {
    use ferrotrace_profile::CallGraph;
    let program = match target {
        _ if bpf => return CallGraph::FramePointers,
        Target::Command { program, .. } => program.clone(),
        // Its executable, once read: a process gone or exited (a zombie) is refused afterwards,
        // for what it is.
        Target::Pid(pid) => match std::fs::read_link(format!("/proc/{pid}/exe")) {
            Ok(_) => PathBuf::from(format!("/proc/{pid}/exe")),
            Err(_) => return CallGraph::FramePointers,
        },
        Target::SystemWide => return CallGraph::FramePointers,
    };
    let (chosen, said) = ferrotrace_profile::call_graph_said(&program);
    if let Some(line) = said {
        say!("ferrotrace: {line}");
    }
    chosen
}

/// Records, prints a summary, and returns the program's exit status.
pub fn run(args: ProfileArgs, traces: &mut super::Traces) -> Result<ExitCode, Error> {
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
    if args.bpf && (args.call_graph.is_some() || args.mmap_pages.is_some()) {
        return Err(Error::Usage(
            "--bpf walks the stacks in the kernel and counts them there: --call-graph and \
             --mmap-pages (-m) do not apply to it; leave them out"
                .into(),
        ));
    }
    let call_graph = match args.call_graph.as_deref() {
        Some(given) => ferrotrace_profile::cli_args::parse_call_graph(given)?,
        None => default_call_graph(&target, args.bpf),
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
        call_graph,
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
    if let (Some(every), Some(dir)) = (&args.every, &args.parquet) {
        return continuous(cfg, parse_duration(every)?, dir);
    }
    let s = profile(&cfg)?;
    for w in &s.warnings {
        say!("ferrotrace: warning: {w}");
    }
    // No figure per sample without samples (it said "648 per sample" of 0).
    let per_sample = match s.samples {
        0 => String::new(),
        n => format!(" ({:.0} per sample)", s.kernel_bytes as f64 / n as f64),
    };
    say!(
        "ferrotrace: wrote {}: {} samples from {} threads, {} lost, {} bytes (finished in {:.0?}); \
         {} bytes read from the kernel{per_sample}",
        s.output.display(),
        s.samples,
        s.threads,
        s.lost,
        s.bytes_written,
        s.finishing_time,
        s.kernel_bytes,
    );
    if let Some(work) = s.bpf_unwinder.filter(|_| s.samples > 0) {
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
        write_pprof(trace, profile, traces)?;
    }
    Ok(match s.exit_code {
        Some(c) => ExitCode::from(c as u8),
        None => ExitCode::SUCCESS,
    })
}

/// Writes the pprof profile of the trace at `trace` to `profile`.
fn write_pprof(trace: &Path, profile: &Path, traces: &mut super::Traces) -> Result<(), Error> {
    let trace = traces.open_named(trace, None)?;
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

/// `--every PERIOD --parquet DIR`: one recording session cut into periods, each period's trace
/// turned into a part of the dataset in DIR, until Ctrl-C or SIGTERM (which end the period being
/// recorded: it is written too), or the end of the process followed.
fn continuous(mut cfg: ProfileConfig, every: Duration, dir: &Path) -> Result<ExitCode, Error> {
    if matches!(cfg.target, Target::Command { .. }) {
        return Err(Error::Usage(
            "--every records what runs already: every process (-a) or one (-p PID), not a \
             program it would start"
                .into(),
        ));
    }
    let host = match ferrotrace_core::machine::Machine::this().host {
        h if h.is_empty() => "unknown".to_string(),
        h => h.replace('/', "_"),
    };
    let staging = dir.join(".staging");
    for d in [dir, &staging] {
        match std::fs::create_dir(d) {
            Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => {
                return Err(format!("{}: {e}", d.display()).into())
            }
            _ => {}
        }
        if !std::fs::symlink_metadata(d).is_ok_and(|m| m.is_dir()) {
            return Err(format!("{}: not a directory", d.display()).into());
        }
    }
    cfg.on_system_wide_start = None;
    say!(
        "ferrotrace: recording in periods of {every:?} into {} until Ctrl-C",
        dir.display()
    );
    let mut dataset = Dataset {
        dir: dir.to_path_buf(),
        staging,
        host,
        started: Default::default(),
        writing: None,
        failed: None,
        said: Vec::new(),
    };
    let recorded = ferrotrace_profile::profile_periods(&cfg, every, &mut dataset);
    // The last part, written whatever the recording's end.
    let written = dataset.wait_for_part();
    recorded?;
    match dataset.failed.or(written.err()) {
        Some(e) => Err(e.into()),
        None => Ok(ExitCode::SUCCESS),
    }
}

/// The dataset the periods of `profile --every` go to: each period's trace is staged as
/// `.staging/part-START.data`, and once whole turned into the part
/// `host=HOST/date=…/hour=…/part-START` on a thread of its own while the next period records.
struct Dataset {
    dir: PathBuf,
    staging: PathBuf,
    host: String,
    /// When the periods named and not yet finished began (ns since 1970, UTC).
    started: std::collections::VecDeque<u64>,
    /// The part being written.
    writing: Option<std::thread::JoinHandle<Result<(), String>>>,
    /// Why a part could not be written (the recording then ends; the periods not written stay
    /// staged, as after a crash).
    failed: Option<String>,
    /// The warnings said of the last period (one said again each period would be noise).
    said: Vec<String>,
}

impl Dataset {
    /// Waits for the part being written.
    fn wait_for_part(&mut self) -> Result<(), String> {
        match self.writing.take().map(|w| w.join()) {
            Some(Ok(r)) => r,
            Some(Err(_)) => Err("the thread writing a part panicked".into()),
            None => Ok(()),
        }
    }
}

impl ferrotrace_profile::Periods for Dataset {
    fn trace_for(&mut self, start_realtime_ns: u64) -> PathBuf {
        self.started.push_back(start_realtime_ns);
        self.staging.join(format!("part-{start_realtime_ns}.data"))
    }

    fn finished(&mut self, period: ferrotrace_profile::ProfileSummary) -> bool {
        if let Err(e) = self.wait_for_part() {
            self.failed.get_or_insert(e);
        }
        if self.failed.is_some() {
            return false;
        }
        for w in period.warnings.iter().filter(|w| !self.said.contains(w)) {
            say!("ferrotrace: warning: {w}");
        }
        self.said = period.warnings;
        // Periods end in the order they began.
        let start_ns = self.started.pop_front().unwrap_or_default();
        let name = format!("part-{start_ns}");
        let (date, hour) = utc_date_hour(start_ns);
        let part = self
            .dir
            .join(format!("host={}", self.host))
            .join(format!("date={date}"))
            .join(format!("hour={hour:02}"))
            .join(&name);
        let staged = self.staging.join(&name);
        // The eBPF backend's tables are built once, not per period: said, so that it shows.
        let tables = period
            .unwind_tables
            .map(|t| {
                let freed = match t.freed {
                    0 => String::new(),
                    n => format!(", {n} freed"),
                };
                format!(", {} unwind tables built{freed}", t.built)
            })
            .unwrap_or_default();
        let samples = period.samples;
        self.writing = Some(std::thread::spawn(move || {
            write_part(&period.output, &staged, &part)?;
            say!(
                "ferrotrace: wrote {} ({samples} samples{tables})",
                part.display()
            );
            Ok(())
        }));
        true
    }
}

/// Turns the period's `trace` into the part `part`: written as `staged`, renamed into place, then
/// the trace removed.
fn write_part(trace: &Path, staged: &Path, part: &Path) -> Result<(), String> {
    let opened = ferrotrace_analysis::reader::Trace::open(trace)
        .map_err(|e| format!("{}: {e}", trace.display()))?;
    let mut progress = Progress::new("parquet", 0);
    dump::parquet::write(&opened, staged, &mut progress)
        .map_err(|e| format!("{}: {e}", staged.display()))?;
    if let Some(partition) = part.parent() {
        std::fs::create_dir_all(partition).map_err(|e| format!("{}: {e}", partition.display()))?;
    }
    std::fs::rename(staged, part).map_err(|e| format!("{}: {e}", part.display()))?;
    std::fs::remove_file(trace).map_err(|e| format!("{}: {e}", trace.display()))
}

/// The UTC date (`YYYY-MM-DD`) and hour of `ns` nanoseconds since 1970 (the proleptic Gregorian
/// calendar's civil date of a day number, Howard Hinnant's `civil_from_days`).
fn utc_date_hour(ns: u64) -> (String, u64) {
    let secs = ns / 1_000_000_000;
    let (days, hour) = ((secs / 86_400) as i64, secs % 86_400 / 3_600);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (format!("{year:04}-{month:02}-{day:02}"), hour)
}
