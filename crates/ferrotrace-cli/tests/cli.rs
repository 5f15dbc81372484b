//! The command line itself: arguments, where output goes and what happens when it cannot go there, on
//! traces of real instrumented programs.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use common::*;

/// A trace of `fib 15`, recorded once per test binary.
fn fib_trace() -> &'static PathBuf {
    static T: OnceLock<PathBuf> = OnceLock::new();
    T.get_or_init(|| {
        let dir = scratch("cli_fib");
        let (out, trace) = record(&dir, &[], &testprog("fib"), &["15"]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        trace
    })
}

fn p(path: &Path) -> &str {
    path.to_str().expect("utf-8 path")
}

/// Every command that prints to standard output, with its arguments.
fn printing_commands(trace: &Path) -> Vec<Vec<String>> {
    let t = p(trace).to_string();
    let fib = p(&testprog("fib")).to_string();
    let with = |args: &[&str]| {
        let mut v: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        if v[0] != "list" {
            v.extend(["-i".to_string(), t.clone()]);
        }
        v
    };
    vec![
        vec!["list".into(), fib.clone()],
        vec!["list".into(), "--json".into(), fib],
        with(&["info"]),
        with(&["info", "--json"]),
        with(&["replay"]),
        with(&["replay", "-D", "2"]),
        with(&["report"]),
        with(&["report", "--json"]),
        with(&["graph"]),
        with(&["flame", "--folded"]),
        with(&["dump", "--format", "chrome"]),
        with(&["dump", "--format", "perfetto"]),
        with(&["dump", "--format", "folded"]),
    ]
}

#[test]
fn every_command_ends_quietly_when_its_reader_goes_away() {
    let trace = fib_trace();
    for args in printing_commands(trace) {
        let mut child = ferrotrace()
            .args(&args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run ferrotrace");
        drop(child.stdout.take()); // the reader is gone before the first write
        let out = child.wait_with_output().expect("wait");
        // Quiet: nothing on stderr but dump's size note, which comes before any output.
        let err = text(&out.stderr);
        let noise: Vec<&str> = err
            .lines()
            .filter(|l| !l.contains("Chrome JSON of"))
            .collect();
        assert!(
            out.status.success() && noise.is_empty(),
            "ferrotrace {args:?} with its reader gone: {} {}",
            out.status,
            text(&out.stderr)
        );
    }
}

#[test]
fn every_command_says_what_it_could_not_write_on_a_full_disk() {
    let trace = fib_trace();
    for args in printing_commands(trace) {
        let out = ferrotrace()
            .args(&args)
            .stdout(std::fs::File::create("/dev/full").expect("/dev/full"))
            .output()
            .expect("run ferrotrace");
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "ferrotrace {args:?}: {err}");
        assert!(
            err.contains("cannot write standard output: No space left on device")
                && !err.contains("panicked"),
            "ferrotrace {args:?} > /dev/full: {err}"
        );
    }
    for args in [
        vec!["flame", "-o", "/dev/full"],
        vec!["flame", "--folded", "-o", "/dev/full"],
        vec!["dump", "--format", "chrome", "-o", "/dev/full"],
        vec!["dump", "--format", "perfetto", "-o", "/dev/full"],
    ] {
        let out = ft(&[&args[..], &["-i", p(trace)]].concat());
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "ferrotrace {args:?}: {err}");
        assert!(
            err.contains("cannot write /dev/full: No space left on device"),
            "ferrotrace {args:?}: {err}"
        );
    }
}

/// A standard error that cannot be written (`2>/dev/full`, `2>&1 | head -c1`) ends no command with a
/// panic (exit 101): what it would have said is dropped, the command's own status stands.
#[test]
fn a_full_or_closed_standard_error_is_not_a_crash() {
    let dir = scratch("stderr_full");
    let trace = dir.join("trace.data");
    let svg = dir.join("f.svg");
    let fib = testprog("fib");
    let cases: Vec<(Vec<&str>, i32)> = vec![
        (vec!["record", "-o", p(&trace), "--", p(&fib), "12"], 0),
        (vec!["flame", "-i", p(&trace), "-o", p(&svg)], 0),
        (vec!["info", "-i", "/nonexistent/trace.data"], 2),
    ];
    for (args, code) in cases {
        let full = ferrotrace()
            .args(&args)
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create("/dev/full").expect("/dev/full"))
            .status()
            .expect("run ferrotrace");
        assert_eq!(full.code(), Some(code), "ferrotrace {args:?} 2>/dev/full");
        // A pipe whose reader is gone: EPIPE on every write to standard error.
        let mut fds = [0; 2];
        // SAFETY: pipe fills two descriptors; the read end is closed at once.
        let write_end = unsafe {
            assert_eq!(libc_pipe(fds.as_mut_ptr()), 0);
            libc_close(fds[0]);
            <std::fs::File as std::os::fd::FromRawFd>::from_raw_fd(fds[1])
        };
        let closed = ferrotrace()
            .args(&args)
            .stdout(std::process::Stdio::null())
            .stderr(write_end)
            .status()
            .expect("run ferrotrace");
        assert_eq!(
            closed.code(),
            Some(code),
            "ferrotrace {args:?} 2>&1 | head -c0"
        );
    }
}

extern "C" {
    #[link_name = "pipe"]
    fn libc_pipe(fds: *mut i32) -> i32;
    #[link_name = "close"]
    fn libc_close(fd: i32) -> i32;
}

/// How many `read`/`pread64` system calls `ferrotrace ARGS` makes on the trace file, with standard output a pipe
/// whose reader takes `lines` lines (all if `None`) and leaves.
/// How many event chunks `ferrotrace ARGS` loaded from the trace (its positional reads: the index
/// pass that opens a trace reads the file once, sequentially, checking every chunk; decoding events is
/// what the rest costs) when its reader takes `lines` lines (all with `None`).
fn chunk_loads(args: &[&str], trace: &Path, lines: Option<usize>, dir: &Path) -> usize {
    use std::io::BufRead;
    let log = dir.join("strace.log");
    let mut child = Command::new("strace")
        .args(["-f", "-e", "trace=openat,pread64", "-o"])
        .arg(&log)
        .arg(env!("CARGO_BIN_EXE_ferrotrace"))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("strace (scripts/setup.sh installs it)");
    let mut reader = std::io::BufReader::new(child.stdout.take().expect("stdout"));
    let mut line = String::new();
    let mut taken = 0;
    while lines.is_none_or(|n| taken < n) && reader.read_line(&mut line).unwrap_or(0) > 0 {
        taken += 1;
        line.clear();
    }
    drop(reader);
    assert!(child.wait().expect("wait").success());
    // The descriptor the trace was opened on, then its reads.
    let log = std::fs::read_to_string(&log).expect("strace log");
    let name = format!("\"{}\"", p(trace));
    let fds: Vec<String> = log
        .lines()
        .filter(|l| l.contains("openat(") && l.contains(&name))
        .filter_map(|l| l.rsplit("= ").next().map(str::to_string))
        .collect();
    assert!(!fds.is_empty(), "the trace was never opened:\n{log}");
    log.lines()
        .filter(|l| {
            fds.iter()
                .any(|fd| l.contains(&format!("pread64({fd},")) && !l.ends_with("= 0"))
        })
        .count()
}

#[test]
fn replay_ends_when_its_reader_stops_taking_output() {
    // Deep recursion: a depth limit leaves a few lines early in the trace and none after, so only the
    // reader's going away can end the replay early.
    let dir = scratch("replay_reader_gone");
    let (out, trace) = record(&dir, &[], &testprog("fib"), &["25"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let args = ["replay", "-D", "3", "-i", p(&trace)];
    let whole = chunk_loads(&args, &trace, None, &dir);
    let head = chunk_loads(&args, &trace, Some(2), &dir);
    // The trace says which functions were running when tracing began (RunningAtStart): the replay
    // needs no pass over the whole trace before its first line.
    assert!(
        head * 3 < whole,
        "replay -D 3 | head loaded {head} event chunks, the whole replay {whole}"
    );
}

#[test]
fn options_before_the_program_are_checked_and_those_after_it_are_the_programs() {
    let dir = scratch("unknown_option");
    let fib = testprog("fib");
    let trace = dir.join("t.data");
    for cmd in [
        &["record", "-o", p(&trace), "--bogus", "--"][..],
        &["live", "--trace", "x", "--bogus", "--"],
        &["profile", "-o", p(&trace), "--bogus", "--"],
    ] {
        let out = ferrotrace()
            .args(cmd)
            .arg(&fib)
            .arg("5")
            .current_dir(&dir)
            .output()
            .expect("run ferrotrace");
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{cmd:?}: {err}");
        assert!(
            err.contains("unexpected argument '--bogus'"),
            "{cmd:?}: {err}"
        );
        assert!(out.stdout.is_empty(), "{cmd:?} ran the program");
        assert!(!trace.exists(), "{cmd:?} wrote a trace");
    }
    // After the program's name everything is the program's, options included, with or without `--`.
    for cmd in [
        &["record", "-o", p(&trace)][..],
        &["record", "-o", p(&trace), "--"],
    ] {
        let out = ferrotrace()
            .args(cmd)
            .arg(&fib)
            .args(["12", "-o", "--bogus"])
            .current_dir(&dir)
            .output()
            .expect("run ferrotrace");
        assert!(out.status.success(), "{cmd:?}: {}", text(&out.stderr));
        assert!(text(&out.stdout).contains("result=144"));
        let info = ok(ft(&["info", "--json", "-i", p(&trace)]));
        assert!(info.contains("\"-o\",\"--bogus\""), "{info}");
    }
}

#[test]
fn reversed_time_range_is_an_error() {
    let out = ft(&["replay", "--time-range", "5ms~1ms", "-i", p(fib_trace())]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("ends before it starts"), "{err}");
    assert!(out.stdout.is_empty());
}

#[test]
fn dumps_refuse_an_output_in_a_missing_directory_alike() {
    let dir = scratch("dump_missing_dir");
    let missing = dir.join("missing/sub");
    for format in ["uftrace", "chrome", "perfetto", "folded"] {
        let target = missing.join("out");
        let out = ft(&[
            "dump",
            "--format",
            format,
            "-o",
            p(&target),
            "-i",
            p(fib_trace()),
        ]);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{format}: {err}");
        assert!(err.contains("No such file or directory"), "{format}: {err}");
        assert!(!dir.join("missing").exists(), "{format} made the directory");
    }
    // The uftrace directory itself is made in a parent that exists.
    let target = dir.join("u");
    ok(ft(&[
        "dump",
        "--format",
        "uftrace",
        "-o",
        p(&target),
        "-i",
        p(fib_trace()),
    ]));
    assert!(target.join("info").is_file());
}

#[test]
fn list_numbers_functions_as_llvm_xray_does_and_calls_that_number_xray_id() {
    let fib = testprog("fib");
    let list: serde_json::Value =
        serde_json::from_str(&ok(ft(&["list", "--json", "--functions", p(&fib)]))).unwrap();
    let functions = list["functions"].as_array().expect("functions");
    assert!(functions.len() > 5);
    // llvm-xray's own numbering: `- { id: N, address: ..., function: 0xADDR, kind: ...`.
    let extract = Command::new("llvm-xray")
        .args(["extract", p(&fib)])
        .output()
        .expect("llvm-xray (package llvm)");
    assert!(extract.status.success(), "{}", text(&extract.stderr));
    let mut by_id = std::collections::HashMap::new();
    for line in text(&extract.stdout).lines() {
        let field = |k: &str| {
            line.split(&format!("{k}: "))
                .nth(1)
                .and_then(|r| r.split(',').next())
                .map(str::to_string)
        };
        if let (Some(id), Some(function)) = (field("id"), field("function")) {
            by_id.insert(id.parse::<u64>().unwrap(), function.to_lowercase());
        }
    }
    for f in functions {
        assert!(
            f.get("id").is_none(),
            "list still calls its number \"id\": {f}"
        );
        let xray_id = f["xray_id"].as_u64().expect("xray_id");
        assert_eq!(
            by_id.get(&xray_id).map(String::as_str),
            f["address"].as_str(),
            "{f}"
        );
    }
}

#[test]
fn chrome_dump_says_how_big_it_will_be_and_where_a_smaller_form_is() {
    let dir = scratch("chrome_size");
    let json = dir.join("t.json");
    let out = ft(&[
        "dump",
        "--format",
        "chrome",
        "-i",
        p(fib_trace()),
        "-o",
        p(&json),
    ]);
    let err = text(&out.stderr);
    assert!(out.status.success(), "{err}");
    // "Chrome JSON of N events will take about 407.4 kB; --format perfetto ..."
    let about = err
        .split("will take about ")
        .nth(1)
        .and_then(|r| r.split(';').next())
        .unwrap_or_else(|| panic!("no size estimate: {err}"));
    assert!(err.contains("--format perfetto"), "{err}");
    let (number, unit) = about.split_once(' ').expect("N UNIT");
    let scale = match unit {
        "kB" => 1e3,
        "MB" => 1e6,
        "GB" => 1e9,
        _ => panic!("unit {unit}"),
    };
    let estimate = number.parse::<f64>().unwrap() * scale;
    let actual = std::fs::metadata(&json).unwrap().len() as f64;
    assert!(
        estimate > actual / 1.5 && estimate < actual * 1.5,
        "estimated {estimate} bytes, wrote {actual}"
    );
}

#[test]
fn record_summary_and_info_count_the_same_events_when_events_were_lost() {
    let dir = scratch("drop_counts");
    let trace = dir.join("trace.data");
    let out = record_losing_events(&trace);
    let err = text(&out.stderr);
    assert!(out.status.success(), "{err}");
    // "ferrotrace: wrote PATH: N events from ..."
    let summary: u64 = err
        .split(".data: ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no event count in: {err}"));
    let info: serde_json::Value =
        serde_json::from_str(&ok(ft(&["info", "--json", "-i", p(&trace)]))).unwrap();
    assert!(
        info["lost"].as_u64().unwrap() > 0,
        "the tiny buffer lost events"
    );
    // Both count the program's events, not the markers of the losses (issue 20.2: info counted
    // them as recorded events; issue 42.3: the summary still did).
    let markers = info["markers"].as_u64().unwrap();
    assert!(markers > 0, "{info}");
    assert_eq!(info["events"].as_u64().unwrap(), summary, "{err}\n{info}");
    let t = ferrotrace_analysis::reader::Trace::open(&trace).unwrap();
    let mut program_events = 0;
    for &tid in t.threads().keys() {
        for e in t.thread_events(tid).unwrap() {
            if !matches!(
                e.unwrap().kind,
                ferrotrace_analysis::reader::EventKind::Lost
                    | ferrotrace_analysis::reader::EventKind::Wait
            ) {
                program_events += 1;
            }
        }
    }
    assert_eq!(info["events"].as_u64(), Some(program_events), "{info}");
}

#[test]
fn selections_that_match_nothing_say_so_and_why() {
    let dir = scratch("selects_nothing");
    let prog = testprog("inlined");
    let run = |opts: &[&str]| {
        let (out, _) = record(&dir, opts, &prog, &["10"]);
        let err = text(&out.stderr);
        assert!(out.status.success(), "{opts:?}: {err}");
        assert!(text(&out.stdout).starts_with("sum="));
        err
    };
    // A function inlined into its callers has no sled: say so, and that the build is fine.
    let err = run(&["-F", "json_phase"]);
    assert!(
        err.contains("-F 'json_phase' matched no traced function: inlined::json_phase, ")
            && err.contains("inlined into their callers (no sled): mark them #[inline(never)]"),
        "{err}"
    );
    assert!(
        err.contains("-F 'json_phase' selects none of the") && !err.contains("RUSTFLAGS"),
        "{err}"
    );
    // A pattern that names nothing at all: said once, by the runtime.
    let err = run(&["-F", "no_such_function_xyz"]);
    assert_eq!(
        err.matches("no_such_function_xyz").count(),
        1,
        "one warning per pattern: {err}"
    );
    assert!(
        err.contains("-F 'no_such_function_xyz' selects none of the"),
        "{err}"
    );
    // One pattern matches, the other does not: only the other is named.
    let err = run(&["-F", "kept_phase", "-F", "json_phase"]);
    assert!(!err.contains("'kept_phase' matched no"), "{err}");
    assert!(
        err.contains("'json_phase' matched no traced function"),
        "{err}"
    );
    assert!(!err.contains("selected none"), "{err}");
    // Tracepoint globs that select nothing.
    let (out, _) = record(&dir, &["--trace", "nomatch*"], &testprog("tp_basic"), &[]);
    let err = text(&out.stderr);
    assert!(
        err.contains("--trace 'nomatch*' selects none of the"),
        "{err}"
    );
}

#[test]
fn srcline_says_when_the_binary_has_no_line_information() {
    let dir = scratch("srcline_no_debug");
    // A copy of fib without debug info, traced.
    let stripped = dir.join("fib");
    std::fs::copy(testprog("fib"), &stripped).unwrap();
    let strip = Command::new("strip")
        .arg("--strip-debug")
        .arg(&stripped)
        .status()
        .expect("strip (binutils)");
    assert!(strip.success());
    let (out, trace) = record(&dir, &["-F", "^fib::"], &stripped, &["5"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    for cmd in ["report", "replay"] {
        let out = ft(&[cmd, "--srcline", "-i", p(&trace)]);
        let err = text(&out.stderr);
        assert!(out.status.success(), "{err}");
        assert!(
            err.contains("--srcline:") && err.contains("no line information"),
            "{cmd}: {err}"
        );
    }
}

#[test]
fn distinct_functions_with_one_name_get_distinct_rows_that_say_why() {
    let dir = scratch("two_statics");
    let exe = dir.join("twostatics");
    let src = repo().join("testprogs/c/twostatics");
    let status = Command::new("clang-16")
        .args([
            "-O2",
            "-g",
            "-fxray-instrument",
            "-fxray-instruction-threshold=1",
            "-o",
        ])
        .arg(&exe)
        .arg(src.join("a.c"))
        .arg(src.join("b.c"))
        .status()
        .expect("clang-16");
    assert!(status.success());
    let (out, trace) = record(&dir, &[], &exe, &["3", "5"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let report: serde_json::Value =
        serde_json::from_str(&ok(ft(&["report", "--json", "-i", p(&trace)]))).unwrap();
    let rows = report["functions"].as_array().unwrap();
    let mut names: Vec<&str> = rows.iter().map(|r| r["name"].as_str().unwrap()).collect();
    names.sort_unstable();
    let before = names.len();
    names.dedup();
    assert_eq!(names.len(), before, "two rows with one name: {names:?}");
    // Both helpers, each with its own calls and its address (as nm shows it) in the name.
    let nm = text(
        &Command::new("nm")
            .arg(&exe)
            .output()
            .expect("nm (binutils)")
            .stdout,
    );
    let mut helpers: Vec<(String, u64)> = rows
        .iter()
        .filter(|r| r["name"].as_str().unwrap().starts_with("helper ["))
        .map(|r| {
            (
                r["name"].as_str().unwrap().to_string(),
                r["calls"].as_u64().unwrap(),
            )
        })
        .collect();
    helpers.sort_by_key(|h| h.1);
    assert_eq!(helpers.len(), 2, "{names:?}");
    assert_eq!((helpers[0].1, helpers[1].1), (3, 5));
    for (name, _) in &helpers {
        let addr = name.trim_start_matches("helper [@0x").trim_end_matches(']');
        assert!(
            nm.lines()
                .any(|l| l.ends_with(" t helper") && l.trim_start_matches('0').starts_with(addr)),
            "{name} is not a helper's address in nm:\n{nm}"
        );
    }
    // Issue 20 item 17: `-F`/`-N` select one copy by `name@0xADDR` (the address its name shows), in
    // `record` as in `replay`; the plain name selects both.
    let b_copy = helpers[1]
        .0
        .replace(" [@", "@")
        .trim_end_matches(']')
        .to_string();
    let helper_calls = |trace: &Path| {
        let t = ferrotrace_analysis::reader::Trace::open(trace).unwrap();
        let mut n = 0;
        for &tid in t.threads().keys() {
            for e in t.thread_events(tid).unwrap() {
                let e = e.unwrap();
                if e.kind == ferrotrace_analysis::reader::EventKind::Entry
                    && t.function_name(e.id) == "helper"
                {
                    n += 1;
                }
            }
        }
        n
    };
    let replayed = |opts: &[&str]| {
        ok(ft(&[&["replay", "-i", p(&trace)], opts].concat()))
            .lines()
            .filter(|l| l.contains("helper"))
            .count()
    };
    let one = format!("^{b_copy}$");
    for (opts, calls) in [
        (vec!["-F", one.as_str()], 5),
        (vec!["-N", one.as_str()], 3),
        (vec!["-F", "^helper$"], 8),
    ] {
        let d = dir.join("sel");
        std::fs::create_dir_all(&d).unwrap();
        let (out, t) = record(&d, &opts, &exe, &["3", "5"]);
        assert!(out.status.success(), "{opts:?}: {}", text(&out.stderr));
        assert!(
            !text(&out.stderr).contains("matched no"),
            "{}",
            text(&out.stderr)
        );
        assert_eq!(helper_calls(&t), calls, "record {opts:?}");
        assert_eq!(replayed(&opts), calls, "replay {opts:?}");
    }
}

/// Every option that takes a duration reads the one units grammar: `1h` is an hour for `record
/// --duration` as for `profile --duration`, `replay -t`, `--time-range` and `dump --from`, and a unit
/// that does not exist is refused by each with the grammar's words.
#[test]
fn every_duration_option_reads_one_grammar() {
    let t = p(fib_trace()).to_string();
    let dir = scratch("units_grammar");
    let out_file = dir.join("out.perfetto-trace");
    // A process id that is not running: the duration is parsed before the process is looked for.
    let gone = "2147483646";
    let options = |d: &str| -> Vec<Vec<String>> {
        let v = |a: &[&str]| a.iter().map(|s| s.to_string()).collect();
        vec![
            v(&["record", "-p", gone, "--duration", d]),
            v(&["profile", "-p", gone, "--duration", d]),
            v(&["replay", "-i", &t, "-t", d]),
            v(&["replay", "-i", &t, "--time-range", &format!("{d}~")]),
            v(&[
                "dump",
                "-i",
                &t,
                "--format",
                "perfetto",
                "-o",
                p(&out_file),
                "--from",
                d,
            ]),
        ]
    };
    for args in options("1h") {
        let out = ferrotrace().args(&args).output().unwrap();
        let err = text(&out.stderr);
        assert!(
            !err.contains("bad duration") && !err.contains("bad time"),
            "{args:?}: {err}"
        );
    }
    for args in options("1parsec") {
        let out = ferrotrace().args(&args).output().unwrap();
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(
            err.contains("bad duration") || err.contains("bad time"),
            "{args:?}: {err}"
        );
    }
}

/// `--from`/`--to` and `--max-size` are refused for a format that does not declare windows or
/// pieces, in one line naming the formats that do (from the registry, not a hand-written name).
#[test]
fn dump_options_a_format_does_not_support_are_refused_naming_those_that_do() {
    let dir = scratch("dump_unsupported");
    let out_file = dir.join("out.json");
    for (flag, value) in [("--from", "1ms"), ("--max-size", "1M")] {
        let out = ft(&[
            "dump",
            "-i",
            p(fib_trace()),
            "--format",
            "chrome",
            "-o",
            p(&out_file),
            flag,
            value,
        ]);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{flag}: {err}");
        assert!(
            err.contains(flag) && err.contains("perfetto"),
            "{flag}: {err}"
        );
        assert_eq!(err.trim().lines().count(), 1, "{flag}: {err}");
        assert!(!out_file.exists(), "{flag}: nothing written");
    }
}

/// uftrace's spellings (docs/uftrace.md) run against a trace: `-d`/`--data` for `-o` and `-i`,
/// `--no-pager`, `--no-libcall`, `report -f`/`--output-fields`, `--avg-total`, `-s call`; those that
/// cannot mean the same are refused in one line naming ferrotrace's equivalent.
#[test]
fn uftrace_spellings_are_accepted_or_refused_in_one_line() {
    let dir = scratch("uftrace_spellings");
    let trace = dir.join("fib.data");
    let out = ferrotrace()
        .args(["record", "--no-libcall", "-d", p(&trace), "--"])
        .arg(testprog("fib"))
        .arg("10")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let t = p(&trace);
    // The same table as -i and the default columns give, with -d, --data and --no-pager.
    let plain = ok(ft(&["report", "-i", t]));
    assert_eq!(ok(ft(&["report", "-d", t, "--no-pager"])), plain);
    assert_eq!(ok(ft(&["--no-pager", "report", "--data", t])), plain);
    for cmd in ["info", "replay", "graph", "mem", "flame"] {
        let args: &[&str] = match cmd {
            "flame" => &["flame", "--folded"],
            _ => &[cmd],
        };
        let by_i = ft(&[args, &["-i", t]].concat());
        let by_d = ft(&[args, &["-d", t, "--no-pager"]].concat());
        assert_eq!(
            (by_d.status.code(), text(&by_d.stdout)),
            (by_i.status.code(), text(&by_i.stdout)),
            "{cmd} -d"
        );
    }
    // -s call sorts as -s calls; -f picks and orders the columns.
    assert_eq!(
        ok(ft(&["report", "-d", t, "-s", "call"])),
        ok(ft(&["report", "-d", t, "-s", "calls"]))
    );
    let fields = ok(ft(&["report", "-d", t, "-f", "call,total,total-max"]));
    let header: Vec<&str> = fields
        .lines()
        .next()
        .unwrap()
        .split("  ")
        .map(str::trim)
        .filter(|w| !w.is_empty())
        .collect();
    assert_eq!(
        header,
        ["Calls", "Total time", "Max", "Function"],
        "{fields}"
    );
    let fib_row = fields
        .lines()
        .find(|l| l.ends_with("fib::fib"))
        .expect("fib row");
    let calls_in_plain = plain
        .lines()
        .find(|l| l.ends_with("fib::fib"))
        .unwrap()
        .split_whitespace()
        .nth(4)
        .unwrap()
        .to_string();
    assert_eq!(
        fib_row.split_whitespace().next().unwrap(),
        calls_in_plain,
        "{fields}\n{plain}"
    );
    let avg_total = ok(ft(&["report", "-d", t, "--avg-total"]));
    let header: Vec<&str> = avg_total
        .lines()
        .next()
        .unwrap()
        .split_whitespace()
        .collect();
    assert_eq!(header, ["Avg", "Min", "Max", "Function"], "{avg_total}");
    // Refused, each in one line that names what ferrotrace has.
    for (args, names) in [
        (&["--avg-self"][..], "--avg-total"),
        (&["-f", "self-avg"][..], "total-avg"),
        (&["-f", "size"][..], "total-max"),
        (&["-f", "total", "--json"][..], "--json has every field"),
    ] {
        let out = ft(&[&["report", "-d", t][..], args].concat());
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(names), "{args:?}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
    }
}

/// `report --jobs 2` on a machine whose cores are all busy reads on one thread (its second job's
/// hand-overs would each wait for a time slice: 48 s instead of 1.9 s on a busy 2-vCPU machine), says
/// so, and reports what one job reports. The test keeps every core busy itself.
#[test]
fn report_jobs_fall_back_to_one_when_no_core_is_free() {
    let trace = fib_trace();
    let one = ok(ft(&["report", "-i", p(trace), "--jobs", "1"]));
    let stop = std::sync::atomic::AtomicBool::new(false);
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let out = std::thread::scope(|s| {
        for _ in 0..cpus + 1 {
            s.spawn(|| {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    std::hint::spin_loop();
                }
            });
        }
        let out = ft(&["report", "-i", p(trace), "--jobs", "2"]);
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        out
    });
    let err = text(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("leave no core free for a second job: reading on one"),
        "{err}"
    );
    assert_eq!(text(&out.stdout), one);
}
