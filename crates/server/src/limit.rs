//! The connection limit's decisions (no I/O, no clock): whether the accept loop
//! polls the listener, what becomes of a connection accepted at the limit, and
//! the accounting of the time the loop spends paused.
//!
//! Under `at-max-connections = refuse` the loop always accepts and refuses what
//! it accepts at the limit; under `wait` it stops polling the listener while the
//! limit is reached, so new connections wait in the kernel's accept queue.

use std::time::Duration;

use tokio::time::Instant;

use crate::config::AtMaxConnections;

/// `max-connections` and what happens at it.
#[derive(Clone, Copy, Debug)]
pub struct ConnectionLimit {
    max: usize,
    at_max: AtMaxConnections,
}

/// What to do with a connection just accepted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admit {
    Serve,
    /// `503`, `Retry-After: 1`, close.
    Refuse,
}

impl ConnectionLimit {
    pub fn new(max: usize, at_max: AtMaxConnections) -> ConnectionLimit {
        ConnectionLimit { max, at_max }
    }

    /// Whether the accept loop polls the listener with `open` connections open.
    pub fn accepting(&self, open: usize) -> bool {
        self.at_max == AtMaxConnections::Refuse || open < self.max
    }

    /// A connection accepted while `open` others are open.
    pub fn admit(&self, open: usize) -> Admit {
        if open < self.max {
            Admit::Serve
        } else {
            Admit::Refuse
        }
    }
}

/// How often and how long the accept loop stopped accepting.
#[derive(Clone, Copy, Debug, Default)]
pub struct PauseClock {
    since: Option<Instant>,
    pauses: u64,
    paused: Duration,
}

/// A [`PauseClock`] read at one instant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PauseSnapshot {
    pub paused: bool,
    pub pauses: u64,
    /// Every pause so far, the one in progress up to the instant read.
    pub paused_total: Duration,
}

impl PauseClock {
    /// Stops accepting at `now`; a no-op while already paused.
    pub fn pause(&mut self, now: Instant) {
        if self.since.is_none() {
            self.since = Some(now);
            self.pauses += 1;
        }
    }

    /// Accepts again at `now`; a no-op while not paused.
    pub fn resume(&mut self, now: Instant) {
        if let Some(since) = self.since.take() {
            self.paused += now.saturating_duration_since(since);
        }
    }

    pub fn snapshot(&self, now: Instant) -> PauseSnapshot {
        let ongoing = self.since.map_or(Duration::ZERO, |s| now.saturating_duration_since(s));
        PauseSnapshot { paused: self.since.is_some(), pauses: self.pauses, paused_total: self.paused + ongoing }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuse_always_accepts_and_refuses_at_the_limit() {
        let l = ConnectionLimit::new(2, AtMaxConnections::Refuse);
        assert!((0..5).all(|open| l.accepting(open)));
        assert_eq!([0, 1, 2, 3].map(|open| l.admit(open)), [Admit::Serve, Admit::Serve, Admit::Refuse, Admit::Refuse]);
    }

    #[test]
    fn wait_stops_accepting_at_the_limit_and_resumes_below_it() {
        let l = ConnectionLimit::new(2, AtMaxConnections::Wait);
        assert_eq!([0, 1, 2, 3].map(|open| l.accepting(open)), [true, true, false, false]);
        // Whatever it accepts while accepting is served.
        assert!((0..2).all(|open| l.admit(open) == Admit::Serve));
    }

    #[test]
    fn pause_clock_counts_pauses_and_time_including_the_one_in_progress() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let mut c = PauseClock::default();
        assert_eq!(c.snapshot(at(0)), PauseSnapshot { paused: false, pauses: 0, paused_total: Duration::ZERO });
        c.pause(at(100));
        c.pause(at(150)); // already paused: neither a second pause nor a restart
        assert_eq!(
            c.snapshot(at(400)),
            PauseSnapshot { paused: true, pauses: 1, paused_total: Duration::from_millis(300) }
        );
        c.resume(at(500));
        c.resume(at(900)); // not paused: nothing to add
        c.pause(at(1_000));
        c.resume(at(1_050));
        assert_eq!(
            c.snapshot(at(2_000)),
            PauseSnapshot { paused: false, pauses: 2, paused_total: Duration::from_millis(450) }
        );
    }
}
