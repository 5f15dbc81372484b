//! Unwind rules for allocation stacks: how to step from a return address to its caller's frame when
//! the code has no frame pointers.
//!
//! Each return address maps to one [`Rule`] of the forms x86-64 code uses almost everywhere:
//! `CFA = rsp + off` or `CFA = rbp + off`; the caller's `rbp` saved at `CFA + off`, or unchanged; the
//! return address at `CFA - 8`. Rules are kept in a lock-free open-addressing table mapped once at
//! start ([`init`]), keyed by the return address, so a return address seen before costs one hash and
//! one probe, a small multiple of a frame-pointer step. A miss reads the object's `.eh_frame_hdr`
//! binary-search table and its `.eh_frame` in place with `gimli` (its `UnwindContext` in arrays on
//! this stack: nothing is allocated, the hook is inside `malloc`) and stores the rule it finds.
//! Rules of other forms (a CFA by expression, as in PLT entries and signal trampolines; a return
//! address elsewhere than `CFA - 8`) end the walk and are counted; an address outside every object or
//! without an FDE (JIT code, hand-written assembly) is stepped along frame pointers, as before.
//!
//! Objects are registered by the interner ([`register`]), under its lock, when its walk of the loaded
//! objects finds new ones: the table of objects is published to the hooks by a count stored after
//! the entry (release), read without a lock. Each miss asks the interner for that walk first (one
//! `dl_iterate_phdr` callback when nothing was loaded or unloaded), so that an object unloaded since
//! is forgotten, and the rule table emptied, before a miss would read its unmapped `.eh_frame`.

use core::sync::atomic::{
    AtomicPtr, AtomicU64, AtomicUsize,
    Ordering::{Acquire, Relaxed, Release},
};

use gimli::{
    BaseAddresses, CfaRule, EhFrame, EhFrameHdr, EndianSlice, LittleEndian, Pointer, Register,
    RegisterRule, UnwindContext, UnwindContextStorage, UnwindSection, UnwindTableRow, X86_64,
};

/// How to find the caller's frame from a return address, packed in one word (0: no rule yet).
///
/// Bits 0..4: the kind; bit 4: the caller's `rbp` is saved; bits 16..32: where (`i16`, from the CFA);
/// bits 32..64: the CFA's offset from its register (`i32`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Rule(u64);

/// `CFA = rsp + offset`.
pub const CFA_RSP: u64 = 1;
/// `CFA = rbp + offset`.
pub const CFA_RBP: u64 = 2;
/// The return address is undefined: the outermost frame (`_start`, a thread's start).
pub const OUTERMOST: u64 = 3;
/// A rule of another form: the walk ends there.
pub const UNSUPPORTED: u64 = 4;
/// No unwind information (no object, no FDE): step along frame pointers. Kept in the table as the
/// frame-pointer rule itself (`CFA = rbp + 16`, `rbp` saved at `CFA - 16`), so the walk needs no case
/// for it.
pub const NO_INFO: u64 = 5;
const KIND_MASK: u64 = 0xf;
const RBP_SAVED: u64 = 1 << 4;

impl Rule {
    fn of(kind: u64) -> Rule {
        match kind {
            NO_INFO => {
                COUNTS.no_info.fetch_add(1, Relaxed);
                Rule::FRAME_POINTER
            }
            UNSUPPORTED => {
                COUNTS.unsupported_rules.fetch_add(1, Relaxed);
                Rule(kind)
            }
            _ => Rule(kind),
        }
    }

    /// The frame of a function with a frame pointer: `push rbp; mov rbp, rsp`.
    const FRAME_POINTER: Rule =
        Rule(CFA_RBP | RBP_SAVED | ((-16i16 as u16 as u64) << 16) | (16 << 32));

    /// A CFA rule; `None` when the offsets do not fit.
    fn cfa(base: u64, offset: i64, rbp_at: Option<i64>) -> Option<Rule> {
        let off = i32::try_from(offset).ok()?;
        let mut w = base | ((off as u32 as u64) << 32);
        if let Some(at) = rbp_at {
            let at = i16::try_from(at).ok()?;
            w |= RBP_SAVED | ((at as u16 as u64) << 16);
        }
        Some(Rule(w))
    }

    /// One of [`CFA_RSP`], [`CFA_RBP`], [`OUTERMOST`], [`UNSUPPORTED`], [`NO_INFO`].
    #[inline(always)]
    pub fn kind(self) -> u64 {
        self.0 & KIND_MASK
    }

    /// The CFA's offset from `rsp` or `rbp`.
    #[inline(always)]
    pub fn cfa_offset(self) -> isize {
        (self.0 >> 32) as u32 as i32 as isize
    }

    /// Where the caller's `rbp` is saved, from the CFA; `None`: unchanged.
    #[inline(always)]
    pub fn rbp_at(self) -> Option<isize> {
        (self.0 & RBP_SAVED != 0).then_some((self.0 >> 16) as u16 as i16 as isize)
    }
}

// ---- the rule table ----------------------------------------------------------------------------

#[repr(C)]
struct RuleSlot {
    /// A return address; 0: empty.
    key: AtomicU64,
    /// Its rule; 0 while the thread that claimed the slot has not stored it yet.
    rule: AtomicU64,
}

const RULE_SLOTS: usize = 1 << 16;
const RULE_PROBES: usize = 16;
const RULE_BYTES: usize = RULE_SLOTS * core::mem::size_of::<RuleSlot>();

// Outside `crate::state`, as `OBJECTS`, `OBJECT_COUNT`, `DISCOVER` and `COUNTS`: the unwinder's caches of
// the loaded objects' unwind rules and its counts, of its own types, for the process's life.
static RULES: AtomicPtr<RuleSlot> = AtomicPtr::new(core::ptr::null_mut());

/// Walk statistics, for the tests and for `FERROTRACE_ALLOC_UNWIND_STATS`.
pub struct Counts {
    /// Rules computed from `.eh_frame` (misses of the rule table).
    pub lookups: AtomicU64,
    /// Walks ended by a rule of an unsupported form.
    pub unsupported: AtomicU64,
    /// Return addresses whose rule is of an unsupported form.
    pub unsupported_rules: AtomicU64,
    /// Return addresses without unwind information (stepped along frame pointers).
    pub no_info: AtomicU64,
    /// Rules not kept: their neighbourhood of the table was full.
    pub table_full: AtomicU64,
}

/// The counts of this process.
pub static COUNTS: Counts = Counts {
    lookups: AtomicU64::new(0),
    unsupported: AtomicU64::new(0),
    unsupported_rules: AtomicU64::new(0),
    no_info: AtomicU64::new(0),
    table_full: AtomicU64::new(0),
};

/// Maps the rule table (1 MiB, touched as it fills). False when it could not be mapped: every rule
/// is then looked up again each time.
pub fn init() -> bool {
    if !RULES.load(Relaxed).is_null() {
        return true;
    }
    // SAFETY: an anonymous private mapping, checked; zero pages are empty slots.
    let map = unsafe {
        libc::mmap(
            core::ptr::null_mut(),
            RULE_BYTES,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if map == libc::MAP_FAILED {
        return false;
    }
    RULES.store(map.cast(), Release);
    true
}

#[inline(always)]
fn slot_index(ra: u64, probe: usize) -> usize {
    ((ra.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 48) as usize + probe) & (RULE_SLOTS - 1)
}

/// The rule table, loaded once per walk.
#[derive(Clone, Copy)]
pub struct Rules(*mut RuleSlot);

impl Rules {
    /// The table as it is now.
    #[inline(always)]
    pub fn now() -> Rules {
        Rules(RULES.load(Acquire))
    }

    /// The rule for the return address `ra` (from the table, or looked up and remembered); kind 0 in
    /// the instant another thread has claimed its slot but not stored the rule yet.
    #[inline(always)]
    pub fn get(self, ra: usize) -> Rule {
        rule_in(self.0, ra)
    }

    /// The rule for `ra`, looked up without the table (after [`Rules::get`] said kind 0).
    #[cold]
    pub fn again(self, ra: usize) -> Rule {
        look_up(ra)
    }
}

#[inline(always)]
fn rule_in(slots: *mut RuleSlot, ra: usize) -> Rule {
    if !slots.is_null() {
        let key = ra as u64;
        for probe in 0..RULE_PROBES {
            // SAFETY: the index is below RULE_SLOTS, inside the table's mapping, never unmapped.
            let s = unsafe { &*slots.add(slot_index(key, probe)) };
            let k = s.key.load(Acquire);
            if k == key {
                // 0 (kind 0) while the rule is being stored: the walk asks again (`Rules::again`).
                return Rule(s.rule.load(Acquire));
            }
            if k == 0 {
                break;
            }
        }
    }
    miss(ra, slots)
}

#[cold]
#[inline(never)]
fn miss(ra: usize, slots: *mut RuleSlot) -> Rule {
    COUNTS.lookups.fetch_add(1, Relaxed);
    let r = look_up(ra);
    if slots.is_null() {
        return r;
    }
    let key = ra as u64;
    for probe in 0..RULE_PROBES {
        // SAFETY: as in `rule`.
        let s = unsafe { &*slots.add(slot_index(key, probe)) };
        let k = s.key.load(Acquire);
        let mine = k == key
            || (k == 0
                && match s.key.compare_exchange(0, key, Acquire, Acquire) {
                    Ok(_) => true,
                    Err(now) => now == key,
                });
        if mine {
            // Racing threads store the same rule.
            s.rule.store(r.0, Release);
            return r;
        }
    }
    COUNTS.table_full.fetch_add(1, Relaxed);
    r
}

// ---- the objects -------------------------------------------------------------------------------

/// A loaded object's executable range and its unwind sections (0: none).
struct Object {
    start: AtomicU64,
    end: AtomicU64,
    hdr: AtomicU64,
    hdr_len: AtomicU64,
    eh_frame: AtomicU64,
    eh_frame_len: AtomicU64,
}

const MAX_OBJECTS: usize = 1024;

static OBJECTS: [Object; MAX_OBJECTS] = [const {
    Object {
        start: AtomicU64::new(0),
        end: AtomicU64::new(0),
        hdr: AtomicU64::new(0),
        hdr_len: AtomicU64::new(0),
        eh_frame: AtomicU64::new(0),
        eh_frame_len: AtomicU64::new(0),
    }
}; MAX_OBJECTS];
static OBJECT_COUNT: AtomicUsize = AtomicUsize::new(0);

/// Asks the interner to walk the loaded objects again (registering new ones here); set by the
/// allocation recorder.
static DISCOVER: AtomicPtr<()> = AtomicPtr::new(core::ptr::null_mut());

/// Sets the function that registers the objects loaded since the last call (under the interner's
/// lock).
pub fn set_discover(f: fn()) {
    DISCOVER.store(f as *mut (), Relaxed);
}

/// Registers a loaded object: its executable range `start..end`, its `PT_GNU_EH_FRAME` segment
/// (`(address, size)`, if any) and its loaded segments `(start, end)` (which bound `.eh_frame`).
/// Called by the interner with its lock held: registrations never race each other.
pub fn register(start: u64, end: u64, eh_frame_hdr: Option<(u64, u64)>, loads: &[(u64, u64)]) {
    let n = OBJECT_COUNT.load(Relaxed);
    if n >= MAX_OBJECTS {
        return;
    }
    let (mut hdr, mut hdr_len, mut eh, mut eh_len) = (0, 0, 0, 0);
    if let Some((h, len)) = eh_frame_hdr {
        // SAFETY: the PT_GNU_EH_FRAME segment lies inside a loaded segment, mapped for `len` bytes.
        let data = unsafe { core::slice::from_raw_parts(h as *const u8, len as usize) };
        let bases = BaseAddresses::default().set_eh_frame_hdr(h);
        if let Ok(parsed) = EhFrameHdr::new(data, LittleEndian).parse(&bases, 8) {
            if let (Pointer::Direct(e), true) = (parsed.eh_frame_ptr(), parsed.table().is_some()) {
                if let Some(&(_, seg_end)) = loads.iter().find(|&&(s, en)| s <= e && e < en) {
                    (hdr, hdr_len, eh, eh_len) = (h, len, e, seg_end - e);
                }
            }
        }
    }
    let o = &OBJECTS[n];
    o.start.store(start, Relaxed);
    o.end.store(end, Relaxed);
    o.hdr.store(hdr, Relaxed);
    o.hdr_len.store(hdr_len, Relaxed);
    o.eh_frame.store(eh, Relaxed);
    o.eh_frame_len.store(eh_len, Relaxed);
    OBJECT_COUNT.store(n + 1, Release);
}

/// Whether an object with this executable range is registered and loaded.
pub fn registered(start: u64, end: u64) -> bool {
    let n = OBJECT_COUNT.load(Acquire);
    OBJECTS[..n]
        .iter()
        .any(|o| o.start.load(Relaxed) == start && o.end.load(Relaxed) == end)
}

/// Forgets the registered objects for which `loaded(start, end)` is false (unloaded by `dlclose`):
/// their range becomes empty, so that no miss reads their unmapped `.eh_frame`, and the rule table is
/// emptied, so that code loaded at their addresses later gets its own rules. Called by the interner
/// with its lock held, when the loader's count of objects changed. A walk racing the emptying may take
/// one rule meant for another return address: the bounds checks of the walk still hold, the stack may
/// be wrong. Entries are not reused (a hook may be reading one): a program that loads more than
/// `MAX_OBJECTS` objects in its life walks the later ones along frame pointers.
pub fn forget_unloaded(loaded: impl Fn(u64, u64) -> bool) {
    let n = OBJECT_COUNT.load(Acquire);
    let mut forgot = false;
    for o in &OBJECTS[..n] {
        let (start, end) = (o.start.load(Relaxed), o.end.load(Relaxed));
        if start < end && !loaded(start, end) {
            o.end.store(start, Relaxed);
            forgot = true;
        }
    }
    let slots = RULES.load(Acquire);
    if forgot && !slots.is_null() {
        for i in 0..RULE_SLOTS {
            // SAFETY: i < RULE_SLOTS, inside the table's mapping.
            let s = unsafe { &*slots.add(i) };
            s.key.store(0, Release);
            s.rule.store(0, Release);
        }
    }
}

fn find_object(pc: u64) -> Option<&'static Object> {
    let n = OBJECT_COUNT.load(Acquire);
    OBJECTS[..n]
        .iter()
        .find(|o| o.start.load(Relaxed) <= pc && pc < o.end.load(Relaxed))
}

/// gimli's unwind context in arrays (on the stack of the miss, about 5 KiB), never on the heap.
struct OnStack;

impl<T: gimli::ReaderOffset> UnwindContextStorage<T> for OnStack {
    type Rules = [(Register, RegisterRule<T>); 24];
    type Stack = [UnwindTableRow<T, Self>; 4];
}

/// The rule for return address `ra`, from its object's `.eh_frame`.
fn look_up(ra: usize) -> Rule {
    // Inside the call instruction: a call to a function that does not return may be the last
    // instruction of its function, and the return address the first of the next.
    let pc = ra as u64 - 1;
    // The objects brought up to date first (one `dl_iterate_phdr` callback when the loader's counts
    // did not change): an object unloaded since is forgotten before its unmapped `.eh_frame` is read,
    // and one loaded since is found.
    let f = DISCOVER.load(Relaxed);
    if !f.is_null() {
        // SAFETY: DISCOVER only ever holds a `fn()` (set_discover).
        let f: fn() = unsafe { core::mem::transmute::<*mut (), fn()>(f) };
        f();
    }
    let Some(o) = find_object(pc) else {
        return Rule::of(NO_INFO);
    };
    let (hdr, eh) = (o.hdr.load(Relaxed), o.eh_frame.load(Relaxed));
    if hdr == 0 {
        return Rule::of(NO_INFO);
    }
    // SAFETY: registered from the object's PT_GNU_EH_FRAME segment and the loaded segment that holds
    // .eh_frame, mapped while the object is loaded.
    let (hdr_data, eh_data) = unsafe {
        (
            core::slice::from_raw_parts(hdr as *const u8, o.hdr_len.load(Relaxed) as usize),
            core::slice::from_raw_parts(eh as *const u8, o.eh_frame_len.load(Relaxed) as usize),
        )
    };
    rule_at(hdr, hdr_data, eh, eh_data, pc)
}

/// The rule at `pc` from an `.eh_frame_hdr` and `.eh_frame` at their run-time addresses.
fn rule_at(hdr: u64, hdr_data: &[u8], eh: u64, eh_data: &[u8], pc: u64) -> Rule {
    let bases = BaseAddresses::default()
        .set_eh_frame_hdr(hdr)
        .set_eh_frame(eh);
    let Ok(parsed) = EhFrameHdr::new(hdr_data, LittleEndian).parse(&bases, 8) else {
        return Rule::of(NO_INFO);
    };
    let Some(table) = parsed.table() else {
        return Rule::of(NO_INFO);
    };
    let eh_frame = EhFrame::new(eh_data, LittleEndian);
    let mut ctx = UnwindContext::<usize, OnStack>::new_in();
    let row = match table.unwind_info_for_address(
        &eh_frame,
        &bases,
        &mut ctx,
        pc,
        EhFrame::<EndianSlice<'_, LittleEndian>>::cie_from_offset,
    ) {
        Ok(row) => row,
        Err(gimli::Error::NoUnwindInfoForAddress) => return Rule::of(NO_INFO),
        Err(_) => return Rule::of(UNSUPPORTED),
    };
    translate(row)
}

fn translate<S: UnwindContextStorage<usize>>(row: &UnwindTableRow<usize, S>) -> Rule {
    let (base, offset) = match *row.cfa() {
        CfaRule::RegisterAndOffset { register, offset } if register == X86_64::RSP => {
            (CFA_RSP, offset)
        }
        CfaRule::RegisterAndOffset { register, offset } if register == X86_64::RBP => {
            (CFA_RBP, offset)
        }
        _ => return Rule::of(UNSUPPORTED),
    };
    match row.register(X86_64::RA) {
        Some(RegisterRule::Offset(-8)) => {}
        None | Some(RegisterRule::Undefined) => return Rule::of(OUTERMOST),
        _ => return Rule::of(UNSUPPORTED),
    }
    let rbp_at = match row.register(X86_64::RBP) {
        None | Some(RegisterRule::SameValue) | Some(RegisterRule::Undefined) => None,
        Some(RegisterRule::Offset(at)) => Some(at),
        _ => return Rule::of(UNSUPPORTED),
    };
    Rule::cfa(base, offset, rbp_at).unwrap_or_else(|| Rule::of(UNSUPPORTED))
}

/// Records an allocation (`size` bytes at `addr`) with the stack of the function that called this
/// one (the allocator wrapper): passes its entry `rsp` (the slot of the return address its call
/// pushed) and `rbp` on to `crate::recorders::alloc::alloc_from`.
///
/// # Safety
/// Called as a function, from a frame whose `rbp` follows the frame-pointer chain or holds anything
/// (it is only read as a candidate).
#[unsafe(naked)]
pub(crate) unsafe extern "C" fn alloc_here(_size: usize, _addr: usize) {
    core::arch::naked_asm!("mov rdx, rsp", "mov rcx, rbp", "jmp {}", sym crate::recorders::alloc::alloc_from)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_pack_and_unpack() {
        let r = Rule::cfa(CFA_RSP, 56, Some(-16)).unwrap();
        assert_eq!(
            (r.kind(), r.cfa_offset(), r.rbp_at()),
            (CFA_RSP, 56, Some(-16))
        );
        let r = Rule::cfa(CFA_RBP, 16, None).unwrap();
        assert_eq!((r.kind(), r.cfa_offset(), r.rbp_at()), (CFA_RBP, 16, None));
        assert_eq!(Rule::cfa(CFA_RSP, 1 << 40, None), None);
        assert_eq!(Rule::cfa(CFA_RSP, 8, Some(1 << 20)), None);
    }

    /// This test binary's own return addresses: its code has unwind tables (Rust always emits them).
    #[test]
    fn this_binarys_functions_have_cfa_rules() {
        assert!(init());
        // Objects registered by hand, as the interner does.
        /// start, end, PT_GNU_EH_FRAME, loaded segments.
        type Found = (u64, u64, Option<(u64, u64)>, Vec<(u64, u64)>);
        struct W(Vec<Found>);
        unsafe extern "C" fn each(
            info: *mut libc::dl_phdr_info,
            _: libc::size_t,
            data: *mut libc::c_void,
        ) -> libc::c_int {
            // SAFETY: dl_iterate_phdr passes a valid info and our W.
            let (info, w) = unsafe { (&*info, &mut *(data as *mut W)) };
            let bias = info.dlpi_addr;
            let (mut s, mut e, mut hdr, mut loads) = (u64::MAX, 0, None, Vec::new());
            for i in 0..info.dlpi_phnum as usize {
                // SAFETY: dlpi_phdr has dlpi_phnum entries.
                let ph = unsafe { &*info.dlpi_phdr.add(i) };
                if ph.p_type == libc::PT_LOAD {
                    loads.push((bias + ph.p_vaddr, bias + ph.p_vaddr + ph.p_memsz));
                    if ph.p_flags & libc::PF_X != 0 {
                        s = s.min(bias + ph.p_vaddr);
                        e = e.max(bias + ph.p_vaddr + ph.p_memsz);
                    }
                }
                if ph.p_type == libc::PT_GNU_EH_FRAME {
                    hdr = Some((bias + ph.p_vaddr, ph.p_memsz));
                }
            }
            w.0.push((s, e, hdr, loads));
            0
        }
        let mut w = W(Vec::new());
        // SAFETY: the callback only reads its info and writes into `w`.
        unsafe { libc::dl_iterate_phdr(Some(each), &mut w as *mut W as *mut libc::c_void) };
        if OBJECT_COUNT.load(Relaxed) == 0 {
            for (s, e, hdr, loads) in &w.0 {
                register(*s, *e, *hdr, loads);
            }
        }
        // The return address of a call in this function.
        #[inline(never)]
        fn ret_here() -> usize {
            let ra: usize;
            // SAFETY: reads the return address at the top of the stack after a call.
            unsafe {
                core::arch::asm!("call 2f", "2: pop {}", out(reg) ra);
            }
            ra + 1
        }
        let r = Rules::now().get(ret_here());
        assert!(matches!(r.kind(), CFA_RSP | CFA_RBP), "{r:?}");
        assert!(r.cfa_offset() >= 8, "{r:?}");
        // Remembered: the second time is a hit.
        let before = COUNTS.lookups.load(Relaxed);
        let ra = ret_here();
        let _ = Rules::now().get(ra);
        let _ = Rules::now().get(ra);
        assert!(COUNTS.lookups.load(Relaxed) <= before + 1);
    }
}
