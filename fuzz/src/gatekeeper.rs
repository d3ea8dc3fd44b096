//! The gatekeeper's classifier and configuration, through its public API only.

use shortfirst_core::admission::auto::AutoConfig;
use shortfirst_gatekeeper::classify::{route_template, Classifier, Rule, OVERFLOW_TYPE};
use shortfirst_gatekeeper::config::{parse_cost_us, parse_duration, Upstream};
use shortfirst_gatekeeper::{CapacitySetting, ProxyConfig, ProxySettings};

use crate::{fields, text};

/// Input: `max_types`, rule lines, then request lines `METHOD PATH [HEADER-VALUE]`.
/// Invariants: an index is always below `max_types`; the same request gets the
/// same index; the registry never grows past `max_types`; a route template
/// keeps the method and starts its path with `/`.
pub fn gatekeeper_classify(data: &[u8]) {
    let [max, rules, requests] = fields::<3>(data);
    let max_types = 2 + usize::from(max.first().copied().unwrap_or(0) % 16);
    let rules: Vec<Rule> = text(rules).lines().take(16).filter_map(|l| Rule::parse(l).ok()).collect();
    let declared = ["declared".to_string()];
    let Ok(c) = Classifier::new(rules, max_types, &declared) else { return };
    assert_eq!(c.type_name(0).as_deref(), Some("declared"));
    for line in text(requests).lines().take(64) {
        let mut parts = line.splitn(3, ' ');
        let method = parts.next().unwrap_or("");
        let path = parts.next().unwrap_or("");
        let mut headers = hyper::HeaderMap::new();
        if let Some(v) = parts.next().and_then(|v| hyper::header::HeaderValue::from_str(v).ok()) {
            headers.insert("x-type", v);
        }
        let i = c.classify(method, path, &headers);
        assert!(i < max_types, "index {i} with max_types {max_types}");
        assert_eq!(c.classify(method, path, &headers), i, "classification is not stable");
        let name = c.type_name(i).expect("an index the classifier gave has a name");
        assert!(i != c.overflow_index() || name == OVERFLOW_TYPE);
        // The proxy hands it hyper's path-and-query, which starts with `/`.
        if path.starts_with('/') {
            let route = route_template(method, path);
            assert!(route.starts_with(&format!("{method} /")), "{route:?}");
        }
    }
    assert!(c.types().len() <= max_types);
}

/// Input: a TOML config file, then a capacity, an upstream, a cost and a
/// duration string. Invariants: whatever parses is in range (positive
/// capacity, validated auto settings, an upstream prefix without trailing `/`).
pub fn gatekeeper_config(data: &[u8]) {
    let [toml_text, capacity, upstream, cost, duration] = fields::<5>(data);
    if let Ok(file) = ProxySettings::parse(&text(toml_text), std::path::Path::new("fuzz.toml")) {
        let _ = file.estimator();
        let _ = file.auto(AutoConfig::default());
        let _ = ProxyConfig::from_settings(&file);
    }
    match CapacitySetting::parse(&text(capacity)) {
        Ok(CapacitySetting::Fixed { capacity_us }) => assert!(capacity_us > 0),
        Ok(CapacitySetting::Auto(_)) | Err(_) => {}
    }
    if let Ok(u) = Upstream::parse(&text(upstream)) {
        assert!(!u.prefix.ends_with('/'), "prefix {:?}", u.prefix);
    }
    if let Ok(us) = parse_cost_us(&text(cost), "cost") {
        assert!(us <= 1_000_000_000_000_000);
    }
    let _ = parse_duration(&text(duration), "duration");
}

/// Input: a flags byte (bit 0: the request was `HEAD`; the rest: where to cut the bytes
/// in two, and the piece size a chunked body is fed in), then bytes an upstream sent.
/// Invariants: a response head parses the same whole or cut in two (the first part
/// incomplete, or already complete); what it takes is the head alone; a chunked body decodes
/// the same (data, trailers, failure, bytes left over) fed whole or in pieces, and never
/// yields more data than it was given.
pub fn gatekeeper_response(data: &[u8]) {
    use bytes::BytesMut;
    use shortfirst_gatekeeper::upstream::wire::{parse_response_head, Framing};
    let Some((&flags, wire)) = data.split_first() else { return };
    let head_request = flags & 1 == 1;
    let whole = parse_response_head(&mut BytesMut::from(wire), head_request);
    let cut = usize::from(flags >> 1) * wire.len() / 128;
    let mut buf = BytesMut::from(&wire[..cut]);
    let in_two = match parse_response_head(&mut buf, head_request) {
        Ok(None) => {
            buf.extend_from_slice(&wire[cut..]);
            parse_response_head(&mut buf, head_request)
        }
        first => {
            buf.extend_from_slice(&wire[cut..]);
            first
        }
    };
    let rest = match (whole, in_two) {
        (Ok(Some(a)), Ok(Some(b))) => {
            assert_eq!((a.head.status, a.framing, a.keep_alive), (b.head.status, b.framing, b.keep_alive));
            assert!(a.head.fields().eq(b.head.fields()));
            assert_eq!(a.head.bytes, b.head.bytes);
            if a.framing != Framing::Chunked {
                return;
            }
            buf
        }
        (Ok(None), Ok(None)) | (Err(_), Err(_)) => return,
        // A head cut short of a limit may be refused only once it is whole.
        (a, b) => panic!("whole: {:?}, cut at {cut}: {:?}", a.map(|h| h.is_some()), b.map(|h| h.is_some())),
    };
    let piece = 1 + usize::from(flags >> 4);
    let one = decode_chunked(&rest, rest.len().max(1));
    assert_eq!(one, decode_chunked(&rest, piece), "fed in pieces of {piece}");
    if let Some((Ok((data, _)), _)) = &one {
        assert!(data.len() <= rest.len());
    }
}

/// Input: a flags byte (where to cut the bytes in two, and the piece size a chunked body
/// is fed in), then bytes a client sent. Invariants: a request head parses the same whole
/// or cut in two (the first part incomplete, or already complete); what it takes is the
/// head alone; the head sent upstream from it parses as a request with the same method,
/// no hop-by-hop field and one framing of its own; a chunked body decodes the same fed
/// whole or in pieces.
pub fn gatekeeper_request(data: &[u8]) {
    use bytes::BytesMut;
    use shortfirst_gatekeeper::proxy::request_head::{parse_request_head, BodyFraming};
    let Some((&flags, wire)) = data.split_first() else { return };
    let whole = parse_request_head(&mut BytesMut::from(wire), &mut Vec::new());
    let cut = usize::from(flags & 0x7f) * wire.len() / 128;
    let mut buf = BytesMut::from(&wire[..cut]);
    let mut spare = Vec::new();
    let in_two = match parse_request_head(&mut buf, &mut spare) {
        Ok(None) => {
            buf.extend_from_slice(&wire[cut..]);
            parse_request_head(&mut buf, &mut spare)
        }
        first => {
            buf.extend_from_slice(&wire[cut..]);
            first
        }
    };
    let (head, rest) = match (whole, in_two) {
        (Ok(Some(a)), Ok(Some(b))) => {
            assert_eq!(a.bytes, b.bytes);
            assert_eq!(
                (a.method(), a.path_and_query(), a.body, a.keep_alive),
                (b.method(), b.path_and_query(), b.body, b.keep_alive)
            );
            assert_eq!(&wire[..a.bytes.len()], &a.bytes[..], "the head is the input's start");
            (a, buf)
        }
        (Ok(None), Ok(None)) => return,
        (Err(a), Err(b)) => return assert_eq!(a, b),
        (a, b) => panic!("whole: {:?}, cut at {cut}: {:?}", a.map(|h| h.is_some()), b.map(|h| h.is_some())),
    };
    assert!(head.path_and_query().starts_with('/') || head.path_and_query() == "*");
    check_upstream_head(&head);
    if head.body == BodyFraming::Chunked {
        let piece = 1 + usize::from(flags >> 4);
        assert_eq!(decode_chunked(&rest, rest.len().max(1)), decode_chunked(&rest, piece), "fed in pieces of {piece}");
    }
}

/// The head sent upstream for `head` parses, keeps the method and target, and carries
/// no hop-by-hop field but the framing it adds.
fn check_upstream_head(head: &shortfirst_gatekeeper::proxy::request_head::RequestHead) {
    use shortfirst_gatekeeper::proxy::encode_upstream_head;
    let mut out = bytes::BytesMut::new();
    let has_body = head.body != shortfirst_gatekeeper::proxy::request_head::BodyFraming::None;
    let peer = "192.0.2.1:4000".parse().expect("an address");
    encode_upstream_head(head, head.path_and_query(), peer, "backend:80", false, has_body, &mut out);
    let mut slots = [httparse::EMPTY_HEADER; 128];
    let mut req = httparse::Request::new(&mut slots);
    let parsed = req.parse(&out).expect("the upstream head parses");
    assert_eq!(parsed, httparse::Status::Complete(out.len()));
    assert_eq!((req.method, req.path), (Some(head.method()), Some(head.path_and_query())));
    let named = |n: &str| req.headers.iter().filter(|h| h.name.eq_ignore_ascii_case(n)).count();
    for hop in ["connection", "keep-alive", "te", "upgrade", "proxy-authorization"] {
        assert_eq!(named(hop), 0, "{hop} forwarded");
    }
    assert!(named("transfer-encoding") <= 1 && named("host") == 1);
}

/// What a chunked body decoded to: its data and trailers (or the failure, as text), and
/// the bytes left after its end.
type Decoded = (Result<(Vec<u8>, Option<String>), String>, Vec<u8>);

/// A chunked body fed in pieces; `None` if it needs more than `wire`.
fn decode_chunked(wire: &[u8], piece: usize) -> Option<Decoded> {
    use bytes::BytesMut;
    use shortfirst_gatekeeper::upstream::chunked::{Decoder, Step};
    let mut d = Decoder::default();
    let mut buf = BytesMut::new();
    let mut feed = wire.chunks(piece);
    let (mut data, mut trailers) = (Vec::new(), None);
    loop {
        match d.step(&mut buf) {
            Err(e) => return Some((Err(e.to_string()), Vec::new())),
            Ok(Step::Data(b)) => data.extend_from_slice(&b),
            Ok(Step::Trailers(t)) => trailers = Some(format!("{t:?}")),
            Ok(Step::End) => {
                let left = [buf.to_vec(), feed.flatten().copied().collect()].concat();
                return Some((Ok((data, trailers)), left));
            }
            Ok(Step::More) => buf.extend_from_slice(feed.next()?),
        }
    }
}
