//! Listening, accepting, the connection limit, and graceful shutdown.
//!
//! The listening socket gets the set-up band's `SO_PRIORITY` before `bind`, so
//! SYN-ACKs leave in band 0 and accepted sockets inherit it until their first
//! response sets its own band. Setting it is also the start-up check that the
//! process may set priorities at all (values above 6 need CAP_NET_ADMIN).
//!
//! At `max-connections` open connections (decisions in [`crate::limit`]):
//! - `at-max-connections = refuse` (the default): a newly accepted connection
//!   gets an immediate `503 Service Unavailable` (`Retry-After: 1`,
//!   `Connection: close`) written without waiting, and is closed: the accept
//!   queue keeps draining, so clients learn at once instead of timing out in the
//!   SYN queue. The 503 is best effort: a client that already sent its request
//!   may see a reset instead.
//! - `wait`: the loop stops polling the listener until a connection closes (its
//!   task is joined), as Apache does at `MaxClients`. New connections wait in
//!   the kernel's accept queue (`backlog`, capped by `net.core.somaxconn`);
//!   once that is full the kernel drops their SYNs (`ListenOverflows`,
//!   `ListenDrops`). Nothing spins: the loop sleeps on shutdown and on its
//!   connections. The admin listener has its own task and is never paused.
//!
//! HTTPS (`tls-listen`): a second listener beside the plaintext one, under the same
//! connection limit; its connections do the TLS handshake in their own task (within the
//! header timeout) before the HTTP state machine runs. At the limit under `refuse` a TLS
//! connection is closed at once (a 503 in plaintext would mean nothing to a TLS client).
//! The certificates are re-read on SIGHUP and when their files change (polled every
//! [`TLS_POLL_INTERVAL`]), see [`crate::tls::certs`].
//!
//! Shutdown: stop accepting (connections still in the accept queue are reset
//! when the listener closes), tell every connection (idle ones close at once;
//! busy ones finish their current response, with `Connection: close`), wait up
//! to `drain-timeout`, then abort what is left and flush the access log.

use std::collections::VecDeque;
use std::future::Future;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use shortfirst_core::bands::Band;
use socket2::{Domain, Protocol, SockRef, Socket, Type};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio::time::Instant;

use arc_swap::ArcSwap;

use crate::config::{ConfigError, ConfigFile, ServerConfig};
use crate::conn::{Conn, Transport};
use crate::http::{response, Status};
use crate::limit::{Admit, ConnectionLimit};
use crate::live::{Live, ReloadMetrics};
use crate::metrics::Metrics;
use crate::sched::{set_so_priority, setsockopt_int, CutoffChooser, PriorityObserver};
use crate::tls::{CertStore, TlsError, TlsMetrics};
use crate::usched::{PacerThread, UserScheduler};

/// The admin listener's backlog (the kernel caps it at `net.core.somaxconn`).
const ADMIN_BACKLOG: u32 = 4096;
/// Admin connections open at once. At the limit, a new connection evicts the
/// oldest one still waiting for its request (a scraper's request arrives at
/// once, so the waiting ones are idle or hostile); if none is waiting, the new
/// one is closed.
const ADMIN_MAX_CONNECTIONS: usize = 16;
/// Between two logged accept errors (EMFILE while the fd limit is hit repeats
/// every back-off): one warning, then one per interval with the count.
const ACCEPT_ERROR_LOG_INTERVAL: Duration = Duration::from_secs(10);
/// Between two warnings that the accept loop waits at `max-connections`.
const ACCEPT_PAUSE_LOG_INTERVAL: Duration = Duration::from_secs(10);
/// An admin request must arrive within this, and fit in [`ADMIN_MAX_REQUEST_BYTES`].
const ADMIN_TIMEOUT: Duration = Duration::from_secs(5);
const ADMIN_MAX_REQUEST_BYTES: usize = 8 * 1024;
/// The first read of a plaintext connection, to tell HTTP/2's preface from HTTP/1.1.
const SNIFF_READ_BYTES: usize = 4096;
/// How often the certificate and key files are checked for a change.
pub const TLS_POLL_INTERVAL: Duration = shortfirst_tls::POLL_INTERVAL;

#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("root {path}")]
    Root { path: PathBuf, source: std::io::Error },
    #[error("cannot listen on {addr}")]
    Bind { addr: SocketAddr, source: std::io::Error },
    #[error(
        "cannot set SO_PRIORITY {priority:#x} on the listening socket (priorities above 6 need \
         CAP_NET_ADMIN or CAP_NET_RAW: run as root or with one of them, or pass --socket-priority=false \
         to serve without kernel scheduling)"
    )]
    PriorityNotPermitted { priority: u32, source: std::io::Error },
    #[error("access log {path}")]
    AccessLog { path: PathBuf, source: std::io::Error },
    #[error(transparent)]
    Tls(#[from] TlsError),
    #[error("tokio runtime")]
    Runtime(#[source] std::io::Error),
}

/// What every connection shares.
pub(crate) struct Shared {
    /// The configuration at start: read here only the settings a reload cannot change
    /// (`config::reload`); the others from [`Shared::live`].
    pub config: ServerConfig,
    /// The configuration in force, its sites and access log (`crate::live`).
    pub live: ArcSwap<Live>,
    pub reload_metrics: ReloadMetrics,
    pub cutoff_chooser: CutoffChooser,
    pub metrics: Metrics,
    pub observer: Option<PriorityObserver>,
    /// The user-space uplink scheduler; `None` in kernel mode.
    pub user: Option<Arc<UserScheduler>>,
    /// HTTPS; `None` without `tls-listen`.
    pub tls: Option<TlsState>,
    pub tls_metrics: TlsMetrics,
    pub http2_metrics: crate::http2::Http2Metrics,
    /// TLS record payload: a whole record, or about one grant under the user-space scheduler.
    pub record_payload_bytes: usize,
}

/// HTTPS: the certificates and the handshake's configuration.
pub(crate) struct TlsState {
    pub store: Arc<CertStore>,
    pub acceptor: tokio_rustls::TlsAcceptor,
    /// The HTTPS listener's port, for redirects to it.
    pub port: u16,
}

impl Shared {
    /// Re-reads the certificates (SIGHUP, a file changed); the old set stays on failure.
    pub(crate) fn reload_certs(&self, why: &str) {
        if let Some(tls) = &self.tls {
            self.report_cert_reload(why, tls.store.reload());
        }
    }

    /// Counts and logs a certificate reload's outcome.
    fn report_cert_reload(&self, why: &str, outcome: Result<(), TlsError>) {
        match outcome {
            Ok(()) => {
                self.tls_metrics.reloads.fetch_add(1, Ordering::Relaxed);
                tracing::info!(why, "TLS certificates reloaded");
            }
            Err(e) => {
                self.tls_metrics.reload_failures.fetch_add(1, Ordering::Relaxed);
                tracing::error!(why, error = %e, "TLS certificates not reloaded: the previous ones stay in force");
            }
        }
    }
}

impl Shared {
    fn render_metrics(&self) -> String {
        let mut out = String::with_capacity(8 * 1024);
        let cutoffs = self.cutoff_chooser.cutoffs();
        let live = self.live();
        let dropped = live.access_log.as_ref().map_or(0, |l| l.dropped());
        let policy = self.cutoff_chooser.policy().to_string();
        self.metrics.render(&mut out, &cutoffs, &policy, dropped);
        self.tls_metrics.render(&mut out, self.tls.is_some());
        self.reload_metrics.render(&mut out, live.sites.hosts().len());
        if crate::http2::enabled(&self.config) {
            self.http2_metrics.render(&mut out);
        }
        if let Some(user) = &self.user {
            user.render(&mut out, &cutoffs);
        }
        out
    }
}

/// A bound server, ready to [`run`](Server::run).
pub struct Server {
    shared: Arc<Shared>,
    listener: TcpListener,
    tls_listener: Option<TcpListener>,
    admin: Option<TcpListener>,
}

fn listen(addr: SocketAddr, priority: Option<u32>, backlog: u32) -> Result<std::net::TcpListener, ServerError> {
    let bind_err = |source| ServerError::Bind { addr, source };
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP)).map_err(bind_err)?;
    socket.set_reuse_address(true).map_err(bind_err)?;
    if let Some(priority) = priority {
        set_so_priority(socket.as_raw_fd(), priority)
            .map_err(|source| ServerError::PriorityNotPermitted { priority, source })?;
    }
    socket.bind(&addr.into()).map_err(bind_err)?;
    // Validated to fit: `config::MAX_BACKLOG`.
    socket.listen(i32::try_from(backlog).unwrap_or(i32::MAX)).map_err(bind_err)?;
    socket.set_nonblocking(true).map_err(bind_err)?;
    Ok(socket.into())
}

impl Server {
    /// Validates `config`, opens the root and the access log, and binds the
    /// listeners. Must be called inside a tokio runtime.
    pub fn bind(config: ServerConfig) -> Result<Server, ServerError> {
        Server::bind_with_observer(config, None)
    }

    /// As [`Server::bind`], calling `observer` after every `SO_PRIORITY` change
    /// on a connection (a test hook).
    pub fn bind_with_observer(config: ServerConfig, observer: Option<PriorityObserver>) -> Result<Server, ServerError> {
        config.validate()?;
        ensure_fd_limit(&config);
        let live = Live::open(config.clone(), None)?;
        let cutoff_chooser = CutoffChooser::new(&config);
        let user = UserScheduler::new(&config)?;
        let setup_priority = config.socket_priority.then(|| cutoff_chooser.band_map().so_priority(Band::SETUP));
        let listener = listen(config.listen, setup_priority, config.backlog)?;
        let listener = TcpListener::from_std(listener).map_err(ServerError::Runtime)?;
        let record_payload_bytes = crate::tls::record_payload_bytes(user.as_ref().map(|u| u.quantum_bytes()));
        let (tls, tls_listener) = match &config.tls {
            Some(settings) => {
                let store = CertStore::load(settings.certs.clone(), crate::tls::provider())?;
                let server_config =
                    crate::tls::server_config(&store, record_payload_bytes, crate::http2::enabled(&config))?;
                let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(server_config));
                let l = listen(settings.listen, setup_priority, config.backlog)?;
                let port = l.local_addr().map_err(ServerError::Runtime)?.port();
                let l = TcpListener::from_std(l).map_err(ServerError::Runtime)?;
                (Some(TlsState { store, acceptor, port }), Some(l))
            }
            None => (None, None),
        };
        let admin = match config.admin {
            Some(addr) => {
                Some(TcpListener::from_std(listen(addr, None, ADMIN_BACKLOG)?).map_err(ServerError::Runtime)?)
            }
            None => None,
        };
        let shared = Arc::new(Shared {
            config,
            live: ArcSwap::from_pointee(live),
            reload_metrics: ReloadMetrics::default(),
            cutoff_chooser,
            metrics: Metrics::default(),
            observer,
            user,
            tls,
            tls_metrics: TlsMetrics::default(),
            http2_metrics: crate::http2::Http2Metrics::default(),
            record_payload_bytes,
        });
        Ok(Server { shared, listener, tls_listener, admin })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.listener.local_addr().expect("bound listener has an address")
    }

    /// The HTTPS listener's address (`tls-listen`).
    pub fn tls_addr(&self) -> Option<SocketAddr> {
        self.tls_listener.as_ref().map(|l| l.local_addr().expect("bound listener has an address"))
    }

    /// A handle that re-reads the TLS certificates (SIGHUP); nothing without TLS.
    pub fn cert_reloader(&self) -> impl Fn() + Send + Sync + 'static {
        let shared = self.shared.clone();
        move || shared.reload_certs("SIGHUP")
    }

    pub fn admin_addr(&self) -> Option<SocketAddr> {
        self.admin.as_ref().map(|l| l.local_addr().expect("bound listener has an address"))
    }

    /// `SO_PRIORITY` of the listening socket, as the kernel reports it.
    pub fn listener_priority(&self) -> Option<u32> {
        crate::sched::so_priority(self.listener.as_raw_fd()).ok()
    }

    /// A handle that reopens the access log file (for log rotation: SIGHUP).
    pub fn access_log_reopener(&self) -> impl Fn() + Send + Sync + 'static {
        let shared = self.shared.clone();
        move || {
            if let Some(log) = &shared.live().access_log {
                log.reopen();
            }
        }
    }

    /// A handle that applies the configuration `flags` describe — the `--config` file
    /// they name read again, the flags over it (SIGHUP; see `crate::live`). It logs and
    /// counts the outcome and returns it: the restart-only keys the file changed
    /// (ignored), or why the running configuration stays.
    pub fn config_reloader(
        &self,
        flags: ConfigFile,
    ) -> impl Fn() -> Result<Vec<&'static str>, ServerError> + Send + Sync + 'static {
        let shared = self.shared.clone();
        move || shared.reload_config(&flags)
    }

    /// The metrics page, as served at `/metrics`.
    pub fn metrics_text(&self) -> String {
        self.shared.render_metrics()
    }

    /// Serves until `shutdown` completes, then drains (see the module docs).
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> Result<(), ServerError> {
        let Server { shared, listener, tls_listener, admin } = self;
        let config = &shared.config;
        tracing::info!(
            listen = %listener.local_addr().map_err(ServerError::Runtime)?,
            tls_listen = ?tls_listener.as_ref().and_then(|l| l.local_addr().ok()),
            root = %shared.live().sites.default_site().root.path().display(),
            policy = %config.policy,
            cutoffs = %shared.cutoff_chooser.cutoffs(),
            scheduler = %config.scheduler,
            link_rate_bits_per_s = config.link_rate_bits_per_s.unwrap_or(0),
            max_connections = config.max_connections,
            at_max_connections = %config.at_max_connections,
            "serving"
        );
        shared.live().log_sites();
        let admin_task = admin.map(|l| tokio::spawn(admin_loop(l, shared.clone())));
        let poll_task = shared.tls.is_some().then(|| tokio::spawn(poll_certs(shared.clone())));
        // Stopped and joined when dropped, on every way out of this function.
        let pacer = shared.user.clone().map(PacerThread::spawn).transpose().map_err(ServerError::Runtime)?;
        let (stop_tx, stop_rx) = watch::channel(false);
        let mut connections = JoinSet::new();
        let listeners = Listeners { plain: &listener, tls: tls_listener.as_ref() };
        accept_until(&shared, listeners, &mut connections, &stop_rx, shutdown).await;
        drop(listener);
        drop(tls_listener);
        let _ = stop_tx.send(true);
        let in_flight = connections.len();
        let drain_timeout = shared.live().config.drain_timeout;
        tracing::info!(connections = in_flight, drain_timeout_ms = drain_timeout.as_millis() as u64, "shutting down");
        let drained =
            tokio::time::timeout(drain_timeout, async { while connections.join_next().await.is_some() {} }).await;
        if drained.is_err() {
            tracing::warn!(connections = connections.len(), "drain timeout: closing connections still open");
            connections.shutdown().await;
        }
        for task in [admin_task, poll_task].into_iter().flatten() {
            task.abort();
        }
        drop(pacer);
        if let Some(log) = &shared.live().access_log {
            log.close();
        }
        Ok(())
    }
}

/// Checks the certificate files every [`TLS_POLL_INTERVAL`]; reloads when one changed.
async fn poll_certs(shared: Arc<Shared>) {
    let Some(tls) = &shared.tls else { return };
    let store = tls.store.clone();
    shortfirst_tls::watch(store, |outcome| shared.report_cert_reload("a certificate or key file changed", outcome))
        .await;
}

/// The listeners connections are accepted from.
#[derive(Clone, Copy)]
struct Listeners<'l> {
    plain: &'l TcpListener,
    tls: Option<&'l TcpListener>,
}

impl Listeners<'_> {
    /// The next connection from either listener; `true` if it came from the TLS one.
    async fn accept(&self) -> (std::io::Result<(TcpStream, SocketAddr)>, bool) {
        match self.tls {
            None => (self.plain.accept().await, false),
            Some(tls) => tokio::select! {
                r = self.plain.accept() => (r, false),
                r = tls.accept() => (r, true),
            },
        }
    }
}

/// One TLS connection: the handshake (within the header timeout; abandoned at shutdown),
/// its bytes charged to the user-space pacer, then the HTTP state machine.
async fn serve_tls(shared: Arc<Shared>, stream: TcpStream, peer: SocketAddr, mut stop: watch::Receiver<bool>) {
    let Some(tls) = &shared.tls else { return };
    let header_timeout = shared.live().config.header_timeout;
    let handshake = tokio::time::timeout(header_timeout, tls.acceptor.accept(stream));
    let result = tokio::select! {
        r = handshake => r,
        _ = stop.changed() => return,
    };
    let m = &shared.tls_metrics;
    let stream = match result {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => {
            m.handshake_failures.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(%peer, error = %e, "TLS handshake failed");
            return;
        }
        Err(_elapsed) => {
            m.handshake_timeouts.fetch_add(1, Ordering::Relaxed);
            return;
        }
    };
    match stream.get_ref().1.protocol_version() {
        Some(rustls::ProtocolVersion::TLSv1_2) => m.handshakes_tls12.fetch_add(1, Ordering::Relaxed),
        _ => m.handshakes_tls13.fetch_add(1, Ordering::Relaxed),
    };
    if let Some(user) = &shared.user {
        // What the handshake put on the wire, as the kernel counted it.
        let sent = crate::tcpinfo::read(stream.get_ref().0.as_raw_fd()).ok().and_then(|i| i.snapshot().bytes_sent);
        user.charge_handshake(sent.unwrap_or(0));
    }
    if stream.get_ref().1.alpn_protocol() == Some(crate::http2::ALPN) {
        let band = band_socket(&shared, stream.get_ref().0);
        let tls = Transport::Tls(Box::new(stream));
        let version = tls.tls_version();
        let Transport::Tls(stream) = tls else { return };
        let accepted = crate::http2::Accepted { peer, tls: version, band };
        crate::http2::serve(shared.clone(), stream, accepted, stop).await;
        return;
    }
    Conn::new(shared.clone(), Transport::Tls(Box::new(stream)), peer, stop).run().await;
}

/// A new connection's band, before its socket moves under the HTTP/2 codec.
fn band_socket(shared: &Shared, tcp: &TcpStream) -> crate::sched::BandSocket {
    crate::sched::BandSocket::accepted(
        tcp,
        shared.cutoff_chooser.band_map(),
        shared.config.socket_priority,
        shared.observer.clone(),
    )
}

/// One plaintext connection: HTTP/1.1, or h2c when its first bytes are the HTTP/2
/// preface (prior knowledge, RFC 9113 §3.3). The bytes read to tell are not lost: they
/// start the HTTP/1.1 read buffer, or are read again by the codec.
async fn serve_plain(shared: Arc<Shared>, mut stream: TcpStream, peer: SocketAddr, stop: watch::Receiver<bool>) {
    if !crate::http2::enabled(&shared.config) {
        Conn::new(shared.clone(), Transport::Plain(stream), peer, stop).run().await;
        return;
    }
    let preface = crate::http2::PREFACE;
    // What one read brings (an HTTP/1.1 request line is not cut where the preface ends),
    // within the read buffer the HTTP/1.1 machine will take it into.
    let settings = shared.live().conn_settings();
    let mut buf = vec![0u8; SNIFF_READ_BYTES.min(settings.parse.max_header_bytes)];
    let mut first = Vec::new();
    let deadline = Instant::now() + settings.header_timeout;
    let mut stop_rx = stop.clone();
    while first.len() < preface.len() && preface.starts_with(&first) {
        // Still a prefix of the preface (or nothing yet): read on.
        let want = buf.len() - first.len();
        let read = tokio::time::timeout_at(deadline, stream.read(&mut buf[..want]));
        let n = tokio::select! {
            r = read => match r {
                Ok(Ok(n)) if n > 0 => n,
                _ => break, // closed, failed or silent: the HTTP/1.1 machine ends it as it would
            },
            _ = stop_rx.changed() => return,
        };
        first.extend_from_slice(&buf[..n]);
    }
    if first.starts_with(preface) {
        let band = band_socket(&shared, &stream);
        let io = crate::http2::wire::Prefixed::new(first, stream);
        let accepted = crate::http2::Accepted { peer, tls: None, band };
        crate::http2::serve(shared.clone(), io, accepted, stop).await;
        return;
    }
    Conn::new(shared.clone(), Transport::Plain(stream), peer, stop).with_buffered(&first).run().await;
}

/// Accepts connections into `connections` until `shutdown` completes, within
/// the connection limit (see the module docs).
async fn accept_until(
    shared: &Arc<Shared>,
    listeners: Listeners<'_>,
    connections: &mut JoinSet<()>,
    stop_rx: &watch::Receiver<bool>,
    shutdown: impl Future<Output = ()>,
) {
    let config = &shared.config;
    let mut accept_errors = RateLimit::new(ACCEPT_ERROR_LOG_INTERVAL);
    let mut pause_warnings = RateLimit::new(ACCEPT_PAUSE_LOG_INTERVAL);
    let mut paused = false;
    tokio::pin!(shutdown);
    loop {
        // Reloadable: the limit in force (a raised one unpauses at the next event).
        let accepting = connection_limit(shared).accepting(connections.len());
        if accepting == paused {
            paused = !accepting;
            note_pause(shared, paused, &mut pause_warnings);
        }
        tokio::select! {
            _ = &mut shutdown => break,
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            (accepted, is_tls) = listeners.accept(), if accepting => match accepted {
                Ok((stream, peer)) => {
                    shared.metrics.connections_accepted.fetch_add(1, Ordering::Relaxed);
                    if connection_limit(shared).admit(connections.len()) == Admit::Refuse {
                        refuse(shared, stream, is_tls);
                        continue;
                    }
                    if let Err(e) = prepare(&stream, config) {
                        tracing::debug!(error = %e, "accepted socket set-up failed");
                        continue;
                    }
                    if is_tls {
                        connections.spawn(serve_tls(shared.clone(), stream, peer, stop_rx.clone()));
                    } else {
                        connections.spawn(serve_plain(shared.clone(), stream, peer, stop_rx.clone()));
                    }
                }
                Err(e) => {
                    // EMFILE/ENFILE and friends: back off instead of spinning.
                    if let Some(suppressed) = accept_errors.record(Instant::now()) {
                        tracing::warn!(error = %e, suppressed, "accept failed (logged at most every 10 s; suppressed: since the last warning)");
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
        }
    }
    if paused {
        // Not a pause at the limit any more: the listener closes.
        shared.metrics.accept_resumed(Instant::now());
    }
}

/// `max-connections` and `at-max-connections` in force.
fn connection_limit(shared: &Shared) -> ConnectionLimit {
    let live = shared.live();
    ConnectionLimit::new(live.config.max_connections, live.config.at_max_connections)
}

/// The accept loop stopped (`paused`) or resumed accepting at the limit.
fn note_pause(shared: &Shared, paused: bool, warnings: &mut RateLimit) {
    let now = Instant::now();
    if !paused {
        shared.metrics.accept_resumed(now);
        return;
    }
    shared.metrics.accept_paused(now);
    if let Some(suppressed) = warnings.record(now) {
        tracing::warn!(
            max_connections = shared.live().config.max_connections,
            suppressed,
            "max-connections reached: not accepting until a connection closes; new connections wait in the \
             accept queue (logged at most every 10 s; suppressed: pauses since the last warning)"
        );
    }
}

/// File descriptors needed beyond one per connection (listeners, log, files
/// open while sending, the runtime's own).
const FD_HEADROOM: u64 = 256;

/// Raises the soft `RLIMIT_NOFILE` so `max_connections` connections (each with a
/// file open while sending) and the worker threads' kept files ([`crate::filecache`]) fit,
/// up to the hard limit; warns if they cannot.
pub(crate) fn ensure_fd_limit(config: &ServerConfig) {
    let max_connections = config.max_connections;
    let kept = (crate::filecache::ENTRIES_PER_THREAD * config.worker_threads()) as u64;
    let needed = 2 * max_connections as u64 + FD_HEADROOM + kept;
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit/setrlimit read and write the struct we pass.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 || limit.rlim_cur >= needed {
        return;
    }
    let raised = libc::rlimit { rlim_cur: needed.min(limit.rlim_max), rlim_max: limit.rlim_max };
    // SAFETY: as above.
    let ok = unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0;
    let now = if ok { raised.rlim_cur } else { limit.rlim_cur };
    if now < needed {
        tracing::warn!(
            open_files_limit = now,
            needed,
            max_connections,
            "RLIMIT_NOFILE is below what max-connections needs: accepts will fail (EMFILE) before the limit"
        );
    }
}

fn prepare(stream: &TcpStream, config: &ServerConfig) -> std::io::Result<()> {
    stream.set_nodelay(true)?;
    if let Some(bytes) = config.send_buffer_bytes {
        SockRef::from(stream).set_send_buffer_size(bytes)?;
    }
    if config.notsent_lowat_bytes > 0 {
        setsockopt_int(
            stream.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_NOTSENT_LOWAT,
            config.notsent_lowat_bytes as i32,
        )?;
    }
    Ok(())
}

/// Answers 503 without waiting and closes; a TLS connection is closed (see the module docs).
fn refuse(shared: &Shared, stream: TcpStream, is_tls: bool) {
    shared.metrics.connections_refused.fetch_add(1, Ordering::Relaxed);
    if is_tls {
        return;
    }
    if shared.config.socket_priority {
        // Not even an error page goes out in the set-up band.
        let _ = set_so_priority(stream.as_raw_fd(), shared.cutoff_chooser.band_map().so_priority(Band::FIRST_DATA));
    }
    let mut buf = Vec::with_capacity(256);
    response::error(&mut buf, Status::SERVICE_UNAVAILABLE, false, 1, true);
    let _ = stream.try_write(&buf);
}

/// Logs the first of a run of repeated events, then at most one per interval,
/// saying how many were left out in between.
#[derive(Debug)]
pub struct RateLimit {
    interval: Duration,
    last_logged: Option<Instant>,
    suppressed: u64,
}

impl RateLimit {
    pub fn new(interval: Duration) -> RateLimit {
        RateLimit { interval, last_logged: None, suppressed: 0 }
    }

    /// An event at `now`: `Some(suppressed since the last one logged)` if it is
    /// to be logged, `None` if it is to be counted only.
    pub fn record(&mut self, now: Instant) -> Option<u64> {
        match self.last_logged {
            Some(last) if now.saturating_duration_since(last) < self.interval => {
                self.suppressed += 1;
                None
            }
            _ => {
                self.last_logged = Some(now);
                Some(std::mem::take(&mut self.suppressed))
            }
        }
    }
}

/// One open admin connection, for eviction.
struct AdminSlot {
    /// Set once its request has been read: it is then answered, not evicted.
    answering: Arc<AtomicBool>,
    task: tokio::task::AbortHandle,
}

async fn admin_loop(listener: TcpListener, shared: Arc<Shared>) {
    // In accept order, so the first waiting one is the oldest.
    let mut slots: VecDeque<AdminSlot> = VecDeque::with_capacity(ADMIN_MAX_CONNECTIONS);
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        slots.retain(|s| !s.task.is_finished());
        if slots.len() >= ADMIN_MAX_CONNECTIONS {
            match slots.iter().position(|s| !s.answering.load(Ordering::Acquire)) {
                Some(oldest_waiting) => {
                    if let Some(evicted) = slots.remove(oldest_waiting) {
                        evicted.task.abort();
                    }
                }
                None => continue, // every slot is answering: drop the new connection
            }
        }
        let shared = shared.clone();
        let answering = Arc::new(AtomicBool::new(false));
        let flag = answering.clone();
        let task = tokio::spawn(async move {
            let _ = tokio::time::timeout(ADMIN_TIMEOUT, admin_request(stream, &shared, &flag)).await;
        });
        slots.push_back(AdminSlot { answering, task: task.abort_handle() });
    }
}

/// One admin request: `GET /metrics` (Prometheus text) or `GET /healthz`; then close.
async fn admin_request(mut stream: TcpStream, shared: &Shared, answering: &AtomicBool) -> std::io::Result<()> {
    let mut buf = vec![0u8; ADMIN_MAX_REQUEST_BYTES];
    let mut len = 0;
    let (status, body, content_type): (Status, String, &[u8]) = loop {
        let n = stream.read(&mut buf[len..]).await?;
        if n == 0 {
            return Ok(());
        }
        len += n;
        let mut headers = [httparse::EMPTY_HEADER; 32];
        let mut req = httparse::Request::new(&mut headers);
        match req.parse(&buf[..len]) {
            Ok(httparse::Status::Complete(_)) => {
                let path = req.path.unwrap_or("/").split('?').next().unwrap_or("/");
                break match (req.method, path) {
                    (Some("GET" | "HEAD"), "/metrics") => {
                        (Status::OK, shared.render_metrics(), b"text/plain; version=0.0.4; charset=utf-8")
                    }
                    (Some("GET" | "HEAD"), "/healthz") => (Status::OK, "ok\n".into(), b"text/plain; charset=utf-8"),
                    (Some("GET" | "HEAD"), _) => (Status::NOT_FOUND, "not found\n".into(), b"text/plain"),
                    _ => (Status::METHOD_NOT_ALLOWED, "GET only\n".into(), b"text/plain"),
                };
            }
            Ok(httparse::Status::Partial) if len < buf.len() => continue,
            _ => break (Status::BAD_REQUEST, "bad request\n".to_string(), b"text/plain"),
        };
    };
    answering.store(true, Ordering::Release);
    let mut head = Vec::with_capacity(256);
    response::begin(&mut head, status);
    response::header(&mut head, b"Content-Type", content_type);
    response::header_u64(&mut head, b"Content-Length", body.len() as u64);
    response::end(&mut head, false, 1);
    head.extend_from_slice(body.as_bytes());
    stream.write_all(&head).await?;
    stream.shutdown().await
}

/// Runs the server on its own multi-thread runtime until SIGTERM or SIGINT; SIGHUP
/// applies the configuration `flags` describe (their `--config` file read again), which
/// also reopens the access log (log rotation) and re-reads the TLS certificates.
pub fn run_until_signal(config: ServerConfig, flags: ConfigFile) -> Result<(), ServerError> {
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    builder.enable_all().thread_name("shortfirst-serve").worker_threads(config.worker_threads());
    let runtime = builder.build().map_err(ServerError::Runtime)?;
    runtime.block_on(async move {
        let server = Server::bind(config)?;
        let reload = server.config_reloader(flags);
        let mut hup =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()).map_err(ServerError::Runtime)?;
        tokio::spawn(async move {
            while hup.recv().await.is_some() {
                tracing::info!("SIGHUP received: reloading the configuration");
                // Opening roots and certificate files blocks: off the runtime's workers.
                // Logged and counted there; the outcome needs nothing more here.
                let _ = tokio::task::block_in_place(&reload);
            }
        });
        let mut term =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).map_err(ServerError::Runtime)?;
        let shutdown = async move {
            tokio::select! {
                _ = term.recv() => tracing::info!("SIGTERM received"),
                _ = tokio::signal::ctrl_c() => tracing::info!("SIGINT received"),
            }
        };
        server.run(shutdown).await
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rate_limit_logs_first_then_one_per_interval_with_the_count() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let mut r = RateLimit::new(Duration::from_secs(10));
        // Accept errors every 50 ms for 25 s: three warnings, not five hundred.
        let logged: Vec<(u64, u64)> =
            (0..500).filter_map(|i| r.record(at(i * 50)).map(|suppressed| (i * 50, suppressed))).collect();
        assert_eq!(logged, vec![(0, 0), (10_000, 199), (20_000, 199)]);
        // After a quiet spell the next one is logged at once.
        assert_eq!(r.record(at(60_000)), Some(99));
    }
}
