//! `ferrotrace flame`: a flame graph weighted by time (self time in nanoseconds of each call path,
//! so a frame's width is its total time), drawn by inferno; or the folded stacks as text.
//!
//! Memory is bounded by what can be drawn, not by the trace: the calling-context tree ([`Cct`], one
//! node per distinct call path) is pruned before anything is handed to inferno. inferno draws no
//! frame narrower than its minimum width (0.01% of the total by default), so a subtree narrower than
//! that is replaced by one line of its total weight, named after it and never drawn, and runs of such
//! siblings share lines as long as each line stays narrower than the minimum. What inferno receives
//! is then at most a few lines per drawable frame, whatever the number of call paths, and it draws
//! what it would draw from every folded line (with the same labels): the same frames at the same
//! places, byte for byte.
//!
//! Frame labels: inferno shows as much of a label as fits and cuts it from the left (`..e#0}`), so a
//! long Rust name loses everything that tells what it is. Names longer than [`LONG_NAME`] characters
//! are shortened before drawing: generic arguments dropped and the path cut to the crate and its
//! last two segments (`serde_json::…::Deserializer::parse_str`, `<Value as Deserialize>::deserialize`);
//! names that would then read the same get more detail, a step at a time, until they differ: a level
//! of generic arguments more (`core::ptr::drop_glue::<Value>`), then the crates of the paths inside
//! (`<&aho_corasick::…::api::Searcher as core::fmt::Debug>::fmt`), else the whole name. inferno's
//! frame title (the tooltip, and the text its script fits into the frame) is the label with the
//! frame's time: it has no separate place for a full name, which `flame --folded`, `report` and
//! `graph` show.

pub mod memory;
pub mod samples;
pub mod shorten;

use std::collections::HashMap;
use std::fmt;
use std::io::{self, Write};
use std::path::PathBuf;

use crate::cct::{Cct, ROOT};
use crate::reader::{ReadError, Trace};
use crate::samples::{SampleSet, StackTotals};
use shorten::Labels;

/// Names longer than this are shortened in flame graph labels.
pub const LONG_NAME: usize = 40;

/// Writes folded stacks: one line per call path with self time, `a;b;c NANOSECONDS`. Paths with no
/// self time are left out (inferno derives the parents' widths from their children).
pub fn write_folded(cct: &Cct, out: &mut dyn Write) -> io::Result<()> {
    let mut err = Ok(());
    let mut line = String::new();
    cct.walk(|n, path| {
        let w = cct.nodes[n].self_ns;
        if w == 0 || err.is_err() {
            return;
        }
        line.clear();
        for (i, &f) in path.iter().enumerate() {
            if i > 0 {
                line.push(';');
            }
            line.extend(fold_chars(&cct.names.get(f)));
        }
        line.push(' ');
        line.push_str(&w.to_string());
        line.push('\n');
        err = out.write_all(line.as_bytes());
    });
    err
}

/// A frame name's characters as folded stacks need them: `;` separates frames and a newline ends a
/// line, so neither may appear in a name (`;` becomes `:`, a newline a space). Every folded writer
/// (function traces, samples) goes through this.
pub fn fold_chars(name: &str) -> impl Iterator<Item = char> + '_ {
    name.chars().map(|c| match c {
        ';' => ':',
        '\n' => ' ',
        c => c,
    })
}

/// Folded stacks from `(path, weight)` pairs, paths outermost first: one line per distinct path
/// (`root;…;leaf WEIGHT`, the weights of equal paths summed), sorted, names through [`fold_chars`].
/// The folded writer of the stacks of samples and of allocations.
pub fn fold_paths<'a, P: IntoIterator<Item = &'a str>>(
    paths: impl IntoIterator<Item = (P, u64)>,
) -> String {
    use std::fmt::Write as _;
    let mut lines: std::collections::BTreeMap<String, u64> = std::collections::BTreeMap::new();
    for (path, weight) in paths {
        let mut line = String::new();
        for (i, name) in path.into_iter().enumerate() {
            if i > 0 {
                line.push(';');
            }
            line.extend(fold_chars(name));
        }
        *lines.entry(line).or_insert(0) += weight;
    }
    let mut out = String::new();
    for (k, n) in lines {
        let _ = writeln!(out, "{k} {n}");
    }
    out
}

/// The inferno options of every flame graph: titled `title`, widths counted in `count_name`, colors
/// chosen from the function name (the same function has the same color in every graph).
pub fn svg_options(title: &str, count_name: &str) -> inferno::flamegraph::Options<'static> {
    let mut opts = inferno::flamegraph::Options::default();
    opts.title = title.to_string();
    opts.count_name = count_name.to_string();
    opts.name_type = "Function:".to_string();
    opts.hash = true;
    opts
}

/// Writes an SVG flame graph of the function calls in `cct`, titled `title`.
pub fn write_svg(cct: &Cct, title: &str, out: &mut dyn Write) -> io::Result<()> {
    let opts = svg_options(title, "ns");
    let lines = drawable_lines(&CctFrames::new(cct), opts.min_width);
    if lines.is_empty() {
        // inferno refuses empty input; draw an honest empty graph instead.
        return write_empty(out, title, "no function calls in the trace");
    }
    render(lines, opts, out)
}

/// What `flame` draws of a trace ([`Input::of`]).
pub enum Input {
    /// Its samples, summed per stack.
    Samples(Box<SampleSet>, StackTotals),
    /// Its function calls.
    Functions,
}

impl Input {
    /// The samples of `trace` when asked for (`samples`, `flame --samples`) or when it holds no
    /// function events (a profile); its function calls otherwise. An error when samples were asked
    /// for and the trace holds none.
    pub fn of(trace: &Trace, samples: bool) -> Result<Input, FlameError> {
        let totals = if samples || !trace.has_function_events() {
            SampleSet::load_totals(trace).map_err(FlameError::Read)?
        } else {
            None
        };
        match totals {
            Some((set, totals)) => Ok(Input::Samples(Box::new(set), totals)),
            None if samples => Err(FlameError::NoSamples(trace.path().to_path_buf())),
            None => Ok(Input::Functions),
        }
    }
}

/// Why a flame graph cannot be drawn.
#[derive(Debug)]
pub enum FlameError {
    /// The trace could not be read.
    Read(ReadError),
    /// Samples were asked for; the trace holds none.
    NoSamples(PathBuf),
    /// Allocations were asked for; the trace holds none.
    NoAllocations(PathBuf),
    /// No allocation has the weight asked for (`--weight leaked` of a trace without leaks).
    NothingToDraw(PathBuf, &'static str),
    /// Drawing failed.
    Render(String),
}

impl fmt::Display for FlameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FlameError::Read(e) => write!(f, "{e}"),
            FlameError::NoSamples(p) => {
                write!(f, "{}: --samples: the trace holds no samples", p.display())
            }
            FlameError::NoAllocations(p) => write!(
                f,
                "{}: --weight: the trace holds no allocations (record with --alloc)",
                p.display()
            ),
            FlameError::NothingToDraw(p, unit) => {
                write!(f, "{}: no allocation has {unit} to draw", p.display())
            }
            FlameError::Render(e) => f.write_str(e),
        }
    }
}

impl std::error::Error for FlameError {}

/// Writes the flame graph of the function calls in `cct` (of `trace`): an SVG titled with the
/// program's command line, or the folded stacks (`folded`).
pub fn write_functions(
    trace: &Trace,
    cct: &Cct,
    folded: bool,
    out: &mut dyn Write,
) -> io::Result<()> {
    if folded {
        write_folded(cct, out)
    } else {
        let title = format!("ferrotrace: {}", trace.session().args.join(" "));
        write_svg(cct, &title, out)
    }
}

/// Draws folded `lines` (from [`drawable_lines`]) with `opts`.
pub fn render(
    lines: String,
    mut opts: inferno::flamegraph::Options<'_>,
    out: &mut dyn Write,
) -> io::Result<()> {
    inferno::flamegraph::from_lines(&mut opts, lines.lines(), out)
        .map_err(|e| io::Error::other(e.to_string()))
}

/// An SVG that says why there is no graph.
fn write_empty(out: &mut dyn Write, title: &str, why: &str) -> io::Result<()> {
    writeln!(
        out,
        "<?xml version=\"1.0\" standalone=\"no\"?><svg xmlns=\"http://www.w3.org/2000/svg\" \
         width=\"600\" height=\"60\"><text x=\"10\" y=\"30\">{}: {}</text></svg>",
        xml_escape(title),
        xml_escape(why)
    )
}

fn xml_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// A tree of weighted frames as a flame graph draws it: the calling-context tree of function calls,
/// or the stacks of samples. Node 0 is the root (not drawn); a node's children have distinct labels.
pub trait Frames {
    /// Number of nodes, the root included.
    fn node_count(&self) -> usize;
    /// Children of node `n`.
    fn children(&self, n: usize) -> &[usize];
    /// Weight of `n` itself, not of its children (self time, samples).
    fn self_weight(&self, n: usize) -> u64;
    /// What node `n`'s frame shows, as folded stacks spell it (see [`fold_chars`]).
    fn label(&self, n: usize) -> &str;
}

/// The folded lines that draw `tree` as inferno draws all of its lines with minimum frame width
/// `min_width` (percent of the total): every frame at least that wide is a line or the prefix of
/// one; each narrower subtree is folded into a line of its total weight named after it, and runs of
/// such siblings (in label order, inferno's order) share a line while it stays narrower than the
/// minimum, so inferno draws none of them and every other frame stays in its place. Empty when the
/// tree weighs nothing.
pub fn drawable_lines(tree: &dyn Frames, min_width: f64) -> String {
    let width = subtree_weights(tree);
    let total = width[ROOT];
    let mut lines = String::new();
    if total == 0 {
        return lines;
    }
    // inferno's own arithmetic (flamegraph::from_lines), so that exactly the frames it would leave out
    // are folded away.
    let widthpertime_pct = 100.0 / total as f64;
    let minwidth_time = min_width / widthpertime_pct;
    let drawn = |n: usize| (width[n] as f64) >= minwidth_time;

    // Depth-first over the drawn nodes; `path` is the folded stack of the node being visited.
    let mut path = String::new();
    let mut stack: Vec<Visit> = vec![Visit::Children(ROOT)];
    while let Some(visit) = stack.pop() {
        match visit {
            Visit::Leave(len) => path.truncate(len),
            Visit::Children(n) => {
                let mut kids: Vec<usize> = tree
                    .children(n)
                    .iter()
                    .copied()
                    .filter(|&c| width[c] > 0)
                    .collect();
                kids.sort_unstable_by(|&a, &b| tree.label(a).cmp(tree.label(b)));
                // Pushed in reverse so that children are visited in label order; the runs of narrow
                // children become lines right away (their order among the lines does not matter:
                // inferno sorts them).
                let mut run: Option<(usize, u64)> = None;
                let mut drawn_kids = Vec::new();
                for &c in &kids {
                    if drawn(c) {
                        if let Some((first, w)) = run.take() {
                            push_line(&mut lines, &path, Some(tree.label(first)), w);
                        }
                        drawn_kids.push(c);
                        continue;
                    }
                    run = match run {
                        Some((first, w)) if ((w + width[c]) as f64) < minwidth_time => {
                            Some((first, w + width[c]))
                        }
                        Some((first, w)) => {
                            push_line(&mut lines, &path, Some(tree.label(first)), w);
                            Some((c, width[c]))
                        }
                        None => Some((c, width[c])),
                    };
                }
                if let Some((first, w)) = run {
                    push_line(&mut lines, &path, Some(tree.label(first)), w);
                }
                for &c in drawn_kids.iter().rev() {
                    stack.push(Visit::Enter(c));
                }
            }
            Visit::Enter(n) => {
                let len = path.len();
                if !path.is_empty() {
                    path.push(';');
                }
                path.push_str(tree.label(n));
                let w = tree.self_weight(n);
                if w > 0 {
                    push_line(&mut lines, &path, None, w);
                }
                stack.push(Visit::Leave(len));
                stack.push(Visit::Children(n));
            }
        }
    }
    lines
}

/// A step of [`drawable_lines`]' walk.
enum Visit {
    /// Add the node to the path and visit its children.
    Enter(usize),
    /// Fold the narrow children of the node and enter the others.
    Children(usize),
    /// Cut the path back to this length.
    Leave(usize),
}

/// Appends `path[;frame] WEIGHT\n`.
fn push_line(lines: &mut String, path: &str, frame: Option<&str>, weight: u64) {
    lines.push_str(path);
    if let Some(f) = frame {
        if !path.is_empty() {
            lines.push(';');
        }
        lines.push_str(f);
    }
    lines.push(' ');
    lines.push_str(&weight.to_string());
    lines.push('\n');
}

/// The weight of every node's subtree (its width in the graph), in one pass after the children.
fn subtree_weights(tree: &dyn Frames) -> Vec<u64> {
    let mut width = vec![0u64; tree.node_count()];
    // Post-order without recursion: a node's weight is final once all its children were added.
    let mut stack: Vec<(usize, bool)> = vec![(ROOT, false)];
    while let Some((n, children_done)) = stack.pop() {
        if children_done {
            let w = tree.self_weight(n)
                + tree
                    .children(n)
                    .iter()
                    .map(|&c| width[c])
                    .fold(0u64, u64::saturating_add);
            width[n] = w;
        } else {
            stack.push((n, true));
            stack.extend(tree.children(n).iter().map(|&c| (c, false)));
        }
    }
    width
}

/// The calling-context tree as frames: weights are self times, labels the functions' [`Labels`].
pub struct CctFrames<'a> {
    cct: &'a Cct,
    /// Label of each function of the tree.
    labels: HashMap<u32, Box<str>>,
}

impl<'a> CctFrames<'a> {
    /// The frames of `cct`, labelled.
    pub fn new(cct: &'a Cct) -> CctFrames<'a> {
        let mut folded: HashMap<u32, Box<str>> = HashMap::new();
        for node in &cct.nodes[1..] {
            folded
                .entry(node.func)
                .or_insert_with(|| fold(&cct.names.get(node.func)));
        }
        let labels = Labels::new(folded.values().map(|n| &**n));
        let labels = folded
            .iter()
            .map(|(&func, name)| (func, labels.get(name).into()))
            .collect();
        CctFrames { cct, labels }
    }
}

impl Frames for CctFrames<'_> {
    fn node_count(&self) -> usize {
        self.cct.nodes.len()
    }

    fn children(&self, n: usize) -> &[usize] {
        &self.cct.nodes[n].children
    }

    fn self_weight(&self, n: usize) -> u64 {
        if n == ROOT {
            0
        } else {
            self.cct.nodes[n].self_ns
        }
    }

    fn label(&self, n: usize) -> &str {
        self.labels.get(&self.cct.nodes[n].func).map_or("", |l| l)
    }
}

/// A tree of frames built from weighted stacks (samples): a node per distinct path of labels.
#[derive(Clone, Debug)]
pub struct StackFrames {
    nodes: Vec<StackFrame>,
    index: HashMap<(usize, Box<str>), usize>,
}

#[derive(Clone, Debug, Default)]
struct StackFrame {
    label: Box<str>,
    children: Vec<usize>,
    weight: u64,
}

impl Default for StackFrames {
    fn default() -> StackFrames {
        StackFrames {
            nodes: vec![StackFrame::default()],
            index: HashMap::new(),
        }
    }
}

impl StackFrames {
    /// Adds `weight` to the stack `labels` (outermost first, folded).
    pub fn add<'a>(&mut self, labels: impl IntoIterator<Item = &'a str>, weight: u64) {
        let mut n = ROOT;
        for label in labels {
            n = match self.index.get(&(n, label.into())) {
                Some(&c) => c,
                None => {
                    let c = self.nodes.len();
                    self.nodes.push(StackFrame {
                        label: label.into(),
                        ..StackFrame::default()
                    });
                    self.nodes[n].children.push(c);
                    self.index.insert((n, label.into()), c);
                    c
                }
            };
        }
        if n != ROOT {
            self.nodes[n].weight += weight;
        }
    }
}

impl Frames for StackFrames {
    fn node_count(&self) -> usize {
        self.nodes.len()
    }

    fn children(&self, n: usize) -> &[usize] {
        &self.nodes[n].children
    }

    fn self_weight(&self, n: usize) -> u64 {
        self.nodes[n].weight
    }

    fn label(&self, n: usize) -> &str {
        &self.nodes[n].label
    }
}

/// `name` as a folded frame.
fn fold(name: &str) -> Box<str> {
    fold_chars(name).collect::<String>().into()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `narrow` narrow leaves under each of `wide` wide frames, in a tree of samples.
    fn tree(wide: usize, narrow: usize) -> StackFrames {
        let mut t = StackFrames::default();
        for w in 0..wide {
            let parent = format!("wide{w}");
            t.add(["main", parent.as_str()], 100_000);
            for n in 0..narrow {
                let leaf = format!("leaf{n}");
                t.add(["main", parent.as_str(), leaf.as_str(), "deeper"], 1);
            }
        }
        t
    }

    fn svg(lines: String) -> Vec<u8> {
        let mut out = Vec::new();
        render(lines, svg_options("t", "ns"), &mut out).unwrap();
        out
    }

    #[test]
    fn pruned_lines_draw_what_every_line_draws() {
        let t = tree(3, 5000);
        let min = svg_options("t", "ns").min_width;
        let all = drawable_lines(&t, 0.0);
        let pruned = drawable_lines(&t, min);
        assert_eq!(all.lines().count(), 3 * 5001);
        // Total 315,000, so frames narrower than 31.5 (0.01%) are not drawn: each wide frame keeps
        // its line, and its 5,000 leaves fold into lines of 31 (162 of them).
        assert_eq!(pruned.lines().count(), 3 * (1 + 162), "{pruned}");
        assert_eq!(svg(pruned), svg(all));
    }
}
