//! `counted THREADS FILE CALLS [busy]`: THREADS threads (named `w0`, `w1`, …) each call `counted_leaf`
//! CALLS times, publishing the number of calls made so far in FILE, then call `spin_leaf` every 100 µs
//! until something ends the process (or 60 s pass). FILE is mapped shared and holds `u64` slots: slot 0 =
//! the pid, slot 1 + i = thread i's completed `counted_leaf` calls (written after each call). Whoever
//! ends the process once every slot reads CALLS knows exactly what the trace must hold, while the threads
//! are still busy recording `spin_leaf`.
//!
//! With `busy` the threads call `counted_leaf` without end and without pause (for SIGKILL: the trace must
//! then hold `count` or `count + 1` calls per thread, the last one possibly cut by the kill).
use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

#[inline(never)]
fn counted_leaf(n: u64) -> u64 {
    black_box(n.wrapping_mul(3) + 1)
}

#[inline(never)]
fn spin_leaf(n: u64) -> u64 {
    black_box(n ^ 0x5a)
}

fn run(slot: &AtomicU64, calls: u64, busy: bool) {
    let start = Instant::now();
    let mut done = 0u64;
    while busy || done < calls {
        black_box(counted_leaf(done));
        done += 1;
        slot.store(done, Ordering::Release);
    }
    let mut n = 0;
    while start.elapsed() < Duration::from_secs(60) {
        black_box(spin_leaf(n));
        n += 1;
        std::thread::sleep(Duration::from_micros(100));
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let usage = "usage: counted THREADS FILE CALLS [busy]";
    let threads: usize = args.get(1).and_then(|a| a.parse().ok()).expect(usage);
    let path = args.get(2).expect(usage);
    let calls: u64 = args.get(3).and_then(|a| a.parse().ok()).expect(usage);
    let busy = args.get(4).is_some_and(|a| a == "busy");
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .expect("open the count file");
    let bytes = 8 * (1 + threads);
    file.set_len(bytes as u64).expect("size the count file");
    use std::os::fd::AsRawFd;
    // SAFETY: a shared mapping of `bytes` bytes of a file just sized to that; checked below.
    let map = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            bytes,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            file.as_raw_fd(),
            0,
        )
    };
    assert_ne!(map, libc::MAP_FAILED, "mmap the count file");
    // SAFETY: the mapping holds 1 + threads aligned u64 slots and lives as long as the process.
    let slots: &'static [AtomicU64] =
        unsafe { std::slice::from_raw_parts(map as *const AtomicU64, 1 + threads) };
    for s in &slots[1..] {
        s.store(0, Ordering::Release);
    }
    slots[0].store(std::process::id() as u64, Ordering::Release);
    let workers: Vec<_> = (0..threads)
        .map(|i| {
            std::thread::Builder::new()
                .name(format!("w{i}"))
                .spawn(move || run(&slots[1 + i], calls, busy))
                .expect("spawn")
        })
        .collect();
    for w in workers {
        let _ = w.join();
    }
}
