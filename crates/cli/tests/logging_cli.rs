//! Logs as a service manager keeps them: the binary's stderr is a pipe here, as under
//! systemd or a log shipper. Text lines carry no colour codes there; `--log-format json`
//! makes every stderr line one JSON object (start-up, shutdown, warnings, the fatal error,
//! the gatekeeper's access log).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use serde_json::Value;

/// How long any one expected log line may take to appear.
const LINE_TIMEOUT: Duration = Duration::from_secs(20);

/// The binary with the environment a service manager gives it: no RUST_LOG, no NO_COLOR,
/// a terminal type that would allow colour.
fn shortfirst() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_shortfirst"));
    cmd.env_remove("RUST_LOG").env_remove("NO_COLOR").env("TERM", "xterm-256color");
    cmd
}

/// A running process whose stderr lines arrive on a channel; killed when dropped.
struct Running {
    child: Child,
    lines: mpsc::Receiver<String>,
    seen: Vec<String>,
}

impl Running {
    fn spawn(cmd: &mut Command) -> Running {
        let mut child = cmd.stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
        let stderr = BufReader::new(child.stderr.take().unwrap());
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in stderr.lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        Running { child, lines, seen: Vec::new() }
    }

    /// Reads stderr until a line satisfies `want`; returns that line.
    fn wait_for(&mut self, what: &str, want: impl Fn(&str) -> bool) -> String {
        loop {
            match self.lines.recv_timeout(LINE_TIMEOUT) {
                Ok(line) => {
                    self.seen.push(line.clone());
                    if want(&line) {
                        return line;
                    }
                }
                Err(e) => panic!("no {what} on stderr ({e}); got {:#?}", self.seen),
            }
        }
    }

    /// SIGTERM, then every stderr line of the whole run once it has exited successfully.
    fn stop(mut self) -> Vec<String> {
        let pid = self.child.id().to_string();
        assert!(Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
        let status = self.child.wait().unwrap();
        self.seen.extend(self.lines.iter());
        assert!(status.success(), "{status}: {:#?}", self.seen);
        std::mem::take(&mut self.seen)
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn not_root() -> bool {
    let out = Command::new("id").arg("-u").output().unwrap();
    String::from_utf8_lossy(&out.stdout).trim() != "0"
}

/// `serve` on a temporary root and a free port, with `global` before the subcommand.
fn serve(root: &std::path::Path, global: &[&str]) -> Running {
    let mut cmd = shortfirst();
    cmd.args(global).arg("serve").arg("--root").arg(root).args(["--listen", "127.0.0.1:0"]);
    if not_root() {
        cmd.arg("--socket-priority=false");
    }
    Running::spawn(&mut cmd)
}

fn json(line: &str) -> Value {
    let v: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line:?}"));
    assert!(v["level"].is_string() && v["message"].is_string(), "no level or message: {line}");
    v
}

fn get(addr: SocketAddr, path: &str) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n").unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).unwrap();
    resp
}

#[test]
fn text_logs_to_a_pipe_have_no_colour_codes() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = serve(dir.path(), &[]);
    let serving = server.wait_for("`serving` line", |l| l.contains("serving"));
    assert!(serving.contains("INFO") && serving.contains("listen=127.0.0.1:"), "{serving}");
    let lines = server.stop();
    assert!(lines.iter().any(|l| l.contains("shutting down")), "{lines:#?}");
    for line in &lines {
        assert!(!line.contains('\u{1b}'), "an escape code in a log line to a pipe: {line:?}");
    }

    // A warning (an older flag spelling) and the fatal error, in text: plain too.
    let out = shortfirst()
        .args(["serve", "--uplink-rate", "1mbit", "--scheduler", "user", "--root", "/nonexistent/dir"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("WARN") && err.contains("older spelling"), "{err}");
    assert!(err.contains("shortfirst: error: ") && err.contains("/nonexistent/dir"), "{err}");
    assert!(!err.contains('\u{1b}'), "{err:?}");
}

#[test]
fn json_logs_are_one_object_a_line_from_start_to_shutdown() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("index.html"), "hi\n").unwrap();
    let mut server = serve(dir.path(), &["--log-format", "json"]);
    let first = json(&server.wait_for("first line", |_| true));
    assert_eq!(first["message"], "serving", "{first}");
    assert_eq!(first["level"], "INFO");
    let addr: SocketAddr = first["listen"].as_str().unwrap().parse().unwrap();
    assert!(get(addr, "/").starts_with("HTTP/1.1 200 OK\r\n"));
    let lines = server.stop();
    let messages: Vec<String> = lines.iter().map(|l| json(l)["message"].as_str().unwrap().to_string()).collect();
    assert!(messages.contains(&"SIGTERM received".to_string()), "{messages:?}");
    assert!(messages.contains(&"shutting down".to_string()), "{messages:?}");
}

#[test]
fn json_warnings_and_the_fatal_error_are_objects_too() {
    // The flag after the subcommand, and RUST_LOG=off: the fatal error is said whatever
    // the filter hides, as JSON.
    let run = |rust_log: Option<&str>| {
        let mut cmd = shortfirst();
        cmd.args([
            "serve",
            "--log-format=json",
            "--uplink-rate",
            "1mbit",
            "--scheduler",
            "user",
            "--root",
            "/nonexistent/dir",
        ]);
        if let Some(f) = rust_log {
            cmd.env("RUST_LOG", f);
        }
        let out = cmd.output().unwrap();
        assert!(!out.status.success());
        String::from_utf8(out.stderr).unwrap().lines().map(json).collect::<Vec<_>>()
    };
    let lines = run(None);
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert_eq!(lines[0]["level"], "WARN");
    assert!(lines[0]["message"].as_str().unwrap().contains("`serve --uplink-rate` is the older spelling"));
    assert_eq!(lines[1]["level"], "ERROR");
    assert!(lines[1]["message"].as_str().unwrap().contains("/nonexistent/dir"), "{}", lines[1]);
    let lines = run(Some("off"));
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert_eq!(lines[0]["level"], "ERROR");
}

#[test]
fn a_rust_log_that_does_not_parse_is_reported() {
    let out = shortfirst()
        .args(["--log-format", "json", "serve", "--root", "/nonexistent/dir"])
        .env("RUST_LOG", "info,[")
        .output()
        .unwrap();
    let err = String::from_utf8(out.stderr).unwrap();
    let lines: Vec<Value> = err.lines().map(json).collect();
    assert!(lines[0]["message"].as_str().unwrap().starts_with("RUST_LOG ignored"), "{err}");
}

/// The gatekeeper in front of a port where nothing listens (every request: 502), in JSON;
/// `access-log` from its configuration file or not at all.
fn gatekeeper_access_lines(access_log_in_file: bool) -> (Vec<Value>, String) {
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path().join("gatekeeper.toml");
    let key = if access_log_in_file { "access-log = true\n" } else { "" };
    std::fs::write(&conf, format!("listen = \"127.0.0.1:0\"\nupstream = \"http://127.0.0.1:{dead}\"\n{key}")).unwrap();
    let mut gk = Running::spawn(shortfirst().args(["--log-format", "json", "gatekeeper", "--config"]).arg(&conf));
    let listening = json(&gk.wait_for("`listening` line", |l| l.contains("listening")));
    let addr: SocketAddr = listening["listen"].as_str().unwrap().parse().unwrap();
    let resp = get(addr, "/logged");
    // Every line is JSON, the access lines among them.
    let access = gk.stop().iter().map(|l| json(l)).filter(|l| l["target"] == "access").collect();
    (access, resp)
}

#[test]
fn the_gatekeeper_access_log_is_json_when_asked_for_and_off_by_default() {
    let (access, resp) = gatekeeper_access_lines(true);
    assert!(resp.starts_with("HTTP/1.1 502"), "{resp}");
    assert_eq!(access.len(), 1, "{access:?}");
    let message = access[0]["message"].as_str().unwrap();
    assert!(message.contains("\"GET /logged\" 502"), "{message}");
    let (access, _) = gatekeeper_access_lines(false);
    assert!(access.is_empty(), "{access:?}");
}
