//! The gatekeeper's contract with its backend and its clients, end to end over real sockets:
//! a charge is held until the backend is done with a request whatever the client does, a
//! request whose client is gone is not started, a type is served first come first served,
//! the client's `Host` reaches the backend, and a full type table shows in the metrics.
//!
//! The backends here do their work in tasks of their own, as real application servers do:
//! a request's work goes on after its connection closes, and the backend counts how many
//! run at once. The tests observe counts and orders, not wall-clock bounds.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use shortfirst_core::admission::AdmissionPolicy;
use shortfirst_gatekeeper::config::CapacitySetting;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

mod support;

/// Bound on every wait here: the tests observe counts and orders, not times.
const WAIT: Duration = Duration::from_secs(30);

async fn wait_until(what: &str, f: impl FnMut() -> bool) {
    support::wait_until(what, WAIT, f).await
}

/// Send a request on a fresh connection (closed by the gatekeeper after the response).
async fn send(addr: SocketAddr, path: &str, host: &str) -> TcpStream {
    let req = format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
    support::send_raw(addr, req.as_bytes()).await
}

/// The status line of the response on `s`, read to the connection's end.
async fn status_of(s: TcpStream) -> String {
    let r = support::read_response(s, Duration::from_secs(60)).await;
    assert_eq!(r.end, support::End::Closed, "{r:?}");
    r.head.lines().next().unwrap_or("").to_string()
}

/// A gatekeeper in front of `upstream` (its handle and the stop sender in the tuple).
async fn start(
    upstream: SocketAddr,
    f: impl FnOnce(&mut shortfirst_gatekeeper::ProxyConfig),
) -> (SocketAddr, shortfirst_gatekeeper::Handle, tokio::sync::oneshot::Sender<()>) {
    let p = support::start_proxy(upstream, f).await;
    (p.addr, p.handle, p._stop)
}

/// What the backend saw: requests started (by `id`), running now, most running at once,
/// and the `Host` of the last request.
#[derive(Default)]
struct Seen {
    started: Vec<String>,
    running: usize,
    max_running: usize,
    host: String,
}

/// `GET /work?id=ID&ms=N`: N ms of work in a task of its own (it goes on if the connection
/// closes), then a small body. Counts the work running at once.
async fn counting_backend() -> (SocketAddr, Arc<Mutex<Seen>>) {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let seen = Arc::new(Mutex::new(Seen::default()));
    let s2 = seen.clone();
    tokio::spawn(async move {
        loop {
            let (s, _) = l.accept().await.unwrap();
            let seen = s2.clone();
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(move |req: Request<Incoming>| {
                    let seen = seen.clone();
                    async move {
                        let q = req.uri().query().unwrap_or("").to_string();
                        let param = |k: &str| {
                            q.split('&').find_map(|kv| kv.strip_prefix(&format!("{k}="))).unwrap_or("").to_string()
                        };
                        let (id, ms) = (param("id"), param("ms").parse::<u64>().unwrap_or(0));
                        {
                            let mut s = seen.lock().unwrap();
                            s.started.push(id.clone());
                            s.running += 1;
                            s.max_running = s.max_running.max(s.running);
                            s.host = req.headers().get("host").and_then(|h| h.to_str().ok()).unwrap_or("").into();
                        }
                        let work = tokio::spawn(async move {
                            tokio::time::sleep(Duration::from_millis(ms)).await;
                            seen.lock().unwrap().running -= 1;
                        });
                        let _ = work.await;
                        Ok::<_, Infallible>(Response::new(Full::new(Bytes::from(id))))
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(s), svc).await;
            });
        }
    });
    (addr, seen)
}

/// Capacity for one request at a time. A client that leaves after admission must not
/// free its charge while the backend still works on its request; a queued client that
/// leaves must never reach the backend.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_charge_is_held_until_the_backend_is_done_whatever_the_client_does() {
    let (up, seen) = counting_backend().await;
    let (addr, handle, _stop) = start(up, |c| {
        c.capacity = CapacitySetting::Fixed { capacity_us: 1 };
        c.policy = AdmissionPolicy::Fifo;
    })
    .await;
    // a: admitted, its work started; then its client leaves.
    let a = send(addr, "/work?id=a&ms=600", "x").await;
    wait_until("a started", || seen.lock().unwrap().started.len() == 1).await;
    // b queued and staying; c queued, then leaving.
    let b = send(addr, "/work?id=b&ms=100", "x").await;
    wait_until("b queued", || handle.snapshot().queue_len == 1).await;
    let c = send(addr, "/work?id=c&ms=100", "x").await;
    wait_until("c queued", || handle.snapshot().queue_len == 2).await;
    drop(a);
    drop(c);
    assert!(status_of(b).await.contains("200"), "b is served");
    wait_until("all charges back", || handle.snapshot().in_flight == 0).await;
    let s = seen.lock().unwrap();
    assert_eq!(s.max_running, 1, "the backend ran more than the capacity admits");
    assert_eq!(s.started, ["a", "b"], "c left while queued and must not be started");
    let m = handle.metrics_text();
    assert!(m.contains("gatekeeper_type_requests_total{type=\"GET /work?id&ms\",outcome=\"client_gone\"} 1\n"), "{m}");
    assert!(m.contains("gatekeeper_cancelled_while_queued_total 1\n"), "{m}");
}

/// Clients that read the response head and leave mid-body: the backend's remaining
/// response is drained before the next request is admitted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_leaving_mid_response_do_not_free_the_charge_early() {
    // A backend that sends its head at once and the body's end after `ms`.
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let up = l.local_addr().unwrap();
    let seen = Arc::new(Mutex::new(Seen::default()));
    let s2 = seen.clone();
    tokio::spawn(async move {
        loop {
            let (mut s, _) = l.accept().await.unwrap();
            let seen = s2.clone();
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                loop {
                    let n = s.read(&mut buf).await.unwrap_or(0);
                    if n == 0 {
                        return;
                    }
                    let req = String::from_utf8_lossy(&buf[..n]).to_string();
                    let id = req.split("id=").nth(1).and_then(|r| r.split(['&', ' ']).next()).unwrap_or("").to_string();
                    {
                        let mut g = seen.lock().unwrap();
                        g.started.push(id);
                        g.running += 1;
                        g.max_running = g.max_running.max(g.running);
                    }
                    let _ = s.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nhello").await;
                    tokio::time::sleep(Duration::from_millis(300)).await;
                    seen.lock().unwrap().running -= 1;
                    if s.write_all(b"world").await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    let (addr, handle, _stop) = start(up, |c| c.capacity = CapacitySetting::Fixed { capacity_us: 1 }).await;
    let mut clients = Vec::new();
    for i in 0..4 {
        let mut s = send(addr, &format!("/stream?id={i}"), "x").await;
        if i == 0 {
            wait_until("first head", || !seen.lock().unwrap().started.is_empty()).await;
            let mut head = [0u8; 16];
            let _ = s.read(&mut head).await;
            clients.push(Some(s));
        } else {
            let want = i;
            wait_until("queued", || handle.snapshot().queue_len == want).await;
            clients.push(Some(s));
        }
    }
    // Every client leaves as soon as its head arrived; the first right now.
    clients[0] = None;
    for (i, client) in clients.iter_mut().enumerate().skip(1) {
        wait_until("started", || seen.lock().unwrap().started.len() > i).await;
        *client = None;
    }
    wait_until("all charges back", || handle.snapshot().in_flight == 0).await;
    let s = seen.lock().unwrap();
    assert_eq!(s.max_running, 1, "the backend ran more than the capacity admits");
}

/// One type under sjf whose estimate drifts down while its requests wait: they must still
/// be served in arrival order (a later request charged at a lower estimate used to
/// overtake an earlier one).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_single_type_under_sjf_is_served_in_arrival_order() {
    let (up, seen) = counting_backend().await;
    let (addr, handle, _stop) = start(up, |c| {
        c.capacity = CapacitySetting::Fixed { capacity_us: 100_000_000 };
        c.max_in_flight = Some(3);
        c.policy = AdmissionPolicy::Sjf;
    })
    .await;
    // Teach the type a 500 ms cost.
    assert!(status_of(send(addr, "/work?id=warm&ms=500", "x").await).await.contains("200"));
    // Three slots: two long requests and a short one.
    let mut keep = Vec::new();
    // One at a time: sent together, they may reach the backend in any order. `short` is
    // long enough for q1 and q2 to queue behind it, short enough to pull the estimate down.
    for (id, ms) in [("long1", 3_000), ("long2", 3_000), ("short", 300)] {
        keep.push(send(addr, &format!("/work?id={id}&ms={ms}"), "x").await);
        wait_until("started", || seen.lock().unwrap().started.contains(&id.to_string())).await;
    }
    wait_until("three running", || handle.snapshot().in_flight == 3).await;
    // q1 and q2 queue at the 500 ms estimate, q1 first: sent back to back, the proxy's two
    // connection tasks may read them in either order.
    keep.push(send(addr, "/work?id=q1&ms=600", "x").await);
    wait_until("q1 queued", || handle.snapshot().queue_len == 1 || seen.lock().unwrap().started.len() > 4).await;
    keep.push(send(addr, "/work?id=q2&ms=100", "x").await);
    wait_until("q1, q2 queued", || handle.snapshot().queue_len == 2).await;
    // `short` ends: the estimate drops, q1 takes its slot; q3 queues at the lower estimate.
    wait_until("q1 started", || seen.lock().unwrap().started.contains(&"q1".to_string())).await;
    keep.push(send(addr, "/work?id=q3&ms=100", "x").await);
    wait_until("q2, q3 queued", || handle.snapshot().queue_len == 2 || seen.lock().unwrap().started.len() > 6).await;
    for s in keep {
        assert!(status_of(s).await.contains("200"));
    }
    let started = seen.lock().unwrap().started.clone();
    assert_eq!(started, ["warm", "long1", "long2", "short", "q1", "q2", "q3"]);
}

/// The backend sees the client's `Host` (absolute links it builds keep users on the
/// gatekeeper), or the upstream's with `rewrite_host`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_backend_sees_the_clients_host_unless_rewritten() {
    let (up, seen) = counting_backend().await;
    let (addr, _h, _stop) = start(up, |_| {}).await;
    assert!(status_of(send(addr, "/work?id=1", "shop.example:8080").await).await.contains("200"));
    assert_eq!(seen.lock().unwrap().host, "shop.example:8080");
    let (addr, _h, _stop2) = start(up, |c| c.rewrite_host = true).await;
    assert!(status_of(send(addr, "/work?id=2", "shop.example:8080").await).await.contains("200"));
    assert_eq!(seen.lock().unwrap().host, up.to_string());
}

/// A type table too small for the URLs shows in the metrics.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_type_table_shows_in_the_metrics() {
    let (up, _seen) = counting_backend().await;
    let (addr, handle, _stop) = start(up, |c| c.max_types = 3).await;
    for p in ["/a?id=1", "/b?id=1", "/c?id=1", "/d?id=1", "/orders/7.json", "/orders/8.json"] {
        assert!(status_of(send(addr, p, "x").await).await.contains("200"), "{p}");
    }
    let m = handle.metrics_text();
    // Two slots for names: /a and /b; /c, /d and /orders/{id}.json (twice) overflow.
    assert!(m.contains("gatekeeper_type_table_overflow_total 4\n"), "{m}");
    assert!(m.contains("gatekeeper_type_cost_spread_ratio{type=\"(other)\"}"), "{m}");
}
