//! Ends in the way its argument says, after nested calls:
//! `catch` (a panic caught by catch_unwind, then a normal exit), `exit-thread` (process::exit from a
//! worker while main waits), `abort` (a panic with abort), `segv` (a null write), `panic` (a panic nobody catches: exit status
//! 101, or SIGABRT when built with `-Cpanic=abort`), `spin` (calls `leaf`
//! every millisecond, says `ready` after 20 calls, and runs until a signal ends it or 30 s pass),
//! `count-signals` (counts the SIGTERM, SIGHUP and SIGUSR1 it receives with its own handler, says `ready`,
//! and 300 ms after the first one prints `TERM=n HUP=n USR1=n` and exits).
use std::hint::black_box;

#[inline(never)]
fn leaf(n: u64) -> u64 {
    black_box(n + 1)
}

#[inline(never)]
fn thrower(n: u64) -> u64 {
    if black_box(n) == 3 {
        panic!("thrown on purpose");
    }
    leaf(n)
}

#[inline(never)]
fn middle(n: u64) -> u64 {
    black_box(thrower(n)) + leaf(n)
}

#[inline(never)]
fn exit_from_worker() {
    for i in 0..100 {
        black_box(leaf(i));
    }
    std::process::exit(7);
}

/// Set once `spin_forever` has made a traced call: `exit-thread` exits only then, so that the spinner
/// is certainly in the trace however the threads are scheduled.
static SPINNING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

#[inline(never)]
fn spin_forever() {
    loop {
        black_box(leaf(1));
        SPINNING.store(true, std::sync::atomic::Ordering::Release);
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

static RECEIVED: [std::sync::atomic::AtomicU32; 3] =
    [const { std::sync::atomic::AtomicU32::new(0) }; 3];
/// SIGTERM, SIGHUP, SIGUSR1 (x86_64 Linux numbers: this file is also built alone, without the libc
/// crate).
const COUNTED: [i32; 3] = [15, 1, 10];

extern "C" {
    fn signal(sig: i32, handler: extern "C" fn(i32)) -> usize;
}

extern "C" fn count_signal(sig: i32) {
    if let Some(i) = COUNTED.iter().position(|&s| s == sig) {
        RECEIVED[i].fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
}

fn count_signals() {
    use std::io::Write;
    use std::sync::atomic::Ordering::Relaxed;
    for sig in COUNTED {
        // SAFETY: installing a handler that only touches atomics.
        unsafe { signal(sig, count_signal) };
    }
    println!("ready");
    let _ = std::io::stdout().flush();
    let start = std::time::Instant::now();
    while RECEIVED.iter().all(|r| r.load(Relaxed) == 0) && start.elapsed().as_secs() < 30 {
        black_box(leaf(0));
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    std::thread::sleep(std::time::Duration::from_millis(300));
    let [term, hup, usr1] = [0, 1, 2].map(|i| RECEIVED[i].load(Relaxed));
    println!("TERM={term} HUP={hup} USR1={usr1}");
}

fn main() {
    let mode = std::env::args().nth(1).unwrap_or_default();
    for i in 0..10 {
        black_box(leaf(i));
    }
    match mode.as_str() {
        "catch" => {
            std::panic::set_hook(Box::new(|_| {}));
            for i in 0..6 {
                let r = std::panic::catch_unwind(|| middle(i));
                println!(
                    "middle({i}) -> {}",
                    if r.is_ok() { "ok" } else { "panicked" }
                );
            }
        }
        "exit-thread" => {
            std::thread::Builder::new()
                .name("spinner".into())
                .spawn(spin_forever)
                .expect("spawn");
            while !SPINNING.load(std::sync::atomic::Ordering::Acquire) {
                std::thread::yield_now();
            }
            let t = std::thread::Builder::new()
                .name("exiter".into())
                .spawn(exit_from_worker)
                .expect("spawn");
            let _ = t.join();
            spin_forever();
        }
        "abort" => {
            for i in 0..50 {
                black_box(leaf(i));
            }
            std::process::abort();
        }
        "segv" => {
            for i in 0..50 {
                black_box(leaf(i));
            }
            let p: *mut u64 = black_box(std::ptr::null_mut());
            // SAFETY: not safe at all: this write faults on purpose.
            unsafe { p.write_volatile(1) };
        }
        "panic" => {
            for i in 0..50 {
                black_box(leaf(i));
            }
            middle(3);
        }
        "spin" => {
            use std::io::Write;
            for i in 0..30_000u64 {
                black_box(leaf(i));
                if i == 20 {
                    println!("ready");
                    let _ = std::io::stdout().flush();
                }
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
        }
        "count-signals" => count_signals(),
        other => {
            eprintln!(
                "usage: ending catch|exit-thread|abort|segv|panic|spin|count-signals (got '{other}')"
            );
            std::process::exit(2);
        }
    }
}
