//! From outcomes to results: the summary statistics of a simulated run.
//!
//! Response time = completion − arrival. Slowdown = response time ÷ the job's
//! service time alone on one idle server (`size × 8 / rate`); zero-size jobs have
//! no slowdown and are left out of its mean (counted in `zero_size_jobs`).
//! Percentiles are nearest-rank on the exact sorted responses.

use serde::Serialize;

use crate::engine::{Job, JobTimes, Link};

/// What `summary.json` reports about a run (the CLI adds where the jobs came from).
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Summary {
    pub requests: usize,
    pub completed: usize,
    pub failed: usize,
    pub aborted: usize,
    pub zero_size_jobs: usize,
    pub total_bytes: u64,
    /// Sample mean and second moment of the sizes: control variates for theory checks.
    pub mean_size_bytes: f64,
    pub mean_size_squared_bytes2: f64,
    /// Requested bits per second over the arrival span ÷ total capacity (servers × rate).
    pub offered_load: f64,
    /// Bytes served ÷ (last completion − first arrival).
    pub throughput_bytes_per_s: f64,
    pub makespan_s: f64,
    pub mean_response_s: f64,
    pub p50_response_s: f64,
    pub p90_response_s: f64,
    pub p99_response_s: f64,
    pub max_response_s: f64,
    pub mean_slowdown: f64,
    pub p99_slowdown: f64,
    pub max_slowdown: f64,
    /// Mean wait before first service (first_service − arrival).
    pub mean_first_service_s: f64,
    /// Mean unfinished work an arrival finds, in seconds at full capacity (servers ×
    /// rate): the same for every work-conserving single-server policy (Lindley's
    /// recursion on arrivals and sizes alone), so it serves as a control variate;
    /// its M/G/1 expectation is Pollaczek–Khinchine's `λE[S²] / (2(1 − ρ))`.
    pub mean_work_found_s: f64,
}

/// Nearest-rank percentile of sorted values (`q` in 0..=1); NaN when empty.
pub fn percentile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Mean over arrivals `from..` of the work in the system just before each arrives
/// (Lindley's recursion over all jobs from the first).
pub fn mean_work_found_s(jobs: &[Job], capacity_bytes_per_s: f64, from: usize) -> f64 {
    let mut work_s = 0.0f64;
    let mut previous_s = jobs.first().map_or(0.0, |j| j.arrival_s);
    let mut sum = 0.0;
    for (i, j) in jobs.iter().enumerate() {
        work_s = (work_s - (j.arrival_s - previous_s)).max(0.0);
        if i >= from {
            sum += work_s;
        }
        work_s += j.size_bytes as f64 / capacity_bytes_per_s;
        previous_s = j.arrival_s;
    }
    if jobs.len() <= from {
        f64::NAN
    } else {
        sum / (jobs.len() - from) as f64
    }
}

/// Summary of `jobs[warmup_jobs..]` (the warm-up jobs still shape what later jobs find).
pub fn summarize(all_jobs: &[Job], all_outcomes: &[JobTimes], link: Link, warmup_jobs: usize) -> Summary {
    assert_eq!(all_jobs.len(), all_outcomes.len(), "one outcome per job");
    let w = warmup_jobs.min(all_jobs.len());
    let (jobs, outcomes) = (&all_jobs[w..], &all_outcomes[w..]);
    let n = jobs.len();
    let mut responses: Vec<f64> = jobs.iter().zip(outcomes).map(|(j, o)| o.done_s - j.arrival_s).collect();
    let mut slowdowns: Vec<f64> = jobs
        .iter()
        .zip(&responses)
        .filter(|(j, _)| j.size_bytes > 0)
        .map(|(j, r)| r / (j.size_bytes as f64 / link.rate_bytes_per_s))
        .collect();
    let total_bytes: u64 = jobs.iter().map(|j| j.size_bytes).sum();
    let first_arrival = jobs.first().map_or(0.0, |j| j.arrival_s);
    let last_arrival = jobs.last().map_or(0.0, |j| j.arrival_s);
    let last_done = outcomes.iter().map(|o| o.done_s).fold(f64::NAN, f64::max);
    let span = last_arrival - first_arrival;
    let capacity_bytes_per_s = link.rate_bytes_per_s * link.servers as f64;
    let mean = |v: &[f64]| if v.is_empty() { f64::NAN } else { v.iter().sum::<f64>() / v.len() as f64 };
    let mean_response_s = mean(&responses);
    let mean_slowdown = mean(&slowdowns);
    let waits: Vec<f64> = jobs.iter().zip(outcomes).map(|(j, o)| o.first_service_s - j.arrival_s).collect();
    responses.sort_unstable_by(f64::total_cmp);
    slowdowns.sort_unstable_by(f64::total_cmp);
    let makespan_s = if n == 0 { 0.0 } else { last_done - first_arrival };
    Summary {
        requests: n,
        completed: n,
        failed: 0,
        aborted: 0,
        zero_size_jobs: n - slowdowns.len(),
        total_bytes,
        mean_size_bytes: total_bytes as f64 / n as f64,
        mean_size_squared_bytes2: jobs.iter().map(|j| (j.size_bytes as f64).powi(2)).sum::<f64>() / n as f64,
        offered_load: if span > 0.0 { total_bytes as f64 / span / capacity_bytes_per_s } else { f64::NAN },
        throughput_bytes_per_s: if makespan_s > 0.0 { total_bytes as f64 / makespan_s } else { f64::NAN },
        makespan_s,
        mean_response_s,
        p50_response_s: percentile(&responses, 0.5),
        p90_response_s: percentile(&responses, 0.9),
        p99_response_s: percentile(&responses, 0.99),
        max_response_s: responses.last().copied().unwrap_or(f64::NAN),
        mean_slowdown,
        p99_slowdown: percentile(&slowdowns, 0.99),
        max_slowdown: slowdowns.last().copied().unwrap_or(f64::NAN),
        mean_first_service_s: mean(&waits),
        mean_work_found_s: mean_work_found_s(all_jobs, capacity_bytes_per_s, w),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentile_nearest_rank() {
        let v: Vec<f64> = (1..=10).map(f64::from).collect();
        assert_eq!(percentile(&v, 0.5), 5.0);
        assert_eq!(percentile(&v, 0.9), 9.0);
        assert_eq!(percentile(&v, 0.99), 10.0);
        assert_eq!(percentile(&v, 0.0), 1.0);
        assert!(percentile(&[], 0.5).is_nan());
    }

    #[test]
    fn summary_of_two_jobs() {
        // 1000 B/s: job 0 (1000 B) at 0 done at 1; job 1 (500 B) at 1 done at 2 (waited 0.5).
        let jobs = [Job { arrival_s: 0.0, size_bytes: 1000 }, Job { arrival_s: 1.0, size_bytes: 500 }];
        let outcomes = [JobTimes { first_service_s: 0.0, done_s: 1.0 }, JobTimes { first_service_s: 1.5, done_s: 2.0 }];
        let s = summarize(&jobs, &outcomes, Link { rate_bytes_per_s: 1000.0, servers: 1 }, 0);
        assert_eq!(s.requests, 2);
        assert_eq!(s.mean_response_s, 1.0);
        assert_eq!(s.mean_slowdown, 1.5); // (1/1 + 1/0.5) / 2
        assert_eq!(s.offered_load, 1.5); // 1500 B over 1 s of arrivals at 1000 B/s
        assert_eq!(s.throughput_bytes_per_s, 750.0);
        assert_eq!(s.mean_first_service_s, 0.25);
        assert_eq!(s.max_slowdown, 2.0);
        // Job 0 finds nothing; job 1 arrives as job 0 finishes: nothing either.
        assert_eq!(s.mean_work_found_s, 0.0);
        let later = [Job { arrival_s: 0.0, size_bytes: 1000 }, Job { arrival_s: 0.25, size_bytes: 500 }];
        assert_eq!(mean_work_found_s(&later, 1000.0, 0), 0.375); // (0 + 0.75) / 2
        assert_eq!(mean_work_found_s(&later, 1000.0, 1), 0.75); // job 1 still finds job 0's work
        let tail = summarize(&jobs, &outcomes, Link { rate_bytes_per_s: 1000.0, servers: 1 }, 1);
        assert_eq!((tail.requests, tail.mean_response_s), (1, 1.0));
    }
}
