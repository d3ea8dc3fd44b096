//! Header rewriting on the way through: hop-by-hop headers removed, forwarding headers
//! appended.

use std::net::SocketAddr;

use hyper::header::{self, HeaderMap, HeaderName, HeaderValue};

/// Headers that describe one hop, never forwarded (RFC 9110 §7.6.1), plus those named in
/// `Connection`.
const HOP_BY_HOP: [&str; 9] = [
    "connection",
    "keep-alive",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "proxy-connection",
    "proxy-authenticate",
    "proxy-authorization",
];

/// Whether a header is hop-by-hop by its name alone (those named in `Connection` aside).
fn is_hop_by_hop(name: &HeaderName) -> bool {
    let name = name.as_str();
    HOP_BY_HOP.contains(&name) || name.starts_with("proxy-")
}

pub fn strip_hop_by_hop(headers: &mut HeaderMap) {
    // The common case (none of them; `Connection` is one) is one pass over the names,
    // allocating nothing.
    if !headers.keys().any(is_hop_by_hop) {
        return;
    }
    if headers.contains_key(header::CONNECTION) {
        let listed: Vec<HeaderName> = headers
            .get_all(header::CONNECTION)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .filter_map(|t| HeaderName::from_bytes(t.trim().as_bytes()).ok())
            .collect();
        for name in listed {
            headers.remove(name);
        }
    }
    for name in HOP_BY_HOP {
        headers.remove(name);
    }
    // Any other Proxy-* header is hop-by-hop too.
    if headers.keys().any(|k| k.as_str().starts_with("proxy-")) {
        let proxy: Vec<HeaderName> = headers.keys().filter(|k| k.as_str().starts_with("proxy-")).cloned().collect();
        for name in proxy {
            headers.remove(name);
        }
    }
}

/// Append `Forwarded` and `X-Forwarded-For/Proto/Host` for a request from `peer`. The
/// common case (none of them present yet) builds each value once, without copies; the
/// address is written once (IPv4 by hand: `Display` pads and buffers) and its text shared
/// by both lists.
pub fn add_forwarding(headers: &mut HeaderMap, peer: SocketAddr) {
    use std::fmt::Write as _;
    // A reference-counted clone of the request's own bytes.
    let host = headers.get(header::HOST).filter(|h| h.to_str().is_ok()).cloned();
    let mut fwd = String::with_capacity(64);
    fwd.push_str("for=");
    let ip_text = match peer.ip() {
        std::net::IpAddr::V4(v4) => {
            let start = fwd.len();
            push_ipv4(&mut fwd, v4);
            start..fwd.len()
        }
        std::net::IpAddr::V6(v6) => {
            fwd.push_str("\"[");
            let start = fwd.len();
            let _ = write!(fwd, "{v6}");
            let text = start..fwd.len();
            fwd.push_str("]\"");
            text
        }
    };
    let forwarded_for = fwd[ip_text].to_owned();
    fwd.push_str(";proto=http");
    if let Some(h) = &host {
        if h.as_bytes().iter().all(|&b| b.is_ascii_graphic() && b != b'"' && b != b'\\') {
            fwd.push_str(";host=\"");
            fwd.push_str(h.to_str().unwrap_or_default());
            fwd.push('"');
        }
    }
    append_list(headers, HeaderName::from_static("forwarded"), fwd);
    append_list(headers, HeaderName::from_static("x-forwarded-for"), forwarded_for);
    headers.insert(HeaderName::from_static("x-forwarded-proto"), HeaderValue::from_static("http"));
    if let Some(h) = host {
        headers.insert(HeaderName::from_static("x-forwarded-host"), h);
    }
}

/// `ip` in dotted-decimal, as `Ipv4Addr`'s `Display` writes it.
fn push_ipv4(out: &mut String, ip: std::net::Ipv4Addr) {
    for (i, o) in ip.octets().into_iter().enumerate() {
        if i > 0 {
            out.push('.');
        }
        if o >= 100 {
            out.push(char::from(b'0' + o / 100));
        }
        if o >= 10 {
            out.push(char::from(b'0' + o / 10 % 10));
        }
        out.push(char::from(b'0' + o % 10));
    }
}

/// `item` as the header's value, after the values it has already (comma-joined); an item
/// that is no valid header value is left out.
fn append_list(headers: &mut HeaderMap, name: HeaderName, item: String) {
    if !headers.contains_key(&name) {
        // The string's buffer becomes the value's: no copy.
        if let Ok(v) = HeaderValue::from_maybe_shared(bytes::Bytes::from(item)) {
            headers.insert(name, v);
        }
        return;
    }
    let joined = {
        let existing: Vec<&str> = headers.get_all(&name).iter().filter_map(|v| v.to_str().ok()).collect();
        if existing.is_empty() {
            item
        } else {
            format!("{}, {item}", existing.join(", "))
        }
    };
    if let Ok(v) = HeaderValue::from_str(&joined) {
        headers.insert(name, v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hop_by_hop_headers_are_removed() {
        let mut h = HeaderMap::new();
        for (k, v) in [
            ("connection", "keep-alive, X-Secret"),
            ("keep-alive", "timeout=5"),
            ("x-secret", "1"),
            ("te", "trailers"),
            ("trailer", "x"),
            ("transfer-encoding", "chunked"),
            ("upgrade", "websocket"),
            ("proxy-authorization", "x"),
            ("proxy-foo", "x"),
            ("x-keep", "1"),
            ("content-length", "3"),
        ] {
            h.append(HeaderName::from_static(k), HeaderValue::from_static(v));
        }
        strip_hop_by_hop(&mut h);
        let mut left: Vec<_> = h.keys().map(|k| k.as_str().to_string()).collect();
        left.sort();
        assert_eq!(left, ["content-length", "x-keep"]);
    }

    #[test]
    fn forwarding_headers_append() {
        let mut h = HeaderMap::new();
        h.insert(header::HOST, HeaderValue::from_static("shop.example"));
        h.insert("x-forwarded-for", HeaderValue::from_static("10.0.0.1"));
        add_forwarding(&mut h, "127.0.0.1:5000".parse().unwrap());
        assert_eq!(h["forwarded"], "for=127.0.0.1;proto=http;host=\"shop.example\"");
        assert_eq!(h["x-forwarded-for"], "10.0.0.1, 127.0.0.1");
        assert_eq!(h["x-forwarded-proto"], "http");
        assert_eq!(h["x-forwarded-host"], "shop.example");
        let mut h = HeaderMap::new();
        add_forwarding(&mut h, "[::1]:5000".parse().unwrap());
        assert_eq!(h["forwarded"], "for=\"[::1]\";proto=http");
        assert_eq!(h["x-forwarded-for"], "::1");
    }

    #[test]
    fn ipv4_is_written_as_display_writes_it() {
        for o in 0..=255u8 {
            for ip in [[o, 0, 9, 10], [99, o, 100, 255], [1, 2, o, o / 3], [o / 7, 200, 5, o]] {
                let ip = std::net::Ipv4Addr::from(ip);
                let mut s = String::new();
                push_ipv4(&mut s, ip);
                assert_eq!(s, ip.to_string());
            }
        }
    }
}
