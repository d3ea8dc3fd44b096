//! The client's request body, read from its connection as the proxy polls it, framed by
//! `Content-Length` or the chunked coding. The connection's read side travels with the
//! body and is handed back (through a [`Slot`]) at the body's end, or when the body is
//! dropped before its end; then the connection is closed after the response (what is left
//! of the body cannot be told from the next request).

use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{ready, Context, Poll};

use bytes::{Bytes, BytesMut};
use hyper::body::{Body, Frame, SizeHint};
use tokio::net::tcp::OwnedReadHalf;

use super::head::BodyFraming;
use crate::upstream::chunked::{self, ChunkError, Decoder};

/// Bytes read from the client at a time: a larger body streams through in pieces of at
/// most this size.
pub const READ_CHUNK_BYTES: usize = 16 * 1024;

/// How long, and for how many bytes, a connection the proxy closes reads what the client
/// still sends ([`ReadSide::linger`]).
pub const LINGER: std::time::Duration = std::time::Duration::from_secs(1);
pub const LINGER_BYTES: usize = 1 << 20;

/// The interim response a client that sent `Expect: 100-continue` waits for.
const CONTINUE: &[u8] = b"HTTP/1.1 100 Continue\r\n\r\n";

/// A client connection's read side: the socket and the bytes read and not yet taken.
pub struct ReadSide {
    pub rd: OwnedReadHalf,
    pub buf: BytesMut,
}

impl ReadSide {
    /// Read more bytes into the buffer; `Ok(0)` at end of file.
    pub fn poll_read(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        if self.buf.capacity() - self.buf.len() < READ_CHUNK_BYTES / 4 {
            self.buf.reserve(READ_CHUNK_BYTES);
        }
        tokio_util::io::poll_read_buf(Pin::new(&mut self.rd), cx, &mut self.buf)
    }

    /// Read and drop what the client still sends, until it closes its side, for at most
    /// [`LINGER`] and [`LINGER_BYTES`]: closing a socket with unread bytes sends a reset,
    /// which can destroy the last response before the client has read it.
    pub async fn linger(&mut self) {
        let mut dropped_bytes = 0;
        let _ = tokio::time::timeout(LINGER, async {
            while dropped_bytes < LINGER_BYTES {
                self.buf.clear();
                match std::future::poll_fn(|cx| self.poll_read(cx)).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => dropped_bytes += n,
                }
            }
        })
        .await;
    }

    /// Resolves when the client closes or resets the connection. Bytes it sends meanwhile
    /// (the next pipelined request) are kept, up to `limit` buffered; past that this stays
    /// pending (the client is no longer watched).
    pub async fn closed(&mut self, limit: usize) {
        loop {
            if self.buf.len() >= limit {
                return std::future::pending().await;
            }
            match std::future::poll_fn(|cx| self.poll_read(cx)).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    }
}

/// Where a request body puts its connection's read side back at the body's end.
pub type Slot = Arc<Handback>;

#[derive(Default)]
pub struct Handback {
    side: Mutex<Option<ReadSide>>,
    /// The last body handed its read side back at its end (it was read whole).
    complete: std::sync::atomic::AtomicBool,
    /// Notified when the read side is put back.
    back: tokio::sync::Notify,
}

impl Handback {
    /// Whether the last body was read to its end.
    pub fn complete(&self) -> bool {
        self.complete.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The read side, if the body has handed it back.
    pub fn take(&self) -> Option<ReadSide> {
        self.side.lock().unwrap_or_else(|p| p.into_inner()).take()
    }

    /// Wait until the body hands the read side back, and take it.
    pub async fn wait(&self) -> ReadSide {
        loop {
            if let Some(side) = self.take() {
                return side;
            }
            self.back.notified().await;
        }
    }

    fn put(&self, side: ReadSide, complete: bool) {
        self.complete.store(complete, std::sync::atomic::Ordering::Relaxed);
        *self.side.lock().unwrap_or_else(|p| p.into_inner()) = Some(side);
        self.back.notify_one();
    }
}

/// What reading a request body failed with.
#[derive(Debug, thiserror::Error)]
pub enum ClientBodyError {
    #[error("client closed the connection {0} bytes short of the request body's end")]
    ClosedShort(u64),
    #[error("client closed the connection within a chunked request body")]
    ClosedInChunked,
    #[error("reading the request body: {0}")]
    Io(#[from] io::Error),
    #[error("request body: {0}")]
    Chunked(#[from] ChunkError),
}

enum Reading {
    Length(u64),
    Chunked(Decoder),
    Done,
}

pub struct ClientBody {
    reading: Reading,
    /// `None` once handed back (at the end) or failed.
    side: Option<ReadSide>,
    slot: Slot,
    /// Bytes of `100 Continue` still to write before the first read (`Expect: 100-continue`).
    continue_left: usize,
}

impl ClientBody {
    pub fn new(framing: BodyFraming, side: ReadSide, slot: Slot, expect_continue: bool) -> Self {
        let reading = match framing {
            BodyFraming::None | BodyFraming::Length(0) => Reading::Done,
            BodyFraming::Length(n) => Reading::Length(n),
            BodyFraming::Chunked => Reading::Chunked(Decoder::default()),
        };
        let mut body = ClientBody { reading, side: Some(side), slot, continue_left: 0 };
        if matches!(body.reading, Reading::Done) {
            body.hand_back();
        } else if expect_continue && body.side.as_ref().is_some_and(|s| s.buf.is_empty()) {
            // A client that already sent body bytes is not waiting for the 100.
            body.continue_left = CONTINUE.len();
        }
        body
    }

    fn hand_back(&mut self) {
        self.reading = Reading::Done;
        if let Some(side) = self.side.take() {
            self.slot.put(side, true);
        }
    }

    fn failed(&mut self, e: ClientBodyError) -> Poll<Option<Result<Frame<Bytes>, ClientBodyError>>> {
        self.reading = Reading::Done;
        if let Some(side) = self.side.take() {
            self.slot.put(side, false);
        }
        Poll::Ready(Some(Err(e)))
    }

    /// Write what is left of `100 Continue` (the socket's send buffer is empty between
    /// requests, so this is one write).
    fn poll_continue(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let Some(side) = self.side.as_ref() else { return Poll::Ready(Ok(())) };
        let stream = side.rd.as_ref();
        while self.continue_left > 0 {
            ready!(stream.poll_write_ready(cx))?;
            match stream.try_write(&CONTINUE[CONTINUE.len() - self.continue_left..]) {
                Ok(n) => self.continue_left -= n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
        Poll::Ready(Ok(()))
    }

    /// The next frame from what is buffered; `None` when more bytes must be read.
    fn decode(&mut self) -> Option<Result<Option<Frame<Bytes>>, ClientBodyError>> {
        let buf = &mut self.side.as_mut()?.buf;
        let frame = match &mut self.reading {
            Reading::Done => return Some(Ok(None)),
            _ if buf.is_empty() => return None,
            Reading::Length(left) => {
                let n = usize::try_from(*left).unwrap_or(usize::MAX).min(buf.len());
                *left -= n as u64;
                let data = buf.split_to(n).freeze();
                if *left == 0 {
                    self.hand_back();
                }
                Frame::data(data)
            }
            Reading::Chunked(d) => match d.step(buf) {
                Err(e) => return Some(Err(e.into())),
                Ok(chunked::Step::More) => return None,
                Ok(chunked::Step::Data(b)) => Frame::data(b),
                Ok(chunked::Step::Trailers(t)) => {
                    self.hand_back();
                    Frame::trailers(t)
                }
                Ok(chunked::Step::End) => {
                    self.hand_back();
                    return Some(Ok(None));
                }
            },
        };
        Some(Ok(Some(frame)))
    }

    /// The client closed its side (end of file) before the body's end.
    fn closed(&mut self) -> ClientBodyError {
        match std::mem::replace(&mut self.reading, Reading::Done) {
            Reading::Length(left) => ClientBodyError::ClosedShort(left),
            _ => ClientBodyError::ClosedInChunked,
        }
    }
}

impl Drop for ClientBody {
    fn drop(&mut self) {
        // Dropped before its end: the connection gets its read side back to close with.
        if let Some(side) = self.side.take() {
            self.slot.put(side, false);
        }
    }
}

impl Body for ClientBody {
    type Data = Bytes;
    type Error = ClientBodyError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, ClientBodyError>>> {
        let this = &mut *self;
        if this.continue_left > 0 {
            if let Err(e) = ready!(this.poll_continue(cx)) {
                return this.failed(e.into());
            }
        }
        loop {
            match this.decode() {
                Some(Ok(frame)) => return Poll::Ready(frame.map(Ok)),
                Some(Err(e)) => return this.failed(e),
                None if this.side.is_none() => return Poll::Ready(None),
                None => {}
            }
            let side = this.side.as_mut().expect("checked above");
            match ready!(side.poll_read(cx)) {
                Ok(0) => {
                    let e = this.closed();
                    return this.failed(e);
                }
                Ok(_) => {}
                Err(e) => return this.failed(e.into()),
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        matches!(self.reading, Reading::Done)
    }

    fn size_hint(&self) -> SizeHint {
        match &self.reading {
            Reading::Done => SizeHint::with_exact(0),
            Reading::Length(n) => SizeHint::with_exact(*n),
            Reading::Chunked(_) => SizeHint::default(),
        }
    }
}
