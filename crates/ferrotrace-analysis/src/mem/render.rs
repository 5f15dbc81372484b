//! `mem`'s rendering of a [`MemReport`]: text views and JSON.

use std::fmt::Write as _;

use super::{is_plumbing, MemReport, Site, StackGroup};
use crate::stacks::Frame;

/// What [`MemReport::text`] shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum View {
    /// Totals, the peak and who held it, leaks, top sites by bytes and by allocations.
    Summary,
    /// Every leak, by stack.
    Leaks,
    /// Temporary allocations, by stack.
    Temporary,
}

/// `1234567` as `1,234,567`.
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

impl MemReport {
    fn frame_line(f: &Frame) -> String {
        let mut s = f.function.to_string();
        if !f.file.is_empty() {
            let file = f.file.rsplit('/').next().unwrap_or(&f.file);
            let _ = write!(s, " ({file}:{})", f.line);
        }
        s
    }

    /// Writes a stack from its site outwards, one line per function (inlined frames folded into the
    /// function they were inlined into, allocator plumbing above the site left out).
    fn write_stack(&self, out: &mut String, stack: Option<u32>, indent: &str, limit: usize) {
        let frames = self.stack_frames(stack);
        let first = frames
            .iter()
            .position(|f| !is_plumbing(&f.function))
            .unwrap_or(0);
        let shown: Vec<&&Frame> = frames[first..].iter().filter(|f| !f.inlined).collect();
        if shown.is_empty() {
            let _ = writeln!(out, "{indent}[no stack]");
        }
        for f in shown.iter().take(limit) {
            let _ = writeln!(out, "{indent}{}", Self::frame_line(f));
        }
        if shown.len() > limit {
            let _ = writeln!(out, "{indent}... {} more frames", shown.len() - limit);
        }
    }

    fn write_groups(&self, out: &mut String, groups: &[StackGroup], what: &str, limit: usize) {
        for g in groups.iter().take(limit) {
            let _ = writeln!(
                out,
                "  {} bytes in {} {what}{}",
                thousands(g.bytes),
                thousands(g.blocks),
                if g.blocks == 1 { "" } else { "s" }
            );
            self.write_stack(out, g.stack, "      ", 12);
        }
        if groups.len() > limit {
            let _ = writeln!(out, "  ... {} more stacks", groups.len() - limit);
        }
    }

    fn write_sites(&self, out: &mut String, sites: &[&Site]) {
        let _ = writeln!(
            out,
            "  {:>14} {:>12} {:>14} {:>10}  function",
            "bytes", "allocations", "leaked", "temporary"
        );
        for s in sites {
            let _ = writeln!(
                out,
                "  {:>14} {:>12} {:>14} {:>10}  {}",
                thousands(s.bytes),
                thousands(s.allocations),
                thousands(s.leaked),
                thousands(s.temporary),
                s.function
            );
        }
    }

    /// `value`, and ` ± standard error` when the trace was sampled.
    fn estimate(&self, value: u64, std_error: f64) -> String {
        if self.sample_interval == 0 {
            thousands(value)
        } else {
            format!(
                "{} ± {}",
                thousands(value),
                thousands(std_error.max(0.0).round() as u64)
            )
        }
    }

    /// The report as text: `view`, with at most `limit` rows or stacks per list.
    pub fn text(&self, view: View, limit: usize) -> String {
        let mut out = String::new();
        let se = self.std_errors;
        let _ = writeln!(
            out,
            "allocations: {} ({} bytes), frees: {}",
            self.estimate(self.allocations, se.allocations),
            self.estimate(self.bytes, se.bytes),
            self.estimate(self.frees, se.frees)
        );
        if self.unseen_frees > 0 {
            let _ = writeln!(
                out,
                "  and {} frees of blocks allocated before recording started (not counted above)",
                thousands(self.unseen_frees)
            );
        }
        if self.sample_interval > 0 {
            let _ = writeln!(
                out,
                "  estimated from {} allocations and {} frees recorded, sampled every {} bytes on \
                 average; ± one standard error (95% of estimates are within two)",
                thousands(self.recorded),
                thousands(self.recorded_frees),
                thousands(self.sample_interval)
            );
        }
        let _ = writeln!(
            out,
            "peak heap: {} bytes at {}",
            self.estimate(self.peak_bytes, se.peak_bytes),
            crate::info::fmt_ns(self.peak_ns)
        );
        let unseen = if self.sample_interval > 0 && self.leaks.is_empty() {
            format!(
                " (none recorded: under {} bytes with 95% confidence)",
                thousands(self.unseen_bound())
            )
        } else {
            String::new()
        };
        let _ = writeln!(
            out,
            "{}: {} bytes in {} blocks{unseen}",
            if self.complete {
                "leaked at exit"
            } else {
                "live when the trace stopped (incomplete trace)"
            },
            self.estimate(self.leaked_bytes, se.leaked_bytes),
            self.estimate(self.leaked_blocks, se.leaked_blocks)
        );
        let pct = if self.allocations > 0 {
            self.temporary as f64 * 100.0 / self.allocations as f64
        } else {
            0.0
        };
        let _ = writeln!(
            out,
            "temporary allocations: {} ({pct:.1}% of allocations)",
            thousands(self.temporary)
        );
        match view {
            View::Summary => {
                let _ = writeln!(out, "\nheld at the peak:");
                self.write_groups(&mut out, &self.peak_stacks, "block", limit.min(5));
                let mut by_bytes: Vec<&Site> = self.sites.iter().collect();
                by_bytes.truncate(limit);
                let _ = writeln!(out, "\ntop sites by bytes:");
                self.write_sites(&mut out, &by_bytes);
                let mut by_count: Vec<&Site> = self.sites.iter().collect();
                by_count.sort_by(|a, b| {
                    (b.allocations, b.bytes)
                        .cmp(&(a.allocations, a.bytes))
                        .then(a.function.cmp(&b.function))
                });
                by_count.truncate(limit);
                let _ = writeln!(out, "\ntop sites by allocations:");
                self.write_sites(&mut out, &by_count);
                if !self.leaks.is_empty() {
                    let _ = writeln!(out, "\nleaks:");
                    self.write_groups(&mut out, &self.leaks, "block", limit.min(5));
                }
            }
            View::Leaks => {
                let _ = writeln!(out, "\nleaks by stack:");
                self.write_groups(&mut out, &self.leaks, "block", limit);
            }
            View::Temporary => {
                let _ = writeln!(out, "\ntemporary allocations by stack:");
                let mut t = self.temporaries.clone();
                t.sort_by_key(|g| std::cmp::Reverse((g.blocks, g.bytes)));
                self.write_groups(&mut out, &t, "allocation", limit);
            }
        }
        out
    }

    fn stack_json(&self, stack: Option<u32>) -> serde_json::Value {
        serde_json::Value::Array(
            self.stack_frames(stack)
                .into_iter()
                .map(|f| {
                    serde_json::json!({
                        "function": &*f.function,
                        "file": &*f.file,
                        "line": f.line,
                        "inlined": f.inlined,
                    })
                })
                .collect(),
        )
    }

    fn groups_json(&self, groups: &[StackGroup]) -> serde_json::Value {
        serde_json::Value::Array(
            groups
                .iter()
                .map(|g| {
                    serde_json::json!({
                        "bytes": g.bytes,
                        "blocks": g.blocks,
                        "site": self.site(g.stack),
                        "stack": self.stack_json(g.stack),
                    })
                })
                .collect(),
        )
    }

    /// The whole report as JSON (every list complete).
    pub fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "sample_interval": self.sample_interval,
            "recorded_allocations": self.recorded,
            "recorded_frees": self.recorded_frees,
            "unseen_frees": self.unseen_frees,
            "allocations": self.allocations,
            "bytes": self.bytes,
            "frees": self.frees,
            "allocated": {
                "stacks": self.groups_json(&self.by_stack),
            },
            // One standard deviation of each estimate (0 when every allocation was recorded).
            "std_error": {
                "allocations": self.std_errors.allocations,
                "bytes": self.std_errors.bytes,
                "frees": self.std_errors.frees,
                "peak_bytes": self.std_errors.peak_bytes,
                "leaked_bytes": self.std_errors.leaked_bytes,
                "leaked_blocks": self.std_errors.leaked_blocks,
            },
            "peak": {
                "bytes": self.peak_bytes,
                "ns": self.peak_ns,
                "stacks": self.groups_json(&self.peak_stacks),
            },
            "leaked": {
                "bytes": self.leaked_bytes,
                "blocks": self.leaked_blocks,
                "complete_trace": self.complete,
                // Sampled traces: leaked bytes that could go unrecorded (95 % confidence).
                "unseen_bound_bytes": self.unseen_bound(),
                "stacks": self.groups_json(&self.leaks),
            },
            "temporary": {
                "allocations": self.temporary,
                "stacks": self.groups_json(&self.temporaries),
            },
            "sites": self.sites.iter().map(|s| serde_json::json!({
                "function": s.function,
                "allocations": s.allocations,
                "bytes": s.bytes,
                "leaked": s.leaked,
                "temporary": s.temporary,
            })).collect::<Vec<_>>(),
        })
    }
}
