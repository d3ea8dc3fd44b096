//! The capacity calibration's decision: from the work rates measured at each capacity step
//! (several repeats per step), which capacity to run at, and why.
//!
//! **Work, not requests.** A step's measurement is the backend's *work rate*: the work its
//! completions represent per second (each completion weighted by its type's cost, the same
//! cost for that type at every step), or the backend's busy time where it can be read.
//! Requests per second is not work: a step that happens to serve more cheap requests (the
//! costly ones waiting behind the gate) looks better without the backend doing more.
//!
//! **The rule.** For each step: the mean of its repeats, their sample standard deviation
//! and the half-width of the mean's two-sided 95% confidence interval (Student's t; a step
//! with one repeat borrows the standard deviation pooled over the steps with more, the
//! noise being the backend's and the load's, not the step's). The *best* step has the
//! highest mean; a step is *as good* when its mean is at least
//! `best mean − max(best half-width, min_tolerance × best mean)`: indistinguishable from
//! the best by what was measured (the relative floor keeps a lucky, tight best from
//! excluding steps within a practically irrelevant margin). The answer is the smallest
//! as-good step whose capacity is at least the *floor*, `floor_multiple ×` the costliest
//! type's cost: below it the costliest type's requests are admitted only when the gate is
//! (nearly) empty, so each drains the backend for itself. A step below the floor is chosen
//! only if it was *measured better*: its confidence interval lies wholly above that of
//! every step at or above the floor. If no step reached the floor, the floor is the answer
//! (unmeasured; the report says so). Smallest, because among equal work rates a smaller
//! capacity queues more in the gate, where the policy orders it, and less in the backend.
//!
//! Pure: numbers in, a choice with its reasons out.

use serde::{Deserialize, Serialize};

use super::AdmissionError;

/// The repeats measured at one capacity.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepMeasurements {
    pub capacity_us: u64,
    /// Work per second of each repeat (cost units per second: 1.0 = one backend fully busy
    /// with requests of their learned cost).
    pub work_per_s: Vec<f64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChoiceRule {
    /// The capacity must hold this many of the costliest type's requests (≥ 1).
    pub floor_multiple: f64,
    /// Smallest tolerance below the best mean, relative (e.g. 0.02).
    pub min_tolerance: f64,
}

impl Default for ChoiceRule {
    fn default() -> Self {
        ChoiceRule { floor_multiple: 2.0, min_tolerance: 0.02 }
    }
}

/// One step's summary.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepSummary {
    pub capacity_us: u64,
    pub repeats: usize,
    pub mean_work_per_s: f64,
    /// Sample standard deviation of the repeats (pooled when the step has one).
    pub stddev_work_per_s: f64,
    /// Half-width of the mean's 95% confidence interval.
    pub half_width_work_per_s: f64,
}

impl StepSummary {
    fn low(&self) -> f64 {
        self.mean_work_per_s - self.half_width_work_per_s
    }
    fn high(&self) -> f64 {
        self.mean_work_per_s + self.half_width_work_per_s
    }
}

/// Why the capacity was chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ChoiceReason {
    /// The smallest step at or above the floor whose mean is within the best's tolerance.
    SmallestAsGoodAboveFloor,
    /// Below the floor, but its interval lies above every step's at or above the floor.
    BelowFloorMeasuredBetter,
    /// No step at or above the floor matched the best and none below was measured better:
    /// the best step at or above the floor, or the floor itself (unmeasured) when no step
    /// reached it.
    Floor,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CapacityChoice {
    pub capacity_us: u64,
    pub reason: ChoiceReason,
    /// The smallest capacity the rule accepts without a measurement saying otherwise.
    pub floor_us: u64,
    pub best_capacity_us: u64,
    /// Means at or above this are as good as the best.
    pub threshold_work_per_s: f64,
    /// Whether the chosen capacity was measured (false: the floor, never reached).
    pub measured: bool,
    pub summaries: Vec<StepSummary>,
}

/// Two-sided 95% Student t quantile for `df` degrees of freedom (normal beyond 30).
pub fn t95(df: usize) -> f64 {
    const T: [f64; 30] = [
        12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
        2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
    ];
    match df {
        0 => f64::INFINITY,
        1..=30 => T[df - 1],
        _ => 1.96,
    }
}

/// Summaries of the steps, with the pooled standard deviation lent to single repeats.
pub fn summarize(steps: &[StepMeasurements]) -> Vec<StepSummary> {
    let stats: Vec<(usize, f64, f64)> = steps
        .iter()
        .map(|s| {
            let n = s.work_per_s.len();
            let mean = s.work_per_s.iter().sum::<f64>() / n.max(1) as f64;
            let ss = s.work_per_s.iter().map(|x| (x - mean).powi(2)).sum::<f64>();
            (n, mean, ss)
        })
        .collect();
    let (pooled_ss, pooled_df) =
        stats.iter().filter(|s| s.0 > 1).fold((0.0, 0usize), |(ss, df), s| (ss + s.2, df + s.0 - 1));
    let pooled_sd = if pooled_df > 0 { (pooled_ss / pooled_df as f64).sqrt() } else { 0.0 };
    steps
        .iter()
        .zip(stats)
        .map(|(s, (n, mean, ss))| {
            let (sd, df) = if n > 1 { ((ss / (n - 1) as f64).sqrt(), n - 1) } else { (pooled_sd, pooled_df) };
            let half = if df == 0 || n == 0 { 0.0 } else { t95(df) * sd / (n as f64).sqrt() };
            StepSummary {
                capacity_us: s.capacity_us,
                repeats: n,
                mean_work_per_s: mean,
                stddev_work_per_s: sd,
                half_width_work_per_s: half,
            }
        })
        .collect()
}

/// Choose the capacity (see the module docs). `costliest_us`: the largest learned cost of
/// a type that completed during the calibration. Errors on no steps, a step without
/// repeats, a non-finite or negative work rate, or a bad rule.
pub fn choose_capacity(
    steps: &[StepMeasurements],
    costliest_us: u64,
    rule: &ChoiceRule,
) -> Result<CapacityChoice, AdmissionError> {
    let bad = |what: String| Err(AdmissionError::BadCalibration { what });
    if steps.is_empty() {
        return bad("no capacity steps measured".into());
    }
    let rule_ok = rule.floor_multiple >= 1.0 && rule.floor_multiple.is_finite();
    if !(rule_ok && (0.0..1.0).contains(&rule.min_tolerance)) {
        return bad(format!("rule: need floor_multiple >= 1 and 0 <= min_tolerance < 1, got {rule:?}"));
    }
    for s in steps {
        if s.work_per_s.is_empty() || s.work_per_s.iter().any(|w| !(w.is_finite() && *w >= 0.0)) {
            return bad(format!("step {} µs: need at least one finite work rate >= 0", s.capacity_us));
        }
    }
    let mut summaries = summarize(steps);
    summaries.sort_by_key(|s| s.capacity_us);
    let best =
        summaries.iter().fold(&summaries[0], |b, s| if s.mean_work_per_s > b.mean_work_per_s { s } else { b }).clone();
    let tolerance = best.half_width_work_per_s.max(rule.min_tolerance * best.mean_work_per_s);
    let threshold = best.mean_work_per_s - tolerance;
    let floor_us = (costliest_us as f64 * rule.floor_multiple).ceil() as u64;
    let above: Vec<&StepSummary> = summaries.iter().filter(|s| s.capacity_us >= floor_us).collect();
    let (capacity_us, reason, measured) = if let Some(s) = above.iter().find(|s| s.mean_work_per_s >= threshold) {
        (s.capacity_us, ChoiceReason::SmallestAsGoodAboveFloor, true)
    } else if let Some(s) = summaries
        .iter()
        .filter(|s| s.capacity_us < floor_us && s.mean_work_per_s >= threshold)
        .find(|s| !above.is_empty() && above.iter().all(|a| s.low() > a.high()))
    {
        (s.capacity_us, ChoiceReason::BelowFloorMeasuredBetter, true)
    } else {
        // Nothing above the floor matches the best, and nothing below beats it clearly:
        // the best measured step at or above the floor, else the (unmeasured) floor.
        match above.iter().fold(None::<&&StepSummary>, |b, s| match b {
            Some(b) if b.mean_work_per_s >= s.mean_work_per_s => Some(b),
            _ => Some(s),
        }) {
            Some(s) => (s.capacity_us, ChoiceReason::Floor, true),
            None => (floor_us, ChoiceReason::Floor, false),
        }
    };
    Ok(CapacityChoice {
        capacity_us,
        reason,
        floor_us,
        best_capacity_us: best.capacity_us,
        threshold_work_per_s: threshold,
        measured,
        summaries,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// (capacity ms, work rates of the repeats)
    type Rows<'a> = &'a [(u64, &'a [f64])];

    fn steps(rows: Rows<'_>) -> Vec<StepMeasurements> {
        rows.iter().map(|(c, w)| StepMeasurements { capacity_us: c * 1_000, work_per_s: w.to_vec() }).collect()
    }

    /// The old rule: the first step with the most requests per second.
    fn requests_rule(rows: &[(u64, f64)]) -> u64 {
        rows.iter().fold(rows[0], |b, r| if r.1 > b.1 { *r } else { b }).0 * 1_000
    }

    /// A backend like the one a new user tried: cheap lookups ~3 ms, a filter scan ~230 ms,
    /// an aggregate ~630 ms. Requests per second jump with the share of cheap requests
    /// that got through (11.6 to 37.4, no trend) and peak at the first step, 10 ms, where
    /// the aggregate runs only on an empty gate; the work rate says the backend does most
    /// at 1.28 s and up.
    #[test]
    fn work_rate_not_requests_and_never_below_the_costliest() {
        let requests = [(10, 37.4), (20, 11.6), (40, 30.2), (80, 19.0), (160, 25.3), (320, 14.1), (640, 22.0)];
        let work: Rows<'_> = &[
            (10, &[0.41, 0.30, 0.36]),
            (20, &[0.33, 0.44, 0.38]),
            (40, &[0.45, 0.39, 0.42]),
            (80, &[0.50, 0.47, 0.55]),
            (160, &[0.60, 0.58, 0.66]),
            (320, &[0.70, 0.74, 0.69]),
            (640, &[0.78, 0.74, 0.80]),
            (1_280, &[0.84, 0.80, 0.83]),
            (2_560, &[0.85, 0.81, 0.84]),
            (5_120, &[0.79, 0.83, 0.80]),
        ];
        let costliest_us = 630_000;
        let c = choose_capacity(&steps(work), costliest_us, &ChoiceRule::default()).unwrap();
        assert_eq!(c.floor_us, 1_260_000);
        assert_eq!((c.capacity_us, c.reason), (1_280_000, ChoiceReason::SmallestAsGoodAboveFloor));
        assert_eq!(c.best_capacity_us, 2_560_000);
        // The old rule picks the first step, below the costliest type's cost.
        let old = requests_rule(&requests);
        assert_eq!(old, 10_000);
        assert!(old < costliest_us && old != c.capacity_us);
    }

    /// (steps, costliest µs, chosen ms, reason, measured)
    #[test]
    fn decision_table() {
        use ChoiceReason::*;
        let table: &[(Rows<'_>, u64, u64, ChoiceReason, bool)] = &[
            // A plateau: the smallest step above the floor within the best's interval.
            (
                &[(100, &[0.5, 0.5]), (200, &[0.80, 0.86, 0.77]), (400, &[0.83, 0.84, 0.82])],
                50_000,
                200,
                SmallestAsGoodAboveFloor,
                true,
            ),
            // The same means with tight repeats: 200 ms is measurably worse, 400 ms wins.
            (
                &[(100, &[0.5, 0.5]), (200, &[0.810, 0.811, 0.809]), (400, &[0.830, 0.831, 0.829])],
                50_000,
                400,
                SmallestAsGoodAboveFloor,
                true,
            ),
            // The floor excludes 100 ms although it is as good as the best.
            (
                &[(100, &[0.83, 0.84]), (200, &[0.83, 0.82]), (400, &[0.84, 0.83])],
                100_000,
                200,
                SmallestAsGoodAboveFloor,
                true,
            ),
            // Below the floor, measured better than everything above it.
            (
                &[(100, &[0.90, 0.91, 0.89]), (200, &[0.50, 0.52, 0.49]), (400, &[0.40, 0.41, 0.42])],
                100_000,
                100,
                BelowFloorMeasuredBetter,
                true,
            ),
            // A noisy best below the floor: its wide interval takes in 200 ms.
            (
                &[(100, &[0.90, 0.60, 0.95]), (200, &[0.70, 0.72, 0.69]), (400, &[0.65, 0.66, 0.66])],
                100_000,
                200,
                SmallestAsGoodAboveFloor,
                true,
            ),
            // Better on the mean, nothing above the floor within its tolerance, but the
            // intervals overlap: not measured better; the best step above the floor.
            (
                &[(100, &[0.86, 0.90, 0.94]), (200, &[0.70, 0.75, 0.80]), (400, &[0.60, 0.61, 0.62])],
                100_000,
                200,
                Floor,
                true,
            ),
            // No step reached the floor: the floor, unmeasured.
            (&[(10, &[0.5]), (20, &[0.6])], 630_000, 1_260, Floor, false),
            // Single repeats borrow the pooled spread: 0.78 is within it of 0.80.
            (
                &[(100, &[0.78]), (200, &[0.80]), (400, &[0.70, 0.80, 0.90])],
                10_000,
                100,
                SmallestAsGoodAboveFloor,
                true,
            ),
        ];
        for (i, (rows, costliest, want_ms, reason, measured)) in table.iter().enumerate() {
            let c = choose_capacity(&steps(rows), *costliest, &ChoiceRule::default()).unwrap();
            assert_eq!((c.capacity_us, c.reason, c.measured), (want_ms * 1_000, *reason, *measured), "row {i}: {c:?}");
            assert!(c.capacity_us >= c.floor_us || c.reason == BelowFloorMeasuredBetter, "row {i}");
        }
    }

    #[test]
    fn summaries_and_bad_input() {
        let s = summarize(&steps(&[(1, &[1.0, 2.0, 3.0]), (2, &[5.0])]));
        assert!((s[0].mean_work_per_s - 2.0).abs() < 1e-12);
        assert!((s[0].stddev_work_per_s - 1.0).abs() < 1e-12);
        assert!((s[0].half_width_work_per_s - 4.303 / 3f64.sqrt()).abs() < 1e-9);
        // One repeat: the pooled spread (df 2), its own n.
        assert!((s[1].half_width_work_per_s - 4.303).abs() < 1e-9);
        assert_eq!(summarize(&steps(&[(1, &[0.5])]))[0].half_width_work_per_s, 0.0);
        assert_eq!((t95(1), t95(30), t95(200)), (12.706, 2.042, 1.96));
        let rule = ChoiceRule::default();
        assert!(choose_capacity(&[], 1, &rule).is_err());
        assert!(choose_capacity(&steps(&[(1, &[])]), 1, &rule).is_err());
        assert!(choose_capacity(&steps(&[(1, &[f64::NAN])]), 1, &rule).is_err());
        let bad_rule = ChoiceRule { floor_multiple: 0.5, ..rule };
        assert!(choose_capacity(&steps(&[(1, &[1.0])]), 1, &bad_rule).is_err());
    }
}
