// No C runtime, no C library: the program brings its own `_start` and makes its own system calls. Its
// C part (src/cfib.c) is built with gcc -pg -mfentry, so that it calls `__fentry__`.
use std::path::PathBuf;
use std::process::Command;

fn main() {
    for arg in ["-nostartfiles", "-nostdlib", "-static", "-no-pie"] {
        println!("cargo:rustc-link-arg-bins={arg}");
    }
    let obj = PathBuf::from(std::env::var_os("OUT_DIR").expect("OUT_DIR")).join("cfib.o");
    let status = Command::new("gcc")
        .args([
            "-O2",
            "-pg",
            "-mfentry",
            "-fno-pic",
            "-ffreestanding",
            "-fno-stack-protector",
        ])
        .args([
            "-fno-optimize-sibling-calls",
            "-g",
            "-c",
            "src/cfib.c",
            "-o",
        ])
        .arg(&obj)
        .status()
        .expect("gcc (scripts/setup.sh installs it)");
    assert!(status.success(), "gcc failed on src/cfib.c");
    println!("cargo:rustc-link-arg-bins={}", obj.display());
    println!("cargo:rerun-if-changed=src/cfib.c");
}
