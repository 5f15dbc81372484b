//! `ferrotrace flame`: a flame graph weighted by time (self time in nanoseconds of each call path,
//! so a frame's width is its total time), drawn by inferno; or the folded stacks as text.

use std::io::{self, Write};

use crate::cct::Cct;

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

/// An SVG flame graph of folded `lines` (inferno), titled `title`, widths counted in `count_name`.
pub fn render_folded<'a>(
    lines: impl Iterator<Item = &'a str>,
    title: &str,
    count_name: &str,
) -> Result<Vec<u8>, String> {
    let mut opts = inferno::flamegraph::Options::default();
    opts.title = title.to_string();
    opts.count_name = count_name.to_string();
    opts.name_type = "Function:".to_string();
    let mut out = Vec::new();
    inferno::flamegraph::from_lines(&mut opts, lines, &mut out).map_err(|e| e.to_string())?;
    Ok(out)
}

/// The folded stacks as lines, for inferno.
pub fn folded_lines(cct: &Cct) -> Vec<String> {
    let mut v = Vec::new();
    write_folded(cct, &mut v).expect("writing to a Vec cannot fail");
    String::from_utf8_lossy(&v)
        .lines()
        .map(str::to_owned)
        .collect()
}

/// Writes an SVG flame graph titled `title`.
pub fn write_svg(cct: &Cct, title: &str, out: &mut dyn Write) -> io::Result<()> {
    let lines = folded_lines(cct);
    let mut opts = inferno::flamegraph::Options::default();
    opts.title = title.to_string();
    opts.count_name = "ns".to_string();
    opts.name_type = "Function:".to_string();
    if lines.is_empty() {
        // inferno refuses empty input; draw an honest empty graph instead.
        writeln!(
            out,
            "<?xml version=\"1.0\" standalone=\"no\"?><svg xmlns=\"http://www.w3.org/2000/svg\" \
             width=\"600\" height=\"60\"><text x=\"10\" y=\"30\">{}: no function calls in the trace</text></svg>",
            xml_escape(title)
        )?;
        return Ok(());
    }
    inferno::flamegraph::from_lines(&mut opts, lines.iter().map(String::as_str), out)
        .map_err(|e| io::Error::other(e.to_string()))
}

fn xml_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}
