//! `transactions.csv`, one row per scheduled transaction of `shortfirst load-pg`, whatever
//! became of it, written through a temporary file renamed when the run ends.
//!
//! Columns: `id` (the arrival's number, from 0), `client` (the connection that ran it,
//! empty if none did), `scheduled_s`, `start_s` (sent; empty if never sent), `done_s`
//! (epoch seconds with microseconds; `done_s` − `scheduled_s` is the latency a user saw),
//! `outcome` ([`Outcome`]) and `sqlstate` (the error's code, else empty).

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

/// What became of a scheduled transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Every statement completed.
    Ok,
    /// A statement was answered with an error (the row has its SQLSTATE); the session goes on.
    Error,
    /// Not done by its scheduled start + the timeout: the client sent a CancelRequest and
    /// moved on.
    Timeout,
    /// Already later than the timeout when a connection was free: never sent.
    Skipped,
    /// Never sent: the backlog of arrivals waiting for a connection was full, or no
    /// connection was left to take it (every one broke and could not be reopened).
    Dropped,
    /// The connection broke under it; the client reconnects.
    Lost,
}

impl Outcome {
    pub const ALL: [Outcome; 6] =
        [Outcome::Ok, Outcome::Error, Outcome::Timeout, Outcome::Skipped, Outcome::Dropped, Outcome::Lost];

    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::Error => "error",
            Outcome::Timeout => "timeout",
            Outcome::Skipped => "skipped",
            Outcome::Dropped => "dropped",
            Outcome::Lost => "lost",
        }
    }
}

/// One row of `transactions.csv` (times in epoch seconds).
#[derive(Debug, Clone, PartialEq)]
pub struct TxnRow {
    pub id: u64,
    pub client: Option<u32>,
    pub scheduled_s: f64,
    pub start_s: Option<f64>,
    pub done_s: f64,
    pub outcome: Outcome,
    pub sqlstate: Option<String>,
}

pub const HEADER: &str = "id,client,scheduled_s,start_s,done_s,outcome,sqlstate";

/// Writes rows to `PATH.tmp`, renamed to `PATH` by [`finish`](Self::finish); dropped
/// unfinished, it removes the temporary file.
pub struct TxnWriter {
    out: Option<BufWriter<File>>,
    tmp: PathBuf,
    path: PathBuf,
}

impl TxnWriter {
    pub fn create(path: &Path) -> io::Result<TxnWriter> {
        let mut tmp = path.as_os_str().to_owned();
        tmp.push(".tmp");
        let tmp = PathBuf::from(tmp);
        let mut out = BufWriter::with_capacity(1 << 16, File::create(&tmp)?);
        writeln!(out, "{HEADER}")?;
        Ok(TxnWriter { out: Some(out), tmp, path: path.to_path_buf() })
    }

    pub fn write(&mut self, r: &TxnRow) -> io::Result<()> {
        let out = self.out.as_mut().expect("write after finish");
        let client = r.client.map(|c| c.to_string()).unwrap_or_default();
        let start = r.start_s.map(|s| format!("{s:.6}")).unwrap_or_default();
        let state = r.sqlstate.as_deref().unwrap_or_default();
        writeln!(out, "{},{client},{:.6},{start},{:.6},{},{state}", r.id, r.scheduled_s, r.done_s, r.outcome.as_str())?;
        Ok(())
    }

    /// Flushes, syncs and renames the file into place.
    pub fn finish(mut self) -> io::Result<PathBuf> {
        let out = self.out.take().expect("finish twice");
        let file = out.into_inner().map_err(|e| e.into_error())?;
        file.sync_all()?;
        std::fs::rename(&self.tmp, &self.path)?;
        Ok(self.path.clone())
    }
}

impl Drop for TxnWriter {
    fn drop(&mut self) {
        if self.out.take().is_some() {
            let _ = std::fs::remove_file(&self.tmp);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_land_only_when_finished() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("transactions.csv");
        let mut w = TxnWriter::create(&path).unwrap();
        w.write(&TxnRow {
            id: 3,
            client: Some(1),
            scheduled_s: 10.0,
            start_s: Some(10.000_25),
            done_s: 10.5,
            outcome: Outcome::Error,
            sqlstate: Some("53400".into()),
        })
        .unwrap();
        w.write(&TxnRow {
            id: 4,
            client: None,
            scheduled_s: 11.0,
            start_s: None,
            done_s: 16.0,
            outcome: Outcome::Skipped,
            sqlstate: None,
        })
        .unwrap();
        assert!(!path.exists());
        w.finish().unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(
            text,
            format!("{HEADER}\n3,1,10.000000,10.000250,10.500000,error,53400\n4,,11.000000,,16.000000,skipped,\n")
        );
    }

    #[test]
    fn an_unfinished_file_is_removed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("transactions.csv");
        drop(TxnWriter::create(&path).unwrap());
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }
}
