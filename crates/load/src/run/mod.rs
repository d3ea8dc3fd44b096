//! The load generator (`shortfirst load`): open, partly-open and closed
//! models over real TCP connections, with one `requests.csv` row per request,
//! the body bytes received per 100 ms (`received.csv`, [`crate::received`]),
//! a `summary.json` and an HDR interval log of response times.
//!
//! Threads:
//! - the *dispatcher* (the calling thread) streams the trace and, for the open
//!   and partly-open models, sleeps on the monotonic clock until each
//!   request's scheduled time, then hands it to a worker. Its timer slack is
//!   set to 1 ns so `nanosleep` wakes on time, and it wakes at most once per
//!   batch window ([`Config::batch_window_us`], 100 µs by default), sending
//!   everything then due;
//! - `threads` *workers*, each a single-threaded tokio runtime, run the
//!   requests (a task per request, session or closed-model user);
//! - the *collector* writes rows, keeps the histograms, writes the interval
//!   log and the progress line.
//!
//! Row order: `requests.csv` is written in completion order (the order rows
//! reach the collector: when a request ends, or is refused), not in trace
//! order, so the log streams without a reorder buffer. `id` is the position in
//! the trace (sessions: consecutive ids); sort by it for trace order.
//!
//! Timing is free of coordinated omission: a request's `scheduled_s` is fixed
//! by the trace (or by the user's think time), never by when the previous one
//! finished, and response times are reported from it as well as from the
//! actual start. A load schedule ([`Config::load_schedule`]) keeps that: it
//! maps each scaled trace offset to a send time through a fixed,
//! non-decreasing warp ([`crate::schedule`]), and the collector tags each row
//! with the phase in force at its scheduled time. The generator measures its own lateness (actual start −
//! scheduled) and marks the run invalid when lateness p99 exceeds
//! [`LATENESS_P99_LIMIT_MS`], and also when nothing succeeded or too many
//! requests failed without a response (see [`Summary::valid`]).
//!
//! Limits: at most `max_in_flight` requests (open, partly-open: sessions) are
//! outstanding; a request due when the limit is reached is not sent, gets a
//! `failed` row with 0 attempts, is counted in `not_sent_in_flight_limit`, and
//! the run is marked invalid. The trace is read one record ahead; rows reach
//! the collector through a queue of [`COLLECT_QUEUE`] rows (workers wait when
//! it is full, which only happens when the disk cannot keep up). Memory is
//! therefore bounded by `max_in_flight` × ([`crate::http::READ_BUF_BYTES`] +
//! a few hundred bytes), whatever the trace length.

//!
//! Source addresses: with [`run_with`], each connection is bound before
//! connecting to the address its client id maps to
//! ([`crate::source_addrs`]); idle connections are pooled per client, so a
//! kept-alive connection never changes source address.
//!
//! Modules: `config` (what a run is asked), `dispatch` (the trace into
//! timed batches, handed to workers), `spin` (the opt-in spinning
//! dispatcher), `worker` (the runtimes that perform requests), `closed` (the
//! closed model's users), `collect` (the collector thread), `summary`
//! (`summary.json` and validity), `sys` (signals, scheduling, limits).

mod closed;
mod collect;
mod config;
mod dispatch;
mod spin;
pub(crate) mod summary;
mod sys;
mod worker;

pub use config::{Config, Model, Source};
pub use dispatch::trace_totals;
pub use spin::{SpinStats, MAX_SPIN_US};
pub use summary::{
    write_json_atomic, Latencies, LatenessBreakdown, Spread, Summary, LATENESS_P99_LIMIT_MS, MAX_FAILED_SHARE,
};
pub use sys::stop_on_signals;

use crate::received::{ReceivedBytes, ReceivedError};
use crate::record::{RecordError, RecordWriter};
use crate::session::SessionError;
use crate::source_addrs::{SourceAddrs, SourceAddrsError};
use crate::trace::TraceError;
use closed::ClosedShared;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::path::PathBuf;
use std::sync::atomic::AtomicUsize;
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};
use worker::{Job, Msg, WorkerParams};

/// Rows queued between workers and the collector.
pub const COLLECT_QUEUE: usize = 65_536;
/// Default of [`Config::batch_window_us`].
pub const DEFAULT_BATCH_WINDOW_US: u64 = 100;
/// Largest batch window accepted: well under the lateness limit.
pub const MAX_BATCH_WINDOW_US: u64 = 2_000;
// Idle kept-alive connections (`--persistent K`): a connection goes back to
// its client's idle list after each request until it has carried K, whatever
// the backlog, so that K is what the server sees. A client has as many idle
// connections as it had requests in flight at once; a worker keeps at most
// min(max_in_flight, open-file limit − max_in_flight − FILES_BESIDES_CONNECTIONS)
// / threads in total, and beyond that closes the connection it just used.
/// Open files reserved for everything but connections (outputs, trace, runtime).
const FILES_BESIDES_CONNECTIONS: u64 = 64;
/// Longest partly-open session accepted (requests per session).
pub const MAX_SESSION_REQUESTS: u32 = 10_000;

/// A run could not be carried out.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error(transparent)]
    Trace(#[from] TraceError),
    #[error(transparent)]
    Record(#[from] RecordError),
    #[error(transparent)]
    Session(#[from] SessionError),
    #[error("{}: {source}", path.display())]
    Io { path: PathBuf, source: std::io::Error },
    #[error("{0}")]
    Config(String),
    #[error(transparent)]
    SourceAddrs(#[from] SourceAddrsError),
    #[error(transparent)]
    Received(#[from] ReceivedError),
}

/// Runs the load and writes `requests.csv`, `received.csv`
/// ([`crate::received`]), `summary.json` and `response-times.hlog` into
/// `cfg.out_dir`; the kernel chooses each connection's source address.
pub fn run(cfg: Config) -> Result<Summary, LoadError> {
    run_with(cfg, SourceAddrs::Any)
}

/// As [`run`], each connection bound to its client's address in
/// `source_addrs` (`--source-addrs`). Every address is checked (family,
/// one probe bind) before anything starts. The run's threads start in order
/// (collector, workers, then this thread dispatches) and end in reverse.
pub fn run_with(cfg: Config, source_addrs: SourceAddrs) -> Result<Summary, LoadError> {
    cfg.validate()?;
    check_source_addrs(&cfg, &source_addrs)?;
    if cfg.realtime {
        enter_realtime()?;
    }
    // Back to normal scheduling however the run ends.
    let _normal_again = sys::NormalAgain(cfg.realtime);
    let idle_limit = idle_limit(&cfg, sys::raise_nofile())?;
    std::fs::create_dir_all(&cfg.out_dir).map_err(|source| LoadError::Io { path: cfg.out_dir.clone(), source })?;
    let speed = speed(&cfg)?;

    let writer = requests_writer(&cfg)?;
    let (tx, rx) = mpsc::sync_channel::<Msg>(COLLECT_QUEUE);
    let in_flight = Arc::new(AtomicUsize::new(0));
    let started_unix_s = unix_now_s();
    // A short lead so the threads below are up before the first request is due.
    let run_start = Instant::now() + Duration::from_millis(20);
    let collector = collect::spawn_collector(&cfg, rx, writer, run_start, in_flight.clone())?;
    let closed = ClosedShared::for_run(&cfg, run_start)?;
    let received = Arc::new(ReceivedBytes::new(run_start));

    let spin = spin_for(&cfg);
    let params = WorkerParams {
        target: cfg.target.clone(),
        run_start,
        tx: tx.clone(),
        in_flight,
        persistent: cfg.persistent,
        abort_after: cfg.abort_after_s.map(Duration::from_secs_f64),
        timeout: Duration::from_secs_f64(cfg.timeout_s),
        retries: cfg.retries,
        seed: cfg.seed,
        closed: closed.clone(),
        idle_limit,
        source_addrs: Arc::new(source_addrs),
        received: received.clone(),
    };
    let (senders, workers) = spawn_workers(&cfg, &params, spin.is_some())?;
    let mut dispatched = dispatch(&cfg, speed, &senders, &params, spin)?;
    drop(senders);
    // The workers' parameters hold a sender to the collector too.
    drop(params);
    for h in workers {
        let _ = h.join();
    }
    drop(tx);
    let collected = collector.join().map_err(|_| LoadError::Config("collector thread panicked".into()))??;
    let run_end = Instant::now();
    let trace_error = closed.as_ref().and_then(|c| c.trace_error.lock().ok().and_then(|mut g| g.take()));
    if let Some(e) = dispatched.error.take().or(trace_error.map(LoadError::from)) {
        remove_partial_outputs(&cfg);
        return Err(e);
    }
    received.write_csv(&cfg.out_dir.join("received.csv"), run_end)?;
    let summary = summary::summarize(&cfg, collected, speed, started_unix_s, dispatched);
    write_json_atomic(&cfg.out_dir.join("summary.json"), &summary)?;
    Ok(summary)
}

/// Checks `source_addrs` against the target's address family and, for the
/// closed model (whose clients, the users, are all known now), every
/// client's address.
fn check_source_addrs(cfg: &Config, source_addrs: &SourceAddrs) -> Result<(), LoadError> {
    source_addrs.check(cfg.target.addr)?;
    if let Model::Closed { users, .. } = cfg.model {
        for u in 0..users {
            source_addrs.for_client(u)?;
        }
    }
    Ok(())
}

/// Puts the calling thread under SCHED_FIFO (`--realtime`).
fn enter_realtime() -> Result<(), LoadError> {
    sys::set_realtime(true)
        .map_err(|e| LoadError::Config(format!("--realtime: cannot use SCHED_FIFO ({e}); needs root or CAP_SYS_NICE")))
}

/// The wall-clock time, in seconds since the Unix epoch (0 before it).
fn unix_now_s() -> f64 {
    SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0)
}

/// The spinning dispatcher's busy-wait (`--spin-us`; open and partly-open
/// models only). With it, worker 0 runs on the calling thread and the
/// dispatcher runs inside it (see `spin`).
fn spin_for(cfg: &Config) -> Option<Duration> {
    (cfg.spin_us > 0 && matches!(cfg.model, Model::Open | Model::PartlyOpen { .. }))
        .then(|| Duration::from_micros(cfg.spin_us))
}

/// `requests.csv`, with the phase columns when the run follows a load schedule.
fn requests_writer(cfg: &Config) -> Result<RecordWriter, LoadError> {
    let requests_csv = cfg.out_dir.join("requests.csv");
    Ok(match cfg.load_schedule {
        Some(_) => RecordWriter::create_with_phase_columns(&requests_csv)?,
        None => RecordWriter::create(&requests_csv)?,
    })
}

/// Hands the workers their jobs: the closed model's users all at once, the
/// open and partly-open models' requests on the trace's schedule.
fn dispatch(
    cfg: &Config,
    speed: f64,
    senders: &[JobSender],
    params: &WorkerParams,
    spin: Option<Duration>,
) -> Result<dispatch::Dispatched, LoadError> {
    match cfg.model {
        Model::Closed { users, .. } => {
            for u in 0..users {
                let _ = senders[u as usize % cfg.threads].send(Job::User { user: u });
            }
            Ok(dispatch::Dispatched::default())
        }
        Model::Open | Model::PartlyOpen { .. } => dispatch::dispatch_trace(cfg, speed, senders, params, spin),
    }
}

/// The run stopped part-way: leaves no outputs that look complete.
fn remove_partial_outputs(cfg: &Config) {
    for f in ["requests.csv", "received.csv", "response-times.hlog"] {
        let _ = std::fs::remove_file(cfg.out_dir.join(f));
    }
}

/// Idle connections each worker may keep, given the open-file limit
/// `nofile`; refuses a `max_in_flight` the limit cannot hold.
fn idle_limit(cfg: &Config, nofile: u64) -> Result<usize, LoadError> {
    // In flight, plus (keep-alive) at least one idle connection per worker.
    let min_idle = if cfg.persistent.is_some() { cfg.threads as u64 } else { 0 };
    let needed = cfg.max_in_flight as u64 + min_idle + FILES_BESIDES_CONNECTIONS;
    if needed > nofile {
        return Err(LoadError::Config(format!(
            "--max-in-flight {} needs {needed} open files, more than the limit {nofile} allows; lower it or raise \
             `ulimit -n`",
            cfg.max_in_flight,
        )));
    }
    // Idle connections get what the open-file limit leaves, up to one per
    // request that may be in flight.
    let idle_total = (nofile - cfg.max_in_flight as u64 - FILES_BESIDES_CONNECTIONS).min(cfg.max_in_flight as u64);
    Ok((idle_total as usize / cfg.threads).max(1))
}

/// The factor trace times are divided by; scaling needs a first pass over
/// the trace (open and partly-open models only).
fn speed(cfg: &Config) -> Result<f64, LoadError> {
    Ok(match (&cfg.source, cfg.model) {
        (Source::Trace { path, format, skip_bad }, Model::Open | Model::PartlyOpen { .. }) => {
            let totals = if cfg.scaling.needs_totals() { Some(trace_totals(path, *format, *skip_bad)?) } else { None };
            cfg.scaling.speed(totals.as_ref()).map_err(LoadError::Config)?
        }
        _ => 1.0,
    })
}

/// Where the dispatcher sends one worker its jobs.
type JobSender = tokio::sync::mpsc::UnboundedSender<Job>;

/// Starts the worker threads, each on its own job channel; with `spin`,
/// worker 0 is the calling thread (the dispatcher spawns its jobs directly),
/// so it gets a channel but no thread.
fn spawn_workers(
    cfg: &Config,
    params: &WorkerParams,
    spin: bool,
) -> Result<(Vec<JobSender>, Vec<JoinHandle<()>>), LoadError> {
    let mut senders = Vec::new();
    let mut workers = Vec::new();
    for w in 0..cfg.threads {
        let (jtx, jrx) = tokio::sync::mpsc::unbounded_channel::<Job>();
        senders.push(jtx);
        if w == 0 && spin {
            // Worker 0 is this thread; the dispatcher spawns its jobs directly.
            drop(jrx);
            continue;
        }
        let p = params.clone();
        let realtime = cfg.realtime;
        let h = std::thread::Builder::new()
            .name(format!("load-worker-{w}"))
            .spawn(move || {
                sys::precise_timers();
                if realtime {
                    // Allowed: the dispatcher thread just got the same policy.
                    let _ = sys::set_realtime(true);
                }
                let (rt, local, ctx) = p.build();
                local.block_on(&rt, worker::receive_jobs(ctx, jrx));
                rt.block_on(local);
            })
            .map_err(|source| LoadError::Io { path: "worker thread".into(), source })?;
        workers.push(h);
    }
    Ok((senders, workers))
}

/// A reproducible per-purpose RNG (exposed for callers that add randomness).
pub fn rng_for(seed: u64, stream: u64) -> impl Rng {
    let mut r = ChaCha8Rng::seed_from_u64(seed);
    r.set_stream(stream);
    r
}
