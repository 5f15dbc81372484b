//! Forks without exec: the child works and exits 0; the parent waits, works, and prints `child=STATUS`.
use std::hint::black_box;

#[inline(never)]
fn work(n: u64) -> u64 {
    black_box(n * 7)
}

fn main() {
    for i in 0..10 {
        work(i);
    }
    // SAFETY: the program is single-threaded apart from the tracer's collector, which the child never
    // touches (it only runs `work` and exits).
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        for i in 0..1000 {
            work(i);
        }
        // SAFETY: leaving the child without running the parent's atexit handlers twice.
        unsafe { libc::_exit(0) };
    }
    let mut status = 0;
    // SAFETY: waiting for our own child.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    for i in 0..20 {
        work(i);
    }
    println!("child={}", libc::WEXITSTATUS(status));
}
