//! Quantities as people type them on a command line or in a config file: durations
//! (`150s`, `2.5ms`, `1m30s`), sizes (`20K`, `1.5MB`, `64KiB`) and link rates
//! (`10mbit`, `1.5Gbit`). One parser per quantity, shared by every subcommand, so
//! `--duration 150s` means the same to `load` as `--max-queue-wait 150s` to the gatekeeper.
//!
//! Rules, the same everywhere:
//! - A number is digits with at most one dot: no sign, no exponent, no `inf`/`nan`
//!   (`1e9` is a typo more often than a size).
//! - Units are case-insensitive and may follow the number after spaces.
//! - A duration without a unit is in the caller's *bare unit* — seconds for every
//!   command-line duration (so the plain-number forms that existed keep working),
//!   milliseconds for the gatekeeper's costs, which the paper writes in ms. Parts
//!   add up: `1m30s` = 90 s, `1h2m` = 62 min.
//! - Sizes are decimal with K/M/G (1000) and binary with Ki/Mi/Gi (1024), `B` optional.
//! - Rates are bits per second, decimal (as `tc`): `bit`, `kbit`, `mbit`, `gbit`,
//!   `tbit`, with an optional `/s`. Byte units (`mbps`, `MB/s`) are refused: `tc` reads
//!   `mbps` as megabytes per second, a factor of eight nobody expects.

use std::time::Duration;

/// What a value failed to parse as, and why, naming the input.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UnitError {
    #[error(
        "duration {input:?}: expected a number with a unit ns, us, ms, s, m(in) or h, e.g. 150s, 2.5ms, 1m30s{bare}"
    )]
    Duration { input: String, bare: &'static str },
    #[error("duration {input:?}: longer than {max_s} s", max_s = MAX_DURATION_S)]
    DurationTooLong { input: String },
    #[error("size {input:?}: expected a byte count such as 1500, 20K, 5KB, 1.5M or 64KiB")]
    Size { input: String },
    #[error("rate {input:?}: expected a number with an optional unit bit, kbit, mbit, gbit or tbit (e.g. 10mbit, 1.5gbit, 2500000)")]
    Rate { input: String },
    #[error("rate {input:?}: byte-per-second units are ambiguous (tc reads mbps as megabytes per second); write it in bits, e.g. 10mbit")]
    RateInBytes { input: String },
}

/// The unit of a duration written without one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BareUnit {
    Seconds,
    Milliseconds,
    Microseconds,
}

impl BareUnit {
    fn seconds(self) -> f64 {
        match self {
            BareUnit::Seconds => 1.0,
            BareUnit::Milliseconds => 1e-3,
            BareUnit::Microseconds => 1e-6,
        }
    }

    fn hint(self) -> &'static str {
        match self {
            BareUnit::Seconds => " (a plain number is seconds)",
            BareUnit::Milliseconds => " (a plain number is milliseconds)",
            BareUnit::Microseconds => " (a plain number is microseconds)",
        }
    }
}

/// Longest duration accepted: 100 days. Anything longer is a typo (a missing unit read
/// as seconds, an extra zero), and it keeps every value far inside `Duration` and `f64`.
pub const MAX_DURATION_S: f64 = 100.0 * 86_400.0;

/// Most `<number><unit>` parts in one duration (`1h2m3s4ms5us6ns` has 6).
const MAX_DURATION_PARTS: usize = 6;

/// `true` for digits with at most one dot and at least one digit.
fn is_plain_number(text: &str) -> bool {
    !text.is_empty()
        && text.chars().all(|c| c.is_ascii_digit() || c == '.')
        && text.matches('.').count() <= 1
        && text.chars().any(|c| c.is_ascii_digit())
}

/// A duration in seconds; a plain number is in `bare` units.
pub fn parse_duration_s(input: &str, bare: BareUnit) -> Result<f64, UnitError> {
    let syntax = || UnitError::Duration { input: input.to_string(), bare: bare.hint() };
    let text = input.trim().to_ascii_lowercase();
    if is_plain_number(&text) {
        let v: f64 = text.parse().map_err(|_| syntax())?;
        return check_duration(v * bare.seconds(), input);
    }
    let mut rest = text.as_str();
    let mut total_s = 0.0;
    let mut parts = 0;
    while !rest.is_empty() {
        parts += 1;
        if parts > MAX_DURATION_PARTS {
            return Err(syntax());
        }
        let number_len = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(rest.len());
        let (number, after) = rest.split_at(number_len);
        if !is_plain_number(number) {
            return Err(syntax());
        }
        let after = after.trim_start();
        let unit_len = after.find(|c: char| !c.is_ascii_alphabetic() && c != 'µ').unwrap_or(after.len());
        let (unit, after) = after.split_at(unit_len);
        let scale = match unit {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" | "sec" | "secs" => 1.0,
            "m" | "min" | "mins" => 60.0,
            "h" | "hr" | "hrs" => 3600.0,
            _ => return Err(syntax()),
        };
        let v: f64 = number.parse().map_err(|_| syntax())?;
        total_s += v * scale;
        rest = after.trim_start();
    }
    if parts == 0 {
        return Err(syntax());
    }
    check_duration(total_s, input)
}

fn check_duration(seconds: f64, input: &str) -> Result<f64, UnitError> {
    if !seconds.is_finite() || seconds > MAX_DURATION_S {
        return Err(UnitError::DurationTooLong { input: input.to_string() });
    }
    Ok(seconds)
}

/// A duration; a plain number is seconds. Rounded to the nanosecond.
pub fn parse_duration(input: &str) -> Result<Duration, UnitError> {
    parse_duration_s(input, BareUnit::Seconds).map(Duration::from_secs_f64)
}

/// A byte count: `1500`, `20K`, `5KB`, `1.5M`, `64KiB` (K = 1000, Ki = 1024; `B` optional;
/// the result must be a whole number of bytes).
pub fn parse_size_bytes(input: &str) -> Result<u64, UnitError> {
    let error = || UnitError::Size { input: input.to_string() };
    let lower = input.trim().to_ascii_lowercase();
    let lower = lower.strip_suffix('b').unwrap_or(&lower);
    let (number, multiplier) =
        [("ki", 1u64 << 10), ("mi", 1 << 20), ("gi", 1 << 30), ("k", 1_000), ("m", 1_000_000), ("g", 1_000_000_000)]
            .iter()
            .find_map(|(suffix, m)| lower.strip_suffix(suffix).map(|n| (n, *m)))
            .unwrap_or((lower, 1));
    let number = number.trim();
    if !is_plain_number(number) {
        return Err(error());
    }
    let value: f64 = number.parse().map_err(|_| error())?;
    let bytes = value * multiplier as f64;
    if !bytes.is_finite() || bytes > u64::MAX as f64 || bytes.fract() != 0.0 {
        return Err(error());
    }
    Ok(bytes as u64)
}

/// A link rate in bits per second, without range checks (a shaper adds its own).
pub fn parse_rate_bits_per_s(input: &str) -> Result<u64, UnitError> {
    let error = || UnitError::Rate { input: input.to_string() };
    let lower = input.trim().to_ascii_lowercase();
    let lower = lower.strip_suffix("/s").unwrap_or(&lower);
    if lower.ends_with("bps") || lower.ends_with("byte") || lower.ends_with("bytes") {
        return Err(UnitError::RateInBytes { input: input.to_string() });
    }
    let (number, multiplier) = [("tbit", 1e12), ("gbit", 1e9), ("mbit", 1e6), ("kbit", 1e3), ("bit", 1.0)]
        .iter()
        .find_map(|(unit, m)| lower.strip_suffix(unit).map(|n| (n, *m)))
        .unwrap_or((lower, 1.0));
    let number = number.trim();
    if !is_plain_number(number) {
        return Err(error());
    }
    let value: f64 = number.parse().map_err(|_| error())?;
    let bits = (value * multiplier).round();
    if !bits.is_finite() || bits > u64::MAX as f64 {
        return Err(error());
    }
    Ok(bits as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        use BareUnit::*;
        let ok: &[(&str, BareUnit, f64)] = &[
            ("150", Seconds, 150.0),
            ("150s", Seconds, 150.0),
            ("150 s", Seconds, 150.0),
            (" 2.5ms ", Seconds, 0.0025),
            ("500us", Seconds, 0.0005),
            ("500µs", Seconds, 0.0005),
            ("750ns", Seconds, 750e-9),
            ("2m", Seconds, 120.0),
            ("2min", Seconds, 120.0),
            ("1m30s", Seconds, 90.0),
            ("1h2m", Seconds, 3720.0),
            ("1H", Seconds, 3600.0),
            ("0", Seconds, 0.0),
            (".5", Seconds, 0.5),
            ("0.1s", Seconds, 0.1),
            ("800", Milliseconds, 0.8),
            ("800ms", Milliseconds, 0.8),
            ("2s", Milliseconds, 2.0),
            ("250", Microseconds, 250e-6),
        ];
        for &(text, bare, want) in ok {
            let got = parse_duration_s(text, bare).unwrap_or_else(|e| panic!("{text:?}: {e}"));
            assert!((got - want).abs() < 1e-12, "{text:?} → {got}, want {want}");
        }
        let bad =
            ["", " ", "s", "-1s", "1e3", "inf", "nan", "1.2.3s", "10 parsecs", "5d", "1s2", "s5", "1mbit", "1,5s"];
        for text in bad {
            let e = parse_duration_s(text, Seconds).unwrap_err();
            assert!(matches!(e, UnitError::Duration { .. }), "{text:?}: {e:?}");
            assert!(e.to_string().contains(&format!("{text:?}")), "error names the input: {e}");
        }
        assert!(matches!(parse_duration_s("101d", Seconds), Err(UnitError::Duration { .. })));
        assert!(matches!(parse_duration_s("10000000000", Seconds), Err(UnitError::DurationTooLong { .. })));
        assert!(matches!(parse_duration_s("2401h", Seconds), Err(UnitError::DurationTooLong { .. })));
        assert_eq!(parse_duration("1m30s").unwrap(), Duration::from_secs(90));
        assert_eq!(parse_duration("150ms").unwrap(), Duration::from_millis(150));
        assert!(parse_duration_s("x", Milliseconds).unwrap_err().to_string().contains("milliseconds"));
    }

    #[test]
    fn sizes() {
        let ok: &[(&str, u64)] = &[
            ("1500", 1500),
            ("2K", 2_000),
            ("2k", 2_000),
            ("5KB", 5_000),
            ("1.5M", 1_500_000),
            ("64KiB", 65_536),
            ("1Mi", 1 << 20),
            ("2G", 2_000_000_000),
            ("0", 0),
            (" 20K ", 20_000),
        ];
        for &(text, want) in ok {
            assert_eq!(parse_size_bytes(text), Ok(want), "{text:?}");
        }
        for text in ["", "K", "-1", "1e3", "1.5", "0.5K5", "2KK", "abc", "1.2.3K", "1Ti"] {
            assert_eq!(parse_size_bytes(text), Err(UnitError::Size { input: text.into() }), "{text:?}");
        }
    }

    #[test]
    fn rates() {
        let ok: &[(&str, u64)] = &[
            ("10mbit", 10_000_000),
            ("10Mbit", 10_000_000),
            ("1.5gbit", 1_500_000_000),
            ("500kbit", 500_000),
            ("800bit", 800),
            ("2.5mbit/s", 2_500_000),
            ("1tbit", 1_000_000_000_000),
            ("2500000", 2_500_000),
            ("0", 0),
        ];
        for &(text, want) in ok {
            assert_eq!(parse_rate_bits_per_s(text), Ok(want), "{text:?}");
        }
        for text in ["10mbps", "10MBps", "1kbps", "5 bytes", "5byte/s"] {
            assert_eq!(parse_rate_bits_per_s(text), Err(UnitError::RateInBytes { input: text.into() }), "{text:?}");
        }
        for text in ["", "fast", "-1mbit", "1e9", "inf", "10 mbits", "1.2.3mbit", "10mb", "10MB/s"] {
            assert_eq!(parse_rate_bits_per_s(text), Err(UnitError::Rate { input: text.into() }), "{text:?}");
        }
    }
}
