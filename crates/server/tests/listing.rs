//! Directory listings (`--listings`) through real sockets: formats chosen by setting
//! and by `Accept`, what is hidden, odd names escaped and encoded (each link followed
//! back to its file), the entry limit, HEAD, and the old answers when listings are off.

mod common;

use common::{get, Raw, Resp, TestServer};
use shortfirst_server::Listings;

/// The names `list/` holds besides its dotfiles, each file's size its position + 1.
const ODD_NAMES: &[&str] =
    &["a&b<c>.txt", "sp ace.txt", "100%.txt", "\u{fc}n\u{ef}.txt", "#hash", "q?x=1", "it's \"q\""];

/// `root/list/`: the odd names, a subdirectory, dotfiles, a symlink out of the root.
fn populate_list(s: &TestServer) {
    let list = s.root.join("list");
    std::fs::create_dir_all(list.join("sub dir")).unwrap();
    std::fs::create_dir_all(list.join(".git")).unwrap();
    for (i, name) in ODD_NAMES.iter().enumerate() {
        std::fs::write(list.join(name), vec![b'x'; i + 1]).unwrap();
    }
    std::fs::write(list.join(".env"), b"SECRET=1\n").unwrap();
    std::fs::write(list.join("sub dir/inner.txt"), b"inner\n").unwrap();
    // secret.txt lies outside the root (see common::populate).
    std::os::unix::fs::symlink("../../secret.txt", list.join("escape.txt")).unwrap();
}

fn request(target: &str, headers: &str) -> String {
    format!("GET {target} HTTP/1.1\r\nHost: t\r\n{headers}\r\n")
}

async fn fetch(s: &TestServer, target: &str, headers: &str) -> Resp {
    get(s.addr, &request(target, headers)).await.expect("a response")
}

fn body_text(r: &Resp) -> String {
    String::from_utf8(r.body.clone()).expect("UTF-8 body")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_answers_json_to_json_and_html_otherwise() {
    let mut s = TestServer::start(|c| c.listings = Listings::Auto).await;
    populate_list(&s);

    let html = fetch(&s, "/list/", "").await;
    assert_eq!(html.status, 200);
    assert_eq!(html.header("content-type"), Some("text/html; charset=utf-8"));
    assert_eq!(html.header("vary"), Some("Accept"));
    assert_eq!(html.header("etag"), None, "no validator: see listing.rs");
    assert_eq!(html.header("content-length"), Some(html.body.len().to_string().as_str()));
    let text = body_text(&html);
    for want in [
        "<a href=\"/list/a&amp;b%3Cc%3E.txt\">a&amp;b&lt;c&gt;.txt</a>",
        "<a href=\"/list/sp%20ace.txt\">sp ace.txt</a>",
        "<a href=\"/list/100%25.txt\">100%.txt</a>",
        "<a href=\"/list/%C3%BCn%C3%AF.txt\">\u{fc}n\u{ef}.txt</a>",
        "<a href=\"/list/%23hash\">#hash</a>",
        "<a href=\"/list/q%3Fx=1\">q?x=1</a>",
        "<a href=\"/list/it&#39;s%20%22q%22\">it&#39;s &quot;q&quot;</a>",
        "<a href=\"/list/sub%20dir/\">sub dir/</a>",
        "<a href=\"/\">../</a>",
    ] {
        assert!(text.contains(want), "{want} missing in\n{text}");
    }
    for hidden in [".env", ".git", "escape.txt", "a&b<c>"] {
        assert!(!text.contains(hidden), "{hidden} shown in\n{text}");
    }
    let browser = fetch(&s, "/list/", "Accept: text/html,application/xhtml+xml,*/*;q=0.8\r\n").await;
    assert_eq!(browser.header("content-type"), Some("text/html; charset=utf-8"));

    let json = fetch(&s, "/list/", "Accept: application/json\r\n").await;
    assert_eq!(json.status, 200);
    assert_eq!(json.header("content-type"), Some("application/json"));
    assert_eq!(json.header("vary"), Some("Accept"));
    let doc: serde_json::Value = serde_json::from_slice(&json.body).unwrap();
    assert_eq!(doc["path"], "/list/");
    assert_eq!(doc["truncated"], false);
    let entries = doc["entries"].as_array().unwrap();
    let names: Vec<&str> = entries.iter().map(|e| e["name"].as_str().unwrap()).collect();
    let mut want: Vec<&str> = ODD_NAMES.to_vec();
    want.sort_unstable();
    want.insert(0, "sub dir"); // directories first
    assert_eq!(names, want);
    assert_eq!(entries[0]["type"], "dir");
    assert_eq!(entries[0]["size_bytes"], serde_json::Value::Null);
    // Every file's link leads back to it: the encoding is the one the server decodes.
    for e in &entries[1..] {
        let name = e["name"].as_str().unwrap();
        let size = ODD_NAMES.iter().position(|n| *n == name).unwrap() + 1;
        assert_eq!((e["type"].as_str(), e["size_bytes"].as_u64()), (Some("file"), Some(size as u64)), "{e}");
        let mtime = e["mtime"].as_str().unwrap();
        assert!(mtime.len() == 20 && mtime.ends_with('Z') && mtime.as_bytes()[10] == b'T', "{mtime}");
        let file = fetch(&s, e["url"].as_str().unwrap(), "").await;
        assert_eq!((file.status, file.body.len()), (200, size), "{e}");
    }
    let sub = fetch(&s, entries[0]["url"].as_str().unwrap(), "Accept: application/json\r\n").await;
    let sub: serde_json::Value = serde_json::from_slice(&sub.body).unwrap();
    assert_eq!(sub["entries"][0]["url"], "/list/sub%20dir/inner.txt");
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fixed_formats_ignore_accept_and_do_not_vary() {
    for (setting, accept, content_type) in [
        (Listings::Html, "Accept: application/json\r\n", "text/html; charset=utf-8"),
        (Listings::Json, "Accept: text/html\r\n", "application/json"),
    ] {
        let mut s = TestServer::start(|c| c.listings = setting).await;
        populate_list(&s);
        let r = fetch(&s, "/list/", accept).await;
        assert_eq!((r.status, r.header("content-type")), (200, Some(content_type)), "{setting}");
        assert_eq!(r.header("vary"), None, "{setting}");
        assert!(body_text(&r).contains("sp ace.txt"), "{setting}");
        s.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn off_keeps_the_old_answers() {
    let mut s = TestServer::start(|_| {}).await;
    populate_list(&s);
    let r = fetch(&s, "/list/", "Accept: application/json\r\n").await;
    assert_eq!(r.status, 403);
    assert!(!body_text(&r).contains("ace"), "{r:?}");
    assert_eq!(fetch(&s, "/empty/", "").await.status, 403);
    assert_eq!(fetch(&s, "/", "").await.body, b"<h1>home</h1>\n", "an index is served as before");
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listings_leave_indexes_redirects_and_dotfiles_as_they_were() {
    let mut s = TestServer::start(|c| c.listings = Listings::Auto).await;
    populate_list(&s);
    assert_eq!(fetch(&s, "/sub/", "").await.body, b"sub index\n");
    let r = fetch(&s, "/list?x=1", "").await;
    assert_eq!((r.status, r.header("location")), (301, Some("/list/?x=1")));
    assert_eq!(fetch(&s, "/list/.git/", "").await.status, 404, "a dotfile directory is not listed");
    assert_eq!(fetch(&s, "/list/%2egit/", "").await.status, 404);
    let empty = fetch(&s, "/empty/", "Accept: application/json\r\n").await;
    let doc: serde_json::Value = serde_json::from_slice(&empty.body).unwrap();
    assert_eq!(doc, serde_json::json!({"path": "/empty/", "truncated": false, "entries": []}));
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_entry_limit_cuts_the_listing_and_says_so() {
    let mut s = TestServer::start(|c| {
        c.listings = Listings::Auto;
        c.listing_max_entries = 3;
    })
    .await;
    populate_list(&s); // 8 listable entries in list/
    let json = fetch(&s, "/list/", "Accept: application/json\r\n").await;
    let doc: serde_json::Value = serde_json::from_slice(&json.body).unwrap();
    assert_eq!(doc["truncated"], true);
    assert_eq!(doc["entries"].as_array().unwrap().len(), 3);
    let html = body_text(&fetch(&s, "/list/", "").await);
    assert!(html.contains("Truncated: only the first 3 entries read are listed."), "{html}");
    assert_eq!(html.matches("<tr><td><a href=\"/list/").count(), 3, "{html}");
    // Under the limit: whole.
    let sub = fetch(&s, "/list/sub%20dir/", "Accept: application/json\r\n").await;
    let sub: serde_json::Value = serde_json::from_slice(&sub.body).unwrap();
    assert_eq!(sub["truncated"], false);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn head_has_the_listings_headers_and_no_body() {
    let mut s = TestServer::start(|c| c.listings = Listings::Auto).await;
    populate_list(&s);
    let mut c = Raw::connect(s.addr).await;
    c.send(b"HEAD /list/ HTTP/1.1\r\nHost: t\r\nAccept: application/json\r\n\r\nGET /list/ HTTP/1.1\r\nHost: t\r\nAccept: application/json\r\n\r\nGET /small.txt HTTP/1.1\r\nHost: t\r\n\r\n").await;
    let head = c.response(true).await.unwrap();
    let full = c.response(false).await.unwrap();
    let after = c.response(false).await.unwrap();
    assert_eq!(head.status, 200);
    assert_eq!(head.header("content-type"), Some("application/json"));
    assert_eq!(head.header("content-length"), Some(full.body.len().to_string().as_str()));
    assert!(head.body.is_empty());
    assert!(serde_json::from_slice::<serde_json::Value>(&full.body).is_ok());
    assert_eq!((after.status, after.body.len()), (200, 100), "the connection stayed in sync");
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conditions_and_ranges_on_a_page_without_validators() {
    let mut s = TestServer::start(|c| c.listings = Listings::Auto).await;
    populate_list(&s);
    let whole = fetch(&s, "/list/", "").await.body;
    let cases: &[(&str, u16)] = &[
        ("If-Match: \"a\"\r\n", 412),
        ("If-Match: *\r\n", 200),
        ("If-None-Match: *\r\n", 304),
        ("If-None-Match: \"a\"\r\n", 200),
        ("If-Modified-Since: Sun, 06 Nov 2094 08:49:37 GMT\r\n", 200),
        ("Range: bytes=0-9\r\n", 200),
    ];
    for (header, status) in cases {
        let r = fetch(&s, "/list/", header).await;
        assert_eq!(r.status, *status, "{header}");
        if *status == 200 {
            assert_eq!(r.body, whole, "{header}: the whole page");
        }
        if *status == 304 {
            assert_eq!(r.header("vary"), Some("Accept"), "{header}");
        }
    }
    s.stop().await;
}
