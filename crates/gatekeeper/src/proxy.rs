//! The proxy: HTTP/1.1 in ([`front`], our own), admission through the core [`Controller`],
//! HTTP/1.1 out over kept-alive upstream connections ([`UpstreamPool`]), responses streamed
//! back.
//!
//! Lifecycle of a request:
//! 1. classify → type; the type's current estimate is its charge;
//! 2. `Controller::arrive`; if not admitted at once, wait on a oneshot for a verdict. If
//!    the client goes away meanwhile (the connection's watch drops the handler future, or the request body,
//!    read ahead while waiting up to [`PREFETCH_LIMIT_BYTES`], fails), the guard reports
//!    it (`Controller::client_gone`), which takes the request out of the queue;
//! 3. admitted: a [`Permit`] owns the ticket. Dropping the permit releases the charge, so it
//!    is released exactly once on every path (success, 502, 504, client gone mid-body, panic
//!    unwinding). A grant that can no longer be delivered drops its permit, releasing it;
//! 4. the response body is wrapped: reaching its end is the "last byte" that ends the
//!    service-time measurement, which feeds the estimator. Failures, timeouts and
//!    abandoned bodies release the charge without a sample, so they never pollute it.
//!
//! The decisions state, permits, waiting and the timer are [`crate::admit`]'s, shared with
//! the PostgreSQL gate.
//!
//! Modules: `front` (the client connection: request heads in, replies out), `route` (one
//! request's way: classify, admit, forward), `detach` (the exchange
//! polled in place, carried on alone if the client leaves), `stream` (request and
//! response bodies), `headers`
//! (hop-by-hop and forwarding headers), `reply` (the gatekeeper's own answers), `admin`
//! (`/metrics`, `/healthz`). This file binds the sockets and accepts.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use bytes::Bytes;
use http_body_util::combinators::UnsyncBoxBody;
use shortfirst_core::admission::{AdmissionPolicy, ChargeAt, ControllerConfig, GateConfig};
use tokio::net::TcpListener;

use crate::admit::{timer_task, Admission};
use crate::busypoll::BusyPoll;
use crate::classify::Rule;
use crate::config::{CapacitySetting, ProxyConfig};
use crate::metrics::Snapshot;
use crate::upstream::UpstreamPool;
use crate::GatekeeperError;

pub(crate) mod admin;
mod detach;
pub(crate) mod front;
mod headers;
mod reply;
mod route;
mod stream;

pub use front::body::ClientBodyError;
/// The client's request head as parsed (for tests and fuzzing; the proxy's own use is
/// internal).
pub use front::head as request_head;
pub use headers::encode_upstream_head;
pub use stream::{RequestBody, PREFETCH_LIMIT_BYTES};

/// What a response body can fail with: the upstream's error, or the proxy cutting a body
/// whose upstream went silent (`--upstream-body-timeout`).
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The admin listener's response bodies.
pub type ProxyBody = UnsyncBoxBody<Bytes, BoxError>;

/// What every request of the HTTP proxy shares: the admission state and the upstream side.
pub(crate) struct Shared {
    pub(crate) adm: Arc<Admission>,
    pub(crate) cfg: ProxyConfig,
    pub(crate) pool: UpstreamPool,
    /// `--busy-poll-us`: polls while requests wait for the upstream.
    pub(crate) busy: Option<Arc<BusyPoll>>,
}

impl Shared {
    fn snapshot(&self) -> Snapshot {
        // Idle connections the upstream closed are dropped first, then the open ones counted.
        let upstream_idle = self.pool.idle_connections();
        Snapshot {
            upstream_connections: self.pool.open_connections(),
            upstream_idle,
            upstream_retries: self.pool.retries(),
            ..self.adm.snapshot()
        }
    }
}

/// Read-only view and control of a running gatekeeper (tests, calibration, admin).
#[derive(Clone)]
pub struct Handle {
    shared: Arc<Shared>,
}

impl Handle {
    pub fn snapshot(&self) -> Snapshot {
        self.shared.snapshot()
    }
    pub fn metrics_text(&self) -> String {
        self.shared.adm.metrics.render(&self.shared.snapshot())
    }
    /// Set a fixed capacity now (calibration). Ignored in auto mode's next tick only if
    /// auto is off; with auto on, the controller continues from this value.
    /// Apply a reloaded configuration's classifier rules, capacity and policy without
    /// dropping connections or requests: known types keep their estimates, queued requests
    /// keep their places (re-ordered by the new policy), admitted ones run on.
    pub fn reload(
        &self,
        rules: Vec<Rule>,
        capacity: &CapacitySetting,
        policy: AdmissionPolicy,
    ) -> Result<(), GatekeeperError> {
        self.shared.adm.reload(rules, capacity, policy)
    }

    /// Set a fixed capacity now (calibration); auto capacity, if on, stops.
    pub fn set_capacity_us(&self, capacity_us: u64) -> Result<(), GatekeeperError> {
        let mut result = Ok(());
        self.shared.adm.event(|core, now| {
            core.ctl.set_capacity(now, capacity_us).unwrap_or_else(|e| {
                result = Err(e.into());
                Vec::new()
            })
        });
        result
    }
}

/// The controller's configuration from the proxy's.
pub fn controller_config(cfg: &ProxyConfig) -> ControllerConfig {
    let mut gate = GateConfig::new(cfg.capacity.initial_us(), cfg.policy);
    gate.max_queue_len = cfg.max_queue_len;
    gate.max_queue_wait_us = cfg.max_queue_wait.map(|d| d.as_micros() as u64);
    gate.max_wait_us = cfg.max_wait.map(|d| d.as_micros() as u64);
    gate.max_in_flight = cfg.max_in_flight;
    gate.max_charge_share = cfg.max_charge_share;
    gate.overdue_share = cfg.overdue_share;
    ControllerConfig {
        gate,
        estimator: cfg.estimator.clone(),
        auto: match &cfg.capacity {
            CapacitySetting::Auto(a) => Some(a.clone()),
            CapacitySetting::Fixed { .. } => None,
        },
        charge_at: if cfg.recharge_at_admission { ChargeAt::Admission } else { ChargeAt::Arrival },
        patience: cfg.patience,
    }
}

pub struct Gatekeeper {
    listener: TcpListener,
    admin: Option<TcpListener>,
    shared: Arc<Shared>,
}

impl Gatekeeper {
    /// Validate the configuration and bind the listening sockets.
    pub async fn bind(cfg: ProxyConfig) -> Result<Self, GatekeeperError> {
        if cfg.upstream.protocol != crate::config::Protocol::Http {
            return Err(GatekeeperError::Config(
                "the HTTP proxy needs an http:// upstream (postgres:// is pg::PgGatekeeper's)".into(),
            ));
        }
        if cfg.tls_cert_key.is_some() {
            return Err(GatekeeperError::Config("--tls-cert/--tls-key are for a postgres:// upstream".into()));
        }
        if cfg.estimator.basis == shortfirst_core::admission::Basis::Cpu {
            return Err(GatekeeperError::Config(
                "--estimate-basis cpu is for a postgres:// upstream (it reads the backend process's processor time)"
                    .into(),
            ));
        }
        let adm = Admission::new(&cfg)?;
        let (listener, admin) = bind_listeners(&cfg).await?;
        let pool = UpstreamPool::new(cfg.upstream.authority.clone(), cfg.upstream_timeout, cfg.upstream_pool_idle);
        let busy = cfg.busy_poll.map(BusyPoll::new).transpose()?;
        let shared = Arc::new(Shared { adm, pool, busy, cfg });
        Ok(Gatekeeper { listener, admin, shared })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.listener.local_addr().expect("bound listener has an address")
    }

    pub fn admin_addr(&self) -> Option<SocketAddr> {
        self.admin.as_ref().map(|l| l.local_addr().expect("bound listener has an address"))
    }

    pub fn handle(&self) -> Handle {
        Handle { shared: self.shared.clone() }
    }

    /// Serve until `shutdown` resolves, then shut down gracefully: stop accepting, answer
    /// every queued request 503 with `Retry-After` (and later arrivals on open
    /// connections too), let the admitted ones finish (their responses relayed, the
    /// backend done with them) for at most `shutdown_timeout`, close the connections.
    pub async fn run(self, shutdown: impl std::future::Future<Output = ()>) -> Result<(), GatekeeperError> {
        let timer = tokio::spawn(timer_task(self.shared.adm.clone()));
        let cfg = &self.shared.cfg;
        let anchor = tokio::spawn(timer_anchor(cfg.header_timeout.min(cfg.upstream_timeout) / 2));
        let poller = self.shared.busy.clone().map(|b| tokio::spawn(b.run()));
        let shared = self.shared.clone();
        let render: admin::Render = Arc::new(move || shared.adm.metrics.render(&shared.snapshot()));
        let admin = self.admin.map(|l| tokio::spawn(admin::admin_loop(l, render)));
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let listener = self.listener;
        tokio::select! {
            _ = accept_loop(&listener, &self.shared, &stopped) => {}
            _ = shutdown => {}
        }
        drop(listener);
        let _ = stop.send(true);
        let bound = self.shared.cfg.shutdown_timeout;
        let deadline = Instant::now() + bound;
        tracing::info!("shutting down: queued requests get 503, admitted ones have {bound:?} to finish");
        self.shared.adm.begin_shutdown();
        let finished = tokio::time::timeout_at(deadline, async {
            // Connections finish the request they are in; responses whose client left
            // still drain from the backend.
            while self.shared.adm.metrics.client_connections.get() > 0 || self.shared.adm.in_flight() > 0 {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await;
        if finished.is_err() {
            tracing::warn!(
                "shutdown: {} admitted requests still unfinished after {bound:?} (--shutdown-timeout); abandoning them",
                self.shared.adm.in_flight()
            );
        }
        timer.abort();
        anchor.abort();
        if let Some(p) = poller {
            p.abort();
        }
        if let Some(a) = admin {
            a.abort();
        }
        Ok(())
    }
}

/// Keeps a timer of the runtime due within `period`, so that the timers set on every
/// request (the header timeout, `--header-timeout`, and the upstream timeout) are
/// never the runtime's earliest. Why: tokio wakes its I/O driver (an eventfd write, then a
/// spurious return from `epoll_wait`) whenever a timer is set earlier than the driver's
/// next planned wake-up; with every connection in the middle of a request the new header
/// timeout is just that, a system call per request for nothing. The cost: one task wake-up
/// per `period` (at least a millisecond).
async fn timer_anchor(period: Duration) {
    let period = period.max(Duration::from_millis(1));
    loop {
        tokio::time::sleep(period).await;
    }
}

/// Accept client connections and serve each on a task of its own, watched for shutdown.
/// At `max_connections` open, a new connection is answered 503 at once and closed, so the
/// accept queue keeps draining and clients learn at once instead of waiting in the
/// kernel's backlog (slowloris connections holding every slot cost others a 503, not a hang).
async fn accept_loop(listener: &TcpListener, shared: &Arc<Shared>, stop: &tokio::sync::watch::Receiver<bool>) {
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(x) => x,
            Err(e) => {
                // EMFILE and friends: back off instead of spinning.
                tracing::warn!("accept: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        // Only this loop opens: the count cannot grow between the check and the open.
        if shared.adm.metrics.client_connections.get() >= shared.cfg.max_connections {
            refuse(shared, &stream);
            continue;
        }
        let open = shared.adm.metrics.client_connections.open();
        let _ = stream.set_nodelay(true);
        tokio::spawn(front::serve(shared.clone(), stream, peer, stop.clone(), open));
    }
}

/// Answer 503 without waiting (a fresh socket's send buffer is empty) and close. Best
/// effort: a client that already sent its request may see a reset instead.
fn refuse(shared: &Shared, stream: &tokio::net::TcpStream) {
    shared.adm.metrics.connections_refused.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let body = "gatekeeper: too many connections\n";
    let head = format!(
        "HTTP/1.1 503 Service Unavailable\r\nretry-after: {}\r\nconnection: close\r\n\
         content-type: text/plain; charset=utf-8\r\ncontent-length: {}\r\n\r\n{body}",
        shared.cfg.retry_after_s,
        body.len()
    );
    let _ = stream.try_write(head.as_bytes());
}

/// The client listener (`--listen`) and the admin listener (`--admin`, if set), bound; an
/// error names the flag. Both gatekeepers, HTTP and PostgreSQL, bind through this.
pub(crate) async fn bind_listeners(cfg: &ProxyConfig) -> Result<(TcpListener, Option<TcpListener>), GatekeeperError> {
    let listener = TcpListener::bind(cfg.listen)
        .await
        .map_err(|e| GatekeeperError::io(format!("binding --listen {}", cfg.listen), e))?;
    let admin = match cfg.admin {
        Some(a) => {
            Some(TcpListener::bind(a).await.map_err(|e| GatekeeperError::io(format!("binding --admin {a}"), e))?)
        }
        None => None,
    };
    Ok((listener, admin))
}
