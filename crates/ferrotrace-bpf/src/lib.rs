//! In-kernel stack unwinding and aggregation for `ferrotrace profile --bpf`: the BPF programs
//! (`src/bpf/profile.bpf.c`, compiled by clang in build.rs), their loader, and the unwind tables they
//! read.
//!
//! What it is for: on each sample of a perf event (cpu-clock), kernel tracepoint or uprobe it is
//! attached to, the BPF program unwinds the current thread's user stack *in the kernel* — by the DWARF
//! rows that [`tables`] builds from each module's `.eh_frame`, by frame pointers where a module has no
//! rows — takes the kernel stack, and counts the sample per (process, thread, sampler, kernel stack,
//! user stack) in a BPF map. No stack bytes are copied to user space per sample: [`Bpf::drain`] reads
//! the counts, and each distinct stack is read once ([`Bpf::user_stack`], [`Bpf::kernel_stack`]).
//! A module's rows go into one shared table with a page index ([`tables::PageIndex`]: the rows of each
//! 256-byte page of its text), so that finding the row of an address costs one lookup and a search of
//! at most 9 steps; [`Bpf::add_rows`] places both.
//! The user stack is read from memory in windows, not word by word: 4 KiB from the stack pointer up
//! at each sample (up to the thread's stack end, learnt in task storage when a window first runs past
//! it), then 1 KiB from any saved word above; [`Stats::user_reads`] counts the reads.
//! The caller (`ferrotrace-profile`'s recorder) opens the perf events, tells which processes have which mappings
//! ([`Bpf::set_process`]), symbolizes and writes the trace.
//!
//! What it is not for: opening perf events, following processes or writing traces (the recorder's),
//! symbolization (`ferrotrace-analysis`), architectures other than x86_64.

mod free_list;
pub mod tables;

use std::collections::HashMap;
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::sync::Mutex;

use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::{Link, MapCore, MapFlags, PerfEventOpts};

pub use libbpf_rs::OpenObject;
pub use tables::Row;

#[allow(
    clippy::all,
    clippy::undocumented_unsafe_blocks,
    missing_docs,
    unsafe_op_in_unsafe_fn,
    unused_imports
)]
mod skel {
    include!(concat!(env!("OUT_DIR"), "/profile.skel.rs"));
}

use skel::types::{count, count_key, mapping, process, ustack};

/// Frames of a user stack the BPF program keeps (`MAX_DEPTH`).
pub const MAX_DEPTH: usize = 127;
/// Executable mappings per process (`MAX_MAPPINGS`).
pub const MAX_MAPPINGS: usize = 512;
/// Mapping lists held at once (`MAX_SLOTS`): processes followed, plus one spare per change.
const MAX_SLOTS: u32 = 1024;
/// Unwind rows of all modules together (`MAX_ROWS`).
pub const MAX_ROWS: usize = 1 << 22;
/// Page index entries of all modules together (`MAX_PAGES`): 1 GiB of text in 256-byte pages.
pub const MAX_PAGES: usize = 1 << 22;

/// Why an unwind stopped before the outermost frame (`ustack.flags`). The reasons are core's
/// (`ferrotrace_core::schema::unwind_stop`, by which a trace's UnwindStops chunk counts); the BPF
/// program's `TRUNC_*` defines equal them (`tests/defines.rs` checks it).
pub mod trunc {
    pub use ferrotrace_core::schema::unwind_stop::{
        ANY, BAD_FP, DEPTH, NO_MAPPING, NO_PROCESS, READ, UNSUPPORTED,
    };
    /// Not a truncation: some frames were walked by frame pointer.
    pub const WALKED_FP: u32 = 1 << 8;
}

/// Statistic counters (`STAT_*`), summed over CPUs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Samples and probe hits seen by the programs.
    pub samples: u64,
    /// Of them, user stacks that stopped early.
    pub truncated: u64,
    /// User stacks not stored because the stack map was full.
    pub ustacks_full: u64,
    /// Samples not counted because the count map was full.
    pub counts_full: u64,
    /// Samples of a thread without user registers (a kernel thread).
    pub no_user: u64,
    /// Kernel stacks not stored (the stack map full, or a hash collision).
    pub kstack_failed: u64,
    /// User frames unwound in all.
    pub frames: u64,
    /// Reads of user memory by the unwinder: one stack window per sample (two when the first ran
    /// past the stack's end), one per saved word beyond the window.
    pub user_reads: u64,
}

/// Where [`Bpf::add_rows`] placed a module's rows and page index in the shared table.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RowRange {
    /// First row.
    pub start: u32,
    /// Rows.
    pub len: u32,
    /// Stated address of the module's first page ([`tables::PageIndex::base`]).
    pub page_base: u64,
    /// Its first page in the shared index (`struct page`: the rows of one page).
    pub pages_start: u32,
    /// Its pages (the index has one entry more).
    pub pages_len: u32,
}

/// One executable mapping of a process, for [`Bpf::set_process`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProcessMapping {
    /// First runtime address.
    pub start: u64,
    /// One past the last.
    pub end: u64,
    /// Runtime address minus the address stated in the file (the rows' addresses).
    pub bias: u64,
    /// The module's rows; `None` walks its frames by frame pointer.
    pub rows: Option<RowRange>,
}

/// Where an event's file descriptor comes from: the BPF program type differs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventType {
    /// A software or hardware perf event (cpu-clock).
    PerfEvent,
    /// A kernel tracepoint opened as a perf event.
    Tracepoint,
    /// A uprobe (created through tracefs) opened as a perf event.
    Uprobe,
    /// The tracepoint `sched:sched_switch` opened as a perf event, for off-CPU time: each sample is
    /// a stretch off the CPU, its stacks those at which the thread left, weighing the nanoseconds
    /// until it ran again (counted at that moment).
    OffCpu,
}

/// Samples counted for one (process, thread, sampler, kernel stack, user stack).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Count {
    /// Process id.
    pub pid: u32,
    /// Thread id.
    pub tid: u32,
    /// The sampler given to [`Bpf::attach`].
    pub sampler: u32,
    /// Id for [`Bpf::kernel_stack`]; `None` when the sample was taken in user mode.
    pub kernel_stack: Option<u32>,
    /// Key for [`Bpf::user_stack`]; `None` for a thread without user space.
    pub user_stack: Option<u64>,
    /// The user stack's leaf address: all that is left of it when the stack map was full.
    pub user_leaf: Option<u64>,
    /// Samples.
    pub count: u64,
    /// Nanoseconds they stand for (off-CPU); 0 for the others, whose weight is their sampler's.
    pub weight: u64,
}

/// A user stack as the BPF program unwound it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UserStack {
    /// The leaf's exact address, then return addresses, outward.
    pub addrs: Vec<u64>,
    /// [`trunc`] bits.
    pub flags: u32,
}

impl UserStack {
    /// True when the unwinder stopped before the outermost frame.
    pub fn truncated(&self) -> bool {
        self.flags & trunc::ANY != 0
    }
}

/// Why loading or driving the BPF programs failed; prints as one line.
#[derive(Debug)]
pub struct BpfError {
    what: String,
    detail: String,
}

impl BpfError {
    fn new(what: impl Into<String>, e: impl std::fmt::Display) -> BpfError {
        BpfError {
            what: what.into(),
            detail: e.to_string(),
        }
    }
}

impl std::fmt::Display for BpfError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.what, self.detail)
    }
}

impl std::error::Error for BpfError {}

/// libbpf's last messages (the verifier's log when a program is refused), for the error message.
static LIBBPF_LOG: Mutex<Vec<String>> = Mutex::new(Vec::new());

fn keep_libbpf_log(level: libbpf_rs::PrintLevel, msg: String) {
    if std::env::var_os("FT_BPF_LOG").is_some() {
        eprint!("{msg}");
    }
    if level == libbpf_rs::PrintLevel::Debug {
        return;
    }
    if let Ok(mut log) = LIBBPF_LOG.lock() {
        log.push(msg);
        let excess = log.len().saturating_sub(64);
        log.drain(..excess);
    }
}

/// The last line libbpf printed that says something (the verifier's verdict comes last).
fn last_log_line() -> String {
    let log = LIBBPF_LOG.lock().map(|l| l.join("")).unwrap_or_default();
    log.lines()
        .rev()
        .find(|l| !l.trim().is_empty() && !l.starts_with("--"))
        .unwrap_or("")
        .trim()
        .to_string()
}

/// The loaded BPF programs and maps. Dropping it detaches the programs and frees the maps.
pub struct Bpf<'obj> {
    skel: skel::ProfileSkel<'obj>,
    /// The shared unwind table, mapped into this process (the map is created `BPF_F_MMAPABLE`):
    /// rows are written in place, without a system call per row.
    rows: memmap2::MmapMut,
    /// Its rows not taken by a module.
    free_rows: free_list::FreeList,
    /// The shared page index, mapped likewise.
    pages: memmap2::MmapMut,
    free_pages: free_list::FreeList,
    links: Vec<Link>,
    /// Each process's slot of mappings, and slots free for the next change.
    slots: HashMap<u32, u32>,
    free_slots: Vec<u32>,
    /// Slots replaced by the last change: a program may still be reading them, so they are freed
    /// at the next change.
    retired_slots: Vec<u32>,
    /// Which count map the programs write: the other one is drained.
    active: u32,
}

fn bytes_of<T: Copy>(v: &T) -> &[u8] {
    // SAFETY: T is a plain-data `repr(C)` type of the skeleton; its bytes are readable.
    unsafe { std::slice::from_raw_parts((v as *const T).cast::<u8>(), std::mem::size_of::<T>()) }
}

fn from_bytes<T: Copy + Default>(b: &[u8]) -> Option<T> {
    if b.len() < std::mem::size_of::<T>() {
        return None;
    }
    let mut v = T::default();
    // SAFETY: T is a plain-data `repr(C)` type for which every bit pattern is valid (integers only);
    // `b` holds at least its size.
    unsafe {
        std::ptr::copy_nonoverlapping(
            b.as_ptr(),
            (&mut v as *mut T).cast::<u8>(),
            std::mem::size_of::<T>(),
        )
    };
    Some(v)
}

impl<'obj> Bpf<'obj> {
    /// Loads the programs into the kernel (the verifier checks them here) and maps the unwind table.
    pub fn load(storage: &'obj mut MaybeUninit<OpenObject>) -> Result<Bpf<'obj>, BpfError> {
        assert_eq!(
            std::mem::size_of::<Row>(),
            std::mem::size_of::<skel::types::row>()
        );
        // The page index is written as [lo, hi] pairs: `struct page`, 8 bytes, as its mapping lays
        // out the values of an array map (rounded up to 8).
        assert_eq!(std::mem::size_of::<skel::types::page>(), 8);
        libbpf_rs::set_print(Some((libbpf_rs::PrintLevel::Debug, keep_libbpf_log)));
        let mut open = skel::ProfileSkelBuilder::default()
            .open(storage)
            .map_err(|e| BpfError::new("opening the BPF object", e))?;
        if std::env::var_os("FT_BPF_LOG").is_some() {
            open.progs.on_perf_event.set_log_level(4);
        }
        let skel =
            open.load().map_err(|e| {
                let why = last_log_line();
                BpfError::new(
                    "loading the BPF programs",
                    format!(
                    "{e}{}{why} (needs root or CAP_BPF+CAP_PERFMON, and a kernel >= 5.18 with BTF)",
                    if why.is_empty() { "" } else { "; the kernel said: " }
                ),
                )
            })?;
        // SAFETY: the BPF array map's fd, mapped shared for its whole size; only this process and
        // the BPF programs (which read rows no mapping refers to until written) use it.
        let rows = unsafe {
            memmap2::MmapOptions::new()
                .len(MAX_ROWS * std::mem::size_of::<Row>())
                .map_mut(skel.maps.rows.as_fd().as_raw_fd())
        }
        .map_err(|e| BpfError::new("mapping the unwind table", e))?;
        // SAFETY: as above, for the page index.
        let pages = unsafe {
            memmap2::MmapOptions::new()
                .len(MAX_PAGES * std::mem::size_of::<[u32; 2]>())
                .map_mut(skel.maps.pages.as_fd().as_raw_fd())
        }
        .map_err(|e| BpfError::new("mapping the unwind table's page index", e))?;
        let on_exec = skel.progs.on_exec.attach().map_err(|e| {
            BpfError::new("attaching to the tracepoint sched:sched_process_exec", e)
        })?;
        Ok(Bpf {
            skel,
            rows,
            free_rows: free_list::FreeList::new(MAX_ROWS),
            pages,
            free_pages: free_list::FreeList::new(MAX_PAGES),
            links: vec![on_exec],
            slots: HashMap::new(),
            free_slots: (0..MAX_SLOTS).rev().collect(),
            retired_slots: Vec::new(),
            active: 0,
        })
    }

    /// Copies a module's rows (sorted, as [`tables::build`] returns them) and their page index into
    /// the shared table, where they fit; `None` when they do not (the caller may free the rows of
    /// modules no longer mapped, [`Bpf::remove_rows`], and try again; else the module's frames are
    /// walked by frame pointer).
    pub fn add_rows(&mut self, rows: &[Row]) -> Option<RowRange> {
        if rows.is_empty() {
            return None;
        }
        let index = tables::PageIndex::of(rows, MAX_PAGES + 1)?;
        let start = self.free_rows.take(rows.len())?;
        let Some(pages_start) = self.free_pages.take(index.pages()) else {
            self.free_rows.give(start, rows.len());
            return None;
        };
        // SAFETY: [start, start + len) and [pages_start, + entries) lie within the mappings (taken
        // from their free lists); the BPF programs only read the rows and pages that a process's
        // mappings refer to, and no mapping refers to these now.
        unsafe {
            std::ptr::copy_nonoverlapping(
                rows.as_ptr(),
                self.rows.as_mut_ptr().cast::<Row>().add(start),
                rows.len(),
            );
            let pages = self.pages.as_mut_ptr().cast::<[u32; 2]>().add(pages_start);
            for (p, w) in index.first.windows(2).enumerate() {
                pages.add(p).write([w[0], w[1]]);
            }
        }
        Some(RowRange {
            start: start as u32,
            len: rows.len() as u32,
            page_base: index.base,
            pages_start: pages_start as u32,
            pages_len: index.pages() as u32,
        })
    }

    /// Whether [`Bpf::add_rows`] would find room for `rows` (and their page index).
    pub fn has_room_for(&self, rows: &[Row]) -> bool {
        let (Some(first), Some(last)) = (rows.first(), rows.last()) else {
            return false;
        };
        let pages =
            ((last.pc >> tables::PAGE_SHIFT) - (first.pc >> tables::PAGE_SHIFT) + 1) as usize;
        self.free_rows.fits(rows.len()) && self.free_pages.fits(pages)
    }

    /// Gives a module's rows and page index back to the shared table (its file is no longer
    /// mapped by any process followed: no mapping handed to the kernel refers to them).
    pub fn remove_rows(&mut self, range: RowRange) {
        self.free_rows
            .give(range.start as usize, range.len as usize);
        self.free_pages
            .give(range.pages_start as usize, range.pages_len as usize);
    }

    /// Rows used in the shared table.
    pub fn rows_used(&self) -> usize {
        self.free_rows.used()
    }

    /// Sets process `pid`'s executable mappings (replacing what it had). Returns false when it has
    /// more than [`MAX_MAPPINGS`]: the first ones by address are kept. The list goes into a fresh
    /// slot before the process points to it, so a program unwinding meanwhile reads the old or the new
    /// list, never a mix.
    pub fn set_process(&mut self, pid: u32, maps: &[ProcessMapping]) -> Result<bool, BpfError> {
        let mut sorted = maps.to_vec();
        sorted.sort_by_key(|m| m.start);
        let fits = sorted.len() <= MAX_MAPPINGS;
        sorted.truncate(MAX_MAPPINGS);
        self.free_slots.append(&mut self.retired_slots);
        let Some(slot) = self.free_slots.pop() else {
            return Err(BpfError::new(
                format!("loading the mappings of process {pid}"),
                format!("more than {} processes followed at once", MAX_SLOTS / 2),
            ));
        };
        for (i, m) in sorted.iter().enumerate() {
            let r = m.rows.unwrap_or_default();
            let entry = mapping {
                start: m.start,
                end: m.end,
                bias: m.bias,
                rows_start: r.start,
                rows_len: r.len,
                page_base: r.page_base,
                pages_start: r.pages_start,
                pages_len: r.pages_len,
            };
            let key = slot * MAX_MAPPINGS as u32 + i as u32;
            self.skel
                .maps
                .mappings
                .update(&key.to_ne_bytes(), bytes_of(&entry), MapFlags::ANY)
                .map_err(|e| BpfError::new(format!("loading the mappings of process {pid}"), e))?;
        }
        let p = process {
            slot,
            count: sorted.len() as u32,
        };
        self.skel
            .maps
            .processes
            .update(&pid.to_ne_bytes(), bytes_of(&p), MapFlags::ANY)
            .map_err(|e| BpfError::new(format!("loading the mappings of process {pid}"), e))?;
        if let Some(old) = self.slots.insert(pid, slot) {
            self.retired_slots.push(old);
        }
        Ok(fits)
    }

    /// Forgets process `pid` (it exited).
    pub fn remove_process(&mut self, pid: u32) {
        let _ = self.skel.maps.processes.delete(&pid.to_ne_bytes());
        if let Some(old) = self.slots.remove(&pid) {
            self.retired_slots.push(old);
        }
    }

    /// Runs the unwinder on every sample of the perf event `fd`, counting them under `sampler`. A
    /// program attached to a tracepoint or uprobe event runs for every hit of that tracepoint or probe,
    /// whatever the event's task and CPU (and a second attachment of it is refused): attach it to one
    /// event per sampler; it counts the hits of the processes given to [`Bpf::set_process`].
    pub fn attach(&mut self, ty: EventType, fd: RawFd, sampler: u32) -> Result<(), BpfError> {
        let progs = &self.skel.progs;
        let prog = match ty {
            EventType::PerfEvent => &progs.on_perf_event,
            EventType::Tracepoint => &progs.on_tracepoint,
            EventType::Uprobe => &progs.on_uprobe,
            EventType::OffCpu => &progs.on_sched_switch,
        };
        // libbpf closes the event's descriptor when the link goes: it gets a copy of its own.
        // SAFETY: dup of a descriptor the caller keeps open; the copy is owned by the link.
        let own = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 0) };
        if own < 0 {
            return Err(BpfError::new(
                "duplicating a perf event descriptor",
                std::io::Error::last_os_error(),
            ));
        }
        let link = prog
            .attach_perf_event_with_opts(
                own,
                PerfEventOpts {
                    cookie: u64::from(sampler),
                    ..Default::default()
                },
            )
            .map_err(|e| {
                // SAFETY: the copy made above, which no link took.
                unsafe { libc::close(own) };
                BpfError::new("attaching the BPF program to a perf event", e)
            })?;
        self.links.push(link);
        Ok(())
    }

    /// Detaches every program (no more samples are counted).
    pub fn detach_all(&mut self) {
        self.links.clear();
    }

    /// Forgets that thread `tid` is off the CPU: its stretch (a stop of ours, not the program's
    /// time) is not counted.
    pub fn forget_off_cpu(&mut self, tid: u32) {
        let _ = self.skel.maps.off_cpu.delete(&tid.to_ne_bytes());
    }

    /// True while the kernel side holds mappings of process `pid` ([`Bpf::set_process`]; an exec
    /// of the process drops them).
    pub fn has_process(&self, pid: u32) -> bool {
        matches!(
            self.skel
                .maps
                .processes
                .lookup(&pid.to_ne_bytes(), MapFlags::ANY),
            Ok(Some(_))
        )
    }

    /// Reads and clears the counts: switches the programs to the other count map, then empties the one
    /// they wrote (and, at the end, call it twice to empty both). Each count is taken out with one
    /// atomic lookup-and-delete, so no increment is lost.
    pub fn drain(&mut self, mut each: impl FnMut(Count)) -> Result<usize, BpfError> {
        let draining = self.active;
        self.active ^= 1;
        self.skel
            .maps
            .control
            .update(
                &0u32.to_ne_bytes(),
                &self.active.to_ne_bytes(),
                MapFlags::ANY,
            )
            .map_err(|e| BpfError::new("switching the count maps", e))?;
        let map = if draining == 0 {
            &self.skel.maps.counts0
        } else {
            &self.skel.maps.counts1
        };
        let keys: Vec<Vec<u8>> = map.keys().collect();
        let mut n = 0;
        for k in keys {
            let Ok(Some(v)) = map.lookup_and_delete(&k) else {
                continue;
            };
            let (Some(key), Some(count)) = (from_bytes::<count_key>(&k), from_bytes::<count>(&v))
            else {
                continue;
            };
            n += 1;
            each(Count {
                pid: key.pid,
                tid: key.tid,
                sampler: key.sampler,
                kernel_stack: u32::try_from(key.kstack).ok(),
                user_stack: (key.ustack != 0).then_some(key.ustack),
                user_leaf: (key.ustack != 0 && key.uleaf != 0).then_some(key.uleaf),
                count: count.samples,
                weight: count.weight,
            });
        }
        Ok(n)
    }

    /// The user stack stored under `key`.
    pub fn user_stack(&self, key: u64) -> Option<UserStack> {
        let v = self
            .skel
            .maps
            .ustacks
            .lookup(&key.to_ne_bytes(), MapFlags::ANY)
            .ok()??;
        let s: ustack = from_bytes(&v)?;
        let len = (s.len as usize).min(MAX_DEPTH);
        Some(UserStack {
            addrs: s.addrs[..len].to_vec(),
            flags: s.flags,
        })
    }

    /// Takes the user stacks stored under `keys` out of the stack map, once they were read: the
    /// programs store a stack again for a count that is new in its map, so the map need only hold
    /// the stacks of the counts not drained yet (it was never emptied, and filled: issue 37 item 1).
    pub fn forget_user_stacks(&mut self, keys: &[u64]) {
        for k in keys {
            let _ = self.skel.maps.ustacks.delete(&k.to_ne_bytes());
        }
    }

    /// The kernel stack stored under `id`, leaf first.
    pub fn kernel_stack(&self, id: u32) -> Option<Vec<u64>> {
        let v = self
            .skel
            .maps
            .kstacks
            .lookup(&id.to_ne_bytes(), MapFlags::ANY)
            .ok()??;
        Some(
            v.chunks_exact(8)
                .map(|c| u64::from_ne_bytes(c.try_into().unwrap_or_default()))
                .take_while(|&a| a != 0)
                .collect(),
        )
    }

    /// The programs' counters, summed over CPUs.
    pub fn stats(&self) -> Stats {
        let mut sum: HashMap<u32, u64> = HashMap::new();
        for i in 0..8u32 {
            if let Ok(Some(per_cpu)) = self
                .skel
                .maps
                .stats
                .lookup_percpu(&i.to_ne_bytes(), MapFlags::ANY)
            {
                let total = per_cpu.iter().filter_map(|b| from_bytes::<u64>(b)).sum();
                sum.insert(i, total);
            }
        }
        let get = |i| sum.get(&i).copied().unwrap_or(0);
        Stats {
            samples: get(0),
            truncated: get(1),
            ustacks_full: get(2),
            counts_full: get(3),
            no_user: get(4),
            kstack_failed: get(5),
            frames: get(6),
            user_reads: get(7),
        }
    }
}
