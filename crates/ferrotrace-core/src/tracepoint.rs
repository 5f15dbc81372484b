//! Tracepoint arguments: their types, their payload encoding, and how an event is shown.
//!
//! A tracepoint descriptor lists its arguments as `name:type` separated by commas (`path:str,flags:u32`).
//! A Tracepoint event's payload holds the argument values in that order, little-endian, without padding
//! between them (the payload itself is a whole number of 16-byte slots, zero padded at the end):
//!
//! | type | bytes |
//! |---|---|
//! | `u8`, `i8`, `bool` | 1 |
//! | `u16`, `i16` | 2 |
//! | `u32`, `i32`, `f32` | 4 |
//! | `u64`, `i64`, `usize`, `isize`, `f64` | 8 |
//! | `str`, `bytes` | `u16` length, then that many bytes (at most 256; a `str` is cut at a character boundary) |
//!
//! Arguments of type `value` (the fields of `tracing` spans and events, whose types are known only
//! when they are recorded, and which may be absent) are *tagged* instead: an argument list whose types
//! are all `value` has a payload of `u8 index + 1` (0 ends the list: the zero padding), `u8` [`Tag`],
//! then the value as above (`u64`, `i64`, `f64`: 8 bytes; `bool`: 1; `str`: `u16` length and bytes),
//! in the order they were recorded; absent fields are left out. [`put_tagged`] writes one.
//!
//! A `tracing` callsite whose message is a literal (`info!("done")`) has it recorded once, in the
//! trace's CallsiteMessages chunk ([`crate::schema::CallsiteMessage`]), and left out of its events:
//! readers hand it to [`values_with_message`] / [`write_event`] as a [`Message`], which is read as
//! the first value of every event of that callsite whose payload has no value of the message's own.
//!
//! Shared by the runtime (live printing) and the analysis tools, without allocation:
//!
//! ```
//! use ferrotrace_core::tracepoint::write_event;
//!
//! let mut payload = Vec::new();
//! payload.extend_from_slice(&7u64.to_le_bytes());
//! payload.extend_from_slice(&300usize.to_le_bytes());
//! let mut s = String::new();
//! write_event(&mut s, "app::net_recv", "conn:u64,bytes:usize", "", &payload).unwrap();
//! assert_eq!(s, "app::net_recv(conn=7, bytes=300)");
//! s.clear();
//! write_event(&mut s, "app::net_recv", "conn:u64,bytes:usize", "conn={conn} bytes={bytes:x}", &payload).unwrap();
//! assert_eq!(s, "app::net_recv conn=7 bytes=12c");
//! ```

use core::fmt::{self, Write};

use crate::codec::DecodeError;

/// `"FTP1"`: the first word of every tracepoint descriptor (in the `ferrotrace_tp` section).
pub const DESCRIPTOR_MAGIC: u32 = u32::from_le_bytes(*b"FTP1");

/// Size of a descriptor's fixed header (magic, size, id, enabled flag); its fields follow.
pub const DESCRIPTOR_HEADER_LEN: usize = 16;

/// The fields after a descriptor's header: the name, argument list, format and source file (each a
/// `u16` length and that many bytes), then the line (`u32`); `None` when they run past `data`. The
/// runtime, which reads its own descriptors, and `ferrotrace list`, which reads a binary's, share it.
///
/// ```
/// use ferrotrace_core::tracepoint::descriptor_fields;
/// let mut d = Vec::new();
/// for s in ["app::ping", "n:u64", "", "src/main.rs"] {
///     d.extend_from_slice(&(s.len() as u16).to_le_bytes());
///     d.extend_from_slice(s.as_bytes());
/// }
/// d.extend_from_slice(&42u32.to_le_bytes());
/// let ([name, args, _, file], line) = descriptor_fields(&d).unwrap();
/// assert_eq!((name, args, file, line), (&b"app::ping"[..], &b"n:u64"[..], &b"src/main.rs"[..], 42));
/// assert!(descriptor_fields(&d[..d.len() - 1]).is_none());
/// ```
pub fn descriptor_fields(data: &[u8]) -> Option<([&[u8]; 4], u32)> {
    let mut pos = 0usize;
    let mut field = || -> Option<&[u8]> {
        let n = u16::from_le_bytes([*data.get(pos)?, *data.get(pos + 1)?]) as usize;
        let v = data.get(pos + 2..pos + 2 + n)?;
        pos += 2 + n;
        Some(v)
    };
    let strings = [field()?, field()?, field()?, field()?];
    let line = u32::from_le_bytes(data.get(pos..pos + 4)?.try_into().ok()?);
    Some((strings, line))
}

/// The type of a tracepoint argument.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArgType {
    /// `u8`
    U8,
    /// `u16`
    U16,
    /// `u32`
    U32,
    /// `u64`
    U64,
    /// `usize` (64 bits)
    Usize,
    /// `i8`
    I8,
    /// `i16`
    I16,
    /// `i32`
    I32,
    /// `i64`
    I64,
    /// `isize` (64 bits)
    Isize,
    /// `f32`
    F32,
    /// `f64`
    F64,
    /// `bool`
    Bool,
    /// `&str`
    Str,
    /// `&[u8]`
    Bytes,
    /// Any of `u64`, `i64`, `f64`, `bool`, `str`, tagged (see the module's documentation).
    Tagged,
}

/// The type tag of a `value` argument ([`ArgType::Tagged`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Tag {
    /// `u64`, 8 bytes.
    Unsigned = 0,
    /// `i64`, 8 bytes.
    Signed = 1,
    /// `f64`, 8 bytes.
    Float = 2,
    /// `bool`, 1 byte.
    Bool = 3,
    /// `u16` length, then that many bytes of UTF-8.
    Str = 4,
}

/// The bytes [`put_tagged`] writes for a value of `tag` whose string (for [`Tag::Str`]) is `str_len`
/// bytes long: index, tag and value.
#[inline]
pub const fn tagged_len(tag: Tag, str_len: usize) -> usize {
    2 + match tag {
        Tag::Unsigned | Tag::Signed | Tag::Float => 8,
        Tag::Bool => 1,
        Tag::Str => 2 + str_len,
    }
}

/// Writes one tagged value of the argument at `index` (0-based, below 255) at the start of `out`:
/// `index + 1`, `tag`, then `bytes` (the value's little-endian bytes, or a string's, after its `u16`
/// length). Returns the bytes written, [`tagged_len`]; `None` when `out` is too short. `out` may be
/// uninitialized memory (a recorder's buffer on the stack): what is written is initialized.
#[inline]
pub fn put_tagged(
    out: &mut [core::mem::MaybeUninit<u8>],
    index: u8,
    tag: Tag,
    bytes: &[u8],
) -> Option<usize> {
    let n = tagged_len(tag, bytes.len());
    let out = out.get_mut(..n)?;
    let mut head = [index.checked_add(1)?, tag as u8, 0, 0];
    let head = if tag == Tag::Str {
        head[2..].copy_from_slice(&u16::try_from(bytes.len()).ok()?.to_le_bytes());
        &head[..]
    } else {
        if bytes.len() != n - 2 {
            return None;
        }
        &head[..2]
    };
    let (h, rest) = out.split_at_mut(head.len());
    for (o, b) in h.iter_mut().zip(head) {
        o.write(*b);
    }
    copy_bytes(bytes, rest);
    Some(n)
}

/// Copies `from` into `to` (as long): up to 16 bytes by two overlapping loads and stores of 8 or 4
/// bytes (a field's value, a short message), where a `memcpy` call would cost more than the copy.
#[inline(always)]
fn copy_bytes(from: &[u8], to: &mut [core::mem::MaybeUninit<u8>]) {
    let n = from.len();
    debug_assert_eq!(n, to.len());
    let (src, dst) = (from.as_ptr(), to.as_mut_ptr() as *mut u8);
    // SAFETY: `from` and `to` are both `n` bytes long (`MaybeUninit<u8>` has the layout of `u8`);
    // `copy_two_words` needs `n` between one and two words of its type.
    unsafe {
        match n {
            8..=16 => copy_two_words::<u64>(src, dst, n),
            4..=7 => copy_two_words::<u32>(src, dst, n),
            _ => core::ptr::copy_nonoverlapping(src, dst, n),
        }
    }
}

/// Copies `n` bytes from `src` to `dst` as two words of type `W`, the first at 0 and the second
/// ending at `n` (overlapping when `n` is under two words).
///
/// # Safety
/// `size_of::<W>() <= n <= 2 * size_of::<W>()`; `src` readable and `dst` writable for `n` bytes.
#[inline(always)]
unsafe fn copy_two_words<W: Copy>(src: *const u8, dst: *mut u8, n: usize) {
    let last = n - core::mem::size_of::<W>();
    // SAFETY: both words lie within the `n` bytes (the caller's bounds); unaligned accesses.
    unsafe {
        let (a, b) = (
            src.cast::<W>().read_unaligned(),
            src.add(last).cast::<W>().read_unaligned(),
        );
        dst.cast::<W>().write_unaligned(a);
        dst.add(last).cast::<W>().write_unaligned(b);
    }
}

impl ArgType {
    /// The type called `name` in descriptors.
    pub fn from_name(name: &str) -> Option<ArgType> {
        Some(match name {
            "u8" => ArgType::U8,
            "u16" => ArgType::U16,
            "u32" => ArgType::U32,
            "u64" => ArgType::U64,
            "usize" => ArgType::Usize,
            "i8" => ArgType::I8,
            "i16" => ArgType::I16,
            "i32" => ArgType::I32,
            "i64" => ArgType::I64,
            "isize" => ArgType::Isize,
            "f32" => ArgType::F32,
            "f64" => ArgType::F64,
            "bool" => ArgType::Bool,
            "str" => ArgType::Str,
            "bytes" => ArgType::Bytes,
            "value" => ArgType::Tagged,
            _ => return None,
        })
    }
}

/// One decoded argument value.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Value<'a> {
    /// Any unsigned integer.
    Unsigned(u64),
    /// Any signed integer.
    Signed(i64),
    /// `f32` or `f64`.
    Float(f64),
    /// `bool`.
    Bool(bool),
    /// `str` (as recorded; invalid UTF-8 is shown escaped).
    Str(&'a [u8]),
    /// `bytes`.
    Bytes(&'a [u8]),
}

fn write_escaped<W: Write>(w: &mut W, b: &[u8]) -> fmt::Result {
    for chunk in b.utf8_chunks() {
        for c in chunk.valid().chars() {
            for e in c.escape_debug() {
                w.write_char(e)?;
            }
        }
        for byte in chunk.invalid() {
            write!(w, "\\x{byte:02x}")?;
        }
    }
    Ok(())
}

impl Value<'_> {
    /// Writes the value as in `name(arg=value)`: strings quoted and escaped, bytes as `b"…"`.
    pub fn write_quoted<W: Write>(&self, w: &mut W) -> fmt::Result {
        match *self {
            Value::Str(s) => {
                w.write_char('"')?;
                write_escaped(w, s)?;
                w.write_char('"')
            }
            Value::Bytes(b) => {
                w.write_str("b\"")?;
                for &byte in b {
                    if byte.is_ascii_graphic() && byte != b'"' && byte != b'\\' || byte == b' ' {
                        w.write_char(byte as char)?;
                    } else {
                        write!(w, "\\x{byte:02x}")?;
                    }
                }
                w.write_char('"')
            }
            _ => write!(w, "{self}"),
        }
    }

    /// Writes the value in hexadecimal (integers; others as [`fmt::Display`]).
    pub fn write_hex<W: Write>(&self, w: &mut W) -> fmt::Result {
        match *self {
            Value::Unsigned(v) => write!(w, "{v:x}"),
            Value::Signed(v) => write!(w, "{v:x}"),
            Value::Bytes(b) | Value::Str(b) => {
                for byte in b {
                    write!(w, "{byte:02x}")?;
                }
                Ok(())
            }
            _ => write!(w, "{self}"),
        }
    }
}

impl fmt::Display for Value<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Value::Unsigned(v) => write!(f, "{v}"),
            Value::Signed(v) => write!(f, "{v}"),
            Value::Float(v) => write!(f, "{v}"),
            Value::Bool(v) => write!(f, "{v}"),
            Value::Str(s) => {
                for chunk in s.utf8_chunks() {
                    f.write_str(chunk.valid())?;
                    for byte in chunk.invalid() {
                        write!(f, "\\x{byte:02x}")?;
                    }
                }
                Ok(())
            }
            Value::Bytes(_) => self.write_quoted(f),
        }
    }
}

/// The `(name, type name)` pairs of an argument list `name:type,…`.
pub fn arg_specs(spec: &str) -> impl Iterator<Item = (&str, &str)> {
    spec.split(',')
        .filter(|a| !a.is_empty())
        .map(|a| a.split_once(':').unwrap_or((a, "")))
}

/// A callsite's message recorded once rather than in each event ([`crate::schema::CallsiteMessage`]):
/// the index of its field in the argument list, and its text.
pub type Message<'p> = Option<(u32, &'p str)>;

/// Decodes the argument values of a payload, in order, with their names.
#[derive(Clone)]
pub struct Values<'s, 'p> {
    /// The callsite's message, still to be given first (the payload lacks its value).
    message: Option<(&'s str, &'p str)>,
    spec: &'s str,
    specs: core::iter::Filter<core::str::Split<'s, char>, fn(&&str) -> bool>,
    payload: &'p [u8],
    pos: usize,
    failed: bool,
    /// The arguments are `value`s: the payload says which it holds, in its own order.
    tagged: bool,
}

/// The values of `payload` for the argument list `spec`.
pub fn values<'s, 'p>(spec: &'s str, payload: &'p [u8]) -> Values<'s, 'p> {
    values_with_message(spec, None, payload)
}

/// The values of `payload` for the argument list `spec` (tagged values), the callsite's `message`
/// first when the payload has no value for it (an event that left its literal message out).
pub fn values_with_message<'s, 'p>(
    spec: &'s str,
    message: Message<'p>,
    payload: &'p [u8],
) -> Values<'s, 'p> {
    fn nonempty(a: &&str) -> bool {
        !a.is_empty()
    }
    let specs = spec.split(',').filter(nonempty as fn(&&str) -> bool);
    let tagged = specs.clone().next().is_some()
        && specs
            .clone()
            .all(|a| a.split_once(':').is_some_and(|(_, t)| t == "value"));
    let mut v = Values {
        message: None,
        spec,
        specs,
        payload,
        pos: 0,
        failed: false,
        tagged,
    };
    if let Some((index, text)) = message.filter(|_| tagged) {
        let name = spec
            .split(',')
            .filter(|a| !a.is_empty())
            .nth(index as usize)
            .map(|a| a.split_once(':').map_or(a, |(n, _)| n));
        if let Some(name) = name {
            let recorded = v.clone().any(|r| r.is_ok_and(|(n, _)| n == name));
            v.message = (!recorded).then_some((name, text));
        }
    }
    v
}

impl<'s, 'p> Values<'s, 'p> {
    fn take(&mut self, n: usize) -> Result<&'p [u8], DecodeError> {
        let b = self
            .payload
            .get(self.pos..self.pos + n)
            .ok_or(DecodeError::Truncated)?;
        self.pos += n;
        Ok(b)
    }

    fn fixed<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }

    /// The next of a tagged list: its argument's name and value, `None` at the end.
    fn next_tagged(&mut self) -> Option<Result<(&'s str, Value<'p>), DecodeError>> {
        let index = *self.payload.get(self.pos)?;
        if index == 0 {
            return None;
        }
        self.pos += 1;
        let name = self
            .spec
            .split(',')
            .filter(|a| !a.is_empty())
            .nth(index as usize - 1);
        let Some(name) = name.map(|a| a.split_once(':').map_or(a, |(n, _)| n)) else {
            return Some(Err(DecodeError::BadValue));
        };
        let value = self.fixed::<1>().and_then(|[tag]| {
            Ok(match tag {
                0 => Value::Unsigned(u64::from_le_bytes(self.fixed()?)),
                1 => Value::Signed(i64::from_le_bytes(self.fixed()?)),
                2 => Value::Float(f64::from_le_bytes(self.fixed()?)),
                3 => Value::Bool(self.fixed::<1>()?[0] != 0),
                4 => {
                    let n = u16::from_le_bytes(self.fixed()?) as usize;
                    Value::Str(self.take(n)?)
                }
                _ => return Err(DecodeError::BadValue),
            })
        });
        Some(value.map(|v| (name, v)))
    }

    fn next_value(&mut self, ty: &str) -> Result<Value<'p>, DecodeError> {
        let ty = ArgType::from_name(ty).ok_or(DecodeError::BadValue)?;
        Ok(match ty {
            // Only in a list of tagged values, read by `next_tagged`.
            ArgType::Tagged => return Err(DecodeError::BadValue),
            ArgType::U8 => Value::Unsigned(self.fixed::<1>()?[0] as u64),
            ArgType::U16 => Value::Unsigned(u16::from_le_bytes(self.fixed()?) as u64),
            ArgType::U32 => Value::Unsigned(u32::from_le_bytes(self.fixed()?) as u64),
            ArgType::U64 | ArgType::Usize => Value::Unsigned(u64::from_le_bytes(self.fixed()?)),
            ArgType::I8 => Value::Signed(self.fixed::<1>()?[0] as i8 as i64),
            ArgType::I16 => Value::Signed(i16::from_le_bytes(self.fixed()?) as i64),
            ArgType::I32 => Value::Signed(i32::from_le_bytes(self.fixed()?) as i64),
            ArgType::I64 | ArgType::Isize => Value::Signed(i64::from_le_bytes(self.fixed()?)),
            ArgType::F32 => Value::Float(f32::from_le_bytes(self.fixed()?) as f64),
            ArgType::F64 => Value::Float(f64::from_le_bytes(self.fixed()?)),
            ArgType::Bool => Value::Bool(self.fixed::<1>()?[0] != 0),
            ArgType::Str | ArgType::Bytes => {
                let n = u16::from_le_bytes(self.fixed()?) as usize;
                let b = self.take(n)?;
                if ty == ArgType::Str {
                    Value::Str(b)
                } else {
                    Value::Bytes(b)
                }
            }
        })
    }
}

impl<'s, 'p> Iterator for Values<'s, 'p> {
    type Item = Result<(&'s str, Value<'p>), DecodeError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        if self.tagged {
            if let Some((name, text)) = self.message.take() {
                return Some(Ok((name, Value::Str(text.as_bytes()))));
            }
            let r = self.next_tagged()?;
            self.failed = r.is_err();
            return Some(r);
        }
        let spec = self.specs.next()?;
        let (name, ty) = spec.split_once(':').unwrap_or((spec, ""));
        let r = self.next_value(ty).map(|v| (name, v));
        self.failed = r.is_err();
        Some(r)
    }
}

/// Writes `name(arg=value, …)`.
pub fn write_call<W: Write>(w: &mut W, name: &str, spec: &str, payload: &[u8]) -> fmt::Result {
    write_call_with_message(w, name, spec, None, payload)
}

/// [`write_call`] for a callsite whose message may be recorded once ([`values_with_message`]).
pub fn write_call_with_message<W: Write>(
    w: &mut W,
    name: &str,
    spec: &str,
    message: Message<'_>,
    payload: &[u8],
) -> fmt::Result {
    w.write_str(name)?;
    w.write_char('(')?;
    for (i, v) in values_with_message(spec, message, payload).enumerate() {
        if i > 0 {
            w.write_str(", ")?;
        }
        match v {
            Ok((n, v)) => {
                w.write_str(n)?;
                w.write_char('=')?;
                v.write_quoted(w)?;
            }
            Err(e) => write!(w, "<{e}>")?,
        }
    }
    w.write_char(')')
}

/// Writes `format` with each `{arg}` (or `{arg:x}` for hexadecimal, `{arg:?}` quoted) replaced by the
/// argument's value; `{{` and `}}` are literal braces.
pub fn write_format<W: Write>(w: &mut W, format: &str, spec: &str, payload: &[u8]) -> fmt::Result {
    let mut rest = format;
    while let Some(i) = rest.find(['{', '}']) {
        w.write_str(&rest[..i])?;
        let r = &rest[i..];
        if r.starts_with("{{") || r.starts_with("}}") {
            w.write_char(r.as_bytes()[0] as char)?;
            rest = &r[2..];
            continue;
        }
        let Some(close) = r.find('}').filter(|_| r.starts_with('{')) else {
            w.write_str(&r[..1])?;
            rest = &r[1..];
            continue;
        };
        let field = &r[1..close];
        let (name, how) = field.split_once(':').unwrap_or((field, ""));
        let value = values(spec, payload).find_map(|v| match v {
            Ok((n, v)) if n == name => Some(Ok(v)),
            Err(e) => Some(Err(e)),
            _ => None,
        });
        match value {
            Some(Ok(v)) if how.contains('x') => v.write_hex(w)?,
            Some(Ok(v)) if how.contains('?') => v.write_quoted(w)?,
            Some(Ok(v)) => write!(w, "{v}")?,
            Some(Err(e)) => write!(w, "<{e}>")?,
            None => write!(w, "<{name}?>")?,
        }
        rest = &r[close + 1..];
    }
    w.write_str(rest)
}

/// Writes an event the way users see it: `name(arg=value, …)`, or `name ` followed by the formatted
/// text when the tracepoint has a format.
pub fn write_event<W: Write>(
    w: &mut W,
    name: &str,
    spec: &str,
    format: &str,
    payload: &[u8],
) -> fmt::Result {
    if format.is_empty() {
        write_call(w, name, spec, payload)
    } else {
        w.write_str(name)?;
        w.write_char(' ')?;
        write_format(w, format, spec, payload)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Buf {
        b: [u8; 256],
        n: usize,
    }
    impl Write for Buf {
        fn write_str(&mut self, s: &str) -> fmt::Result {
            let e = self.n + s.len();
            self.b
                .get_mut(self.n..e)
                .ok_or(fmt::Error)?
                .copy_from_slice(s.as_bytes());
            self.n = e;
            Ok(())
        }
    }
    fn show(f: impl Fn(&mut Buf) -> fmt::Result) -> Buf {
        let mut b = Buf { b: [0; 256], n: 0 };
        f(&mut b).unwrap();
        b
    }

    #[test]
    fn all_types_round_trip() {
        let mut p = [0u8; 64];
        let mut n = 0;
        let mut put = |b: &[u8]| {
            p[n..n + b.len()].copy_from_slice(b);
            n += b.len();
        };
        put(&[200]);
        put(&(-2i16).to_le_bytes());
        put(&(-5i64).to_le_bytes());
        put(&1.5f64.to_le_bytes());
        put(&[1]);
        put(&3u16.to_le_bytes());
        put(b"a\"b");
        put(&2u16.to_le_bytes());
        put(&[0, 255]);
        put(&2.5f32.to_le_bytes());
        let spec = "a:u8,b:i16,c:i64,d:f64,e:bool,s:str,f:bytes,g:f32";
        let b = show(|w| write_call(w, "x::t", spec, &p[..n]));
        assert_eq!(
            core::str::from_utf8(&b.b[..b.n]).unwrap(),
            r#"x::t(a=200, b=-2, c=-5, d=1.5, e=true, s="a\"b", f=b"\x00\xff", g=2.5)"#
        );
        let b = show(|w| write_format(w, "{{{s}}} {c} {a:x}", spec, &p[..n]));
        assert_eq!(core::str::from_utf8(&b.b[..b.n]).unwrap(), "{a\"b} -5 c8");
    }

    #[test]
    fn tagged_values_in_recorded_order_and_absent_ones_left_out() {
        let mut buf = [core::mem::MaybeUninit::new(0u8); 48];
        let mut n = 0;
        n += put_tagged(&mut buf[n..], 2, Tag::Str, b"hi").unwrap();
        n += put_tagged(&mut buf[n..], 0, Tag::Signed, &(-3i64).to_le_bytes()).unwrap();
        n += put_tagged(&mut buf[n..], 3, Tag::Bool, &[1]).unwrap();
        assert_eq!(n, 6 + 10 + 3);
        // SAFETY: every byte was initialized (to 0, then by put_tagged).
        let p: [u8; 48] = unsafe { core::mem::transmute(buf) };
        let spec = "message:value,x:value,y:value,ok:value";
        // The zero padding after the last value ends the list.
        let b = show(|w| write_call(w, "t", spec, &p));
        assert_eq!(
            core::str::from_utf8(&b.b[..b.n]).unwrap(),
            r#"t(y="hi", message=-3, ok=true)"#
        );
        assert!(put_tagged(&mut buf[..5], 0, Tag::Unsigned, &[0; 8]).is_none());
        // An index past the list, or an unknown tag, is an error, not a panic.
        assert!(values("a:value", &[2, 0, 0, 0, 0, 0, 0, 0, 0, 0])
            .next()
            .unwrap()
            .is_err());
        assert!(values("a:value", &[1, 9]).next().unwrap().is_err());
    }

    #[test]
    fn a_message_recorded_once_comes_first_unless_the_event_holds_its_own() {
        let spec = "message:value,n:value";
        let message = Some((0, "done é"));
        // An event that left it out: its values, the message first.
        let mut buf = [core::mem::MaybeUninit::new(0u8); 32];
        let n = put_tagged(&mut buf, 1, Tag::Unsigned, &7u64.to_le_bytes()).unwrap();
        // SAFETY: every byte was initialized (to 0, then by put_tagged).
        let p: [u8; 32] = unsafe { core::mem::transmute(buf) };
        // One 16-byte slot: the value and the zero padding that ends the list.
        let b = show(|w| write_call_with_message(w, "t", spec, message, &p[..n.div_ceil(16) * 16]));
        let text = core::str::from_utf8(&b.b[..b.n]).unwrap();
        assert_eq!(text, r#"t(message="done é", n=7)"#);
        // Without a value at all (a payload of no slots).
        let b = show(|w| write_call_with_message(w, "t", spec, message, &[]));
        assert_eq!(
            core::str::from_utf8(&b.b[..b.n]).unwrap(),
            r#"t(message="done é")"#
        );
        // An event that holds a message of its own shows it, once.
        let mut buf = [core::mem::MaybeUninit::new(0u8); 32];
        let mut k = put_tagged(&mut buf, 0, Tag::Str, b"other").unwrap();
        k += put_tagged(&mut buf[k..], 1, Tag::Unsigned, &7u64.to_le_bytes()).unwrap();
        // SAFETY: as above.
        let p: [u8; 32] = unsafe { core::mem::transmute(buf) };
        let b = show(|w| write_call_with_message(w, "t", spec, message, &p[..k + 1]));
        let text = core::str::from_utf8(&b.b[..b.n]).unwrap();
        assert_eq!(text, r#"t(message="other", n=7)"#);
        // A field index past the list is ignored (damage), not a panic.
        let b = show(|w| write_call_with_message(w, "t", spec, Some((9, "x")), &[]));
        assert_eq!(core::str::from_utf8(&b.b[..b.n]).unwrap(), "t()");
    }

    #[test]
    fn bytes_of_every_length_are_copied_exactly() {
        let from: [u8; 40] = core::array::from_fn(|i| i as u8 + 1);
        for n in 0..=from.len() {
            let mut to = [core::mem::MaybeUninit::new(0u8); 42];
            copy_bytes(&from[..n], &mut to[1..n + 1]);
            // SAFETY: every byte was initialized (to 0, then by copy_bytes).
            let to: [u8; 42] = unsafe { core::mem::transmute(to) };
            assert_eq!(to[0], 0);
            assert_eq!(&to[1..n + 1], &from[..n], "{n} bytes");
            assert!(to[n + 1..].iter().all(|&b| b == 0), "{n} bytes");
        }
    }

    #[test]
    fn short_payload_is_an_error_not_a_panic() {
        let b = show(|w| write_call(w, "t", "a:u64,b:u8", &[1, 0, 0]));
        assert_eq!(
            core::str::from_utf8(&b.b[..b.n]).unwrap(),
            "t(<payload ends in the middle of a field>)"
        );
        assert!(values("a:nonsense", &[0; 8]).next().unwrap().is_err());
    }
}
