//! The whole public API of the crate, used the way a library would use it. Builds on every target: on
//! x86_64 Linux the tracepoints are real, elsewhere they compile to nothing (`tests/portable.rs` builds
//! this example with `--cfg ferrotrace_portable_check` to check that fallback).
//!
//! Prints `enabled=E disabled=D evaluated=V recording=R`: how many tracepoints `enable` and `disable`
//! selected, how many times the argument of a disabled `trace!` was evaluated (always 0), and whether
//! the run was recorded.

ferrotrace::tracepoint!(request_done, id: u64, status: u16, "request {id} -> {status}");
ferrotrace::tracepoint!(pub(crate) note, text: &str);

fn main() {
    let enabled = ferrotrace::tracepoints::enable("request_*");
    let mut evaluated = 0;
    for id in 0..3 {
        request_done(id, 200);
        ferrotrace::trace!(note({
            evaluated += 1;
            "never evaluated while disabled"
        }));
    }
    let disabled = ferrotrace::tracepoints::disable("*");
    ferrotrace::rescan();
    let recording = ferrotrace::is_recording();
    ferrotrace::finish();
    println!("enabled={enabled} disabled={disabled} evaluated={evaluated} recording={recording}");
}
