//! The configuration in force and its reload (SIGHUP).
//!
//! [`Live`] is what a request reads that a reload may change: the validated
//! configuration, its sites (`site`: roots held open, rules, listings) and its access
//! log. It sits behind one atomic pointer (`arc_swap`); a request takes its own `Arc` of
//! it when it starts, so a reload never changes a request under way: a long download
//! goes on from the file (and root) it opened, under the rules it started with, while
//! the requests after the swap — on new connections and on open keep-alive ones alike —
//! see the new configuration. An old `Live` is dropped (its roots closed, its access
//! log flushed) when its last request ends.
//!
//! A reload reads the `--config` file again with the command-line flags over it, as at
//! start, and validates the result as a start would: every setting, every root opened,
//! the access log opened, every certificate loaded. Only when all of it is good is it
//! swapped in; otherwise the error (naming the file and the key, or the path) is logged
//! and counted and the running configuration stays, its access log reopened and its
//! certificates re-read as SIGHUP always did. Settings bound at start
//! (`config::ServerConfig::keep_restart_only`) keep their running value: each one changed
//! is named in a warning.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use crate::access_log::AccessLog;
use crate::config::{ConfigFile, ServerConfig};
use crate::http::parse::Limits;
use crate::server::{ServerError, Shared};
use crate::site::Sites;

/// What a request reads that a reload may change (see the module docs).
pub(crate) struct Live {
    /// The configuration in force: restart-only settings as at start.
    pub config: ServerConfig,
    pub sites: Sites,
    /// Shared with the previous `Live` when its path and format did not change.
    pub access_log: Option<Arc<AccessLog>>,
}

impl Live {
    /// Opens what `config` names: its roots, and its access log — the running one's,
    /// reopened, when the path and format are the same.
    pub(crate) fn open(config: ServerConfig, running: Option<&Live>) -> Result<Live, ServerError> {
        let sites = Sites::open(&config).map_err(|e| ServerError::Root { path: e.path, source: e.source })?;
        let same_log = running.and_then(|r| {
            let log = r.access_log.as_ref()?;
            let same =
                r.config.access_log == config.access_log && r.config.access_log_format == config.access_log_format;
            same.then(|| log.clone())
        });
        let access_log = match (&config.access_log, same_log) {
            (Some(_), Some(log)) => {
                log.reopen();
                Some(log)
            }
            (Some(path), None) => Some(Arc::new(
                AccessLog::open(path, config.access_log_format)
                    .map_err(|source| ServerError::AccessLog { path: path.clone(), source })?,
            )),
            (None, _) => None,
        };
        Ok(Live { config, sites, access_log })
    }

    /// What a connection starting now takes from this configuration and keeps.
    pub(crate) fn conn_settings(&self) -> ConnSettings {
        let c = &self.config;
        ConnSettings {
            header_timeout: c.header_timeout,
            idle_timeout: c.idle_timeout,
            send_timeout: c.send_timeout,
            parse: Limits {
                max_request_line_bytes: c.max_request_line_bytes,
                max_header_bytes: c.max_header_bytes,
                max_headers: c.max_headers,
            },
        }
    }

    /// Logs the sites at start or after a reload.
    pub(crate) fn log_sites(&self) {
        for site in self.sites.hosts() {
            tracing::info!(host = %site.name, root = %site.root.path().display(), "virtual host");
        }
    }
}

/// The timeouts and head limits of one connection, taken from the configuration in force
/// when it starts: a reload changes them for the connections after it, not for those open.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ConnSettings {
    pub header_timeout: Duration,
    pub idle_timeout: Duration,
    pub send_timeout: Duration,
    pub parse: Limits,
}

/// Reloads for `/metrics`.
#[derive(Debug, Default)]
pub(crate) struct ReloadMetrics {
    pub reloads: AtomicU64,
    pub failures: AtomicU64,
    /// The last reload was refused (none yet: false).
    pub last_failed: AtomicBool,
}

impl ReloadMetrics {
    pub(crate) fn render(&self, out: &mut String, hosts: usize) {
        let name = "shortfirst_config_last_reload_successful";
        let help = "1 if the last configuration reload applied (or none was tried), 0 if it was refused.";
        crate::metrics::write_family(out, name, "gauge", help);
        let _ = writeln!(out, "{name} {}", u8::from(!self.last_failed.load(Relaxed)));
        for (name, help, v) in [
            (
                "shortfirst_config_reloads_total",
                "Configurations applied after start (SIGHUP).",
                self.reloads.load(Relaxed),
            ),
            (
                "shortfirst_config_reload_failures_total",
                "Configuration reloads refused (the running configuration stays in force).",
                self.failures.load(Relaxed),
            ),
        ] {
            crate::metrics::write_family(out, name, "counter", help);
            let _ = writeln!(out, "{name} {v}");
        }
        let name = "shortfirst_virtual_hosts";
        crate::metrics::write_family(out, name, "gauge", "[[host]] sites in force (the default site not counted).");
        let _ = writeln!(out, "{name} {hosts}");
    }
}

/// An error and its causes on one line (a TOML error's excerpt of the file included), as
/// a log line must be for journald and log shippers.
fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        let _ = write!(text, ": {cause}");
        source = cause.source();
    }
    let lines: Vec<&str> = text.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
    lines.join(" ")
}

impl Shared {
    /// The configuration in force, for one request.
    pub(crate) fn live(&self) -> Arc<Live> {
        self.live.load_full()
    }

    /// SIGHUP: applies the configuration `flags` describe (see the module docs), logs and
    /// counts the outcome. `Ok`: the restart-only keys it changed (ignored, each warned of).
    pub(crate) fn reload_config(&self, flags: &ConfigFile) -> Result<Vec<&'static str>, ServerError> {
        let result = self.try_reload(flags);
        match &result {
            Ok(ignored) => {
                self.reload_metrics.reloads.fetch_add(1, Relaxed);
                self.reload_metrics.last_failed.store(false, Relaxed);
                for &key in ignored {
                    tracing::warn!(
                        key,
                        "configuration reloaded without this changed setting: it takes a restart \
                         (the running value stays)"
                    );
                }
                let live = self.live();
                live.log_sites();
                tracing::info!(root = %live.sites.default_site().root.path().display(), "configuration reloaded");
            }
            Err(e) => {
                self.reload_metrics.failures.fetch_add(1, Relaxed);
                self.reload_metrics.last_failed.store(true, Relaxed);
                tracing::error!(
                    error = %chain(e),
                    "configuration not reloaded: the running configuration stays in force"
                );
                if let Some(log) = &self.live().access_log {
                    log.reopen();
                }
                self.reload_certs("SIGHUP");
            }
        }
        result
    }

    /// Reads, validates and opens the new configuration; swaps it in only if all is good.
    /// Returns the restart-only keys it changed (ignored).
    fn try_reload(&self, flags: &ConfigFile) -> Result<Vec<&'static str>, ServerError> {
        let running = self.live();
        let mut config = ServerConfig::from_flags(flags.clone())?;
        let ignored = config.keep_restart_only(&running.config);
        config.validate()?;
        crate::server::ensure_fd_limit(&config);
        // Certificates first: they are only read, so a bad one refuses the reload before
        // anything is opened (a new access log file would be left behind otherwise).
        let certs = match (&self.tls, &config.tls) {
            (Some(tls), Some(settings)) => Some(tls.store.prepare(settings.certs.clone())?),
            _ => None,
        };
        let live = Live::open(config, Some(&running))?;
        if let (Some(tls), Some(prepared)) = (&self.tls, certs) {
            tls.store.install(prepared);
            self.tls_metrics.reloads.fetch_add(1, Relaxed);
        }
        self.live.store(Arc::new(live));
        Ok(ignored)
    }
}
