//! Patching what discovery found: every selected XRay sled and patchable mcount NOP becomes a call (or,
//! for an EXIT sled, a jump) to a stub in a page near its object, and the stub jumps to the recorder
//! ([`Targets`]: the XRay trampolines, the mcount and fentry hooks). Patching follows compiler-rt: make
//! the pages writable, write bytes 2..11 of each sled, then its first two bytes with one atomic 16-bit
//! store, so a thread running through sees either the old `jmp +9` or the whole new instruction pair;
//! NOPs become calls in one atomic write ([`crate::patch::text`]).

use ferrotrace_core::mcount::{is_nop5, Flavor};

use ferrotrace_core::entry_patch::Window;
use ferrotrace_core::env::EntryJump;

use crate::arch::patch::{
    jmp_rip_abs64, rel32, xray_sled_first_byte, xray_sled_patched, CALL_REL32, JMP_REL32,
};
use crate::patch::discovery::{Discovery, Function, SledKind};
use crate::patch::got;
use crate::patch::text::Patcher;
use crate::recorders::mcount::sites as mcount_sites;
use crate::state::{Patched, PROCESS};

const PAGE: u64 = crate::arch::thread::PAGE as u64;

/// Puts back every sled, NOP and GOT slot patched since the last call, while other threads run
/// through them: each sled's first two bytes in one atomic store, each NOP in one atomic write
/// ([`Patcher::poke5`]), each slot in one exchange ([`got::exchange`]). A thread already in a
/// trampoline or hook finishes there (the library is never unloaded). Returns how many sites were
/// restored.
///
/// What stays different from the file: bytes 2-10 of each sled patched (its `mov r10d, id` operand
/// and its `call`/`jmp` to the stub), 9 bytes a sled, which no thread runs any more (the short jump
/// put back skips them; an EXIT sled's `ret` comes before them). They are not put back because a
/// thread stopped between the `mov` and the `call` when the first bytes were restored would resume
/// at byte 6, inside the original NOP (`00 00 ...`). Checked against `/proc/PID/mem` by
/// `after_a_detach_only_the_skipped_bytes_of_sleds_differ_from_the_file`.
pub fn unpatch_all() -> usize {
    let sites = std::mem::take(&mut *PROCESS.patched.lock().unwrap_or_else(|e| e.into_inner()));
    let mut patcher = Patcher::new();
    let mut restored = 0;
    for site in &sites {
        let (addr, len) = match *site {
            Patched::Sled(a, _) => (a, 2),
            Patched::Five(a, _, _) => (a, 5),
            Patched::Slot(slot, was, hook) => {
                // SAFETY: a GOT slot of a loaded object (discovery's), which this runtime redirected.
                if unsafe { got::exchange(slot, hook, was) } == Ok(hook) {
                    restored += 1;
                }
                continue;
            }
        };
        if patcher.make_writable(addr as usize, len).is_err() {
            continue;
        }
        match *site {
            // SAFETY: a sled this runtime patched (its first two bytes the `mov r10d` it wrote), in a
            // page made writable above; the restored short jump or `ret` skips the rest.
            Patched::Sled(a, first) => unsafe {
                (*(a as *const core::sync::atomic::AtomicU16)).store(
                    u16::from_le_bytes(first),
                    std::sync::atomic::Ordering::SeqCst,
                );
            },
            // SAFETY: a NOP site this runtime made a call, or an entry it made a jump (the trampoline
            // it jumps to stays mapped for threads still in it), made writable above.
            Patched::Five(a, nop, call) => unsafe {
                patcher.poke5(a as usize, call, nop);
            },
            Patched::Slot(..) => {}
        }
        restored += 1;
    }
    restored
}

/// Who writes the jumps at the entries of functions patched in uninstrumented code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EntryJumps {
    /// This runtime, as it patches: no other thread runs (start-up, before the collector exists).
    Here,
    /// The host that attached (`record -p`), with every thread of the process stopped and none inside
    /// a window: [`patch`] builds the trampolines and returns the jumps instead of writing them.
    Host,
}

/// Where patched code goes, through a stub page near each object: the XRay trampolines and the mcount
/// hooks (the runtime's, which discovery does not know).
#[derive(Clone, Copy, Debug)]
pub struct Targets {
    /// The XRay trampolines: entry, exit, tail.
    pub xray: [u64; 3],
    /// The XRay trampolines of functions whose values are recorded (`-A`, `-R`): entry with its
    /// arguments, exit with its return value, exit with its return registers, entry with 1, 2 and 3
    /// pairs of argument registers.
    pub xray_values: [u64; 6],
    /// The mcount hook (patchable NOPs after a prologue).
    pub mcount: u64,
    /// The fentry hook (patchable NOPs at a function's start).
    pub fentry: u64,
}

/// The stubs of a stub page, 16 bytes apart, in the order of [`Targets::in_stub_order`].
#[derive(Clone, Copy)]
enum Stub {
    XrayEntry,
    XrayExit,
    XrayTail,
    Mcount,
    Fentry,
    XrayEntryArgs,
    XrayExitRetval,
    XrayExitRegisters,
    XrayEntryRegisters1,
    XrayEntryRegisters2,
    XrayEntryRegisters3,
}

impl Stub {
    /// Where this stub is in the stub page at `page`.
    fn at(self, page: u64) -> u64 {
        page + 16 * self as u64
    }
}

impl Targets {
    /// The targets of a stub page's stubs, in [`Stub`] order.
    fn in_stub_order(&self) -> [u64; 11] {
        let [entry, exit, tail] = self.xray;
        let [entry_args, exit_retval, exit_registers, pairs1, pairs2, pairs3] = self.xray_values;
        [
            entry,
            exit,
            tail,
            self.mcount,
            self.fentry,
            entry_args,
            exit_retval,
            exit_registers,
            pairs1,
            pairs2,
            pairs3,
        ]
    }
}

/// A page of `jmp [rip]` stubs to `targets` within rel32 reach of one object's sleds and patchable NOPs.
fn stub_page_near(lo: u64, hi: u64, targets: &Targets) -> Result<u64, String> {
    let reach = |addr: u64| {
        hi.saturating_sub(addr) < (1 << 31) - PAGE && addr.saturating_sub(lo) < (1 << 31) - PAGE
    };
    let mut pages = PROCESS.stub_pages.lock().unwrap_or_else(|e| e.into_inner());
    let wanted = targets.in_stub_order();
    if let Some(&(page, _)) = pages
        .iter()
        .find(|&&(page, to)| to == wanted && reach(page))
    {
        return Ok(page);
    }
    let p = map_near(lo, hi, PAGE)?;
    let page = p as *mut u8;
    for (slot, target) in targets.in_stub_order().into_iter().enumerate() {
        // jmp qword ptr [rip + 0]; .quad target; int3 int3
        let mut stub = [0xccu8; 16];
        stub[..14].copy_from_slice(&jmp_rip_abs64(target));
        // SAFETY: writing inside our fresh page.
        unsafe { core::ptr::copy_nonoverlapping(stub.as_ptr(), page.add(slot * 16), 16) };
    }
    // SAFETY: our page.
    unsafe {
        libc::mprotect(
            page.cast(),
            PAGE as usize,
            libc::PROT_READ | libc::PROT_EXEC,
        )
    };
    pages.push((p, wanted));
    Ok(p)
}

/// Maps `len` bytes (a multiple of the page size) of fresh read-write memory such that every byte of
/// it is within rel32 reach of every byte of `[lo, hi)`; never unmapped by the caller (a thread may be
/// in the code it will hold).
fn map_near(lo: u64, hi: u64, len: u64) -> Result<u64, String> {
    let reach = |addr: u64| {
        hi.saturating_sub(addr) < (1 << 31) - PAGE
            && (addr + len).saturating_sub(lo) < (1 << 31) - PAGE
    };
    let mut candidates = Vec::new();
    for k in 1..64u64 {
        candidates.push(((hi + PAGE - 1) & !(PAGE - 1)) + k * (16 << 20));
        if let Some(below) = (lo & !(PAGE - 1)).checked_sub(k * (16 << 20) + len) {
            candidates.push(below);
        }
    }
    for hint in candidates.into_iter().filter(|&a| a > 0 && reach(a)) {
        // SAFETY: MAP_FIXED_NOREPLACE never replaces an existing mapping; failure is checked.
        let p = unsafe {
            libc::mmap(
                hint as *mut libc::c_void,
                len as usize,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED_NOREPLACE,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            continue;
        }
        if p as u64 != hint {
            // SAFETY: unmapping the memory we just got.
            unsafe { libc::munmap(p, len as usize) };
            continue;
        }
        return Ok(hint);
    }
    Err(format!(
        "no free memory within ±2 GiB of the code at {lo:#x}..{hi:#x} for trampolines"
    ))
}

/// Builds the trampolines of the functions of one object whose entries are patched (`funcs`: those
/// with a window), in fresh memory near them, hands their keys to the hooks' table, then writes each
/// entry's jump, or (`who`: [`EntryJumps::Host`]) adds it to `for_host`; the hook is `hook`. Functions
/// whose window cannot move there are left unpatched and counted in the result.
///
/// # Safety
/// Each window is one the entry-patch analysis accepted for a function of a loaded object, in pages
/// `patcher` made writable, and, when the jumps are written here, no thread runs in a window (the
/// process has one thread).
unsafe fn patch_entries(
    patcher: &Patcher,
    funcs: &[&Function],
    hook: u64,
    who: EntryJumps,
    patched: &mut Vec<Patched>,
    for_host: &mut Vec<EntryJump>,
) -> Result<usize, String> {
    use crate::arch::entry_patch::{trampoline, CALL_LEN, SLOT};
    let windows: Vec<(&Function, Window)> =
        funcs.iter().filter_map(|f| Some((*f, f.entry?))).collect();
    let Some(lo) = windows.iter().map(|w| w.1.at).min() else {
        return Ok(0);
    };
    let hi = windows.iter().map(|w| w.1.at + 16).max().unwrap_or(lo);
    let len = ((16 + windows.len() * SLOT) as u64).next_multiple_of(PAGE);
    let base = map_near(lo, hi, len)?;
    // SAFETY: `len` fresh writable bytes at `base`.
    let memory = unsafe { core::slice::from_raw_parts_mut(base as *mut u8, len as usize) };
    memory.fill(0xcc);
    memory[..8].copy_from_slice(&hook.to_le_bytes());
    let mut keys = Vec::new();
    let mut jumps = Vec::new();
    let mut refused = 0;
    for (i, (f, w)) in windows.iter().enumerate() {
        let at = base + 16 + (i * SLOT) as u64;
        // SAFETY: the window is code of a loaded object (the caller's contract).
        let replaced = unsafe { core::slice::from_raw_parts(w.at as *const u8, w.len as usize) };
        let (Ok(code), Some(jump)) = (
            trampoline(*w, replaced, at, base),
            rel32(JMP_REL32, w.at as usize, at as usize),
        ) else {
            refused += 1;
            continue;
        };
        let from = (at - base) as usize;
        memory[from..from + code.len()].copy_from_slice(&code);
        keys.push((at + CALL_LEN, f.record_word()));
        let mut old = [0u8; 5];
        old.copy_from_slice(&replaced[..5]);
        jumps.push((*f, *w, old, jump));
    }
    // SAFETY: our memory, filled.
    if unsafe {
        libc::mprotect(
            base as *mut libc::c_void,
            len as usize,
            libc::PROT_READ | libc::PROT_EXEC,
        )
    } != 0
    {
        return Err(format!(
            "cannot make trampolines executable: {}",
            std::io::Error::last_os_error()
        ));
    }
    // The hooks must know a trampoline's key before any thread can reach it.
    mcount_sites::publish(&keys);
    for (f, w, old, jump) in jumps {
        match who {
            EntryJumps::Here => {
                // SAFETY: an accepted window in a writable page, no thread inside it (the caller's
                // contract); its trampoline is in place.
                if unsafe { patcher.poke5(w.at as usize, old, jump) } {
                    patched.push(Patched::Five(w.at, old, jump));
                }
            }
            EntryJumps::Host => {
                // Listed as patched too: if the host cannot put the bytes back at the stop (it was
                // killed), `unpatch_all` does, while threads run (a thread is never inside a 5-byte
                // jump); where the host did, or never wrote the jump, it finds the original bytes.
                patched.push(Patched::Five(w.at, old, jump));
                for_host.push(EntryJump {
                    site: w.at,
                    window: w.len,
                    original: old,
                    jump,
                    function: crate::lifecycle::config::display_name(&f.name),
                });
            }
        }
    }
    Ok(refused)
}

/// Patches every sled and patchable NOP of the selected functions (one batch of the text patcher), and
/// hands the mcount call sites to the hooks' table. Safe while other threads run through them. Patched
/// code goes to `targets`. Entries of uninstrumented functions get their trampolines; their jumps are
/// written as `entry_jumps` says: the jumps left to the host are returned.
///
/// # Safety
/// `found` is what [`discover`](crate::patch::discovery::discover) returned, unchanged: every sled and NOP address is one of a loaded
/// object's instrumentation, and anything else would be overwritten with a call. With
/// [`EntryJumps::Here`], no other thread runs while its entries are patched.
pub unsafe fn patch(
    found: &Discovery,
    targets: &Targets,
    entry_jumps: EntryJumps,
) -> Result<Vec<EntryJump>, String> {
    mcount_sites::publish(&found.calls);
    let mut patcher = Patcher::new();
    let mut patched = PROCESS.patched.lock().unwrap_or_else(|e| e.into_inner());
    // Before any site of theirs can reach the hooks that look them up.
    crate::recorders::args::publish(found.functions.iter().map(|f| (f.id, &f.values)));
    let mut for_host = Vec::new();
    for module in &found.modules {
        let funcs: Vec<&Function> = found
            .functions
            .iter()
            .filter(|f| f.module == module.id)
            .collect();
        let sleds = funcs.iter().flat_map(|f| f.sleds.iter().map(|s| (s.0, 11)));
        let nops = funcs.iter().flat_map(|f| f.nops.iter().map(|n| (n.0, 5)));
        let entries = funcs.iter().filter_map(|f| Some((f.entry?.at, 5)));
        let spans: Vec<(u64, u64)> = sleds.chain(nops).chain(entries).collect();
        let Some(lo) = spans.iter().map(|s| s.0).min() else {
            continue;
        };
        let hi = spans.iter().map(|s| s.0 + s.1).max().unwrap_or(lo);
        patcher
            .make_writable(lo as usize, (hi - lo) as usize)
            .map_err(|e| format!("{}: {e}", module.path.display()))?;
        if funcs.iter().any(|f| f.entry.is_some()) {
            // SAFETY: windows from discovery's analysis (the caller's contract), made writable above.
            unsafe {
                patch_entries(
                    &patcher,
                    &funcs,
                    targets.fentry,
                    entry_jumps,
                    &mut patched,
                    &mut for_host,
                )
            }
            .map_err(|e| format!("{}: {e}", module.path.display()))?;
            continue;
        }
        let stub = stub_page_near(lo, hi, targets)?;
        for f in &funcs {
            for &(sled, kind) in &f.sleds {
                // SAFETY: sled addresses come from the object's own instrumentation map (the caller's
                // contract) and lie in pages made writable above.
                if let Some(first) = unsafe { patch_sled(&patcher, sled, kind, f, stub) } {
                    patched.push(Patched::Sled(sled, first));
                }
            }
            for &(site, flavor) in &f.nops {
                let hook = match flavor {
                    Flavor::Mcount => Stub::Mcount,
                    Flavor::Fentry => Stub::Fentry,
                }
                .at(stub);
                // SAFETY: a 5-byte NOP listed by the object's __mcount_loc or
                // __patchable_function_entries (checked at discovery), made writable above; NOPs differ
                // in their last byte (gcc's 0f 1f 44 00 00, clang's 0f 1f 44 00 08).
                unsafe {
                    let nop = (site as *const [u8; 5]).read();
                    if let (true, Some(call)) = (
                        is_nop5(&nop),
                        rel32(CALL_REL32, site as usize, hook as usize),
                    ) {
                        if patcher.poke5(site as usize, nop, call) {
                            patched.push(Patched::Five(site, nop, call));
                        }
                    }
                }
            }
        }
    }
    Ok(for_host)
}

/// An attached runtime, which interposes nothing: points the GOT slots through which objects call
/// mcount/`__fentry__` (bound to the C library's) at its hooks, after [`patch`] published their call
/// sites, until [`unpatch_all`] puts back what each held. A slot that holds the hook already (the
/// preloaded runtime's interposition, a runtime attached before) is left. Returns how many were
/// redirected; those it could not change are said in the error, the others stay redirected.
///
/// # Safety
/// `found` is what [`discover`](crate::patch::discovery::discover) returned: its slots are GOT slots of
/// loaded objects, named by their relocations.
pub unsafe fn redirect_hook_slots(found: &Discovery, targets: &Targets) -> Result<usize, String> {
    let mut patched = PROCESS.patched.lock().unwrap_or_else(|e| e.into_inner());
    let mut redirected = 0;
    let mut failed = Vec::new();
    for &(slot, flavor) in &found.hook_slots {
        let hook = match flavor {
            Flavor::Mcount => targets.mcount,
            Flavor::Fentry => targets.fentry,
        };
        // SAFETY: a GOT slot of a loaded object (the caller's contract).
        let was = unsafe { got::read(slot) };
        if was == hook {
            continue;
        }
        // SAFETY: as above.
        match unsafe { got::exchange(slot, was, hook) } {
            Ok(held) if held == was => {
                patched.push(Patched::Slot(slot, was, hook));
                redirected += 1;
            }
            Ok(_) => failed.push(format!(
                "the GOT slot at {slot:#x} changed while redirected"
            )),
            Err(e) => failed.push(e),
        }
    }
    if failed.is_empty() {
        Ok(redirected)
    } else {
        Err(failed.join("; "))
    }
}

/// Rewrites one sled of `f` to load its id into r10d and call (entry, tail) or jump to (exit) `stub`'s slot;
/// returns its first two bytes as they were, when it patched it.
///
/// # Safety
/// `sled` is an XRay sled of the given kind, in a page `patcher` made writable.
unsafe fn patch_sled(
    patcher: &Patcher,
    sled: u64,
    kind: SledKind,
    f: &Function,
    stub: u64,
) -> Option<[u8; 2]> {
    let target = match kind {
        SledKind::Entry if f.values.args.in_registers() => match f.values.args.register_pairs() {
            1 => Stub::XrayEntryRegisters1,
            2 => Stub::XrayEntryRegisters2,
            _ => Stub::XrayEntryRegisters3,
        },
        SledKind::Entry if !f.values.args.is_empty() => Stub::XrayEntryArgs,
        SledKind::Entry => Stub::XrayEntry,
        SledKind::Exit if f.values.retval.in_registers() => Stub::XrayExitRegisters,
        SledKind::Exit if !f.values.retval.is_empty() => Stub::XrayExitRetval,
        SledKind::Exit => Stub::XrayExit,
        SledKind::Tail => Stub::XrayTail,
    };
    // SAFETY: the sled's 11 bytes are mapped (the caller's contract).
    let first = unsafe { (sled as *const [u8; 2]).read() };
    if first[0] != xray_sled_first_byte(kind) {
        return None; // already patched, or not a sled we know
    }
    // The stub page is within reach of every sled of the object (stub_page_near).
    let bytes = xray_sled_patched(kind, sled, f.id, target.at(stub))?;
    // SAFETY: sleds are 2-byte aligned, writable (the caller's contract), and the unpatched first
    // instruction jumps over the rest until the flip.
    unsafe { patcher.write_then_flip2(sled as usize, &bytes) };
    Some(first)
}
