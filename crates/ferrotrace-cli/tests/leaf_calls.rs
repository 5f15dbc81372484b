//! Leaf calls (format 2.5): the collector writes a function entry followed by its exit as one event.
//! A real trace and the same events written one by one, as a 2.4 writer did, must read the same in
//! every command; a damaged leaf call is reported, not misread. The same for the grouped layout of
//! runs of leaf calls (format 2.6).

mod common;

use std::path::{Path, PathBuf};

use common::{ft, ok, record, scratch, testprog, testprog_mcount, text, trace_chunks};
use ferrotrace_core::builder::{self, Event};
use ferrotrace_core::codec::{EventDecoder, FieldReader, CALL_KIND};
use ferrotrace_core::format::{ChunkHeader, ChunkKind, CHUNK_HEADER_LEN, FILE_HEADER_LEN};
use ferrotrace_core::grouped;
use ferrotrace_core::schema::{EventsHeader, Payload};

/// The leaf-call events among an Events payload's events: walks the tags the way the format lays
/// them out (function events only: the traces here have no others), or the grouped layout's events.
fn leaf_calls_in(payload: &[u8]) -> usize {
    let mut f = FieldReader::new(payload);
    EventsHeader::decode(&mut f).unwrap();
    let body = f.rest();
    if body.first() == Some(&grouped::MARK) {
        let (mut pos, mut tsc, mut n) = (1, 0, 0);
        while pos < body.len() {
            let e = grouped::decode(body, &mut pos, tsc).unwrap();
            tsc = e.exit.unwrap_or(e.tsc);
            n += e.exit.is_some() as usize;
        }
        return n;
    }
    let mut n = 0;
    while f.remaining() > 0 {
        let tag = f.varint().unwrap();
        assert!(tag & 15 <= 2 || tag & 15 == CALL_KIND, "a function event");
        f.varint().unwrap(); // delta
        if tag & 15 == CALL_KIND {
            f.varint().unwrap(); // duration
            n += 1;
        }
    }
    n
}

/// `trace` rewritten as a 2.4 writer wrote it: every Events chunk's events one by one (through
/// `builder::encode_events`, which does not fuse), the file header saying 2.4. Returns the copy's
/// path and the number of leaf calls the original held.
fn written_one_by_one(trace: &Path) -> (PathBuf, usize) {
    let b = std::fs::read(trace).unwrap();
    let mut out = b[..FILE_HEADER_LEN].to_vec();
    out[10..12].copy_from_slice(&4u16.to_le_bytes());
    let mut leaf_calls = 0;
    for (at, p, len) in trace_chunks(&b) {
        let h = ChunkHeader::decode(b[at..p].try_into().unwrap());
        let payload = &b[p..p + len];
        if h.kind != ChunkKind::Events as u32 {
            out.extend_from_slice(&h.encode());
            out.extend_from_slice(payload);
            continue;
        }
        leaf_calls += leaf_calls_in(payload);
        let mut f = FieldReader::new(payload);
        let head = EventsHeader::decode(&mut f).unwrap();
        let events: Vec<Event> = EventDecoder::new(f.rest(), head.base_ticks)
            .map(|e| {
                let e = e.unwrap();
                Event {
                    ticks: e.tsc,
                    kind: e.kind,
                    id: e.id,
                    payload: e.payload.to_vec(),
                    fields: e.fields,
                }
            })
            .collect();
        assert_eq!(events.len() as u64, head.count, "a leaf call counts as two");
        let mut p = Vec::new();
        builder::encode_events(head.tid, head.seq, &events, &mut p);
        out.extend_from_slice(&ChunkHeader::for_payload(ChunkKind::Events, h.seq, &p).encode());
        out.extend_from_slice(&p);
    }
    let copy = trace.with_extension("v2_3.data");
    std::fs::write(&copy, out).unwrap();
    (copy, leaf_calls)
}

/// What every command prints that must not depend on how the events were written.
fn views(trace: &Path) -> Vec<(&'static str, String)> {
    let t = trace.to_str().unwrap();
    // Not the file's size or bytes per event: those differ.
    let events = |info: String| {
        let v: serde_json::Value = serde_json::from_str(&info).unwrap();
        format!("{} {} {}", v["events"], v["lost"], v["threads"])
    };
    vec![
        ("report", ok(ft(&["report", "-i", t]))),
        (
            "report -s calls",
            ok(ft(&["report", "-i", t, "-s", "calls"])),
        ),
        ("replay", ok(ft(&["replay", "-i", t]))),
        (
            "dump chrome",
            ok(ft(&["dump", "--format", "chrome", "-i", t])),
        ),
        (
            "dump folded",
            ok(ft(&["dump", "--format", "folded", "-i", t])),
        ),
        ("info events", events(ok(ft(&["info", "--json", "-i", t])))),
    ]
}

/// The Events chunks of `trace` in the grouped layout (format 2.6).
fn grouped_chunks(trace: &Path) -> usize {
    let b = std::fs::read(trace).unwrap();
    trace_chunks(&b)
        .into_iter()
        .filter(|&(at, p, len)| {
            let h = ChunkHeader::decode(b[at..p].try_into().unwrap());
            let mut f = FieldReader::new(&b[p..p + len]);
            h.kind == ChunkKind::Events as u32
                && EventsHeader::decode(&mut f).is_ok()
                && f.rest().first() == Some(&grouped::MARK)
        })
        .count()
}

fn assert_reads_as_written_one_by_one(dir: &Path, program: &Path, args: &[&str]) -> PathBuf {
    let (out, trace) = record(dir, &[], program, args);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let (copy, leaf_calls) = written_one_by_one(&trace);
    assert!(leaf_calls > 10, "the trace holds leaf calls ({leaf_calls})");
    let fused_len = std::fs::metadata(&trace).unwrap().len();
    let copy_len = std::fs::metadata(&copy).unwrap().len();
    // (The grouped layout trades bytes for the collector's time: this holds for the varint one.)
    assert!(
        grouped_chunks(&trace) > 0 || copy_len >= fused_len + leaf_calls as u64,
        "each leaf call saves a tag at least: {fused_len} against {copy_len} bytes"
    );
    for ((what, fused), (_, one_by_one)) in views(&trace).into_iter().zip(views(&copy)) {
        assert!(!fused.is_empty(), "{what}");
        assert_eq!(fused, one_by_one, "{what} differs between the encodings");
    }
    trace
}

#[test]
fn leaf_calls_read_as_their_entry_and_exit_in_every_command() {
    let dir = scratch("leaf_calls_xray");
    assert_reads_as_written_one_by_one(&dir, &testprog("calltree"), &[]);
    let dir = scratch("leaf_calls_mcount");
    assert_reads_as_written_one_by_one(&dir, &testprog_mcount("fib"), &["20"]);
}

/// Threads calling leaf functions in loops: their chunks are written in the grouped layout (format
/// 2.6), and read as the same events written one by one in every command.
#[test]
fn grouped_chunks_read_as_their_events_in_every_command() {
    let dir = scratch("leaf_calls_grouped");
    let trace = assert_reads_as_written_one_by_one(&dir, &testprog("threads"), &[]);
    assert!(grouped_chunks(&trace) > 0, "the trace holds grouped chunks");
}

/// A leaf call cut inside its duration, with the chunk's checksum made right again: every command
/// warns with one line naming the file, where and what is wrong, and exits with status 1.
#[test]
fn a_damaged_leaf_call_is_reported() {
    let dir = scratch("leaf_calls_damaged");
    let (out, trace) = record(&dir, &[], &testprog_mcount("fib"), &["12"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let mut b = std::fs::read(&trace).unwrap();
    // The first Events chunk's first leaf call: its duration's first byte gets its "more follows" bit
    // and the chunk ends after it.
    let (h, range) = trace_chunks(&b)
        .into_iter()
        .map(|(at, p, len)| {
            (
                ChunkHeader::decode(b[at..p].try_into().unwrap()),
                p..p + len,
            )
        })
        .find(|(h, r)| h.kind == ChunkKind::Events as u32 && leaf_calls_in(&b[r.clone()]) > 0)
        .expect("an Events chunk with a leaf call");
    let mut f = FieldReader::new(&b[range.clone()]);
    EventsHeader::decode(&mut f).unwrap();
    let cut = loop {
        let tag = f.varint().unwrap();
        f.varint().unwrap();
        if tag & 15 == CALL_KIND {
            break range.end - f.remaining();
        }
    };
    b[cut] |= 0x80;
    assert_cut_chunk_is_reported(&dir, b, h, range, cut + 1);
}

/// The first grouped Events chunk of a trace of `threads` cut inside its first event's delta, with
/// its checksum made right again: reported as for the varint layout.
#[test]
fn a_damaged_grouped_chunk_is_reported() {
    let dir = scratch("leaf_calls_grouped_damaged");
    let (out, trace) = record(&dir, &[], &testprog("threads"), &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let b = std::fs::read(&trace).unwrap();
    let (h, range, events_at) = trace_chunks(&b)
        .into_iter()
        .find_map(|(at, p, len)| {
            let h = ChunkHeader::decode(b[at..p].try_into().unwrap());
            let mut f = FieldReader::new(&b[p..p + len]);
            let events = EventsHeader::decode(&mut f).ok()?.count;
            let at = p + len - f.rest().len();
            (h.kind == ChunkKind::Events as u32 && events > 0 && b[at] == grouped::MARK)
                .then_some((h, p..p + len, at))
        })
        .expect("a grouped Events chunk");
    // The mark, the first control byte and one byte: every event has a delta and an id of a byte
    // at least after its control byte, so the event is cut short.
    assert_cut_chunk_is_reported(&dir, b, h, range, events_at + 3);
}

/// `b` with the chunk `h` (payload `range`) cut to end at byte `end` and its checksum made right:
/// every command warns with one line naming the file, where and what is wrong (a field cut short),
/// exits with status 1, and does not panic.
fn assert_cut_chunk_is_reported(
    dir: &Path,
    mut b: Vec<u8>,
    h: ChunkHeader,
    range: std::ops::Range<usize>,
    end: usize,
) {
    let mut h = ChunkHeader {
        len: (end - range.start) as u32,
        ..h
    };
    h.crc = h.checksum(&b[range.start..end]);
    let header_at = range.start - CHUNK_HEADER_LEN;
    b[header_at..range.start].copy_from_slice(&h.encode());
    b.drain(end..range.end);
    let bad = dir.join("bad.data");
    std::fs::write(&bad, &b).unwrap();
    let t = bad.to_str().unwrap();
    for args in [
        &["report", "-i", t][..],
        &["replay", "-i", t],
        &["dump", "--format", "chrome", "-i", t],
    ] {
        let out = ft(args);
        let err = text(&out.stderr);
        assert!(!out.status.success(), "{args:?}: {err}");
        assert!(
            err.contains("bad.data: corrupt chunk at byte")
                && err.contains("payload ends in the middle of a field"),
            "{args:?}: {err}"
        );
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
}
