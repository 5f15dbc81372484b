//! `record -A`/`-R`: arguments and return values, on a C program built with `-pg`, with clang's XRay
//! sleds and with no instrumentation at all (the entry patcher), and on a Rust program with XRay
//! sleds; compared with what uftrace records of the same program with the same options, and read back
//! by uftrace from `dump --format uftrace`.

mod common;

use std::path::Path;
use std::process::Command;

use common::*;

/// The options of every run: integers, strings (one dangling, one NULL, one ending at its mapping's
/// end), a double, a seventh argument on the stack, and integer, float and string return values.
const OPTIONS: &[&str] = &[
    "-A",
    "add@arg1,arg2",
    "-A",
    "say@arg1/s,arg2",
    "-A",
    "half@fparg1",
    "-A",
    "seven@arg1,arg7",
    "-A",
    "pick@arg1",
    "-R",
    "add@retval",
    "-R",
    "half@retval/f",
    "-R",
    "pick@retval/s",
    "-R",
    "say@retval/x",
];

/// What `testprogs/c/args.c` makes of them, in order (uftrace's spelling).
const EXPECTED: &[&str] = &[
    "main() {",
    "add(0, -5) = -5;",
    "add(1, -6) = -5;",
    "add(2, -7) = -5;",
    "say(\"hello world\", 3) = 0xe;",
    "say(<unreadable 0x10>, 1) = 0x1;",
    "say(NULL, 2) = 0x2;",
    "say(\"edg\", 0) = 0x3;",
    "half(3.000000) = 1.500000;",
    "seven(1, 7);",
    "add(0x7fff12345678, 0x1e240) = 0x7fff123638b8;",
    "pick(1) = \"yes\";",
    "pick(0) = \"no\";",
    "} /* main */",
];

/// The function column of a replay (what follows `| ` and the indentation).
fn calls(replay: &str) -> Vec<String> {
    replay
        .lines()
        .filter_map(|l| l.split_once("| ").map(|(_, f)| f.trim().to_string()))
        .filter(|f| !f.is_empty() && !f.starts_with("FUNCTION"))
        .collect()
}

fn replay_of(trace: &Path) -> Vec<String> {
    calls(&ok(ft(&["replay", "-i", trace.to_str().unwrap()])))
}

fn uftrace_replay(dir: &Path, data: &Path) -> Vec<String> {
    let out = Command::new("uftrace")
        // Without its schedule events (a pre-emption inside a call on a loaded machine splits the
        // call's line in two).
        .args(["replay", "--no-libcall", "--no-event", "-d"])
        .arg(data)
        .current_dir(dir)
        .output()
        .expect("uftrace installed (scripts/setup.sh)");
    assert!(
        out.status.success(),
        "uftrace replay: {}",
        text(&out.stderr)
    );
    calls(&text(&out.stdout))
}

/// What uftrace records of `exe` with `options`, as its replay shows it. It shows the two pointers
/// it could not follow as strings (`"NULL"`, `"<0x10>"`: its 0.13 writes them so), which is all
/// that differs from ours: they are written here as ours are.
fn uftrace_recorded(dir: &Path, exe: &Path, options: &[&str]) -> Vec<String> {
    let data = dir.join(format!("uftrace-{}.data", options.len()));
    let status = Command::new("uftrace")
        .arg("record")
        .args(options)
        .arg("-d")
        .arg(&data)
        .arg(exe)
        .current_dir(dir)
        .stdout(std::process::Stdio::null())
        .status()
        .expect("uftrace installed (scripts/setup.sh)");
    assert!(status.success());
    uftrace_replay(dir, &data)
        .into_iter()
        .map(|l| {
            l.replace("\"NULL\"", "NULL")
                .replace("\"<0x10>\"", "<unreadable 0x10>")
        })
        .collect()
}

fn recorded(dir: &Path, exe: &Path, extra: &[&str]) -> std::path::PathBuf {
    let opts: Vec<&str> = OPTIONS.iter().chain(extra).copied().collect();
    let (out, trace) = record(dir, &opts, exe, &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    trace
}

#[test]
fn arguments_and_return_values_match_uftraces_on_a_pg_program_and_uftrace_reads_them_back() {
    let dir = scratch("args_pg");
    let exe = build_c(&dir, "gcc", "args.c", "args_pg", &["-O1", "-pg"]);
    let trace = recorded(&dir, &exe, &[]);
    assert_eq!(replay_of(&trace), EXPECTED);

    // uftrace's own recording, same options.
    assert_eq!(uftrace_recorded(&dir, &exe, OPTIONS), EXPECTED);

    // Our export, read by uftrace: its replay shows the values, a dangling pointer as its own
    // marker.
    let export = dir.join("export.uftrace");
    ok(ft(&[
        "dump",
        "--format",
        "uftrace",
        "-i",
        trace.to_str().unwrap(),
        "-o",
        export.to_str().unwrap(),
    ]));
    let read_back: Vec<String> = uftrace_replay(&dir, &export)
        .into_iter()
        .map(|l| l.replace("\"<0x10>\"", "<unreadable 0x10>"))
        .collect();
    assert_eq!(read_back, EXPECTED);

    // A filtered replay (the general replayer) shows them the same way.
    let filtered = ok(ft(&["replay", "-F", "say", "-i", trace.to_str().unwrap()]));
    assert_eq!(calls(&filtered), &EXPECTED[4..8]);

    // The call tree `ferrotrace tui` shows holds them on its frames.
    let t = ferrotrace_analysis::reader::Trace::open(&trace).unwrap();
    let initial = ferrotrace_analysis::callstack::initial_stacks(&t).unwrap();
    let tid = *t.threads().keys().next().unwrap();
    let tree =
        ferrotrace_analysis::replay::tree::CallTree::of_thread(&t, tid, &initial, 1000).unwrap();
    let say = tree
        .nodes
        .iter()
        .find(|n| n.args.as_deref() == Some("\"hello world\", 3"))
        .expect("say's frame with its arguments");
    assert_eq!(say.retval.as_deref(), Some("0xe"));

    // Perfetto: debug annotations on the slices' begins (args) and ends (retval), decoded with
    // Perfetto's own protos.
    let view = perfetto_view(&trace, &dir);
    let begin = view
        .iter()
        .position(|e| e["kind"] == "begin" && e["name"] == "say")
        .expect("a slice of say");
    assert_eq!(view[begin]["args"]["args"], "\"hello world\", 3");
    assert_eq!(view[begin + 1]["kind"], "end");
    assert_eq!(view[begin + 1]["args"]["retval"], "0xe");

    // Parquet: the calls table's args and retval columns, read by DuckDB.
    let dataset = dir.join("dataset");
    ok(ft(&[
        "dump",
        "--format",
        "parquet",
        "-i",
        trace.to_str().unwrap(),
        "-o",
        dataset.to_str().unwrap(),
    ]));
    let rows = duckdb(&format!(
        "import duckdb\nfor r in duckdb.sql(\"select function, args, retval from '{}/calls.parquet' \
         where function in ('half', 'seven', 'pick') order by start_ns\").fetchall(): print(r)",
        dataset.display()
    ));
    assert_eq!(
        rows.lines().collect::<Vec<_>>(),
        [
            "('half', '3.000000', '1.500000')",
            "('seven', '1, 7', None)",
            "('pick', '1', '\"yes\"')",
            "('pick', '0', '\"no\"')",
        ]
    );
}

#[test]
fn xray_sleds_and_patched_entries_record_the_same_values() {
    let dir = scratch("args_xray");
    let xray = build_c(
        &dir,
        "clang-16",
        "args.c",
        "args_xray",
        &["-O1", "-fxray-instrument", "-fxray-instruction-threshold=1"],
    );
    assert_eq!(replay_of(&recorded(&dir, &xray, &[])), EXPECTED);
    // No instrumentation: the entries are patched at run time. gcc -O1 makes some of these
    // functions too short to patch (`list --dynamic` says which); those that are show their values.
    let plain = build_c(&dir, "gcc", "args.c", "args_plain", &["-O1"]);
    let got = replay_of(&recorded(&dir, &plain, &[]));
    let patched: Vec<&str> = EXPECTED
        .iter()
        .copied()
        .filter(|l| got.iter().any(|g| g == l))
        .collect();
    assert!(
        patched.iter().any(|l| l.starts_with("add("))
            && patched.iter().any(|l| l.starts_with("half(")),
        "{got:?}"
    );
    for line in &got {
        let name = line.split('(').next().unwrap_or_default();
        if EXPECTED.iter().any(|e| e.starts_with(&format!("{name}("))) && name != "main" {
            assert!(EXPECTED.contains(&line.as_str()), "{line} in {got:?}");
        }
    }
}

#[test]
fn a_rust_programs_arguments_and_results_are_recorded_through_its_sleds() {
    let dir = scratch("args_rust");
    let (out, trace) = record(
        &dir,
        &["-A", "fib::fib$@arg1", "-R", "fib::fib$@retval"],
        &testprog("fib"),
        &["5"],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let got = replay_of(&trace);
    // fib(n) = fib(n - 1) + fib(n - 2), every call with its argument and result.
    let fibs: Vec<&String> = got.iter().filter(|l| l.contains("fib::fib(")).collect();
    assert_eq!(fibs.len(), 15, "{got:?}");
    assert!(got.iter().any(|l| l == "fib::fib(5) {"), "{got:?}");
    assert!(got.iter().any(|l| l == "} = 5; /* fib::fib */"), "{got:?}");
    assert!(got.iter().any(|l| l == "fib::fib(1) = 1;"), "{got:?}");
    assert!(got.iter().any(|l| l == "fib::fib(0) = 0;"), "{got:?}");
}

#[test]
fn bad_argument_options_are_refused_in_one_line_before_anything_runs() {
    let dir = scratch("args_bad");
    let exe = build_c(&dir, "gcc", "args.c", "args_pg", &["-O1", "-pg"]);
    for (opt, value, says) in [
        ("-A", "add@arg0", "argN takes N from 1 to 16"),
        ("-A", "add", "FUNCTION@ITEMS"),
        ("-A", "add@arg1/z", "unknown format"),
        ("-A", "add@arg1,retval", "retval goes in -R"),
        ("-R", "(@retval", "invalid regex"),
    ] {
        let (out, trace) = record(&dir, &[opt, value], &exe, &[]);
        let err = text(&out.stderr);
        assert!(!out.status.success(), "{value}: {err}");
        assert!(err.contains(says), "{value}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{value}: {err}");
        assert!(!trace.exists(), "{value}");
    }
}

#[test]
fn registers_are_stored_by_pairs_up_to_the_highest_argument_named() {
    // add@arg2: one pair (rdi, rsi); seven@arg5,arg6: three pairs; say@arg2: one pair, no string.
    let dir = scratch("args_pairs");
    let opts = [
        "-A",
        "add@arg2",
        "-A",
        "seven@arg5,arg6",
        "-A",
        "say@arg2",
        "-R",
        "add@retval",
    ];
    let want = [
        "add(-5) = -5;",
        "say(3);",
        "say(1);",
        "seven(5, 6);",
        "add(0x1e240) = 0x7fff123638b8;",
    ];
    for (compiler, flags) in [
        ("gcc", &["-O1", "-pg"][..]),
        (
            "clang-16",
            &["-O1", "-fxray-instrument", "-fxray-instruction-threshold=1"][..],
        ),
    ] {
        let exe = build_c(&dir, compiler, "args.c", &format!("args_{compiler}"), flags);
        let (out, trace) = record(&dir, &opts, &exe, &[]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        let got = replay_of(&trace);
        for w in want {
            assert!(got.iter().any(|g| g == w), "{compiler}: {w} not in {got:?}");
        }
    }
}

#[test]
fn auto_args_reads_the_parameters_from_debug_info_as_uftrace_does() {
    let dir = scratch("args_auto");
    let exe = build_c(&dir, "gcc", "args.c", "args_g", &["-O1", "-g", "-pg"]);
    let (out, trace) = record(&dir, &["--auto-args"], &exe, &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let ours = replay_of(&trace);
    for line in [
        "say(\"hello world\", 3) = 14;",
        "say(<unreadable 0x10>, 1) = 1;",
        "half(3.000000) = 1.500000;",
        "seven(1, 2, 3, 4, 5, 6, 7) = 28;",
        "pick(1) = \"yes\";",
        "} = 0; /* main */",
    ] {
        assert!(ours.iter().any(|l| l == line), "{line} not in {ours:?}");
    }
    assert_eq!(ours, uftrace_recorded(&dir, &exe, &["--auto-args"]));

    // A program without debug info: said, and the run goes on.
    let plain = build_c(&dir, "gcc", "args.c", "args_nog", &["-O1", "-pg"]);
    let (out, trace) = record(&dir, &["--auto-args"], &plain, &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("--auto-args:"),
        "{}",
        text(&out.stderr)
    );
    assert!(replay_of(&trace).iter().any(|l| l == "add();"));
}

#[test]
fn debians_own_sqlite3_shows_its_sql_and_result_codes_through_patched_entries() {
    // Nobody here built it: /usr/bin/sqlite3 and libsqlite3.so.0 as Debian ships them, the entries
    // of their exported functions patched at run time.
    let dir = scratch("args_sqlite3");
    let sql = "create table t(x); insert into t values (1),(2); select sum(x) from t;";
    let (out, trace) = record(
        &dir,
        &[
            "-P",
            "^sqlite3_(open_v2|prepare_v2|step)$",
            "-A",
            "sqlite3_open_v2@arg1/s",
            "-A",
            "sqlite3_prepare_v2@arg2/s",
            "-R",
            "sqlite3_(open_v2|prepare_v2|step)@retval/d32",
        ],
        Path::new("/usr/bin/sqlite3"),
        &[":memory:", sql],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout).trim(),
        "3",
        "the program's output unchanged"
    );
    let got = replay_of(&trace);
    for line in [
        "sqlite3_open_v2(\":memory:\") = 0;".to_string(),
        format!("sqlite3_prepare_v2(\"{}\") {{", sql.replace('"', "\\\"")),
        "sqlite3_prepare_v2(\"select sum(x) from t;\") = 0;".to_string(),
        // SQLITE_ROW, then SQLITE_DONE.
        "sqlite3_step() = 100;".to_string(),
        "sqlite3_step() = 101;".to_string(),
    ] {
        assert!(got.contains(&line), "{line} not in {got:#?}");
    }
}
