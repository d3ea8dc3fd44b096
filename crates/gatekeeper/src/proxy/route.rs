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
use shortfirst_core::admission::{Refusal, RequestId};
use tokio::sync::oneshot;

use super::detach::Detachable;
use super::headers::{add_forwarding, strip_hop_by_hop};
use super::reply::{text_response, unavailable};
use super::stream::{Metered, RequestBody};
use super::ProxyBody;
use super::Shared;
use crate::admit::{self, Arrived, GoneGuard, Permit, Verdict};
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
    let type_index = shared.adm.classifier.classify(req.method().as_str(), pq.as_str(), req.headers());
    let arrived = Instant::now();
    let (parts, body) = req.into_parts();
    let method = parts.method.clone();
    let mut body = RequestBody::new(body);
    let (resp, waited_us) = match admit(&shared, type_index, &mut body).await {
        Err(refusal) => (refusal, None),
        Ok((permit, waited_us)) => {
            shared.adm.metrics.admitted.fetch_add(1, Relaxed);
            shared.adm.metrics.types[type_index].queue_wait.observe_us(waited_us);
            (forward(&shared, peer, &pq, parts, body, permit, type_index).await, Some(waited_us))
        }
    };
    // The access log: one line per response head (`RUST_LOG=access=info`, or --access-log).
    tracing::info!(
        target: "access",
        "{peer} \"{method} {pq}\" {} type={:?} wait_ms={} head_ms={:.1}",
        resp.status().as_u16(),
        shared.adm.classifier.type_name(type_index).unwrap_or_default(),
        waited_us.map_or_else(|| "-".to_string(), |w| format!("{:.1}", w as f64 / 1e3)),
        arrived.elapsed().as_secs_f64() * 1e3,
    );
    Ok(resp)
}

/// Arrive at the controller; if not admitted at once, wait for a verdict. `Err`: the answer
/// to give instead (503 when refused, 400 when the request body failed while queued).
async fn admit(
    shared: &Arc<Shared>,
    type_index: usize,
    body: &mut RequestBody,
) -> Result<(Permit, u64), Response<ProxyBody>> {
    match admit::arrive(&shared.adm, type_index) {
        Ok(Arrived::Admitted { permit, waited_us }) => Ok((permit, waited_us)),
        Ok(Arrived::Queued(id, rx)) => wait_for_verdict(shared, id, rx, body).await,
        Ok(Arrived::Refused(reason)) => Err(refusal(shared, reason)),
        Err(e) => {
            // Cannot happen: the classifier's types are the controller's.
            tracing::error!("gatekeeper: {e}");
            Err(unavailable(shared, "gatekeeper: internal error"))
        }
    }
}

/// The 503 for a refusal.
fn refusal(shared: &Shared, reason: Refusal) -> Response<ProxyBody> {
    unavailable(
        shared,
        match reason {
            Refusal::QueueFull => "gatekeeper: admission queue full",
            Refusal::Expired => "gatekeeper: waited too long for admission",
            Refusal::WouldNotFinish => "gatekeeper: too busy to answer in time",
            Refusal::ShuttingDown => "gatekeeper: shutting down",
        },
    )
}

/// Wait in the queue for a verdict. While queued, read the request body ahead (bounded): a
/// client that goes away mid-body is only noticed by reading it. Returning early (or being
/// dropped with the client) drops the wait, which reports the client gone.
async fn wait_for_verdict(
    shared: &Arc<Shared>,
    id: RequestId,
    rx: oneshot::Receiver<Verdict>,
    body: &mut RequestBody,
) -> Result<(Permit, u64), Response<ProxyBody>> {
    let verdict = tokio::select! {
        verdict = admit::wait(&shared.adm, id, rx, std::future::pending()) => verdict,
        e = body.watch() => {
            tracing::debug!("client body failed while queued: {e}");
            return Err(text_response(StatusCode::BAD_REQUEST, "gatekeeper: request body failed while queued"));
        }
    };
    verdict.map_err(|n| match n {
        admit::NotAdmitted::Refused(reason) => refusal(shared, reason),
        // Not given a cancel, the wait is never cancelled.
        admit::NotAdmitted::Cancelled => refusal(shared, Refusal::ShuttingDown),
    })
}

/// Send the admitted request upstream and hand back its response, metered: the permit
/// rides with the response body and is released at its end. The exchange is polled in
/// place, on the client connection's task; should the client leave before the response
/// head, the exchange goes on in a task of its own ([`Detachable`]): a client that leaves
/// while the backend works does not take the charge away with it (the rest of the
/// response is read to its end).
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
            shared.adm.metrics.types[type_index].count(ProxyOutcome::UpstreamError);
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
    // Until the response head is back, a dropped handler is a client that gave up while the
    // backend worked: the controller learns its patience from it.
    let mut gone = permit.id().map(|id| GoneGuard { shared: shared.adm.clone(), id, armed: true });
    let req = Request::from_parts(parts, body);
    let exchanged = Detachable::new(exchange(shared.clone(), req, permit, type_index), client_left).await;
    if let Some(g) = gone.as_mut() {
        g.armed = false;
    }
    match exchanged {
        Exchanged::Relay(parts, metered) => Response::from_parts(parts, metered.boxed_unsync()),
        Exchanged::Answer(resp) => resp,
    }
}

/// How an upstream exchange ended.
enum Exchanged {
    /// A response head: relay it, with its body metered.
    Relay(hyper::http::response::Parts, Metered),
    /// The gatekeeper's own answer (502, 504, 400); the permit is released.
    Answer(Response<ProxyBody>),
}

/// The client left before the response head: a response's body is drained before its
/// charge is released (`Metered`'s drop), its outcome `client_gone`.
fn client_left(exchanged: Exchanged) {
    if let Exchanged::Relay(_, mut metered) = exchanged {
        metered.gone = true;
    }
}

/// One upstream exchange, holding the permit, up to the response head.
async fn exchange(shared: Arc<Shared>, req: Request<RequestBody>, permit: Permit, type_index: usize) -> Exchanged {
    let tm = &shared.adm.metrics.types[type_index];
    // For the log lines of a failure: reference-counted clones, no copies.
    let (method, uri) = (req.method().clone(), req.uri().clone());
    let sent = Instant::now();
    let polling = shared.busy.as_deref().map(BusyPoll::upstream_wait);
    let result = tokio::time::timeout(shared.cfg.upstream_timeout, shared.pool.send(req)).await;
    drop(polling);
    let answer = match result {
        Err(_) => {
            drop(permit); // the connection is closed with the send: the backend's signal
            tm.count(ProxyOutcome::Timeout);
            tracing::warn!(
                "504 {method} {uri}: no response head from the upstream within {:?} (--upstream-timeout)",
                shared.cfg.upstream_timeout
            );
            text_response(StatusCode::GATEWAY_TIMEOUT, "gatekeeper: upstream timed out")
        }
        Ok(Err(UpstreamError::RequestBody(e))) => {
            // The client's body failed while it was forwarded: the client left mid-body or
            // sent a malformed one. Not the upstream's fault; its connection is closed.
            drop(permit);
            tm.count(ProxyOutcome::ClientGone);
            tracing::debug!("{method} {uri}: request body failed while forwarded: {e}");
            text_response(StatusCode::BAD_REQUEST, "gatekeeper: request body failed")
        }
        Ok(Err(e)) => {
            drop(permit);
            tm.count(ProxyOutcome::UpstreamError);
            tracing::warn!("502 {method} {uri}: {e}");
            text_response(StatusCode::BAD_GATEWAY, "gatekeeper: upstream failed")
        }
        Ok(Ok(resp)) => {
            let (mut parts, body) = resp.into_parts();
            strip_hop_by_hop(&mut parts.headers);
            return Exchanged::Relay(parts, Metered::new(body, permit, sent, shared.clone()));
        }
    };
    Exchanged::Answer(answer)
}
