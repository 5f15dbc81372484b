//! Any number of signals, from anyone, in any order, leave a complete trace: `timeout`, process-group
//! signals (service managers, a terminal), signals twice, signals to `record` and to the program at
//! once. Each scenario runs many times (a race that failed 1 run in 10 must show), all scenarios in
//! parallel, and every run is checked exactly: the End chunk names the signal the program died of, each
//! thread's `counted_leaf` calls in the trace are the calls the program counted, and its `spin_leaf`
//! calls (still going on when the signals come) are whole but for the last one
//! (`testprogs/src/bin/counted.rs`).

mod common;

use common::*;
use ferrotrace_analysis::reader::Trace;
use ferrotrace_core::env;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Runs per scenario that must reach the program (see [`Run::conclusive`]).
const RUNS: usize = 24;
const THREADS: usize = 2;
/// Calls of `counted_leaf` per thread: more than a 64 KiB chunk holds (4096 records), so each thread
/// has full chunks and a partly filled one when the signals come.
const CALLS: u64 = 3000;

/// Who sends what, once the program runs.
#[derive(Clone, Copy, Debug)]
enum Scenario {
    /// `timeout 0.4 ferrotrace record …`: SIGTERM to record, then to the whole group.
    Timeout,
    /// SIGTERM to the process group (record and the program).
    GroupTerm,
    /// SIGHUP to the process group (a closed terminal).
    GroupHup,
    /// SIGINT twice to the program.
    IntTwice,
    /// SIGTERM twice to the program.
    TermTwice,
    /// SIGTERM to the group, SIGINT to the program, SIGHUP to record, SIGQUIT to the program.
    Mixed,
}

struct Run {
    child: Child,
    counts: PathBuf,
    trace: PathBuf,
}

fn read_counts(path: &Path) -> Vec<u64> {
    let bytes = std::fs::read(path).unwrap_or_default();
    bytes
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

/// Adds `record OPTS -o TRACE -- counted THREADS COUNTS CALLS [busy]` to `cmd` (ferrotrace, or
/// `timeout … ferrotrace`).
fn record_counted<'c>(
    cmd: &'c mut Command,
    opts: &[&str],
    trace: &Path,
    counts: &Path,
    calls: u64,
    busy: bool,
) -> &'c mut Command {
    cmd.arg("record")
        .args(opts)
        .arg("-o")
        .arg(trace)
        .arg("--")
        .arg(testprog("counted"))
        .arg(THREADS.to_string())
        .arg(counts)
        .arg(calls.to_string())
        .args(busy.then_some("busy"))
}

fn start(dir: &Path, scenario: Scenario) -> Run {
    let counts = dir.join("counts");
    let trace = dir.join("trace.data");
    let _ = std::fs::remove_file(&counts);
    let _ = std::fs::remove_file(&trace);
    let mut cmd = match scenario {
        Scenario::Timeout => {
            let mut c = Command::new("timeout");
            default_signals(&mut c);
            c.arg("0.4").arg(env!("CARGO_BIN_EXE_ferrotrace"));
            c.env(env::PRELOAD, preload());
            c
        }
        _ => {
            let mut c = ferrotrace();
            c.process_group(0);
            c
        }
    };
    let leaves = ["-F", "counted_leaf|spin_leaf"];
    record_counted(&mut cmd, &leaves, &trace, &counts, CALLS, false)
        .current_dir(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let child = default_signals(&mut cmd).spawn().expect("spawn record");
    Run {
        child,
        counts,
        trace,
    }
}

/// The program's pid once every thread has made its counted calls (None if it ended first).
fn wait_running(run: &mut Run) -> Option<i32> {
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(30) {
        let c = read_counts(&run.counts);
        if c.len() == 1 + THREADS && c[1..].iter().all(|&n| n == CALLS) {
            return Some(c[0] as i32);
        }
        if run.child.try_wait().unwrap().is_some() {
            return None;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    panic!("the program did not start within 30 s");
}

/// Pause between two signals of one run: none, or a little, so that the second one arrives before,
/// during and after the handler of the first.
fn gap(run: usize) -> Duration {
    Duration::from_micros([0, 100, 500, 2_000][run % 4])
}

/// One run; returns false when it proved nothing (with `timeout` on a loaded machine, the signal can
/// come before the program made its counted calls).
fn one(dir: &Path, scenario: Scenario, n: usize) -> bool {
    let mut run = start(dir, scenario);
    let record_pid = run.child.id() as i32;
    match scenario {
        Scenario::Timeout => {}
        Scenario::GroupTerm | Scenario::GroupHup => {
            if wait_running(&mut run).is_some() {
                let sig = if matches!(scenario, Scenario::GroupTerm) {
                    15
                } else {
                    1
                };
                kill(-record_pid, sig);
            }
        }
        Scenario::IntTwice | Scenario::TermTwice => {
            if let Some(pid) = wait_running(&mut run) {
                let sig = if matches!(scenario, Scenario::IntTwice) {
                    2
                } else {
                    15
                };
                kill(pid, sig);
                std::thread::sleep(gap(n));
                // The process may be gone already.
                // SAFETY: plain system call; a failure (ESRCH) is expected when it is.
                let _ = unsafe { libc_kill(pid, sig) };
            }
        }
        Scenario::Mixed => {
            if let Some(pid) = wait_running(&mut run) {
                for (target, sig) in [(-record_pid, 15), (pid, 2), (record_pid, 1), (pid, 3)] {
                    // SAFETY: as above.
                    let _ = unsafe { libc_kill(target, sig) };
                    std::thread::sleep(gap(n + sig as usize));
                }
            }
        }
    }
    let out = run.child.wait_with_output().unwrap();
    let stderr = text(&out.stderr);
    let counts = read_counts(&run.counts);
    let t = Trace::open(&run.trace);
    if counts.len() != 1 + THREADS || counts[1..].iter().any(|&c| c != CALLS) {
        assert!(
            matches!(scenario, Scenario::Timeout),
            "{scenario:?} run {n}: the program ended before its calls: {counts:?}"
        );
        return false;
    }
    let end = t.as_ref().ok().and_then(|t| t.end());
    let what = format!("{scenario:?} run {n}: {stderr}");
    let t = t.unwrap_or_else(|e| panic!("{what}: no trace: {e}"));
    assert!(t.truncation().is_none(), "{what}: {:?}", t.truncation());
    let end = end.unwrap_or_else(|| panic!("{what}: no End chunk"));
    // The program's death: record passes it on as 128 + signal; timeout says 124 for its SIGTERM.
    let died_of = match scenario {
        Scenario::Timeout => {
            assert_eq!(out.status.code(), Some(124), "{what}");
            15
        }
        _ => {
            let code = out.status.code().unwrap_or_else(|| {
                panic!("{what}: record itself died by {:?}", out.status.signal())
            });
            assert!(code > 128, "{what}: status {code}");
            code - 128
        }
    };
    assert_eq!(
        (end.reason as u32, end.signal),
        (1, died_of as u32),
        "{what}: the End chunk names the signal the program died of"
    );
    let counted = calls_by_thread(&t, "counted::counted_leaf");
    let spinning = calls_by_thread(&t, "counted::spin_leaf");
    for i in 0..THREADS {
        let name = format!("w{i}");
        assert_eq!(
            counted.get(&name).copied().unwrap_or_default(),
            (CALLS, CALLS),
            "{what}: thread {name}: (entries, exits) of counted_leaf in the trace vs the calls it made"
        );
        let (entries, exits) = spinning.get(&name).copied().unwrap_or_default();
        assert!(
            entries == exits || entries == exits + 1,
            "{what}: thread {name}: spin_leaf entered {entries} times, left {exits} times"
        );
    }
    true
}

extern "C" {
    #[link_name = "kill"]
    fn libc_kill(pid: i32, sig: i32) -> i32;
}

#[test]
fn any_signals_from_anyone_leave_a_complete_exact_trace() {
    // Built once before the threads start.
    testprog("counted");
    preload();
    let scenarios = [
        Scenario::Timeout,
        Scenario::GroupTerm,
        Scenario::GroupHup,
        Scenario::IntTwice,
        Scenario::TermTwice,
        Scenario::Mixed,
    ];
    let threads: Vec<_> = scenarios
        .into_iter()
        .map(|scenario| {
            std::thread::spawn(move || {
                let dir = scratch(&format!("signals_{scenario:?}"));
                let (mut conclusive, mut tries) = (0, 0);
                while conclusive < RUNS {
                    tries += 1;
                    assert!(
                        tries <= 3 * RUNS,
                        "{scenario:?}: the program was reached in only {conclusive} of {tries} runs"
                    );
                    if one(&dir, scenario, tries) {
                        conclusive += 1;
                    }
                }
                eprintln!("{scenario:?}: {conclusive} complete traces in {tries} runs");
            })
        })
        .collect();
    let mut failed = Vec::new();
    for t in threads {
        if let Err(e) = t.join() {
            failed.push(
                e.downcast_ref::<String>()
                    .cloned()
                    .unwrap_or_else(|| "panic".into()),
            );
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}

/// SIGUSR2 in flight mode writes every event so far, those still in the threads' partly filled chunks
/// included (they were left out: after a few thousand events a dump held none), and the end of the
/// trace does not write them a second time.
#[test]
fn flight_dump_holds_the_partly_filled_chunks_once() {
    let dir = scratch("flight_partial");
    let counts = dir.join("counts");
    let trace = dir.join("trace.data");
    let calls = 1000u64; // 2,000 events per thread: less than a chunk
    let opts = ["--mode", "flight", "-F", "counted_leaf"];
    let child = record_counted(&mut ferrotrace(), &opts, &trace, &counts, calls, false)
        .process_group(0)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while read_counts(&counts)
        .get(1..)
        .is_none_or(|c| c.len() < THREADS || c.iter().any(|&n| n != calls))
    {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the program did not run"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    let per_thread = |t: &Trace| {
        let c = calls_by_thread(t, "counted::counted_leaf");
        (0..THREADS)
            .map(|i| c.get(&format!("w{i}")).copied().unwrap_or_default())
            .collect::<Vec<_>>()
    };
    let all = vec![(calls, calls); THREADS];
    for dump in 0..2 {
        kill(child.id() as i32, 12);
        let start = Instant::now();
        loop {
            if let Ok(t) = Trace::open(&trace) {
                if t.event_count() > 0 {
                    assert!(t.end().is_none(), "still running");
                    assert_eq!(per_thread(&t), all, "dump {dump}: every call, once");
                    break;
                }
            }
            assert!(start.elapsed() < Duration::from_secs(10), "no dump");
            std::thread::sleep(Duration::from_millis(10));
        }
        // The second dump finds nothing new to add to the first.
        std::thread::sleep(Duration::from_millis(50));
    }
    kill(child.id() as i32, 15);
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(143), "{}", text(&out.stderr));
    let t = Trace::open(&trace).unwrap();
    assert!(t.end().is_some());
    assert_eq!(per_thread(&t), all, "nothing written twice at the end");
}

/// SIGKILL (or the OOM killer) gives the program no chance to finish its trace: `record` recovers the
/// events it had recorded and not written from the chunk pool the program shares with it, and the
/// trace says how the program died. Two ways, each several times: killed while its threads record as
/// fast as they can (every call the program counted is in the trace, and at most the one the kill cut
/// short besides), and killed once its counted calls are done while it keeps recording other calls
/// (exactly the counted calls). Before, the unfinished chunk of every thread was lost.
#[test]
fn sigkill_loses_nothing_the_program_recorded() {
    let dir = scratch("sigkill");
    let counts = dir.join("counts");
    for (busy, runs) in [(true, 8), (false, 8)] {
        for run in 0..runs {
            let _ = std::fs::remove_file(&counts);
            let trace = dir.join("trace.data");
            let calls: u64 = if busy { 0 } else { CALLS };
            let leaves = ["-F", "counted_leaf|spin_leaf"];
            let child = record_counted(&mut ferrotrace(), &leaves, &trace, &counts, calls, busy)
                .process_group(0)
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            // Busy: well past the first chunks (4,096 records each), at a different point every run.
            let enough = if busy { 50_000 + 7_919 * run } else { CALLS };
            let start = Instant::now();
            let pid = loop {
                let c = read_counts(&counts);
                if c.len() == 1 + THREADS && c[1..].iter().all(|&n| n >= enough) {
                    break c[0] as i32;
                }
                assert!(
                    start.elapsed() < Duration::from_secs(30),
                    "the program did not run"
                );
                std::thread::sleep(Duration::from_micros(200));
            };
            kill(pid, 9);
            let out = child.wait_with_output().unwrap();
            let what = format!("busy={busy} run {run}: {}", text(&out.stderr));
            assert_eq!(out.status.code(), Some(137), "{what}");
            let counts = read_counts(&counts);
            let t = Trace::open(&trace).unwrap();
            assert!(t.end().is_none(), "{what}");
            let salvage = t
                .salvage()
                .unwrap_or_else(|| panic!("{what}: no Salvage chunk"));
            assert_eq!((salvage.signal, salvage.exit_code), (9, None), "{what}");
            assert!(salvage.chunks >= THREADS as u64, "{what}: {salvage:?}");
            assert!(
                t.truncation().is_none() && t.problems().is_empty(),
                "{what}: {:?} {:?}",
                t.truncation(),
                t.problems()
            );
            let counted = calls_by_thread(&t, "counted::counted_leaf");
            for i in 0..THREADS {
                let name = format!("w{i}");
                let (entries, exits) = counted.get(&name).copied().unwrap_or_default();
                let c = counts[1 + i];
                if busy {
                    assert!(
                        c <= exits && exits <= entries && entries <= c + 1,
                        "{what}: thread {name} counted {c} calls, the trace has {entries} entries and {exits} exits"
                    );
                } else {
                    assert_eq!((entries, exits), (c, c), "{what}: thread {name}");
                }
            }
            let info = ft(&["info", "-i", trace.to_str().unwrap()]);
            assert!(info.status.success(), "{what}: {}", text(&info.stderr));
            let expected = format!(
                "killed by SIGKILL: {} unfinished chunks recovered",
                salvage.chunks
            );
            assert!(
                text(&info.stdout).contains(&expected),
                "{what}: {}",
                text(&info.stdout)
            );
        }
    }
}
/// A program with its own handlers gets each signal once: `record` passes on what is sent to it alone,
/// and not what the program got anyway from a signal to the whole group (`timeout`, a terminal, a
/// service manager), which it used to deliver a second time. The program installs its handlers with
/// `signal()`; the preloaded runtime notes their arrivals for record's relay.
#[test]
fn signals_reach_a_program_with_its_own_handlers_exactly_once() {
    use std::io::BufRead;
    let dir = scratch("signals_once");
    let cases: [(&str, i32, &str); 5] = [
        ("group", 15, "TERM=1 HUP=0 USR1=0"),
        ("record", 15, "TERM=1 HUP=0 USR1=0"),
        ("group", 1, "TERM=0 HUP=1 USR1=0"),
        ("record", 10, "TERM=0 HUP=0 USR1=1"),
        ("timeout", 15, "TERM=1 HUP=0 USR1=0"),
    ];
    // Each case a few times: a duplicate that arrives while the first is still pending merges with it,
    // so a single run can miss it.
    for (target, sig, expected) in cases.into_iter().flat_map(|c| [c; 4]) {
        let trace = dir.join("trace.data");
        let mut cmd = if target == "timeout" {
            let mut c = Command::new("timeout");
            default_signals(&mut c);
            c.arg("2").arg(env!("CARGO_BIN_EXE_ferrotrace"));
            c.env(env::PRELOAD, preload());
            c
        } else {
            let mut c = ferrotrace();
            c.process_group(0);
            c
        };
        let mut child = default_signals(&mut cmd)
            .args(["record", "-o"])
            .arg(&trace)
            .arg("--")
            .arg(testprog("ending"))
            .arg("count-signals")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        assert_eq!(line.trim(), "ready");
        let pid = child.id() as i32;
        match target {
            "group" => kill(-pid, sig),
            "record" => kill(pid, sig),
            _ => {} // timeout sends SIGTERM to record, then to its whole group
        }
        line.clear();
        stdout.read_line(&mut line).unwrap();
        let out = child.wait_with_output().unwrap();
        assert_eq!(
            line.trim(),
            expected,
            "signal {sig} to {target}: {}",
            text(&out.stderr)
        );
    }
}
