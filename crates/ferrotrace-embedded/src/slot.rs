//! A thread's (or CPU's) region of the embedder's memory: a header, its shadow stack, its records.
//!
//! ```text
//! | Header (128 bytes) | shadow stack: depth × ShadowFrame (24 bytes) | records: 16 bytes each ... |
//! ```
//!
//! Only the thread that owns a slot writes it while tracing (the hooks in [`crate::hook`] read and
//! write the header at fixed offsets); the rest of the crate reads it when tracing is off.

use core::sync::atomic::{AtomicU64, Ordering};

use ferrotrace_core::shadow::ShadowFrame;

/// Bytes of a thread name kept in the header.
pub(crate) const NAME_LEN: usize = 40;

/// The header at the start of each slot. The hooks use the offsets of these fields.
#[repr(C, align(64))]
pub(crate) struct Header {
    /// Address where the next record goes.
    pub cursor: AtomicU64,
    /// End of the record area.
    pub end: AtomicU64,
    /// Start of the record area.
    pub start: AtomicU64,
    /// Next free shadow frame.
    pub top: AtomicU64,
    /// End of the shadow stack.
    pub limit: AtomicU64,
    /// Start of the shadow stack.
    pub base: AtomicU64,
    /// Events lost: the record area was full (stop mode), or the shadow stack was (2 per call).
    pub lost: AtomicU64,
    /// Times the record area wrapped around (wrap mode).
    pub wraps: AtomicU64,
    /// Which hooks recorded here: bits of `schema::source`.
    pub sources: AtomicU64,
    /// The id the embedder gave the thread or CPU, as the trace shows it.
    pub tid: AtomicU64,
    /// Length of `name` in use, and [`REGISTERED`] once `Tracer::register_thread` claimed the slot.
    pub name_len: AtomicU64,
    /// The thread's name, UTF-8 (cut at a character boundary).
    pub name: [AtomicU64; NAME_LEN / 8],
}

/// The bit of [`Header::name_len`] that says the slot was registered (a name is at most
/// [`NAME_LEN`] bytes, so the bits above the length are free).
pub(crate) const REGISTERED: u64 = 1 << 63;

/// Size of the header.
pub(crate) const HEADER: usize = core::mem::size_of::<Header>();
const _: () = assert!(HEADER == 128);

/// A record as the hooks store it: the clock, then the function's address (48 bits) with the kind
/// above it (bit 48: exit).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C)]
pub(crate) struct Record {
    /// Clock ticks (TSC, or the embedder's nanoseconds).
    pub ticks: u64,
    /// `address & 0xffff_ffff_ffff | exit << 48`.
    pub word: u64,
}

impl Record {
    /// The address, made canonical again (bit 47 extended: kernel addresses are high).
    pub fn address(&self) -> u64 {
        (((self.word << 16) as i64) >> 16) as u64
    }

    /// True for an exit.
    pub fn is_exit(&self) -> bool {
        self.word >> crate::hook::EXIT_BIT & 1 != 0
    }
}

impl Header {
    /// Sets the header of a fresh slot of `len` bytes at its own address, with `depth` shadow frames.
    pub fn reset(&self, len: usize, depth: usize) {
        let at = self as *const Header as u64;
        let base = at + HEADER as u64;
        let limit = base + (depth * ShadowFrame::SIZE) as u64;
        let start = limit.next_multiple_of(16);
        let records = (at + len as u64 - start) / 16;
        self.base.store(base, Ordering::Relaxed);
        self.top.store(base, Ordering::Relaxed);
        self.limit.store(limit, Ordering::Relaxed);
        self.start.store(start, Ordering::Relaxed);
        self.cursor.store(start, Ordering::Relaxed);
        self.end.store(start + records * 16, Ordering::Relaxed);
        self.lost.store(0, Ordering::Relaxed);
        self.wraps.store(0, Ordering::Relaxed);
        self.sources.store(0, Ordering::Relaxed);
        self.tid.store(0, Ordering::Relaxed);
        self.name_len.store(0, Ordering::Relaxed);
    }

    /// Claims the slot for one registration: false if it was claimed before. Inlined: it runs while
    /// tracing (from `Tracer::register_thread`).
    #[inline(always)]
    pub fn claim(&self) -> bool {
        self.name_len.fetch_or(REGISTERED, Ordering::AcqRel) & REGISTERED == 0
    }

    /// Keeps `name` (as much as fits, cut at a character boundary), in a slot this caller claimed
    /// ([`Header::claim`]). Inlined: it runs while tracing (from `Tracer::register_thread`).
    #[inline(always)]
    pub fn set_name(&self, name: &str) {
        let mut n = name.len().min(NAME_LEN);
        while !name.is_char_boundary(n) {
            n -= 1;
        }
        let mut words = [0u8; NAME_LEN];
        words[..n].copy_from_slice(&name.as_bytes()[..n]);
        for (w, b) in self.name.iter().zip(words.chunks_exact(8)) {
            let mut le = [0u8; 8];
            le.copy_from_slice(b);
            w.store(u64::from_le_bytes(le), Ordering::Relaxed);
        }
        self.name_len
            .store(n as u64 | REGISTERED, Ordering::Relaxed);
    }

    /// The name into `buf`; empty if none was given.
    pub fn name<'b>(&self, buf: &'b mut [u8; NAME_LEN]) -> &'b str {
        for (w, b) in self.name.iter().zip(buf.chunks_exact_mut(8)) {
            b.copy_from_slice(&w.load(Ordering::Relaxed).to_le_bytes());
        }
        let n = ((self.name_len.load(Ordering::Relaxed) & !REGISTERED) as usize).min(NAME_LEN);
        core::str::from_utf8(&buf[..n]).unwrap_or("")
    }

    /// Records in the record area.
    pub fn capacity(&self) -> u64 {
        (self.end.load(Ordering::Relaxed) - self.start.load(Ordering::Relaxed)) / 16
    }

    /// Records written since the start (those a wrap overwrote included).
    pub fn written(&self) -> u64 {
        let start = self.start.load(Ordering::Relaxed);
        let end = self.end.load(Ordering::Relaxed);
        let cursor = self.cursor.load(Ordering::Relaxed).min(end);
        self.wraps.load(Ordering::Relaxed) * self.capacity() + (cursor - start) / 16
    }

    /// The records it holds, oldest first, as two runs (the second is empty unless it wrapped).
    pub fn records(&self) -> [&[Record]; 2] {
        let start = self.start.load(Ordering::Relaxed);
        let end = self.end.load(Ordering::Relaxed);
        let cursor = self.cursor.load(Ordering::Relaxed).min(end);
        // SAFETY: [start, end) is this slot's record area, 16-byte aligned, inside the embedder's
        // memory that the tracer owns for 'static; tracing is off, so nothing writes it while the
        // slices live (the caller's contract: see `Tracer::write_trace`).
        let run = |from: u64, to: u64| unsafe {
            core::slice::from_raw_parts(from as *const Record, ((to - from) / 16) as usize)
        };
        if self.wraps.load(Ordering::Relaxed) == 0 {
            [run(start, cursor), &[]]
        } else {
            [run(cursor, end), run(start, cursor)]
        }
    }
}
