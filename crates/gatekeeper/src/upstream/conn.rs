//! One upstream connection and one exchange on it: the request head written in one piece,
//! the request body after it (while watching for an early answer), the response head read
//! and parsed; the response body is then read by [`UpstreamBody`] as it is polled.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Buf, BufMut, Bytes, BytesMut};
use http_body_util::BodyExt;
use hyper::body::Body;
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

use super::body::UpstreamBody;
use super::wire::{parse_response_head, Framing, HeadError, ResponseHead, MAX_HEAD_BYTES};
use super::UpstreamError;
use crate::metrics::OpenGuard;
use crate::proxy::RequestBody;

/// Bytes read from the socket at a time (at least this much room is made in the buffer):
/// a response body larger than this streams through in pieces of at most this size.
pub const READ_CHUNK_BYTES: usize = 16 * 1024;

/// A waker that does nothing, to ask a socket's readiness without waiting for it.
static NOOP_WAKER: std::sync::LazyLock<std::task::Waker> = std::sync::LazyLock::new(|| {
    struct Noop;
    impl std::task::Wake for Noop {
        fn wake(self: std::sync::Arc<Self>) {}
    }
    std::task::Waker::from(std::sync::Arc::new(Noop))
});

/// An upstream connection. Dropped, its socket is closed at once: the upstream's signal
/// to stop working on a request whose exchange failed or was abandoned.
pub struct Conn {
    stream: TcpStream,
    /// Bytes read and not yet consumed; empty between exchanges.
    pub(super) buf: BytesMut,
    /// The connection may carry another request after the current one.
    keep: bool,
    _open: OpenGuard,
}

/// How an exchange failed, with what the retry rule needs to know.
pub struct Failed {
    pub error: UpstreamError,
    /// No byte of the request reached the connection.
    pub unsent: bool,
    /// The connection ended (closed or reset) before any byte of a response.
    pub closed_before_response: bool,
}

impl Failed {
    fn other(error: UpstreamError) -> Self {
        Failed { error, unsent: false, closed_before_response: false }
    }
}

impl Conn {
    pub fn new(stream: TcpStream, open: OpenGuard) -> Self {
        Conn { stream, buf: BytesMut::new(), keep: true, _open: open }
    }

    pub(super) fn reusable(&self) -> bool {
        self.keep && self.buf.is_empty()
    }

    /// Whether the upstream has closed this idle connection (or sent bytes unasked, which
    /// makes it unusable too). Costs no system call unless the socket became readable.
    pub fn peer_closed(&self) -> bool {
        let mut cx = Context::from_waker(&NOOP_WAKER);
        match self.stream.poll_read_ready(&mut cx) {
            Poll::Pending => false,
            Poll::Ready(Err(_)) => true,
            Poll::Ready(Ok(())) => {
                !matches!(self.stream.try_read(&mut [0u8; 1]), Err(e) if e.kind() == io::ErrorKind::WouldBlock)
            }
        }
    }

    /// Read more bytes into the buffer; `Ok(0)` at end of file.
    pub(super) fn poll_read(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        if self.buf.capacity() - self.buf.len() < READ_CHUNK_BYTES / 4 {
            self.buf.reserve(READ_CHUNK_BYTES);
        }
        tokio_util::io::poll_read_buf(Pin::new(&mut self.stream), cx, &mut self.buf)
    }

    /// Send a request (its head already encoded, `head`) and read the response head; the
    /// response's body holds the connection.
    pub async fn exchange(
        mut self,
        head: &Bytes,
        body: &mut RequestBody,
        framing: Framing,
        head_request: bool,
    ) -> Result<(ResponseHead, UpstreamBody), Failed> {
        let mut unsent = head.clone();
        while unsent.has_remaining() {
            match self.stream.write(&unsent).await {
                Ok(0) => return Err(self.write_failed(head, &unsent, io::ErrorKind::WriteZero.into())),
                Ok(n) => unsent.advance(n),
                Err(e) => return Err(self.write_failed(head, &unsent, e)),
            }
        }
        if framing != Framing::Empty {
            // Boxed: sending a body is the exchange's largest state, and most requests
            // have none.
            Box::pin(self.send_body(body, framing)).await?;
        }
        let parsed = loop {
            match self.read_head(head_request).await? {
                p if p.head.status.is_informational() => continue,
                p => break p,
            }
        };
        self.keep &= parsed.keep_alive;
        let body = UpstreamBody::new(parsed.framing, self);
        Ok((parsed.head, body))
    }

    fn write_failed(&self, head: &Bytes, unsent: &Bytes, e: io::Error) -> Failed {
        let none_sent = unsent.len() == head.len();
        Failed { error: UpstreamError::Io(e), unsent: none_sent, closed_before_response: none_sent }
    }

    /// Send the request body, framed. An upstream that answers before it has the whole
    /// body (a 413, say) is listened to: the rest of the body is not sent, and the
    /// connection is closed after the response.
    async fn send_body(&mut self, body: &mut RequestBody, framing: Framing) -> Result<(), Failed> {
        let (mut rd, mut wr) = self.stream.split();
        let buf = &mut self.buf;
        let answered = async {
            // Interim (1xx) heads, a 100 Continue say, are skipped: the body goes on.
            while let Ok(n) = tokio::io::AsyncReadExt::read_buf(&mut rd, buf).await {
                match interim_head_len(buf) {
                    _ if n == 0 || buf.len() >= MAX_HEAD_BYTES => return,
                    Some(Some(len)) => buf.advance(len),
                    Some(None) => {}
                    None => return,
                }
            }
        };
        tokio::select! {
            biased;
            sent = write_body(&mut wr, body, framing) => sent.map_err(Failed::other),
            () = answered => {
                self.keep = false;
                Ok(())
            }
        }
    }

    /// Read until a complete response head is buffered, and take it.
    async fn read_head(&mut self, head_request: bool) -> Result<super::wire::ParsedHead, Failed> {
        loop {
            if let Some(p) = parse_response_head(&mut self.buf, head_request).map_err(head_failed)? {
                return Ok(p);
            }
            let before = self.buf.len();
            match std::future::poll_fn(|cx| self.poll_read(cx)).await {
                Ok(0) if before == 0 => return Err(closed(UpstreamError::Closed)),
                Ok(0) => return Err(Failed::other(UpstreamError::ClosedInHead)),
                Ok(_) => {}
                Err(e) if before == 0 && is_reset(&e) => return Err(closed(UpstreamError::Io(e))),
                Err(e) => return Err(Failed::other(UpstreamError::Io(e))),
            }
        }
    }
}

/// `Some(Some(len))`: `buf` starts with a complete interim (1xx) head of `len` bytes;
/// `Some(None)`: with an incomplete head; `None`: with a final head, or bytes that are no
/// head at all (for [`Conn::read_head`] to take or report).
fn interim_head_len(buf: &[u8]) -> Option<Option<usize>> {
    let mut slots = [httparse::EMPTY_HEADER; super::wire::MAX_HEADERS];
    let mut resp = httparse::Response::new(&mut slots);
    match resp.parse(buf) {
        Ok(httparse::Status::Partial) => Some(None),
        Ok(httparse::Status::Complete(len)) if resp.code.is_some_and(|c| (100..200).contains(&c) && c != 101) => {
            Some(Some(len))
        }
        _ => None,
    }
}

fn closed(error: UpstreamError) -> Failed {
    Failed { error, unsent: false, closed_before_response: true }
}

fn head_failed(e: HeadError) -> Failed {
    Failed::other(UpstreamError::Head(e))
}

fn is_reset(e: &io::Error) -> bool {
    matches!(e.kind(), io::ErrorKind::ConnectionReset | io::ErrorKind::ConnectionAborted | io::ErrorKind::BrokenPipe)
}

/// Write the request body's frames (trailers are not forwarded), chunked or as they are.
async fn write_body(
    wr: &mut (impl AsyncWrite + Unpin),
    body: &mut RequestBody,
    framing: Framing,
) -> Result<(), UpstreamError> {
    let chunked = framing == Framing::Chunked;
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(UpstreamError::RequestBody)?;
        let Ok(data) = frame.into_data() else { continue };
        if data.is_empty() {
            continue;
        }
        if chunked {
            // One write per chunk: its size line, its data, its end.
            let mut piece = BytesMut::with_capacity(data.len() + 20);
            piece.put_slice(format!("{:x}\r\n", data.len()).as_bytes());
            piece.put_slice(&data);
            piece.put_slice(b"\r\n");
            wr.write_all(&piece).await.map_err(UpstreamError::Io)?;
        } else {
            wr.write_all(&data).await.map_err(UpstreamError::Io)?;
        }
        if body.is_end_stream() {
            break;
        }
    }
    if chunked {
        wr.write_all(b"0\r\n\r\n").await.map_err(UpstreamError::Io)?;
    }
    Ok(())
}
