//! Grant and wait: the decisions state under one lock (gate, estimator, waiters), the
//! [`Permit`] that releases an admitted request's charge exactly once, the guard that
//! cancels a request whose client left while queued, and the timer task (wait expiry,
//! aging re-picks, auto-capacity ticks).

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::time::Instant;

use shortfirst_core::admission::auto::AutoCapacity;
use shortfirst_core::admission::{Admitted, CostEstimator, Gate, RequestId, Sample, Ticket};
use tokio::sync::{oneshot, Notify};

use crate::busypoll::BusyPoll;
use crate::classify::Classifier;
use crate::config::ProxyConfig;
use crate::metrics::{Metrics, Snapshot};
use crate::upstream::UpstreamPool;

/// Decisions state, under one lock.
pub(super) struct Core {
    pub(super) gate: Gate,
    pub(super) estimator: CostEstimator,
    pub(super) auto: Option<AutoCapacity>,
    /// Queued requests: where to send the grant, and the request's type.
    pub(super) waiters: Waiters,
    /// When the timer task will next look at the gate (`u64::MAX`: not before it is woken).
    pub(super) timer_at_us: u64,
    /// Admitted, unfinished requests per type index (metrics).
    pub(super) in_flight_by_type: Vec<usize>,
    /// Set once shutdown begins: arrivals get 503, nothing waits any more.
    pub(super) shutting_down: bool,
}

/// Queued requests by id (where to send the grant, the request's type), and each type's
/// queued ids, so a type's waiting requests can be re-priced when its estimate changes
/// (`Gate::reprice_waiting`) without scanning the whole queue. Both are bounded by the
/// gate's queue length.
pub(super) struct Waiters {
    pub(super) map: HashMap<RequestId, (oneshot::Sender<Grant>, usize)>,
    pub(super) by_type: Vec<BTreeSet<RequestId>>,
}

impl Waiters {
    pub(super) fn new(num_types: usize) -> Self {
        Waiters { map: HashMap::new(), by_type: vec![BTreeSet::new(); num_types] }
    }

    pub(super) fn insert(&mut self, id: RequestId, waiter: (oneshot::Sender<Grant>, usize)) {
        if let Some(ids) = self.by_type.get_mut(waiter.1) {
            ids.insert(id);
        }
        self.map.insert(id, waiter);
    }

    pub(super) fn remove(&mut self, id: &RequestId) -> Option<(oneshot::Sender<Grant>, usize)> {
        let w = self.map.remove(id)?;
        if let Some(ids) = self.by_type.get_mut(w.1) {
            ids.remove(id);
        }
        Some(w)
    }

    pub(super) fn get(&self, id: &RequestId) -> Option<&(oneshot::Sender<Grant>, usize)> {
        self.map.get(id)
    }

    pub(super) fn values(&self) -> impl Iterator<Item = &(oneshot::Sender<Grant>, usize)> {
        self.map.values()
    }

    /// Every queued request, oldest first.
    pub(super) fn ids(&self) -> Vec<RequestId> {
        let mut ids: Vec<RequestId> = self.map.keys().copied().collect();
        ids.sort_unstable();
        ids
    }

    /// The queued requests of one type.
    pub(super) fn of_type(&self, type_index: usize) -> Vec<RequestId> {
        self.by_type.get(type_index).map_or_else(Vec::new, |ids| ids.iter().copied().collect())
    }
}

impl Core {
    /// The earliest time the timer task has something to do: a wait expiry, an aging
    /// deadline or an auto-capacity tick.
    pub(super) fn next_timer_us(&self) -> Option<u64> {
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
    pub(super) fn timer_moved_earlier(&mut self) -> bool {
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
pub(super) type Deliveries = Vec<(oneshot::Sender<Grant>, Grant)>;

pub(super) enum Grant {
    Admitted {
        permit: Permit,
        waited_us: u64,
    },
    /// Waited `max_queue_wait`: answer 503.
    Expired,
    /// The gatekeeper is shutting down: answer 503 with `Retry-After`.
    ShuttingDown,
}

pub(super) struct Shared {
    pub(super) cfg: ProxyConfig,
    pub(super) classifier: Classifier,
    pub(super) metrics: Metrics,
    pub(super) core: Mutex<Core>,
    pub(super) start: Instant,
    pub(super) pool: UpstreamPool,
    /// Wakes the timer task when the next wakeup may have moved earlier.
    pub(super) wake: Notify,
    /// `--busy-poll-us`: polls while requests wait for the upstream.
    pub(super) busy: Option<Arc<BusyPoll>>,
}

/// Owns an admitted request's ticket; releasing happens in `Drop`, exactly once.
pub(super) struct Permit {
    pub(super) shared: Arc<Shared>,
    pub(super) ticket: Option<Ticket>,
    pub(super) type_index: usize,
}

impl Permit {
    /// Release with a successful service-time measurement.
    pub(super) fn finish(mut self, service_us: Option<u64>) {
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
    pub(super) fn now_us(&self) -> u64 {
        self.start.elapsed().as_micros() as u64
    }

    pub(super) fn lock(&self) -> MutexGuard<'_, Core> {
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
    pub(super) fn route(
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

    pub(super) fn deliver(deliveries: Deliveries) {
        for (tx, grant) in deliveries {
            // If the receiver is gone (the client left as it was admitted) the grant comes
            // back and is dropped here, outside the lock: its permit releases the charge,
            // and the request is never started.
            if let Err(Grant::Admitted { permit, .. }) = tx.send(grant) {
                if let Some(tm) = permit.shared.metrics.types.get(permit.type_index) {
                    tm.count(crate::metrics::ProxyOutcome::ClientGone);
                }
            }
        }
    }

    pub(super) fn release(self: &Arc<Self>, ticket: Ticket, type_index: usize, service_us: Option<u64>) {
        let deliveries = {
            let mut guard = self.lock();
            let core = &mut *guard;
            let now = self.now_us();
            let mut repriced = Vec::new();
            if let Some(wall_us) = service_us {
                if type_index < core.estimator.num_types() {
                    let share_us = core.gate.share_us(now, &ticket).unwrap_or(wall_us).min(wall_us);
                    let serial_us = core.gate.serial_us(now, wall_us);
                    let sample = Sample { wall_us, share_us, serial_us };
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
                        // acts under every policy).
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

    /// Begin shutting down: from now on arrivals are refused, and every queued request is
    /// taken out of the gate and answered 503 with `Retry-After`. Admitted requests go on.
    pub(super) fn begin_shutdown(self: &Arc<Self>) {
        let (refused, deliveries) = {
            let mut guard = self.lock();
            let core = &mut *guard;
            core.shutting_down = true;
            let now = self.now_us();
            let ids: Vec<RequestId> = core.waiters.ids();
            let mut refused = Vec::with_capacity(ids.len());
            let mut admitted = Vec::new();
            for id in ids {
                if let Some((tx, _)) = core.waiters.remove(&id) {
                    refused.push(tx);
                }
                admitted.extend(core.gate.cancel(now, id).unwrap_or_default());
            }
            (refused, self.route(core, admitted, None).1)
        };
        for tx in refused {
            let _ = tx.send(Grant::ShuttingDown);
        }
        Self::deliver(deliveries);
    }

    /// Admitted requests whose backend work is not done yet (their charges).
    pub(super) fn in_flight(&self) -> usize {
        self.lock().gate.in_flight()
    }

    pub(super) fn snapshot(&self) -> Snapshot {
        self.metrics.type_table_overflow.store(self.classifier.overflowed(), std::sync::atomic::Ordering::Relaxed);
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
            client_connections: self.metrics.client_connections.get(),
            upstream_connections: self.pool.open_connections(),
            upstream_idle: self.pool.idle_connections(),
            upstream_retries: self.pool.retries(),
        }
    }
}

/// Removes a still-queued request from the gate when its handler is dropped.
pub(super) struct WaitGuard {
    pub(super) shared: Arc<Shared>,
    pub(super) id: RequestId,
    pub(super) armed: bool,
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

/// Expiry of waits, aging re-picks and auto-capacity ticks.
pub(super) async fn timer_task(shared: Arc<Shared>) {
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
                    tokio::time::sleep_until(at).await
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
