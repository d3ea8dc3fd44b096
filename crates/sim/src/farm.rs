//! A farm: C hosts, each its own link of the given rate and its own queue under the
//! policy, and a dispatcher ([`shortfirst_core::dispatch`]) that sends each arriving
//! job to one host. (`Link::servers` > 1 in [`crate::simulate`] is a different model:
//! one shared queue in front of C servers.)
//!
//! Two passes, both exact:
//! 1. *Assign*: jobs in arrival order, each to the dispatcher's choice. Rules that read
//!    the hosts' load get it exact at the arrival instant: `least-work` from each
//!    host's unfinished work (Lindley's recursion: the same for every work-conserving
//!    policy); `least-connections` from the jobs still in the host, found by simulating
//!    the host's current busy period again with the new job (a busy period starts from
//!    an empty host, so it is simulated alone exactly). That costs O(busy period) per
//!    arrival: busy periods are bounded by [`MAX_BUSY_PERIOD_JOBS`], beyond which the
//!    run fails with a clear error (a host near or over saturation).
//! 2. *Simulate*: each host's jobs through [`crate::simulate`] on one server.

use shortfirst_core::dispatch::{DispatchRule, Dispatcher, HostLoad};
use shortfirst_core::policy::Policy;

use crate::engine::{simulate, Job, JobTimes, Link, SimError};
use crate::report::{summarize, Summary};

/// The most jobs one host's busy period may hold under `least-connections` (each
/// arrival re-simulates it: the work is this bound times the jobs, at worst).
pub const MAX_BUSY_PERIOD_JOBS: usize = 50_000;

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum FarmError {
    #[error(transparent)]
    Sim(#[from] SimError),
    #[error(transparent)]
    Dispatch(#[from] shortfirst_core::dispatch::DispatchError),
    #[error("least-connections: host {host}'s busy period at {time_s:.3} s holds more than {MAX_BUSY_PERIOD_JOBS} jobs (the host is near or over saturation)")]
    BusyPeriodTooLong { host: usize, time_s: f64 },
}

/// Every job's host and times (same order as the jobs).
#[derive(Debug, Clone, PartialEq)]
pub struct FarmOutcome {
    pub host: Vec<u32>,
    pub times: Vec<JobTimes>,
}

/// Simulates `jobs` (sorted by arrival) on `hosts` hosts of `rate_bytes_per_s` each,
/// dispatched by `dispatcher` (built for `hosts` hosts), each host under `policy`.
pub fn simulate_farm(
    jobs: &[Job],
    policy: &Policy,
    rate_bytes_per_s: f64,
    dispatcher: &mut Dispatcher,
    hosts: usize,
) -> Result<FarmOutcome, FarmError> {
    let link = Link { rate_bytes_per_s, servers: 1 };
    // The jobs, the rate and the host count, before any dispatching.
    crate::engine::validate(jobs, Link { rate_bytes_per_s, servers: hosts })?;
    let host = assign(jobs, policy, link, dispatcher, hosts)?;
    let by_host = group_by_host(&host, hosts);
    let mut times = vec![JobTimes { first_service_s: f64::NAN, done_s: f64::NAN }; jobs.len()];
    for indices in &by_host {
        let host_jobs: Vec<Job> = indices.iter().map(|&i| jobs[i as usize]).collect();
        let out = simulate(&host_jobs, policy, link)?;
        for (&i, o) in indices.iter().zip(out) {
            times[i as usize] = o;
        }
    }
    Ok(FarmOutcome { host, times })
}

/// Job indices per host, in arrival order.
fn group_by_host(host: &[u32], hosts: usize) -> Vec<Vec<u32>> {
    let mut by_host: Vec<Vec<u32>> = vec![Vec::new(); hosts];
    for (i, &h) in host.iter().enumerate() {
        by_host[h as usize].push(i as u32);
    }
    by_host
}

/// One host's state during assignment.
#[derive(Default)]
struct HostState {
    /// Unfinished work (bytes) at `last_s`.
    work_bytes: f64,
    last_s: f64,
    /// least-connections: the jobs of the current busy period and their completion
    /// times as simulated with the jobs assigned so far.
    busy: Vec<Job>,
    busy_done_s: Vec<f64>,
}

impl HostState {
    /// Brings the unfinished work to `t`; an empty host ends its busy period.
    fn advance(&mut self, t: f64, rate: f64) {
        self.work_bytes = (self.work_bytes - (t - self.last_s) * rate).max(0.0);
        self.last_s = t;
        if self.work_bytes <= 0.0 {
            self.busy.clear();
            self.busy_done_s.clear();
        }
    }

    /// Jobs in the host at `t` (arrived, not done).
    fn connections(&self, t: f64) -> usize {
        self.busy_done_s.iter().filter(|&&d| d > t).count()
    }
}

fn assign(
    jobs: &[Job],
    policy: &Policy,
    link: Link,
    dispatcher: &mut Dispatcher,
    hosts: usize,
) -> Result<Vec<u32>, FarmError> {
    let rate = link.rate_bytes_per_s;
    let counts = matches!(dispatcher.rule(), DispatchRule::LeastConnections);
    let needs_load = dispatcher.rule().needs_load();
    let mut state: Vec<HostState> = (0..hosts).map(|_| HostState::default()).collect();
    let mut load = vec![HostLoad::default(); if needs_load { hosts } else { 0 }];
    let mut host = Vec::with_capacity(jobs.len());
    for job in jobs {
        let t = job.arrival_s;
        if needs_load {
            for (s, l) in state.iter_mut().zip(load.iter_mut()) {
                s.advance(t, rate);
                l.remaining_bytes = s.work_bytes;
                l.connections = if counts { s.connections(t) } else { 0 };
            }
        }
        let h = dispatcher.choose(job.size_bytes, &load)?;
        host.push(h as u32);
        if needs_load {
            let s = &mut state[h];
            s.work_bytes += job.size_bytes as f64;
            if counts {
                if s.busy.len() >= MAX_BUSY_PERIOD_JOBS {
                    return Err(FarmError::BusyPeriodTooLong { host: h, time_s: t });
                }
                s.busy.push(*job);
                s.busy_done_s = simulate(&s.busy, policy, link)?.into_iter().map(|o| o.done_s).collect();
            }
        }
    }
    Ok(host)
}

/// One host's share of a farm run.
#[derive(Clone, Debug, serde::Serialize, PartialEq)]
pub struct HostSummary {
    pub host: usize,
    /// Jobs sent to the host (after the warm-up).
    pub jobs: usize,
    /// The host's bytes ÷ (its rate × the arrival span of all summarised jobs).
    pub utilisation: f64,
    #[serde(flatten)]
    pub summary: Summary,
}

/// Per-host summaries of `jobs[warmup_jobs..]` (warm-up jobs excluded on every host).
pub fn summarize_hosts(
    jobs: &[Job],
    outcome: &FarmOutcome,
    rate_bytes_per_s: f64,
    hosts: usize,
    warmup_jobs: usize,
) -> Vec<HostSummary> {
    let w = warmup_jobs.min(jobs.len());
    let span_s = match (jobs.get(w), jobs.last()) {
        (Some(a), Some(b)) => b.arrival_s - a.arrival_s,
        _ => 0.0,
    };
    let link = Link { rate_bytes_per_s, servers: 1 };
    group_by_host(&outcome.host, hosts)
        .into_iter()
        .enumerate()
        .map(|(h, mine)| {
            let host_warmup = mine.iter().take_while(|&&i| (i as usize) < w).count();
            let host_jobs: Vec<Job> = mine.iter().map(|&i| jobs[i as usize]).collect();
            let host_times: Vec<JobTimes> = mine.iter().map(|&i| outcome.times[i as usize]).collect();
            let summary = summarize(&host_jobs, &host_times, link, host_warmup);
            let bytes: u64 = host_jobs[host_warmup..].iter().map(|j| j.size_bytes).sum();
            HostSummary {
                host: h,
                jobs: host_jobs.len() - host_warmup,
                utilisation: if span_s > 0.0 { bytes as f64 / (rate_bytes_per_s * span_s) } else { f64::NAN },
                summary,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests;
