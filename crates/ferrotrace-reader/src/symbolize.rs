//! Addresses → names: the one symbolizer of every analysis (stacks of samples and allocations, functions
//! of traces recorded without an embedded symbol table, `--srcline`).
//!
//! A module is found where the trace says it was loaded from, and is used only when its build-id matches
//! the one recorded (a rebuilt binary would give wrong names). Debug information is looked for the way
//! perf and gdb do, without debuginfod: in the file itself, then by build-id under
//! `/usr/lib/debug/.build-id/`, then through `.gnu_debuglink` (beside the file, in its `.debug/`, and
//! under `/usr/lib/debug/`). DWARF gives inlined frames and `file:line`; without DWARF the symbol table
//! (`.symtab` of the file or of its debug file, then `.dynsym`) names the function; what stays unknown is
//! named after its module (`libfoo.so+0x1234` for one address, `[libfoo.so]` when grouped), so that a
//! report gets one row per module rather than one per address.

use std::borrow::Cow;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use object::{Object, ObjectSymbol, SymbolKind};

use crate::reader::{demangle, Trace};

/// The module id of the kernel in stacks (its addresses are absolute).
pub const KERNEL_MODULE_PATH: &str = "[kernel.kallsyms]";

/// The module path of the vDSO (the kernel's name for its mapping). Its addresses are offsets in the
/// image; `ferrotrace profile` records its build-id.
pub const VDSO_PATH: &str = ferrotrace_core::vdso::PATH;

/// One frame of an address: a function, or a function inlined at that address.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct SymFrame {
    /// Demangled name without hash (`myapp::parse`), or `[module]` when unknown.
    pub function: Arc<str>,
    /// Source file, empty when unknown.
    pub file: Arc<str>,
    /// Source line, 0 when unknown.
    pub line: u32,
    /// This function was inlined into the next (outer) frame of the same address.
    pub inlined: bool,
    /// Nothing named it: `function` names the module only.
    pub unknown: bool,
    /// A kernel frame.
    pub kernel: bool,
}

struct ModuleSyms {
    /// DWARF of the module (its own, or its separate debug file's).
    dwarf: Option<addr2line::Loader>,
    /// Function symbols, sorted by address, one per address (shared: the kernel's are read once).
    symbols: Arc<[FunctionSymbol]>,
    /// `[file name]`, for what nothing names.
    label: Arc<str>,
    kernel: bool,
    /// The code regions its `.eh_frame` describes (start, length), sorted: one per function in a
    /// stripped binary too, for what no symbol names (`[cc1+0x4a2b0]`, a row each, rather than one
    /// `[cc1]` for all).
    regions: Vec<(u64, u64)>,
}

/// Names addresses of a trace's modules, caching what it loaded and what it found.
pub struct Symbolizer {
    paths: HashMap<u32, (String, Vec<u8>)>,
    modules: HashMap<u32, Option<ModuleSyms>>,
    cache: HashMap<(u32, u64), Arc<[SymFrame]>>,
    /// Where to look for separate debug files (`/usr/lib/debug`; tests may point elsewhere).
    debug_root: PathBuf,
    /// Modules whose file was missing or had another build-id: named after their path only.
    pub unreadable: Vec<String>,
}

impl Symbolizer {
    /// A symbolizer for the modules `trace` lists.
    pub fn new(trace: &Trace) -> Symbolizer {
        Symbolizer::for_modules(
            trace
                .modules()
                .iter()
                .map(|m| (m.id, m.path.clone(), m.build_id.clone())),
        )
    }

    /// A symbolizer for `(id, path, build-id)` modules.
    pub fn for_modules(modules: impl IntoIterator<Item = (u32, String, Vec<u8>)>) -> Symbolizer {
        Symbolizer {
            paths: modules
                .into_iter()
                .map(|(id, path, build_id)| (id, (path, build_id)))
                .collect(),
            modules: HashMap::new(),
            cache: HashMap::new(),
            debug_root: PathBuf::from("/usr/lib/debug"),
            unreadable: Vec::new(),
        }
    }

    /// The frames at `address` of module `module` (module-relative: an ELF virtual address; absolute
    /// for the kernel), innermost first: inlined functions, then the function that contains the
    /// address. Never empty.
    pub fn frames(&mut self, module: u32, address: u64) -> Arc<[SymFrame]> {
        if let Some(f) = self.cache.get(&(module, address)) {
            return f.clone();
        }
        if !self.modules.contains_key(&module) {
            let loaded = self.load(module);
            self.modules.insert(module, loaded);
        }
        let frames: Arc<[SymFrame]> = match self.modules.get(&module) {
            Some(Some(m)) => lookup(m, address).into(),
            _ => {
                let label = self.paths.get(&module).map_or_else(
                    || "[unknown]".to_string(),
                    // A pseudo-module (`[truncated]`: the root of stacks the eBPF unwinder could
                    // not finish) is named as it is.
                    |(p, _)| match p.starts_with('[') {
                        true => p.to_string(),
                        false => format!("[{}]", file_name(p)),
                    },
                );
                vec![unknown_frame(label.into(), false)].into()
            }
        };
        self.cache.insert((module, address), frames.clone());
        frames
    }

    /// The function symbol of `module` that contains `address` (module-relative): its start, size
    /// and name as in the binary (mangled).
    pub fn function_symbol(&mut self, module: u32, address: u64) -> Option<(u64, u64, Arc<str>)> {
        self.symbols(module)
            .and_then(|syms| symbol_containing(syms, address))
            .map(|(start, size, name, _)| (*start, *size, name.clone()))
    }

    /// The function symbols of `module`, sorted by address; `None` when its file cannot be read.
    fn symbols(&mut self, module: u32) -> Option<&[FunctionSymbol]> {
        if !self.modules.contains_key(&module) {
            let loaded = self.load(module);
            self.modules.insert(module, loaded);
        }
        self.modules
            .get(&module)
            .and_then(|m| m.as_ref())
            .map(|m| &m.symbols[..])
    }

    fn load(&mut self, module: u32) -> Option<ModuleSyms> {
        let (path, build_id) = self.paths.get(&module)?.clone();
        if path == KERNEL_MODULE_PATH {
            // Read once per process: 200,000 lines that do not change while it runs.
            static KALLSYMS: std::sync::OnceLock<Arc<[FunctionSymbol]>> =
                std::sync::OnceLock::new();
            return Some(ModuleSyms {
                dwarf: None,
                symbols: KALLSYMS.get_or_init(|| kallsyms().into()).clone(),
                label: "[kernel]".into(),
                kernel: true,
                regions: Vec::new(),
            });
        }
        if ferrotrace_core::jit::is_perf_map(&path) {
            return self.load_perf_map(&path);
        }
        if path.starts_with('[') && path != VDSO_PATH {
            // A pseudo-module (`[truncated]`): no file to read, its frames are named by its path.
            return None;
        }
        let label: Arc<str> = format!("[{}]", file_name(&path)).into();
        let (mapped, vdso);
        let data: &[u8] = if path == VDSO_PATH {
            // The vDSO has no file: this process's own is the recorded one when the build-ids
            // agree (same kernel), checked below.
            vdso = match ferrotrace_core::vdso::own_image() {
                Some(d) => d,
                None => {
                    self.unreadable
                        .push("[vdso]: this process has no vDSO to read".into());
                    return None;
                }
            };
            &vdso
        } else {
            mapped = match crate::binary::map(Path::new(&path)) {
                Ok(d) => d,
                Err(e) => {
                    self.unreadable.push(e.to_string());
                    return None;
                }
            };
            &mapped
        };
        let obj = object::File::parse(data).ok()?;
        let file_id = obj.build_id().ok().flatten().map(<[u8]>::to_vec);
        if !build_id.is_empty() && file_id.as_deref().is_some_and(|id| id != build_id) {
            self.unreadable.push(if path == VDSO_PATH {
                "[vdso]: recorded under another kernel (build-id differs); its frames stay unnamed"
                    .to_string()
            } else {
                format!("{path}: rebuilt since it was traced (build-id differs)")
            });
            return None;
        }
        let mut symbols = function_symbols(&obj);
        symbols.extend(plt_symbols(&obj));
        let has_dwarf = obj.section_by_name(".debug_info").is_some();
        let debug_file = (!has_dwarf && path != VDSO_PATH)
            .then(|| self.separate_debug_file(Path::new(&path), &obj, file_id.as_deref()))
            .flatten();
        let dwarf_path = debug_file.clone().unwrap_or_else(|| PathBuf::from(&path));
        if let Some(df) = &debug_file {
            // The debug file's full symbol table names static functions `.dynsym` lacks.
            if let Ok(d) = crate::binary::map(df) {
                if let Ok(o) = object::File::parse(&*d) {
                    symbols.extend(function_symbols(&o));
                }
            }
        }
        // One name per address: of aliases (`malloc`, `__libc_malloc`, `__GI___libc_malloc`), the
        // one users know, as perf shows it.
        symbols.sort_by(|a, b| a.0.cmp(&b.0).then(alias_rank(a).cmp(&alias_rank(b))));
        symbols.dedup_by_key(|s| s.0);
        let dwarf = (has_dwarf || debug_file.is_some())
            .then(|| addr2line::Loader::new(&dwarf_path).ok())
            .flatten();
        Some(ModuleSyms {
            dwarf,
            symbols: symbols.into(),
            label,
            kernel: false,
            regions: unwind_regions(&obj),
        })
    }

    /// The functions a JIT listed in its perf map at `path` ([`ferrotrace_core::jit`]): read only
    /// when it is a regular file of ours or root's, as perf reads it (anyone may write in `/tmp`).
    fn load_perf_map(&mut self, path: &str) -> Option<ModuleSyms> {
        use std::os::unix::fs::MetadataExt;
        let read = std::fs::symlink_metadata(path).and_then(|m| {
            // SAFETY: getuid has no preconditions.
            let uid = unsafe { libc::getuid() };
            if !m.file_type().is_file() || (m.uid() != uid && m.uid() != 0) {
                return Err(std::io::Error::other(
                    "not a regular file of this user or root",
                ));
            }
            std::fs::read_to_string(path)
        });
        let text = match read {
            Ok(t) => t,
            Err(e) => {
                self.unreadable.push(format!("{path}: {e}"));
                return None;
            }
        };
        let mut symbols: Vec<FunctionSymbol> = ferrotrace_core::jit::parse_perf_map(&text)
            .into_iter()
            .map(|(start, size, name)| (start, size, Arc::from(name), true))
            .collect();
        // Of two entries at one address (code regenerated in place), the later one.
        symbols.reverse();
        symbols.sort_by_key(|s| s.0);
        symbols.dedup_by_key(|s| s.0);
        Some(ModuleSyms {
            dwarf: None,
            symbols: symbols.into(),
            label: ferrotrace_core::jit::ANON_MODULE.into(),
            kernel: false,
            regions: Vec::new(),
        })
    }

    /// The separate debug file of `path`: by build-id, then by `.gnu_debuglink`.
    fn separate_debug_file(
        &self,
        path: &Path,
        obj: &object::File<'_>,
        build_id: Option<&[u8]>,
    ) -> Option<PathBuf> {
        if let Some(id) = build_id.filter(|id| id.len() > 1) {
            let hex: String = id.iter().map(|b| format!("{b:02x}")).collect();
            let p = self
                .debug_root
                .join(".build-id")
                .join(&hex[..2])
                .join(format!("{}.debug", &hex[2..]));
            if p.is_file() {
                return Some(p);
            }
        }
        let (name, _crc) = obj.gnu_debuglink().ok().flatten()?;
        let name = std::str::from_utf8(name).ok()?;
        let dir = path.parent().unwrap_or(Path::new("/"));
        let under_root = self
            .debug_root
            .join(dir.strip_prefix("/").unwrap_or(dir))
            .join(name);
        [dir.join(name), dir.join(".debug").join(name), under_root]
            .into_iter()
            .find(|p| p.is_file() && p != path)
    }
}

/// Names the functions of a trace whose events carry addresses as function ids: one recorded by
/// `ferrotrace-embedded` without the embedder's names (docs/format.md, "Function ids of embedded
/// traces": an id is the low 32 bits of the link-time address of the call site or function). Each id
/// becomes a function named by the symbol of module 1 that contains it, read from `binary` when given
/// (`--symbols`: the trace's module path is then replaced by it), else from the path the trace
/// records; addresses nothing names are named by their address (`0x2011a0`). Does nothing for a trace
/// that has a Functions chunk. Returns what the user should be warned about.
pub fn name_address_ids(
    trace: &mut Trace,
    binary: Option<&Path>,
) -> Result<Vec<String>, crate::reader::ReadError> {
    let mut warnings = Vec::new();
    if !trace.functions().is_empty() {
        if let Some(b) = binary {
            warnings.push(format!(
                "--symbols {}: the trace names its functions itself; the file is not used",
                b.display()
            ));
        }
        return Ok(warnings);
    }
    let embedded = trace.session().sources & ferrotrace_core::schema::source::EMBEDDED != 0;
    if !embedded && binary.is_none() {
        return Ok(warnings);
    }
    let Some(module) = trace.modules.iter_mut().min_by_key(|m| m.id) else {
        warnings.push("the trace has no module to name its functions from".to_string());
        return Ok(warnings);
    };
    if let Some(b) = binary {
        module.path = b.to_string_lossy().into_owned();
    }
    let (module_id, bias) = (module.id, module.bias);
    let pathless = module.path.is_empty();
    let mut ids = std::collections::BTreeSet::new();
    let tids: Vec<u32> = trace.threads().keys().copied().collect();
    for tid in tids {
        let mut events = trace.thread_events(tid)?;
        while let Some(e) = events.next_raw() {
            let (_, kind, id) = e?;
            if kind.is_function() {
                ids.insert(id);
            }
        }
    }
    let mut symbolizer = Symbolizer::new(trace);
    if pathless {
        symbolizer.modules.insert(module_id, None);
        warnings.push(
            "the trace does not say which binary it traced: name its functions with --symbols BINARY"
                .to_string(),
        );
    }
    // Ids keep the low 32 bits of an address: the high ones are those of the module's code (a
    // kernel's 0xffffffff8...), taken from its first function symbol.
    let high = symbolizer
        .symbols(module_id)
        .and_then(|s| s.first())
        .map_or(0, |s| s.0 & !0xffff_ffff);
    let mut unnamed = 0;
    for id in ids {
        let vaddr = high | id as u64;
        let (addr, size, mangled) = match symbolizer.function_symbol(module_id, vaddr) {
            Some((start, size, name)) => (start, size, name.to_string()),
            None => {
                unnamed += 1;
                (vaddr, 0, format!("{vaddr:#x}"))
            }
        };
        trace.functions.insert(
            id,
            crate::reader::Function::new(id, module_id, addr.wrapping_add(bias), size, mangled),
        );
    }
    warnings.append(&mut symbolizer.unreadable);
    if !pathless && unnamed > 0 && unnamed == trace.functions().len() {
        warnings.push(format!(
            "no function of the trace is named by {}: is it the traced binary?",
            trace
                .modules()
                .iter()
                .find(|m| m.id == module_id)
                .map_or("", |m| m.path.as_str())
        ));
    }
    Ok(warnings)
}

fn file_name(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

fn unknown_frame(label: Arc<str>, kernel: bool) -> SymFrame {
    SymFrame {
        function: label,
        file: "".into(),
        line: 0,
        inlined: false,
        unknown: true,
        kernel,
    }
}

/// The code regions (start, length) of the FDEs in `obj`'s `.eh_frame`, sorted: every function the
/// compiler emitted unwind rows for, symbols or not.
fn unwind_regions(obj: &object::File<'_>) -> Vec<(u64, u64)> {
    use addr2line::gimli::{self, UnwindSection};
    use object::ObjectSection;
    let Some(section) = obj.section_by_name(".eh_frame") else {
        return Vec::new();
    };
    let Ok(data) = section.uncompressed_data() else {
        return Vec::new();
    };
    let eh_frame = gimli::EhFrame::new(&data, gimli::LittleEndian);
    let mut bases = gimli::BaseAddresses::default().set_eh_frame(section.address());
    for (name, set) in [
        (".text", gimli::BaseAddresses::set_text as fn(_, u64) -> _),
        (".got", gimli::BaseAddresses::set_got),
    ] {
        if let Some(s) = obj.section_by_name(name) {
            bases = set(bases, s.address());
        }
    }
    let mut regions = Vec::new();
    let mut entries = eh_frame.entries(&bases);
    while let Ok(Some(entry)) = entries.next() {
        if let gimli::CieOrFde::Fde(partial) = entry {
            if let Ok(fde) = partial.parse(|_, b, o| eh_frame.cie_from_offset(b, o)) {
                if fde.len() > 0 {
                    regions.push((fde.initial_address(), fde.len()));
                }
            }
        }
    }
    regions.sort_unstable();
    regions
}

/// A function symbol: start, size, name, and whether it is global (exported).
type FunctionSymbol = (u64, u64, Arc<str>, bool);

fn function_symbols(obj: &object::File<'_>) -> Vec<FunctionSymbol> {
    obj.symbols()
        .chain(obj.dynamic_symbols())
        .filter(|s| s.kind() == SymbolKind::Text && s.address() != 0)
        .filter_map(|s| {
            Some((
                s.address(),
                s.size(),
                Arc::from(s.name().ok()?),
                s.is_global() && !s.is_weak(),
            ))
        })
        .collect()
}

/// `name@plt` for each entry of the PLT sections (`.plt`, `.plt.sec`, `.plt.got`), as perf and objdump
/// name them: the stubs have no symbols, and their time would go to whatever symbol precedes them
/// (`_init`, whose size is 0). An entry is `jmp *GOT(%rip)` (after an `endbr64` or a `bnd` prefix);
/// the relocation of that GOT slot names it: JUMP_SLOT and GLOB_DAT by their symbol, IRELATIVE (an
/// IFUNC inside the library itself: libc's `memcmp`) by the symbol at its resolver, perf's
/// `*ABS*+0x…@plt`. Entries whose slot has no relocation (PLT0, lazy-binding stubs) get no name.
fn plt_symbols(obj: &object::File<'_>) -> Vec<FunctionSymbol> {
    use object::{ObjectSection, ObjectSymbolTable, RelocationFlags, RelocationTarget};
    let Some(relocations) = obj.dynamic_relocations() else {
        return Vec::new();
    };
    let dynsyms = obj.dynamic_symbol_table();
    let symbols = function_symbols(obj);
    let mut by_slot: HashMap<u64, Arc<str>> = HashMap::new();
    for (slot, r) in relocations {
        let RelocationFlags::Elf { r_type } = r.flags() else {
            continue;
        };
        let name = match (r_type, r.target()) {
            (
                object::elf::R_X86_64_JUMP_SLOT | object::elf::R_X86_64_GLOB_DAT,
                RelocationTarget::Symbol(i),
            ) => dynsyms
                .as_ref()
                .and_then(|t| t.symbol_by_index(i).ok())
                .and_then(|s| s.name().ok().map(demangle)),
            (object::elf::R_X86_64_IRELATIVE, _) => {
                let resolver = r.addend() as u64;
                Some(
                    symbols
                        .iter()
                        .filter(|s| s.0 == resolver)
                        .min_by_key(|s| alias_rank(s))
                        .map_or_else(|| format!("*ABS*+{resolver:#x}"), |s| demangle(&s.2)),
                )
            }
            _ => None,
        };
        if let Some(name) = name.filter(|n| !n.is_empty()) {
            by_slot.insert(slot, format!("{name}@plt").into());
        }
    }
    let mut out = Vec::new();
    for section in obj.sections() {
        if !matches!(section.name(), Ok(".plt" | ".plt.sec" | ".plt.got")) {
            continue;
        }
        let Ok(data) = section.data() else { continue };
        let entry = elf_entsize(obj, &section).unwrap_or(16);
        for (i, code) in data.chunks(entry as usize).enumerate() {
            let at = section.address() + i as u64 * entry;
            // The first `ff 25 rel32` (jmp *rel32(%rip)) of the entry.
            let Some(j) = code.windows(6).position(|w| w[0] == 0xff && w[1] == 0x25) else {
                continue;
            };
            let rel = i32::from_le_bytes([code[j + 2], code[j + 3], code[j + 4], code[j + 5]]);
            let slot = (at + j as u64 + 6).wrapping_add(rel as i64 as u64);
            if let Some(name) = by_slot.get(&slot) {
                out.push((at, entry, name.clone(), false));
            }
        }
    }
    out
}

/// A section's `sh_entsize` (the PLT's entry size: 16, or 8 for a `.plt.got` without IBT).
fn elf_entsize(obj: &object::File<'_>, section: &object::Section<'_, '_>) -> Option<u64> {
    use object::read::elf::SectionHeader;
    use object::ObjectSection;
    let e = match (obj, section.index()) {
        (object::File::Elf64(f), i) => f
            .elf_section_table()
            .section(i)
            .ok()
            .map(|h| h.sh_entsize(f.endian()))?,
        _ => return None,
    };
    (e != 0).then_some(e)
}

/// Which of several names of one address to show, by perf's rule (`choose_best_symbol`), so that
/// profiles compare by name with perf's: one with a size, then a global one, then the one with the
/// fewest leading underscores, then the longest (`__memmove_avx512_unaligned_erms` over its alias
/// `__memcpy_avx512_unaligned_erms`), its symbol version left out and a name without one preferred
/// (`__libc_start_main` over `__libc_start_main@@GLIBC_2.34`); the largest size wins among equals.
fn alias_rank(
    s: &FunctionSymbol,
) -> (
    bool,
    bool,
    usize,
    std::cmp::Reverse<usize>,
    bool,
    std::cmp::Reverse<u64>,
) {
    let (base, version) = match s.2.split_once('@') {
        Some((base, _)) => (base, true),
        None => (&*s.2, false),
    };
    let underscores = base.len() - base.trim_start_matches('_').len();
    (
        s.1 == 0,
        !s.3,
        underscores,
        std::cmp::Reverse(base.len()),
        version,
        std::cmp::Reverse(s.1),
    )
}

/// The symbol containing `address`: the last one starting at or before it, if the address is within
/// its size (or it has none).
fn symbol_containing(symbols: &[FunctionSymbol], address: u64) -> Option<&FunctionSymbol> {
    let i = symbols.partition_point(|s| s.0 <= address);
    let s = symbols.get(i.checked_sub(1)?)?;
    (s.1 == 0 || address < s.0 + s.1).then_some(s)
}

fn symbol_at(symbols: &[FunctionSymbol], address: u64) -> Option<&str> {
    symbol_containing(symbols, address).map(|s| &*s.2)
}

fn lookup(m: &ModuleSyms, address: u64) -> Vec<SymFrame> {
    let mut out: Vec<SymFrame> = Vec::new();
    if let Some(dwarf) = &m.dwarf {
        if let Ok(mut it) = dwarf.find_frames(address) {
            while let Ok(Some(f)) = it.next() {
                let function: Cow<'_, str> = f
                    .function
                    .as_ref()
                    .and_then(|n| n.raw_name().ok())
                    .unwrap_or_default();
                let (file, line) = f
                    .location
                    .map_or(("", 0), |l| (l.file.unwrap_or(""), l.line.unwrap_or(0)));
                out.push(SymFrame {
                    function: demangle(&function).into(),
                    file: file.into(),
                    line,
                    inlined: true,
                    unknown: false,
                    kernel: false,
                });
            }
        }
    }
    // The outermost frame is the function itself; the ones before it were inlined into it.
    if let Some(last) = out.last_mut() {
        last.inlined = false;
    }
    let symbol = symbol_at(&m.symbols, address).map(demangle);
    match (out.last_mut(), symbol) {
        // The function itself is named by the symbol table, as perf names it (DWARF may give an
        // internal alias, or nothing); DWARF names what was inlined into it.
        (Some(last), Some(s)) => last.function = s.into(),
        (None, Some(s)) => out.push(SymFrame {
            function: s.into(),
            file: "".into(),
            line: 0,
            inlined: false,
            unknown: false,
            kernel: m.kernel,
        }),
        _ => {}
    }
    out.retain(|f| !f.function.is_empty());
    if out.is_empty() {
        let first = m.regions.partition_point(|&(start, _)| start <= address);
        let region = first
            .checked_sub(1)
            .map(|i| m.regions[i])
            .filter(|&(start, len)| address < start + len);
        let label = match region {
            // `[cc1]` and the region's start: `[cc1+0x4a2b0]`.
            Some((start, _)) => {
                let name = m.label.strip_suffix(']').unwrap_or(&m.label);
                format!("{name}+{start:#x}]").into()
            }
            None => m.label.clone(),
        };
        out.push(unknown_frame(label, m.kernel));
    }
    if m.kernel {
        for f in &mut out {
            f.kernel = true;
        }
    }
    out
}

/// Function symbols of the running kernel from `/proc/kallsyms` (empty without permission to see
/// addresses).
fn kallsyms() -> Vec<FunctionSymbol> {
    let Ok(text) = std::fs::read_to_string("/proc/kallsyms") else {
        return Vec::new();
    };
    let mut v: Vec<FunctionSymbol> = text
        .lines()
        .filter_map(|line| {
            let mut it = line.split_whitespace();
            let (a, t, name) = (it.next()?, it.next()?, it.next()?);
            if !matches!(t, "t" | "T" | "w" | "W") {
                return None;
            }
            let addr = u64::from_str_radix(a, 16).ok().filter(|&a| a != 0)?;
            Some((addr, 0, Arc::from(name), t == "T"))
        })
        .collect();
    v.sort_by_key(|x| x.0);
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn of_aliases_the_name_perf_chooses() {
        let best = |names: &[(&str, u64, bool)]| -> String {
            let syms: Vec<FunctionSymbol> = names
                .iter()
                .map(|&(n, size, global)| (0x1000, size, Arc::from(n), global))
                .collect();
            syms.iter()
                .min_by_key(|s| alias_rank(s))
                .unwrap()
                .2
                .to_string()
        };
        // The longest of equals, as perf's choose_best_symbol.
        assert_eq!(
            best(&[
                ("__memcpy_avx512_unaligned_erms", 64, false),
                ("__memmove_avx512_unaligned_erms", 64, false),
            ]),
            "__memmove_avx512_unaligned_erms"
        );
        // Fewer leading underscores first, then global, then a size.
        assert_eq!(
            best(&[("__libc_malloc", 64, true), ("malloc", 64, true)]),
            "malloc"
        );
        assert_eq!(best(&[("fn_local", 64, false), ("fn", 64, true)]), "fn");
        assert_eq!(best(&[("long_name", 0, true), ("f", 8, true)]), "f");
        assert_eq!(
            best(&[
                ("__libc_start_main@@GLIBC_2.34", 64, true),
                ("__libc_start_main", 64, true),
            ]),
            "__libc_start_main"
        );
    }

    #[test]
    fn libc_is_named_from_its_separate_debug_file() {
        // libc6-dbg (installed by scripts/setup.sh) holds libc's full symbol table and DWARF under
        // /usr/lib/debug/.build-id; libc itself has only .dynsym, which lacks _int_malloc.
        let libc = "/lib/x86_64-linux-gnu/libc.so.6";
        let data = std::fs::read(libc).expect("glibc");
        let obj = object::File::parse(&*data).unwrap();
        let id = obj.build_id().unwrap().unwrap().to_vec();
        let debug_syms = {
            let s = Symbolizer::for_modules([(1, libc.to_string(), id.clone())]);
            let p = s.separate_debug_file(Path::new(libc), &obj, Some(&id));
            assert!(
                p.is_some(),
                "no debug file for {libc}: is libc6-dbg installed (scripts/setup.sh)?"
            );
            let d = std::fs::read(p.unwrap()).unwrap();
            function_symbols(&object::File::parse(&*d).unwrap())
        };
        let addr = debug_syms
            .iter()
            .find(|s| &*s.2 == "_int_malloc")
            .expect("_int_malloc in libc's debug symbols")
            .0;
        let mut s = Symbolizer::for_modules([(1, libc.to_string(), id)]);
        let frames = s.frames(1, addr + 4);
        assert_eq!(
            &*frames.last().unwrap().function,
            "_int_malloc",
            "{frames:?}"
        );
    }

    /// The address objdump gives `<NAME>:` in `path`'s disassembly.
    fn objdump_address(path: &Path, name: &str) -> u64 {
        let out = std::process::Command::new("objdump")
            .arg("-d")
            .arg(path)
            .output()
            .expect("objdump (binutils)");
        let text = String::from_utf8_lossy(&out.stdout);
        let line = text
            .lines()
            .find(|l| l.ends_with(&format!(" <{name}>:")))
            .unwrap_or_else(|| panic!("no {name} in objdump -d {}", path.display()));
        u64::from_str_radix(line.split_whitespace().next().unwrap(), 16).unwrap()
    }

    #[test]
    fn plt_stubs_are_named_like_perf_and_objdump_name_them() {
        // A program that calls memcmp through its PLT (lazy-binding .plt, as gcc links by default):
        // the stub's samples were charged to `_init`, the symbol before .plt, whose size is 0.
        let dir = std::env::temp_dir().join(format!("ft-plt-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let src = dir.join("plt.c");
        std::fs::write(
            &src,
            "#include <string.h>\nint main(int c, char **v) { return memcmp(v[0], v[c - 1], 4) == 7; }\n",
        )
        .unwrap();
        let exe = dir.join("plt");
        for (flags, name) in [
            (&["-O2"][..], "lazy"),
            (&["-O2", "-fcf-protection=full", "-Wl,-z,ibtplt"][..], "ibt"),
        ] {
            let exe = exe.with_extension(name);
            let st = std::process::Command::new("gcc")
                .args(flags)
                .args(["-fno-builtin", "-o"])
                .arg(&exe)
                .arg(&src)
                .status()
                .expect("gcc");
            assert!(st.success());
            let data = std::fs::read(&exe).unwrap();
            let obj = object::File::parse(&*data).unwrap();
            assert_eq!(
                obj.section_by_name(".plt.sec").is_some(),
                name == "ibt",
                "{name}: the stubs are in .plt.sec with IBT"
            );
            let stub = objdump_address(&exe, "memcmp@plt");
            let mut s = Symbolizer::for_modules([(2, exe.display().to_string(), Vec::new())]);
            let f = s.frames(2, stub + 4);
            assert_eq!(&*f[0].function, "memcmp@plt", "{name}: {f:?}");
        }
        // A library's: libc's malloc@plt is in .plt.got (8-byte entries, a GLOB_DAT slot), realloc@plt
        // in .plt (JUMP_SLOT).
        let libc = Path::new("/lib/x86_64-linux-gnu/libc.so.6");
        let mut s = Symbolizer::for_modules([(3, libc.display().to_string(), Vec::new())]);
        for name in ["malloc@plt", "realloc@plt"] {
            let stub = objdump_address(libc, name);
            assert_eq!(&*s.frames(3, stub + 2)[0].function, name);
        }
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn a_module_with_another_build_id_is_not_trusted() {
        let libc = "/lib/x86_64-linux-gnu/libc.so.6";
        let mut s = Symbolizer::for_modules([(4, libc.to_string(), vec![1, 2, 3, 4])]);
        let f = s.frames(4, 0x1000);
        assert_eq!(&*f[0].function, "[libc.so.6]");
        assert!(f[0].unknown);
        assert_eq!(s.unreadable.len(), 1);
    }
}
