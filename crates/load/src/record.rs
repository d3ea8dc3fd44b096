//! The per-request output row (`requests.csv`), shared by the load generator,
//! the simulator and the lab.
//!
//! Columns, in this order:
//! `id,client,path,size_bytes,bytes_received,status,outcome,attempts,scheduled_s,start_s,connected_s,first_byte_s,done_s`.
//! Times are seconds since the start of the run with microsecond precision
//! (six decimals). A time that never happened (no connection, no first byte)
//! and a missing status are written as an empty field.
//!
//! A run with a load schedule (`shortfirst load --load-schedule`) adds two
//! columns at the end, [`PHASE_COLUMNS`]: `phase`, the index (from 0) of the
//! schedule's phase in force at the request's `scheduled_s`, and
//! `load_multiplier`, that phase's multiplier. Without a schedule the file
//! has the 13 columns above only, byte for byte as before; readers that
//! select columns by name read both. A simulated farm (`shortfirst sim
//! --dispatch`) adds [`HOST_COLUMN`] last: the index (from 0) of the host
//! that served the request.
//!
//! [`RecordWriter`] streams rows to `<final>.tmp` and renames it onto the final
//! name in [`RecordWriter::finish`], so a crashed run never leaves a
//! half-written `requests.csv` looking complete.

use std::fmt;
use std::fs::File;
use std::io::{self, BufWriter};
use std::path::{Path, PathBuf};

/// The column names, in order.
pub const COLUMNS: [&str; 13] = [
    "id",
    "client",
    "path",
    "size_bytes",
    "bytes_received",
    "status",
    "outcome",
    "attempts",
    "scheduled_s",
    "start_s",
    "connected_s",
    "first_byte_s",
    "done_s",
];

/// The trailing columns of a run with a load schedule.
pub const PHASE_COLUMNS: [&str; 2] = ["phase", "load_multiplier"];

/// The trailing column of a simulated farm: the host that served the request.
pub const HOST_COLUMN: &str = "host";

/// A request's phase of the load schedule (the [`PHASE_COLUMNS`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PhaseTag {
    pub phase: usize,
    pub multiplier: f64,
}

/// The former name of [`RequestOutcome`], kept so that callers outside this
/// crate compile unchanged; other crates have an `Outcome` of their own (the
/// proxy's, the simulator's), so new code names this one in full.
pub use self::RequestOutcome as Outcome;

/// How a request ended (the `outcome` column of `requests.csv`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RequestOutcome {
    /// Complete response with a 1xx–3xx status.
    Ok,
    /// Complete response with a 4xx/5xx status.
    HttpError,
    /// The user gave up: aborted after the abort time on every attempt.
    Aborted,
    /// Could not connect, connection reset, malformed response, or not sent
    /// because a generator limit was reached.
    Failed,
    /// No complete response within the hard timeout (or by the end of the run).
    Timeout,
}

impl RequestOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            RequestOutcome::Ok => "ok",
            RequestOutcome::HttpError => "http_error",
            RequestOutcome::Aborted => "aborted",
            RequestOutcome::Failed => "failed",
            RequestOutcome::Timeout => "timeout",
        }
    }

    /// A complete response arrived (ok or http_error).
    pub fn completed(self) -> bool {
        matches!(self, RequestOutcome::Ok | RequestOutcome::HttpError)
    }
}

impl fmt::Display for RequestOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for RequestOutcome {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Ok(match s {
            "ok" => RequestOutcome::Ok,
            "http_error" => RequestOutcome::HttpError,
            "aborted" => RequestOutcome::Aborted,
            "failed" => RequestOutcome::Failed,
            "timeout" => RequestOutcome::Timeout,
            _ => return Err(format!("unknown outcome `{s}`")),
        })
    }
}

/// One row of `requests.csv`.
#[derive(Debug, Clone, PartialEq)]
pub struct RequestRecord {
    /// Position of the request in the trace / generation order, from 0.
    pub id: u64,
    pub client: u32,
    pub path: String,
    /// Expected body size (from the trace; 0 when unknown).
    pub size_bytes: u64,
    /// Body bytes actually received (after de-chunking) on the last attempt.
    pub bytes_received: u64,
    /// HTTP status of the last attempt's response, if one arrived.
    pub status: Option<u16>,
    pub outcome: RequestOutcome,
    /// Attempts made (1 + retries); 0 when the request was never sent.
    pub attempts: u32,
    /// When the request was due to be sent.
    pub scheduled_s: f64,
    /// When the first attempt actually began (connect or write).
    pub start_s: f64,
    /// Connection established (last attempt); equal to the attempt's start when
    /// a kept-alive connection was reused.
    pub connected_s: Option<f64>,
    /// First response byte (last attempt).
    pub first_byte_s: Option<f64>,
    /// Last response byte, or when the request ended otherwise.
    pub done_s: Option<f64>,
}

impl RequestRecord {
    /// Response time measured from the scheduled send (free of coordinated
    /// omission), if the request completed.
    pub fn response_from_scheduled_s(&self) -> Option<f64> {
        if self.outcome.completed() {
            self.done_s.map(|d| d - self.scheduled_s)
        } else {
            None
        }
    }

    /// Response time measured from the actual first send, if completed.
    pub fn response_from_start_s(&self) -> Option<f64> {
        if self.outcome.completed() {
            self.done_s.map(|d| d - self.start_s)
        } else {
            None
        }
    }
}

/// Writing or reading records failed.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("{}: {source}", path.display())]
    Csv {
        path: PathBuf,
        #[source]
        source: csv::Error,
    },
    #[error("{}: line {line}: {message}", path.display())]
    Malformed { path: PathBuf, line: u64, message: String },
}

/// Seconds with microsecond precision, as written in the file.
fn secs(v: f64) -> String {
    format!("{v:.6}")
}

fn opt_secs(v: Option<f64>) -> String {
    v.map(secs).unwrap_or_default()
}

/// Streams [`RequestRecord`]s to a CSV file through a temporary file.
pub struct RecordWriter {
    writer: Option<csv::Writer<BufWriter<File>>>,
    tmp_path: PathBuf,
    final_path: PathBuf,
    rows: u64,
    /// Whether the file has the [`PHASE_COLUMNS`].
    phase_columns: bool,
    /// Whether the file ends with the [`HOST_COLUMN`].
    host_column: bool,
}

impl RecordWriter {
    /// Starts writing `path` (actually `path.tmp` until [`finish`](Self::finish)).
    pub fn create(path: &Path) -> Result<Self, RecordError> {
        Self::create_with(path, false)
    }

    /// As [`create`](Self::create), with the [`PHASE_COLUMNS`] at the end of
    /// each row (a run with a load schedule; see [`write_in_phase`](Self::write_in_phase)).
    pub fn create_with_phase_columns(path: &Path) -> Result<Self, RecordError> {
        Self::create_with(path, true)
    }

    /// As [`create`](Self::create), with the [`PHASE_COLUMNS`] and/or the
    /// [`HOST_COLUMN`] at the end of each row (see [`write_tagged`](Self::write_tagged)).
    pub fn create_with_columns(path: &Path, phase_columns: bool, host_column: bool) -> Result<Self, RecordError> {
        Self::create_with_header(path, phase_columns, host_column)
    }

    fn create_with(path: &Path, phase_columns: bool) -> Result<Self, RecordError> {
        Self::create_with_header(path, phase_columns, false)
    }

    fn create_with_header(path: &Path, phase_columns: bool, host_column: bool) -> Result<Self, RecordError> {
        let mut tmp = path.as_os_str().to_owned();
        tmp.push(".tmp");
        let tmp_path = PathBuf::from(tmp);
        let file = File::create(&tmp_path).map_err(|source| RecordError::Io { path: tmp_path.clone(), source })?;
        let mut writer = csv::WriterBuilder::new().from_writer(BufWriter::with_capacity(1 << 16, file));
        let header = COLUMNS.iter().chain(if phase_columns { &PHASE_COLUMNS[..] } else { &[] }).chain(if host_column {
            &[HOST_COLUMN][..]
        } else {
            &[]
        });
        writer.write_record(header).map_err(|source| RecordError::Csv { path: tmp_path.clone(), source })?;
        Ok(RecordWriter {
            writer: Some(writer),
            tmp_path,
            final_path: path.to_path_buf(),
            rows: 0,
            phase_columns,
            host_column,
        })
    }

    /// Appends one row (with the phase columns, if the file has them, empty).
    pub fn write(&mut self, r: &RequestRecord) -> Result<(), RecordError> {
        self.write_row(r, None)
    }

    /// Appends one row with its phase of the load schedule (written only if
    /// the file has the [`PHASE_COLUMNS`]).
    pub fn write_in_phase(&mut self, r: &RequestRecord, tag: PhaseTag) -> Result<(), RecordError> {
        self.write_row(r, Some(tag))
    }

    /// Appends one row with its phase and its host (each written only if the file
    /// has its column; a missing one is written empty).
    pub fn write_tagged(
        &mut self,
        r: &RequestRecord,
        tag: Option<PhaseTag>,
        host: Option<u32>,
    ) -> Result<(), RecordError> {
        self.write_full_row(r, tag, host)
    }

    fn write_row(&mut self, r: &RequestRecord, tag: Option<PhaseTag>) -> Result<(), RecordError> {
        self.write_full_row(r, tag, None)
    }

    fn write_full_row(
        &mut self,
        r: &RequestRecord,
        tag: Option<PhaseTag>,
        host: Option<u32>,
    ) -> Result<(), RecordError> {
        let w = self.writer.as_mut().expect("write after finish");
        let mut row = vec![
            r.id.to_string(),
            r.client.to_string(),
            r.path.clone(),
            r.size_bytes.to_string(),
            r.bytes_received.to_string(),
            r.status.map(|s| s.to_string()).unwrap_or_default(),
            r.outcome.as_str().to_string(),
            r.attempts.to_string(),
            secs(r.scheduled_s),
            secs(r.start_s),
            opt_secs(r.connected_s),
            opt_secs(r.first_byte_s),
            opt_secs(r.done_s),
        ];
        if self.phase_columns {
            row.push(tag.map(|t| t.phase.to_string()).unwrap_or_default());
            row.push(tag.map(|t| t.multiplier.to_string()).unwrap_or_default());
        }
        if self.host_column {
            row.push(host.map(|h| h.to_string()).unwrap_or_default());
        }
        w.write_record(&row).map_err(|source| RecordError::Csv { path: self.tmp_path.clone(), source })?;
        self.rows += 1;
        Ok(())
    }

    /// Rows written so far.
    pub fn rows(&self) -> u64 {
        self.rows
    }

    /// Flushes, syncs and renames the file onto its final name.
    pub fn finish(mut self) -> Result<u64, RecordError> {
        let w = self.writer.take().expect("finish twice");
        let io_err = |path: &Path, source: io::Error| RecordError::Io { path: path.to_path_buf(), source };
        let buf = w.into_inner().map_err(|e| io_err(&self.tmp_path, e.into_error()))?;
        let file = buf.into_inner().map_err(|e| io_err(&self.tmp_path, e.into_error()))?;
        file.sync_all().map_err(|e| io_err(&self.tmp_path, e))?;
        std::fs::rename(&self.tmp_path, &self.final_path).map_err(|e| io_err(&self.final_path, e))?;
        Ok(self.rows)
    }
}

impl Drop for RecordWriter {
    fn drop(&mut self) {
        // Not finished: leave nothing that looks like a result behind.
        if self.writer.take().is_some() {
            let _ = std::fs::remove_file(&self.tmp_path);
        }
    }
}

/// Reads a `requests.csv` back (tests, tools). Streams; checks the header,
/// which may end with the [`PHASE_COLUMNS`] (not part of [`RequestRecord`]).
pub fn read_records(path: &Path) -> Result<impl Iterator<Item = Result<RequestRecord, RecordError>>, RecordError> {
    let mut rdr = csv::ReaderBuilder::new()
        .has_headers(true)
        .from_path(path)
        .map_err(|source| RecordError::Csv { path: path.to_path_buf(), source })?;
    let header = rdr.headers().map_err(|source| RecordError::Csv { path: path.to_path_buf(), source })?;
    // The trailing columns are optional: the phase pair, then the host.
    let base_ok = header.iter().take(COLUMNS.len()).eq(COLUMNS.iter().copied());
    let rest: Vec<&str> = header.iter().skip(COLUMNS.len()).collect();
    let known_rest =
        [&[][..], &PHASE_COLUMNS[..], &[HOST_COLUMN][..], &[PHASE_COLUMNS[0], PHASE_COLUMNS[1], HOST_COLUMN][..]];
    let width = if base_ok && known_rest.contains(&rest.as_slice()) {
        header.len()
    } else {
        return Err(RecordError::Malformed {
            path: path.to_path_buf(),
            line: 1,
            message: format!(
                "expected header `{}` (optionally with `,{}`, then `,{HOST_COLUMN}`)",
                COLUMNS.join(","),
                PHASE_COLUMNS.join(",")
            ),
        });
    };
    let path = path.to_path_buf();
    Ok(rdr.into_records().map(move |row| {
        let row = row.map_err(|source| RecordError::Csv { path: path.clone(), source })?;
        let line = row.position().map(|p| p.line()).unwrap_or(0);
        let bad = |col: &str, v: &str| RecordError::Malformed {
            path: path.clone(),
            line,
            message: format!("{col}: unexpected value `{v}`"),
        };
        if row.len() != width {
            return Err(RecordError::Malformed {
                path: path.clone(),
                line,
                message: format!("expected {width} fields, found {}", row.len()),
            });
        }
        fn num<T: std::str::FromStr>(v: &str) -> Option<T> {
            v.parse().ok()
        }
        let get = |i: usize| &row[i];
        let opt_f = |i: usize| -> Result<Option<f64>, RecordError> {
            let v = get(i);
            if v.is_empty() {
                Ok(None)
            } else {
                num(v).map(Some).ok_or_else(|| bad(COLUMNS[i], v))
            }
        };
        let req_f = |i: usize| -> Result<f64, RecordError> { num(get(i)).ok_or_else(|| bad(COLUMNS[i], get(i))) };
        Ok(RequestRecord {
            id: num(get(0)).ok_or_else(|| bad("id", get(0)))?,
            client: num(get(1)).ok_or_else(|| bad("client", get(1)))?,
            path: get(2).to_string(),
            size_bytes: num(get(3)).ok_or_else(|| bad("size_bytes", get(3)))?,
            bytes_received: num(get(4)).ok_or_else(|| bad("bytes_received", get(4)))?,
            status: if get(5).is_empty() { None } else { Some(num(get(5)).ok_or_else(|| bad("status", get(5)))?) },
            outcome: get(6).parse().map_err(|_| bad("outcome", get(6)))?,
            attempts: num(get(7)).ok_or_else(|| bad("attempts", get(7)))?,
            scheduled_s: req_f(8)?,
            start_s: req_f(9)?,
            connected_s: opt_f(10)?,
            first_byte_s: opt_f(11)?,
            done_s: opt_f(12)?,
        })
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(id: u64) -> RequestRecord {
        RequestRecord {
            id,
            client: 3,
            path: "/a,b\"c".into(),
            size_bytes: 1000,
            bytes_received: 1000,
            status: Some(200),
            outcome: RequestOutcome::Ok,
            attempts: 1,
            scheduled_s: 0.1,
            start_s: 0.1000016,
            connected_s: Some(0.2),
            first_byte_s: Some(0.3),
            done_s: Some(1.234_567_89),
        }
    }

    #[test]
    fn round_trip_and_atomic_rename() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("requests.csv");
        let mut w = RecordWriter::create(&path).unwrap();
        w.write(&sample(0)).unwrap();
        let mut failed = sample(1);
        failed.outcome = RequestOutcome::Failed;
        failed.status = None;
        failed.connected_s = None;
        failed.first_byte_s = None;
        failed.done_s = None;
        w.write(&failed).unwrap();
        assert!(!path.exists(), "final name appears only on finish");
        assert_eq!(w.finish().unwrap(), 2);
        let text = std::fs::read_to_string(&path).unwrap();
        let mut lines = text.lines();
        assert_eq!(lines.next().unwrap(), COLUMNS.join(","));
        assert_eq!(
            lines.next().unwrap(),
            "0,3,\"/a,b\"\"c\",1000,1000,200,ok,1,0.100000,0.100002,0.200000,0.300000,1.234568"
        );
        assert_eq!(lines.next().unwrap(), "1,3,\"/a,b\"\"c\",1000,1000,,failed,1,0.100000,0.100002,,,");
        let back: Vec<_> = read_records(&path).unwrap().collect::<Result<_, _>>().unwrap();
        assert_eq!(back.len(), 2);
        assert_eq!(back[0].done_s, Some(1.234568));
        assert_eq!(back[1].outcome, RequestOutcome::Failed);
        assert_eq!(back[1].status, None);
        assert_eq!(back[1].done_s, None);
    }

    #[test]
    fn phase_columns_at_the_end() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("requests.csv");
        let mut w = RecordWriter::create_with_phase_columns(&path).unwrap();
        w.write_in_phase(&sample(0), PhaseTag { phase: 1, multiplier: 1.2 }).unwrap();
        w.write(&sample(1)).unwrap();
        w.finish().unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<_> = text.lines().collect();
        assert_eq!(lines[0], format!("{},phase,load_multiplier", COLUMNS.join(",")));
        assert!(lines[1].ends_with(",1.234568,1,1.2"), "{}", lines[1]);
        assert!(lines[2].ends_with(",1.234568,,"), "{}", lines[2]);
        let back: Vec<_> = read_records(&path).unwrap().collect::<Result<_, _>>().unwrap();
        assert_eq!(
            back.iter().map(|r| (r.id, r.done_s)).collect::<Vec<_>>(),
            [(0, Some(1.234568)), (1, Some(1.234568))]
        );
        // Without a schedule nothing changes: 13 columns.
        let mut w = RecordWriter::create(&path).unwrap();
        w.write_in_phase(&sample(0), PhaseTag { phase: 1, multiplier: 1.2 }).unwrap();
        w.finish().unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text.lines().nth(1).unwrap().split(',').count(), COLUMNS.len() + 1, "the path has a comma");
        assert!(text.lines().nth(1).unwrap().ends_with(",1.234568"));
    }

    #[test]
    fn host_column_last() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("requests.csv");
        for (phase, want_header) in [
            (false, format!("{},host", COLUMNS.join(","))),
            (true, format!("{},phase,load_multiplier,host", COLUMNS.join(","))),
        ] {
            let mut w = RecordWriter::create_with_columns(&path, phase, true).unwrap();
            w.write_tagged(&sample(0), Some(PhaseTag { phase: 1, multiplier: 1.2 }), Some(3)).unwrap();
            w.write_tagged(&sample(1), None, None).unwrap();
            w.finish().unwrap();
            let text = std::fs::read_to_string(&path).unwrap();
            let lines: Vec<_> = text.lines().collect();
            assert_eq!(lines[0], want_header);
            assert!(lines[1].ends_with(if phase { ",1.234568,1,1.2,3" } else { ",1.234568,3" }), "{}", lines[1]);
            assert!(lines[2].ends_with(if phase { ",1.234568,,," } else { ",1.234568," }), "{}", lines[2]);
            let back: Vec<_> = read_records(&path).unwrap().collect::<Result<_, _>>().unwrap();
            assert_eq!(back.len(), 2);
        }
        std::fs::write(&path, format!("{},host,phase,load_multiplier\n", COLUMNS.join(","))).unwrap();
        assert!(read_records(&path).is_err(), "the host column goes last");
    }

    #[test]
    fn dropped_writer_leaves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("requests.csv");
        let mut w = RecordWriter::create(&path).unwrap();
        w.write(&sample(0)).unwrap();
        drop(w);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    #[test]
    fn reader_names_bad_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.csv");
        std::fs::write(
            &path,
            format!("{}\n0,1,/a,1,1,200,ok,1,0,0,0,0,0\n1,1,/a,1,1,200,maybe,1,0,0,0,0,0\n", COLUMNS.join(",")),
        )
        .unwrap();
        let rows: Vec<_> = read_records(&path).unwrap().collect();
        assert!(rows[0].is_ok());
        let e = rows[1].as_ref().unwrap_err().to_string();
        assert!(e.contains("line 3") && e.contains("outcome"), "{e}");
    }
}
