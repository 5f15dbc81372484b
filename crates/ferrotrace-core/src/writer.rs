//! Chunk framing: [`ChunkWriter`] numbers and frames chunks and hands the bytes to a closure, without an
//! allocator or an operating system (a kernel's recorder uses it as it is); [`TraceWriter`] (feature
//! `std`) is the same framing over `std::io::Write`.
//!
//! A payload is built in memory (from a [`crate::schema`] type, or by the caller) and written behind
//! its header, so a reader never sees half a chunk unless the writer dies inside the write.

#[cfg(feature = "std")]
use std::io::{self, Write};

use crate::format::{file_header, ChunkHeader, ChunkKind};
#[cfg(feature = "std")]
use crate::schema::Payload;

/// Frames the chunks of one trace file and hands their bytes to a closure, in order: the file header
/// first, then each chunk's header and payload. Allocation-free; the closure decides where bytes go
/// (a file, a serial port, a buffer) and may fail, which the writer passes on.
///
/// ```
/// use ferrotrace_core::codec::SliceSink;
/// use ferrotrace_core::format::ChunkKind;
/// use ferrotrace_core::schema::{Payload, Thread};
/// use ferrotrace_core::writer::ChunkWriter;
///
/// let mut file = [0u8; 64];
/// let mut len = 0;
/// let mut out = |bytes: &[u8]| -> Result<(), ()> {
///     file[len..len + bytes.len()].copy_from_slice(bytes);
///     len += bytes.len();
///     Ok(())
/// };
/// let mut w = ChunkWriter::new(&mut out).unwrap();
/// let mut payload = [0u8; 16];
/// let mut sink = SliceSink::new(&mut payload);
/// Thread { tid: 42, name: "main", pid: 0 }.encode(&mut sink).unwrap();
/// let n = sink.len();
/// w.chunk(&mut out, ChunkKind::Thread, &[&payload[..n]]).unwrap();
/// assert_eq!(w.next_seq(), 1);
/// assert_eq!(len, 16 + 16 + 7); // header, chunk header, 42 "main" 0
/// ```
#[derive(Clone, Copy, Debug)]
pub struct ChunkWriter {
    written: u64,
    seq: u32,
}

impl ChunkWriter {
    /// Hands the file header to `out`.
    pub fn new<E>(out: &mut impl FnMut(&[u8]) -> Result<(), E>) -> Result<Self, E> {
        let h = file_header();
        out(&h)?;
        Ok(ChunkWriter {
            written: h.len() as u64,
            seq: 0,
        })
    }

    /// Continues a file whose header and first `next_seq` chunks were written, `written` bytes in all.
    pub fn resume(written: u64, next_seq: u32) -> Self {
        ChunkWriter {
            written,
            seq: next_seq,
        }
    }

    /// Hands one chunk of `kind` to `out`: its header, then its payload, which is `parts` one after
    /// the other.
    pub fn chunk<E>(
        &mut self,
        out: &mut impl FnMut(&[u8]) -> Result<(), E>,
        kind: ChunkKind,
        parts: &[&[u8]],
    ) -> Result<(), E> {
        let header = ChunkHeader::for_parts(kind, self.seq, parts);
        out(&header.encode())?;
        for p in parts {
            out(p)?;
        }
        self.written += 16 + header.len as u64;
        self.seq += 1;
        Ok(())
    }

    /// The number the next chunk gets (= chunks written so far).
    pub fn next_seq(&self) -> u32 {
        self.seq
    }

    /// Bytes written so far, header included.
    pub fn bytes_written(&self) -> u64 {
        self.written
    }
}

/// Appends chunks to a trace file: [`ChunkWriter`] over `std::io::Write`.
///
/// ```
/// use ferrotrace_core::format::ChunkKind;
/// use ferrotrace_core::schema::Thread;
/// use ferrotrace_core::writer::TraceWriter;
///
/// let mut w = TraceWriter::new(Vec::new()).unwrap();
/// w.write(&Thread { tid: 42, name: "main", pid: 0 }).unwrap();
/// assert_eq!(w.next_seq(), 1);
/// assert_eq!(w.bytes_written(), 16 + 16 + 7); // header, chunk header, 42 "main" 0
/// ```
#[cfg(feature = "std")]
pub struct TraceWriter<W: Write> {
    out: W,
    frame: ChunkWriter,
    scratch: Vec<u8>,
}

#[cfg(feature = "std")]
impl<W: Write> TraceWriter<W> {
    /// Writes the file header to `out`.
    pub fn new(mut out: W) -> io::Result<Self> {
        let frame = ChunkWriter::new(&mut |b: &[u8]| out.write_all(b))?;
        Ok(TraceWriter {
            out,
            frame,
            scratch: Vec::new(),
        })
    }

    /// Continues a file whose header and first `next_seq` chunks `out` already holds, `written` bytes
    /// in all.
    pub fn resume(out: W, written: u64, next_seq: u32) -> Self {
        TraceWriter {
            out,
            frame: ChunkWriter::resume(written, next_seq),
            scratch: Vec::new(),
        }
    }

    /// Appends one chunk whose payload the caller encoded.
    pub fn chunk(&mut self, kind: ChunkKind, payload: &[u8]) -> io::Result<()> {
        let out = &mut self.out;
        self.frame
            .chunk(&mut |b: &[u8]| out.write_all(b), kind, &[payload])
    }

    /// Appends a chunk holding `payload`.
    pub fn write<'a, P: Payload<'a>>(&mut self, payload: &P) -> io::Result<()> {
        let mut buf = std::mem::take(&mut self.scratch);
        buf.clear();
        let _ = payload.encode(&mut buf);
        let r = self.chunk(P::KIND, &buf);
        self.scratch = buf;
        r
    }

    /// Appends a chunk of `kind` holding a list: `head` (which counts the entries), then each entry.
    pub fn write_list<'a, H: Payload<'a>, E: Payload<'a> + 'a>(
        &mut self,
        head: &H,
        entries: impl IntoIterator<Item = &'a E>,
    ) -> io::Result<()> {
        let mut buf = std::mem::take(&mut self.scratch);
        buf.clear();
        let _ = head.encode(&mut buf);
        for e in entries {
            let _ = e.encode(&mut buf);
        }
        let r = self.chunk(E::KIND, &buf);
        self.scratch = buf;
        r
    }

    /// The number the next chunk gets (= chunks written so far).
    pub fn next_seq(&self) -> u32 {
        self.frame.next_seq()
    }

    /// Bytes written so far, header included.
    pub fn bytes_written(&self) -> u64 {
        self.frame.bytes_written()
    }

    /// Flushes the underlying writer.
    pub fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }

    /// The underlying writer.
    pub fn get_mut(&mut self) -> &mut W {
        &mut self.out
    }

    /// Gives back the underlying writer.
    pub fn into_inner(self) -> W {
        self.out
    }
}
