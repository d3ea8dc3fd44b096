//! The controller as its drivers see it: scripts of timed events with the decisions
//! expected, and properties over random scripts under every policy.

use super::*;
use proptest::prelude::*;

fn cfg(capacity_us: u64, policy: &str) -> ControllerConfig {
    let mut c = ControllerConfig::new(GateConfig::new(capacity_us, policy.parse().unwrap()));
    c.estimator.cold_cost_us = 10_000;
    c
}

fn admitted(decisions: &[Decision]) -> Vec<u64> {
    decisions
        .iter()
        .filter_map(|d| match d {
            Decision::Admit(g) => Some(g.ticket.id().0),
            Decision::Refuse { .. } => None,
        })
        .collect()
}

fn grant(a: Arrival) -> Grant {
    match a {
        Arrival::Admitted(g) => g,
        other => panic!("expected an admission, got {other:?}"),
    }
}

fn queued(a: Arrival) -> RequestId {
    match a {
        Arrival::Queued(id) => id,
        other => panic!("expected to wait, got {other:?}"),
    }
}

#[test]
fn a_script_admits_what_fits_and_then_the_waiters_in_order() {
    // Capacity for two cold requests (10 ms each).
    let mut c = Controller::new(cfg(20_000, "fifo"), 2, 0).unwrap();
    let g0 = grant(c.arrive(0, 0).unwrap().outcome);
    let g1 = grant(c.arrive(10, 1).unwrap().outcome);
    assert_eq!(c.oldest_waiting_arrival_us(), None);
    let w2 = queued(c.arrive(20, 0).unwrap().outcome);
    let w3 = queued(c.arrive(30, 1).unwrap().outcome);
    assert_eq!(c.queued_by_type(), vec![1, 1]);
    assert_eq!(c.oldest_waiting_arrival_us(), Some(20));
    // The first finishes after 5 ms: type 0 learns 5 ms; the oldest waiter is admitted.
    let d = c.finish(5_000, g0.ticket, Some(5_000)).unwrap();
    assert_eq!(admitted(&d), vec![w2.0]);
    assert_eq!(c.oldest_waiting_arrival_us(), Some(30), "the oldest of another type now");
    assert_eq!(c.estimator().estimate_us(0).unwrap(), 5_000);
    // The second fails: no sample; the next waiter goes in.
    let d = c.finish(6_000, g1.ticket, None).unwrap();
    assert_eq!(admitted(&d), vec![w3.0]);
    assert_eq!(c.estimator().samples(1).unwrap(), 0);
    assert_eq!(c.gate().queue_len(), 0);
    assert_eq!(c.oldest_waiting_arrival_us(), None);
}

#[test]
fn a_waiting_request_whose_client_leaves_is_never_admitted() {
    let mut c = Controller::new(cfg(10_000, "fifo"), 1, 0).unwrap();
    let g0 = grant(c.arrive(0, 0).unwrap().outcome);
    let w1 = queued(c.arrive(1, 0).unwrap().outcome);
    let w2 = queued(c.arrive(2, 0).unwrap().outcome);
    assert!(c.client_gone(3, w1).is_empty());
    assert!(!c.is_waiting(w1));
    let d = c.finish(4, g0.ticket, Some(4)).unwrap();
    assert_eq!(admitted(&d), vec![w2.0]);
    assert_eq!(c.give_ups(), 1);
}

#[test]
fn a_cancelled_waiting_request_leaves_the_queue_and_is_no_give_up() {
    let mut c = Controller::new(cfg(10_000, "fifo"), 1, 0).unwrap();
    let g0 = grant(c.arrive(0, 0).unwrap().outcome);
    let w1 = queued(c.arrive(1, 0).unwrap().outcome);
    let w2 = queued(c.arrive(2, 0).unwrap().outcome);
    assert!(c.cancel(3, w1).is_empty());
    assert!(!c.is_waiting(w1));
    assert_eq!(c.queued_by_type(), vec![1]);
    // A running request is not the controller's to cancel; an unknown one is ignored.
    assert!(c.cancel(4, g0.ticket.id()).is_empty());
    assert!(c.cancel(5, w1).is_empty());
    assert_eq!(c.gate().in_flight(), 1);
    let d = c.finish(6, g0.ticket, Some(6)).unwrap();
    assert_eq!(admitted(&d), vec![w2.0]);
    assert_eq!(c.give_ups(), 0, "a cancel teaches the patience nothing");
}

#[test]
fn max_queue_wait_refuses_at_the_poll() {
    let mut gc = GateConfig::new(10_000, AdmissionPolicy::Fifo);
    gc.max_queue_wait_us = Some(1_000);
    let mut c = Controller::new(ControllerConfig { gate: gc, ..cfg(10_000, "fifo") }, 1, 0).unwrap();
    let _g0 = grant(c.arrive(0, 0).unwrap().outcome);
    let w1 = queued(c.arrive(100, 0).unwrap().outcome);
    assert_eq!(c.next_wakeup_us(), Some(1_100));
    let d = c.poll(1_100);
    assert_eq!(d, vec![Decision::Refuse { id: w1, type_index: 0, reason: Refusal::Expired }]);
}

/// Clients that give up after `patience_us`, a type that costs `cost_us`: a controller that
/// has seen them give up refuses what cannot finish in time and admits what can.
#[test]
fn learned_patience_refuses_what_would_finish_too_late() {
    let mut c = Controller::new(cfg(10_000, "fifo"), 1, 0).unwrap();
    let patience_us = 1_000_000;
    // Teach the cost (10 ms) and the patience (1 s): a long queue whose clients leave.
    let mut g = grant(c.arrive(0, 0).unwrap().outcome);
    let ids: Vec<RequestId> =
        (0..super::patience::MIN_GIVE_UPS).map(|_| queued(c.arrive(0, 0).unwrap().outcome)).collect();
    for id in ids {
        c.client_gone(patience_us, id);
    }
    assert_eq!(c.patience_us(0), Some(patience_us));
    let mut t = 0;
    t += patience_us + 20;
    let d = c.finish(t, g.ticket, Some(10_000)).unwrap();
    assert!(d.is_empty());
    g = grant(c.arrive(t, 0).unwrap().outcome);
    // One arrives now; it can still finish in time if admitted within patience - 10 ms.
    let late = queued(c.arrive(t, 0).unwrap().outcome);
    let watch = c.next_wakeup_us().expect("the waiting request is watched");
    let budget_us = (patience_us as f64 * super::patience::BUDGET_FRACTION) as u64;
    assert_eq!(watch, t + budget_us - 10_000 + 1);
    // The backend is stuck on `g` past that moment: the waiter is refused at once.
    let d = c.poll(watch);
    assert_eq!(d, vec![Decision::Refuse { id: late, type_index: 0, reason: Refusal::WouldNotFinish }]);
    // One that arrives now and is admitted soon is served.
    let ok = queued(c.arrive(watch, 0).unwrap().outcome);
    let d = c.finish(watch + 100, g.ticket, Some(10_000)).unwrap();
    assert_eq!(admitted(&d), vec![ok.0]);
}

#[test]
fn with_patience_off_nothing_is_refused_for_it() {
    let mut conf = cfg(10_000, "fifo");
    conf.patience = PatienceRule::Off;
    let mut c = Controller::new(conf, 1, 0).unwrap();
    let g = grant(c.arrive(0, 0).unwrap().outcome);
    let mut ids = Vec::new();
    for i in 0..20 {
        ids.push(queued(c.arrive(i, 0).unwrap().outcome));
    }
    for id in ids.drain(..10) {
        c.client_gone(100, id);
    }
    assert_eq!(c.patience_us(0), None);
    let d = c.finish(10_000_000, g.ticket, Some(10_000)).unwrap();
    assert_eq!(admitted(&d), vec![ids[0].0]);
}

#[test]
fn shut_down_refuses_every_waiter_and_later_arrivals() {
    let mut c = Controller::new(cfg(10_000, "sjf"), 2, 0).unwrap();
    let g = grant(c.arrive(0, 0).unwrap().outcome);
    let a = queued(c.arrive(1, 1).unwrap().outcome);
    let b = queued(c.arrive(2, 0).unwrap().outcome);
    let d = c.shut_down(3);
    assert_eq!(
        d,
        vec![
            Decision::Refuse { id: a, type_index: 1, reason: Refusal::ShuttingDown },
            Decision::Refuse { id: b, type_index: 0, reason: Refusal::ShuttingDown },
        ]
    );
    assert_eq!(c.arrive(4, 0).unwrap().outcome, Arrival::Refused(Refusal::ShuttingDown));
    assert!(c.finish(5, g.ticket, Some(5)).unwrap().is_empty());
    assert_eq!(c.gate().load_us(), 0);
}

/// Shutting down takes the waiting requests out oldest first; under fifo the head that did
/// not fit leaving lets the next one in, which is admitted, not refused twice or lost.
#[test]
fn shut_down_survives_a_cancel_that_admits() {
    let mut c = Controller::new(cfg(20_000, "fifo"), 2, 0).unwrap();
    // Teach type 0 a cost of 15 ms and type 1 of 2 ms.
    let g = grant(c.arrive(0, 0).unwrap().outcome);
    c.finish(15_000, g.ticket, Some(15_000)).unwrap();
    let g = grant(c.arrive(15_000, 1).unwrap().outcome);
    c.finish(17_000, g.ticket, Some(2_000)).unwrap();
    let _running = grant(c.arrive(20_000, 0).unwrap().outcome);
    let b = queued(c.arrive(20_001, 0).unwrap().outcome); // 15 + 15 > 20: waits
    let small = queued(c.arrive(20_002, 1).unwrap().outcome); // fits, but behind b
    let d = c.shut_down(20_003);
    assert_eq!(d.len(), 2, "{d:?}");
    assert_eq!(d[0], Decision::Refuse { id: b, type_index: 0, reason: Refusal::ShuttingDown });
    assert!(matches!(&d[1], Decision::Admit(g) if g.ticket.id() == small), "{d:?}");
    assert_eq!(c.gate().queue_len(), 0);
}

/// One event of a random script.
#[derive(Debug, Clone)]
enum Ev {
    Arrive {
        ty: usize,
    },
    /// Finish the admitted request at this index (mod their number), measured or failed.
    Finish {
        pick: usize,
        measured_us: Option<u64>,
    },
    /// The client of the request at this index among all live ones leaves.
    Gone {
        pick: usize,
    },
    Poll,
}

fn ev() -> impl Strategy<Value = (u64, Ev)> {
    let e = prop_oneof![
        4 => (0usize..4).prop_map(|ty| Ev::Arrive { ty }),
        3 => (any::<usize>(), prop::option::weighted(0.8, 1u64..50_000)).prop_map(|(pick, measured_us)| Ev::Finish { pick, measured_us }),
        1 => any::<usize>().prop_map(|pick| Ev::Gone { pick }),
        1 => Just(Ev::Poll),
    ];
    (0u64..5_000, e)
}

fn policies() -> impl Strategy<Value = &'static str> {
    prop_oneof![Just("fifo"), Just("sjf"), Just("sjf-aging:2"), Just("sjf-aging:0")]
}

/// What a driver must be able to rely on, checked after every event.
struct Watch {
    arrivals: Vec<(RequestId, usize)>,
    /// Per type, the ids admitted so far, in admission order.
    admitted_by_type: Vec<Vec<RequestId>>,
    gone: std::collections::HashSet<RequestId>,
    running: Vec<Grant>,
    decided: std::collections::HashSet<RequestId>,
}

impl Watch {
    fn apply(&mut self, d: Vec<Decision>) -> Result<(), TestCaseError> {
        for d in d {
            let id = match &d {
                Decision::Admit(g) => g.ticket.id(),
                Decision::Refuse { id, .. } => *id,
            };
            prop_assert!(self.decided.insert(id), "{id} decided twice");
            prop_assert!(!self.gone.contains(&id), "{id} decided after its client left");
            if let Decision::Admit(g) = d {
                self.admitted_by_type[g.type_index].push(g.ticket.id());
                self.running.push(g);
            }
        }
        Ok(())
    }
}

fn run_script(
    policy: &str,
    charge_at: ChargeAt,
    patience: PatienceRule,
    script: Vec<(u64, Ev)>,
) -> Result<(), TestCaseError> {
    run_script_capped(policy, charge_at, patience, None, script)
}

/// After each event, "First sample" (module docs): a type with no sample has at most one
/// probe in flight, and while any of its requests waits it has a probe, waiting or in
/// flight (no type is left unmeasured for want of a new arrival).
fn check_first_probes(c: &Controller, w: &Watch) -> Result<(), TestCaseError> {
    let queued = c.queued_by_type();
    for (t, &waiting) in queued.iter().enumerate() {
        if c.estimator().samples(t).unwrap() > 0 {
            continue;
        }
        let probes = w.running.iter().filter(|g| g.type_index == t && g.probe).count();
        prop_assert!(probes <= 1, "type {t}: {probes} probes in flight without a sample");
        if waiting > 0 && !c.is_shutting_down() {
            let p = c.first_probe(t);
            let live = p.is_some_and(|p| c.is_waiting(p) || w.running.iter().any(|g| g.ticket.id() == p));
            prop_assert!(live, "type {t}: {waiting} waiting, no probe ({p:?})");
        }
    }
    Ok(())
}

fn run_script_capped(
    policy: &str,
    charge_at: ChargeAt,
    patience: PatienceRule,
    max_in_flight: Option<usize>,
    script: Vec<(u64, Ev)>,
) -> Result<(), TestCaseError> {
    let mut conf = cfg(30_000, policy);
    conf.patience = patience;
    conf.charge_at = charge_at;
    conf.gate.max_queue_len = 64;
    conf.gate.max_in_flight = max_in_flight;
    let mut c = Controller::new(conf, 4, 0).unwrap();
    let mut w = Watch {
        arrivals: Vec::new(),
        admitted_by_type: vec![Vec::new(); 4],
        gone: Default::default(),
        running: Vec::new(),
        decided: Default::default(),
    };
    let mut now = 0;
    for (dt, e) in script {
        now += dt;
        match e {
            Ev::Arrive { ty } => {
                let a = c.arrive(now, ty).unwrap();
                w.apply(a.others)?;
                match a.outcome {
                    Arrival::Admitted(g) => {
                        w.arrivals.push((g.ticket.id(), ty));
                        w.apply(vec![Decision::Admit(g)])?;
                    }
                    Arrival::Queued(id) => w.arrivals.push((id, ty)),
                    Arrival::Refused(_) => {}
                }
            }
            Ev::Finish { pick, measured_us } if !w.running.is_empty() => {
                let g = w.running.swap_remove(pick % w.running.len());
                w.apply(c.finish(now, g.ticket, measured_us).unwrap())?;
            }
            Ev::Gone { pick } if !w.arrivals.is_empty() => {
                let (id, _) = w.arrivals[pick % w.arrivals.len()];
                if c.is_waiting(id) {
                    w.gone.insert(id);
                }
                w.apply(c.client_gone(now, id))?;
            }
            Ev::Poll => w.apply(c.poll(now))?,
            _ => {}
        }
        // Admitted charge within capacity, unless one request runs alone, or a recharge at
        // admission raised a charge (it revokes nothing: `Gate::recharge`).
        let g = c.gate();
        if charge_at == ChargeAt::Arrival {
            prop_assert!(g.load_us() <= g.capacity_us() || g.in_flight() == 1, "load {} > capacity", g.load_us());
        }
        prop_assert!(max_in_flight.is_none_or(|m| g.in_flight() <= m), "{} in flight", g.in_flight());
        prop_assert_eq!(g.in_flight(), w.running.len());
        check_first_probes(&c, &w)?;
    }
    // Within a type, admissions in arrival order.
    for (ty, ids) in w.admitted_by_type.iter().enumerate() {
        prop_assert!(ids.windows(2).all(|p| p[0] < p[1]), "type {ty} admitted out of order: {ids:?}");
    }
    // Every ticket handed back: the load returns to 0.
    // (Finishing may admit more: drain until nothing runs.)
    while let Some(g) = w.running.pop() {
        let d = c.finish(now, g.ticket, None).unwrap();
        w.apply(d)?;
    }
    let d = c.shut_down(now);
    w.apply(d)?;
    prop_assert_eq!(c.gate().load_us(), 0);
    prop_assert_eq!(c.gate().in_flight(), 0);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn every_policy_keeps_a_type_in_order_within_capacity_and_never_serves_the_gone(
        policy in policies(),
        script in prop::collection::vec(ev(), 1..200),
    ) {
        run_script(policy, ChargeAt::Arrival, PatienceRule::Off, script.clone())?;
        run_script(policy, ChargeAt::Admission, PatienceRule::Off, script)?;
    }

    #[test]
    fn the_patience_rule_keeps_the_same_promises(
        policy in policies(),
        patience_us in 1_000u64..200_000,
        script in prop::collection::vec(ev(), 1..200),
    ) {
        run_script(policy, ChargeAt::Arrival, PatienceRule::Fixed { patience_us }, script.clone())?;
        run_script(policy, ChargeAt::Admission, PatienceRule::Learn, script)?;
    }

    /// Probes of unsampled types under an in-flight cap: the cap holds, at most one probe
    /// per unsampled type is in flight, and every ticket is released once.
    #[test]
    fn first_probes_stay_bounded_under_an_in_flight_cap(
        policy in policies(),
        max_in_flight in 1usize..4,
        script in prop::collection::vec(ev(), 1..200),
    ) {
        run_script_capped(policy, ChargeAt::Admission, PatienceRule::Learn, Some(max_in_flight), script.clone())?;
        run_script_capped(policy, ChargeAt::Arrival, PatienceRule::Off, Some(max_in_flight), script)?;
    }
}

/// The processor-time basis: a type learns the backend's CPU time, not the time it also
/// waited on the CPUs beside other requests, and the capacity counts processor time. A
/// finish without that measurement samples the wall time; processor time is at most the
/// wall time.
#[test]
fn the_cpu_basis_learns_processor_time() {
    let mut cf = cfg(20_000, "fifo");
    cf.estimator.basis = Basis::Cpu;
    cf.estimator.alpha = 1.0;
    let mut c = Controller::new(cf, 1, 0).unwrap();
    let g = grant(c.arrive(0, 0).unwrap().outcome);
    c.finish_with_cpu(8_000, g.ticket, Some(8_000), Some(2_000)).unwrap();
    assert_eq!(c.estimator().estimate_us(0).unwrap(), 2_000);
    let grants: Vec<Grant> = (0..10).map(|i| grant(c.arrive(10_000 + i, 0).unwrap().outcome)).collect();
    let w = queued(c.arrive(10_100, 0).unwrap().outcome);
    let mut grants = grants.into_iter();
    let d = c.finish_with_cpu(20_000, grants.next().unwrap().ticket, Some(10_000), None).unwrap();
    assert_eq!(c.estimator().estimate_us(0).unwrap(), 10_000, "not measured: the wall time");
    assert!(admitted(&d).is_empty(), "the waiter, re-priced at 10 ms, does not fit beside nine of 2 ms");
    let d = c.finish_with_cpu(20_500, grants.next().unwrap().ticket, Some(500), Some(400)).unwrap();
    assert_eq!(admitted(&d), vec![w.0], "re-priced at 400 µs, it fits");
    c.finish_with_cpu(21_000, grants.next().unwrap().ticket, Some(1_000), Some(5_000)).unwrap();
    assert_eq!(c.estimator().estimate_us(0).unwrap(), 1_000, "at most the wall time");
}

/// Under the processor-time basis auto capacity reads wall-time inflation: requests whose
/// CPU time holds still while their wall time triples are a backend past its knee.
#[test]
fn auto_capacity_under_the_cpu_basis_reads_wall_time_inflation() {
    let mut cf = cfg(1_000_000, "fifo");
    cf.estimator.basis = Basis::Cpu;
    cf.estimator.alpha = 1.0;
    cf.auto = Some(crate::admission::auto::AutoConfig {
        initial_capacity_us: 1_000_000,
        min_samples: 4,
        ..Default::default()
    });
    let mut c = Controller::new(cf, 1, 0).unwrap();
    let g = grant(c.arrive(0, 0).unwrap().outcome);
    c.finish_with_cpu(1_000, g.ticket, Some(1_000), Some(100)).unwrap();
    for i in 0..8u64 {
        let t = 2_000 + i * 10_000;
        let g = grant(c.arrive(t, 0).unwrap().outcome);
        c.finish_with_cpu(t + 3_000, g.ticket, Some(3_000), Some(100)).unwrap();
    }
    assert_eq!(c.estimator().estimate_us(0).unwrap(), 100, "charged processor time");
    c.poll(1_000_001);
    let inflation = c.auto().and_then(|a| a.last_inflation()).unwrap();
    assert!(inflation > 2.5, "wall-time inflation {inflation}");
    assert!(c.auto().unwrap().capacity_us() < 1_000_000, "the capacity came down");
}
