//! A thread's decoded events in batches (one chunk each), decoded on the calling thread or on a second
//! one that works ahead of the caller: decoding a chunk does not depend on what the caller does with
//! the previous one, so on two cores the decoding and the caller's aggregation overlap.
//!
//! For aggregations that read every event as `(tsc, kind, id)` and ignore payloads (report, graph); not
//! for those that need payloads or a time merge across threads ([`super::MergedEvents`]).
//!
//! Memory stays flat: at most [`IN_FLIGHT`] decoded chunks wait for the caller, and their buffers are
//! handed back to the decoder for reuse.

use std::sync::mpsc;

use super::stream::{Extra, RawEvent};
use super::{ReadError, ThreadEvents, Trace};

/// Decoded chunks the decoding thread may be ahead of the caller.
const IN_FLIGHT: usize = 2;

/// A decoded chunk: its events, and the side-table entries of those with [`RawEvent::extra`] (only
/// their fields are meaningful here).
#[derive(Default)]
pub struct Batch {
    /// The chunk's events, in order.
    pub events: Vec<RawEvent>,
    /// The side table of those with [`RawEvent::extra`], in their order.
    pub extras: Vec<Extra>,
}

impl ThreadEvents<'_> {
    fn next_batch(&mut self, b: &mut Batch) -> Result<bool, ReadError> {
        self.swap_batch(&mut b.events, &mut b.extras)
    }
}

/// Calls `each` with the events of thread `tid`, chunk by chunk, in order; with `decode_ahead`, the
/// chunks are decoded on a second thread. Returns the read error that ended the thread's events early,
/// if any (the batches before it were handed out).
pub fn for_each_batch(
    trace: &Trace,
    tid: u32,
    decode_ahead: bool,
    mut each: impl FnMut(&Batch),
) -> Result<Option<ReadError>, ReadError> {
    let mut events = trace.thread_events(tid)?;
    if !decode_ahead {
        let mut batch = Batch::default();
        loop {
            match events.next_batch(&mut batch) {
                Ok(true) => each(&batch),
                Ok(false) => return Ok(None),
                Err(e) => return Ok(Some(e)),
            }
        }
    }
    let (full_tx, full_rx) = mpsc::sync_channel::<Result<Batch, ReadError>>(IN_FLIGHT);
    let (empty_tx, empty_rx) = mpsc::channel::<Batch>();
    Ok(std::thread::scope(|s| {
        s.spawn(move || loop {
            // A new buffer only when every other one is in flight: their number stays bounded.
            let mut batch = empty_rx.try_recv().unwrap_or_default();
            let sent = match events.next_batch(&mut batch) {
                Ok(true) => full_tx.send(Ok(batch)),
                Ok(false) => return,
                Err(e) => full_tx.send(Err(e)),
            };
            if sent.is_err() {
                return;
            }
        });
        for batch in full_rx {
            match batch {
                Ok(b) => {
                    each(&b);
                    // The decoder may have ended already: then the buffer is simply dropped.
                    let _ = empty_tx.send(b);
                }
                Err(e) => return Some(e),
            }
        }
        None
    }))
}
