//! The PostgreSQL gate over the admission controller (`ControllerGate`), against the real
//! server of this test binary: types into the shared registry, costs learned from
//! admission to idle, the charge held until idle and released to zero, refusals.

use std::time::Duration;

use shortfirst_core::admission::AdmissionPolicy;
use shortfirst_gatekeeper::config::Upstream;
use shortfirst_gatekeeper::pg::{CancelOutcome, ControllerGate, Limits};
use shortfirst_gatekeeper::{CapacitySetting, ProxyConfig};

use super::code;
use crate::pgsupport::*;

fn config(f: impl FnOnce(&mut ProxyConfig)) -> ProxyConfig {
    let mut cfg = ProxyConfig::new("127.0.0.1:0".parse().unwrap(), Upstream::parse("http://127.0.0.1:1").unwrap());
    cfg.capacity = CapacitySetting::Fixed { capacity_us: 10_000_000 };
    cfg.policy = AdmissionPolicy::Sjf;
    f(&mut cfg);
    cfg
}

/// Waits until the controller has nothing admitted and nothing queued.
async fn idle(gate: &ControllerGate) {
    eventually(
        || {
            let s = gate.snapshot();
            (s.in_flight, s.queue_len, s.load_us) == (0, 0, 0)
        },
        "no transaction in flight or queued, no charge",
    )
    .await;
}

fn estimate_us(gate: &ControllerGate, name: &str) -> u64 {
    let s = gate.snapshot();
    let t = s.types.iter().find(|t| t.1 == name).unwrap_or_else(|| panic!("type {name} in {:?}", s.types));
    t.2
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn types_and_costs_from_admission_to_idle_and_the_charge_back_to_zero() {
    let pg = pg_or_skip!();
    let gate = ControllerGate::new(&config(|_| {})).unwrap();
    let gk = proxy_with(pg.addr(), Limits::default(), gate).await;
    let c = gk.client().await;
    for _ in 0..5 {
        c.simple_query("/*route='cheap'*/ SELECT 1").await.unwrap();
        c.query_one("/*route='slow'*/ SELECT pg_sleep(0.05)::text", &[]).await.unwrap();
    }
    // A transaction: its cost runs from its first statement to the idle ReadyForQuery,
    // so it covers the client's pause inside it. (The round trip first: tokio-postgres
    // pipelines the Close of its last statement, and a BEGIN behind outstanding work is
    // not deferred, so it would decide the type.)
    c.simple_query("/*route='cheap'*/ SELECT 1").await.unwrap();
    c.batch_execute("BEGIN").await.unwrap();
    c.simple_query("/*route='txn'*/ SELECT 1").await.unwrap();
    assert_eq!(gk.gate.snapshot().in_flight, 1, "held until idle");
    tokio::time::sleep(Duration::from_millis(100)).await;
    c.batch_execute("COMMIT").await.unwrap();
    idle(&gk.gate).await;
    let (cheap, slow, txn) =
        (estimate_us(&gk.gate, "tag:cheap"), estimate_us(&gk.gate, "tag:slow"), estimate_us(&gk.gate, "tag:txn"));
    assert!(slow >= 50_000, "slow {slow} us");
    assert!(txn >= 100_000, "txn {txn} us");
    assert!(cheap < slow / 2, "cheap {cheap} us, slow {slow} us");
    let text = gk.gate.metrics_text();
    for want in ["type=\"tag:cheap\"", "type=\"tag:slow\"", "gatekeeper_admitted_total 12"] {
        assert!(text.contains(want), "{want} in\n{text}");
    }
    // An untagged statement is typed by its fingerprint.
    c.simple_query("SELECT 2").await.unwrap();
    idle(&gk.gate).await;
    assert!(gk.gate.snapshot().types.iter().any(|t| t.1.starts_with("fp:")));
}

/// `--estimate-basis cpu`: a transaction is sampled at its backend's processor time, so one
/// that sleeps in the server costs little and one that computes costs its computing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cpu_basis_samples_the_backends_processor_time() {
    let pg = pg_or_skip!();
    let cfg = config(|c| c.estimator.basis = shortfirst_core::admission::Basis::Cpu);
    let gk = proxy_with(pg.addr(), Limits::default(), ControllerGate::new(&cfg).unwrap()).await;
    let c = gk.client().await;
    let started = tokio::time::Instant::now();
    for _ in 0..3 {
        c.simple_query("/*route='sleep'*/ SELECT pg_sleep(0.1)").await.unwrap();
        c.simple_query("/*route='count'*/ SELECT count(*) FROM generate_series(1, 2000000)").await.unwrap();
    }
    let wall_per_pair_us = started.elapsed().as_micros() as u64 / 3;
    idle(&gk.gate).await;
    let (sleep, count) = (estimate_us(&gk.gate, "tag:sleep"), estimate_us(&gk.gate, "tag:count"));
    assert_eq!(gk.stats.backend_cpu_unmeasured.load(std::sync::atomic::Ordering::Relaxed), 0);
    assert!(sleep < 20_000, "a 100 ms sleep costs {sleep} us of processor time");
    assert!(count > 5 * sleep && count < wall_per_pair_us, "count {count} us, sleep {sleep} us");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transaction_waits_behind_a_full_gate_and_a_refusal_keeps_the_session() {
    let pg = pg_or_skip!();
    let cfg = config(|c| {
        c.max_in_flight = Some(1);
        c.max_queue_wait = Some(Duration::from_millis(300));
    });
    let gk = proxy_with(pg.addr(), Limits::default(), ControllerGate::new(&cfg).unwrap()).await;
    let mut a = gk.client().await;
    let b = gk.client().await;
    let ta = a.transaction().await.unwrap();
    ta.query_one("SELECT 1", &[]).await.unwrap();
    // Queued behind the open transaction, admitted when it ends.
    let queued = tokio::spawn(async move {
        let r = b.query_one("SELECT 2", &[]).await.map(|r| r.get::<_, i32>(0));
        (b, r)
    });
    eventually(|| gk.gate.snapshot().queue_len == 1, "the second transaction queued").await;
    ta.commit().await.unwrap();
    let (b, r) = queued.await.unwrap();
    assert_eq!(r.unwrap(), 2);
    idle(&gk.gate).await;

    // Held past --max-queue-wait: refused with 53400, the reason and a hint, nothing of
    // it run; the session stays usable. Extended protocol (the Bind..Sync batch held back),
    // simple protocol, and a statement after a deferred BEGIN (the block then fails).
    let ta = a.transaction().await.unwrap();
    ta.query_one("SELECT 1", &[]).await.unwrap();
    let e = b.query_one("SELECT 3", &[]).await.unwrap_err();
    assert_eq!(code(&e), "53400", "{e}");
    let db = e.as_db_error().unwrap();
    assert!(db.message().contains("waited too long"), "{}", db.message());
    assert!(db.hint().is_some_and(|h| h.contains("--max-queue-wait")), "{:?}", db.hint());
    let e = b.simple_query("INSERT INTO refused_never_created VALUES (1)").await.unwrap_err();
    assert_eq!(code(&e), "53400", "{e}");
    // A round trip to the server that needs no admission (a prepare, kept so its Close is
    // not pipelined): tokio-postgres's Close of its last statement is answered, so the
    // BEGIN finds nothing outstanding and is deferred.
    let _kept = b.prepare("SELECT 1").await.unwrap();
    b.batch_execute("BEGIN").await.unwrap();
    let e = b.simple_query("SELECT 4").await.unwrap_err();
    assert_eq!(code(&e), "53400", "{e}");
    let e = b.simple_query("SELECT 5").await.unwrap_err();
    assert_eq!(code(&e), "25P02", "{e}");
    b.batch_execute("ROLLBACK").await.unwrap();
    ta.commit().await.unwrap();
    idle(&gk.gate).await;
    assert!(gk.gate.metrics_text().contains("gatekeeper_rejected_total{reason=\"queue_wait\"} 3"));
    assert_eq!(b.query_one("SELECT 6", &[]).await.unwrap().get::<_, i32>(0), 6);
    let rows = b.simple_query("SELECT 7").await.unwrap();
    assert!(matches!(&rows[1], tokio_postgres::SimpleQueryMessage::Row(r) if r.get(0) == Some("7")));
    assert_eq!(a.query_one("SELECT 8", &[]).await.unwrap().get::<_, i32>(0), 8);
    idle(&gk.gate).await;
    assert_eq!(gk.stats.failed.load(std::sync::atomic::Ordering::Relaxed), 0, "no connection ended");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_leaves_while_queued_is_taken_out_of_the_queue() {
    let pg = pg_or_skip!();
    let cfg = config(|c| c.max_in_flight = Some(1));
    let gk = proxy_with(pg.addr(), Limits::default(), ControllerGate::new(&cfg).unwrap()).await;
    let mut a = gk.client().await;
    let ta = a.transaction().await.unwrap();
    ta.query_one("SELECT 1", &[]).await.unwrap();
    let (c, conn) = tokio_postgres::connect(&gk.conninfo("bookstore"), tokio_postgres::NoTls).await.unwrap();
    let socket = tokio::spawn(conn);
    let leaving = tokio::spawn(async move { c.query_one("SELECT 2", &[]).await.map(|_| ()) });
    eventually(|| gk.gate.snapshot().queue_len == 1, "queued").await;
    leaving.abort();
    socket.abort();
    eventually(|| gk.gate.snapshot().queue_len == 0, "the abandoned wait left the queue").await;
    ta.commit().await.unwrap();
    idle(&gk.gate).await;
    assert!(gk.gate.metrics_text().contains("gatekeeper_cancelled_while_queued_total 1"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_the_server_cuts_short_is_withdrawn_not_a_give_up() {
    let pg = pg_or_skip!();
    let cfg = config(|c| c.max_in_flight = Some(1));
    let gk = proxy_with(pg.addr(), Limits::default(), ControllerGate::new(&cfg).unwrap()).await;
    let mut a = gk.client().await;
    let b = gk.client().await;
    let b_pid: i32 = b.query_one("SELECT pg_backend_pid()", &[]).await.unwrap().get(0);
    idle(&gk.gate).await;
    let ta = a.transaction().await.unwrap();
    ta.query_one("SELECT 1", &[]).await.unwrap();
    let queued = tokio::spawn(async move { b.query_one("SELECT 2", &[]).await.map(|_| ()) });
    eventually(|| gk.gate.snapshot().queue_len == 1, "queued").await;
    // The server ends b's session (as it ends every session when a backend crashes).
    let admin = direct(pg, "bookstore").await;
    admin.query_one("SELECT pg_terminate_backend($1)", &[&b_pid]).await.unwrap();
    let cut = tokio::time::timeout(Duration::from_secs(10), queued).await.unwrap().unwrap();
    assert!(cut.is_err(), "b's session ended with its server's");
    eventually(|| gk.gate.snapshot().queue_len == 0, "the wait left the queue").await;
    assert_eq!(gk.gate.snapshot().give_ups, 0, "the server ended it: no give-up to learn a patience from");
    assert!(!gk.gate.metrics_text().contains("gatekeeper_type_patience_seconds{"), "no patience learned");
    ta.commit().await.unwrap();
    idle(&gk.gate).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_withdraws_a_queued_transaction_and_reaches_a_running_one() {
    let pg = pg_or_skip!();
    let cfg = config(|c| c.max_in_flight = Some(1));
    let gk = proxy_with(pg.addr(), Limits::default(), ControllerGate::new(&cfg).unwrap()).await;
    let mut a = gk.client().await;
    let b = std::sync::Arc::new(gk.client().await);
    let ta = a.transaction().await.unwrap();
    ta.query_one("SELECT 1", &[]).await.unwrap();
    let queued = tokio::spawn({
        let b = b.clone();
        async move { b.simple_query("INSERT INTO cancelled_never_created VALUES (1)").await.map(|_| ()) }
    });
    eventually(|| gk.gate.snapshot().queue_len == 1, "queued").await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(gk.gate.snapshot().oldest_wait_us >= 50_000, "{:?}", gk.gate.snapshot());
    b.cancel_token().cancel_query(tokio_postgres::NoTls).await.unwrap();
    let e = tokio::time::timeout(Duration::from_secs(10), queued).await.unwrap().unwrap().unwrap_err();
    // Answered by the gatekeeper (the statement never ran: no 42P01), and not a give-up.
    assert_eq!(code(&e), "57014", "{e}");
    assert_eq!(gk.gate.snapshot().queue_len, 0);
    assert_eq!(gk.gate.snapshot().oldest_wait_us, 0);
    assert_eq!(gk.stats.cancels(CancelOutcome::WithdrewQueued), 1);
    assert_eq!(gk.stats.cancels(CancelOutcome::Forwarded), 0);
    assert_eq!(gk.gate.snapshot().give_ups, 0, "a cancel is not a give-up");
    ta.commit().await.unwrap();
    idle(&gk.gate).await;

    // Running: the cancel goes to the server, which stops the statement.
    let running = tokio::spawn({
        let b = b.clone();
        async move { b.simple_query("SELECT pg_sleep(30)").await.map(|_| ()) }
    });
    eventually(|| gk.gate.snapshot().in_flight == 1, "running").await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    b.cancel_token().cancel_query(tokio_postgres::NoTls).await.unwrap();
    let e = tokio::time::timeout(Duration::from_secs(10), running).await.unwrap().unwrap().unwrap_err();
    assert_eq!(code(&e), "57014", "{e}");
    assert!(e.as_db_error().unwrap().routine().is_some(), "the server's own error: {e:?}");
    assert_eq!(gk.stats.cancels(CancelOutcome::Forwarded), 1);
    assert!(gk.stats.render().contains("gatekeeper_pg_cancel_requests_total{outcome=\"withdrew_queued\"} 1\n"));
    idle(&gk.gate).await;
    assert_eq!(b.query_one("SELECT 9", &[]).await.unwrap().get::<_, i32>(0), 9);
    idle(&gk.gate).await;

    // A key no connected client holds is dropped and counted.
    use tokio::io::AsyncWriteExt;
    let mut forged = tokio::net::TcpStream::connect(gk.addr).await.unwrap();
    let request: Vec<u8> = [16i32, 80_877_102, 1, 2].iter().flat_map(|v| v.to_be_bytes()).collect();
    forged.write_all(&request).await.unwrap();
    eventually(|| gk.stats.cancels(CancelOutcome::UnknownKey) == 1, "the forged cancel counted").await;
}
