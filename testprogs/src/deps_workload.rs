//! The workload of `usedeps` and `tp_usedeps`: a program's own use of `regex_lite` and
//! `crossbeam_queue`, two of the crates the ferrotrace runtime uses too.
use std::hint::black_box;

use crossbeam_queue::ArrayQueue;
use regex_lite::Regex;

/// Matches N strings against a regex (`Regex::is_match`) and passes them through an `ArrayQueue`
/// (`ArrayQueue::force_push`); returns the matches. Both are called through function pointers, so that
/// each call is a call of the library's function (not inlined into this one): the trace must show N of
/// each.
pub fn run(n: u64) -> u64 {
    let re = Regex::new(r"^file\d+$").expect("valid regex");
    let queue = ArrayQueue::new(4);
    let is_match: fn(&Regex, &str) -> bool = black_box(Regex::is_match);
    let force_push: fn(&ArrayQueue<String>, String) -> Option<String> =
        black_box(ArrayQueue::force_push);
    let mut matches = 0;
    for i in 0..n {
        let name = format!("file{i}");
        if is_match(&re, &name) {
            matches += 1;
        }
        black_box(force_push(&queue, name));
    }
    matches
}

/// The N of the command line (default 10).
pub fn count_arg() -> u64 {
    std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(10)
}
