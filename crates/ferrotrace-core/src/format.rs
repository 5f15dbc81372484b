//! The trace file: a header and a sequence of typed, length-prefixed, checksummed chunks.
//!
//! `docs/format.md` is the user-facing description; this module is its single source of truth in code.
//!
//! ```text
//! file   := header chunk*
//! header := magic "FERROTRC" (8) | u16 major | u16 minor | u32 flags (0)          = 16 bytes
//! chunk  := u32 kind | u32 payload_len | u32 crc32(payload) | payload[payload_len]
//! ```
//!
//! All integers in headers are little-endian. Payload fields are LEB128 varints and length-prefixed byte
//! strings (see [`crate::codec`]). A writer only ever appends whole chunks, so a process killed mid-write
//! leaves a readable prefix; a reader stops at the first chunk that is cut short or whose checksum does
//! not match, and reports how far it got. Readers skip chunk kinds they do not know, so new kinds can be
//! added in a minor version.

/// The eight bytes every trace file starts with.
pub const MAGIC: [u8; 8] = *b"FERROTRC";
/// Major format version: readers refuse other majors.
pub const VERSION_MAJOR: u16 = 1;
/// Minor format version: additions that old readers can skip.
pub const VERSION_MINOR: u16 = 0;
/// Size of the file header.
pub const FILE_HEADER_LEN: usize = 16;
/// Size of a chunk header.
pub const CHUNK_HEADER_LEN: usize = 12;
/// Largest payload a reader accepts (64 MiB): anything larger is treated as corruption.
pub const MAX_CHUNK_PAYLOAD: u32 = 64 << 20;

/// The kinds of chunk. Field layouts are given per variant, in order; `v` is a varint, `s` a
/// length-prefixed byte string.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum ChunkKind {
    /// Process metadata, first chunk of every trace:
    /// `v pid, v ppid, s exe, s cmdline (NUL-separated args), v start_realtime_ns, s ferrotrace_version,
    ///  v mode (0 lossless, 1 drop, 2 flight), v tsc_hz (estimate, 0 if unknown), v instrumentation
    ///  (bits of [`instrumentation`]; readers take a missing trailing field as 0, unknown)`.
    Session = 1,
    /// A clock calibration pair: `v tsc, v monotonic_ns, v realtime_ns`.
    Clock = 2,
    /// A loaded object: `v module_id, v base (load bias), v size (span of its mapped text), s path,
    /// s build_id (raw bytes)`.
    Module = 3,
    /// Traced functions (the embedded symbol table): `v count`, then per function
    /// `v id, v module_id, v address (runtime), v size, s name (as in the symbol table, mangled)`.
    Functions = 4,
    /// A thread: `v tid, s name`.
    Thread = 5,
    /// Events of one thread: `v tid, v seq (per-thread chunk number), v base_tsc, v count`, then `count`
    /// events, each `v tag (id << 3 | kind), v zigzag(tsc - previous tsc)` and, for kinds with a payload,
    /// `s payload`. The first event's previous tsc is `base_tsc`.
    Events = 6,
    /// The end of a complete trace: `v end_reason (0 exit, 1 signal), v signal, v events (recorded by
    /// the collector, counting events a flight ring later dropped), v events_lost`.
    End = 7,
    /// Tracepoint descriptors: `v count`, then per tracepoint `v id, s name, s args (comma-separated
    /// name:type), s format, s file, v line`.
    Tracepoints = 8,
    /// Profiling samples (reserved for `ferrotrace profile`).
    Samples = 9,
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
            9 => ChunkKind::Samples,
            _ => return None,
        })
    }
}

/// The bits of the Session chunk's trailing `instrumentation` field: how the traced program's functions
/// were instrumented (a program and its libraries may use several).
pub mod instrumentation {
    /// XRay sleds (`-Zinstrument-xray`, `clang -fxray-instrument`).
    pub const XRAY: u64 = 1;
    /// Calls to `mcount`/`_mcount` after the prologue (`-Zinstrument-mcount`, `gcc -pg`, `clang -pg`).
    pub const MCOUNT: u64 = 2;
    /// Calls to `__fentry__` before the prologue (`gcc -pg -mfentry`).
    pub const FENTRY: u64 = 4;
    /// 5-byte NOPs patched at run time (`gcc -pg -mnop-mcount -mrecord-mcount`,
    /// `-fpatchable-function-entry`).
    pub const PATCHABLE_NOP: u64 = 8;
    /// Every way to build a program that ferrotrace can trace, for messages.
    pub const HOW_TO_BUILD: &str = "build Rust with RUSTFLAGS='-Zinstrument-xray=always -Cforce-frame-pointers=yes' \
        or RUSTFLAGS='-Zinstrument-mcount -Cforce-frame-pointers=yes' (nightly; `cargo ferrotrace build [--mcount]`), \
        C/C++ with clang -fxray-instrument, gcc -pg or clang -pg, gcc -pg -mfentry, or gcc -pg -mnop-mcount \
        -mrecord-mcount (with -no-pie)";
    /// Every bit with the name `info` prints for it.
    pub const NAMES: [(u64, &str); 4] = [
        (XRAY, "xray"),
        (MCOUNT, "mcount"),
        (FENTRY, "fentry"),
        (PATCHABLE_NOP, "patchable-nop"),
    ];
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
    /// CRC-32 (IEEE) of the payload.
    pub crc: u32,
}

impl ChunkHeader {
    /// The header for `payload` of `kind`.
    pub fn for_payload(kind: ChunkKind, payload: &[u8]) -> ChunkHeader {
        ChunkHeader {
            kind: kind as u32,
            len: payload.len() as u32,
            crc: crc32fast::hash(payload),
        }
    }

    /// Encodes the header.
    pub fn encode(&self) -> [u8; CHUNK_HEADER_LEN] {
        let mut h = [0u8; CHUNK_HEADER_LEN];
        h[0..4].copy_from_slice(&self.kind.to_le_bytes());
        h[4..8].copy_from_slice(&self.len.to_le_bytes());
        h[8..12].copy_from_slice(&self.crc.to_le_bytes());
        h
    }

    /// Decodes a header from exactly [`CHUNK_HEADER_LEN`] bytes.
    pub fn decode(b: &[u8; CHUNK_HEADER_LEN]) -> ChunkHeader {
        let w = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        ChunkHeader {
            kind: w(0),
            len: w(4),
            crc: w(8),
        }
    }

    /// True when `payload` matches the checksum.
    pub fn verify(&self, payload: &[u8]) -> bool {
        crc32fast::hash(payload) == self.crc
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
        let mut v2 = h;
        v2[8] = 2;
        assert_eq!(
            parse_file_header(&v2),
            Err(HeaderError::UnsupportedVersion(2, 0))
        );
    }

    #[test]
    fn chunk_header_round_trip_and_crc() {
        let payload = b"hello";
        let h = ChunkHeader::for_payload(ChunkKind::Thread, payload);
        let d = ChunkHeader::decode(&h.encode());
        assert_eq!(d, h);
        assert!(d.verify(payload));
        assert!(!d.verify(b"hellO"));
    }
}
