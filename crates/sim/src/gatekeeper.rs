//! A closed-loop model of the gatekeeper in front of a shared backend: the gatekeeper's
//! own admission code (`core::admission`: [`CostEstimator`] + [`Gate`]) driven by simulated
//! clients and a simulated backend, in virtual time, to study the estimator and the queue
//! policies without sockets or timing noise (`shortfirst sim gatekeeper`).
//!
//! **Clients.** `clients` users, each: think (exponential, mean `think_mean_us`, or none),
//! then send one request of a type drawn from the weights, wait for its response, repeat.
//! Seeded, so a run is a pure function of its [`ModelConfig`].
//!
//! **Backend.** The synthetic upstream's service model (`gatekeeper::synthetic`): `cpus`
//! processors shared by the `n` running requests, thrashing beyond `slots`, plus
//! `background` other busy processes competing for the same processors (a load generator,
//! a proxy, other tenants on a shared host); each running request progresses at
//! `min(1, cpus/(n + background)) / (1 + thrash * max(0, n - slots))` units of demand per
//! unit of time. Exact between events (fluid processor sharing). With `background > 0`
//! the backend's share of the host grows with the requests it runs, so admitting too few
//! loses throughput even on one processor.
//!
//! **Gate.** With `gate = None` requests go straight to the backend (direct access).
//! Otherwise each request is charged its type's estimate, queued and admitted by [`Gate`];
//! at completion the estimator learns the request's [`Sample`] (wall = admission →
//! completion; share from [`Gate::share_us`]) and the ticket is released. Aging re-picks
//! happen at [`Gate::next_wakeup_us`].
//!
//! **Measurement.** Requests completing in `[warmup_us, duration_us)` count; requests
//! still outstanding at the end are reported separately (a closed loop's stragglers).
//! Response time = completion − send (think time excluded). A request that waits the
//! gate's `max_queue_wait_us` is expired ([`Gate::expire`], the proxy's 503): its client
//! thinks and sends again; expirations are counted per type.
//!
//! **Timeline.** With `timeline_period_us`, the gate's state every period: load against
//! capacity, requests in flight and queued, the charge of the request the policy looks at
//! first ([`Gate::head_cost_us`]) and each type's admissions since the previous row, so
//! the moments the gate drains for one request can be seen.
//!
//! Limits: at most [`MAX_CLIENTS`] clients and [`MAX_MODEL_TYPES`] types; a run stops at
//! `duration_us` of virtual time or after [`MAX_EVENTS`] events, whichever is first
//! (reported in `events_capped`); at most [`MAX_TIMELINE_ROWS`] timeline rows (sampling
//! stops there, reported in `timeline_capped`).
//!
//! Must not know: sockets, the wall clock, HTTP.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

use rand::distributions::{Distribution, WeightedIndex};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use rand_distr::Exp;
use serde::Serialize;
use shortfirst_core::admission::{
    AdmissionError, Admitted, CostEstimator, EstimatorConfig, Gate, GateConfig, RequestId, Sample, Ticket,
};

pub const MAX_CLIENTS: usize = 1_000_000;
pub const MAX_MODEL_TYPES: usize = 4_096;
/// Events per run: a guard against a configuration that would never finish.
pub const MAX_EVENTS: u64 = 200_000_000;
/// Timeline rows per run (memory bound of a long run sampled finely).
pub const MAX_TIMELINE_ROWS: usize = 100_000;

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ModelError {
    #[error("gatekeeper model: {0}")]
    Config(String),
    #[error("gatekeeper model: {0}")]
    Admission(#[from] AdmissionError),
}

/// One request type: its demand on the backend (µs of one processor) and its weight.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ModelType {
    pub name: String,
    pub demand_us: f64,
    pub weight: f64,
}

/// The backend's service model (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct BackendModel {
    pub cpus: usize,
    pub slots: usize,
    pub thrash: f64,
    /// Other busy processes sharing the processors (0: a dedicated backend).
    pub background: f64,
}

impl BackendModel {
    /// Per-request service rate with `n` running.
    pub fn rate(&self, n: usize) -> f64 {
        let share = (self.cpus as f64 / (n as f64 + self.background)).min(1.0);
        share / (1.0 + self.thrash * n.saturating_sub(self.slots) as f64)
    }
}

#[derive(Debug, Clone)]
pub struct ModelConfig {
    pub types: Vec<ModelType>,
    pub backend: BackendModel,
    pub clients: usize,
    /// Mean think time; 0 = none (each client always has one request outstanding).
    pub think_mean_us: f64,
    /// `None`: direct access (no gate).
    pub gate: Option<GateConfig>,
    pub estimator: EstimatorConfig,
    pub duration_us: f64,
    pub warmup_us: f64,
    pub seed: u64,
    /// All clients send their first request at time 0 (a load generator starting every
    /// user at once) instead of after a first think time.
    pub start_together: bool,
    /// Sample the gate's state this often (see "Timeline"); `None`: no timeline.
    pub timeline_period_us: Option<f64>,
}

/// The gate's state at one moment, and what it admitted since the previous row.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct TimelineRow {
    pub t_s: f64,
    pub load_us: u64,
    pub capacity_us: u64,
    pub in_flight: usize,
    pub queued: usize,
    /// Charge of the request the policy looks at first (`None`: nothing waits).
    pub head_cost_us: Option<u64>,
    /// Admissions per type (in the order of the types) since the previous row.
    pub admitted: Vec<u64>,
}

/// Per-type results over the measured window.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct TypeResult {
    pub name: String,
    pub completed: u64,
    pub mean_response_us: f64,
    pub mean_wait_us: f64,
    /// The type's cost estimate at the end of the run (0 without a gate).
    pub final_estimate_us: u64,
    /// Requests of the type expired by the gate's `max_queue_wait_us` in the window.
    pub expired: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ModelResult {
    pub completed: u64,
    pub throughput_per_s: f64,
    /// Demand completed per second of the window (µs of demand per µs ≙ busy processors).
    pub work_per_s: f64,
    /// Mean response time of the requests completed in the window.
    pub mean_response_us: f64,
    /// Mean response time by Little's law, (`mean_in_flight` + `mean_queued`) /
    /// `throughput_per_s`: every request in the system counts, also those still waiting or
    /// running when the run ends. Below `mean_response_us` only by sampling noise; far
    /// above it when some requests wait longer than the window (starvation), which the
    /// completed requests' mean leaves out. In a closed loop at saturation it is
    /// `clients / throughput - think` whatever the policy (see `ARCHITECTURE.md`,
    /// "What a policy can change").
    pub little_response_us: f64,
    /// Time-average number of requests in the backend over the window.
    pub mean_in_flight: f64,
    /// Time-average number waiting in the gate's queue over the window.
    pub mean_queued: f64,
    /// Fraction of the window with fewer than `cpus` requests in the backend while
    /// requests were waiting in the gate (capacity the gate left unused).
    pub starved_fraction: f64,
    /// Requests sent but not answered when the run ended.
    pub outstanding_at_end: u64,
    pub events_capped: bool,
    pub types: Vec<TypeResult>,
    /// See "Timeline" in the module docs; empty without `timeline_period_us`.
    pub timeline: Vec<TimelineRow>,
    pub timeline_capped: bool,
}

struct Running {
    client: usize,
    type_index: usize,
    remaining_us: f64,
    sent_us: f64,
    admitted_us: f64,
    ticket: Option<Ticket>,
}

struct Pending {
    client: usize,
    type_index: usize,
    sent_us: f64,
}

fn validate(cfg: &ModelConfig) -> Result<(), ModelError> {
    let bad = |m: String| Err(ModelError::Config(m));
    if cfg.types.is_empty() || cfg.types.len() > MAX_MODEL_TYPES {
        return bad(format!("need 1..={MAX_MODEL_TYPES} types, got {}", cfg.types.len()));
    }
    for t in &cfg.types {
        if !(t.demand_us.is_finite() && t.demand_us > 0.0 && t.weight.is_finite() && t.weight >= 0.0) {
            return bad(format!("type {:?}: demand must be > 0 and weight >= 0", t.name));
        }
    }
    if cfg.clients == 0 || cfg.clients > MAX_CLIENTS {
        return bad(format!("clients must be in 1..={MAX_CLIENTS}, got {}", cfg.clients));
    }
    let b = cfg.backend;
    if b.cpus == 0
        || b.slots < b.cpus
        || !(b.thrash.is_finite() && b.thrash >= 0.0)
        || !(b.background.is_finite() && b.background >= 0.0)
    {
        return bad(format!(
            "backend: need 1 <= cpus ({}) <= slots ({}), thrash >= 0, background >= 0",
            b.cpus, b.slots
        ));
    }
    if !(cfg.think_mean_us.is_finite() && cfg.think_mean_us >= 0.0) {
        return bad("think time must be >= 0".into());
    }
    if !(cfg.duration_us.is_finite() && cfg.warmup_us >= 0.0 && cfg.warmup_us < cfg.duration_us) {
        return bad("need 0 <= warmup < duration".into());
    }
    if cfg.timeline_period_us.is_some_and(|p| !(p.is_finite() && p >= 1.0)) {
        return bad("timeline period must be at least 1 µs".into());
    }
    Ok(())
}

/// Run the model. Deterministic for a given configuration.
pub fn run(cfg: &ModelConfig) -> Result<ModelResult, ModelError> {
    validate(cfg)?;
    let mut model = Model::new(cfg)?;
    let events_capped = model.run_events()?;
    Ok(model.result(events_capped))
}

/// Virtual time as the gate counts it: whole µs.
fn gate_us(t: f64) -> u64 {
    t.round() as u64
}

/// What the measured window counts (see "Measurement").
struct Tally {
    /// Per type: completed requests, their summed response and wait times, expirations.
    done: Vec<u64>,
    sum_rt: Vec<f64>,
    sum_wait: Vec<f64>,
    expired: Vec<u64>,
    /// Demand served, µs.
    work: f64,
    /// Integrals over time of the requests running and queued, and the time starved.
    area_running: f64,
    area_queued: f64,
    starved: f64,
}

/// The timeline being sampled (see "Timeline").
struct Timeline {
    rows: Vec<TimelineRow>,
    capped: bool,
    /// When the next row is due; `None`: no (more) rows.
    next_sample: Option<f64>,
    /// Admissions per type since the previous row.
    admitted_since: Vec<u64>,
}

/// A run's state: the clock, the clients' random streams, the gate and estimator, the
/// requests sent and what is measured. One method per event kind.
struct Model<'a> {
    cfg: &'a ModelConfig,
    rng: ChaCha8Rng,
    pick: WeightedIndex<f64>,
    think_time: Option<Exp<f64>>,
    estimator: CostEstimator,
    gate: Option<Gate>,
    now: f64,
    /// Clients thinking: (wake time, client). Time in µs as f64, ordered by bits (>= 0).
    thinking: BinaryHeap<Reverse<(u64, usize)>>,
    running: Vec<Running>,
    /// Requests waiting in the gate, by request id.
    pending: HashMap<u64, Pending>,
    tally: Tally,
    timeline: Timeline,
}

impl<'a> Model<'a> {
    /// The state at time 0: every client thinking (or about to send, `start_together`).
    fn new(cfg: &'a ModelConfig) -> Result<Self, ModelError> {
        let mut rng = ChaCha8Rng::seed_from_u64(cfg.seed);
        let pick = WeightedIndex::new(cfg.types.iter().map(|t| t.weight))
            .map_err(|e| ModelError::Config(format!("type weights: {e}")))?;
        let think_time = (cfg.think_mean_us > 0.0).then(|| Exp::new(1.0 / cfg.think_mean_us).expect("rate > 0"));
        let estimator = CostEstimator::new(cfg.types.len(), cfg.estimator.clone())?;
        let gate = cfg.gate.clone().map(Gate::new).transpose()?;
        let n_types = cfg.types.len();
        let mut thinking = BinaryHeap::new();
        for c in 0..cfg.clients {
            let t = if cfg.start_together { 0.0 } else { think_time.map_or(0.0, |d| d.sample(&mut rng)) };
            thinking.push(Reverse((t.to_bits(), c)));
        }
        Ok(Model {
            cfg,
            rng,
            pick,
            think_time,
            estimator,
            gate,
            now: 0.0,
            thinking,
            running: Vec::new(),
            pending: HashMap::new(),
            tally: Tally {
                done: vec![0; n_types],
                sum_rt: vec![0.0; n_types],
                sum_wait: vec![0.0; n_types],
                expired: vec![0; n_types],
                work: 0.0,
                area_running: 0.0,
                area_queued: 0.0,
                starved: 0.0,
            },
            timeline: Timeline {
                rows: Vec::new(),
                capped: false,
                // Only a gate has a state to sample; without one the clock must not wait on it.
                next_sample: cfg.gate.as_ref().and(cfg.timeline_period_us).map(|_| 0.0),
                admitted_since: vec![0; n_types],
            },
        })
    }

    /// The discrete-event loop: to the end of the run, or to [`MAX_EVENTS`] (returns
    /// whether the cap stopped it).
    fn run_events(&mut self) -> Result<bool, ModelError> {
        let mut events = 0u64;
        loop {
            events += 1;
            if events > MAX_EVENTS {
                return Ok(true);
            }
            let rate = if self.running.is_empty() { 0.0 } else { self.cfg.backend.rate(self.running.len()) };
            let next_done = self.next_completion(rate);
            let next_think = self.thinking.peek().map(|Reverse((t, _))| f64::from_bits(*t));
            let next_wake = self.gate.as_ref().and_then(|g| g.next_wakeup_us()).map(|t| t as f64);
            let mut t_next = self.cfg.duration_us;
            for t in [next_done.map(|d| d.0), next_think, next_wake, self.timeline.next_sample].into_iter().flatten() {
                t_next = t_next.min(t.max(self.now));
            }
            self.advance(t_next, rate);
            if self.now >= self.cfg.duration_us {
                return Ok(false);
            }
            self.sample_timeline();
            if let Some((t, i)) = next_done {
                if t <= self.now {
                    self.running[i].remaining_us = 0.0; // exact, whatever the rounding of rate * dt
                }
            }
            self.complete_due()?;
            self.send_due()?;
            if next_wake.is_some_and(|w| w <= self.now) {
                self.wake_gate();
            }
        }
    }

    /// The running request that finishes first at `rate`: (time, index in `running`).
    fn next_completion(&self, rate: f64) -> Option<(f64, usize)> {
        self.running
            .iter()
            .enumerate()
            .map(|(i, r)| (self.now + r.remaining_us / rate, i))
            .min_by(|a, b| a.0.total_cmp(&b.0))
    }

    /// Move the clock to `t_next`: serve the running requests at `rate` and integrate the
    /// gauges over the part of the step inside the window.
    fn advance(&mut self, t_next: f64, rate: f64) {
        let dt = t_next - self.now;
        if dt > 0.0 {
            let n = self.running.len();
            for r in self.running.iter_mut() {
                r.remaining_us -= rate * dt;
            }
            let lo = self.now.max(self.cfg.warmup_us);
            if t_next > lo {
                let w = t_next - lo;
                let queued = self.gate.as_ref().map_or(0, |g| g.queue_len());
                let tally = &mut self.tally;
                tally.area_running += w * n as f64;
                tally.area_queued += w * queued as f64;
                if queued > 0 && n < self.cfg.backend.cpus {
                    tally.starved += w;
                }
                tally.work += w * n as f64 * rate;
            }
        }
        self.now = t_next;
    }

    /// A timeline row, if one is due.
    fn sample_timeline(&mut self) {
        let tl = &mut self.timeline;
        let (Some(t), Some(period), Some(g)) = (tl.next_sample, self.cfg.timeline_period_us, self.gate.as_ref()) else {
            return;
        };
        if t > self.now {
            return;
        }
        if tl.rows.len() < MAX_TIMELINE_ROWS {
            tl.rows.push(TimelineRow {
                t_s: self.now / 1e6,
                load_us: g.load_us(),
                capacity_us: g.capacity_us(),
                in_flight: g.in_flight(),
                queued: g.queue_len(),
                head_cost_us: g.head_cost_us(),
                admitted: std::mem::replace(&mut tl.admitted_since, vec![0; self.cfg.types.len()]),
            });
            tl.next_sample = Some(t + period);
        } else {
            tl.capped = true;
            tl.next_sample = None;
        }
    }

    /// Completions: all that are due now (ties within a nanosecond of demand).
    fn complete_due(&mut self) -> Result<(), ModelError> {
        let mut i = 0;
        while i < self.running.len() {
            if self.running[i].remaining_us <= 1e-3 {
                let r = self.running.swap_remove(i);
                self.complete(r)?;
            } else {
                i += 1;
            }
        }
        Ok(())
    }

    /// A request's completion: counted if in the window, its ticket released, and its
    /// client thinks before sending again.
    fn complete(&mut self, r: Running) -> Result<(), ModelError> {
        if self.now >= self.cfg.warmup_us {
            self.tally.done[r.type_index] += 1;
            self.tally.sum_rt[r.type_index] += self.now - r.sent_us;
            self.tally.sum_wait[r.type_index] += r.admitted_us - r.sent_us;
        }
        if let Some(ticket) = r.ticket {
            self.release(r.type_index, r.admitted_us, ticket)?;
        }
        self.think_then_send(r.client);
        Ok(())
    }

    /// A gated request is done: the estimator learns its [`Sample`], the type's waiting
    /// requests are re-priced, the ticket is released, and what that admits starts.
    fn release(&mut self, type_index: usize, admitted_us: f64, ticket: Ticket) -> Result<(), ModelError> {
        let now_us = gate_us(self.now);
        let g = self.gate.as_mut().expect("a ticket comes from the gate");
        let share_us = g.share_us(now_us, &ticket)?;
        let wall_us = gate_us(self.now - admitted_us);
        let serial_us = g.serial_us(now_us, wall_us);
        let sample = Sample { wall_us, share_us, serial_us };
        self.estimator.observe_request_at(type_index, sample, now_us)?;
        // The type's queued requests are judged by its new estimate, the charge they get at
        // admission, as the proxy does (`Gate::reprice_waiting`, every policy).
        let mut admitted = if g.reprices_waiting() {
            let est = self.estimator.estimate_us(type_index)?;
            let ids: Vec<RequestId> =
                self.pending.iter().filter(|(_, p)| p.type_index == type_index).map(|(&id, _)| RequestId(id)).collect();
            g.reprice_waiting(now_us, ids, est)
        } else {
            Vec::new()
        };
        admitted.extend(g.release(now_us, ticket)?);
        self.start(admitted);
        Ok(())
    }

    /// Clients whose think time is over send.
    fn send_due(&mut self) -> Result<(), ModelError> {
        while let Some(&Reverse((t, client))) = self.thinking.peek() {
            if f64::from_bits(t) > self.now {
                break;
            }
            self.thinking.pop();
            let type_index = self.pick.sample(&mut self.rng);
            self.send(client, type_index)?;
        }
        Ok(())
    }

    /// A client sends a request: straight to the backend without a gate, else charged
    /// its type's estimate and queued.
    fn send(&mut self, client: usize, type_index: usize) -> Result<(), ModelError> {
        let now = self.now;
        let Some(g) = self.gate.as_mut() else {
            let demand_us = self.cfg.types[type_index].demand_us;
            let r =
                Running { client, type_index, remaining_us: demand_us, sent_us: now, admitted_us: now, ticket: None };
            self.running.push(r);
            return Ok(());
        };
        let c = self.estimator.charge(type_index, gate_us(now))?;
        let arrive = if c.probe { Gate::arrive_probe } else { Gate::arrive };
        let (id, admitted) = arrive(g, gate_us(now), c.cost_us)
            .map_err(|_| ModelError::Config("gate queue full: raise max_queue_len".into()))?;
        self.pending.insert(id.0, Pending { client, type_index, sent_us: now });
        self.start(admitted);
        Ok(())
    }

    /// The gate's wake-up. Expire before polling: a request past the wait limit keeps the
    /// wake-up at its limit, so only removing it moves time on (without this a gate with
    /// `max_queue_wait_us` woke at the same instant until the event cap). An expired
    /// request's client thinks and sends again.
    fn wake_gate(&mut self) {
        let now_us = gate_us(self.now);
        let (expired, mut admitted) = self.gate.as_mut().expect("a wake-up comes from the gate").expire(now_us);
        for id in expired {
            let p = self.pending.remove(&id.0).expect("expired request is pending");
            if self.now >= self.cfg.warmup_us {
                self.tally.expired[p.type_index] += 1;
            }
            self.think_then_send(p.client);
        }
        admitted.extend(self.gate.as_mut().expect("a wake-up comes from the gate").poll(now_us));
        self.start(admitted);
    }

    /// The client thinks (a sampled think time, or none), then sends.
    fn think_then_send(&mut self, client: usize) {
        let t = self.now + self.think_time.map_or(0.0, |d| d.sample(&mut self.rng));
        self.thinking.push(Reverse((t.to_bits(), client)));
    }

    /// Admissions from the gate start in the backend. A request that waited is recharged
    /// with its type's estimate now, as the proxy does (`Gate::recharge_waited`); what a
    /// lower charge admits starts too.
    fn start(&mut self, admitted: Vec<Admitted>) {
        let g = self.gate.as_mut().expect("admissions come from the gate");
        let (pending, estimator) = (&mut self.pending, &self.estimator);
        let cost_of = |id: RequestId| {
            let p = pending.get(&id.0).expect("admitted request is pending");
            estimator.estimate_us(p.type_index).ok()
        };
        for a in g.recharge_waited(gate_us(self.now), admitted, cost_of) {
            let p = pending.remove(&a.ticket.id().0).expect("admitted request is pending");
            self.timeline.admitted_since[p.type_index] += 1;
            self.running.push(Running {
                client: p.client,
                type_index: p.type_index,
                remaining_us: self.cfg.types[p.type_index].demand_us,
                sent_us: p.sent_us,
                admitted_us: self.now,
                ticket: Some(a.ticket),
            });
        }
    }

    /// The results over the window (see [`ModelResult`]).
    fn result(self, events_capped: bool) -> ModelResult {
        let window_s = (self.cfg.duration_us - self.cfg.warmup_us) / 1e6;
        let window_us = self.cfg.duration_us - self.cfg.warmup_us;
        let tally = &self.tally;
        let completed: u64 = tally.done.iter().sum();
        ModelResult {
            completed,
            throughput_per_s: completed as f64 / window_s,
            work_per_s: tally.work / window_us,
            mean_response_us: if completed > 0 { tally.sum_rt.iter().sum::<f64>() / completed as f64 } else { 0.0 },
            // Little: mean number in the system / throughput, over the same window.
            little_response_us: if completed > 0 {
                (tally.area_running + tally.area_queued) / completed as f64
            } else {
                0.0
            },
            mean_in_flight: tally.area_running / window_us,
            mean_queued: tally.area_queued / window_us,
            starved_fraction: tally.starved / window_us,
            outstanding_at_end: (self.running.len() + self.pending.len()) as u64,
            events_capped,
            types: self.type_results(),
            timeline: self.timeline.rows,
            timeline_capped: self.timeline.capped,
        }
    }

    fn type_results(&self) -> Vec<TypeResult> {
        let tally = &self.tally;
        let mean = |sum: f64, n: u64| if n > 0 { sum / n as f64 } else { 0.0 };
        self.cfg
            .types
            .iter()
            .enumerate()
            .map(|(i, t)| TypeResult {
                name: t.name.clone(),
                completed: tally.done[i],
                mean_response_us: mean(tally.sum_rt[i], tally.done[i]),
                mean_wait_us: mean(tally.sum_wait[i], tally.done[i]),
                final_estimate_us: if self.gate.is_some() { self.estimator.estimate_us(i).unwrap_or(0) } else { 0 },
                expired: tally.expired[i],
            })
            .collect()
    }
}

/// One capacity tried by [`calibrate`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CalibrationTrial {
    pub capacity_us: u64,
    pub throughput_per_s: f64,
}

/// The paper's capacity search, in the model: run `cfg` (its gate's capacity replaced)
/// at each capacity from `min_us`, multiplying by `growth` up to `max_us`, and return the
/// smallest capacity whose throughput is within `within` (e.g. 0.02) of the best, and every
/// trial. At most 64 steps.
pub fn calibrate(
    cfg: &ModelConfig,
    min_us: u64,
    max_us: u64,
    growth: f64,
    within: f64,
) -> Result<(u64, Vec<CalibrationTrial>), ModelError> {
    if cfg.gate.is_none() {
        return Err(ModelError::Config("calibrate needs a gate".into()));
    }
    if !(growth > 1.0 && growth.is_finite()) || min_us == 0 || max_us < min_us {
        return Err(ModelError::Config(format!(
            "calibrate: need growth > 1 (got {growth}) and 0 < min ({min_us}) <= max ({max_us})"
        )));
    }
    let mut trials = Vec::new();
    let mut capacity = min_us as f64;
    while capacity <= max_us as f64 && trials.len() < 64 {
        let mut c = cfg.clone();
        if let Some(g) = c.gate.as_mut() {
            g.capacity_us = capacity.round() as u64;
        }
        let r = run(&c)?;
        trials.push(CalibrationTrial { capacity_us: capacity.round() as u64, throughput_per_s: r.throughput_per_s });
        capacity *= growth;
    }
    let best = trials.iter().map(|t| t.throughput_per_s).fold(0.0, f64::max);
    let chosen =
        trials.iter().find(|t| t.throughput_per_s >= best * (1.0 - within)).expect("at least one trial: min <= max");
    Ok((chosen.capacity_us, trials))
}

/// Run `cfg` with seeds `cfg.seed .. cfg.seed + n` (independent replications).
pub fn replicate(cfg: &ModelConfig, n: u64) -> Result<Vec<ModelResult>, ModelError> {
    (0..n.max(1))
        .map(|i| {
            let mut c = cfg.clone();
            c.seed = cfg.seed.wrapping_add(i);
            run(&c)
        })
        .collect()
}

#[cfg(test)]
mod tests;
