//! The callsites this layer registered with the runtime, found again by their `&'static Metadata`
//! on every span and event: a fixed, insert-only, lock-free open-addressing table from the metadata's
//! address to its ids, so that a lookup is a hash and one or two loads. Registration (once per
//! callsite) takes a lock; lookups never do.
//!
//! Not here: what a callsite is called in the trace and how it is registered (that is the runtime's
//! `ferrotrace::callsites`, given the names [`describe`] makes).

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

use ferrotrace::callsites::{self, Description, Ids, Kind};
use tracing_core::{Level, Metadata};

/// Slots of the table: more callsites than this are not recorded (a program has hundreds).
const SLOTS: usize = 1 << 13;

/// `key`: the metadata's address (0: empty slot); `ids`: `function << 32 | tracepoint` (0: the
/// runtime did not select it); `message`: an event's literal message registered with the runtime for
/// the current recording, as [`message_word`] packs it (0: none yet, [`NO_MESSAGE`]: none can be).
pub struct Slot {
    key: AtomicUsize,
    ids: AtomicU64,
    message: AtomicU64,
}

static TABLE: [Slot; SLOTS] = [const {
    Slot {
        key: AtomicUsize::new(0),
        ids: AtomicU64::new(0),
        message: AtomicU64::new(0),
    }
}; SLOTS];

/// Serialises insertions (a key's slot is chosen and filled by one thread at a time).
static INSERTING: Mutex<()> = Mutex::new(());

fn home(meta: usize) -> usize {
    // Fibonacci hashing of the address (metadata statics are 8-aligned: the low bits say nothing).
    ((meta as u64 >> 3).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - SLOTS.trailing_zeros()))
        as usize
}

/// Where a key is in the table: its slot, or the empty slot where it would go, or neither (full).
enum Place {
    Found(&'static Slot),
    Empty(&'static Slot),
    Full,
}

/// Linear probing from the key's home slot.
#[inline(always)]
fn place(key: usize) -> Place {
    let mut i = home(key);
    for _ in 0..SLOTS {
        let slot = &TABLE[i];
        match slot.key.load(Ordering::Acquire) {
            k if k == key => return Place::Found(slot),
            0 => return Place::Empty(slot),
            _ => i = (i + 1) % SLOTS,
        }
    }
    Place::Full
}

/// The ids of a callsite registered and selected, `None` otherwise.
#[inline(always)]
pub fn lookup(meta: &Metadata<'_>) -> Option<Ids> {
    lookup_slot(meta).map(|(ids, _)| ids)
}

/// [`lookup`], and the callsite's slot (for its message: [`Slot::message_word`]).
#[inline(always)]
pub fn lookup_slot(meta: &Metadata<'_>) -> Option<(Ids, &'static Slot)> {
    match place(meta as *const Metadata<'_> as usize) {
        Place::Found(slot) => {
            let ids = slot.ids.load(Ordering::Relaxed);
            (ids != 0).then_some((
                Ids {
                    function: (ids >> 32) as u32,
                    tracepoint: ids as u32,
                },
                slot,
            ))
        }
        Place::Empty(_) | Place::Full => None,
    }
}

/// A [`Slot`]'s `message` when no message could be registered: no text's [`message_word`] (its
/// address would be 0), and not 0, so that registering is not tried again.
const NO_MESSAGE: u64 = 1;

/// `text` (a `'static` literal) as one word, pointer and length, so that an event's message is checked
/// against its callsite's with one load ([`MessageWord::matches`]); 0 (never a registered message's)
/// when it does not fit: an address above 48 bits or a text of 64 KiB or more.
#[inline(always)]
fn message_word(text: &'static str) -> u64 {
    let (addr, len) = (text.as_ptr() as u64, text.len() as u64);
    if addr >> 48 != 0 || len >> 16 != 0 {
        return 0;
    }
    addr << 16 | len
}

/// A callsite's registered message as [`Slot::message_word`] read it: the word of its literal, or 0
/// or [`NO_MESSAGE`] (no text's: their address part is 0, which no text's address is).
#[derive(Clone, Copy, Debug)]
pub struct MessageWord(u64);

impl MessageWord {
    /// A span's fields: no message is left out.
    pub const NONE: MessageWord = MessageWord(0);

    /// Whether `text`, an event's literal message, is the one registered for its callsite in this
    /// recording ([`Slot::register_message`]): its events may then leave it out. The word is taken
    /// apart rather than `text` packed: a text too long or too high to pack compares unequal
    /// without a check of its own (the word's parts are below 2^48 and 2^16).
    #[inline(always)]
    pub fn matches(self, text: &'static str) -> bool {
        text.as_ptr() as u64 == self.0 >> 16 && text.len() as u64 == self.0 & 0xffff
    }
}

impl Slot {
    /// This callsite's registered message, to check its events' messages against
    /// ([`MessageWord::matches`]); read once per event, before its fields are visited.
    #[inline(always)]
    pub fn message_word(&self) -> MessageWord {
        MessageWord(self.message.load(Ordering::Relaxed))
    }

    /// Whether no message is registered for this callsite in this recording yet (nor given up).
    #[inline(always)]
    pub fn may_register_message(&self) -> bool {
        self.message.load(Ordering::Relaxed) == 0
    }

    /// Registers `text`, an event's literal message, as this callsite's, recorded under `tracepoint`
    /// (`ferrotrace::callsites::message`), unless one is already (another thread's) or the recording
    /// ended; when the text does not fit [`message_word`] or the runtime refuses it, marks the
    /// callsite [`NO_MESSAGE`]. Takes a lock and allocates: once per callsite and recording; the
    /// event being recorded must hold its message itself.
    #[cold]
    pub fn register_message(&self, text: &'static str, tracepoint: u32) {
        let word = message_word(text);
        let _one = INSERTING.lock().unwrap_or_else(|e| e.into_inner());
        // The slot may have been forgotten (the recording ended) or given a message by another
        // thread.
        let ids = self.ids.load(Ordering::Relaxed);
        if ids as u32 != tracepoint || self.message.load(Ordering::Relaxed) != 0 {
            return;
        }
        // Index 0: the message is a callsite's first field, and so its events' first value (readers
        // put it back first).
        let registered = word != 0
            && callsites::message(
                tracepoint,
                0,
                crate::fields::cut(text, crate::fields::MAX_STR),
            );
        // A text that does not fit in a word, or one the runtime refused (this process does not
        // record): not tried again at every event; its events hold it.
        let word = if registered { word } else { NO_MESSAGE };
        self.message.store(word, Ordering::Relaxed);
    }
}

/// [`lookup`], and for a callsite not in the table yet, its registration, done here or waited for:
/// while one thread registers a callsite, `tracing` lets every other thread that meets it through
/// ([`may_record`]), and their span or event is recorded once its ids are known.
#[inline(always)]
pub fn lookup_or_register(meta: &'static Metadata<'static>) -> Option<Ids> {
    lookup(meta).or_else(|| registering(meta))
}

/// The registration half of [`lookup_or_register`], for a callsite [`lookup`] did not find.
#[cold]
pub fn registering(meta: &'static Metadata<'static>) -> Option<Ids> {
    match place(meta as *const Metadata<'static> as usize) {
        Place::Empty(_) => register(meta),
        Place::Found(_) | Place::Full => None,
    }
}

/// Whether the layer may record `meta`: registered and selected, or not registered yet. The second
/// happens only while another thread registers it (`tracing` asks every thread that meets a callsite
/// in that time, as its interest is not cached yet): "no" would leave that span or event out of the
/// trace; the layer's methods look it up with [`lookup_or_register`].
pub fn may_record(meta: &Metadata<'_>) -> bool {
    match place(meta as *const Metadata<'_> as usize) {
        Place::Found(slot) => slot.ids.load(Ordering::Relaxed) != 0,
        Place::Empty(_) => true,
        Place::Full => false,
    }
}

/// Registers `meta` with the runtime (once: a callsite registered before answers as it did, unless
/// it was not recorded: a recording may have begun since) and remembers the answer; its ids when the
/// runtime records it.
pub fn register(meta: &'static Metadata<'static>) -> Option<Ids> {
    let _one = INSERTING.lock().unwrap_or_else(|e| e.into_inner());
    let key = meta as *const Metadata<'static> as usize;
    match place(key) {
        Place::Found(slot) => {
            if slot.ids.load(Ordering::Relaxed) == 0 {
                slot.ids
                    .store(ids_word(register_new(meta)), Ordering::Relaxed);
            }
        }
        Place::Empty(slot) => {
            slot.ids
                .store(ids_word(register_new(meta)), Ordering::Relaxed);
            slot.key.store(key, Ordering::Release);
        }
        Place::Full => return None,
    }
    lookup(meta)
}

/// Forgets every callsite's ids (the recording ended): each is registered again when `tracing` asks
/// for its interest next.
pub fn forget_all() {
    let _one = INSERTING.lock().unwrap_or_else(|e| e.into_inner());
    for slot in &TABLE {
        slot.ids.store(0, Ordering::Relaxed);
        slot.message.store(0, Ordering::Relaxed);
    }
}

fn ids_word(ids: Option<Ids>) -> u64 {
    ids.map_or(0, |ids| (ids.function as u64) << 32 | ids.tracepoint as u64)
}

fn register_new(meta: &'static Metadata<'static>) -> Option<Ids> {
    let fields: Vec<&str> = meta.fields().iter().map(|f| f.name()).collect();
    let name = describe(meta);
    callsites::register(&Description {
        kind: if meta.is_span() {
            Kind::Span
        } else {
            Kind::Event
        },
        name: &name,
        target: meta.target(),
        level: level(meta.level()),
        fields: &fields.join(","),
        file: meta.file().unwrap_or(""),
        line: meta.line().unwrap_or(0),
    })
}

/// The name of a callsite in the trace: a span's name; an event's `target::name`, or its target alone
/// when its name is `tracing`'s default (`event FILE:LINE`, which the file and line say already).
pub fn describe(meta: &Metadata<'_>) -> String {
    if meta.is_span() {
        meta.name().to_string()
    } else if meta.name().starts_with("event ") {
        meta.target().to_string()
    } else {
        format!("{}::{}", meta.target(), meta.name())
    }
}

/// The trace's level number: 0 TRACE … 4 ERROR.
fn level(l: &Level) -> u8 {
    match *l {
        Level::TRACE => 0,
        Level::DEBUG => 1,
        Level::INFO => 2,
        Level::WARN => 3,
        Level::ERROR => 4,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slot(tracepoint: u32) -> Slot {
        Slot {
            key: AtomicUsize::new(8),
            ids: AtomicU64::new(tracepoint as u64),
            message: AtomicU64::new(0),
        }
    }

    #[test]
    fn a_message_word_matches_its_text_only() {
        let long: &'static str = Box::leak("done".repeat(16_385).into_boxed_str());
        // The first 4 bytes of a 65,540-byte text: the same address, and a length equal to the
        // text's modulo 2^16.
        let done = &long[..4];
        let word = MessageWord(message_word(done));
        assert!(word.matches(done));
        assert!(!word.matches(&long[..2]));
        assert!(!word.matches(long));
        assert!(!word.matches(&long[4..8]));
        // Nothing registered, or given up: no text matches.
        assert!(!MessageWord::NONE.matches(done));
        assert!(!MessageWord(NO_MESSAGE).matches(done));
        assert!(!MessageWord(NO_MESSAGE).matches(""));
    }

    #[test]
    fn a_message_that_cannot_be_registered_is_given_up_once() {
        // Too long for a word: never registered, and not tried again.
        let long: &'static str = Box::leak("x".repeat(70_000).into_boxed_str());
        assert_eq!(message_word(long), 0);
        let s = slot(5);
        assert!(s.may_register_message());
        s.register_message(long, 5);
        assert!(!s.may_register_message());
        assert!(!s.message_word().matches(long));
        // Refused by the runtime (nothing records this test): the same.
        let s = slot(6);
        s.register_message("done", 6);
        assert!(!s.may_register_message());
        assert!(!s.message_word().matches("done"));
        // A slot whose ids changed meanwhile (the recording ended) is left alone.
        let s = slot(7);
        s.register_message("done", 8);
        assert!(s.may_register_message());
    }
}
