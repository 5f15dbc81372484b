//! Field values of spans and events, written as tagged values (`ferrotrace_core::tracepoint`'s `value`
//! type: field index, type tag, value) straight into the memory the runtime gives (the thread's
//! chunk), without allocating: strings and `Debug` output are cut at 256 bytes (on a character
//! boundary), as tracepoint strings are, and a value that does not fit is left out.

use core::fmt::{self, Write};
use core::mem::MaybeUninit;

use ferrotrace_core::tracepoint::{put_tagged, Tag};
use tracing_core::field::{Field, Visit};

/// Longest string or `Debug` text kept for one field.
const MAX_STR: usize = 256;
/// The room asked of the runtime for one record's fields: 1 KiB covers ordinary events (and is what
/// the runtime gives at most).
pub const MAX: usize = 1024;

/// Tagged values, as a field visitor writes them into `buf`.
pub struct Values<'a> {
    buf: &'a mut [MaybeUninit<u8>],
    len: usize,
}

impl<'a> Values<'a> {
    /// No values yet, to be written into `buf`.
    #[inline(always)]
    pub fn new(buf: &'a mut [MaybeUninit<u8>]) -> Values<'a> {
        Values { buf, len: 0 }
    }

    /// How many bytes were written.
    #[inline(always)]
    pub fn len(&self) -> usize {
        self.len
    }

    fn put(&mut self, field: &Field, tag: Tag, bytes: &[u8]) {
        let Ok(index) = u8::try_from(field.index()) else {
            return;
        };
        if let Some(n) = put_tagged(&mut self.buf[self.len..], index, tag, bytes) {
            self.len += n;
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
        self.put(field, Tag::Str, cut(value).as_bytes());
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        let Ok(index) = u8::try_from(field.index()) else {
            return;
        };
        // A string of length 0 first (index, tag, length), then the text formatted straight into the
        // buffer after it, and its length written over the 0.
        let start = self.len;
        let Some(head) = put_tagged(&mut self.buf[start..], index, Tag::Str, &[]) else {
            return;
        };
        let text = start + head;
        let limit = (text + MAX_STR).min(self.buf.len());
        let mut w = Cut {
            buf: &mut self.buf[text..limit],
            len: 0,
        };
        let _ = write!(w, "{value:?}");
        let n = w.len as u16;
        for (o, b) in self.buf[text - 2..text].iter_mut().zip(n.to_le_bytes()) {
            o.write(b);
        }
        self.len = text + n as usize;
    }
}

/// `s` cut to at most [`MAX_STR`] bytes, at a character boundary.
fn cut(s: &str) -> &str {
    let mut end = s.len().min(MAX_STR);
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
        let room = self.buf.len() - self.len;
        let mut n = s.len().min(room);
        while !s.is_char_boundary(n) {
            n -= 1;
        }
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

    fn bytes<'v>(v: &'v Values<'_>) -> &'v [u8] {
        // SAFETY: the first `len` bytes were written; `MaybeUninit<u8>` has the layout of `u8`.
        unsafe { core::slice::from_raw_parts(v.buf.as_ptr() as *const u8, v.len) }
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
        let mut v = Values::new(&mut buf);
        v.record_debug(&field("message"), &format_args!("done {}", 7));
        v.record_u64(&field("n"), 3);
        v.record_i64(&field("neg"), -4);
        v.record_bool(&field("ok"), true);
        v.record_f64(&field("ratio"), 0.5);
        v.record_str(&field("who"), &"é".repeat(200));
        let mut payload = bytes(&v).to_vec();
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
        let mut v = Values::new(&mut buf);
        for _ in 0..10 {
            v.record_debug(&field("message"), &"x".repeat(1000));
        }
        // Each is its 4-byte head and 256 bytes of text: three fit in 1 KiB, the fourth is cut short.
        assert_eq!(v.len(), MAX);
        assert_eq!(&bytes(&v)[4..10], b"\"xxxxx");
    }
}
