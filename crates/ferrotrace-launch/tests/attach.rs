//! Entering a running process with ptrace: a library loaded into a program that is serving requests,
//! a function of it called with a string, the program unharmed before, during and after; and the
//! refusals, one line each.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use ferrotrace_launch::attach::{self, Arg};
use ferrotrace_launch::LaunchError;

fn scratch(name: &str) -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn gcc(dir: &Path, source: &str, out: &str, flags: &[&str]) -> PathBuf {
    let src = dir.join(format!("{out}.c"));
    std::fs::write(&src, source).unwrap();
    let exe = dir.join(out);
    let st = Command::new("gcc")
        .args(flags)
        .arg(&src)
        .arg("-o")
        .arg(&exe)
        .status()
        .expect("gcc (scripts/setup.sh installs it)");
    assert!(st.success(), "gcc {out}");
    exe
}

/// A line server: answers each line of standard input with `echo LINE`.
const ECHO: &str = r#"
#include <stdio.h>
int main(void) {
    char line[256];
    while (fgets(line, sizeof line, stdin)) { printf("echo %s", line); fflush(stdout); }
    return 0;
}
"#;

/// What is loaded: a constructor that leaves a mark, and a function that writes its argument.
const LIBRARY: &str = r#"
#include <stdio.h>
#include <stdlib.h>
static const char *dir(void) { const char *d = getenv("MARK_DIR"); return d ? d : "/tmp"; }
__attribute__((constructor)) static void loaded(void) {
    char p[512]; snprintf(p, sizeof p, "%s/loaded", dir()); FILE *f = fopen(p, "w"); if (f) fclose(f);
}
int write_mark(const char *text, long n) {
    char p[512]; snprintf(p, sizeof p, "%s/mark", dir()); FILE *f = fopen(p, "w");
    if (!f) return -1; fprintf(f, "%s %ld", text, n); fclose(f); return 42;
}
"#;

struct Server {
    child: Child,
    out: BufReader<std::process::ChildStdout>,
}

impl Server {
    fn start(exe: &Path, dir: &Path) -> Server {
        let mut child = Command::new(exe)
            .env("MARK_DIR", dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let out = BufReader::new(child.stdout.take().unwrap());
        let mut s = Server { child, out };
        s.ask("ready"); // it is up and blocked in read
        s
    }

    fn ask(&mut self, line: &str) {
        let stdin = self.child.stdin.as_mut().unwrap();
        writeln!(stdin, "{line}").unwrap();
        stdin.flush().unwrap();
        let mut answer = String::new();
        self.out.read_line(&mut answer).unwrap();
        assert_eq!(answer, format!("echo {line}\n"));
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn finish(mut self) {
        drop(self.child.stdin.take());
        let st = self.child.wait().unwrap();
        assert_eq!(
            st.code(),
            Some(0),
            "the server did not end as it would have"
        );
    }
}

#[test]
fn loads_a_library_into_a_serving_process_and_calls_it() {
    let dir = scratch("attach_load");
    let server = gcc(&dir, ECHO, "echo", &["-O2"]);
    let library = gcc(&dir, LIBRARY, "libmark.so", &["-shared", "-fPIC", "-O2"]);
    let mut s = Server::start(&server, &dir);
    for round in 0..3 {
        let mut thread = attach::load_library(s.pid(), &library).expect("load");
        assert!(dir.join("loaded").exists());
        let f = attach::symbol_in(s.pid(), |p| p.ends_with("/libmark.so"), &["write_mark"])
            .expect("write_mark");
        let r = thread
            .call(f, &[Arg::Str("hello from outside"), Arg::Int(round)])
            .expect("call");
        assert_eq!(r, 42);
        thread.release().unwrap();
        assert_eq!(
            std::fs::read_to_string(dir.join("mark")).unwrap(),
            format!("hello from outside {round}")
        );
        // Its interrupted read was restarted: it answers as before.
        s.ask(&format!("after {round}"));
    }
    s.finish();
}

fn refusal(pid: u32) -> String {
    match attach::check(pid) {
        Err(e @ LaunchError::CannotAttach { .. }) => e.to_string(),
        other => panic!("attached to {pid}: {other:?}"),
    }
}

#[test]
fn refuses_what_cannot_be_entered_in_one_line() {
    let dir = scratch("attach_refusals");
    assert!(refusal(999_999_999).ends_with("no such process"));
    // Statically linked: no loader to call.
    let stat = gcc(&dir, ECHO, "echo_static", &["-static", "-O2"]);
    let s = Server::start(&stat, &dir);
    let why = refusal(s.pid());
    assert!(why.contains("statically linked"), "{why}");
    s.finish();
    // Already traced (by this very test): one tracer at a time.
    let server = gcc(&dir, ECHO, "echo", &["-O2"]);
    let mut s = Server::start(&server, &dir);
    let thread = attach::Borrowed::stop(s.pid()).expect("stop");
    let why = refusal(s.pid());
    assert!(why.contains("another tracer"), "{why}");
    thread.release().unwrap();
    s.ask("still here");
    s.finish();
}
