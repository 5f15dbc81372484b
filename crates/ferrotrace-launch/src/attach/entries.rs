//! Function entries of a running process patched, and put back, by the host with every thread of the
//! process stopped: `record -p` on code nobody instrumented. The attached runtime plans the patches
//! (`ferrotrace_core::entry_patch`) and builds the trampolines while the program's threads run —
//! nothing jumps to a trampoline before its jump exists — and lists the jumps it left to us
//! ([`ATTACH_ENTRY_JUMPS_FILE`](ferrotrace_core::env::ATTACH_ENTRY_JUMPS_FILE)). Once its start is
//! over (on a thread of its own; the borrowed thread is back in the program's code by then), we stop
//! every thread ([`super::stop_all`]), leave out each function a
//! thread might resume inside of, write the other jumps through `/proc/PID/mem`, and let the threads
//! go. At the stop ([`restore`]), the same in reverse:
//! every thread stopped, the original bytes back, the threads let go; the trampolines stay mapped for
//! a thread still in one (it jumps back to the first whole instruction after the window).
//!
//! Why no thread may be inside a window (`site + 1 .. site + window`): the jump overwrites the first 5
//! bytes and leaves the tail of the last instruction it covers; a thread resuming at any of those
//! bytes would run half an instruction. A thread resuming at `site` itself runs the jump. What a
//! stopped thread will run next: its instruction pointer, or, stopped in a system call the kernel
//! restarts, the `syscall` instruction before it (`attach/x86_64.rs`, `resumes_at`).
//!
//! Why a return address cannot point into a window, and what else can: the analysis refuses a call
//! among the replaced instructions, so the only return address inside a function's first bytes would
//! be that of a call that ends there, which starts before the function (instructions do not overlap in
//! compiled code). What can hold an address inside a window is a saved context: a signal that
//! interrupted a thread there saves its instruction pointer in the signal frame, on the stack the
//! handler runs on (the thread's, or its `sigaltstack`), and `sigreturn` resumes there. So each
//! stopped thread's stack is read from its stack pointer to the end of that mapping (at most
//! [`STACK_SCAN`]), and a function is left out if any aligned word there points inside its window —
//! conservative: a stray integer that happens to equal such an address only costs a function. A
//! context saved elsewhere (`swapcontext` into a heap block, a user-level thread library's scheduler)
//! is not seen; `getcontext` saves the address after its call, never inside a window.

use ferrotrace_core::env::EntryJump;

use super::{arch, stop_all, Memory, Stopped};
use crate::LaunchError;

/// The most of a thread's stack read for saved contexts, from its stack pointer up.
pub const STACK_SCAN: u64 = 8 << 20;

/// What [`write()`] did: the jumps written (to put back at the stop) and the functions left out.
#[derive(Debug, Default)]
pub struct Patched {
    /// The jumps written, each with the bytes it replaced.
    pub written: Vec<EntryJump>,
    /// Functions left untraced because a thread might have resumed inside their window (their names).
    pub thread_inside: Vec<String>,
    /// Functions left untraced because their bytes were not what the runtime read (changed meanwhile).
    pub changed: Vec<String>,
    /// How long every thread of the process was stopped for the writing.
    pub threads_held: std::time::Duration,
}

impl Patched {
    /// The functions left out and why, one line per reason (none when every jump was written).
    pub fn left_out(&self) -> Vec<String> {
        let mut lines = Vec::new();
        for (names, why) in [
            (
                &self.thread_inside,
                "a thread was inside the first instructions its jump replaces",
            ),
            (
                &self.changed,
                "its first bytes changed since the runtime read them",
            ),
        ] {
            if !names.is_empty() {
                lines.push(format!(
                    "{} function{} left untraced, {why}: {}",
                    names.len(),
                    if names.len() == 1 { "" } else { "s" },
                    names.join(", ")
                ));
            }
        }
        lines
    }

    /// Adds what a later [`write()`] did (the jumps of an object loaded since), to be put back with
    /// these.
    pub fn join(&mut self, later: Patched) {
        self.written.extend(later.written);
        self.thread_inside.extend(later.thread_inside);
        self.changed.extend(later.changed);
        self.threads_held += later.threads_held;
    }
}

/// The jumps listed in `listing`, what the runtime left in the control directory's
/// [`ATTACH_ENTRY_JUMPS_FILE`](ferrotrace_core::env::ATTACH_ENTRY_JUMPS_FILE) (none when it patched
/// no entry).
pub fn listed(listing: &str) -> Vec<EntryJump> {
    listing.lines().filter_map(EntryJump::parse).collect()
}

/// Writes `jumps` into process `pid` with every thread stopped; each function a thread could resume
/// inside of is left out. When a write fails, those written are put back before the threads go.
pub fn write(pid: u32, jumps: Vec<EntryJump>) -> Result<Patched, LaunchError> {
    if jumps.is_empty() {
        return Ok(Patched::default());
    }
    write_held(pid, jumps).map_err(|e| ended_or(pid, e))
}

fn write_held(pid: u32, jumps: Vec<EntryJump>) -> Result<Patched, LaunchError> {
    let held = std::time::Instant::now();
    let threads = stop_all(pid, None)?;
    let mem = &Memory::open(pid)?;
    let mut inside = Vec::new();
    for t in &threads {
        resumption_points(pid, mem, &t.get_regs()?, &mut inside);
    }
    inside.sort_unstable();
    let mut patched = Patched::default();
    for j in jumps {
        if resumes_inside(&j, &inside) {
            patched.thread_inside.push(j.function);
            continue;
        }
        let mut now = [0u8; 5];
        if mem.read(j.site, &mut now) != 5 || now != j.original {
            patched.changed.push(j.function);
            continue;
        }
        if let Err(e) = mem.write(j.site, &j.jump) {
            for w in &patched.written {
                let _ = mem.write(w.site, &w.original);
            }
            return Err(e);
        }
        patched.written.push(j);
    }
    release(threads)?;
    patched.threads_held = held.elapsed();
    Ok(patched)
}

/// Whether a thread resuming at one of `points` (sorted) would run inside `jump`'s window, past its
/// first byte.
fn resumes_inside(jump: &EntryJump, points: &[u64]) -> bool {
    let window = jump.site + 1..jump.site + u64::from(jump.window);
    let first = points.partition_point(|&a| a < window.start);
    points.get(first).is_some_and(|a| window.contains(a))
}

/// Puts back the bytes `patched` replaced, with every thread of `pid` stopped: each entry that still
/// holds our jump gets its original bytes. Returns how many were put back.
pub fn restore(pid: u32, patched: &Patched) -> Result<usize, LaunchError> {
    if patched.written.is_empty() {
        return Ok(0);
    }
    restore_held(pid, patched).map_err(|e| ended_or(pid, e))
}

fn restore_held(pid: u32, patched: &Patched) -> Result<usize, LaunchError> {
    let threads = stop_all(pid, None)?;
    let mem = Memory::open(pid)?;
    let mut restored = 0;
    for j in &patched.written {
        let mut now = [0u8; 5];
        if mem.read(j.site, &mut now) == 5 && now == j.jump {
            mem.write(j.site, &j.original)?;
            restored += 1;
        }
    }
    release(threads)?;
    Ok(restored)
}

/// Lets every thread of `threads` go; the first failure, once all were tried.
fn release(threads: Vec<Stopped>) -> Result<(), LaunchError> {
    let mut first = None;
    for t in threads {
        if let Err(e) = t.release() {
            first.get_or_insert(e);
        }
    }
    first.map_or(Ok(()), Err)
}

/// `e`, or the one line that says the process ended, if it did (killed while its threads were held).
/// A thread of a killed process vanishes before the process is a zombie: its end is waited for a
/// moment (an error on a process that goes on is rare, and then says what failed).
fn ended_or(pid: u32, e: LaunchError) -> LaunchError {
    let asked = std::time::Instant::now();
    while !super::process_ended(pid) && asked.elapsed() < std::time::Duration::from_millis(500) {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    if super::process_ended(pid) {
        LaunchError::CannotAttach {
            pid,
            why: "it ended while ferrotrace held its threads to patch its functions' entries"
                .into(),
        }
    } else {
        e
    }
}

/// Adds to `points` every address a thread stopped with `regs` may resume at: its next instruction
/// (or the system call it restarts), and every aligned word of its stack from the stack pointer to the
/// end of that mapping that could be a saved instruction pointer (a signal frame's).
fn resumption_points(pid: u32, mem: &Memory, regs: &arch::Regs, points: &mut Vec<u64>) {
    points.extend(arch::resumes_at(regs));
    let sp = arch::stack_pointer(regs) & !7;
    let Some(end) = mapping_end(pid, sp) else {
        return;
    };
    let len = end.saturating_sub(sp).min(STACK_SCAN) as usize;
    let mut stack = vec![0u8; len];
    let n = mem.read(sp, &mut stack);
    points.extend(
        stack[..n]
            .chunks_exact(8)
            .map(|w| u64::from_ne_bytes(w.try_into().unwrap_or_default())),
    );
}

/// The end of the mapping of process `pid` that holds `addr`, from `/proc/PID/maps`.
fn mapping_end(pid: u32, addr: u64) -> Option<u64> {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).ok()?;
    maps.lines().find_map(|line| {
        let (start, end) = line.split_whitespace().next()?.split_once('-')?;
        let (start, end) = (
            u64::from_str_radix(start, 16).ok()?,
            u64::from_str_radix(end, 16).ok()?,
        );
        (start..end).contains(&addr).then_some(end)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A thread at a window's first byte runs the jump; one past it, up to the window's last byte, is
    /// inside; one stopped in a system call is also inside when the `syscall` it restarts is.
    #[test]
    fn a_thread_resuming_past_the_first_byte_of_a_window_is_inside() {
        let jump = EntryJump {
            site: 0x1000,
            window: 7,
            original: [0; 5],
            jump: [0xe9, 0, 0, 0, 0],
            function: "f".into(),
        };
        assert!(!resumes_inside(&jump, &[0x0fff, 0x1000, 0x1007]));
        assert!(resumes_inside(&jump, &[0x1000, 0x1003]));
        assert!(resumes_inside(&jump, &[0x1006]));
        // SAFETY: plain data.
        let mut regs: arch::Regs = unsafe { core::mem::zeroed() };
        regs.rip = 0x1009;
        regs.orig_rax = u64::MAX;
        assert!(!resumes_inside(&jump, &arch::resumes_at(&regs)));
        regs.orig_rax = 0; // stopped in read(2): restarts at rip - 2
        assert!(!resumes_inside(&jump, &arch::resumes_at(&regs)));
        regs.rip = 0x1008;
        let mut points = arch::resumes_at(&regs).to_vec();
        points.sort_unstable();
        assert!(resumes_inside(&jump, &points));
    }
}
