//! The session's perf events: the samplers the configuration asks for (tracefs probes created
//! first: their errors are the likeliest), and their perf events opened on every target thread and
//! CPU, with one ring per CPU (the side-band's, and the samples' unless a source counts them in the
//! kernel) — as root with kernel frames, else again without them.

use std::collections::HashMap;
use std::path::Path;

use ferrotrace_core::schema::SamplerKind;

use crate::cli_args::EventSpec;
use crate::perf::{self, AttrOptions, PerfEvent, Ring};
use crate::probes::{self, UprobeSet};
use crate::{ProfileConfig, ProfileError};

/// perf_event_open's pid for "every task" (-1), as the target list's one entry for `-a`.
pub(super) const EVERY_TASK: u32 = u32::MAX;

/// The frequency of a cpu-clock event: its own (`profile:hz:N`), else `-F`'s.
pub(super) fn cpu_clock_hz(own: Option<u32>, cfg: &ProfileConfig) -> u32 {
    own.unwrap_or(cfg.frequency)
}

/// Data pages of each CPU's ring to try, largest first (an unprivileged user is limited by
/// `kernel.perf_event_mlock_kb`): `--mmap-pages` alone when given; else sized for the events. A timer's
/// rate is known (999 Hz of ~300-byte records is 300 KB/s, of 8 KiB stack copies 8 MB/s), a probe's is
/// not: malloc in `rg -j1` fires 87,610 times in 0.2 s, ~100 MB/s of ~230-byte frame-pointer
/// records, and the kernel drops what does not fit while the profiler handles what it drained (perf
/// only copies it).
fn ring_sizes(cfg: &ProfileConfig, dwarf: bool) -> Vec<usize> {
    if let Some(pages) = cfg.buffer_pages {
        return vec![pages];
    }
    let probes = cfg
        .events
        .iter()
        .any(|e| !matches!(e, EventSpec::CpuClock(_)));
    match (probes, dwarf) {
        (false, false) => vec![128, 64, 16],
        (false, true) => vec![2048, 512, 128, 16],
        (true, false) => vec![4096, 1024, 256, 64, 16],
        (true, true) => vec![8192, 2048, 512, 128, 16],
    }
}

/// The samplers of a session: the perf events to open for each of the configuration's events, and
/// what the trace says each sampler is.
pub(super) struct Samplers {
    /// The uprobes created in tracefs, held for the session: removed when dropped, once no event
    /// uses them.
    pub _uprobes: Option<UprobeSet>,
    /// Per perf event to open: the index of its event in the configuration, and its kind.
    pub kinds: Vec<(usize, perf::EventKind)>,
    /// Per configuration event: its kind and spelling, for the trace's Samplers chunk.
    pub samplers: Vec<(SamplerKind, String)>,
}

/// Creates the probes the configuration's events need, and says which perf events to open.
pub(super) fn samplers(cfg: &ProfileConfig) -> Result<Samplers, ProfileError> {
    let mut uprobes: Option<UprobeSet> = None;
    let mut kinds = Vec::new();
    let mut samplers: Vec<(SamplerKind, String)> = Vec::new();
    let needs_tracefs = cfg
        .events
        .iter()
        .any(|e| !matches!(e, EventSpec::CpuClock(_)));
    let tracefs = if needs_tracefs {
        Some(probes::ensure_tracefs()?)
    } else {
        None
    };
    for (ei, e) in cfg.events.iter().enumerate() {
        let tf = tracefs.as_deref().unwrap_or(Path::new(probes::TRACEFS));
        let tracepoint = |id| perf::EventKind::Tracepoint { id };
        // A USDT probe inlined in several places is one event per site, all of one sampler.
        let (these, ty): (Vec<perf::EventKind>, SamplerKind) = match e {
            EventSpec::CpuClock(hz) => (
                vec![perf::EventKind::CpuClock {
                    freq: cpu_clock_hz(*hz, cfg),
                }],
                SamplerKind::CpuClock,
            ),
            EventSpec::Tracepoint { category, name } => (
                vec![tracepoint(probes::tracepoint_id(tf, category, name)?)],
                if e.is_off_cpu() {
                    SamplerKind::OffCpu
                } else {
                    SamplerKind::Tracepoint
                },
            ),
            EventSpec::Uprobe { path, symbol } => {
                let set = uprobes.get_or_insert_with(|| UprobeSet::new(tf));
                (
                    vec![tracepoint(set.add(path, symbol)?)],
                    SamplerKind::Uprobe,
                )
            }
            EventSpec::Uretprobe { path, symbol } => {
                let set = uprobes.get_or_insert_with(|| UprobeSet::new(tf));
                let id = set.add_return(path, symbol)?;
                (vec![tracepoint(id)], SamplerKind::Uprobe)
            }
            EventSpec::Usdt {
                path,
                provider,
                name,
            } => {
                let set = uprobes.get_or_insert_with(|| UprobeSet::new(tf));
                let ids = set.add_usdt(path, provider, name)?;
                (
                    ids.into_iter().map(tracepoint).collect(),
                    SamplerKind::Uprobe,
                )
            }
        };
        kinds.extend(these.into_iter().map(|k| (ei, k)));
        samplers.push((ty, e.spelling()));
    }
    Ok(Samplers {
        _uprobes: uprobes,
        kinds,
        samplers,
    })
}

/// The session's open perf events and their rings.
pub(super) struct Opened {
    /// Every event: a bookkeeping event per CPU, and each sampler's per thread and CPU.
    pub events: Vec<PerfEvent>,
    /// One ring per CPU, mapped from its first event (the others' output set to it).
    pub rings: Vec<Ring>,
    /// perf's event id → index of its event in the configuration.
    pub id_to_event: HashMap<u64, u32>,
    /// Kernel frames are left out (not permitted: perf_event_paranoid).
    pub exclude_kernel: bool,
}

/// How the session's events are opened (beside the kernel-frames choice, which [`open`] makes).
#[derive(Clone, Copy)]
pub(super) struct Opening {
    /// Samples carry registers and a copy of the user stack (DWARF unwinding here).
    pub dwarf: bool,
    /// The events start enabled at the target's `execve`.
    pub enable_on_exec: bool,
    /// The samplers' samples stay in the kernel (the source counts them): no ring for them, and
    /// off-CPU stretches are timed there too.
    pub counts_in_kernel: bool,
}

/// Opens the samplers' events on every thread of `tids` and every CPU (and a bookkeeping event per
/// CPU on the first thread). Tried with kernel frames first; an unprivileged user (paranoid 1 and 2
/// allow user-space profiling) gets them again without.
pub(super) fn open(
    cfg: &ProfileConfig,
    samplers: &Samplers,
    tids: &[u32],
    how: Opening,
) -> Result<Opened, ProfileError> {
    match open_with(cfg, samplers, tids, how, false) {
        Err(ProfileError::PerfParanoid { .. }) => open_with(cfg, samplers, tids, how, true),
        other => other,
    }
}

fn open_with(
    cfg: &ProfileConfig,
    samplers: &Samplers,
    tids: &[u32],
    how: Opening,
    exclude_kernel: bool,
) -> Result<Opened, ProfileError> {
    let cpus = perf::online_cpus();
    let ring_pages = ring_sizes(cfg, how.dwarf);
    // Wake the reader at a quarter of the smallest ring it may get (the kernel would lower a larger
    // mark to the ring's size: a wake-up only when it is full).
    let smallest = ring_pages.iter().min().copied().unwrap_or(1) * 4096;
    let wakeup_bytes = (smallest / 4).clamp(512, 64 * 1024) as u32;
    let mut events: Vec<PerfEvent> = Vec::new();
    let mut rings: Vec<Ring> = Vec::new();
    let mut id_to_event = HashMap::new();
    let mut leaders: Vec<Option<usize>> = vec![None; cpus.len()];
    for (ti, &tid) in tids.iter().enumerate() {
        for (ci, &cpu) in cpus.iter().enumerate() {
            // The process bookkeeping (maps, comm, fork, exit) on an event of its own that never
            // samples, as perf's dummy event: the kernel's count of the records each event lost
            // then tells lost samples from lost bookkeeping.
            let bookkeeping = (ti == 0).then_some((None, perf::EventKind::Dummy));
            let sampling = samplers.kinds.iter().map(|&(ei, k)| (Some(ei), k));
            for (ei, kind) in bookkeeping.into_iter().chain(sampling) {
                let spec = ei.map(|ei| &cfg.events[ei]);
                let o = AttrOptions {
                    dwarf: how.dwarf,
                    stack_size: cfg.stack_size,
                    exclude_kernel,
                    enable_on_exec: how.enable_on_exec,
                    sideband: ei.is_none(),
                    entry_probe: matches!(spec, Some(EventSpec::Uprobe { .. })),
                    // (A source that counts in the kernel times off-CPU stretches there.)
                    context_switch: spec.is_some_and(EventSpec::is_off_cpu)
                        && !how.counts_in_kernel,
                    wakeup_bytes,
                    in_kernel: how.counts_in_kernel && ei.is_some(),
                };
                let mut ev = perf::open_event(kind, &o, tid as i32, cpu)?;
                match ei {
                    Some(ei) => {
                        id_to_event.insert(ev.id, ei as u32);
                    }
                    None => ev.bookkeeping = true,
                }
                if o.in_kernel {
                    // Its samples are counted in the kernel: no ring.
                    events.push(ev);
                    continue;
                }
                match leaders[ci] {
                    None => {
                        let mut ring = Err(ProfileError::BadArgument("no ring size".into()));
                        for &pages in &ring_pages {
                            ring = Ring::map(&ev, pages);
                            if ring.is_ok() {
                                break;
                            }
                        }
                        rings.push(ring?);
                        leaders[ci] = Some(events.len());
                    }
                    Some(l) => perf::set_output(&ev, &events[l])?,
                }
                events.push(ev);
            }
        }
    }
    Ok(Opened {
        events,
        rings,
        id_to_event,
        exclude_kernel,
    })
}

/// Which of the configuration's events' samples carry user registers (as opened by `how`).
pub(super) fn event_regs(cfg: &ProfileConfig, how: Opening, exclude_kernel: bool) -> Vec<bool> {
    cfg.events
        .iter()
        .map(|e| {
            perf::has_user_regs(&AttrOptions {
                dwarf: how.dwarf,
                stack_size: 0,
                exclude_kernel,
                enable_on_exec: false,
                sideband: false,
                entry_probe: matches!(e, EventSpec::Uprobe { .. }),
                context_switch: false,
                wakeup_bytes: 0,
                in_kernel: how.counts_in_kernel,
            })
        })
        .collect()
}

/// The weight of one sample of each of the configuration's events: a timer sample stands for one
/// period of CPU time (ns), a probe hit for one.
pub(super) fn event_weights(cfg: &ProfileConfig) -> Vec<u64> {
    cfg.events
        .iter()
        .map(|e| match e {
            EventSpec::CpuClock(hz) => 1_000_000_000 / u64::from(cpu_clock_hz(*hz, cfg).max(1)),
            _ => 1,
        })
        .collect()
}
