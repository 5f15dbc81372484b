//! Tracepoint cost, side by side with `tracing::event!`. Run by `bench/tracepoints.sh`, which counts
//! instructions with callgrind (disabled cost) and times the enabled path; by hand:
//!
//! ```text
//! tracepoints MODE N      MODE: none | disabled | tracing-off | rdtsc | enabled | tracing-on
//!                                | rdtscp | rseq-cpu
//! ```
//!
//! Every mode runs the same loop of N iterations (`acc = black_box(acc + i)`); `disabled` adds a
//! tracepoint site with two integer arguments, `tracing-off` a `tracing::event!` with two integer fields
//! and no subscriber (the event is rejected by the level filter), `enabled` the tracepoint enabled and
//! recorded (run it under `FERROTRACE_TRACE=bench_tp`), `tracing-on` the event delivered to a subscriber
//! that stores TSC and fields into a per-thread buffer in memory, `rdtsc` the loop with one `rdtsc` (the
//! floor of any timestamped event). `rdtscp` and `rseq-cpu` are the two ways to learn an event's CPU
//! that were weighed for the records' CPU field: `rdtscp` (a timestamp and the CPU, in place of
//! `rdtsc`), and one load of `cpu_id` from the thread's rseq area (what the runtime does). Prints
//! `MODE N ns_per_iteration`.
use std::cell::RefCell;
use std::hint::black_box;
use std::time::Instant;

ferrotrace::tracepoint!(bench_tp, i: u64, acc: u64);

#[inline(never)]
fn loop_none(n: u64) -> u64 {
    let mut acc = 0u64;
    for i in 0..n {
        acc = black_box(acc.wrapping_add(i));
    }
    acc
}

#[inline(never)]
fn loop_tracepoint(n: u64) -> u64 {
    let mut acc = 0u64;
    for i in 0..n {
        acc = black_box(acc.wrapping_add(i));
        ferrotrace::trace!(bench_tp(i, acc));
    }
    acc
}

#[inline(never)]
fn loop_rdtsc(n: u64) -> u64 {
    let mut acc = 0u64;
    for i in 0..n {
        acc = black_box(acc.wrapping_add(i));
        // SAFETY: rdtsc has no preconditions.
        black_box(unsafe { core::arch::x86_64::_rdtsc() });
    }
    acc
}

#[inline(never)]
fn loop_rdtscp(n: u64) -> u64 {
    let mut acc = 0u64;
    for i in 0..n {
        acc = black_box(acc.wrapping_add(i));
        let mut cpu = 0u32;
        // SAFETY: rdtscp has no preconditions on x86_64 CPUs that have it (all this project runs on).
        black_box(unsafe { core::arch::x86_64::__rdtscp(&mut cpu) });
        black_box(cpu);
    }
    acc
}

/// `cpu_id` of the thread's rseq area, as an offset from the thread pointer (glibc's `__rseq_offset`
/// + 4), or 0 where the C library does not register rseq.
static RSEQ_CPU: std::sync::atomic::AtomicI64 = std::sync::atomic::AtomicI64::new(0);

#[inline(never)]
fn loop_rseq_cpu(n: u64) -> u64 {
    let thread_pointer: usize;
    // SAFETY: on x86_64 Linux, %fs:0 holds the thread control block's own address.
    unsafe {
        core::arch::asm!("mov {}, qword ptr fs:[0]", out(reg) thread_pointer, options(nostack, readonly))
    };
    let cpu_id =
        (thread_pointer as i64 + RSEQ_CPU.load(std::sync::atomic::Ordering::Relaxed)) as *const u16;
    let mut acc = 0u64;
    for i in 0..n {
        acc = black_box(acc.wrapping_add(i));
        // SAFETY: inside the thread's control block (main checked that glibc exports the offset); a
        // volatile load, as the kernel updates it.
        black_box(unsafe { cpu_id.read_volatile() });
    }
    acc
}

#[inline(never)]
fn loop_tracing(n: u64) -> u64 {
    let mut acc = 0u64;
    for i in 0..n {
        acc = black_box(acc.wrapping_add(i));
        tracing::event!(tracing::Level::TRACE, i, acc);
    }
    acc
}

thread_local! {
    static MEM: RefCell<Vec<[u64; 3]>> = RefCell::new(Vec::with_capacity(1 << 20));
}

/// A subscriber that records every event (TSC and integer fields) into a per-thread buffer.
struct Memory;

struct Fields([u64; 2], usize);

impl tracing::field::Visit for Fields {
    fn record_u64(&mut self, _f: &tracing::field::Field, v: u64) {
        if self.1 < 2 {
            self.0[self.1] = v;
            self.1 += 1;
        }
    }
    fn record_debug(&mut self, _f: &tracing::field::Field, _v: &dyn std::fmt::Debug) {}
}

impl tracing::Subscriber for Memory {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, e: &tracing::Event<'_>) {
        let mut f = Fields([0; 2], 0);
        e.record(&mut f);
        // SAFETY: rdtsc has no preconditions.
        let tsc = unsafe { core::arch::x86_64::_rdtsc() };
        MEM.with(|m| {
            let mut m = m.borrow_mut();
            if m.len() == m.capacity() {
                m.clear();
            }
            m.push([tsc, f.0[0], f.0[1]]);
        });
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

fn main() {
    let mut args = std::env::args().skip(1).filter(|a| a != "--bench");
    let mode = args.next().unwrap_or_else(|| "none".into());
    let n: u64 = args
        .next()
        .and_then(|a| a.parse().ok())
        .unwrap_or(1_000_000);
    let run = |f: fn(u64) -> u64| {
        black_box(f(1000)); // warm up (first chunk, lazy init)
        let t = Instant::now();
        black_box(f(n));
        t.elapsed().as_nanos() as f64 / n as f64
    };
    let ns = match mode.as_str() {
        "none" => run(loop_none),
        "disabled" => run(loop_tracepoint),
        "tracing-off" => run(loop_tracing),
        "rdtsc" => run(loop_rdtsc),
        "rdtscp" => run(loop_rdtscp),
        "rseq-cpu" => {
            // SAFETY: dlsym with a NUL-terminated name; glibc's symbol is a ptrdiff_t.
            let offset = unsafe {
                let sym = libc::dlsym(libc::RTLD_DEFAULT, c"__rseq_offset".as_ptr());
                (!sym.is_null()).then(|| (sym as *const isize).read())
            };
            let Some(offset) = offset else {
                eprintln!("rseq-cpu: the C library does not export __rseq_offset (glibc < 2.35)");
                std::process::exit(2);
            };
            RSEQ_CPU.store(offset as i64 + 4, std::sync::atomic::Ordering::Relaxed);
            run(loop_rseq_cpu)
        }
        "enabled" => {
            if !ferrotrace::is_recording() {
                eprintln!(
                    "note: not recording (run with FERROTRACE_TRACE=bench_tp): events go nowhere"
                );
            }
            ferrotrace::tracepoints::enable("bench_tp");
            run(loop_tracepoint)
        }
        "tracing-on" => tracing::subscriber::with_default(Memory, || run(loop_tracing)),
        other => {
            eprintln!("unknown mode {other}");
            std::process::exit(2);
        }
    };
    println!("{mode} {n} {ns:.2}");
}
