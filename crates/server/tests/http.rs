//! HTTP behaviour through real sockets: a hyper client for well-formed
//! requests, a raw client for byte-exact and malformed ones.

mod common;

use std::time::Duration;

use common::{get, pattern, req, Raw, TestServer};
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;
use tokio::time::Instant;

async fn hyper_get(
    addr: std::net::SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> (u16, hyper::HeaderMap, Vec<u8>) {
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await.unwrap();
    tokio::spawn(conn);
    let mut b = hyper::Request::builder().method(method).uri(path).header("host", "test");
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    let resp = sender.send_request(b.body(Empty::<bytes::Bytes>::new()).unwrap()).await.unwrap();
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let body = resp.into_body().collect().await.unwrap().to_bytes().to_vec();
    (status, headers, body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_serves_files_with_their_headers() {
    let mut s = TestServer::start(|_| {}).await;
    let (status, h, body) = hyper_get(s.addr, "GET", "/medium.bin", &[]).await;
    assert_eq!(status, 200);
    assert_eq!(body, pattern(100_000));
    assert_eq!(h["content-length"], "100000");
    assert_eq!(h["content-type"], "application/octet-stream");
    assert_eq!(h["accept-ranges"], "bytes");
    assert!(h["etag"].to_str().unwrap().starts_with('"'));
    let date = h["date"].to_str().unwrap();
    assert!(httpdate::parse_http_date(date).is_ok(), "{date}");
    let lm = httpdate::parse_http_date(h["last-modified"].to_str().unwrap()).unwrap();
    let mtime = std::fs::metadata(s.root.join("medium.bin")).unwrap().modified().unwrap();
    assert!(mtime.duration_since(lm).unwrap() < Duration::from_secs(1));

    let (status, h, body) = hyper_get(s.addr, "GET", "/", &[]).await;
    assert_eq!((status, body.as_slice()), (200, &b"<h1>home</h1>\n"[..]));
    assert_eq!(h["content-type"], "text/html; charset=utf-8");
    let (status, _, body) = hyper_get(s.addr, "GET", "/sub/?x=1", &[]).await;
    assert_eq!((status, body.as_slice()), (200, &b"sub index\n"[..]));
    let (status, h, _) = hyper_get(s.addr, "GET", "/sub?x=1", &[]).await;
    assert_eq!(status, 301);
    assert_eq!(h["location"], "/sub/?x=1");
    assert_eq!(hyper_get(s.addr, "GET", "/empty/", &[]).await.0, 403, "no directory listings");
    assert_eq!(hyper_get(s.addr, "GET", "/nope.txt", &[]).await.0, 404);
    assert_eq!(hyper_get(s.addr, "GET", "/small.txt/", &[]).await.0, 404);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn head_has_headers_and_no_body() {
    let mut s = TestServer::start(|_| {}).await;
    let (status, h, body) = hyper_get(s.addr, "HEAD", "/medium.bin", &[]).await;
    assert_eq!((status, body.len()), (200, 0));
    assert_eq!(h["content-length"], "100000");
    // Raw: HEAD followed by GET on one connection stays in sync.
    let mut c = Raw::connect(s.addr).await;
    c.send(b"HEAD /small.txt HTTP/1.1\r\nHost: t\r\n\r\nGET /small.txt HTTP/1.1\r\nHost: t\r\n\r\n").await;
    let head = c.response(true).await.unwrap();
    assert_eq!(head.header("content-length"), Some("100"));
    let get = c.response(false).await.unwrap();
    assert_eq!(get.body, pattern(100));
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conditional_requests_get_304() {
    let mut s = TestServer::start(|_| {}).await;
    let (_, h, _) = hyper_get(s.addr, "GET", "/small.txt", &[]).await;
    let etag = h["etag"].to_str().unwrap().to_string();
    let lm = h["last-modified"].to_str().unwrap().to_string();
    let (status, h304, body) = hyper_get(s.addr, "GET", "/small.txt", &[("if-none-match", &etag)]).await;
    assert_eq!((status, body.len()), (304, 0));
    assert_eq!(h304["etag"], etag.as_str());
    assert_eq!(hyper_get(s.addr, "GET", "/small.txt", &[("if-modified-since", &lm)]).await.0, 304);
    assert_eq!(hyper_get(s.addr, "HEAD", "/small.txt", &[("if-none-match", "*")]).await.0, 304);
    let old = "Mon, 01 Jan 2001 00:00:00 GMT";
    assert_eq!(hyper_get(s.addr, "GET", "/small.txt", &[("if-modified-since", old)]).await.0, 200);
    // If-None-Match wins over If-Modified-Since.
    let both = [("if-none-match", "\"other\""), ("if-modified-since", lm.as_str())];
    assert_eq!(hyper_get(s.addr, "GET", "/small.txt", &both).await.0, 200);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ranges_get_206_or_416() {
    let mut s = TestServer::start(|_| {}).await;
    let whole = pattern(100_000);
    let (status, h, body) = hyper_get(s.addr, "GET", "/medium.bin", &[("range", "bytes=1000-1999")]).await;
    assert_eq!(status, 206);
    assert_eq!(h["content-range"], "bytes 1000-1999/100000");
    assert_eq!(body, &whole[1000..2000]);
    let (status, h, body) = hyper_get(s.addr, "GET", "/medium.bin", &[("range", "bytes=-10")]).await;
    assert_eq!((status, body.as_slice()), (206, &whole[99_990..]));
    assert_eq!(h["content-length"], "10");
    let (status, h, body) = hyper_get(s.addr, "GET", "/medium.bin", &[("range", "bytes=100000-")]).await;
    assert_eq!((status, body.len()), (416, 0));
    assert_eq!(h["content-range"], "bytes */100000");
    let (_, h, _) = hyper_get(s.addr, "GET", "/medium.bin", &[]).await;
    let etag = h["etag"].to_str().unwrap().to_string();
    let if_range = [("range", "bytes=0-0"), ("if-range", etag.as_str())];
    assert_eq!(hyper_get(s.addr, "GET", "/medium.bin", &if_range).await.0, 206);
    let stale = [("range", "bytes=0-0"), ("if-range", "\"stale\"")];
    assert_eq!(hyper_get(s.addr, "GET", "/medium.bin", &stale).await.0, 200);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keep_alive_and_pipelining_answer_in_order() {
    let mut s = TestServer::start(|_| {}).await;
    let mut c = Raw::connect(s.addr).await;
    // Three requests in one write: answers come back in order.
    c.send(b"GET /small.txt HTTP/1.1\r\nHost: t\r\n\r\nGET /sub/ HTTP/1.1\r\nHost: t\r\n\r\nGET /medium.bin HTTP/1.1\r\nHost: t\r\nRange: bytes=5-9\r\n\r\n").await;
    assert_eq!(c.response(false).await.unwrap().body, pattern(100));
    assert_eq!(c.response(false).await.unwrap().body, b"sub index\n");
    let third = c.response(false).await.unwrap();
    assert_eq!((third.status, third.body.as_slice()), (206, &pattern(10)[5..10]));
    // Still open: a later request on the same connection works.
    c.send(req("/").as_bytes()).await;
    assert_eq!(c.response(false).await.unwrap().status, 200);
    // Connection: close is honoured.
    c.send(b"GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n").await;
    let last = c.response(false).await.unwrap();
    assert_eq!(last.header("connection"), Some("close"));
    assert!(c.closed_within(Duration::from_secs(2)).await);
    // HTTP/1.0: closes unless asked to keep alive.
    let mut c = Raw::connect(s.addr).await;
    c.send(b"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n").await;
    assert_eq!(c.response(false).await.unwrap().header("connection"), Some("keep-alive"));
    c.send(b"GET / HTTP/1.0\r\n\r\n").await;
    assert_eq!(c.response(false).await.unwrap().status, 200);
    assert!(c.closed_within(Duration::from_secs(2)).await);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn error_status_codes() {
    let mut s = TestServer::start(|c| {
        c.max_request_line_bytes = 200;
        c.max_header_bytes = 1024;
        c.max_headers = 8;
        c.max_body_bytes = 10;
    })
    .await;
    let long_target = format!("GET /{} HTTP/1.1\r\nHost: t\r\n\r\n", "a".repeat(300));
    let many_headers = format!("GET / HTTP/1.1\r\nHost: t\r\n{}\r\n", "X-A: 1\r\n".repeat(10));
    let big_header = format!("GET / HTTP/1.1\r\nHost: t\r\nX-Big: {}\r\n\r\n", "b".repeat(1100));
    let cases: Vec<(String, u16, bool)> = vec![
        // (request, status, connection closed afterwards)
        ("POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n\r\n".into(), 405, false),
        ("DELETE / HTTP/1.1\r\nHost: t\r\n\r\n".into(), 405, false),
        ("BREW / HTTP/1.1\r\nHost: t\r\n\r\n".into(), 501, false),
        ("GET / HTTP/2.0\r\nHost: t\r\n\r\n".into(), 505, true),
        ("GET / HTTP/1.1\r\n\r\n".into(), 400, true),
        ("GET\x01 / HTTP/1.1\r\nHost: t\r\n\r\n".into(), 400, true),
        ("GET * HTTP/1.1\r\nHost: t\r\n\r\n".into(), 400, true),
        (long_target, 414, true),
        (many_headers, 431, true),
        (big_header, 431, true),
        ("GET / HTTP/1.1\r\nHost: t\r\nContent-Length: 11\r\n\r\n01234567890".into(), 413, true),
        ("GET / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: gzip\r\n\r\n".into(), 501, true),
        (req("/missing"), 404, false),
        (req("/empty/"), 403, false),
    ];
    for (request, want, closes) in cases {
        let mut c = Raw::connect(s.addr).await;
        c.send(request.as_bytes()).await;
        let r = c.response(false).await.unwrap_or_else(|| panic!("no response to {request:?}"));
        assert_eq!(r.status, want, "{request:?}");
        if want == 405 {
            assert_eq!(r.header("allow"), Some("GET, HEAD"));
        }
        if closes {
            assert_eq!(r.header("connection"), Some("close"), "{request:?}");
            assert!(c.closed_within(Duration::from_secs(3)).await, "{request:?} should close");
        } else {
            c.send(req("/small.txt").as_bytes()).await;
            assert_eq!(c.response(false).await.unwrap().status, 200, "still usable after {request:?}");
        }
    }
    // A small body on a GET is skipped; the next pipelined request is still found.
    let mut c = Raw::connect(s.addr).await;
    c.send(b"GET / HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n\r\nhelloGET /small.txt HTTP/1.1\r\nHost: t\r\n\r\n")
        .await;
    assert_eq!(c.response(false).await.unwrap().status, 200);
    assert_eq!(c.response(false).await.unwrap().body, pattern(100));
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_clients_are_timed_out() {
    let mut s = TestServer::start(|c| {
        c.header_timeout = Duration::from_millis(300);
        c.idle_timeout = Duration::from_millis(400);
    })
    .await;
    // Slowloris: a head trickling in never completes → 408, then close.
    let t0 = Instant::now();
    let mut c = Raw::connect(s.addr).await;
    c.send(b"GET / HTTP/1.1\r\n").await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    c.send(b"X-A: 1\r\n").await;
    let r = c.response(false).await.unwrap();
    assert_eq!(r.status, 408);
    assert!(c.closed_within(Duration::from_secs(3)).await);
    let took = t0.elapsed();
    assert!(took >= Duration::from_millis(280) && took < Duration::from_secs(2), "{took:?}");
    // Idle keep-alive connection: closed quietly after the idle timeout.
    let mut c = Raw::connect(s.addr).await;
    c.send(req("/").as_bytes()).await;
    c.response(false).await.unwrap();
    let t0 = Instant::now();
    assert!(c.closed_within(Duration::from_secs(3)).await);
    assert!(t0.elapsed() >= Duration::from_millis(350), "{:?}", t0.elapsed());
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_limit_answers_503() {
    let mut s = TestServer::start(|c| c.max_connections = 2).await;
    let mut a = Raw::connect(s.addr).await;
    let mut b = Raw::connect(s.addr).await;
    // Make sure both are accepted and counted.
    for c in [&mut a, &mut b] {
        c.send(req("/").as_bytes()).await;
        assert_eq!(c.response(false).await.unwrap().status, 200);
    }
    let mut third = Raw::connect(s.addr).await;
    let r = third.response(false).await.unwrap();
    assert_eq!(r.status, 503);
    assert_eq!(r.header("retry-after"), Some("1"));
    assert!(third.closed_within(Duration::from_secs(2)).await);
    drop(a);
    // The slot frees once the server notices the close.
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        let r = get(s.addr, &req("/")).await.unwrap();
        if r.status == 200 {
            break;
        }
        assert!(Instant::now() < deadline, "slot never freed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graceful_shutdown_finishes_in_flight_responses() {
    let mut s = TestServer::start(|c| c.send_buffer_bytes = Some(4096)).await;
    let idle = Raw::connect(s.addr).await;
    let mut busy = Raw::connect(s.addr).await;
    busy.send(req("/big.bin").as_bytes()).await;
    // Read a little so the response is surely under way, then signal shutdown.
    let mut first = [0u8; 1024];
    use tokio::io::AsyncReadExt;
    let n = busy.stream.read(&mut first).await.unwrap();
    assert!(n > 0);
    let stop = s.stop_signal();
    let task = s.take_task();
    stop.send(()).unwrap();
    // New connections are refused once the listener is closed.
    let deadline = Instant::now() + Duration::from_secs(3);
    while tokio::net::TcpStream::connect(s.addr).await.is_ok() {
        assert!(Instant::now() < deadline, "listener still open");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The in-flight response completes in full, then the connection closes.
    let mut rest = Vec::new();
    busy.stream.read_to_end(&mut rest).await.unwrap();
    let total = n + rest.len();
    let head_end = [&first[..n], &rest].concat().windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    assert_eq!(total - head_end, 300_000);
    tokio::time::timeout(Duration::from_secs(5), task).await.unwrap().unwrap().unwrap();
    drop(idle);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_and_access_log() {
    let dir = tempfile::tempdir().unwrap();
    let log_path = dir.path().join("access.log");
    let lp = log_path.clone();
    let mut s = TestServer::start(move |c| {
        c.admin = Some("127.0.0.1:0".parse().unwrap());
        c.access_log = Some(lp);
    })
    .await;
    get(s.addr, "GET /small.txt HTTP/1.1\r\nHost: t\r\nUser-Agent: t\"ua\r\nReferer: http://r/\r\n\r\n").await.unwrap();
    get(s.addr, &req("/medium.bin")).await.unwrap();
    get(s.addr, &req("/missing")).await.unwrap();
    // A response is counted just after its last byte is written: poll briefly.
    let deadline = Instant::now() + Duration::from_secs(3);
    let text = loop {
        let m = get(s.admin.unwrap(), "GET /metrics HTTP/1.1\r\nHost: t\r\n\r\n").await.unwrap();
        assert_eq!(m.status, 200);
        assert!(m.header("content-type").unwrap().starts_with("text/plain; version=0.0.4"));
        let text = String::from_utf8(m.body).unwrap();
        let all_three = ["{code=\"2xx\"} 2", "{code=\"4xx\"} 1"]
            .iter()
            .all(|tail| text.contains(&format!("shortfirst_responses_total{tail}")));
        if all_three || Instant::now() > deadline {
            break text;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let value = |name: &str| -> f64 {
        text.lines()
            .find_map(|l| l.strip_prefix(name).and_then(|v| v.trim().parse().ok()))
            .unwrap_or_else(|| panic!("{name} missing:\n{text}"))
    };
    // small.txt (~350 B with head) and the 404 in band 1; medium (100 KB) in band 5 of the
    // default cutoffs (64K..256K).
    assert_eq!(value("shortfirst_requests_total{band=\"1\"}"), 2.0);
    assert_eq!(value("shortfirst_requests_total{band=\"5\"}"), 1.0);
    assert!(value("shortfirst_sent_bytes_total{band=\"5\"}") > 30_000.0);
    assert_eq!(value("shortfirst_response_seconds_count{band=\"5\"}"), 1.0);
    assert_eq!(value("shortfirst_responses_total{code=\"4xx\"}"), 1.0);
    assert_eq!(value("shortfirst_cutoff_bytes{band=\"1\",policy=\"srpt\"}"), 1000.0);
    assert!(text.contains("shortfirst_open_connections{band=\"0\"}"));
    assert_eq!(get(s.admin.unwrap(), &req("/other")).await.unwrap().status, 404);
    s.stop().await;

    let log = std::fs::read_to_string(&log_path).unwrap();
    let lines: Vec<&str> = log.lines().collect();
    assert_eq!(lines.len(), 3, "{log}");
    // A line is written after its response's last byte, so the client may already have sent
    // the next request: the lines' order is not the requests' (it once failed on one CPU).
    let line = |needle: &str| -> &str {
        let found: Vec<&str> = lines.iter().copied().filter(|l| l.contains(needle)).collect();
        assert_eq!(found.len(), 1, "one line with {needle:?} in:\n{log}");
        found[0]
    };
    let first = line("GET /small.txt ");
    assert!(first.starts_with("127.0.0.1 - - ["), "{first}");
    let after_time = first.split_once("] ").unwrap().1;
    let after_time = after_time.strip_suffix(" proto=http/1.1 tls=-").expect("protocol and TLS version last");
    let (rest, band) = after_time.rsplit_once(" band=").unwrap();
    assert_eq!(band, "1");
    let (rest, rt) = rest.rsplit_once(" rt=").unwrap();
    assert!(rt.parse::<f64>().unwrap() < 5.0, "{rt}");
    assert_eq!(rest, "\"GET /small.txt HTTP/1.1\" 200 100 \"http://r/\" \"t\\x22ua\"");
    let medium = line("GET /medium.bin ");
    assert!(
        medium.contains("\"GET /medium.bin HTTP/1.1\" 200 100000 \"-\" \"-\"")
            && medium.ends_with("band=5 proto=http/1.1 tls=-"),
        "{medium}"
    );
    assert!(line("GET /missing ").contains("\" 404 "), "{log}");
}
