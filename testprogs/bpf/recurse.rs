//! The eBPF profiler's test program, built by the tests with plain `rustc -O` (no frame pointers: the
//! default), so that its stacks can only be unwound with its DWARF CFI.
//!
//!   recurse DEPTH MS   main -> run -> down × (DEPTH + 1) -> spin, spinning MS ms at the bottom
//!   dlopen LIB MS      spins 100 ms in `before_dlopen`, then dlopens LIB and calls its
//!                      `lib_outer(MS)` from `call_lib`
//!   spawn MS           runs itself as `recurse 8 MS` (fork + exec) while spinning MS ms in `parent_spin`
use std::ffi::{c_char, c_int, c_void, CString};
use std::hint::black_box;
use std::time::{Duration, Instant};

extern "C" {
    fn dlopen(path: *const c_char, flags: c_int) -> *mut c_void;
    fn dlsym(handle: *mut c_void, name: *const c_char) -> *mut c_void;
}
const RTLD_NOW: c_int = 2;

#[inline(never)]
fn spin(ms: u64) -> u64 {
    let end = Instant::now() + Duration::from_millis(ms);
    let mut x = 0u64;
    while Instant::now() < end {
        for i in 0..1000 {
            x = black_box(x.wrapping_mul(31).wrapping_add(i));
        }
    }
    x
}

/// DEPTH + 1 frames of `down` (the additions after the calls keep them from being tail calls).
#[inline(never)]
fn down(n: u32, ms: u64) -> u64 {
    if n == 0 {
        return black_box(spin(ms)) + 1;
    }
    black_box(down(black_box(n - 1), ms)) + 1
}

#[inline(never)]
fn run(depth: u32, ms: u64) -> u64 {
    black_box(down(depth, ms)) + 1
}

#[inline(never)]
fn before_dlopen() -> u64 {
    black_box(spin(100)) + 1
}

#[inline(never)]
fn call_lib(lib: &str, ms: u64) -> u64 {
    let path = CString::new(lib).expect("path");
    // SAFETY: loading the test's own library and calling its `int lib_outer(int)`.
    unsafe {
        let h = dlopen(path.as_ptr(), RTLD_NOW);
        assert!(!h.is_null(), "dlopen {lib} failed");
        let f = dlsym(h, c"lib_outer".as_ptr());
        assert!(!f.is_null(), "no lib_outer");
        let f: extern "C" fn(c_int) -> c_int = std::mem::transmute(f);
        black_box(f(ms as c_int)) as u64 + 1
    }
}

#[inline(never)]
fn parent_spin(ms: u64) -> u64 {
    black_box(spin(ms)) + 1
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let num = |i: usize| -> u64 { args[i].parse().expect("a number") };
    let r = match args.get(1).map(String::as_str) {
        Some("recurse") => run(num(2) as u32, num(3)),
        Some("dlopen") => before_dlopen() + call_lib(&args[2], num(3)),
        Some("spawn") => {
            let me = std::env::current_exe().expect("own path");
            let mut child = std::process::Command::new(me)
                .args(["recurse", "8", &args[2]])
                .spawn()
                .expect("spawn");
            let r = parent_spin(num(2));
            assert!(child.wait().expect("wait").success());
            r
        }
        _ => {
            eprintln!("usage: recurse DEPTH MS | dlopen LIB MS | spawn MS");
            std::process::exit(2);
        }
    };
    println!("done {}", r & 1);
}
