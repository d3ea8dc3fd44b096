//! The chain client → gatekeeper → PgBouncer (transaction pooling) → PostgreSQL, with
//! Debian's `pgbouncer` started by the test: simple and extended protocol, a transaction,
//! a refusal. Skipped (with the reason printed) where pgbouncer is not installed; in CI a
//! missing pgbouncer is a failure.

use std::os::unix::fs::PermissionsExt;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use shortfirst_gatekeeper::config::Upstream;
use shortfirst_gatekeeper::pg::{ControllerGate, Limits};
use shortfirst_gatekeeper::{CapacitySetting, ProxyConfig};
use tokio_postgres::types::Type;

use super::code;
use crate::pgsupport::*;

const PGBOUNCER: &str = "/usr/sbin/pgbouncer";

/// A running pgbouncer, killed when dropped.
struct Bouncer {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl Drop for Bouncer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn bouncer(pg: &Pg) -> Option<Bouncer> {
    if !std::path::Path::new(PGBOUNCER).exists() {
        let msg = "pgbouncer not found (/usr/sbin/pgbouncer); `make apt` installs the Debian package 'pgbouncer'";
        assert!(!std::env::var("CI").is_ok_and(|v| v == "true"), "{msg}");
        eprintln!("SKIP: {msg}");
        return None;
    }
    let dir = tempfile::Builder::new().prefix("gk-pgbouncer-").tempdir_in("/tmp").unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let users = dir.path().join("users.txt");
    std::fs::write(&users, "\"bookstore\" \"\"\n").unwrap();
    let ini = dir.path().join("pgbouncer.ini");
    std::fs::write(
        &ini,
        format!(
            "[databases]\nbookstore = host=127.0.0.1 port={} dbname=bookstore\n\n[pgbouncer]\n\
             listen_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\n\
             auth_type = trust\nauth_file = {}\npool_mode = transaction\ndefault_pool_size = 2\n\
             max_client_conn = 100\nignore_startup_parameters = extra_float_digits\n",
            pg.port,
            users.display()
        ),
    )
    .unwrap();
    for f in [&users, &ini] {
        std::fs::set_permissions(f, std::fs::Permissions::from_mode(0o644)).unwrap();
    }
    let mut cmd = Command::new(PGBOUNCER);
    // pgbouncer refuses to run as root: then it runs as PostgreSQL's system user.
    if nix_is_root() {
        cmd.args(["-u", "postgres"]);
    }
    let child = cmd.arg(&ini).stdout(Stdio::null()).stderr(Stdio::inherit()).spawn().expect("start pgbouncer");
    let b = Bouncer { child, port, _dir: dir };
    for _ in 0..500 {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return Some(b);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("pgbouncer did not listen on {port}");
}

fn nix_is_root() -> bool {
    Command::new("id").arg("-u").output().is_ok_and(|o| o.stdout.starts_with(b"0\n"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn through_pgbouncer_in_transaction_mode() {
    let pg = pg_or_skip!();
    let Some(b) = bouncer(pg) else { return };
    let mut cfg = ProxyConfig::new(
        "127.0.0.1:0".parse().unwrap(),
        Upstream::parse(&format!("postgres://127.0.0.1:{}", b.port)).unwrap(),
    );
    cfg.capacity = CapacitySetting::Fixed { capacity_us: 10_000_000 };
    cfg.max_in_flight = Some(1);
    cfg.max_queue_wait = Some(Duration::from_millis(300));
    let gk = proxy_with(format!("127.0.0.1:{}", b.port), Limits::default(), ControllerGate::new(&cfg).unwrap()).await;
    let mut a = gk.client().await;
    let c = gk.client().await;
    // Simple protocol, and extended with the unnamed statement (what transaction pooling
    // supports: named statements do not follow a client across server connections).
    let rows = a.simple_query("/*route='simple'*/ SELECT 40 + 2").await.unwrap();
    assert!(matches!(&rows[1], tokio_postgres::SimpleQueryMessage::Row(r) if r.get(0) == Some("42")));
    let row = a.query_typed("SELECT $1::int * 2", &[(&21i32, Type::INT4)]).await.unwrap();
    assert_eq!(row[0].get::<_, i32>(0), 42);
    // A transaction: its statements stay on one server connection, BEGIN deferred.
    let t = a.transaction().await.unwrap();
    t.batch_execute("CREATE TEMP TABLE chain (x int)").await.unwrap();
    t.simple_query("INSERT INTO chain VALUES (1), (2)").await.unwrap();
    let n = t.query_typed("SELECT count(*)::int FROM chain", &[]).await.unwrap();
    assert_eq!(n[0].get::<_, i32>(0), 2);
    assert_eq!(gk.gate.snapshot().in_flight, 1);
    // Meanwhile another client's transaction waits, then is refused, its session kept.
    let e = c.simple_query("SELECT 1").await.unwrap_err();
    assert_eq!(code(&e), "53400", "{e}");
    t.rollback().await.unwrap();
    eventually(|| gk.gate.snapshot().in_flight == 0, "idle").await;
    let row = c.query_typed("SELECT $1::text", &[(&"after", Type::TEXT)]).await.unwrap();
    assert_eq!(row[0].get::<_, &str>(0), "after");
    eventually(|| gk.gate.snapshot().load_us == 0, "no charge left").await;
    assert!(gk.gate.snapshot().types.iter().any(|t| t.1 == "tag:simple"));
}

/// `--estimate-basis cpu` in front of PgBouncer: the pid in BackendKeyData is PgBouncer's
/// own, not a backend serving this connection, so the transactions are sampled at their
/// wall time, and each connection is counted as unmeasured.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cpu_basis_through_pgbouncer_falls_back_to_wall_time() {
    let pg = pg_or_skip!();
    let Some(b) = bouncer(pg) else { return };
    let upstream = format!("127.0.0.1:{}", b.port);
    let mut cfg =
        ProxyConfig::new("127.0.0.1:0".parse().unwrap(), Upstream::parse(&format!("postgres://{upstream}")).unwrap());
    cfg.capacity = CapacitySetting::Fixed { capacity_us: 10_000_000 };
    cfg.estimator.basis = shortfirst_core::admission::Basis::Cpu;
    let gk = proxy_with(upstream, Limits::default(), ControllerGate::new(&cfg).unwrap()).await;
    let c = gk.client().await;
    c.simple_query("/*route='sleep'*/ SELECT pg_sleep(0.05)").await.unwrap();
    eventually(|| gk.gate.snapshot().load_us == 0, "no charge left").await;
    assert_eq!(gk.stats.backend_cpu_unmeasured.load(std::sync::atomic::Ordering::Relaxed), 1);
    let s = gk.gate.snapshot();
    let sleep = s.types.iter().find(|t| t.1 == "tag:sleep").map(|t| t.2);
    assert!(sleep.is_some_and(|us| us >= 50_000), "sampled at wall time: {sleep:?}");
}
