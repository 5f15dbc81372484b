//! The eBPF backend's place in a crate built without the `bpf` feature (no clang-16 and libbpf needed
//! to build it): [`BpfSession`] has the real session's interface but no values, so the recorder's
//! `--bpf` branches are proven unreachable by the type system, and [`BpfSession::load`] — the one
//! way to get a session — refuses `--bpf` with a line saying how to get it.

use std::collections::HashMap;
use std::convert::Infallible;
use std::marker::PhantomData;
use std::mem::MaybeUninit;

use super::State;
use crate::cli_args::EventSpec;
use crate::file::SampleWriter;
use crate::perf::PerfEvent;
use crate::{BpfUnwinderWork, ProfileError};

/// A session of the eBPF backend, which this build cannot have.
pub(super) struct BpfSession<'obj> {
    never: Infallible,
    storage: PhantomData<&'obj ()>,
}

impl<'obj> BpfSession<'obj> {
    /// Refuses: the eBPF backend was not built.
    pub fn load(_storage: &'obj mut MaybeUninit<()>) -> Result<BpfSession<'obj>, ProfileError> {
        Err(ProfileError::BpfNotBuilt)
    }

    pub fn attach(
        &mut self,
        _events: &[PerfEvent],
        _event_of: &HashMap<u64, u32>,
        _specs: &[EventSpec],
    ) -> Result<(), ProfileError> {
        match self.never {}
    }

    pub fn forget_off_cpu(&mut self, _tid: u32) {
        match self.never {}
    }

    pub fn unwinder_work(&self) -> BpfUnwinderWork {
        match self.never {}
    }

    pub fn detach(&mut self) {
        match self.never {}
    }

    pub fn sync(&mut self, _st: &mut State) {
        match self.never {}
    }

    pub fn drain(
        &mut self,
        _st: &mut State,
        _out: &mut SampleWriter,
        _time: u64,
    ) -> Result<(), ProfileError> {
        match self.never {}
    }

    pub fn kernel_bytes(&self) -> u64 {
        match self.never {}
    }

    pub fn truncated(&self) -> u64 {
        match self.never {}
    }

    pub fn warnings(&self, _samples: u64, _warnings: &mut Vec<String>) {
        match self.never {}
    }
}

#[cfg(test)]
mod tests {
    use crate::{Backend, ProfileConfig, ProfileError, Target};

    /// `--bpf` in a build without the backend: refused before a program runs or a file is written,
    /// in one line that names the feature and what building it needs.
    #[test]
    fn bpf_is_refused_in_one_line() {
        let dir = std::env::temp_dir().join(format!("ferrotrace-nobpf-{}", std::process::id()));
        let cfg = ProfileConfig {
            output: dir.join("never.data"),
            target: Target::Command {
                program: "/bin/true".into(),
                argv: vec!["/bin/true".into()],
            },
            backend: Backend::Bpf,
            handle_signals: false,
            ..ProfileConfig::default()
        };
        let e = crate::profile(&cfg).unwrap_err();
        assert!(matches!(e, ProfileError::BpfNotBuilt), "{e}");
        let line = e.to_string();
        assert!(
            !line.contains('\n') && line.contains("`bpf` feature"),
            "{line}"
        );
        assert!(!cfg.output.exists(), "no trace file is written");
    }
}
