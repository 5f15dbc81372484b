//! A line-protocol server for `record -p` (`line_protocol.rs`), traced through the preload library.
//! `line_server THREADS` also starts THREADS idle threads that call the traced `tick` every 10 ms.
#[path = "../line_protocol.rs"]
mod line_protocol;

fn main() {
    line_protocol::serve(line_protocol::threads_arg(), |_| {});
}
