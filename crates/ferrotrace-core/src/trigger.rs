//! `record -T REGEX@ACTIONS`: uftrace's triggers, the actions that change what is recorded while a
//! matching function runs. One parser for the command line (which refuses a bad trigger in one line
//! before anything runs) and the runtime (which reads them back from `FERROTRACE_TRIGGER`).
//!
//! The actions kept are those whose meaning is local to the matching call and what it calls, which the
//! collector applies exactly as uftrace does: `depth=N` (record N levels from this function down, in
//! place of `-D`), `time=TIME` (`-t` for this function and what it calls), `trace` (this function
//! whatever `-t` says), `filter` and `notrace` (as `-F` and `-N`). uftrace's `trace_on`, `trace_off`
//! and `finish` switch recording for the whole process at an instant, which a collector that reads
//! each thread's events in its own order cannot place among other threads' events: they are refused
//! with what to use instead, as are `read=`, `size=`, `recover`, `backtrace` and `color`.
//!
//! ```
//! use ferrotrace_core::trigger::{Actions, Trigger};
//!
//! let t: Trigger = "^parse@depth=2,time=10us".parse().unwrap();
//! assert_eq!(t.pattern, "^parse");
//! assert_eq!(t.actions, Actions { depth: Some(2), time_ns: Some(10_000), ..Actions::default() });
//! assert!("main@trace_off".parse::<Trigger>().is_err());
//! ```

use std::fmt;
use std::str::FromStr;

use crate::units::{self, TimeUnit};

/// Triggers a recording can have (the runtime numbers a function's trigger in six bits of its
/// filter flags).
pub const MAX_TRIGGERS: usize = 63;

/// What a trigger does while its function runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Actions {
    /// `depth=N`: this function and N − 1 levels below it are recorded (N ≥ 1).
    pub depth: Option<usize>,
    /// `time=TIME`: calls shorter than this many nanoseconds, this one and those below it, are left
    /// out.
    pub time_ns: Option<u64>,
    /// `trace`: this function is recorded whatever the time filter says.
    pub trace: bool,
    /// `filter`: as `-F`.
    pub filter: bool,
    /// `notrace`: as `-N`.
    pub notrace: bool,
}

/// One `-T` option: a function pattern (as `-F` takes) and its actions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Trigger {
    /// The pattern, as written (a regex over demangled names, or `NAME@0xADDR`).
    pub pattern: String,
    /// What it does.
    pub actions: Actions,
}

/// Why a `-T` option was refused: the text says what to write instead.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TriggerError(String);

impl fmt::Display for TriggerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for TriggerError {}

impl FromStr for Trigger {
    type Err = TriggerError;

    /// `REGEX@ACTION[,ACTION...]`, split at the last `@` (a pattern may be `NAME@0xADDR` itself).
    fn from_str(s: &str) -> Result<Trigger, TriggerError> {
        let bad = |why: String| Err(TriggerError(format!("trigger {s:?}: {why}")));
        let Some((pattern, list)) = s.rsplit_once('@') else {
            return bad("expected REGEX@ACTIONS, as in 'parse@depth=2' or 'main@time=10us'".into());
        };
        if pattern.is_empty() {
            return bad("no function pattern before '@'".into());
        }
        let mut actions = Actions::default();
        for action in list.split(',') {
            let (name, value) = action.split_once('=').unwrap_or((action, ""));
            match (name, value) {
                ("depth", v) => match v.parse::<usize>() {
                    Ok(n) if (1..=crate::size::MAX_DEPTH).contains(&n) => actions.depth = Some(n),
                    _ => {
                        return bad(format!(
                            "depth={v}: expected a depth from 1 to {}",
                            crate::size::MAX_DEPTH
                        ))
                    }
                },
                ("time", v) => match units::parse_duration(v, Some(TimeUnit::Nanos)) {
                    Ok(ns) => actions.time_ns = Some(ns),
                    Err(e) => return bad(format!("time={v}: {e}")),
                },
                ("trace", "") => actions.trace = true,
                ("filter", "") => actions.filter = true,
                ("notrace", "") => actions.notrace = true,
                ("trace_on" | "traceon" | "trace_off" | "traceoff" | "finish", "") => {
                    return bad(format!(
                        "'{name}' (uftrace's switch of the whole process's recording) is not \
                         supported: select calls with -F, -N, -D or depth=, or stop with record -p \
                         PID --duration"
                    ))
                }
                ("", _) => return bad("an empty action".into()),
                _ => {
                    return bad(format!(
                        "'{action}' is not an action ferrotrace records by: depth=N, time=TIME, \
                         trace, filter or notrace"
                    ))
                }
            }
        }
        Ok(Trigger {
            pattern: pattern.to_string(),
            actions,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_with_an_address_and_every_action() {
        let t: Trigger = "^helper@0x1140$@trace,filter,notrace,depth=1,time=2ms"
            .parse()
            .unwrap();
        assert_eq!(t.pattern, "^helper@0x1140$");
        assert_eq!(
            t.actions,
            Actions {
                depth: Some(1),
                time_ns: Some(2_000_000),
                trace: true,
                filter: true,
                notrace: true,
            }
        );
    }

    #[test]
    fn bad_triggers_say_what_to_write() {
        for (text, says) in [
            ("main", "expected REGEX@ACTIONS"),
            ("@depth=1", "no function pattern"),
            ("f@depth=0", "a depth from 1"),
            ("f@time=fast", "time=fast"),
            ("f@trace_off", "not supported"),
            ("f@read=proc/statm", "not an action"),
            ("f@depth=1,", "an empty action"),
        ] {
            let e = text.parse::<Trigger>().unwrap_err().to_string();
            assert!(e.contains(says), "{text}: {e}");
        }
    }
}
