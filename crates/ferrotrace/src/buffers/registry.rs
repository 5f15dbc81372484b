//! The thread registry: one [`ThreadSlot`] per traced thread (leaked, reused after the thread exits),
//! listed so that exit and fatal-signal handlers can take the partly filled chunk of every thread. A
//! slot's mutable part is guarded by a tiny spin lock that only the owner's slow path, its exit, the
//! final flush and the collector take: never the fast path. The registry itself takes no lock: slots
//! are only ever added (to the front of a list), so a signal handler can walk it whatever the
//! interrupted code was doing.

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicBool, AtomicPtr, Ordering};
use std::time::{Duration, Instant};

use crate::buffers::hot::Hot;

/// A traced thread's part of its slot, behind the slot's lock.
pub struct SlotState {
    /// OS thread id.
    pub tid: u32,
    /// The thread's `HOT` block (null once it exited).
    pub hot: *const Hot,
    /// The chunk it writes into, if any.
    pub chunk: Option<u32>,
    /// Sequence number of that chunk.
    pub seq: u32,
    /// Events that found no chunk (drop mode), not yet written as a `Lost` record.
    pub lost: u64,
    /// Nanoseconds spent waiting for a chunk (lossless mode), not yet written as a `Wait` record.
    pub waited_ns: u64,
    /// Records of the current chunk that a dump (`thread::dump_current_chunks`) has written already.
    pub dumped: u32,
    /// The thread's name at registration, for the shared chunk descriptors.
    pub name: [u8; 16],
    /// The thread runs (its TLS, `hot` included, is there).
    pub alive: bool,
    /// The final flush stopped it.
    pub stopped: bool,
}

/// One traced thread's registry entry.
pub struct ThreadSlot {
    lock: AtomicBool,
    state: UnsafeCell<SlotState>,
    /// The slot added to the registry before this one (set once, before this one is published).
    next: *const ThreadSlot,
}

/// Every slot that ever recorded, newest first: a list that only grows (slots are reused, never
/// freed), so walking it needs no lock, from a signal handler too.
pub struct Registry {
    head: AtomicPtr<ThreadSlot>,
}

// SAFETY: the list is only changed by the compare-exchange in `push`; the slots it links are 'static
// and never unlinked.
unsafe impl Sync for Registry {}
// SAFETY: as above.
unsafe impl Send for Registry {}

impl Registry {
    /// An empty registry.
    pub const fn new() -> Registry {
        Registry {
            head: AtomicPtr::new(core::ptr::null_mut()),
        }
    }

    /// Adds a slot (whose state its creator has set up already).
    pub fn push(&self, slot: Box<ThreadSlot>) -> &'static ThreadSlot {
        let slot = Box::into_raw(slot);
        let mut head = self.head.load(Ordering::Acquire);
        loop {
            // SAFETY: `slot` is ours until the compare-exchange below publishes it.
            unsafe { (*slot).next = head };
            match self
                .head
                .compare_exchange_weak(head, slot, Ordering::AcqRel, Ordering::Acquire)
            {
                // SAFETY: leaked on purpose: slots live as long as the process.
                Ok(_) => return unsafe { &*slot },
                Err(h) => head = h,
            }
        }
    }

    /// Every slot, newest first.
    pub fn iter(&self) -> impl Iterator<Item = &'static ThreadSlot> {
        // SAFETY: every pointer in the list is a leaked, fully initialised slot (published by the
        // release in `push`, read with acquire).
        let mut next = unsafe { self.head.load(Ordering::Acquire).as_ref() };
        core::iter::from_fn(move || {
            let slot = next?;
            // SAFETY: as above; `next` was set before the slot was published.
            next = unsafe { slot.next.as_ref() };
            Some(slot)
        })
    }
}

impl Default for Registry {
    fn default() -> Registry {
        Registry::new()
    }
}

// SAFETY: `state` is only touched with `lock` held.
unsafe impl Sync for ThreadSlot {}

/// A slot's lock, held.
pub struct SlotGuard<'a>(&'a ThreadSlot);

impl ThreadSlot {
    /// A slot with `state`, not in a registry yet.
    pub fn new(state: SlotState) -> ThreadSlot {
        ThreadSlot {
            lock: AtomicBool::new(false),
            state: UnsafeCell::new(state),
            next: core::ptr::null(),
        }
    }

    /// Takes the slot's lock, spinning then yielding; gives up after `limit` (if any).
    pub fn try_lock_for(&self, limit: Option<Duration>) -> Option<SlotGuard<'_>> {
        let start = limit.map(|_| Instant::now());
        let mut spins = 0u32;
        while self
            .lock
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            spins += 1;
            if spins < 100 {
                core::hint::spin_loop();
            } else {
                std::thread::yield_now();
                if let (Some(limit), Some(start)) = (limit, start) {
                    if start.elapsed() > limit {
                        return None;
                    }
                }
            }
        }
        Some(SlotGuard(self))
    }

    /// Takes the slot's lock, however long it takes.
    pub fn lock(&self) -> SlotGuard<'_> {
        match self.try_lock_for(None) {
            Some(g) => g,
            None => unreachable!("an unbounded lock attempt cannot time out"),
        }
    }
}

impl SlotGuard<'_> {
    /// The slot's state.
    pub fn state(&mut self) -> &mut SlotState {
        // SAFETY: the guard holds the lock.
        unsafe { &mut *self.0.state.get() }
    }
}

impl Drop for SlotGuard<'_> {
    fn drop(&mut self) {
        self.0.lock.store(false, Ordering::Release);
    }
}
