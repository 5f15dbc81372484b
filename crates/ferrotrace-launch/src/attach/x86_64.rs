//! The registers of a borrowed thread on x86-64 (System V ABI, Linux ptrace): how a call is set up in
//! them and how its end is seen. `attach` juggles nothing else that depends on the instruction set.

/// The general registers as `PTRACE_GETREGS` gives them.
pub(crate) type Regs = libc::user_regs_struct;

/// `NT_X86_XSTATE`: the whole vector state (x87, SSE, AVX, AVX-512) for `PTRACE_GETREGSET`.
pub(crate) const VECTOR_REGSET: libc::c_int = 0x202;

/// Bytes below the stack pointer that the ABI lets a function use without moving it (the red zone):
/// a call made on a borrowed thread starts below them.
pub(crate) const RED_ZONE: u64 = 128;

/// Where a thread stopped with these registers runs its next instruction, and where it may run it
/// instead: stopped in a system call that the kernel restarts when it resumes, it goes back over the
/// `syscall` instruction (2 bytes) first.
pub(crate) fn resumes_at(regs: &Regs) -> [u64; 2] {
    let in_syscall = regs.orig_rax != u64::MAX;
    [
        regs.rip,
        if in_syscall {
            regs.rip.wrapping_sub(2)
        } else {
            regs.rip
        },
    ]
}

/// The stack pointer.
pub(crate) fn stack_pointer(regs: &Regs) -> u64 {
    regs.rsp
}

/// The instruction pointer.
pub(crate) fn instruction_pointer(regs: &Regs) -> u64 {
    regs.rip
}

/// `regs` set to call `function` with the integer arguments `args` (rdi, rsi, rdx, rcx, r8, r9), the
/// stack pointer at `sp` (where the caller wrote the return address), and no system call to restart
/// (the kernel must not rewind `rip` when the thread resumes).
pub(crate) fn set_up_call(regs: &mut Regs, function: u64, sp: u64, args: [u64; 6]) {
    regs.rip = function;
    regs.rsp = sp;
    regs.rdi = args[0];
    regs.rsi = args[1];
    regs.rdx = args[2];
    regs.rcx = args[3];
    regs.r8 = args[4];
    regs.r9 = args[5];
    regs.rax = 0;
    regs.orig_rax = u64::MAX;
}

/// What a call set up by [`set_up_call`] with return address 0 returned, once it faulted there:
/// `None` while the thread stopped anywhere else.
pub(crate) fn returned(regs: &Regs) -> Option<u64> {
    (regs.rip == 0).then_some(regs.rax)
}

/// `-ERESTART_RESTARTBLOCK`: the system call goes on through `restart_syscall` and the thread's
/// restart block (nanosleep, clock_nanosleep, poll with a timeout).
const ERESTART_RESTARTBLOCK: u64 = (-516i64) as u64;
/// `-EINTR`, what some system calls return when a stop interrupts them, signal or not.
const EINTR: u64 = (-(libc::EINTR as i64)) as u64;
/// The system calls that return `EINTR` when the thread is merely stopped (signal(7): "interfaces
/// that are never restarted after being interrupted by a stop signal"), which a ptrace interrupt is.
const EINTR_AFTER_A_STOP: [i64; 6] = [
    libc::SYS_epoll_wait,
    libc::SYS_epoll_pwait,
    libc::SYS_epoll_pwait2,
    libc::SYS_rt_sigtimedwait,
    libc::SYS_semtimedop,
    libc::SYS_io_getevents,
];

/// `regs` of a thread stopped by us in a system call made to run the call again from its
/// `syscall` instruction with its own arguments, where letting it go as it is would change what the
/// program sees: it would fail with `EINTR` (`epoll_wait`, `sigtimedwait` ...), or, with `call_made`
/// (the borrowed thread), go on through a restart block that the calls made on the thread may have
/// reused (`nanosleep`, `poll`: `EINTR` too). A relative timeout starts again: the wait is longer by
/// the time it had run before the stop. `false` when there is nothing to change.
pub(crate) fn restart_interrupted(regs: &mut Regs, call_made: bool) -> bool {
    if regs.orig_rax == u64::MAX {
        return false;
    }
    let again = (call_made && regs.rax == ERESTART_RESTARTBLOCK)
        || (regs.rax == EINTR && EINTR_AFTER_A_STOP.contains(&(regs.orig_rax as i64)));
    if again {
        regs.rax = regs.orig_rax;
        regs.rip = regs.rip.wrapping_sub(2);
        // Not a system call any more: the kernel rewinds nothing when the thread resumes.
        regs.orig_rax = u64::MAX;
    }
    again
}
