//! `ferrotrace profile`'s program, started here like every program ferrotrace runs.
//!
//! [`profile`] forks the program held before its `execve` ([`crate::hold`]), hands it to
//! `ferrotrace_profile::profile_held`, which opens its events (enabled at the exec), releases it and
//! profiles it from its first instruction to its end, and waits for it. Unlike `record`'s programs it
//! runs as it is: no runtime injected, no signal relayed. It stays in our process group, so the
//! terminal's Ctrl-C reaches it as it reaches us, and the profiler's handlers end the recording.
//!
//! The fork runs on a thread of its own: `Command::spawn` returns only once the program has
//! exec'd, which the profiler must see happen (the eBPF backend holds it again at its entry point,
//! as its tracer, until its unwind tables are loaded).

use std::io;

use ferrotrace_profile::{ProfileConfig, ProfileError, ProfileSummary, Target};

use crate::hold::Hold;

/// Records a profile as `cfg` says: of a program it starts ([`Target::Command`], resolved already by
/// [`crate::program::resolve`]) or, through `ferrotrace_profile::profile`, of what runs already.
pub fn profile(cfg: &ProfileConfig) -> Result<ProfileSummary, ProfileError> {
    let Target::Command { program, argv } = &cfg.target else {
        return ferrotrace_profile::profile(cfg);
    };
    let sys = |what: &str| {
        let what = what.to_string();
        move |source| ProfileError::Sys { what, source }
    };
    let spawn_error = |source| ProfileError::Spawn {
        program: program.display().to_string(),
        source,
    };
    if argv.is_empty() {
        return Err(ProfileError::BadArgument("no program given".into()));
    }
    let (hold, child_ends) = Hold::new().map_err(sys("pipe"))?;
    let mut cmd = crate::start::command(program, argv);
    child_ends.fds(&hold).install(&mut cmd);
    let spawner = std::thread::Builder::new()
        .name("ferrotrace-start".into())
        .spawn(move || {
            let spawned = cmd.spawn().map(|child| child.id());
            drop(child_ends);
            spawned
        })
        .map_err(sys("starting the thread that starts the program"))?;
    let Some(pid) = hold.pid() else {
        // Never forked: the spawn says why.
        return Err(match spawner.join() {
            Ok(Err(e)) => spawn_error(e),
            _ => spawn_error(io::Error::other("the program was not started")),
        });
    };
    let mut spawner = Some(spawner);
    let profiled = ferrotrace_profile::profile_held(cfg, pid, || {
        hold.release()?;
        // The spawn returns once the program has exec'd, or with the reason it could not.
        match spawner.take().map(|s| s.join()) {
            Some(Ok(spawned)) => spawned.map(drop),
            _ => Err(io::Error::other("the thread starting the program panicked")),
        }
    });
    if let Some(never_released) = spawner {
        // The profiler gave up before the release: the child gives up too, and its spawn reports
        // that to us. Waiting for it keeps the child from writing to a pipe we would close by exiting.
        let _ = never_released.join();
    }
    profiled
}
