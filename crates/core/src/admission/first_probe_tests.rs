//! A type's first sample ("First sample" in the module docs): scripts of timed events with
//! the admissions expected. The property over random scripts (at most one probe of an
//! unsampled type in flight, every ticket released once) is in `controller_tests`.

use super::*;

fn cfg(capacity_us: u64, policy: &str) -> ControllerConfig {
    let mut c = ControllerConfig::new(GateConfig::new(capacity_us, policy.parse().unwrap()));
    c.estimator.cold_cost_us = 10_000;
    c.patience = PatienceRule::Off;
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

/// The admissions among `decisions`, by id (to finish them later).
fn grants(decisions: Vec<Decision>) -> Vec<Grant> {
    decisions
        .into_iter()
        .filter_map(|d| match d {
            Decision::Admit(g) => Some(g),
            Decision::Refuse { .. } => None,
        })
        .collect()
}

fn grant(a: Arrived) -> Grant {
    match a.outcome {
        Arrival::Admitted(g) => g,
        other => panic!("expected an admission, got {other:?}"),
    }
}

fn queued(a: Arrived) -> RequestId {
    match a.outcome {
        Arrival::Queued(id) => id,
        other => panic!("expected to wait, got {other:?}"),
    }
}

const CHEAP: usize = 0;
const COSTLY: usize = 1;

/// The database tier's cold start: the costly type is measured (30 ms) and its backlog
/// keeps the gate full (capacity 46 ms); the first cheap request, charged as the costliest
/// type since its own is unknown, used to sort behind that backlog for as long as it lasted
/// (its charge never moved: only a sample of its type re-prices it). As its type's first
/// probe it is first in line and goes in at the first release that leaves room for its
/// charge; its sample then re-prices the next cheap ones.
#[test]
fn an_unsampled_type_is_probed_ahead_of_a_costlier_backlog() {
    let mut c = Controller::new(cfg(46_000, "sjf"), 2, 0).unwrap();
    let g = grant(c.arrive(0, COSTLY).unwrap());
    assert!(g.probe, "the first request of a type is its probe");
    assert!(c.finish(30_000, g.ticket, Some(30_000)).unwrap().is_empty());
    let e1 = grant(c.arrive(30_000, COSTLY).unwrap());
    assert!(!e1.probe);
    let e2 = queued(c.arrive(30_001, COSTLY).unwrap());
    let _e3 = queued(c.arrive(30_002, COSTLY).unwrap());
    let cheap = c.arrive(30_010, CHEAP).unwrap();
    assert!(cheap.probe);
    let c0 = queued(cheap);
    assert_eq!(c.first_probe(CHEAP), Some(c0));
    assert_eq!(c.gate().head_cost_us(), Some(30_000), "charged as the costliest type");
    // The costly one in flight ends a little cheaper (29.5 ms mean): its waiting requests
    // are re-priced below the cheap one's 30 ms, yet the probe goes first.
    let d = c.finish(60_000, e1.ticket, Some(29_000)).unwrap();
    assert_eq!(admitted(&d), vec![c0.0]);
    let probe = grants(d).pop().unwrap();
    assert!(probe.probe);
    // One probe of a type at a time: the next cheap request waits at the pessimistic charge.
    let next = c.arrive(60_100, CHEAP).unwrap();
    assert!(!next.probe);
    let c1 = queued(next);
    // The probe measures 1 ms: the waiting cheap request is re-priced and admitted beside
    // it; the release lets the costly head in.
    let d = c.finish(61_000, probe.ticket, Some(1_000)).unwrap();
    assert_eq!(admitted(&d), vec![c1.0, e2.0]);
    assert_eq!(c.first_probe(CHEAP), None);
    assert_eq!(c.estimator().estimate_us(CHEAP).unwrap(), 1_000);
    assert!(!c.arrive(61_001, CHEAP).unwrap().probe, "a sampled type is not probed again");
}

/// At most one probe of an unsampled type at a time; the type's other requests are
/// ordinary (charged pessimistically, admitted only as they fit). A probe that yields no
/// sample (it failed) hands the probe on to the type's oldest waiting request, without a
/// new arrival: a type whose clients are all waiting is still measured.
#[test]
fn a_failed_probe_hands_the_probe_on_to_the_oldest_waiting_request() {
    let mut c = Controller::new(cfg(20_000, "sjf"), 2, 0).unwrap();
    let a = grant(c.arrive(0, CHEAP).unwrap());
    assert!(a.probe);
    let b = grant(c.arrive(1, CHEAP).unwrap());
    assert!(!b.probe, "10 + 10 ms fit: admitted as an ordinary request");
    let w1 = queued(c.arrive(2, CHEAP).unwrap());
    let w2 = queued(c.arrive(3, CHEAP).unwrap());
    assert_eq!(c.first_probe(CHEAP), Some(a.ticket.id()));
    let d = c.finish(100, a.ticket, None).unwrap();
    assert_eq!(admitted(&d), vec![w1.0]);
    let g1 = grants(d).pop().unwrap();
    assert!(g1.probe, "the oldest waiting request measures the type next");
    assert_eq!(c.first_probe(CHEAP), Some(w1));
    // The ordinary one fails too: it was not the probe, nothing is handed on; its room
    // goes to the next one, an ordinary request.
    let d = c.finish(200, b.ticket, None).unwrap();
    assert_eq!(admitted(&d), vec![w2.0]);
    assert!(!grants(d)[0].probe);
    assert_eq!(c.first_probe(CHEAP), Some(w1));
    assert!(c.finish(300, g1.ticket, Some(2_000)).unwrap().is_empty());
    assert_eq!(c.first_probe(CHEAP), None);
}

/// A waiting probe that leaves without being admitted (cancelled, its client gone, its
/// wait expired) hands the probe on too.
#[test]
fn a_waiting_probe_that_leaves_hands_the_probe_on() {
    let mut gc = GateConfig::new(10_000, AdmissionPolicy::Sjf);
    gc.max_queue_wait_us = Some(1_000);
    let mut c = Controller::new(ControllerConfig { gate: gc, ..cfg(10_000, "sjf") }, 2, 0).unwrap();
    let busy = grant(c.arrive(0, COSTLY).unwrap()); // fills the capacity
    let p = queued(c.arrive(10, CHEAP).unwrap());
    let q = queued(c.arrive(600, CHEAP).unwrap());
    let r = queued(c.arrive(700, CHEAP).unwrap());
    assert!(c.cancel(20, p).is_empty());
    assert_eq!(c.first_probe(CHEAP), Some(q));
    // q waited the limit: refused, and r measures the type.
    let d = c.poll(1_600);
    assert_eq!(d, vec![Decision::Refuse { id: q, type_index: CHEAP, reason: Refusal::Expired }]);
    assert_eq!(c.first_probe(CHEAP), Some(r));
    assert!(c.client_gone(1_650, r).is_empty());
    assert_eq!(c.first_probe(CHEAP), None, "nothing of the type waits");
    assert!(c.arrive(1_660, CHEAP).unwrap().probe, "the next arrival is the probe");
    assert_eq!(c.gate().load_us(), 10_000);
    let d = c.finish(2_000, busy.ticket, Some(2_000)).unwrap();
    assert_eq!(grants(d).iter().map(|g| g.probe).collect::<Vec<_>>(), vec![true]);
}

/// The bound: probes are charged and admitted like any request (capacity, `max_in_flight`);
/// under sjf they only go first. A flood of new types is admitted probe by probe, in
/// arrival order, as room frees, and never past the in-flight cap; the known type's cheaper
/// request waits until no probe does.
#[test]
fn probes_of_many_new_types_go_first_one_room_at_a_time() {
    let mut gc = GateConfig::new(20_000, AdmissionPolicy::Sjf);
    gc.max_in_flight = Some(2);
    let mut c = Controller::new(ControllerConfig { gate: gc, ..cfg(20_000, "sjf") }, 4, 0).unwrap();
    let a = grant(c.arrive(0, 0).unwrap());
    let b = grant(c.arrive(1, 0).unwrap());
    let known = queued(c.arrive(2, 0).unwrap());
    let p1 = queued(c.arrive(3, 1).unwrap());
    let p2 = queued(c.arrive(4, 2).unwrap());
    let p3 = queued(c.arrive(5, 3).unwrap());
    // Type 0 learns 1 ms: its waiting request is cheaper than any probe, yet waits.
    let d = c.finish(1_000, a.ticket, Some(1_000)).unwrap();
    assert_eq!(admitted(&d), vec![p1.0]);
    let g1 = grants(d).pop().unwrap();
    let d = c.finish(2_000, b.ticket, None).unwrap();
    assert_eq!(admitted(&d), vec![p2.0]);
    assert_eq!(c.gate().in_flight(), 2, "never past max_in_flight");
    let g2 = grants(d).pop().unwrap();
    let d = c.finish(3_000, g1.ticket, Some(3_000)).unwrap();
    assert_eq!(admitted(&d), vec![p3.0]);
    let d = c.finish(4_000, g2.ticket, Some(4_000)).unwrap();
    assert_eq!(admitted(&d), vec![known.0]);
}

/// Probes go first only under sjf: fifo and sjf-aging admit every waiting request in
/// bounded time, so an unsampled type is measured in its turn.
#[test]
fn under_fifo_a_probe_waits_its_turn() {
    let mut c = Controller::new(cfg(20_000, "fifo"), 2, 0).unwrap();
    let a = grant(c.arrive(0, COSTLY).unwrap());
    let b = grant(c.arrive(1, COSTLY).unwrap());
    let older = queued(c.arrive(2, COSTLY).unwrap());
    let probe = c.arrive(3, CHEAP).unwrap();
    assert!(probe.probe);
    let probe = queued(probe);
    let d = c.finish(10_000, a.ticket, Some(10_000)).unwrap();
    assert_eq!(admitted(&d), vec![older.0]);
    let d = c.finish(10_001, b.ticket, Some(10_000)).unwrap();
    assert_eq!(admitted(&d), vec![probe.0]);
}

/// A reload into sjf puts the waiting probes first in line again (the gate keeps probes
/// only under sjf).
#[test]
fn a_reload_into_sjf_puts_waiting_probes_first_again() {
    let mut c = Controller::new(cfg(20_000, "fifo"), 2, 0).unwrap();
    let a = grant(c.arrive(0, COSTLY).unwrap());
    let b = grant(c.arrive(1, COSTLY).unwrap());
    let older = queued(c.arrive(2, COSTLY).unwrap());
    let probe = queued(c.arrive(3, CHEAP).unwrap());
    assert!(c.set_policy(4, AdmissionPolicy::Sjf).is_empty());
    let d = c.finish(10_000, a.ticket, Some(10_000)).unwrap();
    assert_eq!(admitted(&d), vec![probe.0]);
    let d = c.finish(10_001, b.ticket, Some(10_000)).unwrap();
    assert_eq!(admitted(&d), vec![older.0]);
}
