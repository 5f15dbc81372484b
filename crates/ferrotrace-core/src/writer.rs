//! Chunk framing over `std::io::Write` (feature `std`).
//!
//! [`TraceWriter`] writes the file header once and then whole chunks, numbered in order: a payload is
//! built in memory (from a [`crate::schema`] type, or by the caller) and written behind its header with
//! one `write_all`, so a reader never sees half a chunk unless the process dies inside that call.

use std::io::{self, Write};

use crate::format::{file_header, ChunkHeader, ChunkKind};
use crate::schema::Payload;

/// Appends chunks to a trace file.
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
pub struct TraceWriter<W: Write> {
    out: W,
    written: u64,
    seq: u32,
    scratch: Vec<u8>,
}

impl<W: Write> TraceWriter<W> {
    /// Writes the file header to `out`.
    pub fn new(mut out: W) -> io::Result<Self> {
        let h = file_header();
        out.write_all(&h)?;
        Ok(TraceWriter {
            out,
            written: h.len() as u64,
            seq: 0,
            scratch: Vec::new(),
        })
    }

    /// Continues a file whose header and first `next_seq` chunks `out` already holds, `written` bytes
    /// in all.
    pub fn resume(out: W, written: u64, next_seq: u32) -> Self {
        TraceWriter {
            out,
            written,
            seq: next_seq,
            scratch: Vec::new(),
        }
    }

    /// Appends one chunk whose payload the caller encoded.
    pub fn chunk(&mut self, kind: ChunkKind, payload: &[u8]) -> io::Result<()> {
        let header = ChunkHeader::for_payload(kind, self.seq, payload).encode();
        self.out.write_all(&header)?;
        self.out.write_all(payload)?;
        self.written += (header.len() + payload.len()) as u64;
        self.seq += 1;
        Ok(())
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
        self.seq
    }

    /// Bytes written so far, header included.
    pub fn bytes_written(&self) -> u64 {
        self.written
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
