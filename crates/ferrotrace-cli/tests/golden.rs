//! What every command and export writes, held byte for byte against what the code of f61ad72 wrote
//! (issue 39: the analysis may get faster, its results must not change).
//!
//! The reference cannot be rebuilt inside a test, and a trace recorded now has new timestamps, so the
//! check is a golden one: `tests/golden/` holds three traces of real instrumented programs, recorded
//! once (`calltree`, whose worker thread, caught panic and tail calls exercise the call stack;
//! `calltree exit`, which leaves frames open at its end; the Lua interpreter built with clang's XRay
//! running a small script under `record --alloc`, 643 functions and allocation events), and
//! `outputs.txt` the length and FNV-1a hash of each command's output on each of them. A trace names
//! its functions itself, so these outputs depend on nothing on the machine (the commands run in
//! that directory: the Parquet metadata holds the trace's path as given). The hashes stand for the
//! outputs, which would take megabytes; when one differs the test leaves the output in its scratch
//! directory to compare with what an older binary writes (`cmp`, `diff`).
//!
//! An intended change of output makes the test fail: after checking that the change is what was
//! meant (against the previous main's binary), `FERROTRACE_BLESS=1 cargo test -p ferrotrace-cli
//! --test golden` writes `outputs.txt` again.
//!
//! A second test records `calltree` now and checks the fast paths against the general ones of the
//! same build: `report --jobs 1` (the events counted as the index pass reads them) against `--jobs 2`
//! (decoded ahead, counted by batches), and the unfiltered replay against the general replayer.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use common::{ferrotrace, ok, record, scratch, testprog, text};

/// The commands whose outputs are held: a name for `outputs.txt`, and the arguments (`%T` the
/// trace, `%O` a fresh output path). An output that is a directory is held file by file.
const COMMANDS: &[(&str, &[&str])] = &[
    ("info", &["info", "-i", "%T"]),
    ("report", &["report", "-i", "%T"]),
    ("report-jobs2", &["report", "--jobs", "2", "-i", "%T"]),
    ("report-threads", &["report", "--threads", "-i", "%T"]),
    ("report-json", &["report", "--json", "-i", "%T"]),
    ("report-sort-calls", &["report", "-s", "calls", "-i", "%T"]),
    ("replay", &["replay", "-i", "%T"]),
    (
        "replay-fields",
        &[
            "replay",
            "-f",
            "time,elapsed,delta,duration,tid",
            "-i",
            "%T",
        ],
    ),
    ("replay-depth", &["replay", "-D", "4", "-i", "%T"]),
    ("graph", &["graph", "-i", "%T"]),
    ("flame", &["flame", "-i", "%T", "-o", "%O"]),
    (
        "dump-uftrace",
        &["dump", "-i", "%T", "--format", "uftrace", "-o", "%O"],
    ),
    (
        "dump-chrome",
        &["dump", "-i", "%T", "--format", "chrome", "-o", "%O"],
    ),
    (
        "dump-perfetto",
        &["dump", "-i", "%T", "--format", "perfetto", "-o", "%O"],
    ),
    (
        "dump-perfetto-uncompressed",
        &[
            "dump",
            "-i",
            "%T",
            "--format",
            "perfetto",
            "--uncompressed",
            "-o",
            "%O",
        ],
    ),
    (
        "dump-folded",
        &["dump", "-i", "%T", "--format", "folded", "-o", "%O"],
    ),
    (
        "dump-parquet",
        &["dump", "-i", "%T", "--format", "parquet", "-o", "%O"],
    ),
    (
        "dump-pprof",
        &["dump", "-i", "%T", "--format", "pprof", "-o", "%O"],
    ),
];

const TRACES: &[&str] = &["calltree", "exit", "lua"];

fn golden() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden")
}

/// FNV-1a, 64 bits: stands for an output in `outputs.txt` (no dependency for a checksum that only
/// has to notice a change).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
    })
}

/// The files of `path` (itself if it is a file), by path relative to it, sorted.
fn files(path: &Path) -> Vec<(String, PathBuf)> {
    if path.is_file() {
        return vec![(String::new(), path.to_path_buf())];
    }
    let mut all = Vec::new();
    let mut dirs = vec![path.to_path_buf()];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).expect("read output dir") {
            let p = e.expect("dir entry").path();
            if p.is_dir() {
                dirs.push(p);
            } else {
                let rel = p.strip_prefix(path).unwrap().to_string_lossy().into_owned();
                all.push((format!("/{rel}"), p));
            }
        }
    }
    all.sort();
    all
}

#[test]
fn every_output_is_what_f61ad72_wrote() {
    let dir = scratch("golden");
    let manifest = golden().join("outputs.txt");
    let mut got = BTreeMap::new();
    for trace in TRACES {
        // Relative to the directory it runs in: the Parquet metadata names the trace as given.
        let t = format!("{trace}.data");
        for (name, args) in COMMANDS {
            let out_path = dir.join(format!("{trace}.{name}"));
            let args: Vec<String> = args
                .iter()
                .map(|a| match *a {
                    "%T" => t.clone(),
                    "%O" => out_path.to_string_lossy().into_owned(),
                    a => a.to_string(),
                })
                .collect();
            let out = ferrotrace()
                .args(&args)
                .current_dir(golden())
                .output()
                .expect("run ferrotrace");
            let stdout = ok(out);
            if !out_path.exists() {
                std::fs::write(&out_path, &stdout).expect("keep stdout");
            }
            for (rel, file) in files(&out_path) {
                let bytes = std::fs::read(&file).expect("read output");
                got.insert(
                    format!("{trace} {name}{rel}"),
                    format!("{} {:016x}", bytes.len(), fnv1a(&bytes)),
                );
            }
        }
    }
    let text_of = |m: &BTreeMap<String, String>| -> String {
        m.iter().map(|(k, v)| format!("{k} {v}\n")).collect()
    };
    if std::env::var_os("FERROTRACE_BLESS").is_some() {
        std::fs::write(&manifest, text_of(&got)).expect("write outputs.txt");
        return;
    }
    let want: BTreeMap<String, String> = std::fs::read_to_string(&manifest)
        .expect("tests/golden/outputs.txt")
        .lines()
        .map(|l| {
            let (k, v) = l.rsplit_once(' ').unwrap();
            let (k, len) = k.rsplit_once(' ').unwrap();
            (k.to_string(), format!("{len} {v}"))
        })
        .collect();
    let differ: Vec<String> = want
        .keys()
        .chain(got.keys())
        .filter(|k| want.get(*k) != got.get(*k))
        .map(|k| {
            format!(
                "{k}: want {}, got {}",
                want.get(k).map_or("nothing", |s| s),
                got.get(k).map_or("nothing", |s| s)
            )
        })
        .collect();
    assert!(
        differ.is_empty(),
        "outputs differ from tests/golden/outputs.txt (the outputs are in {}):\n{}",
        dir.display(),
        differ.join("\n")
    );
}

#[test]
fn fast_paths_write_what_the_general_ones_write_on_a_new_recording() {
    let dir = scratch("golden_live");
    let (out, trace) = record(&dir, &[], &testprog("calltree"), &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let t = trace.to_str().unwrap();
    let run = |args: &[&str]| ok(ferrotrace().args(args).output().expect("run ferrotrace"));
    for extra in [&[][..], &["--json"], &["--threads"]] {
        let one: Vec<&str> = ["report", "--jobs", "1", "-i", t]
            .iter()
            .chain(extra)
            .copied()
            .collect();
        let two: Vec<&str> = ["report", "--jobs", "2", "-i", t]
            .iter()
            .chain(extra)
            .copied()
            .collect();
        let one = run(&one);
        assert!(one.contains("worker_step"), "{one}");
        assert_eq!(
            one,
            run(&two),
            "report {extra:?}: --jobs 1 against --jobs 2"
        );
    }
    // A depth beyond the program's takes the general replayer and hides nothing.
    let plain = run(&["replay", "-i", t]);
    assert!(plain.lines().count() > 1000, "{plain}");
    assert_eq!(plain, run(&["replay", "-D", "100000", "-i", t]));
}
