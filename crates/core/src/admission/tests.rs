//! Tables of arrivals → expected admissions (the invariants over random event sequences are
//! in `invariant_tests.rs`).

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
    /// A probe's arrival with a cost ([`Gate::arrive_probe`]); ids as for `Arrive`.
    Probe(u64),
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
            Ev::Probe(c) => g.arrive_probe(t, c).expect("queue has room").1,
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
    let ok: &[(&str, AdmissionPolicy)] = &[
        ("fifo", AdmissionPolicy::Fifo),
        ("sjf", AdmissionPolicy::Sjf),
        ("sjf-aging:2", AdmissionPolicy::SjfAging { factor: 2.0 }),
        ("sjf-aging:0.5", AdmissionPolicy::SjfAging { factor: 0.5 }),
        (" sjf-aging:0 ", AdmissionPolicy::SjfAging { factor: 0.0 }),
    ];
    for (s, p) in ok {
        assert_eq!(s.parse::<AdmissionPolicy>().unwrap(), *p, "{s}");
        assert_eq!(p.to_string().parse::<AdmissionPolicy>().unwrap(), *p);
    }
    for bad in ["", "FIFO", "sjf-aging", "sjf-aging:", "sjf-aging:-1", "sjf-aging:x", "lifo"] {
        let e = bad.parse::<AdmissionPolicy>().unwrap_err();
        assert!(e.to_string().contains(&format!("{bad:?}")), "{e}");
    }
}

/// (name, capacity, policy, script, expected admission order)
type OrderCase = (&'static str, u64, &'static str, &'static [(u64, Ev)], &'static [u64]);

const ADMISSION_ORDER: &[OrderCase] = &[
    (
        "fifo keeps head-of-line, then fills",
        10,
        "fifo",
        &[(0, Ev::Arrive(6)), (0, Ev::Arrive(6)), (0, Ev::Arrive(2)), (5, Ev::Release(0))],
        &[0, 1, 2],
    ),
    (
        "fifo does not let a small request pass a big head",
        10,
        "fifo",
        &[(0, Ev::Arrive(6)), (0, Ev::Arrive(6)), (0, Ev::Arrive(2)), (0, Ev::Arrive(1))],
        &[0],
    ),
    (
        "sjf admits cheapest first until the pick no longer fits",
        10,
        "sjf",
        &[
            (0, Ev::Arrive(10)),
            (0, Ev::Arrive(8)),
            (0, Ev::Arrive(5)),
            (0, Ev::Arrive(3)),
            (0, Ev::Arrive(9)),
            (1, Ev::Release(0)),
        ],
        &[0, 3, 2],
    ),
    (
        "sjf ties broken by arrival",
        10,
        "sjf",
        &[(0, Ev::Arrive(10)), (0, Ev::Arrive(4)), (0, Ev::Arrive(4)), (0, Ev::Arrive(4)), (1, Ev::Release(0))],
        &[0, 1, 2],
    ),
    (
        "empty system admits a request larger than capacity, alone",
        10,
        "fifo",
        &[(0, Ev::Arrive(50)), (0, Ev::Arrive(1)), (3, Ev::Release(0))],
        &[0, 1],
    ),
    (
        "aging X=1: the cheaper request may not overtake (bound of the older one)",
        10,
        "sjf-aging:1",
        &[(0, Ev::Arrive(10)), (0, Ev::Arrive(6)), (2, Ev::Arrive(5)), (3, Ev::Release(0))],
        &[0, 1],
    ),
    (
        "aging X=5: enough slack, the cheaper request goes first",
        10,
        "sjf-aging:5",
        &[(0, Ev::Arrive(10)), (0, Ev::Arrive(6)), (2, Ev::Arrive(5)), (3, Ev::Release(0))],
        &[0, 2],
    ),
    (
        "sjf on the same arrivals",
        10,
        "sjf",
        &[(0, Ev::Arrive(10)), (0, Ev::Arrive(6)), (2, Ev::Arrive(5)), (3, Ev::Release(0))],
        &[0, 2],
    ),
    (
        "aging: due requests go earliest-deadline first, not cheapest",
        10,
        "sjf-aging:1",
        &[(0, Ev::Arrive(4)), (0, Ev::Arrive(6)), (0, Ev::Arrive(3)), (2, Ev::Arrive(2)), (10, Ev::Release(0))],
        &[0, 1, 2],
    ),
    (
        "sjf on the same arrivals takes the cheapest",
        10,
        "sjf",
        &[(0, Ev::Arrive(4)), (0, Ev::Arrive(6)), (0, Ev::Arrive(3)), (2, Ev::Arrive(2)), (10, Ev::Release(0))],
        &[0, 1, 3],
    ),
    (
        "aging X=0 is fifo when nothing can go ahead without delaying the head",
        10,
        "sjf-aging:0",
        &[(0, Ev::Arrive(10)), (0, Ev::Arrive(6)), (0, Ev::Arrive(2)), (0, Ev::Arrive(1)), (1, Ev::Release(0))],
        &[0, 1, 2, 3],
    ),
    (
        "aging X=0 backfills a request expected to finish before the blocked head can start",
        10,
        "sjf-aging:0",
        &[(0, Ev::Arrive(8)), (0, Ev::Arrive(5)), (0, Ev::Arrive(2)), (8, Ev::Release(0))],
        &[0, 2, 1],
    ),
    (
        "fifo on the same arrivals leaves the capacity idle",
        10,
        "fifo",
        &[(0, Ev::Arrive(8)), (0, Ev::Arrive(5)), (0, Ev::Arrive(2)), (8, Ev::Release(0))],
        &[0, 1, 2],
    ),
    (
        "aging X=0: no backfill that would still run when the head starts and not fit beside it",
        12,
        "sjf-aging:0",
        // 1 (10) starts at 8 and leaves 2 free; 2 (3) would run until 9.
        &[(0, Ev::Arrive(8)), (0, Ev::Arrive(10)), (6, Ev::Arrive(3)), (8, Ev::Release(0))],
        &[0, 1],
    ),
    (
        "aging X=0: a backfill still running when the head starts, if it fits beside it",
        12,
        "sjf-aging:0",
        // 1 (5) starts at 8 and leaves 7 free; 2 (3) runs until 9, beside it.
        &[(0, Ev::Arrive(8)), (0, Ev::Arrive(5)), (6, Ev::Arrive(3)), (8, Ev::Release(0))],
        &[0, 2, 1],
    ),
    (
        "aging X=1: a backfill may delay the head within its bound (10), past its start (8)",
        12,
        "sjf-aging:1",
        &[(0, Ev::Arrive(8)), (0, Ev::Arrive(10)), (6, Ev::Arrive(3)), (8, Ev::Release(0))],
        &[0, 2],
    ),
    (
        "aging X=2: the head's bound (10) leaves room for it",
        12,
        "sjf-aging:2",
        &[(0, Ev::Arrive(8)), (0, Ev::Arrive(5)), (6, Ev::Arrive(3)), (8, Ev::Release(0))],
        &[0, 2, 1],
    ),
    (
        "aging: an overdue big request; cheap ones fill the room it leaves beside it",
        10,
        "sjf-aging:1",
        &[
            (0, Ev::Arrive(4)),
            (0, Ev::Arrive(4)),
            (1, Ev::Arrive(9)),
            (30, Ev::Arrive(1)),
            (30, Ev::Arrive(1)),
            (31, Ev::Release(0)),
            (32, Ev::Release(1)),
        ],
        // Expected finishes 4 and 4 (overdue at 30, so "any moment"): request 2 (9) can
        // start only when both finished, and leaves 1 free beside it: 3 (1) goes ahead.
        // 4 (1) would not fit beside 2 and 3 and waits, until at 31 3 is expected to
        // have finished (its charge, 1): 4 takes its place. The guarantee is in
        // estimated time: 3 overruns, so 2 starts after 3 and 4 finish.
        &[0, 1, 3, 4],
    ),
    (
        "aging: a request that fits but may not overtake an older one blocks no backfill",
        20,
        "sjf-aging:0",
        // At 9, request 2 (5) fits but would run past 1's start (12, when 0 is expected
        // to finish) and not fit beside it (1 leaves 4 free), so it waits for 1; request
        // 3 (1) fits beside 1 and goes ahead.
        &[(0, Ev::Arrive(12)), (0, Ev::Arrive(16)), (9, Ev::Arrive(5)), (9, Ev::Arrive(1)), (12, Ev::Release(0))],
        &[0, 3, 1],
    ),
    (
        "cancel of a blocking old request lets the next one in",
        10,
        "fifo",
        &[(0, Ev::Arrive(8)), (0, Ev::Arrive(5)), (0, Ev::Arrive(2)), (1, Ev::Cancel(1))],
        &[0, 2],
    ),
    (
        "poll admits nothing when nothing changed",
        10,
        "sjf-aging:1",
        &[(0, Ev::Arrive(10)), (0, Ev::Arrive(6)), (50, Ev::Poll)],
        &[0],
    ),
];

#[test]
fn admission_order_table() {
    for (name, cap, policy, script, expected) in ADMISSION_ORDER {
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
    let mut cfg = GateConfig::new(10, AdmissionPolicy::Fifo);
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
    let mut cfg = GateConfig::new(10, AdmissionPolicy::Sjf);
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
    let cfg = GateConfig { max_in_flight: Some(2), ..GateConfig::new(1_000, AdmissionPolicy::Sjf) };
    let mut g = Gate::new(cfg).unwrap();
    let order = run(&mut g, &[(0, Ev::Arrive(1)), (0, Ev::Arrive(1)), (0, Ev::Arrive(1)), (1, Ev::Release(0))]);
    assert_eq!(order, vec![0, 1, 2]);
    assert_eq!(g.in_flight(), 2);
    assert!(Gate::new(GateConfig { max_in_flight: Some(0), ..GateConfig::new(1, AdmissionPolicy::Fifo) }).is_err());
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
    let sample = Sample { wall_us: 900, share_us: 300, serial_us: 450, cpu_us: Some(120) };
    for (basis, text, want) in [
        (Basis::Wall, "wall", 900),
        (Basis::Share, "share", 300),
        (Basis::Serial, "serial", 450),
        (Basis::Cpu, "cpu", 120),
    ] {
        assert_eq!(text.parse::<Basis>().unwrap(), basis);
        assert_eq!(basis.to_string(), text);
        let mut e = CostEstimator::new(1, EstimatorConfig { basis, ..Default::default() }).unwrap();
        e.observe_request(0, sample).unwrap();
        assert_eq!(e.estimate_us(0).unwrap(), want, "{basis}");
    }
    let mut e = CostEstimator::new(1, EstimatorConfig { basis: Basis::Cpu, ..Default::default() }).unwrap();
    e.observe_request(0, Sample { cpu_us: None, ..sample }).unwrap();
    assert_eq!(e.estimate_us(0).unwrap(), 900, "unmeasured processor time: the wall time");
    assert_eq!(EstimatorConfig::default().basis, Basis::Wall, "the paper's rule is the default");
    assert!("demand".parse::<Basis>().unwrap_err().to_string().contains("share"));
}

#[test]
fn bounded_charge_table() {
    // capacity 1000, bound 1/4: a 900 µs estimate is charged 250.
    let cfg = GateConfig { max_charge_share: 0.25, ..GateConfig::new(1_000, AdmissionPolicy::Fifo) };
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
    assert_eq!(GateConfig::new(1_000, AdmissionPolicy::Fifo).max_charge_us(), u64::MAX);
    let mut g = gate(1_000, "fifo");
    let (_, adm) = g.arrive(0, 5_000).unwrap();
    assert_eq!(adm[0].ticket.charge_us(), 5_000, "runs alone");
    for bad in [0.0, -0.5, 1.5, f64::NAN] {
        let cfg = GateConfig { max_charge_share: bad, ..GateConfig::new(1_000, AdmissionPolicy::Fifo) };
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

#[test]
fn charge_marks_stale_types_as_probes_table() {
    // resample after 1,000 µs. Each row: (now, sample to observe first or 0, type, expected
    // (cost, probe)). Type 0 is sampled at 1,800; type 1 never.
    let cfg = EstimatorConfig { resample_after_us: Some(1_000), cold_cost_us: 10_000, ..Default::default() };
    let mut e = CostEstimator::new(2, cfg).unwrap();
    let rows: &[(u64, u64, usize, (u64, bool))] = &[
        (0, 0, 0, (10_000, false)),     // first charge starts the clock
        (999, 0, 0, (10_000, false)),   // not stale yet
        (1_000, 0, 0, (10_000, true)),  // stale: a probe, clock restarts
        (1_500, 0, 0, (10_000, false)), // at most one probe per 1,000 µs
        (1_800, 300, 0, (300, false)),  // sampled at 1,800
        (2_700, 0, 0, (300, false)),    // 900 µs after the sample
        (2_800, 0, 0, (300, true)),     // 1,000 µs after it
        (2_800, 0, 1, (300, false)),    // type 1: first charge (largest known estimate)
        (3_799, 0, 1, (300, false)),
        (3_800, 0, 1, (300, true)),  // never sampled, 1,000 µs since its first charge
        (3_799, 0, 0, (300, false)), // 999 µs after its last probe
    ];
    for (i, &(now, sample, ty, want)) in rows.iter().enumerate() {
        if sample > 0 {
            e.observe_request_at(ty, Sample::alone(sample), now).unwrap();
        }
        let c = e.charge(ty, now).unwrap();
        assert_eq!((c.cost_us, c.probe), want, "row {i}: now {now} type {ty}");
    }
    // Without re-sampling (the paper's rule taken literally) nothing is ever a probe.
    let mut e = CostEstimator::new(1, EstimatorConfig { resample_after_us: None, ..Default::default() }).unwrap();
    for now in [0, 10_000_000, 1_000_000_000] {
        assert!(!e.charge(0, now).unwrap().probe);
    }
    assert!(e.charge(1, 0).is_err(), "type out of range");
    let zero = EstimatorConfig { resample_after_us: Some(0), ..Default::default() };
    assert!(CostEstimator::new(1, zero).unwrap_err().to_string().contains("resample_after_us"));
    assert_eq!(EstimatorConfig::default().resample_after_us, Some(DEFAULT_RESAMPLE_AFTER_US));
}

#[test]
fn sjf_probe_goes_first_and_waits_for_room_table() {
    // Capacity 1,000. 0 (500) and 1 (400) run; 2 (200) and 3 (150) wait; then 4 (600)
    // arrives. Rows: (script, expected admission order).
    use Ev::*;
    let base = [(0, Arrive(500)), (0, Arrive(400)), (1, Arrive(200)), (2, Arrive(150))];
    let cases: &[(&str, Ev, &[u64])] = &[
        // Plain sjf: releasing 1 admits 3 and 2 (load 850); 4 waits until 0 and 3 finish.
        ("sjf, ordinary arrival", Arrive(600), &[0, 1, 3, 2, 4]),
        // A probe: releasing 1 (load 500) admits nothing, since 4 is first and does not fit
        // and sjf admits only its pick; releasing 0 (load 0) admits 4, then 3 and 2 fit.
        ("sjf, probe", Probe(600), &[0, 1, 4, 3, 2]),
    ];
    for &(name, ev, want) in cases {
        let mut g = gate(1_000, "sjf");
        let mut script: Vec<(u64, Ev)> = base.to_vec();
        script.extend([(3, ev), (4, Release(1)), (5, Release(0))]);
        if let Arrive(_) = ev {
            script.extend([(6, Release(3)), (7, Release(2))]);
        }
        assert_eq!(run(&mut g, &script), want, "{name}");
    }
    // Probes among themselves go in arrival order, ahead of cheaper requests.
    let mut g = gate(1_000, "sjf");
    let order = run(&mut g, &[(0, Arrive(900)), (1, Arrive(200)), (2, Probe(700)), (3, Probe(50)), (4, Release(0))]);
    assert_eq!(order, [0, 2, 3, 1]);
    // A probe whose charge exceeds the capacity waits for the gate to drain, then runs alone.
    let mut g = gate(1_000, "sjf");
    let order = run(&mut g, &[(0, Arrive(300)), (0, Arrive(300)), (1, Probe(5_000)), (2, Arrive(1)), (3, Release(0))]);
    assert_eq!(order, [0, 1], "nothing passes a waiting probe");
    assert_eq!(g.probes_waiting(), 1);
    // Under fifo and sjf-aging a probe is an ordinary arrival.
    for policy in ["fifo", "sjf-aging:2"] {
        let script = [(0, Arrive(900)), (1, Arrive(10)), (2, Probe(700)), (3, Release(0))];
        let mut plain = gate(1_000, policy);
        let mut probed = gate(1_000, policy);
        let plain_script: Vec<(u64, Ev)> =
            script.iter().map(|&(t, e)| (t, if let Probe(c) = e { Arrive(c) } else { e })).collect();
        assert_eq!(run(&mut probed, &script), run(&mut plain, &plain_script), "{policy}");
        assert_eq!(probed.probes_waiting(), 0, "{policy}");
    }
}

#[test]
fn resampling_breaks_the_sjf_lock_in() {
    // The TPC-W lock-in in miniature: a costly type B (true cost 300) fills the queue; type
    // A costs the same but its estimate is stuck at 370 from its warm-up. Requests arrive
    // every 100 µs (A every 10th) against capacity 800; each runs its true cost.
    for (resample, want_a_admitted) in [(None, false), (Some(5_000u64), true)] {
        let cfg = EstimatorConfig { resample_after_us: resample, ..Default::default() };
        let mut e = CostEstimator::new(2, cfg).unwrap();
        e.observe_request_at(0, Sample::alone(370), 0).unwrap(); // A
        e.observe_request_at(1, Sample::alone(300), 0).unwrap(); // B
        let mut g = gate(800, "sjf");
        let mut types: HashMap<u64, (usize, u64)> = HashMap::new(); // id -> (type, arrival)
        let mut running: Vec<(u64, Ticket)> = Vec::new(); // (finish, ticket)
        let mut a_done = 0;
        for step in 0..2_000u64 {
            let now = step * 100;
            running.sort_by_key(|r| std::cmp::Reverse(r.0));
            let mut adm = Vec::new();
            while running.last().is_some_and(|r| r.0 <= now) {
                let (_, t) = running.pop().unwrap();
                let (ty, arrival) = types[&t.id().0];
                e.observe_request_at(ty, Sample::alone(300), now).unwrap();
                // Count A's that arrived once the queue had built up (the first few find room).
                a_done += usize::from(ty == 0 && arrival >= 10_000);
                adm.extend(g.release(now, t).unwrap());
            }
            let ty = usize::from(step % 10 != 0);
            let c = e.charge(ty, now).unwrap();
            let (id, more) = if c.probe { g.arrive_probe(now, c.cost_us) } else { g.arrive(now, c.cost_us) }.unwrap();
            types.insert(id.0, (ty, now));
            adm.extend(more);
            running.extend(adm.into_iter().map(|a| (now + 300, a.ticket)));
        }
        assert!(g.queue_len() > 100, "overloaded: {}", g.queue_len());
        assert_eq!(a_done > 0, want_a_admitted, "resample {resample:?}: {a_done} A done");
        if resample.is_some() {
            // A is re-measured (300) and now sorts with B, not behind all of them.
            let a = e.estimate_us(0).unwrap();
            assert!((300..310).contains(&a), "A's estimate {a}");
            assert!(a_done >= 20, "{a_done}");
        } else {
            // Only the first few A's (before the queue built up) were measured: A stays
            // priced above B, behind every B in the queue.
            assert!(e.estimate_us(0).unwrap() > e.estimate_us(1).unwrap(), "{}", e.estimate_us(0).unwrap());
        }
    }
}

/// `head_cost_us`: the charge of the request each policy looks at first, the figure that
/// says whether idle capacity is idle because the head does not fit.
#[test]
fn head_cost_is_the_policys_first_look_table() {
    // Capacity 100, one request of 90 running; then 50, 30 and a probe of 70 wait.
    for (policy, want_before_probe, want_after_probe) in [("fifo", 50, 50), ("sjf", 30, 70), ("sjf-aging:1000", 30, 30)]
    {
        let mut g = gate(100, policy);
        assert_eq!(g.head_cost_us(), None, "{policy}: empty queue");
        let _running = g.arrive(0, 90).unwrap();
        g.arrive(1, 50).unwrap();
        g.arrive(2, 30).unwrap();
        assert_eq!(g.head_cost_us(), Some(want_before_probe), "{policy}");
        g.arrive_probe(3, 70).unwrap();
        assert_eq!(g.head_cost_us(), Some(want_after_probe), "{policy} with a probe waiting");
        assert_eq!((g.queue_len(), g.load_us()), (3, 90), "{policy}");
    }
}

/// Re-pricing waiting requests (fifo): the fit test sees the new charge, the admitted
/// ticket carries it, ids that are not waiting are ignored; other policies ignore it.
#[test]
fn reprice_waiting_table() {
    // fifo: a head charged 60 at an inflated moment waits behind 90 of 100; re-priced at
    // 10 (its type's estimate now) it fits at once, the one behind it (5) does not.
    let mut g = gate(100, "fifo");
    let (a, adm) = g.arrive(0, 90).unwrap();
    let mut tickets: Vec<Ticket> = adm.into_iter().map(|x| x.ticket).collect();
    let (b, _) = g.arrive(1, 60).unwrap();
    let (c, _) = g.arrive(2, 5).unwrap();
    assert!(g.reprice_waiting(3, [a], 1).is_empty(), "a running request is not re-priced");
    assert!(g.reprice_waiting(3, [b], 60).is_empty(), "same charge: nothing to do");
    let adm = g.reprice_waiting(3, [b, RequestId(99)], 10);
    assert_eq!(ids(&adm), vec![b.0]);
    assert_eq!((adm[0].ticket.charge_us(), adm[0].waited_us), (10, 2));
    assert_eq!((g.load_us(), g.queue_len(), g.head_cost_us()), (100, 1, Some(5)));
    tickets.extend(adm.into_iter().map(|x| x.ticket));
    // Raised while waiting: admitted at the raised charge once it fits.
    assert!(g.reprice_waiting(4, [c], 30).is_empty());
    let adm = g.release(5, tickets.remove(0)).unwrap();
    assert_eq!(ids(&adm), vec![c.0]);
    assert_eq!((adm[0].ticket.charge_us(), g.load_us()), (30, 40));

    // sjf-aging: the charge and the deadline (arrival + X × charge) move; what then fits
    // and is allowed is admitted.
    let mut g = gate(100, "sjf-aging:2");
    let (_, mut adm) = g.arrive(0, 90).unwrap();
    let (b, _) = g.arrive(1, 30).unwrap();
    let (c, _) = g.arrive(2, 20).unwrap();
    assert_eq!(g.next_wakeup_us(), Some(42), "c is due at 2 + 2 × 20");
    assert!(g.reprice_waiting(3, [c], 40).is_empty(), "90 + 40 does not fit");
    assert_eq!(ids(&g.reprice_waiting(3, [b], 5)), vec![b.0]);
    assert_eq!((g.head_cost_us(), g.next_wakeup_us()), (Some(40), Some(82)), "c is due at 2 + 2 × 40");
    let adm = g.release(4, adm.remove(0).ticket).unwrap();
    assert_eq!((ids(&adm), g.load_us()), (vec![c.0], 45));

    // sjf: the type heads are ordered by their new charges; what then fits is admitted.
    let mut g = gate(100, "sjf");
    let (_, mut adm) = g.arrive(0, 90).unwrap();
    let (b, _) = g.arrive(1, 30).unwrap();
    let (c, _) = g.arrive(2, 20).unwrap();
    assert!(g.reprice_waiting(3, [c], 40).is_empty(), "90 + 30 does not fit");
    assert_eq!(g.head_cost_us(), Some(30));
    assert_eq!(ids(&g.reprice_waiting(3, [b], 5)), vec![b.0]);
    let adm = g.release(4, adm.remove(0).ticket).unwrap();
    assert_eq!(ids(&adm), vec![c.0]);
    assert_eq!(g.load_us(), 45);
}

/// A backend that serves one request at a time in arrival order, behind a gate that admits
/// up to `cap` at once: each completion's [`Gate::serial_us`] is exactly the request's
/// service, whatever waited inside the backend (its wall time there counts the requests
/// ahead of it). Arrivals `(gap, service)`; returns how many samples the wall time inflated.
fn serial_backend(cap: usize, arrivals: &[(u64, u64)]) -> Result<usize, TestCaseError> {
    let cfg = GateConfig { max_in_flight: Some(cap), ..GateConfig::new(u64::MAX / 4, AdmissionPolicy::Fifo) };
    let mut g = Gate::new(cfg).unwrap();
    let mut service: HashMap<u64, u64> = HashMap::new();
    // In the backend, in admission order: (ticket, admitted at).
    let mut backend: std::collections::VecDeque<(Ticket, u64)> = Default::default();
    let (mut busy_until, mut inflated) = (0u64, 0usize);
    let mut finish: Option<u64> = None; // completion of the request at the front
    let mut t = 0u64;
    let mut pending = arrivals.iter();
    let mut next = pending.next().map(|&(gap, s)| (gap, s));
    loop {
        let at = match (next, finish) {
            (Some((a, _)), Some(f)) => a.min(f),
            (Some((a, _)), None) => a,
            (None, Some(f)) => f,
            (None, None) => break,
        };
        t = t.max(at);
        let mut admitted = Vec::new();
        if finish == Some(t) {
            let (ticket, admitted_at) = backend.pop_front().unwrap();
            let s = service[&ticket.id().0];
            let wall = t - admitted_at;
            prop_assert_eq!(g.serial_us(t, wall), s, "request {} at {}", ticket.id(), t);
            inflated += usize::from(wall > s);
            admitted.extend(g.release(t, ticket).unwrap());
            finish = None;
        }
        if let Some((_, s)) = next.filter(|n| n.0 == t) {
            let (id, adm) = g.arrive(t, s).unwrap();
            service.insert(id.0, s);
            admitted.extend(adm);
            next = pending.next().map(|&(gap, s)| (t + gap, s));
        }
        for a in admitted {
            backend.push_back((a.ticket, t));
        }
        prop_assert!(backend.len() <= cap);
        if finish.is_none() {
            if let Some((ticket, admitted_at)) = backend.front() {
                // The front starts once the backend is free and it has arrived.
                let start = busy_until.max(*admitted_at);
                busy_until = start + service[&ticket.id().0];
                finish = Some(busy_until);
            }
        }
    }
    prop_assert!(backend.is_empty() && g.queue_len() == 0);
    Ok(inflated)
}

proptest! {
    #[test]
    fn serial_basis_is_the_service_of_a_one_at_a_time_backend(
        cap in 1usize..5,
        arrivals in proptest::collection::vec((0u64..300, 1u64..1_000), 0..80),
    ) {
        serial_backend(cap, &arrivals)?;
    }
}

#[test]
fn serial_basis_is_the_service_of_a_one_at_a_time_backend_table() {
    // (cap, arrivals (gap, service)): all at once; spaced out; a cheap one behind a costly one.
    type Row = (usize, &'static [(u64, u64)], usize);
    let rows: [Row; 4] = [
        (1, &[(0, 100), (0, 3), (0, 50)], 0),
        (2, &[(0, 100), (0, 3), (0, 50)], 2),
        (3, &[(0, 180_000), (10, 1_100), (10, 110_000), (0, 1_100)], 3),
        (2, &[(0, 100), (500, 3), (500, 50)], 0),
    ];
    for (cap, arrivals, want_inflated) in rows {
        let inflated = serial_backend(cap, arrivals).unwrap();
        assert_eq!(inflated, want_inflated, "cap {cap}, {arrivals:?}: wall times above the service");
    }
}

/// Under `serial` the overdue share counts each request the backend's time between the
/// previous release (or its admission) and its own release: two requests in flight on a
/// one-at-a-time backend do not split the time between them as processor sharing would.
#[test]
fn serial_overdue_time_is_counted_between_releases() {
    // sjf, wait bound 10 µs, share 0.5, two in flight: A and B admitted at 0; C waits.
    let cfg = GateConfig {
        max_in_flight: Some(2),
        max_wait_us: Some(10),
        overdue_share: 0.5,
        serial: true,
        ..GateConfig::new(1_000_000, AdmissionPolicy::Sjf)
    };
    let mut g = Gate::new(cfg).unwrap();
    let (_, mut a) = g.arrive(0, 100).unwrap();
    let (_, b) = g.arrive(0, 100).unwrap();
    a.extend(b);
    let (c, none) = g.arrive(0, 100).unwrap();
    assert!(none.is_empty());
    let mut tickets = a.into_iter().map(|x| x.ticket);
    let (ta, tb) = (tickets.next().unwrap(), tickets.next().unwrap());
    // A done at 100: its 100 µs are busy time; C, waiting 100 > 10, goes in as overdue.
    let adm = g.release(100, ta).unwrap();
    assert_eq!(adm.len(), 1);
    assert!(g.admitted_overdue(c));
    let close = |(o, b): (f64, f64), (wo, wb): (f64, f64)| (o - wo).abs() < 0.1 && (b - wb).abs() < 0.1;
    assert!(close(g.overdue_time_us(), (0.0, 100.0)), "{:?}", g.overdue_time_us());
    // B done at 130: 30 µs since A's release, not the 130 it was in flight (nor half of them).
    let _ = g.release(130, tb).unwrap();
    assert!(close(g.overdue_time_us(), (0.0, 130.0)), "{:?}", g.overdue_time_us());
    // C, admitted at 100, done at 400: the 270 µs since B's release are the overdue stream's.
    let tc = adm.into_iter().next().unwrap().ticket;
    let _ = g.release(400, tc).unwrap();
    let (o, busy) = g.overdue_time_us();
    assert!((o - 270.0).abs() < 0.1 && (busy - 400.0).abs() < 0.1, "{o} {busy}");
}
