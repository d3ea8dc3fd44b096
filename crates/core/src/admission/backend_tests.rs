//! The gate in front of a simulated backend: throughput and waits of the policies, the
//! figures the policies are for, measured on the admission code itself.
//!
//! **Backend.** `cpus` processors shared by the admitted requests (fluid processor sharing:
//! each of `n` running requests progresses at `min(1, cpus / n)` µs of demand per µs), so
//! the backend idles a processor whenever fewer than `cpus` requests are admitted. Its work
//! rate is the demand served per µs over `cpus`, 1 at full use.
//!
//! **Driver.** What the proxy does, through the same [`Controller`]: open arrivals (seeded
//! Poisson) of request types; a completion reports its wall time (admission to completion);
//! the timer fires at [`Controller::next_wakeup_us`]. Requests waiting longer than the
//! gate's `max_queue_wait_us` are refused, as the proxy answers 503. With a client
//! patience, clients leave that long after their arrival: a waiting request is withdrawn
//! ([`Controller::client_gone`]), a running one is finished by the backend for no one.
//!
//! Exact and deterministic: a run is a pure function of its [`Scenario`].

use super::exact_service::exact_service;
use super::*;
use proptest::test_runner::TestCaseError;

/// xorshift64: a seeded stream, enough for arrival times and type draws.
struct Rng(u64);

impl Rng {
    fn unit(&mut self) -> f64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// One request type: demand on one processor (µs) and its share of the arrivals.
#[derive(Debug, Clone, Copy)]
struct Kind {
    demand_us: f64,
    weight: f64,
}

/// The foreign backend's mix the policies were first tried on: 90% lookups of 3 ms, 5%
/// filter scans of 230 ms, 5% aggregates of 630 ms (two orders of magnitude apart).
const MIX: [Kind; 3] = [
    Kind { demand_us: 3_000.0, weight: 90.0 },
    Kind { demand_us: 230_000.0, weight: 5.0 },
    Kind { demand_us: 630_000.0, weight: 5.0 },
];

#[derive(Debug, Clone, Copy)]
struct Scenario {
    policy: &'static str,
    cpus: f64,
    capacity_us: u64,
    /// Offered work over what the processors serve (2: twice the peak).
    load: f64,
    duration_us: f64,
    /// Requests completing before this are not measured.
    warmup_us: f64,
    max_queue_wait_us: u64,
    seed: u64,
    max_in_flight: Option<usize>,
    /// `sjf`'s wait bound and the overdue share ([`GateConfig`]).
    max_wait_us: Option<u64>,
    overdue_share: f64,
    /// Clients give up after this long (`None`: they wait for ever).
    patience_us: Option<f64>,
    /// The controller's patience rule.
    patience: PatienceRule,
}

#[derive(Debug, Default)]
struct Outcome {
    /// Demand served per µs over the processors, in the measured window.
    work_rate: f64,
    /// The part of it that went to requests completed while their client waited.
    useful_work_rate: f64,
    mean_response_us: f64,
    /// Over completed and expired requests (an expired one at the time it waited), as
    /// the lab counts a request the gate answered 503.
    mean_response_all_us: f64,
    /// Per type, over arrivals in the measured window: completed, arrived, summed wait.
    completed: Vec<u64>,
    arrived: Vec<u64>,
    wait_sum_us: Vec<f64>,
    /// Per type: requests completed after their client gave up.
    abandoned: Vec<u64>,
    /// Share of the demand served in the window that went to requests admitted as overdue.
    overdue_work_share: f64,
}

impl Outcome {
    fn completion(&self, ty: usize) -> f64 {
        self.completed[ty] as f64 / self.arrived[ty].max(1) as f64
    }
    fn mean_wait_us(&self, ty: usize) -> f64 {
        self.wait_sum_us[ty] / self.completed[ty].max(1) as f64
    }
}

struct Req {
    ty: usize,
    arrival_us: f64,
    admitted_us: f64,
    remaining_us: f64,
    ticket: Option<Ticket>,
    overdue: bool,
    /// Its client gave up while the backend worked on it: its completion is no one's.
    abandoned: bool,
}

/// The driver: the controller in front of the simulated backend.
struct Model {
    ctl: Controller,
    waiting: HashMap<u64, Req>,
    running: Vec<Req>,
    /// Arrival times of the requests the controller refused while they waited.
    refused_arrivals: Vec<f64>,
    /// `(arrival, id)` of requests whose client may still give up, in arrival order;
    /// entries of requests since finished, refused or given up are skipped when met.
    clients: std::collections::VecDeque<(f64, u64)>,
}

impl Model {
    /// Apply the controller's decisions: admissions start on the backend, refusals leave.
    fn apply(&mut self, now: f64, decisions: Vec<Decision>) {
        for d in decisions {
            match d {
                Decision::Admit(g) => {
                    let mut r = self.waiting.remove(&g.ticket.id().0).expect("admitted request waits");
                    r.admitted_us = now;
                    r.overdue = self.ctl.gate().admitted_overdue(g.ticket.id());
                    r.ticket = Some(g.ticket);
                    self.running.push(r);
                }
                Decision::Refuse { id, .. } => {
                    let r = self.waiting.remove(&id.0).expect("refused request waits");
                    self.refused_arrivals.push(r.arrival_us);
                }
            }
        }
    }

    /// A completion: the controller learns its cost and releases its charge.
    fn finish(&mut self, now: f64, mut r: Req) {
        let ticket = r.ticket.take().expect("running request holds a ticket");
        let wall_us = (now - r.admitted_us).round() as u64;
        let d = self.ctl.finish(now.round() as u64, ticket, Some(wall_us)).expect("ticket is outstanding");
        self.apply(now, d);
    }

    /// The running requests that are done now (ties within a nanosecond of demand).
    fn take_completed(&mut self) -> Vec<Req> {
        let mut done = Vec::new();
        let mut i = 0;
        while i < self.running.len() {
            if self.running[i].remaining_us > 1e-3 {
                i += 1;
                continue;
            }
            done.push(self.running.swap_remove(i));
        }
        done
    }

    /// An arrival of type `ty`.
    /// `impatient`: its client may give up (tracked for [`Model::give_up`]).
    fn arrive(&mut self, now: f64, ty: usize, demand_us: f64, impatient: bool) {
        let a = self.ctl.arrive(now.round() as u64, ty).expect("known type");
        let (arrival, d) = (a.outcome, a.others);
        let req = Req {
            ty,
            arrival_us: now,
            admitted_us: 0.0,
            remaining_us: demand_us,
            ticket: None,
            overdue: false,
            abandoned: false,
        };
        match &arrival {
            Arrival::Admitted(g) if impatient => self.clients.push_back((now, g.ticket.id().0)),
            Arrival::Queued(id) if impatient => self.clients.push_back((now, id.0)),
            _ => {}
        }
        match arrival {
            Arrival::Admitted(g) => {
                self.waiting.insert(g.ticket.id().0, req);
                self.apply(now, vec![Decision::Admit(g)]);
            }
            Arrival::Queued(id) => {
                self.waiting.insert(id.0, req);
            }
            Arrival::Refused(_) => self.refused_arrivals.push(now),
        }
        self.apply(now, d);
    }

    /// Clients whose patience ran out at `now` leave: a waiting request is withdrawn, a
    /// running one is marked (the backend finishes it for no one).
    fn give_up(&mut self, now: f64, patience_us: f64) {
        while let Some(&(arrival_us, id)) = self.clients.front() {
            // The same sum as `next_give_up`'s, so a time it returns is never short of it.
            if arrival_us + patience_us > now {
                break;
            }
            self.clients.pop_front();
            if let Some(r) = self.waiting.remove(&id) {
                self.refused_arrivals.push(r.arrival_us);
                let d = self.ctl.client_gone(now.round() as u64, RequestId(id));
                self.apply(now, d);
            } else if let Some(r) = self.running.iter_mut().find(|r| r.ticket.as_ref().is_some_and(|t| t.id().0 == id))
            {
                r.abandoned = true;
                let d = self.ctl.client_gone(now.round() as u64, RequestId(id));
                debug_assert!(d.is_empty(), "a running request's give-up decides nothing");
            }
        }
    }

    /// The controller's wake-up: expiries, refusals, aging, what now fits.
    fn poll(&mut self, now: f64) {
        let d = self.ctl.poll(now.round() as u64);
        self.apply(now, d);
    }

    /// The earliest moment a client may give up (an entry may be stale: then nothing
    /// happens at that moment but the entry's removal).
    fn next_give_up(&self, patience_us: f64) -> f64 {
        self.clients.front().map_or(f64::INFINITY, |&(a, _)| a + patience_us)
    }
}

/// A request type drawn by weight.
fn pick_type(rng: &mut Rng, kinds: &[Kind], total_weight: f64) -> usize {
    let mut x = rng.unit() * total_weight;
    kinds
        .iter()
        .position(|k| {
            x -= k.weight;
            x < 0.0
        })
        .unwrap_or(kinds.len() - 1)
}

/// Runs a scenario with the mix `kinds` (see the module docs). Bounded: the arrivals of
/// `duration_us` at the offered load, each a fixed number of events.
fn simulate(s: Scenario, kinds: &[Kind]) -> Outcome {
    let mut m = model(&s, kinds.len());
    let total_weight: f64 = kinds.iter().map(|k| k.weight).sum();
    let mean_demand_us: f64 = kinds.iter().map(|k| k.demand_us * k.weight / total_weight).sum();
    let arrivals_per_us = s.load * s.cpus / mean_demand_us;
    let mut rng = Rng(s.seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let mut out = Outcome {
        completed: vec![0; kinds.len()],
        arrived: vec![0; kinds.len()],
        wait_sum_us: vec![0.0; kinds.len()],
        abandoned: vec![0; kinds.len()],
        ..Outcome::default()
    };
    let mut tally = Tally::default();
    let (mut now, mut next_arrival) = (0.0f64, 0.0f64);
    let patience_us = s.patience_us.unwrap_or(f64::INFINITY);
    while now < s.duration_us {
        let n = m.running.len();
        let rate = if n == 0 { 0.0 } else { (s.cpus / n as f64).min(1.0) };
        let next_done = m
            .running
            .iter()
            .enumerate()
            .map(|(i, r)| (now + r.remaining_us / rate, i))
            .min_by(|a, b| a.0.total_cmp(&b.0));
        let wake = m.ctl.next_wakeup_us().map_or(f64::INFINITY, |w| (w as f64).max(now));
        let give_up = m.next_give_up(patience_us).max(now);
        let t = next_done.map_or(f64::INFINITY, |d| d.0).min(next_arrival).min(wake).min(give_up).min(s.duration_us);
        tally.serve(&mut m, now, t, rate, s.warmup_us);
        now = t;
        if let Some((_, i)) = next_done.filter(|d| d.0 <= now) {
            m.running[i].remaining_us = 0.0; // exact, whatever the rounding of rate × dt
        }
        for r in m.take_completed() {
            if r.arrival_us >= s.warmup_us && r.abandoned {
                out.abandoned[r.ty] += 1;
            }
            if r.arrival_us >= s.warmup_us && !r.abandoned {
                out.completed[r.ty] += 1;
                out.wait_sum_us[r.ty] += r.admitted_us - r.arrival_us;
                tally.response_sum_us += now - r.arrival_us;
            }
            // Useful work is counted as work is, by when it is done: in the window.
            if now >= s.warmup_us && !r.abandoned {
                tally.useful_us += kinds[r.ty].demand_us;
            }
            m.finish(now, r);
        }
        if give_up <= now {
            m.give_up(now, patience_us);
        }
        if next_arrival <= now {
            let ty = pick_type(&mut rng, kinds, total_weight);
            if now >= s.warmup_us {
                out.arrived[ty] += 1;
            }
            m.arrive(now, ty, kinds[ty].demand_us, s.patience_us.is_some());
            next_arrival = now - (1.0 - rng.unit()).ln() / arrivals_per_us;
        }
        if wake <= now {
            m.poll(now);
        }
        for arrival_us in m.refused_arrivals.drain(..).filter(|&a| a >= s.warmup_us) {
            tally.refused_n += 1;
            tally.refused_sum_us += now - arrival_us;
        }
    }
    tally.close(&mut out, &s);
    out
}

/// The controller and backend of a scenario.
fn model(s: &Scenario, num_types: usize) -> Model {
    let gate = GateConfig {
        max_queue_wait_us: Some(s.max_queue_wait_us),
        max_in_flight: s.max_in_flight,
        max_wait_us: s.max_wait_us,
        overdue_share: s.overdue_share,
        ..GateConfig::new(s.capacity_us, s.policy.parse().unwrap())
    };
    let cfg = ControllerConfig { patience: s.patience, ..ControllerConfig::new(gate) };
    Model {
        ctl: Controller::new(cfg, num_types, 0).unwrap(),
        waiting: HashMap::new(),
        running: Vec::new(),
        refused_arrivals: Vec::new(),
        clients: std::collections::VecDeque::new(),
    }
}

/// What a run measures in its window, summed as it goes.
#[derive(Default)]
struct Tally {
    work_us: f64,
    overdue_work_us: f64,
    /// Demand of the requests completed while their client waited.
    useful_us: f64,
    response_sum_us: f64,
    refused_n: u64,
    refused_sum_us: f64,
}

impl Tally {
    /// The backend serves from `from` to `to` at `rate` per running request.
    fn serve(&mut self, m: &mut Model, from: f64, to: f64, rate: f64, warmup_us: f64) {
        for r in m.running.iter_mut() {
            r.remaining_us -= rate * (to - from);
        }
        if to > warmup_us {
            let dt = to - from.max(warmup_us);
            self.work_us += dt * rate * m.running.len() as f64;
            let n_overdue = m.running.iter().filter(|r| r.overdue).count();
            self.overdue_work_us += dt * rate * n_overdue as f64;
        }
    }

    fn close(self, out: &mut Outcome, s: &Scenario) {
        let window_us = s.duration_us - s.warmup_us;
        out.work_rate = self.work_us / window_us / s.cpus;
        out.useful_work_rate = self.useful_us / window_us / s.cpus;
        out.overdue_work_share = self.overdue_work_us / self.work_us.max(1.0);
        let done: u64 = out.completed.iter().sum();
        out.mean_response_us = self.response_sum_us / done.max(1) as f64;
        out.mean_response_all_us = (self.response_sum_us + self.refused_sum_us) / (done + self.refused_n).max(1) as f64;
    }
}

fn scenario(policy: &'static str, cpus: f64, capacity_us: u64, load: f64) -> Scenario {
    Scenario {
        policy,
        cpus,
        capacity_us,
        load,
        duration_us: 70e6,
        warmup_us: 10e6,
        max_queue_wait_us: 20_000_000,
        seed: 1,
        max_in_flight: None,
        max_wait_us: None,
        overdue_share: 1.0,
        patience_us: None,
        patience: PatienceRule::Off,
    }
}

/// sjf-aging never does worse than fifo: at each load, processors and capacity (a row),
/// its work rate is at least fifo's, its mean response time at most fifo's, and the
/// costliest type waits no longer than under the worse of fifo and sjf (5% slack: a
/// finite run's noise). In overload the oldest waiting requests under sjf-aging are the
/// costly ones cheaper requests overtook; each becomes due and, while it does not fit,
/// holds the younger ones back. Before the fix that hold drained the gate: a due request
/// let a younger one in only if it finished before the due one could start, by expected
/// finish times that a loaded backend overruns, and it waited for room by its stale
/// arrival charge. Capacities are around the costliest type's charge (about 0.6-1.3 s
/// here) and above.
#[test]
fn aging_keeps_fifos_work_rate_table() {
    // (processors, capacity µs, offered load / peak)
    let rows = [
        (2.0, 2_000_000, 2.0),
        (4.0, 2_000_000, 2.0),
        (4.0, 2_000_000, 1.2),
        (2.0, 1_000_000, 1.2),
        (2.0, 2_000_000, 0.8),
    ];
    let mut failures = Vec::new();
    for (cpus, capacity_us, load) in rows {
        let [fifo, sjf, aging] =
            ["fifo", "sjf", "sjf-aging:2"].map(|p| simulate(scenario(p, cpus, capacity_us, load), &MIX));
        let costly = MIX.len() - 1;
        let row = format!(
            "{cpus} cpus, capacity {capacity_us} µs, load {load}: work fifo {:.3} sjf {:.3} aging {:.3}; \
             mean ms fifo {:.0} sjf {:.0} aging {:.0}; costliest wait ms fifo {:.0} sjf {:.0} aging {:.0}, \
             completed fifo {:.2} sjf {:.2} aging {:.2}",
            fifo.work_rate,
            sjf.work_rate,
            aging.work_rate,
            fifo.mean_response_us / 1e3,
            sjf.mean_response_us / 1e3,
            aging.mean_response_us / 1e3,
            fifo.mean_wait_us(costly) / 1e3,
            sjf.mean_wait_us(costly) / 1e3,
            aging.mean_wait_us(costly) / 1e3,
            fifo.completion(costly),
            sjf.completion(costly),
            aging.completion(costly),
        );
        println!("{row}");
        let ok = aging.work_rate >= fifo.work_rate - 0.005
            && aging.mean_response_us <= fifo.mean_response_us
            && aging.mean_wait_us(costly) <= 1.05 * fifo.mean_wait_us(costly).max(sjf.mean_wait_us(costly));
        if !ok {
            failures.push(row);
        }
    }
    assert!(failures.is_empty(), "sjf-aging:2 worse than fifo:\n{}", failures.join("\n"));
}

/// [`exact_service`] under `policy`: the load invariant, and a request that is the oldest
/// waiting and due (sjf-aging: its arrival plus `factor` times its cost) is admitted by the
/// time every request in flight when it was first seen so has finished (the bound in the
/// module docs, "Policies").
fn exact_service_due(policy: AdmissionPolicy, capacity_us: u64, arrivals: &[(u64, u64)]) -> Result<(), TestCaseError> {
    let factor = match policy {
        AdmissionPolicy::SjfAging { factor } => factor,
        _ => f64::INFINITY,
    };
    let deadline =
        |arrival: u64, cost: u64| arrival.saturating_add((factor * cost as f64).min(u64::MAX as f64 / 2.0) as u64);
    let g = Gate::new(GateConfig::new(capacity_us, policy)).unwrap();
    exact_service(g, arrivals, |_, _| Ok(()), |now, arrival, cost, _| deadline(arrival, cost) <= now, |_| true)
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(300))]

    /// sjf-aging with services as charged: the load invariant, and the wait bound of the
    /// oldest due request, with costs spanning three orders of magnitude.
    #[test]
    fn aging_admits_the_oldest_due_request_once_the_requests_then_in_flight_finish(
        factor in proptest::prop_oneof![proptest::prelude::Just(0.0), 0.0f64..20.0],
        capacity_us in 1u64..3_000,
        arrivals in proptest::collection::vec(
            (0u64..200, proptest::prop_oneof![1u64..10, 10u64..300, 300u64..4_000]),
            0..150,
        ),
    ) {
        exact_service_due(AdmissionPolicy::SjfAging { factor }, capacity_us, &arrivals)?;
    }
}

/// A single-threaded backend's mix (json-server: lookups by id of 4.5 ms, a full-text
/// search of 273 ms, a sorted search of 338 ms), the costly types 88% of the work.
const MIX_ONE_THREAD: [Kind; 3] = [
    Kind { demand_us: 4_500.0, weight: 90.0 },
    Kind { demand_us: 273_000.0, weight: 5.0 },
    Kind { demand_us: 338_000.0, weight: 5.0 },
];

/// datasette's mix (SQLite; its costs alone: a lookup by key 4.4 ms, a LIKE scan 79 ms, a
/// GROUP BY 359 ms), the GROUP BY 69% of the work.
const MIX_DATASETTE: [Kind; 3] = [
    Kind { demand_us: 4_400.0, weight: 90.0 },
    Kind { demand_us: 79_000.0, weight: 5.0 },
    Kind { demand_us: 359_000.0, weight: 5.0 },
];

/// json-server's mix as calibrated (one event loop: a lookup 2.7 ms, a full-text search
/// 185 ms, a sorted search 279 ms).
const MIX_JSON_SERVER: [Kind; 3] = [
    Kind { demand_us: 2_700.0, weight: 90.0 },
    Kind { demand_us: 185_000.0, weight: 5.0 },
    Kind { demand_us: 279_000.0, weight: 5.0 },
];

/// The starvation bound in an overload, on one processor at twice the peak with an 18 s
/// wait limit: a single-threaded backend's mix with an in-flight cap of 2, SQLite's with 4,
/// datasette's with 4 and its calibrated capacity (0.85 s, below the GROUP BY's charge
/// under load), json-server's with 1. `sjf` with a wait bound of 5 s and an overdue share
/// of 0.6 keeps its mean response time (expired requests at their wait) at least 5 times
/// below fifo's and completes the costliest type at least 0.7 times as often as fifo;
/// sjf-aging:2 with the same share keeps fifo's work rate and at most half its mean; under
/// both, the requests admitted as overdue get at most the share of the backend's time
/// (0.03 slack: one request's service in a finite run).
///
/// Fails on the share counted in charges at admission: the overdue stream got 0.72-0.78
/// of the backend on the rows with 4 in flight (cheap requests admitted beside others
/// were charged several times their service), and on datasette sjf served as fifo (mean
/// 13.3 s against fifo's 17.3 s: the lookups, left 0.22 of the backend for 0.3 of the
/// offered work, waited past the bound and joined the oldest-first overdue stream).
/// Fails with share 1 too (sjf with the wait bound served as fifo: 16.8 s against
/// 16.8 s). Against a fifo that loses no throughput, as here, no share gives the
/// costliest type fifo's completion without fifo's mean: fifo gives every type the same
/// fraction of its work, so any policy serving the cheap types more serves it less
/// (docs/decisions, the starvation bound).
#[test]
fn overdue_share_bounds_starvation_without_becoming_fifo_table() {
    // (name, mix, in-flight cap, capacity µs)
    let rows: [(&str, &[Kind], usize, u64); 4] = [
        ("one thread", &MIX_ONE_THREAD, 2, 1_000_000),
        ("sqlite", &MIX, 4, 1_600_000),
        ("datasette", &MIX_DATASETTE, 4, 850_000),
        ("json-server", &MIX_JSON_SERVER, 1, 1_000_000),
    ];
    let mut failures = Vec::new();
    for (name, kinds, cap, capacity_us) in rows {
        let run = |policy: &'static str, max_wait_us: Option<u64>| {
            let s = Scenario {
                max_in_flight: Some(cap),
                max_wait_us,
                overdue_share: OVERDUE_SHARE,
                max_queue_wait_us: 18_000_000,
                ..scenario(policy, 1.0, capacity_us, 2.0)
            };
            simulate(s, kinds)
        };
        let fifo = run("fifo", None);
        let sjf = run("sjf", Some(5_000_000));
        let aging = run("sjf-aging:2", None);
        let costly = kinds.len() - 1;
        let row = format!(
            "{name}, cap {cap}: work fifo {:.3} sjf {:.3} aging {:.3}; mean ms fifo {:.0} sjf {:.0} aging {:.0}; \
             costliest completed fifo {:.3} sjf {:.3} aging {:.3}; overdue share of the work sjf {:.3} aging {:.3}",
            fifo.work_rate,
            sjf.work_rate,
            aging.work_rate,
            fifo.mean_response_all_us / 1e3,
            sjf.mean_response_all_us / 1e3,
            aging.mean_response_all_us / 1e3,
            fifo.completion(costly),
            sjf.completion(costly),
            aging.completion(costly),
            sjf.overdue_work_share,
            aging.overdue_work_share,
        );
        println!("{row}");
        let ok = sjf.completion(costly) >= 0.7 * fifo.completion(costly)
            && 5.0 * sjf.mean_response_all_us <= fifo.mean_response_all_us
            && aging.work_rate >= fifo.work_rate - 0.005
            && 2.0 * aging.mean_response_all_us <= fifo.mean_response_all_us
            && sjf.overdue_work_share <= OVERDUE_SHARE + 0.03
            && aging.overdue_work_share <= OVERDUE_SHARE + 0.03;
        if !ok {
            failures.push(row);
        }
    }
    assert!(failures.is_empty(), "overdue share {OVERDUE_SHARE}:\n{}", failures.join("\n"));
}

/// The share the table above runs with (1 is the rule without a share, which fails it).
const OVERDUE_SHARE: f64 = 0.6;

/// Clients that give up after 20 s, an open load at twice the peak of one processor, the
/// datasette mix and its calibrated capacity, no wait limit set by the operator: without
/// the patience rule much of the backend's time goes to requests whose clients leave before
/// they finish (admitted late under fifo; under sjf the costly ones after long waits); with
/// it (learned from the give-ups alone) every policy delivers at least 0.9 of the backend
/// as useful work — requests completed while their client waited.
#[test]
fn learned_patience_turns_the_backend_to_clients_who_wait_table() {
    let mut failures = Vec::new();
    for policy in ["fifo", "sjf", "sjf-aging:2"] {
        let run = |patience| {
            let s = Scenario {
                max_queue_wait_us: 3_600_000_000,
                patience_us: Some(20e6),
                patience,
                duration_us: 200e6,
                warmup_us: 60e6,
                ..scenario(policy, 1.0, 1_860_000, 2.0)
            };
            simulate(s, &MIX_DATASETTE)
        };
        let (off, learn) = (run(PatienceRule::Off), run(PatienceRule::Learn));
        let row = format!(
            "{policy}: useful work off {:.3} learn {:.3} (busy {:.3}, {:.3}); mean ms (refused at their wait) off {:.0} learn {:.0}; finished for no one off {:?} learn {:?}",
            off.useful_work_rate,
            learn.useful_work_rate,
            off.work_rate,
            learn.work_rate,
            off.mean_response_all_us / 1e3,
            learn.mean_response_all_us / 1e3,
            off.abandoned,
            learn.abandoned,
        );
        println!("{row}");
        if !(learn.useful_work_rate >= 0.9 && learn.useful_work_rate >= off.useful_work_rate) {
            failures.push(row);
        }
    }
    assert!(failures.is_empty(), "patience:\n{}", failures.join("\n"));
}

/// The database tier's mix (`make bench-pg`'s overload: 95% point lookups of 114 µs, 5%
/// aggregates of 12.2 ms on one CPU, capacity 46 ms, wall-time costs) at 1.25× and 1.5×
/// the CPU: on a processor-sharing backend, where a lookup's wall time is its share of the
/// CPU, sjf and sjf-aging:2 serve every lookup and keep the CPU busy (work rate ≥ 0.99),
/// so the aggregates get all the CPU the lookups leave (`(1 − lookups' share) / 12.2 ms` a
/// second): counted as completions of the window's arrivals, at least 0.8 of it (the
/// aggregates that arrive in its last seconds, behind a queue of up to 5 s, finish after
/// it). So the starvation of the aggregates measured in front of PostgreSQL, where a
/// lookup's wall time is 15–25× its CPU time, is not the decision rule's (docs/results.md,
/// the database tier).
#[test]
fn the_database_tiers_mix_gives_the_aggregates_what_the_lookups_leave_table() {
    const PG: [Kind; 2] = [Kind { demand_us: 114.0, weight: 95.0 }, Kind { demand_us: 12_200.0, weight: 5.0 }];
    let total: f64 = PG.iter().map(|k| k.weight).sum();
    let mean_us: f64 = PG.iter().map(|k| k.demand_us * k.weight / total).sum();
    let mut failures = Vec::new();
    for load in [1.25, 1.5] {
        for policy in ["sjf", "sjf-aging:2"] {
            let s = Scenario {
                duration_us: 15e6,
                warmup_us: 3e6,
                max_queue_wait_us: 5_000_000,
                ..scenario(policy, 1.0, 46_000, load)
            };
            let o = simulate(s, &PG);
            // Arrivals per µs of each type, and the aggregates' rate the lookups leave room for.
            let rate_us = load / mean_us;
            let lookups_cpu = rate_us * PG[0].weight / total * PG[0].demand_us;
            let bound_per_s = (1.0 - lookups_cpu) / PG[1].demand_us * 1e6;
            let per_s = o.completed[1] as f64 / ((s.duration_us - s.warmup_us) / 1e6);
            let row = format!(
                "{policy} at {load}×: work rate {:.3}; lookups completed {:.3} (mean wait {:.1} ms); \
                 aggregates {per_s:.1}/s of the {bound_per_s:.1}/s the lookups leave",
                o.work_rate,
                o.completion(0),
                o.mean_wait_us(0) / 1e3
            );
            println!("{row}");
            if o.work_rate < 0.99 || o.completion(0) < 0.99 || per_s < 0.8 * bound_per_s {
                failures.push(row);
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
