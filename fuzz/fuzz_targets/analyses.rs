//! Any bytes as a trace file: every analysis either answers or refuses, never panics, hangs or runs out
//! of memory; the fast replayer agrees with the general one on whatever they read.
//!
//! `cargo +nightly fuzz run analyses fuzz/corpus/reader` (see docs/performance.md, Reliability).
#![no_main]

use ferrotrace_analysis::cct::Cct;
use ferrotrace_analysis::info::Summary;
use ferrotrace_analysis::progress::Progress;
use ferrotrace_analysis::replay::{replay, replay_reference, Options};
use ferrotrace_analysis::report::Report;
use ferrotrace_analysis::{dump, samples};
use libfuzzer_sys::fuzz_target;

#[path = "memfile.rs"]
mod memfile;

fuzz_target!(|data: &[u8]| {
    let Some(trace) = memfile::open(data) else {
        return;
    };
    let quiet = || Progress::with_enabled("fuzz", 0, false);
    let _ = Summary::of(&trace);
    let _ = Report::of(&trace);
    let mut fast = Vec::new();
    let fast_ok = replay(&trace, &Options::default(), &mut fast, &mut quiet()).is_ok();
    let mut general = Vec::new();
    let _ = replay_reference(&trace, &Options::default(), &mut general);
    if fast_ok {
        assert_eq!(
            fast, general,
            "the fast replayer agrees with the general one"
        );
    }
    if let Ok(cct) = Cct::build(&trace, None, &mut quiet()) {
        let _ = ferrotrace_analysis::flame::write_svg(&cct, "fuzz", &mut Vec::new());
    }
    let _ = dump::chrome::write(&trace, &mut Vec::new(), &mut quiet());
    let _ = dump::perfetto::write(&trace, Default::default(), &mut Vec::new(), &mut quiet());
    let _ = dump::folded::write(&trace, &mut Vec::new(), &mut quiet());
    if let Ok(Some(set)) = samples::SampleSet::load(&trace) {
        let rep = ferrotrace_analysis::report::samples::report(&set, Default::default());
        let _ = rep.to_string();
        let _ = ferrotrace_analysis::flame::samples::folded(&set, true);
        let _ = ferrotrace_analysis::replay::samples::replay_text(&set, 0, &mut Vec::new());
        let _ = ferrotrace_analysis::graph::samples::graph_text(&set, None);
        let _ = dump::perfetto::write_samples(&set, false, &mut Vec::new());
    }
});
