//! What a recording session builds as it goes: each followed process's address space (its mappings,
//! for naming and unwinding), its threads' names, the interned stacks, and the counts the summary
//! reports; and the handling of every record the perf rings carry (samples unwound here, mappings,
//! threads, forks, exits, losses, context switches).

use std::collections::{HashMap, HashSet};
use std::path::Path;

use ferrotrace_core::jit;
use ferrotrace_core::schema::StackNode;
use framehop::x86_64::CacheX86_64;

use crate::file::{ModuleDesc, SampleWriter};
use crate::modules::{self, FileId, ModuleTable, Space, KERNEL_MODULE};
use crate::perf::{self, rt};

/// Interning state built while recording.
pub(crate) struct State {
    pub(super) dwarf: bool,
    pub(super) modules: ModuleTable,
    pub(super) spaces: HashMap<u32, Space>,
    /// Processes whose address space changed since the eBPF backend last loaded it into the kernel.
    pub(super) changed_spaces: HashSet<u32>,
    /// Processes that exited since (their spaces stay here for the samples still to come).
    pub(super) exited: Vec<u32>,
    /// Threads (tid → pid) that exited in the current period, and in the period before: a
    /// continuous recording forgets them a period after their exit ([`State::forget_gone`]), when no
    /// sample of theirs can still come.
    gone: HashMap<u32, u32>,
    gone_before: HashMap<u32, u32>,
    pub(super) caches: HashMap<u32, CacheX86_64>,
    pub(super) threads: HashMap<u32, (u32, String)>,
    /// Interned stack nodes: (parent, module, module-relative address) → id.
    pub(super) stack_ids: HashMap<(Option<u32>, u32, u64), u32>,
    pub(super) id_to_event: HashMap<u64, u32>,
    /// Per event: the weight of one of its samples (ns of CPU for the timer, 1 for a probe hit).
    pub(super) event_weight: Vec<u64>,
    /// The off-CPU event, if recorded.
    pub(super) off_cpu_event: Option<u32>,
    /// Off-CPU pairing: a thread's last switch out (time, stack) waiting for its switch back in, and a
    /// switch in seen before its switch out (the two can come from different CPUs' rings).
    pub(super) switched_out: HashMap<u32, (u64, Option<u32>)>,
    pub(super) switched_in: HashMap<u32, u64>,
    /// Per event: its samples carry user registers and a stack copy.
    pub(super) event_regs: Vec<bool>,
    pub(super) samples: u64,
    pub(super) lost: u64,
    /// Samples whose layout could not be read (counted as lost).
    pub(super) unreadable: u64,
    /// Bookkeeping records (maps, threads) the kernel dropped, when it says so.
    pub(super) lost_bookkeeping: u64,
    pub(super) unwind_errors: u64,
    /// Frame-pointer stacks cut where they ran into an address of no mapped object.
    pub(super) junk_stacks: u64,
    pub(super) scratch: Vec<u64>,
    pub(super) write_error: Option<std::io::Error>,
}

impl State {
    /// The state of a session that unwinds with DWARF rows here (`dwarf`), whose events' ids are
    /// `id_to_event` (perf's id → index in the configuration's events), with each event's sample
    /// weight, its off-CPU event if any, and which events' samples carry user registers.
    pub(super) fn new(
        dwarf: bool,
        id_to_event: HashMap<u64, u32>,
        event_weight: Vec<u64>,
        off_cpu_event: Option<u32>,
        event_regs: Vec<bool>,
    ) -> State {
        State {
            dwarf,
            modules: ModuleTable::new(),
            spaces: HashMap::new(),
            changed_spaces: HashSet::new(),
            exited: Vec::new(),
            gone: HashMap::new(),
            gone_before: HashMap::new(),
            caches: HashMap::new(),
            threads: HashMap::new(),
            stack_ids: HashMap::new(),
            id_to_event,
            event_weight,
            off_cpu_event,
            switched_out: HashMap::new(),
            switched_in: HashMap::new(),
            event_regs,
            samples: 0,
            lost: 0,
            unreadable: 0,
            lost_bookkeeping: 0,
            unwind_errors: 0,
            junk_stacks: 0,
            scratch: Vec::new(),
            write_error: None,
        }
    }

    pub(super) fn space(&mut self, pid: u32) -> &mut Space {
        let dwarf = self.dwarf;
        let modules = &mut self.modules;
        let changed = &mut self.changed_spaces;
        self.spaces.entry(pid).or_insert_with(|| {
            changed.insert(pid);
            // Unknown process (raced its fork record, or attached): read its maps while it runs.
            let mut s = Space::new(dwarf);
            for (start, len, off, path, file) in modules::proc_maps(pid) {
                s.add_mapping(modules, start, len, off, &path, file);
            }
            s
        })
    }

    /// Adds a mapping of `path` to process `pid`'s address space.
    pub(super) fn add_mapping(
        &mut self,
        pid: u32,
        addr: u64,
        len: u64,
        pgoff: u64,
        path: &str,
        file: Option<FileId>,
    ) {
        self.space(pid);
        // Anonymous code (a JIT's) is named by the process's perf map, at run-time addresses: the
        // mapping is stated at itself (its `pgoff` is no file offset).
        let (path, pgoff) = if path == jit::ANON_MAPPING {
            let map = jit::perf_map_path(pid);
            match Path::new(&map).is_file() {
                true => (map, addr),
                false => (jit::ANON_MODULE.to_string(), addr),
            }
        } else {
            (path.to_string(), pgoff)
        };
        if let Some(space) = self.spaces.get_mut(&pid) {
            space.add_mapping(&mut self.modules, addr, len, pgoff, &path, file);
            self.changed_spaces.insert(pid);
        }
    }

    /// Interns the stack `frames` (lookup addresses of process `pid`, leaf first) under `root`; returns
    /// its leaf node.
    pub(super) fn intern_stack(
        &mut self,
        pid: u32,
        root: Option<u32>,
        frames: &[u64],
        out: &mut SampleWriter,
    ) -> Option<u32> {
        let mut parent = root;
        for &a in frames.iter().rev() {
            let (module, rel) = if a >= 0xffff_8000_0000_0000 {
                (KERNEL_MODULE, a)
            } else {
                self.space(pid).resolve(a).unwrap_or((0, a))
            };
            parent = Some(self.intern_node(parent, module, rel, out));
        }
        parent
    }

    /// The id of stack node `(parent, module, address)`, writing it (and its module) when new.
    pub(super) fn intern_node(
        &mut self,
        parent: Option<u32>,
        module: u32,
        address: u64,
        out: &mut SampleWriter,
    ) -> u32 {
        let next = self.stack_ids.len() as u32;
        let id = *self
            .stack_ids
            .entry((parent, module, address))
            .or_insert(next);
        if id == next {
            let mut r = Ok(());
            if let Some(m) = self.modules.get(module).filter(|_| module != 0) {
                r = out.module(&ModuleDesc {
                    id: module,
                    path: &m.path,
                    build_id: &m.build_id,
                });
            }
            let r = r.and_then(|()| {
                out.stack_node(StackNode {
                    parent,
                    module,
                    address,
                })
            });
            if let Err(e) = r {
                self.write_error.get_or_insert(e);
            }
        }
        id
    }

    pub(super) fn handle(&mut self, rec: &[u8], out: &mut SampleWriter) {
        let ty = u32::from_le_bytes([rec[0], rec[1], rec[2], rec[3]]);
        let misc = u16::from_le_bytes([rec[4], rec[5]]);
        let body = &rec[8..];
        let mut c = perf::Cur::new(body);
        match ty {
            rt::SAMPLE => self.sample(body, out),
            rt::MMAP2 => {
                let (Some(pid), Some(_tid), Some(addr), Some(len), Some(pgoff)) =
                    (c.u32(), c.u32(), c.u64(), c.u64(), c.u64())
                else {
                    return;
                };
                // The file's device and inode, unless the record carries a build id instead.
                let file = match (c.u32(), c.u32(), c.u64(), c.u64()) {
                    (Some(major), Some(minor), Some(ino), Some(_generation))
                        if misc & rt::MISC_MMAP_BUILD_ID == 0 =>
                    {
                        FileId::new(major, minor, ino)
                    }
                    _ => None,
                };
                let (Some(prot), Some(_flags)) = (c.u32(), c.u32()) else {
                    return;
                };
                let Some(name) = c.cstr() else { return };
                if prot & libc::PROT_EXEC as u32 == 0 || !modules::is_code_mapping(name) {
                    return;
                }
                let name = String::from_utf8_lossy(name).into_owned();
                self.add_mapping(pid, addr, len, pgoff, &name, file);
            }
            rt::MMAP => {
                let (Some(pid), Some(_tid), Some(addr), Some(len), Some(pgoff)) =
                    (c.u32(), c.u32(), c.u64(), c.u64(), c.u64())
                else {
                    return;
                };
                let Some(name) = c.cstr() else { return };
                if !modules::is_code_mapping(name) || misc & 0x2000 != 0 {
                    return;
                }
                let name = String::from_utf8_lossy(name).into_owned();
                self.add_mapping(pid, addr, len, pgoff, &name, None);
            }
            rt::COMM => {
                let (Some(pid), Some(tid)) = (c.u32(), c.u32()) else {
                    return;
                };
                let name = String::from_utf8_lossy(c.cstr().unwrap_or(b"")).into_owned();
                if misc & rt::MISC_COMM_EXEC != 0 && pid == tid {
                    // exec: a new address space; its mappings follow as MMAP2 records.
                    self.spaces.insert(pid, Space::new(self.dwarf));
                    self.changed_spaces.insert(pid);
                    self.caches.remove(&pid);
                }
                self.threads.insert(tid, (pid, name));
            }
            rt::FORK => {
                let (Some(pid), Some(ppid), Some(tid), Some(_ptid)) =
                    (c.u32(), c.u32(), c.u32(), c.u32())
                else {
                    return;
                };
                // A pid or tid that exited earlier in the recording, used again: a new thread.
                let reused =
                    self.gone.remove(&tid).is_some() | self.gone_before.remove(&tid).is_some();
                if reused {
                    self.threads.remove(&tid);
                }
                if pid != ppid && (reused || !self.spaces.contains_key(&pid)) {
                    let copy = self
                        .spaces
                        .get(&ppid)
                        .cloned()
                        .unwrap_or_else(|| Space::new(self.dwarf));
                    self.spaces.insert(pid, copy);
                    self.changed_spaces.insert(pid);
                }
                let name = self
                    .threads
                    .get(&_ptid)
                    .map(|t| t.1.clone())
                    .unwrap_or_default();
                // The thread's samples may have been drained first (another CPU's ring) and found
                // it gone from /proc: the name it was forked with is better than none.
                let t = self.threads.entry(tid).or_insert((pid, String::new()));
                if t.1.is_empty() {
                    t.1 = name;
                }
            }
            rt::LOST => {
                let (Some(_id), Some(n)) = (c.u64(), c.u64()) else {
                    return;
                };
                self.lost += n;
            }
            rt::LOST_SAMPLES => {
                if let Some(n) = c.u64() {
                    self.lost += n;
                }
            }
            rt::SWITCH if misc & rt::MISC_SWITCH_OUT == 0 => {
                // A switch in: the sample_id trailer is {pid, tid}, time, {cpu, res}, identifier.
                let Some(t) = body.len().checked_sub(32).map(|at| &body[at..]) else {
                    return;
                };
                let word =
                    |i: usize| u64::from_le_bytes(t[i..i + 8].try_into().unwrap_or_default());
                let tid = (word(0) >> 32) as u32;
                self.switch_in(tid, word(8), out);
            }
            rt::EXIT => {
                // A thread that left the CPU for good is not off it.
                if let (Some(pid), Some(_ppid), Some(tid)) = (c.u32(), c.u32(), c.u32()) {
                    self.switched_out.remove(&tid);
                    self.gone.insert(tid, pid);
                    if pid == tid {
                        self.exited.push(pid);
                    }
                }
            }
            _ => {}
        }
    }

    fn sample(&mut self, body: &[u8], out: &mut SampleWriter) {
        let Some(id) = body
            .get(..8)
            .map(|b| u64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]))
        else {
            return;
        };
        let event = self.id_to_event.get(&id).copied().unwrap_or(0);
        let regs = self
            .event_regs
            .get(event as usize)
            .copied()
            .unwrap_or(self.dwarf);
        let Some(s) = perf::parse_sample(body, regs) else {
            // Not seen, but never silently: a sample that cannot be read is a lost one.
            self.unreadable += 1;
            return;
        };
        let mut frames = std::mem::take(&mut self.scratch);
        frames.clear();
        // Kernel part and (fp mode) user part of the callchain, leaf first. Each context's first entry is
        // the exact ip; the later ones are return addresses: look them up one byte earlier.
        let mut ctx = rt::CONTEXT_KERNEL;
        let mut first_in_ctx = true;
        let mut kernel_frames = 0usize;
        for ip in s.callchain() {
            if ip >= rt::CONTEXT_MAX {
                ctx = ip;
                first_in_ctx = true;
                continue;
            }
            let a = if first_in_ctx { ip } else { ip.wrapping_sub(1) };
            first_in_ctx = false;
            if ctx != rt::CONTEXT_USER {
                kernel_frames += 1;
            }
            frames.push(a);
        }
        if frames.is_empty() && s.callchain.is_empty() && (!self.dwarf || s.user_regs.is_none()) {
            frames.push(s.ip);
        }
        let mut ok = true;
        if self.dwarf {
            if let Some(regs) = s.user_regs {
                self.space(s.pid);
                let space = &self.spaces[&s.pid];
                let cache = self.caches.entry(s.pid).or_default();
                let before = frames.len();
                ok = space.unwind(cache, regs, s.stack, &mut frames);
                // A return address outside every mapped object is garbage (a mis-unwind): stop there.
                if cut_at_unmapped(space, &mut frames, before + 1) {
                    ok = false;
                }
            }
        } else {
            if let (Some(_), Some(top)) = (s.user_regs, s.stack.get(..8)) {
                // Entry probe: the caller's return address is at [sp]; the frame-pointer walk (starting
                // at the caller's rbp) skips it. Newer kernels add it themselves for `push rbp` entries.
                let ret = u64::from_le_bytes([
                    top[0], top[1], top[2], top[3], top[4], top[5], top[6], top[7],
                ]);
                let at = kernel_frames + 1;
                if ret != 0 && frames.len() >= at && frames.get(at) != Some(&(ret - 1)) {
                    frames.insert(at, ret - 1);
                }
            }
            if frames.len() == kernel_frames + 1 {
                // A user stack of one frame: no frame pointers to walk.
                ok = false;
            }
            // A frame-pointer walk through code built without them reads whatever the stack holds
            // (text, pointers to data) as return addresses: keep the stack up to the first one that
            // lies in no mapped object, and count it.
            if cut_at_unmapped(self.space(s.pid), &mut frames, kernel_frames + 1) {
                ok = false;
                self.junk_stacks += 1;
            }
        }
        if !ok {
            self.unwind_errors += 1;
        }
        let parent = self.intern_stack(s.pid, None, &frames, out);
        self.scratch = frames;
        // A thread first seen in a sample (its COMM or FORK record not drained yet, or it started before
        // an attach): its name from /proc while it still runs.
        self.threads
            .entry(s.tid)
            .or_insert_with(|| (s.pid, thread_comm(s.pid, s.tid)));
        self.samples += 1;
        if Some(event) == self.off_cpu_event {
            self.switch_out(s.tid, s.time, parent, out);
            return;
        }
        let weight = self.event_weight.get(event as usize).copied().unwrap_or(1);
        out.sample(s.time, s.tid, event, parent, weight);
    }

    /// Thread `tid` left the CPU at `time` with this stack: its off-CPU sample waits for the switch in.
    fn switch_out(&mut self, tid: u32, time: u64, stack: Option<u32>, out: &mut SampleWriter) {
        match self.switched_in.remove(&tid) {
            Some(back) if back >= time => self.off_cpu_sample(tid, time, stack, back, out),
            _ => {
                self.switched_out.insert(tid, (time, stack));
            }
        }
    }

    /// Thread `tid` was switched back in at `time`.
    fn switch_in(&mut self, tid: u32, time: u64, out: &mut SampleWriter) {
        match self.switched_out.remove(&tid) {
            Some((left, stack)) if left <= time => self.off_cpu_sample(tid, left, stack, time, out),
            Some(early) => {
                // A later switch out drained before this switch in: keep waiting for its own.
                self.switched_out.insert(tid, early);
            }
            None => {
                self.switched_in.insert(tid, time);
            }
        }
    }

    fn off_cpu_sample(
        &mut self,
        tid: u32,
        left: u64,
        stack: Option<u32>,
        back: u64,
        out: &mut SampleWriter,
    ) {
        if let Some(ev) = self.off_cpu_event {
            out.sample(left, tid, ev, stack, back - left);
        }
    }

    /// A period of a continuous recording ends at `boundary` (CLOCK_MONOTONIC ns), its trace written
    /// to `out` next: each thread off the CPU has its time until then counted there, and the rest of
    /// its stretch waits for its switch in under the same stack, as its frames (root first), which
    /// [`State::resume_off_cpu`] interns in the next period's trace.
    pub(super) fn cut_off_cpu(
        &mut self,
        boundary: u64,
        out: &mut SampleWriter,
    ) -> Vec<(u32, Vec<(u32, u64)>)> {
        if self.switched_out.is_empty() {
            return Vec::new();
        }
        let mut nodes = vec![(None, 0, 0); self.stack_ids.len()];
        for (&(parent, module, address), &id) in &self.stack_ids {
            nodes[id as usize] = (parent, module, address);
        }
        let mut waiting: Vec<(u32, (u64, Option<u32>))> = self.switched_out.drain().collect();
        waiting.sort_unstable_by_key(|w| w.0);
        let mut carried = Vec::with_capacity(waiting.len());
        for (tid, (left, stack)) in waiting {
            self.off_cpu_sample(tid, left, stack, boundary.max(left), out);
            let mut frames = Vec::new();
            let mut at = stack;
            while let Some(&(parent, module, address)) = at.and_then(|id| nodes.get(id as usize)) {
                frames.push((module, address));
                at = parent;
            }
            frames.reverse();
            carried.push((tid, frames));
        }
        carried
    }

    /// The next period's trace is `out`, with stacks interned afresh: the threads
    /// [`State::cut_off_cpu`] left off the CPU are so from `boundary` on, under their stacks.
    pub(super) fn resume_off_cpu(
        &mut self,
        carried: Vec<(u32, Vec<(u32, u64)>)>,
        boundary: u64,
        out: &mut SampleWriter,
    ) {
        for (tid, frames) in carried {
            let mut stack = None;
            for (module, address) in frames {
                stack = Some(self.intern_node(stack, module, address, out));
            }
            self.switched_out.insert(tid, (boundary, stack));
        }
    }

    /// A period of a continuous recording begins: its counts start from zero, its stacks are
    /// interned afresh (the trace of the period before holds the old ones), and the threads and
    /// processes that exited in the period before the one that ended are forgotten.
    pub(super) fn new_period(&mut self) {
        self.stack_ids.clear();
        self.samples = 0;
        self.lost = 0;
        self.unreadable = 0;
        self.lost_bookkeeping = 0;
        self.unwind_errors = 0;
        self.junk_stacks = 0;
        self.forget_gone();
    }

    /// Forgets the threads and processes that exited before the last period began.
    fn forget_gone(&mut self) {
        for (tid, pid) in std::mem::replace(&mut self.gone_before, std::mem::take(&mut self.gone)) {
            self.threads.remove(&tid);
            self.switched_in.remove(&tid);
            if pid == tid {
                self.spaces.remove(&pid);
                self.caches.remove(&pid);
            }
        }
    }

    /// At the end: threads still off the CPU were so until `end` (nothing is carried on).
    pub(super) fn end_off_cpu(&mut self, end: u64, out: &mut SampleWriter) {
        self.cut_off_cpu(end, out);
    }
}

/// Cuts `frames` (user frames from `from` on) before the first address in no mapped object of `space`;
/// true if it did.
fn cut_at_unmapped(space: &Space, frames: &mut Vec<u64>, from: usize) -> bool {
    match (from..frames.len()).find(|&i| space.resolve(frames[i]).is_none()) {
        Some(i) => {
            frames.truncate(i);
            true
        }
        None => false,
    }
}

/// The name of thread `tid` of process `pid`, empty when it is gone.
pub(crate) fn thread_comm(pid: u32, tid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/comm"))
        .map(|n| n.trim_end().to_string())
        .unwrap_or_default()
}
