//! Progress on a terminal for long commands: shown only when stderr is a terminal, quiet when piped.

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

/// A progress line on stderr (`label: 42% (1234567 of 2939393 events)`), redrawn at most 10 times a
/// second and erased when dropped. Does nothing when stderr is not a terminal.
pub struct Progress {
    label: &'static str,
    /// What is counted: `events`, or `bytes` ([`Progress::bytes`]).
    unit: &'static str,
    total: u64,
    done: u64,
    next_check: u64,
    last_draw: Instant,
    enabled: bool,
    drawn: bool,
}

/// Events between clock checks.
const STEP: u64 = 1 << 18;

impl Progress {
    /// A progress line for `total` events, enabled when stderr is a terminal.
    pub fn new(label: &'static str, total: u64) -> Progress {
        Progress::with_enabled(label, total, std::io::stderr().is_terminal())
    }

    /// A progress line that draws only if `enabled`.
    pub fn with_enabled(label: &'static str, total: u64, enabled: bool) -> Progress {
        Progress {
            label,
            unit: "events",
            total,
            done: 0,
            next_check: STEP,
            last_draw: Instant::now(),
            enabled,
            drawn: false,
        }
    }

    /// A progress line for `total` bytes, enabled when stderr is a terminal.
    pub fn bytes(label: &'static str, total: u64) -> Progress {
        Progress {
            unit: "bytes",
            ..Progress::new(label, total)
        }
    }

    /// Counts `n` more events (or bytes) done.
    #[inline]
    pub fn add(&mut self, n: u64) {
        self.done += n;
        if self.done >= self.next_check {
            self.next_check = self.done + STEP;
            self.draw();
        }
    }

    fn draw(&mut self) {
        if !self.enabled || self.last_draw.elapsed() < Duration::from_millis(100) {
            return;
        }
        self.last_draw = Instant::now();
        let pct = (self.done * 100)
            .checked_div(self.total)
            .unwrap_or(0)
            .min(100);
        let mut e = std::io::stderr().lock();
        let _ = write!(
            e,
            "\r{}: {pct:3}% ({} of {} {})\x1b[K",
            self.label, self.done, self.total, self.unit
        );
        let _ = e.flush();
        self.drawn = true;
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        if self.drawn {
            let _ = write!(std::io::stderr(), "\r\x1b[K");
        }
    }
}
