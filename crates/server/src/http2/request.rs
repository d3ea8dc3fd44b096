//! An HTTP/2 request in the form the HTTP/1.1 machinery answers, and the answer back.
//!
//! A stream's request (pseudo-headers and fields, already HPACK-decoded and checked by the
//! codec) is written into a buffer as an HTTP/1.1 head — `:method`, `:path`, `HTTP/1.1`,
//! `Host` from `:authority` — and parsed by [`crate::http::parse`], so method checks,
//! target resolution, preconditions, ranges, `Accept-Encoding` and listings are decided by
//! the same code as over HTTP/1.1, under the same limits (`max-header-bytes`, `max-headers`,
//! `max-request-line-bytes`). Fields that mean nothing here are left out: `content-length`
//! (the codec frames the body, which is discarded) and the connection-specific ones HTTP/2
//! forbids. The HTTP/1.1 response head is read back into the status and fields of a HEADERS
//! frame, without `Connection`.

use bytes::Bytes;
use http::header::{HeaderName, HeaderValue};

use crate::http::parse::{self, Limits, Request};
use crate::http::Status;

/// Fields of the request left out of the HTTP/1.1 form (see the module docs).
pub const SKIPPED: &[&str] = &["content-length", "transfer-encoding", "connection", "keep-alive", "te", "upgrade"];

/// Writes `parts` as an HTTP/1.1 head into `buf` and parses it; `Err` is the status to answer.
pub fn to_http1(parts: &http::request::Parts, buf: &mut Vec<u8>, limits: &Limits) -> Result<Request, Status> {
    buf.clear();
    buf.extend_from_slice(parts.method.as_str().as_bytes());
    buf.push(b' ');
    let target = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    buf.extend_from_slice(target.as_bytes());
    buf.extend_from_slice(b" HTTP/1.1\r\n");
    let authority = parts.uri.authority();
    if let Some(a) = authority {
        field(buf, b"host", a.as_str().as_bytes())?;
    }
    for (name, value) in &parts.headers {
        let name = name.as_str();
        if SKIPPED.contains(&name) || (name == "host" && authority.is_some()) {
            continue;
        }
        field(buf, name.as_bytes(), value.as_bytes())?;
        if buf.len() > limits.max_header_bytes {
            return Err(Status::HEADER_FIELDS_TOO_LARGE);
        }
    }
    buf.extend_from_slice(b"\r\n");
    match parse::parse(buf, limits)? {
        Some(req) => Ok(req),
        None => Err(Status::BAD_REQUEST),
    }
}

fn field(buf: &mut Vec<u8>, name: &[u8], value: &[u8]) -> Result<(), Status> {
    // The codec checks names; a value must not smuggle a line break into the HTTP/1.1 form.
    if value.iter().any(|&b| b == b'\r' || b == b'\n' || b == 0) {
        return Err(Status::BAD_REQUEST);
    }
    buf.extend_from_slice(name);
    buf.extend_from_slice(b": ");
    buf.extend_from_slice(value);
    buf.extend_from_slice(b"\r\n");
    Ok(())
}

/// The request line the access log shows: `GET /path HTTP/2.0`.
pub fn log_line(parts: &http::request::Parts, out: &mut Vec<u8>) {
    out.clear();
    out.extend_from_slice(parts.method.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(parts.uri.path_and_query().map_or("/", |p| p.as_str()).as_bytes());
    out.extend_from_slice(b" HTTP/2.0");
}

/// Why an HTTP/1.1 head could not become HTTP/2 fields (a bug, answered 500).
#[derive(Debug, thiserror::Error)]
#[error("response head not convertible to HTTP/2: {0}")]
pub struct HeadError(&'static str);

/// The HTTP/2 response for an HTTP/1.1 head (status line, fields, blank line).
pub fn from_http1(head: &[u8]) -> Result<http::Response<()>, HeadError> {
    let mut fields = [httparse::EMPTY_HEADER; 32];
    let mut parsed = httparse::Response::new(&mut fields);
    match parsed.parse(head) {
        Ok(httparse::Status::Complete(_)) => {}
        _ => return Err(HeadError("not a complete head")),
    }
    let code = parsed.code.ok_or(HeadError("no status"))?;
    let mut response = http::Response::new(());
    *response.status_mut() = http::StatusCode::from_u16(code).map_err(|_| HeadError("status"))?;
    // One copy of the head; every value a slice of it (one allocation, not one per field).
    let shared = Bytes::copy_from_slice(head);
    let headers = response.headers_mut();
    headers.reserve(parsed.headers.len());
    for f in parsed.headers.iter() {
        if f.name.eq_ignore_ascii_case("connection") || f.name.eq_ignore_ascii_case("keep-alive") {
            continue;
        }
        let name = HeaderName::from_bytes(f.name.as_bytes()).map_err(|_| HeadError("field name"))?;
        // `f.value` lies within `head` (httparse borrows from it): the same range of `shared`.
        let at = f.value.as_ptr() as usize - head.as_ptr() as usize;
        let value = shared.slice(at..at + f.value.len());
        let value = HeaderValue::from_maybe_shared(value).map_err(|_| HeadError("value"))?;
        headers.append(name, value);
    }
    Ok(response)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::parse::Method;

    fn limits() -> Limits {
        Limits { max_request_line_bytes: 8192, max_header_bytes: 16384, max_headers: 64 }
    }

    fn parts(req: http::Request<()>) -> http::request::Parts {
        req.into_parts().0
    }

    #[test]
    fn a_request_becomes_the_same_head_as_over_http1() {
        let p = parts(
            http::Request::get("https://example.com/a/b?x=1")
                .header("range", "bytes=0-9")
                .header("if-none-match", "\"a\"")
                .header("if-none-match", "\"b\"")
                .header("content-length", "0")
                .body(())
                .unwrap(),
        );
        let mut buf = Vec::new();
        let req = to_http1(&p, &mut buf, &limits()).unwrap();
        assert_eq!(req.method(), Method::Get);
        assert_eq!(&buf[req.target.clone()], b"/a/b?x=1");
        assert_eq!(&buf[req.host.clone().unwrap()], b"example.com");
        assert_eq!(&buf[req.range.clone().unwrap()], b"bytes=0-9");
        assert_eq!(req.if_none_match.lines().len(), 2);
        assert_eq!(req.content_length, None, "the codec frames bodies");
        let mut line = Vec::new();
        log_line(&p, &mut line);
        assert_eq!(line, b"GET /a/b?x=1 HTTP/2.0");
    }

    #[test]
    fn limits_and_bad_values_are_answered_as_over_http1() {
        let mut buf = Vec::new();
        let head = parts(http::Request::head("http://h/x").body(()).unwrap());
        assert_eq!(to_http1(&head, &mut buf, &limits()).unwrap().method(), Method::Head);
        let post = parts(http::Request::post("http://h/x").body(()).unwrap());
        assert_eq!(to_http1(&post, &mut buf, &limits()).unwrap().method(), Method::NotAllowed);
        // Neither :authority nor Host (RFC 9110 §7.2 requires one): 400, as over HTTP/1.1.
        let nameless = parts(http::Request::get("/x").body(()).unwrap());
        assert_eq!(to_http1(&nameless, &mut buf, &limits()).unwrap_err().code, 400);
        let with_host = parts(http::Request::get("/x").header("host", "h").body(()).unwrap());
        assert!(to_http1(&with_host, &mut buf, &limits()).is_ok());
        let mut big = http::Request::get("http://h/x");
        for i in 0..100 {
            big = big.header(format!("x-{i}"), "v");
        }
        assert_eq!(to_http1(&parts(big.body(()).unwrap()), &mut buf, &limits()).unwrap_err().code, 431);
        let long = parts(http::Request::get("http://h/x").header("x-long", "v".repeat(20_000)).body(()).unwrap());
        assert_eq!(to_http1(&long, &mut buf, &limits()).unwrap_err().code, 431);
        // A value the codec let through with a line break in it never reaches the parser.
        let mut out = Vec::new();
        assert_eq!(field(&mut out, b"x", b"a\r\nhost: evil").unwrap_err().code, 400);
        assert!(out.is_empty());
    }

    #[test]
    fn an_http1_head_becomes_http2_fields_without_connection() {
        let head = b"HTTP/1.1 206 Partial Content\r\nServer: shortfirst\r\nContent-Length: 10\r\n\
            Content-Range: bytes 0-9/100\r\nConnection: close\r\n\r\n";
        let r = from_http1(head).unwrap();
        assert_eq!(r.status(), 206);
        assert_eq!(r.headers()["content-range"], "bytes 0-9/100");
        assert_eq!(r.headers()["content-length"], "10");
        assert!(!r.headers().contains_key("connection"));
        assert!(from_http1(b"HTTP/1.1 200 OK\r\n").is_err());
    }
}
