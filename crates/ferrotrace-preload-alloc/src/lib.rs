//! `libferrotrace_alloc.so`: the malloc family for `LD_PRELOAD`, which `ferrotrace record --alloc`
//! puts in front of `libferrotrace_preload.so` (and nothing else does). Each exported function is one
//! indirect jump to the preload library's hook of the same name (`ferrotrace_alloc_malloc`, …, in
//! `ferrotrace-preload`'s `malloc.rs`), resolved when the library is loaded: the hook sees the stack
//! and registers of the program's call, as if the program had called it.
//!
//! Why a library of its own: a program whose malloc is interposed pays for it on every call (about
//! 11 ns per `realloc` or `free`, +31 % on Lua) whether allocations are recorded or not; without
//! `--alloc` this library is not loaded, and nothing of the program's allocator is touched.
//!
//! Loading it without `libferrotrace_preload.so` fails (undefined `ferrotrace_alloc_*` symbols). It
//! must come before that library in `LD_PRELOAD`: the hooks find the C library's functions with
//! `dlsym(RTLD_NEXT)`, which searches the objects after the preload library.
#![warn(missing_docs)]

use core::ffi::c_void;

/// Defines the exported `$name` as `jmp [GOT entry of $hook]`: no frame, no register touched, so the
/// hook starts with the program's return address on top of the stack and its `rbp`.
macro_rules! forward {
    ($($name:ident($($arg:ident: $t:ty),*) -> $r:ty => $hook:ident;)*) => {
        extern "C" {
            $(fn $hook($($arg: $t),*) -> $r;)*
        }
        $(
            #[doc = concat!("Interposes the C library's `", stringify!($name), "`: see `", stringify!($hook), "`.")]
            ///
            /// # Safety
            /// Same contract as the C library's function.
            #[unsafe(naked)]
            #[no_mangle]
            pub unsafe extern "C" fn $name($($arg: $t),*) -> $r {
                core::arch::naked_asm!("jmp qword ptr [rip + {hook}@GOTPCREL]", hook = sym $hook)
            }
        )*
    };
}

forward! {
    malloc(size: usize) -> *mut c_void => ferrotrace_alloc_malloc;
    free(p: *mut c_void) -> () => ferrotrace_alloc_free;
    calloc(n: usize, size: usize) -> *mut c_void => ferrotrace_alloc_calloc;
    realloc(p: *mut c_void, size: usize) -> *mut c_void => ferrotrace_alloc_realloc;
    reallocarray(p: *mut c_void, n: usize, size: usize) -> *mut c_void => ferrotrace_alloc_reallocarray;
    posix_memalign(out: *mut *mut c_void, align: usize, size: usize) -> i32 => ferrotrace_alloc_posix_memalign;
    aligned_alloc(align: usize, size: usize) -> *mut c_void => ferrotrace_alloc_aligned_alloc;
    memalign(align: usize, size: usize) -> *mut c_void => ferrotrace_alloc_memalign;
    valloc(size: usize) -> *mut c_void => ferrotrace_alloc_valloc;
    pvalloc(size: usize) -> *mut c_void => ferrotrace_alloc_pvalloc;
    pthread_getattr_np(thread: usize, attr: *mut c_void) -> i32 => ferrotrace_alloc_pthread_getattr_np;
}
