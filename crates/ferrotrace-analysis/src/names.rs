//! Fast function-id → name lookups for the hot loops of the analyses.

use std::borrow::Cow;
use std::collections::HashMap;

use crate::reader::Trace;

/// Ids below this are looked up in a dense table; larger ones (only in odd or corrupt traces) in a map.
const DENSE_LIMIT: u32 = 1 << 20;

/// Names of a trace's functions by id (demangled, hash stripped), with `fn#ID` for ids the embedded
/// table lacks.
///
/// ```no_run
/// # use ferrotrace_analysis::{names::Names, reader::Trace};
/// let trace = Trace::open("ferrotrace.data")?;
/// let names = Names::of(&trace);
/// println!("{}", names.get(1));
/// # Ok::<(), ferrotrace_analysis::reader::ReadError>(())
/// ```
#[derive(Clone, Debug, Default)]
pub struct Names {
    dense: Vec<Option<Box<str>>>,
    sparse: HashMap<u32, Box<str>>,
}

impl Names {
    /// The names of `trace`'s functions, told apart where they must be: distinct functions that
    /// demangle to the same name (a generic instantiated in several crates or codegen units, a
    /// `static` function of two C files) get their module and link-time address, as `nm` and `perf`
    /// show them (`core::ptr::drop_glue::<String> [@0x2cb770]`); ids of the very same function (same
    /// module and address) keep one name, so every view merges them.
    pub fn of(trace: &Trace) -> Names {
        let mut places: HashMap<&str, Vec<(u32, u64)>> = HashMap::new();
        for f in trace.functions.values() {
            let place = (f.module, f.addr);
            let v = places.entry(f.name.as_str()).or_default();
            if !v.contains(&place) {
                v.push(place);
            }
        }
        let module = |id: u32| trace.modules.iter().find(|m| m.id == id);
        let names: Vec<(u32, String)> = trace
            .functions
            .values()
            .map(|f| {
                let shared = &places[f.name.as_str()];
                if shared.len() < 2 {
                    return (f.id, f.name.clone());
                }
                let m = module(f.module);
                let vaddr = f.addr.wrapping_sub(m.map_or(0, |m| m.bias));
                let in_module = if shared.iter().any(|&(other, _)| other != f.module) {
                    let path = m.map_or("?", |m| m.path.as_str());
                    format!("{} ", path.rsplit('/').next().unwrap_or(path))
                } else {
                    String::new()
                };
                (f.id, format!("{} [{in_module}@{vaddr:#x}]", f.name))
            })
            .collect();
        Names::from_pairs(names.iter().map(|(id, n)| (*id, n.as_str())))
    }

    /// A table from `(id, name)` pairs.
    pub fn from_pairs<'a>(pairs: impl IntoIterator<Item = (u32, &'a str)>) -> Names {
        let mut n = Names::default();
        for (id, name) in pairs {
            if id < DENSE_LIMIT {
                let i = id as usize;
                if n.dense.len() <= i {
                    n.dense.resize(i + 1, None);
                }
                n.dense[i] = Some(name.into());
            } else {
                n.sparse.insert(id, name.into());
            }
        }
        n
    }

    /// The name of `id`, if the table has it.
    #[inline]
    pub fn lookup(&self, id: u32) -> Option<&str> {
        match self.dense.get(id as usize) {
            Some(Some(s)) => Some(s),
            _ => self.sparse.get(&id).map(|s| &**s),
        }
    }

    /// The name of `id`, or `fn#ID`.
    #[inline]
    pub fn get(&self, id: u32) -> Cow<'_, str> {
        match self.lookup(id) {
            Some(s) => Cow::Borrowed(s),
            None => Cow::Owned(format!("fn#{id}")),
        }
    }
}
