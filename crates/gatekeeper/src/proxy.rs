//! The proxy: HTTP/1.1 in (hyper server), admission through the core [`Gate`], HTTP/1.1 out
//! over kept-alive upstream connections ([`UpstreamPool`]), responses streamed back.
//!
//! Lifecycle of a request:
//! 1. classify → type; the type's current estimate is its charge;
//! 2. `Gate::arrive`; if not admitted at once, wait on a oneshot for a [`Grant`]. If the
//!    client goes away meanwhile (hyper drops the handler future, or the request body,
//!    read ahead while waiting up to [`PREFETCH_LIMIT_BYTES`], fails), the wait guard
//!    cancels the request in the gate;
//! 3. admitted: a [`Permit`] owns the ticket. Dropping the permit releases the charge, so it
//!    is released exactly once on every path (success, 502, 504, client gone mid-body, panic
//!    unwinding). A grant that can no longer be delivered drops its permit, releasing it;
//! 4. the response body is wrapped: reaching its end is the "last byte" that ends the
//!    service-time measurement, which feeds the estimator. Failures, timeouts and
//!    abandoned bodies release the charge without a sample, so they never pollute it.
//!
//! Locking: one `std::sync::Mutex` around the gate, estimator and waiters, held only for
//! the decisions (no I/O, no awaits). Grants are delivered after the lock is dropped.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper::header::{self, HeaderMap, HeaderName, HeaderValue};
use hyper::http::uri::PathAndQuery;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use shortfirst_core::admission::auto::AutoCapacity;
use shortfirst_core::admission::{
    Admitted, Charge, CostEstimator, Gate, GateConfig, Rejection, RequestId, Sample, Ticket,
};
use tokio::net::TcpListener;
use tokio::sync::{oneshot, Notify, Semaphore};

use crate::busypoll::BusyPoll;
use crate::classify::Classifier;
use crate::config::{CapacitySetting, ProxyConfig};
use crate::metrics::{Metrics, Outcome, Snapshot};
use crate::upstream::{Conn, UpstreamPool};
use crate::GatekeeperError;

pub type ProxyBody = UnsyncBoxBody<Bytes, hyper::Error>;

/// Decisions state, under one lock.
struct Core {
    gate: Gate,
    estimator: CostEstimator,
    auto: Option<AutoCapacity>,
    /// Queued requests: where to send the grant, and the request's type.
    waiters: Waiters,
    /// When the timer task will next look at the gate (`u64::MAX`: not before it is woken).
    timer_at_us: u64,
    /// Admitted, unfinished requests per type index (metrics).
    in_flight_by_type: Vec<usize>,
}

/// Queued requests by id (where to send the grant, the request's type), and each type's
/// queued ids, so a type's waiting requests can be re-priced when its estimate changes
/// (`Gate::reprice_waiting`) without scanning the whole queue. Both are bounded by the
/// gate's queue length.
struct Waiters {
    map: HashMap<RequestId, (oneshot::Sender<Grant>, usize)>,
    by_type: Vec<BTreeSet<RequestId>>,
}

impl Waiters {
    fn new(num_types: usize) -> Self {
        Waiters { map: HashMap::new(), by_type: vec![BTreeSet::new(); num_types] }
    }

    fn insert(&mut self, id: RequestId, waiter: (oneshot::Sender<Grant>, usize)) {
        if let Some(ids) = self.by_type.get_mut(waiter.1) {
            ids.insert(id);
        }
        self.map.insert(id, waiter);
    }

    fn remove(&mut self, id: &RequestId) -> Option<(oneshot::Sender<Grant>, usize)> {
        let w = self.map.remove(id)?;
        if let Some(ids) = self.by_type.get_mut(w.1) {
            ids.remove(id);
        }
        Some(w)
    }

    fn get(&self, id: &RequestId) -> Option<&(oneshot::Sender<Grant>, usize)> {
        self.map.get(id)
    }

    fn values(&self) -> impl Iterator<Item = &(oneshot::Sender<Grant>, usize)> {
        self.map.values()
    }

    /// The queued requests of one type.
    fn of_type(&self, type_index: usize) -> Vec<RequestId> {
        self.by_type.get(type_index).map_or_else(Vec::new, |ids| ids.iter().copied().collect())
    }
}

impl Core {
    /// The earliest time the timer task has something to do: a wait expiry, an aging
    /// deadline or an auto-capacity tick.
    fn next_timer_us(&self) -> Option<u64> {
        let a = self.gate.next_wakeup_us();
        let b = self.auto.as_ref().map(|x| x.next_tick_us());
        match (a, b) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// After an event: whether the timer task must be woken because its next job moved
    /// earlier than it planned. Waking it on every event would cost a task wake-up (and a
    /// thread wake-up) per request for nothing.
    fn timer_moved_earlier(&mut self) -> bool {
        match self.next_timer_us() {
            Some(t) if t < self.timer_at_us => {
                self.timer_at_us = t;
                true
            }
            _ => false,
        }
    }
}

/// Grants to send once the lock is released.
type Deliveries = Vec<(oneshot::Sender<Grant>, Grant)>;

enum Grant {
    Admitted {
        permit: Permit,
        waited_us: u64,
    },
    /// Waited `max_queue_wait`: answer 503.
    Expired,
}

struct Shared {
    cfg: ProxyConfig,
    classifier: Classifier,
    metrics: Metrics,
    core: Mutex<Core>,
    start: Instant,
    pool: UpstreamPool,
    /// Wakes the timer task when the next wakeup may have moved earlier.
    wake: Notify,
    /// `--busy-poll-us`: polls while requests wait for the upstream.
    busy: Option<Arc<BusyPoll>>,
}

/// Owns an admitted request's ticket; releasing happens in `Drop`, exactly once.
struct Permit {
    shared: Arc<Shared>,
    ticket: Option<Ticket>,
    type_index: usize,
}

impl Permit {
    /// Release with a successful service-time measurement.
    fn finish(mut self, service_us: Option<u64>) {
        if let Some(t) = self.ticket.take() {
            self.shared.release(t, self.type_index, service_us);
        }
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        if let Some(t) = self.ticket.take() {
            self.shared.release(t, self.type_index, None);
        }
    }
}

impl Shared {
    fn now_us(&self) -> u64 {
        self.start.elapsed().as_micros() as u64
    }

    fn lock(&self) -> MutexGuard<'_, Core> {
        // A panic while holding the lock leaves consistent state (every mutation is a single
        // core call), so recover rather than poison the whole proxy.
        self.core.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Turn admissions into deliveries (to do after unlocking). `mine` is the id of a caller
    /// that is not waiting on a channel yet; its permit is returned separately.
    ///
    /// A request that waited is recharged with its type's estimate now
    /// (`Gate::recharge_waited`): the one it arrived with may be stale by its whole wait. A lower
    /// charge can admit more, which goes through the same loop.
    fn route(
        self: &Arc<Self>,
        core: &mut Core,
        admitted: Vec<Admitted>,
        mine: Option<(RequestId, usize)>,
    ) -> (Option<(Permit, u64)>, Deliveries) {
        let mut own = None;
        let mut out = Vec::with_capacity(admitted.len());
        let admitted = if self.cfg.recharge_at_admission {
            let (waiters, estimator) = (&core.waiters, &core.estimator);
            let cost_of = |id: RequestId| {
                let t = match mine {
                    Some((m, t)) if m == id => Some(t),
                    _ => waiters.get(&id).map(|w| w.1),
                }?;
                Some(estimator.estimate_us(t).unwrap_or(estimator.config().cold_cost_us))
            };
            core.gate.recharge_waited(self.now_us(), admitted, cost_of)
        } else {
            admitted
        };
        for a in admitted {
            let id = a.ticket.id();
            let type_index = match mine {
                Some((m, t)) if m == id => Some(t),
                _ => core.waiters.get(&id).map(|w| w.1),
            };
            if let Some(n) = type_index.and_then(|t| core.in_flight_by_type.get_mut(t)) {
                *n += 1;
            }
            let permit = |type_index| Permit { shared: self.clone(), ticket: Some(a.ticket), type_index };
            match mine {
                Some((m, type_index)) if m == id => own = Some((permit(type_index), a.waited_us)),
                _ => match core.waiters.remove(&id) {
                    Some((tx, type_index)) => {
                        out.push((tx, Grant::Admitted { permit: permit(type_index), waited_us: a.waited_us }))
                    }
                    None => {
                        // Cannot happen: a queued id has a waiter until it is cancelled, and a
                        // cancelled id is no longer in the gate. Never drop a permit under the
                        // lock (its release would deadlock): hand it to a closed channel, so
                        // it is dropped, and released, in `deliver`.
                        debug_assert!(false, "admitted {id} without a waiter");
                        let grant = Grant::Admitted { permit: permit(usize::MAX), waited_us: 0 };
                        out.push((oneshot::channel().0, grant));
                    }
                },
            }
        }
        (own, out)
    }

    fn deliver(deliveries: Deliveries) {
        for (tx, grant) in deliveries {
            // If the receiver is gone the grant comes back and is dropped here, outside the
            // lock: its permit releases the charge.
            drop(tx.send(grant));
        }
    }

    fn release(self: &Arc<Self>, ticket: Ticket, type_index: usize, service_us: Option<u64>) {
        let deliveries = {
            let mut guard = self.lock();
            let core = &mut *guard;
            let now = self.now_us();
            let mut repriced = Vec::new();
            if let Some(wall_us) = service_us {
                if type_index < core.estimator.num_types() {
                    let share_us = core.gate.share_us(now, &ticket).unwrap_or(wall_us).min(wall_us);
                    let sample = Sample { wall_us, share_us };
                    let s = core.estimator.sample_us(sample);
                    let _ = core.estimator.observe_request_at(type_index, sample, now);
                    let est = core.estimator.estimate_us(type_index).unwrap_or(s);
                    if let Some(auto) = core.auto.as_mut() {
                        let warm = core.estimator.is_warm(type_index);
                        auto.record(type_index, s, est, warm);
                    }
                    if self.cfg.recharge_at_admission && core.gate.reprices_waiting() {
                        // The type's queued requests will be charged `est` at admission;
                        // judge whether they fit by it too (`Gate::reprice_waiting`, which
                        // acts under fifo only).
                        let ids = core.waiters.of_type(type_index);
                        if !ids.is_empty() {
                            repriced = core.gate.reprice_waiting(now, ids, est);
                        }
                    }
                }
            }
            if let Some(n) = core.in_flight_by_type.get_mut(type_index) {
                *n = n.saturating_sub(1);
            }
            let mut admitted = core.gate.release(now, ticket).unwrap_or_else(|e| {
                tracing::error!("gatekeeper accounting: {e}");
                Vec::new()
            });
            admitted.splice(0..0, repriced);
            let wake = core.timer_moved_earlier();
            (self.route(core, admitted, None).1, wake)
        };
        let (deliveries, wake) = deliveries;
        Self::deliver(deliveries);
        if wake {
            self.wake.notify_one();
        }
    }

    fn snapshot(&self) -> Snapshot {
        let core = self.lock();
        let types = self
            .classifier
            .types()
            .into_iter()
            .map(|(i, name)| {
                let est = core.estimator.estimate_us(i).unwrap_or(0);
                let n = core.estimator.samples(i).unwrap_or(0);
                (i, name, est, n)
            })
            .collect();
        // Bounded by max_queue_len: read at scrape time, not kept on the request path.
        let mut queued_by_type = vec![0; core.in_flight_by_type.len()];
        for &(_, t) in core.waiters.values() {
            if let Some(n) = queued_by_type.get_mut(t) {
                *n += 1;
            }
        }
        Snapshot {
            load_us: core.gate.load_us(),
            capacity_us: core.gate.capacity_us(),
            queue_len: core.gate.queue_len(),
            in_flight: core.gate.in_flight(),
            head_cost_us: core.gate.head_cost_us(),
            types,
            queued_by_type,
            in_flight_by_type: core.in_flight_by_type.clone(),
        }
    }
}

/// Removes a still-queued request from the gate when its handler is dropped.
struct WaitGuard {
    shared: Arc<Shared>,
    id: RequestId,
    armed: bool,
}

impl Drop for WaitGuard {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let deliveries = {
            let mut core = self.shared.lock();
            core.waiters.remove(&self.id);
            let now = self.shared.now_us();
            match core.gate.cancel(now, self.id) {
                Some(admitted) => {
                    self.shared.metrics.cancelled_while_queued.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    self.shared.route(&mut core, admitted, None).1
                }
                // Already admitted: the grant (if any) is dropped with the channel and its
                // permit releases the charge.
                None => Vec::new(),
            }
        };
        Shared::deliver(deliveries);
    }
}

/// Read-only view and control of a running gatekeeper (tests, calibration, admin).
#[derive(Clone)]
pub struct Handle {
    shared: Arc<Shared>,
}

impl Handle {
    pub fn snapshot(&self) -> Snapshot {
        self.shared.snapshot()
    }
    pub fn metrics_text(&self) -> String {
        self.shared.metrics.render(&self.shared.snapshot())
    }
    /// Set a fixed capacity now (calibration). Ignored in auto mode's next tick only if
    /// auto is off; with auto on, the controller continues from this value.
    pub fn set_capacity_us(&self, capacity_us: u64) -> Result<(), GatekeeperError> {
        let deliveries = {
            let mut core = self.shared.lock();
            let now = self.shared.now_us();
            let admitted = core.gate.set_capacity(now, capacity_us)?;
            self.shared.route(&mut core, admitted, None).1
        };
        Shared::deliver(deliveries);
        Ok(())
    }
}

pub struct Gatekeeper {
    listener: TcpListener,
    admin: Option<TcpListener>,
    shared: Arc<Shared>,
}

impl Gatekeeper {
    /// Validate the configuration and bind the listening sockets.
    pub async fn bind(cfg: ProxyConfig) -> Result<Self, GatekeeperError> {
        let classifier = Classifier::new(cfg.rules.clone(), cfg.max_types, &cfg.declared_types)?;
        let estimator = CostEstimator::new(cfg.max_types, cfg.estimator.clone())?;
        let mut gate_cfg = GateConfig::new(cfg.capacity.initial_us(), cfg.policy);
        gate_cfg.max_queue_len = cfg.max_queue_len;
        gate_cfg.max_queue_wait_us = cfg.max_queue_wait.map(|d| d.as_micros() as u64);
        gate_cfg.max_in_flight = cfg.max_in_flight;
        gate_cfg.max_charge_share = cfg.max_charge_share;
        let gate = Gate::new(gate_cfg)?;
        let auto = match &cfg.capacity {
            CapacitySetting::Auto(a) => Some(AutoCapacity::new(a.clone(), cfg.max_types, 0)?),
            CapacitySetting::Fixed { .. } => None,
        };
        let listener = TcpListener::bind(cfg.listen)
            .await
            .map_err(|e| GatekeeperError::io(format!("binding --listen {}", cfg.listen), e))?;
        let admin = match cfg.admin {
            Some(a) => {
                Some(TcpListener::bind(a).await.map_err(|e| GatekeeperError::io(format!("binding --admin {a}"), e))?)
            }
            None => None,
        };
        let pool = UpstreamPool::new(cfg.upstream.authority.clone(), cfg.upstream_timeout, cfg.upstream_pool_idle);
        let busy = cfg.busy_poll.map(BusyPoll::new).transpose()?;
        let shared = Arc::new(Shared {
            metrics: Metrics::new(cfg.max_types),
            classifier,
            core: Mutex::new(Core {
                gate,
                estimator,
                auto,
                waiters: Waiters::new(cfg.max_types),
                timer_at_us: u64::MAX,
                in_flight_by_type: vec![0; cfg.max_types],
            }),
            start: Instant::now(),
            pool,
            wake: Notify::new(),
            busy,
            cfg,
        });
        Ok(Gatekeeper { listener, admin, shared })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.listener.local_addr().expect("bound listener has an address")
    }

    pub fn admin_addr(&self) -> Option<SocketAddr> {
        self.admin.as_ref().map(|l| l.local_addr().expect("bound listener has an address"))
    }

    pub fn handle(&self) -> Handle {
        Handle { shared: self.shared.clone() }
    }

    /// Serve until `shutdown` resolves. In-flight requests are abandoned at shutdown.
    pub async fn run(self, shutdown: impl std::future::Future<Output = ()>) -> Result<(), GatekeeperError> {
        let timer = tokio::spawn(timer_task(self.shared.clone()));
        let poller = self.shared.busy.clone().map(|b| tokio::spawn(b.run()));
        let admin = self.admin.map(|l| tokio::spawn(admin_loop(l, self.shared.clone())));
        let conns = Arc::new(Semaphore::new(self.shared.cfg.max_connections));
        let shared = self.shared.clone();
        let accept = async {
            loop {
                let permit = conns.clone().acquire_owned().await.expect("semaphore never closed");
                let (stream, peer) = match self.listener.accept().await {
                    Ok(x) => x,
                    Err(e) => {
                        // EMFILE and friends: back off instead of spinning.
                        tracing::warn!("accept: {e}");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let _ = stream.set_nodelay(true);
                let shared = shared.clone();
                tokio::spawn(async move {
                    let svc = hyper::service::service_fn(move |req| handle(shared.clone(), peer, req));
                    let conn = hyper::server::conn::http1::Builder::new()
                        .timer(TokioTimer::new())
                        .header_read_timeout(Duration::from_secs(30))
                        .serve_connection(TokioIo::new(stream), svc);
                    if let Err(e) = conn.await {
                        tracing::debug!("client connection {peer}: {e}");
                    }
                    drop(permit);
                });
            }
        };
        tokio::select! {
            _ = accept => {}
            _ = shutdown => {}
        }
        timer.abort();
        if let Some(p) = poller {
            p.abort();
        }
        if let Some(a) = admin {
            a.abort();
        }
        Ok(())
    }
}

/// Expiry of waits, aging re-picks and auto-capacity ticks.
async fn timer_task(shared: Arc<Shared>) {
    loop {
        let next_us = {
            let mut core = shared.lock();
            let next = core.next_timer_us();
            core.timer_at_us = next.unwrap_or(u64::MAX);
            next
        };
        let sleep = async {
            match next_us {
                Some(t) => {
                    let at = shared.start + Duration::from_micros(t);
                    tokio::time::sleep_until(tokio::time::Instant::from_std(at)).await
                }
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = sleep => {}
            _ = shared.wake.notified() => continue,
        }
        let (expired, deliveries) = {
            let mut core = shared.lock();
            let now = shared.now_us();
            let (expired_ids, mut admitted) = core.gate.expire(now);
            admitted.extend(core.gate.poll(now));
            if let Some(auto) = core.auto.as_mut() {
                if let Some(decision) = auto.tick(now) {
                    let cap = auto.capacity_us();
                    tracing::debug!(?decision, capacity_us = cap, inflation = ?auto.last_inflation(), "auto capacity");
                    if cap != core.gate.capacity_us() {
                        admitted.extend(core.gate.set_capacity(now, cap).unwrap_or_default());
                    }
                }
            }
            let expired: Vec<_> =
                expired_ids.into_iter().filter_map(|id| core.waiters.remove(&id).map(|(tx, _)| tx)).collect();
            (expired, shared.route(&mut core, admitted, None).1)
        };
        for tx in expired {
            let _ = tx.send(Grant::Expired);
        }
        Shared::deliver(deliveries);
    }
}

fn text_response(status: StatusCode, msg: &str) -> Response<ProxyBody> {
    let mut r = Response::new(Full::new(Bytes::from(format!("{msg}\n"))).map_err(|e| match e {}).boxed_unsync());
    *r.status_mut() = status;
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
    r
}

fn unavailable(shared: &Shared, msg: &str) -> Response<ProxyBody> {
    let mut r = text_response(StatusCode::SERVICE_UNAVAILABLE, msg);
    r.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(shared.cfg.retry_after_s));
    r
}

/// Headers that describe one hop, never forwarded (RFC 9110 §7.6.1), plus those named in
/// `Connection`.
const HOP_BY_HOP: [&str; 9] = [
    "connection",
    "keep-alive",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "proxy-connection",
    "proxy-authenticate",
    "proxy-authorization",
];

pub fn strip_hop_by_hop(headers: &mut HeaderMap) {
    // The common case (no `Connection`, no `Proxy-*`) allocates nothing.
    if headers.contains_key(header::CONNECTION) {
        let listed: Vec<HeaderName> = headers
            .get_all(header::CONNECTION)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .filter_map(|t| HeaderName::from_bytes(t.trim().as_bytes()).ok())
            .collect();
        for name in listed {
            headers.remove(name);
        }
    }
    for name in HOP_BY_HOP {
        headers.remove(name);
    }
    // Any other Proxy-* header is hop-by-hop too.
    if headers.keys().any(|k| k.as_str().starts_with("proxy-")) {
        let proxy: Vec<HeaderName> = headers.keys().filter(|k| k.as_str().starts_with("proxy-")).cloned().collect();
        for name in proxy {
            headers.remove(name);
        }
    }
}

/// Append `Forwarded` and `X-Forwarded-For/Proto/Host` for a request from `peer`.
pub fn add_forwarding(headers: &mut HeaderMap, peer: SocketAddr) {
    let ip = peer.ip();
    let host = headers.get(header::HOST).and_then(|h| h.to_str().ok()).map(str::to_string);
    let for_token = match ip {
        std::net::IpAddr::V4(v4) => v4.to_string(),
        std::net::IpAddr::V6(v6) => format!("\"[{v6}]\""),
    };
    let mut fwd = format!("for={for_token};proto=http");
    if let Some(h) = &host {
        if h.bytes().all(|b| b.is_ascii_graphic() && b != b'"' && b != b'\\') {
            fwd.push_str(&format!(";host=\"{h}\""));
        }
    }
    append_list(headers, HeaderName::from_static("forwarded"), &fwd);
    append_list(headers, HeaderName::from_static("x-forwarded-for"), &ip.to_string());
    headers.insert(HeaderName::from_static("x-forwarded-proto"), HeaderValue::from_static("http"));
    if let Some(h) = host.and_then(|h| HeaderValue::from_str(&h).ok()) {
        headers.insert(HeaderName::from_static("x-forwarded-host"), h);
    }
}

fn append_list(headers: &mut HeaderMap, name: HeaderName, item: &str) {
    if !headers.contains_key(&name) {
        if let Ok(v) = HeaderValue::from_str(item) {
            headers.insert(name, v);
        }
        return;
    }
    let joined = {
        let existing: Vec<&str> = headers.get_all(&name).iter().filter_map(|v| v.to_str().ok()).collect();
        if existing.is_empty() {
            item.to_string()
        } else {
            format!("{}, {item}", existing.join(", "))
        }
    };
    if let Ok(v) = HeaderValue::from_str(&joined) {
        headers.insert(name, v);
    }
}

async fn handle(
    shared: Arc<Shared>,
    peer: SocketAddr,
    req: Request<Incoming>,
) -> Result<Response<ProxyBody>, Infallible> {
    // A shared-buffer clone, not a copy: it becomes the upstream URI's path as it is.
    let pq = req.uri().path_and_query().cloned().unwrap_or_else(|| PathAndQuery::from_static("/"));
    let type_index = shared.classifier.classify(req.method().as_str(), pq.as_str(), req.headers());
    let tm = &shared.metrics.types[type_index];
    let (mut parts, body) = req.into_parts();
    let mut body = RequestBody::new(body);

    // Admission.
    let (own, deliveries, rx) = {
        let mut core = shared.lock();
        let now = shared.now_us();
        // A probe re-measures a type sjf has not admitted for a while (core::admission,
        // "Re-sampling").
        let charge = core
            .estimator
            .charge(type_index, now)
            .unwrap_or(Charge { cost_us: core.estimator.config().cold_cost_us, probe: false });
        let arrived = if charge.probe {
            tm.probes.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            core.gate.arrive_probe(now, charge.cost_us)
        } else {
            core.gate.arrive(now, charge.cost_us)
        };
        match arrived {
            Err(Rejection::QueueFull) => {
                drop(core);
                shared.metrics.rejected_queue_full.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                tm.count(Outcome::Rejected);
                return Ok(unavailable(&shared, "gatekeeper: admission queue full"));
            }
            Ok((id, admitted)) => {
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
                (own, (deliveries, core.timer_moved_earlier()), rx)
            }
        }
    };
    let (deliveries, wake) = deliveries;
    Shared::deliver(deliveries);
    if wake {
        shared.wake.notify_one();
    }

    let (permit, waited_us) = match (own, rx) {
        (Some(p), _) => p,
        (None, Some((id, rx))) => {
            let mut guard = WaitGuard { shared: shared.clone(), id, armed: true };
            let mut rx = rx;
            // While queued, read the request body ahead (bounded): a client that goes away
            // mid-body is only noticed by reading it. Returning drops the armed guard, which
            // takes the request out of the queue.
            let grant = tokio::select! {
                grant = &mut rx => grant,
                e = body.watch() => {
                    tracing::debug!("client body failed while queued: {e}");
                    return Ok(text_response(StatusCode::BAD_REQUEST, "gatekeeper: request body failed while queued"));
                }
            };
            guard.armed = false;
            match grant {
                Ok(Grant::Admitted { permit, waited_us }) => (permit, waited_us),
                Ok(Grant::Expired) => {
                    shared.metrics.rejected_queue_wait.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    tm.count(Outcome::Rejected);
                    return Ok(unavailable(&shared, "gatekeeper: waited too long for admission"));
                }
                Err(_) => {
                    // The sender was dropped without a grant: only at shutdown.
                    tm.count(Outcome::Rejected);
                    return Ok(unavailable(&shared, "gatekeeper: shutting down"));
                }
            }
        }
        (None, None) => unreachable!("either admitted or waiting"),
    };
    shared.metrics.admitted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    tm.queue_wait.observe_us(waited_us);

    // Forward.
    parts.uri = match shared.cfg.upstream.target_for(&pq) {
        Ok(u) => u,
        Err(_) => {
            tm.count(Outcome::UpstreamError);
            return Ok(text_response(StatusCode::BAD_REQUEST, "gatekeeper: bad request target"));
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
            tm.count(Outcome::Timeout);
            return Ok(text_response(StatusCode::GATEWAY_TIMEOUT, "gatekeeper: upstream timed out"));
        }
        Ok(Err(e)) => {
            tracing::debug!("upstream: {e:?}");
            tm.count(Outcome::UpstreamError);
            return Ok(text_response(StatusCode::BAD_GATEWAY, "gatekeeper: upstream failed"));
        }
        Ok(Ok(r)) => r,
    };
    let (mut parts, body) = resp.into_parts();
    strip_hop_by_hop(&mut parts.headers);
    let metered =
        Metered { inner: body, permit: Some(permit), conn: Some(conn), sent, shared: shared.clone(), type_index };
    Ok(Response::from_parts(parts, metered.boxed_unsync()))
}

/// Request body bytes read ahead while a request waits for admission, at most this many
/// per request. A body still arriving beyond this is left unread (backpressure on that
/// client) until admission; a disconnect is then noticed when forwarding, which fails at
/// once and releases the charge.
pub const PREFETCH_LIMIT_BYTES: usize = 64 * 1024;

/// The client's request body: frames read ahead while queued ([`RequestBody::watch`]),
/// then the rest of the stream.
pub struct RequestBody {
    buffered: VecDeque<Frame<Bytes>>,
    buffered_bytes: usize,
    /// `None` once the client's body has ended.
    rest: Option<Incoming>,
}

impl RequestBody {
    fn new(body: Incoming) -> Self {
        RequestBody { buffered: VecDeque::new(), buffered_bytes: 0, rest: Some(body) }
    }

    /// Read the body ahead, up to [`PREFETCH_LIMIT_BYTES`]. Resolves only if the body fails
    /// (the client went away mid-body or sent a malformed one); at the end of the body or the
    /// limit it stays pending. Cancel-safe: a frame is buffered as soon as it is read.
    async fn watch(&mut self) -> hyper::Error {
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
struct Metered {
    inner: Incoming,
    permit: Option<Permit>,
    /// Returned to the pool at the end of the body; closed if the body is abandoned or fails.
    conn: Option<Conn>,
    sent: Instant,
    shared: Arc<Shared>,
    type_index: usize,
}

impl Metered {
    fn complete(&mut self) {
        if let Some(c) = self.conn.take() {
            self.shared.pool.put_back(c);
        }
        if let Some(p) = self.permit.take() {
            let us = self.sent.elapsed().as_micros() as u64;
            let tm = &self.shared.metrics.types[self.type_index];
            tm.upstream.observe_us(us);
            tm.count(Outcome::Ok);
            p.finish(Some(us));
        }
    }

    fn fail(&mut self, outcome: Outcome) {
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
            Poll::Ready(Some(Err(_))) => this.fail(Outcome::UpstreamError),
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
                self.fail(Outcome::ClientGone);
            }
        }
    }
}

async fn admin_loop(listener: TcpListener, shared: Arc<Shared>) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let shared = shared.clone();
        tokio::spawn(async move {
            let svc = hyper::service::service_fn(move |req: Request<Incoming>| {
                let shared = shared.clone();
                async move {
                    let r = match req.uri().path() {
                        "/metrics" => {
                            let mut r = text_response(StatusCode::OK, "");
                            *r.body_mut() = Full::new(Bytes::from(shared.metrics.render(&shared.snapshot())))
                                .map_err(|e| match e {})
                                .boxed_unsync();
                            r.headers_mut()
                                .insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; version=0.0.4"));
                            r
                        }
                        "/healthz" => text_response(StatusCode::OK, "ok"),
                        _ => text_response(StatusCode::NOT_FOUND, "try /metrics"),
                    };
                    Ok::<_, Infallible>(r)
                }
            });
            let _ = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), svc).await;
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hop_by_hop_headers_are_removed() {
        let mut h = HeaderMap::new();
        for (k, v) in [
            ("connection", "keep-alive, X-Secret"),
            ("keep-alive", "timeout=5"),
            ("x-secret", "1"),
            ("te", "trailers"),
            ("trailer", "x"),
            ("transfer-encoding", "chunked"),
            ("upgrade", "websocket"),
            ("proxy-authorization", "x"),
            ("proxy-foo", "x"),
            ("x-keep", "1"),
            ("content-length", "3"),
        ] {
            h.append(HeaderName::from_static(k), HeaderValue::from_static(v));
        }
        strip_hop_by_hop(&mut h);
        let mut left: Vec<_> = h.keys().map(|k| k.as_str().to_string()).collect();
        left.sort();
        assert_eq!(left, ["content-length", "x-keep"]);
    }

    #[test]
    fn forwarding_headers_append() {
        let mut h = HeaderMap::new();
        h.insert(header::HOST, HeaderValue::from_static("shop.example"));
        h.insert("x-forwarded-for", HeaderValue::from_static("10.0.0.1"));
        add_forwarding(&mut h, "127.0.0.1:5000".parse().unwrap());
        assert_eq!(h["forwarded"], "for=127.0.0.1;proto=http;host=\"shop.example\"");
        assert_eq!(h["x-forwarded-for"], "10.0.0.1, 127.0.0.1");
        assert_eq!(h["x-forwarded-proto"], "http");
        assert_eq!(h["x-forwarded-host"], "shop.example");
        let mut h = HeaderMap::new();
        add_forwarding(&mut h, "[::1]:5000".parse().unwrap());
        assert_eq!(h["forwarded"], "for=\"[::1]\";proto=http");
    }
}
