//! `tp_dlopen TOGGLES DIR N`: one thread disables and enables the tracepoint `tick` TOGGLES times
//! through the API (each toggle patches code) while the main thread copies the XRay-instrumented
//! `libft_xlib.so` to `DIR/libxlib{0..N}.so`, and for each: dlopens it, has the runtime scan and patch it
//! (`ferrotrace::rescan`), fires `tick` and calls `xlib_work(10)`. Both patch code at the same time, through
//! the runtime's one patcher. Prints `toggles=T libraries=N sum=S`.
use std::ffi::CString;

ferrotrace::tracepoint!(tick, lib: u32);

#[inline(never)]
fn load_and_call(path: &str) -> u64 {
    let path = CString::new(path).expect("path");
    // SAFETY: loading a copy of a library we built, and calling its extern "C" fn(u64) -> u64.
    unsafe {
        let h = libc::dlopen(path.as_ptr(), libc::RTLD_NOW);
        assert!(!h.is_null(), "dlopen failed");
        ferrotrace::rescan();
        let f = libc::dlsym(h, c"xlib_work".as_ptr());
        assert!(!f.is_null(), "no xlib_work");
        let f: extern "C" fn(u64) -> u64 = std::mem::transmute(f);
        f(10)
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let toggles: u32 = args.next().and_then(|a| a.parse().ok()).unwrap_or(500);
    let dir = args.next().expect("usage: tp_dlopen TOGGLES DIR N");
    let n: u32 = args.next().and_then(|a| a.parse().ok()).unwrap_or(8);
    let toggler = std::thread::spawn(move || {
        for _ in 0..toggles {
            ferrotrace::tracepoints::disable("tick");
            ferrotrace::tracepoints::enable("tick");
        }
    });
    let mut sum = 0u64;
    for i in 0..n {
        let path = format!("{dir}/libxlib{i}.so");
        std::fs::copy(env!("FT_XLIB_PATH"), &path).expect("copy the library");
        ferrotrace::trace!(tick(i));
        sum = sum.wrapping_add(load_and_call(&path));
    }
    toggler.join().expect("toggler");
    ferrotrace::trace!(tick(n));
    println!("toggles={toggles} libraries={n} sum={sum}");
}
