//! Response heads the state machine builds beyond errors: a file's (`200`, `206`, `304`,
//! `416`), the `301` adding a directory's slash, the `308` to HTTPS.

use super::split_target;
use crate::encoding::Coding;
use crate::http::{response, Status};

/// The head of a `301` adding the slash to a directory's path: `Location` is the
/// normalised `path` plus "/", `query` kept, built in `location` (a scratch buffer).
/// Never the raw target: `//host/dir` must not become `Location: //host/dir/`, a
/// redirect to another host. The normalised path has no empty segment, so the
/// value starts with exactly one slash.
pub(super) fn redirect_head(
    head: &mut Vec<u8>,
    location: &mut Vec<u8>,
    path: &[u8],
    query: Option<&[u8]>,
    keep_alive: bool,
    version_minor: u8,
) {
    location.clear();
    location.push(b'/');
    response::push_path_encoded(location, path);
    location.push(b'/');
    if let Some(q) = query {
        location.push(b'?');
        location.extend_from_slice(q);
    }
    response::begin(head, Status::MOVED_PERMANENTLY);
    response::header(head, b"Location", location);
    response::header(head, b"Content-Length", b"0");
    response::end(head, keep_alive, version_minor);
}

/// Where a plaintext request is sent with `redirect-https`: the same host (its port
/// replaced by the HTTPS listener's, left out when 443) and the same path and query.
pub(super) struct HttpsTarget<'a> {
    /// The request's `Host` (validated by the parser); `None` (HTTP/1.0): `localhost`.
    pub host: Option<&'a [u8]>,
    pub target: &'a [u8],
    pub port: u16,
}

impl HttpsTarget<'_> {
    /// The head of a `308` to it, the location built in `location` (a scratch buffer).
    pub(super) fn redirect_head(
        &self,
        head: &mut Vec<u8>,
        location: &mut Vec<u8>,
        keep_alive: bool,
        version_minor: u8,
    ) {
        location.clear();
        location.extend_from_slice(b"https://");
        let host = self.host.unwrap_or(b"localhost");
        // Without its port: `[v6]:80` → `[v6]`, `name:80` → `name`.
        let name_end = match host.first() {
            Some(b'[') => host.iter().position(|&b| b == b']').map_or(host.len(), |i| i + 1),
            _ => host.iter().position(|&b| b == b':').unwrap_or(host.len()),
        };
        location.extend_from_slice(&host[..name_end]);
        if self.port != 443 {
            location.push(b':');
            response::push_u64(location, u64::from(self.port));
        }
        match split_target(self.target) {
            Some((path, query)) => {
                location.extend_from_slice(path);
                if let Some(q) = query {
                    location.push(b'?');
                    location.extend_from_slice(q);
                }
            }
            None => location.push(b'/'),
        }
        response::begin(head, Status::PERMANENT_REDIRECT);
        response::header(head, b"Location", location);
        response::header(head, b"Content-Length", b"0");
        response::end(head, keep_alive, version_minor);
    }
}

/// The head of a response from a file (or of its `304` or `416`).
pub(super) struct FileHead<'a> {
    pub status: Status,
    /// The name the content type is taken from.
    pub name: &'a [u8],
    /// The body: `body_len` bytes from `offset`.
    pub offset: u64,
    pub body_len: u64,
    pub file_len: u64,
    pub mtime_secs: u64,
    pub etag: &'a [u8],
    /// The body is this coding's sidecar (`Content-Encoding`).
    pub coding: Option<Coding>,
    /// `Vary: Accept-Encoding`: the representation was chosen by it.
    pub vary: bool,
    /// The `Cache-Control` value a rule gives the file.
    pub cache_control: Option<&'a [u8]>,
}

impl FileHead<'_> {
    pub(super) fn write(&self, h: &mut Vec<u8>, keep_alive: bool, version_minor: u8) {
        let status = self.status;
        response::begin(h, status);
        if status != Status::NOT_MODIFIED && status != Status::RANGE_NOT_SATISFIABLE {
            response::header(h, b"Content-Type", response::content_type(self.name).as_bytes());
            response::header_u64(h, b"Content-Length", self.body_len);
            if let Some(coding) = self.coding {
                response::header(h, b"Content-Encoding", coding.token().as_bytes());
            }
        }
        if status == Status::RANGE_NOT_SATISFIABLE {
            response::header(h, b"Content-Length", b"0");
            h.extend_from_slice(b"Content-Range: bytes */");
            response::push_u64(h, self.file_len);
            h.extend_from_slice(b"\r\n");
        }
        if status == Status::PARTIAL_CONTENT {
            h.extend_from_slice(b"Content-Range: bytes ");
            response::push_u64(h, self.offset);
            h.push(b'-');
            response::push_u64(h, self.offset + self.body_len - 1);
            h.push(b'/');
            response::push_u64(h, self.file_len);
            h.extend_from_slice(b"\r\n");
        }
        h.extend_from_slice(b"Last-Modified: ");
        h.extend_from_slice(&crate::http::date::http_date(self.mtime_secs));
        h.extend_from_slice(b"\r\n");
        response::header(h, b"ETag", self.etag);
        response::header(h, b"Accept-Ranges", b"bytes");
        if self.vary {
            response::header(h, b"Vary", b"Accept-Encoding");
        }
        if let (Some(value), false) = (self.cache_control, status == Status::RANGE_NOT_SATISFIABLE) {
            response::header(h, b"Cache-Control", value);
        }
        response::end(h, keep_alive, version_minor);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn https_redirect_location_table() {
        // (host, target, port) → Location
        let cases: &[(Option<&str>, &str, u16, &str)] = &[
            (Some("example.com"), "/a/b?x=1", 443, "https://example.com/a/b?x=1"),
            (Some("example.com:8080"), "/", 8443, "https://example.com:8443/"),
            (Some("[::1]:80"), "/p", 443, "https://[::1]/p"),
            (None, "/p", 443, "https://localhost/p"),
            (Some("h"), "http://other/x?q", 443, "https://h/x?q"),
            (Some("h"), "*", 443, "https://h/"),
        ];
        for &(host, target, port, want) in cases {
            let https = HttpsTarget { host: host.map(str::as_bytes), target: target.as_bytes(), port };
            let (mut head, mut location) = (Vec::new(), Vec::new());
            https.redirect_head(&mut head, &mut location, true, 1);
            assert_eq!(std::str::from_utf8(&location).unwrap(), want, "{host:?} {target}");
            let head = String::from_utf8(head).unwrap();
            assert!(head.starts_with("HTTP/1.1 308 Permanent Redirect\r\n"), "{head}");
            assert!(head.contains(&format!("\r\nLocation: {want}\r\n")), "{head}");
        }
    }
}
