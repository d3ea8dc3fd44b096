//! Virtual hosts and the configuration reload end to end: a real server started from a
//! TOML file as `shortfirst serve --config FILE` starts it, real sockets; HTTP/1.1 (raw),
//! HTTP/2 (the `h2` crate's client over h2c) and HTTPS with SNI (a rustls client,
//! certificates made here); the reload run as SIGHUP runs it (`Server::config_reloader`).

mod common;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use common::certs::Ca;
use common::{get, metric, pattern, Raw, Resp};
use rustls::pki_types::{CertificateDer, ServerName};
use shortfirst_server::{ConfigFile, Server, ServerConfig, ServerError};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::oneshot;

type Reload = Box<dyn Fn() -> Result<Vec<&'static str>, ServerError> + Send + Sync>;

/// A server started from `dir/serve.toml`, with the flags over it a test runner would give.
struct Running {
    file: PathBuf,
    addr: SocketAddr,
    tls: Option<SocketAddr>,
    admin: SocketAddr,
    reload: Reload,
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<Result<(), ServerError>>,
}

impl Running {
    async fn start(dir: &Path, toml: &str) -> Running {
        let file = dir.join("serve.toml");
        rewrite(&file, toml);
        let flags = ConfigFile {
            config: Some(file.clone()),
            listen: Some("127.0.0.1:0".parse().unwrap()),
            admin: Some("127.0.0.1:0".parse().unwrap()),
            socket_priority: Some(false),
            ..Default::default()
        };
        let server = Server::bind(ServerConfig::from_flags(flags.clone()).unwrap()).expect("bind");
        let (addr, tls, admin) = (server.local_addr(), server.tls_addr(), server.admin_addr().unwrap());
        let reload = Box::new(server.config_reloader(flags));
        let (tx, rx) = oneshot::channel();
        let task = tokio::spawn(server.run(async move {
            let _ = rx.await;
        }));
        Running { file, addr, tls, admin, reload, stop: Some(tx), task }
    }

    /// Writes the config file anew and reloads it (as SIGHUP does).
    fn reload_with(&self, toml: &str) -> Result<Vec<&'static str>, ServerError> {
        rewrite(&self.file, toml);
        (self.reload)()
    }

    async fn metrics(&self) -> String {
        let r = get(self.admin, "GET /metrics HTTP/1.1\r\nHost: a\r\n\r\n").await.unwrap();
        String::from_utf8(r.body).unwrap()
    }

    async fn stop(mut self) {
        let _ = self.stop.take().unwrap().send(());
        tokio::time::timeout(Duration::from_secs(10), self.task).await.unwrap().unwrap().unwrap();
    }
}

/// Replaces a file whole (a rename), as editors and deploy tools do.
fn rewrite(path: &Path, text: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

/// A docroot `dir/name` whose `who.txt` says `name`.
fn site(dir: &Path, name: &str) -> String {
    let root = dir.join(name);
    std::fs::create_dir_all(&root).unwrap();
    std::fs::write(root.join("who.txt"), name).unwrap();
    format!("{:?}", root.display().to_string())
}

fn host_get(path: &str, host: &str) -> String {
    format!("GET {path} HTTP/1.1\r\nHost: {host}\r\n\r\n")
}

async fn who(addr: SocketAddr, host: &str) -> (u16, String) {
    let r = get(addr, &host_get("/who.txt", host)).await.expect("an answer");
    (r.status, String::from_utf8_lossy(&r.body).into_owned())
}

/// Two hosts (one with aliases and a wildcard) beside the default site.
fn two_hosts(d: &Path, extra: &str) -> String {
    let (default, a, b) = (site(d, "default"), site(d, "a"), site(d, "b"));
    format!(
        "root = {default}\n{extra}\n[[host]]\nname = \"a.test\"\nroot = {a}\n\
         [[host]]\nname = [\"b.test\", \"www.b.test\", \"*.b.example\"]\nroot = {b}\n"
    )
}

async fn h2c(addr: SocketAddr) -> h2::client::SendRequest<Bytes> {
    let tcp = TcpStream::connect(addr).await.unwrap();
    let (send, conn) = h2::client::handshake(tcp).await.expect("HTTP/2 handshake");
    tokio::spawn(async move {
        let _ = conn.await;
    });
    send
}

async fn h2_get(client: &mut h2::client::SendRequest<Bytes>, uri: &str) -> (u16, String) {
    *client = client.clone().ready().await.unwrap();
    let (response, _) = client.send_request(http::Request::get(uri).body(()).unwrap(), true).unwrap();
    let (parts, mut body) = response.await.unwrap().into_parts();
    let mut bytes = Vec::new();
    while let Some(chunk) = body.data().await {
        let chunk = chunk.unwrap();
        let _ = body.flow_control().release_capacity(chunk.len());
        bytes.extend_from_slice(&chunk);
    }
    (parts.status.as_u16(), String::from_utf8_lossy(&bytes).into_owned())
}

#[tokio::test]
async fn two_hosts_on_one_listener_over_http1_and_http2() {
    let dir = tempfile::tempdir().unwrap();
    let s = Running::start(dir.path(), &two_hosts(dir.path(), "")).await;
    for (host, want) in [
        ("a.test", "a"),
        ("A.Test:8080", "a"),
        ("b.test", "b"),
        ("www.b.test.", "b"),
        ("x.b.example", "b"),
        ("b.example", "default"),
        ("c.test", "default"),
        ("127.0.0.1", "default"),
    ] {
        assert_eq!(who(s.addr, host).await, (200, want.to_string()), "Host: {host}");
    }
    // An absolute-form target's authority wins over Host (RFC 9112 §3.2.2).
    let r = get(s.addr, "GET http://a.test/who.txt HTTP/1.1\r\nHost: b.test\r\n\r\n").await.unwrap();
    assert_eq!((r.status, r.body.as_slice()), (200, &b"a"[..]));
    // One keep-alive connection, a site per request.
    let mut c = Raw::connect(s.addr).await;
    c.send(format!("{}{}", host_get("/who.txt", "b.test"), host_get("/who.txt", "a.test")).as_bytes()).await;
    let bodies: Vec<Vec<u8>> = vec![c.response(false).await.unwrap().body, c.response(false).await.unwrap().body];
    assert_eq!(bodies, [b"b".to_vec(), b"a".to_vec()]);
    // HTTP/2: the :authority chooses, stream by stream on one connection.
    let mut client = h2c(s.addr).await;
    for (uri, want) in
        [("http://a.test/who.txt", "a"), ("http://WWW.B.TEST:80/who.txt", "b"), ("http://c.test/who.txt", "default")]
    {
        assert_eq!(h2_get(&mut client, uri).await, (200, want.to_string()), "{uri}");
    }
    // A host's files only: no reaching another's root, nor above its own.
    assert_eq!(get(s.addr, &host_get("/../b/who.txt", "a.test")).await.unwrap().status, 400);
    assert_eq!(metric(&s.metrics().await, "shortfirst_virtual_hosts"), 2.0);
    s.stop().await;
}

#[tokio::test]
async fn an_unknown_host_is_answered_as_configured() {
    for (setting, status) in [("default", 200), ("misdirected", 421), ("not-found", 404)] {
        let dir = tempfile::tempdir().unwrap();
        let s = Running::start(dir.path(), &two_hosts(dir.path(), &format!("unknown-host = \"{setting}\""))).await;
        assert_eq!(who(s.addr, "a.test").await, (200, "a".into()), "{setting}");
        let (got, body) = who(s.addr, "c.test").await;
        assert_eq!(got, status, "{setting}: {body}");
        if status == 200 {
            assert_eq!(body, "default");
        }
        // HTTP/1.0 without Host names no host either.
        let r = get(s.addr, "GET /who.txt HTTP/1.0\r\n\r\n").await.unwrap();
        assert_eq!(r.status, status, "{setting}: no Host");
        let mut client = h2c(s.addr).await;
        assert_eq!(h2_get(&mut client, "http://c.test/who.txt").await.0, status, "{setting}: HTTP/2");
        s.stop().await;
    }
}

/// Reads a response's head off `c`, then its body at about `rate` bytes a second until
/// `until` bytes of it (or the whole) are in `body`.
async fn read_slowly(c: &mut TcpStream, body: &mut Vec<u8>, len: &mut Option<usize>, until: usize) {
    let mut buf = vec![0u8; 64 * 1024];
    while len.map_or(true, |l| body.len() < l.min(until)) {
        let n = c.read(&mut buf).await.unwrap();
        assert!(n > 0, "connection closed after {} body bytes", body.len());
        body.extend_from_slice(&buf[..n]);
        if len.is_none() {
            if let Some(end) = body.windows(4).position(|w| w == b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&body[..end]).to_lowercase();
                assert!(head.starts_with("http/1.1 200"), "{head}");
                let value = head.split("content-length: ").nth(1).unwrap().split("\r\n").next().unwrap();
                *len = Some(value.parse().unwrap());
                body.drain(..end + 4);
            }
        }
        tokio::time::sleep(Duration::from_millis(4)).await; // at most 16 MB/s
    }
}

#[tokio::test]
async fn a_reload_changes_the_root_while_a_long_download_goes_on_from_the_old_one() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (v1, v2) = (site(d, "v1"), site(d, "v2"));
    let big = pattern(16 << 20);
    std::fs::write(d.join("v1/big.bin"), &big).unwrap();
    std::fs::write(d.join("v2/big.bin"), b"the new one").unwrap();
    let s = Running::start(d, &format!("root = {v1}\n")).await;
    // A keep-alive connection open across the reload.
    let mut kept = Raw::connect(s.addr).await;
    kept.send(host_get("/who.txt", "t").as_bytes()).await;
    assert_eq!(kept.response(false).await.unwrap().body, b"v1");
    // A slow reader with a small receive window: 16 MiB cannot be in flight at the reload.
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(64 * 1024).unwrap();
    let mut download = socket.connect(s.addr).await.unwrap();
    download.write_all(host_get("/big.bin", "t").as_bytes()).await.unwrap();
    let (mut body, mut len) = (Vec::new(), None);
    read_slowly(&mut download, &mut body, &mut len, 1 << 20).await;
    assert_eq!(len, Some(big.len()));

    assert_eq!(s.reload_with(&format!("root = {v2}\n")).unwrap(), Vec::<&str>::new());
    // The old file is gone from its directory: the download reads the one it opened.
    std::fs::remove_file(d.join("v1/big.bin")).unwrap();
    assert!(body.len() < big.len(), "still downloading at the reload");
    assert_eq!(who(s.addr, "t").await, (200, "v2".into()), "a new connection");
    kept.send(host_get("/who.txt", "t").as_bytes()).await;
    assert_eq!(kept.response(false).await.unwrap().body, b"v2", "a new request on an open connection");
    assert_eq!(get(s.addr, &host_get("/big.bin", "t")).await.unwrap().body, b"the new one");

    read_slowly(&mut download, &mut body, &mut len, usize::MAX).await;
    assert!(body == big, "the download went on from the old root's file, whole");
    let page = s.metrics().await;
    assert_eq!(metric(&page, "shortfirst_config_reloads_total"), 1.0);
    assert_eq!(metric(&page, "shortfirst_config_reload_failures_total"), 0.0);
    s.stop().await;
}

#[tokio::test]
async fn an_invalid_reload_is_refused_and_the_running_configuration_keeps_serving() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let good = two_hosts(d, "");
    let s = Running::start(d, &good).await;
    let missing = d.join("no-such-dir");
    let root = site(d, "default");
    let cases: Vec<(String, Vec<String>)> = vec![
        (format!("{good}max-conections = 3\n"), vec!["max-conections".into()]),
        (format!("{good}[[host]]\nname = \"a_c.test\"\nroot = {root}\n"), vec!["host".into(), "a_c.test".into()]),
        (format!("{good}[[host]]\nname = \"A.test\"\nroot = {root}\n"), vec!["a.test".into(), "#1 and #3".into()]),
        (
            format!("{good}[[host]]\nname = \"c.test\"\nroot = {:?}\n", missing.display().to_string()),
            vec!["root".into(), missing.display().to_string()],
        ),
        (good.replace("root = ", "root = = "), vec![]),
        (
            format!("{good}[[host]]\nname = \"c.test\"\nroot = {root}\ncache-control = [\"nothing\"]\n"),
            vec!["cache-control".into()],
        ),
    ];
    for (i, (text, needles)) in cases.iter().enumerate() {
        let err = s.reload_with(text).unwrap_err().to_string();
        if !needles.iter().any(|n| n.contains("no-such-dir")) {
            assert!(err.contains("serve.toml"), "the file is named: {err}");
        }
        for n in needles {
            assert!(err.contains(n.as_str()), "{text}: {err} lacks {n}");
        }
        // Still the running configuration.
        assert_eq!(who(s.addr, "a.test").await, (200, "a".into()));
        assert_eq!(who(s.addr, "c.test").await, (200, "default".into()));
        let page = s.metrics().await;
        assert_eq!(metric(&page, "shortfirst_config_reload_failures_total"), (i + 1) as f64);
        assert_eq!(metric(&page, "shortfirst_config_reloads_total"), 0.0);
        assert_eq!(metric(&page, "shortfirst_config_last_reload_successful"), 0.0);
    }
    // Mended, it applies.
    let c = site(d, "c");
    s.reload_with(&format!("{good}[[host]]\nname = \"c.test\"\nroot = {c}\n")).unwrap();
    assert_eq!(who(s.addr, "c.test").await, (200, "c".into()));
    let page = s.metrics().await;
    assert_eq!(metric(&page, "shortfirst_config_reloads_total"), 1.0);
    assert_eq!(metric(&page, "shortfirst_config_last_reload_successful"), 1.0);
    s.stop().await;
}

#[tokio::test]
async fn a_reload_changes_cache_control_rules_and_names_what_takes_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (default, a) = (site(d, "default"), site(d, "a"));
    let config = |top: &str, host: &str, extra: &str| {
        format!(
            "root = {default}\ncache-control = [{top:?}]\n{extra}\n[[host]]\nname = \"a.test\"\nroot = {a}\n{host}\n"
        )
    };
    let s = Running::start(d, &config("/*.txt=no-cache", "cache-control = [\"/**=public, max-age=60\"]", "")).await;
    let addr = s.addr;
    let cache_control = |host: &'static str| async move {
        let r: Resp = get(addr, &host_get("/who.txt", host)).await.unwrap();
        r.header("cache-control").map(str::to_string)
    };
    assert_eq!(cache_control("t").await.as_deref(), Some("no-cache"));
    assert_eq!(cache_control("a.test").await.as_deref(), Some("public, max-age=60"));
    // The top-level rule changes; the host, without rules of its own now, takes it.
    let ignored = s
        .reload_with(&config("/*.txt=public, max-age=5", "", "threads = 3\npolicy = \"fair\"\nmax-connections = 10"))
        .unwrap();
    assert_eq!(ignored, ["threads", "policy"], "restart-only settings are named");
    assert_eq!(cache_control("t").await.as_deref(), Some("public, max-age=5"));
    assert_eq!(cache_control("a.test").await.as_deref(), Some("public, max-age=5"));
    s.stop().await;
}

#[tokio::test]
async fn a_reload_changes_the_head_limit_for_new_connections_only() {
    let dir = tempfile::tempdir().unwrap();
    let root = site(dir.path(), "default");
    let s = Running::start(dir.path(), &format!("root = {root}\n")).await;
    // A request with a 3 KB header field: within the default limit.
    let big = format!("GET /who.txt HTTP/1.1\r\nHost: t\r\nX-Pad: {}\r\n\r\n", "p".repeat(3000));
    let mut held = Raw::connect(s.addr).await;
    held.send(big.as_bytes()).await;
    assert_eq!(held.response(false).await.unwrap().status, 200);
    let ignored = s
        .reload_with(&format!(
            "root = {root}\nmax-request-line-bytes = 1024\nmax-header-bytes = 2048\nheader-timeout = \"5s\"\n"
        ))
        .unwrap();
    assert!(ignored.is_empty(), "head limits and timeouts apply on reload: {ignored:?}");
    // A new connection takes the new limit.
    let r = get(s.addr, &big).await.unwrap();
    assert_eq!(r.status, 431, "the new limit");
    // The connection accepted before the reload keeps the limit it started with.
    held.send(big.as_bytes()).await;
    assert_eq!(held.response(false).await.unwrap().status, 200, "the open connection's own limit");
    s.stop().await;
}

#[tokio::test]
async fn a_reload_changes_the_connection_limit() {
    let dir = tempfile::tempdir().unwrap();
    let root = site(dir.path(), "default");
    let s = Running::start(
        dir.path(),
        &format!(
            "root = {root}
"
        ),
    )
    .await;
    // One connection kept open (idle between requests).
    let mut held = Raw::connect(s.addr).await;
    held.send(host_get("/who.txt", "t").as_bytes()).await;
    assert_eq!(held.response(false).await.unwrap().status, 200);
    assert!(s
        .reload_with(&format!(
            "root = {root}
max-connections = 1
"
        ))
        .unwrap()
        .is_empty());
    let r = get(s.addr, &host_get("/who.txt", "t")).await.unwrap();
    assert_eq!((r.status, r.header("retry-after")), (503, Some("1")), "at the new limit");
    s.reload_with(&format!(
        "root = {root}
"
    ))
    .unwrap();
    assert_eq!(who(s.addr, "t").await, (200, "default".into()), "the default limit again");
    held.send(host_get("/who.txt", "t").as_bytes()).await;
    assert_eq!(held.response(false).await.unwrap().status, 200, "the held connection served on");
    s.stop().await;
}

/// A leaf for `name` signed by `ca`, written as `dir/<name>.crt` and `.key`: the
/// `tls-cert`/`tls-key` lines of its `[[host]]` and the leaf's DER.
fn leaf(ca: &Ca, dir: &Path, name: &str) -> (String, Vec<u8>) {
    let (entry, der) = ca.leaf(dir, name, &[name], false);
    let path = |p: PathBuf| format!("{:?}", p.display().to_string());
    (format!("tls-cert = {}\ntls-key = {}\n", path(entry.cert), path(entry.key)), der)
}

/// Over HTTPS with SNI `name`: the certificate the server chose and `/who.txt` for `name`.
async fn https_who(ca: &Ca, addr: SocketAddr, name: &str) -> (Vec<u8>, String) {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(CertificateDer::from(ca.der().to_vec())).unwrap();
    let mut config = rustls::ClientConfig::builder_with_provider(shortfirst_server::tls::provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.resumption = rustls::client::Resumption::disabled();
    let tcp = TcpStream::connect(addr).await.unwrap();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let mut tls = connector.connect(ServerName::try_from(name.to_string()).unwrap(), tcp).await.expect("handshake");
    let chosen = tls.get_ref().1.peer_certificates().unwrap()[0].to_vec();
    tls.write_all(format!("GET /who.txt HTTP/1.1\r\nHost: {name}\r\nConnection: close\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut response = Vec::new();
    let _ = tls.read_to_end(&mut response).await;
    let text = String::from_utf8_lossy(&response).into_owned();
    (chosen, text.split("\r\n\r\n").nth(1).unwrap_or_default().to_string())
}

#[tokio::test]
async fn a_host_s_certificate_is_chosen_by_sni_and_a_reload_adds_one() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let ca = Ca::new();
    let (default, a, b, c) = (site(d, "default"), site(d, "a"), site(d, "b"), site(d, "c"));
    let ((a_tls, a_der), (b_tls, b_der), (c_tls, c_der)) =
        (leaf(&ca, d, "a.test"), leaf(&ca, d, "b.test"), leaf(&ca, d, "c.test"));
    let two = format!(
        "root = {default}\ntls-listen = \"127.0.0.1:0\"\n\
         [[host]]\nname = \"a.test\"\nroot = {a}\n{a_tls}\n[[host]]\nname = \"b.test\"\nroot = {b}\n{b_tls}\n"
    );
    let s = Running::start(d, &two).await;
    let tls = s.tls.unwrap();
    assert_eq!(https_who(&ca, tls, "a.test").await, (a_der.clone(), "a".into()));
    assert_eq!(https_who(&ca, tls, "b.test").await, (b_der.clone(), "b".into()));
    // A reload adds a site with its certificate; the others stay.
    s.reload_with(&format!("{two}[[host]]\nname = \"c.test\"\nroot = {c}\n{c_tls}\n")).unwrap();
    assert_eq!(https_who(&ca, tls, "c.test").await, (c_der, "c".into()));
    assert_eq!(https_who(&ca, tls, "a.test").await, (a_der.clone(), "a".into()));
    assert_eq!(metric(&s.metrics().await, "shortfirst_tls_reloads_total"), 1.0);
    // A reload with a new access log and a certificate that cannot be read is refused
    // before anything is opened: no log file is left behind.
    let log = d.join("new-access.log");
    let missing = d.join("gone.crt");
    let bad = format!(
        "access-log = {:?}\n{two}[[host]]\nname = \"c.test\"\nroot = {c}\ntls-cert = {:?}\ntls-key = {:?}\n",
        log.display().to_string(),
        missing.display().to_string(),
        missing.display().to_string()
    );
    let err = s.reload_with(&bad).unwrap_err().to_string();
    assert!(err.contains("gone.crt"), "{err}");
    assert!(!log.exists(), "a refused reload left {} behind", log.display());
    assert_eq!(https_who(&ca, tls, "a.test").await, (a_der, "a".into()));
    s.stop().await;
}
