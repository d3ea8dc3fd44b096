//! A connection's byte stream: plaintext TCP, or TLS over it (after the handshake).

use std::io;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::server::TlsStream;

pub(crate) enum Transport {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

impl Transport {
    /// The TCP socket under it (priority, `TCP_INFO`, readiness).
    pub(crate) fn tcp(&self) -> &TcpStream {
        match self {
            Transport::Plain(s) => s,
            Transport::Tls(t) => t.get_ref().0,
        }
    }

    /// Reads request bytes (decrypted, over TLS).
    pub(crate) async fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Transport::Plain(s) => s.read(buf).await,
            Transport::Tls(t) => t.read(buf).await,
        }
    }

    /// Ends the sending side (TLS: `close_notify` first).
    pub(crate) async fn shutdown(&mut self) -> io::Result<()> {
        match self {
            Transport::Plain(s) => s.shutdown().await,
            Transport::Tls(t) => t.shutdown().await,
        }
    }

    /// Ends a connection that owes no response: over TLS a `close_notify` (within
    /// `timeout`, best effort) so the client sees a clean end; in plaintext nothing
    /// (dropping the socket sends the FIN).
    pub(crate) async fn close_quietly(&mut self, timeout: std::time::Duration) {
        if let Transport::Tls(t) = self {
            let _ = tokio::time::timeout(timeout, t.shutdown()).await;
        }
    }

    /// The TLS version, for the access log: `TLSv1.2`, `TLSv1.3`; `None` in plaintext.
    pub(crate) fn tls_version(&self) -> Option<&'static str> {
        let Transport::Tls(t) = self else { return None };
        match t.get_ref().1.protocol_version() {
            Some(rustls::ProtocolVersion::TLSv1_3) => Some("TLSv1.3"),
            Some(rustls::ProtocolVersion::TLSv1_2) => Some("TLSv1.2"),
            _ => Some("TLS"),
        }
    }
}
