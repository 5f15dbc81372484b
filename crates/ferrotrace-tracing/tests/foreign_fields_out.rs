//! `ferrotrace::callsites::fields` hands its writer the `FieldsOut` to write into by value and takes
//! it back (so that the layer's field visitor can hold it). A writer that hands back one of its own
//! making instead — safe code can — has its record left out (and counted lost): its bytes are not
//! the runtime's, and the runtime's stack buffer, which nothing wrote, must not be copied into the
//! trace as if they were. The records before and after it are whole.

use std::mem::MaybeUninit;

use ferrotrace::callsites::{self, Description, FieldsOut, Kind};
use ferrotrace_core::tracepoint::{put_tagged, Tag};
use ferrotrace_reader::reader::{EventKind, Trace};
use ferrotrace_reader::tracepoints;

/// A writer of one unsigned field, `n`.
fn field_n(n: u64) -> impl for<'b> FnOnce(FieldsOut<'b>) -> FieldsOut<'b> {
    move |mut out| {
        let len = put_tagged(out.room(), 0, Tag::Unsigned, &n.to_le_bytes()).unwrap();
        // SAFETY: `put_tagged` wrote `len` bytes of the room.
        unsafe { out.wrote(len) };
        out
    }
}

#[test]
fn a_fields_out_other_than_the_one_given_is_left_out() {
    let dir =
        std::env::temp_dir().join(format!("ferrotrace-tracing-foreign-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("foreign.ferrotrace");
    let _ = std::fs::remove_file(&path);
    let guard = ferrotrace_tracing::record_to_file(&path).unwrap();
    let ids = callsites::register(&Description {
        kind: Kind::Event,
        name: "foreign",
        target: "foreign",
        level: 2,
        fields: "n",
        file: "",
        line: 0,
    })
    .expect("a recording to a file selects every event");
    callsites::fields(ids.tracepoint, callsites::now(), 64, field_n(1));
    callsites::fields(ids.tracepoint, callsites::now(), 64, |_given| {
        let mine: &'static mut [MaybeUninit<u8>; 64] =
            Box::leak(Box::new([MaybeUninit::uninit(); 64]));
        field_n(2)(FieldsOut::new(mine))
    });
    callsites::fields(ids.tracepoint, callsites::now(), 64, field_n(3));
    drop(guard);

    let trace = Trace::open(&path).unwrap();
    assert!(trace.warnings().is_empty(), "{:?}", trace.warnings());
    let events: Vec<String> = trace
        .events()
        .unwrap()
        .map(Result::unwrap)
        .filter(|e| e.kind == EventKind::Tracepoint)
        .map(|e| tracepoints::format_tracepoint(&trace, &e))
        .collect();
    assert_eq!(events, ["INFO foreign(n=1)", "INFO foreign(n=3)"]);
    std::fs::remove_dir_all(&dir).unwrap();
}
