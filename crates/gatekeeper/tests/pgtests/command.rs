//! The PostgreSQL gatekeeper as the command line runs it (`PgGatekeeper` from the same
//! settings as the flags): the admin port's metrics, graceful shutdown.

use std::time::Duration;

use shortfirst_gatekeeper::pg::PgGatekeeper;
use shortfirst_gatekeeper::{ProxyConfig, ProxySettings};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::code;
use crate::pgsupport::*;

async fn http_get(addr: std::net::SocketAddr, path: &str) -> String {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(format!("GET {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n").as_bytes()).await.unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flags_admin_metrics_and_graceful_shutdown() {
    let pg = pg_or_skip!();
    let settings = ProxySettings {
        listen: Some("127.0.0.1:0".parse().unwrap()),
        admin: Some("127.0.0.1:0".parse().unwrap()),
        upstream: Some(format!("postgres://{}", pg.addr())),
        capacity: Some("10s".into()),
        max_in_flight: Some(1),
        pg_tag_key: Some("route".into()),
        shutdown_timeout: Some("10s".into()),
        ..ProxySettings::default()
    };
    let cfg = ProxyConfig::from_flags(settings).unwrap();
    let gk = PgGatekeeper::bind(&cfg).await.unwrap();
    let (addr, admin, gate) = (gk.local_addr(), gk.admin_addr().unwrap(), gk.gate());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let run = tokio::spawn(gk.run(async {
        let _ = stopped.await;
    }));
    let conninfo = format!("host=127.0.0.1 port={} user=bookstore dbname=bookstore", addr.port());
    let mut a = connect(&conninfo).await.unwrap();
    let b = connect(&conninfo).await.unwrap();
    a.simple_query("/*route='lookup'*/ SELECT 1").await.unwrap();
    let metrics = http_get(admin, "/metrics").await;
    assert!(metrics.contains("type=\"tag:lookup\""), "{metrics}");
    assert!(metrics.contains("gatekeeper_client_connections 2"), "{metrics}");
    let health = http_get(admin, "/healthz").await;
    assert!(health.starts_with("HTTP/1.1 200") && health.trim_end().ends_with("ok"), "{health}");

    // Shutdown with one transaction admitted and one queued: the queued one is refused
    // (53300, shutting down), the admitted one finishes, then run returns.
    let ta = a.transaction().await.unwrap();
    ta.query_one("SELECT 1", &[]).await.unwrap();
    let queued = tokio::spawn(async move { b.simple_query("SELECT 2").await.map(|_| ()) });
    eventually(|| gate.snapshot().queue_len == 1, "queued").await;
    stop.send(()).unwrap();
    let e = tokio::time::timeout(Duration::from_secs(10), queued).await.unwrap().unwrap().unwrap_err();
    assert_eq!(code(&e), "53300", "{e}");
    assert!(e.as_db_error().unwrap().message().contains("shutting down"), "{e}");
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!run.is_finished(), "waits for the admitted transaction");
    ta.query_one("SELECT 3", &[]).await.unwrap();
    ta.commit().await.unwrap();
    tokio::time::timeout(Duration::from_secs(10), run).await.unwrap().unwrap().unwrap();
    assert!(tokio::net::TcpStream::connect(addr).await.is_err(), "no longer accepting");
}

#[test]
fn a_postgres_upstream_is_checked_by_name() {
    for (url, why) in [
        ("postgres://127.0.0.1", "HOST:PORT"),
        ("postgres://u@127.0.0.1:5432", "no user"),
        ("postgres://127.0.0.1:5432/shop", "takes no database"),
        ("mysql://127.0.0.1:3306", "postgres://"),
    ] {
        let s = ProxySettings {
            listen: Some("127.0.0.1:0".parse().unwrap()),
            upstream: Some(url.into()),
            ..ProxySettings::default()
        };
        let e = ProxyConfig::from_flags(s).unwrap_err().to_string();
        assert!(e.contains(why) && e.contains("upstream"), "{url}: {e}");
    }
    let s = |f: fn(&mut ProxySettings)| {
        let mut s = ProxySettings {
            listen: Some("127.0.0.1:0".parse().unwrap()),
            upstream: Some("postgres://127.0.0.1:5432".into()),
            ..ProxySettings::default()
        };
        f(&mut s);
        ProxyConfig::from_flags(s)
    };
    let cfg = s(|s| {
        s.pg_tag_key = Some("none".into());
        s.pg_application_name_tag = Some(true);
        s.idle_in_transaction_timeout = Some("off".into());
        s.max_message_bytes = Some(1 << 20);
    })
    .unwrap();
    assert_eq!((cfg.pg_types.comment_key, cfg.pg_types.application_name), (None, true));
    assert_eq!((cfg.idle_in_transaction_timeout, cfg.max_message_bytes), (None, 1 << 20));
    for (f, key) in [
        (
            (|s: &mut ProxySettings| s.idle_in_transaction_timeout = Some("0s".into())) as fn(&mut ProxySettings),
            "idle-in-transaction-timeout",
        ),
        (|s: &mut ProxySettings| s.max_message_bytes = Some(10), "max-message-bytes"),
        (|s: &mut ProxySettings| s.pg_tag_key = Some(" ".into()), "pg-tag-key"),
    ] {
        let e = s(f).unwrap_err().to_string();
        assert!(e.contains(key), "{key}: {e}");
    }
}

/// psql's `\conninfo` and a query, with `sslmode` as given, through the gatekeeper at `port`.
async fn psql_ssl(pg: &Pg, port: u16, sslmode: &'static str) -> std::process::Output {
    psql_tls(pg, port, sslmode, None, "SELECT 40 + 2").await
}

/// psql through the gatekeeper at `port` running `sql` after `\conninfo`, with `sslmode`
/// and, for `verify-ca`, the certificate to trust (`root`).
async fn psql_tls(
    pg: &Pg,
    port: u16,
    sslmode: &'static str,
    root: Option<std::path::PathBuf>,
    sql: &'static str,
) -> std::process::Output {
    let psql = pg.psql().expect("psql next to the server binaries");
    tokio::task::spawn_blocking(move || {
        let mut cmd = std::process::Command::new(psql);
        cmd.args(["-h", "127.0.0.1", "-p", &port.to_string(), "-U", "bookstore", "-d", "bookstore", "-tA"])
            .args(["-c", "\\conninfo", "-c", sql])
            .env("PGSSLMODE", sslmode);
        if let Some(root) = root {
            cmd.env("PGSSLROOTCERT", root);
        }
        cmd.output().unwrap()
    })
    .await
    .unwrap()
}

/// A self-signed certificate for `localhost` and its key, written to `cert` and `key`
/// (each through a temporary file renamed over it, as a certificate manager does), and a
/// copy of the certificate at `root` for a client to trust.
fn write_pair(cert: &std::path::Path, key: &std::path::Path, root: &std::path::Path) {
    let ck = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
    for (path, text) in [(key, ck.key_pair.serialize_pem()), (cert, ck.cert.pem()), (root, ck.cert.pem())] {
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, text).unwrap();
        std::fs::rename(&tmp, path).unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_with_a_certificate_and_psql_requiring_it() {
    let pg = pg_or_skip!();
    let dir = tempfile::tempdir().unwrap();
    let (_, cert, key) = self_signed(dir.path());
    let settings = |tls: bool| ProxySettings {
        listen: Some("127.0.0.1:0".parse().unwrap()),
        upstream: Some(format!("postgres://{}", pg.addr())),
        tls_cert: tls.then(|| cert.clone()),
        tls_key: tls.then(|| key.clone()),
        ..ProxySettings::default()
    };
    let gk = PgGatekeeper::bind(&ProxyConfig::from_flags(settings(true)).unwrap()).await.unwrap();
    let port = gk.local_addr().port();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let run = tokio::spawn(gk.run(async {
        let _ = stopped.await;
    }));
    let out = psql_ssl(pg, port, "require").await;
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("SSL connection (protocol: TLSv1."), "{text}");
    assert!(text.contains("\n42"), "{text}");
    // A client that does not ask for TLS still gets in, in plaintext.
    let out = psql_ssl(pg, port, "disable").await;
    assert!(out.status.success() && !String::from_utf8_lossy(&out.stdout).contains("SSL connection"));
    stop.send(()).unwrap();
    run.await.unwrap().unwrap();

    // Without a certificate, a client that requires TLS is refused by its own sslmode.
    let gk = PgGatekeeper::bind(&ProxyConfig::from_flags(settings(false)).unwrap()).await.unwrap();
    let port = gk.local_addr().port();
    let run = tokio::spawn(gk.run(std::future::pending()));
    let out = psql_ssl(pg, port, "require").await;
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("does not support SSL"), "{out:?}");
    run.abort();

    // A key that does not go with the certificate is an error naming the file.
    let other = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
    std::fs::write(&key, other.key_pair.serialize_pem()).unwrap();
    let e = PgGatekeeper::bind(&ProxyConfig::from_flags(settings(true)).unwrap()).await.err().unwrap().to_string();
    assert!(e.contains("--tls-key") && e.contains("key.pem"), "{e}");
}

/// The certificate is re-read on a configuration reload and when its files change; open
/// sessions run on, the next handshakes get the new certificate; a pair that does not load
/// refuses the reload and the previous certificate stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_certificate_reloaded_without_dropping_sessions() {
    let pg = pg_or_skip!();
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
    let roots: Vec<_> = (0..3).map(|i| dir.path().join(format!("root{i}.pem"))).collect();
    write_pair(&cert, &key, &roots[0]);
    let settings = ProxySettings {
        listen: Some("127.0.0.1:0".parse().unwrap()),
        admin: Some("127.0.0.1:0".parse().unwrap()),
        upstream: Some(format!("postgres://{}", pg.addr())),
        tls_cert: Some(cert.clone()),
        tls_key: Some(key.clone()),
        ..ProxySettings::default()
    };
    let cfg = ProxyConfig::from_flags(settings.clone()).unwrap();
    let gk = PgGatekeeper::bind(&cfg).await.unwrap();
    let (port, admin, reloader) = (gk.local_addr().port(), gk.admin_addr().unwrap(), gk.reloader());
    let run = tokio::spawn(gk.run(std::future::pending()));
    let trusts = |i: usize| psql_tls(pg, port, "verify-ca", Some(roots[i].clone()), "SELECT 40 + 2");
    let out = trusts(0).await;
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));

    // A session open across the reload: it runs on with the keys it has.
    let long = tokio::spawn(psql_tls(pg, port, "require", None, "SELECT pg_sleep(2), 7"));
    tokio::time::sleep(Duration::from_millis(500)).await;
    // A reload naming a new pair (new files, so the poll below cannot take them first):
    // the next handshake gets the new certificate.
    let (cert, key) = (dir.path().join("cert1.pem"), dir.path().join("key1.pem"));
    write_pair(&cert, &key, &roots[1]);
    let settings = ProxySettings { tls_cert: Some(cert.clone()), tls_key: Some(key.clone()), ..settings };
    reloader.reload(&ProxyConfig::from_flags(settings.clone()).unwrap()).unwrap();
    let out = trusts(1).await;
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(!trusts(0).await.status.success(), "the old certificate is still served");
    let out = long.await.unwrap();
    assert!(out.status.success() && String::from_utf8_lossy(&out.stdout).contains("|7"), "{out:?}");

    // A key of another certificate refuses the reload, naming the file; the one in force stays.
    let other = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
    std::fs::write(dir.path().join("other-key.pem"), other.key_pair.serialize_pem()).unwrap();
    let bad = ProxySettings { tls_key: Some(dir.path().join("other-key.pem")), ..settings.clone() };
    let e = reloader.reload(&ProxyConfig::from_flags(bad).unwrap()).unwrap_err().to_string();
    assert!(e.contains("--tls-key") && e.contains("other-key.pem"), "{e}");
    assert!(trusts(1).await.status.success());
    // Turning TLS off is a restart, not a reload.
    let plain = ProxySettings { tls_cert: None, tls_key: None, ..settings.clone() };
    let e = reloader.reload(&ProxyConfig::from_flags(plain).unwrap()).unwrap_err().to_string();
    assert!(e.contains("restart"), "{e}");

    // Files replaced, no reload asked: the gatekeeper notices within its poll interval.
    write_pair(&cert, &key, &roots[2]);
    let deadline = tokio::time::Instant::now() + shortfirst_gatekeeper::pg::tls::POLL_INTERVAL * 3;
    while !trusts(2).await.status.success() {
        assert!(tokio::time::Instant::now() < deadline, "the changed files were not re-read");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Two reloads took; the refused pair failed, and so did the poll if it read the files
    // between the key's and the certificate's renames.
    let metrics = http_get(admin, "/metrics").await;
    assert!(metrics.contains("gatekeeper_pg_tls_reloads_total{outcome=\"ok\"} 2\n"), "{metrics}");
    let failed = metrics.lines().find_map(|l| l.strip_prefix("gatekeeper_pg_tls_reloads_total{outcome=\"failed\"} "));
    assert!(matches!(failed, Some("1" | "2")), "{metrics}");
    run.abort();
}
