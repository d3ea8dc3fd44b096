//! The upstream side's HTTP/1.1 on the wire: the response head parsed (httparse) into a
//! [`ResponseHead`] that keeps its bytes, with the framing of its body (RFC 9112 §6.3).

use bytes::{Bytes, BytesMut};
use hyper::header::{HeaderMap, HeaderName, HeaderValue};
use hyper::StatusCode;

/// A response head larger than this is refused (502): it bounds the buffer that holds a
/// head while it arrives, and the trailer section of a chunked body.
pub const MAX_HEAD_BYTES: usize = 64 * 1024;
/// At most this many header fields in a response head (or a trailer section).
pub const MAX_HEADERS: usize = 100;

/// What an upstream's response head was wrong with.
#[derive(Debug, thiserror::Error)]
pub enum HeadError {
    #[error("malformed response head: {0}")]
    Parse(#[from] httparse::Error),
    #[error("response head larger than {MAX_HEAD_BYTES} bytes")]
    TooLarge,
    #[error("invalid header {0} in the response head")]
    Header(String),
    #[error("invalid Content-Length {0:?}")]
    ContentLength(String),
    #[error("status 101 (switching protocols) is not relayed")]
    Upgrade,
}

/// How a message body is delimited on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// No body at all.
    Empty,
    /// Exactly this many bytes.
    Length(u64),
    /// Chunked transfer coding.
    Chunked,
    /// Until the upstream closes the connection (never reusable).
    Close,
}

/// A response head as received: its bytes, and where each field is in them.
#[derive(Debug)]
pub struct ResponseHead {
    pub status: StatusCode,
    /// The status line and fields, as they came.
    pub bytes: Bytes,
    /// Name and value of every field, in order.
    pub fields: Vec<FieldAt>,
}

impl ResponseHead {
    /// Every field as (name, value) bytes.
    pub fn fields(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        self.fields.iter().map(|(n, v)| (&self.bytes[n.clone()], &self.bytes[v.clone()]))
    }

    /// The values of every field named `name` (any case).
    pub fn values<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a [u8]> + 'a {
        self.fields().filter(move |(n, _)| n.eq_ignore_ascii_case(name.as_bytes())).map(|(_, v)| v)
    }
}

/// A response head taken from the start of a buffer.
pub struct ParsedHead {
    pub head: ResponseHead,
    pub framing: Framing,
    /// The connection may carry another request once this response's body is complete.
    pub keep_alive: bool,
}

/// Where a field's name and value are in the buffer parsed.
pub type FieldAt = (std::ops::Range<usize>, std::ops::Range<usize>);

/// Take a response head from the start of `buf`: `Ok(None)` while it is incomplete (more
/// bytes needed; [`HeadError::TooLarge`] once `buf` holds [`MAX_HEAD_BYTES`] without an
/// end). `head_request`: the request was `HEAD` (no body follows, whatever the head says).
/// An informational (1xx) head is returned as is: the caller skips it.
pub fn parse_response_head(buf: &mut BytesMut, head_request: bool) -> Result<Option<ParsedHead>, HeadError> {
    let mut slots = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut resp = httparse::Response::new(&mut slots);
    let len = match resp.parse(buf)? {
        httparse::Status::Partial if buf.len() >= MAX_HEAD_BYTES => return Err(HeadError::TooLarge),
        httparse::Status::Partial => return Ok(None),
        httparse::Status::Complete(len) if len > MAX_HEAD_BYTES => return Err(HeadError::TooLarge),
        httparse::Status::Complete(len) => len,
    };
    let code = resp.code.unwrap_or_default();
    let status = StatusCode::from_u16(code).map_err(|_| HeadError::Parse(httparse::Error::Status))?;
    if status == StatusCode::SWITCHING_PROTOCOLS {
        return Err(HeadError::Upgrade);
    }
    let http10 = resp.version == Some(0);
    let fields = fields_at(buf, resp.headers);
    let head = ResponseHead { status, bytes: buf.split_to(len).freeze(), fields };
    let (framing, keep_alive) = framing(&head, http10, head_request)?;
    Ok(Some(ParsedHead { head, framing, keep_alive }))
}

/// Where each parsed field is in `base`, the buffer it was parsed from.
pub fn fields_at(base: &[u8], fields: &[httparse::Header<'_>]) -> Vec<FieldAt> {
    let start = base.as_ptr() as usize;
    let range = |s: &[u8]| {
        let from = s.as_ptr() as usize - start;
        from..from + s.len()
    };
    fields.iter().map(|f| (range(f.name.as_bytes()), range(f.value))).collect()
}

/// The fields of `head` (the bytes parsed) as a header map; values are slices of `head`,
/// not copies.
pub fn header_map(head: &Bytes, at: &[FieldAt]) -> Result<HeaderMap, HeadError> {
    let mut map = HeaderMap::with_capacity(at.len());
    for (name, value) in at {
        let name = &head[name.clone()];
        let name = HeaderName::from_bytes(name)
            .map_err(|_| HeadError::Header(String::from_utf8_lossy(name).escape_debug().to_string()))?;
        let value = HeaderValue::from_maybe_shared(head.slice(value.clone()))
            .map_err(|_| HeadError::Header(name.as_str().to_string()))?;
        map.append(name, value);
    }
    Ok(map)
}

/// The body's framing (RFC 9112 §6.3) and whether the connection stays open after it, from
/// one pass over the fields.
fn framing(head: &ResponseHead, http10: bool, head_request: bool) -> Result<(Framing, bool), HeadError> {
    let (mut close, mut keep) = (false, false);
    let mut last_coding: Option<&[u8]> = None;
    let mut length: Option<u64> = None;
    let mut has_length = false;
    for (name, value) in head.fields() {
        if name.eq_ignore_ascii_case(b"connection") {
            for t in value.split(|&b| b == b',').map(trim_ows) {
                close |= t.eq_ignore_ascii_case(b"close");
                keep |= t.eq_ignore_ascii_case(b"keep-alive");
            }
        } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
            last_coding = value.rsplit(|&b| b == b',').next().map(trim_ows);
        } else if name.eq_ignore_ascii_case(b"content-length") {
            has_length = true;
            length = Some(content_length(value, length)?);
        }
    }
    let mut keep_alive = if http10 { keep } else { !close };
    let status = head.status;
    let no_body = head_request
        || status.is_informational()
        || status == StatusCode::NO_CONTENT
        || status == StatusCode::NOT_MODIFIED;
    if no_body {
        return Ok((Framing::Empty, keep_alive));
    }
    if let Some(coding) = last_coding {
        // Transfer-Encoding overrides Content-Length; a message with both is closed after
        // (RFC 9112 §6.3 ¶3), as is one whose last coding is not chunked (read to the end).
        let chunked = coding.eq_ignore_ascii_case(b"chunked");
        keep_alive &= chunked && !has_length;
        return Ok((if chunked { Framing::Chunked } else { Framing::Close }, keep_alive));
    }
    Ok(match length {
        Some(0) => (Framing::Empty, keep_alive),
        Some(n) => (Framing::Length(n), keep_alive),
        None => (Framing::Close, false),
    })
}

/// A `Content-Length` field's value checked against the length seen so far: every item
/// (repeated fields or a list) must be the same decimal number.
fn content_length(value: &[u8], seen: Option<u64>) -> Result<u64, HeadError> {
    let bad = || HeadError::ContentLength(String::from_utf8_lossy(value).into_owned());
    let mut length = seen;
    for item in value.split(|&b| b == b',') {
        let n = parse_length(item).ok_or_else(bad)?;
        if length.is_some_and(|l| l != n) {
            return Err(bad());
        }
        length = Some(n);
    }
    length.ok_or_else(bad)
}

/// One item of a `Content-Length` value: 1–19 decimal digits around optional whitespace.
pub(crate) fn parse_length(item: &[u8]) -> Option<u64> {
    let item = trim_ows(item);
    if item.is_empty() || item.len() > 19 || !item.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(item).ok()?.parse().ok()
}

/// `s` without the optional whitespace (spaces, tabs) around it (RFC 9110 §5.6.3).
pub(crate) fn trim_ows(mut s: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = s {
        s = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = s {
        s = rest;
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(head: &str, head_request: bool) -> ParsedHead {
        let mut buf = BytesMut::from(format!("{head}body").as_bytes());
        let p = parse_response_head(&mut buf, head_request).unwrap().expect("a complete head");
        assert_eq!(&buf[..], b"body", "the head is taken from the buffer, the rest left");
        p
    }

    fn parse_err(head: &[u8]) -> HeadError {
        match parse_response_head(&mut BytesMut::from(head), false) {
            Err(e) => e,
            Ok(_) => panic!("{:?} parsed", String::from_utf8_lossy(head)),
        }
    }

    #[test]
    fn framing_follows_rfc_9112() {
        let cases: [(&str, bool, Framing, bool); 10] = [
            ("HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\n", false, Framing::Length(5), true),
            ("HTTP/1.1 200 OK\r\nContent-Length: 5, 5\r\n\r\n", false, Framing::Length(5), true),
            ("HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\n", true, Framing::Empty, true),
            ("HTTP/1.1 204 No Content\r\n\r\n", false, Framing::Empty, true),
            ("HTTP/1.1 304 Not Modified\r\ncontent-length: 9\r\n\r\n", false, Framing::Empty, true),
            ("HTTP/1.1 200 OK\r\ntransfer-encoding: gzip, chunked\r\n\r\n", false, Framing::Chunked, true),
            (
                "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\ncontent-length: 3\r\n\r\n",
                false,
                Framing::Chunked,
                false,
            ),
            ("HTTP/1.1 200 OK\r\ntransfer-encoding: gzip\r\n\r\n", false, Framing::Close, false),
            ("HTTP/1.1 200 OK\r\nconnection: Close\r\ncontent-length: 0\r\n\r\n", false, Framing::Empty, false),
            ("HTTP/1.0 200 OK\r\n\r\n", false, Framing::Close, false),
        ];
        for (head, head_request, framing, keep) in cases {
            let p = parse(head, head_request);
            assert_eq!((p.framing, p.keep_alive), (framing, keep), "{head:?}");
        }
        let p = parse("HTTP/1.0 200 OK\r\nconnection: keep-alive\r\ncontent-length: 1\r\n\r\n", false);
        assert!(p.keep_alive);
        assert_eq!(p.head.values("Content-Length").collect::<Vec<_>>(), [b"1"]);
    }

    #[test]
    fn bad_heads_are_errors_naming_the_fault() {
        for (head, want) in [
            ("HTTP/1.1 200 OK\r\ncontent-length: 5, 6\r\n\r\n", "invalid Content-Length \"5, 6\""),
            ("HTTP/1.1 200 OK\r\ncontent-length: -1\r\n\r\n", "invalid Content-Length \"-1\""),
            ("HTTP/1.1 2x0 OK\r\n\r\n", "malformed response head: invalid response status"),
            ("SSH-2.0-OpenSSH_9.6\r\n\r\n", "malformed response head: invalid HTTP version"),
            ("HTTP/1.1 101 Switching Protocols\r\n\r\n", "status 101 (switching protocols) is not relayed"),
        ] {
            assert_eq!(parse_err(head.as_bytes()).to_string(), want, "{head:?}");
        }
        let big = [b"HTTP/1.1 200 OK\r\nx: ".as_slice(), &vec![b'a'; MAX_HEAD_BYTES]].concat();
        assert!(matches!(parse_err(&big), HeadError::TooLarge));
        let partial = parse_response_head(&mut BytesMut::from(&big[..100]), false).unwrap();
        assert!(partial.is_none(), "a partial head waits for more");
        let many: String = (0..=MAX_HEADERS).map(|i| format!("x-{i}: 1\r\n")).collect();
        let e = parse_err(format!("HTTP/1.1 200 OK\r\n{many}\r\n").as_bytes());
        assert_eq!(e.to_string(), "malformed response head: too many headers");
    }
}
