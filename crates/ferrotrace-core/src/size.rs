//! Buffer and chunk sizes as users write them (`16M`, `512K`, `4096`), checked the same way by the
//! runtime (`FERROTRACE_BUFFER_SIZE`, `FERROTRACE_CHUNK_SIZE`) and by `ferrotrace record`, which checks
//! them before it starts the program.

use core::fmt;

use crate::units::{self, UnitError};

/// Why a size was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SizeError {
    /// Not a number of bytes with an optional K, M or G suffix (or zero, or negative).
    Malformed,
    /// Too large to count in bytes.
    Overflow,
    /// A chunk size that is not a power of two of at least [`MIN_CHUNK`].
    BadChunk(usize),
    /// A buffer that cannot hold two chunks: `(buffer, chunk)`.
    TooSmall(usize, usize),
    /// More memory than half of this machine's: `(asked, physical)`.
    TooLarge(usize, usize),
}

impl fmt::Display for SizeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            SizeError::Malformed => f.write_str(
                "expected a positive whole number of bytes with an optional K, M or G (16M, 512K, 4096)",
            ),
            SizeError::Overflow => f.write_str("too large"),
            SizeError::BadChunk(c) => {
                write!(f, "{c} is not a power of two of at least {MIN_CHUNK}")
            }
            SizeError::TooSmall(b, c) => write!(
                f,
                "{b} bytes cannot hold two chunks of {c} bytes (at least {})",
                2 * c
            ),
            SizeError::TooLarge(b, m) => write!(
                f,
                "{} MiB is more than half of this machine's memory ({} MiB): the buffers are allocated at start",
                b >> 20,
                m >> 20
            ),
        }
    }
}

/// The smallest chunk size.
pub const MIN_CHUNK: usize = 256;

/// The chunk size when none is given.
pub const DEFAULT_CHUNK: usize = 64 << 10;

/// The buffer size when none is given.
pub const DEFAULT_BUFFER: usize = 16 << 20;

/// The deepest mcount/fentry shadow stack, and `-D` limit, in frames.
pub const MAX_DEPTH: usize = 1 << 24;

/// The deepest allocation call stack the runtime's hooks walk (`record --alloc-stack-depth`,
/// `FERROTRACE_ALLOC_STACK_DEPTH`), in frames; 0 records no stacks.
pub const ALLOC_MAX_STACK_DEPTH: usize = 256;

/// The allocation call stack depth when none is given, in frames.
pub const ALLOC_DEFAULT_STACK_DEPTH: usize = 64;

/// True for a depth in frames (a shadow stack, a `-D` limit) that the runtime accepts.
pub fn depth_is_valid(frames: usize) -> bool {
    (1..=MAX_DEPTH).contains(&frames)
}

/// Which of the two sizes [`check_sizes`] refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SizeOption {
    /// The buffer size.
    Buffer,
    /// The chunk size.
    Chunk,
}

/// The buffer and chunk sizes as written (`None`: the default), parsed and checked against each
/// other and this machine's memory: `(buffer, chunk)`, or which one is wrong and why.
#[cfg(feature = "std")]
pub fn check_sizes(
    buffer: Option<&str>,
    chunk: Option<&str>,
) -> Result<(usize, usize), (SizeOption, SizeError)> {
    let chunk = chunk
        .map_or(Ok(DEFAULT_CHUNK), parse_size)
        .and_then(check_chunk)
        .map_err(|e| (SizeOption::Chunk, e))?;
    let buffer = buffer
        .map_or(Ok(DEFAULT_BUFFER), parse_size)
        .and_then(|b| check_buffer(b, chunk, physical_memory()))
        .map_err(|e| (SizeOption::Buffer, e))?;
    Ok((buffer, chunk))
}

/// Parses a size in bytes as [`units::parse_size`] does (`16M`, `512K`, `1G`, `4096`; positive), as
/// a `usize` for the buffers that it sizes.
pub fn parse_size(s: &str) -> Result<usize, SizeError> {
    match units::parse_size(s) {
        Ok(n) => usize::try_from(n).map_err(|_| SizeError::Overflow),
        Err(UnitError::Overflow(_)) => Err(SizeError::Overflow),
        Err(_) => Err(SizeError::Malformed),
    }
}

/// Checks a chunk size: a power of two of at least [`MIN_CHUNK`] bytes.
pub fn check_chunk(chunk: usize) -> Result<usize, SizeError> {
    if chunk.is_power_of_two() && chunk >= MIN_CHUNK {
        Ok(chunk)
    } else {
        Err(SizeError::BadChunk(chunk))
    }
}

/// Checks a buffer size against the chunk size and the machine's `physical` memory: at least two
/// chunks, at most half of the memory (lossless and drop mode map and fault in the whole buffer at
/// start; a flight ring grows to its size).
pub fn check_buffer(buffer: usize, chunk: usize, physical: usize) -> Result<usize, SizeError> {
    if buffer < 2 * chunk {
        return Err(SizeError::TooSmall(buffer, chunk));
    }
    if buffer > physical / 2 {
        return Err(SizeError::TooLarge(buffer, physical));
    }
    Ok(buffer)
}

/// This machine's physical memory in bytes (`sysinfo`), or `usize::MAX` if unknown.
#[cfg(feature = "std")]
pub fn physical_memory() -> usize {
    // SAFETY: sysinfo fills the zeroed struct; checked for failure.
    unsafe {
        let mut info: libc::sysinfo = core::mem::zeroed();
        if libc::sysinfo(&mut info) != 0 {
            return usize::MAX;
        }
        (info.totalram as usize).saturating_mul(info.mem_unit.max(1) as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("16M"), Ok(16 << 20));
        assert_eq!(parse_size("512k"), Ok(512 << 10));
        assert_eq!(parse_size("4096"), Ok(4096));
        for bad in ["0", "12Q", "", "garbage", "-5M", "+5M", "1.5M", "M", "0K"] {
            assert_eq!(parse_size(bad), Err(SizeError::Malformed), "{bad}");
        }
        assert_eq!(parse_size("999999999999T"), Err(SizeError::Malformed));
        assert_eq!(parse_size("99999999999999999999"), Err(SizeError::Overflow));
        assert_eq!(parse_size("99999999999G"), Err(SizeError::Overflow));
    }

    #[test]
    fn chunk_and_buffer_limits() {
        assert_eq!(check_chunk(4096), Ok(4096));
        assert!(check_chunk(3000).is_err() && check_chunk(128).is_err());
        let gib = 1usize << 30;
        assert_eq!(check_buffer(16 << 20, 64 << 10, 8 * gib), Ok(16 << 20));
        assert_eq!(
            check_buffer(64 * gib, 64 << 10, 8 * gib),
            Err(SizeError::TooLarge(64 * gib, 8 * gib))
        );
        assert!(check_buffer(64 << 10, 64 << 10, 8 * gib).is_err());
    }
}
