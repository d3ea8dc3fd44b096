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
use crate::upstream::UpstreamError;

/// Serve one client request: classify, admit (at once or after waiting), forward.
pub(super) async fn handle(
    shared: Arc<Shared>,
    peer: SocketAddr,
    req: Request<Incoming>,
) -> Result<Response<ProxyBody>, Infallible> {
    // A shared-buffer clone, not a copy: it becomes the upstream URI's path as it is.
    let pq = req.uri().path_and_query().cloned().unwrap_or_else(|| PathAndQuery::from_static("/"));
    let type_index = shared.classifier.classify(req.method().as_str(), pq.as_str(), req.headers());
    let arrived = Instant::now();
    let (parts, body) = req.into_parts();
    let method = parts.method.clone();
    let mut body = RequestBody::new(body);
    let (resp, waited_us) = match admit(&shared, type_index, &mut body).await {
        Err(refusal) => (refusal, None),
        Ok((permit, waited_us)) => {
            shared.metrics.admitted.fetch_add(1, Relaxed);
            shared.metrics.types[type_index].queue_wait.observe_us(waited_us);
            (forward(&shared, peer, &pq, parts, body, permit, type_index).await, Some(waited_us))
        }
    };
    // The access log: one line per response head (`RUST_LOG=access=info`, or --access-log).
    tracing::info!(
        target: "access",
        "{peer} \"{method} {pq}\" {} type={:?} wait_ms={} head_ms={:.1}",
        resp.status().as_u16(),
        shared.classifier.type_name(type_index).unwrap_or_default(),
        waited_us.map_or_else(|| "-".to_string(), |w| format!("{:.1}", w as f64 / 1e3)),
        arrived.elapsed().as_secs_f64() * 1e3,
    );
    Ok(resp)
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
        if core.shutting_down {
            drop(core);
            tm.count(ProxyOutcome::Rejected);
            return Err(unavailable(shared, "gatekeeper: shutting down"));
        }
        let now = shared.now_us();
        // A probe re-measures a type sjf has not admitted for a while (core::admission,
        // "Re-sampling").
        let charge = core
            .estimator
            .charge(type_index, now)
            .unwrap_or(Charge { cost_us: core.estimator.config().cold_cost_us, probe: false });
        let arrived = if charge.probe {
            tm.probes.fetch_add(1, Relaxed);
            core.gate.arrive_probe_in(now, type_index as u64, charge.cost_us)
        } else {
            // The type is the request's class: within a type, first come, first served
            // (core::admission, "Classes").
            core.gate.arrive_in(now, type_index as u64, charge.cost_us)
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
        Ok(Grant::ShuttingDown) => {
            tm.count(ProxyOutcome::Rejected);
            Err(unavailable(shared, "gatekeeper: shutting down"))
        }
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
/// rides with the response body and is released at its end. The exchange runs in a task
/// of its own, apart from the client's connection: a client that leaves while the backend
/// works does not take the charge away with it (the task reads the response to its end).
async fn forward(
    shared: &Arc<Shared>,
    peer: SocketAddr,
    pq: &PathAndQuery,
    mut parts: hyper::http::request::Parts,
    body: RequestBody,
    permit: Permit,
    type_index: usize,
) -> Response<ProxyBody> {
    parts.uri = match shared.cfg.upstream.target_for(pq) {
        Ok(u) => u,
        Err(e) => {
            tracing::warn!("400 {pq}: cannot be forwarded under the upstream's prefix: {e}");
            shared.metrics.types[type_index].count(ProxyOutcome::UpstreamError);
            return text_response(StatusCode::BAD_REQUEST, "gatekeeper: bad request target");
        }
    };
    parts.version = hyper::Version::HTTP_11;
    strip_hop_by_hop(&mut parts.headers);
    add_forwarding(&mut parts.headers, peer);
    // The client's Host is kept (as reverse proxies do, so an application that builds
    // absolute links keeps its users on the gatekeeper), unless --rewrite-host; a request
    // without one (HTTP/1.0) gets the upstream's.
    if shared.cfg.rewrite_host || !parts.headers.contains_key(header::HOST) {
        if let Ok(h) = HeaderValue::from_str(shared.cfg.upstream.authority.as_str()) {
            parts.headers.insert(header::HOST, h);
        }
    }
    let (tx, rx) = oneshot::channel();
    tokio::spawn(exchange(shared.clone(), Request::from_parts(parts, body), permit, type_index, tx));
    rx.await.unwrap_or_else(|_| text_response(StatusCode::BAD_GATEWAY, "gatekeeper: upstream exchange failed"))
}

/// One upstream exchange, holding the permit. Not started if the client has already gone
/// (it would be work nobody waits for); once started, carried to the response head even if
/// the client leaves, whose abandoned body then drains (`stream::Metered`).
async fn exchange(
    shared: Arc<Shared>,
    req: Request<RequestBody>,
    permit: Permit,
    type_index: usize,
    reply: oneshot::Sender<Response<ProxyBody>>,
) {
    let tm = &shared.metrics.types[type_index];
    if reply.is_closed() {
        tm.count(ProxyOutcome::ClientGone);
        tracing::debug!("{} {}: client gone before it was sent upstream; not started", req.method(), req.uri());
        return; // the permit's drop releases the charge
    }
    let what = format!("{} {}", req.method(), req.uri());
    let sent = Instant::now();
    let polling = shared.busy.as_deref().map(BusyPoll::upstream_wait);
    let result = tokio::time::timeout(shared.cfg.upstream_timeout, shared.pool.send(req)).await;
    drop(polling);
    let resp = match result {
        Err(_) => {
            drop(permit); // the connection is closed with the send: the backend's signal
            tm.count(ProxyOutcome::Timeout);
            tracing::warn!(
                "504 {what}: no response head from the upstream within {:?} (--upstream-timeout)",
                shared.cfg.upstream_timeout
            );
            text_response(StatusCode::GATEWAY_TIMEOUT, "gatekeeper: upstream timed out")
        }
        Ok(Err(UpstreamError::Exchange(e))) if e.is_user() => {
            // The client's body failed while it was forwarded: the client left mid-body or
            // sent a malformed one. Not the upstream's fault; its connection is closed.
            drop(permit);
            tm.count(ProxyOutcome::ClientGone);
            tracing::debug!("{what}: request body failed while forwarded: {e}");
            text_response(StatusCode::BAD_REQUEST, "gatekeeper: request body failed")
        }
        Ok(Err(e)) => {
            drop(permit);
            tm.count(ProxyOutcome::UpstreamError);
            tracing::warn!("502 {what}: {e}");
            text_response(StatusCode::BAD_GATEWAY, "gatekeeper: upstream failed")
        }
        Ok(Ok((resp, conn))) => {
            let (mut parts, body) = resp.into_parts();
            strip_hop_by_hop(&mut parts.headers);
            let mut metered = Metered::new(body, permit, conn, sent, shared.clone());
            if reply.is_closed() {
                // The client left while the backend worked: drain the rest (`Metered`'s drop).
                metered.gone = true;
                return;
            }
            Response::from_parts(parts, metered.boxed_unsync())
        }
    };
    // Refused when the client has gone meanwhile: the response is dropped here, and a
    // metered body not at its end drains before its charge is released.
    let _ = reply.send(resp);
}
