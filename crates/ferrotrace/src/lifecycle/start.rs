//! Starting the runtime from the environment, in the ELF constructor of either copy (which one starts,
//! its configuration, its trace file: the rest is the one start plan, [`crate::lifecycle::plan`]), and
//! again in a forked child at its first traced event.

use std::path::PathBuf;

use ferrotrace_core::env;

use crate::buffers::clock;
use crate::lifecycle::config::Config;
use crate::lifecycle::plan::{self, launch, new_pool, open_trace, LiveTo, Occasion, Plan, Problem};
use crate::lifecycle::runtime::{get, Role, Runtime};

/// True in a process the kernel runs with privileges its invoker does not have (setuid, setgid, file
/// capabilities): `getauxval(AT_SECURE)`, the test glibc uses to ignore `LD_PRELOAD` and that makes
/// `secure_getenv` return nothing.
fn is_secure_execution() -> bool {
    // SAFETY: getauxval reads the auxiliary vector; it has no failure mode that matters here (0 when
    // the entry is missing, which means not secure).
    unsafe { libc::getauxval(libc::AT_SECURE) != 0 }
}

/// Starts the runtime if the environment asks this copy to, printing one line on failure. Called from
/// the ELF constructors of both copies; only one of them proceeds.
///
/// A privileged process (setuid, setgid, capabilities: `getauxval(AT_SECURE)`) stays dormant and reads
/// no `FERROTRACE_*` variable at all: its environment comes from a user it must not obey, who could
/// otherwise make it write a trace over any file (`FERROTRACE_OUTPUT`).
pub fn start_from_env(role: Role) {
    if is_secure_execution() {
        return;
    }
    let wanted = crate::lifecycle::config::requested_runtime();
    let go = match (role, wanted.as_ref().and_then(|w| w.to_str())) {
        (_, Some(env::RUNTIME_OFF)) => false,
        (Role::Preload, Some(env::RUNTIME_LINKED)) => false,
        (Role::Preload, _) => true,
        (Role::Linked, Some(env::RUNTIME_LINKED)) => true,
        // Tracepoints: FERROTRACE_TRACE alone starts the linked copy.
        (Role::Linked, None) => crate::tracepoints::requested().is_some(),
        (Role::Linked, _) => false,
    };
    if !go || get().is_some() {
        return;
    }
    if let Err(e) = start(role) {
        say!("ferrotrace: tracing disabled: {e}");
    }
}

/// The trace file of this process, and whether a traced process started it (rather than `ferrotrace
/// record`).
fn output_path(config: &Config) -> (PathBuf, bool) {
    // A process started by a traced process writes its own file, named after its pid, so that two
    // processes never interleave bytes in one file.
    let pid = std::process::id();
    // The marker holds the pid of the process that set it: equal to ours after an `exec` of the root
    // process (a wrapper script that execs the real program), which then takes over the main file.
    let started_by_traced = std::env::var(env::TRACED_PARENT).is_ok_and(|v| v != pid.to_string());
    let path = if started_by_traced {
        let mut p = config.output.clone().into_os_string();
        p.push(format!(".{pid}"));
        PathBuf::from(p)
    } else {
        config.output.clone()
    };
    crate::lifecycle::config::set_env(env::TRACED_PARENT, Some(&pid.to_string()));
    (path, started_by_traced)
}

fn start(role: Role) -> Result<(), Problem> {
    let config = Config::from_env()?;
    let shared_fd = crate::lifecycle::config::take_shared_fd();
    let alloc = crate::lifecycle::config::alloc_requested()?;
    let (output, started_by_traced) = output_path(&config);
    plan::run(Plan {
        occasion: Occasion::StartUp,
        role,
        config,
        output,
        // Only the process `record` started shares its pool: processes it starts write traces of
        // their own, which record does not watch.
        shared_fd: shared_fd.filter(|_| !started_by_traced),
        alloc,
        started_by_traced,
        tracepoints_requested: crate::tracepoints::requested().is_some(),
        live: LiveTo::Environment,
        control: None,
        control_path: None,
        after_start: None,
    })?;
    Ok(())
}

/// In a forked child, at its first traced event: starts a runtime of its own, writing `FILE.<pid>`,
/// with the parent's settings, module map and function table (the sleds are patched already: the child
/// has the parent's code). A child that calls `exec` first never gets here; the new image's runtime
/// traces it instead. Prints one line and leaves the child untraced if the parent's state cannot be
/// read (a lock held by a parent thread when it forked).
pub fn restart_in_forked_child() {
    // Live mode prints the root process's events; a child's would go to a file nobody reads.
    let Some(parent) = get().filter(|rt| !rt.records_this_process() && rt.live.is_none()) else {
        return;
    };
    let Some((header, known)) = parent.description() else {
        say!(
            "ferrotrace: forked child {} not traced: the parent was changing the function table when it forked",
            std::process::id()
        );
        return;
    };
    // What the parent's recording had not handed to its collector is in the description already.
    crate::state::PROCESS.forked_child();
    let config = parent.config.clone();
    let (path, _) = output_path(&config);
    let first_clock = clock::calibration_pair().0;
    let start_realtime = clock::realtime_ns();
    let started = new_pool(&config, None, start_realtime).and_then(|pool| {
        let writer = open_trace(
            &config,
            &path,
            &header,
            &parent.program,
            start_realtime,
            first_clock,
        )?;
        launch(
            Runtime::new(
                config,
                pool,
                parent.program,
                parent.upcalls,
                known,
                header,
                None,
            ),
            writer,
            path,
            Some(parent),
            false,
        )
    });
    match started {
        Ok(rt) => {
            rt.lifecycle.start_recording();
        }
        Err(e) => say!(
            "ferrotrace: forked child {} not traced: {e}",
            std::process::id()
        ),
    }
}

/// Starts a runtime for unit tests of this crate: `config`, no program description, no sled patched, no
/// exit or signal hooks; recording on. One per test binary (the process has one runtime).
#[cfg(test)]
pub(crate) fn start_for_test(config: Config) -> &'static Runtime {
    use crate::lifecycle::plan::{targets, UPCALLS};
    use crate::lifecycle::runtime::Program;
    use crate::patch::discovery;
    crate::buffers::hot::init_tls_offset();
    let first_clock = clock::calibration_pair().0;
    let start_realtime = clock::realtime_ns();
    let pool = new_pool(&config, None, start_realtime).expect("pool");
    let path = config.output.clone();
    let program = Program {
        role: Role::Linked,
        sources: 0,
        rust_std: false,
        targets: targets(false),
        alloc: None,
    };
    let writer =
        open_trace(&config, &path, &[], &program, start_realtime, first_clock).expect("trace file");
    let rt = launch(
        Runtime::new(
            config,
            pool,
            program,
            UPCALLS,
            discovery::Known::default(),
            Vec::new(),
            None,
        ),
        writer,
        path,
        None,
        false,
    )
    .expect("launch");
    rt.lifecycle.start_recording();
    rt
}
