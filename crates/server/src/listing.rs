//! Directory listings (`--listings off|html|json|auto`): what a directory without
//! `index.html` is answered when listings are on.
//!
//! - What is listed: the directory's entries that the server would serve, each looked
//!   up through [`Root::metadata`] with the confinement of [`Root::resolve`] (a symlink
//!   leaving the root is left out, one inside it shows its target's type and size).
//!   Regular files and directories only; dotfiles never, whatever `--dotfiles` says.
//! - Order: directories first, then files, each by the bytes of their names (as nginx's
//!   `autoindex`).
//! - Bounds: at most `listing-max-entries` entries (at most [`MAX_ENTRIES_LIMIT`]), and at
//!   most [`SCAN_FACTOR`] directory entries examined per listed one (dotfiles and refused
//!   entries included), so a listing costs a bounded number of `openat2` calls however
//!   large the directory. Past either bound the listing is cut and says so (`truncated`);
//!   a cut listing holds the first entries the file system returned, sorted, not the
//!   first by name. An entry renders to at most about 2.5 KiB (a 255-byte name escaped
//!   and percent-encoded), so a listing's body stays under
//!   `listing-max-entries × 2.5 KiB`.
//! - Reading runs on tokio's blocking pool (`spawn_blocking`), never on a worker thread,
//!   at most [`MAX_CONCURRENT_BUILDS`] listings at once;
//!   the body is rendered into a buffer there, then into an anonymous in-memory file sent
//!   like any file, so the response's size, and with it its band, is known before its
//!   first byte.
//! - Validators: none. A directory's own modification time does not change when a file
//!   in it grows, so no cheap ETag or `Last-Modified` would be true. Without an entity
//!   tag, `If-Match` naming tags fails (412) and `If-None-Match: *` gives 304; the date
//!   conditions and `Range` are ignored, so the whole page is sent (RFC 9110 §13.1, §14.2).
//! - Names that are not UTF-8 are shown with U+FFFD in place of their bad bytes; their
//!   `url` percent-encodes the exact bytes, so the link still works.

use std::fs::File;
use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::sync::Arc;

use serde::Serialize;

use crate::config::Listings;
use crate::encoding::{qvalue, trim};
use crate::http::date::Stamp;
use crate::http::response;
use crate::http::Status;
use crate::resolve::{Refusal, Root};
use crate::site::Site;

/// Highest `listing-max-entries` accepted.
pub const MAX_ENTRIES_LIMIT: usize = 1_000_000;

/// Directory entries examined per entry a listing may hold.
pub const SCAN_FACTOR: usize = 4;

/// Listings read and rendered at once in the process; more wait their turn. Bounds the
/// blocking threads and the memory listings take (each page is at most about
/// `listing-max-entries × 2.5 KiB` while it is rendered).
pub const MAX_CONCURRENT_BUILDS: usize = 4;

static BUILDS: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(MAX_CONCURRENT_BUILDS);

/// The body's format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Html,
    Json,
}

impl Format {
    pub fn content_type(self) -> &'static [u8] {
        match self {
            Format::Html => b"text/html; charset=utf-8",
            Format::Json => b"application/json",
        }
    }
}

/// What a request for a directory without `index.html` asks, from its head.
#[derive(Clone, Copy, Debug, Default)]
pub struct Ask<'a> {
    /// The lines of `Accept`, `If-Match` and `If-None-Match`.
    pub accept: &'a [&'a [u8]],
    pub if_match: &'a [&'a [u8]],
    pub if_none_match: &'a [&'a [u8]],
}

/// How such a request is answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answer {
    /// Listings are off: 403, as without them.
    Forbidden,
    /// `If-Match` names entity tags: the page has none, so none matches (412).
    PreconditionFailed,
    /// `If-None-Match: *`: the page exists (304).
    NotModified(Format),
    List(Format),
}

/// The answer `setting` gives `ask`. Preconditions follow RFC 9110 §13.1.1 and §13.1.2
/// for a page without an entity tag (`If-Match: *` and `If-None-Match` with tags hold);
/// the date conditions need a modification date the page lacks and are ignored
/// (§13.1.3, §13.1.4), as `Range` is (§14.2).
pub fn decide(setting: Listings, ask: &Ask<'_>) -> Answer {
    let Some(format) = negotiate(setting, ask.accept) else { return Answer::Forbidden };
    let members = |lines: &[&[u8]]| {
        let mut members = lines.iter().flat_map(|l| l.split(|&b| b == b',')).map(trim).filter(|m| !m.is_empty());
        (members.clone().next().is_some(), members.any(|m| m == b"*"))
    };
    match (members(ask.if_match), members(ask.if_none_match)) {
        ((true, false), _) => Answer::PreconditionFailed,
        (_, (_, true)) => Answer::NotModified(format),
        _ => Answer::List(format),
    }
}

/// The format `setting` answers a request with these `Accept` lines; `None` when
/// listings are off. `auto`: JSON when `application/json` is named with a q above 0
/// and at least that of `text/html` (absent: 0); HTML otherwise. Only these two exact
/// media ranges count (`*/*` or `application/*` choose nothing).
pub fn negotiate(setting: Listings, accept: &[&[u8]]) -> Option<Format> {
    match setting {
        Listings::Off => None,
        Listings::Html => Some(Format::Html),
        Listings::Json => Some(Format::Json),
        Listings::Auto => {
            let json = quality(accept, b"application/json").unwrap_or(0);
            let html = quality(accept, b"text/html").unwrap_or(0);
            Some(if json > 0 && json >= html { Format::Json } else { Format::Html })
        }
    }
}

/// The q-value (thousandths) `Accept` gives `media` exactly; `None` if not named.
fn quality(accept: &[&[u8]], media: &[u8]) -> Option<u16> {
    let elements = accept.iter().flat_map(|line| line.split(|&b| b == b','));
    let mut best = None;
    for element in elements {
        let mut parts = element.split(|&b| b == b';');
        if !trim(parts.next().unwrap_or(b"")).eq_ignore_ascii_case(media) {
            continue;
        }
        let mut q = Some(1000);
        for param in parts {
            let param = trim(param);
            if param.len() >= 2 && param[..2].eq_ignore_ascii_case(b"q=") {
                q = qvalue(&param[2..]);
            }
        }
        best = best.max(q);
    }
    best
}

/// What kind of entry (only these two are listed).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    Dir,
    File,
}

/// One listed entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// The name's bytes, as in the directory.
    pub name: Vec<u8>,
    pub kind: Kind,
    /// Files only (a directory's size means nothing to a reader).
    pub size_bytes: u64,
    pub mtime_secs: u64,
}

/// A directory's listable entries, sorted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Listing {
    pub entries: Vec<Entry>,
    /// Entries were left out: more than the limit, or more than could be examined.
    pub truncated: bool,
}

impl Listing {
    /// Sorts `entries`: directories first, then by the bytes of the name.
    pub fn new(mut entries: Vec<Entry>, truncated: bool) -> Listing {
        entries.sort_unstable_by(|a, b| (a.kind, &a.name).cmp(&(b.kind, &b.name)));
        Listing { entries, truncated }
    }
}

/// Reads the listing of `dir`, the directory at the normalised path `rel` (no slashes
/// around it; empty for the root). Blocking: one `getdents64` per batch and one
/// `openat2(O_PATH)` and `fstat` per examined entry.
pub fn read(root: &Root, rel: &[u8], dir: &File, max_entries: usize) -> Result<Listing, Refusal> {
    let reader = rustix::fs::Dir::read_from(dir).map_err(|_| Refusal::Internal)?;
    let max_examined = max_entries.saturating_mul(SCAN_FACTOR);
    let mut entries = Vec::new();
    let mut path = Vec::with_capacity(rel.len() + 256);
    let mut examined = 0usize;
    for item in reader {
        let item = item.map_err(|_| Refusal::Internal)?;
        let name = item.file_name().to_bytes();
        if name == b"." || name == b".." {
            continue;
        }
        if examined == max_examined {
            return Ok(Listing::new(entries, true));
        }
        examined += 1;
        if name.starts_with(b".") {
            continue;
        }
        path.clear();
        if !rel.is_empty() {
            path.extend_from_slice(rel);
            path.push(b'/');
        }
        path.extend_from_slice(name);
        path.push(0);
        let Ok(meta) = root.metadata(&path) else { continue };
        let kind = if meta.is_dir() {
            Kind::Dir
        } else if meta.is_file() {
            Kind::File
        } else {
            continue; // FIFOs, sockets, devices: refused when asked for
        };
        if entries.len() == max_entries {
            return Ok(Listing::new(entries, true)); // one listable entry too many
        }
        let size_bytes = if kind == Kind::File { meta.len() } else { 0 };
        let mtime_secs = u64::try_from(meta.mtime()).unwrap_or(0);
        entries.push(Entry { name: name.to_vec(), kind, size_bytes, mtime_secs });
    }
    Ok(Listing::new(entries, false))
}

/// Reads and renders the listing of `dir` on the blocking pool, into an anonymous
/// in-memory file (`memfd`): the response is then sent as a file is (`sendfile`, or a TLS
/// record at a time), its length known. Returns the file and its length.
pub(crate) async fn build(
    site: Arc<Site>,
    max_entries: usize,
    rel: Vec<u8>,
    dir: File,
    format: Format,
) -> Result<(File, u64), Refusal> {
    let Ok(permit) = BUILDS.acquire().await else { return Err(Refusal::Internal) }; // never closed
    let task = tokio::task::spawn_blocking(move || {
        let _permit = permit; // held until the page is built, even if the client has left
        let listing = read(&site.root, &rel, &dir, max_entries)?;
        let mut body = Vec::new();
        match format {
            Format::Html => render_html(&mut body, &rel, &listing),
            Format::Json => render_json(&mut body, &rel, &listing),
        }
        let internal = |e: std::io::Error| {
            tracing::warn!(error = %e, "directory listing: cannot hold the page in memory");
            Refusal::Internal
        };
        let fd = rustix::fs::memfd_create("shortfirst-listing", rustix::fs::MemfdFlags::CLOEXEC)
            .map_err(|e| internal(e.into()))?;
        let mut file = File::from(fd);
        file.write_all(&body).map_err(internal)?;
        Ok((file, body.len() as u64))
    });
    task.await.unwrap_or(Err(Refusal::Internal))
}

/// The head of a listing's `200` of `body_len` bytes, or of its `304` (no content
/// headers), into `head`; `vary`: the format was negotiated (`auto`).
pub fn write_head(head: &mut Vec<u8>, status: Status, format: Format, body_len: u64, vary: bool, http: (bool, u8)) {
    let (keep_alive, version_minor) = http;
    response::begin(head, status);
    if status != Status::NOT_MODIFIED {
        response::header(head, b"Content-Type", format.content_type());
        response::header_u64(head, b"Content-Length", body_len);
    }
    if vary {
        response::header(head, b"Vary", b"Accept");
    }
    response::end(head, keep_alive, version_minor);
}

/// `/rel/` (or `/` for the root) percent-encoded, as a URL path.
fn push_dir_url(out: &mut Vec<u8>, rel: &[u8]) {
    out.push(b'/');
    if !rel.is_empty() {
        response::push_path_encoded(out, rel);
        out.push(b'/');
    }
}

/// An entry's URL: the directory's, then the name percent-encoded (`/` after a directory).
fn push_entry_url(out: &mut Vec<u8>, rel: &[u8], entry: &Entry) {
    push_dir_url(out, rel);
    response::push_path_encoded(out, &entry.name);
    if entry.kind == Kind::Dir {
        out.push(b'/');
    }
}

/// `text` with `&`, `<`, `>`, `"` and `'` escaped for HTML text and quoted attributes.
fn push_html_escaped(out: &mut Vec<u8>, text: &[u8]) {
    for &b in text {
        match b {
            b'&' => out.extend_from_slice(b"&amp;"),
            b'<' => out.extend_from_slice(b"&lt;"),
            b'>' => out.extend_from_slice(b"&gt;"),
            b'"' => out.extend_from_slice(b"&quot;"),
            b'\'' => out.extend_from_slice(b"&#39;"),
            _ => out.push(b),
        }
    }
}

/// The HTML page of a listing: a table of name (linked), size in bytes, modification
/// time (UTC, RFC 3339), a link to the parent first (except at the root), and a last
/// paragraph saying it was cut when it was.
pub fn render_html(out: &mut Vec<u8>, rel: &[u8], listing: &Listing) {
    let mut dir_name = Vec::with_capacity(rel.len() + 2);
    dir_name.push(b'/');
    if !rel.is_empty() {
        dir_name.extend_from_slice(rel);
        dir_name.push(b'/');
    }
    let dir_name = String::from_utf8_lossy(&dir_name).into_owned();
    out.extend_from_slice(b"<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>Index of ");
    push_html_escaped(out, dir_name.as_bytes());
    out.extend_from_slice(b"</title></head>\n<body>\n<h1>Index of ");
    push_html_escaped(out, dir_name.as_bytes());
    out.extend_from_slice(b"</h1>\n<table>\n<tr><th>Name</th><th>Size (bytes)</th><th>Modified (UTC)</th></tr>\n");
    if !rel.is_empty() {
        let parent = rel.iter().rposition(|&b| b == b'/').map_or(&b""[..], |i| &rel[..i]);
        out.extend_from_slice(b"<tr><td><a href=\"");
        let mut url = Vec::new();
        push_dir_url(&mut url, parent);
        push_html_escaped(out, &url);
        out.extend_from_slice(b"\">../</a></td><td></td><td></td></tr>\n");
    }
    let mut url = Vec::new();
    for entry in &listing.entries {
        url.clear();
        push_entry_url(&mut url, rel, entry);
        out.extend_from_slice(b"<tr><td><a href=\"");
        push_html_escaped(out, &url);
        out.extend_from_slice(b"\">");
        push_html_escaped(out, String::from_utf8_lossy(&entry.name).as_bytes());
        if entry.kind == Kind::Dir {
            out.push(b'/');
        }
        out.extend_from_slice(b"</a></td><td>");
        match entry.kind {
            Kind::File => response::push_u64(out, entry.size_bytes),
            Kind::Dir => out.push(b'-'),
        }
        out.extend_from_slice(b"</td><td>");
        out.extend_from_slice(&Stamp::new(entry.mtime_secs).rfc3339);
        out.extend_from_slice(b"</td></tr>\n");
    }
    out.extend_from_slice(b"</table>\n");
    if listing.truncated {
        out.extend_from_slice(b"<p class=\"truncated\">Truncated: only the first ");
        response::push_u64(out, listing.entries.len() as u64);
        out.extend_from_slice(b" entries read are listed.</p>\n");
    }
    out.extend_from_slice(b"</body></html>\n");
}

#[derive(Serialize)]
struct JsonListing<'a> {
    /// The directory's URL path.
    path: String,
    truncated: bool,
    entries: Vec<JsonEntry<'a>>,
}

#[derive(Serialize)]
struct JsonEntry<'a> {
    name: std::borrow::Cow<'a, str>,
    #[serde(rename = "type")]
    kind: &'static str,
    /// `null` for a directory.
    size_bytes: Option<u64>,
    /// RFC 3339, UTC, whole seconds.
    mtime: String,
    /// The entry's URL path, percent-encoded.
    url: String,
}

/// The JSON object of a listing: `{"path", "truncated", "entries": [{"name", "type"
/// ("file" or "dir"), "size_bytes" (null for a directory), "mtime", "url"}]}`.
pub fn render_json(out: &mut Vec<u8>, rel: &[u8], listing: &Listing) {
    let ascii = |b: Vec<u8>| String::from_utf8(b).expect("percent-encoded URLs are ASCII");
    let mut path = Vec::new();
    push_dir_url(&mut path, rel);
    let entries = listing
        .entries
        .iter()
        .map(|e| {
            let mut url = Vec::new();
            push_entry_url(&mut url, rel, e);
            JsonEntry {
                name: String::from_utf8_lossy(&e.name),
                kind: match e.kind {
                    Kind::File => "file",
                    Kind::Dir => "dir",
                },
                size_bytes: (e.kind == Kind::File).then_some(e.size_bytes),
                mtime: String::from_utf8_lossy(&Stamp::new(e.mtime_secs).rfc3339).into_owned(),
                url: ascii(url),
            }
        })
        .collect();
    let doc = JsonListing { path: ascii(path), truncated: listing.truncated, entries };
    serde_json::to_writer(&mut *out, &doc).expect("serialising to a Vec cannot fail");
    out.push(b'\n');
}

#[cfg(test)]
mod tests;
