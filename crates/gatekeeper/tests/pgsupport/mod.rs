//! Test support for the PostgreSQL side: one private PostgreSQL per test binary (started
//! by the project's `pg.sh`, stopped and deleted by its watchdog when the test process
//! exits, even on panic), with md5 and SCRAM roles; the gatekeeper in-process on an
//! ephemeral port; a TCP tee that records both directions of a connection.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Command;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use shortfirst_gatekeeper::pg::gate::Counts;
use shortfirst_gatekeeper::pg::{self, AdmitAll, Limits, PgConfig, ServeStats, TxnGate, TypeSource};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

pub const MD5_USER: &str = "md5user";
pub const MD5_PASSWORD: &str = "md5-secret";
pub const SCRAM_USER: &str = "scramuser";
pub const SCRAM_PASSWORD: &str = "scram-secret";

pub struct Pg {
    pub dir: PathBuf,
    pub port: u16,
}

impl Pg {
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }
    pub fn psql(&self) -> Option<PathBuf> {
        pg_bin().map(|b| b.join("psql"))
    }
}

fn pg_bin() -> Option<PathBuf> {
    if let Some(b) = std::env::var_os("PG_BIN") {
        return Some(PathBuf::from(b));
    }
    ["17", "16", "15"]
        .iter()
        .map(|v| PathBuf::from(format!("/usr/lib/postgresql/{v}/bin")))
        .find(|p| p.join("initdb").exists())
}

static PG: OnceLock<Option<Pg>> = OnceLock::new();

/// The shared instance, or `None` (after printing why) when PostgreSQL is not installed
/// outside CI. In CI (`CI=true`) a missing PostgreSQL is a failure, not a skip.
pub fn pg() -> Option<&'static Pg> {
    PG.get_or_init(|| {
        if pg_bin().is_none() {
            let msg = "PostgreSQL server binaries not found (/usr/lib/postgresql/*/bin); `make apt` installs the Debian package 'postgresql'";
            if std::env::var("CI").is_ok_and(|v| v == "true") {
                panic!("{msg}");
            }
            eprintln!("SKIP: {msg}");
            return None;
        }
        // A plain thread: the caller is usually inside a tokio runtime.
        Some(std::thread::spawn(start_instance).join().expect("PostgreSQL setup panicked"))
    })
    .as_ref()
}

fn start_instance() -> Pg {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples/bookstore/pg.sh");
    let mut last_err = String::new();
    for _ in 0..5 {
        let dir = tempfile::Builder::new().prefix("gk-pg-").tempdir_in("/tmp").expect("temp dir").keep();
        let port = std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("free port").port();
        let out = Command::new(&script)
            .arg("start")
            .arg(&dir)
            .args(["--port", &port.to_string(), "--owner-pid", &std::process::id().to_string()])
            .args(["--shared-buffers", "32MB"])
            .output()
            .expect("run pg.sh");
        if out.status.success() {
            let pg = Pg { dir, port };
            add_password_roles(&pg);
            return pg;
        }
        last_err = String::from_utf8_lossy(&out.stderr).into_owned();
        let _ = std::fs::remove_dir_all(&dir);
    }
    panic!("pg.sh start failed 5 times: {last_err}");
}

/// Roles that must authenticate with md5 and with SCRAM over TCP (the rest stays trust).
fn add_password_roles(pg: &Pg) {
    let hba = pg.dir.join("data/pg_hba.conf");
    let old = std::fs::read_to_string(&hba).expect("read pg_hba.conf");
    let rules =
        format!("host all {MD5_USER} 127.0.0.1/32 md5\nhost all {SCRAM_USER} 127.0.0.1/32 scram-sha-256\n{old}");
    std::fs::write(&hba, rules).expect("write pg_hba.conf");
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    rt.block_on(async {
        let c = direct(pg, "bookstore").await;
        c.batch_execute(&format!(
            "SET password_encryption = 'md5'; CREATE ROLE {MD5_USER} LOGIN PASSWORD '{MD5_PASSWORD}';
             SET password_encryption = 'scram-sha-256'; CREATE ROLE {SCRAM_USER} LOGIN PASSWORD '{SCRAM_PASSWORD}';
             SELECT pg_reload_conf();"
        ))
        .await
        .expect("create password roles");
    });
}

/// A client connected straight to PostgreSQL (for setup and for watching sessions).
pub async fn direct(pg: &Pg, user: &str) -> tokio_postgres::Client {
    connect(&format!("host=127.0.0.1 port={} user={user} dbname=bookstore", pg.port)).await.expect("direct connect")
}

/// Connects with `conninfo`, driving the connection on a task.
pub async fn connect(conninfo: &str) -> Result<tokio_postgres::Client, tokio_postgres::Error> {
    let (client, conn) = tokio_postgres::connect(conninfo, tokio_postgres::NoTls).await?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(client)
}

/// A running gatekeeper in front of `upstream`, stopped when dropped.
pub struct Proxy<G = AdmitAll> {
    pub addr: SocketAddr,
    pub gate: Arc<G>,
    pub stats: Arc<ServeStats>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl<G> Drop for Proxy<G> {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
    }
}

impl<G> Proxy<G> {
    pub fn conninfo(&self, user: &str) -> String {
        format!("host=127.0.0.1 port={} user={user} dbname=bookstore", self.addr.port())
    }
    pub async fn client(&self) -> tokio_postgres::Client {
        connect(&self.conninfo("bookstore")).await.expect("connect through the gatekeeper")
    }
}

impl<G: std::ops::Deref<Target = Counts>> Proxy<G> {
    /// Waits (up to 10 s) until no transaction is in flight.
    pub async fn settled(&self) {
        eventually(|| self.gate.in_flight() == 0, "no transaction in flight").await;
    }
}

pub async fn proxy(upstream: String, limits: Limits) -> Proxy {
    proxy_with(upstream, limits, AdmitAll::new()).await
}

pub async fn proxy_with<G: TxnGate>(upstream: String, limits: Limits, gate: G) -> Proxy<G> {
    let config = PgConfig { upstream_addr: upstream, limits, types: TypeSource::default(), tls: None };
    proxy_config(config, gate).await
}

/// A running gatekeeper of `config` admitting through `gate`.
pub async fn proxy_config<G: TxnGate>(config: PgConfig, gate: G) -> Proxy<G> {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().unwrap();
    let gate = Arc::new(gate);
    let stats = Arc::new(ServeStats::default());
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(pg::serve(listener, config, gate.clone(), stats.clone(), async {
        let _ = rx.await;
    }));
    Proxy { addr, gate, stats, stop: Some(tx) }
}

pub async fn eventually(mut cond: impl FnMut() -> bool, what: &str) {
    for _ in 0..1000 {
        if cond() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("timed out waiting for: {what}");
}

/// What a tee saw, per direction.
#[derive(Default)]
pub struct Recording {
    pub client_to_server: Vec<u8>,
    pub server_to_client: Vec<u8>,
}

/// A TCP tee on an ephemeral port: relays every connection to `upstream` and records the
/// bytes of each direction (all connections appended to one recording).
pub async fn tee(upstream: String) -> (SocketAddr, Arc<Mutex<Recording>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind tee");
    let addr = listener.local_addr().unwrap();
    let rec = Arc::new(Mutex::new(Recording::default()));
    let r = rec.clone();
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let server = TcpStream::connect(&upstream).await.expect("tee upstream");
            let (mut crd, mut cwr) = client.into_split();
            let (mut srd, mut swr) = server.into_split();
            let (r1, r2) = (r.clone(), r.clone());
            tokio::spawn(async move {
                let mut b = vec![0u8; 8192];
                while let Ok(n @ 1..) = crd.read(&mut b).await {
                    r1.lock().unwrap().client_to_server.extend_from_slice(&b[..n]);
                    if swr.write_all(&b[..n]).await.is_err() {
                        break;
                    }
                }
                let _ = swr.shutdown().await;
            });
            tokio::spawn(async move {
                let mut b = vec![0u8; 8192];
                while let Ok(n @ 1..) = srd.read(&mut b).await {
                    r2.lock().unwrap().server_to_client.extend_from_slice(&b[..n]);
                    if cwr.write_all(&b[..n]).await.is_err() {
                        break;
                    }
                }
                let _ = cwr.shutdown().await;
            });
        }
    });
    (addr, rec)
}

/// A running gatekeeper (pass-through) in front of `upstream` that answers SSLRequest with
/// TLS over `tls`.
pub async fn proxy_with_tls(upstream: String, tls: shortfirst_gatekeeper::pg::PgTls) -> Proxy {
    let limits = Limits::default();
    let config = PgConfig { upstream_addr: upstream, limits, types: TypeSource::default(), tls: Some(tls) };
    proxy_config(config, AdmitAll::new()).await
}

/// A self-signed certificate for `localhost`, written as `cert.pem` and `key.pem` into
/// `dir`: the pair and the two paths.
pub fn self_signed(dir: &std::path::Path) -> (rcgen::CertifiedKey, PathBuf, PathBuf) {
    let ck = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    std::fs::write(&cert, ck.cert.pem()).unwrap();
    std::fs::write(&key, ck.key_pair.serialize_pem()).unwrap();
    (ck, cert, key)
}
