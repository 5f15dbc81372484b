//! mcount/`__fentry__` call sites and patchable NOPs: finding them in a loaded object (for discovery,
//! `xray`), and the table the mcount hooks ([`crate::recorders::mcount`]) look their return address up in.

use std::sync::atomic::{AtomicPtr, Ordering};

use ferrotrace_core::mcount::{
    for_each_call, has_frame_pointer_prologue, hook_flavor, is_nop5, plt_stub_slot, Flavor, ENDBR64,
};
use object::{Object, ObjectSection, ObjectSymbol, ObjectSymbolTable, SectionFlags};

use crate::state::PROCESS;
// ---------------------------------------------------------------------------------------------------
// Finding sites in a loaded object.

/// A site found in a loaded object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Site {
    /// Runtime address of the call (or NOP) instruction.
    pub addr: u64,
    /// What the hook sees as its return address: the key of the site table.
    pub key: u64,
    /// Which hook it calls (or, for a NOP, would call once patched).
    pub flavor: Flavor,
    /// A patchable NOP rather than a call.
    pub nop: bool,
}

/// Reads `len` bytes of this process's memory at `addr`, or `None` outside every loaded object's
/// executable segments (`text` = the object's `[start, end)`).
fn code_at(addr: u64, len: usize, text: (u64, u64)) -> Option<&'static [u8]> {
    if addr < text.0 || addr.checked_add(len as u64)? > text.1 {
        return None;
    }
    // SAFETY: inside the object's mapped executable segments (from its program headers), which stay
    // mapped as long as the object is loaded; readable (R-X).
    Some(unsafe { core::slice::from_raw_parts(addr as *const u8, len) })
}

/// What [`find_sites`] found in one loaded object.
#[derive(Debug, Default)]
pub struct Found {
    /// The calls and NOPs, by address.
    pub sites: Vec<Site>,
    /// The GOT slots (runtime addresses) the object calls the hooks through, from its `JUMP_SLOT`
    /// (PLT) and `GLOB_DAT` (`call *slot(%rip)`) relocations, with the hook each names.
    pub slots: Vec<(u64, Flavor)>,
}

/// Finds the mcount/`__fentry__` calls and the patchable NOPs of one loaded object. `text` is the
/// runtime range of its executable segments; `main` is true for the executable (whose own definitions of
/// the hooks, when it links the runtime, are what its calls target).
pub fn find_sites(elf: &object::File, bias: u64, text: (u64, u64), main: bool) -> Found {
    let hook_symbols = |syms: object::SymbolIterator<'_, '_>, defined: bool| {
        syms.filter(move |s| s.is_undefined() != defined)
            .filter_map(|s| Some((s.address(), hook_flavor(s.name().ok()?)?)))
            .collect::<Vec<_>>()
    };
    let imported = hook_symbols(elf.dynamic_symbols(), false);
    let defined: Vec<(u64, Flavor)> = if main {
        hook_symbols(elf.symbols(), true)
            .into_iter()
            .chain(hook_symbols(elf.dynamic_symbols(), true))
            .collect()
    } else {
        Vec::new()
    };
    let mut sites = Vec::new();
    // GOT slots of the hooks (PLT jumps and `call *slot(%rip)` go through them).
    let mut slots: Vec<(u64, Flavor)> = Vec::new();
    if !imported.is_empty() || !defined.is_empty() {
        if let (Some(relocs), Some(dynsyms)) =
            (elf.dynamic_relocations(), elf.dynamic_symbol_table())
        {
            for (offset, reloc) in relocs {
                // Slots the code calls through; not a data word that holds the hook's address.
                let called = matches!(reloc.flags(), object::RelocationFlags::Elf { r_type }
                    if r_type == object::elf::R_X86_64_JUMP_SLOT
                        || r_type == object::elf::R_X86_64_GLOB_DAT);
                if !called {
                    continue;
                }
                if let object::RelocationTarget::Symbol(index) = reloc.target() {
                    let flavor = dynsyms
                        .symbol_by_index(index)
                        .ok()
                        .and_then(|s| hook_flavor(s.name().ok()?));
                    if let Some(flavor) = flavor {
                        slots.push((bias.wrapping_add(offset), flavor));
                    }
                }
            }
        }
        let mut targets: Vec<(u64, Flavor)> = defined
            .iter()
            .map(|&(a, f)| (bias.wrapping_add(a), f))
            .collect();
        let plt = |name: &str| name.starts_with(".plt");
        for section in elf.sections() {
            if !section.name().is_ok_and(plt) {
                continue;
            }
            let start = bias.wrapping_add(section.address());
            for stub in (start..start + section.size()).step_by(16) {
                let Some(code) =
                    code_at(stub, 16.min((start + section.size() - stub) as usize), text)
                else {
                    continue;
                };
                if let Some(slot) = plt_stub_slot(code, stub) {
                    if let Some(&(_, f)) = slots.iter().find(|s| s.0 == slot) {
                        targets.push((stub, f));
                    }
                }
            }
        }
        let target_addrs: Vec<u64> = targets.iter().map(|t| t.0).collect();
        let slot_addrs: Vec<u64> = slots.iter().map(|s| s.0).collect();
        for section in elf.sections() {
            let executable = matches!(section.flags(), SectionFlags::Elf { sh_flags } if sh_flags & u64::from(object::elf::SHF_EXECINSTR) != 0);
            if !executable || section.name().is_ok_and(plt) {
                continue;
            }
            let start = bias.wrapping_add(section.address());
            let Some(code) = code_at(start, section.size() as usize, text) else {
                continue;
            };
            for_each_call(code, start, &target_addrs, &slot_addrs, |c| {
                let flavor = if c.len == 5 {
                    targets[c.hook].1
                } else {
                    slots[c.hook].1
                };
                sites.push(Site {
                    addr: c.site,
                    key: c.site + c.len as u64,
                    flavor,
                    nop: false,
                });
            });
        }
    }
    // Patchable NOPs: the sections list runtime addresses (relocated at load), so read them from memory.
    for name in ["__mcount_loc", "__patchable_function_entries"] {
        let Some(section) = elf.section_by_name(name) else {
            continue;
        };
        let at = bias.wrapping_add(section.address());
        for i in 0..section.size() / 8 {
            // SAFETY: an allocated section of the loaded object, `size` bytes long; entries may be
            // unaligned in principle.
            let addr = unsafe { ((at + i * 8) as *const u64).read_unaligned() };
            let addr = if addr < bias {
                bias.wrapping_add(addr)
            } else {
                addr
            };
            if code_at(addr, 5, text).is_some_and(is_nop5) {
                sites.push(Site {
                    addr,
                    key: addr + 5,
                    flavor: Flavor::Mcount, // decided against the function's start by the caller
                    nop: true,
                });
            }
        }
    }
    sites.sort_unstable_by_key(|s| s.addr);
    sites.dedup_by_key(|s| s.addr);
    Found { sites, slots }
}

/// Whether a site in the function starting at `func` can be hooked, and with which flavor: a NOP at
/// the function's start (after an optional `endbr64`) is an fentry site; an mcount site needs the
/// function to set up its frame pointer (`rbp + 8` is where the hook finds the return address).
pub fn hookable(site: &Site, func: u64, text: (u64, u64)) -> Option<Flavor> {
    let start = code_at(func, 8, text)?;
    let entry = if start.starts_with(&ENDBR64) {
        func + 4
    } else {
        func
    };
    if site.nop && site.addr == entry {
        return Some(Flavor::Fentry);
    }
    match site.flavor {
        Flavor::Fentry => Some(Flavor::Fentry),
        Flavor::Mcount => has_frame_pointer_prologue(start).then_some(Flavor::Mcount),
    }
}

// ---------------------------------------------------------------------------------------------------
// The site table.

/// The empty table the hooks read before discovery: mask 0, one empty slot. (This and the table's
/// pointer stay outside `crate::state`: the hooks' assembly reads them at a fixed address.)
static EMPTY_TABLE: [u64; 4] = [0; 4];

/// The site table the hooks read: a header word (the probe mask in bytes, `(slots - 1) * 16`), a spare
/// word, then `slots` pairs `{return address, record word}`. Replaced whole (never changed in place) when
/// a rescan finds more sites, or an attach selects other functions; old tables are leaked, a hook may
/// still be reading one.
pub static FERROTRACE_SITES: AtomicPtr<u64> = AtomicPtr::new(EMPTY_TABLE.as_ptr() as *mut u64);

/// The multiplier of the table's hash (the hooks hash in assembly).
pub const HASH_MUL: u64 = 0x9E37_79B9_7F4A_7C15;

fn probe_start(key: u64, mask_bytes: u64) -> u64 {
    (key.wrapping_mul(HASH_MUL) >> 28) & mask_bytes
}

/// The record word of a traced function's entry (its exit sets bit 32): the id, and the CPU unknown
/// (bits 48–63 all ones: the hooks do not read it, so `ferrotrace live` prints `?` rather than a wrong
/// CPU).
pub fn record_word(id: u32) -> u64 {
    id as u64 | (u16::MAX as u64) << 48
}

/// Adds `sites` (`(key, record word)`, word 0 = not traced) to the table the hooks read, or gives
/// those it holds already their new word.
pub fn publish(sites: &[(u64, u64)]) {
    if sites.is_empty() {
        return;
    }
    let mut all = PROCESS
        .mcount_sites
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    let mut changed = false;
    for &(key, word) in sites {
        changed |= all.insert(key, word) != Some(word);
    }
    if !changed {
        // Attached again with the same selection: the table the hooks read is right as it is.
        return;
    }
    let slots = (all.len() * 4).next_power_of_two().max(2) as u64;
    let mask_bytes = (slots - 1) * 16;
    let mut table = vec![0u64; 2 + 2 * slots as usize].into_boxed_slice();
    table[0] = mask_bytes;
    for (&key, &word) in all.iter() {
        let mut at = probe_start(key, mask_bytes);
        loop {
            let i = 2 + (at / 8) as usize;
            if table[i] == 0 || table[i] == key {
                table[i] = key;
                table[i + 1] = word;
                break;
            }
            at = (at + 16) & mask_bytes;
        }
    }
    FERROTRACE_SITES.store(Box::leak(table).as_mut_ptr(), Ordering::Release);
}

/// The record word the hooks find for `key` (the hooks do this in assembly).
#[cfg(test)]
fn lookup(key: u64) -> Option<u64> {
    let table = FERROTRACE_SITES.load(Ordering::Acquire);
    // SAFETY: the table is a leaked, never-freed array of the documented layout.
    unsafe {
        let mask = *table;
        let mut at = probe_start(key, mask);
        loop {
            let k = *table.add(2 + (at / 8) as usize);
            if k == key {
                return Some(*table.add(3 + (at / 8) as usize));
            }
            if k == 0 {
                return None;
            }
            at = (at + 16) & mask;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_finds_every_key_and_nothing_else() {
        let sites: Vec<(u64, u64)> = (0..1000u64).map(|i| (0x5555_0000 + i * 37, i)).collect();
        publish(&sites);
        for &(k, w) in &sites {
            assert_eq!(lookup(k), Some(w));
        }
        assert_eq!(lookup(0x5555_0001), None);
    }
}
