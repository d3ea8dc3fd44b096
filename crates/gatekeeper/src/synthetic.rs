//! A synthetic dynamic backend with known per-type costs and a concurrency collapse, for the
//! gatekeeper's tests and benchmark (`shortfirst gatekeeper synthetic-upstream`).
//!
//! **Types.** One per TPC-W interaction of the Gatekeeper paper's Table 1 (`TPCW_TABLE1`,
//! from `shared/data/tpcw-costs-gatekeeper-table1.csv`): cost = the no-load database
//! cost clamped to [1 ms, 2 s] (the range), times `scale`; the frequencies are the
//! table's. `GET /t/{name}` (e.g. `/t/best_sellers`) runs one request of that type and
//! answers 200 with a small text body; unknown names get 404. `GET /ping` answers 200 at
//! once without touching the model (to measure a proxy's own overhead).
//!
//! **Service model.** The backend has `cpus` processors shared by all running requests
//! (processor sharing) and thrashes when more than `slots` (C) requests run at once. With
//! `n` running, each progresses at rate
//! `r(n) = min(1, cpus/n) / (1 + thrash * max(0, n - slots))` units of work per unit of
//! time; a request is done when its cost has been served. So throughput rises until `cpus`
//! requests run, stays at its peak up to C (a plateau, as in the paper's Figure 5), and
//! collapses beyond C: the total service rate `cpus / (1 + thrash (n - C))` falls as
//! concurrency grows, like the paper's database (Table 2: more processes, more cache and
//! TLB misses). The model runs in real time in one task (exact processor sharing between
//! events); tokio timers have 1 ms granularity, so completions are up to ~1 ms late.
//!
//! At most `max_running` requests are accepted at once; beyond that the upstream answers
//! 503 at once (a backend's own connection limit).
//!
//! **Useful and wasted work.** A request whose caller leaves before it is served (a client
//! timeout closing the connection through the proxy) leaves the model at its next event;
//! the work already served on it was wasted. `GET /metrics` (Prometheus text) counts both:
//! completed requests and their work, abandoned requests and the work served on them, in
//! seconds of base cost (the units of `cost_us`), so a benchmark can tell how much of the
//! backend's capacity went to requests nobody received.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde::Serialize;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use crate::GatekeeperError;

/// Table 1 of Elnikety et al. 2004: (interaction, no-load cost ms, high-load cost ms,
/// frequency %), TPC-W shopping mix.
pub const TPCW_TABLE1: [(&str, f64, f64, f64); 13] = [
    ("admin_request", 2.84, 3.19, 0.1),
    ("admin_response", 2476.75, 5072.42, 0.09),
    ("best_sellers", 1205.01, 2441.86, 5.0),
    ("buy_confirm", 15.71, 92.80, 1.2),
    ("buy_request", 5.26, 6.66, 2.6),
    ("execute_search", 73.27, 108.73, 17.0),
    ("home", 1.83, 3.22, 16.0),
    ("new_products", 13.82, 15.66, 5.0),
    ("order_display", 7.43, 10.48, 0.66),
    ("order_inquiry", 0.75, 0.05, 0.75),
    ("product_detail", 0.91, 0.30, 17.0),
    ("search_request", 0.22, 0.65, 20.0),
    ("shopping_cart", 0.34, 0.92, 11.6),
];

#[derive(Debug, Clone, Serialize)]
pub struct SynthType {
    pub name: String,
    pub cost_us: u64,
    /// Relative frequency (percent in the TPC-W mix).
    pub weight: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct SyntheticConfig {
    pub types: Vec<SynthType>,
    /// Processors: requests served at full speed at once.
    pub cpus: usize,
    /// C: concurrency beyond which the backend thrashes.
    pub slots: usize,
    pub thrash: f64,
    pub max_running: usize,
}

impl SyntheticConfig {
    /// The TPC-W mix with costs clamped to [1 ms, 2 s] and multiplied by `scale`.
    pub fn tpcw(scale: f64, cpus: usize, slots: usize, thrash: f64) -> Result<Self, GatekeeperError> {
        if !(scale > 0.0 && scale <= 100.0) || cpus == 0 || slots < cpus || !(0.0..=100.0).contains(&thrash) {
            return Err(GatekeeperError::Config(format!(
                "synthetic upstream: need 0 < scale <= 100 (got {scale}), 1 <= cpus (got {cpus}) <= slots (got {slots}), 0 <= thrash <= 100 (got {thrash})"
            )));
        }
        let types = TPCW_TABLE1
            .iter()
            .map(|&(name, ms, _, pct)| SynthType {
                name: name.to_string(),
                cost_us: ((ms.clamp(1.0, 2000.0) * 1000.0 * scale).round() as u64).max(1),
                weight: pct,
            })
            .collect();
        Ok(SyntheticConfig { types, cpus, slots, thrash, max_running: 100_000 })
    }

    /// Mean cost of a request drawn from the mix.
    pub fn mean_cost_us(&self) -> f64 {
        let w: f64 = self.types.iter().map(|t| t.weight).sum();
        self.types.iter().map(|t| t.weight * t.cost_us as f64).sum::<f64>() / w
    }

    /// Per-request service rate with `n` running.
    pub fn rate(&self, n: usize) -> f64 {
        let share = if n <= self.cpus { 1.0 } else { self.cpus as f64 / n as f64 };
        share / (1.0 + self.thrash * n.saturating_sub(self.slots) as f64)
    }

    /// Requests completed per second with `n` always running (the mix's mean cost).
    pub fn throughput_at(&self, n: usize) -> f64 {
        n as f64 * self.rate(n) / (self.mean_cost_us() / 1e6)
    }
}

struct Job {
    cost_us: u64,
    remaining_us: f64,
    done: oneshot::Sender<()>,
}

/// Counts of what the model did with the work it was given (monotonic; `GET /metrics`).
#[derive(Debug, Default)]
pub struct WorkStats {
    completed: AtomicU64,
    /// Base-cost microseconds of the completed requests.
    completed_work_us: AtomicU64,
    abandoned: AtomicU64,
    /// Base-cost microseconds served on requests whose caller left before completion.
    abandoned_work_us: AtomicU64,
    /// Requests in the model now (a gauge; finished ones leave at the model's next event).
    in_model: AtomicU64,
    /// Processor-nanoseconds the model kept busy: `∫ min(n, cpus) dt` over the time `n`
    /// requests were in it (nanoseconds: the model's events can be µs apart). Below
    /// `cpus` × elapsed time the backend had idle processors.
    busy_cpu_ns: AtomicU64,
    /// Microseconds of service given to completed requests beyond their cost: a request
    /// whose work is done keeps its processor share until the model's next event (timer
    /// granularity), which the requests sharing with it lose.
    overrun_us: AtomicU64,
}

/// A snapshot of [`WorkStats`].
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct WorkSnapshot {
    pub completed: u64,
    pub completed_work_us: u64,
    pub abandoned: u64,
    pub abandoned_work_us: u64,
    pub in_model: u64,
    pub busy_cpu_ns: u64,
    pub overrun_us: u64,
}

impl WorkStats {
    pub fn snapshot(&self) -> WorkSnapshot {
        WorkSnapshot {
            completed: self.completed.load(Ordering::Relaxed),
            completed_work_us: self.completed_work_us.load(Ordering::Relaxed),
            abandoned: self.abandoned.load(Ordering::Relaxed),
            abandoned_work_us: self.abandoned_work_us.load(Ordering::Relaxed),
            in_model: self.in_model.load(Ordering::Relaxed),
            busy_cpu_ns: self.busy_cpu_ns.load(Ordering::Relaxed),
            overrun_us: self.overrun_us.load(Ordering::Relaxed),
        }
    }
}

/// Run one request of `cost_us` through the shared-processor model; resolves when served.
#[derive(Clone)]
pub struct Backend {
    tx: mpsc::Sender<(u64, oneshot::Sender<()>)>,
    running: Arc<AtomicUsize>,
    stats: Arc<WorkStats>,
    cfg: Arc<SyntheticConfig>,
}

/// Gives back a `running` place however `serve` ends, including when its caller drops it
/// mid-wait (a client gone): otherwise every abandoned request would leak a place and the
/// upstream would end up refusing everything.
struct RunningPlace<'a>(&'a AtomicUsize);

impl Drop for RunningPlace<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Backend {
    pub fn start(cfg: SyntheticConfig) -> Backend {
        let (tx, rx) = mpsc::channel(1024);
        let cfg = Arc::new(cfg);
        let stats = Arc::new(WorkStats::default());
        tokio::spawn(model(cfg.clone(), rx, stats.clone()));
        Backend { tx, running: Arc::new(AtomicUsize::new(0)), stats, cfg }
    }

    /// `None` when `max_running` requests are already running.
    pub async fn serve(&self, cost_us: u64) -> Option<()> {
        let taken = self.running.fetch_add(1, Ordering::SeqCst);
        let place = RunningPlace(&self.running);
        if taken >= self.cfg.max_running {
            return None;
        }
        let (done_tx, done_rx) = oneshot::channel();
        let ok = self.tx.send((cost_us, done_tx)).await.is_ok() && done_rx.await.is_ok();
        drop(place);
        ok.then_some(())
    }

    pub fn running(&self) -> usize {
        self.running.load(Ordering::SeqCst)
    }

    pub fn stats(&self) -> WorkSnapshot {
        self.stats.snapshot()
    }
}

async fn model(cfg: Arc<SyntheticConfig>, mut rx: mpsc::Receiver<(u64, oneshot::Sender<()>)>, stats: Arc<WorkStats>) {
    let mut jobs: Vec<Job> = Vec::new();
    let mut last = Instant::now();
    loop {
        advance(&cfg, &mut jobs, &mut last, Instant::now(), &stats);
        let next = jobs.iter().map(|j| j.remaining_us).fold(f64::INFINITY, f64::min);
        let sleep = if next.is_finite() {
            let wait_us = next / cfg.rate(jobs.len());
            Some(tokio::time::sleep_until(last + Duration::from_secs_f64(wait_us / 1e6)))
        } else {
            None
        };
        tokio::select! {
            msg = rx.recv() => match msg {
                Some((cost_us, done)) => {
                    // Serve the jobs already running up to this arrival at the old rate
                    // first: the newcomer must not be credited with time before it came.
                    advance(&cfg, &mut jobs, &mut last, Instant::now(), &stats);
                    jobs.push(Job { cost_us, remaining_us: cost_us as f64, done });
                    stats.in_model.store(jobs.len() as u64, Ordering::Relaxed);
                }
                None => return,
            },
            _ = async { match sleep { Some(s) => s.await, None => std::future::pending().await } } => {}
        }
    }
}

/// Serve every job from `last` to `now`, exactly as processor sharing would: the interval is
/// cut at each completion inside it, where the finished job leaves and the others' rate
/// changes. Then release the finished jobs and those whose caller gave up.
///
/// Exact, not "everyone at the rate of the concurrency at the last event": the model wakes
/// on tokio timers (1 ms granularity) and its task can be scheduled late, so a job is often
/// noticed finished after its finish moment. Serving the whole interval at the old rate
/// would keep giving the finished job its share until it is noticed, and take that share
/// from the jobs still running: measured before this was exact, at twice the saturating
/// load in the closed model, 0.13-0.18 processor-seconds per second of a 4-processor
/// backend went to finished jobs under sjf (about 260 completions/s, mostly 0.25-1 ms
/// requests) against 0.06 under fifo (185/s), so the model charged a policy that completes
/// many short requests for its own timer. The response itself still leaves when the model
/// notices (up to ~1 ms late), but the processors do not idle meanwhile. Bounded: each cut
/// removes at least one job.
///
/// What was served on a job whose caller gave up is counted as wasted.
fn advance(cfg: &SyntheticConfig, jobs: &mut Vec<Job>, last: &mut Instant, now: Instant, stats: &WorkStats) {
    let mut left_us = now.saturating_duration_since(*last).as_secs_f64() * 1e6;
    *last = (*last).max(now);
    let mut busy_cpu_us = 0.0;
    while !jobs.is_empty() && left_us > 0.0 {
        let rate = cfg.rate(jobs.len());
        let first_done_us = jobs.iter().map(|j| j.remaining_us).fold(f64::INFINITY, f64::min).max(0.0) / rate;
        let piece_us = first_done_us.min(left_us);
        busy_cpu_us += piece_us * jobs.len().min(cfg.cpus) as f64;
        left_us -= piece_us;
        let served = piece_us * rate;
        let mut i = 0;
        let mut finished_any = false;
        while i < jobs.len() {
            jobs[i].remaining_us -= served;
            if jobs[i].remaining_us <= 0.5 {
                finished_any = true;
                let j = jobs.swap_remove(i);
                if j.done.send(()).is_ok() {
                    stats.completed.fetch_add(1, Ordering::Relaxed);
                    stats.completed_work_us.fetch_add(j.cost_us, Ordering::Relaxed);
                    stats.overrun_us.fetch_add((-j.remaining_us).max(0.0).round() as u64, Ordering::Relaxed);
                } else {
                    // Served in full for a caller that had left.
                    stats.abandoned.fetch_add(1, Ordering::Relaxed);
                    stats.abandoned_work_us.fetch_add(j.cost_us, Ordering::Relaxed);
                }
            } else {
                i += 1;
            }
        }
        if !finished_any {
            break; // the interval ended before the next completion
        }
    }
    stats.busy_cpu_ns.fetch_add((busy_cpu_us * 1e3).round() as u64, Ordering::Relaxed);
    let mut i = 0;
    while i < jobs.len() {
        if jobs[i].done.is_closed() {
            let j = jobs.swap_remove(i);
            let served_us = (j.cost_us as f64 - j.remaining_us.max(0.0)).round() as u64;
            stats.abandoned.fetch_add(1, Ordering::Relaxed);
            stats.abandoned_work_us.fetch_add(served_us.min(j.cost_us), Ordering::Relaxed);
        } else {
            i += 1;
        }
    }
    stats.in_model.store(jobs.len() as u64, Ordering::Relaxed);
}

/// Serve the synthetic upstream on `listener` until `shutdown` resolves.
pub async fn serve(
    listener: TcpListener,
    cfg: SyntheticConfig,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<(), GatekeeperError> {
    let backend = Backend::start(cfg.clone());
    let cfg = Arc::new(cfg);
    let accept = async {
        loop {
            let (stream, _peer): (_, SocketAddr) = match listener.accept().await {
                Ok(x) => x,
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            let _ = stream.set_nodelay(true);
            let backend = backend.clone();
            let cfg = cfg.clone();
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(move |req: Request<Incoming>| {
                    let backend = backend.clone();
                    let cfg = cfg.clone();
                    async move { Ok::<_, std::convert::Infallible>(respond(&cfg, &backend, req).await) }
                });
                let _ = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), svc).await;
            });
        }
    };
    tokio::select! {
        _ = accept => {}
        _ = shutdown => {}
    }
    Ok(())
}

fn text(status: StatusCode, body: String) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    r
}

async fn respond(cfg: &SyntheticConfig, backend: &Backend, req: Request<Incoming>) -> Response<Full<Bytes>> {
    let path = req.uri().path();
    if path == "/ping" {
        // No backend work: for measuring what a proxy in front adds.
        return text(StatusCode::OK, "pong\n".into());
    }
    if path == "/metrics" {
        return text(StatusCode::OK, metrics_text(&backend.stats()));
    }
    let Some(name) = path.strip_prefix("/t/") else {
        return text(StatusCode::NOT_FOUND, "synthetic upstream: GET /t/{type}\n".into());
    };
    let Some(t) = cfg.types.iter().find(|t| t.name == name) else {
        return text(StatusCode::NOT_FOUND, format!("unknown type {name:?}\n"));
    };
    match backend.serve(t.cost_us).await {
        Some(()) => text(StatusCode::OK, format!("{} {}us\n", t.name, t.cost_us)),
        None => text(StatusCode::SERVICE_UNAVAILABLE, "synthetic upstream: too many requests\n".into()),
    }
}

/// Prometheus text of the work counters (work in seconds of base cost).
pub fn metrics_text(s: &WorkSnapshot) -> String {
    format!(
        "# HELP synthetic_requests_total Requests that left the model, by outcome (completed, or abandoned by their caller).\n\
         # TYPE synthetic_requests_total counter\n\
         synthetic_requests_total{{outcome=\"completed\"}} {}\n\
         synthetic_requests_total{{outcome=\"abandoned\"}} {}\n\
         # HELP synthetic_work_seconds_total Base-cost work served, on completed requests or wasted on abandoned ones.\n\
         # TYPE synthetic_work_seconds_total counter\n\
         synthetic_work_seconds_total{{outcome=\"completed\"}} {:.6}\n\
         synthetic_work_seconds_total{{outcome=\"abandoned\"}} {:.6}\n\
         # HELP synthetic_in_model Requests in the service model now.\n\
         # TYPE synthetic_in_model gauge\n\
         synthetic_in_model {}\n\
         # HELP synthetic_busy_cpu_seconds_total Processor-seconds busy: integral of min(requests in the model, cpus) over time.\n\
         # TYPE synthetic_busy_cpu_seconds_total counter\n\
         synthetic_busy_cpu_seconds_total {:.6}\n\
         # HELP synthetic_overrun_seconds_total Service given to completed requests beyond their cost (held until the model's next event).\n\
         # TYPE synthetic_overrun_seconds_total counter\n\
         synthetic_overrun_seconds_total {:.6}\n",
        s.completed,
        s.abandoned,
        s.completed_work_us as f64 / 1e6,
        s.abandoned_work_us as f64 / 1e6,
        s.in_model,
        s.busy_cpu_ns as f64 / 1e9,
        s.overrun_us as f64 / 1e6,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tpcw_mix_costs_span_1ms_to_2s() {
        let c = SyntheticConfig::tpcw(1.0, 4, 8, 0.1).unwrap();
        let min = c.types.iter().map(|t| t.cost_us).min().unwrap();
        let max = c.types.iter().map(|t| t.cost_us).max().unwrap();
        assert_eq!((min, max), (1_000, 2_000_000));
        let w: f64 = c.types.iter().map(|t| t.weight).sum();
        assert!((w - 97.0).abs() < 0.01, "{w}");
        assert!(SyntheticConfig::tpcw(0.0, 4, 8, 0.1).is_err());
        assert!(SyntheticConfig::tpcw(1.0, 8, 4, 0.1).is_err());
    }

    #[test]
    fn throughput_plateaus_from_cpus_to_slots_then_collapses() {
        let c = SyntheticConfig::tpcw(1.0, 4, 16, 0.1).unwrap();
        let peak = c.throughput_at(4);
        assert!(c.throughput_at(2) < 0.6 * peak);
        assert!((c.throughput_at(16) - peak).abs() < 1e-9 * peak);
        assert!(c.throughput_at(24) < 0.6 * peak);
        assert!(c.throughput_at(56) < 0.25 * peak);
    }

    #[tokio::test]
    async fn ping_answers_without_backend_work_and_unknown_types_404() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        tokio::spawn(serve(l, SyntheticConfig::tpcw(1.0, 1, 1, 0.0).unwrap(), std::future::pending()));
        for (path, want) in [("/ping", "200 OK"), ("/t/nope", "404 Not Found"), ("/t/home", "200 OK")] {
            let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
            s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes())
                .await
                .unwrap();
            let mut out = String::new();
            s.read_to_string(&mut out).await.unwrap();
            assert!(out.starts_with(&format!("HTTP/1.1 {want}")), "{path}: {out}");
        }
    }

    #[tokio::test]
    async fn model_serves_in_real_time_with_sharing() {
        let mut c = SyntheticConfig::tpcw(1.0, 1, 1, 0.0).unwrap();
        c.max_running = 2;
        let b = Backend::start(c);
        let t0 = Instant::now();
        // Two 40 ms jobs sharing one slot: both finish at ~80 ms.
        let (x, y) = tokio::join!(b.serve(40_000), b.serve(40_000));
        let el = t0.elapsed();
        assert!(x.is_some() && y.is_some());
        assert!(el >= Duration::from_millis(78) && el < Duration::from_millis(200), "{el:?}");
    }

    #[tokio::test]
    async fn abandoned_requests_count_their_served_work_as_wasted_and_free_their_place() {
        let b = Backend::start(SyntheticConfig::tpcw(1.0, 1, 1, 0.0).unwrap());
        assert!(b.serve(10_000).await.is_some());
        // The caller leaves a 1 s request after ~30 ms (a client timeout).
        assert!(tokio::time::timeout(Duration::from_millis(30), b.serve(1_000_000)).await.is_err());
        assert_eq!(b.running(), 0, "the abandoned request gave its place back");
        // The model notices at its next event.
        assert!(b.serve(1_000).await.is_some());
        let s = b.stats();
        assert_eq!((s.completed, s.completed_work_us, s.abandoned), (2, 11_000, 1), "{s:?}");
        assert!((25_000..300_000).contains(&s.abandoned_work_us), "{s:?}");
        let text = metrics_text(&s);
        assert!(text.contains("synthetic_requests_total{outcome=\"abandoned\"} 1\n"), "{text}");
        assert!(text.contains("synthetic_work_seconds_total{outcome=\"completed\"} 0.011000\n"), "{text}");
    }

    /// A completion inside an interval cuts it: the finished job leaves at its finish moment
    /// and the other gets the processor from then on, however late the model looks. (The
    /// model once served the whole interval at the old rate, so a finished job kept its
    /// share until the next timer: processors lost to the timer, most under sjf.)
    #[tokio::test]
    async fn a_finished_job_gives_its_share_back_at_its_finish_moment() {
        let cfg = SyntheticConfig::tpcw(1.0, 1, 8, 0.0).unwrap();
        let stats = WorkStats::default();
        let (tx_short, mut rx_short) = oneshot::channel();
        let (tx_long, mut rx_long) = oneshot::channel();
        let mut jobs = vec![
            Job { cost_us: 1_000, remaining_us: 1_000.0, done: tx_short },
            Job { cost_us: 10_000, remaining_us: 10_000.0, done: tx_long },
        ];
        let t0 = Instant::now();
        let mut last = t0;
        // Looked at 6 ms later in one step. One processor shared by two: the short job is
        // done at 2 ms; the long one then runs alone for 4 ms: 10 - 1 - 4 = 5 ms left (the
        // old rule left 10 - 3 = 7 ms and gave the finished job 2 ms of processor).
        advance(&cfg, &mut jobs, &mut last, t0 + Duration::from_millis(6), &stats);
        assert_eq!(jobs.len(), 1);
        assert!((jobs[0].remaining_us - 5_000.0).abs() < 1.0, "{}", jobs[0].remaining_us);
        assert!(rx_short.try_recv().is_ok() && rx_long.try_recv().is_err());
        let s = stats.snapshot();
        assert_eq!((s.completed, s.completed_work_us, s.overrun_us, s.in_model), (1, 1_000, 0, 1), "{s:?}");
        assert_eq!(s.busy_cpu_ns, 6_000_000, "one processor busy all 6 ms");
        // 20 ms later: the long job finished at 11 ms; the processor idles after it.
        advance(&cfg, &mut jobs, &mut last, t0 + Duration::from_millis(26), &stats);
        assert!(jobs.is_empty() && rx_long.try_recv().is_ok());
        let s = stats.snapshot();
        assert_eq!((s.completed, s.completed_work_us, s.overrun_us), (2, 11_000, 0), "{s:?}");
        assert_eq!(s.busy_cpu_ns, 11_000_000, "busy until the last job's finish, not until the look");
        assert_eq!(last, t0 + Duration::from_millis(26));
    }

    /// A job that arrives while another is running gets no service for the time before it
    /// arrived (the model once credited a newcomer with the whole gap since the previous
    /// event, so a 20 ms request could finish in a few ms).
    #[tokio::test]
    async fn a_newcomer_is_not_served_before_it_arrives() {
        let mut c = SyntheticConfig::tpcw(1.0, 2, 2, 0.0).unwrap();
        c.max_running = 2;
        let b = Backend::start(c);
        let long = tokio::spawn({
            let b = b.clone();
            async move { b.serve(200_000).await }
        });
        tokio::time::sleep(Duration::from_millis(60)).await;
        let t0 = Instant::now();
        assert!(b.serve(20_000).await.is_some());
        let el = t0.elapsed();
        // Two processors: the newcomer runs at full speed from its arrival, 20 ms.
        assert!(el >= Duration::from_millis(19), "a 20 ms job took {el:?}");
        assert!(long.await.unwrap().is_some());
    }
}
