//! `serve --policy srrt` on loopback: responses are byte-exact (full, range,
//! keep-alive, errors), every response reads `TCP_INFO` at its start and at most
//! once per step of bytes after, bands only improve within a response, and the
//! admin endpoint reports band changes by cause and the estimate's error.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{metric, metrics_text, pattern, req, Raw, TestServer};
use shortfirst_core::bands::{Band, BandMap};
use shortfirst_server::{Policy, PriorityObserver, RrtCutoffsSpec};

/// The metrics once `responses` responses have recorded their estimate error
/// (recorded after the last byte is written, so a moment after the client has it).
async fn metrics_after(s: &TestServer, responses: f64) -> String {
    for _ in 0..100 {
        let m = metrics_text(s).await;
        if metric(&m, "shortfirst_srrt_estimate_ratio_count") >= responses {
            return m;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("fewer than {responses} responses recorded:\n{}", metrics_text(s).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn srrt_serves_byte_exact_responses_and_reports_its_estimates() {
    const STEP: u64 = 16 * 1024;
    let s = TestServer::start(|c| {
        c.policy = Policy::Srrt;
        c.admin = Some("127.0.0.1:0".parse().unwrap());
        c.rrt_step_bytes = STEP;
        c.sendfile_chunk_bytes = 8192;
    })
    .await;
    let mut c = Raw::connect(s.addr).await;
    for (path, len) in [("/big.bin", 300_000), ("/small.txt", 100), ("/medium.bin", 100_000)] {
        c.send(req(path).as_bytes()).await;
        let r = c.response(false).await.unwrap();
        assert_eq!(r.status, 200, "{path}");
        assert_eq!(r.body, pattern(len), "{path}");
    }
    c.send(b"GET /big.bin HTTP/1.1\r\nHost: t\r\nRange: bytes=1000-1999\r\n\r\n").await;
    let r = c.response(false).await.unwrap();
    assert_eq!((r.status, r.body.as_slice()), (206, &pattern(300_000)[1000..2000]));
    c.send(req("/missing").as_bytes()).await;
    assert_eq!(c.response(false).await.unwrap().status, 404);

    let m = metrics_after(&s, 5.0).await;
    let reads = metric(&m, "shortfirst_srrt_tcp_info_reads_total");
    // One at each start, then at most one per 16 KiB step of the two large bodies.
    let bound = 5.0 + (300_000 / STEP + 100_000 / STEP) as f64;
    assert!((5.0..=bound).contains(&reads), "{reads} TCP_INFO reads, bound {bound}");
    assert_eq!(metric(&m, "shortfirst_srrt_tcp_info_errors_total"), 0.0);
    assert_eq!(metric(&m, "shortfirst_srrt_estimate_ratio_count"), 5.0);
    assert!(metric(&m, "shortfirst_srrt_measured_seconds_sum") > 0.0);
    assert!(metric(&m, "shortfirst_srrt_estimated_seconds_sum") > 0.0);
    assert_eq!(metric(&m, "shortfirst_rrt_cutoff_seconds{band=\"1\"}"), 0.05);
    assert!(!m.contains("shortfirst_cutoff_bytes"), "srrt's cutoffs are times, not sizes");
    // Loopback: every estimate is far below 50 ms, so all in band 1; the first
    // response moves the socket there from set-up, and nothing moves after.
    assert_eq!(metric(&m, "shortfirst_srrt_band_changes_total{cause=\"start\"}"), 1.0);
    assert_eq!(metric(&m, "shortfirst_requests_total{band=\"1\"}"), 5.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn srrt_bands_only_improve_within_a_response() {
    if !common::can_set_priority() {
        eprintln!("skipping: SO_PRIORITY above 6 needs CAP_NET_ADMIN (run as root)");
        return;
    }
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s2 = seen.clone();
    let observer: PriorityObserver = Arc::new(move |_fd, p| s2.lock().unwrap().push(p));
    // Microsecond cutoffs, so loopback estimates spread over the bands.
    let s = TestServer::start_with_observer(
        |c| {
            c.policy = Policy::Srrt;
            c.admin = Some("127.0.0.1:0".parse().unwrap());
            c.rrt_cutoffs = "20us,40us,80us,160us,320us".parse::<RrtCutoffsSpec>().unwrap();
            c.rrt_step_bytes = 4096;
            c.sendfile_chunk_bytes = 4096;
            c.send_buffer_bytes = Some(4096);
        },
        Some(observer),
    )
    .await;
    let map = BandMap::default();
    let band_of = |p: u32| (1..=7).map(|b| Band::new(b).unwrap()).find(|&b| map.so_priority(b) == p).unwrap();
    let mut c = Raw::connect(s.addr).await;
    let mut changes_total = 0;
    for _ in 0..3 {
        seen.lock().unwrap().clear();
        c.send(req("/big.bin").as_bytes()).await;
        assert_eq!(c.response(false).await.unwrap().body, pattern(300_000));
        let bands: Vec<Band> = seen.lock().unwrap().iter().map(|&p| band_of(p)).collect();
        changes_total += bands.len();
        // The first change (if any) is the response's start; the rest promotions.
        if bands.len() > 1 {
            assert!(bands[1..].windows(2).all(|w| w[1] < w[0]), "{bands:?}");
        }
        assert!(bands.iter().all(|b| b.is_data()), "{bands:?}");
    }
    let m = metrics_after(&s, 3.0).await;
    let by_cause: f64 = ["start", "drain", "tcp_state"]
        .iter()
        .map(|c| metric(&m, &format!("shortfirst_srrt_band_changes_total{{cause=\"{c}\"}}")))
        .sum();
    assert_eq!(by_cause, changes_total as f64, "every setsockopt has a cause\n{m}");
}
