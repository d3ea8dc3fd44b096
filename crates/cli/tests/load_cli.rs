//! `shortfirst workload` and `shortfirst load` as users run them, against the
//! real `shortfirst serve`: generate a workload, check its statistics, serve
//! its docroot, replay its trace, and check every row.

// The wall clock: the program under test is another process, on real time.
#![allow(clippy::disallowed_types)]

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn shortfirst() -> Command {
    Command::new(env!("CARGO_BIN_EXE_shortfirst"))
}

/// Kills the server when the test ends, however it ends.
struct Server(Child);
impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn not_root() -> bool {
    // SAFETY-free: read the effective uid from /proc.
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("Uid:")).map(|l| l.split_whitespace().nth(2) != Some("0")))
        .unwrap_or(true)
}

fn serve(root: &std::path::Path) -> (Server, u16) {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let mut cmd = shortfirst();
    cmd.args(["serve", "--root"]).arg(root).args(["--listen", &format!("127.0.0.1:{port}"), "--threads", "1"]);
    if not_root() {
        cmd.arg("--socket-priority=false");
    }
    let child = cmd.stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
    let server = Server(child);
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "shortfirst serve did not start");
        std::thread::sleep(Duration::from_millis(50));
    }
    (server, port)
}

#[test]
fn generate_stats_serve_and_replay() {
    let dir = tempfile::tempdir().unwrap();
    let wl = dir.path().join("wl");
    let out = shortfirst()
        .args(["workload", "generate", "--kind", "wc98like", "--files", "300", "--requests", "2000", "--seed", "5"])
        .arg("--out")
        .arg(&wl)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");

    let out = shortfirst().args(["workload", "stats", "--json"]).arg(wl.join("trace.csv")).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let stats: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(stats["requests"], 2000);
    assert!(stats["min_bytes"].as_u64().unwrap() >= 41);
    assert!(stats["median_bytes"].as_u64().unwrap() < 1024, "{stats}");

    let (_server, port) = serve(&wl.join("docroot"));
    // Durations with units and as plain seconds; the second run has no --quiet, and its
    // stderr is a pipe, so it must not get the terminal's carriage-return progress line.
    // The first run spells the rates as they are now, the second in the older spellings,
    // which still work and warn.
    for (name, rates, extra) in [
        (
            "one-per-request",
            ["--request-rate", "1000", "--link-rate", "100mbit"],
            vec!["--quiet", "--duration", "150", "--timeout", "30"],
        ),
        (
            "persistent",
            ["--rate", "1000", "--uplink", "100mbit"],
            vec!["--persistent", "10", "--duration", "150s", "--timeout", "1m30s"],
        ),
    ] {
        let run = dir.path().join(name);
        let out = shortfirst()
            .args(["load", "--target", &format!("http://127.0.0.1:{port}"), "--trace"])
            .arg(wl.join("trace.csv"))
            .arg("--out")
            .arg(&run)
            .args(rates)
            .args(["--seed", "9"])
            .args(&extra)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{name}: {stderr}");
        let warned = stderr.contains("`load --rate` is the older spelling of `--request-rate`")
            && stderr.contains("`load --uplink` is the older spelling of `--link-rate`");
        assert_eq!(warned, rates[0] == "--rate", "{name}: {stderr}");
        assert!(!out.stderr.contains(&b'\r'), "{name}: progress line written to a pipe");
        let trace = std::fs::read_to_string(wl.join("trace.csv")).unwrap();
        let sizes: Vec<u64> = trace.lines().skip(1).map(|l| l.split(',').nth(2).unwrap().parse().unwrap()).collect();
        let csv = std::fs::read_to_string(run.join("requests.csv")).unwrap();
        let mut lines = csv.lines();
        assert_eq!(
            lines.next().unwrap(),
            "id,client,path,size_bytes,bytes_received,status,outcome,attempts,scheduled_s,start_s,connected_s,first_byte_s,done_s"
        );
        let mut seen = vec![false; sizes.len()];
        for l in lines {
            let f: Vec<&str> = l.split(',').collect();
            let id: usize = f[0].parse().unwrap();
            assert!(!seen[id], "{name}: id {id} twice");
            seen[id] = true;
            assert_eq!(f[6], "ok", "{name}: {l}");
            assert_eq!(f[5], "200", "{name}: {l}");
            assert_eq!(f[3].parse::<u64>().unwrap(), sizes[id], "{name}: {l}");
            assert_eq!(f[4], f[3], "{name}: bytes received ≠ size: {l}");
        }
        assert!(seen.iter().all(|s| *s), "{name}: every trace row has a log row");
        let summary: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(run.join("summary.json")).unwrap()).unwrap();
        assert_eq!(summary["completed"], 2000);
        assert_eq!(summary["seed"], 9);
        assert!(summary["offered_load"].as_f64().unwrap() > 0.0);
        assert!(summary["command_line"].as_array().unwrap().iter().any(|a| a == rates[0]));
        assert!(run.join("response-times.hlog").exists());
        // Every body byte once in received.csv, in 100 ms buckets.
        let received = std::fs::read_to_string(run.join("received.csv")).unwrap();
        let mut lines = received.lines();
        assert_eq!(lines.next(), Some("t_s,bytes"));
        let bytes: u64 = lines.map(|l| l.split_once(',').unwrap().1.parse::<u64>().unwrap()).sum();
        assert_eq!(bytes, sizes.iter().sum::<u64>(), "{name}: received.csv");
    }
}

/// Runs `shortfirst load` against a dead port with `extra` flags; returns its stderr (it must fail).
fn load_fails(trace: &std::path::Path, out: &std::path::Path, extra: &[&str]) -> String {
    let res = shortfirst()
        .args(["load", "--target", "http://127.0.0.1:9", "--trace"])
        .arg(trace)
        .arg("--out")
        .arg(out)
        .args(extra)
        .output()
        .unwrap();
    assert!(!res.status.success(), "{res:?}");
    String::from_utf8_lossy(&res.stderr).into_owned()
}

#[test]
fn load_errors_name_the_input() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("bad.csv");
    std::fs::write(&trace, "time,path\n").unwrap();
    let out = dir.path().join("o");
    let err = load_fails(&trace, &out, &[]);
    assert!(err.contains("bad.csv: line 1") && err.contains("time_s,path,size_bytes"), "{err}");
    let err = load_fails(&trace, &out, &["--load", "0.5"]);
    assert!(err.contains("--link-rate"), "{err}");
    let err = load_fails(&trace, &out, &["--retries", "2"]);
    assert!(err.contains("--abort-after"), "{err}");
    let err = load_fails(&trace, &out, &["--duration", "ten"]);
    assert!(err.contains("\"ten\"") && err.contains("150s"), "{err}");
    let err = load_fails(&trace, &out, &["--timeout", "0s"]);
    assert!(err.contains("above 0"), "{err}");
    let err = load_fails(&trace, &out, &["--link-rate", "10mbps"]);
    assert!(err.contains("10mbit"), "{err}");

    let res =
        shortfirst().args(["workload", "generate", "--kind", "pareto", "--out"]).arg(dir.path()).output().unwrap();
    assert!(!res.status.success());
    assert!(String::from_utf8_lossy(&res.stderr).contains("pareto"), "{res:?}");
}

/// SIGINT stops a run early but cleanly: outputs written, summary says so.
#[test]
fn sigint_ends_the_run_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("t.csv");
    let mut text = String::from("time_s,path,size_bytes\n");
    for i in 0..1000 {
        text.push_str(&format!("{},/x,1\n", i as f64 * 0.02));
    }
    std::fs::write(&trace, text).unwrap();
    let out = dir.path().join("o");
    let child = shortfirst()
        .args(["load", "--target", "http://127.0.0.1:9", "--quiet", "--trace"])
        .arg(&trace)
        .arg("--out")
        .arg(&out)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1000));
    let started = Instant::now();
    let status = Command::new("kill").args(["-INT", &child.id().to_string()]).status().unwrap();
    assert!(status.success());
    let res = child.wait_with_output().unwrap();
    assert!(res.status.success(), "{}", String::from_utf8_lossy(&res.stderr));
    assert!(started.elapsed() < Duration::from_secs(5));
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    assert_eq!(summary["interrupted"], true);
    assert_eq!(summary["valid"], false);
    let n = summary["requests"].as_u64().unwrap();
    assert!((10..200).contains(&n), "{n} requests before the signal");
    let rows = std::fs::read_to_string(out.join("requests.csv")).unwrap().lines().count() as u64 - 1;
    assert_eq!(rows, n);
    // An interrupted run still says what it received (nothing: the target refuses).
    let received = std::fs::read_to_string(out.join("received.csv")).unwrap();
    assert!(received.starts_with("t_s,bytes\n0.000,0\n"), "{received}");
}

/// `--load-schedule` against the real server: the rate at which requests are
/// actually started follows the schedule within 5% in every phase. Three
/// phases of 2 s at 0.5, 2 and 1 × a base of 100 requests/s (50, 200 and 100
/// requests/s, 100 + 400 + 200 requests): rates a loaded 2-core machine keeps
/// up with, on an evenly spaced trace, so the count per phase is exact up to
/// the generator's lateness at the phase edges.
#[test]
fn load_schedule_rate_follows_the_phases() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    std::fs::create_dir(&root).unwrap();
    std::fs::write(root.join("x.bin"), vec![b'x'; 1000]).unwrap();
    let trace = dir.path().join("t.csv");
    let mut text = String::from("time_s,path,size_bytes\n");
    for i in 0..1000 {
        text.push_str(&format!("{:.2},/x.bin,1000\n", i as f64 * 0.01));
    }
    std::fs::write(&trace, text).unwrap();
    let (_server, port) = serve(&root);
    let run = dir.path().join("run");
    let out = shortfirst()
        .args(["load", "--target", &format!("http://127.0.0.1:{port}"), "--trace"])
        .arg(&trace)
        .arg("--out")
        .arg(&run)
        .args(["--request-rate", "100", "--load-schedule", "2s@0.5,2s@2,2s@1", "--duration", "6s", "--quiet"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("load schedule 2s@0.5,2s@2,2s@1: scheduled per phase 0.5× 50.0/s"), "{stderr}");

    let csv = std::fs::read_to_string(run.join("requests.csv")).unwrap();
    let mut lines = csv.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    assert_eq!(header[13..], ["phase", "load_multiplier"], "phase columns at the end");
    let col = |name: &str| header.iter().position(|h| *h == name).unwrap();
    let (sched, start, outcome, phase, mult) =
        (col("scheduled_s"), col("start_s"), col("outcome"), col("phase"), col("load_multiplier"));
    let want = [(0.5, 100.0), (2.0, 400.0), (1.0, 200.0)];
    let (mut by_sched, mut by_start) = ([0u32; 3], [0u32; 3]);
    let mut rows = 0;
    for l in lines {
        let f: Vec<&str> = l.split(',').collect();
        assert_eq!(f[outcome], "ok", "{l}");
        let s: f64 = f[sched].parse().unwrap();
        let k: usize = f[phase].parse().unwrap();
        // The phase of the scheduled time (the log rounds it to the µs: either side of an edge).
        let near_edge = (s - (s / 2.0).round() * 2.0).abs() < 1e-5;
        assert!(k == ((s / 2.0).floor() as usize).min(2) || near_edge, "{l}");
        assert_eq!(f[mult].parse::<f64>().unwrap(), want[k].0, "{l}");
        by_sched[k] += 1;
        let t: f64 = f[start].parse().unwrap();
        if t < 6.0 {
            by_start[(t / 2.0).floor() as usize] += 1;
        }
        rows += 1;
    }
    assert!((699..=701).contains(&rows), "{rows} rows: 6 s of the schedule is 700 requests");
    for k in 0..3 {
        let expect = want[k].1;
        // Scheduled times come from the warp alone: exact up to rounding at the edges.
        assert!((f64::from(by_sched[k]) - expect).abs() <= 1.0, "phase {k}: {} scheduled", by_sched[k]);
        let err = (f64::from(by_start[k]) - expect) / expect;
        eprintln!("phase {k} ({}×): {} started, {:+.2}% off the schedule", want[k].0, by_start[k], err * 100.0);
        assert!(err.abs() <= 0.05, "phase {k}: {} requests started in 2 s, want {expect} ± 5%", by_start[k]);
    }
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(run.join("summary.json")).unwrap()).unwrap();
    let ls = &summary["load_schedule"];
    assert_eq!(ls["spec"], "2s@0.5,2s@2,2s@1");
    assert_eq!(ls["period_s"], 6.0);
    let phases = ls["phases"].as_array().unwrap();
    for (k, p) in phases.iter().enumerate() {
        assert_eq!(p["multiplier"], want[k].0);
        assert_eq!(p["requests"], by_sched[k]);
        let rate = p["scheduled_req_per_s"].as_f64().unwrap();
        assert!((rate - want[k].1 / 2.0).abs() <= 1.0, "phase {k}: {rate}/s scheduled");
    }
}

#[test]
fn load_schedule_errors_name_the_flag_and_the_fault() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("t.csv");
    std::fs::write(&trace, "time_s,path,size_bytes\n0,/x,1\n1,/x,1\n").unwrap();
    let file = dir.path().join("sched.txt");
    std::fs::write(&file, "# low, high\n25s 0.2\n25s high\n").unwrap();
    let out = dir.path().join("o");
    let file_spec = format!("file:{}", file.display());
    for (spec, want) in [
        ("5s@0", "phase 1 `5s@0`: multiplier must be a positive finite number"),
        ("0s@1", "duration must be above 0"),
        ("", "empty"),
        ("w12", "not a preset"),
        (file_spec.as_str(), "sched.txt: line 3: multiplier `high`"),
    ] {
        let err = load_fails(&trace, &out, &["--load-schedule", spec]);
        assert!(err.contains("--load-schedule") && err.contains(want), "{spec}: {err}");
    }
    let err = load_fails(&trace, &out, &["--load-schedule", "w1", "--model", "closed:2"]);
    assert!(err.contains("--load-schedule") && err.contains("closed"), "{err}");
    assert!(!out.join("requests.csv").exists());
}
