//! Gatekeeper admission control and admission-queue scheduling (Elnikety et al. 2004, §3).
//!
//! Three pure pieces, all driven with time as a parameter (`now_us`, microseconds on any
//! monotonic clock the driver chooses; the simulator uses its virtual clock):
//!
//! - [`CostEstimator`]: per request type, an online moving average of each request's
//!   measured cost. That average *is* the type's cost, in microseconds ("cost units"). What
//!   a request's cost sample is depends on the [`Basis`]: by default the paper's raw
//!   upstream service time; with [`Basis::Share`] its *share* of the backend (service time
//!   divided, moment by moment, by the requests in flight, see [`Gate::share_us`]).
//! - [`Gate`]: the admission accounting and the admission queue. Load is the sum of the
//!   charges of admitted, unfinished requests; a request is admitted while
//!   `load + cost <= capacity`, otherwise it waits in the queue. Every admitted request
//!   holds a [`Ticket`] that must be handed back exactly once (finished, failed, or the
//!   client went away) and releases exactly the charge it was admitted with.
//! - [`AdmissionPolicy`]: the order in which waiting requests are admitted: `fifo`, `sjf`, or
//!   `sjf-aging:X`.
//!
//! # Rules (precise)
//!
//! **Empty system.** A request whose cost exceeds the whole capacity would otherwise never
//! run. It is admitted when nothing else is admitted (`load == 0`), and then runs alone:
//! nothing else is admitted until it finishes, because any further admission would need
//! `load + cost <= capacity` with `load > capacity`. So at every admission, either
//! `load_after <= capacity` or the admitted request is the only one in flight.
//!
//! **Charges.** A request is charged the cost passed to [`Gate::arrive`] (the estimate at
//! arrival, at least 1 µs, at most `max_charge_share` × the capacity at arrival), and that
//! charge stays fixed while it waits unless the driver re-prices it (below). Once admitted, a driver
//! may replace the charge with a fresher estimate ([`Gate::recharge`], the proxy and the
//! model do it at admission): after a long wait the estimate a request arrived with can be
//! far off. Wall-clock estimates inflate while many requests share the backend and deflate
//! when few do, and a queue full of requests charged at an inflated moment would otherwise
//! run the backend nearly alone, one stale charge at a time, while their type's estimate is
//! already back down (measured: one request in flight for seconds, fifo, open model at twice
//! the peak load). Releasing returns exactly the charge the ticket holds then. Recharging
//! only at admission still judges whether the head *fits* by its stale charge, so under
//! `fifo` a driver may also re-price a waiting request ([`Gate::reprice_waiting`]; the proxy
//! and the model do it for a type's waiting requests whenever that type's estimate changes).
//!
//! **Re-sampling (SJF; beyond the paper's text, in its spirit).** Under `sjf` a type is
//! admitted only when nothing cheaper by estimate waits, so in overload a type priced
//! behind the work that saturates the gate gets no admissions, hence no samples, and its
//! estimate stays where its last samples left it — however stale. In the TPC-W sweep
//! (sjf, 400 browsers) Admin Confirm's estimate froze at 368 ms after three
//! warm-up samples, above Best Sellers' 285–357 ms; the two cost the same at the backend
//! (gated means 272 and 303 ms), but Best Sellers filled the queue, so every Admin Confirm
//! sorted behind all of them and waited out the queue limit: a lock-in the estimate can
//! never leave, since only a sample could move it. The paper learns costs "based on
//! measurements of recent executions" (§3.1); a frozen estimate is not one. So, with
//! [`EstimatorConfig::resample_after_us`] set, [`CostEstimator::charge`] marks a request a
//! *probe* when its type has gone that long without a sample (or a probe), and
//! [`Gate::arrive_probe`] puts a probe ahead of every non-probe in the SJF order (probes
//! among themselves in arrival order). Its charge is its estimate as usual, so the capacity
//! rule is untouched; while a probe waits first in line nothing else is admitted, so it is
//! admitted after at most as many releases as requests were in flight when it became first
//! (property-tested). Each type gets at most one probe per `resample_after_us`, so probes
//! are at most `types / resample_after` of the admissions (14 TPC-W types, 5 s: ≤ 2.8/s).
//! `fifo` and `sjf-aging` need no probes (every waiting request is admitted in bounded
//! time, hence every type is sampled); there `arrive_probe` is `arrive`.
//!
//! **First sample (the [`Controller`]; beyond the paper).** A type with no sample is charged
//! pessimistically (the largest estimate of any type, "Warm-up" in [`EstimatorConfig`]),
//! and its waiting requests keep that charge: only a sample of their own type re-prices
//! them. Under `sjf` they sort behind every cheaper-looking request, and behind an
//! overload's backlog of a measured type that never drains they waited for ever: in front
//! of PostgreSQL (sjf, 1.25× and 1.5× the database's capacity) a fresh gatekeeper held all
//! 64 cheap pgbench clients for a whole 12 s run, each charged as the costly aggregate, and
//! with every client held no new arrival came to be re-sampled. So the controller gives
//! every unsampled type with a request waiting one *probe*: the type's first request, or,
//! when the probe leaves without a sample (it failed, was cancelled, expired, or its client
//! left), the type's oldest waiting request at once, without waiting for a new arrival.
//! The bound: at most one probe per unsampled type, waiting or in flight; the type's other
//! requests are ordinary, charged pessimistically and admitted as they fit; the re-sampling
//! clock marks no more probes of it (property-tested). A probe is charged as any request and
//! counts against the capacity and `max_in_flight` as any request: it is admitted only when
//! it fits (or, charged above the capacity, alone on an empty gate). Under `sjf` it goes
//! ahead of every non-probe ([`Gate::make_probe`] marks a waiting request), so while it
//! waits first in line nothing else is admitted and it starts once the requests in flight
//! then have released room for it. At the bound, a flood of new types: their probes go
//! first in arrival order, one as each room frees, never past the capacity or
//! `max_in_flight`, and measured types wait for at most one probe per new type (the
//! proxies' type table is bounded). Under `fifo` and `sjf-aging` a probe keeps its place:
//! they admit every waiting request in bounded time. A probe is never refused for patience
//! (its type must be measured).
//!
//! **Bounded charges (optional, beyond the paper).** With `max_charge_share = s < 1`, a
//! request at the head of the queue needs at most `s` of the capacity free, so admitting
//! it never waits for the backend to drain: while fifo or sjf requests wait, the load
//! stays above `(1 − s)` × capacity (property-tested). Without the bound (`s = 1`, the
//! paper and the default), a type whose estimate reaches the capacity runs alone and every
//! such request drains the backend first: in the closed-loop model
//! (`shortfirst gatekeeper model`, 4 processors, twice the saturating load, capacity
//! 200 ms below a 300 ms type) fifo ran at 0.30 of peak unbounded and 1.03 with `s = 1/4`.
//! The bound under-charges only types costing more than `s` of the capacity, so it
//! changes nothing while the capacity holds `1/s` of the costliest requests
//! (`shortfirst gatekeeper calibrate` never stops below 4 of them); it matters when
//! estimates grow past what the calibration saw.
//!
//! **Concurrency cap (optional, beyond the paper).** With `max_in_flight = Some(n)`, a
//! request is also held while `n` requests are in flight, whatever their costs. Cost-based
//! capacity bounds the backend's *work*; backends that collapse on the *number* of
//! concurrent requests (processes, connections, lock holders) also need this bound, and
//! under SJF the admitted set skews to cheap requests, so cost alone can let many in.
//!
//! **Dispatch.** After every event (arrival, release, cancel, expiry, capacity change,
//! timer) the gate repeatedly picks the policy's next request and admits it if it fits;
//! it stops at the first pick that does not fit. It never admits a request the policy did
//! not pick just because it is smaller: that would starve large requests (FIFO) or break
//! the aging bound.
//!
//! **Policies.** With `cost` the charge, `arrival` the arrival time and `seq` the arrival
//! order (ties):
//! - `fifo`: the oldest waiting request.
//! - `sjf`: the smallest `(cost, seq)`; non-preemptive (admitted requests run to completion).
//! - `sjf-aging:X`: each waiting request `o` has a bound `deadline_o = arrival_o + X * cost_o`
//!   and an *earliest start* `start_o`: by the expected finish times of the admitted requests
//!   (admission time + charge, or `now` for one already past it), the first moment `o`
//!   would fit — or, if starting then would still run `o` past the bound its older requests
//!   set (below), the start of the request that set that bound, since `o` cannot go before
//!   it. Admitting `r` now occupies its share of capacity until about `now + cost_r`.
//!   A request `r` may go ahead of an older waiting request `o` only if that does not
//!   delay `o` past its bound or at all: `now + cost_r <= max(deadline_o, start_o)`
//!   (`r` finishes before `o`'s bound, or before `o` could start anyway), or
//!   `cost_r <= spare_o`, the room `o` leaves free when it starts
//!   (`capacity − cost_o − load at start_o` of the requests expected to run past
//!   `start_o`; 0 if `o` would run alone or `max_in_flight` leaves no place beside it), so
//!   `r` still running then does not hold `o` back. The oldest request is always allowed.
//!   Among the allowed requests that fit, a *due* one (`deadline <= now`) with the earliest
//!   `(deadline, seq)` is admitted first, otherwise the one with the smallest `(cost, seq)`.
//!
//!   This is the paper's rule ("shorter requests can be promoted towards the head of the
//!   queue only if this promotion does not cause any pending request to be delayed more
//!   than its bound", §3.2) plus *backfilling*: when an overdue request does not fit yet,
//!   capacity it cannot use is not left idle, but only for requests expected to finish
//!   before it could start or to fit beside it once it does. `X = 0` is FIFO with that
//!   backfilling (nobody is delayed, by the estimates); `X → ∞` is `sjf`; values in
//!   between trade mean response time against the largest requests' waits (paper §3.2,
//!   §5.2). The guarantee, in estimated time: no waiting request is overtaken in a way that
//!   makes it exceed its bound or start later than it could have. So with services as
//!   charged, a request that is the oldest waiting and due is admitted once the requests in
//!   flight at that moment have finished, at the latest (property-tested). Estimates are
//!   means, so an individual request can overrun its charge and delay the start it was
//!   expected to free.
//!
//!   **Why the room beside it.** In overload the oldest waiting requests under `sjf-aging`
//!   are the costly ones the cheaper requests overtook; each becomes due and, while it does
//!   not fit, holds every younger request back. Allowing only requests that finish before
//!   its start, by expected finish times that a loaded backend overruns (an overdue
//!   request's finish counts as now, so the start is now), let nothing in: the gate drained
//!   for each costly request in turn, and the backend, holding a few costly requests, left
//!   processors idle. With the room beside it, and with waiting requests re-priced as under
//!   `fifo` ([`Gate::reprice_waiting`]: a stale, inflated charge made a due request wait for
//!   room it did not need), sjf-aging:2 keeps at least fifo's work rate on a simulated
//!   backend at 0.8-2 × its peak load (2 and 4 processors, 90% 3 ms, 5% 230 ms, 5% 630 ms:
//!   at twice the peak on 4 processors 0.96 of the processors busy against fifo's 0.78 and
//!   0.74 before; `backend_tests`).
//!
//!   Bounded: one dispatch step scans at most [`AGING_SCAN_LIMIT`] waiting requests in
//!   arrival order (requests beyond it wait until they are within it) and walks the
//!   admitted requests' finish times once.
//!
//! **Wait bound (`sjf`, optional, beyond the paper).** With `max_wait_us = Some(W)`, the
//! oldest waiting request, once it has waited `W`, is picked before everything else
//! (probes included) and nothing else is admitted while it does not fit, as for a probe.
//! So a request that becomes the oldest after waiting `W` is admitted once the requests in
//! flight then have finished enough to fit it (at most all of them: one longest service
//! time when the requests ahead of it fit together), while plain `sjf` can hold a costly
//! type behind a stream of cheaper ones for ever (table-tested). When several requests are
//! past `W` they go oldest first, so in an overload that keeps everything waiting `W`,
//! `sjf` degrades to `fifo` for the requests past the bound and the costliest type is
//! admitted as under `fifo`; below that, only requests that would have waited longer than
//! `W` change order. The bound is on the wait to *start*, not on completion.
//!
//! **Overdue share (optional, beyond the paper).** With `overdue_share = σ < 1`, requests
//! past their bound (`sjf`: waited `max_wait_us`; `sjf-aging`: past their deadline) go
//! ahead of the others only while the time the requests admitted that way (the *overdue
//! stream*) have had of the backend is at most `σ` of the time anything was in flight,
//! both counted over the recent past ([`OVERDUE_HALF_LIFE_US`]). A request's time is its
//! processor-sharing share while in flight (`∫ dt / in_flight`, as [`Gate::share_us`]), so
//! the stream's time is `overdue in flight / in flight` of each busy µs. An overdue request
//! without room waits in the ordinary order (by cost) and, under `sjf-aging`, no longer
//! holds younger requests back. So the overdue stream takes at most `σ` of the recent busy
//! time plus one request's service (property-tested), and while it stays within `σ` its
//! oldest request is admitted once the requests in flight when it became due have finished
//! (property-tested, `sjf`; its own requests in flight can take it past `σ` meanwhile).
//! It is a share of time, not of the capacity or places at one moment: a backend that runs
//! one request at a time in its own arrival order gives whoever holds a place all its
//! time. Nor of charges: counted in charges at admission, the cheap requests, charged
//! their wall-clock time beside others, counted several times their service while the
//! costly overdue ones ran alone, and the stream got 0.72–0.78 of a one-processor backend
//! at `σ = 0.6` (`backend_tests`; in front of datasette sjf served as fifo). The time a
//! request charged above the capacity holds the gate while it drains is not the stream's:
//! on a backend that shares itself, the requests still in flight run faster meanwhile
//! (charging it too left the stream 0.29–0.50 of the backend at `σ = 0.6`, decision 0010).
//! Without the share an overload makes every costly request overdue, and they take the
//! whole gate oldest first: `sjf` with a wait bound, and `sjf-aging` with no room beside a
//! due request (an in-flight cap of 2), serve about as `fifo` does (measured in front of
//! json-server: sjf-aging:2 17.8 s mean response against fifo's 18.0 s; `backend_tests`
//! reproduces it on a simulated backend). `σ = 1` (the default) is the rule without a share.
//! With [`GateConfig::serial`] (a backend that serves one request at a time in arrival
//! order) each request is counted instead, at its release, the time since the previous
//! release or its admission, whichever is later ([`Basis::Serial`]): processor sharing
//! would count a costly overdue request a fraction of its time while cheaper ones wait
//! beside it inside the backend. The stream's time is then known only as requests finish,
//! so it can exceed `σ` by the services of the requests in flight.
//!
//! **Classes.** A request may arrive in a class ([`Gate::arrive_in`]; the proxy's classes
//! are its request types). Within a class every policy admits in arrival order, whatever
//! the charges: `sjf` and `sjf-aging` consider only the oldest waiting request of each
//! class (its *head*), and order the heads by the rules below. A type's estimate moves
//! while its requests wait, so charges taken at arrival differ among requests of one type
//! for no reason in the requests themselves; ordering by them let the later requests of a
//! type overtake the earlier ones for as long as the estimate kept drifting (a single-URL
//! flood under `sjf` had requests time out at 20 s while `fifo` served all in under
//! 0.2 s). A probe takes its class's head ahead of everything, once: admitting it answers
//! the probe (one fresh sample of the type). Requests that arrive
//! without a class ([`Gate::arrive`]) are each a class of their own.
//!
//! **Overload.** The queue holds at most `max_queue_len` requests: an arrival that finds it
//! full is rejected ([`Rejection::QueueFull`]) and the queue is untouched (tail drop; the
//! proxy answers 503 + Retry-After). With `max_queue_wait_us`, a request that has waited
//! that long is removed by [`Gate::expire`] (the proxy answers 503). The default is the
//! paper's: no wait limit, only the length bound, which is a memory guard.
//!
//! **Time.** `now_us` must not go backwards; an earlier value is treated as the latest value
//! seen, so a misbehaving clock cannot reorder the queue.
//!
//!
//! # Modules
//!
//! - `estimator`: [`CostEstimator`] and its configuration ([`EstimatorConfig`], [`Basis`]).
//! - `policy`: [`AdmissionPolicy`], the names `fifo`, `sjf`, `sjf-aging:X`.
//! - `gate`: [`Gate`]'s accounting (admit, release, recharge, capacity) and its types
//!   ([`Ticket`], [`Admitted`], [`GateConfig`]); `gate::queue` the waiting requests (arrive,
//!   cancel, expire, re-price); `gate::order` the fifo and sjf picks; `gate::aging` the
//!   sjf-aging pick.
//! - [`auto`]: capacity auto-tuning.
//! - `backend_tests` (tests only): the gate in front of a simulated backend.
//! - [`calibration`]: the offline capacity search's decision (work rates with their
//!   spread in, the capacity and its reasons out).
//!
//! Must not know: sockets, HTTP, tokio, the wall clock, how costs are measured.

pub mod auto;
pub mod calibration;
mod controller;
mod estimator;
mod gate;
mod one_at_a_time;
pub mod patience;
mod policy;

pub use controller::{Arrival, Arrived, ChargeAt, Controller, ControllerConfig, Decision, Grant, Refusal};
pub use estimator::{Basis, Charge, CostEstimator, EstimatorConfig, Sample, DEFAULT_RESAMPLE_AFTER_US};
pub use gate::{Admitted, Gate, GateConfig, Rejection, RequestId, Ticket};
pub use one_at_a_time::OneAtATime;
pub use patience::PatienceRule;
pub use policy::AdmissionPolicy;

/// Smallest charge: a zero cost would let unbounded numbers of requests in.
pub const MIN_COST_US: u64 = 1;

/// Largest X accepted by `sjf-aging:X`; beyond this, use `sjf`.
pub const MAX_AGING_FACTOR: f64 = 1e6;

/// The overdue share's memory: busy time this long ago counts half
/// ([`GateConfig::overdue_share`]). Long enough to hold many costly requests (hundreds of
/// ms each), short enough that a burst of cheap work a minute ago earns the overdue stream
/// nothing now.
pub const OVERDUE_HALF_LIFE_US: u64 = 5_000_000;

/// sjf-aging: waiting requests examined per dispatch step, oldest first. Requests younger
/// than this many others are not considered for admission until older ones leave.
pub const AGING_SCAN_LIMIT: usize = 1024;

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum AdmissionError {
    #[error("policy {input:?}: expected {forms} with X a number in 0..={max}", forms = crate::names::one_of(&AdmissionPolicy::FORMS), max = MAX_AGING_FACTOR)]
    BadPolicy { input: String },
    #[error("capacity must be at least {min} µs of cost, got {capacity_us}", min = MIN_COST_US)]
    BadCapacity { capacity_us: u64 },
    #[error("max_queue_len must be at least 1")]
    BadQueueLen,
    #[error("max_in_flight must be at least 1")]
    BadInFlight,
    #[error("max_charge_share must be in (0, 1], got {share}")]
    BadChargeShare { share: f64 },
    #[error("overdue_share must be in (0, 1], got {share}")]
    BadOverdueShare { share: f64 },
    #[error("estimator: {what}")]
    BadEstimator { what: String },
    #[error("request type {type_index} out of range: the estimator tracks {num_types} types")]
    UnknownType { type_index: usize, num_types: usize },
    #[error("calibration: {what}")]
    BadCalibration { what: String },
    #[error("ticket for request {id} is not outstanding in this gate")]
    UnknownTicket { id: u64 },
}

// The tests see the module's items as they did before the split (`use super::*`).
#[cfg(test)]
#[allow(unused_imports)]
use std::collections::{BTreeMap, BTreeSet, HashMap};

#[cfg(test)]
mod backend_tests;
#[cfg(test)]
mod controller_tests;
#[cfg(test)]
mod exact_service;
#[cfg(test)]
mod first_probe_tests;
#[cfg(test)]
mod invariant_tests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod type_order_tests;
