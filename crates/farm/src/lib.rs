//! shortfirst-farm: HAProxy configured for size-aware dispatch over a farm of
//! shortfirst servers.
//!
//! [`docroot`] lists the files a farm serves with their sizes (bounded);
//! [`haproxy`] turns them and the hosts into an HAProxy map (URL path → backend by
//! size interval) and configurations (SITA through the map, plain round robin,
//! `leastconn`), as text, pure; [`write_atomically`] puts a file in place whole.
//! The cutoffs come from `shortfirst_core::dispatch` (given, or SITA-E from the
//! sizes weighted by requests).
//!
//! Must not know: how HAProxy is started or reloaded (the operator's), policies.

pub mod docroot;
pub mod haproxy;

use std::io::Write;
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
}

/// Writes `bytes` to `path` through a temporary file beside it, synced, then renamed
/// over `path`: a reader (HAProxy at reload) sees the old file or the new one, whole.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), WriteError> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    let result = write_then_rename(&tmp, path, bytes);
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

fn write_then_rename(tmp: &Path, path: &Path, bytes: &[u8]) -> Result<(), WriteError> {
    let io = |p: &Path| {
        let p = p.to_path_buf();
        move |source| WriteError::Io { path: p, source }
    };
    let mut f = std::fs::File::create(tmp).map_err(io(tmp))?;
    f.write_all(bytes).map_err(io(tmp))?;
    f.sync_all().map_err(io(tmp))?;
    std::fs::rename(tmp, path).map_err(io(path))
}
