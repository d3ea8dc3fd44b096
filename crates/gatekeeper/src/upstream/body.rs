//! A response body read from its upstream connection as it is polled, by its framing; the
//! connection comes back out of it once the body is complete, for reuse.

use std::pin::Pin;
use std::task::{ready, Context, Poll};

use bytes::Bytes;
use hyper::body::{Body, Frame, SizeHint};

use super::chunked::{self, ChunkError, Decoder};
use super::conn::Conn;
use super::wire::Framing;

/// What reading a response body failed with.
#[derive(Debug, thiserror::Error)]
pub enum BodyError {
    #[error("upstream closed the connection {0} bytes short of the response body's end")]
    ClosedShort(u64),
    #[error("upstream closed the connection within a chunked response body")]
    ClosedInChunked,
    #[error("reading the upstream response body: {0}")]
    Io(#[from] std::io::Error),
    #[error("upstream response body: {0}")]
    Chunked(#[from] ChunkError),
}

enum Reading {
    /// This many bytes still to come.
    Length(u64),
    Chunked(Decoder),
    /// Until the upstream closes.
    Close,
    /// Complete (or failed: then the connection is gone).
    Done,
}

/// The response body; holds its connection until complete.
pub struct UpstreamBody {
    reading: Reading,
    /// `None` once failed (dropped: closed) or taken back after the end.
    conn: Option<Conn>,
}

impl UpstreamBody {
    pub(super) fn new(framing: Framing, conn: Conn) -> Self {
        let reading = match framing {
            Framing::Empty | Framing::Length(0) => Reading::Done,
            Framing::Length(n) => Reading::Length(n),
            Framing::Chunked => Reading::Chunked(Decoder::default()),
            Framing::Close => Reading::Close,
        };
        UpstreamBody { reading, conn: Some(conn) }
    }

    /// The connection, once the body is complete and the connection can carry another
    /// request (`None` otherwise: dropping the body closes it).
    pub fn into_reusable(mut self) -> Option<Conn> {
        if !matches!(self.reading, Reading::Done) {
            return None;
        }
        self.conn.take().filter(Conn::reusable)
    }

    /// The next frame from what is buffered; `None` when more bytes must be read.
    fn decode(&mut self) -> Option<Result<Option<Frame<Bytes>>, BodyError>> {
        let conn = self.conn.as_mut()?;
        let buf = &mut conn.buf;
        match &mut self.reading {
            Reading::Done => Some(Ok(None)),
            _ if buf.is_empty() => None,
            Reading::Length(left) => {
                let n = usize::try_from(*left).unwrap_or(usize::MAX).min(buf.len());
                *left -= n as u64;
                if *left == 0 {
                    self.reading = Reading::Done;
                }
                Some(Ok(Some(Frame::data(buf.split_to(n).freeze()))))
            }
            Reading::Close => Some(Ok(Some(Frame::data(buf.split().freeze())))),
            Reading::Chunked(d) => match d.step(buf) {
                Err(e) => Some(Err(e.into())),
                Ok(chunked::Step::More) => None,
                Ok(chunked::Step::Data(b)) => Some(Ok(Some(Frame::data(b)))),
                Ok(chunked::Step::Trailers(t)) => {
                    self.reading = Reading::Done;
                    Some(Ok(Some(Frame::trailers(t))))
                }
                Ok(chunked::Step::End) => {
                    self.reading = Reading::Done;
                    Some(Ok(None))
                }
            },
        }
    }

    /// The upstream closed the connection (end of file).
    fn closed(&mut self) -> Result<Option<Frame<Bytes>>, BodyError> {
        let reading = std::mem::replace(&mut self.reading, Reading::Done);
        self.conn = None;
        match reading {
            Reading::Close | Reading::Done => Ok(None),
            Reading::Length(left) => Err(BodyError::ClosedShort(left)),
            Reading::Chunked(_) => Err(BodyError::ClosedInChunked),
        }
    }

    fn failed<T>(&mut self, e: BodyError) -> Poll<Option<Result<T, BodyError>>> {
        self.reading = Reading::Done;
        self.conn = None;
        Poll::Ready(Some(Err(e)))
    }
}

impl Body for UpstreamBody {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        let this = &mut *self;
        loop {
            match this.decode() {
                Some(Ok(frame)) => return Poll::Ready(frame.map(Ok)),
                Some(Err(e)) => return this.failed(e),
                None if this.conn.is_none() => return Poll::Ready(None),
                None => {}
            }
            let conn = this.conn.as_mut().expect("checked above");
            match ready!(conn.poll_read(cx)) {
                Ok(0) => return Poll::Ready(this.closed().transpose()),
                Ok(_) => {}
                Err(e) => return this.failed(e.into()),
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        matches!(self.reading, Reading::Done)
    }

    fn size_hint(&self) -> SizeHint {
        match self.reading {
            Reading::Done => SizeHint::with_exact(0),
            Reading::Length(n) => SizeHint::with_exact(n),
            Reading::Chunked(_) | Reading::Close => SizeHint::default(),
        }
    }
}
