//! One event model: a trace that holds function calls, tracepoints and samples together is answered by
//! every command, and a trace that is not what was written (chunks dropped, repeated, moved, re-kinded,
//! appended after the end) says so in every command, with exit status 1.
//!
//! The traces are written by `ferrotrace_core::builder` (the same chunks every recorder writes); the
//! sample stacks point into the system's real libc, so the one symbolizer names them from its symbol
//! table and its separate debug file.

mod common;

use std::path::{Path, PathBuf};

use common::{ft, ok, perfetto_decoded, scratch, text, trace_chunks};
use ferrotrace_core::builder::TraceBuilder;
use ferrotrace_core::format::{ChunkHeader, CHUNK_HEADER_LEN};
use ferrotrace_core::record::EventKind;
use ferrotrace_core::schema::{source, Mode, SamplerKind};
use object::{Object, ObjectSymbol};

const LIBC: &str = "/lib/x86_64-linux-gnu/libc.so.6";

/// libc's build-id and the addresses of two of its exported functions.
fn libc_facts() -> (Vec<u8>, u64, u64) {
    let data = std::fs::read(LIBC).expect("glibc");
    let obj = object::File::parse(&*data).unwrap();
    let id = obj.build_id().unwrap().unwrap().to_vec();
    let addr = |name: &str| {
        obj.dynamic_symbols()
            .find(|s| s.name() == Ok(name))
            .map(|s| s.address())
            .unwrap_or_else(|| panic!("{name} in libc"))
    };
    (id, addr("qsort"), addr("malloc"))
}

/// A trace of one thread: `demo::main` calls `demo::work` `calls` times, each firing tracepoint
/// `demo::step(i)`, while a 1 kHz sampler catches it `samples` times in malloc called from qsort.
fn mixed_trace(dir: &Path, calls: u32, samples: u32) -> PathBuf {
    let (build_id, qsort, malloc) = libc_facts();
    let path = dir.join("mixed.data");
    let file = std::fs::File::create(&path).unwrap();
    let mut b = TraceBuilder::new(
        file,
        "/usr/bin/demo",
        source::XRAY | source::TRACEPOINTS | source::SAMPLES,
        Mode::Lossless,
    )
    .unwrap();
    b.module(1, LIBC, &build_id).unwrap();
    b.function(1, 0x1000, 64, "_RNvCs1_4demo4main").unwrap();
    b.function(2, 0x2000, 64, "_RNvCs1_4demo4work").unwrap();
    b.tracepoint(1, "demo::step", "i:u32", "step {i}").unwrap();
    b.thread(42, "main").unwrap();
    let cpu = b.sampler(SamplerKind::CpuClock, "cpu-clock");
    let outer = b.stack(None, 1, qsort + 4);
    let leaf = b.stack(Some(outer), 1, malloc + 4);
    let mut t = 1_000_000u64;
    b.event(42, t, EventKind::Entry, 1).unwrap();
    for i in 0..calls {
        t += 1_000;
        b.event(42, t, EventKind::Entry, 2).unwrap();
        b.tracepoint_hit(42, t + 10, 1, &i.to_le_bytes()).unwrap();
        if i < samples {
            b.sample(42, t + 20, Some(leaf), cpu, 1_000_000).unwrap();
        }
        b.event(42, t + 500, EventKind::Exit, 2).unwrap();
    }
    b.event(42, t + 1_000, EventKind::Exit, 1).unwrap();
    b.finish().unwrap();
    path
}

fn p(path: &Path) -> &str {
    path.to_str().unwrap()
}

#[test]
fn every_command_answers_a_trace_of_calls_tracepoints_and_samples() {
    let dir = scratch("model_mixed");
    let trace = mixed_trace(&dir, 300, 40);
    let t = p(&trace);

    let info = ok(ft(&["info", "-i", t]));
    assert!(
        info.contains("recorded by  : xray, tracepoints, samples"),
        "{info}"
    );
    assert!(info.contains("functions    : 2 traced"), "{info}");
    assert!(info.contains("40 samples, 0 lost"), "{info}");

    let report = ok(ft(&["report", "-i", t]));
    // Samples: self time in malloc (the function containing the sampled address), total in qsort.
    let malloc_row = report
        .lines()
        .find(|l| l.ends_with(" malloc"))
        .unwrap_or_else(|| panic!("malloc in\n{report}"));
    assert!(malloc_row.trim_start().starts_with("40 "), "{malloc_row}");
    assert!(report.lines().any(|l| l.ends_with(" qsort")), "{report}");
    // Functions: exact call counts.
    let work = report
        .lines()
        .find(|l| l.ends_with("demo::work"))
        .unwrap_or_else(|| panic!("demo::work in\n{report}"));
    assert!(work.split_whitespace().any(|c| c == "300"), "{work}");

    let replay = ok(ft(&["replay", "-i", t]));
    assert_eq!(
        replay.matches("malloc <- qsort").count(),
        40,
        "each sample with its stack:\n{}",
        &replay[..2000.min(replay.len())]
    );
    assert_eq!(replay.matches("demo::work() {").count(), 300);
    assert!(replay.contains("/* demo::step step 7 */"));

    let graph = ok(ft(&["graph", "-i", t, "qsort"]));
    assert!(
        graph.contains("qsort") && graph.contains("malloc"),
        "{graph}"
    );
    let graph = ok(ft(&["graph", "-i", t, "demo::main"]));
    assert!(graph.contains("demo::work"), "{graph}");

    let svg = dir.join("f.svg");
    ok(ft(&["flame", "-i", t, "-o", p(&svg)]));
    assert!(std::fs::read_to_string(&svg)
        .unwrap()
        .contains("demo::work"));
    ok(ft(&["flame", "-i", t, "--samples", "-o", p(&svg)]));
    assert!(std::fs::read_to_string(&svg).unwrap().contains("malloc"));

    let folded = ok(ft(&["dump", "-i", t, "--format", "folded"]));
    assert!(folded.contains("demo::main;demo::work "), "{folded}");
    let ff = ok(ft(&["dump", "-i", t, "--format", "firefox"]));
    assert!(ff.contains("malloc") && ff.contains("qsort"));
    let decoded = perfetto_decoded(Path::new(t), &dir);
    assert!(decoded.contains("demo::work"), "function slices");
    let chrome = ok(ft(&["dump", "-i", t, "--format", "chrome"]));
    assert!(
        chrome.matches("\"demo::work\"").count() >= 300,
        "every call"
    );
    let ud = dir.join("u");
    ok(ft(&["dump", "-i", t, "--format", "uftrace", "-o", p(&ud)]));
    assert!(ud.join("info").is_file());
}

fn kind_of(b: &[u8], c: (usize, usize, usize)) -> u32 {
    u32::from_le_bytes(b[c.0..c.0 + 4].try_into().unwrap())
}

/// Rewrites a chunk's header with a valid checksum: damage a checksum cannot see.
fn reheader(b: &mut [u8], c: (usize, usize, usize), kind: u32, seq: Option<u32>) {
    let mut h = ChunkHeader::decode(&b[c.0..c.0 + CHUNK_HEADER_LEN].try_into().unwrap());
    h.kind = kind;
    if let Some(s) = seq {
        h.seq = s;
    }
    h.crc = h.checksum(&b[c.1..c.1 + c.2]);
    b[c.0..c.0 + CHUNK_HEADER_LEN].copy_from_slice(&h.encode());
}

#[test]
fn a_trace_that_is_not_what_was_written_says_so_in_every_command() {
    let dir = scratch("model_damaged");
    // Enough events for several Events chunks (4096 events each).
    let orig = std::fs::read(mixed_trace(&dir, 3000, 10)).unwrap();
    let cs = trace_chunks(&orig);
    let events: Vec<_> = cs
        .iter()
        .copied()
        .filter(|&c| kind_of(&orig, c) == 6)
        .collect();
    assert!(events.len() >= 2, "{} events chunks", events.len());
    let (e0, e1) = (events[0], events[1]);
    let slice = |c: (usize, usize, usize)| orig[c.0..c.1 + c.2].to_vec();
    let without = |c: (usize, usize, usize)| [&orig[..c.0], &orig[c.1 + c.2..]].concat();

    let mut variants: Vec<(&str, Vec<u8>, &str)> = Vec::new();
    variants.push(("dropped", without(e0), "missing"));
    // The same chunk twice (a copy appended in place: same number).
    let mut dup = orig[..e0.1 + e0.2].to_vec();
    dup.extend(slice(e0));
    dup.extend(&orig[e0.1 + e0.2..]);
    variants.push(("duplicated", dup, "repeats or is out of place"));
    // Two chunks swapped.
    let mut swapped = orig[..e0.0].to_vec();
    swapped.extend(slice(e1));
    swapped.extend(&orig[e0.1 + e0.2..e1.0]);
    swapped.extend(slice(e0));
    swapped.extend(&orig[e1.1 + e1.2..]);
    variants.push(("reordered", swapped, "out of place"));
    // A chunk of events given an unknown kind, with a checksum that matches.
    let mut rekinded = orig.clone();
    reheader(&mut rekinded, e0, 77, None);
    variants.push(("re-kinded", rekinded, "the End chunk counts"));
    // A copy of an events chunk appended after the End chunk, numbered to follow it.
    let mut after = orig.clone();
    let mut extra = slice(e0);
    reheader(
        &mut extra,
        (0, CHUNK_HEADER_LEN, e0.2),
        6,
        Some(cs.len() as u32),
    );
    after.extend(extra);
    variants.push(("after End", after, "follow the End chunk"));

    for (what, bytes, says) in variants {
        let path = dir.join(format!("{what}.data"));
        std::fs::write(&path, &bytes).unwrap();
        for cmd in [
            &["info"][..],
            &["report"],
            &["replay"],
            &["graph"],
            &["dump", "--format", "folded"],
        ] {
            let out = ft(&[cmd, &["-i", p(&path)]].concat());
            let err = text(&out.stderr);
            assert_eq!(
                out.status.code(),
                Some(1),
                "{what}: `{}` must fail with 1: {err}",
                cmd.join(" ")
            );
            assert!(
                err.contains(says),
                "{what}: `{}` says {says:?}: {err}",
                cmd.join(" ")
            );
        }
    }
    // The original is clean in every command.
    let path = dir.join("orig.data");
    std::fs::write(&path, &orig).unwrap();
    for cmd in [&["info"][..], &["report"], &["replay"]] {
        let out = ft(&[cmd, &["-i", p(&path)]].concat());
        assert!(out.status.success(), "{}", text(&out.stderr));
        assert!(
            !text(&out.stderr).contains("warning"),
            "{}",
            text(&out.stderr)
        );
    }
}

#[test]
fn a_sample_report_compared_with_a_damaged_trace_says_so_in_its_status() {
    let dir = scratch("model_sample_diff");
    let (build_id, qsort, malloc) = libc_facts();
    let write = |name: &str| {
        let path = dir.join(name);
        let mut b = TraceBuilder::new(
            std::fs::File::create(&path).unwrap(),
            "/usr/bin/demo",
            source::SAMPLES,
            Mode::Lossless,
        )
        .unwrap();
        b.module(1, LIBC, &build_id).unwrap();
        b.thread(42, "main").unwrap();
        let cpu = b.sampler(SamplerKind::CpuClock, "cpu-clock");
        let outer = b.stack(None, 1, qsort + 4);
        let leaf = b.stack(Some(outer), 1, malloc + 4);
        for i in 0..200u64 {
            b.sample(42, 1_000_000 + i * 1_000, Some(leaf), cpu, 1_000_000)
                .unwrap();
        }
        b.finish().unwrap();
        path
    };
    let (base, other) = (write("base.data"), write("other.data"));
    let out = ft(&["report", "-i", p(&base), "--diff", p(&other)]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    // The other trace cut short: the comparison is still printed, and the status says it is partial.
    let bytes = std::fs::read(&other).unwrap();
    std::fs::write(&other, &bytes[..bytes.len() - 40]).unwrap();
    let out = ft(&["report", "-i", p(&base), "--diff", p(&other)]);
    assert!(
        text(&out.stdout).contains("malloc"),
        "{}",
        text(&out.stdout)
    );
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains(&format!("{}: truncated", other.display())),
        "{}",
        text(&out.stderr)
    );
}

/// A frame of 0 ns (entry and exit in one clock tick) shows no duration, as uftrace shows it
/// (`__print_time_unit` prints blanks for 0): our replay and uftrace's replay of our dump agree byte
/// for byte, leaf and non-leaf frames alike (issue 20.20 thought uftrace printed `0.000 us`).
#[test]
fn a_frame_of_zero_nanoseconds_replays_as_uftrace_shows_it() {
    let dir = scratch("model_zero");
    let path = dir.join("zero.data");
    let mut b = TraceBuilder::new(
        std::fs::File::create(&path).unwrap(),
        "/usr/bin/demo",
        source::XRAY,
        Mode::Lossless,
    )
    .unwrap();
    b.function(1, 0x1000, 64, "_RNvCs1_4demo4main").unwrap();
    b.function(2, 0x2000, 64, "_RNvCs1_4demo4work").unwrap();
    b.thread(42, "main").unwrap();
    for (t, kind, id) in [
        (1_000_000, EventKind::Entry, 1),
        (1_000_500, EventKind::Entry, 2),
        (1_000_500, EventKind::Exit, 2),
        (1_002_000, EventKind::Entry, 2),
        (1_002_000, EventKind::Entry, 1),
        (1_002_000, EventKind::Exit, 1),
        (1_002_000, EventKind::Exit, 2),
        (1_003_000, EventKind::Exit, 1),
    ] {
        b.event(42, t, kind, id).unwrap();
    }
    b.finish().unwrap();
    let ours = ok(ft(&["replay", "-i", p(&path)]));
    assert!(
        ours.contains("\n            [    42] |   demo::work();\n"),
        "{ours}"
    );
    let ud = dir.join("u");
    ok(ft(&[
        "dump",
        "-i",
        p(&path),
        "--format",
        "uftrace",
        "-o",
        p(&ud),
    ]));
    let theirs = std::process::Command::new("uftrace")
        .args(["replay", "-d"])
        .arg(&ud)
        .output()
        .expect("uftrace");
    assert!(theirs.status.success(), "{}", text(&theirs.stderr));
    assert_eq!(text(&theirs.stdout), ours);
}
