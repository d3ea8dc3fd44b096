//! Server configuration: every setting of `shortfirst serve`, its default, and how the
//! flags and the TOML file become one validated [`ServerConfig`].
//!
//! [`ConfigFile`] is the partial form (every key optional), one struct for both the file and
//! the flags (it derives clap's `Args` and serde's `Deserialize`); [`ServerConfig::from_flags`]
//! reads the `--config` file the flags name, lets the flags win over it and validates the
//! result, so a library caller gets the same checks as the command line. A new setting is
//! written in the partial struct, in [`ServerConfig`] (its field and its default in
//! [`ServerConfig::new`]), in `take_plain!`'s list if it needs no conversion, in
//! `serve.example.toml` and in docs/serve.md — and in `config/reload.rs`'s restart-only list if a
//! running server cannot change it (SIGHUP applies every other setting to new requests).
mod file;
mod host;
mod reload;
#[cfg(test)]
mod tests;
mod values;
mod vocabulary;

pub use file::{duration_flag_s, rate_flag_bits_per_s, ConfigFile, TlsEntry};
pub use host::{HostEntry, HostSettings, Names, MAX_HOSTS, MAX_NAMES_PER_HOST};
pub use values::{
    AccessLogFormat, AtMaxConnections, CutoffsSpec, Dotfiles, Listings, Policy, PolicySpec, RrtCutoffsSpec, Scheduling,
    UnknownHost, MAX_HEADERS_LIMIT,
};
pub use vocabulary::{vocabulary, Vocabulary};

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use shortfirst_core::bands::Cutoffs;

use crate::cache_control::CacheControl;
use crate::encoding::Precompressed;
use shortfirst_core::srrt::{Estimator, RrtCutoffs};

/// A positive timeout in seconds → `Duration`; `key` names the setting in the error.
fn timeout(key: &'static str, seconds: f64) -> Result<Duration, ConfigError> {
    match Duration::try_from_secs_f64(seconds) {
        Ok(d) if !d.is_zero() => Ok(d),
        _ => Err(ConfigError::Invalid { key, reason: format!("{seconds} s: must be above 0 and finite") }),
    }
}

/// Highest `link-rate` accepted (the pacer's arithmetic is exact well beyond).
pub const MAX_LINK_RATE_BITS_PER_S: u64 = 400_000_000_000;

/// Highest `backlog` accepted: `listen(2)` takes an `int`.
pub const MAX_BACKLOG: u32 = i32::MAX as u32;

/// The settings whose partial form and validated form have the same name and type: taken
/// from the partial struct as they are, their defaults shown in `--help` as they are.
/// `$apply` is a macro applied to the list.
macro_rules! take_plain {
    ($apply:ident) => {
        $apply!(
            listen,
            threads,
            max_connections,
            at_max_connections,
            backlog,
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
            listings,
            listing_max_entries,
            auto_window,
            auto_recompute_every,
            scheduler,
            write_concurrency,
            rrt_estimator,
            rrt_step_bytes,
            pacer_rate_fraction,
            pacer_burst_bytes,
            precompressed,
            http2,
            http2_max_concurrent_streams,
            unknown_host
        )
    };
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
    /// `--policy srpt` as spelt: exact SRPT under a user-space scheduler.
    pub srpt_exact: bool,
    /// Kernel bands, or the server's own uplink scheduler.
    pub scheduler: Scheduling,
    /// The link's rate (bits/s, on the wire): required by the user-space
    /// schedulers, whose pacer runs at just under it.
    pub link_rate_bits_per_s: Option<u64>,
    /// `crovella` only: connections that may write at once.
    pub write_concurrency: usize,
    /// User-space schedulers: link time granted ahead of now. It must cover the
    /// pacer thread's wake-up lateness, or the link idles; it is also the most a
    /// new short response can wait behind bytes already granted. `None`: the
    /// release quantum (0.6 ms of link time, at least one segment) plus 1 ms of
    /// lateness, at least two segments (`PacerConfig::with_defaults`).
    pub pacer_lookahead: Option<Duration>,
    /// User-space schedulers: the pacer's rate as a fraction of the link's
    /// (0.5..=1). Below 1 the queue forms in the application, not below it; on a
    /// saturated link the server then carries this fraction of the link.
    pub pacer_rate_fraction: f64,
    /// User-space schedulers: wire bytes of credit an idle link banks (the
    /// burst of the token bucket shaping the link below; 0: none).
    pub pacer_burst_bytes: u32,
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
    /// Open client connections at most; what happens beyond is `at_max_connections`.
    pub max_connections: usize,
    /// At `max_connections`: answer new connections `503` (`refuse`), or stop
    /// accepting until one closes (`wait`).
    pub at_max_connections: AtMaxConnections,
    /// The listening socket's backlog: connections the kernel completes and holds
    /// until they are accepted (it caps this at `net.core.somaxconn`).
    pub backlog: u32,
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
    /// A directory without `index.html`: 403 (`off`), or its listing (`crate::listing`).
    pub listings: Listings,
    /// Most entries one listing holds (at most [`crate::listing::MAX_ENTRIES_LIMIT`]);
    /// beyond, the listing is cut and marked truncated.
    pub listing_max_entries: usize,
    /// Auto cutoffs (`srpt2`, `--cutoffs auto`): sizes remembered.
    pub auto_window: usize,
    /// Auto cutoffs: recompute after this many responses.
    pub auto_recompute_every: usize,
    /// The HTTPS listener and its certificates; `None`: plaintext only.
    pub tls: Option<TlsSettings>,
    /// Answer every request on the plaintext listener with a `308` to the HTTPS one.
    pub redirect_https: bool,
    /// Sidecar codings offered (`encoding`), in the server's order; none: off.
    pub precompressed: Precompressed,
    /// `Cache-Control` rules by path glob (`cache_control`); none by default.
    pub cache_control: CacheControl,
    /// HTTP/2 over TLS (ALPN) and h2c with prior knowledge (`crate::http2`).
    pub http2: bool,
    /// HTTP/2: streams open at once on one connection (SETTINGS_MAX_CONCURRENT_STREAMS, at
    /// most [`MAX_HTTP2_STREAMS`]); beyond, new streams are refused with REFUSED_STREAM.
    pub http2_max_concurrent_streams: u32,
    /// The `[[host]]` sites, in file order (at most [`MAX_HOSTS`]); the top-level `root`
    /// and settings are the default site's (`crate::site`).
    pub hosts: Vec<HostSettings>,
    /// A request for a host name no `[[host]]` has: the default site, 421 or 404.
    pub unknown_host: UnknownHost,
}

/// Highest `http2-max-concurrent-streams`: each open stream may hold a file and a chunk.
pub const MAX_HTTP2_STREAMS: u32 = 1000;

/// Most certificates (`[[tls]]` tables) one server loads: each is held in memory and
/// scanned per handshake.
pub const MAX_TLS_CERTS: usize = 64;

/// HTTPS: where it listens and the certificates it chooses from by server name (SNI).
#[derive(Clone, Debug)]
pub struct TlsSettings {
    pub listen: SocketAddr,
    /// At least one, at most [`MAX_TLS_CERTS`]; `--tls-cert/--tls-key` first.
    pub certs: Vec<TlsEntry>,
}

impl ServerConfig {
    /// The defaults for serving `root`.
    pub fn new(root: impl Into<PathBuf>) -> ServerConfig {
        ServerConfig {
            root: root.into(),
            listen: "127.0.0.1:8080".parse().expect("valid literal"),
            policy: Policy::Srpt,
            cutoffs: CutoffsSpec::List(Cutoffs::server_default()),
            srpt_exact: false,
            scheduler: Scheduling::Kernel,
            link_rate_bits_per_s: None,
            write_concurrency: 35,
            pacer_lookahead: None,
            pacer_rate_fraction: shortfirst_core::uplink_sched::PacerConfig::default().rate_fraction,
            pacer_burst_bytes: 0,
            rrt_cutoffs: RrtCutoffsSpec::List(RrtCutoffs::default_list()),
            rrt_estimator: Estimator::Path,
            rrt_step_bytes: 64 * 1024,
            admin: None,
            threads: 0,
            max_connections: 4096,
            at_max_connections: AtMaxConnections::Refuse,
            backlog: 4096,
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
            listings: Listings::Off,
            listing_max_entries: 10_000,
            auto_window: 10_000,
            auto_recompute_every: 1_000,
            tls: None,
            redirect_https: false,
            precompressed: Precompressed::ALL,
            cache_control: CacheControl::default(),
            http2: true,
            http2_max_concurrent_streams: 100,
            hosts: Vec::new(),
            unknown_host: UnknownHost::Default,
        }
    }

    /// The configuration the flags describe: the `--config` file they name (if any), the
    /// flags over it, validated. An invalid setting that came from the file names the file.
    pub fn from_flags(flags: ConfigFile) -> Result<ServerConfig, ConfigError> {
        let Some(path) = flags.config.clone() else { return ServerConfig::from_file(flags) };
        let file = ConfigFile::load(&path)?;
        let from_file: Vec<String> = file.keys_set().into_iter().filter(|k| !flags.keys_set().contains(k)).collect();
        ServerConfig::from_file(file.overlay(flags)).map_err(|e| match e {
            ConfigError::Invalid { key, .. } if from_file.iter().any(|k| k.as_str() == key) => {
                ConfigError::InFile { path, error: Box::new(e) }
            }
            ConfigError::Missing(_) => ConfigError::InFile { path, error: Box::new(e) },
            e => e,
        })
    }

    /// Builds and validates a configuration from its partial form; `root` is required.
    pub fn from_file(mut file: ConfigFile) -> Result<ServerConfig, ConfigError> {
        file.check_pairs()?;
        let root = file.root.take().ok_or(ConfigError::Missing("root"))?;
        let mut c = ServerConfig::new(root);
        c.access_log = file.access_log.take();
        c.take_settings(&file);
        c.take_scheduler(&file)?;
        c.take_timeouts(&file)?;
        c.take_pacer(&file)?;
        c.take_policy(file.policy.take(), file.cutoffs.take(), file.rrt_cutoffs.take())?;
        let host_certs = match file.host.take() {
            Some(entries) => {
                let (hosts, certs) = host::validate_hosts(&entries)?;
                c.hosts = hosts;
                certs
            }
            None => Vec::new(),
        };
        c.take_tls(&mut file, host_certs)?;
        if let Some(rules) = file.cache_control.take() {
            c.cache_control =
                CacheControl::new(&rules).map_err(|reason| ConfigError::Invalid { key: "cache-control", reason })?;
        }
        c.validate()?;
        Ok(c)
    }

    /// The settings taken as they are (same name and type in the partial struct and here).
    fn take_settings(&mut self, file: &ConfigFile) {
        macro_rules! take {
            ($($field:ident),*) => { $( if let Some(v) = file.$field { self.$field = v; } )* };
        }
        take_plain!(take);
        self.admin = file.admin;
        self.send_buffer_bytes = file.send_buffer_bytes;
    }

    /// Each setting's default as `--help` shows it, by key (`max-connections` → `4096`).
    /// Settings whose default is not a value (derived, or none) say so in their help.
    pub fn defaults_shown() -> Vec<(String, String)> {
        let d = ServerConfig::new("");
        let mut shown = Vec::new();
        macro_rules! show {
            ($($field:ident),*) => { $( shown.push((stringify!($field).replace('_', "-"), d.$field.to_string())); )* };
        }
        take_plain!(show);
        let duration = |t: Duration| format!("{t:?}");
        shown.extend([
            ("policy".to_string(), PolicySpec { policy: d.policy, cutoffs: None, exact: d.srpt_exact }.to_string()),
            (
                "cutoffs".into(),
                match &d.cutoffs {
                    CutoffsSpec::List(c) => c.to_string(),
                    CutoffsSpec::Auto => "auto".into(),
                },
            ),
            (
                "rrt-cutoffs".into(),
                match &d.rrt_cutoffs {
                    RrtCutoffsSpec::List(c) => c.to_string(),
                    RrtCutoffsSpec::Auto => "auto".into(),
                },
            ),
            ("header-timeout".into(), duration(d.header_timeout)),
            ("idle-timeout".into(), duration(d.idle_timeout)),
            ("send-timeout".into(), duration(d.send_timeout)),
            ("drain-timeout".into(), duration(d.drain_timeout)),
        ]);
        shown
    }

    /// What the scheduler (already taken) implies: the link's rate, whether
    /// `write-concurrency` may be given, and the default of `socket-priority`.
    fn take_scheduler(&mut self, file: &ConfigFile) -> Result<(), ConfigError> {
        self.link_rate_bits_per_s = file.link_rate;
        if file.write_concurrency.is_some() && self.scheduler != Scheduling::Crovella {
            return Err(ConfigError::Invalid {
                key: "write-concurrency",
                reason: format!(
                    "only the crovella scheduler limits write concurrency (scheduler is {})",
                    self.scheduler
                ),
            });
        }
        // A user-space scheduler needs no kernel bands: SO_PRIORITY only if asked for.
        if self.scheduler != Scheduling::Kernel && file.socket_priority.is_none() {
            self.socket_priority = false;
        }
        Ok(())
    }

    /// The timeouts, each given in seconds or (the older `-ms` keys) in milliseconds.
    fn take_timeouts(&mut self, file: &ConfigFile) -> Result<(), ConfigError> {
        for (key, secs, millis, field) in [
            ("header-timeout", file.header_timeout, file.header_timeout_ms, &mut self.header_timeout),
            ("idle-timeout", file.idle_timeout, file.idle_timeout_ms, &mut self.idle_timeout),
            ("send-timeout", file.send_timeout, file.send_timeout_ms, &mut self.send_timeout),
            ("drain-timeout", file.drain_timeout, file.drain_timeout_ms, &mut self.drain_timeout),
        ] {
            if let Some(s) = secs {
                *field = timeout(key, s)?;
            } else if let Some(v) = millis {
                *field = Duration::from_millis(v);
            }
        }
        Ok(())
    }

    /// HTTPS: `--tls-cert/--tls-key` (one certificate without names, the default), the
    /// file's `[[tls]]` tables, then the `[[host]]` tables' certificates, for `--tls-listen`.
    fn take_tls(&mut self, file: &mut ConfigFile, host_certs: Vec<TlsEntry>) -> Result<(), ConfigError> {
        let mut certs = file.tls.take().unwrap_or_default();
        certs.extend(host_certs);
        match (file.tls_cert.take(), file.tls_key.take()) {
            (Some(cert), Some(key)) => certs.insert(0, TlsEntry { cert, key, names: Vec::new() }),
            (None, None) => {}
            (Some(_), None) => return Err(ConfigError::Missing("tls-key")),
            (None, Some(_)) => return Err(ConfigError::Missing("tls-cert")),
        }
        self.redirect_https = file.redirect_https.unwrap_or(false);
        self.tls = match file.tls_listen {
            Some(listen) => Some(TlsSettings { listen, certs }),
            None if certs.is_empty() => None,
            None => {
                return Err(ConfigError::Invalid {
                    key: "tls-listen",
                    reason: "certificates are given but no HTTPS listener (--tls-listen ADDR)".into(),
                })
            }
        };
        Ok(())
    }

    /// The user-space schedulers' pacer look-ahead (a duration; its default is derived).
    fn take_pacer(&mut self, file: &ConfigFile) -> Result<(), ConfigError> {
        if let Some(s) = file.pacer_lookahead {
            self.pacer_lookahead = Some(timeout("pacer-lookahead", s)?);
        }
        Ok(())
    }

    /// The policy and its cutoffs: size cutoffs in the policy (`srpt-classes:LIST`)
    /// or in `cutoffs`, not both, and only for srpt; response-time cutoffs only for srrt.
    fn take_policy(
        &mut self,
        policy: Option<PolicySpec>,
        cutoffs: Option<String>,
        rrt_cutoffs: Option<String>,
    ) -> Result<(), ConfigError> {
        let mut policy_cutoffs = None;
        if let Some(spec) = policy {
            self.policy = spec.policy;
            self.srpt_exact = spec.exact;
            policy_cutoffs = spec.cutoffs;
        }
        if let Some(listed) = policy_cutoffs {
            if cutoffs.is_some() {
                return Err(ConfigError::Invalid {
                    key: "cutoffs",
                    reason: format!(
                        "policy srpt-classes:{listed} already names its cutoffs; give them either in the policy or in `cutoffs` (--cutoffs) with policy srpt-classes, not both"
                    ),
                });
            }
            self.cutoffs = CutoffsSpec::List(listed);
        }
        if let Some(text) = cutoffs {
            let spec: CutoffsSpec =
                text.parse().map_err(|e| ConfigError::Invalid { key: "cutoffs", reason: format!("{e}") })?;
            if self.policy != Policy::Srpt {
                return Err(ConfigError::Invalid {
                    key: "cutoffs",
                    reason: format!("only srpt-classes (alias srpt) takes cutoffs (policy is {})", self.policy),
                });
            }
            self.cutoffs = spec;
        }
        if let Some(text) = rrt_cutoffs {
            self.rrt_cutoffs =
                text.parse().map_err(|e| ConfigError::Invalid { key: "rrt-cutoffs", reason: format!("{e}") })?;
            if self.policy != Policy::Srrt {
                return Err(ConfigError::Invalid {
                    key: "rrt-cutoffs",
                    reason: format!("only srrt takes response-time cutoffs (policy is {})", self.policy),
                });
            }
        }
        Ok(())
    }

    /// The worker threads the runtime runs: `threads`, or one per CPU for 0.
    pub fn worker_threads(&self) -> usize {
        match self.threads {
            0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
            n => n,
        }
    }

    /// Checks the limits are usable; called by [`ServerConfig::from_file`] and at bind.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let invalid = |key: &'static str, reason: String| Err(ConfigError::Invalid { key, reason });
        if self.max_connections == 0 {
            return invalid("max-connections", "must be at least 1".into());
        }
        if !(1..=MAX_BACKLOG).contains(&self.backlog) {
            return invalid(
                "backlog",
                format!("must be in 1..={MAX_BACKLOG} (the kernel caps it at net.core.somaxconn)"),
            );
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
        if !(1..=crate::listing::MAX_ENTRIES_LIMIT).contains(&self.listing_max_entries) {
            return invalid("listing-max-entries", format!("must be in 1..={}", crate::listing::MAX_ENTRIES_LIMIT));
        }
        if self.auto_recompute_every == 0 {
            return invalid("auto-recompute-every", "must be at least 1".into());
        }
        if !(1024..=1 << 30).contains(&self.rrt_step_bytes) {
            return invalid("rrt-step-bytes", "must be in 1024..=1073741824 (1 KiB to 1 GiB)".into());
        }
        if !(1..=MAX_HTTP2_STREAMS).contains(&self.http2_max_concurrent_streams) {
            return invalid("http2-max-concurrent-streams", format!("must be in 1..={MAX_HTTP2_STREAMS}"));
        }
        if self.unknown_host != UnknownHost::Default && self.hosts.is_empty() {
            return invalid(
                "unknown-host",
                format!("{}: with no [[host]] table every request would be refused", self.unknown_host),
            );
        }
        self.validate_tls()?;
        self.validate_scheduler()
    }

    fn validate_tls(&self) -> Result<(), ConfigError> {
        let invalid = |key: &'static str, reason: String| Err(ConfigError::Invalid { key, reason });
        let Some(tls) = &self.tls else {
            if self.redirect_https {
                return invalid("redirect-https", "needs an HTTPS listener (--tls-listen ADDR)".into());
            }
            return Ok(());
        };
        if tls.certs.is_empty() {
            return invalid("tls-listen", "needs a certificate: --tls-cert and --tls-key, or [[tls]] tables".into());
        }
        if tls.certs.len() > MAX_TLS_CERTS {
            return invalid(
                "tls",
                format!("{} certificates ([[tls]] and [[host]] ones): at most {MAX_TLS_CERTS}", tls.certs.len()),
            );
        }
        if tls.listen == self.listen && tls.listen.port() != 0 {
            return invalid("tls-listen", format!("{} is also --listen: give each its own address", tls.listen));
        }
        for entry in &tls.certs {
            for name in &entry.names {
                crate::tls::names::NamePattern::parse(name).map_err(|e| ConfigError::Invalid {
                    key: "tls",
                    reason: format!("certificate {}: name {name:?}: {e}", entry.cert.display()),
                })?;
            }
        }
        Ok(())
    }

    fn validate_scheduler(&self) -> Result<(), ConfigError> {
        let invalid = |key: &'static str, reason: String| Err(ConfigError::Invalid { key, reason });
        match (self.scheduler, self.link_rate_bits_per_s) {
            (Scheduling::Kernel, Some(_)) => {
                return invalid(
                    "link-rate",
                    "only the user-space schedulers (--scheduler user or crovella) pace to a rate; kernel mode \
                     takes its rate from `shortfirst uplink setup --link-rate`"
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
                    "link-rate",
                    format!(
                        "--scheduler {s} needs the link's rate (e.g. --link-rate 10mbit): its pacer runs just under it"
                    ),
                )
            }
            (_, Some(r)) if r == 0 || r > MAX_LINK_RATE_BITS_PER_S => {
                return invalid("link-rate", format!("{r} bit/s: must be in 1..={MAX_LINK_RATE_BITS_PER_S}"))
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
        if !(0.5..=1.0).contains(&self.pacer_rate_fraction) {
            return invalid("pacer-rate-fraction", format!("{}: must be in 0.5..=1", self.pacer_rate_fraction));
        }
        if self.pacer_burst_bytes > shortfirst_core::uplink_sched::MAX_BURST_BYTES {
            let max = shortfirst_core::uplink_sched::MAX_BURST_BYTES;
            return invalid("pacer-burst-bytes", format!("{}: must be at most {max}", self.pacer_burst_bytes));
        }
        if let Some(d) = self.pacer_lookahead.filter(|&d| d > Duration::from_secs(1)) {
            return invalid("pacer-lookahead", format!("{d:?}: must be at most 1 s"));
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
    #[error("missing required setting `{0}` (flag --{0}, or `{0}` in the --config file)")]
    Missing(&'static str),
    /// What is wrong came from this config file (`error` is displayed, not chained).
    #[error("config file {}: {error}", path.display())]
    InFile { path: PathBuf, error: Box<ConfigError> },
    #[error("setting `{key}`: {reason}")]
    Invalid { key: &'static str, reason: String },
    #[error("config file {path}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("config file {path}: {message}")]
    Parse { path: PathBuf, message: String },
}
