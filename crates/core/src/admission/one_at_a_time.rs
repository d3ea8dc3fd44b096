//! The admission queue as a scheduler of a single server: one job runs at a time, each
//! charged its exact service, the waiting ones ordered by an [`AdmissionPolicy`] — how the
//! simulator runs `sjf-aging:X` on a link. No estimator and no capacity to choose: the
//! capacity is one unit and every charge at least one, so the gate's empty-system rule
//! admits exactly one job at a time (module docs, "Empty system").

use super::{AdmissionError, AdmissionPolicy, Gate, GateConfig, RequestId, Ticket};

/// A single server fed by the gate (see the module docs).
#[derive(Debug)]
pub struct OneAtATime {
    gate: Gate,
}

impl OneAtATime {
    /// A server for at most `max_jobs` waiting jobs under `policy`.
    pub fn new(policy: AdmissionPolicy, max_jobs: usize) -> Result<Self, AdmissionError> {
        let mut cfg = GateConfig::new(1, policy);
        cfg.max_queue_len = max_jobs.max(1);
        Ok(OneAtATime { gate: Gate::new(cfg)? })
    }

    /// A job of exact service `cost` arrives at `now` (any integer unit of time, the same
    /// for both). Returns its id (ids follow arrival order from 0) and the job that starts
    /// now, if one does.
    pub fn arrive(&mut self, now: u64, cost: u64) -> Result<(RequestId, Option<Ticket>), AdmissionError> {
        let (id, admitted) = self.gate.arrive(now, cost).map_err(|_| AdmissionError::BadQueueLen)?;
        Ok((id, Self::one(admitted)))
    }

    /// The running job finished at `now`: the next to start, if any.
    pub fn finish(&mut self, now: u64, ticket: Ticket) -> Result<Option<Ticket>, AdmissionError> {
        Ok(Self::one(self.gate.release(now, ticket)?))
    }

    fn one(admitted: Vec<super::Admitted>) -> Option<Ticket> {
        debug_assert!(admitted.len() <= 1, "capacity 1: one job at a time");
        admitted.into_iter().next().map(|a| a.ticket)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_job_runs_at_a_time_in_the_policys_order() {
        let mut q = OneAtATime::new("sjf".parse().unwrap(), 8).unwrap();
        let (a, started) = q.arrive(0, 100).unwrap();
        let first = started.expect("an idle server starts the first job");
        assert_eq!(first.id(), a);
        let (_, none) = q.arrive(1, 50).unwrap();
        assert!(none.is_none());
        let (c, _) = q.arrive(2, 10).unwrap();
        // sjf: the 10-unit job before the 50-unit one.
        let next = q.finish(100, first).unwrap().expect("a job waits");
        assert_eq!(next.id(), c);
    }
}
