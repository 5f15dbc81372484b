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
#[repr(C, align(16))]
pub struct Record {
    /// Raw timestamp counter value.
    pub tsc: u64,
    /// id | kind << 32 | payload slots << 40.
    pub word: u64,
}

/// Size of a [`Record`] in bytes.
pub const RECORD_SIZE: usize = 16;

/// A record word without the CPU some records carry in bits 48–63 (live mode): what the file encodes
/// of a function event's word ([`Record::without_cpu`]).
pub const WORD_WITHOUT_CPU: u64 = 0x0000_ffff_ffff_ffff;

/// An Exit's kind in a record word: an Exit's word is its Entry's with this bit set.
pub const EXIT_IN_WORD: u64 = (EventKind::Exit as u64) << 32;

/// Asks for the cache line of `records[i + 32]` (eight lines ahead), for a loop that encodes a chunk
/// the traced thread's core has just written: their transfers then overlap rather than each stalling
/// the loop in turn. A no-op off x86_64.
#[inline(always)]
pub fn prefetch_ahead(records: &[Record], i: usize) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch never faults, whatever the address (wrapping_add: nothing past the slice is
    // dereferenced).
    unsafe {
        use core::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        _mm_prefetch::<_MM_HINT_T0>(records.as_ptr().wrapping_add(i + 32).cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (records, i);
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
            word: self.word & WORD_WITHOUT_CPU,
        }
    }
}
