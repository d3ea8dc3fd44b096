//! Scheduling policies as pure ranking rules: who is served, given each job's state.
//!
//! A *job* is anything with a size: a response's bytes on an uplink, a request's
//! cost at a backend. Its state is [`JobState`]: arrival time, size, remaining
//! work, attained service, and (for FSP only) its finish tag in a virtual fair
//! system. A [`Policy`] maps a state to a [`Policy::rank`] (lower is served first)
//! and says how jobs of equal rank share the server ([`TieShare`]) and whether a
//! better-ranked arrival preempts ([`Policy::preemptive`]).
//!
//! | policy              | rank                          | equal ranks | preemptive |
//! |---------------------|-------------------------------|-------------|------------|
//! | `ps`                | 0 (everyone equal)            | fair (PS)   | —          |
//! | `fifo`              | arrival time                  | exclusive   | no effect  |
//! | `srpt`              | remaining work                | exclusive   | yes        |
//! | `srpt-classes:C`    | band of remaining work ([`Cutoffs::band_for_remaining`]) | fair | yes |
//! | `size-classes:C`    | band of the full size (never re-banded) | fair | yes |
//! | `sjf`               | size                          | exclusive   | no         |
//! | `sjf-aging:X`       | size, unless a waiting job's bound `arrival + X·service` would be missed ([`crate::admission`]) | exclusive | no |
//! | `las`               | attained service              | fair        | yes        |
//! | `fsp`               | finish tag in a virtual PS    | exclusive   | yes        |
//!
//! Ties of exclusive policies go to the earlier arrival. The driver (the simulator,
//! a user-space scheduler in the server) owns the data structures and the clock;
//! it asks this module for ranks and applies them. [`FairQueue`] is the
//! virtual-time bookkeeping of processor sharing, shared by PS bands and FSP's
//! virtual system, so both drivers compute fair shares the same way.
//!
//! Must not know: sockets, the wall clock, files, threads.

use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;

use crate::admission;
use crate::bands::{Cutoffs, CutoffsError};

/// What a policy may look at. Work is in the driver's unit (bytes for a link,
/// seconds of backend time for a gatekeeper); `remaining + attained == size`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct JobState {
    pub arrival_s: f64,
    pub size: f64,
    pub remaining: f64,
    pub attained: f64,
    /// FSP only: the job's finish tag in the virtual fair system ([`FairQueue::push`]).
    pub fair_tag: f64,
}

impl JobState {
    /// A job that has just arrived: nothing attained, no fair tag yet.
    pub fn arrived(arrival_s: f64, size: f64) -> JobState {
        JobState { arrival_s, size, remaining: size, attained: 0.0, fair_tag: f64::NAN }
    }
}

/// How jobs whose ranks are equal share the server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TieShare {
    /// Processor sharing among them.
    Fair,
    /// One at a time, earlier arrival first.
    Exclusive,
}

/// How a job's rank moves while it is served (drivers choose data structures by this).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RankDrift {
    /// Fixed at arrival (fifo, sjf, sjf-aging, fsp, ps).
    Static,
    /// Only improves while served, never while waiting (srpt, srpt-classes).
    ImprovesWhenServed,
    /// Only worsens while served (las).
    WorsensWhenServed,
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PolicyError {
    #[error("unknown policy {0:?}: expected {forms}", forms = crate::names::one_of(&Policy::FORMS))]
    Unknown(String),
    #[error("policy {policy:?}: {source}")]
    Cutoffs { policy: String, source: CutoffsError },
    #[error(
        "policy {policy:?}: classes need at least one cutoff, e.g. srpt-classes:1K,2K,5K,20K,50K (with none it is ps)"
    )]
    NoCutoffs { policy: String },
    #[error("policy {policy:?}: the aging factor must be a number in 0..={max}, e.g. sjf-aging:2", max = admission::MAX_AGING_FACTOR)]
    AgingFactor { policy: String },
}

/// A scheduling policy. Parse with [`Policy::parse`]; [`std::fmt::Display`] prints the same spelling.
#[derive(Clone, Debug, PartialEq)]
pub enum Policy {
    Ps,
    Fifo,
    Srpt,
    SrptClasses(Cutoffs),
    /// Classes by *full* size, never re-banded as the job drains (a server that sets
    /// the band once per response): the M/G/1 priority-class model of the theory.
    SizeClasses(Cutoffs),
    Sjf,
    /// No job waits longer than `factor` × its own service time, if that can be kept:
    /// the gatekeeper's admission queue ([`crate::admission::Gate`]) decides.
    SjfAging {
        factor: f64,
    },
    Las,
    Fsp,
}

impl Policy {
    /// The spellings [`Policy::parse`] takes (`fair` too, for `ps`) and `Display` writes:
    /// `CUTOFFS` stands for sizes such as `1K,2K,5K`, `X` for the aging factor. What
    /// `shortfirst vocabulary` lists as the simulator's policies.
    pub const FORMS: [&'static str; 9] =
        ["ps", "fifo", "srpt", "srpt-classes:CUTOFFS", "size-classes:CUTOFFS", "sjf", "sjf-aging:X", "las", "fsp"];

    /// `ps`, `fifo`, `srpt`, `srpt-classes:1K,2K,5K,20K,50K`, `sjf`, `sjf-aging:2`, `las`, `fsp`
    /// (case-insensitive; `fair` is accepted for `ps`).
    pub fn parse(text: &str) -> Result<Policy, PolicyError> {
        let trimmed = text.trim();
        let (name, arg) = match trimmed.split_once(':') {
            Some((n, a)) => (n.trim().to_ascii_lowercase(), Some(a)),
            None => (trimmed.to_ascii_lowercase(), None),
        };
        let policy = trimmed.to_string();
        match (name.as_str(), arg) {
            ("ps" | "fair", None) => Ok(Policy::Ps),
            ("fifo", None) => Ok(Policy::Fifo),
            ("srpt", None) => Ok(Policy::Srpt),
            ("sjf", None) => Ok(Policy::Sjf),
            ("las", None) => Ok(Policy::Las),
            ("fsp", None) => Ok(Policy::Fsp),
            ("srpt-classes" | "size-classes", Some(a)) => {
                let cutoffs =
                    Cutoffs::parse(a).map_err(|source| PolicyError::Cutoffs { policy: policy.clone(), source })?;
                if cutoffs.as_slice().is_empty() {
                    return Err(PolicyError::NoCutoffs { policy });
                }
                Ok(if name == "srpt-classes" { Policy::SrptClasses(cutoffs) } else { Policy::SizeClasses(cutoffs) })
            }
            // The gatekeeper's parser, so both accept the same X.
            ("sjf-aging", Some(a)) => match format!("sjf-aging:{}", a.trim()).parse::<admission::AdmissionPolicy>() {
                Ok(admission::AdmissionPolicy::SjfAging { factor }) => Ok(Policy::SjfAging { factor }),
                _ => Err(PolicyError::AgingFactor { policy }),
            },
            _ => Err(PolicyError::Unknown(policy)),
        }
    }

    /// The rank of a job: lower is served first.
    pub fn rank(&self, job: &JobState) -> f64 {
        match self {
            Policy::Ps => 0.0,
            Policy::Fifo => job.arrival_s,
            Policy::Srpt => job.remaining,
            Policy::SrptClasses(cutoffs) => f64::from(cutoffs.band_for_remaining(ceil_bytes(job.remaining)).index()),
            Policy::SizeClasses(cutoffs) => f64::from(cutoffs.band_for_remaining(ceil_bytes(job.size)).index()),
            // The aging bound is enforced by the admission queue at dispatch; the rank is the size.
            Policy::Sjf | Policy::SjfAging { .. } => job.size,
            Policy::Las => job.attained,
            Policy::Fsp => job.fair_tag,
        }
    }

    pub fn ties(&self) -> TieShare {
        match self {
            Policy::Ps | Policy::SrptClasses(_) | Policy::SizeClasses(_) | Policy::Las => TieShare::Fair,
            _ => TieShare::Exclusive,
        }
    }

    /// Whether an arrival with a better rank takes the server from a job in service.
    pub fn preemptive(&self) -> bool {
        !matches!(self, Policy::Sjf | Policy::SjfAging { .. } | Policy::Fifo)
    }

    pub fn drift(&self) -> RankDrift {
        match self {
            Policy::Srpt | Policy::SrptClasses(_) => RankDrift::ImprovesWhenServed,
            Policy::Las => RankDrift::WorsensWhenServed,
            _ => RankDrift::Static,
        }
    }

    /// Whether the policy ranks by size, i.e. needs to know sizes in advance.
    pub fn needs_sizes(&self) -> bool {
        !matches!(self, Policy::Ps | Policy::Fifo | Policy::Las)
    }
}

/// Remaining work rounded up to whole bytes: a job with 0.4 bytes left still has a byte to send.
fn ceil_bytes(remaining: f64) -> u64 {
    if remaining <= 0.0 {
        0
    } else {
        remaining.ceil() as u64
    }
}

impl std::fmt::Display for Policy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Policy::Ps => write!(f, "ps"),
            Policy::Fifo => write!(f, "fifo"),
            Policy::Srpt => write!(f, "srpt"),
            Policy::SrptClasses(c) => write!(f, "srpt-classes:{c}"),
            Policy::SizeClasses(c) => write!(f, "size-classes:{c}"),
            Policy::Sjf => write!(f, "sjf"),
            Policy::SjfAging { factor } => write!(f, "sjf-aging:{factor}"),
            Policy::Las => write!(f, "las"),
            Policy::Fsp => write!(f, "fsp"),
        }
    }
}

/// Orders two ranks (ties broken by the caller, usually by arrival order).
pub fn compare_ranks(a: f64, b: f64) -> Ordering {
    a.total_cmp(&b)
}

/// An `f64` with a total order, for heaps of ranks and tags.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct OrdF64(pub f64);

impl Eq for OrdF64 {}
impl PartialOrd for OrdF64 {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for OrdF64 {
    fn cmp(&self, other: &Self) -> Ordering {
        self.0.total_cmp(&other.0)
    }
}

/// Processor sharing by virtual time: the classic O(log n) bookkeeping.
///
/// Every job in a fair queue receives the same service rate, so instead of
/// decrementing each job's remaining work the queue keeps one *virtual work*
/// counter `v` (the service each job present has received since the queue was
/// created) and gives each job a finish tag `v_at_entry + work`. The next job to
/// leave is the one with the least tag; it needs `tag − v` more service. The driver
/// decides the per-job rate (it varies with the number of jobs, the number of
/// servers and, for bands, with whether a better band is busy) and reports service
/// with [`FairQueue::serve`].
///
/// Ties leave in insertion order. Work is in the driver's unit.
#[derive(Clone, Debug)]
pub struct FairQueue<Id> {
    virtual_work: f64,
    seq: u64,
    heap: BinaryHeap<Reverse<(OrdF64, u64, Id)>>,
}

impl<Id: Ord + Copy> Default for FairQueue<Id> {
    fn default() -> Self {
        FairQueue { virtual_work: 0.0, seq: 0, heap: BinaryHeap::new() }
    }
}

impl<Id: Ord + Copy> FairQueue<Id> {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn len(&self) -> usize {
        self.heap.len()
    }

    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }

    /// Adds a job needing `work` more service; returns its finish tag.
    pub fn push(&mut self, work: f64, id: Id) -> f64 {
        debug_assert!(work >= 0.0 && work.is_finite(), "work {work} must be finite and >= 0");
        let tag = self.virtual_work + work;
        self.heap.push(Reverse((OrdF64(tag), self.seq, id)));
        self.seq += 1;
        tag
    }

    /// Every job present received `per_job_work` more service. Never moves past the
    /// next finish tag (the driver must pop that job first), so rounding cannot
    /// make a job's remaining work negative.
    pub fn serve(&mut self, per_job_work: f64) {
        debug_assert!(per_job_work >= 0.0);
        if let Some(Reverse((tag, _, _))) = self.heap.peek() {
            self.virtual_work = (self.virtual_work + per_job_work).min(tag.0);
        }
    }

    /// Service each job still needs before the next one leaves.
    pub fn next_gap(&self) -> Option<f64> {
        self.heap.peek().map(|Reverse((tag, _, _))| (tag.0 - self.virtual_work).max(0.0))
    }

    /// Removes the next job to leave, as if served up to its tag. Returns it and its tag.
    pub fn pop_next(&mut self) -> Option<(Id, f64)> {
        let Reverse((tag, _, id)) = self.heap.pop()?;
        self.virtual_work = self.virtual_work.max(tag.0);
        if self.heap.is_empty() {
            // Restart the counter so tags stay small and precise over long runs.
            self.virtual_work = 0.0;
        }
        Some((id, tag.0))
    }

    /// Remaining work of a job whose tag is `tag`.
    pub fn remaining_of(&self, tag: f64) -> f64 {
        (tag - self.virtual_work).max(0.0)
    }

    /// The virtual work counter (service each present job has received since the queue last emptied).
    pub fn virtual_work(&self) -> f64 {
        self.virtual_work
    }
}

/// Per-job service rates when `jobs_by_level` jobs wait at successive priority
/// levels (best first), `servers` servers each of rate 1 serve them and no job
/// can use more than one server: each level in turn gets one server per job
/// while servers last; the level where they run out shares what is left equally;
/// worse levels get nothing. Returns the per-job rate of each level (0..=1).
///
/// This is how every fair-tie policy (ps, srpt-classes, las) extends to C servers.
pub fn per_job_rates(jobs_by_level: impl IntoIterator<Item = usize>, servers: usize, out: &mut Vec<f64>) {
    out.clear();
    let mut left = servers as f64;
    for n in jobs_by_level {
        if n == 0 || left <= 0.0 {
            out.push(0.0);
            continue;
        }
        let rate = (left / n as f64).min(1.0);
        out.push(rate);
        left -= rate * n as f64;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_form_parses_and_writes_back() {
        for form in Policy::FORMS {
            let text = form.replace("CUTOFFS", "1000,5000").replace('X', "2");
            let policy = Policy::parse(&text).unwrap_or_else(|e| panic!("{text}: {e}"));
            assert_eq!(policy.to_string(), text);
        }
    }

    #[test]
    fn parse_round_trip_table() {
        let ok: &[(&str, &str)] = &[
            ("ps", "ps"),
            ("FAIR", "ps"),
            ("fifo", "fifo"),
            ("srpt", "srpt"),
            ("srpt-classes:1K,2K,5K,20K,50K", "srpt-classes:1000,2000,5000,20000,50000"),
            ("size-classes:1K,5K", "size-classes:1000,5000"),
            ("sjf", "sjf"),
            ("sjf-aging:2", "sjf-aging:2"),
            ("sjf-aging:0.5", "sjf-aging:0.5"),
            ("sjf-aging:0", "sjf-aging:0"),
            ("las", "las"),
            ("fsp", "fsp"),
        ];
        for (text, shown) in ok {
            let p = Policy::parse(text).unwrap();
            assert_eq!(p.to_string(), *shown, "{text}");
            assert_eq!(Policy::parse(&p.to_string()).unwrap(), p);
        }
        for bad in [
            "",
            "srtp",
            "ps:1",
            "srpt-classes",
            "srpt-classes:",
            "srpt-classes:2K,1K",
            "sjf-aging:-1",
            "sjf-aging:x",
            "sjf-aging",
        ] {
            assert!(Policy::parse(bad).is_err(), "{bad:?} must be rejected");
        }
        assert!(matches!(Policy::parse("srpt-classes:2K,1K"), Err(PolicyError::Cutoffs { .. })));
    }

    #[test]
    fn rank_table() {
        let classes = Policy::parse("srpt-classes:1K,5K").unwrap();
        let job = JobState { arrival_s: 3.0, size: 6_000.0, remaining: 4_999.5, attained: 1_000.5, fair_tag: 42.0 };
        let table: &[(Policy, f64)] = &[
            (Policy::Ps, 0.0),
            (Policy::Fifo, 3.0),
            (Policy::Srpt, 4_999.5),
            (classes.clone(), 2.0), // 4,999.5 bytes left round up to 5,000: band (1K, 5K]
            (Policy::parse("size-classes:1K,5K").unwrap(), 3.0), // by the full 6,000 bytes
            (Policy::Sjf, 6_000.0),
            (Policy::SjfAging { factor: 2.0 }, 6_000.0),
            (Policy::Las, 1_000.5),
            (Policy::Fsp, 42.0),
        ];
        for (p, want) in table {
            assert_eq!(p.rank(&job), *want, "{p}");
        }
        let drained = JobState { remaining: 1_000.0, ..job };
        assert_eq!(classes.rank(&drained), 1.0, "at the cutoff the job is in the better band");
    }

    #[test]
    fn fair_queue_serves_equal_shares() {
        let mut q = FairQueue::new();
        q.push(3.0, 'a');
        q.push(1.0, 'b');
        assert_eq!(q.next_gap(), Some(1.0));
        q.serve(1.0);
        assert_eq!(q.pop_next(), Some(('b', 1.0)));
        let tag_c = q.push(1.0, 'c'); // arrives when a has 2 left
        assert_eq!(tag_c, 2.0);
        assert_eq!(q.next_gap(), Some(1.0));
        assert_eq!(q.pop_next(), Some(('c', 2.0)));
        assert_eq!(q.remaining_of(3.0), 1.0);
        q.serve(5.0); // clamped at the next tag
        assert_eq!(q.next_gap(), Some(0.0));
        assert_eq!(q.pop_next(), Some(('a', 3.0)));
        assert!(q.is_empty());
        assert_eq!(q.virtual_work(), 0.0, "counter restarts when empty");
    }

    #[test]
    fn per_job_rates_table() {
        let mut out = Vec::new();
        let table: &[(&[usize], usize, &[f64])] = &[
            (&[3], 1, &[1.0 / 3.0]),
            (&[3], 4, &[1.0]),
            (&[1, 4], 3, &[1.0, 0.5]),
            (&[0, 2, 5], 1, &[0.0, 0.5, 0.0]),
            (&[2, 2, 2], 2, &[1.0, 0.0, 0.0]),
        ];
        for (levels, servers, want) in table {
            per_job_rates(levels.iter().copied(), *servers, &mut out);
            assert_eq!(&out[..], *want, "{levels:?} on {servers}");
        }
    }
}
