//! The parameters and results of a program's functions, from its DWARF: what `record --auto-args`
//! records of each (`ferrotrace_core::argspec`), as uftrace's `--auto-args` does with debug info.
//!
//! A parameter is recorded when the System V x86-64 convention passes it in one register whose
//! value shows it: an integer, a character, a boolean, an enumeration, a pointer (a `char` pointer
//! as a string), a `float` or a `double`. The first parameter of another type (a structure passed
//! by value, Rust's `&str` and slices, a `long double`, a 128-bit integer) ends the function's list,
//! since the registers of those after it cannot be known from the types alone.

use std::path::Path;

use addr2line::gimli;
use ferrotrace_core::argspec::{ArgSpecs, Format, Item, Source, Spec, MAX_FLOAT_ARG, MAX_INT_ARG};

use crate::binary::BinaryError;

type Reader<'a> = gimli::EndianSlice<'a, gimli::RunTimeEndian>;

/// How a value of a DWARF type is passed and shown: an integer register (`false`) or a vector
/// register (`true`), and its format and size.
struct Passed {
    float: bool,
    format: Format,
    bytes: u8,
}

/// Every function with code in the program at `path` whose DWARF describes parameters or a result
/// that can be recorded: its name (demangled, as `-F` and `-A` match it) and what to record.
/// `Err` when the file has no debug info.
pub fn auto_args(path: &Path) -> Result<Vec<(String, ArgSpecs)>, BinaryError> {
    let data = crate::binary::map(path)?;
    let dwarf = crate::srcline::load_dwarf(&data, &[])
        .filter(|d| {
            use gimli::Section;
            !d.debug_info.reader().is_empty()
        })
        .ok_or_else(|| BinaryError::NoDebugInfo(path.to_path_buf()))?;
    let mut found = Vec::new();
    let mut seen = std::collections::HashSet::new();
    let mut units = dwarf.units();
    while let Ok(Some(header)) = units.next() {
        let Ok(unit) = dwarf.unit(header) else {
            continue;
        };
        let Ok(mut tree) = unit.entries_tree(None) else {
            continue;
        };
        let Ok(root) = tree.root() else { continue };
        walk(&dwarf, &unit, root, &mut found, &mut seen);
    }
    Ok(found)
}

/// Visits the subprograms under `node` (namespaces, classes and functions nest them).
fn walk<'a>(
    dwarf: &gimli::Dwarf<Reader<'a>>,
    unit: &gimli::Unit<Reader<'a>>,
    node: gimli::EntriesTreeNode<'_, '_, Reader<'a>>,
    found: &mut Vec<(String, ArgSpecs)>,
    seen: &mut std::collections::HashSet<String>,
) {
    let is_function = node.entry().tag() == gimli::DW_TAG_subprogram
        && node.entry().attr_value(gimli::DW_AT_low_pc).is_some();
    let name = is_function
        .then(|| function_name(dwarf, unit, node.entry()))
        .flatten();
    let retval = name
        .as_ref()
        .and_then(|_| passed(unit, node.entry()))
        .map(|p| Item {
            source: Source::Return,
            format: p.format,
            bytes: p.bytes,
        });
    let mut specs = ArgSpecs::default();
    let (mut ints, mut floats, mut complete) = (0u8, 0u8, true);
    let mut children = node.children();
    while let Ok(Some(child)) = children.next() {
        if name.is_some() && child.entry().tag() == gimli::DW_TAG_formal_parameter && complete {
            let item = passed(unit, child.entry()).and_then(|p| {
                let source = if p.float {
                    floats += 1;
                    (floats <= MAX_FLOAT_ARG).then_some(Source::Float(floats))?
                } else {
                    ints += 1;
                    (ints <= MAX_INT_ARG).then_some(Source::Int(ints))?
                };
                Some(Item {
                    source,
                    format: p.format,
                    bytes: p.bytes,
                })
            });
            complete = item.is_some_and(|i| specs.args.add(i).is_ok());
        } else if child.entry().tag() != gimli::DW_TAG_formal_parameter {
            walk(dwarf, unit, child, found, seen);
        }
    }
    if let Some(r) = retval {
        let mut s = Spec::default();
        if s.add(r).is_ok() {
            specs.retval = s;
        }
    }
    if let Some(name) = name {
        if !specs.is_empty() && seen.insert(name.clone()) {
            found.push((name, specs));
        }
    }
}

/// The name `-A` matches: the linkage name demangled (Rust, C++), else the plain name (C).
fn function_name(
    dwarf: &gimli::Dwarf<Reader<'_>>,
    unit: &gimli::Unit<Reader<'_>>,
    die: &gimli::DebuggingInformationEntry<Reader<'_>>,
) -> Option<String> {
    let name_of = |at| {
        die.attr_value(at)
            .and_then(|v| dwarf.attr_string(unit, v).ok())
            .map(|s| String::from_utf8_lossy(s.slice()).into_owned())
    };
    match name_of(gimli::DW_AT_linkage_name) {
        Some(mangled) => Some(crate::reader::demangle(&mangled)),
        None => name_of(gimli::DW_AT_name),
    }
}

/// How the value of `die`'s type (`DW_AT_type`) is passed, if in one register that shows it.
fn passed(
    unit: &gimli::Unit<Reader<'_>>,
    die: &gimli::DebuggingInformationEntry<Reader<'_>>,
) -> Option<Passed> {
    let mut offset = match die.attr_value(gimli::DW_AT_type)? {
        gimli::AttributeValue::UnitRef(o) => o,
        _ => return None,
    };
    // Typedefs and qualifiers lead to the type itself; a bounded walk, whatever the debug info says.
    for _ in 0..16 {
        let t = unit.entry(offset).ok()?;
        let size = t
            .attr_value(gimli::DW_AT_byte_size)
            .and_then(|v| v.udata_value());
        let next = t.attr_value(gimli::DW_AT_type);
        match t.tag() {
            gimli::DW_TAG_typedef
            | gimli::DW_TAG_const_type
            | gimli::DW_TAG_volatile_type
            | gimli::DW_TAG_restrict_type
            | gimli::DW_TAG_atomic_type => match next? {
                gimli::AttributeValue::UnitRef(o) => offset = o,
                _ => return None,
            },
            gimli::DW_TAG_base_type => return base_type(&t, size?),
            gimli::DW_TAG_enumeration_type => {
                return integer(Format::Signed, size.unwrap_or(4));
            }
            gimli::DW_TAG_pointer_type
            | gimli::DW_TAG_reference_type
            | gimli::DW_TAG_rvalue_reference_type => {
                let to_char = match next {
                    Some(gimli::AttributeValue::UnitRef(o)) => points_to_char(unit, o),
                    _ => false,
                };
                return Some(Passed {
                    float: false,
                    format: if to_char {
                        Format::Str
                    } else {
                        Format::Pointer
                    },
                    bytes: 8,
                });
            }
            _ => return None,
        }
    }
    None
}

/// A base type's passing: by its encoding and size.
fn base_type(t: &gimli::DebuggingInformationEntry<Reader<'_>>, size: u64) -> Option<Passed> {
    let encoding = match t.attr_value(gimli::DW_AT_encoding)? {
        gimli::AttributeValue::Encoding(e) => e,
        _ => return None,
    };
    match encoding {
        gimli::DW_ATE_float => Some(Passed {
            float: true,
            format: Format::Float,
            bytes: match size {
                4 | 8 => size as u8,
                _ => return None, // long double: on the stack
            },
        }),
        gimli::DW_ATE_signed_char | gimli::DW_ATE_unsigned_char if size == 1 => Some(Passed {
            float: false,
            format: Format::Char,
            bytes: 1,
        }),
        gimli::DW_ATE_signed | gimli::DW_ATE_signed_char => integer(Format::Auto, size),
        gimli::DW_ATE_unsigned
        | gimli::DW_ATE_unsigned_char
        | gimli::DW_ATE_boolean
        | gimli::DW_ATE_UTF => integer(Format::Unsigned, size),
        _ => None,
    }
}

fn integer(format: Format, size: u64) -> Option<Passed> {
    matches!(size, 1 | 2 | 4 | 8).then_some(Passed {
        float: false,
        format,
        bytes: size as u8,
    })
}

/// True when the type at `offset` (through typedefs and qualifiers) is a one-byte character.
fn points_to_char(unit: &gimli::Unit<Reader<'_>>, mut offset: gimli::UnitOffset) -> bool {
    for _ in 0..16 {
        let Ok(t) = unit.entry(offset) else {
            return false;
        };
        match t.tag() {
            gimli::DW_TAG_base_type => {
                let size = t
                    .attr_value(gimli::DW_AT_byte_size)
                    .and_then(|v| v.udata_value());
                let char_encoding = matches!(
                    t.attr_value(gimli::DW_AT_encoding),
                    Some(gimli::AttributeValue::Encoding(
                        gimli::DW_ATE_signed_char | gimli::DW_ATE_unsigned_char
                    ))
                );
                return char_encoding && size == Some(1);
            }
            gimli::DW_TAG_typedef | gimli::DW_TAG_const_type | gimli::DW_TAG_volatile_type => {
                match t.attr_value(gimli::DW_AT_type) {
                    Some(gimli::AttributeValue::UnitRef(o)) => offset = o,
                    _ => return false,
                }
            }
            _ => return false,
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_c_programs_parameters_are_read_from_its_dwarf() {
        let dir = std::env::temp_dir().join(format!("ft-params-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let src = dir.join("p.c");
        std::fs::write(
            &src,
            "struct big { long a, b, c; };\n\
             __attribute__((noinline)) int open_it(const char *path, int flags) { return flags; }\n\
             __attribute__((noinline)) double scale(double x, float f, long n) { return x * f * n; }\n\
             __attribute__((noinline)) long by_value(struct big b, long after) { return b.a + after; }\n\
             __attribute__((noinline)) void nothing(void) {}\n\
             int main(void) { struct big b = {1, 2, 3}; nothing(); \
               return open_it(\"x\", 1) + (int)scale(1.0, 2.0f, 3) + (int)by_value(b, 4); }\n",
        )
        .unwrap();
        let exe = dir.join("p");
        let ok = std::process::Command::new("gcc")
            .args(["-O1", "-g", "-o"])
            .arg(&exe)
            .arg(&src)
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "gcc");
        let found = auto_args(&exe).unwrap();
        let spec = |name: &str| {
            found
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, s)| (s.args.to_string(), s.retval.to_string()))
        };
        assert_eq!(
            spec("open_it"),
            Some(("arg1/s,arg2/d32".into(), "retval/d32".into()))
        );
        assert_eq!(
            spec("scale"),
            Some(("fparg1,fparg2/f32,arg1".into(), "retval/f".into()))
        );
        // The structure passed by value ends the list: nothing before it, the result alone.
        assert_eq!(spec("by_value"), Some(("".into(), "retval".into())));
        assert_eq!(spec("nothing"), None);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_rust_programs_parameters_are_read_by_their_demangled_names() {
        let dir = std::env::temp_dir().join(format!("ft-params-rs-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let src = dir.join("prm.rs");
        std::fs::write(
            &src,
            "#[inline(never)] fn add(a: u64, b: i32, c: &u8) -> u64 { a + b as u64 + *c as u64 }\n\
             #[inline(never)] fn label(s: &str, n: u32) -> usize { s.len() + n as usize }\n\
             fn main() { let n = std::env::args().count(); let x = n as u8; \
               let s = std::env::args().next().unwrap_or_default(); \
               println!(\"{} {}\", add(n as u64, n as i32, &x), label(&s, n as u32)); }\n",
        )
        .unwrap();
        let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
        let built = std::process::Command::new(rustc)
            .args(["-g", "-O", "--edition", "2021", "-o"])
            .arg(dir.join("prm"))
            .arg(&src)
            .status()
            .is_ok_and(|s| s.success());
        assert!(built, "rustc");
        let found = auto_args(&dir.join("prm")).unwrap();
        let spec = |name: &str| {
            found
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, s)| (s.args.to_string(), s.retval.to_string()))
        };
        assert_eq!(
            spec("prm::add"),
            Some(("arg1/u,arg2/d32,arg3/p".into(), "retval/u".into()))
        );
        // `&str` is two registers (a pointer and a length): the list ends there.
        assert_eq!(spec("prm::label"), Some(("".into(), "retval/u".into())));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
