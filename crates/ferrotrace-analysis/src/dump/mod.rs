//! `ferrotrace dump`: the trace in other tools' formats, each written while streaming the events
//! (memory: call stacks and per-function tables, never the trace).
//!
//! The exporters share [`walk`]: time-ordered, balanced begin/end events per thread. Functions
//! already running when tracing began get a begin at their thread's first event; frames unwound by a
//! panic or still open at the end get an end where the call stack learns it, so every output is
//! properly nested.

pub mod chrome;
pub mod firefox;
pub mod folded;
pub mod perfetto;
pub mod uftrace;

use std::collections::HashMap;
use std::io;

use crate::callstack::{initial_stacks, CallStack, EndKind, StackEvent};
use crate::progress::Progress;
use crate::reader::{EventKind, Trace};
use crate::tracepoints::Args;
pub use ferrotrace_core::codec::EventFields;

/// A balanced event for exporters.
#[derive(Clone, Copy, Debug)]
pub enum Ev<'a> {
    /// A frame opened.
    Begin {
        /// Thread.
        tid: u32,
        /// Function id.
        id: u32,
        /// CLOCK_MONOTONIC ns.
        ts: u64,
        /// Depth of the frame (0 = outermost).
        depth: usize,
    },
    /// A frame closed.
    End {
        /// Thread.
        tid: u32,
        /// Function id.
        id: u32,
        /// CLOCK_MONOTONIC ns.
        ts: u64,
        /// Depth of the frame.
        depth: usize,
        /// Why.
        how: EndKind,
    },
    /// Anything else: lost events, waits, tracepoints, allocations.
    Instant {
        /// Thread.
        tid: u32,
        /// CLOCK_MONOTONIC ns.
        ts: u64,
        /// Kind.
        kind: EventKind,
        /// Id or count.
        id: u32,
        /// Payload.
        payload: &'a [u8],
        /// Fields (allocation size and address).
        fields: EventFields,
        /// Current depth.
        depth: usize,
    },
}

/// Streams `trace` as balanced events in time order. Returns the read errors met (each ended one
/// thread's events early); errors of `f` stop the walk.
pub fn walk(
    trace: &Trace,
    progress: &mut Progress,
    mut f: impl FnMut(Ev<'_>) -> io::Result<()>,
) -> io::Result<Vec<String>> {
    let mut errors = Vec::new();
    let initial = initial_stacks(trace).unwrap_or_else(|e| {
        errors.push(e.to_string());
        HashMap::new()
    });
    let mut stacks: HashMap<u32, CallStack> = trace
        .threads
        .keys()
        .map(|&t| {
            (
                t,
                CallStack::with_initial(initial.get(&t).cloned().unwrap_or_default()),
            )
        })
        .collect();
    let mut merged = match trace.events() {
        Ok(m) => m,
        Err(e) => {
            errors.push(e.to_string());
            return Ok(errors);
        }
    };
    let mut n = 0u64;
    let mut pending: Vec<StackEvent> = Vec::new();
    while let Some(e) = merged.next_ref() {
        let e = match e {
            Ok(e) => e,
            Err(err) => {
                errors.push(err.to_string());
                continue;
            }
        };
        n += 1;
        if n & 0xffff == 0 {
            progress.add(0x10000);
        }
        let tid = e.tid;
        let st = stacks.entry(tid).or_default();
        st.touch(e.ts_ns, &mut |se| pending.push(se));
        let is_fn = st.process(e.kind, e.id, e.ts_ns, &mut |se| pending.push(se));
        let depth = st.depth();
        for se in pending.drain(..) {
            f(convert(tid, se))?;
        }
        if !is_fn {
            f(Ev::Instant {
                tid,
                ts: e.ts_ns,
                kind: e.kind,
                id: e.id,
                payload: e.payload,
                fields: e.fields,
                depth,
            })?;
        }
    }
    progress.add(n & 0xffff);
    let mut tids: Vec<u32> = stacks.keys().copied().collect();
    tids.sort_unstable();
    for tid in tids {
        let st = stacks.get_mut(&tid).expect("listed");
        st.finish(&mut |se| pending.push(se));
        for se in pending.drain(..) {
            f(convert(tid, se))?;
        }
    }
    Ok(errors)
}

fn convert(tid: u32, se: StackEvent) -> Ev<'static> {
    match se {
        StackEvent::Enter {
            id, time, depth, ..
        } => Ev::Begin {
            tid,
            id,
            ts: time,
            depth,
        },
        StackEvent::Leave {
            frame,
            end,
            depth,
            how,
        } => Ev::End {
            tid,
            id: frame.id,
            ts: end,
            depth,
            how,
        },
        // Never produced after a pre-scan; an instant with no payload keeps the stream valid.
        StackEvent::OrphanExit { id, time } => Ev::Instant {
            tid,
            ts: time,
            kind: EventKind::Exit,
            id,
            payload: &[],
            fields: EventFields::default(),
            depth: 0,
        },
    }
}

/// How the exporters show an instant event: its name and, for tracepoints, its named arguments.
/// `trace` gives tracepoint descriptors (`None`: tracepoint events are named by id), `name_of` the name
/// of a function id (an exit without entry names its function).
pub fn instant(
    trace: Option<&Trace>,
    name_of: &dyn Fn(u32) -> String,
    kind: EventKind,
    id: u32,
    payload: &[u8],
    fields: &EventFields,
) -> (String, Args) {
    use crate::tracepoints::Value;
    let name = match kind {
        EventKind::Lost => format!("LOST {id} events"),
        EventKind::Wait => format!("ferrotrace waited {id} ns for a buffer"),
        EventKind::Tracepoint => match trace {
            Some(trace) => return crate::tracepoints::name_and_args(trace, id, payload),
            None => format!("tracepoint #{id}"),
        },
        EventKind::Alloc => {
            return (
                "malloc".into(),
                vec![
                    ("size".into(), Value::Unsigned(fields[0])),
                    ("address".into(), Value::Unsigned(fields[1])),
                ],
            )
        }
        EventKind::Free => {
            return (
                "free".into(),
                vec![("address".into(), Value::Unsigned(fields[0]))],
            )
        }
        _ => format!("exit of {} without entry", name_of(id)),
    };
    (name, Args::default())
}
