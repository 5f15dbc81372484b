//! The in-memory record written by the traced thread's hot path.
//!
//! A record is two little-endian `u64` words, 16 bytes, so that the assembly hot path can store it with
//! two `mov`s and no arithmetic besides the `rdtsc` combine:
//!
//! | word | bits | meaning |
//! |---|---|---|
//! | 0 | 0–63 | raw TSC timestamp |
//! | 1 | 0–31 | id: function id, tracepoint id, or a count (see [`EventKind`]) |
//! | 1 | 32–39 | [`EventKind`] |
//! | 1 | 40–47 | number of 16-byte payload slots that follow this record in the chunk |
//! | 1 | 48–63 | the CPU the event happened on, where the runtime records it (tracepoints always; function events in `ferrotrace live`), else zero; 0xfffe and 0xffff: unknown; a Free record: bits 32–47 of its address. In memory only: the file does not carry it |
//!
//! A Free record carries its address without a payload slot (the hot path writes 16 bytes, not 32): the
//! low 32 bits in the id field, bits 32–47 in bits 48–63 of word 1 (user-space addresses have 47 bits).
//! Its id on disk is 0 (see [`Record::free`]).
//!
//! ## Short records
//!
//! The hot paths of function entries and exits (XRay trampolines, mcount and fentry hooks) write one
//! word, 8 bytes, where it fits: a chunk is a sequence of `u64` words holding short and long records.
//! A long record's first word is its TSC, whose bit 63 is clear; a short record is one word with bit 63
//! set, stored with one `mov` (never half-written):
//!
//! | bits | meaning |
//! |---|---|
//! | 0–31 | the low 32 bits of the TSC |
//! | 32–55 | function id (< 2^24) |
//! | 56–61 | the chunk's generation ([`Generation`]): what tells a record of this use of the chunk from one an earlier use left |
//! | 62 | exit (else entry) |
//! | 63 | 1 |
//!
//! A reader ([`RawRecords`]) rebuilds the full TSC from the previous record of the chunk: the value
//! with those low bits nearest to it. It is exact: a hot path writes short only when the high half of
//! its TSC equals that of the last long record it wrote in this chunk (the first record of every chunk is
//! long), so every record between them has that high half too on a thread whose TSC does not go back;
//! and "nearest" keeps it right when a signal handler's records come between a `rdtsc` and its store.
//! Every other writer (tracepoints, allocations, the tracing layer, samples, live mode with its CPU
//! bits) writes long records. A short record carries no CPU: it reads back as unknown (0xffff).
//! Payload slots are 16 bytes, and records are 8-byte aligned.
//!
//! The XRay entry trampoline loads the function id into `r10d` (which zero-extends), so an ENTRY record's
//! word 1 is the id itself and an EXIT is the id with bit 32 set: the trampolines need one `bts`.

/// What a record says happened.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum EventKind {
    /// A function was entered; id = function id.
    Entry = 0,
    /// A function returned; id = function id.
    Exit = 1,
    /// A function left by a tail call (it will not pass its exit sled); id = function id.
    TailExit = 2,
    /// A static tracepoint fired; id = tracepoint id; the payload holds its arguments.
    Tracepoint = 3,
    /// Memory was allocated; id = stack id + 1 (0: no stack); fields `size`, `address`.
    Alloc = 4,
    /// Memory was freed; id = 0; field `address`.
    Free = 5,
    /// Events were lost here (drop mode with no free chunk); id = number of events lost.
    Lost = 6,
    /// The thread waited for a free chunk (lossless mode); id = nanoseconds waited (saturating).
    Wait = 7,
    /// The thread was sampled (a timer, a probe hit, time off the CPU); id = stack id + 1 (0: no
    /// stack); fields `sampler` (index in the Samplers chunk) and `weight` (the sampler's unit).
    Sample = 8,
}

/// Number of event kinds the format can express: the kind takes four bits of an event's tag.
pub const EVENT_KINDS: u8 = 16;

impl EventKind {
    /// The kind with this numeric value, if any.
    pub const fn from_u8(v: u8) -> Option<EventKind> {
        Some(match v {
            0 => EventKind::Entry,
            1 => EventKind::Exit,
            2 => EventKind::TailExit,
            3 => EventKind::Tracepoint,
            4 => EventKind::Alloc,
            5 => EventKind::Free,
            6 => EventKind::Lost,
            7 => EventKind::Wait,
            8 => EventKind::Sample,
            _ => return None,
        })
    }

    /// True for kinds that open or close a function frame.
    pub const fn is_function(self) -> bool {
        matches!(
            self,
            EventKind::Entry | EventKind::Exit | EventKind::TailExit
        )
    }
}

/// One 16-byte record, exactly as the hot path stores it.
///
/// Every writer stores `word` before `tsc` (two ordered stores): a record cut in half by the death of
/// the process then keeps the old timestamp of whatever the slot held before, which is how
/// [`crate::shared::recoverable`] tells it from a whole one. A record with payload slots is stored after
/// its slots.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[repr(C, align(8))]
pub struct Record {
    /// Raw timestamp counter value.
    pub tsc: u64,
    /// id | kind << 32 | payload slots << 40.
    pub word: u64,
}

/// Size of a [`Record`] in bytes.
pub const RECORD_SIZE: usize = 16;

/// Size of a raw word in a chunk, the unit of a chunk's length: a short record is one, a long record
/// two, a payload slot two.
pub const WORD_SIZE: usize = 8;

/// Bit 63 of a word: a short record.
pub const SHORT: u64 = 1 << 63;
/// Bit 62 of a short record: an exit.
pub const SHORT_EXIT: u64 = 1 << 62;
/// Function ids below this fit in a short record.
pub const SHORT_ID_LIMIT: u32 = 1 << 24;
/// Where a short record's generation starts.
const GENERATION_SHIFT: u32 = 56;

/// The generation of one use of a chunk: six bits that every short record written into it carries, set
/// from the time the chunk was taken, so that crash salvage ([`crate::shared::recoverable`]) can tell a
/// short record of this use from one an earlier use left in the chunk (one chance in 64 that an earlier
/// use had the same; the timestamp check must pass too).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Generation(u8);

impl Generation {
    /// The generation of a chunk taken at TSC `epoch`.
    pub const fn of_epoch(epoch: u64) -> Generation {
        // Bits 10-15: changes every microsecond or so; two uses of a chunk rarely share it.
        Generation((epoch >> 10) as u8 & 0x3f)
    }

    /// The bits every short record of the chunk carries: the tag and the generation.
    pub const fn short_tag(self) -> u64 {
        SHORT | (self.0 as u64) << GENERATION_SHIFT
    }

    /// The generation a short record carries.
    pub const fn of_short(word: u64) -> Generation {
        Generation((word >> GENERATION_SHIFT) as u8 & 0x3f)
    }
}

/// A short record of `id` at `tsc` (an entry, or an exit) in a chunk of generation `generation`: what the
/// hot paths store (for tests and the Rust writers that want it).
pub const fn short_record(tsc: u64, id: u32, exit: bool, generation: Generation) -> u64 {
    generation.short_tag() | (exit as u64) << 62 | ((id as u64) << 32) | (tsc & 0xffff_ffff)
}

/// The full TSC of a short record whose low 32 bits are `low`, the previous record being at `previous`:
/// the value with those low bits nearest to it.
pub const fn rebuild_tsc(previous: u64, low: u32) -> u64 {
    previous.wrapping_add(low.wrapping_sub(previous as u32) as i32 as i64 as u64)
}

/// The records of a chunk's raw words, short ones expanded to long ones (the CPU unknown), each with
/// its payload slots and the word where it starts. Stops at a record cut off by the end of the words.
/// A long record whose TSC has bit 63 set would read as short: TSC values never do.
pub struct RawRecords<'a> {
    words: &'a [u64],
    pos: usize,
    previous: u64,
}

impl<'a> RawRecords<'a> {
    /// The records of `words`, from the chunk's first word.
    pub const fn new(words: &'a [u64]) -> Self {
        RawRecords {
            words,
            pos: 0,
            previous: 0,
        }
    }

    /// The word where the next record starts.
    pub const fn position(&self) -> usize {
        self.pos
    }

    /// The next record, its payload, and the word where it starts.
    #[inline(always)]
    pub fn next_record(&mut self) -> Option<(Record, &'a [Record], usize)> {
        let at = self.pos;
        let (rec, end) = decode_raw(self.words, at, self.previous)?;
        self.previous = rec.tsc;
        self.pos = end;
        let payload = self.words.get(at + 2..end).unwrap_or(&[]);
        // SAFETY: Record is two u64 words, 8-byte aligned, without padding: an even number of words
        // (2 per payload slot) is a slice of records.
        let payload = unsafe {
            core::slice::from_raw_parts(payload.as_ptr().cast::<Record>(), payload.len() / 2)
        };
        Some((rec, payload, at))
    }
}

/// The record that starts at word `at` of a chunk's raw `words`, the previous record being at TSC
/// `previous` (what a short record's timestamp is rebuilt from), and the word after it and its
/// payload slots; `None` past the end or for a record cut off by it. A short record reads back as an
/// entry or exit on an unknown CPU.
#[inline(always)]
pub fn decode_raw(words: &[u64], at: usize, previous: u64) -> Option<(Record, usize)> {
    /// The CPU of a short record: unknown.
    const UNKNOWN_CPU: u64 = (u16::MAX as u64) << 48;
    let first = *words.get(at)?;
    if first & SHORT != 0 {
        let word =
            (first >> 32) & (SHORT_ID_LIMIT as u64 - 1) | (first & SHORT_EXIT) >> 30 | UNKNOWN_CPU;
        let tsc = rebuild_tsc(previous, first as u32);
        return Some((Record { tsc, word }, at + 1));
    }
    let word = *words.get(at + 1)?;
    let end = at + 2 + 2 * ((word >> 40) & 0xff) as usize;
    (end <= words.len()).then_some((Record { tsc: first, word }, end))
}

impl<'a> Iterator for RawRecords<'a> {
    type Item = (Record, &'a [Record], usize);

    fn next(&mut self) -> Option<Self::Item> {
        self.next_record()
    }
}

/// Appends to `out` the records of a chunk's raw `words` that start at or after word `from`, short
/// ones expanded to long ones, each followed by its payload slots: what the readers that want
/// [`Record`]s take (filters, live mode, flight dumps, crash salvage).
#[cfg(feature = "std")]
pub fn expand(words: &[u64], from: usize, out: &mut std::vec::Vec<Record>) {
    for (rec, payload, at) in RawRecords::new(words) {
        if at >= from {
            out.push(rec);
            out.extend_from_slice(payload);
        }
    }
}

/// A slice of long records as the raw words of a chunk.
pub fn as_words(records: &[Record]) -> &[u64] {
    // SAFETY: Record is two u64 words, 8-byte aligned, without padding.
    unsafe { core::slice::from_raw_parts(records.as_ptr().cast::<u64>(), records.len() * 2) }
}

impl Record {
    /// A record without payload.
    pub const fn new(tsc: u64, kind: EventKind, id: u32) -> Record {
        Record {
            tsc,
            word: id as u64 | (kind as u64) << 32,
        }
    }

    /// A record announcing `slots` 16-byte payload slots after it.
    pub const fn with_payload(tsc: u64, kind: EventKind, id: u32, slots: u8) -> Record {
        Record {
            tsc,
            word: id as u64 | (kind as u64) << 32 | (slots as u64) << 40,
        }
    }

    /// A Free record of `address` (at most 48 bits), without payload.
    pub const fn free(tsc: u64, address: u64) -> Record {
        Record {
            tsc,
            word: (address & 0xffff_ffff) | (EventKind::Free as u64) << 32 | (address >> 32) << 48,
        }
    }

    /// The `Lost` records that say `count` events were lost at `tsc`: as many as it takes, a record's
    /// id (the count) being 32 bits.
    ///
    /// ```
    /// use ferrotrace_core::record::Record;
    /// let counts: Vec<u32> = Record::lost(7, (1 << 32) + 5).map(|r| r.id()).collect();
    /// assert_eq!(counts, [u32::MAX, 6]);
    /// assert_eq!(Record::lost(7, 0).count(), 0);
    /// ```
    pub fn lost(tsc: u64, count: u64) -> impl Iterator<Item = Record> {
        let mut remaining = count;
        core::iter::from_fn(move || {
            let n = remaining.min(u32::MAX as u64);
            remaining -= n;
            (n > 0).then(|| Record::new(tsc, EventKind::Lost, n as u32))
        })
    }

    /// The address of a Free record made by [`Record::free`].
    pub const fn free_address(&self) -> u64 {
        (self.word & 0xffff_ffff) | (self.word >> 48) << 32
    }

    /// The id field.
    pub const fn id(&self) -> u32 {
        self.word as u32
    }

    /// The kind, or `None` for a word the hot path never writes.
    pub const fn kind(&self) -> Option<EventKind> {
        EventKind::from_u8((self.word >> 32) as u8)
    }

    /// Number of payload slots that follow.
    pub const fn payload_slots(&self) -> usize {
        ((self.word >> 40) & 0xff) as usize
    }

    /// Bits 48–63 of the second word: the CPU, where recorded (see the module's table).
    pub const fn cpu(&self) -> u16 {
        (self.word >> 48) as u16
    }

    /// The record without its CPU bits: what the file encodes. A Free record keeps them: they hold
    /// part of its address ([`Record::free`]).
    pub const fn without_cpu(self) -> Record {
        if (self.word >> 32) as u8 == EventKind::Free as u8 {
            return self;
        }
        Record {
            tsc: self.tsc,
            word: self.word & 0x0000_ffff_ffff_ffff,
        }
    }
}
