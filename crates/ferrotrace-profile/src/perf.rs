//! perf_event_open, its ring buffers, and the records that come out of them.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{fence, Ordering};

use perf_event_open_sys as sys;
use sys::bindings as b;

use crate::ProfileError;

/// Sample layout bits used for every event of a session (they must agree so that one parser reads
/// every ring, and `PERF_EVENT_IOC_SET_OUTPUT` requires it).
pub(crate) const SAMPLE_BASE: u64 = (b::PERF_SAMPLE_IDENTIFIER
    | b::PERF_SAMPLE_IP
    | b::PERF_SAMPLE_TID
    | b::PERF_SAMPLE_TIME
    | b::PERF_SAMPLE_CPU
    | b::PERF_SAMPLE_CALLCHAIN) as u64;
/// Extra bits in DWARF mode.
pub(crate) const SAMPLE_DWARF: u64 = (b::PERF_SAMPLE_REGS_USER | b::PERF_SAMPLE_STACK_USER) as u64;
/// x86_64 perf register numbers: BP = 6, SP = 7, IP = 8.
pub(crate) const REGS_MASK: u64 = (1 << 6) | (1 << 7) | (1 << 8);

/// What to open.
#[derive(Clone, Copy, Debug)]
pub(crate) enum EventKind {
    CpuClock {
        freq: u32,
    },
    Tracepoint {
        id: u64,
    },
    /// Never samples: carries the process bookkeeping records.
    Dummy,
}

/// Attribute options shared by the events of a session.
#[derive(Clone, Copy, Debug)]
pub(crate) struct AttrOptions {
    pub dwarf: bool,
    pub stack_size: u32,
    pub exclude_kernel: bool,
    pub enable_on_exec: bool,
    /// This event carries the side-band records (mmap2, comm, task).
    pub sideband: bool,
    /// A probe on a function's first instruction: in fp mode also copy the user registers and the top 8
    /// bytes of the stack, which hold the return address that a frame-pointer walk cannot see there.
    pub entry_probe: bool,
    /// Also report the task's context switches (PERF_RECORD_SWITCH): off-CPU time ends at a switch in.
    pub context_switch: bool,
    /// Bytes in the ring before poll() wakes the reader.
    pub wakeup_bytes: u32,
    /// A BPF program handles every sample in the kernel (`--bpf`): the samples carry no stack, and
    /// none reaches a ring.
    pub in_kernel: bool,
}

/// True when samples of an event opened with `o` carry user registers and a stack copy.
pub(crate) fn has_user_regs(o: &AttrOptions) -> bool {
    o.dwarf || o.entry_probe
}

fn attr_for(kind: EventKind, o: &AttrOptions) -> b::perf_event_attr {
    // SAFETY: perf_event_attr is plain data; all-zero is its documented default.
    let mut a: b::perf_event_attr = unsafe { std::mem::zeroed() };
    a.size = std::mem::size_of::<b::perf_event_attr>() as u32;
    match kind {
        EventKind::CpuClock { freq } => {
            a.type_ = b::PERF_TYPE_SOFTWARE;
            a.config = b::PERF_COUNT_SW_CPU_CLOCK as u64;
            a.set_freq(1);
            a.__bindgen_anon_1.sample_freq = freq as u64;
        }
        EventKind::Tracepoint { id } => {
            a.type_ = b::PERF_TYPE_TRACEPOINT;
            a.config = id;
            a.__bindgen_anon_1.sample_period = 1;
        }
        EventKind::Dummy => {
            a.type_ = b::PERF_TYPE_SOFTWARE;
            a.config = b::PERF_COUNT_SW_DUMMY as u64;
            a.__bindgen_anon_1.sample_period = 1;
        }
    }
    a.sample_type = SAMPLE_BASE;
    if o.in_kernel {
        // Without PERF_SAMPLE_CALLCHAIN: the kernel would walk a frame-pointer callchain for the BPF
        // program on every sample, which takes its own stacks.
        a.sample_type &= !(b::PERF_SAMPLE_CALLCHAIN as u64);
    } else if o.dwarf {
        a.sample_type |= SAMPLE_DWARF;
        a.sample_regs_user = REGS_MASK;
        a.sample_stack_user = o.stack_size;
        // The kernel's frame-pointer walk of user space is replaced by our DWARF unwinding.
        a.set_exclude_callchain_user(1);
    } else if o.entry_probe {
        a.sample_type |= SAMPLE_DWARF;
        a.sample_regs_user = REGS_MASK;
        a.sample_stack_user = 8;
    }
    a.set_disabled(1);
    // Children get copies of the event, to follow them. Not a tracepoint's (or probe's) whose hits an
    // eBPF program counts: that program runs for every hit, whatever the event's task, and counts
    // the processes it is told to follow; a copy made at fork carries the program, and the child's
    // exit detached it from the tracepoint, for the parent too (issue 37 item 2: every hit after a
    // fork lost, in 1 run of 6 without exec, 4 of 6 with one).
    let counted_per_hit = o.in_kernel && matches!(kind, EventKind::Tracepoint { .. });
    a.set_inherit(u32::from(!counted_per_hit).into());
    a.set_enable_on_exec(if o.enable_on_exec { 1 } else { 0 });
    a.set_exclude_hv(1);
    if o.exclude_kernel {
        a.set_exclude_kernel(1);
        a.set_exclude_callchain_kernel(1);
    }
    a.set_sample_id_all(1);
    a.set_use_clockid(1);
    a.clockid = libc::CLOCK_MONOTONIC;
    if o.sideband {
        a.set_mmap(1);
        a.set_mmap2(1);
        a.set_comm(1);
        a.set_comm_exec(1);
        a.set_task(1);
    }
    if o.context_switch {
        a.set_context_switch(1);
    }
    a.set_watermark(1);
    a.__bindgen_anon_2.wakeup_watermark = o.wakeup_bytes.max(1);
    // The kernel counts, per event, every record it could not put into a full ring (Linux 6.0):
    // read at the end, it also counts the losses after which no PERF_RECORD_LOST was written (it is
    // written before the next record that fits, and after the last ones nothing comes).
    a.read_format = b::PERF_FORMAT_LOST as u64;
    a
}

/// One open perf event.
pub(crate) struct PerfEvent {
    pub fd: OwnedFd,
    pub id: u64,
    /// What was opened (the eBPF backend attaches a tracepoint's program once).
    #[cfg_attr(not(feature = "bpf"), allow(dead_code))]
    pub kind: EventKind,
    /// It carries the bookkeeping records only (EventKind::Dummy).
    pub bookkeeping: bool,
    /// Its read() gives the kernel's count of its lost records (PERF_FORMAT_LOST).
    counts_lost: bool,
}

impl PerfEvent {
    /// The records of this event (and of its inherited copies, whose output goes to it) that the
    /// kernel dropped because the ring was full; `None` on kernels before 6.0.
    pub fn lost(&self) -> Option<u64> {
        if !self.counts_lost {
            return None;
        }
        let mut v = [0u64; 2];
        // SAFETY: reading at most 16 bytes into `v` from our perf fd.
        let n = unsafe { libc::read(self.fd.as_raw_fd(), v.as_mut_ptr().cast(), 16) };
        (n == 16).then_some(v[1])
    }
}

/// Opens one event for `pid` on `cpu`.
pub(crate) fn open_event(
    kind: EventKind,
    o: &AttrOptions,
    pid: i32,
    cpu: i32,
) -> Result<PerfEvent, ProfileError> {
    let mut a = attr_for(kind, o);
    let open = |a: &mut b::perf_event_attr| {
        // SAFETY: `a` is a valid, fully initialised attribute struct that outlives the call.
        unsafe { sys::perf_event_open(a, pid, cpu, -1, b::PERF_FLAG_FD_CLOEXEC as libc::c_ulong) }
    };
    let mut fd = open(&mut a);
    let mut counts_lost = true;
    if fd < 0 && io::Error::last_os_error().raw_os_error() == Some(libc::EINVAL) {
        // Before Linux 6.0: no PERF_FORMAT_LOST; the PERF_RECORD_LOST records are all there is.
        a.read_format = 0;
        counts_lost = false;
        fd = open(&mut a);
    }
    if fd < 0 {
        let err = io::Error::last_os_error();
        return Err(match err.raw_os_error() {
            Some(libc::EACCES) | Some(libc::EPERM) => ProfileError::PerfParanoid {
                level: paranoid_level(),
            },
            Some(libc::ESRCH) => ProfileError::NoSuchProcess(pid as u32),
            _ => ProfileError::Sys {
                what: format!("perf_event_open({kind:?}, pid {pid}, cpu {cpu})"),
                source: err,
            },
        });
    }
    // SAFETY: fd was just returned by the kernel and is owned by nobody else.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let mut id = 0u64;
    // SAFETY: valid fd, `id` is a valid out pointer.
    if unsafe { sys::ioctls::ID(fd.as_raw_fd(), &mut id) } < 0 {
        return Err(ProfileError::sys("PERF_EVENT_IOC_ID"));
    }
    Ok(PerfEvent {
        fd,
        id,
        kind,
        bookkeeping: false,
        counts_lost,
    })
}

/// Current `kernel.perf_event_paranoid`.
pub(crate) fn paranoid_level() -> Option<i32> {
    std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// Sends the output of `ev` into the ring of `leader` (same CPU).
pub(crate) fn set_output(ev: &PerfEvent, leader: &PerfEvent) -> Result<(), ProfileError> {
    // SAFETY: both fds are valid perf event fds.
    if unsafe { sys::ioctls::SET_OUTPUT(ev.fd.as_raw_fd(), leader.fd.as_raw_fd()) } < 0 {
        return Err(ProfileError::sys("PERF_EVENT_IOC_SET_OUTPUT"));
    }
    Ok(())
}

/// Enables a disabled event.
pub(crate) fn enable(ev: &PerfEvent) -> Result<(), ProfileError> {
    // SAFETY: valid perf event fd.
    if unsafe { sys::ioctls::ENABLE(ev.fd.as_raw_fd(), 0) } < 0 {
        return Err(ProfileError::sys("PERF_EVENT_IOC_ENABLE"));
    }
    Ok(())
}

/// Disables an event.
pub(crate) fn disable(ev: &PerfEvent) {
    // SAFETY: valid perf event fd; failure only means it is already gone.
    unsafe { sys::ioctls::DISABLE(ev.fd.as_raw_fd(), 0) };
}

/// The CPUs that are online, from `/sys/devices/system/cpu/online` (`0-3,5`).
pub(crate) fn online_cpus() -> Vec<i32> {
    let parsed = std::fs::read_to_string("/sys/devices/system/cpu/online")
        .ok()
        .and_then(|s| {
            let mut v = Vec::new();
            for part in s.trim().split(',').filter(|p| !p.is_empty()) {
                match part.split_once('-') {
                    Some((a, b)) => v.extend(a.parse::<i32>().ok()?..=b.parse::<i32>().ok()?),
                    None => v.push(part.parse().ok()?),
                }
            }
            Some(v)
        });
    match parsed {
        Some(v) if !v.is_empty() => v,
        _ => {
            // SAFETY: sysconf has no preconditions.
            let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) }.max(1);
            (0..n as i32).collect()
        }
    }
}

/// Merges the records of every CPU's ring into time order, as perf's ordered events do.
///
/// Each ring is in time order, but rings are drained one after the other: without merging, a sample
/// taken on one CPU just after an `exec` can be handled before the COMM and MMAP2 records of that exec,
/// which sit in another CPU's ring, and is then looked up in the old address space. Records wait here
/// until the drain watermark passes their time (every ring was drained after the watermark was read,
/// so nothing older can still arrive).
#[derive(Default)]
pub(crate) struct Ordered {
    /// (time, arrival, record), unordered between flushes.
    pending: Vec<(u64, u64, Vec<u8>)>,
    arrivals: u64,
}

impl Ordered {
    /// Takes a copy of one record as drained from a ring.
    pub fn push(&mut self, rec: &[u8]) {
        let time = record_time(rec).unwrap_or(0);
        self.pending.push((time, self.arrivals, rec.to_vec()));
        self.arrivals += 1;
    }

    /// Hands over, in time order, every waiting record no later than `watermark` (all of them when
    /// `None`: the rings are closed).
    pub fn flush(&mut self, watermark: Option<u64>, mut f: impl FnMut(&[u8])) {
        for rec in self.take(watermark) {
            f(&rec);
        }
    }

    /// Takes out, in time order, every waiting record no later than `watermark` (all when `None`),
    /// so that more can be pushed while they are handled.
    pub fn take(&mut self, watermark: Option<u64>) -> Vec<Vec<u8>> {
        self.pending.sort_unstable_by_key(|r| (r.0, r.1));
        let ready = match watermark {
            Some(w) => self.pending.partition_point(|r| r.0 <= w),
            None => self.pending.len(),
        };
        self.pending.drain(..ready).map(|r| r.2).collect()
    }
}

/// The time of a record read from a ring opened by [`open`]: a sample's TIME field, or the time in the
/// `sample_id` trailer every other record carries (`sample_id_all`: TID, TIME, CPU, IDENTIFIER).
fn record_time(rec: &[u8]) -> Option<u64> {
    let ty = u32::from_le_bytes(rec.get(..4)?.try_into().ok()?);
    let body = rec.get(8..)?;
    let at = if ty == b::PERF_RECORD_SAMPLE {
        24 // IDENTIFIER, IP, TID, then TIME
    } else {
        body.len().checked_sub(24)?
    };
    Some(u64::from_le_bytes(body.get(at..at + 8)?.try_into().ok()?))
}

/// A mapped perf ring buffer (one metadata page + 2^n data pages).
pub(crate) struct Ring {
    /// The event fd the ring belongs to (for poll).
    pub fd: std::os::fd::RawFd,
    base: *mut u8,
    len: usize,
    data_off: usize,
    data_size: usize,
    scratch: Vec<u8>,
}

// SAFETY: the mapping is owned by the Ring and only accessed through &mut self.
unsafe impl Send for Ring {}

impl Ring {
    /// Maps `pages` data pages (a power of two) of `ev`'s ring.
    pub fn map(ev: &PerfEvent, pages: usize) -> Result<Ring, ProfileError> {
        let page = 4096usize;
        let len = (pages + 1) * page;
        // SAFETY: mapping a perf fd with the documented layout; the result is checked.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                ev.fd.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(ProfileError::sys(format!(
                "mmap of a {} KiB perf ring",
                len / 1024
            )));
        }
        let base = p as *mut u8;
        // SAFETY: the first page is the perf_event_mmap_page.
        let meta = unsafe { &*(base as *const b::perf_event_mmap_page) };
        let (data_off, data_size) = if meta.data_size != 0 {
            (meta.data_offset as usize, meta.data_size as usize)
        } else {
            (page, pages * page)
        };
        Ok(Ring {
            fd: ev.fd.as_raw_fd(),
            base,
            len,
            data_off,
            data_size,
            scratch: Vec::new(),
        })
    }

    /// Size of its data area.
    pub fn data_bytes(&self) -> usize {
        self.data_size
    }

    fn meta(&self) -> *mut b::perf_event_mmap_page {
        self.base as *mut b::perf_event_mmap_page
    }

    /// Calls `f` with every complete record now in the ring, then frees their space.
    pub fn drain(&mut self, mut f: impl FnMut(&[u8])) {
        let meta = self.meta();
        // SAFETY: the metadata page stays mapped; head is written by the kernel, read with acquire order.
        let head = unsafe { std::ptr::read_volatile(&(*meta).data_head) };
        fence(Ordering::Acquire);
        // SAFETY: as above; tail is ours.
        let mut tail = unsafe { std::ptr::read_volatile(&(*meta).data_tail) };
        let data = self.base.wrapping_add(self.data_off);
        let size = self.data_size as u64;
        while tail + 8 <= head {
            let off = (tail % size) as usize;
            let mut hdr = [0u8; 8];
            for (i, h) in hdr.iter_mut().enumerate() {
                // SAFETY: off + i wraps inside the data area.
                *h = unsafe { *data.add((off + i) % self.data_size) };
            }
            let rsize = u16::from_le_bytes([hdr[6], hdr[7]]) as usize;
            if rsize < 8 || tail + rsize as u64 > head {
                break;
            }
            if off + rsize <= self.data_size {
                // SAFETY: the record lies wholly inside the data area.
                let rec = unsafe { std::slice::from_raw_parts(data.add(off), rsize) };
                f(rec);
            } else {
                self.scratch.clear();
                let first = self.data_size - off;
                // SAFETY: two in-bounds pieces of the data area.
                unsafe {
                    self.scratch
                        .extend_from_slice(std::slice::from_raw_parts(data.add(off), first));
                    self.scratch
                        .extend_from_slice(std::slice::from_raw_parts(data, rsize - first));
                }
                f(&self.scratch);
            }
            tail += rsize as u64;
        }
        fence(Ordering::Release);
        // SAFETY: publishing the new tail to the kernel.
        unsafe { std::ptr::write_volatile(&mut (*meta).data_tail, tail) };
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly what `map` mapped.
        unsafe { libc::munmap(self.base as *mut libc::c_void, self.len) };
    }
}

/// A little-endian cursor over one record.
pub(crate) struct Cur<'a> {
    b: &'a [u8],
    pos: usize,
}

impl<'a> Cur<'a> {
    pub fn new(b: &'a [u8]) -> Cur<'a> {
        Cur { b, pos: 0 }
    }
    pub fn u64(&mut self) -> Option<u64> {
        let s = self.b.get(self.pos..self.pos + 8)?;
        self.pos += 8;
        Some(u64::from_le_bytes(s.try_into().ok()?))
    }
    pub fn u32(&mut self) -> Option<u32> {
        let s = self.b.get(self.pos..self.pos + 4)?;
        self.pos += 4;
        Some(u32::from_le_bytes(s.try_into().ok()?))
    }
    pub fn bytes(&mut self, n: usize) -> Option<&'a [u8]> {
        let s = self.b.get(self.pos..self.pos.checked_add(n)?)?;
        self.pos += n;
        Some(s)
    }
    pub fn cstr(&mut self) -> Option<&'a [u8]> {
        let rest = self.b.get(self.pos..)?;
        let end = rest.iter().position(|&c| c == 0).unwrap_or(rest.len());
        Some(&rest[..end])
    }
}

/// A decoded `PERF_RECORD_SAMPLE` (borrowing the ring's bytes).
pub(crate) struct RawSample<'a> {
    pub ip: u64,
    pub pid: u32,
    pub tid: u32,
    pub time: u64,
    pub callchain: &'a [u8],
    /// (ip, sp, bp) when user registers were captured.
    pub user_regs: Option<(u64, u64, u64)>,
    /// Start of the copied user stack and its valid part.
    pub stack: &'a [u8],
}

impl RawSample<'_> {
    pub fn callchain(&self) -> impl Iterator<Item = u64> + '_ {
        self.callchain
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]))
    }
}

/// Parses a sample body (after the 8-byte header) with the session's layout.
pub(crate) fn parse_sample(body: &[u8], user_regs_and_stack: bool) -> Option<RawSample<'_>> {
    let mut c = Cur::new(body);
    let _id = c.u64()?;
    let ip = c.u64()?;
    let pid = c.u32()?;
    let tid = c.u32()?;
    let time = c.u64()?;
    let _cpu = c.u64()?;
    let nr = c.u64()? as usize;
    let callchain = c.bytes(nr.checked_mul(8)?)?;
    let mut user_regs = None;
    let mut stack: &[u8] = &[];
    if user_regs_and_stack {
        let abi = c.u64()?;
        if abi != 0 {
            let bp = c.u64()?;
            let sp = c.u64()?;
            let uip = c.u64()?;
            user_regs = Some((uip, sp, bp));
        }
        let size = c.u64()? as usize;
        if size != 0 {
            let data = c.bytes(size)?;
            let dyn_size = (c.u64()? as usize).min(size);
            stack = &data[..dyn_size];
        }
    }
    Some(RawSample {
        ip,
        pid,
        tid,
        time,
        callchain,
        user_regs,
        stack,
    })
}

/// Record types we handle.
pub(crate) mod rt {
    use super::b;
    pub const MMAP: u32 = b::PERF_RECORD_MMAP;
    pub const LOST: u32 = b::PERF_RECORD_LOST;
    pub const COMM: u32 = b::PERF_RECORD_COMM;
    pub const FORK: u32 = b::PERF_RECORD_FORK;
    pub const SAMPLE: u32 = b::PERF_RECORD_SAMPLE;
    pub const MMAP2: u32 = b::PERF_RECORD_MMAP2;
    pub const LOST_SAMPLES: u32 = b::PERF_RECORD_LOST_SAMPLES;
    pub const MISC_COMM_EXEC: u16 = b::PERF_RECORD_MISC_COMM_EXEC as u16;
    pub const MISC_MMAP_BUILD_ID: u16 = b::PERF_RECORD_MISC_MMAP_BUILD_ID as u16;
    pub const EXIT: u32 = b::PERF_RECORD_EXIT;
    pub const SWITCH: u32 = b::PERF_RECORD_SWITCH;
    pub const MISC_SWITCH_OUT: u16 = b::PERF_RECORD_MISC_SWITCH_OUT as u16;
    pub const CONTEXT_MAX: u64 = b::PERF_CONTEXT_MAX;
    pub const CONTEXT_KERNEL: u64 = b::PERF_CONTEXT_KERNEL;
    pub const CONTEXT_USER: u64 = b::PERF_CONTEXT_USER;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A record of type `ty` whose time is `time`, laid out as a ring holds it.
    fn record(ty: u32, time: u64) -> Vec<u8> {
        let mut body = Vec::new();
        if ty == b::PERF_RECORD_SAMPLE {
            // IDENTIFIER, IP, TID, TIME, CPU, callchain length 0
            for w in [7u64, 0x1000, 1, time, 0, 0] {
                body.extend_from_slice(&w.to_le_bytes());
            }
        } else {
            // a COMM-like payload, then the sample_id trailer: TID, TIME, CPU, IDENTIFIER
            body.extend_from_slice(b"pid tid name\0\0\0\0");
            for w in [1u64, time, 0, 7] {
                body.extend_from_slice(&w.to_le_bytes());
            }
        }
        let mut rec = ty.to_le_bytes().to_vec();
        rec.extend_from_slice(&0u16.to_le_bytes());
        rec.extend_from_slice(&((8 + body.len()) as u16).to_le_bytes());
        rec.extend_from_slice(&body);
        rec
    }

    #[test]
    fn records_of_two_rings_come_out_in_time_order_up_to_the_watermark() {
        let mut o = Ordered::default();
        // CPU 0's ring (drained first) holds samples taken after the exec that CPU 1's ring recorded.
        let sample_cpu0 = record(b::PERF_RECORD_SAMPLE, 150);
        let late_cpu0 = record(b::PERF_RECORD_SAMPLE, 400);
        let exec_cpu1 = record(b::PERF_RECORD_COMM, 100);
        let mmap_cpu1 = record(b::PERF_RECORD_MMAP2, 120);
        for r in [&sample_cpu0, &late_cpu0, &exec_cpu1, &mmap_cpu1] {
            o.push(r);
        }
        let mut seen = Vec::new();
        o.flush(Some(300), |r| seen.push(r.to_vec()));
        assert_eq!(seen, [exec_cpu1.clone(), mmap_cpu1, sample_cpu0]);
        // The sample after the watermark waits for the next round, or the end.
        let mut rest = Vec::new();
        o.flush(None, |r| rest.push(r.to_vec()));
        assert_eq!(rest, [late_cpu0]);
        // Equal times keep the order they were drained in.
        let (a, b2) = (
            record(b::PERF_RECORD_COMM, 5),
            record(b::PERF_RECORD_SAMPLE, 5),
        );
        o.push(&a);
        o.push(&b2);
        let mut tie = Vec::new();
        o.flush(None, |r| tie.push(r.to_vec()));
        assert_eq!(tie, [a, b2]);
    }
}
