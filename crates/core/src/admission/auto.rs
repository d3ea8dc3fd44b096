//! `--capacity auto`: online capacity tuning from measured service-time inflation.
//!
//! The paper measures capacity offline (a search for the load with peak throughput) and
//! suggests adaptive estimation as future work. This controller does it online with AIMD on
//! a latency signal, the way TCP Vegas or Netflix's gradient limiter do for concurrency, but
//! in cost units:
//!
//! - **Signal.** For each type, a *floor*: the lowest cost estimate the type has had while
//!   warm (its service time when the backend was least loaded). A completed request's
//!   *inflation* is `measured / floor`; the window's inflation is
//!   `sum(measured) / sum(floor)` over its completed requests (cost-weighted, so the rare
//!   expensive types count in proportion to the load they are). Past the backend's knee,
//!   requests slow each other down and inflation rises above 1; below it, it stays near 1.
//! - **Decision**, once per `interval_us`, when the window has at least `min_samples`:
//!   inflation above `high_inflation` → capacity × `decrease_factor` (the backend is past
//!   its knee, whether or not requests are queued); otherwise, if requests had to queue in
//!   the window (capacity was binding) and inflation is below `low_inflation` → capacity ×
//!   (1 + `increase_frac`); otherwise hold. Capacity stays within `[min, max]`. A window
//!   with too few samples carries over to the next interval.
//! - **Slow start.** Floors are learned from warm estimates, so they are only right if the
//!   controller starts below the knee: start from a small capacity (default 50 ms of cost
//!   units) and double it each saturated, uninflated interval until the first decrease, then
//!   grow by `increase_frac`. Starting far above the knee would teach inflated floors.
//! - **Re-basing.** Contention inflation falls when capacity falls. If a decrease did not
//!   lower the inflation (it is still at least `1 - rebase_tolerance` of the previous
//!   window's), the slowdown is not ours: the backend itself got slower (a bigger dataset,
//!   a noisy neighbour). The floors are then multiplied by the current inflation, so the new
//!   service level reads as 1, and the tick holds. Without this, a lasting slowdown would
//!   shrink capacity to the minimum forever.
//!
//! Reaction speed with the defaults (1 s interval, ×0.9 / +5%): capacity halves in about
//! 7 s of overload and doubles in about 15 s of saturated, uninflated operation.
//!
//! Pure: time comes in as `now_us`, samples as numbers.

use serde::{Deserialize, Serialize};

use super::{AdmissionError, MIN_COST_US};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AutoConfig {
    pub initial_capacity_us: u64,
    pub min_capacity_us: u64,
    pub max_capacity_us: u64,
    pub interval_us: u64,
    pub min_samples: u64,
    pub high_inflation: f64,
    pub low_inflation: f64,
    pub increase_frac: f64,
    pub decrease_factor: f64,
    pub rebase_tolerance: f64,
}

impl Default for AutoConfig {
    fn default() -> Self {
        AutoConfig {
            initial_capacity_us: 50_000,
            min_capacity_us: 1_000,
            max_capacity_us: 3_600_000_000,
            interval_us: 1_000_000,
            min_samples: 20,
            high_inflation: 1.5,
            low_inflation: 1.2,
            increase_frac: 0.05,
            decrease_factor: 0.9,
            rebase_tolerance: 0.02,
        }
    }
}

impl AutoConfig {
    pub fn validate(&self) -> Result<(), AdmissionError> {
        let bad = |what: &str| Err(AdmissionError::BadEstimator { what: format!("auto capacity: {what}") });
        if self.min_capacity_us < MIN_COST_US
            || self.min_capacity_us > self.max_capacity_us
            || !(self.min_capacity_us..=self.max_capacity_us).contains(&self.initial_capacity_us)
        {
            return bad("need 1 <= min <= initial <= max capacity");
        }
        if self.interval_us == 0 {
            return bad("interval must be positive");
        }
        if !(self.low_inflation >= 1.0 && self.high_inflation > self.low_inflation) {
            return bad("need 1 <= low_inflation < high_inflation");
        }
        if !(self.increase_frac > 0.0 && self.increase_frac <= 1.0) {
            return bad("increase_frac must be in (0, 1]");
        }
        if !(self.decrease_factor > 0.0 && self.decrease_factor < 1.0) {
            return bad("decrease_factor must be in (0, 1)");
        }
        if !(0.0..1.0).contains(&self.rebase_tolerance) {
            return bad("rebase_tolerance must be in [0, 1)");
        }
        Ok(())
    }
}

/// What the last tick decided (for logs and metrics).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub enum AutoDecision {
    Increase,
    Decrease,
    Hold,
    /// Not enough samples; window carried over.
    Wait,
}

#[derive(Debug, Clone)]
pub struct AutoCapacity {
    cfg: AutoConfig,
    capacity_us: u64,
    floors_us: Vec<f64>,
    measured_sum_us: f64,
    floor_sum_us: f64,
    samples: u64,
    saturated: bool,
    next_tick_us: u64,
    last_inflation: Option<f64>,
    last_decision: AutoDecision,
    slow_start: bool,
}

impl AutoCapacity {
    pub fn new(cfg: AutoConfig, num_types: usize, now_us: u64) -> Result<Self, AdmissionError> {
        cfg.validate()?;
        Ok(AutoCapacity {
            capacity_us: cfg.initial_capacity_us,
            next_tick_us: now_us.saturating_add(cfg.interval_us),
            cfg,
            floors_us: vec![0.0; num_types],
            measured_sum_us: 0.0,
            floor_sum_us: 0.0,
            samples: 0,
            saturated: false,
            last_inflation: None,
            last_decision: AutoDecision::Hold,
            slow_start: true,
        })
    }

    pub fn capacity_us(&self) -> u64 {
        self.capacity_us
    }
    pub fn next_tick_us(&self) -> u64 {
        self.next_tick_us
    }
    pub fn last_inflation(&self) -> Option<f64> {
        self.last_inflation
    }

    /// A successful request of `type_index` took `measured_us`; the type's estimate after
    /// this sample is `estimate_us`, and `warm` says whether the estimator is past warm-up.
    pub fn record(&mut self, type_index: usize, measured_us: u64, estimate_us: u64, warm: bool) {
        let Some(floor) = self.floors_us.get_mut(type_index) else { return };
        if warm && (*floor == 0.0 || (estimate_us as f64) < *floor) {
            *floor = estimate_us as f64;
        }
        if *floor > 0.0 {
            self.measured_sum_us += measured_us as f64;
            self.floor_sum_us += *floor;
            self.samples += 1;
        }
    }

    /// A request had to wait for admission: capacity was binding.
    pub fn note_saturated(&mut self) {
        self.saturated = true;
    }

    /// Run the controller if its interval has elapsed. Returns the decision, or `None` when
    /// it is not time yet.
    pub fn tick(&mut self, now_us: u64) -> Option<AutoDecision> {
        if now_us < self.next_tick_us {
            return None;
        }
        self.next_tick_us = now_us.saturating_add(self.cfg.interval_us);
        if self.samples < self.cfg.min_samples {
            return Some(AutoDecision::Wait);
        }
        let inflation = self.measured_sum_us / self.floor_sum_us;
        let previous = self.last_inflation.replace(inflation);
        let cap = self.capacity_us as f64;
        let shrinking_did_not_help = self.last_decision == AutoDecision::Decrease
            && previous.is_some_and(|p| inflation >= p * (1.0 - self.cfg.rebase_tolerance));
        let (new_cap, decision) = if shrinking_did_not_help {
            for f in &mut self.floors_us {
                *f *= inflation;
            }
            self.last_inflation = Some(1.0);
            (cap, AutoDecision::Hold)
        } else if inflation > self.cfg.high_inflation {
            (cap * self.cfg.decrease_factor, AutoDecision::Decrease)
        } else if self.saturated && inflation < self.cfg.low_inflation {
            let factor = if self.slow_start { 2.0 } else { 1.0 + self.cfg.increase_frac };
            (cap * factor, AutoDecision::Increase)
        } else {
            (cap, AutoDecision::Hold)
        };
        self.capacity_us = (new_cap.round() as u64).clamp(self.cfg.min_capacity_us, self.cfg.max_capacity_us);
        self.measured_sum_us = 0.0;
        self.floor_sum_us = 0.0;
        self.samples = 0;
        self.saturated = false;
        if decision == AutoDecision::Decrease {
            self.slow_start = false;
        }
        self.last_decision = decision;
        Some(decision)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A backend with `slots` parallel servers; beyond them requests share and thrash:
    /// service time multiplies by (n / slots) * (1 + k (n - slots)).
    fn inflation(n: f64, slots: f64, k: f64) -> f64 {
        if n <= slots {
            1.0
        } else {
            (n / slots) * (1.0 + k * (n - slots))
        }
    }

    /// Saturated steady state: concurrency = capacity / cost. `slots` may change over time.
    fn converge(initial_us: u64, slots_at: impl Fn(u64) -> f64) -> Vec<u64> {
        let cost_us = 10_000.0;
        let cfg = AutoConfig { initial_capacity_us: initial_us, ..Default::default() };
        let mut a = AutoCapacity::new(cfg, 1, 0).unwrap();
        let mut trace = Vec::new();
        for step in 1..=400u64 {
            let slots = slots_at(step);
            let n = a.capacity_us() as f64 / cost_us;
            let measured = cost_us * inflation(n, slots, 0.1);
            for _ in 0..50 {
                // The estimator's average follows the measured service time.
                a.record(0, measured as u64, measured as u64, true);
            }
            a.note_saturated();
            a.tick(step * 1_000_000).unwrap();
            trace.push(a.capacity_us());
        }
        trace
    }

    fn assert_at_knee(trace: &[u64], slots: f64, what: &str) {
        // Concurrency stays between a little below the knee and a little past it.
        for &c in trace {
            let n = c as f64 / 10_000.0;
            assert!((slots * 0.75..=slots + 3.0).contains(&n), "{what}: n = {n}");
        }
    }

    #[test]
    fn converges_to_the_knee_from_below() {
        for initial in [1_000, 10_000, 50_000] {
            let trace = converge(initial, |_| 8.0);
            assert_at_knee(&trace[100..], 8.0, &format!("initial {initial}"));
        }
        let trace = converge(50_000, |_| 30.0);
        assert_at_knee(&trace[150..], 30.0, "30 slots");
    }

    /// How fast `--capacity auto` reaches the region a calibration would choose, from its
    /// default start (50 ms): slow start doubles once per saturated, uninflated interval, so
    /// a knee at 1.3 s of cost (130 requests of 10 ms) is reached in log2(1300 / 50) ≈ 5
    /// intervals (5 s with the defaults), and the capacity stays in the knee's region after.
    #[test]
    fn slow_start_reaches_a_large_knee_in_a_few_intervals() {
        let trace = converge(50_000, |_| 130.0);
        let first = trace.iter().position(|&c| c as f64 >= 0.75 * 1_300_000.0).unwrap();
        assert!(first <= 5, "reached the region after {} intervals: {:?}", first + 1, &trace[..8]);
        // AIMD then oscillates about the knee: +5% past it, ×0.9 back.
        for &c in &trace[first + 10..] {
            let n = c as f64 / 10_000.0;
            assert!((0.75 * 130.0..=1.1 * 130.0).contains(&n), "after slow start: n = {n}");
        }
    }

    #[test]
    fn follows_the_knee_down_when_the_backend_loses_capacity() {
        let trace = converge(50_000, |step| if step < 150 { 16.0 } else { 6.0 });
        assert_at_knee(&trace[100..150], 16.0, "before");
        assert_at_knee(&trace[250..], 6.0, "after");
    }

    #[test]
    fn no_increase_without_saturation_and_wait_without_samples() {
        let cfg = AutoConfig { initial_capacity_us: 100_000, ..Default::default() };
        let mut a = AutoCapacity::new(cfg, 2, 0).unwrap();
        assert_eq!(a.tick(999_999), None);
        assert_eq!(a.tick(1_000_000), Some(AutoDecision::Wait));
        for _ in 0..30 {
            a.record(1, 1_000, 1_000, true);
        }
        assert_eq!(a.tick(2_000_000), Some(AutoDecision::Hold));
        assert_eq!(a.capacity_us(), 100_000);
        // Cold types do not count.
        for _ in 0..30 {
            a.record(0, 1_000, 1_000, false);
        }
        assert_eq!(a.tick(3_000_000), Some(AutoDecision::Wait));
        // Out-of-range type is ignored, not a panic.
        a.record(7, 1, 1, true);
    }

    #[test]
    fn overload_shrinks_even_without_queueing_and_respects_min() {
        let cfg = AutoConfig { initial_capacity_us: 10_000, min_capacity_us: 9_500, ..Default::default() };
        let mut a = AutoCapacity::new(cfg, 1, 0).unwrap();
        a.record(0, 1_000, 1_000, true);
        for _ in 0..30 {
            a.record(0, 5_000, 5_000, true);
        }
        assert_eq!(a.tick(1_000_000), Some(AutoDecision::Decrease));
        assert_eq!(a.capacity_us(), 9_500);
    }

    #[test]
    fn lasting_slowdown_is_rebased_not_shrunk_forever() {
        let cfg = AutoConfig { initial_capacity_us: 100_000, ..Default::default() };
        let mut a = AutoCapacity::new(cfg, 1, 0).unwrap();
        a.record(0, 1_000, 1_000, true);
        let mut decisions = Vec::new();
        for step in 1..=200u64 {
            for _ in 0..30 {
                a.record(0, 3_000, 3_000, true); // backend now 3x slower for good
            }
            decisions.push(a.tick(step * 1_000_000).unwrap());
        }
        assert_eq!(decisions[0], AutoDecision::Decrease);
        assert!(decisions[1..].iter().all(|d| *d == AutoDecision::Hold), "{decisions:?}");
        assert_eq!(a.capacity_us(), 90_000);
    }

    #[test]
    fn config_validation() {
        let bad = [
            AutoConfig { min_capacity_us: 0, ..Default::default() },
            AutoConfig { initial_capacity_us: 1, ..Default::default() },
            AutoConfig { high_inflation: 1.1, low_inflation: 1.2, ..Default::default() },
            AutoConfig { decrease_factor: 1.0, ..Default::default() },
            AutoConfig { interval_us: 0, ..Default::default() },
        ];
        for c in bad {
            assert!(c.validate().is_err(), "{c:?}");
        }
        assert!(AutoConfig::default().validate().is_ok());
    }
}
