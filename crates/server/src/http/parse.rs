//! Request-head parsing: `httparse` plus the limits and the few headers the
//! server acts on.
//!
//! The parsed [`Request`] holds byte ranges into the read buffer, not borrows,
//! so the connection can keep reading and writing while it is alive and nothing
//! is copied or allocated per request.

use std::ops::Range;

use super::Status;
use crate::config::MAX_HEADERS_LIMIT;

/// Limits applied while a request head is read.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    pub max_request_line_bytes: usize,
    pub max_header_bytes: usize,
    pub max_headers: usize,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    Get,
    Head,
    /// Anything else: answered 405 with `Allow: GET, HEAD`.
    Other,
}

/// A request head, as ranges into the buffer it was parsed from.
#[derive(Clone, Debug, Default)]
pub struct Request {
    pub method: Option<Method>,
    /// The request line without its CRLF (for the access log).
    pub request_line: Range<usize>,
    pub target: Range<usize>,
    /// Minor version: 0 for HTTP/1.0, 1 for HTTP/1.1.
    pub version_minor: u8,
    /// Bytes of the head, blank line included.
    pub head_len: usize,
    pub host_count: u8,
    pub connection_close: bool,
    pub connection_keep_alive: bool,
    pub if_none_match: Option<Range<usize>>,
    pub if_modified_since: Option<Range<usize>>,
    pub range: Option<Range<usize>>,
    pub if_range: Option<Range<usize>>,
    pub referer: Option<Range<usize>>,
    pub user_agent: Option<Range<usize>>,
    pub content_length: Option<u64>,
    pub transfer_encoding: bool,
}

impl Request {
    pub fn method(&self) -> Method {
        self.method.unwrap_or(Method::Other)
    }

    /// Whether the client asked to keep the connection open (RFC 9112 §9.3).
    pub fn wants_keep_alive(&self) -> bool {
        if self.connection_close {
            false
        } else {
            self.version_minor >= 1 || self.connection_keep_alive
        }
    }
}

/// Parses the head at the start of `buf`. `Ok(None)`: incomplete, read more.
/// `Err(status)`: answer with that status and close the connection.
pub fn parse(buf: &[u8], limits: &Limits) -> Result<Option<Request>, Status> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS_LIMIT];
    let max_headers = limits.max_headers.min(MAX_HEADERS_LIMIT);
    let mut req = httparse::Request::new(&mut headers[..max_headers]);
    let head_len = match req.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => {
            // No line end within the request-line limit: the target is too long.
            let line_end = memchr(b'\n', &buf[..buf.len().min(limits.max_request_line_bytes + 2)]);
            if line_end.is_none() && buf.len() > limits.max_request_line_bytes + 1 {
                return Err(Status::URI_TOO_LONG);
            }
            if buf.len() >= limits.max_header_bytes {
                return Err(Status::HEADER_FIELDS_TOO_LARGE);
            }
            return Ok(None);
        }
        Err(httparse::Error::TooManyHeaders) => return Err(Status::HEADER_FIELDS_TOO_LARGE),
        Err(httparse::Error::Version) => {
            // httparse knows only HTTP/1.x; a well-formed other version is 505.
            return Err(if looks_like_other_version(buf) {
                Status::VERSION_NOT_SUPPORTED
            } else {
                Status::BAD_REQUEST
            });
        }
        Err(_) => return Err(Status::BAD_REQUEST),
    };
    let line_len = memchr(b'\n', buf).map(|i| if i > 0 && buf[i - 1] == b'\r' { i - 1 } else { i }).unwrap_or(0);
    if line_len > limits.max_request_line_bytes {
        return Err(Status::URI_TOO_LONG);
    }
    if head_len > limits.max_header_bytes {
        return Err(Status::HEADER_FIELDS_TOO_LARGE);
    }
    let base = buf.as_ptr() as usize;
    let range_of = |s: &[u8]| {
        let start = s.as_ptr() as usize - base;
        start..start + s.len()
    };
    let method = req.method.expect("complete request has a method");
    let path = req.path.expect("complete request has a target");
    let mut out = Request {
        method: Some(match method {
            "GET" => Method::Get,
            "HEAD" => Method::Head,
            _ => Method::Other,
        }),
        request_line: 0..line_len,
        target: range_of(path.as_bytes()),
        version_minor: req.version.expect("complete request has a version"),
        head_len,
        ..Request::default()
    };
    for h in req.headers.iter() {
        let name = h.name.as_bytes();
        let value = trim(h.value);
        let r = range_of(value);
        if name.eq_ignore_ascii_case(b"host") {
            out.host_count = out.host_count.saturating_add(1);
        } else if name.eq_ignore_ascii_case(b"connection") {
            for token in value.split(|&b| b == b',') {
                let token = trim(token);
                if token.eq_ignore_ascii_case(b"close") {
                    out.connection_close = true;
                } else if token.eq_ignore_ascii_case(b"keep-alive") {
                    out.connection_keep_alive = true;
                }
            }
        } else if name.eq_ignore_ascii_case(b"if-none-match") {
            out.if_none_match = Some(r);
        } else if name.eq_ignore_ascii_case(b"if-modified-since") {
            out.if_modified_since = Some(r);
        } else if name.eq_ignore_ascii_case(b"range") {
            if out.range.is_some() {
                return Err(Status::BAD_REQUEST);
            }
            out.range = Some(r);
        } else if name.eq_ignore_ascii_case(b"if-range") {
            out.if_range = Some(r);
        } else if name.eq_ignore_ascii_case(b"referer") {
            out.referer = Some(r);
        } else if name.eq_ignore_ascii_case(b"user-agent") {
            out.user_agent = Some(r);
        } else if name.eq_ignore_ascii_case(b"content-length") {
            // RFC 9112 §6.3: differing or invalid lengths are unrecoverable framing errors.
            let n = parse_u64(value).ok_or(Status::BAD_REQUEST)?;
            if out.content_length.is_some_and(|m| m != n) {
                return Err(Status::BAD_REQUEST);
            }
            out.content_length = Some(n);
        } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
            out.transfer_encoding = true;
        }
    }
    if out.transfer_encoding && out.content_length.is_some() {
        return Err(Status::BAD_REQUEST); // request smuggling shape (RFC 9112 §6.1)
    }
    if out.version_minor >= 1 && out.host_count != 1 || out.host_count > 1 {
        return Err(Status::BAD_REQUEST); // RFC 9112 §3.2: exactly one Host in HTTP/1.1
    }
    Ok(Some(out))
}

/// `METHOD SP TARGET SP HTTP/d.d`, with a version httparse does not speak.
fn looks_like_other_version(buf: &[u8]) -> bool {
    let line_end = memchr(b'\n', buf).unwrap_or(buf.len());
    let line = trim(&buf[..line_end]);
    line.rsplit(|&b| b == b' ').next().is_some_and(|v| {
        v.len() == 8 && v.starts_with(b"HTTP/") && v[5].is_ascii_digit() && v[6] == b'.' && v[7].is_ascii_digit()
    })
}

pub fn memchr(needle: u8, haystack: &[u8]) -> Option<usize> {
    haystack.iter().position(|&b| b == needle)
}

pub fn trim(mut s: &[u8]) -> &[u8] {
    while let [first, rest @ ..] = s {
        if first.is_ascii_whitespace() {
            s = rest;
        } else {
            break;
        }
    }
    while let [rest @ .., last] = s {
        if last.is_ascii_whitespace() {
            s = rest;
        } else {
            break;
        }
    }
    s
}

/// A decimal `u64` with no sign, no spaces and no overflow.
pub fn parse_u64(s: &[u8]) -> Option<u64> {
    if s.is_empty() || s.len() > 19 {
        return None;
    }
    let mut n: u64 = 0;
    for &b in s {
        if !b.is_ascii_digit() {
            return None;
        }
        n = n * 10 + u64::from(b - b'0');
    }
    Some(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: Limits = Limits { max_request_line_bytes: 64, max_header_bytes: 256, max_headers: 4 };

    fn status(buf: &[u8]) -> Result<Option<Request>, u16> {
        parse(buf, &LIMITS).map_err(|s| s.code)
    }

    #[test]
    fn parses_the_headers_it_needs() {
        let buf = b"GET /a?b HTTP/1.1\r\nHost: x\r\nConnection: keep-alive, Close\r\nRange: bytes=0-1\r\n\r\nNEXT";
        let r = parse(buf, &LIMITS).unwrap().unwrap();
        assert_eq!(r.method(), Method::Get);
        assert_eq!(&buf[r.target.clone()], b"/a?b");
        assert_eq!(&buf[r.request_line.clone()], b"GET /a?b HTTP/1.1");
        assert_eq!(&buf[r.range.clone().unwrap()], b"bytes=0-1");
        assert_eq!(r.head_len, buf.len() - 4);
        assert!(!r.wants_keep_alive());
    }

    #[test]
    fn status_table() {
        let long_target = format!("GET /{} HTTP/1.1\r\n", "a".repeat(100));
        let many = "GET / HTTP/1.1\r\nHost: x\r\nA: 1\r\nB: 1\r\nC: 1\r\nD: 1\r\n\r\n";
        let big = format!("GET / HTTP/1.1\r\nHost: x\r\nA: {}\r\n", "b".repeat(300));
        let cases: Vec<(&[u8], Result<bool, u16>)> = vec![
            (b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", Ok(true)),
            (b"GET / HTTP/1.1\r\nHost: x\r\n", Ok(false)),
            (b"GET / HTTP/1.0\r\n\r\n", Ok(true)),
            (b"GET / HTTP/1.1\r\n\r\n", Err(400)),
            (b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", Err(400)),
            (b"GET / HTTP/2.0\r\nHost: x\r\n\r\n", Err(505)),
            (b"GET / FTP/1.0\r\n\r\n", Err(400)),
            (b"G\0T / HTTP/1.1\r\n\r\n", Err(400)),
            (long_target.as_bytes(), Err(414)),
            (many.as_bytes(), Err(431)),
            (big.as_bytes(), Err(431)),
            (b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", Err(400)),
            (b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n", Err(400)),
            (b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n", Err(400)),
        ];
        for (buf, want) in cases {
            let got = status(buf).map(|r| r.is_some());
            assert_eq!(got, want, "{:?}", String::from_utf8_lossy(buf));
        }
    }

    #[test]
    fn keep_alive_rules() {
        let cases: &[(&[u8], bool)] = &[
            (b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", true),
            (b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", false),
            (b"GET / HTTP/1.0\r\n\r\n", false),
            (b"GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n", true),
        ];
        for (buf, want) in cases {
            assert_eq!(parse(buf, &LIMITS).unwrap().unwrap().wants_keep_alive(), *want);
        }
    }
}
