//! The command-line surface of `ferrotrace profile`, without clap.
//!
//! The `ferrotrace` CLI crate owns the argument parser; this module gives it everything that is specific to
//! profiling so that its `profile.rs` stays a thin wrapper: the EVENT spellings ([`EventSpec::parse`]), the
//! `--call-graph` values ([`parse_call_graph`]), and the limits of its durations ([`parse_duration`]),
//! frequencies ([`parse_frequency`]) and ring sizes ([`parse_buffer_size`]), which are written in
//! `ferrotrace_core::units`'s grammar like every other option's.
//!
//! ```text
//! ferrotrace profile [-F HZ] [-e EVENT]... [--call-graph fp|dwarf] [-m PAGES] [-o FILE] -- PROGRAM ARGS
//! ferrotrace profile [-F HZ] [-e EVENT]... [--call-graph fp|dwarf] [-m PAGES] [-o FILE] -p PID [--duration 10s]
//! ```
//!
//! EVENT spellings: `cpu-clock` (default), `uprobe:PATH:SYMBOL`, `uretprobe:PATH:SYMBOL`,
//! `usdt:PATH:PROVIDER:NAME`, `tracepoint:CATEGORY:NAME`, `off-cpu`
//! (`sched:sched_switch`, weighted by the time off the CPU), and cargo-trace's `profile:hz:99` and
//! `uprobe:/path:sym`; a bare `CATEGORY:NAME` such as `sched:sched_switch` is a tracepoint.

use std::path::PathBuf;
use std::time::Duration;

use ferrotrace_core::units;

use crate::ProfileError;

/// One thing to sample or probe.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EventSpec {
    /// Timer-driven sampling of on-CPU time (`cpu-clock`). `Some(hz)` when the spelling carried a
    /// frequency (`profile:hz:99`); it then overrides `-F`.
    CpuClock(Option<u32>),
    /// A user-space probe on the entry of `symbol` in the ELF file `path`.
    Uprobe {
        /// The executable or shared library.
        path: PathBuf,
        /// A C symbol (`malloc`), a mangled Rust symbol, or a demangled Rust path (`myapp::parse`).
        symbol: String,
    },
    /// A user-space probe on the returns of `symbol` in `path`: its stack is the caller's, at the
    /// return address.
    Uretprobe {
        /// The executable or shared library.
        path: PathBuf,
        /// As for [`EventSpec::Uprobe`].
        symbol: String,
    },
    /// A SystemTap SDT probe `provider:name` compiled into `path` (its `.note.stapsdt`), with its
    /// semaphore raised while recording.
    Usdt {
        /// The executable or shared library.
        path: PathBuf,
        /// The probe's provider, e.g. `libc`.
        provider: String,
        /// The probe's name, e.g. `memory_sbrk_more`.
        name: String,
    },
    /// A kernel tracepoint, e.g. `sched:sched_switch`.
    Tracepoint {
        /// Category (tracefs `events/` subdirectory), e.g. `sched`.
        category: String,
        /// Name, e.g. `sched_switch`.
        name: String,
    },
}

/// The events of a command line's `-e` values: cpu-clock when none is given.
pub fn parse_events(values: &[String]) -> Result<Vec<EventSpec>, ProfileError> {
    if values.is_empty() {
        return Ok(vec![EventSpec::CpuClock(None)]);
    }
    values.iter().map(|e| EventSpec::parse(e)).collect()
}

impl EventSpec {
    /// Parses one `-e` value. Hardware counters and kprobes are refused with the reason.
    pub fn parse(s: &str) -> Result<EventSpec, ProfileError> {
        let bad = |why: &str| ProfileError::BadArgument(format!("bad event `{s}`: {why}"));
        match s {
            "cpu-clock" | "cpu" | "profile" | "task-clock" => return Ok(EventSpec::CpuClock(None)),
            "off-cpu" | "offcpu" => {
                return Ok(EventSpec::Tracepoint {
                    category: "sched".into(),
                    name: "sched_switch".into(),
                })
            }
            "cycles" | "instructions" | "cache-misses" | "branch-misses" | "cpu-cycles" => {
                return Err(bad(
                    "hardware counters are not available on this machine; use cpu-clock",
                ))
            }
            _ => {}
        }
        if let Some(rest) = s.strip_prefix("profile:") {
            // cargo-trace: profile:hz:99
            let hz = rest
                .strip_prefix("hz:")
                .ok_or_else(|| bad("expected profile:hz:N"))?;
            let hz = units::parse_frequency(hz)
                .map_err(|_| bad("the frequency must be a positive integer"))?;
            return Ok(EventSpec::CpuClock(Some(hz)));
        }
        if let Some(rest) = s
            .strip_prefix("uretprobe:")
            .or_else(|| s.strip_prefix("ur:"))
        {
            let (path, symbol) = split_path_symbol(rest)
                .filter(|(p, s)| !p.is_empty() && !s.is_empty())
                .ok_or_else(|| bad("expected uretprobe:PATH:SYMBOL"))?;
            return Ok(EventSpec::Uretprobe {
                path: PathBuf::from(path),
                symbol: symbol.to_string(),
            });
        }
        if let Some(rest) = s.strip_prefix("usdt:").or_else(|| s.strip_prefix("U:")) {
            // PATH:PROVIDER:NAME; provider and name are identifiers, so the path is what precedes
            // the last two colons.
            let mut parts = rest.rsplitn(3, ':');
            return match (parts.next(), parts.next(), parts.next()) {
                (Some(name), Some(provider), Some(path))
                    if !path.is_empty() && valid_ident(provider) && valid_ident(name) =>
                {
                    Ok(EventSpec::Usdt {
                        path: PathBuf::from(path),
                        provider: provider.to_string(),
                        name: name.to_string(),
                    })
                }
                _ => Err(bad("expected usdt:PATH:PROVIDER:NAME")),
            };
        }
        if let Some(rest) = s.strip_prefix("uprobe:").or_else(|| s.strip_prefix("u:")) {
            // PATH:SYMBOL; PATH may itself contain ':' only in odd cases, so split at the last ':' that
            // is not part of a Rust path separator `::`.
            let (path, symbol) =
                split_path_symbol(rest).ok_or_else(|| bad("expected uprobe:PATH:SYMBOL"))?;
            if path.is_empty() || symbol.is_empty() {
                return Err(bad("expected uprobe:PATH:SYMBOL"));
            }
            return Ok(EventSpec::Uprobe {
                path: PathBuf::from(path),
                symbol: symbol.to_string(),
            });
        }
        if s.starts_with("kprobe:") || s.starts_with("kretprobe:") || s.starts_with("k:") {
            return Err(bad(
                "kprobes are not available in this kernel; use a tracepoint:CATEGORY:NAME",
            ));
        }
        let tp = s
            .strip_prefix("tracepoint:")
            .or_else(|| s.strip_prefix("t:"))
            .unwrap_or(s);
        let mut parts = tp.splitn(2, ':');
        match (parts.next(), parts.next()) {
            (Some(c), Some(n)) if valid_ident(c) && valid_ident(n) => Ok(EventSpec::Tracepoint {
                category: c.to_string(),
                name: n.to_string(),
            }),
            _ => Err(bad(
                "expected cpu-clock, uprobe:PATH:SYMBOL, uretprobe:PATH:SYMBOL, \
                 usdt:PATH:PROVIDER:NAME, tracepoint:CATEGORY:NAME or profile:hz:N",
            )),
        }
    }

    /// True for the event that gives off-CPU time: `sched:sched_switch` (also spelled `off-cpu`). Its
    /// samples are the stacks at which threads left the CPU, each weighted by the time until the thread
    /// ran again.
    pub fn is_off_cpu(&self) -> bool {
        matches!(self, EventSpec::Tracepoint { category, name } if category == "sched" && name == "sched_switch")
    }

    /// The canonical spelling, as stored in the trace file.
    pub fn spelling(&self) -> String {
        match self {
            EventSpec::CpuClock(_) => "cpu-clock".to_string(),
            EventSpec::Uprobe { path, symbol } => format!("uprobe:{}:{symbol}", path.display()),
            EventSpec::Uretprobe { path, symbol } => {
                format!("uretprobe:{}:{symbol}", path.display())
            }
            EventSpec::Usdt {
                path,
                provider,
                name,
            } => format!("usdt:{}:{provider}:{name}", path.display()),
            EventSpec::Tracepoint { category, name } => format!("tracepoint:{category}:{name}"),
        }
    }
}

fn valid_ident(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// Splits `PATH:SYMBOL` at the first single `:` after the path (a `::` belongs to a Rust path).
fn split_path_symbol(s: &str) -> Option<(&str, &str)> {
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b':' {
            let double = i + 1 < b.len() && b[i + 1] == b':';
            if !double {
                return Some((&s[..i], &s[i + 1..]));
            }
            i += 2;
            continue;
        }
        i += 1;
    }
    None
}

/// How stacks are captured: frame pointers walked by the kernel (cheap; needs
/// `-Cforce-frame-pointers=yes`), or a copy of the user stack unwound with DWARF CFI (`.eh_frame`) by
/// framehop while recording (only the resulting addresses are kept). The trace's own type.
pub use ferrotrace_core::schema::CallGraph;

/// Parses `fp` or `dwarf` (perf's `dwarf,SIZE` is accepted; the size is ignored here, see
/// [`crate::ProfileConfig::stack_size`]).
pub fn parse_call_graph(s: &str) -> Result<CallGraph, ProfileError> {
    match s.split(',').next().unwrap_or("") {
        "fp" | "frame-pointer" => Ok(CallGraph::FramePointers),
        "dwarf" => Ok(CallGraph::Dwarf),
        _ => Err(ProfileError::BadArgument(format!(
            "bad --call-graph `{s}`: expected fp or dwarf"
        ))),
    }
}

/// Parses a `--duration` ([`units`] grammar, a bare number is seconds: `10s`, `500ms`, `2m`, `1h`,
/// `3`): positive, at most 10⁹ seconds.
pub fn parse_duration(s: &str) -> Result<Duration, ProfileError> {
    match units::parse_duration(s, Some(units::TimeUnit::Seconds)) {
        Ok(ns) if ns > 0 && ns <= 1_000_000_000 * 1_000_000_000 => Ok(Duration::from_nanos(ns)),
        Ok(_) => Err(ProfileError::BadArgument(format!(
            "bad duration `{s}`: more than zero and at most 10^9 s (10s, 500ms, 2m, 1h)"
        ))),
        Err(e) => Err(ProfileError::BadArgument(format!(
            "bad duration `{s}`: {e}"
        ))),
    }
}

/// Parses a sampling frequency ([`units`] grammar: `999`, `999Hz`, `4kHz`) from 1 Hz to 100 kHz.
pub fn parse_frequency(s: &str) -> Result<u32, ProfileError> {
    match units::parse_frequency(s) {
        Ok(v) if (1..=100_000).contains(&v) => Ok(v),
        Ok(_) => Err(ProfileError::BadArgument(format!(
            "bad frequency `{s}`: at most 100 kHz"
        ))),
        Err(e) => Err(ProfileError::BadArgument(format!(
            "bad frequency `{s}`: {e}, up to 100kHz"
        ))),
    }
}

/// Parses `--mmap-pages`/`-m` as perf does: a number of data pages per CPU ring (a power of two), or
/// a size in the [`units`] grammar with its multiple (`8M`, `64K`, `4096B`), rounded up to a power of
/// two of pages.
pub fn parse_buffer_size(s: &str) -> Result<usize, ProfileError> {
    let bad = || {
        ProfileError::BadArgument(format!(
            "bad --mmap-pages `{s}`: expected a power of two of pages (512) or a size (2M), up to 4G"
        ))
    };
    let t = s.trim();
    let pages = if t.bytes().all(|b| b.is_ascii_digit()) {
        let p: usize = t.parse().map_err(|_| bad())?;
        if !p.is_power_of_two() {
            return Err(bad());
        }
        p
    } else {
        let bytes = units::parse_size(t).map_err(|_| bad())?;
        usize::try_from(bytes.div_ceil(4096))
            .map_err(|_| bad())?
            .next_power_of_two()
    };
    if pages == 0 || pages > 1 << 20 {
        return Err(bad());
    }
    Ok(pages)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_spellings() {
        assert_eq!(
            EventSpec::parse("cpu-clock").unwrap(),
            EventSpec::CpuClock(None)
        );
        assert_eq!(
            EventSpec::parse("profile:hz:99").unwrap(),
            EventSpec::CpuClock(Some(99))
        );
        assert_eq!(
            EventSpec::parse("uprobe:/lib/libc.so.6:malloc").unwrap(),
            EventSpec::Uprobe {
                path: "/lib/libc.so.6".into(),
                symbol: "malloc".into()
            }
        );
        assert_eq!(
            EventSpec::parse("uprobe:/tmp/app:myapp::parse").unwrap(),
            EventSpec::Uprobe {
                path: "/tmp/app".into(),
                symbol: "myapp::parse".into()
            }
        );
        assert_eq!(
            EventSpec::parse("uretprobe:/tmp/app:myapp::parse").unwrap(),
            EventSpec::Uretprobe {
                path: "/tmp/app".into(),
                symbol: "myapp::parse".into()
            }
        );
        assert_eq!(
            EventSpec::parse("usdt:/lib/x86_64-linux-gnu/libc.so.6:libc:memory_sbrk_more").unwrap(),
            EventSpec::Usdt {
                path: "/lib/x86_64-linux-gnu/libc.so.6".into(),
                provider: "libc".into(),
                name: "memory_sbrk_more".into()
            }
        );
        for spelling in [
            "uretprobe:/tmp/app:myapp::parse",
            "usdt:/lib/libc.so.6:libc:setjmp",
        ] {
            assert_eq!(
                EventSpec::parse(spelling).unwrap().spelling(),
                spelling,
                "{spelling}"
            );
        }
        assert_eq!(
            EventSpec::parse("tracepoint:sched:sched_switch").unwrap(),
            EventSpec::Tracepoint {
                category: "sched".into(),
                name: "sched_switch".into()
            }
        );
        assert_eq!(
            EventSpec::parse("sched:sched_switch").unwrap(),
            EventSpec::parse("t:sched:sched_switch").unwrap()
        );
        for bad in [
            "",
            "cycles",
            "kprobe:do_sys_open",
            "uprobe:/x",
            "uretprobe:/x",
            "usdt:/x:libc",
            "usdt::libc:setjmp",
            "usdt:/x:lib c:setjmp",
            "profile:hz:0",
            "profile:99",
            "a:b:c:d",
            "x y:z",
        ] {
            let e = EventSpec::parse(bad).unwrap_err().to_string();
            assert!(e.contains("bad event"), "{bad}: {e}");
        }
    }

    #[test]
    fn buffer_sizes() {
        assert_eq!(parse_buffer_size("1").unwrap(), 1);
        assert_eq!(parse_buffer_size("512").unwrap(), 512);
        assert_eq!(parse_buffer_size("2M").unwrap(), 512);
        assert_eq!(parse_buffer_size("64k").unwrap(), 16);
        assert_eq!(parse_buffer_size("5K").unwrap(), 2);
        for b in ["", "0", "3", "x", "0M", "8G", "-1"] {
            assert!(parse_buffer_size(b).is_err(), "{b}");
        }
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("10s").unwrap(), Duration::from_secs(10));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(parse_duration("3").unwrap(), Duration::from_secs(3));
        for b in ["", "-1s", "xs", "nan", "0"] {
            assert!(parse_duration(b).is_err(), "{b}");
        }
    }
}
