//! The trace file: a header and a sequence of typed, numbered, length-prefixed, checksummed chunks.
//!
//! `docs/format.md` is the user-facing description; this module is its single source of truth in code,
//! and [`crate::schema`] holds the one encoder and decoder of every chunk's payload.
//!
//! ```text
//! file   := header chunk*
//! header := magic "FERROTRC" (8) | u16 major | u16 minor | u32 flags (0)               = 16 bytes
//! chunk  := u32 kind | u32 payload_len | u32 seq | u32 crc | payload[payload_len]    = 16 + n bytes
//! ```
//!
//! All integers in headers are little-endian. `seq` numbers the chunks of a file from 0 without gaps, so
//! a reader sees a chunk that is missing, duplicated or out of place; the CRC-32 covers the first twelve
//! header bytes and the payload, so a damaged kind, length or number is caught like damaged data.
//! Payload fields are LEB128 varints and length-prefixed byte strings (see [`crate::codec`]). A writer
//! only ever appends whole chunks, so a process killed mid-write leaves a readable prefix; a reader
//! skips a chunk whose checksum does not match (reading on from the next whole chunk), stops where
//! none follows, and reports what it skipped and how far it got.
//! Readers skip chunk kinds they do not know, so new kinds can be added in a minor version.

/// The eight bytes every trace file starts with.
pub const MAGIC: [u8; 8] = *b"FERROTRC";
/// Major format version: readers refuse other majors.
pub const VERSION_MAJOR: u16 = 2;
/// Minor format version: additions that old readers can skip.
pub const VERSION_MINOR: u16 = 8;
/// Size of the file header.
pub const FILE_HEADER_LEN: usize = 16;
/// Size of a chunk header.
pub const CHUNK_HEADER_LEN: usize = 16;
/// Largest payload a reader accepts (64 MiB): anything larger is treated as corruption.
pub const MAX_CHUNK_PAYLOAD: u32 = 64 << 20;

/// The kinds of chunk. [`crate::schema`] encodes and decodes each payload; `docs/format.md` lists the
/// fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum ChunkKind {
    /// Process metadata, first chunk of every trace ([`crate::schema::Session`]).
    Session = 1,
    /// A clock calibration pair ([`crate::schema::ClockSample`]).
    Clock = 2,
    /// A loaded object ([`crate::schema::Module`]).
    Module = 3,
    /// Traced functions: the embedded symbol table ([`crate::schema::Function`]).
    Functions = 4,
    /// A thread and its name ([`crate::schema::Thread`]).
    Thread = 5,
    /// Events of one thread ([`crate::schema::EventsHeader`], then the events).
    Events = 6,
    /// The end of a complete trace ([`crate::schema::End`]).
    End = 7,
    /// Tracepoint descriptors ([`crate::schema::TracepointDesc`]).
    Tracepoints = 8,
    /// What sampled the program: cpu-clock, probes, off-CPU ([`crate::schema::Sampler`]).
    Samplers = 9,
    /// Call stacks, interned: a tree of return addresses ([`crate::schema::StackNode`]).
    Stacks = 10,
    /// The process died without its End chunk and `ferrotrace record` appended the events it had not
    /// written yet ([`crate::schema::Salvage`]); last chunk of such a trace.
    Salvage = 12,
    /// Per thread, the functions that were already running when its tracing began (exits without
    /// entries), as the writer saw them: what a reader needs to replay a thread from its first chunk
    /// on ([`crate::schema::RunningAtStart`]); before End.
    RunningAtStart = 13,
    /// Callsites of `tracing` spans and events, registered while the program runs
    /// ([`crate::schema::Callsite`]); before the first event that uses them.
    Callsites = 14,
    /// Sample events of one thread, merged by `ferrotrace record --sample` into a function trace after
    /// the program ended: the payload of an Events chunk, numbered per thread apart from its Events
    /// chunks, stamped in the trace's ticks ([`crate::schema::EventsHeader`], then the events).
    Samples = 15,
    /// The literal messages of `tracing` event callsites, each recorded once and left out of the
    /// callsite's events ([`crate::schema::CallsiteMessage`]); before the first event that leaves it
    /// out.
    CallsiteMessages = 16,
    /// Why the in-kernel unwinder stopped stacks early, per reason ([`crate::schema::UnwindStops`]):
    /// `profile --bpf`, before End.
    UnwindStops = 17,
    /// What the events of functions with recorded arguments or return values carry, per function
    /// (`record -A`, `-R`: [`crate::schema::FunctionArgs`]); before the first event that carries them.
    ArgSpecs = 18,
}
impl ChunkKind {
    /// The kind with this number, if this version knows it.
    pub const fn from_u32(v: u32) -> Option<ChunkKind> {
        Some(match v {
            1 => ChunkKind::Session,
            2 => ChunkKind::Clock,
            3 => ChunkKind::Module,
            4 => ChunkKind::Functions,
            5 => ChunkKind::Thread,
            6 => ChunkKind::Events,
            7 => ChunkKind::End,
            8 => ChunkKind::Tracepoints,
            9 => ChunkKind::Samplers,
            10 => ChunkKind::Stacks,
            12 => ChunkKind::Salvage,
            13 => ChunkKind::RunningAtStart,
            14 => ChunkKind::Callsites,
            15 => ChunkKind::Samples,
            16 => ChunkKind::CallsiteMessages,
            17 => ChunkKind::UnwindStops,
            18 => ChunkKind::ArgSpecs,
            _ => return None,
        })
    }
}

/// The encoded file header.
pub const fn file_header() -> [u8; FILE_HEADER_LEN] {
    let mut h = [0u8; FILE_HEADER_LEN];
    let mut i = 0;
    while i < 8 {
        h[i] = MAGIC[i];
        i += 1;
    }
    h[8] = VERSION_MAJOR as u8;
    h[9] = (VERSION_MAJOR >> 8) as u8;
    h[10] = VERSION_MINOR as u8;
    h[11] = (VERSION_MINOR >> 8) as u8;
    h
}

/// Why a file header was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HeaderError {
    /// Fewer than [`FILE_HEADER_LEN`] bytes.
    Short,
    /// The magic is not `FERROTRC`: not a ferrotrace trace.
    NotATrace,
    /// A major version this reader does not know.
    UnsupportedVersion(u16, u16),
}

/// Checks a file header and returns its `(major, minor)` version.
pub fn parse_file_header(bytes: &[u8]) -> Result<(u16, u16), HeaderError> {
    if bytes.len() < FILE_HEADER_LEN {
        return Err(HeaderError::Short);
    }
    if bytes[..8] != MAGIC {
        return Err(HeaderError::NotATrace);
    }
    let major = u16::from_le_bytes([bytes[8], bytes[9]]);
    let minor = u16::from_le_bytes([bytes[10], bytes[11]]);
    if major != VERSION_MAJOR {
        return Err(HeaderError::UnsupportedVersion(major, minor));
    }
    Ok((major, minor))
}

/// A decoded chunk header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkHeader {
    /// Raw kind number (see [`ChunkKind::from_u32`]).
    pub kind: u32,
    /// Payload length in bytes.
    pub len: u32,
    /// Position of the chunk in its file: 0, 1, 2, ... without gaps.
    pub seq: u32,
    /// CRC-32 (IEEE) of the header's first twelve bytes and the payload.
    pub crc: u32,
}

impl ChunkHeader {
    /// The header for `payload` of `kind`, the `seq`-th chunk of its file.
    pub fn for_payload(kind: ChunkKind, seq: u32, payload: &[u8]) -> ChunkHeader {
        ChunkHeader::for_parts(kind, seq, &[payload])
    }

    /// The header for a payload that is `parts` one after the other (a head encoded apart from the
    /// body it counts, so that neither is copied next to the other).
    pub fn for_parts(kind: ChunkKind, seq: u32, parts: &[&[u8]]) -> ChunkHeader {
        let mut h = ChunkHeader {
            kind: kind as u32,
            len: parts.iter().map(|p| p.len() as u32).sum(),
            seq,
            crc: 0,
        };
        h.crc = h.checksum_parts(parts);
        h
    }

    /// The CRC this header and `payload` should carry.
    pub fn checksum(&self, payload: &[u8]) -> u32 {
        self.checksum_parts(&[payload])
    }

    fn checksum_parts(&self, parts: &[&[u8]]) -> u32 {
        let mut c = crc32fast::Hasher::new();
        c.update(&self.encode()[..12]);
        for p in parts {
            c.update(p);
        }
        c.finalize()
    }

    /// Encodes the header.
    pub fn encode(&self) -> [u8; CHUNK_HEADER_LEN] {
        let mut h = [0u8; CHUNK_HEADER_LEN];
        h[0..4].copy_from_slice(&self.kind.to_le_bytes());
        h[4..8].copy_from_slice(&self.len.to_le_bytes());
        h[8..12].copy_from_slice(&self.seq.to_le_bytes());
        h[12..16].copy_from_slice(&self.crc.to_le_bytes());
        h
    }

    /// Decodes a header from exactly [`CHUNK_HEADER_LEN`] bytes.
    pub fn decode(b: &[u8; CHUNK_HEADER_LEN]) -> ChunkHeader {
        let w = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        ChunkHeader {
            kind: w(0),
            len: w(4),
            seq: w(8),
            crc: w(12),
        }
    }

    /// True when the header and `payload` match the checksum.
    pub fn verify(&self, payload: &[u8]) -> bool {
        self.checksum(payload) == self.crc
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trip_and_refusals() {
        let h = file_header();
        assert_eq!(parse_file_header(&h), Ok((VERSION_MAJOR, VERSION_MINOR)));
        assert_eq!(parse_file_header(&h[..10]), Err(HeaderError::Short));
        let mut bad = h;
        bad[0] = b'X';
        assert_eq!(parse_file_header(&bad), Err(HeaderError::NotATrace));
        let mut v1 = h;
        v1[8] = 1;
        assert_eq!(
            parse_file_header(&v1),
            Err(HeaderError::UnsupportedVersion(1, VERSION_MINOR))
        );
    }

    #[test]
    fn chunk_header_round_trip_and_crc() {
        let payload = b"hello";
        let h = ChunkHeader::for_payload(ChunkKind::Thread, 7, payload);
        let d = ChunkHeader::decode(&h.encode());
        assert_eq!(d, h);
        assert!(d.verify(payload));
        assert!(!d.verify(b"hellO"));
        // The checksum covers the kind, the length and the number too.
        for byte in 0..12 {
            let mut bad = h.encode();
            bad[byte] ^= 0x10;
            assert!(!ChunkHeader::decode(&bad).verify(payload), "byte {byte}");
        }
    }
}
