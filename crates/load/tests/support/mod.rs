//! What the load generator's socket tests share: reading one request head from a
//! connection of the test server.

use tokio::io::AsyncReadExt;

/// The next request head on `sock` (through its blank line), with the bytes after it
/// left in `buf` for the next call; `None` once the peer closes or errors.
pub async fn read_head(sock: &mut tokio::net::TcpStream, buf: &mut Vec<u8>) -> Option<String> {
    let mut tmp = [0u8; 4096];
    let end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        match sock.read(&mut tmp).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&tmp[..n]),
        }
    };
    let head = String::from_utf8_lossy(&buf[..end]).to_string();
    buf.drain(..end);
    Some(head)
}
