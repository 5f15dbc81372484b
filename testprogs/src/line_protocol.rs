//! The line protocol that `line_server` (traced through the preload library) and `linked_server`
//! (linking the runtime) both serve, for `record -p` and `live -p`: listens on 127.0.0.1 (an ephemeral
//! port, printed as `port=N`), answers each line `LINE` of a connection with `handle(LINE)` (the traced
//! function), one connection at a time; `threads` idle threads call the traced `tick` every 10 ms, each
//! named `idle-I`. Included with `#[path]` by both programs, so that each has its own copy of the traced
//! functions.
use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;

#[inline(never)]
pub fn handle(line: &str) -> String {
    // FNV-1a of the line: the same answer whether traced or not.
    let mut h: u64 = 0xcbf29ce484222325;
    for b in line.bytes() {
        h = (h ^ b as u64).wrapping_mul(0x100000001b3);
    }
    format!("{line} {h:016x}")
}

#[inline(never)]
pub fn tick(n: u64) -> u64 {
    std::hint::black_box(n.wrapping_mul(3).wrapping_add(1))
}

/// The number of idle threads asked for on the command line (its first argument; none by default).
pub fn threads_arg() -> usize {
    std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(0)
}

/// Starts `threads` idle threads, then serves connections forever; `each` sees every line before it is
/// answered.
pub fn serve(threads: usize, each: impl Fn(&str)) {
    for i in 0..threads {
        std::thread::Builder::new()
            .name(format!("idle-{i}"))
            .spawn(|| {
                let mut n = 0;
                loop {
                    n = tick(n);
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
            })
            .expect("thread");
    }
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    println!("port={}", listener.local_addr().expect("addr").port());
    std::io::stdout().flush().expect("flush");
    for conn in listener.incoming() {
        let Ok(conn) = conn else { continue };
        let mut out = conn.try_clone().expect("clone");
        for line in BufReader::new(conn).lines() {
            let Ok(line) = line else { break };
            each(&line);
            if writeln!(out, "{}", handle(&line)).is_err() {
                break;
            }
        }
    }
}
