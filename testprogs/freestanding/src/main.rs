//! A freestanding program that traces itself with ferrotrace-embedded: no std, no libc, its own
//! `_start`, raw system calls, two threads made with a raw `clone` (each with its own `%fs` block
//! holding its slot), the trace memory a static buffer, the trace written with `open`/`write`.
//!
//! `freestanding OUT N REPS [untraced] [single] [callbacks]`: each of the two threads computes `fib(N)`
//! recursively REPS times and counts its calls, then the main thread calls a C fib(10) built with
//! `gcc -pg -mfentry` (`__fentry__` hooks); the trace goes to OUT (a new file). With `untraced`,
//! tracing stays off and no file is written; with `single`, the main thread works alone (for
//! benchmarks: two threads on a busy two-CPU machine time each other); with `callbacks`, the tracer
//! finds threads and time through the program's own (instrumented) functions instead of `%fs` and
//! the TSC. Prints
//! `calls=MAIN,WORKER elapsed_ns=MAIN,WORKER cfib=C tsc_hz=HZ lost=L`: the calls each thread
//! counted, the CLOCK_MONOTONIC time each spent in its loop, the C fib's calls, and the events the
//! tracer lost.
#![no_std]
#![no_main]

use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use ferrotrace_embedded::{init, Clock, Threads, Tracer};

mod sys {
    use core::arch::asm;

    pub const CLOCK_MONOTONIC: usize = 1;

    /// A raw system call with up to six arguments.
    ///
    /// # Safety
    /// As the system call `n` with these arguments.
    pub unsafe fn syscall(n: usize, a: [usize; 6]) -> isize {
        let ret: isize;
        // SAFETY: the caller's; the kernel clobbers rcx and r11 only.
        unsafe {
            asm!("syscall", inlateout("rax") n as isize => ret, in("rdi") a[0], in("rsi") a[1],
                 in("rdx") a[2], in("r10") a[3], in("r8") a[4], in("r9") a[5],
                 lateout("rcx") _, lateout("r11") _, options(nostack));
        }
        ret
    }

    pub fn write_all(fd: usize, mut bytes: &[u8]) -> Result<(), isize> {
        while !bytes.is_empty() {
            // SAFETY: write(2) of a valid buffer.
            let n = unsafe { syscall(1, [fd, bytes.as_ptr() as usize, bytes.len(), 0, 0, 0]) };
            if n < 0 {
                return Err(n);
            }
            bytes = &bytes[n as usize..];
        }
        Ok(())
    }

    pub fn exit_group(code: usize) -> ! {
        // SAFETY: exit_group(2) does not return.
        unsafe { syscall(231, [code, 0, 0, 0, 0, 0]) };
        loop {}
    }

    pub fn exit_thread() -> ! {
        // SAFETY: exit(2) ends the calling thread only.
        unsafe { syscall(60, [0, 0, 0, 0, 0, 0]) };
        loop {}
    }

    pub fn monotonic_ns() -> u64 {
        let mut ts = [0u64; 2];
        // SAFETY: clock_gettime(2) into a timespec-sized buffer.
        unsafe { syscall(228, [CLOCK_MONOTONIC, ts.as_mut_ptr() as usize, 0, 0, 0, 0]) };
        ts[0] * 1_000_000_000 + ts[1]
    }

    pub fn gettid() -> u32 {
        // SAFETY: gettid(2) has no arguments.
        unsafe { syscall(186, [0; 6]) as u32 }
    }
}

/// What `%fs` points at in each thread: the word at offset 8 is the thread's slot (the tracer's).
#[repr(C, align(64))]
struct ThreadBlock {
    self_ptr: u64,
    slot: u64,
    /// The thread's index, for `callbacks` mode.
    index: u64,
}

const SLOT_OFFSET: isize = 8;
static mut BLOCKS: [ThreadBlock; 2] = [
    ThreadBlock {
        self_ptr: 0,
        slot: 0,
        index: 0,
    },
    ThreadBlock {
        self_ptr: 0,
        slot: 0,
        index: 1,
    },
];

static mut MEMORY: [u8; 128 << 20] = [0; 128 << 20];

#[repr(C, align(16))]
struct Stack([u8; 256 << 10]);
static mut WORKER_STACK: Stack = Stack([0; 256 << 10]);

/// The worker's tid, cleared by the kernel when it exits (CLONE_CHILD_CLEARTID).
static WORKER_TID: AtomicU32 = AtomicU32::new(0);

static CALLS: [AtomicU64; 2] = [AtomicU64::new(0), AtomicU64::new(0)];

extern "C" {
    /// src/cfib.c, built with `gcc -pg -mfentry`: calls `__fentry__` first thing.
    fn cfib(n: u32) -> u64;
    static cfib_calls: u64;
}
static ELAPSED: [AtomicU64; 2] = [AtomicU64::new(0), AtomicU64::new(0)];
static mut TRACER: Option<Tracer> = None;
static mut WORK: (u32, u32) = (0, 0);

#[inline(never)]
fn fib(n: u32, thread: usize) -> u64 {
    // A load and a store, not a locked `fetch_add`: each thread counts alone, and a locked
    // instruction would be a full barrier in every call (testprogs' fib counts the same way).
    let c = &CALLS[thread];
    c.store(c.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
    if n < 2 {
        return n as u64;
    }
    let a = fib(n - 1, thread);
    let b = fib(n - 2, thread);
    // Not a tail call: LLVM would turn `fib(n - 1) + fib(n - 2)` into a loop.
    core::hint::black_box(a + b)
}

#[inline(never)]
fn run(thread: usize) -> u64 {
    // SAFETY: written by the main thread before the worker starts, read-only after.
    let (n, reps) = unsafe { WORK };
    let t0 = sys::monotonic_ns();
    let mut sum = 0;
    for _ in 0..reps {
        sum += fib(core::hint::black_box(n), thread);
    }
    ELAPSED[thread].store(sys::monotonic_ns() - t0, Ordering::Relaxed);
    sum
}

fn tracer() -> Option<Tracer> {
    // SAFETY: set once by the main thread before the worker starts.
    unsafe { TRACER }
}

extern "C" fn worker(_: usize) -> ! {
    if let Some(t) = tracer() {
        let _ = t.register_thread(1, sys::gettid(), "worker");
    }
    core::hint::black_box(run(1));
    sys::exit_thread()
}

/// Starts `f(arg)` in a new thread on `stack` with `%fs` at `tls`.
///
/// # Safety
/// `stack` and `tls` are the new thread's alone for as long as it runs.
unsafe fn spawn(
    stack: *mut Stack,
    tls: *mut ThreadBlock,
    f: extern "C" fn(usize) -> !,
    arg: usize,
) {
    const FLAGS: usize =
        0x100 | 0x200 | 0x400 | 0x800 | 0x10000 | 0x40000 | 0x80000 | 0x100000 | 0x200000;
    // CLONE_VM | FS | FILES | SIGHAND | THREAD | SYSVSEM | SETTLS | PARENT_SETTID | CHILD_CLEARTID
    // SAFETY: the caller's; the child's stack starts with {arg, f}, 16-byte aligned.
    unsafe {
        let top = (stack as *mut u8).add(core::mem::size_of::<Stack>()) as *mut usize;
        let sp = top.sub(2);
        sp.write(arg);
        sp.add(1).write(f as usize);
        let tid = WORKER_TID.as_ptr() as usize;
        core::arch::asm!(
            "syscall",
            "test rax, rax",
            "jnz 2f",
            // The child, on its own stack.
            "pop rdi",
            "pop rax",
            "xor ebp, ebp",
            "call rax",
            "ud2",
            "2:",
            inlateout("rax") 56usize => _, in("rdi") FLAGS, in("rsi") sp, in("rdx") tid,
            in("r10") tid, in("r8") tls, lateout("rcx") _, lateout("r11") _,
        );
    }
}

fn join_worker() {
    loop {
        let tid = WORKER_TID.load(Ordering::Acquire);
        if tid == 0 {
            return;
        }
        // SAFETY: futex(2) FUTEX_WAIT on the tid word the kernel clears and wakes at the thread's exit.
        unsafe {
            sys::syscall(
                202,
                [WORKER_TID.as_ptr() as usize, 0, tid as usize, 0, 0, 0],
            );
        }
    }
}

/// `callbacks` mode: the current thread's slot index, from its block. Instrumented like the rest of
/// the program: the tracer must not trace it (it would recurse).
extern "C" fn current_index() -> usize {
    let index: usize;
    // SAFETY: every thread's %fs points at its ThreadBlock.
    unsafe { core::arch::asm!("mov {}, qword ptr fs:[16]", out(reg) index) };
    core::hint::black_box(index)
}

static TSC_HZ: AtomicU64 = AtomicU64::new(1);

/// `callbacks` mode: nanoseconds from the TSC. Instrumented too.
extern "C" fn now_ns() -> u64 {
    // SAFETY: rdtsc has no preconditions.
    let t = unsafe { core::arch::x86_64::_rdtsc() };
    (t as u128 * 1_000_000_000 / TSC_HZ.load(Ordering::Relaxed) as u128) as u64
}

/// The TSC's frequency, measured against CLOCK_MONOTONIC over 20 ms.
fn tsc_hz() -> u64 {
    // SAFETY: rdtsc has no preconditions.
    let tsc = || unsafe { core::arch::x86_64::_rdtsc() };
    let (t0, n0) = (tsc(), sys::monotonic_ns());
    while sys::monotonic_ns() < n0 + 20_000_000 {}
    let (t1, n1) = (tsc(), sys::monotonic_ns());
    ((t1 - t0) as u128 * 1_000_000_000 / (n1 - n0) as u128) as u64
}

/// A decimal number into `buf`; returns its text.
fn decimal(mut v: u64, buf: &mut [u8; 20]) -> &[u8] {
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            return &buf[i..];
        }
    }
}

fn parse(arg: &[u8]) -> Option<u32> {
    let mut v: u32 = 0;
    for &b in arg {
        v = v
            .checked_mul(10)?
            .checked_add(b.checked_sub(b'0').filter(|d| *d < 10)? as u32)?;
    }
    (!arg.is_empty()).then_some(v)
}

fn fail(msg: &[u8]) -> ! {
    let _ = sys::write_all(2, msg);
    sys::exit_group(2)
}

/// # Safety
/// `arg` points at a NUL-terminated string.
unsafe fn c_str<'a>(arg: *const u8) -> &'a [u8] {
    // SAFETY: the caller's.
    unsafe { core::slice::from_raw_parts(arg, strlen(arg)) }
}

/// Called by `_start` with the initial stack pointer: argc, then argv.
extern "C" fn main(sp: *const usize) -> ! {
    // SAFETY: the kernel's initial stack: argc, argv[0..argc], NULL.
    let args = unsafe { core::slice::from_raw_parts(sp.add(1) as *const *const u8, *sp) };
    if args.len() < 4 {
        fail(b"usage: freestanding OUT N REPS [untraced] [single] [callbacks]\n");
    }
    // SAFETY: argv strings are NUL-terminated.
    let arg = |i: usize| unsafe { c_str(args[i]) };
    let (Some(n), Some(reps)) = (parse(arg(2)), parse(arg(3))) else {
        fail(b"freestanding: N and REPS are numbers\n");
    };
    let flag = |f: &[u8]| (4..args.len()).any(|i| arg(i) == f);
    let (traced, single, callbacks) = (!flag(b"untraced"), flag(b"single"), flag(b"callbacks"));
    let mut path = [0u8; 4096];
    let out = arg(1);
    if out.len() >= path.len() {
        fail(b"freestanding: OUT is too long\n");
    }
    path[..out.len()].copy_from_slice(out);

    // SAFETY: single-threaded until the worker starts; each block is its thread's alone.
    unsafe {
        WORK = (n, reps);
        let blocks = &raw mut BLOCKS;
        (*blocks)[0].self_ptr = &raw const (*blocks)[0] as u64;
        (*blocks)[1].self_ptr = &raw const (*blocks)[1] as u64;
        // arch_prctl(ARCH_SET_FS): this thread's %fs block.
        sys::syscall(158, [0x1002, &raw mut (*blocks)[0] as usize, 0, 0, 0, 0]);
    }
    let hz = tsc_hz();
    if traced {
        // SAFETY: the only reference to MEMORY, handed to the tracer for good.
        let memory = unsafe { &mut *(&raw mut MEMORY) };
        // Fault every page in now (it is .bss): a page fault costs more than the events it holds.
        for page in memory.chunks_mut(4096) {
            // SAFETY: a byte of the buffer.
            unsafe { core::ptr::write_volatile(page.as_mut_ptr(), 0) };
        }
        TSC_HZ.store(hz, Ordering::Relaxed);
        let (clock, threads) = if callbacks {
            // SAFETY: `current_index` gives the main thread 0 and the worker 1.
            (Clock::ns(now_ns), unsafe { Threads::from_fn(current_index, 2) })
        } else {
            // SAFETY: each thread's %fs block is this program's own `ThreadBlock`, whose word at
            // SLOT_OFFSET is reserved for the tracer and 0 until the thread registers.
            (Clock::tsc(hz), unsafe { Threads::fs(SLOT_OFFSET, 2) })
        };
        let tracer = match init(memory, clock, threads) {
            Ok(t) => t,
            Err(_) => fail(b"freestanding: tracer set-up failed\n"),
        };
        let _ = tracer.register_thread(0, sys::gettid(), "main");
        // SAFETY: before the worker starts.
        unsafe { TRACER = Some(tracer) };
        tracer.enable();
    }
    if !single {
        // SAFETY: the worker's stack and block are its own.
        unsafe {
            let blocks = &raw mut BLOCKS;
            spawn(&raw mut WORKER_STACK, &raw mut (*blocks)[1], worker, 0);
        }
    }
    core::hint::black_box(run(0));
    // SAFETY: a C function without preconditions.
    core::hint::black_box(unsafe { cfib(10) });
    join_worker();

    if let Some(t) = tracer() {
        t.disable();
        // open(2): O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode 0600.
        // SAFETY: a NUL-terminated path.
        let fd = unsafe {
            sys::syscall(
                2,
                [
                    path.as_ptr() as usize,
                    0o1 | 0o100 | 0o200 | 0o400000 | 0o2000000,
                    0o600,
                    0,
                    0,
                    0,
                ],
            )
        };
        if fd < 0 {
            fail(b"freestanding: cannot create the trace file (it must not exist)\n");
        }
        if t.write_trace(|bytes| sys::write_all(fd as usize, bytes))
            .is_err()
        {
            fail(b"freestanding: writing the trace failed\n");
        }
        // SAFETY: close(2) of our descriptor.
        unsafe { sys::syscall(3, [fd as usize, 0, 0, 0, 0, 0]) };
    }

    let mut line = [0u8; 160];
    let mut len = 0;
    let mut put = |bytes: &[u8]| {
        line[len..len + bytes.len()].copy_from_slice(bytes);
        len += bytes.len();
    };
    let mut b = [0u8; 20];
    put(b"calls=");
    put(decimal(CALLS[0].load(Ordering::Relaxed), &mut b));
    put(b",");
    put(decimal(CALLS[1].load(Ordering::Relaxed), &mut b));
    put(b" elapsed_ns=");
    put(decimal(ELAPSED[0].load(Ordering::Relaxed), &mut b));
    put(b",");
    put(decimal(ELAPSED[1].load(Ordering::Relaxed), &mut b));
    put(b" cfib=");
    // SAFETY: written by cfib in this thread only, which has returned.
    put(decimal(
        unsafe { core::ptr::read_volatile(&raw const cfib_calls) },
        &mut b,
    ));
    put(b" tsc_hz=");
    put(decimal(hz, &mut b));
    put(b" lost=");
    put(decimal(tracer().map_or(0, |t| t.stats().lost), &mut b));
    put(b"\n");
    let _ = sys::write_all(1, &line[..len]);
    sys::exit_group(0)
}

/// The entry point: the initial stack pointer to `main`, the stack aligned for a call.
#[unsafe(naked)]
#[no_mangle]
pub unsafe extern "C" fn _start() -> ! {
    core::arch::naked_asm!("mov rdi, rsp", "and rsp, -16", "xor ebp, ebp", "call {}", "ud2", sym main)
}

#[panic_handler]
fn panic(_: &core::panic::PanicInfo<'_>) -> ! {
    fail(b"freestanding: panic\n")
}

// What the compiler calls for copies and fills: no C library here. `rep movsb`/`rep stosb`, so that
// the compiler cannot turn them into calls of themselves.

/// # Safety
/// As C's memcpy.
#[no_mangle]
pub unsafe extern "C" fn memcpy(dst: *mut u8, src: *const u8, n: usize) -> *mut u8 {
    // SAFETY: the caller's.
    unsafe {
        core::arch::asm!("rep movsb", inout("rdi") dst => _, inout("rsi") src => _, inout("rcx") n => _,
                         options(nostack, preserves_flags));
    }
    dst
}

/// # Safety
/// As C's memmove.
#[no_mangle]
pub unsafe extern "C" fn memmove(dst: *mut u8, src: *const u8, n: usize) -> *mut u8 {
    if (dst as usize).wrapping_sub(src as usize) >= n {
        // SAFETY: a forward copy is right when dst is not inside [src, src + n).
        return unsafe { memcpy(dst, src, n) };
    }
    // SAFETY: the caller's; a backward copy (std + rep movsb from the ends).
    unsafe {
        core::arch::asm!("std", "rep movsb", "cld", inout("rdi") dst.add(n - 1) => _,
                         inout("rsi") src.add(n - 1) => _, inout("rcx") n => _, options(nostack));
    }
    dst
}

/// # Safety
/// As C's memset.
#[no_mangle]
pub unsafe extern "C" fn memset(dst: *mut u8, c: i32, n: usize) -> *mut u8 {
    // SAFETY: the caller's.
    unsafe {
        core::arch::asm!("rep stosb", inout("rdi") dst => _, inout("rcx") n => _, in("al") c as u8,
                         options(nostack, preserves_flags));
    }
    dst
}

/// # Safety
/// As C's memcmp.
#[no_mangle]
pub unsafe extern "C" fn memcmp(a: *const u8, b: *const u8, n: usize) -> i32 {
    for i in 0..n {
        // SAFETY: the caller's: both have n bytes.
        let (x, y) = unsafe { (*a.add(i), *b.add(i)) };
        if x != y {
            return x as i32 - y as i32;
        }
    }
    0
}

/// # Safety
/// As C's strlen.
#[no_mangle]
pub unsafe extern "C" fn strlen(s: *const u8) -> usize {
    let mut n = 0;
    // SAFETY: the caller's; volatile reads, so that the loop is not turned into a call of strlen.
    while unsafe { core::ptr::read_volatile(s.add(n)) } != 0 {
        n += 1;
    }
    n
}

/// Never called (panic = "abort"), but the precompiled `core` refers to it.
#[no_mangle]
pub extern "C" fn rust_eh_personality() {}

/// # Safety
/// As C's bcmp.
#[no_mangle]
pub unsafe extern "C" fn bcmp(a: *const u8, b: *const u8, n: usize) -> i32 {
    // SAFETY: the caller's.
    unsafe { memcmp(a, b, n) }
}
