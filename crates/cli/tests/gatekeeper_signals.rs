//! `shortfirst gatekeeper` as a process, stopped and reloaded by signals: SIGTERM during
//! load lets the admitted request finish, answers the queued ones 503 with `Retry-After`
//! and exits within the bound; SIGHUP applies a changed classification rule without
//! dropping an open connection; `--cpu-slice-us` gives every thread its scheduler slice. The
//! backend is a small threaded HTTP server in the test.

// The wall clock: the program under test is another process, on real time.
#![allow(clippy::disallowed_types)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// `GET /sleep/N`: answers `ok` after N ms; keeps connections alive.
fn backend() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for s in l.incoming().flatten() {
            std::thread::spawn(move || {
                let mut r = BufReader::new(s.try_clone().unwrap());
                let mut s = s;
                loop {
                    let mut line = String::new();
                    if r.read_line(&mut line).unwrap_or(0) == 0 {
                        return;
                    }
                    let ms: u64 = line
                        .split_whitespace()
                        .nth(1)
                        .and_then(|p| p.strip_prefix("/sleep/"))
                        .and_then(|n| n.parse().ok())
                        .unwrap_or(0);
                    loop {
                        let mut h = String::new();
                        if r.read_line(&mut h).unwrap_or(0) == 0 || h == "\r\n" {
                            break;
                        }
                    }
                    std::thread::sleep(Duration::from_millis(ms));
                    if s.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok").is_err() {
                        return;
                    }
                }
            });
        }
    });
    port
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

struct Gatekeeper(Child);

impl Drop for Gatekeeper {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start(args: &[&str], port: u16) -> Gatekeeper {
    let child = Command::new(env!("CARGO_BIN_EXE_shortfirst"))
        .arg("gatekeeper")
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(t0.elapsed() < Duration::from_secs(30), "gatekeeper did not listen");
        std::thread::sleep(Duration::from_millis(20));
    }
    Gatekeeper(child)
}

fn signal(g: &Gatekeeper, sig: &str) {
    let ok = Command::new("kill").args([sig, &g.0.id().to_string()]).status().unwrap().success();
    assert!(ok, "kill {sig}");
}

/// One request on `s`; returns the response head and body (read by its content-length).
fn exchange(s: &mut TcpStream, path: &str, close: bool) -> (String, String) {
    let conn = if close { "Connection: close\r\n" } else { "" };
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: t\r\n{conn}\r\n").as_bytes()).unwrap();
    let mut r = BufReader::new(s.try_clone().unwrap());
    let mut head = String::new();
    loop {
        let mut l = String::new();
        if r.read_line(&mut l).unwrap() == 0 || l == "\r\n" {
            break;
        }
        head.push_str(&l);
    }
    let len: usize = head
        .lines()
        .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().to_string()))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let mut body = vec![0; len];
    r.read_exact(&mut body).unwrap();
    (head, String::from_utf8_lossy(&body).into_owned())
}

fn metrics(admin: u16) -> String {
    let mut s = TcpStream::connect(("127.0.0.1", admin)).unwrap();
    exchange(&mut s, "/metrics", true).1
}

fn wait_metric(admin: u16, line: &str) {
    let t0 = Instant::now();
    while !metrics(admin).contains(line) {
        assert!(t0.elapsed() < Duration::from_secs(30), "metrics never showed {line:?}: {}", metrics(admin));
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn sigterm_finishes_admitted_requests_and_refuses_queued_ones() {
    let up = backend();
    let (port, admin) = (free_port(), free_port());
    let (listen, upstream, admin_addr) =
        (format!("127.0.0.1:{port}"), format!("http://127.0.0.1:{up}"), format!("127.0.0.1:{admin}"));
    let mut g = start(
        &[
            "--listen",
            &listen,
            "--upstream",
            &upstream,
            "--admin",
            &admin_addr,
            "--capacity",
            "1us",
            "--policy",
            "fifo",
            "--shutdown-timeout",
            "20s",
        ],
        port,
    );
    let admitted = std::thread::spawn(move || {
        let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        exchange(&mut s, "/sleep/1500", true)
    });
    wait_metric(admin, "gatekeeper_in_flight 1\n");
    let queued: Vec<_> = (0..2)
        .map(|_| {
            std::thread::spawn(move || {
                let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
                exchange(&mut s, "/sleep/10", true)
            })
        })
        .collect();
    wait_metric(admin, "gatekeeper_queue_length 2\n");
    let t0 = Instant::now();
    signal(&g, "-TERM");
    for q in queued {
        let (head, _) = q.join().unwrap();
        assert!(head.starts_with("HTTP/1.1 503"), "{head}");
        assert!(head.to_ascii_lowercase().contains("retry-after: 1"), "{head}");
    }
    let (head, body) = admitted.join().unwrap();
    assert!(head.starts_with("HTTP/1.1 200"), "the admitted request finishes: {head}");
    assert_eq!(body, "ok");
    loop {
        if let Some(status) = g.0.try_wait().unwrap() {
            assert!(status.success(), "{status}");
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(20), "did not exit within the bound");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(TcpStream::connect(("127.0.0.1", port)).is_err(), "no longer accepting");
}

fn write_config(path: &Path, listen: &str, upstream: &str, admin: &str, rule: &str) {
    let text = format!(
        "listen = \"{listen}\"\nupstream = \"{upstream}\"\nadmin = \"{admin}\"\ncapacity = \"100ms\"\nclassify = [\"{rule}\"]\n"
    );
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

#[test]
fn sighup_applies_a_changed_rule_without_dropping_connections() {
    let up = backend();
    let (port, admin) = (free_port(), free_port());
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("gatekeeper.toml");
    let (listen, upstream, admin_addr) =
        (format!("127.0.0.1:{port}"), format!("http://127.0.0.1:{up}"), format!("127.0.0.1:{admin}"));
    write_config(&cfg, &listen, &upstream, &admin_addr, "alpha=^GET /sleep");
    let g = start(&["--config", cfg.to_str().unwrap()], port);
    let mut kept = TcpStream::connect(("127.0.0.1", port)).unwrap();
    assert!(exchange(&mut kept, "/sleep/1", false).0.starts_with("HTTP/1.1 200"));
    assert!(metrics(admin).contains("gatekeeper_type_requests_total{type=\"alpha\",outcome=\"ok\"} 1\n"));
    write_config(&cfg, &listen, &upstream, &admin_addr, "beta=^GET /sleep");
    signal(&g, "-HUP");
    // The same connection carries on; once the reload is applied its requests are beta.
    let t0 = Instant::now();
    loop {
        assert!(exchange(&mut kept, "/sleep/1", false).0.starts_with("HTTP/1.1 200"), "connection kept");
        if metrics(admin).contains("gatekeeper_type_requests_total{type=\"beta\",outcome=\"ok\"} 1\n") {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(30), "reload never applied: {}", metrics(admin));
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(metrics(admin).contains("gatekeeper_type_requests_total{type=\"alpha\",outcome=\"ok\"} "));
}

/// A postgres:// upstream runs the PostgreSQL gatekeeper with the same lifecycle: the
/// admin port, SIGHUP applying a changed capacity from the file, SIGTERM exiting cleanly.
/// (The upstream is not contacted until a client connects; the protocol itself is tested
/// against a real server in the gatekeeper crate.)
#[test]
fn a_postgres_upstream_runs_the_postgres_gatekeeper_with_the_same_signals() {
    let dir = tempfile::tempdir().unwrap();
    let (port, admin) = (free_port(), free_port());
    let file = dir.path().join("gk.toml");
    let write = |capacity: &str| {
        let text = format!(
            "listen = \"127.0.0.1:{port}\"\nupstream = \"postgres://127.0.0.1:9\"\nadmin = \"127.0.0.1:{admin}\"\ncapacity = \"{capacity}\"\npg-tag-key = \"route\"\n"
        );
        std::fs::write(&file, text).unwrap();
    };
    write("2s");
    let g = start(&["--config", file.to_str().unwrap()], port);
    wait_metric(admin, "gatekeeper_capacity_seconds 2\n");
    write("3s");
    signal(&g, "-HUP");
    wait_metric(admin, "gatekeeper_capacity_seconds 3\n");
    signal(&g, "-TERM");
    let mut g = g;
    let t0 = Instant::now();
    let status = loop {
        if let Some(s) = g.0.try_wait().unwrap() {
            break s;
        }
        assert!(t0.elapsed() < Duration::from_secs(10), "did not exit on SIGTERM");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "{status}");
}

/// `--cpu-slice-us`: every thread of the running gatekeeper has that slice in the kernel's
/// fair scheduler (`se.slice` in `/proc/PID/task/TID/sched`); a kernel without custom slices
/// (before 6.12) leaves its own, and the gatekeeper runs anyway.
#[test]
fn every_thread_runs_with_the_slice_given() {
    let (up, port) = (backend(), free_port());
    let listen = format!("127.0.0.1:{port}");
    let upstream = format!("http://127.0.0.1:{up}");
    let g = start(&["--listen", &listen, "--upstream", &upstream, "--threads", "2", "--cpu-slice-us", "300"], port);
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    assert_eq!(exchange(&mut s, "/sleep/0", true).1, "ok", "the gatekeeper serves");
    let slices: Vec<String> = std::fs::read_dir(format!("/proc/{}/task", g.0.id()))
        .unwrap()
        .map(|t| {
            let sched = std::fs::read_to_string(t.unwrap().path().join("sched")).unwrap_or_default();
            let line = sched.lines().find(|l| l.starts_with("se.slice")).unwrap_or("se.slice : none").to_string();
            line.rsplit(':').next().unwrap().trim().to_string()
        })
        .collect();
    if slices.iter().any(|s| s == "none") {
        eprintln!("skipped: this kernel does not show a task's slice in /proc/PID/task/TID/sched");
        return;
    }
    let custom = std::fs::read_to_string("/proc/sys/kernel/osrelease").is_ok_and(|r| {
        let mut v = r.trim().split(['.', '-']).map(|p| p.parse::<u32>().unwrap_or(0));
        (v.next().unwrap_or(0), v.next().unwrap_or(0)) >= (6, 12)
    });
    if !custom {
        eprintln!("skipped: custom slices need Linux 6.12 or later");
        return;
    }
    assert!(slices.len() >= 3, "main thread and two workers: {slices:?}");
    assert!(slices.iter().all(|s| s == "300000"), "{slices:?}");
}

#[test]
fn a_slice_outside_the_kernels_bounds_is_refused_at_start() {
    let out = Command::new(env!("CARGO_BIN_EXE_shortfirst"))
        .args(["gatekeeper", "--listen", "127.0.0.1:0", "--upstream", "http://127.0.0.1:1", "--cpu-slice-us", "50"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && stderr.contains("--cpu-slice-us 50: outside"), "{stderr}");
}
