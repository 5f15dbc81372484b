//! `cargo ferrotrace`: build the current cargo project with XRay sleds (or mcount calls) and trace it.
//!
//! ```text
//! cargo ferrotrace build  [--mcount] [CARGO-BUILD-OPTIONS]
//! cargo ferrotrace run    [--mcount] [--bin NAME] [CARGO-BUILD-OPTIONS] [-- ARGS]
//! cargo ferrotrace record [--mcount] [RECORD-OPTIONS] [--bin NAME] [CARGO-BUILD-OPTIONS] [-- ARGS]
//! cargo ferrotrace profile [PROFILE-OPTIONS] [--bin NAME] [CARGO-BUILD-OPTIONS] [-- ARGS]
//! ```
//! `build`, `run` and `record` use the nightly toolchain with `-Zinstrument-xray=always
//! -Cforce-frame-pointers=yes -Csymbol-mangling-version=v0` into `<target-dir>/ferrotrace` (with
//! `--mcount`: `-Zinstrument-mcount` instead, into `<target-dir>/ferrotrace-mcount`); `profile` needs no
//! instrumentation and
//! builds with the default toolchain, frame pointers and limited debug info into
//! `<target-dir>/ferrotrace-profile`. Normal builds are untouched. RECORD-OPTIONS and PROFILE-OPTIONS
//! are those of `ferrotrace record` and `ferrotrace profile`, taken from their clap definitions; `record`
//! and `profile` run in this process, through the same code as `ferrotrace record` and `ferrotrace
//! profile` (the preload library is found next to this executable, where it is next to `ferrotrace`).

use std::ffi::OsString;
use std::process::ExitCode;

use clap::{Args, Parser};
use ferrotrace_cli::cmd::{self, profile::ProfileArgs, record::RecordArgs};
use ferrotrace_cli::{say, Error};
use ferrotrace_launch::cargo::{self, BuildKind};

const USAGE_HEAD: &str = "\
Build the current cargo project with XRay instrumentation (nightly) and trace it with ferrotrace.

Usage:
  cargo ferrotrace build  [--mcount] [CARGO-BUILD-OPTIONS]
  cargo ferrotrace run    [--mcount] [--bin NAME] [CARGO-BUILD-OPTIONS] [-- ARGS]
  cargo ferrotrace record [--mcount] [RECORD-OPTIONS] [--bin NAME] [CARGO-BUILD-OPTIONS] [-- ARGS]
  cargo ferrotrace profile [PROFILE-OPTIONS] [--bin NAME] [CARGO-BUILD-OPTIONS] [-- ARGS]
";

const USAGE_TAIL: &str = "\
`profile` builds with the default toolchain and RUSTFLAGS='-Cforce-frame-pointers=yes
-Csymbol-mangling-version=v0' (and limited debug info) into <target-dir>/ferrotrace-profile: the
same frame pointers and symbol names as the instrumented build.
CARGO-BUILD-OPTIONS are passed to `cargo build` (--release, --features, -p, ...; -F belongs to
ferrotrace in `record` and `profile`: spell cargo's --features there). The
instrumented build goes to <target-dir>/ferrotrace with the nightly toolchain and
RUSTFLAGS='-Zinstrument-xray=always -Cforce-frame-pointers=yes -Csymbol-mangling-version=v0'; normal
builds are untouched. --mcount builds with -Zinstrument-mcount instead of -Zinstrument-xray=always
(calls to mcount in every function, as for gprof and uftrace) into <target-dir>/ferrotrace-mcount.";

/// The options of `ferrotrace ACTION` that `cargo ferrotrace ACTION` takes and hands on, read from the
/// very clap definitions `ferrotrace` parses with (so the two cannot drift): every option but the
/// program, `--pid` and profile's `--all-cpus` (cargo ferrotrace runs the program it built; `-p` is
/// cargo's `--package`), and record's `--duration`, which only `--pid` takes.
fn own_options(action: &str) -> Vec<clap::Arg> {
    let cmd = match action {
        "record" => RecordArgs::augment_args(clap::Command::new("record")),
        "profile" => ProfileArgs::augment_args(clap::Command::new("profile")),
        _ => return Vec::new(),
    };
    cmd.get_arguments()
        .filter(|a| {
            !a.is_positional()
                && a.get_id() != "pid"
                && a.get_id() != "all"
                && !(action == "record" && a.get_id() == "duration")
        })
        .cloned()
        .collect()
}

/// The usage text, with the options of `record` and `profile` as `ferrotrace --help` describes them.
fn usage() -> String {
    use std::fmt::Write;
    let mut u = USAGE_HEAD.to_string();
    for action in ["record", "profile"] {
        let _ = write!(
            u,
            "\n{}-OPTIONS (see `ferrotrace {action} --help`):\n",
            action.to_uppercase()
        );
        for a in own_options(action).iter().filter(|a| !a.is_hide_set()) {
            let names = match (a.get_short(), a.get_long()) {
                (Some(s), Some(l)) => format!("-{s}, --{l}"),
                (None, Some(l)) => format!("    --{l}"),
                (Some(s), None) => format!("-{s}"),
                (None, None) => continue,
            };
            let value = if a.get_action().takes_values() {
                a.get_value_names()
                    .and_then(|v| v.first())
                    .map_or_else(|| " VALUE".to_string(), |v| format!(" {v}"))
            } else {
                String::new()
            };
            let help = a.get_help().map(|h| h.to_string()).unwrap_or_default();
            let _ = writeln!(u, "  {:<28} {help}", format!("{names}{value}"));
        }
    }
    u.push('\n');
    u.push_str(USAGE_TAIL);
    u
}

struct Invocation {
    action: String,
    own_opts: Vec<OsString>,
    cargo_args: Vec<OsString>,
    bin: Option<String>,
    program_args: Vec<OsString>,
    /// Instrument with mcount calls instead of XRay sleds.
    mcount: bool,
}

/// What `--help` asks for: not an error, printed to stdout.
struct Help;

/// Finds the option of `own` that the argument `arg` names: `--long`, `--long=VALUE`, `-s`, or `-sVALUE`.
/// Returns it and the value given in the same argument.
fn own_option<'a>(own: &'a [clap::Arg], arg: &str) -> Option<(&'a clap::Arg, Option<String>)> {
    if let Some(long) = arg.strip_prefix("--") {
        let (name, value) = match long.split_once('=') {
            Some((n, v)) => (n, Some(v.to_string())),
            None => (long, None),
        };
        return own
            .iter()
            .find(|a| a.get_long() == Some(name))
            .map(|a| (a, value));
    }
    let mut chars = arg.strip_prefix('-')?.chars();
    let short = chars.next()?;
    let rest: String = chars.collect();
    own.iter()
        .find(|a| a.get_short() == Some(short))
        .filter(|a| rest.is_empty() || a.get_action().takes_values())
        .map(|a| (a, (!rest.is_empty()).then_some(rest)))
}

fn parse(mut args: Vec<OsString>) -> Result<Result<Invocation, Help>, String> {
    // `cargo ferrotrace ...` runs us as `cargo-ferrotrace ferrotrace ...`.
    if args.first().is_some_and(|a| a == "ferrotrace") {
        args.remove(0);
    }
    let Some(action) = args.first().and_then(|a| a.to_str()).map(str::to_string) else {
        return Ok(Err(Help));
    };
    if matches!(action.as_str(), "-h" | "--help" | "help") {
        return Ok(Err(Help));
    }
    if !matches!(action.as_str(), "build" | "run" | "record" | "profile") {
        return Err(format!(
            "unknown action '{action}': expected build, run, record or profile\n\n{}",
            usage()
        ));
    }
    let own = own_options(&action);
    let mut inv = Invocation {
        action,
        own_opts: Vec::new(),
        cargo_args: Vec::new(),
        bin: None,
        program_args: Vec::new(),
        mcount: false,
    };
    let mut it = args.into_iter().skip(1);
    while let Some(a) = it.next() {
        let s = a.to_string_lossy().into_owned();
        if s == "--" {
            inv.program_args = it.collect();
            break;
        }
        if let Some((opt, inline)) = own_option(&own, &s) {
            let name = match opt.get_long() {
                Some(l) => format!("--{l}"),
                None => format!("-{}", opt.get_short().unwrap_or_default()),
            };
            inv.own_opts.push(name.clone().into());
            if opt.get_action().takes_values() {
                let value = match inline {
                    Some(v) => OsString::from(v),
                    None => it.next().ok_or_else(|| format!("{s} needs a value"))?,
                };
                inv.own_opts.push(value);
            }
        } else if s == "--mcount" {
            if inv.action == "profile" {
                return Err("--mcount chooses how `build`, `run` and `record` instrument; `profile` needs no instrumentation".into());
            }
            inv.mcount = true;
        } else if s == "--bin" || s.starts_with("--bin=") {
            let value = match s.strip_prefix("--bin=") {
                Some(v) => v.to_string(),
                None => it
                    .next()
                    .ok_or("--bin needs a value")?
                    .to_string_lossy()
                    .into_owned(),
            };
            inv.cargo_args.push("--bin".into());
            inv.cargo_args.push(value.clone().into());
            inv.bin = Some(value);
        } else {
            inv.cargo_args.push(a);
        }
    }
    Ok(Ok(inv))
}

/// `ferrotrace ACTION OWN-OPTIONS -- PROGRAM ARGS`, parsed by the clap definitions of `ferrotrace`.
#[derive(clap::Parser)]
#[command(name = "ferrotrace")]
enum Ferrotrace {
    Record(RecordArgs),
    Profile(ProfileArgs),
}

fn run(inv: Invocation) -> Result<ExitCode, Error> {
    let kind = match (inv.action.as_str(), inv.mcount) {
        ("profile", _) => BuildKind::Profile,
        (_, true) => BuildKind::Mcount,
        (_, false) => BuildKind::Xray,
    };
    let exes = cargo::build(kind, &inv.cargo_args)?;
    if inv.action == "build" {
        for b in &exes {
            say!("cargo ferrotrace: built {}: {}", b.name, b.path.display());
        }
        return Ok(ExitCode::SUCCESS);
    }
    let exe = cargo::pick(inv.bin.as_deref(), exes)?;
    if inv.action == "run" {
        let status = cargo::run_untraced(&exe, &inv.program_args)?;
        return Ok(ExitCode::from(ferrotrace_launch::start::exit_code(status)));
    }
    let argv: Vec<OsString> = [OsString::from("ferrotrace"), inv.action.clone().into()]
        .into_iter()
        .chain(inv.own_opts)
        .chain([OsString::from("--"), exe.into_os_string()])
        .chain(inv.program_args)
        .collect();
    say!(
        "cargo ferrotrace: running {}",
        argv.iter()
            .map(|a| a.to_string_lossy())
            .collect::<Vec<_>>()
            .join(" ")
    );
    let mut traces = cmd::Traces::default();
    let result = match Ferrotrace::try_parse_from(argv) {
        Ok(Ferrotrace::Record(args)) => cmd::record::run(args),
        Ok(Ferrotrace::Profile(args)) => cmd::profile::run(args, &mut traces),
        Err(e) => e.exit(),
    };
    if result.is_err() {
        // What is wrong with the trace profile read (for --pprof) first: the error may come from it.
        traces.say_unfinished();
    }
    result
}

fn main() -> ExitCode {
    let args: Vec<OsString> = std::env::args_os().skip(1).collect();
    match parse(args) {
        Ok(Err(Help)) => {
            println!("{}", usage());
            ExitCode::SUCCESS
        }
        Ok(Ok(inv)) => run(inv).unwrap_or_else(|e| {
            say!("cargo ferrotrace: {e}");
            ExitCode::from(2)
        }),
        Err(e) => {
            say!("cargo ferrotrace: {e}");
            ExitCode::from(2)
        }
    }
}
