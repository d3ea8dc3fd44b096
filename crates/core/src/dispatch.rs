//! Dispatch: which host of a farm takes a request, from its size and the hosts' load.
//!
//! The rules ([`DispatchRule`]): `random` (seeded, uniform), `round-robin`,
//! `least-connections` (fewest requests in the host), `least-work` (fewest bytes
//! left to send), `sita:CUTOFFS` (size-interval task assignment: host i takes sizes
//! in `(cutoff[i-1], cutoff[i]]`) and `sita-e` (SITA with the cutoffs that give every
//! host the same expected load: the same total of bytes, Harchol-Balter, Crovella
//! and Murta 1999). Ties under the least-* rules go round robin, as HAProxy's
//! `leastconn` does: the first least-loaded host at or after the one after the last
//! choice.
//!
//! SITA-E's cutoffs come from a sample of sizes ([`sita_e_cutoffs`], weighted by how
//! often each size is requested; [`sita_e_cutoffs_by`] weighs each response by what it
//! costs the host's uplink, [`WireCost`], not by its body alone) or from a bounded window
//! of live sizes
//! ([`LiveSitaE`]; the rule `sita-e:N` re-derives them as requests arrive, from the
//! last N sizes). Pure: the driver passes the hosts' load in; no clock, no I/O.

use std::collections::VecDeque;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::units;

/// The most hosts a farm may have (the simulator's server limit).
pub const MAX_HOSTS: usize = 4_096;

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum DispatchError {
    #[error("dispatch rule {0:?}: expected {forms}", forms = crate::names::one_of(&DispatchRule::FORMS))]
    UnknownRule(String),
    #[error("sita cutoff {text:?}: {reason}")]
    BadCutoff { text: String, reason: String },
    #[error("sita cutoffs {0:?}: must not decrease")]
    Decreasing(Vec<u64>),
    #[error("{hosts} hosts: must be between 1 and {MAX_HOSTS}")]
    BadHosts { hosts: usize },
    #[error("{cutoffs} sita cutoffs for {hosts} hosts: need exactly one fewer cutoff than hosts")]
    CutoffCount { cutoffs: usize, hosts: usize },
    #[error("sita-e: no sizes to compute cutoffs from")]
    NoSizes,
    #[error("sita-e: a rule that needs cutoffs from sizes; compute them with sita_e_cutoffs first")]
    Unresolved,
    #[error("sita-e window {0:?}: expected a number of sizes from 1 to {MAX_LIVE_WINDOW}")]
    BadWindow(String),
    #[error("{got} host loads given for {hosts} hosts")]
    LoadCount { got: usize, hosts: usize },
}

/// A dispatch rule as written on a command line.
#[derive(Debug, Clone, PartialEq)]
pub enum DispatchRule {
    Random,
    RoundRobin,
    LeastConnections,
    LeastWork,
    /// Size intervals: host i takes sizes in `(cutoffs[i-1], cutoffs[i]]`.
    Sita(Vec<u64>),
    /// SITA with cutoffs that equalise the load: resolved to `Sita` from a sample of sizes.
    SitaE,
    /// SITA-E from the last N sizes dispatched, re-derived as requests arrive
    /// ([`LIVE_RECOMPUTE_FRACTION`]); until the first size, everything to host 0.
    SitaELive(usize),
}

impl DispatchRule {
    /// The spellings [`DispatchRule::parse`] takes and `Display` writes: `CUTOFFS` stands for
    /// sizes such as `10K,1M`, `N` for a number of sizes. What `shortfirst vocabulary` lists.
    pub const FORMS: [&'static str; 7] =
        ["random", "round-robin", "least-connections", "least-work", "sita:CUTOFFS", "sita-e", "sita-e:N"];

    pub fn parse(text: &str) -> Result<DispatchRule, DispatchError> {
        match text {
            "random" => return Ok(DispatchRule::Random),
            "round-robin" => return Ok(DispatchRule::RoundRobin),
            "least-connections" => return Ok(DispatchRule::LeastConnections),
            "least-work" => return Ok(DispatchRule::LeastWork),
            "sita-e" => return Ok(DispatchRule::SitaE),
            _ => {}
        }
        if let Some(window) = text.strip_prefix("sita-e:") {
            return match window.parse::<usize>() {
                Ok(n) if (1..=MAX_LIVE_WINDOW).contains(&n) => Ok(DispatchRule::SitaELive(n)),
                _ => Err(DispatchError::BadWindow(window.to_string())),
            };
        }
        let Some(list) = text.strip_prefix("sita:") else {
            return Err(DispatchError::UnknownRule(text.to_string()));
        };
        let cutoffs = parse_cutoffs(list)?;
        Ok(DispatchRule::Sita(cutoffs))
    }

    /// Whether the rule reads the hosts' load (the driver must then keep it current).
    pub fn needs_load(&self) -> bool {
        matches!(self, DispatchRule::LeastConnections | DispatchRule::LeastWork)
    }
}

impl std::fmt::Display for DispatchRule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DispatchRule::Random => f.write_str("random"),
            DispatchRule::RoundRobin => f.write_str("round-robin"),
            DispatchRule::LeastConnections => f.write_str("least-connections"),
            DispatchRule::LeastWork => f.write_str("least-work"),
            DispatchRule::SitaE => f.write_str("sita-e"),
            DispatchRule::SitaELive(n) => write!(f, "sita-e:{n}"),
            DispatchRule::Sita(c) => {
                let list: Vec<String> = c.iter().map(u64::to_string).collect();
                write!(f, "sita:{}", list.join(","))
            }
        }
    }
}

/// Comma-separated sizes (`10K,1M` or bytes), non-decreasing.
pub fn parse_cutoffs(list: &str) -> Result<Vec<u64>, DispatchError> {
    let mut cutoffs = Vec::new();
    for part in list.split(',') {
        let bytes = units::parse_size_bytes(part.trim())
            .map_err(|e| DispatchError::BadCutoff { text: part.to_string(), reason: e.to_string() })?;
        if cutoffs.len() >= MAX_HOSTS {
            return Err(DispatchError::BadHosts { hosts: cutoffs.len() + 1 });
        }
        cutoffs.push(bytes);
    }
    if cutoffs.windows(2).any(|w| w[1] < w[0]) {
        return Err(DispatchError::Decreasing(cutoffs));
    }
    Ok(cutoffs)
}

/// What the dispatcher knows of a host when a request arrives.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct HostLoad {
    /// Requests in the host (in service or waiting).
    pub connections: usize,
    /// Bytes the host has left to send.
    pub remaining_bytes: f64,
}

/// Chooses a host per request. Build it with [`Dispatcher::new`] (for `sita-e`, resolve
/// the cutoffs first: [`sita_e_cutoffs`] → [`DispatchRule::Sita`]).
#[derive(Debug, Clone)]
pub struct Dispatcher {
    rule: DispatchRule,
    hosts: usize,
    next_rr: usize,
    rng: ChaCha8Rng,
    /// `sita-e:N`: the window and the cutoffs in force.
    live: Option<Live>,
}

/// Share of the window between two derivations of `sita-e:N`'s cutoffs (each costs
/// O(N log N)): every N/16 requests, and at 1, 2, 4, ... requests before that.
pub const LIVE_RECOMPUTE_FRACTION: usize = 16;

#[derive(Debug, Clone)]
struct Live {
    window: LiveSitaE,
    cutoffs: Vec<u64>,
    since: usize,
    next_at: usize,
    every: usize,
}

impl Live {
    fn observe(&mut self, size_bytes: u64) {
        self.window.observe(size_bytes);
        self.since += 1;
        if self.since >= self.next_at {
            // All sizes zero: no load to split; the old cutoffs stay.
            if let Ok(c) = self.window.cutoffs() {
                self.cutoffs = c;
            }
            self.since = 0;
            self.next_at = (self.next_at * 2).min(self.every);
        }
    }
}

impl Dispatcher {
    /// `seed` drives `random` only.
    pub fn new(rule: DispatchRule, hosts: usize, seed: u64) -> Result<Dispatcher, DispatchError> {
        check_hosts(hosts)?;
        match &rule {
            DispatchRule::SitaE => return Err(DispatchError::Unresolved),
            DispatchRule::Sita(c) if c.len() + 1 != hosts => {
                return Err(DispatchError::CutoffCount { cutoffs: c.len(), hosts })
            }
            _ => {}
        }
        let live = match rule {
            DispatchRule::SitaELive(window) => Some(Live {
                window: LiveSitaE::new(hosts, window)?,
                cutoffs: Vec::new(),
                since: 0,
                next_at: 1,
                every: (window / LIVE_RECOMPUTE_FRACTION).max(1),
            }),
            _ => None,
        };
        Ok(Dispatcher { rule, hosts, next_rr: 0, rng: ChaCha8Rng::seed_from_u64(seed), live })
    }

    pub fn rule(&self) -> &DispatchRule {
        &self.rule
    }

    /// The host for a request of `size_bytes`; `load` has one entry per host (read only
    /// by the rules that [`DispatchRule::needs_load`]).
    pub fn choose(&mut self, size_bytes: u64, load: &[HostLoad]) -> Result<usize, DispatchError> {
        if self.rule.needs_load() && load.len() != self.hosts {
            return Err(DispatchError::LoadCount { got: load.len(), hosts: self.hosts });
        }
        Ok(match &self.rule {
            DispatchRule::Random => self.rng.gen_range(0..self.hosts),
            DispatchRule::RoundRobin => self.rotate(self.next_rr),
            DispatchRule::LeastConnections => {
                self.rotate(argmin_from(load.iter().map(|l| l.connections as f64), self.next_rr))
            }
            DispatchRule::LeastWork => self.rotate(argmin_from(load.iter().map(|l| l.remaining_bytes), self.next_rr)),
            DispatchRule::Sita(cutoffs) => sita_host(cutoffs, size_bytes),
            DispatchRule::SitaELive(_) => {
                let live = self.live.as_mut().expect("built with the rule");
                let host = sita_host(&live.cutoffs, size_bytes);
                live.observe(size_bytes);
                host
            }
            DispatchRule::SitaE => unreachable!("refused by Dispatcher::new"),
        })
    }

    /// Records `host` as the last choice: the next round (or tie) starts after it.
    fn rotate(&mut self, host: usize) -> usize {
        self.next_rr = (host + 1) % self.hosts;
        host
    }
}

fn check_hosts(hosts: usize) -> Result<(), DispatchError> {
    if hosts == 0 || hosts > MAX_HOSTS {
        return Err(DispatchError::BadHosts { hosts });
    }
    Ok(())
}

/// The index of the smallest value; among equals the first at or after `start`
/// (wrapping around). `start` < the number of values.
fn argmin_from(values: impl ExactSizeIterator<Item = f64>, start: usize) -> usize {
    let n = values.len();
    debug_assert!(start < n, "start {start} outside {n} values");
    // Rank by (value, distance from `start` going round).
    let key = |i: usize, v: f64| (v, (i + n - start) % n);
    let mut best: Option<(usize, (f64, usize))> = None;
    for (i, v) in values.enumerate() {
        let k = key(i, v);
        if best.map_or(true, |(_, b)| k.0 < b.0 || (k.0 == b.0 && k.1 < b.1)) {
            best = Some((i, k));
        }
    }
    best.map_or(0, |(i, _)| i)
}

/// SITA's host for a size: host i takes `(cutoffs[i-1], cutoffs[i]]` (host 0 from 0).
pub fn sita_host(cutoffs: &[u64], size_bytes: u64) -> usize {
    cutoffs.partition_point(|&c| c < size_bytes)
}

/// What a response costs a host's uplink beyond its body, on Ethernet, IPv4 and TCP with
/// timestamps: its head, the headers of each segment, and its share of its connection's
/// control packets. Measured on the lab's farm, a 284-byte head and 66 header bytes a
/// segment made host 0 of a SITA-E split by body bytes carry 16% more than host 1: most
/// requests are small, and a small response's wire cost is mostly not its body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WireCost {
    /// The response head's bytes (status line and fields).
    pub head_bytes: u64,
    /// Bytes of the connection's control packets (SYN-ACK, ACKs, FIN) a response carries:
    /// 0 where connections are kept alive across many responses.
    pub control_bytes: u64,
}

impl WireCost {
    /// Payload bytes a segment carries: an Ethernet MTU of 1500 less IPv4 (20) and TCP with
    /// timestamps (32).
    pub const MSS_BYTES: u64 = 1_448;
    /// Header bytes a segment adds on the wire: Ethernet 14, IPv4 20, TCP with timestamps 32.
    pub const SEGMENT_HEADER_BYTES: u64 = 66;

    /// The uplink bytes of a response with a body of `body_bytes`:
    /// body + head + ⌈(body + head) / MSS⌉ · segment header + control.
    pub fn bytes(&self, body_bytes: u64) -> u64 {
        let data = body_bytes.saturating_add(self.head_bytes);
        data.saturating_add(data.div_ceil(Self::MSS_BYTES) * Self::SEGMENT_HEADER_BYTES)
            .saturating_add(self.control_bytes)
    }
}

/// SITA-E cutoffs for `hosts` hosts from sizes with weights (`(size_bytes, requests)`:
/// the load of a size is size × requests). Each cutoff is the size boundary whose
/// cumulative load comes closest to k/hosts of the total. Equal sizes always go to one
/// host, so with few distinct sizes some intervals may be empty (equal cutoffs).
/// Sorts `sizes` in place. Cost O(n log n).
pub fn sita_e_cutoffs(sizes: &mut [(u64, u64)], hosts: usize) -> Result<Vec<u64>, DispatchError> {
    sita_e_cutoffs_by(sizes, hosts, |size_bytes| size_bytes)
}

/// [`sita_e_cutoffs`] with the load of a size `cost(size) × requests` (e.g.
/// [`WireCost::bytes`]); the cutoffs are still sizes. `cost` must not decrease with size.
pub fn sita_e_cutoffs_by(
    sizes: &mut [(u64, u64)],
    hosts: usize,
    cost: impl Fn(u64) -> u64,
) -> Result<Vec<u64>, DispatchError> {
    check_hosts(hosts)?;
    sizes.sort_unstable();
    let total: u128 = sizes.iter().map(|&(s, w)| u128::from(cost(s)) * u128::from(w)).sum();
    if sizes.is_empty() || total == 0 {
        return Err(DispatchError::NoSizes);
    }
    // Distinct sizes with the cumulative load up to and including each.
    let mut distinct: Vec<(u64, u128)> = Vec::new();
    let mut cumulative = 0u128;
    for &(s, w) in sizes.iter() {
        cumulative += u128::from(cost(s)) * u128::from(w);
        match distinct.last_mut() {
            Some(last) if last.0 == s => last.1 = cumulative,
            _ => distinct.push((s, cumulative)),
        }
    }
    let mut cutoffs = Vec::with_capacity(hosts - 1);
    for k in 1..hosts as u128 {
        // Targets scaled by `hosts` to stay in integers: cumulative × hosts vs total × k.
        let target = total * k;
        let scaled = |c: u128| c * hosts as u128;
        let i = distinct.partition_point(|&(_, c)| scaled(c) < target).min(distinct.len() - 1);
        let above = scaled(distinct[i].1) - target.min(scaled(distinct[i].1));
        let below = if i == 0 { target } else { target - scaled(distinct[i - 1].1) };
        let cut = if i > 0 && below < above { distinct[i - 1].0 } else { distinct[i].0 };
        let floor = cutoffs.last().copied().unwrap_or(0);
        cutoffs.push(cut.max(floor));
    }
    Ok(cutoffs)
}

/// SITA-E from a bounded window of live sizes: the last `window_len` sizes observed.
#[derive(Debug, Clone)]
pub struct LiveSitaE {
    window: VecDeque<u64>,
    window_len: usize,
    hosts: usize,
}

/// Most sizes a live window may hold (8 bytes each: 8 MB).
pub const MAX_LIVE_WINDOW: usize = 1 << 20;

impl LiveSitaE {
    /// `window_len` in `1..=MAX_LIVE_WINDOW`: at the limit the oldest size leaves.
    pub fn new(hosts: usize, window_len: usize) -> Result<LiveSitaE, DispatchError> {
        check_hosts(hosts)?;
        let window_len = window_len.clamp(1, MAX_LIVE_WINDOW);
        Ok(LiveSitaE { window: VecDeque::with_capacity(window_len.min(4096)), window_len, hosts })
    }

    pub fn observe(&mut self, size_bytes: u64) {
        if self.window.len() == self.window_len {
            self.window.pop_front();
        }
        self.window.push_back(size_bytes);
    }

    pub fn observations(&self) -> usize {
        self.window.len()
    }

    /// Cutoffs for the window (O(n log n): recompute every few thousand requests).
    pub fn cutoffs(&self) -> Result<Vec<u64>, DispatchError> {
        let mut sizes: Vec<(u64, u64)> = self.window.iter().map(|&s| (s, 1)).collect();
        sita_e_cutoffs(&mut sizes, self.hosts)
    }
}

#[cfg(test)]
mod tests;
