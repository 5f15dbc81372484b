//! uprobes, uretprobes and USDT probes (through tracefs, as `perf probe` does) and kernel tracepoints.
//!
//! A uprobe is created by writing `p:GROUP/NAME PATH:0xFILEOFFSET` to `uprobe_events`; the kernel then
//! exposes it as a tracepoint whose id is opened with `PERF_TYPE_TRACEPOINT`. (Opening the `uprobe` PMU
//! directly with `inherit=1` makes the target's `clone()` fail, so this route is the one that works for
//! multithreaded programs.) The offset is a *file* offset: for binaries linked by rust-lld the virtual
//! address and the file offset of `.text` differ, so the symbol's address is mapped through the PT_LOAD
//! segment that contains it. [`UprobeSet`] removes its probes when dropped.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use object::{Object, ObjectSegment, ObjectSymbol};

use crate::ProfileError;

/// Where tracefs lives.
pub const TRACEFS: &str = "/sys/kernel/tracing";

/// Makes sure tracefs is mounted at [`TRACEFS`], mounting it if needed.
pub fn ensure_tracefs() -> Result<PathBuf, ProfileError> {
    let root = Path::new(TRACEFS);
    if root.join("events").is_dir() {
        return Ok(root.to_path_buf());
    }
    let debug = Path::new("/sys/kernel/debug/tracing");
    if debug.join("events").is_dir() {
        return Ok(debug.to_path_buf());
    }
    let src = c"nodev";
    let target = c"/sys/kernel/tracing";
    let fstype = c"tracefs";
    // SAFETY: valid NUL-terminated strings; no data argument.
    let r = unsafe {
        libc::mount(
            src.as_ptr(),
            target.as_ptr(),
            fstype.as_ptr(),
            0,
            std::ptr::null(),
        )
    };
    if r != 0 {
        let e = std::io::Error::last_os_error();
        return Err(ProfileError::TracefsUnavailable(format!(
            "not mounted at {TRACEFS}, and mounting failed: {e}"
        )));
    }
    if root.join("events").is_dir() {
        Ok(root.to_path_buf())
    } else {
        Err(ProfileError::TracefsUnavailable(format!(
            "{TRACEFS} has no events/ directory"
        )))
    }
}

/// The perf id of tracepoint `category:name`.
pub fn tracepoint_id(tracefs: &Path, category: &str, name: &str) -> Result<u64, ProfileError> {
    let p = tracefs.join("events").join(category).join(name).join("id");
    match fs::read_to_string(&p) {
        Ok(s) => s
            .trim()
            .parse()
            .map_err(|_| ProfileError::BadArgument(format!("{}: not a number", p.display()))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(ProfileError::UnknownTracepoint(
            format!("{category}:{name}"),
        )),
        Err(e) => Err(ProfileError::io(p, e)),
    }
}

/// A symbol resolved in an ELF file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResolvedSymbol {
    /// The symbol's name as stored (mangled for Rust).
    pub name: String,
    /// Its virtual address as stated in the file.
    pub address: u64,
    /// The file offset the kernel wants for a uprobe: the function's entry, or just past the bytes
    /// there that ferrotrace patches (an XRay sled, an `-mnop-mcount` NOP), which come before any
    /// instruction of the function's own.
    pub file_offset: u64,
}

/// Finds `symbol` in the ELF file at `path`: an exact symbol-table name (`malloc`, `_ZN...`, `_R...`), or a
/// demangled Rust path without hash (`myapp::parse`), or a demangled path's tail after any crate prefix.
pub fn resolve_symbol(path: &Path, symbol: &str) -> Result<ResolvedSymbol, ProfileError> {
    let data = fs::read(path).map_err(|e| ProfileError::io(path, e))?;
    let file = object::File::parse(&*data).map_err(|e| {
        ProfileError::BadArgument(format!(
            "{}: not an ELF file ({e}); uprobes need an executable or shared library",
            path.display()
        ))
    })?;
    let mut exact = None;
    let mut demangled = Vec::new();
    for sym in file.symbols().chain(file.dynamic_symbols()) {
        if sym.address() == 0 || sym.kind() != object::SymbolKind::Text {
            continue;
        }
        let Ok(name) = sym.name() else { continue };
        // glibc exports versioned names such as malloc@@GLIBC_2.2.5 in some tables.
        let base = name.split('@').next().unwrap_or(name);
        if base == symbol {
            exact = Some((name.to_string(), sym.address()));
            break;
        }
        if let Ok(d) = rustc_demangle::try_demangle(name) {
            let d = format!("{d:#}");
            if d == symbol || d.ends_with(&format!("::{symbol}")) {
                demangled.push((name.to_string(), sym.address(), d == symbol));
            }
        }
    }
    let (name, address) = match exact {
        Some(x) => x,
        None => {
            // Prefer a full match; then the first suffix match.
            demangled.sort_by_key(|(_, _, full)| !*full);
            match demangled.into_iter().next() {
                Some((n, a, _)) => (n, a),
                None => {
                    return Err(ProfileError::UnknownSymbol {
                        path: path.to_path_buf(),
                        symbol: symbol.into(),
                    })
                }
            }
        }
    };
    let entry = vaddr_to_file_offset(&file, address).ok_or_else(|| {
        ProfileError::BadArgument(format!(
            "{}: {name} at {address:#x} is in no loadable segment",
            path.display()
        ))
    })?;
    let code = data.get(entry as usize..).unwrap_or_default();
    let file_offset = entry + crate::modules::patched_entry_len(code) as u64;
    Ok(ResolvedSymbol {
        name,
        address,
        file_offset,
    })
}

/// Maps a stated virtual address to its file offset through the PT_LOAD segment holding it.
pub fn vaddr_to_file_offset(file: &object::File<'_>, vaddr: u64) -> Option<u64> {
    for seg in file.segments() {
        let (off, fsize) = seg.file_range();
        if vaddr >= seg.address() && vaddr < seg.address() + fsize {
            return Some(vaddr - seg.address() + off);
        }
    }
    None
}

/// uprobes created in tracefs, removed again on drop.
pub struct UprobeSet {
    tracefs: PathBuf,
    group: String,
    names: Vec<String>,
}

impl UprobeSet {
    /// An empty set whose probes go into group `ferrotrace_<our pid>`.
    pub fn new(tracefs: &Path) -> UprobeSet {
        UprobeSet {
            tracefs: tracefs.to_path_buf(),
            group: format!("ferrotrace_{}", std::process::id()),
            names: Vec::new(),
        }
    }

    /// Creates a probe on the entry of `symbol` in `path` and returns its tracepoint id.
    pub fn add(&mut self, path: &Path, symbol: &str) -> Result<u64, ProfileError> {
        let path = fs::canonicalize(path).map_err(|e| ProfileError::io(path, e))?;
        let sym = resolve_symbol(&path, symbol)?;
        self.create('p', &path, sym.file_offset, None)
    }

    /// Creates a probe on the returns of `symbol` in `path` (a uretprobe: it fires in the caller, at
    /// the return address) and returns its tracepoint id.
    pub fn add_return(&mut self, path: &Path, symbol: &str) -> Result<u64, ProfileError> {
        let path = fs::canonicalize(path).map_err(|e| ProfileError::io(path, e))?;
        let sym = resolve_symbol(&path, symbol)?;
        self.create('r', &path, sym.file_offset, None)
    }

    /// Creates a probe on every site of USDT probe `provider:name` in `path`, with its semaphore
    /// (the kernel raises it while the probe is attached), and returns their tracepoint ids.
    pub fn add_usdt(
        &mut self,
        path: &Path,
        provider: &str,
        name: &str,
    ) -> Result<Vec<u64>, ProfileError> {
        let path = fs::canonicalize(path).map_err(|e| ProfileError::io(path, e))?;
        crate::usdt::find_sites(&path, provider, name)?
            .into_iter()
            .map(|site| self.create('p', &path, site.file_offset, site.semaphore_offset))
            .collect()
    }

    /// Writes `KIND:GROUP/NAME PATH:0xOFFSET[(0xSEMAPHORE)]` to `uprobe_events` (`p` an entry, `r` a
    /// return) and returns the new event's tracepoint id.
    fn create(
        &mut self,
        kind: char,
        path: &Path,
        file_offset: u64,
        semaphore: Option<u64>,
    ) -> Result<u64, ProfileError> {
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let name = format!(
            "{kind}{}",
            NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        );
        let semaphore = semaphore.map(|s| format!("({s:#x})")).unwrap_or_default();
        let line = format!(
            "{kind}:{}/{} {}:{:#x}{semaphore}\n",
            self.group,
            name,
            path.display(),
            file_offset
        );
        let ev = self.tracefs.join("uprobe_events");
        let mut f = fs::OpenOptions::new()
            .append(true)
            .open(&ev)
            .map_err(|e| match e.kind() {
                std::io::ErrorKind::PermissionDenied => ProfileError::PerfParanoid {
                    level: crate::perf::paranoid_level(),
                },
                _ => ProfileError::io(&ev, e),
            })?;
        f.write_all(line.as_bytes()).map_err(|e| {
            ProfileError::BadArgument(format!(
                "the kernel refused uprobe `{}` ({e}); see {}/error_log",
                line.trim(),
                self.tracefs.display()
            ))
        })?;
        self.names.push(name.clone());
        tracepoint_id(&self.tracefs, &self.group, &name)
    }

    /// Removes every probe of this set (also done on drop). Errors are ignored: a probe that is still
    /// open cannot be removed, and the caller closes the events first.
    pub fn remove_all(&mut self) {
        if self.names.is_empty() {
            return;
        }
        let ev = self.tracefs.join("uprobe_events");
        if let Ok(mut f) = fs::OpenOptions::new().append(true).open(ev) {
            for n in self.names.drain(..) {
                let _ = f.write_all(format!("-:{}/{}\n", self.group, n).as_bytes());
            }
        }
        self.names.clear();
    }
}

impl Drop for UprobeSet {
    fn drop(&mut self) {
        self.remove_all();
    }
}
