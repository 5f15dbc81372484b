//! Firefox Profiler output (samples only).

use std::collections::HashMap;

use fxprof_processed_profile as fx;

use super::{Exporter, Options, Samples};

use crate::reader::SamplerKind;
use crate::samples::{thread_label, RenderError, SampleSet};

/// A Firefox Profiler "processed profile" (load it at profiler.firefox.com), symbolized: every frame is
/// a label with its function name. One process per pid, one thread per tid.
pub fn firefox_json(set: &SampleSet) -> Result<String, RenderError> {
    let interval = fx::SamplingInterval::from_hz(set.frequency.max(1) as f32);
    let reference =
        fx::ReferenceTimestamp::from_millis_since_unix_epoch(set.start_realtime_ns as f64 / 1e6);
    let mut p = fx::Profile::new("ferrotrace", reference, interval);
    p.set_symbolicated(true);
    p.set_os_name("Linux");
    let user = p.add_category("User", fx::CategoryColor::Yellow);
    let kernel = p.add_category("Kernel", fx::CategoryColor::Orange);
    let ts = |t: u64| {
        fx::Timestamp::from_nanos_since_reference(t.saturating_sub(set.start_monotonic_ns))
    };
    let mut samples = set.samples.clone();
    samples.sort_by_key(|s| s.time_ns);
    let first_time = samples
        .first()
        .map_or(set.start_monotonic_ns, |s| s.time_ns);
    let pid_of = |tid: u32| {
        set.threads
            .iter()
            .find(|t| t.tid == tid)
            .map_or(set.pid, |t| t.pid)
    };
    let mut processes: HashMap<u32, fx::ProcessHandle> = HashMap::new();
    let mut threads: HashMap<u32, fx::ThreadHandle> = HashMap::new();
    let mut stacks: HashMap<(u32, Option<u32>, u32), Option<fx::StackHandle>> = HashMap::new();
    let multi = set.events.len() > 1;
    for s in &samples {
        let pid = pid_of(s.tid);
        let process = *processes.entry(pid).or_insert_with(|| {
            let name = set
                .threads
                .iter()
                .find(|t| t.tid == pid)
                .map_or_else(|| format!("pid {pid}"), |t| t.name.clone());
            p.add_process(&name, pid, ts(first_time))
        });
        let thread = *threads.entry(s.tid).or_insert_with(|| {
            let t = p.add_thread(process, s.tid, ts(first_time), s.tid == pid);
            p.set_thread_name(t, &thread_label(set.thread_name(s.tid), s.tid));
            t
        });
        let key = (s.tid, s.stack, s.event);
        let stack = match stacks.get(&key) {
            Some(h) => *h,
            None => {
                let mut frames: Vec<fx::FrameInfo> = Vec::new();
                if multi {
                    let name = set.events.get(s.event as usize).map_or("?", |e| &e.name);
                    let h = p.intern_string(name);
                    frames.push(fx::FrameInfo {
                        frame: fx::Frame::Label(h),
                        category_pair: user.into(),
                        flags: fx::FrameFlags::empty(),
                    });
                }
                for f in set.stack_frames(s.stack).iter().rev() {
                    let h = p.intern_string(&f.function);
                    frames.push(fx::FrameInfo {
                        frame: fx::Frame::Label(h),
                        category_pair: if f.kernel { kernel } else { user }.into(),
                        flags: fx::FrameFlags::empty(),
                    });
                }
                let h = p.intern_stack_frames(thread, frames.into_iter());
                stacks.insert(key, h);
                h
            }
        };
        let on_cpu = set
            .events
            .get(s.event as usize)
            .is_some_and(|e| e.kind == SamplerKind::CpuClock);
        let cpu = if on_cpu {
            fx::CpuDelta::from_nanos(s.weight)
        } else {
            fx::CpuDelta::ZERO
        };
        p.add_sample(thread, ts(s.time_ns), stack, cpu, 1);
    }
    serde_json::to_string(&p).map_err(|e| RenderError(e.to_string()))
}

/// `--format firefox`: samples only.
pub struct Firefox;

impl Exporter for Firefox {
    fn name(&self) -> &'static str {
        "firefox"
    }

    fn about(&self) -> &'static str {
        "Firefox Profiler processed-profile JSON with symbols (profiler.firefox.com; samples only)"
    }

    fn writes_functions(&self) -> bool {
        false
    }

    fn writes_samples(&self) -> Samples {
        Samples::Always
    }

    /// The named profile, then libraries, addresses and source lines added from the trace's address
    /// stacks (`dump::firefox_libs`).
    fn write_samples(
        &self,
        trace: &crate::reader::Trace,
        set: &SampleSet,
        _opts: Options,
    ) -> Result<Vec<u8>, RenderError> {
        let named = firefox_json(set)?;
        super::firefox_libs::add_native_frames(trace, &named)
            .map(String::into_bytes)
            .map_err(|e| RenderError(e.to_string()))
    }
}
