// Builds the XRay shared library that `uselib` links against, with the same compiler and flags.
use std::process::Command;

fn main() {
    let out = std::env::var("OUT_DIR").expect("OUT_DIR");
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let flags = std::env::var("CARGO_ENCODED_RUSTFLAGS").unwrap_or_default();
    let status = Command::new(rustc)
        .args(flags.split('\x1f').filter(|f| !f.is_empty()))
        .args([
            "--edition",
            "2021",
            "--crate-type",
            "cdylib",
            "--crate-name",
            "ft_xlib",
            "-O",
            "-g",
            "--out-dir",
            &out,
        ])
        .arg("xlib/src/lib.rs")
        .status()
        .expect("rustc");
    assert!(status.success(), "building xlib failed");
    println!("cargo:rustc-link-search=native={out}");
    println!("cargo:rustc-env=FT_XLIB_PATH={out}/libft_xlib.so");
    println!("cargo:rustc-link-arg-bin=uselib=-Wl,-rpath,{out}");
    println!("cargo:rerun-if-changed=xlib/src/lib.rs");
}
