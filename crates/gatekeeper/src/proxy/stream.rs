//! Forward and stream: the client's request body (read ahead while queued), and the
//! upstream's response body, metered to its last byte.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::time::Instant;

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::{Body, Frame, Incoming, SizeHint};

use super::grant::{Permit, Shared};
use crate::metrics::ProxyOutcome;
use crate::upstream::Conn;

/// Request body bytes read ahead while a request waits for admission, at most this many
/// per request. A body still arriving beyond this is left unread (backpressure on that
/// client) until admission; a disconnect is then noticed when forwarding, which fails at
/// once and releases the charge.
pub const PREFETCH_LIMIT_BYTES: usize = 64 * 1024;

/// The client's request body: frames read ahead while queued ([`RequestBody::watch`]),
/// then the rest of the stream.
pub struct RequestBody {
    pub(super) buffered: VecDeque<Frame<Bytes>>,
    pub(super) buffered_bytes: usize,
    /// `None` once the client's body has ended.
    pub(super) rest: Option<Incoming>,
}

impl RequestBody {
    pub(super) fn new(body: Incoming) -> Self {
        RequestBody { buffered: VecDeque::new(), buffered_bytes: 0, rest: Some(body) }
    }

    /// Read the body ahead, up to [`PREFETCH_LIMIT_BYTES`]. Resolves only if the body fails
    /// (the client went away mid-body or sent a malformed one); at the end of the body or the
    /// limit it stays pending. Cancel-safe: a frame is buffered as soon as it is read.
    pub(super) async fn watch(&mut self) -> hyper::Error {
        loop {
            let rest = match self.rest.as_mut() {
                Some(r) if !r.is_end_stream() && self.buffered_bytes < PREFETCH_LIMIT_BYTES => r,
                _ => return std::future::pending().await,
            };
            match rest.frame().await {
                None => self.rest = None,
                Some(Ok(f)) => {
                    self.buffered_bytes += f.data_ref().map_or(0, Bytes::len);
                    self.buffered.push_back(f);
                }
                Some(Err(e)) => return e,
            }
        }
    }
}

impl Body for RequestBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        if let Some(f) = self.buffered.pop_front() {
            return Poll::Ready(Some(Ok(f)));
        }
        match self.rest.as_mut() {
            Some(b) => Pin::new(b).poll_frame(cx),
            None => Poll::Ready(None),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.buffered.is_empty() && self.rest.as_ref().map_or(true, Body::is_end_stream)
    }

    fn size_hint(&self) -> SizeHint {
        let buffered: u64 = self.buffered.iter().filter_map(Frame::data_ref).map(|d| d.len() as u64).sum();
        match &self.rest {
            None => SizeHint::with_exact(buffered),
            Some(b) => {
                let h = b.size_hint();
                let mut out = SizeHint::new();
                out.set_lower(h.lower() + buffered);
                if let Some(u) = h.upper() {
                    out.set_upper(u + buffered);
                }
                out
            }
        }
    }
}

/// The upstream response body, relayed frame by frame; its end is the measurement point,
/// and the moment its connection can serve another request.
pub(super) struct Metered {
    pub(super) inner: Incoming,
    pub(super) permit: Option<Permit>,
    /// Returned to the pool at the end of the body; closed if the body is abandoned or fails.
    pub(super) conn: Option<Conn>,
    pub(super) sent: Instant,
    pub(super) shared: Arc<Shared>,
    pub(super) type_index: usize,
}

impl Metered {
    pub(super) fn complete(&mut self) {
        if let Some(c) = self.conn.take() {
            self.shared.pool.put_back(c);
        }
        if let Some(p) = self.permit.take() {
            let us = self.sent.elapsed().as_micros() as u64;
            let tm = &self.shared.metrics.types[self.type_index];
            tm.upstream.observe_us(us);
            tm.count(ProxyOutcome::Ok);
            p.finish(Some(us));
        }
    }

    pub(super) fn fail(&mut self, outcome: ProxyOutcome) {
        self.conn = None;
        if let Some(p) = self.permit.take() {
            self.shared.metrics.types[self.type_index].count(outcome);
            drop(p);
        }
    }
}

impl Body for Metered {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let this = &mut *self;
        let r = Pin::new(&mut this.inner).poll_frame(cx);
        match &r {
            Poll::Ready(None) => this.complete(),
            Poll::Ready(Some(Err(_))) => this.fail(ProxyOutcome::UpstreamError),
            Poll::Ready(Some(Ok(_))) if this.inner.is_end_stream() => this.complete(),
            _ => {}
        }
        r
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl Drop for Metered {
    fn drop(&mut self) {
        if self.permit.is_some() {
            if self.inner.is_end_stream() {
                // Empty bodies (HEAD, 204, 304, Content-Length: 0) are never polled.
                self.complete();
            } else {
                self.fail(ProxyOutcome::ClientGone);
            }
        }
    }
}
