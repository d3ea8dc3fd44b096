//! Gatekeeper configuration: the TOML file, the value parsers shared with the CLI, and the
//! validated [`ProxyConfig`] the proxy runs with.
//!
//! Units: *costs* (capacity, cold cost) are time of upstream service, written with a unit
//! (`800us`, `25ms`, `2s`); a bare number is milliseconds, the paper's unit. *Durations*
//! (timeouts, waits) take the same suffixes; a bare number is seconds.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use hyper::http::uri::PathAndQuery;
use hyper::Uri;
use serde::Deserialize;
use shortfirst_core::admission::auto::AutoConfig;
use shortfirst_core::admission::{AdmissionPolicy, EstimatorConfig, PatienceRule};

use crate::classify::Rule;
use crate::GatekeeperError;

fn parse_with_unit(s: &str, bare_unit_us: f64, what: &str) -> Result<u64, GatekeeperError> {
    let t = s.trim();
    let (num, mult) = if let Some(n) = t.strip_suffix("us") {
        (n, 1.0)
    } else if let Some(n) = t.strip_suffix("ms") {
        (n, 1e3)
    } else if let Some(n) = t.strip_suffix('s') {
        (n, 1e6)
    } else {
        (t, bare_unit_us)
    };
    let v: f64 = num
        .trim()
        .parse()
        .map_err(|_| GatekeeperError::Config(format!("{what} {s:?}: expected a number with optional unit us/ms/s")))?;
    if !v.is_finite() || v < 0.0 || v * mult > 1e15 {
        return Err(GatekeeperError::Config(format!("{what} {s:?}: out of range")));
    }
    Ok((v * mult).round() as u64)
}

/// A cost in µs; bare numbers are milliseconds.
pub fn parse_cost_us(s: &str, what: &str) -> Result<u64, GatekeeperError> {
    parse_with_unit(s, 1e3, what)
}

/// A duration; bare numbers are seconds.
pub fn parse_duration(s: &str, what: &str) -> Result<Duration, GatekeeperError> {
    parse_with_unit(s, 1e6, what).map(Duration::from_micros)
}

/// `--capacity UNITS|auto`.
#[derive(Debug, Clone, PartialEq)]
pub enum CapacitySetting {
    Fixed { capacity_us: u64 },
    Auto(AutoConfig),
}

impl CapacitySetting {
    pub fn parse(s: &str) -> Result<Self, GatekeeperError> {
        if s.trim() == "auto" {
            return Ok(CapacitySetting::Auto(AutoConfig::default()));
        }
        let capacity_us = parse_cost_us(s, "capacity")?;
        if capacity_us == 0 {
            return Err(GatekeeperError::Config(format!("capacity {s:?}: must be positive")));
        }
        Ok(CapacitySetting::Fixed { capacity_us })
    }

    pub fn initial_us(&self) -> u64 {
        match self {
            CapacitySetting::Fixed { capacity_us } => *capacity_us,
            CapacitySetting::Auto(a) => a.initial_capacity_us,
        }
    }
}

/// A cost or duration in µs as a user writes it: `250us`, `25ms`, `2s`, `1.5ms`.
pub fn format_us(us: u64) -> String {
    if us >= 1_000_000 && us % 10_000 == 0 {
        format!("{}s", us as f64 / 1e6)
    } else if us >= 1_000 && us % 10 == 0 {
        format!("{}ms", us as f64 / 1e3)
    } else {
        format!("{us}us")
    }
}

impl std::fmt::Display for CapacitySetting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CapacitySetting::Fixed { capacity_us } => write!(f, "{} (fixed)", format_us(*capacity_us)),
            CapacitySetting::Auto(a) => write!(
                f,
                "auto (starts at {}, within {}..{})",
                format_us(a.initial_capacity_us),
                format_us(a.min_capacity_us),
                format_us(a.max_capacity_us)
            ),
        }
    }
}

/// The upstream: `http://host:port[/prefix]`.
#[derive(Debug, Clone)]
pub struct Upstream {
    pub authority: hyper::http::uri::Authority,
    /// Prepended to every forwarded path ("" for none; never ends with '/').
    pub prefix: String,
}

impl Upstream {
    pub fn parse(s: &str) -> Result<Self, GatekeeperError> {
        let bad = |why: &str| GatekeeperError::Config(format!("upstream {s:?}: {why}"));
        let uri: Uri = s.parse().map_err(|_| bad("not a URL"))?;
        match uri.scheme_str() {
            Some("http") => {}
            Some(_) => return Err(bad("only http:// upstreams are supported")),
            None => return Err(bad("expected http://HOST:PORT")),
        }
        let authority = uri.authority().cloned().ok_or_else(|| bad("missing host"))?;
        if uri.query().is_some() {
            return Err(bad("must not have a query string"));
        }
        let prefix = uri.path().trim_end_matches('/').to_string();
        Ok(Upstream { authority, prefix })
    }

    /// The request target to send upstream, in origin form (`/prefix/path?query`; the
    /// authority goes in `Host`). Without a prefix the client's path and query is reused as
    /// it is (a shared buffer, no new string to parse per request).
    pub fn target_for(&self, path_and_query: &PathAndQuery) -> Result<Uri, hyper::http::Error> {
        let pq = if self.prefix.is_empty() {
            path_and_query.clone()
        } else {
            PathAndQuery::try_from(format!("{}{}", self.prefix, path_and_query))?
        };
        Ok(Uri::from(pq))
    }
}

/// Everything the proxy needs, validated.
#[derive(Debug, Clone)]
pub struct ProxyConfig {
    pub listen: SocketAddr,
    pub upstream: Upstream,
    pub capacity: CapacitySetting,
    pub policy: AdmissionPolicy,
    pub rules: Vec<Rule>,
    /// Including the overflow type.
    pub max_types: usize,
    /// Type names that get their own slot from the start.
    pub declared_types: Vec<String>,
    pub admin: Option<SocketAddr>,
    pub max_queue_len: usize,
    pub max_queue_wait: Option<Duration>,
    /// `sjf`: a request waiting this long is admitted before every other (oldest first).
    pub max_wait: Option<Duration>,
    /// At most this many requests admitted at once, whatever their costs (beyond the paper:
    /// for backends that collapse on concurrency). `None`: cost capacity only.
    pub max_in_flight: Option<usize>,
    /// No request is charged more than this fraction of the capacity (1 = the paper: a
    /// costlier request runs alone). See `core::admission` "Bounded charges".
    pub max_charge_share: f64,
    /// Share of the recently admitted work that requests past their bound may take ahead
    /// of the others (1: no limit). See `core::admission` "Overdue share".
    pub overdue_share: f64,
    /// Time allowed from sending a request upstream to its response head: 504 after. Also
    /// the connect timeout, and the bound on draining a response whose client has left.
    pub upstream_timeout: Duration,
    /// Longest silence of the upstream while the proxy waits for the next bytes of a
    /// response body: past it the connection is closed, the response cut (the status has
    /// gone out already) and the charge released.
    pub upstream_body_timeout: Duration,
    /// Time a client has to send a whole request head, counted from when the proxy starts
    /// reading it (also how long a kept-alive client connection may sit idle): past it the
    /// connection is closed (slowloris).
    pub header_timeout: Duration,
    /// `Retry-After` seconds on 503.
    pub retry_after_s: u32,
    pub estimator: EstimatorConfig,
    /// Client connections served at once; further accepts wait (kernel backlog).
    pub max_connections: usize,
    /// Idle upstream connections kept for reuse (more are closed when they come back).
    pub upstream_pool_idle: usize,
    /// Keep polling the I/O driver this long after each I/O event of a request instead of
    /// blocking (`gatekeeper::busypoll`). `None` (default): block as usual.
    pub busy_poll: Option<Duration>,
    /// Charge a request that waited with its type's estimate at admission (default), or
    /// keep the estimate it arrived with (`false`, the paper's rule taken literally; for
    /// comparisons). See `core::admission` "Charges".
    pub recharge_at_admission: bool,
    /// When a request is refused because its client would be gone before it finishes
    /// (`core::admission::patience`).
    pub patience: PatienceRule,
    /// Send the upstream's address as `Host` instead of the client's (default: keep the
    /// client's, as reverse proxies do; `Forwarded` and `X-Forwarded-Host` carry it either way).
    pub rewrite_host: bool,
    /// At shutdown, how long admitted requests may take to finish before they are abandoned.
    pub shutdown_timeout: Duration,
}

impl ProxyConfig {
    pub fn new(listen: SocketAddr, upstream: Upstream) -> Self {
        ProxyConfig {
            listen,
            upstream,
            capacity: CapacitySetting::Auto(AutoConfig::default()),
            policy: AdmissionPolicy::Sjf,
            rules: vec![Rule::Route],
            max_types: 64,
            declared_types: Vec::new(),
            admin: None,
            max_queue_len: 100_000,
            max_queue_wait: None,
            max_wait: None,
            max_in_flight: None,
            max_charge_share: 1.0,
            overdue_share: 1.0,
            upstream_timeout: Duration::from_secs(60),
            upstream_body_timeout: Duration::from_secs(60),
            header_timeout: Duration::from_secs(30),
            retry_after_s: 1,
            estimator: EstimatorConfig::default(),
            max_connections: 10_000,
            upstream_pool_idle: 1_024,
            busy_poll: None,
            recharge_at_admission: true,
            patience: PatienceRule::default(),
            rewrite_host: false,
            shutdown_timeout: Duration::from_secs(30),
        }
    }
}

/// The TOML file. Every key is optional; command-line flags override it. The top-level
/// keys are the command-line flags' names without `--` (`max-queue-len = 100`; the
/// snake_case spellings `max_queue_len` are accepted too); `types`, `[estimator]` and
/// `[auto]` have no flags. `crates/gatekeeper/gatekeeper.example.toml` lists every key.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct FileConfig {
    pub listen: Option<String>,
    pub upstream: Option<String>,
    pub capacity: Option<String>,
    pub policy: Option<String>,
    pub classify: Option<Vec<String>>,
    pub admin: Option<String>,
    #[serde(alias = "max_types")]
    pub max_types: Option<usize>,
    pub types: Option<Vec<String>>,
    #[serde(alias = "max_queue_len")]
    pub max_queue_len: Option<usize>,
    #[serde(alias = "max_queue_wait")]
    pub max_queue_wait: Option<String>,
    #[serde(alias = "max_wait")]
    pub max_wait: Option<String>,
    #[serde(alias = "max_in_flight")]
    pub max_in_flight: Option<usize>,
    #[serde(alias = "max_charge_share")]
    pub max_charge_share: Option<f64>,
    #[serde(alias = "overdue_share")]
    pub overdue_share: Option<f64>,
    #[serde(alias = "upstream_timeout")]
    pub upstream_timeout: Option<String>,
    pub upstream_body_timeout: Option<String>,
    pub header_timeout: Option<String>,
    #[serde(alias = "retry_after_s")]
    pub retry_after: Option<u32>,
    #[serde(alias = "max_connections")]
    pub max_connections: Option<usize>,
    #[serde(alias = "busy_poll_us")]
    pub busy_poll_us: Option<u64>,
    #[serde(alias = "charge_at")]
    pub charge_at: Option<String>,
    /// Same as `[estimator] basis`; the flag's name.
    pub estimate_basis: Option<String>,
    pub threads: Option<usize>,
    pub rewrite_host: Option<bool>,
    pub shutdown_timeout: Option<String>,
    pub access_log: Option<bool>,
    pub estimator: Option<FileEstimator>,
    pub auto: Option<FileAuto>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileEstimator {
    pub alpha: Option<f64>,
    pub cold_cost: Option<String>,
    pub max_sample: Option<String>,
    pub basis: Option<String>,
    /// Re-sample a type sjf has not admitted for this long (a duration, or "off").
    pub resample_after: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileAuto {
    pub initial: Option<String>,
    pub min: Option<String>,
    pub max: Option<String>,
    pub interval: Option<String>,
    pub min_samples: Option<u64>,
    pub high_inflation: Option<f64>,
    pub low_inflation: Option<f64>,
    pub increase_frac: Option<f64>,
    pub decrease_factor: Option<f64>,
}

impl FileConfig {
    pub fn load(path: &Path) -> Result<Self, GatekeeperError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| GatekeeperError::io(format!("reading config {}", path.display()), e))?;
        toml::from_str(&text).map_err(|e| GatekeeperError::Config(format!("{}: {e}", path.display())))
    }

    pub fn estimator(&self) -> Result<EstimatorConfig, GatekeeperError> {
        let mut e = EstimatorConfig::default();
        if let Some(f) = &self.estimator {
            if let Some(a) = f.alpha {
                e.alpha = a;
            }
            if let Some(c) = &f.cold_cost {
                e.cold_cost_us = parse_cost_us(c, "estimator.cold_cost")?;
            }
            if let Some(m) = &f.max_sample {
                e.max_sample_us = parse_cost_us(m, "estimator.max_sample")?;
            }
            if let Some(b) = &f.basis {
                e.basis = b.parse().map_err(|err| GatekeeperError::Config(format!("estimator.basis: {err}")))?;
            }
            if let Some(r) = &f.resample_after {
                e.resample_after_us = if r.trim() == "off" {
                    None
                } else {
                    let us = parse_duration(r, "estimator.resample_after")?.as_micros() as u64;
                    if us == 0 {
                        return Err(GatekeeperError::Config(
                            "estimator.resample_after: must be above 0 (\"off\" never re-samples)".into(),
                        ));
                    }
                    Some(us)
                };
            }
        }
        if let Some(b) = &self.estimate_basis {
            e.basis = b.parse().map_err(|err| GatekeeperError::Config(format!("estimate-basis: {err}")))?;
        }
        Ok(e)
    }

    /// Apply `[auto]` to an auto capacity setting.
    ///
    /// (The `estimate-basis` key is applied after `[estimator]`, as the flag is.)
    pub fn auto(&self, mut a: AutoConfig) -> Result<AutoConfig, GatekeeperError> {
        if let Some(f) = &self.auto {
            if let Some(v) = &f.initial {
                a.initial_capacity_us = parse_cost_us(v, "auto.initial")?;
            }
            if let Some(v) = &f.min {
                a.min_capacity_us = parse_cost_us(v, "auto.min")?;
            }
            if let Some(v) = &f.max {
                a.max_capacity_us = parse_cost_us(v, "auto.max")?;
            }
            if let Some(v) = &f.interval {
                a.interval_us = parse_duration(v, "auto.interval")?.as_micros() as u64;
            }
            a.min_samples = f.min_samples.unwrap_or(a.min_samples);
            a.high_inflation = f.high_inflation.unwrap_or(a.high_inflation);
            a.low_inflation = f.low_inflation.unwrap_or(a.low_inflation);
            a.increase_frac = f.increase_frac.unwrap_or(a.increase_frac);
            a.decrease_factor = f.decrease_factor.unwrap_or(a.decrease_factor);
        }
        a.validate()?;
        Ok(a)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cost_and_duration_units() {
        let t = [("20000", 20_000_000), ("2s", 2_000_000), ("1.5ms", 1_500), ("800us", 800), (" 3 ms", 3_000)];
        for (s, us) in t {
            assert_eq!(parse_cost_us(s, "x").unwrap(), us, "{s}");
        }
        assert_eq!(parse_duration("30", "x").unwrap(), Duration::from_secs(30));
        assert_eq!(parse_duration("250ms", "x").unwrap(), Duration::from_millis(250));
        for bad in ["", "ms", "-1", "1h", "nan"] {
            assert!(parse_cost_us(bad, "capacity").unwrap_err().to_string().contains("capacity"), "{bad}");
        }
    }

    #[test]
    fn capacity_prints_readably() {
        let t =
            [(10_000, "10ms (fixed)"), (2_500_000, "2.5s (fixed)"), (800, "800us (fixed)"), (1_500, "1.5ms (fixed)")];
        for (us, want) in t {
            assert_eq!(CapacitySetting::Fixed { capacity_us: us }.to_string(), want);
        }
        assert_eq!(CapacitySetting::parse("auto").unwrap().to_string(), "auto (starts at 50ms, within 1ms..3600s)");
    }

    #[test]
    fn capacity_setting() {
        assert_eq!(CapacitySetting::parse("50ms").unwrap(), CapacitySetting::Fixed { capacity_us: 50_000 });
        assert!(matches!(CapacitySetting::parse("auto").unwrap(), CapacitySetting::Auto(_)));
        assert!(CapacitySetting::parse("0").is_err());
    }

    #[test]
    fn upstream_urls() {
        let u = Upstream::parse("http://127.0.0.1:9000/app/").unwrap();
        assert_eq!(u.target_for(&PathAndQuery::from_static("/x?y=1")).unwrap().to_string(), "/app/x?y=1");
        let u = Upstream::parse("http://127.0.0.1:9000").unwrap();
        assert_eq!(u.target_for(&PathAndQuery::from_static("/")).unwrap().to_string(), "/");
        assert_eq!(u.target_for(&PathAndQuery::from_static("/x?y=1")).unwrap().to_string(), "/x?y=1");
        for bad in ["https://a:1", "127.0.0.1:9000", "http://a:1/?q"] {
            assert!(Upstream::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn example_file_parses_with_every_key() {
        let text = include_str!("../gatekeeper.example.toml");
        let f: FileConfig = toml::from_str(text).expect("gatekeeper.example.toml parses");
        f.estimator().unwrap();
        f.auto(AutoConfig::default()).unwrap();
        // Every key is set in the example (commented-out keys would go stale unseen).
        let table: toml::Table = toml::from_str(text).unwrap();
        for key in [
            "listen",
            "upstream",
            "capacity",
            "policy",
            "classify",
            "admin",
            "max-types",
            "types",
            "max-queue-len",
            "max-queue-wait",
            "max-in-flight",
            "max-charge-share",
            "overdue-share",
            "upstream-timeout",
            "upstream-body-timeout",
            "header-timeout",
            "retry-after",
            "max-connections",
            "busy-poll-us",
            "charge-at",
            "estimate-basis",
            "threads",
            "rewrite-host",
            "shutdown-timeout",
            "access-log",
            "estimator",
            "auto",
        ] {
            assert!(table.contains_key(key), "example lacks {key}");
        }
        assert_eq!(f.max_queue_len, Some(10_000));
        assert_eq!(f.rewrite_host, Some(false));
    }

    #[test]
    fn snake_case_keys_are_still_accepted() {
        let f: FileConfig = toml::from_str("max_queue_len = 5\nretry_after_s = 2\nmax-types = 9\n").unwrap();
        assert_eq!((f.max_queue_len, f.retry_after, f.max_types), (Some(5), Some(2), Some(9)));
        assert!(toml::from_str::<FileConfig>("max-queue-lenn = 5").is_err());
    }

    #[test]
    fn file_config_parses_and_rejects_unknown_keys() {
        let f: FileConfig = toml::from_str(
            "capacity = \"auto\"\npolicy = \"sjf-aging:2\"\nclassify = [\"a=^GET /a\"]\n[estimator]\nalpha = 0.2\ncold_cost = \"5ms\"\nbasis = \"share\"\n[auto]\ninitial = \"20ms\"\n",
        )
        .unwrap();
        assert_eq!(f.estimator().unwrap().cold_cost_us, 5_000);
        assert_eq!(f.estimator().unwrap().basis, shortfirst_core::admission::Basis::Share);
        let bad: FileConfig = toml::from_str("[estimator]\nbasis = \"demand\"\n").unwrap();
        assert!(bad.estimator().unwrap_err().to_string().contains("estimator.basis"));
        assert_eq!(f.auto(AutoConfig::default()).unwrap().initial_capacity_us, 20_000);
        assert!(toml::from_str::<FileConfig>("capacty = \"1\"").is_err());
        // Re-sampling: default 5 s, a duration (bare numbers are seconds), or off.
        let resample = |v: &str| {
            toml::from_str::<FileConfig>(&format!("[estimator]\nresample_after = \"{v}\"\n")).unwrap().estimator()
        };
        assert_eq!(f.estimator().unwrap().resample_after_us, Some(5_000_000));
        assert_eq!(resample("2").unwrap().resample_after_us, Some(2_000_000));
        assert_eq!(resample("750ms").unwrap().resample_after_us, Some(750_000));
        assert_eq!(resample("off").unwrap().resample_after_us, None);
        for bad in ["0", "soon"] {
            assert!(resample(bad).unwrap_err().to_string().contains("estimator.resample_after"), "{bad}");
        }
    }
}
