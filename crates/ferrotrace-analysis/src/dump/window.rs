//! `dump --from/--to`: the part of a trace to write, as a time since the trace's start (`1.5s`,
//! `200ms`, `10us`, `300ns`) or a function's occurrence (`parse#3`: the third call of `parse`,
//! counted over all threads in time order; `--from` takes its entry, `--to` its exit).

use std::io;

use super::{walk, Ev};
use crate::names::Names;
use crate::progress::Progress;
use crate::reader::Trace;

/// The part of a trace to write: events from `from` to `to` (CLOCK_MONOTONIC ns, inclusive).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Window {
    /// First time shown.
    pub from: u64,
    /// Last time shown.
    pub to: u64,
}

impl Default for Window {
    fn default() -> Window {
        Window {
            from: 0,
            to: u64::MAX,
        }
    }
}

impl Window {
    /// True when it is the whole trace.
    pub fn is_all(&self) -> bool {
        *self == Window::default()
    }
}

/// One end of a window, as the user gave it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Point {
    /// Nanoseconds since the trace's start.
    Elapsed(u64),
    /// The `n`th call (from 1) of the function named `name`.
    Call {
        /// The function's name, as reports show it.
        name: String,
        /// Which call.
        n: u64,
    },
}

/// Parses a duration with its unit (`1.5s`, `200ms`, `10us`, `300ns`: the units grammar) or `NAME#N`.
pub fn parse_point(s: &str) -> Result<Point, String> {
    let s = s.trim();
    if let Some((name, n)) = s.rsplit_once('#') {
        let n: u64 = n
            .parse()
            .ok()
            .filter(|&n| n > 0)
            .ok_or_else(|| format!("bad call {s:?}: give FUNCTION#N with N = 1, 2, …"))?;
        if name.is_empty() {
            return Err(format!("bad call {s:?}: give FUNCTION#N"));
        }
        return Ok(Point::Call {
            name: name.to_string(),
            n,
        });
    }
    ferrotrace_core::units::parse_duration(s, None)
        .map(Point::Elapsed)
        .map_err(|e| {
            format!(
                "bad time {s:?}: {e}, since the trace's start; or a call as FUNCTION#N (parse#3)"
            )
        })
}

/// The window from `from` to `to` (either may be absent) in `trace`'s CLOCK_MONOTONIC ns.
pub fn resolve(trace: &Trace, from: Option<&Point>, to: Option<&Point>) -> Result<Window, String> {
    let start = trace.start_ns();
    let at = |p: Option<&Point>, entry: bool, default: u64| -> Result<u64, String> {
        match p {
            None => Ok(default),
            Some(Point::Elapsed(ns)) => Ok(start.saturating_add(*ns)),
            Some(Point::Call { name, n }) => call(trace, name, *n)
                .map_err(|e| e.to_string())?
                .map(|(a, b)| if entry { a } else { b })
                .ok_or_else(|| {
                    format!(
                        "{}: {name}#{n}: the trace has fewer than {n} calls of {name}",
                        trace.path().display()
                    )
                }),
        }
    };
    let w = Window {
        from: at(from, true, 0)?,
        to: at(to, false, u64::MAX)?,
    };
    if w.from > w.to {
        return Err("--to comes before --from".into());
    }
    Ok(w)
}

/// The error that stops a walk early (the end of a window, a call found).
#[derive(Debug)]
pub(crate) struct Stop;

impl std::fmt::Display for Stop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("stopped")
    }
}

impl std::error::Error for Stop {}

/// [`Stop`] as an I/O error, to return from a walk's function.
pub(crate) fn stop() -> io::Error {
    io::Error::other(Stop)
}

/// True for [`stop`]'s error.
pub(crate) fn is_stop(e: &io::Error) -> bool {
    e.get_ref().is_some_and(|e| e.is::<Stop>())
}

/// The entry and exit times of the `n`th call of `name` (in time order over all threads).
fn call(trace: &Trace, name: &str, n: u64) -> io::Result<Option<(u64, u64)>> {
    let names = Names::of(trace);
    let ids: std::collections::HashSet<u32> = trace
        .functions()
        .keys()
        .copied()
        .filter(|&id| names.get(id) == name)
        .collect();
    if ids.is_empty() {
        return Ok(None);
    }
    let mut seen = 0u64;
    let mut found: Option<(u32, usize, u64)> = None;
    let mut result = None;
    let mut progress = Progress::with_enabled("dump", trace.event_count(), false);
    let done = walk(trace, &mut progress, |ev| {
        match (ev, found) {
            (
                Ev::Begin {
                    tid, id, ts, depth, ..
                },
                None,
            ) if ids.contains(&id) => {
                seen += 1;
                if seen == n {
                    found = Some((tid, depth, ts));
                }
            }
            (Ev::End { tid, ts, depth, .. }, Some((t, d, start))) if tid == t && depth == d => {
                result = Some((start, ts));
                return Err(stop());
            }
            _ => {}
        }
        Ok(())
    });
    match done {
        Err(e) if !is_stop(&e) => Err(e),
        _ => Ok(result),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn points_parse() {
        assert_eq!(parse_point("1.5s"), Ok(Point::Elapsed(1_500_000_000)));
        assert_eq!(parse_point("200ms"), Ok(Point::Elapsed(200_000_000)));
        assert_eq!(parse_point("10us"), Ok(Point::Elapsed(10_000)));
        assert_eq!(parse_point("300ns"), Ok(Point::Elapsed(300)));
        assert_eq!(
            parse_point("parse#3"),
            Ok(Point::Call {
                name: "parse".into(),
                n: 3
            })
        );
        assert_eq!(
            parse_point("a::b<c#d>#12"),
            Ok(Point::Call {
                name: "a::b<c#d>".into(),
                n: 12
            })
        );
        for bad in ["1.5", "parse#0", "parse#", "#3", "-1s", "x"] {
            assert!(parse_point(bad).is_err(), "{bad}");
        }
    }
}
