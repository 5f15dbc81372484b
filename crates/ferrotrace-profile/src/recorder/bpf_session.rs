//! The eBPF backend's part of a recording session (`--bpf`): loads the BPF programs, attaches them to
//! the session's perf events, keeps each followed process's mappings and its modules' unwind rows in
//! the kernel as the side-band records (MMAP2, FORK, COMM) change them, and turns the counts that the
//! programs aggregate into the same trace a perf_event session writes: one Sample event per counted
//! sample, stamped when the counts were read, its stack interned as usual.
//!
//! What it is not for: opening events, reading the side-band ring or following processes (the
//! recorder's, shared with the perf_event backend), or the in-kernel unwinding itself
//! (`ferrotrace-bpf`).

use std::collections::{HashMap, HashSet};
use std::mem::MaybeUninit;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use ferrotrace_bpf::{Bpf, Count, EventType, OpenObject, ProcessMapping, RowRange, UserStack};
use ferrotrace_core::schema::UnwindStops;

use super::mapped_file::{FileKey, MappedFile};
use super::source::SampleSource;
use super::state::thread_comm;
use super::table_builder::{Built, ReadBytes, TableBuilder};
use super::State;
use crate::cli_args::EventSpec;
use crate::file::SampleWriter;
use crate::modules::{self, Mapping};
use crate::perf::{self, PerfEvent};
use crate::{BpfUnwinderWork, ProfileError, UnwindTables};

/// The path of the pseudo-module whose one frame roots the stacks the BPF unwinder could not finish.
pub(crate) const TRUNCATED: &str = "[truncated]";

/// Bytes the recorder reads from the kernel per count (key and value) and per distinct stack.
const COUNT_BYTES: u64 = 32 + 16;
const USER_STACK_BYTES: u64 = 8 + 8 * (ferrotrace_bpf::MAX_DEPTH as u64 + 1);
const KERNEL_STACK_BYTES: u64 = 8 * 127;

/// How often the counts are read while recording (the trace's readers say it too).
const DRAIN_INTERVAL: Duration =
    Duration::from_millis(ferrotrace_core::schema::source::BPF_DRAIN_MS);

/// An interned stack and whether the unwinder finished it.
#[derive(Clone, Copy)]
struct Leaf {
    node: Option<u32>,
    truncated: bool,
    /// The unwinder's `trunc` bits.
    flags: u32,
}

/// A module's unwind table.
enum Table {
    /// Being built ([`TableBuilder`]): the processes whose mappings are handed to the kernel again
    /// once it is placed.
    Building(Vec<u32>),
    /// Where its rows were placed; `None`: no table (frame pointers).
    Placed(Option<RowRange>),
}

pub(super) struct BpfSession<'obj> {
    bpf: Bpf<'obj>,
    /// Each file's table.
    rows: HashMap<FileKey, Table>,
    /// The tables each process followed uses (its mappings' files), so that the rows of files no
    /// process maps any more can be freed when the shared table is full ([`BpfSession::evict`]).
    tables_of: HashMap<u32, Vec<FileKey>>,
    /// When (in [`BpfSession::sync`] calls) each table was last given up by a process: the
    /// longest unused are freed first.
    released_at: HashMap<FileKey, u64>,
    /// [`BpfSession::sync`] calls so far.
    syncs: u64,
    /// Builds the tables off the loop's thread.
    builder: TableBuilder,
    /// Every process (`-a`): the loop never waits for a table (a process is handed to the kernel
    /// once its tables are in). Otherwise the few processes followed wait for theirs, as at a held
    /// program's start: their stacks unwind from the first sample after the mapping appeared.
    in_background: bool,
    /// Interned stacks per (process, kernel stack, user stack): each distinct stack is read once.
    leaves: HashMap<(u32, Option<u32>, Option<u64>), Leaf>,
    /// The user part of those stacks per (process, user stack): its node, truncated, flags.
    user_nodes: HashMap<(u32, u64), (Option<u32>, bool, u32)>,
    /// Modules without unwind rows, and why (for a warning).
    without_rows: Vec<(String, String)>,
    /// Processes with more executable mappings than the kernel side holds.
    too_many_mappings: Vec<u32>,
    /// Processes whose mappings the kernel side refused, and why (at most a few are kept).
    not_loaded: Vec<(u32, String)>,
    /// Samples whose stack the unwinder did not finish.
    truncated: u64,
    /// Of them, per reason (a `ferrotrace_bpf::trunc` bit; a stack lost to a full stack map is 0).
    truncated_by: UnwindStops,
    /// Bytes read from the BPF maps.
    kernel_bytes: u64,
    /// User stacks taken out of the kernel's map, by key, with the drain that read them: a count
    /// created before they were taken out (in the map the programs write meanwhile) names one
    /// without storing it again, and is drained by one of the next two drains.
    taken_stacks: HashMap<u64, (UserStack, u64)>,
    /// Drains so far.
    drains: u64,
    /// Tables built (placed, or found to have no rows) in the current recording or period.
    tables_built: u64,
    /// Tables whose rows were freed (no process mapped their files any more, and the shared
    /// table was full) in the current recording or period.
    tables_evicted: u64,
    /// When the counts were last read.
    last_drain: Instant,
}

/// A stack's addresses as they are looked up: the first (where the thread was) exactly, the others
/// (return addresses) one byte back, in the call instruction.
fn return_addresses(addrs: &[u64]) -> Vec<u64> {
    addrs
        .iter()
        .enumerate()
        .map(|(i, &a)| if i == 0 { a } else { a.wrapping_sub(1) })
        .collect()
}

/// The program type that can be attached to `spec`'s perf event.
fn event_type(spec: &EventSpec) -> EventType {
    match spec {
        EventSpec::CpuClock(_) => EventType::PerfEvent,
        EventSpec::Uprobe { .. } | EventSpec::Uretprobe { .. } | EventSpec::Usdt { .. } => {
            EventType::Uprobe
        }
        EventSpec::Tracepoint { .. } if spec.is_off_cpu() => EventType::OffCpu,
        EventSpec::Tracepoint { .. } => EventType::Tracepoint,
    }
}

impl<'obj> BpfSession<'obj> {
    /// Loads the programs (the kernel's verifier checks them here); `in_background`: see
    /// [`BpfSession::in_background`].
    pub fn load(
        storage: &'obj mut MaybeUninit<OpenObject>,
        in_background: bool,
    ) -> Result<BpfSession<'obj>, ProfileError> {
        let bpf = Bpf::load(storage).map_err(|e| ProfileError::Bpf(e.to_string()))?;
        let builder = TableBuilder::start().map_err(|source| ProfileError::Sys {
            what: "starting the thread that builds the unwind tables".into(),
            source,
        })?;
        Ok(BpfSession {
            bpf,
            rows: HashMap::new(),
            tables_of: HashMap::new(),
            released_at: HashMap::new(),
            syncs: 0,
            builder,
            in_background,
            leaves: HashMap::new(),
            user_nodes: HashMap::new(),
            without_rows: Vec::new(),
            too_many_mappings: Vec::new(),
            not_loaded: Vec::new(),
            truncated: 0,
            truncated_by: UnwindStops::default(),
            kernel_bytes: 0,
            taken_stacks: HashMap::new(),
            drains: 0,
            tables_built: 0,
            tables_evicted: 0,
            last_drain: Instant::now(),
        })
    }

    /// Stops counting.
    fn detach(&mut self) {
        self.bpf.detach_all();
    }

    /// The rows of the file that process `pid` maps at `mapping`, built from its `.eh_frame` (by
    /// device and inode) at its first mapping: `None` while that table is being built (the process's
    /// mappings are handed over again once it is placed) or when it has none. The table's key goes
    /// to `uses`.
    fn rows_of(
        &mut self,
        pid: u32,
        mapping: &Mapping,
        st: &State,
        uses: &mut Vec<FileKey>,
    ) -> Option<RowRange> {
        let path = st
            .modules
            .get(mapping.module)
            .map(|m| m.path.clone())
            .unwrap_or_default();
        let (key, size, bytes): (FileKey, u64, ReadBytes) = if path.starts_with('/') {
            match MappedFile::open(pid, mapping.start, mapping.end, &path, mapping.file) {
                Ok(f) => (f.key.clone(), f.size, Box::new(move || f.read())),
                Err(why) => {
                    // Said once per path.
                    let key = FileKey::Name(path.clone());
                    if self.rows.insert(key, Table::Placed(None)).is_none() {
                        self.without_rows.push((path, why.into()));
                    }
                    return None;
                }
            }
        } else {
            let name = path.clone();
            // The vDSO and its like: a page or two.
            (
                FileKey::Name(path.clone()),
                0,
                Box::new(move || modules::module_bytes(&name)),
            )
        };
        uses.push(key.clone());
        match self.rows.get_mut(&key) {
            Some(Table::Placed(r)) => return *r,
            Some(Table::Building(waiting)) => {
                if !waiting.contains(&pid) {
                    waiting.push(pid);
                }
                return None;
            }
            None => {}
        }
        self.rows.insert(key.clone(), Table::Building(vec![pid]));
        self.builder.ask(key, path, size, bytes);
        None
    }

    /// Places a table the builder finished in the kernel's shared table, and marks the processes
    /// waiting for it as changed (the next [`SampleSource::sync`] hands them their mappings again).
    fn place(&mut self, built: Built, st: &mut State) {
        let Built { key, path, rows } = built;
        self.tables_built += 1;
        let placed = match rows {
            Ok(rows) => {
                // Full: tables no process maps any more are freed, the longest unused first,
                // until these fit.
                let r = self.bpf.add_rows(&rows).or_else(|| {
                    self.evict(&rows)
                        .then(|| self.bpf.add_rows(&rows))
                        .flatten()
                });
                if r.is_none() {
                    self.without_rows
                        .push((path, "the unwind table is full".into()));
                }
                r
            }
            Err(why) => {
                self.without_rows.push((path, why));
                None
            }
        };
        if let Some(Table::Building(waiting)) = self.rows.insert(key, Table::Placed(placed)) {
            for pid in waiting.into_iter().filter(|p| st.spaces.contains_key(p)) {
                st.changed_spaces.insert(pid);
            }
        }
    }

    /// Frees the rows of tables that no process followed uses, the longest unused first, until
    /// `rows` fit (their files are built again if mapped later); true once they fit. Run when the
    /// shared table is full, so that a recording of hours keeps room for the files it meets, and
    /// a file's table is built once as long as there is room (a compile loop's `cc1`, unused
    /// between two compiles, is freed last).
    fn evict(&mut self, rows: &[ferrotrace_bpf::tables::Row]) -> bool {
        let used: HashSet<&FileKey> = self.tables_of.values().flatten().collect();
        let mut unused: Vec<(u64, FileKey, RowRange)> = self
            .rows
            .iter()
            .filter(|(key, _)| !used.contains(key))
            .filter_map(|(key, t)| match t {
                Table::Placed(Some(r)) => Some((
                    self.released_at.get(key).copied().unwrap_or_default(),
                    key.clone(),
                    *r,
                )),
                _ => None,
            })
            .collect();
        unused.sort_unstable_by_key(|u| u.0);
        for (_, key, range) in unused {
            if self.bpf.has_room_for(rows) {
                break;
            }
            self.rows.remove(&key);
            self.released_at.remove(&key);
            self.bpf.remove_rows(range);
            self.tables_evicted += 1;
        }
        self.bpf.has_room_for(rows)
    }

    /// Process `pid` uses the tables `uses` from now on (none: it is gone); those it used before
    /// are released now.
    fn set_tables_of(&mut self, pid: u32, uses: Option<Vec<FileKey>>) {
        let before = match uses {
            Some(uses) => self.tables_of.insert(pid, uses),
            None => self.tables_of.remove(&pid),
        };
        for key in before.into_iter().flatten() {
            self.released_at.insert(key, self.syncs);
        }
    }

    /// Places every table finished so far.
    fn place_finished(&mut self, st: &mut State) {
        for built in self.builder.finished() {
            self.place(built, st);
        }
    }

    /// The modules whose tables process `pid` waits for (being built).
    fn waited_for(&self, pid: u32) -> impl Iterator<Item = &FileKey> {
        self.rows
            .iter()
            .filter(move |(_, t)| matches!(t, Table::Building(w) if w.contains(&pid)))
            .map(|(k, _)| k)
    }

    /// Whether a table process `pid` waits for is being built.
    fn building_for(&self, pid: u32) -> bool {
        self.waited_for(pid).next().is_some()
    }

    /// Moves the tables that process `pid` waits for to the front of the builder's queue.
    fn promote(&self, pid: u32) {
        let keys: Vec<FileKey> = self.waited_for(pid).cloned().collect();
        if !keys.is_empty() {
            self.builder.promote(&keys);
        }
    }

    /// Reads and clears the counts, writing one Sample per counted sample stamped `time`. Call it
    /// twice at the end (the programs alternate between two count maps).
    fn drain(
        &mut self,
        st: &mut State,
        out: &mut SampleWriter,
        time: u64,
    ) -> Result<(), ProfileError> {
        let mut counts = Vec::new();
        self.bpf
            .drain(|c| counts.push(c))
            .map_err(|e| ProfileError::Bpf(e.to_string()))?;
        self.drains += 1;
        let mut drained_stacks: Vec<u64> = counts.iter().filter_map(|c| c.user_stack).collect();
        drained_stacks.sort_unstable();
        drained_stacks.dedup();
        // Processes sampled before their mappings were handed over (their tables are being built):
        // theirs are built first.
        let mut unwound_early: Vec<u32> = Vec::new();
        for c in counts {
            self.kernel_bytes += COUNT_BYTES;
            let key = (c.pid, c.kernel_stack, c.user_stack);
            let leaf = match self.leaves.get(&key) {
                Some(l) => *l,
                None => {
                    let (l, found) = self.intern(st, &c, out);
                    // Remembered only when its user stack was found (see `user_part`).
                    if found {
                        self.leaves.insert(key, l);
                    }
                    l
                }
            };
            st.threads
                .entry(c.tid)
                .or_insert_with(|| (c.pid, thread_comm(c.pid, c.tid)));
            st.samples += c.count;
            if leaf.truncated {
                self.truncated += c.count;
                self.truncated_by.add(leaf.flags, c.count);
                if leaf.flags & ferrotrace_bpf::trunc::NO_PROCESS != 0
                    && !unwound_early.contains(&c.pid)
                {
                    unwound_early.push(c.pid);
                }
            }
            if Some(c.sampler) == st.off_cpu_event && c.count > 0 {
                // Stretches off the CPU: their time shared out (the remainder on the first).
                let each = c.weight / c.count;
                for i in 0..c.count {
                    let extra = if i == 0 { c.weight % c.count } else { 0 };
                    out.sample(time, c.tid, c.sampler, leaf.node, each + extra);
                }
                continue;
            }
            let weight = st
                .event_weight
                .get(c.sampler as usize)
                .copied()
                .unwrap_or(1);
            for _ in 0..c.count {
                out.sample(time, c.tid, c.sampler, leaf.node, weight);
            }
        }
        // The stacks of this drain's counts, out of the kernel's map (a count new in its map stores
        // its stack again); those read two drains ago, out of ours (every count that could name
        // them without storing them again has been drained).
        self.bpf.forget_user_stacks(&drained_stacks);
        for pid in unwound_early {
            self.promote(pid);
        }
        let drains = self.drains;
        self.taken_stacks.retain(|_, (_, d)| *d + 2 >= drains);
        Ok(())
    }

    /// The user stack stored under `key`: from the kernel's map the first time (then taken out of
    /// it), from [`BpfSession::taken_stacks`] while a count may still name it.
    fn user_stack(&mut self, key: u64) -> Option<UserStack> {
        if let Some((stack, _)) = self.taken_stacks.get(&key) {
            return Some(stack.clone());
        }
        let stack = self.bpf.user_stack(key)?;
        self.kernel_bytes += USER_STACK_BYTES;
        self.taken_stacks.insert(key, (stack.clone(), self.drains));
        Some(stack)
    }

    /// Reads a count's stacks from the kernel and interns them: the kernel frames, then the user
    /// frames, under a [`TRUNCATED`] root when the unwinder stopped early; and whether its user
    /// stack was found (see [`BpfSession::user_part`]).
    fn intern(&mut self, st: &mut State, c: &Count, out: &mut SampleWriter) -> (Leaf, bool) {
        let ((user, truncated, flags), found) = match c.user_stack {
            Some(key) => self.user_part(st, c, key, out),
            None => ((None, false, 0), true),
        };
        let kernel = match c.kernel_stack.and_then(|id| self.bpf.kernel_stack(id)) {
            Some(k) => {
                self.kernel_bytes += KERNEL_STACK_BYTES;
                return_addresses(&k)
            }
            None => Vec::new(),
        };
        let leaf = Leaf {
            // The kernel's frames on top of the user's.
            node: st.intern_stack(c.pid, user, &kernel, out),
            truncated,
            flags,
        };
        (leaf, found)
    }

    /// The user part of count `c`'s stack (stored under `key`), interned once per process: its
    /// node (under a TRUNCATED root when the unwinder stopped early, or only its leaf when the stack
    /// map was full), whether it is truncated, and the unwinder's flags; and whether the stack was
    /// found. One not found (taken out of the map before this count, made earlier, was drained; or
    /// the map was full) is not remembered: the next count of it stores it again.
    fn user_part(
        &mut self,
        st: &mut State,
        c: &Count,
        key: u64,
        out: &mut SampleWriter,
    ) -> ((Option<u32>, bool, u32), bool) {
        if let Some(&known) = self.user_nodes.get(&(c.pid, key)) {
            return (known, true);
        }
        let stack = self.user_stack(key);
        let found = stack.is_some();
        let (frames, truncated, flags) = match stack {
            Some(u) => (return_addresses(&u.addrs), u.truncated(), u.flags),
            // Not found: its leaf is kept.
            None => (c.user_leaf.into_iter().collect(), true, 0),
        };
        let root = truncated.then(|| {
            let module = st.modules.id_for(TRUNCATED);
            st.intern_node(None, module, 0, out)
        });
        let part = (st.intern_stack(c.pid, root, &frames, out), truncated, flags);
        if found {
            self.user_nodes.insert((c.pid, key), part);
        }
        (part, found)
    }

    /// Why stacks were truncated, as "N reason, M reason".
    fn truncation_reasons(&self) -> String {
        self.truncated_by
            .reasons()
            .map(|(n, why)| format!("{n} {why}"))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

impl SampleSource for BpfSession<'_> {
    fn counts_in_kernel(&self) -> bool {
        true
    }

    fn holds_at_entry(&self) -> bool {
        true
    }

    /// Attaches the programs to every sampling event (`event_of` gives an event's index in `specs`).
    fn attach(
        &mut self,
        events: &[PerfEvent],
        event_of: &HashMap<u64, u32>,
        specs: &[EventSpec],
    ) -> Result<(), ProfileError> {
        let mut once = HashSet::new();
        for ev in events.iter().filter(|e| !e.bookkeeping) {
            let Some(&ei) = event_of.get(&ev.id) else {
                continue;
            };
            let ty = event_type(&specs[ei as usize]);
            // A tracepoint's or uprobe's program runs for each hit, whichever event it came through:
            // attached once per tracepoint (a USDT probe's sites are one each).
            if let perf::EventKind::Tracepoint { id } = ev.kind {
                if !once.insert(id) {
                    continue;
                }
            }
            self.bpf
                .attach(ty, ev.fd.as_raw_fd(), ei)
                .map_err(|e| ProfileError::Bpf(e.to_string()))?;
        }
        Ok(())
    }

    /// [`SampleSource::sync`], then waits for every table asked for and hands their processes over.
    fn sync_complete(&mut self, st: &mut State) {
        self.sync_until(st, None);
    }

    /// [`SampleSource::sync_complete`] until `deadline` at the latest.
    fn sync_until(&mut self, st: &mut State, deadline: Option<Instant>) {
        self.sync(st);
        while let Some(built) = self.builder.next(deadline) {
            self.place(built, st);
            self.sync(st);
        }
    }

    /// Forgets that thread `tid` is off the CPU (it is held by us).
    fn forget_off_cpu(&mut self, tid: u32) {
        self.bpf.forget_off_cpu(tid);
    }

    /// What the programs' unwinder did so far, in all.
    fn unwinder_work(&self) -> Option<BpfUnwinderWork> {
        let stats = self.bpf.stats();
        Some(BpfUnwinderWork {
            frames: stats.frames,
            user_reads: stats.user_reads,
        })
    }

    /// Hands the kernel the mappings of every process whose address space changed since the last call,
    /// and forgets those of the processes that exited (their slots are reused).
    fn sync(&mut self, st: &mut State) {
        self.syncs += 1;
        let mut changed: Vec<u32> = st.changed_spaces.drain().collect();
        changed.sort_unstable();
        let exited: HashSet<u32> = st.exited.drain(..).collect();
        for pid in changed.iter().filter(|p| !exited.contains(p)) {
            let pid = *pid;
            self.leaves.retain(|k, _| k.0 != pid);
            self.user_nodes.retain(|k, _| k.0 != pid);
            let Some(space) = st.spaces.get(&pid) else {
                self.bpf.remove_process(pid);
                self.set_tables_of(pid, None);
                continue;
            };
            let maps: Vec<Mapping> = space.mappings().to_vec();
            let mut list = Vec::with_capacity(maps.len());
            let mut uses = Vec::new();
            for m in &maps {
                list.push(ProcessMapping {
                    start: m.start,
                    end: m.end,
                    bias: m.bias,
                    rows: self.rows_of(pid, m, st, &mut uses),
                });
            }
            self.set_tables_of(pid, Some(uses));
            if self.building_for(pid) {
                // Handed over once its tables are placed: until then its stacks stop where its
                // mappings did (counted "before the process's mappings were loaded"), rather than
                // be walked by frame pointer through code that keeps none.
                continue;
            }
            match self.bpf.set_process(pid, &list) {
                Ok(true) => {}
                Ok(false) => {
                    if !self.too_many_mappings.contains(&pid) {
                        self.too_many_mappings.push(pid);
                    }
                }
                // The others are still followed.
                Err(e) if self.not_loaded.len() < 8 => self.not_loaded.push((pid, e.to_string())),
                Err(_) => {}
            }
        }
        for pid in exited {
            self.bpf.remove_process(pid);
            self.set_tables_of(pid, None);
        }
    }

    /// Bytes read from the BPF maps so far.
    fn kernel_bytes(&self) -> u64 {
        self.kernel_bytes
    }

    /// Samples whose stack the unwinder did not finish, so far.
    fn truncated(&self) -> u64 {
        self.truncated
    }

    /// Of them, per reason.
    fn unwind_stops(&self) -> Option<UnwindStops> {
        Some(self.truncated_by)
    }

    /// Adds what the user should know about the session's stacks (of `samples` in all) to `warnings`:
    /// modules walked by frame pointer, processes whose mappings the kernel side lacks, truncations.
    fn warnings(&self, samples: u64, warnings: &mut Vec<String>) {
        for (path, why) in &self.without_rows {
            warnings.push(format!(
                "{path}: no unwind table ({why}): its frames were walked by frame pointer"
            ));
        }
        for (pid, why) in &self.not_loaded {
            warnings.push(format!(
                "the mappings of process {pid} could not be loaded into the kernel ({why}): its \
                 stacks are truncated"
            ));
        }
        for pid in &self.too_many_mappings {
            warnings.push(format!(
                "process {pid} has more than {} executable mappings: addresses in the others end \
                 their stacks (truncated)",
                ferrotrace_bpf::MAX_MAPPINGS
            ));
        }
        if self.truncated > 0 {
            warnings.push(format!(
                "{} of {} stacks could not be unwound to their first frame in the kernel ({}): \
                 they are rooted at [truncated]",
                self.truncated,
                samples,
                self.truncation_reasons()
            ));
        }
    }

    /// Reads the counts every [`DRAIN_INTERVAL`] (and clears them, so that the count map never fills
    /// on a long run); the samples read are stamped with the time they were read.
    fn poll(
        &mut self,
        st: &mut State,
        out: &mut SampleWriter,
        now: u64,
    ) -> Result<(), ProfileError> {
        if self.in_background {
            self.place_finished(st);
            self.sync(st);
        } else {
            self.sync_complete(st);
        }
        if self.last_drain.elapsed() < DRAIN_INTERVAL {
            return Ok(());
        }
        self.last_drain = Instant::now();
        self.drain(st, out, now)
    }

    /// One drain at the period's end: the counts the programs made since the last drain (the count
    /// map being written from then on is drained into the next period).
    fn cut(
        &mut self,
        st: &mut State,
        out: &mut SampleWriter,
        now: u64,
    ) -> Result<(), ProfileError> {
        self.place_finished(st);
        self.sync(st);
        self.last_drain = Instant::now();
        self.drain(st, out, now)
    }

    fn new_period(&mut self) {
        self.leaves.clear();
        self.user_nodes.clear();
        self.truncated = 0;
        self.truncated_by = UnwindStops::default();
        self.tables_built = 0;
        self.tables_evicted = 0;
    }

    fn unwind_tables(&self) -> Option<UnwindTables> {
        Some(UnwindTables {
            built: self.tables_built,
            freed: self.tables_evicted,
        })
    }

    fn finish(
        &mut self,
        st: &mut State,
        out: &mut SampleWriter,
        now: u64,
    ) -> Result<(), ProfileError> {
        self.detach();
        // Both count maps: the one being written and the one drained last.
        self.place_finished(st);
        self.sync(st);
        self.drain(st, out, now)
            .and_then(|()| self.drain(st, out, now))
    }
}
