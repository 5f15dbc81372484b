//! Which sections the analysis commands print for a trace. `report`, `replay` and `graph` print one
//! for its samples, when it holds any, then one for its function calls, when it holds any or when it
//! holds no samples (whose empty table then says there is nothing); a blank line between the two.
//! `info` summarises everything and adds the samples' lines; `dump` has its own rule for each format
//! ([`crate::dump::plan`]); `flame` draws one of them ([`crate::flame::Input`]).

use crate::reader::{ReadError, Trace};
use crate::samples::SampleSet;

/// The sections of a trace ([`Sections::of`]).
#[derive(Debug)]
pub struct Sections {
    /// The trace's samples, when it holds any: their section comes first.
    pub samples: Option<SampleSet>,
    /// True when the section of function calls follows.
    pub functions: bool,
}

impl Sections {
    /// The sections of `trace` (its samples loaded).
    pub fn of(trace: &Trace) -> Result<Sections, ReadError> {
        let samples = SampleSet::load(trace)?;
        let functions = samples.is_none() || trace.has_function_events();
        Ok(Sections { samples, functions })
    }

    /// True when both sections are printed: a blank line goes between them.
    pub fn both(&self) -> bool {
        self.samples.is_some() && self.functions
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferrotrace_core::builder::TraceBuilder;
    use ferrotrace_core::record::EventKind;
    use ferrotrace_core::schema::{source, Mode, SamplerKind};

    /// A trace of function calls (`functions`), samples (`samples`), both or neither.
    fn trace(name: &str, functions: bool, samples: bool) -> Trace {
        let sources =
            if functions { source::XRAY } else { 0 } | if samples { source::SAMPLES } else { 0 };
        let mut b = TraceBuilder::new(Vec::new(), "/bin/s", sources, Mode::Lossless).unwrap();
        b.thread(1, "main").unwrap();
        if functions {
            b.function(1, 0x1000, 16, "s::f").unwrap();
            b.event(1, 1_000, EventKind::Entry, 1).unwrap();
            b.event(1, 2_000, EventKind::Exit, 1).unwrap();
        }
        if samples {
            let cpu = b.sampler(SamplerKind::CpuClock, "cpu-clock");
            b.sample(1, 1_500, None, cpu, 1_000).unwrap();
        }
        let path =
            std::env::temp_dir().join(format!("ft-sections-{}-{name}.data", std::process::id()));
        std::fs::write(&path, b.finish().unwrap()).unwrap();
        let t = Trace::open(&path).unwrap();
        let _ = std::fs::remove_file(&path);
        t
    }

    #[test]
    fn samples_come_first_and_function_calls_unless_only_samples() {
        for (functions, samples, want_samples, want_functions) in [
            (true, false, false, true),
            (false, true, true, false),
            (true, true, true, true),
            // Nothing at all: the (empty) function section says so.
            (false, false, false, true),
        ] {
            let t = trace(&format!("{functions}-{samples}"), functions, samples);
            let s = Sections::of(&t).unwrap();
            assert_eq!(s.samples.is_some(), want_samples, "{functions} {samples}");
            assert_eq!(s.functions, want_functions, "{functions} {samples}");
            assert_eq!(s.both(), want_samples && want_functions);
        }
    }

    #[test]
    fn flame_draws_samples_when_asked_or_when_alone() {
        use crate::flame::Input;
        let functions = trace("flame-functions", true, false);
        let samples = trace("flame-samples", false, true);
        let both = trace("flame-both", true, true);
        assert!(matches!(Input::of(&functions, false), Ok(Input::Functions)));
        assert!(matches!(Input::of(&samples, false), Ok(Input::Samples(..))));
        assert!(matches!(Input::of(&both, false), Ok(Input::Functions)));
        assert!(matches!(Input::of(&both, true), Ok(Input::Samples(..))));
        let err = Input::of(&functions, true).err().unwrap().to_string();
        assert_eq!(
            err,
            format!(
                "{}: --samples: the trace holds no samples",
                functions.path().display()
            )
        );
    }
}
