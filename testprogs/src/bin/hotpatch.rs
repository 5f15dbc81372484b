//! Loads the XRay-instrumented `libft_xlib.so` with dlopen, then 4 threads call `xlib_work(1000)` in a
//! loop while the linked runtime's collector finds the library and patches its sleds under their feet.
//! A thread stops 20 calls after it sees `xlib_work`'s entry sled patched (its first byte turns from
//! `eb`, the jump over the sled, to `41`, the `mov r10d` prefix), or after 10 s. Every call must return
//! the same value; prints `ok calls=N` or why not.
use std::ffi::CString;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

fn main() {
    let path = CString::new(env!("FT_XLIB_PATH")).expect("path");
    // SAFETY: loading a library we built and taking its extern "C" fn(u64) -> u64.
    let work: extern "C" fn(u64) -> u64 = unsafe {
        let h = libc::dlopen(path.as_ptr(), libc::RTLD_NOW);
        assert!(!h.is_null(), "dlopen failed");
        let f = libc::dlsym(h, c"xlib_work".as_ptr());
        assert!(!f.is_null(), "no xlib_work");
        std::mem::transmute(f)
    };
    let expected = work(1000);
    let stop = Arc::new(AtomicBool::new(false));
    let calls = Arc::new(AtomicU64::new(0));
    let bad = Arc::new(AtomicBool::new(false));
    let threads: Vec<_> = (0..4)
        .map(|i| {
            let (stop, calls, bad) = (stop.clone(), calls.clone(), bad.clone());
            std::thread::Builder::new()
                .name(format!("hot-{i}"))
                .spawn(move || {
                    let mut after_patch = 0;
                    while !stop.load(Ordering::Relaxed) && after_patch < 20 {
                        if work(1000) != expected {
                            bad.store(true, Ordering::Relaxed);
                        }
                        calls.fetch_add(1, Ordering::Relaxed);
                        // SAFETY: reading the first byte of a function's code.
                        if unsafe { (work as *const u8).read_volatile() } == 0x41 {
                            after_patch += 1;
                        }
                    }
                })
                .expect("spawn")
        })
        .collect();
    let start = std::time::Instant::now();
    while !threads.iter().all(|t| t.is_finished()) && start.elapsed() < std::time::Duration::from_secs(10) {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().expect("join");
    }
    // SAFETY: as above.
    if unsafe { (work as *const u8).read_volatile() } != 0x41 {
        println!("NOT PATCHED");
    } else if bad.load(Ordering::Relaxed) {
        println!("MISMATCH");
    } else {
        println!("ok calls={} recording={}", calls.load(Ordering::Relaxed), ferrotrace::is_recording());
    }
}
