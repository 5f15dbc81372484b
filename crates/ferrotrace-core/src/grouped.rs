//! The grouped layout of an Events chunk's events (format 2.6): for chunks made of runs of leaf calls.
//!
//! The varint layout ([`crate::codec`]) spends most of the collector's time on a chunk of leaf calls
//! spreading each value into 7-bit groups one byte at a time. Here every event is one control byte —
//! a 2-bit code (0 Entry, 1 Exit, 2 leaf call, 3 TailExit) and the byte length − 1 of its tick delta,
//! its id and (a leaf call's) duration, 2 bits each — then those values little-endian in 1–4 bytes
//! each, which the encoder stores as 4-byte words, advancing by their lengths. A run of leaf calls has
//! its own loop. The events start with [`MARK`] (a tag of kind 15, which no event has: a reader before
//! 2.6 reports such a chunk as damaged); docs/format.md lays it out byte by byte.
//!
//! For: chunks whose events are nearly all runs of leaf calls (zstd's). Not for: chunks with other
//! kinds of events, or whose leaf calls alternate with other entries and exits (Lua's): there the
//! branches between the run and the rest cost more than the varint's one-byte fast path, so the
//! encoder gives such a chunk back to the varint layout ([`encode`] returns `None`).

use crate::codec::DecodeError;
use crate::record::EventKind;
#[cfg(feature = "std")]
use crate::record::{prefetch_ahead, Record, EXIT_IN_WORD, WORD_WITHOUT_CPU};

/// The first byte of a chunk's events in the grouped layout.
pub const MARK: u8 = 0x0f;

/// Control codes.
const ENTRY: u8 = 0;
const EXIT: u8 = 1;
const CALL: u8 = 2;
const TAIL_EXIT: u8 = 3;

/// One decoded event of the grouped layout: the tick (the entry's for a leaf call), its kind (Entry
/// for a leaf call), its id, and a leaf call's exit tick.
pub struct Grouped {
    /// Ticks of the event (of the entry, for a leaf call).
    pub tsc: u64,
    /// Entry (also for a leaf call), Exit or TailExit.
    pub kind: EventKind,
    /// Function id.
    pub id: u32,
    /// A leaf call's exit ticks.
    pub exit: Option<u64>,
}

/// The value of `len` (1–4) bytes at `buf[at..]`, little-endian.
#[inline(always)]
fn value(buf: &[u8], at: usize, len: usize) -> Result<u32, DecodeError> {
    if let Some(w) = buf.get(at..at + 4) {
        let v = u32::from_le_bytes([w[0], w[1], w[2], w[3]]);
        return Ok(if len == 4 {
            v
        } else {
            v & ((1 << (8 * len)) - 1)
        });
    }
    let bytes = buf.get(at..at + len).ok_or(DecodeError::Truncated)?;
    Ok(bytes.iter().rev().fold(0u32, |v, &b| v << 8 | b as u32))
}

/// Decodes the event at `buf[*pos..]` whose delta is against `prev` ticks, advancing `*pos`; nothing
/// changes on an error (truncated, or a TailExit or Exit with duration bits set).
#[inline(always)]
pub fn decode(buf: &[u8], pos: &mut usize, prev: u64) -> Result<Grouped, DecodeError> {
    let at = *pos;
    let control = *buf.get(at).ok_or(DecodeError::Truncated)?;
    let code = control & 3;
    let (dl, il, ul) = (
        (control >> 2 & 3) as usize + 1,
        (control >> 4 & 3) as usize + 1,
        (control >> 6) as usize + 1,
    );
    if code != CALL && ul != 1 {
        return Err(DecodeError::BadValue);
    }
    let delta = value(buf, at + 1, dl)?;
    let id = value(buf, at + 1 + dl, il)?;
    let tsc = prev.wrapping_add(delta as u64);
    let mut end = at + 1 + dl + il;
    let (kind, exit) = match code {
        ENTRY => (EventKind::Entry, None),
        EXIT => (EventKind::Exit, None),
        TAIL_EXIT => (EventKind::TailExit, None),
        _ => {
            let duration = value(buf, end, ul)?;
            end += ul;
            (EventKind::Entry, Some(tsc.wrapping_add(duration as u64)))
        }
    };
    *pos = end;
    Ok(Grouped {
        tsc,
        kind,
        id,
        exit,
    })
}

/// The length code (bytes − 1) of `v`.
#[cfg(feature = "std")]
#[inline(always)]
fn len_code(v: u32) -> usize {
    (31 - (v | 1).leading_zeros() as usize) >> 3
}

/// Stores `v` as 4 bytes at `buf[at..]` (the bytes past its length are overwritten by what follows).
///
/// # Safety
/// `at + 4 <= buf.len()`: [`encode`] checks once that `out` has [`MAX_PER_RECORD`] bytes per record,
/// and no event stores past 13 bytes from its start, 13 per record at most in all.
#[cfg(feature = "std")]
#[inline(always)]
unsafe fn put4(buf: &mut [u8], at: usize, v: u32) {
    debug_assert!(at + 4 <= buf.len());
    // SAFETY: in bounds (above); an unaligned store of 4 bytes.
    unsafe {
        buf.as_mut_ptr()
            .add(at)
            .cast::<u32>()
            .write_unaligned(v.to_le())
    }
}

/// Stores the control byte `c` at `buf[at]` (same safety as [`put4`]).
#[cfg(feature = "std")]
#[inline(always)]
unsafe fn put1(buf: &mut [u8], at: usize, c: usize) {
    debug_assert!(at < buf.len());
    // SAFETY: in bounds (above).
    unsafe { *buf.get_unchecked_mut(at) = c as u8 }
}

/// The most bytes [`encode`] writes per record, [`MARK`] aside: a lone event's control byte and three
/// 4-byte stores.
#[cfg(feature = "std")]
pub const MAX_PER_RECORD: usize = 13;

/// Encodes `records` (one thread's chunk of function entries and exits, the CPU bits cleared or not)
/// in the grouped layout at `out[pos..]`, the first delta against `base` ticks; returns the end and
/// the number of events (a leaf call counts two), and pushes the (kind, id) of every entry and exit
/// that is not part of a leaf call onto `followed` (for [`crate::running::RunningAtStart`]). `None`
/// — with bytes written past `pos` but nothing else — when the chunk holds another kind of record, a
/// delta or duration of 2^32 ticks or more (an earlier stamp), or, past 16 of them, more than one
/// event in 8 outside runs of leaf calls. `out` must have `MAX_PER_RECORD × records.len() + 1`
/// bytes past `pos`.
#[cfg(feature = "std")]
pub fn encode(
    records: &[Record],
    base: u64,
    out: &mut [u8],
    pos: usize,
    followed: &mut std::vec::Vec<(u64, u32)>,
) -> Option<(usize, u64)> {
    let n = records.len();
    assert!(
        out.len() >= pos + 1 + MAX_PER_RECORD * n,
        "room for the grouped layout"
    );
    out[pos] = MARK;
    let mut pos = pos + 1;
    let mut prev = base;
    let mut i = 0;
    let mut others = 0;
    while i < n {
        // Runs of leaf calls: two records, one comparison, three stores.
        while i + 1 < n {
            prefetch_ahead(records, i);
            // SAFETY: i + 1 < n.
            let (entry, exit) =
                unsafe { (*records.get_unchecked(i), *records.get_unchecked(i + 1)) };
            let word = entry.word & WORD_WITHOUT_CPU;
            let delta = entry.tsc.wrapping_sub(prev);
            let duration = exit.tsc.wrapping_sub(entry.tsc);
            if word >> 32 != 0
                || exit.word & WORD_WITHOUT_CPU != word | EXIT_IN_WORD
                || (delta | duration) >> 32 != 0
            {
                break;
            }
            let (delta, id, duration) = (delta as u32, word as u32, duration as u32);
            let (dl, il, ul) = (len_code(delta), len_code(id), len_code(duration));
            let (id_at, duration_at) = (pos + 2 + dl, pos + 3 + dl + il);
            // SAFETY: at most 13 bytes from pos for these two records (put4).
            unsafe {
                put1(out, pos, CALL as usize | dl << 2 | il << 4 | ul << 6);
                put4(out, pos + 1, delta);
                put4(out, id_at, id);
                put4(out, duration_at, duration);
            }
            pos = duration_at + 1 + ul;
            prev = exit.tsc;
            i += 2;
        }
        if i >= n {
            break;
        }
        others += 1;
        if others > 16 && others * 8 > i {
            return None;
        }
        let r = records[i];
        let word = r.word & WORD_WITHOUT_CPU;
        let kind = word >> 32;
        let code = match kind {
            0 => ENTRY,
            1 => EXIT,
            2 => TAIL_EXIT,
            _ => return None,
        };
        let delta = r.tsc.wrapping_sub(prev);
        if delta >> 32 != 0 {
            return None;
        }
        let (delta, id) = (delta as u32, word as u32);
        let (dl, il) = (len_code(delta), len_code(id));
        // An entry whose exit follows is a leaf call whose duration did not fit (else the run took
        // it): written as two events.
        // SAFETY: at most 9 bytes from pos for this record (put4).
        unsafe {
            put1(out, pos, code as usize | dl << 2 | il << 4);
            put4(out, pos + 1, delta);
            put4(out, pos + 2 + dl, id);
        }
        pos += 3 + dl + il;
        followed.push((kind, id));
        prev = r.tsc;
        i += 1;
    }
    Some((pos, n as u64))
}

#[cfg(all(test, feature = "std"))]
pub(crate) mod tests {
    use super::MARK;
    use crate::codec::{DecodeError, EventDecoder, FieldReader};
    use crate::record::{EventKind, Record};
    use crate::running::RunningAtStart;
    use crate::schema::{EventsHeader, Payload};
    use crate::writer::{encode_events, encode_events_following};
    use std::vec::Vec;

    /// The events of an encoded Events payload, as (ticks, kind, id), and whether they were grouped.
    fn decoded(payload: &[u8]) -> (Vec<(u64, EventKind, u32)>, bool) {
        let mut f = FieldReader::new(payload);
        let head = EventsHeader::decode(&mut f).unwrap();
        let body = f.rest();
        let events: Vec<_> = EventDecoder::new(body, head.base_ticks)
            .map(|e| e.map(|e| (e.tsc, e.kind, e.id)).unwrap())
            .collect();
        assert_eq!(events.len() as u64, head.count, "the header's count");
        (events, body.first() == Some(&MARK))
    }

    /// The events of an encoded Events payload through the reader's fast path (`function_run`, then
    /// `next` where it stops), a leaf call as its entry and its exit.
    pub(crate) fn decoded_in_runs(payload: &[u8]) -> Vec<(u64, EventKind, u32)> {
        let mut f = FieldReader::new(payload);
        let head = EventsHeader::decode(&mut f).unwrap();
        let mut d = EventDecoder::new(f.rest(), head.base_ticks);
        let mut out = Vec::new();
        loop {
            d.function_run(|t, kind, id, exit| {
                out.push((t, kind, id));
                if let Some(x) = exit {
                    out.push((x, EventKind::Exit, id));
                }
            });
            match d.next() {
                Some(e) => {
                    let e = e.unwrap();
                    out.push((e.tsc, e.kind, e.id));
                }
                None => return out,
            }
        }
    }

    /// A thread's chunk: runs of leaf calls (short and long deltas, ids and durations), with some
    /// entries, exits and tail exits between them, `others_in_8` in 8 of the places.
    fn chunk(rnd: &mut impl FnMut() -> u64, n: usize, others_in_8: u64) -> Vec<Record> {
        let mut t = 1u64 << 40;
        let mut out = Vec::new();
        let value = |r: u64| match r % 4 {
            0 => r >> 8 & 0x7f,
            1 => r >> 8 & 0x3fff,
            2 => r >> 8 & 0xff_ffff,
            _ => r >> 8 & 0xffff_ffff,
        };
        while out.len() < n {
            let r = rnd();
            let id = value(rnd()) as u32;
            t += value(rnd());
            if r % 8 < others_in_8 {
                let kind =
                    [EventKind::Entry, EventKind::Exit, EventKind::TailExit][(r >> 3) as usize % 3];
                out.push(Record::new(t, kind, id));
            } else {
                out.push(Record::new(t, EventKind::Entry, id));
                t += value(rnd());
                out.push(Record::new(t, EventKind::Exit, id));
            }
        }
        out
    }

    fn rng(mut seed: u64) -> impl FnMut() -> u64 {
        move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        }
    }

    #[test]
    fn chunks_decode_to_their_records_in_either_layout() {
        let mut rnd = rng(0x9e37_79b9_7f4a_7c15);
        let (mut grouped, mut varint) = (0, 0);
        let mut out = Vec::new();
        for round in 0..400 {
            let n = 1 + (rnd() % 600) as usize;
            let mut records = chunk(&mut rnd, n, round % 4);
            match round % 5 {
                // Another kind of record, a stamp earlier than the one before, a delta of 2^32 ticks.
                1 => records.insert(n / 2, Record::new(records[n / 2].tsc, EventKind::Wait, 9)),
                2 => records[n / 2].tsc -= 1 << 39,
                3 => {
                    for r in &mut records[n / 2..] {
                        r.tsc += 1 << 32;
                    }
                }
                _ => {}
            }
            let want: Vec<_> = records
                .iter()
                .map(|r| (r.tsc, r.kind().unwrap(), r.id()))
                .collect();
            let (counts, range) = encode_events(3, round as u32, &records, &mut out);
            let (events, was_grouped) = decoded(&out[range.clone()]);
            assert_eq!(events, want, "round {round}");
            assert_eq!(decoded_in_runs(&out[range]), want, "round {round}, in runs");
            assert_eq!(counts.events, records.len() as u64);
            if was_grouped {
                grouped += 1;
            } else {
                varint += 1;
            }
        }
        // Both layouts were exercised: runs of leaf calls grouped, the rest given back.
        assert!(
            grouped > 50 && varint > 50,
            "{grouped} grouped, {varint} varint"
        );
    }

    #[test]
    fn following_the_calls_finds_the_same_in_either_layout() {
        // Exits of functions entered before the chunk (3, then 1), among runs of leaf calls.
        let mut records = Vec::new();
        let mut t = 100;
        for id in 0..40 {
            records.push(Record::new(t, EventKind::Entry, id));
            records.push(Record::new(t + 5, EventKind::Exit, id));
            t += 10;
        }
        records.push(Record::new(t, EventKind::Exit, 3));
        records.push(Record::new(t + 1, EventKind::Entry, 8));
        records.push(Record::new(t + 2, EventKind::Entry, 9));
        records.push(Record::new(t + 3, EventKind::TailExit, 9));
        records.push(Record::new(t + 4, EventKind::Exit, 8));
        records.push(Record::new(t + 5, EventKind::Exit, 1));
        let mut out = Vec::new();
        let mut running = RunningAtStart::default();
        let (_, range) = encode_events_following(1, 0, &records, &mut out, &mut running);
        let (_, grouped) = decoded(&out[range]);
        assert!(grouped, "a chunk of leaf calls is grouped");
        // 3 and 1 were running when the chunk began (outermost first); 8 and 9 were entered in it.
        assert_eq!(running.outermost_first().collect::<Vec<_>>(), [1, 3]);
    }

    #[test]
    fn a_damaged_grouped_chunk_is_an_error_not_a_misreading() {
        let mut rnd = rng(7);
        let records = chunk(&mut rnd, 200, 0);
        let mut out = Vec::new();
        let (_, range) = encode_events(1, 0, &records, &mut out);
        let payload = out[range].to_vec();
        let mut f = FieldReader::new(&payload);
        let head = EventsHeader::decode(&mut f).unwrap();
        let body = f.rest().to_vec();
        assert_eq!(body[0], MARK);
        // Cut anywhere: the events before the cut, then an error or the end; never a panic, never
        // an event that was not recorded.
        let want: Vec<_> = records.iter().map(|r| (r.tsc, r.id())).collect();
        for cut in 1..body.len() {
            let mut got = Vec::new();
            for e in EventDecoder::new(&body[..cut], head.base_ticks) {
                match e {
                    Ok(e) => got.push((e.tsc, e.id)),
                    Err(e) => assert_eq!(e, DecodeError::Truncated),
                }
            }
            assert_eq!(got[..], want[..got.len()], "cut at {cut}");
            assert!(got.len() < want.len());
        }
        // An exit's control byte with a duration length: refused.
        let mut bad = vec![MARK, 1 | 1 << 6, 5, 7];
        bad.extend_from_slice(&[0; 8]);
        let e: Vec<_> = EventDecoder::new(&bad, 0).collect();
        assert_eq!(e, [Err(DecodeError::BadValue)]);
    }
}
