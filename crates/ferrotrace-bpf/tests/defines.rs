//! The numbers the BPF program (`src/bpf/profile.bpf.c`) and the Rust side must agree on, read from
//! the C source and compared with the constants and enums the loader, the table builder and the
//! trace's `UnwindStops` reasons use: one list in effect, though written in two languages (a
//! truncation bit or a CFA kind changed on one side only fails here, not in a trace).

use std::collections::HashMap;

use ferrotrace_bpf::tables::{CfaKind, RbpKind, PAGE_SHIFT};
use ferrotrace_bpf::{trunc, MAX_DEPTH, MAX_MAPPINGS, MAX_PAGES, MAX_ROWS};

/// `#define NAME VALUE` lines of the C source whose value is a number, `(1U << N)` or `0x..U`.
fn defines() -> HashMap<String, u64> {
    let source = include_str!("../src/bpf/profile.bpf.c");
    source
        .lines()
        .filter_map(|line| {
            let mut words = line.strip_prefix("#define ")?.split_whitespace();
            let name = words.next()?;
            let value = words.next()?;
            let value = value.trim_end_matches('U');
            let number = if value == "(1" {
                // `(1U << N)` splits as "(1U", "<<", "N)".
                let n: u32 = words.nth(1)?.trim_end_matches(')').parse().ok()?;
                1u64 << n
            } else if let Some(hex) = value.strip_prefix("0x") {
                u64::from_str_radix(hex, 16).ok()?
            } else {
                value.parse().ok()?
            };
            Some((name.to_string(), number))
        })
        .collect()
}

#[test]
fn the_c_program_and_the_rust_side_use_the_same_numbers() {
    let c = defines();
    let expected: [(&str, u64); 21] = [
        ("TRUNC_NO_PROCESS", trunc::NO_PROCESS.into()),
        ("TRUNC_NO_MAPPING", trunc::NO_MAPPING.into()),
        ("TRUNC_READ", trunc::READ.into()),
        ("TRUNC_DEPTH", trunc::DEPTH.into()),
        ("TRUNC_UNSUPPORTED", trunc::UNSUPPORTED.into()),
        ("TRUNC_BAD_FP", trunc::BAD_FP.into()),
        ("TRUNC_MASK", trunc::ANY.into()),
        ("WALKED_FP", trunc::WALKED_FP.into()),
        ("MAX_DEPTH", MAX_DEPTH as u64),
        ("MAX_MAPPINGS", MAX_MAPPINGS as u64),
        ("MAX_ROWS", MAX_ROWS as u64),
        ("MAX_PAGES", MAX_PAGES as u64),
        ("PAGE_SHIFT", PAGE_SHIFT.into()),
        ("CFA_NONE", CfaKind::None as u64),
        ("CFA_RSP", CfaKind::Rsp as u64),
        ("CFA_RBP", CfaKind::Rbp as u64),
        ("CFA_PLT", CfaKind::Plt as u64),
        ("CFA_END", CfaKind::End as u64),
        ("CFA_UNSUPPORTED", CfaKind::Unsupported as u64),
        ("RBP_SAME", RbpKind::Same as u64),
        ("RBP_AT_CFA", RbpKind::AtCfa as u64),
    ];
    for (name, rust) in expected {
        assert_eq!(c.get(name), Some(&rust), "{name}: C and Rust differ");
    }
    assert_eq!(c.get("RBP_UNKNOWN"), Some(&(RbpKind::Unknown as u64)));
    // Every truncation reason a trace can name is a bit the program sets.
    for (bit, why) in ferrotrace_core::schema::unwind_stop::REASONS {
        assert!(
            bit == 0
                || c.iter()
                    .any(|(n, &v)| n.starts_with("TRUNC_") && v == u64::from(bit)),
            "{why}: no TRUNC_ define"
        );
    }
}
