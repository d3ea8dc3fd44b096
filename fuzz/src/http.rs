//! `shortfirst serve`'s parsers: the request head, target resolution, and
//! conditional / range evaluation (with the chunked body decoder).

use std::path::PathBuf;
use std::sync::OnceLock;

use shortfirst_server::conn::split_target;
use shortfirst_server::http::chunked::Decoder;
use shortfirst_server::http::parse::{parse, Limits};
use shortfirst_server::http::precondition::{evaluate, Conditions, Validators, Verdict};
use shortfirst_server::resolve::{check_dotfiles, normalize, Refusal, Resolved, Root};
use shortfirst_server::Dotfiles;

use crate::fields;

const LIMITS: Limits = Limits { max_request_line_bytes: 512, max_header_bytes: 2048, max_headers: 32 };

/// Invariants: the buffer is left as it was; a complete head lies within the
/// input and every range the parser hands out lies within the head; parsing
/// just the head gives the same head; a shorter prefix is never complete; a
/// chunked body after it decodes the same whatever the split.
pub fn http_head(data: &[u8]) {
    let mut buf = data.to_vec();
    let result = parse(&mut buf, &LIMITS);
    assert_eq!(buf, data, "the parser changed its input");
    let Ok(Some(req)) = result else { return };
    assert!(req.head_len <= data.len() && req.head_len > 0);
    let within = |r: &std::ops::Range<usize>| r.start <= r.end && r.end <= req.head_len;
    assert!(within(&req.request_line) && within(&req.target));
    assert!(!data[req.target.clone()].is_empty());
    assert!(!data[req.target.clone()].contains(&b'#'), "fragment accepted");
    for r in req.if_match.lines().iter().chain(req.if_none_match.lines()) {
        assert!(within(r));
    }
    for r in [req.range.clone(), req.if_range.value(), req.if_modified_since.value(), req.referer.clone()]
        .into_iter()
        .flatten()
    {
        assert!(within(&r));
    }
    assert!(req.version_minor <= 1);
    let mut head = data[..req.head_len].to_vec();
    let again = parse(&mut head, &LIMITS).expect("the head alone parses").expect("the head alone is complete");
    assert_eq!(again.head_len, req.head_len);
    let cut = req.head_len / 2;
    if cut > 0 {
        assert!(!matches!(parse(&mut data[..cut].to_vec(), &LIMITS), Ok(Some(_))), "a prefix was complete");
    }
    if req.chunked {
        let body = &data[req.head_len..];
        let whole = Decoder::new(1 << 20, 4096).feed(body);
        let mut split = Decoder::new(1 << 20, 4096);
        let half = body.len() / 2;
        let first = split.feed(&body[..half]);
        let joined = match first {
            Ok((n, true)) => Ok((n, true)),
            Ok((n, false)) => {
                assert_eq!(n, half);
                split.feed(&body[half..]).map(|(m, done)| (half + m, done))
            }
            Err(e) => Err(e),
        };
        assert_eq!(whole, joined, "chunked decoding depends on the split");
    }
}

struct Fixture {
    root: Root,
    canonical: PathBuf,
}

/// A root with files, a directory, dotfiles and symlinks leading out of it,
/// made once per process under the temporary directory.
fn fixture() -> &'static Fixture {
    static FIXTURE: OnceLock<Fixture> = OnceLock::new();
    FIXTURE.get_or_init(|| {
        let base = std::env::temp_dir().join(format!("shortfirst-fuzz-root-{}", std::process::id()));
        let root = base.join("root");
        std::fs::create_dir_all(root.join("a/b")).unwrap();
        std::fs::create_dir_all(root.join(".git")).unwrap();
        std::fs::write(base.join("secret"), b"outside").unwrap();
        for f in ["index.html", "a/x", "a/b/index.html", ".git/config", "%2e"] {
            std::fs::write(root.join(f), b"inside").unwrap();
        }
        let link = |to: &str, at: &str| {
            let _ = std::os::unix::fs::symlink(to, root.join(at));
        };
        link("../secret", "up");
        link("/etc", "etc");
        link("a", "in");
        link("..", "parent");
        let canonical = root.canonicalize().unwrap();
        Fixture { root: Root::open(&root, true).unwrap(), canonical }
    })
}

/// Invariants: a normalised path has no empty, `.` or `..` segment, no NUL
/// and no leading slash; whatever opens lies under the root (checked on the
/// opened file's real path); dotfile refusal holds for every spelling.
pub fn resolve_target(data: &[u8]) {
    let Some((path, _query)) = split_target(data) else { return };
    let mut rel = Vec::new();
    let Ok(slash) = normalize(path, &mut rel) else { return };
    assert!(!rel.starts_with(b"/") && !rel.contains(&0));
    if !rel.is_empty() {
        for seg in rel.split(|&b| b == b'/') {
            assert!(!seg.is_empty() && seg != b"." && seg != b"..", "segment {seg:?} in {rel:?}");
        }
    }
    let hidden = check_dotfiles(&rel, Dotfiles::Ignore);
    assert_eq!(hidden.is_err(), check_dotfiles(&rel, Dotfiles::Deny).is_err());
    assert!(check_dotfiles(&rel, Dotfiles::Allow).is_ok());
    let f = fixture();
    let mut scratch = Vec::new();
    match f.root.resolve(&rel, slash, &mut scratch) {
        Ok(Resolved::File { file, .. }) => {
            use std::os::fd::AsRawFd;
            let real = std::fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd())).unwrap();
            assert!(real.starts_with(&f.canonical), "{rel:?} opened {}", real.display());
        }
        Ok(Resolved::Directory { dir }) => {
            // A directory without an index (listed when listings are on) lies under the root too.
            use std::os::fd::AsRawFd;
            let real = std::fs::read_link(format!("/proc/self/fd/{}", dir.as_raw_fd())).unwrap();
            assert!(real.starts_with(&f.canonical), "{rel:?} listed {}", real.display());
        }
        Ok(Resolved::AddSlash) => assert!(!slash),
        Err(Refusal::BadRequest | Refusal::Forbidden | Refusal::NotFound | Refusal::Internal) => {}
    }
}

/// Input: length and mtime (8 bytes each), then NUL-separated If-Match,
/// If-None-Match, If-Modified-Since, If-Unmodified-Since, Range, If-Range and
/// the ETag. Invariants: a partial range lies within the file; 304 and 412
/// only when a header asked for them; no range without `Range` on a GET.
pub fn range_conditions(data: &[u8]) {
    if data.len() < 17 {
        return;
    }
    let len = u64::from_le_bytes(data[..8].try_into().unwrap()) >> (data[16] % 64);
    let mtime_secs = u64::from_le_bytes(data[8..16].try_into().unwrap()) >> 30;
    let [im, inm, ims, ius, range, if_range, etag] = fields::<7>(&data[17..]);
    let im_lines = [im];
    let inm_lines = [inm];
    let c = Conditions {
        if_match: if im.is_empty() { &[] } else { &im_lines },
        if_none_match: if inm.is_empty() { &[] } else { &inm_lines },
        if_modified_since: non_empty(ims),
        if_unmodified_since: non_empty(ius),
        range: non_empty(range),
        if_range: non_empty(if_range),
        is_get: data[16] & 1 == 0,
    };
    let etag = if etag.is_empty() { &b"\"1-2-3\""[..] } else { etag };
    let v = Validators { etag, mtime_secs, last_modified_strong: data[16] & 2 == 0 };
    match evaluate(&c, &v, len) {
        Verdict::Partial { start, end } => {
            assert!(start <= end && end < len, "range {start}-{end} of a {len}-byte file");
            assert!(c.range.is_some() && c.is_get);
        }
        Verdict::NotModified => assert!(c.if_none_match.len() + usize::from(c.if_modified_since.is_some()) > 0),
        Verdict::PreconditionFailed => {
            assert!(c.if_match.len() + usize::from(c.if_unmodified_since.is_some()) > 0)
        }
        Verdict::Unsatisfiable => assert!(c.range.is_some() && c.is_get),
        Verdict::Full => {}
    }
}

fn non_empty(v: &[u8]) -> Option<&[u8]> {
    (!v.is_empty()).then_some(v)
}
