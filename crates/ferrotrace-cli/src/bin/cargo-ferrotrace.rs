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
//! are those of `ferrotrace record` and `ferrotrace profile`, taken from their clap definitions. `record` and `profile` hand the built
//! program to the `ferrotrace` binary installed next to this one.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};

use clap::Args;
use ferrotrace_cli::cmd::profile::ProfileArgs;
use ferrotrace_cli::cmd::record::RecordArgs;

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
/// program, and for `profile` but `--pid` (cargo ferrotrace runs the program it built; `-p` is cargo's
/// `--package`).
fn own_options(action: &str) -> Vec<clap::Arg> {
    let cmd = match action {
        "record" => RecordArgs::augment_args(clap::Command::new("record")),
        "profile" => ProfileArgs::augment_args(clap::Command::new("profile")),
        _ => return Vec::new(),
    };
    cmd.get_arguments()
        .filter(|a| !a.is_positional() && a.get_id() != "pid")
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

fn check_nightly() -> Result<(), String> {
    let ok = Command::new("rustup")
        .args(["run", "nightly", "rustc", "--version"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if ok {
        Ok(())
    } else {
        Err("the nightly toolchain is needed to instrument programs (-Zinstrument-xray) and was not found: \
             install it with `rustup toolchain install nightly`"
            .into())
    }
}

fn target_dir() -> Result<PathBuf, String> {
    let out = Command::new("cargo")
        .args(["metadata", "--format-version", "1", "--no-deps"])
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("cannot run cargo metadata: {e}"))?;
    if !out.status.success() {
        return Err("cargo metadata failed: is this a cargo project?".into());
    }
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout)
        .map_err(|e| format!("cannot parse cargo metadata: {e}"))?;
    meta["target_directory"]
        .as_str()
        .map(|d| Path::new(d).join("ferrotrace"))
        .ok_or_else(|| "cargo metadata has no target_directory".into())
}

/// Builds and returns the executables produced, as (target name, path).
fn build(inv: &Invocation) -> Result<Vec<(String, PathBuf)>, String> {
    let profiling = inv.action == "profile";
    let mut rustflags = std::env::var("RUSTFLAGS").unwrap_or_default();
    let mut cmd = if profiling {
        // Sampling needs no sleds: the default toolchain and frame pointers, plus limited debug info
        // (line tables alone lose the module paths of function names) unless the user chose a level.
        // v0 symbol names, as the nightly of traced builds gives: a closure is `{closure#0}` and drop
        // glue `drop_glue::<T>` in a profile as in a trace, not `{{closure}}` and `drop_in_place`.
        rustflags.push_str(" -Cforce-frame-pointers=yes -Csymbol-mangling-version=v0");
        let mut c = Command::new("cargo");
        if std::env::var_os("CARGO_PROFILE_RELEASE_DEBUG").is_none() {
            c.env("CARGO_PROFILE_RELEASE_DEBUG", "limited");
        }
        c
    } else {
        check_nightly()?;
        rustflags.push_str(if inv.mcount {
            " -Zinstrument-mcount -Cforce-frame-pointers=yes -Csymbol-mangling-version=v0"
        } else {
            " -Zinstrument-xray=always -Cforce-frame-pointers=yes -Csymbol-mangling-version=v0"
        });
        let mut c = Command::new("rustup");
        c.args(["run", "nightly", "cargo"])
            .env_remove("RUSTUP_TOOLCHAIN");
        c
    };
    let target = target_dir()?.with_file_name(match (profiling, inv.mcount) {
        (true, _) => "ferrotrace-profile",
        (false, true) => "ferrotrace-mcount",
        (false, false) => "ferrotrace",
    });
    eprintln!(
        "cargo ferrotrace: building {} into {}",
        match (profiling, inv.mcount) {
            (true, _) => "with frame pointers",
            (false, true) => "with nightly and mcount calls",
            (false, false) => "with nightly and XRay sleds",
        },
        target.display()
    );
    cmd.args(["build", "--message-format=json-render-diagnostics"])
        .args(&inv.cargo_args)
        .env("RUSTFLAGS", rustflags.trim())
        .env("CARGO_TARGET_DIR", &target)
        .env_remove("RUSTC")
        .env_remove("CARGO")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    let out = cmd.output().map_err(|e| format!("cannot run cargo: {e}"))?;
    if !out.status.success() {
        return Err("the build failed (see the errors above)".into());
    }
    let mut exes = Vec::new();
    for line in out.stdout.split(|&b| b == b'\n') {
        let Ok(msg) = serde_json::from_slice::<serde_json::Value>(line) else {
            continue;
        };
        if msg["reason"] != "compiler-artifact" {
            continue;
        }
        let is_bin = msg["target"]["kind"]
            .as_array()
            .is_some_and(|k| k.iter().any(|k| k == "bin"));
        if let (true, Some(exe)) = (is_bin, msg["executable"].as_str()) {
            exes.push((
                msg["target"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
                PathBuf::from(exe),
            ));
        }
    }
    Ok(exes)
}

fn pick(inv: &Invocation, exes: Vec<(String, PathBuf)>) -> Result<PathBuf, String> {
    match (&inv.bin, exes.len()) {
        (Some(name), _) => exes
            .into_iter()
            .find(|(n, _)| n == name)
            .map(|(_, p)| p)
            .ok_or_else(|| format!("no binary named '{name}' was built")),
        (None, 1) => Ok(exes.into_iter().next().map(|(_, p)| p).unwrap_or_default()),
        (None, 0) => Err("the build produced no binary to run".into()),
        (None, _) => Err(format!(
            "the build produced several binaries ({}): choose one with --bin NAME",
            exes.iter()
                .map(|(n, _)| n.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        )),
    }
}

fn exit_code(status: std::process::ExitStatus) -> ExitCode {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(c), _) => ExitCode::from(c as u8),
        (None, Some(sig)) => ExitCode::from((128 + sig) as u8),
        _ => ExitCode::FAILURE,
    }
}

fn run(inv: Invocation) -> Result<ExitCode, String> {
    let exes = build(&inv)?;
    if inv.action == "build" {
        for (name, path) in &exes {
            eprintln!("cargo ferrotrace: built {name}: {}", path.display());
        }
        return Ok(ExitCode::SUCCESS);
    }
    let exe = pick(&inv, exes)?;
    let status = if inv.action == "run" {
        Command::new(&exe).args(&inv.program_args).status()
    } else {
        let me =
            std::env::current_exe().map_err(|e| format!("cannot locate cargo-ferrotrace: {e}"))?;
        let ferrotrace = me.with_file_name("ferrotrace");
        let mut cmd = Command::new(&ferrotrace);
        cmd.arg(&inv.action)
            .args(&inv.own_opts)
            .arg("--")
            .arg(&exe)
            .args(&inv.program_args);
        eprintln!(
            "cargo ferrotrace: running {}",
            std::iter::once(cmd.get_program())
                .chain(cmd.get_args())
                .map(|a| a.to_string_lossy())
                .collect::<Vec<_>>()
                .join(" ")
        );
        cmd.status()
            .map_err(|e| std::io::Error::new(e.kind(), format!("{}: {e}", ferrotrace.display())))
    }
    .map_err(|e| format!("cannot run {}: {e}", exe.display()))?;
    Ok(exit_code(status))
}

fn main() -> ExitCode {
    let args: Vec<OsString> = std::env::args_os().skip(1).collect();
    match parse(args) {
        Ok(Err(Help)) => {
            println!("{}", usage());
            ExitCode::SUCCESS
        }
        Ok(Ok(inv)) => run(inv).unwrap_or_else(|e| {
            eprintln!("cargo ferrotrace: {e}");
            ExitCode::from(2)
        }),
        Err(e) => {
            eprintln!("cargo ferrotrace: {e}");
            ExitCode::from(2)
        }
    }
}
