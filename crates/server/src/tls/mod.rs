//! HTTPS: TLS 1.2 and 1.3 by rustls (aws-lc-rs, or ring with the `ring` feature) in
//! front of the same HTTP/1.1 state machine ([`crate::conn`]), or HTTP/2 ([`crate::http2`]).
//!
//! - [`certs`] (the `shortfirst-tls` crate, shared with the gatekeeper): the certificates, chosen per handshake by the client's server name (SNI,
//!   [`names`]) and by the signature schemes it offers (ECDSA or RSA); re-read on SIGHUP
//!   and when a file changes, swapped whole so handshakes in progress and connections
//!   already open keep what they have.
//! - [`write`]: the send path. This kernel has no kTLS, so a TLS response is read from the
//!   file into a buffer of one record, encrypted by rustls, and its ciphertext written with
//!   non-blocking `sendmsg` — by the grant under the user-space scheduler, which thus counts
//!   ciphertext bytes on the wire.
//!
//! The handshake runs in the connection's task within the header timeout, in the set-up
//! band (band 0) like a connection's control packets; its bytes on the wire
//! (`tcpi_bytes_sent` once it completes) are charged to the user-space pacer as control
//! bytes. ALPN offers `h2` (when HTTP/2 is on, [`crate::http2`]) then `http/1.1`; a client
//! offering only other protocols is refused with the `no_application_protocol` alert
//! (RFC 7301 §3.2); a client offering none gets HTTP/1.1.

pub mod write;

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

pub use shortfirst_tls::{certs, names, provider, CertStore, TlsError};

use crate::metrics::write_metric;

/// The ALPN protocol names offered, in preference order: `h2` first when HTTP/2 is on
/// ([`crate::http2::enabled`]), then `http/1.1`.
pub fn alpn_protocols(http2: bool) -> Vec<Vec<u8>> {
    let mut names = Vec::with_capacity(2);
    if http2 {
        names.push(crate::http2::ALPN.to_vec());
    }
    names.push(b"http/1.1".to_vec());
    names
}

/// Largest TLS record payload (RFC 8446 §5.1).
pub const MAX_RECORD_PAYLOAD_BYTES: usize = 16 * 1024;
/// Smallest record payload used under the user-space scheduler, whatever its largest grant
/// (at least a segment): below it the record overhead (22 bytes in TLS 1.3 with AES-GCM,
/// 29 in TLS 1.2) passes 2%.
pub const MIN_RECORD_PAYLOAD_BYTES: usize = 1024;
/// Wire bytes a record adds to its payload at most: a 5-byte header, TLS 1.2's 8-byte
/// explicit nonce, a 16-byte tag (TLS 1.3: header, content type byte and tag, 22).
pub const RECORD_OVERHEAD_BYTES: u64 = 29;

/// Ciphertext bytes of `plaintext_bytes` sent in records of `record_payload_bytes`: the
/// payload plus [`RECORD_OVERHEAD_BYTES`] per record (an upper bound: TLS 1.3 adds 22).
/// Bands and the user-space scheduler rank a TLS response by this.
pub fn ciphertext_bytes(plaintext_bytes: u64, record_payload_bytes: usize) -> u64 {
    let records = plaintext_bytes.div_ceil(record_payload_bytes.max(1) as u64);
    plaintext_bytes + records * RECORD_OVERHEAD_BYTES
}

/// The record payload size: a whole record in kernel mode, else the largest grant
/// (`quantum_bytes`) less the record overhead, so a record fits in one grant, within [`MIN_RECORD_PAYLOAD_BYTES`]..=[`MAX_RECORD_PAYLOAD_BYTES`].
pub fn record_payload_bytes(quantum_bytes: Option<u64>) -> usize {
    match quantum_bytes {
        None => MAX_RECORD_PAYLOAD_BYTES,
        Some(q) => usize::try_from(q.saturating_sub(RECORD_OVERHEAD_BYTES))
            .unwrap_or(usize::MAX)
            .clamp(MIN_RECORD_PAYLOAD_BYTES, MAX_RECORD_PAYLOAD_BYTES),
    }
}

/// The rustls server configuration: TLS 1.3 and 1.2, ALPN (`h2` too if `http2`),
/// certificates from `store`.
pub fn server_config(
    store: &Arc<CertStore>,
    record_payload_bytes: usize,
    http2: bool,
) -> Result<rustls::ServerConfig, TlsError> {
    let mut config = shortfirst_tls::server_config(store)?;
    config.alpn_protocols = alpn_protocols(http2);
    // The record header's 5 bytes are counted in rustls's fragment size.
    config.max_fragment_size = Some(record_payload_bytes + 5);
    Ok(config)
}

/// TLS counters for `/metrics`.
#[derive(Debug, Default)]
pub struct TlsMetrics {
    pub handshakes_tls12: AtomicU64,
    pub handshakes_tls13: AtomicU64,
    /// Handshakes that failed (bad client hello, no common protocol or ALPN, a client that
    /// left) or did not end within the header timeout.
    pub handshake_failures: AtomicU64,
    pub handshake_timeouts: AtomicU64,
    pub reloads: AtomicU64,
    pub reload_failures: AtomicU64,
    /// HTTP/1.x responses by transport: plaintext, TLS 1.2, TLS 1.3.
    pub responses_plain: AtomicU64,
    pub responses_tls12: AtomicU64,
    pub responses_tls13: AtomicU64,
    /// HTTP/2 responses (streams answered, complete or cut) by transport: h2c, TLS 1.2, TLS 1.3.
    pub responses_h2_plain: AtomicU64,
    pub responses_h2_tls12: AtomicU64,
    pub responses_h2_tls13: AtomicU64,
}

impl TlsMetrics {
    /// One response went out over `tls_version` (`None`: plaintext).
    pub fn response(&self, tls_version: Option<&str>) {
        let counter = match tls_version {
            None => &self.responses_plain,
            Some("TLSv1.2") => &self.responses_tls12,
            Some(_) => &self.responses_tls13,
        };
        counter.fetch_add(1, Relaxed);
    }

    /// One HTTP/2 response went out over `tls_version` (`None`: h2c).
    pub fn response_h2(&self, tls_version: Option<&str>) {
        let counter = match tls_version {
            None => &self.responses_h2_plain,
            Some("TLSv1.2") => &self.responses_h2_tls12,
            Some(_) => &self.responses_h2_tls13,
        };
        counter.fetch_add(1, Relaxed);
    }

    /// The per-protocol response counts; the TLS counters too if `tls` is on.
    pub fn render(&self, out: &mut String, tls: bool) {
        let name = "shortfirst_responses_by_protocol_total";
        crate::metrics::write_family(out, name, "counter", "Responses by protocol and TLS version.");
        for (protocol, tls, n) in [
            ("http/1.1", "none", &self.responses_plain),
            ("http/1.1", "1.2", &self.responses_tls12),
            ("http/1.1", "1.3", &self.responses_tls13),
            ("h2", "none", &self.responses_h2_plain),
            ("h2", "1.2", &self.responses_h2_tls12),
            ("h2", "1.3", &self.responses_h2_tls13),
        ] {
            let _ = writeln!(out, "{name}{{protocol=\"{protocol}\",tls=\"{tls}\"}} {}", n.load(Relaxed));
        }
        if !tls {
            return;
        }
        let name = "shortfirst_tls_handshakes_total";
        crate::metrics::write_family(out, name, "counter", "TLS handshakes completed, by version.");
        for (version, n) in [("1.2", &self.handshakes_tls12), ("1.3", &self.handshakes_tls13)] {
            let _ = writeln!(out, "{name}{{version=\"{version}\"}} {}", n.load(Relaxed));
        }
        let counters = [
            (
                "shortfirst_tls_handshake_failures_total",
                "TLS handshakes that failed (protocol error, no common version or ALPN, client gone).",
                &self.handshake_failures,
            ),
            (
                "shortfirst_tls_handshake_timeouts_total",
                "TLS handshakes not done within the header timeout.",
                &self.handshake_timeouts,
            ),
            (
                "shortfirst_tls_reloads_total",
                "Certificate sets loaded after start (SIGHUP, file change).",
                &self.reloads,
            ),
            (
                "shortfirst_tls_reload_failures_total",
                "Certificate reloads refused (the previous set stays in force).",
                &self.reload_failures,
            ),
        ];
        for (name, help, v) in counters {
            write_metric(out, name, "counter", help, v.load(Relaxed) as f64);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ciphertext_counts_one_overhead_per_record() {
        assert_eq!(ciphertext_bytes(0, 16384), 0);
        assert_eq!(ciphertext_bytes(1, 16384), 1 + RECORD_OVERHEAD_BYTES);
        assert_eq!(ciphertext_bytes(16384, 16384), 16384 + RECORD_OVERHEAD_BYTES);
        assert_eq!(ciphertext_bytes(16385, 16384), 16385 + 2 * RECORD_OVERHEAD_BYTES);
    }

    #[test]
    fn record_size_follows_the_grant_within_bounds() {
        assert_eq!(record_payload_bytes(None), MAX_RECORD_PAYLOAD_BYTES);
        assert_eq!(record_payload_bytes(Some(750)), MIN_RECORD_PAYLOAD_BYTES);
        assert_eq!(record_payload_bytes(Some(4096)), 4096 - RECORD_OVERHEAD_BYTES as usize);
        assert_eq!(record_payload_bytes(Some(1 << 20)), MAX_RECORD_PAYLOAD_BYTES);
    }
}
