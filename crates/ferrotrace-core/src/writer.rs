//! Chunk framing over `std::io::Write` (feature `std`).
//!
//! [`TraceWriter`] writes the file header once and then whole chunks: the payload is built in memory by
//! the caller (with the [`crate::codec`] functions, into a `Vec<u8>`), and written behind its header with
//! one `write_all`, so a reader never sees half a chunk unless the process dies inside that call.

use std::io::{self, Write};

use crate::codec::{Full, Sink};
use crate::format::{file_header, ChunkHeader, ChunkKind};

impl Sink for Vec<u8> {
    fn put(&mut self, bytes: &[u8]) -> Result<(), Full> {
        self.extend_from_slice(bytes);
        Ok(())
    }
}

/// Appends chunks to a trace file.
///
/// ```
/// use ferrotrace_core::codec::{put_str, put_varint};
/// use ferrotrace_core::format::ChunkKind;
/// use ferrotrace_core::writer::TraceWriter;
///
/// let mut w = TraceWriter::new(Vec::new()).unwrap();
/// let mut payload = Vec::new();
/// put_varint(&mut payload, 42).unwrap(); // tid
/// put_str(&mut payload, "main").unwrap();
/// w.chunk(ChunkKind::Thread, &payload).unwrap();
/// assert_eq!(w.bytes_written(), 16 + 12 + payload.len() as u64);
/// ```
pub struct TraceWriter<W: Write> {
    out: W,
    written: u64,
}

impl<W: Write> TraceWriter<W> {
    /// Writes the file header to `out`.
    pub fn new(mut out: W) -> io::Result<Self> {
        let h = file_header();
        out.write_all(&h)?;
        Ok(TraceWriter {
            out,
            written: h.len() as u64,
        })
    }

    /// Continues a file whose header (and possibly chunks) `out` already holds, `written` bytes in all.
    pub fn resume(out: W, written: u64) -> Self {
        TraceWriter { out, written }
    }

    /// Appends one chunk.
    pub fn chunk(&mut self, kind: ChunkKind, payload: &[u8]) -> io::Result<()> {
        let header = ChunkHeader::for_payload(kind, payload).encode();
        self.out.write_all(&header)?;
        self.out.write_all(payload)?;
        self.written += (header.len() + payload.len()) as u64;
        Ok(())
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
