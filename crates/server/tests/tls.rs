//! HTTPS end to end: a real server with a TLS listener beside the plaintext one, real
//! sockets, certificates generated here (rcgen: a test CA, ECDSA and RSA leaves), a
//! rustls client — and Debian's curl when it is installed.

mod common;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use common::certs::Ca;
use common::{pattern, populate};
use rustls::pki_types::{CertificateDer, ServerName};
use shortfirst_server::{Server, ServerConfig, TlsEntry, TlsSettings};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::oneshot;
use tokio_rustls::client::TlsStream;

struct Running {
    plain: SocketAddr,
    tls: SocketAddr,
    root: PathBuf,
    reload: Box<dyn Fn() + Send + Sync>,
    metrics: Box<dyn Fn() -> String + Send + Sync>,
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<Result<(), shortfirst_server::ServerError>>,
    _dir: tempfile::TempDir,
}

fn config(dir: &Path, certs: Vec<TlsEntry>) -> ServerConfig {
    let root = populate(dir);
    std::fs::write(root.join("huge.bin"), pattern(16 << 20)).unwrap();
    let mut c = ServerConfig::new(&root);
    c.listen = "127.0.0.1:0".parse().unwrap();
    c.socket_priority = common::can_set_priority();
    c.drain_timeout = Duration::from_secs(5);
    c.tls = Some(TlsSettings { listen: "127.0.0.1:0".parse().unwrap(), certs });
    c
}

async fn start(dir: tempfile::TempDir, config: ServerConfig) -> Running {
    start_observed(dir, config, None).await
}

async fn start_observed(
    dir: tempfile::TempDir,
    config: ServerConfig,
    observer: Option<shortfirst_server::PriorityObserver>,
) -> Running {
    let root = config.root.clone();
    let server = Server::bind_with_observer(config, observer).expect("bind");
    let (plain, tls) = (server.local_addr(), server.tls_addr().expect("a TLS listener"));
    let reload = Box::new(server.cert_reloader());
    let (tx, rx) = oneshot::channel();
    let metrics_server = MetricsHandle::new(&server);
    let task = tokio::spawn(server.run(async move {
        let _ = rx.await;
    }));
    Running {
        plain,
        tls,
        root,
        reload,
        metrics: Box::new(move || metrics_server.get()),
        stop: Some(tx),
        task,
        _dir: dir,
    }
}

/// `/metrics` of a server, read over its admin listener if it has one.
struct MetricsHandle(Option<SocketAddr>);

impl MetricsHandle {
    fn new(server: &Server) -> MetricsHandle {
        MetricsHandle(server.admin_addr())
    }

    fn get(&self) -> String {
        let addr = self.0.expect("an admin listener");
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        use std::io::{Read, Write};
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        out
    }
}

impl Running {
    /// Shuts the server down; returns its directory, still there.
    async fn stop(self) -> tempfile::TempDir {
        let Running { stop, task, _dir, .. } = self;
        let _ = stop.expect("running").send(());
        tokio::time::timeout(Duration::from_secs(10), task).await.expect("server stops").unwrap().unwrap();
        _dir
    }
}

/// `/metrics` once it contains `needle`, or after 2 s (the caller's assertion then fails).
async fn wait_for_metric(s: &Running, needle: &str) -> String {
    let mut page = (s.metrics)();
    for _ in 0..100 {
        if page.contains(needle) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        page = (s.metrics)();
    }
    page
}

/// A client trusting `ca`, offering `alpn`, limited to `versions`.
fn client(
    ca: &Ca,
    alpn: &[&[u8]],
    versions: &[&'static rustls::SupportedProtocolVersion],
) -> tokio_rustls::TlsConnector {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(CertificateDer::from(ca.der().to_vec())).unwrap();
    let mut c = rustls::ClientConfig::builder_with_provider(shortfirst_server::tls::provider())
        .with_protocol_versions(versions)
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    c.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    // Every handshake a full one, so it shows the certificate chosen now.
    c.resumption = rustls::client::Resumption::disabled();
    tokio_rustls::TlsConnector::from(Arc::new(c))
}

fn all_versions() -> Vec<&'static rustls::SupportedProtocolVersion> {
    vec![&rustls::version::TLS13, &rustls::version::TLS12]
}

async fn connect(
    conn: &tokio_rustls::TlsConnector,
    addr: SocketAddr,
    name: &str,
) -> std::io::Result<TlsStream<TcpStream>> {
    let tcp = TcpStream::connect(addr).await?;
    conn.connect(ServerName::try_from(name.to_string()).unwrap(), tcp).await
}

fn peer_cert(s: &TlsStream<TcpStream>) -> Vec<u8> {
    s.get_ref().1.peer_certificates().expect("a certificate")[0].to_vec()
}

/// A response read off any stream: status, head, body (by Content-Length).
struct Resp {
    status: u16,
    head: String,
    body: Vec<u8>,
}

impl Resp {
    fn header(&self, name: &str) -> Option<&str> {
        self.head.lines().find_map(|l| {
            let (n, v) = l.split_once(':')?;
            n.eq_ignore_ascii_case(name).then(|| v.trim())
        })
    }
}

/// Reads one response; `buf` keeps bytes past it (pipelining). `head_only`: HEAD/304.
async fn read_response<S: tokio::io::AsyncRead + Unpin>(s: &mut S, buf: &mut Vec<u8>, head_only: bool) -> Resp {
    let mut chunk = vec![0u8; 64 * 1024];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let n = s.read(&mut chunk).await.unwrap();
        assert!(n > 0, "connection closed before a response head");
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8(buf[..head_end].to_vec()).unwrap();
    let status = head[9..12].parse().unwrap();
    let mut resp = Resp { status, head, body: Vec::new() };
    let len: usize = if head_only { 0 } else { resp.header("content-length").map_or(0, |v| v.parse().unwrap()) };
    while buf.len() < head_end + len {
        let n = s.read(&mut chunk).await.unwrap();
        assert!(n > 0, "connection closed inside a body");
        buf.extend_from_slice(&chunk[..n]);
    }
    resp.body = buf[head_end..head_end + len].to_vec();
    buf.drain(..head_end + len);
    resp
}

fn get(path: &str, extra: &str) -> String {
    format!("GET {path} HTTP/1.1\r\nHost: localhost\r\n{extra}\r\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handshakes_tls13_and_tls12_with_alpn_and_serve_files() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new();
    let (entry, _) = ca.leaf(dir.path(), "ec", &["localhost"], false);
    let mut c = config(dir.path(), vec![entry]);
    c.admin = Some("127.0.0.1:0".parse().unwrap());
    let log = dir.path().join("access.log");
    c.access_log = Some(log.clone());
    let s = start(dir, c).await;
    for (version, want) in [(&rustls::version::TLS13, "TLSv1.3"), (&rustls::version::TLS12, "TLSv1.2")] {
        // (A client offering h2 first gets HTTP/2: tests/http2.rs.)
        let conn = client(&ca, &[b"http/1.1"], &[version]);
        let mut t = connect(&conn, s.tls, "localhost").await.unwrap();
        assert_eq!(t.get_ref().1.alpn_protocol(), Some(&b"http/1.1"[..]), "{want}");
        // Keep-alive and pipelining: two requests in one write, answered in order.
        let two = format!("{}{}", get("/medium.bin", ""), get("/small.txt", ""));
        t.write_all(two.as_bytes()).await.unwrap();
        let mut buf = Vec::new();
        let a = read_response(&mut t, &mut buf, false).await;
        let b = read_response(&mut t, &mut buf, false).await;
        assert_eq!((a.status, a.body.as_slice()), (200, &pattern(100_000)[..]), "{want}");
        assert_eq!((b.status, b.body.as_slice()), (200, &pattern(100)[..]), "{want}");
    }
    // The plaintext listener beside it still serves.
    let mut p = TcpStream::connect(s.plain).await.unwrap();
    p.write_all(get("/small.txt", "Connection: close\r\n").as_bytes()).await.unwrap();
    let r = read_response(&mut p, &mut Vec::new(), false).await;
    assert_eq!((r.status, r.body), (200, pattern(100)));

    // The last response is counted just after its last byte: wait for it.
    let metrics = wait_for_metric(&s, "tls=\"none\"} 1").await;
    for line in [
        "shortfirst_tls_handshakes_total{version=\"1.3\"} 1",
        "shortfirst_tls_handshakes_total{version=\"1.2\"} 1",
        "shortfirst_responses_by_protocol_total{protocol=\"http/1.1\",tls=\"1.3\"} 2",
        "shortfirst_responses_by_protocol_total{protocol=\"http/1.1\",tls=\"1.2\"} 2",
        "shortfirst_responses_by_protocol_total{protocol=\"http/1.1\",tls=\"none\"} 1",
        "shortfirst_tls_handshake_failures_total 0",
    ] {
        assert!(metrics.contains(line), "{line} missing from\n{metrics}");
    }
    let _dir = s.stop().await;
    let log = std::fs::read_to_string(log).unwrap();
    for want in ["tls=TLSv1.3", "tls=TLSv1.2", "tls=-"] {
        assert!(log.lines().any(|l| l.contains("proto=http/1.1") && l.ends_with(want)), "{want} in\n{log}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alpn_without_http11_is_refused_and_counted() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new();
    let (entry, _) = ca.leaf(dir.path(), "ec", &["localhost"], false);
    let mut c = config(dir.path(), vec![entry]);
    c.admin = Some("127.0.0.1:0".parse().unwrap());
    // HTTP/2 off: the server offers http/1.1 only.
    c.http2 = false;
    let s = start(dir, c).await;
    let conn = client(&ca, &[b"h2"], &all_versions());
    let Err(err) = connect(&conn, s.tls, "localhost").await else { panic!("no common application protocol") };
    assert!(err.to_string().contains("NoApplicationProtocol"), "{err}");
    // A client offering no ALPN at all is served (HTTP/1.1 is the default).
    let conn = client(&ca, &[], &all_versions());
    let t = connect(&conn, s.tls, "localhost").await.unwrap();
    assert_eq!(t.get_ref().1.alpn_protocol(), None);
    drop(t);
    // Counted once the server has sent its alert, which the client may see first.
    let metrics = wait_for_metric(&s, "shortfirst_tls_handshake_failures_total 1").await;
    assert!(metrics.contains("shortfirst_tls_handshake_failures_total 1"), "{metrics}");
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sni_chooses_between_certificates() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new();
    let (default, default_der) = ca.leaf(dir.path(), "default", &["localhost"], false);
    let (mut a, a_der) = ca.leaf(dir.path(), "a", &["a.test"], false);
    a.names = vec!["a.test".into()];
    let (mut b, b_der) = ca.leaf(dir.path(), "b", &["b.test", "x.b.test"], true);
    b.names = vec!["b.test".into(), "*.b.test".into()];
    let c = config(dir.path(), vec![default, a, b]);
    let s = start(dir, c).await;
    let conn = client(&ca, &[b"http/1.1"], &all_versions());
    for (name, want) in [("a.test", &a_der), ("b.test", &b_der), ("x.b.test", &b_der), ("localhost", &default_der)] {
        let mut t = connect(&conn, s.tls, name).await.unwrap();
        assert_eq!(&peer_cert(&t), want, "{name}");
        t.write_all(get("/small.txt", "").as_bytes()).await.unwrap();
        assert_eq!(read_response(&mut t, &mut Vec::new(), false).await.body, pattern(100), "{name}");
    }
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn range_conditional_and_head_over_tls() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new();
    let (entry, _) = ca.leaf(dir.path(), "ec", &["localhost"], false);
    let c = config(dir.path(), vec![entry]);
    let s = start(dir, c).await;
    let conn = client(&ca, &[b"http/1.1"], &all_versions());
    let mut t = connect(&conn, s.tls, "localhost").await.unwrap();
    let mut buf = Vec::new();
    t.write_all(get("/medium.bin", "Range: bytes=1000-1999\r\n").as_bytes()).await.unwrap();
    let r = read_response(&mut t, &mut buf, false).await;
    assert_eq!(r.status, 206);
    assert_eq!(r.header("content-range"), Some("bytes 1000-1999/100000"));
    assert_eq!(r.body, pattern(100_000)[1000..2000]);
    let etag = r.header("etag").unwrap().to_string();
    t.write_all(get("/medium.bin", &format!("If-None-Match: {etag}\r\n")).as_bytes()).await.unwrap();
    assert_eq!(read_response(&mut t, &mut buf, true).await.status, 304);
    t.write_all(b"HEAD /medium.bin HTTP/1.1\r\nHost: localhost\r\n\r\n").await.unwrap();
    let r = read_response(&mut t, &mut buf, true).await;
    assert_eq!((r.status, r.header("content-length")), (200, Some("100000")));
    // The connection is still in step after a body-less response.
    t.write_all(get("/small.txt", "").as_bytes()).await.unwrap();
    assert_eq!(read_response(&mut t, &mut buf, false).await.body, pattern(100));
    s.stop().await;
}

/// A listing is sent as a file is: one far larger than rustls's 64 KiB send buffer
/// arrives whole, and the connection stays in step after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_directory_listing_over_tls() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new();
    let (entry, _) = ca.leaf(dir.path(), "ec", &["localhost"], false);
    let mut c = config(dir.path(), vec![entry]);
    c.listings = shortfirst_server::Listings::Json;
    let many = c.root.join("many");
    std::fs::create_dir(&many).unwrap();
    for i in 0..1500 {
        std::fs::write(many.join(format!("a rather long file name, number {i:05}, with spaces.txt")), b"x").unwrap();
    }
    let s = start(dir, c).await;
    let conn = client(&ca, &[b"http/1.1"], &all_versions());
    let mut t = connect(&conn, s.tls, "localhost").await.unwrap();
    let mut buf = Vec::new();
    t.write_all(format!("{}{}", get("/many/", ""), get("/small.txt", "")).as_bytes()).await.unwrap();
    let r = read_response(&mut t, &mut buf, false).await;
    assert_eq!((r.status, r.header("content-type")), (200, Some("application/json")));
    assert!(r.body.len() > 200_000, "{} bytes", r.body.len());
    let doc: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(doc["entries"].as_array().unwrap().len(), 1500);
    assert_eq!(read_response(&mut t, &mut buf, false).await.body, pattern(100));
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plaintext_redirects_to_https_when_asked() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new();
    let (entry, _) = ca.leaf(dir.path(), "ec", &["localhost"], false);
    let mut c = config(dir.path(), vec![entry]);
    c.redirect_https = true;
    let s = start(dir, c).await;
    let mut p = TcpStream::connect(s.plain).await.unwrap();
    p.write_all(b"GET /sub/x?q=1 HTTP/1.1\r\nHost: localhost:8080\r\n\r\n").await.unwrap();
    let r = read_response(&mut p, &mut Vec::new(), false).await;
    assert_eq!(r.status, 308);
    let location = format!("https://localhost:{}/sub/x?q=1", s.tls.port());
    assert_eq!(r.header("location"), Some(location.as_str()));
    // Over TLS the same request is served, not redirected.
    let conn = client(&ca, &[b"http/1.1"], &all_versions());
    let mut t = connect(&conn, s.tls, "localhost").await.unwrap();
    t.write_all(get("/small.txt", "").as_bytes()).await.unwrap();
    assert_eq!(read_response(&mut t, &mut Vec::new(), false).await.status, 200);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reload_keeps_a_long_download_and_serves_the_new_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new();
    let certs_dir = dir.path().join("certs");
    std::fs::create_dir(&certs_dir).unwrap();
    let (entry, old_der) = ca.leaf(&certs_dir, "site", &["localhost"], false);
    let mut c = config(dir.path(), vec![entry]);
    c.admin = Some("127.0.0.1:0".parse().unwrap());
    let s = start(dir, c).await;
    let conn = client(&ca, &[b"http/1.1"], &all_versions());

    // A 16 MiB download, read slowly enough that it spans both reloads.
    let mut long = connect(&conn, s.tls, "localhost").await.unwrap();
    assert_eq!(peer_cert(&long), old_der);
    long.write_all(get("/huge.bin", "").as_bytes()).await.unwrap();
    let mut buf = Vec::new();
    let mut chunk = vec![0u8; 64 * 1024];
    while buf.len() < 1 << 20 {
        let n = long.read(&mut chunk).await.unwrap();
        assert!(n > 0);
        buf.extend_from_slice(&chunk[..n]);
    }

    // SIGHUP's reload: the next handshake gets the new certificate.
    let (_, new_der) = ca.leaf(&s_root_parent(&s).join("certs"), "site", &["localhost"], true);
    (s.reload)();
    let t = connect(&conn, s.tls, "localhost").await.unwrap();
    assert_eq!(peer_cert(&t), new_der, "after SIGHUP");

    // A file change alone: picked up by the poll.
    let (_, newer_der) = ca.leaf(&s_root_parent(&s).join("certs"), "site", &["localhost"], false);
    let deadline = tokio::time::Instant::now() + shortfirst_server::server::TLS_POLL_INTERVAL * 5;
    loop {
        let t = connect(&conn, s.tls, "localhost").await.unwrap();
        if peer_cert(&t) == newer_der {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "the changed files were not reloaded");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // A broken pair is refused; the set in force stays.
    std::fs::write(s_root_parent(&s).join("certs/site.crt"), b"not a certificate").unwrap();
    (s.reload)();
    let t = connect(&conn, s.tls, "localhost").await.unwrap();
    assert_eq!(peer_cert(&t), newer_der, "a bad file does not replace the good set");

    // The old connection's download finishes, byte for byte, on its old keys.
    let r = read_response(&mut long, &mut buf, false).await;
    assert_eq!(r.status, 200);
    assert!(r.body == pattern(16 << 20), "the long download is intact");
    let metrics = (s.metrics)();
    assert!(metrics.contains("shortfirst_tls_reloads_total 2"), "{metrics}");
    assert!(
        metrics.lines().any(|l| l.starts_with("shortfirst_tls_reload_failures_total ") && !l.ends_with(" 0")),
        "{metrics}"
    );
    s.stop().await;
}

fn s_root_parent(s: &Running) -> PathBuf {
    s.root.parent().unwrap().to_path_buf()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_certificate_or_key_is_refused_at_start_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new();
    let (good, _) = ca.leaf(dir.path(), "good", &["localhost"], false);
    let (other, _) = ca.leaf(dir.path(), "other", &["localhost"], false);
    let garbage = dir.path().join("garbage.crt");
    std::fs::write(&garbage, "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n").unwrap();
    let empty = dir.path().join("empty.crt");
    std::fs::write(&empty, "").unwrap();
    let cases = [
        (TlsEntry { cert: garbage.clone(), ..good.clone() }, garbage.clone()),
        (TlsEntry { cert: empty.clone(), ..good.clone() }, empty.clone()),
        (TlsEntry { cert: dir.path().join("missing.crt"), ..good.clone() }, dir.path().join("missing.crt")),
        (TlsEntry { key: other.key.clone(), ..good.clone() }, other.key.clone()),
    ];
    for (entry, named) in cases {
        let c = config(dir.path(), vec![entry]);
        let err = Server::bind(c).err().expect("refused at start");
        let text = format!("{err:#}");
        assert!(text.contains(&named.display().to_string()), "{text} should name {}", named.display());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curl_downloads_over_https() {
    if std::process::Command::new("curl").arg("--version").output().is_err() {
        eprintln!("skipping: curl is not installed");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new();
    let (entry, _) = ca.leaf(dir.path(), "ec", &["localhost"], false);
    let ca_path = dir.path().join("ca.pem");
    std::fs::write(&ca_path, ca.pem()).unwrap();
    let c = config(dir.path(), vec![entry]);
    let s = start(dir, c).await;
    let url = format!("https://localhost:{}/medium.bin", s.tls.port());
    let out = tokio::process::Command::new("curl")
        .args(["-sS", "--http1.1", "--fail", "--cacert"])
        .arg(&ca_path)
        .args(["--resolve", &format!("localhost:{}:127.0.0.1", s.tls.port()), &url])
        .output()
        .await
        .unwrap();
    assert!(out.status.success(), "curl: {}", String::from_utf8_lossy(&out.stderr));
    assert!(out.stdout == pattern(100_000), "curl got {} bytes", out.stdout.len());
    s.stop().await;
}

/// Sums a metric family's samples in a `/metrics` page.
fn metric_sum(page: &str, name: &str) -> f64 {
    page.lines()
        .filter(|l| l.starts_with(name) && l[name.len()..].starts_with([' ', '{']))
        .map(|l| l.rsplit_once(' ').unwrap().1.parse::<f64>().unwrap())
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn user_pacer_grants_ciphertext_and_charges_the_handshake() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new();
    let (entry, _) = ca.leaf(dir.path(), "ec", &["localhost"], false);
    let mut c = config(dir.path(), vec![entry]);
    c.admin = Some("127.0.0.1:0".parse().unwrap());
    c.scheduler = shortfirst_server::Scheduling::User;
    c.link_rate_bits_per_s = Some(1_000_000_000);
    c.socket_priority = false;
    let s = start(dir, c).await;
    let conn = client(&ca, &[b"http/1.1"], &[&rustls::version::TLS13]);
    let mut t = connect(&conn, s.tls, "localhost").await.unwrap();
    t.write_all(get("/medium.bin", "").as_bytes()).await.unwrap();
    let r = read_response(&mut t, &mut Vec::new(), false).await;
    assert_eq!(r.body, pattern(100_000));
    drop(t);
    // Counted after the response's registration ended (its last grant settled).
    let page = wait_for_metric(&s, "tls=\"1.3\"} 1").await;
    let written = metric_sum(&page, "shortfirst_uplink_granted_bytes_total")
        - metric_sum(&page, "shortfirst_uplink_refunded_bytes_total");
    // Plaintext: the head and 100,000 body bytes. Ciphertext adds 22 bytes per record
    // (TLS 1.3, AES-GCM): at least the 7 records of the body and one of the head.
    let plain = (r.head.len() + 100_000) as f64;
    assert!(written >= plain + 8.0 * 22.0 && written < plain + 2_000.0, "written {written}, plaintext {plain}");
    // The handshake's flights (a certificate alone is hundreds of bytes) are charged
    // beside the connection's 250 control bytes.
    let control = metric_sum(&page, "shortfirst_uplink_control_bytes_total");
    assert!(control > 250.0 + 500.0, "control bytes {control}");
    s.stop().await;
}

/// Under the user-space pacer every response over TLS ends, whatever its size against a
/// record: a response is granted exactly the ciphertext it is ranked by, so bytes beyond
/// that estimate would never be granted and the client would wait for them forever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn user_pacer_completes_every_tls_response_size_on_parallel_connections() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new();
    let (entry, _) = ca.leaf(dir.path(), "ec", &["localhost"], false);
    let mut c = config(dir.path(), vec![entry]);
    // Sizes around one record and the head's own record: one byte, a small page, just
    // under and over a record's payload, several records plus a partial one.
    let sizes = [1usize, 7_486, 16_000, 16_500, 40_000, 100_003];
    for n in sizes {
        std::fs::write(c.root.join(format!("f{n}.bin")), pattern(n)).unwrap();
    }
    c.scheduler = shortfirst_server::Scheduling::User;
    c.link_rate_bits_per_s = Some(100_000_000);
    c.socket_priority = false;
    let s = start(dir, c).await;
    let conn = client(&ca, &[b"http/1.1"], &all_versions());
    let mut tasks = Vec::new();
    for n in sizes {
        let (conn, addr) = (conn.clone(), s.tls);
        tasks.push(tokio::spawn(async move {
            let mut t = connect(&conn, addr, "localhost").await.unwrap();
            // Twice on one kept-alive connection, as a browser does.
            for _ in 0..2 {
                t.write_all(get(&format!("/f{n}.bin"), "").as_bytes()).await.unwrap();
                let r = read_response(&mut t, &mut Vec::new(), false).await;
                assert_eq!(r.body, pattern(n), "{n} bytes");
            }
        }));
    }
    for t in tasks {
        tokio::time::timeout(Duration::from_secs(20), t)
            .await
            .expect("every response over TLS ends under the pacer")
            .unwrap();
    }
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_max_connections_a_tls_connection_is_closed_and_shutdown_drains() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new();
    let (entry, _) = ca.leaf(dir.path(), "ec", &["localhost"], false);
    let mut c = config(dir.path(), vec![entry]);
    c.max_connections = 1;
    let s = start(dir, c).await;
    let conn = client(&ca, &[b"http/1.1"], &all_versions());
    let mut first = connect(&conn, s.tls, "localhost").await.unwrap();
    first.write_all(get("/small.txt", "").as_bytes()).await.unwrap();
    assert_eq!(read_response(&mut first, &mut Vec::new(), false).await.status, 200);
    // The one slot is taken: the next TLS connection is closed before its handshake.
    assert!(connect(&conn, s.tls, "localhost").await.is_err(), "a second connection beyond the limit");
    // Shutdown closes the idle kept-alive connection with close_notify: a clean end.
    let _dir = s.stop().await;
    let mut rest = Vec::new();
    let n = first.read_to_end(&mut rest).await.expect("a clean TLS close (close_notify)");
    assert_eq!(n, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kernel_bands_step_down_over_tls() {
    if !common::can_set_priority() {
        eprintln!("skipping: SO_PRIORITY above 6 needs CAP_NET_ADMIN (run as root)");
        return;
    }
    use shortfirst_core::bands::{Band, BandMap};
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let s_seen = seen.clone();
    let observer: shortfirst_server::PriorityObserver = Arc::new(move |_fd, p| s_seen.lock().unwrap().push(p));
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new();
    let (entry, _) = ca.leaf(dir.path(), "ec", &["localhost"], false);
    let mut c = config(dir.path(), vec![entry]);
    // Small socket buffers so the crossings are seen one by one.
    c.send_buffer_bytes = Some(4096);
    let s = start_observed(dir, c, Some(observer)).await;
    let conn = client(&ca, &[b"http/1.1"], &all_versions());
    let mut t = connect(&conn, s.tls, "localhost").await.unwrap();
    t.write_all(get("/medium.bin", "").as_bytes()).await.unwrap();
    assert_eq!(read_response(&mut t, &mut Vec::new(), false).await.body, pattern(100_000));
    let map = BandMap::default();
    let bands: Vec<u8> = seen
        .lock()
        .unwrap()
        .iter()
        .map(|&p| (1..=7).map(|b| Band::new(b).unwrap()).find(|&b| map.so_priority(b) == p).unwrap().index())
        .collect();
    // 100 KB of plaintext, ~100.2 KB of ciphertext: above the default's 64K cutoff (band 5),
    // then better bands as it drains, never worse, the last records in band 3 or better.
    assert_eq!(bands.first(), Some(&5), "{bands:?}");
    assert!(bands.windows(2).all(|w| w[1] < w[0]), "{bands:?}");
    assert!(bands.last().is_some_and(|&b| b <= 3), "{bands:?}");
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_lets_a_tls_download_finish() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new();
    let (entry, _) = ca.leaf(dir.path(), "ec", &["localhost"], false);
    let c = config(dir.path(), vec![entry]);
    let s = start(dir, c).await;
    let conn = client(&ca, &[b"http/1.1"], &all_versions());
    let mut long = connect(&conn, s.tls, "localhost").await.unwrap();
    long.write_all(get("/huge.bin", "").as_bytes()).await.unwrap();
    let mut buf = Vec::new();
    let mut chunk = vec![0u8; 64 * 1024];
    while buf.len() < 1 << 20 {
        let n = long.read(&mut chunk).await.unwrap();
        assert!(n > 0);
        buf.extend_from_slice(&chunk[..n]);
    }
    // Shutdown begins mid-response: the response is finished within the drain timeout,
    // then the connection ends cleanly.
    let stopping = tokio::spawn(s.stop());
    let r = read_response(&mut long, &mut buf, false).await;
    assert_eq!(r.status, 200);
    assert!(r.body == pattern(16 << 20), "the download is intact");
    let mut rest = Vec::new();
    assert_eq!(long.read_to_end(&mut rest).await.expect("close_notify after the response"), 0);
    stopping.await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn srrt_ranks_tls_responses_from_tcp_info() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new();
    let (entry, _) = ca.leaf(dir.path(), "ec", &["localhost"], false);
    let mut c = config(dir.path(), vec![entry]);
    c.policy = shortfirst_server::Policy::Srrt;
    c.rrt_step_bytes = 16 * 1024;
    c.admin = Some("127.0.0.1:0".parse().unwrap());
    let s = start(dir, c).await;
    let conn = client(&ca, &[b"http/1.1"], &all_versions());
    let mut t = connect(&conn, s.tls, "localhost").await.unwrap();
    let mut buf = Vec::new();
    for (path, len) in [("/big.bin", 300_000), ("/small.txt", 100)] {
        t.write_all(get(path, "").as_bytes()).await.unwrap();
        assert_eq!(read_response(&mut t, &mut buf, false).await.body, pattern(len), "{path}");
    }
    let page = wait_for_metric(&s, "shortfirst_srrt_estimate_ratio_count 2").await;
    assert!(page.contains("shortfirst_srrt_estimate_ratio_count 2"), "{page}");
    // The 300 KB response is re-estimated as its ciphertext drains: more than one read.
    assert!(metric_sum(&page, "shortfirst_srrt_tcp_info_reads_total") > 2.0, "{page}");
    assert_eq!(metric_sum(&page, "shortfirst_srrt_tcp_info_errors_total"), 0.0);
    s.stop().await;
}
