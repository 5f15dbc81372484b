//! Exports opened by the viewers people use: speedscope (from npm) in headless Chromium (Debian),
//! served over loopback. scripts/setup.sh installs both.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;

/// The speedscope version scripts/setup.sh installs.
const SPEEDSCOPE: &str = "speedscope@1.22.2";

/// Where scripts/setup.sh installs the test tools from npm.
fn tools_dir() -> PathBuf {
    std::env::var_os("FERROTRACE_TEST_TOOLS").map_or_else(
        || PathBuf::from("/usr/local/lib/ferrotrace-test-tools"),
        PathBuf::from,
    )
}

/// speedscope's web app (its `index.html` directory), installing it with npm if setup has not.
fn speedscope() -> Result<PathBuf, String> {
    let app = tools_dir().join("node_modules/speedscope/dist/release");
    if app.join("index.html").is_file() {
        return Ok(app);
    }
    let out = Command::new("npm")
        .args(["install", "--no-audit", "--no-fund", "--prefix"])
        .arg(tools_dir())
        .arg(SPEEDSCOPE)
        .output()
        .map_err(|e| format!("npm: {e}"))?;
    if !out.status.success() || !app.join("index.html").is_file() {
        return Err(format!(
            "npm install {SPEEDSCOPE} failed: {}",
            text(&out.stderr)
        ));
    }
    Ok(app)
}

/// Serves the files of `dirs` (first match wins) on a loopback port until the returned flag is set.
fn serve(dirs: Vec<PathBuf>) -> (u16, Arc<AtomicBool>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("loopback port");
    listener.set_nonblocking(true).expect("nonblocking");
    let port = listener.local_addr().expect("addr").port();
    let stop = Arc::new(AtomicBool::new(false));
    let stop2 = stop.clone();
    std::thread::spawn(move || {
        let deadline = Instant::now() + Duration::from_secs(300);
        while !stop2.load(Ordering::Relaxed) && Instant::now() < deadline {
            let Ok((stream, _)) = listener.accept() else {
                std::thread::sleep(Duration::from_millis(5));
                continue;
            };
            let _ = stream.set_nonblocking(false);
            let mut reader = BufReader::new(&stream);
            let mut request = String::new();
            let _ = reader.read_line(&mut request);
            let mut header = String::new();
            while reader.read_line(&mut header).is_ok_and(|n| n > 2) {
                header.clear();
            }
            let path = request.split_whitespace().nth(1).unwrap_or("/");
            let name = path
                .split(['?', '#'])
                .next()
                .unwrap_or("")
                .trim_start_matches('/');
            let file = dirs
                .iter()
                .map(|d| d.join(name))
                .find(|f| !name.contains("..") && f.is_file());
            let mut stream = &stream;
            match file.and_then(|f| std::fs::read(&f).ok().map(|b| (f, b))) {
                Some((f, body)) => {
                    let kind = match f.extension().and_then(|e| e.to_str()) {
                        Some("html") => "text/html",
                        Some("js") => "application/javascript",
                        Some("css") => "text/css",
                        Some("json") => "application/json",
                        Some("png") => "image/png",
                        Some("woff2") => "font/woff2",
                        _ => "application/octet-stream",
                    };
                    let _ = write!(
                        stream,
                        "HTTP/1.1 200 OK\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                        body.len()
                    );
                    let _ = stream.write_all(&body);
                }
                None => {
                    let _ = stream.write_all(
                        b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                    );
                }
            }
        }
    });
    (port, stop)
}

/// Opens `url` in headless Chromium with a fresh profile; returns (DOM after load, console log).
fn chromium(url: &str, dir: &Path) -> (String, String) {
    let profile = dir.join("chromium-profile");
    let _ = std::fs::remove_dir_all(&profile);
    let child = Command::new("chromium")
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--no-first-run",
            "--disable-component-update",
            "--disable-sync",
            "--enable-logging=stderr",
            "--v=0",
            "--virtual-time-budget=30000",
            "--dump-dom",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(url)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("chromium (scripts/setup.sh installs it)");
    let pid = child.id();
    let killer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_secs(180));
        // A hung browser must not hang the suite (the wait below then returns).
        let _ = Command::new("kill").arg(pid.to_string()).status();
    });
    let out = child.wait_with_output().expect("chromium output");
    drop(killer);
    (text(&out.stdout), text(&out.stderr))
}

/// Loads the Chrome JSON export of `trace` in speedscope and checks that it shows the profile with
/// every begin paired with its end.
fn assert_loads_in_speedscope(app: PathBuf, trace: &Path, dir: &Path) {
    let json = dir.join("trace.json");
    let dump = ft(&[
        "dump",
        "--format",
        "chrome",
        "-i",
        trace.to_str().unwrap(),
        "-o",
        json.to_str().unwrap(),
    ]);
    assert!(dump.status.success(), "{}", text(&dump.stderr));
    let (port, stop) = serve(vec![app, dir.to_path_buf()]);
    let base = format!("http://127.0.0.1:{port}");
    let (dom, console) = chromium(
        &format!("{base}/index.html#profileURL={base}/trace.json"),
        dir,
    );
    stop.store(true, Ordering::Relaxed);
    let console: Vec<&str> = console.lines().filter(|l| l.contains(":CONSOLE")).collect();
    assert!(
        console
            .iter()
            .any(|l| l.contains("Importing as Trace Event Format profile")),
        "speedscope did not import the file:\n{}\n{dom}",
        console.join("\n")
    );
    let complaints: Vec<&&str> = console
        .iter()
        .filter(|l| {
            l.contains("Tried to end") || l.contains("Failed to load") || l.contains("still open")
        })
        .collect();
    assert!(
        complaints.is_empty(),
        "speedscope could not pair the events ({} complaints), e.g. {:?}",
        complaints.len(),
        complaints.iter().take(3).collect::<Vec<_>>()
    );
    assert!(
        dom.contains("<title>trace.json - speedscope</title>")
            && dom.contains("Time Order")
            && !dom.contains("Something went wrong"),
        "speedscope did not show the profile:\n{dom}"
    );
}

#[test]
fn chrome_json_loads_in_speedscope() {
    let app = match speedscope() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("\n\n*** SKIPPED chrome_json_loads_in_speedscope: speedscope cannot be installed: {e} ***\n");
            return;
        }
    };
    let dir = scratch("speedscope");
    // 21,891 calls of fib nest as deep as speedscope recurses if it cannot pair ends with begins.
    let (out, trace) = record(&dir, &[], &testprog("fib"), &["20"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_loads_in_speedscope(app, &trace, &dir);
}

#[test]
fn chrome_json_of_serde_json_regex_rayon_loads_in_speedscope() {
    // Three threads, 117,000 calls, names with every kind of Rust syntax.
    let app = speedscope().expect("speedscope (scripts/setup.sh installs it)");
    let dir = scratch("speedscope_workload");
    assert_loads_in_speedscope(app, &workload_trace(), &dir);
}

/// The text each frame of the flame graph `svg` shows once its script has fitted the labels to the
/// frames, as Chromium renders it: (title, shown text).
fn flame_as_shown(svg: &Path, dir: &Path) -> Vec<(String, String)> {
    let (dom, _) = chromium(&format!("file://{}", svg.display()), dir);
    let unescape = |s: &str| {
        s.replace("&lt;", "<")
            .replace("&gt;", ">")
            .replace("&quot;", "\"")
            .replace("&amp;", "&")
    };
    let mut frames = Vec::new();
    for g in dom.split("<g>").skip(1) {
        let Some(title) = g
            .split_once("<title>")
            .and_then(|(_, rest)| rest.split_once("</title>"))
            .map(|(title, _)| title)
        else {
            continue;
        };
        // `<text .../>` when nothing fits, `<text ...>shown</text>` otherwise.
        let shown = match g.split_once("<text").map(|(_, t)| t.split_once('>')) {
            Some(Some((attrs, rest))) if !attrs.ends_with('/') => {
                rest.split_once("</text").map_or("", |(t, _)| t)
            }
            _ => "",
        };
        frames.push((unescape(title), unescape(shown)));
    }
    frames
}

#[test]
fn flame_labels_show_the_function_when_cut() {
    // inferno's script fits each label into its frame by cutting it from the left: a long Rust name
    // then showed the end of its generic arguments (`..d::StrRead>>`), never the function.
    let dir = scratch("flame_labels");
    let svg = dir.join("flame.svg");
    let out = ft(&[
        "flame",
        "-i",
        workload_trace().to_str().unwrap(),
        "-o",
        svg.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let frames = flame_as_shown(&svg, &dir);
    assert!(frames.len() > 100, "{} frames", frames.len());
    for function in [
        "json_phase",
        "from_trait",
        "deserialize",
        "wait_until_cold",
        "bridge_producer_consumer::helper",
    ] {
        // The frames of the function itself, whether titled with its whole name (generic arguments
        // after it) or with a label.
        let shown: Vec<&(String, String)> = frames
            .iter()
            .filter(|(title, _)| {
                let name = title.rsplit_once(" (").map_or(title.as_str(), |(n, _)| n);
                name.ends_with(function) || name.contains(&format!("{function}::<"))
            })
            .collect();
        assert!(!shown.is_empty(), "no frame of {function}");
        // Wherever the frame is wide enough for more than its dots, the function's own name shows.
        for (title, text) in shown {
            let visible = text.trim_start_matches("..").trim_end();
            let own = function.rsplit("::").next().unwrap();
            if visible.len() >= own.len() {
                assert!(visible.ends_with(own), "{title} shows {text:?}, not {own}");
            }
        }
    }
}
