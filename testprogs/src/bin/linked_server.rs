//! `line_server` linking the ferrotrace runtime (for `record -p`, which calls its own copy instead of
//! loading the preload library): the same protocol (`line_protocol.rs`), and a tracepoint, `request`,
//! fired with each line's length before it is answered (for `record -p --trace`).
#[path = "../line_protocol.rs"]
mod line_protocol;

ferrotrace::tracepoint!(request, len: u64);

fn main() {
    line_protocol::serve(line_protocol::threads_arg(), |line| {
        request(line.len() as u64)
    });
}
