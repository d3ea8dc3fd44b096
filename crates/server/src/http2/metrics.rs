//! HTTP/2 counters for `/metrics` (responses per protocol are counted with the TLS ones,
//! `shortfirst_responses_by_protocol_total`).

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use crate::metrics::write_metric;

#[derive(Debug, Default)]
pub struct Http2Metrics {
    /// Connections whose HTTP/2 handshake completed (TLS and h2c).
    pub connections: AtomicU64,
    /// Streams whose body did not go out whole: reset by the client, or the connection ended.
    pub streams_cut: AtomicU64,
    /// Connections closed for making no progress for the send timeout with bytes to send.
    pub stalled: AtomicU64,
    /// Idle connections sent GOAWAY after the idle timeout.
    pub idle_goaways: AtomicU64,
}

impl Http2Metrics {
    pub fn render(&self, out: &mut String) {
        for (name, help, v) in [
            ("shortfirst_http2_connections_total", "HTTP/2 connections (TLS and h2c).", &self.connections),
            (
                "shortfirst_http2_streams_cut_total",
                "HTTP/2 responses cut before their last byte (stream reset, connection ended).",
                &self.streams_cut,
            ),
            (
                "shortfirst_http2_stalled_total",
                "HTTP/2 connections closed after the send timeout without progress.",
                &self.stalled,
            ),
            (
                "shortfirst_http2_idle_goaways_total",
                "HTTP/2 connections sent GOAWAY after the idle timeout.",
                &self.idle_goaways,
            ),
        ] {
            write_metric(out, name, "counter", help, v.load(Relaxed));
        }
    }
}
