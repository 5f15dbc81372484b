//! `ferrotrace profile` and the analysis commands on its traces (needs perf_event access: root here).

mod common;

use common::*;

#[test]
fn profile_then_report_flame_firefox_perfetto_and_info() {
    let dir = scratch("profile_cli");
    let trace = dir.join("p.data");
    let out = ferrotrace()
        .args(["profile", "-F", "999", "-o"])
        .arg(&trace)
        .arg("--")
        .arg(testprog("fib"))
        .arg("36")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("calls="),
        "the program's output passes through"
    );
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&trace).unwrap().permissions().mode() & 0o777,
        0o600,
        "a trace is private, like the runtime's (it was 0644)"
    );
    let run = |args: &[&str]| ok(ft(&[args, &["-i", trace.to_str().unwrap()]].concat()));
    let report: serde_json::Value = serde_json::from_str(&run(&["report", "--json"])).unwrap();
    let top = &report["functions"][0];
    assert_eq!(
        top["function"], "fib::fib",
        "the hot function leads: {report}"
    );
    assert!(
        top["self"].as_u64().unwrap() * 2 > report["samples"].as_u64().unwrap(),
        "most samples are in fib"
    );

    let svg = dir.join("flame.svg");
    run(&["flame", "-o", svg.to_str().unwrap()]);
    assert!(std::fs::read_to_string(&svg).unwrap().contains("fib::fib"));

    let ff = dir.join("p.json");
    run(&["dump", "--format", "firefox", "-o", ff.to_str().unwrap()]);
    let profile: serde_json::Value = serde_json::from_slice(&std::fs::read(&ff).unwrap()).unwrap();
    assert!(profile["meta"]["version"].as_u64().unwrap() >= 24);
    assert!(
        std::fs::read_to_string(&ff).unwrap().contains("fib::fib"),
        "symbols included"
    );

    let pb = dir.join("p.pb");
    run(&[
        "dump",
        "--format",
        "perfetto",
        "--uncompressed",
        "-o",
        pb.to_str().unwrap(),
    ]);
    let decoded = protoc_decode(&std::fs::read(&pb).unwrap(), &dir);
    let begins = decoded.matches("TYPE_SLICE_BEGIN").count();
    assert!(
        begins > 0 && begins == decoded.matches("TYPE_SLICE_END").count(),
        "balanced slices"
    );
    assert!(
        decoded.contains("name: \"fib::fib\""),
        "interned frame names"
    );

    let info = run(&["info"]);
    assert!(
        info.contains("samples (ferrotrace profile)") && info.contains("cpu-clock"),
        "{info}"
    );
    let chrome = ferrotrace()
        .args(["dump", "--format", "chrome", "-i"])
        .arg(&trace)
        .output()
        .unwrap();
    assert_eq!(chrome.status.code(), Some(2));
    assert!(text(&chrome.stderr).contains("use --format firefox, perfetto or folded"));
}
