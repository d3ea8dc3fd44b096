//! The clients' patience: how long a client waits for its response before it gives up, learned
//! from the give-ups the driver reports ([`Controller::client_gone`]).
//!
//! **Why.** Work for a client that has left is work no one receives. In overload a queue
//! grows until clients give up; every request admitted after its client is gone, or so late
//! that its client leaves while the backend works on it, takes the backend's time from a
//! request whose client is still there. Measured in front of datasette at twice its peak with
//! clients that give up after 20 s: fifo delivered 0.46 of the backend's peak as useful work
//! while the backend was busy nearly all the time.
//!
//! **What is learned.** Per request type, the times from arrival to give-up of the last
//! [`WINDOW`] give-ups (queued or in flight), and the same pooled over every type. The
//! patience is the [`QUANTILE`] of those times: a type's own window once it holds
//! [`MIN_GIVE_UPS`], else the pooled one once that does, else none (nothing is refused for
//! patience until clients have been seen giving up). A low quantile, not the mean: a request
//! admitted too late is work lost, one refused a little early is a client answered at once
//! instead of left waiting for nothing.
//!
//! **What it is used for** ([`Controller`]): a request whose expected completion (now + its
//! type's estimate) falls after its arrival + [`BUDGET_FRACTION`] of the patience is
//! refused instead of admitted, and a waiting request is refused the moment that becomes
//! true while it waits.
//!
//! **Which give-ups count.** Only those that come while give-ups are at least
//! [`MIN_GIVE_UP_SHARE`] of the requests that ended recently (given up or served, decayed
//! with time constant [`RECENT_US`]): a few clients that close their connections with a
//! request in flight among many served (a load generator stopping, a browser leaving a
//! page) say nothing of how long the others wait. Measured before this rule: wrk's eight
//! connections, closed at the end of each of its runs, taught a patience of 837 µs after
//! about ten runs (23 give-ups among 940,000 requests served), and the gate then refused
//! about 1 request in 200 as one that would not finish in time.
//!
//! **Memory.** Give-ups older than [`MEMORY_US`] are forgotten, so that a burst of early
//! give-ups (a client crash, a deploy) does not lower the patience for ever; while the rule
//! is working few clients give up, so the patience is then re-learned from the give-ups that
//! come once the rule has lapsed. Bounded: [`WINDOW`] entries per type and pooled.
//!
//! Must not know: sockets, the wall clock, what a request is.
//!
//! [`Controller`]: super::Controller
//! [`Controller::client_gone`]: super::Controller::client_gone

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

/// Give-ups remembered per type (and pooled over every type).
pub const WINDOW: usize = 64;
/// Give-ups needed before a window's patience is used.
pub const MIN_GIVE_UPS: usize = 8;
/// The patience is this quantile of the remembered give-up times.
pub const QUANTILE: f64 = 0.25;
/// Give-ups older than this are forgotten (10 minutes).
pub const MEMORY_US: u64 = 600_000_000;
/// A give-up counts only while give-ups are at least this share of the requests that ended
/// recently (module docs, "Which give-ups count").
pub const MIN_GIVE_UP_SHARE: f64 = 0.01;
/// The time constant of "recently" in that share (10 s).
pub const RECENT_US: u64 = 10_000_000;
/// A request must be expected to finish within this fraction of its client's patience.
/// Estimates are means: a request admitted to finish right at the edge overruns it about
/// half the time, and its work is lost. With 0.8 a request may overrun its estimate by a
/// fifth of the patience (4 s of 20 s) and still find its client.
pub const BUDGET_FRACTION: f64 = 0.8;

/// How the controller decides whether a request would still find its client.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Default)]
pub enum PatienceRule {
    /// Never refuse for patience (the paper's gatekeeper).
    Off,
    /// Learn the clients' patience from their give-ups (the default).
    #[default]
    Learn,
    /// The clients wait this long (an operator who knows their timeout).
    Fixed { patience_us: u64 },
}

impl std::str::FromStr for PatienceRule {
    type Err = String;
    /// `off`, `learn`, or a duration (`20s`, `1m30s`).
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim() {
            "off" => Ok(PatienceRule::Off),
            "learn" | "auto" => Ok(PatienceRule::Learn),
            other => match crate::units::parse_duration(other) {
                Ok(d) if d.is_zero() => Err(format!("patience {s:?}: must be above 0 (or `off`)")),
                Ok(d) => Ok(PatienceRule::Fixed { patience_us: d.as_micros() as u64 }),
                Err(e) => Err(format!("patience: expected `off`, `learn` or a duration: {e}")),
            },
        }
    }
}

/// One window of give-up times: `(when, arrival → give-up µs)`, oldest first.
#[derive(Debug, Clone, Default)]
struct Window {
    give_ups: VecDeque<(u64, u64)>,
}

impl Window {
    fn push(&mut self, now_us: u64, waited_us: u64) {
        if self.give_ups.len() == WINDOW {
            self.give_ups.pop_front();
        }
        self.give_ups.push_back((now_us, waited_us));
    }

    fn forget_before(&mut self, cutoff_us: u64) {
        while self.give_ups.front().is_some_and(|&(t, _)| t < cutoff_us) {
            self.give_ups.pop_front();
        }
    }

    fn quantile_us(&self) -> Option<u64> {
        if self.give_ups.len() < MIN_GIVE_UPS {
            return None;
        }
        let mut v: Vec<u64> = self.give_ups.iter().map(|&(_, w)| w).collect();
        v.sort_unstable();
        let i = ((v.len() - 1) as f64 * QUANTILE).floor() as usize;
        Some(v[i])
    }
}

/// How the requests that ended recently ended: given up or served, each count decayed with
/// time constant [`RECENT_US`].
#[derive(Debug, Clone, Default)]
struct Recent {
    give_ups: f64,
    served: f64,
    at_us: u64,
}

/// The decay is applied at most once per this many µs: one `exp` per millisecond, not per
/// request served (an error of at most 1 ms / [`RECENT_US`], 0.01%).
const DECAY_STEP_US: u64 = 1_000;

impl Recent {
    fn decay_to(&mut self, now_us: u64) {
        if now_us >= self.at_us.saturating_add(DECAY_STEP_US) {
            let keep = (-((now_us - self.at_us) as f64) / RECENT_US as f64).exp();
            self.give_ups *= keep;
            self.served *= keep;
            self.at_us = now_us;
        }
    }

    /// The give-ups' share of the recently ended requests (1 when none ended).
    fn give_up_share(&self) -> f64 {
        let ended = self.give_ups + self.served;
        if ended > 0.0 {
            self.give_ups / ended
        } else {
            1.0
        }
    }
}

/// The patience the rule gives, per type (see the module docs).
#[derive(Debug, Clone)]
pub struct Patience {
    rule: PatienceRule,
    by_type: Vec<Window>,
    pooled: Window,
    /// Each window's quantile, recomputed on every give-up and forgetting (not per request).
    cached: Vec<Option<u64>>,
    cached_pooled: Option<u64>,
    give_ups: u64,
    recent: Recent,
}

impl Patience {
    pub fn new(rule: PatienceRule, num_types: usize) -> Self {
        Patience {
            rule,
            by_type: vec![Window::default(); num_types],
            pooled: Window::default(),
            cached: vec![None; num_types],
            cached_pooled: None,
            give_ups: 0,
            recent: Recent::default(),
        }
    }

    pub fn rule(&self) -> PatienceRule {
        self.rule
    }

    /// A client of `type_index` gave up `waited_us` after its request arrived.
    pub fn give_up(&mut self, now_us: u64, type_index: usize, waited_us: u64) {
        self.give_ups += 1;
        if self.rule != PatienceRule::Learn {
            return;
        }
        self.recent.decay_to(now_us);
        self.recent.give_ups += 1.0;
        if self.recent.give_up_share() < MIN_GIVE_UP_SHARE {
            return;
        }
        if let Some(w) = self.by_type.get_mut(type_index) {
            w.push(now_us, waited_us);
            self.cached[type_index] = w.quantile_us();
        }
        self.pooled.push(now_us, waited_us);
        self.cached_pooled = self.pooled.quantile_us();
    }

    /// A request was served: its client stayed for the response.
    pub fn served(&mut self, now_us: u64) {
        if self.rule == PatienceRule::Learn {
            self.recent.decay_to(now_us);
            self.recent.served += 1.0;
        }
    }

    /// Forget give-ups older than [`MEMORY_US`]; cheap when there is nothing to forget.
    pub fn forget(&mut self, now_us: u64) {
        let cutoff = now_us.saturating_sub(MEMORY_US);
        let stale = |w: &Window| w.give_ups.front().is_some_and(|&(t, _)| t < cutoff);
        if !stale(&self.pooled) {
            return;
        }
        self.pooled.forget_before(cutoff);
        self.cached_pooled = self.pooled.quantile_us();
        for (w, c) in self.by_type.iter_mut().zip(self.cached.iter_mut()) {
            w.forget_before(cutoff);
            *c = w.quantile_us();
        }
    }

    /// By when, after its arrival, a request of this type should be done: the patience's
    /// [`BUDGET_FRACTION`]. `None` while the patience is unknown.
    pub fn budget_us(&self, type_index: usize) -> Option<u64> {
        self.patience_us(type_index).map(|p| (p as f64 * BUDGET_FRACTION) as u64)
    }

    /// How long a client of this type waits, if known.
    pub fn patience_us(&self, type_index: usize) -> Option<u64> {
        match self.rule {
            PatienceRule::Off => None,
            PatienceRule::Fixed { patience_us } => Some(patience_us),
            PatienceRule::Learn => self.cached.get(type_index).copied().flatten().or(self.cached_pooled),
        }
    }

    /// Give-ups reported so far (whatever the rule).
    pub fn give_ups(&self) -> u64 {
        self.give_ups
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_is_known_before_enough_give_ups() {
        let mut p = Patience::new(PatienceRule::Learn, 2);
        for i in 0..MIN_GIVE_UPS - 1 {
            p.give_up(i as u64, 0, 20_000_000);
        }
        assert_eq!(p.patience_us(0), None);
        p.give_up(10, 0, 20_000_000);
        assert_eq!(p.patience_us(0), Some(20_000_000));
        // Type 1 has no give-ups of its own: the pooled window answers.
        assert_eq!(p.patience_us(1), Some(20_000_000));
    }

    #[test]
    fn the_low_quantile_is_used_and_a_type_prefers_its_own_window() {
        let mut p = Patience::new(PatienceRule::Learn, 2);
        for i in 0..8u64 {
            p.give_up(i, 0, (i + 1) * 1_000_000); // 1..8 s
        }
        // 25th percentile of 1..8 s: index floor(7 × 0.25) = 1 → 2 s.
        assert_eq!(p.patience_us(0), Some(2_000_000));
        for i in 0..8u64 {
            p.give_up(100 + i, 1, 30_000_000);
        }
        assert_eq!(p.patience_us(1), Some(30_000_000));
        assert_eq!(p.patience_us(0), Some(2_000_000));
    }

    #[test]
    fn old_give_ups_are_forgotten_and_windows_are_bounded() {
        let mut p = Patience::new(PatienceRule::Learn, 1);
        for i in 0..(WINDOW as u64 * 3) {
            p.give_up(i, 0, 5_000_000);
        }
        assert_eq!(p.by_type[0].give_ups.len(), WINDOW);
        assert_eq!(p.pooled.give_ups.len(), WINDOW);
        p.forget(MEMORY_US + 1_000);
        assert_eq!(p.patience_us(0), None);
    }

    #[test]
    fn a_few_give_ups_among_many_served_teach_nothing() {
        // A load generator's eight connections closed at the end of each one-second run,
        // among 25,000 requests served a second.
        let mut p = Patience::new(PatienceRule::Learn, 1);
        for s in 0..20u64 {
            for i in 0..25_000u64 {
                p.served(s * 1_000_000 + i * 40);
            }
            for k in 0..8u64 {
                p.give_up(s * 1_000_000 + 999_000 + k, 0, 300 + k * 100);
            }
        }
        assert_eq!(p.patience_us(0), None);
        assert_eq!(p.give_ups(), 160);
        // Clients that give up at a real share of the requests are heard.
        for s in 20..80u64 {
            for i in 0..20u64 {
                p.served(s * 1_000_000 + i * 50_000);
                p.give_up(s * 1_000_000 + i * 50_000 + 1, 0, 20_000_000);
            }
        }
        assert_eq!(p.patience_us(0), Some(20_000_000));
    }

    #[test]
    fn off_and_fixed_ignore_give_ups() {
        let mut off = Patience::new(PatienceRule::Off, 1);
        let mut fixed = Patience::new(PatienceRule::Fixed { patience_us: 7 }, 1);
        for i in 0..20 {
            off.give_up(i, 0, 1);
            fixed.give_up(i, 0, 1);
        }
        assert_eq!(off.patience_us(0), None);
        assert_eq!(fixed.patience_us(0), Some(7));
        assert_eq!(off.give_ups(), 20);
    }

    #[test]
    fn the_rule_parses_with_units() {
        assert_eq!("off".parse::<PatienceRule>(), Ok(PatienceRule::Off));
        assert_eq!("learn".parse::<PatienceRule>(), Ok(PatienceRule::Learn));
        assert_eq!("20s".parse::<PatienceRule>(), Ok(PatienceRule::Fixed { patience_us: 20_000_000 }));
        assert!("0s".parse::<PatienceRule>().is_err());
        assert!("soon".parse::<PatienceRule>().unwrap_err().contains("patience"));
    }
}
