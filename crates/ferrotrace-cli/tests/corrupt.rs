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

/// Byte ranges of chunk payloads: (header offset, payload offset, payload length).
fn chunks(b: &[u8]) -> Vec<(usize, usize, usize)> {
    let mut v = Vec::new();
    let mut off = FILE_HEADER_LEN;
    while off + CHUNK_HEADER_LEN <= b.len() {
        let len = u32::from_le_bytes(b[off + 4..off + 8].try_into().unwrap()) as usize;
        let p = off + CHUNK_HEADER_LEN;
        if p + len > b.len() {
            break;
        }
        v.push((off, p, len));
        off = p + len;
    }
    v
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
    let cs = chunks(orig);
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
                // A hard error is the only line; a truncation warning follows the results.
                let named = err
                    .lines()
                    .filter(|l| l.starts_with("ferrotrace: ") && l.contains("bad.data"))
                    .count();
                assert!(
                    named == 1 && (out.status.code() == Some(1) || err.lines().count() == 1),
                    "{c:?} on {label}: one line naming the file: {err}"
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
    let cs = chunks(orig);
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
