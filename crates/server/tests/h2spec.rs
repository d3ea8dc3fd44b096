//! HTTP/2 conformance: h2spec (RFC 7540 and RFC 7541 cases) against a real server, in
//! cleartext with prior knowledge (h2c) and over TLS (ALPN `h2`).
//!
//! `make h2spec` installs the pinned h2spec into `.make/bin`, and `make test-rust` passes
//! its path as `H2SPEC`; otherwise `h2spec` is looked up on `PATH`. Without it the test
//! says so and passes. A case that fails by design would be listed in `EXCEPTIONS` with
//! its reason in docs/serve.md (HTTP/2); every other failure fails the test.

mod common;

use std::path::{Path, PathBuf};

use common::{certs, TestServer};
use shortfirst_server::TlsSettings;

/// h2spec cases (section, then title) that may fail whatever the transport, each explained
/// in docs/serve.md (HTTP/2, conformance). None.
const EXCEPTIONS: &[&str] = &[];

/// Cases that may fail in cleartext only, explained in docs/serve.md: a cleartext listener
/// serves HTTP/1.1 too, so a line that is not the HTTP/2 preface is an HTTP/1.1 request.
const H2C_EXCEPTIONS: &[&str] = &["http2/3.5 Sends invalid connection preface"];

/// h2spec 2.2.1 has 145 cases in its default (non-strict) run; fewer means it did not run them.
const MIN_CASES: usize = 140;

fn h2spec() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("H2SPEC") {
        return Some(PathBuf::from(path));
    }
    let paths = std::env::var_os("PATH")?;
    std::env::split_paths(&paths).map(|dir| dir.join("h2spec")).find(|p| p.is_file())
}

/// (case id, failed) for every `<testcase>` of h2spec's JUnit report.
fn cases(junit: &str) -> Vec<(String, bool)> {
    junit
        .split("<testcase ")
        .skip(1)
        .map(|case| {
            let body = case.split("</testcase>").next().unwrap_or(case);
            let id = attribute(body, "package").unwrap_or_default();
            let number = attribute(body, "classname").unwrap_or_default();
            (format!("{id} {number}"), body.contains("<failure") || body.contains("<error"))
        })
        .collect()
}

fn attribute(element: &str, name: &str) -> Option<String> {
    let start = element.find(&format!("{name}=\""))? + name.len() + 2;
    let len = element[start..].find('"')?;
    Some(element[start..start + len].to_string())
}

async fn run_h2spec(bin: &Path, port: u16, tls: bool, report: &Path) -> (Vec<(String, bool)>, String) {
    let mut cmd = tokio::process::Command::new(bin);
    cmd.args(["--host", "127.0.0.1", "--port", &port.to_string(), "--timeout", "5", "--junit-report"]);
    cmd.arg(report);
    if tls {
        cmd.args(["--tls", "--insecure"]);
    }
    let out = cmd.output().await.unwrap_or_else(|e| panic!("{}: {e}", bin.display()));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let junit = std::fs::read_to_string(report).unwrap_or_else(|e| panic!("{}: {e}\n{stdout}", report.display()));
    (cases(&junit), stdout)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h2spec_passes_in_cleartext_and_over_tls() {
    let Some(bin) = h2spec() else {
        eprintln!("skipped: h2spec not found (set H2SPEC or run `make h2spec`; make test does)");
        return;
    };
    // Under the kernel's bands and under the user-space pacer (a fast link: the cases
    // wait for frames, not for the link), where a stream's frames follow the pacer's grants.
    let mut unexpected = unexpected_failures(&bin, false).await;
    unexpected.extend(unexpected_failures(&bin, true).await);
    assert!(unexpected.is_empty(), "h2spec cases failed:\n{}", unexpected.join("\n"));
}

/// The failed cases, beyond the exceptions, in cleartext and over TLS.
async fn unexpected_failures(bin: &Path, user_pacer: bool) -> Vec<String> {
    let certs = tempfile::tempdir().unwrap();
    let (entry, _) = certs::localhost(certs.path());
    let mut s = TestServer::start(move |c| {
        c.tls = Some(TlsSettings { listen: "127.0.0.1:0".parse().unwrap(), certs: vec![entry] });
        if user_pacer {
            c.scheduler = shortfirst_server::Scheduling::User;
            c.link_rate_bits_per_s = Some(1_000_000_000);
            c.socket_priority = false;
        }
    })
    .await;
    let tls_port = s.tls.expect("an HTTPS listener").port();
    let mut unexpected = Vec::new();
    for (port, tls) in [(s.addr.port(), false), (tls_port, true)] {
        let report = certs.path().join(format!("h2spec-tls-{tls}.xml"));
        let (cases, stdout) = run_h2spec(bin, port, tls, &report).await;
        assert!(cases.len() >= MIN_CASES, "tls={tls}: h2spec ran {} cases\n{stdout}", cases.len());
        let exceptions: &[&str] = if tls { &[] } else { H2C_EXCEPTIONS };
        unexpected.extend(
            cases
                .into_iter()
                .filter(|(id, failed)| *failed && !exceptions.iter().chain(EXCEPTIONS).any(|e| id == e))
                .map(|(id, _)| format!("user pacer={user_pacer} tls={tls}: {id}")),
        );
    }
    s.stop().await;
    unexpected
}
