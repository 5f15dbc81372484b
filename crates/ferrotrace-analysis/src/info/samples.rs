//! `info` of samples.

use std::fmt::Write as _;

use crate::reader::{CallGraph, SamplerKind};
use crate::samples::{thread_label, SampleSet};

/// The `info` lines of a trace's samples.
pub fn info_text(set: &SampleSet) -> String {
    let mut o = String::new();
    let call_graph = match set.call_graph {
        CallGraph::None => "no",
        CallGraph::FramePointers => "frame-pointer",
        CallGraph::Dwarf => "DWARF",
    };
    let timer = if set.events.iter().any(|e| e.kind == SamplerKind::CpuClock) {
        format!(" at {} Hz", set.frequency)
    } else {
        String::new()
    };
    let recorder = if set.in_kernel {
        format!(
            "eBPF: unwound and counted in the kernel, each count stamped when read, every {} ms",
            ferrotrace_core::schema::source::BPF_DRAIN_MS
        )
    } else {
        "perf_event".into()
    };
    let _ = writeln!(o, "samples      : {call_graph} stacks{timer} ({recorder})");
    let _ = writeln!(
        o,
        "samplers     : {}",
        set.events
            .iter()
            .map(|e| e.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    );
    let _ = writeln!(
        o,
        "sampled      : {} samples, {} lost, {} unwind errors{}",
        set.samples.len(),
        set.lost,
        set.unwind_errors,
        if set.in_kernel && set.unwind_errors > 0 {
            " (their stacks start at [truncated])"
        } else {
            ""
        }
    );
    if let Some(stops) = &set.unwind_stops {
        let reasons: Vec<String> = stops
            .reasons()
            .map(|(n, why)| format!("{n} {why}"))
            .collect();
        let _ = writeln!(o, "stopped early: {}", reasons.join(", "));
    }
    // The recording's duration starts with the recorder (a system-wide profile may take seconds to
    // read every process's tables first): when the samples themselves were taken.
    let times = set.samples.iter().map(|s| s.time_ns);
    if let (Some(first), Some(last)) = (times.clone().min(), times.max()) {
        let _ = writeln!(
            o,
            "sample span  : {} (the first {} after the recording began)",
            crate::info::fmt_ns(last - first),
            crate::info::fmt_ns(first.saturating_sub(set.start_monotonic_ns))
        );
    }
    for t in &set.threads {
        let n = set.samples.iter().filter(|s| s.tid == t.tid).count();
        if n > 0 {
            let _ = writeln!(
                o,
                "  {:>8}  {:<16} {:>10} samples",
                t.tid,
                thread_label(&t.name, t.tid),
                n
            );
        }
    }
    for m in &set.unreadable_modules {
        let _ = writeln!(o, "not named    : {m}");
    }
    o
}
