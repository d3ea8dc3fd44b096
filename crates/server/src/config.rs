//! Server configuration: every knob of `shortfirst serve`, its default, and the
//! TOML file form whose keys mirror the command-line flags.
//!
//! [`ConfigFile`] is the partial form (every key optional) used both for a
//! `--config FILE.toml` and for the flags; [`ConfigFile::overlay`] lets flags win
//! over the file, and [`ServerConfig::from_file`] validates the result.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use shortfirst_core::bands::{Cutoffs, CutoffsError};
use shortfirst_core::srrt::{Estimator, RrtCutoffs, RrtCutoffsError};

/// Hard upper bound on `max-headers`: the parser keeps its header table on the stack.
pub const MAX_HEADERS_LIMIT: usize = 128;

/// How responses are ranked into data bands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Policy {
    /// Every response in one data band (band 1): processor sharing.
    Fair,
    /// Size-based bands with the paper's cutoffs (or `--cutoffs`).
    Srpt,
    /// Two bands split at the median response size (learned online).
    Srpt2,
    /// Least attained service first (user-space schedulers only: the kernel
    /// bands rank by remaining size).
    Las,
    /// Bands by estimated remaining response time from `TCP_INFO` (`rrt-cutoffs`).
    Srrt,
}

impl std::str::FromStr for Policy {
    type Err = String;
    fn from_str(s: &str) -> Result<Policy, String> {
        parse_name(s, "policy", "fair, srpt, srpt2, las or srrt")
    }
}

/// A unit variant from its serde name (the same spelling as in the TOML file).
fn parse_name<T: serde::de::DeserializeOwned>(s: &str, what: &str, expected: &str) -> Result<T, String> {
    use serde::de::value::{Error, StrDeserializer};
    T::deserialize(StrDeserializer::<Error>::new(s)).map_err(|_| format!("unknown {what} {s:?}: expected {expected}"))
}

/// A `--policy` value: the policy plus, for `srpt-classes:CUTOFFS`, the cutoffs it names.
///
/// The names match `shortfirst sim`: `srpt-classes:C` is SRPT by size classes with
/// cutoffs `C`; `srpt-classes` alone takes them from `--cutoffs` (or the default).
/// `srpt` is kept as the older spelling of `srpt-classes` (in `sim`, `srpt` is exact SRPT,
/// which a server with a handful of priority bands cannot do).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PolicySpec {
    pub policy: Policy,
    /// Cutoffs named in the policy itself (`srpt-classes:1K,5K`); `None` = from `cutoffs`.
    pub cutoffs: Option<Cutoffs>,
    /// Spelt `srpt`: exact SRPT where the scheduler can do it (user space), size
    /// classes in the kernel.
    pub exact: bool,
}

const POLICY_NAMES: &str = "fair, srpt-classes, srpt-classes:CUTOFFS (e.g. srpt-classes:1K,2K,5K,20K,50K), \
     srpt (exact with --scheduler user, else = srpt-classes), srpt2, las (--scheduler user) or srrt (kernel)";

impl From<Policy> for PolicySpec {
    fn from(policy: Policy) -> PolicySpec {
        PolicySpec { policy, cutoffs: None, exact: false }
    }
}

impl std::str::FromStr for PolicySpec {
    type Err = String;
    fn from_str(s: &str) -> Result<PolicySpec, String> {
        let trimmed = s.trim();
        let name = trimmed.split_once(':').map_or(trimmed, |(n, _)| n.trim()).to_ascii_lowercase();
        match (name.as_str(), trimmed.contains(':')) {
            ("srpt-classes", false) => Ok(Policy::Srpt.into()),
            // Core's parser, so `sim` and `serve` read the same cutoffs the same way.
            ("srpt-classes", true) => match shortfirst_core::policy::Policy::parse(trimmed) {
                Ok(shortfirst_core::policy::Policy::SrptClasses(cutoffs)) => {
                    Ok(PolicySpec { policy: Policy::Srpt, cutoffs: Some(cutoffs), exact: false })
                }
                Ok(other) => Err(format!("policy {s:?}: parsed as {other}, expected srpt-classes:CUTOFFS")),
                Err(e) => Err(e.to_string()),
            },
            ("srpt", false) => Ok(PolicySpec { policy: Policy::Srpt, cutoffs: None, exact: true }),
            (_, false) => parse_name::<Policy>(&name, "policy", POLICY_NAMES).map(PolicySpec::from),
            (_, true) => {
                Err(format!("unknown policy {s:?}: only srpt-classes takes cutoffs after `:`; expected {POLICY_NAMES}"))
            }
        }
    }
}

impl<'de> Deserialize<'de> for PolicySpec {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<PolicySpec, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

impl std::fmt::Display for PolicySpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (&self.policy, &self.cutoffs) {
            (Policy::Srpt, Some(c)) => write!(f, "srpt-classes:{c}"),
            (Policy::Srpt, None) if !self.exact => write!(f, "srpt-classes"),
            (p, _) => write!(f, "{p}"),
        }
    }
}

/// A timeout from the config file: a unit string (`"10s"`, `"500ms"`, `"1m"`) or a plain
/// number of seconds, as on the command line. Kept in seconds until validated.
fn duration_s<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Text {
        Number(f64),
        Text(String),
    }
    match Text::deserialize(d)? {
        Text::Number(v) => Ok(Some(v)),
        Text::Text(t) => shortfirst_core::units::parse_duration_s(&t, shortfirst_core::units::BareUnit::Seconds)
            .map(Some)
            .map_err(serde::de::Error::custom),
    }
}

/// A positive timeout in seconds → `Duration`; `key` names the setting in the error.
fn timeout(key: &'static str, seconds: f64) -> Result<Duration, ConfigError> {
    match Duration::try_from_secs_f64(seconds) {
        Ok(d) if !d.is_zero() => Ok(d),
        _ => Err(ConfigError::Invalid { key, reason: format!("{seconds} s: must be above 0 and finite") }),
    }
}

impl std::fmt::Display for Policy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Policy::Fair => "fair",
            Policy::Srpt => "srpt",
            Policy::Srpt2 => "srpt2",
            Policy::Las => "las",
            Policy::Srrt => "srrt",
        })
    }
}

/// Where the cutoffs of `srpt` come from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CutoffsSpec {
    /// Fixed cutoffs.
    List(Cutoffs),
    /// Derived from the observed sizes (paper §2.2.2), recomputed periodically.
    Auto,
}

impl std::str::FromStr for CutoffsSpec {
    type Err = CutoffsError;
    fn from_str(s: &str) -> Result<CutoffsSpec, CutoffsError> {
        if s.trim().eq_ignore_ascii_case("auto") {
            Ok(CutoffsSpec::Auto)
        } else {
            Cutoffs::parse(s).map(CutoffsSpec::List)
        }
    }
}

/// Where the response-time cutoffs of `srrt` come from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RrtCutoffsSpec {
    /// Fixed cutoffs.
    List(RrtCutoffs),
    /// Derived from the estimates at response start, as `cutoffs = "auto"` from sizes.
    Auto,
}

impl std::str::FromStr for RrtCutoffsSpec {
    type Err = RrtCutoffsError;
    fn from_str(s: &str) -> Result<RrtCutoffsSpec, RrtCutoffsError> {
        if s.trim().eq_ignore_ascii_case("auto") {
            Ok(RrtCutoffsSpec::Auto)
        } else {
            RrtCutoffs::parse(s).map(RrtCutoffsSpec::List)
        }
    }
}

/// Access log line format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AccessLogFormat {
    /// Combined Log Format plus `rt=<seconds> band=<n>`.
    Combined,
    /// One JSON object per line.
    Json,
}

impl std::str::FromStr for AccessLogFormat {
    type Err = String;
    fn from_str(s: &str) -> Result<AccessLogFormat, String> {
        parse_name(s, "access log format", "combined or json")
    }
}

/// What to do with a request for a dotfile: a path with a segment starting
/// with `.` (`/.git/config`, `/.env`, `/a/.htpasswd`), except under
/// `/.well-known/`, which RFC 8615 reserves for files meant to be public.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Dotfiles {
    /// 404, as if it did not exist: says nothing about what the root holds.
    Ignore,
    /// 403.
    Deny,
    /// Served like any other file.
    Allow,
}

impl std::str::FromStr for Dotfiles {
    type Err = String;
    fn from_str(s: &str) -> Result<Dotfiles, String> {
        parse_name(s, "dotfiles setting", "ignore, deny or allow")
    }
}

/// Who orders the bytes on the uplink.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Scheduling {
    /// Kernel priority bands: `SO_PRIORITY` per band under the HTB tree of
    /// `shortfirst uplink setup` (needs CAP_NET_ADMIN).
    Kernel,
    /// The server's own uplink scheduler: a pacer at just under `uplink-rate`
    /// and a work-conserving pick among writable connections. No qdisc, no
    /// capability.
    User,
    /// Crovella et al. 1999's baseline: the same pacer, but only
    /// `write-concurrency` connections may write, whether or not they can send.
    Crovella,
}

impl std::str::FromStr for Scheduling {
    type Err = String;
    fn from_str(s: &str) -> Result<Scheduling, String> {
        parse_name(s, "scheduler", "kernel, user or crovella")
    }
}

impl std::fmt::Display for Scheduling {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Scheduling::Kernel => "kernel",
            Scheduling::User => "user",
            Scheduling::Crovella => "crovella",
        })
    }
}

/// An uplink rate from the config file: a unit string (`"10mbit"`) or a plain number of bits/s.
fn rate_bits_per_s<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Text {
        Number(u64),
        Text(String),
    }
    match Text::deserialize(d)? {
        Text::Number(v) => Ok(Some(v)),
        Text::Text(t) => shortfirst_core::units::parse_rate_bits_per_s(&t).map(Some).map_err(serde::de::Error::custom),
    }
}

/// Highest `uplink-rate` accepted (the pacer's arithmetic is exact well beyond).
pub const MAX_UPLINK_RATE_BITS_PER_S: u64 = 400_000_000_000;

/// The validated configuration the server runs with.
#[derive(Clone, Debug)]
pub struct ServerConfig {
    /// Directory served; canonicalised at bind time.
    pub root: PathBuf,
    pub listen: SocketAddr,
    pub policy: Policy,
    /// Cutoffs for `srpt` (ignored by `fair`; `srpt2` always learns its own).
    pub cutoffs: CutoffsSpec,
    /// `--policy srpt` as spelt: exact SRPT under a user-space scheduler.
    pub srpt_exact: bool,
    /// Kernel bands, or the server's own uplink scheduler.
    pub scheduler: Scheduling,
    /// The uplink's rate (bits/s, on the wire): required by the user-space
    /// schedulers, whose pacer runs at just under it.
    pub uplink_rate_bits_per_s: Option<u64>,
    /// `crovella` only: connections that may write at once.
    pub write_concurrency: usize,
    /// User-space schedulers: link time granted ahead of now. It must cover the
    /// pacer task's wake-up lateness (tokio's timer is millisecond-granular, and
    /// a busy machine adds more), or the link idles; it is also the most a new
    /// short response can wait behind bytes already granted.
    pub pacer_lookahead: Duration,
    /// Response-time cutoffs for `srrt`.
    pub rrt_cutoffs: RrtCutoffsSpec,
    /// How `srrt` estimates a response's remaining time.
    pub rrt_estimator: Estimator,
    /// `srrt`: a response's estimate is re-evaluated (one `getsockopt(TCP_INFO)`)
    /// after a write that crosses a multiple of this many bytes written.
    pub rrt_step_bytes: u64,
    /// Prometheus metrics listener (`GET /metrics`); none if `None`.
    pub admin: Option<SocketAddr>,
    /// Tokio worker threads; 0 = one per CPU.
    pub threads: usize,
    /// Open client connections at most; connections accepted beyond it get an
    /// immediate `503` and are closed.
    pub max_connections: usize,
    /// Longest request line (method, target, version) accepted; longer → 414.
    pub max_request_line_bytes: usize,
    /// Largest request head (request line + headers) accepted; larger → 431.
    pub max_header_bytes: usize,
    /// Most header fields in one request; more → 431.
    pub max_headers: usize,
    /// Largest request body a GET/HEAD may carry (read and discarded); larger → 413.
    pub max_body_bytes: u64,
    /// From the first byte of a request to the end of its head; exceeded → 408 and close.
    pub header_timeout: Duration,
    /// Keep-alive: how long an idle connection waits for its next request; then closed.
    pub idle_timeout: Duration,
    /// How long a write may make no progress (client not reading); then closed.
    pub send_timeout: Duration,
    /// On SIGTERM/SIGINT, how long in-flight responses may take to finish.
    pub drain_timeout: Duration,
    /// Requests served on one connection before it is closed (`Connection: close`).
    pub max_requests_per_connection: u64,
    /// Largest body handed to one `sendfile` call, so a band crossing is noticed
    /// at least this often.
    pub sendfile_chunk_bytes: usize,
    /// `SO_SNDBUF` of accepted sockets; `None` keeps the kernel's autotuning.
    pub send_buffer_bytes: Option<usize>,
    /// `TCP_NOTSENT_LOWAT` of accepted sockets (0 = kernel default): bounds the
    /// bytes written but not yet transmitted. Priority applies to a packet when
    /// TCP transmits it, so without a bound a large response written into a big
    /// send buffer would be promoted to band 1 while most of it is still queued.
    pub notsent_lowat_bytes: u32,
    /// Access log destination: a file path, `-` for stdout; `None` = no access log.
    pub access_log: Option<PathBuf>,
    pub access_log_format: AccessLogFormat,
    /// Set `SO_PRIORITY` per band (needs CAP_NET_ADMIN). Off: no kernel scheduling.
    pub socket_priority: bool,
    /// Follow symlinks that lead outside the root (refused by default).
    pub follow_symlinks_outside_root: bool,
    /// Dotfiles: refused by default (a `.git` or `.env` left in a docroot is a
    /// classic leak; serving one must be asked for).
    pub dotfiles: Dotfiles,
    /// Auto cutoffs (`srpt2`, `--cutoffs auto`): sizes remembered.
    pub auto_window: usize,
    /// Auto cutoffs: recompute after this many responses.
    pub auto_recompute_every: usize,
}

impl ServerConfig {
    /// The defaults for serving `root`.
    pub fn new(root: impl Into<PathBuf>) -> ServerConfig {
        ServerConfig {
            root: root.into(),
            listen: "127.0.0.1:8080".parse().expect("valid literal"),
            policy: Policy::Srpt,
            cutoffs: CutoffsSpec::List(Cutoffs::paper_default()),
            srpt_exact: false,
            scheduler: Scheduling::Kernel,
            uplink_rate_bits_per_s: None,
            write_concurrency: 35,
            pacer_lookahead: Duration::from_millis(8),
            rrt_cutoffs: RrtCutoffsSpec::List(RrtCutoffs::default_list()),
            rrt_estimator: Estimator::Path,
            rrt_step_bytes: 64 * 1024,
            admin: None,
            threads: 0,
            max_connections: 4096,
            max_request_line_bytes: 8 * 1024,
            max_header_bytes: 16 * 1024,
            max_headers: 64,
            max_body_bytes: 64 * 1024,
            header_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            send_timeout: Duration::from_secs(60),
            drain_timeout: Duration::from_secs(10),
            max_requests_per_connection: 10_000,
            sendfile_chunk_bytes: 256 * 1024,
            send_buffer_bytes: None,
            notsent_lowat_bytes: 16 * 1024,
            access_log: None,
            access_log_format: AccessLogFormat::Combined,
            socket_priority: true,
            follow_symlinks_outside_root: false,
            dotfiles: Dotfiles::Ignore,
            auto_window: 10_000,
            auto_recompute_every: 1_000,
        }
    }

    /// Builds and validates a configuration from its partial form; `root` is required.
    /// Longer than ~80 lines for the flat list of keys taken from the file, one per setting.
    pub fn from_file(file: ConfigFile) -> Result<ServerConfig, ConfigError> {
        file.check_pairs()?;
        let root = file.root.ok_or(ConfigError::Missing("root"))?;
        let mut c = ServerConfig::new(root);
        macro_rules! take {
            ($($field:ident),*) => { $( if let Some(v) = file.$field { c.$field = v; } )* };
        }
        take!(
            listen,
            threads,
            max_connections,
            max_request_line_bytes,
            max_header_bytes,
            max_headers,
            max_body_bytes,
            max_requests_per_connection,
            sendfile_chunk_bytes,
            notsent_lowat_bytes,
            access_log_format,
            socket_priority,
            follow_symlinks_outside_root,
            dotfiles,
            auto_window,
            auto_recompute_every,
            scheduler,
            write_concurrency,
            rrt_estimator,
            rrt_step_bytes
        );
        c.uplink_rate_bits_per_s = file.uplink_rate;
        if file.write_concurrency.is_some() && c.scheduler != Scheduling::Crovella {
            return Err(ConfigError::Invalid {
                key: "write-concurrency",
                reason: format!("only the crovella scheduler limits write concurrency (scheduler is {})", c.scheduler),
            });
        }
        // A user-space scheduler needs no kernel bands: SO_PRIORITY only if asked for.
        if c.scheduler != Scheduling::Kernel && file.socket_priority.is_none() {
            c.socket_priority = false;
        }
        c.admin = file.admin;
        c.access_log = file.access_log;
        c.send_buffer_bytes = file.send_buffer_bytes;
        let ms = Duration::from_millis;
        for (key, secs, millis, field) in [
            ("header-timeout", file.header_timeout, file.header_timeout_ms, &mut c.header_timeout),
            ("idle-timeout", file.idle_timeout, file.idle_timeout_ms, &mut c.idle_timeout),
            ("send-timeout", file.send_timeout, file.send_timeout_ms, &mut c.send_timeout),
            ("drain-timeout", file.drain_timeout, file.drain_timeout_ms, &mut c.drain_timeout),
            ("pacer-lookahead", file.pacer_lookahead, None, &mut c.pacer_lookahead),
        ] {
            if let Some(s) = secs {
                *field = timeout(key, s)?;
            } else if let Some(v) = millis {
                *field = ms(v);
            }
        }
        let mut policy_cutoffs = None;
        if let Some(spec) = file.policy {
            c.policy = spec.policy;
            c.srpt_exact = spec.exact;
            policy_cutoffs = spec.cutoffs;
        }
        if let Some(cutoffs) = policy_cutoffs {
            if file.cutoffs.is_some() {
                return Err(ConfigError::Invalid {
                    key: "cutoffs",
                    reason: format!(
                        "policy srpt-classes:{cutoffs} already names its cutoffs; give them either in the policy or in `cutoffs` (--cutoffs) with policy srpt-classes, not both"
                    ),
                });
            }
            c.cutoffs = CutoffsSpec::List(cutoffs);
        }
        if let Some(text) = file.cutoffs {
            let spec: CutoffsSpec =
                text.parse().map_err(|e| ConfigError::Invalid { key: "cutoffs", reason: format!("{e}") })?;
            if c.policy != Policy::Srpt {
                return Err(ConfigError::Invalid {
                    key: "cutoffs",
                    reason: format!("only srpt-classes (alias srpt) takes cutoffs (policy is {})", c.policy),
                });
            }
            c.cutoffs = spec;
        }
        if let Some(text) = file.rrt_cutoffs {
            c.rrt_cutoffs =
                text.parse().map_err(|e| ConfigError::Invalid { key: "rrt-cutoffs", reason: format!("{e}") })?;
            if c.policy != Policy::Srrt {
                return Err(ConfigError::Invalid {
                    key: "rrt-cutoffs",
                    reason: format!("only srrt takes response-time cutoffs (policy is {})", c.policy),
                });
            }
        }
        c.validate()?;
        Ok(c)
    }

    /// Checks the limits are usable; called by [`ServerConfig::from_file`] and at bind.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let invalid = |key: &'static str, reason: String| Err(ConfigError::Invalid { key, reason });
        if self.max_connections == 0 {
            return invalid("max-connections", "must be at least 1".into());
        }
        if self.max_request_line_bytes < 16 {
            return invalid("max-request-line-bytes", "must be at least 16".into());
        }
        if self.max_header_bytes < self.max_request_line_bytes {
            return invalid("max-header-bytes", "must be at least max-request-line-bytes".into());
        }
        if self.max_header_bytes > 1 << 20 {
            return invalid("max-header-bytes", "must be at most 1 MiB".into());
        }
        if !(1..=MAX_HEADERS_LIMIT).contains(&self.max_headers) {
            return invalid("max-headers", format!("must be in 1..={MAX_HEADERS_LIMIT}"));
        }
        if self.sendfile_chunk_bytes < 4096 {
            return invalid("sendfile-chunk-bytes", "must be at least 4096".into());
        }
        if self.notsent_lowat_bytes > 1 << 30 {
            return invalid("notsent-lowat-bytes", "must be at most 1 GiB".into());
        }
        if self.max_requests_per_connection == 0 {
            return invalid("max-requests-per-connection", "must be at least 1".into());
        }
        for (key, d) in [
            ("header-timeout-ms", self.header_timeout),
            ("idle-timeout-ms", self.idle_timeout),
            ("send-timeout-ms", self.send_timeout),
        ] {
            if d.is_zero() {
                return invalid(key, "must be at least 1 ms".into());
            }
        }
        if self.auto_window < shortfirst_core::bands::AUTO_MIN_OBSERVATIONS {
            return invalid(
                "auto-window",
                format!("must be at least {}", shortfirst_core::bands::AUTO_MIN_OBSERVATIONS),
            );
        }
        if self.auto_recompute_every == 0 {
            return invalid("auto-recompute-every", "must be at least 1".into());
        }
        if !(1024..=1 << 30).contains(&self.rrt_step_bytes) {
            return invalid("rrt-step-bytes", "must be in 1024..=1073741824 (1 KiB to 1 GiB)".into());
        }
        self.validate_scheduler()
    }

    fn validate_scheduler(&self) -> Result<(), ConfigError> {
        let invalid = |key: &'static str, reason: String| Err(ConfigError::Invalid { key, reason });
        match (self.scheduler, self.uplink_rate_bits_per_s) {
            (Scheduling::Kernel, Some(_)) => {
                return invalid(
                    "uplink-rate",
                    "only the user-space schedulers (--scheduler user or crovella) pace to a rate; kernel mode \
                     takes its rate from `shortfirst uplink setup --rate`"
                        .into(),
                )
            }
            (Scheduling::Kernel, None) => {
                if self.policy == Policy::Las {
                    return invalid("policy", "las needs a user-space scheduler (--scheduler user)".into());
                }
                return Ok(());
            }
            (s, None) => {
                return invalid(
                    "uplink-rate",
                    format!(
                    "--scheduler {s} needs the uplink's rate (e.g. --uplink-rate 10mbit): its pacer runs just under it"
                ),
                )
            }
            (_, Some(r)) if r == 0 || r > MAX_UPLINK_RATE_BITS_PER_S => {
                return invalid("uplink-rate", format!("{r} bit/s: must be in 1..={MAX_UPLINK_RATE_BITS_PER_S}"))
            }
            _ => {}
        }
        if self.notsent_lowat_bytes == 0 {
            return invalid(
                "notsent-lowat-bytes",
                format!(
                    "--scheduler {} needs a small TCP_NOTSENT_LOWAT (e.g. 16384) so unsent bytes stay in the \
                     application, where they can be ordered",
                    self.scheduler
                ),
            );
        }
        if self.pacer_lookahead > Duration::from_secs(1) {
            return invalid("pacer-lookahead", format!("{:?}: must be at most 1 s", self.pacer_lookahead));
        }
        if self.scheduler == Scheduling::Crovella && self.write_concurrency == 0 {
            return invalid("write-concurrency", "must be at least 1".into());
        }
        self.user_policy().map(|_| ())
    }

    /// The ranking rule of a user-space scheduler, as `core::policy` spells it.
    pub fn user_policy(&self) -> Result<shortfirst_core::policy::Policy, ConfigError> {
        use shortfirst_core::policy::Policy as Core;
        let unsupported = |what: &str| {
            Err(ConfigError::Invalid {
                key: "policy",
                reason: format!(
                    "{what} is not available with --scheduler {} (use fair, srpt, srpt-classes[:CUTOFFS] or las)",
                    self.scheduler
                ),
            })
        };
        match (self.policy, &self.cutoffs) {
            (Policy::Fair, _) => Ok(Core::Ps),
            (Policy::Las, _) => Ok(Core::Las),
            (Policy::Srpt, _) if self.srpt_exact => Ok(Core::Srpt),
            (Policy::Srpt, CutoffsSpec::List(c)) => Ok(Core::SrptClasses(c.clone())),
            (Policy::Srpt, CutoffsSpec::Auto) => unsupported("cutoffs auto"),
            (Policy::Srpt2, _) => unsupported("srpt2 (learned cutoffs)"),
            (Policy::Srrt, _) => unsupported("srrt (it ranks into the kernel's bands by TCP_INFO)"),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("missing required setting `{0}`")]
    Missing(&'static str),
    #[error("setting `{key}`: {reason}")]
    Invalid { key: &'static str, reason: String },
    #[error("config file {path}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("config file {path}: {message}")]
    Parse { path: PathBuf, message: String },
}

/// The partial configuration: a TOML file or the command-line flags. Keys are the
/// flag names (`max-connections = 100`); an unknown key is an error naming it.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct ConfigFile {
    pub root: Option<PathBuf>,
    pub listen: Option<SocketAddr>,
    pub policy: Option<PolicySpec>,
    pub cutoffs: Option<String>,
    pub rrt_cutoffs: Option<String>,
    pub rrt_estimator: Option<Estimator>,
    pub rrt_step_bytes: Option<u64>,
    pub admin: Option<SocketAddr>,
    pub threads: Option<usize>,
    pub max_connections: Option<usize>,
    pub max_request_line_bytes: Option<usize>,
    pub max_header_bytes: Option<usize>,
    pub max_headers: Option<usize>,
    pub max_body_bytes: Option<u64>,
    /// Timeouts in seconds (`header-timeout = "10s"`); the `-ms` keys are the older
    /// spelling in plain milliseconds. Giving both forms of one timeout is an error.
    #[serde(default, deserialize_with = "duration_s")]
    pub header_timeout: Option<f64>,
    #[serde(default, deserialize_with = "duration_s")]
    pub idle_timeout: Option<f64>,
    #[serde(default, deserialize_with = "duration_s")]
    pub send_timeout: Option<f64>,
    #[serde(default, deserialize_with = "duration_s")]
    pub drain_timeout: Option<f64>,
    pub header_timeout_ms: Option<u64>,
    pub idle_timeout_ms: Option<u64>,
    pub send_timeout_ms: Option<u64>,
    pub drain_timeout_ms: Option<u64>,
    pub max_requests_per_connection: Option<u64>,
    pub sendfile_chunk_bytes: Option<usize>,
    pub send_buffer_bytes: Option<usize>,
    pub notsent_lowat_bytes: Option<u32>,
    pub access_log: Option<PathBuf>,
    pub access_log_format: Option<AccessLogFormat>,
    pub socket_priority: Option<bool>,
    pub follow_symlinks_outside_root: Option<bool>,
    pub dotfiles: Option<Dotfiles>,
    pub auto_window: Option<usize>,
    pub auto_recompute_every: Option<usize>,
    pub scheduler: Option<Scheduling>,
    /// Bits per second: `"10mbit"` or a plain number.
    #[serde(default, deserialize_with = "rate_bits_per_s")]
    pub uplink_rate: Option<u64>,
    pub write_concurrency: Option<usize>,
    #[serde(default, deserialize_with = "duration_s")]
    pub pacer_lookahead: Option<f64>,
}

impl ConfigFile {
    pub fn parse(text: &str, path: &Path) -> Result<ConfigFile, ConfigError> {
        let file: ConfigFile = toml::from_str(text)
            .map_err(|e| ConfigError::Parse { path: path.to_path_buf(), message: e.to_string() })?;
        file.check_pairs().map_err(|e| ConfigError::Parse { path: path.to_path_buf(), message: e.to_string() })?;
        Ok(file)
    }

    /// One timeout given in both spellings (`header-timeout` and `header-timeout-ms`) is
    /// an error rather than a silent pick.
    pub fn check_pairs(&self) -> Result<(), ConfigError> {
        for (key, both) in [
            ("header-timeout", self.header_timeout.is_some() && self.header_timeout_ms.is_some()),
            ("idle-timeout", self.idle_timeout.is_some() && self.idle_timeout_ms.is_some()),
            ("send-timeout", self.send_timeout.is_some() && self.send_timeout_ms.is_some()),
            ("drain-timeout", self.drain_timeout.is_some() && self.drain_timeout_ms.is_some()),
        ] {
            if both {
                return Err(ConfigError::Invalid {
                    key,
                    reason: format!("given as both `{key}` and `{key}-ms` (the older spelling); keep one"),
                });
            }
        }
        Ok(())
    }

    pub fn load(path: &Path) -> Result<ConfigFile, ConfigError> {
        let text =
            std::fs::read_to_string(path).map_err(|source| ConfigError::Read { path: path.to_path_buf(), source })?;
        ConfigFile::parse(&text, path)
    }

    /// `self` with every key set in `over` replaced by `over`'s value (flags over file).
    pub fn overlay(mut self, over: ConfigFile) -> ConfigFile {
        macro_rules! over {
            ($($field:ident),*) => { $( if over.$field.is_some() { self.$field = over.$field; } )* };
        }
        // A timeout given in either spelling replaces both of the file's spellings.
        macro_rules! over_pair {
            ($(($secs:ident, $millis:ident)),*) => { $(
                if over.$secs.is_some() || over.$millis.is_some() {
                    self.$secs = over.$secs;
                    self.$millis = over.$millis;
                }
            )* };
        }
        over_pair!(
            (header_timeout, header_timeout_ms),
            (idle_timeout, idle_timeout_ms),
            (send_timeout, send_timeout_ms),
            (drain_timeout, drain_timeout_ms)
        );
        over!(
            root,
            listen,
            policy,
            cutoffs,
            rrt_cutoffs,
            rrt_estimator,
            rrt_step_bytes,
            admin,
            threads,
            max_connections,
            max_request_line_bytes,
            max_header_bytes,
            max_headers,
            max_body_bytes,
            max_requests_per_connection,
            sendfile_chunk_bytes,
            send_buffer_bytes,
            notsent_lowat_bytes,
            access_log,
            access_log_format,
            socket_priority,
            follow_symlinks_outside_root,
            dotfiles,
            auto_window,
            auto_recompute_every,
            scheduler,
            uplink_rate,
            write_concurrency,
            pacer_lookahead
        );
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_keys_mirror_flags_and_flags_win() {
        let file = ConfigFile::parse(
            "root = \"/srv\"\npolicy = \"fair\"\nmax-connections = 7\nidle-timeout-ms = 1500\n",
            Path::new("t.toml"),
        )
        .unwrap();
        let flags =
            ConfigFile { policy: Some(Policy::Srpt.into()), cutoffs: Some("auto".into()), ..Default::default() };
        let c = ServerConfig::from_file(file.overlay(flags)).unwrap();
        assert_eq!(c.root, PathBuf::from("/srv"));
        assert_eq!(c.policy, Policy::Srpt);
        assert_eq!(c.cutoffs, CutoffsSpec::Auto);
        assert_eq!(c.max_connections, 7);
        assert_eq!(c.idle_timeout, Duration::from_millis(1500));
    }

    #[test]
    fn example_file_is_valid_and_states_the_defaults() {
        let path = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/serve.example.toml"));
        let c = ServerConfig::from_file(ConfigFile::load(path).unwrap()).unwrap();
        let d = ServerConfig::new("/srv/www");
        assert_eq!(format!("{c:?}"), format!("{d:?}"));
    }

    #[test]
    fn unknown_key_is_named() {
        let err = ConfigFile::parse("root = \"/srv\"\nmax-conections = 3\n", Path::new("x.toml")).unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("max-conections"), "{msg}");
        assert!(msg.contains("x.toml"), "{msg}");
    }

    #[test]
    fn bad_values_are_named() {
        let cases: &[(&str, &str)] = &[
            ("policy = \"fair\"\ncutoffs = \"1K\"", "cutoffs"),
            ("cutoffs = \"2K,1K\"", "cutoffs"),
            ("max-headers = 1000", "max-headers"),
            ("max-connections = 0", "max-connections"),
            ("header-timeout-ms = 0", "header-timeout-ms"),
        ];
        for (text, key) in cases {
            let file = ConfigFile::parse(&format!("root = \"/srv\"\n{text}\n"), Path::new("t.toml")).unwrap();
            let msg = ServerConfig::from_file(file).unwrap_err().to_string();
            assert!(msg.contains(key), "{text}: {msg}");
        }
        assert!(matches!(ServerConfig::from_file(ConfigFile::default()), Err(ConfigError::Missing("root"))));
        assert_eq!("srpt2".parse::<Policy>(), Ok(Policy::Srpt2));
        assert_eq!("json".parse::<AccessLogFormat>(), Ok(AccessLogFormat::Json));
        assert_eq!("deny".parse::<Dotfiles>(), Ok(Dotfiles::Deny));
        assert!("hide".parse::<Dotfiles>().unwrap_err().contains("ignore, deny or allow"));
        assert!("SRPT".parse::<Policy>().unwrap_err().contains("fair, srpt, srpt2, las or srrt"));
    }

    fn parse_ok(text: &str) -> ServerConfig {
        let file = ConfigFile::parse(&format!("root = \"/srv\"\n{text}\n"), Path::new("t.toml")).unwrap();
        ServerConfig::from_file(file).unwrap()
    }

    /// Which timeout of the config a case checks.
    type Field = fn(&ServerConfig) -> Duration;

    #[test]
    fn timeouts_take_units_and_the_ms_keys_still_work() {
        let ms = Duration::from_millis;
        let cases: &[(&str, Field, Duration)] = &[
            ("header-timeout = \"10s\"", |c| c.header_timeout, ms(10_000)),
            ("header-timeout = \"500ms\"", |c| c.header_timeout, ms(500)),
            ("header-timeout = 3", |c| c.header_timeout, ms(3_000)),
            ("header-timeout = 0.25", |c| c.header_timeout, ms(250)),
            ("header-timeout = \"2\"", |c| c.header_timeout, ms(2_000)),
            ("header-timeout-ms = 1500", |c| c.header_timeout, ms(1_500)),
            ("idle-timeout = \"1m30s\"", |c| c.idle_timeout, ms(90_000)),
            ("idle-timeout-ms = 7", |c| c.idle_timeout, ms(7)),
            ("send-timeout = \"2.5s\"", |c| c.send_timeout, ms(2_500)),
            ("send-timeout-ms = 900", |c| c.send_timeout, ms(900)),
            ("drain-timeout = \"1s\"", |c| c.drain_timeout, ms(1_000)),
            ("drain-timeout-ms = 0", |c| c.drain_timeout, ms(0)),
        ];
        for (text, field, want) in cases {
            assert_eq!(field(&parse_ok(text)), *want, "{text}");
        }
    }

    #[test]
    fn bad_timeouts_are_named() {
        // (file text, what the error must mention)
        let cases: &[(&str, &[&str])] = &[
            ("header-timeout = \"10s\"\nheader-timeout-ms = 10000", &["header-timeout", "header-timeout-ms", "t.toml"]),
            ("idle-timeout = 1\nidle-timeout-ms = 1", &["idle-timeout", "idle-timeout-ms"]),
            ("send-timeout = \"1s\"\nsend-timeout-ms = 5", &["send-timeout-ms"]),
            ("drain-timeout = \"1s\"\ndrain-timeout-ms = 5", &["drain-timeout-ms"]),
            ("header-timeout = \"ten\"", &["header-timeout", "ten"]),
            ("idle-timeout = \"5 parsecs\"", &["idle-timeout"]),
            ("header-timeout = true", &["header-timeout"]),
        ];
        for (text, needles) in cases {
            let err = ConfigFile::parse(&format!("root = \"/srv\"\n{text}\n"), Path::new("t.toml")).unwrap_err();
            let msg = err.to_string();
            for n in *needles {
                assert!(msg.contains(n), "{text}: {msg} lacks {n}");
            }
        }
        // Parsed but not a usable timeout: named by the new key.
        for (text, key) in [
            ("header-timeout = 0", "header-timeout"),
            ("send-timeout = \"0s\"", "send-timeout"),
            ("drain-timeout = -1", "drain-timeout"),
            ("idle-timeout = 1e300", "idle-timeout"),
        ] {
            let file = ConfigFile::parse(&format!("root = \"/srv\"\n{text}\n"), Path::new("t.toml")).unwrap();
            let msg = ServerConfig::from_file(file).unwrap_err().to_string();
            assert!(msg.contains(key) && msg.contains("above 0"), "{text}: {msg}");
        }
    }

    #[test]
    fn a_flag_in_either_spelling_replaces_the_files_timeout() {
        let file = ConfigFile::parse(
            "root = \"/srv\"\nheader-timeout-ms = 9000\nidle-timeout = \"9s\"\n",
            Path::new("t.toml"),
        )
        .unwrap();
        let flags = ConfigFile { header_timeout: Some(2.0), idle_timeout_ms: Some(300), ..Default::default() };
        let c = ServerConfig::from_file(file.overlay(flags)).unwrap();
        assert_eq!(c.header_timeout, Duration::from_secs(2));
        assert_eq!(c.idle_timeout, Duration::from_millis(300));
    }

    #[test]
    fn policy_names_match_sim() {
        let paper = CutoffsSpec::List(Cutoffs::paper_default());
        let list = |t: &str| CutoffsSpec::List(Cutoffs::parse(t).unwrap());
        // (file text, policy, cutoffs)
        let cases: Vec<(&str, Policy, CutoffsSpec)> = vec![
            ("policy = \"srpt-classes:1K,5K\"", Policy::Srpt, list("1K,5K")),
            ("policy = \"SRPT-Classes: 2K, 20K\"", Policy::Srpt, list("2K,20K")),
            ("policy = \"srpt-classes\"", Policy::Srpt, paper.clone()),
            ("policy = \"srpt-classes\"\ncutoffs = \"3K\"", Policy::Srpt, list("3K")),
            ("policy = \"srpt-classes\"\ncutoffs = \"auto\"", Policy::Srpt, CutoffsSpec::Auto),
            ("policy = \"srpt\"", Policy::Srpt, paper.clone()),
            ("policy = \"srpt\"\ncutoffs = \"3K\"", Policy::Srpt, list("3K")),
            ("policy = \"fair\"", Policy::Fair, paper.clone()),
            ("policy = \"srpt2\"", Policy::Srpt2, paper.clone()),
        ];
        for (text, policy, cutoffs) in cases {
            let c = parse_ok(text);
            assert_eq!((c.policy, &c.cutoffs), (policy, &cutoffs), "{text}");
        }
        // The same string means the same cutoffs in sim's parser.
        let sim = shortfirst_core::policy::Policy::parse("srpt-classes:1K,5K").unwrap();
        let serve: PolicySpec = "srpt-classes:1K,5K".parse().unwrap();
        assert_eq!(sim.to_string(), serve.to_string());
    }

    #[test]
    fn scheduler_keys_in_the_file() {
        let c = parse_ok("scheduler = \"user\"\nuplink-rate = \"10mbit\"\npolicy = \"srpt\"");
        assert_eq!(
            (c.scheduler, c.uplink_rate_bits_per_s, c.socket_priority),
            (Scheduling::User, Some(10_000_000), false)
        );
        assert_eq!(c.user_policy().unwrap(), shortfirst_core::policy::Policy::Srpt);
        let c = parse_ok("scheduler = \"crovella\"\nuplink-rate = 2500000\nwrite-concurrency = 4\npolicy = \"las\"");
        assert_eq!((c.uplink_rate_bits_per_s, c.write_concurrency), (Some(2_500_000), 4));
        assert_eq!(c.user_policy().unwrap(), shortfirst_core::policy::Policy::Las);
        let c = parse_ok("scheduler = \"user\"\nuplink-rate = \"1gbit\"\npolicy = \"srpt-classes\"\ncutoffs = \"3K\"");
        assert_eq!(c.user_policy().unwrap().to_string(), "srpt-classes:3000");
        assert_eq!(parse_ok("policy = \"fair\"").scheduler, Scheduling::Kernel);
        // (file text, what the error must mention)
        for (text, needles) in [
            ("uplink-rate = \"10mbps\"", &["uplink-rate", "bits", "t.toml"][..]),
            ("scheduler = \"usr\"", &["scheduler", "usr"]),
        ] {
            let msg =
                ConfigFile::parse(&format!("root = \"/srv\"\n{text}\n"), Path::new("t.toml")).unwrap_err().to_string();
            for n in needles {
                assert!(msg.contains(n), "{text}: {msg} lacks {n}");
            }
        }
        for (text, needles) in [
            ("scheduler = \"user\"", &["uplink-rate", "10mbit"][..]),
            ("uplink-rate = \"10mbit\"", &["uplink-rate", "uplink setup"]),
            ("scheduler = \"user\"\nuplink-rate = \"600gbit\"", &["uplink-rate", "must be in"]),
            ("write-concurrency = 3", &["write-concurrency", "crovella"]),
            ("policy = \"las\"", &["las", "--scheduler user"]),
            ("scheduler = \"user\"\nuplink-rate = \"1mbit\"\npolicy = \"srpt2\"", &["srpt2"]),
            ("scheduler = \"user\"\nuplink-rate = \"1mbit\"\npolicy = \"srrt\"", &["srrt", "kernel"]),
        ] {
            let file = ConfigFile::parse(&format!("root = \"/srv\"\n{text}\n"), Path::new("t.toml")).unwrap();
            let msg = ServerConfig::from_file(file).unwrap_err().to_string();
            for n in needles {
                assert!(msg.contains(n), "{text}: {msg} lacks {n}");
            }
        }
    }

    #[test]
    fn srrt_keys() {
        let c = parse_ok("policy = \"srrt\"");
        assert_eq!(c.policy, Policy::Srrt);
        assert_eq!(c.rrt_cutoffs, RrtCutoffsSpec::List(RrtCutoffs::default_list()));
        assert_eq!((c.rrt_estimator, c.rrt_step_bytes), (Estimator::Path, 65_536));
        let c = parse_ok("policy = \"srrt\"\nrrt-cutoffs = \"auto\"\nrrt-estimator = \"paper\"\nrrt-step-bytes = 4096");
        assert_eq!((c.rrt_cutoffs, c.rrt_estimator, c.rrt_step_bytes), (RrtCutoffsSpec::Auto, Estimator::Paper, 4096));
        let c = parse_ok("policy = \"srrt\"\nrrt-cutoffs = \"30ms, 300ms\"");
        assert_eq!(c.rrt_cutoffs, RrtCutoffsSpec::List(RrtCutoffs::from_us(vec![30_000, 300_000]).unwrap()));
        for (text, needles) in [
            ("policy = \"srpt\"\nrrt-cutoffs = \"50ms\"", &["rrt-cutoffs", "only srrt"][..]),
            ("policy = \"srrt\"\nrrt-cutoffs = \"1s,50ms\"", &["rrt-cutoffs", "increasing"]),
            ("policy = \"srrt\"\nrrt-cutoffs = \"fast\"", &["rrt-cutoffs", "fast"]),
            ("policy = \"srrt\"\nrrt-step-bytes = 10", &["rrt-step-bytes"]),
            ("policy = \"srrt\"\ncutoffs = \"1K\"", &["cutoffs", "only srpt-classes"]),
        ] {
            let file = ConfigFile::parse(&format!("root = \"/srv\"\n{text}\n"), Path::new("t.toml")).unwrap();
            let msg = ServerConfig::from_file(file).unwrap_err().to_string();
            for n in needles {
                assert!(msg.contains(n), "{text}: {msg} lacks {n}");
            }
        }
        let err = ConfigFile::parse("rrt-estimator = \"e2\"\n", Path::new("t.toml")).unwrap_err().to_string();
        assert!(err.contains("rrt-estimator") || err.contains("e2"), "{err}");
    }

    #[test]
    fn bad_policies_are_named() {
        for (text, needles) in [
            ("srpt-classes:", &["cutoff"][..]),
            ("srpt-classes:2K,1K", &["increasing"]),
            ("srpt-classes:ten", &["ten"]),
            ("fair:1K", &["fair:1K", "srpt-classes:CUTOFFS"]),
            ("srpt:1K", &["srpt:1K", "only srpt-classes"]),
            ("sjf", &["sjf", "srpt (exact with --scheduler user, else = srpt-classes)"]),
            ("ps", &["ps"]),
        ] {
            let err = text.parse::<PolicySpec>().unwrap_err();
            for n in needles {
                assert!(err.contains(n), "{text}: {err} lacks {n}");
            }
            // In a file, the key and the file are named too.
            let err = ConfigFile::parse(&format!("policy = {text:?}\n"), Path::new("p.toml")).unwrap_err().to_string();
            assert!(err.contains("policy") && err.contains("p.toml"), "{text}: {err}");
        }
        // Cutoffs twice: in the policy name and in `cutoffs`.
        let file =
            ConfigFile::parse("root = \"/srv\"\npolicy = \"srpt-classes:1K\"\ncutoffs = \"2K\"\n", Path::new("t.toml"))
                .unwrap();
        let msg = ServerConfig::from_file(file).unwrap_err().to_string();
        assert!(msg.contains("cutoffs") && msg.contains("srpt-classes:1000"), "{msg}");
        let msg = ServerConfig::from_file(
            ConfigFile::parse("root = \"/srv\"\npolicy = \"fair\"\ncutoffs = \"2K\"\n", Path::new("t.toml")).unwrap(),
        )
        .unwrap_err()
        .to_string();
        assert!(msg.contains("only srpt-classes"), "{msg}");
    }
}
