//! `--srcline`: each function's `file:line`, from the traced binary's DWARF line tables when the
//! binary is still where the trace says it was (and, when both carry one, has the same build-id).
//! Without it nothing is lost: names always come from the trace's embedded symbol table.

use std::borrow::Cow;
use std::collections::HashMap;

use addr2line::gimli;
use object::{Object, ObjectSection};

use crate::reader::{ReadError, Trace};

/// `file:line` of every function whose module can be read; functions of missing, changed or
/// debug-info-less modules are simply absent.
pub fn lookup(trace: &Trace) -> Result<HashMap<u32, String>, ReadError> {
    let mut out = HashMap::new();
    for m in &trace.modules {
        let Some(data) = crate::symbolize::read_object_file(std::path::Path::new(&m.path)) else {
            continue;
        };
        let Some(ctx) = Dwarf::load(&data, &m.build_id) else {
            continue;
        };
        for f in trace.functions.values().filter(|f| f.module == m.id) {
            let vaddr = f.addr.wrapping_sub(m.bias);
            if let Ok(Some(loc)) = ctx.ctx.find_location(vaddr) {
                if let (Some(file), Some(line)) = (loc.file, loc.line) {
                    out.insert(f.id, format!("{file}:{line}"));
                }
            }
        }
    }
    Ok(out)
}

type Reader<'a> = gimli::EndianSlice<'a, gimli::RunTimeEndian>;

struct Dwarf<'a> {
    ctx: addr2line::Context<Reader<'a>>,
}

impl<'a> Dwarf<'a> {
    fn load(data: &'a [u8], build_id: &[u8]) -> Option<Dwarf<'a>> {
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
        let dwarf = gimli::Dwarf::load(load).ok()?;
        let ctx = addr2line::Context::from_dwarf(dwarf).ok()?;
        Some(Dwarf { ctx })
    }
}
