//! The load generator (`shortfirst load`): open, partly-open and closed
//! models over real TCP connections, with one `requests.csv` row per request,
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
//! actual start. The generator measures its own lateness (actual start −
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

use crate::dist::TimeDist;
use crate::http::{Conn, HttpError, Progress, Target};
use crate::record::{Outcome, RecordError, RecordWriter, RequestRecord};
use crate::scale::{offered_load, Scaling, TraceTotals};
use crate::session::{SessionError, SessionModel};
use crate::trace::{self, SkipBad, SkipCount, TraceError, TraceFormat, TraceIter, TraceRecord};
use hdrhistogram::serialization::interval_log::IntervalLogWriterBuilder;
use hdrhistogram::serialization::V2DeflateSerializer;
use hdrhistogram::Histogram;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, HashMap};
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

/// A run whose lateness p99 exceeds this is marked invalid.
pub const LATENESS_P99_LIMIT_MS: f64 = 5.0;
/// A run in which more than this share of the requests sent failed without a
/// response (connection refused or reset, closed early, malformed response;
/// not timeouts, aborts or HTTP errors, which are measured outcomes) is marked
/// invalid: the response-time statistics cover completed requests only, and
/// once more than 1% of them are missing for reasons other than slowness,
/// even the p99 is not known (all of the missing ones could lie above it).
pub const MAX_FAILED_SHARE: f64 = 0.01;
/// Failure reasons that are the generator's own fault (not the server's):
/// any one of them makes the run invalid, like the in-flight limit.
const GENERATOR_FAILURES: &[&str] = &[NO_LOCAL_PORT];
const NO_LOCAL_PORT: &str = "no local address/port available";
/// `failures_by_reason` key of the requests refused at the in-flight limit.
const NOT_SENT_REASON: &str = "not sent: in-flight limit";
/// Rows queued between workers and the collector.
pub const COLLECT_QUEUE: usize = 65_536;
/// Default of [`Config::batch_window_us`].
pub const DEFAULT_BATCH_WINDOW_US: u64 = 100;
/// Largest batch window accepted: well under the lateness limit.
pub const MAX_BATCH_WINDOW_US: u64 = 2_000;
/// How often the collector looks for new rows when the queue is empty.
const COLLECT_POLL: Duration = Duration::from_millis(2);
// Idle kept-alive connections (`--persistent K`): a connection goes back to
// its client's idle list after each request until it has carried K, whatever
// the backlog, so that K is what the server sees. A client has as many idle
// connections as it had requests in flight at once; a worker keeps at most
// min(max_in_flight, open-file limit − max_in_flight − FILES_BESIDES_CONNECTIONS)
// / threads in total, and beyond that closes the connection it just used.
/// Open files reserved for everything but connections (outputs, trace, runtime).
const FILES_BESIDES_CONNECTIONS: u64 = 64;
/// Read buffers of closed connections kept per worker for reuse
/// (× [`crate::http::READ_BUF_BYTES`] = 4 MiB).
const SPARE_BUFS_PER_WORKER: usize = 256;
/// Longest partly-open session accepted (requests per session).
pub const MAX_SESSION_REQUESTS: u32 = 10_000;
/// Histogram range: 1 µs to 1 hour, 3 significant digits.
const HIST_MAX_US: u64 = 3_600_000_000;

/// How users arrive and behave.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Model {
    /// Each request at its scheduled time, whatever happened before.
    Open,
    /// Sessions of `k` back-to-back requests, sessions arriving at trace times.
    PartlyOpen { k: u32 },
    /// `users` users, each sending its next request a think time after the
    /// previous one completed.
    Closed { users: u32, think: TimeDist },
}

impl std::str::FromStr for Model {
    type Err = String;
    fn from_str(s: &str) -> Result<Model, String> {
        if s == "open" {
            return Ok(Model::Open);
        }
        if let Some(k) = s.strip_prefix("partly-open:") {
            let k: u32 = k.parse().map_err(|_| format!("partly-open:K: K must be a positive integer, got `{k}`"))?;
            if k == 0 || k > MAX_SESSION_REQUESTS {
                return Err(format!("partly-open:K: K must be between 1 and {MAX_SESSION_REQUESTS}"));
            }
            return Ok(Model::PartlyOpen { k });
        }
        if let Some(rest) = s.strip_prefix("closed:") {
            let (n, think) = match rest.split_once(',') {
                Some((n, t)) => {
                    let t = t
                        .strip_prefix("think=")
                        .ok_or_else(|| format!("closed:N,think=DIST: expected think=, got `{t}`"))?;
                    (n, TimeDist::parse(t).map_err(|e| e.to_string())?)
                }
                None => (rest, TimeDist::Const(0.0)),
            };
            let users: u32 = n.parse().map_err(|_| format!("closed:N: N must be a positive integer, got `{n}`"))?;
            if users == 0 {
                return Err("closed:N: N must be ≥ 1".into());
            }
            return Ok(Model::Closed { users, think });
        }
        Err(format!("unknown model `{s}` (expected open, partly-open:K or closed:N[,think=DIST])"))
    }
}

/// Where requests come from.
#[derive(Debug, Clone)]
pub enum Source {
    Trace {
        path: PathBuf,
        format: Option<TraceFormat>,
        skip_bad: bool,
    },
    /// A session model (closed model only).
    Session {
        path: PathBuf,
    },
}

/// Everything a run needs.
#[derive(Debug, Clone)]
pub struct Config {
    pub target: Target,
    pub out_dir: PathBuf,
    pub model: Model,
    pub source: Source,
    pub scaling: Scaling,
    /// For reporting the offered load (required by `Scaling::Load`).
    pub uplink_bits_per_s: Option<f64>,
    /// Stop starting requests this long after the start.
    pub duration_s: Option<f64>,
    /// Up to K requests per connection; None = one connection per request.
    pub persistent: Option<u32>,
    pub abort_after_s: Option<f64>,
    pub retries: u32,
    /// Hard limit on one attempt when no abort time is set.
    pub timeout_s: f64,
    /// Client identities for requests whose trace gives none.
    pub clients: u32,
    pub threads: usize,
    pub max_in_flight: usize,
    pub seed: u64,
    pub progress: bool,
    /// Run the dispatcher and workers under SCHED_FIFO (needs root or
    /// CAP_SYS_NICE), so other processes on a shared machine cannot delay
    /// sends; the kernel's RT throttling still leaves them 5% of each CPU.
    pub realtime: bool,
    /// Shortest interval between two wake-ups of the dispatcher: the
    /// requests due in between are sent together at the next wake-up, up to
    /// this much late (and their lateness says so). Fewer wake-ups per request
    /// at high rates; 0 wakes for every request.
    pub batch_window_us: u64,
    /// Open and partly-open models: never sleep for a wait this short, and
    /// busy-wait the last this many microseconds of longer ones (see
    /// [`wait_spinning`]), on a thread that both dispatches and performs
    /// worker 0's requests; 0 = off. Burns CPU: min(1, rate × spin_us) of a
    /// core besides the requests' work; see `--spin-us`.
    pub spin_us: u64,
    pub command_line: Vec<String>,
}

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
}

/// Response-time statistics in seconds.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Latencies {
    pub mean_s: Option<f64>,
    pub p50_s: Option<f64>,
    pub p90_s: Option<f64>,
    pub p99_s: Option<f64>,
    pub max_s: Option<f64>,
}

/// `summary.json`.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Summary {
    /// Rows in requests.csv (every request due, sent or not).
    pub requests: u64,
    pub sent: u64,
    /// Complete responses (ok + http_error).
    pub completed: u64,
    pub ok: u64,
    pub http_error: u64,
    pub failed: u64,
    pub aborted: u64,
    pub timeout: u64,
    pub not_sent_in_flight_limit: u64,
    /// Attempts beyond the first (user retries).
    pub retries: u64,
    pub failures_by_reason: BTreeMap<String, u64>,
    /// Requested bits/s over the sending span ÷ uplink rate (None without --uplink).
    pub offered_load: Option<f64>,
    pub offered_bits_per_s: Option<f64>,
    pub uplink_bits_per_s: Option<f64>,
    pub requested_bytes: u64,
    pub bytes_received: u64,
    pub wire_bytes_received: u64,
    pub throughput_bytes_per_s: Option<f64>,
    pub achieved_req_per_s: Option<f64>,
    /// Response time of completed requests from the scheduled send (free of
    /// coordinated omission).
    pub mean_response_s: Option<f64>,
    pub p50_response_s: Option<f64>,
    pub p90_response_s: Option<f64>,
    pub p99_response_s: Option<f64>,
    /// The same from the actual first send.
    pub response_from_start: Latencies,
    pub lateness_p50_ms: Option<f64>,
    pub lateness_p99_ms: Option<f64>,
    pub lateness_max_ms: Option<f64>,
    pub lateness_samples: u64,
    /// Where lateness goes (see [`LatenessBreakdown`]).
    pub lateness_breakdown: LatenessBreakdown,
    /// The statistics above describe the server under the load asked for:
    /// generator lateness p99 ≤ [`LATENESS_P99_LIMIT_MS`], no request refused
    /// at the in-flight limit or failed on the generator's side (no local
    /// port), no malformed trace record skipped, not interrupted, at least
    /// one request succeeded (2xx/3xx), and at most [`MAX_FAILED_SHARE`] of
    /// the requests sent failed without a response. Timeouts, aborts and
    /// HTTP errors are measured outcomes and do not make a run invalid.
    pub valid: bool,
    /// Why not, one sentence each.
    pub invalid_reasons: Vec<String>,
    /// Stopped early by SIGINT/SIGTERM.
    pub interrupted: bool,
    pub trace_records_skipped: u64,
    pub trace_records_out_of_order: u64,
    pub speed: f64,
    pub model: String,
    pub target: String,
    pub seed: u64,
    pub command_line: Vec<String>,
    pub started_unix_s: f64,
    pub run_s: f64,
    pub threads: usize,
    pub max_in_flight: usize,
    pub realtime: bool,
    pub batch_window_us: u64,
    pub spin_us: u64,
    /// With `--spin-us`: how the dispatcher waited and what it cost.
    pub spin: Option<SpinStats>,
    /// Commit the binary was built from (`git describe --always --dirty`
    /// at build time; "unknown" outside a git checkout).
    pub git_commit: String,
    pub kernel: String,
    pub cpus: usize,
    pub version: String,
}

/// Percentiles of one component of lateness, in microseconds.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Spread {
    pub samples: u64,
    pub p50_us: Option<u64>,
    pub p99_us: Option<u64>,
    pub max_us: Option<u64>,
}

impl Spread {
    fn of(h: &Histogram<u64>) -> Spread {
        if h.is_empty() {
            return Spread::default();
        }
        Spread {
            samples: h.len(),
            p50_us: Some(h.value_at_quantile(0.5)),
            p99_us: Some(h.value_at_quantile(0.99)),
            max_us: Some(h.max()),
        }
    }
}

/// Where the lateness of open-model (and session-first) requests goes:
/// lateness = `dispatch` + `handoff`; `send` follows the start (it is not
/// lateness, but it delays the request on the wire all the same).
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct LatenessBreakdown {
    /// Scheduled time → the dispatcher hands the request over: the batch
    /// window, the dispatcher's wake-up error and its work for the requests
    /// before it in the same batch.
    pub dispatch: Spread,
    /// Handed over → the worker starts the request (a worker that was asleep
    /// has to be woken and scheduled).
    pub handoff: Spread,
    /// Start → request written to the socket (includes connect for a new
    /// connection).
    pub send: Spread,
    /// Per dispatcher wake-up: how long after its target time the dispatcher
    /// actually resumed (timer and CPU wake-up latency; with `--spin-us`, the
    /// error of the spin's end).
    pub dispatcher_wake_error: Spread,
}

/// Per-request parts of lateness, in microseconds.
#[derive(Debug, Clone, Copy)]
struct Timing {
    dispatch_us: u64,
    handoff_us: u64,
    send_us: Option<u64>,
}

/// Whether a request's lateness counts: not for the back-to-back requests of
/// a session after its first (they are due when the previous one ends);
/// `Dispatched` also breaks it down (open and partly-open models).
#[derive(Debug, Clone, Copy, PartialEq)]
enum Timed {
    No,
    Yes,
    Dispatched(Instant),
}

/// One finished request on its way to the collector.
struct Msg {
    rec: RequestRecord,
    lateness_us: Option<u64>,
    timing: Option<Timing>,
    wire_bytes: u64,
    fail_reason: Option<&'static str>,
}

enum Job {
    Single { id: u64, rec: TraceRecord, client: u32, scheduled: Instant, dispatched: Instant },
    Session { first_id: u64, recs: Vec<TraceRecord>, client: u32, scheduled: Instant, dispatched: Instant },
    User { user: u32 },
}

/// Shared state of the closed model.
struct ClosedShared {
    trace: Option<Mutex<TraceIter>>,
    trace_error: Mutex<Option<TraceError>>,
    session: Option<SessionModel>,
    think: TimeDist,
    next_id: AtomicU64,
    stop_at: Option<Instant>,
    exhausted: AtomicBool,
}

/// Per-worker context.
struct Ctx {
    p: WorkerParams,
    /// Idle connections by client (no empty lists: memory follows the
    /// connections, not the number of clients ever seen).
    pool: RefCell<HashMap<u32, Vec<Conn>>>,
    idle: Cell<usize>,
    /// Read buffers of closed connections, for the next ones (at most
    /// [`SPARE_BUFS_PER_WORKER`]; beyond, a buffer is freed).
    spare_bufs: RefCell<Vec<Box<[u8]>>>,
}

fn secs(run_start: Instant, t: Instant) -> f64 {
    t.saturating_duration_since(run_start).as_secs_f64()
}

fn fail_reason(e: &HttpError) -> &'static str {
    match e {
        HttpError::Io(io) => match io.kind() {
            std::io::ErrorKind::ConnectionRefused => "connection refused",
            std::io::ErrorKind::ConnectionReset => "connection reset",
            std::io::ErrorKind::BrokenPipe => "broken pipe",
            std::io::ErrorKind::AddrNotAvailable => NO_LOCAL_PORT,
            _ => "i/o error",
        },
        HttpError::ClosedBeforeResponse => "closed before response",
        HttpError::ClosedMidResponse => "closed mid-response",
        HttpError::Malformed(_) => "malformed response",
        HttpError::HeadTooLarge => "response head too large",
    }
}

impl Ctx {
    fn send(&self, m: Msg) {
        // The collector only goes away when the run is over.
        let _ = self.p.tx.send(m);
    }

    fn take_idle(&self, client: u32) -> Option<Conn> {
        let mut pool = self.pool.borrow_mut();
        let list = pool.get_mut(&client)?;
        let c = list.pop();
        if list.is_empty() {
            pool.remove(&client);
        }
        if c.is_some() {
            self.idle.set(self.idle.get() - 1);
        }
        c
    }

    fn put_idle(&self, client: u32, conn: Conn) {
        if self.idle.get() >= self.p.idle_limit {
            return self.recycle(conn);
        }
        self.pool.borrow_mut().entry(client).or_default().push(conn);
        self.idle.set(self.idle.get() + 1);
    }

    /// Closes `conn`, keeping its read buffer for the next connection.
    fn recycle(&self, conn: Conn) {
        let mut spare = self.spare_bufs.borrow_mut();
        if spare.len() < SPARE_BUFS_PER_WORKER {
            spare.push(conn.into_buf());
        }
    }

    /// One connection attempt: reuse `idle` if given (falling back to a new
    /// connection if the server had closed it), else connect.
    async fn attempt(
        &self,
        req: &[u8],
        idle: Option<Conn>,
        prog: &mut Progress,
        connected: &mut Option<Instant>,
    ) -> Result<(crate::http::Response, Conn), HttpError> {
        if let Some(mut c) = idle {
            *connected = Some(Instant::now());
            match c.get(req, prog).await {
                Ok(r) => return Ok((r, c)),
                Err(HttpError::ClosedBeforeResponse | HttpError::Io(_)) if prog.wire_bytes == 0 => {
                    *prog = Progress::default();
                    self.recycle(c);
                }
                Err(e) => return Err(e),
            }
        }
        let buf = self.spare_bufs.borrow_mut().pop();
        let mut c = Conn::connect_with(self.p.target.addr, buf).await?;
        *connected = Some(Instant::now());
        let r = c.get(req, prog).await?;
        Ok((r, c))
    }

    /// Performs one request with abort/retry; returns the row and a
    /// connection that may carry another request.
    async fn perform(
        &self,
        id: u64,
        client: u32,
        rec: &TraceRecord,
        scheduled: Instant,
        mut idle: Option<Conn>,
        timed: Timed,
    ) -> Option<Conn> {
        let start = Instant::now();
        let keep_alive = self.p.persistent.is_some();
        let req = self.p.target.request(&rec.path, keep_alive);
        let limit = self.p.abort_after.unwrap_or(self.p.timeout);
        let mut attempts = 0u32;
        let mut wire = 0u64;
        let mut first_sent = None;
        let (outcome, prog, connected, done, reason, reusable) = loop {
            attempts += 1;
            let mut prog = Progress::default();
            let mut connected = None;
            let res = tokio::time::timeout(limit, self.attempt(&req, idle.take(), &mut prog, &mut connected)).await;
            wire += prog.wire_bytes;
            if attempts == 1 {
                first_sent = prog.request_sent;
            }
            match res {
                Ok(Ok((resp, conn))) => {
                    let outcome = if resp.status >= 400 { Outcome::HttpError } else { Outcome::Ok };
                    let reuse = keep_alive && resp.keep_alive && self.p.persistent.is_some_and(|k| conn.requests < k);
                    let reusable = if reuse {
                        Some(conn)
                    } else {
                        self.recycle(conn);
                        None
                    };
                    break (outcome, prog, connected, resp.done, None, reusable);
                }
                Ok(Err(e)) => break (Outcome::Failed, prog, connected, Instant::now(), Some(fail_reason(&e)), None),
                Err(_elapsed) => {
                    if self.p.abort_after.is_some() {
                        if attempts <= self.p.retries {
                            continue;
                        }
                        break (Outcome::Aborted, prog, connected, Instant::now(), None, None);
                    }
                    break (Outcome::Timeout, prog, connected, Instant::now(), None, None);
                }
            }
        };
        let rs = self.p.run_start;
        let record = RequestRecord {
            id,
            client,
            path: rec.path.clone(),
            size_bytes: rec.size_bytes,
            bytes_received: prog.body_bytes,
            status: prog.status,
            outcome,
            attempts,
            scheduled_s: secs(rs, scheduled),
            start_s: secs(rs, start),
            connected_s: connected.map(|t| secs(rs, t)),
            first_byte_s: prog.first_byte.map(|t| secs(rs, t)),
            done_s: Some(secs(rs, done)),
        };
        let lateness_us = (timed != Timed::No).then(|| start.saturating_duration_since(scheduled).as_micros() as u64);
        let micros = |a: Instant, b: Instant| b.saturating_duration_since(a).as_micros() as u64;
        let dispatched = match timed {
            Timed::Dispatched(d) => Some(d),
            _ => None,
        };
        let timing = dispatched.map(|d| Timing {
            dispatch_us: micros(scheduled, d),
            handoff_us: micros(d, start),
            send_us: first_sent.map(|s| micros(start, s)),
        });
        self.send(Msg { rec: record, lateness_us, timing, wire_bytes: wire, fail_reason: reason });
        reusable
    }

    async fn run_job(self: Rc<Self>, job: Job) {
        match job {
            Job::Single { id, rec, client, scheduled, dispatched } => {
                let idle = if self.p.persistent.is_some() { self.take_idle(client) } else { None };
                if let Some(c) = self.perform(id, client, &rec, scheduled, idle, Timed::Dispatched(dispatched)).await {
                    self.put_idle(client, c);
                }
                self.p.in_flight.fetch_sub(1, Ordering::AcqRel);
            }
            Job::Session { first_id, recs, client, scheduled, dispatched } => {
                let mut conn = None;
                let mut when = scheduled;
                for (i, rec) in recs.iter().enumerate() {
                    let timed = if i == 0 { Timed::Dispatched(dispatched) } else { Timed::No };
                    conn = self.perform(first_id + i as u64, client, rec, when, conn, timed).await;
                    // Back-to-back: the next request is due now.
                    when = Instant::now();
                }
                self.p.in_flight.fetch_sub(1, Ordering::AcqRel);
            }
            Job::User { user } => self.user_loop(user).await,
        }
    }

    /// A closed-model user: request, think, repeat.
    async fn user_loop(&self, user: u32) {
        let shared = self.p.closed.as_ref().expect("closed model").clone();
        let mut rng = ChaCha8Rng::seed_from_u64(self.p.seed);
        rng.set_stream(1_000 + u64::from(user));
        let mut conn: Option<Conn> = None;
        // Users start staggered by one think time, not all at once.
        let mut scheduled = Instant::now() + Duration::from_secs_f64(shared.think.sample_s(&mut rng));
        // Session state.
        let mut state: Option<usize> = None;
        let mut session_no = 0u64;
        let mut seq = 0u32;
        let mut session_end: Option<Instant> = None;
        loop {
            if shared.stop_at.is_some_and(|s| scheduled >= s) || shared.exhausted.load(Ordering::Relaxed) || stopped() {
                break;
            }
            let rec = if let Some(m) = &shared.session {
                let now = Instant::now();
                let over = state.is_none()
                    || m.max_requests.is_some_and(|mx| seq >= mx)
                    || session_end.is_some_and(|e| now >= e);
                let mut s = if over {
                    session_no += 1;
                    seq = 0;
                    session_end = m.session_s.map(|d| now + Duration::from_secs_f64(d.sample_s(&mut rng)));
                    m.start()
                } else {
                    state.unwrap_or(m.start())
                };
                let next = match m.step(s, &mut rng) {
                    Some(t) => t,
                    None => {
                        // Absorbing state: a new session.
                        session_no += 1;
                        seq = 0;
                        s = m.start();
                        m.step(s, &mut rng).expect("start state has transitions (checked at load)")
                    }
                };
                state = Some(next);
                seq += 1;
                TraceRecord {
                    time_s: 0.0,
                    path: m.path(next, user, session_no, seq, &mut rng),
                    size_bytes: 0,
                    client: Some(user),
                }
            } else {
                let next = shared.trace.as_ref().and_then(|t| t.lock().ok().and_then(|mut it| it.next()));
                match next {
                    Some(Ok(r)) => r,
                    Some(Err(e)) => {
                        if let Ok(mut g) = shared.trace_error.lock() {
                            g.get_or_insert(e);
                        }
                        shared.exhausted.store(true, Ordering::Relaxed);
                        break;
                    }
                    None => {
                        shared.exhausted.store(true, Ordering::Relaxed);
                        break;
                    }
                }
            };
            tokio::time::sleep_until(scheduled.into()).await;
            let id = shared.next_id.fetch_add(1, Ordering::Relaxed);
            conn = self.perform(id, user, &rec, scheduled, conn, Timed::Yes).await;
            scheduled = Instant::now() + Duration::from_secs_f64(shared.think.sample_s(&mut rng));
        }
    }
}

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

fn stopped() -> bool {
    STOP.load(Ordering::Relaxed)
}

/// Sleeps until `deadline` in slices of at most 100 ms, returning early (false)
/// when a stop signal arrives.
fn sleep_until(deadline: Instant) -> bool {
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
fn set_realtime(realtime: bool) -> std::io::Result<()> {
    let (policy, prio) = if realtime { (libc::SCHED_FIFO, REALTIME_PRIORITY) } else { (libc::SCHED_OTHER, 0) };
    let param = libc::sched_param { sched_priority: prio };
    // SAFETY: pid 0 is the calling thread; `param` is a valid local.
    if unsafe { libc::sched_setscheduler(0, policy, &param) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Lowers the calling thread's timer slack so sleeps end on time (Linux).
fn precise_timers() {
    #[cfg(target_os = "linux")]
    unsafe {
        // SAFETY: prctl(PR_SET_TIMERSLACK) only changes this thread's slack.
        libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0);
    }
}

/// Raises the open-file limit to the hard limit; returns the soft limit now in force.
fn raise_nofile() -> u64 {
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

fn open_trace(path: &Path, format: Option<TraceFormat>, skip_bad: bool) -> Result<(TraceIter, SkipCount), LoadError> {
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

/// Runs the load and writes `requests.csv`, `summary.json` and
/// `response-times.hlog` into `cfg.out_dir`.
pub fn run(cfg: Config) -> Result<Summary, LoadError> {
    let cerr = |m: String| LoadError::Config(m);
    if cfg.threads == 0 {
        return Err(cerr("--threads must be ≥ 1".into()));
    }
    if cfg.clients == 0 {
        return Err(cerr("--clients must be ≥ 1".into()));
    }
    if cfg.batch_window_us > MAX_BATCH_WINDOW_US {
        return Err(cerr(format!("--batch-window-us must be at most {MAX_BATCH_WINDOW_US}")));
    }
    if cfg.spin_us > MAX_SPIN_US {
        return Err(cerr(format!("--spin-us must be at most {MAX_SPIN_US}")));
    }
    if cfg.persistent == Some(0) {
        return Err(cerr("--persistent K must be ≥ 1".into()));
    }
    let positive = |v: f64| v.is_finite() && v > 0.0;
    if !positive(cfg.timeout_s) || cfg.abort_after_s.is_some_and(|a| !positive(a)) {
        return Err(cerr("--timeout and --abort-after must be positive".into()));
    }
    if cfg.retries > 0 && cfg.abort_after_s.is_none() {
        return Err(cerr("--retries needs --abort-after (retries follow a user abort)".into()));
    }
    if let (Source::Session { .. }, Model::Open | Model::PartlyOpen { .. }) = (&cfg.source, cfg.model) {
        return Err(cerr("a session model drives closed-model users: use --model closed:N".into()));
    }
    if let Model::Closed { users, .. } = cfg.model {
        if users as usize > cfg.max_in_flight {
            return Err(cerr(format!("closed:{users} exceeds --max-in-flight {}", cfg.max_in_flight)));
        }
        if cfg.scaling != Scaling::AsIs {
            return Err(cerr("--load/--rate/--speed scale trace times; the closed model ignores them".into()));
        }
    }
    if cfg.realtime {
        set_realtime(true)
            .map_err(|e| cerr(format!("--realtime: cannot use SCHED_FIFO ({e}); needs root or CAP_SYS_NICE")))?;
    }
    // Back to normal scheduling however the run ends.
    struct NormalAgain(bool);
    impl Drop for NormalAgain {
        fn drop(&mut self) {
            if self.0 {
                let _ = set_realtime(false);
            }
        }
    }
    let _normal_again = NormalAgain(cfg.realtime);
    let nofile = raise_nofile();
    // In flight, plus (keep-alive) at least one idle connection per worker.
    let min_idle = if cfg.persistent.is_some() { cfg.threads as u64 } else { 0 };
    let needed = cfg.max_in_flight as u64 + min_idle + FILES_BESIDES_CONNECTIONS;
    if needed > nofile {
        return Err(cerr(format!(
            "--max-in-flight {} needs {needed} open files, more than the limit {nofile} allows; lower it or raise \
             `ulimit -n`",
            cfg.max_in_flight,
        )));
    }
    // Idle connections get what the open-file limit leaves, up to one per
    // request that may be in flight.
    let idle_total = (nofile - cfg.max_in_flight as u64 - FILES_BESIDES_CONNECTIONS).min(cfg.max_in_flight as u64);
    let idle_limit = (idle_total as usize / cfg.threads).max(1);
    std::fs::create_dir_all(&cfg.out_dir).map_err(|source| LoadError::Io { path: cfg.out_dir.clone(), source })?;

    // Scaling needs a first pass over the trace.
    let speed = match (&cfg.source, cfg.model) {
        (Source::Trace { path, format, skip_bad }, Model::Open | Model::PartlyOpen { .. }) => {
            let totals = if cfg.scaling.needs_totals() { Some(trace_totals(path, *format, *skip_bad)?) } else { None };
            cfg.scaling.speed(totals.as_ref()).map_err(cerr)?
        }
        _ => 1.0,
    };

    let writer = RecordWriter::create(&cfg.out_dir.join("requests.csv"))?;
    let (tx, rx) = mpsc::sync_channel::<Msg>(COLLECT_QUEUE);
    let in_flight = Arc::new(AtomicUsize::new(0));
    let started_unix_s =
        SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0);
    // A short lead so the threads below are up before the first request is due.
    let run_start = Instant::now() + Duration::from_millis(20);

    let collector = {
        let in_flight = in_flight.clone();
        let hlog = cfg.out_dir.join("response-times.hlog");
        let progress = cfg.progress && std::io::stderr().is_terminal();
        let realtime = cfg.realtime;
        std::thread::Builder::new()
            .name("collector".into())
            .spawn(move || {
                if realtime {
                    // The collector inherits SCHED_FIFO from this thread, but
                    // must not have it: a sender preempted on the collector's
                    // CPU between claiming a channel slot and filling it
                    // (the spinning dispatcher is SCHED_OTHER) leaves the
                    // collector's try_recv spinning on that slot, and a FIFO
                    // thread yields to no SCHED_OTHER one: it spun until RT
                    // throttling stopped it, ~950 ms (measured with perf
                    // sched: every request of that second ~1 s late).
                    let _ = set_realtime(false);
                }
                collect(rx, writer, &hlog, run_start, in_flight, progress)
            })
            .map_err(|source| LoadError::Io { path: "collector thread".into(), source })?
    };

    // Closed-model shared state.
    let closed = match cfg.model {
        Model::Closed { think, .. } => {
            let (trace, session) = match &cfg.source {
                Source::Trace { path, format, skip_bad } => {
                    let (it, _) = open_trace(path, *format, *skip_bad)?;
                    (Some(Mutex::new(it)), None)
                }
                Source::Session { path } => (None, Some(SessionModel::load(path)?)),
            };
            Some(Arc::new(ClosedShared {
                trace,
                trace_error: Mutex::new(None),
                session,
                think,
                next_id: AtomicU64::new(0),
                stop_at: cfg.duration_s.map(|d| run_start + Duration::from_secs_f64(d)),
                exhausted: AtomicBool::new(false),
            }))
        }
        _ => None,
    };

    // Workers. With --spin-us, worker 0 runs on this thread and the
    // dispatcher runs inside it (see `dispatch_spinning`).
    let spin = (cfg.spin_us > 0 && matches!(cfg.model, Model::Open | Model::PartlyOpen { .. }))
        .then(|| Duration::from_micros(cfg.spin_us));
    let params = WorkerParams {
        target: cfg.target.clone(),
        run_start,
        tx: tx.clone(),
        in_flight: in_flight.clone(),
        persistent: cfg.persistent,
        abort_after: cfg.abort_after_s.map(Duration::from_secs_f64),
        timeout: Duration::from_secs_f64(cfg.timeout_s),
        retries: cfg.retries,
        seed: cfg.seed,
        closed: closed.clone(),
        idle_limit,
    };
    let mut senders = Vec::new();
    let mut workers = Vec::new();
    for w in 0..cfg.threads {
        let (jtx, jrx) = tokio::sync::mpsc::unbounded_channel::<Job>();
        senders.push(jtx);
        if w == 0 && spin.is_some() {
            // Worker 0 is this thread; the dispatcher spawns its jobs directly.
            drop(jrx);
            continue;
        }
        let p = params.clone();
        let realtime = cfg.realtime;
        let h = std::thread::Builder::new()
            .name(format!("load-worker-{w}"))
            .spawn(move || {
                precise_timers();
                if realtime {
                    // Allowed: the dispatcher thread just got the same policy.
                    let _ = set_realtime(true);
                }
                let (rt, local, ctx) = p.build();
                local.block_on(&rt, receive_jobs(ctx, jrx));
                rt.block_on(local);
            })
            .map_err(|source| LoadError::Io { path: "worker thread".into(), source })?;
        workers.push(h);
    }

    // Dispatch.
    let mut skipped = SkipCount::default();
    let mut out_of_order = 0u64;
    let mut dispatch_error = None;
    let mut dispatcher_wake_error = Spread::default();
    let mut spin_stats = None;
    match cfg.model {
        Model::Closed { users, .. } => {
            for u in 0..users {
                let _ = senders[u as usize % cfg.threads].send(Job::User { user: u });
            }
        }
        Model::Open | Model::PartlyOpen { .. } => {
            let Source::Trace { path, format, skip_bad } = &cfg.source else { unreachable!("checked above") };
            let (it, count) = open_trace(path, *format, *skip_bad)?;
            skipped = count;
            precise_timers();
            let k = match cfg.model {
                Model::PartlyOpen { k } => k as usize,
                _ => 1,
            };
            let mut d = Dispatcher {
                it,
                k,
                speed,
                duration_s: cfg.duration_s,
                run_start,
                first_time_s: None,
                last_offset_s: 0.0,
                out_of_order: 0,
                clients: cfg.clients,
                next_id: 0,
                sessions: 0,
            };
            let mut hand = Handover {
                tx: tx.clone(),
                in_flight: in_flight.clone(),
                max_in_flight: cfg.max_in_flight,
                run_start,
                k,
                senders: &senders,
                wake_error: hist(),
            };
            let res = match spin {
                None => dispatch_sleeping(&mut d, &mut hand, cfg.batch_window_us),
                Some(spin) => {
                    let (rt, local, ctx) = params.clone().build();
                    let mut stats = SpinStats::default();
                    let (cpu0, wall0) = (thread_cpu_time(), Instant::now());
                    let res = local.block_on(
                        &rt,
                        dispatch_spinning(
                            &mut d,
                            &mut hand,
                            &ctx,
                            spin,
                            cfg.realtime,
                            Duration::from_micros(cfg.batch_window_us),
                            &mut stats,
                        ),
                    );
                    stats.thread_cpu_s = thread_cpu_time().saturating_sub(cpu0).as_secs_f64();
                    stats.wall_s = wall0.elapsed().as_secs_f64();
                    spin_stats = Some(stats);
                    // The requests still running on this thread end here.
                    drop(ctx);
                    rt.block_on(local);
                    res
                }
            };
            if let Err(e) = res {
                dispatch_error = Some(e);
            }
            out_of_order = d.out_of_order;
            dispatcher_wake_error = Spread::of(&hand.wake_error);
        }
    }
    drop(senders);
    // The workers' parameters hold a sender to the collector too.
    drop(params);
    for h in workers {
        let _ = h.join();
    }
    drop(tx);
    let collected = collector.join().map_err(|_| cerr("collector thread panicked".into()))??;
    let trace_error = closed.as_ref().and_then(|c| c.trace_error.lock().ok().and_then(|mut g| g.take()));
    if let Some(e) = dispatch_error.or(trace_error.map(LoadError::from)) {
        // The run stopped part-way: leave no outputs that look complete.
        for f in ["requests.csv", "response-times.hlog"] {
            let _ = std::fs::remove_file(cfg.out_dir.join(f));
        }
        return Err(e);
    }
    let mut summary = summarize(&cfg, collected, speed, started_unix_s, skipped.skipped(), out_of_order);
    summary.lateness_breakdown.dispatcher_wake_error = dispatcher_wake_error;
    summary.spin = spin_stats;
    write_json_atomic(&cfg.out_dir.join("summary.json"), &summary)?;
    Ok(summary)
}

/// What a worker needs to build its runtime and [`Ctx`].
#[derive(Clone)]
struct WorkerParams {
    target: Target,
    run_start: Instant,
    tx: mpsc::SyncSender<Msg>,
    in_flight: Arc<AtomicUsize>,
    persistent: Option<u32>,
    abort_after: Option<Duration>,
    timeout: Duration,
    retries: u32,
    seed: u64,
    closed: Option<Arc<ClosedShared>>,
    /// Most idle connections this worker keeps.
    idle_limit: usize,
}

impl WorkerParams {
    /// A single-threaded runtime, the set its tasks run in, and their context.
    fn build(self) -> (tokio::runtime::Runtime, tokio::task::LocalSet, Rc<Ctx>) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("tokio runtime");
        let ctx = Rc::new(Ctx {
            p: self,
            pool: RefCell::new(HashMap::new()),
            idle: Cell::new(0),
            spare_bufs: RefCell::new(Vec::new()),
        });
        (rt, tokio::task::LocalSet::new(), ctx)
    }
}

/// A worker's loop: a task per job until the dispatcher hangs up.
async fn receive_jobs(ctx: Rc<Ctx>, mut jobs: tokio::sync::mpsc::UnboundedReceiver<Job>) {
    while let Some(job) = jobs.recv().await {
        tokio::task::spawn_local(ctx.clone().run_job(job));
    }
}

/// Hands due batches to workers, or refuses them at the in-flight limit.
struct Handover<'a> {
    tx: mpsc::SyncSender<Msg>,
    in_flight: Arc<AtomicUsize>,
    max_in_flight: usize,
    run_start: Instant,
    k: usize,
    senders: &'a [tokio::sync::mpsc::UnboundedSender<Job>],
    /// Per wake-up of the dispatcher: µs after its target time.
    wake_error: Histogram<u64>,
}

impl Handover<'_> {
    /// Starts `batch` now: as a task on this thread if `local` is given and the
    /// client's worker is 0, else through the worker's channel.
    fn hand_over(&mut self, (first_id, recs, client, scheduled): Batch, local: Option<&Rc<Ctx>>) {
        if self.in_flight.load(Ordering::Acquire) >= self.max_in_flight {
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
                        outcome: Outcome::Failed,
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

/// Longest accepted `--spin-us`.
pub const MAX_SPIN_US: u64 = 5_000;

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
    /// spinning because other tasks wanted this CPU ([`Contention`]).
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

/// Whether other tasks want the CPU the spinning dispatcher runs on, judged on
/// that CPU alone (the CPU the server runs on is its own business): while
/// spinning, contended once the thread was off its CPU without sleeping (other
/// tasks ran, or the host took the vCPU) more than [`CONTENDED_SHARE`] of a
/// [`PRESSURE_WINDOW`]: wall time − the thread's CPU time − its timer sleeps.
/// The yields hand the CPU to any task that wants it, and CFS tasks of higher
/// weight preempt a SCHED_OTHER spinner anywhere. While sleeping (contended), no
/// longer so once the CPU sat idle more than that share (from the cpuidle
/// driver's per-CPU residency times: an idle CPU halts, and a sleeping
/// dispatcher then pays its wake-up). Where the kernel has no cpuidle driver it
/// falls back to the machine-wide [`CpuPressure`].
struct Contention {
    source: ContentionSource,
    contended: bool,
    last_check: Instant,
    /// The thread's CPU time at the last check.
    last_cpu: Duration,
    /// Time the thread slept on its timer since the last check
    /// ([`wait_spinning`] adds to it).
    slept: Duration,
}

/// What [`Contention`] reads: this CPU's idle counters, or machine-wide PSI
/// where there is no cpuidle driver.
enum ContentionSource {
    Idle(CpuIdle),
    Psi(CpuPressure),
}

impl Contention {
    fn open() -> Contention {
        let source = CpuIdle::open().map_or_else(|| ContentionSource::Psi(CpuPressure::open()), ContentionSource::Idle);
        Contention {
            source,
            contended: false,
            last_check: Instant::now(),
            last_cpu: thread_cpu_time(),
            slept: Duration::ZERO,
        }
    }

    /// The state for the current window (re-judged once a window has passed).
    fn contended(&mut self, now: Instant) -> bool {
        let idle = match &mut self.source {
            ContentionSource::Idle(idle) => idle,
            ContentionSource::Psi(psi) => return psi.contended(now),
        };
        let window = now.saturating_duration_since(self.last_check);
        if window < PRESSURE_WINDOW {
            return self.contended;
        }
        let cpu = thread_cpu_time();
        let off_cpu = window.saturating_sub(cpu.saturating_sub(self.last_cpu)).saturating_sub(self.slept);
        // None: just migrated to another CPU (or unreadable), no judgement this window.
        if let Some(idle_us) = idle.idle_since_last_us() {
            self.contended = next_contended(self.contended, window, Duration::from_micros(idle_us), off_cpu);
        }
        self.slept = Duration::ZERO;
        self.last_cpu = cpu;
        self.last_check = now;
        self.contended
    }
}

/// One window's judgement: spinning, contended once the thread was off its CPU
/// without sleeping more than [`CONTENDED_SHARE`] of the window; sleeping, no
/// longer contended once the CPU idled more than that share.
fn next_contended(contended: bool, window: Duration, idle: Duration, off_cpu: Duration) -> bool {
    let share = |d: Duration| d.as_secs_f64() / window.as_secs_f64().max(1e-9);
    if contended {
        share(idle) <= CONTENDED_SHARE
    } else {
        share(off_cpu) > CONTENDED_SHARE
    }
}

/// Idle time of the CPU the calling thread runs on, from the cpuidle driver's
/// residency counters (`/sys/devices/system/cpu/cpuN/cpuidle/stateK/time`, µs,
/// summed over the states; a CPU's counters only move when it leaves idle, and
/// the calling thread's CPU is not idle while it reads them).
struct CpuIdle {
    /// The CPU of the previous read, its state files and their sum then.
    cpu: usize,
    files: Vec<std::fs::File>,
    last_us: Option<u64>,
}

/// Most cpuidle states read per CPU (drivers have a handful).
const MAX_IDLE_STATES: usize = 16;

impl CpuIdle {
    fn open() -> Option<CpuIdle> {
        let cpu = current_cpu()?;
        let files = Self::state_files(cpu);
        (!files.is_empty()).then_some(CpuIdle { cpu, files, last_us: None })
    }

    fn state_files(cpu: usize) -> Vec<std::fs::File> {
        (0..MAX_IDLE_STATES)
            .map_while(|k| std::fs::File::open(format!("/sys/devices/system/cpu/cpu{cpu}/cpuidle/state{k}/time")).ok())
            .collect()
    }

    fn total_us(&self) -> Option<u64> {
        use std::os::unix::fs::FileExt;
        let mut sum = 0u64;
        for f in &self.files {
            let mut buf = [0u8; 32];
            let n = f.read_at(&mut buf, 0).ok()?;
            sum += std::str::from_utf8(&buf[..n]).ok()?.trim().parse::<u64>().ok()?;
        }
        Some(sum)
    }

    /// Idle µs of this thread's CPU since the previous call; None on the first
    /// call, after a migration to another CPU, or when unreadable.
    fn idle_since_last_us(&mut self) -> Option<u64> {
        let cpu = current_cpu()?;
        if cpu != self.cpu {
            self.cpu = cpu;
            self.files = Self::state_files(cpu);
            self.last_us = None;
        }
        let now = self.total_us();
        let delta = match (self.last_us, now) {
            (Some(a), Some(b)) => Some(b.saturating_sub(a)),
            _ => None,
        };
        self.last_us = now;
        delta
    }
}

/// The CPU the calling thread runs on.
fn current_cpu() -> Option<usize> {
    // SAFETY: sched_getcpu takes no arguments.
    let cpu = unsafe { libc::sched_getcpu() };
    usize::try_from(cpu).ok()
}

/// How often [`CpuPressure`] reads the kernel's CPU pressure: a few
/// scheduler ticks, as the kernel weighs each CPU's stall time by its busy
/// time in whole ticks (measured with HZ=250: read every 2 ms, the total did
/// not move at all; every 4-20 ms it tracked the pressure).
const PRESSURE_WINDOW: Duration = Duration::from_millis(10);
/// Share of a window in which some task waited for a CPU above which the
/// machine counts as contended. Low enough that one task starved by the
/// spinner (100% of the window) counts; high enough that the collector's
/// brief waits for the spinner's next yield do not.
const CONTENDED_SHARE: f64 = 0.1;

/// Whether other tasks are waiting for a CPU, from the kernel's pressure
/// stall information (`/proc/pressure/cpu`, "some": time in which at least
/// one runnable task was not running), read at most once per
/// [`PRESSURE_WINDOW`] (~6 µs a read), so it notices new contention up to
/// two windows late. Machine-wide: a task waiting on
/// another CPU counts too (then the spinner sleeps although it need not; on 2
/// CPUs the server's own CPU made it sleep at 20,000/s, measured), so it is
/// only [`Contention`]'s fallback where there is no cpuidle driver.
/// Without PSI (older kernels, `psi=0`) it never reports contention.
struct CpuPressure {
    file: Option<std::fs::File>,
    last_total_us: Option<u64>,
    last_check: Instant,
    contended: bool,
}

impl CpuPressure {
    fn open() -> CpuPressure {
        CpuPressure {
            file: std::fs::File::open("/proc/pressure/cpu").ok(),
            last_total_us: None,
            last_check: Instant::now(),
            contended: false,
        }
    }

    /// Whether, over the last window, some task waited for a CPU more than
    /// [`CONTENDED_SHARE`] of the time (the answer of the last read until a
    /// window has passed).
    fn contended(&mut self, now: Instant) -> bool {
        use std::os::unix::fs::FileExt;
        let Some(f) = &self.file else { return false };
        let elapsed = now.saturating_duration_since(self.last_check);
        if elapsed < PRESSURE_WINDOW && self.last_total_us.is_some() {
            return self.contended;
        }
        let mut buf = [0u8; 256];
        let total = f.read_at(&mut buf, 0).ok().and_then(|n| psi_some_total_us(&buf[..n]));
        let Some(total) = total else {
            // Unreadable or unparsable: stop asking.
            self.file = None;
            self.contended = false;
            return false;
        };
        self.update(total, elapsed);
        self.last_check = now;
        self.contended
    }

    /// Takes a new cumulative "some" total, `elapsed` after the previous one.
    fn update(&mut self, total_us: u64, elapsed: Duration) {
        if let Some(last) = self.last_total_us {
            let stalled_us = total_us.saturating_sub(last) as f64;
            self.contended = stalled_us > CONTENDED_SHARE * elapsed.as_secs_f64() * 1e6;
        }
        self.last_total_us = Some(total_us);
    }
}

/// The `total=` (µs) of the "some" line of a `/proc/pressure/*` file.
fn psi_some_total_us(text: &[u8]) -> Option<u64> {
    let text = std::str::from_utf8(text).ok()?;
    let line = text.lines().find(|l| l.starts_with("some "))?;
    line.split_whitespace().find_map(|f| f.strip_prefix("total="))?.parse().ok()
}

/// CPU time used by the calling thread.
fn thread_cpu_time() -> Duration {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: writes the calling thread's CPU clock into a local timespec.
    if unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) } != 0 {
        return Duration::ZERO;
    }
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// A non-blocking CLOCK_MONOTONIC timerfd registered with the runtime: a
/// sleep with nanosecond resolution (tokio's own timers have 1 ms) that
/// still lets the runtime serve sockets meanwhile.
struct TimerFd(tokio::io::unix::AsyncFd<std::os::fd::OwnedFd>);

impl TimerFd {
    fn new() -> std::io::Result<TimerFd> {
        use std::os::fd::FromRawFd;
        // SAFETY: plain syscall; the fd is owned by the OwnedFd below.
        let fd = unsafe { libc::timerfd_create(libc::CLOCK_MONOTONIC, libc::TFD_NONBLOCK | libc::TFD_CLOEXEC) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: `fd` is a fresh descriptor nobody else owns.
        let owned = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) };
        // SAFETY: an OwnedFd stays open and keeps its descriptor for as long as
        // the AsyncFd owns it.
        let afd = unsafe { tokio::io::unix::AsyncFd::register_with_interest(owned, tokio::io::Interest::READABLE) };
        Ok(TimerFd(afd?))
    }

    /// Sleeps for `d` (> 0).
    async fn sleep(&self, d: Duration) -> std::io::Result<()> {
        use std::os::fd::AsRawFd;
        let fd = self.0.get_ref().as_raw_fd();
        let spec = libc::itimerspec {
            it_interval: libc::timespec { tv_sec: 0, tv_nsec: 0 },
            it_value: libc::timespec {
                tv_sec: d.as_secs() as libc::time_t,
                // At least 1 ns: an all-zero value would disarm the timer.
                tv_nsec: (d.subsec_nanos().max(u32::from(d.as_secs() == 0))) as libc::c_long,
            },
        };
        // SAFETY: `fd` is our timerfd; `spec` is a valid local.
        if unsafe { libc::timerfd_settime(fd, 0, &spec, std::ptr::null_mut()) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        loop {
            let mut guard = self.0.readable().await?;
            let mut expirations = 0u64;
            // SAFETY: reads 8 bytes into a local u64, as timerfd requires.
            let n = unsafe { libc::read(fd, (&mut expirations as *mut u64).cast(), 8) };
            if n == 8 {
                return Ok(());
            }
            let e = std::io::Error::last_os_error();
            if e.kind() != std::io::ErrorKind::WouldBlock {
                return Err(e);
            }
            guard.clear_ready();
        }
    }
}

/// Streams the trace into timed batches (one request, or a K-request session).
struct Dispatcher {
    it: TraceIter,
    k: usize,
    speed: f64,
    duration_s: Option<f64>,
    run_start: Instant,
    first_time_s: Option<f64>,
    last_offset_s: f64,
    out_of_order: u64,
    clients: u32,
    next_id: u64,
    sessions: u64,
}

type Batch = (u64, Vec<TraceRecord>, u32, Instant);

impl Dispatcher {
    fn next_batch(&mut self) -> Result<Option<Batch>, LoadError> {
        let mut recs = Vec::with_capacity(self.k);
        while recs.len() < self.k {
            match self.it.next() {
                Some(r) => recs.push(r?),
                None => break,
            }
        }
        let Some(first) = recs.first() else { return Ok(None) };
        let t0 = *self.first_time_s.get_or_insert(first.time_s);
        let mut offset_s = (first.time_s - t0) / self.speed;
        if offset_s < self.last_offset_s {
            // Out-of-order trace: send it as soon as possible, count it.
            self.out_of_order += 1;
            offset_s = self.last_offset_s;
        }
        if self.duration_s.is_some_and(|d| offset_s >= d) {
            return Ok(None);
        }
        self.last_offset_s = offset_s;
        let first_id = self.next_id;
        self.next_id += recs.len() as u64;
        let client = first.client.unwrap_or((self.sessions % u64::from(self.clients)) as u32);
        self.sessions += 1;
        Ok(Some((first_id, recs, client, self.run_start + Duration::from_secs_f64(offset_s))))
    }
}

/// What the collector gathered.
struct Collected {
    rows: u64,
    by_outcome: BTreeMap<Outcome, u64>,
    failures: BTreeMap<String, u64>,
    not_sent: u64,
    retries: u64,
    requested_bytes_sent: u64,
    bytes_received: u64,
    wire_bytes: u64,
    first_start_s: Option<f64>,
    last_start_s: f64,
    last_done_s: f64,
    resp_sched: Histogram<u64>,
    resp_start: Histogram<u64>,
    lateness: Histogram<u64>,
    dispatch: Histogram<u64>,
    handoff: Histogram<u64>,
    send: Histogram<u64>,
    resp_sched_sum_us: f64,
    resp_start_sum_us: f64,
}

fn hist() -> Histogram<u64> {
    Histogram::new_with_bounds(1, HIST_MAX_US, 3).expect("valid histogram bounds")
}

fn us(s: f64) -> u64 {
    ((s * 1e6).round() as u64).clamp(1, HIST_MAX_US)
}

fn collect(
    rx: mpsc::Receiver<Msg>,
    mut writer: RecordWriter,
    hlog_path: &Path,
    run_start: Instant,
    in_flight: Arc<AtomicUsize>,
    progress: bool,
) -> Result<Collected, LoadError> {
    let mut c = Collected {
        rows: 0,
        by_outcome: BTreeMap::new(),
        failures: BTreeMap::new(),
        not_sent: 0,
        retries: 0,
        requested_bytes_sent: 0,
        bytes_received: 0,
        wire_bytes: 0,
        first_start_s: None,
        last_start_s: 0.0,
        last_done_s: 0.0,
        resp_sched: hist(),
        resp_start: hist(),
        lateness: hist(),
        dispatch: hist(),
        handoff: hist(),
        send: hist(),
        resp_sched_sum_us: 0.0,
        resp_start_sum_us: 0.0,
    };
    let io = |source| LoadError::Io { path: hlog_path.to_path_buf(), source };
    let mut tmp = hlog_path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    let file = std::fs::File::create(&tmp).map_err(io)?;
    let mut hlog_out = std::io::BufWriter::new(file);
    let mut serializer = V2DeflateSerializer::new();
    let base = SystemTime::now() + run_start.saturating_duration_since(Instant::now());
    let mut log = IntervalLogWriterBuilder::new()
        .add_comment("shortfirst load: response time from scheduled send, microseconds")
        .with_start_time(base)
        .with_base_time(base)
        .begin_log_with(&mut hlog_out, &mut serializer)
        .map_err(io)?;
    let mut interval = hist();
    let mut interval_start = Duration::ZERO;
    let tick = Duration::from_secs(1);
    let mut next_tick = run_start + tick;
    let mut last_rows = 0u64;
    loop {
        // Poll rather than block: a blocked receiver costs the sender a
        // futex wake-up per row; polling every COLLECT_POLL costs nothing per
        // row and the queue absorbs the rows in between.
        let msg = match rx.try_recv() {
            Ok(m) => Some(m),
            Err(mpsc::TryRecvError::Empty) => {
                let to_tick = next_tick.saturating_duration_since(Instant::now());
                std::thread::sleep(COLLECT_POLL.min(to_tick));
                None
            }
            Err(mpsc::TryRecvError::Disconnected) => break,
        };
        if let Some(m) = msg {
            let r = &m.rec;
            writer.write(r)?;
            c.rows += 1;
            *c.by_outcome.entry(r.outcome).or_insert(0) += 1;
            if let Some(reason) = m.fail_reason {
                *c.failures.entry(reason.to_string()).or_insert(0) += 1;
            }
            if r.attempts == 0 {
                c.not_sent += 1;
            } else {
                c.retries += u64::from(r.attempts - 1);
                c.requested_bytes_sent += r.size_bytes;
                c.first_start_s = Some(c.first_start_s.map_or(r.start_s, |f| f.min(r.start_s)));
                c.last_start_s = c.last_start_s.max(r.start_s);
            }
            c.bytes_received += r.bytes_received;
            c.wire_bytes += m.wire_bytes;
            if let Some(d) = r.done_s {
                c.last_done_s = c.last_done_s.max(d);
            }
            if let (Some(a), Some(b)) = (r.response_from_scheduled_s(), r.response_from_start_s()) {
                let (a, b) = (us(a), us(b));
                c.resp_sched.saturating_record(a);
                c.resp_start.saturating_record(b);
                interval.saturating_record(a);
                c.resp_sched_sum_us += a as f64;
                c.resp_start_sum_us += b as f64;
            }
            if let Some(l) = m.lateness_us {
                c.lateness.saturating_record(l.clamp(1, HIST_MAX_US));
            }
            if let Some(t) = m.timing {
                c.dispatch.saturating_record(t.dispatch_us);
                c.handoff.saturating_record(t.handoff_us);
                if let Some(s) = t.send_us {
                    c.send.saturating_record(s);
                }
            }
        }
        let now = Instant::now();
        if now >= next_tick {
            let end = next_tick.saturating_duration_since(run_start);
            log.write_histogram(&interval, interval_start, end - interval_start, None)
                .map_err(|e| io(std::io::Error::other(format!("{e:?}"))))?;
            interval.reset();
            interval_start = end;
            next_tick += tick;
            if progress {
                let lp99 = c.lateness.value_at_quantile(0.99) as f64 / 1000.0;
                let mut err = std::io::stderr().lock();
                let _ = write!(
                    err,
                    "\r[{:7.1}s] done {:>9} ({:>7}/s)  in flight {:>6}  not ok {:>7}  lateness p99 {:6.3} ms ",
                    end.as_secs_f64(),
                    c.rows,
                    c.rows - last_rows,
                    in_flight.load(Ordering::Relaxed),
                    c.rows - c.by_outcome.get(&Outcome::Ok).copied().unwrap_or(0),
                    lp99
                );
                let _ = err.flush();
            }
            last_rows = c.rows;
        }
    }
    let end = Instant::now().saturating_duration_since(run_start);
    if !interval.is_empty() {
        log.write_histogram(&interval, interval_start, end.saturating_sub(interval_start), None)
            .map_err(|e| io(std::io::Error::other(format!("{e:?}"))))?;
    }
    drop(log);
    let f = hlog_out.into_inner().map_err(|e| io(e.into_error()))?;
    f.sync_all().map_err(io)?;
    std::fs::rename(&tmp, hlog_path).map_err(io)?;
    if progress {
        eprintln!();
    }
    writer.finish()?;
    Ok(c)
}

fn latencies(h: &Histogram<u64>, sum_us: f64) -> Latencies {
    if h.is_empty() {
        return Latencies::default();
    }
    let s = |v: u64| Some(v as f64 / 1e6);
    Latencies {
        mean_s: Some(sum_us / h.len() as f64 / 1e6),
        p50_s: s(h.value_at_quantile(0.5)),
        p90_s: s(h.value_at_quantile(0.9)),
        p99_s: s(h.value_at_quantile(0.99)),
        max_s: s(h.max()),
    }
}

fn summarize(cfg: &Config, c: Collected, speed: f64, started_unix_s: f64, skipped: u64, out_of_order: u64) -> Summary {
    let get = |o| c.by_outcome.get(&o).copied().unwrap_or(0);
    let sched = latencies(&c.resp_sched, c.resp_sched_sum_us);
    let lat = |q: f64| (!c.lateness.is_empty()).then(|| c.lateness.value_at_quantile(q) as f64 / 1000.0);
    let lateness_p99_ms = lat(0.99);
    let send_span = c.first_start_s.map(|f| c.last_start_s - f).unwrap_or(0.0);
    let busy_span = c.first_start_s.map(|f| c.last_done_s - f).unwrap_or(0.0);
    let sent = c.rows - c.not_sent;
    let mut invalid = Vec::new();
    if let Some(l) = lateness_p99_ms {
        if l > LATENESS_P99_LIMIT_MS {
            invalid.push(format!("generator lateness p99 {l:.3} ms > {LATENESS_P99_LIMIT_MS} ms"));
        }
    }
    if c.not_sent > 0 {
        invalid.push(format!("{} requests not sent: in-flight limit {} reached", c.not_sent, cfg.max_in_flight));
    }
    if skipped > 0 {
        invalid.push(format!("{skipped} malformed trace records skipped"));
    }
    if stopped() {
        invalid.push("interrupted by a signal before the end of the trace/duration".into());
    }
    let ok = get(Outcome::Ok);
    if c.rows == 0 {
        invalid.push("no request was due: nothing was measured".into());
    } else if ok == 0 {
        invalid.push(format!(
            "no request succeeded (2xx/3xx) of {}: nothing of the server's service was measured",
            c.rows
        ));
    }
    // Rows refused at the in-flight limit are `failed` too, but counted above.
    let failed_sent = get(Outcome::Failed).saturating_sub(c.not_sent);
    if sent > 0 && failed_sent as f64 > MAX_FAILED_SHARE * sent as f64 {
        invalid.push(format!(
            "{failed_sent} of {sent} requests sent ({:.1}%) failed without a response (more than {:.0}%): {}",
            100.0 * failed_sent as f64 / sent as f64,
            100.0 * MAX_FAILED_SHARE,
            failure_list(&c.failures)
        ));
    }
    for reason in GENERATOR_FAILURES {
        if let Some(n) = c.failures.get(*reason) {
            invalid.push(format!("{n} requests failed on the generator's side: {reason}"));
        }
    }
    let offered_bits = (send_span > 0.0).then(|| c.requested_bytes_sent as f64 * 8.0 / send_span);
    Summary {
        requests: c.rows,
        sent,
        completed: ok + get(Outcome::HttpError),
        ok,
        http_error: get(Outcome::HttpError),
        failed: get(Outcome::Failed),
        aborted: get(Outcome::Aborted),
        timeout: get(Outcome::Timeout),
        not_sent_in_flight_limit: c.not_sent,
        retries: c.retries,
        failures_by_reason: c.failures,
        offered_load: cfg
            .uplink_bits_per_s
            .and_then(|u| offered_load(u128::from(c.requested_bytes_sent), send_span, u)),
        offered_bits_per_s: offered_bits,
        uplink_bits_per_s: cfg.uplink_bits_per_s,
        requested_bytes: c.requested_bytes_sent,
        bytes_received: c.bytes_received,
        wire_bytes_received: c.wire_bytes,
        throughput_bytes_per_s: (busy_span > 0.0).then(|| c.bytes_received as f64 / busy_span),
        achieved_req_per_s: (send_span > 0.0 && sent > 1).then(|| (sent - 1) as f64 / send_span),
        mean_response_s: sched.mean_s,
        p50_response_s: sched.p50_s,
        p90_response_s: sched.p90_s,
        p99_response_s: sched.p99_s,
        response_from_start: latencies(&c.resp_start, c.resp_start_sum_us),
        lateness_p50_ms: lat(0.5),
        lateness_p99_ms,
        lateness_max_ms: (!c.lateness.is_empty()).then(|| c.lateness.max() as f64 / 1000.0),
        lateness_samples: c.lateness.len(),
        lateness_breakdown: LatenessBreakdown {
            dispatch: Spread::of(&c.dispatch),
            handoff: Spread::of(&c.handoff),
            send: Spread::of(&c.send),
            dispatcher_wake_error: Spread::default(),
        },
        valid: invalid.is_empty(),
        invalid_reasons: invalid,
        interrupted: stopped(),
        trace_records_skipped: skipped,
        trace_records_out_of_order: out_of_order,
        speed,
        model: format!("{:?}", cfg.model),
        target: format!("http://{}{}", cfg.target.host, cfg.target.base_path),
        seed: cfg.seed,
        command_line: cfg.command_line.clone(),
        started_unix_s,
        run_s: busy_span,
        threads: cfg.threads,
        max_in_flight: cfg.max_in_flight,
        realtime: cfg.realtime,
        batch_window_us: cfg.batch_window_us,
        spin_us: cfg.spin_us,
        spin: None,
        git_commit: env!("SHORTFIRST_GIT_COMMIT").to_string(),
        kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease").map(|s| s.trim().to_string()).unwrap_or_default(),
        cpus: std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
        version: env!("CARGO_PKG_VERSION").to_string(),
    }
}

/// "connection refused ×3, connection reset ×1" (the in-flight limit's rows
/// are reported on their own).
fn failure_list(failures: &BTreeMap<String, u64>) -> String {
    let mut v: Vec<_> = failures.iter().filter(|(r, _)| r.as_str() != NOT_SENT_REASON).collect();
    v.sort_by(|a, b| b.1.cmp(a.1));
    v.iter().map(|(r, n)| format!("{r} ×{n}")).collect::<Vec<_>>().join(", ")
}

/// Writes JSON to `path.tmp`, then renames it onto `path`.
pub fn write_json_atomic<T: serde::Serialize>(path: &Path, value: &T) -> Result<(), LoadError> {
    let io = |source| LoadError::Io { path: path.to_path_buf(), source };
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    let text = serde_json::to_string_pretty(value).expect("summary serialises");
    std::fs::write(&tmp, text + "\n").map_err(io)?;
    std::fs::rename(&tmp, path).map_err(io)
}

/// A reproducible per-purpose RNG (exposed for callers that add randomness).
pub fn rng_for(seed: u64, stream: u64) -> impl Rng {
    let mut r = ChaCha8Rng::seed_from_u64(seed);
    r.set_stream(stream);
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn model_parsing() {
        assert_eq!("open".parse::<Model>().unwrap(), Model::Open);
        assert_eq!("partly-open:5".parse::<Model>().unwrap(), Model::PartlyOpen { k: 5 });
        assert_eq!("closed:10".parse::<Model>().unwrap(), Model::Closed { users: 10, think: TimeDist::Const(0.0) });
        assert_eq!(
            "closed:3,think=exp:7:70".parse::<Model>().unwrap(),
            Model::Closed { users: 3, think: TimeDist::Exp { mean_s: 7.0, max_s: Some(70.0) } }
        );
        for bad in ["closed", "closed:0", "partly-open:0", "closed:2,thonk=1", "semi"] {
            assert!(bad.parse::<Model>().is_err(), "{bad}");
        }
    }

    /// Runs `f` on a single-threaded runtime, as the spinning dispatcher does.
    fn on_runtime<T>(f: impl std::future::Future<Output = T>) -> T {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let local = tokio::task::LocalSet::new();
        local.block_on(&rt, f)
    }

    const SPIN: Duration = Duration::from_millis(2);

    /// Taken by every test that spins: two spinners on one CPU would each see
    /// the other as contention and use half the CPU the CPU-share test measures.
    static SPINNING: std::sync::Mutex<()> = std::sync::Mutex::new(());

    fn spinning() -> std::sync::MutexGuard<'static, ()> {
        SPINNING.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A wait no longer than the spin never arms the timer; a longer one
    /// arms it once and busy-waits at most `spin`; neither returns early.
    #[test]
    fn spin_threshold() {
        let _one_at_a_time = spinning();
        on_runtime(async {
            let timer = TimerFd::new().unwrap();
            let mut st = SpinStats::default();
            let due = Instant::now() + Duration::from_micros(500);
            assert!(wait_spinning(&timer, due, SPIN, false, &|| false, &mut st, &mut Duration::default())
                .await
                .unwrap());
            assert!(Instant::now() >= due);
            assert_eq!((st.waits, st.timer_sleeps, st.contended_waits), (1, 0, 0));
            assert!(st.spin_s <= 500e-6, "{st:?}");

            let mut st = SpinStats::default();
            let due = Instant::now() + Duration::from_millis(30);
            assert!(wait_spinning(&timer, due, SPIN, false, &|| false, &mut st, &mut Duration::default())
                .await
                .unwrap());
            assert!(Instant::now() >= due);
            assert_eq!((st.waits, st.timer_sleeps), (1, 1));
            assert!(st.spin_s <= SPIN.as_secs_f64(), "{st:?}");

            // Contended: even a short wait sleeps, and nothing is spun.
            let mut st = SpinStats::default();
            let due = Instant::now() + Duration::from_micros(500);
            assert!(wait_spinning(&timer, due, SPIN, true, &|| false, &mut st, &mut Duration::default())
                .await
                .unwrap());
            assert!(Instant::now() >= due);
            assert_eq!((st.waits, st.timer_sleeps, st.contended_waits, st.spin_s), (1, 1, 1, 0.0));
        });
    }

    /// A stop is noticed during a long sleep (within one STOP_CHECK slice,
    /// not at the end of the wait) and during the spin.
    #[test]
    fn spin_notices_stop() {
        let _one_at_a_time = spinning();
        on_runtime(async {
            let timer = TimerFd::new().unwrap();
            let flag = Arc::new(AtomicBool::new(false));
            let setter = {
                let flag = flag.clone();
                std::thread::spawn(move || {
                    std::thread::sleep(Duration::from_millis(50));
                    flag.store(true, Ordering::Relaxed);
                })
            };
            let mut st = SpinStats::default();
            let t0 = Instant::now();
            let stop = || flag.load(Ordering::Relaxed);
            let due = t0 + Duration::from_secs(60);
            assert!(!wait_spinning(&timer, due, SPIN, false, &stop, &mut st, &mut Duration::default()).await.unwrap());
            assert!(t0.elapsed() < Duration::from_secs(30), "stop noticed only after {:?}", t0.elapsed());
            setter.join().unwrap();
            // Within the spin: no timer, and it returns without waiting for `due`.
            let mut st = SpinStats::default();
            let due = Instant::now() + Duration::from_millis(1);
            assert!(!wait_spinning(&timer, due, SPIN, false, &|| true, &mut st, &mut Duration::default())
                .await
                .unwrap());
            assert_eq!(st.timer_sleeps, 0);
        });
    }

    /// At a low rate the spinner sleeps most of the time: 40 waits 10 ms
    /// apart with a 1 ms spin cost about a tenth of the thread's time (a
    /// spinner that never slept would use all of it).
    #[test]
    fn spin_cpu_share_at_low_rate() {
        let _one_at_a_time = spinning();
        let spin = Duration::from_millis(1);
        let (st, cpu, wall) = on_runtime(async {
            let timer = TimerFd::new().unwrap();
            let mut st = SpinStats::default();
            let (cpu0, t0) = (thread_cpu_time(), Instant::now());
            for i in 1..=40u32 {
                assert!(wait_spinning(
                    &timer,
                    t0 + Duration::from_millis(10) * i,
                    spin,
                    false,
                    &|| false,
                    &mut st,
                    &mut Duration::default()
                )
                .await
                .unwrap());
            }
            (st, thread_cpu_time().saturating_sub(cpu0), t0.elapsed())
        });
        assert_eq!(st.waits, 40);
        assert!(st.timer_sleeps >= 39, "{st:?}");
        assert!(st.spin_s <= 40.0 * spin.as_secs_f64(), "{st:?}");
        let share = cpu.as_secs_f64() / wall.as_secs_f64();
        assert!(share < 0.5, "spinning thread used {share:.2} of its wall time ({st:?})");
    }

    /// Spinning: contended once the thread was off its CPU without sleeping
    /// more than 10% of the window. Sleeping: until the CPU idled more than 10%.
    #[test]
    fn contention_per_window() {
        let w = Duration::from_millis(10);
        let ms = Duration::from_millis;
        for (contended, idle, off_cpu, next) in [
            (false, ms(0), ms(0), false),
            (false, ms(9), ms(1), false),
            (false, ms(0), ms(2), true),
            (false, ms(5), ms(10), true),
            (true, ms(0), ms(0), true),
            (true, ms(1), ms(0), true),
            (true, ms(2), ms(0), false),
            (true, ms(10), ms(10), false),
        ] {
            assert_eq!(next_contended(contended, w, idle, off_cpu), next, "{contended} {idle:?} {off_cpu:?}");
        }
    }

    /// Pins the calling thread to `cpu`.
    fn pin_to(cpu: usize) -> bool {
        // SAFETY: a zeroed cpu_set_t is an empty set; CPU_SET and
        // sched_setaffinity only read and write it.
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(cpu, &mut set);
            libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) == 0
        }
    }

    /// A spinner that shares its CPU with a busy thread turns contended within
    /// a few windows and stays so. (That one alone on its CPU stays
    /// uncontended is not asserted: other tests and jobs share the CPU in
    /// `cargo test`.) Needs the cpuidle driver's counters (skipped without
    /// them, with a message).
    #[test]
    fn spinner_notices_a_competitor_on_its_cpu() {
        let _one_at_a_time = spinning();
        let Some(cpu) = current_cpu() else { return };
        assert!(pin_to(cpu), "pin the spinner");
        if CpuIdle::open().is_none() {
            eprintln!("skipped: no cpuidle counters for CPU {cpu}");
            return;
        }
        let spin_for = |contention: &mut Contention| {
            on_runtime(async {
                let timer = TimerFd::new().unwrap();
                let mut st = SpinStats::default();
                let mut judged = Vec::new();
                let t0 = Instant::now();
                for i in 1..=20u32 {
                    let due = t0 + PRESSURE_WINDOW * i;
                    assert!(wait_spinning(&timer, due, SPIN, false, &|| false, &mut st, &mut contention.slept)
                        .await
                        .unwrap());
                    judged.push(contention.contended(Instant::now()));
                }
                judged
            })
        };
        let stop = Arc::new(AtomicBool::new(false));
        let busy = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                assert!(pin_to(cpu), "pin the competitor");
                while !stop.load(Ordering::Relaxed) {
                    std::hint::spin_loop();
                }
            })
        };
        let mut shared = Contention::open();
        let judged_shared = spin_for(&mut shared);
        stop.store(true, Ordering::Relaxed);
        busy.join().unwrap();
        assert!(judged_shared[5..].iter().all(|&c| c), "sharing CPU {cpu}: {judged_shared:?}");
    }

    #[test]
    fn psi_parsing() {
        let text =
            b"some avg10=1.00 avg60=0.50 avg300=0.10 total=123456\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=7\n";
        assert_eq!(psi_some_total_us(text), Some(123456));
        for bad in [&b""[..], b"full total=7\n", b"some avg10=1.00\n", b"some total=x\n"] {
            assert_eq!(psi_some_total_us(bad), None, "{}", String::from_utf8_lossy(bad));
        }
    }

    /// Contended when some task waited for a CPU more than 10% of the window.
    #[test]
    fn pressure_threshold() {
        let mut p = CpuPressure { file: None, last_total_us: None, last_check: Instant::now(), contended: false };
        let w = Duration::from_millis(10);
        for (total_us, contended) in [(1_000, false), (1_500, false), (3_000, true), (13_000, true), (13_900, false)] {
            p.update(total_us, w);
            assert_eq!(p.contended, contended, "total {total_us}");
        }
        // Without PSI it never reports contention.
        assert!(!p.contended(Instant::now() + Duration::from_secs(1)));
    }
}
