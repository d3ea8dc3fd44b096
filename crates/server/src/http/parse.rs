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
    /// A method RFC 9110 (or PATCH, RFC 5789) defines that a static server does
    /// not allow: 405 with `Allow: GET, HEAD`.
    NotAllowed,
    /// Any other method: 501 (RFC 9110 §9.1).
    Unknown,
}

impl Method {
    fn from_token(token: &str) -> Method {
        match token {
            "GET" => Method::Get,
            "HEAD" => Method::Head,
            "POST" | "PUT" | "DELETE" | "CONNECT" | "OPTIONS" | "TRACE" | "PATCH" => Method::NotAllowed,
            _ => Method::Unknown,
        }
    }
}

/// How many lines of one list-valued header (`If-Match`, `If-None-Match`, `Accept`) are
/// kept; a request with more lines of one of them is answered 431.
pub const MAX_LIST_LINES: usize = 8;

/// The lines of a list-valued header field, which combine into one list
/// (RFC 9110 §5.3), as ranges into the buffer.
#[derive(Clone, Debug, Default)]
pub struct FieldLines {
    lines: [Range<usize>; MAX_LIST_LINES],
    len: usize,
}

impl FieldLines {
    fn push(&mut self, r: Range<usize>) -> Result<(), Status> {
        let slot = self.lines.get_mut(self.len).ok_or(Status::HEADER_FIELDS_TOO_LARGE)?;
        *slot = r;
        self.len += 1;
        Ok(())
    }

    pub fn is_present(&self) -> bool {
        self.len > 0
    }

    pub fn lines(&self) -> &[Range<usize>] {
        &self.lines[..self.len]
    }
}

/// A header field that takes one value: a request with several lines of it
/// gets `None` from [`Singleton::value`], as if it had none (RFC 9110 §13.1.3,
/// §13.1.4: a field value with more than one member is ignored).
#[derive(Clone, Debug, Default)]
pub struct Singleton {
    first: Option<Range<usize>>,
    repeated: bool,
}

impl Singleton {
    fn push(&mut self, r: Range<usize>) {
        if self.first.is_some() {
            self.repeated = true;
        } else {
            self.first = Some(r);
        }
    }

    pub fn value(&self) -> Option<Range<usize>> {
        if self.repeated {
            None
        } else {
            self.first.clone()
        }
    }

    pub fn is_present(&self) -> bool {
        self.first.is_some()
    }
}

/// A request head, as ranges into the buffer it was parsed from.
#[derive(Clone, Debug, Default)]
pub struct Request {
    pub method: Option<Method>,
    /// The request line without its CRLF (for the access log).
    pub request_line: Range<usize>,
    pub target: Range<usize>,
    /// Minor version: 0 for HTTP/1.0, 1 for HTTP/1.1 (and for any later 1.x,
    /// which is answered as 1.1, RFC 9110 §2.5).
    pub version_minor: u8,
    /// Bytes of the head, blank line included.
    pub head_len: usize,
    pub host_count: u8,
    /// The (valid) `Host` value, for a redirect to HTTPS.
    pub host: Option<Range<usize>>,
    pub connection_close: bool,
    pub connection_keep_alive: bool,
    pub if_match: FieldLines,
    pub if_none_match: FieldLines,
    pub if_modified_since: Singleton,
    pub if_unmodified_since: Singleton,
    pub range: Option<Range<usize>>,
    pub if_range: Singleton,
    /// `Accept-Encoding`, for a precompressed sidecar (`encoding`).
    pub accept_encoding: FieldLines,
    pub referer: Option<Range<usize>>,
    pub user_agent: Option<Range<usize>>,
    /// Read only to choose a directory listing's format (`--listings auto`).
    pub accept: FieldLines,
    pub content_length: Option<u64>,
    /// The body is chunked (the only transfer coding accepted, RFC 9112 §7.1).
    pub chunked: bool,
}

impl Request {
    pub fn method(&self) -> Method {
        self.method.unwrap_or(Method::Unknown)
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

/// The transfer codings of a request, line after line, in order (RFC 9112 §6.1).
#[derive(Default)]
struct Codings {
    present: bool,
    chunked_count: u32,
    last_is_chunked: bool,
    chunked_not_final: bool,
    unknown: bool,
}

impl Codings {
    fn add_line(&mut self, value: &[u8]) {
        self.present = true;
        for element in value.split(|&b| b == b',') {
            // transfer-coding = token *( OWS ";" OWS transfer-parameter )
            let coding = trim(element.split(|&b| b == b';').next().unwrap_or(b""));
            if coding.is_empty() {
                continue; // empty list elements are allowed (RFC 9110 §5.6.1)
            }
            if self.last_is_chunked {
                self.chunked_not_final = true;
            }
            self.last_is_chunked = coding.eq_ignore_ascii_case(b"chunked");
            if self.last_is_chunked {
                self.chunked_count += 1;
            } else {
                self.unknown = true;
            }
        }
    }

    /// `Ok(true)`: a chunked body follows. 400 when the length cannot be known
    /// (chunked not final, or twice: §6.3, §6.1); 501 for a coding we do not
    /// implement (§6.1).
    fn framing(&self) -> Result<bool, Status> {
        if !self.present {
            return Ok(false);
        }
        if self.chunked_not_final || self.chunked_count > 1 {
            return Err(Status::BAD_REQUEST);
        }
        if self.unknown {
            return Err(Status::NOT_IMPLEMENTED);
        }
        if !self.last_is_chunked {
            return Err(Status::BAD_REQUEST); // an empty list
        }
        Ok(true)
    }
}

/// Parses the head at the start of `buf`. `Ok(None)`: incomplete, read more.
/// `Err(status)`: answer with that status and close the connection.
///
/// `buf` is mutable only so that an `HTTP/1.x` version above 1.1 can be read
/// as 1.1 (httparse knows 1.0 and 1.1): its minor digit is patched for the
/// parse and restored before returning.
pub fn parse(buf: &mut [u8], limits: &Limits) -> Result<Option<Request>, Status> {
    match parse_head(buf, limits) {
        Err(Status::VERSION_NOT_SUPPORTED) => {}
        other => return other,
    }
    let Some(digit_at) = later_minor_version(buf) else {
        // httparse refuses the version as soon as it sees its digits; a request line cut
        // by a read right after `HTTP/1.2` may still end well.
        return if awaits_line_end_of_later_minor(buf) { Ok(None) } else { Err(Status::VERSION_NOT_SUPPORTED) };
    };
    let digit = buf[digit_at];
    buf[digit_at] = b'1';
    let result = parse_head(buf, limits);
    buf[digit_at] = digit;
    result
}

/// Parses one request head, deciding the status of a bad one in the order of
/// RFC 9112's checks: syntax and sizes, target, header fields, then framing and `Host`.
fn parse_head(buf: &[u8], limits: &Limits) -> Result<Option<Request>, Status> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS_LIMIT];
    let max_headers = limits.max_headers.min(MAX_HEADERS_LIMIT);
    let mut req = httparse::Request::new(&mut headers[..max_headers]);
    let Some(head_len) = complete_head_len(req.parse(buf), buf, limits)? else { return Ok(None) };
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
    if !valid_target(path.as_bytes()) {
        return Err(Status::BAD_REQUEST);
    }
    let mut out = Request {
        method: Some(Method::from_token(method)),
        request_line: 0..line_len,
        target: range_of(path.as_bytes()),
        version_minor: req.version.expect("complete request has a version"),
        head_len,
        ..Request::default()
    };
    let mut codings = Codings::default();
    for h in req.headers.iter() {
        let value = trim(h.value);
        out.add_field(h.name.as_bytes(), value, range_of(value), &mut codings)?;
    }
    if codings.present && (out.content_length.is_some() || out.version_minor == 0) {
        // Request smuggling shape, or a coding HTTP/1.0 does not have: the framing
        // cannot be trusted (RFC 9112 §6.1, §6.3).
        return Err(Status::BAD_REQUEST);
    }
    out.chunked = codings.framing()?;
    if out.version_minor >= 1 && out.host_count != 1 || out.host_count > 1 {
        return Err(Status::BAD_REQUEST); // RFC 9112 §3.2: exactly one Host in HTTP/1.1
    }
    Ok(Some(out))
}

/// The length of the head from httparse's `result`: `Ok(None)` while it is
/// incomplete and within the limits, else the status of what is wrong.
fn complete_head_len(result: httparse::Result<usize>, buf: &[u8], limits: &Limits) -> Result<Option<usize>, Status> {
    match result {
        Ok(httparse::Status::Complete(n)) => Ok(Some(n)),
        Ok(httparse::Status::Partial) => {
            // No line end within the request-line limit: the target is too long.
            let line_end = memchr(b'\n', &buf[..buf.len().min(limits.max_request_line_bytes + 2)]);
            if line_end.is_none() && buf.len() > limits.max_request_line_bytes + 1 {
                return Err(Status::URI_TOO_LONG);
            }
            if buf.len() >= limits.max_header_bytes {
                return Err(Status::HEADER_FIELDS_TOO_LARGE);
            }
            Ok(None)
        }
        Err(httparse::Error::TooManyHeaders) => Err(Status::HEADER_FIELDS_TOO_LARGE),
        Err(httparse::Error::Version) => {
            // httparse knows only HTTP/1.0 and 1.1; a well-formed other version is 505.
            Err(if looks_like_other_version(buf) { Status::VERSION_NOT_SUPPORTED } else { Status::BAD_REQUEST })
        }
        Err(_) => Err(Status::BAD_REQUEST),
    }
}

impl Request {
    /// Takes in one header field: `value` (trimmed) lies at `r` in the buffer.
    /// Transfer codings go to `codings`, judged once every field is in.
    fn add_field(&mut self, name: &[u8], value: &[u8], r: Range<usize>, codings: &mut Codings) -> Result<(), Status> {
        if name.eq_ignore_ascii_case(b"host") {
            self.host_count = self.host_count.saturating_add(1);
            if !valid_host(value) {
                return Err(Status::BAD_REQUEST); // RFC 9112 §3.2: an invalid Host value
            }
            self.host = Some(r);
        } else if name.eq_ignore_ascii_case(b"connection") {
            self.add_connection_options(value);
        } else if name.eq_ignore_ascii_case(b"if-match") {
            self.if_match.push(r)?;
        } else if name.eq_ignore_ascii_case(b"if-none-match") {
            self.if_none_match.push(r)?;
        } else if name.eq_ignore_ascii_case(b"if-modified-since") {
            self.if_modified_since.push(r);
        } else if name.eq_ignore_ascii_case(b"if-unmodified-since") {
            self.if_unmodified_since.push(r);
        } else if name.eq_ignore_ascii_case(b"range") {
            if self.range.is_some() {
                return Err(Status::BAD_REQUEST);
            }
            self.range = Some(r);
        } else if name.eq_ignore_ascii_case(b"if-range") {
            self.if_range.push(r);
        } else if name.eq_ignore_ascii_case(b"accept-encoding") {
            self.accept_encoding.push(r)?;
        } else if name.eq_ignore_ascii_case(b"referer") {
            self.referer = Some(r);
        } else if name.eq_ignore_ascii_case(b"user-agent") {
            self.user_agent = Some(r);
        } else if name.eq_ignore_ascii_case(b"accept") {
            self.accept.push(r)?;
        } else if name.eq_ignore_ascii_case(b"content-length") {
            // RFC 9112 §6.3: differing or invalid lengths are unrecoverable framing errors.
            let n = parse_u64(value).ok_or(Status::BAD_REQUEST)?;
            if self.content_length.is_some_and(|m| m != n) {
                return Err(Status::BAD_REQUEST);
            }
            self.content_length = Some(n);
        } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
            codings.add_line(value);
        }
        Ok(())
    }

    /// The `close` and `keep-alive` options of one `Connection` line.
    fn add_connection_options(&mut self, value: &[u8]) {
        for token in value.split(|&b| b == b',') {
            let token = trim(token);
            if token.eq_ignore_ascii_case(b"close") {
                self.connection_close = true;
            } else if token.eq_ignore_ascii_case(b"keep-alive") {
                self.connection_keep_alive = true;
            }
        }
    }
}

/// A request-target has no fragment (RFC 9112 §3.2: `origin-form` and
/// `absolute-form` end at the query), and an absolute-form target has no
/// userinfo (RFC 9110 §4.2.4: its presence is an error) and a valid host.
fn valid_target(target: &[u8]) -> bool {
    if target.contains(&b'#') {
        return false;
    }
    if target.first() == Some(&b'/') || target == b"*" {
        return true;
    }
    let Some(scheme_end) = target.windows(3).position(|w| w == b"://") else { return true };
    let rest = &target[scheme_end + 3..];
    let authority = &rest[..rest.iter().position(|&b| b == b'/' || b == b'?').unwrap_or(rest.len())];
    !authority.is_empty() && valid_host(authority)
}

/// `Host = uri-host [ ":" port ]` (RFC 9110 §7.2), the host a reg-name, IPv4
/// address or bracketed IP literal (RFC 3986 §3.2.2); empty is allowed (§7.2:
/// for a target without authority). No userinfo, path, or white space.
pub fn valid_host(value: &[u8]) -> bool {
    let (host, port) = if value.first() == Some(&b'[') {
        let Some(close) = memchr(b']', value) else { return false };
        let literal = &value[1..close];
        if literal.is_empty() || !literal.iter().all(|&b| b.is_ascii_hexdigit() || matches!(b, b':' | b'.')) {
            return false;
        }
        match &value[close + 1..] {
            [] => (&value[..0], None),
            [b':', port @ ..] => (&value[..0], Some(port)),
            _ => return false,
        }
    } else {
        match memchr(b':', value) {
            Some(i) => (&value[..i], Some(&value[i + 1..])),
            None => (value, None),
        }
    };
    let reg_name = |b: &u8| is_unreserved_or_sub_delim(*b) || *b == b'%';
    host.iter().all(reg_name) && port.map_or(true, |p| p.len() <= 5 && p.iter().all(u8::is_ascii_digit))
}

/// Where the minor digit of an `HTTP/1.d` version (d ≥ 2) ends the request line.
fn later_minor_version(buf: &[u8]) -> Option<usize> {
    let line_end = memchr(b'\n', buf)?;
    let line_end = if line_end > 0 && buf[line_end - 1] == b'\r' { line_end - 1 } else { line_end };
    let line = &buf[..line_end];
    let v = line.get(line.len().checked_sub(9)?..)?;
    (v.starts_with(b" HTTP/1.") && (b'2'..=b'9').contains(&v[8])).then_some(line_end - 1)
}

/// No line end yet, and what there is of the request line ends in an `HTTP/1.d` version
/// (d ≥ 2), maybe followed by its CR: whether it is a 1.x request is known at the line end.
fn awaits_line_end_of_later_minor(buf: &[u8]) -> bool {
    if memchr(b'\n', buf).is_some() {
        return false;
    }
    let line = buf.strip_suffix(b"\r").unwrap_or(buf);
    let Some(v) = line.get(line.len().saturating_sub(9)..).filter(|v| v.len() == 9) else { return false };
    v.starts_with(b" HTTP/1.") && (b'2'..=b'9').contains(&v[8])
}

/// `METHOD SP TARGET SP HTTP/d.d`, with a version httparse does not speak.
/// A line with more than two spaces (a raw space in the target) is a bad
/// request, whatever its last word.
fn looks_like_other_version(buf: &[u8]) -> bool {
    let line_end = memchr(b'\n', buf).unwrap_or(buf.len());
    let line = trim(&buf[..line_end]);
    line.iter().filter(|&&b| b == b' ').count() == 2
        && line.rsplit(|&b| b == b' ').next().is_some_and(|v| {
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

/// RFC 3986 §2.3 unreserved characters and §2.2 sub-delims: the bytes a host name
/// (with `%`) and a path segment (with `:`, `@`) may carry unescaped.
pub(crate) fn is_unreserved_or_sub_delim(b: u8) -> bool {
    b.is_ascii_alphanumeric()
        || matches!(
            b,
            b'-' | b'.' | b'_' | b'~' | b'!' | b'$' | b'&' | b'\'' | b'(' | b')' | b'*' | b'+' | b',' | b';' | b'='
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: Limits = Limits { max_request_line_bytes: 64, max_header_bytes: 256, max_headers: 4 };

    fn status(buf: &[u8]) -> Result<Option<Request>, u16> {
        let mut copy = buf.to_vec();
        let got = parse(&mut copy, &LIMITS).map_err(|s| s.code);
        assert_eq!(copy, buf, "the buffer is left as it was");
        got
    }

    #[test]
    fn parses_the_headers_it_needs() {
        let buf = b"GET /a?b HTTP/1.1\r\nHost: x\r\nConnection: keep-alive, Close\r\nRange: bytes=0-1\r\n\r\nNEXT";
        let r = status(buf).unwrap().unwrap();
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
            // Later 1.x versions are read as 1.1; a raw space in the target is no version problem.
            (b"GET / HTTP/1.2\r\nHost: x\r\n\r\n", Ok(true)),
            (b"GET / HTTP/1.2\r\nHost: x\r\n", Ok(false)),
            (b"GET / HTTP/1.2", Ok(false)),
            (b"GET / HTTP/1.2\r", Ok(false)),
            (b"GET / HTTP/2.0", Err(505)),
            (b"GET / HTTP/1.2\r\n\r\n", Err(400)),
            (b"GET /a b HTTP/1.1\r\nHost: x\r\n\r\n", Err(400)),
            (b"GET / x HTTP/2.0\r\nHost: x\r\n\r\n", Err(400)),
            // Targets: no fragment, no userinfo.
            (b"GET /a#b HTTP/1.1\r\nHost: x\r\n\r\n", Err(400)),
            (b"GET http://u:p@h/ HTTP/1.1\r\nHost: x\r\n\r\n", Err(400)),
            (b"GET http:/// HTTP/1.1\r\nHost: x\r\n\r\n", Err(400)),
            (b"GET http://h/?a@b HTTP/1.1\r\nHost: x\r\n\r\n", Ok(true)),
            // Host values.
            (b"GET / HTTP/1.1\r\nHost: a/b\r\n\r\n", Err(400)),
            (b"GET / HTTP/1.1\r\nHost: [::1]:8080\r\n\r\n", Ok(true)),
            (b"GET / HTTP/1.1\r\nHost:\r\n\r\n", Ok(true)),
            (b"GET / HTTP/1.0\r\nHost: a b\r\n\r\n", Err(400)),
            // Transfer codings.
            (b"GET / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n", Ok(true)),
            (b"GET / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked, identity\r\n\r\n", Err(400)),
            (
                b"GET / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n",
                Err(400),
            ),
            (b"GET / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", Err(501)),
            (b"GET / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: x\r\n\r\n", Err(501)),
            (b"GET / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: ,\r\n\r\n", Err(400)),
            (b"GET / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", Err(400)),
        ];
        for (buf, want) in cases {
            let got = status(buf).map(|r| r.is_some());
            assert_eq!(got, want, "{:?}", String::from_utf8_lossy(buf));
            if want == Ok(true) {
                // A head that parses whole waits, and is never refused, when a read cuts it.
                for cut in 0..buf.len() {
                    let got = status(&buf[..cut]).map(|r| r.is_some());
                    assert_eq!(got, Ok(false), "{:?} cut at {cut}", String::from_utf8_lossy(buf));
                }
            }
        }
    }

    #[test]
    fn methods_and_repeated_fields() {
        let cases: &[(&str, Method)] = &[
            ("GET", Method::Get),
            ("HEAD", Method::Head),
            ("POST", Method::NotAllowed),
            ("PATCH", Method::NotAllowed),
            ("BREW", Method::Unknown),
            ("get", Method::Unknown),
        ];
        for (m, want) in cases {
            let buf = format!("{m} / HTTP/1.1\r\nHost: x\r\n\r\n");
            assert_eq!(status(buf.as_bytes()).unwrap().unwrap().method(), *want, "{m}");
        }
        let buf = b"GET / HTTP/1.1\r\nHost: x\r\nIf-None-Match: \"a\"\r\nIf-None-Match: \"b\"\r\nIf-Modified-Since: x\r\nIf-Modified-Since: y\r\nIf-Unmodified-Since: z\r\n\r\n";
        let limits = Limits { max_request_line_bytes: 64, max_header_bytes: 1024, max_headers: 64 };
        let r = parse(&mut buf.to_vec(), &limits).unwrap().unwrap();
        let lines: Vec<&[u8]> = r.if_none_match.lines().iter().map(|l| &buf[l.clone()]).collect();
        assert_eq!(lines, [&b"\"a\""[..], b"\"b\""]);
        assert!(r.if_modified_since.is_present() && r.if_modified_since.value().is_none(), "repeated: no value");
        assert_eq!(r.if_unmodified_since.value().map(|v| &buf[v]), Some(&b"z"[..]));
        let many = format!("GET / HTTP/1.1\r\nHost: x\r\n{}\r\n", "If-Match: \"a\"\r\n".repeat(MAX_LIST_LINES + 1));
        assert_eq!(parse(&mut many.into_bytes(), &limits).unwrap_err().code, 431);
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
            assert_eq!(status(buf).unwrap().unwrap().wants_keep_alive(), *want);
        }
    }
}
