//! Compiles the BPF programs (src/bpf/*.bpf.c) with clang and generates their libbpf-rs skeleton.
//! The compiler is `$BPF_CLANG`, else clang-16 (what scripts/setup.sh installs), else clang.

use std::path::PathBuf;

fn main() {
    let src = "src/bpf/profile.bpf.c";
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("OUT_DIR set by cargo"));
    let clang = std::env::var_os("BPF_CLANG")
        .map(PathBuf::from)
        .or_else(|| which("clang-16"))
        .or_else(|| which("clang"))
        .unwrap_or_else(|| {
            panic!("no clang to compile {src}: run scripts/setup.sh (installs clang-16) or set BPF_CLANG")
        });
    libbpf_cargo::SkeletonBuilder::new()
        .source(src)
        .clang(&clang)
        .clang_args(["-O2", "-g", "-Wall", "-Werror"])
        .build_and_generate(out.join("profile.skel.rs"))
        .unwrap_or_else(|e| panic!("compiling {src} with {}: {e:#}", clang.display()));
    println!("cargo:rerun-if-changed={src}");
    println!("cargo:rerun-if-env-changed=BPF_CLANG");
}

fn which(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join(name))
            .find(|p| p.is_file())
    })
}
