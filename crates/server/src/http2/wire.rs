//! What the HTTP/2 codec has put on the connection: the DATA payload bytes in the frames it
//! wrote, counted as they pass to the transport. The driver gives the codec a chunk only
//! when every DATA byte it gave before has been written, so the codec never holds two
//! streams' data at once and has nothing to interleave: the order of chunks on the wire is
//! the scheduler's.
//!
//! A server's side of an HTTP/2 connection is frames from its first byte (its preface is a
//! SETTINGS frame): a 9-byte header (24-bit length, type, flags, stream id) and the
//! payload. [`FrameFollower`] follows the headers across writes of any size; the counts are
//! shared with the driver through atomics ([`Written`]: the codec owns the writer). The
//! bytes of other frames (headers, settings, window updates) are what the user-space
//! pacer charges as control bytes.
//!
//! The same follower reads the error code of every RST_STREAM and GOAWAY frame, in both
//! directions ([`ErrorFrameCounts`]): the codec enforces the stream limit and the flood
//! limits (rapid reset, CONTINUATION, framing-heavy DATA) itself and says nothing, so what
//! it refused is counted from the frames it wrote.

use std::io::IoSlice;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

const FRAME_HEADER_BYTES: usize = 9;
const FRAME_TYPE_DATA: u8 = 0;
const FRAME_TYPE_RST_STREAM: u8 = 3;
const FRAME_TYPE_GOAWAY: u8 = 7;
/// The client's connection preface (RFC 9113 §3.4), before its first frame.
pub const CLIENT_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// The error codes of RFC 9113 §7, by value, as `/metrics` labels them; any other value
/// is `other` (the last).
pub const ERROR_CODE_NAMES: [&str; 15] = [
    "no_error",
    "protocol_error",
    "internal_error",
    "flow_control_error",
    "settings_timeout",
    "stream_closed",
    "frame_size_error",
    "refused_stream",
    "cancel",
    "compression_error",
    "connect_error",
    "enhance_your_calm",
    "inadequate_security",
    "http_1_1_required",
    "other",
];

/// RST_STREAM and GOAWAY frames by error code, in one direction of every connection.
#[derive(Debug, Default)]
pub struct ErrorFrames {
    pub resets: [AtomicU64; ERROR_CODE_NAMES.len()],
    pub goaways: [AtomicU64; ERROR_CODE_NAMES.len()],
}

impl ErrorFrames {
    fn count(&self, kind: u8, code: u32) {
        let i = (code as usize).min(ERROR_CODE_NAMES.len() - 1);
        let family = if kind == FRAME_TYPE_RST_STREAM { &self.resets } else { &self.goaways };
        family[i].fetch_add(1, Relaxed);
    }
}

/// Follows the frames of one direction of a connection across reads or writes of any
/// size: counts the payload bytes of DATA frames, and reads the error code of RST_STREAM
/// (payload bytes 0..4) and GOAWAY (4..8) frames into `errors`.
#[derive(Debug)]
pub struct FrameFollower {
    /// Bytes of the client preface still to skip (the client's side only).
    preface_left: usize,
    header: [u8; FRAME_HEADER_BYTES],
    header_have: usize,
    kind: u8,
    payload_at: u32,
    payload_len: u32,
    code: [u8; 4],
    errors: Arc<ErrorFrames>,
    /// DATA payload bytes seen so far.
    pub data_bytes: u64,
}

impl FrameFollower {
    /// The server's side (frames from the first byte).
    pub fn server(errors: Arc<ErrorFrames>) -> FrameFollower {
        FrameFollower {
            preface_left: 0,
            header: [0; FRAME_HEADER_BYTES],
            header_have: 0,
            kind: 0,
            payload_at: 0,
            payload_len: 0,
            code: [0; 4],
            errors,
            data_bytes: 0,
        }
    }

    /// The client's side: the preface, then frames.
    pub fn client(errors: Arc<ErrorFrames>) -> FrameFollower {
        FrameFollower { preface_left: CLIENT_PREFACE.len(), ..FrameFollower::server(errors) }
    }

    /// Where in the payload the error code of a frame of this kind starts.
    fn code_at(kind: u8) -> Option<u32> {
        match kind {
            FRAME_TYPE_RST_STREAM => Some(0),
            FRAME_TYPE_GOAWAY => Some(4),
            _ => None,
        }
    }

    /// The next bytes of the direction, in order.
    pub fn feed(&mut self, mut bytes: &[u8]) {
        let skip = bytes.len().min(self.preface_left);
        self.preface_left -= skip;
        bytes = &bytes[skip..];
        while !bytes.is_empty() {
            if self.payload_at < self.payload_len {
                let n = bytes.len().min((self.payload_len - self.payload_at) as usize);
                self.payload(&bytes[..n]);
                bytes = &bytes[n..];
                continue;
            }
            let n = bytes.len().min(FRAME_HEADER_BYTES - self.header_have);
            self.header[self.header_have..self.header_have + n].copy_from_slice(&bytes[..n]);
            self.header_have += n;
            bytes = &bytes[n..];
            if self.header_have == FRAME_HEADER_BYTES {
                let h = &self.header;
                self.payload_len = u32::from_be_bytes([0, h[0], h[1], h[2]]);
                self.payload_at = 0;
                self.kind = h[3];
                self.header_have = 0;
            }
        }
    }

    /// `bytes` of the current frame's payload (at most what is left of it).
    fn payload(&mut self, bytes: &[u8]) {
        if self.kind == FRAME_TYPE_DATA {
            self.data_bytes += bytes.len() as u64;
        } else if let Some(at) = Self::code_at(self.kind) {
            for (i, &b) in bytes.iter().enumerate() {
                let offset = self.payload_at + i as u32;
                if (at..at + 4).contains(&offset) {
                    self.code[(offset - at) as usize] = b;
                    if offset == at + 3 {
                        self.errors.count(self.kind, u32::from_be_bytes(self.code));
                    }
                }
            }
        }
        self.payload_at += bytes.len() as u32;
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

/// The error frames of every connection, by direction (`/metrics`).
#[derive(Debug, Default)]
pub struct ErrorFrameCounts {
    /// Written by the server (its codec's refusals, resets and GOAWAYs).
    pub sent: Arc<ErrorFrames>,
    /// Read from clients.
    pub received: Arc<ErrorFrames>,
}

/// The transport under the codec, counting what is written through it into `written`,
/// and the error frames of both directions into `errors`.
pub struct Counted<T> {
    inner: T,
    out: FrameFollower,
    read: FrameFollower,
    all_bytes: u64,
    written: Arc<Written>,
}

impl<T> Counted<T> {
    pub fn new(inner: T, written: Arc<Written>, errors: &ErrorFrameCounts) -> Counted<T> {
        Counted {
            inner,
            out: FrameFollower::server(errors.sent.clone()),
            read: FrameFollower::client(errors.received.clone()),
            all_bytes: 0,
            written,
        }
    }

    fn wrote(&mut self, bytes: &[u8]) {
        self.out.feed(bytes);
        self.all_bytes += bytes.len() as u64;
        self.written.data.store(self.out.data_bytes, Relaxed);
        self.written.all.store(self.all_bytes, Relaxed);
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Counted<T> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = r {
            let this = &mut *self;
            this.read.feed(&buf.filled()[before..]);
        }
        r
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
            let mut c = FrameFollower::server(Arc::default());
            let mut seen = Vec::new();
            for piece in stream.chunks(split) {
                c.feed(piece);
                seen.push(c.data_bytes);
            }
            assert_eq!(c.data_bytes, 1000 + 16384, "writes of {split} bytes");
            assert!(seen.windows(2).all(|w| w[0] <= w[1]), "never goes back");
        }
        // Mid-frame: only the bytes of the payload written so far count.
        let mut c = FrameFollower::server(Arc::default());
        let data = frame(0, 5, &[3; 100]);
        c.feed(&data[..9 + 30]);
        assert_eq!(c.data_bytes, 30);
    }

    fn counts(family: &[AtomicU64; ERROR_CODE_NAMES.len()]) -> Vec<(&'static str, u64)> {
        ERROR_CODE_NAMES.iter().zip(family).map(|(n, c)| (*n, c.load(Relaxed))).filter(|(_, c)| *c > 0).collect()
    }

    #[test]
    fn reads_the_error_code_of_resets_and_goaways_across_reads_of_any_size() {
        let mut stream = CLIENT_PREFACE.to_vec();
        stream.extend(frame(4, 0, &[0; 12])); // SETTINGS
        stream.extend(frame(3, 1, &8u32.to_be_bytes())); // RST_STREAM(CANCEL)
        stream.extend(frame(0, 3, &[3; 7])); // DATA
        stream.extend(frame(3, 3, &7u32.to_be_bytes())); // RST_STREAM(REFUSED_STREAM)
        stream.extend(frame(3, 5, &0x1234u32.to_be_bytes())); // an unknown code
        let mut goaway = 3u32.to_be_bytes().to_vec();
        goaway.extend(0xbu32.to_be_bytes());
        goaway.extend(b"debug data");
        stream.extend(frame(7, 0, &goaway)); // GOAWAY(ENHANCE_YOUR_CALM)
        for split in [1, 2, 3, 5, 9, 13, 24, 25, 100, stream.len()] {
            let errors = Arc::new(ErrorFrames::default());
            let mut c = FrameFollower::client(errors.clone());
            for piece in stream.chunks(split) {
                c.feed(piece);
            }
            assert_eq!(counts(&errors.resets), [("refused_stream", 1), ("cancel", 1), ("other", 1)], "{split}");
            assert_eq!(counts(&errors.goaways), [("enhance_your_calm", 1)], "{split}");
            assert_eq!(c.data_bytes, 7, "{split}");
        }
        // A frame cut before its code is complete is not counted.
        let errors = Arc::new(ErrorFrames::default());
        let mut c = FrameFollower::server(errors.clone());
        c.feed(&frame(3, 1, &8u32.to_be_bytes())[..12]);
        assert!(counts(&errors.resets).is_empty());
    }
}
