//! What the run asks of the operating system: the stop flag set by
//! SIGINT/SIGTERM, scheduling policy (SCHED_FIFO for `--realtime`), timer
//! slack, the open-file limit and a thread's CPU time.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Set by SIGINT/SIGTERM once [`stop_on_signals`] is installed: stop starting
/// requests, let those in flight finish (or time out), write the outputs.
static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_stop_signal(_: libc::c_int) {
    STOP.store(true, Ordering::Relaxed);
}

/// Makes SIGINT and SIGTERM end a run early but cleanly (outputs written,
/// summary marked `interrupted` and invalid). For the CLI.
pub fn stop_on_signals() {
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
        unsafe {
            libc::signal(sig, on_stop_signal as *const () as libc::sighandler_t);
        }
    }
}

pub(super) fn stopped() -> bool {
    STOP.load(Ordering::Relaxed)
}

/// Sleeps until `deadline` in slices of at most 100 ms, returning early (false)
/// when a stop signal arrives.
pub(super) fn sleep_until(deadline: Instant) -> bool {
    loop {
        if stopped() {
            return false;
        }
        let now = Instant::now();
        if now >= deadline {
            return true;
        }
        std::thread::sleep((deadline - now).min(Duration::from_millis(100)));
    }
}

/// SCHED_FIFO priority used by `realtime`.
const REALTIME_PRIORITY: libc::c_int = 10;

/// Sets the calling thread's scheduling policy: SCHED_FIFO when `realtime`,
/// else back to SCHED_OTHER.
pub(super) fn set_realtime(realtime: bool) -> std::io::Result<()> {
    let (policy, prio) = if realtime { (libc::SCHED_FIFO, REALTIME_PRIORITY) } else { (libc::SCHED_OTHER, 0) };
    let param = libc::sched_param { sched_priority: prio };
    // SAFETY: pid 0 is the calling thread; `param` is a valid local.
    if unsafe { libc::sched_setscheduler(0, policy, &param) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Puts the calling thread back to normal scheduling when dropped, however
/// the run ends (armed only when the run asked for SCHED_FIFO).
pub(super) struct NormalAgain(pub(super) bool);

impl Drop for NormalAgain {
    fn drop(&mut self) {
        if self.0 {
            let _ = set_realtime(false);
        }
    }
}

/// Lowers the calling thread's timer slack so sleeps end on time (Linux).
pub(super) fn precise_timers() {
    #[cfg(target_os = "linux")]
    // SAFETY: prctl(PR_SET_TIMERSLACK) only changes this thread's slack.
    unsafe {
        libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0);
    }
}

/// Raises the open-file limit to the hard limit; returns the soft limit now in force.
pub(super) fn raise_nofile() -> u64 {
    let mut r = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: plain getrlimit/setrlimit on a local struct.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) != 0 {
            return 1024;
        }
        if r.rlim_cur < r.rlim_max {
            let want = libc::rlimit { rlim_cur: r.rlim_max, rlim_max: r.rlim_max };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &want) == 0 {
                r.rlim_cur = r.rlim_max;
            }
        }
    }
    r.rlim_cur
}

/// CPU time used by the calling thread.
pub(super) fn thread_cpu_time() -> Duration {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: writes the calling thread's CPU clock into a local timespec.
    if unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) } != 0 {
        return Duration::ZERO;
    }
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}
