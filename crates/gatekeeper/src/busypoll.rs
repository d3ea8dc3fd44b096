//! Opt-in bounded busy polling of the runtime's I/O driver (`--busy-poll-us N`).
//!
//! **Why.** At low load the proxy's thread blocks in `epoll_wait` between a request's I/O
//! events, and its CPU goes idle. On a VM an idle vCPU is halted, and its wake-up can be late
//! by hundreds of microseconds (measured on our test VM: guest halt polling is off, so an
//! idle vCPU's next interrupt arrives late). A proxy pays that twice more per request than
//! the direct path: when the client's request arrives and when the upstream's response does.
//! Busy polling removes the second one: while a request waits for the upstream's response
//! head (for at most `N` µs after it was sent), the runtime keeps polling its I/O driver with
//! a zero timeout instead of blocking, so the thread stays on a running CPU and sees the
//! response as soon as it arrives.
//!
//! **How.** One task loops on `tokio::task::yield_now()` while a request waits and the
//! deadline holds. In tokio 1.x both schedulers (current-thread and multi-thread) put a
//! yielded task's waker on a defer list, and when no other task is ready and that list is
//! not empty they poll the I/O and timer drivers with a zero timeout (`park_yield`,
//! `epoll_wait(.., 0)`) instead of parking, then wake the deferred tasks. So the loop is one
//! zero-timeout `epoll_wait` per turn, and every other task still runs between turns.
//!
//! **Bound.** Polling stops as soon as no request waits for the upstream, and at the latest
//! `N` µs after the most recent request was sent: an idle proxy never polls, and a request
//! waiting seconds for a slow upstream costs at most `N` µs of polling, not its whole wait.
//! `N` is at most [`MAX_BUSY_POLL`]. Under load the thread is busy anyway, and the poller
//! only takes one turn between the other tasks. The price is CPU: about the upstream's
//! response time (at most `N` µs) per request at low load (measured by
//! `make bench-gatekeeper-overhead`, `proxy_cpu`).

// The wall clock, std's: the window bounds real CPU spent spinning, and a spinning poller
// never lets the runtime idle, so tokio's paused clock would not move while it spins.
#![allow(clippy::disallowed_types)]

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::Notify;

/// The longest polling window accepted: beyond a few milliseconds busy polling buys nothing
/// a request could notice and burns a CPU.
pub const MAX_BUSY_POLL: Duration = Duration::from_millis(10);

/// The polling state shared by the request handlers and the poller task.
#[derive(Debug)]
pub struct BusyPoll {
    window_ns: u64,
    start: Instant,
    /// Nanoseconds since `start` until which the poller may poll.
    until_ns: AtomicU64,
    /// Requests waiting for the upstream's response head.
    waiting: AtomicUsize,
    /// The poller task is in its polling loop (so a new wait need not wake it).
    polling: AtomicBool,
    wake: Notify,
}

/// One request waiting for the upstream; dropping it ends the wait (response head, error,
/// timeout or the client gone).
#[must_use = "the wait ends when the guard is dropped"]
pub struct UpstreamWait<'a>(&'a BusyPoll);

impl Drop for UpstreamWait<'_> {
    fn drop(&mut self) {
        self.0.waiting.fetch_sub(1, SeqCst);
    }
}

impl BusyPoll {
    /// `window`: the longest polling after a request is sent, at most [`MAX_BUSY_POLL`].
    pub fn new(window: Duration) -> Result<Arc<Self>, crate::GatekeeperError> {
        if window.is_zero() || window > MAX_BUSY_POLL {
            return Err(crate::GatekeeperError::Config(format!(
                "busy-poll-us: need 1 ..= {} (got {})",
                MAX_BUSY_POLL.as_micros(),
                window.as_micros()
            )));
        }
        Ok(Arc::new(BusyPoll {
            window_ns: window.as_nanos() as u64,
            start: Instant::now(),
            until_ns: AtomicU64::new(0),
            waiting: AtomicUsize::new(0),
            polling: AtomicBool::new(false),
            wake: Notify::new(),
        }))
    }

    fn now_ns(&self) -> u64 {
        self.start.elapsed().as_nanos() as u64
    }

    /// A request is about to be sent upstream: poll until its response head arrives (the
    /// guard is dropped), for at most the window.
    pub fn upstream_wait(&self) -> UpstreamWait<'_> {
        self.waiting.fetch_add(1, SeqCst);
        self.until_ns.fetch_max(self.now_ns() + self.window_ns, SeqCst);
        // Written before `polling` is read, and the poller clears `polling` before it
        // re-checks (all SeqCst): either it sees this wait or we see it stopped and wake it.
        if !self.polling.load(SeqCst) {
            self.wake.notify_one();
        }
        UpstreamWait(self)
    }

    fn should_poll(&self) -> bool {
        self.waiting.load(SeqCst) > 0 && self.now_ns() < self.until_ns.load(SeqCst)
    }

    /// Whether the poller is polling now (tests).
    pub fn is_polling(&self) -> bool {
        self.polling.load(SeqCst)
    }

    /// The poller task: runs until the runtime shuts down or the task is aborted.
    pub async fn run(self: Arc<Self>) {
        loop {
            self.wake.notified().await;
            loop {
                self.polling.store(true, SeqCst);
                while self.should_poll() {
                    tokio::task::yield_now().await;
                }
                self.polling.store(false, SeqCst);
                if !self.should_poll() {
                    break;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_is_bounded() {
        assert!(BusyPoll::new(Duration::ZERO).is_err());
        assert!(BusyPoll::new(MAX_BUSY_POLL + Duration::from_micros(1)).is_err());
        assert!(BusyPoll::new(Duration::from_micros(200)).is_ok());
    }

    /// The poller polls while a request waits, lets other tasks (here: timers) run
    /// meanwhile, stops when the wait ends, and stops by itself at the window even if the
    /// wait goes on (no CPU spent on a slow upstream or while idle).
    #[tokio::test(flavor = "current_thread")]
    async fn polls_while_a_request_waits_within_the_window() {
        let bp = BusyPoll::new(Duration::from_millis(8)).unwrap();
        let poller = tokio::spawn(bp.clone().run());
        tokio::task::yield_now().await;
        assert!(!bp.is_polling(), "idle: no polling before any request");

        let wait = bp.upstream_wait();
        // A timer on the same thread still fires while the poller spins (it polls the driver).
        tokio::time::sleep(Duration::from_millis(2)).await;
        assert!(bp.is_polling(), "polling while a request waits");
        drop(wait);
        tokio::time::sleep(Duration::from_millis(1)).await;
        assert!(!bp.is_polling(), "the response head arrived: polling stopped");

        let t0 = Instant::now();
        let _slow = bp.upstream_wait();
        tokio::task::yield_now().await;
        assert!(bp.is_polling());
        while bp.is_polling() {
            assert!(t0.elapsed() < Duration::from_secs(2), "the poller never stopped");
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let polled = t0.elapsed();
        assert!(polled >= Duration::from_millis(7), "stopped before the window: {polled:?}");
        poller.abort();
    }
}
