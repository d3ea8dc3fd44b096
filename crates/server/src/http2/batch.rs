//! Coalescing the codec's writes while the driver works through what is ready.
//!
//! The codec flushes every time it is polled, and the driver polls it once per event: a
//! client that sends eight requests in one packet got sixteen writes back (each response's
//! HEADERS, then its DATA), each its own system call and, under TLS, its own record. While
//! the driver is [`Hold::hold`]ing, [`Batched`] keeps what the codec writes (at most
//! [`BATCH_BYTES`]) and tells it the bytes are gone; when the driver has nothing left to do
//! it [`Hold::release`]s and polls the codec once more, whose flush writes them at once. The
//! bytes keep the codec's order, so the order on the wire is still the scheduler's; what
//! waits here is bounded by one batch and never outlives the driver's turn (it is written
//! before the driver waits for anything).
//!
//! A write that does not fit goes through after what is held; shutting down writes
//! everything first.

use std::io::IoSlice;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Most bytes held at once: a turn's DATA, its frames' headers and the HEADERS frames
/// answered with it, so a turn goes to the transport in one write (under TLS, its records
/// in one system call).
pub const BATCH_BYTES: usize = super::TURN_BYTES + 4 * 1024;
/// A buffer larger than this is freed once written, not kept: an idle connection holds
/// at most this much here.
pub const RETAINED_BYTES: usize = 4 * 1024;

/// The driver's side: whether writes are held now.
#[derive(Debug, Clone, Default)]
pub struct Hold(Arc<AtomicBool>);

impl Hold {
    /// From now on, writes that fit are held.
    pub fn hold(&self) {
        self.0.store(true, Relaxed);
    }
    /// From now on, a flush writes what is held.
    pub fn release(&self) {
        self.0.store(false, Relaxed);
    }
    fn held(&self) -> bool {
        self.0.load(Relaxed)
    }
}

/// A transport whose writes are coalesced while its [`Hold`] holds (see the module docs).
pub struct Batched<T> {
    inner: T,
    hold: Hold,
    buf: Vec<u8>,
    /// Bytes of `buf` already written.
    at: usize,
}

impl<T> Batched<T> {
    pub fn new(inner: T, hold: Hold) -> Batched<T> {
        Batched { inner, hold, buf: Vec::new(), at: 0 }
    }

    fn held_bytes(&self) -> usize {
        self.buf.len() - self.at
    }
}

impl<T: AsyncWrite + Unpin> Batched<T> {
    /// Writes what is held; Ready once none is left.
    fn poll_drain(&mut self, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        while self.at < self.buf.len() {
            let n = ready!(Pin::new(&mut self.inner).poll_write(cx, &self.buf[self.at..]))?;
            if n == 0 {
                return Poll::Ready(Err(std::io::ErrorKind::WriteZero.into()));
            }
            self.at += n;
        }
        if self.buf.capacity() > RETAINED_BYTES {
            self.buf = Vec::new();
        } else {
            self.buf.clear();
        }
        self.at = 0;
        Poll::Ready(Ok(()))
    }

    /// Whether `len` more bytes are to be held (else, what is held is written first and
    /// they go through).
    fn keeps(&self, len: usize) -> bool {
        self.hold.held() && self.held_bytes() + len <= BATCH_BYTES
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Batched<T> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Batched<T> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        let this = &mut *self;
        if this.keeps(buf.len()) {
            this.buf.extend_from_slice(buf);
            return Poll::Ready(Ok(buf.len()));
        }
        ready!(this.poll_drain(cx))?;
        Pin::new(&mut this.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let this = &mut *self;
        let len: usize = bufs.iter().map(|b| b.len()).sum();
        if this.keeps(len) {
            for b in bufs {
                this.buf.extend_from_slice(b);
            }
            return Poll::Ready(Ok(len));
        }
        ready!(this.poll_drain(cx))?;
        Pin::new(&mut this.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let this = &mut *self;
        if this.hold.held() {
            return Poll::Ready(Ok(()));
        }
        ready!(this.poll_drain(cx))?;
        Pin::new(&mut this.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let this = &mut *self;
        ready!(this.poll_drain(cx))?;
        ready!(Pin::new(&mut this.inner).poll_flush(cx))?;
        Pin::new(&mut this.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;

    /// A transport that records each write it is given.
    #[derive(Default)]
    struct Recorder {
        writes: Vec<Vec<u8>>,
        flushes: usize,
    }

    impl AsyncWrite for Recorder {
        fn poll_write(mut self: Pin<&mut Self>, _: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
            self.writes.push(buf.to_vec());
            Poll::Ready(Ok(buf.len()))
        }
        fn poll_flush(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
            self.flushes += 1;
            Poll::Ready(Ok(()))
        }
        fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    #[tokio::test]
    async fn held_writes_go_out_as_one_in_order_on_the_flush_after_release() {
        let hold = Hold::default();
        let mut b = Batched::new(Recorder::default(), hold.clone());
        hold.hold();
        for part in [&b"ab"[..], b"cd", b"e"] {
            b.write_all(part).await.unwrap();
            b.flush().await.unwrap();
        }
        assert!(b.inner.writes.is_empty() && b.inner.flushes == 0);
        hold.release();
        b.flush().await.unwrap();
        assert_eq!(b.inner.writes, vec![b"abcde".to_vec()]);
        assert_eq!(b.inner.flushes, 1);
    }

    #[tokio::test]
    async fn without_hold_every_write_goes_through() {
        let mut b = Batched::new(Recorder::default(), Hold::default());
        b.write_all(b"ab").await.unwrap();
        b.write_all(b"cd").await.unwrap();
        assert_eq!(b.inner.writes, vec![b"ab".to_vec(), b"cd".to_vec()]);
    }

    #[tokio::test]
    async fn a_write_beyond_the_batch_goes_through_after_what_is_held() {
        let hold = Hold::default();
        let mut b = Batched::new(Recorder::default(), hold.clone());
        hold.hold();
        b.write_all(b"head").await.unwrap();
        let big = vec![7u8; BATCH_BYTES];
        b.write_all(&big).await.unwrap();
        assert_eq!(b.inner.writes, vec![b"head".to_vec(), big]);
        assert_eq!(b.held_bytes(), 0);
    }

    #[tokio::test]
    async fn a_turn_goes_out_in_one_write_and_its_buffer_is_not_kept() {
        let hold = Hold::default();
        let mut b = Batched::new(Recorder::default(), hold.clone());
        hold.hold();
        let frame = vec![1u8; super::super::FRAME_BYTES + 9];
        for _ in 0..4 {
            b.write_all(&frame).await.unwrap();
        }
        assert!(b.inner.writes.is_empty(), "a turn of four frames is held");
        hold.release();
        b.flush().await.unwrap();
        assert_eq!(b.inner.writes.len(), 1);
        assert_eq!(b.inner.writes[0].len(), 4 * frame.len());
        assert!(b.buf.capacity() <= RETAINED_BYTES, "an idle connection keeps {}", b.buf.capacity());
    }

    #[tokio::test]
    async fn shutting_down_writes_what_is_held() {
        let hold = Hold::default();
        let mut b = Batched::new(Recorder::default(), hold.clone());
        hold.hold();
        b.write_all(b"goaway").await.unwrap();
        b.shutdown().await.unwrap();
        assert_eq!(b.inner.writes, vec![b"goaway".to_vec()]);
    }
}
