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
use ferrotrace_core::schema::{self, EndReason};

use crate::arch::xray as trampoline;
use crate::buffers::{clock, hot};
use crate::lifecycle::config::Config;
use crate::lifecycle::runtime::{self, get, Program, Role, Runtime};
use crate::lifecycle::{exit, start};
use crate::patch::{discovery, sites};

/// Starts recording this process into `output` (created new, 0600; an older trace there is kept as
/// `FILE.old`, anything else refused). Fails when a runtime records already, or the file cannot be
/// made.
pub fn start_recording(output: &Path) -> Result<(), String> {
    if get().is_some() {
        return Err("a ferrotrace runtime is recording this process already".into());
    }
    let first_clock = clock::calibration_pair().0;
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
    hot::init_tls_offset();
    crate::patch::text::register_membarrier();
    trampoline::init_xsave_area();
    hot::init_cpu_offset();
    let mut known = discovery::Known::default();
    let found = discovery::discover(&config, false, &mut known)?;
    let start_realtime = clock::realtime_ns();
    let pool = start::new_pool(&config, None, start_realtime)?;
    let header = found.head(crate::tracepoints::assign_ids());
    // The program records itself through ferrotrace-tracing's guard.
    let sources = start::sources(&found) | schema::source::TRACING;
    let program = Program {
        role: Role::Linked,
        sources,
        rust_std: found.rust_std,
        targets: start::targets(false),
        alloc: None,
    };
    let writer = start::open_trace(
        &config,
        output,
        &header,
        &program,
        start_realtime,
        first_clock,
    )?;
    let rt = Runtime::new(config, pool, program, start::UPCALLS, known, header, None);
    let rt = start::launch(rt, writer, output.to_path_buf(), None, false)?;
    exit::install_once();
    crate::recorders::callsites::select_all_events();
    rt.lifecycle.start_recording();
    // SAFETY: `found` is discover's answer, unchanged.
    if let Err(e) = unsafe { sites::patch(&found, &rt.program.targets) } {
        say!("ferrotrace: patching failed: {e}");
    }
    drop(found);
    start::start_recorders(&rt.program, rt.upcalls.recorders);
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
