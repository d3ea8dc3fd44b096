//! What `shortfirst vocabulary` lists of `serve`: the names of its choices (policies,
//! schedulers, what to do at the connection limit, …) and which policies each scheduler
//! runs. The names come from each enum's one definition; which policy runs under which
//! scheduler is decided by the validation every configuration goes through, so the listing
//! says what `serve` accepts, not a copy of it.

use std::collections::BTreeMap;

use serde::Serialize;
use strum::{IntoEnumIterator, VariantNames};

use super::{
    AccessLogFormat, AtMaxConnections, ConfigError, Dotfiles, Listings, Policy, Scheduling, ServerConfig, UnknownHost,
    MAX_LINK_RATE_BITS_PER_S,
};

/// `serve`'s vocabulary, serialised as one JSON object.
#[derive(Debug, Serialize)]
pub struct Vocabulary {
    /// `--policy` names (besides the spellings `srpt-classes[:CUTOFFS]` of `srpt` by classes).
    pub policy: &'static [&'static str],
    /// `--scheduler` names.
    pub scheduler: &'static [&'static str],
    /// The policies each scheduler runs (the others are refused at start).
    pub policies_by_scheduler: BTreeMap<String, Vec<String>>,
    pub at_max_connections: &'static [&'static str],
    pub access_log_format: &'static [&'static str],
    pub dotfiles: &'static [&'static str],
    pub listings: &'static [&'static str],
    pub unknown_host: &'static [&'static str],
    /// Highest `--link-rate` a user-space scheduler paces to.
    pub max_link_rate_bits_per_s: u64,
    /// The cutoffs `srpt` uses without `--cutoffs` (bytes; their count plus one is the data
    /// bands the uplink's tree needs).
    pub default_cutoffs_bytes: Vec<u64>,
    /// The data bands `--cutoffs auto` learns.
    pub auto_data_bands: usize,
}

/// `serve`'s vocabulary as this build has it.
pub fn vocabulary() -> Vocabulary {
    let policies_by_scheduler = Scheduling::iter()
        .map(|scheduler| {
            let runs = Policy::iter().filter(|&policy| runs_under(policy, scheduler)).map(|p| p.to_string());
            (scheduler.to_string(), runs.collect())
        })
        .collect();
    Vocabulary {
        policy: Policy::VARIANTS,
        scheduler: Scheduling::VARIANTS,
        policies_by_scheduler,
        at_max_connections: AtMaxConnections::VARIANTS,
        access_log_format: AccessLogFormat::VARIANTS,
        dotfiles: Dotfiles::VARIANTS,
        listings: Listings::VARIANTS,
        unknown_host: UnknownHost::VARIANTS,
        max_link_rate_bits_per_s: MAX_LINK_RATE_BITS_PER_S,
        default_cutoffs_bytes: shortfirst_core::bands::DEFAULT_CUTOFFS_BYTES.to_vec(),
        auto_data_bands: crate::sched::AUTO_DATA_BANDS,
    }
}

/// Whether a configuration with `policy` under `scheduler` (and otherwise the defaults, with a
/// link rate where the scheduler paces) passes the scheduler's validation as to its policy.
fn runs_under(policy: Policy, scheduler: Scheduling) -> bool {
    let mut config = ServerConfig::new("/");
    config.policy = policy;
    config.scheduler = scheduler;
    if scheduler != Scheduling::Kernel {
        config.link_rate_bits_per_s = Some(10_000_000);
    }
    !matches!(config.validate_scheduler(), Err(ConfigError::Invalid { key: "policy", .. }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_scheduler_runs_the_policies_serve_accepts() {
        let v = vocabulary();
        let runs = |s: &str| v.policies_by_scheduler[s].join(",");
        assert_eq!(runs("kernel"), "fair,srpt,srpt2,srrt");
        assert_eq!(runs("user"), "fair,srpt,las");
        assert_eq!(runs("crovella"), "fair,srpt,las");
        assert_eq!(v.scheduler, ["kernel", "user", "crovella"]);
    }

    /// The two derives that spell a name (serde's for parsing, strum's for listing and
    /// printing) must agree, name for name.
    #[test]
    fn every_listed_name_parses_and_prints_back() {
        fn check<T: std::str::FromStr<Err = String> + std::fmt::Display + VariantNames>() {
            for name in T::VARIANTS {
                let value: T = name.parse().unwrap_or_else(|e| panic!("{name}: {e}"));
                assert_eq!(value.to_string(), *name);
            }
        }
        check::<Policy>();
        check::<Scheduling>();
        check::<AtMaxConnections>();
        check::<AccessLogFormat>();
        check::<Dotfiles>();
        check::<Listings>();
        check::<UnknownHost>();
    }
}
