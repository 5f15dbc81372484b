//! Which symbols belong to the tracer itself.
//!
//! A program built with `-Zinstrument-xray=always` that links the ferrotrace runtime has sleds in the
//! runtime's own functions and in the crates it uses; patching them would make the tracer trace itself
//! (recursion). The runtime never patches them and `ferrotrace list` never lists them.

/// Length-prefixed crate names as they appear in mangled symbols (v0 names carry the instantiating crate
/// too, so generic code instantiated for the runtime is caught as well).
const RUNTIME_CRATES: &[&str] = &[
    "10ferrotrace",
    "15ferrotrace_core",
    "14crossbeam_queue",
    "10regex_lite",
    "14rustc_demangle",
    "9crc32fast",
    "_6object",
];

/// True for a (mangled) symbol of the tracer or of the crates it runs: never traced.
///
/// ```
/// use ferrotrace_core::symbols::is_runtime_symbol;
/// assert!(is_runtime_symbol("_RNvNtCs1234_10ferrotrace6thread9slow_path"));
/// assert!(is_runtime_symbol("__xray_FunctionEntry"));
/// assert!(!is_runtime_symbol("_RNvCs5678_5myapp5parse"));
/// ```
pub fn is_runtime_symbol(name: &str) -> bool {
    name.starts_with("__xray")
        || name.contains("__ferrotrace_tp_fire")
        || RUNTIME_CRATES.iter().any(|c| name.contains(c))
}
