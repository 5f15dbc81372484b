//! `dump --format folded`: folded stacks (`a;b;c NANOSECONDS`, self time per call path), the input
//! of inferno, flamegraph.pl and speedscope. Same as `ferrotrace flame --folded`.

use std::io::{self, Write};

use super::{stream, Exporter, Options, Samples, Target, Written};

use crate::cct::Cct;
use crate::progress::Progress;
use crate::reader::Trace;
use crate::samples::{RenderError, SampleSet};

/// Writes the folded stacks of `trace`; returns read errors met (each ended one thread early).
pub fn write(
    trace: &Trace,
    out: &mut dyn Write,
    progress: &mut Progress,
) -> io::Result<Vec<String>> {
    let cct = Cct::build(trace, None, progress).map_err(|e| io::Error::other(e.to_string()))?;
    crate::flame::write_folded(&cct, out)?;
    Ok(cct.errors)
}

/// `--format folded`.
pub struct Folded;

impl Exporter for Folded {
    fn name(&self) -> &'static str {
        "folded"
    }

    fn about(&self) -> &'static str {
        "Folded stacks weighted by self time in ns (samples: by sample count)"
    }

    fn writes_samples(&self) -> Samples {
        Samples::WithoutFunctions
    }

    fn write_functions(
        &self,
        trace: &Trace,
        _opts: Options,
        target: Target<'_>,
        progress: &mut Progress,
    ) -> io::Result<Written> {
        write(trace, stream(target)?, progress).map(Written::from)
    }

    fn write_samples(
        &self,
        _trace: &crate::reader::Trace,
        set: &SampleSet,
        _opts: Options,
    ) -> Result<Vec<u8>, RenderError> {
        Ok(crate::flame::samples::folded(set, false).into_bytes())
    }
}
