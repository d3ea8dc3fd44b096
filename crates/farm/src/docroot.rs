//! The files under a document root, with their sizes and the URL paths that reach
//! them (what `shortfirst serve` answers: a directory's `index.html` also at `dir/`).
//!
//! Symbolic links are skipped (counted): the server refuses those that leave the
//! root, and the map must not send a path to a host by a size it never serves.
//! Bounded: at most `max_files` files, beyond which the scan fails with a clear
//! error; directories nest at most [`MAX_DEPTH`] deep.

use std::path::{Path, PathBuf};

use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};

/// Deepest directory nesting scanned.
pub const MAX_DEPTH: usize = 64;

/// Characters left as they are in a URL path: RFC 3986's unreserved, the sub-delims
/// a path may hold, `:`, `@` and `/`. Everything else is percent-encoded, as clients send it.
const PATH_KEEP: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~')
    .remove(b'/')
    .remove(b'!')
    .remove(b'$')
    .remove(b'&')
    .remove(b'\'')
    .remove(b'(')
    .remove(b')')
    .remove(b'*')
    .remove(b'+')
    .remove(b',')
    .remove(b';')
    .remove(b'=')
    .remove(b':')
    .remove(b'@');

#[derive(Debug, thiserror::Error)]
pub enum DocrootError {
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("{root}: more than {limit} files (the map's bound; raise it or serve fewer files)")]
    TooManyFiles { root: PathBuf, limit: usize },
    #[error("{path}: nested deeper than {MAX_DEPTH} directories")]
    TooDeep { path: PathBuf },
    #[error("{path}: the name is not UTF-8 (no URL path to map)")]
    NotUtf8 { path: PathBuf },
}

/// One URL path and the size of the body it returns.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Entry {
    /// Percent-encoded, starting with `/`.
    pub url_path: String,
    pub size_bytes: u64,
}

/// What a scan found.
#[derive(Debug, Default, PartialEq)]
pub struct Scan {
    /// Sorted by URL path.
    pub entries: Vec<Entry>,
    /// Regular files found (an index also reached at its directory counts once).
    pub files: usize,
    pub skipped_symlinks: usize,
}

/// Lists the regular files under `root` (at most `max_files`).
pub fn scan(root: &Path, max_files: usize) -> Result<Scan, DocrootError> {
    let mut scan = Scan::default();
    let mut stack: Vec<(PathBuf, String, usize)> = vec![(root.to_path_buf(), String::from("/"), 0)];
    while let Some((dir, prefix, depth)) = stack.pop() {
        if depth > MAX_DEPTH {
            return Err(DocrootError::TooDeep { path: dir });
        }
        let io = |p: &Path| {
            let p = p.to_path_buf();
            move |source| DocrootError::Io { path: p, source }
        };
        for item in std::fs::read_dir(&dir).map_err(io(&dir))? {
            let item = item.map_err(io(&dir))?;
            let path = item.path();
            let kind = item.file_type().map_err(io(&path))?;
            let name = item.file_name().into_string().map_err(|_| DocrootError::NotUtf8 { path: path.clone() })?;
            let url = format!("{prefix}{}", utf8_percent_encode(&name, PATH_KEEP));
            if kind.is_symlink() {
                scan.skipped_symlinks += 1;
            } else if kind.is_dir() {
                stack.push((path, format!("{url}/"), depth + 1));
            } else if kind.is_file() {
                if scan.files >= max_files {
                    return Err(DocrootError::TooManyFiles { root: root.to_path_buf(), limit: max_files });
                }
                scan.files += 1;
                let size_bytes = item.metadata().map_err(io(&path))?.len();
                if name == "index.html" {
                    scan.entries.push(Entry { url_path: prefix.clone(), size_bytes });
                }
                scan.entries.push(Entry { url_path: url, size_bytes });
            }
        }
    }
    scan.entries.sort();
    Ok(scan)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_files_with_encoded_paths() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("a/b c")).unwrap();
        std::fs::write(root.join("index.html"), b"hello").unwrap();
        std::fs::write(root.join("a/one.bin"), vec![0u8; 1000]).unwrap();
        std::fs::write(root.join("a/b c/x%y.txt"), b"12").unwrap();
        std::os::unix::fs::symlink(root.join("a/one.bin"), root.join("link.bin")).unwrap();
        let s = scan(root, 10).unwrap();
        let got: Vec<(&str, u64)> = s.entries.iter().map(|e| (e.url_path.as_str(), e.size_bytes)).collect();
        assert_eq!(got, [("/", 5), ("/a/b%20c/x%25y.txt", 2), ("/a/one.bin", 1000), ("/index.html", 5)]);
        assert_eq!((s.files, s.skipped_symlinks), (3, 1));
        assert!(matches!(scan(root, 2), Err(DocrootError::TooManyFiles { limit: 2, .. })));
        assert!(matches!(scan(&root.join("missing"), 10), Err(DocrootError::Io { .. })));
    }
}
