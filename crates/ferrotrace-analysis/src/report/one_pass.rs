//! `report` in one read of the file: the threads' events counted while the index pass reads and
//! checks each Events chunk ([`crate::reader::Trace::open_with_events`]), instead of the pass reading
//! every byte and the report reading every Events chunk again (about 10 % of `report`'s CPU time on a
//! 418 MB trace of 12 KB chunks: the kernel's copies, a pread per chunk, the chunks read cold).
//!
//! The counts are those of [`super::Report::with_jobs`] on one thread whenever that is sure, and are
//! dropped otherwise ([`OnePass::usable`]): the report then reads the threads again, as always. Being
//! sure takes a trace whose Events chunks came in the order of their numbers, without Samples chunks or
//! samplers (samples need the Samplers chunk, which may follow the events; a sampled run's Session
//! chunk says so before the first event, and the pass then counts nothing), whose function ids are
//! each their own function (the pass counts by id; names, which may tell two ids apart as one
//! function, are known only at the end), with few threads and little memory held by their counts
//! (each counted thread's state stays in memory until the end). A damaged chunk needs nothing more: the pass stops there, as the report's reading
//! does, and the chunks it handed over are those of the readable prefix.
//!
//! Not for commands that merge threads in time order (replay, dump): they need every thread at once.

use std::collections::HashMap;
use std::path::Path;
use std::sync::LazyLock;

use ferrotrace_core::schema::source;

use crate::names::Representatives;
use crate::reader::{EventsChunk, ReadError, Trace};

use super::walk::ThreadCounts;

/// Threads the pass keeps counts for; beyond them it stops counting and the report reads the threads
/// again (each thread's counts are kept until the end: a slot per function it called, a slot per
/// function id it met).
const MAX_THREADS: usize = 64;

/// The memory the threads' counts may hold together; beyond it the pass stops counting, as beyond
/// [`MAX_THREADS`]. Reading the threads one by one holds one thread's counts at a time: the pass must
/// not hold much more (a thread's table of ids goes up to 4 MB for a program of a million functions).
const MAX_HELD_BYTES: usize = 16 << 20;

/// Every id its own function: what the pass counts by, before the trace's names are known.
static EACH_ID_ITS_OWN: LazyLock<Representatives> = LazyLock::new(Representatives::default);

/// One thread's counts: from the pass, or from reading the thread.
pub(super) struct Counted<'a> {
    pub(super) counts: ThreadCounts<'a>,
    /// Events counted.
    pub(super) events: u64,
    /// The read error that ended the thread's events (its later chunks are not counted).
    pub(super) error: Option<ReadError>,
}

/// What the pass counted ([`super::Report::open_counting`]).
#[derive(Default)]
pub struct OnePass {
    threads: HashMap<u32, Counted<'static>>,
    pub(super) tracepoints: HashMap<u32, u64>,
    /// The memory the threads' counts hold ([`ThreadCounts::held_bytes`]).
    held_bytes: usize,
    /// More threads than [`MAX_THREADS`], or more memory than [`MAX_HELD_BYTES`]: nothing counted.
    gave_up: bool,
}

impl OnePass {
    /// Opens the trace at `path`, counting its Events chunks as the index pass reads them.
    pub(super) fn open(path: &Path) -> Result<(Trace, OnePass), ReadError> {
        let mut pass = OnePass::default();
        let trace = Trace::open_with_events(path, |path, chunk| pass.add(path, chunk))?;
        Ok((trace, pass))
    }

    fn add(&mut self, path: &Path, e: EventsChunk<'_>) {
        if self.gave_up {
            return;
        }
        // A sampled run (`record --sample`) says so in its Session chunk, ahead of the events: its
        // Samples chunks come after them, and counts without the samples would be thrown away.
        if e.sources & source::SAMPLES != 0 {
            self.give_up();
            return;
        }
        if !self.threads.contains_key(&e.tid) && self.threads.len() == MAX_THREADS {
            self.give_up();
            return;
        }
        let t = self.threads.entry(e.tid).or_insert_with(|| Counted {
            counts: ThreadCounts::new(&EACH_ID_ITS_OWN),
            events: 0,
            error: None,
        });
        if t.error.is_some() {
            return;
        }
        let held_before = t.counts.held_bytes();
        // No samplers in a trace whose counts are used (`usable`): none is timed.
        match t
            .counts
            .add_payload(path, e.chunk, e.payload, &mut self.tracepoints, &[])
        {
            Ok(n) => t.events += n,
            Err(err) => t.error = Some(err),
        }
        self.held_bytes = self.held_bytes - held_before + t.counts.held_bytes();
        if self.held_bytes > MAX_HELD_BYTES {
            self.give_up();
        }
    }

    /// Stops counting: the report reads the threads again.
    fn give_up(&mut self) {
        self.gave_up = true;
        self.threads = HashMap::new();
        self.tracepoints = HashMap::new();
        self.held_bytes = 0;
    }

    /// True when the counts are what reading `trace`'s threads one by one with `function` would give
    /// (see the module's documentation).
    pub(super) fn usable(&self, trace: &Trace, function: &Representatives) -> bool {
        !self.gave_up
            && trace.samplers().is_empty()
            && trace
                .threads()
                .values()
                .all(|t| t.chunks_in_file_order() && t.sample_chunks.is_empty())
            && self
                .threads
                .values()
                .all(|t| t.counts.ids.iter().all(|&id| function.of(id) == id))
    }

    /// Thread `tid`'s counts (empty for a thread without Events chunks).
    pub(super) fn take(&mut self, tid: u32) -> Counted<'static> {
        self.threads.remove(&tid).unwrap_or_else(|| Counted {
            counts: ThreadCounts::new(&EACH_ID_ITS_OWN),
            events: 0,
            error: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::progress::Progress;
    use crate::reader::stream::RawEvent;
    use crate::reader::EventKind;
    use crate::report::walk::tests::events;
    use crate::report::{Report, SortKey};
    use ferrotrace_core::builder::TraceBuilder;
    use ferrotrace_core::format::{ChunkHeader, ChunkKind, CHUNK_HEADER_LEN, FILE_HEADER_LEN};
    use ferrotrace_core::schema::{source, Mode};

    /// A trace of `threads` threads, each with pseudo-random events (the walk's tests': unwinding,
    /// frames running before the trace, tracepoints), their chunks interleaved in the file as a
    /// program's threads fill them; functions 1, 2, 3, 7 and 2^21, and with `one_function` id 7 a
    /// second id of function 3 (same name, same address).
    fn trace_bytes(seed: u64, threads: u32, per_thread: usize, one_function: bool) -> Vec<u8> {
        trace_of_sources(source::XRAY, seed, threads, per_thread, one_function)
    }

    /// [`trace_bytes`] whose Session chunk names `sources`.
    fn trace_of_sources(
        sources: u64,
        seed: u64,
        threads: u32,
        per_thread: usize,
        one_function: bool,
    ) -> Vec<u8> {
        let mut b = TraceBuilder::new(Vec::new(), "/bin/t", sources, Mode::Lossless).unwrap();
        for (i, id) in [1u32, 2, 3, 7, 1 << 21].into_iter().enumerate() {
            let (address, name) = match one_function && id == 7 {
                true => (0x1200, "t::f3".to_string()),
                false => (0x1000 + 0x100 * i as u64, format!("t::f{id}")),
            };
            b.function(id, address, 16, &name).unwrap();
        }
        let streams: Vec<Vec<RawEvent>> = (0..threads)
            .map(|k| events(seed * 1_000 + k as u64, per_thread))
            .collect();
        for k in 0..threads {
            b.thread(100 + k, &format!("t{k}")).unwrap();
        }
        for i in 0..per_thread {
            for (k, evs) in streams.iter().enumerate() {
                let (e, tid) = (evs[i], 100 + k as u32);
                match e.kind {
                    EventKind::Tracepoint => b.tracepoint_hit(tid, e.tsc, e.id, b"x").unwrap(),
                    kind => b.event(tid, e.tsc, kind, e.id).unwrap(),
                }
            }
        }
        b.finish().unwrap()
    }

    /// The Events chunks of a trace file: (header offset, payload length).
    fn events_chunks(bytes: &[u8]) -> Vec<(usize, usize)> {
        let mut v = Vec::new();
        let mut at = FILE_HEADER_LEN;
        while at < bytes.len() {
            let h = ChunkHeader::decode(bytes[at..at + CHUNK_HEADER_LEN].try_into().unwrap());
            if h.kind == ChunkKind::Events as u32 {
                v.push((at, h.len as usize));
            }
            at += CHUNK_HEADER_LEN + h.len as usize;
        }
        v
    }

    /// The report of the trace `bytes` by reading its threads after the index pass, and from the
    /// pass's counts, as JSON with every thread's table; and whether the pass's counts were used.
    fn both_ways(name: &str, bytes: &[u8]) -> (String, String, bool) {
        let path =
            std::env::temp_dir().join(format!("ft-one-pass-{}-{name}.data", std::process::id()));
        std::fs::write(&path, bytes).unwrap();
        let read = Trace::open(&path).unwrap();
        let want = Report::of(&read).unwrap();
        let (trace, pass) = Report::open_counting(&path).unwrap();
        let _ = std::fs::remove_file(&path);
        assert_eq!(trace.warnings(), read.warnings());
        let used = pass.usable(&trace, &crate::names::Names::of(&trace).representatives());
        let quiet = &mut Progress::with_enabled("t", 0, false);
        let got = Report::after_pass(&trace, quiet, pass).unwrap();
        let json = |r: &Report, t: &Trace| {
            r.to_json(t, SortKey::Total, true, &HashMap::new())
                .to_string()
        };
        (json(&want, &read), json(&got, &trace), used)
    }

    #[test]
    fn the_pass_counts_what_reading_the_threads_again_counts() {
        for seed in 0..4 {
            let bytes = trace_bytes(seed, 3, 9_000, false);
            let (want, got, used) = both_ways(&format!("same-{seed}"), &bytes);
            assert!(used, "seed {seed}");
            assert!(want.contains("\"calls\""), "{want}");
            assert_eq!(got, want, "seed {seed}");
        }
    }

    #[test]
    fn a_damaged_chunk_gives_both_the_same_prefix_and_errors() {
        let bytes = trace_bytes(9, 3, 9_000, false);
        let chunks = events_chunks(&bytes);
        assert!(chunks.len() >= 6, "{}", chunks.len());
        let events = |json: &str| -> u64 {
            let v: serde_json::Value = serde_json::from_str(json).unwrap();
            v["events"].as_u64().unwrap()
        };
        let (whole, _, _) = both_ways("whole", &bytes);
        // A chunk in the middle of the file: it is skipped, with a warning, and the chunks before
        // and after it are read, by both.
        let (at, len) = chunks[chunks.len() / 2];
        let p = at + CHUNK_HEADER_LEN;
        let mut disk = bytes.clone();
        disk[p + len / 2] ^= 0x10;
        let path = std::env::temp_dir().join(format!("ft-one-pass-{}-warn", std::process::id()));
        std::fs::write(&path, &disk).unwrap();
        let warnings = Trace::open(&path).unwrap().warnings();
        let _ = std::fs::remove_file(&path);
        assert!(
            warnings.iter().any(|w| w.contains(&format!(
                "the chunk at byte {at} is damaged (checksum mismatch)"
            ))),
            "{warnings:?}"
        );
        let (want, got, used) = both_ways("checksum", &disk);
        assert!(used);
        assert_eq!(got, want);
        let (read, all) = (events(&want), events(&whole));
        assert!(read < all && read > all / 2, "{read} of {all} events read");
        // The writer's damage (the checksum made again): an overlong varint ends that thread's
        // events with an error; the other threads read on.
        let mut writer = bytes.clone();
        writer[p + len / 2..p + len / 2 + 12].fill(0xff);
        let h = ChunkHeader::decode(writer[at..p].try_into().unwrap());
        let header = ChunkHeader::for_payload(ChunkKind::Events, h.seq, &writer[p..p + len]);
        writer[at..p].copy_from_slice(&header.encode());
        let (want, got, used) = both_ways("malformed", &writer);
        assert!(want.contains("corrupt chunk at byte"), "{want}");
        assert!(used);
        assert_eq!(got, want);
    }

    #[test]
    fn counts_the_pass_cannot_be_sure_of_are_made_again() {
        // Two ids of one function: the pass counted them apart.
        let (want, got, used) = both_ways("one-function", &trace_bytes(5, 2, 5_000, true));
        assert!(!used);
        assert_eq!(got, want);
        // More threads than the pass keeps counts for.
        let threads = MAX_THREADS as u32 + 1;
        let (want, got, used) = both_ways("threads", &trace_bytes(6, threads, 300, false));
        assert!(!used);
        assert_eq!(got, want);
    }

    #[test]
    fn a_sampled_run_is_not_counted_in_vain() {
        // `record --sample`'s runtime names the samples in its Session chunk; they come after the
        // events, so the pass must not count (whether or not they came: here the merge failed).
        let bytes = trace_of_sources(source::XRAY | source::SAMPLES, 3, 2, 4_000, false);
        let (want, got, used) = both_ways("sampled", &bytes);
        assert!(!used);
        assert_eq!(got, want);
        let path = std::env::temp_dir().join(format!("ft-one-pass-{}-s.data", std::process::id()));
        std::fs::write(&path, &bytes).unwrap();
        let (_, pass) = Report::open_counting(&path).unwrap();
        let _ = std::fs::remove_file(&path);
        assert!(pass.gave_up && pass.threads.is_empty());
    }

    #[test]
    fn the_pass_stops_counting_when_its_counts_hold_too_much_memory() {
        // Function id 2^20 - 1: each thread's table of ids takes 4 MB.
        let id = (1 << 20) - 1;
        let trace = |threads: u32| {
            let mut b =
                TraceBuilder::new(Vec::new(), "/bin/t", source::XRAY, Mode::Lossless).unwrap();
            b.function(id, 0x1000, 16, "t::high").unwrap();
            for tid in 100..100 + threads {
                b.thread(tid, "t").unwrap();
                b.event(tid, 1_000, EventKind::Entry, id).unwrap();
                b.event(tid, 1_500, EventKind::Exit, id).unwrap();
            }
            b.finish().unwrap()
        };
        let fit = (MAX_HELD_BYTES >> 22) as u32;
        let (want, got, used) = both_ways("memory", &trace(fit + 1));
        assert!(!used);
        assert!(want.contains("t::high"), "{want}");
        assert_eq!(got, want);
        // Fewer threads fit (a few bytes beside each table).
        let (want, got, used) = both_ways("memory-fits", &trace(fit - 1));
        assert!(used);
        assert_eq!(got, want);
    }
}
