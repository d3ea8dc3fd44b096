//! The sjf-aging pick (module docs of `admission`, "Policies"): promote a cheaper request
//! only if no older one is delayed past its bound or at all (it finishes first, or fits
//! beside the older one when that one starts).

use super::super::AGING_SCAN_LIMIT;
use super::Gate;

impl Gate {
    /// sjf-aging (see the module docs): one pass over the queue in arrival order, carrying
    /// `allow = min over older o of max(max(deadline_o, start_o) − now, spare_o)`; `r` is
    /// allowed iff `cost_r <= allow`. A due request without room in the overdue share
    /// neither goes first nor constrains younger ones. Returns the pick and whether it went
    /// ahead as due.
    pub(super) fn pick_aging(&self, now_us: u64) -> Option<(u64, bool)> {
        let min_cost = self.by_cost.first()?.0;
        if !self.fits(min_cost) {
            return None; // nothing fits: no need to look further
        }
        let profile = self.release_profile(now_us);
        let mut bound = u64::MAX;
        // The start (below) of the request that set `bound`.
        let mut bound_start = now_us;
        // Largest charge a younger request may have: below this, admitting it now neither
        // delays an older request past its bound (it finishes first) nor at all (it fits
        // in the room the older request leaves free when it starts).
        let mut allow_us = u64::MAX;
        let mut best_due: Option<(u64, u64)> = None;
        let mut best_cost: Option<(u64, u64)> = None;
        for (&seq, w) in self.queue.iter().take(AGING_SCAN_LIMIT) {
            let due = w.deadline_us <= now_us;
            // Past its bound with the overdue share taken: it waits in cost order, and
            // holding younger requests back for it would only turn an overload into fifo.
            let due_first = due && self.overdue_room();
            // Only the oldest of a type is a candidate (the type rule).
            if w.cost_us <= allow_us && self.fits(w.cost_us) && self.is_class_head(seq) {
                let (best, key) =
                    if due_first { (&mut best_due, (w.deadline_us, seq)) } else { (&mut best_cost, (w.cost_us, seq)) };
                *best = Some(best.map_or(key, |b| b.min(key)));
            }
            if due && !due_first {
                continue;
            }
            // `w`'s start: once it fits, and once it may go ahead of the older requests.
            // Started when it fits, would it still run past `bound`? Then it waits at
            // least until the request that set `bound` starts (starting later only runs
            // it further past). A lower bound on its real start either way, so the
            // guarantee holds. Taking "when it fits" alone let a request that fits now
            // but must wait for an older one pin `bound` to now: nothing younger got in
            // while the backend drained (`shortfirst gatekeeper model` warm-up:
            // one request running on 4 processors, 134 waiting).
            let fits_at = self.earliest_start_us(&profile, now_us, w.cost_us);
            let start = if fits_at.saturating_add(w.cost_us) <= bound { fits_at } else { fits_at.max(bound_start) };
            let own = w.deadline_us.max(start);
            if own < bound {
                bound = own;
                bound_start = start;
            }
            let spare = self.spare_at_start_us(&profile, start, w.cost_us);
            allow_us = allow_us.min(own.saturating_sub(now_us).max(spare));
            if min_cost > allow_us {
                break; // nothing younger can be allowed any more
            }
        }
        best_due.map(|(_, s)| (s, true)).or(best_cost.map(|(_, s)| (s, false)))
    }

    /// Admitted requests in expected-finish order: `(finish, load after, in flight after)`,
    /// the state once every request up to and including this one has finished. Finish times
    /// already past count as `now` (overdue, expected any moment).
    fn release_profile(&self, now_us: u64) -> Vec<(u64, u64, usize)> {
        let mut load = self.load_us;
        let mut count = self.running.len();
        let mut out = Vec::with_capacity(count);
        for &(finish, seq) in &self.by_finish {
            load -= self.running[&seq].charge_us;
            count -= 1;
            out.push((finish.max(now_us), load, count));
        }
        out
    }

    /// Room a request of this cost leaves free when it starts at `start_us` (by expected
    /// finish times): `capacity − cost − load then`, 0 when it would run alone or when the
    /// concurrency cap leaves no place beside it.
    fn spare_at_start_us(&self, profile: &[(u64, u64, usize)], start_us: u64, cost_us: u64) -> u64 {
        let i = profile.partition_point(|p| p.0 <= start_us);
        let (load, count) = match i {
            0 => (self.load_us, self.running.len()),
            _ => (profile[i - 1].1, profile[i - 1].2),
        };
        if self.cfg.max_in_flight.is_some_and(|m| count + 2 > m) {
            return 0;
        }
        self.cfg.capacity_us.saturating_sub(load).saturating_sub(cost_us)
    }

    /// The first moment, by expected finish times, at which a request of this cost would
    /// fit (the rule of [`Gate::fits`] applied to the requests still running then).
    fn earliest_start_us(&self, profile: &[(u64, u64, usize)], now_us: u64, cost_us: u64) -> u64 {
        if self.fits(cost_us) {
            return now_us;
        }
        let fits_after = |&(_, load, count): &(u64, u64, usize)| {
            count == 0
                || (self.cfg.max_in_flight.map_or(true, |m| count < m)
                    && load.saturating_add(cost_us) <= self.cfg.capacity_us)
        };
        // Monotone: once enough has finished, more finishing keeps it fitting.
        let i = profile.partition_point(|p| !fits_after(p));
        profile.get(i).map_or(now_us, |p| p.0)
    }
}
