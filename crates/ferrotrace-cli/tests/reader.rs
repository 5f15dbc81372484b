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
