//! Gatekeeper admission control and admission-queue scheduling (Elnikety et al. 2004, §3).
//!
//! Three pure pieces, all driven with time as a parameter (`now_us`, microseconds on any
//! monotonic clock the driver chooses; the simulator uses its virtual clock):
//!
//! - [`CostEstimator`]: per request type, an online moving average of each request's
//!   measured cost. That average *is* the type's cost, in microseconds ("cost units"). What
//!   a request's cost sample is depends on the [`Basis`]: by default the paper's raw
//!   upstream service time; with [`Basis::Share`] its *share* of the backend (service time
//!   divided, moment by moment, by the requests in flight, see [`Gate::share_us`]).
//! - [`Gate`]: the admission accounting and the admission queue. Load is the sum of the
//!   charges of admitted, unfinished requests; a request is admitted while
//!   `load + cost <= capacity`, otherwise it waits in the queue. Every admitted request
//!   holds a [`Ticket`] that must be handed back exactly once (finished, failed, or the
//!   client went away) and releases exactly the charge it was admitted with.
//! - [`Policy`]: the order in which waiting requests are admitted: `fifo`, `sjf`, or
//!   `sjf-aging:X`.
//!
//! # Rules (precise)
//!
//! **Empty system.** A request whose cost exceeds the whole capacity would otherwise never
//! run. It is admitted when nothing else is admitted (`load == 0`), and then runs alone:
//! nothing else is admitted until it finishes, because any further admission would need
//! `load + cost <= capacity` with `load > capacity`. So at every admission, either
//! `load_after <= capacity` or the admitted request is the only one in flight.
//!
//! **Charges.** A request is charged the cost passed to [`Gate::arrive`] (the estimate at
//! arrival, at least 1 µs, at most `max_charge_share` × the capacity at arrival), and that
//! charge stays fixed while it waits unless the driver re-prices it (below). Once admitted, a driver
//! may replace the charge with a fresher estimate ([`Gate::recharge`], the proxy and the
//! model do it at admission): after a long wait the estimate a request arrived with can be
//! far off. Wall-clock estimates inflate while many requests share the backend and deflate
//! when few do, and a queue full of requests charged at an inflated moment would otherwise
//! run the backend nearly alone, one stale charge at a time, while their type's estimate is
//! already back down (measured: one request in flight for seconds, fifo, open model at twice
//! the peak load). Releasing returns exactly the charge the ticket holds then. Recharging
//! only at admission still judges whether the head *fits* by its stale charge, so under
//! `fifo` a driver may also re-price a waiting request ([`Gate::reprice_waiting`]; the proxy
//! and the model do it for a type's waiting requests whenever that type's estimate changes).
//!
//! **Re-sampling (SJF; beyond the paper's text, in its spirit).** Under `sjf` a type is
//! admitted only when nothing cheaper by estimate waits, so in overload a type priced
//! behind the work that saturates the gate gets no admissions, hence no samples, and its
//! estimate stays where its last samples left it — however stale. In the TPC-W sweep
//! (session 4, sjf, 400 browsers) Admin Confirm's estimate froze at 368 ms after three
//! warm-up samples, above Best Sellers' 285–357 ms; the two cost the same at the backend
//! (gated means 272 and 303 ms), but Best Sellers filled the queue, so every Admin Confirm
//! sorted behind all of them and waited out the queue limit: a lock-in the estimate can
//! never leave, since only a sample could move it. The paper learns costs "based on
//! measurements of recent executions" (§3.1); a frozen estimate is not one. So, with
//! [`EstimatorConfig::resample_after_us`] set, [`CostEstimator::charge`] marks a request a
//! *probe* when its type has gone that long without a sample (or a probe), and
//! [`Gate::arrive_probe`] puts a probe ahead of every non-probe in the SJF order (probes
//! among themselves in arrival order). Its charge is its estimate as usual, so the capacity
//! rule is untouched; while a probe waits first in line nothing else is admitted, so it is
//! admitted after at most as many releases as requests were in flight when it became first
//! (property-tested). Each type gets at most one probe per `resample_after_us`, so probes
//! are at most `types / resample_after` of the admissions (14 TPC-W types, 5 s: ≤ 2.8/s).
//! `fifo` and `sjf-aging` need no probes (every waiting request is admitted in bounded
//! time, hence every type is sampled); there `arrive_probe` is `arrive`.
//!
//! **Bounded charges (optional, beyond the paper).** With `max_charge_share = s < 1`, a
//! request at the head of the queue needs at most `s` of the capacity free, so admitting
//! it never waits for the backend to drain: while fifo or sjf requests wait, the load
//! stays above `(1 − s)` × capacity (property-tested). Without the bound (`s = 1`, the
//! paper and the default), a type whose estimate reaches the capacity runs alone and every
//! such request drains the backend first: in the closed-loop model
//! (`shortfirst gatekeeper model`, 4 processors, twice the saturating load, capacity
//! 200 ms below a 300 ms type) fifo ran at 0.30 of peak unbounded and 1.03 with `s = 1/4`.
//! The bound under-charges only types costing more than `s` of the capacity, so it
//! changes nothing while the capacity holds `1/s` of the costliest requests
//! (`shortfirst gatekeeper calibrate` never stops below 4 of them); it matters when
//! estimates grow past what the calibration saw.
//!
//! **Concurrency cap (optional, beyond the paper).** With `max_in_flight = Some(n)`, a
//! request is also held while `n` requests are in flight, whatever their costs. Cost-based
//! capacity bounds the backend's *work*; backends that collapse on the *number* of
//! concurrent requests (processes, connections, lock holders) also need this bound, and
//! under SJF the admitted set skews to cheap requests, so cost alone can let many in.
//!
//! **Dispatch.** After every event (arrival, release, cancel, expiry, capacity change,
//! timer) the gate repeatedly picks the policy's next request and admits it if it fits;
//! it stops at the first pick that does not fit. It never admits a request the policy did
//! not pick just because it is smaller: that would starve large requests (FIFO) or break
//! the aging bound.
//!
//! **Policies.** With `cost` the charge, `arrival` the arrival time and `seq` the arrival
//! order (ties):
//! - `fifo`: the oldest waiting request.
//! - `sjf`: the smallest `(cost, seq)`; non-preemptive (admitted requests run to completion).
//! - `sjf-aging:X`: each waiting request `o` has a bound `deadline_o = arrival_o + X * cost_o`
//!   and an *earliest start* `start_o`: by the expected finish times of the admitted requests
//!   (admission time + charge, or `now` for one already past it), the first moment `o`
//!   would fit — or, if starting then would still run `o` past the bound its older requests
//!   set (below), the start of the request that set that bound, since `o` cannot go before
//!   it. Admitting `r` now occupies its share of capacity until about `now + cost_r`.
//!   A request `r` may go ahead of an older waiting request `o` only if that does not
//!   delay `o` past its bound or at all: `now + cost_r <= max(deadline_o, start_o)`
//!   (`r` finishes before `o`'s bound, or before `o` could start anyway). The oldest request
//!   is always allowed. Among the allowed requests that fit, a *due* one
//!   (`deadline <= now`) with the earliest `(deadline, seq)` is admitted first, otherwise
//!   the one with the smallest `(cost, seq)`.
//!
//!   This is the paper's rule ("shorter requests can be promoted towards the head of the
//!   queue only if this promotion does not cause any pending request to be delayed more
//!   than its bound", §3.2) plus *backfilling*: when an overdue request does not fit yet,
//!   capacity it cannot use is not left idle, but only for requests expected to finish
//!   before it could start. `X = 0` is FIFO with that backfilling (nobody is delayed, by the
//!   estimates); `X → ∞` is `sjf`; values in between trade mean response time against the
//!   largest requests' waits (paper §3.2, §5.2). The guarantee, in estimated time: no
//!   waiting request is overtaken in a way that makes it exceed its bound or start later
//!   than it could have. Estimates are means, so an individual request can overrun its
//!   charge and delay the start it was expected to free.
//!
//!   Bounded: one dispatch step scans at most [`AGING_SCAN_LIMIT`] waiting requests in
//!   arrival order (requests beyond it wait until they are within it) and walks the
//!   admitted requests' finish times once.
//!
//! **Overload.** The queue holds at most `max_queue_len` requests: an arrival that finds it
//! full is rejected ([`Rejection::QueueFull`]) and the queue is untouched (tail drop; the
//! proxy answers 503 + Retry-After). With `max_queue_wait_us`, a request that has waited
//! that long is removed by [`Gate::expire`] (the proxy answers 503). The default is the
//! paper's: no wait limit, only the length bound, which is a memory guard.
//!
//! **Time.** `now_us` must not go backwards; an earlier value is treated as the latest value
//! seen, so a misbehaving clock cannot reorder the queue.
//!
//! Must not know: sockets, HTTP, tokio, the wall clock, how costs are measured.

pub mod auto;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// Smallest charge: a zero cost would let unbounded numbers of requests in.
pub const MIN_COST_US: u64 = 1;

/// Largest X accepted by `sjf-aging:X`; beyond this, use `sjf`.
pub const MAX_AGING_FACTOR: f64 = 1e6;

/// sjf-aging: waiting requests examined per dispatch step, oldest first. Requests younger
/// than this many others are not considered for admission until older ones leave.
pub const AGING_SCAN_LIMIT: usize = 1024;

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum AdmissionError {
    #[error("policy {input:?}: expected `fifo`, `sjf` or `sjf-aging:X` with X a number in 0..={max}", max = MAX_AGING_FACTOR)]
    BadPolicy { input: String },
    #[error("capacity must be at least {min} µs of cost, got {capacity_us}", min = MIN_COST_US)]
    BadCapacity { capacity_us: u64 },
    #[error("max_queue_len must be at least 1")]
    BadQueueLen,
    #[error("max_in_flight must be at least 1")]
    BadInFlight,
    #[error("max_charge_share must be in (0, 1], got {share}")]
    BadChargeShare { share: f64 },
    #[error("estimator: {what}")]
    BadEstimator { what: String },
    #[error("request type {type_index} out of range: the estimator tracks {num_types} types")]
    UnknownType { type_index: usize, num_types: usize },
    #[error("ticket for request {id} is not outstanding in this gate")]
    UnknownTicket { id: u64 },
}

// ---------------------------------------------------------------------------------------
// Cost estimation
// ---------------------------------------------------------------------------------------

/// What one completed request teaches the estimator.
///
/// The paper learns raw service time (`wall`). On a backend that shares its processors
/// among the requests it runs, service time is about demand × (requests sharing it) /
/// processors, so it includes the gate's own admissions: a cost learned while many
/// requests ran charges each request as if it ran that slowly alone. `share` divides that
/// out. Which is better is an empirical question, and in the closed-loop model
/// (`shortfirst sim gatekeeper`, capacity calibrated for each basis) neither wins
/// everywhere: `wall` held fifo at full throughput at twice the saturating load, and
/// `share` did worse after a cold start where every client arrives at once (its samples
/// then carry the backend's thrashing too). Hence `wall` stays the default.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Basis {
    /// Service time divided, moment by moment, by the requests admitted at that moment
    /// (`∫ dt / in_flight(t)` over the request's life, [`Gate::share_us`]): exactly the
    /// request's demand on a one-processor processor-sharing backend, demand / processors on
    /// a P-processor one once P or more run, and at most the service time. It no longer
    /// grows with the concurrency the gate admits, so estimates stay put when admission
    /// changes the load, and types measured under different loads stay comparable.
    Share,
    /// The paper's rule (the default): raw service time, which on a shared backend
    /// includes the slowdown from the other requests running at the same time.
    #[default]
    Wall,
}

impl FromStr for Basis {
    type Err = AdmissionError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim() {
            "share" => Ok(Basis::Share),
            "wall" => Ok(Basis::Wall),
            other => Err(AdmissionError::BadEstimator { what: format!("basis {other:?}: expected `share` or `wall`") }),
        }
    }
}

impl fmt::Display for Basis {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Basis::Share => "share",
            Basis::Wall => "wall",
        })
    }
}

/// One successful request's measurements, in microseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sample {
    /// Upstream service time (request sent → last byte of the response).
    pub wall_us: u64,
    /// Its share of the backend over its admission ([`Gate::share_us`]).
    pub share_us: u64,
}

/// How the per-type cost estimate learns.
///
/// **Warm-up.** A type with no sample yet is charged the largest current estimate of any
/// type that has one (or `cold_cost_us` when no type has any): under-charging an unknown,
/// possibly expensive type could let a burst of it overload the backend, which is what
/// admission control exists to prevent; over-charging costs one request some waiting.
/// The first `ceil(1/alpha)` samples are averaged arithmetically (each has equal weight),
/// so the early estimate is not dominated by the first, often cold, sample.
///
/// **Reaction speed.** After the warm-up the estimate is an exponentially weighted moving
/// average with weight `alpha` per sample: after a step change in a type's true cost, the
/// estimate has covered 90% of the step after `ceil(ln 0.1 / ln(1 - alpha))` samples of
/// that type (22 for the default `alpha = 0.1`). At 10 requests/s of a type that is about
/// 2 s; the paper reports convergence within 50 s.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EstimatorConfig {
    /// Weight of each new sample once warm, in (0, 1].
    pub alpha: f64,
    /// Charge for an unseen type when no type has been measured yet.
    pub cold_cost_us: u64,
    /// Samples are clamped to at most this (a hung request must not poison the average).
    pub max_sample_us: u64,
    /// Which measurement of a request is its cost sample.
    #[serde(default)]
    pub basis: Basis,
    /// A type that has had no sample (and no probe) for this long has its next request
    /// charged as a probe ([`CostEstimator::charge`], "Re-sampling" in the module docs);
    /// `None`: never (the paper's rule taken literally).
    #[serde(default = "default_resample_after_us")]
    pub resample_after_us: Option<u64>,
}

/// Default [`EstimatorConfig::resample_after_us`]: 5 s. Short enough that a starved type is
/// re-measured several times within the paper's 50 s convergence horizon and within a
/// client's patience (the TPC-W sweep's browsers give up after 7 s, the queue after 6 s);
/// long enough that probes stay a small share of admissions (one per type per 5 s).
pub const DEFAULT_RESAMPLE_AFTER_US: u64 = 5_000_000;

fn default_resample_after_us() -> Option<u64> {
    Some(DEFAULT_RESAMPLE_AFTER_US)
}

impl Default for EstimatorConfig {
    fn default() -> Self {
        EstimatorConfig {
            alpha: 0.1,
            cold_cost_us: 10_000,
            max_sample_us: 600_000_000,
            basis: Basis::Wall,
            resample_after_us: default_resample_after_us(),
        }
    }
}

impl EstimatorConfig {
    /// Samples of one type needed to cover 90% of a step change in its cost.
    pub fn samples_to_converge_90pct(&self) -> u64 {
        if self.alpha >= 1.0 {
            return 1;
        }
        (0.1f64.ln() / (1.0 - self.alpha).ln()).ceil() as u64
    }

    /// Samples averaged arithmetically before the EWMA takes over.
    pub fn warmup_samples(&self) -> u64 {
        (1.0 / self.alpha).ceil() as u64
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct TypeEstimate {
    mean_us: f64,
    samples: u64,
    /// Latest time the type was sampled, probed, or first charged (`None`: none yet);
    /// re-sampling counts staleness from here.
    fresh_us: Option<u64>,
}

/// What a request is charged at arrival ([`CostEstimator::charge`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Charge {
    /// The type's estimate, as [`CostEstimator::estimate_us`].
    pub cost_us: u64,
    /// Admit it as a probe ([`Gate::arrive_probe`]): its type has gone
    /// `resample_after_us` without a sample.
    pub probe: bool,
}

/// Per-type online cost estimates for a fixed number of types (`0..num_types`).
#[derive(Debug, Clone)]
pub struct CostEstimator {
    cfg: EstimatorConfig,
    types: Vec<TypeEstimate>,
}

impl CostEstimator {
    pub fn new(num_types: usize, cfg: EstimatorConfig) -> Result<Self, AdmissionError> {
        if !(cfg.alpha > 0.0 && cfg.alpha <= 1.0) {
            return Err(AdmissionError::BadEstimator { what: format!("alpha must be in (0, 1], got {}", cfg.alpha) });
        }
        if cfg.cold_cost_us < MIN_COST_US || cfg.max_sample_us < MIN_COST_US {
            return Err(AdmissionError::BadEstimator {
                what: "cold_cost_us and max_sample_us must be at least 1".into(),
            });
        }
        if num_types == 0 {
            return Err(AdmissionError::BadEstimator { what: "num_types must be at least 1".into() });
        }
        if cfg.resample_after_us == Some(0) {
            return Err(AdmissionError::BadEstimator {
                what: "resample_after_us must be at least 1 (or none to never re-sample)".into(),
            });
        }
        Ok(CostEstimator { cfg, types: vec![TypeEstimate::default(); num_types] })
    }

    pub fn config(&self) -> &EstimatorConfig {
        &self.cfg
    }

    pub fn num_types(&self) -> usize {
        self.types.len()
    }

    fn check(&self, type_index: usize) -> Result<(), AdmissionError> {
        if type_index < self.types.len() {
            Ok(())
        } else {
            Err(AdmissionError::UnknownType { type_index, num_types: self.types.len() })
        }
    }

    /// The charge for a request of this type right now (see [`EstimatorConfig`] for unseen types).
    pub fn estimate_us(&self, type_index: usize) -> Result<u64, AdmissionError> {
        self.check(type_index)?;
        let t = self.types[type_index];
        if t.samples > 0 {
            return Ok((t.mean_us.round() as u64).max(MIN_COST_US));
        }
        let largest = self
            .types
            .iter()
            .filter(|t| t.samples > 0)
            .map(|t| t.mean_us)
            .fold(None, |acc: Option<f64>, m| Some(acc.map_or(m, |a| a.max(m))));
        Ok(largest.map_or(self.cfg.cold_cost_us, |m| (m.round() as u64).max(MIN_COST_US)))
    }

    /// Record one successful measurement. Failed requests (refused, reset, timed out,
    /// abandoned) must not be passed here: their duration says nothing about the cost.
    pub fn observe(&mut self, type_index: usize, service_us: u64) -> Result<(), AdmissionError> {
        self.check(type_index)?;
        let x = service_us.clamp(MIN_COST_US, self.cfg.max_sample_us) as f64;
        let warmup = self.cfg.warmup_samples();
        let t = &mut self.types[type_index];
        t.samples += 1;
        let weight = if t.samples <= warmup { 1.0 / t.samples as f64 } else { self.cfg.alpha };
        t.mean_us += weight * (x - t.mean_us);
        Ok(())
    }

    /// Record one successful request, learning the measurement the [`Basis`] names.
    pub fn observe_request(&mut self, type_index: usize, sample: Sample) -> Result<(), AdmissionError> {
        self.observe(type_index, self.sample_us(sample))
    }

    /// [`CostEstimator::observe_request`] at `now_us` (the clock [`CostEstimator::charge`]
    /// is given): the type counts as freshly sampled, so it is not probed before
    /// `resample_after_us` has passed again.
    pub fn observe_request_at(&mut self, type_index: usize, sample: Sample, now_us: u64) -> Result<(), AdmissionError> {
        self.observe_request(type_index, sample)?;
        let t = &mut self.types[type_index];
        t.fresh_us = Some(t.fresh_us.map_or(now_us, |f| f.max(now_us)));
        Ok(())
    }

    /// The charge for a request of this type arriving at `now_us`, and whether it is a probe:
    /// with `resample_after_us = Some(d)`, a type whose last sample, last probe or first
    /// charge is at least `d` old has this request marked as a probe, and the staleness
    /// clock restarts now (so a probe that yields no sample — cancelled, failed, expired —
    /// is followed by another `d` later, and never more than one per `d`). The first charge
    /// of a type only starts its clock. `now_us` must be the clock passed to
    /// [`CostEstimator::observe_request_at`]; it should not go backwards (an earlier value
    /// only delays probes).
    pub fn charge(&mut self, type_index: usize, now_us: u64) -> Result<Charge, AdmissionError> {
        let cost_us = self.estimate_us(type_index)?;
        let t = &mut self.types[type_index];
        let probe = match (self.cfg.resample_after_us, t.fresh_us) {
            (None, _) => false,
            (Some(_), None) => {
                t.fresh_us = Some(now_us);
                false
            }
            (Some(after), Some(fresh)) => {
                let stale = now_us.saturating_sub(fresh) >= after;
                if stale {
                    t.fresh_us = Some(now_us);
                }
                stale
            }
        };
        Ok(Charge { cost_us, probe })
    }

    /// The cost sample the [`Basis`] takes from a request's measurements.
    pub fn sample_us(&self, sample: Sample) -> u64 {
        match self.cfg.basis {
            Basis::Share => sample.share_us,
            Basis::Wall => sample.wall_us,
        }
    }

    /// Whether the type is past its warm-up (its estimate is an EWMA, not a short mean).
    pub fn is_warm(&self, type_index: usize) -> bool {
        self.types.get(type_index).is_some_and(|t| t.samples >= self.cfg.warmup_samples())
    }

    /// Successful samples seen for this type.
    pub fn samples(&self, type_index: usize) -> Result<u64, AdmissionError> {
        self.check(type_index)?;
        Ok(self.types[type_index].samples)
    }
}

// ---------------------------------------------------------------------------------------
// Policy
// ---------------------------------------------------------------------------------------

/// Order of admission from the queue. See the module docs for the precise rules.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub enum Policy {
    Fifo,
    Sjf,
    /// No request waits longer than `factor` × its cost if capacity allows.
    SjfAging {
        factor: f64,
    },
}

impl FromStr for Policy {
    type Err = AdmissionError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || AdmissionError::BadPolicy { input: s.to_string() };
        match s.trim() {
            "fifo" => Ok(Policy::Fifo),
            "sjf" => Ok(Policy::Sjf),
            other => {
                let x = other.strip_prefix("sjf-aging:").ok_or_else(bad)?;
                let factor: f64 = x.trim().parse().map_err(|_| bad())?;
                if !(0.0..=MAX_AGING_FACTOR).contains(&factor) {
                    return Err(bad());
                }
                Ok(Policy::SjfAging { factor })
            }
        }
    }
}

impl fmt::Display for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Policy::Fifo => write!(f, "fifo"),
            Policy::Sjf => write!(f, "sjf"),
            Policy::SjfAging { factor } => write!(f, "sjf-aging:{factor}"),
        }
    }
}

// ---------------------------------------------------------------------------------------
// Gate
// ---------------------------------------------------------------------------------------

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GateConfig {
    /// Capacity in cost units (µs of expected service time, summed over admitted requests).
    pub capacity_us: u64,
    pub policy: Policy,
    /// Bound on waiting requests; arrivals beyond it are rejected.
    pub max_queue_len: usize,
    /// Requests waiting this long are expired (rejected) by [`Gate::expire`]; `None` = never.
    pub max_queue_wait_us: Option<u64>,
    /// At most this many admitted requests at once (`None`: cost capacity only).
    pub max_in_flight: Option<usize>,
    /// No request is charged more than this fraction of the capacity (in (0, 1]); see
    /// "Bounded charges" in the module docs. 1 (the default) is the paper's rule.
    #[serde(default = "unbounded_charge_share")]
    pub max_charge_share: f64,
}

fn unbounded_charge_share() -> f64 {
    1.0
}

impl GateConfig {
    pub fn new(capacity_us: u64, policy: Policy) -> Self {
        GateConfig {
            capacity_us,
            policy,
            max_queue_len: 100_000,
            max_queue_wait_us: None,
            max_in_flight: None,
            max_charge_share: 1.0,
        }
    }

    /// The largest charge at the current capacity (at least [`MIN_COST_US`]); unbounded
    /// when `max_charge_share` is 1 (the paper's rule).
    pub fn max_charge_us(&self) -> u64 {
        if self.max_charge_share >= 1.0 {
            return u64::MAX;
        }
        ((self.capacity_us as f64 * self.max_charge_share) as u64).max(MIN_COST_US)
    }
}

/// Identifies a request from its arrival at the gate until it leaves (admitted, cancelled,
/// expired). Increasing in arrival order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct RequestId(pub u64);

impl fmt::Display for RequestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "#{}", self.0)
    }
}

/// Proof of admission. Not `Clone`: handing it to [`Gate::release`] consumes it, so a
/// charge cannot be released twice.
#[derive(Debug, PartialEq, Eq)]
#[must_use = "an admitted request's ticket must be released when it finishes or fails"]
pub struct Ticket {
    id: RequestId,
    charge_us: u64,
}

impl Ticket {
    pub fn id(&self) -> RequestId {
        self.id
    }
    pub fn charge_us(&self) -> u64 {
        self.charge_us
    }
}

/// A request that left the queue for the backend.
#[derive(Debug, PartialEq, Eq)]
pub struct Admitted {
    pub ticket: Ticket,
    /// Time spent in the queue (0 when admitted on arrival).
    pub waited_us: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Rejection {
    /// The queue already held `max_queue_len` requests.
    QueueFull,
}

#[derive(Debug, Clone, Copy)]
struct Waiting {
    cost_us: u64,
    arrival_us: u64,
    deadline_us: u64,
}

/// Admission accounting plus the admission queue. See the module docs.
#[derive(Debug)]
pub struct Gate {
    cfg: GateConfig,
    next_seq: u64,
    last_now_us: u64,
    load_us: u64,
    /// `∫ dt / in_flight(t)` over the time anything was in flight, µs: a processor-sharing
    /// virtual clock. A request's share is its advance while the request was admitted.
    share_clock_us: f64,
    /// Admitted, unfinished: id → (charge, expected finish = admission time + charge,
    /// share clock at admission).
    running: HashMap<u64, (u64, u64, f64)>,
    /// `(expected finish, seq)` of admitted requests (sjf-aging's earliest starts).
    by_finish: BTreeSet<(u64, u64)>,
    /// Waiting requests by arrival order.
    queue: BTreeMap<u64, Waiting>,
    /// `(cost, seq)` of waiting requests: the SJF order.
    by_cost: BTreeSet<(u64, u64)>,
    /// `(deadline, seq)` of waiting requests (sjf-aging only).
    by_deadline: BTreeSet<(u64, u64)>,
    /// Waiting probes, by arrival (sjf only): ahead of every other waiting request.
    probes: BTreeSet<u64>,
}

impl Gate {
    pub fn new(cfg: GateConfig) -> Result<Self, AdmissionError> {
        if cfg.capacity_us < MIN_COST_US {
            return Err(AdmissionError::BadCapacity { capacity_us: cfg.capacity_us });
        }
        if cfg.max_queue_len == 0 {
            return Err(AdmissionError::BadQueueLen);
        }
        if cfg.max_in_flight == Some(0) {
            return Err(AdmissionError::BadInFlight);
        }
        if !(cfg.max_charge_share > 0.0 && cfg.max_charge_share <= 1.0) {
            return Err(AdmissionError::BadChargeShare { share: cfg.max_charge_share });
        }
        Ok(Gate {
            cfg,
            next_seq: 0,
            last_now_us: 0,
            load_us: 0,
            share_clock_us: 0.0,
            running: HashMap::new(),
            by_finish: BTreeSet::new(),
            queue: BTreeMap::new(),
            by_cost: BTreeSet::new(),
            by_deadline: BTreeSet::new(),
            probes: BTreeSet::new(),
        })
    }

    pub fn config(&self) -> &GateConfig {
        &self.cfg
    }
    pub fn capacity_us(&self) -> u64 {
        self.cfg.capacity_us
    }
    /// Sum of the charges of admitted, unfinished requests.
    pub fn load_us(&self) -> u64 {
        self.load_us
    }
    pub fn queue_len(&self) -> usize {
        self.queue.len()
    }
    /// Admitted, unfinished requests.
    pub fn in_flight(&self) -> usize {
        self.running.len()
    }
    /// The charge of the waiting request the policy looks at first (`None`: nothing waits):
    /// under `fifo` the oldest, under `sjf` the oldest probe or else the cheapest, under
    /// `sjf-aging` the cheapest. While it waits with `load + head_cost > capacity` and
    /// fewer than `max_in_flight` are admitted, `fifo` and `sjf` leave `capacity − load`
    /// unused (metrics: why capacity is idle while requests wait).
    pub fn head_cost_us(&self) -> Option<u64> {
        let seq = match self.cfg.policy {
            Policy::Fifo => *self.queue.first_key_value()?.0,
            Policy::Sjf => self.probes.first().copied().or_else(|| self.by_cost.first().map(|&(_, s)| s))?,
            Policy::SjfAging { .. } => return self.by_cost.first().map(|&(c, _)| c),
        };
        Some(self.queue[&seq].cost_us)
    }

    pub fn is_queued(&self, id: RequestId) -> bool {
        self.queue.contains_key(&id.0)
    }

    fn clock(&mut self, now_us: u64) -> u64 {
        let now_us = self.last_now_us.max(now_us);
        self.share_clock_us = self.share_clock_at(now_us);
        self.last_now_us = now_us;
        now_us
    }

    /// The share clock at `now_us` (≥ the last time seen), before anything changes then.
    fn share_clock_at(&self, now_us: u64) -> f64 {
        let n = self.running.len();
        if n == 0 {
            return self.share_clock_us;
        }
        self.share_clock_us + now_us.saturating_sub(self.last_now_us) as f64 / n as f64
    }

    /// An admitted request's *share* of the backend so far: `∫ dt / in_flight(t)` from its
    /// admission to `now_us`, in µs. On a backend that splits its capacity evenly among the
    /// admitted requests this is the service the request received, whatever the concurrency
    /// ([`Basis::Share`]); it never exceeds the time since admission. Call it before
    /// [`Gate::release`] (which consumes the ticket). Read-only.
    pub fn share_us(&self, now_us: u64, ticket: &Ticket) -> Result<u64, AdmissionError> {
        let &(_, _, at_admission) =
            self.running.get(&ticket.id.0).ok_or(AdmissionError::UnknownTicket { id: ticket.id.0 })?;
        let now_us = self.last_now_us.max(now_us);
        Ok((self.share_clock_at(now_us) - at_admission).max(0.0).round() as u64)
    }

    /// A request arrives with its estimated cost. It joins the queue and the gate
    /// dispatches; the returned admissions may include it (and, after a capacity change,
    /// others). Rejected without side effects when the queue is full.
    pub fn arrive(&mut self, now_us: u64, cost_us: u64) -> Result<(RequestId, Vec<Admitted>), Rejection> {
        self.arrive_as(now_us, cost_us, false)
    }

    /// [`Gate::arrive`] for a probe ([`Charge::probe`]): under `sjf` it waits ahead of every
    /// non-probe (probes in arrival order), charged `cost_us` as any request, so it is
    /// admitted as soon as it fits. Under `fifo` and `sjf-aging` it is an ordinary arrival.
    pub fn arrive_probe(&mut self, now_us: u64, cost_us: u64) -> Result<(RequestId, Vec<Admitted>), Rejection> {
        self.arrive_as(now_us, cost_us, true)
    }

    /// Waiting probes (sjf only; 0 under other policies).
    pub fn probes_waiting(&self) -> usize {
        self.probes.len()
    }

    fn arrive_as(&mut self, now_us: u64, cost_us: u64, probe: bool) -> Result<(RequestId, Vec<Admitted>), Rejection> {
        let now_us = self.clock(now_us);
        if self.queue.len() >= self.cfg.max_queue_len {
            return Err(Rejection::QueueFull);
        }
        let cost_us = cost_us.clamp(MIN_COST_US, self.cfg.max_charge_us());
        let seq = self.next_seq;
        self.next_seq += 1;
        let deadline_us = match self.cfg.policy {
            Policy::SjfAging { factor } => {
                now_us.saturating_add((factor * cost_us as f64).min(u64::MAX as f64 / 2.0) as u64)
            }
            _ => u64::MAX,
        };
        self.queue.insert(seq, Waiting { cost_us, arrival_us: now_us, deadline_us });
        self.by_cost.insert((cost_us, seq));
        if matches!(self.cfg.policy, Policy::SjfAging { .. }) {
            self.by_deadline.insert((deadline_us, seq));
        }
        if probe && self.cfg.policy == Policy::Sjf {
            self.probes.insert(seq);
        }
        Ok((RequestId(seq), self.dispatch(now_us)))
    }

    /// An admitted request finished (successfully or not): its charge is returned and the
    /// queue is dispatched.
    pub fn release(&mut self, now_us: u64, ticket: Ticket) -> Result<Vec<Admitted>, AdmissionError> {
        let now_us = self.clock(now_us);
        let (charge, finish, _) =
            self.running.remove(&ticket.id.0).ok_or(AdmissionError::UnknownTicket { id: ticket.id.0 })?;
        debug_assert_eq!(charge, ticket.charge_us);
        self.by_finish.remove(&(finish, ticket.id.0));
        self.load_us -= charge;
        Ok(self.dispatch(now_us))
    }

    /// Replace an admitted request's charge with a fresher estimate of its cost (clamped as
    /// on arrival). The load changes by the difference and the request's expected finish
    /// (admission time + charge) moves with it; a lower load may admit waiting requests
    /// (returned). A higher charge revokes nothing: as after lowering the capacity, nothing
    /// more is admitted until the load is back under it. The ticket carries the new charge,
    /// which its release returns.
    pub fn recharge(
        &mut self,
        now_us: u64,
        ticket: &mut Ticket,
        cost_us: u64,
    ) -> Result<Vec<Admitted>, AdmissionError> {
        let now_us = self.clock(now_us);
        let cost_us = cost_us.clamp(MIN_COST_US, self.cfg.max_charge_us());
        let id = ticket.id.0;
        let entry = self.running.get_mut(&id).ok_or(AdmissionError::UnknownTicket { id })?;
        let (old, finish, _) = *entry;
        if old == cost_us {
            return Ok(Vec::new());
        }
        // finish = admission time + old charge, so it is at least `old`.
        let new_finish = (finish - old).saturating_add(cost_us);
        entry.0 = cost_us;
        entry.1 = new_finish;
        self.by_finish.remove(&(finish, id));
        self.by_finish.insert((new_finish, id));
        self.load_us = self.load_us - old + cost_us;
        ticket.charge_us = cost_us;
        Ok(self.dispatch(now_us))
    }

    /// Re-price waiting requests: each of `ids` still waiting is charged `cost_us` from now on
    /// (clamped as on arrival), the charge it is admitted with unless re-priced again; ids not
    /// waiting are ignored. Then the gate dispatches (returned admissions): a lower charge may
    /// let the request the policy picks fit now. Drivers that charge at admission
    /// ([`Gate::recharge_waited`]) call this with a type's new estimate for that type's
    /// waiting requests, so the fit test sees the charge admission would give, not the one
    /// the request arrived with: measured (session 6, open model at twice the peak, fifo),
    /// requests queued while Best Sellers' estimate was inflated (1.35-1.82 s against
    /// 0.3-0.5 s current) headed the fifo queue for seconds and held the backend at 1-3
    /// running requests, although each would have been recharged to the current estimate
    /// once admitted.
    ///
    /// **`fifo` only**; under `sjf` and `sjf-aging` this does nothing (returns no
    /// admissions). There the charges are also the queue's order, and re-pricing a type's
    /// requests to one charge makes them leave in arrival order among themselves, where the
    /// small differences of their arrival charges had mixed them. Measured (session 6,
    /// closed model at twice the saturating load, sjf, unbounded charges): with re-pricing
    /// the Best Sellers queue, overloaded for the whole run, became a fifo behind the 7 s
    /// wait limit: 80 instead of 48 queued, their mean response time 7.0 s instead of
    /// 3.0 s, the mean over all requests 401 ms instead of 196 ms (throughput by work
    /// unchanged, 4.0 of 4 processors). Under `fifo` the order is arrival whatever the
    /// charges, so only the fit test changes. Bounded: `O(k log n)` for `k` ids, then one
    /// dispatch.
    pub fn reprice_waiting(
        &mut self,
        now_us: u64,
        ids: impl IntoIterator<Item = RequestId>,
        cost_us: u64,
    ) -> Vec<Admitted> {
        if !self.reprices_waiting() {
            return Vec::new();
        }
        let now_us = self.clock(now_us);
        let cost_us = cost_us.clamp(MIN_COST_US, self.cfg.max_charge_us());
        let mut changed = false;
        for id in ids {
            let Some(w) = self.queue.get_mut(&id.0) else { continue };
            if w.cost_us == cost_us {
                continue;
            }
            self.by_cost.remove(&(w.cost_us, id.0));
            w.cost_us = cost_us;
            self.by_cost.insert((cost_us, id.0));
            changed = true;
        }
        if changed {
            self.dispatch(now_us)
        } else {
            Vec::new()
        }
    }

    /// Whether [`Gate::reprice_waiting`] acts under this gate's policy (`fifo` only), so a
    /// driver can skip gathering a type's waiting requests when it would not.
    pub fn reprices_waiting(&self) -> bool {
        self.cfg.policy == Policy::Fifo
    }

    /// Recharge every request in `admitted` that waited with the cost `cost_of` gives for it
    /// now ([`Gate::recharge`]; `None`: keep its charge), including the requests a lower
    /// charge admits in turn. Returns all of them, tickets carrying their new charges. The
    /// drivers (proxy, model) call this on each batch of admissions, so the cascade is
    /// written once. Bounded: each request is admitted, hence recharged, at most once.
    /// `admitted` must come from this gate; a ticket it does not hold (a caller's bug) keeps
    /// its charge, so no admission is ever lost.
    pub fn recharge_waited(
        &mut self,
        now_us: u64,
        admitted: Vec<Admitted>,
        mut cost_of: impl FnMut(RequestId) -> Option<u64>,
    ) -> Vec<Admitted> {
        let mut todo = std::collections::VecDeque::from(admitted);
        let mut out = Vec::with_capacity(todo.len());
        while let Some(mut a) = todo.pop_front() {
            if a.waited_us > 0 {
                if let Some(cost_us) = cost_of(a.ticket.id()) {
                    match self.recharge(now_us, &mut a.ticket, cost_us) {
                        Ok(more) => todo.extend(more),
                        Err(e) => debug_assert!(false, "recharge of an admission this gate made: {e}"),
                    }
                }
            }
            out.push(a);
        }
        out
    }

    /// A waiting request left (client disconnected). Returns `None` if it was not waiting
    /// (already admitted, expired, or unknown): then nothing changed.
    pub fn cancel(&mut self, now_us: u64, id: RequestId) -> Option<Vec<Admitted>> {
        let now_us = self.clock(now_us);
        self.remove_waiting(id.0)?;
        // Removing an old request can unblock a cheaper one under sjf-aging.
        Some(self.dispatch(now_us))
    }

    /// Remove requests that have waited `max_queue_wait_us` or longer. Returns the expired
    /// ids (to be answered 503) and any admissions their removal allowed.
    pub fn expire(&mut self, now_us: u64) -> (Vec<RequestId>, Vec<Admitted>) {
        let now_us = self.clock(now_us);
        let Some(max_wait) = self.cfg.max_queue_wait_us else {
            return (Vec::new(), Vec::new());
        };
        let mut expired = Vec::new();
        // Arrival times are monotone in seq, so the oldest are first.
        while let Some((&seq, w)) = self.queue.first_key_value() {
            if now_us.saturating_sub(w.arrival_us) < max_wait {
                break;
            }
            self.remove_waiting(seq);
            expired.push(RequestId(seq));
        }
        let admitted = if expired.is_empty() { Vec::new() } else { self.dispatch(now_us) };
        (expired, admitted)
    }

    /// Dispatch on a timer tick (the aging pick can change with time alone).
    pub fn poll(&mut self, now_us: u64) -> Vec<Admitted> {
        let now_us = self.clock(now_us);
        self.dispatch(now_us)
    }

    /// The earliest time at which [`Gate::expire`] or [`Gate::poll`] may have something to
    /// do: the oldest request's wait limit, or the next aging deadline still in the future.
    pub fn next_wakeup_us(&self) -> Option<u64> {
        let expiry = self
            .cfg
            .max_queue_wait_us
            .and_then(|max| self.queue.first_key_value().map(|(_, w)| w.arrival_us.saturating_add(max)));
        let deadline = self.by_deadline.range((self.last_now_us.saturating_add(1), 0)..).next().map(|&(d, _)| d);
        match (expiry, deadline) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Change the capacity (auto-tuning, calibration). Lowering it below the current load
    /// admits nothing until enough requests finish; nothing admitted is revoked.
    pub fn set_capacity(&mut self, now_us: u64, capacity_us: u64) -> Result<Vec<Admitted>, AdmissionError> {
        if capacity_us < MIN_COST_US {
            return Err(AdmissionError::BadCapacity { capacity_us });
        }
        let now_us = self.clock(now_us);
        self.cfg.capacity_us = capacity_us;
        Ok(self.dispatch(now_us))
    }

    fn remove_waiting(&mut self, seq: u64) -> Option<Waiting> {
        let w = self.queue.remove(&seq)?;
        self.by_cost.remove(&(w.cost_us, seq));
        self.by_deadline.remove(&(w.deadline_us, seq));
        self.probes.remove(&seq);
        Some(w)
    }

    fn fits(&self, cost_us: u64) -> bool {
        if self.cfg.max_in_flight.is_some_and(|m| self.running.len() >= m) {
            return false;
        }
        self.running.is_empty() || self.load_us.saturating_add(cost_us) <= self.cfg.capacity_us
    }

    /// The next request to admit now, or `None` when the policy admits nothing more.
    fn next_admission(&self, now_us: u64) -> Option<u64> {
        let head = match self.cfg.policy {
            Policy::Fifo => self.queue.first_key_value().map(|(&s, _)| s)?,
            // A waiting probe goes first (re-sampling, module docs).
            Policy::Sjf => self.probes.first().copied().or_else(|| self.by_cost.first().map(|&(_, s)| s))?,
            Policy::SjfAging { .. } => return self.pick_aging(now_us),
        };
        // fifo and sjf never admit a request they did not pick: under fifo that would
        // starve large requests; under sjf nothing cheaper than the pick exists (or the
        // pick is a probe, which must not be starved by cheaper ones).
        self.fits(self.queue[&head].cost_us).then_some(head)
    }

    /// sjf-aging (see the module docs): one pass over the queue in arrival order, carrying
    /// `bound = min over older o of max(deadline_o, start_o)`; `r` is allowed iff
    /// `now + cost_r <= bound`.
    fn pick_aging(&self, now_us: u64) -> Option<u64> {
        let min_cost = self.by_cost.first()?.0;
        if !self.fits(min_cost) {
            return None; // nothing fits: no need to look further
        }
        let profile = self.release_profile(now_us);
        let mut bound = u64::MAX;
        // The start (below) of the request that set `bound`.
        let mut bound_start = now_us;
        let mut best_due: Option<(u64, u64)> = None;
        let mut best_cost: Option<(u64, u64)> = None;
        for (&seq, w) in self.queue.iter().take(AGING_SCAN_LIMIT) {
            if now_us.saturating_add(w.cost_us) <= bound && self.fits(w.cost_us) {
                let (best, key) = if w.deadline_us <= now_us {
                    (&mut best_due, (w.deadline_us, seq))
                } else {
                    (&mut best_cost, (w.cost_us, seq))
                };
                *best = Some(best.map_or(key, |b| b.min(key)));
            }
            if w.deadline_us < bound {
                // `w`'s start: once it fits, and once it may go ahead of the older requests.
                // Started when it fits, would it still run past `bound`? Then it waits at
                // least until the request that set `bound` starts (starting later only runs
                // it further past). A lower bound on its real start either way, so the
                // guarantee holds. Taking "when it fits" alone let a request that fits now
                // but must wait for an older one pin `bound` to now: nothing younger got in
                // while the backend drained (session 7, `shortfirst gatekeeper model` warm-up:
                // one request running on 4 processors, 134 waiting).
                let fits_at = self.earliest_start_us(&profile, now_us, w.cost_us);
                let start = if fits_at.saturating_add(w.cost_us) <= bound { fits_at } else { fits_at.max(bound_start) };
                let own = w.deadline_us.max(start);
                if own < bound {
                    bound = own;
                    bound_start = start;
                }
            }
            if now_us.saturating_add(min_cost) > bound {
                break; // nothing younger can be allowed any more
            }
        }
        best_due.or(best_cost).map(|(_, s)| s)
    }

    /// Admitted requests in expected-finish order: `(finish, load after, in flight after)`,
    /// the state once every request up to and including this one has finished. Finish times
    /// already past count as `now` (overdue, expected any moment).
    fn release_profile(&self, now_us: u64) -> Vec<(u64, u64, usize)> {
        let mut load = self.load_us;
        let mut count = self.running.len();
        let mut out = Vec::with_capacity(count);
        for &(finish, seq) in &self.by_finish {
            load -= self.running[&seq].0;
            count -= 1;
            out.push((finish.max(now_us), load, count));
        }
        out
    }

    /// The first moment, by expected finish times, at which a request of this cost would
    /// fit (the rule of [`Gate::fits`] applied to the requests still running then).
    fn earliest_start_us(&self, profile: &[(u64, u64, usize)], now_us: u64, cost_us: u64) -> u64 {
        if self.fits(cost_us) {
            return now_us;
        }
        let fits_after = |&(_, load, count): &(u64, u64, usize)| {
            count == 0
                || (self.cfg.max_in_flight.map_or(true, |m| count < m)
                    && load.saturating_add(cost_us) <= self.cfg.capacity_us)
        };
        // Monotone: once enough has finished, more finishing keeps it fitting.
        let i = profile.partition_point(|p| !fits_after(p));
        profile.get(i).map_or(now_us, |p| p.0)
    }

    fn dispatch(&mut self, now_us: u64) -> Vec<Admitted> {
        let mut out = Vec::new();
        while let Some(seq) = self.next_admission(now_us) {
            let w = self.remove_waiting(seq).expect("picked request is waiting");
            let finish = now_us.saturating_add(w.cost_us);
            self.load_us += w.cost_us;
            self.running.insert(seq, (w.cost_us, finish, self.share_clock_us));
            self.by_finish.insert((finish, seq));
            out.push(Admitted {
                ticket: Ticket { id: RequestId(seq), charge_us: w.cost_us },
                waited_us: now_us - w.arrival_us,
            });
        }
        out
    }
}

#[cfg(test)]
mod tests;
