//! The bookstore's per-request log (`bookstore serve --request-log FILE`): one CSV row per
//! request the application tier received, written when its handler ends — or is dropped,
//! because the connection it came on closed first.
//!
//! Why: the Gatekeeper experiment needs, per request, when it reached the application tier
//! and how long the tier worked on it, to join with the emulated browsers' own log. That join
//! splits each browser's response time into waiting (before the request reached the tier) and
//! execution, on the same requests, and it finds the work the tier did for requests whose
//! browser had already given up (rows that match no browser's answer).
//!
//! Columns: `arrived_unix_s` (wall clock when the handler started), `path`, `status` (empty
//! when the handler was dropped), `service_s` (handler start to end or drop), `outcome`
//! (`done`: a response was produced; `dropped`: the connection closed while the handler
//! ran). Rows are in order of completion, not arrival.
//!
//! Bounds: the writer buffers at most [`BUF_BYTES`]; at most `max_rows` rows are written,
//! after which further requests are counted in [`RequestLog::skipped`] and a warning is
//! logged once. Rows still buffered are written by [`RequestLog::flush`] (the server calls it
//! at shutdown) or when the log is dropped.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Instant, SystemTime};

use crate::error::{Error, Result};

/// Write buffer of the log file.
pub const BUF_BYTES: usize = 64 * 1024;

/// Default row limit: about 60 bytes a row, so at most ~600 MB.
pub const DEFAULT_MAX_ROWS: u64 = 10_000_000;

pub const HEADER: &str = "arrived_unix_s,path,status,service_s,outcome";

/// An open request log, shared by all connections.
pub struct RequestLog {
    out: Mutex<BufWriter<File>>,
    rows: AtomicU64,
    skipped: AtomicU64,
    max_rows: u64,
}

impl RequestLog {
    /// Creates (truncates) `path` and writes the header.
    pub fn create(path: &Path, max_rows: u64) -> Result<Self> {
        let file = File::create(path).map_err(Error::io(format!("creating --request-log {}", path.display())))?;
        let mut out = BufWriter::with_capacity(BUF_BYTES, file);
        writeln!(out, "{HEADER}").map_err(Error::io(format!("writing {}", path.display())))?;
        Ok(RequestLog { out: Mutex::new(out), rows: AtomicU64::new(0), skipped: AtomicU64::new(0), max_rows })
    }

    /// Starts timing a request; the row is written when the returned entry is dropped.
    pub fn begin(&self, path: &str) -> Entry<'_> {
        Entry { log: self, path: path.to_string(), arrived: SystemTime::now(), started: Instant::now(), status: None }
    }

    /// Rows not written because `max_rows` was reached.
    pub fn skipped(&self) -> u64 {
        self.skipped.load(Ordering::Relaxed)
    }

    pub fn flush(&self) -> Result<()> {
        let mut out = self.out.lock().unwrap_or_else(|p| p.into_inner());
        out.flush().map_err(Error::io("flushing the request log"))
    }

    fn write(&self, e: &Entry<'_>) {
        if self.rows.fetch_add(1, Ordering::Relaxed) >= self.max_rows {
            if self.skipped.fetch_add(1, Ordering::Relaxed) == 0 {
                tracing::warn!(
                    "request log: {} rows written, the limit; further requests are not logged",
                    self.max_rows
                );
            }
            return;
        }
        let arrived = e.arrived.duration_since(SystemTime::UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0);
        let service_s = e.started.elapsed().as_secs_f64();
        let (status, outcome) = match e.status {
            Some(s) => (s.to_string(), "done"),
            None => (String::new(), "dropped"),
        };
        // Paths come from the request line: quote them if they could break the CSV.
        let path = if e.path.contains([',', '"', '\n', '\r']) {
            format!("\"{}\"", e.path.replace('"', "\"\""))
        } else {
            e.path.clone()
        };
        let mut out = self.out.lock().unwrap_or_else(|p| p.into_inner());
        if let Err(err) = writeln!(out, "{arrived:.6},{path},{status},{service_s:.6},{outcome}") {
            tracing::warn!("request log: {err}");
        }
    }
}

impl std::fmt::Debug for RequestLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RequestLog")
            .field("rows", &self.rows.load(Ordering::Relaxed))
            .field("max_rows", &self.max_rows)
            .finish_non_exhaustive()
    }
}

impl Drop for RequestLog {
    fn drop(&mut self) {
        let _ = self.flush();
    }
}

/// One request being served; writes its row when dropped.
pub struct Entry<'a> {
    log: &'a RequestLog,
    path: String,
    arrived: SystemTime,
    started: Instant,
    status: Option<u16>,
}

impl Entry<'_> {
    /// The handler produced a response with this status.
    pub fn done(&mut self, status: u16) {
        self.status = Some(status);
    }
}

impl Drop for Entry<'_> {
    fn drop(&mut self) {
        self.log.write(self);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_done_dropped_quoted_and_limited() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("requests.csv");
        let log = RequestLog::create(&path, 3).unwrap();
        log.begin("/home").done(200);
        drop(log.begin("/best_sellers"));
        log.begin("/odd,\"path\"").done(404);
        log.begin("/home").done(200);
        assert_eq!(log.skipped(), 1);
        log.flush().unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 4, "{text}");
        assert_eq!(lines[0], HEADER);
        let cols: Vec<&str> = lines[1].split(',').collect();
        assert_eq!((cols[1], cols[2], cols[4]), ("/home", "200", "done"));
        let now = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap().as_secs_f64();
        assert!((now - cols[0].parse::<f64>().unwrap()).abs() < 60.0);
        assert!(cols[3].parse::<f64>().unwrap() >= 0.0);
        assert!(lines[2].contains(",/best_sellers,,") && lines[2].ends_with(",dropped"));
        assert!(lines[3].contains(",\"/odd,\"\"path\"\"\",404,"));
    }
}
