//! The analysis commands on traces of `ferrotrace profile`: samples go to the profiler's own views.

use std::path::Path;

use ferrotrace_analysis::reader::Trace;
use ferrotrace_profile::SampleSet;

/// The samples of `trace` when it was written by `ferrotrace profile`, `None` for a function trace.
pub fn load(trace: &Trace) -> Result<Option<SampleSet>, String> {
    if trace.sample_chunks == 0 {
        return Ok(None);
    }
    ferrotrace_profile::read_samples(trace.path())
        .map(Some)
        .map_err(|e| e.to_string())
}

/// Writes `bytes` to `output`, or to stdout.
pub fn emit(output: Option<&Path>, bytes: &[u8]) -> Result<(), String> {
    use std::io::Write;
    let mut out = super::Output::to(output)?;
    out.write_all(bytes).map_err(|e| out.error(e))?;
    out.finish()?;
    if let Some(p) = output {
        eprintln!("ferrotrace: wrote {}", p.display());
    }
    Ok(())
}

/// One JSON object for `report --json` on samples: `{"samples": N, "functions": [{"function", "self",
/// "total"}]}`, functions by self samples.
pub fn report_json(set: &SampleSet) -> serde_json::Value {
    let r = ferrotrace_profile::report(set);
    serde_json::json!({
        "samples": r.samples,
        "lost": set.lost,
        "functions": r.rows.iter().map(|f| serde_json::json!({
            "function": f.function, "self": f.self_samples, "total": f.total_samples,
        })).collect::<Vec<_>>(),
    })
}

/// The `info` text of a sample trace.
pub fn info_text(set: &SampleSet, file_len: u64) -> String {
    use std::fmt::Write;
    let mut o = String::new();
    let _ = writeln!(
        o,
        "kind         : samples (ferrotrace profile), {:?} stacks at {} Hz",
        set.call_graph, set.frequency
    );
    let _ = writeln!(o, "pid          : {}", set.pid);
    let _ = writeln!(
        o,
        "events       : {}",
        set.events
            .iter()
            .map(|e| e.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    );
    let _ = writeln!(
        o,
        "duration     : {}",
        ferrotrace_analysis::info::fmt_ns(
            set.end_monotonic_ns.saturating_sub(set.start_monotonic_ns)
        )
    );
    let _ = writeln!(
        o,
        "samples      : {} recorded, {} lost, {} unwind errors",
        set.samples.len(),
        set.lost,
        set.unwind_errors
    );
    let _ = writeln!(o, "file size    : {file_len} bytes");
    let _ = writeln!(o, "threads      : {}", set.threads.len());
    for t in &set.threads {
        let n = set.samples.iter().filter(|s| s.tid == t.tid).count();
        let _ = writeln!(o, "  {:>8}  {:<16} {:>10} samples", t.tid, t.name, n);
    }
    o
}

/// Writes samples as Perfetto slices: per thread, each sample's stack is a pile of nested slices lasting
/// one sampling period; frames shared with the previous sample continue (a "stack chart", as profilers
/// draw it), and everything closes when the thread goes quiet for more than two periods.
pub fn perfetto(
    set: &SampleSet,
    compress: bool,
    out: &mut dyn std::io::Write,
) -> std::io::Result<()> {
    use ferrotrace_analysis::callstack::EndKind;
    use ferrotrace_analysis::dump::perfetto::{write_events, Options, Source};
    use ferrotrace_analysis::dump::Ev;

    let period = 1_000_000_000 / u64::from(set.frequency.max(1));
    let name = |id: u32| {
        set.frames
            .get(id as usize)
            .map_or_else(|| format!("frame#{id}"), |f| f.function.clone())
    };
    let source = Source {
        pid: set.pid,
        process_name: set
            .threads
            .iter()
            .find(|t| t.tid == set.pid)
            .map_or_else(String::new, |t| t.name.clone()),
        threads: set
            .threads
            .iter()
            .map(|t| (t.tid, t.name.clone()))
            .collect(),
        t0: set.start_monotonic_ns,
        name: &name,
        trace: None,
    };
    let frames_of = |leaf: Option<u32>| {
        let mut v = Vec::new();
        let mut node = leaf;
        while let Some(n) = node.and_then(|n| set.stacks.get(n as usize)) {
            v.push(n.frame);
            node = n.parent;
        }
        v.reverse();
        v
    };
    write_events(&source, Options { compress }, out, |emit| {
        let mut tids: Vec<u32> = set.samples.iter().map(|s| s.tid).collect();
        tids.sort_unstable();
        tids.dedup();
        for tid in tids {
            let mut open: Vec<u32> = Vec::new();
            let mut last = 0u64;
            let close_to =
                |open: &mut Vec<u32>,
                 keep: usize,
                 ts: u64,
                 emit: &mut dyn FnMut(Ev<'_>) -> std::io::Result<()>| {
                    while open.len() > keep {
                        let id = open.pop().unwrap_or_default();
                        emit(Ev::End {
                            tid,
                            id,
                            ts,
                            depth: open.len(),
                            how: EndKind::Return,
                        })?;
                    }
                    Ok::<(), std::io::Error>(())
                };
            for s in set.samples.iter().filter(|s| s.tid == tid) {
                let frames = frames_of(s.stack);
                if !open.is_empty() && s.time_ns > last + 2 * period {
                    close_to(&mut open, 0, last + period, emit)?;
                }
                let common = open.iter().zip(&frames).take_while(|(a, b)| a == b).count();
                close_to(&mut open, common, s.time_ns, emit)?;
                for &f in &frames[common..] {
                    emit(Ev::Begin {
                        tid,
                        id: f,
                        ts: s.time_ns,
                        depth: open.len(),
                    })?;
                    open.push(f);
                }
                last = s.time_ns;
            }
            close_to(&mut open, 0, last + period, emit)?;
        }
        Ok(Vec::new())
    })
    .map(|_| ())
}
