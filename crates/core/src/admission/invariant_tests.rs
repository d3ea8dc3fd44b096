//! Proptest invariants over random event sequences: accounting, release exactly once, fifo
//! order, the aging bound.

use super::*;
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Op {
    Arrive(u64),
    /// [`Gate::arrive_probe`].
    ArriveProbe(u64),
    /// Release the running request at this (wrapped) position.
    Release(usize),
    Cancel(usize),
    Advance(u64),
    SetCapacity(u64),
    /// Recharge the running request at this (wrapped) position with this cost.
    Recharge(usize, u64),
    /// Re-price the waiting request at this (wrapped) position with this cost.
    Reprice(usize, u64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => prop_oneof![1u64..20, 1u64..2_000].prop_map(Op::Arrive),
        1 => prop_oneof![1u64..20, 1u64..4_000].prop_map(Op::ArriveProbe),
        3 => any::<usize>().prop_map(Op::Release),
        1 => any::<usize>().prop_map(Op::Cancel),
        3 => (0u64..500).prop_map(Op::Advance),
        1 => (1u64..3_000).prop_map(Op::SetCapacity),
        2 => (any::<usize>(), prop_oneof![1u64..20, 1u64..2_000]).prop_map(|(i, c)| Op::Recharge(i, c)),
        2 => (any::<usize>(), prop_oneof![1u64..20, 1u64..2_000]).prop_map(|(i, c)| Op::Reprice(i, c)),
    ]
}

fn policy() -> impl Strategy<Value = AdmissionPolicy> {
    prop_oneof![
        Just(AdmissionPolicy::Fifo),
        Just(AdmissionPolicy::Sjf),
        (0u32..8).prop_map(|x| AdmissionPolicy::SjfAging { factor: f64::from(x) / 2.0 }),
    ]
}

/// What the checker knows about each waiting request.
#[derive(Debug, Clone, Copy)]
struct Shadow {
    cost: u64,
    arrival: u64,
    deadline: u64,
    /// A probe under sjf (elsewhere probes are ordinary arrivals).
    probe: bool,
}

struct Checker {
    g: Gate,
    now: u64,
    running: Vec<Ticket>,
    /// Admission time of each running request.
    admitted_at: HashMap<u64, u64>,
    waiting: BTreeMap<u64, Shadow>,
    charged: u64,
    released: u64,
    admitted_order: Vec<u64>,
    capacity_changed: bool,
    /// Time with at least one request admitted, and the shares handed out at release.
    busy_us: u64,
    shares_released_us: u64,
    releases: u64,
    /// sjf: the oldest waiting probe and the releases it may still have to wait for (the
    /// requests in flight when it became first; nothing else is admitted while it waits).
    first_probe: Option<(u64, usize)>,
}

impl Checker {
    /// Release one running request, checking its share ([`Gate::share_us`]) first.
    fn release(&mut self, t: Ticket) -> Result<(), TestCaseError> {
        let share = self.g.share_us(self.now, &t).unwrap();
        let since = self.now - self.admitted_at[&t.id().0];
        prop_assert!(share <= since, "share {} > time since admission {}", share, since);
        self.shares_released_us += share;
        self.releases += 1;
        if let Some((id, left)) = self.first_probe.as_mut() {
            if self.waiting.contains_key(id) {
                prop_assert!(*left > 0, "probe {} still waits after its release budget", id);
                *left -= 1;
            }
        }
        self.released += t.charge_us();
        let adm = self.g.release(self.now, t).unwrap();
        self.admit(adm)
    }

    fn admit(&mut self, adm: Vec<Admitted>) -> Result<(), TestCaseError> {
        let load_before = self.g.load_us() - adm.iter().map(|a| a.ticket.charge_us()).sum::<u64>();
        let mut load = load_before;
        for (running_count, a) in (self.running.len()..).zip(adm) {
            let id = a.ticket.id().0;
            if self.g.config().policy == AdmissionPolicy::Sjf {
                // sjf order: the oldest waiting probe, else the smallest (cost, arrival).
                let want = match self.waiting.iter().find(|(_, w)| w.probe) {
                    Some((&p, _)) => p,
                    None => self.waiting.iter().map(|(&i, w)| (w.cost, i)).min().map(|(_, i)| i).unwrap_or(id),
                };
                prop_assert_eq!(id, want, "sjf admitted {} instead of {}", id, want);
            }
            let s = self.waiting.remove(&id).ok_or_else(|| TestCaseError::fail("admitted twice"))?;
            prop_assert_eq!(a.ticket.charge_us(), s.cost);
            prop_assert_eq!(a.waited_us, self.now - s.arrival);
            // Capacity: admitted into an empty system, or fits.
            prop_assert!(running_count == 0 || load + s.cost <= self.g.capacity_us());
            if let AdmissionPolicy::SjfAging { .. } = self.g.config().policy {
                // Overtaking an older request never pushes it past its bound, or delays its
                // earliest start: by the expected finish times of what is running, when it
                // fits, or, if it would then still run past the bound its older requests set,
                // when the request that set that bound starts (module docs).
                let (mut bound, mut bound_start) = (u64::MAX, self.now);
                for (&oid, o) in self.waiting.range(..id) {
                    let fits_at = self.earliest_start(o.cost);
                    let start =
                        if fits_at.saturating_add(o.cost) <= bound { fits_at } else { fits_at.max(bound_start) };
                    if o.deadline.max(start) < bound {
                        (bound, bound_start) = (o.deadline.max(start), start);
                    }
                    // Or it fits beside `o` when `o` starts.
                    let spare = self.spare_at(start, o.cost);
                    prop_assert!(
                        self.now + s.cost <= o.deadline.max(start) || s.cost <= spare,
                        "request {} (cost {}) overtook {} (cost {}, deadline {}, start {}, spare {}) at {}",
                        id,
                        s.cost,
                        oid,
                        o.cost,
                        o.deadline,
                        start,
                        spare,
                        self.now
                    );
                }
            }
            load += s.cost;
            self.charged += s.cost;
            self.admitted_order.push(id);
            self.admitted_at.insert(id, self.now);
            self.running.push(a.ticket);
        }
        Ok(())
    }

    /// Brute force: the room a request of `cost` leaves free if it starts at `start`,
    /// beside the running requests expected to finish after then (0 if it would run alone or
    /// the in-flight cap leaves no place beside it).
    fn spare_at(&self, start: u64, cost: u64) -> u64 {
        let finish = |t: &Ticket| (self.admitted_at[&t.id().0] + t.charge_us()).max(self.now);
        let still: Vec<&Ticket> = self.running.iter().filter(|r| finish(r) > start).collect();
        if still.len() + 2 > self.g.config().max_in_flight.unwrap_or(usize::MAX) {
            return 0;
        }
        let load: u64 = still.iter().map(|r| r.charge_us()).sum();
        self.g.capacity_us().saturating_sub(load).saturating_sub(cost)
    }

    /// Brute force: the first of `now` and the running requests' expected finishes at
    /// which a request of `cost` fits among the requests still running then.
    fn earliest_start(&self, cost: u64) -> u64 {
        let finish = |t: &Ticket| (self.admitted_at[&t.id().0] + t.charge_us()).max(self.now);
        let mut times: Vec<u64> = self.running.iter().map(finish).collect();
        times.push(self.now);
        times.sort_unstable();
        let max_in_flight = self.g.config().max_in_flight.unwrap_or(usize::MAX);
        for t in times {
            let still: Vec<&Ticket> = self.running.iter().filter(|r| finish(r) > t).collect();
            let load: u64 = still.iter().map(|r| r.charge_us()).sum();
            if still.is_empty() || (still.len() < max_in_flight && load + cost <= self.g.capacity_us()) {
                return t;
            }
        }
        unreachable!("nothing runs after the last finish")
    }

    /// After each event: the oldest waiting probe gets a budget of the requests in flight
    /// when it became first.
    fn track_probe(&mut self) {
        let first = self.waiting.iter().find(|(_, w)| w.probe).map(|(&id, _)| id);
        self.first_probe = match (first, self.first_probe) {
            (Some(id), Some((was, left))) if id == was => Some((id, left)),
            (Some(id), _) => Some((id, self.running.len())),
            (None, _) => None,
        };
    }

    fn check(&self) -> Result<(), TestCaseError> {
        let sum: u64 = self.running.iter().map(|t| t.charge_us()).sum();
        prop_assert_eq!(self.g.load_us(), sum);
        prop_assert_eq!(self.g.in_flight(), self.running.len());
        prop_assert_eq!(self.g.queue_len(), self.waiting.len());
        prop_assert_eq!(self.charged - self.released, sum);
        if !self.capacity_changed {
            prop_assert!(self.running.len() <= 1 || self.g.load_us() <= self.g.capacity_us());
        }
        // A waiting probe is admitted within the releases it had to wait for.
        if let Some((id, left)) = self.first_probe {
            prop_assert!(!(left == 0 && self.waiting.contains_key(&id)), "probe {} waits with no release left", id);
        }
        // Work conservation: the gate never idles with waiting work while empty.
        prop_assert!(!self.running.is_empty() || self.waiting.is_empty());
        // Bounded charges: fifo and sjf never wait for more than the bound to drain.
        let cfg = self.g.config();
        if cfg.max_charge_share < 1.0
            && !self.capacity_changed
            && cfg.max_in_flight.is_none()
            && !self.waiting.is_empty()
            && matches!(cfg.policy, AdmissionPolicy::Fifo | AdmissionPolicy::Sjf)
        {
            let floor = cfg.capacity_us.saturating_sub(cfg.max_charge_us());
            prop_assert!(self.g.load_us() > floor, "load {} <= {} with requests waiting", self.g.load_us(), floor);
        }
        Ok(())
    }
}

fn exercise(policy: AdmissionPolicy, capacity: u64, ops: Vec<Op>) -> Result<Checker, TestCaseError> {
    exercise_with(GateConfig::new(capacity, policy), ops)
}

fn exercise_with(cfg: GateConfig, ops: Vec<Op>) -> Result<Checker, TestCaseError> {
    let policy = cfg.policy;
    let max_in_flight = cfg.max_in_flight.unwrap_or(usize::MAX);
    let mut c = Checker::new(cfg);
    for op in ops {
        c.apply(policy, op)?;
        c.track_probe();
        c.check()?;
        prop_assert!(c.running.len() <= max_in_flight);
    }
    c.drain()?;
    Ok(c)
}

impl Checker {
    fn new(cfg: GateConfig) -> Self {
        Checker {
            g: Gate::new(cfg).unwrap(),
            now: 0,
            running: Vec::new(),
            admitted_at: HashMap::new(),
            waiting: BTreeMap::new(),
            charged: 0,
            released: 0,
            admitted_order: Vec::new(),
            capacity_changed: false,
            busy_us: 0,
            shares_released_us: 0,
            releases: 0,
            first_probe: None,
        }
    }

    /// One operation on the gate and on the shadow state it is checked against.
    fn apply(&mut self, policy: AdmissionPolicy, op: Op) -> Result<(), TestCaseError> {
        match op {
            Op::Arrive(estimate) | Op::ArriveProbe(estimate) => {
                let probe = matches!(op, Op::ArriveProbe(_));
                // The gate is given the estimate; it charges at most the bound.
                let cost = estimate.min(self.g.config().max_charge_us());
                let deadline = match policy {
                    AdmissionPolicy::SjfAging { factor } => self.now + (factor * cost as f64) as u64,
                    _ => u64::MAX,
                };
                let arrive = if probe { Gate::arrive_probe } else { Gate::arrive };
                let (id, adm) = arrive(&mut self.g, self.now, estimate).unwrap();
                let probe = probe && policy == AdmissionPolicy::Sjf;
                self.waiting.insert(id.0, Shadow { cost, arrival: self.now, deadline, probe });
                self.admit(adm)?;
            }
            Op::Release(i) if !self.running.is_empty() => {
                let t = self.running.swap_remove(i % self.running.len());
                self.release(t)?;
            }
            Op::Cancel(i) if !self.waiting.is_empty() => {
                let id = *self.waiting.keys().nth(i % self.waiting.len()).unwrap();
                self.waiting.remove(&id);
                let adm = self.g.cancel(self.now, RequestId(id)).expect("was waiting");
                self.admit(adm)?;
                prop_assert!(self.g.cancel(self.now, RequestId(id)).is_none(), "cancel twice");
            }
            Op::Advance(dt) => {
                if !self.running.is_empty() {
                    self.busy_us += dt;
                }
                self.now += dt;
                let adm = self.g.poll(self.now);
                self.admit(adm)?;
            }
            Op::SetCapacity(cap) => {
                self.capacity_changed = true;
                let adm = self.g.set_capacity(self.now, cap).unwrap();
                self.admit(adm)?;
            }
            Op::Recharge(i, estimate) if !self.running.is_empty() => {
                let i = i % self.running.len();
                let old = self.running[i].charge_us();
                let cost = estimate.min(self.g.config().max_charge_us());
                let mut t = self.running.swap_remove(i);
                let adm = self.g.recharge(self.now, &mut t, estimate).unwrap();
                prop_assert_eq!(t.charge_us(), cost);
                // A raised charge can leave the load above the capacity, as a lowered
                // capacity does; a lowered one admits only what fits.
                self.capacity_changed |= cost > old;
                self.charged += cost;
                self.released += old;
                self.running.push(t);
                self.admit(adm)?;
            }
            Op::Reprice(i, estimate) if !self.waiting.is_empty() => {
                let id = *self.waiting.keys().nth(i % self.waiting.len()).unwrap();
                // Clamped as on arrival; fifo and sjf-aging only (under sjf the charge is the
                // order). sjf-aging moves the deadline with the charge.
                let adm = self.g.reprice_waiting(self.now, [RequestId(id)], estimate);
                let cost = estimate.clamp(MIN_COST_US, self.g.config().max_charge_us());
                let w = self.waiting.get_mut(&id).unwrap();
                w.cost = cost;
                if let AdmissionPolicy::SjfAging { factor } = policy {
                    w.deadline = w.arrival + (factor * cost as f64) as u64;
                }
                self.admit(adm)?;
            }
            _ => {}
        }
        Ok(())
    }

    /// Drain: releasing everything admits and then finishes everything waiting; then the
    /// totals must balance.
    fn drain(&mut self) -> Result<(), TestCaseError> {
        // Drain: releasing everything admits and then finishes everything waiting.
        while let Some(t) = self.running.pop() {
            self.release(t)?;
            self.track_probe();
            self.check()?;
        }
        prop_assert!(self.waiting.is_empty());
        // Shares partition the busy time: every moment with n requests admitted is split n
        // ways (each share is rounded to the µs once).
        prop_assert!(
            self.shares_released_us.abs_diff(self.busy_us) <= self.releases,
            "shares {} vs busy {} over {} releases",
            self.shares_released_us,
            self.busy_us,
            self.releases
        );
        prop_assert_eq!(self.g.load_us(), 0);
        prop_assert_eq!(self.charged, self.released);
        Ok(())
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn accounting_and_aging_invariants(
        policy in policy(),
        capacity in 1u64..3_000,
        ops in prop::collection::vec(op(), 0..200),
    ) {
        exercise(policy, capacity, ops)?;
    }

    #[test]
    fn in_flight_cap_holds_with_every_policy(
        policy in policy(),
        capacity in 1u64..3_000,
        cap in 1usize..6,
        ops in prop::collection::vec(op(), 0..200),
    ) {
        let cfg = GateConfig { max_in_flight: Some(cap), ..GateConfig::new(capacity, policy) };
        exercise_with(cfg, ops)?;
    }

    #[test]
    fn bounded_charges_keep_invariants_and_never_wait_for_a_drain(
        policy in policy(),
        capacity in 4u64..3_000,
        share in prop_oneof![Just(0.25), Just(0.5), Just(0.9)],
        ops in prop::collection::vec(op(), 0..200),
    ) {
        let cfg = GateConfig { max_charge_share: share, ..GateConfig::new(capacity, policy) };
        exercise_with(cfg, ops)?;
    }

    #[test]
    fn fifo_admits_in_arrival_order(
        capacity in 1u64..3_000,
        ops in prop::collection::vec(op(), 0..200),
    ) {
        let c = exercise(AdmissionPolicy::Fifo, capacity, ops)?;
        prop_assert!(c.admitted_order.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn aging_huge_is_sjf(
        capacity in 1u64..3_000,
        ops in prop::collection::vec(op(), 0..200),
    ) {
        // Probes reorder only sjf and only sjf-aging re-prices waiting requests; compare
        // the two on ordinary arrivals without re-pricing.
        let ops: Vec<Op> = ops
            .into_iter()
            .filter(|o| !matches!(o, Op::Reprice(..)))
            .map(|o| if let Op::ArriveProbe(c) = o { Op::Arrive(c) } else { o })
            .collect();
        let sjf = exercise(AdmissionPolicy::Sjf, capacity, ops.clone())?;
        let big = exercise(AdmissionPolicy::SjfAging { factor: MAX_AGING_FACTOR }, capacity, ops)?;
        prop_assert_eq!(&sjf.admitted_order, &big.admitted_order);
    }

    #[test]
    fn estimate_stays_within_sample_range(samples in prop::collection::vec(1u64..1_000_000, 1..100)) {
        let mut e = CostEstimator::new(1, EstimatorConfig::default()).unwrap();
        for &s in &samples {
            e.observe(0, s).unwrap();
        }
        let lo = *samples.iter().min().unwrap();
        let hi = *samples.iter().max().unwrap();
        let est = e.estimate_us(0).unwrap();
        prop_assert!(lo <= est && est <= hi, "{} not in [{}, {}]", est, lo, hi);
    }
}
