//! `dump --format folded`: folded stacks (`a;b;c NANOSECONDS`, self time per call path), the input
//! of inferno, flamegraph.pl and speedscope. Same as `ferrotrace flame --folded`.

use std::io::{self, Write};

use crate::cct::Cct;
use crate::progress::Progress;
use crate::reader::Trace;

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
