//! The waiting requests: arrivals (tail drop when full), probes, cancellation, expiry,
//! re-pricing, and when the timer must next look.

#[cfg(doc)]
use super::super::Charge;
use super::super::{AdmissionPolicy, MIN_COST_US};
use super::{Admitted, Gate, Rejection, RequestId, Waiting};

impl Gate {
    /// The charge of the waiting request the policy looks at first (`None`: nothing waits):
    /// under `fifo` the oldest, under `sjf` the oldest probe or else the cheapest, under
    /// `sjf-aging` the cheapest. While it waits with `load + head_cost > capacity` and
    /// fewer than `max_in_flight` are admitted, `fifo` and `sjf` leave `capacity − load`
    /// unused (metrics: why capacity is idle while requests wait).
    pub fn head_cost_us(&self) -> Option<u64> {
        let seq = match self.cfg.policy {
            AdmissionPolicy::Fifo => *self.queue.first_key_value()?.0,
            AdmissionPolicy::Sjf => {
                self.overdue_head(self.last_now_us).filter(|_| self.overdue_room()).or_else(|| self.sjf_head())?
            }
            AdmissionPolicy::SjfAging { .. } => return self.by_cost.first().map(|&(c, _)| c),
        };
        Some(self.queue[&seq].cost_us)
    }

    pub fn is_queued(&self, id: RequestId) -> bool {
        self.queue.contains_key(&id.0)
    }

    /// A request arrives with its estimated cost. It joins the queue and the gate
    /// dispatches; the returned admissions may include it (and, after a capacity change,
    /// others). Rejected without side effects when the queue is full.
    pub fn arrive(&mut self, now_us: u64, cost_us: u64) -> Result<(RequestId, Vec<Admitted>), Rejection> {
        self.arrive_as(now_us, cost_us, false, None)
    }

    /// [`Gate::arrive`] for a request of a request type: within a type every policy
    /// admits in arrival order, whatever the charges (the type rule in
    /// the module docs). A type's estimate drifts, so charges taken at arrival would
    /// otherwise let later requests of a type overtake earlier ones for ever.
    pub fn arrive_in(
        &mut self,
        now_us: u64,
        request_type: u64,
        cost_us: u64,
    ) -> Result<(RequestId, Vec<Admitted>), Rejection> {
        self.arrive_as(now_us, cost_us, false, Some(request_type))
    }

    /// [`Gate::arrive_probe`] for a request of a type ([`Gate::arrive_in`]): under `sjf`
    /// the probe's type goes ahead of every other, its requests in arrival order.
    pub fn arrive_probe_in(
        &mut self,
        now_us: u64,
        request_type: u64,
        cost_us: u64,
    ) -> Result<(RequestId, Vec<Admitted>), Rejection> {
        self.arrive_as(now_us, cost_us, true, Some(request_type))
    }

    /// [`Gate::arrive`] for a probe ([`Charge::probe`]): under `sjf` it waits ahead of every
    /// non-probe (probes in arrival order), charged `cost_us` as any request, so it is
    /// admitted as soon as it fits. Under `fifo` and `sjf-aging` it is an ordinary arrival.
    pub fn arrive_probe(&mut self, now_us: u64, cost_us: u64) -> Result<(RequestId, Vec<Admitted>), Rejection> {
        self.arrive_as(now_us, cost_us, true, None)
    }

    /// Make a waiting request a probe, as if it had arrived as one ([`Gate::arrive_probe`]):
    /// under `sjf` its type goes ahead of every other from now on; under `fifo` and
    /// `sjf-aging` nothing changes. Then the gate dispatches (returned admissions). A request
    /// not waiting is ignored. The controller hands an unsampled type's probe on this way
    /// when the one it had leaves without a sample ("First sample" in the module docs).
    pub fn make_probe(&mut self, now_us: u64, id: RequestId) -> Vec<Admitted> {
        if self.cfg.policy != AdmissionPolicy::Sjf || !self.queue.contains_key(&id.0) || !self.probes.insert(id.0) {
            return Vec::new();
        }
        let now_us = self.clock(now_us);
        self.dispatch(now_us)
    }

    /// Waiting probes (sjf only; 0 under other policies).
    pub fn probes_waiting(&self) -> usize {
        self.probes.len()
    }

    fn arrive_as(
        &mut self,
        now_us: u64,
        cost_us: u64,
        probe: bool,
        request_type: Option<u64>,
    ) -> Result<(RequestId, Vec<Admitted>), Rejection> {
        let now_us = self.clock(now_us);
        if self.queue.len() >= self.cfg.max_queue_len {
            return Err(Rejection::QueueFull);
        }
        let cost_us = cost_us.clamp(MIN_COST_US, self.cfg.max_charge_us());
        let seq = self.next_seq;
        self.next_seq += 1;
        let deadline_us = match self.cfg.policy {
            AdmissionPolicy::SjfAging { factor } => aging_deadline_us(now_us, factor, cost_us),
            _ => u64::MAX,
        };
        self.queue.insert(seq, Waiting { cost_us, arrival_us: now_us, deadline_us, request_type });
        let first_of_type = match request_type {
            None => true,
            Some(c) => {
                let members = self.by_type.entry(c).or_default();
                members.insert(seq);
                members.len() == 1
            }
        };
        if first_of_type {
            self.by_cost.insert((cost_us, seq));
        }
        if matches!(self.cfg.policy, AdmissionPolicy::SjfAging { .. }) {
            self.by_deadline.insert((deadline_us, seq));
        }
        if probe && self.cfg.policy == AdmissionPolicy::Sjf {
            self.probes.insert(seq);
        }
        Ok((RequestId(seq), self.dispatch(now_us)))
    }

    /// Re-price waiting requests: each of `ids` still waiting is charged `cost_us` from now on
    /// (clamped as on arrival), the charge it is admitted with unless re-priced again; ids not
    /// waiting are ignored. Then the gate dispatches (returned admissions): a lower charge may
    /// let the request the policy picks fit now. Drivers that charge at admission
    /// ([`Gate::recharge_waited`]) call this with a type's new estimate for that type's
    /// waiting requests, so the fit test sees the charge admission would give, not the one
    /// the request arrived with: measured (open model at twice the peak, fifo),
    /// requests queued while Best Sellers' estimate was inflated (1.35-1.82 s against
    /// 0.3-0.5 s current) headed the fifo queue for seconds and held the backend at 1-3
    /// running requests, although each would have been recharged to the current estimate
    /// once admitted.
    ///
    /// Every policy re-prices. Under `sjf-aging` a request re-priced also gets the deadline
    /// of its new charge (`arrival + X × charge`): there the oldest waiting requests are the
    /// costly ones cheaper requests overtook, each is due and holds younger requests back
    /// while it does not fit, and judged by a stale, inflated charge it waited for room it
    /// did not need (the gate in front of a simulated backend, `backend_tests`: sjf-aging:2
    /// fell below fifo's work rate without re-pricing). Under `sjf` a stale, low charge lets
    /// a whole batch in at once, each recharged up after the fit test: in front of a
    /// SQLite-backed API (datasette, open load at twice its peak, lookups whose wall-clock
    /// estimate had grown from 7 ms to about 0.5 s) the gate held 115 requests charged 20
    /// times its capacity; on the simulated backend (`backend_tests`, 4 processors, twice
    /// the peak) re-pricing took sjf from 0.61 to 0.88 of the processors busy and its mean
    /// response time from 14.9 s to 0.21 s. `sjf` used to skip re-pricing because it made a type's requests
    /// leave in arrival order among themselves, where the small differences of their
    /// arrival charges had mixed them (measured with the Best Sellers queue of TPC-W, which
    /// became a fifo behind the wait limit); the type rule now imposes that order anyway,
    /// so re-pricing changes only the fit test and the order among types. Bounded:
    /// `O(k log n)` for `k` ids, then one dispatch.
    pub fn reprice_waiting(
        &mut self,
        now_us: u64,
        ids: impl IntoIterator<Item = RequestId>,
        cost_us: u64,
    ) -> Vec<Admitted> {
        if !self.reprices_waiting() {
            return Vec::new();
        }
        let now_us = self.clock(now_us);
        let cost_us = cost_us.clamp(MIN_COST_US, self.cfg.max_charge_us());
        let mut changed = false;
        for id in ids {
            let Some(w) = self.queue.get_mut(&id.0) else { continue };
            if w.cost_us == cost_us {
                continue;
            }
            let head = self.by_cost.remove(&(w.cost_us, id.0));
            w.cost_us = cost_us;
            if head {
                self.by_cost.insert((cost_us, id.0));
            }
            if let AdmissionPolicy::SjfAging { factor } = self.cfg.policy {
                self.by_deadline.remove(&(w.deadline_us, id.0));
                w.deadline_us = aging_deadline_us(w.arrival_us, factor, cost_us);
                self.by_deadline.insert((w.deadline_us, id.0));
            }
            changed = true;
        }
        if changed {
            self.dispatch(now_us)
        } else {
            Vec::new()
        }
    }

    /// Change the policy (configuration reload). Waiting requests keep their arrival
    /// order, charges and types; their sjf-aging deadlines are computed from their
    /// arrival and charge under the new factor, probes stay probes only under `sjf`. Then
    /// the gate dispatches (returned admissions). Bounded: `O(n log n)` for `n` waiting.
    pub fn set_policy(&mut self, now_us: u64, policy: AdmissionPolicy) -> Vec<Admitted> {
        let now_us = self.clock(now_us);
        self.cfg.policy = policy;
        self.by_deadline.clear();
        if policy != AdmissionPolicy::Sjf {
            self.probes.clear();
        }
        for (&seq, w) in self.queue.iter_mut() {
            w.deadline_us = match policy {
                AdmissionPolicy::SjfAging { factor } => aging_deadline_us(w.arrival_us, factor, w.cost_us),
                _ => u64::MAX,
            };
            if matches!(policy, AdmissionPolicy::SjfAging { .. }) {
                self.by_deadline.insert((w.deadline_us, seq));
            }
        }
        self.dispatch(now_us)
    }

    /// Whether [`Gate::reprice_waiting`] acts under this gate's policy (every policy does;
    /// kept so that drivers ask rather than assume), so a driver can skip gathering a
    /// type's waiting requests when it would not.
    pub fn reprices_waiting(&self) -> bool {
        true
    }

    /// A waiting request left (client disconnected). Returns `None` if it was not waiting
    /// (already admitted, expired, or unknown): then nothing changed.
    pub fn cancel(&mut self, now_us: u64, id: RequestId) -> Option<Vec<Admitted>> {
        let now_us = self.clock(now_us);
        self.remove_waiting(id.0)?;
        // Removing an old request can unblock a cheaper one under sjf-aging.
        Some(self.dispatch(now_us))
    }

    /// Remove requests that have waited `max_queue_wait_us` or longer. Returns the expired
    /// ids (to be answered 503) and any admissions their removal allowed.
    pub fn expire(&mut self, now_us: u64) -> (Vec<RequestId>, Vec<Admitted>) {
        let now_us = self.clock(now_us);
        let Some(max_wait) = self.cfg.max_queue_wait_us else {
            return (Vec::new(), Vec::new());
        };
        let mut expired = Vec::new();
        // Arrival times are monotone in seq, so the oldest are first.
        while let Some((&seq, w)) = self.queue.first_key_value() {
            if now_us.saturating_sub(w.arrival_us) < max_wait {
                break;
            }
            self.remove_waiting(seq);
            expired.push(RequestId(seq));
        }
        let admitted = if expired.is_empty() { Vec::new() } else { self.dispatch(now_us) };
        (expired, admitted)
    }

    /// Dispatch on a timer tick (the aging pick can change with time alone).
    pub fn poll(&mut self, now_us: u64) -> Vec<Admitted> {
        let now_us = self.clock(now_us);
        self.dispatch(now_us)
    }

    /// The earliest time at which [`Gate::expire`] or [`Gate::poll`] may have something to
    /// do: the oldest request's wait limit, or the next aging deadline still in the future.
    pub fn next_wakeup_us(&self) -> Option<u64> {
        let expiry = self
            .cfg
            .max_queue_wait_us
            .and_then(|max| self.queue.first_key_value().map(|(_, w)| w.arrival_us.saturating_add(max)));
        let deadline = self.by_deadline.range((self.last_now_us.saturating_add(1), 0)..).next().map(|&(d, _)| d);
        // The oldest request's wait bound, while still ahead (once past, dispatch after each
        // release admits it; the next oldest's bound is looked at when it becomes oldest).
        let overdue = match (self.cfg.policy, self.cfg.max_wait_us) {
            (AdmissionPolicy::Sjf, Some(max)) => self
                .queue
                .first_key_value()
                .map(|(_, w)| w.arrival_us.saturating_add(max))
                .filter(|&t| t > self.last_now_us),
            _ => None,
        };
        [expiry, deadline, overdue].into_iter().flatten().min()
    }

    /// `sjf` with a wait bound: the oldest waiting request once it has waited
    /// `max_wait_us` (the oldest request is always the oldest of its type).
    pub(super) fn overdue_head(&self, now_us: u64) -> Option<u64> {
        let max = self.cfg.max_wait_us.filter(|_| self.cfg.policy == AdmissionPolicy::Sjf)?;
        let (&seq, w) = self.queue.first_key_value()?;
        (now_us.saturating_sub(w.arrival_us) >= max).then_some(seq)
    }

    pub(super) fn remove_waiting(&mut self, seq: u64) -> Option<Waiting> {
        let w = self.queue.remove(&seq)?;
        let was_head = self.by_cost.remove(&(w.cost_us, seq));
        self.by_deadline.remove(&(w.deadline_us, seq));
        self.probes.remove(&seq);
        if let Some(c) = w.request_type {
            if let Some(members) = self.by_type.get_mut(&c) {
                members.remove(&seq);
                match members.first().copied() {
                    None => {
                        self.by_type.remove(&c);
                    }
                    // The type's next oldest becomes its candidate.
                    Some(next) if was_head => {
                        self.by_cost.insert((self.queue[&next].cost_us, next));
                    }
                    Some(_) => {}
                }
            }
        }
        Some(w)
    }

    /// The oldest waiting request of `seq`'s type (`seq` itself when it has none).
    pub(super) fn class_head(&self, seq: u64) -> u64 {
        self.queue
            .get(&seq)
            .and_then(|w| w.request_type)
            .and_then(|c| self.by_type.get(&c))
            .and_then(|m| m.first().copied())
            .unwrap_or(seq)
    }

    /// Whether `seq` is the oldest waiting request of its type (a candidate of sjf and
    /// sjf-aging).
    pub(super) fn is_class_head(&self, seq: u64) -> bool {
        self.class_head(seq) == seq
    }

    /// sjf's pick before the fit test: the oldest of the oldest probe's type, or else the
    /// cheapest type head.
    pub(super) fn sjf_head(&self) -> Option<u64> {
        match self.probes.first() {
            Some(&p) => Some(self.class_head(p)),
            None => self.by_cost.first().map(|&(_, s)| s),
        }
    }
}

/// sjf-aging's bound for a request: `arrival + X × charge` (saturating; X is at most
/// [`super::super::MAX_AGING_FACTOR`]).
fn aging_deadline_us(arrival_us: u64, factor: f64, cost_us: u64) -> u64 {
    arrival_us.saturating_add((factor * cost_us as f64).min(u64::MAX as f64 / 2.0) as u64)
}
