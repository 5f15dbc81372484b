//! Chunk memory and the two lock-free queues between traced threads and the collector.
//!
//! All chunks live in one pre-faulted anonymous mapping (lazy page faults on the traced thread would cost
//! more than the tracing). A chunk is named by its index. `free` holds the indices of empty chunks,
//! `full` the chunks handed over to the collector; both are bounded MPMC queues
//! (`crossbeam_queue::ArrayQueue`, lock-free, no allocation after creation) sized to the chunk count, so
//! a push never fails.

use crossbeam_queue::ArrayQueue;
use ferrotrace_core::record::{Record, RECORD_SIZE};

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
}

/// The chunk pool.
pub struct Pool {
    base: *mut Record,
    chunk_records: usize,
    count: usize,
    /// Empty chunks.
    pub free: ArrayQueue<u32>,
    /// Chunks waiting for the collector.
    pub full: ArrayQueue<FullChunk>,
}

// SAFETY: the mapping is shared memory handed out by index through the queues: a chunk index is owned by
// exactly one thread (or queue) at a time.
unsafe impl Send for Pool {}
// SAFETY: as above.
unsafe impl Sync for Pool {}

impl Pool {
    /// Maps `count` chunks of `chunk_bytes` each.
    pub fn new(chunk_bytes: usize, count: usize) -> Result<Pool, String> {
        let count = count.max(2);
        let bytes = chunk_bytes * count;
        // SAFETY: anonymous private mapping; checked for failure below.
        let base = unsafe {
            libc::mmap(
                core::ptr::null_mut(),
                bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(format!(
                "cannot map {bytes} bytes of trace buffers: {}",
                std::io::Error::last_os_error()
            ));
        }
        let free = ArrayQueue::new(count);
        for i in 0..count {
            let _ = free.push(i as u32);
        }
        Ok(Pool {
            base: base.cast(),
            chunk_records: chunk_bytes / RECORD_SIZE,
            count,
            free,
            full: ArrayQueue::new(count),
        })
    }

    /// Records per chunk.
    pub fn chunk_records(&self) -> usize {
        self.chunk_records
    }

    /// Number of chunks.
    pub fn count(&self) -> usize {
        self.count
    }

    /// First record slot of chunk `index`.
    pub fn chunk_ptr(&self, index: u32) -> *mut Record {
        debug_assert!((index as usize) < self.count);
        // SAFETY: index < count, so the offset stays inside the mapping.
        unsafe { self.base.add(index as usize * self.chunk_records) }
    }

    /// The first `len` records of chunk `index`.
    ///
    /// # Safety
    /// The caller must own the chunk (it came out of `full`) and `len` records must have been written.
    pub unsafe fn records(&self, index: u32, len: usize) -> &[Record] {
        core::slice::from_raw_parts(self.chunk_ptr(index), len.min(self.chunk_records))
    }
}
