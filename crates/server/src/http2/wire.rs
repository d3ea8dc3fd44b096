//! What the HTTP/2 codec has put on the connection: the DATA payload bytes in the frames it
//! wrote, counted as they pass to the transport. The driver gives the codec a chunk only
//! when every DATA byte it gave before has been written, so the codec never holds two
//! streams' data at once and has nothing to interleave: the order of chunks on the wire is
//! the scheduler's.
//!
//! A server's side of an HTTP/2 connection is frames from its first byte (its preface is a
//! SETTINGS frame): a 9-byte header (24-bit length, type, flags, stream id) and the
//! payload. [`DataCounter`] follows the headers across writes of any size; the counts are
//! shared with the driver through atomics ([`Written`]: the codec owns the writer). The
//! bytes of other frames (headers, settings, window updates) are what the user-space
//! pacer charges as control bytes.

use std::io::IoSlice;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

const FRAME_HEADER_BYTES: usize = 9;
const FRAME_TYPE_DATA: u8 = 0;

/// Follows the frames of a byte stream; counts the payload bytes of DATA frames.
#[derive(Debug, Default)]
pub struct DataCounter {
    header: [u8; FRAME_HEADER_BYTES],
    header_have: usize,
    payload_left: u32,
    in_data: bool,
    /// DATA payload bytes seen so far.
    pub data_bytes: u64,
}

impl DataCounter {
    /// The next bytes of the stream, as written.
    pub fn feed(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            if self.payload_left > 0 {
                let n = bytes.len().min(self.payload_left as usize);
                if self.in_data {
                    self.data_bytes += n as u64;
                }
                self.payload_left -= n as u32;
                bytes = &bytes[n..];
                continue;
            }
            let n = bytes.len().min(FRAME_HEADER_BYTES - self.header_have);
            self.header[self.header_have..self.header_have + n].copy_from_slice(&bytes[..n]);
            self.header_have += n;
            bytes = &bytes[n..];
            if self.header_have == FRAME_HEADER_BYTES {
                let h = &self.header;
                self.payload_left = u32::from_be_bytes([0, h[0], h[1], h[2]]);
                self.in_data = h[3] == FRAME_TYPE_DATA;
                self.header_have = 0;
            }
        }
    }
}

/// What the codec has written to the transport, bytes.
#[derive(Debug, Default)]
pub struct Written {
    /// DATA payload.
    pub data: AtomicU64,
    /// Everything: frame headers, DATA and every other frame.
    pub all: AtomicU64,
}

/// The transport under the codec, counting what is written through it into `written`.
pub struct Counted<T> {
    inner: T,
    counter: DataCounter,
    all_bytes: u64,
    written: Arc<Written>,
}

impl<T> Counted<T> {
    pub fn new(inner: T, written: Arc<Written>) -> Counted<T> {
        Counted { inner, counter: DataCounter::default(), all_bytes: 0, written }
    }

    fn wrote(&mut self, bytes: &[u8]) {
        self.counter.feed(bytes);
        self.all_bytes += bytes.len() as u64;
        self.written.data.store(self.counter.data_bytes, Relaxed);
        self.written.all.store(self.all_bytes, Relaxed);
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Counted<T> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Counted<T> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = r {
            self.wrote(&buf[..n]);
        }
        r
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if let Poll::Ready(Ok(mut n)) = r {
            for b in bufs {
                let take = n.min(b.len());
                self.wrote(&b[..take]);
                n -= take;
                if n == 0 {
                    break;
                }
            }
        }
        r
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// A transport whose first bytes were already read (the cleartext preface sniffed by the
/// accept path): they are read again first.
pub struct Prefixed<T> {
    prefix: Vec<u8>,
    at: usize,
    inner: T,
}

impl<T> Prefixed<T> {
    pub fn new(prefix: Vec<u8>, inner: T) -> Prefixed<T> {
        Prefixed { prefix, at: 0, inner }
    }
}

impl<T: std::os::fd::AsRawFd> std::os::fd::AsRawFd for Prefixed<T> {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        self.inner.as_raw_fd()
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Prefixed<T> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        if self.at < self.prefix.len() {
            let n = buf.remaining().min(self.prefix.len() - self.at);
            buf.put_slice(&self.prefix[self.at..self.at + n]);
            self.at += n;
            if self.at == self.prefix.len() {
                self.prefix = Vec::new();
                self.at = 0;
            }
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Prefixed<T> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(kind: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
        let len = payload.len() as u32;
        let mut f = len.to_be_bytes()[1..].to_vec();
        f.extend_from_slice(&[kind, 0]);
        f.extend_from_slice(&stream.to_be_bytes());
        f.extend_from_slice(payload);
        f
    }

    #[test]
    fn counts_data_payloads_across_writes_of_any_size() {
        let mut stream = frame(4, 0, &[0; 18]); // SETTINGS
        stream.extend(frame(1, 1, &[7; 40])); // HEADERS
        stream.extend(frame(0, 1, &[1; 1000])); // DATA
        stream.extend(frame(0, 3, &[])); // an empty DATA frame
        stream.extend(frame(8, 0, &[0, 0, 0, 1])); // WINDOW_UPDATE
        stream.extend(frame(0, 3, &[2; 16384])); // DATA
        for split in [1, 2, 5, 9, 10, 100, stream.len()] {
            let mut c = DataCounter::default();
            let mut seen = Vec::new();
            for piece in stream.chunks(split) {
                c.feed(piece);
                seen.push(c.data_bytes);
            }
            assert_eq!(c.data_bytes, 1000 + 16384, "writes of {split} bytes");
            assert!(seen.windows(2).all(|w| w[0] <= w[1]), "never goes back");
        }
        // Mid-frame: only the bytes of the payload written so far count.
        let mut c = DataCounter::default();
        let data = frame(0, 5, &[3; 100]);
        c.feed(&data[..9 + 30]);
        assert_eq!(c.data_bytes, 30);
    }
}
