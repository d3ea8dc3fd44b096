//! Writing a response over TLS. No kTLS here, so no `sendfile`: the body is read from the
//! file one record's plaintext at a time into the connection's buffer, handed to rustls,
//! and its ciphertext written at once ([`crate::tls::write::SocketWriter`]), so rustls
//! holds at most the head and one record (plus a post-handshake message) unsent: the
//! scheduler, not a buffer, decides whose bytes go next. Bands and the user-space grants
//! count ciphertext bytes as they leave.

use std::fs::File;
use std::io::Write as _;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;

use super::{BandState, Conn, Sending, Transport};
use crate::io;
use crate::tls::write::SocketWriter;

impl Conn {
    /// The head in `self.responder.head`, then `file_part`'s bytes. Returns the plaintext bytes sent.
    pub(super) async fn write_tls(
        &mut self,
        out: &mut Sending<'_>,
        file_part: Option<(&File, u64, u64)>,
    ) -> std::io::Result<u64> {
        let record = self.shared.record_payload_bytes;
        let send_timeout = self.settings.send_timeout;
        let Conn { transport, responder, socket_band, gauge_band, shared, tls_buf, .. } = self;
        let head = &responder.head;
        let mut bands = BandState { shared, socket: socket_band, gauge: gauge_band };
        let Transport::Tls(tls) = transport else { unreachable!("write_tls on a plaintext connection") };
        let mut w = CipherWriter { tls, pending_bytes: 0, send_timeout };
        w.push(head, record)?;
        let mut sent_plain = head.len() as u64;
        let Some((file, offset, len)) = file_part else {
            w.flush(out, &mut bands).await?;
            return Ok(sent_plain);
        };
        if tls_buf.len() < record {
            tls_buf.resize(record, 0);
        }
        let (mut off, end) = (offset, offset + len);
        while off < end {
            let want = usize::try_from(end - off).unwrap_or(usize::MAX).min(record);
            let n = file.read_at(&mut tls_buf[..want], off)?;
            if n == 0 {
                // The file shrank under us: the promised length cannot be kept.
                return Err(std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "file shrank while sending"));
            }
            // The head's records and the first body record leave in one flight.
            w.push(&tls_buf[..n], record)?;
            w.flush(out, &mut bands).await?;
            off += n as u64;
            sent_plain += n as u64;
        }
        Ok(sent_plain)
    }
}

/// rustls's send side of one connection, written to its socket.
struct CipherWriter<'t> {
    tls: &'t mut tokio_rustls::server::TlsStream<tokio::net::TcpStream>,
    /// Ciphertext bytes pushed and not yet written, at most (the record overhead is
    /// counted at its upper bound).
    pending_bytes: u64,
    send_timeout: std::time::Duration,
}

impl CipherWriter<'_> {
    fn push(&mut self, plain: &[u8], record: usize) -> std::io::Result<()> {
        self.tls.get_mut().1.writer().write_all(plain)?;
        self.pending_bytes += crate::tls::ciphertext_bytes(plain.len() as u64, record);
        Ok(())
    }

    /// Writes all the ciphertext rustls holds: at once in kernel mode, grant by grant
    /// under the user-space scheduler.
    async fn flush(&mut self, out: &mut Sending<'_>, bands: &mut BandState<'_>) -> std::io::Result<()> {
        let timeout = self.send_timeout;
        loop {
            let (tcp, session) = self.tls.get_mut();
            if !session.wants_write() {
                self.pending_bytes = 0;
                return Ok(());
            }
            let fd = tcp.as_raw_fd();
            let tcp = &*tcp;
            let n = match &mut out.user {
                None => {
                    io::write_with(tcp, timeout, || session.write_tls(&mut SocketWriter { fd, cap: usize::MAX }))
                        .await?
                }
                Some(reg) => {
                    // Bytes rustls queued by itself (a session ticket) are not in the
                    // estimate: ask for at least one record's worth.
                    let max = usize::try_from(self.pending_bytes).unwrap_or(usize::MAX).max(1);
                    let band = bands.socket.band();
                    reg.write(tcp, timeout, band, max, |cap| session.write_tls(&mut SocketWriter { fd, cap })).await?
                }
            };
            if n == 0 {
                return Err(std::io::Error::new(std::io::ErrorKind::WriteZero, "TLS records could not be written"));
            }
            self.pending_bytes = self.pending_bytes.saturating_sub(n as u64);
            bands.account(out, n as u64);
        }
    }
}
