//! The HTTPS listener as an outside auditor sees it: testssl.sh (Debian's `testssl`, which
//! `make test` installs) against a real server — protocols, cipher suites per protocol,
//! server defaults and the known vulnerabilities. Findings about the test certificate
//! itself (self-made CA, short validity, no revocation URL) are the test's, not the
//! server's, and are left out.

mod common;

use std::path::PathBuf;
use std::process::Command;

use common::{certs, TestServer};
use serde_json::Value;
use shortfirst_server::TlsSettings;

/// testssl.sh: `$TESTSSL`, else `testssl` or `testssl.sh` on PATH.
fn testssl() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("TESTSSL").filter(|p| !p.is_empty()) {
        return Some(PathBuf::from(p));
    }
    let paths = std::env::var_os("PATH")?;
    std::env::split_paths(&paths).flat_map(|dir| [dir.join("testssl"), dir.join("testssl.sh")]).find(|p| p.is_file())
}

/// Findings that describe the test's own certificate, not the server's configuration.
fn about_the_test_certificate(id: &str) -> bool {
    id.starts_with("cert_") || id.starts_with("DNS_CAA") || id == "engine_problem"
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn testssl_finds_nothing_wrong_with_the_tls_listener() {
    let Some(bin) = testssl() else {
        eprintln!("skipped: testssl not found (set TESTSSL or apt-get install testssl.sh; make test does)");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (entry, _) = certs::localhost(dir.path());
    let mut s = TestServer::start(move |c| {
        c.tls = Some(TlsSettings { listen: "127.0.0.1:0".parse().unwrap(), certs: vec![entry] });
    })
    .await;
    let tls = s.tls.expect("an HTTPS listener");
    let report = dir.path().join("testssl.json");
    let target = tls.to_string();
    let out = tokio::task::spawn_blocking({
        let report = report.clone();
        move || {
            Command::new(&bin)
                .args(["--quiet", "--color", "0", "--warnings", "off", "--protocols", "--server-defaults"])
                .args(["--vulnerable", "--cipher-per-proto", "--jsonfile"])
                .arg(&report)
                .arg(&target)
                .output()
                .unwrap_or_else(|e| panic!("{}: {e}", bin.display()))
        }
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let text = std::fs::read_to_string(&report).unwrap_or_else(|e| panic!("{}: {e}\n{stdout}", report.display()));
    let findings: Vec<Value> = serde_json::from_str(&text).expect("testssl's JSON report");
    let finding = |id: &str| {
        findings.iter().find(|f| f["id"] == id).and_then(|f| f["finding"].as_str()).unwrap_or("(missing)").to_string()
    };

    // Only TLS 1.2 and 1.3; no cipher without forward secrecy.
    for old in ["SSLv2", "SSLv3", "TLS1", "TLS1_1"] {
        assert!(finding(old).starts_with("not offered"), "{old}: {}\n{stdout}", finding(old));
    }
    for current in ["TLS1_2", "TLS1_3"] {
        assert!(finding(current).starts_with("offered"), "{current}: {}\n{stdout}", finding(current));
    }
    let problems: Vec<String> = findings
        .iter()
        .filter(|f| matches!(f["severity"].as_str(), Some("LOW" | "MEDIUM" | "HIGH" | "CRITICAL")))
        .filter(|f| !about_the_test_certificate(f["id"].as_str().unwrap_or("")))
        .map(|f| format!("{} {}: {}", f["severity"], f["id"], f["finding"]))
        .collect();
    assert!(problems.is_empty(), "testssl findings:\n{}\n{stdout}", problems.join("\n"));
    // The vulnerability checks did run (a finding for each of a few named ones).
    for id in ["heartbleed", "CCS", "ROBOT", "secure_renego", "BREACH", "SWEET32", "LUCKY13", "RC4"] {
        assert_ne!(finding(id), "(missing)", "testssl did not report {id}\n{stdout}");
    }
    s.stop().await;
}
