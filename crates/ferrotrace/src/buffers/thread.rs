//! Per-thread state: registration, the slow path behind the trampolines, and thread exit.
//!
//! Each traced thread owns one slot of the runtime's [`Registry`](crate::buffers::registry::Registry), through
//! which exit and fatal-signal handlers take the partly filled chunk of every thread.

use std::cell::Cell;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use ferrotrace_core::record::{EventKind, Record, RECORD_SIZE};

use crate::arch::thread::tls_offset;
use crate::buffers::hot::{hot_offset_here, Hot};
use crate::buffers::pool::FullChunk;
use crate::buffers::registry::{SlotGuard, SlotState, ThreadSlot};
use crate::lifecycle::config::Mode;
use crate::lifecycle::runtime::{self, Meta, Runtime};
use crate::state::PROCESS;

/// What only the owner thread needs, kept out of the hot block.
struct Cold {
    slot: Cell<*const ThreadSlot>,
    /// The runtime whose registry `slot` is in: an attached runtime is followed by another one after
    /// a detach, whose first event on this thread registers it afresh.
    owner: Cell<*const Runtime>,
    /// Inside the runtime on this thread: events from code the runtime calls are dropped, not recursed on.
    busy: Cell<bool>,
    /// Never record on this thread (the collector, a thread whose TLS offset differs, an exited thread).
    ignored: Cell<bool>,
    /// Lowest address of the thread's stack (0 if unknown): a fault just below it is a stack overflow.
    stack_low: Cell<usize>,
    /// The alternate signal stack given to the thread at registration, so that the fault handler can
    /// run when the stack itself has overflowed (null if none).
    alt_stack: Cell<*mut libc::c_void>,
}

// Per thread, not the process's: outside `crate::state`.
thread_local! {
    static COLD: Cold = const { Cold { slot: Cell::new(core::ptr::null()), owner: Cell::new(core::ptr::null()), busy: Cell::new(false), ignored: Cell::new(false), stack_low: Cell::new(0), alt_stack: Cell::new(core::ptr::null_mut()) } };
    static EXIT_GUARD: ExitGuard = const { ExitGuard };
}

/// Dropped when the thread exits: hands over its last chunk.
struct ExitGuard;

impl Drop for ExitGuard {
    fn drop(&mut self) {
        // The main thread's TLS destructors run at the start of `exit` (glibc's `__run_exit_handlers`
        // calls `__call_tls_dtors` before the atexit handlers and the ELF destructors), not when the
        // thread is gone: it keeps recording what those do (their frees above all) until the finish,
        // which takes its chunk. Its TLS is never freed, so its slot may stay alive (also after a
        // `pthread_exit` of the main thread, until the process ends).
        // So do those of a thread that called `exit` (the preload library's `exit` says which).
        // SAFETY: gettid and getpid have no preconditions.
        let tid = unsafe { libc::syscall(libc::SYS_gettid) } as i64;
        // SAFETY: as above.
        if tid == unsafe { libc::getpid() } as i64 || tid == PROCESS.exiting.load(Ordering::Relaxed)
        {
            return;
        }
        thread_exit();
    }
}

/// The calling thread is about to call the C library's `exit` (the preload library's `exit`).
#[cfg(feature = "preload")]
pub fn exit_begins() {
    // SAFETY: gettid has no preconditions.
    let tid = unsafe { libc::syscall(libc::SYS_gettid) } as i64;
    let _ = PROCESS
        .exiting
        .compare_exchange(0, tid, Ordering::Relaxed, Ordering::Relaxed);
}

/// Marks the calling thread as one the runtime never records (its own threads).
pub fn ignore_current_thread() {
    COLD.with(|c| c.ignored.set(true));
}

fn stop_hot(h: &Hot) {
    h.end.store(core::ptr::null_mut(), Ordering::Relaxed);
    h.cursor.store(core::ptr::null_mut(), Ordering::Relaxed);
}

/// In a forked child, on the thread that forked: its chunk and registry slot are the parent's copies.
/// Stops its cursor and forgets the slot, so that its next event registers it with the child's own
/// runtime.
pub fn forget_current_thread() {
    stop_hot(Hot::current());
    let _ = COLD.try_with(|cold| cold.slot.set(core::ptr::null()));
}

/// Runs `f` as runtime work on the calling thread: events of code it calls (a traced allocator, say)
/// are dropped rather than recursed on. `None` (without running `f`) when the thread is already inside
/// the runtime or never records.
pub fn as_runtime<R>(f: impl FnOnce() -> R) -> Option<R> {
    COLD.try_with(|cold| {
        if cold.busy.get() || cold.ignored.get() {
            return None;
        }
        cold.busy.set(true);
        let r = f();
        cold.busy.set(false);
        Some(r)
    })
    .ok()
    .flatten()
}

/// Counts `n` events the calling thread could not record; they are written as one `Lost` event with
/// its next chunk (or at its end).
pub fn count_lost(n: u64) {
    let _ = COLD.try_with(|cold| {
        // SAFETY: the slot pointer is null or a leaked, never-freed slot registered by this thread.
        if let Some(slot) = unsafe { cold.slot.get().as_ref() } {
            slot.lock().state().lost += n;
        }
    });
}

/// Called by `ferrotrace_slow_record` when the thread has no chunk or its chunk is full.
pub extern "C" fn slow_path(tsc: u64, word: u64) {
    record_slow(Record { tsc, word }, &[]);
}

/// Records `rec` followed by `payload` slots through the slow path (no chunk, or not enough room).
pub fn record_slow(rec: Record, payload: &[Record]) {
    let _ = COLD.try_with(|cold| {
        if cold.busy.get() || cold.ignored.get() {
            return;
        }
        cold.busy.set(true);
        if let Some(parents) = runtime::get().filter(|rt| rt.lifecycle.take_fork_restart()) {
            (parents.upcalls.fork_restart)();
        }
        if let Some(rt) = runtime::get() {
            record_with_runtime(rt, cold, rec, payload);
        }
        cold.busy.set(false);
    });
}

fn record_with_runtime(rt: &'static Runtime, cold: &Cold, rec: Record, payload: &[Record]) {
    let h = Hot::current();
    if !rt.lifecycle.is_recording() {
        stop_hot(h);
        return;
    }
    if !core::ptr::eq(cold.owner.get(), rt) {
        // Registered with an earlier runtime (attached, then stopped), or never.
        cold.slot.set(core::ptr::null());
    }
    // SAFETY: `slot` is null or a leaked, never freed ThreadSlot.
    let (slot, registered_now) = match unsafe { cold.slot.get().as_ref() } {
        Some(s) => (s, false),
        None => match register(rt, cold) {
            Some(s) => (s, true),
            None => return,
        },
    };
    let mut guard = slot.lock();
    let st = guard.state();
    if st.stopped || !st.alive {
        stop_hot(h);
        return;
    }
    hand_over(rt, st, h);
    stop_hot(h);
    if !rt.pool.full.is_empty() {
        // Now the collector has work: started if it was deferred, while this thread's cursor is
        // stopped (what the thread start calls is the runtime's work, not recorded).
        (rt.upcalls.ensure_collector)(rt);
    }
    let Some((index, guard)) = acquire_chunk(rt, slot, guard) else {
        return;
    };
    let mut rec = rec;
    if registered_now && rec.kind() == Some(EventKind::Entry) {
        // The trampoline read the clock before the thread registered (its slot, alternate signal
        // stack, name; the main thread reads /proc/self/maps) and took its first chunk: the
        // tracer's own set-up, which the function entered must not be charged with (13-310 us per
        // thread after an attach, against calls of a few). Its entry is timed from here, after the
        // registration's time (its Thread chunk's `registered_ticks`).
        rec.tsc = crate::buffers::clock::rdtsc();
    }
    let mut guard = guard;
    let st = guard.state();
    let start = rt.pool.chunk_ptr(index);
    let cap = rt.pool.chunk_records();
    let mut n = 0usize;
    let mut put = |r: Record| {
        if n < cap {
            // SAFETY: n < cap, inside the chunk this thread now owns.
            unsafe { start.add(n).write(r) };
            n += 1;
        }
    };
    for lost in Record::lost(rec.tsc, core::mem::take(&mut st.lost)) {
        put(lost);
    }
    if st.waited_ns > 0 {
        put(Record::new(
            rec.tsc,
            EventKind::Wait,
            st.waited_ns.min(u32::MAX as u64) as u32,
        ));
        st.waited_ns = 0;
    }
    put(rec);
    for p in payload {
        put(*p);
    }
    st.chunk = Some(index);
    if let Some(d) = rt.pool.descriptor(index) {
        // Read now, after the chunk was taken: every record the thread writes from here on is newer,
        // everything an earlier owner left in the chunk older (ferrotrace_core::shared).
        let epoch = crate::buffers::clock::rdtsc();
        d.own(st.tid, st.seq, n as u32, epoch, &st.name);
    }
    // SAFETY: n <= cap, and cap records is the chunk's size: both stay inside (or one past) the chunk.
    let (cursor, end) = unsafe { (start.add(n), start.add(cap)) };
    h.cursor.store(cursor, Ordering::Relaxed);
    h.end.store(end, Ordering::Relaxed);
}

/// Gets a free chunk for the slot's thread according to the mode. In lossless and flight mode it waits,
/// releasing the slot lock meanwhile so that a final flush can stop the thread (in lossless mode
/// writing full chunks itself while the collector does not keep up: `collector::help`; the time counts
/// as waited); in drop mode it gives up at once and counts the event as lost.
fn acquire_chunk<'a>(
    rt: &Runtime,
    slot: &'a ThreadSlot,
    mut guard: SlotGuard<'a>,
) -> Option<(u32, SlotGuard<'a>)> {
    let mut wait_start: Option<Instant> = None;
    loop {
        if let Some(i) = rt.pool.take() {
            if let Some(t) = wait_start {
                guard.state().waited_ns += t.elapsed().as_nanos() as u64;
            }
            return Some((i, guard));
        }
        // No free chunk, whatever the mode: only the collector frees chunks, and the queue may still be
        // under its wake threshold (most chunks held by threads).
        rt.lifecycle.wake_collector();
        if rt.config.mode == Mode::Drop {
            guard.state().lost += 1;
            return None;
        }
        wait_start.get_or_insert_with(Instant::now);
        drop(guard);
        if !crate::buffers::collector::help(rt) {
            std::thread::sleep(Duration::from_micros(20));
        }
        guard = slot.lock();
        if guard.state().stopped || !rt.lifecycle.is_recording() {
            return None;
        }
    }
}

/// Records the owner has written into chunk `index` so far, read from its cursor (records before the
/// cursor are complete: the cursor is stored after them).
fn written(rt: &Runtime, index: u32, h: &Hot) -> usize {
    let start = rt.pool.chunk_ptr(index) as usize;
    let cursor = h.cursor.load(Ordering::Acquire) as usize;
    (cursor.saturating_sub(start) / RECORD_SIZE).min(rt.pool.chunk_records())
}

/// Hands the slot's current chunk, if it has one, to the collector with everything written into it.
/// The thread's cursor is stopped before the chunk is queued: the queue's code may be traced (the
/// program may use the same library), and its events must not land in a chunk the collector owns.
fn hand_over(rt: &Runtime, st: &mut SlotState, h: &Hot) {
    if let Some(index) = st.chunk.take() {
        let len = written(rt, index, h);
        stop_hot(h);
        submit(rt, index, len, st);
    }
}

/// Passes on the count of events an exiting thread lost and never got a chunk to record the loss in.
fn report_lost(rt: &Runtime, st: &mut SlotState) {
    if st.lost > 0 {
        rt.push_meta(Meta::Lost {
            tid: st.tid,
            count: st.lost,
            tsc: crate::buffers::clock::rdtsc(),
        });
        st.lost = 0;
    }
}

/// For the collector, once the final flush has stopped every thread: takes the counts of events that
/// stopped threads lost and never recorded as `Lost` (the flush leaves them in the slots: it may run in
/// a signal handler, where nothing may allocate). `(tid, count)` per thread that lost any.
pub fn take_unreported_losses(rt: &Runtime) -> Vec<(u32, u64)> {
    let mut out = Vec::new();
    for slot in rt.registry.iter() {
        let Some(mut guard) = slot.try_lock_for(Some(Duration::from_millis(100))) else {
            continue;
        };
        let st = guard.state();
        if st.stopped && st.lost > 0 {
            out.push((st.tid, std::mem::take(&mut st.lost)));
        }
    }
    out
}

fn submit(rt: &Runtime, index: u32, len: usize, st: &mut SlotState) {
    let chunk = FullChunk {
        index,
        len: len as u32,
        tid: st.tid,
        seq: st.seq,
        skip: std::mem::take(&mut st.dumped),
    };
    st.seq = st.seq.wrapping_add(1);
    if let Some(d) = rt.pool.descriptor(index) {
        d.queue(chunk.seq, chunk.len, chunk.skip);
    }
    if rt.pool.full.push(chunk).is_err() {
        // Cannot happen: the queue holds every chunk there is. Keep the chunk rather than lose memory.
        rt.pool.free.push(index);
    }
    if rt.pool.backlog_needs_collector() {
        rt.lifecycle.wake_collector();
    }
}

fn gettid() -> u32 {
    // SAFETY: gettid has no arguments and cannot fail.
    unsafe { libc::syscall(libc::SYS_gettid) as u32 }
}

/// The calling thread's name as the kernel keeps it (prctl PR_GET_NAME): up to 16 bytes, NUL-padded.
/// Async-signal-safe.
pub fn thread_name_bytes() -> [u8; 16] {
    let mut buf = [0u8; 17];
    // SAFETY: PR_GET_NAME writes at most 16 bytes plus NUL into the buffer.
    unsafe {
        libc::prctl(
            libc::PR_GET_NAME,
            buf.as_mut_ptr() as libc::c_ulong,
            0,
            0,
            0,
        )
    };
    let mut name = [0u8; 16];
    name.copy_from_slice(&buf[..16]);
    name
}

/// The calling thread's name.
pub fn current_thread_name() -> String {
    name_of(&thread_name_bytes())
}

/// A thread name as `PR_GET_NAME` gives it (NUL-padded), as text.
fn name_of(buf: &[u8; 16]) -> String {
    let len = buf.iter().position(|&b| b == 0).unwrap_or(16);
    String::from_utf8_lossy(&buf[..len]).into_owned()
}

fn register(rt: &'static Runtime, cold: &Cold) -> Option<&'static ThreadSlot> {
    // The trampolines assume one TLS offset for all threads; refuse a thread where that does not hold
    // rather than write through a wrong pointer.
    if hot_offset_here() != tls_offset() {
        cold.ignored.set(true);
        return None;
    }
    let tid = gettid();
    let name = thread_name_bytes();
    let fresh = || SlotState {
        tid,
        hot: Hot::current(),
        chunk: None,
        seq: 0,
        lost: 0,
        waited_ns: 0,
        dumped: 0,
        name,
        alive: true,
        stopped: false,
    };
    // A dead slot is claimed (marked alive) under its own lock, in the same critical section that found
    // it free: a thread registering at the same moment cannot take it too.
    let reused = rt.registry.iter().find(|s| {
        let mut g = s.lock();
        let st = g.state();
        let free = !st.alive && st.chunk.is_none() && st.lost == 0;
        if free {
            *st = fresh();
        }
        free
    });
    let slot = reused.unwrap_or_else(|| rt.registry.push(Box::new(ThreadSlot::new(fresh()))));
    let _ = EXIT_GUARD.try_with(|_| {});
    cold.slot.set(slot);
    cold.owner.set(rt);
    prepare_for_faults(cold);
    // Read once the set-up is done: the entry that registered the thread is timed from later still
    // (`record_with_runtime`), which a reader can check against this.
    rt.push_meta(Meta::Thread {
        tid,
        name: name_of(&name),
        registered_ticks: crate::buffers::clock::rdtsc(),
    });
    Some(slot)
}

/// Bytes of the alternate signal stack each traced thread gets (plus a guard page below it).
const ALT_STACK: usize = 64 << 10;

/// The calling thread's stack, `(lowest address, one past the highest)`, asked once per thread (both
/// the registration and the allocation hooks want it; for the main thread glibc reads
/// `/proc/self/maps` to answer).
pub fn stack_bounds() -> Option<(usize, usize)> {
    thread_local! {
        static BOUNDS: core::cell::Cell<Option<(usize, usize)>> = const { core::cell::Cell::new(None) };
    }
    if let Some(b) = BOUNDS.try_with(|b| b.get()).ok().flatten() {
        return Some(b);
    }
    // SAFETY: plain queries of the calling thread's attributes into a zeroed out-struct, destroyed after.
    let bounds = unsafe {
        let mut attr: libc::pthread_attr_t = core::mem::zeroed();
        if libc::pthread_getattr_np(libc::pthread_self(), &mut attr) != 0 {
            return None;
        }
        let mut addr: *mut libc::c_void = core::ptr::null_mut();
        let mut size: libc::size_t = 0;
        let ok = libc::pthread_attr_getstack(&attr, &mut addr, &mut size) == 0;
        libc::pthread_attr_destroy(&mut attr);
        ok.then_some((addr as usize, addr as usize + size))
    };
    let _ = BOUNDS.try_with(|b| b.set(bounds));
    bounds
}

/// Notes where the thread's stack ends and gives it an alternate signal stack, unless it has one: the
/// fault handler must run, and tell a stack overflow from other faults, when the stack is exhausted.
/// (Rust's std sets these up itself only when it installed its own SIGSEGV handler, which it does not
/// when the runtime's came first.)
fn prepare_for_faults(cold: &Cold) {
    if let Some((low, _)) = stack_bounds() {
        cold.stack_low.set(low);
    }
    // SAFETY: the mapping and sigaltstack calls are checked, and the stack is only installed if none
    // is in place.
    unsafe {
        let mut current: libc::stack_t = core::mem::zeroed();
        if libc::sigaltstack(core::ptr::null(), &mut current) != 0
            || current.ss_flags & libc::SS_DISABLE == 0
        {
            return;
        }
        let page = crate::arch::thread::PAGE;
        let map = libc::mmap(
            core::ptr::null_mut(),
            ALT_STACK + page,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        );
        if map == libc::MAP_FAILED {
            return;
        }
        libc::mprotect(map, page, libc::PROT_NONE);
        let stack = libc::stack_t {
            ss_sp: map.cast::<u8>().add(page).cast(),
            ss_flags: 0,
            ss_size: ALT_STACK,
        };
        if libc::sigaltstack(&stack, core::ptr::null_mut()) == 0 {
            cold.alt_stack.set(map);
        } else {
            libc::munmap(map, ALT_STACK + page);
        }
    }
}

/// True when a fault at `addr` on the calling thread hit just below its stack: a stack overflow.
/// Async-signal-safe (reads the thread's own constant-initialised TLS).
pub fn is_stack_overflow(addr: usize) -> bool {
    COLD.try_with(|c| {
        let low = c.stack_low.get();
        low != 0 && addr < low + crate::arch::thread::PAGE && addr + (1 << 20) >= low
    })
    .unwrap_or(false)
}

fn thread_exit() {
    let _ = COLD.try_with(|cold| {
        cold.busy.set(true);
        cold.ignored.set(true);
        // SAFETY: `slot` is null or a leaked, never freed ThreadSlot.
        let Some(slot) = (unsafe { cold.slot.get().as_ref() }) else {
            return;
        };
        cold.slot.set(core::ptr::null());
        // The runtime the slot belongs to (it may have stopped since: then the slot is stopped too).
        // SAFETY: null or a leaked runtime, never freed.
        let Some(rt) = (unsafe { cold.owner.get().as_ref() }) else {
            return;
        };
        let h = Hot::current();
        let mut guard = slot.lock();
        let st = guard.state();
        if !st.stopped {
            hand_over(rt, st, h);
        }
        // Before anything below allocates: allocator shims in the program are traced functions, and
        // their events must not land in the chunk just handed over (another thread may own it already).
        stop_hot(h);
        if !st.stopped {
            report_lost(rt, st);
            // The name may have changed since registration.
            rt.push_meta(Meta::Thread {
                tid: st.tid,
                name: current_thread_name(),
                registered_ticks: 0,
            });
        }
        st.alive = false;
        st.hot = core::ptr::null();
        drop(guard);
        if !rt.pool.full.is_empty() {
            (rt.upcalls.ensure_collector)(rt);
        }
        for r in rt.upcalls.recorders {
            (r.thread_exit)();
        }
        let alt = cold.alt_stack.replace(core::ptr::null_mut());
        if !alt.is_null() {
            // SAFETY: disabling the alternate stack we installed before unmapping it.
            unsafe {
                let off = libc::stack_t {
                    ss_sp: core::ptr::null_mut(),
                    ss_flags: libc::SS_DISABLE,
                    ss_size: 0,
                };
                if libc::sigaltstack(&off, core::ptr::null_mut()) == 0 {
                    libc::munmap(alt, ALT_STACK + crate::arch::thread::PAGE);
                }
            }
        }
    });
}

/// Takes the partly filled chunk of every registered thread and stops them all: used once, at the end.
/// Bounded in time and, with `from_signal`, free of allocation, so that it is usable from a fatal-signal
/// handler, where a lock (the allocator's among them) may be held by the interrupted code. Counts of
/// lost events stay in the slots for the collector ([`take_unreported_losses`]).
pub fn flush_all(rt: &Runtime, from_signal: bool) {
    for slot in rt.registry.iter() {
        let Some(mut guard) = slot.try_lock_for(Some(Duration::from_millis(100))) else {
            continue;
        };
        let st = guard.state();
        if !st.alive || st.stopped {
            continue;
        }
        st.stopped = true;
        // SAFETY: the owner is alive (it marks itself dead under this lock before its TLS goes away).
        let h = unsafe { &*st.hot };
        h.end.store(core::ptr::null_mut(), Ordering::Relaxed);
        hand_over(rt, st, h);
        if !from_signal {
            if let Ok(name) = std::fs::read_to_string(format!("/proc/self/task/{}/comm", st.tid)) {
                rt.push_meta(Meta::Thread {
                    tid: st.tid,
                    name: name.trim_end().to_string(),
                    registered_ticks: 0,
                });
            }
        }
    }
}

/// For the collector (its thread, or a thread holding its state): offers `write` what each live thread
/// has written into its current chunk since the last dump, `(tid, seq, records)`, under the thread's
/// slot lock (so the thread hands over no chunk meanwhile). When `write` takes them (returns true) the
/// thread moves on to the next sequence number, which the rest of that chunk will carry when it is
/// handed over (without the records written here: [`FullChunk::skip`]). The owner keeps writing
/// meanwhile: records below its cursor are final, and a chunk is only ever freed by the collector.
/// Used by a flight-mode dump (SIGUSR2) and, where no `ferrotrace record` can recover the chunks
/// after a SIGKILL, every second (`collector::run`).
pub fn dump_current_chunks(rt: &Runtime, mut write: impl FnMut(u32, u32, &[Record]) -> bool) {
    for slot in rt.registry.iter() {
        let Some(mut guard) = slot.try_lock_for(Some(Duration::from_millis(100))) else {
            continue;
        };
        let st = guard.state();
        let Some(index) = st
            .chunk
            .filter(|_| st.alive && !st.stopped && !st.hot.is_null())
        else {
            continue;
        };
        // SAFETY: the owner is alive (checked under the slot lock), so its HOT block is.
        let upto = written(rt, index, unsafe { &*st.hot });
        let from = st.dumped as usize;
        if upto > from {
            // SAFETY: the records below the owner's cursor are written and stay put until the chunk
            // comes back to the collector.
            let records = unsafe { rt.pool.records(index, upto) };
            if !write(st.tid, st.seq, &records[from..]) {
                continue;
            }
            st.seq = st.seq.wrapping_add(1);
            st.dumped = upto as u32;
            if let Some(d) = rt.pool.descriptor(index) {
                d.dumped(st.seq, st.dumped);
            }
        }
    }
}

/// For the live printer (collector thread only): `(tid, seq, chunk index, records written)` of every
/// live thread's current chunk. Takes each slot lock briefly, never the owner's fast path.
pub fn current_chunks(rt: &Runtime) -> Vec<(u32, u32, u32, usize)> {
    let mut out = Vec::new();
    for slot in rt.registry.iter() {
        let mut guard = slot.lock();
        let st = guard.state();
        if !st.alive || st.stopped || st.hot.is_null() {
            continue;
        }
        if let Some(index) = st.chunk {
            // SAFETY: the owner is alive (checked under the slot lock), so its HOT block is.
            let h = unsafe { &*st.hot };
            out.push((st.tid, st.seq, index, written(rt, index, h)));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::alloc::{GlobalAlloc, Layout, System};
    use std::cell::Cell;

    /// Counts the allocations of the threads that ask it to.
    struct Counting;

    thread_local! {
        static COUNTING: Cell<bool> = const { Cell::new(false) };
        static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
    }

    fn note() {
        let _ = COUNTING.try_with(|c| {
            if c.get() {
                let _ = ALLOCATIONS.try_with(|a| a.set(a.get() + 1));
            }
        });
    }

    // SAFETY: forwards to the system allocator; the bookkeeping is thread-local and allocation-free.
    unsafe impl GlobalAlloc for Counting {
        unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
            note();
            // SAFETY: the caller keeps GlobalAlloc's contract, which System's shares.
            unsafe { System.alloc(layout) }
        }
        unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
            // SAFETY: as above.
            unsafe { System.dealloc(ptr, layout) }
        }
        unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
            note();
            // SAFETY: as above.
            unsafe { System.realloc(ptr, layout, new_size) }
        }
    }

    #[global_allocator]
    static ALLOCATOR: Counting = Counting;

    /// What the fatal-signal handler runs (`finish` from a signal) must not allocate: the signal may
    /// have interrupted the allocator itself, holding its lock. It used to, pushing the threads' lost
    /// counts onto the metadata queue (`Vec::push`).
    #[test]
    fn finishing_from_a_signal_handler_does_not_allocate() {
        let dir = std::env::temp_dir().join(format!("ft-nolloc-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let rt = crate::lifecycle::start::start_for_test(crate::lifecycle::config::Config {
            output: dir.join("t.data"),
            include: Vec::new(),
            exclude: Vec::new(),
            patch: Vec::new(),
            functions: true,
            mode: Mode::Drop,
            buffer_size: 4 << 10,
            chunk_size: 1 << 10,
            shadow_depth: crate::lifecycle::config::DEFAULT_SHADOW_DEPTH,
            max_depth: None,
            subtrees: true,
            min_call_ns: 0,
            triggers: Vec::new(),
            args: Vec::new(),
            args_by_name: Default::default(),
            sampled: false,
        });
        // This thread and another one register and hold a chunk each; both lost events (drop mode).
        let record = |n: u32| {
            record_slow(
                Record::new(crate::buffers::clock::rdtsc(), EventKind::Entry, n),
                &[],
            )
        };
        let add_lost = |n: u64| {
            COLD.with(|cold| {
                // SAFETY: the slot of a registered thread lives as long as the process.
                let slot = unsafe { &*cold.slot.get() };
                slot.lock().state().lost += n;
            })
        };
        record(1);
        add_lost(7);
        let (registered, finished) = (std::sync::Barrier::new(2), std::sync::Barrier::new(2));
        std::thread::scope(|s| {
            s.spawn(|| {
                record(2);
                add_lost(5);
                registered.wait();
                finished.wait();
            });
            registered.wait();
            // The collector takes the queued metadata (the threads' names) every 5 ms at most: after
            // that the queue holds nothing, and a push would allocate.
            std::thread::sleep(Duration::from_millis(50));
            // The counter works: one allocation is seen.
            COUNTING.with(|c| c.set(true));
            drop(std::hint::black_box(Box::new(1u64)));
            COUNTING.with(|c| c.set(false));
            assert_eq!(ALLOCATIONS.with(|a| a.replace(0)), 1);
            COUNTING.with(|c| c.set(true));
            let done =
                crate::lifecycle::exit::finish(rt, runtime::EndReason::Signal, libc::SIGTERM, true);
            COUNTING.with(|c| c.set(false));
            finished.wait();
            assert_eq!(done, crate::lifecycle::exit::Finished::Here);
        });
        assert_eq!(
            ALLOCATIONS.with(Cell::get),
            0,
            "allocations while finishing from a signal"
        );
        assert!(
            rt.lifecycle.phase() >= runtime::Phase::Written,
            "the End chunk was written"
        );
        let file = std::fs::read(dir.join("t.data")).unwrap();
        // The End chunk is the last one.
        use ferrotrace_core::format::{ChunkHeader, ChunkKind, CHUNK_HEADER_LEN, FILE_HEADER_LEN};
        use ferrotrace_core::schema::Payload;
        let mut at = FILE_HEADER_LEN;
        let mut last = None;
        while at + CHUNK_HEADER_LEN <= file.len() {
            let h = ChunkHeader::decode(file[at..at + CHUNK_HEADER_LEN].try_into().unwrap());
            let payload = &file[at + CHUNK_HEADER_LEN..at + CHUNK_HEADER_LEN + h.len as usize];
            last = Some((h.kind, payload));
            at += CHUNK_HEADER_LEN + h.len as usize;
        }
        let (kind, payload) = last.unwrap();
        assert_eq!(kind, ChunkKind::End as u32);
        let end = ferrotrace_core::schema::End::decode(
            &mut ferrotrace_core::codec::FieldReader::new(payload),
        )
        .unwrap();
        assert_eq!(
            (end.signal, end.lost),
            (15, 12),
            "End: signal 15, 12 events lost (7 + 5)"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
