//! `shortfirst serve` as users run it: the binary, its flags and config file,
//! its start-up errors, SIGHUP (the config applied again) and SIGTERM.

// The wall clock: the program under test is another process, on real time.
#![allow(clippy::disallowed_types)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn shortfirst() -> Command {
    Command::new(env!("CARGO_BIN_EXE_shortfirst"))
}

#[test]
fn config_errors_name_the_culprit() {
    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path().join("serve.toml");
    std::fs::write(&conf, format!("root = {:?}\nmax-conections = 5\n", dir.path())).unwrap();
    let out = shortfirst().args(["serve", "--config"]).arg(&conf).output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("max-conections") && err.contains("serve.toml"), "{err}");

    let out = shortfirst().args(["serve", "--root", "/nonexistent/dir"]).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/dir"));

    let out = shortfirst().args(["serve", "--root", "/", "--policy", "fair", "--cutoffs", "1K"]).output().unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("cutoffs"), "{out:?}");
    let out = shortfirst().args(["serve"]).output().unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("--root"), "{out:?}");
    let out = shortfirst().args(["serve", "--root", "/", "--at-max-connections", "block"]).output().unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("refuse or wait"), "{out:?}");
    let out = shortfirst().args(["serve", "--root", "/", "--dotfiles", "hide"]).output().unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("ignore, deny or allow"), "{out:?}");
    std::fs::write(&conf, format!("root = {:?}\ndotfiles = \"show\"\n", dir.path())).unwrap();
    let out = shortfirst().args(["serve", "--config"]).arg(&conf).output().unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("dotfiles"), "{out:?}");
}

#[test]
fn serves_from_a_config_file_and_stops_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("index.html"), "hi\n").unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let conf = dir.path().join("serve.toml");
    // Flags override the file: the file's port is wrong on purpose.
    std::fs::write(
        &conf,
        format!(
            "root = {:?}\nlisten = \"127.0.0.1:1\"\naccess-log = \"-\"\naccess-log-format = \"json\"\n\
             max-connections = 8\nat-max-connections = \"wait\"\nbacklog = 16\n",
            dir.path()
        ),
    )
    .unwrap();
    let unprivileged = not_root();
    let mut cmd = shortfirst();
    cmd.args(["serve", "--config"]).arg(&conf).args(["--listen", &format!("127.0.0.1:{port}")]);
    if unprivileged {
        cmd.arg("--socket-priority=false");
    }
    let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut stream = loop {
        match TcpStream::connect(("127.0.0.1", port)) {
            Ok(s) => break s,
            Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(50)),
            Err(e) => {
                let _ = child.kill();
                panic!("server never listened: {e}");
            }
        }
    };
    stream.write_all(b"GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n").unwrap();
    let mut resp = String::new();
    stream.read_to_string(&mut resp).unwrap();
    assert!(resp.starts_with("HTTP/1.1 200 OK\r\n") && resp.ends_with("\r\n\r\nhi\n"), "{resp}");

    let t0 = Instant::now();
    let status = Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap();
    assert!(status.success());
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{out:?}");
    assert!(t0.elapsed() < Duration::from_secs(5));
    let log = String::from_utf8(out.stdout).unwrap();
    let line: serde_json::Value = serde_json::from_str(log.lines().next().expect("an access log line")).unwrap();
    assert_eq!(line["status"], 200);
    assert_eq!(line["band"], 1);
    assert_eq!(line["request"], "GET / HTTP/1.1");
}

fn not_root() -> bool {
    // `id -u` keeps this test free of unsafe code and extra dependencies.
    let out = Command::new("id").arg("-u").output().unwrap();
    String::from_utf8_lossy(&out.stdout).trim() != "0"
}

#[test]
fn refuses_to_start_without_the_capability_for_priorities() {
    // As root, drop CAP_NET_ADMIN and CAP_NET_RAW from the bounding set for the child.
    let setpriv = std::path::Path::new("/usr/bin/setpriv");
    if not_root() || !setpriv.exists() {
        eprintln!("skipping: needs root and setpriv(1) to run the server without CAP_NET_ADMIN");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(setpriv)
        .args(["--bounding-set", "-net_admin,-net_raw", env!("CARGO_BIN_EXE_shortfirst"), "serve", "--root"])
        .arg(dir.path())
        .args(["--listen", "127.0.0.1:0"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("SO_PRIORITY") && err.contains("CAP_NET_ADMIN"), "{err}");
    assert_eq!(err.matches("Operation not permitted").count(), 1, "cause said once: {err}");
    // The same, asked not to schedule: it starts (and is stopped by the timeout below).
    let mut child = Command::new(setpriv)
        .args(["--bounding-set", "-net_admin,-net_raw", env!("CARGO_BIN_EXE_shortfirst"), "serve", "--root"])
        .arg(dir.path())
        .args(["--listen", "127.0.0.1:0", "--socket-priority=false"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    assert!(child.try_wait().unwrap().is_none(), "should be serving");
    child.kill().unwrap();
    child.wait().unwrap();
}

/// A free loopback port (bound, then released for the server to take).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// The whole response to `GET path` on `port`, or why there was none.
fn http_get(port: u16, path: &str) -> std::io::Result<String> {
    let mut stream = TcpStream::connect(("127.0.0.1", port))?;
    stream.write_all(format!("GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n").as_bytes())?;
    let mut resp = String::new();
    stream.read_to_string(&mut resp)?;
    Ok(resp)
}

/// Polls `GET path` until its response satisfies `done` (10 s at most).
fn wait_for(port: u16, path: &str, done: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let resp = http_get(port, path).unwrap_or_default();
        if done(&resp) {
            return resp;
        }
        assert!(Instant::now() < deadline, "GET {path}: never as expected; last: {resp}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn send_signal(child: &std::process::Child, signal: &str) {
    let status = Command::new("kill").args([signal, &child.id().to_string()]).status().unwrap();
    assert!(status.success());
}

#[test]
fn sighup_applies_a_changed_config_file_and_refuses_a_bad_one() {
    let dir = tempfile::tempdir().unwrap();
    for v in ["v1", "v2"] {
        std::fs::create_dir(dir.path().join(v)).unwrap();
        std::fs::write(dir.path().join(v).join("who.txt"), v).unwrap();
    }
    let (port, admin) = (free_port(), free_port());
    let conf = dir.path().join("serve.toml");
    let root = |v: &str| format!("root = {:?}\n", dir.path().join(v));
    std::fs::write(&conf, root("v1")).unwrap();
    let mut cmd = shortfirst();
    cmd.args(["serve", "--config"]).arg(&conf);
    cmd.args(["--listen", &format!("127.0.0.1:{port}"), "--admin", &format!("127.0.0.1:{admin}")]);
    if not_root() {
        cmd.arg("--socket-priority=false");
    }
    let child = cmd.env("NO_COLOR", "1").stderr(Stdio::piped()).spawn().unwrap();
    wait_for(port, "/who.txt", |r| r.ends_with("\r\n\r\nv1"));

    // A changed root applies; a restart-only key is named, not applied.
    std::fs::write(&conf, format!("{}threads = 3\n", root("v2"))).unwrap();
    send_signal(&child, "-HUP");
    wait_for(port, "/who.txt", |r| r.ends_with("\r\n\r\nv2"));
    // A bad file is refused: counted, and the running configuration serves on.
    std::fs::write(&conf, format!("{}max-conections = 3\n", root("v1"))).unwrap();
    send_signal(&child, "-HUP");
    wait_for(admin, "/metrics", |r| r.contains("\nshortfirst_config_reload_failures_total 1\n"));
    assert!(http_get(port, "/who.txt").unwrap().ends_with("\r\n\r\nv2"));
    let metrics = http_get(admin, "/metrics").unwrap();
    assert!(metrics.contains("\nshortfirst_config_reloads_total 1\n"), "{metrics}");

    send_signal(&child, "-TERM");
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let log = String::from_utf8_lossy(&out.stderr);
    let line = |needle: &str| log.lines().find(|l| l.contains(needle)).unwrap_or_else(|| panic!("{needle}: {log}"));
    let warning = line("takes a restart");
    assert!(warning.contains("WARN") && warning.contains("threads"), "{warning}");
    let error = line("not reloaded");
    for needle in ["ERROR", "serve.toml", "max-conections"] {
        assert!(error.contains(needle), "{needle}: {error}");
    }
}
