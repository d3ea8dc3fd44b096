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
}

impl std::str::FromStr for Policy {
    type Err = String;
    fn from_str(s: &str) -> Result<Policy, String> {
        parse_name(s, "policy", "fair, srpt or srpt2")
    }
}

/// A unit variant from its serde name (the same spelling as in the TOML file).
fn parse_name<T: serde::de::DeserializeOwned>(s: &str, what: &str, expected: &str) -> Result<T, String> {
    use serde::de::value::{Error, StrDeserializer};
    T::deserialize(StrDeserializer::<Error>::new(s)).map_err(|_| format!("unknown {what} {s:?}: expected {expected}"))
}

impl std::fmt::Display for Policy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Policy::Fair => "fair",
            Policy::Srpt => "srpt",
            Policy::Srpt2 => "srpt2",
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

/// The validated configuration the server runs with.
#[derive(Clone, Debug)]
pub struct ServerConfig {
    /// Directory served; canonicalised at bind time.
    pub root: PathBuf,
    pub listen: SocketAddr,
    pub policy: Policy,
    /// Cutoffs for `srpt` (ignored by `fair`; `srpt2` always learns its own).
    pub cutoffs: CutoffsSpec,
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
    pub fn from_file(file: ConfigFile) -> Result<ServerConfig, ConfigError> {
        let root = file.root.ok_or(ConfigError::Missing("root"))?;
        let mut c = ServerConfig::new(root);
        macro_rules! take {
            ($($field:ident),*) => { $( if let Some(v) = file.$field { c.$field = v; } )* };
        }
        take!(
            listen,
            policy,
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
            auto_recompute_every
        );
        c.admin = file.admin;
        c.access_log = file.access_log;
        c.send_buffer_bytes = file.send_buffer_bytes;
        let ms = Duration::from_millis;
        if let Some(v) = file.header_timeout_ms {
            c.header_timeout = ms(v);
        }
        if let Some(v) = file.idle_timeout_ms {
            c.idle_timeout = ms(v);
        }
        if let Some(v) = file.send_timeout_ms {
            c.send_timeout = ms(v);
        }
        if let Some(v) = file.drain_timeout_ms {
            c.drain_timeout = ms(v);
        }
        if let Some(text) = file.cutoffs {
            let spec: CutoffsSpec =
                text.parse().map_err(|e| ConfigError::Invalid { key: "cutoffs", reason: format!("{e}") })?;
            if c.policy != Policy::Srpt {
                return Err(ConfigError::Invalid {
                    key: "cutoffs",
                    reason: format!("only the srpt policy takes cutoffs (policy is {})", c.policy),
                });
            }
            c.cutoffs = spec;
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
        Ok(())
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
    pub policy: Option<Policy>,
    pub cutoffs: Option<String>,
    pub admin: Option<SocketAddr>,
    pub threads: Option<usize>,
    pub max_connections: Option<usize>,
    pub max_request_line_bytes: Option<usize>,
    pub max_header_bytes: Option<usize>,
    pub max_headers: Option<usize>,
    pub max_body_bytes: Option<u64>,
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
}

impl ConfigFile {
    pub fn parse(text: &str, path: &Path) -> Result<ConfigFile, ConfigError> {
        toml::from_str(text).map_err(|e| ConfigError::Parse { path: path.to_path_buf(), message: e.to_string() })
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
        over!(
            root,
            listen,
            policy,
            cutoffs,
            admin,
            threads,
            max_connections,
            max_request_line_bytes,
            max_header_bytes,
            max_headers,
            max_body_bytes,
            header_timeout_ms,
            idle_timeout_ms,
            send_timeout_ms,
            drain_timeout_ms,
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
            auto_recompute_every
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
        let flags = ConfigFile { policy: Some(Policy::Srpt), cutoffs: Some("auto".into()), ..Default::default() };
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
        assert!("SRPT".parse::<Policy>().unwrap_err().contains("fair, srpt or srpt2"));
    }
}
