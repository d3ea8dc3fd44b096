//! HTTP/2 counters for `/metrics` (responses per protocol are counted with the TLS ones,
//! `shortfirst_responses_by_protocol_total`).

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use super::wire::{ErrorFrameCounts, ERROR_CODE_NAMES};
use crate::metrics::{write_family, write_metric};

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
    /// RST_STREAM and GOAWAY frames by error code, sent and received: what the codec
    /// refused (the stream limit, floods) it reports only on the wire.
    pub error_frames: ErrorFrameCounts,
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
        let e = &self.error_frames;
        for (name, help, family) in [
            (
                "shortfirst_http2_resets_sent_total",
                "HTTP/2 RST_STREAM frames sent, by error code (refused_stream: beyond the stream limit).",
                &e.sent.resets,
            ),
            (
                "shortfirst_http2_resets_received_total",
                "HTTP/2 RST_STREAM frames received, by error code.",
                &e.received.resets,
            ),
            (
                "shortfirst_http2_goaways_sent_total",
                "HTTP/2 GOAWAY frames sent, by error code (enhance_your_calm: a flood refused).",
                &e.sent.goaways,
            ),
            (
                "shortfirst_http2_goaways_received_total",
                "HTTP/2 GOAWAY frames received, by error code.",
                &e.received.goaways,
            ),
        ] {
            render_by_code(out, name, help, family);
        }
    }
}

/// One counter family labelled `error` with every code of [`ERROR_CODE_NAMES`].
fn render_by_code(out: &mut String, name: &str, help: &str, family: &[AtomicU64; ERROR_CODE_NAMES.len()]) {
    use std::fmt::Write as _;
    write_family(out, name, "counter", help);
    for (code, count) in ERROR_CODE_NAMES.iter().zip(family) {
        let _ = writeln!(out, "{name}{{error=\"{code}\"}} {}", count.load(Relaxed));
    }
}
