//! The gatekeeper under faults, over real loopback sockets: a scripted upstream that
//! refuses, resets, hangs or answers garbage, and raw clients that leave at every stage or
//! dribble their head. Each case ends with a clear answer within a stated bound (502, 504,
//! 503, or a response cut when its head had already gone out) and the proxy at rest: no
//! charge, nothing admitted, no client connection, no upstream connection but kept-alive
//! idle ones, read from the admin endpoint as an operator would.
//!
//! Time is tokio's paused clock, as in `differential.rs`: it moves only when every task
//! waits on a timer, and loopback I/O takes none. So a timeout is seen at its deadline
//! (within tokio's timer resolution, [`TICK`]) and an immediate answer after no time at
//! all, on any machine, and the timeouts waited for cost no real time.

mod support;

use std::sync::atomic::Ordering::SeqCst;
use std::sync::Arc;
use std::time::Duration;

use shortfirst_gatekeeper::config::CapacitySetting;
use shortfirst_gatekeeper::ProxyConfig;
use support::*;
use tokio::io::AsyncWriteExt;
use tokio::sync::Notify;
use tokio::time::Instant;

/// `--upstream-timeout` and `--upstream-body-timeout` in these tests.
const HEAD_TIMEOUT: Duration = Duration::from_millis(300);
const BODY_TIMEOUT: Duration = Duration::from_millis(300);
/// `--header-timeout` in the slowloris tests.
const HEADER_TIMEOUT: Duration = Duration::from_millis(500);
/// How long a read waits for an answer that should come (virtual time: a generous bound
/// costs nothing).
const SLACK: Duration = Duration::from_secs(3);
/// Tokio's timer resolution: a sleep ends within this of its deadline.
const TICK: Duration = Duration::from_millis(2);
/// How long the proxy may take to come back to rest after a case.
const SETTLE: Duration = Duration::from_secs(5);

const OK: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
/// A head promising 100 bytes, and the first 10 of them.
const CUT_LENGTH: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\n0123456789";
/// A chunked head and its first chunk, no last chunk.
const CUT_CHUNKED: &[u8] = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\na\r\n0123456789\r\n";

fn timeouts(c: &mut ProxyConfig) {
    c.upstream_timeout = HEAD_TIMEOUT;
    c.upstream_body_timeout = BODY_TIMEOUT;
}

/// The outcome counter of the one type these tests request (`GET /fault`).
fn outcome(m: &str, ty: &str, outcome: &str) -> f64 {
    metric(m, &format!("gatekeeper_type_requests_total{{type=\"{ty}\",outcome=\"{outcome}\"}}"))
}

/// An upstream that fails before a response head is complete: the client gets 502 (refused,
/// reset, closed, garbage) at once or 504 at the head timeout, and the upstream connection
/// is closed. No sample is learned from a failure.
#[tokio::test(start_paused = true)]
async fn upstream_failures_before_the_head_give_502_or_504_and_leak_nothing() {
    let oversized_head = [b"HTTP/1.1 200 OK\r\nx-big: ".as_slice(), &vec![b'a'; 600 * 1024]].concat();
    let cases: Vec<(&str, Option<Vec<Step>>, u16, Duration)> = vec![
        ("refused", None, 502, Duration::ZERO),
        ("reset after reading the request", Some(vec![Step::ReadHead, Step::Reset]), 502, Duration::ZERO),
        ("closed without an answer", Some(vec![Step::ReadHead, Step::Close]), 502, Duration::ZERO),
        (
            "text that is not HTTP",
            Some(vec![Step::ReadHead, write(b"SSH-2.0-OpenSSH_9.6\r\n\r\n")]),
            502,
            Duration::ZERO,
        ),
        (
            "binary garbage",
            Some(vec![Step::ReadHead, write(&[0x16, 0x03, 0x01, 0x00, 0xff, 0x00, 0x0d, 0x0a])]),
            502,
            Duration::ZERO,
        ),
        ("a malformed status line", Some(vec![Step::ReadHead, write(b"HTTP/1.1 2x0 OK\r\n\r\n")]), 502, Duration::ZERO),
        ("a head beyond any limit", Some(vec![Step::ReadHead, Step::Write(oversized_head)]), 502, Duration::ZERO),
        ("a hang before the head", Some(vec![Step::ReadHead]), 504, HEAD_TIMEOUT),
        (
            "half a head, then a hang",
            Some(vec![Step::ReadHead, write(b"HTTP/1.1 200 OK\r\ncontent-le")]),
            504,
            HEAD_TIMEOUT,
        ),
    ];
    for (name, script, status, at_least) in cases {
        let (up, seen) = match script {
            Some(s) => {
                let (a, seen) = scripted_upstream(vec![s]).await;
                (a, Some(seen))
            }
            None => (refused_addr().await, None),
        };
        let p = start_proxy(up, timeouts).await;
        let r = exchange(p.addr, &get_request("/fault"), at_least + SLACK).await;
        assert_eq!(r.status, status, "{name}: {r:?}");
        assert!(r.elapsed >= at_least && r.elapsed < at_least + TICK, "{name}: answered after {:?}", r.elapsed);
        assert_eq!(r.end, End::Closed, "{name}: the answer ends cleanly");
        assert_at_rest(&p, 0, SETTLE).await;
        if let Some(seen) = seen {
            wait_until(&format!("{name}: upstream connections closed"), SETTLE, || seen.open() == 0).await;
        }
        let m = scrape(p.admin).await;
        let want = if status == 504 { "timeout" } else { "upstream_error" };
        assert_eq!(outcome(&m, "GET /fault", want), 1.0, "{name}: {m}");
        assert_eq!(metric(&m, "gatekeeper_type_cost_samples_total{type=\"GET /fault\"}"), 0.0, "{name}");
    }
}

/// An upstream that fails after the head went out cannot change the status: the client
/// sees the response cut (short of its length, or without its last chunk) and the
/// connection closed, at once on a reset or a close, at the body timeout on a hang.
#[tokio::test(start_paused = true)]
async fn upstream_failures_mid_body_cut_the_response_and_release_the_charge() {
    // The upstream pauses after the first bytes, so the cut comes that much later.
    const PAUSE: Duration = Duration::from_millis(50);
    let pause = Step::Sleep(PAUSE);
    let cases: Vec<(&str, Vec<Step>, &str, Duration)> = vec![
        (
            "reset within a sized body",
            vec![Step::ReadHead, write(CUT_LENGTH), pause.clone(), Step::Reset],
            "upstream_error",
            PAUSE,
        ),
        (
            "reset within a chunked body",
            vec![Step::ReadHead, write(CUT_CHUNKED), pause.clone(), Step::Reset],
            "upstream_error",
            PAUSE,
        ),
        (
            "closed within a sized body",
            vec![Step::ReadHead, write(CUT_LENGTH), pause.clone(), Step::Close],
            "upstream_error",
            PAUSE,
        ),
        (
            "closed within a chunked body",
            vec![Step::ReadHead, write(CUT_CHUNKED), pause, Step::Close],
            "upstream_error",
            PAUSE,
        ),
        ("a hang within a sized body", vec![Step::ReadHead, write(CUT_LENGTH)], "timeout", BODY_TIMEOUT),
        ("a hang within a chunked body", vec![Step::ReadHead, write(CUT_CHUNKED)], "timeout", BODY_TIMEOUT),
    ];
    for (name, script, want, at_least) in cases {
        let (up, seen) = scripted_upstream(vec![script]).await;
        let p = start_proxy(up, timeouts).await;
        let r = exchange(p.addr, &get_request("/fault"), at_least + SLACK).await;
        assert_eq!(r.status, 200, "{name}: the head had gone out: {r:?}");
        assert!(r.body.windows(10).any(|w| w == b"0123456789"), "{name}: the first bytes came through: {r:?}");
        assert!(!r.complete(), "{name}: a cut response must not look complete: {r:?}");
        assert_ne!(r.end, End::StillOpen, "{name}: the connection must be closed");
        assert!(r.elapsed >= at_least && r.elapsed < at_least + TICK, "{name}: cut after {:?}", r.elapsed);
        assert_at_rest(&p, 0, SETTLE).await;
        wait_until(&format!("{name}: upstream connection closed"), SETTLE, || seen.open() == 0).await;
        let m = scrape(p.admin).await;
        assert_eq!(outcome(&m, "GET /fault", want), 1.0, "{name}: {m}");
    }
}

/// An upstream closing kept-alive connections: while idle (silently, or announced with
/// `connection: close`), the next request goes on a new connection, 200. When it reads
/// the next request and closes without an answer (the keep-alive race), a `GET` is sent
/// once more on a new connection; a `POST`, which the upstream may have acted on, gets 502.
#[tokio::test(start_paused = true)]
async fn an_upstream_closing_kept_alive_connections() {
    let closing_ok = b"HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 2\r\n\r\nok";
    let idle_close = vec![Step::ReadHead, write(OK), Step::Sleep(Duration::from_millis(50)), Step::Close];
    let announced = vec![Step::ReadHead, write(closing_ok), Step::Close];
    let race = vec![Step::ReadHead, write(OK), Step::ReadHead, Step::Close];
    let post = b"POST /fault HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 2\r\n\r\nhi".to_vec();
    let cases: Vec<(&str, Vec<Step>, Vec<u8>, u16)> = vec![
        ("closed while idle", idle_close, get_request("/fault"), 200),
        ("close announced", announced, get_request("/fault"), 200),
        ("closed on the next request, GET", race.clone(), get_request("/fault"), 200),
        ("closed on the next request, POST", race, post, 502),
    ];
    for (name, first, second, status) in cases {
        let (up, seen) = scripted_upstream(vec![first, vec![Step::ReadHead, write(OK)]]).await;
        let p = start_proxy(up, timeouts).await;
        let r = exchange(p.addr, &get_request("/fault"), SLACK).await;
        assert_eq!((r.status, r.body.as_slice()), (200, b"ok".as_slice()), "{name}: first request");
        if name == "closed while idle" {
            wait_until("the upstream closed the idle connection", SETTLE, || seen.ended.load(SeqCst) == 1).await;
        }
        let r = exchange(p.addr, &second, SLACK).await;
        assert_eq!(r.status, status, "{name}: second request: {r:?}");
        let expected_connections = if status == 200 { 2 } else { 1 };
        assert_eq!(seen.accepted.load(SeqCst), expected_connections, "{name}");
        // A 200 left its new connection idle in the pool.
        assert_at_rest(&p, usize::from(status == 200), SETTLE).await;
    }
}

/// A client that leaves while queued is taken out of the queue at once and never reaches
/// the upstream, also with a body being sent; the request it waited behind is served.
#[tokio::test(start_paused = true)]
async fn a_client_leaving_while_queued_is_never_started() {
    let partial_post = b"POST /queued HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\nhalf".to_vec();
    for (name, request) in [("a GET", get_request("/queued")), ("a POST half sent", partial_post)] {
        let release = Arc::new(Notify::new());
        let blocker = vec![Step::ReadHead, Step::WaitFor(release.clone()), write(OK)];
        let (up, seen) = scripted_upstream(vec![blocker, vec![Step::ReadHead, write(OK)]]).await;
        let p = start_proxy(up, |c| {
            timeouts(c);
            c.upstream_timeout = Duration::from_secs(60);
            c.capacity = CapacitySetting::Fixed { capacity_us: 1 };
        })
        .await;
        let b = send_raw(p.addr, &get_request("/blocker")).await;
        wait_until("blocker admitted", SETTLE, || p.handle.snapshot().in_flight == 1).await;
        let q = send_raw(p.addr, &request).await;
        wait_until("queued", SETTLE, || p.handle.snapshot().queue_len == 1).await;
        drop(q);
        wait_until(&format!("{name}: left the queue"), SLACK, || p.handle.snapshot().queue_len == 0).await;
        let m = scrape(p.admin).await;
        assert_eq!(metric(&m, "gatekeeper_cancelled_while_queued_total"), 1.0, "{name}");
        assert_eq!(metric(&m, "gatekeeper_in_flight"), 1.0, "{name}: the blocker still runs");
        release.notify_one();
        let r = read_response(b, SLACK).await;
        assert_eq!(r.status, 200, "{name}: blocker");
        assert_at_rest(&p, 1, SETTLE).await;
        assert_eq!(seen.requests(), ["GET /blocker HTTP/1.1"], "{name}: the queued request reached the upstream");
    }
}

/// A client that leaves while its body is being forwarded: the upstream sees its
/// connection closed (the request can never complete), the charge is released, and the
/// outcome is the client's, not an upstream error. Also when the body was beyond the
/// read-ahead while it was queued, so that leaving was noticed only when forwarding.
#[tokio::test(start_paused = true)]
async fn a_client_leaving_while_its_body_is_forwarded_closes_the_upstream_connection() {
    for queued_first in [false, true] {
        let release = Arc::new(Notify::new());
        // The blocker's connection closes after it, so the PUT goes on a connection of its own.
        let closing_ok = b"HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 2\r\n\r\nok";
        let blocker = vec![Step::ReadHead, Step::WaitFor(release.clone()), write(closing_ok), Step::Close];
        let scripts = if queued_first { vec![blocker, vec![Step::ReadHead]] } else { vec![vec![Step::ReadHead]] };
        let (up, seen) = scripted_upstream(scripts).await;
        let p = start_proxy(up, |c| {
            c.upstream_timeout = Duration::from_secs(60);
            c.capacity = CapacitySetting::Fixed { capacity_us: 1 };
        })
        .await;
        let b = if queued_first {
            let b = send_raw(p.addr, &get_request("/blocker")).await;
            wait_until("blocker admitted", SETTLE, || p.handle.snapshot().in_flight == 1).await;
            Some(b)
        } else {
            None
        };
        let mut c = send_raw(p.addr, b"PUT /fault HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n\r\n").await;
        c.write_all(&vec![b'x'; 200_000]).await.unwrap();
        if let Some(b) = b {
            wait_until("queued", SETTLE, || p.handle.snapshot().queue_len == 1).await;
            release.notify_one();
            assert_eq!(read_response(b, SLACK).await.status, 200);
        }
        wait_until("the upstream got the head", SETTLE, || seen.requests().iter().any(|r| r.starts_with("PUT"))).await;
        drop(c);
        let name = if queued_first { "queued first" } else { "admitted at once" };
        wait_until(&format!("{name}: upstream closed"), SLACK, || seen.closed_by_proxy.load(SeqCst) == 1).await;
        assert_at_rest(&p, 0, SETTLE).await;
        let m = scrape(p.admin).await;
        assert_eq!(outcome(&m, "PUT /fault", "client_gone"), 1.0, "{name}: {m}");
        assert_eq!(outcome(&m, "PUT /fault", "upstream_error"), 0.0, "{name}: {m}");
    }
}

/// A client that leaves while the response streams: the charge is held while the upstream
/// still sends (the backend still works), then released; a response that completes leaves
/// its connection kept alive, one whose upstream goes silent is cut at the body timeout.
#[tokio::test(start_paused = true)]
async fn a_client_leaving_while_the_response_streams_holds_the_charge_until_the_upstream_is_done() {
    const LEN: usize = 2_000_000;
    for upstream_finishes in [true, false] {
        let go = Arc::new(Notify::new());
        let head = format!("HTTP/1.1 200 OK\r\ncontent-length: {LEN}\r\n\r\n");
        // Without the rest of the body the script ends, leaving the connection silent.
        let mut script = vec![Step::ReadHead, Step::Write(head.into_bytes()), write(&[b'a'; 1000])];
        if upstream_finishes {
            script.extend([Step::WaitFor(go.clone()), Step::Write(vec![b'b'; LEN - 1000])]);
        }
        let (up, seen) = scripted_upstream(vec![script]).await;
        let p = start_proxy(up, |c| {
            c.upstream_timeout = Duration::from_secs(60);
            c.upstream_body_timeout = if upstream_finishes { Duration::from_secs(60) } else { BODY_TIMEOUT };
        })
        .await;
        let mut c = send_raw(p.addr, &get_request("/fault")).await;
        let mut first = [0u8; 64];
        let n = tokio::io::AsyncReadExt::read(&mut c, &mut first).await.unwrap();
        assert!(first[..n].starts_with(b"HTTP/1.1 200"), "{:?}", String::from_utf8_lossy(&first[..n]));
        drop(c);
        let name = if upstream_finishes { "upstream finishes" } else { "upstream goes silent" };
        wait_until(&format!("{name}: client connection closed"), SLACK, || p.handle.snapshot().client_connections == 0)
            .await;
        if upstream_finishes {
            let s = p.handle.snapshot();
            assert_eq!((s.in_flight, s.load_us > 0), (1, true), "{name}: released while the upstream still works");
            go.notify_one();
            assert_at_rest(&p, 1, SETTLE).await;
            assert_eq!(seen.open(), 1, "{name}: the drained connection is kept alive");
        } else {
            // Cut at the body timeout: the upstream sees the close.
            wait_until(&format!("{name}: upstream closed"), BODY_TIMEOUT + SLACK, || seen.open() == 0).await;
            assert_at_rest(&p, 0, SETTLE).await;
        }
        let m = scrape(p.admin).await;
        assert_eq!(outcome(&m, "GET /fault", "client_gone"), 1.0, "{name}: {m}");
    }
}

/// Slowloris: a client dribbling its head, one header a tenth of a second, is cut at the
/// header timeout (hyper closes without a status: there is no request to answer) and never
/// reaches the upstream, while another client is served meanwhile.
#[tokio::test(start_paused = true)]
async fn a_slowloris_client_is_cut_at_the_header_timeout() {
    let (up, seen) = scripted_upstream(vec![vec![Step::ReadHead, write(OK)]]).await;
    let p = start_proxy(up, |c| c.header_timeout = HEADER_TIMEOUT).await;
    let t0 = Instant::now();
    let (rd, mut wr) = tokio::net::TcpStream::connect(p.addr).await.unwrap().into_split();
    let dribble = tokio::spawn(async move {
        let _ = wr.write_all(b"GET /slow HTTP/1.1\r\n").await;
        for i in 0.. {
            tokio::time::sleep(Duration::from_millis(100)).await;
            if wr.write_all(format!("x-{i}: y\r\n").as_bytes()).await.is_err() {
                return;
            }
        }
    });
    let r = exchange(p.addr, &get_request("/fast"), SLACK).await;
    assert_eq!(r.status, 200, "another client is served meanwhile");
    let r = read_response(rd, HEADER_TIMEOUT + SLACK).await;
    let cut_after = t0.elapsed();
    dribble.abort();
    assert_eq!(r.status, 0, "nothing to answer: {r:?}");
    assert_ne!(r.end, End::StillOpen, "the connection must be closed");
    assert!(cut_after >= HEADER_TIMEOUT && cut_after < HEADER_TIMEOUT + TICK, "cut after {cut_after:?}");
    assert_at_rest(&p, 1, SETTLE).await;
    assert_eq!(seen.requests(), ["GET /fast HTTP/1.1"]);
}

/// Slowloris connections holding every `max_connections` slot: a new client is answered
/// 503 with `Retry-After` at once instead of waiting in the kernel's backlog, and is served
/// once the slow ones have been cut at the header timeout.
#[tokio::test(start_paused = true)]
async fn beyond_max_connections_a_client_gets_503_at_once() {
    let (up, _seen) = scripted_upstream(vec![vec![Step::ReadHead, write(OK)]]).await;
    let p = start_proxy(up, |c| {
        c.header_timeout = HEADER_TIMEOUT;
        c.max_connections = 2;
    })
    .await;
    let mut slow = Vec::new();
    for _ in 0..2 {
        slow.push(send_raw(p.addr, b"GET /slow HTTP/1.1\r\nHost: x\r\n").await);
    }
    wait_until("both slots taken", SLACK, || p.handle.snapshot().client_connections == 2).await;
    // Read before sending: the 503 is written at accept, before the request is read.
    let r = read_response(tokio::net::TcpStream::connect(p.addr).await.unwrap(), SLACK).await;
    assert_eq!(r.status, 503, "{r:?}");
    assert!(r.head.to_ascii_lowercase().contains("retry-after: 1\r\n"), "{r:?}");
    assert!(r.elapsed < TICK, "at once: {:?}", r.elapsed);
    wait_until("slow clients cut", HEADER_TIMEOUT + SLACK, || p.handle.snapshot().client_connections == 0).await;
    let r = exchange(p.addr, &get_request("/fast"), SLACK).await;
    assert_eq!(r.status, 200);
    let m = scrape(p.admin).await;
    assert_eq!(metric(&m, "gatekeeper_connections_refused_total"), 1.0);
    assert_at_rest(&p, 1, SETTLE).await;
    drop(slow);
}
