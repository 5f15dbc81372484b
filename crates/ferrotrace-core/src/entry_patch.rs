//! Which functions of uninstrumented x86-64 code can have their entry replaced by a 5-byte jump, and
//! why the others cannot: the one safety analysis shared by the runtime (which patches) and
//! `ferrotrace list --dynamic` (which reports).
//!
//! A function is patchable when a `jmp rel32` written at its entry (after an `endbr64`, which stays)
//! cannot change what any thread computes, except that the function's first instructions then run in a
//! trampoline. Proven from the code, else refused:
//!
//! * the symbol has a size (the function's end, for the decoding below), and the whole function decodes;
//! * at least 5 bytes of whole instructions follow the entry inside the function (the *window*);
//! * no instruction in the window is a call (its return address would point into the trampoline, which
//!   has no unwind information), an interrupt (`int3`: a debugger's or a uprobe's breakpoint), a
//!   transactional-memory instruction, an undecodable byte, or a RIP-relative read of the window itself
//!   (moved, it would read the trampoline);
//! * no direct branch anywhere in the object (every function symbol is decoded, so `.cold` and `.part`
//!   fragments and other functions' jumps count) targets a byte of the window, except a call or tail
//!   jump to the function's own first byte (that is a call of it);
//! * the function has no indirect jump through a register or a computed address (a jump table, whose
//!   targets the code does not say); an indirect jump through a RIP-relative slot (`jmp [rip + GOT]`,
//!   a tail call) is allowed.
//!
//! Not checked here, because they depend on where the trampoline lands (the runtime checks them when it
//! relocates the window): a RIP-relative operand or branch of the window out of ±2 GiB of the
//! trampoline ([`Refusal::OutOfReach`]).
//!
//! Not covered: jumps from code no symbol covers (hand-written assembly without symbols), and code that
//! computes addresses inside another function's first 5 bytes. Both are rare in compiled code.

use std::fmt;

use iced_x86::{Decoder, DecoderOptions, FlowControl, Instruction, Register};

/// Bytes of the jump written at a function's entry (`jmp rel32`).
pub const JUMP_LEN: usize = 5;

/// `endbr64`: kept in place (an indirect call lands on it), the jump goes after it.
pub const ENDBR64: [u8; 4] = [0xf3, 0x0f, 0x1e, 0xfa];

/// Why a function cannot be patched.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Refusal {
    /// The symbol has no size: the function's end is unknown.
    NoSize,
    /// Fewer than 5 bytes of instructions after the entry.
    TooShort,
    /// Bytes that do not decode as instructions.
    Undecodable,
    /// A call among the instructions the jump replaces.
    CallInWindow,
    /// An instruction among those replaced that cannot run elsewhere (`int3`, `xbegin`, ...).
    Unrelocatable,
    /// A branch targets a byte of the replaced instructions.
    BranchIntoWindow,
    /// An indirect jump (a jump table?) whose targets the code does not say.
    IndirectJump,
    /// A RIP-relative operand or branch of the replaced instructions out of reach of the trampoline.
    OutOfReach,
    /// The object's entry point (`_start`): jumped to by the kernel or the loader with `argc` where a
    /// return address would be.
    EntryPoint,
    /// The library is one the runtime itself runs on (the C library, the loader, the unwinder, the
    /// runtime): tracing it would re-enter the tracer.
    RuntimeLibrary,
}

impl Refusal {
    /// Every reason, in the order listings print them.
    pub const ALL: [Refusal; 10] = [
        Refusal::NoSize,
        Refusal::TooShort,
        Refusal::Undecodable,
        Refusal::CallInWindow,
        Refusal::Unrelocatable,
        Refusal::BranchIntoWindow,
        Refusal::IndirectJump,
        Refusal::OutOfReach,
        Refusal::EntryPoint,
        Refusal::RuntimeLibrary,
    ];

    /// A short name, for JSON and counts.
    pub fn key(self) -> &'static str {
        match self {
            Refusal::NoSize => "no-size",
            Refusal::TooShort => "too-short",
            Refusal::Undecodable => "undecodable",
            Refusal::CallInWindow => "call-in-entry",
            Refusal::Unrelocatable => "unrelocatable",
            Refusal::BranchIntoWindow => "branch-into-entry",
            Refusal::IndirectJump => "indirect-jump",
            Refusal::OutOfReach => "out-of-reach",
            Refusal::EntryPoint => "entry-point",
            Refusal::RuntimeLibrary => "runtime-library",
        }
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Refusal::NoSize => "the symbol has no size",
            Refusal::TooShort => "shorter than a 5-byte jump",
            Refusal::Undecodable => "bytes that do not decode",
            Refusal::CallInWindow => "a call in its first 5 bytes",
            Refusal::Unrelocatable => {
                "an instruction in its first 5 bytes that cannot move (int3, xbegin)"
            }
            Refusal::BranchIntoWindow => "a branch into its first 5 bytes",
            Refusal::IndirectJump => "an indirect jump (jump table) with unknown targets",
            Refusal::OutOfReach => "a RIP-relative operand out of reach of a trampoline",
            Refusal::EntryPoint => "the program's entry point, never called",
            Refusal::RuntimeLibrary => "a library the tracer itself runs on",
        })
    }
}

/// Where the jump of a patchable function goes and what it replaces.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Window {
    /// Address of the first replaced byte: the function's start, or 4 bytes after it past `endbr64`.
    pub at: u64,
    /// Bytes of whole instructions replaced (≥ 5; the jump takes the first 5, the rest is never run).
    pub len: u8,
}

/// A function of an object: its address (the same space as the code given to [`analyse`]) and the size
/// its symbol gives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FunctionRange {
    /// First byte.
    pub start: u64,
    /// Bytes, 0 if the symbol says none.
    pub size: u64,
}

/// What one decoding pass over a function found.
struct Decoded {
    /// Direct branch and call targets, with whether the instruction is a call.
    targets: Vec<(u64, bool)>,
    /// It has an indirect jump whose targets are unknown.
    indirect_jump: bool,
    /// It did not decode to its end.
    undecodable: bool,
}

fn new_decoder(code: &[u8], ip: u64) -> Decoder<'_> {
    Decoder::with_ip(64, code, ip, DecoderOptions::NONE)
}

fn decode_function(code: &[u8], ip: u64) -> Decoded {
    let mut out = Decoded {
        targets: Vec::new(),
        indirect_jump: false,
        undecodable: false,
    };
    let mut decoder = new_decoder(code, ip);
    let mut insn = Instruction::default();
    while decoder.can_decode() {
        decoder.decode_out(&mut insn);
        if insn.is_invalid() {
            out.undecodable = true;
            break;
        }
        match insn.flow_control() {
            FlowControl::UnconditionalBranch | FlowControl::ConditionalBranch => {
                out.targets.push((insn.near_branch_target(), false))
            }
            FlowControl::Call if insn.near_branch_target() != 0 => {
                out.targets.push((insn.near_branch_target(), true))
            }
            FlowControl::IndirectBranch if !is_slot_jump(&insn) => out.indirect_jump = true,
            _ => {}
        }
    }
    out
}

/// `jmp qword ptr [rip + disp]`: a tail call through a GOT slot, not a jump table.
fn is_slot_jump(insn: &Instruction) -> bool {
    insn.is_ip_rel_memory_operand() && insn.memory_index() == Register::None
}

/// The window of the function whose code (`size` bytes from `start`) is `code`, or why it has none,
/// looking at its first instructions only (the branch analysis is [`analyse`]'s).
fn window(code: &[u8], start: u64) -> Result<Window, Refusal> {
    let skip = if code.starts_with(&ENDBR64) { 4 } else { 0 };
    let at = start + skip as u64;
    let mut decoder = new_decoder(&code[skip..], at);
    let mut insn = Instruction::default();
    let mut len = 0usize;
    // RIP-relative data addresses of the window: one inside it would read the trampoline's copy.
    let mut data = Vec::new();
    while len < JUMP_LEN {
        if !decoder.can_decode() {
            return Err(Refusal::TooShort);
        }
        decoder.decode_out(&mut insn);
        if insn.is_invalid() {
            // A tail of bytes that do not make a whole instruction ends the function early.
            return Err(if decoder.can_decode() {
                Refusal::Undecodable
            } else {
                Refusal::TooShort
            });
        }
        match insn.flow_control() {
            FlowControl::Call | FlowControl::IndirectCall => return Err(Refusal::CallInWindow),
            FlowControl::Interrupt | FlowControl::XbeginXabortXend | FlowControl::Exception => {
                return Err(Refusal::Unrelocatable)
            }
            _ => {}
        }
        if insn.is_ip_rel_memory_operand() {
            data.push(insn.ip_rel_memory_address());
        }
        len += insn.len();
    }
    if data.iter().any(|a| (at..at + len as u64).contains(a)) {
        return Err(Refusal::Unrelocatable);
    }
    Ok(Window { at, len: len as u8 })
}

/// Decides, for every function of one object, whether its entry can be patched: `code(start, size)`
/// gives a function's bytes (from the file or from memory; `None` if they are not there);
/// `entry_point` is the object's ELF entry point in the same address space. Returns one verdict per
/// function, in the order given. Every function is decoded whole, once.
pub fn analyse<'a>(
    functions: &[FunctionRange],
    entry_point: u64,
    code: impl Fn(u64, u64) -> Option<&'a [u8]>,
) -> Vec<Result<Window, Refusal>> {
    let mut verdicts = Vec::with_capacity(functions.len());
    // Every direct target in the object, with the function it is in: (target, from, is_call).
    let mut targets: Vec<(u64, u64, bool)> = Vec::new();
    for f in functions {
        let verdict = if f.size == 0 {
            Err(Refusal::NoSize)
        } else if f.start == entry_point {
            Err(Refusal::EntryPoint)
        } else {
            match code(f.start, f.size) {
                None => Err(Refusal::Undecodable),
                Some(bytes) => {
                    let decoded = decode_function(bytes, f.start);
                    targets.extend(decoded.targets.iter().map(|&(t, c)| (t, f.start, c)));
                    window(bytes, f.start).and_then(|w| {
                        if decoded.undecodable {
                            Err(Refusal::Undecodable)
                        } else if decoded.indirect_jump {
                            Err(Refusal::IndirectJump)
                        } else {
                            Ok(w)
                        }
                    })
                }
            }
        };
        verdicts.push(verdict);
    }
    targets.sort_unstable();
    for (f, verdict) in functions.iter().zip(verdicts.iter_mut()) {
        let Ok(w) = *verdict else { continue };
        let end = w.at + w.len as u64;
        let first = targets.partition_point(|t| t.0 < w.at);
        let into_window = targets[first..]
            .iter()
            .take_while(|t| t.0 < end)
            // A call, or a tail jump from another function, to the function's first byte is a call of
            // it; a jump there from inside the function (a loop) is not.
            .any(|&(target, from, call)| target != f.start || (from == f.start && !call));
        if into_window {
            *verdict = Err(Refusal::BranchIntoWindow);
        }
    }
    verdicts
}

/// The file names of libraries the tracer itself runs on, never patched: the C library and the
/// loader (the runtime calls them on its slow paths), the unwinder (exits are found through it), the
/// C++ runtime, and ferrotrace's own.
pub fn is_runtime_library(file_name: &str) -> bool {
    const PREFIXES: [&str; 9] = [
        "libc.so",
        "ld-linux",
        "libgcc_s.so",
        "libpthread.so",
        "libdl.so",
        "libm.so",
        "librt.so",
        "libstdc++.so",
        "libferrotrace",
    ];
    PREFIXES.iter().any(|p| file_name.starts_with(p))
}

/// Counts of verdicts: patchable, and refused by reason (in [`Refusal::ALL`] order, zeros left out).
pub fn tally<'a>(
    verdicts: impl IntoIterator<Item = &'a Result<Window, Refusal>>,
) -> (usize, Vec<(Refusal, usize)>) {
    let mut ok = 0;
    let mut refused = [0usize; Refusal::ALL.len()];
    for v in verdicts {
        match v {
            Ok(_) => ok += 1,
            Err(r) => refused[Refusal::ALL.iter().position(|x| x == r).unwrap_or(0)] += 1,
        }
    }
    let by_reason = Refusal::ALL
        .iter()
        .zip(refused)
        .filter(|(_, n)| *n > 0)
        .map(|(r, n)| (*r, n))
        .collect();
    (ok, by_reason)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(code: &[u8]) -> Result<Window, Refusal> {
        let f = [FunctionRange {
            start: 0x1000,
            size: code.len() as u64,
        }];
        analyse(&f, 0, |_, _| Some(code))[0]
    }

    #[test]
    fn endbr64_stays_and_the_window_is_whole_instructions() {
        // endbr64; push rbp; mov rbp, rsp; push rbx; sub rsp, 8; ...; ret
        let code = [
            0xf3, 0x0f, 0x1e, 0xfa, 0x55, 0x48, 0x89, 0xe5, 0x53, 0x48, 0x83, 0xec, 0x08, 0xc3,
        ];
        assert_eq!(one(&code), Ok(Window { at: 0x1004, len: 5 }));
        // Without endbr64: push rbp (1) + mov rbp, rsp (3) + push rbx (1) = 5.
        assert_eq!(one(&code[4..]), Ok(Window { at: 0x1000, len: 5 }));
    }

    #[test]
    fn refusals_have_their_reasons() {
        // xor eax, eax; ret
        assert_eq!(one(&[0x31, 0xc0, 0xc3]), Err(Refusal::TooShort));
        // call rel32 first
        assert_eq!(
            one(&[0xe8, 0, 0, 0, 0, 0x48, 0x89, 0xe5, 0xc3]),
            Err(Refusal::CallInWindow)
        );
        // int3 first (a breakpoint)
        assert_eq!(
            one(&[0xcc, 0x48, 0x89, 0xe5, 0x48, 0x89, 0xe5, 0xc3]),
            Err(Refusal::Unrelocatable)
        );
        // A loop back to the second instruction: mov eax, edi; dec eax; jnz -4 (to dec); ret
        // 89 f8 | ff c8 | 75 fc | c3
        assert_eq!(
            one(&[0x89, 0xf8, 0xff, 0xc8, 0x75, 0xfc, 0xc3]),
            Err(Refusal::BranchIntoWindow)
        );
        // A jump table: push rbp; mov rbp, rsp; nop; jmp rax
        assert_eq!(
            one(&[0x55, 0x48, 0x89, 0xe5, 0x90, 0xff, 0xe0]),
            Err(Refusal::IndirectJump)
        );
        // A tail call through a GOT slot is not a jump table: push rbp; mov rbp, rsp; pop rbp;
        // nop; jmp [rip + 0]
        assert_eq!(
            one(&[0x55, 0x48, 0x89, 0xe5, 0x5d, 0x90, 0xff, 0x25, 0, 0, 0, 0]),
            Ok(Window { at: 0x1000, len: 5 })
        );
        assert_eq!(
            analyse(&[FunctionRange { start: 0, size: 0 }], 1, |_, _| None)[0],
            Err(Refusal::NoSize)
        );
        // `_start` (endbr64; xor ebp, ebp; mov r9, rdx; pop rsi; ...): [rsp] is argc, not a return
        // address.
        let start = [
            0xf3, 0x0f, 0x1e, 0xfa, 0x31, 0xed, 0x49, 0x89, 0xd1, 0x5e, 0xf4,
        ];
        let f = [FunctionRange {
            start: 0x1000,
            size: start.len() as u64,
        }];
        assert_eq!(
            analyse(&f, 0x1000, |_, _| Some(&start[..]))[0],
            Err(Refusal::EntryPoint)
        );
        assert!(analyse(&f, 0x2000, |_, _| Some(&start[..]))[0].is_ok());
    }

    #[test]
    fn calls_of_the_first_byte_are_calls_and_jumps_from_elsewhere_into_the_window_are_not() {
        // f at 0x1000: push rbp; mov rbp, rsp; push rbx; ...; a recursive call of itself; ret.
        let f = [
            0x55, 0x48, 0x89, 0xe5, 0x53, 0xe8, 0xf6, 0xff, 0xff, 0xff, 0x5b, 0x5d, 0xc3,
        ];
        // g at 0x2000: jmp 0x1001 (into f's window); h at 0x3000: jmp 0x1000 (a tail call of f).
        let g = [0xe9, 0xfc, 0xef, 0xff, 0xff];
        let h = [0xe9, 0xfb, 0xdf, 0xff, 0xff];
        let fns = |other: u64| {
            [
                FunctionRange {
                    start: 0x1000,
                    size: f.len() as u64,
                },
                FunctionRange {
                    start: other,
                    size: 5,
                },
            ]
        };
        let code = |at: u64, _| match at {
            0x1000 => Some(&f[..]),
            0x2000 => Some(&g[..]),
            _ => Some(&h[..]),
        };
        assert!(analyse(&fns(0x3000), 0, code)[0].is_ok());
        assert_eq!(
            analyse(&fns(0x2000), 0, code)[0],
            Err(Refusal::BranchIntoWindow)
        );
    }
}
