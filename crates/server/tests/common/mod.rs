//! Test harness: a real server on an ephemeral loopback port serving a
//! temporary directory, and a small raw HTTP/1.1 client for byte-exact tests.

#![allow(dead_code)]

pub mod certs;
pub mod h2raw;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use shortfirst_server::{PriorityObserver, Server, ServerConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// Whether this process may set priorities above 6 (CAP_NET_ADMIN).
pub fn can_set_priority() -> bool {
    let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    use std::os::fd::AsRawFd;
    let v: libc::c_int = 0x1_000a;
    // SAFETY: valid fd and option buffer.
    unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PRIORITY,
            (&v as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as u32,
        ) == 0
    }
}

pub struct TestServer {
    pub addr: SocketAddr,
    /// The HTTPS listener's address, if the configuration has one.
    pub tls: Option<SocketAddr>,
    pub admin: Option<SocketAddr>,
    pub dir: tempfile::TempDir,
    pub root: PathBuf,
    pub listener_priority: Option<u32>,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<Result<(), shortfirst_server::ServerError>>>,
}

/// The files every test server has: `index.html`, `small.txt` (100 B),
/// `medium.bin` (100 KB), `sub/index.html`, `empty/` (no index), and a secret
/// *outside* the root at `<dir>/secret.txt`.
pub fn populate(dir: &std::path::Path) -> PathBuf {
    let root = dir.join("root");
    std::fs::create_dir_all(root.join("sub")).unwrap();
    std::fs::create_dir_all(root.join("empty")).unwrap();
    std::fs::write(root.join("index.html"), b"<h1>home</h1>\n").unwrap();
    std::fs::write(root.join("small.txt"), pattern(100)).unwrap();
    std::fs::write(root.join("medium.bin"), pattern(100_000)).unwrap();
    std::fs::write(root.join("big.bin"), pattern(300_000)).unwrap();
    std::fs::write(root.join("sub/index.html"), b"sub index\n").unwrap();
    std::fs::write(dir.join("secret.txt"), b"TOP-SECRET\n").unwrap();
    // Changed an hour ago: validators are strong (a file changed within the
    // last second gets a weak ETag, which If-Range never matches).
    let hour_ago = std::time::SystemTime::now() - Duration::from_secs(3600);
    for name in ["index.html", "small.txt", "medium.bin", "big.bin", "sub/index.html"] {
        set_mtime(&root.join(name), hour_ago);
    }
    root
}

/// Sets a file's modification time.
pub fn set_mtime(path: &std::path::Path, when: std::time::SystemTime) {
    std::fs::File::options().write(true).open(path).unwrap().set_modified(when).unwrap();
}

/// Deterministic bytes, distinct per position, so a misplaced range shows.
pub fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 7 + i / 251) as u8).collect()
}

impl TestServer {
    pub async fn start(configure: impl FnOnce(&mut ServerConfig)) -> TestServer {
        TestServer::start_with_observer(configure, None).await
    }

    pub async fn start_with_observer(
        configure: impl FnOnce(&mut ServerConfig),
        observer: Option<PriorityObserver>,
    ) -> TestServer {
        let dir = tempfile::tempdir().unwrap();
        let root = populate(dir.path());
        let mut config = ServerConfig::new(&root);
        config.listen = "127.0.0.1:0".parse().unwrap();
        config.socket_priority = can_set_priority();
        config.drain_timeout = Duration::from_secs(5);
        configure(&mut config);
        let server = Server::bind_with_observer(config, observer).expect("bind");
        let addr = server.local_addr();
        let tls = server.tls_addr();
        let admin = server.admin_addr();
        let listener_priority = server.listener_priority();
        let (tx, rx) = oneshot::channel();
        let task = tokio::spawn(server.run(async move {
            let _ = rx.await;
        }));
        TestServer { addr, tls, admin, dir, root, listener_priority, stop: Some(tx), task: Some(task) }
    }

    /// Signals shutdown; returns when the server's `run` returned.
    pub async fn stop(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        if let Some(task) = self.task.take() {
            tokio::time::timeout(Duration::from_secs(10), task).await.expect("server stops").unwrap().unwrap();
        }
    }

    pub fn stop_signal(&mut self) -> oneshot::Sender<()> {
        self.stop.take().unwrap()
    }

    pub fn take_task(&mut self) -> JoinHandle<Result<(), shortfirst_server::ServerError>> {
        self.task.take().unwrap()
    }
}

#[derive(Debug)]
pub struct Resp {
    pub status: u16,
    pub headers: HashMap<String, String>,
    pub body: Vec<u8>,
}

impl Resp {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(&name.to_ascii_lowercase()).map(String::as_str)
    }
}

/// A raw connection that keeps unread bytes between responses (pipelining).
pub struct Raw {
    pub stream: TcpStream,
    buf: Vec<u8>,
}

impl Raw {
    /// Wraps a custom-configured connected socket.
    pub fn from_stream(stream: TcpStream) -> Raw {
        Raw { stream, buf: Vec::new() }
    }

    pub async fn connect(addr: SocketAddr) -> Raw {
        Raw { stream: TcpStream::connect(addr).await.unwrap(), buf: Vec::new() }
    }

    pub async fn send(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).await.unwrap();
    }

    /// Reads one response; `None` if the server closed first. `head` = the
    /// request was HEAD (no body despite Content-Length).
    pub async fn response(&mut self, head: bool) -> Option<Resp> {
        tokio::time::timeout(Duration::from_secs(10), self.response_inner(head)).await.expect("response in time")
    }

    async fn response_inner(&mut self, head: bool) -> Option<Resp> {
        loop {
            let mut headers = [httparse::EMPTY_HEADER; 64];
            let mut r = httparse::Response::new(&mut headers);
            if let Ok(httparse::Status::Complete(n)) = r.parse(&self.buf) {
                let status = r.code.unwrap();
                let headers: HashMap<String, String> = r
                    .headers
                    .iter()
                    .map(|h| (h.name.to_ascii_lowercase(), String::from_utf8_lossy(h.value).into_owned()))
                    .collect();
                let len: usize = if head || status == 304 {
                    0
                } else {
                    headers.get("content-length").map(|v| v.parse().unwrap()).unwrap_or(0)
                };
                while self.buf.len() < n + len {
                    if !self.read_more().await {
                        panic!("connection closed inside a body");
                    }
                }
                let body = self.buf[n..n + len].to_vec();
                self.buf.drain(..n + len);
                return Some(Resp { status, headers, body });
            }
            if !self.read_more().await {
                return None;
            }
        }
    }

    async fn read_more(&mut self) -> bool {
        let mut chunk = [0u8; 16 * 1024];
        match self.stream.read(&mut chunk).await {
            Ok(0) | Err(_) => false,
            Ok(n) => {
                self.buf.extend_from_slice(&chunk[..n]);
                true
            }
        }
    }

    /// True if the server closes the connection within `within`.
    pub async fn closed_within(&mut self, within: Duration) -> bool {
        matches!(tokio::time::timeout(within, self.read_more()).await, Ok(false))
    }
}

/// One request on a fresh connection.
pub async fn get(addr: SocketAddr, request: &str) -> Option<Resp> {
    let mut c = Raw::connect(addr).await;
    c.send(request.as_bytes()).await;
    c.response(request.starts_with("HEAD ")).await
}

pub fn req(path: &str) -> String {
    format!("GET {path} HTTP/1.1\r\nHost: t\r\n\r\n")
}

/// The admin endpoint's `/metrics` text of a server started with an admin address.
pub async fn metrics_text(s: &TestServer) -> String {
    let admin = s.admin.expect("the server was started with an admin address");
    let r = get(admin, "GET /metrics HTTP/1.1\r\nHost: a\r\n\r\n").await.expect("/metrics answers");
    String::from_utf8(r.body).expect("/metrics is text")
}

/// The value of the unlabelled series `name` in a `/metrics` text; panics,
/// showing the text, when it is missing.
pub fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name).and_then(|rest| rest.strip_prefix(' ')))
        .unwrap_or_else(|| panic!("{name} missing in\n{text}"))
        .parse()
        .expect("a number")
}
