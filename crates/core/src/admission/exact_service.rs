//! A test driver shared by the property tests of the gate's wait bounds: every admitted
//! request finishes exactly its charge after admission, arrivals `(gap, cost)` in order.

use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

use super::*;

/// Drives `g` through `arrivals` and checks after every event instant: the load holds the
/// gate's capacity unless one request runs alone; `check(now, gate)` holds; and once the
/// oldest waiting request is `due(now, arrival, cost, gate)`, it is admitted by the time
/// every request in flight then has finished ("then" is an event instant, no later than the
/// moment it became due, so the check is if anything stricter), unless `keep(gate)` turns
/// false at an event meanwhile (the request is then watched afresh once due again). Ends
/// with nothing waiting or running.
pub(super) fn exact_service(
    mut g: Gate,
    arrivals: &[(u64, u64)],
    mut check: impl FnMut(u64, &Gate) -> Result<(), TestCaseError>,
    due: impl Fn(u64, u64, u64, &Gate) -> bool,
    keep: impl Fn(&Gate) -> bool,
) -> Result<(), TestCaseError> {
    let capacity_us = g.capacity_us();
    // (finish, id) of the admitted requests.
    let mut running: BTreeMap<(u64, u64), Ticket> = BTreeMap::new();
    let mut waiting: BTreeMap<u64, (u64, u64)> = BTreeMap::new(); // id → (arrival, cost)
    let mut watched: Option<(u64, u64)> = None; // (oldest due id, its bound)
    let mut next = arrivals.iter().scan(0u64, |t, &(gap, cost)| {
        *t += gap;
        Some((*t, cost))
    });
    let mut pending = next.next();
    loop {
        let t =
            [pending.map(|p| p.0), running.keys().next().map(|k| k.0), g.next_wakeup_us()].into_iter().flatten().min();
        let Some(now) = t else { break };
        let mut admitted = Vec::new();
        while let Some((&(finish, id), _)) = running.first_key_value() {
            if finish > now {
                break;
            }
            let ticket = running.remove(&(finish, id)).unwrap();
            admitted.extend(g.release(now, ticket).unwrap());
        }
        while let Some((at, cost)) = pending.filter(|p| p.0 <= now) {
            let (id, adm) = g.arrive(at, cost).unwrap();
            waiting.insert(id.0, (at, cost));
            admitted.extend(adm);
            pending = next.next();
        }
        admitted.extend(g.poll(now));
        for a in admitted {
            waiting.remove(&a.ticket.id().0);
            running.insert((now + a.ticket.charge_us(), a.ticket.id().0), a.ticket);
        }
        prop_assert!(running.len() <= 1 || g.load_us() <= capacity_us, "load {} at {}", g.load_us(), now);
        check(now, &g)?;
        if !keep(&g) {
            watched = None;
        }
        if let Some((id, bound)) = watched {
            if waiting.contains_key(&id) {
                prop_assert!(now < bound, "request {} still waits at {}, past {}", id, now, bound);
                continue;
            }
            watched = None;
        }
        if let Some((&id, &(arrival, cost))) = waiting.first_key_value() {
            if due(now, arrival, cost, &g) {
                watched = Some((id, running.keys().next_back().map_or(now, |k| k.0)));
            }
        }
    }
    prop_assert!(waiting.is_empty() && running.is_empty());
    Ok(())
}
