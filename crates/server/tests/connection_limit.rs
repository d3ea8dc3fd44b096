//! `max-connections` through real sockets: `at-max-connections = wait` leaves
//! the next connection in the kernel's accept queue until a connection closes
//! (no 503), the kernel stops completing handshakes beyond the listen backlog,
//! the admin port still answers while the accept loop waits, and shutdown works
//! while it waits; `refuse` answers 503 at once.

mod common;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

use common::{get, req, Raw, TestServer};
use shortfirst_server::AtMaxConnections;
use tokio::net::TcpStream;
use tokio::time::Instant;

/// How long a request at the limit must stay unanswered to count as waiting:
/// on loopback an answered request takes well under a millisecond.
const UNANSWERED_FOR: Duration = Duration::from_millis(300);
/// Bound on anything that should happen "at once" once a slot frees.
const PROMPTLY: Duration = Duration::from_secs(5);

fn limited(max_connections: usize, at_max: AtMaxConnections) -> impl FnOnce(&mut shortfirst_server::ServerConfig) {
    move |c| {
        c.max_connections = max_connections;
        c.at_max_connections = at_max;
        c.admin = Some("127.0.0.1:0".parse().unwrap());
    }
}

/// A connection whose request was answered 200 (so the server has accepted it
/// and counts it), kept alive.
async fn served(addr: SocketAddr) -> Raw {
    let mut c = Raw::connect(addr).await;
    c.send(req("/small.txt").as_bytes()).await;
    assert_eq!(c.response(false).await.unwrap().status, 200);
    c
}

/// The `/metrics` page's unlabelled samples.
async fn metrics(admin: SocketAddr) -> HashMap<String, f64> {
    let page = tokio::time::timeout(PROMPTLY, get(admin, "GET /metrics HTTP/1.1\r\nHost: t\r\n\r\n"))
        .await
        .expect("the admin port answers while the accept loop waits")
        .expect("a response");
    let text = String::from_utf8(page.body).unwrap();
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.contains('{'))
        .filter_map(|l| l.split_once(' '))
        .map(|(k, v)| (k.to_string(), v.parse().unwrap()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_holds_the_next_connection_until_one_closes() {
    let mut s = TestServer::start(limited(2, AtMaxConnections::Wait)).await;
    let admin = s.admin.unwrap();
    let first = served(s.addr).await;
    let mut second = served(s.addr).await;
    let mut third = Raw::connect(s.addr).await; // completed by the kernel, not accepted
    third.send(req("/small.txt").as_bytes()).await;
    let early = tokio::time::timeout(UNANSWERED_FOR, third.response(false)).await;
    assert!(early.is_err(), "answered at the limit: {early:?}");
    let m = metrics(admin).await;
    assert_eq!(m["shortfirst_accept_paused"], 1.0, "{m:?}");
    assert!(m["shortfirst_accept_pauses_total"] >= 1.0, "{m:?}");
    assert!(m["shortfirst_accept_paused_seconds_total"] >= 0.2, "{m:?}");
    drop(first);
    let r = third.response(false).await.expect("served once a slot freed");
    assert_eq!(r.status, 200);
    second.send(req("/small.txt").as_bytes()).await;
    assert_eq!(second.response(false).await.unwrap().status, 200, "the others go on");
    let m = metrics(admin).await;
    assert_eq!(m["shortfirst_connections_refused_total"], 0.0, "{m:?}");
    assert_eq!(m["shortfirst_connections_accepted_total"], 3.0, "{m:?}");
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refuse_answers_the_next_connection_503_at_once() {
    let mut s = TestServer::start(limited(2, AtMaxConnections::Refuse)).await;
    let _first = served(s.addr).await;
    let _second = served(s.addr).await;
    let mut third = Raw::connect(s.addr).await;
    third.send(req("/small.txt").as_bytes()).await;
    let r = tokio::time::timeout(PROMPTLY, third.response(false)).await.unwrap();
    // Best effort: the 503 may be lost to a reset when the request was already sent.
    if let Some(r) = r {
        assert_eq!((r.status, r.header("retry-after")), (503, Some("1")));
    }
    let m = metrics(s.admin.unwrap()).await;
    assert_eq!(m["shortfirst_connections_refused_total"], 1.0, "{m:?}");
    assert_eq!((m["shortfirst_accept_paused"], m["shortfirst_accept_pauses_total"]), (0.0, 0.0), "{m:?}");
    s.stop().await;
}

/// `TcpExt` counters of this network namespace (`/proc/net/netstat`).
fn tcp_ext() -> HashMap<String, u64> {
    let text = std::fs::read_to_string("/proc/net/netstat").unwrap();
    let lines: Vec<&str> = text.lines().filter(|l| l.starts_with("TcpExt:")).collect();
    let (names, values) = (lines[0].split_whitespace().skip(1), lines[1].split_whitespace().skip(1));
    names.zip(values).map(|(n, v)| (n.to_string(), v.parse().unwrap())).collect()
}

/// Connects without waiting for the handshake's end (a task to poll).
fn connect_in_background(addr: SocketAddr) -> tokio::task::JoinHandle<std::io::Result<TcpStream>> {
    tokio::spawn(TcpStream::connect(addr))
}

/// With one connection open and a backlog of 1, the kernel completes the
/// handshakes of the next `backlog + 1` connections (Linux's accept queue is full
/// beyond `backlog`) and drops the SYN of the one after: its `connect` does not
/// finish, `ListenOverflows` and `ListenDrops` grow. That SYN's retransmission
/// (after the kernel's fixed 1 s initial RTO) completes once a slot has freed,
/// and its request is served when the connections ahead of it have closed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn beyond_the_backlog_the_kernel_drops_syns() {
    let mut s = TestServer::start(|c| {
        limited(1, AtMaxConnections::Wait)(c);
        c.backlog = 1;
    })
    .await;
    let first = served(s.addr).await;
    let before = tcp_ext();
    let mut queued = Vec::new();
    let dropped = loop {
        assert!(queued.len() <= 2, "the kernel held more than backlog + 1 connections in the accept queue");
        let pending = connect_in_background(s.addr);
        tokio::time::sleep(UNANSWERED_FOR).await;
        if !pending.is_finished() {
            break pending;
        }
        queued.push(pending.await.unwrap().unwrap());
    };
    assert!(!queued.is_empty(), "no connection waited in the accept queue");
    let after = tcp_ext();
    for counter in ["ListenOverflows", "ListenDrops"] {
        assert!(after[counter] > before[counter], "{counter}: {} → {}", before[counter], after[counter]);
    }
    let m = metrics(s.admin.unwrap()).await;
    assert_eq!(m["shortfirst_connections_accepted_total"], 1.0, "{m:?}");
    // Free the slot: the queued ones are accepted in turn and see their peer gone.
    drop(first);
    drop(queued);
    let stream = tokio::time::timeout(PROMPTLY, dropped).await.expect("handshake after a retransmitted SYN");
    let mut last = Raw::from_stream(stream.unwrap().unwrap());
    last.send(req("/small.txt").as_bytes()).await;
    assert_eq!(last.response(false).await.unwrap().status, 200);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_while_waiting_at_the_limit() {
    let mut s = TestServer::start(limited(1, AtMaxConnections::Wait)).await;
    let mut open = served(s.addr).await;
    let mut waiting = Raw::connect(s.addr).await;
    waiting.send(req("/small.txt").as_bytes()).await;
    assert!(tokio::time::timeout(UNANSWERED_FOR, waiting.response(false)).await.is_err());
    let t0 = Instant::now();
    s.stop().await;
    assert!(t0.elapsed() < Duration::from_secs(2), "idle connections close at once: {:?}", t0.elapsed());
    // The open one is closed; the waiting one is reset with the listener, never answered.
    assert!(open.closed_within(PROMPTLY).await);
    assert!(waiting.closed_within(PROMPTLY).await);
}
