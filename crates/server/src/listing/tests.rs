use super::*;

fn entry(name: &str, kind: Kind, size_bytes: u64) -> Entry {
    Entry { name: name.as_bytes().to_vec(), kind, size_bytes, mtime_secs: 784_111_777 }
}

#[test]
fn negotiation_table() {
    use Listings::*;
    let cases: &[(Listings, &[&str], Option<Format>)] = &[
        (Off, &["application/json"], None),
        (Html, &["application/json"], Some(Format::Html)),
        (Json, &["text/html"], Some(Format::Json)),
        (Auto, &[], Some(Format::Html)),
        (Auto, &["application/json"], Some(Format::Json)),
        (Auto, &["APPLICATION/JSON"], Some(Format::Json)),
        (Auto, &["text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"], Some(Format::Html)),
        (Auto, &["*/*"], Some(Format::Html)),
        (Auto, &["application/*"], Some(Format::Html)),
        (Auto, &["application/json;q=0"], Some(Format::Html)),
        (Auto, &["application/json; q=0.5, text/html"], Some(Format::Html)),
        (Auto, &["text/html;q=0.4, application/json;q=0.5"], Some(Format::Json)),
        (Auto, &["text/html", "application/json"], Some(Format::Json)),
        (Auto, &["application/json;q=2"], Some(Format::Html)),
        (Auto, &["application/json;q=0.0001"], Some(Format::Html)),
        (Auto, &["application/json ; charset=utf-8"], Some(Format::Json)),
    ];
    for (setting, accept, want) in cases {
        let lines: Vec<&[u8]> = accept.iter().map(|l| l.as_bytes()).collect();
        assert_eq!(negotiate(*setting, &lines), *want, "{setting} {accept:?}");
    }
}

#[test]
fn qvalues() {
    let cases: &[(&str, Option<u16>)] = &[
        ("1", Some(1000)),
        ("1.000", Some(1000)),
        ("1.001", None),
        ("0", Some(0)),
        ("0.5", Some(500)),
        ("0.123", Some(123)),
        ("0.1234", None),
        ("", None),
        (".5", None),
        ("0.x", None),
    ];
    for (text, want) in cases {
        assert_eq!(qvalue(text.as_bytes()), *want, "{text}");
    }
}

#[test]
fn directories_first_then_names_by_bytes() {
    let listing = Listing::new(
        vec![
            entry("b.txt", Kind::File, 1),
            entry("z", Kind::Dir, 0),
            entry("B", Kind::File, 1),
            entry("a", Kind::Dir, 0),
        ],
        false,
    );
    let names: Vec<&[u8]> = listing.entries.iter().map(|e| e.name.as_slice()).collect();
    assert_eq!(names, [&b"a"[..], b"z", b"B", b"b.txt"]);
}

#[test]
fn html_escapes_names_and_encodes_hrefs() {
    let listing = Listing::new(
        vec![
            entry("a&b<c>.txt", Kind::File, 7),
            entry("sp ace.txt", Kind::File, 0),
            entry("100%.txt", Kind::File, 1),
            entry("\u{fc}n\u{ef}.txt", Kind::File, 2),
            entry("#hash", Kind::File, 3),
            entry("q?'\"", Kind::File, 4),
            entry("d ir", Kind::Dir, 4096),
        ],
        false,
    );
    let mut out = Vec::new();
    render_html(&mut out, "sub dir/x".as_bytes(), &listing);
    let html = String::from_utf8(out).unwrap();
    for want in [
        "<title>Index of /sub dir/x/</title>",
        "<a href=\"/sub%20dir/\">../</a>",
        "<a href=\"/sub%20dir/x/a&amp;b%3Cc%3E.txt\">a&amp;b&lt;c&gt;.txt</a></td><td>7</td><td>1994-11-06T08:49:37Z</td>",
        "<a href=\"/sub%20dir/x/sp%20ace.txt\">sp ace.txt</a>",
        "<a href=\"/sub%20dir/x/100%25.txt\">100%.txt</a>",
        "<a href=\"/sub%20dir/x/%C3%BCn%C3%AF.txt\">\u{fc}n\u{ef}.txt</a>",
        "<a href=\"/sub%20dir/x/%23hash\">#hash</a>",
        "<a href=\"/sub%20dir/x/q%3F&#39;%22\">q?&#39;&quot;</a>",
        "<a href=\"/sub%20dir/x/d%20ir/\">d ir/</a></td><td>-</td>",
    ] {
        assert!(html.contains(want), "{want} missing in\n{html}");
    }
    assert!(!html.contains("a&b"), "an unescaped name in\n{html}");
    assert!(!html.contains("Truncated"), "{html}");
    // Directories first.
    assert!(html.find("d%20ir/").unwrap() < html.find("%23hash").unwrap(), "{html}");
}

#[test]
fn html_at_the_root_has_no_parent_and_says_when_it_is_cut() {
    let listing = Listing::new(vec![entry("a", Kind::File, 1)], true);
    let mut out = Vec::new();
    render_html(&mut out, b"", &listing);
    let html = String::from_utf8(out).unwrap();
    assert!(html.contains("<h1>Index of /</h1>"), "{html}");
    assert!(!html.contains("../"), "{html}");
    assert!(html.contains("<a href=\"/a\">a</a>"), "{html}");
    assert!(html.contains("Truncated: only the first 1 entries read are listed."), "{html}");
}

#[test]
fn json_has_each_field() {
    let listing = Listing::new(vec![entry("a&b <c>.txt", Kind::File, 7), entry("d", Kind::Dir, 4096)], true);
    let mut out = Vec::new();
    render_json(&mut out, "x/\u{fc}".as_bytes(), &listing);
    let doc: serde_json::Value = serde_json::from_slice(&out).unwrap();
    let want = serde_json::json!({
        "path": "/x/%C3%BC/",
        "truncated": true,
        "entries": [
            {"name": "d", "type": "dir", "size_bytes": null, "mtime": "1994-11-06T08:49:37Z", "url": "/x/%C3%BC/d/"},
            {"name": "a&b <c>.txt", "type": "file", "size_bytes": 7, "mtime": "1994-11-06T08:49:37Z",
             "url": "/x/%C3%BC/a&b%20%3Cc%3E.txt"},
        ],
    });
    assert_eq!(doc, want);
}

#[test]
fn non_utf8_names_show_replaced_and_link_exactly() {
    let listing =
        Listing::new(vec![Entry { name: b"a\xffb".to_vec(), kind: Kind::File, size_bytes: 1, mtime_secs: 0 }], false);
    let mut out = Vec::new();
    render_json(&mut out, b"", &listing);
    let doc: serde_json::Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(doc["entries"][0]["name"], "a\u{fffd}b");
    assert_eq!(doc["entries"][0]["url"], "/a%FFb");
}

#[test]
fn response_heads() {
    let mut head = Vec::new();
    write_head(&mut head, Status::OK, Format::Json, 3, true, (true, 1));
    let text = String::from_utf8(head.clone()).unwrap();
    assert!(text.starts_with("HTTP/1.1 200 OK\r\n"), "{text}");
    assert!(text.contains("\r\nContent-Type: application/json\r\nContent-Length: 3\r\nVary: Accept\r\n"), "{text}");
    assert!(text.ends_with("\r\n\r\n"), "{text}");
    write_head(&mut head, Status::OK, Format::Html, 4, false, (false, 1));
    let text = String::from_utf8(head.clone()).unwrap();
    assert!(text.contains("Content-Type: text/html; charset=utf-8\r\nContent-Length: 4\r\n"), "{text}");
    assert!(!text.contains("Vary"), "{text}");
    assert!(text.ends_with("Connection: close\r\n\r\n"), "{text}");
    write_head(&mut head, Status::NOT_MODIFIED, Format::Html, 0, true, (true, 0));
    let text = String::from_utf8(head).unwrap();
    assert!(text.starts_with("HTTP/1.1 304 Not Modified\r\n"), "{text}");
    assert!(!text.contains("Content-"), "{text}");
    assert!(text.ends_with("Vary: Accept\r\nConnection: keep-alive\r\n\r\n"), "{text}");
}

#[test]
fn preconditions_without_a_validator() {
    let lines = |v: &'static [&'static str]| -> Vec<&'static [u8]> { v.iter().map(|l| l.as_bytes()).collect() };
    let cases: &[(&[&str], &[&str], Answer)] = &[
        (&[], &[], Answer::List(Format::Html)),
        (&["\"a\""], &[], Answer::PreconditionFailed),
        (&["W/\"a\", \"b\""], &[], Answer::PreconditionFailed),
        (&["*"], &[], Answer::List(Format::Html)),
        (&["\"a\", *"], &[], Answer::List(Format::Html)),
        (&[""], &[], Answer::List(Format::Html)),
        (&[], &["*"], Answer::NotModified(Format::Html)),
        (&[], &["\"a\""], Answer::List(Format::Html)),
        (&["\"a\""], &["*"], Answer::PreconditionFailed),
    ];
    for (if_match, if_none_match, want) in cases {
        let (m, n) = (lines(if_match), lines(if_none_match));
        let ask = Ask { accept: &[], if_match: &m, if_none_match: &n };
        assert_eq!(decide(Listings::Html, &ask), *want, "{if_match:?} {if_none_match:?}");
    }
    let ask = Ask { accept: &[b"application/json"], if_match: &[b"\"a\""], if_none_match: &[] };
    assert_eq!(decide(Listings::Off, &ask), Answer::Forbidden);
    let ask = Ask { accept: &[b"application/json"], if_match: &[], if_none_match: &[b"*"] };
    assert_eq!(decide(Listings::Auto, &ask), Answer::NotModified(Format::Json));
}

/// A root with `d/` holding files, a dotfile, a directory, a FIFO, a symlink inside the
/// root and one leaving it.
fn sample_root() -> (tempfile::TempDir, Root) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    let d = root.join("d");
    std::fs::create_dir_all(d.join("inner")).unwrap();
    std::fs::write(dir.path().join("secret.txt"), b"secret").unwrap();
    std::fs::write(root.join("top.txt"), b"top").unwrap();
    std::fs::write(d.join("b.txt"), b"bb").unwrap();
    std::fs::write(d.join("a.txt"), b"a").unwrap();
    std::fs::write(d.join(".env"), b"SECRET=1").unwrap();
    std::fs::create_dir(d.join(".git")).unwrap();
    std::os::unix::fs::symlink("../top.txt", d.join("inside-link")).unwrap();
    std::os::unix::fs::symlink("../../secret.txt", d.join("outside-link")).unwrap();
    std::os::unix::fs::symlink("nowhere", d.join("dangling")).unwrap();
    let fifo = std::ffi::CString::new(d.join("fifo").into_os_string().into_encoded_bytes()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
    let opened = Root::open(&root, true).unwrap();
    (dir, opened)
}

fn open_dir(root: &Root, rel: &str) -> File {
    let mut scratch = Vec::new();
    match root.resolve(rel.as_bytes(), true, &mut scratch) {
        Ok(crate::resolve::Resolved::Directory { dir }) => dir,
        other => panic!("{rel}: not a directory without index: {other:?}"),
    }
}

#[test]
fn reads_what_the_server_would_serve() {
    let (_dir, root) = sample_root();
    let listing = read(&root, b"d", &open_dir(&root, "d"), 100).unwrap();
    let got: Vec<(&str, Kind, u64)> =
        listing.entries.iter().map(|e| (std::str::from_utf8(&e.name).unwrap(), e.kind, e.size_bytes)).collect();
    assert_eq!(
        got,
        [("inner", Kind::Dir, 0), ("a.txt", Kind::File, 1), ("b.txt", Kind::File, 2), ("inside-link", Kind::File, 3)]
    );
    assert!(!listing.truncated);
    let top = read(&root, b"", &open_dir(&root, ""), 100).unwrap();
    let names: Vec<&[u8]> = top.entries.iter().map(|e| e.name.as_slice()).collect();
    assert_eq!(names, [&b"d"[..], b"top.txt"]);
}

#[test]
fn outside_links_are_listed_only_when_followed() {
    let (_dir, confined) = sample_root();
    let free = Root::open(confined.path(), false).unwrap();
    let listing = read(&free, b"d", &open_dir(&free, "d"), 100).unwrap();
    assert!(listing.entries.iter().any(|e| e.name == b"outside-link"), "{listing:?}");
}

#[test]
fn the_limit_cuts_and_marks_the_listing() {
    let (_dir, root) = sample_root();
    // Four listable entries in d: a limit of 2 keeps two of them.
    let listing = read(&root, b"d", &open_dir(&root, "d"), 2).unwrap();
    assert_eq!(listing.entries.len(), 2);
    assert!(listing.truncated);
    let exact = read(&root, b"d", &open_dir(&root, "d"), 4).unwrap();
    assert_eq!((exact.entries.len(), exact.truncated), (4, false));
}

#[test]
fn examining_stops_at_the_scan_bound() {
    let dir = tempfile::tempdir().unwrap();
    for i in 0..20 {
        std::fs::write(dir.path().join(format!(".hidden{i}")), b"").unwrap();
    }
    std::fs::write(dir.path().join("shown"), b"").unwrap();
    let root = Root::open(dir.path(), true).unwrap();
    // A limit of 1 examines at most SCAN_FACTOR entries: 21 entries, mostly hidden, cut.
    let listing = read(&root, b"", &open_dir(&root, ""), 1).unwrap();
    assert!(listing.truncated, "{listing:?}");
    assert!(listing.entries.len() <= 1);
    let all = read(&root, b"", &open_dir(&root, ""), 100).unwrap();
    assert_eq!((all.entries.len(), all.truncated), (1, false));
}
