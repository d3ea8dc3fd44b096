//! The type rule: within a request type every policy admits in
//! arrival order, whatever the charges; across types the policy's order holds among
//! each type's oldest waiting request. Tables, then a property over random event sequences.

use std::collections::HashMap;

use proptest::prelude::*;

use super::exact_service::exact_service;
use super::*;

fn gate(capacity_us: u64, policy: &str) -> Gate {
    Gate::new(GateConfig::new(capacity_us, policy.parse().unwrap())).unwrap()
}

/// One arrival per `(request_type, cost)` while request 0 (type 99) holds the whole capacity,
/// then releases one at a time; returns the admission order (ids).
fn order(policy: &str, arrivals: &[(u64, u64)], probe_at: Option<usize>) -> Vec<u64> {
    let mut g = gate(100, policy);
    let (_, adm) = g.arrive_in(0, 99, 100).unwrap();
    let mut running: Vec<Ticket> = adm.into_iter().map(|a| a.ticket).collect();
    for (i, &(request_type, cost)) in arrivals.iter().enumerate() {
        let (_, adm) = if probe_at == Some(i) {
            g.arrive_probe_in(1 + i as u64, request_type, cost).unwrap()
        } else {
            g.arrive_in(1 + i as u64, request_type, cost).unwrap()
        };
        assert!(adm.is_empty(), "capacity is held");
    }
    let mut out = Vec::new();
    let mut t = 1_000;
    while let Some(ticket) = running.pop() {
        t += 1_000;
        for a in g.release(t, ticket).unwrap() {
            out.push(a.ticket.id().0);
            running.push(a.ticket);
        }
    }
    out
}

#[test]
fn class_order_table() {
    // (policy, arrivals as (request_type, cost), probe index, admission order)
    type Row<'a> = (&'a str, &'a [(u64, u64)], Option<usize>, &'a [u64]);
    let table: &[Row] = &[
        // One type whose estimate drifts down: still first come, first served.
        ("sjf", &[(1, 90), (1, 60), (1, 30), (1, 10)], None, &[1, 2, 3, 4]),
        // ... and up.
        ("sjf", &[(1, 10), (1, 30), (1, 60), (1, 90)], None, &[1, 2, 3, 4]),
        // Two types: the cheaper head goes first, each type in arrival order.
        ("sjf", &[(1, 90), (2, 50), (1, 10), (2, 60)], None, &[2, 4, 1, 3]),
        ("sjf-aging:1000", &[(1, 90), (1, 60), (1, 30)], None, &[1, 2, 3]),
        ("sjf-aging:1000", &[(1, 90), (2, 50), (1, 10), (2, 60)], None, &[2, 4, 1, 3]),
        ("fifo", &[(1, 90), (2, 50), (1, 10)], None, &[1, 2, 3]),
        // A probe takes its type's head ahead of every other; that admission answers it
        // (one sample), and the order is sjf's again.
        ("sjf", &[(2, 5), (1, 90), (1, 80)], Some(2), &[2, 1, 3]),
        ("sjf", &[(1, 90), (1, 80), (2, 5), (1, 70)], Some(3), &[1, 3, 2, 4]),
    ];
    for (policy, arrivals, probe, want) in table {
        assert_eq!(order(policy, arrivals, *probe), *want, "{policy} {arrivals:?} probe {probe:?}");
    }
}

#[test]
fn cancelling_a_class_head_promotes_the_next_of_its_class() {
    let mut g = gate(100, "sjf");
    let (_, adm) = g.arrive_in(0, 9, 100).unwrap();
    let blocker = adm.into_iter().next().unwrap().ticket;
    let (a, _) = g.arrive_in(1, 1, 80).unwrap();
    let (_b, _) = g.arrive_in(2, 1, 10).unwrap();
    let (_c, _) = g.arrive_in(3, 2, 50).unwrap();
    assert_eq!(g.head_cost_us(), Some(50), "type 1's head costs 80, type 2's 50");
    g.cancel(4, a).unwrap();
    assert_eq!(g.head_cost_us(), Some(10), "type 1's next oldest is its candidate now");
    let adm = g.release(5, blocker).unwrap();
    assert_eq!(adm.iter().map(|a| a.ticket.id().0).collect::<Vec<_>>(), [2, 3]);
}

#[test]
fn set_policy_reorders_the_waiting_requests() {
    let mut g = gate(100, "fifo");
    let (_, adm) = g.arrive(0, 100).unwrap();
    let blocker = adm.into_iter().next().unwrap().ticket;
    g.arrive(1, 90).unwrap();
    g.arrive(2, 10).unwrap();
    assert_eq!(g.head_cost_us(), Some(90), "fifo: the oldest");
    assert!(g.set_policy(3, "sjf".parse().unwrap()).is_empty());
    assert_eq!(g.head_cost_us(), Some(10), "sjf: the cheapest");
    assert!(g.set_policy(4, "sjf-aging:0".parse().unwrap()).is_empty());
    assert_eq!(g.next_wakeup_us(), None, "aging:0: both already due, no future deadline");
    let adm = g.release(5, blocker).unwrap();
    assert_eq!(adm.iter().map(|a| a.ticket.id().0).collect::<Vec<_>>(), [1, 2], "aging:0 is fifo");
}

#[derive(Debug, Clone)]
enum Op {
    Arrive { request_type: u64, cost: u64, probe: bool },
    Release(usize),
    Cancel(usize),
    Advance(u64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u64..4, 1u64..400, prop::bool::weighted(0.1))
            .prop_map(|(request_type, cost, probe)| Op::Arrive { request_type, cost, probe }),
        3 => any::<usize>().prop_map(Op::Release),
        1 => any::<usize>().prop_map(Op::Cancel),
        1 => (1u64..500).prop_map(Op::Advance),
    ]
}

fn policy() -> impl Strategy<Value = &'static str> {
    prop_oneof![Just("fifo"), Just("sjf"), Just("sjf-aging:0"), Just("sjf-aging:2"), Just("sjf-aging:1000")]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// Whatever the charges, cancellations and policy, the requests of one type are
    /// admitted in arrival order, and every admission leaves the load within the
    /// capacity or runs alone.
    #[test]
    fn every_policy_admits_a_class_in_arrival_order(
        policy in policy(),
        capacity in 50u64..1_000,
        ops in prop::collection::vec(op(), 1..200),
    ) {
        let mut g = gate(capacity, policy);
        let mut now = 0;
        let mut type_of: HashMap<u64, u64> = HashMap::new();
        let mut last_admitted: HashMap<u64, u64> = HashMap::new();
        let mut waiting: Vec<RequestId> = Vec::new();
        let mut running: Vec<Ticket> = Vec::new();
        let mut check = |adm: Vec<Admitted>, type_of: &HashMap<u64, u64>, waiting: &mut Vec<RequestId>, running: &mut Vec<Ticket>| -> Result<(), TestCaseError> {
            for a in adm {
                let id = a.ticket.id();
                let request_type = type_of[&id.0];
                if let Some(&prev) = last_admitted.get(&request_type) {
                    prop_assert!(prev < id.0, "type {request_type}: {id} admitted after #{prev}");
                }
                last_admitted.insert(request_type, id.0);
                waiting.retain(|w| *w != id);
                running.push(a.ticket);
            }
            Ok(())
        };
        for op in ops {
            match op {
                Op::Arrive { request_type, cost, probe } => {
                    let r = if probe { g.arrive_probe_in(now, request_type, cost) } else { g.arrive_in(now, request_type, cost) };
                    let (id, adm) = r.expect("queue has room");
                    type_of.insert(id.0, request_type);
                    waiting.push(id);
                    check(adm, &type_of, &mut waiting, &mut running)?;
                }
                Op::Release(i) if !running.is_empty() => {
                    let t = running.swap_remove(i % running.len());
                    let adm = g.release(now, t).unwrap();
                    check(adm, &type_of, &mut waiting, &mut running)?;
                }
                Op::Cancel(i) if !waiting.is_empty() => {
                    let id = waiting.remove(i % waiting.len());
                    let adm = g.cancel(now, id).expect("was waiting");
                    check(adm, &type_of, &mut waiting, &mut running)?;
                }
                Op::Advance(dt) => {
                    now += dt;
                    let adm = g.poll(now);
                    check(adm, &type_of, &mut waiting, &mut running)?;
                }
                _ => {}
            }
            prop_assert!(g.in_flight() <= 1 || g.load_us() <= capacity);
        }
    }
}

/// The wait bound under sjf: a costly request behind an endless stream of cheaper ones is
/// never admitted without it; with it, it goes first once it has waited the bound and is
/// admitted when the requests running then finish (here one cheap service time, 5).
#[test]
fn sjf_wait_bound_admits_the_starved_request() {
    for (bound, want) in [(None, None), (Some(100), Some(101..=106)), (Some(40), Some(41..=46))] {
        let cfg = GateConfig { max_wait_us: bound, ..GateConfig::new(10, AdmissionPolicy::Sjf) };
        let mut g = Gate::new(cfg).unwrap();
        let mut running: Vec<(u64, Ticket)> = Vec::new();
        let mut costly = None;
        let mut admitted_at = None;
        // Start the admitted requests; when the costly one is among them, note the time.
        let take = |t: u64,
                    adm: Vec<Admitted>,
                    running: &mut Vec<(u64, Ticket)>,
                    costly: Option<RequestId>,
                    at: &mut Option<u64>| {
            for a in adm {
                if Some(a.ticket.id()) == costly {
                    *at = Some(t);
                }
                let d = a.ticket.charge_us();
                running.push((t + d, a.ticket));
            }
        };
        for t in 0..1_000u64 {
            let (done, still): (Vec<_>, Vec<_>) = running.drain(..).partition(|(f, _)| *f <= t);
            running = still;
            for (_, ticket) in done {
                let adm = g.release(t, ticket).unwrap();
                take(t, adm, &mut running, costly, &mut admitted_at);
            }
            if t == 1 {
                let (id, adm) = g.arrive_in(t, 2, 10).unwrap();
                costly = Some(id);
                assert!(adm.is_empty());
                take(t, adm, &mut running, costly, &mut admitted_at);
            }
            if t % 2 == 0 {
                let (_, adm) = g.arrive_in(t, 1, 5).unwrap();
                take(t, adm, &mut running, costly, &mut admitted_at);
            }
            if g.next_wakeup_us().is_some_and(|w| w <= t) {
                let adm = g.poll(t);
                take(t, adm, &mut running, costly, &mut admitted_at);
            }
            // Never past the capacity, except a request alone.
            assert!(g.load_us() <= 10 || g.in_flight() == 1);
        }
        match want {
            None => assert_eq!(admitted_at, None, "plain sjf starves it"),
            Some(range) => assert!(admitted_at.is_some_and(|t| range.contains(&t)), "bound {bound:?}: {admitted_at:?}"),
        }
    }
}

/// [`exact_service`] checking, besides the load, that the overdue stream's time (the
/// processor-sharing share of the requests admitted as overdue while in flight, integrated
/// here from the gate's counts between events) is at most `overdue_share` of the busy time
/// plus one request's service, both decayed as the gate decays them; and (sjf) that the
/// oldest request, overdue while the overdue stream is within its share, is admitted by
/// the time the requests in flight then have finished, if the stream stays within its
/// share until then (its own requests in flight can take it past).
fn overdue_exact_service(cfg: GateConfig, arrivals: &[(u64, u64)]) -> Result<(), TestCaseError> {
    let share = cfg.overdue_share;
    let (sjf, max_wait) = (cfg.policy == AdmissionPolicy::Sjf, cfg.max_wait_us.unwrap_or(u64::MAX));
    let max_cost = arrivals.iter().map(|a| a.1).max().unwrap_or(0) as f64;
    // (last event, overdue in flight and in flight then, overdue time, busy time)
    let stream = std::cell::Cell::new((0u64, 0usize, 0usize, 0.0f64, 0.0f64));
    let share_holds = |now: u64, g: &Gate| {
        let (at, overdue_n, n, overdue, busy) = stream.get();
        let decay = 0.5f64.powf(now.saturating_sub(at) as f64 / OVERDUE_HALF_LIFE_US as f64);
        let gained = (1.0 - decay) * OVERDUE_HALF_LIFE_US as f64 / std::f64::consts::LN_2;
        let (overdue, busy) = match n {
            0 => (overdue * decay, busy * decay),
            _ => (overdue * decay + gained * overdue_n as f64 / n as f64, busy * decay + gained),
        };
        stream.set((now, g.overdue_in_flight(), g.in_flight(), overdue, busy));
        if share < 1.0 {
            let (gate_overdue, gate_busy) = g.overdue_time_us();
            prop_assert!(
                (gate_overdue - overdue).abs() <= 1e-6 * busy.max(1.0),
                "gate counts {} against {}",
                gate_overdue,
                overdue
            );
            prop_assert!((gate_busy - busy).abs() <= 1e-6 * busy.max(1.0), "gate busy {} against {}", gate_busy, busy);
        }
        prop_assert!(
            overdue <= share * busy + max_cost + 1e-6 * busy,
            "overdue time {} of {} at {}",
            overdue,
            busy,
            now
        );
        Ok(())
    };
    let room = |g: &Gate| {
        let (overdue, busy) = g.overdue_time_us();
        share >= 1.0 || overdue <= share * busy
    };
    let due = |now: u64, arrival: u64, _cost: u64, g: &Gate| sjf && now.saturating_sub(arrival) >= max_wait && room(g);
    exact_service(Gate::new(cfg).unwrap(), arrivals, share_holds, due, room)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// The overdue share, under sjf with a wait bound and under sjf-aging, with costs
    /// spanning three orders of magnitude and with or without an in-flight cap.
    #[test]
    fn overdue_share_holds_and_the_oldest_overdue_request_gets_in(
        aging in any::<bool>(),
        overdue_share in prop_oneof![Just(1.0), 0.05f64..1.0],
        capacity_us in 1u64..3_000,
        max_in_flight in proptest::option::of(1usize..6),
        max_wait_us in 1u64..2_000,
        arrivals in proptest::collection::vec((0u64..200, prop_oneof![1u64..10, 10u64..300, 300u64..4_000]), 0..150),
    ) {
        let policy = if aging { AdmissionPolicy::SjfAging { factor: 2.0 } } else { AdmissionPolicy::Sjf };
        let cfg = GateConfig {
            max_in_flight,
            max_wait_us: Some(max_wait_us),
            overdue_share,
            ..GateConfig::new(capacity_us, policy)
        };
        overdue_exact_service(cfg, &arrivals)?;
    }
}
