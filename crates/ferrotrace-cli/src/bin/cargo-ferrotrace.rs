//! `cargo ferrotrace`: build the current cargo project with XRay sleds (or mcount calls) and trace it.
//!
//! ```text
//! cargo ferrotrace build  [--mcount] [CARGO-BUILD-OPTIONS]
//! cargo ferrotrace run    [--mcount] [--bin NAME] [CARGO-BUILD-OPTIONS] [-- ARGS]
//! cargo ferrotrace record [--mcount] [-o FILE] [-F REGEX]... [-N REGEX]... [--mode MODE] [--buffer-size SIZE]
//!                         [--bin NAME] [CARGO-BUILD-OPTIONS] [-- ARGS]
//! cargo ferrotrace profile [-F HZ] [-e EVENT]... [--call-graph fp|dwarf] [-o FILE] [--duration D]
//!                         [--bin NAME] [CARGO-BUILD-OPTIONS] [-- ARGS]
//! ```
//! `build`, `run` and `record` use the nightly toolchain with `-Zinstrument-xray=always
//! -Cforce-frame-pointers=yes` into `<target-dir>/ferrotrace` (with `--mcount`: `-Zinstrument-mcount
//! -Cforce-frame-pointers=yes` into `<target-dir>/ferrotrace-mcount`); `profile` needs no instrumentation and
//! builds with the default toolchain, frame pointers and limited debug info into
//! `<target-dir>/ferrotrace-profile`. Normal builds are untouched. `record` and `profile` hand the built
//! program to the `ferrotrace` binary installed next to this one.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};

const USAGE: &str = "\
Build the current cargo project with XRay instrumentation (nightly) and trace it with ferrotrace.

Usage:
  cargo ferrotrace build  [--mcount] [CARGO-BUILD-OPTIONS]
  cargo ferrotrace run    [--mcount] [--bin NAME] [CARGO-BUILD-OPTIONS] [-- ARGS]
  cargo ferrotrace record [--mcount] [RECORD-OPTIONS] [--bin NAME] [CARGO-BUILD-OPTIONS] [-- ARGS]
  cargo ferrotrace profile [PROFILE-OPTIONS] [--bin NAME] [CARGO-BUILD-OPTIONS] [-- ARGS]

RECORD-OPTIONS (see `ferrotrace record --help`):
  -o, --output FILE        trace file [default: ferrotrace.data]
  -F, --filter REGEX       trace only matching functions (repeatable)
  -N, --notrace REGEX      never trace matching functions (repeatable)
      --mode MODE          lossless | drop | flight
      --buffer-size SIZE   buffer memory, e.g. 64M
  -D, --depth DEPTH        trace mcount calls only down to DEPTH (with --mcount)

PROFILE-OPTIONS (see `ferrotrace profile --help`):
  -F, --freq HZ            sampling frequency [default: 999]
  -e, --event EVENT        cpu-clock, uprobe:PATH:SYMBOL, tracepoint:CAT:NAME (repeatable)
      --call-graph MODE    fp | dwarf
  -o, --output FILE        trace file [default: ferrotrace.data]
      --duration D         stop after D (e.g. 10s)

`profile` builds with the default toolchain and RUSTFLAGS='-Cforce-frame-pointers=yes' (and limited
debug info) into <target-dir>/ferrotrace-profile.
CARGO-BUILD-OPTIONS are passed to `cargo build` (--release, --features, -p, ...). The instrumented
build goes to <target-dir>/ferrotrace with the nightly toolchain and
RUSTFLAGS='-Zinstrument-xray=always -Cforce-frame-pointers=yes'; normal builds are untouched.
--mcount builds with RUSTFLAGS='-Zinstrument-mcount -Cforce-frame-pointers=yes' instead (calls to mcount
in every function, as for gprof and uftrace) into <target-dir>/ferrotrace-mcount.";

const PROFILE_VALUE_OPTIONS: &[&str] = &[
    "-o",
    "--output",
    "-F",
    "--freq",
    "-e",
    "--event",
    "--call-graph",
    "--duration",
];
const RECORD_VALUE_OPTIONS: &[&str] = &[
    "-o",
    "--output",
    "-F",
    "--filter",
    "-N",
    "--notrace",
    "--mode",
    "--buffer-size",
    "-D",
    "--depth",
];

struct Invocation {
    action: String,
    record_opts: Vec<OsString>,
    cargo_args: Vec<OsString>,
    bin: Option<String>,
    program_args: Vec<OsString>,
    /// Instrument with mcount calls instead of XRay sleds.
    mcount: bool,
}

fn parse(mut args: Vec<OsString>) -> Result<Invocation, String> {
    // `cargo ferrotrace ...` runs us as `cargo-ferrotrace ferrotrace ...`.
    if args.first().is_some_and(|a| a == "ferrotrace") {
        args.remove(0);
    }
    let Some(action) = args.first().and_then(|a| a.to_str()).map(str::to_string) else {
        return Err(USAGE.into());
    };
    if matches!(action.as_str(), "-h" | "--help" | "help") {
        return Err(USAGE.into());
    }
    if !matches!(action.as_str(), "build" | "run" | "record" | "profile") {
        return Err(format!(
            "unknown action '{action}': expected build, run, record or profile\n\n{USAGE}"
        ));
    }
    let mut inv = Invocation {
        action,
        record_opts: Vec::new(),
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
        let (name, inline) = match s.split_once('=') {
            Some((n, v)) if n.starts_with("--") => (n.to_string(), Some(v.to_string())),
            _ => (s.clone(), None),
        };
        let own = match inv.action.as_str() {
            "record" => RECORD_VALUE_OPTIONS,
            "profile" => PROFILE_VALUE_OPTIONS,
            _ => &[],
        };
        if own.contains(&name.as_str()) {
            let value = match inline {
                Some(v) => OsString::from(v),
                None => it.next().ok_or_else(|| format!("{name} needs a value"))?,
            };
            inv.record_opts.push(name.into());
            inv.record_opts.push(value);
        } else if RECORD_VALUE_OPTIONS.contains(&name.as_str())
            || PROFILE_VALUE_OPTIONS.contains(&name.as_str())
        {
            return Err(format!(
                "{name} is an option of `cargo ferrotrace record` or `profile`, not of `{}`",
                inv.action
            ));
        } else if name == "--mcount" {
            if inv.action == "profile" {
                return Err("--mcount chooses how `build`, `run` and `record` instrument; `profile` needs no instrumentation".into());
            }
            inv.mcount = true;
        } else if name == "--bin" {
            let value = match inline {
                Some(v) => v,
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
    Ok(inv)
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
        rustflags.push_str(" -Cforce-frame-pointers=yes");
        let mut c = Command::new("cargo");
        if std::env::var_os("CARGO_PROFILE_RELEASE_DEBUG").is_none() {
            c.env("CARGO_PROFILE_RELEASE_DEBUG", "limited");
        }
        c
    } else {
        check_nightly()?;
        rustflags.push_str(if inv.mcount {
            " -Zinstrument-mcount -Cforce-frame-pointers=yes"
        } else {
            " -Zinstrument-xray=always -Cforce-frame-pointers=yes"
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
        Command::new(&ferrotrace)
            .arg(if inv.action == "profile" {
                "profile"
            } else {
                "record"
            })
            .args(&inv.record_opts)
            .arg("--")
            .arg(&exe)
            .args(&inv.program_args)
            .status()
            .map_err(|e| std::io::Error::new(e.kind(), format!("{}: {e}", ferrotrace.display())))
    }
    .map_err(|e| format!("cannot run {}: {e}", exe.display()))?;
    Ok(exit_code(status))
}

fn main() -> ExitCode {
    let args: Vec<OsString> = std::env::args_os().skip(1).collect();
    match parse(args).and_then(run) {
        Ok(code) => code,
        Err(e) if e.starts_with("Build the current") => {
            println!("{e}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("cargo ferrotrace: {e}");
            ExitCode::from(2)
        }
    }
}
