//! Field values of spans and events, written as tagged values (`ferrotrace_core::tracepoint`'s `value`
//! type: field index, type tag, value) straight into the memory the runtime gives (the thread's
//! chunk), without allocating: strings and `Debug` output are cut at 256 bytes (on a character
//! boundary), as tracepoint strings are, and a value that does not fit is left out.
//!
//! A message without arguments (`info!("done")`: `tracing` hands it over as the `fmt::Arguments` of
//! `format_args!`, behind a `&dyn Debug`) is recognised as the string it is, without `core::fmt`
//! ([`static_message`]): an event's is registered once with the runtime and then left out of its
//! events (readers put it back: `ferrotrace_core::schema::CallsiteMessage`), checked at each event
//! against the callsite's registered one with a word read before the visit ([`MessageWord`]); a
//! span's is copied. Any other `Debug` value is formatted, after the values written so far leave the
//! chunk for the stack (`FieldsOut::leave_chunk`): formatting runs the program's code, whose own
//! records go into that chunk.
//!
//! Why the visitor is shaped as it is: `tracing` reaches it through `&mut dyn Visit`, once per field,
//! so its state lives in memory and each value's write waits for the previous one's length to be
//! stored and loaded again. The visitor holds that state itself (not behind a reference: one load
//! fewer per value), and counts the length from 0, so that the chunk's cursor, which the next event
//! waits for, depends on this event's values only through their total length
//! (docs/performance.md, "`tracing` layer").

use core::fmt::{self, Write};
use core::mem::MaybeUninit;
use std::sync::OnceLock;

use ferrotrace::callsites::FieldsOut;

use crate::sites::{MessageWord, Slot};
use ferrotrace_core::tracepoint::{put_tagged, Tag};
use tracing_core::field::{Field, Value, Visit};

/// Longest string or `Debug` text kept for one field.
pub(crate) const MAX_STR: usize = 256;
/// The room asked of the runtime for one record's fields: 1 KiB covers ordinary events (and is what
/// the runtime gives at most).
pub const MAX: usize = 1024;

/// Tagged values, as a field visitor writes them into the runtime's [`FieldsOut`], which it holds
/// (not a reference to it: each value is then written at a position loaded from the visitor itself,
/// one load fewer on the way from one field to the next) and gives back ([`Values::into_out`]).
pub struct Values<'b> {
    out: FieldsOut<'b>,
    /// The literal message an event's callsite registered (read before the visit, so that checking
    /// its message is one compare with a word of the visitor's own), [`MessageWord::NONE`] for a
    /// span's fields.
    message: MessageWord,
    /// An event's callsite and its tracepoint id, to register its literal message once
    /// ([`Slot::register_message`]). `None` for a span's fields.
    event: Option<(&'static Slot, u32)>,
}

impl<'b> Values<'b> {
    /// No values yet, to be written into `out`: a span's fields.
    #[inline(always)]
    pub fn new(out: FieldsOut<'b>) -> Values<'b> {
        Values {
            out,
            message: MessageWord::NONE,
            event: None,
        }
    }

    /// No values yet, to be written into `out`: the fields of an event of the callsite in `slot`,
    /// recorded under `tracepoint`.
    #[inline(always)]
    pub fn for_event(out: FieldsOut<'b>, slot: &'static Slot, tracepoint: u32) -> Values<'b> {
        Values {
            out,
            message: slot.message_word(),
            event: Some((slot, tracepoint)),
        }
    }

    /// What was written, for the runtime.
    #[inline(always)]
    pub fn into_out(self) -> FieldsOut<'b> {
        self.out
    }

    fn put(&mut self, field: &Field, tag: Tag, bytes: &[u8]) {
        // One check for both of `put_tagged`'s (a byte, and one more than it fits in a byte).
        let index = field.index();
        if index >= u8::MAX as usize {
            return;
        }
        let index = index as u8;
        if let Some(n) = put_tagged(self.out.room(), index, tag, bytes) {
            // SAFETY: `put_tagged` wrote the first `n` bytes of the room.
            unsafe { self.out.wrote(n) };
        }
    }
}

impl Visit for Values<'_> {
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.put(field, Tag::Unsigned, &value.to_le_bytes());
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.put(field, Tag::Signed, &value.to_le_bytes());
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        self.put(field, Tag::Float, &value.to_le_bytes());
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.put(field, Tag::Bool, &[value as u8]);
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.put(field, Tag::Str, cut(value, MAX_STR).as_bytes());
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        // Every call out of here is a tail call: the way of a message left out needs no stack frame.
        let Some(known) = ARGUMENTS_VTABLE.get() else {
            return self.record_debug_learning(field, value);
        };
        match static_message(known, value) {
            Some(text) if field.index() == 0 && self.message.matches(text) => {}
            Some(text) => self.record_message(field, text),
            None => self.format_debug(field, value),
        }
    }
}

impl Values<'_> {
    /// [`Visit::record_debug`] the first time, after [`ArgumentsVtable::learn`].
    #[cold]
    #[inline(never)]
    fn record_debug_learning(&mut self, field: &Field, value: &dyn fmt::Debug) {
        ARGUMENTS_VTABLE.get_or_init(|| ArgumentsVtable::learn(field));
        self.record_debug(field, value)
    }

    /// A literal message that is not left out: copied as a string, after registering it as the
    /// callsite's (then its next events leave it out) if it is an event's first.
    #[inline(never)]
    fn record_message(&mut self, field: &Field, text: &'static str) {
        if let Some((slot, tracepoint)) = self.event.filter(|_| field.index() == 0) {
            if slot.may_register_message() {
                // Registering allocates, and the allocation hooks may record into the chunk.
                self.out.leave_chunk();
                slot.register_message(text, tracepoint);
            }
        }
        self.record_str(field, text)
    }

    /// `value` formatted with `Debug`, as a string: apart from [`Visit::record_debug`]'s path for
    /// messages, whose few instructions then need no stack frame of their own.
    #[inline(never)]
    fn format_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        let Ok(index) = u8::try_from(field.index()) else {
            return;
        };
        // Formatting runs the program's code, which may record into the thread's chunk, where the
        // values written so far are.
        self.out.leave_chunk();
        // A string of length 0 first (index, tag, length), then the text formatted straight into the
        // buffer after it, and its length written over the 0.
        let room = self.out.room();
        let Some(head) = put_tagged(room, index, Tag::Str, &[]) else {
            return;
        };
        let limit = (head + MAX_STR).min(room.len());
        let mut w = Cut {
            buf: &mut room[head..limit],
            len: 0,
        };
        let _ = write!(w, "{value:?}");
        let n = w.len as u16;
        for (o, b) in room[head - 2..head].iter_mut().zip(n.to_le_bytes()) {
            o.write(b);
        }
        // SAFETY: `put_tagged` wrote the head, its length included, and `Cut` the `n` bytes of text
        // after it, inside the room.
        unsafe { self.out.wrote(head + n as usize) };
    }
}

/// The text of `value` when it is a `fmt::Arguments` without arguments (`format_args!("done")`, a
/// `tracing` message without `{}`): what its `Debug` output would be, without formatting it.
///
/// `value` is recognised by its vtable, `known`: the one `tracing_core` makes when it hands an
/// `Arguments` to a visitor (`<fmt::Arguments as Value>::record`, compiled once, in `tracing_core`),
/// learnt on the first call by handing it an `Arguments` of ours ([`ArgumentsVtable`]). Rust does not
/// promise a type one vtable: a copy of it (another codegen unit's) does not compare equal, and the
/// value is formatted, as any other — slower, still right.
#[inline(always)]
fn static_message(known: &ArgumentsVtable, value: &dyn fmt::Debug) -> Option<&'static str> {
    let known = known.0?;
    let value = value as *const dyn fmt::Debug;
    // The known vtable with `value`'s address: equal to `value` when its vtable is the known one.
    if !core::ptr::eq(known.with_addr(value.addr()), value) {
        return None;
    }
    // SAFETY: `value` has the vtable of `fmt::Arguments`' `Debug`. Another type's `&dyn Debug`
    // could only have it if the compiler or the linker merged that type's vtable with this one:
    // identical vtables, so the same size, alignment and drop glue (none) and the same `fmt`
    // function — machine code identical to `Arguments`' `fmt`, which hands the value's bytes to
    // `core::fmt::write` as an `Arguments`. Such a type's own `fmt` is sound only if its bytes are a
    // valid `Arguments`, which is all that reading it as one here needs (`as_str` reads its pieces
    // and arguments, as `fmt` does). The reference lives as long as `value`; the text is `'static`.
    let arguments = unsafe { &*(value as *const fmt::Arguments<'_>) };
    let text = arguments.as_str();
    #[cfg(test)]
    if text.is_some() {
        tests::STATIC_MESSAGES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
    text
}

/// The `&dyn Debug` pointer `tracing_core` makes for a `fmt::Arguments` (its address is not used,
/// only its vtable); `None` when it could not be learnt, or when what `tracing_core` handed over was
/// not the `Arguments` itself.
struct ArgumentsVtable(Option<*const dyn fmt::Debug>);

// SAFETY: the pointer is never dereferenced: only its vtable is compared.
unsafe impl Send for ArgumentsVtable {}
// SAFETY: as for `Send`.
unsafe impl Sync for ArgumentsVtable {}

static ARGUMENTS_VTABLE: OnceLock<ArgumentsVtable> = OnceLock::new();

impl ArgumentsVtable {
    /// Hands an `Arguments` to `tracing_core`'s `Value::record`, as an event's message is, and keeps
    /// the pointer it visits (any field will do: it is only passed through) if it points at that
    /// `Arguments`: were it some wrapper of it (another `tracing_core`'s `Value` impl), its vtable
    /// would be the wrapper's, and reading values with that vtable as `Arguments` would be wrong.
    fn learn(field: &Field) -> ArgumentsVtable {
        struct Catch(Option<*const dyn fmt::Debug>);
        impl Visit for Catch {
            fn record_debug(&mut self, _: &Field, value: &dyn fmt::Debug) {
                // SAFETY: a lifetime only, on a pointer that is never dereferenced (only its vtable
                // is compared).
                self.0 = Some(unsafe {
                    core::mem::transmute::<*const (dyn fmt::Debug + '_), *const dyn fmt::Debug>(
                        value,
                    )
                });
            }
        }
        let mut catch = Catch(None);
        let arguments = format_args!("");
        arguments.record(field, &mut catch);
        ArgumentsVtable(
            catch
                .0
                .filter(|&seen| core::ptr::addr_eq(seen, &arguments as *const fmt::Arguments<'_>)),
        )
    }
}

/// `s` cut to at most `max` bytes, at a character boundary.
pub(crate) fn cut(s: &str, max: usize) -> &str {
    let mut end = s.len().min(max);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// A `fmt::Write` into a fixed slice that keeps what fits, cut at a character boundary.
struct Cut<'a> {
    buf: &'a mut [MaybeUninit<u8>],
    len: usize,
}

impl Write for Cut<'_> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let n = cut(s, self.buf.len() - self.len).len();
        let out = &mut self.buf[self.len..self.len + n];
        // SAFETY: `out` is `n` bytes long, `s` at least; `MaybeUninit<u8>` has the layout of `u8`.
        unsafe { core::ptr::copy_nonoverlapping(s.as_ptr(), out.as_mut_ptr() as *mut u8, n) };
        self.len += n;
        if n < s.len() {
            // The rest would be cut anyway: stop formatting.
            return Err(fmt::Error);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferrotrace_core::tracepoint::write_call;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Mutex;

    /// Messages [`static_message`] recognised (and copied without formatting).
    pub static STATIC_MESSAGES: AtomicUsize = AtomicUsize::new(0);

    /// The first `len` bytes of `buf`, which a [`Values`] wrote.
    fn written(buf: &[MaybeUninit<u8>], len: usize) -> &[u8] {
        // SAFETY: the first `len` bytes were written; `MaybeUninit<u8>` has the layout of `u8`.
        unsafe { core::slice::from_raw_parts(buf.as_ptr() as *const u8, len) }
    }

    /// A callsite with the fields the tests record.
    struct Probe;
    static FIELDS: &[&str] = &["message", "n", "neg", "ok", "ratio", "who"];
    static CALLSITE: Probe = Probe;
    static META: tracing_core::Metadata<'static> = tracing_core::metadata! {
        name: "probe",
        target: "t",
        level: tracing_core::Level::INFO,
        fields: FIELDS,
        callsite: &CALLSITE,
        kind: tracing_core::metadata::Kind::EVENT,
    };
    impl tracing_core::Callsite for Probe {
        fn set_interest(&self, _: tracing_core::Interest) {}
        fn metadata(&self) -> &tracing_core::Metadata<'_> {
            &META
        }
    }

    fn field(name: &str) -> Field {
        META.fields().field(name).unwrap()
    }

    #[test]
    fn every_kind_of_value_reads_back_with_its_name() {
        let mut buf = [MaybeUninit::uninit(); MAX];
        let mut v = Values::new(FieldsOut::new(&mut buf));
        v.record_debug(&field("message"), &format_args!("done {}", 7));
        v.record_u64(&field("n"), 3);
        v.record_i64(&field("neg"), -4);
        v.record_bool(&field("ok"), true);
        v.record_f64(&field("ratio"), 0.5);
        v.record_str(&field("who"), &"é".repeat(200));
        let len = v.into_out().len();
        let mut payload = written(&buf, len).to_vec();
        payload.push(0);
        let spec = "message:value,n:value,neg:value,ok:value,ratio:value,who:value";
        let mut s = String::new();
        write_call(&mut s, "t", spec, &payload).unwrap();
        // 200 two-byte characters cut at 256 bytes: 128 of them.
        let who = "é".repeat(128);
        assert_eq!(
            s,
            format!(r#"t(message="done 7", n=3, neg=-4, ok=true, ratio=0.5, who="{who}")"#)
        );
    }

    #[test]
    fn debug_text_is_cut_and_a_full_buffer_drops_values() {
        let mut buf = [MaybeUninit::uninit(); MAX];
        let mut v = Values::new(FieldsOut::new(&mut buf));
        for _ in 0..10 {
            v.record_debug(&field("message"), &"x".repeat(1000));
        }
        // Each is its 4-byte head and 256 bytes of text: three fit in 1 KiB, the fourth is cut short.
        assert_eq!(v.into_out().len(), MAX);
        assert_eq!(&written(&buf, MAX)[4..10], b"\"xxxxx");
    }

    /// Records every event's fields with [`Values`], as the layer does, and keeps them decoded.
    struct Decode(Mutex<Vec<String>>);

    impl tracing_core::Subscriber for Decode {
        fn enabled(&self, _: &tracing_core::Metadata<'_>) -> bool {
            true
        }
        fn new_span(&self, _: &tracing_core::span::Attributes<'_>) -> tracing_core::span::Id {
            tracing_core::span::Id::from_u64(1)
        }
        fn record(&self, _: &tracing_core::span::Id, _: &tracing_core::span::Record<'_>) {}
        fn record_follows_from(&self, _: &tracing_core::span::Id, _: &tracing_core::span::Id) {}
        fn event(&self, event: &tracing_core::Event<'_>) {
            let mut buf = [MaybeUninit::uninit(); MAX];
            let mut v = Values::new(FieldsOut::new(&mut buf));
            event.record(&mut v);
            let len = v.into_out().len();
            let mut payload = written(&buf, len).to_vec();
            payload.push(0);
            let spec: Vec<String> = event
                .metadata()
                .fields()
                .iter()
                .map(|f| format!("{}:value", f.name()))
                .collect();
            let mut s = String::new();
            write_call(&mut s, "e", &spec.join(","), &payload).unwrap();
            self.0.lock().unwrap().push(s);
        }
        fn enter(&self, _: &tracing_core::span::Id) {}
        fn exit(&self, _: &tracing_core::span::Id) {}
    }

    #[test]
    fn messages_of_real_events_are_copied_when_static_and_formatted_otherwise() {
        let decode = std::sync::Arc::new(Decode(Mutex::new(Vec::new())));
        let before = STATIC_MESSAGES.load(Ordering::Relaxed);
        tracing::subscriber::with_default(decode.clone(), || {
            tracing::info!(n = 1u64, "static é");
            tracing::info!("{} and {:?}", 2, "x");
            tracing::warn!(value = ?Some(3), "");
            tracing::info!("{}", "y".repeat(300));
        });
        // The two literals, and nothing else, took the way without `core::fmt`: the vtable
        // `tracing_core` gives an `Arguments` was recognised in this build.
        assert_eq!(STATIC_MESSAGES.load(Ordering::Relaxed) - before, 2);
        let y = "y".repeat(256);
        assert_eq!(
            *decode.0.lock().unwrap(),
            [
                r#"e(message="static é", n=1)"#.to_string(),
                r#"e(message="2 and \"x\"")"#.to_string(),
                r#"e(message="", value="Some(3)")"#.to_string(),
                format!(r#"e(message="{y}")"#),
            ]
        );
    }
}
