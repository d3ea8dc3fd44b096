//! Each setting's default as `--help` shows it, read from the one place it is written
//! ([`ProxyConfig::new`], or a constant beside [`ProxySettings`] for the two the binary
//! applies itself), spelt as the flag takes it: `--policy sjf` configures what no `--policy`
//! does. A setting that is off unless given shows `none`.

use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

use shortfirst_core::admission::PatienceRule;

use super::{DEFAULT_ACCESS_LOG, DEFAULT_CPU_SLICE_US, DEFAULT_THREADS};
use crate::config::{format_us, CapacitySetting, ProxyConfig, Upstream};

impl ProxyConfig {
    /// `(key, default)` for every setting that has one (`policy` → `sjf`); the keys are the
    /// flags' names without `--`. `listen`, `upstream`, `admin`, `config`, `tls-cert` and
    /// `tls-key` have none.
    pub fn defaults_shown() -> Vec<(&'static str, String)> {
        let listen = SocketAddr::from((Ipv4Addr::LOCALHOST, 0));
        let d = ProxyConfig::new(listen, Upstream::parse("http://127.0.0.1:1").expect("a valid literal"));
        let none_or = |v: Option<String>| v.unwrap_or_else(|| "none".into());
        let rules: Vec<String> = d.rules.iter().map(ToString::to_string).collect();
        vec![
            (
                "capacity",
                match &d.capacity {
                    CapacitySetting::Fixed { capacity_us } => format_us(*capacity_us),
                    CapacitySetting::Auto(_) => "auto".into(),
                },
            ),
            ("policy", d.policy.to_string()),
            ("classify", rules.join(" ")),
            ("max-types", d.max_types.to_string()),
            ("max-queue-len", d.max_queue_len.to_string()),
            ("max-queue-wait", none_or(d.max_queue_wait.map(format_duration))),
            ("max-wait", none_or(d.max_wait.map(format_duration))),
            ("overdue-share", d.overdue_share.to_string()),
            ("max-in-flight", none_or(d.max_in_flight.map(|n| n.to_string()))),
            ("upstream-timeout", format_duration(d.upstream_timeout)),
            ("upstream-body-timeout", format_duration(d.upstream_body_timeout)),
            ("header-timeout", format_duration(d.header_timeout)),
            ("estimate-basis", d.estimator.basis.to_string()),
            ("threads", DEFAULT_THREADS.to_string()),
            ("cpu-slice-us", none_or(DEFAULT_CPU_SLICE_US.map(|us| us.to_string()))),
            ("max-charge-share", d.max_charge_share.to_string()),
            ("busy-poll-us", d.busy_poll.map_or(0, |p| p.as_micros()).to_string()),
            ("charge-at", if d.recharge_at_admission { "admission" } else { "arrival" }.into()),
            (
                "patience",
                match d.patience {
                    PatienceRule::Off => "off".into(),
                    PatienceRule::Learn => "learn".into(),
                    PatienceRule::Fixed { patience_us } => format_duration(Duration::from_micros(patience_us)),
                },
            ),
            ("rewrite-host", d.rewrite_host.to_string()),
            ("shutdown-timeout", format_duration(d.shutdown_timeout)),
            ("retry-after", d.retry_after_s.to_string()),
            ("max-connections", d.max_connections.to_string()),
            ("access-log", DEFAULT_ACCESS_LOG.to_string()),
            ("pg-tag-key", none_or(d.pg_types.comment_key.clone())),
            ("pg-application-name-tag", d.pg_types.application_name.to_string()),
            ("idle-in-transaction-timeout", d.idle_in_transaction_timeout.map_or("off".into(), format_duration)),
            ("max-message-bytes", d.max_message_bytes.to_string()),
        ]
    }
}

/// A duration as a user writes it: whole minutes from two on (`10m`), else as
/// [`format_us`] does (`60s`, `250ms`).
fn format_duration(d: Duration) -> String {
    let us = d.as_micros() as u64;
    match d.as_secs() {
        s if s >= 120 && s % 60 == 0 && d.subsec_nanos() == 0 => format!("{}m", s / 60),
        _ => format_us(us),
    }
}

#[cfg(test)]
mod tests {
    use clap::{CommandFactory, Parser};

    use super::*;
    use crate::ProxySettings;

    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        settings: ProxySettings,
    }

    const REQUIRED: [&str; 5] = ["gatekeeper", "--listen", "127.0.0.1:0", "--upstream", "http://127.0.0.1:1"];

    /// The configuration these flags (after the required ones) give, as text to compare.
    fn configured(extra: &[&str]) -> String {
        let cli = Cli::try_parse_from(REQUIRED.iter().chain(extra)).unwrap_or_else(|e| panic!("{extra:?}: {e}"));
        format!("{:?}", ProxyConfig::from_flags(cli.settings).unwrap_or_else(|e| panic!("{extra:?}: {e}")))
    }

    /// What a default says is what the setting does unset: given as the flag it changes nothing.
    #[test]
    fn every_default_shown_given_as_its_flag_configures_the_default() {
        let unset = configured(&[]);
        for (key, value) in ProxyConfig::defaults_shown() {
            if value == "none" && key != "pg-tag-key" {
                continue; // off unless given: the flag has no value for "off"
            }
            let flag = format!("--{key}");
            assert_eq!(configured(&[&flag, &value]), unset, "{flag} {value} is not the default");
        }
    }

    /// A new setting cannot be added without its default shown (or a reason it has none).
    #[test]
    fn every_flag_but_the_required_and_the_paths_shows_a_default() {
        let shown: Vec<&str> = ProxyConfig::defaults_shown().into_iter().map(|(k, _)| k).collect();
        let without = ["listen", "upstream", "admin", "config", "tls-cert", "tls-key"];
        for arg in Cli::command().get_arguments() {
            let Some(long) = arg.get_long() else { continue };
            assert!(shown.contains(&long) != without.contains(&long), "--{long}: a default shown, or in `without`");
        }
        for key in shown {
            assert!(ProxySettings::KEYS.contains(&key.replace('-', "_").as_str()), "{key} is no setting");
        }
    }

    #[test]
    fn parsing_no_flags_sets_nothing() {
        let cli = Cli::try_parse_from(["gatekeeper"]).unwrap();
        assert_eq!(cli.settings.keys_set(), Vec::<String>::new(), "an unset flag must leave the file's key");
    }

    #[test]
    fn durations_read_as_written() {
        let s = Duration::from_secs;
        for (d, want) in [(s(600), "10m"), (s(60), "60s"), (s(30), "30s"), (s(150), "150s"), (s(0), "0us")] {
            assert_eq!(format_duration(d), want);
        }
    }
}
