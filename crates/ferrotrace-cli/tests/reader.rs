//! The reader on real traces at the edges of what a system allows.

mod common;

use std::process::Command;

use common::{record, scratch, testprog, text};

/// A trace of 1,200 threads read with 64 descriptors allowed: the reader keeps one descriptor for the
/// whole file (positional reads), not one per thread, so replay and dumps see every event.
#[test]
fn a_trace_of_more_threads_than_descriptors_reads_whole() {
    let dir = scratch("reader_many_threads");
    // 150 waves of 8 threads, each calling `tagged` 50 times.
    let (out, trace) = record(&dir, &["--chunk-size", "4K"], &testprog("waves"), &["150"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let ft = env!("CARGO_BIN_EXE_ferrotrace");
    let under_limit = |cmd: &str| {
        let out = Command::new("sh")
            .arg("-c")
            .arg(format!("ulimit -n 64 && {cmd}"))
            .output()
            .unwrap();
        assert!(out.status.success(), "{cmd}: {}", text(&out.stderr));
        text(&out.stdout)
    };
    let t = trace.display();
    let replay = under_limit(&format!("{ft} replay -i {t}"));
    assert_eq!(replay.matches("waves::tagged();").count(), 150 * 8 * 50);
    let folded = under_limit(&format!("{ft} dump --format folded -i {t}"));
    let tagged_lines = folded
        .lines()
        .filter(|l| l.contains("waves::tagged "))
        .count();
    assert!(tagged_lines >= 1, "{folded}");
    let report = under_limit(&format!("{ft} report -i {t} -s calls"));
    let row = report
        .lines()
        .find(|l| l.ends_with("waves::tagged"))
        .unwrap_or_else(|| panic!("{report}"));
    assert!(row.split_whitespace().any(|c| c == "60000"), "{row}");
}

/// Peak RSS in KiB of `ferrotrace ARGS` (stdout to /dev/null), by `/usr/bin/time`.
fn peak_rss_kib(args: &[&str]) -> u64 {
    let out = Command::new("/usr/bin/time")
        .args(["-f", "%M"])
        .arg(env!("CARGO_BIN_EXE_ferrotrace"))
        .args(args)
        .stdout(std::process::Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success(), "{args:?}: {}", text(&out.stderr));
    let err = text(&out.stderr);
    err.lines()
        .last()
        .unwrap()
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("{err}"))
}

/// A trace of 5,000 short-lived threads (625 waves of 8) is merged in time order holding a decoded
/// chunk for the threads the merge has reached and not finished, not for all 5,000 at once, and no
/// stream copies the chunk index (issue 20.13: `replay` took 98 MB here; now about 14 MB in a debug
/// build, 9 MB released).
#[test]
fn merging_thousands_of_short_lived_threads_holds_the_live_ones() {
    let dir = scratch("reader_5000_threads");
    let (out, trace) = record(&dir, &[], &testprog("waves"), &["625"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let t = trace.to_str().unwrap();
    for cmd in [
        &["replay"][..],
        &["dump", "--format", "chrome", "-o", "/dev/null"],
    ] {
        let kib = peak_rss_kib(&[cmd, &["-i", t]].concat());
        assert!(kib < 32 * 1024, "{cmd:?}: peak RSS {kib} KiB");
    }
}
