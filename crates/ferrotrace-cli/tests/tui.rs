//! `ferrotrace tui`: every view and key through ratatui's `TestBackend` on traces recorded from the
//! test programs, with `ferrotrace report`/`graph` as the oracle; then the real binary in a
//! pseudo-terminal (python3's `pty`).

mod common;

use std::path::Path;

use common::*;
use ferrotrace_cli::cmd::tui::app;
use ferrotrace_cli::cmd::Traces;
use ferrotrace_cli::tui::{App, View, MAX_FRAMES};
use ratatui::backend::TestBackend;
use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use ratatui::style::Modifier;
use ratatui::Terminal;

// Wide enough for every name of the test programs: a row is matched by how it ends.
const W: u16 = 300;
const H: u16 = 30;

/// The screen's rows as text, and which one is selected (drawn reversed; the status line, also
/// reversed, is left out).
fn screen(app: &mut App) -> (Vec<String>, Option<String>) {
    let mut term = Terminal::new(TestBackend::new(W, H)).unwrap();
    term.draw(|f| app.draw(f)).unwrap();
    let buf = term.backend().buffer().clone();
    let mut rows = Vec::new();
    let mut selected = None;
    for y in 0..H {
        let row: String = (0..W).map(|x| buf[(x, y)].symbol()).collect();
        let reversed = buf[(0, y)].modifier.contains(Modifier::REVERSED);
        if reversed && y + 1 < H {
            selected = Some(row.trim_end().to_string());
        }
        rows.push(row.trim_end().to_string());
    }
    (rows, selected)
}

fn text_of(app: &mut App) -> String {
    screen(app).0.join("\n")
}

fn selected(app: &mut App) -> String {
    screen(app).1.unwrap_or_default()
}

fn press(app: &mut App, code: KeyCode) -> bool {
    let quit = app.key(KeyEvent::from(code));
    app.settle();
    quit
}

fn typed(app: &mut App, s: &str) {
    for c in s.chars() {
        press(app, KeyCode::Char(c));
    }
}

/// The trace of `calltree` (known call tree, a worker thread).
fn calltree_trace(test: &str) -> std::path::PathBuf {
    let dir = scratch(test);
    let (out, trace) = record(&dir, &[], &testprog("calltree"), &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    trace
}

fn opened(trace: &Path, max_frames: usize) -> App {
    let mut app = app(trace, None, max_frames, &mut Traces::default()).expect("open the trace");
    app.settle();
    app
}

/// `ferrotrace report --json -s KEY`'s functions, in order.
fn report_order(trace: &Path, key: &str) -> Vec<String> {
    let json: serde_json::Value = serde_json::from_str(&ok(ft(&[
        "report",
        "--json",
        "-s",
        key,
        "-i",
        trace.to_str().unwrap(),
    ])))
    .unwrap();
    json["functions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["name"].as_str().unwrap().to_string())
        .collect()
}

/// The function name a selected report row ends with.
fn ends_with_name(row: &str, name: &str) -> bool {
    row.ends_with(name)
}

#[test]
fn report_view_sorts_moves_searches_and_quits() {
    let trace = calltree_trace("tui_report");
    let mut app = opened(&trace, MAX_FRAMES);
    assert_eq!(app.view(), View::Report);
    let (rows, sel) = screen(&mut app);
    assert!(rows[0].contains("[1 Report]"), "{rows:#?}");
    assert!(rows[1].contains("total*"), "{rows:#?}");
    let status = rows.last().unwrap();
    assert!(
        status.contains(trace.to_str().unwrap()) && status.contains("Report"),
        "{status}"
    );
    // Every sort key in turn, each row order the one `report -s` prints.
    for key in ["total", "self", "calls", "avg", "min", "max", "total"] {
        if key != "total" || !text_of(&mut app).contains("total*") {
            press(&mut app, KeyCode::Char('s'));
        }
        let (rows, sel) = screen(&mut app);
        assert!(rows[1].contains(&format!("{key}*")), "{key}: {}", rows[1]);
        let order = report_order(&trace, key);
        let sel = sel.unwrap();
        // Ties are ordered by name in both; the first row is the report's first.
        assert!(ends_with_name(&sel, &order[0]), "{key}: {sel} vs {order:?}");
    }
    let order = report_order(&trace, "total");
    assert!(ends_with_name(&sel.unwrap(), &order[0]));

    // Moving: every key lands on the row `report` has there.
    let at = |app: &mut App, i: usize| {
        let s = selected(app);
        assert!(ends_with_name(&s, &order[i]), "row {i}: {s}");
    };
    press(&mut app, KeyCode::Down);
    at(&mut app, 1);
    press(&mut app, KeyCode::Char('j'));
    at(&mut app, 2);
    press(&mut app, KeyCode::Char('k'));
    at(&mut app, 1);
    press(&mut app, KeyCode::Up);
    at(&mut app, 0);
    press(&mut app, KeyCode::End);
    at(&mut app, order.len() - 1);
    press(&mut app, KeyCode::Home);
    at(&mut app, 0);
    press(&mut app, KeyCode::PageDown);
    let body = (H - 3) as usize;
    at(&mut app, body.min(order.len() - 1));
    press(&mut app, KeyCode::PageUp);
    at(&mut app, 0);

    // Search as typed, then n and N through the matches, wrapping.
    press(&mut app, KeyCode::Char('/'));
    typed(&mut app, "WORKER");
    let status = screen(&mut app).0.last().unwrap().clone();
    assert!(status.contains("/WORKER"), "{status}");
    let matches: Vec<usize> = (0..order.len())
        .filter(|&i| order[i].to_lowercase().contains("worker"))
        .collect();
    assert!(matches.len() >= 2, "{order:?}");
    at(&mut app, matches[0]);
    press(&mut app, KeyCode::Enter);
    press(&mut app, KeyCode::Char('n'));
    at(&mut app, matches[1]);
    press(&mut app, KeyCode::Char('N'));
    at(&mut app, matches[0]);
    press(&mut app, KeyCode::Char('N'));
    at(&mut app, *matches.last().unwrap());
    press(&mut app, KeyCode::Char('/'));
    typed(&mut app, "no such function");
    press(&mut app, KeyCode::Enter);
    assert!(text_of(&mut app).contains("/no such function: not found"));

    // Help, closed by any key; then q, Esc and Ctrl-C end it.
    press(&mut app, KeyCode::Char('?'));
    assert!(text_of(&mut app).contains("keys"));
    assert!(
        !press(&mut app, KeyCode::Char('q')),
        "the key closes the help"
    );
    assert!(!text_of(&mut app).contains("any key closes"));
    assert!(press(&mut app, KeyCode::Char('q')));
    assert!(press(&mut app, KeyCode::Esc));
    assert!(app.key(KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL)));
}

#[test]
fn graph_view_shows_callers_and_callees_and_expands() {
    let trace = calltree_trace("tui_graph");
    let mut app = opened(&trace, MAX_FRAMES);
    // Tab and 1-4 switch views; the graph asks for a function first.
    press(&mut app, KeyCode::Tab);
    assert_eq!(app.view(), View::Graph);
    assert!(text_of(&mut app).contains("pick a function"));
    press(&mut app, KeyCode::BackTab);
    assert_eq!(app.view(), View::Report);
    for (k, v) in [
        ('3', View::Tree),
        ('4', View::Samples),
        ('2', View::Graph),
        ('1', View::Report),
    ] {
        press(&mut app, KeyCode::Char(k));
        assert_eq!(app.view(), v);
    }

    // Enter on calltree::run: its callers above (main), its callees below (a, b, c).
    press(&mut app, KeyCode::Char('/'));
    typed(&mut app, "calltree::run");
    press(&mut app, KeyCode::Enter);
    press(&mut app, KeyCode::Enter);
    assert_eq!(app.view(), View::Graph);
    let screen_text = text_of(&mut app);
    assert!(
        screen_text.contains("callers (<-) of calltree::run"),
        "{screen_text}"
    );
    let (rows, sel) = screen(&mut app);
    let callers_end = rows.iter().position(|r| r.contains("── callees")).unwrap();
    let callers = &rows[2..callers_end];
    let callees = &rows[callers_end + 1..];
    assert!(
        callers.iter().any(|r| r.ends_with("<- calltree::main")),
        "{rows:#?}"
    );
    for f in ["a", "b", "c"] {
        assert!(
            callees
                .iter()
                .any(|r| r.ends_with(&format!("-> calltree::{f}"))),
            "{f}: {rows:#?}"
        );
    }
    // Enter jumps to the callees: the function's own row, then its first callee, collapsed (a calls
    // b).
    let sel = sel.unwrap();
    assert!(sel.ends_with("- calltree::run"), "{sel}");
    press(&mut app, KeyCode::Down);
    assert!(selected(&mut app).contains("-> calltree::"));
    press(&mut app, KeyCode::Home);
    press(&mut app, KeyCode::Char('/'));
    typed(&mut app, "calltree::a");
    press(&mut app, KeyCode::Enter);
    let sel = selected(&mut app);
    assert!(sel.ends_with("+ -> calltree::a"), "{sel}");
    press(&mut app, KeyCode::Right);
    let opened_a = text_of(&mut app);
    assert!(opened_a.contains("- -> calltree::a"), "{opened_a}");
    let rows_open = screen(&mut app).0;
    let a = rows_open
        .iter()
        .position(|r| r.ends_with("-> calltree::a"))
        .unwrap();
    assert!(
        rows_open[a + 1].ends_with("-> calltree::b"),
        "{rows_open:#?}"
    );
    press(&mut app, KeyCode::Left);
    assert!(text_of(&mut app).contains("+ -> calltree::a"));
    press(&mut app, KeyCode::Enter);
    assert!(text_of(&mut app).contains("- -> calltree::a"));

    // The calls: `graph calltree::run` says them too.
    let graph = ok(ft(&[
        "graph",
        "-i",
        trace.to_str().unwrap(),
        "^calltree::run$",
    ]));
    let b_calls = graph
        .lines()
        .find(|l| l.ends_with("calltree::b") && l.contains("+-("))
        .unwrap();
    let n: &str = b_calls
        .split('(')
        .nth(1)
        .unwrap()
        .split(')')
        .next()
        .unwrap();
    let ours = screen(&mut app)
        .0
        .into_iter()
        .find(|r| r.ends_with("-> calltree::b"))
        .unwrap();
    assert!(
        ours.split_whitespace().any(|w| w == n),
        "{ours} vs graph's {b_calls}"
    );

    // c on a callee: the graph of calltree::b, whose callers are a and run.
    press(&mut app, KeyCode::Char('/'));
    typed(&mut app, "calltree::b");
    press(&mut app, KeyCode::Enter);
    press(&mut app, KeyCode::Char('c'));
    let (rows, sel) = screen(&mut app);
    assert!(rows[1].contains("of calltree::b"), "{rows:#?}");
    assert!(
        sel.unwrap().ends_with("calltree::b"),
        "c selects the function leading its callers"
    );
    let end = rows.iter().position(|r| r.contains("── callees")).unwrap();
    for caller in ["calltree::a", "calltree::run"] {
        assert!(
            rows[..end]
                .iter()
                .any(|r| r.ends_with(&format!("<- {caller}"))),
            "{caller}: {rows:#?}"
        );
    }
    // g on a caller focuses the graph on it.
    press(&mut app, KeyCode::Home);
    press(&mut app, KeyCode::Char('/'));
    typed(&mut app, "calltree::a");
    press(&mut app, KeyCode::Enter);
    assert!(selected(&mut app).ends_with("<- calltree::a"));
    press(&mut app, KeyCode::Char('g'));
    let heading = screen(&mut app).0[1].clone();
    assert!(heading.contains("of calltree::a"), "{heading}");
    // Esc ends a search as it is typed, and does not quit.
    press(&mut app, KeyCode::Char('/'));
    typed(&mut app, "zz");
    assert!(!press(&mut app, KeyCode::Esc));
    assert!(!text_of(&mut app).contains("/zz"));
    // s sorts nothing here.
    press(&mut app, KeyCode::Char('s'));
    assert_eq!(app.view(), View::Graph);
}

#[test]
fn tree_view_reads_a_thread_when_picked_and_caps() {
    let trace = calltree_trace("tui_tree");
    let mut app = opened(&trace, MAX_FRAMES);
    press(&mut app, KeyCode::Char('3'));
    let rows = screen(&mut app).0;
    assert!(rows[1].starts_with("thread 1/2"), "{rows:#?}");
    let text = rows.join("\n");
    assert!(text.contains("calltree::main"), "{text}");
    assert!(!text.contains("capped"), "{text}");
    // Open the frames down to run (main's callee): a, b, c in time order, durations as replay's.
    for _ in 0..40 {
        if selected(&mut app).ends_with("calltree::run") {
            break;
        }
        press(&mut app, KeyCode::Right);
        press(&mut app, KeyCode::Down);
    }
    assert!(
        selected(&mut app).ends_with("+ calltree::run"),
        "{}",
        text_of(&mut app)
    );
    press(&mut app, KeyCode::Enter);
    let rows = screen(&mut app).0;
    let run = rows
        .iter()
        .position(|r| r.ends_with("- calltree::run"))
        .unwrap();
    assert!(rows[run + 1].ends_with("+ calltree::a"), "{rows:#?}");
    assert!(rows[run + 2].ends_with("calltree::b"), "{rows:#?}");
    assert!(rows[run + 3].ends_with("calltree::c"), "{rows:#?}");
    let replay = ok(ft(&["replay", "-i", trace.to_str().unwrap()]));
    let c_line = replay
        .lines()
        .find(|l| l.ends_with("calltree::c();"))
        .unwrap();
    let c_duration = c_line.split('[').next().unwrap().trim();
    assert!(
        !c_duration.is_empty() && rows[run + 3].trim_start().starts_with(c_duration),
        "{} vs replay's {c_line}",
        rows[run + 3]
    );
    press(&mut app, KeyCode::Left);
    assert!(screen(&mut app).0[run].ends_with("+ calltree::run"));
    // g: the graph of the selected frame's function.
    press(&mut app, KeyCode::Char('g'));
    assert!(screen(&mut app).0[1].contains("of calltree::run"));
    press(&mut app, KeyCode::Char('3'));

    // t and T pick the other thread, read when picked.
    press(&mut app, KeyCode::Char('t'));
    let text = text_of(&mut app);
    assert!(text.contains("thread 2/2"), "{text}");
    assert!(text.contains("calltree::worker"), "{text}");
    press(&mut app, KeyCode::Char('T'));
    assert!(text_of(&mut app).contains("thread 1/2"));

    // A cap of 5 frames: the first five, and the screen says the rest was not read.
    let mut capped = opened(&trace, 5);
    press(&mut capped, KeyCode::Char('3'));
    let text = text_of(&mut capped);
    assert!(text.contains("capped: the first 5 frames"), "{text}");
    assert!(
        text.contains("…"),
        "frames not ended by the cap have no duration: {text}"
    );
}

#[test]
fn samples_view_shows_the_profile_and_its_hot_stacks() {
    let dir = scratch("tui_samples");
    let trace = dir.join("p.data");
    let out = ferrotrace()
        .args(["profile", "-F", "999", "-o"])
        .arg(&trace)
        .arg("--")
        .arg(testprog("fib"))
        .arg("34")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let mut app = opened(&trace, MAX_FRAMES);
    // A profile has no function calls: it opens on its samples.
    assert_eq!(app.view(), View::Samples);
    let report: serde_json::Value = serde_json::from_str(&ok(ft(&[
        "report",
        "--json",
        "-i",
        trace.to_str().unwrap(),
    ])))
    .unwrap();
    let top = report["functions"][0]["function"]
        .as_str()
        .unwrap()
        .to_string();
    let (rows, sel) = screen(&mut app);
    assert!(rows[1].contains("by self"), "{rows:#?}");
    let sel = sel.unwrap();
    assert!(sel.ends_with(&top), "{sel} vs report's {top}");
    let self_samples = report["functions"][0]["self"].as_u64().unwrap();
    assert!(
        sel.split_whitespace().next() == Some(&self_samples.to_string()),
        "{sel}"
    );
    let text = rows.join("\n");
    assert!(
        text.contains(&format!("hot stacks through {top}")),
        "{text}"
    );
    assert!(text.contains(&format!("{top} <- ")), "{text}");
    press(&mut app, KeyCode::Char('s'));
    assert!(screen(&mut app).0[1].contains("by total"));
    press(&mut app, KeyCode::Char('s'));
    // Enter: nothing traced, so no graph, and the status line says why.
    press(&mut app, KeyCode::Enter);
    assert!(text_of(&mut app).contains("sampled, never traced"));
    press(&mut app, KeyCode::Char('1'));
    assert!(text_of(&mut app).contains("no function calls in this trace"));
    press(&mut app, KeyCode::Char('3'));
    assert!(text_of(&mut app).contains("thread 1/"));

    // And a trace without samples says so on that view.
    let mut plain = opened(&calltree_trace("tui_no_samples"), MAX_FRAMES);
    press(&mut plain, KeyCode::Char('4'));
    assert!(text_of(&mut plain).contains("no samples in this trace"));
}

/// Runs the real binary in a pseudo-terminal of 30 x 160 (python3's `pty`; scripts/setup.sh installs
/// python3), keeps a screen from what it writes (cursor moves, text, clears: what ratatui's
/// crossterm backend sends), sends keys and waits for text to show. Exits non-zero, saying which step
/// failed and the screen, when a step's text does not show within 20 s, when the exit status is not
/// `rc`, or when the terminal is not restored (canonical mode and echo back, alternate screen left,
/// cursor shown).
const PTY_DRIVER: &str = r#"
import json, os, re, select, subprocess, sys, termios, fcntl, struct, time
exe, trace, steps, rc_wanted = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), int(sys.argv[4])
ROWS, COLS = 30, 160
master, slave = os.openpty()
fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", ROWS, COLS, 0, 0))
def child():
    os.setsid()
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)
p = subprocess.Popen([exe, "tui", "-i", trace], stdin=slave, stdout=slave, stderr=slave,
                     preexec_fn=child, close_fds=True)
raw = b""
screen = [[" "] * COLS for _ in range(ROWS)]
pos = [0, 0]
rest = b""
def feed(data):
    global rest
    # A sequence cut by the end of a read is kept for the next one.
    data, rest = rest + data, b""
    text = data.decode("utf-8", "replace")
    i = 0
    while i < len(text):
        c = text[i]
        if c == "\x1b" and i + 1 < len(text) and text[i + 1] == "[":
            m = re.match(r"\x1b\[([0-9;?]*)([ -/]*)([@-~])", text[i:])
            if not m:
                rest = text[i:].encode()
                break
            params, final = m.group(1), m.group(3)
            if final == "H":
                nums = [int(x) if x else 1 for x in params.split(";")] if params else [1, 1]
                pos[0], pos[1] = nums[0] - 1, (nums[1] if len(nums) > 1 else 1) - 1
            elif final == "J" and params == "2":
                for r in screen:
                    r[:] = [" "] * COLS
            elif final == "K":
                screen[pos[0]][pos[1]:] = [" "] * (COLS - pos[1])
            i += len(m.group(0))
        elif c == "\x1b":
            i += 2
        elif c == "\r":
            pos[1] = 0; i += 1
        elif c == "\n":
            pos[0] = min(pos[0] + 1, ROWS - 1); i += 1
        else:
            if 0 <= pos[0] < ROWS and 0 <= pos[1] < COLS:
                screen[pos[0]][pos[1]] = c
            pos[1] += 1; i += 1
def shown():
    return "\n".join("".join(r).rstrip() for r in screen)
def pump(timeout):
    """Reads what came within `timeout`: true if anything did."""
    global raw
    r, _, _ = select.select([master], [], [], timeout)
    if not r:
        return False
    try:
        data = os.read(master, 65536)
    except OSError:
        return False
    raw += data
    feed(data)
    return bool(data)
def fail(why):
    print("FAIL: " + why + "\n--- screen ---\n" + shown() + "\n--- raw tail ---\n" + repr(raw[-400:]))
    p.kill()
    sys.exit(1)
for keys, want in steps:
    os.write(master, keys.encode())
    end = time.time() + 20
    while want not in shown():
        if time.time() > end or not pump(0.2) and p.poll() is not None:
            fail("after %r: %r never showed" % (keys, want))
    print("ok: %r shows %r" % (keys, want))
try:
    rc = p.wait(timeout=20)
except subprocess.TimeoutExpired:
    fail("still running after the last key")
while pump(0.1):
    pass
if rc != rc_wanted:
    fail("exit status %d, not %d" % (rc, rc_wanted))
lflag = termios.tcgetattr(slave)[3]
if not (lflag & termios.ICANON and lflag & termios.ECHO):
    fail("the terminal was left in raw mode")
entered = raw.count(b"\x1b[?1049h")
if entered != raw.count(b"\x1b[?1049l"):
    fail("the alternate screen was not left")
if entered and b"\x1b[?25h" not in raw[raw.rfind(b"\x1b[?25l"):]:
    fail("the cursor was not shown again")
print("ok: exit %d, terminal restored" % rc)
print("SCREEN:" + shown())
"#;

/// Runs [`PTY_DRIVER`] on `ferrotrace tui -i TRACE`: its report.
fn in_pty(trace: &Path, steps: &[(&str, &str)], rc: i32) -> String {
    let steps = serde_json::to_string(steps).unwrap();
    let out = std::process::Command::new("python3")
        .args(["-c", PTY_DRIVER, env!("CARGO_BIN_EXE_ferrotrace")])
        .arg(trace)
        .args([steps.as_str(), &rc.to_string()])
        .output()
        .expect("python3 (scripts/setup.sh installs it)");
    let report = format!("{}{}", text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{report}");
    report
}

#[test]
fn the_binary_in_a_pseudo_terminal_walks_a_real_trace_and_restores_the_terminal() {
    let trace = calltree_trace("tui_pty");
    in_pty(
        &trace,
        &[
            ("", "calltree::main"),
            ("\x1b[B", "[1 Report]"),
            ("\t", "[2 Call graph]"),
            ("1", "[1 Report]"),
            ("/calltree::run", "/calltree::run"),
            ("\r", "s sort"),
            ("\r", "callers (<-) of calltree::run"),
            ("", "-> calltree::a"),
            ("3", "thread 1/2"),
            ("?", "any key closes this help"),
            (" ", "Enter/Right/Left expand"),
            ("q", ""),
        ],
        0,
    );
    // Not a trace: one line, exit 2, and the terminal never switched.
    let bad = trace.with_file_name("not-a-trace");
    std::fs::write(&bad, "hello\n").unwrap();
    let report = in_pty(&bad, &[("", "ferrotrace: ")], 2);
    let screen = report.split("SCREEN:").nth(1).unwrap().trim();
    assert_eq!(screen.lines().count(), 1, "{report}");
    assert!(!report.contains("panicked"), "{report}");

    // Not a terminal: refused in one line.
    let out = ft(&["tui", "-i", trace.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        text(&out.stderr),
        "ferrotrace: tui needs a terminal; use report/graph/replay for text\n"
    );
}
