//! The one helper module of the gatekeeper's socket tests: a proxy on an ephemeral port,
//! bounded waits, a raw client that sees exactly what came back (a status, a cut body, a
//! reset), upstreams that refuse or reset, and a scripted upstream driven byte by byte.
//!
//! Every test binary uses part of it.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use shortfirst_gatekeeper::config::{CapacitySetting, Upstream};
use shortfirst_gatekeeper::{Gatekeeper, Handle, ProxyConfig};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;
use tokio::time::Instant;

pub struct Proxy {
    pub addr: SocketAddr,
    pub admin: SocketAddr,
    pub handle: Handle,
    pub _stop: tokio::sync::oneshot::Sender<()>,
}

/// A gatekeeper in front of `upstream`, with an admin port and a fixed capacity of 250 ms
/// unless `f` says otherwise.
pub async fn start_proxy(upstream: SocketAddr, f: impl FnOnce(&mut ProxyConfig)) -> Proxy {
    let mut cfg =
        ProxyConfig::new("127.0.0.1:0".parse().unwrap(), Upstream::parse(&format!("http://{upstream}")).unwrap());
    cfg.admin = Some("127.0.0.1:0".parse().unwrap());
    cfg.capacity = CapacitySetting::Fixed { capacity_us: 250_000 };
    f(&mut cfg);
    let gk = Gatekeeper::bind(cfg).await.unwrap();
    let (addr, admin, handle) = (gk.local_addr(), gk.admin_addr().unwrap(), gk.handle());
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(gk.run(async {
        let _ = rx.await;
    }));
    Proxy { addr, admin, handle, _stop: tx }
}

/// Poll `f` every 5 ms until it holds; panic after `timeout`.
pub async fn wait_until(what: &str, timeout: Duration, mut f: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !f() {
        assert!(t0.elapsed() < timeout, "timed out after {timeout:?} waiting for {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// An address nothing listens on.
pub async fn refused_addr() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    l.local_addr().unwrap()
}

/// Close with a reset (RST) instead of a FIN.
pub fn reset(s: TcpStream) {
    // A zero linger makes close send RST; it does not block (the deprecation is about
    // non-zero lingers).
    #[allow(deprecated)]
    s.set_linger(Some(Duration::ZERO)).unwrap();
    drop(s);
}

/// Accepts, reads the request, then resets the connection.
pub async fn resetting_upstream() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (mut s, _) = l.accept().await.unwrap();
            let mut buf = [0u8; 4096];
            let _ = s.read(&mut buf).await;
            reset(s);
        }
    });
    addr
}

/// The admin endpoint's `/metrics`, over a socket as a scraper reads it.
pub async fn scrape(admin: SocketAddr) -> String {
    let mut s = TcpStream::connect(admin).await.unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").await.unwrap();
    let r = read_response(s, Duration::from_secs(10)).await;
    assert_eq!(r.status, 200, "{}", r.head);
    String::from_utf8(r.body).unwrap()
}

/// The value of an unlabelled metric (or of one series, labels included in `name`).
pub fn metric(text: &str, name: &str) -> f64 {
    let key = format!("{name} ");
    text.lines().find_map(|l| l.strip_prefix(&key)).unwrap_or_else(|| panic!("no {name} in {text}")).parse().unwrap()
}

/// The proxy is back at rest: no charge, nothing admitted or queued, no client connection
/// open, and `upstream_open` upstream connections (kept-alive ones). Read from the admin
/// endpoint; panics with the last scrape after `timeout`.
pub async fn assert_at_rest(p: &Proxy, upstream_open: usize, timeout: Duration) {
    let t0 = Instant::now();
    loop {
        let m = scrape(p.admin).await;
        let rest = [
            ("gatekeeper_load_seconds", 0.0),
            ("gatekeeper_in_flight", 0.0),
            ("gatekeeper_queue_length", 0.0),
            ("gatekeeper_client_connections", 0.0),
            ("gatekeeper_upstream_connections", upstream_open as f64),
        ];
        if rest.iter().all(|&(name, want)| metric(&m, name) == want) {
            return;
        }
        let now: Vec<_> = rest.iter().map(|&(name, _)| (name, metric(&m, name))).collect();
        assert!(t0.elapsed() < timeout, "not at rest after {timeout:?} (want upstream {upstream_open}): {now:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// How a raw client's read of a response ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// The proxy closed the connection (FIN).
    Closed,
    /// The connection was reset.
    Reset,
    /// Still open when the bound ran out.
    StillOpen,
}

/// What a raw client saw: the status (0 if no head), the head, the body bytes after the
/// head as they came (chunk framing included), how the connection ended, and when.
#[derive(Debug)]
pub struct Raw {
    pub status: u16,
    pub head: String,
    pub body: Vec<u8>,
    pub end: End,
    pub elapsed: Duration,
}

impl Raw {
    /// The declared `content-length`, if any.
    pub fn content_length(&self) -> Option<usize> {
        self.head.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-length").then(|| v.trim().parse().ok())?
        })
    }

    /// The body is complete by its own framing: `content-length` bytes, or a chunked
    /// body's last chunk.
    pub fn complete(&self) -> bool {
        match self.content_length() {
            Some(n) => self.body.len() == n,
            None => self.body.ends_with(b"0\r\n\r\n"),
        }
    }
}

/// Connect and send `request` as it is.
pub async fn send_raw(addr: SocketAddr, request: &[u8]) -> TcpStream {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(request).await.unwrap();
    s
}

/// `GET path` with `Connection: close`: the proxy closes after the response.
pub fn get_request(path: &str) -> Vec<u8> {
    format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").into_bytes()
}

/// Send `request` on a new connection and read the response. `elapsed` counts from
/// before the connection is opened: the proxy may act on the request before the sender
/// runs again, so a clock started after sending can read less than a timeout it saw.
pub async fn exchange(addr: SocketAddr, request: &[u8], bound: Duration) -> Raw {
    let t0 = Instant::now();
    let s = send_raw(addr, request).await;
    let mut r = read_response(s, bound).await;
    r.elapsed = t0.elapsed();
    r
}

/// Read until the connection ends or `bound` runs out.
pub async fn read_response(mut s: impl AsyncRead + Unpin, bound: Duration) -> Raw {
    let t0 = Instant::now();
    let mut buf = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    let end = loop {
        let left = bound.saturating_sub(t0.elapsed());
        match tokio::time::timeout(left, s.read(&mut chunk)).await {
            Err(_) => break End::StillOpen,
            Ok(Ok(0)) => break End::Closed,
            Ok(Ok(n)) => buf.extend_from_slice(&chunk[..n]),
            Ok(Err(_)) => break End::Reset,
        }
    };
    let elapsed = t0.elapsed();
    let split = buf.windows(4).position(|w| w == b"\r\n\r\n").map(|i| i + 4);
    let (head, body) = match split {
        Some(i) => (String::from_utf8_lossy(&buf[..i]).into_owned(), buf[i..].to_vec()),
        None => (String::from_utf8_lossy(&buf).into_owned(), Vec::new()),
    };
    let status = head.split(' ').nth(1).and_then(|s| s.parse().ok()).filter(|_| split.is_some()).unwrap_or(0);
    Raw { status, head, body, end, elapsed }
}

/// One step of a scripted upstream connection.
#[derive(Clone)]
pub enum Step {
    /// Read up to the end of a request head (body bytes that came with it are dropped).
    /// If the proxy closes instead, the script ends there.
    ReadHead,
    Write(Vec<u8>),
    Sleep(Duration),
    /// Wait until the test calls `notify_one`.
    WaitFor(Arc<Notify>),
    /// Close with a reset.
    Reset,
    /// Close with a FIN.
    Close,
}

pub fn write(bytes: &[u8]) -> Step {
    Step::Write(bytes.to_vec())
}

/// What a scripted upstream saw.
#[derive(Default)]
pub struct Seen {
    /// Connections accepted.
    pub accepted: AtomicUsize,
    /// Connections over (closed by either side).
    pub ended: AtomicUsize,
    /// Connections the proxy closed (EOF read, or a reset from its side).
    pub closed_by_proxy: AtomicUsize,
    /// The request line of every head read.
    pub requests: Mutex<Vec<String>>,
}

impl Seen {
    pub fn open(&self) -> usize {
        self.accepted.load(SeqCst) - self.ended.load(SeqCst)
    }
    pub fn requests(&self) -> Vec<String> {
        self.requests.lock().unwrap().clone()
    }
}

/// An upstream whose `i`th connection runs `scripts[i]` (the last script for every later
/// one). After its last step a connection is left open and read (discarding) until the
/// proxy closes it, which `Seen::closed_by_proxy` counts: a script ending in a hang is one
/// whose steps simply stop.
pub async fn scripted_upstream(scripts: Vec<Vec<Step>>) -> (SocketAddr, Arc<Seen>) {
    assert!(!scripts.is_empty());
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let seen = Arc::new(Seen::default());
    let seen2 = seen.clone();
    tokio::spawn(async move {
        loop {
            let (s, _) = l.accept().await.unwrap();
            let i = seen2.accepted.fetch_add(1, SeqCst);
            let script = scripts[i.min(scripts.len() - 1)].clone();
            let seen = seen2.clone();
            tokio::spawn(async move {
                if run_script(s, script, &seen).await {
                    seen.closed_by_proxy.fetch_add(1, SeqCst);
                }
                seen.ended.fetch_add(1, SeqCst);
            });
        }
    });
    (addr, seen)
}

/// Run one connection's script; true when the proxy closed the connection.
async fn run_script(mut s: TcpStream, script: Vec<Step>, seen: &Seen) -> bool {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    for step in script {
        match step {
            Step::ReadHead => loop {
                if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                    let head = String::from_utf8_lossy(&buf[..i]).into_owned();
                    seen.requests.lock().unwrap().push(head.lines().next().unwrap_or("").to_string());
                    buf.clear();
                    break;
                }
                match s.read(&mut chunk).await {
                    Ok(0) | Err(_) => return true,
                    Ok(n) => buf.extend_from_slice(&chunk[..n]),
                }
            },
            Step::Write(bytes) => {
                if s.write_all(&bytes).await.is_err() {
                    return true;
                }
            }
            Step::Sleep(d) => tokio::time::sleep(d).await,
            Step::WaitFor(n) => n.notified().await,
            Step::Reset => {
                reset(s);
                return false;
            }
            Step::Close => return false,
        }
    }
    loop {
        match s.read(&mut chunk).await {
            Ok(0) | Err(_) => return true,
            Ok(_) => {}
        }
    }
}
