//! HTTP/2 under the user-space pacer (`--scheduler user`) on real loopback sockets, the
//! pacer at a low rate so it is the bottleneck and the order of bytes is its order:
//! shortest remaining first across the streams of one connection and across connections
//! (HTTP/2 and HTTP/1.1, cleartext and TLS), a stream whose window the client keeps closed
//! holding neither its connection nor the link. A raw frame client shows the order of
//! DATA frames on the wire; assertions are on orders and byte counts, with wide margins.

mod common;

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use common::h2raw::{slow_tcp, DATA, END_STREAM, H2};
use common::{certs, metric, metrics_text, pattern, req, TestServer};
use rustls::pki_types::ServerName;
use shortfirst_server::{Policy, Scheduling, ServerConfig, TlsSettings};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

fn user(c: &mut ServerConfig, rate_bits_per_s: u64, policy: Policy) {
    c.scheduler = Scheduling::User;
    c.link_rate_bits_per_s = Some(rate_bits_per_s);
    c.policy = policy;
    c.srpt_exact = true;
    c.socket_priority = false;
    c.admin = Some("127.0.0.1:0".parse().unwrap());
}

/// A large response starts on stream 1, then a 100 KB one on stream 3: the streams of the
/// DATA frames in wire order from the small one's first to its last, and whether the
/// large one ended first.
async fn large_then_small_on_one_connection(policy: Policy) -> (Vec<u32>, bool) {
    let mut s = TestServer::start(|c| user(c, 10_000_000, policy)).await;
    std::fs::write(s.root.join("large.bin"), pattern(2 << 20)).unwrap();
    let mut h = H2::start(slow_tcp(s.addr).await, 1 << 30).await;
    h.get(1, "/large.bin").await;
    h.until_data(1).await;
    h.get(3, "/medium.bin").await;
    let (mut order, mut large_first, mut small_bytes) = (Vec::new(), false, 0);
    loop {
        let f = h.next().await.expect("frames until the small response ends");
        if f.kind != DATA {
            continue;
        }
        if f.stream == 3 || !order.is_empty() {
            order.push(f.stream);
        }
        large_first |= f.stream == 1 && f.flags & END_STREAM != 0;
        if f.stream == 3 {
            small_bytes += f.payload.len();
            if f.flags & END_STREAM != 0 {
                break;
            }
        }
    }
    assert_eq!(small_bytes, 100_000);
    drop(h);
    // The connection's group and its streams let go of the scheduler.
    let mut registered = 1.0;
    for _ in 0..100 {
        registered = metric(&metrics_text(&s).await, "shortfirst_uplink_registered");
        if registered == 0.0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(registered, 0.0, "streams still registered after the connection closed");
    s.stop().await;
    (order, large_first)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn within_a_connection_srpt_finishes_the_small_stream_first_and_fair_alternates() {
    let (srpt, large_first) = large_then_small_on_one_connection(Policy::Srpt).await;
    assert!(!large_first);
    let large_frames = |order: &[u32]| order.iter().filter(|&&id| id == 1).count();
    let small_frames = |order: &[u32]| order.iter().filter(|&&id| id == 3).count();
    // At most the chunk granted before the small request was read comes in between.
    assert!(large_frames(&srpt) <= 2, "SRPT interleaved the large stream: {srpt:?}");
    let (fair, large_first) = large_then_small_on_one_connection(Policy::Fair).await;
    assert!(!large_first);
    // Fair takes turns: about one large frame per small one.
    assert!(large_frames(&fair) * 3 >= small_frames(&fair), "fair should alternate: {fair:?}");
    assert!(large_frames(&fair) >= 5, "fair should alternate: {fair:?}");
    eprintln!("frames from the small stream's first to its last: srpt {srpt:?}\nfair {fair:?}");
}

/// What the second connection asks for while the first downloads.
#[derive(Clone, Copy, Debug)]
enum Second {
    Http1,
    Http2,
}

/// Connection A downloads 8 MB over HTTP/2 (`tls`: over TLS); once it is under way,
/// connection B fetches 1 MB. Returns A's DATA bytes received from B's first body byte to
/// its last, and whether A was still going when B ended.
async fn large_here_small_there(policy: Policy, second: Second, tls: bool) -> (u64, bool) {
    let certs = tempfile::tempdir().unwrap();
    let (entry, ca) = certs::localhost(certs.path());
    let mut s = TestServer::start(|c| {
        user(c, 40_000_000, policy);
        c.tls = Some(TlsSettings { listen: "127.0.0.1:0".parse().unwrap(), certs: vec![entry] });
    })
    .await;
    std::fs::write(s.root.join("large.bin"), pattern(8 << 20)).unwrap();
    std::fs::write(s.root.join("mid.bin"), pattern(1 << 20)).unwrap();
    let a_bytes = Arc::new(AtomicU64::new(0));
    let a_done = Arc::new(AtomicU64::new(0));
    let (started_tx, started_rx) = tokio::sync::oneshot::channel();
    let addr = if tls { s.tls.unwrap() } else { s.addr };
    let a = {
        let (a_bytes, a_done, ca) = (a_bytes.clone(), a_done.clone(), ca.clone());
        tokio::spawn(async move {
            let io = slow_tcp(addr).await;
            if tls {
                let t = tls_connect(&ca, io).await;
                read_large(H2::start(t, 1 << 30).await, a_bytes, a_done, started_tx).await;
            } else {
                read_large(H2::start(io, 1 << 30).await, a_bytes, a_done, started_tx).await;
            }
        })
    };
    started_rx.await.unwrap();
    let (body, before) = match (second, tls) {
        (Second::Http1, false) => fetch_http1(slow_tcp(s.addr).await, "/mid.bin", &a_bytes).await,
        (Second::Http1, true) => panic!("HTTP/1.1 over TLS is tls.rs's"),
        (Second::Http2, false) => fetch_h2(slow_tcp(s.addr).await, "/mid.bin", Some(&a_bytes)).await,
        (Second::Http2, true) => {
            fetch_h2(tls_connect(&ca, slow_tcp(addr).await).await, "/mid.bin", Some(&a_bytes)).await
        }
    };
    assert_eq!(body, 1 << 20);
    let during = a_bytes.load(Relaxed) - before;
    let a_going = a_done.load(Relaxed) == 0;
    a.abort();
    s.stop().await;
    (during, a_going)
}

/// Reads stream 1's `/large.bin`, counting its DATA bytes; says when the first arrived.
async fn read_large<T: AsyncRead + AsyncWrite + Unpin>(
    mut h: H2<T>,
    bytes: Arc<AtomicU64>,
    done: Arc<AtomicU64>,
    started: tokio::sync::oneshot::Sender<()>,
) {
    h.get(1, "/large.bin").await;
    h.until_data(1).await;
    let _ = started.send(());
    while let Some(f) = h.next().await {
        if f.kind == DATA && f.stream == 1 {
            bytes.fetch_add(f.payload.len() as u64, Relaxed);
            if f.flags & END_STREAM != 0 {
                done.store(1, Relaxed);
                return;
            }
        }
    }
}

/// One GET over a fresh HTTP/2 connection: the body's length, and `counter`'s value when
/// its first DATA frame arrived.
async fn fetch_h2<T: AsyncRead + AsyncWrite + Unpin>(io: T, path: &str, counter: Option<&AtomicU64>) -> (usize, u64) {
    let mut h = H2::start(io, 1 << 30).await;
    h.get(1, path).await;
    let (mut n, mut at_first) = (0, None);
    loop {
        let f = h.next().await.expect("the response");
        if f.kind == DATA && f.stream == 1 {
            at_first = at_first.or_else(|| counter.map(|c| c.load(Relaxed)));
            n += f.payload.len();
            if f.flags & END_STREAM != 0 {
                return (n, at_first.unwrap_or(0));
            }
        }
    }
}

/// One GET over a fresh HTTP/1.1 connection: the body's length, and `counter`'s value when
/// the response's first bytes arrived.
async fn fetch_http1(mut io: TcpStream, path: &str, counter: &AtomicU64) -> (usize, u64) {
    io.write_all(req(path).as_bytes()).await.unwrap();
    let mut buf = vec![0u8; 64 * 1024];
    let (mut got, mut at_first) = (Vec::new(), None);
    loop {
        let n = tokio::time::timeout(Duration::from_secs(20), io.read(&mut buf)).await.unwrap().unwrap();
        assert!(n > 0, "the connection closed mid-response");
        at_first = at_first.or(Some(counter.load(Relaxed)));
        got.extend_from_slice(&buf[..n]);
        let head = got.windows(4).position(|w| w == b"\r\n\r\n").map(|i| i + 4);
        let len: usize = head
            .and_then(|h| {
                let text = String::from_utf8_lossy(&got[..h]).to_ascii_lowercase();
                let line = text.lines().find(|l| l.starts_with("content-length:"))?.to_string();
                line["content-length:".len()..].trim().parse().ok()
            })
            .unwrap_or(usize::MAX);
        if let Some(h) = head.filter(|&h| got.len() - h >= len) {
            return (got.len() - h, at_first.unwrap());
        }
    }
}

/// What the first connection may still receive once the second's response has started:
/// what was granted to it before (the socket below its 16 KiB watermark, the client's
/// receive window, a chunk in the codec), about 100 KB, and what it is granted while the
/// second's client, slowed by a loaded machine, leaves its socket full (work-conserving:
/// up to 250 KB seen on two busy cores); under fair it gets its share, about 1 MB.
const MOST_BEHIND_BYTES: u64 = 500_000;
const LEAST_FAIR_BYTES: u64 = 750_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn srpt_sends_a_small_response_of_another_connection_before_a_large_stream() {
    for second in [Second::Http1, Second::Http2] {
        let (during, a_going) = large_here_small_there(Policy::Srpt, second, false).await;
        eprintln!("srpt, {second:?}: the large stream got {during} bytes during the 1 MB response");
        assert!(a_going, "{second:?}: the large stream ended first");
        assert!(during < MOST_BEHIND_BYTES, "{second:?}: the large stream got {during} bytes meanwhile");
    }
    // Fair shares: the large stream goes on at about the same rate meanwhile.
    let (during, _) = large_here_small_there(Policy::Fair, Second::Http1, false).await;
    eprintln!("fair: the large stream got {during} bytes during the 1 MB response");
    assert!(during > LEAST_FAIR_BYTES, "fair: the large stream got only {during} bytes meanwhile");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_tls_srpt_sends_a_small_response_of_another_connection_first() {
    let (during, a_going) = large_here_small_there(Policy::Srpt, Second::Http2, true).await;
    eprintln!("srpt over TLS: the large stream got {during} bytes during the 1 MB response");
    assert!(a_going, "the large stream ended first");
    assert!(during < MOST_BEHIND_BYTES, "the large stream got {during} bytes meanwhile");
}

/// A page's requests in one flight on one connection: the streams whose DATA frames come,
/// in wire order, each run of frames of one stream counted once. Under the pacer at
/// `rate_bits_per_s` (`None`: the kernel's bands) and SRPT.
async fn one_flight_of_requests(rate_bits_per_s: Option<u64>, sizes: &[usize]) -> Vec<u32> {
    let mut s = TestServer::start(|c| match rate_bits_per_s {
        Some(rate) => user(c, rate, Policy::Srpt),
        None => c.policy = Policy::Srpt,
    })
    .await;
    let mut flight = Vec::new();
    for (i, &size) in sizes.iter().enumerate() {
        std::fs::write(s.root.join(format!("r{i}.bin")), pattern(size)).unwrap();
        flight.extend(common::h2raw::get_frame(2 * i as u32 + 1, &format!("/r{i}.bin")));
    }
    let mut h = H2::start(slow_tcp(s.addr).await, 1 << 30).await;
    h.io.write_all(&flight).await.unwrap();
    let (mut runs, mut ended, mut bytes) = (Vec::<u32>::new(), 0, vec![0; sizes.len()]);
    while ended < sizes.len() {
        let f = h.next().await.expect("frames until every response ends");
        if f.kind != DATA {
            continue;
        }
        bytes[(f.stream as usize - 1) / 2] += f.payload.len();
        if runs.last() != Some(&f.stream) {
            runs.push(f.stream);
        }
        ended += usize::from(f.flags & END_STREAM != 0);
    }
    assert_eq!(bytes, sizes, "every body whole");
    drop(h);
    s.stop().await;
    runs
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flight_of_small_requests_leaves_shortest_first_without_interleaving() {
    // One frame each, several frames, more than a turn: a turn carries the one-frame
    // bodies together, and no stream's frames are split by another's.
    let sizes = [40_000, 1_000, 20_000, 3_000, 150_000, 5_000, 12_000, 700, 16_384];
    let mut by_size: Vec<u32> = (0..sizes.len() as u32).map(|i| 2 * i + 1).collect();
    by_size.sort_by_key(|&id| sizes[(id as usize - 1) / 2]);
    // A pacer that never binds (every turn as large as it may be), then the kernel's bands.
    for rate in [Some(1_000_000_000), None] {
        let runs = one_flight_of_requests(rate, &sizes).await;
        assert_eq!(runs, by_size, "pacer {rate:?}: streams in wire order, each run once");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_whose_window_stays_closed_holds_neither_its_connection_nor_the_pacer() {
    let mut s = TestServer::start(|c| user(c, 10_000_000, Policy::Srpt)).await;
    std::fs::write(s.root.join("large.bin"), pattern(2 << 20)).unwrap();
    // Every stream's window starts at 16 KiB; the small stream's is never opened.
    let mut h = H2::start(slow_tcp(s.addr).await, 16 * 1024).await;
    h.get(1, "/medium.bin").await;
    h.get(3, "/large.bin").await;
    h.window_update(3, 1 << 30).await;
    let (mut small_bytes, mut large_frames) = (0, 0);
    while large_frames < 40 {
        let f = h.next().await.expect("the large stream keeps sending");
        match (f.kind, f.stream) {
            (DATA, 1) => small_bytes += f.payload.len(),
            (DATA, 3) => large_frames += 1,
            _ => {}
        }
    }
    assert_eq!(small_bytes, 16 * 1024, "the small stream sent exactly its window");
    // Other connections go on too, HTTP/1.1 and HTTP/2.
    let r = tokio::time::timeout(Duration::from_secs(10), common::get(s.addr, &req("/big.bin"))).await;
    assert_eq!(r.expect("HTTP/1.1 beside a closed window").unwrap().body.len(), 300_000);
    let n = tokio::time::timeout(Duration::from_secs(10), fetch_h2(slow_tcp(s.addr).await, "/big.bin", None)).await;
    assert_eq!(n.expect("HTTP/2 beside a closed window").0, 300_000);
    // Its window opens: it finishes.
    h.window_update(1, 1 << 20).await;
    loop {
        let f = h.next().await.expect("the small stream resumes");
        if f.kind == DATA && f.stream == 1 {
            small_bytes += f.payload.len();
            if f.flags & END_STREAM != 0 {
                break;
            }
        }
    }
    assert_eq!(small_bytes, 100_000);
    drop(h);
    s.stop().await;
}

/// GETs every path at once over one HTTP/2 connection (the `h2` crate's client): the bodies.
async fn h2_get_all<T>(io: T, paths: &[&str]) -> Vec<Vec<u8>>
where
    T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (client, conn) = h2::client::handshake(io).await.expect("HTTP/2 handshake");
    tokio::spawn(async move {
        let _ = conn.await;
    });
    let mut responses = Vec::new();
    for path in paths {
        let mut ready = client.clone().ready().await.expect("connection ready");
        let req = http::Request::get(format!("https://localhost{path}")).body(()).unwrap();
        responses.push(ready.send_request(req, true).expect("request sent").0);
    }
    // Read side by side: a body left unread would hold the connection's window shut.
    let readers: Vec<_> = responses
        .into_iter()
        .map(|response| {
            tokio::spawn(async move {
                let mut body = response.await.expect("a response").into_body();
                let mut bytes = Vec::new();
                while let Some(chunk) = body.data().await {
                    let chunk = chunk.expect("body data");
                    let _ = body.flow_control().release_capacity(chunk.len());
                    bytes.extend_from_slice(&chunk);
                }
                bytes
            })
        })
        .collect();
    let mut bodies = Vec::new();
    for r in readers {
        bodies.push(r.await.unwrap());
    }
    bodies
}

/// Streams asked for at once come back whole, in cleartext and over TLS, under `user` and
/// under `crovella` (one writer: the streams take the slot in turn); every stream and
/// connection lets go of the scheduler.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_streams_are_byte_exact_under_user_and_crovella() {
    for scheduler in [Scheduling::User, Scheduling::Crovella] {
        let certs = tempfile::tempdir().unwrap();
        let (entry, ca) = certs::localhost(certs.path());
        let mut s = TestServer::start(|c| {
            user(c, 200_000_000, Policy::Srpt);
            c.scheduler = scheduler;
            c.write_concurrency = 1;
            c.tls = Some(TlsSettings { listen: "127.0.0.1:0".parse().unwrap(), certs: vec![entry] });
        })
        .await;
        let paths = ["/big.bin", "/medium.bin", "/small.txt"];
        let sizes = [300_000, 100_000, 100];
        let plain = h2_get_all(slow_tcp(s.addr).await, &paths).await;
        let tls = h2_get_all(tls_connect(&ca, slow_tcp(s.tls.unwrap()).await).await, &paths).await;
        for (bodies, how) in [(plain, "h2c"), (tls, "h2")] {
            for ((body, size), path) in bodies.iter().zip(sizes).zip(paths) {
                assert!(*body == pattern(size), "{scheduler:?} {how} {path}: {} bytes", body.len());
            }
        }
        let mut page = metrics_text(&s).await;
        for _ in 0..100 {
            if metric(&page, "shortfirst_uplink_registered") == 0.0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
            page = metrics_text(&s).await;
        }
        assert_eq!(metric(&page, "shortfirst_uplink_registered"), 0.0, "{scheduler:?}: {page}");
        assert_eq!(metric(&page, "shortfirst_uplink_groups"), 0.0, "{scheduler:?}: every connection closed its group");
        assert!(metric(&page, "shortfirst_uplink_grants_total") >= 6.0, "{scheduler:?}");
        assert!(page.contains("shortfirst_responses_by_protocol_total{protocol=\"h2\",tls=\"1.3\"} 3"), "{page}");
        s.stop().await;
    }
}

/// A TLS client offering only `h2` over `tcp`; ALPN must pick it.
async fn tls_connect(ca_der: &[u8], tcp: TcpStream) -> tokio_rustls::client::TlsStream<TcpStream> {
    let t = certs::client(ca_der, &[b"h2"]).connect(ServerName::try_from("localhost").unwrap(), tcp).await.unwrap();
    assert_eq!(t.get_ref().1.alpn_protocol(), Some(&b"h2"[..]), "ALPN picks h2 under the pacer");
    t
}
