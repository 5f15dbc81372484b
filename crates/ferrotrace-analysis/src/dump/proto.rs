//! The protobuf encoding the exporters write by hand (Perfetto's trace packets, pprof's profile):
//! fields appended to a `Vec`, a nested message built in its own buffer and framed by its length.
//! A few lines instead of a code generator.

/// Protobuf's varint (LEB128, the trace format's too), pushed byte by byte into the `Vec`: the trace
/// format's `codec::put_varint` goes through its `Sink` trait, one `memcpy` call per varint, and a
/// Perfetto slice packet writes eight varints: that was a third of the export's instructions.
#[inline]
pub(crate) fn varint(b: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        b.push(v as u8 | 0x80);
        v >>= 7;
    }
    b.push(v as u8);
}

/// A field's key: its number and wire type (0 varint, 2 length-delimited).
#[inline]
fn key(b: &mut Vec<u8>, field: u32, wire: u8) {
    varint(b, (field as u64) << 3 | wire as u64);
}

/// A varint field.
#[inline]
pub(crate) fn fv(b: &mut Vec<u8>, field: u32, v: u64) {
    key(b, field, 0);
    varint(b, v);
}

/// A length-delimited field: bytes, a string, a packed list.
pub(crate) fn fbytes(b: &mut Vec<u8>, field: u32, bytes: &[u8]) {
    key(b, field, 2);
    varint(b, bytes.len() as u64);
    b.extend_from_slice(bytes);
}

/// A message field, its body written by `build`.
pub(crate) fn msg(b: &mut Vec<u8>, field: u32, build: impl FnOnce(&mut Vec<u8>)) {
    let mut inner = Vec::new();
    build(&mut inner);
    fbytes(b, field, &inner);
}
