//! Chunk memory and the two lock-free queues between traced threads and the collector.
//!
//! All chunks live in one mapping, which the collector faults in ahead of the threads ([`Prefault`]:
//! lazy page faults on the traced thread would cost more than the tracing): private, or under
//! `ferrotrace record` in a memfd shared with it, with a
//! descriptor per chunk (`ferrotrace_core::shared`). A chunk is named by its index. `full` holds the chunks handed over to the
//! collector, in order: a bounded MPMC queue (`crossbeam_queue::ArrayQueue`, lock-free, no allocation
//! after creation) sized to the chunk count, so a push never fails. `free` holds the empty chunks as a
//! *stack*: the chunk the collector freed last is the one handed out next, still in cache. (A FIFO of
//! free chunks cycles writes through the whole pool and makes every chunk cold: measured ~40% slower per
//! traced call with a 16 MiB pool.)

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use crossbeam_queue::ArrayQueue;
use ferrotrace_core::record::{Record, RECORD_SIZE};
use ferrotrace_core::shared::{self, Descriptor};

use crate::arch::thread::PAGE;
use crate::state::PROCESS;

/// A chunk handed to the collector.
#[derive(Clone, Copy, Debug)]
pub struct FullChunk {
    /// Chunk index in the pool.
    pub index: u32,
    /// Records written (payload slots included).
    pub len: u32,
    /// OS thread id of the writer.
    pub tid: u32,
    /// Per-thread chunk sequence number.
    pub seq: u32,
    /// Records at the start of the chunk that a dump (`thread::dump_current_chunks`) wrote already
    /// (under the previous sequence number): not to be written again.
    pub skip: u32,
}

/// The chunk pool.
pub struct Pool {
    base: *mut Record,
    chunk_records: usize,
    count: usize,
    /// Empty chunks, most recently freed on top.
    pub free: &'static FreeStack,
    /// Chunks waiting for the collector.
    pub full: &'static ArrayQueue<FullChunk>,
    /// Both queues, for [`Pool::give_back`].
    queues: &'static Queues,
    /// The chunks' descriptors in memory shared with `ferrotrace record`, if it gave some.
    descriptors: Option<&'static [Descriptor]>,
    /// The signal table in that memory.
    signals: Option<&'static shared::Signals>,
    /// The whole mapping: `(start, bytes)`.
    mapping: (usize, usize),
    /// One more than the highest chunk index handed to a thread so far ([`Pool::take`]): the free
    /// stack hands out low indices first and reuses the chunks freed last, so the chunks above it have
    /// never been written, and [`Prefault`] stays a little ahead of it.
    taken: AtomicU32,
}

/// A pool's two queues. Allocated once and never freed (a retired runtime's pool may still be named by
/// threads that hold it), but reused by the next pool of as many chunks ([`SPARE_QUEUES`]).
struct Queues {
    free: FreeStack,
    full: ArrayQueue<FullChunk>,
}

/// The queues of retired pools ([`Pool::give_back`]), for the next pool of as many chunks. Outside
/// `crate::state` because their type is the pool's own; like the ranges there, kept for the process's
/// life.
static SPARE_QUEUES: std::sync::Mutex<Vec<&'static Queues>> = std::sync::Mutex::new(Vec::new());

/// Queues for `count` chunks, every chunk free: a retired pool's, emptied, or new ones.
fn queues_for(count: usize) -> &'static Queues {
    let spare = {
        let mut spare = SPARE_QUEUES.lock().unwrap_or_else(|e| e.into_inner());
        let found = spare.iter().position(|q| q.full.capacity() == count);
        found.map(|i| spare.swap_remove(i))
    };
    let queues = spare.unwrap_or_else(|| {
        Box::leak(Box::new(Queues {
            free: FreeStack::new(count),
            full: ArrayQueue::new(count),
        }))
    });
    while queues.full.pop().is_some() {}
    while queues.free.pop().is_some() {}
    for i in (0..count).rev() {
        queues.free.push(i as u32);
    }
    queues
}

/// Maps `bytes` read-write: in a retired pool's range of that size if there is one (`MAP_FIXED` over
/// our own mapping), else wherever the kernel puts it. `fd` is a memfd to map shared, or none (private
/// anonymous memory).
fn map_pool(bytes: usize, fd: Option<i32>) -> *mut libc::c_void {
    let spare = {
        let mut spare = PROCESS
            .spare_pools
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let found = spare.iter().position(|&(_, len)| len == bytes);
        found.map(|i| spare.swap_remove(i).0)
    };
    let (hint, fixed) = match spare {
        Some(start) => (start as *mut libc::c_void, libc::MAP_FIXED),
        None => (core::ptr::null_mut(), 0),
    };
    let (share, fd) = match fd {
        Some(fd) => (libc::MAP_SHARED, fd),
        None => (libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1),
    };
    // SAFETY: a new mapping, or one replacing a retired pool's range, which nothing but stragglers of
    // the retired runtime (see `give_back`) can still touch; checked by the caller.
    let map = unsafe {
        libc::mmap(
            hint,
            bytes,
            libc::PROT_READ | libc::PROT_WRITE,
            share | fixed,
            fd,
            0,
        )
    };
    // A range whose MAP_FIXED failed is not kept: the kernel may have unmapped it already, and given
    // it to another mapping since.
    map
}

/// Faults in the pool's pages, in the order threads take the chunks, without changing what they hold
/// (`MADV_POPULATE_WRITE`), a step at a time: the collector's work when it has nothing else to do. A
/// fault in the middle of a chunk costs more than the events around it; mapping the pool with
/// `MAP_POPULATE` instead held up the program's start by 10-15 ms (16 MiB), and doing it all at once
/// in the collector left a fast program waiting for chunks the collector was not returning. A thread
/// that takes a chunk before its turn here faults its pages itself; on kernels before 5.14 they all do.
///
/// Only [`PREFAULT_AHEAD`] bytes of chunks beyond the highest one taken so far ([`Pool::take`]) are
/// faulted in: the free stack keeps reusing the same few chunks, and faulting in the whole pool
/// (16 MiB by default: 4,096 pages of the memfd shared with `ferrotrace record`) cost about 10 ms of
/// the collector's CPU per run, 5 ns per traced call on a program of 2 M calls (zstd, see
/// docs/performance.md).
pub struct Prefault {
    /// Where the next step starts; `usize::MAX` once the kernel refused the advice.
    at: usize,
}

/// How far [`Prefault`] stays ahead of the highest chunk taken: 1 MiB (16 chunks of the default
/// size, at least one chunk).
pub const PREFAULT_AHEAD: usize = 1 << 20;

impl Prefault {
    /// Faults in the next 1 MiB up to [`PREFAULT_AHEAD`] beyond the highest chunk of `pool` taken so
    /// far; false once there is nothing left to do until threads take more chunks.
    pub fn step(&mut self, pool: &Pool) -> bool {
        const STEP: usize = 1 << 20;
        let chunk_bytes = pool.chunk_records * RECORD_SIZE;
        let ahead = (PREFAULT_AHEAD / chunk_bytes).max(1);
        let wanted = (pool.taken.load(Ordering::Relaxed) as usize + ahead).min(pool.count);
        let end = pool.base as usize + wanted * chunk_bytes;
        if self.at >= end {
            return false;
        }
        let len = STEP.min(end - self.at);
        // SAFETY: the range lies within the pool's mapping (its start rounded down to the page, inside
        // the shared area's head when the pool follows it); the advice changes no byte.
        let r =
            unsafe { libc::madvise(self.at as *mut libc::c_void, len, libc::MADV_POPULATE_WRITE) };
        // Refused (an older kernel): pages fault in as threads write them.
        self.at = if r == 0 { self.at + len } else { usize::MAX };
        true
    }
}

// SAFETY: the mapping is shared memory handed out by index through the queues: a chunk index is owned by
// exactly one thread (or queue) at a time.
unsafe impl Send for Pool {}
// SAFETY: as above.
unsafe impl Sync for Pool {}

impl Pool {
    /// Maps `count` chunks of `chunk_bytes` each, in private memory.
    pub fn new(chunk_bytes: usize, count: usize) -> Result<Pool, String> {
        let count = count.max(2);
        let bytes = chunk_bytes * count;
        let base = map_pool(bytes, None);
        if base == libc::MAP_FAILED {
            return Err(format!(
                "cannot map {bytes} bytes of trace buffers: {}",
                std::io::Error::last_os_error()
            ));
        }
        Ok(Pool::over(
            base.cast(),
            chunk_bytes,
            count,
            None,
            (base as usize, bytes),
        ))
    }

    /// Maps `count` chunks of `chunk_bytes` each with their descriptors in the memfd `fd` that
    /// `ferrotrace record` passed (ferrotrace_core::shared), so that record can recover the chunks not
    /// written yet if this process dies without warning. The header names this process and the trace
    /// (`session_start_ns`). A forked child does not inherit the mapping (it could only corrupt its
    /// parent's chunks).
    pub fn in_shared(
        fd: i32,
        chunk_bytes: usize,
        count: usize,
        session_start_ns: u64,
    ) -> Result<Pool, String> {
        let count = count.max(2);
        let bytes = shared::area_bytes(chunk_bytes, count);
        let err = |what: &str| format!("{what}: {}", std::io::Error::last_os_error());
        // SAFETY: sizing and mapping the memfd we were given, checked; the header is written through
        // the fresh mapping before any thread can see the pool.
        unsafe {
            if libc::ftruncate(fd, bytes as libc::off_t) != 0 {
                return Err(err("cannot size the shared trace buffers"));
            }
            let map = map_pool(bytes, Some(fd));
            if map == libc::MAP_FAILED {
                return Err(err("cannot map the shared trace buffers"));
            }
            libc::madvise(map, bytes, libc::MADV_DONTFORK);
            // Written only through the header's atomics: `record` maps the same memory
            // (`shared::Area::new`'s contract).
            let header = &*(map as *const shared::Header);
            header.magic.store(shared::MAGIC_WORD, Ordering::Relaxed);
            header.pid.store(std::process::id(), Ordering::Relaxed);
            header
                .session_start_ns
                .store(session_start_ns, Ordering::Relaxed);
            header
                .chunk_bytes
                .store(chunk_bytes as u32, Ordering::Relaxed);
            header.chunk_count.store(count as u32, Ordering::Relaxed);
            header.version.store(shared::VERSION, Ordering::Release);
            let descriptors = core::slice::from_raw_parts(
                map.cast::<u8>().add(shared::DESCRIPTORS_OFFSET) as *const Descriptor,
                count,
            );
            let base = map.cast::<u8>().add(shared::chunks_offset(count));
            let mut pool = Pool::over(
                base.cast(),
                chunk_bytes,
                count,
                Some(descriptors),
                (map as usize, bytes),
            );
            pool.signals =
                Some(&*(map.cast::<u8>().add(shared::SIGNALS_OFFSET) as *const shared::Signals));
            Ok(pool)
        }
    }

    fn over(
        base: *mut Record,
        chunk_bytes: usize,
        count: usize,
        descriptors: Option<&'static [Descriptor]>,
        mapping: (usize, usize),
    ) -> Pool {
        let queues = queues_for(count);
        Pool {
            base,
            chunk_records: chunk_bytes / RECORD_SIZE,
            count,
            free: &queues.free,
            full: &queues.full,
            queues,
            descriptors,
            signals: None,
            mapping,
            taken: AtomicU32::new(0),
        }
    }

    /// Lets a child forked from now on inherit the pool shared with `ferrotrace record` (which is
    /// mapped so that children do not: they could only corrupt it), for the one child that must
    /// write it out (`exit::write_end_in_child`). Async-signal-safe.
    pub fn inherit_on_fork(&self) {
        if self.descriptors.is_some() {
            let (start, bytes) = self.mapping;
            // SAFETY: advice on our own mapping, changing no byte of it.
            unsafe { libc::madvise(start as *mut libc::c_void, bytes, libc::MADV_DOFORK) };
        }
    }

    /// The runtime of an attached recording retired (its trace written, every thread stopped): gives
    /// the pool's memory back, and keeps its address range and its queues for the next pool. The range is mapped
    /// again as untouched anonymous memory (`MAP_FIXED | MAP_NORESERVE`, no page in it): the pages the
    /// pool faulted in are freed (a shared memfd's too, once `record` closes it), and a store from a
    /// thread that was past its cursor check in a trampoline when it was stopped lands in a fresh page
    /// instead of faulting. The pool must not be used afterwards.
    pub fn give_back(&self) {
        let (start, bytes) = self.mapping;
        // SAFETY: replaces our own mapping with a fresh one of the same range; nothing but the
        // stragglers above writes there any more.
        let map = unsafe {
            libc::mmap(
                start as *mut libc::c_void,
                bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE | libc::MAP_FIXED,
                -1,
                0,
            )
        };
        if map != libc::MAP_FAILED {
            PROCESS
                .spare_pools
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push((start, bytes));
        }
        SPARE_QUEUES
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(self.queues);
    }

    /// The work of faulting in the chunks' pages ahead of the threads ([`Prefault`]).
    pub fn prefault(&self) -> Prefault {
        Prefault {
            at: self.base as usize & !(PAGE - 1),
        }
    }

    /// A free chunk for a thread to write, the one freed last; none if every chunk is full or in use.
    pub fn take(&self) -> Option<u32> {
        let index = self.free.pop()?;
        // Mostly a chunk reused below the mark: a load, and no write to a line every thread reads.
        if index >= self.taken.load(Ordering::Relaxed) {
            self.taken.fetch_max(index + 1, Ordering::Relaxed);
        }
        Some(index)
    }

    /// The signal table shared with `ferrotrace record`, if it gave one.
    pub fn signals(&self) -> Option<&'static shared::Signals> {
        self.signals
    }

    /// Number of chunks.
    pub fn count(&self) -> usize {
        self.count
    }

    /// True when the pool is shared with `ferrotrace record`, which recovers the chunks not written
    /// yet if the process is killed (`ferrotrace_launch::salvage`).
    pub fn is_shared(&self) -> bool {
        self.descriptors.is_some()
    }

    /// The shared descriptor of chunk `index`, when the pool is shared with `ferrotrace record`.
    pub fn descriptor(&self, index: u32) -> Option<&'static Descriptor> {
        self.descriptors.and_then(|d| d.get(index as usize))
    }

    /// Records per chunk.
    pub fn chunk_records(&self) -> usize {
        self.chunk_records
    }

    /// True once enough chunks wait for the collector that it should be woken rather than left to its
    /// next periodic look: a quarter of the pool (at least one). Waking costs the producer a futex call
    /// and, in a VM, an inter-processor interrupt; doing it for every chunk cost about 4 ns per traced
    /// call on fib (docs/performance.md), while a quarter of the pool leaves three quarters free for the
    /// time the collector takes to wake.
    pub fn backlog_needs_collector(&self) -> bool {
        self.full.len() >= (self.count / 4).max(1)
    }

    /// First record slot of chunk `index` (panics if there is no such chunk: indices come from the
    /// pool's own queues, and the check costs nothing next to the slow path that asks).
    pub fn chunk_ptr(&self, index: u32) -> *mut Record {
        assert!((index as usize) < self.count, "chunk {index} out of range");
        // SAFETY: index < count, so the offset stays inside the mapping.
        unsafe { self.base.add(index as usize * self.chunk_records) }
    }

    /// The first `len` records of chunk `index`.
    ///
    /// # Safety
    /// The caller must own the chunk (it came out of `full`) and `len` records must have been written.
    pub unsafe fn records(&self, index: u32, len: usize) -> &[Record] {
        // SAFETY: the chunk lies inside the mapping (chunk_ptr checks the index) and is at least
        // `len.min(chunk_records)` records long; the caller owns it and its records are written.
        unsafe { core::slice::from_raw_parts(self.chunk_ptr(index), len.min(self.chunk_records)) }
    }
}

const EMPTY: u32 = u32::MAX;

/// A lock-free stack of chunk indices (Treiber stack). The head packs a 32-bit modification tag with the
/// top index, so a pop that raced with a pop and a push of the same index fails its compare-exchange
/// instead of corrupting the list (ABA). Links live in a fixed array: nothing is ever freed.
pub struct FreeStack {
    head: AtomicU64,
    next: Box<[AtomicU32]>,
}

impl FreeStack {
    /// An empty stack for indices below `capacity`.
    pub fn new(capacity: usize) -> FreeStack {
        FreeStack {
            head: AtomicU64::new(EMPTY as u64),
            next: (0..capacity).map(|_| AtomicU32::new(EMPTY)).collect(),
        }
    }

    /// Pushes `index` (which must not be on the stack already).
    pub fn push(&self, index: u32) {
        let mut head = self.head.load(Ordering::Acquire);
        loop {
            self.next[index as usize].store(head as u32, Ordering::Relaxed);
            let new = (((head >> 32) + 1) << 32) | index as u64;
            match self
                .head
                .compare_exchange_weak(head, new, Ordering::Release, Ordering::Acquire)
            {
                Ok(_) => return,
                Err(h) => head = h,
            }
        }
    }

    /// Pops the most recently pushed index.
    pub fn pop(&self) -> Option<u32> {
        let mut head = self.head.load(Ordering::Acquire);
        loop {
            let top = head as u32;
            if top == EMPTY {
                return None;
            }
            let next = self.next[top as usize].load(Ordering::Relaxed);
            let new = (((head >> 32) + 1) << 32) | next as u64;
            match self
                .head
                .compare_exchange_weak(head, new, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return Some(top),
                Err(h) => head = h,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn collector_is_needed_once_a_quarter_of_the_pool_waits() {
        let pool = Pool::new(256, 8).unwrap();
        let full = |index| FullChunk {
            index,
            len: 0,
            tid: 1,
            seq: index,
            skip: 0,
        };
        assert!(!pool.backlog_needs_collector());
        pool.full.push(full(0)).unwrap();
        assert!(!pool.backlog_needs_collector());
        pool.full.push(full(1)).unwrap();
        assert!(pool.backlog_needs_collector());
        // A pool too small to wait for: every chunk counts.
        let tiny = Pool::new(256, 2).unwrap();
        tiny.full.push(full(0)).unwrap();
        assert!(tiny.backlog_needs_collector());
    }

    #[test]
    fn stack_is_lifo() {
        let s = FreeStack::new(4);
        s.push(1);
        s.push(3);
        assert_eq!(s.pop(), Some(3));
        assert_eq!(s.pop(), Some(1));
        assert_eq!(s.pop(), None);
    }

    #[test]
    fn concurrent_pops_and_pushes_never_duplicate_or_lose_an_index() {
        const N: u32 = 64;
        let s = std::sync::Arc::new(FreeStack::new(N as usize));
        for i in 0..N {
            s.push(i);
        }
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let s = s.clone();
                std::thread::spawn(move || {
                    for _ in 0..20_000 {
                        let mut held = Vec::new();
                        for _ in 0..3 {
                            if let Some(i) = s.pop() {
                                held.push(i);
                            }
                        }
                        for i in held {
                            s.push(i);
                        }
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let mut seen = std::collections::HashSet::new();
        while let Some(i) = s.pop() {
            assert!(seen.insert(i), "index {i} twice");
        }
        assert_eq!(seen.len(), N as usize);
    }

    /// Resident pages among the pool's chunks `from..to` (`mincore`).
    fn resident_pages(pool: &Pool, from: usize, to: usize) -> usize {
        let chunk = pool.chunk_records * RECORD_SIZE;
        let start = pool.base as usize + from * chunk;
        let pages = (to - from) * chunk / PAGE;
        let mut vec = vec![0u8; pages];
        // SAFETY: a range inside the pool's mapping, and a vector of one byte per page of it.
        let r =
            unsafe { libc::mincore(start as *mut libc::c_void, pages * PAGE, vec.as_mut_ptr()) };
        assert_eq!(r, 0, "mincore: {}", std::io::Error::last_os_error());
        vec.iter().filter(|&&b| b & 1 != 0).count()
    }

    #[test]
    fn prefault_stays_a_mebibyte_ahead_of_the_chunks_taken() {
        const CHUNK: usize = 64 << 10;
        let pool = Pool::new(CHUNK, 64).unwrap();
        let ahead = PREFAULT_AHEAD / CHUNK;
        let chunk_pages = CHUNK / PAGE;
        let mut prefault = pool.prefault();
        assert_eq!((pool.take(), pool.take()), (Some(0), Some(1)));
        while prefault.step(&pool) {}
        if resident_pages(&pool, 0, 1) == 0 {
            // MADV_POPULATE_WRITE refused (a kernel before 5.14): nothing is faulted in ahead.
            return;
        }
        assert_eq!(
            resident_pages(&pool, 0, 2 + ahead),
            (2 + ahead) * chunk_pages
        );
        assert_eq!(resident_pages(&pool, 2 + ahead, 64), 0);
        // Threads take more chunks: the prefault goes on, as far ahead again, and stops there.
        for i in 2..20 {
            assert_eq!(pool.take(), Some(i));
        }
        assert!(prefault.step(&pool));
        while prefault.step(&pool) {}
        assert_eq!(
            resident_pages(&pool, 0, 20 + ahead),
            (20 + ahead) * chunk_pages
        );
        assert_eq!(resident_pages(&pool, 20 + ahead, 64), 0);
        // Chunks given back and taken again do not move it.
        pool.free.push(5);
        assert_eq!(pool.take(), Some(5));
        assert!(!prefault.step(&pool));
    }
}
