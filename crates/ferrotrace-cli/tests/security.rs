//! The tracer gives an attacker nothing: privileged programs stay dormant, trace files never follow a
//! symlink or replace a file that is not a trace.

mod common;

use common::*;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;

fn euid() -> u32 {
    extern "C" {
        fn geteuid() -> u32;
    }
    // SAFETY: plain system call without arguments.
    unsafe { geteuid() }
}

/// A directory `nobody` can enter and read (the scratch directories live under the repository, which
/// may not be), owned by root, mode 0755.
fn shared_dir(test: &str) -> PathBuf {
    assert_eq!(
        euid(),
        0,
        "this test runs programs as root and as `nobody`: run the test suite as root (scripts/setup.sh's machine)"
    );
    let d = std::env::temp_dir().join(format!("ferrotrace-test-{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir(&d).unwrap();
    std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o755)).unwrap();
    d
}

/// `setpriv` running `program` as user and group `nobody` (65534) with `env`.
fn as_nobody(program: &Path) -> Command {
    let mut c = Command::new("setpriv");
    c.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .arg(program);
    c
}

/// glibc ignores LD_PRELOAD in a setuid program; a program that links the runtime must likewise ignore
/// FERROTRACE_* variables there (getauxval(AT_SECURE)), or any user can make it overwrite any file with
/// a trace. Before the fix, `nobody` truncated a root-owned file, made it 0600 and filled it.
#[test]
fn setuid_program_linking_the_runtime_ignores_the_environment() {
    let dir = shared_dir("suid");
    let prog = dir.join("linked");
    std::fs::copy(testprog("linked"), &prog).unwrap();
    std::fs::set_permissions(&prog, std::fs::Permissions::from_mode(0o4755)).unwrap();
    let victim = dir.join("root-owned-file");
    std::fs::write(&victim, b"precious root data\n").unwrap();
    std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o644)).unwrap();

    let out = as_nobody(&prog)
        .env("FERROTRACE_RUNTIME", "linked")
        .env("FERROTRACE_OUTPUT", &victim)
        .env("FERROTRACE_TRACE", "*")
        .output()
        .expect("setpriv (util-linux) runs the program as nobody");
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        "recording=false\n",
        "the runtime stays dormant in a setuid process"
    );
    let meta = std::fs::metadata(&victim).unwrap();
    assert_eq!(
        std::fs::read(&victim).unwrap(),
        b"precious root data\n",
        "the file is untouched"
    );
    assert_eq!(meta.permissions().mode() & 0o7777, 0o644);
    assert_eq!(meta.uid(), 0);

    // The same program, not setuid, run by the same user with the same environment, does record: the
    // test above fails for the right reason, not because the runtime never starts as nobody.
    std::fs::set_permissions(&prog, std::fs::Permissions::from_mode(0o755)).unwrap();
    let own = dir.join("nobody-can-write");
    std::fs::create_dir(&own).unwrap();
    std::os::unix::fs::chown(&own, Some(65534), Some(65534)).unwrap();
    let trace = own.join("trace.data");
    let out = as_nobody(&prog)
        .env("FERROTRACE_RUNTIME", "linked")
        .env("FERROTRACE_OUTPUT", &trace)
        .output()
        .unwrap();
    assert_eq!(
        text(&out.stdout),
        "recording=true\n",
        "{}",
        text(&out.stderr)
    );
    assert!(trace.exists());
    let _ = std::fs::remove_dir_all(&dir);
}
