//! PROTOTYPE (issue 21, not a format): a chunk of function events as group varints, one control
//! byte per event (kind code, then the byte lengths of its delta, id and duration, 2 bits each),
//! then those values in 1–4 bytes each, stored 4 bytes at a time. The exit of the innermost open
//! function carries no id (the decoder would follow the stack). Encoding only, to measure its cost.

use crate::record::Record;

/// A record word without the CPU some records carry in bits 48-63 (live mode).
const WITHOUT_CPU: u64 = 0x0000_ffff_ffff_ffff;
/// An Exit's kind in a record word.
const EXIT: u64 = 1 << 32;
/// Deepest stack followed; deeper chunks fall back.
const STACK: usize = 1 << 12;
const LEAF_RUNS: bool = true;

/// The length code (bytes − 1) of a value below 2^32.
#[inline(always)]
fn len_code(v: u32) -> usize {
    (31 - (v | 1).leading_zeros() as usize) >> 3
}

#[inline(always)]
fn put4(buf: &mut [u8], at: usize, v: u32) {
    buf[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

/// Encodes `records` into `out[0..len]` and returns `len`, following the calls in `stack`/`depth`;
/// `None` if the chunk holds anything but entries and exits, an exit that is not of the innermost
/// open function, a delta or duration of 2^32 ticks or more, or a stack deeper than 4096.
pub fn encode_group(
    records: &[Record],
    out: &mut Vec<u8>,
    stack: &mut [u32; STACK],
    depth: &mut usize,
) -> Option<usize> {
    const PREFETCH_AHEAD: usize = 32;
    let worst = records.len() * 13 + 16;
    if out.len() < worst {
        out.resize(worst, 0);
    }
    let buf = &mut out[..];
    let n = records.len();
    let mut prev = records.first().map_or(0, |r| r.tsc);
    let mut pos = 0;
    let mut d = *depth;
    let mut i = 0;
    let mut general = 0;
    while i < n {
        // Leaf calls one after the other: the common case, without the general path's selects.
        while LEAF_RUNS && i + 1 < n {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: a prefetch never faults.
            unsafe {
                use core::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
                _mm_prefetch::<_MM_HINT_T0>(
                    records.as_ptr().wrapping_add(i + PREFETCH_AHEAD).cast(),
                );
            }
            // SAFETY: i + 1 < n.
            let (e, x) = unsafe { (*records.get_unchecked(i), *records.get_unchecked(i + 1)) };
            let ew = e.word & WITHOUT_CPU;
            let delta = e.tsc.wrapping_sub(prev);
            let dur = x.tsc.wrapping_sub(e.tsc);
            if ew >> 32 != 0 || x.word & WITHOUT_CPU != ew | EXIT || (delta | dur) >> 32 != 0 {
                break;
            }
            let (delta, id, dur) = (delta as u32, ew as u32, dur as u32);
            let (dl, il, ul) = (len_code(delta), len_code(id), len_code(dur));
            // SAFETY: out holds 13 bytes per record past pos at most used: 1 + 3 × 4 here.
            unsafe {
                let b = buf.as_mut_ptr();
                *b.add(pos) = (2 | dl << 2 | il << 4 | ul << 6) as u8;
                b.add(pos + 1).cast::<u32>().write_unaligned(delta.to_le());
                let p = pos + 2 + dl;
                b.add(p).cast::<u32>().write_unaligned(id.to_le());
                let p = p + 1 + il;
                b.add(p).cast::<u32>().write_unaligned(dur.to_le());
                pos = p + 1 + ul;
            }
            prev = x.tsc;
            i += 2;
        }
        if i >= n {
            break;
        }
        // Not a run of leaf calls: past 64 such events, a chunk with more than one in 8 is left to
        // the varint encoder (its general path is the cheaper one there).
        general += 1;
        if general > 64 && general * 8 > i {
            return None;
        }
        #[cfg(target_arch = "x86_64")]
        // SAFETY: a prefetch never faults.
        unsafe {
            use core::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
            _mm_prefetch::<_MM_HINT_T0>(records.as_ptr().wrapping_add(i + PREFETCH_AHEAD).cast());
        }
        let r = records[i];
        let w = r.word & WITHOUT_CPU;
        let kind = w >> 32;
        if kind > 2 {
            return None;
        }
        let id = w as u32;
        if kind == 2 || (kind == 1 && (d == 0 || stack[d - 1] != id)) {
            // A tail exit, or an exit not of the innermost open function: code 3, its id explicit,
            // bit 6 telling a tail exit; the stack pops the innermost frame if the id is its.
            let delta = r.tsc.wrapping_sub(prev);
            if delta >> 32 != 0 {
                return None;
            }
            let (delta, dl, il) = (delta as u32, len_code(delta as u32), len_code(id));
            buf[pos] = (3 | dl << 2 | il << 4 | ((kind == 2) as usize) << 6) as u8;
            put4(buf, pos + 1, delta);
            put4(buf, pos + 2 + dl, id);
            pos += 3 + dl + il;
            if d > 0 && stack[d - 1] == id {
                d -= 1;
            }
            prev = r.tsc;
            i += 1;
            continue;
        }
        let next = records.get(i + 1).copied().unwrap_or(Record {
            tsc: 0,
            word: u64::MAX,
        });
        let leaf = kind == 0 && next.word & WITHOUT_CPU == w | EXIT && next.tsc >= r.tsc;
        let delta = r.tsc.wrapping_sub(prev);
        let dur = next.tsc.wrapping_sub(r.tsc);
        if (delta | if leaf { dur } else { 0 }) >> 32 != 0 {
            return None;
        }
        let is_exit = kind == 1;
        if is_exit && (d == 0 || stack[d - 1] != id) {
            return None;
        }
        let is_push = !is_exit && !leaf;
        if is_push && d == STACK {
            return None;
        }
        let (delta, dur) = (delta as u32, dur as u32);
        let (dl, il, ul) = (len_code(delta), len_code(id), len_code(dur));
        // Kind code: 0 entry, 1 exit of the innermost open function, 2 leaf call.
        let code = if leaf { 2 } else { kind as usize };
        buf[pos] = (code | dl << 2 | il << 4 | ul << 6) as u8;
        let mut p = pos + 1;
        put4(buf, p, delta);
        p += dl + 1;
        put4(buf, p, id);
        p += if is_exit { 0 } else { il + 1 };
        put4(buf, p, dur);
        p += if leaf { ul + 1 } else { 0 };
        pos = p;
        stack[d & (STACK - 1)] = id;
        d = d + is_push as usize - is_exit as usize;
        prev = if leaf { next.tsc } else { r.tsc };
        i += 1 + leaf as usize;
    }
    *depth = d;
    Some(pos)
}
