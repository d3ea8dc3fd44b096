//! `shortfirst gatekeeper calibrate`: find the capacity that gives the backend's peak work
//! rate (the paper's offline method, §3.1: incremental steps, then a search between them),
//! with repeated measurements per step and the decision of `core::admission::calibration`.
//!
//! An in-process gatekeeper with a fixed capacity is put in front of the upstream and a
//! closed-loop load (N clients, no think time, paths drawn from a weighted mix with a
//! seeded RNG) is driven through it. For each candidate capacity the gatekeeper is set to
//! it, the load runs `warmup` (discarded) and then `repeats` windows of `measure` each,
//! recording per window completions per second and the *work rate*: completions weighted
//! by their type's cost (its lowest estimate during the calibration, so every step is
//! weighed alike). Requests per second is not work: a step that happens to serve more
//! cheap requests would win. The search assumes throughput is unimodal in capacity (rises to a peak,
//! then falls as the backend thrashes), as the paper does:
//! 1. **Incremental steps**: from `min`, multiply by `growth` until the throughput has
//!    clearly passed its peak — the last two steps are both more than `tolerance` (relative)
//!    below the best so far (one noisy measurement must not end the climb) — or `max` is
//!    reached. Small capacities never end the climb: until the capacity holds
//!    [`LARGEST_REQUESTS_BEFORE_STOP`] of the most expensive type's requests (by the
//!    estimates at that step), throughput is governed by head-of-line blocking behind
//!    expensive requests that run (nearly) alone; it is low and erratic there (measured on
//!    the synthetic TPC-W backend: 47, 70, 46, 43, 81, 64, 59, 95 req/s from 5 ms to 640 ms,
//!    then 172 and 199 at 1.3 s and 2.6 s) and its dips say nothing about the backend's
//!    peak. The peak is bracketed by the steps around the best one.
//! 2. **Refinement**: up to `refine_steps` more steps, each halfway (geometrically) between
//!    the capacity the rule chooses and the measured step below it (not below the floor).
//!
//! The answer is [`choose_capacity`]'s on the steps' repeated work rates: the smallest
//! step at or above twice the costliest type's cost whose mean is within the best step's
//! 95% confidence interval (or 2%); below that floor only if measured better. The curve
//! with each step's mean ± half-width is reported. Bounded: at most `max_trials` steps of
//! `warmup + repeats × measure` each.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;
use shortfirst_core::admission::calibration::{choose_capacity, CapacityChoice, ChoiceRule, StepMeasurements};
use tokio::time::Instant;

use crate::proxy::Handle;
use crate::GatekeeperError;

/// The incremental steps do not stop before the capacity holds this many requests of the
/// most expensive type (see the module docs).
pub const LARGEST_REQUESTS_BEFORE_STOP: u64 = 4;

#[derive(Debug, Clone)]
pub struct CalibrateConfig {
    /// (path, weight), weights > 0.
    pub mix: Vec<(String, f64)>,
    pub clients: usize,
    pub warmup: Duration,
    pub measure: Duration,
    pub min_capacity_us: u64,
    pub max_capacity_us: u64,
    pub growth: f64,
    pub tolerance: f64,
    pub refine_steps: usize,
    /// Measurement windows per capacity step (≥ 1; 3 or more give the spread).
    pub repeats: usize,
    pub max_trials: usize,
    pub rule: ChoiceRule,
    pub seed: u64,
}

impl CalibrateConfig {
    pub fn validate(&self) -> Result<(), GatekeeperError> {
        let bad = |w: &str| Err(GatekeeperError::Config(format!("calibrate: {w}")));
        if self.mix.is_empty() || self.mix.iter().any(|(p, w)| !p.starts_with('/') || w.is_nan() || *w <= 0.0) {
            return bad("the mix needs at least one path starting with '/' with a positive weight");
        }
        if self.clients == 0 || self.clients > 10_000 {
            return bad("clients must be in 1..=10000");
        }
        if self.min_capacity_us == 0 || self.min_capacity_us >= self.max_capacity_us {
            return bad("need 0 < min < max capacity");
        }
        if self.growth <= 1.0 {
            return bad("growth must be > 1");
        }
        if self.measure.is_zero() {
            return bad("measure must be positive");
        }
        if self.max_trials == 0 || self.max_trials > 1_000 {
            return bad("max_trials must be in 1..=1000");
        }
        if self.repeats == 0 || self.repeats > 100 {
            return bad("repeats must be in 1..=100");
        }
        Ok(())
    }
}

/// Parse a mix file: CSV with header `path,weight`.
pub fn parse_mix(text: &str, origin: &str) -> Result<Vec<(String, f64)>, GatekeeperError> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || (i == 0 && line.starts_with("path")) {
            continue;
        }
        let (p, w) = line
            .split_once(',')
            .ok_or_else(|| GatekeeperError::Config(format!("{origin} line {}: expected `path,weight`", i + 1)))?;
        let w: f64 = w.trim().parse().map_err(|_| {
            GatekeeperError::Config(format!("{origin} line {}: weight {:?} is not a number", i + 1, w.trim()))
        })?;
        out.push((p.trim().to_string(), w));
    }
    Ok(out)
}

#[derive(Debug, Clone, Serialize)]
pub struct Trial {
    pub capacity_us: u64,
    /// Which measurement window of its step (0-based; windows follow each other, the
    /// warm-up only precedes the first).
    pub repeat: usize,
    pub throughput_per_s: f64,
    /// Work completed per second: Σ completions × their type's cost (the lowest estimate
    /// the type had during the calibration, so every step is weighed alike), in backends
    /// kept busy (1.0 = one request of learned cost always running).
    pub work_per_s: f64,
    pub mean_response_ms: f64,
    pub errors: u64,
    pub phase: &'static str,
    /// Successful completions per type name in the window.
    pub completions: Vec<(String, u64)>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Calibration {
    /// The capacity chosen ([`choose_capacity`]; the name is kept for readers of the JSON).
    pub best_capacity_us: u64,
    /// Mean requests per second at the chosen capacity (0 if it was not measured).
    pub best_throughput_per_s: f64,
    /// Lowest estimate per type seen during the calibration, µs: the costs the work rates use.
    pub type_costs_us: Vec<(String, u64)>,
    pub choice: CapacityChoice,
    pub trials: Vec<Trial>,
}

struct Counters {
    done: AtomicU64,
    errors: AtomicU64,
    latency_us: AtomicU64,
    counting: AtomicBool,
    stop: AtomicBool,
}
/// Closed-loop clients hitting `target` until stopped.
async fn client_loop(
    client: Client<HttpConnector, Empty<Bytes>>,
    target: String,
    mix: Arc<Vec<(String, f64)>>,
    seed: u64,
    c: Arc<Counters>,
) {
    let total: f64 = mix.iter().map(|(_, w)| w).sum();
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    while !c.stop.load(Relaxed) {
        let mut x = rng.gen::<f64>() * total;
        let path = mix
            .iter()
            .find(|(_, w)| {
                x -= w;
                x < 0.0
            })
            .map_or(&mix[mix.len() - 1].0, |(p, _)| p);
        let t0 = Instant::now();
        let uri: hyper::Uri = match format!("{target}{path}").parse() {
            Ok(u) => u,
            Err(_) => return,
        };
        let ok = match client.get(uri).await {
            Ok(resp) => {
                let status = resp.status();
                resp.into_body().collect().await.is_ok() && status.is_success()
            }
            Err(_) => false,
        };
        if c.counting.load(Relaxed) {
            if ok {
                c.done.fetch_add(1, Relaxed);
                c.latency_us.fetch_add(t0.elapsed().as_micros() as u64, Relaxed);
            } else {
                c.errors.fetch_add(1, Relaxed);
            }
        }
        if !ok {
            // Do not spin on a dead upstream.
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

/// The lowest estimate seen per type name (types with samples only).
type Costs = BTreeMap<String, u64>;

struct Driver<'a> {
    handle: &'a Handle,
    cfg: &'a CalibrateConfig,
    counters: Arc<Counters>,
    costs: Costs,
}

impl Driver<'_> {
    /// Completions so far per type name, noting each warm type's lowest estimate.
    fn completions(&mut self) -> BTreeMap<String, u64> {
        let snap = self.handle.snapshot();
        let mut out = BTreeMap::new();
        for (_, name, estimate_us, samples) in snap.types {
            if samples > 0 {
                let c = self.costs.entry(name.clone()).or_insert(estimate_us);
                *c = (*c).min(estimate_us);
            }
            out.insert(name, samples);
        }
        out
    }

    /// One step: the capacity, a warm-up, then `repeats` measurement windows back to back.
    async fn step(&mut self, capacity_us: u64, phase: &'static str) -> Result<Vec<Trial>, GatekeeperError> {
        self.handle.set_capacity_us(capacity_us)?;
        tokio::time::sleep(self.cfg.warmup).await;
        let mut out = Vec::with_capacity(self.cfg.repeats);
        for repeat in 0..self.cfg.repeats {
            let c = self.counters.clone();
            let before = self.completions();
            c.done.store(0, Relaxed);
            c.errors.store(0, Relaxed);
            c.latency_us.store(0, Relaxed);
            c.counting.store(true, Relaxed);
            tokio::time::sleep(self.cfg.measure).await;
            c.counting.store(false, Relaxed);
            let after = self.completions();
            let done = c.done.load(Relaxed);
            let completions = after
                .into_iter()
                .map(|(name, n)| {
                    let d = n.saturating_sub(before.get(&name).copied().unwrap_or(0));
                    (name, d)
                })
                .filter(|(_, d)| *d > 0)
                .collect();
            let mut t = Trial {
                capacity_us,
                repeat,
                throughput_per_s: done as f64 / self.cfg.measure.as_secs_f64(),
                work_per_s: 0.0,
                mean_response_ms: if done > 0 { c.latency_us.load(Relaxed) as f64 / done as f64 / 1e3 } else { 0.0 },
                errors: c.errors.load(Relaxed),
                phase,
                completions,
            };
            t.work_per_s = work_per_s(&t, &self.costs, self.cfg.measure);
            out.push(t);
        }
        Ok(out)
    }
}

/// Σ completions × cost, per second of the window, in backends kept busy.
fn work_per_s(t: &Trial, costs: &Costs, measure: Duration) -> f64 {
    let work_us: f64 =
        t.completions.iter().map(|(name, n)| *n as f64 * costs.get(name).copied().unwrap_or(0) as f64).sum();
    work_us / 1e6 / measure.as_secs_f64()
}

/// The steps' repeats as the decision takes them, in capacity order.
fn measurements(trials: &[Trial]) -> Vec<StepMeasurements> {
    let mut by_cap: BTreeMap<u64, Vec<f64>> = BTreeMap::new();
    for t in trials {
        by_cap.entry(t.capacity_us).or_default().push(t.work_per_s);
    }
    by_cap.into_iter().map(|(capacity_us, work_per_s)| StepMeasurements { capacity_us, work_per_s }).collect()
}

/// Run the search against the gatekeeper behind `handle`, listening on `proxy_url`.
pub async fn calibrate(
    handle: &Handle,
    proxy_url: &str,
    cfg: &CalibrateConfig,
    mut progress: impl FnMut(&[Trial]),
) -> Result<Calibration, GatekeeperError> {
    cfg.validate()?;
    let client: Client<HttpConnector, Empty<Bytes>> = Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(cfg.clients)
        .pool_timer(TokioTimer::new())
        .build(HttpConnector::new());
    let counters = Arc::new(Counters {
        done: AtomicU64::new(0),
        errors: AtomicU64::new(0),
        latency_us: AtomicU64::new(0),
        counting: AtomicBool::new(false),
        stop: AtomicBool::new(false),
    });
    let mix = Arc::new(cfg.mix.clone());
    let tasks: Vec<_> = (0..cfg.clients)
        .map(|i| {
            let target = proxy_url.trim_end_matches('/').to_string();
            let seed = cfg.seed.wrapping_add(i as u64);
            tokio::spawn(client_loop(client.clone(), target, mix.clone(), seed, counters.clone()))
        })
        .collect();
    let mut d = Driver { handle, cfg, counters: counters.clone(), costs: Costs::new() };
    let result = search(&mut d, &mut progress).await;
    counters.stop.store(true, Relaxed);
    for t in tasks {
        t.abort();
    }
    let mut trials = result?;
    for t in &mut trials {
        t.work_per_s = work_per_s(t, &d.costs, cfg.measure);
    }
    let costliest_us = d.costs.values().copied().max().unwrap_or(0);
    let choice = choose_capacity(&measurements(&trials), costliest_us, &cfg.rule)
        .map_err(|e| GatekeeperError::Config(e.to_string()))?;
    let chosen: Vec<f64> =
        trials.iter().filter(|t| t.capacity_us == choice.capacity_us).map(|t| t.throughput_per_s).collect();
    Ok(Calibration {
        best_capacity_us: choice.capacity_us,
        best_throughput_per_s: chosen.iter().fold(0.0, |a, b| a + b) / chosen.len().max(1) as f64,
        type_costs_us: d.costs.into_iter().collect(),
        choice,
        trials,
    })
}

/// The incremental steps, then `refine_steps` bisections (geometric) between the chosen
/// capacity and the measured step below it, not below the floor.
async fn search(d: &mut Driver<'_>, progress: &mut impl FnMut(&[Trial])) -> Result<Vec<Trial>, GatekeeperError> {
    let cfg = d.cfg;
    let mut trials: Vec<Trial> = Vec::new();
    let mut cap = cfg.min_capacity_us;
    loop {
        let step = d.step(cap, "steps").await?;
        progress(&step);
        trials.extend(step);
        let largest_us = d.costs.values().copied().max().unwrap_or(0);
        let means = step_means(&trials);
        if past_peak(&means, cfg.tolerance, largest_us)
            || cap >= cfg.max_capacity_us
            || step_means(&trials).len() >= cfg.max_trials
        {
            break;
        }
        cap = ((cap as f64 * cfg.growth).round() as u64).min(cfg.max_capacity_us);
    }
    for _ in 0..cfg.refine_steps {
        if step_means(&trials).len() >= cfg.max_trials {
            break;
        }
        let costliest_us = d.costs.values().copied().max().unwrap_or(0);
        let Ok(choice) = choose_capacity(&measurements(&trials), costliest_us, &cfg.rule) else { break };
        let below = choice.summaries.iter().rev().find(|s| s.capacity_us < choice.capacity_us).map(|s| s.capacity_us);
        let lo = below.unwrap_or(0).max(choice.floor_us);
        if !choice.measured || lo == 0 || lo as f64 * 1.05 >= choice.capacity_us as f64 {
            break; // nothing to gain: the interval is already narrow
        }
        let mid = ((lo as f64) * (choice.capacity_us as f64)).sqrt().round() as u64;
        let step = d.step(mid, "refine").await?;
        progress(&step);
        trials.extend(step);
    }
    Ok(trials)
}

/// (capacity, mean work rate) of each step in the order measured.
fn step_means(trials: &[Trial]) -> Vec<(u64, f64)> {
    let mut out: Vec<(u64, f64, usize)> = Vec::new();
    for t in trials {
        match out.iter_mut().find(|s| s.0 == t.capacity_us) {
            Some(s) => {
                s.1 += t.work_per_s;
                s.2 += 1;
            }
            None => out.push((t.capacity_us, t.work_per_s, 1)),
        }
    }
    out.into_iter().map(|(c, sum, n)| (c, sum / n as f64)).collect()
}

/// The first step with the highest mean.
fn argmax(steps: &[(u64, f64)]) -> usize {
    let mut best = 0;
    for (i, s) in steps.iter().enumerate() {
        if s.1 > steps[best].1 {
            best = i;
        }
    }
    best
}

/// Whether the incremental steps are past the peak: the last step's capacity holds
/// [`LARGEST_REQUESTS_BEFORE_STOP`] requests of the most expensive type (estimated cost
/// `largest_us`), and the last two steps come after the best one and their means are both
/// more than `tolerance` (relative) below it. Plateaus (within the tolerance of the best)
/// never stop the steps; a negative tolerance never stops them.
fn past_peak(steps: &[(u64, f64)], tolerance: f64, largest_us: u64) -> bool {
    if tolerance < 0.0 || steps.len() < 3 {
        return false;
    }
    if steps[steps.len() - 1].0 < largest_us.saturating_mul(LARGEST_REQUESTS_BEFORE_STOP) {
        return false;
    }
    let best_i = argmax(steps);
    let floor = steps[best_i].1 * (1.0 - tolerance);
    best_i + 2 < steps.len() && steps[steps.len() - 2..].iter().all(|s| s.1 < floor)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trials(work: &[f64]) -> Vec<(u64, f64)> {
        work.iter().enumerate().map(|(i, &w)| (1_000 << i, w)).collect()
    }

    #[test]
    fn steps_stop_only_past_the_peak() {
        // (throughputs of the steps so far, tolerance, past the peak?)
        let table: &[(&[f64], f64, bool)] = &[
            (&[10.0, 20.0], 0.02, false),
            (&[10.0, 20.0, 30.0], 0.02, false),
            // A flat stretch is not a peak: FIFO's curve is flat until large requests fit.
            (&[50.0, 50.0, 50.5, 49.8, 50.1], 0.02, false),
            (&[50.0, 50.0, 50.0, 80.0], 0.02, false),
            // Two clear drops after the best: stop.
            (&[50.0, 80.0, 70.0, 60.0], 0.02, true),
            // One noisy drop, then back near the best: keep going.
            (&[50.0, 80.0, 70.0, 79.0], 0.02, false),
            // Drops within the tolerance are a plateau.
            (&[50.0, 80.0, 79.0, 78.5], 0.02, false),
            (&[50.0, 80.0, 79.0, 78.5], 0.001, true),
            // Negative tolerance: sweep everything.
            (&[50.0, 80.0, 10.0, 5.0], -1.0, false),
        ];
        for (tp, tol, want) in table {
            assert_eq!(past_peak(&trials(tp), *tol, 0), *want, "{tp:?} tolerance {tol}");
        }
        // Capacities 1, 2, 4, 8 ms: a clear drop, but the last step (8 ms) does not hold four
        // 2.5 ms requests yet, so the climb goes on; with 2 ms requests it stops.
        let drop = trials(&[50.0, 80.0, 40.0, 30.0]);
        assert!(!past_peak(&drop, 0.1, 2_500));
        assert!(past_peak(&drop, 0.1, 2_000));
        assert_eq!(argmax(&trials(&[1.0, 3.0, 3.0, 2.0])), 1);
    }

    fn trial(capacity_us: u64, completions: &[(&str, u64)]) -> Trial {
        Trial {
            capacity_us,
            repeat: 0,
            throughput_per_s: 0.0,
            work_per_s: 0.0,
            mean_response_ms: 0.0,
            errors: 0,
            phase: "steps",
            completions: completions.iter().map(|(n, c)| (n.to_string(), *c)).collect(),
        }
    }

    /// Work weighs completions by cost: 100 cheap (3 ms) and 2 costly (630 ms) requests in
    /// 2 s are 0.78 backends busy; the same count of cheap only, 0.15.
    #[test]
    fn work_rate_weighs_completions_by_cost() {
        let costs: Costs = [("cheap".to_string(), 3_000), ("agg".to_string(), 630_000)].into_iter().collect();
        let m = Duration::from_secs(2);
        let mixed = work_per_s(&trial(1, &[("cheap", 100), ("agg", 2)]), &costs, m);
        assert!((mixed - (0.3 + 1.26) / 2.0).abs() < 1e-9, "{mixed}");
        let cheap = work_per_s(&trial(1, &[("cheap", 102)]), &costs, m);
        assert!((cheap - 0.153).abs() < 1e-9, "{cheap}");
        // Unknown types count nothing rather than guess.
        assert_eq!(work_per_s(&trial(1, &[("new", 5)]), &costs, m), 0.0);
        let mut ts = vec![trial(2, &[]), trial(1, &[]), trial(2, &[])];
        for (t, w) in ts.iter_mut().zip([0.5, 0.2, 0.7]) {
            t.work_per_s = w;
        }
        let ms = measurements(&ts);
        assert_eq!(ms.len(), 2);
        assert_eq!((ms[0].capacity_us, ms[1].work_per_s.clone()), (1, vec![0.5, 0.7]));
        assert_eq!(step_means(&ts), vec![(2, 0.6), (1, 0.2)]);
    }

    #[test]
    fn mix_file_parsing() {
        let m = parse_mix("path,weight\n/t/a,16\n\n# c\n/t/b, 0.5\n", "mix.csv").unwrap();
        assert_eq!(m, vec![("/t/a".to_string(), 16.0), ("/t/b".to_string(), 0.5)]);
        let e = parse_mix("path,weight\n/t/a;1\n", "mix.csv").unwrap_err().to_string();
        assert!(e.contains("mix.csv line 2"), "{e}");
        let e = parse_mix("/t/a,x\n", "m").unwrap_err().to_string();
        assert!(e.contains("line 1") && e.contains("\"x\""), "{e}");
    }
}
