//! Body bytes received per fixed time bucket (`received.csv`): what the
//! clients actually got, and when, measured as each read returns rather than
//! estimated from a request's first-byte and done times.
//!
//! Columns: `t_s,bytes` — the start of the bucket in seconds since the run's
//! start (the origin of `requests.csv`'s times), and the response-body bytes
//! (after de-chunking; headers not counted, as in `bytes_received`) that
//! reads returning in `[t_s, t_s + BUCKET)` delivered, over all connections.
//! A read at `t` goes to the bucket `floor(t / BUCKET)`. Rows are dense, one
//! per bucket from 0 to the bucket holding the run's end (after the drain),
//! zeros included, so the bucket width is the spacing of `t_s`.
//!
//! Every attempt's body bytes count: with `--abort-after` and `--retries`,
//! the file's total exceeds the sum of `requests.csv`'s `bytes_received`
//! (the last attempt's) by the bytes of the attempts that were given up.
//!
//! Cost per read: one clock read and one relaxed atomic add, no lock and no
//! allocation. The buckets are allocated lazily in chunks of
//! [`CHUNK_BUCKETS`] (an allocation once per chunk per run, from the read
//! that first reaches it), so memory follows the run's length; at most
//! [`MAX_BUCKETS`] exist. Bytes received later than that (beyond
//! [`MAX_BUCKETS`] × [`BUCKET_MS`] ms, about 28 hours) go to the last bucket,
//! whose row then stands for everything from its start on.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Width of a bucket, in milliseconds. 100 ms: fine enough that a
/// measurement window's edges cost little (a window cut inside a bucket is
/// shared pro rata, so its error is at most one bucket's bytes misplaced by a
/// fraction of 100 ms — under 0.1 % of a 130 s window at any rate), well
/// below the lab's 1 s series and health samples, and coarse enough that a
/// 10-minute run is 6,000 rows (about 80 KB).
pub const BUCKET_MS: u64 = 100;
/// Most buckets a run keeps: 10⁶ × 100 ms ≈ 27.8 hours.
pub const MAX_BUCKETS: usize = 1_000_000;
/// Buckets allocated together (32 KiB, 409.6 s).
pub const CHUNK_BUCKETS: usize = 4096;
const CHUNKS: usize = MAX_BUCKETS.div_ceil(CHUNK_BUCKETS);

/// The bucket of a read `offset` after the run's start: floor(offset /
/// [`BUCKET_MS`]), at most the last one ([`MAX_BUCKETS`] − 1).
pub fn bucket_index(offset: Duration) -> usize {
    let i = offset.as_nanos() / (u128::from(BUCKET_MS) * 1_000_000);
    usize::try_from(i).unwrap_or(usize::MAX).min(MAX_BUCKETS - 1)
}

/// A `received.csv` that could not be written.
#[derive(Debug, thiserror::Error)]
#[error("{}: {source}", path.display())]
pub struct ReceivedError {
    pub path: PathBuf,
    pub source: io::Error,
}

/// The run's byte counts per bucket, shared by every worker.
#[derive(Debug)]
pub struct ReceivedBytes {
    start: Instant,
    chunks: Box<[OnceLock<Box<[AtomicU64]>>]>,
}

impl ReceivedBytes {
    /// Buckets counted from `start` (reads before it go to the first).
    pub fn new(start: Instant) -> ReceivedBytes {
        ReceivedBytes { start, chunks: (0..CHUNKS).map(|_| OnceLock::new()).collect() }
    }

    /// Counts `bytes` received by a read that returned at `at`.
    pub fn add(&self, at: Instant, bytes: u64) {
        if bytes == 0 {
            return;
        }
        let i = bucket_index(at.saturating_duration_since(self.start));
        let chunk =
            self.chunks[i / CHUNK_BUCKETS].get_or_init(|| (0..CHUNK_BUCKETS).map(|_| AtomicU64::new(0)).collect());
        chunk[i % CHUNK_BUCKETS].fetch_add(bytes, Ordering::Relaxed);
    }

    /// Bytes in bucket `i` so far.
    pub fn bucket_bytes(&self, i: usize) -> u64 {
        self.chunks
            .get(i / CHUNK_BUCKETS)
            .and_then(|c| c.get())
            .map_or(0, |c| c[i % CHUNK_BUCKETS].load(Ordering::Relaxed))
    }

    /// Bytes in every bucket so far.
    pub fn total_bytes(&self) -> u64 {
        self.chunks.iter().filter_map(|c| c.get()).flat_map(|c| c.iter()).map(|b| b.load(Ordering::Relaxed)).sum()
    }

    /// The last bucket holding bytes, if any.
    fn last_with_bytes(&self) -> Option<usize> {
        self.chunks.iter().enumerate().rev().find_map(|(c, chunk)| {
            let counts = chunk.get()?;
            counts.iter().rposition(|b| b.load(Ordering::Relaxed) > 0).map(|j| c * CHUNK_BUCKETS + j)
        })
    }

    /// Writes `received.csv` at `path`: one row per bucket from the first to
    /// the one holding `end` (or the last holding bytes, if later), through
    /// `<path>.tmp` renamed onto `path`, so a crash leaves no file that looks
    /// complete.
    pub fn write_csv(&self, path: &Path, end: Instant) -> Result<(), ReceivedError> {
        let last = bucket_index(end.saturating_duration_since(self.start)).max(self.last_with_bytes().unwrap_or(0));
        let mut tmp = path.as_os_str().to_owned();
        tmp.push(".tmp");
        let tmp = PathBuf::from(tmp);
        let write = || -> io::Result<()> {
            let mut w = BufWriter::new(File::create(&tmp)?);
            w.write_all(b"t_s,bytes\n")?;
            for i in 0..=last {
                let ms = i as u64 * BUCKET_MS;
                writeln!(w, "{}.{:03},{}", ms / 1000, ms % 1000, self.bucket_bytes(i))?;
            }
            w.into_inner().map_err(|e| e.into_error())?.sync_all()?;
            std::fs::rename(&tmp, path)
        };
        write().map_err(|source| ReceivedError { path: path.to_path_buf(), source })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_read_at_t_goes_to_floor_t_over_the_bucket() {
        let ms = Duration::from_millis;
        let table: [(Duration, usize); 9] = [
            (Duration::ZERO, 0),
            (Duration::from_nanos(1), 0),
            (ms(99), 0),
            (Duration::from_nanos(99_999_999), 0),
            (ms(100), 1),
            (ms(250), 2),
            (Duration::from_secs(20), 200),
            (ms(BUCKET_MS) * (MAX_BUCKETS as u32 - 1), MAX_BUCKETS - 1),
            (Duration::from_secs(10 * 86_400 * 365), MAX_BUCKETS - 1),
        ];
        for (offset, want) in table {
            assert_eq!(bucket_index(offset), want, "{offset:?}");
        }
    }

    #[test]
    fn counts_land_in_their_buckets_and_the_file_is_dense() {
        let start = Instant::now();
        let r = ReceivedBytes::new(start);
        let ms = Duration::from_millis;
        r.add(start + ms(50), 10);
        r.add(start + ms(99), 5);
        r.add(start + ms(350), 7);
        r.add(start + ms(350), 0);
        // Past the first chunk: a second one is allocated.
        r.add(start + ms(BUCKET_MS) * CHUNK_BUCKETS as u32 + ms(1), 3);
        // Before the start: the first bucket.
        r.add(start.checked_sub(ms(5)).unwrap_or(start), 1);
        assert_eq!((r.bucket_bytes(0), r.bucket_bytes(1), r.bucket_bytes(3)), (16, 0, 7));
        assert_eq!(r.bucket_bytes(CHUNK_BUCKETS), 3);
        assert_eq!(r.total_bytes(), 26);

        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("received.csv");
        r.write_csv(&path, start + ms(420)).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[..5], ["t_s,bytes", "0.000,16", "0.100,0", "0.200,0", "0.300,7"]);
        // Up to the bucket with the last bytes, since it is after `end`.
        assert_eq!(lines.len(), 1 + CHUNK_BUCKETS + 1);
        assert_eq!(*lines.last().unwrap(), "409.600,3");
        assert!(!dir.path().join("received.csv.tmp").exists());
    }

    #[test]
    fn an_idle_run_still_covers_its_length() {
        let start = Instant::now();
        let r = ReceivedBytes::new(start);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("received.csv");
        r.write_csv(&path, start + Duration::from_millis(250)).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "t_s,bytes\n0.000,0\n0.100,0\n0.200,0\n");
    }
}
