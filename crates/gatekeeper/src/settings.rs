//! The gatekeeper's partial configuration: one struct that is both the proxy's command-line
//! flags (clap) and its TOML file's keys (serde), every setting optional, and
//! [`ProxyConfig::from_flags`], which reads the `--config` file the flags name, lets the
//! flags win over it and validates the result. The merge and the checks are here, in the
//! library, so a library caller gets the same configuration as the command line.
//!
//! Keys are kebab-case, the flags' names without `--` (`max-queue-len = 100`); the older
//! snake_case spellings (`max_queue_len`, `retry_after_s`, `cold_cost`) are still read.
//! `types`, `[estimator]` and `[auto]` have no flags. A setting's default is written once,
//! in [`ProxyConfig::new`] (or a constant here); [`ProxyConfig::defaults_shown`] reads it
//! from there for `--help`, so the doc comments below state none.
//! `crates/gatekeeper/gatekeeper.example.toml` lists every key.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use shortfirst_core::admission::auto::AutoConfig;
use shortfirst_core::admission::EstimatorConfig;

use crate::classify::Rule;
use crate::config::{parse_cost_us, parse_duration, CapacitySetting, ProxyConfig, Upstream};
use crate::GatekeeperError;

mod defaults;

/// Worker threads of the proxy's runtime without `--threads` (the binary builds the runtime).
pub const DEFAULT_THREADS: usize = 1;
/// Whether the access log is on without `--access-log` (the binary sets up logging).
pub const DEFAULT_ACCESS_LOG: bool = false;
/// The threads' scheduler slice without `--cpu-slice-us`: the kernel's (the binary sets it).
pub const DEFAULT_CPU_SLICE_US: Option<u64> = None;

/// Defines the partial struct and, from the same field list, [`ProxySettings::overlay`]
/// and [`ProxySettings::keys_set`].
macro_rules! partial {
    (
        $(#[$meta:meta])*
        pub struct $name:ident { $( $(#[$field_meta:meta])* pub $field:ident : Option<$ty:ty>, )* }
    ) => {
        $(#[$meta])*
        pub struct $name { $( $(#[$field_meta])* pub $field: Option<$ty>, )* }

        impl $name {
            /// Every setting's name (its file key with `_` for `-`).
            pub const KEYS: &'static [&'static str] = &[$(stringify!($field)),*];

            /// `self` with every setting `over` gives replaced by `over`'s (flags over file).
            pub fn overlay(mut self, over: $name) -> $name {
                $( if over.$field.is_some() { self.$field = over.$field; } )*
                self
            }

            /// The keys this partial configuration sets, as spelt in a file (`max-queue-len`).
            pub fn keys_set(&self) -> Vec<String> {
                let mut keys = Vec::new();
                $( if self.$field.is_some() { keys.push(stringify!($field).replace('_', "-")); } )*
                keys
            }
        }
    };
}

partial! {
/// The proxy's flags and its file's keys. An unknown key is an error naming it and the file.
#[derive(Clone, Debug, Default, Deserialize, clap::Args)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct ProxySettings {
    /// Address to accept clients on, e.g. 0.0.0.0:8080 (required).
    #[arg(long, value_name = "ADDR:PORT")]
    pub listen: Option<SocketAddr>,
    /// The application server, e.g. http://127.0.0.1:9000 (an optional path is a prefix;
    /// required).
    #[arg(long, value_name = "URL")]
    pub upstream: Option<String>,
    /// Admission capacity in cost units (time of upstream service: 800us, 25ms, 2s; bare
    /// number = ms), or `auto` to adapt online.
    #[arg(long, value_name = "UNITS|auto")]
    pub capacity: Option<String>,
    /// Admission queue order.
    #[arg(long, value_name = "fifo|sjf|sjf-aging:X")]
    pub policy: Option<String>,
    /// Classification rule, repeatable, first match wins: `route`, `header:NAME`, or
    /// `NAME=REGEX` (matched against "METHOD /path?query").
    #[arg(long, value_name = "RULE")]
    pub classify: Option<Vec<String>>,
    /// Serve Prometheus metrics at http://ADDR:PORT/metrics and a liveness check at
    /// http://ADDR:PORT/healthz (200 "ok" while the gatekeeper runs).
    #[arg(long, value_name = "ADDR:PORT")]
    pub admin: Option<SocketAddr>,
    /// TOML configuration file; flags override its keys, which are the flags' names
    /// without `--` (crates/gatekeeper/gatekeeper.example.toml lists them all). SIGHUP
    /// re-reads it and applies classify, capacity and policy without dropping connections.
    #[arg(long, value_name = "FILE.toml")]
    #[serde(skip)]
    pub config: Option<PathBuf>,
    /// Most request types tracked, including the shared overflow type.
    #[arg(long)]
    #[serde(alias = "max_types")]
    pub max_types: Option<usize>,
    /// Type names that get their own slot from the start (file only).
    #[arg(skip)]
    pub types: Option<Vec<String>>,
    /// Longest admission queue; arrivals beyond get 503 + Retry-After.
    #[arg(long)]
    #[serde(alias = "max_queue_len")]
    pub max_queue_len: Option<usize>,
    /// Longest wait for admission before 503 + Retry-After (e.g. 10s, 2m, 1m30s).
    #[arg(long, value_name = "DURATION")]
    #[serde(alias = "max_queue_wait")]
    pub max_queue_wait: Option<String>,
    /// Under sjf, a request that has waited this long is admitted before every other,
    /// oldest first (a starvation bound on the wait to start, e.g. 5s).
    #[arg(long, value_name = "DURATION")]
    #[serde(alias = "max_wait")]
    pub max_wait: Option<String>,
    /// Under sjf with --max-wait and under sjf-aging, requests past their bound go first
    /// only while the requests admitted so have had at most this share of the backend's
    /// recent busy time; beyond it they wait in cost order, so cheap requests keep the rest in an
    /// overload (e.g. 0.6); 1: always first.
    #[arg(long, value_name = "FRACTION")]
    #[serde(alias = "overdue_share")]
    pub overdue_share: Option<f64>,
    /// Also cap the number of admitted requests (beyond the paper: for backends that
    /// collapse on concurrency, e.g. their connection or process limit).
    #[arg(long, value_name = "N")]
    #[serde(alias = "max_in_flight")]
    pub max_in_flight: Option<usize>,
    /// Time allowed for the upstream's response head before 504 (also the connect
    /// timeout).
    #[arg(long, value_name = "DURATION")]
    #[serde(alias = "upstream_timeout")]
    pub upstream_timeout: Option<String>,
    /// Longest silence of the upstream within a response body (e.g. 30s): past it the
    /// response is cut (its status has gone out), the connection closed and the charge
    /// released.
    #[arg(long, value_name = "DURATION")]
    #[serde(alias = "upstream_body_timeout")]
    pub upstream_body_timeout: Option<String>,
    /// Time a client has to send a whole request head, and the longest idle time of a
    /// kept-alive client connection (e.g. 10s): past it the connection is closed
    /// (slowloris).
    #[arg(long, value_name = "DURATION")]
    #[serde(alias = "header_timeout")]
    pub header_timeout: Option<String>,
    /// What a request's cost sample is: `wall` (its upstream service time, the paper),
    /// `share` (service time divided, moment by moment, by the requests in flight: its
    /// share of a processor-sharing backend) or `serial` (the time since the later of its
    /// start and the previous completion: its own time on a backend that serves one request
    /// at a time in arrival order, e.g. one event loop, at any --max-in-flight) or `cpu`
    /// (a postgres:// upstream on this host only: the processor time its backend process
    /// spent on the transaction; the capacity is then processor time too).
    /// In a file, wins over `[estimator] basis`.
    #[arg(long, value_name = "wall|share|serial|cpu")]
    #[serde(alias = "estimate_basis")]
    pub estimate_basis: Option<String>,
    /// Worker threads of the proxy's runtime. One thread serves tens of thousands of
    /// requests per second and saves the cross-thread wake-ups that dominate a request's
    /// latency at low load; more add throughput on many cores.
    #[arg(long, value_name = "N")]
    pub threads: Option<usize>,
    /// The threads' time slice in the kernel's fair scheduler, in µs (100..=100000; Linux
    /// 6.12 or later): shorter than the kernel's (0.7-3 ms), the gatekeeper, woken by a
    /// message, runs before a database backend on the same CPU ends its slice, with no
    /// more of the CPU than before. Set at start, not on reload.
    #[arg(long, value_name = "N")]
    #[serde(alias = "cpu_slice_us")]
    pub cpu_slice_us: Option<u64>,
    /// Charge no request more than this fraction of the capacity, so a costly request at
    /// the head of the queue never waits for a full drain (beyond the paper).
    #[arg(long, value_name = "FRACTION")]
    #[serde(alias = "max_charge_share")]
    pub max_charge_share: Option<f64>,
    /// While a request waits for the upstream's response head, keep polling for I/O instead
    /// of blocking, for at most N µs after it was sent (1..=10000; 0 = off): the thread stays
    /// on a running CPU, for hosts whose idle CPUs wake late; costs up to N µs of CPU per
    /// request.
    #[arg(long, value_name = "N")]
    #[serde(alias = "busy_poll_us")]
    pub busy_poll_us: Option<u64>,
    /// When a request that waited is charged: `admission` (its type's estimate then, so a
    /// charge is never stale by its wait) or `arrival` (the estimate it arrived with, kept
    /// while it waits and runs).
    #[arg(long, value_name = "admission|arrival")]
    #[serde(alias = "charge_at")]
    pub charge_at: Option<String>,
    /// Refuse a request (503 + Retry-After) that would finish after its client gives up,
    /// instead of admitting work no one receives: `learn` how long clients wait from the
    /// ones that leave while queued or while the upstream works (a low quantile of their
    /// waits; nothing is refused before several have left), a DURATION (the clients'
    /// known timeout, e.g. 20s), or `off` (the paper's gatekeeper). --max-queue-wait stays
    /// an upper bound.
    #[arg(long, value_name = "learn|off|DURATION")]
    pub patience: Option<String>,
    /// Send the upstream's address as `Host` instead of the client's (`Forwarded` and
    /// `X-Forwarded-Host` carry the client's either way).
    #[arg(long, num_args = 0..=1, default_missing_value = "true", value_name = "BOOL")]
    #[serde(alias = "rewrite_host")]
    pub rewrite_host: Option<bool>,
    /// On SIGTERM or SIGINT: stop accepting, answer queued requests 503 + Retry-After,
    /// give admitted ones this long to finish, exit.
    #[arg(long, value_name = "DURATION")]
    #[serde(alias = "shutdown_timeout")]
    pub shutdown_timeout: Option<String>,
    /// `Retry-After` seconds on 503.
    #[arg(long, value_name = "SECONDS")]
    #[serde(alias = "retry_after_s")]
    pub retry_after: Option<u32>,
    /// Client connections served at once; beyond, a new connection gets 503 +
    /// Retry-After and is closed.
    #[arg(long, value_name = "N")]
    #[serde(alias = "max_connections")]
    pub max_connections: Option<usize>,
    /// Log one line per request on stderr (as RUST_LOG=access=info). Errors (a 502 and
    /// why) are logged in any case; RUST_LOG overrides both (e.g. RUST_LOG=debug).
    #[arg(long, num_args = 0..=1, default_missing_value = "true", value_name = "BOOL")]
    #[serde(alias = "access_log")]
    pub access_log: Option<bool>,
    /// PostgreSQL: the sqlcommenter key whose value types a transaction
    /// (`/*route='checkout'*/`), or `none` to ignore comments.
    #[arg(long, value_name = "KEY|none")]
    pub pg_tag_key: Option<String>,
    /// PostgreSQL: type a transaction by the connection's `application_name` when it has
    /// one and its statement carries no tag (false: by the statement's fingerprint).
    #[arg(long, num_args = 0..=1, default_missing_value = "true", value_name = "BOOL")]
    pub pg_application_name_tag: Option<bool>,
    /// PostgreSQL: disconnect a client idle inside a transaction this long (FATAL 25P03;
    /// the server rolls back, the charge is released), or `off`.
    #[arg(long, value_name = "DURATION|off")]
    pub idle_in_transaction_timeout: Option<String>,
    /// PostgreSQL: the longest client message; a longer one ends its connection with
    /// FATAL 08P01.
    #[arg(long, value_name = "N")]
    pub max_message_bytes: Option<usize>,
    /// PostgreSQL: the PEM certificate chain to offer clients that ask for TLS (with
    /// --tls-key); without both, an SSLRequest is answered N (no TLS).
    #[arg(long, value_name = "FILE.pem")]
    pub tls_cert: Option<PathBuf>,
    /// PostgreSQL: the PEM private key of --tls-cert.
    #[arg(long, value_name = "FILE.pem")]
    pub tls_key: Option<PathBuf>,
    /// The cost estimator (file only).
    #[arg(skip)]
    pub estimator: Option<FileEstimator>,
    /// Auto capacity (file only; with capacity = "auto").
    #[arg(skip)]
    pub auto: Option<FileAuto>,
}
}

/// `[estimator]`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct FileEstimator {
    pub alpha: Option<f64>,
    #[serde(alias = "cold_cost")]
    pub cold_cost: Option<String>,
    #[serde(alias = "max_sample")]
    pub max_sample: Option<String>,
    pub basis: Option<String>,
    /// Re-sample a type sjf has not admitted for this long (a duration, or "off").
    #[serde(alias = "resample_after")]
    pub resample_after: Option<String>,
}

/// `[auto]`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct FileAuto {
    pub initial: Option<String>,
    pub min: Option<String>,
    pub max: Option<String>,
    pub interval: Option<String>,
    #[serde(alias = "min_samples")]
    pub min_samples: Option<u64>,
    #[serde(alias = "high_inflation")]
    pub high_inflation: Option<f64>,
    #[serde(alias = "low_inflation")]
    pub low_inflation: Option<f64>,
    #[serde(alias = "increase_frac")]
    pub increase_frac: Option<f64>,
    #[serde(alias = "decrease_factor")]
    pub decrease_factor: Option<f64>,
}

/// `key` names a setting in an error: the error is that setting's.
fn at<T>(key: &'static str, r: Result<T, GatekeeperError>) -> Result<T, GatekeeperError> {
    r.map_err(|e| match e {
        e @ GatekeeperError::Setting { .. } => e,
        e => GatekeeperError::Setting { key, error: Box::new(e) },
    })
}

fn invalid<T>(key: &'static str, reason: String) -> Result<T, GatekeeperError> {
    Err(GatekeeperError::Setting { key, error: Box::new(GatekeeperError::Config(format!("{key}: {reason}"))) })
}

impl ProxySettings {
    /// Reads a TOML file; errors name the file (and the key, as toml does).
    pub fn load(path: &Path) -> Result<ProxySettings, GatekeeperError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| GatekeeperError::io(format!("reading config {}", path.display()), e))?;
        ProxySettings::parse(&text, path)
    }

    /// Parses a file's text; `path` names the file in errors.
    pub fn parse(text: &str, path: &Path) -> Result<ProxySettings, GatekeeperError> {
        toml::from_str(text).map_err(|e| GatekeeperError::InFile {
            path: path.to_path_buf(),
            error: Box::new(GatekeeperError::Config(e.to_string())),
        })
    }

    /// The flags over the `--config` file they name (if any).
    pub fn with_file(self) -> Result<ProxySettings, GatekeeperError> {
        match &self.config {
            Some(path) => Ok(ProxySettings::load(path)?.overlay(self)),
            None => Ok(self),
        }
    }

    /// The estimator: `[estimator]`, then `estimate-basis` over its `basis`.
    pub fn estimator(&self) -> Result<EstimatorConfig, GatekeeperError> {
        let mut e = EstimatorConfig::default();
        if let Some(f) = &self.estimator {
            if let Some(a) = f.alpha {
                e.alpha = a;
            }
            if let Some(c) = &f.cold_cost {
                e.cold_cost_us = at("estimator", parse_cost_us(c, "estimator.cold-cost"))?;
            }
            if let Some(m) = &f.max_sample {
                e.max_sample_us = at("estimator", parse_cost_us(m, "estimator.max-sample"))?;
            }
            if let Some(b) = &f.basis {
                e.basis = b.parse().or_else(|err| invalid("estimator", format!("estimator.basis: {err}")))?;
            }
            if let Some(r) = &f.resample_after {
                e.resample_after_us = resample_after_us(r)?;
            }
        }
        if let Some(b) = &self.estimate_basis {
            e.basis = b.parse().or_else(|err| invalid("estimate-basis", format!("{b:?}: {err}")))?;
        }
        Ok(e)
    }

    /// `[auto]` applied to an auto capacity setting, validated.
    pub fn auto(&self, mut a: AutoConfig) -> Result<AutoConfig, GatekeeperError> {
        if let Some(f) = &self.auto {
            let cost = |v: &Option<String>, what: &str, into: &mut u64| -> Result<(), GatekeeperError> {
                if let Some(v) = v {
                    *into = at("auto", parse_cost_us(v, what))?;
                }
                Ok(())
            };
            cost(&f.initial, "auto.initial", &mut a.initial_capacity_us)?;
            cost(&f.min, "auto.min", &mut a.min_capacity_us)?;
            cost(&f.max, "auto.max", &mut a.max_capacity_us)?;
            if let Some(v) = &f.interval {
                a.interval_us = at("auto", parse_duration(v, "auto.interval"))?.as_micros() as u64;
            }
            a.min_samples = f.min_samples.unwrap_or(a.min_samples);
            a.high_inflation = f.high_inflation.unwrap_or(a.high_inflation);
            a.low_inflation = f.low_inflation.unwrap_or(a.low_inflation);
            a.increase_frac = f.increase_frac.unwrap_or(a.increase_frac);
            a.decrease_factor = f.decrease_factor.unwrap_or(a.decrease_factor);
        }
        at("auto", a.validate().map_err(GatekeeperError::from))?;
        Ok(a)
    }
}

/// `[estimator] resample-after`: a duration above 0, or "off".
fn resample_after_us(r: &str) -> Result<Option<u64>, GatekeeperError> {
    if r.trim() == "off" {
        return Ok(None);
    }
    let us = at("estimator", parse_duration(r, "estimator.resample-after"))?.as_micros() as u64;
    if us == 0 {
        return invalid("estimator", "estimator.resample-after: must be above 0 (\"off\" never re-samples)".into());
    }
    Ok(Some(us))
}

impl ProxyConfig {
    /// The configuration the flags describe: the `--config` file they name (if any), the
    /// flags over it, validated. An invalid setting that came from the file names the file.
    pub fn from_flags(flags: ProxySettings) -> Result<ProxyConfig, GatekeeperError> {
        let Some(path) = flags.config.clone() else { return ProxyConfig::from_settings(&flags) };
        let file = ProxySettings::load(&path)?;
        let from_file: Vec<String> = file.keys_set().into_iter().filter(|k| !flags.keys_set().contains(k)).collect();
        ProxyConfig::from_settings(&file.overlay(flags)).map_err(|e| match e {
            GatekeeperError::Setting { key, .. } if from_file.iter().any(|k| k.as_str() == key) => {
                GatekeeperError::InFile { path, error: Box::new(e) }
            }
            e => e,
        })
    }

    /// Validates merged settings; `listen` and `upstream` are required.
    pub fn from_settings(s: &ProxySettings) -> Result<ProxyConfig, GatekeeperError> {
        let Some(listen) = s.listen else {
            return invalid("listen", "required: --listen ADDR:PORT, or `listen` in the --config file".into());
        };
        let Some(upstream) = &s.upstream else {
            return invalid("upstream", "required: --upstream URL, or `upstream` in the --config file".into());
        };
        let mut cfg = ProxyConfig::new(listen, at("upstream", Upstream::parse(upstream))?);
        cfg.take_timeouts(s)?;
        cfg.take_admission(s)?;
        cfg.admin = s.admin;
        cfg.max_types = s.max_types.unwrap_or(cfg.max_types);
        cfg.declared_types = s.types.clone().unwrap_or_default();
        cfg.take_limits(s)?;
        cfg.rewrite_host = s.rewrite_host.unwrap_or(cfg.rewrite_host);
        cfg.take_estimation(s)?;
        cfg.take_postgres(s)?;
        Ok(cfg)
    }

    /// The PostgreSQL-only settings.
    fn take_postgres(&mut self, s: &ProxySettings) -> Result<(), GatekeeperError> {
        match s.pg_tag_key.as_deref().map(str::trim) {
            None => {}
            Some("") => return invalid("pg-tag-key", "empty: give a key, or none".into()),
            Some("none") => self.pg_types.comment_key = None,
            Some(k) => self.pg_types.comment_key = Some(k.to_string()),
        }
        self.pg_types.application_name = s.pg_application_name_tag.unwrap_or(self.pg_types.application_name);
        match s.idle_in_transaction_timeout.as_deref().map(str::trim) {
            None => {}
            Some("off") => self.idle_in_transaction_timeout = None,
            Some(t) => {
                let d = at("idle-in-transaction-timeout", parse_duration(t, "idle-in-transaction-timeout"))?;
                if d.is_zero() {
                    return invalid("idle-in-transaction-timeout", format!("{t:?}: must be above 0 (or off)"));
                }
                self.idle_in_transaction_timeout = Some(d);
            }
        }
        self.tls_cert_key = match (&s.tls_cert, &s.tls_key) {
            (Some(c), Some(k)) => Some((c.clone(), k.clone())),
            (None, None) => None,
            (Some(_), None) => return invalid("tls-key", "--tls-cert needs --tls-key".into()),
            (None, Some(_)) => return invalid("tls-cert", "--tls-key needs --tls-cert".into()),
        };
        match s.max_message_bytes {
            Some(n) if n < 1024 => return invalid("max-message-bytes", format!("{n}: must be at least 1024")),
            Some(n) => self.max_message_bytes = n,
            None => {}
        }
        Ok(())
    }

    /// Capacity, policy and classification rules.
    fn take_admission(&mut self, s: &ProxySettings) -> Result<(), GatekeeperError> {
        if let Some(c) = &s.capacity {
            self.capacity = at("capacity", CapacitySetting::parse(c))?;
        }
        if let CapacitySetting::Auto(auto) = &self.capacity {
            self.capacity = CapacitySetting::Auto(s.auto(auto.clone())?);
        }
        if let Some(p) = &s.policy {
            self.policy = at("policy", p.parse().map_err(GatekeeperError::from))?;
        }
        if let Some(rules) = &s.classify {
            self.rules = at("classify", rules.iter().map(|r| Rule::parse(r)).collect::<Result<_, _>>())?;
        }
        Ok(())
    }

    /// Limits on the queue, the requests in flight, the waits and the connections; when a
    /// request is charged; busy polling; a 503's Retry-After.
    fn take_limits(&mut self, s: &ProxySettings) -> Result<(), GatekeeperError> {
        let at_least_one = |key: &'static str, n: Option<usize>| match n {
            Some(0) => invalid(key, "must be at least 1".into()),
            n => Ok(n),
        };
        if let Some(n) = at_least_one("max-queue-len", s.max_queue_len)? {
            self.max_queue_len = n;
        }
        if let Some(n) = at_least_one("max-in-flight", s.max_in_flight)? {
            self.max_in_flight = Some(n);
        }
        if let Some(n) = at_least_one("max-connections", s.max_connections)? {
            self.max_connections = n;
        }
        match s.charge_at.as_deref() {
            None => {}
            Some("admission") => self.recharge_at_admission = true,
            Some("arrival") => self.recharge_at_admission = false,
            Some(other) => return invalid("charge-at", format!("{other:?}: expected admission or arrival")),
        }
        if let Some(p) = &s.patience {
            self.patience = at("patience", p.parse().map_err(GatekeeperError::Config))?;
        }
        if let Some(us) = s.busy_poll_us {
            self.busy_poll = (us > 0).then(|| Duration::from_micros(us));
        }
        if let Some(w) = &s.max_queue_wait {
            self.max_queue_wait = Some(at("max-queue-wait", parse_duration(w, "max-queue-wait"))?);
        }
        if let Some(w) = &s.max_wait {
            self.max_wait = Some(at("max-wait", parse_duration(w, "max-wait"))?);
        }
        self.retry_after_s = s.retry_after.unwrap_or(self.retry_after_s);
        Ok(())
    }

    /// The estimator, the largest share of the capacity one charge may take and the share
    /// of busy time overdue requests may have first.
    fn take_estimation(&mut self, s: &ProxySettings) -> Result<(), GatekeeperError> {
        self.estimator = s.estimator()?;
        for (key, value, into) in [
            ("max-charge-share", s.max_charge_share, &mut self.max_charge_share),
            ("overdue-share", s.overdue_share, &mut self.overdue_share),
        ] {
            match value {
                Some(v) if !(v > 0.0 && v <= 1.0) => return invalid(key, format!("must be in (0, 1], got {v}")),
                Some(v) => *into = v,
                None => {}
            }
        }
        Ok(())
    }

    /// The timeouts. Those that bound a wait must be above zero: a zero would fail every
    /// request (504, a cut body, a closed connection) rather than disable it.
    fn take_timeouts(&mut self, s: &ProxySettings) -> Result<(), GatekeeperError> {
        for (key, value, into, positive) in [
            ("upstream-timeout", &s.upstream_timeout, &mut self.upstream_timeout, true),
            ("upstream-body-timeout", &s.upstream_body_timeout, &mut self.upstream_body_timeout, true),
            ("header-timeout", &s.header_timeout, &mut self.header_timeout, true),
            ("shutdown-timeout", &s.shutdown_timeout, &mut self.shutdown_timeout, false),
        ] {
            let Some(text) = value else { continue };
            let d = at(key, parse_duration(text, key))?;
            if positive && d.is_zero() {
                return invalid(key, format!("{text:?}: must be above 0"));
            }
            *into = d;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
