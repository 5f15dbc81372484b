//! Loads the XRay-instrumented `libft_xlib.so` with dlopen after start-up and calls `xlib_work(30)`.
use std::ffi::CString;

#[inline(never)]
fn load_and_call() -> u64 {
    let path = CString::new(env!("FT_XLIB_PATH")).expect("path");
    // SAFETY: loading a library we built, and calling its extern "C" fn(u64) -> u64.
    unsafe {
        let h = libc::dlopen(path.as_ptr(), libc::RTLD_NOW);
        assert!(!h.is_null(), "dlopen failed");
        let f = libc::dlsym(h, c"xlib_work".as_ptr());
        assert!(!f.is_null(), "no xlib_work");
        let f: extern "C" fn(u64) -> u64 = std::mem::transmute(f);
        f(30)
    }
}

fn main() {
    println!("result={}", load_and_call());
}
