//! The fifo and sjf picks: which waiting request the policy admits next (sjf-aging's is
//! in `aging`).

use super::super::AdmissionPolicy;
use super::Gate;

impl Gate {
    /// The next request to admit now, and whether it goes ahead as overdue, or `None` when
    /// the policy admits nothing more.
    pub(super) fn next_admission(&self, now_us: u64) -> Option<(u64, bool)> {
        let head = match self.cfg.policy {
            AdmissionPolicy::Fifo => self.queue.first_key_value().map(|(&s, _)| s)?,
            // A request past the wait bound goes first while the overdue share has room
            // (then nothing else is admitted until it fits), then a waiting probe.
            AdmissionPolicy::Sjf => match self.overdue_head(now_us) {
                Some(h) if self.overdue_room() => {
                    return self.fits(self.queue[&h].cost_us).then_some((h, true));
                }
                _ => self.sjf_head()?,
            },
            AdmissionPolicy::SjfAging { .. } => return self.pick_aging(now_us),
        };
        // fifo and sjf never admit a request they did not pick: under fifo that would
        // starve large requests; under sjf nothing cheaper than the pick exists (or the
        // pick is a probe, which must not be starved by cheaper ones).
        self.fits(self.queue[&head].cost_us).then_some((head, false))
    }
}
