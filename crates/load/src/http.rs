//! A minimal HTTP/1.1 client over a tokio `TcpStream`, built for measurement:
//! it reports when the connection was established, when the first response
//! byte arrived and when the last one did, and how many body and wire bytes
//! came — exactly what a high-level client hides.
//!
//! Supports `Content-Length`, `chunked` and close-delimited bodies, keep-alive
//! (HTTP/1.1 default, HTTP/1.0 with `Connection: keep-alive`) and skips interim
//! 1xx responses. GET only, no pipelining.
//!
//! Memory per connection is one [`READ_BUF_BYTES`] buffer; a response head
//! larger than that is an error ([`HttpError::HeadTooLarge`]).
//!
//! A connection given a [`ReceivedBytes`] ([`Conn::count_received`]) adds
//! the body bytes of each read to it, at the time the read returned.

use crate::received::ReceivedBytes;
use std::io;
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::sync::Arc;
use std::time::Instant;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

/// Read buffer per connection; also the largest response head accepted.
pub const READ_BUF_BYTES: usize = 16 * 1024;
/// Most response headers accepted.
const MAX_HEADERS: usize = 64;

/// Where requests go.
#[derive(Debug, Clone)]
pub struct Target {
    pub addr: SocketAddr,
    /// Value of the `Host` header.
    pub host: String,
    /// Path prefix from the URL, without a trailing `/` (often empty).
    pub base_path: String,
}

/// A URL we cannot use.
#[derive(Debug, thiserror::Error)]
#[error("bad target URL `{url}`: {message}")]
pub struct TargetError {
    pub url: String,
    pub message: String,
}

impl Target {
    /// Parses `http://HOST[:PORT][/PREFIX]` and resolves HOST once.
    pub fn parse(url: &str) -> Result<Target, TargetError> {
        let err = |m: &str| TargetError { url: url.to_string(), message: m.to_string() };
        let rest = url.strip_prefix("http://").ok_or_else(|| err("expected http://HOST[:PORT][/PREFIX]"))?;
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, ""),
        };
        if authority.is_empty() {
            return Err(err("missing host"));
        }
        let with_port =
            if authority.rsplit_once(':').is_some_and(|(_, p)| p.parse::<u16>().is_ok()) && !authority.ends_with(']') {
                authority.to_string()
            } else {
                format!("{authority}:80")
            };
        let addr = with_port
            .to_socket_addrs()
            .map_err(|e| err(&format!("cannot resolve: {e}")))?
            .next()
            .ok_or_else(|| err("host resolves to no address"))?;
        Ok(Target { addr, host: authority.to_string(), base_path: path.trim_end_matches('/').to_string() })
    }

    /// The bytes of a GET request for `path`.
    pub fn request(&self, path: &str, keep_alive: bool) -> Vec<u8> {
        let conn = if keep_alive { "" } else { "Connection: close\r\n" };
        format!(
            "GET {}{} HTTP/1.1\r\nHost: {}\r\nUser-Agent: shortfirst-load\r\nAccept: */*\r\n{conn}\r\n",
            self.base_path, path, self.host
        )
        .into_bytes()
    }
}

/// A request failed.
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    #[error("{0}")]
    Io(#[from] io::Error),
    /// The connection closed before any response byte (a reused connection the
    /// server had already closed, typically).
    #[error("connection closed before the response")]
    ClosedBeforeResponse,
    #[error("connection closed mid-response")]
    ClosedMidResponse,
    #[error("malformed response: {0}")]
    Malformed(String),
    #[error("response head larger than {READ_BUF_BYTES} bytes")]
    HeadTooLarge,
}

/// What is known about a response so far; kept outside the request future so
/// an aborted request still reports what it had received.
#[derive(Debug, Default, Clone)]
pub struct Progress {
    /// When the request was fully handed to the kernel (after connect, if any).
    pub request_sent: Option<Instant>,
    pub first_byte: Option<Instant>,
    pub status: Option<u16>,
    pub body_bytes: u64,
    pub wire_bytes: u64,
}

/// A complete response.
#[derive(Debug, Clone, Copy)]
pub struct Response {
    pub status: u16,
    pub done: Instant,
    /// The connection may carry another request.
    pub keep_alive: bool,
}

/// One client connection.
pub struct Conn {
    stream: TcpStream,
    buf: Box<[u8]>,
    /// Requests sent on this connection.
    pub requests: u32,
    source: Option<IpAddr>,
    /// Where body bytes are counted as they arrive (none: not counted).
    received: Option<Arc<ReceivedBytes>>,
}

enum Body {
    Length(u64),
    Chunked(Chunked),
    UntilClose,
}

impl Conn {
    pub async fn connect(addr: SocketAddr) -> io::Result<Conn> {
        Conn::connect_with(addr, None).await
    }

    /// Connects, reading into `buf` (one of [`READ_BUF_BYTES`], from
    /// [`Conn::into_buf`]) if given: a generator recycles buffers instead of
    /// allocating (and faulting in) 16 KiB per connection.
    pub async fn connect_with(addr: SocketAddr, buf: Option<Box<[u8]>>) -> io::Result<Conn> {
        Conn::connect_from(None, addr, buf).await
    }

    /// As [`Conn::connect_with`], from source address `source` if given
    /// (bound before connecting; else the kernel chooses).
    pub async fn connect_from(source: Option<IpAddr>, addr: SocketAddr, buf: Option<Box<[u8]>>) -> io::Result<Conn> {
        let stream = match source {
            None => TcpStream::connect(addr).await?,
            Some(ip) => {
                let sock = crate::source_addrs::bound_socket(ip, addr)?;
                TcpSocket::from_std_stream(std::net::TcpStream::from(sock)).connect(addr).await?
            }
        };
        stream.set_nodelay(true)?;
        let buf = buf.filter(|b| b.len() == READ_BUF_BYTES).unwrap_or_else(|| vec![0u8; READ_BUF_BYTES].into());
        Ok(Conn { stream, buf, requests: 0, source, received: None })
    }

    /// The source address this connection was bound to (None: the kernel's choice).
    pub fn source(&self) -> Option<IpAddr> {
        self.source
    }

    /// Counts the body bytes of every later read into `received`.
    pub fn count_received(&mut self, received: Arc<ReceivedBytes>) {
        self.received = Some(received);
    }

    /// Adds `bytes` of body just read to the run's count, if one is kept.
    /// Called right after the read that brought them, with no await in
    /// between, so "now" is when the read returned.
    fn count_body(&self, bytes: u64) {
        if let Some(r) = &self.received {
            r.add(Instant::now(), bytes);
        }
    }

    /// Closes the connection and hands back its read buffer for reuse.
    pub fn into_buf(self) -> Box<[u8]> {
        self.buf
    }

    /// Sends `request` and reads the response, updating `progress` as bytes
    /// arrive.
    pub async fn get(&mut self, request: &[u8], progress: &mut Progress) -> Result<Response, HttpError> {
        self.requests += 1;
        self.stream.write_all(request).await?;
        progress.request_sent = Some(Instant::now());
        let mut filled = 0usize;
        loop {
            // Parse what we have; skip interim 1xx responses.
            while filled > 0 {
                match parse_head(&self.buf[..filled])? {
                    None => break,
                    Some((status, _, _, head_len)) if (100..200).contains(&status) && status != 101 => {
                        self.buf.copy_within(head_len..filled, 0);
                        filled -= head_len;
                    }
                    Some(head) => {
                        progress.status = Some(head.0);
                        return self.read_body(head, filled, progress).await;
                    }
                }
            }
            if filled == self.buf.len() {
                return Err(HttpError::HeadTooLarge);
            }
            let n = self.stream.read(&mut self.buf[filled..]).await?;
            if n == 0 {
                return Err(if progress.wire_bytes == 0 {
                    HttpError::ClosedBeforeResponse
                } else {
                    HttpError::ClosedMidResponse
                });
            }
            if progress.first_byte.is_none() {
                progress.first_byte = Some(Instant::now());
            }
            progress.wire_bytes += n as u64;
            filled += n;
        }
    }

    async fn read_body(
        &mut self,
        (status, keep_alive, body, head_len): (u16, bool, Body, usize),
        filled: usize,
        progress: &mut Progress,
    ) -> Result<Response, HttpError> {
        let mut body = body;
        let mut chunk = &self.buf[head_len..filled];
        let mut keep_alive = keep_alive;
        loop {
            // Account for the bytes in hand.
            let body_before = progress.body_bytes;
            let finished = match &mut body {
                Body::Length(left) => {
                    let take = (*left).min(chunk.len() as u64);
                    *left -= take;
                    progress.body_bytes += take;
                    if take < chunk.len() as u64 {
                        // Bytes beyond the response: the server is out of step.
                        keep_alive = false;
                    }
                    *left == 0
                }
                Body::Chunked(c) => {
                    progress.body_bytes += c.feed(chunk)?;
                    c.done()
                }
                Body::UntilClose => {
                    progress.body_bytes += chunk.len() as u64;
                    false
                }
            };
            self.count_body(progress.body_bytes - body_before);
            if finished {
                return Ok(Response { status, done: Instant::now(), keep_alive });
            }
            let n = self.stream.read(&mut self.buf[..]).await?;
            if n == 0 {
                return match body {
                    Body::UntilClose => Ok(Response { status, done: Instant::now(), keep_alive: false }),
                    _ => Err(HttpError::ClosedMidResponse),
                };
            }
            progress.wire_bytes += n as u64;
            chunk = &self.buf[..n];
        }
    }
}

/// Parses a response head: (status, keep_alive, body framing, head length),
/// or None if incomplete.
fn parse_head(buf: &[u8]) -> Result<Option<(u16, bool, Body, usize)>, HttpError> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut resp = httparse::Response::new(&mut headers);
    let head_len = match resp.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(e) => return Err(HttpError::Malformed(e.to_string())),
    };
    let status = resp.code.unwrap_or(0);
    let http11 = resp.version == Some(1);
    let mut keep_alive = http11;
    let mut length = None;
    let mut chunked = false;
    for h in resp.headers.iter() {
        if h.name.eq_ignore_ascii_case("content-length") {
            let v = std::str::from_utf8(h.value).ok().and_then(|v| v.trim().parse::<u64>().ok());
            length = Some(v.ok_or_else(|| HttpError::Malformed("bad Content-Length".into()))?);
        } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
            chunked = h.value.split(|b| *b == b',').any(|t| t.trim_ascii().eq_ignore_ascii_case(b"chunked"));
        } else if h.name.eq_ignore_ascii_case("connection") {
            for t in h.value.split(|b| *b == b',') {
                let t = t.trim_ascii();
                if t.eq_ignore_ascii_case(b"close") {
                    keep_alive = false;
                } else if t.eq_ignore_ascii_case(b"keep-alive") {
                    keep_alive = true;
                }
            }
        }
    }
    let body = if status == 204 || status == 304 || (100..200).contains(&status) {
        Body::Length(0)
    } else if chunked {
        Body::Chunked(Chunked::default())
    } else if let Some(n) = length {
        Body::Length(n)
    } else {
        keep_alive = false;
        Body::UntilClose
    };
    Ok(Some((status, keep_alive, body, head_len)))
}

/// Incremental decoder of a chunked body: counts payload bytes.
#[derive(Debug, Default)]
pub struct Chunked {
    state: ChunkState,
}

#[derive(Debug, Default, Clone, Copy, PartialEq)]
enum ChunkState {
    /// Reading the hex size line.
    #[default]
    SizeStart,
    Size {
        value: u64,
        in_ext: bool,
    },
    Data(u64),
    /// After a chunk's data: expecting CRLF.
    DataEnd,
    /// After the last chunk: trailer lines until an empty one.
    Trailer {
        line_empty: bool,
    },
    Done,
}

impl Chunked {
    pub fn done(&self) -> bool {
        self.state == ChunkState::Done
    }

    /// Consumes bytes, returns the payload bytes among them.
    pub fn feed(&mut self, mut input: &[u8]) -> Result<u64, HttpError> {
        let bad = |m: &str| HttpError::Malformed(format!("chunked body: {m}"));
        let mut payload = 0u64;
        while !input.is_empty() {
            match self.state {
                ChunkState::Data(left) => {
                    let take = left.min(input.len() as u64);
                    payload += take;
                    input = &input[take as usize..];
                    self.state = if take == left { ChunkState::DataEnd } else { ChunkState::Data(left - take) };
                    continue;
                }
                ChunkState::Done => {
                    return Err(bad("bytes after the end"));
                }
                _ => {}
            }
            let b = input[0];
            input = &input[1..];
            self.state = match (self.state, b) {
                (ChunkState::SizeStart, b) if b.is_ascii_hexdigit() => {
                    ChunkState::Size { value: u64::from((b as char).to_digit(16).unwrap_or(0)), in_ext: false }
                }
                (ChunkState::SizeStart, _) => return Err(bad("expected a hex chunk size")),
                (ChunkState::Size { value, in_ext: false }, b) if b.is_ascii_hexdigit() => {
                    let d = u64::from((b as char).to_digit(16).unwrap_or(0));
                    let value = value
                        .checked_mul(16)
                        .and_then(|v| v.checked_add(d))
                        .ok_or_else(|| bad("chunk size overflow"))?;
                    ChunkState::Size { value, in_ext: false }
                }
                (ChunkState::Size { value, .. }, b'\n') => {
                    if value == 0 {
                        ChunkState::Trailer { line_empty: true }
                    } else {
                        ChunkState::Data(value)
                    }
                }
                (ChunkState::Size { value, .. }, b'\r') => ChunkState::Size { value, in_ext: true },
                (ChunkState::Size { value, .. }, b';' | b' ' | b'\t') => ChunkState::Size { value, in_ext: true },
                (ChunkState::Size { value, in_ext: true }, _) => ChunkState::Size { value, in_ext: true },
                (ChunkState::Size { .. }, _) => return Err(bad("bad character in chunk size")),
                (ChunkState::DataEnd, b'\r') => ChunkState::DataEnd,
                (ChunkState::DataEnd, b'\n') => ChunkState::SizeStart,
                (ChunkState::DataEnd, _) => return Err(bad("expected CRLF after chunk data")),
                (ChunkState::Trailer { line_empty }, b'\n') => {
                    if line_empty {
                        ChunkState::Done
                    } else {
                        ChunkState::Trailer { line_empty: true }
                    }
                }
                (ChunkState::Trailer { line_empty }, b'\r') => ChunkState::Trailer { line_empty },
                (ChunkState::Trailer { .. }, _) => ChunkState::Trailer { line_empty: false },
                (ChunkState::Data(_) | ChunkState::Done, _) => unreachable!("handled above"),
            };
        }
        Ok(payload)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunked_decoding_any_split() {
        let body = b"5\r\nhello\r\n1;ext=1\r\n \r\n10\r\n0123456789abcdef\r\n0\r\nX-T: 1\r\n\r\n";
        for split in 0..body.len() {
            let mut c = Chunked::default();
            let a = c.feed(&body[..split]).unwrap();
            let b = c.feed(&body[split..]).unwrap();
            assert_eq!(a + b, 22, "split {split}");
            assert!(c.done());
        }
        assert!(Chunked::default().feed(b"zz\r\n").is_err());
        let mut c = Chunked::default();
        assert!(c.feed(b"2\r\nabX").is_err());
    }

    #[test]
    fn target_parsing() {
        let t = Target::parse("http://127.0.0.1:8080/prefix/").unwrap();
        assert_eq!(t.addr, "127.0.0.1:8080".parse().unwrap());
        assert_eq!(t.host, "127.0.0.1:8080");
        assert_eq!(t.base_path, "/prefix");
        assert!(std::str::from_utf8(&t.request("/a", false)).unwrap().starts_with("GET /prefix/a HTTP/1.1\r\n"));
        let t = Target::parse("http://127.0.0.1").unwrap();
        assert_eq!(t.addr.port(), 80);
        assert!(Target::parse("https://x").is_err());
        assert!(Target::parse("http://").is_err());
    }

    #[test]
    fn head_framing() {
        let (s, ka, b, n) = parse_head(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello").unwrap().unwrap();
        assert_eq!((s, ka, n), (200, true, 38));
        assert!(matches!(b, Body::Length(5)));
        let (_, ka, b, _) = parse_head(b"HTTP/1.0 200 OK\r\n\r\n").unwrap().unwrap();
        assert!(!ka && matches!(b, Body::UntilClose));
        let (_, ka, b, _) =
            parse_head(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n").unwrap().unwrap();
        assert!(!ka && matches!(b, Body::Chunked(_)));
        assert!(parse_head(b"HTTP/1.1 200 OK\r\nContent-Len").unwrap().is_none());
        assert!(parse_head(b"HTTP/1.1 2x0 OK\r\n\r\n").is_err());
    }
}
