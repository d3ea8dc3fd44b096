//! The proxy and the simulator's model run one admission controller: on the same arrivals
//! and the same service times they admit the same requests at the same moments.
//!
//! The proxy runs for real — sockets on 127.0.0.1, hyper on both sides — under tokio's
//! paused clock, so time moves only when every task waits on a timer: the upstream's
//! services (a sleep per request type) and the clients' arrivals. Loopback I/O takes no
//! virtual time, so each measured service time is exactly the upstream's sleep, and every
//! time is a whole millisecond (tokio's timer resolution). The model
//! (`shortfirst_sim::gatekeeper`) gets the same arrivals as a script and a backend that
//! serves each request at full speed whatever the concurrency, so each service takes
//! exactly its demand too. The upstream records when it receives each request: the
//! admission time.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use shortfirst_core::admission::{ChargeAt, EstimatorConfig, GateConfig, PatienceRule};
use shortfirst_gatekeeper::config::CapacitySetting;
use shortfirst_sim::gatekeeper::{self as model, BackendModel, ModelConfig, ModelType};
use support::start_proxy;
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Instant;

mod support;

/// Service time of each request type, ms.
const DEMAND_MS: [u64; 3] = [2, 30, 120];
const CAPACITY_US: u64 = 100_000;

/// Arrivals: `(ms after the start, type)`, a burst that queues and a tail that drains.
fn arrivals() -> Vec<(u64, usize)> {
    let mut v = Vec::new();
    let mut t = 0;
    // xorshift: a fixed, varied sequence of gaps and types.
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    for _ in 0..60 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let ty = match x % 10 {
            0..=6 => 0,
            7 | 8 => 1,
            _ => 2,
        };
        v.push((t, ty));
        t += (x >> 8) % 9; // 0..8 ms apart: about twice what the backend serves
    }
    v
}

/// The upstream: `/t{type}/{arrival}` sleeps the type's demand; the time each request
/// arrives, µs after `start`, is recorded by arrival index.
async fn upstream(start: Instant, seen: Arc<Mutex<BTreeMap<usize, u64>>>) -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (s, _) = l.accept().await.unwrap();
            let seen = seen.clone();
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(move |req: Request<Incoming>| {
                    let seen = seen.clone();
                    async move {
                        let mut parts = req.uri().path().trim_start_matches("/t").split('/');
                        let ty: usize = parts.next().unwrap().parse().unwrap();
                        let i: usize = parts.next().unwrap().parse().unwrap();
                        seen.lock().unwrap().insert(i, start.elapsed().as_micros() as u64);
                        tokio::time::sleep(Duration::from_millis(DEMAND_MS[ty])).await;
                        Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"ok"))))
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(s), svc).await;
            });
        }
    });
    addr
}

/// One request on a connection of its own, read to its end.
async fn get(proxy: SocketAddr, path: String) -> u16 {
    let s = TcpStream::connect(proxy).await.unwrap();
    let (mut tx, conn) = hyper::client::conn::http1::handshake(TokioIo::new(s)).await.unwrap();
    tokio::spawn(conn);
    let req = Request::get(path).header("host", "gk").body(Empty::<Bytes>::new()).unwrap();
    let resp = tx.send_request(req).await.unwrap();
    let status = resp.status().as_u16();
    resp.into_body().collect().await.unwrap();
    status
}

/// The proxy's admissions: `(arrival index, admission time µs)` in admission order.
async fn proxy_admissions(policy: &str) -> Vec<(usize, u64)> {
    let start = Instant::now();
    let seen = Arc::new(Mutex::new(BTreeMap::new()));
    let up = upstream(start, seen.clone()).await;
    let p = start_proxy(up, |c| {
        c.capacity = CapacitySetting::Fixed { capacity_us: CAPACITY_US };
        c.policy = policy.parse().unwrap();
        c.patience = PatienceRule::Off;
    })
    .await;
    let clients: Vec<_> = arrivals()
        .into_iter()
        .enumerate()
        .map(|(i, (t_ms, ty))| {
            let addr = p.addr;
            tokio::spawn(async move {
                tokio::time::sleep_until(start + Duration::from_millis(t_ms)).await;
                get(addr, format!("/t{ty}/{i}")).await
            })
        })
        .collect();
    for c in clients {
        assert_eq!(c.await.unwrap(), 200);
    }
    let mut order: Vec<(usize, u64)> = seen.lock().unwrap().iter().map(|(&i, &t)| (i, t)).collect();
    order.sort_by_key(|&(i, t)| (t, i));
    order
}

/// The model's admissions on the same script.
fn model_admissions(policy: &str) -> Vec<(usize, u64)> {
    let script: Vec<(f64, usize)> = arrivals().into_iter().map(|(t, ty)| (t as f64 * 1e3, ty)).collect();
    let types = DEMAND_MS
        .iter()
        .enumerate()
        .map(|(t, &ms)| ModelType { name: format!("t{t}"), demand_us: ms as f64 * 1e3, weight: 1.0 })
        .collect();
    let cfg = ModelConfig {
        types,
        backend: BackendModel { cpus: 1_000_000, slots: 1_000_000, thrash: 0.0, background: 0.0 },
        clients: 1,
        think_mean_us: 0.0,
        gate: Some(GateConfig::new(CAPACITY_US, policy.parse().unwrap())),
        estimator: EstimatorConfig::default(),
        auto: None,
        charge_at: ChargeAt::Admission,
        patience: PatienceRule::Off,
        client_patience_us: None,
        duration_us: 60e6,
        warmup_us: 0.0,
        seed: 1,
        start_together: false,
        script: Some(script),
        timeline_period_us: None,
    };
    let mut order = model::run(&cfg).unwrap().admissions;
    order.sort_by_key(|&(i, t)| (t, i));
    order
}

async fn same_admissions(policy: &str) {
    let (proxy, model) = (proxy_admissions(policy).await, model_admissions(policy));
    assert_eq!(proxy.len(), arrivals().len(), "{policy}: every request reached the upstream");
    assert_eq!(proxy, model, "{policy}: the proxy's admissions (left) against the model's (right)");
    // Something queued, or the comparison would say little.
    let waited = model.iter().filter(|&&(i, t)| t > arrivals()[i].0 * 1000).count();
    assert!(waited > 10, "{policy}: only {waited} requests waited");
}

#[tokio::test(start_paused = true)]
async fn fifo_admits_as_the_model_does() {
    same_admissions("fifo").await;
}

#[tokio::test(start_paused = true)]
async fn sjf_admits_as_the_model_does() {
    same_admissions("sjf").await;
}
