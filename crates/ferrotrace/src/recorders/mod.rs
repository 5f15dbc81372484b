//! The recorders: each turns one kind of event into 16-byte records in the calling thread's chunk.
//!
//! * [`xray`]: XRay sleds, patched to call the architecture's trampolines (`crate::arch::xray`, with
//!   the register-saving slow path every assembly recorder falls back to);
//! * [`mcount`]: the mcount/`__fentry__` recorder: shadow stacks and return stubs per thread (the hooks
//!   and the return trampoline are the architecture's, `crate::arch::mcount`), and
//!   [`mcount::sites`], their call sites and the table the hooks look return addresses up in;
//! * [`args`]: the arguments and return values of the functions `-A`/`-R` name, which the XRay and
//!   mcount hooks hand it with the registers they saved (no hooks of its own: not in [`ALL`]);
//! * [`alloc`]: allocation events (the malloc hooks of the preload library, [`crate::Allocator`]),
//!   their stacks walked by the architecture's unwind rules (`crate::arch::unwind`);
//! * [`callsites`]: callsites registered while the program runs (`tracing` spans, recorded as function
//!   entries and exits, and events, as tracepoint records), through `ferrotrace-tracing`;
//! * [`tracepoint`]: the `tracepoint!`/`trace!` macros, descriptors, the enabled path, enabling by glob
//!   ([`tracepoint::control`], public as `ferrotrace::tracepoints`) and the USDT watcher.
//!
//! Each recorder gives the rooms below it its hooks (`RECORDER`: start, fork handlers, thread exit,
//! metadata for the collector; [`crate::lifecycle::runtime::Recorder`]) through [`ALL`], so that
//! neither the slow path nor the collector names a recorder. Adding one: its module, and a line in
//! [`ALL`] (the checklist is in docs/architecture.md, "Adding a recorder").
//!
//! Not here: where records go once written (`buffers`), how code is changed to reach a recorder
//! (`patch`), and when recording starts and ends (`lifecycle`). A recorder writes through
//! `buffers::hot` and never names another recorder.

pub mod alloc;
pub mod args;
pub mod callsites;
pub mod mcount;
pub mod tracepoint;
pub mod xray;

use crate::lifecycle::runtime::Recorder;

/// Every recorder's hooks ([`Recorder`]), in the order start-up starts them: allocations last, so
/// that start-up's own allocations are not the program's. The one list to extend with a new recorder.
// Outside `crate::state`: a constant table of the build.
pub static ALL: [Recorder; 5] = [
    xray::RECORDER,
    mcount::RECORDER,
    tracepoint::RECORDER,
    callsites::RECORDER,
    alloc::RECORDER,
];

/// Leaves the calling thread, one of the runtime's own (the USDT watcher), out of every recorder.
#[cfg(not(feature = "preload"))]
pub fn ignore_current_thread() {
    for r in &ALL {
        (r.ignore_thread)();
    }
}
