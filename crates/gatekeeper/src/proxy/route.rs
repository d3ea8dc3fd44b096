//! One request's way through: classify, arrive at the gate, wait for a grant (or a 503),
//! forward upstream, hand the metered response back.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use tokio::time::Instant;

use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::header::{self, HeaderValue};
use hyper::http::uri::PathAndQuery;
use hyper::{Request, Response, StatusCode};
use shortfirst_core::admission::{Charge, RequestId};
use tokio::sync::oneshot;

use super::grant::{Grant, Permit, Shared, WaitGuard};
use super::headers::{add_forwarding, strip_hop_by_hop};
use super::reply::{text_response, unavailable};
use super::stream::{Metered, RequestBody};
use super::ProxyBody;
use crate::busypoll::BusyPoll;
use crate::metrics::ProxyOutcome;

/// Serve one client request: classify, admit (at once or after waiting), forward.
pub(super) async fn handle(
    shared: Arc<Shared>,
    peer: SocketAddr,
    req: Request<Incoming>,
) -> Result<Response<ProxyBody>, Infallible> {
    // A shared-buffer clone, not a copy: it becomes the upstream URI's path as it is.
    let pq = req.uri().path_and_query().cloned().unwrap_or_else(|| PathAndQuery::from_static("/"));
    let type_index = shared.classifier.classify(req.method().as_str(), pq.as_str(), req.headers());
    let (parts, body) = req.into_parts();
    let mut body = RequestBody::new(body);
    let (permit, waited_us) = match admit(&shared, type_index, &mut body).await {
        Ok(p) => p,
        Err(refusal) => return Ok(refusal),
    };
    shared.metrics.admitted.fetch_add(1, Relaxed);
    shared.metrics.types[type_index].queue_wait.observe_us(waited_us);
    Ok(forward(&shared, peer, &pq, parts, body, permit, type_index).await)
}

/// Arrive at the gate; if not admitted at once, wait for a grant. `Err`: the answer to
/// give instead (503 when the queue is full or the wait too long, 400 when the request
/// body failed while queued).
async fn admit(
    shared: &Arc<Shared>,
    type_index: usize,
    body: &mut RequestBody,
) -> Result<(Permit, u64), Response<ProxyBody>> {
    let tm = &shared.metrics.types[type_index];
    let (own, deliveries, wake, rx) = {
        let mut core = shared.lock();
        let now = shared.now_us();
        // A probe re-measures a type sjf has not admitted for a while (core::admission,
        // "Re-sampling").
        let charge = core
            .estimator
            .charge(type_index, now)
            .unwrap_or(Charge { cost_us: core.estimator.config().cold_cost_us, probe: false });
        let arrived = if charge.probe {
            tm.probes.fetch_add(1, Relaxed);
            core.gate.arrive_probe(now, charge.cost_us)
        } else {
            core.gate.arrive(now, charge.cost_us)
        };
        let Ok((id, admitted)) = arrived else {
            drop(core);
            shared.metrics.rejected_queue_full.fetch_add(1, Relaxed);
            tm.count(ProxyOutcome::Rejected);
            return Err(unavailable(shared, "gatekeeper: admission queue full"));
        };
        let (own, deliveries) = shared.route(&mut core, admitted, Some((id, type_index)));
        let rx = if own.is_none() {
            let (tx, rx) = oneshot::channel();
            core.waiters.insert(id, (tx, type_index));
            if let Some(a) = core.auto.as_mut() {
                a.note_saturated();
            }
            Some((id, rx))
        } else {
            None
        };
        (own, deliveries, core.timer_moved_earlier(), rx)
    };
    Shared::deliver(deliveries);
    if wake {
        shared.wake.notify_one();
    }
    match (own, rx) {
        (Some(p), _) => Ok(p),
        (None, Some((id, rx))) => wait_for_grant(shared, type_index, id, rx, body).await,
        (None, None) => unreachable!("either admitted or waiting"),
    }
}

/// Wait in the queue for a grant. While queued, read the request body ahead (bounded): a
/// client that goes away mid-body is only noticed by reading it. Returning early (or being
/// dropped with the client) drops the armed guard, which takes the request out of the queue.
async fn wait_for_grant(
    shared: &Arc<Shared>,
    type_index: usize,
    id: RequestId,
    mut rx: oneshot::Receiver<Grant>,
    body: &mut RequestBody,
) -> Result<(Permit, u64), Response<ProxyBody>> {
    let tm = &shared.metrics.types[type_index];
    let mut guard = WaitGuard { shared: shared.clone(), id, armed: true };
    let grant = tokio::select! {
        grant = &mut rx => grant,
        e = body.watch() => {
            tracing::debug!("client body failed while queued: {e}");
            return Err(text_response(StatusCode::BAD_REQUEST, "gatekeeper: request body failed while queued"));
        }
    };
    guard.armed = false;
    match grant {
        Ok(Grant::Admitted { permit, waited_us }) => Ok((permit, waited_us)),
        Ok(Grant::Expired) => {
            shared.metrics.rejected_queue_wait.fetch_add(1, Relaxed);
            tm.count(ProxyOutcome::Rejected);
            Err(unavailable(shared, "gatekeeper: waited too long for admission"))
        }
        Err(_) => {
            // The sender was dropped without a grant: only at shutdown.
            tm.count(ProxyOutcome::Rejected);
            Err(unavailable(shared, "gatekeeper: shutting down"))
        }
    }
}

/// Send the admitted request upstream and hand back its response, metered: the permit
/// rides with the response body and is released at its end.
async fn forward(
    shared: &Arc<Shared>,
    peer: SocketAddr,
    pq: &PathAndQuery,
    mut parts: hyper::http::request::Parts,
    body: RequestBody,
    permit: Permit,
    type_index: usize,
) -> Response<ProxyBody> {
    let tm = &shared.metrics.types[type_index];
    parts.uri = match shared.cfg.upstream.target_for(pq) {
        Ok(u) => u,
        Err(_) => {
            tm.count(ProxyOutcome::UpstreamError);
            return text_response(StatusCode::BAD_REQUEST, "gatekeeper: bad request target");
        }
    };
    parts.version = hyper::Version::HTTP_11;
    strip_hop_by_hop(&mut parts.headers);
    add_forwarding(&mut parts.headers, peer);
    if let Ok(h) = HeaderValue::from_str(shared.cfg.upstream.authority.as_str()) {
        parts.headers.insert(header::HOST, h);
    }
    let upstream_req = Request::from_parts(parts, body);
    let sent = Instant::now();
    let polling = shared.busy.as_deref().map(BusyPoll::upstream_wait);
    let result = tokio::time::timeout(shared.cfg.upstream_timeout, shared.pool.send(upstream_req)).await;
    drop(polling);
    let (resp, conn) = match result {
        Err(_) => {
            tm.count(ProxyOutcome::Timeout);
            return text_response(StatusCode::GATEWAY_TIMEOUT, "gatekeeper: upstream timed out");
        }
        Ok(Err(e)) => {
            tracing::debug!("upstream: {e:?}");
            tm.count(ProxyOutcome::UpstreamError);
            return text_response(StatusCode::BAD_GATEWAY, "gatekeeper: upstream failed");
        }
        Ok(Ok(r)) => r,
    };
    let (mut parts, body) = resp.into_parts();
    strip_hop_by_hop(&mut parts.headers);
    let metered =
        Metered { inner: body, permit: Some(permit), conn: Some(conn), sent, shared: shared.clone(), type_index };
    Response::from_parts(parts, metered.boxed_unsync())
}
