//! An existing distributed engine reads the continuous profiler's dataset (issue 40): three simulated
//! hosts, each a `ferrotrace profile --bpf -p PID --every 1s --parquet DS` run in a UTS namespace of
//! its own (`unshare --uts`, hostname `sim-a`, `sim-b`, `sim-c`, so the writer names the host
//! partition itself) following a program with a known hot function. Spark (PySpark in local mode),
//! DuckDB and `ferrotrace report --inline -i DS/host=H` must give each host the same functions with
//! the same sample counts and weights, the known hot function on top.
//!
//! Root is needed (`--bpf`, `unshare`). Spark needs a JDK and PySpark (scripts/setup.sh installs
//! both); without them the test says what is missing and passes, except under CI (`CI` set), where
//! setup.sh has run and their absence is a failure.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

fn p(path: &Path) -> &str {
    path.to_str().unwrap()
}

const SIGINT: i32 = 2;

/// A host's functions: function → (samples, weight).
type Functions = BTreeMap<String, (u64, u64)>;

/// The parts below `dir`, at any depth: directories holding a `samples.parquet`.
fn parts(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return found;
    };
    for e in entries {
        let path = e.unwrap().path();
        if path.join("samples.parquet").is_file() {
            found.push(path);
        } else if path.is_dir() {
            found.extend(parts(&path));
        }
    }
    found
}

/// What Spark needs and is missing here, with how to get it; None when both are there.
fn spark_missing() -> Option<String> {
    let runs = |cmd: &str, args: &[&str]| {
        Command::new(cmd)
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    let mut missing = Vec::new();
    if !runs("java", &["-version"]) {
        missing.push("a JDK (apt-get install openjdk-17-jre-headless)");
    }
    if !runs("python3", &["-c", "import pyspark"]) {
        missing.push("PySpark (pip install --break-system-packages pyspark)");
    }
    (!missing.is_empty()).then(|| {
        format!(
            "{}: run scripts/setup.sh, which installs what is missing",
            missing.join(" and ")
        )
    })
}

/// Profiles `pid` as host `host`: `ferrotrace profile --bpf -p PID --every 1s --parquet DS` in a UTS
/// namespace whose hostname is `host`, until `DS/host=HOST` holds two parts; then Ctrl-C, which
/// writes the period being recorded too.
fn profile_as_host(ds: &Path, host: &str, pid: u32) {
    let mut cmd = Command::new("unshare");
    // unshare and sh exec what follows: the child's pid is the profiler's.
    cmd.args(["--uts", "sh", "-c", "hostname \"$0\" && exec \"$@\"", host])
        .arg(env!("CARGO_BIN_EXE_ferrotrace"))
        .args(["profile", "--bpf", "-p", &pid.to_string(), "--every", "1s"])
        .args(["--parquet", p(ds)])
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut profiler = default_signals(&mut cmd).spawn().expect("unshare");
    let dir = ds.join(format!("host={host}"));
    let t = Instant::now();
    while parts(&dir).len() < 2 {
        if let Some(status) = profiler.try_wait().unwrap() {
            let out = profiler.wait_with_output().unwrap();
            panic!(
                "the profiler of {host} ended ({status}) before two parts: {}",
                text(&out.stderr)
            );
        }
        assert!(
            t.elapsed() < Duration::from_secs(300),
            "two parts of {host}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    kill(profiler.id() as i32, SIGINT);
    let out = profiler.wait_with_output().unwrap();
    assert!(out.status.success(), "{host}: {}", text(&out.stderr));
}

/// Rows `[host, function, samples, weight]`, one JSON array a line, as per-host functions.
fn by_host(out: &str) -> BTreeMap<String, Functions> {
    let mut hosts: BTreeMap<String, Functions> = BTreeMap::new();
    for line in out.lines() {
        let row: serde_json::Value = serde_json::from_str(line).unwrap();
        let n = |i: usize| -> u64 {
            match &row[i] {
                serde_json::Value::String(s) => s.parse().unwrap(),
                v => v.as_u64().unwrap(),
            }
        };
        let function = row[1].as_str().unwrap().to_string();
        let prev = hosts
            .entry(row[0].as_str().unwrap().to_string())
            .or_default()
            .insert(function, (n(2), n(3)));
        assert!(prev.is_none(), "one row per host and function: {line}");
    }
    hosts
}

/// The top functions query, the same text for Spark SQL and DuckDB over views `samples` and `stacks`
/// of the whole dataset (docs/format.md shows it): samples and weight per host and innermost function
/// at the sampled address (`report --inline`'s self), a sample without a stack as `[no stack]`.
const TOP_FUNCTIONS: &str = "\
select x.host, coalesce(s.function, '[no stack]') as function, count(*) as samples,
       sum(x.weight) as weight
from samples x left join stacks s
  on s.host = x.host and s.run = x.run and s.stack_id = x.stack_id
group by x.host, coalesce(s.function, '[no stack]')
order by x.host, samples desc, function";

/// The dataset's `samples` and `stacks` as Spark SQL views, hive partitions discovered from `basePath`
/// (one glob per table: the dataset's directory read whole would merge every table's columns).
const SPARK_VIEWS: &str = "\
for t in ('samples', 'stacks'):
    (spark.read.option('basePath', DS)
     .parquet(f'{DS}/host=*/date=*/hour=*/part-*/{t}.parquet')
     .createOrReplaceTempView(t))";

/// TOP_FUNCTIONS by Spark in local mode: one session, one core, 512 MB, no UI, warnings only;
/// bounded by `timeout` (the JVM is in the Python process's group, which timeout signals).
fn spark_top_functions(ds: &Path, dir: &Path) -> (BTreeMap<String, Functions>, Duration) {
    let script = dir.join("spark_top.py");
    std::fs::write(
        &script,
        format!(
            "import json, sys\n\
             from pyspark.sql import SparkSession\n\
             DS = sys.argv[1]\n\
             spark = (SparkSession.builder.master('local[1]').appName('ferrotrace-test')\n\
             \x20        .config('spark.ui.enabled', 'false')\n\
             \x20        .config('spark.ui.showConsoleProgress', 'false')\n\
             \x20        .config('spark.driver.memory', '512m')\n\
             \x20        .config('spark.sql.shuffle.partitions', '1')\n\
             \x20        .getOrCreate())\n\
             spark.sparkContext.setLogLevel('WARN')\n\
             {SPARK_VIEWS}\n\
             for r in spark.sql(\"\"\"{TOP_FUNCTIONS}\"\"\").collect():\n\
             \x20   print(json.dumps([r[0], r[1], r[2], str(r[3])]))\n\
             spark.stop()\n"
        ),
    )
    .unwrap();
    let t = Instant::now();
    let out = Command::new("timeout")
        .args(["-k", "10", "300", "python3"])
        .arg(&script)
        .arg(ds)
        // Spark binds to the machine's address otherwise, and warns that the hostname is loopback.
        .env("SPARK_LOCAL_IP", "127.0.0.1")
        .stdin(Stdio::null())
        .output()
        .expect("timeout python3");
    assert!(
        out.status.success(),
        "Spark ({}, 124: timed out after 300 s): {}",
        out.status,
        text(&out.stderr)
    );
    (by_host(&text(&out.stdout)), t.elapsed())
}

/// TOP_FUNCTIONS by DuckDB, the views over `read_parquet(…, hive_partitioning = true)`.
fn duckdb_top_functions(ds: &Path) -> BTreeMap<String, Functions> {
    let views: String = ["samples", "stacks"]
        .iter()
        .map(|t| {
            format!(
                "duckdb.sql(\"create view {t} as select * from read_parquet('{}/host=*/date=*/hour=*/part-*/{t}.parquet', hive_partitioning = true)\")\n",
                p(ds)
            )
        })
        .collect();
    by_host(&duckdb(&format!(
        "import duckdb, json\n{views}\
         for r in duckdb.sql(\"\"\"{TOP_FUNCTIONS}\"\"\").fetchall():\n\
         \x20   print(json.dumps([r[0], r[1], r[2], str(r[3])]))\n"
    )))
}

/// `ferrotrace report --json --inline -i DIR`: the functions with self samples, and the samples.
fn report_top_functions(dir: &Path) -> (Functions, u64, String) {
    let report: serde_json::Value =
        serde_json::from_str(&ok(ft(&["report", "--json", "--inline", "-i", p(dir)]))).unwrap();
    let functions = report["functions"].as_array().unwrap();
    let rows = functions
        .iter()
        .filter(|f| f["self"].as_u64().unwrap() > 0)
        .map(|f| {
            (
                f["function"].as_str().unwrap().to_string(),
                (
                    f["self"].as_u64().unwrap(),
                    f["self_weight"].as_u64().unwrap(),
                ),
            )
        })
        .collect();
    let top = functions[0]["function"].as_str().unwrap().to_string();
    (rows, report["samples"].as_u64().unwrap(), top)
}

/// The function with the most samples (the first by name among equals).
fn top(functions: &Functions) -> &str {
    functions
        .iter()
        .max_by(|a, b| a.1 .0.cmp(&b.1 .0).then(b.0.cmp(a.0)))
        .map(|(f, _)| f.as_str())
        .unwrap()
}

#[test]
fn spark_duckdb_and_report_agree_on_three_hosts_top_functions() {
    if let Some(missing) = spark_missing() {
        assert!(
            std::env::var_os("CI").is_none(),
            "Spark is needed under CI: {missing}"
        );
        eprintln!("spark test skipped: no {missing}");
        return;
    }
    let dir = scratch("spark");
    let ds = dir.join("ds");

    // Three hosts, each following a busy program with a known hot function: fib (Rust), fib (C,
    // gcc -O2 without frame pointers), mix (C, two spinning threads among idle ones).
    let fibcount = build_c(&dir, "gcc", "fibcount.c", "fibcount", &["-O2"]);
    let workpool = build_c(&dir, "gcc", "workpool.c", "workpool", &["-O2", "-pthread"]);
    let hosts: [(&str, PathBuf, &str, &str); 3] = [
        ("sim-a", testprog("fib"), "50", "fib::fib"),
        ("sim-b", fibcount, "60", "fib"),
        ("sim-c", workpool, "", "mix"),
    ];
    let t = Instant::now();
    for (host, exe, arg, _) in &hosts {
        let mut program: Child = Command::new(exe)
            .args((!arg.is_empty()).then_some(arg))
            // The work pool runs until its standard input says so: kept open while profiled.
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        profile_as_host(&ds, host, program.id());
        let _ = program.kill();
        let _ = program.wait();
    }
    eprintln!("three hosts profiled in {:?}", t.elapsed());

    let (spark, spark_took) = spark_top_functions(&ds, &dir);
    let duck = duckdb_top_functions(&ds);
    assert_eq!(
        spark.keys().collect::<Vec<_>>(),
        hosts.iter().map(|h| h.0).collect::<Vec<_>>(),
        "the three hosts, named by the writer"
    );
    for (host, _, _, hot) in &hosts {
        let (report, samples, report_top) = report_top_functions(&ds.join(format!("host={host}")));
        let (of_spark, of_duck) = (&spark[*host], &duck[*host]);
        eprintln!(
            "{host}: {} parts, {samples} samples; top {:?} by Spark, {:?} by DuckDB, {:?} by report",
            parts(&ds.join(format!("host={host}"))).len(),
            of_spark.iter().find(|(f, _)| f.as_str() == *hot),
            of_duck.iter().find(|(f, _)| f.as_str() == *hot),
            report.iter().find(|(f, _)| f.as_str() == *hot),
        );
        eprintln!("{host} by Spark: {of_spark:?}");
        assert_eq!(of_spark, of_duck, "{host}: Spark and DuckDB");
        assert_eq!(of_spark, &report, "{host}: Spark and report");
        assert_eq!(
            of_spark.values().map(|v| v.0).sum::<u64>(),
            samples,
            "{host}: every sample"
        );
        assert_eq!(top(of_spark), *hot, "{host}: {of_spark:?}");
        assert_eq!(report_top, *hot, "{host}");
    }
    eprintln!("Spark took {spark_took:?}");

    // The query and the views are docs/format.md's Spark SQL example.
    let doc = std::fs::read_to_string(repo().join("docs/format.md")).unwrap();
    for text in [TOP_FUNCTIONS, SPARK_VIEWS] {
        assert!(
            doc.contains(text),
            "docs/format.md shows Spark SQL's query as the test runs it:\n{text}"
        );
    }
}
