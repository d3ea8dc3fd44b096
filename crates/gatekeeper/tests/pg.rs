//! The PostgreSQL gatekeeper against a real PostgreSQL: every protocol feature through the
//! proxy with tokio-postgres (and psql where the client's own behaviour is the point).

mod pgsupport;

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures_util::{SinkExt, StreamExt};
use pgsupport::*;
use postgres_protocol::message::frontend;
use shortfirst_gatekeeper::pg::{CountLimit, Limits};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

macro_rules! pg_or_skip {
    () => {
        match pg() {
            Some(pg) => pg,
            None => return,
        }
    };
}

async fn gatekeeper() -> (&'static Pg, Proxy) {
    let pg = pg().expect("checked by pg_or_skip");
    (pg, proxy(pg.addr(), Limits::default()).await)
}

fn code(e: &tokio_postgres::Error) -> String {
    e.code().map(|c| c.code().to_owned()).unwrap_or_else(|| format!("no SQLSTATE: {e}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn simple_extended_and_prepared_queries() {
    pg_or_skip!();
    let (_pg, gk) = gatekeeper().await;
    let c = gk.client().await;
    let rows = c.simple_query("SELECT 40 + 2").await.unwrap();
    assert!(matches!(&rows[1], tokio_postgres::SimpleQueryMessage::Row(r) if r.get(0) == Some("42")));
    let row = c.query_one("SELECT $1::int * 2, $2::text", &[&21i32, &"x"]).await.unwrap();
    assert_eq!((row.get::<_, i32>(0), row.get::<_, &str>(1)), (42, "x"));
    let st = c.prepare("SELECT $1::int + 1").await.unwrap();
    for i in 0..5 {
        assert_eq!(c.query_one(&st, &[&i]).await.unwrap().get::<_, i32>(0), i + 1);
    }
    gk.settled().await;
    // Seven statements ran; the prepare (Parse, Describe, Sync) alone was not admitted.
    assert_eq!(gk.gate.admitted(), 7);
    assert_eq!(gk.gate.finished(), 7);
    // A client that says Terminate ends cleanly, whichever side notices the close first.
    drop(c);
    eventually(|| gk.stats.active.load(std::sync::atomic::Ordering::Relaxed) == 0, "the connection closed").await;
    assert_eq!(gk.stats.failed.load(std::sync::atomic::Ordering::Relaxed), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_queries_and_a_multi_statement_query() {
    pg_or_skip!();
    let (_pg, gk) = gatekeeper().await;
    let c = gk.client().await;
    let st = c.prepare("SELECT $1::int").await.unwrap();
    let (c, st) = (&c, &st);
    let queries = (0..20).map(|i: i32| async move { c.query_one(st, &[&i]).await });
    let rows = futures_util::future::join_all(queries).await;
    for (i, r) in rows.into_iter().enumerate() {
        assert_eq!(r.unwrap().get::<_, i32>(0), i as i32);
    }
    let msgs = c.simple_query("SELECT 1; SELECT 2, 3; SELECT 'x'").await.unwrap();
    let completes = msgs.iter().filter(|m| matches!(m, tokio_postgres::SimpleQueryMessage::CommandComplete(1))).count();
    assert_eq!(completes, 3);
    gk.settled().await;
    assert_eq!(gk.gate.admitted(), gk.gate.finished());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bare_begin_is_held_until_the_first_statement_and_the_charge_until_idle() {
    pg_or_skip!();
    let (pg, gk) = gatekeeper().await;
    let watcher = direct(pg, "bookstore").await;
    let c = connect(&format!("{} application_name=deferred", gk.conninfo("bookstore"))).await.unwrap();
    c.batch_execute("CREATE TABLE IF NOT EXISTS deferred_t (v int)").await.unwrap();
    gk.settled().await;
    let before = gk.gate.admitted();
    let w = &watcher;
    let state = move || async move {
        let r =
            w.query_one("SELECT state FROM pg_stat_activity WHERE application_name = 'deferred'", &[]).await.unwrap();
        r.get::<_, String>(0)
    };
    c.batch_execute("BEGIN").await.unwrap();
    // Answered by the gatekeeper: the server's session has not begun anything.
    assert_eq!(state().await, "idle");
    assert_eq!(gk.gate.admitted(), before);
    c.batch_execute("INSERT INTO deferred_t VALUES (1)").await.unwrap();
    assert_eq!(state().await, "idle in transaction");
    assert_eq!((gk.gate.admitted(), gk.gate.in_flight()), (before + 1, 1));
    c.batch_execute("INSERT INTO deferred_t VALUES (2)").await.unwrap();
    assert_eq!(gk.gate.admitted(), before + 1, "never admitted mid-way");
    c.batch_execute("COMMIT").await.unwrap();
    gk.settled().await;
    assert_eq!(state().await, "idle");
    // An empty block never reaches the server.
    c.batch_execute("BEGIN").await.unwrap();
    c.batch_execute("COMMIT").await.unwrap();
    assert_eq!(gk.gate.admitted(), before + 1);
    let n: i64 = c.query_one("SELECT count(*) FROM deferred_t", &[]).await.unwrap().get(0);
    assert!(n >= 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_error_inside_a_transaction_then_rollback() {
    pg_or_skip!();
    let (_pg, gk) = gatekeeper().await;
    let mut c = gk.client().await;
    let tx = c.transaction().await.unwrap();
    let e = tx.batch_execute("SELEC 1").await.unwrap_err();
    assert_eq!(code(&e), "42601");
    let e = tx.query_one("SELECT 1", &[]).await.unwrap_err();
    assert_eq!(code(&e), "25P02", "in a failed transaction (Z 'E')");
    assert_eq!(gk.gate.in_flight(), 1, "held until ROLLBACK");
    tx.rollback().await.unwrap();
    gk.settled().await;
    assert_eq!(c.query_one("SELECT 7", &[]).await.unwrap().get::<_, i32>(0), 7);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copy_in_and_out_inside_and_outside_transactions() {
    pg_or_skip!();
    let (_pg, gk) = gatekeeper().await;
    let mut c = gk.client().await;
    c.batch_execute("CREATE TEMP TABLE copy_t (a int, b text)").await.unwrap();
    {
        let sink = c.copy_in("COPY copy_t FROM STDIN").await.unwrap();
        futures_util::pin_mut!(sink);
        for i in 0..1000 {
            sink.send(Bytes::from(format!("{i}\trow {i}\n"))).await.unwrap();
        }
        assert_eq!(sink.finish().await.unwrap(), 1000);
    }
    gk.settled().await;
    let tx = c.transaction().await.unwrap();
    {
        let sink = tx.copy_in("COPY copy_t FROM STDIN").await.unwrap();
        futures_util::pin_mut!(sink);
        sink.send(Bytes::from_static(b"-1\tin tx\n")).await.unwrap();
        assert_eq!(sink.finish().await.unwrap(), 1);
    }
    let out = tx.copy_out("COPY (SELECT a, b FROM copy_t ORDER BY a) TO STDOUT").await.unwrap();
    let chunks: Vec<Bytes> = out.map(|r| r.unwrap()).collect().await;
    let text = String::from_utf8(chunks.concat()).unwrap();
    assert_eq!(text.lines().count(), 1001);
    assert!(text.starts_with("-1\tin tx\n0\trow 0\n"), "{}", &text[..40]);
    assert_eq!(gk.gate.in_flight(), 1);
    tx.commit().await.unwrap();
    gk.settled().await;
    // A copy the server refuses mid-way: the session goes on.
    {
        let sink = c.copy_in::<_, Bytes>("COPY copy_t FROM STDIN").await.unwrap();
        futures_util::pin_mut!(sink);
        sink.send(Bytes::from_static(b"not a number\tx\n")).await.unwrap();
        assert_eq!(code(&sink.finish().await.unwrap_err()), "22P02");
    }
    gk.settled().await;
    assert_eq!(c.query_one("SELECT count(*) FROM copy_t", &[]).await.unwrap().get::<_, i64>(0), 1001);
    gk.settled().await;
    assert_eq!(gk.gate.admitted(), gk.gate.finished());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listen_notify() {
    pg_or_skip!();
    let (_pg, gk) = gatekeeper().await;
    let (listener, mut conn) = tokio_postgres::connect(&gk.conninfo("bookstore"), tokio_postgres::NoTls).await.unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut msgs = futures_util::stream::poll_fn(move |cx| conn.poll_message(cx));
        while let Some(Ok(m)) = msgs.next().await {
            if let tokio_postgres::AsyncMessage::Notification(n) = m {
                let _ = tx.send((n.channel().to_owned(), n.payload().to_owned()));
            }
        }
    });
    listener.batch_execute("LISTEN gk_channel").await.unwrap();
    let sender = gk.client().await;
    sender.batch_execute("NOTIFY gk_channel, 'hello'").await.unwrap();
    let got = tokio::time::timeout(Duration::from_secs(10), rx.recv()).await.unwrap().unwrap();
    assert_eq!(got, ("gk_channel".to_owned(), "hello".to_owned()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_request_stops_a_running_query() {
    let pg = pg_or_skip!();
    // client → gatekeeper → tee → PostgreSQL: the tee shows what reaches the server.
    let (tee_addr, seen) = tee(pg.addr()).await;
    let gk = proxy(tee_addr.to_string(), Limits::default()).await;
    let c = gk.client().await;
    let token = c.cancel_token();
    let t0 = tokio::time::Instant::now();
    let sleeper = tokio::spawn(async move { c.batch_execute("SELECT pg_sleep(30)").await });
    eventually(|| gk.gate.in_flight() == 1, "the sleep admitted").await;
    // A cancel with a key no client holds is dropped: it never reaches the server.
    let mut forged = BytesMut::new();
    frontend::cancel_request(12345, 678, &mut forged);
    raw_exchange(&gk, &forged).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!sleeper.is_finished());
    let reached = |b: &[u8]| seen.lock().unwrap().client_to_server.windows(b.len()).any(|w| w == b);
    assert!(!reached(&forged), "a forged cancel was forwarded");
    token.cancel_query(tokio_postgres::NoTls).await.unwrap();
    let e = sleeper.await.unwrap().unwrap_err();
    assert_eq!(code(&e), "57014");
    assert!(t0.elapsed() < Duration::from_secs(20));
    gk.settled().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn md5_and_scram_authentication_pass_through() {
    pg_or_skip!();
    let (_pg, gk) = gatekeeper().await;
    for (user, password) in [(MD5_USER, MD5_PASSWORD), (SCRAM_USER, SCRAM_PASSWORD)] {
        let ok = connect(&format!("{} password={password}", gk.conninfo(user))).await.unwrap();
        let who: String = ok.query_one("SELECT current_user::text", &[]).await.unwrap().get(0);
        assert_eq!(who, user);
        let e = connect(&format!("{} password=wrong", gk.conninfo(user))).await.unwrap_err();
        assert_eq!(code(&e), "28P01", "{user}: {e}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ssl_request_refused_and_psql_falls_back_to_plaintext() {
    let pg = pg_or_skip!();
    let (_pg, gk) = gatekeeper().await;
    let psql = pg.psql().expect("psql next to the server binaries");
    let gk_port = gk.addr.port().to_string();
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new(psql)
            .args(["-h", "127.0.0.1", "-p", &gk_port, "-U", "bookstore", "-d", "bookstore", "-tAc"])
            .arg("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()")
            .env("PGSSLMODE", "prefer")
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "f");
    // GSSENCRequest by hand: refused with 'N'.
    let mut s = TcpStream::connect(gk.addr).await.unwrap();
    s.write_all(&[0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x30]).await.unwrap();
    let mut n = [0u8; 1];
    s.read_exact(&mut n).await.unwrap();
    assert_eq!(&n, b"N");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_gate_delays_only_transaction_starts_and_a_leaving_client_abandons_its_wait() {
    let pg = pg_or_skip!();
    let gk = proxy_with(pg.addr(), Limits::default(), CountLimit::new(1)).await;
    let mut a = gk.client().await;
    let b = gk.client().await;
    let ta = a.transaction().await.unwrap();
    ta.query_one("SELECT 1", &[]).await.unwrap();
    assert_eq!(gk.gate.in_flight(), 1);
    let queued = tokio::spawn(async move { b.query_one("SELECT 2", &[]).await.map(|r| r.get::<_, i32>(0)) });
    eventually(|| gk.gate.waiting() == 1, "the second transaction queued").await;
    // Inside the admitted transaction nothing waits, whatever the gate's state.
    for i in 0..3 {
        assert_eq!(ta.query_one("SELECT $1::int", &[&i]).await.unwrap().get::<_, i32>(0), i);
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!queued.is_finished(), "admitted while the only slot is held");
    ta.commit().await.unwrap();
    assert_eq!(tokio::time::timeout(Duration::from_secs(10), queued).await.unwrap().unwrap().unwrap(), 2);
    gk.settled().await;

    // A client that leaves while queued: its wait is abandoned, the slot stays whole.
    let ta = a.transaction().await.unwrap();
    ta.query_one("SELECT 1", &[]).await.unwrap();
    let (c, conn) = tokio_postgres::connect(&gk.conninfo("bookstore"), tokio_postgres::NoTls).await.unwrap();
    let socket = tokio::spawn(conn);
    let leaving = tokio::spawn(async move { c.query_one("SELECT pg_sleep(0)", &[]).await.map(|_| ()) });
    eventually(|| gk.gate.waiting() == 1, "the third transaction queued").await;
    // The client process goes away: its socket closes with the query unanswered.
    leaving.abort();
    socket.abort();
    eventually(|| gk.gate.waiting() == 0, "the abandoned wait dropped").await;
    ta.commit().await.unwrap();
    gk.settled().await;
    let d = gk.client().await;
    assert_eq!(d.query_one("SELECT 4", &[]).await.unwrap().get::<_, i32>(0), 4);
    gk.settled().await;
    assert_eq!(gk.gate.admitted(), gk.gate.finished());
}

/// Sends `bytes` on a new connection and returns everything the gatekeeper answers.
async fn raw_exchange(gk: &Proxy, bytes: &[u8]) -> String {
    let mut s = TcpStream::connect(gk.addr).await.unwrap();
    s.write_all(bytes).await.unwrap();
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut out)).await.unwrap().unwrap();
    String::from_utf8_lossy(&out).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_gets_a_clear_error_and_the_gatekeeper_stays_up() {
    pg_or_skip!();
    let pg = pg().unwrap();
    let gk = proxy(pg.addr(), Limits { max_message_bytes: 1024, ..Limits::default() }).await;
    let http = raw_exchange(&gk, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").await;
    assert!(http.starts_with('E') && http.contains("08P01") && http.contains("startup message"), "{http:?}");
    let v2 = raw_exchange(&gk, &[0, 0, 0, 9, 0, 2, 0, 0, 0]).await;
    assert!(v2.contains("0A000") && v2.contains("unsupported frontend protocol 2.0"), "{v2:?}");
    // A message over the limit, after a valid startup.
    let mut b = BytesMut::new();
    frontend::startup_message([("user", "bookstore"), ("database", "bookstore")], &mut b).unwrap();
    frontend::query(&format!("SELECT '{}'", "x".repeat(2000)), &mut b).unwrap();
    let big = raw_exchange(&gk, &b).await;
    assert!(big.contains("08P01") && big.contains("more than the limit of 1024"), "{big:?}");
    let c = gk.client().await;
    assert_eq!(c.query_one("SELECT 1", &[]).await.unwrap().get::<_, i32>(0), 1);
    eventually(|| gk.stats.failed.load(std::sync::atomic::Ordering::Relaxed) == 3, "three failed connections").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_upstream_dying_mid_transaction_gives_the_client_an_error() {
    pg_or_skip!();
    let (pg, gk) = gatekeeper().await;
    let watcher = direct(pg, "bookstore").await;
    let mut c = connect(&format!("{} application_name=doomed", gk.conninfo("bookstore"))).await.unwrap();
    let tx = c.transaction().await.unwrap();
    tx.query_one("SELECT 1", &[]).await.unwrap();
    assert_eq!(gk.gate.in_flight(), 1);
    watcher
        .batch_execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'doomed'")
        .await
        .unwrap();
    let e = tx.query_one("SELECT 2", &[]).await.unwrap_err();
    assert!(e.is_closed() || e.code().is_some(), "{e}");
    drop(tx);
    gk.settled().await;
    // And an upstream that is not there at all.
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let nowhere = proxy(dead.to_string(), Limits::default()).await;
    let e = connect(&nowhere.conninfo("bookstore")).await.unwrap_err();
    assert_eq!(code(&e), "08001", "{e}");
    let msg = e.as_db_error().map(|d| d.message().to_owned()).unwrap_or_default();
    assert!(msg.contains("cannot reach the upstream"), "{msg}");
    let ok = gk.client().await;
    ok.batch_execute("SELECT 1").await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_in_transaction_and_client_limits() {
    pg_or_skip!();
    let pg = pg().unwrap();
    let limits = Limits { idle_in_transaction: Some(Duration::from_secs(1)), max_clients: 2, ..Limits::default() };
    let gk = proxy(pg.addr(), limits).await;
    let mut c = gk.client().await;
    let tx = c.transaction().await.unwrap();
    tx.query_one("SELECT 1", &[]).await.unwrap();
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let e = tx.query_one("SELECT 2", &[]).await.unwrap_err();
    assert!(e.is_closed() || code(&e) == "25P03", "{e}");
    drop(tx);
    gk.settled().await;
    eventually(|| gk.stats.active.load(std::sync::atomic::Ordering::Relaxed) == 0, "all connections gone").await;
    let _a = gk.client().await;
    let _b = gk.client().await;
    let e = connect(&gk.conninfo("bookstore")).await.unwrap_err();
    assert_eq!(code(&e), "53300", "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forwarded_bytes_are_identical_in_both_directions() {
    pg_or_skip!();
    let pg = pg().unwrap();
    // client → tee A → gatekeeper → tee B → PostgreSQL
    let (tee_b, rec_b) = tee(pg.addr()).await;
    let gk = proxy(tee_b.to_string(), Limits::default()).await;
    let (tee_a, rec_a) = tee(gk.addr.to_string()).await;
    let c = connect(&format!("host=127.0.0.1 port={} user=bookstore dbname=bookstore", tee_a.port())).await.unwrap();
    session(&c).await;
    drop(c);
    eventually(|| gk.gate.in_flight() == 0, "settled").await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let (a, b) = (rec_a.lock().unwrap(), rec_b.lock().unwrap());
    assert!(a.client_to_server.len() > 1000);
    assert_eq!(a.client_to_server, b.client_to_server);
    assert_eq!(a.server_to_client, b.server_to_client);
}

/// A session of everything but a deferred BEGIN (which is answered locally by design).
async fn session(c: &tokio_postgres::Client) {
    c.batch_execute("CREATE TEMP TABLE rec_t (a int, b text); SET application_name = 'rec'").await.unwrap();
    let st = c.prepare("INSERT INTO rec_t VALUES ($1, $2)").await.unwrap();
    let inserts = (0..50).map(|i| {
        let st = st.clone();
        async move { c.execute(&st, &[&i, &format!("v{i}")]).await }
    });
    for r in futures_util::future::join_all(inserts).await {
        r.unwrap();
    }
    let sink = c.copy_in("COPY rec_t FROM STDIN").await.unwrap();
    futures_util::pin_mut!(sink);
    sink.send(Bytes::from_static(b"100\tcopied\n")).await.unwrap();
    sink.finish().await.unwrap();
    let _ = c.batch_execute("SELEC").await.unwrap_err();
    let out = c.copy_out("COPY rec_t TO STDOUT").await.unwrap();
    let _: Vec<_> = out.collect().await;
    c.simple_query("SELECT a, b FROM rec_t; SELECT now()").await.unwrap();
}

/// The recorded streams of a real session, framed after every possible split.
mod framer_property {
    use super::*;
    use proptest::prelude::*;
    use shortfirst_gatekeeper::pg::frame::{next_frame, next_startup};
    use std::sync::OnceLock;

    fn recorded() -> Option<&'static (Vec<u8>, Vec<u8>)> {
        static REC: OnceLock<Option<(Vec<u8>, Vec<u8>)>> = OnceLock::new();
        REC.get_or_init(|| {
            let pg = pg()?;
            let rt = tokio::runtime::Runtime::new().unwrap();
            Some(rt.block_on(async {
                let (t, rec) = tee(pg.addr()).await;
                let c = connect(&format!("host=127.0.0.1 port={} user=bookstore dbname=bookstore", t.port()))
                    .await
                    .unwrap();
                session(&c).await;
                drop(c);
                tokio::time::sleep(Duration::from_millis(200)).await;
                let r = rec.lock().unwrap();
                (r.client_to_server.clone(), r.server_to_client.clone())
            }))
        })
        .as_ref()
    }

    /// Frames `chunks` fed one after the other; the client stream starts with a startup message.
    fn frames(chunks: &[&[u8]], startup: bool) -> Vec<Bytes> {
        let mut buf = BytesMut::new();
        let mut out = Vec::new();
        let mut in_startup = startup;
        for c in chunks {
            buf.extend_from_slice(c);
            loop {
                if in_startup {
                    match next_startup(&mut buf).unwrap() {
                        Some(shortfirst_gatekeeper::pg::frame::StartupFrame::Startup { bytes, .. }) => {
                            out.push(bytes);
                            in_startup = false;
                        }
                        Some(other) => panic!("unexpected {other:?}"),
                        None => break,
                    }
                } else {
                    match next_frame(&mut buf, 1 << 20).unwrap() {
                        Some(f) => out.push(f.bytes),
                        None => break,
                    }
                }
            }
        }
        assert!(buf.is_empty(), "a partial message left over");
        out
    }

    fn split<'a>(s: &'a [u8], cuts: &[usize]) -> Vec<&'a [u8]> {
        let mut pts: Vec<usize> = cuts.iter().map(|c| c % (s.len() + 1)).collect();
        pts.sort_unstable();
        let mut prev = 0;
        let mut out = Vec::new();
        for p in pts.into_iter().chain([s.len()]) {
            out.push(&s[prev..p]);
            prev = p;
        }
        out
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 200, rng_seed: proptest::test_runner::RngSeed::Fixed(11), ..ProptestConfig::default() })]

        #[test]
        fn any_split_frames_the_same_and_loses_no_byte(cuts in proptest::collection::vec(any::<usize>(), 0..40)) {
            let Some((c2s, s2c)) = recorded() else { return Ok(()) };
            for (stream, startup) in [(c2s, true), (s2c, false)] {
                let whole = frames(&[stream], startup);
                let pieces = frames(&split(stream, &cuts), startup);
                prop_assert_eq!(&whole, &pieces);
                prop_assert_eq!(whole.concat(), stream.clone());
            }
        }
    }
}

#[path = "pgtests/controlled.rs"]
mod controlled;

#[path = "pgtests/command.rs"]
mod command;

#[path = "pgtests/pgbouncer.rs"]
mod pgbouncer;

#[path = "pgtests/tls.rs"]
mod tls;

/// Reads whole messages from `s` until one of type `until` (included); every message as
/// (type, body). Bounded: a test server that never sends it fails the test.
async fn read_until(s: &mut TcpStream, until: u8) -> Vec<(u8, Bytes)> {
    let mut buf = BytesMut::new();
    let mut out = Vec::new();
    for _ in 0..1000 {
        while let Some(f) = shortfirst_gatekeeper::pg::frame::next_frame(&mut buf, 1 << 20).unwrap() {
            let tag = f.tag();
            out.push((tag, f.bytes.slice(5..)));
            if tag == until {
                return out;
            }
        }
        let n = tokio::time::timeout(Duration::from_secs(10), s.read_buf(&mut buf)).await.unwrap().unwrap();
        assert!(n > 0, "closed before '{}': {out:?}", char::from(until));
    }
    panic!("no '{}' in 1000 reads: {out:?}", char::from(until));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_protocol_3_2_startup_is_negotiated_down_by_the_server_and_the_session_works() {
    pg_or_skip!();
    let (_pg, gk) = gatekeeper().await;
    let mut s = TcpStream::connect(gk.addr).await.unwrap();
    // StartupMessage for protocol 3.2 (PostgreSQL 18's libpq can ask for it).
    let mut body = Vec::new();
    body.extend_from_slice(&((3i32 << 16) | 2).to_be_bytes());
    for (k, v) in [("user", "bookstore"), ("database", "bookstore")] {
        body.extend_from_slice(k.as_bytes());
        body.push(0);
        body.extend_from_slice(v.as_bytes());
        body.push(0);
    }
    body.push(0);
    let mut startup = ((body.len() + 4) as i32).to_be_bytes().to_vec();
    startup.extend_from_slice(&body);
    s.write_all(&startup).await.unwrap();
    let msgs = read_until(&mut s, b'Z').await;
    // The server (15) answers NegotiateProtocolVersion with the newest minor it speaks, 0,
    // and the session goes on in 3.0: its cancel key has 4 bytes.
    let (tag, nego) = &msgs[0];
    assert_eq!(*tag, b'v', "{msgs:?}");
    assert_eq!(i32::from_be_bytes(nego[..4].try_into().unwrap()), 3 << 16, "{msgs:?}");
    let key = msgs.iter().find(|(t, _)| *t == b'K').expect("BackendKeyData");
    assert_eq!(key.1.len(), 8, "process id and a 4-byte key");
    let mut q = BytesMut::new();
    frontend::query("SELECT 40 + 2", &mut q).unwrap();
    s.write_all(&q).await.unwrap();
    let answer = read_until(&mut s, b'Z').await;
    let row = answer.iter().find(|(t, _)| *t == b'D').expect("a DataRow");
    assert!(row.1.ends_with(b"42"), "{answer:?}");
    gk.settled().await;
    assert_eq!((gk.gate.admitted(), gk.gate.finished()), (1, 1));
}
