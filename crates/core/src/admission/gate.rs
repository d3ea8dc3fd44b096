//! The gate: admission accounting (load against capacity, tickets released exactly once)
//! and the types it hands out. The waiting requests are in `queue`, the picks in `order`
//! (fifo, sjf) and `aging` (sjf-aging).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;

use serde::{Deserialize, Serialize};

use super::{AdmissionError, AdmissionPolicy, MIN_COST_US};
#[cfg(doc)]
use super::{Basis, Charge};

mod aging;
mod order;
mod queue;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GateConfig {
    /// Capacity in cost units (µs of expected service time, summed over admitted requests).
    pub capacity_us: u64,
    pub policy: AdmissionPolicy,
    /// Bound on waiting requests; arrivals beyond it are rejected.
    pub max_queue_len: usize,
    /// Requests waiting this long are expired (rejected) by [`Gate::expire`]; `None` = never.
    pub max_queue_wait_us: Option<u64>,
    /// At most this many admitted requests at once (`None`: cost capacity only).
    pub max_in_flight: Option<usize>,
    /// No request is charged more than this fraction of the capacity (in (0, 1]); see
    /// "Bounded charges" in the module docs. 1 (the default) is the paper's rule.
    #[serde(default = "unbounded_charge_share")]
    pub max_charge_share: f64,
    /// `sjf` only: a request that has waited this long is picked before every other (the
    /// oldest such first), and nothing else is admitted while it does not fit; `None`: plain
    /// sjf. See "Wait bound" in the module docs.
    #[serde(default)]
    pub max_wait_us: Option<u64>,
    /// Requests past their bound (`sjf`: waited `max_wait_us`; `sjf-aging`: past their
    /// deadline) go ahead of the others only while the requests admitted that way have had
    /// at most this share of the backend's busy time recently ([`OVERDUE_HALF_LIFE_US`],
    /// each its processor-sharing share while in flight); beyond it they
    /// wait in the policy's ordinary order and hold no one back. In (0, 1]; 1 (the
    /// default): always ahead. See "Overdue share" in the module docs.
    #[serde(default = "unbounded_charge_share")]
    pub overdue_share: f64,
    /// The backend serves one request at a time in arrival order ([`Basis::Serial`]): the
    /// overdue share counts each request the time from the later of its admission and the
    /// previous release to its own release, when it is released, instead of its
    /// processor-sharing share while in flight. `false` (the default): processor sharing.
    #[serde(default)]
    pub serial: bool,
}

fn unbounded_charge_share() -> f64 {
    1.0
}

impl GateConfig {
    pub fn new(capacity_us: u64, policy: AdmissionPolicy) -> Self {
        GateConfig {
            capacity_us,
            policy,
            max_queue_len: 100_000,
            max_queue_wait_us: None,
            max_in_flight: None,
            max_charge_share: 1.0,
            max_wait_us: None,
            overdue_share: 1.0,
            serial: false,
        }
    }

    /// The largest charge at the current capacity (at least [`MIN_COST_US`]); unbounded
    /// when `max_charge_share` is 1 (the paper's rule).
    pub fn max_charge_us(&self) -> u64 {
        if self.max_charge_share >= 1.0 {
            return u64::MAX;
        }
        ((self.capacity_us as f64 * self.max_charge_share) as u64).max(MIN_COST_US)
    }
}

/// Identifies a request from its arrival at the gate until it leaves (admitted, cancelled,
/// expired). Increasing in arrival order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct RequestId(pub u64);

impl fmt::Display for RequestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "#{}", self.0)
    }
}

/// Proof of admission. Not `Clone`: handing it to [`Gate::release`] consumes it, so a
/// charge cannot be released twice.
#[derive(Debug, PartialEq, Eq)]
#[must_use = "an admitted request's ticket must be released when it finishes or fails"]
pub struct Ticket {
    pub(super) id: RequestId,
    pub(super) charge_us: u64,
}

impl Ticket {
    pub fn id(&self) -> RequestId {
        self.id
    }
    pub fn charge_us(&self) -> u64 {
        self.charge_us
    }
}

/// A request that left the queue for the backend.
#[derive(Debug, PartialEq, Eq)]
pub struct Admitted {
    pub ticket: Ticket,
    /// Time spent in the queue (0 when admitted on arrival).
    pub waited_us: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Rejection {
    /// The queue already held `max_queue_len` requests.
    QueueFull,
}

/// An admitted, unfinished request.
#[derive(Debug, Clone, Copy)]
struct Running {
    charge_us: u64,
    admitted_us: u64,
    /// Admission time + charge.
    finish_us: u64,
    /// The share clock at admission.
    share_at_admission_us: f64,
    /// Admitted ahead of the ordinary order as overdue (counted in the overdue share).
    overdue: bool,
}

#[derive(Debug, Clone, Copy)]
struct Waiting {
    cost_us: u64,
    arrival_us: u64,
    deadline_us: u64,
    /// The request's type (`None`: a type of its own).
    request_type: Option<u64>,
}

/// Admission accounting plus the admission queue. See the module docs.
#[derive(Debug)]
pub struct Gate {
    cfg: GateConfig,
    next_seq: u64,
    last_now_us: u64,
    load_us: u64,
    /// `∫ dt / in_flight(t)` over the time anything was in flight, µs: a processor-sharing
    /// virtual clock. A request's share is its advance while the request was admitted.
    share_clock_us: f64,
    /// Admitted, unfinished requests by id.
    running: HashMap<u64, Running>,
    /// The last release of an admitted request ([`Gate::serial_us`]); `None` before the first.
    last_release_us: Option<u64>,
    /// The overdue stream's time and the gate's busy time, each decayed with half-life
    /// [`OVERDUE_HALF_LIFE_US`] to `last_now_us` (the share `overdue_share` bounds; see
    /// [`Gate::overdue_time_us`]).
    overdue_time_us: f64,
    busy_time_us: f64,
    /// Admitted requests that went ahead as overdue, still in flight.
    overdue_in_flight: usize,
    /// `(expected finish, seq)` of admitted requests (sjf-aging's earliest starts).
    by_finish: BTreeSet<(u64, u64)>,
    /// Waiting requests by arrival order.
    queue: BTreeMap<u64, Waiting>,
    /// `(cost, seq)` of the waiting requests that are the oldest of their type (every
    /// request without a type is): the SJF order, whose picks are always first in their type.
    by_cost: BTreeSet<(u64, u64)>,
    /// Waiting requests by type, in arrival order; bounded by the queue length (a type
    /// leaves the map with its last waiting request).
    by_type: HashMap<u64, BTreeSet<u64>>,
    /// `(deadline, seq)` of waiting requests (sjf-aging only).
    by_deadline: BTreeSet<(u64, u64)>,
    /// Waiting probes, by arrival (sjf only): ahead of every other waiting request.
    probes: BTreeSet<u64>,
}

impl Gate {
    pub fn new(cfg: GateConfig) -> Result<Self, AdmissionError> {
        if cfg.capacity_us < MIN_COST_US {
            return Err(AdmissionError::BadCapacity { capacity_us: cfg.capacity_us });
        }
        if cfg.max_queue_len == 0 {
            return Err(AdmissionError::BadQueueLen);
        }
        if cfg.max_in_flight == Some(0) {
            return Err(AdmissionError::BadInFlight);
        }
        if !(cfg.max_charge_share > 0.0 && cfg.max_charge_share <= 1.0) {
            return Err(AdmissionError::BadChargeShare { share: cfg.max_charge_share });
        }
        if !(cfg.overdue_share > 0.0 && cfg.overdue_share <= 1.0) {
            return Err(AdmissionError::BadOverdueShare { share: cfg.overdue_share });
        }
        Ok(Gate {
            cfg,
            next_seq: 0,
            last_now_us: 0,
            load_us: 0,
            share_clock_us: 0.0,
            running: HashMap::new(),
            last_release_us: None,
            overdue_time_us: 0.0,
            busy_time_us: 0.0,
            overdue_in_flight: 0,
            by_finish: BTreeSet::new(),
            queue: BTreeMap::new(),
            by_cost: BTreeSet::new(),
            by_type: HashMap::new(),
            by_deadline: BTreeSet::new(),
            probes: BTreeSet::new(),
        })
    }

    pub fn config(&self) -> &GateConfig {
        &self.cfg
    }

    pub fn capacity_us(&self) -> u64 {
        self.cfg.capacity_us
    }

    /// Sum of the charges of admitted, unfinished requests.
    pub fn load_us(&self) -> u64 {
        self.load_us
    }

    pub fn queue_len(&self) -> usize {
        self.queue.len()
    }

    /// Admitted, unfinished requests.
    pub fn in_flight(&self) -> usize {
        self.running.len()
    }

    /// The overdue stream's recent time and the gate's recent busy time, µs decayed with
    /// half-life [`OVERDUE_HALF_LIFE_US`] to the last event (0 while `overdue_share` is 1).
    /// Busy: anything in flight. The overdue stream's: the processor-sharing share of the
    /// requests admitted ahead as overdue, while in flight (`overdue / in flight` of each
    /// µs, as the share clock of [`Gate::share_us`]). The first stays within
    /// `overdue_share` × the second plus one request's service (see "Overdue share" in the
    /// module docs).
    pub fn overdue_time_us(&self) -> (f64, f64) {
        (self.overdue_time_us, self.busy_time_us)
    }

    /// Whether an admitted request went ahead as overdue (tests' instrumentation).
    #[cfg(test)]
    pub(crate) fn admitted_overdue(&self, id: RequestId) -> bool {
        self.running.get(&id.0).is_some_and(|r| r.overdue)
    }

    /// Admitted requests in flight that went ahead as overdue (tests' instrumentation).
    #[cfg(test)]
    pub(crate) fn overdue_in_flight(&self) -> usize {
        self.overdue_in_flight
    }

    fn clock(&mut self, now_us: u64) -> u64 {
        let now_us = self.last_now_us.max(now_us);
        self.accrue_overdue_time(now_us);
        self.share_clock_us = self.share_clock_at(now_us);
        self.last_now_us = now_us;
        now_us
    }

    /// Advance the overdue stream's time and the busy time to `now_us` (≥ the last time
    /// seen): nothing changed in between, so both grow at constant rates, decaying as they
    /// do (the exact integral of `rate × 2^(−age / half-life)`).
    fn accrue_overdue_time(&mut self, now_us: u64) {
        if self.cfg.overdue_share >= 1.0 {
            return;
        }
        let dt = now_us.saturating_sub(self.last_now_us) as f64;
        if dt <= 0.0 {
            return;
        }
        let n = self.running.len();
        // Serial: the time is counted at each release (`Gate::release`); here it only decays.
        let (overdue_rate, busy_rate) =
            if n > 0 && !self.cfg.serial { (self.overdue_in_flight as f64 / n as f64, 1.0) } else { (0.0, 0.0) };
        let lambda = std::f64::consts::LN_2 / super::OVERDUE_HALF_LIFE_US as f64;
        let decay = (-lambda * dt).exp();
        let gained = (1.0 - decay) / lambda;
        self.overdue_time_us = self.overdue_time_us * decay + overdue_rate * gained;
        self.busy_time_us = self.busy_time_us * decay + busy_rate * gained;
    }

    /// The share clock at `now_us` (≥ the last time seen), before anything changes then.
    fn share_clock_at(&self, now_us: u64) -> f64 {
        let n = self.running.len();
        if n == 0 {
            return self.share_clock_us;
        }
        self.share_clock_us + now_us.saturating_sub(self.last_now_us) as f64 / n as f64
    }

    /// An admitted request's *share* of the backend so far: `∫ dt / in_flight(t)` from its
    /// admission to `now_us`, in µs. On a backend that splits its capacity evenly among the
    /// admitted requests this is the service the request received, whatever the concurrency
    /// ([`Basis::Share`]); it never exceeds the time since admission. Call it before
    /// [`Gate::release`] (which consumes the ticket). Read-only.
    pub fn share_us(&self, now_us: u64, ticket: &Ticket) -> Result<u64, AdmissionError> {
        let at_admission = self
            .running
            .get(&ticket.id.0)
            .ok_or(AdmissionError::UnknownTicket { id: ticket.id.0 })?
            .share_at_admission_us;
        let now_us = self.last_now_us.max(now_us);
        Ok((self.share_clock_at(now_us) - at_admission).max(0.0).round() as u64)
    }

    /// A request finishing at `now_us` after `wall_us` of service: the time from the later
    /// of its start (`now_us − wall_us`) and the last release of any admitted request to
    /// `now_us`, so at most `wall_us` ([`Basis::Serial`]). On a backend that serves one
    /// request at a time in arrival order, the request ahead of it was released when the
    /// backend finished it, so this is the time the backend spent on this one, however many
    /// are in flight. Call it before [`Gate::release`] releases this request. Read-only.
    pub fn serial_us(&self, now_us: u64, wall_us: u64) -> u64 {
        let now_us = self.last_now_us.max(now_us);
        self.last_release_us.map_or(wall_us, |r| wall_us.min(now_us.saturating_sub(r)))
    }

    /// An admitted request finished (successfully or not): its charge is returned and the
    /// queue is dispatched.
    pub fn release(&mut self, now_us: u64, ticket: Ticket) -> Result<Vec<Admitted>, AdmissionError> {
        let now_us = self.clock(now_us);
        let r = self.running.remove(&ticket.id.0).ok_or(AdmissionError::UnknownTicket { id: ticket.id.0 })?;
        if self.cfg.serial && self.cfg.overdue_share < 1.0 {
            // The backend's time since the previous release (or this request's admission,
            // if later) was this request's.
            let since = self.last_release_us.map_or(r.admitted_us, |l| l.max(r.admitted_us));
            let t = now_us.saturating_sub(since) as f64;
            self.busy_time_us += t;
            if r.overdue {
                self.overdue_time_us += t;
            }
        }
        self.last_release_us = Some(now_us);
        debug_assert_eq!(r.charge_us, ticket.charge_us);
        self.by_finish.remove(&(r.finish_us, ticket.id.0));
        self.load_us -= r.charge_us;
        if r.overdue {
            self.overdue_in_flight -= 1;
        }

        Ok(self.dispatch(now_us))
    }

    /// Replace an admitted request's charge with a fresher estimate of its cost (clamped as
    /// on arrival). The load changes by the difference and the request's expected finish
    /// (admission time + charge) moves with it; a lower load may admit waiting requests
    /// (returned). A higher charge revokes nothing: as after lowering the capacity, nothing
    /// more is admitted until the load is back under it. The ticket carries the new charge,
    /// which its release returns.
    pub fn recharge(
        &mut self,
        now_us: u64,
        ticket: &mut Ticket,
        cost_us: u64,
    ) -> Result<Vec<Admitted>, AdmissionError> {
        let now_us = self.clock(now_us);
        let cost_us = cost_us.clamp(MIN_COST_US, self.cfg.max_charge_us());
        let id = ticket.id.0;
        let entry = self.running.get_mut(&id).ok_or(AdmissionError::UnknownTicket { id })?;
        let (old, finish) = (entry.charge_us, entry.finish_us);
        if old == cost_us {
            return Ok(Vec::new());
        }
        // finish = admission time + old charge, so it is at least `old`.
        let new_finish = (finish - old).saturating_add(cost_us);
        entry.charge_us = cost_us;
        entry.finish_us = new_finish;
        self.by_finish.remove(&(finish, id));
        self.by_finish.insert((new_finish, id));
        self.load_us = self.load_us - old + cost_us;
        ticket.charge_us = cost_us;
        Ok(self.dispatch(now_us))
    }

    /// Recharge every request in `admitted` that waited with the cost `cost_of` gives for it
    /// now ([`Gate::recharge`]; `None`: keep its charge), including the requests a lower
    /// charge admits in turn. Returns all of them, tickets carrying their new charges. The
    /// drivers (proxy, model) call this on each batch of admissions, so the cascade is
    /// written once. Bounded: each request is admitted, hence recharged, at most once.
    /// `admitted` must come from this gate; a ticket it does not hold (a caller's bug) keeps
    /// its charge, so no admission is ever lost.
    pub fn recharge_waited(
        &mut self,
        now_us: u64,
        admitted: Vec<Admitted>,
        mut cost_of: impl FnMut(RequestId) -> Option<u64>,
    ) -> Vec<Admitted> {
        let mut todo = std::collections::VecDeque::from(admitted);
        let mut out = Vec::with_capacity(todo.len());
        while let Some(mut a) = todo.pop_front() {
            if a.waited_us > 0 {
                if let Some(cost_us) = cost_of(a.ticket.id()) {
                    match self.recharge(now_us, &mut a.ticket, cost_us) {
                        Ok(more) => todo.extend(more),
                        Err(e) => debug_assert!(false, "recharge of an admission this gate made: {e}"),
                    }
                }
            }
            out.push(a);
        }
        out
    }

    /// Change the capacity (auto-tuning, calibration). Lowering it below the current load
    /// admits nothing until enough requests finish; nothing admitted is revoked.
    pub fn set_capacity(&mut self, now_us: u64, capacity_us: u64) -> Result<Vec<Admitted>, AdmissionError> {
        if capacity_us < MIN_COST_US {
            return Err(AdmissionError::BadCapacity { capacity_us });
        }
        let now_us = self.clock(now_us);
        self.cfg.capacity_us = capacity_us;
        Ok(self.dispatch(now_us))
    }

    fn fits(&self, cost_us: u64) -> bool {
        if self.cfg.max_in_flight.is_some_and(|m| self.running.len() >= m) {
            return false;
        }
        self.running.is_empty() || self.load_us.saturating_add(cost_us) <= self.cfg.capacity_us
    }

    /// Whether an overdue request may go ahead now: the share is unbounded (1), or the
    /// overdue stream's recent time is at most `overdue_share` of the gate's recent busy
    /// time ([`Gate::overdue_time_us`]). A share of *time* over time, not of the requests
    /// in flight: a backend that runs one request at a time in its own arrival order gives
    /// whoever holds a place its whole time, so a place for the overdue stream beside one
    /// for the others gave the costly overdue requests nearly all of it. Nor of charges
    /// at admission: a wall-clock charge is about a request's service times the requests
    /// beside it, so cheap requests admitted several at a time counted several times their
    /// service, and the overdue stream, its costly requests running alone, got 0.72-0.78
    /// of a one-processor backend at a share of 0.6 (`backend_tests`).
    pub(super) fn overdue_room(&self) -> bool {
        let share = self.cfg.overdue_share;
        share >= 1.0 || self.overdue_time_us <= share * self.busy_time_us
    }

    fn dispatch(&mut self, now_us: u64) -> Vec<Admitted> {
        let mut out = Vec::new();
        while let Some((seq, overdue)) = self.next_admission(now_us) {
            let w = self.remove_waiting(seq).expect("picked request is waiting");
            if let Some(request_type) = w.request_type.filter(|_| !self.probes.is_empty()) {
                // A probe asks for one fresh sample of its type; its type's head, admitted
                // now, gives it. Left waiting, the probe would take every older request of
                // its type ahead of all others, one after another: in front of json-server
                // a backlog of 18 full-text searches went before 135 lookups for 6 s.
                let answered: Vec<u64> =
                    self.probes.iter().copied().filter(|p| self.queue[p].request_type == Some(request_type)).collect();
                for p in answered {
                    self.probes.remove(&p);
                }
            }
            let finish = now_us.saturating_add(w.cost_us);
            self.load_us += w.cost_us;
            self.running.insert(
                seq,
                Running {
                    charge_us: w.cost_us,
                    admitted_us: now_us,
                    finish_us: finish,
                    share_at_admission_us: self.share_clock_us,
                    overdue,
                },
            );
            if overdue {
                self.overdue_in_flight += 1;
            }
            self.by_finish.insert((finish, seq));
            out.push(Admitted {
                ticket: Ticket { id: RequestId(seq), charge_us: w.cost_us },
                waited_us: now_us - w.arrival_us,
            });
        }
        out
    }
}
