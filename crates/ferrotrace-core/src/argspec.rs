//! Function arguments and return values (`record -A`, `-R`): uftrace's spelling, parsed once for the
//! command line, the runtime and every reader, and the bytes one call's values take in an event.
//!
//! An option is `REGEX@ITEMS`: `-A 'parse@arg1,arg2/s,fparg1'` records the first integer argument, the
//! second read as a string, and the first floating-point argument of every traced function whose name
//! the pattern matches (as `-F` matches); `-R 'parse@retval/x'` its return value. An item is
//! `argN` (the Nth integer or pointer argument by the System V x86-64 convention: registers for 1–6,
//! the stack from 7 on), `fpargN` (the Nth floating-point argument, xmm0–7) or `retval` (rax, or
//! xmm0 with `/f`), followed by an optional `/FORMAT`: `d` (the default: decimal, or hexadecimal
//! past ±100000, as uftrace shows it), `i` (signed), `u` (unsigned), `x` (hexadecimal), `o` (octal),
//! `s` (a NUL-terminated string, read safely, at most [`MAX_STRING`] bytes), `c` (a character), `f`
//! (a `double`), `p` (a pointer, shown as the function it points at where it is one), with an optional
//! size in bits for integers and floats (`i32`, `x16`, `f32`).
//!
//! What an event carries depends on the spec alone, so that a reader knows it from the spec. A spec
//! whose items are all integer registers (`argN` with N ≤ 6, no `/s`) or a return value other than a
//! string is recorded **as registers** ([`Spec::in_registers`]), which the hooks store without reading
//! the function's spec: an entry carries the integer argument registers in pairs, rdi and rsi, then rdx
//! and rcx, then r8 and r9, as many pairs as hold its highest `argN` ([`Spec::register_pairs`]: 16, 32
//! or 48 bytes), an exit rax and the low half of xmm0 (16 bytes), and each item is read from its
//! register. Any other spec is recorded **packed**, per item and in the order of the spec
//! (little-endian): 8 bytes for every item but a string (the register, or stack slot, as it was: a reader cuts it to the item's size),
//! and for a string a `u16` header and the bytes: the header is the length (at most [`MAX_STRING`]),
//! with [`CUT`] set when the string was longer, or [`NULL`] (a null pointer, which nothing follows)
//! or [`UNREADABLE`] (a pointer the process could not read, such as a dangling one, followed by the
//! pointer as 8 bytes).
//!
//! ```
//! use ferrotrace_core::argspec::{ArgOption, Value};
//!
//! let o = ArgOption::parse("^open$@arg1/s,arg2").unwrap();
//! assert_eq!(o.pattern, "^open$");
//! assert_eq!(o.spec.to_string(), "arg1/s,arg2");
//! let mut bytes = Vec::new();
//! bytes.extend_from_slice(&11u16.to_le_bytes());
//! bytes.extend_from_slice(b"/etc/passwd");
//! bytes.extend_from_slice(&0u64.to_le_bytes());
//! let mut shown = String::new();
//! o.spec.show(&bytes, &mut shown, &mut |_, _| false).unwrap();
//! assert_eq!(shown, "\"/etc/passwd\", 0");
//! assert!(matches!(o.spec.values(&bytes).next(), Some(Value::Str(b"/etc/passwd", false))));
//! ```

use core::fmt::{self, Write};

/// Items one function's spec can hold (its arguments, or its return value).
pub const MAX_ITEMS: usize = 12;
/// The highest `argN` (7 and up are read from the stack).
pub const MAX_INT_ARG: u8 = 16;
/// The highest `fpargN` (xmm0–7).
pub const MAX_FLOAT_ARG: u8 = 8;
/// Bytes of a string argument kept (uftrace keeps 98).
pub const MAX_STRING: usize = 96;
/// A string header's flag: the string was longer than the bytes kept.
pub const CUT: u16 = 0x8000;
/// A string header: the pointer was null.
pub const NULL: u16 = 0xffff;
/// A string header: the process could not read at the pointer (unmapped, or not readable); the
/// pointer follows, 8 bytes.
pub const UNREADABLE: u16 = 0xfffe;

/// Where an item's value is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// `argN`: the Nth integer or pointer argument, from 1.
    Int(u8),
    /// `fpargN`: the Nth floating-point argument, from 1.
    Float(u8),
    /// `retval`: the return value.
    Return,
}

/// How an item's value is shown (uftrace's format letters).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// `d`, the default: decimal, hexadecimal past ±100000.
    Auto,
    /// `i`: signed decimal.
    Signed,
    /// `u`: unsigned decimal (hexadecimal past 100000, as uftrace).
    Unsigned,
    /// `x`: hexadecimal.
    Hex,
    /// `o`: octal.
    Octal,
    /// `s`: a NUL-terminated string at the pointer.
    Str,
    /// `c`: a character.
    Char,
    /// `f`: a floating-point number.
    Float,
    /// `p`: a pointer, shown as `&function` when it points at one.
    Pointer,
}

impl Format {
    fn letter(self) -> char {
        match self {
            Format::Auto => 'd',
            Format::Signed => 'i',
            Format::Unsigned => 'u',
            Format::Hex => 'x',
            Format::Octal => 'o',
            Format::Str => 's',
            Format::Char => 'c',
            Format::Float => 'f',
            Format::Pointer => 'p',
        }
    }
}

/// One value to record: where it is, how it is shown, and its size in bytes (1, 2, 4 or 8).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Item {
    /// Where the value is.
    pub source: Source,
    /// How it is shown.
    pub format: Format,
    /// Its size in bytes.
    pub bytes: u8,
}

impl Item {
    /// Whether the value is read from a floating-point register (`fpargN`, `retval/f`).
    pub fn in_vector_register(&self) -> bool {
        matches!(self.source, Source::Float(_))
            || (self.source == Source::Return && self.format == Format::Float)
    }

    /// Bytes the item takes in an event at most.
    pub fn max_bytes(&self) -> usize {
        match self.format {
            Format::Str => 2 + MAX_STRING.max(8),
            _ => 8,
        }
    }
}

impl fmt::Display for Item {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.source {
            Source::Int(n) => write!(f, "arg{n}")?,
            Source::Float(n) => write!(f, "fparg{n}")?,
            Source::Return => f.write_str("retval")?,
        }
        let default = match self.source {
            Source::Float(_) => (Format::Float, 8),
            _ => (Format::Auto, 8),
        };
        if (self.format, self.bytes) == default {
            return Ok(());
        }
        write!(f, "/{}", self.format.letter())?;
        let sized = !matches!(self.format, Format::Str | Format::Char | Format::Pointer);
        if sized && self.bytes != 8 {
            write!(f, "{}", self.bytes as u32 * 8)?;
        }
        Ok(())
    }
}

/// Why an option or item was refused: the text says what to write instead.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpecError(pub &'static str);

impl fmt::Display for SpecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }
}

impl core::str::FromStr for Item {
    type Err = SpecError;

    fn from_str(s: &str) -> Result<Item, SpecError> {
        let (name, format) = match s.split_once('/') {
            Some((n, f)) => (n, Some(f)),
            None => (s, None),
        };
        let number = |digits: &str, max: u8, what: &'static str| {
            digits
                .parse::<u8>()
                .ok()
                .filter(|n| (1..=max).contains(n))
                .ok_or(SpecError(what))
        };
        let source = if let Some(n) = name.strip_prefix("fparg") {
            Source::Float(number(
                n,
                MAX_FLOAT_ARG,
                "fpargN takes N from 1 to 8 (xmm0-7)",
            )?)
        } else if let Some(n) = name.strip_prefix("arg") {
            Source::Int(number(n, MAX_INT_ARG, "argN takes N from 1 to 16")?)
        } else if name == "retval" {
            Source::Return
        } else {
            return Err(SpecError(
                "an item is argN, fpargN or retval, with an optional /FORMAT (d i u x o s c f p)",
            ));
        };
        let mut item = Item {
            source,
            format: match source {
                Source::Float(_) => Format::Float,
                _ => Format::Auto,
            },
            bytes: 8,
        };
        let Some(format) = format else {
            return Ok(item);
        };
        let mut chars = format.chars();
        item.format =
            match chars.next() {
                Some('d') => Format::Auto,
                Some('i') => Format::Signed,
                Some('u') => Format::Unsigned,
                Some('x') => Format::Hex,
                Some('o') => Format::Octal,
                Some('s') => Format::Str,
                Some('c') => Format::Char,
                Some('f') => Format::Float,
                Some('p') => Format::Pointer,
                _ => return Err(SpecError(
                    "unknown format: use d, i, u, x, o, s, c, f or p (uftrace's /S, /e, /t and \
                     %REGISTER are not supported)",
                )),
            };
        if matches!(source, Source::Float(_)) && item.format != Format::Float {
            return Err(SpecError("fpargN is shown as /f (or /f32, /f64)"));
        }
        let bits = chars.as_str();
        if !bits.is_empty() {
            item.bytes = match (item.format, bits) {
                (Format::Str | Format::Char | Format::Pointer, _) => {
                    return Err(SpecError("/s, /c and /p take no size"))
                }
                (Format::Float, "32") => 4,
                (Format::Float, "64") => 8,
                (Format::Float, _) => return Err(SpecError("a float's size is 32 or 64")),
                (_, "8") => 1,
                (_, "16") => 2,
                (_, "32") => 4,
                (_, "64") => 8,
                _ => return Err(SpecError("an integer's size is 8, 16, 32 or 64 bits")),
            };
        }
        if item.format == Format::Char {
            item.bytes = 1;
        }
        Ok(item)
    }
}

/// The items recorded for one function at its entry (its arguments) or its exit (its return value).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Spec {
    items: [Item; MAX_ITEMS],
    len: u8,
}

impl Default for Spec {
    fn default() -> Spec {
        Spec {
            items: [Item {
                source: Source::Return,
                format: Format::Auto,
                bytes: 8,
            }; MAX_ITEMS],
            len: 0,
        }
    }
}

impl Spec {
    /// The items, in the order their values are recorded.
    pub fn items(&self) -> &[Item] {
        &self.items[..self.len as usize]
    }

    /// True when nothing is recorded.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Adds `item`, unless an item of the same source is there already (the first option that names
    /// a value decides how it is shown).
    pub fn add(&mut self, item: Item) -> Result<(), SpecError> {
        if self.items().iter().any(|i| i.source == item.source) {
            return Ok(());
        }
        let slot = self
            .items
            .get_mut(self.len as usize)
            .ok_or(SpecError("at most 12 values per function"))?;
        *slot = item;
        self.len += 1;
        Ok(())
    }

    /// Adds every item of `other` ([`Spec::add`]).
    pub fn merge(&mut self, other: &Spec) -> Result<(), SpecError> {
        other.items().iter().try_for_each(|&i| self.add(i))
    }

    /// Bytes one call's values take at most.
    pub fn max_bytes(&self) -> usize {
        self.items().iter().map(Item::max_bytes).sum()
    }

    /// True when the values are recorded as registers (see the module documentation): every item
    /// is an integer register argument that is not a string, or a return value that is not a string.
    pub fn in_registers(&self) -> bool {
        !self.is_empty()
            && self.items().iter().all(|i| {
                i.format != Format::Str && matches!(i.source, Source::Int(1..=6) | Source::Return)
            })
    }

    /// The pairs of integer argument registers an entry carries when its values are recorded as
    /// registers (rdi and rsi; then rdx and rcx; then r8 and r9): as many as hold its highest `argN`,
    /// 1 to 3; 0 for a spec of return values or one not in registers.
    pub fn register_pairs(&self) -> u8 {
        if !self.in_registers() {
            return 0;
        }
        let highest = self.items().iter().map(|i| match i.source {
            Source::Int(n) => n,
            _ => 0,
        });
        highest.max().unwrap_or(0).div_ceil(2)
    }

    /// Bytes of an event's values when they are recorded as registers: the register pairs at an
    /// entry ([`Spec::register_pairs`]), rax and xmm0 at an exit.
    pub fn register_bytes(&self) -> usize {
        match self.items().first().map(|i| i.source) {
            Some(Source::Return) => 16,
            _ => 16 * self.register_pairs() as usize,
        }
    }

    /// The values recorded in `bytes`, in the order of the items; stops at the first one the bytes do
    /// not hold whole (a damaged event).
    pub fn values<'a>(&'a self, bytes: &'a [u8]) -> impl Iterator<Item = Value<'a>> + 'a {
        let registers = self.in_registers();
        let mut rest = bytes;
        self.items().iter().map_while(move |item| {
            if registers {
                let at = match item.source {
                    Source::Int(n) => (n as usize - 1) * 8,
                    _ if item.format == Format::Float => 8,
                    _ => 0,
                };
                let w = bytes.get(at..at + 8)?;
                return Some(Value::Word(u64::from_le_bytes(w.try_into().ok()?)));
            }
            let (v, after) = Value::read(item, rest)?;
            rest = after;
            Some(v)
        })
    }

    /// Writes the values in `bytes` as uftrace shows them, separated by ", " (`"/etc/passwd", 0`);
    /// `symbol(address, out)` writes the name of the function at `address` and says whether there is
    /// one (for `/p`).
    pub fn show(
        &self,
        bytes: &[u8],
        out: &mut dyn Write,
        symbol: &mut dyn FnMut(u64, &mut dyn Write) -> bool,
    ) -> fmt::Result {
        for (i, (item, v)) in self.items().iter().zip(self.values(bytes)).enumerate() {
            if i > 0 {
                out.write_str(", ")?;
            }
            v.show(item, out, symbol)?;
        }
        Ok(())
    }
}

impl fmt::Display for Spec {
    /// The canonical spelling (`arg1/s,arg2`), which [`Spec`]'s parser reads back.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, item) in self.items().iter().enumerate() {
            if i > 0 {
                f.write_char(',')?;
            }
            write!(f, "{item}")?;
        }
        Ok(())
    }
}

impl core::str::FromStr for Spec {
    type Err = SpecError;

    /// Comma-separated items (an empty text is an empty spec).
    fn from_str(s: &str) -> Result<Spec, SpecError> {
        let mut spec = Spec::default();
        for part in s.split(',').filter(|p| !p.is_empty()) {
            spec.add(part.parse()?)?;
        }
        Ok(spec)
    }
}

/// What one function's events carry: the items of its entries (its arguments) and of its exits (its
/// return value); either may be empty. An Entry or Exit event with a payload holds the values its
/// spec describes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ArgSpecs {
    /// The items of its entries.
    pub args: Spec,
    /// The item of its exits.
    pub retval: Spec,
}

impl ArgSpecs {
    /// True when neither entries nor exits carry values.
    pub fn is_empty(&self) -> bool {
        self.args.is_empty() && self.retval.is_empty()
    }

    /// Adds what `option` names (arguments, or the return value) ([`Spec::merge`]).
    pub fn add(&mut self, option: &ArgOption<'_>) -> Result<(), SpecError> {
        match option.is_retval()? {
            true => self.retval.merge(&option.spec),
            false => self.args.merge(&option.spec),
        }
    }
}

/// What `record --auto-args` records of common C library functions (traced when `-P` patches them):
/// `(name, arguments, return value)`, in this module's spelling.
pub const LIBC: &[(&str, &str, &str)] = &[
    ("open", "arg1/s,arg2/x32", "retval/d32"),
    ("openat", "arg1/d32,arg2/s,arg3/x32", "retval/d32"),
    ("close", "arg1/d32", "retval/d32"),
    ("read", "arg1/d32,arg2/p,arg3/u", "retval"),
    ("write", "arg1/d32,arg2/p,arg3/u", "retval"),
    ("lseek", "arg1/d32,arg2,arg3/d32", "retval"),
    ("stat", "arg1/s,arg2/p", "retval/d32"),
    ("unlink", "arg1/s", "retval/d32"),
    ("mkdir", "arg1/s,arg2/o32", "retval/d32"),
    ("access", "arg1/s,arg2/d32", "retval/d32"),
    ("fopen", "arg1/s,arg2/s", "retval/p"),
    ("fclose", "arg1/p", "retval/d32"),
    ("fread", "arg1/p,arg2/u,arg3/u,arg4/p", "retval/u"),
    ("fwrite", "arg1/p,arg2/u,arg3/u,arg4/p", "retval/u"),
    ("fputs", "arg1/s,arg2/p", "retval/d32"),
    ("puts", "arg1/s", "retval/d32"),
    ("printf", "arg1/s", "retval/d32"),
    ("fprintf", "arg1/p,arg2/s", "retval/d32"),
    ("malloc", "arg1/u", "retval/p"),
    ("calloc", "arg1/u,arg2/u", "retval/p"),
    ("realloc", "arg1/p,arg2/u", "retval/p"),
    ("free", "arg1/p", ""),
    (
        "mmap",
        "arg1/p,arg2/u,arg3/x32,arg4/x32,arg5/d32,arg6",
        "retval/p",
    ),
    ("munmap", "arg1/p,arg2/u", "retval/d32"),
    ("strlen", "arg1/s", "retval/u"),
    ("strcmp", "arg1/s,arg2/s", "retval/d32"),
    ("strncmp", "arg1/s,arg2/s,arg3/u", "retval/d32"),
    ("strcpy", "arg1/p,arg2/s", "retval/p"),
    ("strdup", "arg1/s", "retval/s"),
    ("strchr", "arg1/s,arg2/c", "retval/p"),
    ("strstr", "arg1/s,arg2/s", "retval/p"),
    ("memcpy", "arg1/p,arg2/p,arg3/u", "retval/p"),
    ("memmove", "arg1/p,arg2/p,arg3/u", "retval/p"),
    ("memset", "arg1/p,arg2/d32,arg3/u", "retval/p"),
    ("memcmp", "arg1/p,arg2/p,arg3/u", "retval/d32"),
    ("atoi", "arg1/s", "retval/d32"),
    ("strtol", "arg1/s,arg2/p,arg3/d32", "retval"),
    ("getenv", "arg1/s", "retval/s"),
    ("setenv", "arg1/s,arg2/s,arg3/d32", "retval/d32"),
    ("exit", "arg1/d32", ""),
    ("fork", "", "retval/d32"),
    ("execve", "arg1/s,arg2/p,arg3/p", "retval/d32"),
    ("waitpid", "arg1/d32,arg2/p,arg3/d32", "retval/d32"),
    ("kill", "arg1/d32,arg2/d32", "retval/d32"),
    ("socket", "arg1/d32,arg2/d32,arg3/d32", "retval/d32"),
    ("connect", "arg1/d32,arg2/p,arg3/u32", "retval/d32"),
    ("bind", "arg1/d32,arg2/p,arg3/u32", "retval/d32"),
    ("listen", "arg1/d32,arg2/d32", "retval/d32"),
    ("accept", "arg1/d32,arg2/p,arg3/p", "retval/d32"),
    ("send", "arg1/d32,arg2/p,arg3/u,arg4/x32", "retval"),
    ("recv", "arg1/d32,arg2/p,arg3/u,arg4/x32", "retval"),
    ("dlopen", "arg1/s,arg2/x32", "retval/p"),
    ("dlsym", "arg1/p,arg2/s", "retval/p"),
    (
        "pthread_create",
        "arg1/p,arg2/p,arg3/p,arg4/p",
        "retval/d32",
    ),
    ("pthread_mutex_lock", "arg1/p", "retval/d32"),
    ("pthread_mutex_unlock", "arg1/p", "retval/d32"),
    ("sleep", "arg1/u32", "retval/u32"),
    ("usleep", "arg1/u32", "retval/d32"),
];

/// One `-A` or `-R` option: a function pattern (as `-F` takes it) and its items.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ArgOption<'a> {
    /// The pattern, as written.
    pub pattern: &'a str,
    /// The items.
    pub spec: Spec,
}

impl<'a> ArgOption<'a> {
    /// Parses `REGEX@ITEMS` (the last `@` separates them: a pattern may hold one, as `NAME@0xADDR`
    /// does).
    pub fn parse(s: &'a str) -> Result<ArgOption<'a>, SpecError> {
        let (pattern, items) = s.rsplit_once('@').ok_or(SpecError(
            "write FUNCTION@ITEMS, as in 'open@arg1/s,arg2' or 'open@retval'",
        ))?;
        if pattern.is_empty() {
            return Err(SpecError("the function pattern before '@' is empty"));
        }
        let spec: Spec = items.parse()?;
        if spec.is_empty() {
            return Err(SpecError("no items after '@'"));
        }
        Ok(ArgOption { pattern, spec })
    }

    /// True when the option names return values only (an `-R` option), false when it names
    /// arguments only; an error when it mixes them.
    pub fn is_retval(&self) -> Result<bool, SpecError> {
        let returns = self
            .spec
            .items()
            .iter()
            .filter(|i| i.source == Source::Return)
            .count();
        match returns {
            0 => Ok(false),
            n if n == self.spec.items().len() => Ok(true),
            _ => Err(SpecError(
                "retval goes in -R (return values), argN and fpargN in -A (arguments)",
            )),
        }
    }
}

/// One recorded value.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Value<'a> {
    /// A register or stack slot, whole (cut to the item's size when shown).
    Word(u64),
    /// A string's bytes, and whether it was longer than [`MAX_STRING`].
    Str(&'a [u8], bool),
    /// A string argument that was a null pointer.
    Null,
    /// A string argument the process could not read, and the pointer.
    Unreadable(u64),
}

impl<'a> Value<'a> {
    /// Reads `item`'s value at the start of `bytes`; returns it and the bytes after it.
    fn read(item: &Item, bytes: &'a [u8]) -> Option<(Value<'a>, &'a [u8])> {
        if item.format != Format::Str {
            let (w, rest) = bytes.split_first_chunk::<8>()?;
            return Some((Value::Word(u64::from_le_bytes(*w)), rest));
        }
        let (h, rest) = bytes.split_first_chunk::<2>()?;
        match u16::from_le_bytes(*h) {
            NULL => Some((Value::Null, rest)),
            UNREADABLE => {
                let (a, rest) = rest.split_first_chunk::<8>()?;
                Some((Value::Unreadable(u64::from_le_bytes(*a)), rest))
            }
            h => {
                let len = (h & !CUT) as usize;
                let (s, rest) = rest.split_at_checked(len)?;
                Some((Value::Str(s, h & CUT != 0), rest))
            }
        }
    }

    /// The value cut to `item`'s size, sign-extended where the format is signed.
    pub fn integer(&self, item: &Item) -> i64 {
        let Value::Word(w) = *self else { return 0 };
        let bits = item.bytes as u32 * 8;
        let signed = matches!(item.format, Format::Auto | Format::Signed);
        match (bits, signed) {
            (64, _) => w as i64,
            (b, true) => ((w << (64 - b)) as i64) >> (64 - b),
            (b, false) => (w & ((1u64 << b) - 1)) as i64,
        }
    }

    /// The value as a floating-point number (`fpargN`, `/f`).
    pub fn float(&self, item: &Item) -> f64 {
        let Value::Word(w) = *self else { return 0.0 };
        match item.bytes {
            4 => f32::from_bits(w as u32) as f64,
            _ => f64::from_bits(w),
        }
    }

    /// Writes the value as uftrace's replay shows it.
    pub fn show(
        &self,
        item: &Item,
        out: &mut dyn Write,
        symbol: &mut dyn FnMut(u64, &mut dyn Write) -> bool,
    ) -> fmt::Result {
        match *self {
            Value::Null => return out.write_str("NULL"),
            Value::Unreadable(at) => return write!(out, "<unreadable {at:#x}>"),
            Value::Str(s, cut) => {
                out.write_char('"')?;
                for chunk in s.utf8_chunks() {
                    for c in chunk.valid().chars() {
                        match c {
                            '\0' => out.write_str("\\0")?,
                            '\u{8}' => out.write_str("\\b")?,
                            '\n' => out.write_str("\\n")?,
                            '"' => out.write_str("\\\"")?,
                            c => out.write_char(c)?,
                        }
                    }
                    for b in chunk.invalid() {
                        write!(out, "\\x{b:02x}")?;
                    }
                }
                if cut {
                    out.write_str("...")?;
                }
                return out.write_char('"');
            }
            Value::Word(_) => {}
        }
        let v = self.integer(item);
        let unsigned = v as u64 & mask(item.bytes);
        let hex = |out: &mut dyn Write, v: u64| match v {
            0 => out.write_char('0'),
            v => write!(out, "{v:#x}"),
        };
        match item.format {
            Format::Auto => {
                let w = v as u64;
                if item.bytes == 8 && w > 0xffff_0000 && w <= 0xffff_ffff {
                    // uftrace shows a small negative int passed in a 64-bit register as such.
                    write!(out, "{}", w as u32 as i32)
                } else if !(-100_000..=100_000).contains(&v) {
                    hex(out, unsigned)
                } else {
                    write!(out, "{v}")
                }
            }
            Format::Signed => write!(out, "{v}"),
            Format::Unsigned if unsigned > 100_000 => hex(out, unsigned),
            Format::Unsigned => write!(out, "{unsigned}"),
            Format::Hex => hex(out, unsigned),
            Format::Octal => match unsigned {
                0 => out.write_char('0'),
                o => write!(out, "0{o:o}"),
            },
            Format::Char => {
                out.write_char('\'')?;
                match unsigned as u8 {
                    0 => out.write_str("\\0")?,
                    8 => out.write_str("\\b")?,
                    b'\n' => out.write_str("\\n")?,
                    c => out.write_char(c as char)?,
                }
                out.write_char('\'')
            }
            Format::Float => write!(out, "{:.6}", self.float(item)),
            Format::Pointer => {
                let Value::Word(w) = *self else { return Ok(()) };
                if w == 0 {
                    return out.write_char('0');
                }
                let mut name = NameProbe { out, wrote: false };
                if symbol(w, &mut name) {
                    return Ok(());
                }
                write!(out, "{w:#x}")
            }
            Format::Str => Ok(()),
        }
    }
}

/// Writes `&` before a symbol's name, only once something is written.
struct NameProbe<'o> {
    out: &'o mut dyn Write,
    wrote: bool,
}

impl Write for NameProbe<'_> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        if !self.wrote {
            self.out.write_char('&')?;
            self.wrote = true;
        }
        self.out.write_str(s)
    }
}

fn mask(bytes: u8) -> u64 {
    match bytes {
        8 => u64::MAX,
        b => (1u64 << (b as u32 * 8)) - 1,
    }
}

/// Writes one string argument read from `at` into `out` as an event carries it (header, bytes);
/// `read(address, buffer)` reads what it can of the process's memory and returns how many bytes it
/// read (fewer at the end of a mapping, 0 when nothing there is readable). Returns the bytes
/// written.
pub fn put_string(at: u64, out: &mut [u8], read: impl FnOnce(u64, &mut [u8]) -> usize) -> usize {
    let header = |out: &mut [u8], h: u16| out[..2].copy_from_slice(&h.to_le_bytes());
    if at == 0 {
        header(out, NULL);
        return 2;
    }
    // One byte more than kept: a NUL there still means the string was whole.
    let mut buf = [0u8; MAX_STRING + 1];
    let n = read(at, &mut buf);
    if n == 0 {
        header(out, UNREADABLE);
        out[2..10].copy_from_slice(&at.to_le_bytes());
        return 10;
    }
    let read = &buf[..n];
    let (len, cut) = match read.iter().position(|&b| b == 0) {
        Some(len) => (len, false),
        // No NUL in what was readable: cut short, whether the string goes on or the mapping ends.
        None => (read.len().min(MAX_STRING), true),
    };
    let len = len.min(MAX_STRING);
    header(out, len as u16 | if cut { CUT } else { 0 });
    out[2..2 + len].copy_from_slice(&read[..len]);
    2 + len
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use std::string::{String, ToString};
    use std::vec::Vec;

    fn shown(spec: &str, values: &[u64]) -> String {
        let spec: Spec = spec.parse().unwrap();
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        let mut s = String::new();
        spec.show(&bytes, &mut s, &mut |_, _| false).unwrap();
        s
    }

    #[test]
    fn integers_show_as_uftrace_shows_them() {
        assert_eq!(shown("arg1,arg2", &[0, (-5i64) as u64]), "0, -5");
        assert_eq!(
            shown("arg1,arg2", &[0x7fff12345678, 123456]),
            "0x7fff12345678, 0x1e240"
        );
        assert_eq!(shown("arg1", &[0xffff_fffb]), "-5");
        assert_eq!(shown("arg1/x", &[14]), "0xe");
        assert_eq!(shown("arg1/x", &[0]), "0");
        assert_eq!(shown("arg1/i32", &[0x1_ffff_ffff]), "-1");
        assert_eq!(shown("arg1/u", &[200_000]), "0x30d40");
        assert_eq!(shown("arg1/u8", &[0x1ff]), "255");
        assert_eq!(shown("arg1/o", &[8]), "010");
        assert_eq!(shown("arg1/c", &[b'a' as u64]), "'a'");
        assert_eq!(shown("fparg1", &[3.0f64.to_bits()]), "3.000000");
        assert_eq!(shown("fparg1/f32", &[1.5f32.to_bits() as u64]), "1.500000");
    }

    #[test]
    fn the_c_library_table_parses() {
        for (name, args, retval) in LIBC {
            let args: Spec = args.parse().unwrap_or_else(|e| panic!("{name}: {e}"));
            let retval: Spec = retval.parse().unwrap_or_else(|e| panic!("{name}: {e}"));
            assert!(
                args.items().iter().all(|i| i.source != Source::Return),
                "{name}"
            );
            assert!(
                retval.items().iter().all(|i| i.source == Source::Return),
                "{name}"
            );
        }
    }

    #[test]
    fn register_only_specs_read_their_items_from_the_registers() {
        let spec: Spec = "arg3/x,arg1".parse().unwrap();
        assert!(spec.in_registers());
        assert_eq!((spec.register_pairs(), spec.register_bytes()), (2, 32));
        assert_eq!("arg1".parse::<Spec>().unwrap().register_pairs(), 1);
        assert_eq!("arg2,arg6".parse::<Spec>().unwrap().register_pairs(), 3);
        let regs: Vec<u8> = [10u64, 20, 0x30, 40]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        let mut s = String::new();
        spec.show(&regs, &mut s, &mut |_, _| false).unwrap();
        assert_eq!(s, "0x30, 10");
        let ret: Spec = "retval/f".parse().unwrap();
        assert!(ret.in_registers());
        assert_eq!(ret.register_bytes(), 16);
        let exit: Vec<u8> = [7u64, 2.5f64.to_bits()]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        let mut s = String::new();
        ret.show(&exit, &mut s, &mut |_, _| false).unwrap();
        assert_eq!(s, "2.500000");
        for packed in ["arg1/s", "arg7", "fparg1", "retval/s", "arg1,arg2/s"] {
            assert!(!packed.parse::<Spec>().unwrap().in_registers(), "{packed}");
        }
    }

    #[test]
    fn strings_are_read_within_bounds_and_say_when_they_were_not_whole() {
        let mut out = [0u8; 2 + MAX_STRING];
        let n = put_string(0x1000, &mut out, |_, b| {
            b[..4].copy_from_slice(b"abc\0");
            4
        });
        let spec: Spec = "arg1/s".parse().unwrap();
        let show = |b: &[u8]| {
            let mut s = String::new();
            spec.show(b, &mut s, &mut |_, _| false).unwrap();
            s
        };
        assert_eq!(show(&out[..n]), "\"abc\"");
        let n = put_string(0, &mut out, |_, _| unreachable!());
        assert_eq!(show(&out[..n]), "NULL");
        let n = put_string(0x10, &mut out, |_, _| 0);
        assert_eq!(show(&out[..n]), "<unreadable 0x10>");
        let n = put_string(0x1000, &mut out, |_, b| {
            b.fill(b'x');
            b.len()
        });
        assert_eq!(n, 2 + MAX_STRING);
        assert!(show(&out[..n]).ends_with("xxx...\""));
        // A mapping that ends before the NUL: what was readable, marked cut.
        let n = put_string(0x1000, &mut out, |_, b| {
            b[..2].copy_from_slice(b"hi");
            2
        });
        assert_eq!(show(&out[..n]), "\"hi...\"");
    }

    #[test]
    fn specs_parse_in_uftraces_spelling_and_print_back_canonically() {
        let o = ArgOption::parse("a@b@arg1/s,arg2/x32,fparg1/f32,arg7").unwrap();
        assert_eq!(o.pattern, "a@b");
        assert_eq!(o.spec.to_string(), "arg1/s,arg2/x32,fparg1/f32,arg7");
        assert_eq!(o.is_retval(), Ok(false));
        let r = ArgOption::parse("f@retval/f").unwrap();
        assert_eq!(r.is_retval(), Ok(true));
        assert!(r.spec.items()[0].in_vector_register());
        assert_eq!(
            "arg1/d,fparg2/f64".parse::<Spec>().unwrap().to_string(),
            "arg1,fparg2"
        );
        for bad in [
            "f",
            "@arg1",
            "f@",
            "f@arg0",
            "f@arg17",
            "f@fparg9",
            "f@arg1/z",
            "f@arg1/s32",
            "f@arg1/i12",
            "f@fparg1/x",
            "f@arg1%rdi",
        ] {
            assert!(ArgOption::parse(bad).is_err(), "{bad}");
        }
        assert!(ArgOption::parse("f@arg1,retval")
            .unwrap()
            .is_retval()
            .is_err());
        let mut s = Spec::default();
        s.merge(&"arg1/x,arg2".parse().unwrap()).unwrap();
        s.merge(&"arg1/s,arg3".parse().unwrap()).unwrap();
        assert_eq!(s.to_string(), "arg1/x,arg2,arg3");
        assert_eq!(s.max_bytes(), 24);
        let e = ArgOption::parse("f@arg1/z").unwrap_err().to_string();
        assert!(e.contains("d, i, u, x"), "{e}");
    }
}
