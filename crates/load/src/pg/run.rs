//! The generator of `shortfirst load-pg`: connections to a PostgreSQL server (or a proxy in
//! front of one) that run a script's transactions, open loop or closed, and log each one.
//!
//! Open loop: arrivals are a Poisson process at the given rate, drawn from the seed whatever
//! the server does; each waits in a bounded backlog for a free connection and its latency
//! counts from its scheduled start, so time spent waiting anywhere (here, in a proxy, in
//! the server) counts, as pgbench's `-R` counts it. Unlike pgbench, an error does not end a
//! client: a refused transaction is logged with its SQLSTATE and the session goes on, a
//! transaction not done by its scheduled start + the timeout is cancelled (a
//! CancelRequest, as a driver's query timeout sends) and one that is already that late
//! when a connection frees up is skipped, as users give up. (A CancelRequest names a
//! session, not a statement: one that reaches the server as the statement ends can cancel
//! the session's next statement instead, which is then logged `error` 57014. libpq's
//! cancels have the same race.) That is what lets a server or
//! proxy that sheds load be measured: the work it refuses is not waited for.
//!
//! Everything runs on one thread (a current-thread runtime): the connections, the schedule
//! and the log writer share state without locks.

use super::log::{Outcome, TxnRow, TxnWriter};
use super::script::Script;
use crate::run::summary::latencies;
use crate::run::{write_json_atomic, Latencies, LoadError};
use crate::timerfd::TimerFd;
use hdrhistogram::Histogram;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, VecDeque};
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::time::{Duration, Instant, SystemTime};
use tokio::sync::Notify;
use tokio_postgres::{Client, NoTls};

/// Most connections one generator opens.
pub const MAX_CLIENTS: u32 = 10_000;
/// Highest open-loop rate (transactions per second).
pub const MAX_RATE_PER_S: f64 = 1_000_000.0;
/// Default bound of the backlog of arrivals waiting for a free connection; an arrival past
/// it is logged `dropped`.
pub const DEFAULT_BACKLOG: usize = 100_000;
/// Distinct SQLSTATEs counted by name in the summary; the rest are counted as `other`.
const MAX_SQLSTATES: usize = 32;
/// Largest latency the summary's quantiles resolve (an hour, in µs); longer ones count as it.
const MAX_LATENCY_US: u64 = 3_600_000_000;
/// Pause between attempts to reconnect a broken connection.
const RECONNECT_PAUSE: Duration = Duration::from_millis(100);
/// How long, past the end of the schedule, a broken connection keeps trying to reconnect.
const RECONNECT_GRACE: Duration = Duration::from_secs(5);
/// Longest wait, after a timeout's CancelRequest, for the cancelled statement to end before
/// the connection is closed and replaced.
const CANCEL_WAIT: Duration = Duration::from_secs(5);
/// Longest wait for the `ROLLBACK` that ends a multi-statement script after an error.
const ROLLBACK_WAIT: Duration = Duration::from_secs(5);

/// What to run.
pub struct Config {
    pub pg: tokio_postgres::Config,
    pub script: Script,
    pub script_path: PathBuf,
    /// Open loop at this rate; None: closed loop.
    pub rate_per_s: Option<f64>,
    pub clients: u32,
    pub duration_s: f64,
    /// Give up a transaction this long after its scheduled start; None: never.
    pub timeout_s: Option<f64>,
    pub backlog_max: usize,
    pub seed: u64,
    pub connect_timeout_s: f64,
    pub out_dir: PathBuf,
}

#[derive(Debug, thiserror::Error)]
pub enum PgLoadError {
    #[error("{0}")]
    Config(String),
    #[error("client {client}: connecting: {source}")]
    Connect {
        client: u32,
        #[source]
        source: tokio_postgres::Error,
    },
    #[error("client {client}: not connected within {seconds} s")]
    ConnectTimeout { client: u32, seconds: f64 },
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Summary(#[from] LoadError),
}

/// What `summary.json` holds.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Summary {
    pub script: PathBuf,
    pub statements_per_transaction: usize,
    pub model: &'static str,
    pub rate_per_s: Option<f64>,
    pub clients: u32,
    pub duration_s: f64,
    pub timeout_s: Option<f64>,
    pub seed: u64,
    /// Seconds to open every connection, before the schedule starts.
    pub connect_s: f64,
    /// Transactions scheduled (open loop) or started (closed loop).
    pub scheduled: u64,
    pub outcomes: BTreeMap<&'static str, u64>,
    /// Transactions completed without error per second of the schedule.
    pub ok_per_s: f64,
    /// Latency from the scheduled start of the transactions that completed without error.
    pub ok_latency: Latencies,
    pub sqlstates: BTreeMap<String, u64>,
    /// Connections reopened: after one broke, or after a cancelled statement had not ended
    /// within 5 s of its CancelRequest (`cancel_unanswered`).
    pub reconnects: u64,
    pub cancel_unanswered: u64,
    /// The epoch second the schedule started at.
    pub started_epoch_s: f64,
}

impl Config {
    fn check(&self) -> Result<(), PgLoadError> {
        let bad = |m: String| Err(PgLoadError::Config(m));
        if self.clients == 0 || self.clients > MAX_CLIENTS {
            return bad(format!("--clients must be 1..={MAX_CLIENTS}, not {}", self.clients));
        }
        if let Some(r) = self.rate_per_s {
            if !(r > 0.0 && r <= MAX_RATE_PER_S) {
                return bad(format!("--rate must be above 0 and at most {MAX_RATE_PER_S}, not {r}"));
            }
        }
        if !(self.duration_s > 0.0 && self.duration_s.is_finite()) {
            return bad(format!("--duration must be positive, not {}", self.duration_s));
        }
        if self.backlog_max == 0 {
            return bad("--backlog must be at least 1".into());
        }
        Ok(())
    }
}

/// Runs the load to its end; writes `transactions.csv` and `summary.json` into `out_dir`.
pub fn run(cfg: Config) -> Result<Summary, PgLoadError> {
    cfg.check()?;
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| PgLoadError::Io { path, source }
    };
    std::fs::create_dir_all(&cfg.out_dir).map_err(io(&cfg.out_dir))?;
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(io(&cfg.out_dir))?;
    let local = tokio::task::LocalSet::new();
    let summary = local.block_on(&rt, drive(&cfg))?;
    write_json_atomic(&cfg.out_dir.join("summary.json"), &summary)?;
    Ok(summary)
}

/// The wall clock of the log: monotonic instants as epoch seconds.
#[derive(Clone, Copy)]
struct Clock {
    t0: Instant,
    epoch0_s: f64,
}

impl Clock {
    fn now() -> Clock {
        let epoch0_s =
            SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).expect("clock after 1970").as_secs_f64();
        Clock { t0: Instant::now(), epoch0_s }
    }

    fn epoch_s(&self, t: Instant) -> f64 {
        self.epoch0_s + t.saturating_duration_since(self.t0).as_secs_f64()
    }
}

struct Arrival {
    id: u64,
    at: Instant,
}

/// What the connections, the schedule and the log share.
struct Shared {
    /// The script, one copy for every connection.
    script: Script,
    /// The script has several statements: an error or a timeout inside is followed by a
    /// `ROLLBACK`, in case it opened a transaction block.
    multi: bool,
    /// Where and how a broken connection is reopened.
    pg: tokio_postgres::Config,
    connect_timeout: Duration,
    clock: Clock,
    end: Instant,
    timeout: Option<Duration>,
    backlog: RefCell<VecDeque<Arrival>>,
    ready: Notify,
    scheduled_all: Cell<bool>,
    next_id: Cell<u64>,
    log: RefCell<Tally>,
}

/// The rows written and what the summary counts of them.
struct Tally {
    writer: TxnWriter,
    write_error: Option<std::io::Error>,
    outcomes: BTreeMap<Outcome, u64>,
    ok_us: Histogram<u64>,
    ok_sum_us: f64,
    sqlstates: BTreeMap<String, u64>,
    reconnects: u64,
    cancel_unanswered: u64,
}

impl Shared {
    /// The state of a run whose schedule starts now.
    fn new(cfg: &Config, writer: TxnWriter) -> Shared {
        let clock = Clock::now();
        Shared {
            script: cfg.script.clone(),
            multi: cfg.script.statements() > 1,
            pg: cfg.pg.clone(),
            connect_timeout: Duration::from_secs_f64(cfg.connect_timeout_s),
            clock,
            end: clock.t0 + Duration::from_secs_f64(cfg.duration_s),
            timeout: cfg.timeout_s.map(Duration::from_secs_f64),
            backlog: RefCell::new(VecDeque::new()),
            ready: Notify::new(),
            scheduled_all: Cell::new(false),
            next_id: Cell::new(0),
            log: RefCell::new(Tally {
                writer,
                write_error: None,
                outcomes: BTreeMap::new(),
                ok_us: Histogram::new_with_bounds(1, MAX_LATENCY_US, 3).expect("histogram bounds"),
                ok_sum_us: 0.0,
                sqlstates: BTreeMap::new(),
                reconnects: 0,
                cancel_unanswered: 0,
            }),
        }
    }

    /// The next transaction's number.
    fn take_id(&self) -> u64 {
        let id = self.next_id.get();
        self.next_id.set(id + 1);
        id
    }

    fn record(
        &self,
        id: u64,
        client: Option<u32>,
        at: Instant,
        start: Option<Instant>,
        outcome: Outcome,
        state: Option<String>,
    ) {
        // A timed-out transaction is done, for its user, when the timeout gave it up.
        let done = match (outcome, self.timeout) {
            (Outcome::Timeout, Some(t)) => at + t,
            _ => Instant::now(),
        };
        let mut t = self.log.borrow_mut();
        *t.outcomes.entry(outcome).or_default() += 1;
        if outcome == Outcome::Ok {
            let us = done.saturating_duration_since(at).as_micros() as u64;
            t.ok_us.saturating_record(us.max(1));
            t.ok_sum_us += us as f64;
        }
        if let Some(code) = &state {
            let key = if t.sqlstates.len() < MAX_SQLSTATES || t.sqlstates.contains_key(code) {
                code.clone()
            } else {
                "other".into()
            };
            *t.sqlstates.entry(key).or_default() += 1;
        }
        let row = TxnRow {
            id,
            client,
            scheduled_s: self.clock.epoch_s(at),
            start_s: start.map(|s| self.clock.epoch_s(s)),
            done_s: self.clock.epoch_s(done),
            outcome,
            sqlstate: state,
        };
        if t.write_error.is_none() {
            if let Err(e) = t.writer.write(&row) {
                t.write_error = Some(e);
            }
        }
    }
}

async fn drive(cfg: &Config) -> Result<Summary, PgLoadError> {
    let connect_started = Instant::now();
    let mut clients = Vec::with_capacity(cfg.clients as usize);
    // Opened at once, as pgbench does, each bounded by the connect timeout.
    for c in futures_util::future::join_all((0..cfg.clients).map(|c| connect(cfg, c))).await {
        clients.push(c?);
    }
    let connect_s = connect_started.elapsed().as_secs_f64();
    let csv = cfg.out_dir.join("transactions.csv");
    let writer = TxnWriter::create(&csv).map_err(|source| PgLoadError::Io { path: csv.clone(), source })?;
    let shared = Rc::new(Shared::new(cfg, writer));
    let clock = shared.clock;
    let open = cfg.rate_per_s.is_some();
    let mut tasks = Vec::new();
    for (id, client) in clients.into_iter().enumerate() {
        let worker = Worker {
            id: id as u32,
            client,
            rng: ChaCha8Rng::seed_from_u64(cfg.seed.wrapping_add(1 + id as u64)),
            statements: Vec::new(),
            shared: shared.clone(),
        };
        tasks.push(tokio::task::spawn_local(async move {
            if open {
                worker.open().await
            } else {
                worker.closed().await
            }
        }));
    }
    let timer_error = match cfg.rate_per_s {
        Some(rate) => schedule(&shared, rate, cfg.seed, cfg.backlog_max).await.err(),
        None => None,
    };
    // The schedule has ended (or its timer failed, and the run is refused below): the
    // connections end once the backlog is empty.
    shared.scheduled_all.set(true);
    shared.ready.notify_waiters();
    for t in tasks {
        t.await.expect("a connection's task panicked");
    }
    // Arrivals no connection was left to take (every one broke and could not be reopened)
    // are logged too: every scheduled transaction has its row.
    loop {
        let left = shared.backlog.borrow_mut().pop_front();
        let Some(a) = left else { break };
        shared.record(a.id, None, a.at, None, Outcome::Dropped, None);
    }
    if let Some(source) = timer_error {
        return Err(PgLoadError::Io { path: "timerfd".into(), source });
    }
    let shared = Rc::try_unwrap(shared).ok().expect("every task has ended");
    let tally = shared.log.into_inner();
    if let Some(source) = tally.write_error {
        return Err(PgLoadError::Io { path: csv, source });
    }
    let summary = summarize(cfg, &tally, shared.next_id.get(), clock, connect_s);
    tally.writer.finish().map_err(|source| PgLoadError::Io { path: csv, source })?;
    Ok(summary)
}

/// The summary of a finished run.
fn summarize(cfg: &Config, tally: &Tally, scheduled: u64, clock: Clock, connect_s: f64) -> Summary {
    let ok = tally.outcomes.get(&Outcome::Ok).copied().unwrap_or(0);
    Summary {
        script: cfg.script_path.clone(),
        statements_per_transaction: cfg.script.statements(),
        model: if cfg.rate_per_s.is_some() { "open" } else { "closed" },
        rate_per_s: cfg.rate_per_s,
        clients: cfg.clients,
        duration_s: cfg.duration_s,
        timeout_s: cfg.timeout_s,
        seed: cfg.seed,
        connect_s,
        scheduled,
        outcomes: Outcome::ALL.iter().map(|o| (o.as_str(), tally.outcomes.get(o).copied().unwrap_or(0))).collect(),
        ok_per_s: ok as f64 / cfg.duration_s,
        ok_latency: latencies(&tally.ok_us, tally.ok_sum_us),
        sqlstates: tally.sqlstates.clone(),
        reconnects: tally.reconnects,
        cancel_unanswered: tally.cancel_unanswered,
        started_epoch_s: clock.epoch0_s,
    }
}

async fn connect(cfg: &Config, client: u32) -> Result<Client, PgLoadError> {
    open_connection(&cfg.pg, Duration::from_secs_f64(cfg.connect_timeout_s)).await.map_err(|e| match e {
        None => PgLoadError::ConnectTimeout { client, seconds: cfg.connect_timeout_s },
        Some(source) => PgLoadError::Connect { client, source },
    })
}

/// A connection with its I/O driven by a local task; `Err(None)`: the timeout passed.
async fn open_connection(
    pg: &tokio_postgres::Config,
    within: Duration,
) -> Result<Client, Option<tokio_postgres::Error>> {
    let (client, connection) =
        tokio::time::timeout(within, pg.connect(NoTls)).await.map_err(|_| None)?.map_err(Some)?;
    tokio::task::spawn_local(async move {
        // The connection's end is seen by its client (`is_closed`), which reconnects.
        let _ = connection.await;
    });
    Ok(client)
}

/// The open loop's arrivals: a Poisson process at `rate` until the end of the schedule,
/// each released on a nanosecond timer (tokio's own has a resolution of 1 ms, which would
/// add up to a millisecond to every latency).
async fn schedule(shared: &Shared, rate: f64, seed: u64, backlog_max: usize) -> std::io::Result<()> {
    let timer = TimerFd::new()?;
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut at = shared.clock.t0;
    loop {
        let u: f64 = rng.gen();
        at += Duration::from_secs_f64(-(1.0 - u).ln() / rate);
        if at >= shared.end {
            break;
        }
        let wait = at.saturating_duration_since(Instant::now());
        if !wait.is_zero() {
            timer.sleep(wait).await?;
        }
        let id = shared.take_id();
        if shared.backlog.borrow().len() >= backlog_max {
            shared.record(id, None, at, None, Outcome::Dropped, None);
            continue;
        }
        shared.backlog.borrow_mut().push_back(Arrival { id, at });
        shared.ready.notify_one();
    }
    Ok(())
}

/// One connection and the transactions it runs.
struct Worker {
    id: u32,
    client: Client,
    rng: ChaCha8Rng,
    /// The statements of the transaction under way (the buffer is reused).
    statements: Vec<String>,
    shared: Rc<Shared>,
}

impl Worker {
    /// Takes arrivals from the backlog until the schedule has ended and the backlog is empty.
    async fn open(mut self) {
        loop {
            let next = self.shared.backlog.borrow_mut().pop_front();
            let Some(a) = next else {
                if self.shared.scheduled_all.get() {
                    return;
                }
                // One thread: nothing runs between the check above and this wait's
                // registration, so no wake-up is missed.
                self.shared.ready.notified().await;
                continue;
            };
            if !self.shared.backlog.borrow().is_empty() {
                self.shared.ready.notify_one();
            }
            if !self.transaction(a).await {
                return;
            }
        }
    }

    /// Runs transactions back to back until the end of the schedule.
    async fn closed(mut self) {
        while Instant::now() < self.shared.end {
            let id = self.shared.take_id();
            if !self.transaction(Arrival { id, at: Instant::now() }).await {
                return;
            }
        }
    }

    /// One transaction, logged; false when the connection is gone for good.
    async fn transaction(&mut self, a: Arrival) -> bool {
        let deadline = self.shared.timeout.map(|t| a.at + t);
        let start = Instant::now();
        if deadline.is_some_and(|d| start >= d) {
            self.shared.record(a.id, None, a.at, None, Outcome::Skipped, None);
            return true;
        }
        self.shared.script.render(&mut self.rng, &mut self.statements);
        let (outcome, state, stuck) = {
            let work = run_statements(&self.client, &self.statements);
            tokio::pin!(work);
            let result = match deadline {
                Some(d) => tokio::select! {
                    r = &mut work => Some(r),
                    () = tokio::time::sleep_until(d.into()) => None,
                },
                None => Some(work.as_mut().await),
            };
            match result {
                Some(Ok(())) => (Outcome::Ok, None, false),
                Some(Err(e)) if self.client.is_closed() => {
                    (Outcome::Lost, e.code().map(|c| c.code().to_string()), false)
                }
                Some(Err(e)) => (Outcome::Error, e.code().map(|c| c.code().to_string()), false),
                None => {
                    // As a driver's query timeout does: cancel, then wait for the statement to
                    // end, so the cancel cannot hit the connection's next transaction. One
                    // still running (or queued where a cancel does not reach) after
                    // CANCEL_WAIT leaves the connection stuck: it is replaced.
                    let token = self.client.cancel_token();
                    let _ = tokio::time::timeout(self.shared.connect_timeout, token.cancel_query(NoTls)).await;
                    let ended = tokio::time::timeout(CANCEL_WAIT, work.as_mut()).await.is_ok();
                    (Outcome::Timeout, None, !ended)
                }
            }
        };
        self.shared.record(a.id, Some(self.id), a.at, Some(start), outcome, state);
        if stuck {
            self.shared.log.borrow_mut().cancel_unanswered += 1;
            return self.reconnect().await;
        }
        if outcome == Outcome::Lost || self.client.is_closed() {
            return self.reconnect().await;
        }
        if self.shared.multi && outcome != Outcome::Ok {
            let _ = tokio::time::timeout(ROLLBACK_WAIT, self.client.simple_query("ROLLBACK")).await;
        }
        true
    }

    /// A new connection in place of a broken or stuck one, tried until shortly after the
    /// schedule ends.
    async fn reconnect(&mut self) -> bool {
        loop {
            if let Ok(client) = open_connection(&self.shared.pg, self.shared.connect_timeout).await {
                self.client = client;
                self.shared.log.borrow_mut().reconnects += 1;
                return true;
            }
            if Instant::now() > self.shared.end + RECONNECT_GRACE {
                tracing::warn!(client = self.id, "connection lost and not reopened; this client stops");
                return false;
            }
            tokio::time::sleep(RECONNECT_PAUSE).await;
        }
    }
}

async fn run_statements(client: &Client, statements: &[String]) -> Result<(), tokio_postgres::Error> {
    for s in statements {
        client.simple_query(s).await?;
    }
    Ok(())
}
