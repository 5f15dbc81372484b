//! Forks without exec, twice. The first child calls `work` 1000 times and leaves with `_exit(0)` (no
//! `atexit` handlers); the second calls it 500 times and leaves with `std::process::exit(3)`. The parent
//! waits for each, calls `work` 30 times in all, and prints `child=STATUS pid=PID` per child.
use std::hint::black_box;

#[inline(never)]
fn work(n: u64) -> u64 {
    black_box(n * 7)
}

/// Forks; the child runs `child` and never returns. Returns the child's pid and exit status.
fn fork_and_wait(child: fn()) -> (i32, i32) {
    // SAFETY: the program is single-threaded apart from the tracer's collector, which the child never
    // touches.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        child();
        unreachable!("the child exits");
    }
    let mut status = 0;
    // SAFETY: waiting for our own child.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    (pid, libc::WEXITSTATUS(status))
}

fn main() {
    for i in 0..10 {
        work(i);
    }
    let first = fork_and_wait(|| {
        for i in 0..1000 {
            work(i);
        }
        // SAFETY: leaving the child without running the parent's atexit handlers twice.
        unsafe { libc::_exit(0) };
    });
    for i in 0..10 {
        work(i);
    }
    let second = fork_and_wait(|| {
        for i in 0..500 {
            work(i);
        }
        std::process::exit(3);
    });
    for i in 0..10 {
        work(i);
    }
    for (pid, status) in [first, second] {
        println!("child={status} pid={pid}");
    }
}
