//! Response-head writing into a reused buffer: no allocation, no `format!`.
//!
//! A head is `begin` (status line, `Server`, `Date`), then `header`s, then
//! `end` (the `Connection` header if needed and the blank line).

use super::date;
use super::Status;

/// The `Server` header value.
pub const SERVER: &[u8] = b"shortfirst";

/// Starts a head: clears `buf`, writes the status line, `Server` and `Date`.
pub fn begin(buf: &mut Vec<u8>, status: Status) {
    buf.clear();
    buf.extend_from_slice(b"HTTP/1.1 ");
    push_u64(buf, u64::from(status.code));
    buf.push(b' ');
    buf.extend_from_slice(status.reason.as_bytes());
    buf.extend_from_slice(b"\r\nServer: ");
    buf.extend_from_slice(SERVER);
    buf.extend_from_slice(b"\r\nDate: ");
    date::with_now(|s| buf.extend_from_slice(&s.http));
    buf.extend_from_slice(b"\r\n");
}

pub fn header(buf: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    buf.extend_from_slice(name);
    buf.extend_from_slice(b": ");
    buf.extend_from_slice(value);
    buf.extend_from_slice(b"\r\n");
}

pub fn header_u64(buf: &mut Vec<u8>, name: &[u8], value: u64) {
    buf.extend_from_slice(name);
    buf.extend_from_slice(b": ");
    push_u64(buf, value);
    buf.extend_from_slice(b"\r\n");
}

/// Ends the head. HTTP/1.1 persistence is implicit; HTTP/1.0 needs it said,
/// and closing must be said in both.
pub fn end(buf: &mut Vec<u8>, keep_alive: bool, version_minor: u8) {
    if !keep_alive {
        buf.extend_from_slice(b"Connection: close\r\n");
    } else if version_minor == 0 {
        buf.extend_from_slice(b"Connection: keep-alive\r\n");
    }
    buf.extend_from_slice(b"\r\n");
}

/// Writes a complete error (or other body-from-memory) response: a short
/// plain-text body naming the status. `allow` adds `Allow: GET, HEAD` (405).
/// Returns the body length.
pub fn error(buf: &mut Vec<u8>, status: Status, keep_alive: bool, version_minor: u8, with_body: bool) -> usize {
    begin(buf, status);
    if status == Status::METHOD_NOT_ALLOWED {
        header(buf, b"Allow", b"GET, HEAD");
    }
    if status == Status::SERVICE_UNAVAILABLE {
        header(buf, b"Retry-After", b"1");
    }
    let body_len = status.reason.len() + 5; // "404 " + reason + "\n"
    header(buf, b"Content-Type", b"text/plain; charset=utf-8");
    header_u64(buf, b"Content-Length", body_len as u64);
    end(buf, keep_alive, version_minor);
    if with_body {
        push_u64(buf, u64::from(status.code));
        buf.push(b' ');
        buf.extend_from_slice(status.reason.as_bytes());
        buf.push(b'\n');
    }
    body_len
}

pub fn push_u64(buf: &mut Vec<u8>, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    buf.extend_from_slice(&digits[i..]);
}

pub fn push_hex(buf: &mut Vec<u8>, mut n: u64) {
    let mut digits = [0u8; 16];
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b"0123456789abcdef"[(n & 0xf) as usize];
        n >>= 4;
        if n == 0 {
            break;
        }
    }
    buf.extend_from_slice(&digits[i..]);
}

/// What an ETag is made of: the file's identity, modification time to the
/// nanosecond, and size. A rewrite within the same second (same size) still
/// changes the time; a replacement by rename changes the inode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileVersion {
    pub inode: u64,
    pub mtime_ns: u64,
    pub size_bytes: u64,
}

/// Writes the ETag `"<inode hex>-<mtime ns hex>-<size hex>"`, weak (`W/`) when
/// the file changed less than a second before `now_ns`: file system timestamps
/// are coarser than a nanosecond (a clock tick), so a second change within the
/// same tick at the same size could keep the tag. A weak tag still serves
/// `If-None-Match`, but never `If-Match` or `If-Range` (RFC 9110 §8.8.1).
pub fn etag(buf: &mut Vec<u8>, v: FileVersion, now_ns: u64) {
    buf.clear();
    if now_ns < v.mtime_ns.saturating_add(1_000_000_000) {
        buf.extend_from_slice(b"W/");
    }
    buf.push(b'"');
    push_hex(buf, v.inode);
    buf.push(b'-');
    push_hex(buf, v.mtime_ns);
    buf.push(b'-');
    push_hex(buf, v.size_bytes);
    buf.push(b'"');
}

/// Appends `path` (decoded bytes) percent-encoded for a `Location` path: every
/// byte but unreserved characters, sub-delims, `:`, `@` and `/` is escaped
/// (RFC 3986 §3.3), so the value can only be read as a path on this server.
pub fn push_path_encoded(buf: &mut Vec<u8>, path: &[u8]) {
    for &b in path {
        let plain = super::parse::is_unreserved_or_sub_delim(b) || matches!(b, b':' | b'@' | b'/');
        if plain {
            buf.push(b);
        } else {
            buf.push(b'%');
            buf.push(b"0123456789ABCDEF"[usize::from(b >> 4)]);
            buf.push(b"0123456789ABCDEF"[usize::from(b & 0xf)]);
        }
    }
}

/// `Content-Type` from a path's extension; `application/octet-stream` if unknown.
pub fn content_type(path: &[u8]) -> &'static str {
    let name = path.rsplit(|&b| b == b'/').next().unwrap_or(path);
    let ext = match name.iter().rposition(|&b| b == b'.') {
        Some(dot) if dot > 0 => &name[dot + 1..],
        _ => return "application/octet-stream",
    };
    let Ok(ext) = std::str::from_utf8(ext) else { return "application/octet-stream" };
    match ext {
        // The commonest first, without a table lookup; and text gets a charset.
        "html" | "htm" => "text/html; charset=utf-8",
        "txt" => "text/plain; charset=utf-8",
        "css" => "text/css; charset=utf-8",
        "js" | "mjs" => "text/javascript; charset=utf-8",
        "json" => "application/json",
        _ => mime_guess::from_ext(ext).first_raw().unwrap_or("application/octet-stream"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_and_etags() {
        let mut b = Vec::new();
        for n in [0u64, 7, 10, 1234567890, u64::MAX] {
            b.clear();
            push_u64(&mut b, n);
            assert_eq!(b, n.to_string().as_bytes());
        }
        let v = FileVersion { inode: 0x2a, mtime_ns: 5_000_000_000, size_bytes: 256 };
        etag(&mut b, v, 6_000_000_000);
        assert_eq!(b, b"\"2a-12a05f200-100\"");
        etag(&mut b, v, 5_999_999_999);
        assert_eq!(b, b"W/\"2a-12a05f200-100\"", "changed within the last second: weak");
        etag(&mut b, FileVersion { mtime_ns: 5_000_000_001, ..v }, 9_000_000_000);
        assert_eq!(b, b"\"2a-12a05f201-100\"", "a nanosecond apart: another tag");
        etag(&mut b, FileVersion { inode: 0x2b, ..v }, 9_000_000_000);
        assert_eq!(b, b"\"2b-12a05f200-100\"", "another inode: another tag");
    }

    #[test]
    fn location_paths_are_encoded() {
        let cases: &[(&[u8], &str)] = &[
            (b"a/b", "a/b"),
            (b"a b/\\x", "a%20b/%5Cx"),
            (b"q?#%", "q%3F%23%25"),
            (b"\xc3\xa9\r\n", "%C3%A9%0D%0A"),
            (b"u:p@h;x=1", "u:p@h;x=1"),
        ];
        for (path, want) in cases {
            let mut b = Vec::new();
            push_path_encoded(&mut b, path);
            assert_eq!(String::from_utf8(b).unwrap(), *want, "{path:?}");
        }
    }

    #[test]
    fn content_types() {
        let cases = [
            ("/a/index.html", "text/html; charset=utf-8"),
            ("/x.png", "image/png"),
            ("/x.tar.gz", "application/gzip"),
            ("/noext", "application/octet-stream"),
            ("/.hidden", "application/octet-stream"),
            ("/dir.d/file", "application/octet-stream"),
        ];
        for (path, want) in cases {
            assert_eq!(content_type(path.as_bytes()), want, "{path}");
        }
    }

    #[test]
    fn error_response_is_well_formed() {
        let mut b = Vec::new();
        let body = error(&mut b, Status::METHOD_NOT_ALLOWED, false, 1, true);
        let text = String::from_utf8(b).unwrap();
        assert!(text.starts_with("HTTP/1.1 405 Method Not Allowed\r\n"), "{text}");
        assert!(text.contains("\r\nAllow: GET, HEAD\r\n"));
        assert!(text.contains("\r\nConnection: close\r\n"));
        assert!(text.ends_with("\r\n\r\n405 Method Not Allowed\n"));
        assert_eq!(body, "405 Method Not Allowed\n".len());
    }
}
