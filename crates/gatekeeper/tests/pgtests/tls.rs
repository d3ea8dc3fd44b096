//! A large result over TLS to the client.

use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf, BytesMut};
use postgres_protocol::message::frontend;
use shortfirst_gatekeeper::pg::PgTls;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::rustls;

use crate::pgsupport::*;

/// Reads backend messages until ReadyForQuery; returns the bytes of DataRow bodies seen.
async fn until_ready<S: AsyncRead + Unpin>(s: &mut S, buf: &mut BytesMut) -> usize {
    let mut data = 0;
    loop {
        while buf.len() >= 5 {
            let len = u32::from_be_bytes(buf[1..5].try_into().unwrap()) as usize;
            if buf.len() < 1 + len {
                break;
            }
            let tag = buf[0];
            assert_ne!(tag, b'E', "the server answered an error: {:?}", String::from_utf8_lossy(&buf[..1 + len]));
            if tag == b'D' {
                data += len - 4;
            }
            buf.advance(1 + len);
            if tag == b'Z' {
                return data;
            }
        }
        assert_ne!(s.read_buf(buf).await.unwrap(), 0, "the gatekeeper closed the connection");
    }
}

/// A result of 12 MB (more than the socket buffers hold) to a client that starts reading
/// after a pause arrives whole over TLS. (That every write to the client is flushed, which
/// TLS needs, is pinned by the relay's own test: over a real socket the stall it prevents
/// happens only when the socket is full at a response's last write.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_result_arrives_whole_over_tls() {
    let pg = pg_or_skip!();
    let dir = tempfile::tempdir().unwrap();
    let (ck, cert, key) = self_signed(dir.path());
    let gk = proxy_with_tls(pg.addr(), PgTls::from_pem_files(&cert, &key).unwrap()).await;

    let mut roots = rustls::RootCertStore::empty();
    roots.add(ck.cert.der().clone()).unwrap();
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let mut tcp = TcpStream::connect(gk.addr).await.unwrap();
    tcp.write_all(&[0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f]).await.unwrap();
    assert_eq!(tcp.read_u8().await.unwrap(), b'S');
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let mut tls = connector.connect("localhost".try_into().unwrap(), tcp).await.unwrap();
    let mut out = BytesMut::new();
    frontend::startup_message([("user", "bookstore"), ("database", "bookstore")].into_iter(), &mut out).unwrap();
    frontend::query("SELECT repeat('x', 12000000)", &mut out).unwrap();
    tls.write_all(&out).await.unwrap();
    tls.flush().await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut buf = BytesMut::new();
    let within = Duration::from_secs(10);
    tokio::time::timeout(within, until_ready(&mut tls, &mut buf)).await.expect("ReadyForQuery after the login");
    let data = tokio::time::timeout(within, until_ready(&mut tls, &mut buf)).await.expect("the whole result");
    assert_eq!(data, 2 + 4 + 12_000_000, "one row, one column of 12,000,000 bytes");
}
