//! Calls into the XRay-instrumented shared library `libft_xlib.so` (linked at start-up).
#[link(name = "ft_xlib")]
extern "C" {
    fn xlib_work(n: u64) -> u64;
}

#[inline(never)]
fn call_lib(n: u64) -> u64 {
    // SAFETY: plain extern "C" function without preconditions.
    unsafe { xlib_work(n) }
}

fn main() {
    println!("result={}", call_lib(std::hint::black_box(25)));
}
