//! Enabling and disabling tracepoints at run time, by glob.
//!
//! A glob matches a tracepoint's full name `crate::name` when it contains `::`, else its short `name`;
//! `*` matches any run of characters, `?` one character. Globs come from `ferrotrace record --trace`, the
//! `FERROTRACE_TRACE` variable (globs separated by commas or newlines; setting it starts the linked
//! runtime and records into `FERROTRACE_OUTPUT`, default `ferrotrace.data`), or from code:
//!
//! ```
//! ferrotrace::tracepoint!(vfs_open, path: &str, flags: u32);
//!
//! let n = ferrotrace::tracepoints::enable("vfs_*");
//! assert_eq!(n, 1);
//! vfs_open("/etc/hosts", 0); // recorded when ferrotrace is recording this process
//! ferrotrace::tracepoints::disable("*");
//! ```

use std::sync::atomic::Ordering;

use ferrotrace_core::schema::{self, Payload};

use crate::static_key;
use crate::tracepoint::{self, Info};

/// Matches `text` against a glob with `*` and `?`.
pub fn glob_match(glob: &str, text: &str) -> bool {
    let (g, t) = (glob.as_bytes(), text.as_bytes());
    let (mut gi, mut ti) = (0usize, 0usize);
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        if gi < g.len() && (g[gi] == b'?' || g[gi] == t[ti]) {
            gi += 1;
            ti += 1;
        } else if gi < g.len() && g[gi] == b'*' {
            star = Some((gi, ti));
            gi += 1;
        } else if let Some((sg, st)) = star {
            gi = sg + 1;
            ti = st + 1;
            star = Some((sg, st + 1));
        } else {
            return false;
        }
    }
    g[gi..].iter().all(|&c| c == b'*')
}

/// True when `glob` selects the tracepoint called `full` (`crate::name`).
pub fn selects(glob: &str, full: &str) -> bool {
    let glob = glob.trim();
    if glob.contains("::") {
        glob_match(glob, full)
    } else {
        glob_match(glob, full.rsplit("::").next().unwrap_or(full))
    }
}

/// Splits a list of globs separated by commas or newlines.
pub fn split_globs(list: &str) -> impl Iterator<Item = &str> {
    list.split([',', '\n'])
        .map(str::trim)
        .filter(|g| !g.is_empty())
}

fn set(glob: &str, enable: bool) -> usize {
    let all = tracepoint::all();
    let chosen: Vec<&Info> = all
        .iter()
        .filter(|t| split_globs(glob).any(|g| selects(g, t.name)))
        .collect();
    if chosen.is_empty() {
        return 0;
    }
    let descs: Vec<usize> = chosen
        .iter()
        .map(|t| t.header as *const _ as usize)
        .collect();
    let sites: Vec<(usize, usize)> = tracepoint::sites()
        .into_iter()
        .filter(|s| descs.contains(&s.desc))
        .map(|s| (s.addr, s.target))
        .collect();
    for t in &chosen {
        t.header.enabled.store(enable as u32, Ordering::Relaxed);
    }
    if let Err(e) = static_key::set_sites(&sites, enable) {
        eprintln!("ferrotrace: cannot patch tracepoint sites: {e}");
    }
    chosen.len()
}

/// Enables every tracepoint the glob (or comma-separated globs) selects; returns how many it selected.
/// Safe while other threads run through the sites.
///
/// ```
/// ferrotrace::tracepoint!(tick, n: u64);
/// assert_eq!(ferrotrace::tracepoints::enable("tick"), 1);
/// assert_eq!(ferrotrace::tracepoints::enable("no_such_*"), 0);
/// ```
pub fn enable(glob: &str) -> usize {
    set(glob, true)
}

/// Disables every tracepoint the glob selects; returns how many it selected.
///
/// ```
/// ferrotrace::tracepoint!(tock, n: u64);
/// ferrotrace::tracepoints::enable("tock");
/// assert_eq!(ferrotrace::tracepoints::disable("*::tock"), 1);
/// ```
pub fn disable(glob: &str) -> usize {
    set(glob, false)
}

/// A tracepoint of this program, as [`list`] returns it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tracepoint {
    /// `crate::name`.
    pub name: String,
    /// Arguments as `name:type`, comma-separated.
    pub args: String,
    /// Display format, empty if none.
    pub format: String,
    /// Declaration's source file and line.
    pub location: (String, u32),
    /// Number of sites in the program.
    pub sites: usize,
    /// Whether its sites are enabled.
    pub enabled: bool,
}

/// Every tracepoint linked into this program.
///
/// ```
/// ferrotrace::tracepoint!(listed, x: i32);
/// listed(1);
/// let all = ferrotrace::tracepoints::list();
/// assert!(all.iter().any(|t| t.name.ends_with("::listed") && t.args == "x:i32"));
/// ```
pub fn list() -> Vec<Tracepoint> {
    let sites = tracepoint::sites();
    tracepoint::all()
        .into_iter()
        .map(|t| Tracepoint {
            name: t.name.to_string(),
            args: t.args.to_string(),
            format: t.format.to_string(),
            location: (t.file.to_string(), t.line),
            sites: sites
                .iter()
                .filter(|s| s.desc == t.header as *const _ as usize)
                .count(),
            enabled: t.header.enabled.load(Ordering::Relaxed) != 0,
        })
        .collect()
}

/// The globs of `FERROTRACE_TRACE`, if set and not empty.
pub fn requested() -> Option<String> {
    std::env::var("FERROTRACE_TRACE")
        .ok()
        .filter(|v| split_globs(v).next().is_some())
}

/// Runtime start-up: gives every tracepoint its id (1, 2, … in descriptor order) and returns the
/// `Tracepoints` chunk payload.
pub fn assign_ids() -> Vec<u8> {
    let all = tracepoint::all();
    let mut p = Vec::new();
    let _ = schema::Count(all.len() as u64).encode(&mut p);
    for (i, t) in all.iter().enumerate() {
        let id = i as u32 + 1;
        t.header.id.store(id, Ordering::Relaxed);
        let _ = schema::TracepointDesc {
            id,
            name: t.name,
            args: t.args,
            format: t.format,
            file: t.file,
            line: t.line,
        }
        .encode(&mut p);
    }
    p
}

/// Runtime start-up, once recording: enables what `FERROTRACE_TRACE` asks for.
pub fn enable_requested() {
    if let Some(globs) = requested() {
        enable(&globs);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs() {
        assert!(selects("vfs_*", "app::vfs_open"));
        assert!(!selects("vfs_*", "app::net_recv"));
        assert!(selects("app::*", "app::net_recv"));
        assert!(!selects("other::*", "app::net_recv"));
        assert!(selects("*", "app::x"));
        assert!(selects("n?t_*v", "app::net_recv"));
        assert!(selects("*recv", "app::net_recv"));
        assert!(!selects("recv", "app::net_recv"));
        assert_eq!(
            split_globs("a, b\nc,,").collect::<Vec<_>>(),
            ["a", "b", "c"]
        );
    }
}
