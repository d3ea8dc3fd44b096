//! The client side's HTTP/1.1 over real sockets: pipelining, persistence, request bodies
//! (length, chunked, `Expect: 100-continue`), HTTP/1.0, target forms, and the requests it
//! refuses (with the status and the connection's close).

mod support;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use support::{read_response, send_raw, start_proxy, End};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

const BOUND: Duration = Duration::from_secs(10);

/// An upstream answering every request with `METHOD TARGET` and the body it got, and, for
/// `/stream`, a body of unknown length (chunked).
async fn echo_upstream() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (s, _) = l.accept().await.unwrap();
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(|req: Request<Incoming>| async move {
                    let line = format!("{} {}|", req.method(), req.uri());
                    let stream = req.uri().path() == "/stream";
                    let body = req.into_body().collect().await.unwrap().to_bytes();
                    let out = [line.as_bytes(), &body].concat();
                    if stream {
                        // Three bytes a frame: a body of unknown length, relayed as it comes.
                        let frames: Vec<Result<_, Infallible>> =
                            out.chunks(3).map(|c| Ok(hyper::body::Frame::data(Bytes::copy_from_slice(c)))).collect();
                        let body = http_body_util::StreamBody::new(futures_util::stream::iter(frames)).boxed_unsync();
                        return Ok::<_, Infallible>(Response::new(body));
                    }
                    Ok(Response::new(Full::new(Bytes::from(out)).map_err(|e| match e {}).boxed_unsync()))
                });
                let _ = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(s), svc).await;
            });
        }
    });
    addr
}

/// Send `request` on a new connection, read until the proxy closes it.
async fn roundtrip(addr: SocketAddr, request: &[u8]) -> (String, End) {
    let r = read_response(send_raw(addr, request).await, BOUND).await;
    let mut all = r.head;
    all.push_str(&String::from_utf8_lossy(&r.body));
    (all, r.end)
}

#[tokio::test]
async fn pipelined_requests_are_answered_in_order_on_one_connection() {
    let p = start_proxy(echo_upstream().await, |_| {}).await;
    let (all, end) = roundtrip(
        p.addr,
        b"GET /a HTTP/1.1\r\nHost: x\r\n\r\n\
          POST /b HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello\
          PUT /c HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2;ext=1\r\nde\r\n0\r\n\r\n\
          GET /d HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert_eq!(end, End::Closed, "{all}");
    assert_eq!(all.matches("HTTP/1.1 200 OK\r\n").count(), 4, "{all}");
    let bodies: Vec<_> = ["GET /a|", "POST /b|hello", "PUT /c|abcde", "GET /d|"].iter().map(|b| all.find(b)).collect();
    assert!(bodies.iter().all(Option::is_some), "{all}");
    assert!(bodies.windows(2).all(|w| w[0] < w[1]), "out of order: {all}");
    assert_eq!(all.matches("connection: close").count(), 1, "only the last answer closes: {all}");
}

#[tokio::test]
async fn a_client_expecting_100_continue_gets_it_before_sending_its_body() {
    let p = start_proxy(echo_upstream().await, |_| {}).await;
    let mut s = send_raw(
        p.addr,
        b"POST /up HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 4\r\nConnection: close\r\n\r\n",
    )
    .await;
    let mut interim = [0u8; 25];
    tokio::time::timeout(BOUND, s.read_exact(&mut interim)).await.unwrap().unwrap();
    assert_eq!(&interim, b"HTTP/1.1 100 Continue\r\n\r\n");
    s.write_all(b"data").await.unwrap();
    let r = read_response(s, BOUND).await;
    assert_eq!(r.status, 200, "{}", r.head);
    assert!(r.body.ends_with(b"POST /up|data"), "{:?}", String::from_utf8_lossy(&r.body));
}

#[tokio::test]
async fn http_1_0_clients_get_bodies_they_can_frame() {
    let p = start_proxy(echo_upstream().await, |_| {}).await;
    // A body of unknown length: chunked to HTTP/1.1, delimited by the close to HTTP/1.0.
    let (all, end) = roundtrip(p.addr, b"GET /stream HTTP/1.0\r\n\r\n").await;
    assert_eq!(end, End::Closed);
    assert!(all.starts_with("HTTP/1.1 200 OK\r\n") && !all.contains("chunked"), "{all}");
    assert!(all.ends_with("\r\n\r\nGET /stream|"), "{all}");
    let (all, _) = roundtrip(p.addr, b"GET /stream HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").await;
    assert!(all.contains("transfer-encoding: chunked\r\n"), "{all}");
    assert!(all.ends_with("0\r\n\r\n"), "{all}");
    // Kept alive when an HTTP/1.0 client asks.
    let mut s = send_raw(p.addr, b"GET /k HTTP/1.0\r\nConnection: keep-alive\r\n\r\n").await;
    let mut buf = vec![0u8; 4096];
    let n = tokio::time::timeout(BOUND, s.read(&mut buf)).await.unwrap().unwrap();
    let head = String::from_utf8_lossy(&buf[..n]);
    assert!(head.contains("connection: keep-alive\r\n") && head.ends_with("GET /k|"), "{head}");
    s.write_all(b"GET /k2 HTTP/1.0\r\n\r\n").await.unwrap();
    let r = read_response(s, BOUND).await;
    assert!(r.body.ends_with(b"GET /k2|") && r.end == End::Closed, "{r:?}");
}

#[tokio::test]
async fn an_absolute_target_is_forwarded_in_origin_form() {
    let p = start_proxy(echo_upstream().await, |_| {}).await;
    let (all, _) =
        roundtrip(p.addr, b"GET http://shop.example/a?b=1 HTTP/1.1\r\nHost: shop.example\r\nConnection: close\r\n\r\n")
            .await;
    assert!(all.ends_with("GET /a?b=1|"), "{all}");
}

#[tokio::test]
async fn bad_requests_are_refused_and_the_connection_closed() {
    let p = start_proxy(echo_upstream().await, |_| {}).await;
    for (request, status) in [
        (&b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\nabc"[..], 400),
        (b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab", 400),
        (b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", 501),
        (b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400),
        (b"GET /\x01 HTTP/1.1\r\nHost: x\r\n\r\n", 400),
        (b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 505),
    ] {
        let r = read_response(send_raw(p.addr, request).await, BOUND).await;
        assert_eq!((r.status, r.end), (status, End::Closed), "{:?}: {}", String::from_utf8_lossy(request), r.head);
        assert!(r.head.contains("connection: close\r\n"), "{}", r.head);
    }
    // A malformed chunked body after admission: 400, and the upstream sees no complete request.
    let r = read_response(
        send_raw(p.addr, b"PUT / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n").await,
        BOUND,
    )
    .await;
    assert_eq!((r.status, r.end), (400, End::Closed), "{}", r.head);
}

#[tokio::test]
async fn a_body_cut_short_by_the_client_is_not_forwarded_as_complete() {
    let p = start_proxy(echo_upstream().await, |_| {}).await;
    let mut s = send_raw(p.addr, b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nabc").await;
    s.shutdown().await.unwrap();
    let r = read_response(s, BOUND).await;
    assert!(r.status == 0 || r.status == 400, "{r:?}");
    assert_ne!(r.end, End::StillOpen);
}

/// A request refused while its client still sends its body: the answer arrives, and the
/// proxy goes on reading (and dropping) what the client sends for a while after its close,
/// instead of resetting the connection (a reset can destroy the answer unread).
#[tokio::test]
async fn a_refusal_reaches_a_client_still_sending_its_body() {
    let p = start_proxy(echo_upstream().await, |_| {}).await;
    let mut s = send_raw(p.addr, b"POST / HTTP/1.1\r\nHost: a\r\nHost: b\r\nContent-Length: 400000\r\n\r\n").await;
    let mut head = [0u8; 12];
    tokio::time::timeout(BOUND, s.read_exact(&mut head)).await.unwrap().unwrap();
    assert_eq!(&head, b"HTTP/1.1 400");
    // After the answer, the rest of the body still goes: the proxy reads it. A closed
    // socket would answer it with a reset, failing the writes.
    let more = vec![b'x'; 50_000];
    for _ in 0..8 {
        tokio::time::timeout(BOUND, s.write_all(&more)).await.unwrap().unwrap();
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let r = read_response(s, BOUND).await;
    assert_eq!(r.end, End::Closed, "{r:?}");
}
