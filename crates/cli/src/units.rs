//! Command-line value parsers for quantities, all on `shortfirst_core::units`, so every
//! subcommand spells durations, sizes and rates the same way (`150s`, `20K`, `10mbit`).

use shortfirst_core::units::{self, BareUnit};

/// A duration in seconds: `150s`, `2.5ms`, `1m30s`, or a plain number of seconds.
pub fn duration_s(text: &str) -> Result<f64, String> {
    units::parse_duration_s(text, BareUnit::Seconds).map_err(|e| e.to_string())
}

/// A positive duration in seconds (a timeout or a run length of 0 means nothing).
pub fn positive_duration_s(text: &str) -> Result<f64, String> {
    match duration_s(text)? {
        s if s > 0.0 => Ok(s),
        _ => Err(format!("duration {text:?}: must be above 0")),
    }
}

/// A byte count: `1500`, `20K`, `1.5M`, `64KiB` (K = 1000, Ki = 1024).
pub fn size_bytes(text: &str) -> Result<u64, String> {
    units::parse_size_bytes(text).map_err(|e| e.to_string())
}

/// A byte count as a float, for the size models that compute in f64.
pub fn size_bytes_f64(text: &str) -> Result<f64, String> {
    size_bytes(text).map(|b| b as f64)
}

/// A positive link rate in bits per second: `10mbit`, `1.5gbit`, or a plain number.
pub fn rate_bits_per_s(text: &str) -> Result<f64, String> {
    match units::parse_rate_bits_per_s(text).map_err(|e| e.to_string())? {
        0 => Err(format!("rate {text:?}: must be above 0 bit/s")),
        r => Ok(r as f64),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table() {
        assert_eq!(duration_s("150s"), Ok(150.0));
        assert_eq!(duration_s("150"), Ok(150.0));
        assert_eq!(duration_s("0"), Ok(0.0));
        assert_eq!(positive_duration_s("2.5"), Ok(2.5));
        assert!(positive_duration_s("0s").unwrap_err().contains("above 0"));
        assert!(duration_s("ten").unwrap_err().contains("\"ten\""));
        assert_eq!(size_bytes("64KiB"), Ok(65_536));
        assert_eq!(size_bytes_f64("10M"), Ok(10e6));
        assert!(size_bytes("ten").unwrap_err().contains("\"ten\""));
        assert_eq!(rate_bits_per_s("10mbit"), Ok(10e6));
        assert!(rate_bits_per_s("0mbit").unwrap_err().contains("above 0"));
        assert!(rate_bits_per_s("10mbps").unwrap_err().contains("bits"));
    }
}
