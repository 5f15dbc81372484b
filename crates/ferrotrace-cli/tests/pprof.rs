//! `dump --format pprof` read by `go tool pprof` (Debian's golang-go, installed by
//! scripts/setup.sh): a CPU profile, an allocation trace and a function trace of real programs, each
//! compared with what `report` or `mem` say of the same trace.

mod common;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;
use ferrotrace_analysis::reader::Trace;
use serde_json::Value;

fn p(path: &Path) -> &str {
    path.to_str().unwrap()
}

/// `ferrotrace dump --format pprof` of `trace` into `DIR/NAME.pb.gz`.
fn pprof_of(trace: &Path, dir: &Path, name: &str) -> PathBuf {
    let out = dir.join(format!("{name}.pb.gz"));
    ok(ft(&[
        "dump",
        "--format",
        "pprof",
        "-i",
        p(trace),
        "-o",
        p(&out),
    ]));
    let bytes = std::fs::read(&out).unwrap();
    assert_eq!(&bytes[..2], b"\x1f\x8b", "gzipped");
    out
}

/// `go tool pprof ARGS PROFILE`'s output.
fn go_pprof(args: &[&str], profile: &Path) -> String {
    let out = Command::new("go")
        .args(["tool", "pprof"])
        .args(args)
        .arg(profile)
        .output()
        .expect("go tool pprof (golang-go: scripts/setup.sh installs it)");
    assert!(out.status.success(), "{}", text(&out.stderr));
    text(&out.stdout)
}

/// Function → (flat, cum) of `go tool pprof -top`.
type Top = HashMap<String, (u64, Option<u64>)>;

/// `go tool pprof -top` of every function for `sample_index`, values in `unit`: function → (flat,
/// cum), and the functions in pprof's order. A function pprof shows twice (inlined somewhere and
/// not elsewhere: `NAME (inline)`) has its flat summed and its cum left out (it counts samples
/// where both show twice).
fn top(profile: &Path, sample_index: &str, unit: &str) -> (Top, Vec<String>) {
    let out = go_pprof(
        &[
            "-top",
            "-nodecount=1000000",
            "-nodefraction=0",
            "-edgefraction=0",
            &format!("-sample_index={sample_index}"),
            &format!("-unit={unit}"),
        ],
        profile,
    );
    let number = |s: &str| -> u64 {
        s.trim_end_matches(unit)
            .parse()
            .unwrap_or_else(|_| panic!("{s} in {out}"))
    };
    let mut rows = Top::new();
    let mut order = Vec::new();
    for line in out
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("flat"))
        .skip(1)
    {
        let cols: Vec<&str> = line.split_whitespace().collect();
        let name = cols[5..].join(" ");
        // pprof marks functions inlined at some of their addresses; the name is the same.
        let name = name
            .trim_end_matches(" (inline)")
            .trim_end_matches(" (partial-inline)")
            .to_string();
        let (flat, cum) = (number(cols[0]), number(cols[3]));
        match rows.get_mut(&name) {
            Some(r) => *r = (r.0 + flat, None),
            None => {
                order.push(name.clone());
                rows.insert(name, (flat, Some(cum)));
            }
        }
    }
    assert!(!rows.is_empty(), "{out}");
    (rows, order)
}

fn json(args: &[&str]) -> Value {
    serde_json::from_str(&ok(ft(args))).unwrap()
}

#[test]
fn cpu_profile_reads_in_go_pprof_as_report_counts_it() {
    let dir = scratch("pprof_cpu");
    // Samples read one by one from perf_event rings, and counted per stack in the kernel.
    for (name, how) in [("perf", &[][..]), ("bpf", &["--bpf"][..])] {
        let trace = dir.join(format!("{name}.data"));
        let fib = testprog("fib");
        let out = ferrotrace()
            .arg("profile")
            .args(how)
            .args(["-F", "999", "-o", p(&trace), "--", p(&fib), "35"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", text(&out.stderr));
        let profile = pprof_of(&trace, &dir, name);
        cpu_profile_agrees(&trace, &profile, &fib);
    }
}

/// `go tool pprof` on `profile` says what `report` says of `trace`, a profile of `fib`.
fn cpu_profile_agrees(trace: &Path, profile: &Path, fib: &Path) {
    // pprof charges a sample to the innermost function at its address, inlined or not: report's
    // --inline.
    let report = json(&["report", "--json", "--inline", "-i", p(trace)]);
    let functions = report["functions"].as_array().unwrap();
    let (samples, order) = top(profile, "samples", "");
    let (cpu, _) = top(profile, "cpu", "ns");
    assert_eq!(functions[0]["function"], "fib::fib", "{report}");
    assert_eq!(order[0], "fib::fib", "the same function leads");
    let total: u64 = samples.values().map(|r| r.0).sum();
    assert_eq!(total, report["samples"].as_u64().unwrap());
    for f in functions {
        let name = f["function"].as_str().unwrap();
        let (flat, cum) = samples[name];
        assert_eq!(flat, f["self"].as_u64().unwrap(), "{name}: self samples");
        if let Some(cum) = cum {
            assert_eq!(cum, f["total"].as_u64().unwrap(), "{name}: total samples");
        }
        assert_eq!(
            cpu[name].0,
            f["self_weight"].as_u64().unwrap(),
            "{name}: self ns"
        );
    }
    assert_eq!(samples.len(), functions.len(), "no function more or less");

    // The program's mapping carries its path and build id, and comes first (pprof's main binary).
    let t = Trace::open(trace).unwrap();
    let module = t.modules().iter().find(|m| m.path == p(fib)).unwrap();
    let build_id: String = module.build_id.iter().map(|b| format!("{b:02x}")).collect();
    assert_eq!(build_id.len(), 40);
    let raw = go_pprof(&["-raw"], profile);
    let mappings = raw.split("\nMappings\n").nth(1).unwrap();
    assert!(
        mappings.starts_with("1: ")
            && mappings
                .lines()
                .next()
                .unwrap()
                .contains(&format!("{} {build_id}", p(fib))),
        "{mappings}"
    );
    assert!(go_pprof(&["-top"], profile).contains(&format!("Build ID: {build_id}")));
    // Every location of a mapping lies within it (`ID: START/LIMIT/OFFSET …`; `ID: ADDRESS M=ID …`).
    let hex = |s: &str| u64::from_str_radix(s.trim_start_matches("0x"), 16).unwrap();
    let ranges: HashMap<String, (u64, u64)> = mappings
        .lines()
        .filter_map(|l| {
            let (id, rest) = l.split_once(": ")?;
            let mut bounds = rest.split_whitespace().next()?.split('/');
            Some((id.to_string(), (hex(bounds.next()?), hex(bounds.next()?))))
        })
        .collect();
    let locations = raw
        .split("\nLocations\n")
        .nth(1)
        .unwrap()
        .split("\nMappings\n")
        .next()
        .unwrap();
    let mut checked = 0;
    for l in locations.lines() {
        let words: Vec<&str> = l.split_whitespace().collect();
        if let (Some(address), Some(m)) = (
            words.get(1),
            words.get(2).and_then(|w| w.strip_prefix("M=")),
        ) {
            let (start, limit) = ranges[m];
            let a = hex(address);
            assert!(
                start <= a && a < limit,
                "{l}: outside {start:#x}..{limit:#x}"
            );
            checked += 1;
        }
    }
    assert!(checked > 0, "{locations}");
}

/// `mem --json`'s stacks of `list` as (function names leaf first, plumbing included; `[no stack]`
/// without a stack, as pprof shows it) → (blocks, bytes), summed over stacks that name the same
/// functions.
fn mem_stacks(list: &Value) -> HashMap<Vec<String>, (u64, u64)> {
    let mut m: HashMap<Vec<String>, (u64, u64)> = HashMap::new();
    for g in list.as_array().unwrap() {
        let mut names: Vec<String> = g["stack"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f["function"].as_str().unwrap().to_string())
            .collect();
        if names.is_empty() {
            names.push("[no stack]".into());
        }
        let e = m.entry(names).or_default();
        e.0 += g["blocks"].as_u64().unwrap();
        e.1 += g["bytes"].as_u64().unwrap();
    }
    m
}

/// `go tool pprof -raw`'s samples as (function names leaf first, inlined ones included) → the
/// sample values, summed over samples that name the same functions; and the value types.
fn raw_stacks(profile: &Path) -> (HashMap<Vec<String>, Vec<u64>>, Vec<String>) {
    let raw = go_pprof(&["-raw"], profile);
    let (head, rest) = raw.split_once("\nLocations\n").unwrap();
    let locations_text = rest.split("\nMappings\n").next().unwrap();
    // `ID: ADDRESS M=MAPPING FUNCTION FILE:LINE s=START`, then one indented line per further
    // (outer) frame at the same address.
    let mut locations: HashMap<u64, Vec<String>> = HashMap::new();
    let mut current = 0;
    for line in locations_text.lines() {
        let t = line.trim_start();
        let frame = match t.split_once(": ") {
            Some((id, rest)) if id.parse::<u64>().is_ok() => {
                current = id.parse().unwrap();
                // The address, then the mapping when there is one.
                let rest = rest.split_once(' ').map_or("", |r| r.1);
                rest.strip_prefix("M=")
                    .and_then(|r| r.split_once(' '))
                    .map_or(rest, |r| r.1)
            }
            _ => t,
        };
        // NAME FILE:LINE s=START (the file has no spaces; the name may).
        let name = frame.rsplitn(3, ' ').nth(2).unwrap_or(frame);
        locations.entry(current).or_default().push(name.to_string());
    }
    let samples = head.split_once("Samples:\n").unwrap().1;
    let mut lines = samples.lines();
    let types: Vec<String> = lines
        .next()
        .unwrap()
        .split_whitespace()
        .map(|t| t.trim_end_matches("[dflt]").to_string())
        .collect();
    let mut m: HashMap<Vec<String>, Vec<u64>> = HashMap::new();
    for line in lines {
        let (values, ids) = line.split_once(':').unwrap();
        let names: Vec<String> = ids
            .split_whitespace()
            .flat_map(|id| locations[&id.parse::<u64>().unwrap()].clone())
            .collect();
        let e = m.entry(names).or_insert_with(|| vec![0; types.len()]);
        for (i, v) in values.split_whitespace().enumerate() {
            e[i] += v.parse::<u64>().unwrap();
        }
    }
    (m, types)
}

#[test]
fn allocation_trace_reads_in_go_pprof_as_mem_counts_it() {
    let dir = scratch("pprof_mem");
    let exe = build_c(
        &dir,
        "gcc",
        "allocs.c",
        "allocs",
        &["-O1", "-g", "-fno-omit-frame-pointer", "-pthread"],
    );
    let (out, trace) = record(&dir, &["--alloc"], &exe, &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let profile = pprof_of(&trace, &dir, "m");
    let mem = json(&["mem", "--json", "-i", p(&trace)]);
    let (stacks, types) = raw_stacks(&profile);
    assert_eq!(
        types,
        [
            "alloc_objects/count",
            "alloc_space/bytes",
            "inuse_objects/count",
            "inuse_space/bytes"
        ]
    );
    let column = |i: usize| -> HashMap<Vec<String>, (u64, u64)> {
        stacks
            .iter()
            .filter(|(_, v)| v[i] + v[i + 1] > 0)
            .map(|(k, v)| (k.clone(), (v[i], v[i + 1])))
            .collect()
    };
    assert_eq!(
        column(0),
        mem_stacks(&mem["allocated"]["stacks"]),
        "allocations by stack"
    );
    assert_eq!(
        column(2),
        mem_stacks(&mem["leaked"]["stacks"]),
        "leaks by stack"
    );
    // One mapping per file, the program's first (pprof's main binary), with its build id.
    let raw = go_pprof(&["-raw"], &profile);
    let mappings: Vec<&str> = raw.split("\nMappings\n").nth(1).unwrap().lines().collect();
    let files: Vec<&str> = mappings
        .iter()
        .filter_map(|l| l.split_whitespace().nth(2))
        .collect();
    let mut distinct = files.clone();
    distinct.sort_unstable();
    distinct.dedup();
    assert_eq!(distinct.len(), files.len(), "{mappings:?}");
    assert_eq!(files[0], p(&exe), "{mappings:?}");
    let bytes: u64 = column(0).values().map(|v| v.1).sum();
    assert_eq!(bytes, mem["bytes"].as_u64().unwrap());
    // allocs.c's leak_here leaks three blocks of 1000 bytes.
    let (inuse, order) = top(&profile, "inuse_space", "B");
    assert_eq!(order[0], "leak_here");
    assert_eq!(inuse["leak_here"], (3000, Some(3000)));
    let (alloc, order) = top(&profile, "alloc_space", "B");
    assert_eq!(
        order[0], "build_peak",
        "its 10 blocks of 100,000 bytes lead"
    );
    assert_eq!(alloc["build_peak"].0, 1_000_000);
}

#[test]
fn function_trace_reads_in_go_pprof_as_report_counts_it() {
    let dir = scratch("pprof_functions");
    let (out, trace) = record(&dir, &[], &testprog("fib"), &["20"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let profile = pprof_of(&trace, &dir, "f");
    let report = json(&["report", "--json", "-i", p(&trace)]);
    let functions = report["functions"].as_array().unwrap();
    let (calls, _) = top(&profile, "calls", "");
    let (wall, order) = top(&profile, "wall", "ns");
    let by_self = functions
        .iter()
        .max_by_key(|f| f["self_ns"].as_u64().unwrap())
        .unwrap();
    assert_eq!(order[0], by_self["name"].as_str().unwrap());
    let fib = functions.iter().find(|f| f["name"] == "fib::fib").unwrap();
    assert_eq!(fib["calls"], 21891, "fib(20) calls itself 21,891 times");
    for f in functions {
        let name = f["name"].as_str().unwrap();
        let n = f["calls"].as_u64().unwrap();
        assert_eq!(calls[name].0, n, "{name}: calls");
        // report sums ticks and converts once; the calling-context tree converts each call: they
        // differ by less than a nanosecond per call.
        let (ours, theirs) = (wall[name].0, f["self_ns"].as_u64().unwrap());
        assert!(
            ours.abs_diff(theirs) <= n,
            "{name}: self {ours} ns against {theirs}"
        );
    }
    assert_eq!(calls.len(), functions.len());
}

#[test]
fn bad_input_and_unwritable_output_get_one_line() {
    let dir = scratch("pprof_bad");
    let not_a_trace = dir.join("not-a-trace");
    std::fs::write(&not_a_trace, b"hello").unwrap();
    let out = ft(&[
        "dump",
        "--format",
        "pprof",
        "-i",
        p(&not_a_trace),
        "-o",
        p(&dir.join("x.pb.gz")),
    ]);
    assert!(!out.status.success());
    assert_eq!(
        text(&out.stderr).lines().count(),
        1,
        "{}",
        text(&out.stderr)
    );

    let (rec, trace) = record(&dir, &[], &testprog("fib"), &["5"]);
    assert!(rec.status.success(), "{}", text(&rec.stderr));
    let out = ft(&[
        "dump",
        "--format",
        "pprof",
        "-i",
        p(&trace),
        "-o",
        "/nonexistent/dir/x.pb.gz",
    ]);
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("/nonexistent/dir/x.pb.gz"), "{err}");
}

#[test]
fn profile_to_a_pb_gz_writes_the_trace_and_its_pprof_profile() {
    let dir = scratch("pprof_profile_o");
    let profile = dir.join("x.pb.gz");
    let out = ferrotrace()
        .args(["profile", "-F", "999", "-o", p(&profile), "--"])
        .arg(testprog("fib"))
        .arg("33")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let trace = dir.join("x.data");
    assert!(Trace::open(&trace).is_ok(), "the trace beside it");
    let dumped = pprof_of(&trace, &dir, "dumped");
    assert_eq!(
        std::fs::read(&profile).unwrap(),
        std::fs::read(&dumped).unwrap(),
        "the profile dump --format pprof writes"
    );
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&profile).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    let (_, order) = top(&profile, "samples", "");
    assert_eq!(order[0], "fib::fib");
}

/// A sample without a stack is charged to `[no stack]`, as `report` charges it (pprof leaves a
/// sample without locations out of every view).
#[test]
fn samples_without_a_stack_are_counted() {
    use ferrotrace_core::builder::TraceBuilder;
    use ferrotrace_core::schema::{source, Mode, SamplerKind};
    let dir = scratch("pprof_no_stack");
    let mut b = TraceBuilder::new(Vec::new(), "/bin/d", source::SAMPLES, Mode::Lossless).unwrap();
    b.thread(1, "main").unwrap();
    let fib = testprog("fib");
    b.module(1, p(&fib), b"").unwrap();
    let cpu = b.sampler(SamplerKind::CpuClock, "cpu-clock");
    let leaf = b.stack(None, 1, 0x10);
    b.sample(1, 1_000, Some(leaf), cpu, 1_000).unwrap();
    b.sample(1, 2_000, None, cpu, 1_000).unwrap();
    b.sample(1, 3_000, None, cpu, 1_000).unwrap();
    let trace = dir.join("t.data");
    std::fs::write(&trace, b.finish().unwrap()).unwrap();
    let profile = pprof_of(&trace, &dir, "t");
    let (samples, _) = top(&profile, "samples", "");
    assert_eq!(samples["[no stack]"], (2, Some(2)));
    assert_eq!(samples.values().map(|r| r.0).sum::<u64>(), 3);
}
