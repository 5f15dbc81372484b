//! Static tracepoints on real programs (`testprogs/tracepoints`): record, list, environment, concurrency,
//! live printing and USDT interop.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};

use common::*;
use ferrotrace_analysis::reader::{EventKind, Trace};
use ferrotrace_analysis::tracepoints::{decode, Value};
use ferrotrace_core::env;

fn expected_basic(n: u64, with_all_types: bool) -> Vec<String> {
    let mut v = Vec::new();
    for i in 0..n {
        v.push(format!(
            r#"tp_basic::vfs_open(path="/tmp/file{i}", flags={i})"#
        ));
        v.push(format!("tp_basic::net_recv conn={i} bytes={}", i * 100));
        if with_all_types {
            v.push(format!(
                r#"tp_basic::all_types(a={i}, b={}, c={}, d={}, e={}, f=b"\x{i:02x}\xffx", g=0.25, h={})"#,
                -(i as i16),
                -1_000_000_000_000 * i as i64,
                i as f64 + 0.5,
                i % 2 == 0,
                -(i as isize)
            ));
        }
    }
    v
}

#[test]
fn record_has_exactly_the_fired_tracepoints_with_their_arguments_in_order() {
    let dir = scratch("tp_record");
    let prog = testprog("tp_basic");
    let (out, trace) = record(
        &dir,
        &[
            "--trace",
            "vfs_*",
            "--trace",
            "net_*",
            "--trace",
            "tp_basic::all_*",
        ],
        &prog,
        &["6"],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let t = Trace::open(&trace).expect("open trace");
    assert!(t.end().is_some() && t.truncation().is_none());
    assert_eq!(
        t.tracepoints().len(),
        4,
        "descriptors: {:?}",
        t.tracepoints()
    );
    assert_eq!(tracepoint_lines(&t), expected_basic(6, true));
    // Function events are recorded alongside: tracepoints sit between the calls of `work`.
    let main_tid = *t.threads().keys().next().expect("a thread");
    let mut seq = Vec::new();
    for e in t.thread_events(main_tid).unwrap() {
        let e = e.unwrap();
        match e.kind {
            EventKind::Entry if t.function_name(e.id) == "tp_basic::work" => seq.push('w'),
            EventKind::Tracepoint => seq.push('t'),
            _ => {}
        }
    }
    assert_eq!(seq.iter().collect::<String>(), "tttw".repeat(6));
    // Typed values for exporters.
    let first = t
        .events()
        .unwrap()
        .map(|e| e.unwrap())
        .find(|e| e.kind == EventKind::Tracepoint)
        .unwrap();
    let (d, vals) = decode(&t, &first).unwrap();
    assert_eq!(d.name, "tp_basic::vfs_open");
    assert_eq!(
        vals.unwrap(),
        vec![
            ("path".into(), Value::Str("/tmp/file0".into())),
            ("flags".into(), Value::Unsigned(0))
        ]
    );
}

#[test]
fn disabled_tracepoints_record_nothing() {
    let dir = scratch("tp_disabled");
    let prog = testprog("tp_basic");
    let (out, trace) = record(&dir, &[], &prog, &["4"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let t = Trace::open(&trace).unwrap();
    assert!(tracepoint_lines(&t).is_empty());
    assert!(t.event_count() > 0, "function events are still recorded");
    // Only the selected ones fire.
    let (out, trace) = record(&dir, &["--trace", "net_recv"], &prog, &["3"]);
    assert!(out.status.success());
    let t = Trace::open(&trace).unwrap();
    let lines = tracepoint_lines(&t);
    assert_eq!(lines.len(), 3);
    assert!(lines.iter().all(|l| l.starts_with("tp_basic::net_recv ")));
}

#[test]
fn the_environment_alone_enables_tracepoints() {
    let dir = scratch("tp_env");
    let trace = dir.join("env.data");
    let out = Command::new(testprog("tp_basic"))
        .arg("2")
        .env(env::TRACE, "vfs_open,tp_basic::net_*")
        .env(env::OUTPUT, &trace)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let t = Trace::open(&trace).expect("the program wrote a trace by itself");
    assert_eq!(tracepoint_lines(&t), expected_basic(2, false));
}

#[test]
fn list_finds_every_tracepoint_and_function() {
    let prog = testprog("tp_basic");
    let out = ferrotrace()
        .arg("list")
        .arg("--json")
        .arg(&prog)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let tps = j["tracepoints"].as_array().unwrap();
    let mut names: Vec<&str> = tps.iter().map(|t| t["name"].as_str().unwrap()).collect();
    names.sort();
    assert_eq!(
        names,
        [
            "tp_basic::all_types",
            "tp_basic::net_recv",
            "tp_basic::quiet",
            "tp_basic::vfs_open"
        ]
    );
    let src =
        std::fs::read_to_string(repo().join("testprogs/tracepoints/src/bin/tp_basic.rs")).unwrap();
    for t in tps {
        let short = t["name"].as_str().unwrap().rsplit("::").next().unwrap();
        let line = src
            .lines()
            .position(|l| {
                l.contains(&format!("tracepoint!({short},"))
                    || l.contains(&format!("tracepoint!(pub(crate) {short},"))
            })
            .unwrap()
            + 1;
        assert_eq!(t["line"].as_u64(), Some(line as u64), "{short}");
        assert!(t["file"].as_str().unwrap().ends_with("tp_basic.rs"));
        assert!(
            !t["sites"].as_array().unwrap().is_empty(),
            "{short} has a site"
        );
    }
    let vfs = tps
        .iter()
        .find(|t| t["name"] == "tp_basic::vfs_open")
        .unwrap();
    assert_eq!(
        vfs["args"],
        serde_json::json!([{"name": "path", "type": "str"}, {"name": "flags", "type": "u32"}])
    );
    let net = tps
        .iter()
        .find(|t| t["name"] == "tp_basic::net_recv")
        .unwrap();
    assert_eq!(net["format"], "conn={conn} bytes={bytes}");
    let fns: Vec<&str> = j["functions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["name"].as_str().unwrap())
        .collect();
    assert!(
        fns.contains(&"tp_basic::work") && fns.contains(&"tp_basic::main"),
        "{fns:?}"
    );
    assert!(
        !fns.iter().any(|f| f.contains("ferrotrace")),
        "the tracer's own functions are not listed"
    );
    // Text form.
    let out = ferrotrace().arg("list").arg(&prog).output().unwrap();
    let s = text(&out.stdout);
    assert!(
        s.contains("tp_basic::vfs_open(path: &str, flags: u32)"),
        "{s}"
    );
}

#[test]
fn toggling_a_site_while_four_threads_run_through_it_is_safe() {
    let dir = scratch("tp_stress");
    let prog = testprog("tp_stress");
    let (out, trace) = record(&dir, &["--trace", "stress"], &prog, &["3000"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("toggles=3000"));
    let t = Trace::open(&trace).unwrap();
    assert!(t.end().is_some() && t.truncation().is_none());
    let stress_id = t
        .tracepoints()
        .values()
        .find(|d| d.name == "tp_stress::stress")
        .unwrap()
        .id;
    let mut total = 0;
    for &tid in t.threads().keys() {
        let mut last: Option<(u64, u64)> = None;
        for e in t.thread_events(tid).unwrap() {
            let e = e.unwrap();
            if e.kind != EventKind::Tracepoint {
                continue;
            }
            assert_eq!(e.id, stress_id);
            let (_, vals) = decode(&t, &e).unwrap();
            let vals = vals.expect("well-formed payload");
            let [(_, Value::Unsigned(th)), (_, Value::Unsigned(seq)), (_, Value::Unsigned(check))] =
                vals.as_slice()
            else {
                panic!("unexpected values {vals:?}")
            };
            assert_eq!(*check, seq * 7 + th, "payload intact");
            if let Some((lt, ls)) = last {
                assert_eq!(lt, *th, "one worker per OS thread");
                assert!(*seq > ls, "in order");
            }
            last = Some((*th, *seq));
            total += 1;
        }
    }
    assert!(total > 0, "some events were recorded");
}

/// bpftrace, which scripts/setup.sh installs; attaching uprobes needs root, which the tests run as.
fn bpftrace() -> Command {
    let bpftrace = std::path::Path::new("/usr/bin/bpftrace");
    assert!(
        bpftrace.exists(),
        "bpftrace is missing: run scripts/setup.sh"
    );
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    assert_eq!(
        euid, 0,
        "bpftrace attaches uprobes only as root: run the tests as root"
    );
    Command::new(bpftrace)
}

/// The values of bpftrace's map lines `@NAME: VALUE` and `@NAME[KEY]: VALUE`.
fn bpftrace_maps(out: &str) -> std::collections::BTreeMap<String, u64> {
    out.lines()
        .filter_map(|l| {
            let (name, value) = l.strip_prefix('@')?.rsplit_once(": ")?;
            Some((name.to_string(), value.trim().parse().ok()?))
        })
        .collect()
}

/// A bpftrace script for `tp_usdt`: counts its `ping`s and `pong`s by parity and sums ping's argument.
fn ping_pong_script(prog: &std::path::Path) -> String {
    let p = prog.display();
    format!(
        "usdt:{p}:tp_usdt:ping {{ @pings = count(); @sum = sum(arg0); }} \
         usdt:{p}:tp_usdt:pong {{ @pongs[str(arg1)] = count(); }}"
    )
}

/// `out`, the output of [`ping_pong_script`] for `tp_usdt N`, saw every call with its arguments.
fn assert_every_ping_and_pong(out: &str, n: u64) {
    let maps = bpftrace_maps(out);
    assert_eq!(maps.get("pings"), Some(&n), "{out}");
    assert_eq!(maps.get("sum"), Some(&(0..n).sum::<u64>()), "{out}");
    assert_eq!(maps.get("pongs[even]"), Some(&n.div_ceil(2)), "{out}");
}

#[test]
fn bpftrace_attaches_to_the_usdt_probe_and_reads_arguments() {
    let dir = scratch("tp_usdt");
    let prog = testprog("tp_basic");
    let p = prog.display().to_string();
    let script = format!(
        "usdt:{p}:tp_basic:vfs_open {{ printf(\"open %s %d\\n\", str(arg0), arg1); }} \
         usdt:{p}:tp_basic:net_recv {{ printf(\"recv %d %d\\n\", arg0, arg1); }}"
    );
    let out = bpftrace()
        .arg("-e")
        .arg(&script)
        .arg("-c")
        .arg(format!("{p} 3"))
        .env(env::TRACE, "vfs_open,net_recv")
        .env(env::OUTPUT, dir.join("usdt.data"))
        .current_dir(&dir)
        .output()
        .unwrap();
    let s = text(&out.stdout);
    for i in 0..3 {
        assert!(
            s.contains(&format!("open /tmp/file{i} {i}\n")),
            "{s}\n{}",
            text(&out.stderr)
        );
        assert!(s.contains(&format!("recv {i} {}\n", i * 100)), "{s}");
    }
}

#[test]
fn bpftrace_started_with_the_program_counts_every_call_without_ferrotrace_recording() {
    let dir = scratch("tp_usdt_c");
    let prog = testprog("tp_usdt");
    let script = ping_pong_script(&prog);
    let mut child = bpftrace()
        .arg("-e")
        .arg(&script)
        .arg("-c")
        .arg(format!("{} 1000", prog.display()))
        .env_remove(env::TRACE)
        .env_remove(env::RUNTIME)
        // Without the watcher thread: the semaphores are up before the program starts, and the
        // runtime's constructor sees them.
        .env(env::USDT, env::USDT_OFF)
        .current_dir(&dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The program's input is bpftrace's: one line to start, then the end.
    child.stdin.take().unwrap().write_all(b"go\n").unwrap();
    let out = child.wait_with_output().unwrap();
    let s = text(&out.stdout);
    assert!(
        s.contains("pings=1000 pongs=500"),
        "{s}\n{}",
        text(&out.stderr)
    );
    assert_every_ping_and_pong(&s, 1000);
    assert!(
        std::fs::read_dir(&dir).unwrap().next().is_none(),
        "nothing was recorded"
    );
}

/// The 5 bytes at each site of `tracepoint` in the running process `pid` of `prog`.
fn site_bytes(prog: &std::path::Path, pid: u32, tracepoint: &str) -> Vec<[u8; 5]> {
    use std::io::{Read, Seek, SeekFrom};
    let list = ferrotrace()
        .args(["list", "--json", "--tracepoints"])
        .arg(prog)
        .output()
        .unwrap();
    let j: serde_json::Value = serde_json::from_slice(&list.stdout).unwrap();
    let sites: Vec<u64> = j["tracepoints"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == tracepoint)
        .unwrap_or_else(|| panic!("{tracepoint} in {j}"))["sites"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| u64::from_str_radix(a.as_str().unwrap().trim_start_matches("0x"), 16).unwrap())
        .collect();
    assert!(!sites.is_empty());
    // A position-independent executable: link-time address 0 is the start of its mapping at offset 0.
    let exe = std::fs::canonicalize(prog).unwrap();
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    let base = maps
        .lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() == 6 && f[5] == exe.to_str().unwrap() && f[2] == "00000000")
                .then(|| u64::from_str_radix(f[0].split('-').next().unwrap(), 16).unwrap())
        })
        .unwrap_or_else(|| panic!("no mapping of {} in\n{maps}", exe.display()));
    let mut mem = std::fs::File::open(format!("/proc/{pid}/mem")).unwrap();
    sites
        .iter()
        .map(|&site| {
            let mut b = [0u8; 5];
            mem.seek(SeekFrom::Start(base + site)).unwrap();
            mem.read_exact(&mut b).unwrap();
            b
        })
        .collect()
}

/// Waits (at most 10 s) until every site of `tracepoint` is a `jmp` (`fires`) or the NOP.
fn wait_for_sites(prog: &std::path::Path, pid: u32, tracepoint: &str, fires: bool) {
    const NOP5: [u8; 5] = [0x0f, 0x1f, 0x44, 0x00, 0x00];
    let start = std::time::Instant::now();
    loop {
        let bytes = site_bytes(prog, pid, tracepoint);
        let done = bytes
            .iter()
            .all(|b| if fires { b[0] == 0xe9 } else { *b == NOP5 });
        if done {
            return;
        }
        assert!(
            start.elapsed() < std::time::Duration::from_secs(10),
            "{tracepoint}'s sites are {bytes:x?}, expected {}",
            if fires { "jumps" } else { "NOPs" }
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

#[test]
fn bpftrace_attaching_to_a_running_program_makes_its_probes_fire_and_detaching_restores_the_nops() {
    let prog = testprog("tp_usdt");
    let mut program = Command::new(&prog)
        .arg("1000")
        .env_remove(env::TRACE)
        .env_remove(env::RUNTIME)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = program.id();
    let mut input = program.stdin.take().unwrap();
    let mut output = BufReader::new(program.stdout.take().unwrap()).lines();
    assert_eq!(output.next().unwrap().unwrap(), "ready");
    wait_for_sites(&prog, pid, "tp_usdt::ping", false);
    let threads: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .map(|t| std::fs::read_to_string(t.unwrap().path().join("comm")).unwrap())
        .collect();
    assert!(
        threads.iter().any(|t| t.trim() == "ferrotrace-usdt"),
        "the watcher runs: {threads:?}"
    );

    let script = ping_pong_script(&prog);
    let mut tracer = bpftrace()
        .arg("-p")
        .arg(pid.to_string())
        .arg("-e")
        .arg(&script)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut traced = BufReader::new(tracer.stdout.take().unwrap()).lines();
    let attaching = traced.next().unwrap().unwrap();
    assert!(attaching.starts_with("Attaching 2 probes"), "{attaching}");
    // The kernel raised the semaphores; the runtime's watcher patches the sites.
    wait_for_sites(&prog, pid, "tp_usdt::ping", true);
    wait_for_sites(&prog, pid, "tp_usdt::pong", true);
    input.write_all(b"go\n").unwrap();
    assert_eq!(output.next().unwrap().unwrap(), "pings=1000 pongs=500");

    // SAFETY: SIGINT to the bpftrace we started: it prints its maps, detaches and exits.
    unsafe { libc::kill(tracer.id() as i32, libc::SIGINT) };
    let s: String = traced.map(|l| l.unwrap() + "\n").collect();
    assert!(tracer.wait().unwrap().success());
    assert_every_ping_and_pong(&s, 1000);
    // No tracer left: the sites are NOPs again.
    wait_for_sites(&prog, pid, "tp_usdt::ping", false);
    wait_for_sites(&prog, pid, "tp_usdt::pong", false);
    drop(input);
    assert!(program.wait().unwrap().success());
}

/// The SDT probe `provider:name` of `prog`: file offsets of the probe and of its semaphore, and the
/// argument string.
fn sdt_probe(prog: &std::path::Path, provider: &str, name: &str) -> (u64, u64, String) {
    use object::{Object, ObjectSection};
    let bytes = std::fs::read(prog).unwrap();
    let elf = object::File::parse(&*bytes).unwrap();
    let offset_of = |vaddr: u64| {
        elf.sections()
            .find(|s| s.address() <= vaddr && vaddr < s.address() + s.size())
            .and_then(|s| Some(vaddr - s.address() + s.file_range()?.0))
            .unwrap_or_else(|| panic!("{vaddr:#x} is in no section"))
    };
    let notes = elf.section_by_name(".note.stapsdt").unwrap();
    let data = notes.data().unwrap();
    let u32_at = |p: usize| u32::from_le_bytes(data[p..p + 4].try_into().unwrap()) as usize;
    let u64_at = |p: usize| u64::from_le_bytes(data[p..p + 8].try_into().unwrap());
    let mut p = 0;
    while p + 12 <= data.len() {
        let (namesz, descsz) = (u32_at(p), u32_at(p + 4));
        let desc = p + 12 + namesz.next_multiple_of(4);
        let strings: Vec<&str> = std::str::from_utf8(&data[desc + 24..desc + descsz])
            .unwrap()
            .split('\0')
            .collect();
        if strings[0] == provider && strings[1] == name {
            return (
                offset_of(u64_at(desc)),
                offset_of(u64_at(desc + 16)),
                strings[2].to_string(),
            );
        }
        p = desc + descsz.next_multiple_of(4);
    }
    panic!("no SDT probe {provider}:{name} in {}", prog.display())
}

/// A uprobe event in tracefs, removed when dropped.
struct UprobeEvent(String, std::path::PathBuf);

impl UprobeEvent {
    fn add(definition: &str, name: &str) -> UprobeEvent {
        // tracefs is mounted here if nothing mounted it yet: the test passed only when another had
        // (ferrotrace profile's probe tests mount it, and run after this file in a workspace run).
        let events_file = ferrotrace_profile::probes::ensure_tracefs()
            .expect("tracefs (as root)")
            .join("uprobe_events");
        let mut events = std::fs::OpenOptions::new()
            .append(true)
            .open(&events_file)
            .expect("tracefs (as root)");
        // One write per command: tracefs parses each write on its own.
        events
            .write_all(format!("{definition}\n").as_bytes())
            .unwrap();
        UprobeEvent(name.to_string(), events_file)
    }
}

impl Drop for UprobeEvent {
    fn drop(&mut self) {
        if let Ok(mut events) = std::fs::OpenOptions::new().append(true).open(&self.1) {
            let _ = events.write_all(format!("-:{}\n", self.0).as_bytes());
        }
    }
}

#[test]
fn perf_records_the_sdt_probe_without_ferrotrace_recording() {
    // The event is what `perf probe -x PROG sdt_tp_usdt:ping` would create, with the probe's file
    // offset: perf 6.1 takes its address for its offset, which is wrong in binaries whose text does not
    // start at its file offset (rust-lld's layout), and its probe then never fires.
    let dir = scratch("tp_usdt_perf");
    let prog = testprog("tp_usdt");
    let (probe, semaphore, args) = sdt_probe(&prog, "tp_usdt", "ping");
    // One 8-byte argument in a register, whichever the compiler chose, fetched as `perf probe` would
    // from the note: `8@%rdi` is `%di` to the uprobe parser, `8@%r12` stays `%r12`.
    let register = args
        .strip_prefix("8@%")
        .unwrap_or_else(|| panic!("the probe's argument is not 8 bytes in a register: {args}"));
    let register = match register.strip_prefix('r') {
        Some(rest) if !rest.starts_with(|c: char| c.is_ascii_digit()) => rest,
        _ => register,
    };
    let group = format!("ft{}", std::process::id());
    let _event = UprobeEvent::add(
        &format!(
            "p:{group}/ping {}:{probe:#x}({semaphore:#x}) n=%{register}:u64",
            prog.display()
        ),
        &format!("{group}/ping"),
    );
    let data = dir.join("perf.data");
    let mut perf = Command::new("perf")
        .args(["record", "-q", "-e", &format!("{group}:ping"), "-o"])
        .arg(&data)
        .arg("--")
        .arg(&prog)
        .arg("100")
        .env_remove(env::TRACE)
        .env_remove(env::RUNTIME)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("perf is installed by scripts/setup.sh");
    perf.stdin.take().unwrap().write_all(b"go\n").unwrap();
    let out = perf.wait_with_output().unwrap();
    assert!(out.status.success() && text(&out.stdout).contains("pings=100"));
    let script = Command::new("perf")
        .args(["script", "-i"])
        .arg(&data)
        .output()
        .unwrap();
    let lines: Vec<String> = text(&script.stdout)
        .lines()
        .filter(|l| l.contains(&format!("{group}:ping")))
        .map(String::from)
        .collect();
    assert_eq!(lines.len(), 100, "{}", text(&script.stderr));
    for (i, l) in lines.iter().enumerate() {
        assert!(l.ends_with(&format!(" n={i}")), "{l}");
    }
}

#[test]
fn live_prints_events_while_the_program_runs() {
    let prog = testprog("tp_live");
    let mut child = ferrotrace()
        .args([
            "live", "--trace", "hello", "--trace", "bye", "-F", "greet", "--",
        ])
        .arg(&prog)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut seen = Vec::new();
    // The program waits for its stdin to close: everything up to here was printed while it ran.
    while seen
        .iter()
        .filter(|l: &&String| l.contains("tp_live::hello "))
        .count()
        < 3
    {
        match lines.next() {
            Some(Ok(l)) => seen.push(l),
            _ => panic!("live ended early; got {seen:?}"),
        }
    }
    assert!(
        child.try_wait().unwrap().is_none(),
        "the program is still running"
    );
    let hello: Vec<&String> = seen
        .iter()
        .filter(|l| l.contains("tp_live::hello"))
        .collect();
    for (n, l) in hello.iter().enumerate() {
        assert!(
            l.ends_with(&format!("tp_live::hello hello number {}", n + 1)),
            "{l}"
        );
        let line = LiveLine::parse(l);
        assert_eq!(line.thread, "tp_live", "{l}");
        assert_ne!(
            line.tid,
            child.id(),
            "the program's thread, not ferrotrace's: {l}"
        );
    }
    assert!(
        seen.iter().any(|l| l.contains("tp_live::greet")),
        "function entries with -F: {seen:?}"
    );
    let _ = stdin.write_all(b"go\n");
    drop(stdin);
    let rest: Vec<String> = lines.map(|l| l.unwrap()).collect();
    assert!(
        rest.iter().any(|l| l.ends_with("tp_live::bye(n=99)")),
        "{rest:?}"
    );
    assert!(child.wait().unwrap().success());
}

/// One event line of `ferrotrace live`: `TID THREAD-NAME CPU SECONDS EVENT`.
struct LiveLine<'a> {
    tid: u32,
    thread: &'a str,
    event: &'a str,
}

impl<'a> LiveLine<'a> {
    fn parse(line: &'a str) -> LiveLine<'a> {
        let mut fields = line.split_whitespace();
        let tid = fields.next().and_then(|t| t.parse().ok());
        let thread = fields.next();
        let cpu: Option<usize> = fields.next().and_then(|c| c.parse().ok());
        let secs: Option<f64> = fields.next().and_then(|t| t.parse().ok());
        let (Some(tid), Some(thread), Some(cpu), Some(secs)) = (tid, thread, cpu, secs) else {
            panic!("not a live event line: {line:?}");
        };
        let cpus = std::thread::available_parallelism().unwrap().get();
        assert!(cpu < cpus, "CPU {cpu} of {cpus} in {line:?}");
        assert!(secs >= 0.0);
        let event = fields.next().map_or("", |first| {
            let at = line.find(first).unwrap_or(0);
            &line[at..]
        });
        LiveLine { tid, thread, event }
    }
}

/// The events `ferrotrace live` said on standard error it did not print: `(not printed because the
/// output did not keep up, lost in the program's trace buffers)`.
fn live_losses(stderr: &str) -> (u64, u64) {
    let count = |why: &str| {
        stderr
            .lines()
            .filter(|l| l.contains(why))
            .map(|l| {
                l.strip_prefix("ferrotrace: ")
                    .and_then(|r| r.split_whitespace().next()?.parse::<u64>().ok())
                    .unwrap_or_else(|| panic!("loss line {l:?}"))
            })
            .sum()
    };
    (count(" events not printed: "), count(" events lost: "))
}

#[test]
fn a_slow_reader_never_stalls_the_program_and_live_counts_what_it_lost() {
    let prog = testprog("tp_basic");
    let ft = env!("CARGO_BIN_EXE_ferrotrace");
    // Nobody reads for a second while the program fires 200000 events: the pipe fills up.
    let out = Command::new("bash")
        .arg("-c")
        .arg(format!(
            "'{ft}' live --trace net_recv -- '{}' 200000 | (sleep 1; cat)",
            prog.display()
        ))
        .env(env::PRELOAD, preload())
        .output()
        .unwrap();
    let s = text(&out.stdout);
    assert!(s.contains("fired=800000"), "the program ran to the end");
    let printed = s
        .lines()
        .filter(|l| l.contains("tp_basic::net_recv conn="))
        .count() as u64;
    assert!(!s.contains("lost"), "losses are not in the output");
    let (not_printed, lost) = live_losses(&text(&out.stderr));
    assert!(
        not_printed > 0,
        "a slow reader loses events: {}",
        text(&out.stderr)
    );
    assert_eq!(
        printed + not_printed + lost,
        200000,
        "every event is printed or counted as lost"
    );
}

#[test]
fn live_prints_or_counts_every_event_of_a_burst_with_its_thread_and_cpu() {
    // A million events in a few milliseconds: more than the program's trace buffers hold in drop mode
    // and much more than a terminal takes.
    let out = ferrotrace()
        .args(["live", "--trace", "*", "--"])
        .arg(testprog("tp_basic"))
        .arg("250000")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let s = text(&out.stdout);
    let mut printed = 0u64;
    let mut expected_next = 0u64;
    for l in s.lines().filter(|l| !l.starts_with("fired=")) {
        let line = LiveLine::parse(l);
        assert_eq!(line.thread, "tp_basic", "{l}");
        printed += 1;
        // In order: the first events printed are the program's first.
        if let Some(i) = line
            .event
            .strip_prefix("tp_basic::vfs_open(path=\"/tmp/file")
            .and_then(|r| r.split('"').next()?.parse::<u64>().ok())
        {
            assert!(i >= expected_next, "{l} after file{expected_next}");
            expected_next = i + 1;
        }
    }
    assert!(s.contains("fired=1000000"));
    assert!(
        s.lines().any(|l| l.contains("/tmp/file0\"")),
        "the first event is printed"
    );
    let (not_printed, lost) = live_losses(&text(&out.stderr));
    assert_eq!(
        printed + not_printed + lost,
        1_000_000,
        "every event is printed or counted: {}",
        text(&out.stderr)
    );
}

#[test]
fn live_shows_the_cpu_each_event_happened_on() {
    // Pinned to the last CPU, every event (tracepoints and function entries and exits alike) says so:
    // a CPU field not recorded at the event would read 0.
    let cpus = std::thread::available_parallelism().unwrap().get();
    assert!(cpus >= 2, "this test tells CPUs apart: it needs two");
    let cpu = cpus - 1;
    let mut cmd = ferrotrace();
    cmd.args(["live", "--trace", "*", "-F", "greet", "--"])
        .arg(testprog("tp_live"))
        .stdin(Stdio::null());
    // SAFETY: sched_setaffinity on the child between fork and exec, with a cpu_set_t built by libc's
    // macros; no allocation.
    unsafe {
        use std::os::unix::process::CommandExt;
        cmd.pre_exec(move || {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(cpu, &mut set);
            if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let out = cmd.output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let s = text(&out.stdout);
    let events: Vec<&str> = s.lines().filter(|l| *l != "ready").collect();
    assert_eq!(
        events.len(),
        3 * 3 + 1,
        "3 × (greet entry, hello, greet exit), bye: {s}"
    );
    for l in events {
        LiveLine::parse(l);
        let field: usize = l.split_whitespace().nth(2).unwrap().parse().unwrap();
        assert_eq!(field, cpu, "{l}");
    }
}

#[test]
fn globs_and_filters_that_select_nothing_are_said() {
    let out = ferrotrace()
        .args([
            "live",
            "--trace",
            "nomatch*",
            "--trace",
            "net_recv",
            "-F",
            "no_such_fn",
            "--",
        ])
        .arg(testprog("tp_basic"))
        .arg("2")
        .output()
        .unwrap();
    assert!(out.status.success());
    let err = text(&out.stderr);
    assert!(
        err.contains("--trace 'nomatch*' selects none of the program's tracepoints (")
            && err.contains("tp_basic::net_recv"),
        "{err}"
    );
    assert!(err.contains("-F 'no_such_fn' selects none of the"), "{err}");
    assert_eq!(
        text(&out.stdout)
            .lines()
            .filter(|l| l.contains("tp_basic::net_recv conn="))
            .count(),
        2,
        "what the other glob selects is printed"
    );
    // Recording says the same; a filter that matches says nothing.
    let dir = scratch("tp_nomatch");
    let (out, _) = record(
        &dir,
        &[
            "--trace",
            "vfs_*",
            "--trace",
            "tp_basic::nope",
            "-F",
            "tp_basic::work",
        ],
        &testprog("tp_basic"),
        &["1"],
    );
    let err = text(&out.stderr);
    assert!(
        err.contains("--trace 'tp_basic::nope' selects none"),
        "{err}"
    );
    assert!(!err.contains("vfs_*") && !err.contains("-F"), "{err}");
}

#[test]
fn tracepoints_appear_in_replay_report_and_exports_with_their_arguments() {
    let dir = scratch("tp_analysis");
    let (out, trace) = record(
        &dir,
        &["--trace", "vfs_*", "--trace", "net_*"],
        &testprog("tp_basic"),
        &["3"],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let run = |args: &[&str]| ok(ft(&[args, &["-i", trace.to_str().unwrap()]].concat()));
    let replay = run(&["replay"]);
    for i in 0..3 {
        let call = format!(r#"/* tp_basic::vfs_open(path="/tmp/file{i}", flags={i}) */"#);
        assert!(
            replay.contains(&call),
            "replay shows {call} in place:\n{replay}"
        );
    }
    let report = run(&["report"]);
    let counted = |name: &str| {
        report
            .lines()
            .any(|l| l.split_whitespace().collect::<Vec<_>>() == ["3", name])
    };
    assert!(
        counted("tp_basic::vfs_open") && counted("tp_basic::net_recv"),
        "{report}"
    );
    let json: serde_json::Value = serde_json::from_str(&run(&["report", "--json"])).unwrap();
    assert!(json["tracepoints"]
        .as_array()
        .unwrap()
        .contains(&serde_json::json!({"name": "tp_basic::vfs_open", "count": 3})));

    let chrome = dir.join("t.json");
    run(&["dump", "--format", "chrome", "-o", chrome.to_str().unwrap()]);
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&chrome).unwrap()).unwrap();
    let instants: Vec<&serde_json::Value> = doc["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["ph"] == "i" && e["name"] == "tp_basic::vfs_open")
        .collect();
    assert_eq!(instants.len(), 3);
    assert_eq!(
        instants[2]["args"],
        serde_json::json!({"path": "/tmp/file2", "flags": 2})
    );

    let perfetto = dir.join("t.pb");
    run(&[
        "dump",
        "--format",
        "perfetto",
        "--uncompressed",
        "-o",
        perfetto.to_str().unwrap(),
    ]);
    let decoded = protoc_decode(&std::fs::read(&perfetto).unwrap(), &dir);
    assert_eq!(
        decoded.matches("name: \"tp_basic::net_recv\"").count(),
        3,
        "{decoded}"
    );
    assert!(
        decoded.contains("string_value: \"/tmp/file1\""),
        "arguments as debug annotations"
    );
    assert!(decoded.contains("name: \"bytes\"") && decoded.contains("uint_value: 200"));
}

#[test]
fn tracepoints_toggled_while_libraries_are_loaded_and_patched() {
    // Two threads patch code at once: one toggles a tracepoint, the other dlopens libraries whose sleds
    // the runtime patches. Both go through the one text patcher, so neither restores a page's
    // protection in the middle of the other's writes (a fault), and both sets of patches hold.
    let dir = scratch("tp_dlopen");
    let (out, trace) = record(
        &dir,
        &["--trace", "tick"],
        &testprog("tp_dlopen"),
        &["300", dir.to_str().unwrap(), "8"],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).starts_with("toggles=300 libraries=8 "));
    let t = Trace::open(&trace).expect("trace");
    assert!(t.end().is_some());
    assert_eq!(nested_counts(&t, "ft_xlib::xlib_step"), (80, 80));
    let libs = t
        .modules()
        .iter()
        .filter(|m| m.path.contains("libxlib"))
        .count();
    assert_eq!(libs, 8, "every copy found by a rescan");
    // The final `tick` fires after the toggler has left it enabled.
    let ticks = t
        .thread_events(t.session().pid)
        .unwrap()
        .filter(|e| e.as_ref().unwrap().kind == EventKind::Tracepoint)
        .count();
    assert!(ticks >= 1, "{ticks}");
}
