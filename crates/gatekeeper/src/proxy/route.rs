//! One request's way through: classify, arrive at the gate, wait for a grant (or a 503),
//! forward upstream, hand the metered response back.

use std::net::SocketAddr;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use tokio::time::Instant;

use bytes::BytesMut;
use hyper::StatusCode;
use shortfirst_core::admission::{Refusal, RequestId};
use tokio::sync::oneshot;

use super::detach::Detachable;
use super::front::body::ClientBody;
use super::front::head::RequestHead;
use super::front::respond::Reply;
use super::headers::encode_upstream_head;
use super::stream::{Metered, RequestBody};
use super::Shared;
use crate::admit::{self, Arrived, GoneGuard, Permit, Verdict};
use crate::busypoll::BusyPoll;
use crate::metrics::ProxyOutcome;
use crate::upstream::wire::ResponseHead;
use crate::upstream::{Outgoing, UpstreamError};

/// The gatekeeper's own answer.
fn own(status: StatusCode, msg: &'static str) -> Reply {
    Reply::Own { status, msg, retry_after_s: None }
}

/// A 503 with `Retry-After`.
fn unavailable(shared: &Shared, msg: &'static str) -> Reply {
    Reply::Own { status: StatusCode::SERVICE_UNAVAILABLE, msg, retry_after_s: Some(shared.cfg.retry_after_s) }
}

/// Serve one client request: classify, admit (at once or after waiting), forward.
pub(super) async fn handle(
    shared: &Arc<Shared>,
    peer: SocketAddr,
    head: &RequestHead,
    body: Option<ClientBody>,
) -> Reply {
    let pq = head.path_and_query();
    let type_index = shared.adm.classifier.classify(head.method(), pq, head);
    // Only the access log reads it.
    let arrived = tracing::enabled!(target: "access", tracing::Level::INFO).then(Instant::now);
    let mut body = RequestBody::new(body);
    let (reply, waited_us) = match admit(shared, type_index, &mut body).await {
        Err(refusal) => (refusal, None),
        Ok((permit, waited_us)) => {
            shared.adm.metrics.admitted.fetch_add(1, Relaxed);
            shared.adm.metrics.types[type_index].queue_wait.observe_us(waited_us);
            (forward(shared, peer, head, body, permit, type_index).await, Some(waited_us))
        }
    };
    // The access log: one line per response head (`RUST_LOG=access=info`, or --access-log).
    tracing::info!(
        target: "access",
        "{peer} \"{} {pq}\" {} type={:?} wait_ms={} head_ms={:.1}",
        head.method(),
        reply.status().as_u16(),
        shared.adm.classifier.type_name(type_index).unwrap_or_default(),
        waited_us.map_or_else(|| "-".to_string(), |w| format!("{:.1}", w as f64 / 1e3)),
        arrived.map_or(0.0, |a| a.elapsed().as_secs_f64() * 1e3),
    );
    reply
}

/// Arrive at the controller; if not admitted at once, wait for a verdict. `Err`: the answer
/// to give instead (503 when refused, 400 when the request body failed while queued).
async fn admit(shared: &Arc<Shared>, type_index: usize, body: &mut RequestBody) -> Result<(Permit, u64), Reply> {
    match admit::arrive(&shared.adm, type_index) {
        Ok(Arrived::Admitted { permit, waited_us }) => Ok((permit, waited_us)),
        // Boxed: the wait is the largest state of a request's future, and most requests never
        // wait; a future that holds it inline costs every request its copy.
        Ok(Arrived::Queued(id, rx)) => Box::pin(wait_for_verdict(shared, id, rx, body)).await,
        Ok(Arrived::Refused(reason)) => Err(refusal(shared, reason)),
        Err(e) => {
            // Cannot happen: the classifier's types are the controller's.
            tracing::error!("gatekeeper: {e}");
            Err(unavailable(shared, "gatekeeper: internal error"))
        }
    }
}

/// The 503 for a refusal.
fn refusal(shared: &Shared, reason: Refusal) -> Reply {
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
) -> Result<(Permit, u64), Reply> {
    let verdict = tokio::select! {
        verdict = admit::wait(&shared.adm, id, rx, std::future::pending()) => verdict,
        e = body.watch() => {
            tracing::debug!("client body failed while queued: {e}");
            return Err(own(StatusCode::BAD_REQUEST, "gatekeeper: request body failed while queued"));
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
    head: &RequestHead,
    body: RequestBody,
    permit: Permit,
    type_index: usize,
) -> Reply {
    let upstream = &shared.cfg.upstream;
    let pq = head.path_and_query();
    let target = upstream.target_for(pq);
    let mut out = BytesMut::new();
    let has_body = !hyper::body::Body::is_end_stream(&body);
    let framing = encode_upstream_head(
        head,
        &target,
        peer,
        upstream.authority.as_str(),
        shared.cfg.rewrite_host,
        has_body,
        &mut out,
    );
    let method = head.method();
    let safe = matches!(method, "GET" | "HEAD" | "OPTIONS" | "TRACE");
    let req =
        Outgoing { head: out.freeze(), framing, repeatable: safe && !has_body, head_request: head.is_head(), body };
    // Until the response head is back, a dropped handler is a client that gave up while the
    // backend worked: the controller learns its patience from it.
    let mut gone = permit.id().map(|id| GoneGuard { shared: shared.adm.clone(), id, armed: true });
    let exchanged = Detachable::new(Box::pin(exchange(shared.clone(), req, permit, type_index)), client_left).await;
    if let Some(g) = gone.as_mut() {
        g.armed = false;
    }
    match exchanged {
        Exchanged::Relay(head, metered) => Reply::Relay(head, metered),
        Exchanged::Answer(reply) => reply,
    }
}

/// How an upstream exchange ended.
enum Exchanged {
    /// A response head: relay it, with its body metered.
    Relay(ResponseHead, Metered),
    /// The gatekeeper's own answer (502, 504, 400); the permit is released.
    Answer(Reply),
}

/// The client left before the response head: a response's body is drained before its
/// charge is released (`Metered`'s drop), its outcome `client_gone`.
fn client_left(exchanged: Exchanged) {
    if let Exchanged::Relay(_, mut metered) = exchanged {
        metered.gone = true;
    }
}

/// One upstream exchange, holding the permit, up to the response head.
async fn exchange(shared: Arc<Shared>, req: Outgoing, permit: Permit, type_index: usize) -> Exchanged {
    let tm = &shared.adm.metrics.types[type_index];
    // For the log lines of a failure: the request line, a shared-buffer clone.
    let line = req.request_line();
    let sent = Instant::now();
    let polling = shared.busy.as_deref().map(BusyPoll::upstream_wait);
    // Pinned where it is made: the timeout holds a reference, not a copy of the future.
    let send = std::pin::pin!(shared.pool.send(req));
    let result = tokio::time::timeout(shared.cfg.upstream_timeout, send).await;
    drop(polling);
    let answer = match result {
        Err(_) => {
            drop(permit); // the connection is closed with the send: the backend's signal
            tm.count(ProxyOutcome::Timeout);
            tracing::warn!(
                "504 {line}: no response head from the upstream within {:?} (--upstream-timeout)",
                shared.cfg.upstream_timeout
            );
            own(StatusCode::GATEWAY_TIMEOUT, "gatekeeper: upstream timed out")
        }
        Ok(Err(UpstreamError::RequestBody(e))) => {
            // The client's body failed while it was forwarded: the client left mid-body or
            // sent a malformed one. Not the upstream's fault; its connection is closed.
            drop(permit);
            tm.count(ProxyOutcome::ClientGone);
            tracing::debug!("{line}: request body failed while forwarded: {e}");
            own(StatusCode::BAD_REQUEST, "gatekeeper: request body failed")
        }
        Ok(Err(e)) => {
            drop(permit);
            tm.count(ProxyOutcome::UpstreamError);
            tracing::warn!("502 {line}: {e}");
            own(StatusCode::BAD_GATEWAY, "gatekeeper: upstream failed")
        }
        Ok(Ok((head, body))) => {
            return Exchanged::Relay(head, Metered::new(body, permit, sent, shared.clone()));
        }
    };
    Exchanged::Answer(answer)
}
