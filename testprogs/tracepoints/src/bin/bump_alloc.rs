//! `ferrotrace::Allocator` around a non-system allocator: a bump allocator over a static arena (frees are
//! no-ops for it, but they are still recorded). `keep_three` keeps 3 blocks of 1000 bytes alive to the
//! end; `churn` allocates and drops 100 blocks of 256 bytes. Prints `bump done`.
use std::alloc::{GlobalAlloc, Layout};
use std::cell::UnsafeCell;
use std::hint::black_box;
use std::sync::atomic::{AtomicUsize, Ordering};

const ARENA: usize = 64 << 20;

struct Bump {
    arena: UnsafeCell<[u8; ARENA]>,
    used: AtomicUsize,
}

// SAFETY: blocks are handed out by an atomic bump pointer; no two callers get the same bytes.
unsafe impl Sync for Bump {}

// SAFETY: every block is inside the arena, aligned as asked, and never handed out twice.
unsafe impl GlobalAlloc for Bump {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let base = self.arena.get() as usize;
        let mut used = self.used.load(Ordering::Relaxed);
        loop {
            let start = (base + used).next_multiple_of(layout.align());
            let end = start + layout.size();
            if end > base + ARENA {
                return std::ptr::null_mut();
            }
            match self.used.compare_exchange_weak(used, end - base, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return start as *mut u8,
                Err(u) => used = u,
            }
        }
    }

    unsafe fn dealloc(&self, _ptr: *mut u8, _layout: Layout) {}
}

#[global_allocator]
static ALLOC: ferrotrace::Allocator<Bump> =
    ferrotrace::Allocator::new(Bump { arena: UnsafeCell::new([0; ARENA]), used: AtomicUsize::new(0) });

#[inline(never)]
fn keep_three() -> Vec<Vec<u8>> {
    (0..3).map(|i| black_box(vec![i as u8; 1000])).collect()
}

#[inline(never)]
fn churn() -> usize {
    (0..100).map(|i| black_box(vec![i as u8; 256]).len()).sum()
}

fn main() {
    let kept = keep_three();
    black_box(churn());
    println!("bump done");
    ferrotrace::finish();
    black_box(kept);
}
