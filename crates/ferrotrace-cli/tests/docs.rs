//! Documentation that can be checked cheaply against what is built: the help texts' lists of dump
//! formats come from the registry (`ferrotrace_analysis::dump::FORMATS`), and every file the crate
//! table of docs/architecture.md names exists.

use std::path::{Path, PathBuf};
use std::process::Command;

use ferrotrace_analysis::dump::{Samples, FORMATS};

fn help(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_ferrotrace"))
        .args(args)
        .output()
        .expect("ferrotrace runs");
    assert!(out.status.success(), "{args:?}");
    String::from_utf8(out.stdout).expect("utf-8 help")
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `ferrotrace --help` lists every registered format on dump's line, in the registry's order; `dump
/// --help` offers each as a `--format` value with its line; `profile --help` names those that write
/// samples.
#[test]
fn help_texts_list_the_registered_formats() {
    let names: Vec<&str> = FORMATS.iter().map(|f| f.name()).collect();
    assert!(names.contains(&"parquet"), "{names:?}");
    let top = help(&["--help"]);
    let dump_line = top
        .lines()
        .find(|l| l.trim_start().starts_with("dump "))
        .unwrap_or_else(|| panic!("no dump line in:\n{top}"));
    assert!(
        dump_line.trim_end().ends_with(&names.join(", ")),
        "{dump_line}"
    );
    assert!(!top.contains("XRay-instrumented Rust"), "{top}");
    let dump = help(&["dump", "--help"]);
    for f in FORMATS {
        assert!(
            dump.lines()
                .any(|l| l.trim_start().starts_with(&format!("- {}:", f.name()))
                    && l.contains(f.about())),
            "{} missing from dump --help:\n{dump}",
            f.name()
        );
    }
    let profile = help(&["profile", "--help"]);
    let samples: Vec<&str> = FORMATS
        .iter()
        .filter(|f| f.writes_samples() != Samples::Never)
        .map(|f| f.name())
        .collect();
    assert!(
        profile.contains(&samples.join(", ")),
        "{samples:?}:\n{profile}"
    );
}

/// The files named in one row of the crate table: `a.rs`-like paths, `dir/` folders and the
/// `dir/{a,b (what b is),c}` groups, as paths relative to the crate.
fn named_files(row: &str) -> Vec<String> {
    let mut out = Vec::new();
    let path = regex_lite::Regex::new(r"`([A-Za-z0-9_./-]+(?:\.rs|\.c|/))`").unwrap();
    for c in path.captures_iter(row) {
        out.push(c[1].to_string());
    }
    let group = regex_lite::Regex::new(r"`([A-Za-z0-9_/]+)/\{").unwrap();
    for c in group.captures_iter(row) {
        let dir = &c[1];
        let rest = &row[c.get(0).unwrap().end()..];
        // The leading name of each top-level item, up to the group's closing brace.
        let (mut depth, mut item) = (0, String::new());
        for ch in rest.chars() {
            match ch {
                '(' => depth += 1,
                ')' => depth -= 1,
                ',' | '}' if depth == 0 => {
                    let name: String = item
                        .trim()
                        .chars()
                        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                        .collect();
                    if !name.is_empty() {
                        out.push(format!("{dir}/{name}.rs"));
                    }
                    item.clear();
                    if ch == '}' {
                        break;
                    }
                }
                _ if depth == 0 => item.push(ch),
                _ => {}
            }
        }
    }
    out
}

fn exists_in(crate_dir: &Path, name: &str) -> bool {
    if crate_dir.join(name).exists() || crate_dir.join("src").join(name).exists() {
        return true;
    }
    // A file named by its path within a room (`xray.rs` of `arch/x86_64/`): anywhere under src/.
    fn walk(dir: &Path, name: &str) -> bool {
        std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .flatten()
            .any(|e| {
                let p = e.path();
                if p.is_dir() {
                    p.join(name).exists() || walk(&p, name)
                } else {
                    false
                }
            })
    }
    walk(&crate_dir.join("src"), name.trim_end_matches('/'))
}

/// Every file and folder the crate table of docs/architecture.md names exists in its crate.
#[test]
fn crate_table_names_only_files_that_exist() {
    let doc =
        std::fs::read_to_string(repo().join("docs/architecture.md")).expect("architecture.md");
    let rows: Vec<&str> = doc
        .lines()
        .filter(|l| l.starts_with("| `crates/"))
        .collect();
    assert!(rows.len() >= 10, "the crate table has a row per crate");
    let mut checked = 0;
    let mut missing = Vec::new();
    for row in rows {
        let krate = row.split('`').nth(1).expect("the crate's path");
        let dir = repo().join(krate);
        assert!(dir.join("Cargo.toml").exists(), "{krate} is not a crate");
        for name in named_files(row) {
            checked += 1;
            if !exists_in(&dir, &name) {
                missing.push(format!("{krate}: {name}"));
            }
        }
    }
    assert!(
        checked > 40,
        "only {checked} names found: is the parser still right?"
    );
    assert!(missing.is_empty(), "named but missing: {missing:?}");
}

#[test]
fn the_table_parser_reads_groups_and_paths() {
    let row = "| `crates/x` | `a.rs`, `reader/`, `dump/{mod (the `Exporter`, x),walk,one_pass (a, b)}`, `hot` |";
    assert_eq!(
        named_files(row),
        [
            "a.rs",
            "reader/",
            "dump/mod.rs",
            "dump/walk.rs",
            "dump/one_pass.rs"
        ]
    );
}
