//! The model's event loop: a run's state (clock, clients, the admission controller, the
//! requests sent) and what it measures, one method per event kind. Every admission
//! decision is the controller's (`core::admission::Controller`), as in the proxy.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

use rand::distributions::{Distribution, WeightedIndex};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use rand_distr::Exp;
use shortfirst_core::admission::{Arrival, Controller, ControllerConfig, Decision, Refusal, Ticket};

use super::{ModelConfig, ModelError, ModelResult, TimelineRow, TypeResult, MAX_EVENTS, MAX_TIMELINE_ROWS};

struct Running {
    /// `None` once the client gave up.
    client: Option<usize>,
    /// The request's number in sending order.
    seq: u64,
    type_index: usize,
    remaining_us: f64,
    sent_us: f64,
    admitted_us: f64,
    ticket: Option<Ticket>,
}

struct Pending {
    client: usize,
    seq: u64,
    type_index: usize,
    sent_us: f64,
}

/// Virtual time as the controller counts it: whole µs.
fn gate_us(t: f64) -> u64 {
    t.round() as u64
}

/// What the measured window counts (see "Measurement").
struct Tally {
    /// Per type: completed requests, their summed response and wait times, expirations,
    /// refusals for patience, give-ups.
    done: Vec<u64>,
    sum_rt: Vec<f64>,
    sum_wait: Vec<f64>,
    expired: Vec<u64>,
    refused: Vec<u64>,
    gave_up: Vec<u64>,
    /// Demand served, µs; of it, demand of requests completed while their client waited.
    work: f64,
    useful: f64,
    /// Integrals over time of the requests running and queued, and the time starved.
    area_running: f64,
    area_queued: f64,
    starved: f64,
}

impl Tally {
    fn new(n_types: usize) -> Self {
        Tally {
            done: vec![0; n_types],
            sum_rt: vec![0.0; n_types],
            sum_wait: vec![0.0; n_types],
            expired: vec![0; n_types],
            refused: vec![0; n_types],
            gave_up: vec![0; n_types],
            work: 0.0,
            useful: 0.0,
            area_running: 0.0,
            area_queued: 0.0,
            starved: 0.0,
        }
    }
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

/// A run's state: the clock, the clients' random streams, the admission controller, the
/// requests sent and what is measured. One method per event kind; every admission decision
/// is the controller's (`core::admission::Controller`), as in the proxy.
pub(super) struct Model<'a> {
    cfg: &'a ModelConfig,
    rng: ChaCha8Rng,
    pick: WeightedIndex<f64>,
    think_time: Option<Exp<f64>>,
    /// `None`: direct access.
    ctl: Option<Controller>,
    now: f64,
    /// Clients thinking: (wake time, client). Time in µs as f64, ordered by bits (>= 0).
    thinking: BinaryHeap<Reverse<(u64, usize)>>,
    running: Vec<Running>,
    /// Requests waiting in the gate, by request id.
    pending: HashMap<u64, Pending>,
    tally: Tally,
    timeline: Timeline,
    /// Per type, the send time of the request admitted last, and admissions that broke
    /// the type's arrival order.
    last_admitted_sent: Vec<f64>,
    out_of_order: u64,
    /// Scripted runs: the admission order (see [`ModelResult::admissions`]).
    admissions: Vec<(usize, u64)>,
    /// Requests sent so far (the next one's `seq`).
    sent: u64,
    /// With `client_patience_us`: `(sent, seq)` of requests whose client may still give
    /// up, in sending order, and the waiting ones' ids by seq. Entries of requests since
    /// finished or refused are skipped when met.
    impatient: std::collections::VecDeque<(f64, u64)>,
    waiting_seq: HashMap<u64, u64>,
}

impl<'a> Model<'a> {
    /// The state at time 0: every client thinking (or about to send, `start_together`).
    pub(super) fn new(cfg: &'a ModelConfig) -> Result<Self, ModelError> {
        let mut rng = ChaCha8Rng::seed_from_u64(cfg.seed);
        let pick = WeightedIndex::new(cfg.types.iter().map(|t| t.weight))
            .map_err(|e| ModelError::Config(format!("type weights: {e}")))?;
        let think_time = (cfg.think_mean_us > 0.0).then(|| Exp::new(1.0 / cfg.think_mean_us).expect("rate > 0"));
        let n_types = cfg.types.len();
        let ctl = match &cfg.gate {
            Some(gate) => {
                let c = ControllerConfig {
                    gate: gate.clone(),
                    estimator: cfg.estimator.clone(),
                    auto: cfg.auto.clone(),
                    charge_at: cfg.charge_at,
                    patience: cfg.patience,
                };
                Some(Controller::new(c, n_types, 0)?)
            }
            None => None,
        };
        let mut thinking = BinaryHeap::new();
        match &cfg.script {
            Some(script) => {
                for (c, &(t, _)) in script.iter().enumerate() {
                    thinking.push(Reverse((t.to_bits(), c)));
                }
            }
            None => {
                for c in 0..cfg.clients {
                    let t = if cfg.start_together { 0.0 } else { think_time.map_or(0.0, |d| d.sample(&mut rng)) };
                    thinking.push(Reverse((t.to_bits(), c)));
                }
            }
        }
        Ok(Model {
            cfg,
            rng,
            pick,
            think_time,
            ctl,
            now: 0.0,
            thinking,
            running: Vec::new(),
            pending: HashMap::new(),
            tally: Tally::new(n_types),
            last_admitted_sent: vec![f64::NEG_INFINITY; n_types],
            out_of_order: 0,
            admissions: Vec::new(),
            sent: 0,
            impatient: std::collections::VecDeque::new(),
            waiting_seq: HashMap::new(),
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
    pub(super) fn run_events(&mut self) -> Result<bool, ModelError> {
        let mut events = 0u64;
        loop {
            events += 1;
            if events > MAX_EVENTS {
                return Ok(true);
            }
            let rate = if self.running.is_empty() { 0.0 } else { self.cfg.backend.rate(self.running.len()) };
            let next_done = self.next_completion(rate);
            let next_think = self.thinking.peek().map(|Reverse((t, _))| f64::from_bits(*t));
            let next_wake = self.ctl.as_ref().and_then(Controller::next_wakeup_us).map(|t| t as f64);
            let next_give_up = self.next_give_up();
            let mut t_next = self.cfg.duration_us;
            for t in [next_done.map(|d| d.0), next_think, next_wake, self.timeline.next_sample, next_give_up]
                .into_iter()
                .flatten()
            {
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
            if next_give_up.is_some_and(|g| g <= self.now) {
                self.give_up_due();
            }
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

    /// The first moment a waiting request's or a running one's client gives up.
    fn next_give_up(&self) -> Option<f64> {
        let p = self.cfg.client_patience_us?;
        self.impatient.front().map(|&(sent, _)| sent + p)
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
                let queued = self.ctl.as_ref().map_or(0, |c| c.gate().queue_len());
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
        let (Some(t), Some(period), Some(c)) = (tl.next_sample, self.cfg.timeline_period_us, self.ctl.as_ref()) else {
            return;
        };
        if t > self.now {
            return;
        }
        let g = c.gate();
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

    /// A request's completion: counted if in the window and its client still waits, its
    /// ticket handed back with its wall time (admission → completion) and demand, and its client (if
    /// still there) thinks before sending again.
    fn complete(&mut self, r: Running) -> Result<(), ModelError> {
        if self.now >= self.cfg.warmup_us && r.client.is_some() {
            self.tally.done[r.type_index] += 1;
            self.tally.sum_rt[r.type_index] += self.now - r.sent_us;
            self.tally.sum_wait[r.type_index] += r.admitted_us - r.sent_us;
            self.tally.useful += self.cfg.types[r.type_index].demand_us;
        }
        if let Some(ticket) = r.ticket {
            let wall_us = gate_us(self.now - r.admitted_us);
            let c = self.ctl.as_mut().expect("a ticket comes from the controller");
            // Its processor time (the cpu basis's sample) is its demand.
            let cpu_us = gate_us(self.cfg.types[r.type_index].demand_us);
            let d = c.finish_with_cpu(gate_us(self.now), ticket, Some(wall_us), Some(cpu_us))?;
            self.apply(d);
        }
        if let Some(client) = r.client {
            self.think_then_send(client);
        }
        Ok(())
    }

    /// Clients whose patience ran out leave: a waiting request is withdrawn, a running one
    /// is left to the backend; the client thinks and sends again.
    fn give_up_due(&mut self) {
        let Some(p) = self.cfg.client_patience_us else { return };
        let now = self.now;
        let in_window = now >= self.cfg.warmup_us;
        let mut clients = Vec::new();
        while let Some(&(sent, seq)) = self.impatient.front() {
            // The same sum as `next_give_up`'s, so a time it returns is never short of it.
            if sent + p > now {
                break;
            }
            self.impatient.pop_front();
            if let Some(id) = self.waiting_seq.remove(&seq) {
                let r = self.pending.remove(&id).expect("a waiting seq is pending");
                if in_window {
                    self.tally.gave_up[r.type_index] += 1;
                }
                clients.push(r.client);
                let c = self.ctl.as_mut().expect("only the controller keeps requests waiting");
                let d = c.client_gone(gate_us(now), shortfirst_core::admission::RequestId(id));
                self.apply(d);
            } else if let Some(r) = self.running.iter_mut().find(|r| r.seq == seq && r.client.is_some()) {
                if in_window {
                    self.tally.gave_up[r.type_index] += 1;
                }
                clients.extend(r.client.take());
                if let (Some(c), Some(t)) = (self.ctl.as_mut(), r.ticket.as_ref()) {
                    let _ = c.client_gone(gate_us(now), t.id());
                }
            }
        }
        for client in clients {
            self.think_then_send(client);
        }
    }

    /// Clients whose think time is over send.
    fn send_due(&mut self) -> Result<(), ModelError> {
        while let Some(&Reverse((t, client))) = self.thinking.peek() {
            if f64::from_bits(t) > self.now {
                break;
            }
            self.thinking.pop();
            let type_index = match &self.cfg.script {
                Some(script) => script[client].1,
                None => self.pick.sample(&mut self.rng),
            };
            self.send(client, type_index)?;
        }
        Ok(())
    }

    /// A client sends a request: straight to the backend without a gate, else to the
    /// controller.
    fn send(&mut self, client: usize, type_index: usize) -> Result<(), ModelError> {
        let now = self.now;
        let seq = self.sent;
        self.sent += 1;
        if self.cfg.client_patience_us.is_some() {
            self.impatient.push_back((now, seq));
        }
        let Some(c) = self.ctl.as_mut() else {
            let demand_us = self.cfg.types[type_index].demand_us;
            let r = Running {
                client: Some(client),
                seq,
                type_index,
                remaining_us: demand_us,
                sent_us: now,
                admitted_us: now,
                ticket: None,
            };
            self.running.push(r);
            return Ok(());
        };
        let a = c.arrive(gate_us(now), type_index)?;
        // The decisions the arrival settled for others first: an older request of this type
        // admitted in the same instant goes ahead of this one, as in the gate's own order.
        self.apply(a.others);
        match a.outcome {
            Arrival::Admitted(g) => {
                self.pending.insert(g.ticket.id().0, Pending { client, seq, type_index, sent_us: now });
                self.apply(vec![Decision::Admit(g)]);
            }
            Arrival::Queued(id) => {
                self.pending.insert(id.0, Pending { client, seq, type_index, sent_us: now });
                if self.cfg.client_patience_us.is_some() {
                    self.waiting_seq.insert(seq, id.0);
                }
            }
            Arrival::Refused(Refusal::QueueFull) => {
                return Err(ModelError::Config("gate queue full: raise max_queue_len".into()));
            }
            Arrival::Refused(reason) => {
                self.count_refusal(type_index, reason);
                self.think_then_send(client);
            }
        }
        Ok(())
    }

    /// The controller's wake-up: expiries, refusals for patience, aging, auto capacity.
    fn wake_gate(&mut self) {
        let d = self.ctl.as_mut().expect("a wake-up comes from the controller").poll(gate_us(self.now));
        self.apply(d);
    }

    /// The client thinks (a sampled think time, or none), then sends.
    fn think_then_send(&mut self, client: usize) {
        if self.cfg.script.is_some() {
            return; // a scripted client sends once
        }
        let t = self.now + self.think_time.map_or(0.0, |d| d.sample(&mut self.rng));
        self.thinking.push(Reverse((t.to_bits(), client)));
    }

    fn count_refusal(&mut self, type_index: usize, reason: Refusal) {
        if self.now < self.cfg.warmup_us {
            return;
        }
        match reason {
            Refusal::Expired => self.tally.expired[type_index] += 1,
            _ => self.tally.refused[type_index] += 1,
        }
    }

    /// Carry out the controller's decisions: admissions start in the backend; a refused
    /// request's client thinks and sends again.
    fn apply(&mut self, decisions: Vec<Decision>) {
        for d in decisions {
            match d {
                Decision::Admit(g) => {
                    let p = self.pending.remove(&g.ticket.id().0).expect("admitted request is pending");
                    self.waiting_seq.remove(&p.seq);
                    self.timeline.admitted_since[p.type_index] += 1;
                    let last = &mut self.last_admitted_sent[p.type_index];
                    if p.sent_us < *last {
                        self.out_of_order += 1;
                    }
                    *last = p.sent_us;
                    if self.cfg.script.is_some() {
                        self.admissions.push((p.client, gate_us(self.now)));
                    }
                    self.running.push(Running {
                        client: Some(p.client),
                        seq: p.seq,
                        type_index: p.type_index,
                        remaining_us: self.cfg.types[p.type_index].demand_us,
                        sent_us: p.sent_us,
                        admitted_us: self.now,
                        ticket: Some(g.ticket),
                    });
                }
                Decision::Refuse { id, type_index, reason } => {
                    let p = self.pending.remove(&id.0).expect("refused request is pending");
                    self.waiting_seq.remove(&p.seq);
                    self.count_refusal(type_index, reason);
                    self.think_then_send(p.client);
                }
            }
        }
    }

    /// The results over the window (see [`ModelResult`]).
    pub(super) fn result(self, events_capped: bool) -> ModelResult {
        let window_s = (self.cfg.duration_us - self.cfg.warmup_us) / 1e6;
        let window_us = self.cfg.duration_us - self.cfg.warmup_us;
        let tally = &self.tally;
        let completed: u64 = tally.done.iter().sum();
        ModelResult {
            completed,
            throughput_per_s: completed as f64 / window_s,
            work_per_s: tally.work / window_us,
            useful_work_per_s: tally.useful / window_us,
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
            out_of_order_admissions: self.out_of_order,
            admissions: self.admissions,
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
                final_estimate_us: self.ctl.as_ref().map_or(0, |c| c.estimator().estimate_us(i).unwrap_or(0)),
                expired: tally.expired[i],
                refused: tally.refused[i],
                gave_up: tally.gave_up[i],
            })
            .collect()
    }
}
