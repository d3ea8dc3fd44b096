//! `make bench-sim`: simulator throughput (jobs per second of wall time, one core)
//! for every policy on the same in-memory Poisson workloads, side by side in one run.
//!
//! Usage: `bench_sim OUT.json [JOBS]`. Workloads: load 0.9 on one 10 Mbit/s link,
//! exponential sizes (mean 10 kB) and bounded Pareto sizes (alpha 1.1, 1 kB – 10 MB).
//! Each (policy, workload) runs `REPEATS` times; the best run counts (the machine is
//! shared, and the best run is the least disturbed). Targets: srpt >= 1 M jobs/s,
//! ps >= 300 k jobs/s; the JSON gives the ratios to the targets and to fifo.

// The wall clock: this measures real run time.
#![allow(clippy::disallowed_types)]

use std::time::Instant;

use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, Exp};
use shortfirst_core::policy::Policy;
use shortfirst_sim::{simulate, Job, Link};

const REPEATS: usize = 3;
const LOAD: f64 = 0.9;
const RATE_BITS_PER_S: f64 = 10e6;
const POLICIES: &[&str] = &["fifo", "srpt", "ps", "srpt-classes:1K,2K,5K,20K,50K", "sjf", "sjf-aging:2", "las", "fsp"];

fn workload(name: &str, n: usize, seed: u64) -> Vec<Job> {
    let mut rng = rand_chacha::ChaCha12Rng::seed_from_u64(seed);
    let sizes: Vec<u64> = match name {
        "exp" => {
            let d = Exp::<f64>::new(1.0 / 10_000.0).unwrap();
            (0..n).map(|_| d.sample(&mut rng).ceil() as u64).collect()
        }
        _ => {
            let (alpha, k, p): (f64, f64, f64) = (1.1, 1_000.0, 10_000_000.0);
            (0..n)
                .map(|_| {
                    let u: f64 = rng.gen();
                    (k * (1.0 - u * (1.0 - (k / p).powf(alpha))).powf(-1.0 / alpha)).round() as u64
                })
                .collect()
        }
    };
    let mean = sizes.iter().sum::<u64>() as f64 / n as f64;
    let rate_bytes = RATE_BITS_PER_S / 8.0;
    let gaps = Exp::new(LOAD * rate_bytes / mean).unwrap();
    let mut t = 0.0;
    sizes
        .into_iter()
        .map(|size_bytes| {
            t += gaps.sample(&mut rng);
            Job { arrival_s: t, size_bytes }
        })
        .collect()
}

fn first_line(path: &str, key: &str) -> String {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|s| {
            s.lines().find(|l| l.starts_with(key)).map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string())
        })
        .unwrap_or_default()
}

fn main() {
    let mut args = std::env::args().skip(1);
    let out = args.next().expect("usage: bench_sim OUT.json [JOBS]");
    let n: usize = args.next().map(|s| s.parse().expect("JOBS must be a number")).unwrap_or(2_000_000);
    let link = Link { rate_bytes_per_s: RATE_BITS_PER_S / 8.0, servers: 1 };
    let mut rows = Vec::new();
    let mut best_of = std::collections::BTreeMap::new();
    for w in ["exp", "bpareto"] {
        let jobs = workload(w, n, 42);
        for p in POLICIES {
            let policy = Policy::parse(p).unwrap();
            let mut best = f64::INFINITY;
            let mut mean_response_s = 0.0;
            for _ in 0..REPEATS {
                let t = Instant::now();
                let out = simulate(&jobs, &policy, link).unwrap();
                best = best.min(t.elapsed().as_secs_f64());
                mean_response_s = jobs.iter().zip(&out).map(|(j, o)| o.done_s - j.arrival_s).sum::<f64>() / n as f64;
            }
            let jobs_per_s = n as f64 / best;
            eprintln!("{w:8} {p:32} {jobs_per_s:>12.0} jobs/s  (mean response {mean_response_s:.4} s)");
            best_of.insert((w, *p), jobs_per_s);
            rows.push(serde_json::json!({
                "workload": w, "policy": p, "jobs": n, "best_wall_s": best, "jobs_per_s": jobs_per_s,
                "mean_response_s": mean_response_s,
            }));
        }
    }
    let min_over =
        |p: &str| best_of.iter().filter(|((_, q), _)| *q == p).map(|(_, v)| *v).fold(f64::INFINITY, f64::min);
    let srpt = min_over("srpt");
    let ps = min_over("ps");
    let fifo = min_over("fifo");
    let report = serde_json::json!({
        "benchmark": "bench-sim",
        "what": "simulator throughput, jobs per second of wall time on one core, best of 3, load 0.9",
        "machine": {
            "cpu": first_line("/proc/cpuinfo", "model name"),
            "cpus": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
            "kernel": std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default().trim(),
        },
        "jobs_per_workload": n,
        "results": rows,
        "srpt_jobs_per_s_min": srpt,
        "ps_jobs_per_s_min": ps,
        "targets": {"srpt_jobs_per_s": 1e6, "ps_jobs_per_s": 3e5},
        "ratio_srpt_to_target": srpt / 1e6,
        "ratio_ps_to_target": ps / 3e5,
        "ratio_srpt_to_fifo": srpt / fifo,
        "ratio_ps_to_fifo": ps / fifo,
        "targets_met": srpt >= 1e6 && ps >= 3e5,
    });
    let tmp = format!("{out}.tmp");
    std::fs::write(&tmp, serde_json::to_vec_pretty(&report).unwrap()).expect("write report");
    std::fs::rename(&tmp, &out).expect("rename report");
    eprintln!("srpt {srpt:.0} jobs/s ({:.2}× target), ps {ps:.0} jobs/s ({:.2}× target) → {out}", srpt / 1e6, ps / 3e5);
}
