//! Forward and stream: the client's request body (read ahead while queued), and the
//! upstream's response body, metered to its last byte.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::time::{Instant, Sleep};

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::{Body, Frame, SizeHint};

use super::front::body::{ClientBody, ClientBodyError};
use super::BoxError;
use super::Shared;
use crate::admit::Permit;
use crate::metrics::ProxyOutcome;
use crate::upstream::UpstreamBody;

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
    /// `None` once the client's body has ended (or for a request without one).
    pub(super) rest: Option<ClientBody>,
}

impl RequestBody {
    pub(super) fn new(body: Option<ClientBody>) -> Self {
        RequestBody { buffered: VecDeque::new(), buffered_bytes: 0, rest: body }
    }

    /// Read the body ahead, up to [`PREFETCH_LIMIT_BYTES`]. Resolves only if the body fails
    /// (the client went away mid-body or sent a malformed one); at the end of the body or the
    /// limit it stays pending. Cancel-safe: a frame is buffered as soon as it is read.
    pub(super) async fn watch(&mut self) -> ClientBodyError {
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
    type Error = ClientBodyError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, ClientBodyError>>> {
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
///
/// The permit rides with it: the charge is held until the backend is done with the
/// request (the body's last byte read, or its connection closed), whatever the client
/// does. A client that leaves before the end drops this body; the rest is then read and
/// discarded by a task of its own ([`drain`]) before the charge is released, so the
/// gate never admits past its capacity while the backend still works on abandoned
/// requests.
pub(super) struct Metered {
    /// `None` once handed to [`drain`], or cut. It holds the upstream connection: returned
    /// to the pool at the end of the body, closed if the body fails.
    pub(super) inner: Option<UpstreamBody>,
    pub(super) permit: Option<Permit>,
    pub(super) sent: Instant,
    pub(super) shared: Arc<Shared>,
    pub(super) type_index: usize,
    /// Already in [`drain`]: dropped again (the runtime shutting down), it gives up.
    pub(super) draining: bool,
    /// The client is known to be gone: however it ends, the outcome is `client_gone`.
    pub(super) gone: bool,
    /// The upstream's silence: armed at the first poll that finds no bytes since the last
    /// frame (not at the frame: a client that reads slowly stops the polling, and its
    /// stall is not the upstream's), fires after `upstream_body_timeout`.
    silence: Option<Pin<Box<Sleep>>>,
    silence_armed: bool,
}

/// The proxy cut a response body whose upstream sent nothing for this long.
#[derive(Debug, thiserror::Error)]
#[error("upstream response body silent for {0:?} (--upstream-body-timeout)")]
pub struct BodySilent(pub Duration);

impl Metered {
    pub(super) fn new(inner: UpstreamBody, permit: Permit, sent: Instant, shared: Arc<Shared>) -> Self {
        let type_index = permit.type_index;
        Metered {
            inner: Some(inner),
            permit: Some(permit),
            sent,
            shared,
            type_index,
            draining: false,
            gone: false,
            silence: None,
            silence_armed: false,
        }
    }

    /// The backend finished the response: return the connection, learn the sample,
    /// release the charge. The outcome is `ok` when the client got it all, else `client_gone`.
    pub(super) fn complete(&mut self, outcome: ProxyOutcome) {
        if let Some(c) = self.inner.take().and_then(UpstreamBody::into_reusable) {
            self.shared.pool.put_back(c);
        }
        if let Some(p) = self.permit.take() {
            let us = self.sent.elapsed().as_micros() as u64;
            let tm = &self.shared.adm.metrics.types[self.type_index];
            tm.observe_upstream_us(us);
            tm.count(outcome);
            p.finish(Some(us));
        }
    }

    pub(super) fn fail(&mut self, outcome: ProxyOutcome) {
        self.inner = None;
        if let Some(p) = self.permit.take() {
            self.shared.adm.metrics.types[self.type_index].count(outcome);
            drop(p);
        }
    }

    /// Called when the upstream has no bytes ready: arms the silence timer on the first
    /// such poll since the last frame; true once it has run out.
    fn upstream_went_silent(&mut self, cx: &mut Context<'_>) -> bool {
        if !self.silence_armed {
            let deadline = Instant::now() + self.shared.cfg.upstream_body_timeout;
            match self.silence.as_mut() {
                Some(s) => s.as_mut().reset(deadline),
                None => self.silence = Some(Box::pin(tokio::time::sleep_until(deadline))),
            }
            self.silence_armed = true;
        }
        self.silence.as_mut().is_some_and(|s| s.as_mut().poll(cx).is_ready())
    }

    fn at_end(&self) -> bool {
        self.inner.as_ref().map_or(true, UpstreamBody::is_end_stream)
    }
}

impl Body for Metered {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        let Some(inner) = this.inner.as_mut() else { return Poll::Ready(None) };
        match Pin::new(inner).poll_frame(cx) {
            Poll::Pending if this.upstream_went_silent(cx) => {
                let limit = this.shared.cfg.upstream_body_timeout;
                tracing::warn!("upstream response body silent for {limit:?} (--upstream-body-timeout): response cut");
                // Dropping the body and the connection closes it: the backend's signal.
                this.inner = None;
                this.fail(ProxyOutcome::Timeout);
                Poll::Ready(Some(Err(BodySilent(limit).into())))
            }
            Poll::Pending => Poll::Pending,
            Poll::Ready(None) => {
                this.complete(ProxyOutcome::Ok);
                Poll::Ready(None)
            }
            Poll::Ready(Some(Err(e))) => {
                tracing::warn!("upstream response body failed: {e}");
                this.fail(ProxyOutcome::UpstreamError);
                Poll::Ready(Some(Err(e.into())))
            }
            Poll::Ready(Some(Ok(frame))) => {
                this.silence_armed = false;
                if this.at_end() {
                    this.complete(ProxyOutcome::Ok);
                }
                Poll::Ready(Some(Ok(frame)))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.at_end()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.as_ref().map_or_else(|| SizeHint::with_exact(0), Body::size_hint)
    }
}

impl Drop for Metered {
    fn drop(&mut self) {
        if self.permit.is_none() {
            return;
        }
        if self.at_end() {
            // Empty bodies (HEAD, 204, 304, Content-Length: 0) are never polled.
            self.complete(if self.gone { ProxyOutcome::ClientGone } else { ProxyOutcome::Ok });
            return;
        }
        // The client left before the end: the backend may still be producing the
        // response. Keep the charge until it is done.
        match tokio::runtime::Handle::try_current() {
            Ok(rt) if !self.draining => {
                let rest = Metered {
                    inner: self.inner.take(),
                    permit: self.permit.take(),
                    sent: self.sent,
                    shared: self.shared.clone(),
                    type_index: self.type_index,
                    draining: true,
                    gone: true,
                    silence: None,
                    silence_armed: false,
                };
                rt.spawn(drain(rest));
            }
            // No runtime, or the drain itself dropped (the proxy is being torn down):
            // nothing can read the rest; closing the connection tells the backend.
            _ => self.fail(ProxyOutcome::ClientGone),
        }
    }
}

/// Read an abandoned response to its end and discard it, then release its charge (with
/// its sample: the backend did the whole work). Bounded by the upstream timeout in all and
/// by the body timeout between two reads: past either the connection is closed, which is
/// the backend's signal to stop, and the charge goes.
async fn drain(mut rest: Metered) {
    let limit = rest.shared.cfg.upstream_timeout;
    let silence = rest.shared.cfg.upstream_body_timeout;
    let read_all = async {
        while let Some(inner) = rest.inner.as_mut() {
            match tokio::time::timeout(silence, inner.frame()).await {
                Ok(None) => return true,
                Err(_) | Ok(Some(Err(_))) => return false,
                Ok(Some(Ok(_))) if inner.is_end_stream() => return true,
                Ok(Some(Ok(_))) => {}
            }
        }
        true
    };
    match tokio::time::timeout(limit, read_all).await {
        Ok(true) => rest.complete(ProxyOutcome::ClientGone),
        Ok(false) | Err(_) => rest.fail(ProxyOutcome::ClientGone),
    }
}
