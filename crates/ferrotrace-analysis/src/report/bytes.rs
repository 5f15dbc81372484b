//! `report`'s bytes columns: bytes allocated while each function ran, for traces that hold function
//! events and allocations.

use std::collections::HashMap;

use crate::callstack::initial_stacks;
use crate::mem::{round, weights};
use crate::names::Representatives;
use crate::reader::{EventKind, ReadError, Trace};

/// Bytes allocated while each traced function ran, by the function's id in `function` (one per
/// function, as in `report`'s rows): `(self, total)` — self while it was the innermost traced frame of
/// the allocating thread, total while it was anywhere on that thread's stack (once per allocation,
/// however deep the recursion), counting the frames that were running when tracing began. Estimated
/// when sampled. For `report`'s columns on traces that hold function events and allocations.
pub fn bytes_by_function(
    trace: &Trace,
    function: &Representatives,
) -> Result<HashMap<u32, (u64, u64)>, ReadError> {
    let sample_interval = trace.session().alloc_sample;
    let mut acc: HashMap<u32, (f64, f64)> = HashMap::new();
    // The allocation that last counted a function in its total: recursion counts once.
    let mut counted: HashMap<u32, u64> = HashMap::new();
    let mut allocation = 0u64;
    let initial = initial_stacks(trace)?;
    for th in trace.threads().values() {
        let mut stack: Vec<u32> = initial
            .get(&th.tid)
            .map_or_else(Vec::new, |s| s.iter().map(|&id| function.of(id)).collect());
        let mut events = trace.thread_events(th.tid)?;
        while let Some(e) = events.next_ref() {
            let e = e?;
            match e.kind {
                EventKind::Entry => stack.push(function.of(e.id)),
                EventKind::Exit | EventKind::TailExit => {
                    // Frames above the one that returns were left without their exit (unwound).
                    let id = function.of(e.id);
                    if let Some(pos) = stack.iter().rposition(|&f| f == id) {
                        stack.truncate(pos);
                    }
                }
                EventKind::Alloc => {
                    allocation += 1;
                    let (_, bytes) = weights(e.fields[0], sample_interval);
                    if let Some(&top) = stack.last() {
                        acc.entry(top).or_default().0 += bytes;
                    }
                    for &f in &stack {
                        if counted.insert(f, allocation) != Some(allocation) {
                            acc.entry(f).or_default().1 += bytes;
                        }
                    }
                }
                _ => {}
            }
        }
    }
    Ok(acc
        .into_iter()
        .map(|(f, (s, t))| (f, (round(s), round(t))))
        .collect())
}
