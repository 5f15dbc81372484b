//! `-F`/`-N` name filters (feature `pattern`): one matcher for the runtime, which selects the functions
//! to trace by them, and for `record`, which checks them first and explains a pattern that matched
//! nothing.

/// A `-F`/`-N` regex, matched against demangled names. Most filters are plain names (`myapp::parse`,
/// `^fib::fib$`): those are compared as text, which is ~30× faster than regex-lite's PikeVM and was most
/// of the start-up of a program with 7,000 functions (ripgrep).
#[derive(Clone, Debug)]
pub enum NamePattern {
    /// A regex without metacharacters: `text` anywhere, or at the start (`^`) and/or end (`$`).
    Literal {
        /// The text.
        text: String,
        /// Anchored with `^`.
        start: bool,
        /// Anchored with `$`.
        end: bool,
    },
    /// Any other regex.
    Regex(regex_lite::Regex),
}

impl NamePattern {
    /// Parses the regex `p`.
    pub fn new(p: &str) -> Result<NamePattern, regex_lite::Error> {
        let regex = regex_lite::Regex::new(p)?; // the syntax check, and the general case
        let start = p.starts_with('^');
        let body = if start { &p[1..] } else { p };
        let end = body.ends_with('$');
        let body = if end { &body[..body.len() - 1] } else { body };
        let meta = |c: char| "\\.+*?()|[]{}^$#&-~ \t\n".contains(c);
        Ok(if body.contains(meta) {
            NamePattern::Regex(regex)
        } else {
            NamePattern::Literal {
                text: body.to_string(),
                start,
                end,
            }
        })
    }

    /// The pattern as the user wrote it.
    pub fn as_str(&self) -> std::borrow::Cow<'_, str> {
        match self {
            NamePattern::Literal { text, start, end } => format!(
                "{}{text}{}",
                if *start { "^" } else { "" },
                if *end { "$" } else { "" }
            )
            .into(),
            NamePattern::Regex(r) => r.as_str().into(),
        }
    }

    /// True when the pattern matches the function named `name` at link-time address `link_addr`
    /// (as `nm` shows it): its name, or, for a pattern with an `@`, its selector `name@0xADDR`
    /// ([`selector`]), which picks one of several functions of one name (a C `static` function in
    /// two files, shown as `name [@0xADDR]`). The one rule of `record` and `replay`.
    pub fn matches_function(&self, name: &str, link_addr: u64) -> bool {
        self.is_match(name)
            || (self.as_str().contains('@') && self.is_match(&selector(name, link_addr)))
    }

    /// True when the pattern matches (somewhere in) `name`.
    pub fn is_match(&self, name: &str) -> bool {
        match self {
            NamePattern::Literal { text, start, end } => match (start, end) {
                (false, false) => name.contains(text.as_str()),
                (true, false) => name.starts_with(text.as_str()),
                (false, true) => name.ends_with(text.as_str()),
                (true, true) => name == text,
            },
            NamePattern::Regex(r) => r.is_match(name),
        }
    }
}

/// The pattern that matches the name `name` exactly and nothing else: `^NAME$` with the regex's
/// metacharacters escaped (what `record --auto-args` writes for each function with debug info).
pub fn whole_name(name: &str) -> String {
    format!("^{}$", regex_lite::escape(name))
}

/// The name `p` matches exactly, when `p` is what [`whole_name`] writes for it: such patterns are
/// looked up by name rather than matched one by one.
pub fn matched_whole_name(p: &str) -> Option<String> {
    let body = p.strip_prefix('^')?.strip_suffix('$')?;
    let mut name = String::with_capacity(body.len());
    let mut chars = body.chars();
    while let Some(c) = chars.next() {
        name.push(if c == '\\' { chars.next()? } else { c });
    }
    (whole_name(&name) == p).then_some(name)
}

/// What `-F`/`-N` match besides a function's name: `name@0xADDR`, its link-time address in hex as
/// `nm` shows it (`helper@0x1140`).
pub fn selector(name: &str, link_addr: u64) -> String {
    format!("{name}@{link_addr:#x}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_name_patterns_match_their_name_alone_and_are_recognized() {
        for name in [
            "fib",
            "fib::fib",
            "<T as core::fmt::Debug>::fmt",
            "a.b{{closure}}",
            "x$y",
        ] {
            let p = whole_name(name);
            assert_eq!(matched_whole_name(&p).as_deref(), Some(name), "{p}");
            let re = NamePattern::new(&p).unwrap();
            assert!(re.is_match(name), "{p}");
            assert!(!re.is_match(&format!("{name}x")), "{p}");
        }
        for not in ["^fib", "fib$", "^fi.b$", "^a|b$"] {
            assert_eq!(matched_whole_name(not), None, "{not}");
        }
    }

    #[test]
    fn a_pattern_with_an_address_selects_one_function_of_a_name() {
        let one = NamePattern::new("^helper@0x1140$").unwrap();
        assert!(one.matches_function("helper", 0x1140));
        assert!(!one.matches_function("helper", 0x2150));
        let both = NamePattern::new("^helper$").unwrap();
        assert!(both.matches_function("helper", 0x1140) && both.matches_function("helper", 0x2150));
        assert!(NamePattern::new("helper@")
            .unwrap()
            .matches_function("helper", 1));
    }

    #[test]
    fn name_patterns_match_exactly_what_their_regex_matches() {
        let names = [
            "fib::fib",
            "fib::main",
            "fib::fib_locked",
            "<alloc::vec::Vec<u8>>::push",
            "core::ptr::drop_glue::<std::env::Args>",
            "",
        ];
        let patterns = [
            "fib",
            "^fib::fib$",
            "^fib::",
            "fib$",
            "::push",
            "^$",
            "^",
            "$",
            "fib.fib",
            "f(i|o)b",
            "Vec<u8>",
            "^<alloc",
            "drop_glue::<std",
            "a\\$",
            "[a-z]+::main",
        ];
        for p in patterns {
            let fast = NamePattern::new(p).unwrap();
            let regex = regex_lite::Regex::new(p).unwrap();
            for n in names {
                assert_eq!(fast.is_match(n), regex.is_match(n), "{p:?} on {n:?}");
            }
        }
        assert!(matches!(
            NamePattern::new("^fib::fib$").unwrap(),
            NamePattern::Literal {
                start: true,
                end: true,
                ..
            }
        ));
        assert!(matches!(
            NamePattern::new("fib.fib").unwrap(),
            NamePattern::Regex(_)
        ));
    }
}
