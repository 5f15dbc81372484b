//! The chunk pool in memory shared with `ferrotrace record`, so that a traced process killed without
//! warning (SIGKILL, the OOM killer) loses nothing it recorded: `record` reads the chunks the process had
//! not written to the file yet, after it died, and appends them to the trace ("salvage").
//!
//! `record` creates a memfd and passes it to the program ([`crate::env::SHARED_FD`]); the runtime of the
//! program's own process sizes it and maps its chunk pool there, with a descriptor per chunk that says
//! who holds the chunk and how far it is filled. Layout, all integers little-endian:
//!
//! ```text
//! offset 0        Header (64 bytes): magic "FTSHARE1", version, pid, session start, chunk size and count
//! offset 64       Signals (528 bytes): which signals the program's handlers report, and when each
//!                 last arrived (for `record`, which must not pass on a signal the program got anyway)
//! offset 4096     Descriptor × chunk_count (64 bytes each)
//! chunks_offset   the chunks, chunk_bytes each (page aligned)
//! ```
//!
//! A descriptor is written by the one thread that holds its chunk, fields first and `state` last
//! (release), so that whatever moment the process dies at, a reader finds either the previous
//! complete description or the new one:
//!
//! * [`FREE`]: the chunk is in the free list, or its events are in the file (the collector marks a
//!   chunk free only after the bytes it encoded from it were written);
//! * [`QUEUED`]: handed to the collector, `len` records;
//! * [`OWNED`]: a thread is filling it. The first `len` records were written when the thread took the
//!   chunk; the thread's cursor, which says how many followed, lives in the thread's own memory (the hot
//!   path stays a store into the chunk and a thread-local cursor bump). A reader finds the end by the
//!   records themselves ([`recoverable`]): every record the thread writes after taking the chunk has a
//!   timestamp at or after `epoch`, read after the chunk was taken, while what is left of an earlier use
//!   of the chunk is older; and writers store a record's second word before its timestamp, so a record
//!   cut in half by the kill carries an old timestamp and ends the scan too.

use core::marker::PhantomData;
use core::ops::Range;
use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use crate::record::{EventKind, Record};

/// The first eight bytes of the shared area.
pub const MAGIC: [u8; 8] = *b"FTSHARE1";
/// [`MAGIC`] as the little-endian word [`Header::magic`] holds.
pub const MAGIC_WORD: u64 = u64::from_le_bytes(MAGIC);
/// Layout version.
pub const VERSION: u32 = 1;
/// Where the [`Signals`] table is.
pub const SIGNALS_OFFSET: usize = 64;
/// Where the descriptors start.
pub const DESCRIPTORS_OFFSET: usize = 4096;
/// Bytes per descriptor.
pub const DESCRIPTOR_BYTES: usize = 64;
/// The memfd's name (`/proc/PID/fd/N` shows `/memfd:NAME (deleted)`).
pub const MEMFD_NAME: &str = "ferrotrace-shared";

/// The signals `ferrotrace record` passes on to the program (unless the program got them anyway): the
/// terminal's job-control and termination signals and the two user signals (SIGUSR2 makes a
/// flight-mode program write its ring). Linux numbers: SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGUSR1,
/// SIGUSR2.
pub const RELAYED: [i32; 6] = [1, 2, 3, 15, 10, 12];

/// Descriptor state: free, or written to the file.
pub const FREE: u32 = 0;
/// Descriptor state: a thread is filling the chunk.
pub const OWNED: u32 = 1;
/// Descriptor state: handed to the collector, not written yet.
pub const QUEUED: u32 = 2;

/// Offset of the first chunk, for `count` descriptors.
pub const fn chunks_offset(count: usize) -> usize {
    (DESCRIPTORS_OFFSET + count * DESCRIPTOR_BYTES).next_multiple_of(4096)
}

/// Total size of the shared area.
pub const fn area_bytes(chunk_bytes: usize, count: usize) -> usize {
    chunks_offset(count) + chunk_bytes * count
}

/// The area's header.
#[repr(C)]
pub struct Header {
    /// [`MAGIC_WORD`] (the bytes of [`MAGIC`]).
    pub magic: AtomicU64,
    /// [`VERSION`].
    pub version: AtomicU32,
    /// The process whose pool this is.
    pub pid: AtomicU32,
    /// The `start_realtime_ns` of the trace's Session chunk: ties the area to one trace (an `exec`
    /// starts another).
    pub session_start_ns: AtomicU64,
    /// Bytes per chunk.
    pub chunk_bytes: AtomicU32,
    /// Number of chunks (and descriptors).
    pub chunk_count: AtomicU32,
    _reserved: [u8; 32],
}

/// The signals that reached the program, as its runtime saw them: written from signal handlers (the
/// runtime's own, and the one through which the preload library passes signals on to a handler the
/// program installed), read by `record` when a signal reaches it too.
#[repr(C)]
pub struct Signals {
    /// Bit `n` set: every arrival of signal `n` goes through a handler that notes it here (otherwise
    /// the program ignores it, or handles it without the runtime knowing).
    pub observed: AtomicU64,
    _pad: u64,
    /// CLOCK_MONOTONIC ns of the latest arrival of each signal (0: none).
    pub arrived_ns: [AtomicU64; 64],
}

const _: () = assert!(SIGNALS_OFFSET + core::mem::size_of::<Signals>() <= DESCRIPTORS_OFFSET);

impl Signals {
    /// Notes that signal `sig` arrived at `now_ns` (async-signal-safe).
    pub fn arrived(&self, sig: i32, now_ns: u64) {
        if let Some(a) = self.arrived_ns.get(sig as usize) {
            a.store(now_ns, Ordering::Release);
        }
    }

    /// Says whether arrivals of `sig` are noted from now on.
    pub fn set_observed(&self, sig: i32, observed: bool) {
        if (1..64).contains(&sig) {
            let bit = 1u64 << sig;
            if observed {
                self.observed.fetch_or(bit, Ordering::AcqRel);
            } else {
                self.observed.fetch_and(!bit, Ordering::AcqRel);
            }
        }
    }

    /// Whether arrivals of `sig` are noted.
    pub fn is_observed(&self, sig: i32) -> bool {
        (1..64).contains(&sig) && self.observed.load(Ordering::Acquire) & (1u64 << sig) != 0
    }

    /// The latest arrival of `sig`, CLOCK_MONOTONIC ns (0: none).
    pub fn last_arrival(&self, sig: i32) -> u64 {
        self.arrived_ns
            .get(sig as usize)
            .map_or(0, |a| a.load(Ordering::Acquire))
    }
}

/// One chunk's descriptor.
#[repr(C)]
pub struct Descriptor {
    /// [`FREE`], [`OWNED`] or [`QUEUED`]; written last.
    pub state: AtomicU32,
    /// The thread.
    pub tid: AtomicU32,
    /// The thread's chunk number the records will carry.
    pub seq: AtomicU32,
    /// QUEUED: records in the chunk; OWNED: records written when the thread took it.
    pub len: AtomicU32,
    /// OWNED: a timestamp read after the thread took the chunk.
    pub epoch: AtomicU64,
    /// Records at the start that a flight-mode dump wrote to the file already.
    pub skip: AtomicU32,
    _pad: u32,
    /// The thread's name (NUL-padded), for a thread the file does not name yet.
    pub name: [AtomicU64; 2],
    _reserved: [u8; 16],
}

const _: () = assert!(core::mem::size_of::<Header>() == 64);
const _: () = assert!(core::mem::size_of::<Descriptor>() == DESCRIPTOR_BYTES);

impl Descriptor {
    /// Describes the chunk as taken by thread `tid` (`name`), its `seq`-th, with `len` records written.
    pub fn own(&self, tid: u32, seq: u32, len: u32, epoch: u64, name: &[u8; 16]) {
        self.tid.store(tid, Ordering::Relaxed);
        self.seq.store(seq, Ordering::Relaxed);
        self.len.store(len, Ordering::Relaxed);
        self.epoch.store(epoch, Ordering::Relaxed);
        self.skip.store(0, Ordering::Relaxed);
        for (w, b) in self.name.iter().zip(name.chunks_exact(8)) {
            let mut a = [0u8; 8];
            a.copy_from_slice(b);
            w.store(u64::from_le_bytes(a), Ordering::Relaxed);
        }
        self.state.store(OWNED, Ordering::Release);
    }

    /// Describes the chunk as handed to the collector with `len` records, the first `skip` of them
    /// written already, as the thread's `seq`-th.
    pub fn queue(&self, seq: u32, len: u32, skip: u32) {
        self.seq.store(seq, Ordering::Relaxed);
        self.len.store(len, Ordering::Relaxed);
        self.skip.store(skip, Ordering::Relaxed);
        self.state.store(QUEUED, Ordering::Release);
    }

    /// A flight-mode dump wrote the first `skip` records; the rest will carry `seq`.
    pub fn dumped(&self, seq: u32, skip: u32) {
        // Two fields: written so that either order of death leaves nothing written twice. A larger
        // skip with the old number only leaves a record out; the new number is set last.
        self.skip.store(skip, Ordering::Release);
        self.seq.store(seq, Ordering::Release);
    }

    /// The chunk is free again (its events are in the file).
    pub fn free(&self) {
        self.state.store(FREE, Ordering::Release);
    }

    /// The thread name, without its NUL padding.
    pub fn name(&self) -> [u8; 16] {
        let mut out = [0u8; 16];
        for (w, o) in self.name.iter().zip(out.chunks_exact_mut(8)) {
            o.copy_from_slice(&w.load(Ordering::Relaxed).to_le_bytes());
        }
        out
    }
}

/// A view of a shared area as `record` maps it, while the program runs (the signal table) or after
/// it died (the chunks to salvage). Memory that another process writes is only ever read here through
/// atomics (the header, descriptors and signal table are made of them) or copied out with volatile
/// reads (the records, which the program's threads write with plain stores), never through a `&[u8]`
/// or `&[Record]`. The geometry (`chunk_bytes`, `chunk_count`) is read once, checked, and kept: the
/// program could change the header after that, and nothing here trusts it to stay as it was.
pub struct Area<'a> {
    base: *const u8,
    chunk_bytes: usize,
    chunk_count: usize,
    /// The area is borrowed for `'a`, and its bytes may change under it.
    mapping: PhantomData<&'a [core::cell::UnsafeCell<u8>]>,
}

/// Why an area cannot be read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AreaError {
    /// Too small, a wrong magic or version: the program never set it up.
    NotSetUp,
    /// The sizes in the header do not fit the area.
    BadSizes,
}

impl<'a> Area<'a> {
    /// Checks the header of the `len` bytes at `base` and the sizes it states, and keeps those sizes.
    ///
    /// # Safety
    ///
    /// For all of `'a`, the `len` bytes at `base` must stay mapped and readable (a mapping of the
    /// shared memfd that outlives the `Area`), and whatever writes them — the program's runtime, in
    /// another process or this one — must write the header, the signal table and the descriptors
    /// only through their atomic fields, and nothing else of the area except the chunks' records.
    /// That is how the runtime writes it (`ferrotrace::buffers::pool`). The contents need not be
    /// valid: every size is checked here, and any bit pattern is a valid `Record`.
    pub unsafe fn new(base: *const u8, len: usize) -> Result<Area<'a>, AreaError> {
        if len < DESCRIPTORS_OFFSET || !(base as usize).is_multiple_of(8) {
            return Err(AreaError::NotSetUp);
        }
        let mut area = Area {
            base,
            chunk_bytes: 0,
            chunk_count: 0,
            mapping: PhantomData,
        };
        let h = area.header();
        if h.magic.load(Ordering::Relaxed) != MAGIC_WORD
            || h.version.load(Ordering::Acquire) != VERSION
        {
            return Err(AreaError::NotSetUp);
        }
        let size = h.chunk_bytes.load(Ordering::Relaxed) as usize;
        let count = h.chunk_count.load(Ordering::Relaxed) as usize;
        let fits = count
            .checked_mul(size)
            .and_then(|chunks| chunks.checked_add(chunks_offset(count)))
            .is_some_and(|total| total <= len);
        if size < 256 || !size.is_multiple_of(16) || count > u32::MAX as usize || !fits {
            return Err(AreaError::BadSizes);
        }
        area.chunk_bytes = size;
        area.chunk_count = count;
        Ok(area)
    }

    /// The signal table.
    pub fn signals(&self) -> &'a Signals {
        // SAFETY: inside the first DESCRIPTORS_OFFSET bytes (checked in `new`), 8-byte aligned; plain
        // atomics, and its padding is never written (`new`'s contract).
        unsafe { &*(self.base.add(SIGNALS_OFFSET) as *const Signals) }
    }

    /// The header.
    pub fn header(&self) -> &'a Header {
        // SAFETY: at least DESCRIPTORS_OFFSET bytes, 8-byte aligned; Header is atomics and reserved
        // bytes that are never written (`new`'s contract).
        unsafe { &*(self.base as *const Header) }
    }

    /// Bytes per chunk, as checked by [`Area::new`].
    pub fn chunk_bytes(&self) -> usize {
        self.chunk_bytes
    }

    /// Number of chunks, as checked by [`Area::new`].
    pub fn chunk_count(&self) -> usize {
        self.chunk_count
    }

    /// Descriptor `i` and the records of chunk `i`.
    pub fn chunk(&self, i: usize) -> Option<(&'a Descriptor, SharedRecords<'a>)> {
        if i >= self.chunk_count {
            return None;
        }
        let d = DESCRIPTORS_OFFSET + i * DESCRIPTOR_BYTES;
        let c = chunks_offset(self.chunk_count) + i * self.chunk_bytes;
        // SAFETY: both lie inside the area (the kept geometry was checked against its length in
        // `new`) and are aligned (offsets are multiples of 16 from an 8-aligned base). The descriptor
        // is atomics and bytes never written; the records are only read through `SharedRecords`.
        unsafe {
            Some((
                &*(self.base.add(d) as *const Descriptor),
                SharedRecords {
                    first: self.base.add(c) as *const Record,
                    len: self.chunk_bytes / core::mem::size_of::<Record>(),
                    mapping: PhantomData,
                },
            ))
        }
    }

    /// Every chunk that holds events not in the file: `(descriptor, records)` for each QUEUED or OWNED
    /// chunk, its records already cut to what [`recoverable`] finds.
    pub fn unwritten(
        &self,
        now_tsc: u64,
    ) -> impl Iterator<Item = (&'a Descriptor, SharedRecords<'a>)> + '_ {
        (0..self.chunk_count).filter_map(move |i| {
            let (d, records) = self.chunk(i)?;
            let r = records.slice(recoverable(d, &records, now_tsc));
            (!r.is_empty()).then_some((d, r))
        })
    }
}

/// Records in a shared area, which another process may be writing with plain stores: read one at a
/// time with volatile reads (a copy, never a reference into the area).
#[derive(Clone, Copy)]
pub struct SharedRecords<'a> {
    first: *const Record,
    len: usize,
    mapping: PhantomData<&'a [core::cell::UnsafeCell<Record>]>,
}

impl<'a> SharedRecords<'a> {
    /// Number of records.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when there are none.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The records in `range` (cut to those there are).
    pub fn slice(&self, range: Range<usize>) -> SharedRecords<'a> {
        let end = range.end.min(self.len);
        let start = range.start.min(end);
        SharedRecords {
            // SAFETY: `start <= len`: at most one past the end of the records.
            first: unsafe { self.first.add(start) },
            len: end - start,
            mapping: PhantomData,
        }
    }

    /// Copies the records out (as they are at the moment each is read).
    #[cfg(feature = "std")]
    pub fn to_vec(&self) -> std::vec::Vec<Record> {
        (0..self.len).filter_map(|i| self.get(i)).collect()
    }
}

/// Records that [`recoverable`] scans: a slice in hand, or [`SharedRecords`] in an area.
pub trait RecordSource {
    /// Number of records.
    fn count(&self) -> usize;
    /// Record `i` (a copy), `None` past the end.
    fn get(&self, i: usize) -> Option<Record>;
}

impl RecordSource for [Record] {
    fn count(&self) -> usize {
        self.len()
    }

    fn get(&self, i: usize) -> Option<Record> {
        <[Record]>::get(self, i).copied()
    }
}

impl RecordSource for SharedRecords<'_> {
    fn count(&self) -> usize {
        self.len
    }

    fn get(&self, i: usize) -> Option<Record> {
        // SAFETY: `i < len`: inside the chunk, aligned (see `Area::chunk`); the area stays mapped for
        // `'a` (`Area::new`'s contract); a volatile read copies whatever bits are there, and any bits
        // are a valid Record (two u64).
        (i < self.len).then(|| unsafe { core::ptr::read_volatile(self.first.add(i)) })
    }
}

/// The records of a chunk that its thread wrote and no file holds, as a range of `records`: for a
/// QUEUED chunk its `len` records, for an OWNED one the `len` written when it was taken and every
/// record after them that is whole and newer than `epoch` (and not newer than `now_tsc`, read after
/// the process died); minus the `skip` a flight dump wrote already.
pub fn recoverable<R: RecordSource + ?Sized>(
    d: &Descriptor,
    records: &R,
    now_tsc: u64,
) -> Range<usize> {
    let count = records.count();
    let len = (d.len.load(Ordering::Acquire) as usize).min(count);
    let end = match d.state.load(Ordering::Acquire) {
        QUEUED => len,
        OWNED => {
            let epoch = d.epoch.load(Ordering::Relaxed);
            let mut i = len;
            while let Some(r) = records.get(i) {
                let slots = r.payload_slots();
                // (Bits 48-63 may hold the CPU: anything goes there.)
                let whole = i + 1 + slots <= count
                    && match r.kind() {
                        Some(k) if k.is_function() => r.id() != 0,
                        Some(EventKind::Tracepoint) => r.id() != 0,
                        Some(_) => true,
                        None => false,
                    };
                if !(whole && r.tsc >= epoch && r.tsc <= now_tsc) {
                    break;
                }
                i += 1 + slots;
            }
            i
        }
        _ => 0,
    };
    let skip = (d.skip.load(Ordering::Relaxed) as usize).min(end);
    skip..end
}

#[cfg(test)]
mod tests {
    use super::*;

    fn descriptor() -> Descriptor {
        // SAFETY: all-zero is a valid Descriptor (atomics and bytes).
        unsafe { core::mem::zeroed() }
    }

    #[test]
    fn an_owned_chunk_ends_at_the_first_record_older_than_its_epoch_or_cut_in_half() {
        let d = descriptor();
        // A chunk reused: stale records of an earlier use (times 100..) everywhere.
        let mut chunk = [Record::new(100, EventKind::Entry, 9); 16];
        // The slow path wrote one record (older than the epoch: read before the chunk was taken).
        chunk[0] = Record::new(900, EventKind::Entry, 1);
        d.own(7, 3, 1, 1000, b"worker\0\0\0\0\0\0\0\0\0\0");
        for (i, t) in [(1, 1001), (2, 1005), (3, 1010)] {
            chunk[i] = Record::new(t, EventKind::Exit, 1);
        }
        // A tracepoint with one payload slot whose bytes look like nothing valid.
        chunk[4] = Record::with_payload(1020, EventKind::Tracepoint, 2, 1);
        chunk[5] = Record {
            tsc: u64::MAX,
            word: u64::MAX,
        };
        // The next record was cut by the kill: its second word stored, its time still the old one.
        chunk[6] = Record {
            tsc: 100,
            word: Record::new(0, EventKind::Entry, 1).word,
        };
        let got = &chunk[recoverable(&d, &chunk[..], 2000)];
        assert_eq!(got.len(), 6);
        assert_eq!(got[4].kind(), Some(EventKind::Tracepoint));
        // Nothing newer than the moment the process died.
        assert_eq!(recoverable(&d, &chunk[..], 1015).len(), 4);
        // A flight dump wrote the first three already.
        d.dumped(4, 3);
        assert_eq!(recoverable(&d, &chunk[..], 2000).len(), 3);
        assert_eq!(d.name()[..6], *b"worker");
    }

    /// The geometry `new` checked is the one used: a header rewritten afterwards (by the program, or
    /// by a corruption) cannot make `chunk` reach outside the area.
    #[test]
    fn an_area_keeps_the_geometry_it_checked() {
        let (chunk_bytes, count) = (256usize, 2usize);
        const LEN: usize = area_bytes(256, 2);
        let len = LEN;
        // u64 words: the 8-byte alignment of a mapping.
        let mut words = [0u64; LEN / 8];
        let base = words.as_mut_ptr().cast::<u8>();
        // SAFETY: `len` bytes of our own vector, written only through the header's atomics below and
        // read only through the area while the vector lives.
        let area = unsafe {
            let h = &*(base as *const Header);
            h.chunk_bytes.store(chunk_bytes as u32, Ordering::Relaxed);
            h.chunk_count.store(count as u32, Ordering::Relaxed);
            h.version.store(VERSION, Ordering::Relaxed);
            assert_eq!(
                Area::new(base, len).err(),
                Some(AreaError::NotSetUp),
                "no magic yet"
            );
            h.magic.store(MAGIC_WORD, Ordering::Relaxed);
            assert_eq!(Area::new(base, len - 1).err(), Some(AreaError::BadSizes));
            Area::new(base, len).unwrap()
        };
        area.header().chunk_count.store(1 << 30, Ordering::Relaxed);
        area.header().chunk_bytes.store(1 << 30, Ordering::Relaxed);
        assert_eq!(
            (area.chunk_count(), area.chunk_bytes()),
            (count, chunk_bytes)
        );
        assert!(area.chunk(count).is_none());
        let (_, records) = area.chunk(count - 1).unwrap();
        assert_eq!(records.len(), chunk_bytes / core::mem::size_of::<Record>());
        assert!(RecordSource::get(&records, records.len()).is_none());
    }

    #[test]
    fn queued_and_free_chunks() {
        let d = descriptor();
        let chunk = [Record::new(5, EventKind::Entry, 1); 8];
        d.queue(2, 5, 0);
        assert_eq!(
            recoverable(&d, &chunk[..], 0).len(),
            5,
            "a queued chunk is whole"
        );
        d.free();
        assert!(recoverable(&d, &chunk[..], 100).is_empty());
    }
}
