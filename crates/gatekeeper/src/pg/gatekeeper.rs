//! The PostgreSQL gatekeeper as `shortfirst gatekeeper --upstream postgres://HOST:PORT`
//! runs it: the listener, the [`ControllerGate`] of the configuration, the admin port
//! (`/metrics`, `/healthz`), reload and graceful shutdown, the same as the HTTP proxy's;
//! with TLS, the certificate re-read on reload and when its files change ([`super::tls`]).

use std::net::SocketAddr;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::time::Instant;

use super::{serve, ControllerGate, Limits, PgConfig, PgTls, ServeStats};
use crate::config::{Protocol, ProxyConfig};
use crate::proxy::admin::{admin_loop, Render};
use crate::GatekeeperError;

impl PgConfig {
    /// The PostgreSQL side of a gatekeeper configuration: its upstream, its client and
    /// message limits, its timeouts (`header-timeout` bounds the startup phase,
    /// `upstream-timeout` the upstream connection), where types come from, and TLS (the
    /// certificate and key read now: an unreadable or mismatched pair is an error).
    pub fn from_proxy(cfg: &ProxyConfig) -> Result<Self, GatekeeperError> {
        let tls = match &cfg.tls_cert_key {
            Some((cert, key)) => Some(PgTls::from_pem_files(cert, key)?),
            None => None,
        };
        Ok(PgConfig {
            upstream_addr: cfg.upstream.authority.to_string(),
            limits: Limits {
                max_clients: cfg.max_connections,
                max_message_bytes: cfg.max_message_bytes,
                startup_timeout: cfg.header_timeout,
                idle_in_transaction: cfg.idle_in_transaction_timeout,
                connect_timeout: cfg.upstream_timeout,
                ..Limits::default()
            },
            types: cfg.pg_types.clone(),
            tls,
        })
    }
}

/// A bound PostgreSQL gatekeeper, ready to [`PgGatekeeper::run`].
pub struct PgGatekeeper {
    listener: TcpListener,
    admin: Option<TcpListener>,
    gate: Arc<ControllerGate>,
    stats: Arc<ServeStats>,
    config: PgConfig,
    shutdown_timeout: Duration,
}

impl PgGatekeeper {
    /// Validate the configuration (a `postgres://` upstream) and bind the sockets. Call
    /// inside a tokio runtime.
    pub async fn bind(cfg: &ProxyConfig) -> Result<Self, GatekeeperError> {
        if cfg.upstream.protocol != Protocol::Postgres {
            return Err(GatekeeperError::Config("the PostgreSQL gatekeeper needs a postgres:// upstream".into()));
        }
        let config = PgConfig::from_proxy(cfg)?;
        let gate = Arc::new(ControllerGate::new(cfg)?);
        let (listener, admin) = crate::proxy::bind_listeners(cfg).await?;
        Ok(PgGatekeeper {
            listener,
            admin,
            gate,
            stats: Arc::default(),
            config,
            shutdown_timeout: cfg.shutdown_timeout,
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.listener.local_addr().expect("bound listener has an address")
    }

    pub fn admin_addr(&self) -> Option<SocketAddr> {
        self.admin.as_ref().map(|l| l.local_addr().expect("bound listener has an address"))
    }

    /// The gate (snapshots, metrics, reload) while it runs.
    pub fn gate(&self) -> Arc<ControllerGate> {
        self.gate.clone()
    }

    /// What a configuration reload (SIGHUP) applies while it runs.
    pub fn reloader(&self) -> PgReload {
        PgReload { gate: self.gate.clone(), tls: self.config.tls.clone() }
    }

    /// The connection counters while it runs.
    pub fn stats(&self) -> Arc<ServeStats> {
        self.stats.clone()
    }

    /// Serve until `shutdown` resolves, then shut down gracefully: stop accepting, refuse
    /// every queued transaction (53300, shutting down; later ones too), give the admitted
    /// ones `shutdown-timeout` to reach idle, return.
    pub async fn run(self, shutdown: impl std::future::Future<Output = ()>) -> Result<(), GatekeeperError> {
        let (gate, stats, tls) = (self.gate.clone(), self.stats.clone(), self.config.tls.clone());
        let render: Render = Arc::new(move || {
            let mut snap = gate.snapshot();
            snap.client_connections = stats.active.load(Relaxed) as usize;
            gate.render(&snap) + &stats.render() + &tls.as_ref().map(PgTls::render).unwrap_or_default()
        });
        let admin = self.admin.map(|l| tokio::spawn(admin_loop(l, render)));
        let watch = self.config.tls.clone().map(|t| tokio::spawn(t.watch()));
        serve(self.listener, self.config, self.gate.clone(), self.stats.clone(), shutdown).await;
        let bound = self.shutdown_timeout;
        tracing::info!("shutting down: queued transactions are refused, admitted ones have {bound:?} to finish");
        self.gate.shut_down();
        let deadline = Instant::now() + bound;
        while self.gate.snapshot().in_flight > 0 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let left = self.gate.snapshot().in_flight;
        if left > 0 {
            tracing::warn!("shutdown: {left} admitted transactions unfinished after {bound:?} (--shutdown-timeout)");
        }
        for task in [admin, watch].into_iter().flatten() {
            task.abort();
        }
        Ok(())
    }
}

/// What a configuration reload applies to a running PostgreSQL gatekeeper: the gate's
/// rules, capacity and policy ([`ControllerGate::reload`]) and, with TLS, the certificate
/// (read and checked first: a pair that does not load refuses the whole reload).
#[derive(Clone)]
pub struct PgReload {
    gate: Arc<ControllerGate>,
    tls: Option<PgTls>,
}

impl PgReload {
    pub fn reload(&self, cfg: &ProxyConfig) -> Result<(), GatekeeperError> {
        let restart =
            |what| GatekeeperError::Config(format!("{what} (--tls-cert/--tls-key) needs a restart, not a reload"));
        let prepared = match (&self.tls, &cfg.tls_cert_key) {
            (Some(tls), Some((cert, key))) => Some(tls.prepare(cert, key)?),
            (None, None) => None,
            (None, Some(_)) => return Err(restart("turning TLS on")),
            (Some(_), None) => return Err(restart("turning TLS off")),
        };
        self.gate.reload(cfg)?;
        if let (Some(tls), Some(prepared)) = (&self.tls, prepared) {
            tls.install(prepared);
        }
        Ok(())
    }
}
