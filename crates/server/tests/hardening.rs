//! The defects an outside review found, each through real sockets: open
//! redirects, preconditions, timeouts of silent clients, validators, framing,
//! status codes, lenient targets, the admin port, dotfiles.

mod common;

use std::time::{Duration, SystemTime};

use common::{get, pattern, req, set_mtime, Raw, TestServer};
use shortfirst_server::Dotfiles;
use tokio::time::Instant;

/// One request on a fresh connection: status and the response.
async fn status_of(addr: std::net::SocketAddr, request: &str) -> (u16, common::Resp) {
    let r = get(addr, request).await.unwrap_or_else(|| panic!("no response to {request:?}"));
    (r.status, r)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trailing_slash_redirect_stays_on_this_host() {
    let mut s = TestServer::start(|_| {}).await;
    for dir in ["other.host/x/dir", "a b", "\\evil.example"] {
        std::fs::create_dir_all(s.root.join(dir)).unwrap();
    }
    let cases = [
        ("//other.host/x/dir", "/other.host/x/dir/"),
        ("///other.host/x/dir?q=1", "/other.host/x/dir/?q=1"),
        ("/./other.host/x/dir", "/other.host/x/dir/"),
        ("/sub/..//other.host/x/dir", "/other.host/x/dir/"),
        ("http://t//other.host/x/dir", "/other.host/x/dir/"),
        ("/a%20b", "/a%20b/"),
        ("/%5Cevil.example", "/%5Cevil.example/"),
        ("/sub", "/sub/"),
    ];
    for (target, want) in cases {
        let (status, r) = status_of(s.addr, &req(target)).await;
        assert_eq!(status, 301, "{target}");
        assert_eq!(r.header("location"), Some(want), "{target}");
    }
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn if_match_and_if_unmodified_since_give_412() {
    let mut s = TestServer::start(|_| {}).await;
    let r = get(s.addr, &req("/medium.bin")).await.unwrap();
    let etag = r.header("etag").unwrap().to_string();
    assert!(etag.starts_with('"'), "strong ETag for a file changed an hour ago: {etag}");
    let lm = r.header("last-modified").unwrap().to_string();
    let before = "Mon, 01 Jan 2001 00:00:00 GMT";
    let with = |extra: &str| format!("GET /medium.bin HTTP/1.1\r\nHost: t\r\n{extra}\r\n");
    let cases: Vec<(String, u16)> = vec![
        (with(&format!("If-Match: {etag}\r\n")), 200),
        (with(&format!("If-Match: \"x\", {etag}\r\n")), 200),
        (with("If-Match: *\r\n"), 200),
        (with("If-Match: \"stale\"\r\n"), 412),
        (with(&format!("If-Match: W/{etag}\r\n")), 412),
        // With Range: a resumed download must not join two versions.
        (with("If-Match: \"stale\"\r\nRange: bytes=0-9\r\n"), 412),
        (with(&format!("If-Match: {etag}\r\nRange: bytes=0-9\r\n")), 206),
        (with(&format!("If-Unmodified-Since: {lm}\r\n")), 200),
        (with(&format!("If-Unmodified-Since: {before}\r\n")), 412),
        (with(&format!("If-Unmodified-Since: {before}\r\nRange: bytes=0-9\r\n")), 412),
        (with("If-Unmodified-Since: garbage\r\n"), 200),
        // If-Match decides over If-Unmodified-Since, and 412 over 304 (RFC 9110 §13.2.2).
        (with(&format!("If-Match: {etag}\r\nIf-Unmodified-Since: {before}\r\n")), 200),
        (with(&format!("If-Match: \"stale\"\r\nIf-None-Match: {etag}\r\n")), 412),
    ];
    for (request, want) in &cases {
        let mut c = Raw::connect(s.addr).await;
        c.send(request.as_bytes()).await;
        let r = c.response(false).await.unwrap();
        assert_eq!(r.status, *want, "{request:?}");
        if *want == 412 {
            // Not a reason to close: the connection goes on.
            c.send(req("/small.txt").as_bytes()).await;
            assert_eq!(c.response(false).await.unwrap().status, 200);
        }
    }
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_connection_is_closed_at_the_header_timeout() {
    let mut s = TestServer::start(|c| {
        c.header_timeout = Duration::from_millis(300);
        c.idle_timeout = Duration::from_secs(30);
    })
    .await;
    let t0 = Instant::now();
    let mut c = Raw::connect(s.addr).await;
    assert!(c.closed_within(Duration::from_secs(3)).await, "a connection that never spoke was held");
    let took = t0.elapsed();
    assert!(took >= Duration::from_millis(250), "{took:?}");
    // Between requests the idle timeout still applies.
    let mut c = Raw::connect(s.addr).await;
    c.send(req("/").as_bytes()).await;
    c.response(false).await.unwrap();
    assert!(
        !c.closed_within(Duration::from_millis(800)).await,
        "a keep-alive connection was cut at the header timeout"
    );
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etag_changes_when_a_file_changes_within_a_second() {
    let mut s = TestServer::start(|_| {}).await;
    let path = s.root.join("v.txt");
    let second = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
    std::fs::write(&path, b"version one\n").unwrap();
    set_mtime(&path, second + Duration::from_millis(100));
    let first = get(s.addr, &req("/v.txt")).await.unwrap();
    let e1 = first.header("etag").unwrap().to_string();
    assert!(e1.starts_with('"'), "{e1}");
    // Rewritten in place in the same second, same size.
    std::fs::write(&path, b"version two\n").unwrap();
    set_mtime(&path, second + Duration::from_millis(600));
    let second_r = get(s.addr, &req("/v.txt")).await.unwrap();
    let e2 = second_r.header("etag").unwrap().to_string();
    assert_eq!(first.header("last-modified"), second_r.header("last-modified"), "same second");
    assert_ne!(e1, e2, "same-second rewrite kept the ETag");
    // The old tag neither revalidates nor resumes the new content.
    let inm = format!("GET /v.txt HTTP/1.1\r\nHost: t\r\nIf-None-Match: {e1}\r\n\r\n");
    assert_eq!(status_of(s.addr, &inm).await.0, 200);
    let resume = format!("GET /v.txt HTTP/1.1\r\nHost: t\r\nRange: bytes=8-\r\nIf-Range: {e1}\r\n\r\n");
    let (status, r) = status_of(s.addr, &resume).await;
    assert_eq!((status, r.body.as_slice()), (200, &b"version two\n"[..]));
    // Replaced by rename with the very same time and size: the inode tells.
    let tmp = s.root.join("v.tmp");
    std::fs::write(&tmp, b"version 3!!\n").unwrap();
    set_mtime(&tmp, second + Duration::from_millis(600));
    std::fs::rename(&tmp, &path).unwrap();
    let e3 = get(s.addr, &req("/v.txt")).await.unwrap().header("etag").unwrap().to_string();
    assert_ne!(e2, e3, "replacement by rename kept the ETag");
    // Changed just now: the tag is weak, so it cannot resume a download.
    std::fs::write(&path, b"fresh\n").unwrap();
    let fresh = get(s.addr, &req("/v.txt")).await.unwrap().header("etag").unwrap().to_string();
    assert!(fresh.starts_with("W/\""), "{fresh}");
    let resume = format!("GET /v.txt HTTP/1.1\r\nHost: t\r\nRange: bytes=0-0\r\nIf-Range: {fresh}\r\n\r\n");
    assert_eq!(status_of(s.addr, &resume).await.0, 200);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repeated_conditional_headers_combine_or_are_ignored() {
    let mut s = TestServer::start(|_| {}).await;
    let r = get(s.addr, &req("/small.txt")).await.unwrap();
    let etag = r.header("etag").unwrap().to_string();
    let lm = r.header("last-modified").unwrap().to_string();
    let with = |extra: String| format!("GET /small.txt HTTP/1.1\r\nHost: t\r\n{extra}\r\n");
    let cases = [
        // If-None-Match lines are one list: a match on any line counts.
        (with(format!("If-None-Match: {etag}\r\nIf-None-Match: \"other\"\r\n")), 304),
        (with(format!("If-None-Match: \"other\"\r\nIf-None-Match: {etag}\r\n")), 304),
        (with("If-None-Match: \"a\"\r\nIf-None-Match: \"b\"\r\n".into()), 200),
        // If-Match lines too.
        (with(format!("If-Match: \"other\"\r\nIf-Match: {etag}\r\n")), 200),
        // A repeated date is no date: ignored.
        (with(format!("If-Modified-Since: {lm}\r\nIf-Modified-Since: {lm}\r\n")), 200),
        (with("If-Unmodified-Since: Mon, 01 Jan 2001 00:00:00 GMT\r\nIf-Unmodified-Since: x\r\n".into()), 200),
        // A repeated If-Range validates nothing: the whole file.
        (with(format!("Range: bytes=0-0\r\nIf-Range: {etag}\r\nIf-Range: {etag}\r\n")), 200),
        (with(format!("Range: bytes=0-0\r\nIf-Range: {etag}\r\n")), 206),
    ];
    for (request, want) in &cases {
        assert_eq!(status_of(s.addr, request).await.0, *want, "{request:?}");
    }
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_host_gets_400() {
    let mut s = TestServer::start(|_| {}).await;
    let cases = [
        ("example.com", 200),
        ("example.com:8080", 200),
        ("127.0.0.1", 200),
        ("[::1]:80", 200),
        ("xn--bcher-kva.example", 200),
        ("a/b", 400),
        ("user@example.com", 400),
        ("example.com:http", 400),
        ("example.com:123456", 400),
        ("[::1", 400),
        ("[::1]x", 400),
        ("exa mple.com", 400),
        ("example.com\\", 400),
        ("{x}", 400),
    ];
    for (host, want) in cases {
        let request = format!("GET /small.txt HTTP/1.1\r\nHost: {host}\r\n\r\n");
        assert_eq!(status_of(s.addr, &request).await.0, want, "Host: {host}");
    }
    // Absolute-form: its authority is checked the same way.
    assert_eq!(status_of(s.addr, "GET http://a/small.txt HTTP/1.1\r\nHost: t\r\n\r\n").await.0, 200);
    assert_eq!(status_of(s.addr, "GET http://a/b@c HTTP/1.1\r\nHost: t\r\n\r\n").await.0, 404, "@ in the path");
    assert_eq!(status_of(s.addr, "GET http://a b/ HTTP/1.1\r\nHost: t\r\n\r\n").await.0, 400);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transfer_encoding_per_rfc_9112() {
    let mut s = TestServer::start(|c| {
        c.max_body_bytes = 5000;
        c.max_header_bytes = 1024;
        c.max_request_line_bytes = 512;
    })
    .await;
    let te = |coding: &str, body: &str| {
        format!("GET /small.txt HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: {coding}\r\n\r\n{body}")
    };
    // (request, status, the connection stays usable)
    let cases: Vec<(String, u16, bool)> = vec![
        (te("chunked", "5\r\nhello\r\n0\r\n\r\n"), 200, true),
        (te("Chunked", "5;ext=1\r\nhello\r\n3\r\nabc\r\n0\r\nX-Trailer: 1\r\n\r\n"), 200, true),
        (te("chunked, identity", "0\r\n\r\n"), 400, false),
        (te("chunked, chunked", "0\r\n\r\n"), 400, false),
        (te("identity", ""), 501, false),
        (te("gzip", ""), 501, false),
        (te("gzip, chunked", "0\r\n\r\n"), 501, false),
        (te("chunked", "zz\r\n"), 400, false),
        (te("chunked", "5\nhello\r\n0\r\n\r\n"), 400, false),
        (te("chunked", "1389\r\n"), 413, false),
        (
            "GET /small.txt HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n".into(),
            400,
            false,
        ),
        ("GET /small.txt HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n".into(), 400, false),
        // Two lines: one list, chunked not last.
        (
            "GET /small.txt HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: gzip\r\n\r\n"
                .into(),
            400,
            false,
        ),
    ];
    for (request, want, usable) in cases {
        let mut c = Raw::connect(s.addr).await;
        c.send(request.as_bytes()).await;
        let r = c.response(false).await.unwrap_or_else(|| panic!("no response to {request:?}"));
        assert_eq!(r.status, want, "{request:?}");
        if usable {
            assert_eq!(r.body, pattern(100));
            c.send(req("/small.txt").as_bytes()).await;
            assert_eq!(c.response(false).await.unwrap().status, 200, "after {request:?}");
        } else {
            assert!(c.closed_within(Duration::from_secs(3)).await, "{request:?} should close");
        }
    }
    // A chunked body longer than the read buffer, in pieces, then a pipelined request.
    let mut c = Raw::connect(s.addr).await;
    c.send(b"GET /small.txt HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n").await;
    for _ in 0..3 {
        c.send(format!("3e8\r\n{}\r\n", "x".repeat(1000)).as_bytes()).await;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    c.send(b"0\r\n\r\nGET /sub/ HTTP/1.1\r\nHost: t\r\n\r\n").await;
    assert_eq!(c.response(false).await.unwrap().body, pattern(100));
    assert_eq!(c.response(false).await.unwrap().body, b"sub index\n");
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_codes_for_odd_request_lines() {
    let mut s = TestServer::start(|_| {}).await;
    let cases = [
        ("GET /small .txt HTTP/1.1\r\nHost: t\r\n\r\n", 400),
        ("GET /a b c HTTP/1.1\r\nHost: t\r\n\r\n", 400),
        ("GET /small.txt HTTP/1.2\r\nHost: t\r\n\r\n", 200),
        ("GET /small.txt HTTP/1.9\r\nHost: t\r\n\r\n", 200),
        ("GET /small.txt HTTP/2.0\r\nHost: t\r\n\r\n", 505),
        ("GET /small.txt HTTP/1.10\r\nHost: t\r\n\r\n", 400),
        ("BREW /small.txt HTTP/1.1\r\nHost: t\r\n\r\n", 501),
        ("get /small.txt HTTP/1.1\r\nHost: t\r\n\r\n", 501),
        ("POST /small.txt HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n\r\n", 405),
        ("OPTIONS /small.txt HTTP/1.1\r\nHost: t\r\n\r\n", 405),
        ("GET /small.txt HTTP/1.1\r\nHost: t\r\nRange: bytes=18446744073709551615-\r\n\r\n", 416),
        ("GET /small.txt HTTP/1.1\r\nHost: t\r\nRange: bytes=99999999999999999999999-\r\n\r\n", 416),
        ("GET /small.txt HTTP/1.1\r\nHost: t\r\nRange: bytes=10-99999999999999999999999\r\n\r\n", 206),
    ];
    for (request, want) in cases {
        let (status, r) = status_of(s.addr, request).await;
        assert_eq!(status, want, "{request:?}");
        if want == 200 {
            assert_eq!(r.body, pattern(100), "{request:?}");
        }
    }
    // HTTP/1.2 is answered as 1.1: keep-alive by default.
    let mut c = Raw::connect(s.addr).await;
    c.send(b"GET / HTTP/1.2\r\nHost: t\r\n\r\n").await;
    assert_eq!(c.response(false).await.unwrap().header("connection"), None);
    c.send(req("/small.txt").as_bytes()).await;
    assert_eq!(c.response(false).await.unwrap().status, 200);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fragments_and_userinfo_in_targets_are_refused() {
    let mut s = TestServer::start(|_| {}).await;
    let cases = [
        ("/small.txt#frag", 400),
        ("/small.txt?q#frag", 400),
        ("/#", 400),
        ("http://user:pass@t/small.txt", 400),
        ("http://user@t/small.txt", 400),
        ("http://@t/small.txt", 400),
        ("http://t/small.txt", 200),
        ("http://t:8080/small.txt?x=@", 200),
        ("/small.txt?a=b@c", 200),
    ];
    for (target, want) in cases {
        assert_eq!(status_of(s.addr, &req(target)).await.0, want, "{target}");
    }
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_sockets_on_the_admin_port_do_not_block_metrics() {
    let mut s = TestServer::start(|c| c.admin = Some("127.0.0.1:0".parse().unwrap())).await;
    let admin = s.admin.unwrap();
    let mut silent = Vec::new();
    for _ in 0..40 {
        silent.push(Raw::connect(admin).await);
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let t0 = Instant::now();
    let r = tokio::time::timeout(Duration::from_secs(2), get(admin, "GET /metrics HTTP/1.1\r\nHost: t\r\n\r\n"))
        .await
        .expect("metrics within 2 s")
        .expect("a response, not a closed connection");
    assert_eq!(r.status, 200);
    assert!(t0.elapsed() < Duration::from_secs(1), "{:?}", t0.elapsed());
    // The oldest silent ones were evicted to make room.
    assert!(silent[0].closed_within(Duration::from_secs(1)).await);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dotfiles_are_refused_unless_allowed() {
    let setup = |root: &std::path::Path| {
        for dir in [".git", ".well-known/acme-challenge", "a"] {
            std::fs::create_dir_all(root.join(dir)).unwrap();
        }
        std::fs::write(root.join(".git/config"), b"[core]\n").unwrap();
        std::fs::write(root.join(".env"), b"SECRET=1\n").unwrap();
        std::fs::write(root.join("a/.htpasswd"), b"u:x\n").unwrap();
        std::fs::write(root.join(".well-known/acme-challenge/tok"), b"tok\n").unwrap();
    };
    let targets = ["/.git/config", "/.env", "/a/.htpasswd", "/a/%2Ehtpasswd", "/.git/", "/.git"];
    for (policy, refused) in [(None, 404), (Some(Dotfiles::Deny), 403), (Some(Dotfiles::Allow), 0)] {
        let mut s = TestServer::start(|c| {
            if let Some(p) = policy {
                c.dotfiles = p;
            }
        })
        .await;
        setup(&s.root);
        for target in targets {
            let status = status_of(s.addr, &req(target)).await.0;
            if refused == 0 {
                assert!(matches!(status, 200 | 301 | 403), "{policy:?} {target}: {status}");
                assert_ne!(status, 404, "{policy:?} {target}");
            } else {
                assert_eq!(status, refused, "{policy:?} {target}");
            }
        }
        assert_eq!(status_of(s.addr, &req("/.well-known/acme-challenge/tok")).await.0, 200, "{policy:?}");
        s.stop().await;
    }
}
