//! A recording the program starts and stops itself, into a file of its own (`ferrotrace-tracing`'s
//! guard): no `ferrotrace record`, no environment. It starts as an attach does, in a process whose
//! threads may run already (start-up's order and its reasons are in `start`): discovery, and the
//! instrumented functions patched if the program has any (it may have none: then the trace holds what
//! the callsites and tracepoints record); every `tracing` event is selected. The `FERROTRACE_*`
//! variables of the recording's settings apply (`FERROTRACE_BUFFER_SIZE`, `FERROTRACE_MODE`,
//! `FERROTRACE_FILTER`, …: `ferrotrace_core::env`). [`stop`] finishes the
//! trace with End reason `Stopped`, puts the patched sites back and retires the runtime, as the end
//! of an attached recording does, so that the program runs on untraced.
//!
//! Not here: start-up under `record` (`start`), attaching from outside (`attach`).

use std::path::Path;

use ferrotrace_core::env::RuntimeSpec;
use ferrotrace_core::schema::EndReason;

use crate::lifecycle::config::Config;
use crate::lifecycle::exit;
use crate::lifecycle::plan::{self, LiveTo, Occasion, Plan};
use crate::lifecycle::runtime::{self, get, Role};
use crate::patch::sites;

/// Starts recording this process into `output` (created new, 0600; an older trace there is kept as
/// `FILE.old`, anything else refused). Fails when a runtime records already, or the file cannot be
/// made.
pub fn start_recording(output: &Path) -> Result<(), String> {
    if get().is_some() {
        return Err("a ferrotrace runtime is recording this process already".into());
    }
    // The recording's settings that `FERROTRACE_*` variables give (buffer and chunk sizes, mode,
    // -F/-N/-D), as under `record`; not those that only `record` or `live` may give (descriptors,
    // FIFOs, allocations, tracepoints, which runtime starts).
    let spec = RuntimeSpec {
        output: Some(output.to_path_buf()),
        runtime: None,
        trace: Vec::new(),
        alloc: None,
        live_fd: None,
        shared_fd: None,
        control: None,
        live_fifo: None,
        ..crate::lifecycle::config::spec_from_env()?
    };
    let config = Config::from_spec(&spec)?;
    plan::run(Plan {
        occasion: Occasion::InProgram,
        role: Role::Linked,
        config,
        output: output.to_path_buf(),
        shared_fd: None,
        alloc: None,
        started_by_traced: false,
        tracepoints_requested: false,
        live: LiveTo::Nowhere,
        control: None,
        control_path: None,
        after_start: Some(Box::new(|_| {
            crate::recorders::callsites::select_all_events()
        })),
    })
    .map_err(|e| e.to_string())?;
    Ok(())
}

/// Ends the recording [`start_recording`] began: the patched sites put back, every thread's events
/// written, the End chunk (reason `Stopped`) written; then the process has no runtime again. Returns
/// once the trace is complete. Nothing happens when nothing records.
pub fn stop() {
    let Some(rt) = get() else { return };
    sites::unpatch_all();
    let _ = exit::finish(rt, EndReason::Stopped, 0, false);
    runtime::retire(rt);
}
