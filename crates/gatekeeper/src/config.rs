//! Gatekeeper configuration: the value parsers shared with the CLI and the validated
//! [`ProxyConfig`] the proxy runs with (its flags and file keys are in [`crate::settings`]).
//!
//! Units: *costs* (capacity, cold cost) are time of upstream service, written with a unit
//! (`800us`, `25ms`, `2s`); a bare number is milliseconds, the paper's unit. *Durations*
//! (timeouts, waits) take the same units (`2m`, `1m30s` too: `core::units` parses both); a
//! bare number is seconds.

use std::net::SocketAddr;
use std::time::Duration;

use hyper::Uri;
use shortfirst_core::admission::auto::AutoConfig;
use shortfirst_core::admission::{AdmissionPolicy, EstimatorConfig, PatienceRule};
use shortfirst_core::units::{self, BareUnit};

use crate::classify::Rule;
use crate::GatekeeperError;

/// Longest cost or duration the gatekeeper takes, in µs (about 31 years: beyond is a typo,
/// and it keeps every value far inside `u64` and `Duration`).
const MAX_US: f64 = 1e15;

/// A quantity by `core::units` (the one parser: `800us`, `25ms`, `2s`, `2m`, `1m30s`), in µs;
/// `what` names the setting in the error.
fn parse_us(s: &str, bare: BareUnit, what: &str) -> Result<u64, GatekeeperError> {
    let seconds = units::parse_duration_s(s, bare).map_err(|e| GatekeeperError::Config(format!("{what}: {e}")))?;
    let us = (seconds * 1e6).round();
    if us > MAX_US {
        return Err(GatekeeperError::Config(format!("{what} {s:?}: out of range")));
    }
    Ok(us as u64)
}

/// A cost in µs; bare numbers are milliseconds.
pub fn parse_cost_us(s: &str, what: &str) -> Result<u64, GatekeeperError> {
    parse_us(s, BareUnit::Milliseconds, what)
}

/// A duration; bare numbers are seconds.
pub fn parse_duration(s: &str, what: &str) -> Result<Duration, GatekeeperError> {
    parse_us(s, BareUnit::Seconds, what).map(Duration::from_micros)
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

/// What the gatekeeper speaks, picked by the upstream URL's scheme.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// `http://`: the HTTP/1.1 reverse proxy (`proxy`).
    Http,
    /// `postgres://` or `postgresql://`: the PostgreSQL wire-protocol gate (`pg`).
    Postgres,
}

/// The upstream: `http://host:port[/prefix]` or `postgres://host:port`.
#[derive(Debug, Clone)]
pub struct Upstream {
    pub protocol: Protocol,
    pub authority: hyper::http::uri::Authority,
    /// Prepended to every forwarded path ("" for none; never ends with '/').
    pub prefix: String,
}

impl Upstream {
    pub fn parse(s: &str) -> Result<Self, GatekeeperError> {
        let bad = |why: &str| GatekeeperError::Config(format!("upstream {s:?}: {why}"));
        let uri: Uri = s.parse().map_err(|_| bad("not a URL"))?;
        let protocol = match uri.scheme_str() {
            Some("http") => Protocol::Http,
            Some("postgres" | "postgresql") => Protocol::Postgres,
            Some(_) => return Err(bad("only http:// and postgres:// upstreams are supported")),
            None => return Err(bad("expected http://HOST:PORT or postgres://HOST:PORT")),
        };
        let authority = uri.authority().cloned().ok_or_else(|| bad("missing host"))?;
        if uri.query().is_some() {
            return Err(bad("must not have a query string"));
        }
        let prefix = uri.path().trim_end_matches('/').to_string();
        if protocol == Protocol::Postgres {
            if authority.port().is_none() || authority.as_str().contains('@') {
                return Err(bad("expected postgres://HOST:PORT (no user: clients log in through the gatekeeper)"));
            }
            if !prefix.is_empty() {
                return Err(bad("a postgres:// upstream takes no database: each client names its own"));
            }
        }
        Ok(Upstream { protocol, authority, prefix })
    }

    /// The request target to send upstream, in origin form (`/prefix/path?query`; the
    /// authority goes in `Host`). Without a prefix the client's path and query is sent as
    /// it is.
    pub fn target_for<'a>(&self, path_and_query: &'a str) -> std::borrow::Cow<'a, str> {
        if self.prefix.is_empty() || path_and_query == "*" {
            path_and_query.into()
        } else {
            format!("{}{}", self.prefix, path_and_query).into()
        }
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
    /// PostgreSQL only: where a transaction's type tag comes from.
    pub pg_types: crate::pg::TypeSource,
    /// PostgreSQL only: a client inside a transaction that sends nothing this long (while
    /// the server owes nothing) is disconnected and its charge released. `None`: never.
    pub idle_in_transaction_timeout: Option<Duration>,
    /// PostgreSQL only: the longest client message (its length header is checked first).
    pub max_message_bytes: usize,
    /// PostgreSQL only: the PEM certificate chain and key for clients that ask for TLS.
    pub tls_cert_key: Option<(std::path::PathBuf, std::path::PathBuf)>,
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
            pg_types: crate::pg::TypeSource::default(),
            idle_in_transaction_timeout: crate::pg::Limits::default().idle_in_transaction,
            max_message_bytes: crate::pg::Limits::default().max_message_bytes,
            tls_cert_key: None,
        }
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
        // The same parser as every other command: minutes and compound durations too.
        assert_eq!(parse_duration("2m", "x").unwrap(), Duration::from_secs(120));
        assert_eq!(parse_duration("1m30s", "x").unwrap(), Duration::from_secs(90));
        assert_eq!(parse_cost_us("1m", "x").unwrap(), 60_000_000);
        for bad in ["", "ms", "-1", "1d", "nan", "1e3"] {
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
        assert_eq!(u.target_for("/x?y=1"), "/app/x?y=1");
        let u = Upstream::parse("http://127.0.0.1:9000").unwrap();
        assert_eq!(u.target_for("/"), "/");
        assert_eq!(u.target_for("/x?y=1"), "/x?y=1");
        for bad in ["https://a:1", "127.0.0.1:9000", "http://a:1/?q"] {
            assert!(Upstream::parse(bad).is_err(), "{bad}");
        }
    }
}
