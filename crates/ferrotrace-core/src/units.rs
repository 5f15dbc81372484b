//! Sizes, durations and frequencies as users write them: one grammar for every option and environment
//! variable that takes one (`record --duration`, `profile --duration`, `replay -t`, `--time-range`,
//! `dump --from/--to/--max-size`, `--buffer-size`, `--chunk-size`, `profile -m`, `-F`/`--sample-freq`,
//! `FERROTRACE_BUFFER_SIZE`, ...). [`GRAMMAR`] is the text the command-line help shows.
//!
//! - A **size** is a whole number of bytes with an optional binary multiple `K`, `M` or `G` (1024,
//!   1024², 1024³; either case), optionally followed by `B` or `iB`: `4096`, `512K`, `16M`, `16MiB`.
//! - A **duration** is a number (`10`, `1.5`, not negative) with a unit `ns`, `us` (or `µs`), `ms`,
//!   `s`, `m` (minutes) or `h`: `300ns`, `1.5ms`, `2m`, `1h`. A number without a unit is in the unit the
//!   option names (seconds for `--duration`, nanoseconds for `replay -t`); an option that names none
//!   refuses it.
//! - A **frequency** is a whole number of hertz, optionally followed by `Hz`, or a number of kilohertz
//!   followed by `kHz`: `999`, `999Hz`, `4kHz`.
//!
//! What each option accepts beyond the grammar (at least 16K, a power of two, not zero) is the
//! option's own check; the grammar is shared so that `record --duration 1h` and `profile --duration 1h`
//! mean the same.

use core::fmt;

/// The grammar in one paragraph, for help texts.
pub const GRAMMAR: &str = "Units: a SIZE is a whole number of bytes with an optional K, M or G \
(powers of 1024), optionally followed by B or iB (4096, 512K, 16M, 1GiB); a DURATION is a number with \
a unit ns, us, ms, s, m or h (300ns, 1.5ms, 10s, 2m, 1h), a number alone being in the unit its option \
names; a frequency (HZ) is a whole number of hertz, optionally with Hz, or of kilohertz with kHz \
(999, 999Hz, 4kHz).";

/// Why a size, duration or frequency was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UnitError {
    /// Not in the grammar (or negative, or not finite).
    Malformed(Quantity),
    /// A duration without a unit, for an option that names none.
    NoUnit,
    /// Too large to count in its unit (bytes, nanoseconds, hertz).
    Overflow(Quantity),
}

/// What was being parsed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Quantity {
    /// A size in bytes.
    Size,
    /// A duration.
    Duration,
    /// A frequency.
    Frequency,
}

impl fmt::Display for UnitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            UnitError::Malformed(Quantity::Size) => f.write_str(
                "expected a whole number of bytes with an optional K, M or G (4096, 512K, 16M, 1GiB)",
            ),
            UnitError::Malformed(Quantity::Duration) => {
                f.write_str("expected a number with a unit ns, us, ms, s, m or h (1.5ms, 10s, 2m, 1h)")
            }
            UnitError::Malformed(Quantity::Frequency) => {
                f.write_str("expected a whole number of hertz (999, 999Hz) or kilohertz (4kHz)")
            }
            UnitError::NoUnit => {
                f.write_str("give a unit: ns, us, ms, s, m or h (300ns, 1.5ms, 10s, 2m, 1h)")
            }
            UnitError::Overflow(Quantity::Size) => f.write_str("too many bytes"),
            UnitError::Overflow(Quantity::Duration) => f.write_str("too long"),
            UnitError::Overflow(Quantity::Frequency) => f.write_str("too high a frequency"),
        }
    }
}

/// A duration's unit, in nanoseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimeUnit {
    /// Nanoseconds.
    Nanos = 1,
    /// Microseconds.
    Micros = 1_000,
    /// Milliseconds.
    Millis = 1_000_000,
    /// Seconds.
    Seconds = 1_000_000_000,
}

/// The duration units and their lengths in nanoseconds.
const TIME_UNITS: [(&str, u64); 8] = [
    ("ns", 1),
    ("us", 1_000),
    ("µs", 1_000),
    ("ms", 1_000_000),
    ("s", 1_000_000_000),
    ("m", 60_000_000_000),
    ("min", 60_000_000_000),
    ("h", 3_600_000_000_000),
];

/// Parses a size (see the [module](self) grammar) into bytes; zero is refused.
pub fn parse_size(s: &str) -> Result<u64, UnitError> {
    let bad = UnitError::Malformed(Quantity::Size);
    let t = s.trim();
    let t = t
        .strip_suffix("iB")
        .or_else(|| t.strip_suffix('B'))
        .unwrap_or(t);
    let (num, mult) = match t.char_indices().last() {
        Some((i, 'k' | 'K')) => (&t[..i], 1u64 << 10),
        Some((i, 'm' | 'M')) => (&t[..i], 1 << 20),
        Some((i, 'g' | 'G')) => (&t[..i], 1 << 30),
        _ => (t, 1),
    };
    let num = num.trim();
    if num.is_empty() || !num.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad);
    }
    let n: u64 = num
        .parse()
        .map_err(|_| UnitError::Overflow(Quantity::Size))?;
    match n.checked_mul(mult) {
        Some(0) => Err(bad),
        Some(n) => Ok(n),
        None => Err(UnitError::Overflow(Quantity::Size)),
    }
}

/// Parses a duration (see the [module](self) grammar) into nanoseconds. A number without a unit is
/// in `bare`, or refused when `bare` is `None`. Zero is a duration; an option that refuses it says so.
pub fn parse_duration(s: &str, bare: Option<TimeUnit>) -> Result<u64, UnitError> {
    let t = s.trim();
    let (num, mult) = match TIME_UNITS
        .iter()
        .filter_map(|&(unit, mult)| t.strip_suffix(unit).map(|n| (n, mult)))
        // `5ms` also ends in `s`: the longest unit that ends the text is the one written.
        .min_by_key(|(n, _)| n.len())
    {
        Some(found) => found,
        None => match bare {
            Some(unit) => (t, unit as u64),
            None if number(t).is_some() => return Err(UnitError::NoUnit),
            None => return Err(UnitError::Malformed(Quantity::Duration)),
        },
    };
    let v = number(num.trim()).ok_or(UnitError::Malformed(Quantity::Duration))?;
    let ns = v * mult as f64;
    // `as u64` would saturate: a time beyond 584 years is a typing error too.
    if ns >= u64::MAX as f64 {
        return Err(UnitError::Overflow(Quantity::Duration));
    }
    Ok(ns as u64)
}

/// Parses a frequency (see the [module](self) grammar) into hertz; zero is refused.
pub fn parse_frequency(s: &str) -> Result<u32, UnitError> {
    let bad = UnitError::Malformed(Quantity::Frequency);
    let t = s.trim();
    let hz = if let Some(k) = t.strip_suffix("kHz") {
        let hz = number(k.trim()).ok_or(bad)? * 1000.0;
        // Whole hertz only (`1.0005kHz` is not); `as u64` truncates (no `f64::fract` without std).
        if hz < u64::MAX as f64 && hz as u64 as f64 != hz {
            return Err(bad);
        }
        hz
    } else {
        let n = t.strip_suffix("Hz").unwrap_or(t).trim();
        if n.is_empty() || !n.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad);
        }
        number(n).ok_or(bad)?
    };
    if hz == 0.0 {
        return Err(bad);
    }
    if hz > u32::MAX as f64 {
        return Err(UnitError::Overflow(Quantity::Frequency));
    }
    Ok(hz as u32)
}

/// A non-negative, finite decimal number (`10`, `1.5`, `.5`), without sign or exponent.
fn number(s: &str) -> Option<f64> {
    let digits = s.bytes().filter(u8::is_ascii_digit).count();
    let dots = s.bytes().filter(|&b| b == b'.').count();
    if digits == 0 || dots > 1 || digits + dots != s.len() {
        return None;
    }
    s.parse().ok().filter(|v: &f64| v.is_finite())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("512k"), Ok(512 << 10));
        assert_eq!(parse_size("16M"), Ok(16 << 20));
        assert_eq!(parse_size("16MiB"), Ok(16 << 20));
        assert_eq!(parse_size("16MB"), Ok(16 << 20));
        assert_eq!(parse_size("1G"), Ok(1 << 30));
        assert_eq!(parse_size(" 8 K "), Ok(8 << 10));
        assert_eq!(parse_size("4096B"), Ok(4096));
        let bad = Err(UnitError::Malformed(Quantity::Size));
        for s in [
            "", "0", "0K", "K", "1.5M", "-5M", "+5M", "12Q", "5T", "garbage", "1e3", "B",
        ] {
            assert_eq!(parse_size(s), bad, "{s}");
        }
        assert_eq!(
            parse_size("99999999999999999999"),
            Err(UnitError::Overflow(Quantity::Size))
        );
        assert_eq!(
            parse_size("99999999999G"),
            Err(UnitError::Overflow(Quantity::Size))
        );
    }

    #[test]
    fn durations() {
        let ns = |s| parse_duration(s, None);
        assert_eq!(ns("300ns"), Ok(300));
        assert_eq!(ns("10us"), Ok(10_000));
        assert_eq!(ns("10µs"), Ok(10_000));
        assert_eq!(ns("1.5ms"), Ok(1_500_000));
        assert_eq!(ns("2s"), Ok(2_000_000_000));
        assert_eq!(ns(".5s"), Ok(500_000_000));
        assert_eq!(ns("2m"), Ok(120_000_000_000));
        assert_eq!(ns("2min"), Ok(120_000_000_000));
        assert_eq!(ns("1h"), Ok(3_600_000_000_000));
        assert_eq!(ns("0s"), Ok(0));
        assert_eq!(ns("5"), Err(UnitError::NoUnit));
        assert_eq!(
            parse_duration("5", Some(TimeUnit::Seconds)),
            Ok(5_000_000_000)
        );
        assert_eq!(parse_duration("5", Some(TimeUnit::Nanos)), Ok(5));
        assert_eq!(parse_duration("1.5", Some(TimeUnit::Millis)), Ok(1_500_000));
        let bad = Err(UnitError::Malformed(Quantity::Duration));
        for s in [
            "",
            "s",
            "-1s",
            "+1s",
            "xs",
            "NaNs",
            "nan",
            "infs",
            "1e3s",
            "1.2.3s",
            "10 parsecs",
        ] {
            assert_eq!(ns(s), bad, "{s}");
        }
        assert_eq!(
            ns("999999999999h"),
            Err(UnitError::Overflow(Quantity::Duration))
        );
    }

    #[test]
    fn frequencies() {
        assert_eq!(parse_frequency("999"), Ok(999));
        assert_eq!(parse_frequency("999Hz"), Ok(999));
        assert_eq!(parse_frequency("4kHz"), Ok(4000));
        assert_eq!(parse_frequency("1.5kHz"), Ok(1500));
        let bad = Err(UnitError::Malformed(Quantity::Frequency));
        for s in ["", "0", "0Hz", "-1", "1.5", "1.0005kHz", "Hz", "fast"] {
            assert_eq!(parse_frequency(s), bad, "{s}");
        }
        assert_eq!(
            parse_frequency("5000000000"),
            Err(UnitError::Overflow(Quantity::Frequency))
        );
    }
}
