//! The answer written to the client: a relayed upstream response (head re-framed for this
//! hop, body streamed as the upstream sends it) or one of the gatekeeper's own.
//!
//! A small response goes out in one write: the head and whatever of the body is already
//! read are gathered in one buffer (up to [`GATHER_BYTES`]) before the first write.

use std::cell::RefCell;
use std::io;
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::{BufMut, Bytes, BytesMut};
use http_body_util::BodyExt;
use hyper::body::{Body, Frame};
use hyper::StatusCode;
use tokio::io::AsyncWriteExt;
use tokio::net::tcp::OwnedWriteHalf;

use super::body::ReadSide;
use super::head::{RequestHead, MAX_REQUEST_HEAD_BYTES};
use crate::proxy::headers::{connection_tokens, is_relayed, put_field};
use crate::proxy::stream::Metered;
use crate::upstream::wire::ResponseHead;

/// Body bytes gathered behind the head (or between writes) before they are written.
pub const GATHER_BYTES: usize = 16 * 1024;

/// What the proxy answers a request with.
// The relay is the common case: boxing it would cost an allocation per response.
#[allow(clippy::large_enum_variant)]
pub(in crate::proxy) enum Reply {
    /// The upstream's response: its head as received and its body, metered.
    Relay(ResponseHead, Metered),
    /// The gatekeeper's own answer: a short text, `Retry-After` on a 503.
    Own { status: StatusCode, msg: &'static str, retry_after_s: Option<u32> },
}

impl Reply {
    pub fn status(&self) -> StatusCode {
        match self {
            Reply::Relay(head, _) => head.status,
            Reply::Own { status, .. } => *status,
        }
    }
}

/// How the body goes to this client.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Framing {
    /// No body (HEAD, 204, 304, or an empty one): the upstream's `Content-Length` is
    /// relayed as it is.
    None,
    Length(u64),
    Chunked,
    /// Until the connection closes (an HTTP/1.0 client and a body of unknown length).
    Close,
}

/// Write `reply` to the client. `keep`: the connection may carry another request after
/// it, if the reply allows; returns whether it does. An error (the client gone, or the
/// upstream's body failing midway) means the connection must be closed. `side`: the
/// connection's read side, watched while the upstream's body is awaited (a client that
/// closes the connection then is gone).
pub(in crate::proxy) async fn write_reply(
    wr: &mut OwnedWriteHalf,
    out: &mut BytesMut,
    reply: Reply,
    req: &RequestHead,
    keep: bool,
    side: Option<&mut ReadSide>,
) -> io::Result<bool> {
    out.clear();
    match reply {
        Reply::Own { status, msg, retry_after_s } => {
            status_line(out, status);
            out.put_slice(b"content-type: text/plain; charset=utf-8\r\ncontent-length: ");
            put_decimal(out, msg.len() as u64 + 1);
            out.put_slice(b"\r\n");
            if let Some(s) = retry_after_s {
                out.put_slice(b"retry-after: ");
                put_decimal(out, u64::from(s));
                out.put_slice(b"\r\n");
            }
            put_date(out);
            end_head(out, keep, req.http10);
            if !req.is_head() {
                out.put_slice(msg.as_bytes());
                out.put_slice(b"\n");
            }
            wr.write_all(out).await?;
            Ok(keep)
        }
        Reply::Relay(head, body) => relay(wr, out, head, body, req, keep, side).await,
    }
}

async fn relay(
    wr: &mut OwnedWriteHalf,
    out: &mut BytesMut,
    head: ResponseHead,
    mut body: Metered,
    req: &RequestHead,
    keep: bool,
    side: Option<&mut ReadSide>,
) -> io::Result<bool> {
    let framing = if body.is_end_stream() {
        Framing::None
    } else if let Some(n) = body.size_hint().exact() {
        Framing::Length(n)
    } else if req.http10 {
        Framing::Close
    } else {
        Framing::Chunked
    };
    let keep = keep && framing != Framing::Close;
    status_line(out, head.status);
    let listed = connection_tokens(head.fields());
    let mut dated = false;
    for (name, value) in head.fields() {
        if !is_relayed(name, &listed) || (framing != Framing::None && name.eq_ignore_ascii_case(b"content-length")) {
            continue;
        }
        dated |= name.eq_ignore_ascii_case(b"date");
        put_field(out, name, value);
    }
    if !dated {
        // RFC 9110 §6.6.1: a forwarded response without one gets the time received.
        put_date(out);
    }
    match framing {
        Framing::Length(n) => {
            out.put_slice(b"content-length: ");
            put_decimal(out, n);
            out.put_slice(b"\r\n");
        }
        Framing::Chunked => out.put_slice(b"transfer-encoding: chunked\r\n"),
        Framing::None | Framing::Close => {}
    }
    end_head(out, keep, req.http10);
    if framing != Framing::None {
        stream_body(wr, out, &mut body, framing, side).await?;
    }
    if !out.is_empty() {
        wr.write_all(out).await?;
    }
    Ok(keep)
}

/// The body's frames after the head in `out`: gathered while they are ready at once,
/// written when the gathered bytes would pass [`GATHER_BYTES`] or the upstream has no more
/// bytes ready yet. Ends with the body's end (chunked: its last chunk, left in `out`).
async fn stream_body(
    wr: &mut OwnedWriteHalf,
    out: &mut BytesMut,
    body: &mut Metered,
    framing: Framing,
    mut side: Option<&mut ReadSide>,
) -> io::Result<()> {
    loop {
        let next = match ready_frame(body).await {
            Some(f) => f,
            None => {
                if !out.is_empty() {
                    wr.write_all(out).await?;
                    out.clear();
                }
                match side.as_deref_mut() {
                    None => body.frame().await,
                    Some(rs) => tokio::select! {
                        biased;
                        f = body.frame() => f,
                        () = rs.closed(MAX_REQUEST_HEAD_BYTES) => {
                            let gone = io::Error::new(io::ErrorKind::ConnectionAborted, "client closed the connection");
                            return Err(gone);
                        }
                    },
                }
            }
        };
        match next {
            None => break,
            Some(Err(e)) => return Err(io::Error::other(e)),
            Some(Ok(frame)) => {
                if let Ok(data) = frame.into_data() {
                    put_data(wr, out, data, framing).await?;
                }
            }
        }
        if body.is_end_stream() {
            break;
        }
    }
    if framing == Framing::Chunked {
        out.put_slice(b"0\r\n\r\n");
    }
    Ok(())
}

/// The body's next frame if it is ready without waiting.
async fn ready_frame(body: &mut Metered) -> Option<Option<Result<Frame<Bytes>, crate::proxy::BoxError>>> {
    tokio::select! {
        biased;
        f = body.frame() => Some(f),
        () = std::future::ready(()) => None,
    }
}

/// Add one piece of body to `out` (framed as a chunk if chunked), writing `out` first if
/// the piece would take it past [`GATHER_BYTES`]; a large piece of a length-framed body
/// is written from its own buffer.
async fn put_data(wr: &mut OwnedWriteHalf, out: &mut BytesMut, data: Bytes, framing: Framing) -> io::Result<()> {
    if data.is_empty() {
        return Ok(());
    }
    if out.len() + data.len() > GATHER_BYTES && !out.is_empty() {
        wr.write_all(out).await?;
        out.clear();
    }
    if framing == Framing::Chunked {
        out.reserve(data.len() + 20);
        put_hex(out, data.len() as u64);
        out.put_slice(b"\r\n");
        out.put_slice(&data);
        out.put_slice(b"\r\n");
    } else if data.len() > GATHER_BYTES {
        wr.write_all(&data).await?;
    } else {
        out.put_slice(&data);
    }
    Ok(())
}

fn status_line(out: &mut BytesMut, status: StatusCode) {
    out.put_slice(b"HTTP/1.1 ");
    out.put_slice(status.as_str().as_bytes());
    out.put_u8(b' ');
    out.put_slice(status.canonical_reason().unwrap_or("").as_bytes());
    out.put_slice(b"\r\n");
}

/// `Connection` as this hop needs it, and the head's end.
fn end_head(out: &mut BytesMut, keep: bool, http10: bool) {
    if !keep {
        out.put_slice(b"connection: close\r\n");
    } else if http10 {
        out.put_slice(b"connection: keep-alive\r\n");
    }
    out.put_slice(b"\r\n");
}

fn put_decimal(out: &mut BytesMut, n: u64) {
    put_digits(out, n, 10);
}

fn put_hex(out: &mut BytesMut, n: u64) {
    put_digits(out, n, 16);
}

/// `n` in base `radix` (at most 16), lower-case digits.
fn put_digits(out: &mut BytesMut, mut n: u64, radix: u64) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b"0123456789abcdef"[(n % radix) as usize];
        n /= radix;
        if n == 0 {
            break;
        }
    }
    out.put_slice(&digits[at..]);
}

thread_local! {
    /// The `Date` line of the current second, formatted once per second per thread.
    static DATE: RefCell<(u64, String)> = const { RefCell::new((u64::MAX, String::new())) };
}

fn put_date(out: &mut BytesMut) {
    let now = SystemTime::now();
    let secs = now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    DATE.with_borrow_mut(|(at, line)| {
        if *at != secs {
            *at = secs;
            *line = format!("date: {}\r\n", httpdate::fmt_http_date(now));
        }
        out.put_slice(line.as_bytes());
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_written_as_text() {
        let mut out = BytesMut::new();
        for n in [0u64, 7, 10, 1024, u64::MAX] {
            out.clear();
            put_decimal(&mut out, n);
            assert_eq!(&out[..], n.to_string().as_bytes());
            out.clear();
            put_hex(&mut out, n);
            assert_eq!(&out[..], format!("{n:x}").as_bytes());
        }
    }

    #[test]
    fn the_date_line_is_an_http_date() {
        let mut out = BytesMut::new();
        put_date(&mut out);
        let line = std::str::from_utf8(&out).unwrap();
        let value = line.strip_prefix("date: ").and_then(|l| l.strip_suffix("\r\n")).unwrap();
        assert!(httpdate::parse_http_date(value).is_ok(), "{line:?}");
    }
}
