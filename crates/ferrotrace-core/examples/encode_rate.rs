//! The collector's data path per event, on a real trace's function events: what `bench/collector.sh`
//! runs (issue 21 item 2). Not a test of correctness (the unit tests are), and not the traced thread's
//! cost (bench/real.sh, bench/xray.sh).
//!
//! ```text
//! encode_rate TRACE [EVENTS=200000] [ROUNDS=15]
//! ```
//!
//! Reads up to EVENTS function events of TRACE (a ferrotrace trace; other kinds are left out) back into
//! the 16-byte records the hot path stores, one thread's in chunks of the default chunk size (64 KiB,
//! 4096 records), then, ROUNDS times each, interleaved, and prints the median ns per event and events
//! per second of:
//!
//! * `textbook`: a LEB128 loop writing one byte at a time (tag, then delta), the usual varint writer;
//! * `encode`: `writer::encode_events`;
//! * `encode+follow`: `writer::encode_events_following`, what the collector runs (it also follows
//!   each thread's calls for the RunningAtStart chunk);
//! * `collector`: that, framed as chunks (checksum included) and written to a file under
//!   `$OUT` (default: the system's temporary directory), as the collector writes them, flushed every
//!   64 chunks.
//!
//! The records take EVENTS × 16 bytes (3.2 MB by default: in the cache, as a chunk the collector takes
//! is, just written; with millions of events they stream from memory and the figures double). In a
//! traced process the chunk was written by another core, which costs differently: these are the data
//! path's figures, not the collector's share of a traced process (bench/real.sh, perf).

use std::io::BufWriter;
use std::time::Instant;

use ferrotrace_core::codec::{zigzag, EventDecoder, FieldReader};
use ferrotrace_core::format::{ChunkHeader, ChunkKind, CHUNK_HEADER_LEN, FILE_HEADER_LEN};
use ferrotrace_core::record::Record;
use ferrotrace_core::running::RunningAtStart;
use ferrotrace_core::schema::{EventsHeader, Payload};
use ferrotrace_core::writer::{encode_events, encode_events_following, TraceWriter};

/// Records per chunk at the runtime's default chunk size (64 KiB).
const CHUNK_RECORDS: usize = 4096;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(path) = args.first() else {
        eprintln!("usage: encode_rate TRACE [EVENTS=200000] [ROUNDS=15]");
        std::process::exit(2);
    };
    let number = |i: usize, default: usize| {
        args.get(i).map_or(default, |s| {
            s.parse().unwrap_or_else(|_| {
                eprintln!("encode_rate: {s:?} is not a number");
                std::process::exit(2)
            })
        })
    };
    let (limit, rounds) = (number(1, 200_000), number(2, 15));
    let records = match function_records(path, limit) {
        Ok(r) if !r.is_empty() => r,
        Ok(_) => {
            eprintln!("encode_rate: {path} holds no function events");
            std::process::exit(1)
        }
        Err(e) => {
            eprintln!("encode_rate: cannot read {path}: {e}");
            std::process::exit(1)
        }
    };
    let out_dir = std::env::var_os("OUT").map_or_else(std::env::temp_dir, Into::into);
    let out_path = out_dir.join(format!("encode-rate-{}.data", std::process::id()));
    let n = records.len();
    let mut times: [Vec<f64>; 4] = Default::default();
    let mut bytes = 0;
    let mut scratch = Vec::new();
    for _ in 0..rounds {
        let t = Instant::now();
        let mut sum = 0;
        for c in records.chunks(CHUNK_RECORDS) {
            sum += textbook(c, &mut scratch);
        }
        times[0].push(t.elapsed().as_nanos() as f64 / n as f64);
        std::hint::black_box(sum);

        let t = Instant::now();
        for c in records.chunks(CHUNK_RECORDS) {
            std::hint::black_box(encode_events(1, 0, c, &mut scratch));
        }
        times[1].push(t.elapsed().as_nanos() as f64 / n as f64);

        let t = Instant::now();
        let mut running = RunningAtStart::default();
        for c in records.chunks(CHUNK_RECORDS) {
            std::hint::black_box(encode_events_following(1, 0, c, &mut scratch, &mut running));
        }
        times[2].push(t.elapsed().as_nanos() as f64 / n as f64);

        let file = std::fs::File::create(&out_path).expect("the output file");
        let mut w = TraceWriter::new(BufWriter::with_capacity(1 << 20, file)).expect("write");
        let t = Instant::now();
        let mut running = RunningAtStart::default();
        for (i, c) in records.chunks(CHUNK_RECORDS).enumerate() {
            let (_, range) = encode_events_following(1, i as u32, c, &mut scratch, &mut running);
            w.chunk(ChunkKind::Events, &scratch[range]).expect("write");
            if i % 64 == 63 {
                w.flush().expect("write");
            }
        }
        w.flush().expect("write");
        times[3].push(t.elapsed().as_nanos() as f64 / n as f64);
        bytes = w.bytes_written();
    }
    let _ = std::fs::remove_file(&out_path);
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    println!(
        "{n} function events of {path}, {:.2} bytes/event, median of {rounds} rounds",
        bytes as f64 / n as f64
    );
    println!(
        "{:<14} {:>10} {:>14} {:>12}",
        "path", "ns/event", "M events/s", "vs textbook"
    );
    let base = median(&mut times[0].clone());
    for (name, t) in ["textbook", "encode", "encode+follow", "collector"]
        .iter()
        .zip(times.iter_mut())
    {
        let m = median(t);
        println!("{name:<14} {m:>10.2} {:>14.1} {:>11.2}x", 1e3 / m, base / m);
    }
}

/// The textbook LEB128 writer, one byte at a time: the function events of `records` as tag and delta
/// varints into `out` (same bytes as the runtime's encoder). Returns the length.
fn textbook(records: &[Record], out: &mut Vec<u8>) -> usize {
    out.clear();
    let mut prev = records.first().map_or(0, |r| r.tsc);
    for r in records {
        let tag = (r.word as u32 as u64) << 4 | (r.word >> 32 & 0xff);
        let delta = zigzag(r.tsc.wrapping_sub(prev) as i64);
        prev = r.tsc;
        for mut v in [tag, delta] {
            while v >= 0x80 {
                out.push(v as u8 | 0x80);
                v >>= 7;
            }
            out.push(v as u8);
        }
    }
    out.len()
}

/// Up to `limit` function events of the trace at `path`, as records, thread after thread in the
/// file's order of chunks.
fn function_records(path: &str, limit: usize) -> std::io::Result<Vec<Record>> {
    let file = std::fs::read(path)?;
    let bad = |what: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, what.to_string());
    let mut at = FILE_HEADER_LEN;
    let mut out = Vec::new();
    while at + CHUNK_HEADER_LEN <= file.len() && out.len() < limit {
        let head: &[u8; CHUNK_HEADER_LEN] = file[at..at + CHUNK_HEADER_LEN].try_into().unwrap();
        let h = ChunkHeader::decode(head);
        let body = file
            .get(at + CHUNK_HEADER_LEN..at + CHUNK_HEADER_LEN + h.len as usize)
            .ok_or_else(|| bad("a chunk runs past the end of the file"))?;
        at += CHUNK_HEADER_LEN + h.len as usize;
        if h.kind != ChunkKind::Events as u32 {
            continue;
        }
        let mut f = FieldReader::new(body);
        let e = EventsHeader::decode(&mut f).map_err(|_| bad("a malformed Events header"))?;
        for ev in EventDecoder::new(f.rest(), e.base_ticks) {
            let ev = ev.map_err(|_| bad("a malformed event"))?;
            if ev.kind.is_function() && out.len() < limit {
                out.push(Record::new(ev.tsc, ev.kind, ev.id));
            }
        }
    }
    Ok(out)
}
