//! A recording into a file of the program's own, killed with SIGKILL: no guard is dropped, no End
//! chunk is written, and no `ferrotrace record` is there to recover the chunks from its memory. A
//! thread that records a few events and then waits fills a small part of one chunk; the runtime
//! puts what it wrote into the file by time, so the trace read back after the kill holds those
//! events and says that it was not finished, and nothing else is wrong with it (issue 41 item 10:
//! chunks used to reach the file only when full, and everything such a thread recorded was lost).
//!
//! The test runs itself again as the program (the variable `CHILD` names the trace it writes).

use std::io::BufRead;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use ferrotrace_reader::reader::{EventKind, Problem, Trace};
use ferrotrace_reader::tracepoints;
use tracing_subscriber::prelude::*;

const CHILD: &str = "FERROTRACE_TEST_KILLED_TRACE";
const EVENTS: u64 = 3;

/// The program: records to `path`, and a thread named `slow` enters a span and says so `EVENTS`
/// times, prints its tid and waits with everything else until it is killed.
fn program(path: &str) -> ! {
    tracing_subscriber::registry()
        .with(ferrotrace_tracing::FerrotraceLayer::new())
        .init();
    let _guard = ferrotrace_tracing::record_to_file(path).unwrap();
    std::thread::Builder::new()
        .name("slow".into())
        .spawn(|| {
            for i in 0..EVENTS {
                let _s = tracing::info_span!("slow_step").entered();
                tracing::info!(i, "slow event");
            }
            // "PID/task/TID"
            let me = std::fs::read_link("/proc/thread-self").unwrap();
            println!("tid={}", me.file_name().unwrap().to_string_lossy());
            loop {
                std::thread::park();
            }
        })
        .unwrap();
    loop {
        std::thread::park();
    }
}

/// The events of thread `tid` in `trace`, as lines: `> span`, `< span`, and each event's text.
fn lines_of(trace: &Trace, tid: u32) -> Vec<String> {
    // An id without a name (its description not in the file) reads as itself.
    let name = |id: u32| {
        trace
            .functions()
            .get(&id)
            .map_or(format!("#{id}"), |f| f.mangled.clone())
    };
    trace
        .events()
        .unwrap()
        .map(Result::unwrap)
        .filter(|e| e.tid == tid)
        .map(|e| match e.kind {
            EventKind::Entry => format!("> {}", name(e.id)),
            EventKind::Exit => format!("< {}", name(e.id)),
            EventKind::Tracepoint => tracepoints::format_tracepoint(trace, &e),
            other => panic!("unexpected {other:?}"),
        })
        .collect()
}

#[test]
fn a_slow_thread_s_events_reach_the_file_before_a_sigkill() {
    if let Ok(path) = std::env::var(CHILD) {
        program(&path);
    }
    let dir =
        std::env::temp_dir().join(format!("ferrotrace-tracing-killed-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("killed.ferrotrace");
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "a_slow_thread_s_events_reach_the_file_before_a_sigkill",
            "--nocapture",
        ])
        .env(CHILD, &path)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let tid = loop {
        let mut line = String::new();
        assert!(
            stdout.read_line(&mut line).unwrap() > 0,
            "the program ended"
        );
        if let Some(tid) = line.trim().strip_prefix("tid=") {
            break tid.parse::<u32>().unwrap();
        }
    };
    let expected: Vec<String> = (0..EVENTS)
        .flat_map(|i| {
            [
                "> slow_step".to_string(),
                format!("INFO {}(message=\"slow event\", i={i})", module_path!()),
                "< slow_step".to_string(),
            ]
        })
        .collect();
    // The thread's events reach the file while the program waits; a generous bound rather than a
    // figure: the runtime writes them within a second or two.
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        if Trace::open(&path).is_ok_and(|t| lines_of(&t, tid).len() == expected.len()) {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();

    let trace = Trace::open(&path).unwrap();
    assert_eq!(lines_of(&trace, tid), expected);
    assert!(trace.end().is_none());
    assert!(
        matches!(trace.problems(), [Problem::NoEnd { .. }]),
        "{:?}",
        trace.warnings()
    );
    // `ferrotrace info` says it in these words (the problem's one wording).
    assert!(
        trace.warnings().iter().any(|w| w.contains("no End chunk")),
        "{:?}",
        trace.warnings()
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
