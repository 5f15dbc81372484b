//! What a program contains, read from its ELF file without running it: tracepoints, XRay-instrumented
//! functions, and which uninstrumented functions can have their entries patched (what `ferrotrace list`
//! shows).
//!
//! Tracepoint descriptors are in the `ferrotrace_tp` section (a 16-byte header `u32 magic "FTP1", u32 size,
//! u32 id, u32 enabled`, then `u16 len + crate::name`, `u16 len + args`, `u16 len + format`, `u16 len +
//! file`, `u32 line`, padded to 8 bytes) and their sites in `ferrotrace_sites` (24-byte entries of three
//! PC-relative `i64`: site, out-of-line target, descriptor). XRay functions come from `xray_instr_map`
//! (32-byte entries, version 2 PC-relative) and the symbol table.
//!
//! ```no_run
//! let bin = ferrotrace_reader::binary::inspect(std::path::Path::new("target/release/app"))?;
//! for t in &bin.tracepoints {
//!     println!("{} {}:{} ({} sites)", t.name, t.file, t.line, t.sites.len());
//! }
//! # Ok::<(), ferrotrace_reader::binary::BinaryError>(())
//! ```

use std::path::Path;

use ferrotrace_core::entry_patch::{analyse, tally, FunctionRange, Refusal, Window};
use ferrotrace_core::symbols::{links_span_recorder, OwnFunctions, PLUMBING_SECTION};
use ferrotrace_core::tracepoint::{descriptor_fields, DESCRIPTOR_HEADER_LEN, DESCRIPTOR_MAGIC};
use ferrotrace_core::xray::{decode_entry, symbol_at, ENTRY_LEN};
use object::{Object, ObjectSection, ObjectSymbol, SymbolKind};

use crate::tracepoints::ArgDesc;

/// A tracepoint declared in the binary.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BinaryTracepoint {
    /// `crate::name`.
    pub name: String,
    /// Its arguments.
    pub args: Vec<ArgDesc>,
    /// Display format, empty if none.
    pub format: String,
    /// Source file of the declaration.
    pub file: String,
    /// Line of the declaration.
    pub line: u32,
    /// Link-time addresses of its sites.
    pub sites: Vec<u64>,
}

/// An XRay-instrumented function.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BinaryFunction {
    /// XRay function id: 1-based, in the object's map order, as `llvm-xray extract` numbers them. Not
    /// the id a trace gives the function: a trace numbers only the functions it selected, across
    /// every object it loaded (the `id` of `report --json`).
    pub xray_id: u32,
    /// Link-time address.
    pub address: u64,
    /// Demangled name without hash.
    pub name: String,
    /// Symbol name.
    pub mangled: String,
    /// Number of sleds.
    pub sleds: usize,
}

/// The contents `ferrotrace list` reports.
#[derive(Clone, Debug, Default)]
pub struct BinaryInfo {
    /// Tracepoints, in section order.
    pub tracepoints: Vec<BinaryTracepoint>,
    /// XRay-instrumented functions, in map order (the tracer's own functions left out).
    pub functions: Vec<BinaryFunction>,
}

/// Parses descriptor data after the header: `(name, args, format, file, line)`.
fn parse_descriptor(d: &[u8]) -> Option<(String, String, String, String, u32)> {
    let ([name, args, format, file], line) = descriptor_fields(d)?;
    let s = |b| String::from_utf8_lossy(b).into_owned();
    Some((s(name), s(args), s(format), s(file), line))
}

fn read_i64(b: &[u8], at: usize) -> Option<i64> {
    Some(i64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

/// Maps the file at `path` read-only: a program's file is read where it lies instead of copied (a
/// 60 MB binary with debug info took `record` 40 ms of copying and page clearing to start), and only
/// the pages of the headers and sections actually looked at are touched.
///
/// Only regular files are opened: a path read from a trace is input, and a FIFO or a device there
/// (`/dev/zero`) must not make an analysis block or read forever.
pub fn map(path: &Path) -> Result<memmap2::Mmap, BinaryError> {
    let io = |source| BinaryError::Io {
        path: path.to_path_buf(),
        source,
    };
    if !std::fs::metadata(path).map_err(io)?.is_file() {
        return Err(BinaryError::NotAFile(path.to_path_buf()));
    }
    let file = std::fs::File::open(path).map_err(io)?;
    // SAFETY: a private read-only mapping; the bytes are only parsed (bounds-checked by `object`).
    // Like every tool that maps binaries (addr2line's loader, perf), it assumes no one truncates the
    // file while it is read: that would be a SIGBUS, not a wrong answer.
    unsafe { memmap2::Mmap::map(&file) }.map_err(io)
}

/// Why a program's file could not be read.
#[derive(Debug)]
pub enum BinaryError {
    /// It could not be opened or mapped.
    Io {
        /// The file.
        path: std::path::PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
    /// It is a directory, a device or a FIFO.
    NotAFile(std::path::PathBuf),
    /// It is not an ELF file `object` can parse.
    NotElf {
        /// The file.
        path: std::path::PathBuf,
        /// What the parser said.
        reason: object::Error,
    },
    /// It has no DWARF debug information (needed to answer the question asked).
    NoDebugInfo(std::path::PathBuf),
    /// One of its sections could not be read.
    BadSection {
        /// The section.
        section: &'static str,
        /// What the parser said.
        reason: object::Error,
    },
}

impl std::fmt::Display for BinaryError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BinaryError::Io { path, source } => {
                write!(f, "cannot read {}: {source}", path.display())
            }
            BinaryError::NotAFile(p) => write!(f, "{} is not a regular file", p.display()),
            BinaryError::NotElf { path, reason } => {
                write!(f, "{} is not an ELF file ({reason})", path.display())
            }
            BinaryError::NoDebugInfo(p) => write!(f, "{} has no debug info", p.display()),
            BinaryError::BadSection { section, reason } => write!(f, "{section}: {reason}"),
        }
    }
}

impl std::error::Error for BinaryError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            BinaryError::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// Reads the tracepoints and instrumented functions of the ELF file at `path`.
pub fn inspect(path: &Path) -> Result<BinaryInfo, BinaryError> {
    let data = map(path)?;
    let file = object::File::parse(&*data).map_err(|reason| BinaryError::NotElf {
        path: path.to_path_buf(),
        reason,
    })?;
    let section = |section: &'static str| move |reason| BinaryError::BadSection { section, reason };
    let mut out = BinaryInfo::default();

    // Tracepoints: descriptors, then sites by descriptor address.
    let mut by_addr: Vec<(u64, usize)> = Vec::new();
    if let Some(sec) = file.section_by_name("ferrotrace_tp") {
        let bytes = sec.data().map_err(section("ferrotrace_tp"))?;
        let mut p = 0usize;
        while p + DESCRIPTOR_HEADER_LEN <= bytes.len() {
            let word = |i: usize| u32::from_le_bytes(bytes[p + i..p + i + 4].try_into().unwrap());
            let (magic, size) = (word(0), word(4) as usize);
            if magic != DESCRIPTOR_MAGIC || size < DESCRIPTOR_HEADER_LEN || p + size > bytes.len() {
                p += 8;
                continue;
            }
            if let Some((name, args, format, file_name, line)) =
                parse_descriptor(&bytes[p + DESCRIPTOR_HEADER_LEN..p + size])
            {
                by_addr.push((sec.address() + p as u64, out.tracepoints.len()));
                out.tracepoints.push(BinaryTracepoint {
                    name,
                    args: ferrotrace_core::tracepoint::arg_specs(&args)
                        .map(|(n, t)| ArgDesc {
                            name: n.into(),
                            ty: t.into(),
                        })
                        .collect(),
                    format,
                    file: file_name,
                    line,
                    sites: Vec::new(),
                });
            }
            p += (size + 7) & !7;
        }
    }
    if let Some(sec) = file.section_by_name("ferrotrace_sites") {
        let bytes = sec.data().map_err(section("ferrotrace_sites"))?;
        let base = sec.address();
        let mut p = 0usize;
        while p + 24 <= bytes.len() {
            let (a, d) = (read_i64(bytes, p), read_i64(bytes, p + 16));
            if let (Some(a), Some(d)) = (a, d) {
                if a != 0 && d != 0 {
                    let site = (base + p as u64).wrapping_add(a as u64);
                    let desc = (base + p as u64 + 16).wrapping_add(d as u64);
                    if let Some(&(_, i)) = by_addr.iter().find(|(addr, _)| *addr == desc) {
                        out.tracepoints[i].sites.push(site);
                    }
                }
            }
            p += 24;
        }
    }
    for t in &mut out.tracepoints {
        t.sites.sort_unstable();
    }

    // XRay functions.
    if let Some(sec) = file.section_by_name("xray_instr_map") {
        let bytes = sec.data().map_err(section("xray_instr_map"))?;
        let base = sec.address();
        let symbols = text_symbols(&file);
        let own = OwnFunctions {
            plumbing: file
                .section_by_name(PLUMBING_SECTION)
                .map(|s| s.address()..s.address() + s.size()),
            records_spans: links_span_recorder(symbols.iter().map(|s| s.2)),
        };
        let mut funcs: Vec<(u64, usize)> = Vec::new();
        for (i, entry) in bytes.chunks_exact(ENTRY_LEN).enumerate() {
            let entry: &[u8; ENTRY_LEN] = entry
                .try_into()
                .expect("chunks_exact gives ENTRY_LEN bytes");
            let e = decode_entry(entry, base + (i * ENTRY_LEN) as u64);
            if e.kind.is_none() {
                continue;
            }
            match funcs.last_mut() {
                Some((f, n)) if *f == e.function => *n += 1,
                _ => funcs.push((e.function, 1)),
            }
        }
        for (index, (func, sleds)) in funcs.into_iter().enumerate() {
            let sym = symbol_at(&symbols, func);
            let mangled = sym.map_or_else(|| format!("fn_{func:x}"), |s| s.2.to_string());
            if own.contains(&mangled, func) {
                continue;
            }
            out.functions.push(BinaryFunction {
                xray_id: index as u32 + 1,
                address: func,
                name: crate::reader::demangle(&mangled),
                mangled,
                sleds,
            });
        }
    }
    Ok(out)
}

/// What `ferrotrace list` shows of a program: its tracepoints and traceable functions.
#[derive(Clone, Copy, Debug)]
pub struct Listing {
    /// One JSON object instead of text.
    pub json: bool,
    /// The tracepoints.
    pub tracepoints: bool,
    /// The functions.
    pub functions: bool,
}

fn rust_type(t: &str) -> &str {
    match t {
        "str" => "&str",
        "bytes" => "&[u8]",
        other => other,
    }
}

/// The listing of `bin` as `ferrotrace list` prints it (text, or one JSON object and a newline).
/// Functions carry `xray_id`, their XRay id in the file (llvm-xray's numbering), which is not the `id`
/// a trace gives the functions it selected.
pub fn listing(bin: &BinaryInfo, what: Listing) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    if what.json {
        let mut o = serde_json::Map::new();
        if what.tracepoints {
            let tps: Vec<serde_json::Value> = bin
                .tracepoints
                .iter()
                .map(|t| {
                    serde_json::json!({
                        "name": t.name,
                        "args": t.args.iter().map(|a| serde_json::json!({"name": a.name, "type": a.ty})).collect::<Vec<_>>(),
                        "format": t.format,
                        "file": t.file,
                        "line": t.line,
                        "sites": t.sites.iter().map(|s| format!("{s:#x}")).collect::<Vec<_>>(),
                    })
                })
                .collect();
            o.insert("tracepoints".into(), tps.into());
        }
        if what.functions {
            let fns: Vec<serde_json::Value> = bin
                .functions
                .iter()
                .map(|f| {
                    serde_json::json!({
                        "xray_id": f.xray_id,
                        "name": f.name,
                        "mangled": f.mangled,
                        "address": format!("{:#x}", f.address),
                        "sleds": f.sleds,
                    })
                })
                .collect();
            o.insert("functions".into(), fns.into());
        }
        let _ = writeln!(out, "{}", serde_json::Value::Object(o));
        return out;
    }
    if what.tracepoints {
        let _ = writeln!(out, "Tracepoints ({}):", bin.tracepoints.len());
        for t in &bin.tracepoints {
            let args: Vec<String> = t
                .args
                .iter()
                .map(|a| format!("{}: {}", a.name, rust_type(&a.ty)))
                .collect();
            let _ = write!(
                out,
                "  {}({})  {}:{}  {} site{}",
                t.name,
                args.join(", "),
                t.file,
                t.line,
                t.sites.len(),
                if t.sites.len() == 1 { "" } else { "s" }
            );
            if !t.format.is_empty() {
                let _ = write!(out, "  format {:?}", t.format);
            }
            out.push('\n');
        }
    }
    if what.functions {
        if what.tracepoints {
            out.push('\n');
        }
        let _ = writeln!(
            out,
            "XRay-instrumented functions ({}):",
            bin.functions.len()
        );
        for f in &bin.functions {
            let _ = writeln!(out, "  {}", f.name);
        }
    }
    out
}

/// A function of a program's file, and whether `record` can trace it without instrumentation, by
/// patching its entry at run time (`ferrotrace list --dynamic`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EntryPatchable {
    /// Link-time address.
    pub address: u64,
    /// Demangled name without hash.
    pub name: String,
    /// Where the jump would go, or why the function is refused.
    pub verdict: Result<Window, Refusal>,
}

/// Every function the symbol tables (`.symtab`, `.dynsym`) of the file at `path` name, with the
/// verdict of the entry-patching analysis ([`ferrotrace_core::entry_patch`], the one the runtime
/// applies), in address order.
pub fn entry_patchable(path: &Path) -> Result<Vec<EntryPatchable>, BinaryError> {
    let data = map(path)?;
    let file = object::File::parse(&*data).map_err(|reason| BinaryError::NotElf {
        path: path.to_path_buf(),
        reason,
    })?;
    let mut code: Vec<(u64, &[u8])> = Vec::new();
    for section in file.sections() {
        let executable = matches!(section.flags(), object::SectionFlags::Elf { sh_flags }
            if sh_flags & u64::from(object::elf::SHF_EXECINSTR) != 0);
        if executable {
            if let Ok(bytes) = section.data() {
                code.push((section.address(), bytes));
            }
        }
    }
    let symbols = text_symbols(&file);
    let ranges: Vec<FunctionRange> = symbols
        .iter()
        .map(|&(start, size, _)| FunctionRange { start, size })
        .collect();
    let verdicts = analyse(&ranges, file.entry(), |start, size| {
        let &(at, bytes) = code
            .iter()
            .find(|(at, b)| (*at..*at + b.len() as u64).contains(&start))?;
        let from = (start - at) as usize;
        bytes.get(from..from.checked_add(size as usize)?)
    });
    Ok(symbols
        .iter()
        .zip(verdicts)
        .map(|(&(address, _, mangled), verdict)| EntryPatchable {
            address,
            name: crate::reader::demangle(mangled),
            verdict,
        })
        .collect())
}

/// The function symbols of `file`: `(address, size, name)` from `.symtab` and `.dynsym`, by address,
/// one per address (the largest).
fn text_symbols<'a>(file: &object::File<'a>) -> Vec<(u64, u64, &'a str)> {
    let mut symbols: Vec<(u64, u64, &str)> = file
        .symbols()
        .chain(file.dynamic_symbols())
        .filter(|s| s.kind() == SymbolKind::Text && s.address() != 0 && s.is_definition())
        .filter_map(|s| Some((s.address(), s.size(), s.name().ok()?)))
        .collect();
    symbols.sort_unstable_by_key(|s| (s.0, std::cmp::Reverse(s.1)));
    symbols.dedup_by_key(|s| s.0);
    symbols
}

/// `ferrotrace list --dynamic`'s output: a summary (functions that can be traced, refused by reason),
/// then each function with its verdict; or one JSON object.
pub fn entry_patch_listing(funcs: &[EntryPatchable], json: bool) -> String {
    use std::fmt::Write;
    let (ok, refused) = tally(funcs.iter().map(|f| &f.verdict));
    if json {
        let functions: Vec<serde_json::Value> = funcs
            .iter()
            .map(|f| {
                serde_json::json!({
                    "address": format!("{:#x}", f.address),
                    "name": f.name,
                    "traceable": f.verdict.is_ok(),
                    "refused": f.verdict.err().map(Refusal::key),
                })
            })
            .collect();
        let by_reason: serde_json::Map<String, serde_json::Value> = refused
            .iter()
            .map(|(r, n)| (r.key().to_string(), (*n).into()))
            .collect();
        let o = serde_json::json!({
            "functions": functions,
            "traceable": ok,
            "refused": by_reason,
        });
        return format!("{o}\n");
    }
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{} functions: {ok} can be traced by patching their entries, {} refused",
        funcs.len(),
        funcs.len() - ok
    );
    for (reason, n) in &refused {
        let _ = writeln!(out, "  {n:>6} refused: {reason} ({})", reason.key());
    }
    for f in funcs {
        let verdict = match f.verdict {
            Ok(_) => "traceable",
            Err(r) => r.key(),
        };
        let _ = writeln!(out, "{:#010x} {verdict:<18} {}", f.address, f.name);
    }
    out
}
