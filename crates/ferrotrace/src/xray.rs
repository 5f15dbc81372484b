//! Finding XRay sleds in every loaded object and patching the selected ones.
//!
//! Discovery walks the loaded objects with `dl_iterate_phdr`, maps each one's file, and reads its
//! `xray_instr_map` section (32-byte unaligned entries; version 2 addresses are PC-relative) from memory.
//! Function names come from the file's symbol table. Patching follows compiler-rt: make the pages
//! writable, write bytes 2..11 of each sled, then its first two bytes with one atomic 16-bit store, so a
//! thread running through sees either the old `jmp +9` or the whole new instruction pair.

use std::ffi::CStr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU16, Ordering};

use ferrotrace_core::schema::{self, Payload};
use ferrotrace_core::symbols::{is_runtime_function, PLUMBING_SECTION};
use ferrotrace_core::xray::{decode_entry, symbol_at, ENTRY_LEN};
use object::{Object, ObjectSection, ObjectSymbol, SymbolKind};

use crate::config::Config;
use crate::runtime::Role;
use crate::trampoline;

pub use ferrotrace_core::xray::SledKind;

/// A loaded object.
#[derive(Debug)]
pub struct Module {
    /// Index in the module list.
    pub id: u32,
    /// File path.
    pub path: PathBuf,
    /// Load bias (runtime address minus ELF virtual address).
    pub bias: u64,
    /// Lowest runtime address of its executable segments.
    pub text_start: u64,
    /// One past the highest.
    pub text_end: u64,
    /// GNU build-id, empty if none.
    pub build_id: Vec<u8>,
}

/// A function selected for tracing.
#[derive(Debug)]
pub struct Function {
    /// Trace-wide function id (what the patched sled loads into r10d).
    pub id: u32,
    /// Module index.
    pub module: u32,
    /// Runtime address of the function.
    pub addr: u64,
    /// Symbol size, 0 if unknown.
    pub size: u64,
    /// Symbol name as in the symbol table (mangled).
    pub name: String,
    /// Its sleds: runtime address and kind.
    pub sleds: Vec<(u64, SledKind)>,
}

/// Result of discovery.
#[derive(Debug, Default)]
pub struct Discovery {
    /// Every loaded object.
    pub modules: Vec<Module>,
    /// The functions to patch.
    pub functions: Vec<Function>,
    /// Instrumented functions found, selected or not.
    pub total_functions: usize,
    /// For each `-F` regex (`Config::include`), whether it matched any instrumented function.
    pub filter_hits: Vec<bool>,
}

impl Discovery {
    /// The executable's file name, for messages.
    pub fn exe_name(&self) -> String {
        self.modules
            .first()
            .map(|m| m.path.display().to_string())
            .unwrap_or_else(|| "the program".into())
    }

    /// `Module` chunk payloads.
    pub fn module_payloads(&self) -> Vec<Vec<u8>> {
        self.modules
            .iter()
            .map(|m| {
                let mut p = Vec::new();
                let _ = schema::Module {
                    id: m.id,
                    bias: m.bias,
                    size: m.text_end.saturating_sub(m.text_start),
                    path: &m.path.display().to_string(),
                    build_id: &m.build_id,
                }
                .encode(&mut p);
                p
            })
            .collect()
    }

    /// The `Functions` chunk payload: the embedded symbol table.
    pub fn functions_payload(&self) -> Vec<u8> {
        let mut p = Vec::new();
        let _ = schema::Count(self.functions.len() as u64).encode(&mut p);
        for f in &self.functions {
            let _ = schema::Function {
                id: f.id,
                module: f.module,
                address: f.addr,
                size: f.size,
                name: &f.name,
            }
            .encode(&mut p);
        }
        p
    }
}

struct Loaded {
    path: PathBuf,
    bias: u64,
    text: Option<(u64, u64)>,
}

/// `dl_iterate_phdr` callback: notes one loaded object in the `Vec<Loaded>` that `data` points to.
///
/// # Safety
/// `info` is what `dl_iterate_phdr` passes; `data` points to a `Vec<Loaded>` nobody else uses meanwhile.
unsafe extern "C" fn collect_object(
    info: *mut libc::dl_phdr_info,
    _size: libc::size_t,
    data: *mut libc::c_void,
) -> libc::c_int {
    // SAFETY: the caller's contract.
    let (out, info) = unsafe { (&mut *(data as *mut Vec<Loaded>), &*info) };
    let name = if info.dlpi_name.is_null() {
        ""
    } else {
        // SAFETY: a non-null dlpi_name is a NUL-terminated string owned by the dynamic loader.
        unsafe { CStr::from_ptr(info.dlpi_name) }
            .to_str()
            .unwrap_or("")
    };
    let path = if out.is_empty() && name.is_empty() {
        match std::fs::read_link("/proc/self/exe") {
            Ok(p) => p,
            Err(_) => return 0,
        }
    } else if name.is_empty() || name.starts_with("linux-vdso") || name.starts_with("linux-gate") {
        return 0;
    } else {
        PathBuf::from(name)
    };
    let mut text: Option<(u64, u64)> = None;
    for i in 0..info.dlpi_phnum as usize {
        // SAFETY: dlpi_phdr points to dlpi_phnum program headers.
        let ph = unsafe { &*info.dlpi_phdr.add(i) };
        if ph.p_type == libc::PT_LOAD && ph.p_flags & libc::PF_X != 0 {
            let s = info.dlpi_addr + ph.p_vaddr;
            let e = s + ph.p_memsz;
            text = Some(text.map_or((s, e), |(a, b)| (a.min(s), b.max(e))));
        }
    }
    out.push(Loaded {
        path,
        bias: info.dlpi_addr,
        text,
    });
    0
}

/// A read-only mapping of a file.
struct Mapped {
    ptr: *mut libc::c_void,
    len: usize,
}

impl Mapped {
    fn open(path: &Path) -> Option<Mapped> {
        let file = std::fs::File::open(path).ok()?;
        let len = file.metadata().ok()?.len() as usize;
        if len == 0 {
            return None;
        }
        use std::os::fd::AsRawFd;
        // SAFETY: read-only private mapping of a file we opened; checked below.
        let ptr = unsafe {
            libc::mmap(
                core::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_PRIVATE,
                file.as_raw_fd(),
                0,
            )
        };
        (ptr != libc::MAP_FAILED).then_some(Mapped { ptr, len })
    }

    fn bytes(&self) -> &[u8] {
        // SAFETY: the mapping is `len` bytes long and lives as long as `self`.
        unsafe { core::slice::from_raw_parts(self.ptr as *const u8, self.len) }
    }
}

impl Drop for Mapped {
    fn drop(&mut self) {
        // SAFETY: unmapping our own mapping.
        unsafe { libc::munmap(self.ptr, self.len) };
    }
}

/// The name users see and filters match: demangled, without the hash.
pub fn display_name(mangled: &str) -> String {
    format!("{:#}", rustc_demangle::demangle(mangled))
}

/// Reads the `count` entries of a mapped `xray_instr_map` at runtime address `map` and groups the
/// function sleds by function, in map order.
fn read_sleds(map: u64, count: usize) -> Vec<(u64, Vec<(u64, SledKind)>)> {
    let mut funcs: Vec<(u64, Vec<(u64, SledKind)>)> = Vec::new();
    for i in 0..count {
        let at = map + (i * ENTRY_LEN) as u64;
        // SAFETY: the section is mapped (SHF_ALLOC) and `count` entries long; entries are unaligned.
        let bytes = unsafe { (at as *const [u8; ENTRY_LEN]).read_unaligned() };
        let e = decode_entry(&bytes, at);
        let Some(kind) = e.kind else { continue };
        match funcs.last_mut() {
            Some((f, sleds)) if *f == e.function => sleds.push((e.sled, kind)),
            _ => funcs.push((e.function, vec![(e.sled, kind)])),
        }
    }
    funcs
}

/// What discovery has already seen: objects by load address and the next ids to hand out. Kept by the
/// runtime so that a rescan after `dlopen` only looks at new objects and ids stay unique.
#[derive(Clone, Debug, Default)]
pub struct Known {
    /// `(path, load bias)` of every object seen.
    pub objects: Vec<(PathBuf, u64)>,
    /// Next function id (ids start at 1).
    pub next_function_id: u32,
}

/// Finds the instrumented functions of every loaded object not in `known` and selects those to trace;
/// records the new objects in `known`.
pub fn discover(config: &Config, role: Role, known: &mut Known) -> Result<Discovery, String> {
    let mut loaded: Vec<Loaded> = Vec::new();
    // SAFETY: the callback only reads the info it is given and pushes into `loaded`.
    unsafe {
        libc::dl_iterate_phdr(
            Some(collect_object),
            &mut loaded as *mut Vec<Loaded> as *mut libc::c_void,
        )
    };
    let own_text = trampoline::ferrotrace_xray_entry as *const () as u64;
    let mut out = Discovery {
        filter_hits: vec![false; config.include.len()],
        ..Discovery::default()
    };
    let mut next_id = known.next_function_id.max(1);
    for l in loaded {
        if known
            .objects
            .iter()
            .any(|(p, b)| *p == l.path && *b == l.bias)
        {
            continue;
        }
        let index = known.objects.len();
        known.objects.push((l.path.clone(), l.bias));
        let (text_start, text_end) = l.text.unwrap_or((l.bias, l.bias));
        let module_id = index as u32;
        let mapped = Mapped::open(&l.path);
        let elf = mapped
            .as_ref()
            .and_then(|m| object::File::parse(m.bytes()).ok());
        let build_id = elf
            .as_ref()
            .and_then(|e| e.build_id().ok().flatten())
            .map(|b| b.to_vec())
            .unwrap_or_default();
        out.modules.push(Module {
            id: module_id,
            path: l.path.clone(),
            bias: l.bias,
            text_start,
            text_end,
            build_id,
        });
        let Some(elf) = elf else { continue };
        let Some(section) = elf.section_by_name("xray_instr_map") else {
            continue;
        };
        // The preloaded runtime must not patch itself (the whole library is skipped); neither must the
        // linked one (it has sleds when the program was built with -Zinstrument-xray): its functions are
        // recognised below (`symbols`: its crates, and the tracepoint plumbing's section).
        if role == Role::Preload && (text_start..text_end).contains(&own_text) {
            continue;
        }
        let map = l.bias.wrapping_add(section.address());
        let funcs = read_sleds(map, section.size() as usize / ENTRY_LEN);
        let mut symbols: Vec<(u64, u64, &str)> = elf
            .symbols()
            .chain(elf.dynamic_symbols())
            .filter(|s| s.kind() == SymbolKind::Text && s.address() != 0)
            .filter_map(|s| Some((s.address(), s.size(), s.name().ok()?)))
            .collect();
        // An executable with std has its panic entry point: the fault handler then ends a stack
        // overflow the way std would (see `exit`).
        if module_id == 0 && symbols.iter().any(|s| s.2.contains("rust_begin_unwind")) {
            crate::exit::RUST_STD.store(true, std::sync::atomic::Ordering::Relaxed);
        }
        symbols.sort_unstable_by_key(|s| (s.0, std::cmp::Reverse(s.1)));
        symbols.dedup_by_key(|s| s.0);
        let plumbing = elf
            .section_by_name(PLUMBING_SECTION)
            .map(|s| s.address()..s.address() + s.size());
        for (func, sleds) in funcs {
            out.total_functions += 1;
            let vaddr = func.wrapping_sub(l.bias);
            let sym = symbol_at(&symbols, vaddr);
            let (name, size) = match sym {
                Some((_, size, name)) => (name.to_string(), size),
                None => (format!("fn_{vaddr:x}"), 0),
            };
            if is_runtime_function(&name, vaddr, plumbing.clone()) {
                continue;
            }
            if !config.include.is_empty() {
                // Which -F patterns match anything at all (a run that selects nothing says so).
                let shown = display_name(&name);
                for (hit, re) in out.filter_hits.iter_mut().zip(&config.include) {
                    *hit = *hit || re.is_match(&shown);
                }
            }
            if !config.selects(&name) {
                continue;
            }
            out.functions.push(Function {
                id: next_id,
                module: module_id,
                addr: func,
                size,
                name,
                sleds,
            });
            next_id += 1;
        }
    }
    known.next_function_id = next_id;
    Ok(out)
}

const PAGE: u64 = 4096;

/// A page of `jmp [rip]` stubs within rel32 reach of one object's sleds, to the trampolines (those that
/// record the CPU in live mode).
fn stub_page_near(lo: u64, hi: u64) -> Result<u64, String> {
    let targets = trampoline::trampolines(crate::live::active());
    let reach = |addr: u64| {
        hi.saturating_sub(addr) < (1 << 31) - PAGE && addr.saturating_sub(lo) < (1 << 31) - PAGE
    };
    let mut candidates = Vec::new();
    for k in 1..64u64 {
        candidates.push(((hi + PAGE - 1) & !(PAGE - 1)) + k * (16 << 20));
        if let Some(below) = (lo & !(PAGE - 1)).checked_sub(k * (16 << 20)) {
            candidates.push(below);
        }
    }
    for hint in candidates.into_iter().filter(|&a| a > 0 && reach(a)) {
        // SAFETY: MAP_FIXED_NOREPLACE never replaces an existing mapping; failure is checked.
        let p = unsafe {
            libc::mmap(
                hint as *mut libc::c_void,
                PAGE as usize,
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
            // SAFETY: unmapping the page we just got.
            unsafe { libc::munmap(p, PAGE as usize) };
            continue;
        }
        let page = p as *mut u8;
        for (slot, target) in targets.into_iter().enumerate() {
            // jmp qword ptr [rip + 0]; .quad target; int3 int3
            let mut stub = [0xccu8; 16];
            stub[..6].copy_from_slice(&[0xff, 0x25, 0, 0, 0, 0]);
            stub[6..14].copy_from_slice(&target.to_le_bytes());
            // SAFETY: writing inside our fresh page.
            unsafe { core::ptr::copy_nonoverlapping(stub.as_ptr(), page.add(slot * 16), 16) };
        }
        // SAFETY: our page.
        unsafe { libc::mprotect(p, PAGE as usize, libc::PROT_READ | libc::PROT_EXEC) };
        return Ok(hint);
    }
    Err(format!(
        "no free page within ±2 GiB of the code at {lo:#x}..{hi:#x} for trampolines"
    ))
}

/// Patches every sled of the selected functions. Safe while other threads run through them.
///
/// # Safety
/// `found` is what [`discover`] returned, unchanged: every sled address is one of a loaded object's
/// instrumentation map, and anything else would be overwritten with a call.
pub unsafe fn patch(found: &Discovery) -> Result<(), String> {
    for module in &found.modules {
        let funcs: Vec<&Function> = found
            .functions
            .iter()
            .filter(|f| f.module == module.id)
            .collect();
        let Some(lo) = funcs.iter().flat_map(|f| f.sleds.iter().map(|s| s.0)).min() else {
            continue;
        };
        let hi = funcs
            .iter()
            .flat_map(|f| f.sleds.iter().map(|s| s.0 + 11))
            .max()
            .unwrap_or(lo);
        let stub = stub_page_near(lo, hi)?;
        let first = lo & !(PAGE - 1);
        let last = (hi + PAGE - 1) & !(PAGE - 1);
        let len = (last - first) as usize;
        // SAFETY: making the pages that hold the sleds writable; they may hold running code, hence RWX.
        let rc = unsafe {
            libc::mprotect(
                first as *mut libc::c_void,
                len,
                libc::PROT_READ | libc::PROT_WRITE | libc::PROT_EXEC,
            )
        };
        if rc != 0 {
            return Err(format!(
                "cannot make {} writable to patch sleds: {}",
                module.path.display(),
                std::io::Error::last_os_error()
            ));
        }
        for f in &funcs {
            for &(sled, kind) in &f.sleds {
                // SAFETY: sled addresses come from the object's own instrumentation map (the caller's
                // contract) and lie in pages made writable above.
                unsafe { patch_sled(sled, kind, f.id, stub) };
            }
        }
        // SAFETY: restoring the text protection.
        unsafe {
            libc::mprotect(
                first as *mut libc::c_void,
                len,
                libc::PROT_READ | libc::PROT_EXEC,
            )
        };
    }
    // Make every core see the new code before its next instruction fetch (cross-modifying code).
    // SAFETY: plain syscalls; failures only mean the older, still-correct serialisation of the kernel.
    unsafe {
        const REGISTER_SYNC_CORE: libc::c_long = 1 << 6; // MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED_SYNC_CORE
        const SYNC_CORE: libc::c_long = 1 << 5; // MEMBARRIER_CMD_PRIVATE_EXPEDITED_SYNC_CORE
        if libc::syscall(libc::SYS_membarrier, REGISTER_SYNC_CORE, 0) == 0 {
            libc::syscall(libc::SYS_membarrier, SYNC_CORE, 0);
        }
    }
    Ok(())
}

/// Rewrites one sled to load `id` into r10d and call (entry, tail) or jump to (exit) `stub`'s slot.
///
/// # Safety
/// `sled` is an XRay sled of the given kind, in a writable page.
unsafe fn patch_sled(sled: u64, kind: SledKind, id: u32, stub: u64) {
    let p = sled as *mut u8;
    let (expected_first, target, opcode) = match kind {
        SledKind::Entry => (0xebu8, stub, 0xe8u8),
        SledKind::Exit => (0xc3, stub + 16, 0xe9),
        SledKind::Tail => (0xeb, stub + 32, 0xe8),
    };
    // SAFETY: the sled's 11 bytes are mapped and writable (the caller's contract).
    if unsafe { p.read() } != expected_first {
        return; // already patched, or not a sled we know
    }
    let rel = (target as i64 - (sled as i64 + 11)) as i32;
    let mut bytes = [0u8; 11];
    bytes[0] = 0x41;
    bytes[1] = 0xba;
    bytes[2..6].copy_from_slice(&id.to_le_bytes());
    bytes[6] = opcode;
    bytes[7..11].copy_from_slice(&rel.to_le_bytes());
    for (i, b) in bytes.iter().enumerate().skip(2) {
        // SAFETY: as above; a thread running through still jumps over these bytes (`jmp +9` or `ret`).
        unsafe { core::ptr::write_volatile(p.add(i), *b) };
    }
    core::sync::atomic::fence(Ordering::SeqCst);
    // Sleds are 2-byte aligned: one atomic store flips the sled to the new instruction pair.
    // SAFETY: the sled is 2-byte aligned and writable.
    unsafe { &*(p as *const AtomicU16) }
        .store(u16::from_le_bytes([bytes[0], bytes[1]]), Ordering::SeqCst);
}
