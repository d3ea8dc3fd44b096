//! The user-space uplink scheduler on real loopback sockets: responses stay
//! byte-exact, the pacer holds the rate, SRPT lets a short response overtake
//! long ones that FAIR makes it share with, and the admin endpoint shows the
//! scheduler. On loopback the pacer is the only bottleneck, so these need no
//! namespace, qdisc or capability (the namespace test with a real shaped link is
//! lab/tests/test_namespace_userspace.py).

// The wall clock: the pacer is a thread of its own (no tokio runtime) on real time.
#![allow(clippy::disallowed_types)]

mod common;

use std::time::{Duration, Instant};

use common::{get, metric, metrics_text, pattern, req, Raw, TestServer};
use shortfirst_server::{Policy, Scheduling, ServerConfig};

const LARGE_BYTES: usize = 1_000_000;

fn user(c: &mut ServerConfig, scheduler: Scheduling, rate_bits_per_s: u64, policy: Policy, exact: bool) {
    c.scheduler = scheduler;
    c.link_rate_bits_per_s = Some(rate_bits_per_s);
    c.policy = policy;
    c.srpt_exact = exact;
    c.socket_priority = false;
    c.admin = Some("127.0.0.1:0".parse().unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn responses_are_byte_exact_and_the_admin_endpoint_shows_the_scheduler() {
    let mut s = TestServer::start(|c| user(c, Scheduling::User, 1_000_000_000, Policy::Srpt, true)).await;
    let mut c = Raw::connect(s.addr).await;
    for (path, len) in [("/medium.bin", 100_000), ("/small.txt", 100), ("/big.bin", 300_000)] {
        c.send(req(path).as_bytes()).await;
        let r = c.response(false).await.unwrap();
        assert_eq!((r.status, r.body.len()), (200, len), "{path}");
        assert_eq!(r.body, pattern(len), "{path}");
    }
    c.send(b"GET /big.bin HTTP/1.1\r\nHost: t\r\nRange: bytes=1000-1999\r\n\r\n").await;
    let r = c.response(false).await.unwrap();
    assert_eq!((r.status, &r.body[..]), (206, &pattern(300_000)[1000..2000]));
    c.send(b"HEAD /big.bin HTTP/1.1\r\nHost: t\r\n\r\n").await;
    assert_eq!(c.response(true).await.unwrap().header("content-length"), Some("300000"));
    assert_eq!(get(s.addr, &req("/missing")).await.unwrap().status, 404);

    let m = metrics_text(&s).await;
    assert!(m.contains("shortfirst_uplink_scheduler_info{scheduler=\"user\",policy=\"srpt\""), "{m}");
    assert!(metric(&m, "shortfirst_uplink_grants_total") >= 5.0);
    assert_eq!(metric(&m, "shortfirst_uplink_queue_length"), 0.0);
    assert_eq!(metric(&m, "shortfirst_uplink_registered"), 0.0, "every response let go of its slot");
    let granted: f64 = m
        .lines()
        .filter(|l| l.starts_with("shortfirst_uplink_granted_bytes_total{"))
        .map(|l| l.rsplit(' ').next().unwrap().parse::<f64>().unwrap())
        .sum();
    assert!(granted >= 401_100.0, "{granted}");
    assert!(m.contains("shortfirst_uplink_pacer_lateness_seconds_count"), "{m}");
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pacer_holds_the_uplink_rate() {
    let mut s = TestServer::start(|c| user(c, Scheduling::User, 8_000_000, Policy::Fair, false)).await;
    let started = Instant::now();
    let r = get(s.addr, &req("/big.bin")).await.unwrap();
    let elapsed = started.elapsed().as_secs_f64();
    assert_eq!(r.body.len(), 300_000);
    // 300 KB plus ~4.6% headers at 98% of 8 Mbit/s: 0.32 s.
    assert!((0.28..1.5).contains(&elapsed), "300 KB at 8 Mbit/s took {elapsed:.3} s");
    s.stop().await;
}

/// After an idle spell the pacer grants `--pacer-burst-bytes` at once (the
/// link's token bucket lets it out at line rate), and only that: once spent,
/// the credit comes back at the paced rate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_burst_is_granted_at_once_and_then_paced() {
    let mut s = TestServer::start(|c| {
        user(c, Scheduling::User, 1_000_000, Policy::Srpt, true);
        c.pacer_burst_bytes = 120_000;
    })
    .await;
    tokio::time::sleep(Duration::from_millis(1100)).await; // credit accrues from the pacer's start
    let mut times_s = Vec::new();
    for _ in 0..2 {
        let started = Instant::now();
        assert_eq!(get(s.addr, &req("/medium.bin")).await.unwrap().body.len(), 100_000);
        times_s.push(started.elapsed().as_secs_f64());
    }
    // 100 KB is ~105 KB on the wire: 0.86 s at 0.98 Mbit/s without the burst.
    assert!(times_s[0] < 0.3, "within the burst: {times_s:?}");
    assert!(times_s[1] > 0.5, "the burst spent, paced again: {times_s:?}");
    let m = metrics_text(&s).await;
    assert_eq!(metric(&m, "shortfirst_uplink_pacer_burst_seconds"), 0.979591836);
    s.stop().await;
}

/// On a fast link a grant covers a whole short response, head and body: one
/// trip through the scheduler per response, not one per 16 KiB (the quantum
/// is a link time there). A socket that takes only part of a grant costs a
/// second one, so the 100 KB case allows two.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fast_link_grants_a_short_response_once() {
    let mut s = TestServer::start(|c| user(c, Scheduling::User, 40_000_000_000, Policy::Srpt, true)).await;
    let mut c = Raw::connect(s.addr).await;
    let mut grants_before = metric(&metrics_text(&s).await, "shortfirst_uplink_grants_total");
    // (path, body bytes, responses, most grants in all)
    for (path, len, n, most) in [("/small.txt", 100, 20, 20.0), ("/medium.bin", 100_000, 10, 20.0)] {
        for _ in 0..n {
            c.send(req(path).as_bytes()).await;
            let r = c.response(false).await.unwrap();
            assert_eq!(r.body, pattern(len), "{path}");
        }
        let grants = metric(&metrics_text(&s).await, "shortfirst_uplink_grants_total");
        assert!(grants - grants_before >= n as f64 && grants - grants_before <= most, "{path}: {grants} grants");
        grants_before = grants;
    }
    s.stop().await;
}

/// Four 1 MB downloads through a 10 Mbit/s pacer, then a 20 KB fetch: its time.
async fn short_behind_long(policy: Policy, exact: bool) -> f64 {
    let mut s = TestServer::start(|c| user(c, Scheduling::User, 10_000_000, policy, exact)).await;
    std::fs::write(s.root.join("large.bin"), pattern(LARGE_BYTES)).unwrap();
    std::fs::write(s.root.join("short.bin"), pattern(20_000)).unwrap();
    let addr = s.addr;
    let large: Vec<_> = (0..4)
        .map(|_| {
            tokio::spawn(async move {
                let mut c = Raw::connect(addr).await;
                c.send(req("/large.bin").as_bytes()).await;
                tokio::time::timeout(Duration::from_secs(30), c.response(false)).await.unwrap().unwrap().body.len()
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let started = Instant::now();
    let r = get(addr, &req("/short.bin")).await.unwrap();
    let short_s = started.elapsed().as_secs_f64();
    assert_eq!(r.body, pattern(20_000));
    assert!(large.iter().all(|t| !t.is_finished()), "the long downloads were still going");
    for t in large {
        assert_eq!(t.await.unwrap(), LARGE_BYTES);
    }
    s.stop().await;
    short_s
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn srpt_lets_a_short_response_overtake_long_ones_fair_does_not() {
    let fair = short_behind_long(Policy::Fair, false).await;
    let srpt = short_behind_long(Policy::Srpt, true).await;
    // Alone at 9.8 Mbit/s 20 KB take ~17 ms; sharing with four, ~85 ms.
    eprintln!("20 KB response behind four 1 MB ones at 10 Mbit/s: fair {fair:.3} s, srpt {srpt:.3} s");
    assert!(fair >= 3.0 * srpt, "20 KB response: fair {fair:.3} s, srpt {srpt:.3} s");
    assert!(srpt < 0.06, "srpt {srpt:.3} s");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crovella_mode_lets_only_k_connections_write() {
    let mut s = TestServer::start(|c| {
        user(c, Scheduling::Crovella, 8_000_000, Policy::Srpt, true);
        c.write_concurrency = 1;
    })
    .await;
    let addr = s.addr;
    let first = tokio::spawn(async move { get(addr, &req("/big.bin")).await.unwrap().body.len() });
    tokio::time::sleep(Duration::from_millis(100)).await;
    // The short response waits for the one write slot, held by the long one.
    let started = Instant::now();
    let waiting = tokio::spawn(async move { get(addr, &req("/small.txt")).await.unwrap().body.len() });
    tokio::time::sleep(Duration::from_millis(50)).await;
    let m = metrics_text(&s).await;
    assert_eq!(metric(&m, "shortfirst_uplink_waiting"), 1.0, "{m}");
    assert_eq!(waiting.await.unwrap(), 100);
    assert!(started.elapsed() > Duration::from_millis(150), "it waited for the long response to end");
    assert_eq!(first.await.unwrap(), 300_000);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_leaving_mid_response_frees_its_registration() {
    let mut s = TestServer::start(|c| user(c, Scheduling::User, 8_000_000, Policy::Srpt, true)).await;
    let mut c = Raw::connect(s.addr).await;
    c.send(req("/big.bin").as_bytes()).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    drop(c);
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let m = metrics_text(&s).await;
        if metric(&m, "shortfirst_uplink_registered") == 0.0 {
            break;
        }
        assert!(Instant::now() < deadline, "registration never released:\n{m}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(get(s.addr, &req("/small.txt")).await.unwrap().body.len(), 100);
    s.stop().await;
}
