//! `received.csv` from real runs on 127.0.0.1: its bytes are the body bytes of
//! `requests.csv` (plain, chunked, kept-alive and not), and they sit in the
//! buckets of the reads that brought them, not spread over the transfer.

mod support;

use shortfirst_load::received::BUCKET_MS;
use shortfirst_load::record::{read_records, Outcome, RequestRecord};
use shortfirst_load::run::{run, Config};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio::io::AsyncWriteExt;

/// A tiny HTTP/1.1 server. Paths:
/// - `/size/SIZE`: SIZE bytes with Content-Length;
/// - `/chunked/SIZE`: SIZE bytes, chunked;
/// - `/split/SIZE/MS`: the head and the first half of SIZE bytes, then after
///   MS milliseconds the second half.
fn start_server() -> SocketAddr {
    support::serve_on_thread(serve_conn)
}

async fn serve_conn(mut sock: tokio::net::TcpStream) {
    let mut buf = Vec::new();
    while let Some(head) = support::read_head(&mut sock, &mut buf).await {
        let path = head.split(' ').nth(1).unwrap_or("/").to_string();
        let close = head.to_ascii_lowercase().contains("connection: close");
        let conn = if close { "Connection: close\r\n" } else { "" };
        let parts: Vec<&str> = path.split('/').collect();
        let size: usize = parts.get(2).and_then(|s| s.parse().ok()).unwrap_or(0);
        let body = vec![b'x'; size];
        let ok = match parts.get(1).copied() {
            Some("chunked") => {
                let mut r = format!("HTTP/1.1 200 X\r\nTransfer-Encoding: chunked\r\n{conn}\r\n").into_bytes();
                for piece in body.chunks(1000) {
                    r.extend_from_slice(format!("{:x}\r\n", piece.len()).as_bytes());
                    r.extend_from_slice(piece);
                    r.extend_from_slice(b"\r\n");
                }
                r.extend_from_slice(b"0\r\n\r\n");
                sock.write_all(&r).await.is_ok()
            }
            Some("split") => {
                let ms: u64 = parts[3].parse().unwrap();
                let mut r = format!("HTTP/1.1 200 X\r\nContent-Length: {size}\r\n{conn}\r\n").into_bytes();
                r.extend_from_slice(&body[..size / 2]);
                let first = sock.write_all(&r).await.is_ok();
                tokio::time::sleep(Duration::from_millis(ms)).await;
                first && sock.write_all(&body[size / 2..]).await.is_ok()
            }
            _ => {
                let mut r = format!("HTTP/1.1 200 X\r\nContent-Length: {size}\r\n{conn}\r\n").into_bytes();
                r.extend_from_slice(&body);
                sock.write_all(&r).await.is_ok()
            }
        };
        if !ok || close {
            return;
        }
    }
}

fn config(addr: SocketAddr, trace: &Path, out: &Path) -> Config {
    support::open_config(addr, trace, out, 4)
}

fn write_trace(dir: &Path, lines: &[(f64, String, u64)]) -> PathBuf {
    let p = dir.join("t.csv");
    let mut s = String::from("time_s,path,size_bytes\n");
    for (t, path, size) in lines {
        s.push_str(&format!("{t},{path},{size}\n"));
    }
    std::fs::write(&p, s).unwrap();
    p
}

fn rows(out: &Path) -> Vec<RequestRecord> {
    read_records(&out.join("requests.csv")).unwrap().collect::<Result<_, _>>().unwrap()
}

/// `received.csv` as (t_s, bytes) rows, checking the header and that the rows
/// are dense: one per bucket from 0.
fn received(out: &Path) -> Vec<(f64, u64)> {
    let text = std::fs::read_to_string(out.join("received.csv")).unwrap();
    let mut lines = text.lines();
    assert_eq!(lines.next(), Some("t_s,bytes"));
    let rows: Vec<(f64, u64)> = lines
        .map(|l| {
            let (t, b) = l.split_once(',').unwrap();
            (t.parse().unwrap(), b.parse().unwrap())
        })
        .collect();
    let width_s = BUCKET_MS as f64 / 1000.0;
    for (i, (t, _)) in rows.iter().enumerate() {
        assert!((t - i as f64 * width_s).abs() < 1e-9, "row {i}: t_s {t}");
    }
    rows
}

/// The bytes of `received.csv` are the sum of `bytes_received`, with and
/// without keep-alive, Content-Length and chunked; the file covers the run.
#[test]
fn received_bytes_sum_to_the_bodies_received() {
    for (persistent, kind) in [(None, "size"), (Some(4), "size"), (Some(4), "chunked"), (None, "chunked")] {
        let dir = tempfile::tempdir().unwrap();
        let lines: Vec<(f64, String, u64)> = (0..300u64)
            .map(|i| {
                let size = 200 + (i * 7919) % 60_000;
                (i as f64 * 0.002, format!("/{kind}/{size}"), size)
            })
            .collect();
        let trace = write_trace(dir.path(), &lines);
        let out = dir.path().join("run");
        let mut cfg = config(start_server(), &trace, &out);
        cfg.persistent = persistent;
        let s = run(cfg).unwrap();
        assert_eq!(s.completed, 300, "{persistent:?} {kind}");
        let rs = rows(&out);
        let bodies: u64 = rs.iter().map(|r| r.bytes_received).sum();
        assert_eq!(bodies, lines.iter().map(|l| l.2).sum::<u64>());
        let got = received(&out);
        assert_eq!(got.iter().map(|r| r.1).sum::<u64>(), bodies, "{persistent:?} {kind}");
        // Every byte came in a bucket that a request was receiving in, and
        // the file reaches the last response's end.
        let last_done = rs.iter().filter_map(|r| r.done_s).fold(0.0, f64::max);
        let last_t = got.last().unwrap().0;
        assert!(last_t <= last_done + 1.0 && last_done < last_t + BUCKET_MS as f64 / 1000.0, "{last_t} {last_done}");
        let first_byte = rs.iter().filter_map(|r| r.first_byte_s).fold(f64::INFINITY, f64::min);
        let before: u64 = got.iter().filter(|r| r.0 + BUCKET_MS as f64 / 1000.0 <= first_byte).map(|r| r.1).sum();
        assert_eq!(before, 0, "bytes before the first byte at {first_byte}");
    }
}

/// A response sent in two halves a second apart: each half is counted in
/// the buckets where it arrived, nothing in between.
#[test]
fn a_split_response_is_counted_when_its_halves_arrive() {
    let dir = tempfile::tempdir().unwrap();
    let trace = write_trace(dir.path(), &[(0.0, "/split/400000/1000".into(), 400_000)]);
    let out = dir.path().join("run");
    run(config(start_server(), &trace, &out)).unwrap();
    let r = rows(&out).pop().unwrap();
    assert_eq!((r.outcome, r.bytes_received), (Outcome::Ok, 400_000), "{r:?}");
    let (first, done) = (r.first_byte_s.unwrap(), r.done_s.unwrap());
    assert!(done - first >= 0.99, "{r:?}");
    let got = received(&out);
    let width_s = BUCKET_MS as f64 / 1000.0;
    let sum_in = |lo: f64, hi: f64| got.iter().filter(|b| b.0 >= lo && b.0 < hi).map(|b| b.1).sum::<u64>();
    // The first half within 0.4 s of the first byte, the second within 0.4 s
    // before done (slack for a busy machine); none in the second between.
    let first_bucket = (first / width_s).floor() * width_s;
    let done_bucket = (done / width_s).floor() * width_s;
    assert_eq!(sum_in(first_bucket - 1e-9, first + 0.4), 200_000, "{got:?}");
    assert_eq!(sum_in(done - 0.4, done_bucket + 1e-9), 200_000, "{got:?}");
    assert_eq!(sum_in(first + 0.4, done - 0.4), 0, "{got:?}");
    // The last bytes are in the bucket of `done_s` (read just before it).
    assert!(got.iter().rev().find(|b| b.1 > 0).unwrap().0 <= done_bucket + 1e-9);
}
