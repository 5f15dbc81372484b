//! What the index pass found wrong with a trace besides a cut-short tail ([`Problem`]).
//!
//! Typed, so that a command or a test can tell one kind from another without matching on words;
//! each prints as the one sentence a warning says ([`Trace::warnings`](super::Trace::warnings)).

use std::fmt;

/// One thing wrong with a trace: the results read from it are not what was recorded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Problem {
    /// A chunk whose header, length or checksum is wrong: skipped, reading went on at the next whole
    /// chunk.
    DamagedChunk {
        /// Where the damaged chunk starts.
        offset: u64,
        /// What is wrong with it.
        reason: String,
        /// The first chunk number skipped.
        first_skipped: u32,
        /// The chunk number reading resumed at.
        resumed_at: u32,
        /// The byte reading resumed at.
        resumed_offset: u64,
    },
    /// Chunk numbers `first..=last` are absent from the file.
    MissingChunks {
        /// The first missing number.
        first: u32,
        /// The last missing number.
        last: u32,
        /// The byte of the chunk that follows the gap.
        before: u64,
    },
    /// A chunk whose number was already read, or is lower than the one expected: skipped.
    ChunkOutOfPlace {
        /// Its number.
        seq: u32,
        /// Where it starts.
        offset: u64,
        /// The number that was expected there.
        expected: u32,
    },
    /// The first chunk is not a Session chunk.
    NoSession,
    /// The file ends cleanly but without an End chunk (nor record's Salvage).
    NoEnd {
        /// Where the readable prefix ends.
        after: u64,
    },
    /// Chunks after the End chunk: ignored.
    AfterEnd {
        /// How many.
        chunks: u64,
    },
    /// The End chunk counts a different number of chunks before it than the file holds.
    EndCountsChunks {
        /// What End says.
        counted: u32,
        /// What the file holds.
        held: u32,
    },
    /// The End chunk counts a different number of events than the file holds.
    EndCountsEvents {
        /// What End says (less what it says was dropped).
        counted: u64,
        /// What the file holds.
        held: u64,
    },
    /// A thread's Events chunks repeat a chunk number: the repeats are skipped.
    ThreadChunksRepeat {
        /// The thread.
        tid: u32,
        /// How many repeats.
        repeats: usize,
    },
    /// A thread's chunk index could not be read back from its temporary file: its events are left
    /// out.
    ThreadIndexUnreadable {
        /// The thread.
        tid: u32,
        /// Why.
        error: String,
    },
    /// A thread's Events chunks are numbered `first..=last` with some absent.
    ThreadChunksMissing {
        /// The thread.
        tid: u32,
        /// Its lowest number expected.
        first: u32,
        /// Its highest number read.
        last: u32,
        /// How many are absent.
        missing: u64,
    },
    /// A thread's Samples chunks are not numbered `0..count` without gaps.
    ThreadSamplesMisnumbered {
        /// The thread.
        tid: u32,
        /// How many it has.
        count: usize,
    },
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Problem::DamagedChunk {
                offset,
                reason,
                first_skipped,
                resumed_at,
                resumed_offset,
            } => {
                write!(f, "the chunk at byte {offset} is damaged ({reason}): ")?;
                match resumed_at.wrapping_sub(*first_skipped) {
                    0 | 1 => write!(f, "chunk {first_skipped}")?,
                    _ => write!(f, "chunks {first_skipped}..{}", resumed_at.wrapping_sub(1))?,
                }
                write!(
                    f,
                    " (bytes {offset}..{resumed_offset}) skipped, read on from chunk {resumed_at}"
                )
            }
            Problem::MissingChunks {
                first,
                last,
                before,
            } => {
                write!(
                    f,
                    "chunks {first}..{last} are missing (before byte {before})"
                )
            }
            Problem::ChunkOutOfPlace {
                seq,
                offset,
                expected,
            } => write!(
                f,
                "chunk {seq} at byte {offset} repeats or is out of place (expected chunk \
                 {expected}): skipped"
            ),
            Problem::NoSession => f.write_str(
                "the trace has no Session chunk (its first chunk): what recorded it, and how, is \
                 unknown",
            ),
            Problem::NoEnd { after } => write!(
                f,
                "the trace has no End chunk after byte {after}: the process ended without \
                 finishing it (killed, or crashed), or it is still being written"
            ),
            Problem::AfterEnd { chunks } => {
                write!(
                    f,
                    "{chunks} chunks follow the End chunk (appended later?): ignored"
                )
            }
            Problem::EndCountsChunks { counted, held } => write!(
                f,
                "the End chunk counts {counted} chunks before it, the file holds {held}"
            ),
            Problem::EndCountsEvents { counted, held } => write!(
                f,
                "the End chunk counts {counted} events, the file holds {held}"
            ),
            Problem::ThreadChunksRepeat { tid, repeats } => write!(
                f,
                "thread {tid}: {repeats} events chunks repeat a chunk number: skipped"
            ),
            Problem::ThreadIndexUnreadable { tid, error } => write!(
                f,
                "thread {tid}: its chunk index could not be read back from its temporary file \
                 ({error}): its events are left out"
            ),
            Problem::ThreadChunksMissing {
                tid,
                first,
                last,
                missing,
            } => write!(
                f,
                "thread {tid}: its events chunks are numbered {first}..={last} but {missing} of \
                 them are missing"
            ),
            Problem::ThreadSamplesMisnumbered { tid, count } => write!(
                f,
                "thread {tid}: its samples chunks are not numbered 0..{count} without gaps"
            ),
        }
    }
}
