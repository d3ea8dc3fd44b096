//! Differential conformance: every request of a corpus goes to shortfirst and
//! to nginx serving the same directory. Status codes must match, and so must
//! the headers RFC 9110 constrains (Content-Length and Content-Range of what
//! is served, Last-Modified, the presence of ETag, Accept-Ranges, Location's
//! path), unless the difference is listed in [`DIFFERENCES`] with the clause
//! that allows it. A listed difference that no longer shows is an error too,
//! so the list stays true. Skipped, with a message, where nginx cannot run.

// The wall clock: nginx, the reference, is another process on real time.
#![allow(clippy::disallowed_types)]

mod common;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{set_mtime, Raw, Resp, TestServer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Where the two servers may answer differently: (case, nginx's status, ours, why).
const DIFFERENCES: &[(&str, u16, u16, &str)] = &[
    (
        "unknown method",
        405,
        501,
        "RFC 9110 §9.1: an unrecognized method SHOULD get 501; nginx answers 405 for any method it does not serve",
    ),
    (
        "TE chunked, identity",
        501,
        400,
        "RFC 9112 §6.3: chunked not the final coding MUST get 400; nginx answers 501 to any coding but chunked",
    ),
    (
        "TE chunked twice",
        501,
        400,
        "RFC 9112 §6.1: chunked MUST NOT be applied twice, so the length cannot be known (§6.3: 400)",
    ),
    (
        "multiple ranges",
        206,
        200,
        "RFC 9110 §14.2: a server MAY ignore Range; we send one representation, nginx multipart/byteranges",
    ),
    (
        "empty Host",
        400,
        200,
        "RFC 9110 §7.2: an empty Host is valid for a target without authority; nginx refuses it",
    ),
    (
        "dotfile",
        200,
        404,
        "RFC 9110 §15.5.5: 404 may stand for not willing to disclose; dotfiles are refused by default (--dotfiles allow serves them)",
    ),
    (
        "dotfile directory",
        403,
        404,
        "RFC 9110 §15.5.5, as for dotfiles; nginx refuses the directory listing with 403",
    ),
    (
        "fragment in target",
        200,
        400,
        "RFC 9112 §3.2: a request-target has no fragment (invalid request line: 400); nginx strips it",
    ),
    (
        "repeated If-Modified-Since",
        400,
        200,
        "RFC 9110 §13.1.3: If-Modified-Since with more than one member MUST be ignored (not refused)",
    ),
    (
        "If-None-Match lines",
        400,
        200,
        "RFC 9110 §5.3: lines of a list-based field combine into one list; nginx refuses a repeated If-None-Match",
    ),
    (
        "Host with userinfo",
        200,
        400,
        "RFC 9112 §3.2: Host = uri-host [ \":\" port ] (no userinfo); an invalid Host value MUST get 400",
    ),
    (
        "sidecar range",
        200,
        206,
        "RFC 9110 §14.2: a server MAY ignore Range; nginx's gzip_static does for a .gz, we serve the range of the sidecar's bytes",
    ),
];

/// One request of the corpus. Not compared whatever the request: Server, Date,
/// the ETag's value (opaque, RFC 9110 §8.8.3), error bodies and their types.
struct Case {
    name: &'static str,
    request: String,
}

fn case(name: &'static str, request: impl Into<String>) -> Case {
    Case { name, request: request.into() }
}

fn get(target: &str) -> String {
    format!("GET {target} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
}

fn with(target: &str, headers: &str) -> String {
    format!("GET {target} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n{headers}\r\n")
}

fn corpus(lm: &str) -> Vec<Case> {
    let old = "Mon, 01 Jan 2001 00:00:00 GMT";
    vec![
        // The ordinary e2e cases.
        case("file", get("/medium.bin")),
        case("index", get("/")),
        case("sub index", get("/sub/")),
        case("sub index with query", get("/sub/?x=1")),
        case("directory without slash", get("/sub")),
        case("directory without slash, query", get("/sub?x=1")),
        case("missing", get("/nope.txt")),
        case("file with slash", get("/small.txt/")),
        case("HEAD", "HEAD /medium.bin HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"),
        case("HTTP/1.0", "GET /small.txt HTTP/1.0\r\n\r\n"),
        case("no Host", "GET / HTTP/1.1\r\n\r\n"),
        case("two Hosts", "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n"),
        case("HTTP/2.0", "GET / HTTP/2.0\r\nHost: t\r\n\r\n"),
        case("POST", "POST /small.txt HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"),
        case("range", with("/medium.bin", "Range: bytes=1000-1999\r\n")),
        case("suffix range", with("/medium.bin", "Range: bytes=-10\r\n")),
        case("open range", with("/medium.bin", "Range: bytes=99990-\r\n")),
        case("range past the end", with("/medium.bin", "Range: bytes=100000-\r\n")),
        case("range other unit", with("/medium.bin", "Range: items=0-1\r\n")),
        case("multiple ranges", with("/medium.bin", "Range: bytes=0-1,5-6\r\n")),
        case("If-None-Match *", with("/small.txt", "If-None-Match: *\r\n")),
        case("If-None-Match other", with("/small.txt", "If-None-Match: \"other\"\r\n")),
        case("If-Modified-Since current", with("/small.txt", &format!("If-Modified-Since: {lm}\r\n"))),
        case("If-Modified-Since old", with("/small.txt", &format!("If-Modified-Since: {old}\r\n"))),
        case("If-Range stale", with("/medium.bin", "Range: bytes=0-0\r\nIf-Range: \"stale\"\r\n")),
        case("If-Range date", with("/medium.bin", &format!("Range: bytes=0-0\r\nIf-Range: {lm}\r\n"))),
        case("traversal", get("/../secret.txt")),
        case("encoded traversal", get("/%2e%2e/secret.txt")),
        // The defects of the review.
        case("redirect //host", get("//other.host/x/dir")),
        case("If-Match *", with("/small.txt", "If-Match: *\r\n")),
        case("If-Match stale", with("/small.txt", "If-Match: \"stale\"\r\n")),
        case("If-Match stale with Range", with("/medium.bin", "If-Match: \"stale\"\r\nRange: bytes=0-9\r\n")),
        case("If-Unmodified-Since old", with("/small.txt", &format!("If-Unmodified-Since: {old}\r\n"))),
        case("If-Unmodified-Since current", with("/small.txt", &format!("If-Unmodified-Since: {lm}\r\n"))),
        case("If-None-Match lines", with("/small.txt", "If-None-Match: \"a\"\r\nIf-None-Match: \"b\"\r\n")),
        case(
            "repeated If-Modified-Since",
            with("/small.txt", &format!("If-Modified-Since: {lm}\r\nIf-Modified-Since: {lm}\r\n")),
        ),
        case("invalid Host", "GET / HTTP/1.1\r\nHost: a/b\r\n\r\n"),
        case("Host with userinfo", "GET / HTTP/1.1\r\nHost: u@h\r\n\r\n"),
        case("empty Host", "GET /small.txt HTTP/1.1\r\nHost:\r\nConnection: close\r\n\r\n"),
        case("TE chunked", with("/small.txt", "Transfer-Encoding: chunked\r\n") + "5\r\nhello\r\n0\r\n\r\n"),
        case("TE chunked, identity", with("/small.txt", "Transfer-Encoding: chunked, identity\r\n")),
        case("TE chunked twice", with("/small.txt", "Transfer-Encoding: chunked, chunked\r\n")),
        case("TE unknown", with("/small.txt", "Transfer-Encoding: gzip\r\n")),
        case("TE and Content-Length", with("/small.txt", "Transfer-Encoding: chunked\r\nContent-Length: 5\r\n")),
        case("TE on HTTP/1.0", "GET /small.txt HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"),
        case("space in target", "GET /small .txt HTTP/1.1\r\nHost: t\r\n\r\n"),
        case("HTTP/1.2", "GET /small.txt HTTP/1.2\r\nHost: t\r\nConnection: close\r\n\r\n"),
        case("unknown method", "BREW /small.txt HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"),
        case("huge range start", with("/small.txt", "Range: bytes=18446744073709551615-\r\n")),
        case("fragment in target", get("/small.txt#frag")),
        case("userinfo in absolute-form", get("http://user:pass@t/small.txt")),
        case("absolute-form", get("http://t/small.txt")),
        case("dotfile", get("/.env")),
        case("dotfile directory", get("/.git/")),
        // Precompressed sidecars (nginx: gzip_static on, gzip_vary on): `app.css.gz` only.
        case("sidecar gzip", with("/app.css", "Accept-Encoding: gzip\r\n")),
        case("sidecar browsers' list", with("/app.css", "Accept-Encoding: gzip, deflate, br, zstd\r\n")),
        case("sidecar gzip refused", with("/app.css", "Accept-Encoding: gzip;q=0\r\n")),
        case("sidecar no Accept-Encoding", get("/app.css")),
        case("sidecar range", with("/app.css", "Accept-Encoding: gzip\r\nRange: bytes=10-19\r\n")),
        case("sidecar HEAD", "HEAD /app.css HTTP/1.1\r\nHost: t\r\nAccept-Encoding: gzip\r\nConnection: close\r\n\r\n"),
        case("sidecar by name", with("/app.css.gz", "Accept-Encoding: gzip\r\n")),
    ]
}

struct Nginx {
    child: Child,
    addr: SocketAddr,
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn nginx_binary() -> Option<PathBuf> {
    ["/usr/sbin/nginx", "/usr/local/sbin/nginx", "/usr/bin/nginx"].iter().map(PathBuf::from).find(|p| p.exists())
}

/// nginx in the foreground, one process, serving `root` on a free loopback port;
/// `directives` go in its `server` block.
fn start_nginx(bin: &Path, root: &Path, dir: &Path, directives: &str) -> Result<Nginx, String> {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let d = dir.display();
    let conf = format!(
        "daemon off; master_process off; worker_processes 1; pid {d}/nginx.pid; error_log {d}/error.log;\n\
         events {{ worker_connections 256; }}\n\
         http {{\n  access_log off; server_tokens off; absolute_redirect off;\n\
           client_body_temp_path {d}/body; proxy_temp_path {d}/proxy; fastcgi_temp_path {d}/fcgi;\n\
           uwsgi_temp_path {d}/uwsgi; scgi_temp_path {d}/scgi;\n\
           types {{ text/html html; text/plain txt; }} default_type application/octet-stream;\n\
           gzip_static on; gzip_vary on;
           server {{ listen 127.0.0.1:{port}; root {root}; index index.html; {directives} }}\n}}\n",
        root = root.display()
    );
    let conf_path = dir.join("nginx.conf");
    std::fs::write(&conf_path, conf).unwrap();
    let child = Command::new(bin)
        .arg("-c")
        .arg(&conf_path)
        .arg("-p")
        .arg(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", bin.display()))?;
    let mut nginx = Nginx { child, addr: SocketAddr::from(([127, 0, 0, 1], port)) };
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(nginx.addr).is_err() {
        if let Ok(Some(status)) = nginx.child.try_wait() {
            let log = std::fs::read_to_string(dir.join("error.log")).unwrap_or_default();
            return Err(format!("nginx exited ({status}): {log}"));
        }
        if Instant::now() > deadline {
            return Err("nginx did not listen within 10 s".into());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(nginx)
}

async fn exchange(addr: SocketAddr, request: &str) -> Option<Resp> {
    let mut c = Raw::connect(addr).await;
    c.send(request.as_bytes()).await;
    c.response(request.starts_with("HEAD ")).await
}

/// The constrained headers of a response to compare, as `name: value` lines; `vary`: and
/// `Vary` (compared on paths with a sidecar only: we send it on every file response while
/// precompressed is on, nginx only where a `.gz` exists, RFC 9110 §12.5.5 allows both).
fn constrained(r: &Resp, vary: bool) -> Vec<String> {
    let mut out = Vec::new();
    let served = matches!(r.status, 200 | 206 | 304);
    if matches!(r.status, 200 | 206) {
        out.push(format!("content-length: {:?}", r.header("content-length")));
        out.push(format!("content-encoding: {:?}", r.header("content-encoding")));
    }
    if vary {
        out.push(format!("vary: {:?}", r.header("vary")));
    }
    if r.status == 200 && r.header("content-encoding").is_none() {
        // RFC 9110 §14.3 allows Accept-Ranges on any response; nginx sends it on 200 only,
        // and not on a gzip_static sidecar, whose ranges it does not serve (see DIFFERENCES).
        out.push(format!("accept-ranges: {:?}", r.header("accept-ranges")));
    }
    if matches!(r.status, 206 | 416) {
        out.push(format!("content-range: {:?}", r.header("content-range")));
    }
    if served {
        out.push(format!("last-modified: {:?}", r.header("last-modified")));
        out.push(format!("etag present: {}", r.header("etag").is_some()));
    }
    if (300..400).contains(&r.status) && r.status != 304 {
        out.push(format!("location: {:?}", r.header("location")));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shortfirst_and_nginx_agree_or_differ_as_the_rfcs_allow() {
    let Some(bin) = nginx_binary() else {
        eprintln!("SKIP conformance: nginx is not installed (make apt installs it: APT_PACKAGES in mk/serve.mk)");
        return;
    };
    let mut s = TestServer::start(|_| {}).await;
    let root = s.root.clone();
    for dir in ["other.host/x/dir", ".git"] {
        std::fs::create_dir_all(root.join(dir)).unwrap();
    }
    std::fs::write(root.join(".env"), b"SECRET=1\n").unwrap();
    std::fs::write(root.join("app.css"), vec![b'a'; 4000]).unwrap();
    std::fs::write(root.join("app.css.gz"), common::pattern(700)).unwrap();
    for name in ["app.css", "app.css.gz"] {
        set_mtime(&root.join(name), std::time::SystemTime::now() - Duration::from_secs(3600));
    }
    std::fs::write(root.join(".git/config"), b"[core]\n").unwrap();
    set_mtime(&root.join(".env"), std::time::SystemTime::now() - Duration::from_secs(3600));
    let nginx_dir = tempfile::tempdir().unwrap();
    let nginx = match start_nginx(&bin, &root, nginx_dir.path(), "") {
        Ok(n) => n,
        Err(e) => {
            eprintln!("SKIP conformance: {e}");
            s.stop().await;
            return;
        }
    };
    let lm = exchange(s.addr, &get("/small.txt")).await.unwrap().header("last-modified").unwrap().to_string();
    let mut failures = Vec::new();
    let mut seen_differences = Vec::new();
    for c in corpus(&lm) {
        let ours = exchange(s.addr, &c.request).await;
        let theirs = exchange(nginx.addr, &c.request).await;
        let (Some(ours), Some(theirs)) = (ours, theirs) else {
            failures.push(format!("{}: no response (ours or nginx's) to {:?}", c.name, c.request));
            continue;
        };
        let listed = DIFFERENCES.iter().find(|d| d.0 == c.name);
        match listed {
            Some(&(_, nginx_status, our_status, _)) => {
                if (theirs.status, ours.status) != (nginx_status, our_status) {
                    failures.push(format!(
                        "{}: listed as nginx {nginx_status} / ours {our_status}, got nginx {} / ours {}",
                        c.name, theirs.status, ours.status
                    ));
                }
                seen_differences.push(c.name);
            }
            None if theirs.status != ours.status => failures.push(format!(
                "{}: nginx {} / ours {} (unlisted difference) for {:?}",
                c.name, theirs.status, ours.status, c.request
            )),
            None => {
                let vary = c.name.starts_with("sidecar") && c.name != "sidecar by name";
                let (a, b) = (constrained(&ours, vary), constrained(&theirs, vary));
                if a != b {
                    failures.push(format!("{}: headers differ: ours {a:?} / nginx {b:?}", c.name));
                }
            }
        }
    }
    for d in DIFFERENCES {
        assert!(seen_differences.contains(&d.0), "listed difference {:?} is not in the corpus", d.0);
    }
    drop(nginx);
    s.stop().await;
    assert!(failures.is_empty(), "{} disagreement(s):\n{}", failures.len(), failures.join("\n"));
}

/// An HTTP/1.0 exchange read to the close: (status line, lowercased head, body), so a
/// chunked or unframed body is read whole without a decoder.
async fn exchange_to_close(addr: SocketAddr, request: &str) -> (String, String, Vec<u8>) {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut bytes = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut bytes)).await.unwrap().unwrap();
    let end = bytes.windows(4).position(|w| w == b"\r\n\r\n").expect("a complete head");
    let head = String::from_utf8_lossy(&bytes[..end]).to_ascii_lowercase();
    let status = head.lines().next().unwrap_or("").split(' ').nth(1).unwrap_or("").to_string();
    (status, head, bytes[end + 4..].to_vec())
}

/// The media type of a head's `Content-Type`, without parameters.
fn media_type(head: &str) -> Option<String> {
    let value = head.lines().find_map(|l| l.strip_prefix("content-type:"))?;
    Some(value.split(';').next().unwrap_or("").trim().to_string())
}

/// `--listings html` against nginx's `autoindex on;`: the same statuses, the same media
/// type, every listed name in both pages (HTML-escaped), dotfiles in neither. Allowed
/// differences, not compared: the page's layout, `charset=utf-8` (nginx names none),
/// `Content-Length` (nginx sends the page chunked), `'` escaped by us only, how sizes
/// and dates are laid out, and a dotfile itself (404 here, see [`DIFFERENCES`]).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listings_agree_with_nginx_autoindex() {
    let Some(bin) = nginx_binary() else {
        eprintln!("SKIP listing conformance: nginx is not installed");
        return;
    };
    let mut s = TestServer::start(|c| c.listings = shortfirst_server::Listings::Html).await;
    let list = s.root.join("list");
    std::fs::create_dir_all(list.join("sub dir")).unwrap();
    let names = ["a&b<c>.txt", "sp ace.txt", "100%.txt", "\u{fc}n\u{ef}.txt", "#hash"];
    for name in names {
        std::fs::write(list.join(name), b"x").unwrap();
    }
    std::fs::write(list.join(".env"), b"SECRET=1\n").unwrap();
    let nginx_dir = tempfile::tempdir().unwrap();
    let nginx = match start_nginx(&bin, &s.root, nginx_dir.path(), "autoindex on;") {
        Ok(n) => n,
        Err(e) => {
            eprintln!("SKIP listing conformance: {e}");
            s.stop().await;
            return;
        }
    };
    let mut failures = Vec::new();
    for target in ["/list/", "/list/sub%20dir/", "/empty/", "/list", "/sub/", "/list/.env"] {
        let request = format!("GET {target} HTTP/1.0\r\n\r\n");
        let (ours, our_head, our_body) = exchange_to_close(s.addr, &request).await;
        let (theirs, their_head, their_body) = exchange_to_close(nginx.addr, &request).await;
        let dotfile = target.contains("/.");
        // The dotfile itself: 404 here (RFC 9110 §15.5.5, as in DIFFERENCES), 200 from nginx.
        let want_ours = if dotfile { "404".to_string() } else { theirs.clone() };
        if ours != want_ours {
            failures.push(format!("{target}: nginx {theirs} / ours {ours}"));
            continue;
        }
        if ours != "200" || dotfile {
            continue;
        }
        if media_type(&our_head) != media_type(&their_head) {
            failures.push(format!("{target}: content types differ: ours {our_head:?} / nginx {their_head:?}"));
        }
        let (our_page, their_page) = (String::from_utf8_lossy(&our_body), String::from_utf8_lossy(&their_body));
        let shown = if target == "/list/" { &names[..] } else { &[][..] };
        for name in shown.iter().copied().chain(if target == "/list/" { Some("sub dir/") } else { None }) {
            let escaped = name.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;");
            for (who, page) in [("ours", &our_page), ("nginx", &their_page)] {
                if !page.contains(&format!(">{escaped}<")) {
                    failures.push(format!("{target}: {name:?} not in {who}'s page:\n{page}"));
                }
            }
        }
        for (who, page) in [("ours", &our_page), ("nginx", &their_page)] {
            if page.contains(".env") {
                failures.push(format!("{target}: a dotfile in {who}'s page:\n{page}"));
            }
        }
    }
    drop(nginx);
    s.stop().await;
    assert!(failures.is_empty(), "{} disagreement(s):\n{}", failures.len(), failures.join("\n"));
}
