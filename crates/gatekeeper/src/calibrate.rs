//! `shortfirst gatekeeper calibrate`: find the capacity that gives peak throughput (the
//! paper's offline method, §3.1: incremental steps, then a search between them).
//!
//! An in-process gatekeeper with a fixed capacity is put in front of the upstream and a
//! closed-loop load (N clients, no think time, paths drawn from a weighted mix with a
//! seeded RNG) is driven through it. For each candidate capacity the gatekeeper is set to
//! it, the load runs `warmup` (discarded) and then `measure`, and completions per second
//! are recorded. The search assumes throughput is unimodal in capacity (rises to a peak,
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
//! 2. **Search**: golden-section search on log(capacity) inside the bracket for
//!    `refine_steps` more trials.
//!
//! The answer is the best capacity *measured* (not extrapolated). Every trial is reported.
//! Bounded: at most `max_trials` trials of `warmup + measure` each.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;

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
    pub max_trials: usize,
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
    pub throughput_per_s: f64,
    pub mean_response_ms: f64,
    pub errors: u64,
    pub phase: &'static str,
}

#[derive(Debug, Clone, Serialize)]
pub struct Calibration {
    pub best_capacity_us: u64,
    pub best_throughput_per_s: f64,
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

/// Run the search against the gatekeeper behind `handle`, listening on `proxy_url`.
///
/// Long because it is the search read top to bottom: the incremental steps, their stop
/// rule, then the golden-section refinement, sharing the trial log.
pub async fn calibrate(
    handle: &Handle,
    proxy_url: &str,
    cfg: &CalibrateConfig,
    mut progress: impl FnMut(&Trial),
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
            tokio::spawn(client_loop(
                client.clone(),
                proxy_url.trim_end_matches('/').to_string(),
                mix.clone(),
                cfg.seed.wrapping_add(i as u64),
                counters.clone(),
            ))
        })
        .collect();

    let mut trials: Vec<Trial> = Vec::new();
    let run = |capacity_us: u64, phase: &'static str| {
        let counters = counters.clone();
        async move {
            handle.set_capacity_us(capacity_us)?;
            tokio::time::sleep(cfg.warmup).await;
            counters.done.store(0, Relaxed);
            counters.errors.store(0, Relaxed);
            counters.latency_us.store(0, Relaxed);
            counters.counting.store(true, Relaxed);
            tokio::time::sleep(cfg.measure).await;
            counters.counting.store(false, Relaxed);
            let done = counters.done.load(Relaxed);
            Ok::<_, GatekeeperError>(Trial {
                capacity_us,
                throughput_per_s: done as f64 / cfg.measure.as_secs_f64(),
                mean_response_ms: if done > 0 {
                    counters.latency_us.load(Relaxed) as f64 / done as f64 / 1e3
                } else {
                    0.0
                },
                errors: counters.errors.load(Relaxed),
                phase,
            })
        }
    };

    // 1. Incremental steps.
    let mut cap = cfg.min_capacity_us;
    loop {
        let t = run(cap, "steps").await?;
        progress(&t);
        trials.push(t);
        let largest_us = handle.snapshot().types.iter().filter(|t| t.3 > 0).map(|t| t.2).max().unwrap_or(0);
        if past_peak(&trials, cfg.tolerance, largest_us) || cap >= cfg.max_capacity_us || trials.len() >= cfg.max_trials
        {
            break;
        }
        cap = ((cap as f64 * cfg.growth).round() as u64).min(cfg.max_capacity_us);
    }
    // Bracket around the best step.
    let best_i = argmax(&trials);
    let lo = if best_i == 0 { trials[0].capacity_us } else { trials[best_i - 1].capacity_us };
    let hi = trials.get(best_i + 1).map_or(trials[best_i].capacity_us, |t| t.capacity_us);

    // 2. Golden-section search on log(capacity) inside [lo, hi].
    if hi > lo {
        let phi = (5f64.sqrt() - 1.0) / 2.0;
        let (mut a, mut b) = ((lo as f64).ln(), (hi as f64).ln());
        for _ in 0..cfg.refine_steps {
            if trials.len() >= cfg.max_trials || (b - a) < 0.02 {
                break;
            }
            let mut f = [0.0; 2];
            for (slot, x) in [b - phi * (b - a), a + phi * (b - a)].into_iter().enumerate() {
                let c = x.exp().round() as u64;
                f[slot] = match trials.iter().find(|t| t.capacity_us == c) {
                    Some(t) => t.throughput_per_s,
                    None => {
                        let t = run(c, "search").await?;
                        progress(&t);
                        let v = t.throughput_per_s;
                        trials.push(t);
                        v
                    }
                };
            }
            let (f1, f2, x1, x2) = (f[0], f[1], b - phi * (b - a), a + phi * (b - a));
            if f1 >= f2 {
                b = x2;
            } else {
                a = x1;
            }
        }
    }
    counters.stop.store(true, Relaxed);
    for t in tasks {
        t.abort();
    }
    let best = &trials[argmax(&trials)];
    Ok(Calibration { best_capacity_us: best.capacity_us, best_throughput_per_s: best.throughput_per_s, trials })
}

/// The first trial with the highest throughput.
fn argmax(trials: &[Trial]) -> usize {
    let mut best = 0;
    for (i, t) in trials.iter().enumerate() {
        if t.throughput_per_s > trials[best].throughput_per_s {
            best = i;
        }
    }
    best
}

/// Whether the incremental steps are past the peak: the last trial's capacity holds
/// [`LARGEST_REQUESTS_BEFORE_STOP`] requests of the most expensive type (estimated cost
/// `largest_us`), and the last two trials come after the best one and are both more than
/// `tolerance` (relative) below it. Plateaus (within the tolerance of the best) never stop
/// the steps; a negative tolerance never stops them.
fn past_peak(trials: &[Trial], tolerance: f64, largest_us: u64) -> bool {
    if tolerance < 0.0 || trials.len() < 3 {
        return false;
    }
    if trials[trials.len() - 1].capacity_us < largest_us.saturating_mul(LARGEST_REQUESTS_BEFORE_STOP) {
        return false;
    }
    let best_i = argmax(trials);
    let floor = trials[best_i].throughput_per_s * (1.0 - tolerance);
    best_i + 2 < trials.len() && trials[trials.len() - 2..].iter().all(|t| t.throughput_per_s < floor)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trials(throughputs: &[f64]) -> Vec<Trial> {
        throughputs
            .iter()
            .enumerate()
            .map(|(i, &t)| Trial {
                capacity_us: 1_000 << i,
                throughput_per_s: t,
                mean_response_ms: 0.0,
                errors: 0,
                phase: "steps",
            })
            .collect()
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
