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
    /// The names of `trace`'s functions.
    pub fn of(trace: &Trace) -> Names {
        Names::from_pairs(trace.functions.values().map(|f| (f.id, f.name.as_str())))
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
