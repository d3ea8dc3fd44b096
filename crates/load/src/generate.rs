//! Writing a generated workload to disk: `DIR/docroot/` (one real file per
//! workload file) and `DIR/trace.csv`.
//!
//! Files are zero-filled and sparse (`set_len`), so a docroot of gigabytes
//! costs no disk blocks, yet every byte is served as real content. The total
//! size is bounded by `max_total_bytes` (checked before anything is written).
//! Both outputs are built under temporary names in `DIR` and renamed into
//! place at the end; an existing docroot or trace is replaced only with
//! `force`.

use crate::trace::TraceRecord;
use crate::workload::{file_path, FileSet, Requests, WorkloadSpec};
use std::fs::{self, File};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

/// Default bound on the docroot's total (apparent) size: 16 GiB.
pub const DEFAULT_MAX_TOTAL_BYTES: u64 = 16 << 30;

/// Writing the workload failed.
#[derive(Debug, thiserror::Error)]
pub enum GenerateError {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("{0}")]
    Refused(String),
}

fn io_at(path: &Path) -> impl FnOnce(io::Error) -> GenerateError + '_ {
    move |source| GenerateError::Io { path: path.to_path_buf(), source }
}

/// What was written.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Generated {
    pub docroot: PathBuf,
    pub trace: PathBuf,
    pub files: usize,
    pub docroot_bytes: u64,
    pub requests: u64,
}

/// Writes one CSV trace row. Paths must not contain `,` or newlines (ours never do).
pub fn write_trace_row<W: Write>(w: &mut W, r: &TraceRecord) -> io::Result<()> {
    match r.client {
        Some(c) => writeln!(w, "{:.6},{},{},{}", r.time_s, r.path, r.size_bytes, c),
        None => writeln!(w, "{:.6},{},{}", r.time_s, r.path, r.size_bytes),
    }
}

/// Generates `out/docroot` and `out/trace.csv`.
pub fn generate(
    spec: &WorkloadSpec,
    out: &Path,
    max_total_bytes: u64,
    force: bool,
) -> Result<Generated, GenerateError> {
    let files = FileSet::new(spec);
    let total = files.total_bytes();
    if total > max_total_bytes {
        return Err(GenerateError::Refused(format!(
            "the docroot would hold {total} bytes, more than the limit of {max_total_bytes} \
             (raise --max-total-bytes, lower --files or cap sizes with --max-bytes)"
        )));
    }
    let docroot = out.join("docroot");
    let trace = out.join("trace.csv");
    if !force {
        for p in [&docroot, &trace] {
            if p.exists() {
                return Err(GenerateError::Refused(format!(
                    "{} already exists (use --force to replace it)",
                    p.display()
                )));
            }
        }
    }
    fs::create_dir_all(out).map_err(io_at(out))?;
    let pid = std::process::id();
    let tmp_root = out.join(format!(".docroot.tmp-{pid}"));
    let tmp_trace = out.join(format!(".trace.csv.tmp-{pid}"));
    let result = (|| {
        if tmp_root.exists() {
            fs::remove_dir_all(&tmp_root).map_err(io_at(&tmp_root))?;
        }
        let fdir = tmp_root.join("f");
        fs::create_dir_all(&fdir).map_err(io_at(&fdir))?;
        for i in 0..files.len() {
            let p = tmp_root.join(&file_path(i)[1..]);
            let f = File::create(&p).map_err(io_at(&p))?;
            f.set_len(files.size_bytes(i)).map_err(io_at(&p))?;
        }
        let f = File::create(&tmp_trace).map_err(io_at(&tmp_trace))?;
        let mut w = BufWriter::with_capacity(1 << 16, f);
        writeln!(w, "time_s,path,size_bytes").map_err(io_at(&tmp_trace))?;
        for r in Requests::new(spec, &files) {
            write_trace_row(&mut w, &r).map_err(io_at(&tmp_trace))?;
        }
        let f = w.into_inner().map_err(|e| io_at(&tmp_trace)(e.into_error()))?;
        f.sync_all().map_err(io_at(&tmp_trace))?;
        if docroot.exists() {
            fs::remove_dir_all(&docroot).map_err(io_at(&docroot))?;
        }
        fs::rename(&tmp_root, &docroot).map_err(io_at(&docroot))?;
        fs::rename(&tmp_trace, &trace).map_err(io_at(&trace))?;
        Ok(())
    })();
    if result.is_err() {
        let _ = fs::remove_dir_all(&tmp_root);
        let _ = fs::remove_file(&tmp_trace);
    }
    result?;
    Ok(Generated { docroot, trace, files: files.len(), docroot_bytes: total, requests: spec.requests })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::SizeStats;
    use crate::trace;

    #[test]
    fn writes_docroot_and_trace_that_agree() {
        let dir = tempfile::tempdir().unwrap();
        let spec = WorkloadSpec::new("wc98like", None, 300, 5000, 100.0, 11).unwrap();
        let g = generate(&spec, dir.path(), DEFAULT_MAX_TOTAL_BYTES, false).unwrap();
        assert_eq!(g.files, 300);
        let mut n = 0;
        for r in trace::open(&g.trace, None).unwrap() {
            let r = r.unwrap();
            let len = fs::metadata(g.docroot.join(&r.path[1..])).unwrap().len();
            assert_eq!(len, r.size_bytes, "{}", r.path);
            n += 1;
        }
        assert_eq!(n, 5000);
        // No temporary leftovers; second run refused without --force.
        let names: Vec<_> = fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names.len(), 2, "{names:?}");
        let e = generate(&spec, dir.path(), DEFAULT_MAX_TOTAL_BYTES, false).unwrap_err();
        assert!(e.to_string().contains("--force"));
        generate(&spec, dir.path(), DEFAULT_MAX_TOTAL_BYTES, true).unwrap();
    }

    #[test]
    fn refuses_oversized_docroot() {
        let dir = tempfile::tempdir().unwrap();
        let spec = WorkloadSpec::new("fixed:1000", None, 10, 1, 1.0, 1).unwrap();
        let e = generate(&spec, dir.path(), 9_999, false).unwrap_err();
        assert!(e.to_string().contains("10000 bytes"), "{e}");
        assert_eq!(fs::read_dir(dir.path()).map(|d| d.count()).unwrap_or(0), 0);
    }

    /// The wc98like workload meets the published WC98 statistics (brief §2.1)
    /// as measured by `workload stats`.
    #[test]
    fn wc98like_meets_published_statistics() {
        let spec = WorkloadSpec::new("wc98like", None, 5000, 200_000, 1000.0, 1).unwrap();
        let files = FileSet::new(&spec);
        let mut s = SizeStats::new();
        for r in Requests::new(&spec, &files) {
            s.add(r.size_bytes, r.time_s).unwrap();
        }
        let r = s.report().unwrap();
        assert!(r.min_bytes >= 41 && r.min_bytes < 200, "min {}", r.min_bytes);
        assert!(r.max_bytes <= 2_000_000 && r.max_bytes > 500_000, "max {}", r.max_bytes);
        assert!((3_500.0..7_000.0).contains(&r.mean_bytes), "mean {}", r.mean_bytes);
        assert!(r.median_bytes < 1024, "median {}", r.median_bytes);
        assert!(r.p90_bytes < 9_300, "p90 {}", r.p90_bytes);
        assert!(r.top3pct_bytes_share > 0.5, "top 3% {}", r.top3pct_bytes_share);
        let alpha = r.tail_alpha_hill.unwrap();
        assert!((0.9..1.5).contains(&alpha), "alpha {alpha}");
    }
}
