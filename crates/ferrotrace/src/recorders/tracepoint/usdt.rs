//! SDT (USDT) probes that fire when a tracer attaches, whether or not ferrotrace records.
//!
//! Each tracepoint carries a SystemTap SDT probe with a semaphore (see `tracepoint!`). A tracer that
//! attaches to the probe (`bpftrace usdt:…`, `perf record -e sdt_…`) makes the kernel raise the
//! semaphore in the process's memory, and nothing else: no signal, no system call the process could
//! see. The probe sits in the tracepoint's out-of-line path, which runs only while the site is patched
//! to jump there, so the runtime must notice the semaphore and patch the sites itself.
//!
//! Reading the semaphore at the site would cost every disabled site a load and a branch; the site stays
//! one NOP instead, and the semaphores are read elsewhere:
//!
//! * once when the program starts (the linked runtime's constructor): a tracer that attached before the
//!   program ran (`bpftrace -c`, `perf record -e sdt_… -- prog`, or a system-wide probe) raised the
//!   semaphore when the kernel mapped the executable;
//! * then every [`PERIOD`] by a watcher thread (`ferrotrace-usdt`), started only in programs that have
//!   tracepoints, for tracers that attach to a running process (`bpftrace -p`): it reads one 16-bit
//!   semaphore per tracepoint and sleeps; it patches a tracepoint's sites when its semaphore rises and
//!   restores the NOP when it falls back to zero (unless ferrotrace records the tracepoint). Its cost is
//!   measured in docs/performance.md; `FERROTRACE_USDT=off` leaves it out (tracers attaching later then
//!   see nothing). A child forked without `exec` has no watcher.
//!
//! Not in the preload library, which has no tracepoints of its own.

// The semaphores' section starts on a page of its own. The kernel raises a semaphore at its file
// offset, in the mapping of the executable that covers that offset; when the page also belongs to the
// previous segment (the linker packs the RELRO segment's last page and the data segment's first one
// from the same file page, mapped twice), it may pick that mapping and raise a copy the program never
// reads. Seen with rust-lld once the text grew by a few KiB: bpftrace -c saw no event.
core::arch::global_asm!(
    ".pushsection .probes,\"awR\",@progbits",
    ".p2align 12",
    ".popsection"
);

use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::recorders::tracepoint;
use crate::recorders::tracepoint::Probe;

/// How often the watcher reads the semaphores: the delay between a tracer attaching and the probe firing.
pub const PERIOD: Duration = Duration::from_millis(200);

/// Patches the sites of the tracepoints whose semaphore rose or fell since `seen` (their last states).
fn sync(probes: &[Probe], seen: &mut [bool]) {
    let mut changed = Vec::new();
    for (probe, seen) in probes.iter().zip(seen.iter_mut()) {
        let now = probe.semaphore.load(Ordering::Relaxed) != 0;
        if now != *seen {
            *seen = now;
            changed.push(probe.desc);
        }
    }
    if !changed.is_empty() {
        crate::tracepoints::refresh(&changed, probes);
    }
}

/// The linked runtime's constructor: patches the sites of probes tracers are attached to already, and
/// starts the watcher (in programs that have tracepoints, unless `FERROTRACE_USDT=off`). Not in the
/// preload library, which has no tracepoints of its own.
pub fn watch() {
    let probes = tracepoint::probes();
    if probes.is_empty() {
        return;
    }
    let mut seen = vec![false; probes.len()];
    sync(&probes, &mut seen);
    if std::env::var_os(ferrotrace_core::env::USDT)
        .is_some_and(|v| v == ferrotrace_core::env::USDT_OFF)
    {
        return;
    }
    // Like every thread of the runtime's, with every signal blocked: a signal for the process must
    // reach a thread of the program, whose handlers finish the trace.
    let started = crate::lifecycle::exit::spawn_without_signals(
        "ferrotrace-usdt",
        Some(64 << 10),
        move || {
            crate::buffers::thread::ignore_current_thread();
            crate::recorders::ignore_current_thread();
            loop {
                std::thread::sleep(PERIOD);
                sync(&probes, &mut seen);
            }
        },
    );
    if let Err(e) = started {
        say!("ferrotrace: no watcher for USDT probes (tracers attaching later see nothing): {e}");
    }
}
