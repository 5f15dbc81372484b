//! Decimal numbers written into byte buffers: the text outputs (replay, Chrome JSON) write one or
//! more per event, and `fmt`'s machinery, or a digit-by-digit loop, cost more than the rest of
//! their work.

/// Appends `v` in decimal, right-aligned with spaces to `width` characters (none for 0).
#[inline]
pub(crate) fn push_u64(out: &mut Vec<u8>, v: u64, width: usize) {
    let mut buf = itoa::Buffer::new();
    let digits = buf.format(v).as_bytes();
    for _ in digits.len()..width {
        out.push(b' ');
    }
    out.extend_from_slice(digits);
}
