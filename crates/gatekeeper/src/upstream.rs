//! Kept-alive HTTP/1.1 connections to the one upstream, reused request after request.
//!
//! Why not hyper-util's pooled client: for every HTTP/1 request whose response body is
//! still to stream (all of ours), it spawns a task that waits until the connection is idle
//! again and only then returns it to the pool (a task spawn, two extra polls and a pool
//! lock with a hashed key per request). Here the caller hands the connection back itself,
//! at the response's last byte ([`UpstreamPool::put_back`]), when the proxy already knows
//! the exchange is complete; a connection whose response was abandoned is never reused.
//!
//! Limits: at most `max_idle` idle connections are kept (more are closed when handed
//! back); an idle connection older than [`IDLE_TIMEOUT`] is closed when next looked at.
//!
//! A [`Conn`] owns its connection: dropped instead of handed back (a failed, cut or
//! abandoned exchange), its task is aborted and the socket closed at once, rather than left
//! for hyper's connection task to wind down on its own: the close is the upstream's signal
//! to stop working on the request.
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

use hyper::body::Incoming;
use hyper::client::conn::http1::{self, SendRequest};
use hyper::http::uri::Authority;
use hyper::{Method, Request, Response};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tokio::time::Instant;

use crate::metrics::OpenCount;
use crate::proxy::RequestBody;

/// Idle connections older than this are closed instead of reused.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(90);

/// Why an upstream exchange failed (all answered 502 by the proxy).
#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    #[error("connecting to {0}: {1}")]
    Connect(String, std::io::Error),
    #[error("connecting to {0}: timed out")]
    ConnectTimeout(String),
    #[error("HTTP/1.1 handshake with {0}: {1}")]
    Handshake(String, hyper::Error),
    #[error("upstream exchange: {0}")]
    Exchange(hyper::Error),
}

/// A connection checked out for one exchange. Hand it back with [`UpstreamPool::put_back`]
/// once the response has been read to its end; dropping it instead closes it.
pub struct Conn {
    sender: SendRequest<RequestBody>,
    /// The connection's task, aborted (closing the socket) when the connection is dropped.
    task: tokio::task::AbortHandle,
}

impl Drop for Conn {
    fn drop(&mut self) {
        self.task.abort();
    }
}

pub struct UpstreamPool {
    authority: Authority,
    connect_timeout: Duration,
    max_idle: usize,
    /// Most recently returned last: reusing the warmest connection first lets the others
    /// age out.
    idle: Mutex<Vec<(Conn, Instant)>>,
    /// Connections open: each connection's task counts itself until the connection ends.
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
    /// from the list first.
    pub fn idle_connections(&self) -> usize {
        let mut idle = self.idle();
        idle.retain(|(c, _)| !c.sender.is_closed());
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
            if !conn.sender.is_closed() && now.duration_since(since) < IDLE_TIMEOUT {
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
        let (sender, conn) =
            http1::handshake(TokioIo::new(stream)).await.map_err(|e| UpstreamError::Handshake(addr.to_string(), e))?;
        let peer = addr.to_string();
        let open = self.open.open();
        let task = tokio::spawn(async move {
            let _open = open;
            // Ends when the upstream closes, on an I/O error, when the last sender is
            // dropped while the connection is idle, or aborted by `Conn`'s drop.
            if let Err(e) = conn.await {
                tracing::debug!("upstream connection {peer}: {e}");
            }
        });
        Ok(Conn { sender, task: task.abort_handle() })
    }

    /// Send `req` (origin-form target) and return the response head with the connection it
    /// came on. The caller bounds the whole exchange with its own timeout.
    pub async fn send(&self, mut req: Request<RequestBody>) -> Result<(Response<Incoming>, Conn), UpstreamError> {
        if let Some(mut conn) = self.take_idle() {
            // Ready at once unless its previous response's end has not been processed by the
            // connection task yet (a few polls on this runtime).
            if conn.sender.ready().await.is_ok() {
                let again = repeatable(&req);
                match conn.sender.try_send_request(req).await {
                    Ok(resp) => return Ok((resp, conn)),
                    Err(mut e) => match (e.take_message(), again) {
                        // Not written at all: the connection was closing.
                        (Some(r), _) => req = r,
                        (None, Some(r)) if closed_before_a_response(e.error()) => {
                            tracing::debug!(
                                "upstream closed a reused connection on {} {}: sending it again",
                                r.method(),
                                r.uri()
                            );
                            req = r;
                        }
                        (None, _) => return Err(UpstreamError::Exchange(e.into_error())),
                    },
                }
                self.retries.fetch_add(1, Relaxed);
            }
        }
        let mut conn = self.connect().await?;
        conn.sender.ready().await.map_err(UpstreamError::Exchange)?;
        let resp = conn.sender.send_request(req).await.map_err(UpstreamError::Exchange)?;
        Ok((resp, conn))
    }

    /// Return a connection whose response was read to its end.
    pub fn put_back(&self, conn: Conn) {
        if conn.sender.is_closed() {
            return;
        }
        let mut idle = self.idle();
        if idle.len() < self.max_idle {
            idle.push((conn, Instant::now()));
        }
    }
}

/// A copy of `req` to send again if the connection closes before answering: only a safe
/// method (RFC 9110 §9.2.1) without a body, whose repetition changes nothing.
fn repeatable(req: &Request<RequestBody>) -> Option<Request<RequestBody>> {
    let safe = matches!(*req.method(), Method::GET | Method::HEAD | Method::OPTIONS | Method::TRACE);
    if !safe || !hyper::body::Body::is_end_stream(req.body()) {
        return None;
    }
    let mut copy = Request::new(RequestBody::empty());
    *copy.method_mut() = req.method().clone();
    *copy.uri_mut() = req.uri().clone();
    *copy.version_mut() = req.version();
    *copy.headers_mut() = req.headers().clone();
    Some(copy)
}

/// The connection ended (closed or reset) before any byte of a response: the upstream
/// closed it as the request arrived, not an answer gone wrong.
fn closed_before_a_response(e: &hyper::Error) -> bool {
    let mut source = std::error::Error::source(e);
    let mut io_reset = false;
    while let Some(s) = source {
        if let Some(io) = s.downcast_ref::<std::io::Error>() {
            io_reset |= matches!(
                io.kind(),
                std::io::ErrorKind::ConnectionReset
                    | std::io::ErrorKind::ConnectionAborted
                    | std::io::ErrorKind::BrokenPipe
            );
        }
        source = s.source();
    }
    e.is_incomplete_message() || e.is_canceled() || io_reset
}
