//! HTTP/2 end to end: a real server, real sockets; the `h2` crate's client over TLS
//! (ALPN, certificates generated here) and in cleartext (h2c, prior knowledge); a raw
//! frame client where the order of frames on the wire is the thing checked (SRPT against
//! fair between the streams of one connection, the stream limit, GOAWAY); and curl when
//! it is installed with HTTP/2.

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use common::h2raw::{frame, get_frame, DATA, END_STREAM, GOAWAY, H2, PREFACE, RST_STREAM, SETTINGS};
use common::{certs, pattern, TestServer};
use rustls::pki_types::ServerName;
use shortfirst_server::{Policy, ServerConfig, TlsSettings};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

/// A response as the `h2` client reads it.
struct Resp {
    status: u16,
    headers: http::HeaderMap,
    body: Vec<u8>,
    /// The HEADERS frame ended the stream (no DATA at all).
    headers_only: bool,
}

/// An HTTP/2 client on `io` (its connection driven by a task of its own).
async fn h2_client<T>(io: T) -> h2::client::SendRequest<Bytes>
where
    T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (send, conn) = h2::client::handshake(io).await.expect("HTTP/2 handshake");
    tokio::spawn(async move {
        let _ = conn.await;
    });
    send
}

async fn fetch(client: &mut h2::client::SendRequest<Bytes>, req: http::Request<()>) -> Resp {
    let ready = client.clone().ready().await.expect("connection ready");
    *client = ready;
    let (response, _) = client.send_request(req, true).expect("request sent");
    let response = response.await.expect("a response");
    let (parts, mut body) = response.into_parts();
    let headers_only = body.is_end_stream();
    let mut bytes = Vec::new();
    while let Some(chunk) = body.data().await {
        let chunk = chunk.expect("body data");
        let _ = body.flow_control().release_capacity(chunk.len());
        bytes.extend_from_slice(&chunk);
    }
    Resp { status: parts.status.as_u16(), headers: parts.headers, body: bytes, headers_only }
}

fn get(uri: &str) -> http::request::Builder {
    http::Request::get(uri)
}

/// Every answer HTTP/1.1 gives, over one HTTP/2 connection: GET, HEAD, range, 304, 404, 405.
async fn check_answers(client: &mut h2::client::SendRequest<Bytes>, scheme: &str) {
    let uri = |p: &str| format!("{scheme}://localhost{p}");
    let r = fetch(client, get(&uri("/small.txt")).body(()).unwrap()).await;
    assert_eq!((r.status, r.body.as_slice()), (200, &pattern(100)[..]));
    assert_eq!(r.headers["content-length"], "100");
    assert!(!r.headers.contains_key("connection"), "no connection-specific fields in HTTP/2");
    let etag = r.headers["etag"].clone();

    let r = fetch(client, http::Request::head(uri("/medium.bin")).body(()).unwrap()).await;
    assert_eq!((r.status, r.body.len(), r.headers_only), (200, 0, true));
    assert_eq!(r.headers["content-length"], "100000");

    let r = fetch(client, get(&uri("/medium.bin")).header("range", "bytes=10-19").body(()).unwrap()).await;
    assert_eq!((r.status, r.body.as_slice()), (206, &pattern(100_000)[10..20]));
    assert_eq!(r.headers["content-range"], "bytes 10-19/100000");

    let r = fetch(client, get(&uri("/small.txt")).header("if-none-match", etag).body(()).unwrap()).await;
    assert_eq!((r.status, r.body.len()), (304, 0));

    let r = fetch(client, get(&uri("/nope.txt")).body(()).unwrap()).await;
    assert_eq!((r.status, r.body.as_slice()), (404, &b"404 Not Found\n"[..]));

    let r = fetch(client, http::Request::post(uri("/small.txt")).body(()).unwrap()).await;
    assert_eq!(r.status, 405);
    assert_eq!(r.headers["allow"], "GET, HEAD");

    let r = fetch(client, get(&uri("/sub")).body(()).unwrap()).await;
    assert_eq!((r.status, r.headers["location"].to_str().unwrap()), (301, "/sub/"));
}

/// `/metrics` of a test server with an admin listener.
async fn metrics(s: &TestServer) -> String {
    common::metrics_text(s).await
}

/// `/metrics` once it contains `needle` (the last response is counted after its last byte).
async fn wait_for_metric(s: &TestServer, needle: &str) -> String {
    let mut page = metrics(s).await;
    for _ in 0..100 {
        if page.contains(needle) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        page = metrics(s).await;
    }
    page
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h2c_prior_knowledge_answers_as_http1_does_and_is_logged_and_counted() {
    let log_dir = tempfile::tempdir().unwrap();
    let log = log_dir.path().join("access.log");
    let log_path = log.clone();
    let mut s = TestServer::start(move |c| {
        c.admin = Some("127.0.0.1:0".parse().unwrap());
        c.access_log = Some(log_path);
    })
    .await;
    let mut client = h2_client(TcpStream::connect(s.addr).await.unwrap()).await;
    check_answers(&mut client, "http").await;
    // HTTP/1.1 on the same listener still works.
    let r = common::get(s.addr, &common::req("/small.txt")).await.unwrap();
    assert_eq!((r.status, r.body), (200, pattern(100)));

    let page = wait_for_metric(&s, "protocol=\"h2\",tls=\"none\"} 7").await;
    assert!(page.contains("shortfirst_http2_connections_total 1"), "{page}");
    assert!(page.contains("shortfirst_http2_streams_cut_total 0"), "{page}");
    assert!(page.contains("shortfirst_responses_by_protocol_total{protocol=\"h2\",tls=\"none\"} 7"), "{page}");
    assert!(page.contains("shortfirst_responses_by_protocol_total{protocol=\"http/1.1\",tls=\"none\"} 1"), "{page}");
    drop(client);
    s.stop().await;
    let log = std::fs::read_to_string(log).unwrap();
    let first = log.lines().find(|l| l.contains("\"GET /small.txt HTTP/2.0\" 200 100")).expect(&log);
    assert!(first.contains(" proto=h2 tls=- stream=1"), "{first}");
    assert!(log.lines().any(|l| l.contains("\"HEAD /medium.bin HTTP/2.0\" 200 -") && l.ends_with("stream=3")));
    assert!(log.lines().any(|l| l.contains("\"GET /small.txt HTTP/1.1\" 200 100") && l.contains("proto=http/1.1")));
}

/// A test server with an HTTPS listener; returns it, the HTTPS address and the CA.
async fn start_tls(configure: impl FnOnce(&mut ServerConfig)) -> (TestServer, SocketAddr, Vec<u8>) {
    let certs = tempfile::tempdir().unwrap();
    let (entry, ca) = certs::localhost(certs.path());
    let s = TestServer::start(move |c| {
        c.tls = Some(TlsSettings { listen: "127.0.0.1:0".parse().unwrap(), certs: vec![entry] });
        c.admin = Some("127.0.0.1:0".parse().unwrap());
        configure(c);
    })
    .await;
    // The certificates are read at bind; their directory may go.
    let tls = s.tls.expect("an HTTPS listener");
    (s, tls, ca)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_tls_alpn_picks_h2_and_every_answer_matches() {
    let (mut s, tls, ca) = start_tls(|_| {}).await;
    let tcp = TcpStream::connect(tls).await.unwrap();
    let t = certs::client(&ca, &[b"h2", b"http/1.1"])
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .unwrap();
    assert_eq!(t.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
    let mut client = h2_client(t).await;
    check_answers(&mut client, "https").await;
    let page = wait_for_metric(&s, "protocol=\"h2\",tls=\"1.3\"} 7").await;
    assert!(page.contains("shortfirst_responses_by_protocol_total{protocol=\"h2\",tls=\"1.3\"} 7"), "{page}");
    drop(client);
    s.stop().await;

    // HTTP/2 off: ALPN offers http/1.1 only, and a plaintext preface is not HTTP/2.
    let (mut s, tls, ca) = start_tls(|c| c.http2 = false).await;
    let tcp = TcpStream::connect(tls).await.unwrap();
    let t = certs::client(&ca, &[b"h2", b"http/1.1"])
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .unwrap();
    assert_eq!(t.get_ref().1.alpn_protocol(), Some(&b"http/1.1"[..]));
    let mut raw = TcpStream::connect(s.addr).await.unwrap();
    raw.write_all(PREFACE).await.unwrap();
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), raw.read_to_end(&mut answer)).await;
    assert!(answer.starts_with(b"HTTP/1.1 505"), "{}", String::from_utf8_lossy(&answer));
    s.stop().await;
}

/// A large response starts on stream 1, then a small one is asked for on stream 3: the
/// streams of the DATA frames, in wire order, from the small one's first to its last.
async fn large_then_small(policy: Policy) -> (Vec<u32>, bool) {
    let mut s = TestServer::start(|c| {
        c.policy = policy;
    })
    .await;
    std::fs::write(s.root.join("large.bin"), pattern(8 << 20)).unwrap();
    let mut raw = H2::connect(s.addr).await;
    raw.get(1, "/large.bin").await;
    // The large response is under way...
    loop {
        let f = raw.next().await.expect("frames");
        if f.kind == DATA && f.stream == 1 {
            break;
        }
    }
    // ...when the small one (100 KB: seven chunks) is asked for.
    raw.get(3, "/medium.bin").await;
    let (mut order, mut small_done, mut large_done_first) = (Vec::new(), false, false);
    while !small_done {
        let f = raw.next().await.expect("frames until the small response ends");
        if f.kind != DATA {
            continue;
        }
        if f.stream == 3 || !order.is_empty() {
            order.push(f.stream);
        }
        if f.stream == 1 && f.flags & END_STREAM != 0 {
            large_done_first = true;
        }
        small_done = f.stream == 3 && f.flags & END_STREAM != 0;
    }
    drop(raw);
    s.stop().await;
    (order, large_done_first)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn srpt_finishes_a_small_stream_before_a_large_one_started_earlier() {
    let (srpt, large_first) = large_then_small(Policy::Srpt).await;
    assert!(!large_first);
    let large_frames = |order: &[u32]| order.iter().filter(|&&id| id == 1).count();
    // At most the chunk handed over before the small request was read goes in between.
    assert!(large_frames(&srpt) <= 1, "SRPT interleaved the large stream: {srpt:?}");
    assert!(srpt.iter().filter(|&&id| id == 3).count() >= 7, "{srpt:?}");
    // Fair takes turns (of up to four frames): the large stream's frames come between the
    // small one's, a turn of them between its two.
    let (fair, large_first) = large_then_small(Policy::Fair).await;
    assert!(!large_first);
    assert!(large_frames(&fair) >= 3, "fair should alternate: {fair:?}");
    eprintln!("DATA frames from the small stream's first to its last: srpt {srpt:?}, fair {fair:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_whose_window_is_closed_never_holds_the_connection() {
    let mut s = TestServer::start(|c| {
        c.policy = Policy::Srpt;
        c.admin = Some("127.0.0.1:0".parse().unwrap());
    })
    .await;
    std::fs::write(s.root.join("large.bin"), pattern(8 << 20)).unwrap();
    // Every stream's window starts at one chunk; only the large stream's is opened wide.
    let mut raw = H2::connect_with_window(s.addr, 16 * 1024).await;
    raw.get(1, "/medium.bin").await;
    raw.get(3, "/large.bin").await;
    raw.window_update(3, 1 << 30).await;
    // The small stream (the best) sends its window's worth and blocks; the large one goes on.
    let (mut small_bytes, mut large_frames) = (0, 0);
    while large_frames < 20 {
        let f = raw.next().await.expect("the large stream keeps sending");
        match (f.kind, f.stream) {
            (DATA, 1) => small_bytes += f.payload.len(),
            (DATA, 3) => large_frames += 1,
            _ => {}
        }
    }
    assert_eq!(small_bytes, 16 * 1024, "the small stream sent exactly its window");
    // Its window opens: it is the best again and finishes with at most a frame in between.
    raw.window_update(1, 1 << 20).await;
    let mut between = 0;
    loop {
        let f = raw.next().await.expect("the small stream resumes");
        match (f.kind, f.stream) {
            (DATA, 1) => {
                small_bytes += f.payload.len();
                if f.flags & END_STREAM != 0 {
                    break;
                }
            }
            (DATA, 3) if small_bytes > 16 * 1024 => between += 1,
            _ => {}
        }
    }
    assert_eq!(small_bytes, 100_000);
    assert!(between <= 1, "{between} large frames while the small stream had its window");
    // The client leaves in the middle of the large response: it is counted as cut.
    drop(raw);
    let page = wait_for_metric(&s, "shortfirst_http2_streams_cut_total 1").await;
    assert!(page.contains("shortfirst_http2_streams_cut_total 1"), "{page}");
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stream_limit_is_advertised_and_enforced_and_shutdown_sends_goaway() {
    let mut s = TestServer::start(|c| {
        c.http2_max_concurrent_streams = 2;
        c.admin = Some("127.0.0.1:0".parse().unwrap());
    })
    .await;
    std::fs::write(s.root.join("large.bin"), pattern(8 << 20)).unwrap();
    let mut raw = H2::connect(s.addr).await;
    let settings = raw.next().await.expect("the server's SETTINGS");
    assert_eq!(settings.kind, SETTINGS);
    let limit = settings.payload.chunks(6).find(|p| p[..2] == [0, 3]).expect("MAX_CONCURRENT_STREAMS");
    assert_eq!(u32::from_be_bytes([limit[2], limit[3], limit[4], limit[5]]), 2);
    for id in [1, 3, 5] {
        raw.get(id, "/large.bin").await;
    }
    let refused = loop {
        let f = raw.next().await.expect("a RST_STREAM for the third stream");
        if f.kind == RST_STREAM {
            break f;
        }
    };
    assert_eq!(refused.stream, 5);
    assert_eq!(refused.payload, 7u32.to_be_bytes(), "REFUSED_STREAM");
    let page = metrics(&s).await;
    assert!(page.contains("shortfirst_http2_resets_sent_total{error=\"refused_stream\"} 1\n"), "{page}");
    // Shutdown: GOAWAY, while the two streams are still sending.
    let stop = s.stop_signal();
    let _ = stop.send(());
    let goaway = loop {
        let f = raw.next().await.expect("a GOAWAY");
        if f.kind == GOAWAY {
            break f;
        }
    };
    assert_eq!(goaway.stream, 0);
    drop(raw);
    let _ = tokio::time::timeout(Duration::from_secs(10), s.take_task()).await.expect("server stops");
}

/// `curl --http2` in cleartext (prior knowledge) and over TLS, if curl speaks HTTP/2.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curl_speaks_http2_to_it() {
    let version = std::process::Command::new("curl").arg("--version").output();
    let Ok(version) = version else {
        eprintln!("skipping: curl is not installed");
        return;
    };
    if !String::from_utf8_lossy(&version.stdout).contains("HTTP2") {
        eprintln!("skipping: this curl has no HTTP/2 (no HTTP2 feature in `curl --version`)");
        return;
    }
    let certs = tempfile::tempdir().unwrap();
    let (entry, _) = certs::localhost(certs.path());
    let mut s = TestServer::start(move |c| {
        c.tls = Some(TlsSettings { listen: "127.0.0.1:0".parse().unwrap(), certs: vec![entry] });
    })
    .await;
    let tls = s.tls.expect("an HTTPS listener");
    let ca = certs.path().join("ca.crt");
    for (how, url) in [
        ("--http2-prior-knowledge", format!("http://{}/medium.bin", s.addr)),
        ("--http2", format!("https://localhost:{}/medium.bin", tls.port())),
    ] {
        let out = tokio::process::Command::new("curl")
            .args(["-sS", how, "--cacert"])
            .arg(&ca)
            .args(["--resolve", &format!("localhost:{}:127.0.0.1", tls.port()), "-w", "%{stderr}%{http_version}"])
            .arg(&url)
            .output()
            .await
            .unwrap();
        assert!(out.status.success(), "curl {how}: {}", String::from_utf8_lossy(&out.stderr));
        assert_eq!(String::from_utf8_lossy(&out.stderr), "2", "curl {how}: the protocol");
        assert!(out.stdout == pattern(100_000), "curl {how} got {} bytes", out.stdout.len());
    }
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_connection_gets_goaway_then_is_closed() {
    let mut s = TestServer::start(|c| {
        c.idle_timeout = Duration::from_millis(300);
        c.admin = Some("127.0.0.1:0".parse().unwrap());
    })
    .await;
    let mut raw = H2::connect(s.addr).await;
    let started = tokio::time::Instant::now();
    let goaway = loop {
        let f = raw.next().await.expect("a GOAWAY once idle");
        if f.kind == GOAWAY {
            break f;
        }
    };
    assert!(started.elapsed() >= Duration::from_millis(250), "GOAWAY before the idle timeout");
    assert_eq!(goaway.stream, 0);
    // The client never answers the GOAWAY's PING: the server drops it after another timeout.
    let mut rest = Vec::new();
    let closed = tokio::time::timeout(Duration::from_secs(5), raw.io.read_to_end(&mut rest)).await;
    assert!(closed.is_ok(), "the connection stays open");
    let page = metrics(&s).await;
    assert!(page.contains("shortfirst_http2_idle_goaways_total 1"), "{page}");
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_stops_reading_is_closed_after_the_send_timeout() {
    let mut s = TestServer::start(|c| {
        c.send_timeout = Duration::from_millis(300);
        c.admin = Some("127.0.0.1:0".parse().unwrap());
    })
    .await;
    std::fs::write(s.root.join("large.bin"), pattern(8 << 20)).unwrap();
    let mut raw = H2::connect(s.addr).await;
    raw.get(1, "/large.bin").await;
    // Never read: the socket fills and the server can write nothing more.
    let page = wait_for_metric(&s, "shortfirst_http2_stalled_total 1").await;
    assert!(page.contains("shortfirst_http2_stalled_total 1"), "{page}");
    assert!(page.contains("shortfirst_http2_streams_cut_total 1"), "{page}");
    drop(raw);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sidecars_cache_control_and_listings_are_the_same_over_http2() {
    let mut s = TestServer::start(|c| {
        c.cache_control =
            shortfirst_server::cache_control::CacheControl::new(&["/*.css=public, max-age=60".to_string()]).unwrap();
        c.listings = shortfirst_server::Listings::Json;
    })
    .await;
    std::fs::write(s.root.join("app.css"), pattern(4000)).unwrap();
    std::fs::write(s.root.join("app.css.br"), vec![b'b'; 500]).unwrap();
    let mut client = h2_client(TcpStream::connect(s.addr).await.unwrap()).await;
    let css = |enc: &str| get("http://localhost/app.css").header("accept-encoding", enc).body(()).unwrap();
    let r = fetch(&mut client, css("gzip, br")).await;
    assert_eq!((r.status, r.body.as_slice()), (200, &[b'b'; 500][..]));
    assert_eq!(r.headers["content-encoding"], "br");
    assert_eq!(r.headers["vary"], "Accept-Encoding");
    assert_eq!(r.headers["cache-control"], "public, max-age=60");
    assert!(r.headers["etag"].to_str().unwrap().ends_with("-br\""));
    let r = fetch(&mut client, css("identity")).await;
    assert_eq!((r.status, r.body), (200, pattern(4000)));
    assert!(!r.headers.contains_key("content-encoding"));
    // A directory without index.html: its listing, rendered as over HTTP/1.1.
    let r = fetch(&mut client, get("http://localhost/empty/").body(()).unwrap()).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.headers["content-type"], "application/json");
    let listing: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    assert!(listing.is_object(), "{listing}");
    drop(client);
    s.stop().await;
}

/// A request with a body is answered once the client ends its stream (the body read and
/// discarded); one past the discard limit is cancelled unanswered, and the connection
/// goes on serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_body_is_read_to_its_end_before_the_answer() {
    let mut s = TestServer::start(|_| {}).await;
    let mut client = h2_client(TcpStream::connect(s.addr).await.unwrap()).await;
    let req = || get("http://localhost/small.txt").body(()).unwrap();

    client = client.ready().await.unwrap();
    let (response, mut body) = client.send_request(req(), false).unwrap();
    body.send_data(Bytes::from_static(b"ignored"), false).unwrap();
    let mut response = Box::pin(response);
    let early = tokio::time::timeout(Duration::from_millis(300), &mut response).await;
    assert!(early.is_err(), "answered before the client ended its stream");
    body.send_data(Bytes::new(), true).unwrap();
    let r = tokio::time::timeout(Duration::from_secs(5), response).await.expect("answered").unwrap();
    assert_eq!(r.status(), 200);

    client = client.ready().await.unwrap();
    let (response, mut body) = client.send_request(req(), false).unwrap();
    let chunk = Bytes::from(vec![0u8; 64 * 1024]);
    let mut sent = 0;
    let err = loop {
        body.reserve_capacity(chunk.len());
        match std::future::poll_fn(|cx| body.poll_capacity(cx)).await {
            Some(Ok(n)) if n > 0 => {
                body.send_data(chunk.slice(..n), false).unwrap();
                sent += n;
            }
            Some(Ok(_)) => continue,
            Some(Err(e)) if sent > 0 => break Some(e),
            None if sent > 0 => break response.await.err(),
            _ => panic!("no capacity before anything was sent"),
        }
        assert!(sent <= 4 << 20, "4 MB of body sent and the stream still open");
    };
    assert_eq!(err.and_then(|e| e.reason()), Some(h2::Reason::CANCEL));
    assert!(sent > 1 << 20, "cancelled after {sent} bytes");

    let r = fetch(&mut client, req()).await;
    assert_eq!((r.status, r.body.as_slice()), (200, &pattern(100)[..]));
    s.stop().await;
}

/// Rapid reset (CVE-2023-44487): a client that opens streams and resets them at once, in
/// one burst, is sent GOAWAY(ENHANCE_YOUR_CALM); the codec enforces it, `/metrics` counts
/// the resets received and the GOAWAY sent from the frames on the wire.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rapid_reset_flood_is_refused_and_counted() {
    let mut s = TestServer::start(|c| c.admin = Some("127.0.0.1:0".parse().unwrap())).await;
    let mut raw = H2::connect(s.addr).await;
    let mut burst = Vec::new();
    const STREAMS: u32 = 500;
    for i in 0..STREAMS {
        let id = 1 + 2 * i;
        burst.extend(get_frame(id, "/index.html"));
        burst.extend(frame(RST_STREAM, 0, id, &8u32.to_be_bytes())); // CANCEL
    }
    // The server may close the connection before it has read the whole burst.
    let _ = raw.io.write_all(&burst).await;
    let goaway = loop {
        let f = raw.next().await.expect("a GOAWAY for the flood");
        if f.kind == GOAWAY {
            break f;
        }
    };
    assert_eq!(goaway.payload[4..8], 0xbu32.to_be_bytes(), "ENHANCE_YOUR_CALM");
    let page = wait_for_metric(&s, "shortfirst_http2_goaways_sent_total{error=\"enhance_your_calm\"} 1\n").await;
    let resets: u64 = page
        .lines()
        .find_map(|l| l.strip_prefix("shortfirst_http2_resets_received_total{error=\"cancel\"} "))
        .and_then(|v| v.parse().ok())
        .expect("the resets received");
    assert!((20..=u64::from(STREAMS)).contains(&resets), "{resets} resets counted\n{page}");
    s.stop().await;
}
