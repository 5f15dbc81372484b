//! Address → frames: DWARF (addr2line: inlined frames, file:line), symbol tables, and kallsyms.

use std::collections::HashMap;
use std::path::Path;

/// One symbolized frame before interning.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct SymFrame {
    pub function: String,
    pub file: String,
    pub line: u32,
    pub inlined: bool,
}

/// Demangles a Rust (legacy or v0) name without its hash; other names are returned unchanged.
pub fn demangle(name: &str) -> String {
    match rustc_demangle::try_demangle(name) {
        Ok(d) => format!("{d:#}"),
        Err(_) => name.to_string(),
    }
}

/// Lazily loaded debug info per module path.
pub(crate) struct Symbolizer {
    loaders: HashMap<String, Option<addr2line::Loader>>,
    kallsyms: Option<Option<Vec<(u64, String)>>>,
}

impl Symbolizer {
    pub fn new() -> Symbolizer {
        Symbolizer {
            loaders: HashMap::new(),
            kallsyms: None,
        }
    }

    /// Frames at stated address `svma` of the ELF file `path`, innermost first.
    pub fn frames(&mut self, path: &str, svma: u64) -> Vec<SymFrame> {
        let loader = self.loaders.entry(path.to_string()).or_insert_with(|| {
            if Path::new(path).is_file() {
                addr2line::Loader::new(path).ok()
            } else {
                None
            }
        });
        let Some(loader) = loader else {
            return Vec::new();
        };
        let mut out = Vec::new();
        if let Ok(mut it) = loader.find_frames(svma) {
            while let Ok(Some(f)) = it.next() {
                let function = f
                    .function
                    .as_ref()
                    .and_then(|n| n.raw_name().ok().map(|s| demangle(&s)))
                    .unwrap_or_default();
                let (file, line) = match &f.location {
                    Some(l) => (l.file.unwrap_or("").to_string(), l.line.unwrap_or(0)),
                    None => (String::new(), 0),
                };
                out.push(SymFrame {
                    function,
                    file,
                    line,
                    inlined: false,
                });
            }
        }
        // All but the outermost frame were inlined into the next one.
        let n = out.len();
        for (i, f) in out.iter_mut().enumerate() {
            f.inlined = i + 1 < n;
        }
        // DWARF without names (or no DWARF): fall back to the symbol table for the outermost frame.
        let sym = loader.find_symbol(svma).map(demangle);
        match (out.last_mut(), sym) {
            (Some(last), Some(s)) if last.function.is_empty() => last.function = s,
            (None, Some(s)) => out.push(SymFrame {
                function: s,
                file: String::new(),
                line: 0,
                inlined: false,
            }),
            _ => {}
        }
        out.retain(|f| !f.function.is_empty());
        out
    }

    /// The kernel symbol containing `addr`, if `/proc/kallsyms` is readable with addresses.
    pub fn kernel(&mut self, addr: u64) -> Option<String> {
        let table = self.kallsyms.get_or_insert_with(load_kallsyms).as_ref()?;
        let i = table.partition_point(|(a, _)| *a <= addr);
        if i == 0 {
            return None;
        }
        Some(table[i - 1].1.clone())
    }
}

fn load_kallsyms() -> Option<Vec<(u64, String)>> {
    let text = std::fs::read_to_string("/proc/kallsyms").ok()?;
    let mut v = Vec::new();
    for line in text.lines() {
        let mut it = line.split_whitespace();
        let (Some(a), Some(t), Some(name)) = (it.next(), it.next(), it.next()) else {
            continue;
        };
        if !matches!(t, "t" | "T" | "w" | "W") {
            continue;
        }
        let Ok(addr) = u64::from_str_radix(a, 16) else {
            continue;
        };
        if addr == 0 {
            continue;
        }
        v.push((addr, name.to_string()));
    }
    if v.is_empty() {
        return None;
    }
    v.sort_by_key(|x| x.0);
    Some(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn demangles_legacy_and_v0_without_hash() {
        assert_eq!(
            demangle("_ZN4core3fmt5write17h0123456789abcdefE"),
            "core::fmt::write"
        );
        assert_eq!(demangle("_RNvCs1234_7mycrate4main"), "mycrate::main");
        assert_eq!(demangle("malloc"), "malloc");
    }
}
