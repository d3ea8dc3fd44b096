//! The admission orders by name: `fifo`, `sjf`, `sjf-aging:X`. Their rules are in the
//! module docs of `admission`; the picks themselves in `gate::order` and `gate::aging`.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use super::{AdmissionError, MAX_AGING_FACTOR};

/// Order of admission from the queue. See the module docs for the precise rules.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub enum AdmissionPolicy {
    Fifo,
    Sjf,
    /// No request waits longer than `factor` × its cost if capacity allows.
    SjfAging {
        factor: f64,
    },
}

impl AdmissionPolicy {
    /// The spellings `FromStr` takes and `Display` writes, `X` standing for the aging factor
    /// (a number in `0..=MAX_AGING_FACTOR`): what `shortfirst vocabulary` lists.
    pub const FORMS: [&'static str; 3] = ["fifo", "sjf", "sjf-aging:X"];
}

impl FromStr for AdmissionPolicy {
    type Err = AdmissionError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || AdmissionError::BadPolicy { input: s.to_string() };
        match s.trim() {
            "fifo" => Ok(AdmissionPolicy::Fifo),
            "sjf" => Ok(AdmissionPolicy::Sjf),
            other => {
                let x = other.strip_prefix("sjf-aging:").ok_or_else(bad)?;
                let factor: f64 = x.trim().parse().map_err(|_| bad())?;
                if !(0.0..=MAX_AGING_FACTOR).contains(&factor) {
                    return Err(bad());
                }
                Ok(AdmissionPolicy::SjfAging { factor })
            }
        }
    }
}

impl fmt::Display for AdmissionPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AdmissionPolicy::Fifo => write!(f, "fifo"),
            AdmissionPolicy::Sjf => write!(f, "sjf"),
            AdmissionPolicy::SjfAging { factor } => write!(f, "sjf-aging:{factor}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::AdmissionPolicy;

    #[test]
    fn every_form_parses_and_writes_back() {
        for form in AdmissionPolicy::FORMS {
            let text = form.replace('X', "2.5");
            let policy: AdmissionPolicy = text.parse().unwrap_or_else(|e| panic!("{text}: {e}"));
            assert_eq!(policy.to_string(), text);
        }
        assert!("sjf-aging".parse::<AdmissionPolicy>().is_err());
        assert!("lifo".parse::<AdmissionPolicy>().unwrap_err().to_string().contains("fifo, sjf or sjf-aging:X"));
    }
}
