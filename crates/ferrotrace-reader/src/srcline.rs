//! `--srcline`: each function's `file:line`, from the traced binary's DWARF line tables when the
//! binary is still where the trace says it was (and, when both carry one, has the same build-id).
//! Without it nothing is lost: names always come from the trace's embedded symbol table.

use std::borrow::Cow;
use std::collections::HashMap;

use addr2line::gimli;
use object::{Object, ObjectSection};

use crate::reader::{ReadError, Trace};

/// `file:line` of every function whose module can be read; functions of missing, changed or
/// debug-info-less modules are absent, and [`SrcLines::unavailable`] says which and why.
pub fn lookup(trace: &Trace) -> Result<SrcLines, ReadError> {
    let mut out = SrcLines::default();
    for m in trace.modules() {
        // Only modules with traced functions matter (not libc and the like).
        if !trace.functions().values().any(|f| f.module == m.id) {
            continue;
        }
        let data = match crate::binary::map(std::path::Path::new(&m.path)) {
            Ok(d) => d,
            Err(e) => {
                out.unavailable
                    .push(format!("{e} (the binary moved or was deleted)"));
                continue;
            }
        };
        let Some(ctx) = Dwarf::load(&data, &m.build_id) else {
            out.unavailable.push(format!(
                "{}: no line information (rebuilt since the trace, or built without debug info: \
                 debug = 1 in the cargo profile, or -g)",
                m.path
            ));
            continue;
        };
        let before = out.lines.len();
        for f in trace.functions().values().filter(|f| f.module == m.id) {
            let vaddr = f.addr.wrapping_sub(m.bias);
            if let Ok(Some(loc)) = ctx.ctx.find_location(vaddr) {
                if let (Some(file), Some(line)) = (loc.file, loc.line) {
                    out.lines.insert(f.id, format!("{file}:{line}"));
                }
            }
        }
        if out.lines.len() == before {
            out.unavailable.push(format!(
                "{}: no line information for its traced functions (built without debug info? \
                 debug = 1 in the cargo profile, or -g)",
                m.path
            ));
        }
    }
    Ok(out)
}

/// What `--srcline` found.
#[derive(Clone, Debug, Default)]
pub struct SrcLines {
    /// `file:line` by function id.
    pub lines: HashMap<u32, String>,
    /// Modules with traced functions whose lines could not be read, and why (one line each).
    pub unavailable: Vec<String>,
}

type Reader<'a> = gimli::EndianSlice<'a, gimli::RunTimeEndian>;

struct Dwarf<'a> {
    ctx: addr2line::Context<Reader<'a>>,
}

impl<'a> Dwarf<'a> {
    fn load(data: &'a [u8], build_id: &[u8]) -> Option<Dwarf<'a>> {
        let dwarf = load_dwarf(data, build_id)?;
        let ctx = addr2line::Context::from_dwarf(dwarf).ok()?;
        Some(Dwarf { ctx })
    }
}

/// The DWARF sections of the ELF file in `data` (of build-id `build_id` when both carry one).
pub(crate) fn load_dwarf<'a>(data: &'a [u8], build_id: &[u8]) -> Option<gimli::Dwarf<Reader<'a>>> {
    {
        let obj = object::File::parse(data).ok()?;
        if !build_id.is_empty() {
            if let Ok(Some(id)) = obj.build_id() {
                if id != build_id {
                    return None;
                }
            }
        }
        let endian = if obj.is_little_endian() {
            gimli::RunTimeEndian::Little
        } else {
            gimli::RunTimeEndian::Big
        };
        // Sections are borrowed from `data` when uncompressed; compressed ones are leaked once per
        // module (a command runs once and exits).
        let load = |id: gimli::SectionId| -> Result<Reader<'a>, gimli::Error> {
            let bytes: &'a [u8] = match obj.section_by_name(id.name()) {
                Some(s) => match s.uncompressed_data() {
                    Ok(Cow::Borrowed(b)) => b,
                    Ok(Cow::Owned(v)) => Box::leak(v.into_boxed_slice()),
                    Err(_) => &[],
                },
                None => &[],
            };
            Ok(gimli::EndianSlice::new(bytes, endian))
        };
        gimli::Dwarf::load(load).ok()
    }
}

/// The functions of the program at `path` that the compiler inlined (their debug info says so:
/// `DW_AT_inline`) and whose demangled name `selects` accepts. Such a function has no code of its own,
/// so no sled: `-F` naming it traces nothing. `Err` when the file has no debug info to tell.
pub fn inlined_functions(
    path: &std::path::Path,
    selects: impl Fn(&str) -> bool,
) -> Result<Vec<String>, crate::binary::BinaryError> {
    let data = crate::binary::map(path)?;
    let dwarf = load_dwarf(&data, &[])
        .filter(|d| {
            use gimli::Section;
            !d.debug_info.reader().is_empty()
        })
        .ok_or_else(|| crate::binary::BinaryError::NoDebugInfo(path.to_path_buf()))?;
    let mut found = std::collections::BTreeSet::new();
    let mut seen = std::collections::HashSet::new();
    let mut units = dwarf.units();
    while let Ok(Some(header)) = units.next() {
        let Ok(unit) = dwarf.unit(header) else {
            continue;
        };
        let mut entries = unit.entries();
        while let Ok(Some(die)) = entries.next_dfs() {
            if die.tag() != gimli::DW_TAG_subprogram {
                continue;
            }
            let inlined = matches!(
                die.attr_value(gimli::DW_AT_inline),
                Some(gimli::AttributeValue::Inline(
                    gimli::DW_INL_inlined | gimli::DW_INL_declared_inlined
                ))
            );
            if !inlined {
                continue;
            }
            let name_of = |at| {
                die.attr_value(at)
                    .and_then(|v| dwarf.attr_string(&unit, v).ok())
                    .map(|s| s.slice())
            };
            let Some(raw) =
                name_of(gimli::DW_AT_linkage_name).or_else(|| name_of(gimli::DW_AT_name))
            else {
                continue;
            };
            // Every unit that inlines a function repeats its declaration: name each once.
            if !seen.insert(raw) {
                continue;
            }
            let raw = String::from_utf8_lossy(raw);
            let name = match die.attr_value(gimli::DW_AT_linkage_name) {
                Some(_) => crate::reader::demangle(&raw),
                None => raw.into_owned(),
            };
            if selects(&name) {
                found.insert(name);
            }
        }
    }
    Ok(found.into_iter().collect())
}
