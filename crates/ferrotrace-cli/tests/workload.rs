//! Every command on a trace of code nobody here wrote: testprogs/workload parses JSON with
//! serde_json, matches a regex and sorts with rayon (crates.io), built with nightly and XRay sleds.

mod common;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;
use std::process::Command;

use common::*;
use ferrotrace_analysis::cct::Cct;
use ferrotrace_analysis::flame::{drawable_lines, render, svg_options, CctFrames};
use ferrotrace_analysis::names::Names;
use ferrotrace_analysis::progress::Progress;
use ferrotrace_analysis::reader::{EventKind, Trace};
use serde_json::Value;

fn p(path: &Path) -> &str {
    path.to_str().unwrap()
}

/// `report --json` rows: name → calls.
fn report_calls(trace: &Path) -> BTreeMap<String, u64> {
    let j: Value = serde_json::from_str(&ok(ft(&["report", "--json", "-i", p(trace)]))).unwrap();
    let mut rows = BTreeMap::new();
    for f in j["functions"].as_array().unwrap() {
        let name = f["name"].as_str().unwrap().to_string();
        let calls = f["calls"].as_u64().unwrap();
        assert!(
            rows.insert(name.clone(), calls).is_none(),
            "two rows named {name}"
        );
    }
    rows
}

/// Entries of each function id, counted from the raw events.
fn entries_per_id(trace: &Trace) -> HashMap<u32, u64> {
    let mut n: HashMap<u32, u64> = HashMap::new();
    for tid in trace.threads().keys() {
        let mut events = trace.thread_events(*tid).unwrap();
        while let Some(e) = events.next_raw() {
            let (_, kind, id) = e.unwrap();
            if kind == EventKind::Entry {
                *n.entry(id).or_default() += 1;
            }
        }
    }
    n
}

/// `nm --demangle=rust`'s name of each function address of `exe` (binutils' own demangler: an
/// oracle independent of ours).
fn binutils_names(exe: &Path) -> HashMap<u64, String> {
    let out = Command::new("nm")
        .args(["--demangle=rust", "--defined-only"])
        .arg(exe)
        .output()
        .expect("nm (binutils)");
    assert!(out.status.success());
    let mut names = HashMap::new();
    for line in text(&out.stdout).lines() {
        let mut parts = line.splitn(3, ' ');
        let (Some(addr), Some(kind), Some(name)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        if kind.eq_ignore_ascii_case("t") {
            if let Ok(a) = u64::from_str_radix(addr, 16) {
                names.entry(a).or_insert_with(|| name.to_string());
            }
        }
    }
    names
}

#[test]
fn report_has_one_row_per_function_and_distinct_rows_for_distinct_functions() {
    let trace_path = workload_trace();
    let rows = report_calls(&trace_path);
    let trace = Trace::open(&trace_path).unwrap();
    let names = Names::of(&trace);
    let entries = entries_per_id(&trace);
    let binutils = binutils_names(&workload());
    // Called functions grouped the way binutils names them (the workload has one version of each
    // crate, so one binutils name is one function) and the way the report names them.
    let mut by_binutils: HashMap<&str, Vec<u32>> = HashMap::new();
    for (&id, f) in trace.functions() {
        if !entries.contains_key(&id) {
            continue;
        }
        let bias = trace
            .modules()
            .iter()
            .find(|m| m.id == f.module)
            .map_or(0, |m| m.bias);
        let name = binutils
            .get(&(f.addr - bias))
            .unwrap_or_else(|| panic!("nm has no function at {:#x}", f.addr - bias));
        by_binutils.entry(name).or_default().push(id);
    }
    let copies: Vec<&Vec<u32>> = by_binutils.values().filter(|ids| ids.len() > 1).collect();
    assert!(
        copies.len() >= 5,
        "the workload should have functions compiled into several crates or codegen units \
         (finish_grow, drop_glue::<Value>, ...): {copies:?}"
    );
    let mut seen_rows = HashSet::new();
    for (binutils_name, ids) in &by_binutils {
        let row_names: HashSet<String> = ids.iter().map(|&id| names.get(id).into()).collect();
        assert_eq!(
            row_names.len(),
            1,
            "{binutils_name}: one function, several rows: {row_names:?}"
        );
        let row = row_names.into_iter().next().unwrap();
        assert!(
            seen_rows.insert(row.clone()),
            "{row}: two functions share a row"
        );
        let calls: u64 = ids.iter().map(|id| entries[id]).sum();
        assert_eq!(rows.get(&row), Some(&calls), "{row} ({} copies)", ids.len());
        // Copies keep the function's own name: nothing tells them apart because nothing differs.
        assert!(!row.contains(" [@0x"), "{row}");
    }
    assert_eq!(seen_rows.len(), rows.len());
    assert!(rows.contains_key("<alloc::raw_vec::RawVecInner>::finish_grow"));
}

#[test]
fn every_command_reads_the_workload_trace() {
    let trace = workload_trace();
    let t = p(&trace);
    let dir = scratch("workload_commands");
    let info = ok(ft(&["info", "-i", t]));
    assert!(info.contains("threads      : 3"), "{info}");
    let rows = report_calls(&trace);
    assert_eq!(rows.get("ft_workload::json_phase"), Some(&1));
    assert_eq!(rows.get("<regex::regex::string::Regex>::new"), Some(&1));

    // replay: every call of every thread, once.
    let replay = ok(ft(&["replay", "-i", t]));
    let calls = |f: &str| {
        replay
            .lines()
            .filter(|l| l.ends_with(&format!("| {f}();")) || l.contains(&format!(" {f}() {{")))
            .count()
    };
    let total: u64 = rows.values().sum();
    let lines = replay
        .lines()
        .filter(|l| l.ends_with("();") || l.ends_with("() {"))
        .count() as u64;
    assert_eq!(lines, total, "replay shows every call once");
    assert_eq!(calls("ft_workload::sort_phase"), 1);

    // graph: the phases under main.
    let graph = ok(ft(&["graph", "-i", t, "ft_workload::main"]));
    for phase in ["json_phase", "regex_phase", "sort_phase"] {
        assert!(
            graph.contains(&format!("(1) ft_workload::{phase}")),
            "{graph}"
        );
    }

    // flame: the SVG and the folded stacks carry the same total time.
    let svg = dir.join("flame.svg");
    ok(ft(&["flame", "-i", t, "-o", p(&svg)]));
    let svg = std::fs::read_to_string(&svg).unwrap();
    let folded = ok(ft(&["flame", "-i", t, "--folded"]));
    let folded_total: u64 = folded
        .lines()
        .map(|l| l.rsplit_once(' ').unwrap().1.parse::<u64>().unwrap())
        .sum();
    assert!(
        svg.contains(&format!("total_samples=\"{folded_total}\"")),
        "{}",
        &svg[..svg.len().min(3000)]
    );
    assert_eq!(folded, ok(ft(&["dump", "-i", t, "--format", "folded"])));

    // uftrace reads the dumped directory: same functions, same calls.
    let ud = dir.join("workload.uftrace");
    ok(ft(&["dump", "-i", t, "--format", "uftrace", "-o", p(&ud)]));
    let out = Command::new("uftrace")
        .args(["report", "-f", "call", "-d"])
        .arg(&ud)
        .output()
        .expect("uftrace installed");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let mut theirs: BTreeMap<String, u64> = BTreeMap::new();
    for line in text(&out.stdout).lines().skip(2) {
        let (calls, name) = line.trim().split_once(char::is_whitespace).unwrap();
        *theirs.entry(name.trim().to_string()).or_default() += calls.parse::<u64>().unwrap();
    }
    assert_eq!(theirs, rows);
    let out = Command::new("uftrace")
        .args(["replay", "-d"])
        .arg(&ud)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout)
            .matches("ft_workload::regex_phase() {")
            .count(),
        1
    );

    // Chrome JSON: balanced begins and ends per thread, every end named.
    let json: Value =
        serde_json::from_str(&ok(ft(&["dump", "-i", t, "--format", "chrome"]))).unwrap();
    let mut open: HashMap<u64, Vec<String>> = HashMap::new();
    let mut begins = 0u64;
    for e in json["traceEvents"].as_array().unwrap() {
        let stack = open.entry(e["tid"].as_u64().unwrap_or(0)).or_default();
        match e["ph"].as_str().unwrap() {
            "B" => {
                begins += 1;
                stack.push(e["name"].as_str().unwrap().to_string());
            }
            "E" => assert_eq!(stack.pop().as_deref(), e["name"].as_str(), "{e}"),
            _ => {}
        }
    }
    assert_eq!(begins, total);
    assert!(open.values().all(Vec::is_empty));

    // Perfetto: protoc decodes it; one slice per call.
    let decoded = perfetto_decoded(&trace, &dir);
    assert_eq!(
        decoded.matches("type: TYPE_SLICE_BEGIN").count() as u64,
        total
    );
    assert_eq!(
        decoded.matches("type: TYPE_SLICE_END").count() as u64,
        total
    );
}

#[test]
fn flame_of_the_pruned_tree_is_the_flame_of_every_line() {
    let trace = Trace::open(workload_trace()).unwrap();
    let cct = Cct::build(&trace, None, &mut Progress::with_enabled("test", 0, false)).unwrap();
    let frames = CctFrames::new(&cct);
    let opts = svg_options("workload", "ns");
    // Every call path with self time (what `flame --folded` writes, with the labels the graph shows).
    let every = drawable_lines(&frames, 0.0);
    let pruned = drawable_lines(&frames, opts.min_width);
    let folded = ok(ft(&["flame", "-i", p(&workload_trace()), "--folded"]));
    assert_eq!(every.lines().count(), folded.lines().count());
    assert!(
        pruned.lines().count() * 2 < every.lines().count(),
        "{} of {} lines",
        pruned.lines().count(),
        every.lines().count()
    );
    let draw = |lines: String| {
        let mut out = Vec::new();
        render(lines, svg_options("workload", "ns"), &mut out).unwrap();
        String::from_utf8(out).unwrap()
    };
    let (every, pruned) = (draw(every), draw(pruned));
    assert!(every.matches("<g>").count() > 100);
    assert_eq!(pruned, every);
}
