//! Grant and wait, for every protocol the gatekeeper speaks (the HTTP proxy and the
//! PostgreSQL gate drive the same code): the admission controller under one lock with the
//! channels of the waiting requests, the bounded type registry and the metrics, [`arrive`]
//! and [`wait`] (a request's way to a verdict), the [`Permit`] that hands an admitted
//! request's ticket back exactly once, the guard that reports a client that left, and the
//! timer task (wait expiry, refusals for patience, aging re-picks, auto-capacity ticks).
//! Every decision is the controller's (`core::admission::Controller`); this file only
//! carries them out.
//!
//! Locking: one `std::sync::Mutex` around the controller and the waiters' channels, held
//! only for the decisions (no I/O, no awaits). Verdicts are delivered after the lock is
//! dropped.

use std::collections::HashMap;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::time::Instant;

use shortfirst_core::admission::{AdmissionPolicy, Arrival, Controller, Decision, Grant, Refusal, RequestId, Ticket};
use tokio::sync::{oneshot, Notify};

use crate::classify::Classifier;
use crate::config::{CapacitySetting, ProxyConfig};
use crate::metrics::{Metrics, ProxyOutcome, Snapshot};
use crate::proxy::controller_config;
use crate::GatekeeperError;

/// Decisions state, under one lock.
pub(crate) struct Core {
    pub(crate) ctl: Controller,
    /// Where to send each waiting request's verdict; bounded by the controller's queue
    /// length (an id is here exactly while the controller has it waiting).
    pub(crate) waiters: HashMap<RequestId, oneshot::Sender<Verdict>>,
    /// When the timer task will next look at the controller (`u64::MAX`: not before it is
    /// woken).
    pub(crate) timer_at_us: u64,
}

impl Core {
    /// After an event: whether the timer task must be woken because its next job moved
    /// earlier than it planned. Waking it on every event would cost a task wake-up (and a
    /// thread wake-up) per request for nothing.
    pub(crate) fn timer_moved_earlier(&mut self) -> bool {
        match self.ctl.next_wakeup_us() {
            Some(t) if t < self.timer_at_us => {
                self.timer_at_us = t;
                true
            }
            _ => false,
        }
    }
}

/// Verdicts to send once the lock is released.
pub(crate) type Deliveries = Vec<(oneshot::Sender<Verdict>, Verdict)>;

/// What a waiting request is told.
pub(crate) enum Verdict {
    Admitted {
        permit: Permit,
        waited_us: u64,
    },
    /// Answer 503: the controller refused it (wait limit, patience, shutdown).
    Refused(Refusal),
}

/// The decisions state and what goes with it: one per gatekeeper, whatever its protocol.
pub(crate) struct Admission {
    /// The bounded type registry: a type's name to its index in the controller.
    pub(crate) classifier: Classifier,
    pub(crate) metrics: Metrics,
    pub(crate) core: Mutex<Core>,
    pub(crate) start: Instant,
    /// Wakes the timer task when the next wakeup may have moved earlier.
    pub(crate) wake: Notify,
}

/// Owns an admitted request's ticket; hands it back to the controller in `Drop` (without a
/// sample) unless [`Permit::finish`] did (with one), so exactly once.
pub(crate) struct Permit {
    pub(crate) shared: Arc<Admission>,
    pub(crate) ticket: Option<Ticket>,
    pub(crate) type_index: usize,
}

impl Permit {
    /// Hand the ticket back with the measured service time (`None`: failed).
    pub(crate) fn finish(self, service_us: Option<u64>) {
        self.finish_with_cpu(service_us, None);
    }

    /// [`Permit::finish`] with the backend's processor time spent on the request, where
    /// the driver measured it.
    pub(crate) fn finish_with_cpu(mut self, service_us: Option<u64>, cpu_us: Option<u64>) {
        if let Some(t) = self.ticket.take() {
            self.shared.finish(t, service_us, cpu_us);
        }
    }

    pub(crate) fn id(&self) -> Option<RequestId> {
        self.ticket.as_ref().map(Ticket::id)
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        if let Some(t) = self.ticket.take() {
            self.shared.finish(t, None, None);
        }
    }
}

impl Admission {
    /// The controller, type registry and metrics of `cfg` (its rules, type bound, capacity,
    /// policy and limits).
    pub(crate) fn new(cfg: &ProxyConfig) -> Result<Arc<Self>, GatekeeperError> {
        let classifier = Classifier::new(cfg.rules.clone(), cfg.max_types, &cfg.declared_types)?;
        let ctl = Controller::new(controller_config(cfg), cfg.max_types, 0)?;
        Ok(Arc::new(Admission {
            metrics: Metrics::new(cfg.max_types),
            classifier,
            core: Mutex::new(Core { ctl, waiters: HashMap::new(), timer_at_us: u64::MAX }),
            start: Instant::now(),
            wake: Notify::new(),
        }))
    }

    /// Apply a reloaded configuration's rules, capacity and policy (see `Handle::reload`).
    pub(crate) fn reload(
        self: &Arc<Self>,
        rules: Vec<crate::classify::Rule>,
        capacity: &CapacitySetting,
        policy: AdmissionPolicy,
    ) -> Result<(), GatekeeperError> {
        self.classifier.set_rules(rules);
        let mut result = Ok(());
        self.event(|core, now| {
            let mut decisions = core.ctl.set_policy(now, policy);
            let more = match capacity {
                CapacitySetting::Fixed { capacity_us } => core.ctl.set_capacity(now, *capacity_us),
                // An auto controller already running keeps its learned capacity.
                CapacitySetting::Auto(a) if !core.ctl.is_auto() => core.ctl.set_auto(now, a.clone()),
                CapacitySetting::Auto(_) => Ok(Vec::new()),
            };
            match more {
                Ok(more) => decisions.extend(more),
                Err(e) => result = Err(e.into()),
            }
            decisions
        });
        result
    }

    pub(crate) fn now_us(&self) -> u64 {
        self.start.elapsed().as_micros() as u64
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, Core> {
        // A panic while holding the lock leaves consistent state (every mutation is a single
        // controller call), so recover rather than poison the whole proxy.
        self.core.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Turn the controller's decisions into verdicts for the waiting requests, to deliver
    /// after unlocking.
    pub(crate) fn apply(self: &Arc<Self>, core: &mut Core, decisions: Vec<Decision>) -> Deliveries {
        let mut out = Vec::with_capacity(decisions.len());
        for d in decisions {
            match d {
                Decision::Admit(g) => {
                    self.count_probe(&g);
                    let id = g.ticket.id();
                    let permit = Permit { shared: self.clone(), ticket: Some(g.ticket), type_index: g.type_index };
                    let verdict = Verdict::Admitted { permit, waited_us: g.waited_us };
                    // A waiting id has a channel; should one not (a bug), the permit goes
                    // to a closed channel and is dropped, so released, in `deliver`: never
                    // drop a permit under the lock (its release would deadlock).
                    let tx = core.waiters.remove(&id).unwrap_or_else(|| {
                        debug_assert!(false, "admitted {id} without a waiter");
                        oneshot::channel().0
                    });
                    out.push((tx, verdict));
                }
                Decision::Refuse { id, type_index, reason } => {
                    self.count_refusal(type_index, reason);
                    if let Some(tx) = core.waiters.remove(&id) {
                        out.push((tx, Verdict::Refused(reason)));
                    }
                }
            }
        }
        out
    }

    /// An admission as a probe in the metrics (core::admission, "First sample" and
    /// "Re-sampling").
    fn count_probe(&self, g: &Grant) {
        if let Some(tm) = self.metrics.types.get(g.type_index).filter(|_| g.probe) {
            tm.probes.fetch_add(1, Relaxed);
        }
    }

    /// A refusal in the metrics: the type's outcome and the counter of its reason.
    pub(crate) fn count_refusal(&self, type_index: usize, reason: Refusal) {
        if let Some(tm) = self.metrics.types.get(type_index) {
            tm.count(ProxyOutcome::Rejected);
        }
        let m = &self.metrics;
        match reason {
            Refusal::QueueFull => m.rejected_queue_full.fetch_add(1, Relaxed),
            Refusal::Expired => m.rejected_queue_wait.fetch_add(1, Relaxed),
            Refusal::WouldNotFinish => m.rejected_would_not_finish.fetch_add(1, Relaxed),
            Refusal::ShuttingDown => m.rejected_shutting_down.fetch_add(1, Relaxed),
        };
    }

    pub(crate) fn deliver(deliveries: Deliveries) {
        for (tx, verdict) in deliveries {
            // If the receiver is gone (the client left as it was admitted) the verdict comes
            // back and is dropped here, outside the lock: its permit hands the ticket back,
            // and the request is never started.
            if let Err(Verdict::Admitted { permit, .. }) = tx.send(verdict) {
                if let Some(tm) = permit.shared.metrics.types.get(permit.type_index) {
                    tm.count(ProxyOutcome::ClientGone);
                }
            }
        }
    }

    /// Run one controller event under the lock, then deliver its verdicts and wake the
    /// timer task if its next job moved earlier.
    pub(crate) fn event(self: &Arc<Self>, f: impl FnOnce(&mut Core, u64) -> Vec<Decision>) {
        let (deliveries, wake) = {
            let mut guard = self.lock();
            let core = &mut *guard;
            let decisions = f(core, self.now_us());
            (self.apply(core, decisions), core.timer_moved_earlier())
        };
        Self::deliver(deliveries);
        if wake {
            self.wake.notify_one();
        }
    }

    fn finish(self: &Arc<Self>, ticket: Ticket, service_us: Option<u64>, cpu_us: Option<u64>) {
        self.event(|core, now| {
            core.ctl.finish_with_cpu(now, ticket, service_us, cpu_us).unwrap_or_else(|e| {
                tracing::error!("gatekeeper accounting: {e}");
                Vec::new()
            })
        });
    }

    /// Begin shutting down: from now on arrivals are refused, and every queued request is
    /// answered 503 with `Retry-After`. Admitted requests go on.
    pub(crate) fn begin_shutdown(self: &Arc<Self>) {
        self.event(|core, now| core.ctl.shut_down(now));
    }

    /// Admitted requests whose backend work is not done yet.
    pub(crate) fn in_flight(&self) -> usize {
        self.lock().ctl.gate().in_flight()
    }

    /// The admission side of a snapshot; the upstream side (connections, pool) is the
    /// driver's to fill in.
    pub(crate) fn snapshot(&self) -> Snapshot {
        self.metrics.type_table_overflow.store(self.classifier.overflowed(), Relaxed);
        let core = self.lock();
        let (ctl, est) = (&core.ctl, core.ctl.estimator());
        let types = self
            .classifier
            .types()
            .into_iter()
            .map(|(i, name)| (i, name, est.estimate_us(i).unwrap_or(0), est.samples(i).unwrap_or(0)))
            .collect();
        Snapshot {
            load_us: ctl.gate().load_us(),
            capacity_us: ctl.gate().capacity_us(),
            queue_len: ctl.gate().queue_len(),
            oldest_wait_us: ctl.oldest_waiting_arrival_us().map_or(0, |a| self.now_us().saturating_sub(a)),
            in_flight: ctl.gate().in_flight(),
            head_cost_us: ctl.gate().head_cost_us(),
            types,
            queued_by_type: ctl.queued_by_type(),
            in_flight_by_type: ctl.in_flight_by_type().to_vec(),
            patience_us: (0..ctl.in_flight_by_type().len()).map(|t| ctl.patience_us(t)).collect(),
            give_ups: ctl.give_ups(),
            client_connections: self.metrics.client_connections.get(),
            upstream_connections: 0,
            upstream_idle: 0,
            upstream_retries: 0,
        }
    }
}

/// Reports a client that left: dropped while armed (the handler future dropped with the
/// client's connection), it tells the controller, which takes a waiting request out of the
/// queue and learns the clients' patience either way.
pub(crate) struct GoneGuard {
    pub(crate) shared: Arc<Admission>,
    pub(crate) id: RequestId,
    pub(crate) armed: bool,
}

impl Drop for GoneGuard {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let id = self.id;
        let metrics = &self.shared.metrics;
        self.shared.event(|core, now| {
            if core.waiters.remove(&id).is_some() {
                metrics.cancelled_while_queued.fetch_add(1, Relaxed);
            }
            core.ctl.client_gone(now, id)
        });
    }
}

/// Expiry of waits, refusals for patience, aging re-picks and auto-capacity ticks.
pub(crate) async fn timer_task(shared: Arc<Admission>) {
    loop {
        let next_us = {
            let mut core = shared.lock();
            let next = core.ctl.next_wakeup_us();
            core.timer_at_us = next.unwrap_or(u64::MAX);
            next
        };
        let sleep = async {
            match next_us {
                Some(t) => tokio::time::sleep_until(shared.start + Duration::from_micros(t)).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = sleep => {}
            _ = shared.wake.notified() => continue,
        }
        shared.event(|core, now| {
            let before = core.ctl.gate().capacity_us();
            let d = core.ctl.poll(now);
            if core.ctl.gate().capacity_us() != before {
                tracing::debug!(capacity_us = core.ctl.gate().capacity_us(), "auto capacity");
            }
            d
        });
    }
}

/// Where an arrival stands after [`arrive`].
pub(crate) enum Arrived {
    Admitted {
        permit: Permit,
        waited_us: u64,
    },
    /// Waiting: await the verdict with [`wait`].
    Queued(RequestId, oneshot::Receiver<Verdict>),
    /// Refused at once (counted in the metrics already).
    Refused(Refusal),
}

/// A request of type `type_index` arrives at the controller: admitted at once, queued, or
/// refused. `Err`: the type is not the controller's (a bug: the registry's types are).
pub(crate) fn arrive(shared: &Arc<Admission>, type_index: usize) -> Result<Arrived, GatekeeperError> {
    let (arrived, deliveries, wake) = {
        let mut guard = shared.lock();
        let core = &mut *guard;
        let arrival = core.ctl.arrive(shared.now_us(), type_index)?;
        let deliveries = shared.apply(core, arrival.others);
        let arrived = match arrival.outcome {
            Arrival::Admitted(g) => {
                shared.count_probe(&g);
                let permit = Permit { shared: shared.clone(), ticket: Some(g.ticket), type_index };
                Arrived::Admitted { permit, waited_us: g.waited_us }
            }
            Arrival::Queued(id) => {
                let (tx, rx) = oneshot::channel();
                core.waiters.insert(id, tx);
                Arrived::Queued(id, rx)
            }
            Arrival::Refused(reason) => Arrived::Refused(reason),
        };
        (arrived, deliveries, core.timer_moved_earlier())
    };
    Admission::deliver(deliveries);
    if wake {
        shared.wake.notify_one();
    }
    if let Arrived::Refused(reason) = &arrived {
        shared.count_refusal(type_index, *reason);
    }
    Ok(arrived)
}

/// Why a request was not admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotAdmitted {
    /// The controller refused it (counted in the metrics).
    Refused(Refusal),
    /// Its client withdrew it while it waited and stays (a PostgreSQL CancelRequest).
    Cancelled,
}

/// Await a queued request's verdict, or `cancel` (the client withdrew it: the controller's
/// `cancel`, no give-up). Dropped before it resolves (the client left), it reports the
/// client gone, which takes the request out of the queue.
pub(crate) async fn wait(
    shared: &Arc<Admission>,
    id: RequestId,
    mut rx: oneshot::Receiver<Verdict>,
    cancel: impl std::future::Future<Output = ()>,
) -> Result<(Permit, u64), NotAdmitted> {
    let mut guard = GoneGuard { shared: shared.clone(), id, armed: true };
    let verdict = tokio::select! {
        biased;
        v = &mut rx => v,
        () = cancel => {
            guard.armed = false;
            shared.event(|core, now| match core.waiters.remove(&id) {
                Some(_) => core.ctl.cancel(now, id),
                None => Vec::new(),
            });
            // A verdict sent meanwhile is dropped with `rx`, after the lock: an admission's
            // permit hands its ticket back unused.
            return Err(NotAdmitted::Cancelled);
        }
    };
    guard.armed = false;
    match verdict {
        Ok(Verdict::Admitted { permit, waited_us }) => Ok((permit, waited_us)),
        // Counted where the controller refused it.
        Ok(Verdict::Refused(reason)) => Err(NotAdmitted::Refused(reason)),
        // The sender was dropped without a verdict: only at teardown.
        Err(_) => Err(NotAdmitted::Refused(Refusal::ShuttingDown)),
    }
}
