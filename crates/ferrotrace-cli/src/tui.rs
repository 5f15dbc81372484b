//! The state, keys and drawing of `ferrotrace tui`, apart from the terminal (`cmd/tui.rs` owns that),
//! so that tests drive it through ratatui's `TestBackend`.
//!
//! Four views of one trace: the report (from the pass that opened the trace), the call graph of a
//! function (callers and callees, from the calling-context tree a worker thread builds after the
//! first screen), one thread's call tree (built by a second worker from that thread's chunks when the
//! thread is picked, capped at [`MAX_FRAMES`] frames), and the samples' report with the hot stacks of
//! the selected function. Every number comes from `ferrotrace-analysis`; this module only lays out.

use std::collections::HashSet;
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;

use ferrotrace_analysis::callstack::initial_stacks;
use ferrotrace_analysis::cct::{Cct, ROOT};
use ferrotrace_analysis::info::fmt_ns;
use ferrotrace_analysis::names::{Names, Representatives};
use ferrotrace_analysis::progress::Progress;
use ferrotrace_analysis::reader::Trace;
use ferrotrace_analysis::replay::push_duration;
use ferrotrace_analysis::replay::tree::{self, CallTree, ThreadSummary};
use ferrotrace_analysis::report::samples::{self as sreport, HotStack, ReportOptions};
use ferrotrace_analysis::report::{sort, FuncStats, Report, SortKey};
use ferrotrace_analysis::samples::SampleSet;
use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Modifier, Style};
use ratatui::text::Line;
use ratatui::widgets::{Block, Borders, Clear, Paragraph};
use ratatui::Frame;

/// Most frames of one thread's call tree held at once by default (about 100 bytes each).
pub const MAX_FRAMES: usize = 200_000;

/// The views, in the order of their keys (1-4) and of Tab.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum View {
    /// Functions with total, self and calls.
    Report,
    /// Callers and callees of one function.
    Graph,
    /// One thread's frames in time order.
    Tree,
    /// The samples' report and hot stacks.
    Samples,
}

const VIEWS: [View; 4] = [View::Report, View::Graph, View::Tree, View::Samples];

impl View {
    fn title(self) -> &'static str {
        match self {
            View::Report => "Report",
            View::Graph => "Call graph",
            View::Tree => "Call tree",
            View::Samples => "Samples",
        }
    }

    fn keys(self) -> &'static str {
        match self {
            View::Report => "s sort  Enter graph  c callers",
            View::Graph => "Enter/Right/Left expand  g focus  c callers",
            View::Tree => "Enter/Right/Left expand  t/T thread  g graph",
            View::Samples => "s sort  Enter graph",
        }
    }
}

/// What the workers send back.
enum Loaded {
    Graph(Result<Cct, String>),
    Tree(Result<CallTree, String>),
}

/// A selected row and the first row shown.
#[derive(Clone, Copy, Debug, Default)]
struct Cursor {
    sel: usize,
    top: usize,
}

impl Cursor {
    fn moved(&mut self, delta: isize, len: usize) {
        self.sel = self
            .sel
            .saturating_add_signed(delta)
            .min(len.saturating_sub(1));
    }

    /// Keeps the selection among `len` rows and scrolls so that it is among the `height` shown.
    fn shown(&mut self, len: usize, height: usize) {
        self.sel = self.sel.min(len.saturating_sub(1));
        if self.sel < self.top {
            self.top = self.sel;
        } else if height > 0 && self.sel >= self.top + height {
            self.top = self.sel + 1 - height;
        }
    }
}

/// A row of an expandable tree: its node and depth.
#[derive(Clone, Copy, Debug)]
struct Row {
    node: usize,
    depth: usize,
}

/// The rows of `roots` and of the nodes below them that `expanded` opens, depth first, each node's
/// children in the order `children` gives.
fn flatten(
    roots: &[usize],
    children: impl Fn(usize) -> Vec<usize>,
    expanded: &HashSet<usize>,
) -> Vec<Row> {
    let mut rows = Vec::new();
    let mut stack: Vec<Row> = roots
        .iter()
        .rev()
        .map(|&node| Row { node, depth: 0 })
        .collect();
    while let Some(row) = stack.pop() {
        rows.push(row);
        if expanded.contains(&row.node) {
            stack.extend(children(row.node).into_iter().rev().map(|node| Row {
                node,
                depth: row.depth + 1,
            }));
        }
    }
    rows
}

/// The marker of a tree row: expanded, collapsed, or nothing below.
fn marker(has_children: bool, open: bool) -> &'static str {
    match (has_children, open) {
        (false, _) => "  ",
        (true, true) => "- ",
        (true, false) => "+ ",
    }
}

/// The call graph of one function: its callers' tree above, its callees' below.
struct GraphView {
    func: u32,
    callers: Cct,
    callees: Cct,
    /// Expanded nodes: callers' as they are, callees' offset by the callers' node count.
    expanded: HashSet<usize>,
    rows: Vec<Option<Row>>,
}

impl GraphView {
    fn new(cct: &Cct, func: u32) -> GraphView {
        let callers = cct.callers(func);
        let callees = cct.callees(func);
        // The function itself is open on both sides.
        let expanded = [
            callers.nodes[ROOT].children[0],
            callers.nodes.len() + callees.nodes[ROOT].children[0],
        ]
        .into_iter()
        .collect();
        let mut g = GraphView {
            func,
            callers,
            callees,
            expanded,
            rows: Vec::new(),
        };
        g.relayout();
        g
    }

    /// The tree and its node of a combined node number.
    fn side(&self, n: usize) -> (&Cct, usize) {
        match n.checked_sub(self.callers.nodes.len()) {
            None => (&self.callers, n),
            Some(m) => (&self.callees, m),
        }
    }

    fn relayout(&mut self) {
        let split = self.callers.nodes.len();
        let by_time = |cct: &Cct, n: usize, offset: usize| {
            let mut kids = cct.nodes[n].children.clone();
            kids.sort_by_key(|&c| std::cmp::Reverse(cct.nodes[c].total_ns));
            kids.into_iter().map(|c| c + offset).collect::<Vec<_>>()
        };
        let callers = flatten(
            &self.callers.nodes[ROOT].children,
            |n| by_time(&self.callers, n, 0),
            &self.expanded,
        );
        let roots: Vec<usize> = self.callees.nodes[ROOT]
            .children
            .iter()
            .map(|c| c + split)
            .collect();
        let callees = flatten(
            &roots,
            |n| by_time(&self.callees, n - split, split),
            &self.expanded,
        );
        // A `None` row is the line between the two trees.
        self.rows = callers
            .into_iter()
            .map(Some)
            .chain([None])
            .chain(callees.into_iter().map(Some))
            .collect();
    }

    fn line(&self, row: Option<Row>) -> String {
        let Some(row) = row else {
            return format!("{:─<60}", "── callees ");
        };
        let (cct, n) = self.side(row.node);
        let node = &cct.nodes[n];
        let arrow = match (row.depth, std::ptr::eq(cct, &self.callers)) {
            (0, _) => "",
            (_, true) => "<- ",
            (_, false) => "-> ",
        };
        format!(
            "{:>12} {:>10}  {}{}{}{}",
            fmt_ns(node.total_ns),
            node.calls,
            "  ".repeat(row.depth),
            marker(!node.children.is_empty(), self.expanded.contains(&row.node)),
            arrow,
            cct.names.get(node.func)
        )
    }
}

/// One thread's call tree.
struct TreeView {
    threads: Vec<ThreadSummary>,
    /// Index in `threads` of the thread shown (or being built).
    thread: usize,
    tree: Option<CallTree>,
    expanded: HashSet<usize>,
    rows: Vec<Row>,
}

impl TreeView {
    fn relayout(&mut self) {
        self.rows = match &self.tree {
            Some(t) => flatten(
                &t.nodes[tree::ROOT].children,
                |n| t.nodes[n].children.clone(),
                &self.expanded,
            ),
            None => Vec::new(),
        };
    }
}

/// The samples' report and the hot stacks of its rows.
struct SamplesView {
    set: SampleSet,
    by_total: bool,
    report: sreport::Report,
    stacks: Vec<HotStack>,
}

/// The whole state of the TUI.
pub struct App {
    trace: Arc<Trace>,
    names: Names,
    reps: Representatives,
    view: View,
    cursors: [Cursor; 4],
    report: Report,
    sort: SortKey,
    cct: Option<Cct>,
    graph: Option<GraphView>,
    /// The function whose graph is shown or awaited.
    wanted: Option<u32>,
    tree: TreeView,
    samples: Option<SamplesView>,
    /// The query being typed after `/` (`None`: not typing), and the last one for n/N.
    typing: Option<String>,
    query: String,
    help: bool,
    message: String,
    /// Rows of the body drawn last: what PgUp/PgDn move by.
    height: usize,
    results: Receiver<Loaded>,
    trees: Sender<u32>,
    pending: usize,
}

impl App {
    /// The TUI of `trace`, whose `report` and `samples` are already made; starts the workers that
    /// build the calling-context tree (at once) and the threads' call trees (when asked, each of
    /// at most `max_frames` frames).
    pub fn new(trace: Trace, report: Report, samples: Option<SampleSet>, max_frames: usize) -> App {
        let trace = Arc::new(trace);
        let names = Names::of(&trace);
        let reps = names.representatives();
        let (tx, results) = channel();
        let tree_tx = tx.clone();
        let t = trace.clone();
        std::thread::spawn(move || {
            let mut progress = Progress::with_enabled("graph", 0, false);
            let cct = Cct::build(&t, None, &mut progress).map_err(|e| e.to_string());
            let _ = tx.send(Loaded::Graph(cct));
        });
        let (trees, wanted) = channel::<u32>();
        let t = trace.clone();
        std::thread::spawn(move || {
            let mut initial = None;
            for tid in wanted {
                // Once, for the first thread asked for (from the RunningAtStart chunk when it can).
                let tree = match initial
                    .get_or_insert_with(|| initial_stacks(&t).map_err(|e| e.to_string()))
                {
                    Ok(initial) => {
                        CallTree::of_thread(&t, tid, initial, max_frames).map_err(|e| e.to_string())
                    }
                    Err(e) => Err(e.clone()),
                };
                if tree_tx.send(Loaded::Tree(tree)).is_err() {
                    break;
                }
            }
        });
        let threads = CallTree::threads(&trace);
        let mut sorted = report.functions.clone();
        sort(&mut sorted, SortKey::Total);
        let samples = samples.map(|set| {
            let report = sreport::report(&set, ReportOptions::default());
            let stacks = sreport::hot_stacks(&set);
            SamplesView {
                set,
                by_total: false,
                report,
                stacks,
            }
        });
        let view = if samples.is_some() && report.functions.is_empty() {
            View::Samples
        } else {
            View::Report
        };
        let mut app = App {
            message: trace.warnings().into_iter().next().unwrap_or_default(),
            trace,
            names,
            reps,
            view,
            cursors: [Cursor::default(); 4],
            report: Report {
                functions: sorted,
                ..report
            },
            sort: SortKey::Total,
            cct: None,
            graph: None,
            wanted: None,
            tree: TreeView {
                threads,
                thread: 0,
                tree: None,
                expanded: HashSet::new(),
                rows: Vec::new(),
            },
            samples,
            typing: None,
            query: String::new(),
            help: false,
            height: 20,
            results,
            trees,
            pending: 1,
        };
        app.pick_thread(0);
        app
    }

    /// The trace shown.
    pub fn trace(&self) -> &Trace {
        &self.trace
    }

    /// The view shown.
    pub fn view(&self) -> View {
        self.view
    }

    /// The read errors of the report and of the calling-context tree, for `cmd::finish`.
    pub fn errors(&self) -> Vec<String> {
        let mut e = self.report.errors.clone();
        e.extend(self.cct.iter().flat_map(|c| c.errors.iter().cloned()));
        e
    }

    /// Takes what the workers finished; true if anything came.
    pub fn poll(&mut self) -> bool {
        let mut any = false;
        while let Ok(l) = self.results.try_recv() {
            self.take(l);
            any = true;
        }
        any
    }

    /// Waits until the workers have finished everything asked of them (tests).
    pub fn settle(&mut self) {
        while self.pending > 0 {
            match self.results.recv() {
                Ok(l) => self.take(l),
                Err(_) => break,
            }
        }
    }

    fn take(&mut self, l: Loaded) {
        self.pending = self.pending.saturating_sub(1);
        match l {
            Loaded::Graph(Ok(cct)) => {
                self.cct = Some(cct);
                // A function picked before the tree was ready.
                if let Some(f) = self.wanted {
                    self.focus(f);
                }
            }
            Loaded::Graph(Err(e)) => self.message = format!("call graph: {e}"),
            Loaded::Tree(Ok(t)) => {
                // Only the thread still picked is kept (a quick t t t asks for several).
                if self.tree.threads.get(self.tree.thread).map(|t| t.tid) == Some(t.tid) {
                    // The outer three levels open: past the runtime's frames to main's callees.
                    let mut level = t.nodes[tree::ROOT].children.clone();
                    self.tree.expanded.clear();
                    for _ in 0..3 {
                        self.tree.expanded.extend(&level);
                        level = level
                            .iter()
                            .flat_map(|&n| t.nodes[n].children.iter().copied())
                            .collect();
                    }
                    if let Some(e) = &t.error {
                        self.message = format!("thread {}: {e}", t.tid);
                    }
                    self.tree.tree = Some(t);
                    self.tree.relayout();
                    self.cursors[2] = Cursor::default();
                }
            }
            Loaded::Tree(Err(e)) => self.message = format!("call tree: {e}"),
        }
    }

    fn pick_thread(&mut self, i: usize) {
        let Some(t) = self.tree.threads.get(i) else {
            return;
        };
        self.tree.thread = i;
        self.tree.tree = None;
        self.tree.rows.clear();
        if self.trees.send(t.tid).is_ok() {
            self.pending += 1;
        }
    }

    /// Shows the call graph of `func` (a representative id): now, or when the calling-context tree
    /// is built.
    fn focus(&mut self, func: u32) {
        self.view = View::Graph;
        self.wanted = Some(func);
        if let Some(cct) = &self.cct {
            self.graph = Some(GraphView::new(cct, func));
            self.cursors[1] = Cursor::default();
        }
    }

    fn rows(&self, view: View) -> usize {
        match view {
            View::Report => self.report.functions.len(),
            View::Graph => self.graph.as_ref().map_or(0, |g| g.rows.len()),
            View::Tree => self.tree.rows.len(),
            View::Samples => self.samples.as_ref().map_or(0, |s| s.report.rows.len()),
        }
    }

    fn cursor(&mut self) -> &mut Cursor {
        let i = VIEWS.iter().position(|&v| v == self.view).unwrap_or(0);
        &mut self.cursors[i]
    }

    fn sel(&self) -> usize {
        self.cursors[VIEWS.iter().position(|&v| v == self.view).unwrap_or(0)].sel
    }

    /// The function of row `i` of the current view, as a representative id (none for a sample's
    /// function that was not traced), and its name.
    fn function_at(&self, i: usize) -> Option<(Option<u32>, String)> {
        match self.view {
            View::Report => self
                .report
                .functions
                .get(i)
                .map(|f| (Some(self.reps.of(f.id)), f.name.clone())),
            View::Graph => {
                let g = self.graph.as_ref()?;
                let row = (*g.rows.get(i)?)?;
                let (cct, n) = g.side(row.node);
                let f = cct.nodes[n].func;
                Some((Some(f), cct.names.get(f).into_owned()))
            }
            View::Tree => {
                let t = self.tree.tree.as_ref()?;
                let f = t.nodes[self.tree.rows.get(i)?.node].func;
                Some((Some(self.reps.of(f)), self.names.get(f).into_owned()))
            }
            View::Samples => {
                let name = &self.samples.as_ref()?.report.rows.get(i)?.function;
                let id = self.report.functions.iter().find(|f| &f.name == name);
                Some((id.map(|f| self.reps.of(f.id)), name.clone()))
            }
        }
    }

    /// Handles a key; true when the TUI should end.
    pub fn key(&mut self, k: KeyEvent) -> bool {
        if k.modifiers.contains(KeyModifiers::CONTROL) && k.code == KeyCode::Char('c') {
            return true;
        }
        if let Some(q) = &mut self.typing {
            match k.code {
                KeyCode::Enter => self.typing = None,
                KeyCode::Esc => {
                    self.typing = None;
                    self.query.clear();
                    self.message.clear();
                }
                KeyCode::Backspace => {
                    q.pop();
                }
                KeyCode::Char(c) => q.push(c),
                _ => {}
            }
            if let Some(q) = &self.typing {
                // Incremental: from the selected row on, as it is typed.
                self.query = q.clone();
                self.search(0, 1);
            }
            return false;
        }
        if self.help {
            self.help = false;
            return false;
        }
        self.message.clear();
        let len = self.rows(self.view);
        let page = self.height.max(1) as isize;
        match k.code {
            KeyCode::Char('q') | KeyCode::Esc => return true,
            KeyCode::Char('?') => self.help = true,
            KeyCode::Down | KeyCode::Char('j') => self.cursor().moved(1, len),
            KeyCode::Up | KeyCode::Char('k') => self.cursor().moved(-1, len),
            KeyCode::PageDown => self.cursor().moved(page, len),
            KeyCode::PageUp => self.cursor().moved(-page, len),
            KeyCode::Home => self.cursor().sel = 0,
            KeyCode::End => self.cursor().sel = len.saturating_sub(1),
            KeyCode::Tab | KeyCode::BackTab => {
                let i = VIEWS.iter().position(|&v| v == self.view).unwrap_or(0);
                let step = if k.code == KeyCode::Tab { 1 } else { 3 };
                self.view = VIEWS[(i + step) % 4];
            }
            KeyCode::Char(c @ '1'..='4') => self.view = VIEWS[c as usize - '1' as usize],
            KeyCode::Char('/') => self.typing = Some(String::new()),
            KeyCode::Char('n') => self.search(1, 1),
            KeyCode::Char('N') => self.search(1, -1),
            KeyCode::Char('s') => self.next_sort(),
            KeyCode::Char('t') | KeyCode::Char('T') => {
                let n = self.tree.threads.len();
                if self.view == View::Tree && n > 0 {
                    let step = if k.code == KeyCode::Char('t') {
                        1
                    } else {
                        n - 1
                    };
                    self.pick_thread((self.tree.thread + step) % n);
                }
            }
            KeyCode::Char('c') => {
                // The graph opens on the function's own row, which leads its callers.
                if let Some((f, name)) = self.function_at(self.sel()) {
                    self.jump(f, &name);
                }
            }
            KeyCode::Char('g') => {
                if let Some((f, name)) = self.function_at(self.sel()) {
                    self.jump(f, &name);
                    self.select_callees();
                }
            }
            KeyCode::Enter | KeyCode::Right | KeyCode::Left => self.open(k.code),
            _ => {}
        }
        false
    }

    /// Moves the graph's selection to its callees' first row.
    fn select_callees(&mut self) {
        if let Some(g) = &self.graph {
            if let Some(i) = g.rows.iter().position(Option::is_none) {
                self.cursors[1].sel = (i + 1).min(g.rows.len().saturating_sub(1));
            }
        }
    }

    fn jump(&mut self, f: Option<u32>, name: &str) {
        match f {
            Some(f) => self.focus(f),
            None => self.message = format!("{name}: sampled, never traced: no call graph"),
        }
    }

    /// Enter, Right, Left: expand or collapse in a tree; Enter elsewhere jumps to the graph.
    fn open(&mut self, code: KeyCode) {
        let sel = self.sel();
        match self.view {
            View::Report | View::Samples => {
                if code == KeyCode::Enter {
                    if let Some((f, name)) = self.function_at(sel) {
                        self.jump(f, &name);
                        self.select_callees();
                    }
                }
            }
            View::Graph => {
                let Some(g) = &mut self.graph else { return };
                let Some(Some(row)) = g.rows.get(sel).copied() else {
                    return;
                };
                if toggle(&mut g.expanded, row.node, code) {
                    g.relayout();
                }
            }
            View::Tree => {
                let Some(row) = self.tree.rows.get(sel).copied() else {
                    return;
                };
                if toggle(&mut self.tree.expanded, row.node, code) {
                    self.tree.relayout();
                }
            }
        }
    }

    fn next_sort(&mut self) {
        match self.view {
            View::Report => {
                let i = SortKey::ALL
                    .iter()
                    .position(|&k| k == self.sort)
                    .unwrap_or(0);
                self.sort = SortKey::ALL[(i + 1) % SortKey::ALL.len()];
                sort(&mut self.report.functions, self.sort);
            }
            View::Samples => {
                if let Some(s) = &mut self.samples {
                    s.by_total = !s.by_total;
                    s.report = sreport::report(
                        &s.set,
                        ReportOptions {
                            by_total: s.by_total,
                            ..ReportOptions::default()
                        },
                    );
                }
            }
            View::Graph | View::Tree => return,
        }
        *self.cursor() = Cursor::default();
    }

    /// Selects the next (`dir` 1) or previous (-1) row whose function's name holds the query
    /// (case-insensitive), starting `skip` rows away from the selection and wrapping around.
    fn search(&mut self, skip: usize, dir: isize) {
        let len = self.rows(self.view);
        if self.query.is_empty() || len == 0 {
            return;
        }
        let q = self.query.to_lowercase();
        let from = self.sel();
        for step in skip..skip + len {
            let i = (from as isize + dir * step as isize).rem_euclid(len as isize) as usize;
            if self
                .function_at(i)
                .is_some_and(|(_, name)| name.to_lowercase().contains(&q))
            {
                self.cursor().sel = i;
                return;
            }
        }
        self.message = format!("/{}: not found", self.query);
    }

    /// Draws the whole screen.
    pub fn draw(&mut self, frame: &mut Frame) {
        let [tabs, head, body, status] = Layout::vertical([
            Constraint::Length(1),
            Constraint::Length(1),
            Constraint::Min(1),
            Constraint::Length(1),
        ])
        .areas(frame.area());
        let tab_line: String = VIEWS
            .iter()
            .enumerate()
            .map(|(i, v)| {
                if *v == self.view {
                    format!("[{} {}] ", i + 1, v.title())
                } else {
                    format!(" {} {}  ", i + 1, v.title())
                }
            })
            .collect();
        frame.render_widget(Paragraph::new(tab_line), tabs);
        let (heading, lines, notice) = self.body();
        frame.render_widget(
            Paragraph::new(heading).style(Style::default().add_modifier(Modifier::BOLD)),
            head,
        );
        let mut body = body;
        if let Some(n) = notice {
            let [b, n_area] =
                Layout::vertical([Constraint::Min(1), Constraint::Length(1)]).areas(body);
            frame.render_widget(Paragraph::new(n), n_area);
            body = b;
        }
        let detail = self.detail();
        if !detail.is_empty() && body.height > 8 {
            let [b, d] = Layout::vertical([Constraint::Min(4), Constraint::Length(7)]).areas(body);
            frame.render_widget(
                Paragraph::new(detail.into_iter().map(Line::from).collect::<Vec<_>>())
                    .block(Block::default().borders(Borders::TOP)),
                d,
            );
            body = b;
        }
        self.height = body.height as usize;
        let height = self.height;
        let len = lines.len();
        let cur = {
            let c = self.cursor();
            c.shown(len, height);
            *c
        };
        let shown: Vec<Line> = lines
            .into_iter()
            .enumerate()
            .skip(cur.top)
            .take(height)
            .map(|(i, l)| {
                if i == cur.sel {
                    Line::from(l).style(Style::default().add_modifier(Modifier::REVERSED))
                } else {
                    Line::from(l)
                }
            })
            .collect();
        frame.render_widget(Paragraph::new(shown), body);
        let right = match &self.typing {
            Some(q) => format!("/{q}"),
            None if !self.message.is_empty() => self.message.clone(),
            None => format!(
                "{}  / search  n/N  Tab/1-4 views  ? help  q quit",
                self.view.keys()
            ),
        };
        let status_line = format!(
            "{} │ {} │ {right}",
            self.trace.path().display(),
            self.view.title()
        );
        frame.render_widget(
            Paragraph::new(status_line).style(Style::default().add_modifier(Modifier::REVERSED)),
            status,
        );
        if self.help {
            self.draw_help(frame, body);
        }
    }

    fn draw_help(&self, frame: &mut Frame, area: Rect) {
        let text = [
            "Up/Down j/k  move        PgUp/PgDn Home/End  page, ends",
            "Tab 1-4      views: 1 report, 2 call graph, 3 call tree, 4 samples",
            "Enter        report/samples: call graph of the function; trees: expand/collapse",
            "Right/Left   expand / collapse",
            "c            callers of the function    g  its call graph (callees)",
            "s            sort: report total, self, calls, avg, min, max; samples self/total",
            "t / T        call tree: next / previous thread",
            "/ n N        search (as typed), next, previous match",
            "q Esc        quit            (any key closes this help)",
        ];
        let h = (text.len() as u16 + 2).min(area.height);
        let r = Rect::new(area.x, area.y, area.width, h);
        frame.render_widget(Clear, r);
        frame.render_widget(
            Paragraph::new(text.iter().map(|&l| Line::from(l)).collect::<Vec<_>>())
                .block(Block::default().borders(Borders::ALL).title(" keys ")),
            r,
        );
    }

    /// The current view's heading, rows and notice (a line below the rows).
    fn body(&self) -> (String, Vec<String>, Option<String>) {
        match self.view {
            View::Report => {
                let heading = SortKey::ALL
                    .iter()
                    .map(|k| {
                        let name = if *k == self.sort {
                            format!("{}*", k.name())
                        } else {
                            k.name().to_string()
                        };
                        format!("{name:>12}")
                    })
                    .collect::<String>()
                    + "  function";
                let rows = self.report.functions.iter().map(report_row).collect();
                let notice = self
                    .report
                    .functions
                    .is_empty()
                    .then(|| "no function calls in this trace (4: samples)".to_string());
                (heading, rows, notice)
            }
            View::Graph => match (&self.graph, &self.cct) {
                (None, _) if self.wanted.is_none() => (
                    String::new(),
                    Vec::new(),
                    Some("pick a function in the report (Enter) or a tree (g, c)".into()),
                ),
                (None, _) => (
                    String::new(),
                    Vec::new(),
                    Some(format!(
                        "building the call graph of {} events… ({} next)",
                        self.trace.event_count(),
                        self.names.get(self.wanted.unwrap_or_default())
                    )),
                ),
                (Some(g), _) => (
                    format!(
                        "{:>12} {:>10}  callers (<-) of {}, then its callees (->)",
                        "total",
                        "calls",
                        self.names.get(g.func)
                    ),
                    g.rows.iter().map(|&r| g.line(r)).collect(),
                    None,
                ),
            },
            View::Tree => {
                let t = &self.tree;
                let Some(th) = t.threads.get(t.thread) else {
                    return (String::new(), Vec::new(), Some("no threads".into()));
                };
                let heading = format!(
                    "thread {}/{}: {} {} ({} events)   duration  function",
                    t.thread + 1,
                    t.threads.len(),
                    th.tid,
                    th.name,
                    th.events
                );
                let Some(tree) = &t.tree else {
                    return (
                        heading,
                        Vec::new(),
                        Some(format!("reading thread {}…", th.tid)),
                    );
                };
                let rows = t
                    .rows
                    .iter()
                    .map(|r| {
                        let n = &tree.nodes[r.node];
                        let note = n.end.map(|e| e.note()).unwrap_or_default();
                        format!(
                            "{:>12}  {}{}{}{}{}{}",
                            n.duration_ns.map_or("…".to_string(), replay_duration),
                            "  ".repeat(r.depth),
                            marker(!n.children.is_empty(), t.expanded.contains(&r.node)),
                            self.names.get(n.func),
                            match (&n.args, &n.retval) {
                                (None, None) => String::new(),
                                (a, r) => format!(
                                    "({}){}",
                                    a.as_deref().unwrap_or(""),
                                    r.as_deref().map(|r| format!(" = {r}")).unwrap_or_default()
                                ),
                            },
                            if n.entered { "" } else { " (already running)" },
                            if note.is_empty() {
                                String::new()
                            } else {
                                format!(" ({note})")
                            },
                        )
                    })
                    .collect();
                let notice = tree.capped.then(|| {
                    format!(
                        "capped: the first {} frames of this thread are shown, the rest of its events are not read (… = not ended by then)",
                        tree.nodes.len() - 1
                    )
                });
                (heading, rows, notice)
            }
            View::Samples => match &self.samples {
                None => (
                    String::new(),
                    Vec::new(),
                    Some("no samples in this trace (record --sample or profile makes them)".into()),
                ),
                Some(s) => {
                    let r = &s.report;
                    let pct = |w: u64| {
                        if r.weight == 0 {
                            0.0
                        } else {
                            w as f64 * 100.0 / r.weight as f64
                        }
                    };
                    let heading = format!(
                        "{:>8} {:>7} {:>8} {:>7}  function   ({} samples; by {})",
                        "self",
                        "self%",
                        "total",
                        "total%",
                        r.samples,
                        if s.by_total { "total" } else { "self" }
                    );
                    let rows = r
                        .rows
                        .iter()
                        .map(|f| {
                            format!(
                                "{:>8} {:>6.2}% {:>8} {:>6.2}%  {}",
                                f.self_samples,
                                pct(f.self_weight),
                                f.total_samples,
                                pct(f.total_weight),
                                f.function
                            )
                        })
                        .collect();
                    (heading, rows, None)
                }
            },
        }
    }

    /// Lines below the samples' rows: the heaviest stacks through the selected function.
    fn detail(&self) -> Vec<String> {
        let (View::Samples, Some(s)) = (self.view, &self.samples) else {
            return Vec::new();
        };
        let Some(row) = s.report.rows.get(self.sel()) else {
            return Vec::new();
        };
        let mut lines = vec![format!(
            "hot stacks through {} (innermost first)",
            row.function
        )];
        lines.extend(
            s.stacks
                .iter()
                .filter(|h| h.frames.iter().any(|f| **f == *row.function))
                .take(5)
                .map(|h| {
                    let frames: Vec<&str> = h.frames.iter().map(|f| &**f).collect();
                    format!("{:>8}  {}", h.samples, frames.join(" <- "))
                }),
        );
        lines
    }
}

/// Expands (Right), collapses (Left) or toggles (Enter) `node`; true if it changed.
fn toggle(expanded: &mut HashSet<usize>, node: usize, code: KeyCode) -> bool {
    match code {
        KeyCode::Right => expanded.insert(node),
        KeyCode::Left => expanded.remove(&node),
        _ => {
            if !expanded.remove(&node) {
                expanded.insert(node);
            }
            true
        }
    }
}

/// A duration as `replay` prints it.
fn replay_duration(ns: u64) -> String {
    let mut b = Vec::new();
    push_duration(&mut b, ns);
    String::from_utf8_lossy(&b).into_owned()
}

fn report_row(f: &FuncStats) -> String {
    let cells: String = SortKey::ALL
        .iter()
        .map(|k| match k {
            SortKey::Calls => format!("{:>12}", f.calls),
            k => format!("{:>12}", fmt_ns(k.value(f))),
        })
        .collect();
    format!("{cells}  {}", f.name)
}
