//! Test support: one private PostgreSQL per test binary (started by the
//! project's `pg.sh`, stopped and deleted by its watchdog when the test
//! process exits, even on panic), a generated template database that each
//! test clones into its own database, the bookstore server in-process on an
//! ephemeral port, and a cookie-keeping browser on one persistent connection.
#![allow(dead_code)]

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use shortfirst_bookstore::interactions::Store;
use shortfirst_bookstore::{db, gen, server};

/// Scale of the template database the tests clone.
pub const ITEMS: u32 = 1_000;
pub const CUSTOMERS: u32 = 5_000;
pub const SEED: u64 = 7;

pub struct Pg {
    pub dir: PathBuf,
    pub port: u16,
}

impl Pg {
    pub fn url(&self, db: &str) -> String {
        format!("postgres://bookstore@127.0.0.1:{}/{db}", self.port)
    }
}

fn pg_binaries_present() -> bool {
    ["17", "16", "15"].iter().any(|v| PathBuf::from(format!("/usr/lib/postgresql/{v}/bin/initdb")).exists())
        || std::env::var_os("PG_BIN").is_some()
}

static PG: OnceLock<Option<Pg>> = OnceLock::new();

/// The shared instance with the template database `tpl`, or `None` (after
/// printing why) when PostgreSQL is not installed outside CI. In CI
/// (`CI=true`) a missing PostgreSQL is a failure, not a skip.
pub fn pg() -> Option<&'static Pg> {
    PG.get_or_init(|| {
        if !pg_binaries_present() {
            let msg = "PostgreSQL server binaries not found (/usr/lib/postgresql/*/bin); `make test` installs the Debian package 'postgresql'";
            if std::env::var("CI").is_ok_and(|v| v == "true") {
                panic!("{msg}");
            }
            eprintln!("SKIP: {msg}");
            return None;
        }
        // Started on a plain thread: the caller is usually inside a tokio
        // runtime, which cannot block on another one.
        Some(std::thread::spawn(start_instance).join().expect("PostgreSQL setup panicked"))
    })
    .as_ref()
}

fn start_instance() -> Pg {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("pg.sh");
    let mut last_err = String::new();
    for _ in 0..5 {
        let dir = tempfile::Builder::new().prefix("bookstore-pg-").tempdir_in("/tmp").expect("temp dir").keep();
        let port = std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("free port").port();
        let out = Command::new(&script)
            .arg("start")
            .arg(&dir)
            .args(["--port", &port.to_string(), "--owner-pid", &std::process::id().to_string()])
            .output()
            .expect("run pg.sh");
        if out.status.success() {
            let pg = Pg { dir, port };
            let rt = tokio::runtime::Runtime::new().expect("runtime");
            rt.block_on(async {
                let admin = gen::connect(&pg.url("bookstore")).await.expect("connect");
                admin.batch_execute("CREATE DATABASE tpl").await.expect("create tpl");
                let mut tpl = gen::connect(&pg.url("tpl")).await.expect("connect tpl");
                gen::generate(&mut tpl, gen::Scale::new(ITEMS, CUSTOMERS).unwrap(), SEED).await.expect("generate");
            });
            return pg;
        }
        last_err = String::from_utf8_lossy(&out.stderr).into_owned();
        let _ = std::fs::remove_dir_all(&dir);
    }
    panic!("pg.sh start failed 5 times: {last_err}");
}

static NEXT_DB: AtomicU32 = AtomicU32::new(0);

/// A fresh copy of the template database; returns its URL.
pub async fn fresh_db(pg: &Pg) -> String {
    let name = format!("t{}", NEXT_DB.fetch_add(1, Ordering::Relaxed));
    let admin = gen::connect(&pg.url("bookstore")).await.expect("connect");
    admin.batch_execute(&format!("CREATE DATABASE {name} TEMPLATE tpl")).await.expect("clone template");
    pg.url(&name)
}

/// An empty database (for generator tests).
pub async fn empty_db(pg: &Pg) -> String {
    let name = format!("e{}", NEXT_DB.fetch_add(1, Ordering::Relaxed));
    let admin = gen::connect(&pg.url("bookstore")).await.expect("connect");
    admin.batch_execute(&format!("CREATE DATABASE {name}")).await.expect("create db");
    pg.url(&name)
}

/// The bookstore serving `url` on an ephemeral loopback port until dropped.
pub struct Shop {
    pub addr: SocketAddr,
    pub store: Arc<Store>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Drop for Shop {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
    }
}

pub async fn shop(url: &str) -> Shop {
    shop_with_repeat(url, 1).await
}

/// `shop` with Best Sellers running its query `best_sellers_repeat` times per request.
pub async fn shop_with_repeat(url: &str, best_sellers_repeat: u32) -> Shop {
    let pool = db::pool(url, 8, Duration::from_secs(30)).expect("pool");
    let store = Store::open_with(pool, 1, best_sellers_repeat).await.expect("open store");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let s = store.clone();
    tokio::spawn(async move {
        server::serve(listener, s, server::ServeOptions::default(), async {
            let _ = rx.await;
        })
        .await
        .expect("serve");
    });
    Shop { addr, store, stop: Some(tx) }
}

/// A browser: one persistent HTTP/1.1 connection and a cookie jar.
pub struct Browser {
    sender: SendRequest<Empty<Bytes>>,
    pub cookies: HashMap<String, String>,
}

pub struct Page {
    pub status: u16,
    pub headers: hyper::HeaderMap,
    pub body: String,
}

impl Browser {
    pub async fn connect(addr: SocketAddr) -> Browser {
        let stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
        let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await.expect("handshake");
        tokio::spawn(conn);
        Browser { sender, cookies: HashMap::new() }
    }

    pub async fn get(&mut self, path_and_query: &str) -> Page {
        let mut req = hyper::Request::builder().uri(path_and_query).header("host", "bookstore.test");
        if !self.cookies.is_empty() {
            let c: Vec<String> = self.cookies.iter().map(|(k, v)| format!("{k}={v}")).collect();
            req = req.header("cookie", c.join("; "));
        }
        self.sender.ready().await.expect("connection still open");
        let resp = self.sender.send_request(req.body(Empty::new()).unwrap()).await.expect("response");
        for v in resp.headers().get_all("set-cookie") {
            let v = v.to_str().unwrap();
            let kv = v.split(';').next().unwrap();
            let (k, val) = kv.split_once('=').unwrap();
            self.cookies.insert(k.to_string(), val.to_string());
        }
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        let body = resp.into_body().collect().await.expect("body").to_bytes();
        Page { status, headers, body: String::from_utf8(body.to_vec()).expect("utf-8") }
    }
}

/// Extracts the number in `attr="N"` from a page (the pages mark ids with
/// data attributes for exactly this purpose).
pub fn data_attr(body: &str, attr: &str) -> Option<i32> {
    let key = format!("{attr}=\"");
    let start = body.find(&key)? + key.len();
    body[start..].split('"').next()?.parse().ok()
}
