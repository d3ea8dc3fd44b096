//! Kept-alive HTTP/1.1 connections to the one upstream, reused request after request, and
//! the client that speaks HTTP/1.1 on them.
//!
//! Why a client of our own rather than hyper's: hyper's `client::conn` runs every
//! connection as a task of its own, reached through channels (the request in, the response
//! head and each body chunk out), so a request costs that task's wake-ups and the channels'
//! hand-offs on top of the I/O; hyper-util's pooled client adds a task per request that
//! waits for the connection to become idle. Here the exchange is plain I/O on the
//! caller's task: the request head is written in one piece ([`wire`]), the response head
//! parsed with httparse, the body read by [`UpstreamBody`] as the proxy polls it (framed
//! by Content-Length, chunked coding or the connection's close). The caller hands the
//! connection back itself, at the response's last byte ([`UpstreamPool::put_back`]), when
//! the proxy already knows the exchange is complete; a connection whose response was
//! abandoned is never reused.
//!
//! Limits: a response head (and a trailer section) of at most [`wire::MAX_HEAD_BYTES`]
//! and [`wire::MAX_HEADERS`] fields, a chunk-size line of at most
//! [`chunked::MAX_CHUNK_LINE_BYTES`]; beyond them the exchange fails (502, or the body
//! cut). Bodies stream through in reads of at most [`conn::READ_CHUNK_BYTES`].
//!
//! Limits: at most `max_idle` idle connections are kept (more are closed when handed
//! back); an idle connection older than [`IDLE_TIMEOUT`] is closed when next looked at.
//!
//! A [`Conn`] owns its socket: dropped instead of handed back (a failed, cut or abandoned
//! exchange), the socket is closed at once: the close is the upstream's signal to stop
//! working on the request. An idle connection the upstream has closed is noticed when it is
//! next looked at (taken for a request, or counted for the metrics) and dropped then.
//!
//! Retries (the keep-alive race: an upstream may close an idle connection just as a
//! request is sent on it): a request that fails on a reused connection is sent once more
//! on a new connection when none of it was written, or when it was written but the
//! connection then closed or reset before any byte of a response and the request is a
//! `GET`, `HEAD`, `OPTIONS` or `TRACE` without a body (safe to repeat, RFC 9110 §9.2.2;
//! nginx does the same). No other request is retried: a `POST` the upstream may have
//! acted on gets 502.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::Duration;

use bytes::Bytes;
use hyper::http::uri::Authority;
use tokio::net::TcpStream;
use tokio::time::Instant;

use crate::metrics::OpenCount;
use crate::proxy::RequestBody;

mod body;
pub mod chunked;
mod conn;
pub mod wire;

pub use body::{BodyError, UpstreamBody};
pub use conn::Conn;
use conn::Failed;

/// Idle connections older than this are closed instead of reused.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(90);

/// Why an upstream exchange failed (all answered 502 by the proxy, but
/// [`UpstreamError::RequestBody`], the client's fault, 400).
#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    #[error("connecting to {0}: {1}")]
    Connect(String, std::io::Error),
    #[error("connecting to {0}: timed out")]
    ConnectTimeout(String),
    #[error("upstream connection: {0}")]
    Io(std::io::Error),
    #[error("upstream closed the connection before any byte of a response")]
    Closed,
    #[error("upstream closed the connection within the response head")]
    ClosedInHead,
    #[error("upstream sent a bad response head: {0}")]
    Head(wire::HeadError),
    #[error("the client's request body failed while forwarded: {0}")]
    RequestBody(crate::proxy::ClientBodyError),
}

/// A request to send: its head encoded for the upstream, and its body.
pub struct Outgoing {
    /// The request head as it goes on the wire (origin-form target, HTTP/1.1).
    pub head: Bytes,
    /// How the body is framed on the wire (the head says so).
    pub framing: wire::Framing,
    /// Safe to send again after the connection failed with no response (see the module
    /// docs): a `GET`, `HEAD`, `OPTIONS` or `TRACE` without a body.
    pub repeatable: bool,
    /// A `HEAD` request: its response has no body, whatever its head says.
    pub head_request: bool,
    pub body: RequestBody,
}

impl Outgoing {
    /// The request line, for log lines.
    pub fn request_line(&self) -> RequestLine {
        request_line(&self.head)
    }
}

fn request_line(head: &Bytes) -> RequestLine {
    let end = head.iter().position(|&b| b == b'\r').unwrap_or(head.len());
    RequestLine(head.slice(..end))
}

/// A request line, shown as text.
pub struct RequestLine(Bytes);

impl std::fmt::Display for RequestLine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&String::from_utf8_lossy(&self.0))
    }
}

pub struct UpstreamPool {
    authority: Authority,
    connect_timeout: Duration,
    max_idle: usize,
    /// Most recently returned last: reusing the warmest connection first lets the others
    /// age out.
    idle: Mutex<Vec<(Conn, Instant)>>,
    /// Connections open: each [`Conn`] counts itself until it is dropped.
    open: OpenCount,
    /// Requests sent once more on a new connection (see the module docs).
    retries: AtomicU64,
}

impl UpstreamPool {
    pub fn new(authority: Authority, connect_timeout: Duration, max_idle: usize) -> Self {
        UpstreamPool {
            authority,
            connect_timeout,
            max_idle,
            idle: Mutex::new(Vec::new()),
            open: OpenCount::default(),
            retries: AtomicU64::new(0),
        }
    }

    /// Upstream connections open now, in use or idle.
    pub fn open_connections(&self) -> usize {
        self.open.get()
    }

    /// Idle connections kept for reuse; those the upstream has closed meanwhile are dropped
    /// from the list (and closed) first.
    pub fn idle_connections(&self) -> usize {
        let mut idle = self.idle();
        idle.retain(|(c, _)| !c.peer_closed());
        idle.len()
    }

    /// Requests sent once more on a new connection.
    pub fn retries(&self) -> u64 {
        self.retries.load(Relaxed)
    }

    fn idle(&self) -> std::sync::MutexGuard<'_, Vec<(Conn, Instant)>> {
        // Only pushes and pops happen under the lock: recover rather than poison.
        self.idle.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// An idle connection that is still open, if any.
    fn take_idle(&self) -> Option<Conn> {
        let now = Instant::now();
        loop {
            let (conn, since) = self.idle().pop()?;
            if now.duration_since(since) < IDLE_TIMEOUT && !conn.peer_closed() {
                return Some(conn);
            }
        }
    }

    async fn connect(&self) -> Result<Conn, UpstreamError> {
        let addr = self.authority.as_str();
        let stream = match tokio::time::timeout(self.connect_timeout, TcpStream::connect(addr)).await {
            Err(_) => return Err(UpstreamError::ConnectTimeout(addr.to_string())),
            Ok(Err(e)) => return Err(UpstreamError::Connect(addr.to_string(), e)),
            Ok(Ok(s)) => s,
        };
        // Requests and responses are small writes each answered by the peer: never hold
        // one back waiting for an ACK (Nagle).
        let _ = stream.set_nodelay(true);
        Ok(Conn::new(stream, self.open.open()))
    }

    /// Send `req` and return the response head; its body holds the connection. The caller
    /// bounds the whole exchange with its own timeout.
    pub async fn send(&self, req: Outgoing) -> Result<(wire::ResponseHead, UpstreamBody), UpstreamError> {
        let Outgoing { head, framing, repeatable, head_request, mut body } = req;
        if let Some(conn) = self.take_idle() {
            match conn.exchange(&head, &mut body, framing, head_request).await {
                Ok(resp) => return Ok(resp),
                // Not written at all: the connection was closing.
                Err(Failed { unsent: true, .. }) => {}
                Err(Failed { closed_before_response: true, .. }) if repeatable => {
                    tracing::debug!("upstream closed a reused connection on {}: sending it again", request_line(&head));
                }
                Err(f) => return Err(f.error),
            }
            self.retries.fetch_add(1, Relaxed);
        }
        // Boxed: connecting is a large state, and most requests reuse a connection.
        let conn = Box::pin(self.connect()).await?;
        conn.exchange(&head, &mut body, framing, head_request).await.map_err(|f| f.error)
    }

    /// Return a connection whose response was read to its end.
    pub fn put_back(&self, conn: Conn) {
        let mut idle = self.idle();
        if idle.len() < self.max_idle {
            idle.push((conn, Instant::now()));
        }
    }
}
