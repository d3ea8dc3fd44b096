//! The partial configuration: the TOML file form and the command-line flags, both every key
//! optional; [`ConfigFile::overlay`] lets the flags win over the file.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use shortfirst_core::srrt::Estimator;

use super::{AccessLogFormat, AtMaxConnections, ConfigError, Dotfiles, PolicySpec, Scheduling};

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
    pub at_max_connections: Option<AtMaxConnections>,
    pub backlog: Option<u32>,
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
    pub pacer_rate_fraction: Option<f64>,
    pub pacer_burst_bytes: Option<u32>,
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
            at_max_connections,
            backlog,
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
            pacer_lookahead,
            pacer_rate_fraction,
            pacer_burst_bytes
        );
        self
    }
}
