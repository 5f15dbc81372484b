//! Frame labels for flame graphs: long names shortened (generic arguments dropped, paths cut to the
//! crate and the last two segments) with just enough detail kept to tell apart names that would read
//! the same (see the [`flame`](super) module docs).

use std::collections::HashMap;

use super::LONG_NAME;

/// Frame labels: each frame name (folded, see [`fold_chars`](super::fold_chars)) as a flame graph shows it (see the
/// [module docs](self)); distinct names get distinct labels.
#[derive(Clone, Debug, Default)]
pub struct Labels {
    by_name: HashMap<Box<str>, Box<str>>,
}

impl Labels {
    /// The labels of the frame names `names` (folded).
    pub fn new<'a>(names: impl IntoIterator<Item = &'a str>) -> Labels {
        let mut names: Vec<&str> = names.into_iter().collect();
        names.sort_unstable();
        names.dedup();
        // Each long name starts at the least detail; names whose labels clash get more, one step at a
        // time, until they differ or are shown whole. Whole names are distinct, so this ends.
        let mut step: HashMap<&str, usize> = HashMap::new();
        let labelled = |n: &str, step: usize| match DETAILS.get(step) {
            Some(&detail) if n.len() > LONG_NAME => shorten(n, detail),
            _ => None,
        };
        let mut label: HashMap<&str, String> = names
            .iter()
            .map(|&n| (n, labelled(n, 0).unwrap_or_else(|| n.to_string())))
            .collect();
        loop {
            let mut count: HashMap<&str, usize> = HashMap::new();
            for l in label.values() {
                *count.entry(l.as_str()).or_default() += 1;
            }
            let clashing: Vec<&str> = names
                .iter()
                .copied()
                .filter(|n| count[label[n].as_str()] > 1 && label[n] != *n)
                .collect();
            if clashing.is_empty() {
                break;
            }
            for n in clashing {
                let s = step.entry(n).or_default();
                *s += 1;
                label.insert(n, labelled(n, *s).unwrap_or_else(|| n.to_string()));
            }
        }
        Labels {
            by_name: label
                .into_iter()
                .map(|(n, l)| (n.into(), l.into()))
                .collect(),
        }
    }

    /// The label of the frame name `name` (folded); the name itself if the table was not built with
    /// it.
    pub fn get<'a>(&'a self, name: &'a str) -> &'a str {
        self.by_name.get(name).map_or(name, |l| l)
    }
}

/// How much of a name a label keeps (see [`shorten`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Detail {
    /// Levels of generic arguments kept (0: none; `Vec<Option<u8>>` is `Vec` at 0, `Vec<Option>`
    /// at 1).
    pub args: usize,
    /// Paths inside the name keep their crate and last two segments (`aho_corasick::…::api::Searcher`)
    /// instead of their last segment (`Searcher`).
    pub inner_crate: bool,
}

/// The details [`Labels`] tries in turn, least first, for names whose labels would read the same.
const DETAILS: [Detail; 6] = [
    Detail {
        args: 0,
        inner_crate: false,
    },
    Detail {
        args: 1,
        inner_crate: false,
    },
    Detail {
        args: 2,
        inner_crate: false,
    },
    Detail {
        args: 3,
        inner_crate: false,
    },
    Detail {
        args: usize::MAX,
        inner_crate: false,
    },
    Detail {
        args: usize::MAX,
        inner_crate: true,
    },
];

/// `name` shortened for a label: every path inside cut to its last segment (two when the last is a
/// closure or shim, `{closure#0}`), or to its crate and last two with `detail.inner_crate`; generic
/// arguments kept to `detail.args` levels; the name's own path cut to its first segment and its last
/// two. What follows the path (` [@0x1140]`, which tells functions of one name apart) is kept.
/// `None` when the result is not shorter or the name is not a path this understands (it is then shown
/// whole).
pub fn shorten(name: &str, detail: Detail) -> Option<String> {
    let mut p = Parser {
        s: name.as_bytes(),
        text: name,
        i: 0,
        detail,
    };
    let segments = p.path()?;
    let mut out = cut(&segments, true);
    out.push_str(&name[p.i..]);
    (out.len() < name.len()).then_some(out)
}

/// A path of `segments`: its last segment (two for a closure or shim), or with `crate_and_last_two`
/// its first and last two segments (all of them when there are no more than three).
fn cut(segments: &[String], crate_and_last_two: bool) -> String {
    let n = segments.len();
    if crate_and_last_two {
        if n >= 4 {
            format!(
                "{}::…::{}::{}",
                segments[0],
                segments[n - 2],
                segments[n - 1]
            )
        } else {
            segments.join("::")
        }
    } else {
        let keep = if n >= 2 && segments[n - 1].starts_with('{') {
            2
        } else {
            1
        };
        segments[n - keep..].join("::")
    }
}

/// A reader of demangled Rust names (`rustc_demangle`'s alternate form).
struct Parser<'a> {
    s: &'a [u8],
    text: &'a str,
    i: usize,
    detail: Detail,
}

impl<'a> Parser<'a> {
    fn peek(&self) -> Option<u8> {
        self.s.get(self.i).copied()
    }

    fn at(&self, what: &str) -> bool {
        self.s[self.i..].starts_with(what.as_bytes())
    }

    /// Generic arguments `args` as the label shows them (`None`: left out).
    fn args(&self, args: &str) -> Option<Option<String>> {
        if self.detail.args == 0 {
            return Some(None);
        }
        let inner = Detail {
            args: self.detail.args - 1,
            ..self.detail
        };
        short_type(inner, args).map(Some)
    }

    /// A path at the cursor: its segments, each already shortened (generic arguments attached).
    fn path(&mut self) -> Option<Vec<String>> {
        let mut segments: Vec<String> = Vec::new();
        loop {
            let segment = match self.peek()? {
                b'<' => {
                    // A qualified path's head: `<T as Trait>` or an inherent impl's `<T>`.
                    let inner = self.bracketed(b'<', b'>')?;
                    match split_top(inner, " as ") {
                        Some((ty, tr)) => format!(
                            "<{} as {}>",
                            short_type(self.detail, ty)?,
                            short_type(self.detail, tr)?
                        ),
                        None => short_type(self.detail, inner)?,
                    }
                }
                b'{' => self.bracketed(b'{', b'}').map(|b| format!("{{{b}}}"))?,
                c if is_ident(c) => {
                    let start = self.i;
                    while self.peek().is_some_and(is_ident) {
                        self.i += 1;
                    }
                    let mut seg = self.text[start..self.i].to_string();
                    if self.peek() == Some(b'<') {
                        let args = self.bracketed(b'<', b'>')?;
                        if let Some(args) = self.args(args)? {
                            seg = format!("{seg}<{args}>");
                        }
                    }
                    seg
                }
                _ => return None,
            };
            segments.push(segment);
            if !self.at("::") {
                return Some(segments);
            }
            self.i += 2;
            if self.peek() == Some(b'<') {
                // Turbofish: `f::<T>` belongs to the segment before it.
                let args = self.bracketed(b'<', b'>')?;
                if let Some(args) = self.args(args)? {
                    let last = segments.last_mut().expect("a segment was pushed");
                    last.push_str("::<");
                    last.push_str(&args);
                    last.push('>');
                }
                if !self.at("::") {
                    return Some(segments);
                }
                self.i += 2;
            }
        }
    }

    /// The text between the bracket at the cursor and its match (`->` is not a closing `>`); the
    /// cursor moves past the match.
    fn bracketed(&mut self, open: u8, close: u8) -> Option<&'a str> {
        let start = self.i + 1;
        let mut depth = 0usize;
        while let Some(c) = self.peek() {
            if c == open {
                depth += 1;
            } else if c == close && !(close == b'>' && self.i > 0 && self.s[self.i - 1] == b'-') {
                depth -= 1;
                if depth == 0 {
                    self.i += 1;
                    return Some(&self.text[start..self.i - 1]);
                }
            }
            self.i += 1;
        }
        None
    }
}

/// A type (or a list of them, generic arguments) with every path in it cut as `detail` says.
fn short_type(detail: Detail, ty: &str) -> Option<String> {
    let mut p = Parser {
        s: ty.as_bytes(),
        text: ty,
        i: 0,
        detail,
    };
    let mut out = String::new();
    while let Some(c) = p.peek() {
        let path_starts =
            is_ident(c) || c == b'{' || (c == b'<' && !(p.i > 0 && is_ident(p.s[p.i - 1])));
        if !path_starts {
            out.push(c as char);
            p.i += 1;
            continue;
        }
        let segments = p.path()?;
        out.push_str(&cut(&segments, detail.inner_crate));
    }
    Some(out)
}

/// `s` split at the first `sep` outside brackets.
fn split_top<'a>(s: &'a str, sep: &str) -> Option<(&'a str, &'a str)> {
    let b = s.as_bytes();
    let mut depth = 0i32;
    for i in 0..b.len() {
        match b[i] {
            b'<' | b'(' | b'[' | b'{' => depth += 1,
            b'>' if i > 0 && b[i - 1] == b'-' => {}
            b'>' | b')' | b']' | b'}' => depth -= 1,
            _ if depth == 0 && s[i..].starts_with(sep) => {
                return Some((&s[..i], &s[i + sep.len()..]))
            }
            _ => {}
        }
    }
    None
}

/// A byte of an identifier (any byte of a non-ASCII character counts: Rust identifiers may be
/// Unicode, and nothing else in a demangled name is).
fn is_ident(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_' || c >= 0x80
}

#[cfg(test)]
mod tests {
    use super::*;

    const LEAST: Detail = DETAILS[0];

    #[test]
    fn long_rust_names_keep_their_crate_type_and_function() {
        // Names as a trace of testprogs/workload (serde_json, regex, rayon) has them.
        for (name, label) in [
            (
                "<serde_json::value::Value as serde_core::de::Deserialize>::deserialize::<&mut serde_json::de::Deserializer<serde_json::read::StrRead>>",
                "<Value as Deserialize>::deserialize",
            ),
            (
                "serde_json::de::from_trait::<serde_json::read::StrRead, serde_json::value::Value>",
                "serde_json::de::from_trait",
            ),
            (
                "<rayon_core::registry::WorkerThread>::wait_until_cold",
                "WorkerThread::wait_until_cold",
            ),
            (
                "std::sys::backtrace::__rust_begin_short_backtrace::<fn(), ()>",
                "std::…::backtrace::__rust_begin_short_backtrace",
            ),
            (
                "<&mut ft_workload::regex_phase::{closure#0} as core::ops::function::FnMut<(&alloc::string::String,)>>::call_mut",
                "<&mut regex_phase::{closure#0} as FnMut>::call_mut",
            ),
            (
                "<regex_automata::meta::strategy::Core as regex_automata::meta::strategy::Strategy>::search_slots",
                "<Core as Strategy>::search_slots",
            ),
            (
                "rayon::iter::plumbing::bridge_producer_consumer::helper::<rayon::slice::IterProducer<u64>, rayon::iter::map::MapConsumer<rayon::iter::sum::SumConsumer<u64>, ft_workload::sort_phase::{closure#0}>>",
                "rayon::…::bridge_producer_consumer::helper",
            ),
            // `->` of a function type does not close the generic arguments.
            (
                "<fn(u32) -> alloc::string::String as core::ops::function::FnOnce<(u32,)>>::call_once",
                "<fn(u32) -> String as FnOnce>::call_once",
            ),
            // What tells functions of one name apart stays.
            (
                "core::ptr::drop_glue::<alloc::string::String> [@0x2cb770]",
                "core::ptr::drop_glue [@0x2cb770]",
            ),
        ] {
            assert_eq!(shorten(name, LEAST).as_deref(), Some(label), "{name}");
        }
        // Nothing to gain, or not a path: shown whole.
        assert_eq!(shorten("ft_workload::json_phase", LEAST), None);
        assert_eq!(shorten("<unbalanced::Type as Trait::method", LEAST), None);
    }

    #[test]
    fn labels_that_would_read_the_same_keep_just_enough_detail() {
        let names = [
            "core::ptr::drop_glue::<serde_json::value::Value>",
            "core::ptr::drop_glue::<regex_syntax::hir::HirKind>",
            "<&aho_corasick::packed::api::Searcher as core::fmt::Debug>::fmt",
            "<&aho_corasick::packed::teddy::builder::Searcher as core::fmt::Debug>::fmt",
            "<alloc::vec::Vec<u8> as core::ops::drop::Drop>::drop",
            "<alloc::vec::Vec<regex_syntax::hir::Hir> as core::ops::drop::Drop>::drop",
            "<rayon_core::sleep::Sleep>::wake_any_threads",
            "fib::fib",
        ];
        let labels = Labels::new(names);
        let got: Vec<&str> = names.iter().map(|n| labels.get(n)).collect();
        assert_eq!(
            got,
            [
                "core::ptr::drop_glue::<Value>",
                "core::ptr::drop_glue::<HirKind>",
                "<&aho_corasick::…::api::Searcher as core::fmt::Debug>::fmt",
                "<&aho_corasick::…::builder::Searcher as core::fmt::Debug>::fmt",
                "<Vec<u8> as Drop>::drop",
                "<Vec<Hir> as Drop>::drop",
                "Sleep::wake_any_threads",
                "fib::fib",
            ]
        );
    }
}
