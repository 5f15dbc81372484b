//! What `record` needs to know about a program before running it.

use std::path::Path;

use ferrotrace_core::mcount::{for_each_call, hook_flavor, Flavor};
use ferrotrace_core::schema::source as instrumentation;
use object::{Object, ObjectSection, ObjectSymbol};

/// Facts about an executable.
pub struct ProgramFacts {
    /// How its functions are instrumented: bits of `ferrotrace_core::format::instrumentation` (0: not
    /// at all).
    pub instrumentation: u64,
    /// It links the ferrotrace runtime (marker symbol present).
    pub links_runtime: bool,
    /// It is dynamically linked (LD_PRELOAD can work).
    pub dynamic: bool,
    /// It has a `ferrotrace_tp` section (tracepoint descriptors).
    pub has_tracepoints: bool,
    /// It records allocations through `ferrotrace::Allocator` (its recording function is linked in;
    /// looked for only in a program that links the runtime).
    pub has_allocator: bool,
}

/// Reads the facts from the file.
pub fn inspect(path: &Path) -> Result<ProgramFacts, String> {
    let data = ferrotrace_analysis::binary::map(path).map_err(|e| e.to_string())?;
    let file = object::File::parse(&*data)
        .map_err(|e| format!("{} is not an ELF executable ({e})", path.display()))?;
    let mut instr = 0;
    if file.section_by_name("xray_instr_map").is_some() {
        instr |= instrumentation::XRAY;
    }
    let bit = |f: Flavor| match f {
        Flavor::Mcount => instrumentation::MCOUNT,
        Flavor::Fentry => instrumentation::FENTRY,
    };
    // Calls through the PLT or GOT to the C library's hooks (or the preload library's)...
    for s in file.dynamic_symbols().filter(|s| s.is_undefined()) {
        if let Some(f) = s.name().ok().and_then(hook_flavor) {
            instr |= bit(f);
        }
    }
    // One pass over the symbol table (tens of thousands of entries in a big program with debug info;
    // names compared as bytes, since checking them as UTF-8 was the pass's main cost): the program's
    // own mcount/__fentry__ (it links the ferrotrace runtime) and the runtime's marker.
    let mut own: Vec<(u64, Flavor)> = Vec::new();
    let mut links_runtime = false;
    let marker = ferrotrace_core::env::LINKED_RUNTIME_MARKER.as_bytes();
    for s in file.symbols() {
        let Ok(name) = s.name_bytes() else { continue };
        links_runtime |= name == marker;
        if s.is_definition() && matches!(name.first(), Some(b'm' | b'_')) {
            if let Some(f) = std::str::from_utf8(name).ok().and_then(hook_flavor) {
                own.push((s.address(), f));
            }
        }
    }
    links_runtime |= file.dynamic_symbols().any(|s| s.name_bytes() == Ok(marker));
    let has_allocator = links_runtime
        && file.symbols().any(|s| {
            s.name_bytes()
                .is_ok_and(|n| contains(n, b"ferrotrace") && contains(n, b"alloc_from"))
        });
    if let (false, Some(text)) = (own.is_empty(), file.section_by_name(".text")) {
        let targets: Vec<u64> = own.iter().map(|o| o.0).collect();
        if let Ok(code) = text.data() {
            for_each_call(code, text.address(), &targets, &[], |c| {
                instr |= bit(own[c.hook].1)
            });
        }
    }
    for name in ["__mcount_loc", "__patchable_function_entries"] {
        if file.section_by_name(name).is_some_and(|s| s.size() > 0) {
            instr |= instrumentation::PATCHABLE_NOP;
        }
    }
    let dynamic =
        file.section_by_name(".interp").is_some() || file.section_by_name(".dynamic").is_some();
    let has_tracepoints = file.section_by_name("ferrotrace_tp").is_some();
    Ok(ProgramFacts {
        has_allocator,
        has_tracepoints,
        instrumentation: instr,
        links_runtime,
        dynamic,
    })
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// Finds `program` on PATH unless it already names a file.
pub fn resolve_program(program: &std::ffi::OsStr) -> Result<std::path::PathBuf, String> {
    let p = Path::new(program);
    if p.components().count() > 1 || p.is_file() {
        return Ok(p.to_path_buf());
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|d| d.join(p))
        .find(|c| c.is_file())
        .ok_or_else(|| format!("{}: command not found", p.display()))
}
