//! Per-type online cost estimates (the paper's moving average, with warm-up and
//! re-sampling; see the module docs of `admission`).

use std::str::FromStr;

use serde::{Deserialize, Serialize};

#[cfg(doc)]
use super::Gate;
use super::{AdmissionError, MIN_COST_US};

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
///
/// A backend that runs one request at a time in its own arrival order (one event loop,
/// one worker) does not share itself: a request admitted beside another waits inside it,
/// so its service time holds the other's, and its `share` half of it. `serial` takes the
/// time since the previous completion instead, which on such a backend is the request's
/// own time on it, at any number in flight.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Serialize,
    Deserialize,
    Default,
    strum::VariantNames,
    strum::Display,
    strum::IntoStaticStr,
    strum::EnumIter,
)]
#[serde(rename_all = "lowercase")]
#[strum(serialize_all = "lowercase")]
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
    /// The time from the later of the request's start and the previous completion of any
    /// admitted request to its own completion ([`Gate::serial_us`]): exactly its service
    /// on a backend that serves one request at a time in arrival order, however many are
    /// in flight, and at most the service time. What a request spends blocked inside such
    /// a backend while another runs (a timer, a wait on I/O) is not counted: the backend
    /// was not its own then.
    Serial,
    /// The backend's processor time spent on the request, as the driver measures it (the
    /// PostgreSQL driver reads its backend process's on-CPU time at admission and at idle):
    /// what the request takes from the backend's CPUs, whatever else runs beside it and
    /// however long it waits on them. A request the driver could not measure that way
    /// is sampled at its wall time. With this basis the capacity is the processor time of
    /// the work admitted at once.
    Cpu,
}

impl FromStr for Basis {
    type Err = AdmissionError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        use strum::{IntoEnumIterator, VariantNames};
        Basis::iter().find(|b| <&str>::from(b) == s.trim()).ok_or_else(|| AdmissionError::BadEstimator {
            what: format!("basis {:?}: expected {}", s.trim(), crate::names::one_of(Basis::VARIANTS)),
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
    /// Its time since the later of its start and the previous completion
    /// ([`Gate::serial_us`]).
    pub serial_us: u64,
    /// The backend's processor time spent on it, when the driver measured that.
    pub cpu_us: Option<u64>,
}

impl Sample {
    /// A request measured alone, on the CPU throughout: every basis sees its service time.
    pub fn alone(service_us: u64) -> Self {
        Sample { wall_us: service_us, share_us: service_us, serial_us: service_us, cpu_us: Some(service_us) }
    }
}

/// How the per-type cost estimate learns.
///
/// **Warm-up.** A type with no sample yet is charged the largest current estimate of any
/// type that has one (or `cold_cost_us` when no type has any): under-charging an unknown,
/// possibly expensive type could let a burst of it overload the backend, which is what
/// admission control exists to prevent; over-charging costs one request some waiting.
/// The [`Controller`](super::Controller) admits one request of such a type at a time as a
/// probe, ahead of the others under sjf, so the pessimistic charge does not hold the type
/// back ("First sample" in the module docs of `admission`).
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
            Basis::Serial => sample.serial_us,
            Basis::Cpu => sample.cpu_us.unwrap_or(sample.wall_us),
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
