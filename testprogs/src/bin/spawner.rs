//! Runs a child copy of itself with `std::process::Command`, then exits with status 3.
use std::hint::black_box;

#[inline(never)]
fn parent_work(n: u64) -> u64 {
    black_box(n * 2)
}

#[inline(never)]
fn child_work(n: u64) -> u64 {
    black_box(n * 3)
}

fn main() {
    if std::env::args().nth(1).as_deref() == Some("child") {
        for i in 0..100 {
            child_work(i);
        }
        println!("child done");
        return;
    }
    for i in 0..50 {
        parent_work(i);
    }
    let exe = std::env::current_exe().expect("current_exe");
    let status = std::process::Command::new(exe)
        .arg("child")
        .status()
        .expect("run child");
    println!("child status {}", status.code().unwrap_or(-1));
    std::process::exit(3);
}
