//! The gatekeeper at the database tier: a PostgreSQL wire-protocol (3.x) proxy that
//! admits *transactions* through a [`TxnGate`].
//!
//! # Mode
//! Session-pinned: every client connection gets its own upstream connection, opened when
//! its StartupMessage arrives and closed with it. Everything of a session (authentication,
//! `ParameterStatus`, `BackendKeyData`, prepared statements, `SET`, `LISTEN`, temporary
//! tables, advisory locks) therefore works unchanged; the gatekeeper only delays the
//! *start* of a transaction, never a statement inside one.
//!
//! # What is parsed, what is passed through
//! - Startup phase ([`frame::next_startup`]): with a certificate ([`PgConfig::tls`]), an
//!   `SSLRequest` is answered `S` and the session goes on inside TLS (bytes sent after the
//!   request, before the handshake, are refused); without one, and for `GSSENCRequest`,
//!   the answer is `N` (the client goes on in plaintext or gives up, by its `sslmode`). The
//!   upstream connection is plain TCP (the gatekeeper sits next to the server).
//!   A `CancelRequest` whose (pid, key) belongs to a connected client (recorded from the
//!   server's `BackendKeyData`, see [`cancel`]) is forwarded to the upstream as received,
//!   unless that client's transaction is waiting for admission: then the wait is
//!   withdrawn (the controller's `cancel`, which is not a give-up) and the client answered
//!   `ERROR 57014` as the server would; nothing of it was forwarded. An unknown key is
//!   dropped. A StartupMessage of protocol 3.x is forwarded as received
//!   (a server that does not support the minor version answers NegotiateProtocolVersion);
//!   any other version is refused with `0A000`. The only parameter read is
//!   `application_name` (a type source, see [`reqtype`]).
//! - Authentication (trust, password, md5, SCRAM) is relayed byte for byte: the gatekeeper
//!   never sees a password in clear, and the server's answers pass unchanged.
//! - Typed phase ([`frame::next_frame`]): every message in both directions is forwarded as
//!   received. The [`txn::Tracker`] reads, on the client side, Query, Parse, Bind, Execute,
//!   Close, Describe, Sync, FunctionCall, CopyDone and CopyFail (see [`message`]), and on
//!   the server side ReadyForQuery, CommandComplete, CopyInResponse and BackendKeyData.
//!   Its rules, including the deferral of `BEGIN` and the end of a transaction, are in
//!   [`txn`]; the request type of a transaction in [`reqtype`].
//!
//! # Admission
//! Before the first message of a transaction is forwarded, the driver awaits
//! [`TxnGate::admit`] with the transaction's type; the permit is handed back through
//! [`TxnGate::finish`] when the server reports idle with nothing outstanding, or dropped
//! when the connection ends first. [`AdmitAll`] admits at once (pass-through mode);
//! [`CountLimit`] admits N at a time, first come first served; [`ControllerGate`] admits
//! through the admission controller the HTTP proxy drives (costs learned per type from
//! admission to idle, sjf and the other policies, the queue and wait limits).
//!
//! Nothing of a refused transaction reaches the server: outside a transaction, an
//! extended-protocol batch (Parse, Bind, Execute, Describe, Close) is held back up to its
//! `Sync` (or a `Flush`, or one message's size limit) and admitted as a whole; a Query or
//! FunctionCall is one batch. A refusal (queue full, waited too long, would not finish
//! before the client gives up, shutting down) is answered `ERROR` 53300 or 53400 with a
//! hint naming the reason, then `ReadyForQuery`; the session stays usable (after a
//! deferred `BEGIN` the block is failed, as after any error in it: see [`txn`]). A
//! deferred `BEGIN` means `now()` inside the transaction is taken after the wait.
//! Parse, Describe and Sync sent outside a transaction (preparing a statement) are not
//! admitted.
//!
//! # Limits, and what happens at each
//! All in [`Limits`]:
//! - `max_clients` connections at once; the next one is answered `FATAL 53300` (too many
//!   connections) at once, without reading its startup message, and closed.
//! - `max_message_bytes` per client message, `max_server_message_bytes` per server
//!   message: checked from the length header, before the body is buffered. A longer
//!   client message ends the connection with `FATAL 08P01` naming the message and the
//!   limit; a longer server message with `FATAL 08006` (the upstream's fault). Per
//!   connection the proxy buffers at most one message (plus one read) per direction, and
//!   while a transaction waits for admission it reads ahead at most one message's limit.
//! - `startup_timeout`: the startup phase (and a forwarded cancel) must finish within it.
//! - `idle_in_transaction`: a client inside a transaction (admitted or a deferred BEGIN)
//!   that sends nothing for this long while the server owes nothing is told `FATAL 25P03`
//!   and disconnected; the upstream connection closes, so the server rolls back and the
//!   permit is released.
//! - `max_prepared` statement and portal names remembered per connection for typing.
//! - `connect_timeout` for the upstream connection; failing it answers `FATAL 08001`.
//!
//! # Errors
//! A client that sends garbage (a bad startup length, an unsupported version, a message
//! whose body does not hold its fields) gets `FATAL 08P01` (or `0A000`) naming what was
//! wrong, and its connection ends; the gatekeeper goes on serving the others. An upstream
//! that closes mid-session gives the client `FATAL 08006`; the permit is released.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use shortfirst_core::admission::Refusal;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

pub mod backend_cpu;
pub mod cancel;
mod conn;
pub mod controlled;
pub mod frame;
pub mod gate;
mod gatekeeper;
pub mod lexer;
pub mod message;
mod relay;
pub mod reqtype;
pub mod tls;
pub mod txn;

pub use cancel::CancelKeys;
pub use controlled::{ControllerGate, ControllerPermit};
pub use gate::{AdmitAll, AdmitAllPermit, CountLimit, CountLimitPermit, TxnGate};
pub use gatekeeper::{PgGatekeeper, PgReload};
pub use reqtype::{RequestType, TypeSource};
pub use tls::PgTls;

use frame::FrameError;
use message::MessageError;

/// The bounds of the PostgreSQL side (see the module doc for what happens at each).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    pub max_clients: usize,
    pub max_message_bytes: usize,
    pub max_server_message_bytes: usize,
    pub startup_timeout: Duration,
    pub idle_in_transaction: Option<Duration>,
    pub max_prepared: usize,
    pub connect_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_clients: 1_000,
            max_message_bytes: 16 << 20,
            max_server_message_bytes: 64 << 20,
            startup_timeout: Duration::from_secs(60),
            idle_in_transaction: Some(Duration::from_secs(600)),
            max_prepared: 10_000,
            connect_timeout: Duration::from_secs(10),
        }
    }
}

/// What [`serve`] needs.
#[derive(Debug, Clone)]
pub struct PgConfig {
    /// `host:port` of the PostgreSQL (or PgBouncer) to forward to.
    pub upstream_addr: String,
    pub limits: Limits,
    pub types: TypeSource,
    /// Answer SSLRequest `S` and wrap the session in TLS with this; `None`: answer `N`.
    pub tls: Option<PgTls>,
}

/// Why a client connection ended early. Each says whose fault it was.
#[derive(Debug, thiserror::Error)]
pub enum ConnError {
    #[error("client: {0}")]
    ClientFrame(#[from] FrameError),
    #[error("client: {0}")]
    ClientMessage(#[from] MessageError),
    #[error("upstream sent a bad message: {0}")]
    UpstreamFrame(FrameError),
    #[error("too many clients (the limit is {0})")]
    TooManyClients(usize),
    #[error("no startup message within {0:?}")]
    StartupTimeout(Duration),
    #[error("terminating connection due to idle-in-transaction timeout ({0:?})")]
    IdleInTransaction(Duration),
    #[error("cannot reach the upstream {addr}: {why}")]
    Upstream { addr: String, why: String },
    #[error("the upstream closed the connection ({state})")]
    UpstreamClosed { state: &'static str },
    #[error("{what}: {source}")]
    Io {
        what: &'static str,
        #[source]
        source: std::io::Error,
    },
}

impl ConnError {
    fn io(what: &'static str, source: std::io::Error) -> Self {
        ConnError::Io { what, source }
    }

    /// The SQLSTATE and hint the client is told.
    fn sqlstate(&self) -> (&'static str, Option<&'static str>) {
        match self {
            ConnError::ClientFrame(FrameError::UnsupportedVersion { .. }) => ("0A000", None),
            ConnError::ClientFrame(_) | ConnError::ClientMessage(_) => {
                ("08P01", Some("the client sent bytes that are not PostgreSQL protocol 3"))
            }
            ConnError::TooManyClients(_) => {
                ("53300", Some("raise the gatekeeper's client limit or pool in the client"))
            }
            ConnError::IdleInTransaction(_) => ("25P03", None),
            ConnError::Upstream { .. } => ("08001", None),
            ConnError::UpstreamFrame(_) | ConnError::UpstreamClosed { .. } => ("08006", None),
            ConnError::StartupTimeout(_) | ConnError::Io { .. } => ("08006", None),
        }
    }

    /// Whether the client can still be told (its side of the socket is not the problem).
    fn tell_client(&self) -> bool {
        !matches!(self, ConnError::Io { what: "read from the client" | "write to the client", .. })
    }
}

/// What a client whose transaction the gate refused is told.
pub(crate) fn refusal_message(r: Refusal) -> &'static str {
    match r {
        Refusal::QueueFull => "the admission queue is full",
        Refusal::Expired => "the transaction waited too long for admission",
        Refusal::WouldNotFinish => "the transaction would not finish before the client gives up",
        Refusal::ShuttingDown => "the gatekeeper is shutting down",
    }
}

/// The SQLSTATE and hint of a refusal: 53300 when the gate cannot take more work now,
/// 53400 when a configured wait limit ran out.
pub(crate) fn refusal_sqlstate(r: Refusal) -> (&'static str, Option<&'static str>) {
    match r {
        Refusal::QueueFull => ("53300", Some("the database is busy; retry later or raise --max-queue-len")),
        Refusal::Expired => ("53400", Some("the queue wait passed --max-queue-wait; retry later")),
        Refusal::WouldNotFinish => {
            ("53400", Some("the wait plus the expected run time exceeds what clients of this type wait"))
        }
        Refusal::ShuttingDown => ("53300", Some("the gatekeeper is shutting down; reconnect to another")),
    }
}

/// What every connection of one [`serve`] shares.
pub(crate) struct Shared<G> {
    config: PgConfig,
    gate: Arc<G>,
    keys: CancelKeys,
    stats: Arc<ServeStats>,
}

/// Counters of a running [`serve`] (tests and the admin view).
#[derive(Debug, Default)]
pub struct ServeStats {
    /// Client connections accepted so far.
    pub accepted: AtomicU64,
    /// Client connections that ended with an error (each is logged).
    pub failed: AtomicU64,
    /// Client connections being served now.
    pub active: AtomicU64,
    /// Connections whose backend's processor time could not be measured under the
    /// processor-time basis (their transactions are sampled at their wall time).
    pub backend_cpu_unmeasured: AtomicU64,
    /// CancelRequests by what became of them, indexed by [`CancelOutcome`].
    pub cancels: [AtomicU64; CancelOutcome::ALL.len()],
}

/// What became of a CancelRequest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CancelOutcome {
    /// Its session's transaction was waiting for admission: taken out of the queue (57014).
    WithdrewQueued,
    /// Relayed to the server (the session's transaction, if any, was running).
    Forwarded,
    /// No connected client holds the key: dropped, as the server would.
    UnknownKey,
    /// The server could not be reached to relay it (logged).
    NotForwarded,
}

impl CancelOutcome {
    pub const ALL: [CancelOutcome; 4] = [
        CancelOutcome::WithdrewQueued,
        CancelOutcome::Forwarded,
        CancelOutcome::UnknownKey,
        CancelOutcome::NotForwarded,
    ];

    /// The `outcome` label of `gatekeeper_pg_cancel_requests_total`.
    pub fn as_str(self) -> &'static str {
        match self {
            CancelOutcome::WithdrewQueued => "withdrew_queued",
            CancelOutcome::Forwarded => "forwarded",
            CancelOutcome::UnknownKey => "unknown_key",
            CancelOutcome::NotForwarded => "not_forwarded",
        }
    }
}

impl ServeStats {
    pub fn count_cancel(&self, outcome: CancelOutcome) {
        self.cancels[outcome as usize].fetch_add(1, Ordering::Relaxed);
    }

    pub fn cancels(&self, outcome: CancelOutcome) -> u64 {
        self.cancels[outcome as usize].load(Ordering::Relaxed)
    }

    /// The counters' families in Prometheus text, appended to the gate's exposition.
    pub fn render(&self) -> String {
        let name = "gatekeeper_pg_cancel_requests_total";
        let mut o = format!("# HELP {name} PostgreSQL CancelRequests by what became of them.\n# TYPE {name} counter\n");
        for c in CancelOutcome::ALL {
            o.push_str(&format!("{name}{{outcome=\"{}\"}} {}\n", c.as_str(), self.cancels(c)));
        }
        let name = "gatekeeper_pg_backend_cpu_unmeasured_total";
        let help =
            "Connections whose backend processor time --estimate-basis cpu could not read (sampled at wall time).";
        let n = self.backend_cpu_unmeasured.load(Ordering::Relaxed);
        o.push_str(&format!("# HELP {name} {help}\n# TYPE {name} counter\n{name} {n}\n"));
        o
    }
}

/// Accepts PostgreSQL clients on `listener` and relays each to its own connection to
/// `config.upstream_addr`, admitting transactions through `gate`, until `shutdown`
/// resolves (then it stops accepting; connections in progress run to their end).
pub async fn serve<G: TxnGate>(
    listener: TcpListener,
    config: PgConfig,
    gate: Arc<G>,
    stats: Arc<ServeStats>,
    shutdown: impl std::future::Future<Output = ()>,
) {
    let slots = Arc::new(Semaphore::new(config.limits.max_clients));
    let shared = Arc::new(Shared { config, gate, keys: CancelKeys::default(), stats: stats.clone() });
    tokio::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            _ = &mut shutdown => return,
            r = listener.accept() => match r {
                Ok(x) => x,
                Err(e) => {
                    // Out of descriptors and the like: wait a little rather than spin.
                    tracing::warn!("accept: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let conn_id = stats.accepted.fetch_add(1, Ordering::Relaxed);
        let (shared, stats) = (shared.clone(), stats.clone());
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            stats.failed.fetch_add(1, Ordering::Relaxed);
            let e = ConnError::TooManyClients(shared.config.limits.max_clients);
            log_end(conn_id, peer, &e);
            tokio::spawn(async move { conn::refuse(&mut { stream }, &e).await });
            continue;
        };
        stats.active.fetch_add(1, Ordering::Relaxed);
        tokio::spawn(async move {
            let r = conn::serve_client(stream, shared, conn_id).await;
            drop(slot);
            stats.active.fetch_sub(1, Ordering::Relaxed);
            if let Err(e) = r {
                stats.failed.fetch_add(1, Ordering::Relaxed);
                log_end(conn_id, peer, &e);
            }
        });
    }
}

fn log_end(conn_id: u64, peer: SocketAddr, e: &ConnError) {
    tracing::info!(conn = conn_id, %peer, "connection ended: {e}");
}
