//! The named values of the configuration: policies, cutoff and log-format choices, and the
//! scheduler, each parsed from its flag or file spelling.

use serde::Deserialize;
use shortfirst_core::bands::{Cutoffs, CutoffsError};
use shortfirst_core::srrt::{RrtCutoffs, RrtCutoffsError};

/// Hard upper bound on `max-headers`: the parser keeps its header table on the stack.
pub const MAX_HEADERS_LIMIT: usize = 128;

/// How responses are ranked into data bands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, strum::VariantNames, strum::Display, strum::EnumIter)]
#[serde(rename_all = "lowercase")]
#[strum(serialize_all = "lowercase")]
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
        parse_name(s, "policy")
    }
}

/// A unit variant from its serde name (the same spelling as in the TOML file); the error
/// lists the names `T` has.
fn parse_name<T: serde::de::DeserializeOwned + strum::VariantNames>(s: &str, what: &str) -> Result<T, String> {
    parse_name_expecting(s, what, &shortfirst_core::names::one_of(T::VARIANTS))
}

/// `parse_name` with its own list of what is expected (a value with spellings beyond the names).
fn parse_name_expecting<T: serde::de::DeserializeOwned>(s: &str, what: &str, expected: &str) -> Result<T, String> {
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
            (_, false) => parse_name_expecting::<Policy>(&name, "policy", POLICY_NAMES).map(PolicySpec::from),
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
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, strum::VariantNames, strum::Display)]
#[serde(rename_all = "lowercase")]
#[strum(serialize_all = "lowercase")]
pub enum AccessLogFormat {
    /// Combined Log Format plus `rt=<seconds> band=<n>`.
    Combined,
    /// One JSON object per line.
    Json,
}

impl std::str::FromStr for AccessLogFormat {
    type Err = String;
    fn from_str(s: &str) -> Result<AccessLogFormat, String> {
        parse_name(s, "access log format")
    }
}

/// What to do with a request for a dotfile: a path with a segment starting
/// with `.` (`/.git/config`, `/.env`, `/a/.htpasswd`), except under
/// `/.well-known/`, which RFC 8615 reserves for files meant to be public.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, strum::VariantNames, strum::Display)]
#[serde(rename_all = "lowercase")]
#[strum(serialize_all = "lowercase")]
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
        parse_name(s, "dotfiles setting")
    }
}

/// What a directory without `index.html` is answered (see `crate::listing`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, strum::VariantNames, strum::Display)]
#[serde(rename_all = "lowercase")]
#[strum(serialize_all = "lowercase")]
pub enum Listings {
    /// 403, as if listings did not exist.
    Off,
    /// An HTML page.
    Html,
    /// A JSON object.
    Json,
    /// JSON to a request whose `Accept` names `application/json` (at least as
    /// high as `text/html`), HTML otherwise; with `Vary: Accept`.
    Auto,
}

impl std::str::FromStr for Listings {
    type Err = String;
    fn from_str(s: &str) -> Result<Listings, String> {
        parse_name(s, "listings setting")
    }
}

/// What a request whose `Host` names no `[[host]]` is answered (see `crate::site`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, strum::VariantNames, strum::Display)]
#[serde(rename_all = "kebab-case")]
#[strum(serialize_all = "kebab-case")]
pub enum UnknownHost {
    /// Served from the top-level `root`, the default site (as nginx's default server).
    Default,
    /// `421 Misdirected Request`: this server is not authoritative for the name (RFC 9110
    /// §15.5.20; an HTTP/2 client that coalesced the connection retries on a new one).
    Misdirected,
    /// `404 Not Found`.
    NotFound,
}

impl std::str::FromStr for UnknownHost {
    type Err = String;
    fn from_str(s: &str) -> Result<UnknownHost, String> {
        parse_name(s, "unknown-host setting")
    }
}

/// Who orders the bytes on the uplink.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, strum::VariantNames, strum::Display, strum::EnumIter)]
#[serde(rename_all = "lowercase")]
#[strum(serialize_all = "lowercase")]
pub enum Scheduling {
    /// Kernel priority bands: `SO_PRIORITY` per band under the HTB tree of
    /// `shortfirst uplink setup` (needs CAP_NET_ADMIN).
    Kernel,
    /// The server's own uplink scheduler: a pacer at just under `link-rate`
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
        parse_name(s, "scheduler")
    }
}

/// What the accept loop does while `max-connections` connections are open.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, strum::VariantNames, strum::Display)]
#[serde(rename_all = "lowercase")]
#[strum(serialize_all = "lowercase")]
pub enum AtMaxConnections {
    /// Accept the new connection, answer `503` with `Retry-After: 1` and close it:
    /// the client learns at once, and the accept queue keeps draining.
    Refuse,
    /// Stop accepting until a connection closes (as Apache at `MaxClients`, nginx at
    /// `worker_connections`): new connections wait in the kernel's accept queue, and
    /// once it is full (`backlog`) the kernel drops their SYNs.
    Wait,
}

impl std::str::FromStr for AtMaxConnections {
    type Err = String;
    fn from_str(s: &str) -> Result<AtMaxConnections, String> {
        parse_name(s, "at-max-connections setting")
    }
}
