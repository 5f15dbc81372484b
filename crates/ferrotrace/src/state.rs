//! The runtime's process-wide state, in one place (tracing-core's `dispatcher.rs` habit): what the
//! runtime keeps for the whole process besides the runtime itself, who sets each part, and what a
//! retired recording ([`Process::recording_retired`]) and a forked child ([`Process::forked_child`])
//! reset. The lifecycle calls those two; no room resets its part itself.
//!
//! [`PROCESS`] holds:
//! * what outlives every recording, for the next one to reuse: the address ranges of retired chunk
//!   pools (`buffers::pool`), the stub pages (`patch::sites`), the mcount site table's contents
//!   (`recorders::mcount::sites`), the next tracepoint id (`recorders::tracepoint::control`), the
//!   `tracing` layer's hook (`recorders::callsites`), the thread that called `exit`
//!   (`buffers::thread`), and the locks that serialise code changes (`patch::text`) and tracepoint
//!   decisions;
//! * what belongs to one recording, reset when it retires: the sites it patched (put back and
//!   forgotten by `patch::sites::unpatch_all` before it stops), the `--trace` globs of the callsite
//!   recorder, its selection of every event and the descriptions it has not handed to the collector
//!   yet;
//! * the allocation recorder's settings, set once by its start (a recording of allocations is never
//!   retired: attaching and the program's own recording refuse them).
//!
//! The runtime itself (`lifecycle::runtime::get`, set by `publish` and `retire`) is a pointer beside
//! its type; that module is above this one, which imports nothing of the runtime. What stays outside
//! `PROCESS`, each with a line saying why where it is declared:
//! * what the assembly and the per-call fast path read with one load at a fixed address
//!   (`FERROTRACE_TLS_OFFSET`, `FERROTRACE_CPU_OFFSET`, `FERROTRACE_XSAVE_BYTES`, `FERROTRACE_SITES`,
//!   the allocation hooks' `TLS_OFFSET`) and the thread-local blocks (`HOT`, `COLD`, `ALLOC_THREAD`);
//! * state whose type is its room's own and which is never reset: the allocation recorder's interner
//!   and sampled set, the unwind rules and objects (`arch::unwind`), the retired pools' queues, the
//!   signal handlers' chain (`lifecycle::exit`), the membarrier registration (`patch::text`);
//! * constants of the build: the recorder table (`recorders::ALL`), the linked runtime's marker and
//!   constructor, the tracepoint sections' bounds and the tracepoints' own descriptors.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

/// The process's state (see the module's documentation): one value, [`PROCESS`].
pub struct Process {
    /// `buffers::pool`: address ranges of retired pools, each `(start, bytes)`: mapped, holding no
    /// memory, and reused by the next pool of the same size, so that attaching again and again neither
    /// grows the process nor adds mappings. Kept for the process's life.
    pub spare_pools: Mutex<Vec<(usize, usize)>>,
    /// `buffers::thread`: the thread that called `exit` (0: none yet), whose TLS destructors `exit`
    /// runs before the atexit handlers: like the main thread's, they are not its end.
    pub exiting: AtomicI64,
    /// `lifecycle::attach`: an attached runtime's start runs on its thread (it is not published yet):
    /// a second attach meanwhile is refused.
    pub attach_starting: AtomicBool,
    /// `patch::sites`: every site patched since the last `unpatch_all`.
    pub patched: Mutex<Vec<Patched>>,
    /// `patch::sites`: every stub page made, with the targets of its stubs: never unmapped (a thread
    /// may be in a stub), and reused by a later patch that needs the same targets within reach
    /// (attaching again to a process, a rescan) rather than adding a page each time.
    pub stub_pages: Mutex<Vec<(u64, [u64; 11])>>,
    /// `patch::text`: serialises every change to code made by the runtime.
    pub text_lock: Mutex<()>,
    /// `recorders::mcount::sites`: every site the hooks' table holds, key to record word. A site found
    /// again (each attach discovers every object anew) takes its new word, and does not grow the table;
    /// kept for the process's life, as the tables the hooks may still read are.
    pub mcount_sites: Mutex<BTreeMap<u64, u64>>,
    /// `recorders::tracepoint::control`: serialises the decisions about which sites fire: a
    /// tracepoint's sites are patched while ferrotrace records it (`enable`) or while a tracer is
    /// attached to its SDT probe (`usdt`).
    pub tracepoint_control: Mutex<()>,
    /// `recorders::tracepoint::control`: the next tracepoint id for a callsite registered while the
    /// program runs, after those of the static tracepoints (`assign_ids`). Never reset: the `tracing`
    /// layer keeps the ids it was given.
    pub next_tracepoint_id: AtomicU32,
    /// `recorders::callsites`.
    pub callsites: Callsites,
    /// `recorders::alloc`.
    pub alloc: Alloc,
}

/// What patching changed, to undo when a recording that patched while the program ran stops
/// (`patch::sites::unpatch_all`).
pub enum Patched {
    /// An XRay sled at this address, whose first two bytes (its short jump or `ret`) were these.
    Sled(u64, [u8; 2]),
    /// 5 bytes at this address, which were these (a NOP, or a function's first instructions) and are
    /// now these (a call of a hook, or a jump to the function's trampoline).
    Five(u64, [u8; 5], [u8; 5]),
    /// A GOT slot of mcount/`__fentry__` calls at this address, which held this target and now holds
    /// this hook.
    Slot(u64, u64, u64),
}

/// The callsite recorder's state (`recorders::callsites`).
pub struct Callsites {
    /// The `--trace` globs of the recording: `FERROTRACE_TRACE` read at start on the thread that
    /// starts the runtime (the environment is not read later, while the program's threads may change
    /// it), or the attach's. The recording's: reset when it retires.
    pub trace_globs: Mutex<Option<String>>,
    /// The layer's `crate::callsites::set_recording_hook`, as an address (0: no layer in the program).
    /// The program's: kept.
    pub recording_hook: AtomicUsize,
    /// Descriptions not yet handed to the collector, `(count, encoded entries)`: of callsites, then of
    /// their messages. The recording's: reset when it retires, and in a forked child, whose trace
    /// starts with them already (the runtime's header).
    pub pending: Mutex<[(u64, Vec<u8>); 2]>,
    /// Set while [`Callsites::pending`] holds something: the collector's check before each chunk is
    /// one load.
    pub has_pending: AtomicBool,
    /// Every event callsite is selected: the program started the recording for them
    /// (`crate::callsites::record_to_file`). The recording's: reset when it retires.
    pub all_events: AtomicBool,
}

/// The allocation recorder's settings (`recorders::alloc`), set by its start; read by its hooks, one
/// load each at a fixed address as before they lived here.
pub struct Alloc {
    /// Sampling: the mean number of bytes between two sampled allocations (0: every allocation).
    pub sample_interval: AtomicU64,
    /// How many frames of each stack are walked.
    pub depth: AtomicUsize,
    /// Walk frame pointers only (`FERROTRACE_ALLOC_UNWIND=fp`), not unwind rules.
    pub fp_only: AtomicBool,
}

/// The process's state.
pub static PROCESS: Process = Process {
    spare_pools: Mutex::new(Vec::new()),
    exiting: AtomicI64::new(0),
    attach_starting: AtomicBool::new(false),
    patched: Mutex::new(Vec::new()),
    stub_pages: Mutex::new(Vec::new()),
    text_lock: Mutex::new(()),
    mcount_sites: Mutex::new(BTreeMap::new()),
    tracepoint_control: Mutex::new(()),
    next_tracepoint_id: AtomicU32::new(1),
    callsites: Callsites {
        trace_globs: Mutex::new(None),
        recording_hook: AtomicUsize::new(0),
        pending: Mutex::new([(0, Vec::new()), (0, Vec::new())]),
        has_pending: AtomicBool::new(false),
        all_events: AtomicBool::new(false),
    },
    alloc: Alloc {
        sample_interval: AtomicU64::new(0),
        depth: AtomicUsize::new(0),
        fp_only: AtomicBool::new(false),
    },
};

impl Process {
    /// A recording retired (an attach's host stopped it, or the program stopped its own; its sites
    /// put back already): what belonged to it goes, so that the next recording starts as the first
    /// did. What outlives recordings stays (see the module's documentation).
    pub fn recording_retired(&self) {
        *self
            .callsites
            .trace_globs
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = None;
        self.callsites.all_events.store(false, Ordering::Relaxed);
        *self
            .callsites
            .pending
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Default::default();
        self.callsites.has_pending.store(false, Ordering::Relaxed);
    }

    /// In a forked child that starts its own recording, before it starts: the descriptions its
    /// parent's collector had not taken yet are in the header the child's trace starts with, and
    /// are not written again. (Not waited for: a lock a parent's thread held at the fork is never
    /// released in the child, whose only thread then leaves the descriptions as they are.)
    pub fn forked_child(&self) {
        if let Ok(mut pending) = self.callsites.pending.try_lock() {
            *pending = Default::default();
            self.callsites.has_pending.store(false, Ordering::Relaxed);
        }
    }
}
