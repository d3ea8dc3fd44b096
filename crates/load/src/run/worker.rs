//! The workers: each a single-threaded tokio runtime running a task per job
//! (one request, a partly-open session, or a closed-model user), with its own
//! pool of idle kept-alive connections and spare read buffers. A finished
//! request becomes a [`Msg`] for the collector.

use super::closed::ClosedShared;
use crate::http::{Conn, HttpError, Progress, Target};
use crate::received::ReceivedBytes;
use crate::record::{RequestOutcome, RequestRecord};
use crate::source_addrs::SourceAddrs;
use crate::trace::TraceRecord;
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

/// Failure reason of a connect that found no free local address or port: the
/// generator's own fault, not the server's.
pub(super) const NO_LOCAL_PORT: &str = "no local address/port available";
/// Failure reasons of a request the server turned away before any byte of a
/// response: a refused connect, a reset, or a close before the response. An
/// overloaded server does this (full SYN or accept queue, a half-open
/// connection given up, a connection limit); see [`super::summary::Summary::refused`].
pub(super) const REFUSALS: &[&str] = &[CONNECTION_REFUSED, CONNECTION_RESET, CLOSED_BEFORE_RESPONSE];
const CONNECTION_REFUSED: &str = "connection refused";
const CONNECTION_RESET: &str = "connection reset";
const CLOSED_BEFORE_RESPONSE: &str = "closed before response";
/// Read buffers of closed connections kept per worker for reuse
/// (× [`crate::http::READ_BUF_BYTES`] = 4 MiB).
const SPARE_BUFS_PER_WORKER: usize = 256;

/// Per-request parts of lateness, in microseconds.
#[derive(Debug, Clone, Copy)]
pub(super) struct Timing {
    pub(super) dispatch_us: u64,
    pub(super) handoff_us: u64,
    pub(super) send_us: Option<u64>,
}

/// Whether a request's lateness counts: not for the back-to-back requests of
/// a session after its first (they are due when the previous one ends);
/// `Dispatched` also breaks it down (open and partly-open models).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Timed {
    No,
    Yes,
    Dispatched(Instant),
}

/// One finished request on its way to the collector.
pub(super) struct Msg {
    pub(super) rec: RequestRecord,
    pub(super) lateness_us: Option<u64>,
    pub(super) timing: Option<Timing>,
    pub(super) wire_bytes: u64,
    pub(super) fail_reason: Option<&'static str>,
}

/// What a worker is asked to run.
pub(super) enum Job {
    Single { id: u64, rec: TraceRecord, client: u32, scheduled: Instant, dispatched: Instant },
    Session { first_id: u64, recs: Vec<TraceRecord>, client: u32, scheduled: Instant, dispatched: Instant },
    User { user: u32 },
}

/// What a worker needs to build its runtime and [`Ctx`].
#[derive(Clone)]
pub(super) struct WorkerParams {
    pub(super) target: Target,
    pub(super) run_start: Instant,
    pub(super) tx: mpsc::SyncSender<Msg>,
    pub(super) in_flight: Arc<AtomicUsize>,
    pub(super) persistent: Option<u32>,
    pub(super) abort_after: Option<Duration>,
    pub(super) timeout: Duration,
    pub(super) retries: u32,
    pub(super) seed: u64,
    pub(super) closed: Option<Arc<ClosedShared>>,
    /// Most idle connections this worker keeps.
    pub(super) idle_limit: usize,
    /// The source address of each client's connections.
    pub(super) source_addrs: Arc<SourceAddrs>,
    /// Body bytes received per time bucket, over every connection.
    pub(super) received: Arc<ReceivedBytes>,
}

impl WorkerParams {
    /// A single-threaded runtime, the set its tasks run in, and their context.
    pub(super) fn build(self) -> (tokio::runtime::Runtime, tokio::task::LocalSet, Rc<Ctx>) {
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
pub(super) async fn receive_jobs(ctx: Rc<Ctx>, mut jobs: tokio::sync::mpsc::UnboundedReceiver<Job>) {
    while let Some(job) = jobs.recv().await {
        tokio::task::spawn_local(ctx.clone().run_job(job));
    }
}

/// Per-worker context.
pub(super) struct Ctx {
    pub(super) p: WorkerParams,
    /// Idle connections by client (no empty lists: memory follows the
    /// connections, not the number of clients ever seen). Keyed by client,
    /// not by server: a client's source address is fixed for the run, so a
    /// kept-alive connection is never reused from another source address.
    pool: RefCell<HashMap<u32, Vec<Conn>>>,
    idle: Cell<usize>,
    /// Read buffers of closed connections, for the next ones (at most
    /// [`SPARE_BUFS_PER_WORKER`]; beyond, a buffer is freed).
    spare_bufs: RefCell<Vec<Box<[u8]>>>,
}

/// Seconds from the run's start to `t` (0 before it).
pub(super) fn secs(run_start: Instant, t: Instant) -> f64 {
    t.saturating_duration_since(run_start).as_secs_f64()
}

/// Why a request failed; a reset after part of the response arrived is not a
/// refusal but a broken response.
fn fail_reason(e: &HttpError, prog: &Progress) -> &'static str {
    match e {
        HttpError::Io(io) => match io.kind() {
            std::io::ErrorKind::ConnectionRefused => CONNECTION_REFUSED,
            std::io::ErrorKind::ConnectionReset if prog.wire_bytes == 0 => CONNECTION_RESET,
            std::io::ErrorKind::ConnectionReset => "connection reset mid-response",
            std::io::ErrorKind::BrokenPipe => "broken pipe",
            std::io::ErrorKind::AddrNotAvailable => NO_LOCAL_PORT,
            _ => "i/o error",
        },
        HttpError::ClosedBeforeResponse => CLOSED_BEFORE_RESPONSE,
        HttpError::ClosedMidResponse => "closed mid-response",
        HttpError::Malformed(_) => "malformed response",
        HttpError::HeadTooLarge => "response head too large",
    }
}

/// How a request ended after its last attempt.
struct Ended {
    outcome: RequestOutcome,
    prog: Progress,
    connected: Option<Instant>,
    done: Instant,
    reason: Option<&'static str>,
    attempts: u32,
    /// Bytes received over all attempts, headers included.
    wire: u64,
    /// When the first attempt's request was written.
    first_sent: Option<Instant>,
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

    /// One connection attempt for `client`: reuse `idle` if given (falling
    /// back to a new connection if the server had closed it), else connect
    /// from the client's source address.
    async fn attempt(
        &self,
        req: &[u8],
        client: u32,
        idle: Option<Conn>,
        prog: &mut Progress,
        connected: &mut Option<Instant>,
    ) -> Result<(crate::http::Response, Conn), HttpError> {
        // Every client was checked to have an address before its requests
        // were dispatched (closed model: before the run); an error here is
        // still a failed request, not a connection from the wrong address.
        let source = self.p.source_addrs.for_client(client).map_err(|e| HttpError::Io(std::io::Error::other(e)))?;
        if let Some(mut c) = idle {
            debug_assert_eq!(c.source(), source, "kept-alive connection of client {client} from another address");
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
        let mut c = Conn::connect_from(source, self.p.target.addr, buf).await?;
        c.count_received(self.p.received.clone());
        *connected = Some(Instant::now());
        let r = c.get(req, prog).await?;
        Ok((r, c))
    }

    /// Attempts `req` until it completes, fails, times out, or is aborted
    /// more often than the retries allow; returns how it ended and a
    /// connection that may carry another request.
    async fn attempt_until_done(&self, req: &[u8], client: u32, mut idle: Option<Conn>) -> (Ended, Option<Conn>) {
        let keep_alive = self.p.persistent.is_some();
        let limit = self.p.abort_after.unwrap_or(self.p.timeout);
        let mut attempts = 0u32;
        let mut wire = 0u64;
        let mut first_sent = None;
        let (outcome, prog, connected, done, reason, reusable) = loop {
            attempts += 1;
            let mut prog = Progress::default();
            let mut connected = None;
            let res =
                tokio::time::timeout(limit, self.attempt(req, client, idle.take(), &mut prog, &mut connected)).await;
            wire += prog.wire_bytes;
            if attempts == 1 {
                first_sent = prog.request_sent;
            }
            match res {
                Ok(Ok((resp, conn))) => {
                    let outcome = if resp.status >= 400 { RequestOutcome::HttpError } else { RequestOutcome::Ok };
                    let reuse = keep_alive && resp.keep_alive && self.p.persistent.is_some_and(|k| conn.requests < k);
                    let reusable = if reuse {
                        Some(conn)
                    } else {
                        self.recycle(conn);
                        None
                    };
                    break (outcome, prog, connected, resp.done, None, reusable);
                }
                Ok(Err(e)) => {
                    let reason = fail_reason(&e, &prog);
                    break (RequestOutcome::Failed, prog, connected, Instant::now(), Some(reason), None);
                }
                Err(_elapsed) => {
                    if self.p.abort_after.is_some() {
                        if attempts <= self.p.retries {
                            continue;
                        }
                        break (RequestOutcome::Aborted, prog, connected, Instant::now(), None, None);
                    }
                    break (RequestOutcome::Timeout, prog, connected, Instant::now(), None, None);
                }
            }
        };
        (Ended { outcome, prog, connected, done, reason, attempts, wire, first_sent }, reusable)
    }

    /// Performs one request with abort/retry; returns the row and a
    /// connection that may carry another request.
    pub(super) async fn perform(
        &self,
        id: u64,
        client: u32,
        rec: &TraceRecord,
        scheduled: Instant,
        idle: Option<Conn>,
        timed: Timed,
    ) -> Option<Conn> {
        let start = Instant::now();
        let req = self.p.target.request(&rec.path, self.p.persistent.is_some());
        let (e, reusable) = self.attempt_until_done(&req, client, idle).await;
        let rs = self.p.run_start;
        let record = RequestRecord {
            id,
            client,
            path: rec.path.clone(),
            size_bytes: rec.size_bytes,
            bytes_received: e.prog.body_bytes,
            status: e.prog.status,
            outcome: e.outcome,
            attempts: e.attempts,
            scheduled_s: secs(rs, scheduled),
            start_s: secs(rs, start),
            connected_s: e.connected.map(|t| secs(rs, t)),
            first_byte_s: e.prog.first_byte.map(|t| secs(rs, t)),
            done_s: Some(secs(rs, e.done)),
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
            send_us: e.first_sent.map(|s| micros(start, s)),
        });
        self.send(Msg { rec: record, lateness_us, timing, wire_bytes: e.wire, fail_reason: e.reason });
        reusable
    }

    pub(super) async fn run_job(self: Rc<Self>, job: Job) {
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
}
