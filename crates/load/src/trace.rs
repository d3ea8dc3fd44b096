//! Reading request traces: our CSV, Common/Combined Log Format access logs and
//! the World Cup 1998 binary format, each as a streaming iterator of
//! [`TraceRecord`]s.
//!
//! Any of them may be gzip-compressed ([`open`] detects it). Every reader
//! holds at most one line (or one 20-byte record) plus a `BufReader` buffer
//! (and the decompressor's window) in memory, so a trace of any length streams in bounded
//! memory. Errors name the file, the line (or record) number and what was
//! expected; [`SkipBad`] turns errors into a count instead, for access logs in
//! the wild.
//!
//! Times are whatever the trace says (`time_s` of our CSV, Unix seconds for
//! access logs and WC98); the load generator replays relative to the first
//! record, so absolute and relative timestamps both work.

use std::fmt;
use std::fs::File;
use std::io::{self, BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

/// One request of a trace.
#[derive(Debug, Clone, PartialEq)]
pub struct TraceRecord {
    /// Arrival time in seconds (relative or absolute; only differences matter).
    pub time_s: f64,
    /// Request target, starting with `/`.
    pub path: String,
    /// Expected response body size in bytes (0 when the trace does not say).
    pub size_bytes: u64,
    /// Client the request came from, when the trace says.
    pub client: Option<u32>,
}

/// Where in the input an error happened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Position {
    /// 1-based line number of a text trace.
    Line(u64),
    /// 1-based record number of a binary trace.
    Record(u64),
}

impl fmt::Display for Position {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Position::Line(n) => write!(f, "line {n}"),
            Position::Record(n) => write!(f, "record {n}"),
        }
    }
}

/// A trace could not be read.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    #[error("{}: cannot read: {source}", file.display())]
    Io {
        file: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("{}: {position}: {message}", file.display())]
    Malformed { file: PathBuf, position: Position, message: String },
}

impl TraceError {
    /// The position of a malformed-input error (None for I/O errors).
    pub fn position(&self) -> Option<&Position> {
        match self {
            TraceError::Io { .. } => None,
            TraceError::Malformed { position, .. } => Some(position),
        }
    }
}

/// The trace formats we read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TraceFormat {
    /// `time_s,path,size_bytes[,client]` with that header.
    Csv,
    /// Common or Combined Log Format access log (Apache, nginx, NASA-HTTP).
    Clf,
    /// World Cup 1998 binary log: 20-byte big-endian records.
    Wc98,
}

impl std::str::FromStr for TraceFormat {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "csv" => Ok(TraceFormat::Csv),
            "clf" | "combined" | "common" => Ok(TraceFormat::Clf),
            "wc98" => Ok(TraceFormat::Wc98),
            _ => Err(format!("unknown trace format `{s}` (expected csv, clf or wc98)")),
        }
    }
}

/// A boxed stream of trace records.
pub type TraceIter = Box<dyn Iterator<Item = Result<TraceRecord, TraceError>> + Send>;

/// Guess the format from the file name, ignoring a `.gz` suffix: `*.csv` →
/// CSV, `wc_day*` / `*.bin` → WC98, anything else → CLF.
pub fn guess_format(path: &Path) -> TraceFormat {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    let name = name.strip_suffix(".gz").unwrap_or(name);
    if name.ends_with(".csv") {
        TraceFormat::Csv
    } else if name.starts_with("wc_day") || name.ends_with(".bin") {
        TraceFormat::Wc98
    } else {
        TraceFormat::Clf
    }
}

/// Open a trace file in the given format (guessed from the name when None).
/// A gzip-compressed file (recognised by its magic bytes, whatever its name;
/// the WC98 logs are distributed as `.gz`) is decompressed as it streams.
pub fn open(path: &Path, format: Option<TraceFormat>) -> Result<TraceIter, TraceError> {
    let io_err = |source| TraceError::Io { file: path.to_path_buf(), source };
    let file = File::open(path).map_err(io_err)?;
    let mut file = BufReader::with_capacity(1 << 16, file);
    let gzip = file.fill_buf().map_err(io_err)?.starts_with(&[0x1f, 0x8b]);
    let reader: Box<dyn BufRead + Send> = if gzip {
        // Multi-member: concatenated gzip files are one stream (as `zcat`).
        Box::new(BufReader::with_capacity(1 << 16, flate2::bufread::MultiGzDecoder::new(file)))
    } else {
        Box::new(file)
    };
    Ok(match format.unwrap_or_else(|| guess_format(path)) {
        TraceFormat::Csv => Box::new(CsvTrace::new(reader, path)?),
        TraceFormat::Clf => Box::new(ClfTrace::new(reader, path)),
        TraceFormat::Wc98 => Box::new(Wc98Trace::new(reader, path)),
    })
}

/// Longest line accepted in a text trace; a longer one is an error, so one bad
/// line cannot make the reader buffer an unbounded amount.
pub const MAX_LINE_BYTES: usize = 64 * 1024;

/// Reads lines with a length limit, counting them from 1.
struct Lines<R> {
    reader: R,
    file: PathBuf,
    line_no: u64,
    buf: Vec<u8>,
}

impl<R: BufRead> Lines<R> {
    fn new(reader: R, file: &Path) -> Self {
        Lines { reader, file: file.to_path_buf(), line_no: 0, buf: Vec::with_capacity(256) }
    }

    fn malformed(&self, message: impl Into<String>) -> TraceError {
        TraceError::Malformed {
            file: self.file.clone(),
            position: Position::Line(self.line_no),
            message: message.into(),
        }
    }

    /// Parses the next non-blank line; None at end of input.
    fn next_record(
        &mut self,
        parse: impl FnOnce(&str) -> Result<TraceRecord, String>,
    ) -> Option<Result<TraceRecord, TraceError>> {
        loop {
            let line = match self.next_line()? {
                Ok(l) => l,
                Err(e) => return Some(Err(e)),
            };
            if line.trim().is_empty() {
                continue;
            }
            let parsed = parse(line);
            return Some(parsed.map_err(|m| self.malformed(m)));
        }
    }

    /// The next line without its line ending; None at end of input.
    fn next_line(&mut self) -> Option<Result<&str, TraceError>> {
        self.buf.clear();
        self.line_no += 1;
        let limit = (MAX_LINE_BYTES + 2) as u64;
        match (&mut self.reader).take(limit).read_until(b'\n', &mut self.buf) {
            Ok(0) => return None,
            Ok(_) => {}
            Err(source) => return Some(Err(TraceError::Io { file: self.file.clone(), source })),
        }
        if self.buf.last() == Some(&b'\n') {
            self.buf.pop();
            if self.buf.last() == Some(&b'\r') {
                self.buf.pop();
            }
        } else if self.buf.len() as u64 >= limit {
            // Skip the rest of the over-long line so a caller using --skip-bad
            // resumes at the next one.
            let mut rest = Vec::new();
            let _ = self.reader.read_until(b'\n', &mut rest);
            return Some(Err(self.malformed(format!("line longer than {MAX_LINE_BYTES} bytes"))));
        }
        match std::str::from_utf8(&self.buf) {
            Ok(s) => Some(Ok(s)),
            Err(_) => Some(Err(self.malformed("line is not valid UTF-8"))),
        }
    }
}

/// Our CSV trace: header `time_s,path,size_bytes[,client]`.
pub struct CsvTrace<R> {
    lines: Lines<R>,
    has_client: bool,
}

impl<R: BufRead> CsvTrace<R> {
    /// Reads and checks the header line.
    pub fn new(reader: R, file: &Path) -> Result<Self, TraceError> {
        let mut lines = Lines::new(reader, file);
        let header = match lines.next_line() {
            None => return Err(lines.malformed("empty file; expected header `time_s,path,size_bytes[,client]`")),
            Some(r) => r?.trim().to_string(),
        };
        let has_client = match header.as_str() {
            "time_s,path,size_bytes" => false,
            "time_s,path,size_bytes,client" => true,
            other => {
                return Err(
                    lines.malformed(format!("expected header `time_s,path,size_bytes[,client]`, found `{other}`"))
                )
            }
        };
        Ok(CsvTrace { lines, has_client })
    }
}

/// Parses one data line of our CSV.
fn parse_csv_line(line: &str, has_client: bool) -> Result<TraceRecord, String> {
    let mut fields = line.split(',');
    let want = if has_client { 4 } else { 3 };
    let n = line.split(',').count();
    if n != want {
        return Err(format!("expected {want} fields, found {n}"));
    }
    let time = fields.next().unwrap_or("");
    let time_s: f64 = time.parse().map_err(|_| format!("time_s: expected a number of seconds, found `{time}`"))?;
    if !time_s.is_finite() || time_s < 0.0 {
        return Err(format!("time_s: expected a finite number ≥ 0, found `{time}`"));
    }
    let path = fields.next().unwrap_or("").to_string();
    if !path.starts_with('/') {
        return Err(format!("path: expected a path starting with `/`, found `{path}`"));
    }
    let size = fields.next().unwrap_or("");
    let size_bytes: u64 =
        size.parse().map_err(|_| format!("size_bytes: expected an unsigned integer, found `{size}`"))?;
    let client = if has_client {
        let c = fields.next().unwrap_or("");
        if c.is_empty() {
            None
        } else {
            Some(
                c.parse::<u32>()
                    .map_err(|_| format!("client: expected an unsigned 32-bit integer or nothing, found `{c}`"))?,
            )
        }
    } else {
        None
    };
    Ok(TraceRecord { time_s, path, size_bytes, client })
}

impl<R: BufRead> Iterator for CsvTrace<R> {
    type Item = Result<TraceRecord, TraceError>;
    fn next(&mut self) -> Option<Self::Item> {
        let has_client = self.has_client;
        self.lines.next_record(|line| parse_csv_line(line, has_client))
    }
}

/// Common / Combined Log Format:
/// `host ident user [dd/Mon/yyyy:HH:MM:SS +zzzz] "METHOD target PROTO" status bytes ["referer" "agent"]`.
///
/// `bytes` of `-` means no body (size 0). The client id is a stable 32-bit
/// FNV-1a hash of the host field (no table of hosts, so memory stays bounded).
/// Lines whose request has no target (e.g. `"-"`) are malformed.
pub struct ClfTrace<R> {
    lines: Lines<R>,
}

impl<R: BufRead> ClfTrace<R> {
    pub fn new(reader: R, file: &Path) -> Self {
        ClfTrace { lines: Lines::new(reader, file) }
    }
}

impl<R: BufRead> Iterator for ClfTrace<R> {
    type Item = Result<TraceRecord, TraceError>;
    fn next(&mut self) -> Option<Self::Item> {
        self.lines.next_record(parse_clf_line)
    }
}

/// Stable 32-bit FNV-1a hash (client ids from host names).
pub fn fnv1a32(bytes: &[u8]) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    for b in bytes {
        h ^= u32::from(*b);
        h = h.wrapping_mul(0x0100_0193);
    }
    h
}

/// Parse one CLF/Combined line.
pub fn parse_clf_line(line: &str) -> Result<TraceRecord, String> {
    let host_end = line.find(' ').ok_or("expected `host ident user [time] \"request\" status bytes`")?;
    let host = &line[..host_end];
    let open = line.find('[').ok_or("expected a `[dd/Mon/yyyy:HH:MM:SS +zzzz]` timestamp")?;
    let close = line[open..].find(']').map(|i| i + open).ok_or("expected `]` closing the timestamp")?;
    let time_s = parse_clf_time(&line[open + 1..close])?;
    let rest = &line[close + 1..];
    let q1 = rest.find('"').ok_or("expected a quoted request after the timestamp")?;
    let q2 = rest[q1 + 1..].find('"').map(|i| i + q1 + 1).ok_or("expected `\"` closing the request")?;
    let request = &rest[q1 + 1..q2];
    let mut parts = request.split_whitespace();
    let _method = parts.next().ok_or("empty request line")?;
    let target = parts.next().ok_or_else(|| format!("request `{request}` has no target"))?;
    // Absolute-form targets (proxy logs) keep only their path.
    let path = if let Some(after) = target.strip_prefix("http://").or_else(|| target.strip_prefix("https://")) {
        match after.find('/') {
            Some(i) => &after[i..],
            None => "/",
        }
    } else {
        target
    };
    if !path.starts_with('/') {
        return Err(format!("request target `{target}` does not start with `/`"));
    }
    let mut tail = rest[q2 + 1..].split_whitespace();
    let status = tail.next().ok_or("expected a status code after the request")?;
    if status.len() != 3 || status.parse::<u16>().is_err() {
        return Err(format!("status: expected a 3-digit code, found `{status}`"));
    }
    let bytes = tail.next().ok_or("expected a byte count after the status")?;
    let size_bytes = if bytes == "-" {
        0
    } else {
        bytes.parse().map_err(|_| format!("bytes: expected an unsigned integer or `-`, found `{bytes}`"))?
    };
    Ok(TraceRecord { time_s, path: path.to_string(), size_bytes, client: Some(fnv1a32(host.as_bytes())) })
}

/// `dd/Mon/yyyy:HH:MM:SS +zzzz` → Unix seconds.
fn parse_clf_time(s: &str) -> Result<f64, String> {
    let bad = || format!("timestamp: expected `dd/Mon/yyyy:HH:MM:SS +zzzz`, found `{s}`");
    let b = s.as_bytes();
    if b.len() < 20 || b[2] != b'/' || b[6] != b'/' || b[11] != b':' || b[14] != b':' || b[17] != b':' {
        return Err(bad());
    }
    let num = |r: std::ops::Range<usize>| -> Result<i64, String> {
        s.get(r).and_then(|t| t.parse::<i64>().ok()).ok_or_else(bad)
    };
    let day = num(0..2)?;
    let month = match &s[3..6] {
        "Jan" => 1,
        "Feb" => 2,
        "Mar" => 3,
        "Apr" => 4,
        "May" => 5,
        "Jun" => 6,
        "Jul" => 7,
        "Aug" => 8,
        "Sep" => 9,
        "Oct" => 10,
        "Nov" => 11,
        "Dec" => 12,
        _ => return Err(bad()),
    };
    let year = num(7..11)?;
    let (hh, mm, ss) = (num(12..14)?, num(15..17)?, num(18..20)?);
    if !(1..=31).contains(&day) || hh > 23 || mm > 59 || ss > 60 {
        return Err(bad());
    }
    let zone = s[20..].trim();
    let offset_s = if zone.is_empty() {
        0
    } else {
        let zb = zone.as_bytes();
        if zb.len() != 5 || !(zb[0] == b'+' || zb[0] == b'-') {
            return Err(bad());
        }
        // `get`: five bytes need not be five characters (a multi-byte one would split).
        let zh: i64 = zone.get(1..3).and_then(|t| t.parse().ok()).ok_or_else(bad)?;
        let zm: i64 = zone.get(3..5).and_then(|t| t.parse().ok()).ok_or_else(bad)?;
        let off = zh * 3600 + zm * 60;
        if zb[0] == b'-' {
            -off
        } else {
            off
        }
    };
    let days = days_from_civil(year, month, day);
    Ok((days * 86_400 + hh * 3600 + mm * 60 + ss - offset_s) as f64)
}

/// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Size of one WC98 binary record.
pub const WC98_RECORD_BYTES: usize = 20;

/// World Cup 1998 binary log (the `wc_day*` files, after gunzip): 20-byte
/// big-endian records `timestamp u32, clientID u32, objectID u32, size u32,
/// method u8, status u8, type u8, server u8`. A size of 0xFFFFFFFF means "no
/// body" (size 0). The trace has no URLs, so the path is `/o/<objectID>`.
pub struct Wc98Trace<R> {
    reader: R,
    file: PathBuf,
    record_no: u64,
}

impl<R: Read> Wc98Trace<R> {
    pub fn new(reader: R, file: &Path) -> Self {
        Wc98Trace { reader, file: file.to_path_buf(), record_no: 0 }
    }
}

impl<R: Read> Iterator for Wc98Trace<R> {
    type Item = Result<TraceRecord, TraceError>;
    fn next(&mut self) -> Option<Self::Item> {
        let mut rec = [0u8; WC98_RECORD_BYTES];
        let mut got = 0;
        while got < WC98_RECORD_BYTES {
            match self.reader.read(&mut rec[got..]) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(source) => return Some(Err(TraceError::Io { file: self.file.clone(), source })),
            }
        }
        if got == 0 {
            return None;
        }
        self.record_no += 1;
        if got < WC98_RECORD_BYTES {
            return Some(Err(TraceError::Malformed {
                file: self.file.clone(),
                position: Position::Record(self.record_no),
                message: format!("truncated record: expected {WC98_RECORD_BYTES} bytes, found {got} at end of file"),
            }));
        }
        let word = |i: usize| u32::from_be_bytes([rec[i], rec[i + 1], rec[i + 2], rec[i + 3]]);
        let size = word(12);
        Some(Ok(TraceRecord {
            time_s: f64::from(word(0)),
            path: format!("/o/{}", word(8)),
            size_bytes: if size == u32::MAX { 0 } else { u64::from(size) },
            client: Some(word(4)),
        }))
    }
}

/// Encode one WC98 record (for tests and for converting traces).
pub fn wc98_encode(timestamp: u32, client: u32, object: u32, size: u32, status: u8) -> [u8; WC98_RECORD_BYTES] {
    let mut r = [0u8; WC98_RECORD_BYTES];
    r[0..4].copy_from_slice(&timestamp.to_be_bytes());
    r[4..8].copy_from_slice(&client.to_be_bytes());
    r[8..12].copy_from_slice(&object.to_be_bytes());
    r[12..16].copy_from_slice(&size.to_be_bytes());
    r[16] = 0; // GET
    r[17] = status;
    r
}

/// Wraps a trace so malformed records are counted and skipped (`--skip-bad`)
/// instead of ending the read. I/O errors still end it.
pub struct SkipBad<I> {
    inner: I,
    skipped: std::sync::Arc<std::sync::atomic::AtomicU64>,
    first_error: std::sync::Arc<std::sync::Mutex<Option<String>>>,
}

/// Handle to read how many records a [`SkipBad`] skipped, after or during the read.
#[derive(Clone, Default)]
pub struct SkipCount {
    skipped: std::sync::Arc<std::sync::atomic::AtomicU64>,
    first_error: std::sync::Arc<std::sync::Mutex<Option<String>>>,
}

impl SkipCount {
    pub fn skipped(&self) -> u64 {
        self.skipped.load(std::sync::atomic::Ordering::Relaxed)
    }
    /// The first skipped record's error message, to show the user an example.
    pub fn first_error(&self) -> Option<String> {
        self.first_error.lock().ok().and_then(|g| g.clone())
    }
}

impl<I> SkipBad<I> {
    pub fn new(inner: I) -> (Self, SkipCount) {
        let count = SkipCount::default();
        (SkipBad { inner, skipped: count.skipped.clone(), first_error: count.first_error.clone() }, count)
    }
}

impl<I: Iterator<Item = Result<TraceRecord, TraceError>>> Iterator for SkipBad<I> {
    type Item = Result<TraceRecord, TraceError>;
    fn next(&mut self) -> Option<Self::Item> {
        loop {
            match self.inner.next()? {
                Err(e @ TraceError::Malformed { .. }) => {
                    self.skipped.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    if let Ok(mut g) = self.first_error.lock() {
                        if g.is_none() {
                            *g = Some(e.to_string());
                        }
                    }
                }
                other => return Some(other),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn csv(text: &str) -> Result<Vec<TraceRecord>, TraceError> {
        CsvTrace::new(text.as_bytes(), Path::new("t.csv"))?.collect()
    }

    fn line_of(e: &TraceError) -> u64 {
        match e.position() {
            Some(Position::Line(n)) => *n,
            other => panic!("expected a line position, got {other:?} ({e})"),
        }
    }

    #[test]
    fn csv_good() {
        let r = csv("time_s,path,size_bytes\n0.5,/a.html,100\n\n1.25,/b,0\r\n").unwrap();
        assert_eq!(r.len(), 2);
        assert_eq!(r[0].time_s, 0.5);
        assert_eq!(r[0].path, "/a.html");
        assert_eq!(r[0].size_bytes, 100);
        assert_eq!(r[0].client, None);
        assert_eq!(r[1].time_s, 1.25);
        let r = csv("time_s,path,size_bytes,client\n0,/a,1,7\n1,/b,2,\n").unwrap();
        assert_eq!(r[0].client, Some(7));
        assert_eq!(r[1].client, None);
    }

    #[test]
    fn csv_malformed_positions() {
        let cases: &[(&str, u64, &str)] = &[
            ("", 1, "empty file"),
            ("time,path,size\n", 1, "expected header"),
            ("time_s,path,size_bytes\n0,/a,1\nx,/b,2\n", 3, "time_s"),
            ("time_s,path,size_bytes\n0,/a,1\n1,b,2\n", 3, "path"),
            ("time_s,path,size_bytes\n0,/a,1\n1,/b,-2\n", 3, "size_bytes"),
            ("time_s,path,size_bytes\n0,/a\n", 2, "expected 3 fields"),
            ("time_s,path,size_bytes,client\n0,/a,1,x\n", 2, "client"),
            ("time_s,path,size_bytes\n-1,/a,1\n", 2, "time_s"),
            ("time_s,path,size_bytes\n0,/a,1\n\n\nNaN,/a,1\n", 5, "time_s"),
        ];
        for (text, line, what) in cases {
            let e = csv(text).expect_err(text);
            assert_eq!(line_of(&e), *line, "{text:?}: {e}");
            let msg = e.to_string();
            assert!(msg.contains(what), "{msg:?} should mention {what}");
            assert!(msg.starts_with("t.csv: line"), "{msg}");
        }
    }

    #[test]
    fn csv_overlong_line() {
        let text = format!("time_s,path,size_bytes\n0,/{},1\n1,/b,2\n", "x".repeat(MAX_LINE_BYTES + 10));
        let mut it = CsvTrace::new(text.as_bytes(), Path::new("t.csv")).unwrap();
        let e = it.next().unwrap().unwrap_err();
        assert_eq!(line_of(&e), 2);
        // The reader recovers at the next line.
        assert_eq!(it.next().unwrap().unwrap().path, "/b");
    }

    const NASA: &str = r#"199.72.81.55 - - [01/Jul/1995:00:00:01 -0400] "GET /history/apollo/ HTTP/1.0" 200 6245
unicomp6.unicomp.net - - [01/Jul/1995:00:00:06 -0400] "GET /shuttle/countdown/ HTTP/1.0" 200 3985
burger.letters.com - - [01/Jul/1995:00:00:12 -0400] "GET /images/NASA-logosmall.gif HTTP/1.0" 304 0
127.0.0.1 - frank [10/Oct/2000:13:55:36 -0700] "GET /apache_pb.gif HTTP/1.0" 200 2326 "http://www.example.com/start.html" "Mozilla/4.08 [en] (Win98; I ;Nav)"
10.0.0.1 - - [10/Oct/2000:13:55:37 +0000] "HEAD http://example.com/x?y=1 HTTP/1.1" 200 -
"#;

    #[test]
    fn clf_good() {
        let r: Vec<_> = ClfTrace::new(NASA.as_bytes(), Path::new("access.log")).collect::<Result<_, _>>().unwrap();
        assert_eq!(r.len(), 5);
        // 1995-07-01 04:00:01 UTC
        assert_eq!(r[0].time_s, 804_571_201.0);
        assert_eq!(r[1].time_s - r[0].time_s, 5.0);
        assert_eq!(r[0].path, "/history/apollo/");
        assert_eq!(r[0].size_bytes, 6245);
        assert_eq!(r[0].client, Some(fnv1a32(b"199.72.81.55")));
        // 2000-10-10 20:55:36 UTC
        assert_eq!(r[3].time_s, 971_211_336.0);
        assert_eq!(r[3].path, "/apache_pb.gif");
        assert_eq!(r[4].path, "/x?y=1");
        assert_eq!(r[4].size_bytes, 0);
    }

    #[test]
    fn clf_malformed_positions() {
        let good = NASA.lines().next().unwrap();
        let bad_lines: &[(&str, &str)] = &[
            (r#"host - - 01/Jul/1995:00:00:01 -0400 "GET / HTTP/1.0" 200 1"#, "timestamp"),
            (r#"host - - [01/Jux/1995:00:00:01 -0400] "GET / HTTP/1.0" 200 1"#, "timestamp"),
            (r#"host - - [01/Jul/1995:00:00:01 -0400] "-" 400 1"#, "no target"),
            (r#"host - - [01/Jul/1995:00:00:01 -0400] "GET / HTTP/1.0" 2x0 1"#, "status"),
            (r#"host - - [01/Jul/1995:00:00:01 -0400] "GET / HTTP/1.0" 200 abc"#, "bytes"),
            (r#"host - - [01/Jul/1995:00:00:01 -0400] "GET / HTTP/1.0"#, "closing the request"),
            (r#"garbage"#, "expected"),
        ];
        for (bad, what) in bad_lines {
            let text = format!("{good}\n{good}\n{bad}\n{good}\n");
            let mut it = ClfTrace::new(text.as_bytes(), Path::new("access.log"));
            assert!(it.next().unwrap().is_ok());
            assert!(it.next().unwrap().is_ok());
            let e = it.next().unwrap().unwrap_err();
            assert_eq!(line_of(&e), 3, "{bad}: {e}");
            assert!(e.to_string().contains(what), "{e} should mention {what}");
            assert!(e.to_string().starts_with("access.log: line 3:"), "{e}");
            assert!(it.next().unwrap().is_ok(), "reader continues after a bad line");
        }
    }

    #[test]
    fn skip_bad_counts() {
        let good = NASA.lines().next().unwrap();
        let text = format!("{good}\nbad line\n{good}\nalso bad\n");
        let (it, count) = SkipBad::new(ClfTrace::new(text.as_bytes(), Path::new("a.log")));
        let r: Vec<_> = it.collect::<Result<_, _>>().unwrap();
        assert_eq!(r.len(), 2);
        assert_eq!(count.skipped(), 2);
        assert!(count.first_error().unwrap().contains("line 2"));
    }

    #[test]
    fn wc98_good_and_truncated() {
        let mut bytes = Vec::new();
        bytes.extend_from_slice(&wc98_encode(893_964_617, 1, 100, 4096, 200));
        bytes.extend_from_slice(&wc98_encode(893_964_618, 2, 101, u32::MAX, 4));
        let r: Vec<_> = Wc98Trace::new(&bytes[..], Path::new("wc_day1_1")).collect::<Result<_, _>>().unwrap();
        assert_eq!(r.len(), 2);
        assert_eq!(
            r[0],
            TraceRecord { time_s: 893_964_617.0, path: "/o/100".into(), size_bytes: 4096, client: Some(1) }
        );
        assert_eq!(r[1].size_bytes, 0);
        bytes.extend_from_slice(&[1, 2, 3, 4, 5, 6, 7]);
        let mut it = Wc98Trace::new(&bytes[..], Path::new("wc_day1_1"));
        assert!(it.next().unwrap().is_ok());
        assert!(it.next().unwrap().is_ok());
        let e = it.next().unwrap().unwrap_err();
        assert_eq!(e.position(), Some(&Position::Record(3)));
        assert!(e.to_string().contains("wc_day1_1: record 3: truncated record"), "{e}");
        assert!(e.to_string().contains("found 7"), "{e}");
        assert!(it.next().is_none());
    }

    #[test]
    fn open_guesses_and_names_missing_file() {
        assert_eq!(guess_format(Path::new("x/trace.csv")), TraceFormat::Csv);
        assert_eq!(guess_format(Path::new("wc_day46_1")), TraceFormat::Wc98);
        assert_eq!(guess_format(Path::new("access_log_Jul95")), TraceFormat::Clf);
        assert_eq!(guess_format(Path::new("wc_day46_1.gz")), TraceFormat::Wc98);
        assert_eq!(guess_format(Path::new("trace.csv.gz")), TraceFormat::Csv);
        let e = open(Path::new("/nonexistent/t.csv"), None).err().unwrap();
        assert!(e.to_string().contains("/nonexistent/t.csv"));
    }

    /// The WC98 logs come gzip-compressed: `open` decompresses by content,
    /// across concatenated members, and a truncated record inside the
    /// compressed stream is still reported by record number.
    #[test]
    fn gzip_wc98_is_read_and_errors_keep_positions() {
        use std::io::Write;
        let gz = |bytes: &[u8]| {
            let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            e.write_all(bytes).unwrap();
            e.finish().unwrap()
        };
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("wc_day46_1.gz");
        let mut file = gz(&wc98_encode(893_964_617, 7, 100, 4096, 200));
        // A second gzip member, as `cat a.gz b.gz` makes.
        file.extend(gz(&wc98_encode(893_964_618, 8, 101, 10, 200)));
        std::fs::write(&path, &file).unwrap();
        let r: Vec<_> = open(&path, None).unwrap().collect::<Result<_, _>>().unwrap();
        assert_eq!(
            r,
            vec![
                TraceRecord { time_s: 893_964_617.0, path: "/o/100".into(), size_bytes: 4096, client: Some(7) },
                TraceRecord { time_s: 893_964_618.0, path: "/o/101".into(), size_bytes: 10, client: Some(8) },
            ]
        );
        let mut bytes = wc98_encode(893_964_617, 7, 100, 4096, 200).to_vec();
        bytes.extend_from_slice(&[1, 2, 3]);
        std::fs::write(&path, gz(&bytes)).unwrap();
        let mut it = open(&path, None).unwrap();
        assert!(it.next().unwrap().is_ok());
        let e = it.next().unwrap().unwrap_err();
        assert_eq!(e.position(), Some(&Position::Record(2)), "{e}");
        // A corrupt compressed stream is an I/O error naming the file, not garbage records.
        let mut bad = gz(&wc98_encode(893_964_617, 7, 100, 4096, 200));
        let n = bad.len();
        bad[n / 2] ^= 0xff;
        bad[n / 2 + 1] ^= 0xff;
        std::fs::write(&path, &bad).unwrap();
        let res: Result<Vec<_>, _> = open(&path, None).unwrap().collect();
        let e = res.unwrap_err();
        assert!(e.to_string().contains("wc_day46_1.gz"), "{e}");
        // An uncompressed CSV with a .gz-less name still reads as before.
        let csv = dir.path().join("t.csv");
        std::fs::write(&csv, "time_s,path,size_bytes\n0.5,/a,3\n").unwrap();
        assert_eq!(open(&csv, None).unwrap().count(), 1);
    }
}
