//! The recording session: start or attach to the target, open the events, drain the rings, unwind,
//! intern stacks, and stream samples to the trace file. With the eBPF backend ([`bpf_session`]) the
//! rings carry only the side-band records, and the samples come from the counts of the BPF programs.

mod bpf_session;
mod mapped_file;

use std::collections::{HashMap, HashSet};
use std::ffi::{CString, OsString};
use std::mem::MaybeUninit;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use ferrotrace_core::clock::realtime_ns;
use ferrotrace_core::jit;
use ferrotrace_core::schema::{self, Sampler, SamplerKind, SamplersHeader, StackNode};
use framehop::x86_64::CacheX86_64;

use crate::cli_args::{CallGraph, EventSpec};
use crate::file::{ModuleDesc, SampleWriter};
use crate::modules::{self, FileId, ModuleTable, Space, KERNEL_MODULE};
use crate::perf::{self, rt, AttrOptions, PerfEvent, Ring};
use crate::probes::{self, UprobeSet};
use crate::{Backend, ProfileConfig, ProfileError, ProfileSummary, Target};

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

/// Installs SIGINT/SIGTERM handlers that only set a flag; restores the old ones on drop.
struct SignalGuard {
    old: Vec<(libc::c_int, libc::sigaction)>,
}

impl SignalGuard {
    fn install() -> SignalGuard {
        STOP.store(false, Ordering::SeqCst);
        let mut old = Vec::new();
        for sig in [libc::SIGINT, libc::SIGTERM] {
            // SAFETY: plain sigaction with a handler that only stores to an atomic.
            unsafe {
                let mut sa: libc::sigaction = std::mem::zeroed();
                sa.sa_sigaction = on_signal as *const () as usize;
                libc::sigemptyset(&mut sa.sa_mask);
                let mut prev: libc::sigaction = std::mem::zeroed();
                if libc::sigaction(sig, &sa, &mut prev) == 0 {
                    old.push((sig, prev));
                }
            }
        }
        SignalGuard { old }
    }
}

impl Drop for SignalGuard {
    fn drop(&mut self) {
        for (sig, prev) in &self.old {
            // SAFETY: restoring the previous disposition.
            unsafe { libc::sigaction(*sig, prev, std::ptr::null_mut()) };
        }
    }
}

/// A child forked and blocked before `execvp` until released.
struct BlockedChild {
    pid: i32,
    go: Option<OwnedFd>,
    exec_err: OwnedFd,
    reaped: Option<i32>,
}

fn pipe_cloexec() -> Result<(OwnedFd, OwnedFd), ProfileError> {
    let mut fds = [0; 2];
    // SAFETY: fds is a valid 2-element array.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(ProfileError::sys("pipe2"));
    }
    // SAFETY: both fds were just created and are owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

impl BlockedChild {
    /// Forks the child; with `traced` it asks to be traced (`PTRACE_TRACEME`) so that it stops right
    /// after its exec ([`crate::hold`]).
    fn spawn(file: &Path, argv: &[OsString], traced: bool) -> Result<BlockedChild, ProfileError> {
        let program = file.display().to_string();
        let file = CString::new(file.as_os_str().as_bytes()).map_err(|_| {
            ProfileError::BadArgument("the program's path contains a NUL byte".into())
        })?;
        let cargs: Vec<CString> = argv
            .iter()
            .map(|a| CString::new(a.as_bytes()))
            .collect::<Result<_, _>>()
            .map_err(|_| ProfileError::BadArgument("an argument contains a NUL byte".into()))?;
        if cargs.is_empty() {
            return Err(ProfileError::BadArgument("no program given".into()));
        }
        let mut ptrs: Vec<*const libc::c_char> = cargs.iter().map(|c| c.as_ptr()).collect();
        ptrs.push(std::ptr::null());
        let (go_r, go_w) = pipe_cloexec()?;
        let (err_r, err_w) = pipe_cloexec()?;
        // SAFETY: after fork the child only calls async-signal-safe functions (read, execv, write,
        // _exit) on memory prepared before the fork.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            return Err(ProfileError::Spawn {
                program,
                source: std::io::Error::last_os_error(),
            });
        }
        if pid == 0 {
            // SAFETY: the forked child, which only calls async-signal-safe functions (above) on
            // descriptors and strings prepared before the fork, and ends in exec or _exit.
            unsafe {
                let mut b = 0u8;
                libc::read(go_r.as_raw_fd(), &mut b as *mut u8 as *mut libc::c_void, 1);
                if traced {
                    libc::ptrace(libc::PTRACE_TRACEME, 0, 0, 0);
                }
                libc::execv(file.as_ptr(), ptrs.as_ptr());
                let e = *libc::__errno_location();
                let eb = e.to_le_bytes();
                libc::write(err_w.as_raw_fd(), eb.as_ptr() as *const libc::c_void, 4);
                libc::_exit(127);
            }
        }
        drop(go_r);
        drop(err_w);
        Ok(BlockedChild {
            pid,
            go: Some(go_w),
            exec_err: err_r,
            reaped: None,
        })
    }

    /// Lets the child exec; reports an exec failure.
    fn release(&mut self, program: &str) -> Result<(), ProfileError> {
        if let Some(go) = self.go.take() {
            let b = 1u8;
            // SAFETY: writing one byte to our pipe.
            unsafe { libc::write(go.as_raw_fd(), &b as *const u8 as *const libc::c_void, 1) };
        }
        let mut eb = [0u8; 4];
        // SAFETY: reading up to 4 bytes into eb; EOF means exec succeeded (CLOEXEC closed the pipe).
        let n = unsafe {
            libc::read(
                self.exec_err.as_raw_fd(),
                eb.as_mut_ptr() as *mut libc::c_void,
                4,
            )
        };
        if n == 4 {
            let errno = i32::from_le_bytes(eb);
            self.wait(true);
            return Err(ProfileError::Spawn {
                program: program.into(),
                source: std::io::Error::from_raw_os_error(errno),
            });
        }
        Ok(())
    }

    /// Reaps the child; returns its exit code (128+signal for a signal) once it has exited.
    fn wait(&mut self, block: bool) -> Option<i32> {
        if self.reaped.is_some() {
            return self.reaped;
        }
        let mut status = 0;
        // SAFETY: waiting for our own child.
        let r =
            unsafe { libc::waitpid(self.pid, &mut status, if block { 0 } else { libc::WNOHANG }) };
        if r == self.pid {
            let code = if libc::WIFEXITED(status) {
                libc::WEXITSTATUS(status)
            } else if libc::WIFSIGNALED(status) {
                128 + libc::WTERMSIG(status)
            } else {
                return None;
            };
            self.reaped = Some(code);
        } else if r < 0 {
            self.reaped = Some(-1);
        }
        self.reaped
    }

    fn kill(&mut self, sig: i32) {
        if self.reaped.is_none() {
            // SAFETY: signalling our own, not yet reaped child.
            unsafe { libc::kill(self.pid, sig) };
        }
    }
}

impl Drop for BlockedChild {
    fn drop(&mut self) {
        if self.reaped.is_none() {
            if self.go.is_some() {
                self.kill(libc::SIGKILL);
            }
            self.wait(true);
        }
    }
}

/// Interning state built while recording.
struct State {
    dwarf: bool,
    modules: ModuleTable,
    spaces: HashMap<u32, Space>,
    /// Processes whose address space changed since the eBPF backend last loaded it into the kernel.
    changed_spaces: HashSet<u32>,
    /// Processes that exited since (their spaces stay here for the samples still to come).
    exited: Vec<u32>,
    caches: HashMap<u32, CacheX86_64>,
    threads: HashMap<u32, (u32, String)>,
    /// Interned stack nodes: (parent, module, module-relative address) → id.
    stack_ids: HashMap<(Option<u32>, u32, u64), u32>,
    id_to_event: HashMap<u64, u32>,
    /// Per event: the weight of one of its samples (ns of CPU for the timer, 1 for a probe hit).
    event_weight: Vec<u64>,
    /// The off-CPU event, if recorded.
    off_cpu_event: Option<u32>,
    /// Off-CPU pairing: a thread's last switch out (time, stack) waiting for its switch back in, and a
    /// switch in seen before its switch out (the two can come from different CPUs' rings).
    switched_out: HashMap<u32, (u64, Option<u32>)>,
    switched_in: HashMap<u32, u64>,
    /// Per event: its samples carry user registers and a stack copy.
    event_regs: Vec<bool>,
    samples: u64,
    lost: u64,
    /// Samples whose layout could not be read (counted as lost).
    unreadable: u64,
    /// Bookkeeping records (maps, threads) the kernel dropped, when it says so.
    lost_bookkeeping: u64,
    unwind_errors: u64,
    /// Frame-pointer stacks cut where they ran into an address of no mapped object.
    junk_stacks: u64,
    scratch: Vec<u64>,
    write_error: Option<std::io::Error>,
}

impl State {
    fn space(&mut self, pid: u32) -> &mut Space {
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
    fn add_mapping(
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
    fn intern_stack(
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
    fn intern_node(
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

    fn handle(&mut self, rec: &[u8], out: &mut SampleWriter) {
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
                if pid != ppid && !self.spaces.contains_key(&pid) {
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

    /// At the end: threads still off the CPU were so until `end`.
    fn end_off_cpu(&mut self, end: u64, out: &mut SampleWriter) {
        let mut waiting: Vec<(u32, (u64, Option<u32>))> = self.switched_out.drain().collect();
        waiting.sort_unstable_by_key(|w| w.0);
        for (tid, (left, stack)) in waiting {
            self.off_cpu_sample(tid, left, stack, end.max(left), out);
        }
    }
}

/// How often the eBPF backend reads the counts while recording (and clears them, so that the count
/// map never fills on a long run); the samples read are stamped with the time they were read.
const BPF_DRAIN_INTERVAL: Duration = Duration::from_millis(250);

/// The frequency of a cpu-clock event: its own (`profile:hz:N`), else `-F`'s.
fn cpu_clock_hz(own: Option<u32>, cfg: &ProfileConfig) -> u32 {
    own.unwrap_or(cfg.frequency)
}

/// Data pages of each CPU's ring to try, largest first (an unprivileged user is limited by
/// `kernel.perf_event_mlock_kb`): `--mmap-pages` alone when given; else sized for the events. A timer's
/// rate is known (999 Hz of ~300-byte records is 300 KB/s, of 8 KiB stack copies 8 MB/s), a probe's is
/// not: malloc in `rg -j1` fires 87,610 times in 0.2 s, ~100 MB/s of ~230-byte frame-pointer
/// records, and the kernel drops what does not fit while the profiler handles what it drained (perf
/// only copies it).
fn ring_sizes(cfg: &ProfileConfig, dwarf: bool) -> Vec<usize> {
    if let Some(pages) = cfg.buffer_pages {
        return vec![pages];
    }
    let probes = cfg
        .events
        .iter()
        .any(|e| !matches!(e, EventSpec::CpuClock(_)));
    match (probes, dwarf) {
        (false, false) => vec![128, 64, 16],
        (false, true) => vec![2048, 512, 128, 16],
        (true, false) => vec![4096, 1024, 256, 64, 16],
        (true, true) => vec![8192, 2048, 512, 128, 16],
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

/// A process the caller started and holds before its `execve` (`Target::Command` still names the
/// program and its arguments): its events are opened with enable-on-exec, then `release` lets it go.
pub(crate) struct Held<'r> {
    pub pid: u32,
    pub release: Box<dyn FnOnce() -> std::io::Result<()> + 'r>,
}

/// Runs a whole profiling session (of `held`, when the caller started the program).
pub(crate) fn run(
    cfg: &ProfileConfig,
    held: Option<Held<'_>>,
) -> Result<ProfileSummary, ProfileError> {
    if cfg.events.is_empty() {
        return Err(ProfileError::BadArgument("no events to record".into()));
    }
    if cfg.frequency == 0 {
        return Err(ProfileError::BadArgument(
            "the sampling frequency must be at least 1 Hz".into(),
        ));
    }
    if cfg.stack_size == 0 || cfg.stack_size > 65528 || !cfg.stack_size.is_multiple_of(8) {
        return Err(ProfileError::BadArgument(
            "the DWARF stack copy size must be a multiple of 8 up to 65528".into(),
        ));
    }
    if cfg
        .buffer_pages
        .is_some_and(|p| !p.is_power_of_two() || p > 1 << 20)
    {
        return Err(ProfileError::BadArgument(
            "the ring buffer size must be a power of two of pages, at most 4 GiB".into(),
        ));
    }
    let bpf_mode = cfg.backend == Backend::Bpf;
    // The eBPF backend unwinds in the kernel: nothing is unwound here.
    let dwarf = cfg.call_graph == CallGraph::Dwarf && !bpf_mode;
    let started = Instant::now();

    // The program, for the frame-pointer check.
    let exe: Option<PathBuf> = match &cfg.target {
        Target::Command { program, argv } => {
            if argv.is_empty() {
                return Err(ProfileError::BadArgument("no program given".into()));
            }
            if !program.exists() {
                return Err(ProfileError::Spawn {
                    program: program.display().to_string(),
                    source: std::io::Error::from(std::io::ErrorKind::NotFound),
                });
            }
            Some(program.clone())
        }
        Target::Pid(pid) => {
            if !Path::new(&format!("/proc/{pid}")).exists() {
                return Err(ProfileError::NoSuchProcess(*pid));
            }
            std::fs::read_link(format!("/proc/{pid}/exe")).ok()
        }
        Target::SystemWide if !bpf_mode => {
            return Err(ProfileError::BadArgument(
                "-a (every process) needs --bpf: the perf_event backend follows one program".into(),
            ))
        }
        Target::SystemWide => None,
    };
    // Timer samples are only worth their stacks: refuse. Probe hits and tracepoints are also
    // counted, which needs no stack: record them, and say that the stacks stop early.
    let mut no_frame_pointers = None;
    if !dwarf && !bpf_mode && !cfg.allow_missing_frame_pointers {
        if let Some(exe) = &exe {
            if modules::main_has_frame_pointer(exe) == Some(false) {
                if cfg
                    .events
                    .iter()
                    .any(|e| matches!(e, EventSpec::CpuClock(_)))
                {
                    return Err(ProfileError::NoFramePointers(exe.clone()));
                }
                no_frame_pointers = Some(exe.clone());
            }
        }
    }

    // Events: tracefs probes first (their errors are the likeliest).
    let mut uprobes: Option<UprobeSet> = None;
    let mut kinds = Vec::new();
    let mut samplers: Vec<(SamplerKind, String)> = Vec::new();
    let needs_tracefs = cfg
        .events
        .iter()
        .any(|e| !matches!(e, EventSpec::CpuClock(_)));
    let tracefs = if needs_tracefs {
        Some(probes::ensure_tracefs()?)
    } else {
        None
    };
    for (ei, e) in cfg.events.iter().enumerate() {
        let tf = tracefs.as_deref().unwrap_or(Path::new(probes::TRACEFS));
        let tracepoint = |id| perf::EventKind::Tracepoint { id };
        // A USDT probe inlined in several places is one event per site, all of one sampler.
        let (these, ty): (Vec<perf::EventKind>, SamplerKind) = match e {
            EventSpec::CpuClock(hz) => (
                vec![perf::EventKind::CpuClock {
                    freq: cpu_clock_hz(*hz, cfg),
                }],
                SamplerKind::CpuClock,
            ),
            EventSpec::Tracepoint { category, name } => (
                vec![tracepoint(probes::tracepoint_id(tf, category, name)?)],
                if e.is_off_cpu() {
                    SamplerKind::OffCpu
                } else {
                    SamplerKind::Tracepoint
                },
            ),
            EventSpec::Uprobe { path, symbol } => {
                let set = uprobes.get_or_insert_with(|| UprobeSet::new(tf));
                (
                    vec![tracepoint(set.add(path, symbol)?)],
                    SamplerKind::Uprobe,
                )
            }
            EventSpec::Uretprobe { path, symbol } => {
                let set = uprobes.get_or_insert_with(|| UprobeSet::new(tf));
                let id = set.add_return(path, symbol)?;
                (vec![tracepoint(id)], SamplerKind::Uprobe)
            }
            EventSpec::Usdt {
                path,
                provider,
                name,
            } => {
                let set = uprobes.get_or_insert_with(|| UprobeSet::new(tf));
                let ids = set.add_usdt(path, provider, name)?;
                (
                    ids.into_iter().map(tracepoint).collect(),
                    SamplerKind::Uprobe,
                )
            }
        };
        kinds.extend(these.into_iter().map(|k| (ei, k)));
        samplers.push((ty, e.spelling()));
    }

    // Loaded before the program starts: the verifier's refusal is the likeliest failure.
    let mut bpf_storage = MaybeUninit::uninit();
    let mut bpf = match bpf_mode {
        true => Some(bpf_session::BpfSession::load(&mut bpf_storage)?),
        false => None,
    };
    let _signals = cfg.handle_signals.then(SignalGuard::install);
    let file = create_trace_file(&cfg.output)?;
    let io_err = |e: std::io::Error| ProfileError::io(&cfg.output, e);

    // Start or find the target.
    let mut child = None;
    let enable_on_exec = held.is_some() || matches!(cfg.target, Target::Command { .. });
    let mut release = None;
    let (root_pid, tids): (u32, Vec<u32>) = match (&cfg.target, held) {
        (Target::Command { .. }, Some(h)) => {
            release = Some(h.release);
            (h.pid, vec![h.pid])
        }
        (Target::Command { program, argv }, None) => {
            let c = BlockedChild::spawn(program, argv, bpf_mode)?;
            let pid = c.pid as u32;
            child = Some(c);
            (pid, vec![pid])
        }
        (Target::Pid(pid), _) => {
            let mut tids: Vec<u32> = std::fs::read_dir(format!("/proc/{pid}/task"))
                .map_err(|_| ProfileError::NoSuchProcess(*pid))?
                .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                .collect();
            tids.sort_unstable();
            (*pid, tids)
        }
        // One event per CPU for every task (perf_event_open's pid -1), under no root process.
        (Target::SystemWide, _) => (0, vec![EVERY_TASK]),
    };

    let cpus = perf::online_cpus();
    let mut events: Vec<PerfEvent> = Vec::new();
    let mut rings: Vec<Ring> = Vec::new();
    let mut id_to_event = HashMap::new();
    let ring_pages = ring_sizes(cfg, dwarf);
    let ring_pages = &ring_pages[..];
    // Wake the reader at a quarter of the smallest ring it may get (the kernel would lower a larger
    // mark to the ring's size: a wake-up only when it is full).
    let smallest = ring_pages.iter().min().copied().unwrap_or(1) * 4096;
    let wakeup_bytes = (smallest / 4).clamp(512, 64 * 1024) as u32;
    let mut exclude_kernel = false;
    let open_all = |exclude_kernel: bool,
                    events: &mut Vec<PerfEvent>,
                    rings: &mut Vec<Ring>,
                    id_to_event: &mut HashMap<u64, u32>|
     -> Result<(), ProfileError> {
        let mut leaders: Vec<Option<usize>> = vec![None; cpus.len()];
        for (ti, &tid) in tids.iter().enumerate() {
            for (ci, &cpu) in cpus.iter().enumerate() {
                // The process bookkeeping (maps, comm, fork, exit) on an event of its own that never
                // samples, as perf's dummy event: the kernel's count of the records each event lost
                // then tells lost samples from lost bookkeeping.
                let bookkeeping = (ti == 0).then_some((None, perf::EventKind::Dummy));
                let samplers = kinds.iter().map(|&(ei, k)| (Some(ei), k));
                for (ei, kind) in bookkeeping.into_iter().chain(samplers) {
                    let spec = ei.map(|ei| &cfg.events[ei]);
                    let o = AttrOptions {
                        dwarf,
                        stack_size: cfg.stack_size,
                        exclude_kernel,
                        enable_on_exec,
                        sideband: ei.is_none(),
                        entry_probe: matches!(spec, Some(EventSpec::Uprobe { .. })),
                        // (--bpf times off-CPU stretches in the kernel.)
                        context_switch: spec.is_some_and(EventSpec::is_off_cpu) && !bpf_mode,
                        wakeup_bytes,
                        in_kernel: bpf_mode && ei.is_some(),
                    };
                    let mut ev = perf::open_event(kind, &o, tid as i32, cpu)?;
                    match ei {
                        Some(ei) => {
                            id_to_event.insert(ev.id, ei as u32);
                        }
                        None => ev.bookkeeping = true,
                    }
                    if o.in_kernel {
                        // Its samples are counted in the kernel: no ring.
                        events.push(ev);
                        continue;
                    }
                    match leaders[ci] {
                        None => {
                            let mut ring = Err(ProfileError::BadArgument("no ring size".into()));
                            for &pages in ring_pages {
                                ring = Ring::map(&ev, pages);
                                if ring.is_ok() {
                                    break;
                                }
                            }
                            let ring = ring?;
                            rings.push(ring);
                            leaders[ci] = Some(events.len());
                        }
                        Some(l) => perf::set_output(&ev, &events[l])?,
                    }
                    events.push(ev);
                }
            }
        }
        Ok(())
    };
    if let Err(e) = open_all(false, &mut events, &mut rings, &mut id_to_event) {
        // Not root: retry without kernel frames (paranoid 1 and 2 allow user-space profiling).
        if matches!(e, ProfileError::PerfParanoid { .. }) {
            events.clear();
            rings.clear();
            id_to_event.clear();
            exclude_kernel = true;
            open_all(true, &mut events, &mut rings, &mut id_to_event)?;
        } else {
            return Err(e);
        }
    }

    let cmdline: Vec<u8> = match &cfg.target {
        Target::Command { argv, .. } => argv
            .iter()
            .map(|a| a.as_bytes())
            .collect::<Vec<_>>()
            .join(&0u8),
        Target::Pid(pid) => std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default(),
        Target::SystemWide => Vec::new(),
    };
    let exe_path = exe
        .as_ref()
        .map(|e| e.display().to_string())
        .unwrap_or_default();
    let session = schema::Session {
        pid: root_pid,
        ppid: std::process::id(),
        exe: &exe_path,
        cmdline: cmdline.strip_suffix(&[0]).unwrap_or(&cmdline),
        start_realtime_ns: realtime_ns(),
        version: env!("CARGO_PKG_VERSION"),
        // The kernel drops samples when a ring is full; they are counted.
        mode: schema::Mode::Drop,
        // Events are stamped in CLOCK_MONOTONIC nanoseconds.
        tick_hz: 1_000_000_000,
        sources: schema::source::SAMPLES | if bpf_mode { schema::source::BPF } else { 0 },
        alloc_sample: 0,
    };
    let header = SamplersHeader {
        // The eBPF unwinder follows DWARF rows (frame pointers where a module has none).
        call_graph: if bpf_mode {
            CallGraph::Dwarf
        } else {
            cfg.call_graph
        },
        // The timer's (`profile:hz:N` overrides -F): what the views show and take its period from.
        frequency: cfg
            .events
            .iter()
            .find_map(|e| match e {
                EventSpec::CpuClock(hz) => Some(cpu_clock_hz(*hz, cfg)),
                _ => None,
            })
            .unwrap_or(cfg.frequency),
        count: samplers.len() as u32,
    };
    let list: Vec<Sampler<'_>> = samplers
        .iter()
        .map(|(kind, spelling)| Sampler {
            kind: *kind,
            spelling,
        })
        .collect();
    let mut out = SampleWriter::start(file, &session, &header, &list).map_err(io_err)?;
    let event_weight: Vec<u64> = cfg
        .events
        .iter()
        .map(|e| match e {
            // A timer sample stands for one period of CPU time.
            EventSpec::CpuClock(hz) => 1_000_000_000 / u64::from(cpu_clock_hz(*hz, cfg).max(1)),
            _ => 1,
        })
        .collect();

    let mut st = State {
        dwarf,
        modules: ModuleTable::new(),
        spaces: HashMap::new(),
        changed_spaces: HashSet::new(),
        exited: Vec::new(),
        caches: HashMap::new(),
        threads: HashMap::new(),
        stack_ids: HashMap::new(),
        id_to_event,
        event_weight,
        off_cpu_event: cfg
            .events
            .iter()
            .position(EventSpec::is_off_cpu)
            .map(|i| i as u32),
        switched_out: HashMap::new(),
        switched_in: HashMap::new(),
        event_regs: cfg
            .events
            .iter()
            .map(|e| {
                perf::has_user_regs(&AttrOptions {
                    dwarf,
                    stack_size: 0,
                    exclude_kernel,
                    enable_on_exec: false,
                    sideband: false,
                    entry_probe: matches!(e, EventSpec::Uprobe { .. }),
                    context_switch: false,
                    wakeup_bytes: 0,
                    in_kernel: bpf_mode,
                })
            })
            .collect(),
        samples: 0,
        lost: 0,
        unreadable: 0,
        lost_bookkeeping: 0,
        unwind_errors: 0,
        junk_stacks: 0,
        scratch: Vec::new(),
        write_error: None,
    };

    if let Some(release) = release.take() {
        release().map_err(|source| ProfileError::Sys {
            what: "releasing the program".into(),
            source,
        })?;
    }
    match &mut child {
        Some(c) => {
            let program = match &cfg.target {
                Target::Command { program, .. } => program.display().to_string(),
                Target::Pid(_) | Target::SystemWide => String::new(),
            };
            if let Some(b) = bpf.as_mut() {
                // Attaching enables the events (libbpf does): the child is still blocked before exec.
                b.attach(&events, &st.id_to_event, &cfg.events)?;
            }
            c.release(&program)?;
            if let Some(b) = bpf.as_mut() {
                // Held at its exec, then at its entry point, while its mappings and their tables are
                // loaded: read from its maps, which the side-band records repeat later.
                let ended = crate::hold::hold_until_entry(c.pid, |pid| {
                    for (start, len, off, path, file) in modules::proc_maps(pid) {
                        st.add_mapping(pid, start, len, off, &path, file);
                    }
                    // Stopped by us: not the program's off-CPU time.
                    b.forget_off_cpu(pid);
                    b.sync(&mut st);
                })?;
                if ended.is_some() {
                    c.reaped = ended;
                }
            }
        }
        None if enable_on_exec => {}
        None if matches!(cfg.target, Target::SystemWide) => {
            // Every process running now: its maps (perf only reports later changes); the threads
            // are named as their samples arrive.
            for pid in running_processes() {
                st.space(pid);
            }
            if let Some(b) = bpf.as_mut() {
                b.sync(&mut st);
                b.attach(&events, &st.id_to_event, &cfg.events)?;
            }
            for ev in &events {
                perf::enable(ev)?;
            }
            if let Some(started) = cfg.on_system_wide_start {
                started(st.spaces.len());
            }
        }
        None => {
            // Attached: take the maps and thread names now (perf only reports later changes), then enable.
            st.space(root_pid);
            for &tid in &tids {
                st.threads
                    .insert(tid, (root_pid, thread_comm(root_pid, tid)));
            }
            if let Some(b) = bpf.as_mut() {
                // Its mappings first: attaching enables the events (libbpf does).
                b.sync(&mut st);
                b.attach(&events, &st.id_to_event, &cfg.events)?;
            }
            for ev in &events {
                perf::enable(ev)?;
            }
        }
    }

    // The loop.
    let deadline = cfg.duration.map(|d| Instant::now() + d);
    let mut stop_requested_at: Option<Instant> = None;
    let mut exit_code = None;
    let mut pollfds: Vec<libc::pollfd> = Vec::new();
    let mut ordered = perf::Ordered::default();
    // DWARF: the rings fill fast. eBPF: a library's table must reach the kernel soon after it maps.
    let poll_ms = if dwarf || bpf_mode { 10 } else { 50 };
    let mut kernel_bytes = 0u64;
    let mut last_bpf_drain = Instant::now();
    let mut bpf_failure: Option<ProfileError> = None;
    loop {
        pollfds.clear();
        // Poll the ring leaders (the event each ring was mapped from).
        for r in &rings {
            pollfds.push(libc::pollfd {
                fd: r.fd,
                events: libc::POLLIN,
                revents: 0,
            });
        }
        // SAFETY: pollfds is a valid array of pollfd.
        unsafe { libc::poll(pollfds.as_mut_ptr(), pollfds.len() as libc::nfds_t, poll_ms) };
        // Every ring is drained up to now: no sample older than this can still arrive.
        let watermark = ferrotrace_core::clock::monotonic_ns();
        for r in rings.iter_mut() {
            r.drain(|rec| {
                kernel_bytes += rec.len() as u64;
                ordered.push(rec)
            });
        }
        // Handling (unwinding above all) takes longer than draining: the rings are drained again
        // every 256 records handled, so that they do not fill meanwhile (what is drained waits in
        // `ordered` for the next round).
        for (i, rec) in ordered.take(Some(watermark)).iter().enumerate() {
            st.handle(rec, &mut out);
            if i % 256 == 255 {
                for r in rings.iter_mut() {
                    r.drain(|rec| {
                        kernel_bytes += rec.len() as u64;
                        ordered.push(rec)
                    });
                }
            }
        }
        if let Some(b) = bpf.as_mut() {
            let drain_due = last_bpf_drain.elapsed() >= BPF_DRAIN_INTERVAL;
            b.sync(&mut st);
            let r = match drain_due {
                true => b.drain(&mut st, &mut out, ferrotrace_core::clock::monotonic_ns()),
                false => Ok(()),
            };
            if drain_due {
                last_bpf_drain = Instant::now();
            }
            if let Err(e) = r {
                bpf_failure = Some(e);
                break;
            }
        }
        if let Err(e) = out.flush(watermark) {
            st.write_error.get_or_insert(e);
        }
        let now = Instant::now();
        if let Some(c) = &mut child {
            if let Some(code) = c.wait(false) {
                exit_code = Some(code);
                break;
            }
        } else if cfg.target != Target::SystemWide && !process_runs(root_pid) {
            break;
        }
        if deadline.is_some_and(|d| now >= d) {
            break;
        }
        if STOP.load(Ordering::SeqCst) {
            match (&mut child, stop_requested_at) {
                (Some(c), None) => {
                    // The terminal sent SIGINT to the program too; make sure, and give it time to exit.
                    c.kill(libc::SIGINT);
                    stop_requested_at = Some(now);
                }
                (Some(_), Some(t)) if now.duration_since(t) < Duration::from_secs(2) => {}
                _ => break,
            }
        }
    }
    for ev in &events {
        perf::disable(ev);
    }
    for r in rings.iter_mut() {
        r.drain(|rec| {
            kernel_bytes += rec.len() as u64;
            ordered.push(rec)
        });
    }
    ordered.flush(None, |rec| st.handle(rec, &mut out));
    let mut bpf_unwinder = None;
    if let Some(b) = bpf.as_mut() {
        b.detach();
        // Both count maps: the one being written and the one drained last.
        let now = ferrotrace_core::clock::monotonic_ns();
        b.sync(&mut st);
        let r = b
            .drain(&mut st, &mut out, now)
            .and_then(|()| b.drain(&mut st, &mut out, now));
        if let Err(e) = r {
            bpf_failure.get_or_insert(e);
        }
        kernel_bytes += b.kernel_bytes;
        bpf_unwinder = Some(b.unwinder_work());
        st.unwind_errors += b.truncated;
    }
    // The kernel's own count: PERF_RECORD_LOST records miss the losses after which nothing was
    // written (a full ring at the end of the run).
    let lost_of = |bookkeeping: bool| -> Option<u64> {
        events
            .iter()
            .filter(|e| e.bookkeeping == bookkeeping)
            .map(PerfEvent::lost)
            .sum()
    };
    if let (Some(samples), Some(bookkeeping)) = (lost_of(false), lost_of(true)) {
        st.lost = samples;
        st.lost_bookkeeping = bookkeeping;
    }
    st.lost += st.unreadable;
    let ring_bytes = rings.first().map_or(0, Ring::data_bytes);
    drop(rings);
    drop(events);
    // Probes can only be removed once no event uses them.
    drop(uprobes);
    if let Some(mut c) = child.take() {
        if c.reaped.is_none() {
            // Duration over or Ctrl-C: the program is ours, end it.
            c.kill(libc::SIGTERM);
            let t = Instant::now();
            while c.wait(false).is_none() && t.elapsed() < Duration::from_secs(2) {
                std::thread::sleep(Duration::from_millis(10));
            }
            c.kill(libc::SIGKILL);
        }
        if exit_code.is_none() {
            exit_code = c.wait(true);
        }
    }
    st.end_off_cpu(ferrotrace_core::clock::monotonic_ns(), &mut out);
    if let Some(e) = bpf_failure {
        return Err(e);
    }
    if let Some(e) = st.write_error.take() {
        return Err(io_err(e));
    }
    let recorded = started.elapsed();
    let finish_start = Instant::now();
    out.threads(&st.threads).map_err(io_err)?;
    let (reason, signal) = match exit_code {
        Some(c) if c > 128 => (schema::EndReason::Signal, (c - 128) as u32),
        // Attached, and the process is still there: the recording ended, not the program.
        None if matches!(cfg.target, Target::Pid(_)) && process_runs(root_pid) => {
            (schema::EndReason::Stopped, 0)
        }
        None if cfg.target == Target::SystemWide => (schema::EndReason::Stopped, 0),
        _ => (schema::EndReason::Exit, 0),
    };
    out.finish(schema::End {
        reason,
        signal,
        events: 0,
        lost: st.lost,
        chunks: 0,
        dropped_chunks: 0,
        dropped_events: 0,
        exit_code,
        unwind_errors: st.unwind_errors,
        write_errno: 0,
        markers: 0,
        usage: None,
    })
    .map_err(io_err)?;
    let mut warnings = Vec::new();
    if st.lost > 0 {
        let ring_kib = ring_bytes / 1024;
        warnings.push(format!(
            "{} samples lost (the kernel found the ring buffers full): give larger buffers with \
             --mmap-pages (now {} KiB per CPU), lower the frequency with -F, or use --call-graph fp",
            st.lost,
            ring_kib
        ));
    }
    if let Some(exe) = no_frame_pointers {
        warnings.push(format!(
            "{} has no frame pointers: the hits are all counted, but their stacks stop at its first \
             frame without one; --call-graph dwarf gives whole stacks",
            exe.display()
        ));
    }
    if st.lost_bookkeeping > 0 {
        warnings.push(format!(
            "{} records of mappings and threads lost (the ring buffers were full): some frames may \
             be unnamed; give larger buffers with --mmap-pages",
            st.lost_bookkeeping
        ));
    }
    if let Some(b) = &bpf {
        for (path, why) in &b.without_rows {
            warnings.push(format!(
                "{path}: no unwind table ({why}): its frames were walked by frame pointer"
            ));
        }
        for (pid, why) in &b.not_loaded {
            warnings.push(format!(
                "the mappings of process {pid} could not be loaded into the kernel ({why}): its \
                 stacks are truncated"
            ));
        }
        for pid in &b.too_many_mappings {
            warnings.push(format!(
                "process {pid} has more than {} executable mappings: addresses in the others end \
                 their stacks (truncated)",
                ferrotrace_bpf::MAX_MAPPINGS
            ));
        }
        if b.truncated > 0 {
            warnings.push(format!(
                "{} of {} stacks could not be unwound to their first frame in the kernel ({}): \
                 they are rooted at [truncated]",
                b.truncated,
                st.samples,
                b.truncation_reasons()
            ));
        }
    }
    if exclude_kernel {
        warnings.push(
            "kernel frames not recorded (not permitted): run as root for kernel stacks".into(),
        );
    }
    if !dwarf && st.junk_stacks > 0 {
        warnings.push(format!(
            "{} of {} stacks walked into code without frame pointers and were cut there (their \
             next 'return address' was in no mapped object); --call-graph dwarf unwinds such code",
            st.junk_stacks, st.samples
        ));
    }
    if !dwarf && !bpf_mode && st.samples > 20 && st.unwind_errors * 2 > st.samples {
        warnings.push(format!(
            "{} of {} stacks ended after one user frame: the program may lack frame pointers; try --call-graph dwarf",
            st.unwind_errors, st.samples
        ));
    }
    Ok(ProfileSummary {
        output: cfg.output.clone(),
        pid: root_pid,
        samples: st.samples,
        lost: st.lost,
        unwind_errors: st.unwind_errors,
        threads: st.threads.len(),
        bytes_written: out.w.bytes_written(),
        exit_code,
        recording_time: recorded,
        finishing_time: finish_start.elapsed(),
        kernel_bytes,
        bpf_unwinder,
        warnings,
    })
}

/// True while process `pid` exists and has not exited (a zombie waiting for its parent has).
fn process_runs(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        // `pid (comm) S ...`: the state follows the last ')'.
        stat.rsplit_once(')')
            .and_then(|(_, rest)| rest.trim_start().chars().next())
            .is_some_and(|state| !matches!(state, 'Z' | 'X' | 'x'))
    })
}

/// The name of thread `tid` of process `pid`, empty when it is gone.
/// perf_event_open's pid for "every task" (-1), as the target list's one entry for `-a`.
const EVERY_TASK: u32 = u32::MAX;

/// The processes running now (`/proc`'s numeric entries).
fn running_processes() -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect()
}

fn thread_comm(pid: u32, tid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/comm"))
        .map(|n| n.trim_end().to_string())
        .unwrap_or_default()
}

/// Creates the trace file, private to its owner (it holds the program's addresses and names).
/// Private, new, never through a link nor over a file that is not a trace (an old trace is kept as
/// FILE.old), like the runtime's traces: `ferrotrace_core::output`.
fn create_trace_file(path: &Path) -> Result<std::fs::File, ProfileError> {
    match ferrotrace_core::output::create(path) {
        Ok((file, _)) => Ok(file),
        Err(ferrotrace_core::output::OutputError::Io(p, e)) => Err(ProfileError::io(p, e)),
        // Something in the way of -o: an argument to change.
        Err(other) => Err(ProfileError::BadArgument(other.to_string())),
    }
}
