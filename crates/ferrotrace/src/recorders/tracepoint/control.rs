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

use crate::lifecycle::runtime::Program;
use crate::patch::static_key;
use crate::recorders::tracepoint::{self, Info, Probe};
use crate::state::PROCESS;

/// Matches `text` against a glob with `*` and `?`.
pub(crate) fn glob_match(glob: &str, text: &str) -> bool {
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
pub(crate) fn selects(glob: &str, full: &str) -> bool {
    let glob = glob.trim();
    if glob.contains("::") {
        glob_match(glob, full)
    } else {
        glob_match(glob, full.rsplit("::").next().unwrap_or(full))
    }
}

/// Splits a list of globs separated by commas or newlines.
pub(crate) fn split_globs(list: &str) -> impl Iterator<Item = &str> {
    list.split([',', '\n'])
        .map(str::trim)
        .filter(|g| !g.is_empty())
}

/// True while a tracer is attached to the SDT probe of the tracepoint with descriptor `desc`.
fn attached(probes: &[Probe], desc: usize) -> bool {
    probes
        .iter()
        .any(|p| p.desc == desc && p.semaphore.load(Ordering::Relaxed) != 0)
}

/// Patches the sites of the tracepoints with descriptors `descs` to fire or not: they fire while the
/// tracepoint is enabled or its probe has a tracer (`usdt`). The caller holds `PROCESS.tracepoint_control`.
fn apply(descs: &[usize], probes: &[Probe]) {
    let fires = |desc: usize| {
        // SAFETY: `desc` is the address of a descriptor of this program (from its own tables).
        let header = unsafe { &*(desc as *const tracepoint::Header) };
        header.enabled.load(Ordering::Relaxed) != 0 || attached(probes, desc)
    };
    let sites = tracepoint::sites();
    for want in [true, false] {
        let pairs: Vec<(usize, usize)> = sites
            .iter()
            .filter(|s| descs.contains(&s.desc) && fires(s.desc) == want)
            .map(|s| (s.addr, s.target))
            .collect();
        // SAFETY: the pairs come from this program's site table.
        if let Err(e) = unsafe { static_key::set_sites(&pairs, want) } {
            say!("ferrotrace: cannot patch tracepoint sites: {e}");
        }
    }
}

/// The USDT watcher: the probes of `descs` gained or lost their tracer.
#[cfg(not(feature = "preload"))]
pub(crate) fn refresh(descs: &[usize], probes: &[Probe]) {
    let _control = PROCESS
        .tracepoint_control
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    apply(descs, probes);
}

fn set(glob: &str, enable: bool) -> usize {
    set_chosen(|t| split_globs(glob).any(|g| selects(g, t.name)), enable).len()
}

/// Enables (or disables) the tracepoints `choose` picks; their descriptors.
fn set_chosen(choose: impl Fn(&Info) -> bool, enable: bool) -> Vec<usize> {
    let _control = PROCESS
        .tracepoint_control
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    let chosen: Vec<Info> = tracepoint::all().into_iter().filter(choose).collect();
    if chosen.is_empty() {
        return Vec::new();
    }
    for t in &chosen {
        t.header.enabled.store(enable as u32, Ordering::Relaxed);
    }
    let descs: Vec<usize> = chosen
        .iter()
        .map(|t| t.header as *const _ as usize)
        .collect();
    apply(&descs, &tracepoint::probes());
    descs
}

/// An attached recording (`record -p --trace`) starts: enables the tracepoints `globs` select that are
/// not enabled already, and returns their descriptors, for [`disable_attached`] when it stops. Those the
/// program enabled itself are left to it.
pub(crate) fn enable_attached(globs: &str) -> Vec<usize> {
    set_chosen(
        |t| {
            t.header.enabled.load(Ordering::Relaxed) == 0
                && split_globs(globs).any(|g| selects(g, t.name))
        },
        true,
    )
}

/// An attached recording stops: disables what [`enable_attached`] enabled.
pub(crate) fn disable_attached(descs: &[usize]) {
    set_chosen(|t| descs.contains(&(t.header as *const _ as usize)), false);
}

/// Each of `globs` that selects none of the program's tracepoints, said in one line that lists them.
pub(crate) fn unmatched(globs: &str) -> Vec<String> {
    let all = tracepoint::all();
    let names: Vec<&str> = all.iter().map(|t| t.name).collect();
    split_globs(globs)
        .filter(|g| !all.iter().any(|t| selects(g, t.name)))
        .map(|g| {
            format!(
                "--trace '{g}' selects none of the program's tracepoints ({})",
                names.join(", ")
            )
        })
        .collect()
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

/// The globs of `FERROTRACE_TRACE`, if set and not empty.
pub(crate) fn requested() -> Option<String> {
    std::env::var(ferrotrace_core::env::TRACE)
        .ok()
        .filter(|v| split_globs(v).next().is_some())
}

/// A tracepoint id never given before in this process's trace.
pub(crate) fn new_id() -> u32 {
    PROCESS.next_tracepoint_id.fetch_add(1, Ordering::Relaxed)
}

/// Runtime start-up: gives every tracepoint its id (1, 2, … in descriptor order) and returns the
/// `Tracepoints` chunk payload.
pub(crate) fn assign_ids() -> Vec<u8> {
    let all = tracepoint::all();
    PROCESS
        .next_tracepoint_id
        .fetch_max(all.len() as u32 + 1, Ordering::Relaxed);
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

/// Runtime start-up, once recording: enables what `FERROTRACE_TRACE` asks for, and says which of its
/// globs select nothing (unless the program records `tracing` events, which the globs select as they
/// are met: `recorders::callsites`).
pub(crate) fn enable_requested(program: &Program) {
    let Some(globs) = requested() else { return };
    enable(&globs);
    if program.sources & schema::source::TRACING != 0 {
        return;
    }
    for unmatched in unmatched(&globs) {
        say!("ferrotrace: {unmatched}");
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
