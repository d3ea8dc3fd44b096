//! Access log: Combined Log Format (plus response time and band) or JSON lines,
//! written by a background thread from a bounded in-memory buffer.
//!
//! Connections format their line into a reused per-connection buffer and
//! append it under a short lock; the writer thread swaps the buffer out every
//! [`FLUSH_INTERVAL`] (or when it passes [`FLUSH_THRESHOLD_BYTES`]) and writes
//! outside the lock. The buffer holds at most [`MAX_BUFFERED_BYTES`]: when the
//! disk cannot keep up, new lines are dropped and counted
//! (`shortfirst_access_log_dropped_total`), never blocking a response.

use std::fs::OpenOptions;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use shortfirst_core::bands::Band;

use crate::config::AccessLogFormat;
use crate::http::date;
use crate::http::response::push_u64;

pub const MAX_BUFFERED_BYTES: usize = 4 << 20;
pub const FLUSH_THRESHOLD_BYTES: usize = 64 << 10;
pub const FLUSH_INTERVAL: Duration = Duration::from_millis(200);

/// One request, as logged.
pub struct Entry<'a> {
    pub remote: &'a [u8],
    /// `GET /path HTTP/1.1`, or empty when the request line could not be parsed.
    pub request_line: &'a [u8],
    pub status: u16,
    pub body_bytes: u64,
    pub referer: Option<&'a [u8]>,
    pub user_agent: Option<&'a [u8]>,
    pub response_time: Duration,
    pub band: Band,
    /// `TLSv1.2`, `TLSv1.3`; `None` in plaintext.
    pub tls: Option<&'a str>,
    pub protocol: Protocol,
}

/// The application protocol a response went out in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    Http1,
    /// HTTP/2, on this stream of its connection.
    Http2 {
        stream: u32,
    },
}

impl Protocol {
    /// ALPN's name for it.
    fn name(self) -> &'static [u8] {
        match self {
            Protocol::Http1 => b"http/1.1",
            Protocol::Http2 { .. } => b"h2",
        }
    }
}

struct Inner {
    buf: Mutex<Vec<u8>>,
    wake: Condvar,
    stop: AtomicBool,
    /// Set by [`AccessLog::reopen`] (SIGHUP, after logrotate moved the file).
    reopen: AtomicBool,
    dropped: AtomicU64,
}

pub struct AccessLog {
    inner: Arc<Inner>,
    format: AccessLogFormat,
    writer: Mutex<Option<JoinHandle<()>>>,
}

impl AccessLog {
    /// Opens `path` for appending (`-` = standard output) and starts the writer thread.
    pub fn open(path: &Path, format: AccessLogFormat) -> io::Result<AccessLog> {
        if path == Path::new("-") {
            return Ok(AccessLog::with_writer(Box::new(io::stdout()), None, format));
        }
        let out = Box::new(open_append(path)?);
        Ok(AccessLog::with_writer(out, Some(path.to_path_buf()), format))
    }

    /// Starts the writer thread on `out`; `path`, if any, is reopened on [`AccessLog::reopen`].
    pub fn with_writer(mut out: Box<dyn Write + Send>, path: Option<PathBuf>, format: AccessLogFormat) -> AccessLog {
        let inner = Arc::new(Inner {
            buf: Mutex::new(Vec::with_capacity(FLUSH_THRESHOLD_BYTES * 2)),
            wake: Condvar::new(),
            stop: AtomicBool::new(false),
            reopen: AtomicBool::new(false),
            dropped: AtomicU64::new(0),
        });
        let shared = inner.clone();
        let writer = std::thread::Builder::new()
            .name("access-log".into())
            .spawn(move || {
                let mut spare = Vec::with_capacity(FLUSH_THRESHOLD_BYTES * 2);
                loop {
                    let stopping = {
                        let guard = shared.buf.lock().expect("access log lock poisoned");
                        let (mut guard, _) = shared
                            .wake
                            .wait_timeout_while(guard, FLUSH_INTERVAL, |b| {
                                b.len() < FLUSH_THRESHOLD_BYTES
                                    && !shared.stop.load(Ordering::Acquire)
                                    && !shared.reopen.load(Ordering::Acquire)
                            })
                            .expect("access log lock poisoned");
                        std::mem::swap(&mut *guard, &mut spare);
                        shared.stop.load(Ordering::Acquire)
                    };
                    if shared.reopen.swap(false, Ordering::AcqRel) {
                        if let Some(path) = &path {
                            match open_append(path) {
                                Ok(file) => out = Box::new(file),
                                Err(e) => tracing::warn!(error = %e, path = %path.display(), "access log reopen failed; keeping the old file"),
                            }
                        }
                    }
                    if !spare.is_empty() {
                        if let Err(e) = out.write_all(&spare).and_then(|_| out.flush()) {
                            tracing::warn!(error = %e, "access log write failed");
                        }
                        spare.clear();
                    }
                    if stopping {
                        break;
                    }
                }
            })
            .expect("spawn access log thread");
        AccessLog { inner, format, writer: Mutex::new(Some(writer)) }
    }

    pub fn format(&self) -> AccessLogFormat {
        self.format
    }

    /// Appends one formatted line; dropped (and counted) if the buffer is full.
    pub fn push(&self, line: &[u8]) {
        let mut buf = self.inner.buf.lock().expect("access log lock poisoned");
        if buf.len() + line.len() > MAX_BUFFERED_BYTES {
            self.inner.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        buf.extend_from_slice(line);
        if buf.len() >= FLUSH_THRESHOLD_BYTES {
            self.inner.wake.notify_one();
        }
    }

    pub fn dropped(&self) -> u64 {
        self.inner.dropped.load(Ordering::Relaxed)
    }

    /// Reopens the log file by its path (after rotation); lines buffered from
    /// now on go to the new file. No-op for standard output.
    pub fn reopen(&self) {
        self.inner.reopen.store(true, Ordering::Release);
        self.inner.wake.notify_one();
    }

    /// Writes out everything buffered and stops the writer thread.
    pub fn close(&self) {
        self.inner.stop.store(true, Ordering::Release);
        self.inner.wake.notify_one();
        if let Some(handle) = self.writer.lock().expect("access log lock poisoned").take() {
            let _ = handle.join();
        }
    }
}

impl Drop for AccessLog {
    fn drop(&mut self) {
        self.close();
    }
}

fn open_append(path: &Path) -> io::Result<std::fs::File> {
    OpenOptions::new().create(true).append(true).open(path)
}

/// Formats `e` into `out` (cleared first), newline-terminated.
pub fn format_line(out: &mut Vec<u8>, format: AccessLogFormat, e: &Entry<'_>) {
    out.clear();
    match format {
        AccessLogFormat::Combined => combined(out, e),
        AccessLogFormat::Json => json(out, e),
    }
    out.push(b'\n');
}

/// `host - - [time] "request" status bytes "referer" "agent" rt=seconds band=n proto=http/1.1|h2
/// tls=TLSv1.3|-`, and ` stream=N` over HTTP/2.
fn combined(out: &mut Vec<u8>, e: &Entry<'_>) {
    out.extend_from_slice(e.remote);
    out.extend_from_slice(b" - - [");
    date::with_now(|s| out.extend_from_slice(&s.clf));
    out.extend_from_slice(b"] \"");
    if e.request_line.is_empty() {
        out.push(b'-');
    } else {
        clf_escape(out, e.request_line);
    }
    out.extend_from_slice(b"\" ");
    push_u64(out, u64::from(e.status));
    out.push(b' ');
    if e.body_bytes == 0 {
        out.push(b'-');
    } else {
        push_u64(out, e.body_bytes);
    }
    for field in [e.referer, e.user_agent] {
        out.extend_from_slice(b" \"");
        match field {
            Some(v) => clf_escape(out, v),
            None => out.push(b'-'),
        }
        out.push(b'"');
    }
    out.extend_from_slice(b" rt=");
    push_seconds(out, e.response_time);
    out.extend_from_slice(b" band=");
    push_u64(out, u64::from(e.band.index()));
    out.extend_from_slice(b" proto=");
    out.extend_from_slice(e.protocol.name());
    out.extend_from_slice(b" tls=");
    out.extend_from_slice(e.tls.map_or(&b"-"[..], str::as_bytes));
    if let Protocol::Http2 { stream } = e.protocol {
        out.extend_from_slice(b" stream=");
        push_u64(out, u64::from(stream));
    }
}

fn json(out: &mut Vec<u8>, e: &Entry<'_>) {
    out.extend_from_slice(b"{\"time\":\"");
    date::with_now(|s| out.extend_from_slice(&s.rfc3339));
    out.extend_from_slice(b"\",\"remote\":\"");
    json_escape(out, e.remote);
    out.extend_from_slice(b"\",\"request\":\"");
    json_escape(out, e.request_line);
    out.extend_from_slice(b"\",\"status\":");
    push_u64(out, u64::from(e.status));
    out.extend_from_slice(b",\"body_bytes\":");
    push_u64(out, e.body_bytes);
    for (name, field) in [(&b"referer"[..], e.referer), (b"user_agent", e.user_agent)] {
        out.extend_from_slice(b",\"");
        out.extend_from_slice(name);
        out.extend_from_slice(b"\":");
        match field {
            Some(v) => {
                out.push(b'"');
                json_escape(out, v);
                out.push(b'"');
            }
            None => out.extend_from_slice(b"null"),
        }
    }
    out.extend_from_slice(b",\"response_time_us\":");
    push_u64(out, e.response_time.as_micros() as u64);
    out.extend_from_slice(b",\"band\":");
    push_u64(out, u64::from(e.band.index()));
    out.extend_from_slice(b",\"protocol\":\"");
    out.extend_from_slice(e.protocol.name());
    out.extend_from_slice(b"\",\"stream\":");
    match e.protocol {
        Protocol::Http2 { stream } => push_u64(out, u64::from(stream)),
        Protocol::Http1 => out.extend_from_slice(b"null"),
    }
    out.extend_from_slice(b",\"tls\":");
    match e.tls {
        Some(v) => {
            out.push(b'"');
            json_escape(out, v.as_bytes());
            out.push(b'"');
        }
        None => out.extend_from_slice(b"null"),
    }
    out.push(b'}');
}

/// Seconds with microsecond precision: `0.000123`.
fn push_seconds(out: &mut Vec<u8>, d: Duration) {
    push_u64(out, d.as_secs());
    out.push(b'.');
    let micros = d.subsec_micros();
    let digits = [100_000, 10_000, 1_000, 100, 10, 1];
    for div in digits {
        out.push(b'0' + (micros / div % 10) as u8);
    }
}

/// Apache-style: `"`, `\` and bytes outside printable ASCII as `\xHH`.
fn clf_escape(out: &mut Vec<u8>, v: &[u8]) {
    for &b in v {
        if b == b'"' || b == b'\\' || !(0x20..0x7f).contains(&b) {
            out.extend_from_slice(b"\\x");
            out.push(b"0123456789abcdef"[usize::from(b >> 4)]);
            out.push(b"0123456789abcdef"[usize::from(b & 0xf)]);
        } else {
            out.push(b);
        }
    }
}

/// JSON string body; non-ASCII bytes as `\u00HH` so any input stays valid JSON.
fn json_escape(out: &mut Vec<u8>, v: &[u8]) {
    for &b in v {
        match b {
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            0x20..=0x7e => out.push(b),
            _ => {
                out.extend_from_slice(b"\\u00");
                out.push(b"0123456789abcdef"[usize::from(b >> 4)]);
                out.push(b"0123456789abcdef"[usize::from(b & 0xf)]);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry() -> Entry<'static> {
        Entry {
            remote: b"127.0.0.1",
            request_line: b"GET /a\"b HTTP/1.1",
            status: 200,
            body_bytes: 1234,
            referer: None,
            user_agent: Some(b"curl/8\x01"),
            response_time: Duration::from_micros(1_234_567),
            band: Band::new(3).unwrap(),
            tls: None,
            protocol: Protocol::Http1,
        }
    }

    #[test]
    fn combined_line() {
        let mut out = Vec::new();
        format_line(&mut out, AccessLogFormat::Combined, &entry());
        let line = String::from_utf8(out).unwrap();
        let (head, tail) = line.split_once(" [").unwrap();
        assert_eq!(head, "127.0.0.1 - -");
        let (_time, rest) = tail.split_once("] ").unwrap();
        assert_eq!(
            rest,
            "\"GET /a\\x22b HTTP/1.1\" 200 1234 \"-\" \"curl/8\\x01\" rt=1.234567 band=3 proto=http/1.1 tls=-\n"
        );
    }

    #[test]
    fn json_line_is_valid_json() {
        let mut out = Vec::new();
        let mut e = entry();
        e.request_line = b"GET /\xff HTTP/1.1";
        format_line(&mut out, AccessLogFormat::Json, &e);
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["status"], 200);
        assert_eq!(v["band"], 3);
        assert_eq!(v["response_time_us"], 1_234_567);
        assert_eq!(v["referer"], serde_json::Value::Null);
        assert_eq!((v["protocol"].as_str(), v["tls"].as_str()), (Some("http/1.1"), None));
        assert_eq!(v["request"], "GET /\u{ff} HTTP/1.1");
        assert_eq!(v["stream"], serde_json::Value::Null);
    }

    #[test]
    fn http2_lines_name_the_protocol_and_the_stream() {
        let mut e = entry();
        e.request_line = b"GET /a HTTP/2.0";
        e.protocol = Protocol::Http2 { stream: 5 };
        e.tls = Some("TLSv1.3");
        let mut out = Vec::new();
        format_line(&mut out, AccessLogFormat::Combined, &e);
        let line = String::from_utf8(out.clone()).unwrap();
        assert!(
            line.ends_with(
                "\"GET /a HTTP/2.0\" 200 1234 \"-\" \"curl/8\\x01\" rt=1.234567 band=3 proto=h2 tls=TLSv1.3 stream=5\n"
            ),
            "{line}"
        );
        format_line(&mut out, AccessLogFormat::Json, &e);
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!((v["protocol"].as_str(), v["stream"].as_u64()), (Some("h2"), Some(5)));
    }

    #[test]
    fn buffer_is_bounded_and_flushed_on_close() {
        let file = tempfile::NamedTempFile::new().unwrap();
        let log = AccessLog::open(file.path(), AccessLogFormat::Combined).unwrap();
        log.push(b"one\n");
        let big = vec![b'x'; MAX_BUFFERED_BYTES + 1];
        log.push(&big);
        assert_eq!(log.dropped(), 1);
        log.close();
        assert_eq!(std::fs::read(file.path()).unwrap(), b"one\n");
    }

    #[test]
    #[allow(clippy::disallowed_types)] // the wall clock: the writer is a thread of its own
    fn reopen_follows_rotation() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("access.log");
        let log = AccessLog::open(&path, AccessLogFormat::Combined).unwrap();
        log.push(b"before\n");
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while std::fs::metadata(&path).unwrap().len() == 0 {
            assert!(std::time::Instant::now() < deadline, "never flushed");
            std::thread::sleep(Duration::from_millis(10));
        }
        std::fs::rename(&path, dir.path().join("access.log.1")).unwrap();
        log.reopen();
        log.push(b"after\n");
        log.close();
        assert_eq!(std::fs::read(dir.path().join("access.log.1")).unwrap(), b"before\n");
        assert_eq!(std::fs::read(&path).unwrap(), b"after\n");
    }
}
