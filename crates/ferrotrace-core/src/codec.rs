//! Varints, length-prefixed fields, and the event delta encoding.
//!
//! Every chunk payload is written with [`Sink`] + the `put_*` functions and read back with
//! [`FieldReader`]. Events use [`EventEncoder`] / [`EventDecoder`]: each event is a varint tag
//! (`id << 4 | kind`) and a zigzag varint of the TSC delta to the previous event, so a function entry or
//! exit a few hundred cycles after the previous event takes 2–3 bytes on disk instead of the 16 it takes in
//! memory.

#[cfg(all(test, not(feature = "std")))]
extern crate std;

use crate::grouped;
use crate::record::{EventKind, Record};

/// Where encoded bytes go. Implemented here for a fixed slice; the runtime implements it for `Vec<u8>`.
pub trait Sink {
    /// Appends `bytes`, or fails when there is no room.
    fn put(&mut self, bytes: &[u8]) -> Result<(), Full>;
}

/// A growable buffer never fills up (with `std`, or in tests).
#[cfg(any(test, feature = "std"))]
impl Sink for std::vec::Vec<u8> {
    fn put(&mut self, bytes: &[u8]) -> Result<(), Full> {
        self.extend_from_slice(bytes);
        Ok(())
    }
}

/// The sink had no room for the bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Full;

/// A [`Sink`] over a caller-provided buffer.
pub struct SliceSink<'a> {
    buf: &'a mut [u8],
    len: usize,
}

impl<'a> SliceSink<'a> {
    /// An empty sink writing into `buf`.
    pub fn new(buf: &'a mut [u8]) -> Self {
        SliceSink { buf, len: 0 }
    }

    /// Bytes written so far.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when nothing was written.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Sink for SliceSink<'_> {
    fn put(&mut self, bytes: &[u8]) -> Result<(), Full> {
        let end = self.len.checked_add(bytes.len()).ok_or(Full)?;
        if end > self.buf.len() {
            return Err(Full);
        }
        self.buf[self.len..end].copy_from_slice(bytes);
        self.len = end;
        Ok(())
    }
}

/// Appends `v` as an unsigned LEB128 varint (1–10 bytes).
pub fn put_varint<S: Sink + ?Sized>(sink: &mut S, mut v: u64) -> Result<(), Full> {
    let mut buf = [0u8; 10];
    let mut n = 0;
    loop {
        let byte = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            buf[n] = byte;
            n += 1;
            break;
        }
        buf[n] = byte | 0x80;
        n += 1;
    }
    sink.put(&buf[..n])
}

/// Appends a length-prefixed byte string.
pub fn put_bytes<S: Sink + ?Sized>(sink: &mut S, bytes: &[u8]) -> Result<(), Full> {
    put_varint(sink, bytes.len() as u64)?;
    sink.put(bytes)
}

/// Appends a length-prefixed UTF-8 string.
pub fn put_str<S: Sink + ?Sized>(sink: &mut S, s: &str) -> Result<(), Full> {
    put_bytes(sink, s.as_bytes())
}

/// Maps a signed number onto an unsigned one so that small magnitudes stay small.
pub const fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

/// Inverse of [`zigzag`].
pub const fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

/// A payload ended early or held a malformed field.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DecodeError {
    /// The payload ended in the middle of a field.
    Truncated,
    /// A varint longer than 10 bytes, or one that overflows 64 bits.
    BadVarint,
    /// A field value outside its domain (unknown event kind, impossible length).
    BadValue,
}

impl core::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            DecodeError::Truncated => "payload ends in the middle of a field",
            DecodeError::BadVarint => "malformed varint",
            DecodeError::BadValue => "field value out of range",
        })
    }
}

/// Reads the fields of one chunk payload in order.
#[derive(Clone)]
pub struct FieldReader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> FieldReader<'a> {
    /// A reader at the start of `buf`.
    pub fn new(buf: &'a [u8]) -> Self {
        FieldReader { buf, pos: 0 }
    }

    /// Bytes not read yet.
    #[inline]
    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// Reads a varint.
    #[inline]
    pub fn varint(&mut self) -> Result<u64, DecodeError> {
        let mut v: u64 = 0;
        let mut shift = 0u32;
        loop {
            let byte = *self.buf.get(self.pos).ok_or(DecodeError::Truncated)?;
            self.pos += 1;
            if shift == 63 && byte > 1 {
                return Err(DecodeError::BadVarint);
            }
            v |= ((byte & 0x7f) as u64) << shift;
            if byte & 0x80 == 0 {
                return Ok(v);
            }
            shift += 7;
            if shift > 63 {
                return Err(DecodeError::BadVarint);
            }
        }
    }

    /// Reads a varint that must fit in a `u32`.
    pub fn varint_u32(&mut self) -> Result<u32, DecodeError> {
        u32::try_from(self.varint()?).map_err(|_| DecodeError::BadValue)
    }

    /// Reads a length-prefixed byte string.
    pub fn bytes(&mut self) -> Result<&'a [u8], DecodeError> {
        let len = self.varint()?;
        let len = usize::try_from(len).map_err(|_| DecodeError::BadValue)?;
        if len > self.remaining() {
            return Err(DecodeError::Truncated);
        }
        let s = &self.buf[self.pos..self.pos + len];
        self.pos += len;
        Ok(s)
    }

    /// Reads a length-prefixed string; invalid UTF-8 is an error.
    pub fn str(&mut self) -> Result<&'a str, DecodeError> {
        core::str::from_utf8(self.bytes()?).map_err(|_| DecodeError::BadValue)
    }

    /// The bytes not read yet.
    #[inline]
    pub fn rest(&self) -> &'a [u8] {
        &self.buf[self.pos..]
    }
}

/// How the part of an event after its tag and time delta is laid out on disk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    /// Nothing follows (function events, Lost, Wait).
    Bare,
    /// A length-prefixed byte string (`s`): a tracepoint's arguments.
    Bytes,
    /// This many varint fields (see [`EventFields`]).
    Fields(u8),
}

/// The on-disk shape of `kind`'s events.
pub const fn shape(kind: EventKind) -> Shape {
    match kind {
        EventKind::Tracepoint => Shape::Bytes,
        EventKind::Alloc | EventKind::Sample => Shape::Fields(2),
        EventKind::Free => Shape::Fields(1),
        _ => Shape::Bare,
    }
}

/// The varint fields of an event, by kind (zero where a kind has fewer):
///
/// | kind | `[0]` | `[1]` |
/// |---|---|---|
/// | Alloc | size in bytes | address |
/// | Free | address | — |
/// | Sample | sampler (index in the Samplers chunk) | weight (in the sampler's unit) |
///
/// Addresses are written as the zigzag difference to the previous address in the same chunk (0 before
/// the first), so that the nearby addresses of one thread's allocations take 1–3 bytes, not 6–7.
pub type EventFields = [u64; 2];

/// Encodes the events of one thread's chunk, each relative to the one before.
pub struct EventEncoder {
    prev_tsc: u64,
    prev_addr: u64,
}

/// Room one event's tag, delta and fields take at most: four 10-byte varints.
pub const MAX_EVENT_LEN: usize = 40;

/// The on-disk kind of a leaf call (format 2.5): a function entry and its exit, the thread's next
/// event, written as one event — tag `id << 4 | 9`, `z` delta of the entry, `v` duration (exit ticks −
/// entry ticks). It is not an [`EventKind`]: [`EventDecoder`] hands it on as the Entry and then the
/// Exit, and it counts as those two events wherever events are counted (a chunk's `count`, End's
/// `events`), so no reader of decoded events sees it.
pub const CALL_KIND: u64 = 9;

/// The on-disk kind of a function entry that carries its arguments (format 2.8, `record -A`): tag
/// `id << 4 | 10`, `z` delta, `s` the values as [`crate::argspec`] lays them out, described by the
/// function's entry in the ArgSpecs chunk. Not an [`EventKind`]: [`EventDecoder`] hands it on as an
/// Entry whose payload is the values.
pub const ARGS_KIND: u64 = 10;

/// The on-disk kind of a function exit that carries its return value (format 2.8, `record -R`), laid
/// out as [`ARGS_KIND`]; handed on as an Exit whose payload is the value.
pub const RETURN_KIND: u64 = 11;

/// The on-disk kind of a function event of `kind` that carries `payload`: [`ARGS_KIND`] or
/// [`RETURN_KIND`] for an Entry or Exit with values, `kind` itself otherwise.
#[inline]
fn disk_kind(kind: EventKind, payload: &[u8]) -> u64 {
    match kind {
        EventKind::Entry if !payload.is_empty() => ARGS_KIND,
        EventKind::Exit if !payload.is_empty() => RETURN_KIND,
        k => k as u64,
    }
}

#[inline(always)]
fn write_varint(buf: &mut [u8], mut pos: usize, mut v: u64) -> usize {
    while v >= 0x80 {
        buf[pos] = v as u8 | 0x80;
        v >>= 7;
        pos += 1;
    }
    buf[pos] = v as u8;
    pos + 1
}

/// The tag of an event: its id above its four kind bits.
#[inline(always)]
pub const fn tag(kind: EventKind, id: u32) -> u64 {
    (id as u64) << 4 | kind as u64
}

impl EventEncoder {
    /// An encoder whose first delta is taken against `base_tsc`.
    pub fn new(base_tsc: u64) -> Self {
        EventEncoder {
            prev_tsc: base_tsc,
            prev_addr: 0,
        }
    }

    /// Writes tag, delta and fields at `buf[pos..]` (which must have [`MAX_EVENT_LEN`] bytes).
    #[inline]
    fn head(
        &mut self,
        tsc: u64,
        kind: EventKind,
        id: u32,
        fields: &EventFields,
        buf: &mut [u8],
        pos: usize,
    ) -> usize {
        let tag = tag(kind, id);
        let delta = zigzag(tsc.wrapping_sub(self.prev_tsc) as i64);
        self.prev_tsc = tsc;
        if (tag | delta) < 0x80 && matches!(shape(kind), Shape::Bare | Shape::Bytes) {
            // The common case (small id, a few hundred cycles since the previous event): two bytes.
            buf[pos] = tag as u8;
            buf[pos + 1] = delta as u8;
            return pos + 2;
        }
        let mut p = write_varint(buf, pos, tag);
        p = write_varint(buf, p, delta);
        let mut address = |a: u64| {
            let d = zigzag(a.wrapping_sub(self.prev_addr) as i64);
            self.prev_addr = a;
            d
        };
        match kind {
            EventKind::Alloc => {
                p = write_varint(buf, p, fields[0]);
                p = write_varint(buf, p, address(fields[1]));
            }
            EventKind::Free => p = write_varint(buf, p, address(fields[0])),
            EventKind::Sample => {
                p = write_varint(buf, p, fields[0]);
                p = write_varint(buf, p, fields[1]);
            }
            _ => {}
        }
        p
    }

    /// Appends one event: `payload` is written for [`Shape::Bytes`] kinds, `fields` for
    /// [`Shape::Fields`] kinds.
    pub fn encode<S: Sink + ?Sized>(
        &mut self,
        tsc: u64,
        kind: EventKind,
        id: u32,
        payload: &[u8],
        fields: &EventFields,
        sink: &mut S,
    ) -> Result<(), Full> {
        let mut head = [0u8; MAX_EVENT_LEN];
        let disk = disk_kind(kind, payload);
        if disk != kind as u64 {
            let delta = zigzag(tsc.wrapping_sub(self.prev_tsc) as i64);
            self.prev_tsc = tsc;
            let p = write_varint(&mut head, 0, (id as u64) << 4 | disk);
            let p = write_varint(&mut head, p, delta);
            sink.put(&head[..p])?;
            return put_bytes(sink, payload);
        }
        let n = self.head(tsc, kind, id, fields, &mut head, 0);
        sink.put(&head[..n])?;
        if shape(kind) == Shape::Bytes {
            put_bytes(sink, payload)?;
        }
        Ok(())
    }

    /// The collector's path: encodes a record as the hot path stored it, with the 16-byte slots that
    /// follow it (`payload`): the argument bytes of a tracepoint, or the little-endian `u64` fields of
    /// an allocation (a Free made by [`Record::free`] has its address in the record and no slot). Writes at `buf[pos..]` and returns the new position, or `None` when `buf` has less
    /// than [`MAX_EVENT_LEN`] bytes (plus the payload's length and 10) after `pos`. Produces exactly the
    /// bytes [`EventEncoder::encode`] would.
    #[inline]
    pub fn encode_into(
        &mut self,
        rec: &Record,
        payload: &[u8],
        buf: &mut [u8],
        pos: usize,
    ) -> Option<usize> {
        let kind = rec.kind().unwrap_or(EventKind::Lost);
        let disk = disk_kind(kind, payload);
        let bytes = shape(kind) == Shape::Bytes || disk != kind as u64;
        let extra = if bytes { payload.len() + 10 } else { 0 };
        if buf.len().checked_sub(pos)? < MAX_EVENT_LEN + extra {
            return None;
        }
        if disk != kind as u64 {
            let delta = zigzag(rec.tsc.wrapping_sub(self.prev_tsc) as i64);
            self.prev_tsc = rec.tsc;
            let mut p = write_varint(buf, pos, (rec.id() as u64) << 4 | disk);
            p = write_varint(buf, p, delta);
            p = write_varint(buf, p, payload.len() as u64);
            buf[p..p + payload.len()].copy_from_slice(payload);
            return Some(p + payload.len());
        }
        let mut fields = [0u64; 2];
        for (f, w) in fields.iter_mut().zip(payload.chunks_exact(8)) {
            *f = u64::from_le_bytes(w.try_into().unwrap_or_default());
        }
        let mut id = rec.id();
        if kind == EventKind::Free && payload.is_empty() {
            // The address is in the record itself (Record::free); a Free's id is 0.
            fields[0] = rec.free_address();
            id = 0;
        }
        let mut p = self.head(rec.tsc, kind, id, &fields, buf, pos);
        if bytes {
            p = write_varint(buf, p, payload.len() as u64);
            buf[p..p + payload.len()].copy_from_slice(payload);
            p += payload.len();
        }
        Some(p)
    }

    /// [`EventEncoder::encode_into`] for a record the caller knows to be a function event (Entry, Exit or
    /// TailExit: `rec.word >> 32` is 0, 1 or 2, no payload). Same bytes, fewer checks.
    #[inline(always)]
    pub fn encode_function(&mut self, rec: &Record, buf: &mut [u8], pos: usize) -> Option<usize> {
        debug_assert!(rec.word >> 32 <= 2);
        let b = buf.get_mut(pos..pos + MAX_EVENT_LEN)?;
        let tag = (rec.word as u32 as u64) << 4 | rec.word >> 32;
        let delta = zigzag(rec.tsc.wrapping_sub(self.prev_tsc) as i64);
        self.prev_tsc = rec.tsc;
        if (tag | delta) < 0x80 {
            b[0] = tag as u8;
            b[1] = delta as u8;
            return Some(pos + 2);
        }
        let p = write_varint(b, 0, tag);
        Some(pos + write_varint(b, p, delta))
    }

    /// Writes the entry of function `id` at `entry` ticks and its exit at `exit` (≥ `entry`) as one
    /// leaf-call event ([`CALL_KIND`]) at `buf[pos..]`, or `None` when `buf` has less than
    /// [`MAX_EVENT_LEN`] bytes after `pos`. The next delta is taken against `exit`.
    #[inline(always)]
    pub fn encode_call(
        &mut self,
        id: u32,
        entry: u64,
        exit: u64,
        buf: &mut [u8],
        pos: usize,
    ) -> Option<usize> {
        debug_assert!(exit >= entry);
        let b = buf.get_mut(pos..pos + MAX_EVENT_LEN)?;
        let tag = (id as u64) << 4 | CALL_KIND;
        let delta = zigzag(entry.wrapping_sub(self.prev_tsc) as i64);
        let duration = exit - entry;
        self.prev_tsc = exit;
        if (tag | delta | duration) < 0x80 {
            b[0] = tag as u8;
            b[1] = delta as u8;
            b[2] = duration as u8;
            return Some(pos + 3);
        }
        let mut p = write_varint(b, 0, tag);
        p = write_varint(b, p, delta);
        Some(pos + write_varint(b, p, duration))
    }
}

/// A varint of at most 3 bytes at `w[at..]` (`at + 3 <= w.len()`): its value and length, or `None`
/// for a longer one.
#[inline(always)]
fn short_varint(w: &[u8], at: usize) -> Option<(u32, usize)> {
    let (b0, b1, b2) = (w[at] as u32, w[at + 1] as u32, w[at + 2] as u32);
    if b0 < 0x80 {
        Some((b0, 1))
    } else if b1 < 0x80 {
        Some((b0 & 0x7f | b1 << 7, 2))
    } else if b2 < 0x80 {
        Some((b0 & 0x7f | (b1 & 0x7f) << 7 | b2 << 14, 3))
    } else {
        None
    }
}

/// One decoded event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DecodedEvent<'a> {
    /// Raw TSC timestamp.
    pub tsc: u64,
    /// What happened.
    pub kind: EventKind,
    /// Function id, tracepoint id, stack id + 1, or count (see [`EventKind`]).
    pub id: u32,
    /// Payload bytes of [`Shape::Bytes`] kinds, empty for the others.
    pub payload: &'a [u8],
    /// Fields of [`Shape::Fields`] kinds (addresses already absolute), zero for the others.
    pub fields: EventFields,
}

impl DecodedEvent<'_> {
    /// A function entry, exit or tail exit: no payload, no fields.
    #[inline(always)]
    const fn function(tsc: u64, kind: EventKind, id: u32) -> Self {
        DecodedEvent {
            tsc,
            kind,
            id,
            payload: &[],
            fields: [0; 2],
        }
    }
}

/// Iterates over the events of an `Events` chunk body (after its four header fields), in either
/// layout: this module's varints, or the grouped layout of runs of leaf calls ([`crate::grouped`]),
/// told apart by the body's first byte.
#[derive(Clone)]
pub struct EventDecoder<'a> {
    fields: FieldReader<'a>,
    prev_tsc: u64,
    prev_addr: u64,
    failed: bool,
    /// The exit of a leaf-call event ([`CALL_KIND`]) whose entry was handed on last: its id (the
    /// tick is `prev_tsc`).
    call_exit: Option<u32>,
    /// The events are in the grouped layout ([`crate::grouped`]), not this module's varints.
    grouped: bool,
}

impl<'a> EventDecoder<'a> {
    /// A decoder over `body` whose first delta is relative to `base_tsc`.
    pub fn new(body: &'a [u8], base_tsc: u64) -> Self {
        let grouped = body.first() == Some(&grouped::MARK);
        let mut fields = FieldReader::new(body);
        fields.pos = grouped as usize;
        EventDecoder {
            fields,
            prev_tsc: base_tsc,
            prev_addr: 0,
            failed: false,
            call_exit: None,
            grouped,
        }
    }

    /// The next event of the grouped layout: a leaf call's entry, its exit kept for the next call.
    fn next_grouped(&mut self) -> Result<DecodedEvent<'a>, DecodeError> {
        let g = grouped::decode(self.fields.buf, &mut self.fields.pos, self.prev_tsc)?;
        match g.exit {
            Some(exit) => {
                self.prev_tsc = exit;
                self.call_exit = Some(g.id);
            }
            None => self.prev_tsc = g.tsc,
        }
        Ok(DecodedEvent::function(g.tsc, g.kind, g.id))
    }

    /// The exit of a leaf call whose entry was handed on last, if any.
    #[inline(always)]
    fn take_call_exit(&mut self) -> Option<DecodedEvent<'a>> {
        let id = self.call_exit.take()?;
        Some(DecodedEvent::function(self.prev_tsc, EventKind::Exit, id))
    }

    #[inline]
    fn next_event(&mut self) -> Result<DecodedEvent<'a>, DecodeError> {
        // Fast path: most events are a one-byte tag and a one-byte delta; many others have a
        // two-byte delta.
        let rest = self.fields.rest();
        if let [tag, d0, ..] = *rest {
            if tag < 0x80 {
                if let Some(kind) = EventKind::from_u8(tag & 15) {
                    if shape(kind) == Shape::Bare {
                        let (delta, len) = if d0 < 0x80 {
                            (d0 as u64, 2)
                        } else {
                            match rest.get(2) {
                                Some(&d1) if d1 < 0x80 => {
                                    ((d0 & 0x7f) as u64 | (d1 as u64) << 7, 3)
                                }
                                _ => return self.next_event_slow(),
                            }
                        };
                        self.fields.pos += len;
                        let tsc = self.prev_tsc.wrapping_add(unzigzag(delta) as u64);
                        self.prev_tsc = tsc;
                        return Ok(DecodedEvent::function(tsc, kind, (tag >> 4) as u32));
                    }
                }
            }
        }
        self.next_event_slow()
    }

    /// Decodes the function entries, exits and tail exits from here on, calling `each(tsc, kind, id,
    /// exit)` for each: `exit` is `None`, except for a leaf call, which is one call of `each` with its
    /// entry (`kind` Entry at `tsc`) and the tick of its exit in `exit`. Stops at an event of another
    /// kind, an id of 2^13 or more, a delta or duration of 2^20 ticks or more (a delta zigzagged:
    /// 2^21), the last few bytes of the body, or right away when the exit of a leaf call that
    /// [`Iterator::next`] handed on as its entry is due: those are left to `next`, which checks
    /// everything. The events it decodes are those `next` would: a tight loop for the events that make
    /// up nearly all of a function trace, with one bounds check per event, and one call of `each` in
    /// it, so that the caller's closure is inlined once. In the grouped layout ([`crate::grouped`]),
    /// whose events are all function events, it decodes up to the end or to a malformed event.
    #[inline]
    pub fn function_run(&mut self, mut each: impl FnMut(u64, EventKind, u32, Option<u64>)) {
        /// The longest event the loop decodes: a leaf call with a 3-byte tag, delta and duration.
        const LONGEST: usize = 9;
        /// [`CALL_KIND`] as a tag's low bits.
        const CALL: u32 = CALL_KIND as u32;
        if self.call_exit.is_some() {
            return;
        }
        if self.grouped {
            // Every event of the grouped layout is a function event; an error is left to `next`.
            let (buf, mut pos, mut tsc) = (self.fields.buf, self.fields.pos, self.prev_tsc);
            while let Ok(g) = grouped::decode(buf, &mut pos, tsc) {
                tsc = g.exit.unwrap_or(g.tsc);
                each(g.tsc, g.kind, g.id, g.exit);
            }
            self.fields.pos = pos;
            self.prev_tsc = tsc;
            return;
        }
        let buf = self.fields.buf;
        let mut pos = self.fields.pos;
        let mut tsc = self.prev_tsc;
        while let Some(w) = buf.get(pos..pos + LONGEST) {
            let (tag, tag_len) = match short_varint(w, 0) {
                Some(v) => v,
                None => break,
            };
            let kind = match tag & 15 {
                0 | CALL => EventKind::Entry,
                1 => EventKind::Exit,
                2 => EventKind::TailExit,
                _ => break,
            };
            let (delta, delta_len) = match short_varint(w, tag_len) {
                Some(v) => v,
                None => break,
            };
            let at = tsc.wrapping_add(unzigzag(delta as u64) as u64);
            let mut exit = None;
            let mut len = tag_len + delta_len;
            if tag & 15 == CALL {
                let (duration, duration_len) = match short_varint(w, len) {
                    Some(v) => v,
                    None => break,
                };
                len += duration_len;
                tsc = at.wrapping_add(duration as u64);
                exit = Some(tsc);
            } else {
                tsc = at;
            }
            pos += len;
            each(at, kind, tag >> 4, exit);
        }
        self.fields.pos = pos;
        self.prev_tsc = tsc;
    }

    fn next_event_slow(&mut self) -> Result<DecodedEvent<'a>, DecodeError> {
        let tag = self.fields.varint()?;
        let id = u32::try_from(tag >> 4).map_err(|_| DecodeError::BadValue)?;
        if tag & 15 == CALL_KIND {
            return self.call(id);
        }
        if let kind @ (ARGS_KIND | RETURN_KIND) = tag & 15 {
            let delta = unzigzag(self.fields.varint()?);
            let tsc = self.prev_tsc.wrapping_add(delta as u64);
            self.prev_tsc = tsc;
            return Ok(DecodedEvent {
                tsc,
                kind: match kind {
                    ARGS_KIND => EventKind::Entry,
                    _ => EventKind::Exit,
                },
                id,
                payload: self.fields.bytes()?,
                fields: [0; 2],
            });
        }
        let kind = EventKind::from_u8((tag & 15) as u8).ok_or(DecodeError::BadValue)?;
        let delta = unzigzag(self.fields.varint()?);
        let tsc = self.prev_tsc.wrapping_add(delta as u64);
        self.prev_tsc = tsc;
        let mut payload: &[u8] = &[];
        let mut fields = [0u64; 2];
        match kind {
            EventKind::Tracepoint => payload = self.fields.bytes()?,
            EventKind::Alloc => {
                fields[0] = self.fields.varint()?;
                fields[1] = self.address()?;
            }
            EventKind::Free => fields[0] = self.address()?,
            EventKind::Sample => {
                fields[0] = self.fields.varint()?;
                fields[1] = self.fields.varint()?;
            }
            _ => {}
        }
        Ok(DecodedEvent {
            tsc,
            kind,
            id,
            payload,
            fields,
        })
    }

    /// A leaf call of function `id` after its tag: hands on its entry, and keeps its exit for the
    /// next event.
    fn call(&mut self, id: u32) -> Result<DecodedEvent<'a>, DecodeError> {
        let entry = self
            .prev_tsc
            .wrapping_add(unzigzag(self.fields.varint()?) as u64);
        let duration = self.fields.varint()?;
        self.prev_tsc = entry.wrapping_add(duration);
        self.call_exit = Some(id);
        Ok(DecodedEvent::function(entry, EventKind::Entry, id))
    }

    fn address(&mut self) -> Result<u64, DecodeError> {
        let a = self
            .prev_addr
            .wrapping_add(unzigzag(self.fields.varint()?) as u64);
        self.prev_addr = a;
        Ok(a)
    }
}

impl<'a> Iterator for EventDecoder<'a> {
    type Item = Result<DecodedEvent<'a>, DecodeError>;

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        if let Some(exit) = self.take_call_exit() {
            return Some(Ok(exit));
        }
        if self.failed || self.fields.remaining() == 0 {
            return None;
        }
        let r = if self.grouped {
            self.next_grouped()
        } else {
            self.next_event()
        };
        self.failed = r.is_err();
        Some(r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_free_record_carries_its_address_and_encodes_as_a_free_of_id_0() {
        let addr = 0x7ffd_1234_5678u64; // the highest user-space addresses have 47 bits
        let rec = Record::free(1_000, addr);
        assert_eq!(rec.kind(), Some(EventKind::Free));
        assert_eq!((rec.free_address(), rec.payload_slots()), (addr, 0));
        let mut buf = [0u8; 64];
        let n = EventEncoder::new(900)
            .encode_into(&rec, &[], &mut buf, 0)
            .unwrap();
        let mut expect = std::vec::Vec::new();
        EventEncoder::new(900)
            .encode(1_000, EventKind::Free, 0, &[], &[addr, 0], &mut expect)
            .unwrap();
        assert_eq!(&buf[..n], &expect[..]);
    }

    #[test]
    fn entries_and_exits_with_values_are_kinds_10_and_11_and_decode_as_entry_and_exit() {
        let values = [7u8; 16];
        let mut body = [0u8; 128];
        let mut enc = EventEncoder::new(900);
        let mut pos = 0;
        for (rec, payload) in [
            (
                Record::with_payload(1_000, EventKind::Entry, 300, 1),
                &values[..],
            ),
            (Record::new(1_010, EventKind::Entry, 4), &[][..]),
            (Record::new(1_020, EventKind::Exit, 4), &[][..]),
            (
                Record::with_payload(1_030, EventKind::Exit, 300, 1),
                &values[..8],
            ),
        ] {
            pos = enc.encode_into(&rec, payload, &mut body, pos).unwrap();
        }
        assert_eq!(body[0] & 15, ARGS_KIND as u8);
        // The builder's path writes the same bytes.
        let mut built = std::vec::Vec::new();
        let mut enc = EventEncoder::new(900);
        for (t, k, id, p) in [
            (1_000, EventKind::Entry, 300, &values[..]),
            (1_010, EventKind::Entry, 4, &[][..]),
            (1_020, EventKind::Exit, 4, &[][..]),
            (1_030, EventKind::Exit, 300, &values[..8]),
        ] {
            enc.encode(t, k, id, p, &[0, 0], &mut built).unwrap();
        }
        assert_eq!(&body[..pos], &built[..]);
        let got: std::vec::Vec<_> = EventDecoder::new(&body[..pos], 900)
            .map(|e| e.map(|e| (e.tsc, e.kind, e.id, e.payload.len())).unwrap())
            .collect();
        assert_eq!(
            got,
            [
                (1_000, EventKind::Entry, 300, 16),
                (1_010, EventKind::Entry, 4, 0),
                (1_020, EventKind::Exit, 4, 0),
                (1_030, EventKind::Exit, 300, 8),
            ]
        );
    }

    #[test]
    fn function_run_decodes_what_next_decodes_and_leaves_the_rest_to_it() {
        // Ids and deltas on both sides of the run's limits (ids of 2^13, deltas and leaf calls' durations
        // of 2^20 ticks, both directions), with tracepoints and allocations between runs.
        let mut body = std::vec::Vec::new();
        let mut enc = EventEncoder::new(1_000_000);
        let mut want = std::vec::Vec::new();
        let (mut tsc, mut x) = (1_000_000u64, 7u64);
        for i in 0..5_000u32 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let r = x >> 20;
            let step = [1u64, 90, 20_000, (1 << 20) - 1, 1 << 20, 1 << 30][(r % 6) as usize];
            tsc = if r & 64 == 0 {
                tsc + step
            } else {
                tsc.saturating_sub(step)
            };
            let id = [0u32, 5, 300, (1 << 13) - 1, 1 << 13, 1 << 20][((r >> 8) % 6) as usize];
            if r >> 24 & 3 == 0 {
                // A leaf call, lasting one of the steps.
                let exit = tsc + [1u64, 90, (1 << 20) - 1, 1 << 20][(r >> 26 & 3) as usize];
                let mut call = [0u8; MAX_EVENT_LEN];
                let n = enc.encode_call(id, tsc, exit, &mut call, 0).unwrap();
                body.extend_from_slice(&call[..n]);
                want.push((tsc, EventKind::Entry, id));
                want.push((exit, EventKind::Exit, id));
                tsc = exit;
                continue;
            }
            let kind = [
                EventKind::Entry,
                EventKind::Exit,
                EventKind::TailExit,
                EventKind::Tracepoint,
                EventKind::Alloc,
            ][((r >> 16) % 5) as usize];
            let (payload, fields): (&[u8], EventFields) = match kind {
                EventKind::Tracepoint => (b"args", [0; 2]),
                EventKind::Alloc => (&[], [64, 0x5000 + i as u64 * 16]),
                _ => (&[], [0; 2]),
            };
            enc.encode(tsc, kind, id, payload, &fields, &mut body)
                .unwrap();
            want.push((tsc, kind, id));
        }
        let mut got = std::vec::Vec::new();
        let mut runs = 0;
        let mut dec = EventDecoder::new(&body, 1_000_000);
        loop {
            let before = got.len();
            dec.function_run(|t, k, id, exit| {
                got.push((t, k, id));
                if let Some(end) = exit {
                    got.push((end, EventKind::Exit, id));
                }
            });
            runs += (got.len() > before) as usize;
            match dec.next() {
                Some(e) => {
                    let e = e.unwrap();
                    got.push((e.tsc, e.kind, e.id));
                }
                None => break,
            }
        }
        assert_eq!(got, want);
        assert!(runs > 100, "{runs} runs");
    }

    #[test]
    fn varint_round_trip_edges() {
        for v in [0u64, 1, 127, 128, 16383, 16384, u32::MAX as u64, u64::MAX] {
            let mut buf = [0u8; 10];
            let mut s = SliceSink::new(&mut buf);
            put_varint(&mut s, v).unwrap();
            let n = s.len();
            assert_eq!(FieldReader::new(&buf[..n]).varint(), Ok(v));
        }
    }

    #[test]
    fn varint_rejects_overlong_and_truncated() {
        assert_eq!(
            FieldReader::new(&[0x80; 11]).varint(),
            Err(DecodeError::BadVarint)
        );
        assert_eq!(
            FieldReader::new(&[0x80]).varint(),
            Err(DecodeError::Truncated)
        );
        let mut over = [0xffu8; 10];
        over[9] = 0x02;
        assert_eq!(
            FieldReader::new(&over).varint(),
            Err(DecodeError::BadVarint)
        );
    }

    #[test]
    fn zigzag_round_trip() {
        for v in [0i64, -1, 1, i64::MIN, i64::MAX, -300] {
            assert_eq!(unzigzag(zigzag(v)), v);
        }
        assert_eq!(zigzag(-1), 1);
        assert_eq!(zigzag(1), 2);
    }

    #[test]
    fn events_round_trip_with_payload_and_backwards_time() {
        let recs = [
            (Record::new(100, EventKind::Entry, 3), &b""[..], [0, 0]),
            (
                Record::new(90, EventKind::Tracepoint, 1),
                &b"args"[..],
                [0, 0],
            ),
            (Record::new(200, EventKind::Exit, 3), &b""[..], [0, 0]),
            (Record::new(200, EventKind::Lost, 12345), &b""[..], [0, 0]),
            (
                Record::new(300, EventKind::Alloc, 8),
                &b""[..],
                [24, 0x5555_0000_1000],
            ),
            (
                Record::new(310, EventKind::Free, 0),
                &b""[..],
                [0x5555_0000_0fe0, 0],
            ),
            (
                Record::new(320, EventKind::Sample, 77),
                &b""[..],
                [1, 1_001_000],
            ),
        ];
        let mut buf = [0u8; 128];
        let mut sink = SliceSink::new(&mut buf);
        let mut enc = EventEncoder::new(100);
        for (r, p, f) in &recs {
            let kind = r.kind().unwrap();
            enc.encode(r.tsc, kind, r.id(), p, f, &mut sink).unwrap();
        }
        let n = sink.len();
        let out: Result<[_; 7], _> = {
            let mut d = EventDecoder::new(&buf[..n], 100);
            let mut arr = [None; 7];
            for slot in arr.iter_mut() {
                *slot = Some(d.next().unwrap().unwrap());
            }
            assert!(d.next().is_none());
            Ok::<_, DecodeError>(arr.map(|e| e.unwrap()))
        };
        let out = out.unwrap();
        assert_eq!(out[1].tsc, 90);
        assert_eq!(out[1].payload, b"args");
        assert_eq!(out[2].tsc, 200);
        assert_eq!(out[3].id, 12345);
        assert_eq!(out[3].kind, EventKind::Lost);
        for (o, (r, _, f)) in out.iter().zip(&recs).skip(4) {
            assert_eq!(
                (o.kind, o.id, o.tsc, o.fields),
                (r.kind().unwrap(), r.id(), r.tsc, *f)
            );
        }
    }

    #[test]
    fn fast_encoder_writes_the_same_bytes() {
        let alloc_words = [48u64.to_le_bytes(), 0x7f00_dead_beefu64.to_le_bytes()].concat();
        let recs = [
            (Record::new(1 << 40, EventKind::Entry, 3), &b""[..]),
            (Record::new((1 << 40) + 60, EventKind::Exit, 3), &b""[..]),
            (
                Record::new((1 << 40) - 5, EventKind::Tracepoint, 70_000),
                &b"payload"[..],
            ),
            (Record::new(u64::MAX, EventKind::Exit, u32::MAX), &b""[..]),
            (Record::new(7, EventKind::Alloc, 9), &alloc_words[..]),
        ];
        let mut slow = [0u8; 160];
        let mut sink = SliceSink::new(&mut slow);
        let mut a = EventEncoder::new(1 << 40);
        let mut fast = [0u8; 160];
        let mut b = EventEncoder::new(1 << 40);
        let mut pos = 0;
        for (r, p) in &recs {
            let kind = r.kind().unwrap();
            let mut f = [0u64; 2];
            if kind == EventKind::Alloc {
                f = [48, 0x7f00_dead_beef];
            }
            let bytes: &[u8] = if shape(kind) == Shape::Bytes { p } else { &[] };
            a.encode(r.tsc, kind, r.id(), bytes, &f, &mut sink).unwrap();
            pos = b.encode_into(r, p, &mut fast, pos).unwrap();
        }
        let mut c = EventEncoder::new(1 << 40);
        let mut fpos = 0;
        let mut func = [0u8; 128];
        for (r, _) in recs
            .iter()
            .filter(|(r, _)| r.kind().is_some_and(EventKind::is_function))
        {
            fpos = c.encode_function(r, &mut func, fpos).unwrap();
        }
        let mut d = EventEncoder::new(1 << 40);
        let mut gpos = 0;
        let mut general = [0u8; 128];
        for (r, _) in recs
            .iter()
            .filter(|(r, _)| r.kind().is_some_and(EventKind::is_function))
        {
            gpos = d.encode_into(r, &[], &mut general, gpos).unwrap();
        }
        assert_eq!(
            &func[..fpos],
            &general[..gpos],
            "the function fast path writes the same bytes"
        );
        let n = sink.len();
        assert_eq!(&fast[..pos], &slow[..n]);
        assert_eq!(
            b.encode_into(&recs[0].0, &[], &mut fast, 130),
            None,
            "refuses without room"
        );
    }

    #[test]
    fn function_fast_path_writes_the_varints_of_every_length() {
        // Tags and deltas around every varint length boundary (1-4 bytes and the 5+ byte fallback),
        // against the byte-at-a-time writer, and back through the decoder.
        let edges = [
            0u64,
            1,
            0x7f,
            0x80,
            0x3fff,
            0x4000,
            0x1f_ffff,
            0x20_0000,
            0xfff_ffff,
            0x1000_0000,
        ];
        for &id in &[
            0u32,
            7,
            8,
            0x7ff,
            0x800,
            0xf_ffff,
            0x10_0000,
            0xff_ffff,
            0x100_0000,
            u32::MAX,
        ] {
            for &delta in &edges {
                for kind in [EventKind::Entry, EventKind::Exit, EventKind::TailExit] {
                    // Ticks that zigzag to `delta`: forwards for even, backwards for odd.
                    let step = unzigzag(delta);
                    let base = 1u64 << 40;
                    let rec = Record::new(base.wrapping_add(step as u64), kind, id);
                    let mut fast = [0u8; MAX_EVENT_LEN];
                    let n = EventEncoder::new(base)
                        .encode_function(&rec, &mut fast, 0)
                        .unwrap();
                    let mut slow = [0u8; MAX_EVENT_LEN];
                    let p = write_varint(&mut slow, 0, tag(kind, id));
                    let m = write_varint(&mut slow, p, delta);
                    assert_eq!(&fast[..n], &slow[..m], "id {id:#x} delta {delta:#x}");
                    let mut back = EventDecoder::new(&fast[..n], base);
                    let e = back.next().unwrap().unwrap();
                    assert!(back.next().is_none());
                    assert_eq!((e.kind, e.id, e.tsc), (kind, id, rec.tsc));
                }
            }
        }
    }

    #[test]
    fn fast_path_decodes_like_the_general_path() {
        // Mixed one- and multi-byte fields, payloads, and garbage tails: the decoder (with its two-byte
        // fast path) must yield exactly what the general varint path yields.
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut rnd = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for _ in 0..200 {
            let len = (rnd() % 64) as usize;
            let mut buf = [0u8; 64];
            for b in buf.iter_mut().take(len) {
                let r = rnd();
                *b = if r % 4 == 0 {
                    r as u8
                } else {
                    (r as u8) & 0x7f
                };
            }
            if buf[0] == grouped::MARK {
                // The grouped layout (tested in grouped.rs), not this one.
                buf[0] = 0;
            }
            let buf = &buf[..len];
            let mut fast = EventDecoder::new(buf, 1000);
            let mut slow = EventDecoder::new(buf, 1000);
            loop {
                let want = if let Some(exit) = slow.take_call_exit() {
                    Some(Ok(exit))
                } else if slow.fields.remaining() == 0 || slow.failed {
                    None
                } else {
                    let r = slow.next_event_slow();
                    slow.failed = r.is_err();
                    Some(r)
                };
                assert_eq!(fast.next(), want, "bytes {buf:02x?}");
                if want.is_none() {
                    break;
                }
            }
        }
    }

    #[test]
    fn decoder_stops_after_an_error() {
        let mut d = EventDecoder::new(&[0x17, 0x02], 0); // kind 7 is Wait: valid; then nothing
        assert!(d.next().unwrap().is_ok());
        assert!(d.next().is_none());
        let mut bad = EventDecoder::new(&[0x80], 0);
        assert_eq!(bad.next(), Some(Err(DecodeError::Truncated)));
        assert_eq!(bad.next(), None);
    }
}
