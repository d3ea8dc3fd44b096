//! `shortfirst serve`'s HTTP/2 request mapping: a stream's request (as the codec hands it
//! over, already checked by the `http` types) written as an HTTP/1.1 head for the shared
//! machinery, and an HTTP/1.1 response head read back as HTTP/2 fields.

use shortfirst_server::http::parse::Limits;
use shortfirst_server::http2::request::{from_http1, to_http1, SKIPPED};

use crate::fields;

const LIMITS: Limits = Limits { max_request_line_bytes: 512, max_header_bytes: 2048, max_headers: 32 };

/// Input: method, URI, then up to eight field name/value pairs, NUL-separated. Whatever the
/// `http` types accept must map to exactly one HTTP/1.1 head — nothing after its blank line,
/// no field a value smuggled in — whose method, target, host and fields are the request's
/// own. The whole input as a response head converts or is refused, never panics, and never
/// keeps `Connection`.
pub fn h2_request(data: &[u8]) {
    let [method, uri, rest @ ..] = fields::<18>(data);
    let mut builder = http::Request::builder().method(method).uri(uri);
    for pair in rest.chunks(2) {
        if !pair[0].is_empty() {
            builder = builder.header(pair[0], pair[1]);
        }
    }
    if let Ok(request) = builder.body(()) {
        check_request(request.into_parts().0);
    }
    if let Ok(response) = from_http1(data) {
        assert!(!response.headers().contains_key(http::header::CONNECTION), "Connection kept");
    }
}

fn check_request(parts: http::request::Parts) {
    let mut buf = Vec::new();
    let Ok(req) = to_http1(&parts, &mut buf, &LIMITS) else { return };
    assert_eq!(req.head_len, buf.len(), "bytes after the head: a second request");
    let target = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    assert_eq!(&buf[req.target.clone()], target.as_bytes());
    assert!(buf.starts_with(parts.method.as_str().as_bytes()));
    let authority = parts.uri.authority().map(|a| a.as_str().as_bytes());
    if let (Some(a), Some(host)) = (authority, req.host.clone()) {
        assert_eq!(&buf[host], a);
    }
    let mut expected: Vec<(&str, &[u8])> = authority.map(|a| ("host", a)).into_iter().collect();
    for (name, value) in &parts.headers {
        let name = name.as_str();
        if !SKIPPED.contains(&name) && (name != "host" || authority.is_none()) {
            expected.push((name, value.as_bytes()));
        }
    }
    let mut slots = [httparse::EMPTY_HEADER; 40];
    let mut parsed = httparse::Request::new(&mut slots);
    assert!(matches!(parsed.parse(&buf), Ok(httparse::Status::Complete(n)) if n == buf.len()));
    let got: Vec<(&str, &[u8])> = parsed.headers.iter().map(|h| (h.name, h.value)).collect();
    // httparse trims a value's surrounding whitespace, as HTTP/1.1 does.
    let trim = |v: &[u8]| v.trim_ascii().to_vec();
    assert_eq!(got.len(), expected.len(), "a field appeared or vanished");
    for ((gn, gv), (en, ev)) in got.iter().zip(&expected) {
        assert_eq!(*gn, *en);
        assert_eq!(trim(gv), trim(ev));
    }
}
