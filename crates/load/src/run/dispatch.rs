//! The dispatcher of the open and partly-open models: streams the trace into
//! timed batches ([`Dispatcher`]), waits until each is due (sleeping here;
//! spinning in [`super::spin`]) and hands it to a worker, or refuses it at the
//! in-flight limit ([`Handover`]).

use super::collect::hist;
use super::config::{Config, Source};
use super::summary::Spread;
use super::sys::{precise_timers, sleep_until, stopped};
use super::worker::{secs, Ctx, Job, Msg, WorkerParams};
use super::{spin, LoadError, SpinStats};
use crate::record::{RequestOutcome, RequestRecord};
use crate::scale::TraceTotals;
use crate::schedule::LoadSchedule;
use crate::source_addrs::SourceAddrs;
use crate::trace::{self, SkipBad, SkipCount, TraceFormat, TraceIter, TraceRecord};
use hdrhistogram::Histogram;
use std::path::Path;
use std::rc::Rc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

/// `failures_by_reason` key of the requests refused at the in-flight limit.
pub(super) const NOT_SENT_REASON: &str = "not sent: in-flight limit";

/// Opens a trace, skipping (and counting) malformed records if asked to.
pub(super) fn open_trace(
    path: &Path,
    format: Option<TraceFormat>,
    skip_bad: bool,
) -> Result<(TraceIter, SkipCount), LoadError> {
    let it = trace::open(path, format)?;
    Ok(if skip_bad {
        let (it, count) = SkipBad::new(it);
        (Box::new(it), count)
    } else {
        (it, SkipCount::default())
    })
}

/// First pass over a trace for scaling: counts, bytes, first and last time.
pub fn trace_totals(path: &Path, format: Option<TraceFormat>, skip_bad: bool) -> Result<TraceTotals, LoadError> {
    let (it, _) = open_trace(path, format, skip_bad)?;
    let mut t = TraceTotals::default();
    for r in it {
        let r = r?;
        if t.requests == 0 {
            t.first_time_s = r.time_s;
        }
        t.requests += 1;
        t.bytes += u128::from(r.size_bytes);
        t.last_time_s = r.time_s;
    }
    Ok(t)
}

/// Streams the trace into timed batches (one request, or a K-request session).
pub(super) struct Dispatcher {
    it: TraceIter,
    k: usize,
    speed: f64,
    /// `--load-schedule`: warps the scaled offsets (see [`crate::schedule`]).
    schedule: Option<LoadSchedule>,
    duration_s: Option<f64>,
    run_start: Instant,
    first_time_s: Option<f64>,
    /// The last batch's offset before the schedule's warp, and after it.
    last_base_s: f64,
    last_offset_s: f64,
    out_of_order: u64,
    clients: u32,
    next_id: u64,
    sessions: u64,
    /// Checked for each batch's client before it is due: a client without a
    /// source address stops the run before its request is sent.
    source_addrs: Arc<SourceAddrs>,
}

/// First id, the records, the client, and when the batch is due.
pub(super) type Batch = (u64, Vec<TraceRecord>, u32, Instant);

impl Dispatcher {
    pub(super) fn next_batch(&mut self) -> Result<Option<Batch>, LoadError> {
        let mut recs = Vec::with_capacity(self.k);
        while recs.len() < self.k {
            match self.it.next() {
                Some(r) => recs.push(r?),
                None => break,
            }
        }
        let Some(first) = recs.first() else { return Ok(None) };
        let t0 = *self.first_time_s.get_or_insert(first.time_s);
        let mut base_s = (first.time_s - t0) / self.speed;
        if base_s < self.last_base_s {
            // Out-of-order trace: send it as soon as possible, count it.
            self.out_of_order += 1;
            base_s = self.last_base_s;
        }
        // The warp is non-decreasing (also in floating point), so the order
        // holds after it; `max` only states it.
        let offset_s = match &self.schedule {
            Some(s) => s.wall_time_s(base_s).max(self.last_offset_s),
            None => base_s,
        };
        if self.duration_s.is_some_and(|d| offset_s >= d) {
            return Ok(None);
        }
        self.last_base_s = base_s;
        self.last_offset_s = offset_s;
        let first_id = self.next_id;
        self.next_id += recs.len() as u64;
        let client = first.client.unwrap_or((self.sessions % u64::from(self.clients)) as u32);
        self.source_addrs.for_client(client)?;
        self.sessions += 1;
        Ok(Some((first_id, recs, client, self.run_start + Duration::from_secs_f64(offset_s))))
    }
}

/// Hands due batches to workers, or refuses them at the in-flight limit.
pub(super) struct Handover<'a> {
    tx: mpsc::SyncSender<Msg>,
    in_flight: Arc<AtomicUsize>,
    max_in_flight: usize,
    pub(super) run_start: Instant,
    k: usize,
    senders: &'a [tokio::sync::mpsc::UnboundedSender<Job>],
    /// Per wake-up of the dispatcher: µs after its target time.
    pub(super) wake_error: Histogram<u64>,
}

impl Handover<'_> {
    /// Starts `batch` now: as a task on this thread if `local` is given and the
    /// client's worker is 0, else through the worker's channel.
    pub(super) fn hand_over(&mut self, (first_id, recs, client, scheduled): Batch, local: Option<&Rc<Ctx>>) {
        if self.in_flight.load(Ordering::Acquire) >= self.max_in_flight {
            self.refuse(first_id, recs, client, scheduled);
            return;
        }
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        let w = client as usize % self.senders.len();
        let dispatched = Instant::now();
        let job = if self.k == 1 {
            let rec = recs.into_iter().next().expect("one record");
            Job::Single { id: first_id, rec, client, scheduled, dispatched }
        } else {
            Job::Session { first_id, recs, client, scheduled, dispatched }
        };
        match local {
            Some(ctx) if w == 0 => {
                tokio::task::spawn_local(ctx.clone().run_job(job));
            }
            _ => {
                let _ = self.senders[w].send(job);
            }
        }
    }

    /// A `failed` row with 0 attempts for each request of a batch not sent
    /// because the in-flight limit was reached.
    fn refuse(&self, first_id: u64, recs: Vec<TraceRecord>, client: u32, scheduled: Instant) {
        let now = Instant::now();
        for (i, r) in recs.into_iter().enumerate() {
            let _ = self.tx.send(Msg {
                rec: RequestRecord {
                    id: first_id + i as u64,
                    client,
                    path: r.path,
                    size_bytes: r.size_bytes,
                    bytes_received: 0,
                    status: None,
                    outcome: RequestOutcome::Failed,
                    attempts: 0,
                    scheduled_s: secs(self.run_start, scheduled),
                    start_s: secs(self.run_start, now),
                    connected_s: None,
                    first_byte_s: None,
                    done_s: None,
                },
                lateness_us: None,
                timing: None,
                wire_bytes: 0,
                fail_reason: Some(NOT_SENT_REASON),
            });
        }
    }
}

/// What dispatching a trace left for the summary.
#[derive(Default)]
pub(super) struct Dispatched {
    pub(super) skipped: SkipCount,
    pub(super) out_of_order: u64,
    /// The trace could not be read to its end: the run failed part-way.
    pub(super) error: Option<LoadError>,
    pub(super) wake_error: Spread,
    pub(super) spin: Option<SpinStats>,
}

/// The open and partly-open models: streams the trace to the workers on this
/// thread through `senders`, sleeping between batches, or (`spin` set)
/// spinning inside worker 0's runtime, which `params` builds. Fails only when
/// the trace cannot be opened; an error further on is in
/// [`Dispatched::error`].
pub(super) fn dispatch_trace(
    cfg: &Config,
    speed: f64,
    senders: &[tokio::sync::mpsc::UnboundedSender<Job>],
    params: &WorkerParams,
    spin: Option<Duration>,
) -> Result<Dispatched, LoadError> {
    let run_start = params.run_start;
    let Source::Trace { path, format, skip_bad } = &cfg.source else { unreachable!("checked above") };
    let (it, count) = open_trace(path, *format, *skip_bad)?;
    let mut out = Dispatched { skipped: count, ..Dispatched::default() };
    precise_timers();
    let k = cfg.batch_len();
    let mut d = Dispatcher {
        it,
        k,
        speed,
        schedule: cfg.load_schedule.clone(),
        duration_s: cfg.duration_s,
        run_start,
        first_time_s: None,
        last_base_s: 0.0,
        last_offset_s: 0.0,
        out_of_order: 0,
        clients: cfg.clients,
        next_id: 0,
        sessions: 0,
        source_addrs: params.source_addrs.clone(),
    };
    let mut hand = Handover {
        tx: params.tx.clone(),
        in_flight: params.in_flight.clone(),
        max_in_flight: cfg.max_in_flight,
        run_start,
        k,
        senders,
        wake_error: hist(),
    };
    let res = match spin {
        None => dispatch_sleeping(&mut d, &mut hand, cfg.batch_window_us),
        Some(spin) => {
            let batch_window = Duration::from_micros(cfg.batch_window_us);
            let (res, stats) = spin::dispatch_on_worker0(&mut d, &mut hand, params, spin, cfg.realtime, batch_window);
            out.spin = Some(stats);
            res
        }
    };
    out.error = res.err();
    out.out_of_order = d.out_of_order;
    out.wake_error = Spread::of(&hand.wake_error);
    Ok(out)
}

/// The dispatcher on its own thread: sleeps (nanosleep) until each batch is
/// due, waking at most once per `batch_window_us`.
fn dispatch_sleeping(d: &mut Dispatcher, hand: &mut Handover, batch_window_us: u64) -> Result<(), LoadError> {
    let mut last_wake = hand.run_start;
    while let Some(batch) = d.next_batch()? {
        let scheduled = batch.3;
        // Wake at most once per batch window: at high rates each wake-up sends
        // everything due, instead of one timer and context switch per request
        // (expensive, especially in a VM).
        let wake = scheduled.max(last_wake + Duration::from_micros(batch_window_us));
        if Instant::now() < scheduled {
            if !sleep_until(wake) {
                break;
            }
            last_wake = Instant::now();
            hand.wake_error.saturating_record(last_wake.saturating_duration_since(wake).as_micros() as u64);
        } else if stopped() {
            break;
        }
        hand.hand_over(batch, None);
    }
    Ok(())
}
