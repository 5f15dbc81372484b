//! `tp_usedeps N`: `usedeps` in a program that links the ferrotrace runtime (which uses `regex_lite` and
//! `crossbeam_queue` itself), with a tracepoint `done(matches)` at the end. Prints `matches=N`.
#[path = "../../../src/deps_workload.rs"]
mod deps_workload;

ferrotrace::tracepoint!(done, matches: u64);

fn main() {
    let matches = deps_workload::run(deps_workload::count_arg());
    done(matches);
    println!("matches={matches}");
}
