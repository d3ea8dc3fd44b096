//! Tables of arrivals → expected admissions, and proptest invariants over random event
//! sequences (accounting, release-exactly-once, fifo order, the aging bound).

use super::*;
use proptest::prelude::*;

fn gate(capacity_us: u64, policy: &str) -> Gate {
    Gate::new(GateConfig::new(capacity_us, policy.parse().unwrap())).unwrap()
}

fn ids(adm: &[Admitted]) -> Vec<u64> {
    adm.iter().map(|a| a.ticket.id().0).collect()
}

/// Script step: (time, event). Costs are charges in µs.
#[derive(Debug, Clone, Copy)]
enum Ev {
    /// Arrival with a cost; the gate assigns ids 0, 1, 2, ... in order.
    Arrive(u64),
    /// Release the request with this id (must be running).
    Release(u64),
    Cancel(u64),
    Poll,
}

/// Runs a script, returning the ids in admission order.
fn run(g: &mut Gate, script: &[(u64, Ev)]) -> Vec<u64> {
    let mut tickets: HashMap<u64, Ticket> = HashMap::new();
    let mut order = Vec::new();
    for &(t, ev) in script {
        let adm = match ev {
            Ev::Arrive(c) => g.arrive(t, c).expect("queue has room").1,
            Ev::Release(id) => g.release(t, tickets.remove(&id).expect("running")).unwrap(),
            Ev::Cancel(id) => g.cancel(t, RequestId(id)).unwrap_or_default(),
            Ev::Poll => g.poll(t),
        };
        order.extend(ids(&adm));
        for a in adm {
            tickets.insert(a.ticket.id().0, a.ticket);
        }
    }
    order
}

/// Recharging at admission: a stale, high charge brought down lets the queue through; a
/// raised one holds it until the load is back under the capacity; release returns the
/// ticket's current charge.
#[test]
fn recharge_moves_the_load_and_admits_what_fits() {
    let mut g = gate(100, "fifo");
    let (_, mut adm) = g.arrive(0, 90).unwrap();
    let mut a = adm.remove(0).ticket;
    let (b, adm) = g.arrive(1, 50).unwrap();
    assert!(adm.is_empty() && g.is_queued(b));
    // A's type is now estimated at 40: B fits.
    let adm = g.recharge(2, &mut a, 40).unwrap();
    assert_eq!(ids(&adm), vec![b.0]);
    assert_eq!((a.charge_us(), g.load_us()), (40, 90));
    // Raised to 80: load 130 > 100, nothing more is admitted, nothing revoked.
    let adm = g.recharge(3, &mut a, 80).unwrap();
    assert!(adm.is_empty());
    let (c, adm) = g.arrive(4, 1).unwrap();
    assert!(adm.is_empty() && g.is_queued(c));
    assert_eq!((g.load_us(), g.in_flight()), (130, 2));
    // Same charge: nothing to do. Release returns the current charge.
    assert!(g.recharge(5, &mut a, 80).unwrap().is_empty());
    let adm = g.release(6, a).unwrap();
    assert_eq!(ids(&adm), vec![c.0]);
    assert_eq!(g.load_us(), 51);
}

#[test]
fn policy_parse_table() {
    let ok: &[(&str, Policy)] = &[
        ("fifo", Policy::Fifo),
        ("sjf", Policy::Sjf),
        ("sjf-aging:2", Policy::SjfAging { factor: 2.0 }),
        ("sjf-aging:0.5", Policy::SjfAging { factor: 0.5 }),
        (" sjf-aging:0 ", Policy::SjfAging { factor: 0.0 }),
    ];
    for (s, p) in ok {
        assert_eq!(s.parse::<Policy>().unwrap(), *p, "{s}");
        assert_eq!(p.to_string().parse::<Policy>().unwrap(), *p);
    }
    for bad in ["", "FIFO", "sjf-aging", "sjf-aging:", "sjf-aging:-1", "sjf-aging:x", "lifo"] {
        let e = bad.parse::<Policy>().unwrap_err();
        assert!(e.to_string().contains(&format!("{bad:?}")), "{e}");
    }
}

#[test]
fn admission_order_table() {
    use Ev::*;
    // (name, capacity, policy, script, expected admission order)
    #[allow(clippy::type_complexity)]
    let table: &[(&str, u64, &str, &[(u64, Ev)], &[u64])] = &[
        (
            "fifo keeps head-of-line, then fills",
            10,
            "fifo",
            &[(0, Arrive(6)), (0, Arrive(6)), (0, Arrive(2)), (5, Release(0))],
            &[0, 1, 2],
        ),
        (
            "fifo does not let a small request pass a big head",
            10,
            "fifo",
            &[(0, Arrive(6)), (0, Arrive(6)), (0, Arrive(2)), (0, Arrive(1))],
            &[0],
        ),
        (
            "sjf admits cheapest first until the pick no longer fits",
            10,
            "sjf",
            &[(0, Arrive(10)), (0, Arrive(8)), (0, Arrive(5)), (0, Arrive(3)), (0, Arrive(9)), (1, Release(0))],
            &[0, 3, 2],
        ),
        (
            "sjf ties broken by arrival",
            10,
            "sjf",
            &[(0, Arrive(10)), (0, Arrive(4)), (0, Arrive(4)), (0, Arrive(4)), (1, Release(0))],
            &[0, 1, 2],
        ),
        (
            "empty system admits a request larger than capacity, alone",
            10,
            "fifo",
            &[(0, Arrive(50)), (0, Arrive(1)), (3, Release(0))],
            &[0, 1],
        ),
        (
            "aging X=1: the cheaper request may not overtake (bound of the older one)",
            10,
            "sjf-aging:1",
            &[(0, Arrive(10)), (0, Arrive(6)), (2, Arrive(5)), (3, Release(0))],
            &[0, 1],
        ),
        (
            "aging X=5: enough slack, the cheaper request goes first",
            10,
            "sjf-aging:5",
            &[(0, Arrive(10)), (0, Arrive(6)), (2, Arrive(5)), (3, Release(0))],
            &[0, 2],
        ),
        (
            "sjf on the same arrivals",
            10,
            "sjf",
            &[(0, Arrive(10)), (0, Arrive(6)), (2, Arrive(5)), (3, Release(0))],
            &[0, 2],
        ),
        (
            "aging: due requests go earliest-deadline first, not cheapest",
            10,
            "sjf-aging:1",
            &[(0, Arrive(4)), (0, Arrive(6)), (0, Arrive(3)), (2, Arrive(2)), (10, Release(0))],
            &[0, 1, 2],
        ),
        (
            "sjf on the same arrivals takes the cheapest",
            10,
            "sjf",
            &[(0, Arrive(4)), (0, Arrive(6)), (0, Arrive(3)), (2, Arrive(2)), (10, Release(0))],
            &[0, 1, 3],
        ),
        (
            "aging X=0 is fifo when nothing can go ahead without delaying the head",
            10,
            "sjf-aging:0",
            &[(0, Arrive(10)), (0, Arrive(6)), (0, Arrive(2)), (0, Arrive(1)), (1, Release(0))],
            &[0, 1, 2, 3],
        ),
        (
            "aging X=0 backfills a request expected to finish before the blocked head can start",
            10,
            "sjf-aging:0",
            &[(0, Arrive(8)), (0, Arrive(5)), (0, Arrive(2)), (8, Release(0))],
            &[0, 2, 1],
        ),
        (
            "fifo on the same arrivals leaves the capacity idle",
            10,
            "fifo",
            &[(0, Arrive(8)), (0, Arrive(5)), (0, Arrive(2)), (8, Release(0))],
            &[0, 1, 2],
        ),
        (
            "aging X=0: no backfill that would still run when the head could start",
            12,
            "sjf-aging:0",
            &[(0, Arrive(8)), (0, Arrive(5)), (6, Arrive(3)), (8, Release(0))],
            &[0, 1, 2],
        ),
        (
            "aging X=1: same, the head's bound (5) is earlier than its start (8)",
            12,
            "sjf-aging:1",
            &[(0, Arrive(8)), (0, Arrive(5)), (6, Arrive(3)), (8, Release(0))],
            &[0, 1, 2],
        ),
        (
            "aging X=2: the head's bound (10) leaves room for it",
            12,
            "sjf-aging:2",
            &[(0, Arrive(8)), (0, Arrive(5)), (6, Arrive(3)), (8, Release(0))],
            &[0, 2, 1],
        ),
        (
            "aging: an overdue big request keeps its start; cheap ones fill around it",
            10,
            "sjf-aging:1",
            &[
                (0, Arrive(4)),
                (0, Arrive(4)),
                (1, Arrive(9)),
                (30, Arrive(1)),
                (30, Arrive(1)),
                (31, Release(0)),
                (32, Release(1)),
            ],
            // Expected finishes 4 and 4 (overdue at 30, so "any moment"): request 2 (9) can
            // start only when both finished; nothing may run past that, so 3 and 4 wait.
            &[0, 1, 2, 3],
        ),
        (
            "cancel of a blocking old request lets the next one in",
            10,
            "fifo",
            &[(0, Arrive(8)), (0, Arrive(5)), (0, Arrive(2)), (1, Cancel(1))],
            &[0, 2],
        ),
        (
            "poll admits nothing when nothing changed",
            10,
            "sjf-aging:1",
            &[(0, Arrive(10)), (0, Arrive(6)), (50, Poll)],
            &[0],
        ),
    ];
    for (name, cap, policy, script, expected) in table {
        let mut g = gate(*cap, policy);
        assert_eq!(run(&mut g, script), *expected, "{name}");
    }
}

#[test]
fn release_returns_exact_charge_and_rejects_unknown_ticket() {
    let mut g = gate(100, "fifo");
    let (_, a) = g.arrive(0, 30).unwrap();
    let (_, b) = g.arrive(0, 50).unwrap();
    assert_eq!(g.load_us(), 80);
    let ta = a.into_iter().next().unwrap().ticket;
    let tb = b.into_iter().next().unwrap().ticket;
    assert_eq!(ta.charge_us(), 30);
    g.release(1, ta).unwrap();
    assert_eq!(g.load_us(), 50);
    // A ticket from another gate is not outstanding here.
    let mut other = gate(100, "fifo");
    let (_, o) = other.arrive(0, 7).unwrap();
    let foreign = o.into_iter().next().unwrap().ticket;
    let id = foreign.id().0;
    // Same id (0) was released already in `g`: unknown now.
    assert_eq!(g.release(2, foreign), Err(AdmissionError::UnknownTicket { id }));
    g.release(2, tb).unwrap();
    assert_eq!((g.load_us(), g.in_flight()), (0, 0));
}

#[test]
fn queue_full_rejects_newcomer_without_side_effects() {
    let mut cfg = GateConfig::new(10, Policy::Fifo);
    cfg.max_queue_len = 2;
    let mut g = Gate::new(cfg).unwrap();
    let (_, adm) = g.arrive(0, 10).unwrap();
    assert_eq!(adm.len(), 1);
    g.arrive(0, 1).unwrap();
    g.arrive(0, 1).unwrap();
    assert_eq!(g.arrive(0, 1), Err(Rejection::QueueFull));
    assert_eq!(g.queue_len(), 2);
    assert_eq!(g.load_us(), 10);
}

#[test]
fn expire_removes_oldest_waiters_and_reports_wakeup() {
    let mut cfg = GateConfig::new(10, Policy::Sjf);
    cfg.max_queue_wait_us = Some(100);
    let mut g = Gate::new(cfg).unwrap();
    let (_, running) = g.arrive(0, 10).unwrap();
    let (a, _) = g.arrive(10, 3).unwrap();
    let (b, _) = g.arrive(50, 2).unwrap();
    assert_eq!(g.next_wakeup_us(), Some(110));
    assert_eq!(g.expire(109).0, vec![]);
    assert_eq!(g.expire(110).0, vec![a]);
    assert_eq!(g.next_wakeup_us(), Some(150));
    assert_eq!(g.expire(1_000).0, vec![b]);
    assert_eq!(g.queue_len(), 0);
    assert_eq!(g.next_wakeup_us(), None);
    let t = running.into_iter().next().unwrap().ticket;
    g.release(1_000, t).unwrap();
}

#[test]
fn capacity_change_admits_or_holds() {
    let mut g = gate(10, "fifo");
    let (_, a) = g.arrive(0, 8).unwrap();
    g.arrive(0, 8).unwrap();
    let more = g.set_capacity(1, 16).unwrap();
    assert_eq!(ids(&more), vec![1]);
    assert_eq!(g.load_us(), 16);
    assert!(g.set_capacity(1, 0).is_err());
    assert!(g.set_capacity(2, 4).unwrap().is_empty());
    g.arrive(3, 1).unwrap();
    let t = a.into_iter().next().unwrap().ticket;
    assert!(g.release(4, t).unwrap().is_empty(), "load 8 > capacity 4: nothing admitted");
    for t in more {
        assert_eq!(ids(&g.release(5, t.ticket).unwrap()), vec![2]);
    }
}

#[test]
fn in_flight_cap_holds_cheap_requests() {
    let cfg = GateConfig { max_in_flight: Some(2), ..GateConfig::new(1_000, Policy::Sjf) };
    let mut g = Gate::new(cfg).unwrap();
    let order = run(&mut g, &[(0, Ev::Arrive(1)), (0, Ev::Arrive(1)), (0, Ev::Arrive(1)), (1, Ev::Release(0))]);
    assert_eq!(order, vec![0, 1, 2]);
    assert_eq!(g.in_flight(), 2);
    assert!(Gate::new(GateConfig { max_in_flight: Some(0), ..GateConfig::new(1, Policy::Fifo) }).is_err());
}

#[test]
fn time_going_backwards_is_clamped() {
    let mut g = gate(10, "fifo");
    let (_, r) = g.arrive(100, 10).unwrap();
    g.arrive(50, 1).unwrap();
    let adm = g.release(60, r.into_iter().next().unwrap().ticket).unwrap();
    assert_eq!(adm[0].waited_us, 0, "arrival and release both clamp to 100");
}

#[test]
fn share_splits_time_among_the_admitted() {
    // A alone 0..100, A and B 100..300, B alone 300..500.
    let mut g = gate(1_000_000, "fifo");
    let (_, a) = g.arrive(0, 10).unwrap();
    let (_, b) = g.arrive(100, 10).unwrap();
    let (ta, tb) = (a.into_iter().next().unwrap().ticket, b.into_iter().next().unwrap().ticket);
    assert_eq!(g.share_us(100, &ta).unwrap(), 100);
    assert_eq!(g.share_us(300, &ta).unwrap(), 200, "100 alone + 200 shared two ways");
    assert_eq!(g.share_us(300, &tb).unwrap(), 100);
    g.release(300, ta).unwrap();
    assert_eq!(g.share_us(500, &tb).unwrap(), 300, "100 shared + 200 alone");
    // Read-only: asking twice, or for an earlier time than seen, changes nothing.
    assert_eq!(g.share_us(500, &tb).unwrap(), 300);
    assert_eq!(g.share_us(200, &tb).unwrap(), 100, "clamped to the latest time seen");
    let bogus = Ticket { id: RequestId(99), charge_us: 1 };
    assert!(matches!(g.share_us(500, &bogus), Err(AdmissionError::UnknownTicket { id: 99 })));
}

#[test]
fn basis_picks_the_sample() {
    let sample = Sample { wall_us: 900, share_us: 300 };
    for (basis, text, want) in [(Basis::Wall, "wall", 900), (Basis::Share, "share", 300)] {
        assert_eq!(text.parse::<Basis>().unwrap(), basis);
        assert_eq!(basis.to_string(), text);
        let mut e = CostEstimator::new(1, EstimatorConfig { basis, ..Default::default() }).unwrap();
        e.observe_request(0, sample).unwrap();
        assert_eq!(e.estimate_us(0).unwrap(), want, "{basis}");
    }
    assert_eq!(EstimatorConfig::default().basis, Basis::Wall, "the paper's rule is the default");
    assert!("demand".parse::<Basis>().unwrap_err().to_string().contains("share"));
}

#[test]
fn bounded_charge_table() {
    // capacity 1000, bound 1/4: a 900 µs estimate is charged 250.
    let cfg = GateConfig { max_charge_share: 0.25, ..GateConfig::new(1_000, Policy::Fifo) };
    assert_eq!(cfg.max_charge_us(), 250);
    let mut g = Gate::new(cfg).unwrap();
    let mut running = Vec::new();
    for _ in 0..3 {
        let (_, adm) = g.arrive(0, 300).unwrap(); // charged 250 each
        running.extend(adm.into_iter().map(|a| a.ticket));
    }
    assert_eq!(g.load_us(), 750);
    // Unbounded, a 900 µs head would wait for the load to fall to 100; bounded, it fits now.
    let (_, adm) = g.arrive(1, 900).unwrap();
    assert_eq!(adm.len(), 1);
    assert_eq!(adm[0].ticket.charge_us(), 250);
    assert_eq!(g.load_us(), 1_000);
    // The paper's rule (share 1) charges the estimate, however large.
    assert_eq!(GateConfig::new(1_000, Policy::Fifo).max_charge_us(), u64::MAX);
    let mut g = gate(1_000, "fifo");
    let (_, adm) = g.arrive(0, 5_000).unwrap();
    assert_eq!(adm[0].ticket.charge_us(), 5_000, "runs alone");
    for bad in [0.0, -0.5, 1.5, f64::NAN] {
        let cfg = GateConfig { max_charge_share: bad, ..GateConfig::new(1_000, Policy::Fifo) };
        assert!(matches!(Gate::new(cfg), Err(AdmissionError::BadChargeShare { .. })), "{bad}");
    }
}

#[test]
fn estimator_unseen_types_charge_largest_known_or_cold_cost() {
    let cfg = EstimatorConfig { cold_cost_us: 777, ..Default::default() };
    let mut e = CostEstimator::new(3, cfg).unwrap();
    assert_eq!(e.estimate_us(0).unwrap(), 777);
    e.observe(0, 100).unwrap();
    e.observe(1, 5_000).unwrap();
    assert_eq!(e.estimate_us(0).unwrap(), 100);
    assert_eq!(e.estimate_us(2).unwrap(), 5_000);
    assert!(matches!(e.estimate_us(3), Err(AdmissionError::UnknownType { .. })));
    assert!(e.observe(9, 1).is_err());
    assert!(CostEstimator::new(1, EstimatorConfig { alpha: 0.0, ..Default::default() }).is_err());
}

#[test]
fn estimator_warmup_is_arithmetic_mean() {
    let mut e = CostEstimator::new(1, EstimatorConfig::default()).unwrap();
    for x in [100, 200, 300, 400] {
        e.observe(0, x).unwrap();
    }
    assert_eq!(e.estimate_us(0).unwrap(), 250);
    assert_eq!(e.samples(0).unwrap(), 4);
}

#[test]
fn estimator_converges_after_step_within_documented_samples() {
    for alpha in [0.05, 0.1, 0.25, 0.5, 1.0] {
        let cfg = EstimatorConfig { alpha, ..Default::default() };
        let n90 = cfg.samples_to_converge_90pct();
        let mut e = CostEstimator::new(1, cfg).unwrap();
        for _ in 0..200 {
            e.observe(0, 1_000).unwrap();
        }
        assert_eq!(e.estimate_us(0).unwrap(), 1_000);
        // Step to 11 ms: 90% of the step is at 10 ms.
        for i in 1..=n90 {
            e.observe(0, 11_000).unwrap();
            let est = e.estimate_us(0).unwrap();
            if i < n90 {
                assert!(est < 10_000, "alpha {alpha}: converged early at {i}/{n90}: {est}");
            } else {
                assert!(est >= 9_999, "alpha {alpha}: not converged after {n90}: {est}");
            }
        }
    }
    assert_eq!(EstimatorConfig::default().samples_to_converge_90pct(), 22);
}

#[test]
fn estimator_clamps_outliers() {
    let cfg = EstimatorConfig { max_sample_us: 1_000, ..Default::default() };
    let mut e = CostEstimator::new(1, cfg).unwrap();
    e.observe(0, 0).unwrap();
    assert_eq!(e.estimate_us(0).unwrap(), MIN_COST_US);
    e.observe(0, u64::MAX).unwrap();
    assert_eq!(e.estimate_us(0).unwrap(), 501);
}

// ---------------------------------------------------------------------------------------
// Invariants over random event sequences
// ---------------------------------------------------------------------------------------

#[derive(Debug, Clone)]
enum Op {
    Arrive(u64),
    /// Release the running request at this (wrapped) position.
    Release(usize),
    Cancel(usize),
    Advance(u64),
    SetCapacity(u64),
    /// Recharge the running request at this (wrapped) position with this cost.
    Recharge(usize, u64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => prop_oneof![1u64..20, 1u64..2_000].prop_map(Op::Arrive),
        3 => any::<usize>().prop_map(Op::Release),
        1 => any::<usize>().prop_map(Op::Cancel),
        3 => (0u64..500).prop_map(Op::Advance),
        1 => (1u64..3_000).prop_map(Op::SetCapacity),
        2 => (any::<usize>(), prop_oneof![1u64..20, 1u64..2_000]).prop_map(|(i, c)| Op::Recharge(i, c)),
    ]
}

fn policy() -> impl Strategy<Value = Policy> {
    prop_oneof![
        Just(Policy::Fifo),
        Just(Policy::Sjf),
        (0u32..8).prop_map(|x| Policy::SjfAging { factor: f64::from(x) / 2.0 }),
    ]
}

/// What the checker knows about each waiting request.
#[derive(Debug, Clone, Copy)]
struct Shadow {
    cost: u64,
    arrival: u64,
    deadline: u64,
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
}

impl Checker {
    /// Release one running request, checking its share ([`Gate::share_us`]) first.
    fn release(&mut self, t: Ticket) -> Result<(), TestCaseError> {
        let share = self.g.share_us(self.now, &t).unwrap();
        let since = self.now - self.admitted_at[&t.id().0];
        prop_assert!(share <= since, "share {} > time since admission {}", share, since);
        self.shares_released_us += share;
        self.releases += 1;
        self.released += t.charge_us();
        let adm = self.g.release(self.now, t).unwrap();
        self.admit(adm)
    }

    fn admit(&mut self, adm: Vec<Admitted>) -> Result<(), TestCaseError> {
        let load_before = self.g.load_us() - adm.iter().map(|a| a.ticket.charge_us()).sum::<u64>();
        let mut load = load_before;
        for (running_count, a) in (self.running.len()..).zip(adm) {
            let id = a.ticket.id().0;
            let s = self.waiting.remove(&id).ok_or_else(|| TestCaseError::fail("admitted twice"))?;
            prop_assert_eq!(a.ticket.charge_us(), s.cost);
            prop_assert_eq!(a.waited_us, self.now - s.arrival);
            // Capacity: admitted into an empty system, or fits.
            prop_assert!(running_count == 0 || load + s.cost <= self.g.capacity_us());
            if let Policy::SjfAging { .. } = self.g.config().policy {
                // Overtaking an older request never pushes it past its bound, or delays its
                // earliest start (by the expected finish times of what is running).
                for (&oid, o) in self.waiting.range(..id) {
                    let start = self.earliest_start(o.cost);
                    prop_assert!(
                        self.now + s.cost <= o.deadline.max(start),
                        "request {} (cost {}) overtook {} (cost {}, deadline {}, start {}) at {}",
                        id,
                        s.cost,
                        oid,
                        o.cost,
                        o.deadline,
                        start,
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

    fn check(&self) -> Result<(), TestCaseError> {
        let sum: u64 = self.running.iter().map(|t| t.charge_us()).sum();
        prop_assert_eq!(self.g.load_us(), sum);
        prop_assert_eq!(self.g.in_flight(), self.running.len());
        prop_assert_eq!(self.g.queue_len(), self.waiting.len());
        prop_assert_eq!(self.charged - self.released, sum);
        if !self.capacity_changed {
            prop_assert!(self.running.len() <= 1 || self.g.load_us() <= self.g.capacity_us());
        }
        // Work conservation: the gate never idles with waiting work while empty.
        prop_assert!(!self.running.is_empty() || self.waiting.is_empty());
        // Bounded charges: fifo and sjf never wait for more than the bound to drain.
        let cfg = self.g.config();
        if cfg.max_charge_share < 1.0
            && !self.capacity_changed
            && cfg.max_in_flight.is_none()
            && !self.waiting.is_empty()
            && matches!(cfg.policy, Policy::Fifo | Policy::Sjf)
        {
            let floor = cfg.capacity_us.saturating_sub(cfg.max_charge_us());
            prop_assert!(self.g.load_us() > floor, "load {} <= {} with requests waiting", self.g.load_us(), floor);
        }
        Ok(())
    }
}

fn exercise(policy: Policy, capacity: u64, ops: Vec<Op>) -> Result<Checker, TestCaseError> {
    exercise_with(GateConfig::new(capacity, policy), ops)
}

fn exercise_with(cfg: GateConfig, ops: Vec<Op>) -> Result<Checker, TestCaseError> {
    let policy = cfg.policy;
    let max_in_flight = cfg.max_in_flight.unwrap_or(usize::MAX);
    let mut c = Checker {
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
    };
    for op in ops {
        match op {
            Op::Arrive(estimate) => {
                // The gate is given the estimate; it charges at most the bound.
                let cost = estimate.min(c.g.config().max_charge_us());
                let deadline = match policy {
                    Policy::SjfAging { factor } => c.now + (factor * cost as f64) as u64,
                    _ => u64::MAX,
                };
                let (id, adm) = c.g.arrive(c.now, estimate).unwrap();
                c.waiting.insert(id.0, Shadow { cost, arrival: c.now, deadline });
                c.admit(adm)?;
            }
            Op::Release(i) if !c.running.is_empty() => {
                let t = c.running.swap_remove(i % c.running.len());
                c.release(t)?;
            }
            Op::Cancel(i) if !c.waiting.is_empty() => {
                let id = *c.waiting.keys().nth(i % c.waiting.len()).unwrap();
                c.waiting.remove(&id);
                let adm = c.g.cancel(c.now, RequestId(id)).expect("was waiting");
                c.admit(adm)?;
                prop_assert!(c.g.cancel(c.now, RequestId(id)).is_none(), "cancel twice");
            }
            Op::Advance(dt) => {
                if !c.running.is_empty() {
                    c.busy_us += dt;
                }
                c.now += dt;
                let adm = c.g.poll(c.now);
                c.admit(adm)?;
            }
            Op::SetCapacity(cap) => {
                c.capacity_changed = true;
                let adm = c.g.set_capacity(c.now, cap).unwrap();
                c.admit(adm)?;
            }
            Op::Recharge(i, estimate) if !c.running.is_empty() => {
                let i = i % c.running.len();
                let old = c.running[i].charge_us();
                let cost = estimate.min(c.g.config().max_charge_us());
                let mut t = c.running.swap_remove(i);
                let adm = c.g.recharge(c.now, &mut t, estimate).unwrap();
                prop_assert_eq!(t.charge_us(), cost);
                // A raised charge can leave the load above the capacity, as a lowered
                // capacity does; a lowered one admits only what fits.
                c.capacity_changed |= cost > old;
                c.charged += cost;
                c.released += old;
                c.running.push(t);
                c.admit(adm)?;
            }
            _ => {}
        }
        c.check()?;
        prop_assert!(c.running.len() <= max_in_flight);
    }
    // Drain: releasing everything admits and then finishes everything waiting.
    while let Some(t) = c.running.pop() {
        c.release(t)?;
        c.check()?;
    }
    prop_assert!(c.waiting.is_empty());
    // Shares partition the busy time: every moment with n requests admitted is split n
    // ways (each share is rounded to the µs once).
    prop_assert!(
        c.shares_released_us.abs_diff(c.busy_us) <= c.releases,
        "shares {} vs busy {} over {} releases",
        c.shares_released_us,
        c.busy_us,
        c.releases
    );
    prop_assert_eq!(c.g.load_us(), 0);
    prop_assert_eq!(c.charged, c.released);
    Ok(c)
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
        let c = exercise(Policy::Fifo, capacity, ops)?;
        prop_assert!(c.admitted_order.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn aging_huge_is_sjf(
        capacity in 1u64..3_000,
        ops in prop::collection::vec(op(), 0..200),
    ) {
        let sjf = exercise(Policy::Sjf, capacity, ops.clone())?;
        let big = exercise(Policy::SjfAging { factor: MAX_AGING_FACTOR }, capacity, ops)?;
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
