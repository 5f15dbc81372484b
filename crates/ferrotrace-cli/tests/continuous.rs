//! `ferrotrace profile [--bpf] --every PERIOD --parquet DIR` (root needed): periods of one recording
//! written as parts of a hive-partitioned Parquet dataset, read back by DuckDB and `report -i DIR`;
//! each period ends where the next begins, every probe hit lands in exactly one of them, and the
//! eBPF backend builds its unwind tables once; a run killed mid-period leaves only whole parts. The
//! profiler follows one process (`-p`), not the whole machine (`-a`, the same loop), whose samples
//! the test could not count.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

fn p(path: &Path) -> &str {
    path.to_str().unwrap()
}

const SIGINT: i32 = 2;

/// The tables every part holds.
const TABLES: [&str; 9] = [
    "calls",
    "samples",
    "stacks",
    "allocations",
    "events",
    "samplers",
    "threads",
    "functions",
    "metadata",
];

/// The parts in `dir`: `host=*/date=*/hour=*/part-*` directories.
fn parts(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let level = |d: &Path, prefix: &str| -> Vec<PathBuf> {
        let Ok(entries) = std::fs::read_dir(d) else {
            return Vec::new();
        };
        let mut v: Vec<PathBuf> = entries
            .map(|e| e.unwrap().path())
            .filter(|e| e.file_name().unwrap().to_str().unwrap().starts_with(prefix))
            .collect();
        v.sort();
        v
    };
    for host in level(dir, "host=") {
        for date in level(&host, "date=") {
            for hour in level(&date, "hour=") {
                found.extend(level(&hour, "part-"));
            }
        }
    }
    found
}

/// Starts the continuous profiler (eBPF backend) of process `pid` into `dir` with a period of
/// `every`.
fn start(dir: &Path, every: &str, pid: u32) -> Child {
    start_with(dir, every, pid, &["--bpf"])
}

/// Starts the continuous profiler of process `pid` into `dir` with a period of `every` and the
/// options `opts`.
fn start_with(dir: &Path, every: &str, pid: u32, opts: &[&str]) -> Child {
    default_signals(&mut ferrotrace())
        .args(["profile", "-p", &pid.to_string(), "--every", every])
        .args(opts)
        .args(["--parquet", p(dir)])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Waits until `dir` holds `n` parts, while `profiler` runs.
fn wait_for_parts(dir: &Path, n: usize, profiler: &mut Child) {
    let t = Instant::now();
    while parts(dir).len() < n {
        if let Some(status) = profiler.try_wait().unwrap() {
            panic!("the profiler ended ({status}) before {n} parts");
        }
        assert!(
            t.elapsed() < Duration::from_secs(300),
            "{n} parts in {}",
            dir.display()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// fib computing fib(50): busy for far longer than any test.
fn busy() -> Child {
    Command::new(testprog("fib"))
        .arg("50")
        .stdout(Stdio::null())
        .spawn()
        .unwrap()
}

/// Samples in each part, by DuckDB with hive partitioning: (host, date, hour, part, samples).
fn duckdb_parts(dir: &Path) -> Vec<(String, String, String, String, u64)> {
    let out = duckdb(&format!(
        "import duckdb\n\
         q = \"select host, date::varchar, hour::varchar, split_part(filename, '/', -2), count(*) \
         from read_parquet('{}/host=*/date=*/hour=*/part-*/samples.parquet', hive_partitioning=true, \
         filename=true) group by all order by 4\"\n\
         for r in duckdb.sql(q).fetchall(): print('\\t'.join(map(str, r)))",
        p(dir)
    ));
    out.lines()
        .map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            (
                f[0].into(),
                f[1].into(),
                f[2].into(),
                f[3].into(),
                f[4].parse().unwrap(),
            )
        })
        .collect()
}

/// Each part's period, by DuckDB from its metadata: (part, start_ns, end_ns) on CLOCK_MONOTONIC, in
/// time order.
fn periods(dir: &Path) -> Vec<(String, u64, u64)> {
    let out = duckdb(&format!(
        "import duckdb\n\
         q = \"select split_part(filename, '/', -2), start_ns, start_ns + duration_ns from \
         read_parquet('{}/host=*/date=*/hour=*/part-*/metadata.parquet', filename=true) \
         order by 2\"\n\
         for r in duckdb.sql(q).fetchall(): print('\\t'.join(map(str, r)))",
        p(dir)
    ));
    out.lines()
        .map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            (f[0].into(), f[1].parse().unwrap(), f[2].parse().unwrap())
        })
        .collect()
}

/// One recording cut into periods: each period's trace ends at the clock reading at which the
/// next one's begins (a session per period left the time to start one between them), each part
/// is a run of its own (stack ids are interned afresh per period, so a join on the dataset's key
/// `(run, stack_id)` would match another period's stacks if two parts shared one), and every
/// sample's stack is in its own part's stacks table by that key.
fn assert_periods_follow_each_other(dir: &Path) {
    let found = periods(dir);
    assert!(found.len() >= 2, "{found:?}");
    for w in found.windows(2) {
        assert_eq!(w[0].2, w[1].1, "{} ends where {} begins", w[0].0, w[1].0);
    }
    let out = duckdb(&format!(
        "import duckdb\n\
         parts = \"read_parquet('{d}/host=*/date=*/hour=*/part-*/metadata.parquet')\"\n\
         print(duckdb.sql(f'select count(distinct run) from {{parts}}').fetchall()[0][0])\n\
         q = \"select count(*) from read_parquet('{d}/host=*/date=*/hour=*/part-*/samples.parquet', \
         filename=true) x anti join read_parquet('{d}/host=*/date=*/hour=*/part-*/stacks.parquet', \
         filename=true) s on split_part(x.filename, '/', -2) = split_part(s.filename, '/', -2) \
         and x.run = s.run and x.stack_id = s.stack_id where x.stack_id is not null\"\n\
         print(duckdb.sql(q).fetchall()[0][0])",
        d = p(dir)
    ));
    assert_eq!(
        out.split_whitespace().collect::<Vec<_>>(),
        [found.len().to_string().as_str(), "0"],
        "runs of the {} parts, and samples whose stack is not in their part",
        found.len()
    );
}

/// The unwind tables each part's period built, from the profiler's "wrote PART (N samples, M
/// unwind tables built[, K freed])" lines, in the periods' order.
fn tables_built(stderr: &str) -> Vec<u64> {
    stderr
        .lines()
        .filter(|l| l.starts_with("ferrotrace: wrote "))
        .map(|l| {
            let n = l
                .split_once(" samples, ")
                .and_then(|(_, t)| t.split_once(" unwind tables built"))
                .unwrap_or_else(|| panic!("{l}"))
                .0;
            n.parse().unwrap()
        })
        .collect()
}

#[test]
fn periods_become_whole_parts_that_duckdb_and_report_read() {
    let dir = scratch("continuous");
    let ds = dir.join("ds");
    // A program with a known hot function, busy through every period.
    let mut busy = busy();
    let mut profiler = start(&ds, "1s", busy.id());
    wait_for_parts(&ds, 2, &mut profiler);
    kill(profiler.id() as i32, SIGINT);
    let out = profiler.wait_with_output().unwrap();
    let _ = busy.kill();
    let _ = busy.wait();
    assert!(out.status.success(), "{}", text(&out.stderr));

    // Every part is whole, under its host, date and hour; the staged traces are gone.
    let found = parts(&ds);
    assert!(found.len() >= 2, "{found:?}");
    for part in &found {
        for t in TABLES {
            assert!(
                part.join(format!("{t}.parquet")).is_file(),
                "{}",
                part.display()
            );
        }
    }
    assert_eq!(
        std::fs::read_dir(ds.join(".staging")).unwrap().count(),
        0,
        "nothing left staged"
    );
    assert_periods_follow_each_other(&ds);
    // The busy program's tables (itself, libc, ld.so, the vDSO) in the first period, none after:
    // one recording, whose tables stay.
    let stderr = text(&out.stderr);
    let built = tables_built(&stderr);
    assert_eq!(built.len(), found.len(), "{stderr}");
    assert!(built[0] > 0, "{stderr}");
    assert!(built[1..].iter().all(|&n| n == 0), "{stderr}");
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    let rows = duckdb_parts(&ds);
    // Samples in every period but the last, which Ctrl-C may have cut to nothing (a part of no
    // samples has no row here).
    for part in &found[..found.len() - 1] {
        let name = part.file_name().unwrap().to_str().unwrap();
        assert!(
            rows.iter().any(|r| r.3 == name),
            "{name}: no samples in {rows:?}"
        );
    }
    let mut samples = 0;
    for (h, date, hour, part, n) in &rows {
        assert_eq!(h, host.trim());
        assert_eq!(date.len(), 10, "{date}");
        assert!(hour.parse::<u32>().unwrap() < 24);
        assert!(part.starts_with("part-"), "{part}");
        samples += n;
    }

    // Each part says the machine and boot it was recorded in, and the build id of each frame's
    // module: the program's is its ELF note's.
    let out = duckdb(&format!(
        "import duckdb\n\
         q = \"select distinct hostname, boot_id from \
         read_parquet('{}/host=*/date=*/hour=*/part-*/metadata.parquet', hive_partitioning=false)\"\n\
         for r in duckdb.sql(q).fetchall(): print('\\t'.join(map(str, r)))",
        p(&ds)
    ));
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap();
    assert_eq!(out.trim(), format!("{}\t{}", host.trim(), boot.trim()));
    // readelf's word for it.
    let notes = Command::new("readelf")
        .arg("-n")
        .arg(testprog("fib"))
        .output()
        .expect("readelf");
    let fib_build_id = text(&notes.stdout)
        .lines()
        .find_map(|l| l.trim().strip_prefix("Build ID: ").map(str::to_string))
        .expect("fib has a build id");
    let out = duckdb(&format!(
        "import duckdb\n\
         q = \"select distinct build_id from \
         read_parquet('{}/host=*/date=*/hour=*/part-*/stacks.parquet', hive_partitioning=false) \
         where function = 'fib::fib'\"\n\
         for r in duckdb.sql(q).fetchall(): print(r[0])",
        p(&ds)
    ));
    assert_eq!(out.trim(), fib_build_id);

    // report reads the dataset: every part's samples, the busy program's hot function among them.
    let report: serde_json::Value =
        serde_json::from_str(&ok(ft(&["report", "--json", "-i", p(&ds)]))).unwrap();
    assert_eq!(report["samples"].as_u64().unwrap(), samples);
    let fib = report["functions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["function"] == "fib::fib")
        .unwrap_or_else(|| panic!("fib::fib not in {report}"));
    assert!(fib["self"].as_u64().unwrap() > 0);
}

/// Every hit of a uprobe is in exactly one period, on both backends: `ticks` calls its probed
/// function from before the end of one period until after the end of two more, and the parts'
/// hits add up to what it says it made. The recording ends with the process followed: its last
/// period is written too.
#[test]
fn every_probe_hit_lands_in_exactly_one_period_on_both_backends() {
    const SIGUSR1: i32 = 10;
    const SIGUSR2: i32 = 12;
    let dir = scratch("continuous_hits");
    let exe = build_c(
        &dir,
        "gcc",
        "ticks.c",
        "ticks",
        &["-O2", "-g", "-fno-omit-frame-pointer"],
    );
    let probe = format!("uprobe:{}:tick", p(&exe));
    for backend in [&["--bpf"][..], &["--call-graph", "fp"]] {
        let ds = dir.join(format!("ds{}", backend.len()));
        let mut ticks = Command::new(&exe).stdout(Stdio::piped()).spawn().unwrap();
        let mut ready = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(ticks.stdout.as_mut().unwrap()),
            &mut ready,
        )
        .unwrap();
        assert_eq!(ready, "ready\n");
        let mut opts = vec!["-e", &probe];
        opts.extend_from_slice(backend);
        let mut profiler = start_with(&ds, "1s", ticks.id(), &opts);
        // Recording: a period is over. The hits begin in the period after it or the next (its
        // part is written while the next period records), and go on past the end of two more.
        wait_for_parts(&ds, 1, &mut profiler);
        kill(ticks.id() as i32, SIGUSR1);
        wait_for_parts(&ds, 4, &mut profiler);
        kill(ticks.id() as i32, SIGUSR2);
        let said = text(&ticks.wait_with_output().unwrap().stdout);
        let made: u64 = said
            .trim()
            .strip_prefix("ticks=")
            .unwrap_or_else(|| panic!("{said}"))
            .parse()
            .unwrap();
        // The process ended: so does the recording, its last period written.
        let t = Instant::now();
        while profiler.try_wait().unwrap().is_none() {
            assert!(
                t.elapsed() < Duration::from_secs(120),
                "the profiler still runs after its process ended"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        let out = profiler.wait_with_output().unwrap();
        let stderr = text(&out.stderr);
        assert!(out.status.success(), "{backend:?}: {stderr}");

        let hits: Vec<u64> = duckdb_parts(&ds).iter().map(|r| r.4).collect();
        assert_eq!(hits.iter().sum::<u64>(), made, "{backend:?}: {hits:?}");
        assert!(
            hits.iter().filter(|&&n| n > 0).count() >= 2,
            "{backend:?}: the hits span periods: {hits:?}"
        );
        assert_periods_follow_each_other(&ds);
        let report: serde_json::Value =
            serde_json::from_str(&ok(ft(&["report", "--json", "-i", p(&ds)]))).unwrap();
        assert_eq!(report["samples"].as_u64().unwrap(), made, "{backend:?}");
        let tick = report["functions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["function"] == "tick")
            .unwrap_or_else(|| panic!("tick not in {report}"));
        assert_eq!(tick["self"].as_u64().unwrap(), made, "{backend:?}");
        if backend == ["--bpf"] {
            let built = tables_built(&stderr);
            assert!(built.len() >= 5 && built[0] > 0, "{stderr}");
            assert!(built[1..].iter().all(|&n| n == 0), "{stderr}");
        }
    }
}

#[test]
fn a_run_killed_mid_period_leaves_only_whole_parts() {
    let dir = scratch("continuous_killed");
    let ds = dir.join("ds");
    let mut busy = busy();
    let mut profiler = start(&ds, "2s", busy.id());
    wait_for_parts(&ds, 1, &mut profiler);
    // Mid-period, and maybe while a part is being written.
    std::thread::sleep(Duration::from_millis(700));
    let _ = profiler.kill();
    let _ = profiler.wait();
    let _ = busy.kill();
    let _ = busy.wait();
    let found = parts(&ds);
    assert!(!found.is_empty());
    for part in &found {
        for t in TABLES {
            assert!(
                part.join(format!("{t}.parquet")).is_file(),
                "{}",
                part.display()
            );
        }
    }
    // DuckDB reads every part (a torn file would fail the query): one metadata row each.
    let out = duckdb(&format!(
        "import duckdb\nprint(duckdb.sql(\"select count(*) from \
         read_parquet('{}/host=*/date=*/hour=*/part-*/metadata.parquet')\").fetchall()[0][0])",
        p(&ds)
    ));
    assert_eq!(out.trim(), found.len().to_string());
    for part in &found {
        duckdb(&format!(
            "import duckdb\nduckdb.sql(\"select * from read_parquet('{}/*.parquet', union_by_name=true)\").fetchall()",
            p(part)
        ));
    }
}
