//! Which function id each live span records under, by its `tracing` span id: filled when a span is
//! created, read at every enter and exit, so that these need not look the span up in the registry
//! (a sharded-slab access: two atomic read-modify-writes of its reference count). A direct-mapped
//! table: a newer span whose id lands on the same slot replaces the older, whose enters and exits
//! then fall back to the registry; nothing is removed (a closed span's id is not reused by the
//! registry with another callsite: a reused slot gets a new generation, hence a new id).
//!
//! A slot is `{id, function}`. A writer takes the slot by swapping its id for [`WRITING`], stores the
//! function id, then the span id; a reader loads the id, the function id, and the id again, and
//! trusts the function id only when both loads of the id are the span's: in between, the slot was
//! not written, or only rewritten with the same span (and so the same function id).

use std::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};

/// Slots: a power of two.
const SLOTS: usize = 1 << 12;
/// The id of a slot being written (no span has it: `tracing` ids are non-zero, and the registry's are
/// far below).
const WRITING: u64 = u64::MAX;

struct Slot {
    id: AtomicU64,
    function: AtomicU32,
}

static TABLE: [Slot; SLOTS] = [const {
    Slot {
        id: AtomicU64::new(0),
        function: AtomicU32::new(0),
    }
}; SLOTS];

fn slot(id: u64) -> &'static Slot {
    &TABLE[(id.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - SLOTS.trailing_zeros())) as usize]
}

/// Span `id` records under `function`.
pub fn insert(id: u64, function: u32) {
    let s = slot(id);
    let mut seen = s.id.load(Ordering::Relaxed);
    loop {
        if seen == WRITING {
            // Another thread writes this slot for its own new span: the newer of the two wins
            // either way; this span's enters and exits fall back to the registry.
            return;
        }
        match s
            .id
            .compare_exchange_weak(seen, WRITING, Ordering::Acquire, Ordering::Relaxed)
        {
            Ok(_) => break,
            Err(now) => seen = now,
        }
    }
    s.function.store(function, Ordering::Relaxed);
    s.id.store(id, Ordering::Release);
}

/// The function id span `id` records under, if the table still holds it.
#[inline(always)]
pub fn get(id: u64) -> Option<u32> {
    let s = slot(id);
    let before = s.id.load(Ordering::Acquire);
    let function = s.function.load(Ordering::Relaxed);
    fence(Ordering::Acquire);
    let after = s.id.load(Ordering::Relaxed);
    (before == id && after == id).then_some(function)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_span_is_found_until_a_colliding_one_replaces_it() {
        insert(7, 70);
        assert_eq!(get(7), Some(70));
        assert_eq!(get(8), None);
        // Another id on the same slot.
        let other = (1..u64::MAX)
            .map(|k| 7 + (k << 20))
            .find(|&o| std::ptr::eq(slot(o), slot(7)))
            .unwrap();
        insert(other, 71);
        assert_eq!(get(other), Some(71));
        assert_eq!(get(7), None);
    }
}
