//! The pacer thread of the user-space uplink scheduler: it releases grants as
//! the pacer's budget refills, waking within microseconds of each release.
//!
//! A pacer on tokio's timer (millisecond granularity, sleeps rounded up) woke
//! about 1 ms late on average, and the look-ahead had to cover that. This
//! thread waits on a condition variable over the scheduler's own mutex with a
//! deadline — a futex with an absolute `CLOCK_MONOTONIC` timeout, an hrtimer —
//! and a timer slack of 1 µs, so the kernel neither batches nor delays its
//! wake-ups. It never spins. Whoever makes a connection ready while the pacer
//! has no release to wait for notifies it (`UserScheduler::dispatch`), and
//! dropping the [`PacerThread`] stops and joins it.
//!
//! Every timer wake-up records how late it came and how much link time the
//! lateness cost (the booked link time ran out before it: `Pacer::wake`).

// The wall clock: a thread of its own (no tokio runtime) on a real deadline.
#![allow(clippy::disallowed_types)]

use std::fmt::Write as _;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use shortfirst_core::uplink_sched::Wake;

use super::UserScheduler;
use crate::metrics::{write_buckets, write_family, write_metric};

/// The pacer thread's name (at most 15 bytes: the kernel's limit).
pub(crate) const THREAD_NAME: &str = "sf-pacer";

/// Timer slack of the pacer thread, nanoseconds (the kernel's default is 50 µs).
const TIMER_SLACK_NS: libc::c_ulong = 1_000;

/// Upper bounds of the pacer-lateness histogram, seconds.
const LATENESS_BUCKETS_S: [f64; 12] =
    [0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.05, 0.1];

/// The running pacer thread; stopped and joined when dropped.
pub(crate) struct PacerThread {
    sched: Arc<UserScheduler>,
    handle: Option<JoinHandle<()>>,
}

impl PacerThread {
    pub(crate) fn spawn(sched: Arc<UserScheduler>) -> io::Result<PacerThread> {
        let inner = sched.clone();
        let handle = std::thread::Builder::new().name(THREAD_NAME.into()).spawn(move || run(&inner))?;
        Ok(PacerThread { sched, handle: Some(handle) })
    }
}

impl Drop for PacerThread {
    fn drop(&mut self) {
        self.sched.lock().pacer_stop = true;
        self.sched.wake_pacer.notify_all();
        if let Some(handle) = self.handle.take() {
            if handle.join().is_err() {
                tracing::error!("the pacer thread panicked");
            }
        }
    }
}

/// Sets the calling thread's timer slack; a failure only costs precision.
fn set_timer_slack() {
    // SAFETY: PR_SET_TIMERSLACK takes one unsigned long by value and touches no
    // memory of ours; it only changes the calling thread's timer slack.
    let rc = unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, TIMER_SLACK_NS) };
    if rc != 0 {
        tracing::warn!(error = %io::Error::last_os_error(), "pacer: cannot set the timer slack; wake-ups may be late");
    }
}

/// The thread's loop: grant what the budget allows, then sleep until the next
/// release (or, with none due, until notified), until stopped.
fn run(sched: &UserScheduler) {
    set_timer_slack();
    let mut st = sched.lock();
    while !st.pacer_stop {
        let now_ns = sched.now_ns();
        sched.dispatch(&mut st, now_ns);
        let next = st.core.next_release_ns(now_ns);
        st.pacer_idle = next.is_none();
        let Some(due_ns) = next else {
            st = sched.wake_pacer.wait(st).expect("uplink scheduler lock poisoned");
            continue;
        };
        let wait = (sched.epoch + Duration::from_nanos(due_ns)).saturating_duration_since(Instant::now());
        let (guard, waited) = sched.wake_pacer.wait_timeout(st, wait).expect("uplink scheduler lock poisoned");
        st = guard;
        if waited.timed_out() {
            sched.pacer_metrics.record(st.core.pacer().wake(due_ns, sched.now_ns()));
        }
    }
}

/// What the pacer's timer wake-ups cost, for `/metrics`.
#[derive(Default)]
pub(crate) struct PacerMetrics {
    lateness_buckets: [AtomicU64; LATENESS_BUCKETS_S.len() + 1],
    lateness_sum_ns: AtomicU64,
    lateness_max_ns: AtomicU64,
    link_idle_ns: AtomicU64,
    idle_wakes: AtomicU64,
}

impl PacerMetrics {
    fn record(&self, wake: Wake) {
        let secs = wake.late_ns as f64 / 1e9;
        let bucket = LATENESS_BUCKETS_S.partition_point(|&b| b < secs);
        self.lateness_buckets[bucket].fetch_add(1, Relaxed);
        self.lateness_sum_ns.fetch_add(wake.late_ns, Relaxed);
        self.lateness_max_ns.fetch_max(wake.late_ns, Relaxed);
        if wake.link_idle_ns > 0 {
            self.link_idle_ns.fetch_add(wake.link_idle_ns, Relaxed);
            self.idle_wakes.fetch_add(1, Relaxed);
        }
    }

    /// The pacer's part of `/metrics`; `lookahead_ns` and `release_ns` are the
    /// look-ahead and the release quantum in force.
    pub(crate) fn render(&self, out: &mut String, lookahead_ns: u64, release_ns: u64) {
        let name = "shortfirst_uplink_pacer_lateness_seconds";
        write_family(out, name, "histogram", "How late the pacer thread woke for a release.");
        let cumulative = write_buckets(out, name, &LATENESS_BUCKETS_S, &self.lateness_buckets);
        let _ = writeln!(out, "{name}_sum {}", self.lateness_sum_ns.load(Relaxed) as f64 / 1e9);
        let _ = writeln!(out, "{name}_count {cumulative}");
        let seconds = |ns: &AtomicU64| ns.load(Relaxed) as f64 / 1e9;
        let rows = [
            (
                "shortfirst_uplink_pacer_lateness_max_seconds",
                "gauge",
                "Latest wake of the pacer so far.",
                seconds(&self.lateness_max_ns),
            ),
            (
                "shortfirst_uplink_pacer_lookahead_seconds",
                "gauge",
                "Link time the pacer may grant ahead of now (--pacer-lookahead or the default for the rate).",
                lookahead_ns as f64 / 1e9,
            ),
            (
                "shortfirst_uplink_pacer_release_quantum_seconds",
                "gauge",
                "Link time that must fit before the pacer releases grants (at least one segment).",
                release_ns as f64 / 1e9,
            ),
            (
                "shortfirst_uplink_pacer_late_idle_seconds_total",
                "counter",
                "Link time idle while a release waited for a late pacer wake-up.",
                seconds(&self.link_idle_ns),
            ),
            (
                "shortfirst_uplink_pacer_late_idle_wakes_total",
                "counter",
                "Pacer wake-ups so late that the link had idled.",
                self.idle_wakes.load(Relaxed) as f64,
            ),
        ];
        for (name, kind, help, v) in rows {
            write_metric(out, name, kind, help, v);
        }
    }
}
