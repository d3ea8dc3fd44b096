//! End-to-end runs of the load generator against small servers started inside
//! the test (real TCP on 127.0.0.1): every trace row yields exactly one log
//! row, sizes match, keep-alive and chunked bodies work, and abort/retry,
//! timeouts, refused connections and the in-flight limit behave as documented.

mod support;

use shortfirst_load::dist::TimeDist;
use shortfirst_load::generate::{generate, DEFAULT_MAX_TOTAL_BYTES};
use shortfirst_load::record::{read_records, Outcome, RequestRecord};
use shortfirst_load::run::{run, Config, Model, Source, Summary};
use shortfirst_load::scale::Scaling;
use shortfirst_load::schedule::LoadSchedule;
use shortfirst_load::workload::WorkloadSpec;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// What the test server saw.
#[derive(Default)]
struct Seen {
    connections: AtomicU64,
    requests: AtomicU64,
    by_path: Mutex<HashMap<String, u64>>,
}

/// A tiny HTTP/1.1 server. Paths:
/// - `/f/...`: a file of `docroot` (zero bytes of its length), 404 if absent;
/// - `/slow/MS/SIZE`: SIZE bytes after MS milliseconds;
/// - `/slowfirst/KEY/MS`: the first request for KEY waits MS ms, later ones answer at once;
/// - `/size/SIZE`: SIZE bytes.
///
/// `chunked` sends bodies chunked instead of with Content-Length.
fn start_server(docroot: Option<PathBuf>, chunked: bool) -> (SocketAddr, Arc<Seen>) {
    let seen = Arc::new(Seen::default());
    let s2 = seen.clone();
    let addr = support::serve_on_thread(move |sock| {
        s2.connections.fetch_add(1, Ordering::Relaxed);
        serve_conn(sock, docroot.clone(), chunked, s2.clone())
    });
    (addr, seen)
}

async fn serve_conn(mut sock: tokio::net::TcpStream, docroot: Option<PathBuf>, chunked: bool, seen: Arc<Seen>) {
    let mut buf = Vec::new();
    loop {
        let Some(head) = support::read_head(&mut sock, &mut buf).await else { return };
        let path = head.split(' ').nth(1).unwrap_or("/").to_string();
        let close = head.to_ascii_lowercase().contains("connection: close");
        seen.requests.fetch_add(1, Ordering::Relaxed);
        let count = {
            let mut m = seen.by_path.lock().unwrap();
            let c = m.entry(path.clone()).or_insert(0);
            *c += 1;
            *c
        };
        let parts: Vec<&str> = path.split('/').collect();
        let (status, size, delay_ms) = match parts.get(1).copied() {
            Some("f") => match docroot.as_ref().and_then(|d| std::fs::metadata(d.join(&path[1..])).ok()) {
                Some(m) => (200, m.len(), 0),
                None => (404, 9, 0),
            },
            Some("slow") => (200, parts[3].parse().unwrap(), parts[2].parse().unwrap()),
            Some("slowfirst") => (200, 100, if count == 1 { parts[3].parse().unwrap() } else { 0 }),
            Some("size") => (200, parts[2].parse().unwrap(), 0),
            _ => (404, 9, 0),
        };
        if delay_ms > 0 {
            tokio::time::sleep(Duration::from_millis(delay_ms)).await;
        }
        let conn = if close { "Connection: close\r\n" } else { "" };
        let body = vec![b'x'; size as usize];
        let resp = if chunked {
            let mut r = format!("HTTP/1.1 {status} X\r\nTransfer-Encoding: chunked\r\n{conn}\r\n").into_bytes();
            for piece in body.chunks(1000) {
                r.extend_from_slice(format!("{:x}\r\n", piece.len()).as_bytes());
                r.extend_from_slice(piece);
                r.extend_from_slice(b"\r\n");
            }
            r.extend_from_slice(b"0\r\n\r\n");
            r
        } else {
            let mut r = format!("HTTP/1.1 {status} X\r\nContent-Length: {size}\r\n{conn}\r\n").into_bytes();
            r.extend_from_slice(&body);
            r
        };
        if sock.write_all(&resp).await.is_err() || close {
            return;
        }
    }
}

fn config(addr: SocketAddr, trace: &Path, out: &Path) -> Config {
    support::open_config(addr, trace, out, 8)
}

fn rows(out: &Path) -> Vec<RequestRecord> {
    let mut v: Vec<_> = read_records(&out.join("requests.csv")).unwrap().collect::<Result<_, _>>().unwrap();
    v.sort_by_key(|r| r.id);
    v
}

fn write_trace(dir: &Path, lines: &[(f64, &str, u64)]) -> PathBuf {
    let p = dir.join("t.csv");
    let mut s = String::from("time_s,path,size_bytes\n");
    for (t, path, size) in lines {
        s.push_str(&format!("{t},{path},{size}\n"));
    }
    std::fs::write(&p, s).unwrap();
    p
}

fn summary_json(out: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap()
}

/// Open model over a generated wc98like workload: one row per trace row,
/// sizes match the files, the outputs are all there.
#[test]
fn open_model_one_row_per_request_sizes_match() {
    let dir = tempfile::tempdir().unwrap();
    let spec = WorkloadSpec::new("wc98like", None, 200, 1500, 1000.0, 3).unwrap();
    let g = generate(&spec, dir.path(), DEFAULT_MAX_TOTAL_BYTES, false).unwrap();
    let (addr, seen) = start_server(Some(g.docroot.clone()), false);
    let out = dir.path().join("run");
    let mut cfg = config(addr, &g.trace, &out);
    cfg.scaling = Scaling::Rate { req_per_s: 1500.0 };
    cfg.uplink_bits_per_s = Some(100e6);
    let s: Summary = run(cfg).unwrap();
    let rs = rows(&out);
    assert_eq!(rs.len(), 1500);
    let trace: Vec<_> = shortfirst_load::trace::open(&g.trace, None).unwrap().map(|r| r.unwrap()).collect();
    for (r, t) in rs.iter().zip(&trace) {
        assert_eq!(r.id as usize, rs.iter().position(|x| x.id == r.id).unwrap());
        assert_eq!(r.path, t.path);
        assert_eq!(r.outcome, Outcome::Ok, "{r:?}");
        assert_eq!(r.size_bytes, t.size_bytes);
        assert_eq!(r.bytes_received, r.size_bytes, "{r:?}");
        assert_eq!(r.attempts, 1);
        let (c, f, d) = (r.connected_s.unwrap(), r.first_byte_s.unwrap(), r.done_s.unwrap());
        assert!(r.scheduled_s <= r.start_s + 1e-6 && r.start_s <= c && c <= f && f <= d, "{r:?}");
    }
    // One connection per request without --persistent.
    assert_eq!(seen.connections.load(Ordering::Relaxed), 1500);
    assert_eq!(s.requests, 1500);
    assert_eq!(s.completed, 1500);
    // Every open-model request has its lateness measured; lateness is
    // start − scheduled, so it matches the rows.
    assert_eq!(s.lateness_samples, 1500);
    let max_late_ms = rs.iter().map(|r| (r.start_s - r.scheduled_s) * 1e3).fold(0.0, f64::max);
    assert!((s.lateness_max_ms.unwrap() - max_late_ms).abs() < 0.01 * max_late_ms + 0.01, "{max_late_ms}");
    assert_eq!(s.bytes_received, trace.iter().map(|t| t.size_bytes).sum::<u64>());
    // Scaled to 1500 req/s: the trace's span shrinks accordingly.
    let span = rs.last().unwrap().scheduled_s;
    assert!((span - 1499.0 / 1500.0).abs() < 0.01, "span {span}");
    let j = summary_json(&out);
    for key in [
        "requests",
        "completed",
        "failed",
        "aborted",
        "offered_load",
        "throughput_bytes_per_s",
        "mean_response_s",
        "p50_response_s",
        "p90_response_s",
        "p99_response_s",
        "lateness_p99_ms",
        "valid",
        "seed",
        "command_line",
    ] {
        assert!(!j[key].is_null(), "summary.json lacks {key}: {j}");
    }
    // The commit the binary was built from: a hex hash (with -dirty for
    // uncommitted changes), or "unknown" outside a git checkout.
    let commit = j["git_commit"].as_str().unwrap_or_default();
    let hash = commit.strip_suffix("-dirty").unwrap_or(commit);
    assert!(
        commit == "unknown" || (hash.len() >= 7 && hash.chars().all(|c| c.is_ascii_hexdigit())),
        "git_commit `{commit}`"
    );
    let hlog = std::fs::read_to_string(out.join("response-times.hlog")).unwrap();
    assert!(hlog.contains("#[StartTime:") && hlog.lines().filter(|l| !l.starts_with('#')).count() >= 1, "{hlog}");
}

/// --load RHO --link-rate RATE: the achieved offered load is the requested one.
#[test]
fn load_scaling_reaches_the_target_offered_load() {
    let dir = tempfile::tempdir().unwrap();
    let spec = WorkloadSpec::new("exp:3000", None, 100, 800, 10.0, 4).unwrap();
    let g = generate(&spec, dir.path(), DEFAULT_MAX_TOTAL_BYTES, false).unwrap();
    let (addr, _) = start_server(Some(g.docroot.clone()), false);
    let out = dir.path().join("run");
    let mut cfg = config(addr, &g.trace, &out);
    // 800 × ~3 KB ≈ 19 Mbit; at 0.5 × 40 Mbit/s the replay takes ≈ 1 s.
    cfg.scaling = Scaling::Load { rho: 0.5, uplink_bits_per_s: 40e6 };
    cfg.uplink_bits_per_s = Some(40e6);
    let s = run(cfg).unwrap();
    let load = s.offered_load.unwrap();
    // Sizes of the first and last request are in the numerator but the
    // span is between their sends; allow for that and for lateness.
    assert!((load - 0.5).abs() < 0.03, "offered load {load}");
    assert_eq!(s.completed, 800);
}

/// Keep-alive with --persistent K over chunked responses.
#[test]
fn persistent_connections_and_chunked_bodies() {
    let dir = tempfile::tempdir().unwrap();
    let lines: Vec<(f64, String, u64)> =
        (0..200).map(|i| (i as f64 * 0.002, format!("/size/{}", 500 + i * 37), 500 + i * 37)).collect();
    let borrowed: Vec<(f64, &str, u64)> = lines.iter().map(|(t, p, s)| (*t, p.as_str(), *s)).collect();
    let trace = write_trace(dir.path(), &borrowed);
    let (addr, seen) = start_server(None, true);
    let out = dir.path().join("run");
    let mut cfg = config(addr, &trace, &out);
    cfg.persistent = Some(5);
    cfg.clients = 2;
    let s = run(cfg).unwrap();
    assert_eq!(s.completed, 200);
    for r in rows(&out) {
        assert_eq!(r.bytes_received, r.size_bytes, "{r:?}");
    }
    let conns = seen.connections.load(Ordering::Relaxed);
    assert!((40..200).contains(&conns), "{conns} connections for 200 requests with K = 5");
}

/// A slow server: abort after T, retry M times, then give up.
#[test]
fn abort_and_retry_against_a_slow_server() {
    let dir = tempfile::tempdir().unwrap();
    let trace = write_trace(
        dir.path(),
        &[(0.0, "/slow/2000/100", 100), (0.0, "/slowfirst/a/2000", 100), (0.01, "/size/100", 100)],
    );
    let (addr, seen) = start_server(None, false);
    let out = dir.path().join("run");
    let mut cfg = config(addr, &trace, &out);
    cfg.abort_after_s = Some(0.2);
    cfg.retries = 2;
    let s = run(cfg).unwrap();
    let rs = rows(&out);
    // Always slow: 3 attempts, each aborted at 0.2 s, then the user gives up.
    assert_eq!(rs[0].outcome, Outcome::Aborted);
    assert_eq!(rs[0].attempts, 3);
    let took = rs[0].done_s.unwrap() - rs[0].start_s;
    assert!((0.6..1.5).contains(&took), "{took}");
    assert_eq!(seen.by_path.lock().unwrap()["/slow/2000/100"], 3);
    // Slow only the first time: the retry succeeds.
    assert_eq!(rs[1].outcome, Outcome::Ok);
    assert_eq!(rs[1].attempts, 2);
    assert_eq!(rs[1].bytes_received, 100);
    assert!(rs[1].done_s.unwrap() - rs[1].start_s >= 0.2);
    assert_eq!(rs[2].outcome, Outcome::Ok);
    assert_eq!(rs[2].attempts, 1);
    assert_eq!((s.aborted, s.completed, s.retries), (1, 2, 3));
}

/// Without an abort time, the hard timeout ends the request as `timeout`;
/// a refused connection is `failed` with its reason.
#[test]
fn timeout_and_refused() {
    let dir = tempfile::tempdir().unwrap();
    let trace = write_trace(dir.path(), &[(0.0, "/slow/3000/10", 10), (0.0, "/size/10", 10)]);
    let (addr, _) = start_server(None, false);
    let out = dir.path().join("run");
    let mut cfg = config(addr, &trace, &out);
    cfg.timeout_s = 0.3;
    run(cfg).unwrap();
    let rs = rows(&out);
    assert_eq!(rs[0].outcome, Outcome::Timeout);
    assert_eq!(rs[0].status, None);
    assert_eq!(rs[1].outcome, Outcome::Ok);

    // A port nobody listens on: bind, note the port, close.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let out2 = dir.path().join("run2");
    let cfg = config(format!("127.0.0.1:{port}").parse().unwrap(), &trace, &out2);
    let s = run(cfg).unwrap();
    assert_eq!(s.failed, 2);
    assert_eq!(s.failures_by_reason.get("connection refused"), Some(&2));
    assert!(rows(&out2).iter().all(|r| r.outcome == Outcome::Failed && r.done_s.is_some()));
    assert!(!s.valid);
    // Nothing was measured: the run says so (a refused connect is the
    // server's answer, counted, not a broken response).
    assert_eq!(s.refused, 2);
    assert!(s.invalid_reasons.iter().any(|r| r.contains("no request succeeded")), "{:?}", s.invalid_reasons);
    assert!(!s.invalid_reasons.iter().any(|r| r.contains("broke off")), "{:?}", s.invalid_reasons);
    assert_eq!(summary_json(&out2)["valid"], false);
}

/// How [`start_breaking_server`] fails the response of its first connections.
#[derive(Clone, Copy)]
enum Break {
    /// Reads the request and resets the connection (SO_LINGER 0) before any
    /// byte of a response: a refusal.
    ResetBefore,
    /// Reads the request, closes without answering: a refusal.
    CloseBefore,
    /// Sends the status line and half the headers, then resets: the
    /// response broke off.
    ResetMid,
    /// Sends a head promising 100 bytes, 10 of them, then closes.
    CloseMid,
}

/// A server that fails its first `count` connections as `how`, then serves
/// `/size/N` like [`start_server`] (keep-alive).
fn start_breaking_server(how: Break, count: u64) -> SocketAddr {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async move {
            l.set_nonblocking(true).unwrap();
            let l = tokio::net::TcpListener::from_std(l).unwrap();
            let mut n = 0u64;
            loop {
                let (mut sock, _) = l.accept().await.unwrap();
                n += 1;
                if n > count {
                    tokio::spawn(serve_conn(sock, None, false, Arc::new(Seen::default())));
                    continue;
                }
                let mut tmp = [0u8; 1024];
                let _ = sock.read(&mut tmp).await;
                let (part, reset): (&[u8], bool) = match how {
                    Break::ResetBefore => (b"", true),
                    Break::CloseBefore => (b"", false),
                    Break::ResetMid => (b"HTTP/1.1 200 OK\r\nContent-Le", true),
                    Break::CloseMid => (b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n0123456789", false),
                };
                let _ = sock.write_all(part).await;
                if reset {
                    // Let the partial response reach the client before the RST.
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    socket2::SockRef::from(&sock).set_linger(Some(Duration::ZERO)).unwrap();
                }
                drop(sock);
            }
        });
    });
    addr
}

/// `valid` means the statistics describe the server. Refusals (reset or
/// closed before any byte of a response) are a measured outcome, counted in
/// `refused`: a run is invalid for them only when nothing succeeded. A
/// response that broke off is not measured: more than 1% of them make the
/// run invalid; up to 1% is a measured result.
#[test]
fn refusals_are_measured_and_broken_responses_invalidate_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let lines: Vec<(f64, &str, u64)> = (0..100).map(|i| (i as f64 * 0.001, "/size/100", 100)).collect();
    let trace = write_trace(dir.path(), &lines);
    let broke_off = |s: &Summary| s.invalid_reasons.iter().any(|r| r.contains("broke off"));
    let nothing = |s: &Summary| s.invalid_reasons.iter().any(|r| r.contains("no request succeeded"));

    // (how, connections failed, reason, refusal?, valid?)
    let cases = [
        (Break::ResetBefore, u64::MAX, "connection reset", true, false),
        (Break::ResetBefore, 30, "connection reset", true, true),
        (Break::CloseBefore, 30, "closed before response", true, true),
        (Break::ResetMid, 1, "connection reset mid-response", false, true),
        (Break::ResetMid, 2, "connection reset mid-response", false, false),
        (Break::CloseMid, 1, "closed mid-response", false, true),
        (Break::CloseMid, 2, "closed mid-response", false, false),
    ];
    for (i, (how, count, reason, refusal, valid)) in cases.into_iter().enumerate() {
        let out = dir.path().join(format!("case{i}"));
        let s = run(config(start_breaking_server(how, count), &trace, &out)).unwrap();
        let failed = count.min(100);
        let ctx = format!("case {i} ({reason} ×{count}): {:?} {:?}", s.failures_by_reason, s.invalid_reasons);
        assert_eq!((s.requests, s.failed, s.ok), (100, failed, 100 - failed), "{ctx}");
        assert_eq!(s.failures_by_reason.get(reason), Some(&failed), "{ctx}");
        assert_eq!(s.refused, if refusal { failed } else { 0 }, "{ctx}");
        // Validity apart from generator lateness: a loaded test machine may
        // exceed the lateness limit, which is not what this test is about.
        let invalid_besides_lateness = s.invalid_reasons.iter().any(|r| !r.starts_with("generator lateness"));
        assert_eq!(!invalid_besides_lateness, valid, "{ctx}");
        assert_eq!(nothing(&s), failed == 100, "{ctx}");
        assert_eq!(broke_off(&s), !refusal && failed > 1, "{ctx}");
        if broke_off(&s) {
            assert!(s.invalid_reasons.iter().any(|r| r.contains(&format!("{failed} of 100"))), "{ctx}");
        }
        assert_eq!(summary_json(&out)["refused"], s.refused, "{ctx}");
    }
}

/// Every response an HTTP error (e.g. a wrong docroot): completed, but nothing
/// of the workload was served, so the run is invalid; HTTP errors alone among
/// successes are a measured outcome.
#[test]
fn no_success_invalidates_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let trace = write_trace(dir.path(), &[(0.0, "/missing", 10), (0.001, "/missing", 10)]);
    let (addr, _) = start_server(None, false);
    let out = dir.path().join("run");
    let s = run(config(addr, &trace, &out)).unwrap();
    assert_eq!((s.completed, s.http_error, s.ok), (2, 2, 0));
    assert!(!s.valid);
    assert!(s.invalid_reasons.iter().any(|r| r.contains("no request succeeded")), "{:?}", s.invalid_reasons);

    let trace = write_trace(dir.path(), &[(0.0, "/missing", 10), (0.001, "/size/10", 10)]);
    let out = dir.path().join("run2");
    let s = run(config(addr, &trace, &out)).unwrap();
    assert_eq!((s.http_error, s.ok), (1, 1));
    assert!(s.invalid_reasons.iter().all(|r| r.contains("lateness")), "{:?}", s.invalid_reasons);
}

/// Requests due while `max_in_flight` are outstanding are logged as failed,
/// not sent, and the run is marked invalid.
#[test]
fn in_flight_limit_is_counted_and_invalidates() {
    let dir = tempfile::tempdir().unwrap();
    let lines: Vec<(f64, &str, u64)> = (0..6).map(|i| (i as f64 * 0.01, "/slow/500/10", 10)).collect();
    let trace = write_trace(dir.path(), &lines);
    let (addr, _) = start_server(None, false);
    let out = dir.path().join("run");
    let mut cfg = config(addr, &trace, &out);
    cfg.max_in_flight = 2;
    let s = run(cfg).unwrap();
    assert_eq!(s.requests, 6);
    assert_eq!(s.not_sent_in_flight_limit, 4);
    assert_eq!(s.completed, 2);
    assert!(!s.valid);
    assert!(s.invalid_reasons.iter().any(|r| r.contains("in-flight limit")));
    let rs = rows(&out);
    assert_eq!(rs.iter().filter(|r| r.attempts == 0 && r.outcome == Outcome::Failed).count(), 4);
}

/// Partly-open: sessions of K back-to-back requests.
#[test]
fn partly_open_sessions_are_back_to_back() {
    let dir = tempfile::tempdir().unwrap();
    let lines: Vec<(f64, &str, u64)> = (0..30).map(|i| (i as f64 * 0.001, "/slow/20/50", 50)).collect();
    let trace = write_trace(dir.path(), &lines);
    let (addr, _) = start_server(None, false);
    let out = dir.path().join("run");
    let mut cfg = config(addr, &trace, &out);
    cfg.model = Model::PartlyOpen { k: 5 };
    let s = run(cfg).unwrap();
    assert_eq!(s.completed, 30);
    let rs = rows(&out);
    for session in rs.chunks(5) {
        assert!(session.iter().all(|r| r.client == session[0].client));
        for w in session.windows(2) {
            assert!(w[1].start_s >= w[0].done_s.unwrap(), "{:?} then {:?}", w[0], w[1]);
        }
    }
    // Sessions arrive at trace times (every 5 ms), not one after another.
    assert!(rs[25].scheduled_s < 0.1, "{:?}", rs[25]);
}

/// `--load-schedule` in the dispatcher: sessions (partly-open, K = 2) of a
/// trace with a record every 0.1 s are scheduled at the hand-computed warp of
/// 0.5 s at 1×, then 0.5 s at 4×, repeated (a period consumes 2.5 s of trace),
/// and each row carries the phase of its scheduled time.
#[test]
fn load_schedule_warps_the_sessions_arrivals() {
    let dir = tempfile::tempdir().unwrap();
    let lines: Vec<(f64, &str, u64)> = (0..34).map(|i| (i as f64 * 0.1, "/size/100", 100)).collect();
    let trace = write_trace(dir.path(), &lines);
    let (addr, _) = start_server(None, false);
    let out = dir.path().join("run");
    let mut cfg = config(addr, &trace, &out);
    cfg.model = Model::PartlyOpen { k: 2 };
    cfg.load_schedule = Some(LoadSchedule::parse("0.5s@1,0.5s@4").unwrap());
    let s = run(cfg).unwrap();
    assert_eq!(s.completed, 34);
    // Session i starts at trace time 0.2 i.
    let want =
        [0.0, 0.2, 0.4, 0.525, 0.575, 0.625, 0.675, 0.725, 0.775, 0.825, 0.875, 0.925, 0.975, 1.1, 1.3, 1.5, 1.55];
    let want_phase = |t: f64| if t % 1.0 < 0.5 { (0, 1.0) } else { (1, 4.0) };
    let mut rdr = csv::Reader::from_path(out.join("requests.csv")).unwrap();
    let header: Vec<String> = rdr.headers().unwrap().iter().map(String::from).collect();
    assert_eq!(header[13..], ["phase", "load_multiplier"]);
    let mut firsts = Vec::new();
    for row in rdr.records() {
        let row = row.unwrap();
        let (id, sched): (u64, f64) = (row[0].parse().unwrap(), row[8].parse().unwrap());
        let (phase, mult): (usize, f64) = (row[13].parse().unwrap(), row[14].parse().unwrap());
        // The log rounds times to the µs: a time at a phase's edge may be on either side.
        let near_edge = (sched - (sched * 2.0).round() / 2.0).abs() < 1e-5;
        assert!((phase, mult) == want_phase(sched) || near_edge, "{row:?}");
        assert_eq!(mult, [1.0, 4.0][phase]);
        if id % 2 == 0 {
            firsts.push((id, sched));
        }
    }
    firsts.sort_by_key(|f| f.0);
    let got: Vec<f64> = firsts.iter().map(|f| f.1).collect();
    assert_eq!(got.len(), want.len());
    for (g, w) in got.iter().zip(want) {
        assert!((g - w).abs() < 2e-6, "scheduled {got:?}, want {want:?}");
    }
    // The reader of requests.csv takes the extra columns.
    assert_eq!(rows(&out).len(), 34);
    let j = summary_json(&out);
    assert_eq!(j["load_schedule"]["spec"], "0.5s@1,0.5s@4");
    let requests: u64 =
        j["load_schedule"]["phases"].as_array().unwrap().iter().map(|p| p["requests"].as_u64().unwrap()).sum();
    assert_eq!(requests, 34);
}

/// A closed model has no trace times to warp.
#[test]
fn load_schedule_is_refused_for_the_closed_model() {
    let dir = tempfile::tempdir().unwrap();
    let trace = write_trace(dir.path(), &[(0.0, "/size/1", 1)]);
    let mut cfg = config("127.0.0.1:9".parse().unwrap(), &trace, &dir.path().join("run"));
    cfg.model = Model::Closed { users: 1, think: TimeDist::Const(0.0) };
    cfg.load_schedule = Some(LoadSchedule::parse("const@1.4").unwrap());
    let e = run(cfg).unwrap_err().to_string();
    assert!(e.contains("--load-schedule") && e.contains("closed"), "{e}");
}

/// Closed model driven by the TPC-W shopping mix session model.
#[test]
fn closed_model_with_tpcw_sessions() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/tpcw-shopping-mix.csv"), dir.path().join("mix.csv"))
        .unwrap();
    let mut toml = String::from("start = \"INIT\"\ntransitions = \"mix.csv\"\nmax_requests = 20\n[pages]\n");
    for c in
        ["ADMC", "ADMR", "BESS", "BUYC", "BUYR", "CREG", "HOME", "NEWP", "ORDD", "ORDI", "PROD", "SREQ", "SRES", "SHOP"]
    {
        toml.push_str(&format!("{c} = \"/size/{}\"\n", 100 + c.len() * 10));
    }
    std::fs::write(dir.path().join("tpcw.toml"), toml).unwrap();
    let (addr, _) = start_server(None, false);
    let out = dir.path().join("run");
    let mut cfg = config(addr, Path::new("unused"), &out);
    cfg.source = Source::Session { path: dir.path().join("tpcw.toml") };
    cfg.model = Model::Closed { users: 4, think: TimeDist::Exp { mean_s: 0.01, max_s: Some(0.1) } };
    cfg.duration_s = Some(1.0);
    let s = run(cfg).unwrap();
    assert!(s.completed > 40, "{}", s.completed);
    assert_eq!(s.completed, s.requests);
    let rs = rows(&out);
    // Closed: a user never has two requests outstanding.
    for u in 0..4 {
        let mine: Vec<_> = rs.iter().filter(|r| r.client == u).collect();
        let mut sorted = mine.clone();
        sorted.sort_by(|a, b| a.start_s.total_cmp(&b.start_s));
        for w in sorted.windows(2) {
            assert!(w[1].start_s >= w[0].done_s.unwrap());
        }
    }
    // Every session starts at HOME (INIT → HOME with probability 1).
    assert!(rs.iter().all(|r| r.path.starts_with("/size/")));
}

/// Malformed trace: the run stops with the position; --skip-bad counts it.
#[test]
fn malformed_trace_stops_or_is_skipped() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("t.csv");
    std::fs::write(&p, "time_s,path,size_bytes\n0,/size/1,1\n0.01,oops,1\n0.02,/size/1,1\n").unwrap();
    let (addr, _) = start_server(None, false);
    let out = dir.path().join("run");
    let e = run(config(addr, &p, &out)).unwrap_err().to_string();
    assert!(e.contains("t.csv: line 3"), "{e}");
    assert!(!out.join("requests.csv").exists() && !out.join("summary.json").exists());
    let mut cfg = config(addr, &p, &out);
    if let Source::Trace { skip_bad, .. } = &mut cfg.source {
        *skip_bad = true;
    }
    let s = run(cfg).unwrap();
    assert_eq!((s.requests, s.trace_records_skipped, s.valid), (2, 1, false));
}

/// Scheduling policies (`/proc/self/task/*/stat` field 41) of this process's
/// threads named `name`.
fn thread_policies(name: &str) -> Vec<i32> {
    let mut out = Vec::new();
    for task in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
        let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        if comm.trim() != name {
            continue;
        }
        let stat = std::fs::read_to_string(task.path().join("stat")).unwrap_or_default();
        // Fields after the parenthesised name start at field 3.
        if let Some(policy) = stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().nth(41 - 3)) {
            out.push(policy.parse().unwrap());
        }
    }
    out
}

/// --realtime: works as root (and scheduling is restored afterwards), and
/// fails with a clear message otherwise. The collector thread runs
/// SCHED_OTHER even so: under SCHED_FIFO it could spin on a channel slot that a
/// preempted SCHED_OTHER sender had claimed, for ~1 s (RT throttling).
#[test]
fn realtime_scheduling() {
    let dir = tempfile::tempdir().unwrap();
    let trace = write_trace(dir.path(), &[(0.0, "/size/10", 10), (0.01, "/size/10", 10), (0.3, "/size/10", 10)]);
    let (addr, _) = start_server(None, false);
    let out = dir.path().join("run");
    let mut cfg = config(addr, &trace, &out);
    cfg.realtime = true;
    let is_root = std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(2) == Some("0"));
    // With --spin-us the dispatching thread switches its own policy while it
    // runs (SCHED_OTHER spinning, SCHED_FIFO sleeping); it must end normal too.
    for spin_us in [0, 2000] {
        let mut cfg = cfg.clone();
        cfg.spin_us = spin_us;
        cfg.out_dir = dir.path().join(format!("run-{spin_us}"));
        let done = Arc::new(AtomicBool::new(false));
        let watcher = {
            let done = done.clone();
            std::thread::spawn(move || {
                let mut seen = Vec::new();
                while !done.load(Ordering::Relaxed) {
                    seen.extend(thread_policies("collector"));
                    std::thread::sleep(Duration::from_millis(1));
                }
                seen
            })
        };
        let res = run(cfg);
        done.store(true, Ordering::Relaxed);
        let collector_policies = watcher.join().unwrap();
        match res {
            Ok(s) => {
                assert!(s.realtime && s.completed == 3);
                assert!(!collector_policies.is_empty(), "the collector thread was never seen");
                assert!(
                    collector_policies.iter().all(|&p| p == libc::SCHED_OTHER),
                    "collector policies {collector_policies:?} (spin {spin_us})"
                );
                assert_eq!(s.spin.is_some(), spin_us > 0);
                // SAFETY: reads the calling thread's policy.
                let policy = unsafe { libc::sched_getscheduler(0) };
                assert_eq!(policy, libc::SCHED_OTHER, "normal scheduling after the run (spin {spin_us})");
            }
            Err(e) => {
                assert!(!is_root, "root may use SCHED_FIFO: {e}");
                assert!(e.to_string().contains("CAP_SYS_NICE"), "{e}");
            }
        }
    }
}

/// `--persistent K` under backlog: every connection goes back to its client's
/// idle list until it has carried K requests, however many were in flight at
/// once, so keep-alive does not turn into new connections.
#[test]
fn persistent_k_holds_under_backlog() {
    let dir = tempfile::tempdir().unwrap();
    // Three bursts of 20 simultaneous 100 ms requests from one client.
    let mut lines = Vec::new();
    for burst in 0..3 {
        for _ in 0..20 {
            lines.push((burst as f64 * 1.0, "/slow/100/10", 10));
        }
    }
    let trace = write_trace(dir.path(), &lines);
    let (addr, seen) = start_server(None, false);
    let out = dir.path().join("run");
    let mut cfg = config(addr, &trace, &out);
    cfg.persistent = Some(2);
    cfg.clients = 1;
    let s = run(cfg).unwrap();
    // (Not `valid`: 20 requests due at once on a loaded test machine may
    // exceed the lateness limit, which is not what this test is about.)
    assert_eq!((s.completed, s.not_sent_in_flight_limit), (60, 0));
    // Bursts 1 and 2 share 20 connections (2 requests each, then closed);
    // burst 3 needs 20 new ones.
    assert_eq!(seen.connections.load(Ordering::Relaxed), 40);
}

/// The idle connections a worker keeps are bounded (by --max-in-flight /
/// --threads, less if the open-file limit is tight): beyond, a connection is
/// closed after its request.
#[test]
fn idle_connections_are_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let mut lines = Vec::new();
    for burst in 0..2 {
        for _ in 0..10 {
            lines.push((burst as f64 * 1.0, "/slow/100/10", 10));
        }
    }
    let trace = write_trace(dir.path(), &lines);
    let (addr, seen) = start_server(None, false);
    let out = dir.path().join("run");
    let mut cfg = config(addr, &trace, &out);
    cfg.persistent = Some(100);
    cfg.clients = 1;
    cfg.threads = 1;
    cfg.max_in_flight = 12;
    let s = run(cfg).unwrap();
    assert_eq!((s.completed, s.not_sent_in_flight_limit), (20, 0));
    // 10, then at most 12 idle were kept — all 10: no new connection.
    assert_eq!(seen.connections.load(Ordering::Relaxed), 10);

    let out = dir.path().join("run2");
    let mut cfg = config(addr, &trace, &out);
    cfg.persistent = Some(100);
    cfg.clients = 1;
    cfg.threads = 2;
    cfg.max_in_flight = 12;
    let before = seen.connections.load(Ordering::Relaxed);
    let s = run(cfg).unwrap();
    assert_eq!(s.completed, 20);
    // One client is one worker's: it keeps 12 / 2 = 6 of its 10 connections,
    // so the second burst opens 4 new ones.
    assert_eq!(seen.connections.load(Ordering::Relaxed) - before, 14);
}

/// --spin-us: the dispatcher runs in worker 0 and busy-waits before each
/// send; every request is sent once, with its lateness broken down.
#[test]
fn spin_dispatch_open_and_partly_open() {
    let dir = tempfile::tempdir().unwrap();
    let lines: Vec<(f64, &str, u64)> = (0..300).map(|i| (i as f64 * 0.001, "/size/100", 100)).collect();
    let trace = write_trace(dir.path(), &lines);
    let (addr, seen) = start_server(None, false);
    for (model, persistent) in [(Model::Open, None), (Model::Open, Some(10)), (Model::PartlyOpen { k: 3 }, Some(3))] {
        let out = dir.path().join(format!("run-{model:?}-{persistent:?}"));
        let mut cfg = config(addr, &trace, &out);
        cfg.model = model;
        cfg.persistent = persistent;
        cfg.spin_us = 200;
        let before = seen.requests.load(Ordering::Relaxed);
        let s = run(cfg).unwrap();
        assert_eq!((s.requests, s.completed, s.spin_us), (300, 300, 200), "{model:?}");
        assert_eq!(seen.requests.load(Ordering::Relaxed) - before, 300);
        let ids: Vec<u64> = rows(&out).iter().map(|r| r.id).collect();
        assert_eq!(ids, (0..300).collect::<Vec<_>>());
        // One timed request per dispatch (the first of each session).
        let timed = if let Model::PartlyOpen { k } = model { 300 / u64::from(k) } else { 300 };
        let b = &s.lateness_breakdown;
        assert_eq!((b.dispatch.samples, b.handoff.samples, b.send.samples), (timed, timed, timed), "{model:?}");
        assert!(b.dispatcher_wake_error.samples > 0);
        let spin = s.spin.as_ref().expect("spin statistics");
        assert!(spin.waits > 0 && spin.waits <= timed, "{spin:?}");
        assert!(spin.spin_s <= spin.waits as f64 * 200e-6, "{spin:?}");
        let j = summary_json(&out);
        assert!(j["spin"]["thread_cpu_s"].is_f64(), "{j}");
        assert!(j["lateness_breakdown"]["handoff"]["p99_us"].is_u64(), "{j}");
    }
    let mut cfg = config(addr, &trace, &dir.path().join("bad"));
    cfg.spin_us = shortfirst_load::run::MAX_SPIN_US + 1;
    assert!(run(cfg).unwrap_err().to_string().contains("--spin-us"));
}
