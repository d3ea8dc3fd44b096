//! Request target → open file under the root, safe by construction.
//!
//! Two layers, each sufficient alone against `..`:
//! 1. [`normalize`] percent-decodes each segment and removes dot segments; a
//!    decoded `/` or NUL, bad escapes, or a `..` that would climb above the root
//!    are refused before any file system call.
//! 2. The open itself is `openat2(root_fd, path, RESOLVE_BENEATH |
//!    RESOLVE_NO_MAGICLINKS)`: the kernel refuses any resolution, symlinks
//!    included, that leaves the root directory (EXDEV). With
//!    `follow-symlinks-outside-root` the flag is dropped (layer 1 still holds).
//!    On kernels without `openat2` (before 5.6) the file is opened with
//!    `openat` and its real path, read back from `/proc/self/fd`, must lie
//!    under the canonical root.
//!
//! Files are opened `O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK` (a FIFO never
//! blocks the worker); only regular files are served. A regular file named without a
//! trailing slash is kept open by the worker thread ([`crate::filecache`]) and used again
//! while an `fstatat` of its name finds it unchanged; otherwise each request costs one
//! `openat2` and one `fstat`, as nginx without `open_file_cache`.
//!
//! And `O_NOATIME` where the kernel allows it (the files' owner, or `CAP_FOWNER`):
//! under `relatime` the first read of a file since it was written updates its
//! access time, a journalled inode write, and `sendfile` makes it on the worker
//! thread; on a disk busy with other writers that write waited for the journal
//! and stalled every connection for 20-30 s. The first `EPERM` that a retry
//! without the flag cures turns it off for the process (one warning), so an
//! unprivileged server over other users' files pays one extra `open`, once.

use std::ffi::CStr;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use crate::config::Dotfiles;
use crate::filecache;

/// Why a target cannot be served.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// Malformed target: bad escape, NUL, encoded slash, climbing above the root (400).
    BadRequest,
    /// Outside the root, not a regular file, or no permission (403).
    Forbidden,
    NotFound,
    /// Unexpected I/O error (500).
    Internal,
}

/// The result of resolving a target.
#[derive(Debug)]
pub enum Resolved {
    /// `index`: the file is the directory's `index.html`. Shared with the thread's
    /// [`crate::filecache`] and other responses of the same file.
    File { file: Arc<File>, meta: std::fs::Metadata, index: bool },
    /// A directory named without its trailing slash: redirect to add it.
    AddSlash,
    /// A directory (named with its slash) without `index.html`: 403, or its listing.
    Directory { dir: File },
}

/// Percent-decodes `target_path` (starting with `/`, no query) into `out` as a
/// root-relative path without leading slash, dot segments removed, NUL-terminated.
/// Returns whether the target ended with a slash.
pub fn normalize(target_path: &[u8], out: &mut Vec<u8>) -> Result<bool, Refusal> {
    out.clear();
    if target_path.first() != Some(&b'/') {
        return Err(Refusal::BadRequest);
    }
    let trailing_slash = target_path.ends_with(b"/");
    for raw in target_path[1..].split(|&b| b == b'/') {
        let seg_start = out.len();
        if seg_start > 0 {
            out.push(b'/');
        }
        let decoded_start = out.len();
        let mut i = 0;
        while i < raw.len() {
            let b = raw[i];
            if b == b'%' {
                let hi = raw.get(i + 1).and_then(|&c| hex(c));
                let lo = raw.get(i + 2).and_then(|&c| hex(c));
                let (Some(hi), Some(lo)) = (hi, lo) else { return Err(Refusal::BadRequest) };
                let d = hi << 4 | lo;
                if d == b'/' || d == 0 {
                    return Err(Refusal::BadRequest);
                }
                out.push(d);
                i += 3;
            } else if b == 0 {
                // httparse already refuses raw NUL in a target; this keeps the
                // guarantee on the function itself.
                return Err(Refusal::BadRequest);
            } else {
                out.push(b);
                i += 1;
            }
        }
        match &out[decoded_start..] {
            b"" | b"." => out.truncate(seg_start),
            b".." => {
                out.truncate(seg_start);
                if out.is_empty() {
                    return Err(Refusal::BadRequest); // would climb above the root
                }
                let parent = out.iter().rposition(|&b| b == b'/').unwrap_or(0);
                out.truncate(parent);
            }
            _ => {}
        }
    }
    Ok(trailing_slash)
}

/// Refuses a normalised path naming a dotfile, as `policy` says (see
/// [`Dotfiles`]). Runs on the decoded path, so `%2e` spellings are caught too.
pub fn check_dotfiles(rel: &[u8], policy: Dotfiles) -> Result<(), Refusal> {
    let refusal = match policy {
        Dotfiles::Allow => return Ok(()),
        Dotfiles::Ignore => Refusal::NotFound,
        Dotfiles::Deny => Refusal::Forbidden,
    };
    let mut segments = rel.split(|&b| b == b'/');
    let first = segments.next().unwrap_or(b"");
    let first_hidden = first.starts_with(b".") && first != b".well-known";
    if first_hidden || segments.any(|seg| seg.starts_with(b".")) {
        Err(refusal)
    } else {
        Ok(())
    }
}

fn hex(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

/// Tells roots apart in the thread's kept files (a root opened again by a reload is new).
static NEXT_ROOT_ID: AtomicU64 = AtomicU64::new(0);

/// The served directory, held open.
pub struct Root {
    fd: OwnedFd,
    /// This root among those opened in the process ([`crate::filecache`]'s keys).
    id: u64,
    canonical: PathBuf,
    confine: bool,
    have_openat2: bool,
    /// Whether `O_NOATIME` is still tried (off after the kernel refused it once).
    noatime: AtomicBool,
}

impl Root {
    /// Opens `path` (must be a directory). `confine`: refuse symlinks leading out.
    pub fn open(path: &Path, confine: bool) -> io::Result<Root> {
        let canonical = path.canonicalize()?;
        let dir = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_DIRECTORY).open(&canonical)?;
        let fd = OwnedFd::from(dir);
        let have_openat2 = probe_openat2(&fd);
        if !have_openat2 {
            tracing::warn!("openat2 unavailable: confining paths by checking /proc/self/fd after open");
        }
        let id = NEXT_ROOT_ID.fetch_add(1, Ordering::Relaxed);
        Ok(Root { fd, id, canonical, confine, have_openat2, noatime: AtomicBool::new(true) })
    }

    pub fn path(&self) -> &Path {
        &self.canonical
    }

    /// Resolves a normalised path (from [`normalize`]); `scratch` is reused for
    /// the NUL-terminated name.
    pub fn resolve(&self, rel: &[u8], trailing_slash: bool, scratch: &mut Vec<u8>) -> Result<Resolved, Refusal> {
        scratch.clear();
        if rel.is_empty() {
            scratch.push(b'.');
        } else {
            scratch.extend_from_slice(rel);
        }
        let dir_len = scratch.len();
        scratch.push(0);
        let name = CStr::from_bytes_with_nul(scratch).map_err(|_| Refusal::BadRequest)?;
        if !trailing_slash {
            if let Some((file, meta)) = filecache::get(self.id, &self.fd, name) {
                return Ok(Resolved::File { file, meta, index: false });
            }
        }
        let file = self.open_rel(scratch)?;
        let meta = file.metadata().map_err(|_| Refusal::Internal)?;
        if meta.is_file() {
            if trailing_slash {
                return Err(Refusal::NotFound);
            }
            let file = Arc::new(file);
            filecache::put(self.id, name, &file, &meta);
            return Ok(Resolved::File { file, meta, index: false });
        }
        if !meta.is_dir() {
            return Err(Refusal::Forbidden); // FIFOs, sockets, devices
        }
        if !trailing_slash && !rel.is_empty() {
            return Ok(Resolved::AddSlash);
        }
        scratch.truncate(dir_len);
        scratch.extend_from_slice(b"/index.html\0");
        let dir = file;
        let file = match self.open_rel(scratch) {
            Err(Refusal::NotFound) => return Ok(Resolved::Directory { dir }),
            opened => opened?,
        };
        let meta = file.metadata().map_err(|_| Refusal::Internal)?;
        if meta.is_file() {
            Ok(Resolved::File { file: Arc::new(file), meta, index: true })
        } else {
            Err(Refusal::Forbidden)
        }
    }

    /// The sidecar `suffix` (`.gz`) of the file [`Root::resolve`] found for `rel` (`index`:
    /// the directory's `index.html`): a regular file, opened as files are but always confined
    /// to the root, whatever `follow-symlinks-outside-root` says. `None`: there is none to use.
    pub fn sidecar(
        &self,
        rel: &[u8],
        index: bool,
        suffix: &[u8],
        scratch: &mut Vec<u8>,
    ) -> Option<(File, std::fs::Metadata)> {
        scratch.clear();
        scratch.extend_from_slice(rel);
        if index {
            if !rel.is_empty() {
                scratch.push(b'/');
            }
            scratch.extend_from_slice(b"index.html");
        }
        scratch.extend_from_slice(suffix);
        scratch.push(0);
        let file = self.open_rel_as(scratch, true).ok()?;
        let meta = file.metadata().ok()?;
        meta.is_file().then_some((file, meta))
    }

    fn open_rel(&self, name_nul: &[u8]) -> Result<File, Refusal> {
        self.open_rel_as(name_nul, self.confine)
    }

    /// Opens a NUL-terminated root-relative name; `confine`: refuse symlinks leading out.
    fn open_rel_as(&self, name_nul: &[u8], confine: bool) -> Result<File, Refusal> {
        let name = CStr::from_bytes_with_nul(name_nul).map_err(|_| Refusal::BadRequest)?;
        let flags = libc::O_RDONLY | libc::O_CLOEXEC | libc::O_NOCTTY | libc::O_NONBLOCK;
        if self.noatime.load(Ordering::Relaxed) {
            match self.open_with(name, flags | libc::O_NOATIME, confine) {
                Err(e) if e.raw_os_error() == Some(libc::EPERM) => {
                    let plain = self.open_with(name, flags, confine);
                    if plain.is_ok() && self.noatime.swap(false, Ordering::Relaxed) {
                        tracing::warn!(
                            "O_NOATIME refused (not the files' owner, no CAP_FOWNER): reads may write access times"
                        );
                    }
                    return plain.map_err(open_refusal);
                }
                result => return result.map_err(open_refusal),
            }
        }
        self.open_with(name, flags, confine).map_err(open_refusal)
    }

    /// The metadata of what a NUL-terminated normalised path names, under the same
    /// confinement as [`Root::resolve`] (a symlink leaving the root is refused). Opened
    /// `O_PATH`: a FIFO or a device is looked at, never really opened.
    pub fn metadata(&self, rel_nul: &[u8]) -> Result<std::fs::Metadata, Refusal> {
        let name = CStr::from_bytes_with_nul(rel_nul).map_err(|_| Refusal::BadRequest)?;
        let file = self.open_with(name, libc::O_PATH | libc::O_CLOEXEC, self.confine).map_err(open_refusal)?;
        file.metadata().map_err(|_| Refusal::Internal)
    }

    /// Whether files are opened with `O_NOATIME` (for tests and the startup log).
    pub fn noatime(&self) -> bool {
        self.noatime.load(Ordering::Relaxed)
    }

    fn open_with(&self, name: &CStr, flags: i32, confine: bool) -> io::Result<File> {
        if self.have_openat2 {
            let resolve = if confine { libc::RESOLVE_BENEATH | libc::RESOLVE_NO_MAGICLINKS } else { 0 };
            openat2(&self.fd, name, flags, resolve)
        } else {
            openat(&self.fd, name, flags).and_then(|f| {
                if confine && !self.contains(&f) {
                    Err(io::Error::from_raw_os_error(libc::EXDEV))
                } else {
                    Ok(f)
                }
            })
        }
    }

    /// Fallback confinement: the opened file's real path lies under the root.
    fn contains(&self, file: &File) -> bool {
        let link = format!("/proc/self/fd/{}", file.as_raw_fd());
        match std::fs::read_link(link) {
            Ok(real) => real == self.canonical || real.starts_with(&self.canonical),
            Err(_) => false,
        }
    }
}

fn open_refusal(e: io::Error) -> Refusal {
    match e.raw_os_error() {
        Some(libc::ENOENT | libc::ENOTDIR | libc::ENAMETOOLONG) => Refusal::NotFound,
        Some(libc::EXDEV | libc::ELOOP | libc::EACCES | libc::EPERM | libc::ENXIO) => Refusal::Forbidden,
        _ => {
            tracing::warn!(error = %e, "open failed");
            Refusal::Internal
        }
    }
}

fn openat2(dir: &OwnedFd, name: &CStr, flags: i32, resolve: u64) -> io::Result<File> {
    // SAFETY: open_how is plain integers; all-zero is its documented default.
    let mut how: libc::open_how = unsafe { std::mem::zeroed() };
    how.flags = flags as u64;
    how.resolve = resolve;
    loop {
        // SAFETY: `dir` is an open directory, `name` NUL-terminated, `how` a valid
        // open_how whose size we pass; on success the kernel returns a new fd we own.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_openat2,
                dir.as_raw_fd(),
                name.as_ptr(),
                &how as *const libc::open_how,
                std::mem::size_of::<libc::open_how>(),
            )
        };
        if fd >= 0 {
            // SAFETY: a fresh fd from the kernel, owned by nobody else.
            return Ok(unsafe { File::from_raw_fd(fd as i32) });
        }
        let err = io::Error::last_os_error();
        // EAGAIN: a concurrent rename raced the RESOLVE_BENEATH walk; retry.
        if !matches!(err.raw_os_error(), Some(libc::EINTR | libc::EAGAIN)) {
            return Err(err);
        }
    }
}

fn openat(dir: &OwnedFd, name: &CStr, flags: i32) -> io::Result<File> {
    // SAFETY: as for openat2.
    let fd = unsafe { libc::openat(dir.as_raw_fd(), name.as_ptr(), flags) };
    if fd >= 0 {
        // SAFETY: a fresh fd from the kernel.
        Ok(unsafe { File::from_raw_fd(fd) })
    } else {
        Err(io::Error::last_os_error())
    }
}

fn probe_openat2(dir: &OwnedFd) -> bool {
    let dot = c".";
    !matches!(
        openat2(dir, dot, libc::O_RDONLY | libc::O_CLOEXEC, libc::RESOLVE_BENEATH),
        Err(e) if e.raw_os_error() == Some(libc::ENOSYS)
    )
}

/// For logs and tests: a normalised path as text.
pub fn display_rel(rel: &[u8]) -> String {
    String::from_utf8_lossy(rel).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalize_table() {
        let ok: &[(&str, &str, bool)] = &[
            ("/", "", true),
            ("/a", "a", false),
            ("/a/", "a", true),
            ("//a//b", "a/b", false),
            ("/a/./b", "a/b", false),
            ("/a/../b", "b", false),
            ("/a/b/..", "a", false),
            ("/a/%2e%2E/b", "b", false),
            ("/%61%20b", "a b", false),
            ("/a/.../b", "a/.../b", false),
            ("/..a", "..a", false),
            ("/a\\..\\b", "a\\..\\b", false),
        ];
        let mut out = Vec::new();
        for (target, want, slash) in ok {
            assert_eq!(normalize(target.as_bytes(), &mut out), Ok(*slash), "{target}");
            assert_eq!(display_rel(&out), *want, "{target}");
        }
        let refused = [
            "/..",
            "/../etc/passwd",
            "/a/../../etc/passwd",
            "/%2e%2e/etc/passwd",
            "/%2E%2E%2Fetc",
            "/a%2fb",
            "/a%00b",
            "/a\0b",
            "/a%zz",
            "/a%2",
            "relative",
            "",
            "/./..",
        ];
        for target in refused {
            assert_eq!(normalize(target.as_bytes(), &mut out), Err(Refusal::BadRequest), "{target}");
        }
    }

    #[test]
    fn dotfiles_table() {
        use Dotfiles::*;
        let cases: &[(&str, Dotfiles, Result<(), Refusal>)] = &[
            ("/.git/config", Ignore, Err(Refusal::NotFound)),
            ("/.git/config", Deny, Err(Refusal::Forbidden)),
            ("/.git/config", Allow, Ok(())),
            ("/.env", Ignore, Err(Refusal::NotFound)),
            ("/a/.htpasswd", Ignore, Err(Refusal::NotFound)),
            ("/a/%2egit/HEAD", Ignore, Err(Refusal::NotFound)),
            ("/a/b/../.hidden", Deny, Err(Refusal::Forbidden)),
            ("/.well-known/acme-challenge/x", Ignore, Ok(())),
            ("/.well-known/.secret", Ignore, Err(Refusal::NotFound)),
            ("/a/.well-known/x", Ignore, Err(Refusal::NotFound)),
            ("/a.b/c.d", Ignore, Ok(())),
            ("/a/./b", Ignore, Ok(())),
            ("/", Ignore, Ok(())),
        ];
        let mut out = Vec::new();
        for (target, policy, want) in cases {
            normalize(target.as_bytes(), &mut out).unwrap();
            assert_eq!(check_dotfiles(&out, *policy), *want, "{target} {policy:?}");
        }
    }

    /// A file read through the root keeps its access time: without `O_NOATIME` the
    /// read below writes it (relatime: the access time is not after the modification).
    #[test]
    fn reads_through_the_root_do_not_write_access_times() {
        use std::io::Read;
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.bin");
        std::fs::write(&path, b"abc").unwrap();
        let old = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
        let f = File::options().write(true).open(&path).unwrap();
        f.set_times(std::fs::FileTimes::new().set_accessed(old).set_modified(old + std::time::Duration::from_secs(60)))
            .unwrap();
        drop(f);
        let before = std::fs::metadata(&path).unwrap();
        let root = Root::open(dir.path(), true).unwrap();
        let mut scratch = Vec::new();
        let Ok(Resolved::File { file, .. }) = root.resolve(b"a.bin", false, &mut scratch) else {
            panic!("a.bin did not resolve to a file");
        };
        let mut buf = [0u8; 8];
        assert_eq!((&*file).read(&mut buf).unwrap(), 3);
        assert!(root.noatime(), "the test's own file: the owner may use O_NOATIME");
        let after = std::fs::metadata(&path).unwrap();
        assert_eq!((after.atime(), after.atime_nsec()), (before.atime(), before.atime_nsec()));
    }

    mod properties {
        use super::*;
        use proptest::prelude::*;

        proptest! {
            /// Whatever the input, an accepted path has no `..`, `.` or empty segment,
            /// no NUL and no leading slash: it cannot name anything above the root.
            #[test]
            fn normalized_paths_stay_inside(segments in proptest::collection::vec(
                prop_oneof![Just("..".to_string()), Just(".".to_string()), Just("%2e%2e".to_string()),
                            Just("%2E.".to_string()), Just(String::new()), "[a-z%./]{0,6}"], 0..8)) {
                let target = format!("/{}", segments.join("/"));
                let mut out = Vec::new();
                if normalize(target.as_bytes(), &mut out).is_ok() {
                    prop_assert!(!out.starts_with(b"/"));
                    prop_assert!(!out.contains(&0));
                    for seg in out.split(|&b| b == b'/') {
                        prop_assert!(seg != b".." && seg != b"." && !seg.is_empty() || out.is_empty(), "{target} -> {:?}", display_rel(&out));
                    }
                }
            }
        }
    }
}
