//! The portable fallback (what the crate is on targets other than x86_64 Linux), built and run on this
//! machine: `RUSTFLAGS='--cfg ferrotrace_portable_check'` selects it on x86_64 Linux too (see build.rs), so
//! this test needs no other rustup target. It builds `examples/api.rs` that way, with warnings as errors,
//! and checks that tracepoints compiled to nothing and the runtime's functions do nothing.

use std::path::Path;
use std::process::Command;

use ferrotrace_core::env;
use object::{Object, ObjectSymbol};

#[test]
fn the_portable_fallback_builds_without_warnings_and_does_nothing() {
    let target_dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("portable-check");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let out = Command::new(cargo)
        .args(["build", "--quiet", "-p", "ferrotrace", "--example", "api"])
        .arg("--target-dir")
        .arg(&target_dir)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env("RUSTFLAGS", "--cfg ferrotrace_portable_check -D warnings")
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .env_remove("CARGO_BUILD_RUSTFLAGS")
        .output()
        .expect("run cargo");
    assert!(
        out.status.success(),
        "the portable build failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let exe = target_dir.join("debug/examples/api");

    // Asked to trace, it neither records nor writes anything.
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("portable-run");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let run = Command::new(&exe)
        .env(env::TRACE, "*")
        .env(env::RUNTIME, env::RUNTIME_LINKED)
        .env(env::OUTPUT, dir.join("trace.data"))
        .output()
        .unwrap();
    assert!(run.status.success());
    assert_eq!(
        String::from_utf8_lossy(&run.stdout),
        "enabled=0 disabled=0 evaluated=0 recording=false\n"
    );
    assert!(
        run.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    assert!(!dir.join("trace.data").exists());

    // No site, descriptor or probe made it into the program, and no runtime either.
    let bytes = std::fs::read(&exe).unwrap();
    let elf = object::File::parse(&*bytes).unwrap();
    for section in [
        "ferrotrace_sites",
        "ferrotrace_tp",
        ".note.stapsdt",
        ".probes",
    ] {
        assert!(
            elf.section_by_name(section).is_none(),
            "{section} in {}",
            exe.display()
        );
    }
    assert!(!elf
        .symbols()
        .any(|s| s.name() == Ok(env::LINKED_RUNTIME_MARKER)));
}
