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

/// `-ERESTARTSYS`, `-ERESTARTNOINTR`, `-ERESTARTNOHAND`: a system call the kernel runs again from its
/// `syscall` instruction when the thread resumes without a signal handler to run.
const ERESTART: [u64; 3] = [(-512i64) as u64, (-513i64) as u64, (-514i64) as u64];

/// The registers a thread stopped with `regs` resumes with when no tracer is there to put them back:
/// a system call it was stopped in made to run again from its `syscall` instruction, as the kernel
/// (or [`restart_interrupted`], with `call_made`) would have when letting it go, and no longer a
/// system call (`rt_sigreturn` restores registers, not a system call's restart).
pub(crate) fn resume_regs(regs: &Regs) -> Regs {
    let mut r = *regs;
    if r.orig_rax != u64::MAX && ERESTART.contains(&r.rax) {
        r.rax = r.orig_rax;
        r.rip = r.rip.wrapping_sub(2);
    } else {
        restart_interrupted(&mut r, true);
    }
    r.orig_rax = u64::MAX;
    r
}

/// The number of `rt_sigreturn`.
pub(crate) const RT_SIGRETURN: u64 = 15;

/// What the C library's signal restorer (`__restore_rt`: `mov $15, %rax; syscall`) is made of: a
/// call that returns there has the thread put back by the kernel from the signal frame above it.
pub(crate) const RESTORER: [u8; 9] = [0x48, 0xc7, 0xc0, 0x0f, 0x00, 0x00, 0x00, 0x0f, 0x05];

/// Bytes of a signal frame past its return address: the kernel's `struct ucontext` (304) and
/// `struct siginfo` (128), which `rt_sigreturn` may check it can read.
pub(crate) const SIGNAL_FRAME: usize = 304 + 128;

/// `uc_flags`: the frame holds an XSAVE area (`UC_FP_XSTATE`) and its `ss` is to be restored as it
/// is (`UC_SIGCONTEXT_SS | UC_STRICT_RESTORE_SS`).
const UC_FLAGS: u64 = 0x1 | 0x2 | 0x4;

/// `FP_XSTATE_MAGIC2`, after an XSAVE area in a signal frame.
pub(crate) const FP_XSTATE_MAGIC2: u32 = 0x4650_5845;

/// The signal frame (past its return address) that `rt_sigreturn` turns into `regs`, the signal mask
/// `sigmask` and the vector state at `fpstate` (an XSAVE area, 64-byte aligned, followed by
/// [`FP_XSTATE_MAGIC2`]). Its alternate signal stack says an invalid mode, which `rt_sigreturn`
/// ignores: the thread's own stays as it is.
pub(crate) fn signal_frame(regs: &Regs, sigmask: u64, fpstate: u64) -> Vec<u8> {
    let mut f = Vec::with_capacity(SIGNAL_FRAME);
    let mut q = |v: u64| f.extend_from_slice(&v.to_ne_bytes());
    q(UC_FLAGS); // uc_flags
    q(0); // uc_link
    q(0); // uc_stack.ss_sp
    q(3); // uc_stack.ss_flags (SS_ONSTACK | SS_DISABLE: EINVAL, ignored), padding
    q(0); // uc_stack.ss_size
    for v in [
        regs.r8,
        regs.r9,
        regs.r10,
        regs.r11,
        regs.r12,
        regs.r13,
        regs.r14,
        regs.r15,
        regs.rdi,
        regs.rsi,
        regs.rbp,
        regs.rbx,
        regs.rdx,
        regs.rax,
        regs.rcx,
        regs.rsp,
        regs.rip,
        regs.eflags,
    ] {
        q(v);
    }
    // cs, gs, fs, ss (16 bits each)
    q((regs.cs & 0xffff)
        | (regs.gs & 0xffff) << 16
        | (regs.fs & 0xffff) << 32
        | (regs.ss & 0xffff) << 48);
    for _ in 0..4 {
        q(0); // err, trapno, oldmask, cr2
    }
    q(fpstate);
    for _ in 0..8 {
        q(0); // reserved
    }
    q(sigmask); // uc_sigmask
    f.resize(SIGNAL_FRAME, 0); // siginfo
    f
}

/// `regs` set to run the call stub at `stub` ([`call_stub`]) on `function`, with the integer
/// arguments `args` and the stack pointer at `frame`, the signal frame the stub returns through.
pub(crate) fn set_up_stub_call(
    regs: &mut Regs,
    stub: u64,
    function: u64,
    frame: u64,
    args: [u64; 6],
) {
    set_up_call(regs, stub, frame, args);
    regs.rax = function;
}

/// The call stub, at the start of its page, for one call: calls `rax`, keeps what it returned just
/// below the signal frame at the stack pointer (in the return address's slot, [`return_slot`]),
/// then `done` below that ([`done_slot`]: the call has ended), and waits there for us: a sleep of at
/// most [`STUB_WAIT_S`] seconds, which our stop cuts short (we then put the thread back ourselves,
/// still at the priority its call ran at: no wait for a CPU at its own). Should we not stop it
/// (killed meanwhile), it puts its priority back to `nice` (what it was before we raised it for the
/// call; `setpriority` with 0 is the calling thread on Linux, and lowering a priority needs no right)
/// and returns through that frame (`rt_sigreturn`).
pub(crate) fn call_stub(done: u64, nice: i32) -> Vec<u8> {
    let mut code = vec![0xff, 0xd0]; // call *%rax
    code.extend_from_slice(&[0x48, 0x89, 0x44, 0x24, 0xf8]); // mov %rax, -8(%rsp)
    code.extend_from_slice(&[0x49, 0xbb]); // movabs $done, %r11
    code.extend_from_slice(&done.to_ne_bytes());
    code.extend_from_slice(&[0x4c, 0x89, 0x5c, 0x24, 0xf0]); // mov %r11, -16(%rsp)
                                                             // nanosleep(&wait, NULL): the wait's timespec follows the code (its offset patched below).
    code.extend_from_slice(&[0x48, 0x8d, 0x3d, 0, 0, 0, 0]); // lea wait(%rip), %rdi
    let lea_end = code.len();
    code.extend_from_slice(&[0x31, 0xf6]); // xor %esi, %esi
    code.extend_from_slice(&[0xb8, 35, 0, 0, 0]); // mov $SYS_nanosleep, %eax
    code.extend_from_slice(&[0x0f, 0x05]); // syscall
                                           // setpriority(PRIO_PROCESS, 0, nice)
    code.extend_from_slice(&[0xb8, 141, 0, 0, 0]); // mov $SYS_setpriority, %eax
    code.extend_from_slice(&[0x31, 0xff]); // xor %edi, %edi
    code.extend_from_slice(&[0x31, 0xf6]); // xor %esi, %esi
    code.push(0xba); // mov $nice, %edx
    code.extend_from_slice(&nice.to_ne_bytes());
    code.extend_from_slice(&[0x0f, 0x05]); // syscall
    code.extend_from_slice(&RESTORER);
    while code.len() % 8 != 0 {
        code.push(0xcc);
    }
    let wait = code.len();
    code[lea_end - 4..lea_end].copy_from_slice(&((wait - lea_end) as i32).to_ne_bytes());
    code.extend_from_slice(&STUB_WAIT_S.to_ne_bytes()); // tv_sec
    code.extend_from_slice(&0u64.to_ne_bytes()); // tv_nsec
    code
}

/// How long the call stub waits for us after its call (seconds): long enough for a `record` that
/// runs to see the `done` word and stop the thread there, short enough for a thread whose `record`
/// was killed to go on soon.
pub(crate) const STUB_WAIT_S: u64 = 1;

/// Where the call stub writes its `done` word, below the signal frame at `frame`.
pub(crate) fn done_slot(frame: u64) -> u64 {
    frame - 16
}

/// Whether a thread stopped at a system call's entry with `regs` is entering the `rt_sigreturn` of
/// a call set up with its signal frame at `frame` that returns through the instruction ending at
/// `after`.
pub(crate) fn returning(regs: &Regs, frame: u64, after: u64) -> bool {
    regs.orig_rax == RT_SIGRETURN && regs.rsp == frame && regs.rip == after
}

/// The stack pointer at a call's first instruction when it is to return through the signal frame
/// at `frame`: the frame's return address slot, just below it.
pub(crate) fn return_slot(frame: u64) -> u64 {
    frame - 8
}
