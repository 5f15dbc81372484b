//! `tp_usdt N`: prints `ready`, waits for a line on its standard input, fires `ping(n=i)` for i in 0..N
//! and `pong(n=i, parity="even")` for the even ones, prints `pings=N pongs=M`, then waits for its input
//! to close. A test attaches a tracer (`bpftrace -p`) before the first line and detaches it before the
//! end, while the runtime is not recording.
use std::io::BufRead;

ferrotrace::tracepoint!(ping, n: u64);
ferrotrace::tracepoint!(pong, n: u64, parity: &str);

fn main() {
    let n: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(10);
    println!("ready");
    let mut input = std::io::stdin().lock();
    let mut line = String::new();
    let _ = input.read_line(&mut line);
    let mut pongs = 0;
    for i in 0..n {
        ping(i);
        if i % 2 == 0 {
            ferrotrace::trace!(pong(i, "even"));
            pongs += 1;
        }
    }
    println!("pings={n} pongs={pongs}");
    while input.read_line(&mut line).is_ok_and(|read| read > 0) {}
}
