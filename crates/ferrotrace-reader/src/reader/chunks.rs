//! Each thread's list of Events chunks (the reader's index), in memory bounded by the number of
//! threads, not by the size of the trace: the newest [`BLOCK_ENTRIES`] entries of a thread stay in
//! memory, older ones go in full blocks to an unnamed temporary file (`O_TMPFILE`, 0600, gone when the
//! trace is closed), chained per thread. A 20 GB trace has about 2.5 million chunks: 60 MB of index,
//! which now takes 60 MB of that file and at most 6 KiB per thread in memory.
//!
//! Not for: a thread whose chunks are out of order in the file (a damaged trace). Its list is read back,
//! sorted and kept whole in memory ([`ChunkList::sort_in_memory`]), as the whole index was before.

use std::fs::File;
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt};

use ferrotrace_core::schema::LOST_ONLY_SEQ;

use super::ChunkRef;

/// Entries of one thread kept in memory before they are written out as one block, and the entries of
/// a block.
pub const BLOCK_ENTRIES: usize = 256;
/// Bytes of one entry in a block: offset (8), length (4), number (4), event count (8), little-endian.
const ENTRY_BYTES: usize = 24;
/// A block: the offset of the thread's next block (`NO_BLOCK` for none), then its entries.
const BLOCK_BYTES: usize = 8 + BLOCK_ENTRIES * ENTRY_BYTES;
const NO_BLOCK: u64 = u64::MAX;

/// The temporary file that holds the blocks of every thread's list, made when the first block is
/// written (a trace whose threads have fewer than [`BLOCK_ENTRIES`] chunks each never makes one).
#[derive(Debug, Default)]
pub struct SpillFile {
    file: Option<File>,
    len: u64,
    /// Set once making the file failed: lists then stay in memory (unbounded, as before).
    unavailable: bool,
}

impl SpillFile {
    /// Writes `block` at the end of the file and links it after the block at `after`; returns its
    /// offset, or `None` when there is no file or writing failed (from then on lists stay in memory:
    /// a full temporary directory costs memory, not the analysis).
    fn append(&mut self, block: &[u8], after: Option<u64>) -> Option<u64> {
        if self.file.is_none() && !self.unavailable {
            match open_unnamed() {
                Ok(f) => self.file = Some(f),
                Err(_) => self.unavailable = true,
            }
        }
        if self.unavailable {
            return None;
        }
        let f = self.file.as_ref()?;
        let at = self.len;
        // The block first, then the link to it: a failure leaves the chain as it was.
        let written = f.write_all_at(block, at).and_then(|()| match after {
            Some(prev) => f.write_all_at(&at.to_le_bytes(), prev),
            None => Ok(()),
        });
        if written.is_err() {
            self.unavailable = true;
            return None;
        }
        self.len += block.len() as u64;
        Some(at)
    }

    fn read_block(&self, at: u64, buf: &mut [u8; BLOCK_BYTES]) -> io::Result<()> {
        let f = self.file.as_ref().ok_or_else(|| {
            io::Error::other("the chunk index refers to a temporary file that was not made")
        })?;
        f.read_exact_at(buf, at)
    }

    /// Bytes written to the file.
    pub fn len(&self) -> u64 {
        self.len
    }
}

/// An unnamed file in the temporary directory (`$TMPDIR`, else `/tmp`): no name to race for or to be
/// replaced by a symlink, readable only by us, removed by the kernel when closed.
fn open_unnamed() -> io::Result<File> {
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .mode(0o600)
        .custom_flags(libc::O_TMPFILE)
        .open(std::env::temp_dir())
}

/// One thread's Events chunks in the order the file holds them.
#[derive(Clone, Debug, Default)]
pub struct ChunkList {
    /// Offset of its first block in the spill file, and of its last (whose link the next block sets).
    blocks: Option<(u64, u64)>,
    /// Entries in blocks.
    spilled: u64,
    /// The entries after the blocks (at most [`BLOCK_ENTRIES`] while the file can take blocks).
    tail: Vec<ChunkRef>,
    /// The last chunk number added, to tell whether they come in order.
    last_seq: Option<u32>,
    /// A chunk number came that was not above the one before it.
    pub disordered: bool,
    /// Chunks with a number (all but Lost-only chunks, `schema::LOST_ONLY_SEQ`), and the first and
    /// last of their numbers in the list's order.
    numbered: u64,
    first_numbered: u32,
    last_numbered: u32,
}

impl ChunkList {
    /// Adds the thread's next chunk in file order.
    pub fn push(&mut self, c: ChunkRef, spill: &mut SpillFile) {
        if self.last_seq.is_some_and(|s| c.seq <= s) {
            // Sorted later, in memory (`sort_in_memory`): nothing more goes to the file.
            self.disordered = true;
        }
        self.last_seq = Some(c.seq);
        self.note_number(c.seq);
        self.tail.push(c);
        if self.tail.len() >= BLOCK_ENTRIES && !self.disordered {
            self.spill_tail(spill);
        }
    }

    fn note_number(&mut self, seq: u32) {
        if seq == LOST_ONLY_SEQ {
            return;
        }
        if self.numbered == 0 {
            self.first_numbered = seq;
        }
        self.last_numbered = seq;
        self.numbered += 1;
    }

    /// How many chunks carry a number, and the first and last number (`None` for none): in a list in
    /// order, the lowest and highest.
    pub fn numbers(&self) -> (u64, Option<(u32, u32)>) {
        let range = (self.numbered > 0).then_some((self.first_numbered, self.last_numbered));
        (self.numbered, range)
    }

    /// Events in all its chunks.
    pub fn events(&self, spill: &SpillFile) -> io::Result<u64> {
        let mut cursor = self.iter(spill);
        let mut n = 0u64;
        while let Some(c) = cursor.next_chunk()? {
            n = n.saturating_add(c.count);
        }
        Ok(n)
    }

    fn spill_tail(&mut self, spill: &mut SpillFile) {
        let mut block = Vec::with_capacity(BLOCK_BYTES);
        block.extend(NO_BLOCK.to_le_bytes());
        for c in &self.tail {
            block.extend(c.offset.to_le_bytes());
            block.extend(c.len.to_le_bytes());
            block.extend(c.seq.to_le_bytes());
            block.extend(c.count.to_le_bytes());
        }
        let Some(at) = spill.append(&block, self.blocks.map(|(_, last)| last)) else {
            return;
        };
        self.blocks = Some((self.blocks.map_or(at, |(first, _)| first), at));
        self.spilled += self.tail.len() as u64;
        self.tail.clear();
    }

    /// Number of chunks.
    pub fn len(&self) -> u64 {
        self.spilled + self.tail.len() as u64
    }

    /// True before the first chunk.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Entries held in memory (the tail): at most [`BLOCK_ENTRIES`] for a thread whose chunks are in
    /// order, whatever the size of the trace.
    pub fn in_memory(&self) -> usize {
        self.tail.capacity()
    }

    /// The chunks in order.
    pub fn iter<'a>(&'a self, spill: &'a SpillFile) -> ChunkCursor<'a> {
        ChunkCursor {
            list: self,
            spill,
            next_block: self.blocks.map_or(NO_BLOCK, |(first, _)| first),
            block: Vec::new(),
            pos: 0,
            in_tail: self.blocks.is_none(),
        }
    }

    /// For a disordered thread: reads the whole list into memory, sorted by chunk number, with chunks
    /// whose number repeats dropped; returns how many were dropped.
    pub fn sort_in_memory(&mut self, spill: &SpillFile) -> io::Result<usize> {
        let mut all = Vec::with_capacity(self.len() as usize);
        let mut cursor = self.iter(spill);
        while let Some(c) = cursor.next_chunk()? {
            all.push(c);
        }
        all.sort_by_key(|c| c.seq);
        let before = all.len();
        all.dedup_by_key(|c| c.seq);
        all.shrink_to_fit();
        let dropped = before - all.len();
        *self = ChunkList {
            disordered: true,
            ..ChunkList::default()
        };
        for c in &all {
            self.note_number(c.seq);
        }
        self.tail = all;
        Ok(dropped)
    }
}

/// Reads a thread's chunks in order: a block of the spill file at a time, then the tail.
pub struct ChunkCursor<'a> {
    list: &'a ChunkList,
    spill: &'a SpillFile,
    next_block: u64,
    /// The entries of the block being read.
    block: Vec<ChunkRef>,
    pos: usize,
    in_tail: bool,
}

impl ChunkCursor<'_> {
    /// The next chunk; `Ok(None)` after the last.
    pub fn next_chunk(&mut self) -> io::Result<Option<ChunkRef>> {
        loop {
            if self.in_tail {
                let c = self.list.tail.get(self.pos).copied();
                self.pos += c.is_some() as usize;
                return Ok(c);
            }
            if let Some(&c) = self.block.get(self.pos) {
                self.pos += 1;
                return Ok(Some(c));
            }
            if self.next_block == NO_BLOCK {
                self.in_tail = true;
                self.pos = 0;
                self.block = Vec::new();
                continue;
            }
            self.read_block()?;
        }
    }

    fn read_block(&mut self) -> io::Result<()> {
        let mut buf = [0u8; BLOCK_BYTES];
        self.spill.read_block(self.next_block, &mut buf)?;
        let le64 = |b: &[u8]| u64::from_le_bytes(b.try_into().expect("8 bytes"));
        let le32 = |b: &[u8]| u32::from_le_bytes(b.try_into().expect("4 bytes"));
        self.next_block = le64(&buf[..8]);
        self.block.clear();
        self.block
            .extend(buf[8..].chunks_exact(ENTRY_BYTES).map(|e| ChunkRef {
                offset: le64(&e[..8]),
                len: le32(&e[8..12]),
                seq: le32(&e[12..16]),
                count: le64(&e[16..24]),
            }));
        self.pos = 0;
        Ok(())
    }
}
