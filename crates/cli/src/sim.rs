//! `shortfirst sim`: replay a trace (or a generated Poisson workload) through an
//! ideal link under a scheduling policy; write `requests.csv` and `summary.json`.
//!
//! Record semantics (same columns as `shortfirst load`): `scheduled_s`,
//! `start_s` and `connected_s` are the job's arrival (the simulated link has
//! no connection set-up); `first_byte_s` is the first instant the job receives
//! service; `done_s` its completion; `bytes_received` = `size_bytes`; status
//! 200, outcome `ok`, one attempt. Times are seconds from the first arrival.

// The wall clock: `simulate_wall_s` reports how long the simulation really took.
#![allow(clippy::disallowed_types)]

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use rand::SeedableRng;
use rand_distr::{Distribution, Exp};
use serde::Serialize;
use shortfirst_core::policy::Policy;
use shortfirst_load::dist::SizeDist;
use shortfirst_load::record::{PhaseTag, RecordWriter, RequestOutcome as RecordOutcome, RequestRecord};
use shortfirst_load::schedule::{LoadSchedule, ScheduleSummary};
use shortfirst_load::trace::{self, TraceFormat};
use shortfirst_sim::report::{summarize, Summary};
use shortfirst_sim::{simulate, Job, Link};

mod farm;

/// Most jobs `--jobs` may ask for (memory: about 60 bytes per job with the paths).
const MAX_GENERATED_JOBS: u64 = shortfirst_sim::engine::MAX_JOBS as u64;

/// The options live behind a `Box` so the CLI's subcommand enum stays small.
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    options: Box<Options>,
}

#[derive(clap::Args, Debug)]
#[command(group(clap::ArgGroup::new("input").required(true).args(["trace", "workload"])))]
pub struct Options {
    /// Trace to replay: our CSV (`time_s,path,size_bytes[,client]`), a Common/Combined
    /// Log Format access log, or a World Cup 1998 binary log.
    #[arg(long, value_name = "FILE")]
    trace: Option<PathBuf>,
    /// Trace format (csv, clf, wc98); guessed from the file name when absent.
    #[arg(long, value_name = "FORMAT", requires = "trace")]
    trace_format: Option<TraceFormat>,
    /// Skip (and count) malformed trace lines instead of failing.
    #[arg(long, requires = "trace")]
    skip_bad: bool,
    /// Instead of a trace: Poisson arrivals with i.i.d. sizes from exp:MEAN,
    /// bpareto:ALPHA,MIN,MAX, surge, wc98like or fixed:BYTES (sizes take units: 100K, 2M).
    #[arg(long, value_name = "SPEC", requires = "jobs")]
    workload: Option<String>,
    /// Number of jobs to generate with --workload.
    #[arg(long, value_name = "N", requires = "workload")]
    jobs: Option<u64>,
    /// Cap for `surge` sizes: 10M, 500K or bytes (default: the load generator's).
    #[arg(long, value_name = "SIZE", requires = "workload", value_parser = crate::units::size_bytes_f64)]
    surge_max_bytes: Option<f64>,
    /// Seed for --workload.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Scale arrival times so that requested bits/s = RHO × total capacity (servers ×
    /// rate), measured on the jobs themselves (the papers' method).
    #[arg(long, value_name = "RHO", conflicts_with = "arrival_rate")]
    load: Option<f64>,
    /// Time-varying load, as `shortfirst load --load-schedule` (see its --help):
    /// multiply the arrival rate (after --load or --arrival-rate) phase by phase, e.g.
    /// 25s@0.2,25s@1.2, const@1.4, file:PATH or the overload paper's w1..w10.
    /// requests.csv gains `phase` and `load_multiplier` columns.
    #[arg(long, value_name = "SPEC", value_parser = crate::load::parse_load_schedule)]
    load_schedule: Option<Box<LoadSchedule>>,
    /// With --workload: Poisson arrival rate in jobs per second (e.g. computed from
    /// the size distribution's exact mean for theory checks).
    #[arg(long, value_name = "PER_S", requires = "workload")]
    arrival_rate: Option<f64>,
    /// ps (also fair), fifo, srpt, srpt-classes:CUTOFFS, size-classes:CUTOFFS, sjf, sjf-aging:X,
    /// las, fsp. `srpt` here is exact SRPT; what `shortfirst serve --policy srpt --cutoffs C`
    /// does is `srpt-classes:C`.
    #[arg(long, value_name = "POLICY")]
    policy: String,
    /// The link's rate (of each server), bits per second: 10mbit, 1gbit, 500kbit or a number.
    #[arg(long, value_name = "RATE")]
    link_rate: String,
    /// Number of servers, each of --link-rate (no job uses more than one).
    #[arg(long, default_value_t = 1)]
    servers: usize,
    /// A farm: each of the --servers hosts its own link of RATE and its own queue under
    /// POLICY, each job sent on arrival by RULE: random, round-robin, least-connections,
    /// least-work (fewest bytes left), sita:CUTOFFS (host i takes sizes up to the i-th
    /// cutoff, e.g. sita:20K,1M for 3 hosts) or sita-e (cutoffs giving every host the
    /// same load, from the jobs' sizes; sita-e:N from the last N sizes dispatched, as a
    /// live server would). Without it, --servers is one shared queue.
    /// requests.csv gains a `host` column; summary.json a `farm` section per host.
    #[arg(long, value_name = "RULE")]
    dispatch: Option<String>,
    /// Seed for --dispatch random.
    #[arg(long, value_name = "N", default_value_t = 1)]
    dispatch_seed: u64,
    /// Leave the first N jobs out of summary.json (they are still in requests.csv).
    #[arg(long, value_name = "N", default_value_t = 0)]
    warmup_jobs: usize,
    /// Write summary.json only (no requests.csv).
    #[arg(long)]
    summary_only: bool,
    /// Output directory (created if missing).
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
}

/// Jobs plus what the records need that the engine does not.
struct Input {
    jobs: Vec<Job>,
    paths: Vec<String>,
    clients: Vec<u32>,
    skipped: u64,
}

#[derive(Serialize)]
struct SummaryFile<'a> {
    #[serde(flatten)]
    summary: &'a Summary,
    policy: String,
    rate_bits_per_s: f64,
    servers: usize,
    trace: Option<String>,
    workload: Option<&'a str>,
    seed: Option<u64>,
    load_target: Option<f64>,
    load_schedule: Option<ScheduleSummary>,
    #[serde(skip_serializing_if = "Option::is_none")]
    farm: Option<farm::FarmSummary>,
    arrival_rate_per_s: Option<f64>,
    warmup_jobs: usize,
    skipped_trace_lines: u64,
    first_byte_meaning: &'static str,
    simulate_wall_s: f64,
    jobs_per_s: f64,
    command: Vec<String>,
}

pub fn run(args: Args) -> Result<()> {
    let args = *args.options;
    let policy = Policy::parse(&args.policy)?;
    let rate_bits_per_s = parse_rate_bits_per_s(&args.link_rate)?;
    if let Some(rho) = args.load {
        if !(rho.is_finite() && rho > 0.0) {
            bail!("--load {rho}: must be a number > 0");
        }
    }
    if args.servers == 0 {
        bail!("--servers 0: need at least one server");
    }
    let link = Link { rate_bytes_per_s: rate_bits_per_s / 8.0, servers: args.servers };
    let mut input = match (&args.trace, &args.workload) {
        (Some(path), _) => read_trace(path, args.trace_format, args.skip_bad)?,
        (None, Some(spec)) => generate(spec, &args)?,
        (None, None) => bail!("give --trace FILE or --workload SPEC"),
    };
    if let Some(rho) = args.load {
        scale_to_load(&mut input.jobs, rho, link).with_context(|| {
            format!("--load {rho}: cannot scale arrivals (need two distinct arrival times and some bytes)")
        })?;
    }
    if let Some(s) = &args.load_schedule {
        apply_schedule(&mut input.jobs, s);
    }
    if args.warmup_jobs >= input.jobs.len().max(1) {
        bail!("--warmup-jobs {} leaves no job to summarise ({} jobs)", args.warmup_jobs, input.jobs.len());
    }

    let started = Instant::now();
    let farm = farm::Farm::run(args.dispatch.as_deref(), args.dispatch_seed, &input.jobs, &policy, link)?;
    let outcomes = match &farm {
        Some(f) => f.outcome.times.clone(),
        None => simulate(&input.jobs, &policy, link).context("simulation")?,
    };
    let simulate_wall_s = started.elapsed().as_secs_f64();

    std::fs::create_dir_all(&args.out).with_context(|| format!("creating {}", args.out.display()))?;
    if !args.summary_only {
        let hosts = farm.as_ref().map(|f| &f.outcome.host[..]);
        write_records(&args.out.join("requests.csv"), &input, &outcomes, args.load_schedule.as_deref(), hosts)?;
    }
    let w = args.warmup_jobs;
    let summary = summarize(&input.jobs, &outcomes, link, w);
    let file = SummaryFile {
        summary: &summary,
        policy: policy.to_string(),
        rate_bits_per_s,
        servers: args.servers,
        trace: args.trace.as_ref().map(|p| p.display().to_string()),
        workload: args.workload.as_deref(),
        seed: args.workload.as_ref().map(|_| args.seed),
        load_target: args.load,
        load_schedule: args.load_schedule.as_ref().map(|s| schedule_summary(&input.jobs, s)),
        farm: farm.as_ref().zip(args.dispatch.as_deref()).map(|(f, d)| f.summary(d, &input.jobs, link, w)),
        arrival_rate_per_s: args.arrival_rate,
        warmup_jobs: w,
        skipped_trace_lines: input.skipped,
        first_byte_meaning: "first instant the job receives service",
        simulate_wall_s,
        jobs_per_s: input.jobs.len() as f64 / simulate_wall_s.max(1e-9),
        command: std::env::args().collect(),
    };
    write_atomically(&args.out.join("summary.json"), &serde_json::to_vec_pretty(&file)?)?;
    eprintln!(
        "shortfirst sim: {} jobs, {} on {} × {} bit/s: mean response {:.6} s, mean slowdown {:.3}, offered load {:.3} ({:.2} s, {:.0} jobs/s)",
        summary.requests,
        policy,
        args.servers,
        rate_bits_per_s,
        summary.mean_response_s,
        summary.mean_slowdown,
        summary.offered_load,
        simulate_wall_s,
        file.jobs_per_s
    );
    if let Some(f) = &file.farm {
        farm::print_hosts(f);
    }
    Ok(())
}

/// `10mbit`, `1.5gbit`, `500kbit`, `800bit` or a plain number, in bits per second: the
/// shared syntax of every command, without a shaper's range (a simulated link may have
/// any positive rate).
fn parse_rate_bits_per_s(text: &str) -> Result<f64> {
    crate::units::rate_bits_per_s(text).map_err(|e| anyhow::anyhow!("--link-rate: {e}"))
}

fn read_trace(path: &Path, format: Option<TraceFormat>, skip_bad: bool) -> Result<Input> {
    let iter = trace::open(path, format).with_context(|| format!("opening trace {}", path.display()))?;
    let (iter, skip_count): (trace::TraceIter, _) = if skip_bad {
        let (it, count) = trace::SkipBad::new(iter);
        (Box::new(it), Some(count))
    } else {
        (iter, None)
    };
    let mut rows: Vec<(f64, u64, String, u32)> = Vec::new();
    for r in iter {
        let r = r?;
        if rows.len() >= shortfirst_sim::engine::MAX_JOBS {
            bail!("{}: more than {} requests; split the trace", path.display(), shortfirst_sim::engine::MAX_JOBS);
        }
        rows.push((r.time_s, r.size_bytes, r.path, r.client.unwrap_or(0)));
    }
    let skipped = skip_count.map_or(0, |c| c.skipped());
    if rows.is_empty() {
        bail!("{}: the trace holds no requests", path.display());
    }
    // Access logs are not always in time order; the replay is (stable: equal times keep file order).
    rows.sort_by(|a, b| a.0.total_cmp(&b.0));
    let t0 = rows[0].0;
    let mut input = Input { jobs: Vec::with_capacity(rows.len()), paths: Vec::new(), clients: Vec::new(), skipped };
    for (time_s, size_bytes, path, client) in rows {
        input.jobs.push(Job { arrival_s: time_s - t0, size_bytes });
        input.paths.push(path);
        input.clients.push(client);
    }
    Ok(input)
}

fn generate(spec: &str, args: &Options) -> Result<Input> {
    let jobs = args.jobs.context("--workload needs --jobs N")?;
    if jobs == 0 || jobs > MAX_GENERATED_JOBS {
        bail!("--jobs {jobs}: must be between 1 and {MAX_GENERATED_JOBS}");
    }
    let dist = SizeDist::parse(spec, args.surge_max_bytes)?;
    let arrival_rate = match (args.arrival_rate, args.load) {
        (Some(r), _) if r.is_finite() && r > 0.0 => r,
        (Some(r), _) => bail!("--arrival-rate {r}: must be a number > 0"),
        // Unit rate; --load rescales afterwards.
        (None, Some(_)) => 1.0,
        (None, None) => bail!("--workload needs --load RHO or --arrival-rate PER_S"),
    };
    // Separate streams for sizes and gaps, so changing the rate keeps the sizes.
    let mut size_rng = rand_chacha::ChaCha12Rng::seed_from_u64(args.seed);
    let mut gap_rng = rand_chacha::ChaCha12Rng::seed_from_u64(args.seed ^ 0x9e37_79b9_7f4a_7c15);
    let gaps = Exp::new(arrival_rate).context("arrival rate")?;
    let mut t = 0.0;
    let n = jobs as usize;
    let mut input = Input { jobs: Vec::with_capacity(n), paths: Vec::new(), clients: Vec::new(), skipped: 0 };
    for i in 0..n {
        if i > 0 {
            t += gaps.sample(&mut gap_rng);
        }
        input.jobs.push(Job { arrival_s: t, size_bytes: dist.sample_bytes(&mut size_rng) });
    }
    Ok(input)
}

/// Rescales arrival times so the jobs' bits over their arrival span are `rho` × capacity.
fn scale_to_load(jobs: &mut [Job], rho: f64, link: Link) -> Option<()> {
    let span = jobs.last()?.arrival_s - jobs.first()?.arrival_s;
    let bytes: u64 = jobs.iter().map(|j| j.size_bytes).sum();
    if span <= 0.0 || bytes == 0 {
        return None;
    }
    let want_span = bytes as f64 / (rho * link.rate_bytes_per_s * link.servers as f64);
    let factor = want_span / span;
    let t0 = jobs[0].arrival_s;
    for j in jobs.iter_mut() {
        j.arrival_s = (j.arrival_s - t0) * factor;
    }
    Some(())
}

/// Warps arrival times (seconds from the first arrival) by a load schedule, as the load
/// generator warps its trace: each gap divided by the multiplier in force. Keeps the order.
fn apply_schedule(jobs: &mut [Job], schedule: &LoadSchedule) {
    for j in jobs {
        j.arrival_s = schedule.wall_time_s(j.arrival_s);
    }
}

/// The schedule in summary.json, with the jobs arriving in each phase.
fn schedule_summary(jobs: &[Job], schedule: &LoadSchedule) -> ScheduleSummary {
    let mut by_phase = vec![0; schedule.phases().len()];
    for j in jobs {
        by_phase[schedule.phase_at(j.arrival_s).0] += 1;
    }
    schedule.summary(&by_phase, jobs.last().map_or(0.0, |j| j.arrival_s))
}

fn write_records(
    path: &Path,
    input: &Input,
    outcomes: &[shortfirst_sim::JobTimes],
    schedule: Option<&LoadSchedule>,
    hosts: Option<&[u32]>,
) -> Result<()> {
    let mut w = RecordWriter::create_with_columns(path, schedule.is_some(), hosts.is_some())
        .with_context(|| format!("creating {}", path.display()))?;
    for (i, (job, o)) in input.jobs.iter().zip(outcomes).enumerate() {
        let record = RequestRecord {
            id: i as u64,
            client: input.clients.get(i).copied().unwrap_or(0),
            path: input.paths.get(i).cloned().unwrap_or_else(|| format!("/job/{i}")),
            size_bytes: job.size_bytes,
            bytes_received: job.size_bytes,
            status: Some(200),
            outcome: RecordOutcome::Ok,
            attempts: 1,
            scheduled_s: job.arrival_s,
            start_s: job.arrival_s,
            connected_s: Some(job.arrival_s),
            first_byte_s: Some(o.first_service_s),
            done_s: Some(o.done_s),
        };
        let tag = schedule.map(|s| {
            let (phase, multiplier) = s.phase_at(job.arrival_s);
            PhaseTag { phase, multiplier }
        });
        w.write_tagged(&record, tag, hosts.map(|h| h[i])).with_context(|| format!("writing {}", path.display()))?;
    }
    w.finish().with_context(|| format!("finishing {}", path.display()))?;
    Ok(())
}

/// Writes `bytes` to `path` through a temporary file and a rename.
fn write_atomically(path: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = path.with_extension("json.tmp");
    std::fs::write(&tmp, bytes).with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("renaming {} to {}", tmp.display(), path.display()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rate_table() {
        for (text, want) in
            [("10mbit", 1e7), ("1.5gbit", 1.5e9), ("500kbit", 5e5), ("800bit", 800.0), ("2500000", 2.5e6)]
        {
            assert_eq!(parse_rate_bits_per_s(text).unwrap(), want, "{text}");
        }
        for bad in ["", "10mbps", "-1mbit", "0", "fast", "1e400"] {
            assert!(parse_rate_bits_per_s(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn load_scaling_hits_the_target() {
        let mut jobs = vec![
            Job { arrival_s: 10.0, size_bytes: 500 },
            Job { arrival_s: 11.0, size_bytes: 500 },
            Job { arrival_s: 12.0, size_bytes: 1000 },
        ];
        let link = Link { rate_bytes_per_s: 1000.0, servers: 2 };
        scale_to_load(&mut jobs, 0.5, link).unwrap();
        // 2000 bytes over the span at 0.5 × 2000 B/s: span 2 s.
        assert_eq!(jobs[0].arrival_s, 0.0);
        assert!((jobs[2].arrival_s - 2.0).abs() < 1e-12);
        assert!((jobs[1].arrival_s - 1.0).abs() < 1e-12);
        assert!(scale_to_load(&mut jobs[..1], 0.5, link).is_none());
    }

    #[test]
    fn load_schedule_warps_arrivals() {
        // 2 s at 0.5, then 1 s at 2: arrivals 1 s apart become 2, 0.5, 0.5 and 2 s apart.
        let s = LoadSchedule::parse("2s@0.5,1s@2").unwrap();
        let mut jobs: Vec<Job> = (0..5).map(|i| Job { arrival_s: f64::from(i), size_bytes: 100 }).collect();
        apply_schedule(&mut jobs, &s);
        let got: Vec<f64> = jobs.iter().map(|j| j.arrival_s).collect();
        assert_eq!(got, [0.0, 2.0, 2.5, 3.0, 5.0]);
        let sum = schedule_summary(&jobs, &s);
        // Phases of 0, 2, 2.5, 3 (the next period) and 5: 0, 1, 1, 0, 1.
        assert_eq!(sum.phases.iter().map(|p| p.requests).collect::<Vec<_>>(), [2, 3]);
    }
}
