//! The tracer gives an attacker nothing: privileged programs stay dormant, trace files never follow a
//! symlink or replace a file that is not a trace.

mod common;

use common::*;
use ferrotrace_core::env;
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

/// Runs `cmd`, again while it fails with ETXTBSY: a program copied a moment ago can be busy, because
/// another test's thread forked while the copy was open for writing and the child still holds it.
fn output_of_copied(cmd: &mut Command) -> std::process::Output {
    for _ in 0..50 {
        let out = cmd.output().expect("run");
        if !text(&out.stderr).contains("Text file busy") {
            return out;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    panic!("the copied program stayed busy (ETXTBSY)");
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

    let out = output_of_copied(
        as_nobody(&prog)
            .env(env::RUNTIME, env::RUNTIME_LINKED)
            .env(env::OUTPUT, &victim)
            .env(env::TRACE, "*"),
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        "recording=false\n",
        "the runtime stays dormant in a setuid process"
    );
    let meta = std::fs::metadata(&victim).unwrap();
    assert!(
        std::fs::read(&victim).unwrap() == b"precious root data\n",
        "the file was overwritten"
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
    let out = output_of_copied(
        as_nobody(&prog)
            .env(env::RUNTIME, env::RUNTIME_LINKED)
            .env(env::OUTPUT, &trace),
    );
    assert_eq!(
        text(&out.stdout),
        "recording=true\n",
        "{}",
        text(&out.stderr)
    );
    assert!(trace.exists());
    let _ = std::fs::remove_dir_all(&dir);
}

/// A [`shared_dir`] holding `public/`, writable by everyone (0777, no sticky bit: the kernel's
/// protected_symlinks does not apply there), and `root-file`, root's, 0644, holding "root's data".
fn public_dir_and_target(test: &str) -> (PathBuf, PathBuf, PathBuf) {
    let dir = shared_dir(test);
    let public = dir.join("public");
    std::fs::create_dir(&public).unwrap();
    std::fs::set_permissions(&public, std::fs::Permissions::from_mode(0o777)).unwrap();
    let target = dir.join("root-file");
    std::fs::write(&target, b"root's data\n").unwrap();
    std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o644)).unwrap();
    (dir, public, target)
}

/// In a world-writable directory (no sticky bit, so the kernel's protected_symlinks does not apply),
/// `nobody` plants symbolic links named after the next pids (`trace.data.<pid>`) pointing at a root
/// file. Root records a program that forks: the children's traces must not go through the links. They
/// used to (create + truncate): the target was overwritten.
#[test]
fn children_traces_never_follow_links_planted_for_their_pids() {
    let (dir, public, target) = public_dir_and_target("plant");
    // Planted without starting a process per link (each would use up a pid), then handed to nobody:
    // the links are nobody's, as if nobody had made them.
    testprog("forker");
    preload();
    let last: u32 = std::fs::read_to_string("/proc/sys/kernel/ns_last_pid")
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let (first, count) = (last + 1, 3000);
    for pid in first..first + count {
        let link = public.join(format!("trace.data.{pid}"));
        std::os::unix::fs::symlink(&target, &link).unwrap();
        std::os::unix::fs::lchown(&link, Some(65534), Some(65534)).unwrap();
    }
    let (out, trace) = record(&public, &[], &testprog("forker"), &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        std::fs::read(&target).unwrap() == b"root's data\n",
        "the link's target was overwritten"
    );
    assert_eq!(
        std::fs::metadata(&target).unwrap().permissions().mode() & 0o777,
        0o644
    );
    // The children ran where links were planted for them, and said why they were not traced.
    let stdout = text(&out.stdout);
    let pids: Vec<u32> = stdout
        .lines()
        .filter_map(|l| l.split("pid=").nth(1))
        .map(|p| p.trim().parse().unwrap())
        .collect();
    assert_eq!(pids.len(), 2, "{stdout}");
    let stderr = text(&out.stderr);
    for pid in pids {
        assert!(
            (first..first + count).contains(&pid),
            "child {pid} outside the planted range: the test proved nothing"
        );
        let link = public.join(format!("trace.data.{pid}"));
        assert!(
            std::fs::symlink_metadata(&link)
                .unwrap()
                .file_type()
                .is_symlink(),
            "the planted link is left as it was"
        );
        assert!(
            stderr.contains(&format!("{} exists and is a symbolic link", link.display())),
            "{stderr}"
        );
    }
    // The parent's own trace is complete.
    let t = ferrotrace_analysis::reader::Trace::open(&trace).unwrap();
    assert!(t.end().is_some());
    let _ = std::fs::remove_dir_all(&dir);
}

/// `-o` naming a link planted by another user (or anything that is not a trace of ours) is refused
/// before the program runs, with one line, and the link's target is untouched.
#[test]
fn record_refuses_an_output_that_is_a_planted_link() {
    let (dir, public, target) = public_dir_and_target("olink");
    let link = public.join("trace.data");
    let planted = as_nobody(Path::new("ln"))
        .arg("-s")
        .arg(&target)
        .arg(&link)
        .status()
        .unwrap();
    assert!(planted.success());
    let out = ferrotrace()
        .args(["record", "-o"])
        .arg(&link)
        .arg("--")
        .arg(testprog("fib"))
        .arg("10")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty(), "the program did not run");
    let err = text(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("is a symbolic link"), "{err}");
    assert!(
        std::fs::read(&target).unwrap() == b"root's data\n",
        "overwritten"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// `ferrotrace record` run by `nobody` on a setuid program: the runtime stays dormant (AT_SECURE), no
/// trace is written, and the previous trace is left in place (it used to be deleted before every run),
/// which record says.
#[test]
fn a_run_that_writes_no_trace_leaves_the_previous_one() {
    let dir = shared_dir("keep");
    let own = dir.join("nobody");
    std::fs::create_dir(&own).unwrap();
    std::os::unix::fs::chown(&own, Some(65534), Some(65534)).unwrap();
    let prog = dir.join("linked");
    std::fs::copy(testprog("linked"), &prog).unwrap();
    let trace = own.join("trace.data");
    let run = |prog: &Path| {
        output_of_copied(
            as_nobody(Path::new(env!("CARGO_BIN_EXE_ferrotrace")))
                .args(["record", "-o"])
                .arg(&trace)
                .arg("--")
                .arg(prog),
        )
    };
    let first = run(&prog);
    assert!(first.status.success(), "{}", text(&first.stderr));
    let previous = std::fs::read(&trace).unwrap();
    std::fs::set_permissions(&prog, std::fs::Permissions::from_mode(0o4755)).unwrap();
    let second = run(&prog);
    assert!(second.status.success(), "{}", text(&second.stderr));
    assert_eq!(text(&second.stdout), "recording=false\n");
    assert!(
        text(&second.stderr).contains("no trace was written"),
        "{}",
        text(&second.stderr)
    );
    assert!(
        std::fs::read(&trace).unwrap() == previous,
        "the previous trace changed"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// `ferrotrace live` writes its (discarded) trace into a private directory of its own, not to a
/// predictable /tmp/ferrotrace-live-<pid>.data opened with create + truncate and then chmod'ed.
#[test]
fn live_keeps_its_trace_in_a_private_directory() {
    use std::io::BufRead;
    let tmp = shared_dir("livetmp");
    let mut child = ferrotrace()
        .args(["live", "-F", "leaf", "--"])
        .arg(testprog("ending"))
        .arg("spin")
        .env("TMPDIR", &tmp)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert!(line.contains("leaf"), "{line}");
    let entries: Vec<_> = std::fs::read_dir(&tmp).unwrap().flatten().collect();
    assert_eq!(entries.len(), 1, "{entries:?}");
    let private = entries[0].path();
    let meta = std::fs::symlink_metadata(&private).unwrap();
    assert!(meta.is_dir(), "{}", private.display());
    assert_eq!(meta.permissions().mode() & 0o777, 0o700);
    let trace = private.join("trace.data");
    assert_eq!(
        std::fs::metadata(&trace).unwrap().permissions().mode() & 0o777,
        0o600
    );
    kill(child.id() as i32, 15);
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(143), "{}", text(&out.stderr));
    assert_eq!(
        std::fs::read_dir(&tmp).unwrap().count(),
        0,
        "removed at the end"
    );
    let _ = std::fs::remove_dir_all(&tmp);
}

/// `flame -o` and `dump -o` write results only where a trace file could go: never over the trace
/// they read (`flame -i t.data -o t.data` destroyed it, exit 0), never through a planted link.
#[test]
fn results_never_overwrite_a_trace_or_follow_a_link() {
    let dir = scratch("result_outputs");
    let (out, trace) = record(&dir, &["-F", "^fib::fib$"], &testprog("fib"), &["10"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let before = std::fs::read(&trace).unwrap();
    let t = trace.to_str().unwrap();
    for args in [
        vec!["flame", "-i", t, "-o", t],
        vec!["dump", "-i", t, "--format", "chrome", "-o", t],
    ] {
        let out = ft(&args);
        let err = text(&out.stderr);
        assert!(!out.status.success(), "{args:?} succeeded: {err}");
        let last = err.lines().last().unwrap_or_default();
        assert!(last.ends_with("is a ferrotrace trace: ferrotrace writes results only into new files, its own files, or devices (choose another -o)"), "{err}");
    }
    assert_eq!(
        std::fs::read(&trace).unwrap(),
        before,
        "the trace was changed"
    );
    let victim = dir.join("victim");
    std::fs::write(&victim, "keep me").unwrap();
    let link = dir.join("flame.svg");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(&victim, &link).unwrap();
    let out = ft(&["flame", "-i", t, "-o", link.to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("is a symbolic link"),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep me");
    // A dataset with a planted link among its tables (issue 41 item 9): refused before any table
    // is written, where half the tables were written first.
    let dataset = dir.join("ds");
    let _ = std::fs::remove_dir_all(&dataset);
    std::fs::create_dir(&dataset).unwrap();
    std::os::unix::fs::symlink(&victim, dataset.join("samples.parquet")).unwrap();
    let ds = dataset.to_str().unwrap();
    let out = ft(&["dump", "-i", t, "--format", "parquet", "-o", ds]);
    let err = text(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("samples.parquet is a symbolic link"), "{err}");
    let written: Vec<_> = std::fs::read_dir(&dataset)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(written, ["samples.parquet"], "{err}");
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep me");
    // A result of ours is replaced, and a new one is private.
    let svg = dir.join("ok.svg");
    for _ in 0..2 {
        let out = ft(&["flame", "-i", t, "-o", svg.to_str().unwrap()]);
        assert!(out.status.success(), "{}", text(&out.stderr));
    }
    assert_eq!(std::fs::metadata(&svg).unwrap().mode() & 0o777, 0o600);
}

/// A server started by a test (it prints `port=N` once it listens), killed when dropped (a failed
/// assertion included).
struct Server(std::process::Child);

impl Server {
    fn start(cmd: &mut Command) -> Server {
        use std::io::BufRead;
        let mut child = cmd
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("start the server");
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let server = Server(child);
        assert!(line.starts_with("port="), "{line:?}");
        server
    }

    fn pid(&self) -> String {
        self.0.id().to_string()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A file only root may read or write (0600) holding `text`.
fn root_only(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).unwrap();
}

/// Root attaching to `nobody`'s process gives it the private directory holding the control FIFO (the
/// runtime runs as nobody and must open it); nobody then races root there, putting links to root-only
/// files in the place of `error` (the refusal root prints), `control` and `live` (which root used to
/// chown by path after giving the directory away). The runtime refuses (`--trace` selects nothing, or
/// it finds a link for its FIFO), so root reads `error` every time: it used to print the root-only file
/// the link points at, on the first try. Root must print none of them and chown none of them.
#[test]
fn root_attaching_to_a_user_s_process_never_goes_through_the_user_s_links() {
    let dir = shared_dir("attach-links");
    // ferrotrace's temporary directory, where its private directories are made: nobody may look.
    let tmp = dir.join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = dir.join("nobody-s");
    std::fs::create_dir(&out).unwrap();
    std::os::unix::fs::chown(&out, Some(65534), Some(65534)).unwrap();
    let secrets: Vec<PathBuf> = ["error", "control", "live"]
        .iter()
        .map(|n| dir.join(format!("root-only-{n}")))
        .collect();
    for (path, n) in secrets.iter().zip(["error", "control", "live"]) {
        root_only(path, &format!("root's secret behind {n}\n"));
    }
    // linked_server links the runtime and has a tracepoint.
    let server = Server::start(&mut as_nobody(&testprog("linked_server")));
    let attach = |args: &[&str]| {
        let out = ferrotrace()
            .env("TMPDIR", &tmp)
            .args(args)
            .output()
            .unwrap();
        assert!(!out.status.success(), "{}", text(&out.stderr));
        text(&out.stdout) + &text(&out.stderr)
    };
    let record = |n: usize| {
        attach(&[
            "record",
            "-p",
            &server.pid(),
            "-o",
            &out.join(format!("t{n}.data")).to_string_lossy(),
            "--trace",
            "no_such_*",
        ])
    };
    // Without the racer, the runtime's refusal is read from the directory given to nobody.
    let said = record(0);
    assert!(
        said.contains("--trace 'no_such_*' selects none of the program's tracepoints"),
        "{said}"
    );

    let racer = build_c(&dir, "gcc", "attach_racer.c", "attach_racer", &["-O2"]);
    let mut racer = as_nobody(&racer)
        .arg(&tmp)
        .args(&secrets)
        .spawn()
        .expect("start the racer");
    let mut said = Vec::new();
    for n in 1..=10 {
        said.push(record(n));
        said.push(attach(&[
            "live",
            "-p",
            &server.pid(),
            "--trace",
            "no_such_*",
        ]));
    }
    let _ = racer.kill();
    let _ = racer.wait();
    for s in &said {
        assert!(
            !s.contains("root's secret"),
            "root printed a root-only file: {s}"
        );
        assert_eq!(s.trim_end().lines().count(), 1, "{s}");
    }
    for (path, n) in secrets.iter().zip(["error", "control", "live"]) {
        let meta = std::fs::symlink_metadata(path).unwrap();
        assert_eq!(meta.uid(), 0, "root gave {} to nobody", path.display());
        assert_eq!(meta.permissions().mode() & 0o7777, 0o600);
        assert_eq!(
            std::fs::read_to_string(path).unwrap(),
            format!("root's secret behind {n}\n")
        );
    }
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `FERROTRACE_PRELOAD` names the library injected. Root attaching to its own process with a library
/// nobody owns (or a root-owned one in a directory anyone can write) would run that user's code as
/// root: refused in one line naming the path and why, and the process never loads it; the library
/// found beside the executable, root's, is loaded.
#[test]
fn root_refuses_a_preload_library_another_user_could_change() {
    let dir = shared_dir("preload-owner");
    let server = Server::start(&mut Command::new(testprog("line_server")));
    let pid = server.pid();
    let users = dir.join("users");
    std::fs::create_dir(&users).unwrap();
    let owned = users.join("libferrotrace_preload.so");
    std::fs::copy(preload(), &owned).unwrap();
    std::os::unix::fs::chown(&owned, Some(65534), Some(65534)).unwrap();
    let public = dir.join("public");
    std::fs::create_dir(&public).unwrap();
    std::fs::set_permissions(&public, std::fs::Permissions::from_mode(0o777)).unwrap();
    let in_public = public.join("libferrotrace_preload.so");
    std::fs::copy(preload(), &in_public).unwrap();
    for (library, why) in [
        (
            &owned,
            format!("{} is owned by user 65534", owned.display()),
        ),
        (
            &in_public,
            format!("{} is writable by its group and everyone", public.display()),
        ),
    ] {
        let out = ferrotrace()
            .env(env::PRELOAD, library)
            .args(["record", "-p", &pid, "--duration", "1", "-o"])
            .arg(dir.join("refused.data"))
            .output()
            .unwrap();
        let err = text(&out.stderr);
        assert!(!out.status.success(), "{err}");
        assert!(
            err.contains(&format!(
                "FERROTRACE_PRELOAD={} is refused: {why}",
                library.display()
            )),
            "{err}"
        );
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
        let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
        assert!(!maps.contains(&dir.to_string_lossy().to_string()), "{maps}");
    }
    // The library beside the executable (root's, in root's directories).
    let trace = dir.join("accepted.data");
    let out = ferrotrace()
        .env_remove(env::PRELOAD)
        .args(["record", "-p", &pid, "--duration", "1", "-o"])
        .arg(&trace)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(trace.exists());
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Issue 41 item 11: `nobody` attaching to (or profiling) a setuid program it started itself was
/// told to "attach as that user" (itself: user 65534 and ferrotrace as 65534), and profile blamed
/// kernel.perf_event_paranoid; each now names the setuid.
#[test]
fn a_user_s_own_setuid_process_is_refused_for_its_privileges() {
    let dir = shared_dir("setuid_attach");
    let own = dir.join("nobody");
    std::fs::create_dir(&own).unwrap();
    std::os::unix::fs::chown(&own, Some(65534), Some(65534)).unwrap();
    let prog = dir.join("suid-sleep");
    std::fs::copy("/bin/sleep", &prog).unwrap();
    std::fs::set_permissions(&prog, std::fs::Permissions::from_mode(0o4755)).unwrap();
    let mut sleeper = (0..50)
        .find_map(|_| match as_nobody(&prog).arg("60").spawn() {
            Ok(child) => Some(child),
            Err(e) if e.raw_os_error() == Some(26) => {
                // ETXTBSY: see output_of_copied.
                std::thread::sleep(std::time::Duration::from_millis(20));
                None
            }
            Err(e) => panic!("{}: {e}", prog.display()),
        })
        .expect("the copied program stayed busy (ETXTBSY)");
    let pid = sleeper.id().to_string();
    let uids = || {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        status
            .lines()
            .find_map(|l| l.strip_prefix("Uid:").map(str::to_string))
            .unwrap_or_default()
    };
    let started = std::time::Instant::now();
    while uids().split_whitespace().nth(1) != Some("0") {
        assert!(started.elapsed().as_secs() < 10, "not setuid: {}", uids());
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let trace = own.join("t.data");
    let t = trace.to_str().unwrap();
    for args in [
        vec!["record", "-o", t, "-p", &pid],
        vec!["live", "-F", ".", "-p", &pid],
        vec!["profile", "-o", t, "-p", &pid],
    ] {
        let out = as_nobody(Path::new(env!("CARGO_BIN_EXE_ferrotrace")))
            .args(&args)
            .output()
            .unwrap();
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(
            err.contains("runs with privileges its user does not have"),
            "{args:?}: {err}"
        );
        assert!(!trace.exists(), "{args:?}");
    }
    let _ = sleeper.kill();
    let _ = sleeper.wait();
    let _ = std::fs::remove_dir_all(&dir);
}
