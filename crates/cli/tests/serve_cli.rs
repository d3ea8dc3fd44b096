//! `shortfirst serve` as users run it: the binary, its flags and config file,
//! its start-up errors, and SIGTERM.

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
