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
    let psql = pg.psql().expect("psql next to the server binaries");
    tokio::task::spawn_blocking(move || {
        std::process::Command::new(psql)
            .args(["-h", "127.0.0.1", "-p", &port.to_string(), "-U", "bookstore", "-d", "bookstore", "-tA"])
            .args(["-c", "\\conninfo", "-c", "SELECT 40 + 2"])
            .env("PGSSLMODE", sslmode)
            .output()
            .unwrap()
    })
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_with_a_certificate_and_psql_requiring_it() {
    let pg = pg_or_skip!();
    let dir = tempfile::tempdir().unwrap();
    let ck = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
    let (cert, key) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
    std::fs::write(&cert, ck.cert.pem()).unwrap();
    std::fs::write(&key, ck.key_pair.serialize_pem()).unwrap();
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
