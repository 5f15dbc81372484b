//! Where a session's samples come from. The perf rings always carry the side-band records (mappings,
//! threads, forks, exits) that [`State`] follows; the samples themselves come either through the
//! same rings, with the registers and stack copies this process unwinds ([`RingSamples`], the
//! perf_event backend), or as stacks unwound and counted in the kernel, read from BPF maps
//! (`bpf_session::BpfSession`, `--bpf`). A hardware tracer would be a third source: the session's
//! loop, set-up and summary do not change.

use std::collections::HashMap;

use super::State;
use crate::cli_args::EventSpec;
use crate::file::SampleWriter;
use crate::perf::PerfEvent;
use crate::{Backend, BpfUnwinderWork, ProfileError, UnwindTables};

/// A source of samples: what the session asks of it, in the order it asks. What a source that keeps
/// nothing of its own does (the perf rings' samples are all the session's) is each method's default.
pub(super) trait SampleSource {
    /// The sampling events' samples stay in the kernel (no ring of their own, no registers or stack
    /// copy, no unwinding here).
    fn counts_in_kernel(&self) -> bool;

    /// A program the session starts is held at its entry point until [`SampleSource::sync`] has
    /// loaded what sampling it needs (the eBPF unwinder's tables of its mappings).
    fn holds_at_entry(&self) -> bool;

    /// Starts sampling on the open `events` (`event_of`: perf's id → index in `specs`); the perf
    /// backend's events are enabled by the session.
    fn attach(
        &mut self,
        _events: &[PerfEvent],
        _event_of: &HashMap<u64, u32>,
        _specs: &[EventSpec],
    ) -> Result<(), ProfileError> {
        Ok(())
    }

    /// Brings what the source keeps of the followed processes up to date with `st` (the address
    /// spaces the side-band records changed).
    fn sync(&mut self, _st: &mut State) {}

    /// [`SampleSource::sync`], finished before it returns: what it builds in the background (the
    /// eBPF backend's unwind tables) is waited for. For a program held at its start, and a process
    /// attached to, whose first samples must unwind.
    fn sync_complete(&mut self, st: &mut State) {
        self.sync(st)
    }

    /// [`SampleSource::sync_complete`], waiting until `deadline` at the latest (what is not built
    /// by then is built in the background).
    fn sync_until(&mut self, st: &mut State, _deadline: Option<std::time::Instant>) {
        self.sync(st)
    }

    /// Thread `tid` was stopped by the session (held at its entry), not by the program.
    fn forget_off_cpu(&mut self, _tid: u32) {}

    /// One round of the session's loop, after the rings' records were handled: takes the samples
    /// due, stamped `now`.
    fn poll(
        &mut self,
        _st: &mut State,
        _out: &mut SampleWriter,
        _now: u64,
    ) -> Result<(), ProfileError> {
        Ok(())
    }

    /// A period of a continuous recording ends at `now`: takes every sample counted so far, stamped
    /// `now`, into the period's trace, sampling going on (the perf rings' samples are the session's,
    /// handled up to the period's end).
    fn cut(
        &mut self,
        _st: &mut State,
        _out: &mut SampleWriter,
        _now: u64,
    ) -> Result<(), ProfileError> {
        Ok(())
    }

    /// The next period begins: what the source interned into the last one's trace is forgotten (its
    /// stack ids are that trace's), and its counts ([`SampleSource::truncated`],
    /// [`SampleSource::unwind_stops`], [`SampleSource::unwind_tables`]) start from zero; what it
    /// keeps of the processes (the unwind tables) stays.
    fn new_period(&mut self) {}

    /// Unwind tables built and freed so far, for a source that builds them (the eBPF backend, one
    /// per mapped file).
    fn unwind_tables(&self) -> Option<UnwindTables> {
        None
    }

    /// The end, the events disabled: stops sampling and takes every sample left, stamped `now`.
    fn finish(
        &mut self,
        _st: &mut State,
        _out: &mut SampleWriter,
        _now: u64,
    ) -> Result<(), ProfileError> {
        Ok(())
    }

    /// Bytes read from the kernel besides the rings'.
    fn kernel_bytes(&self) -> u64 {
        0
    }

    /// Stacks the source could not finish (counted with the unwind errors).
    fn truncated(&self) -> u64 {
        0
    }

    /// Of them, per reason, for the trace's UnwindStops chunk; `None` for a source that keeps none
    /// (the perf_event backend counts its unwind errors alone).
    fn unwind_stops(&self) -> Option<ferrotrace_core::schema::UnwindStops> {
        None
    }

    /// What the in-kernel unwinder did, if the source has one.
    fn unwinder_work(&self) -> Option<BpfUnwinderWork> {
        None
    }

    /// What the summary should say of this source, given the `samples` recorded.
    fn warnings(&self, _samples: u64, _warnings: &mut Vec<String>) {}
}

/// The perf_event backend: samples arrive in the rings with the side-band records and are unwound
/// by [`State::handle`]; it keeps nothing of its own.
pub(super) struct RingSamples;

impl SampleSource for RingSamples {
    fn counts_in_kernel(&self) -> bool {
        false
    }

    fn holds_at_entry(&self) -> bool {
        false
    }

    /// The processes changed and exited are the eBPF backend's to-do list; nothing here reads
    /// them (a continuous recording would keep them for hours).
    fn sync(&mut self, st: &mut State) {
        st.changed_spaces.clear();
        st.exited.clear();
    }
}

/// What the eBPF backend's programs are loaded into: storage the session keeps for as long as the
/// source lives.
#[cfg(feature = "bpf")]
pub(super) type BpfStorage = std::mem::MaybeUninit<ferrotrace_bpf::OpenObject>;
/// Built without the `bpf` feature: nothing to load into.
#[cfg(not(feature = "bpf"))]
pub(super) struct BpfStorage;

/// Storage for [`load`], not yet loaded into.
pub(super) fn storage() -> BpfStorage {
    #[cfg(feature = "bpf")]
    return std::mem::MaybeUninit::uninit();
    #[cfg(not(feature = "bpf"))]
    BpfStorage
}

/// The source of `backend`, loaded (the eBPF programs are checked by the kernel's verifier here, the
/// likeliest failure, before the program starts). Without the `bpf` feature `--bpf` is refused in
/// one line that says how to get it.
pub(super) fn load<'s>(
    backend: Backend,
    storage: &'s mut BpfStorage,
    every_process: bool,
) -> Result<Box<dyn SampleSource + 's>, ProfileError> {
    match backend {
        Backend::PerfEvent => Ok(Box::new(RingSamples)),
        #[cfg(feature = "bpf")]
        Backend::Bpf => Ok(Box::new(super::bpf_session::BpfSession::load(
            storage,
            every_process,
        )?)),
        #[cfg(not(feature = "bpf"))]
        Backend::Bpf => {
            let (BpfStorage, _) = (storage, every_process);
            Err(ProfileError::BpfNotBuilt)
        }
    }
}
