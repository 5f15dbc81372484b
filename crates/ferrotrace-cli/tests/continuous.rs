//! `ferrotrace profile --bpf --every PERIOD --parquet DIR` (root needed): periods written as parts
//! of a hive-partitioned Parquet dataset, read back by DuckDB and `report -i DIR`; a run killed
//! mid-period leaves only whole parts. The profiler follows one busy process (`-p`), not the whole
//! machine (`-a`, the same loop): each period starts by reading the mappings of every process it
//! profiles, which on a loaded machine takes seconds per period with `-a`.

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

/// Starts the continuous profiler of process `pid` into `dir` with a period of `every`.
fn start(dir: &Path, every: &str, pid: u32) -> Child {
    default_signals(&mut ferrotrace())
        .args(["profile", "--bpf", "-p", &pid.to_string(), "--every", every])
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
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    let rows = duckdb_parts(&ds);
    assert_eq!(rows.len(), found.len(), "{rows:?}");
    let mut samples = 0;
    for (h, date, hour, part, n) in &rows {
        assert_eq!(h, host.trim());
        assert_eq!(date.len(), 10, "{date}");
        assert!(hour.parse::<u32>().unwrap() < 24);
        assert!(part.starts_with("part-"), "{part}");
        assert!(*n > 0, "{part}: samples in every period");
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
