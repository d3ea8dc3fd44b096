//! Fields on the way through, in both directions: hop-by-hop fields dropped, forwarding
//! fields appended to the request.

use std::net::SocketAddr;

use bytes::{BufMut, BytesMut};

use super::front::head::{BodyFraming, RequestHead};
use crate::upstream::wire::{trim_ows, Framing};

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

/// Whether a field is hop-by-hop by its name alone, in any case (those named in
/// `Connection` aside).
fn is_hop_by_hop(name: &[u8]) -> bool {
    HOP_BY_HOP.iter().any(|h| h.as_bytes().eq_ignore_ascii_case(name))
        || name.get(..6).is_some_and(|p| p.eq_ignore_ascii_case(b"proxy-"))
}

/// Whether a field goes on to the next hop: not hop-by-hop, not named in the message's
/// `Connection` (`listed`, from [`connection_tokens`]).
pub fn is_relayed(name: &[u8], listed: &[&[u8]]) -> bool {
    !is_hop_by_hop(name) && !listed.iter().any(|t| t.eq_ignore_ascii_case(name))
}

/// Write the request head to send upstream for the client's `head` into `out`: the request
/// line with `target`, the client's fields but the hop-by-hop ones (and those its
/// `Connection` names), `Host` (the client's, unless `rewrite_host` or it sent none: then
/// `authority`), the forwarding fields for `peer` (`Forwarded` and `X-Forwarded-For`
/// appended to the client's, `X-Forwarded-Proto/Host` replaced) and the body's framing
/// (`has_body`: body bytes follow; without a `Content-Length` they go chunked). Returns the
/// body's framing.
pub fn encode_upstream_head(
    head: &RequestHead,
    target: &str,
    peer: SocketAddr,
    authority: &str,
    rewrite_host: bool,
    has_body: bool,
    out: &mut BytesMut,
) -> Framing {
    out.reserve(head.bytes.len() + 160);
    out.put_slice(head.method().as_bytes());
    out.put_u8(b' ');
    out.put_slice(target.as_bytes());
    out.put_slice(b" HTTP/1.1\r\n");
    let listed = connection_tokens(head.fields());
    let (mut host, mut length) = (None, None);
    // The client's own forwarding lists, rarely present: no allocation when absent.
    let (mut forwarded, mut forwarded_for) = (Vec::new(), Vec::new());
    for (name, value) in head.fields() {
        if !is_relayed(name, &listed) {
            continue;
        }
        if name.eq_ignore_ascii_case(b"host") {
            host = Some(value);
            if rewrite_host {
                continue;
            }
        } else if name.eq_ignore_ascii_case(b"forwarded") {
            forwarded.push(value);
            continue;
        } else if name.eq_ignore_ascii_case(b"x-forwarded-for") {
            forwarded_for.push(value);
            continue;
        } else if name.eq_ignore_ascii_case(b"x-forwarded-proto") || name.eq_ignore_ascii_case(b"x-forwarded-host") {
            continue;
        } else if name.eq_ignore_ascii_case(b"content-length") {
            length = Some(value);
        }
        put_field(out, name, value);
    }
    if rewrite_host || host.is_none() {
        put_field(out, b"host", authority.as_bytes());
    }
    put_forwarding(out, peer, host, &forwarded, &forwarded_for);
    let framing = match (has_body, length) {
        (true, Some(_)) => Framing::Length(head_length(head)),
        (true, None) => {
            out.put_slice(b"transfer-encoding: chunked\r\n");
            Framing::Chunked
        }
        (false, _) => {
            // A bodiless POST/PUT/PATCH says so (as hyper's client does).
            if matches!(head.method(), "POST" | "PUT" | "PATCH") && length.is_none() {
                out.put_slice(b"content-length: 0\r\n");
            }
            Framing::Empty
        }
    };
    out.put_slice(b"\r\n");
    framing
}

/// The body's length the head declared (checked when it was parsed).
fn head_length(head: &RequestHead) -> u64 {
    match head.body {
        BodyFraming::Length(n) => n,
        BodyFraming::None | BodyFraming::Chunked => 0,
    }
}

pub fn put_field(out: &mut BytesMut, name: &[u8], value: &[u8]) {
    out.put_slice(name);
    out.put_slice(b": ");
    out.put_slice(value);
    out.put_slice(b"\r\n");
}

/// The field names a message's `Connection` lists (hop-by-hop for this message).
pub fn connection_tokens<'a>(fields: impl Iterator<Item = (&'a [u8], &'a [u8])>) -> Vec<&'a [u8]> {
    let mut out = Vec::new();
    for (name, value) in fields {
        if name.eq_ignore_ascii_case(b"connection") {
            out.extend(value.split(|&b| b == b',').map(trim_ows).filter(|t| !t.is_empty()));
        }
    }
    out
}

/// `Forwarded` and `X-Forwarded-For` (the client's lists, if any, then this hop),
/// `X-Forwarded-Proto`, and `X-Forwarded-Host` (the client's `Host`).
fn put_forwarding(
    out: &mut BytesMut,
    peer: SocketAddr,
    host: Option<&[u8]>,
    forwarded: &[&[u8]],
    forwarded_for: &[&[u8]],
) {
    use std::fmt::Write as _;
    let mut ip = IpText::default();
    match peer.ip() {
        std::net::IpAddr::V4(v4) => push_ipv4(&mut ip, v4),
        std::net::IpAddr::V6(v6) => {
            let _ = write!(ip, "{v6}");
        }
    }
    let ip = ip.as_bytes();
    out.put_slice(b"forwarded: ");
    put_list_head(out, forwarded);
    out.put_slice(b"for=");
    if peer.is_ipv6() {
        out.put_slice(b"\"[");
        out.put_slice(ip);
        out.put_slice(b"]\"");
    } else {
        out.put_slice(ip);
    }
    out.put_slice(b";proto=http");
    if let Some(h) = host.filter(|h| h.iter().all(|&b| b.is_ascii_graphic() && b != b'"' && b != b'\\')) {
        out.put_slice(b";host=\"");
        out.put_slice(h);
        out.put_u8(b'"');
    }
    out.put_slice(b"\r\nx-forwarded-for: ");
    put_list_head(out, forwarded_for);
    out.put_slice(ip);
    out.put_slice(b"\r\nx-forwarded-proto: http\r\n");
    if let Some(h) = host {
        put_field(out, b"x-forwarded-host", h);
    }
}

/// An address's text, written without an allocation (the longest IPv6 text is 45 bytes).
struct IpText {
    buf: [u8; 48],
    len: usize,
}

impl Default for IpText {
    fn default() -> Self {
        IpText { buf: [0; 48], len: 0 }
    }
}

impl IpText {
    fn as_bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

impl std::fmt::Write for IpText {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        let end = self.len + s.len();
        self.buf.get_mut(self.len..end).ok_or(std::fmt::Error)?.copy_from_slice(s.as_bytes());
        self.len = end;
        Ok(())
    }
}

/// The values a list field already has, comma-joined, with the separator before this
/// hop's item.
fn put_list_head(out: &mut BytesMut, existing: &[&[u8]]) {
    for v in existing.iter().map(|v| trim_ows(v)).filter(|v| !v.is_empty()) {
        out.put_slice(v);
        out.put_slice(b", ");
    }
}

/// `ip` in dotted-decimal, as `Ipv4Addr`'s `Display` writes it (without its padding
/// support's buffering).
fn push_ipv4(out: &mut impl std::fmt::Write, ip: std::net::Ipv4Addr) {
    for (i, o) in ip.octets().into_iter().enumerate() {
        if i > 0 {
            let _ = out.write_char('.');
        }
        if o >= 100 {
            let _ = out.write_char(char::from(b'0' + o / 100));
        }
        if o >= 10 {
            let _ = out.write_char(char::from(b'0' + o / 10 % 10));
        }
        let _ = out.write_char(char::from(b'0' + o % 10));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hop_by_hop_fields_are_not_relayed() {
        let fields: [(&[u8], &[u8]); 3] =
            [(b"Connection", b"keep-alive, X-Secret"), (b"x-keep", b"1"), (b"Content-Length", b"3")];
        let listed = connection_tokens(fields.into_iter());
        for name in [
            "connection",
            "Keep-Alive",
            "x-secret",
            "TE",
            "trailer",
            "transfer-encoding",
            "upgrade",
            "proxy-authorization",
            "Proxy-Foo",
        ] {
            assert!(!is_relayed(name.as_bytes(), &listed), "{name}");
        }
        for name in ["x-keep", "content-length", "proxy", "date"] {
            assert!(is_relayed(name.as_bytes(), &listed), "{name}");
        }
    }

    fn upstream_head(request: &str, peer: &str, rewrite_host: bool) -> (String, Framing) {
        let mut buf = BytesMut::from(request.as_bytes());
        let head = crate::proxy::front::head::parse_request_head(&mut buf, &mut Vec::new()).unwrap().unwrap();
        let mut out = BytesMut::new();
        let has_body = head.body != BodyFraming::None;
        let f =
            encode_upstream_head(&head, "/up", peer.parse().unwrap(), "backend:9", rewrite_host, has_body, &mut out);
        (String::from_utf8(out.to_vec()).unwrap(), f)
    }

    #[test]
    fn the_upstream_head_drops_hop_by_hop_fields_and_appends_forwarding() {
        let (head, f) = upstream_head(
            "GET /a HTTP/1.1\r\nHost: shop.example\r\nConnection: keep-alive, X-Secret\r\nX-Secret: 1\r\n\
             Keep-Alive: 5\r\nTE: trailers\r\nProxy-Foo: x\r\nX-Forwarded-For: 10.0.0.1\r\nX-Forwarded-Proto: https\r\n\
             Accept: */*\r\n\r\n",
            "127.0.0.1:5000",
            false,
        );
        assert_eq!(f, Framing::Empty);
        assert_eq!(
            head,
            "GET /up HTTP/1.1\r\nHost: shop.example\r\nAccept: */*\r\n\
             forwarded: for=127.0.0.1;proto=http;host=\"shop.example\"\r\n\
             x-forwarded-for: 10.0.0.1, 127.0.0.1\r\nx-forwarded-proto: http\r\nx-forwarded-host: shop.example\r\n\r\n"
        );
        let (head, _) = upstream_head("GET / HTTP/1.0\r\n\r\n", "[::1]:5000", false);
        assert_eq!(
            head,
            "GET /up HTTP/1.1\r\nhost: backend:9\r\nforwarded: for=\"[::1]\";proto=http\r\n\
             x-forwarded-for: ::1\r\nx-forwarded-proto: http\r\n\r\n"
        );
        let (head, _) = upstream_head("GET / HTTP/1.1\r\nHost: a\r\n\r\n", "1.2.3.4:1", true);
        assert!(head.starts_with("GET /up HTTP/1.1\r\nhost: backend:9\r\n"), "{head}");
        assert!(head.contains("x-forwarded-host: a\r\n"), "{head}");
    }

    #[test]
    fn the_upstream_head_frames_the_body() {
        let (head, f) = upstream_head("POST / HTTP/1.1\r\nContent-Length: 3\r\n\r\n", "1.2.3.4:1", false);
        assert_eq!(f, Framing::Length(3));
        assert!(head.contains("Content-Length: 3\r\n") && !head.contains("chunked"), "{head}");
        let (head, f) = upstream_head("PUT / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", "1.2.3.4:1", false);
        assert_eq!(f, Framing::Chunked);
        assert_eq!(head.matches("ransfer-encoding").count(), 1, "{head}");
        let (head, f) = upstream_head("POST / HTTP/1.1\r\n\r\n", "1.2.3.4:1", false);
        assert_eq!(f, Framing::Empty);
        assert!(head.contains("content-length: 0\r\n"), "{head}");
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
