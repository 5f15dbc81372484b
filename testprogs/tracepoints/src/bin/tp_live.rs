//! `tp_live`: fires `hello(n=1..=3)`, prints `ready`, then waits until its standard input closes
//! (so a test can check that `ferrotrace live` shows the events while it runs), then fires `bye(n=99)`.
use std::io::Read;

ferrotrace::tracepoint!(hello, n: u32, "hello number {n}");
ferrotrace::tracepoint!(bye, n: u32);

#[inline(never)]
fn greet(n: u32) {
    hello(n);
}

fn main() {
    for n in 1..=3 {
        greet(n);
    }
    println!("ready");
    let mut rest = Vec::new();
    let _ = std::io::stdin().read_to_end(&mut rest);
    bye(99);
}
