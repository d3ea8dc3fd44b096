//! `shortfirst gatekeeper model`: the gatekeeper's admission code (`core::admission`) in a
//! closed-loop simulation (`shortfirst_sim::gatekeeper`) against the synthetic upstream's
//! service model, in virtual time. For studying the estimator and the queue policies
//! without sockets or timing noise: capacity calibrated the paper's way in the model, then
//! direct access and each policy at the requested load, over several seeds.

use std::path::PathBuf;

use anyhow::{bail, Context};
use serde::Serialize;
use shortfirst_core::admission::{AdmissionPolicy, ChargeAt, EstimatorConfig, GateConfig};
use shortfirst_gatekeeper::config;

use super::BackendArgs;
use shortfirst_sim::gatekeeper::{self as model, BackendModel, CalibrationTrial, ModelConfig, ModelResult, ModelType};

#[derive(clap::Args, Debug)]
#[command(mut_arg("scale", |a| a.default_value("0.25")))]
pub struct ModelArgs {
    #[command(flatten)]
    backend: BackendArgs,
    /// Other busy processes sharing the backend's processors (a load generator or proxy on
    /// the same host); 0: a dedicated backend.
    #[arg(long, default_value_t = 0.0)]
    background: f64,
    /// Background during calibration, if different (a host that got busier since).
    #[arg(long)]
    calibrate_background: Option<f64>,
    /// Mean think time (exponential); 0 = none.
    #[arg(long, default_value = "500ms", value_name = "DURATION")]
    think: String,
    /// Users as multiples of the saturating number (peak throughput × think time).
    #[arg(long, default_value_t = 2.0)]
    load_factor: f64,
    /// Policies to run, comma-separated (fifo, sjf, sjf-aging:X).
    #[arg(long, default_value = "fifo,sjf")]
    policies: String,
    /// Capacity in cost units, or `calibrate`: the paper's search (fifo at
    /// --calibrate-factor × the saturating load, capacities doubling from --calibrate-min to
    /// --calibrate-max; the smallest within 2% of the best throughput).
    #[arg(long, default_value = "calibrate", value_name = "UNITS|calibrate")]
    capacity: String,
    #[arg(long, default_value_t = 2.0)]
    calibrate_factor: f64,
    #[arg(long, default_value = "10ms", value_name = "UNITS")]
    calibrate_min: String,
    #[arg(long, default_value = "600s", value_name = "UNITS")]
    calibrate_max: String,
    /// `wall` (the paper) or `share` (see `shortfirst gatekeeper --estimate-basis`).
    #[arg(long, default_value = "wall", value_name = "wall|share")]
    estimate_basis: String,
    /// Charge no request more than this fraction of the capacity (1 = the paper).
    #[arg(long, default_value_t = 1.0)]
    max_charge_share: f64,
    /// Every user sends its first request at time 0 (cold start under a wave).
    #[arg(long)]
    start_together: bool,
    /// The gateway's --max-queue-wait: a request waiting this long is turned away (its
    /// user thinks and sends again). Absent: no limit.
    #[arg(long, value_name = "DURATION")]
    max_queue_wait: Option<String>,
    /// Users give up on a request this long after sending it (a client timeout); the
    /// request is withdrawn if it waits, finished for no one if it runs, and the user thinks
    /// and sends again. Absent: users wait for ever.
    #[arg(long, value_name = "DURATION")]
    client_patience: Option<String>,
    /// The gatekeeper's --patience: refuse a request that would finish after its client
    /// gives up — `learn` that from the give-ups, a DURATION, or `off`.
    #[arg(long, default_value = "learn", value_name = "learn|off|DURATION")]
    patience: String,
    /// Sample the gate's load, queue, head charge and per-type admissions this often into
    /// each run's `timeline` in --out (e.g. 100ms). Absent: no timeline.
    #[arg(long, value_name = "DURATION")]
    timeline: Option<String>,
    /// Virtual time per run.
    #[arg(long, default_value = "300s", value_name = "DURATION")]
    duration: String,
    /// Leading virtual time not counted.
    #[arg(long, default_value = "60s", value_name = "DURATION")]
    warmup: String,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Replications (seeds seed .. seed+N-1); results are their means.
    #[arg(long, default_value_t = 5)]
    seeds: u64,
    /// Write the full result as JSON here (a summary table goes to stderr).
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
}

/// Means over the replications of one configuration.
#[derive(Debug, Serialize)]
struct Point {
    name: String,
    clients: usize,
    throughput_per_s: f64,
    throughput_over_peak: f64,
    mean_response_ms: f64,
    /// Little's law over every request, also those unfinished at the end (see
    /// `ModelResult::little_response_us`).
    little_response_ms: f64,
    mean_in_flight: f64,
    /// Demand served per second over the processors (1: every processor busy).
    work_over_peak: f64,
    /// The part of it completed while the request's user waited.
    useful_work_over_peak: f64,
    /// Requests expired by --max-queue-wait per run, mean over seeds.
    expired: f64,
    /// Requests refused because they would finish after their user gives up, per run.
    refused: f64,
    /// Requests whose user gave up, per run.
    gave_up: f64,
    /// Per type: mean response (ms) and final estimate (ms), means over seeds.
    types: Vec<(String, f64, f64)>,
    runs: Vec<ModelResult>,
}

#[derive(Debug, Serialize)]
struct Output {
    command: Vec<String>,
    types: Vec<ModelType>,
    backend: BackendModel,
    think_mean_s: f64,
    mean_demand_ms: f64,
    peak_per_s: f64,
    saturating_clients: usize,
    estimate_basis: String,
    max_charge_share: f64,
    capacity_us: u64,
    calibration: Vec<CalibrationTrial>,
    points: Vec<Point>,
}

fn mean(xs: impl Iterator<Item = f64>) -> f64 {
    let (s, n) = xs.fold((0.0, 0usize), |(s, n), x| (s + x, n + 1));
    if n == 0 {
        0.0
    } else {
        s / n as f64
    }
}

fn point(name: &str, clients: usize, peak: f64, cpus: usize, runs: Vec<ModelResult>) -> Point {
    let n_types = runs[0].types.len();
    let types = (0..n_types)
        .map(|i| {
            (
                runs[0].types[i].name.clone(),
                mean(runs.iter().map(|r| r.types[i].mean_response_us / 1e3)),
                mean(runs.iter().map(|r| r.types[i].final_estimate_us as f64 / 1e3)),
            )
        })
        .collect();
    let x = mean(runs.iter().map(|r| r.throughput_per_s));
    Point {
        name: name.to_string(),
        clients,
        throughput_per_s: x,
        throughput_over_peak: x / peak,
        mean_response_ms: mean(runs.iter().map(|r| r.mean_response_us / 1e3)),
        little_response_ms: mean(runs.iter().map(|r| r.little_response_us / 1e3)),
        mean_in_flight: mean(runs.iter().map(|r| r.mean_in_flight)),
        work_over_peak: mean(runs.iter().map(|r| r.work_per_s)) / cpus as f64,
        useful_work_over_peak: mean(runs.iter().map(|r| r.useful_work_per_s)) / cpus as f64,
        expired: mean(runs.iter().map(|r| r.types.iter().map(|t| t.expired as f64).sum::<f64>())),
        refused: mean(runs.iter().map(|r| r.types.iter().map(|t| t.refused as f64).sum::<f64>())),
        gave_up: mean(runs.iter().map(|r| r.types.iter().map(|t| t.gave_up as f64).sum::<f64>())),
        types,
        runs,
    }
}

/// Calibrate in the model, then run direct and each policy, and print the table.
pub fn run(a: ModelArgs) -> anyhow::Result<()> {
    let s = Setup::parse(&a)?;
    let (capacity_us, calibration) = capacity(&a, &s)?;
    let points = run_points(&a, &s, capacity_us)?;
    print_table(&a, &s, capacity_us, !calibration.is_empty(), &points);
    let out = Output {
        command: std::env::args().collect(),
        types: s.base.types,
        backend: s.base.backend,
        think_mean_s: s.base.think_mean_us / 1e6,
        mean_demand_ms: s.mean_demand_us / 1e3,
        peak_per_s: s.peak_per_s,
        saturating_clients: s.saturating,
        estimate_basis: a.estimate_basis.clone(),
        max_charge_share: a.max_charge_share,
        capacity_us,
        calibration,
        points,
    };
    if let Some(path) = &a.out {
        let text = serde_json::to_vec_pretty(&out)?;
        let tmp = path.with_extension("json.tmp");
        std::fs::write(&tmp, text).with_context(|| format!("writing {}", tmp.display()))?;
        std::fs::rename(&tmp, path).with_context(|| format!("renaming to {}", path.display()))?;
    }
    Ok(())
}

/// The flags, checked, as the runs' common configuration and the load it puts on the
/// backend.
struct Setup {
    /// Every run's configuration without a gate (direct access).
    base: ModelConfig,
    policies: Vec<AdmissionPolicy>,
    mean_demand_us: f64,
    /// Every processor busy, no thrashing.
    peak_per_s: f64,
    /// Users that saturate the backend: peak throughput × think time.
    saturating: usize,
    max_charge_share: f64,
    max_queue_wait_us: Option<u64>,
}

impl Setup {
    fn parse(a: &ModelArgs) -> anyhow::Result<Self> {
        let synth = a.backend.synthetic_config()?;
        let types: Vec<ModelType> = synth
            .types
            .iter()
            .map(|t| ModelType { name: t.name.clone(), demand_us: t.cost_us as f64, weight: t.weight })
            .collect();
        let think_us = parse_us(&a.think, "think")?;
        let duration_us = parse_us(&a.duration, "duration")?;
        let warmup_us = parse_us(&a.warmup, "warmup")?;
        if !(a.load_factor > 0.0 && a.load_factor <= 1000.0) {
            bail!("--load-factor must be in (0, 1000], got {}", a.load_factor);
        }
        if !(a.max_charge_share > 0.0 && a.max_charge_share <= 1.0) {
            bail!("--max-charge-share must be in (0, 1], got {}", a.max_charge_share);
        }
        let basis = a.estimate_basis.parse().with_context(|| format!("--estimate-basis {:?}", a.estimate_basis))?;
        let policies: Vec<AdmissionPolicy> = a
            .policies
            .split(',')
            .map(|p| p.parse().with_context(|| format!("--policies: {p:?}")))
            .collect::<anyhow::Result<_>>()?;
        let mean_demand_us = synth.mean_cost_us();
        let peak_per_s = a.backend.cpus as f64 / (mean_demand_us / 1e6);
        let saturating = ((peak_per_s * think_us / 1e6).ceil() as usize).max(1);
        let b = &a.backend;
        let base = ModelConfig {
            types,
            backend: BackendModel { cpus: b.cpus, slots: b.slots, thrash: b.thrash, background: a.background },
            clients: ((saturating as f64 * a.load_factor).round() as usize).max(1),
            think_mean_us: think_us,
            gate: None,
            estimator: EstimatorConfig { basis, ..EstimatorConfig::default() },
            auto: None,
            charge_at: ChargeAt::Admission,
            patience: a.patience.parse().map_err(|e: String| anyhow::anyhow!("--patience: {e}"))?,
            client_patience_us: a.client_patience.as_deref().map(|t| parse_us(t, "client-patience")).transpose()?,
            duration_us,
            warmup_us,
            seed: a.seed,
            start_together: a.start_together,
            script: None,
            timeline_period_us: a.timeline.as_deref().map(|t| parse_us(t, "timeline")).transpose()?,
        };
        let max_queue_wait_us = a
            .max_queue_wait
            .as_deref()
            .map(|t| config::parse_duration(t, "max-queue-wait").map(|d| d.as_micros() as u64))
            .transpose()?;
        let max_charge_share = a.max_charge_share;
        Ok(Setup { base, policies, mean_demand_us, peak_per_s, saturating, max_charge_share, max_queue_wait_us })
    }

    /// The gate of a run: `capacity_us` and `policy` with the flags' limits.
    fn gate(&self, capacity_us: u64, policy: AdmissionPolicy) -> GateConfig {
        GateConfig {
            max_charge_share: self.max_charge_share,
            max_queue_wait_us: self.max_queue_wait_us,
            ..GateConfig::new(capacity_us, policy)
        }
    }
}

/// A duration flag as µs of virtual time.
fn parse_us(s: &str, what: &str) -> anyhow::Result<f64> {
    Ok(config::parse_duration(s, what)?.as_secs_f64() * 1e6)
}

/// The capacity given, or `calibrate`: the paper's search in the model (see --capacity),
/// under --calibrate-background if given.
fn capacity(a: &ModelArgs, s: &Setup) -> anyhow::Result<(u64, Vec<CalibrationTrial>)> {
    if a.capacity.trim() != "calibrate" {
        return Ok((config::parse_cost_us(&a.capacity, "capacity")?, Vec::new()));
    }
    let min = config::parse_cost_us(&a.calibrate_min, "calibrate-min")?;
    let max = config::parse_cost_us(&a.calibrate_max, "calibrate-max")?;
    let users = ((s.saturating as f64 * a.calibrate_factor).round() as usize).max(1);
    let mut c = ModelConfig { clients: users, gate: Some(s.gate(min, AdmissionPolicy::Fifo)), ..s.base.clone() };
    c.backend.background = a.calibrate_background.unwrap_or(a.background);
    Ok(model::calibrate(&c, min, max, 2.0, 0.02)?)
}

/// Direct access, then each policy at `capacity_us`, each over the seeds.
fn run_points(a: &ModelArgs, s: &Setup, capacity_us: u64) -> anyhow::Result<Vec<Point>> {
    let (clients, peak, cpus) = (s.base.clients, s.peak_per_s, s.base.backend.cpus);
    let mut points = vec![point("direct", clients, peak, cpus, model::replicate(&s.base, a.seeds)?)];
    for p in &s.policies {
        let c = ModelConfig { gate: Some(s.gate(capacity_us, *p)), ..s.base.clone() };
        points.push(point(&p.to_string(), clients, peak, cpus, model::replicate(&c, a.seeds)?));
    }
    Ok(points)
}

/// The summary table, to stderr.
fn print_table(a: &ModelArgs, s: &Setup, capacity_us: u64, calibrated: bool, points: &[Point]) {
    eprintln!(
        "model: {} users ({}x the saturating {}), peak {:.1}/s, capacity {:.1} ms ({}), basis {}, max charge share {}",
        s.base.clients,
        a.load_factor,
        s.saturating,
        s.peak_per_s,
        capacity_us as f64 / 1e3,
        if calibrated { "calibrated" } else { "given" },
        a.estimate_basis,
        a.max_charge_share
    );
    for p in points {
        let costliest = p.types.iter().max_by(|x, y| x.2.total_cmp(&y.2));
        eprintln!(
            "  {:<14} X {:8.1}/s ({:.2} of peak, work {:.2}, useful {:.2})  mean RT {:8.1} ms completed, {:8.1} ms all (Little)  in flight {:6.1}  expired {:.0} refused {:.0} gave up {:.0}{}",
            p.name,
            p.throughput_per_s,
            p.throughput_over_peak,
            p.work_over_peak,
            p.useful_work_over_peak,
            p.mean_response_ms,
            p.little_response_ms,
            p.mean_in_flight,
            p.expired,
            p.refused,
            p.gave_up,
            costliest
                .filter(|_| p.name != "direct")
                .map(|(n, rt, est)| format!("  {n}: RT {rt:.0} ms, estimate {est:.0} ms"))
                .unwrap_or_default()
        );
    }
}
