//! `line_server` linking the ferrotrace runtime (for `record -p`, which calls its own copy instead of
//! loading the preload library): the same server: listens on 127.0.0.1 (an ephemeral port, printed as
//! `port=N`), answers each line `LINE` of a connection with `handle(LINE)` (the traced function), one
//! connection at a time. `line_server THREADS` also starts THREADS idle threads that call the traced
//! `tick` every 10 ms, each named `idle-I`.
use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;

#[inline(never)]
fn handle(line: &str) -> String {
    // FNV-1a of the line: the same answer whether traced or not.
    let mut h: u64 = 0xcbf29ce484222325;
    for b in line.bytes() {
        h = (h ^ b as u64).wrapping_mul(0x100000001b3);
    }
    format!("{line} {h:016x}")
}

#[inline(never)]
fn tick(n: u64) -> u64 {
    std::hint::black_box(n.wrapping_mul(3).wrapping_add(1))
}

fn main() {
    // Links the runtime (its marker and its attach entry point come with it).
    std::hint::black_box(ferrotrace::is_recording());
    let threads: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(0);
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
            if writeln!(out, "{}", handle(&line)).is_err() {
                break;
            }
        }
    }
}
