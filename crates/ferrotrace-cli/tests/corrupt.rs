//! Bad input: truncated, bit-flipped (with and without a fixed-up checksum), foreign and empty files.
//! Neither the reader nor any command may panic; commands fail with one line naming the file, or
//! (truncation) print results for the readable prefix and warn.

mod common;

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use common::*;
use ferrotrace_analysis::cct::Cct;
use ferrotrace_analysis::dump;
use ferrotrace_analysis::info::Summary;
use ferrotrace_analysis::progress::Progress;
use ferrotrace_analysis::reader::Trace;
use ferrotrace_analysis::replay::{replay_to_string, Options};
use ferrotrace_analysis::report::Report;
use ferrotrace_core::format::{ChunkHeader, CHUNK_HEADER_LEN, FILE_HEADER_LEN};

fn original() -> &'static (PathBuf, Vec<u8>) {
    static T: OnceLock<(PathBuf, Vec<u8>)> = OnceLock::new();
    T.get_or_init(|| {
        let dir = scratch("corrupt_src");
        let (out, trace) = record(&dir, &[], &testprog("calltree"), &[]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        let bytes = std::fs::read(&trace).unwrap();
        (trace, bytes)
    })
}

/// Deterministic pseudo-random numbers (no dependency, same cases every run).
struct Lcg(u64);
impl Lcg {
    fn next(&mut self, n: usize) -> usize {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((self.0 >> 33) % n as u64) as usize
    }
}

fn variants() -> Vec<(String, Vec<u8>)> {
    let (_, orig) = original();
    let mut rng = Lcg(0x5eed);
    let mut v = vec![
        ("empty".to_string(), Vec::new()),
        ("header only".to_string(), orig[..FILE_HEADER_LEN].to_vec()),
        (
            "foreign (ELF)".to_string(),
            std::fs::read(testprog("calltree")).unwrap()[..4096].to_vec(),
        ),
        (
            "garbage".to_string(),
            (0..5000).map(|_| rng.next(256) as u8).collect(),
        ),
    ];
    for _ in 0..40 {
        let at = rng.next(orig.len());
        v.push((format!("truncated at {at}"), orig[..at].to_vec()));
    }
    for _ in 0..40 {
        let mut b = orig.clone();
        let at = rng.next(b.len());
        b[at] ^= 1 << rng.next(8);
        v.push((format!("bit flip at {at}"), b));
    }
    // Flips inside a chunk with the checksum fixed up: the decoders themselves see bad fields.
    let cs = trace_chunks(orig);
    for i in 0..120 {
        let mut b = orig.clone();
        let (h, p, len) = cs[rng.next(cs.len())];
        if len == 0 {
            continue;
        }
        let flips = 1 + i % 3;
        for _ in 0..flips {
            let at = p + rng.next(len);
            b[at] = if i % 2 == 0 {
                b[at] ^ (1 << rng.next(8))
            } else {
                rng.next(256) as u8
            };
        }
        let mut hdr = ChunkHeader::decode(&b[h..h + CHUNK_HEADER_LEN].try_into().unwrap());
        hdr.crc = hdr.checksum(&b[p..p + len]);
        b[h..h + CHUNK_HEADER_LEN].copy_from_slice(&hdr.encode());
        v.push((format!("checksummed flip #{i} in chunk at {h}"), b));
    }
    v
}

fn analyse_everything(path: &Path, scratch_dir: &Path) {
    let Ok(trace) = Trace::open(path) else { return };
    let quiet = || Progress::with_enabled("t", 0, false);
    let _ = Summary::of(&trace);
    let _ = Report::of(&trace);
    let plain = replay_to_string(&trace, &Options::default());
    let mut reference = Vec::new();
    let _ =
        ferrotrace_analysis::replay::replay_reference(&trace, &Options::default(), &mut reference);
    if let Ok(plain) = plain {
        assert_eq!(
            plain,
            String::from_utf8_lossy(&reference),
            "the unfiltered replay equals the general replayer's, even on damaged input"
        );
    }
    let _ = Cct::build(&trace, None, &mut quiet());
    let _ = dump::chrome::write(&trace, &mut Vec::new(), &mut quiet());
    let _ = dump::perfetto::write(&trace, Default::default(), &mut Vec::new(), &mut quiet());
    let _ = dump::folded::write(&trace, &mut Vec::new(), &mut quiet());
    let _ = dump::uftrace::write(&trace, &scratch_dir.join("uf"), &mut quiet());
    let _ = ferrotrace_analysis::flame::write_svg(
        &Cct::build(&trace, None, &mut quiet()).unwrap_or_else(|_| panic!("cct")),
        "t",
        &mut Vec::new(),
    );
}

#[test]
fn reader_and_every_analysis_survive_corrupt_input() {
    let dir = scratch("corrupt_lib");
    let path = dir.join("bad.data");
    for (label, bytes) in variants() {
        std::fs::write(&path, &bytes).unwrap();
        let r = std::panic::catch_unwind(|| analyse_everything(&path, &dir));
        assert!(r.is_ok(), "panicked on {label}");
    }
}

#[test]
fn every_command_fails_cleanly_or_warns() {
    let dir = scratch("corrupt_cli");
    let path = dir.join("bad.data");
    let p = path.to_str().unwrap();
    let out_dir = dir.join("out");
    let o = out_dir.to_str().unwrap();
    let commands: Vec<Vec<&str>> = vec![
        vec!["info", "-i", p],
        vec!["replay", "-i", p],
        vec!["report", "-i", p],
        vec!["report", "-i", p, "--json", "--threads"],
        vec!["graph", "-i", p],
        vec!["flame", "-i", p, "-o", o],
        vec!["dump", "-i", p, "--format", "chrome", "-o", o],
        vec!["dump", "-i", p, "--format", "perfetto", "-o", o],
        vec!["dump", "-i", p, "--format", "uftrace", "-o", o],
    ];
    // Every fourth variant through the CLI (all of them go through the library test above).
    for (label, bytes) in variants().into_iter().step_by(4) {
        std::fs::write(&path, &bytes).unwrap();
        for c in &commands {
            let _ = std::fs::remove_dir_all(&out_dir);
            let _ = std::fs::remove_file(&out_dir);
            let out = ferrotrace().args(c).output().unwrap();
            let err = text(&out.stderr);
            assert_ne!(
                out.status.code(),
                Some(101),
                "{c:?} panicked on {label}: {err}"
            );
            assert!(!err.contains("panicked"), "{c:?} on {label}: {err}");
            if !out.status.success() {
                // A hard error is the only line; warnings (status 1) follow the results, a line
                // naming the file for each thing found wrong (flips in one chunk can damage both its
                // count and an event).
                let named = err
                    .lines()
                    .filter(|l| l.starts_with("ferrotrace: ") && l.contains("bad.data"))
                    .count();
                assert!(
                    (out.status.code() == Some(1) && named >= 1)
                        || (named == 1 && err.lines().count() == 1),
                    "{c:?} on {label}: one line naming the file, or warnings: {err}"
                );
            }
        }
    }
}

#[test]
fn truncated_trace_gives_prefix_results_and_a_warning() {
    let (_, orig) = original();
    let dir = scratch("corrupt_trunc");
    let path = dir.join("cut.data");
    // Cut inside the last event chunk: some events remain readable.
    let cs = trace_chunks(orig);
    let (_, p, len) = *cs
        .iter()
        .rev()
        .find(|&&(h, _, _)| orig[h] == 6)
        .expect("an events chunk");
    std::fs::write(&path, &orig[..p + len / 2]).unwrap();
    let out = ferrotrace()
        .args(["report", "-i", path.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(
        err.contains("cut.data") && err.contains("truncated"),
        "{err}"
    );
    assert!(text(&out.stdout).contains("Total time"));
    let foreign = dir.join("foreign.data");
    std::fs::write(&foreign, b"this is not a trace at all").unwrap();
    let out = ferrotrace()
        .args(["replay", "-i", foreign.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("foreign.data") && err.contains("not a ferrotrace trace"),
        "{err}"
    );
}

/// `report` on one thread counts the events as the index pass reads them (the file read once); with
/// `--jobs 2` it reads each thread's chunks after the pass. A chunk damaged on disk ends both at the
/// same readable prefix, with the same results and warnings. (A chunk damaged by its writer, its
/// checksum sound, is not compared here: on one thread the events before the bad byte are counted,
/// through the batches of `--jobs 2` not; `report::one_pass`'s tests compare the one-pass counts with
/// those of reading the threads on one thread.)
#[test]
fn report_read_once_says_what_report_read_twice_says_of_a_damaged_chunk() {
    let (_, orig) = original();
    let dir = scratch("corrupt_once");
    let path = dir.join("bad.data");
    let p = path.to_str().unwrap();
    let events: Vec<_> = trace_chunks(orig)
        .into_iter()
        .filter(|&(h, _, _)| orig[h] == 6)
        .collect();
    // The first: the chunks after it (another thread's) are read on.
    assert!(events.len() >= 2, "{} Events chunks", events.len());
    let (_, at, len) = events[0];
    let mut disk = orig.clone();
    disk[at + len / 2] ^= 0x20;
    std::fs::write(&path, &disk).unwrap();
    for extra in [&[][..], &["--json", "--threads"][..]] {
        let run = |jobs: &str| {
            let out = ferrotrace()
                .args(["report", "-i", p, "--jobs", jobs])
                .args(extra)
                .output()
                .unwrap();
            // On a machine with no core free, --jobs 2 reads on one and says so: the line aside,
            // the outputs agree either way.
            let err: String = text(&out.stderr)
                .lines()
                .filter(|l| !l.contains("free for a second job"))
                .map(|l| format!("{l}\n"))
                .collect();
            (out.status.code(), text(&out.stdout), err)
        };
        let once = run("1");
        assert_eq!(once.0, Some(1), "{}", once.2);
        assert!(once.2.contains("checksum mismatch"), "{}", once.2);
        assert_eq!(once, run("2"), "{extra:?}");
    }
}

/// One flipped bit in the middle of a real trace loses its chunk, not the rest of the file (issue 41
/// item 11): every other thread reads as recorded, and every command says which chunk was skipped.
#[test]
fn a_flipped_bit_loses_its_chunk_and_the_chunks_after_it_are_read() {
    let (trace, orig) = original();
    let dir = scratch("corrupt_resync");
    let path = dir.join("flipped.data");
    let events: Vec<_> = trace_chunks(orig)
        .into_iter()
        .filter(|&(h, _, _)| orig[h] == 6)
        .collect();
    let (h, at, len) = events[0];
    let mut disk = orig.clone();
    disk[at + len / 2] ^= 0x20;
    std::fs::write(&path, &disk).unwrap();
    let whole = Trace::open(trace).unwrap();
    let flipped = Trace::open(&path).unwrap();
    assert_eq!(flipped.truncation(), None);
    assert!(flipped.end().is_some(), "the End chunk is read");
    let seq = u32::from_le_bytes(orig[h + 8..h + 12].try_into().unwrap());
    let said = format!("the chunk at byte {h} is damaged (checksum mismatch): chunk {seq} (bytes");
    assert!(
        flipped
            .problems()
            .iter()
            .any(|p| p.to_string().starts_with(&said)),
        "{:?}",
        flipped.problems()
    );
    let count = |t: &Trace, tid: u32| t.thread_events(tid).unwrap().count();
    let damaged_thread = whole
        .threads()
        .keys()
        .copied()
        .find(|&tid| count(&whole, tid) != count(&flipped, tid))
        .expect("the damaged chunk's thread lost its events");
    assert!(whole.threads().len() >= 2, "another thread to read on to");
    for &tid in whole.threads().keys().filter(|&&tid| tid != damaged_thread) {
        assert_eq!(count(&whole, tid), count(&flipped, tid), "thread {tid}");
    }
    for cmd in ["report", "replay", "info"] {
        let out = ferrotrace().args([cmd, "-i"]).arg(&path).output().unwrap();
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{cmd}: {err}");
        assert!(err.contains(&said), "{cmd}: {err}");
        assert!(!err.contains("panicked"), "{cmd}: {err}");
    }
}

/// A trace that ends cleanly at a chunk boundary but without its End chunk (the process was killed
/// between two chunks, or the trace is still being written) is incomplete: every command warns and
/// exits 1, and a command that ends with an error says first what is wrong with the trace (issue
/// 20.12: read silently with exit 0; `mem` said "no allocation events" and nothing else).
#[test]
fn a_trace_without_its_end_chunk_warns_in_every_command() {
    let (_, orig) = original();
    let dir = scratch("corrupt_no_end");
    let path = dir.join("noend.data");
    let last = *trace_chunks(orig).last().unwrap();
    assert_eq!(orig[last.0], 7, "the last chunk is End");
    std::fs::write(&path, &orig[..last.0]).unwrap();
    let p = path.to_str().unwrap();
    let o = dir.join("out");
    let o = o.to_str().unwrap();
    let says = format!(
        "ferrotrace: warning: {p}: the trace has no End chunk after byte {}",
        last.0
    );
    for c in [
        &["info"][..],
        &["info", "--json"],
        &["replay"],
        &["report"],
        &["report", "--json"],
        &["graph"],
        &["flame", "-o", o],
        &["flame", "--folded"],
        &["dump", "--format", "chrome", "-o", o],
        &["dump", "--format", "folded"],
    ] {
        let _ = std::fs::remove_file(o);
        let out = ferrotrace().args(c).args(["-i", p]).output().unwrap();
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{c:?}: {err}");
        assert!(err.contains(&says), "{c:?}: {err}");
    }
    // Commands that end with an error on this trace say what is wrong with it first.
    for c in [&["mem"][..], &["flame", "--samples", "--folded"]] {
        let out = ferrotrace().args(c).args(["-i", p]).output().unwrap();
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{c:?}: {err}");
        let lines: Vec<&str> = err.lines().collect();
        assert_eq!(lines.len(), 2, "{c:?}: {err}");
        assert!(lines[0].starts_with(&says), "{c:?}: {err}");
        assert!(lines[1].contains("no "), "{c:?}: {err}");
    }
}

/// A pipe as `-i` (a FIFO without a writer, or `/dev/stdin` fed by `cat`) is refused at once with one
/// line: it blocked forever, or said "truncated at byte N of 0" (issue 20.12).
#[test]
fn a_pipe_as_input_is_refused_with_one_line() {
    let (trace, orig) = original();
    let dir = scratch("corrupt_pipe");
    let fifo = dir.join("fifo.data");
    let status = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(status.success());
    let mut child = ferrotrace()
        .args(["report", "-i", fifo.to_str().unwrap()])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let start = std::time::Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > std::time::Duration::from_secs(20) {
            let _ = child.kill();
            panic!("report -i FIFO waits for a writer");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(
        err,
        format!(
            "ferrotrace: {}: a pipe, not a trace file: traces are read by position (each \
             thread's chunks in turn); save it to a file first (`cat > trace.data`)\n",
            fifo.display()
        )
    );
    // /dev/stdin fed through a pipe: the same line, not "truncated at byte N of 0".
    let mut child = ferrotrace()
        .args(["info", "-i", "/dev/stdin"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().unwrap();
        // The reader may refuse before reading anything: a closed pipe is no failure here.
        let _ = stdin.write_all(orig);
    }
    let out = child.wait_with_output().unwrap();
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.starts_with("ferrotrace: /dev/stdin: a pipe, not a trace file")
            && err.lines().count() == 1,
        "{err}"
    );
    // Redirected from the file, /dev/stdin is the file: read as any trace.
    let out = ferrotrace()
        .args(["info", "-i", "/dev/stdin"])
        .stdin(std::fs::File::open(trace).unwrap())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
}

/// `replay -t` takes no negative duration, NaN or infinity (`-t=-5us` meant 0, every frame).
#[test]
fn replay_refuses_a_negative_or_nan_time_filter() {
    let (trace, _) = original();
    for bad in ["-5us", "NaNs", "infms", "-1"] {
        let out = ferrotrace()
            .args(["replay", "-i", trace.to_str().unwrap()])
            .arg(format!("-t={bad}"))
            .output()
            .unwrap();
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{bad}: {err}");
        assert!(
            err.contains(&format!("bad duration \"{bad}\"")),
            "{bad}: {err}"
        );
        let out = ferrotrace()
            .args(["replay", "-i", trace.to_str().unwrap(), "--time-range"])
            .arg(format!("{bad}~"))
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{bad}~: {}", text(&out.stderr));
    }
    let out = ferrotrace()
        .args(["replay", "-i", trace.to_str().unwrap(), "-t=1.5us"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
}
