//! `ferrotrace profile` and the analysis commands on its traces (needs perf_event access: root here).

mod common;

use common::*;
use ferrotrace_analysis::reader::Trace;

/// `ferrotrace profile -F 999 -o TRACE -- fib 36`, which must succeed: its output.
fn profile_fib(trace: &std::path::Path) -> std::process::Output {
    let out = ferrotrace()
        .args(["profile", "-F", "999", "-o"])
        .arg(trace)
        .arg("--")
        .arg(testprog("fib"))
        .arg("36")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    out
}

#[test]
fn profile_then_report_flame_firefox_perfetto_and_info() {
    let dir = scratch("profile_cli");
    let trace = dir.join("p.data");
    let out = profile_fib(&trace);
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

    // --srcline has no column in a sample report: it was ignored without a word.
    let srcline = ft(&["report", "--srcline", "-i", trace.to_str().unwrap()]);
    assert!(srcline.status.success());
    assert_eq!(
        text(&srcline.stderr).matches("--srcline").count(),
        1,
        "{}",
        text(&srcline.stderr)
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
    // Native frames: the program among the libraries, fib::fib's frames at addresses in it, with
    // its source file and lines (the export had names only).
    let libs = profile["libs"].as_array().unwrap();
    let lib = libs
        .iter()
        .position(|l| l["path"] == testprog("fib").to_str().unwrap())
        .unwrap_or_else(|| panic!("fib not among the libs: {libs:?}"));
    assert!(libs[lib]["breakpadId"].as_str().unwrap().len() == 33);
    let t = &profile["threads"][0];
    let strings = t["stringArray"].as_array().unwrap();
    let (frames, funcs) = (&t["frameTable"], &t["funcTable"]);
    let fib_frames: Vec<usize> = (0..frames["length"].as_u64().unwrap() as usize)
        .filter(|&i| {
            let f = frames["func"][i].as_u64().unwrap() as usize;
            strings[funcs["name"][f].as_u64().unwrap() as usize] == "fib::fib"
        })
        .collect();
    assert!(!fib_frames.is_empty());
    for &i in &fib_frames {
        let f = frames["func"][i].as_u64().unwrap() as usize;
        let resource = funcs["resource"][f].as_i64().unwrap();
        assert!(resource >= 0 && t["resourceTable"]["lib"][resource as usize] == lib);
        assert!(frames["address"][i].as_i64().unwrap() > 0);
        assert!(funcs["lineNumber"][f].as_u64().expect("its first line") > 0);
        let file = funcs["fileName"][f].as_u64().expect("a file name");
        assert!(strings[file as usize].as_str().unwrap().ends_with("fib.rs"));
    }
    let with_lines = fib_frames
        .iter()
        .filter(|&&i| frames["line"][i].as_u64().is_some_and(|l| l > 0))
        .count();
    assert!(
        with_lines * 2 > fib_frames.len(),
        "{with_lines} of {}",
        fib_frames.len()
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

#[test]
fn profile_help_names_every_event_and_the_buffer_size() {
    let help = ok(ft(&["profile", "--help"]));
    for want in [
        "off-cpu",
        "uprobe:PATH:SYMBOL",
        "--mmap-pages",
        "tracepoint:CATEGORY:NAME",
    ] {
        assert!(help.contains(want), "{want} missing:\n{help}");
    }
    let bad = ft(&["profile", "-m", "3", "--", "true"]);
    assert_eq!(bad.status.code(), Some(2), "{}", text(&bad.stderr));
    assert!(text(&bad.stderr).contains("power of two"));
}

/// A program's functions have one name whether traced or sampled: the profile of a traced program
/// names its functions exactly as the trace of it does (closures, generics and drop glue included).
#[test]
fn profile_and_record_name_functions_alike() {
    let dir = scratch("profile_names");
    let prog = testprog("names");
    let (out, traced) = record(&dir, &[], &prog, &["300"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let sampled = dir.join("p.data");
    let out = ferrotrace()
        .args(["profile", "-F", "4999", "--call-graph", "dwarf", "-o"])
        .arg(&sampled)
        .arg("--")
        .arg(&prog)
        .arg("300")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let names = |trace: &std::path::Path, key: &str| -> std::collections::BTreeSet<String> {
        let j: serde_json::Value = serde_json::from_str(&ok(ft(&[
            "report",
            "--json",
            "-i",
            trace.to_str().unwrap(),
        ])))
        .unwrap();
        j["functions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f[key].as_str().unwrap().to_string())
            .filter(|n| n.contains("names::"))
            .collect()
    };
    let traced_names = names(&traced, "name");
    let sampled_names = names(&sampled, "function");
    // The traced functions are the busy ones (the closure is inlined into `apply`, the drop glue calls
    // `Drop::drop`): each is sampled, under the very name the trace gives it.
    assert_eq!(traced_names.len(), 3, "{traced_names:?}");
    let missing: Vec<_> = traced_names.difference(&sampled_names).collect();
    assert!(
        missing.is_empty(),
        "named differently when sampled: {missing:?}\nsampled: {sampled_names:?}"
    );
}

/// Samples in a JIT's anonymous executable code (`jitspin` copies a loop into an anonymous mapping
/// and spins in it): named `[anon]`, or by the JIT's perf map when it wrote one, never looked up as a
/// file (`info` said "not named : cannot read //anon").
#[test]
fn samples_in_anonymous_code_are_named_anon_or_by_the_jit_s_perf_map() {
    let dir = scratch("profile_anon");
    let exe = build_c(&dir, "gcc", "jitspin.c", "jitspin", &["-O2"]);
    for (arg, name) in [("plain", "[anon]"), ("map", "jit_spin_loop")] {
        let trace = dir.join(format!("{arg}.data"));
        let out = ferrotrace()
            .args(["profile", "-F", "999", "--call-graph", "dwarf", "-o"])
            .arg(&trace)
            .arg("--")
            .arg(&exe)
            .arg(arg)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", text(&out.stderr));
        let t = trace.to_str().unwrap();
        let info = ok(ft(&["info", "-i", t]));
        let report: serde_json::Value =
            serde_json::from_str(&ok(ft(&["report", "--json", "-i", t]))).unwrap();
        if arg == "map" {
            let pid = Trace::open(&trace).unwrap().session().pid;
            let _ = std::fs::remove_file(ferrotrace_core::jit::perf_map_path(pid));
        }
        assert!(!info.contains("//anon"), "{arg}: {info}");
        assert!(!info.contains("not named"), "{arg}: {info}");
        let top = &report["functions"][0];
        assert_eq!(top["function"], name, "{arg}: the loop leads: {report}");
        assert!(
            top["self"].as_u64().unwrap() * 2 > report["samples"].as_u64().unwrap(),
            "{arg}: most samples are in the loop: {report}"
        );
    }
}

/// Issue 37 items 5 and 7: `replay` of a profile applies `--tid`, `--time-range`, `-F` and `-N` to
/// its samples (they were ignored: `--tid` of no thread printed every sample) and refuses the
/// options that are for calls in one line; `dump -o -` writes to standard output (it made a file
/// named `-`); `profile --bpf` refuses `--call-graph` and `-m`, which do not apply to it.
#[test]
fn replay_of_a_profile_selects_its_samples_as_the_options_say() {
    let dir = scratch("profile_replay_filters");
    let trace = dir.join("p.data");
    profile_fib(&trace);
    let t = trace.to_str().unwrap();
    // The samples replay prints (its header line left out).
    let replay = |args: &[&str]| -> Vec<String> {
        ok(ft(&[&["replay", "-i", t], args].concat()))
            .lines()
            .skip(1)
            .map(str::to_string)
            .collect()
    };
    let all = replay(&[]);
    assert!(all.len() > 50, "{} samples", all.len());
    let pid = Trace::open(&trace).unwrap().session().pid.to_string();
    assert_eq!(replay(&["--tid", &pid]), all);
    assert_eq!(replay(&["--tid", "999999"]), Vec::<String>::new());
    let (inside, outside) = (replay(&["-F", "fib::fib"]), replay(&["-N", "fib::fib"]));
    assert!(!inside.is_empty() && inside.iter().all(|l| l.contains("fib::fib")));
    assert!(outside.iter().all(|l| !l.contains("fib::fib")));
    assert_eq!(inside.len() + outside.len(), all.len());
    let early = replay(&["--time-range", "~50ms"]);
    assert!(
        !early.is_empty() && early.len() < all.len(),
        "{}",
        early.len()
    );
    for option in [&["-t", "1us"][..], &["-f", "tid"], &["--srcline"]] {
        let out = ft(&[&["replay", "-i", t], option].concat());
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{option:?}: {err}");
        assert!(err.contains("is for function calls"), "{option:?}: {err}");
    }
    // `-o -` is standard output.
    let folded = ferrotrace()
        .args(["dump", "-i", t, "--format", "folded", "-o", "-"])
        .current_dir(&dir)
        .output()
        .unwrap();
    assert!(folded.status.success(), "{}", text(&folded.stderr));
    assert!(text(&folded.stdout).contains("fib::fib"));
    assert!(!dir.join("-").exists());
    for extra in [&["--call-graph", "fp"][..], &["-m", "64"]] {
        let out = ferrotrace()
            .args(["profile", "--bpf"])
            .args(extra)
            .arg("-o")
            .arg(dir.join("bpf.data"))
            .args(["--", "/bin/true"])
            .output()
            .unwrap();
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{extra:?}: {err}");
        assert!(err.contains("do not apply"), "{extra:?}: {err}");
    }
}

/// Issue 37 item 8: code no symbol names is a row per function, found from the `.eh_frame` region
/// that holds it (`[twospin-s+0x11f0]`), where it was one row per module (`[cc1]` 35.5 % self where
/// perf listed each address): a stripped program with two hot static functions gets two rows, at
/// the addresses the unstripped build's symbols give them, the one that runs twice as long on top.
#[test]
fn stripped_code_is_named_by_the_unwind_region_of_each_function() {
    let dir = scratch("profile_stripped");
    let exe = build_c(&dir, "gcc", "twospin.c", "twospin", &["-O2"]);
    let stripped = dir.join("twospin-s");
    let strip = std::process::Command::new("strip")
        .arg("-o")
        .arg(&stripped)
        .arg(&exe)
        .output()
        .unwrap();
    assert!(strip.status.success(), "{}", text(&strip.stderr));
    // Where the symbols put them (gcc may suffix .constprop.0).
    let nm = std::process::Command::new("nm").arg(&exe).output().unwrap();
    let address_of = |name: &str| -> u64 {
        text(&nm.stdout)
            .lines()
            .find_map(|l| {
                let mut f = l.split_whitespace();
                let (a, _, n) = (f.next()?, f.next()?, f.next()?);
                (n == name || n.starts_with(&format!("{name}."))).then(|| a.to_string())
            })
            .and_then(|a| u64::from_str_radix(&a, 16).ok())
            .unwrap_or_else(|| panic!("no {name} in nm's output"))
    };
    let trace = dir.join("s.data");
    let out = ferrotrace()
        .args(["profile", "-F", "999", "-o"])
        .arg(&trace)
        .arg("--")
        .arg(&stripped)
        .arg("300")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let report: serde_json::Value = serde_json::from_str(&ok(ft(&[
        "report",
        "--json",
        "-i",
        trace.to_str().unwrap(),
    ])))
    .unwrap();
    let self_of = |address: u64| -> u64 {
        let name = format!("[twospin-s+{address:#x}]");
        report["functions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["function"] == name.as_str())
            .and_then(|f| f["self"].as_u64())
            .unwrap_or_else(|| panic!("no {name} in {report}"))
    };
    let (a, b) = (self_of(address_of("spin_a")), self_of(address_of("spin_b")));
    assert!(a > b && b > 10, "spin_a {a}, spin_b {b}");
    // Code no unwind region covers (the PLT stubs, `_start`) is named for the whole module: a stray
    // sample may land there (one clean-clone run in three had some), the spinning never does.
    let whole_module = report["functions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["function"] == "[twospin-s]")
        .and_then(|f| f["self"].as_u64())
        .unwrap_or(0);
    assert!(whole_module <= 3 && whole_module * 50 < b, "{report}");
}
