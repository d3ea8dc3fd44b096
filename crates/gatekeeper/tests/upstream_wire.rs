//! The gatekeeper's upstream HTTP/1.1 client on the wire, against a scripted upstream over
//! real loopback sockets: every way a response body is framed (length, chunked with
//! trailers, none, until close), bodies larger than any buffer, interim and early answers,
//! the limits on a response head, and the keep-alive race's retry. Each case checks what
//! the client got and whether the upstream connection was reused or closed.
//!
//! Time is tokio's paused clock, as in `faults.rs`.

mod support;

use std::sync::atomic::Ordering::SeqCst;
use std::time::Duration;

use shortfirst_gatekeeper::ProxyConfig;
use support::*;
use tokio::io::AsyncWriteExt;

const SLACK: Duration = Duration::from_secs(3);
const SETTLE: Duration = Duration::from_secs(5);
const OK: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";

fn timeouts(c: &mut ProxyConfig) {
    c.upstream_timeout = Duration::from_millis(300);
    c.upstream_body_timeout = Duration::from_millis(300);
}

/// A chunked body's data (the client side of the proxy relays chunked).
fn dechunk(mut wire: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let i = wire.windows(2).position(|w| w == b"\r\n").expect("a chunk-size line");
        let size = usize::from_str_radix(std::str::from_utf8(&wire[..i]).unwrap().trim(), 16).unwrap();
        if size == 0 {
            return out;
        }
        out.extend_from_slice(&wire[i + 2..i + 2 + size]);
        wire = &wire[i + 2 + size + 2..];
    }
}

/// `n` bytes of a pattern that shows a lost or repeated piece.
fn pattern(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i % 251) as u8).collect()
}

/// `data` as chunks of `size` bytes, then `trailers` (each a CRLF-ended field line).
fn chunked(data: &[u8], size: usize, trailers: &str) -> Vec<u8> {
    let mut out = Vec::new();
    for c in data.chunks(size) {
        out.extend_from_slice(format!("{:x}\r\n", c.len()).as_bytes());
        out.extend_from_slice(c);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(format!("0\r\n{trailers}\r\n").as_bytes());
    out
}

/// A chunked response with trailers comes through whole, its end is seen exactly (the
/// connection then carries the next request), and its charge is learned as a sample.
#[tokio::test(start_paused = true)]
async fn chunked_bodies_with_trailers_are_relayed_and_the_connection_reused() {
    let body = [
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n".as_slice(),
        &chunked(b"hello world", 5, "x-sum: 42\r\n"),
    ]
    .concat();
    let (up, seen) = scripted_upstream(vec![vec![Step::ReadHead, Step::Write(body), Step::ReadHead, write(OK)]]).await;
    let p = start_proxy(up, timeouts).await;
    let r = exchange(p.addr, &get_request("/chunked"), SLACK).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert!(r.complete(), "{r:?}");
    assert_eq!(dechunk(&r.body), b"hello world");
    let r = exchange(p.addr, &get_request("/next"), SLACK).await;
    assert_eq!((r.status, r.body.as_slice()), (200, b"ok".as_slice()), "{r:?}");
    assert_eq!(seen.accepted.load(SeqCst), 1, "one upstream connection for both");
    assert_at_rest(&p, 1, SETTLE).await;
    let m = scrape(p.admin).await;
    assert_eq!(metric(&m, "gatekeeper_type_cost_samples_total{type=\"GET /chunked\"}"), 1.0, "{m}");
}

/// Responses without a body (to HEAD, 204, 304), whatever their Content-Length says,
/// end at their head: the next response on the connection is read right.
#[tokio::test(start_paused = true)]
async fn bodiless_responses_end_at_their_head() {
    let script = vec![
        Step::ReadHead,
        write(b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\n"),
        Step::ReadHead,
        write(b"HTTP/1.1 204 No Content\r\n\r\n"),
        Step::ReadHead,
        write(b"HTTP/1.1 304 Not Modified\r\ncontent-length: 9\r\n\r\n"),
        Step::ReadHead,
        write(OK),
    ];
    let (up, seen) = scripted_upstream(vec![script]).await;
    let p = start_proxy(up, timeouts).await;
    let head = b"HEAD /h HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    for (request, status) in [(head.to_vec(), 200), (get_request("/204"), 204), (get_request("/304"), 304)] {
        let r = exchange(p.addr, &request, SLACK).await;
        assert_eq!((r.status, r.body.as_slice(), r.end), (status, b"".as_slice(), End::Closed), "{r:?}");
    }
    let r = exchange(p.addr, &get_request("/after"), SLACK).await;
    assert_eq!((r.status, r.body.as_slice()), (200, b"ok".as_slice()), "{r:?}");
    assert_eq!(seen.accepted.load(SeqCst), 1);
    assert_at_rest(&p, 1, SETTLE).await;
}

/// A body with neither length nor chunks ends when the upstream closes: relayed whole,
/// and the connection is not kept.
#[tokio::test(start_paused = true)]
async fn a_body_framed_by_the_close_is_relayed_whole() {
    let data = pattern(40_000);
    let script = vec![Step::ReadHead, write(b"HTTP/1.1 200 OK\r\n\r\n"), Step::Write(data.clone()), Step::Close];
    let (up, seen) = scripted_upstream(vec![script]).await;
    let p = start_proxy(up, timeouts).await;
    let r = exchange(p.addr, &get_request("/close"), SLACK).await;
    assert_eq!(r.status, 200, "{}", r.head);
    assert!(r.complete());
    assert_eq!(dechunk(&r.body), data);
    assert_at_rest(&p, 0, SETTLE).await;
    assert_eq!(seen.open(), 0);
}

/// Bodies many times the read buffer stream through byte for byte, sized or chunked, and
/// leave the connection reusable.
#[tokio::test(start_paused = true)]
async fn bodies_larger_than_any_buffer_stream_through() {
    let data = pattern(3 * 1024 * 1024 + 7);
    let sized = [format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n", data.len()).as_bytes(), &data].concat();
    let chunky =
        [b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n".as_slice(), &chunked(&data, 100_000, "")].concat();
    let script = vec![Step::ReadHead, Step::Write(sized), Step::ReadHead, Step::Write(chunky)];
    let (up, seen) = scripted_upstream(vec![script]).await;
    let p = start_proxy(up, timeouts).await;
    let r = exchange(p.addr, &get_request("/sized"), SLACK).await;
    assert_eq!((r.status, r.content_length()), (200, Some(data.len())));
    assert!(r.body == data, "the sized body came through unchanged");
    let r = exchange(p.addr, &get_request("/chunked"), SLACK).await;
    assert_eq!(r.status, 200);
    assert!(dechunk(&r.body) == data, "the chunked body came through unchanged");
    assert_eq!(seen.accepted.load(SeqCst), 1);
    assert_at_rest(&p, 1, SETTLE).await;
}

/// A response head must fit in 64 KiB and 100 fields, and say what it means: beyond, or
/// malformed, the client gets 502 and the connection is closed. A chunked body whose
/// coding goes wrong after the head is cut.
#[tokio::test(start_paused = true)]
async fn response_heads_are_bounded_and_checked() {
    let field = |n: usize| format!("x-big: {}\r\n", "a".repeat(n));
    let many: String = (0..101).map(|i| format!("x-{i}: 1\r\n")).collect();
    let cases: Vec<(&str, String, u16)> = vec![
        (
            "a head just within the limit",
            format!("HTTP/1.1 200 OK\r\n{}content-length: 2\r\n\r\nok", field(60_000)),
            200,
        ),
        ("a head beyond the limit", format!("HTTP/1.1 200 OK\r\n{}content-length: 2\r\n\r\nok", field(70_000)), 502),
        ("too many fields", format!("HTTP/1.1 200 OK\r\n{many}content-length: 2\r\n\r\nok"), 502),
        ("conflicting lengths", "HTTP/1.1 200 OK\r\ncontent-length: 2, 3\r\n\r\nok".into(), 502),
        ("a bad field name", "HTTP/1.1 200 OK\r\nbad name: 1\r\ncontent-length: 2\r\n\r\nok".into(), 502),
        ("an upgrade", "HTTP/1.1 101 Switching Protocols\r\nupgrade: x\r\n\r\n".into(), 502),
    ];
    for (name, response, status) in cases {
        let (up, seen) = scripted_upstream(vec![vec![Step::ReadHead, write(response.as_bytes())]]).await;
        let p = start_proxy(up, timeouts).await;
        let r = exchange(p.addr, &get_request("/h"), SLACK).await;
        assert_eq!(r.status, status, "{name}: {}", r.head);
        let kept = usize::from(status == 200);
        assert_at_rest(&p, kept, SETTLE).await;
        wait_until(&format!("{name}: upstream connections"), SETTLE, || seen.open() == kept).await;
    }
    // The head and a first chunk, then (after a pause: the head has gone out) a bad one.
    let first = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n";
    let script = vec![Step::ReadHead, write(first), Step::Sleep(Duration::from_millis(50)), write(b"zz\r\n")];
    let (up, seen) = scripted_upstream(vec![script]).await;
    let p = start_proxy(up, timeouts).await;
    let r = exchange(p.addr, &get_request("/h"), SLACK).await;
    assert_eq!(r.status, 200);
    assert!(!r.complete(), "a body whose coding broke must not look complete: {r:?}");
    assert_at_rest(&p, 0, SETTLE).await;
    wait_until("the bad chunk's connection closed", SETTLE, || seen.open() == 0).await;
}

/// Interim (1xx) answers are skipped for the final one; an upstream that answers before it
/// has the whole request body is relayed at once (the rest of the body is not sent and
/// the connection is closed after).
#[tokio::test(start_paused = true)]
async fn interim_and_early_answers() {
    let interim = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nlink: </a>\r\n\r\n";
    let (up, _) = scripted_upstream(vec![vec![Step::ReadHead, write(interim), write(OK)]]).await;
    let p = start_proxy(up, timeouts).await;
    let r = exchange(p.addr, &get_request("/interim"), SLACK).await;
    assert_eq!((r.status, r.body.as_slice()), (200, b"ok".as_slice()), "{r:?}");

    let too_large = b"HTTP/1.1 413 Content Too Large\r\nconnection: close\r\ncontent-length: 4\r\n\r\nbig!";
    let (up, seen) = scripted_upstream(vec![vec![Step::ReadHead, write(too_large)]]).await;
    let p = start_proxy(up, |c| c.upstream_timeout = Duration::from_secs(60)).await;
    let mut c =
        send_raw(p.addr, b"PUT /upload HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 1000000\r\n\r\n")
            .await;
    c.write_all(&vec![b'x'; 100_000]).await.unwrap();
    let r = read_response(&mut c, SLACK).await;
    assert_eq!((r.status, r.body.as_slice()), (413, b"big!".as_slice()), "{r:?}");
    assert!(r.elapsed < Duration::from_secs(1), "answered at once, not at a timeout: {:?}", r.elapsed);
    assert_at_rest(&p, 0, SETTLE).await;
    wait_until("the early answer's connection closed", SETTLE, || seen.open() == 0).await;
}

/// The keep-alive race: an upstream that closes a reused connection on reading the next
/// request gets a `GET` once more on a new connection, counted as a retry.
#[tokio::test(start_paused = true)]
async fn a_get_lost_to_the_keep_alive_race_is_retried_once() {
    let race = vec![Step::ReadHead, write(OK), Step::ReadHead, Step::Close];
    let (up, seen) = scripted_upstream(vec![race, vec![Step::ReadHead, write(OK)]]).await;
    let p = start_proxy(up, timeouts).await;
    for _ in 0..2 {
        let r = exchange(p.addr, &get_request("/again"), SLACK).await;
        assert_eq!((r.status, r.body.as_slice()), (200, b"ok".as_slice()), "{r:?}");
    }
    assert_eq!(seen.requests(), ["GET /again HTTP/1.1"; 3]);
    assert_eq!(metric(&scrape(p.admin).await, "gatekeeper_upstream_retries_total"), 1.0);
    assert_at_rest(&p, 1, SETTLE).await;
}
