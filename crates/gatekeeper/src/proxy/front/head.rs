//! A client's request head, parsed (httparse) and checked where a proxy must (RFC 9112):
//! the target's form, one `Host`, the body's framing, the connection's persistence. The
//! head keeps its bytes; fields are ranges into them, so nothing is copied or allocated
//! per field, and the head is forwarded from the same bytes.

use std::ops::Range;

use bytes::{Bytes, BytesMut};
use hyper::StatusCode;

use crate::upstream::wire::{parse_length, trim_ows};

/// A request head larger than this is refused (431): it bounds the buffer that holds a
/// head while it arrives.
pub const MAX_REQUEST_HEAD_BYTES: usize = 64 * 1024;
/// At most this many header fields in a request head (431 beyond).
pub const MAX_REQUEST_FIELDS: usize = 100;

/// Where a field's name and value are in a head's bytes.
pub type FieldAt = (Range<usize>, Range<usize>);

/// How the request's body is delimited (RFC 9112 §6.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyFraming {
    None,
    Length(u64),
    Chunked,
}

/// Why a head is refused: the status to answer with (the connection is closed after it)
/// and what was wrong, for the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refused {
    pub status: StatusCode,
    pub reason: &'static str,
}

fn bad(reason: &'static str) -> Refused {
    Refused { status: StatusCode::BAD_REQUEST, reason }
}

/// A parsed request head; ranges are into `bytes`.
#[derive(Debug)]
pub struct RequestHead {
    pub bytes: Bytes,
    pub method: Range<usize>,
    /// The origin-form path and query (for an absolute-form target, its path part).
    pub path_and_query: Range<usize>,
    pub http10: bool,
    /// Name and value of every field, in order.
    pub fields: Vec<FieldAt>,
    pub body: BodyFraming,
    /// The client asks the connection to stay open after the response.
    pub keep_alive: bool,
    /// `Expect: 100-continue` (HTTP/1.1): the client waits for a 100 before its body.
    pub expect_continue: bool,
}

impl RequestHead {
    pub fn method(&self) -> &str {
        self.text(&self.method)
    }

    /// The path and query to forward: `/` for an absolute-form target without a path.
    pub fn path_and_query(&self) -> &str {
        match self.text(&self.path_and_query) {
            "" => "/",
            pq => pq,
        }
    }

    fn text(&self, r: &Range<usize>) -> &str {
        // httparse checked the method is a token and the target visible ASCII.
        std::str::from_utf8(&self.bytes[r.clone()]).unwrap_or_default()
    }

    /// The first value of the field `name` (lower case), if it is text.
    pub fn field(&self, name: &str) -> Option<&str> {
        self.fields
            .iter()
            .find(|(n, _)| self.bytes[n.clone()].eq_ignore_ascii_case(name.as_bytes()))
            .and_then(|(_, v)| std::str::from_utf8(&self.bytes[v.clone()]).ok())
    }

    /// Every field as (name, value) bytes.
    pub fn fields(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        self.fields.iter().map(|(n, v)| (&self.bytes[n.clone()], &self.bytes[v.clone()]))
    }

    pub fn is_head(&self) -> bool {
        self.method() == "HEAD"
    }
}

impl crate::classify::Fields for RequestHead {
    fn field(&self, name: &str) -> Option<&str> {
        RequestHead::field(self, name)
    }
}

/// Take a request head from the start of `buf`: `Ok(None)` while it is incomplete.
/// `spare`: a list to hold the head's fields (the last head's, cleared: a connection
/// reuses one), taken when a head is complete.
pub fn parse_request_head(buf: &mut BytesMut, spare: &mut Vec<FieldAt>) -> Result<Option<RequestHead>, Refused> {
    let mut slots = [httparse::EMPTY_HEADER; MAX_REQUEST_FIELDS];
    let mut req = httparse::Request::new(&mut slots);
    let too_large = Refused { status: StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE, reason: "request head too large" };
    let len = match req.parse(buf) {
        Ok(httparse::Status::Partial) if buf.len() >= MAX_REQUEST_HEAD_BYTES => return Err(too_large),
        Ok(httparse::Status::Partial) => return Ok(None),
        Ok(httparse::Status::Complete(len)) if len > MAX_REQUEST_HEAD_BYTES => return Err(too_large),
        Ok(httparse::Status::Complete(len)) => len,
        Err(httparse::Error::TooManyHeaders) => {
            return Err(Refused { reason: "too many header fields", ..too_large });
        }
        Err(httparse::Error::Version) => {
            return Err(Refused { status: StatusCode::HTTP_VERSION_NOT_SUPPORTED, reason: "not HTTP/1.x" });
        }
        Err(_) => return Err(bad("malformed request head")),
    };
    let base = buf.as_ptr() as usize;
    let at = |s: &[u8]| {
        let from = s.as_ptr() as usize - base;
        from..from + s.len()
    };
    let method = at(req.method.unwrap_or_default().as_bytes());
    let target = req.path.unwrap_or_default();
    let path_and_query = origin_form(req.method.unwrap_or_default(), target).map(|r| {
        let t = at(target.as_bytes());
        t.start + r.start..t.start + r.end
    })?;
    let http10 = req.version == Some(0);
    let checked = check_fields(req.headers, http10)?;
    let mut fields = std::mem::take(spare);
    fields.clear();
    fields.extend(req.headers.iter().map(|f| (at(f.name.as_bytes()), at(f.value))));
    Ok(Some(RequestHead {
        bytes: buf.split_to(len).freeze(),
        method,
        path_and_query,
        http10,
        fields,
        body: checked.body,
        keep_alive: checked.keep_alive,
        expect_continue: checked.expect_continue,
    }))
}

/// Where the path and query are in `target`: all of an origin-form target; the path part
/// of an absolute-form one (`http://host/p?q` → `/p?q`; none → `/`, given as an empty
/// range, which the caller reads as `/`); `*` for `OPTIONS` as it is.
fn origin_form(method: &str, target: &str) -> Result<Range<usize>, Refused> {
    if target.starts_with('/') {
        return Ok(0..target.len());
    }
    if target == "*" && method == "OPTIONS" {
        return Ok(0..1);
    }
    let lower = target.get(..8).unwrap_or(target).to_ascii_lowercase();
    let rest_at = if lower.starts_with("http://") {
        7
    } else if lower.starts_with("https://") {
        8
    } else {
        return Err(bad("request target is neither a path nor an absolute http URI"));
    };
    let rest = &target[rest_at..];
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    if authority_end == 0 {
        return Err(bad("absolute request target without a host"));
    }
    let path_at = rest_at + authority_end;
    if target[path_at..].starts_with('/') {
        Ok(path_at..target.len())
    } else {
        // `http://host` or `http://host?q`: the path is `/` (a query alone is dropped
        // with it, as it cannot follow no path in origin form).
        Ok(path_at..path_at)
    }
}

struct Checked {
    body: BodyFraming,
    keep_alive: bool,
    expect_continue: bool,
}

/// The body's framing and the connection's persistence from the fields; a request whose
/// framing is ambiguous (the grounds of request smuggling) is refused.
fn check_fields(fields: &[httparse::Header<'_>], http10: bool) -> Result<Checked, Refused> {
    let mut length: Option<u64> = None;
    let mut chunked = false;
    let mut transfer_encoding = false;
    let mut hosts = 0;
    let (mut close, mut keep) = (false, false);
    let mut expect_continue = false;
    for f in fields {
        let name = f.name;
        if name.eq_ignore_ascii_case("content-length") {
            for item in f.value.split(|&b| b == b',') {
                let n = parse_length(item).ok_or(bad("invalid Content-Length"))?;
                if length.is_some_and(|l| l != n) {
                    return Err(bad("conflicting Content-Length values"));
                }
                length = Some(n);
            }
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            // Only `chunked`, once, as the whole coding: any other coding is one we do
            // not decode (501), a coding after chunked leaves the body unframed (400).
            for item in f.value.split(|&b| b == b',').map(trim_ows).filter(|i| !i.is_empty()) {
                if chunked {
                    return Err(bad("a transfer coding after chunked"));
                }
                if !item.eq_ignore_ascii_case(b"chunked") {
                    return Err(Refused {
                        status: StatusCode::NOT_IMPLEMENTED,
                        reason: "a transfer coding other than chunked",
                    });
                }
                chunked = true;
            }
            transfer_encoding = true;
        } else if name.eq_ignore_ascii_case("host") {
            hosts += 1;
        } else if name.eq_ignore_ascii_case("connection") {
            for t in f.value.split(|&b| b == b',').map(trim_ows) {
                close |= t.eq_ignore_ascii_case(b"close");
                keep |= t.eq_ignore_ascii_case(b"keep-alive");
            }
        } else if name.eq_ignore_ascii_case("expect") {
            expect_continue |= trim_ows(f.value).eq_ignore_ascii_case(b"100-continue");
        }
    }
    if hosts > 1 {
        return Err(bad("more than one Host field"));
    }
    if transfer_encoding && (length.is_some() || http10 || !chunked) {
        return Err(bad(if http10 {
            "Transfer-Encoding in an HTTP/1.0 request"
        } else if chunked {
            "both Transfer-Encoding and Content-Length"
        } else {
            "empty Transfer-Encoding"
        }));
    }
    let body = match (chunked, length) {
        (true, _) => BodyFraming::Chunked,
        (false, Some(0) | None) => BodyFraming::None,
        (false, Some(n)) => BodyFraming::Length(n),
    };
    let keep_alive = !close && (!http10 || keep);
    Ok(Checked { body, keep_alive, expect_continue: expect_continue && !http10 })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(head: &str) -> Result<RequestHead, Refused> {
        let mut buf = BytesMut::from(format!("{head}next").as_bytes());
        let h = parse_request_head(&mut buf, &mut Vec::new()).map(|h| h.expect("a complete head"));
        if h.is_ok() {
            assert_eq!(&buf[..], b"next", "the head is taken, the rest left");
        }
        h
    }

    #[test]
    fn framing_and_persistence() {
        let cases: [(&str, BodyFraming, bool); 8] = [
            ("GET / HTTP/1.1\r\nHost: a\r\n\r\n", BodyFraming::None, true),
            ("GET / HTTP/1.0\r\n\r\n", BodyFraming::None, false),
            ("GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n", BodyFraming::None, true),
            ("GET / HTTP/1.1\r\nConnection: foo, close\r\n\r\n", BodyFraming::None, false),
            ("POST / HTTP/1.1\r\nContent-Length: 5\r\n\r\n", BodyFraming::Length(5), true),
            ("POST / HTTP/1.1\r\nContent-Length: 5, 5\r\n\r\n", BodyFraming::Length(5), true),
            ("POST / HTTP/1.1\r\nContent-Length: 0\r\n\r\n", BodyFraming::None, true),
            ("POST / HTTP/1.1\r\nTransfer-Encoding: Chunked\r\n\r\n", BodyFraming::Chunked, true),
        ];
        for (head, body, keep) in cases {
            let h = parse(head).unwrap();
            assert_eq!((h.body, h.keep_alive), (body, keep), "{head:?}");
        }
    }

    #[test]
    fn ambiguous_or_bad_heads_are_refused_with_their_status() {
        let cases: [(&str, u16); 10] = [
            ("POST / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n", 400),
            ("POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n", 400),
            ("POST / HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n", 400),
            ("POST / HTTP/1.1\r\nTransfer-Encoding: chunked, gzip\r\n\r\n", 400),
            ("POST / HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", 501),
            ("POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", 400),
            ("GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400),
            ("GET foo HTTP/1.1\r\n\r\n", 400),
            ("PRI * HTTP/2.0\r\n\r\n", 505),
            ("GET / HTTP/1.1\r\nbad header\r\n\r\n", 400),
        ];
        for (head, status) in cases {
            let r = parse(head).expect_err(head);
            assert_eq!(r.status.as_u16(), status, "{head:?}: {}", r.reason);
        }
        let many: String = (0..=MAX_REQUEST_FIELDS).map(|i| format!("x-{i}: 1\r\n")).collect();
        assert_eq!(parse(&format!("GET / HTTP/1.1\r\n{many}\r\n")).unwrap_err().status.as_u16(), 431);
        let big = [b"GET / HTTP/1.1\r\nx: ".as_slice(), &vec![b'a'; MAX_REQUEST_HEAD_BYTES]].concat();
        assert_eq!(
            parse_request_head(&mut BytesMut::from(&big[..]), &mut Vec::new()).unwrap_err().status.as_u16(),
            431
        );
        assert!(parse_request_head(&mut BytesMut::from(&big[..100]), &mut Vec::new()).unwrap().is_none());
    }

    #[test]
    fn targets_become_origin_form() {
        for (target, want) in [
            ("/a/b?c=1", "/a/b?c=1"),
            ("http://shop.example/a?b", "/a?b"),
            ("HTTP://shop.example:8080/", "/"),
            ("http://shop.example", "/"),
        ] {
            let h = parse(&format!("GET {target} HTTP/1.1\r\nHost: x\r\n\r\n")).unwrap();
            assert_eq!(h.path_and_query(), want, "{target}");
        }
        assert_eq!(parse("OPTIONS * HTTP/1.1\r\n\r\n").unwrap().path_and_query(), "*");
        assert_eq!(parse("GET * HTTP/1.1\r\n\r\n").unwrap_err().status.as_u16(), 400);
        assert_eq!(parse("CONNECT a:443 HTTP/1.1\r\n\r\n").unwrap_err().status.as_u16(), 400);
    }

    #[test]
    fn fields_are_found_by_name_and_expect_is_seen() {
        let h =
            parse("POST /x HTTP/1.1\r\nHOST: a\r\nX-Type: cheap\r\nExpect: 100-Continue\r\nContent-Length: 1\r\n\r\n")
                .unwrap();
        assert_eq!(h.method(), "POST");
        assert_eq!(h.field("x-type"), Some("cheap"));
        assert_eq!(h.field("host"), Some("a"));
        assert!(h.expect_continue);
        assert_eq!(h.fields().count(), 4);
    }
}
