//! End-to-end tests: real programs (built here), real perf_event, real uprobes and tracepoints.
//! They need root (or perf_event_paranoid <= 1 and a mounted tracefs for the probe tests).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use ferrotrace_analysis::dump::firefox::firefox_json;
use ferrotrace_analysis::reader::Trace;
use ferrotrace_analysis::report::samples;
use ferrotrace_analysis::samples::{RenderError, SampleSet};
use ferrotrace_launch::profile;
use ferrotrace_profile::{CallGraph, EventSpec, ProfileConfig, ProfileError, Target};

/// The profile as every command reads it: the one reader, then the samples view.
fn read_samples(path: impl AsRef<Path>) -> Result<SampleSet, String> {
    let trace = Trace::open(path).map_err(|e| e.to_string())?;
    SampleSet::load(&trace)
        .map_err(|e| e.to_string())?
        .ok_or_else(|| "no profile samples in the trace".to_string())
}

fn report(set: &SampleSet) -> samples::Report {
    samples::report(set, samples::ReportOptions::default())
}

fn folded(set: &SampleSet) -> String {
    ferrotrace_analysis::flame::samples::folded(set, false)
}

fn flame_svg(set: &SampleSet) -> Result<Vec<u8>, RenderError> {
    ferrotrace_analysis::flame::samples::flame_svg(set, "ferrotrace profile")
}

/// Builds every program under tests/programs once per test binary.
fn programs() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("profile-programs");
        std::fs::create_dir_all(&dir).unwrap();
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/programs");
        for name in ["cpu_hot", "threads4", "allocs", "sleeper", "weights"] {
            let st = Command::new("rustc")
                .args([
                    "-O",
                    "-g",
                    "-Cforce-frame-pointers=yes",
                    "-Ccodegen-units=1",
                    "-o",
                ])
                .arg(dir.join(name))
                .arg(src.join(format!("{name}.rs")))
                .status()
                .expect("rustc runs");
            assert!(st.success(), "building {name}");
        }
        let st = Command::new("gcc")
            .args(["-O2", "-fomit-frame-pointer", "-o"])
            .arg(dir.join("nofp"))
            .arg(src.join("nofp.c"))
            .status()
            .expect("gcc runs");
        assert!(st.success(), "building nofp");
        for name in ["junkfp", "mallocs", "hits", "clocks"] {
            let st = Command::new("gcc")
                .args(["-O2", "-g", "-fno-omit-frame-pointer", "-o"])
                .arg(dir.join(name))
                .arg(src.join(format!("{name}.c")))
                .status()
                .expect("gcc runs");
            assert!(st.success(), "building {name}");
        }
        dir
    })
}

fn prog(name: &str) -> String {
    programs().join(name).display().to_string()
}

/// One session at a time: the machine has 2 cores, and overlapping sessions would skew each other.
fn serial() -> MutexGuard<'static, ()> {
    static M: Mutex<()> = Mutex::new(());
    M.lock().unwrap_or_else(|e| e.into_inner())
}

fn out_file(name: &str) -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("{name}.data"))
}

fn config(name: &str, argv: &[&str]) -> ProfileConfig {
    ProfileConfig {
        target: Target::Command {
            program: argv.first().copied().unwrap_or_default().into(),
            argv: argv.iter().map(Into::into).collect(),
        },
        output: out_file(name),
        handle_signals: false,
        ..ProfileConfig::default()
    }
}

fn libc_path() -> String {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    maps.lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .find(|p| p.contains("/libc.so") || p.contains("/libc-"))
        .expect("libc mapped in the test")
        .to_string()
}

/// Samples (of `event`, if given) whose stack has a frame with this function name suffix.
fn samples_through(set: &SampleSet, function: &str, event: Option<u32>) -> usize {
    set.samples
        .iter()
        .filter(|s| event.is_none_or(|e| s.event == e))
        .filter(|s| {
            set.stack_frames(s.stack)
                .iter()
                .any(|f| f.function.ends_with(function))
        })
        .count()
}

fn check_hot(call_graph: CallGraph, name: &str) {
    let _g = serial();
    let mut cfg = config(name, &[&prog("cpu_hot"), "600"]);
    cfg.call_graph = call_graph;
    let sum = profile(&cfg).unwrap();
    assert_eq!(sum.exit_code, Some(0));
    assert!(sum.samples >= 50, "{sum:?}");
    let set = read_samples(&cfg.output).unwrap();
    assert!(set.complete);
    assert_eq!(set.call_graph, call_graph);
    assert_eq!(set.samples.len() as u64, sum.samples);
    let rep = report(&set);
    let hot = rep
        .get("cpu_hot::hot_loop")
        .unwrap_or_else(|| panic!("no hot_loop in\n{rep}"));
    assert!(
        hot.total_samples * 10 >= rep.samples * 8,
        "hot_loop in {} of {} samples\n{rep}",
        hot.total_samples,
        rep.samples
    );
    // Its caller is on the stacks too: stacks are complete, not just the leaf.
    let main = rep.get("cpu_hot::main").expect("main on the stacks");
    assert!(main.total_samples >= hot.total_samples);
    let cold = rep
        .get("cpu_hot::cold_setup")
        .map(|r| r.self_samples)
        .unwrap_or(0);
    assert!(cold * 10 < rep.samples);
    // Folded stacks agree: the lines through hot_loop hold most samples.
    let text = folded(&set);
    let (mut through, mut from_main, mut all) = (0u64, 0u64, 0u64);
    for line in text.lines() {
        let (stack, n) = line.rsplit_once(' ').unwrap();
        let n: u64 = n.parse().unwrap();
        all += n;
        if stack.split(';').any(|f| f == "cpu_hot::hot_loop") {
            through += n;
            if stack.contains("cpu_hot::main;cpu_hot::hot_loop") {
                from_main += n;
            }
        }
    }
    assert_eq!(all, rep.samples);
    assert!(through * 10 >= all * 8, "{through} of {all}");
    // Complete stacks (through main), allowing a rare truncated unwind.
    assert!(
        from_main * 100 >= through * 95,
        "{from_main} of {through}\n{text}"
    );
    // Source lines from DWARF.
    assert!(set
        .frames
        .iter()
        .any(|f| &*f.function == "cpu_hot::hot_loop"
            && f.file.ends_with("cpu_hot.rs")
            && f.line > 0));
}

#[test]
fn cpu_bound_hot_function_frame_pointers() {
    check_hot(CallGraph::FramePointers, "hot_fp");
}

#[test]
fn cpu_bound_hot_function_dwarf() {
    check_hot(CallGraph::Dwarf, "hot_dwarf");
}

#[test]
fn four_threads_are_all_sampled() {
    let _g = serial();
    let cfg = config("threads", &[&prog("threads4")]);
    profile(&cfg).unwrap();
    let set = read_samples(&cfg.output).unwrap();
    for i in 0..4 {
        let name = format!("worker-{i}");
        let t = set
            .threads
            .iter()
            .find(|t| t.name == name)
            .unwrap_or_else(|| panic!("no {name} in {:?}", set.threads));
        assert_ne!(t.tid, t.pid, "a thread, not the main thread");
        let n = set
            .samples
            .iter()
            .filter(|s| s.tid == t.tid)
            .filter(|s| {
                set.stack_frames(s.stack)
                    .iter()
                    .any(|f| &*f.function == "threads4::spin_worker")
            })
            .count();
        assert!(n >= 10, "{name}: {n} samples in spin_worker");
    }
}

#[test]
fn uprobe_on_malloc_sees_every_allocation_with_its_stack() {
    let _g = serial();
    let n = 500;
    for cg in [CallGraph::FramePointers, CallGraph::Dwarf] {
        let mut cfg = config("malloc", &[&prog("allocs"), &n.to_string()]);
        cfg.events = vec![EventSpec::Uprobe {
            path: libc_path().into(),
            symbol: "malloc".into(),
        }];
        cfg.call_graph = cg;
        let sum = profile(&cfg).unwrap();
        assert_eq!(sum.lost, 0);
        let set = read_samples(&cfg.output).unwrap();
        assert_eq!(set.events.len(), 1);
        assert!(set.samples.len() >= n, "{cg:?}: {} hits", set.samples.len());
        let through = samples_through(&set, "allocs::allocate_many", None);
        assert!(
            through >= n,
            "{cg:?}: {through} hits through allocate_many\n{}",
            folded(&set)
        );
        // The probe was removed afterwards.
        let events =
            std::fs::read_to_string("/sys/kernel/tracing/uprobe_events").unwrap_or_default();
        assert!(
            !events.contains(&format!("ferrotrace_{}", std::process::id())),
            "{events}"
        );
    }
}

/// A probe on `hits`' `hit`, which it calls `n` times: every hit is recorded or counted as lost.
fn hits_probed(
    name: &str,
    n: u64,
    buffer_pages: Option<usize>,
) -> (ferrotrace_profile::ProfileSummary, usize) {
    let mut cfg = config(name, &[&prog("hits"), &n.to_string()]);
    cfg.events = vec![EventSpec::Uprobe {
        path: prog("hits").into(),
        symbol: "hit".into(),
    }];
    cfg.buffer_pages = buffer_pages;
    let sum = profile(&cfg).unwrap();
    assert_eq!(sum.exit_code, Some(0));
    let set = read_samples(&cfg.output).unwrap();
    assert_eq!(set.samples.len() as u64, sum.samples);
    (sum, set.samples.len())
}

#[test]
fn every_probe_hit_is_recorded_or_counted_as_lost() {
    let _g = serial();
    // One page per CPU: the kernel drops most hits, also the last ones, after which no record came
    // to carry their count (PERF_RECORD_LOST is written before the next record that fits).
    let n = 200_000;
    for _ in 0..3 {
        let (sum, _) = hits_probed("hits_small", n, Some(1));
        assert!(sum.lost > 0, "{sum:?}");
        assert_eq!(sum.samples + sum.lost, n, "{sum:?}");
        assert!(
            sum.warnings
                .iter()
                .any(|w| w.contains("lost") && w.contains("--mmap-pages")),
            "{:?}",
            sum.warnings
        );
    }
}

#[test]
fn time_in_the_vdso_is_named_as_perf_names_it() {
    let _g = serial();
    // 67 % of such a program's samples were `[unknown]`: the vDSO's mapping was not recorded.
    for cg in [CallGraph::FramePointers, CallGraph::Dwarf] {
        let mut cfg = config("clocks", &[&prog("clocks"), "20000000"]);
        cfg.call_graph = cg;
        let sum = profile(&cfg).unwrap();
        assert_eq!(sum.exit_code, Some(0));
        let set = read_samples(&cfg.output).unwrap();
        let n = set.samples.len();
        assert!(n >= 50, "{cg:?}: {n} samples");
        let in_vdso = samples_through(&set, "__vdso_clock_gettime", None);
        let unknown_leaf = set
            .samples
            .iter()
            .filter(|s| set.stack_frames(s.stack).first().is_none_or(|f| f.unknown))
            .count();
        assert!(
            in_vdso * 3 > n && unknown_leaf * 10 < n,
            "{cg:?}: {in_vdso} of {n} samples in __vdso_clock_gettime, {unknown_leaf} unnamed\n{}",
            folded(&set)
        );
        if cg == CallGraph::Dwarf {
            // The vDSO's .eh_frame unwinds out of it, up to the program's caller.
            let through = samples_through(&set, "read_clocks", None);
            assert!(
                through * 10 >= n * 9,
                "{through} of {n} reach read_clocks\n{}",
                folded(&set)
            );
        }
    }
}

#[test]
fn uprobe_on_a_demangled_rust_function() {
    let _g = serial();
    let exe = prog("allocs");
    let mut cfg = config("rust_uprobe", &[&exe, "100"]);
    cfg.events = vec![EventSpec::parse(&format!("uprobe:{exe}:allocs::allocate_many")).unwrap()];
    profile(&cfg).unwrap();
    let set = read_samples(&cfg.output).unwrap();
    assert_eq!(set.samples.len(), 1, "allocate_many is called once");
    let frames = set.stack_frames(set.samples[0].stack);
    assert_eq!(&*frames[0].function, "allocs::allocate_many");
    assert!(
        frames.iter().any(|f| &*f.function == "allocs::main"),
        "{frames:?}"
    );
}

#[test]
fn sched_switch_gives_off_cpu_stacks() {
    let _g = serial();
    let mut cfg = config("offcpu", &[&prog("sleeper")]);
    cfg.events = vec![EventSpec::parse("sched:sched_switch").unwrap()];
    cfg.call_graph = CallGraph::Dwarf;
    profile(&cfg).unwrap();
    let set = read_samples(&cfg.output).unwrap();
    let through = samples_through(&set, "sleeper::nap_in_known_place", None);
    assert!(
        through >= 20,
        "{through} switches through nap_in_known_place\n{}",
        folded(&set)
    );
    // With kernel frames (root): the stacks go down into the scheduler.
    assert!(set
        .frames
        .iter()
        .any(|f| f.kernel && f.function.contains("schedule")));
}

/// `perf report --no-children` of a `perf record` of `argv`: (self %, symbol) by self, descending.
fn perf_self_percentages(dir: &str, argv: &[&str], call_graph: &str) -> Vec<(f64, String)> {
    let data = out_file(&format!("{dir}-perf"));
    let st = Command::new("perf")
        .args([
            "record",
            "-q",
            "-F",
            "999",
            "--call-graph",
            call_graph,
            "-o",
        ])
        .arg(&data)
        .arg("--")
        .args(argv)
        .stdout(std::process::Stdio::null())
        .status()
        .expect("perf (scripts/setup.sh installs linux-perf)");
    assert!(st.success(), "perf record");
    let out = Command::new("perf")
        .args([
            "report",
            "--no-children",
            "--stdio",
            "--sort",
            "sym",
            "-g",
            "none",
            "-i",
        ])
        .arg(&data)
        .output()
        .expect("perf report");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .filter_map(|l| {
            let (pct, rest) = l.trim().split_once('%')?;
            let sym = rest.trim().strip_prefix("[.]")?.trim();
            Some((pct.trim().parse().ok()?, sym.to_string()))
        })
        .collect()
}

#[test]
fn self_time_goes_to_the_function_not_its_inlined_helpers_as_in_perf() {
    let _g = serial();
    let names = ["weights::work_a", "weights::work_b", "weights::work_c"];
    for (call_graph, spelling) in [
        (CallGraph::FramePointers, "fp"),
        (CallGraph::Dwarf, "dwarf"),
    ] {
        let argv = [prog("weights"), "200".to_string()];
        let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
        let mut cfg = config(&format!("weights-{spelling}"), &argv);
        cfg.call_graph = call_graph;
        profile(&cfg).unwrap();
        let set = read_samples(&cfg.output).unwrap();
        let rep = report(&set);
        // The three hot functions lead, in the order of the time they take, with the inlined helpers
        // (black_box, wrapping_add...) at no self time of their own.
        let top: Vec<&str> = rep
            .rows
            .iter()
            .take(3)
            .map(|r| r.function.as_str())
            .collect();
        assert_eq!(top, names, "{spelling}:\n{rep}");
        let pct = |f: &str| {
            rep.get(f)
                .map_or(0.0, |r| r.self_weight as f64 * 100.0 / rep.weight as f64)
        };
        assert!(pct("core::hint::black_box") == 0.0, "{spelling}:\n{rep}");
        // perf, on the same program, in the same mode: the same order and about the same shares.
        let perf = perf_self_percentages(&format!("weights-{spelling}"), &argv, spelling);
        let perf_top: Vec<&str> = perf.iter().take(3).map(|(_, s)| s.as_str()).collect();
        assert_eq!(perf_top, names, "perf {spelling}: {perf:?}");
        for (p, sym) in perf.iter().take(3) {
            assert!(
                (pct(sym) - p).abs() < 8.0,
                "{spelling}: {sym}: ferrotrace {:.1}% vs perf {p:.1}%\n{rep}",
                pct(sym)
            );
        }
        // --inline charges the innermost inlined function instead, as before.
        let inline = samples::report(
            &set,
            samples::ReportOptions {
                inline: true,
                ..Default::default()
            },
        );
        assert!(
            !inline.rows[0].function.starts_with("weights::"),
            "{spelling} --inline: an inlined std helper leads\n{inline}"
        );
    }
}

#[test]
fn libc_frames_are_named_from_its_debug_file() {
    let _g = serial();
    let mut cfg = config("mallocs", &[&prog("mallocs")]);
    cfg.call_graph = CallGraph::Dwarf;
    profile(&cfg).unwrap();
    let set = read_samples(&cfg.output).unwrap();
    let rep = report(&set);
    // Most of the time is in libc's allocator, named as perf names it with libc6-dbg installed.
    let libc_named: u64 = rep
        .rows
        .iter()
        .filter(|r| {
            [
                "malloc",
                "free",
                "_int_malloc",
                "_int_free",
                "unlink_chunk",
                "malloc_consolidate",
            ]
            .iter()
            .any(|n| r.function.starts_with(n) || r.function.starts_with(&format!("_{n}")))
        })
        .map(|r| r.self_weight)
        .sum();
    assert!(libc_named * 2 > rep.weight, "{rep}");
    assert!(rep.get("_int_malloc").is_some(), "{rep}");
    // Nothing is named by a raw address; what stays unknown is one row per module.
    assert!(
        !rep.rows.iter().any(|r| r.function.contains("+0x")),
        "{rep}"
    );
    // And the caller is on the stacks.
    assert!(
        rep.rows
            .iter()
            .any(|r| r.function.starts_with("churn") && r.total_weight * 10 > rep.weight * 8),
        "{rep}"
    );
}

#[test]
fn frame_pointer_walks_into_text_are_cut_and_reported() {
    let _g = serial();
    let cfg = config("junkfp", &[&prog("junkfp")]);
    let sum = profile(&cfg).unwrap();
    assert!(sum.samples >= 20, "{sum:?}");
    assert!(
        sum.warnings
            .iter()
            .any(|w| w.contains("without frame pointers")),
        "{:?}",
        sum.warnings
    );
    let set = read_samples(&cfg.output).unwrap();
    // No stack holds an address that lies in no mapped object (the text read as a return address).
    let junk: Vec<_> = set
        .frames
        .iter()
        .filter(|f| f.function.starts_with("[unknown]"))
        .collect();
    assert!(junk.is_empty(), "{junk:?}");
    assert!(report(&set).get("spin").is_some());
}

#[test]
fn off_cpu_time_goes_to_the_stack_that_blocked() {
    let _g = serial();
    // The program measures the time it spends in its sleeps and writes the sum (ns) to a file.
    let slept_file = out_file("offcpu-slept");
    let cmd = format!("exec {} > {}", prog("sleeper"), slept_file.display());
    let mut cfg = config("offcpu-time", &["/bin/sh", "-c", &cmd]);
    cfg.events = vec![EventSpec::parse("off-cpu").unwrap()];
    cfg.call_graph = CallGraph::Dwarf;
    profile(&cfg).unwrap();
    let slept: u64 = std::fs::read_to_string(&slept_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let set = read_samples(&cfg.output).unwrap();
    assert_eq!(
        set.events[0].kind,
        ferrotrace_analysis::reader::SamplerKind::OffCpu
    );
    let off: u64 = set
        .samples
        .iter()
        .filter(|s| {
            set.stack_frames(s.stack)
                .iter()
                .any(|f| f.function.ends_with("sleeper::nap_in_known_place"))
        })
        .map(|s| s.weight)
        .sum();
    assert!(
        off.abs_diff(slept) * 10 <= slept,
        "off-CPU time through nap_in_known_place {off} ns, the program slept {slept} ns\n{}",
        report(&set)
    );
    // The report weighs by time: the sleeping stack's total is that time.
    let rep = report(&set);
    assert!(rep.weighs_time);
    let nap = rep.get("sleeper::nap_in_known_place").unwrap();
    assert_eq!(nap.total_weight, off);
}

#[test]
fn cpu_clock_and_tracepoint_together() {
    let _g = serial();
    let mut cfg = config("mixed", &[&prog("sleeper")]);
    cfg.events = vec![
        EventSpec::CpuClock(None),
        EventSpec::parse("tracepoint:sched:sched_switch").unwrap(),
    ];
    cfg.call_graph = CallGraph::Dwarf;
    profile(&cfg).unwrap();
    let set = read_samples(&cfg.output).unwrap();
    let sw = set.event_index("sched:sched_switch").unwrap();
    assert_eq!(set.event_index("cpu-clock"), Some(0));
    assert!(samples_through(&set, "nap_in_known_place", Some(sw)) >= 20);
    // Folded stacks say which event each stack belongs to.
    assert!(folded(&set)
        .lines()
        .any(|l| l.starts_with("tracepoint:sched:sched_switch;")));
}

#[test]
fn a_timer_with_its_own_frequency_is_the_traces_frequency() {
    // `profile:hz:N` overrides -F: the trace says N, which the views take the sampling period from.
    let _g = serial();
    let mut cfg = config("own_hz", &[&prog("cpu_hot"), "300"]);
    cfg.events = vec![EventSpec::parse("profile:hz:99").unwrap()];
    assert_ne!(cfg.frequency, 99);
    profile(&cfg).unwrap();
    let set = read_samples(&cfg.output).unwrap();
    assert_eq!(set.frequency, 99);
}

#[test]
fn child_processes_created_later_are_followed() {
    let _g = serial();
    let cmd = format!("{} 400; true", prog("cpu_hot"));
    let cfg = config("child", &["/bin/sh", "-c", &cmd]);
    profile(&cfg).unwrap();
    let set = read_samples(&cfg.output).unwrap();
    let rep = report(&set);
    let hot = rep
        .get("cpu_hot::hot_loop")
        .unwrap_or_else(|| panic!("{rep}"));
    assert!(hot.total_samples * 10 >= rep.samples * 7, "{rep}");
    let hot_tid = set
        .samples
        .iter()
        .find(|s| {
            set.stack_frames(s.stack)
                .iter()
                .any(|f| &*f.function == "cpu_hot::hot_loop")
        })
        .unwrap()
        .tid;
    assert_ne!(hot_tid, set.pid, "cpu_hot ran in a child of sh");
}

#[test]
fn attach_to_a_running_process() {
    let _g = serial();
    let mut child = Command::new(prog("cpu_hot"))
        .arg("1500")
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(100));
    let cfg = ProfileConfig {
        target: Target::Pid(child.id()),
        output: out_file("attach"),
        duration: Some(Duration::from_millis(400)),
        handle_signals: false,
        ..ProfileConfig::default()
    };
    let sum = profile(&cfg);
    let _ = child.kill();
    let _ = child.wait();
    let sum = sum.unwrap();
    assert!(sum.samples >= 20, "{sum:?}");
    let set = read_samples(&cfg.output).unwrap();
    let rep = report(&set);
    assert!(
        rep.get("cpu_hot::hot_loop").unwrap().total_samples * 10 >= rep.samples * 8,
        "{rep}"
    );
    // The process went on after the recording: `info` said "ended by: exit".
    let info = ferrotrace_analysis::info::Summary::of(&Trace::open(&cfg.output).unwrap()).unwrap();
    assert!(
        info.ended_by.starts_with("end of recording"),
        "{}",
        info.ended_by
    );
}

/// DWARF unwinding of a running multi-threaded process (`-p`, threads that started before the attach)
/// does as well as of the same program launched by the profiler: every thread's samples reach its
/// worker function, and unwinding stops early no more often.
#[test]
fn attached_dwarf_stacks_are_as_complete_as_launched_ones() {
    let _g = serial();
    let mut launched = config("dwarf-launched", &[&prog("threads4"), "800"]);
    launched.call_graph = CallGraph::Dwarf;
    let launched_sum = profile(&launched).unwrap();
    let mut child = Command::new(prog("threads4"))
        .arg("2500")
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let attached = ProfileConfig {
        target: Target::Pid(child.id()),
        output: out_file("dwarf-attached"),
        duration: Some(Duration::from_millis(800)),
        handle_signals: false,
        call_graph: CallGraph::Dwarf,
        ..ProfileConfig::default()
    };
    let attached_sum = profile(&attached);
    let _ = child.kill();
    let _ = child.wait();
    let attached_sum = attached_sum.unwrap();
    for (what, sum, cfg) in [
        ("launched", &launched_sum, &launched),
        ("attached", &attached_sum, &attached),
    ] {
        assert!(sum.samples >= 100, "{what}: {sum:?}");
        let set = read_samples(&cfg.output).unwrap();
        let workers = set.threads.iter().filter(|t| t.name.starts_with("worker-"));
        for t in workers {
            let mine: Vec<_> = set.samples.iter().filter(|s| s.tid == t.tid).collect();
            let through = mine
                .iter()
                .filter(|s| {
                    set.stack_frames(s.stack)
                        .iter()
                        .any(|f| f.function.ends_with("threads4::spin_worker"))
                })
                .count();
            assert!(
                through * 10 >= mine.len() * 9,
                "{what}: {}: {through} of {} samples reach spin_worker",
                t.name,
                mine.len()
            );
        }
    }
    let rate = |s: &ferrotrace_profile::ProfileSummary| s.unwind_errors as f64 / s.samples as f64;
    assert!(
        rate(&attached_sum) <= rate(&launched_sum) + 0.05,
        "unwind errors: attached {attached_sum:?}, launched {launched_sum:?}"
    );
}

#[test]
fn flame_graph_and_firefox_profile() {
    let _g = serial();
    let cfg = config("outputs", &[&prog("cpu_hot"), "300"]);
    profile(&cfg).unwrap();
    let set = read_samples(&cfg.output).unwrap();
    let svg = String::from_utf8(flame_svg(&set).unwrap()).unwrap();
    assert!(
        svg.contains("<svg") && svg.contains("cpu_hot::hot_loop"),
        "{}",
        &svg[..200.min(svg.len())]
    );

    let json: serde_json::Value = serde_json::from_str(&firefox_json(&set).unwrap()).unwrap();
    let meta = &json["meta"];
    // Schema version fields of the processed-profile format.
    assert!(meta["version"].as_u64().unwrap() >= 24, "{meta}");
    assert!(
        meta["preprocessedProfileVersion"].as_u64().unwrap() >= 40,
        "{meta}"
    );
    assert_eq!(meta["product"], "ferrotrace");
    assert!(meta["interval"].as_f64().unwrap() > 0.0);
    let threads = json["threads"].as_array().unwrap();
    assert!(!threads.is_empty());
    let samples = threads[0]["samples"]["length"].as_u64().unwrap();
    assert_eq!(samples as usize, set.samples.len());
    // Symbols included: the function names are in the string table.
    let text = json.to_string();
    assert!(text.contains("cpu_hot::hot_loop") && text.contains("cpu_hot::main"));
}

#[test]
fn clear_errors() {
    let _g = serial();
    let e = profile(&config("err", &["/nonexistent/program"])).unwrap_err();
    assert!(matches!(e, ProfileError::Spawn { .. }), "{e}");

    let mut cfg = config("err", &[&prog("cpu_hot"), "10"]);
    cfg.events = vec![EventSpec::Uprobe {
        path: libc_path().into(),
        symbol: "no_such_function_xyz".into(),
    }];
    let e = profile(&cfg).unwrap_err();
    assert!(matches!(e, ProfileError::UnknownSymbol { .. }), "{e}");
    assert!(e.to_string().contains("no_such_function_xyz"));

    cfg.events = vec![EventSpec::parse("sched:no_such_tracepoint").unwrap()];
    let e = profile(&cfg).unwrap_err();
    assert!(matches!(e, ProfileError::UnknownTracepoint(_)), "{e}");

    let e = profile(&config("err", &[&prog("nofp")])).unwrap_err();
    assert!(matches!(e, ProfileError::NoFramePointers(_)), "{e}");
    assert!(e.to_string().contains("--call-graph dwarf"));
    let mut cfg = config("err", &[&prog("nofp")]);
    cfg.call_graph = CallGraph::Dwarf;
    assert_eq!(profile(&cfg).unwrap().exit_code, Some(0));
    // Probes alone: their hits are counted whatever the stacks (a malloc probe on python was refused).
    let mut cfg = config("err", &[&prog("nofp")]);
    cfg.events = vec![EventSpec::Uprobe {
        path: libc_path().into(),
        symbol: "printf".into(),
    }];
    let sum = profile(&cfg).unwrap();
    assert_eq!((sum.exit_code, sum.samples), (Some(0), 1), "{sum:?}");
    assert!(
        sum.warnings
            .iter()
            .any(|w| w.contains("no frame pointers") && w.contains("--call-graph dwarf")),
        "{:?}",
        sum.warnings
    );

    let cfg = ProfileConfig {
        target: Target::Pid(999_999_999),
        ..config("err", &[])
    };
    assert!(matches!(
        profile(&cfg).unwrap_err(),
        ProfileError::NoSuchProcess(_)
    ));

    assert!(read_samples(out_file("does-not-exist")).is_err());
    let junk = out_file("junk");
    std::fs::write(&junk, b"not a trace at all").unwrap();
    let e = read_samples(&junk).unwrap_err();
    assert!(e.contains("not a ferrotrace trace"), "{e}");
}

#[test]
fn truncated_trace_reads_as_a_prefix() {
    let _g = serial();
    let cfg = config("trunc", &[&prog("cpu_hot"), "200"]);
    profile(&cfg).unwrap();
    let bytes = std::fs::read(&cfg.output).unwrap();
    for cut in [bytes.len() - 1, bytes.len() / 2, 40, 17] {
        let p = out_file("trunc-cut");
        std::fs::write(&p, &bytes[..cut]).unwrap();
        // Never panics: either a prefix without the summary, or a clear error.
        match read_samples(&p) {
            Ok(set) => assert!(!set.complete),
            Err(e) => assert!(e.to_string().contains("no profile"), "{e}"),
        }
    }
}
