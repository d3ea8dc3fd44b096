//! The event-driven engines: exact fluid simulation of a link (or C servers)
//! under each policy of [`shortfirst_core::policy`].
//!
//! Time jumps from event to event (arrival, departure, a job crossing into a
//! better band, a LAS group catching up with the next); between events every
//! rate is constant, so completion times are exact up to floating-point rounding.
//! Three engines cover the policies, chosen by how the policy shares equal ranks
//! and how ranks drift ([`Policy::ties`], [`Policy::drift`]):
//!
//! - *exclusive* (fifo, srpt, sjf, sjf-aging, fsp): up to C jobs in service, one
//!   server each; the rest in a heap by rank (O(log n + C) per event), or for
//!   sjf-aging in the gatekeeper's admission queue run as a single server (`shortfirst_core::admission::OneAtATime`).
//! - *bands* (ps, srpt-classes, size-classes): one [`FairQueue`] per band, virtual
//!   time per band; under srpt-classes a job leaving band b with work left enters
//!   band b−1 (size-classes: it stays in its band to the end). O(log n + k) per event.
//! - *las*: a stack of groups of jobs with equal attained service, each a heap by
//!   size; groups merge when the served one catches up. O(log² n) amortised.
//!
//! Multi-server semantics (`servers` = C, each of rate `rate_bytes_per_s`; no job
//! ever uses more than one server):
//! - exclusive policies serve the C best-ranked jobs, one server each
//!   (non-preemptive ones keep a started job on its server until it completes);
//!   sjf-aging runs on one server only (the gatekeeper's queue admits by cost);
//! - fair-tie policies fill servers level by level ([`per_job_rates`]): ps gives
//!   each of n jobs min(1, C/n) servers; srpt-classes and las give every job of the
//!   best levels a whole server and split what is left equally in the first level
//!   that does not fit;
//! - fsp's virtual system is the C-server ps above.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use shortfirst_core::policy::{per_job_rates, FairQueue, JobState, OrdF64, Policy, TieShare};

use shortfirst_core::admission::{OneAtATime, Ticket};

/// The most jobs one simulation takes: 40 bytes of state per job keep this under 4 GB.
pub const MAX_JOBS: usize = 100_000_000;
/// The most servers: the exclusive engine scans its servers at every event.
pub const MAX_SERVERS: usize = 4_096;

/// One job: when it arrives and how much work it brings (bytes on a link).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Job {
    pub arrival_s: f64,
    pub size_bytes: u64,
}

/// What happened to a job. `first_service_s` is the first instant the job
/// received a positive service rate (for a zero-size job: its completion).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct JobTimes {
    pub first_service_s: f64,
    pub done_s: f64,
}

/// The bottleneck: `servers` servers of `rate_bytes_per_s` each.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Link {
    pub rate_bytes_per_s: f64,
    pub servers: usize,
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SimError {
    #[error("job #{index}: arrival time {arrival_s} is not a finite number >= 0")]
    BadArrival { index: usize, arrival_s: f64 },
    #[error("job #{index}: arrival time {arrival_s} s is before the previous job's {previous_s} s (jobs must be sorted by arrival)")]
    Unsorted { index: usize, arrival_s: f64, previous_s: f64 },
    #[error("rate {0} bytes/s: must be a finite number > 0")]
    BadRate(f64),
    #[error("{0} servers: must be between 1 and {MAX_SERVERS}")]
    BadServers(usize),
    #[error("{0} jobs: at most {MAX_JOBS} per simulation")]
    TooManyJobs(usize),
    #[error("policy {policy}: simulated on one server only (the gatekeeper's queue admits by cost, not by server count); got {servers} servers")]
    OneServerOnly { policy: String, servers: usize },
}

/// Simulates `jobs` (sorted by arrival) on `link` under `policy`; one outcome per job, same order.
pub fn simulate(jobs: &[Job], policy: &Policy, link: Link) -> Result<Vec<JobTimes>, SimError> {
    validate(jobs, link)?;
    if matches!(policy, Policy::SjfAging { .. }) && link.servers != 1 {
        return Err(SimError::OneServerOnly { policy: policy.to_string(), servers: link.servers });
    }
    let mut out = vec![JobTimes { first_service_s: f64::NAN, done_s: f64::NAN }; jobs.len()];
    match (policy, policy.ties()) {
        (Policy::Las, _) => Las::new(jobs, link).run(&mut out),
        (_, TieShare::Fair) => Bands::new(jobs, policy, link).run(&mut out),
        (_, TieShare::Exclusive) => Exclusive::new(jobs, policy, link).run(&mut out),
    }
    debug_assert!(out.iter().all(|o| o.done_s.is_finite() && o.first_service_s.is_finite()));
    Ok(out)
}

/// Checks the rate, the server count and the jobs (count, finite sorted arrivals).
pub(crate) fn validate(jobs: &[Job], link: Link) -> Result<(), SimError> {
    if !(link.rate_bytes_per_s.is_finite() && link.rate_bytes_per_s > 0.0) {
        return Err(SimError::BadRate(link.rate_bytes_per_s));
    }
    if link.servers == 0 || link.servers > MAX_SERVERS {
        return Err(SimError::BadServers(link.servers));
    }
    if jobs.len() > MAX_JOBS {
        return Err(SimError::TooManyJobs(jobs.len()));
    }
    let mut previous_s = 0.0;
    for (index, j) in jobs.iter().enumerate() {
        if !(j.arrival_s.is_finite() && j.arrival_s >= 0.0) {
            return Err(SimError::BadArrival { index, arrival_s: j.arrival_s });
        }
        if j.arrival_s < previous_s {
            return Err(SimError::Unsorted { index, arrival_s: j.arrival_s, previous_s });
        }
        previous_s = j.arrival_s;
    }
    Ok(())
}

/// A job in service under an exclusive policy.
#[derive(Debug)]
struct Running {
    idx: u32,
    remaining: f64,
    /// sjf-aging: the gatekeeper's admission ticket, handed back at completion.
    ticket: Option<Ticket>,
}

/// Waiting jobs of an exclusive policy: a heap by (rank, arrival order), or, for
/// sjf-aging, the gatekeeper's own admission queue run as a single server
/// ([`OneAtATime`]). It counts time and cost in integer units: the simulator feeds it
/// nanoseconds ([`GATE_UNITS_PER_S`]).
enum Waiting {
    Heap(BinaryHeap<Reverse<(OrdF64, u32)>>),
    Aging(Box<OneAtATime>),
}

/// Gate time units per simulated second: nanoseconds, so ties and bounds are exact to 1 ns.
pub const GATE_UNITS_PER_S: f64 = 1e9;

fn gate_units(seconds: f64) -> u64 {
    (seconds * GATE_UNITS_PER_S).round().max(0.0) as u64
}

struct Exclusive<'a> {
    jobs: &'a [Job],
    policy: &'a Policy,
    rate: f64,
    servers: usize,
    remaining: Vec<f64>,
    /// FSP: finish tags in the virtual C-server PS.
    fair_tag: Vec<f64>,
    shadow: Option<Shadow>,
}

/// FSP's virtual processor-sharing system, advanced to each arrival.
struct Shadow {
    queue: FairQueue<u32>,
    now_s: f64,
}

impl Shadow {
    fn advance_to(&mut self, t: f64, rate: f64, servers: usize) {
        while !self.queue.is_empty() {
            let per_job = rate * (servers as f64 / self.queue.len() as f64).min(1.0);
            let gap = self.queue.next_gap().unwrap_or(0.0);
            let finish = self.now_s + gap / per_job;
            if finish <= t {
                self.queue.pop_next();
                self.now_s = finish;
            } else {
                self.queue.serve(per_job * (t - self.now_s));
                break;
            }
        }
        self.now_s = t;
    }
}

impl<'a> Exclusive<'a> {
    fn new(jobs: &'a [Job], policy: &'a Policy, link: Link) -> Self {
        let fsp = matches!(policy, Policy::Fsp);
        Exclusive {
            jobs,
            policy,
            rate: link.rate_bytes_per_s,
            servers: link.servers,
            remaining: vec![0.0; jobs.len()],
            fair_tag: if fsp { vec![0.0; jobs.len()] } else { Vec::new() },
            shadow: fsp.then(|| Shadow { queue: FairQueue::new(), now_s: 0.0 }),
        }
    }

    fn state(&self, idx: u32, remaining: f64) -> JobState {
        let j = self.jobs[idx as usize];
        let size = j.size_bytes as f64;
        JobState {
            arrival_s: j.arrival_s,
            size,
            remaining,
            attained: size - remaining,
            fair_tag: self.fair_tag.get(idx as usize).copied().unwrap_or(f64::NAN),
        }
    }

    fn rank(&self, idx: u32, remaining: f64) -> (OrdF64, u32) {
        (OrdF64(self.policy.rank(&self.state(idx, remaining))), idx)
    }

    fn run(mut self, out: &mut [JobTimes]) {
        let mut waiting = match self.policy {
            Policy::SjfAging { factor } => {
                let policy = shortfirst_core::admission::AdmissionPolicy::SjfAging { factor: *factor };
                Waiting::Aging(Box::new(OneAtATime::new(policy, self.jobs.len()).expect("a valid policy")))
            }
            _ => Waiting::Heap(BinaryHeap::new()),
        };
        let mut running: Vec<Running> = Vec::with_capacity(self.servers);
        let preemptive = self.policy.preemptive();
        let mut now = 0.0f64;
        let mut next = 0usize;
        loop {
            // The running job that finishes first.
            let first_done = running
                .iter()
                .enumerate()
                .min_by(|a, b| a.1.remaining.total_cmp(&b.1.remaining).then(a.1.idx.cmp(&b.1.idx)))
                .map(|(slot, r)| (slot, now + r.remaining / self.rate));
            let arrival = self.jobs.get(next).map(|j| j.arrival_s);
            let completion_first = match (first_done, arrival) {
                (Some((_, d)), Some(a)) => d <= a,
                (Some(_), None) => true,
                (None, Some(_)) => false,
                (None, None) => break,
            };
            match (first_done, arrival) {
                (Some((slot, done_s)), _) if completion_first => {
                    let served = (done_s - now) * self.rate;
                    for r in running.iter_mut() {
                        r.remaining = (r.remaining - served).max(0.0);
                    }
                    now = done_s;
                    let finished = running.swap_remove(slot);
                    out[finished.idx as usize].done_s = now;
                    self.remaining[finished.idx as usize] = 0.0;
                    if let (Waiting::Aging(gate), Some(ticket)) = (&mut waiting, finished.ticket) {
                        let next = gate.finish(gate_units(now), ticket).expect("ticket from this queue");
                        self.admit(next, now, &mut running, out);
                    }
                    self.fill(&mut running, &mut waiting, now, out);
                }
                (_, Some(a)) => {
                    let served = (a - now) * self.rate;
                    for r in running.iter_mut() {
                        r.remaining = (r.remaining - served).max(0.0);
                    }
                    now = a;
                    let idx = next as u32;
                    next += 1;
                    self.arrive(idx, now, &mut running, &mut waiting, preemptive, out);
                }
                _ => unreachable!("no event left is handled above"),
            }
        }
    }

    fn arrive(
        &mut self,
        idx: u32,
        now: f64,
        running: &mut Vec<Running>,
        waiting: &mut Waiting,
        preemptive: bool,
        out: &mut [JobTimes],
    ) {
        let size = self.jobs[idx as usize].size_bytes as f64;
        self.remaining[idx as usize] = size;
        if let Some(shadow) = self.shadow.as_mut() {
            shadow.advance_to(now, self.rate, self.servers);
            self.fair_tag[idx as usize] = shadow.queue.push(size, idx);
        }
        if let Waiting::Aging(gate) = waiting {
            let cost = gate_units(size / self.rate);
            let (id, started) = gate.arrive(gate_units(now), cost).expect("the queue holds every job");
            debug_assert_eq!(id.0, u64::from(idx), "gate ids follow arrival order");
            self.admit(started, now, running, out);
            return;
        }
        if running.len() < self.servers {
            self.start(idx, size, now, running, out);
            return;
        }
        if preemptive {
            let new_rank = self.rank(idx, size);
            let (slot, worst_rank) = running
                .iter()
                .enumerate()
                .map(|(slot, r)| (slot, self.rank(r.idx, r.remaining)))
                .max_by(|a, b| a.1.cmp(&b.1))
                .expect("all servers busy");
            if new_rank.0 < worst_rank.0 {
                let preempted = running.swap_remove(slot);
                self.remaining[preempted.idx as usize] = preempted.remaining;
                self.enqueue(preempted.idx, preempted.remaining, waiting);
                self.start(idx, size, now, running, out);
                return;
            }
        }
        self.enqueue(idx, size, waiting);
    }

    fn enqueue(&self, idx: u32, remaining: f64, waiting: &mut Waiting) {
        match waiting {
            Waiting::Heap(h) => h.push(Reverse(self.rank(idx, remaining))),
            Waiting::Aging(_) => unreachable!("sjf-aging jobs enter through the gate"),
        }
    }

    fn start(&self, idx: u32, remaining: f64, now: f64, running: &mut Vec<Running>, out: &mut [JobTimes]) {
        let o = &mut out[idx as usize];
        if o.first_service_s.is_nan() {
            o.first_service_s = now;
        }
        running.push(Running { idx, remaining, ticket: None });
    }

    /// Starts the jobs the gate admitted.
    fn admit(&self, started: Option<Ticket>, now: f64, running: &mut Vec<Running>, out: &mut [JobTimes]) {
        if let Some(ticket) = started {
            let idx = u32::try_from(ticket.id().0).expect("job index fits u32");
            self.start(idx, self.remaining[idx as usize], now, running, out);
            running.last_mut().expect("just started").ticket = Some(ticket);
        }
        debug_assert!(running.len() <= self.servers, "the gate admits one job at a time");
    }

    fn fill(&self, running: &mut Vec<Running>, waiting: &mut Waiting, now: f64, out: &mut [JobTimes]) {
        let Waiting::Heap(h) = waiting else { return };
        while running.len() < self.servers {
            let Some(Reverse((_, idx))) = h.pop() else { break };
            self.start(idx, self.remaining[idx as usize], now, running, out);
        }
    }
}

/// PS, srpt-classes, size-classes: processor sharing inside each band, strict priority between bands.
struct Bands<'a> {
    jobs: &'a [Job],
    policy: &'a Policy,
    link: Link,
    /// Remaining work at which a job leaves each band (0 for the best band).
    lower_bytes: Vec<u64>,
    /// srpt-classes: jobs move to better bands as they drain; size-classes: never.
    moves: bool,
    queues: Vec<FairQueue<u32>>,
    /// Jobs that arrived in a band that has not been served since.
    not_started: Vec<Vec<u32>>,
}

impl<'a> Bands<'a> {
    fn new(jobs: &'a [Job], policy: &'a Policy, link: Link) -> Self {
        let (cutoffs, moves): (&[u64], bool) = match policy {
            Policy::SrptClasses(c) => (c.as_slice(), true),
            Policy::SizeClasses(c) => (c.as_slice(), false),
            _ => (&[], true),
        };
        let bands = cutoffs.len() + 1;
        let mut lower_bytes = vec![0];
        if moves {
            lower_bytes.extend_from_slice(cutoffs);
        } else {
            lower_bytes.resize(bands, 0);
        }
        Bands {
            jobs,
            policy,
            link,
            lower_bytes,
            moves,
            queues: (0..bands).map(|_| FairQueue::new()).collect(),
            not_started: vec![Vec::new(); bands],
        }
    }

    /// Queue index of a job with `remaining_bytes` left, by the policy's rank (band 1 → queue 0).
    fn level(&self, idx: u32, remaining_bytes: u64) -> usize {
        let j = self.jobs[idx as usize];
        let mut state = JobState::arrived(j.arrival_s, j.size_bytes as f64);
        state.remaining = remaining_bytes as f64;
        state.attained = state.size - state.remaining;
        match self.policy {
            Policy::Ps => 0,
            _ => self.policy.rank(&state) as usize - 1,
        }
    }

    fn enter(&mut self, idx: u32, remaining_bytes: u64) -> usize {
        let level = self.level(idx, remaining_bytes);
        let lower = self.lower_bytes[level];
        debug_assert!(
            remaining_bytes >= lower,
            "job {idx}: {remaining_bytes} bytes left, below its band's floor {lower}"
        );
        self.queues[level].push((remaining_bytes - lower) as f64, idx);
        level
    }

    fn run(mut self, out: &mut [JobTimes]) {
        let rate = self.link.rate_bytes_per_s;
        let mut shares = Vec::with_capacity(self.queues.len());
        let mut now = 0.0f64;
        let mut next = 0usize;
        loop {
            per_job_rates(self.queues.iter().map(FairQueue::len), self.link.servers, &mut shares);
            for (level, &share) in shares.iter().enumerate() {
                if share > 0.0 {
                    for idx in self.not_started[level].drain(..) {
                        out[idx as usize].first_service_s = now;
                    }
                }
            }
            // The band whose next job leaves first.
            let departure = shares
                .iter()
                .enumerate()
                .filter(|(_, &s)| s > 0.0)
                .map(|(level, &s)| (level, now + self.queues[level].next_gap().unwrap_or(0.0) / (s * rate)))
                .min_by(|a, b| a.1.total_cmp(&b.1));
            let arrival = self.jobs.get(next).map(|j| j.arrival_s);
            let t = match (departure, arrival) {
                (Some((_, d)), Some(a)) => d.min(a),
                (Some((_, d)), None) => d,
                (None, Some(a)) => a,
                (None, None) => break,
            };
            for (level, &share) in shares.iter().enumerate() {
                if share > 0.0 {
                    self.queues[level].serve(share * rate * (t - now));
                }
            }
            now = t;
            match departure {
                Some((level, d)) if arrival.map_or(true, |a| d <= a) => {
                    let (idx, _) = self.queues[level].pop_next().expect("band has a job to leave");
                    if level == 0 || !self.moves {
                        out[idx as usize].done_s = now;
                    } else {
                        let to = self.enter(idx, self.lower_bytes[level]);
                        debug_assert!(to < level, "a job only moves to a better band");
                    }
                }
                _ => {
                    let idx = next as u32;
                    next += 1;
                    let level = self.enter(idx, self.jobs[idx as usize].size_bytes);
                    self.not_started[level].push(idx);
                }
            }
        }
    }
}

/// Least attained service: jobs with equal attained service share; the least-served group goes first.
struct Las<'a> {
    jobs: &'a [Job],
    link: Link,
}

/// Jobs that have all received `attained` bytes of service; a heap by size.
struct Group {
    attained: f64,
    sizes: BinaryHeap<Reverse<(u64, u32)>>,
}

impl<'a> Las<'a> {
    fn new(jobs: &'a [Job], link: Link) -> Self {
        Las { jobs, link }
    }

    fn run(self, out: &mut [JobTimes]) {
        let rate = self.link.rate_bytes_per_s;
        // Top of the stack (the end) is the least-attained group; attained grows downwards.
        let mut stack: Vec<Group> = Vec::new();
        let mut shares: Vec<f64> = Vec::new();
        let mut now = 0.0f64;
        let mut next = 0usize;
        loop {
            per_job_rates(stack.iter().rev().map(|g| g.sizes.len()), self.link.servers, &mut shares);
            let served = shares.iter().take_while(|&&s| s > 0.0).count();
            // Candidate events among served groups (position p from the top).
            let mut event: Option<(f64, LasEvent)> = None;
            let mut consider = |t: f64, e: LasEvent| {
                if event.as_ref().map_or(true, |(best, _)| t < *best) {
                    event = Some((t, e));
                }
            };
            for p in 0..served {
                let g = &stack[stack.len() - 1 - p];
                let speed = shares[p] * rate;
                let Reverse((size, _)) = *g.sizes.peek().expect("groups are never empty");
                consider(now + (size as f64 - g.attained).max(0.0) / speed, LasEvent::Done(p));
                if p + 1 < stack.len() {
                    let below = &stack[stack.len() - 2 - p];
                    let below_speed = shares.get(p + 1).copied().unwrap_or(0.0) * rate;
                    if speed > below_speed {
                        consider(
                            now + (below.attained - g.attained).max(0.0) / (speed - below_speed),
                            LasEvent::CatchUp(p),
                        );
                    }
                }
            }
            if let Some(j) = self.jobs.get(next) {
                if event.as_ref().map_or(true, |(t, _)| j.arrival_s < *t) {
                    event = Some((j.arrival_s, LasEvent::Arrival));
                }
            }
            let Some((t, e)) = event else { break };
            let len = stack.len();
            for p in 0..served {
                stack[len - 1 - p].attained += shares[p] * rate * (t - now);
            }
            now = t;
            match e {
                LasEvent::Done(p) => {
                    let g = &mut stack[len - 1 - p];
                    let Reverse((size, idx)) = g.sizes.pop().expect("group has a job");
                    g.attained = size as f64;
                    out[idx as usize].done_s = now;
                    if g.sizes.is_empty() {
                        stack.remove(len - 1 - p);
                    }
                }
                LasEvent::CatchUp(p) => {
                    let upper = stack.remove(len - 1 - p);
                    let lower = &mut stack[len - 2 - p];
                    merge(lower, upper);
                }
                LasEvent::Arrival => {
                    let idx = next as u32;
                    next += 1;
                    out[idx as usize].first_service_s = now;
                    let size = self.jobs[idx as usize].size_bytes;
                    match stack.last_mut() {
                        Some(top) if top.attained <= 0.0 => top.sizes.push(Reverse((size, idx))),
                        _ => {
                            let mut sizes = BinaryHeap::new();
                            sizes.push(Reverse((size, idx)));
                            stack.push(Group { attained: 0.0, sizes });
                        }
                    }
                }
            }
        }
    }
}

enum LasEvent {
    Arrival,
    /// The smallest job of the served group at position p from the top completes.
    Done(usize),
    /// The group at position p from the top reaches the attained service of the one below.
    CatchUp(usize),
}

/// Merges `upper` into `lower` (same attained service now), moving the smaller heap.
fn merge(lower: &mut Group, mut upper: Group) {
    if upper.sizes.len() > lower.sizes.len() {
        std::mem::swap(&mut lower.sizes, &mut upper.sizes);
    }
    lower.sizes.extend(upper.sizes);
}
