//! `usedeps N`: uses `regex_lite` and `crossbeam_queue` itself, N times each (`deps_workload.rs`), and
//! prints `matches=N`. Traced through LD_PRELOAD.
#[path = "../deps_workload.rs"]
mod deps_workload;

fn main() {
    let matches = deps_workload::run(deps_workload::count_arg());
    println!("matches={matches}");
}
