//! Link rates as people and `tc` write them: `10mbit`, `100Mbit`, `1gbit`,
//! `500kbit`, or plain bits per second.
//!
//! Units are decimal (k = 1000), as in `tc`. Byte-based units (`mbps`, `kbps`)
//! are refused on purpose: `tc` reads `mbps` as megaBYTES per second, a factor
//! of eight nobody expects, so we make the user spell out `mbit`.

/// The slowest uplink we shape. Below this the tiny per-band guaranteed rate
/// (a thousandth of the uplink) underflows what HTB can express sensibly.
pub const MIN_RATE_BITS_PER_S: u64 = 100_000;
/// The fastest: 100 Gbit/s. Anything above is a typo (a missing unit turned
/// into bits, or an extra zero), not a link this tool will meet.
pub const MAX_RATE_BITS_PER_S: u64 = 100_000_000_000;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RateError {
    #[error("rate {input:?}: expected a number with an optional unit bit, kbit, mbit, gbit or tbit (e.g. 10mbit, 100Mbit, 500kbit, 1gbit, 2500000)")]
    Syntax { input: String },
    #[error("rate {input:?}: byte-per-second units are ambiguous in tc (mbps means megabytes); write it in bits, e.g. 10mbit")]
    ByteUnit { input: String },
    #[error("rate {input:?} is {rate_bits_per_s} bit/s: must be between {min} and {max} bit/s", min = MIN_RATE_BITS_PER_S, max = MAX_RATE_BITS_PER_S)]
    OutOfRange { input: String, rate_bits_per_s: u64 },
}

/// Parses a rate into bits per second, checking it is in
/// [`MIN_RATE_BITS_PER_S`]..=[`MAX_RATE_BITS_PER_S`].
pub fn parse_rate_bits_per_s(input: &str) -> Result<u64, RateError> {
    let rate_bits_per_s = parse_unbounded(input)?;
    if !(MIN_RATE_BITS_PER_S..=MAX_RATE_BITS_PER_S).contains(&rate_bits_per_s) {
        return Err(RateError::OutOfRange { input: input.to_string(), rate_bits_per_s });
    }
    Ok(rate_bits_per_s)
}

/// Parses a rate without range checks: also reads the rates `tc` prints
/// (`10Mbit`, `9999Kbit`, `1.5Gbit`, `800bit`), and any rate a model (the
/// simulator) may use where no qdisc has to express it.
pub fn parse_unbounded(input: &str) -> Result<u64, RateError> {
    use shortfirst_core::units::{parse_rate_bits_per_s, UnitError};
    parse_rate_bits_per_s(input).map_err(|e| match e {
        UnitError::RateInBytes { input } => RateError::ByteUnit { input },
        _ => RateError::Syntax { input: input.to_string() },
    })
}

/// Formats bits per second the short way a human reads it: `10Mbit`, `1.5Gbit`, `500Kbit`.
pub fn format_rate(rate_bits_per_s: u64) -> String {
    for (unit, m) in [("Gbit", 1_000_000_000u64), ("Mbit", 1_000_000), ("Kbit", 1_000)] {
        if rate_bits_per_s >= m {
            let value = rate_bits_per_s as f64 / m as f64;
            let text = format!("{value:.3}");
            let text = text.trim_end_matches('0').trim_end_matches('.');
            return format!("{text}{unit}");
        }
    }
    format!("{rate_bits_per_s}bit")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_usual_spellings() {
        let table: &[(&str, u64)] = &[
            ("10mbit", 10_000_000),
            ("100Mbit", 100_000_000),
            ("1gbit", 1_000_000_000),
            ("1GBIT", 1_000_000_000),
            ("500kbit", 500_000),
            ("2500000", 2_500_000),
            ("2500000bit", 2_500_000),
            (" 10mbit ", 10_000_000),
            ("1.5mbit", 1_500_000),
            ("0.5gbit", 500_000_000),
            ("100gbit", 100_000_000_000),
            ("100000", 100_000),
        ];
        for &(input, want) in table {
            assert_eq!(parse_rate_bits_per_s(input), Ok(want), "{input}");
        }
    }

    #[test]
    fn errors_name_the_input() {
        let table: &[(&str, RateError)] = &[
            ("", RateError::Syntax { input: "".into() }),
            ("mbit", RateError::Syntax { input: "mbit".into() }),
            ("ten mbit", RateError::Syntax { input: "ten mbit".into() }),
            ("-10mbit", RateError::Syntax { input: "-10mbit".into() }),
            ("1e9", RateError::Syntax { input: "1e9".into() }),
            ("1.2.3mbit", RateError::Syntax { input: "1.2.3mbit".into() }),
            ("10mb", RateError::Syntax { input: "10mb".into() }),
            ("10mbps", RateError::ByteUnit { input: "10mbps".into() }),
            ("10Kbps", RateError::ByteUnit { input: "10Kbps".into() }),
            ("99999", RateError::OutOfRange { input: "99999".into(), rate_bits_per_s: 99_999 }),
            ("101gbit", RateError::OutOfRange { input: "101gbit".into(), rate_bits_per_s: 101_000_000_000 }),
        ];
        for (input, want) in table {
            let got = parse_rate_bits_per_s(input).unwrap_err();
            assert_eq!(&got, want, "{input}");
            assert!(got.to_string().contains(&format!("{input:?}")), "message names the input: {got}");
        }
    }

    #[test]
    fn reads_what_tc_prints() {
        let table: &[(&str, u64)] = &[
            ("10Mbit", 10_000_000),
            ("9999Kbit", 9_999_000),
            ("10Kbit", 10_000),
            ("800bit", 800),
            ("1Gbit", 1_000_000_000),
        ];
        for &(input, want) in table {
            assert_eq!(parse_unbounded(input), Ok(want), "{input}");
        }
    }

    #[test]
    fn formats_round_trip() {
        for rate in [100_000u64, 500_000, 1_500_000, 10_000_000, 100_000_000, 1_000_000_000, 2_500_000_000] {
            assert_eq!(parse_unbounded(&format_rate(rate)), Ok(rate), "{}", format_rate(rate));
        }
        assert_eq!(format_rate(10_000_000), "10Mbit");
        assert_eq!(format_rate(1_500_000_000), "1.5Gbit");
        assert_eq!(format_rate(999), "999bit");
    }
}
