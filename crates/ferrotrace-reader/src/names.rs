//! Fast function-id → name lookups for the hot loops of the analyses.

use std::borrow::Cow;
use std::collections::HashMap;

use crate::reader::{Function, Module, Trace};

/// Ids below this are looked up in a dense table; larger ones (only in odd or corrupt traces) in a map.
const DENSE_LIMIT: u32 = 1 << 20;

/// Names of a trace's functions by id (demangled, hash stripped), with `fn#ID` for ids the embedded
/// table lacks.
///
/// ```no_run
/// # use ferrotrace_reader::{names::Names, reader::Trace};
/// let trace = Trace::open("ferrotrace.data")?;
/// let names = Names::of(&trace);
/// println!("{}", names.get(1));
/// # Ok::<(), ferrotrace_reader::reader::ReadError>(())
/// ```
#[derive(Clone, Debug, Default)]
pub struct Names {
    dense: Vec<Option<Box<str>>>,
    sparse: HashMap<u32, Box<str>>,
}

impl Names {
    /// The names of `trace`'s functions: one name per function, and distinct names for distinct
    /// functions, saying why they differ.
    ///
    /// The same function can have several ids: a Rust function is compiled into every codegen unit
    /// and crate that uses it (`#[inline]` functions, generics), each copy with its own address and a
    /// mangled name that differs only by where it was instantiated and by LLVM's `.llvm.N` suffix;
    /// those keep one name, so every view merges them. Distinct functions can share a demangled name:
    /// Rust functions of two crates with one name (two versions of a crate) get the crate's
    /// disambiguator (`[regex_syntax 8f2a1b3c4d5e6f70]`), legacy-mangled Rust functions (whose
    /// names leave out generic arguments) their hash (`[h0123456789abcdef]`), and C/C++ functions
    /// (a `static` function in two files) their module and link-time address as `nm` and `perf`
    /// show them (`helper [@0x1140]`).
    pub fn of(trace: &Trace) -> Names {
        let names = told_apart(trace.functions().values(), trace.modules());
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

    /// One id per name: for each id of the table, the lowest id with the same name (the ids of one
    /// function; see [`Names::of`]). Views that aggregate by function (the calling-context tree)
    /// map ids through it.
    pub fn representatives(&self) -> Representatives {
        let mut first: HashMap<&str, u32> = HashMap::new();
        let mut ids: Vec<(u32, &str)> = self
            .dense
            .iter()
            .enumerate()
            .filter_map(|(i, n)| n.as_deref().map(|n| (i as u32, n)))
            .chain(self.sparse.iter().map(|(&id, n)| (id, &**n)))
            .collect();
        ids.sort_unstable_by_key(|&(id, _)| id);
        let mut r = Representatives::default();
        for (id, name) in ids {
            let rep = *first.entry(name).or_insert(id);
            if rep == id {
                continue;
            }
            if id < DENSE_LIMIT {
                let i = id as usize;
                if r.dense.len() <= i {
                    r.dense.resize(i + 1, NONE);
                }
                r.dense[i] = rep;
            } else {
                r.sparse.insert(id, rep);
            }
        }
        r
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

/// For each function id, the id that stands for its function in views that aggregate by function
/// (see [`Names::representatives`]).
#[derive(Clone, Debug, Default)]
pub struct Representatives {
    /// By id below [`DENSE_LIMIT`]: the representative, or [`NONE`] for an id that is its own.
    dense: Vec<u32>,
    /// Larger ids that are not their own representative.
    sparse: HashMap<u32, u32>,
}

/// In [`Representatives::dense`]: the id stands for itself.
const NONE: u32 = u32::MAX;

impl Representatives {
    /// The representative of `id` (`id` itself for all but the later ids of one function).
    #[inline]
    pub fn of(&self, id: u32) -> u32 {
        match self.dense.get(id as usize) {
            Some(&rep) if rep != NONE => rep,
            Some(_) => id,
            None if self.sparse.is_empty() => id,
            None => self.sparse.get(&id).copied().unwrap_or(id),
        }
    }
}

/// The name of each function id (see [`Names::of`]).
fn told_apart<'a>(
    functions: impl Iterator<Item = &'a Function>,
    modules: &[Module],
) -> Vec<(u32, String)> {
    // Functions by demangled name, then, where a name has several ids, by what makes them one
    // function (a second, full demangling: only for those).
    let mut by_name: HashMap<&str, Vec<&Function>> = HashMap::new();
    for f in functions {
        by_name.entry(f.name()).or_default().push(f);
    }
    let mut names = Vec::new();
    for (name, ids) in &by_name {
        if let [f] = ids[..] {
            names.push((f.id, name.to_string()));
            continue;
        }
        let mut functions: Vec<(Identity, Vec<&Function>)> = Vec::new();
        for &f in ids {
            let identity = Identity::of(f);
            match functions.iter_mut().find(|(i, _)| *i == identity) {
                Some((_, fs)) => fs.push(f),
                None => functions.push((identity, vec![f])),
            }
        }
        if functions.len() == 1 {
            names.extend(functions[0].1.iter().map(|f| (f.id, name.to_string())));
            continue;
        }
        let identities: Vec<&Identity> = functions.iter().map(|(i, _)| i).collect();
        for (identity, fs) in &functions {
            let why = identity.why_not(&identities, modules, fs);
            names.extend(fs.iter().map(|f| (f.id, format!("{name} [{why}]"))));
        }
    }
    names
}

/// What makes two function ids one function.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Identity {
    /// A Rust function: its full demangled name, with the crates' disambiguators (v0) or the hash
    /// (legacy) and without what only says where a copy was made (the instantiating crate, LLVM's
    /// `.llvm.N` suffix), which `rustc_demangle` leaves out.
    Rust(String),
    /// Any other function: its module and address.
    Place(u32, u64),
}

impl Identity {
    fn of(f: &Function) -> Identity {
        match rustc_demangle::try_demangle(&f.mangled) {
            Ok(d) => Identity::Rust(d.to_string()),
            Err(_) => Identity::Place(f.module, f.addr),
        }
    }

    /// Why this function is not the others of `all` (which share its demangled name), in words a
    /// user can check: the crates or hash that differ, else its module and address (of `copies`, the
    /// ids that are this function: the lowest address).
    fn why_not(&self, all: &[&Identity], modules: &[Module], copies: &[&Function]) -> String {
        if let Identity::Rust(full) = self {
            let others: Vec<&str> = all
                .iter()
                .filter(|&&i| i != self)
                .filter_map(|i| match i {
                    Identity::Rust(o) => Some(o.as_str()),
                    Identity::Place(..) => None,
                })
                .collect();
            if others.len() + 1 == all.len() {
                let mine = disambiguators(full);
                let differing: Vec<&str> = mine
                    .iter()
                    .copied()
                    .filter(|d| !others.iter().all(|o| disambiguators(o).contains(d)))
                    .collect();
                if !differing.is_empty() {
                    let shown: Vec<String> = differing
                        .iter()
                        .map(|d| d.replace('[', " ").replace(']', ""))
                        .collect();
                    return shown.join(", ");
                }
            }
        }
        let f = copies
            .iter()
            .min_by_key(|f| (f.module, f.addr))
            .expect("an identity has at least one function");
        let module = |id: u32| modules.iter().find(|m| m.id == id);
        let m = module(f.module);
        let vaddr = f.addr.wrapping_sub(m.map_or(0, |m| m.bias));
        let other_module = all.iter().any(|i| match i {
            Identity::Place(other, _) => *other != f.module,
            Identity::Rust(_) => false,
        });
        if other_module {
            let path = m.map_or("?", |m| m.path.as_str());
            format!("{} @{vaddr:#x}", path.rsplit('/').next().unwrap_or(path))
        } else {
            format!("@{vaddr:#x}")
        }
    }
}

/// The disambiguating parts of a full demangled Rust name: each crate with its disambiguator
/// (`regex_syntax[8f2a1b3c4d5e6f70]` in v0 names) and a legacy name's hash (`h0123456789abcdef`).
fn disambiguators(full: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let bytes = full.as_bytes();
    let mut i = 0;
    while let Some(open) = full[i..].find('[').map(|o| i + o) {
        let Some(close) = full[open..].find(']').map(|c| open + c) else {
            break;
        };
        let hash = &full[open + 1..close];
        let crate_start = full[..open]
            .rfind(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .map_or(0, |s| s + 1);
        if !hash.is_empty() && hash.bytes().all(|b| b.is_ascii_hexdigit()) && crate_start < open {
            out.push(&full[crate_start..close + 1]);
        }
        i = close + 1;
    }
    if let Some(h) = full.rfind("::h") {
        let hash = &full[h + 2..];
        if hash.len() == 17 && bytes[h + 3..].iter().all(u8::is_ascii_hexdigit) {
            out.push(hash);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn function(id: u32, addr: u64, mangled: &str) -> Function {
        Function::new(id, 0, addr, 16, mangled.to_string())
    }

    fn names(functions: &[Function]) -> Vec<(u32, String)> {
        let exe = Module {
            id: 0,
            bias: 0x1000,
            size: 0x10000,
            path: "/bin/prog".into(),
            build_id: Vec::new(),
        };
        let mut n = told_apart(functions.iter(), &[exe]);
        n.sort();
        n
    }

    // finish_grow as rustc emits it in two crates and two codegen units (from ft-workload).
    const FINISH_GROW_IN_SERDE_JSON: &str = "_RNvMs4_NtCsbEht8wFNRx7_5alloc7raw_vecNtB5_11RawVecInner11finish_growCsa2ssXh3CUzJ_10serde_json.llvm.10007511191381884111";
    const FINISH_GROW_IN_REGEX: &str = "_RNvMs4_NtCsbEht8wFNRx7_5alloc7raw_vecNtB5_11RawVecInner11finish_growCs7kZsyYfhBAx_5regex.llvm.12953360492493796698";
    const FINISH_GROW_IN_REGEX_OTHER_CGU: &str =
        "_RNvMs4_NtCsbEht8wFNRx7_5alloc7raw_vecNtB5_11RawVecInner11finish_growCs7kZsyYfhBAx_5regex";

    #[test]
    fn copies_of_one_rust_function_keep_one_name() {
        let n = names(&[
            function(1, 0x2000, FINISH_GROW_IN_SERDE_JSON),
            function(2, 0x3000, FINISH_GROW_IN_REGEX),
            function(3, 0x4000, FINISH_GROW_IN_REGEX_OTHER_CGU),
        ]);
        let name = "<alloc::raw_vec::RawVecInner>::finish_grow";
        assert_eq!(
            n,
            vec![(1, name.into()), (2, name.into()), (3, name.into())]
        );
    }

    #[test]
    fn rust_functions_of_two_crates_with_one_name_are_told_apart_by_the_crate() {
        // regex_syntax::parse in two crates named regex_syntax (two versions in one build): only the
        // crate disambiguators (Cs…_) differ.
        let a = "_RNvCs7kZsyYfhBAx_12regex_syntax5parse";
        let b = "_RNvCsg7DCrw0K26C_12regex_syntax5parse";
        let n = names(&[function(1, 0x2000, a), function(2, 0x3000, b)]);
        let da = format!("{}", rustc_demangle::demangle(a));
        let db = format!("{}", rustc_demangle::demangle(b));
        let hash = |d: &str| d[d.find('[').unwrap() + 1..d.find(']').unwrap()].to_string();
        assert_eq!(
            n,
            vec![
                (
                    1,
                    format!("regex_syntax::parse [regex_syntax {}]", hash(&da))
                ),
                (
                    2,
                    format!("regex_syntax::parse [regex_syntax {}]", hash(&db))
                ),
            ]
        );
    }

    #[test]
    fn legacy_rust_functions_with_one_name_are_told_apart_by_their_hash() {
        let n = names(&[
            function(1, 0x2000, "_ZN4core3ptr13drop_in_place17h0123456789abcdefE"),
            function(2, 0x3000, "_ZN4core3ptr13drop_in_place17hfedcba9876543210E"),
            function(
                3,
                0x4000,
                "_ZN4core3ptr13drop_in_place17hfedcba9876543210E.llvm.123",
            ),
        ]);
        assert_eq!(
            n,
            vec![
                (1, "core::ptr::drop_in_place [h0123456789abcdef]".into()),
                (2, "core::ptr::drop_in_place [hfedcba9876543210]".into()),
                (3, "core::ptr::drop_in_place [hfedcba9876543210]".into()),
            ]
        );
    }

    #[test]
    fn c_functions_with_one_name_are_told_apart_by_address_and_ids_of_one_place_merge() {
        let n = names(&[
            function(1, 0x2140, "helper"),
            function(2, 0x3150, "helper"),
            function(3, 0x3150, "helper"),
            function(4, 0x5000, "main"),
        ]);
        assert_eq!(
            n,
            vec![
                (1, "helper [@0x1140]".into()),
                (2, "helper [@0x2150]".into()),
                (3, "helper [@0x2150]".into()),
                (4, "main".into()),
            ]
        );
    }
}
