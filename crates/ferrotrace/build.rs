//! Selects what the crate compiles to (`cfg(ferrotrace_runtime)`): the runtime on x86_64 Linux, the
//! portable fallback (tracepoints compile to nothing, no runtime) everywhere else, and also on x86_64
//! Linux under `RUSTFLAGS='--cfg ferrotrace_portable_check'`, which is how the fallback is built and tested
//! on the development machine (`crates/ferrotrace/tests/portable.rs`). Cargo.toml's target-specific
//! dependencies use the same condition.
fn main() {
    println!("cargo::rustc-check-cfg=cfg(ferrotrace_runtime)");
    println!("cargo::rustc-check-cfg=cfg(ferrotrace_portable_check)");
    let var = |name: &str| std::env::var(name).unwrap_or_default();
    let runtime_target =
        var("CARGO_CFG_TARGET_ARCH") == "x86_64" && var("CARGO_CFG_TARGET_OS") == "linux";
    if runtime_target && std::env::var_os("CARGO_CFG_FERROTRACE_PORTABLE_CHECK").is_none() {
        println!("cargo::rustc-cfg=ferrotrace_runtime");
    }
}
