//! A closed-loop model of the gatekeeper in front of a shared backend: the gatekeeper's
//! own admission code (`core::admission::Controller`) driven by simulated
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
//! Otherwise they go through the gatekeeper's own admission controller
//! (`core::admission::Controller`, the one the proxy runs): each arrives with its type,
//! is charged, queued and admitted by it; at completion it learns the request's wall time
//! (admission → completion) and releases the charge; its wake-ups expire waits, refuse
//! requests that would finish after their client gives up, re-pick aging deadlines and
//! tick auto capacity.
//!
//! **Clients that give up.** With `client_patience_us`, a client leaves that long after
//! sending: a waiting request is withdrawn (the controller hears of it and learns the
//! patience), a running one is finished by the backend for no one (`useful_work_per_s`
//! leaves it out); the client then thinks and sends again.
//!
//! **Measurement.** Requests completing in `[warmup_us, duration_us)` count; requests
//! still outstanding at the end are reported separately (a closed loop's stragglers).
//! Response time = completion − send (think time excluded). A request the controller
//! refuses (its `max_queue_wait_us`, or its patience rule: the proxy's 503) sends its client
//! back to thinking; expirations and refusals are counted per type.
//!
//! **Timeline.** With `timeline_period_us`, the gate's state every period: load against
//! capacity, requests in flight and queued, the charge of the request the policy looks at
//! first (`Gate::head_cost_us`) and each type's admissions since the previous row, so
//! the moments the gate drains for one request can be seen.
//!
//! Limits: at most [`MAX_CLIENTS`] clients and [`MAX_MODEL_TYPES`] types; a run stops at
//! `duration_us` of virtual time or after [`MAX_EVENTS`] events, whichever is first
//! (reported in `events_capped`); at most [`MAX_TIMELINE_ROWS`] timeline rows (sampling
//! stops there, reported in `timeline_capped`).
//!
//! Must not know: sockets, the wall clock, HTTP.

use serde::Serialize;
use shortfirst_core::admission::auto::AutoConfig;
use shortfirst_core::admission::{AdmissionError, ChargeAt, EstimatorConfig, GateConfig, PatienceRule};

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
    /// The gate's capacity follows auto capacity (`gate.capacity_us` is then ignored).
    pub auto: Option<AutoConfig>,
    pub charge_at: ChargeAt,
    /// The controller's patience rule (see `core::admission::patience`).
    pub patience: PatienceRule,
    /// Clients give up this long after sending (µs; `None`: they wait for ever). A request
    /// still waiting is withdrawn; one the backend works on is finished for no one. The
    /// client then thinks and sends again.
    pub client_patience_us: Option<f64>,
    pub duration_us: f64,
    pub warmup_us: f64,
    pub seed: u64,
    /// All clients send their first request at time 0 (a load generator starting every
    /// user at once) instead of after a first think time.
    pub start_together: bool,
    /// Open, scripted arrivals instead of the clients' loop: `(send time µs, type index)`,
    /// each sent once by a client of its own (`clients` and think times are ignored).
    /// Such a run records the admission order ([`ModelResult::admissions`]).
    pub script: Option<Vec<(f64, usize)>>,
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
    /// Requests refused because they would not finish before their client gives up.
    pub refused: u64,
    /// Requests whose client gave up (waiting, or while the backend worked on them).
    pub gave_up: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ModelResult {
    pub completed: u64,
    pub throughput_per_s: f64,
    /// Demand completed per second of the window (µs of demand per µs ≙ busy processors).
    pub work_per_s: f64,
    /// The part of `work_per_s` that went to requests completed while their client waited.
    pub useful_work_per_s: f64,
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
    /// Admissions of a request sent before one of its type admitted earlier: 0 when every
    /// type is served first come, first served (the controller's promise).
    pub out_of_order_admissions: u64,
    /// Scripted runs: `(arrival index, admission time µs)` in admission order.
    pub admissions: Vec<(usize, u64)>,
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
    if let Some(script) = &cfg.script {
        if script.len() > MAX_CLIENTS {
            return bad(format!("a script holds at most {MAX_CLIENTS} arrivals, got {}", script.len()));
        }
        if let Some((i, &(t, ty))) =
            script.iter().enumerate().find(|(_, &(t, ty))| !(t.is_finite() && t >= 0.0) || ty >= cfg.types.len())
        {
            return bad(format!("script arrival {i}: time {t} must be >= 0 and type {ty} below {}", cfg.types.len()));
        }
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
    let mut model = events::Model::new(cfg)?;
    let events_capped = model.run_events()?;
    Ok(model.result(events_capped))
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

mod events;
#[cfg(test)]
mod tests;
