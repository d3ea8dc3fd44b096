//! The spinning dispatcher (`--spin-us`, opt-in): the dispatcher runs inside
//! worker 0's runtime and busy-waits the last `--spin-us` before each batch is
//! due instead of sleeping, so neither a wake-up from an idle CPU nor a
//! hand-off to a sleeping worker is on a due request's path. It stops
//! spinning while other tasks want its CPU ([`contention`]) and sleeps on a
//! nanosecond timer ([`crate::timerfd`]) for the rest of longer waits.

mod contention;
#[cfg(test)]
mod tests;

use super::dispatch::{Dispatcher, Handover};
use super::sys::{set_realtime, stopped, thread_cpu_time};
use super::worker::{Ctx, WorkerParams};
use super::LoadError;
use crate::timerfd::TimerFd;
use contention::Contention;
use std::rc::Rc;
use std::time::{Duration, Instant};

/// Longest accepted `--spin-us`.
pub const MAX_SPIN_US: u64 = 5_000;

/// Longest single timer sleep of [`wait_spinning`]: how late a stop signal
/// can be noticed during a long wait.
const STOP_CHECK: Duration = Duration::from_millis(100);

/// How the spinning dispatcher (`--spin-us`) spent its waits (`summary.json`
/// `spin`).
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct SpinStats {
    /// Waits for a batch that was not yet due.
    pub waits: u64,
    /// Of those, the ones longer than `--spin-us`: they slept on the timer
    /// until `--spin-us` before the batch was due (the others never armed it).
    pub timer_sleeps: u64,
    /// Of the waits, those that slept until the batch was due without
    /// spinning because other tasks wanted this CPU (see the contention
    /// judgement).
    pub contended_waits: u64,
    /// Under `--realtime`: switches between SCHED_FIFO (contended, sleeping)
    /// and SCHED_OTHER (spinning).
    pub policy_switches: u64,
    /// Time spent busy-polling for due batches, seconds: at most
    /// `waits` × `--spin-us`.
    pub spin_s: f64,
    /// CPU time of the thread that dispatched and ran worker 0's requests,
    /// seconds (its requests' work included).
    pub thread_cpu_s: f64,
    /// Wall time of that thread's dispatching, seconds.
    pub wall_s: f64,
}

/// Runs worker 0 on this thread (a runtime built from `params`) with the
/// spinning dispatcher inside it, until the trace ends; then lets the
/// requests still running on this thread finish. Returns the dispatcher's
/// result and how it waited.
pub(in crate::run) fn dispatch_on_worker0(
    d: &mut Dispatcher,
    hand: &mut Handover<'_>,
    params: &WorkerParams,
    spin: Duration,
    realtime: bool,
    batch_window: Duration,
) -> (Result<(), LoadError>, SpinStats) {
    let (rt, local, ctx) = params.clone().build();
    let mut stats = SpinStats::default();
    let (cpu0, wall0) = (thread_cpu_time(), Instant::now());
    let res = local.block_on(&rt, dispatch_spinning(d, hand, &ctx, spin, realtime, batch_window, &mut stats));
    stats.thread_cpu_s = thread_cpu_time().saturating_sub(cpu0).as_secs_f64();
    stats.wall_s = wall0.elapsed().as_secs_f64();
    // The requests still running on this thread end here.
    drop(ctx);
    rt.block_on(local);
    (res, stats)
}

/// The dispatcher inside worker 0's runtime (`--spin-us`): waits for each
/// batch with [`wait_spinning`] (a timer only for waits longer than `spin`,
/// busy-polling the runtime for the rest; sleeping instead while other tasks
/// want its CPU, see [`Contention`]) and starts worker 0's requests
/// itself. Neither this thread's wake-up from an idle CPU nor a hand-off to a
/// sleeping worker is then on the path of a due request.
async fn dispatch_spinning(
    d: &mut Dispatcher,
    hand: &mut Handover<'_>,
    ctx: &Rc<Ctx>,
    spin: Duration,
    realtime: bool,
    batch_window: Duration,
    stats: &mut SpinStats,
) -> Result<(), LoadError> {
    let timer = TimerFd::new().map_err(|source| LoadError::Io { path: "timerfd".into(), source })?;
    let mut contention = Contention::open();
    // Under --realtime this thread is SCHED_FIFO only while other tasks wait
    // for a CPU (then it sleeps between sends, and a due send must preempt
    // them); while it spins it is SCHED_OTHER. A SCHED_FIFO thread that never
    // sleeps is stopped by the kernel's RT throttling (sched_rt_runtime_us,
    // 950 ms per second) for the rest of each second, even with the CPU
    // otherwise idle (measured: ~50 ms stalls once a second, lateness p99
    // 40-80 ms at 15,000-22,000/s).
    let mut fifo = realtime;
    let mut last_wake = hand.run_start;
    while let Some(batch) = d.next_batch()? {
        let scheduled = batch.3;
        if Instant::now() < scheduled {
            let contended = contention.contended(Instant::now());
            if realtime && fifo != contended && set_realtime(contended).is_ok() {
                fifo = contended;
                stats.policy_switches += 1;
            }
            // Sleeping (contended), wake at most once per batch window, as the
            // sleeping dispatcher does: a wake-up per request at high rates
            // costs CPU the requests need.
            let target = if contended { scheduled.max(last_wake + batch_window) } else { scheduled };
            let due = wait_spinning(&timer, target, spin, contended, &stopped, stats, &mut contention.slept)
                .await
                .map_err(|source| LoadError::Io { path: "timerfd".into(), source })?;
            if !due {
                return Ok(());
            }
            last_wake = Instant::now();
            hand.wake_error.saturating_record(last_wake.saturating_duration_since(target).as_micros() as u64);
        } else if stopped() {
            break;
        }
        hand.hand_over(batch, Some(ctx));
    }
    Ok(())
}

/// Waits until `due` on a thread that runs a tokio runtime, keeping the CPU
/// busy for the last `spin` of the wait: a wait of at most `spin` never arms
/// a timer; a longer one sleeps on `timer` (in slices of at most
/// [`STOP_CHECK`]) until `due - spin`. While busy-waiting it yields to the
/// runtime, which then polls its sockets without blocking, so this thread's
/// requests are served meanwhile, and calls `sched_yield`, so that another
/// thread of the same SCHED_FIFO priority on this CPU (the collector) still
/// runs. Why: on a VM an idle vCPU halts and its next timer interrupt can
/// arrive milliseconds late, so any sleep, however short, can cost that much
/// lateness; `spin` should exceed that wake-up latency. Cost: up to `spin` of
/// a CPU per wait, i.e. min(1, rate × spin) of a core besides the requests'
/// own work. When `contended` (other tasks are waiting for a CPU), it does
/// not spin at all but sleeps until `due`: a thread that never sleeps would
/// starve them, and the kernel then stops it for their sake (measured: the
/// fair server preempts a SCHED_FIFO spinner for ~50 ms once a second),
/// while a CPU with work waiting does not go idle during the sleep anyway.
/// The time it slept on the timer is added to `slept` (so that [`Contention`]
/// can tell the thread's sleep from time other tasks took its CPU).
/// Returns false, as soon as it is noticed, when `stop()` says so.
async fn wait_spinning(
    timer: &TimerFd,
    due: Instant,
    spin: Duration,
    contended: bool,
    stop: &dyn Fn() -> bool,
    stats: &mut SpinStats,
    slept: &mut Duration,
) -> std::io::Result<bool> {
    stats.waits += 1;
    let spin = if contended {
        stats.contended_waits += 1;
        Duration::ZERO
    } else {
        spin
    };
    let spin_from = due.checked_sub(spin).unwrap_or(due);
    let mut armed = false;
    loop {
        if stop() {
            return Ok(false);
        }
        let now = Instant::now();
        if now >= spin_from {
            break;
        }
        if !armed {
            stats.timer_sleeps += 1;
            armed = true;
        }
        timer.sleep((spin_from - now).min(STOP_CHECK)).await?;
        // Includes the runtime's work on other tasks meanwhile (CPU time as
        // well): off-CPU time is then underestimated by that much, never over.
        *slept += now.elapsed();
    }
    let spin_start = Instant::now();
    while Instant::now() < due {
        if stop() {
            return Ok(false);
        }
        // SAFETY: sched_yield takes no arguments and only reschedules.
        unsafe {
            libc::sched_yield();
        }
        tokio::task::yield_now().await;
    }
    stats.spin_s += due.saturating_duration_since(spin_start).as_secs_f64();
    Ok(true)
}
