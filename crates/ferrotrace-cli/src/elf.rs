//! What `record` needs to know about a program before running it.

use std::path::Path;

use object::{Object, ObjectSymbol};

/// Facts about an executable.
pub struct ProgramFacts {
    /// It has an `xray_instr_map` section.
    pub has_sleds: bool,
    /// It links the ferrotrace runtime (marker symbol present).
    pub links_runtime: bool,
    /// It is dynamically linked (LD_PRELOAD can work).
    pub dynamic: bool,
    /// It has a `ferrotrace_tp` section (tracepoint descriptors).
    pub has_tracepoints: bool,
    /// It records allocations through `ferrotrace::Allocator` (its recording function is linked in).
    pub has_allocator: bool,
}

/// Reads the facts from the file.
pub fn inspect(path: &Path) -> Result<ProgramFacts, String> {
    let data = ferrotrace_analysis::binary::map(path).map_err(|e| e.to_string())?;
    let file = object::File::parse(&*data)
        .map_err(|e| format!("{} is not an ELF executable ({e})", path.display()))?;
    let has_sleds = file.section_by_name("xray_instr_map").is_some();
    let links_runtime = file
        .symbols()
        .chain(file.dynamic_symbols())
        .any(|s| s.name() == Ok("FERROTRACE_LINKED_RUNTIME_V1"));
    let dynamic =
        file.section_by_name(".interp").is_some() || file.section_by_name(".dynamic").is_some();
    let has_tracepoints = file.section_by_name("ferrotrace_tp").is_some();
    let has_allocator = file.symbols().any(|s| {
        s.name()
            .is_ok_and(|n| n.contains("ferrotrace") && n.contains("alloc_from"))
    });
    Ok(ProgramFacts {
        has_allocator,
        has_tracepoints,
        has_sleds,
        links_runtime,
        dynamic,
    })
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
