//! The malloc family's hooks: each function calls the C library's own (found with
//! `dlsym(RTLD_NEXT, …)`) and reports what it did to `ferrotrace::alloc`, which records it only while
//! the runtime records allocations (`ferrotrace record --alloc`).
//!
//! They are exported as `ferrotrace_alloc_malloc`, `ferrotrace_alloc_free`, …, not as `malloc`: the
//! program's calls reach them only through `libferrotrace_alloc.so` (crate `ferrotrace-preload-alloc`),
//! whose `malloc` is one jump here and which `record` preloads only with `--alloc`. Without it the
//! program's allocator runs untouched.
//!
//! Functions that allocate are entered through a naked stub that hands the Rust hook the address of
//! the caller's return address and the caller's `rbp`, so that the stack starts at the code that called
//! `malloc` (no frame of ours in it) and the frame-pointer walk needs no frame of its own.
//!
//! Bootstrap: `dlsym` itself may allocate (`calloc` for its error buffer) before the real functions
//! are known; those first calls are served from a small static arena whose blocks are never freed.

use core::ffi::c_void;
use core::sync::atomic::{AtomicBool, AtomicUsize, Ordering::Relaxed};

use ferrotrace::__preload::{
    alloc_event, before_free, free_cancelled, free_event, free_now, Caller,
};

/// The C library's functions, resolved together at first use (0 until then).
struct Real {
    malloc: AtomicUsize,
    free: AtomicUsize,
    calloc: AtomicUsize,
    realloc: AtomicUsize,
    posix_memalign: AtomicUsize,
    aligned_alloc: AtomicUsize,
    memalign: AtomicUsize,
    valloc: AtomicUsize,
    pvalloc: AtomicUsize,
}

static REAL: Real = Real {
    malloc: AtomicUsize::new(0),
    free: AtomicUsize::new(0),
    calloc: AtomicUsize::new(0),
    realloc: AtomicUsize::new(0),
    posix_memalign: AtomicUsize::new(0),
    aligned_alloc: AtomicUsize::new(0),
    memalign: AtomicUsize::new(0),
    valloc: AtomicUsize::new(0),
    pvalloc: AtomicUsize::new(0),
};

/// Set while `dlsym` runs: allocations then come from the arena.
static RESOLVING: AtomicBool = AtomicBool::new(false);

#[cold]
fn resolve() {
    if RESOLVING.swap(true, Relaxed) {
        return;
    }
    let slots: [(&AtomicUsize, &core::ffi::CStr); 9] = [
        (&REAL.malloc, c"malloc"),
        (&REAL.free, c"free"),
        (&REAL.calloc, c"calloc"),
        (&REAL.realloc, c"realloc"),
        (&REAL.posix_memalign, c"posix_memalign"),
        (&REAL.aligned_alloc, c"aligned_alloc"),
        (&REAL.memalign, c"memalign"),
        (&REAL.valloc, c"valloc"),
        (&REAL.pvalloc, c"pvalloc"),
    ];
    for (slot, name) in slots {
        // SAFETY: dlsym with RTLD_NEXT and a NUL-terminated name; the result is checked where used.
        let f = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) } as usize;
        slot.store(f, Relaxed);
    }
    RESOLVING.store(false, Relaxed);
}

/// The real function in `slot`, or `None` while it cannot be had (bootstrap).
#[inline(always)]
fn real(slot: &AtomicUsize) -> Option<usize> {
    let f = slot.load(Relaxed);
    if f != 0 {
        return Some(f);
    }
    if !RESOLVING.load(Relaxed) {
        resolve();
    }
    Some(slot.load(Relaxed)).filter(|&f| f != 0)
}

macro_rules! call {
    ($slot:ident as fn($($t:ty),*) -> $r:ty, $($arg:expr),*) => {{
        match real(&REAL.$slot) {
            // SAFETY: the slot holds the C library's function of this name, with this signature.
            // Inside the C library's allocator the thread's allocations are not recorded (a signal
            // handler's: see `unrecorded`).
            Some(f) => ferrotrace::__preload::unrecorded(|| unsafe {
                core::mem::transmute::<usize, unsafe extern "C" fn($($t),*) -> $r>(f)($($arg),*)
            }),
            None => return arena_alloc(0, 16).cast(),
        }
    }};
}

// ---- the bootstrap arena ---------------------------------------------------------------------------

const ARENA_BYTES: usize = 256 << 10;

#[repr(C, align(4096))]
struct Arena(core::cell::UnsafeCell<[u8; ARENA_BYTES]>);

// SAFETY: blocks are handed out by an atomic bump pointer: no two callers get the same bytes.
unsafe impl Sync for Arena {}

static ARENA: Arena = Arena(core::cell::UnsafeCell::new([0; ARENA_BYTES]));
static ARENA_USED: AtomicUsize = AtomicUsize::new(0);

/// A zeroed block from the arena, with its size in the 16 bytes before it; null when full (or for a
/// request of 0 bytes while the real allocator cannot be had).
fn arena_alloc(size: usize, align: usize) -> *mut u8 {
    if size == 0 {
        return core::ptr::null_mut();
    }
    let align = align.max(16);
    let base = ARENA.0.get() as usize;
    let mut used = ARENA_USED.load(Relaxed);
    loop {
        let start = (base + used + 16).next_multiple_of(align);
        let end = start + size;
        if end > base + ARENA_BYTES {
            return core::ptr::null_mut();
        }
        match ARENA_USED.compare_exchange_weak(used, end - base, Relaxed, Relaxed) {
            Ok(_) => {
                // SAFETY: start - 16 .. end lies inside the arena and belongs to this caller alone.
                unsafe { ((start - 16) as *mut usize).write(size) };
                return start as *mut u8;
            }
            Err(u) => used = u,
        }
    }
}

fn in_arena(p: *mut c_void) -> bool {
    let base = ARENA.0.get() as usize;
    (base..base + ARENA_BYTES).contains(&(p as usize))
}

// ---- entry stubs -----------------------------------------------------------------------------------

/// Defines the exported `$name` as a naked stub that moves `rsp` (the address of the return address)
/// and `rbp` into the two argument registers after its own arguments and jumps to `$hook`.
macro_rules! entry {
    ($name:ident($($arg:ident: $t:ty),*) -> $r:ty, $hook:ident, $slot:literal, $fp:literal) => {
        #[doc = concat!("The hook of the C library's `", stringify!($name), "` (`libferrotrace_alloc.so`'s jumps here).")]
        ///
        /// # Safety
        /// Same contract as the C library's function.
        #[unsafe(naked)]
        #[export_name = concat!("ferrotrace_alloc_", stringify!($name))]
        pub unsafe extern "C" fn $name($($arg: $t),*) -> $r {
            core::arch::naked_asm!(
                concat!("mov ", $slot, ", rsp"),
                concat!("mov ", $fp, ", rbp"),
                "jmp {hook}",
                hook = sym $hook,
            )
        }
    };
}

entry!(malloc(size: usize) -> *mut c_void, malloc_hook, "rsi", "rdx");
entry!(valloc(size: usize) -> *mut c_void, valloc_hook, "rsi", "rdx");
entry!(pvalloc(size: usize) -> *mut c_void, pvalloc_hook, "rsi", "rdx");
entry!(calloc(n: usize, size: usize) -> *mut c_void, calloc_hook, "rdx", "rcx");
entry!(realloc(p: *mut c_void, size: usize) -> *mut c_void, realloc_hook, "rdx", "rcx");
entry!(aligned_alloc(align: usize, size: usize) -> *mut c_void, aligned_alloc_hook, "rdx", "rcx");
entry!(memalign(align: usize, size: usize) -> *mut c_void, memalign_hook, "rdx", "rcx");
entry!(reallocarray(p: *mut c_void, n: usize, size: usize) -> *mut c_void, reallocarray_hook, "rcx", "r8");
entry!(posix_memalign(out: *mut *mut c_void, align: usize, size: usize) -> libc::c_int, posix_memalign_hook, "rcx", "r8");

fn caller(ret_slot: *const usize, rbp: usize) -> Caller {
    Caller { ret_slot, rbp }
}

extern "C" fn malloc_hook(size: usize, ret_slot: *const usize, rbp: usize) -> *mut c_void {
    if RESOLVING.load(Relaxed) {
        return arena_alloc(size, 16).cast();
    }
    let p = call!(malloc as fn(usize) -> *mut c_void, size);
    // SAFETY: `ret_slot` is the entry `rsp` of the interposed function (`entry!`): its return address.
    unsafe { alloc_event(size, p as usize, caller(ret_slot, rbp)) };
    p
}

extern "C" fn valloc_hook(size: usize, ret_slot: *const usize, rbp: usize) -> *mut c_void {
    let p = call!(valloc as fn(usize) -> *mut c_void, size);
    // SAFETY: `ret_slot` is the entry `rsp` of the interposed function (`entry!`): its return address.
    unsafe { alloc_event(size, p as usize, caller(ret_slot, rbp)) };
    p
}

extern "C" fn pvalloc_hook(size: usize, ret_slot: *const usize, rbp: usize) -> *mut c_void {
    let p = call!(pvalloc as fn(usize) -> *mut c_void, size);
    // SAFETY: `ret_slot` is the entry `rsp` of the interposed function (`entry!`): its return address.
    unsafe { alloc_event(size, p as usize, caller(ret_slot, rbp)) };
    p
}

extern "C" fn calloc_hook(
    n: usize,
    size: usize,
    ret_slot: *const usize,
    rbp: usize,
) -> *mut c_void {
    let Some(bytes) = array_bytes(n, size) else {
        return core::ptr::null_mut();
    };
    if RESOLVING.load(Relaxed) {
        return arena_alloc(bytes, 16).cast();
    }
    let p = call!(calloc as fn(usize, usize) -> *mut c_void, n, size);
    // SAFETY: `ret_slot` is the entry `rsp` of the interposed function (`entry!`): its return address.
    unsafe { alloc_event(bytes, p as usize, caller(ret_slot, rbp)) };
    p
}

extern "C" fn aligned_alloc_hook(
    align: usize,
    size: usize,
    ret_slot: *const usize,
    rbp: usize,
) -> *mut c_void {
    let p = call!(
        aligned_alloc as fn(usize, usize) -> *mut c_void,
        align,
        size
    );
    // SAFETY: `ret_slot` is the entry `rsp` of the interposed function (`entry!`): its return address.
    unsafe { alloc_event(size, p as usize, caller(ret_slot, rbp)) };
    p
}

extern "C" fn memalign_hook(
    align: usize,
    size: usize,
    ret_slot: *const usize,
    rbp: usize,
) -> *mut c_void {
    if RESOLVING.load(Relaxed) {
        return arena_alloc(size, align).cast();
    }
    let p = call!(memalign as fn(usize, usize) -> *mut c_void, align, size);
    // SAFETY: `ret_slot` is the entry `rsp` of the interposed function (`entry!`): its return address.
    unsafe { alloc_event(size, p as usize, caller(ret_slot, rbp)) };
    p
}

extern "C" fn posix_memalign_hook(
    out: *mut *mut c_void,
    align: usize,
    size: usize,
    ret_slot: *const usize,
    rbp: usize,
) -> libc::c_int {
    let Some(f) = real(&REAL.posix_memalign) else {
        return libc::ENOMEM;
    };
    // SAFETY: the C library's posix_memalign with the caller's arguments.
    let rc = ferrotrace::__preload::unrecorded(|| unsafe {
        core::mem::transmute::<
            usize,
            unsafe extern "C" fn(*mut *mut c_void, usize, usize) -> libc::c_int,
        >(f)(out, align, size)
    });
    if rc == 0 {
        // SAFETY: on success posix_memalign stored the block's address through `out`.
        let block = unsafe { *out };
        // SAFETY: `ret_slot` is the entry `rsp` of the interposed function (`entry!`): its return address.
        unsafe { alloc_event(size, block as usize, caller(ret_slot, rbp)) };
    }
    rc
}

fn resize(p: *mut c_void, size: usize, caller: Caller) -> *mut c_void {
    if in_arena(p) {
        // A bootstrap block: move it to the real allocator (its size is in front of it).
        // SAFETY: arena blocks carry their size in the 16 bytes before them.
        let old = unsafe { *((p as usize - 16) as *const usize) };
        let q = call!(malloc as fn(usize) -> *mut c_void, size);
        if !q.is_null() {
            // SAFETY: both blocks hold at least min(old, size) bytes.
            unsafe { core::ptr::copy_nonoverlapping(p as *const u8, q as *mut u8, old.min(size)) };
            // SAFETY: `resize`'s callers pass `caller(ret_slot, rbp)` of their entry (`entry!`).
            unsafe { alloc_event(size, q as usize, caller) };
        }
        return q;
    }
    let tsc = before_free(p as usize);
    let q = call!(realloc as fn(*mut c_void, usize) -> *mut c_void, p, size);
    match (q.is_null(), tsc) {
        // realloc(p, 0) frees p and returns null (glibc); a failed realloc keeps p.
        (true, Some(tsc)) if size == 0 => free_event(p as usize, tsc),
        (true, Some(_)) => free_cancelled(p as usize),
        (false, tsc) => {
            if let Some(tsc) = tsc {
                free_event(p as usize, tsc);
            }
            // SAFETY: `resize`'s callers pass `caller(ret_slot, rbp)` of their entry (`entry!`).
            unsafe { alloc_event(size, q as usize, caller) };
        }
        (true, None) => {}
    }
    q
}

extern "C" fn realloc_hook(
    p: *mut c_void,
    size: usize,
    ret_slot: *const usize,
    rbp: usize,
) -> *mut c_void {
    if RESOLVING.load(Relaxed) {
        return arena_alloc(size, 16).cast();
    }
    resize(p, size, caller(ret_slot, rbp))
}

extern "C" fn reallocarray_hook(
    p: *mut c_void,
    n: usize,
    size: usize,
    ret_slot: *const usize,
    rbp: usize,
) -> *mut c_void {
    let Some(bytes) = array_bytes(n, size) else {
        return core::ptr::null_mut();
    };
    resize(p, bytes, caller(ret_slot, rbp))
}

/// The hook of the C library's `free` (exported as `ferrotrace_alloc_free`).
///
/// # Safety
/// Same contract as `free(3)`.
#[export_name = "ferrotrace_alloc_free"]
pub unsafe extern "C" fn free(p: *mut c_void) {
    if p.is_null() || in_arena(p) {
        return;
    }
    free_now(p as usize);
    if let Some(f) = real(&REAL.free) {
        // SAFETY: the C library's free of a block it allocated.
        ferrotrace::__preload::unrecorded(|| unsafe {
            core::mem::transmute::<usize, unsafe extern "C" fn(*mut c_void)>(f)(p)
        });
    }
}

/// `n × size` for `calloc` and `reallocarray`, or `None` with errno ENOMEM when it overflows.
fn array_bytes(n: usize, size: usize) -> Option<usize> {
    let bytes = n.checked_mul(size);
    if bytes.is_none() {
        // SAFETY: errno is the calling thread's.
        unsafe { *libc::__errno_location() = libc::ENOMEM };
    }
    bytes
}

/// The hook of the C library's `pthread_getattr_np` (exported as
/// `ferrotrace_alloc_pthread_getattr_np`), whose allocations are never recorded: it allocates
/// (the main thread's reads `/proc/self/maps` with `fopen`) while holding the thread's lock, and the
/// first recorded event of a thread registers it, which asks `pthread_getattr_np` for the thread's
/// stack: recording there would take the same lock again.
///
/// # Safety
/// Same contract as `pthread_getattr_np(3)`.
#[export_name = "ferrotrace_alloc_pthread_getattr_np"]
pub unsafe extern "C" fn pthread_getattr_np(
    thread: libc::pthread_t,
    attr: *mut libc::pthread_attr_t,
) -> libc::c_int {
    type GetAttr = unsafe extern "C" fn(libc::pthread_t, *mut libc::pthread_attr_t) -> libc::c_int;
    static REAL_GETATTR: AtomicUsize = AtomicUsize::new(0);
    let mut f = REAL_GETATTR.load(Relaxed);
    if f == 0 {
        // SAFETY: dlsym with RTLD_NEXT and a NUL-terminated name.
        f = unsafe { libc::dlsym(libc::RTLD_NEXT, c"pthread_getattr_np".as_ptr()) } as usize;
        if f == 0 {
            return libc::ENOSYS;
        }
        REAL_GETATTR.store(f, Relaxed);
    }
    // SAFETY: the C library's pthread_getattr_np with the caller's arguments.
    ferrotrace::__preload::unrecorded(|| unsafe {
        core::mem::transmute::<usize, GetAttr>(f)(thread, attr)
    })
}
