//! The crate is what it says for embedders: built as a `staticlib`, it needs nothing at link time but
//! the C memory functions (the undefined symbols of the whole archive, less what the archive itself
//! defines) and carries no `std` or `alloc`; the same archive holds ferrotrace-core, so core builds
//! `no_std` too (no other target is installed here: the proof is on the host target).
//!
//! Symbols are read with `readelf -s` rather than `nm -u`: the archive's `core` members carry LLVM
//! bitcode that the installed `nm`s (GNU with its LTO plugin, LLVM 14 and 16) refuse or skip, and a
//! member that is skipped would hide what it defines.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

fn cargo() -> Command {
    let mut c = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    for var in [
        "RUSTFLAGS",
        "CARGO_ENCODED_RUSTFLAGS",
        "CARGO_TARGET_DIR",
        "RUSTC_WRAPPER",
    ] {
        c.env_remove(var);
    }
    c.current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."));
    c
}

fn run(c: &mut Command) -> String {
    let out = c.output().expect("run");
    assert!(
        out.status.success(),
        "{c:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The C functions the crate's docs list: on `x86_64-unknown-linux-gnu` the precompiled `core` calls
/// the memory functions and `compiler_builtins` does not define them (on `-none` targets it does), and
/// LLVM may turn a loop that looks for a NUL byte into `strlen`; a freestanding program defines them
/// (testprogs/freestanding does), as any C embedder's libc or kernel has them.
const EMBEDDER_SUPPLIES: [&str; 6] = ["memcpy", "memmove", "memset", "memcmp", "bcmp", "strlen"];

/// The global symbols of `archive`'s members: (undefined, defined).
fn symbols(archive: &Path) -> (BTreeSet<String>, BTreeSet<String>) {
    let table = run(Command::new("readelf").args(["-sW"]).arg(archive));
    let (mut undefined, mut defined) = (BTreeSet::new(), BTreeSet::new());
    for line in table.lines() {
        // Num: Value Size Type Bind Vis Ndx Name
        let cols: Vec<&str> = line.split_whitespace().collect();
        if cols.len() < 8 || !matches!(cols[4], "GLOBAL" | "WEAK") {
            continue;
        }
        let name = cols[7].to_string();
        if cols[6] == "UND" {
            undefined.insert(name);
        } else {
            defined.insert(name);
        }
    }
    (undefined, defined)
}

#[test]
fn staticlib_needs_nothing_at_link_time_and_holds_no_std() {
    let target = Path::new(env!("CARGO_TARGET_TMPDIR")).join("embedded-staticlib");
    run(cargo()
        .args(["--config", "profile.release.panic=\"abort\""])
        .args(["rustc", "--quiet", "--release", "-p", "ferrotrace-embedded"])
        .args([
            "--features",
            "panic-handler",
            "--crate-type",
            "staticlib",
            "--target-dir",
        ])
        .arg(&target));
    let archive = target.join("release/libferrotrace_embedded.a");

    let (undefined, defined) = symbols(&archive);
    let needed: Vec<&str> = undefined.difference(&defined).map(String::as_str).collect();
    assert!(
        needed.iter().all(|n| EMBEDDER_SUPPLIES.contains(n)),
        "the staticlib needs {needed:?}, not only what its embedder is documented to supply"
    );
    for hook in [
        "mcount",
        "__fentry__",
        "ferrotrace_embedded_enter",
        "ferrotrace_embedded_exit",
    ] {
        assert!(defined.contains(hook), "{hook} is not defined");
    }

    let members = run(Command::new("ar").arg("t").arg(&archive));
    let crates: BTreeSet<&str> = members
        .lines()
        .filter_map(|m| m.split(['-', '.']).next())
        .collect();
    for forbidden in ["std", "alloc", "libc"] {
        assert!(
            !crates.contains(forbidden),
            "{forbidden} is linked in: {crates:?}"
        );
    }
    assert!(crates.contains("ferrotrace_core"), "{crates:?}");

    // What cargo resolves for the crate (normal dependencies only): ferrotrace-core and what it needs.
    for package in ["ferrotrace-embedded", "ferrotrace-core"] {
        let tree = run(cargo().args(["tree", "-e", "normal", "--prefix", "none", "-p", package]));
        let names: BTreeSet<&str> = tree
            .lines()
            .filter_map(|l| l.split_whitespace().next())
            .collect();
        let expected: BTreeSet<&str> = [
            "ferrotrace-embedded",
            "ferrotrace-core",
            "crc32fast",
            "cfg-if",
        ]
        .into_iter()
        .filter(|n| package == "ferrotrace-embedded" || *n != "ferrotrace-embedded")
        .collect();
        assert_eq!(names, expected, "{tree}");
    }
}
