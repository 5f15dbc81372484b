//! Which functions belong to the tracer itself, and (feature `std`) the name users see of any function,
//! [`display_name`].
//!
//! A program built with `-Zinstrument-xray=always` that links the ferrotrace runtime has sleds in the
//! runtime's own functions; patching them would make the tracer trace itself (recursion). The runtime
//! never patches them and `ferrotrace list` never lists them. They are recognised by what they are,
//! never by the names of the libraries the runtime happens to use (a program's own calls into
//! `regex_lite` or `crossbeam_queue` are the program's):
//!
//! * functions of the runtime's crates, `ferrotrace` and `ferrotrace_core`: defined in them, or generic
//!   functions they instantiated or that are instantiated with their types. A Rust v0 symbol names every
//!   crate it involves (the defining crate, the crates of the generic arguments, and, as its last part,
//!   the crate that instantiated a generic function), each first by its crate-root production `C`, later
//!   only by back-references: [`is_runtime_symbol`] looks for those productions;
//! * the tracepoint plumbing that `ferrotrace::tracepoint!` expands inside the program's own crates: it
//!   is placed in its own section, [`PLUMBING_SECTION`], and recognised by address;
//! * in a program traced through `LD_PRELOAD`, the runtime is another object (`libferrotrace_preload.so`),
//!   which the runtime skips as a whole;
//! * in an object that links `ferrotrace-tracing` (the `tracing` layer: [`links_span_recorder`]), the
//!   functions of the crates a span goes through to reach it (`tracing`, `tracing_core`,
//!   `tracing_subscriber`, `ferrotrace_tracing`: [`is_span_path_symbol`]). A span's entry is recorded
//!   inside `Span::enter` → `Dispatch::enter` → `Layered::enter` → the layer, whose exits follow it:
//!   traced, they would close around the span they opened it in, instead of the span sitting between
//!   the functions that entered and left it.

use core::ops::Range;

/// The name users see of a function whose symbol is `mangled`, and what the `-F`/`-N` filters match:
/// Rust v0 and legacy symbols demangled without their hash (`{:#}`), C++ (Itanium ABI) as `c++filt`
/// and perf show it, anything else as it is. The one
/// rule for the runtime's filters and every view of the analysis, so that what `-F` matches is what
/// `report` prints.
///
/// ```
/// use ferrotrace_core::symbols::display_name;
///
/// assert_eq!(display_name("_ZN3fib3fib17h0123456789abcdefE"), "fib::fib");
/// assert_eq!(display_name("main"), "main");
/// assert_eq!(display_name("_ZN3app6Worker5churnEi"), "app::Worker::churn(int)");
/// ```
#[cfg(feature = "std")]
pub fn display_name(mangled: &str) -> std::string::String {
    if let Ok(rust) = rustc_demangle::try_demangle(mangled) {
        return std::format!("{rust:#}");
    }
    // C++ (Itanium ABI), as perf and c++filt show it: `app::Worker::churn(int)`.
    let cpp = mangled
        .starts_with("_Z")
        .then(|| cpp_demangle::Symbol::new(mangled).ok())
        .flatten()
        .and_then(|s| s.demangle(&cpp_demangle::DemangleOptions::default()).ok());
    cpp.unwrap_or_else(|| mangled.into())
}

/// The section that holds the functions `ferrotrace::tracepoint!` expands in the program's own crates.
pub const PLUMBING_SECTION: &str = "ferrotrace_text";

/// The crates of the runtime, as they appear in symbols.
const RUNTIME_CRATES: [&str; 2] = ["ferrotrace", "ferrotrace_core"];

/// What is the tracer's own in one object (see the module's documentation), for the runtime's
/// discovery and `ferrotrace list` alike.
#[derive(Clone, Debug, Default)]
pub struct OwnFunctions {
    /// The link-time address range of the object's [`PLUMBING_SECTION`], if it has one.
    pub plumbing: Option<Range<u64>>,
    /// The object links `ferrotrace-tracing` ([`links_span_recorder`]).
    pub records_spans: bool,
}

impl OwnFunctions {
    /// True when the function at link-time address `vaddr`, whose symbol is `mangled`, is the
    /// tracer's own: a function of the runtime's crates ([`is_runtime_symbol`]), in the plumbing
    /// section, or on a span's path to the layer ([`is_span_path_symbol`]) when the object records
    /// spans.
    pub fn contains(&self, mangled: &str, vaddr: u64) -> bool {
        self.plumbing.as_ref().is_some_and(|r| r.contains(&vaddr))
            || is_runtime_symbol(mangled)
            || (self.records_spans && is_span_path_symbol(mangled))
    }
}

/// The crates a `tracing` span goes through from the program to `ferrotrace-tracing`'s layer.
const SPAN_PATH_CRATES: [&str; 4] = [
    "tracing",
    "tracing_core",
    "tracing_subscriber",
    "ferrotrace_tracing",
];

/// True when an object whose symbols are `names` links `ferrotrace-tracing`: one of them names the
/// crate (its length-prefixed name is in every v0 and legacy symbol of its functions).
pub fn links_span_recorder<'a>(mut names: impl Iterator<Item = &'a str>) -> bool {
    names.any(|n| names_span_recorder(n.as_bytes()))
}

/// True when the (mangled) symbol `name` names a function of `ferrotrace-tracing`
/// ([`links_span_recorder`] for one name, as bytes).
pub fn names_span_recorder(name: &[u8]) -> bool {
    const CRATE: &[u8] = b"18ferrotrace_tracing";
    name.windows(CRATE.len()).any(|w| w == CRATE)
}

/// True for a (mangled) symbol of a crate a `tracing` span goes through to reach `ferrotrace-tracing`
/// (defined in it, or a generic function instantiated by it or for its types), like
/// [`is_runtime_symbol`] for the runtime's crates.
///
/// ```
/// use ferrotrace_core::symbols::is_span_path_symbol;
/// // `<tracing::span::Span>::enter`
/// assert!(is_span_path_symbol("_RNvMs5_NtCs1_7tracing4spanNtB5_4Span5enter"));
/// // `<tracing::instrument::Instrumented<myapp::serve::{closure#0}> as Future>::poll`
/// assert!(is_span_path_symbol(
///     "_RNvXs2_NtCs1_7tracing10instrumentINtB5_12InstrumentedNCNvCs2_5myapp5serve0ENtNtNtCs3_4core6future6future6Future4poll"
/// ));
/// // The program's own function, and a crate whose name merely starts alike.
/// assert!(!is_span_path_symbol("_RNvCs2_5myapp5serve"));
/// assert!(!is_span_path_symbol("_RNvCs2_14tracing_chrome5flush"));
/// ```
pub fn is_span_path_symbol(mangled: &str) -> bool {
    names_any_crate(mangled, &SPAN_PATH_CRATES)
}

/// True for a (mangled) symbol of the runtime's crates: defined in `ferrotrace` or `ferrotrace_core`, or
/// a generic function instantiated by them or for their types.
///
/// ```
/// use ferrotrace_core::symbols::is_runtime_symbol;
/// // Defined in the runtime.
/// assert!(is_runtime_symbol("_RNvNtCs1234_10ferrotrace6thread9slow_path"));
/// // `<crossbeam_queue::ArrayQueue<ferrotrace::pool::FullChunk>>::push`: instantiated for the runtime.
/// assert!(is_runtime_symbol(
///     "_RNvMs_NtCs9_15crossbeam_queue11array_queueINtB4_10ArrayQueueNtNtCs1234_10ferrotrace4pool9FullChunkE4pushB1a_"
/// ));
/// // `<alloc::vec::Vec<u8>>::push`, instantiated by ferrotrace_core (the suffix names the crate).
/// assert!(is_runtime_symbol("_RNvMNtCs7_5alloc3vecINtB2_3VechE4pushCs55_15ferrotrace_core"));
/// // The program's own use of the same library is the program's.
/// assert!(!is_runtime_symbol(
///     "_RNvMs_NtCs9_15crossbeam_queue11array_queueINtB4_10ArrayQueuemE4pushCs5678_5myapp"
/// ));
/// assert!(!is_runtime_symbol("_RNvMs4_NtCs9_10regex_lite5regexNtB5_5Regex8is_match"));
/// assert!(!is_runtime_symbol("_RNvCs5678_14my_ferrotrace5parse"));
/// // Legacy mangling names the defining crate (and the types of an impl) only.
/// assert!(is_runtime_symbol("_ZN10ferrotrace6thread9slow_path17h0123456789abcdefE"));
/// assert!(!is_runtime_symbol("_ZN6object4read3elf4File5parse17h0123456789abcdefE"));
/// ```
pub fn is_runtime_symbol(mangled: &str) -> bool {
    names_any_crate(mangled, &RUNTIME_CRATES)
}

/// True when the (mangled) symbol names one of `crates` (see [`is_runtime_symbol`]).
fn names_any_crate(mangled: &str, crates: &[&str]) -> bool {
    let name = mangled.as_bytes();
    if let Some(v0) = name.strip_prefix(b"_R") {
        crates.iter().any(|c| v0_names_crate(v0, c.as_bytes()))
    } else if let Some(legacy) = name.strip_prefix(b"_ZN") {
        legacy_first_component(legacy).is_some_and(|first| {
            crates
                .iter()
                .any(|c| legacy_component_names_crate(first, c.as_bytes()))
        })
    } else {
        false
    }
}

/// True when the v0 symbol body `sym` contains the crate-root production of `krate`:
/// `C [s <base-62 disambiguator> _] <decimal length> <name>`.
fn v0_names_crate(sym: &[u8], krate: &[u8]) -> bool {
    (0..sym.len()).any(|i| {
        if sym[i] != b'C' {
            return false;
        }
        let mut j = i + 1;
        if sym.get(j) == Some(&b's') {
            j += 1;
            while sym.get(j).is_some_and(u8::is_ascii_alphanumeric) {
                j += 1;
            }
            if sym.get(j) != Some(&b'_') {
                return false;
            }
            j += 1;
        }
        let digits = sym[j..].iter().take_while(|b| b.is_ascii_digit()).count();
        let len = core::str::from_utf8(&sym[j..j + digits])
            .ok()
            .and_then(|d| d.parse::<usize>().ok());
        len == Some(krate.len()) && sym[j + digits..].starts_with(krate)
    })
}

/// The first `<length><bytes>` component of a legacy (`_ZN…E`) symbol body.
fn legacy_first_component(body: &[u8]) -> Option<&[u8]> {
    let digits = body.iter().take_while(|b| b.is_ascii_digit()).count();
    let len: usize = core::str::from_utf8(&body[..digits]).ok()?.parse().ok()?;
    body.get(digits..digits + len)
}

/// True when a legacy path component is the crate itself, or an impl header (`<T as Trait>`, escaped as
/// `_$LT$…$GT$` with `..` for `::`) whose type or trait path starts at the crate.
fn legacy_component_names_crate(component: &[u8], krate: &[u8]) -> bool {
    if component == krate {
        return true;
    }
    (1..component.len()).any(|i| {
        component[i..].starts_with(krate)
            && component[i + krate.len()..].starts_with(b"..")
            && component[i - 1] == b'$'
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plumbing_is_recognised_by_address() {
        let own = OwnFunctions {
            plumbing: Some(0x5000..0x6000),
            records_spans: false,
        };
        assert!(own.contains("_RNvNtCs1_5myapp8vfs_open20__ferrotrace_tp_fire", 0x5010));
        assert!(!own.contains("_RNvCs1_5myapp4main", 0x6000));
        assert!(!OwnFunctions::default().contains("_RNvCs1_5myapp4main", 0x5010));
    }

    #[test]
    fn the_span_path_is_the_tracers_own_only_where_spans_are_recorded() {
        let enter = "_RNvMs5_NtCs1_7tracing4spanNtB5_4Span5enter";
        let names = [
            "_RNvCs2_5myapp4main",
            "_RNvXCs9_18ferrotrace_tracingNtB2_5Layer8on_enter",
        ];
        assert!(!links_span_recorder(names[..1].iter().copied()));
        let own = OwnFunctions {
            plumbing: None,
            records_spans: links_span_recorder(names.iter().copied()),
        };
        assert!(own.contains(enter, 0));
        assert!(!OwnFunctions::default().contains(enter, 0));
    }

    #[test]
    fn legacy_impl_headers_name_their_crate() {
        // <ferrotrace::pool::FullChunk as core::fmt::Debug>::fmt
        assert!(is_runtime_symbol(
            "_ZN64_$LT$ferrotrace..pool..FullChunk$u20$as$u20$core..fmt..Debug$GT$3fmt17h0123456789abcdefE"
        ));
        // <my_ferrotrace::X as core::fmt::Debug>::fmt
        assert!(!is_runtime_symbol(
            "_ZN53_$LT$my_ferrotrace..X$u20$as$u20$core..fmt..Debug$GT$3fmt17h0123456789abcdefE"
        ));
    }
}
