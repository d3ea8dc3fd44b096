//! Precompressed sidecars and `Cache-Control` rules through real sockets: the
//! representation chosen by `Accept-Encoding`, its headers, validators, ranges and band.

mod common;

use std::path::Path;
use std::time::Duration;

use common::{get, pattern, req, set_mtime, Resp, TestServer};

/// The sidecars every test here has: `app.css` (4000 B) with `.br` (500 B), `.zst`
/// (600 B) and `.gz` (700 B); `big.bin` (300 KB) with `.gz` (300 B); `sub/index.html.gz`.
/// Distinct bytes each, so a body shows which file it came from.
fn make_sidecars(root: &Path) {
    let files: &[(&str, Vec<u8>)] = &[
        ("app.css", vec![b'a'; 4000]),
        ("app.css.br", vec![b'b'; 500]),
        ("app.css.zst", vec![b'z'; 600]),
        ("app.css.gz", pattern(700)),
        ("big.bin.gz", vec![b'g'; 300]),
        ("sub/index.html.gz", vec![b'i'; 50]),
    ];
    let hour_ago = std::time::SystemTime::now() - Duration::from_secs(3600);
    for (name, bytes) in files {
        std::fs::write(root.join(name), bytes).unwrap();
        set_mtime(&root.join(name), hour_ago);
    }
}

async fn get_with(s: &TestServer, path: &str, headers: &str) -> Resp {
    get(s.addr, &format!("GET {path} HTTP/1.1\r\nHost: t\r\n{headers}\r\n")).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn accept_encoding_picks_the_sidecar_and_its_headers() {
    let mut s = TestServer::start(|_| {}).await;
    make_sidecars(&s.root);

    let identity = get_with(&s, "/app.css", "").await;
    assert_eq!((identity.status, identity.body.len()), (200, 4000), "no Accept-Encoding: identity");
    assert_eq!(identity.header("content-encoding"), None);
    assert_eq!(identity.header("vary"), Some("Accept-Encoding"), "the choice depended on the field");
    let identity_tag = identity.header("etag").unwrap().to_string();

    let br = get_with(&s, "/app.css", "Accept-Encoding: gzip, deflate, br, zstd\r\n").await;
    assert_eq!(br.status, 200);
    assert_eq!(br.body, vec![b'b'; 500], "the server's order among equals: br first");
    assert_eq!(br.header("content-encoding"), Some("br"));
    assert_eq!(br.header("content-length"), Some("500"));
    assert_eq!(br.header("content-type"), Some("text/css; charset=utf-8"), "the original's type");
    assert_eq!(br.header("vary"), Some("Accept-Encoding"));
    let br_tag = br.header("etag").unwrap();
    assert!(br_tag.ends_with("-br\""), "{br_tag}");
    assert_ne!(br_tag, identity_tag);

    let gz = get_with(&s, "/app.css", "Accept-Encoding: br;q=0, gzip\r\n").await;
    assert_eq!((gz.header("content-encoding"), gz.body.as_slice()), (Some("gzip"), pattern(700).as_slice()));
    assert_eq!(gz.header("content-length"), Some("700"));
    let gz_tag = gz.header("etag").unwrap();
    assert!(gz_tag.ends_with("-gzip\"") && gz_tag != br_tag && gz_tag != identity_tag, "{gz_tag}");

    let zst = get_with(&s, "/app.css", "Accept-Encoding: gzip;q=0.5, zstd;q=0.9, br;q=0.1\r\n").await;
    assert_eq!((zst.header("content-encoding"), zst.body.len()), (Some("zstd"), 600), "the highest weight");
    let refused = get_with(&s, "/app.css", "Accept-Encoding: gzip;q=0.5, identity\r\n").await;
    assert_eq!((refused.header("content-encoding"), refused.body.len()), (None, 4000), "identity weighs more");
    let none_listed = get_with(&s, "/app.css", "Accept-Encoding: deflate\r\n").await;
    assert_eq!((none_listed.header("content-encoding"), none_listed.body.len()), (None, 4000));

    // HEAD: the same representation's head.
    let head = get(s.addr, "HEAD /app.css HTTP/1.1\r\nHost: t\r\nAccept-Encoding: gzip\r\n\r\n").await.unwrap();
    assert_eq!((head.header("content-encoding"), head.header("content-length")), (Some("gzip"), Some("700")));
    // A directory's index has its sidecar too.
    let index = get_with(&s, "/sub/", "Accept-Encoding: gzip\r\n").await;
    assert_eq!((index.header("content-encoding"), index.body.as_slice()), (Some("gzip"), &[b'i'; 50][..]));
    assert_eq!(index.header("content-type"), Some("text/html; charset=utf-8"));
    // A sidecar asked for by name is a gzip file like any other.
    let direct = get_with(&s, "/app.css.gz", "Accept-Encoding: gzip\r\n").await;
    assert_eq!((direct.status, direct.body.as_slice()), (200, pattern(700).as_slice()));
    assert_eq!(direct.header("content-type"), Some("application/gzip"));
    assert_eq!(direct.header("content-encoding"), None);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ranges_and_conditions_apply_to_the_representation() {
    let mut s = TestServer::start(|_| {}).await;
    make_sidecars(&s.root);
    let gz = get_with(&s, "/app.css", "Accept-Encoding: gzip\r\n").await;
    let gz_tag = gz.header("etag").unwrap().to_string();
    let identity_tag = get_with(&s, "/app.css", "").await.header("etag").unwrap().to_string();

    let part = get_with(&s, "/app.css", "Accept-Encoding: gzip\r\nRange: bytes=10-19\r\n").await;
    assert_eq!(part.status, 206);
    assert_eq!(part.body, pattern(700)[10..20]);
    assert_eq!(part.header("content-range"), Some("bytes 10-19/700"));
    assert_eq!(part.header("content-encoding"), Some("gzip"));
    let tail = get_with(&s, "/app.css", "Accept-Encoding: gzip\r\nRange: bytes=-5\r\n").await;
    assert_eq!((tail.status, tail.body.as_slice()), (206, &pattern(700)[695..]));
    let beyond = get_with(&s, "/app.css", "Accept-Encoding: gzip\r\nRange: bytes=800-\r\n").await;
    assert_eq!((beyond.status, beyond.header("content-range")), (416, Some("bytes */700")), "the sidecar's length");

    let not_modified = get_with(&s, "/app.css", &format!("Accept-Encoding: gzip\r\nIf-None-Match: {gz_tag}\r\n")).await;
    assert_eq!(not_modified.status, 304);
    assert_eq!(not_modified.header("etag"), Some(gz_tag.as_str()));
    assert_eq!(not_modified.header("vary"), Some("Accept-Encoding"));
    let other = get_with(&s, "/app.css", &format!("If-None-Match: {gz_tag}\r\n")).await;
    assert_eq!((other.status, other.body.len()), (200, 4000), "the gzip tag is not identity's");
    let identity_304 = get_with(&s, "/app.css", &format!("If-None-Match: {identity_tag}\r\n")).await;
    assert_eq!(identity_304.status, 304);

    let if_range = format!("Accept-Encoding: gzip\r\nRange: bytes=0-3\r\nIf-Range: {gz_tag}\r\n");
    assert_eq!(get_with(&s, "/app.css", &if_range).await.body, pattern(700)[..4]);
    let stale = format!("Accept-Encoding: gzip\r\nRange: bytes=0-3\r\nIf-Range: {identity_tag}\r\n");
    let full = get_with(&s, "/app.css", &stale).await;
    assert_eq!((full.status, full.body.len()), (200, 700), "If-Range names another representation");
    s.stop().await;
}

/// The band is the representation's: a 300 KB file whose 300 B sidecar is sent starts in
/// band 1, the file itself in band 6 (default cutoffs, 50K and above).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_band_is_the_size_of_the_bytes_sent() {
    let dir = tempfile::tempdir().unwrap();
    let log_path = dir.path().join("access.log");
    let lp = log_path.clone();
    let mut s = TestServer::start(move |c| c.access_log = Some(lp)).await;
    make_sidecars(&s.root);
    let gz = get_with(&s, "/big.bin", "Accept-Encoding: gzip\r\n").await;
    assert_eq!((gz.body.len(), gz.header("content-encoding")), (300, Some("gzip")));
    assert_eq!(get_with(&s, "/big.bin", "").await.body.len(), 300_000);
    s.stop().await;
    let log = std::fs::read_to_string(&log_path).unwrap();
    let band_of = |sent: &str| -> String {
        let line = log.lines().find(|l| l.contains(&format!("\"GET /big.bin HTTP/1.1\" 200 {sent} "))).unwrap();
        line.split(" band=").nth(1).unwrap().split(' ').next().unwrap().to_string()
    };
    assert_eq!(band_of("300"), "1", "{log}");
    assert_eq!(band_of("300000"), "6", "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sidecars_off_or_escaping_the_root_are_not_used() {
    for follow in [false, true] {
        let mut s = TestServer::start(|c| c.follow_symlinks_outside_root = follow).await;
        make_sidecars(&s.root);
        std::fs::write(s.root.join("esc.css"), b"inside\n").unwrap();
        std::os::unix::fs::symlink(s.dir.path().join("secret.txt"), s.root.join("esc.css.gz")).unwrap();
        let r = get_with(&s, "/esc.css", "Accept-Encoding: gzip\r\n").await;
        assert_eq!((r.status, r.body.as_slice(), r.header("content-encoding")), (200, &b"inside\n"[..], None));
        s.stop().await;
    }
    let mut s = TestServer::start(|c| c.precompressed = "none".parse().unwrap()).await;
    make_sidecars(&s.root);
    let r = get_with(&s, "/app.css", "Accept-Encoding: gzip, br\r\n").await;
    assert_eq!((r.body.len(), r.header("content-encoding"), r.header("vary")), (4000, None, None));
    s.stop().await;
    // Only the codings offered, in the order given.
    let mut s = TestServer::start(|c| c.precompressed = "gzip,br".parse().unwrap()).await;
    make_sidecars(&s.root);
    let r = get_with(&s, "/app.css", "Accept-Encoding: br, zstd, gzip\r\n").await;
    assert_eq!(r.header("content-encoding"), Some("gzip"));
    let r = get_with(&s, "/app.css", "Accept-Encoding: zstd\r\n").await;
    assert_eq!((r.header("content-encoding"), r.body.len()), (None, 4000));
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cache_control_rules_apply_by_glob() {
    let rules = ["/assets/*.js=public, max-age=31536000, immutable", "/*.txt=no-cache", "/sub/*=private"];
    let mut s = TestServer::start(|c| {
        let rules: Vec<String> = rules.iter().map(|r| r.to_string()).collect();
        c.cache_control = shortfirst_server::cache_control::CacheControl::new(&rules).unwrap();
    })
    .await;
    std::fs::create_dir_all(s.root.join("assets/lib")).unwrap();
    std::fs::write(s.root.join("assets/app.js"), b"1;\n").unwrap();
    std::fs::write(s.root.join("assets/lib/x.js"), b"2;\n").unwrap();
    let cc = |r: &Resp| r.header("cache-control").map(str::to_string);
    let app = get(s.addr, &req("/assets/app.js")).await.unwrap();
    assert_eq!(cc(&app).as_deref(), Some("public, max-age=31536000, immutable"));
    let tag = app.header("etag").unwrap().to_string();
    let not_modified = get_with(&s, "/assets/app.js", &format!("If-None-Match: {tag}\r\n")).await;
    assert_eq!((not_modified.status, cc(&not_modified)), (304, cc(&app)), "a 304 carries it too");
    assert_eq!(cc(&get(s.addr, &req("/assets/lib/x.js")).await.unwrap()), None, "`*` stays in its segment");
    assert_eq!(cc(&get(s.addr, &req("/small.txt")).await.unwrap()).as_deref(), Some("no-cache"));
    assert_eq!(cc(&get(s.addr, &req("/sub/")).await.unwrap()).as_deref(), Some("private"), "its index.html");
    assert_eq!(cc(&get(s.addr, &req("/medium.bin")).await.unwrap()), None);
    assert_eq!(cc(&get(s.addr, &req("/missing.txt")).await.unwrap()), None, "not on errors");
    s.stop().await;
}
