//! Finding the instrumented functions of every loaded object, of every kind, and selecting those to
//! trace.
//!
//! Discovery walks the loaded objects with `dl_iterate_phdr`, maps each one's file, and reads its
//! `xray_instr_map` section (32-byte unaligned entries; version 2 addresses are PC-relative) from memory,
//! or, without one, its mcount/`__fentry__` calls and patchable NOPs ([`crate::recorders::mcount::sites::find_sites`]).
//! Function names come from the file's symbol table. Patching what it found is [`crate::patch::sites`].

use std::ffi::CStr;
use std::path::{Path, PathBuf};

use ferrotrace_core::argspec::ArgSpecs;
use ferrotrace_core::entry_patch::{self, FunctionRange, Refusal, Window};
use ferrotrace_core::format::ChunkKind;
use ferrotrace_core::mcount::Flavor;
use ferrotrace_core::pattern::NamePattern;
use ferrotrace_core::schema::{self, source as instrumentation, Payload};
use ferrotrace_core::symbols::{
    links_span_recorder, names_span_recorder, OwnFunctions, PLUMBING_SECTION,
};
use ferrotrace_core::xray::{decode_entry, symbol_at, ENTRY_LEN};
use object::{Object, ObjectSection, ObjectSymbol, SymbolKind};

use crate::lifecycle::config::{display_name, Config};
use crate::recorders::mcount::sites as mcount_sites;

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
    /// Its `-F`/`-N` matches (`buffers::filter::{INCLUDE, EXCLUDE}`), in subtree mode.
    pub filter: u8,
    /// Its sleds: runtime address and kind.
    pub sleds: Vec<(u64, SledKind)>,
    /// Its patchable NOPs (`-mnop-mcount`, `-fpatchable-function-entry`): runtime address and the hook
    /// the patched call goes to.
    pub nops: Vec<(u64, Flavor)>,
    /// In uninstrumented code: where the jump to its trampoline goes and what it replaces
    /// ([`ferrotrace_core::entry_patch`]).
    pub entry: Option<Window>,
    /// The arguments and return value `-A`/`-R` record of it (`recorders::args`).
    pub values: ArgSpecs,
}

impl Function {
    /// The record word of its mcount/fentry call sites and entry trampolines: its id, with the flags
    /// that send the hooks to `recorders::args` when it has values to record.
    pub fn record_word(&self) -> u64 {
        crate::recorders::args::flagged(mcount_sites::record_word(self.id), &self.values)
    }
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
    /// For each `-P` regex (`Config::patch`), whether it matched any instrumented function.
    pub patch_hits: Vec<bool>,
    /// mcount/`__fentry__` call sites: `(the hook's return address, record word)`, word 0 for functions
    /// not traced (filtered out, the runtime's own, or without a frame pointer).
    pub calls: Vec<(u64, u64)>,
    /// The GOT slots through which objects with mcount/`__fentry__` calls call the hooks, and which
    /// hook each names: bound to the C library's before an attach, pointed at the runtime's hooks
    /// while attached ([`crate::patch::sites::redirect_hook_slots`]).
    pub hook_slots: Vec<(u64, Flavor)>,
    /// Functions calling mcount that cannot be traced because they set up no frame pointer.
    pub no_frame_pointer: usize,
    /// Selected functions of uninstrumented code whose entries cannot be patched, by reason.
    pub refused: Vec<(Refusal, usize)>,
    /// How the objects found are instrumented: bits of `ferrotrace_core::schema::source` (with
    /// `TRACING` when one links `ferrotrace-tracing`).
    pub instrumentation: u64,
    /// The executable links Rust's std (it has std's panic entry point): the fault handler then ends a
    /// stack overflow the way std would (see `exit`).
    pub rust_std: bool,
}

impl Discovery {
    /// The executable's file name, for messages.
    pub fn exe_name(&self) -> String {
        self.modules
            .first()
            .map(|m| m.path.display().to_string())
            .unwrap_or_else(|| "the program".into())
    }

    /// One line for each `-P`, then each `-F`, pattern of `config` that selects none of the
    /// instrumented functions found (the `-F` lines only when every `-P` selected some: `-F` is
    /// matched against what `-P` let through).
    pub fn unmatched_patterns(&self, config: &Config) -> Vec<String> {
        let say = |option: &str, re: &NamePattern| {
            format!(
                "{option} '{}' selects none of the {} instrumented functions in {} and the libraries \
                 loaded with it",
                re.as_str(),
                self.total_functions,
                self.exe_name()
            )
        };
        fn missed<'p>(patterns: &'p [NamePattern], hits: &[bool]) -> Vec<&'p NamePattern> {
            patterns
                .iter()
                .zip(hits)
                .filter(|(_, hit)| !**hit)
                .map(|(re, _)| re)
                .collect()
        }
        let patch = missed(&config.patch, &self.patch_hits);
        if !patch.is_empty() {
            return patch.into_iter().map(|re| say("-P", re)).collect();
        }
        missed(&config.include, &self.filter_hits)
            .into_iter()
            .map(|re| say("-F", re))
            .collect()
    }

    /// Why no function can be recorded, when none can: a pattern selected nothing
    /// ([`Discovery::unmatched_patterns`]), or the patterns together did (`-N` excluded what `-F` and
    /// `-P` selected). `None` when a function can be.
    pub fn none_selected(&self, config: &Config) -> Option<String> {
        let any_filter_hit = config.include.is_empty() || self.filter_hits.iter().any(|&h| h);
        if !self.functions.is_empty() && any_filter_hit {
            return None;
        }
        if let Some(first) = self.unmatched_patterns(config).into_iter().next() {
            return Some(first);
        }
        let options = if config.patch.is_empty() {
            "-F/-N"
        } else {
            "-P/-F/-N"
        };
        Some(format!(
            "{options} together select none of the {} instrumented functions of {}",
            self.total_functions,
            self.exe_name()
        ))
    }

    /// The program records `tracing` spans through ferrotrace-tracing: it has something to record
    /// without instrumented functions.
    pub fn records_spans(&self) -> bool {
        self.instrumentation & instrumentation::TRACING != 0
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

    /// The chunks that describe the program at the head of its trace: a Module chunk per object, the
    /// Functions chunk, then the Tracepoints chunk (`tracepoints`, its payload).
    pub fn head(&self, tracepoints: Vec<u8>) -> Vec<(ChunkKind, Vec<u8>)> {
        let mut head: Vec<(ChunkKind, Vec<u8>)> = self
            .module_payloads()
            .into_iter()
            .map(|p| (ChunkKind::Module, p))
            .collect();
        head.push((ChunkKind::Functions, self.functions_payload()));
        if let Some(p) = self.arg_specs_payload() {
            head.push((ChunkKind::ArgSpecs, p));
        }
        head.push((ChunkKind::Tracepoints, tracepoints));
        head
    }

    /// The `ArgSpecs` chunk payload: what the events of functions with recorded values carry; `None`
    /// when no function has any.
    pub fn arg_specs_payload(&self) -> Option<Vec<u8>> {
        let with: Vec<&Function> = self
            .functions
            .iter()
            .filter(|f| !f.values.is_empty())
            .collect();
        if with.is_empty() {
            return None;
        }
        let mut p = Vec::new();
        let _ = schema::Count(with.len() as u64).encode(&mut p);
        for f in with {
            let (args, retval) = (f.values.args.to_string(), f.values.retval.to_string());
            let _ = schema::FunctionArgs {
                function_id: f.id,
                args: &args,
                retval: &retval,
            }
            .encode(&mut p);
        }
        Some(p)
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

/// Discovery inside one object: ids, selection and the symbol table.
struct Scope<'a, 'b> {
    config: &'a Config,
    module: u32,
    bias: u64,
    symbols: &'a [(u64, u64, &'b str)],
    /// What is the tracer's own in this object (never traced).
    own: OwnFunctions,
    next_id: &'a mut u32,
    out: &'a mut Discovery,
}

impl Scope<'_, '_> {
    /// Counts the instrumented function at runtime address `func` and, if it is selected, adds it with a
    /// fresh id and returns it.
    fn function(&mut self, func: u64) -> Option<&mut Function> {
        self.out.total_functions += 1;
        let vaddr = func.wrapping_sub(self.bias);
        let (name, size) = match symbol_at(self.symbols, vaddr) {
            Some((_, size, name)) => (name.to_string(), size),
            None => (format!("fn_{vaddr:x}"), 0),
        };
        if !self.config.functions || self.own.contains(&name, vaddr) {
            return None;
        }
        // Filters match demangled names: demangled once, and only when there is a filter (without one
        // every function is traced, and names are demangled by the analysis, not at the program's start).
        let mut filter = 0;
        if !self.config.patch.is_empty() {
            let shown = display_name(&name);
            let mut patched = false;
            for (hit, re) in self.out.patch_hits.iter_mut().zip(&self.config.patch) {
                let matches = re.matches_function(&shown, vaddr);
                *hit |= matches;
                patched |= matches;
            }
            if !patched {
                return None; // -P: left as it is, costing nothing
            }
        }
        if self.config.has_filters() {
            let shown = display_name(&name);
            // Which -F patterns match anything at all (a run that selects nothing says so).
            for (hit, re) in self.out.filter_hits.iter_mut().zip(&self.config.include) {
                *hit = *hit || re.matches_function(&shown, vaddr);
            }
            if self.config.subtrees {
                filter = self.config.filter_flags(&shown, vaddr);
            } else if !self.config.selects(&shown, vaddr) {
                return None;
            }
        }
        let values = match self.config.records_values() {
            false => ArgSpecs::default(),
            true => self.config.arg_specs(&display_name(&name), vaddr),
        };
        self.out.functions.push(Function {
            id: *self.next_id,
            module: self.module,
            addr: func,
            size,
            name,
            filter,
            sleds: Vec::new(),
            nops: Vec::new(),
            entry: None,
            values,
        });
        *self.next_id += 1;
        self.out.functions.last_mut()
    }

    /// Finds the object's mcount/`__fentry__` calls and patchable NOPs: calls of selected functions get
    /// their function's record word, other calls word 0; NOPs of selected functions are listed to patch.
    fn add_mcount_sites(&mut self, sites: &[mcount_sites::Site], text: (u64, u64)) {
        let mut i = 0;
        while i < sites.len() {
            let vaddr = sites[i].addr.wrapping_sub(self.bias);
            let func = symbol_at(self.symbols, vaddr).filter(|s| s.1 > 0);
            // The sites of one function are adjacent (sorted by address).
            let end = match func {
                Some((start, size, _)) => {
                    let fn_end = self.bias.wrapping_add(start + size);
                    i + sites[i..].iter().take_while(|s| s.addr < fn_end).count()
                }
                None => i + 1,
            };
            let group = &sites[i..end];
            i = end;
            let Some((start, _, _)) = func else {
                // No symbol: no function start to check the prologue against, nor a name.
                self.out.no_frame_pointer += 1;
                self.out
                    .calls
                    .extend(group.iter().filter(|s| !s.nop).map(|s| (s.key, 0)));
                continue;
            };
            let start = self.bias.wrapping_add(start);
            let flavors: Vec<Option<Flavor>> = group
                .iter()
                .map(|s| mcount_sites::hookable(s, start, text))
                .collect();
            for (s, f) in group.iter().zip(&flavors) {
                self.out.instrumentation |= match (s.nop, f) {
                    (true, _) => instrumentation::PATCHABLE_NOP,
                    (false, Some(Flavor::Fentry)) => instrumentation::FENTRY,
                    (false, _) => instrumentation::MCOUNT,
                };
            }
            if flavors.iter().all(Option::is_none) {
                self.out.total_functions += 1;
                self.out.no_frame_pointer += 1;
                self.out
                    .calls
                    .extend(group.iter().filter(|s| !s.nop).map(|s| (s.key, 0)));
                continue;
            }
            let word = match self.function(start) {
                Some(f) => {
                    for (s, flavor) in group.iter().zip(&flavors) {
                        if let (true, Some(flavor)) = (s.nop, flavor) {
                            f.nops.push((s.addr, *flavor));
                        }
                    }
                    f.record_word()
                }
                None => 0,
            };
            for (s, flavor) in group.iter().zip(&flavors) {
                // A NOP becomes a call only when patched, so only a selected one's key is needed; a
                // call of a function whose prologue the hook cannot use stays untraced.
                if !s.nop || word != 0 {
                    self.out
                        .calls
                        .push((s.key, if flavor.is_some() { word } else { 0 }));
                }
            }
        }
    }
}

impl Scope<'_, '_> {
    /// Uninstrumented code: decides which functions' entries can be patched (the whole object's code
    /// is decoded, from memory), and adds those selected with their windows; counts the selected ones
    /// refused, by reason. `text` is the object's executable range, `entry_point` its ELF entry point
    /// (link-time).
    fn add_entry_patches(&mut self, text: (u64, u64), entry_point: u64) {
        let bias = self.bias;
        let ranges: Vec<FunctionRange> = self
            .symbols
            .iter()
            .map(|&(start, size, _)| FunctionRange {
                start: bias.wrapping_add(start),
                size,
            })
            .collect();
        let verdicts =
            entry_patch::analyse(&ranges, bias.wrapping_add(entry_point), |start, size| {
                if start < text.0 || start.checked_add(size)? > text.1 {
                    return None;
                }
                // SAFETY: inside the object's mapped executable segments (from its program headers), which
                // stay mapped while it is loaded; readable (R-X).
                Some(unsafe { core::slice::from_raw_parts(start as *const u8, size as usize) })
            });
        let symbols = self.symbols;
        for (&(vaddr, _, name), verdict) in symbols.iter().zip(verdicts) {
            match verdict {
                Ok(window) => {
                    if let Some(f) = self.function(bias.wrapping_add(vaddr)) {
                        f.entry = Some(window);
                    }
                }
                Err(reason) => {
                    let selected = self.config.patch.is_empty()
                        || self
                            .config
                            .patch
                            .iter()
                            .any(|re| re.matches_function(&display_name(name), vaddr));
                    if selected {
                        match self.out.refused.iter_mut().find(|(r, _)| *r == reason) {
                            Some((_, n)) => *n += 1,
                            None => self.out.refused.push((reason, 1)),
                        }
                    }
                }
            }
        }
        self.out.instrumentation |= instrumentation::DYNAMIC;
    }
}

/// What discovery has already seen: objects by load address and the next ids to hand out. Kept by the
/// runtime so that a rescan after `dlopen` only looks at new objects and ids stay unique.
#[derive(Clone, Debug, Default)]
pub struct Known {
    /// `(path, load bias)` of every object seen.
    pub objects: Vec<(PathBuf, u64)>,
    /// Next function id (ids start at 1).
    pub next_function_id: u32,
    /// Per function id, its `-F`/`-N` matches (`Function::filter`), for the collector's selection.
    pub filter_flags: Vec<u8>,
    /// The executable has no instrumentation: functions are traced by patching their entries
    /// ([`Scope::add_entry_patches`]).
    pub dynamic: bool,
    /// Entry patching is off: other threads run while discovery's answer is patched and nothing stops
    /// them (an in-program recording: a thread may be inside the instructions a jump would replace;
    /// an attached runtime's rescans hand their jumps to the host, which stops them), or the
    /// recording asked for allocations and named no function to patch (`record --alloc` of an
    /// uninstrumented program is heaptrack's view: every function patched was never asked for).
    pub entry_patching_off: bool,
}

/// Finds the instrumented functions of every loaded object not in `known` and selects those to trace;
/// records the new objects in `known`. With `skip_own_object` (the preload library), the object that
/// holds this code is left out whole.
pub fn discover(
    config: &Config,
    skip_own_object: bool,
    known: &mut Known,
) -> Result<Discovery, String> {
    let mut loaded: Vec<Loaded> = Vec::new();
    // SAFETY: the callback only reads the info it is given and pushes into `loaded`.
    unsafe {
        libc::dl_iterate_phdr(
            Some(collect_object),
            &mut loaded as *mut Vec<Loaded> as *mut libc::c_void,
        )
    };
    let own_text = discover as *const () as u64;
    let mut out = Discovery {
        filter_hits: vec![false; config.include.len()],
        patch_hits: vec![false; config.patch.len()],
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
        // The preloaded runtime must not patch itself (the whole library is skipped); neither must the
        // linked one (it has sleds or mcount calls when the program was built with instrumentation): its
        // functions are recognised by `Scope::function` (its crates, and the tracepoint plumbing's
        // section).
        if skip_own_object && (text_start..text_end).contains(&own_text) {
            continue;
        }
        let xray_map = elf.section_by_name("xray_instr_map");
        let mcount_sites::Found { sites, slots } = match xray_map {
            Some(_) => mcount_sites::Found::default(),
            None => mcount_sites::find_sites(&elf, l.bias, (text_start, text_end), module_id == 0),
        };
        let uninstrumented = xray_map.is_none() && sites.is_empty();
        if module_id == 0 {
            // An executable that links the runtime shares its code (std, alloc, the `tracing`
            // plumbing) with the hooks' slow paths: patching its entries would trace the tracer
            // (a tokio service with the layer and no sleds crashed so). It records its spans and
            // tracepoints only.
            let links_runtime = (text_start..text_end).contains(&own_text);
            known.dynamic = uninstrumented && !known.entry_patching_off && !links_runtime;
        }
        // Uninstrumented objects are traced by entry patching when the executable is uninstrumented
        // too: the executable itself, and libraries when -P names what to patch.
        let patch_entries = uninstrumented
            && known.dynamic
            && !known.entry_patching_off
            && (module_id == 0 || !config.patch.is_empty())
            && !l
                .path
                .file_name()
                .and_then(|n| n.to_str())
                .is_some_and(entry_patch::is_runtime_library);
        if uninstrumented && !patch_entries {
            // An executable without sleds still records its `tracing` spans through
            // ferrotrace-tracing, which it links statically.
            if module_id == 0
                && elf
                    .symbols()
                    .any(|s| s.name_bytes().is_ok_and(names_span_recorder))
            {
                out.instrumentation |= instrumentation::TRACING;
            }
            continue;
        }
        if sites.iter().any(|s| !s.nop) {
            out.hook_slots.extend(slots);
        }
        let mut symbols: Vec<(u64, u64, &str)> = elf
            .symbols()
            .chain(elf.dynamic_symbols())
            .filter(|s| s.kind() == SymbolKind::Text && s.address() != 0 && s.is_definition())
            .filter_map(|s| Some((s.address(), s.size(), s.name().ok()?)))
            .collect();
        if module_id == 0 && symbols.iter().any(|s| s.2.contains("rust_begin_unwind")) {
            out.rust_std = true;
        }
        symbols.sort_unstable_by_key(|s| (s.0, std::cmp::Reverse(s.1)));
        symbols.dedup_by_key(|s| s.0);
        let records_spans = links_span_recorder(symbols.iter().map(|s| s.2));
        if records_spans {
            out.instrumentation |= instrumentation::TRACING;
        }
        let mut scope = Scope {
            config,
            module: module_id,
            bias: l.bias,
            symbols: &symbols,
            own: OwnFunctions {
                plumbing: elf
                    .section_by_name(PLUMBING_SECTION)
                    .map(|s| s.address()..s.address() + s.size()),
                records_spans,
            },
            next_id: &mut next_id,
            out: &mut out,
        };
        if let Some(section) = xray_map {
            let map = l.bias.wrapping_add(section.address());
            for (func, sleds) in read_sleds(map, section.size() as usize / ENTRY_LEN) {
                if let Some(f) = scope.function(func) {
                    f.sleds = sleds;
                }
            }
            scope.out.instrumentation |= instrumentation::XRAY;
        } else if patch_entries {
            scope.add_entry_patches((text_start, text_end), elf.entry());
        } else {
            scope.add_mcount_sites(&sites, (text_start, text_end));
        }
    }
    known.next_function_id = next_id;
    if config.filters_events() {
        for f in &out.functions {
            let at = f.id as usize;
            if known.filter_flags.len() <= at {
                known.filter_flags.resize(at + 1, 0);
            }
            known.filter_flags[at] = f.filter;
        }
    }
    Ok(out)
}
