//! Arguments and return values (`record -A`, `-R`): what the XRay and mcount recorders' hooks call,
//! with the registers they saved, for the functions whose values are recorded.
//!
//! Only those functions leave the one-store fast path: their XRay sleds are patched to the value
//! trampolines (`crate::arch::xray`), and the record word of their mcount and fentry call sites and
//! entry trampolines carries the flags below, which the hooks test (`crate::arch::mcount`) and which
//! stay in the shadow frame for the exit. Values recorded as registers
//! (`ferrotrace_core::argspec::Spec::in_registers`: integer arguments in registers, a return value
//! that is not a string) are stored by the hooks themselves, the registers after the record, with no
//! call ([`ARG_PAIRS`], [`RETVAL_IN_REGISTERS`]); the others come here ([`ARGS_AT_ENTRY`],
//! [`RETVAL_AT_EXIT`]), as do the register ones when the chunk is full. Here the values are read out
//! of the saved registers (and, for `argN` past the sixth, the caller's stack),
//! strings through `process_vm_readv`, which fails where a pointer is bad instead of faulting, and
//! written after the Entry or Exit record as its payload (`ferrotrace_core::argspec` says how), in
//! the thread's chunk or through the slow path.
//!
//! Not here: which functions have values (discovery, from `Config::arg_specs`), the chunk that says
//! how to read them (`Discovery::arg_specs_payload`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicPtr, Ordering};

use ferrotrace_core::argspec::{self, ArgSpecs, Format, Source, Spec};
use ferrotrace_core::record::{EventKind, Record, RECORD_SIZE};

use crate::buffers::hot::Hot;

/// Bit of a record-word flag of the hooks' site table and shadow frames: store rax and xmm0 after
/// this function's Exit record. The flags are in the payload-slot bits, which a site's word never
/// uses otherwise, and are cleared before any record is stored.
pub const RETVAL_IN_REGISTERS: u32 = 43;
/// The low bit of a two-bit field of the flags: store this many pairs of integer argument registers
/// after this function's Entry record (1 to 3: `Spec::register_pairs`; 0: none).
pub const ARG_PAIRS: u32 = 44;
/// Bit of a flag as [`RETVAL_IN_REGISTERS`]: record this function's arguments here
/// ([`record_entry`]).
pub const ARGS_AT_ENTRY: u32 = 46;
/// Bit of a flag as [`RETVAL_IN_REGISTERS`]: record this function's return value here
/// ([`record_exit`]).
pub const RETVAL_AT_EXIT: u32 = 47;
/// All the flags: a word with none of them is recorded as any other.
pub const VALUE_FLAGS: u64 = 0x1f << RETVAL_IN_REGISTERS;

/// `word` (a site's record word) with the flags `values` calls for.
pub fn flagged(word: u64, values: &ArgSpecs) -> u64 {
    let args = match values.args.register_pairs() {
        0 if values.args.is_empty() => 0,
        0 => 1 << ARGS_AT_ENTRY,
        pairs => (pairs as u64) << ARG_PAIRS,
    };
    let retval = match (values.retval.is_empty(), values.retval.in_registers()) {
        (true, _) => 0,
        (false, true) => 1 << RETVAL_IN_REGISTERS,
        (false, false) => 1 << RETVAL_AT_EXIT,
    };
    word | args | retval
}

/// What the hooks saved, laid out for their assembly (offsets from `offset_of!`): the clock read
/// first, the six integer argument registers (at an exit, `rax` and `rdx` in the first two), the low
/// halves of xmm0–7, and where the caller's stack arguments start (0 at an exit).
#[repr(C)]
pub struct Registers {
    /// The timestamp counter, read before anything else.
    pub tsc: u64,
    /// rdi, rsi, rdx, rcx, r8, r9 (at an exit: rax, rdx).
    pub int: [u64; 6],
    /// xmm0–7, low 64 bits.
    pub float: [u64; 8],
    /// The address of the seventh integer argument (the first on the stack).
    pub stack: u64,
}

/// Bytes of [`Registers`], which the assembly reserves on the stack.
pub const REGISTERS_BYTES: usize = core::mem::size_of::<Registers>();

/// Every function with values, by id: read by the hooks' calls without a lock, replaced whole when
/// discovery finds more (a rescan after `dlopen`, an attach), the tables it replaces kept (a thread may
/// still read one), which is a few bytes per function with values.
// Outside `crate::state`: read on the per-call path of the functions with values, one load.
static TABLE: AtomicPtr<HashMap<u32, ArgSpecs>> = AtomicPtr::new(core::ptr::null_mut());

/// Adds the values of `functions` (id and values; those without values are left out) to the table
/// the hooks read. Called before their sleds and sites are patched.
pub fn publish<'a>(functions: impl Iterator<Item = (u32, &'a ArgSpecs)>) {
    let new: Vec<(u32, ArgSpecs)> = functions
        .filter(|(_, v)| !v.is_empty())
        .map(|(id, v)| (id, *v))
        .collect();
    if new.is_empty() {
        return;
    }
    // Called by `sites::patch` with the patched list locked, so two publishes never race.
    let old = TABLE.load(Ordering::Acquire);
    // SAFETY: null or a table leaked by an earlier publish, never freed.
    let mut table = unsafe { old.as_ref() }.cloned().unwrap_or_default();
    table.extend(new);
    TABLE.store(Box::into_raw(Box::new(table)), Ordering::Release);
}

fn values_of(id: u32) -> Option<&'static ArgSpecs> {
    // SAFETY: null or a leaked table, never freed.
    unsafe { TABLE.load(Ordering::Acquire).as_ref() }?.get(&id)
}

/// Called by the hooks (all registers saved) at the entry of a function with [`ARGS_AT_ENTRY`]:
/// records its Entry with its arguments. `regs` is the hooks' [`Registers`], `word` the site's
/// record word.
pub(crate) extern "C" fn record_entry(regs: u64, word: u64) -> u64 {
    // SAFETY: the hooks pass the address of the Registers they filled on their stack.
    let regs = unsafe { &*(regs as *const Registers) };
    record(regs, word, EventKind::Entry);
    0
}

/// Called by the hooks at the exit of a function with [`RETVAL_AT_EXIT`]: records its Exit with its
/// return value (`rax`, `rdx` and xmm0–1 in `regs`).
pub(crate) extern "C" fn record_exit(regs: u64, word: u64) -> u64 {
    // SAFETY: as `record_entry`.
    let regs = unsafe { &*(regs as *const Registers) };
    record(regs, word, EventKind::Exit);
    0
}

/// Payload bytes of one call's values at most: twelve strings.
const MAX_PAYLOAD: usize = argspec::MAX_ITEMS * (2 + argspec::MAX_STRING);

fn record(regs: &Registers, word: u64, kind: EventKind) {
    let id = word as u32;
    // The CPU bits some words carry stay; kind, slots and the flags are this record's own.
    let cpu = word & 0xffff << 48;
    let mut payload = [0u8; MAX_PAYLOAD.next_multiple_of(RECORD_SIZE)];
    let len = match (values_of(id), kind) {
        (Some(v), EventKind::Entry) => fill(&v.args, regs, &mut payload),
        (Some(v), _) => fill(&v.retval, regs, &mut payload),
        (None, _) => 0,
    };
    let slots = len.div_ceil(RECORD_SIZE);
    let mut rec = Record::with_payload(regs.tsc, kind, id, slots as u8);
    rec.word |= cpu;
    let copy = |at: *mut Record| {
        // SAFETY: room for `slots` records at `at` (in the chunk, or the slow path's copy).
        unsafe {
            core::ptr::copy_nonoverlapping(payload.as_ptr(), at.cast::<u8>(), slots * RECORD_SIZE)
        }
    };
    if Hot::current().append(rec, slots, copy).is_err() {
        let records: Vec<Record> = payload[..slots * RECORD_SIZE]
            .chunks_exact(RECORD_SIZE)
            .map(|c| Record {
                tsc: u64::from_le_bytes(c[..8].try_into().unwrap_or_default()),
                word: u64::from_le_bytes(c[8..].try_into().unwrap_or_default()),
            })
            .collect();
        crate::buffers::thread::record_slow(rec, &records);
    }
}

/// Writes the values of `spec` into `out` as an event carries them; returns the bytes written.
fn fill(spec: &Spec, regs: &Registers, out: &mut [u8]) -> usize {
    if spec.in_registers() {
        // As the hooks store them: pairs of integer argument registers, or rax and xmm0.
        let exit = [regs.int[0], regs.float[0]];
        let words: &[u64] = match spec.register_pairs() {
            0 => &exit,
            pairs => &regs.int[..2 * pairs as usize],
        };
        for (w, o) in words.iter().zip(out.chunks_exact_mut(8)) {
            o.copy_from_slice(&w.to_le_bytes());
        }
        return words.len() * 8;
    }
    let mut at = 0;
    for item in spec.items() {
        let word = match item.source {
            Source::Int(n @ 1..=6) => regs.int[n as usize - 1],
            // SAFETY: the caller's stack above the return address, mapped while the call runs (a
            // function that takes fewer arguments shows what its caller's frame holds there).
            Source::Int(n) => unsafe {
                ((regs.stack + 8 * (n as u64 - 7)) as *const u64).read_unaligned()
            },
            Source::Float(n) => regs.float[n as usize - 1],
            Source::Return if item.format == Format::Float => regs.float[0],
            Source::Return => regs.int[0],
        };
        if item.format == Format::Str {
            at += argspec::put_string(word, &mut out[at..], read_own_memory);
        } else {
            out[at..at + 8].copy_from_slice(&word.to_le_bytes());
            at += 8;
        }
    }
    at
}

/// Reads what it can of this process's memory at `address` into `buf`: `process_vm_readv` fails
/// (or stops short) where the memory is not readable, where a plain read would fault. The range is
/// given as two pieces split at the page boundary, since the call transfers whole pieces only: a
/// string that ends just before an unreadable page is still read.
fn read_own_memory(address: u64, buf: &mut [u8]) -> usize {
    const PAGE: u64 = 4096;
    let local = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    let first = ((PAGE - address % PAGE) as usize).min(buf.len());
    let remote = [
        libc::iovec {
            iov_base: address as *mut libc::c_void,
            iov_len: first,
        },
        libc::iovec {
            iov_base: address.wrapping_add(first as u64) as *mut libc::c_void,
            iov_len: buf.len() - first,
        },
    ];
    let pieces = if first < buf.len() { 2 } else { 1 };
    // SAFETY: `local` is our buffer; the kernel checks `remote`.
    let n =
        unsafe { libc::process_vm_readv(libc::getpid(), &local, 1, remote.as_ptr(), pieces, 0) };
    n.max(0) as usize
}
