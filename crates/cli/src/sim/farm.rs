//! `shortfirst sim --dispatch RULE`: the farm — `--servers` hosts, each its own link of
//! the given rate and its own queue under the policy, jobs dispatched on arrival by
//! `shortfirst_core::dispatch`. `sita-e` takes its cutoffs from the jobs' sizes (each
//! request counted: the trace's load, not the distinct files').

use anyhow::{Context, Result};
use serde::Serialize;
use shortfirst_core::dispatch::{sita_e_cutoffs, DispatchRule, Dispatcher};
use shortfirst_core::policy::Policy;
use shortfirst_sim::farm::{simulate_farm, summarize_hosts, FarmOutcome, HostSummary};
use shortfirst_sim::{Job, Link};

/// A farm run: the rule as resolved (sita-e's cutoffs computed) and every job's host.
pub struct Farm {
    pub rule: DispatchRule,
    pub outcome: FarmOutcome,
}

/// The farm's part of summary.json.
#[derive(Serialize)]
pub struct FarmSummary {
    /// The rule as given (`sita-e`, `least-work`, ...).
    pub dispatch: String,
    /// SITA's cutoffs, as given or as sita-e computed them (host i takes sizes in
    /// `(cutoff[i-1], cutoff[i]]`).
    pub sita_cutoffs_bytes: Option<Vec<u64>>,
    pub hosts: Vec<HostSummary>,
}

impl Farm {
    /// Runs the farm when `--dispatch` was given (`link.servers` hosts of `link`'s rate).
    pub fn run(dispatch: Option<&str>, seed: u64, jobs: &[Job], policy: &Policy, link: Link) -> Result<Option<Farm>> {
        let Some(text) = dispatch else { return Ok(None) };
        let mut rule = DispatchRule::parse(text).context("--dispatch")?;
        if rule == DispatchRule::SitaE {
            let mut sizes: Vec<(u64, u64)> = jobs.iter().map(|j| (j.size_bytes, 1)).collect();
            rule = DispatchRule::Sita(sita_e_cutoffs(&mut sizes, link.servers).context("--dispatch sita-e")?);
        }
        let mut dispatcher = Dispatcher::new(rule.clone(), link.servers, seed)
            .with_context(|| format!("--dispatch {text} with --servers {}", link.servers))?;
        let outcome = simulate_farm(jobs, policy, link.rate_bytes_per_s, &mut dispatcher, link.servers)
            .context("farm simulation")?;
        Ok(Some(Farm { rule, outcome }))
    }

    pub fn summary(&self, given: &str, jobs: &[Job], link: Link, warmup_jobs: usize) -> FarmSummary {
        FarmSummary {
            dispatch: given.to_string(),
            sita_cutoffs_bytes: match &self.rule {
                DispatchRule::Sita(c) => Some(c.clone()),
                _ => None,
            },
            hosts: summarize_hosts(jobs, &self.outcome, link.rate_bytes_per_s, link.servers, warmup_jobs),
        }
    }
}

/// One line per host for the terminal.
pub fn print_hosts(summary: &FarmSummary) {
    for h in &summary.hosts {
        eprintln!(
            "  host {}: {} jobs, utilisation {:.3}, mean response {:.6} s, mean slowdown {:.3}",
            h.host, h.jobs, h.utilisation, h.summary.mean_response_s, h.summary.mean_slowdown
        );
    }
}
