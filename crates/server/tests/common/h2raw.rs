//! A minimal HTTP/2 client writing and reading raw frames (over TCP or TLS), so a test
//! sees the order of the server's frames on the wire: which stream each DATA frame
//! belongs to, windows kept closed, SETTINGS as sent.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

pub const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
pub const DATA: u8 = 0;
pub const HEADERS: u8 = 1;
pub const RST_STREAM: u8 = 3;
pub const SETTINGS: u8 = 4;
pub const GOAWAY: u8 = 7;
pub const WINDOW_UPDATE: u8 = 8;
pub const END_STREAM: u8 = 1;

/// How long [`H2::next`] waits for a frame before it says there is none.
const FRAME_WAIT: Duration = Duration::from_secs(20);

/// One frame as read: type, flags, stream, payload.
#[derive(Debug)]
pub struct Frame {
    pub kind: u8,
    pub flags: u8,
    pub stream: u32,
    pub payload: Vec<u8>,
}

/// A frame's bytes.
pub fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let mut f = (payload.len() as u32).to_be_bytes()[1..].to_vec();
    f.extend_from_slice(&[kind, flags]);
    f.extend_from_slice(&stream.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// A TCP connection with a small receive buffer, so the server's writes wait for our
/// reads as over a slow link.
/// The HEADERS frame of a GET for `path` on stream `id` (HPACK literals without Huffman),
/// the stream ended.
pub fn get_frame(id: u32, path: &str) -> Vec<u8> {
    let mut block = Vec::new();
    for (name, value) in [(":method", "GET"), (":scheme", "https"), (":path", path), (":authority", "localhost")] {
        block.push(0); // literal without indexing, new name
        block.push(name.len() as u8);
        block.extend_from_slice(name.as_bytes());
        block.push(value.len() as u8);
        block.extend_from_slice(value.as_bytes());
    }
    frame(HEADERS, END_STREAM | 4, id, &block)
}

pub async fn slow_tcp(addr: SocketAddr) -> TcpStream {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(32 * 1024).unwrap();
    socket.connect(addr).await.unwrap()
}

pub struct H2<T> {
    pub io: T,
}

impl H2<TcpStream> {
    /// Over [`slow_tcp`], every window opened wide.
    pub async fn connect(addr: SocketAddr) -> H2<TcpStream> {
        H2::start(slow_tcp(addr).await, 1 << 30).await
    }

    /// As [`H2::connect`], each stream's window starting at `stream_window` bytes.
    pub async fn connect_with_window(addr: SocketAddr, stream_window: u32) -> H2<TcpStream> {
        H2::start(slow_tcp(addr).await, stream_window).await
    }
}

impl<T: AsyncRead + AsyncWrite + Unpin> H2<T> {
    /// The preface, each stream's window starting at `stream_window` bytes, the
    /// connection's opened wide.
    pub async fn start(io: T, stream_window: u32) -> H2<T> {
        let mut h = H2 { io };
        let mut hello = PREFACE.to_vec();
        let mut setting = vec![0, 4]; // INITIAL_WINDOW_SIZE
        setting.extend_from_slice(&stream_window.to_be_bytes());
        hello.extend(frame(SETTINGS, 0, 0, &setting));
        hello.extend(frame(WINDOW_UPDATE, 0, 0, &[0x40, 0, 0, 0]));
        h.io.write_all(&hello).await.unwrap();
        h
    }

    /// A GET for `path` on stream `id` (HPACK literals without Huffman), the stream ended.
    pub async fn get(&mut self, id: u32, path: &str) {
        self.io.write_all(&get_frame(id, path)).await.unwrap();
        self.io.flush().await.unwrap();
    }

    /// Opens stream `id`'s window by `bytes`.
    pub async fn window_update(&mut self, id: u32, bytes: u32) {
        self.io.write_all(&frame(WINDOW_UPDATE, 0, id, &bytes.to_be_bytes())).await.unwrap();
        self.io.flush().await.unwrap();
    }

    /// The next frame; a SETTINGS from the server is acknowledged (if the connection takes
    /// it). `None` when the connection ends or no frame comes within 20 s.
    pub async fn next(&mut self) -> Option<Frame> {
        let mut head = [0u8; 9];
        tokio::time::timeout(FRAME_WAIT, self.io.read_exact(&mut head)).await.ok()?.ok()?;
        let len = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
        let mut payload = vec![0; len];
        self.io.read_exact(&mut payload).await.ok()?;
        let f = Frame {
            kind: head[3],
            flags: head[4],
            stream: u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff,
            payload,
        };
        if f.kind == SETTINGS && f.flags & 1 == 0 {
            // A server that has already closed the connection (after a GOAWAY) refuses
            // the acknowledgement; the frames it sent are still read.
            let _ = self.io.write_all(&frame(SETTINGS, 1, 0, &[])).await;
            let _ = self.io.flush().await;
        }
        Some(f)
    }

    /// Reads until stream `id`'s first DATA frame.
    pub async fn until_data(&mut self, id: u32) {
        loop {
            let f = self.next().await.expect("frames");
            if f.kind == DATA && f.stream == id {
                return;
            }
        }
    }
}
