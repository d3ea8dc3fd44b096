//! End-to-end: real sockets on 127.0.0.1 (ephemeral ports), a real gatekeeper, and an
//! in-test upstream whose request types have known, very different costs (sleeps), plus
//! upstreams that refuse, reset or hang. Each fault in depth, with its bounds and the
//! proxy back at rest after it: `faults.rs`.
//!
//! A test that waits, times or orders runs under tokio's paused clock, as `differential.rs`
//! does: time moves only when every task waits on a timer (the upstream's sleeps, the
//! proxy's timeouts, a client's pause), and loopback I/O takes none, so waits, timeouts,
//! estimates and orders are exact on any machine, and the seconds they span cost no real
//! time. The proxy's clock is tokio's, so it sees the same time. Tests with nothing timed
//! (headers, a reset) run on two threads; busy polling runs on the wall clock (its test
//! says why).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use shortfirst_core::admission::AdmissionPolicy;
use shortfirst_gatekeeper::config::{CapacitySetting, Upstream};
use shortfirst_gatekeeper::{Gatekeeper, ProxyConfig};
use support::{refused_addr, resetting_upstream, start_proxy, wait_until, Proxy};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Instant;

mod support;

const FAST_MS: u64 = 2;
const SLOW_MS: u64 = 200;

/// Upstream: `/fast` (2 ms), `/slow` (200 ms), `/sleep/N` (N ms), `/echo` (body and
/// headers back), `/hang` (never answers). Counts accepted connections.
async fn test_upstream() -> (SocketAddr, Arc<AtomicUsize>) {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let conns = Arc::new(AtomicUsize::new(0));
    let c2 = conns.clone();
    tokio::spawn(async move {
        loop {
            let (s, _) = l.accept().await.unwrap();
            c2.fetch_add(1, SeqCst);
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(|req: Request<Incoming>| async move {
                    let path = req.uri().path().to_string();
                    let ms = match path.as_str() {
                        "/fast" => Some(FAST_MS),
                        "/slow" => Some(SLOW_MS),
                        p if p.starts_with("/sleep/") => p[7..].parse().ok(),
                        _ => None,
                    };
                    if let Some(ms) = ms {
                        tokio::time::sleep(Duration::from_millis(ms)).await;
                        return Ok::<_, Infallible>(Response::new(Full::new(Bytes::from(path))));
                    }
                    match path.as_str() {
                        "/echo" => {
                            let mut head = String::new();
                            for (k, v) in req.headers() {
                                head.push_str(&format!("{}: {}\n", k, v.to_str().unwrap_or("?")));
                            }
                            let body = req.into_body().collect().await.unwrap().to_bytes();
                            head.push('\n');
                            let mut out = head.into_bytes();
                            out.extend_from_slice(&body);
                            let mut r = Response::new(Full::new(Bytes::from(out)));
                            r.headers_mut().insert("keep-alive", "timeout=5".parse().unwrap());
                            r.headers_mut().insert("connection", "x-private".parse().unwrap());
                            r.headers_mut().insert("x-private", "1".parse().unwrap());
                            Ok(r)
                        }
                        "/hang" => {
                            std::future::pending::<()>().await;
                            unreachable!()
                        }
                        _ => {
                            let mut r = Response::new(Full::new(Bytes::new()));
                            *r.status_mut() = StatusCode::NOT_FOUND;
                            Ok(r)
                        }
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(s), svc).await;
            });
        }
    });
    (addr, conns)
}

fn client() -> Client<HttpConnector, Full<Bytes>> {
    Client::builder(TokioExecutor::new()).build(HttpConnector::new())
}

async fn get(
    c: &Client<HttpConnector, Full<Bytes>>,
    addr: SocketAddr,
    path: &str,
) -> (StatusCode, hyper::HeaderMap, String) {
    let req = Request::get(format!("http://{addr}{path}")).body(Full::new(Bytes::new())).unwrap();
    let resp = c.request(req).await.unwrap();
    let status = resp.status();
    let headers = resp.headers().clone();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    (status, headers, String::from_utf8_lossy(&body).into_owned())
}

/// Teach the estimator both types (sequentially, so the measurements are uncontended).
async fn warm(c: &Client<HttpConnector, Full<Bytes>>, p: &Proxy) {
    for _ in 0..3 {
        assert_eq!(get(c, p.addr, "/fast").await.0, StatusCode::OK);
        assert_eq!(get(c, p.addr, "/slow").await.0, StatusCode::OK);
    }
}

/// Occupy the capacity with one slow request, queue 3 slow then 3 fast requests, and return
/// the order in which the queued ones completed.
async fn completions_behind_slow(policy: AdmissionPolicy) -> Vec<&'static str> {
    let (up, _) = test_upstream().await;
    // Capacity just under one slow request: a slow request runs alone (empty-system rule).
    let p = start_proxy(up, |c| {
        c.policy = policy;
        c.capacity = CapacitySetting::Fixed { capacity_us: 200_000 };
    })
    .await;
    let c = client();
    warm(&c, &p).await;
    let blocker = tokio::spawn({
        let c = c.clone();
        async move { get(&c, p.addr, "/slow").await }
    });
    wait_until("blocker admitted", Duration::from_secs(10), || p.handle.snapshot().in_flight == 1).await;
    let done = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for (i, path) in ["/slow", "/slow", "/slow", "/fast", "/fast", "/fast"].into_iter().enumerate() {
        let (c, addr, done) = (c.clone(), p.addr, done.clone());
        tasks.push(tokio::spawn(async move {
            let r = get(&c, addr, path).await;
            done.lock().unwrap().push(path);
            r.0
        }));
        let h = p.handle.clone();
        wait_until("request queued", Duration::from_secs(10), move || h.snapshot().queue_len == i + 1).await;
    }
    for t in tasks {
        assert_eq!(t.await.unwrap(), StatusCode::OK);
    }
    blocker.await.unwrap();
    let snap = p.handle.snapshot();
    assert_eq!((snap.load_us, snap.in_flight, snap.queue_len), (0, 0, 0));
    let order = done.lock().unwrap().clone();
    order
}

#[tokio::test(start_paused = true)]
async fn sjf_serves_cheap_requests_before_queued_expensive_ones() {
    // SJF: the fast requests go as soon as the blocker finishes, ahead of the slow ones
    // queued before them. FIFO: behind the three slow ones, which run one at a time.
    let sjf = completions_behind_slow(AdmissionPolicy::Sjf).await;
    assert_eq!(sjf, ["/fast", "/fast", "/fast", "/slow", "/slow", "/slow"], "sjf");
    let fifo = completions_behind_slow(AdmissionPolicy::Fifo).await;
    assert_eq!(fifo, ["/slow", "/slow", "/slow", "/fast", "/fast", "/fast"], "fifo");
}

#[tokio::test(start_paused = true)]
async fn refused_upstream_gives_502_quickly_and_releases_load() {
    let p = start_proxy(refused_addr().await, |_| {}).await;
    let c = client();
    for _ in 0..3 {
        let t0 = Instant::now();
        let (status, _, _) = get(&c, p.addr, "/fast").await;
        assert_eq!(status, StatusCode::BAD_GATEWAY);
        assert_eq!(t0.elapsed(), Duration::ZERO, "answered without waiting on any timer");
    }
    let s = p.handle.snapshot();
    assert_eq!((s.load_us, s.in_flight), (0, 0));
    assert!(s.types.iter().all(|t| t.3 == 0), "failures must not be samples: {:?}", s.types);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reset_upstream_gives_502_and_releases_load() {
    let p = start_proxy(resetting_upstream().await, |_| {}).await;
    let c = client();
    let (status, _, _) = get(&c, p.addr, "/slow").await;
    assert_eq!(status, StatusCode::BAD_GATEWAY);
    let s = p.handle.snapshot();
    assert_eq!((s.load_us, s.in_flight), (0, 0));
    assert!(s.types.iter().all(|t| t.3 == 0));
}

/// The clock jumps to the timeout once everything waits: the bound is exact.
#[tokio::test(start_paused = true)]
async fn hanging_upstream_gives_504_after_the_timeout() {
    let (up, _) = test_upstream().await;
    let p = start_proxy(up, |c| c.upstream_timeout = Duration::from_millis(300)).await;
    let c = client();
    let t0 = Instant::now();
    let (status, _, _) = get(&c, p.addr, "/hang").await;
    let el = t0.elapsed();
    assert_eq!(status, StatusCode::GATEWAY_TIMEOUT);
    assert!(el >= Duration::from_millis(300) && el < Duration::from_millis(310), "{el:?}");
    let s = p.handle.snapshot();
    assert_eq!((s.load_us, s.in_flight), (0, 0));
    assert!(s.types.iter().all(|t| t.3 == 0));
}

#[tokio::test(start_paused = true)]
async fn client_disconnect_while_queued_leaves_the_queue() {
    let (up, _) = test_upstream().await;
    let p = start_proxy(up, |c| c.capacity = CapacitySetting::Fixed { capacity_us: 1 }).await;
    let c = client();
    let blocker = tokio::spawn({
        let c = c.clone();
        async move { get(&c, p.addr, "/sleep/800").await }
    });
    wait_until("blocker admitted", Duration::from_secs(30), || p.handle.snapshot().in_flight == 1).await;
    let mut s = TcpStream::connect(p.addr).await.unwrap();
    s.write_all(b"GET /fast HTTP/1.1\r\nHost: x\r\n\r\n").await.unwrap();
    wait_until("queued", Duration::from_secs(30), || p.handle.snapshot().queue_len == 1).await;
    drop(s);
    // Gone from the queue while the blocker still runs (its state, not a wall-time bound).
    wait_until("cancelled", Duration::from_secs(30), || p.handle.snapshot().queue_len == 0).await;
    assert!(!blocker.is_finished(), "the queue emptied only when the blocker finished");
    assert!(p.handle.metrics_text().contains("gatekeeper_cancelled_while_queued_total 1\n"));
    assert_eq!(blocker.await.unwrap().0, StatusCode::OK);
    let snap = p.handle.snapshot();
    assert_eq!((snap.load_us, snap.in_flight), (0, 0));
}

/// The wait limit is measured on tokio's clock: exact.
#[tokio::test(start_paused = true)]
async fn full_queue_and_long_waits_get_503_with_retry_after() {
    let (up, _) = test_upstream().await;
    let p = start_proxy(up, |c| {
        c.capacity = CapacitySetting::Fixed { capacity_us: 1 };
        c.max_queue_len = 1;
        c.max_queue_wait = Some(Duration::from_millis(150));
    })
    .await;
    let c = client();
    let blocker = tokio::spawn({
        let c = c.clone();
        async move { get(&c, p.addr, "/sleep/600").await }
    });
    wait_until("blocker admitted", Duration::from_secs(30), || p.handle.snapshot().in_flight == 1).await;
    let waiter = tokio::spawn({
        let c = c.clone();
        async move {
            let t0 = Instant::now();
            let r = get(&c, p.addr, "/fast").await;
            (r, t0.elapsed())
        }
    });
    wait_until("queued", Duration::from_secs(30), || p.handle.snapshot().queue_len == 1).await;
    let (status, headers, _) = get(&c, p.addr, "/fast").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "queue full");
    assert_eq!(headers["retry-after"], "1");
    let ((status, headers, _), waited) = waiter.await.unwrap();
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "waited too long");
    assert_eq!(headers["retry-after"], "1");
    assert!(waited >= Duration::from_millis(150) && waited < Duration::from_millis(160), "{waited:?}");
    assert_eq!(blocker.await.unwrap().0, StatusCode::OK);
    let m = p.handle.metrics_text();
    assert!(m.contains("gatekeeper_rejected_total{reason=\"queue_full\"} 1\n"), "{m}");
    assert!(m.contains("gatekeeper_rejected_total{reason=\"queue_wait\"} 1\n"), "{m}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn headers_bodies_and_connection_reuse() {
    let (up, conns) = test_upstream().await;
    let p = start_proxy(up, |_| {}).await;
    let c = client();
    let req = Request::post(format!("http://{}/echo", p.addr))
        .header("host", "shop.example")
        .header("connection", "x-drop-me")
        .header("x-drop-me", "1")
        .header("te", "trailers")
        .header("x-keep", "yes")
        .body(Full::new(Bytes::from(vec![b'z'; 100_000])))
        .unwrap();
    let resp = c.request(req).await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    assert!(resp.headers().get("keep-alive").is_none());
    assert!(resp.headers().get("x-private").is_none());
    let body = String::from_utf8(resp.into_body().collect().await.unwrap().to_bytes().to_vec()).unwrap();
    let (head, echoed) = body.split_once("\n\n").unwrap();
    assert_eq!(echoed.len(), 100_000);
    assert!(head.contains("x-keep: yes"), "{head}");
    assert!(!head.contains("x-drop-me") && !head.contains("\nte:"), "{head}");
    assert!(head.contains("forwarded: for=127.0.0.1;proto=http;host=\"shop.example\""), "{head}");
    assert!(head.contains("x-forwarded-for: 127.0.0.1"), "{head}");
    assert!(head.contains("x-forwarded-host: shop.example"), "{head}");
    // The client's Host reaches the backend (not the upstream's address).
    assert!(head.contains("host: shop.example\n"), "{head}");
    for _ in 0..10 {
        assert_eq!(get(&c, p.addr, "/fast").await.0, StatusCode::OK);
    }
    assert_eq!(conns.load(SeqCst), 1, "upstream connection reused");
}

#[tokio::test(start_paused = true)]
async fn metrics_endpoint_reports_types_and_estimates() {
    let (up, _) = test_upstream().await;
    let p = start_proxy(up, |_| {}).await;
    let c = client();
    warm(&c, &p).await;
    let (status, _, m) = get(&c, p.admin, "/metrics").await;
    assert_eq!(status, StatusCode::OK);
    assert!(m.contains("gatekeeper_type_requests_total{type=\"GET /slow\",outcome=\"ok\"} 3\n"), "{m}");
    assert!(m.contains("gatekeeper_type_upstream_seconds_count{type=\"GET /fast\"} 3\n"), "{m}");
    assert!(m.contains("gatekeeper_type_queue_wait_seconds_count{type=\"GET /fast\"} 3\n"), "{m}");
    assert!(m.contains("gatekeeper_capacity_seconds 0.25\n"), "{m}");
    assert!(m.contains("gatekeeper_admitted_total 6\n"), "{m}");
    let est = |name: &str| -> f64 {
        let key = format!("gatekeeper_type_estimated_cost_seconds{{type=\"{name}\"}} ");
        m.lines().find_map(|l| l.strip_prefix(&key)).unwrap().parse().unwrap()
    };
    // Estimates converge to the known costs (tokio's timer rounds a sleep up to the next
    // millisecond).
    assert!((0.2..0.202).contains(&est("GET /slow")), "{}", est("GET /slow"));
    assert!((0.002..0.004).contains(&est("GET /fast")), "{}", est("GET /fast"));
}

#[tokio::test(start_paused = true)]
async fn auto_capacity_grows_when_saturated_without_inflation() {
    let (up, _) = test_upstream().await;
    let p = start_proxy(up, |c| {
        c.capacity = CapacitySetting::Auto(shortfirst_core::admission::auto::AutoConfig {
            initial_capacity_us: 20_000,
            interval_us: 200_000,
            min_samples: 10,
            ..Default::default()
        });
        c.estimator.alpha = 0.5;
    })
    .await;
    let c = client();
    // 16 closed-loop clients of 50 ms requests on a backend that never slows down (sleeps):
    // capacity must grow from 20 ms to several requests' worth.
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut tasks = Vec::new();
    for _ in 0..16 {
        let (c, stop, addr) = (c.clone(), stop.clone(), p.addr);
        tasks.push(tokio::spawn(async move {
            while !stop.load(SeqCst) {
                assert_eq!(get(&c, addr, "/sleep/50").await.0, StatusCode::OK);
            }
        }));
    }
    let h = p.handle.clone();
    wait_until("capacity grew", Duration::from_secs(20), move || h.snapshot().capacity_us >= 200_000).await;
    stop.store(true, SeqCst);
    for t in tasks {
        t.await.unwrap();
    }
}

/// A queued request with a body: the client sends the head and part of the body, then goes
/// away. Its body is not being read (it is not forwarded yet), so the disconnect must still
/// be noticed and the request leave the queue; also when the body was sent completely.
#[tokio::test(start_paused = true)]
async fn client_disconnect_while_queued_with_a_body_leaves_the_queue() {
    let (up, _) = test_upstream().await;
    let p = start_proxy(up, |c| c.capacity = CapacitySetting::Fixed { capacity_us: 1 }).await;
    let c = client();
    let blocker = tokio::spawn({
        let c = c.clone();
        async move { get(&c, p.addr, "/sleep/1500").await }
    });
    wait_until("blocker admitted", Duration::from_secs(30), || p.handle.snapshot().in_flight == 1).await;
    let requests: [&[u8]; 3] = [
        b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nhello",
        b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello",
        b"PUT /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n",
    ];
    for (i, raw) in requests.into_iter().enumerate() {
        let mut s = TcpStream::connect(p.addr).await.unwrap();
        s.write_all(raw).await.unwrap();
        wait_until("queued", Duration::from_secs(30), || p.handle.snapshot().queue_len == 1).await;
        drop(s);
        // Gone from the queue while the blocker still runs (its state, not a wall-time bound).
        wait_until("cancelled", Duration::from_secs(30), || p.handle.snapshot().queue_len == 0).await;
        assert!(!blocker.is_finished(), "request {i}: the queue emptied only when the blocker finished");
        let want = format!("gatekeeper_cancelled_while_queued_total {}\n", i + 1);
        assert!(p.handle.metrics_text().contains(&want), "request {i}");
    }
    assert_eq!(blocker.await.unwrap().0, StatusCode::OK);
    let snap = p.handle.snapshot();
    assert_eq!((snap.load_us, snap.in_flight), (0, 0));
}

/// Completions per second of `clients` closed-loop clients of `path` at `addr` over `window`
/// (after `warmup`).
async fn closed_loop_throughput(
    addr: SocketAddr,
    path: &'static str,
    clients: usize,
    warmup: Duration,
    window: Duration,
) -> f64 {
    let c = client();
    let done = Arc::new(AtomicUsize::new(0));
    let counting = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut tasks = Vec::new();
    for _ in 0..clients {
        let (c, done, counting, stop) = (c.clone(), done.clone(), counting.clone(), stop.clone());
        tasks.push(tokio::spawn(async move {
            while !stop.load(SeqCst) {
                let (status, _, _) = get(&c, addr, path).await;
                assert_eq!(status, StatusCode::OK);
                if counting.load(SeqCst) {
                    done.fetch_add(1, SeqCst);
                }
            }
        }));
    }
    tokio::time::sleep(warmup).await;
    counting.store(true, SeqCst);
    tokio::time::sleep(window).await;
    counting.store(false, SeqCst);
    stop.store(true, SeqCst);
    for t in tasks {
        t.abort();
    }
    done.load(SeqCst) as f64 / window.as_secs_f64()
}

/// `--capacity auto` against a backend that thrashes, in virtual time: 48 closed-loop
/// clients on the synthetic upstream, 8 processors (beyond 8 running requests each one's
/// service time grows with the concurrency) thrashing beyond 12 (the total service rate
/// falls: throughput collapses when all 48 run). Direct access collapses; through the
/// gatekeeper, auto capacity must climb by slow start from less than two requests' worth,
/// overshoot, come back to the knee and stay there: once settled (the last `SETTLED_S` of the run, sampled every
/// 250 ms) 8 to 12 requests run, where the backend serves at its peak, the capacity admits
/// 8 to 13 requests of the learned cost, and throughput is within 5% of the peak. The
/// clock is paused: the upstream's model runs on tokio's timer, so the run is exact and
/// its 42 virtual seconds take about two real ones.
///
/// The knee is at 8-12 requests on purpose: the controller's AIMD steps (+5%, x0.9) move
/// capacity by a fraction of one request there; with a knee of 2 requests one step is a
/// whole request.
#[tokio::test(start_paused = true)]
async fn auto_capacity_settles_at_the_knee_of_a_thrashing_backend() {
    use shortfirst_gatekeeper::synthetic::{self, SynthType, SyntheticConfig};
    const COST_US: u64 = 50_000;
    const CLIENTS: usize = 48;
    const RUN_S: u64 = 30;
    const SETTLED_S: u64 = 10;
    let cfg = SyntheticConfig {
        types: vec![SynthType { name: "a".into(), cost_us: COST_US, weight: 1.0 }],
        cpus: 8,
        slots: 12,
        thrash: 0.5,
        max_running: 10_000,
    };
    let peak_per_s = cfg.throughput_at(8);
    assert_eq!(peak_per_s, cfg.throughput_at(12), "a plateau from 8 to 12 running");
    let collapsed_per_s = cfg.throughput_at(CLIENTS);
    assert!(collapsed_per_s < 0.1 * peak_per_s, "model: {collapsed_per_s} vs {peak_per_s}");
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let up = l.local_addr().unwrap();
    tokio::spawn(synthetic::serve(l, cfg, std::future::pending()));
    // All 48 start together: a request takes 5.7 s, so the window starts after the first.
    let direct = closed_loop_throughput(up, "/t/a", CLIENTS, Duration::from_secs(6), Duration::from_secs(6)).await;
    assert!(direct < 0.1 * peak_per_s, "direct {direct:.1}/s should collapse (peak {peak_per_s:.1}/s)");
    let p = start_proxy(up, |c| {
        c.capacity = CapacitySetting::Auto(shortfirst_core::admission::auto::AutoConfig {
            // Slow start doubles 70 ms to 1.12 s, 22 requests: past the knee, where only
            // the decreases bring it back (with decreases off this fails at 62/s).
            initial_capacity_us: 70_000,
            interval_us: 250_000,
            min_samples: 10,
            ..Default::default()
        });
        c.estimator.alpha = 0.3;
    })
    .await;
    // Every 250 ms: (ms since the start, capacity in requests of the learned cost, in flight).
    let trail = tokio::spawn({
        let h = p.handle.clone();
        async move {
            let mut trail = Vec::new();
            for i in 1..=RUN_S * 4 {
                tokio::time::sleep(Duration::from_millis(250)).await;
                let s = h.snapshot();
                // The one type the clients request: the one with the most samples.
                let estimate_us = s.types.iter().max_by_key(|t| t.3).map_or(0, |t| t.2);
                let requests = s.capacity_us as f64 / estimate_us.max(1) as f64;
                trail.push((i * 250, (requests * 10.0).round() / 10.0, s.in_flight));
            }
            trail
        }
    });
    let (climb, settled) = (Duration::from_secs(RUN_S - SETTLED_S), Duration::from_secs(SETTLED_S));
    let proxied = closed_loop_throughput(p.addr, "/t/a", CLIENTS, climb, settled).await;
    let trail = trail.await.unwrap();
    let after = (RUN_S - SETTLED_S) * 1000;
    let off_knee: Vec<_> = trail
        .iter()
        .filter(|&&(t, requests, in_flight)| {
            t > after && !((8.0..=13.0).contains(&requests) && (8..=12).contains(&in_flight))
        })
        .collect();
    assert!(
        off_knee.is_empty(),
        "capacity left the knee once settled: {off_knee:?}; (ms, capacity in requests, in flight): {trail:?}"
    );
    assert!(
        proxied > 0.95 * peak_per_s,
        "auto {proxied:.1}/s against a peak of {peak_per_s:.1}/s; (ms, capacity in requests, in flight): {trail:?}"
    );
}

/// A queued request's body, partly read ahead while it waited (more than the read-ahead
/// limit), reaches the upstream whole and in order once admitted.
#[tokio::test(start_paused = true)]
async fn queued_request_body_is_forwarded_whole() {
    let (up, _) = test_upstream().await;
    let p = start_proxy(up, |c| c.capacity = CapacitySetting::Fixed { capacity_us: 1 }).await;
    let c = client();
    let blocker = tokio::spawn({
        let c = c.clone();
        async move { get(&c, p.addr, "/sleep/300").await }
    });
    wait_until("blocker admitted", Duration::from_secs(30), || p.handle.snapshot().in_flight == 1).await;
    let body: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
    let req = Request::post(format!("http://{}/echo", p.addr)).body(Full::new(Bytes::from(body.clone()))).unwrap();
    let t = tokio::spawn(async move { c.request(req).await.unwrap() });
    wait_until("queued", Duration::from_secs(30), || p.handle.snapshot().queue_len == 1).await;
    let resp = t.await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let echoed = resp.into_body().collect().await.unwrap().to_bytes();
    let pos = echoed.windows(2).position(|w| w == b"\n\n").unwrap();
    assert_eq!(&echoed[pos + 2..], &body[..]);
    assert_eq!(blocker.await.unwrap().0, StatusCode::OK);
}

/// Answers one request per connection, then closes it `linger` later. With `announce` the
/// response says `connection: close`; without, nothing tells the proxy the connection will
/// not be reused (a server whose keep-alive timeout ran out). Records each request line.
async fn one_shot_upstream(linger: Duration, announce: bool) -> (SocketAddr, Arc<std::sync::Mutex<Vec<String>>>) {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let lines = Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = lines.clone();
    tokio::spawn(async move {
        loop {
            let (mut s, _) = l.accept().await.unwrap();
            let seen = seen.clone();
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut chunk).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                }
                let head = String::from_utf8_lossy(&buf);
                seen.lock().unwrap().push(head.lines().next().unwrap_or("").to_string());
                let close = if announce { "connection: close\r\n" } else { "" };
                let resp = format!("HTTP/1.1 200 OK\r\n{close}content-length: 2\r\n\r\nok");
                let _ = s.write_all(resp.as_bytes()).await;
                tokio::time::sleep(linger).await;
            });
        }
    });
    (addr, lines)
}

/// An upstream that closes kept-alive connections (announced, or silently while they sit
/// idle) costs no request a 502: a closed connection is never handed out again. The
/// request target is sent in origin form.
#[tokio::test(start_paused = true)]
async fn upstream_closing_kept_alive_connections_is_not_an_error() {
    for (linger, gap, announce) in
        [(Duration::from_millis(20), Duration::from_millis(60), false), (Duration::ZERO, Duration::ZERO, true)]
    {
        let (up, lines) = one_shot_upstream(linger, announce).await;
        let p = start_proxy(up, |_| {}).await;
        let c = client();
        for i in 0..20 {
            let (status, _, body) = get(&c, p.addr, "/x?y=1").await;
            assert_eq!(status, StatusCode::OK, "request {i} (linger {linger:?}, announce {announce}): {body}");
            tokio::time::sleep(gap).await;
        }
        let lines = lines.lock().unwrap().clone();
        assert_eq!(lines.len(), 20, "one upstream connection per request: {lines:?}");
        assert!(lines.iter().all(|l| l == "GET /x?y=1 HTTP/1.1"), "{lines:?}");
        assert_eq!(p.handle.snapshot().load_us, 0);
    }
}

/// The idle pool is bounded: with room for one idle upstream connection, two concurrent
/// requests open two, and when both come back the second is closed; the next concurrent pair
/// reuses the one kept and opens one more, and sequential requests reuse the kept one.
#[tokio::test(start_paused = true)]
async fn idle_upstream_connections_are_bounded() {
    let (up, conns) = test_upstream().await;
    let p = start_proxy(up, |c| c.upstream_pool_idle = 1).await;
    let c = client();
    for expected in [2, 3] {
        let (a, b) = tokio::join!(get(&c, p.addr, "/sleep/100"), get(&c, p.addr, "/sleep/100"));
        assert_eq!((a.0, b.0), (StatusCode::OK, StatusCode::OK));
        assert_eq!(conns.load(SeqCst), expected, "only one idle connection is kept");
    }
    for _ in 0..5 {
        assert_eq!(get(&c, p.addr, "/fast").await.0, StatusCode::OK);
    }
    assert_eq!(conns.load(SeqCst), 3, "the kept connection is reused, no new one opened");
}

/// Re-sampling (core::admission): under sjf a type that has gone `resample_after` without a
/// sample has its next request admitted as a probe, ahead of cheaper queued requests. Returns
/// the paths in completion order and the metrics text.
async fn completion_order_with_resampling(resample_after_us: Option<u64>) -> (Vec<&'static str>, String) {
    let (up, _) = test_upstream().await;
    // Capacity just under one slow request: a slow request runs alone.
    let p = start_proxy(up, |c| {
        c.policy = AdmissionPolicy::Sjf;
        c.capacity = CapacitySetting::Fixed { capacity_us: 200_000 };
        c.estimator.resample_after_us = resample_after_us;
    })
    .await;
    let c = client();
    warm(&c, &p).await;
    // Let both types go stale, then occupy the gate: an unseen type is charged the largest
    // estimate (the slow one's), so it runs alone.
    tokio::time::sleep(Duration::from_millis(400)).await;
    let blocker = tokio::spawn({
        let c = c.clone();
        async move { get(&c, p.addr, "/sleep/300").await }
    });
    wait_until("blocker admitted", Duration::from_secs(30), || p.handle.snapshot().in_flight == 1).await;
    let done = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for (i, path) in ["/fast", "/slow", "/fast", "/fast"].into_iter().enumerate() {
        let (c, addr, done) = (c.clone(), p.addr, done.clone());
        tasks.push(tokio::spawn(async move {
            assert_eq!(get(&c, addr, path).await.0, StatusCode::OK);
            done.lock().unwrap().push(path);
        }));
        let h = p.handle.clone();
        wait_until("request queued", Duration::from_secs(30), move || h.snapshot().queue_len == i + 1).await;
    }
    for t in tasks {
        t.await.unwrap();
    }
    blocker.await.unwrap();
    let (_, _, m) = get(&c, p.admin, "/metrics").await;
    let order = done.lock().unwrap().clone();
    (order, m)
}

#[tokio::test(start_paused = true)]
async fn sjf_re_samples_a_stale_type_ahead_of_cheaper_requests() {
    // Plain sjf: the three fast requests go first, the slow one waits for an empty gate.
    // The only probes are each type's first request, while warming up (first sample).
    let (order, m) = completion_order_with_resampling(None).await;
    assert_eq!(order, ["/fast", "/fast", "/fast", "/slow"]);
    assert!(m.contains("gatekeeper_type_probes_total{type=\"GET /slow\"} 1\n"), "{m}");
    assert!(m.contains("gatekeeper_type_probes_total{type=\"GET /fast\"} 1\n"), "{m}");
    // Re-sampling after 300 ms: the first fast and the slow request find their types stale
    // and are probes, first in line in arrival order; the slow one then runs alone before
    // the two later fast requests.
    let (order, m) = completion_order_with_resampling(Some(300_000)).await;
    assert_eq!(order, ["/fast", "/slow", "/fast", "/fast"]);
    assert!(m.contains("gatekeeper_type_probes_total{type=\"GET /slow\"} 2\n"), "{m}");
    assert!(m.contains("gatekeeper_type_probes_total{type=\"GET /fast\"} 2\n"), "{m}");
}

/// `busy_poll`: requests are served (on a current-thread runtime the poller shares the one
/// thread with the client and the upstream, so a poller that did not yield would hang this
/// test), a request slower than the window still completes after the poller stopped, and a
/// window beyond the bound is refused at bind. On the wall clock: the polling window is real
/// time spent spinning, during which a paused clock would not move.
#[tokio::test(flavor = "current_thread")]
async fn busy_polling_serves_requests_and_its_window_is_bounded() {
    let (up, _) = test_upstream().await;
    let mut bad = ProxyConfig::new("127.0.0.1:0".parse().unwrap(), Upstream::parse(&format!("http://{up}")).unwrap());
    bad.busy_poll = Some(shortfirst_gatekeeper::busypoll::MAX_BUSY_POLL + Duration::from_micros(1));
    let err = Gatekeeper::bind(bad).await.err().expect("an 11 ms window is refused").to_string();
    assert!(err.contains("busy-poll"), "{err}");
    let p = start_proxy(up, |c| c.busy_poll = Some(Duration::from_micros(300))).await;
    let c = client();
    for _ in 0..20 {
        assert_eq!(get(&c, p.addr, "/fast").await.0, StatusCode::OK);
    }
    let t0 = Instant::now();
    assert_eq!(get(&c, p.addr, "/slow").await.0, StatusCode::OK);
    assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
    assert_eq!(p.handle.snapshot().in_flight, 0);
}
