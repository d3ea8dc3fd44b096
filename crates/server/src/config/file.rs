//! The partial configuration of `shortfirst serve`: one struct that is both the command-line
//! flags (clap) and the TOML file's keys (serde), every setting optional. A setting is
//! defined here once: its flag, its key (the flag's name without `--`), its help text; its
//! default lives in [`super::ServerConfig::new`] and `--help` shows it from there.
//! [`ConfigFile::overlay`] lets the flags win over the file.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use shortfirst_core::srrt::Estimator;
use shortfirst_core::units::{self, BareUnit};

use crate::encoding::Precompressed;

use super::{
    AccessLogFormat, AtMaxConnections, ConfigError, Dotfiles, HostEntry, Listings, PolicySpec, Scheduling, UnknownHost,
};

/// A duration flag in seconds (`10s`, `500ms`, `1m30s`; a plain number is seconds), above 0.
pub fn duration_flag_s(text: &str) -> Result<f64, String> {
    match units::parse_duration_s(text, BareUnit::Seconds).map_err(|e| e.to_string())? {
        s if s > 0.0 => Ok(s),
        _ => Err(format!("duration {text:?}: must be above 0")),
    }
}

/// A rate flag in bits per second (`10mbit`, `1gbit`, a plain number), above 0.
pub fn rate_flag_bits_per_s(text: &str) -> Result<u64, String> {
    match units::parse_rate_bits_per_s(text).map_err(|e| e.to_string())? {
        0 => Err(format!("rate {text:?}: must be above 0 bit/s")),
        r => Ok(r),
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
        Text::Text(t) => units::parse_duration_s(&t, BareUnit::Seconds).map(Some).map_err(serde::de::Error::custom),
    }
}

/// A link rate from the config file: a unit string (`"10mbit"`) or a plain number of bits/s.
fn rate_bits_per_s<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Text {
        Number(u64),
        Text(String),
    }
    match Text::deserialize(d)? {
        Text::Number(v) => Ok(Some(v)),
        Text::Text(t) => units::parse_rate_bits_per_s(&t).map(Some).map_err(serde::de::Error::custom),
    }
}

/// Defines the partial struct and, from the same field list, what every setting needs
/// beyond its own definition: [`ConfigFile::overlay`] and [`ConfigFile::keys_set`].
macro_rules! partial {
    (
        $(#[$meta:meta])*
        pub struct $name:ident { $( $(#[$field_meta:meta])* pub $field:ident : Option<$ty:ty>, )* }
    ) => {
        $(#[$meta])*
        pub struct $name { $( $(#[$field_meta])* pub $field: Option<$ty>, )* }

        impl $name {
            /// Every setting `over` gives replaces `self`'s.
            fn overlay_each(&mut self, over: $name) {
                $( if over.$field.is_some() { self.$field = over.$field; } )*
            }

            /// The keys this partial configuration sets, as spelt in a file (`max-connections`).
            pub fn keys_set(&self) -> Vec<String> {
                let mut keys = Vec::new();
                $( if self.$field.is_some() { keys.push(stringify!($field).replace('_', "-")); } )*
                keys
            }
        }
    };
}

partial! {
/// The partial configuration: the flags of `shortfirst serve` and the keys of its TOML file,
/// the same names (`--max-connections 100`, `max-connections = 100`). An unknown key is an
/// error naming it and the file.
#[derive(Clone, Debug, Default, Deserialize, clap::Args)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
#[command(after_help = "Config file keys are the long flag names without dashes in front \
    (e.g. `max-connections = 100`); flags override the file; an unknown key is an error.\n\
    SO_PRIORITY values above 6 need CAP_NET_ADMIN (root). SIGTERM/SIGINT: graceful shutdown; \
    SIGHUP: re-read the config file (the flags still win) and apply it to new requests, \
    reopen the access log, re-read the TLS certificates.")]
pub struct ConfigFile {
    /// Directory to serve (required).
    #[arg(long, value_name = "DIR")]
    pub root: Option<PathBuf>,
    /// Address to listen on.
    #[arg(long)]
    pub listen: Option<SocketAddr>,
    /// fair: one data band (user space: round robin by bytes); srpt-classes:CUTOFFS: size
    /// bands with those cutoffs, as in `sim` (e.g. `srpt-classes:1K,2K,5K,20K,50K`);
    /// srpt-classes: the cutoffs of --cutoffs; srpt: exact SRPT with --scheduler user, else
    /// = srpt-classes; srpt2: two bands split at the median (kernel); las: least attained
    /// service (user); srrt: bands by estimated remaining response time from TCP_INFO
    /// (--rrt-cutoffs, kernel).
    #[arg(long, value_name = "POLICY")]
    pub policy: Option<PolicySpec>,
    /// Cutoffs of srpt-classes / srpt, e.g. `1K,2K,5K,20K,50K` (the paper's), or `auto`
    /// (learned from observed sizes). Not with --policy srpt-classes:CUTOFFS. The default's
    /// seven bands need `shortfirst uplink setup`'s seven (its default).
    #[arg(long, value_name = "LIST|auto")]
    pub cutoffs: Option<String>,
    /// Response-time cutoffs of srrt, e.g. `50ms,100ms,200ms,500ms,1s` (a plain number is
    /// milliseconds), or `auto` (learned from the estimates at response start).
    #[arg(long, value_name = "LIST|auto")]
    pub rrt_cutoffs: Option<String>,
    /// srrt's estimate: path (min_rtt, slow start, loss and timeout terms) or paper
    /// (srtt·(1 + remaining/(cwnd·mss)), Al-Sadeh and Yahya 2008).
    #[arg(long, value_name = "ESTIMATOR")]
    pub rrt_estimator: Option<Estimator>,
    /// srrt: re-estimate (one getsockopt(TCP_INFO)) after a write crossing a multiple of
    /// this many bytes written.
    #[arg(long, value_name = "BYTES")]
    pub rrt_step_bytes: Option<u64>,
    /// Admin listener serving Prometheus metrics at /metrics.
    #[arg(long)]
    pub admin: Option<SocketAddr>,
    /// TOML file with the same keys as these flags.
    #[arg(long, value_name = "FILE.toml")]
    #[serde(skip)]
    pub config: Option<PathBuf>,
    /// Worker threads; 0 = one per CPU.
    #[arg(long)]
    pub threads: Option<usize>,
    /// Open connections at most; beyond, see --at-max-connections.
    #[arg(long)]
    pub max_connections: Option<usize>,
    /// At --max-connections: refuse (accept, answer 503 with Retry-After: 1, close) or wait
    /// (stop accepting until a connection closes: new connections wait in the kernel's accept
    /// queue, then the kernel drops their SYNs, as Apache at MaxClients).
    #[arg(long, value_name = "refuse|wait")]
    pub at_max_connections: Option<AtMaxConnections>,
    /// Listen backlog: connections the kernel completes and holds until accepted (capped at
    /// net.core.somaxconn).
    #[arg(long, value_name = "N")]
    pub backlog: Option<u32>,
    /// Longest request line; longer → 414.
    #[arg(long)]
    pub max_request_line_bytes: Option<usize>,
    /// Largest request head; larger → 431.
    #[arg(long)]
    pub max_header_bytes: Option<usize>,
    /// Most header fields per request (at most 128); more → 431.
    #[arg(long)]
    pub max_headers: Option<usize>,
    /// Largest request body (read and discarded); larger → 413.
    #[arg(long)]
    pub max_body_bytes: Option<u64>,
    /// First byte to end of request head; exceeded → 408 and close. A new connection
    /// that sends nothing is closed after it too. Units: `10s`, `500ms`, `1m30s`; plain =
    /// seconds (every timeout takes them).
    #[arg(long, value_name = "DURATION", value_parser = duration_flag_s, conflicts_with = "header_timeout_ms")]
    #[serde(default, deserialize_with = "duration_s")]
    pub header_timeout: Option<f64>,
    /// Keep-alive idle time before closing.
    #[arg(long, value_name = "DURATION", value_parser = duration_flag_s, conflicts_with = "idle_timeout_ms")]
    #[serde(default, deserialize_with = "duration_s")]
    pub idle_timeout: Option<f64>,
    /// Longest time a write may make no progress before closing.
    #[arg(long, value_name = "DURATION", value_parser = duration_flag_s, conflicts_with = "send_timeout_ms")]
    #[serde(default, deserialize_with = "duration_s")]
    pub send_timeout: Option<f64>,
    /// On SIGTERM/SIGINT, time given to in-flight responses.
    #[arg(long, value_name = "DURATION", value_parser = duration_flag_s, conflicts_with = "drain_timeout_ms")]
    #[serde(default, deserialize_with = "duration_s")]
    pub drain_timeout: Option<f64>,
    /// --header-timeout in plain milliseconds (older spelling).
    #[arg(long, value_name = "MS")]
    pub header_timeout_ms: Option<u64>,
    /// --idle-timeout in plain milliseconds (older spelling).
    #[arg(long, value_name = "MS")]
    pub idle_timeout_ms: Option<u64>,
    /// --send-timeout in plain milliseconds (older spelling).
    #[arg(long, value_name = "MS")]
    pub send_timeout_ms: Option<u64>,
    /// --drain-timeout in plain milliseconds (older spelling).
    #[arg(long, value_name = "MS")]
    pub drain_timeout_ms: Option<u64>,
    /// Requests per connection before closing it.
    #[arg(long)]
    pub max_requests_per_connection: Option<u64>,
    /// Largest sendfile call, so band crossings are noticed at least this often.
    #[arg(long)]
    pub sendfile_chunk_bytes: Option<usize>,
    /// SO_SNDBUF of client sockets; unset, the kernel sizes it (autotuning).
    #[arg(long)]
    pub send_buffer_bytes: Option<usize>,
    /// TCP_NOTSENT_LOWAT of client sockets: unsent bytes the kernel may hold, so
    /// bands track what is really left to transmit; 0 = kernel default.
    #[arg(long)]
    pub notsent_lowat_bytes: Option<u32>,
    /// Access log file (`-` for stdout).
    #[arg(long)]
    pub access_log: Option<PathBuf>,
    /// combined (CLF + rt= band=) or json.
    #[arg(long)]
    pub access_log_format: Option<AccessLogFormat>,
    /// Set SO_PRIORITY per band (needs CAP_NET_ADMIN); false disables kernel scheduling.
    /// Unset with --scheduler user or crovella: false (their own scheduler orders the link).
    #[arg(long, num_args = 0..=1, default_missing_value = "true")]
    pub socket_priority: Option<bool>,
    /// Serve through symlinks that lead outside the root.
    #[arg(long, num_args = 0..=1, default_missing_value = "true")]
    pub follow_symlinks_outside_root: Option<bool>,
    /// Requests for dotfiles (`/.git/config`, `/.env`; not `/.well-known/`): ignore answers 404,
    /// deny 403, allow serves them.
    #[arg(long)]
    pub dotfiles: Option<Dotfiles>,
    /// A directory without index.html: off answers 403; html or json lists it (never its
    /// dotfiles, nor what the server would refuse to serve); auto answers JSON to
    /// `Accept: application/json`, HTML otherwise.
    #[arg(long, value_name = "off|html|json|auto")]
    pub listings: Option<Listings>,
    /// Most entries in one listing; a larger directory's listing is cut there and says so
    /// (`truncated`). At most 4 entries per listed one are examined (dotfiles included).
    #[arg(long, value_name = "N")]
    pub listing_max_entries: Option<usize>,
    /// Auto cutoffs: response sizes remembered.
    #[arg(long)]
    pub auto_window: Option<usize>,
    /// Auto cutoffs: recompute every this many responses.
    #[arg(long)]
    pub auto_recompute_every: Option<usize>,
    /// Who orders the link: kernel (SO_PRIORITY bands under `shortfirst uplink setup`'s HTB,
    /// needs CAP_NET_ADMIN), user (the server's own pacer and scheduler: no qdisc, no
    /// capability; needs --link-rate) or crovella (user, but only --write-concurrency
    /// connections may write: Crovella 1999's baseline).
    #[arg(long, value_name = "SCHEDULER")]
    pub scheduler: Option<Scheduling>,
    /// The link's rate on the wire, e.g. `10mbit`, `1gbit`: the user-space pacer releases
    /// bytes at just under it. Required by --scheduler user and crovella. In a file,
    /// `uplink-rate` (the older key) is read as `link-rate`.
    #[arg(long, value_name = "RATE", value_parser = rate_flag_bits_per_s)]
    #[serde(default, alias = "uplink-rate", deserialize_with = "rate_bits_per_s")]
    pub link_rate: Option<u64>,
    /// --scheduler crovella: connections that may write at once.
    #[arg(long, value_name = "N")]
    pub write_concurrency: Option<usize>,
    /// User-space schedulers: link time granted ahead of now; covers the pacer's wake-up
    /// lateness, bounds a new short response's wait behind granted bytes. Unset: one
    /// segment of link time + 1ms, at least two segments (2.5ms at 10mbit, 1.1ms at 100mbit).
    #[arg(long, value_name = "DURATION", value_parser = duration_flag_s)]
    #[serde(default, deserialize_with = "duration_s")]
    pub pacer_lookahead: Option<f64>,
    /// User-space schedulers: the pacer releases wire bytes at this fraction of --link-rate,
    /// 0.5 to 1; below 1 the queue forms in the application rather than in a FIFO under it,
    /// at the price of that much of the link when it is saturated.
    #[arg(long, value_name = "FRACTION")]
    pub pacer_rate_fraction: Option<f64>,
    /// User-space schedulers: wire bytes of credit an idle link banks, granted at once after an
    /// idle spell. Give the burst of the token bucket that shapes the link below (HTB/TBF
    /// `burst`), which lets such a burst out at line rate; 0 on a link with no bucket.
    #[arg(long, value_name = "BYTES")]
    pub pacer_burst_bytes: Option<u32>,
    /// Address of the HTTPS listener (HTTP/2 and HTTP/1.1 over TLS 1.2 or 1.3, ALPN `h2` then
    /// `http/1.1`), beside --listen; needs a certificate (--tls-cert and --tls-key, or `[[tls]]`
    /// tables in the file).
    #[arg(long, value_name = "ADDR")]
    pub tls_listen: Option<SocketAddr>,
    /// PEM certificate chain (leaf first) for --tls-listen; re-read on SIGHUP and when it changes.
    #[arg(long, value_name = "FILE.pem", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// PEM private key (PKCS#8, PKCS#1 or SEC1) of --tls-cert.
    #[arg(long, value_name = "FILE.pem", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Answer every request on --listen with a 308 redirect to the same target on --tls-listen.
    #[arg(long, num_args = 0..=1, default_missing_value = "true")]
    pub redirect_https: Option<bool>,
    /// HTTP/2: offered over TLS (ALPN `h2`, then `http/1.1`) and in cleartext to clients
    /// that start with its preface (h2c, prior knowledge); false: HTTP/1.1 only.
    #[arg(long, num_args = 0..=1, default_missing_value = "true")]
    pub http2: Option<bool>,
    /// HTTP/2: streams one connection may have open at once (SETTINGS_MAX_CONCURRENT_STREAMS);
    /// more are refused (REFUSED_STREAM), the client retries them.
    #[arg(long, value_name = "N")]
    pub http2_max_concurrent_streams: Option<u32>,
    /// Precompressed sidecars served, in the server's order of preference: `file.css.br`,
    /// `.zst`, `.gz` made by the operator next to `file.css` are sent (`Content-Encoding`) to
    /// clients whose Accept-Encoding takes them; `none` turns it off.
    #[arg(long, value_name = "LIST|none")]
    pub precompressed: Option<Precompressed>,
    /// `Cache-Control` by path, `GLOB=VALUE` (e.g. `/assets/*.js=public, max-age=31536000,
    /// immutable`), repeatable: the first rule whose glob matches the file's path (`*` within
    /// a segment, `**` across) gives the header. At most 256 rules; flags replace the file's list.
    #[arg(long, value_name = "GLOB=VALUE")]
    pub cache_control: Option<Vec<String>>,
    /// A request whose Host (`:authority` in HTTP/2) names no `[[host]]`: default serves it
    /// from the top-level root, misdirected answers 421, not-found 404.
    #[arg(long, value_name = "default|misdirected|not-found")]
    pub unknown_host: Option<UnknownHost>,
    /// File only: `[[host]]` tables, one site each (`name`: a host name or a list of them,
    /// `root`; optional `cache-control`, `listings`, `tls-cert` and `tls-key`).
    #[arg(skip)]
    pub host: Option<Vec<HostEntry>>,
    /// File only: `[[tls]]` tables, one certificate each (`cert`, `key`, `names`: the server
    /// names it is chosen for, `*.example.com` for one label; none: the default certificate).
    #[arg(skip)]
    pub tls: Option<Vec<TlsEntry>>,
}
}

/// One `[[tls]]` table of the config file (`--tls-cert/--tls-key` make one without names).
pub use shortfirst_tls::TlsEntry;

impl ConfigFile {
    /// Parses a file's text; `path` names the file in errors.
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
        // A timeout given in either spelling replaces both of the file's spellings.
        macro_rules! over_pair {
            ($(($secs:ident, $millis:ident)),*) => { $(
                if over.$secs.is_some() || over.$millis.is_some() {
                    self.$secs = None;
                    self.$millis = None;
                }
            )* };
        }
        over_pair!(
            (header_timeout, header_timeout_ms),
            (idle_timeout, idle_timeout_ms),
            (send_timeout, send_timeout_ms),
            (drain_timeout, drain_timeout_ms)
        );
        self.overlay_each(over);
        self
    }
}
