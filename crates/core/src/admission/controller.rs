//! The admission controller: the one admission loop every gatekeeper driver runs (the HTTP
//! proxy, the PostgreSQL proxy, the simulator's model, the tests' simulated backends).
//!
//! Sans-I/O, as quinn's protocol core: the driver reports events with the time
//! (`now_us`, any monotonic clock in µs) and applies the [`Decision`]s that come back. It
//! owns the [`Gate`], the per-type [`CostEstimator`], the optional [`AutoCapacity`], the
//! clients' [`Patience`], and which request is of which type; the driver keeps nothing of
//! the admission logic.
//!
//! # Events
//! - [`Controller::arrive`]: a request of a type arrives. It is charged its type's
//!   estimate (a probe when its type has no sample and no probe yet, "First sample", or
//!   has gone unsampled for a while, "Re-sampling" in the [module docs](super)), queued
//!   behind its type's earlier requests (first come, first served within a type, under
//!   every policy) and admitted at once if the policy picks it and it fits. An unsampled
//!   type's probe that leaves without a sample (failed, withdrawn, expired, its client
//!   gone) is handed on to the type's oldest waiting request.
//! - [`Controller::finish`]: an admitted request is done with the backend, with its
//!   measured service time (admission → last byte) when it succeeded, or none when it
//!   failed (a failure says nothing of the cost). The estimator learns the sample (its
//!   [`Basis`]: wall time, the processor-sharing or serial share, or the backend's
//!   processor time the driver measured, each at most the wall time), auto capacity
//!   records it (the wall time under the processor-time basis), the type's waiting
//!   requests are re-priced, the charge is released, and what that lets in is admitted.
//! - [`Controller::client_gone`]: the client left, while its request waited (it is taken
//!   out of the queue: never started) or while the backend worked on it (the charge stays
//!   until [`Controller::finish`]: the backend is still busy with it). Either way the time
//!   the client waited teaches the [`Patience`].
//! - [`Controller::cancel`]: the client withdrew a waiting request and stays (a
//!   PostgreSQL CancelRequest of a queued transaction): taken out of the queue like a
//!   client that left, but it is not a give-up, so the [`Patience`] learns nothing. A
//!   running request is not the controller's to cancel (the backend ends it early; it
//!   finishes as usual).
//! - [`Controller::poll`] at [`Controller::next_wakeup_us`]: waits past
//!   `max_queue_wait` expire, waiting requests that can no longer finish before their
//!   client gives up are refused, sjf-aging deadlines are re-picked, auto capacity ticks.
//! - [`Controller::shut_down`]: every waiting request is refused; later arrivals too.
//!
//! # Decisions
//! [`Decision::Admit`] hands the driver a [`Grant`] whose [`Ticket`] it must give back to
//! [`Controller::finish`] exactly once. [`Decision::Refuse`] names a request taken out of
//! the queue and why ([`Refusal`]); the driver answers it (HTTP 503 with `Retry-After`,
//! a PostgreSQL `ErrorResponse`).
//!
//! # Charging
//! With [`ChargeAt::Admission`] (the default) a request that waited is recharged with its
//! type's estimate when it is admitted ([`Gate::recharge_waited`]) and, whenever a type's
//! estimate changes, its waiting requests are re-priced ([`Gate::reprice_waiting`]); with
//! [`ChargeAt::Arrival`] it keeps the charge it arrived with, the paper's rule.
//!
//! # Patience
//! Once the clients' patience is known ([`PatienceRule`]: learned from give-ups, or fixed),
//! a request that would be admitted although now + its type's estimate is past its arrival
//! plus its budget (a fraction of the patience, `patience::BUDGET_FRACTION`: estimates are
//! means) is refused instead ([`Refusal::WouldNotFinish`]) and its charge freed for
//! a request that can still be served in time; a waiting request is refused as soon as that
//! becomes true ([`Controller::poll`]). Exempt: a probe (its type must be measured) and a
//! request that would run alone (the backend would otherwise idle). The operator's
//! `max_queue_wait` stays an upper bound.
//!
//! # Limits
//! Waiting requests: the gate's `max_queue_len` (arrivals beyond it are refused,
//! [`Refusal::QueueFull`]); the controller's own maps hold only waiting and admitted
//! requests. One event's work is bounded by the requests it admits or refuses, each at
//! most once.
//!
//! Must not know: sockets, HTTP, the PostgreSQL protocol, tokio, the wall clock.

use std::collections::{BTreeSet, HashMap};

use serde::{Deserialize, Serialize};

use super::auto::{AutoCapacity, AutoConfig, AutoDecision};
use super::patience::{Patience, PatienceRule};
use super::{
    AdmissionError, Admitted, Basis, CostEstimator, EstimatorConfig, Gate, GateConfig, RequestId, Sample, Ticket,
};

/// When a request's charge is set (see "Charging" in the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
pub enum ChargeAt {
    /// The estimate at arrival, kept (the paper's rule).
    Arrival,
    /// Re-priced while waiting and recharged at admission (the default).
    #[default]
    Admission,
}

impl std::str::FromStr for ChargeAt {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim() {
            "arrival" => Ok(ChargeAt::Arrival),
            "admission" => Ok(ChargeAt::Admission),
            other => Err(format!("charge-at {other:?}: expected `arrival` or `admission`")),
        }
    }
}

/// Everything the controller decides by.
#[derive(Debug, Clone, PartialEq)]
pub struct ControllerConfig {
    /// Capacity (the initial one under auto capacity), policy and the queue's limits.
    pub gate: GateConfig,
    pub estimator: EstimatorConfig,
    /// `Some`: the capacity follows [`AutoCapacity`], starting at its initial capacity.
    pub auto: Option<AutoConfig>,
    pub charge_at: ChargeAt,
    pub patience: PatienceRule,
}

impl ControllerConfig {
    pub fn new(gate: GateConfig) -> Self {
        ControllerConfig {
            gate,
            estimator: EstimatorConfig::default(),
            auto: None,
            charge_at: ChargeAt::default(),
            patience: PatienceRule::default(),
        }
    }
}

/// An admission: the ticket to hand back to [`Controller::finish`].
#[derive(Debug, PartialEq, Eq)]
#[must_use = "an admitted request's ticket must be given back to Controller::finish"]
pub struct Grant {
    pub ticket: Ticket,
    pub type_index: usize,
    /// Time spent waiting (0 when admitted on arrival).
    pub waited_us: u64,
    /// Admitted as a probe: the first sample of a type that has none ("First sample" in the
    /// [module docs](super)), or a re-sampling probe.
    pub probe: bool,
}

/// Why a request is not served.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Refusal {
    /// The queue held `max_queue_len` requests.
    QueueFull,
    /// It waited `max_queue_wait`.
    Expired,
    /// It would not finish before its client gives up (see "Patience").
    WouldNotFinish,
    /// The controller is shutting down.
    ShuttingDown,
}

impl Refusal {
    /// A short name for logs and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Refusal::QueueFull => "queue_full",
            Refusal::Expired => "queue_wait",
            Refusal::WouldNotFinish => "would_not_finish",
            Refusal::ShuttingDown => "shutting_down",
        }
    }
}

/// What the driver must do.
#[derive(Debug, PartialEq, Eq)]
pub enum Decision {
    /// Start this request on the backend.
    Admit(Grant),
    /// Answer this waiting request with a refusal; it is no longer queued.
    Refuse { id: RequestId, type_index: usize, reason: Refusal },
}

/// An arrival's outcome, and what else it decided.
#[derive(Debug, PartialEq, Eq)]
pub struct Arrived {
    pub outcome: Arrival,
    /// Arrived as a probe: its type has no sample and no other probe waiting or in flight
    /// ("First sample" in the module docs), or its type has gone unsampled for
    /// `resample_after_us` ("Re-sampling").
    pub probe: bool,
    /// Decisions about other requests.
    pub others: Vec<Decision>,
}

/// What became of an arrival.
#[derive(Debug, PartialEq, Eq)]
pub enum Arrival {
    /// Admitted at once.
    Admitted(Grant),
    /// Waiting: a later [`Decision`] names this id.
    Queued(RequestId),
    /// Refused at once.
    Refused(Refusal),
}

#[derive(Debug, Clone, Copy)]
struct Known {
    type_index: usize,
    arrival_us: u64,
    /// Admitted as a probe, or waiting as one.
    probe: bool,
}

/// The admission controller (see the module docs).
#[derive(Debug)]
pub struct Controller {
    gate: Gate,
    estimator: CostEstimator,
    auto: Option<AutoCapacity>,
    /// Wall-time estimates beside processor-time ones ([`Basis::Cpu`]): auto capacity's
    /// signal, since processor time barely grows past the backend's knee.
    wall_estimator: Option<CostEstimator>,
    patience: Patience,
    charge_at: ChargeAt,
    /// Waiting requests, with their entry in `doomed_at` if any; bounded by the gate's
    /// queue length.
    waiting: HashMap<RequestId, (Known, Option<u64>)>,
    /// Each type's waiting requests, oldest first.
    waiting_by_type: Vec<BTreeSet<RequestId>>,
    /// `(when it can no longer finish in time, id)` of waiting requests, by the estimate
    /// and patience when last looked at (re-checked when due).
    doomed_at: BTreeSet<(u64, RequestId)>,
    /// Admitted, unfinished requests.
    running: HashMap<RequestId, Known>,
    in_flight_by_type: Vec<usize>,
    /// Per type with no sample yet: the request measuring it first (its probe, waiting as
    /// the type's oldest or in flight), `None` when no request of the type is waiting.
    first_probe: Vec<Option<RequestId>>,
    shutting_down: bool,
}

impl Controller {
    /// A controller for request types `0..num_types`, starting at `now_us`.
    pub fn new(cfg: ControllerConfig, num_types: usize, now_us: u64) -> Result<Self, AdmissionError> {
        let estimator = CostEstimator::new(num_types, cfg.estimator.clone())?;
        let wall_estimator = (cfg.estimator.basis == Basis::Cpu)
            .then(|| CostEstimator::new(num_types, EstimatorConfig { basis: Basis::Wall, ..cfg.estimator.clone() }))
            .transpose()?;
        let mut gate_cfg = cfg.gate;
        gate_cfg.serial = cfg.estimator.basis == Basis::Serial;
        let auto = match cfg.auto {
            Some(a) => {
                gate_cfg.capacity_us = a.initial_capacity_us;
                Some(AutoCapacity::new(a, num_types, now_us)?)
            }
            None => None,
        };
        Ok(Controller {
            gate: Gate::new(gate_cfg)?,
            estimator,
            auto,
            wall_estimator,
            patience: Patience::new(cfg.patience, num_types),
            charge_at: cfg.charge_at,
            waiting: HashMap::new(),
            waiting_by_type: vec![BTreeSet::new(); num_types],
            doomed_at: BTreeSet::new(),
            running: HashMap::new(),
            in_flight_by_type: vec![0; num_types],
            first_probe: vec![None; num_types],
            shutting_down: false,
        })
    }

    /// A request of `type_index` arrives (see "Events").
    pub fn arrive(&mut self, now_us: u64, type_index: usize) -> Result<Arrived, AdmissionError> {
        let refused = |r| Arrived { outcome: Arrival::Refused(r), probe: false, others: Vec::new() };
        if self.shutting_down {
            return Ok(refused(Refusal::ShuttingDown));
        }
        let charge = self.estimator.charge(type_index, now_us)?;
        // An unsampled type: a probe when it has none waiting or in flight, and only then
        // (at most one at a time, whatever the re-sampling clock says).
        let first_sample = self.estimator.samples(type_index)? == 0;
        let probe = if first_sample { self.first_probe[type_index].is_none() } else { charge.probe };
        let request_type = type_index as u64;
        let arrived = if probe {
            self.gate.arrive_probe_in(now_us, request_type, charge.cost_us)
        } else {
            self.gate.arrive_in(now_us, request_type, charge.cost_us)
        };
        let Ok((id, admitted)) = arrived else {
            return Ok(refused(Refusal::QueueFull));
        };
        self.waiting.insert(id, (Known { type_index, arrival_us: now_us, probe }, None));
        self.waiting_by_type[type_index].insert(id);
        if probe && first_sample {
            self.first_probe[type_index] = Some(id);
        }
        let mut decisions = self.settle(now_us, admitted);
        let own = decisions.iter().position(|d| match d {
            Decision::Admit(g) => g.ticket.id() == id,
            Decision::Refuse { id: r, .. } => *r == id,
        });
        let outcome = match own.map(|i| decisions.remove(i)) {
            Some(Decision::Admit(g)) => Arrival::Admitted(g),
            Some(Decision::Refuse { reason, .. }) => Arrival::Refused(reason),
            None => {
                if let Some(a) = self.auto.as_mut() {
                    a.note_saturated();
                }
                self.watch_doom(now_us, id);
                Arrival::Queued(id)
            }
        };
        Ok(Arrived { outcome, probe, others: decisions })
    }

    /// An admitted request is done with the backend (see "Events"): `service_us` is its
    /// measured time from admission to its last byte, `None` when it failed.
    pub fn finish(
        &mut self,
        now_us: u64,
        ticket: Ticket,
        service_us: Option<u64>,
    ) -> Result<Vec<Decision>, AdmissionError> {
        self.finish_with_cpu(now_us, ticket, service_us, None)
    }

    /// [`Controller::finish`] with the backend's processor time spent on the request, where
    /// the driver measured it (`cpu_us`, the sample of [`Basis::Cpu`]).
    pub fn finish_with_cpu(
        &mut self,
        now_us: u64,
        ticket: Ticket,
        service_us: Option<u64>,
        cpu_us: Option<u64>,
    ) -> Result<Vec<Decision>, AdmissionError> {
        let id = ticket.id();
        let known = self.running.remove(&id).ok_or(AdmissionError::UnknownTicket { id: id.0 })?;
        let t = known.type_index;
        self.in_flight_by_type[t] = self.in_flight_by_type[t].saturating_sub(1);
        let mut admitted = Vec::new();
        if let Some(wall_us) = service_us {
            self.patience.served(now_us);
            let share_us = self.gate.share_us(now_us, &ticket)?.min(wall_us);
            let serial_us = self.gate.serial_us(now_us, wall_us);
            let sample = Sample { wall_us, share_us, serial_us, cpu_us: cpu_us.map(|c| c.min(wall_us)) };
            self.estimator.observe_request_at(t, sample, now_us)?;
            let estimate_us = self.estimator.estimate_us(t)?;
            // Auto capacity reads inflation from the estimates of the basis, or, where that
            // hardly inflates (processor time), from wall-time ones.
            let inflation = match self.wall_estimator.as_mut() {
                Some(w) => {
                    w.observe_request_at(t, sample, now_us)?;
                    (wall_us, w.estimate_us(t)?, w.is_warm(t))
                }
                None => (self.estimator.sample_us(sample), estimate_us, self.estimator.is_warm(t)),
            };
            if let Some(auto) = self.auto.as_mut() {
                auto.record(t, inflation.0, inflation.1, inflation.2);
            }
            if self.charge_at == ChargeAt::Admission && self.gate.reprices_waiting() {
                let ids: Vec<RequestId> = self.waiting_by_type[t].iter().copied().collect();
                if !ids.is_empty() {
                    admitted = self.gate.reprice_waiting(now_us, ids, estimate_us);
                }
            }
        }
        if self.first_probe[t] == Some(id) {
            // The type's first probe is done: measured, the type is sampled; failed, the
            // type's oldest waiting request measures it next, marked before the charge is
            // released so that under sjf it is first in line for the room.
            self.first_probe[t] = None;
            admitted.extend(self.hand_on_probe(now_us, t));
        }
        admitted.extend(self.gate.release(now_us, ticket)?);
        Ok(self.settle(now_us, admitted))
    }

    /// The client of request `id` left (see "Events"). Unknown ids (already refused or
    /// finished) are ignored.
    pub fn client_gone(&mut self, now_us: u64, id: RequestId) -> Vec<Decision> {
        if let Some(k) = self.running.get(&id) {
            self.patience.give_up(now_us, k.type_index, now_us.saturating_sub(k.arrival_us));
            return Vec::new();
        }
        let Some(k) = self.forget_left(id) else { return Vec::new() };
        let known_before = self.patience.patience_us(k.type_index).is_some();
        self.patience.give_up(now_us, k.type_index, now_us.saturating_sub(k.arrival_us));
        if !known_before && self.patience.patience_us(k.type_index).is_some() {
            // The patience has just become known: watch every waiting request from now on.
            let ids: Vec<RequestId> = self.waiting.keys().copied().collect();
            for w in ids {
                self.watch_doom(now_us, w);
            }
        }
        let mut admitted = self.gate.cancel(now_us, id).unwrap_or_default();
        admitted.extend(self.hand_on_probe(now_us, k.type_index));
        self.settle(now_us, admitted)
    }

    /// The client withdrew waiting request `id` (see "Events"). Running and unknown ids
    /// (already admitted, refused or finished) are ignored.
    pub fn cancel(&mut self, now_us: u64, id: RequestId) -> Vec<Decision> {
        let Some(k) = self.forget_left(id) else { return Vec::new() };
        let mut admitted = self.gate.cancel(now_us, id).unwrap_or_default();
        admitted.extend(self.hand_on_probe(now_us, k.type_index));
        self.settle(now_us, admitted)
    }

    /// Time has come (see "Events"): expiries, refusals for patience, aging, auto capacity.
    pub fn poll(&mut self, now_us: u64) -> Vec<Decision> {
        let (expired, mut admitted) = self.gate.expire(now_us);
        let mut out = Vec::new();
        let mut types = BTreeSet::new();
        for id in expired {
            if let Some(k) = self.forget_left(id) {
                out.push(Decision::Refuse { id, type_index: k.type_index, reason: Refusal::Expired });
                types.insert(k.type_index);
            }
        }
        // Every expired request out of the maps first: a probe is handed on to a request
        // still waiting.
        for t in types {
            admitted.extend(self.hand_on_probe(now_us, t));
        }
        // Settled before anything else is looked at: an admitted request is no longer waiting.
        out.extend(self.settle(now_us, admitted));
        self.patience.forget(now_us);
        while let Some(&(at, id)) = self.doomed_at.first() {
            if at > now_us {
                break;
            }
            self.doomed_at.pop_first();
            if let Some(w) = self.waiting.get_mut(&id) {
                w.1 = None;
            }
            if !self.is_doomed(now_us, id) {
                self.watch_doom(now_us, id);
                continue;
            }
            let k = self.forget_left(id).expect("a watched request is waiting");
            let admitted = self.gate.cancel(now_us, id).unwrap_or_default();
            out.push(Decision::Refuse { id, type_index: k.type_index, reason: Refusal::WouldNotFinish });
            out.extend(self.settle(now_us, admitted));
        }
        let mut admitted = self.gate.poll(now_us);
        if let Some(auto) = self.auto.as_mut() {
            if let Some(d) = auto.tick(now_us) {
                let cap = auto.capacity_us();
                if d != AutoDecision::Wait && cap != self.gate.capacity_us() {
                    admitted.extend(self.gate.set_capacity(now_us, cap).unwrap_or_default());
                }
            }
        }
        out.extend(self.settle(now_us, admitted));
        out
    }

    /// When [`Controller::poll`] next has something to do.
    pub fn next_wakeup_us(&self) -> Option<u64> {
        [
            self.gate.next_wakeup_us(),
            self.auto.as_ref().map(AutoCapacity::next_tick_us),
            self.doomed_at.first().map(|d| d.0),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Refuse every waiting request and every later arrival; admitted ones run on.
    pub fn shut_down(&mut self, now_us: u64) -> Vec<Decision> {
        self.shutting_down = true;
        let mut ids: Vec<RequestId> = self.waiting.keys().copied().collect();
        ids.sort_unstable();
        let mut out = Vec::with_capacity(ids.len());
        for id in ids {
            // Taking an older request out can let a younger one in (fifo: the head that did
            // not fit leaves, the next one fits); that one was admitted and runs on, so it is
            // no longer waiting here.
            let Some(k) = self.forget_left(id) else { continue };
            let admitted = self.gate.cancel(now_us, id).unwrap_or_default();
            out.push(Decision::Refuse { id, type_index: k.type_index, reason: Refusal::ShuttingDown });
            out.extend(self.settle(now_us, admitted));
        }
        out
    }

    /// Change the policy (a reload); what the new order admits is returned.
    pub fn set_policy(&mut self, now_us: u64, policy: super::AdmissionPolicy) -> Vec<Decision> {
        let mut admitted = self.gate.set_policy(now_us, policy);
        // The gate keeps probes only under sjf: into sjf, each unsampled type's waiting
        // probe is first in line again.
        let waiting_probes: Vec<RequestId> =
            self.first_probe.iter().flatten().copied().filter(|id| self.waiting.contains_key(id)).collect();
        for id in waiting_probes {
            admitted.extend(self.gate.make_probe(now_us, id));
        }
        self.settle(now_us, admitted)
    }

    /// Fix the capacity (a reload or calibration): auto capacity, if on, stops.
    pub fn set_capacity(&mut self, now_us: u64, capacity_us: u64) -> Result<Vec<Decision>, AdmissionError> {
        self.auto = None;
        let admitted = self.gate.set_capacity(now_us, capacity_us)?;
        Ok(self.settle(now_us, admitted))
    }

    /// Let auto capacity steer again (a reload): it restarts at its initial capacity.
    pub fn set_auto(&mut self, now_us: u64, cfg: AutoConfig) -> Result<Vec<Decision>, AdmissionError> {
        let auto = AutoCapacity::new(cfg, self.estimator.num_types(), now_us)?;
        let admitted = self.gate.set_capacity(now_us, auto.capacity_us())?;
        self.auto = Some(auto);
        Ok(self.settle(now_us, admitted))
    }

    /// Whether auto capacity steers the capacity.
    pub fn is_auto(&self) -> bool {
        self.auto.is_some()
    }

    /// Read-only views for metrics and tests.
    pub fn gate(&self) -> &Gate {
        &self.gate
    }
    pub fn estimator(&self) -> &CostEstimator {
        &self.estimator
    }
    pub fn auto(&self) -> Option<&AutoCapacity> {
        self.auto.as_ref()
    }
    /// How long a client of this type is taken to wait, if known.
    pub fn patience_us(&self, type_index: usize) -> Option<u64> {
        self.patience.patience_us(type_index)
    }
    /// Give-ups reported so far.
    pub fn give_ups(&self) -> u64 {
        self.patience.give_ups()
    }
    /// The request measuring a type that has no sample yet (its first probe, waiting or in
    /// flight), if any.
    pub fn first_probe(&self, type_index: usize) -> Option<RequestId> {
        self.first_probe.get(type_index).copied().flatten()
    }
    pub fn in_flight_by_type(&self) -> &[usize] {
        &self.in_flight_by_type
    }
    /// When the longest-waiting request arrived (the oldest waiter: PgBouncer's `maxwait`
    /// is `now` minus this), or `None` when nothing waits. O(types): each type's waiting
    /// requests are kept oldest first.
    pub fn oldest_waiting_arrival_us(&self) -> Option<u64> {
        self.waiting_by_type
            .iter()
            .filter_map(|ids| ids.first())
            .filter_map(|id| self.waiting.get(id).map(|w| w.0.arrival_us))
            .min()
    }
    pub fn queued_by_type(&self) -> Vec<usize> {
        self.waiting_by_type.iter().map(BTreeSet::len).collect()
    }
    /// The type of a waiting or admitted request.
    pub fn type_of(&self, id: RequestId) -> Option<usize> {
        self.waiting.get(&id).map(|w| &w.0).or_else(|| self.running.get(&id)).map(|k| k.type_index)
    }
    pub fn is_waiting(&self, id: RequestId) -> bool {
        self.waiting.contains_key(&id)
    }
    pub fn is_shutting_down(&self) -> bool {
        self.shutting_down
    }

    /// Turn the gate's admissions into decisions: recharge what waited (under
    /// [`ChargeAt::Admission`]), refuse what would not finish in time (its charge freed at
    /// once, which may admit more), admit the rest. Each request is handled once.
    fn settle(&mut self, now_us: u64, admitted: Vec<Admitted>) -> Vec<Decision> {
        let mut out = Vec::with_capacity(admitted.len());
        let mut todo = admitted;
        while !todo.is_empty() {
            let batch = std::mem::take(&mut todo);
            let batch = match self.charge_at {
                ChargeAt::Admission => {
                    let (waiting, estimator) = (&self.waiting, &self.estimator);
                    let cost_of =
                        |id: RequestId| waiting.get(&id).and_then(|w| estimator.estimate_us(w.0.type_index).ok());
                    self.gate.recharge_waited(now_us, batch, cost_of)
                }
                ChargeAt::Arrival => batch,
            };
            for a in batch {
                let id = a.ticket.id();
                let Some(k) = self.forget_waiting(id) else {
                    // Cannot happen: the gate admits only what waits here. Give the charge
                    // back rather than lose it.
                    debug_assert!(false, "admitted {id} that the controller does not know");
                    todo.extend(self.gate.release(now_us, a.ticket).unwrap_or_default());
                    continue;
                };
                let runs_alone = self.gate.in_flight() == 1;
                if !k.probe && !runs_alone && self.too_late(now_us, &k) {
                    todo.extend(self.gate.release(now_us, a.ticket).unwrap_or_default());
                    out.push(Decision::Refuse { id, type_index: k.type_index, reason: Refusal::WouldNotFinish });
                    continue;
                }
                self.running.insert(id, k);
                self.in_flight_by_type[k.type_index] += 1;
                out.push(Decision::Admit(Grant {
                    ticket: a.ticket,
                    type_index: k.type_index,
                    waited_us: a.waited_us,
                    probe: k.probe,
                }));
            }
        }
        out
    }

    /// How long a request of the type is expected to run: its estimate, or its wall-time
    /// one under the processor-time basis (a request waits on the backend's CPUs too).
    fn run_time_us(&self, type_index: usize) -> u64 {
        self.wall_estimator.as_ref().unwrap_or(&self.estimator).estimate_us(type_index).unwrap_or(0)
    }

    /// Started now, would the request finish after its client has given up?
    fn too_late(&self, now_us: u64, k: &Known) -> bool {
        let Some(budget_us) = self.patience.budget_us(k.type_index) else { return false };
        let estimate_us = self.run_time_us(k.type_index);
        now_us.saturating_add(estimate_us) > k.arrival_us.saturating_add(budget_us)
    }

    fn is_doomed(&self, now_us: u64, id: RequestId) -> bool {
        self.waiting.get(&id).is_some_and(|(k, _)| !k.probe && self.too_late(now_us, k))
    }

    /// Watch a waiting request for the moment it can no longer finish in time (by its
    /// type's estimate and patience now; re-checked then).
    fn watch_doom(&mut self, now_us: u64, id: RequestId) {
        let Some(&(k, old)) = self.waiting.get(&id) else { return };
        if k.probe {
            return;
        }
        let Some(budget_us) = self.patience.budget_us(k.type_index) else { return };
        let estimate_us = self.run_time_us(k.type_index);
        // The first µs at which now + estimate > arrival + budget.
        let at = k.arrival_us.saturating_add(budget_us).saturating_sub(estimate_us).saturating_add(1);
        let at = at.max(now_us.saturating_add(1));
        if let Some(old) = old {
            self.doomed_at.remove(&(old, id));
        }
        self.doomed_at.insert((at, id));
        self.waiting.insert(id, (k, Some(at)));
    }

    /// [`Controller::forget_waiting`] for a request that leaves without being admitted: if
    /// it was its type's first probe, the type has none until [`Controller::hand_on_probe`].
    fn forget_left(&mut self, id: RequestId) -> Option<Known> {
        let k = self.forget_waiting(id)?;
        if self.first_probe[k.type_index] == Some(id) {
            self.first_probe[k.type_index] = None;
        }
        Some(k)
    }

    /// Give an unsampled type without a probe one: its oldest waiting request, marked in
    /// the gate ([`Gate::make_probe`]; returned: what that dispatch admitted, to settle).
    /// Nothing when the type has a sample or a probe, nothing of it waits, or the
    /// controller is shutting down.
    fn hand_on_probe(&mut self, now_us: u64, t: usize) -> Vec<Admitted> {
        let unsampled = self.estimator.samples(t).is_ok_and(|n| n == 0);
        if !unsampled || self.first_probe[t].is_some() || self.shutting_down {
            return Vec::new();
        }
        let Some(&id) = self.waiting_by_type[t].first() else { return Vec::new() };
        self.first_probe[t] = Some(id);
        if let Some((k, doom_at)) = self.waiting.get_mut(&id) {
            k.probe = true;
            // A probe is never refused for patience (see "Patience"): no longer watched.
            if let Some(at) = doom_at.take() {
                self.doomed_at.remove(&(at, id));
            }
        }
        self.gate.make_probe(now_us, id)
    }

    /// Take a request out of the waiting maps (not out of the gate).
    fn forget_waiting(&mut self, id: RequestId) -> Option<Known> {
        let (k, doom_at) = self.waiting.remove(&id)?;
        self.waiting_by_type[k.type_index].remove(&id);
        if let Some(at) = doom_at {
            self.doomed_at.remove(&(at, id));
        }
        Some(k)
    }
}
