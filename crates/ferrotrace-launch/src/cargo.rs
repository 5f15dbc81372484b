//! Building the current cargo project for tracing or profiling (`cargo ferrotrace`): the nightly
//! toolchain with XRay sleds or mcount calls, or the default toolchain with frame pointers, each into a
//! target directory of its own so that normal builds are untouched.

use std::ffi::OsString;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};

use crate::LaunchError;

/// How to build.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BuildKind {
    /// Nightly, `-Zinstrument-xray=always`, into `<target-dir>/ferrotrace`.
    Xray,
    /// Nightly, `-Zinstrument-mcount`, into `<target-dir>/ferrotrace-mcount`.
    Mcount,
    /// The default toolchain, frame pointers and limited debug info, into
    /// `<target-dir>/ferrotrace-profile`: for sampling, which needs no instrumentation.
    Profile,
}

impl BuildKind {
    fn dir_name(self) -> &'static str {
        match self {
            BuildKind::Xray => "ferrotrace",
            BuildKind::Mcount => "ferrotrace-mcount",
            BuildKind::Profile => "ferrotrace-profile",
        }
    }

    fn rustflags(self) -> &'static str {
        // v0 symbol names in every kind, as nightly gives: a closure is `{closure#0}` and drop glue
        // `drop_glue::<T>` in a profile as in a trace, not `{{closure}}` and `drop_in_place`.
        match self {
            BuildKind::Xray => {
                " -Zinstrument-xray=always -Cforce-frame-pointers=yes -Csymbol-mangling-version=v0"
            }
            BuildKind::Mcount => {
                " -Zinstrument-mcount -Cforce-frame-pointers=yes -Csymbol-mangling-version=v0"
            }
            BuildKind::Profile => " -Cforce-frame-pointers=yes -Csymbol-mangling-version=v0",
        }
    }

    fn describe(self) -> &'static str {
        match self {
            BuildKind::Xray => "with nightly and XRay sleds",
            BuildKind::Mcount => "with nightly and mcount calls",
            BuildKind::Profile => "with frame pointers",
        }
    }
}

/// An executable the build produced.
#[derive(Clone, Debug)]
pub struct Built {
    /// Its cargo target name.
    pub name: String,
    /// Its file.
    pub path: PathBuf,
}

fn check_nightly() -> Result<(), LaunchError> {
    let ok = Command::new("rustup")
        .args(["run", "nightly", "rustc", "--version"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if ok {
        Ok(())
    } else {
        Err(LaunchError::Build(
            "the nightly toolchain is needed to instrument programs (-Zinstrument-xray) and was not \
             found: install it with `rustup toolchain install nightly`"
                .into(),
        ))
    }
}

fn target_dir() -> Result<PathBuf, LaunchError> {
    let out = Command::new("cargo")
        .args(["metadata", "--format-version", "1", "--no-deps"])
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| LaunchError::Build(format!("cannot run cargo metadata: {e}")))?;
    if !out.status.success() {
        return Err(LaunchError::Build(
            "cargo metadata failed: is this a cargo project?".into(),
        ));
    }
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout)
        .map_err(|e| LaunchError::Build(format!("cannot parse cargo metadata: {e}")))?;
    meta["target_directory"]
        .as_str()
        .map(PathBuf::from)
        .ok_or_else(|| LaunchError::Build("cargo metadata has no target_directory".into()))
}

/// Builds the project in the current directory with `cargo build CARGO_ARGS` as `kind` says, and
/// returns the executables produced. Says on standard error what it builds where.
pub fn build(kind: BuildKind, cargo_args: &[OsString]) -> Result<Vec<Built>, LaunchError> {
    let mut rustflags = std::env::var("RUSTFLAGS").unwrap_or_default();
    rustflags.push_str(kind.rustflags());
    let mut cmd = if kind == BuildKind::Profile {
        // Limited debug info (line tables alone lose the module paths of function names), unless the
        // user chose a level.
        let mut c = Command::new("cargo");
        if std::env::var_os("CARGO_PROFILE_RELEASE_DEBUG").is_none() {
            c.env("CARGO_PROFILE_RELEASE_DEBUG", "limited");
        }
        c
    } else {
        check_nightly()?;
        let mut c = Command::new("rustup");
        c.args(["run", "nightly", "cargo"])
            .env_remove("RUSTUP_TOOLCHAIN");
        c
    };
    let target = target_dir()?.join(kind.dir_name());
    // A closed standard error is no reason to stop the build.
    let _ = writeln!(
        std::io::stderr(),
        "cargo ferrotrace: building {} into {}",
        kind.describe(),
        target.display()
    );
    cmd.args(["build", "--message-format=json-render-diagnostics"])
        .args(cargo_args)
        .env("RUSTFLAGS", rustflags.trim())
        .env("CARGO_TARGET_DIR", &target)
        .env_remove("RUSTC")
        .env_remove("CARGO")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    let out = cmd
        .output()
        .map_err(|e| LaunchError::Build(format!("cannot run cargo: {e}")))?;
    if !out.status.success() {
        return Err(LaunchError::Build(
            "the build failed (see the errors above)".into(),
        ));
    }
    Ok(executables(&out.stdout))
}

/// The binaries among cargo's JSON messages.
fn executables(messages: &[u8]) -> Vec<Built> {
    let mut exes = Vec::new();
    for line in messages.split(|&b| b == b'\n') {
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
            exes.push(Built {
                name: msg["target"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
                path: PathBuf::from(exe),
            });
        }
    }
    exes
}

/// The executable to run: the one named `bin`, or the only one built.
pub fn pick(bin: Option<&str>, exes: Vec<Built>) -> Result<PathBuf, LaunchError> {
    match (bin, exes.len()) {
        (Some(name), _) => exes
            .into_iter()
            .find(|b| b.name == name)
            .map(|b| b.path)
            .ok_or_else(|| LaunchError::Build(format!("no binary named '{name}' was built"))),
        (None, 1) => Ok(exes.into_iter().next().map(|b| b.path).unwrap_or_default()),
        (None, 0) => Err(LaunchError::Build(
            "the build produced no binary to run".into(),
        )),
        (None, _) => Err(LaunchError::Build(format!(
            "the build produced several binaries ({}): choose one with --bin NAME",
            exes.iter()
                .map(|b| b.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ))),
    }
}

/// Runs a built program untraced (`cargo ferrotrace run`) and waits for it.
pub fn run_untraced(exe: &Path, args: &[OsString]) -> Result<ExitStatus, LaunchError> {
    Command::new(exe)
        .args(args)
        .status()
        .map_err(|source| LaunchError::Spawn {
            program: exe.to_path_buf(),
            source,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_binaries_among_cargo_messages() {
        let messages = br#"{"reason":"compiler-artifact","target":{"kind":["lib"],"name":"l"},"executable":null}
{"reason":"compiler-artifact","target":{"kind":["bin"],"name":"app"},"executable":"/t/app"}
not json
{"reason":"build-finished","success":true}"#;
        let exes = executables(messages);
        assert_eq!(exes.len(), 1);
        assert_eq!(pick(None, exes.clone()).unwrap(), Path::new("/t/app"));
        assert!(pick(Some("other"), exes).is_err());
        assert!(pick(None, Vec::new()).is_err());
    }
}
